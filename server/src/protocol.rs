//! The line protocol's framing: `[@TAG ]COMMAND[ JSON-OBJECT]` in, one JSON object out
//! (`docs/protocol.md`, "Framing"). No I/O here; the connection loop (`server.rs`) cuts lines
//! and this module turns each into a request or a `bad_request`.

use crate::args::{Code, Fail};
use serde_json::{Map, Value};

/// Longest request tag.
pub const MAX_TAG_CHARS: usize = 64;

/// A parsed line.
#[derive(Debug, PartialEq)]
pub struct Request {
    /// `@TAG`, echoed in the reply.
    pub tag: Option<String>,
    /// The command as typed.
    pub command: String,
    /// Its arguments (empty when none).
    pub args: Map<String, Value>,
}

/// Splits a trimmed, non-empty line into its `@TAG` (not yet checked), its command word and
/// the rest (trimmed).
fn split_head(text: &str) -> (Option<&str>, &str, &str) {
    let (tag, rest) = match text.strip_prefix('@') {
        Some(tagged) => {
            let (tag, rest) = tagged
                .split_once(char::is_whitespace)
                .unwrap_or((tagged, ""));
            (Some(tag), rest.trim_start())
        }
        None => (None, text),
    };
    let (command, rest) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    (tag, command, rest.trim())
}

/// The command word of a line, as `parse` reads it, without parsing its arguments: `None`
/// for a blank line or one that is not text.
#[must_use]
pub fn command_word(line: &[u8]) -> Option<&str> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let text = std::str::from_utf8(line).ok()?.trim();
    (!text.is_empty()).then(|| split_head(text).1)
}

/// Parses one line (without its `\n`). `Ok(None)` for a blank line, which gets no reply.
///
/// # Errors
/// `bad_request` (with the tag, when the line had a valid one) for binary data, a bad tag,
/// or arguments that are not one JSON object.
pub fn parse(line: &[u8]) -> Result<Option<Request>, (Option<String>, Fail)> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let Ok(text) = std::str::from_utf8(line) else {
        return Err((
            None,
            Fail::new(
                Code::BadRequest,
                "the line is not UTF-8 text (binary data?): send COMMAND {json} lines; HELP lists the commands",
            ),
        ));
    };
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    let (tag, command, rest) = split_head(text);
    let tag = match tag {
        Some(tag)
            if tag.is_empty()
                || tag.chars().count() > MAX_TAG_CHARS
                || !tag
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_.:-".contains(c)) =>
        {
            return Err((
                None,
                Fail::new(
                    Code::BadRequest,
                    "a tag is @ and 1..=64 characters of A-Z a-z 0-9 _ . : -",
                ),
            ));
        }
        tag => tag.map(str::to_owned),
    };
    if command.is_empty() {
        return Err((
            tag,
            Fail::new(Code::BadRequest, "a tag needs a command after it"),
        ));
    }
    if command.starts_with('{') || command.starts_with('[') || command.starts_with('"') {
        return Err((
            tag,
            Fail::new(
                Code::BadRequest,
                "a line starts with a command: e.g. SEARCH {\"query\": \"...\"}; HELP lists them",
            ),
        ));
    }
    let args = if rest.is_empty() {
        Map::new()
    } else if rest.starts_with('{') {
        match serde_json::from_str::<Map<String, Value>>(rest) {
            Ok(map) => map,
            Err(e) => {
                return Err((
                    tag,
                    Fail::new(
                        Code::BadRequest,
                        format!("the arguments are not valid JSON: {e}"),
                    ),
                ));
            }
        }
    } else if let Some(field) = bare_argument(command) {
        // `AUTH secret`, `HELP search`: one bare word for commands a person types.
        let mut map = Map::new();
        map.insert(field.into(), Value::String(rest.to_owned()));
        map
    } else {
        return Err((
            tag,
            Fail::new(
                Code::BadRequest,
                format!(
                    "the arguments of {command} must be one JSON object, e.g. {{\"memory_id\": 1}}"
                ),
            ),
        ));
    };
    Ok(Some(Request {
        tag,
        command: command.to_owned(),
        args,
    }))
}

/// The argument a bare word stands for, for the commands that take one.
fn bare_argument(command: &str) -> Option<&'static str> {
    if command.eq_ignore_ascii_case("AUTH") {
        Some("token")
    } else if command.eq_ignore_ascii_case("HELP") {
        Some("command")
    } else {
        None
    }
}

/// Appends one reply line: `{"ok": ..., "tag": ..., <body>}\n`, with `ok` (and the tag) first
/// so a person reading replies sees them at once.
pub fn write_reply(out: &mut Vec<u8>, ok: bool, tag: Option<&str>, body: Value) {
    let mut body = match body {
        Value::Object(fields) => fields,
        other => {
            let mut m = Map::new();
            m.insert("result".into(), other);
            m
        }
    };
    body.remove("ok");
    body.remove("tag");
    out.extend_from_slice(if ok {
        b"{\"ok\":true"
    } else {
        b"{\"ok\":false"
    });
    if let Some(tag) = tag {
        out.extend_from_slice(b",\"tag\":");
        // A tag is checked ASCII ([A-Za-z0-9_.:-]); serializing a string cannot fail.
        let _ = serde_json::to_writer(&mut *out, tag);
    }
    let start = out.len();
    // serde_json escapes control characters, so the reply stays one line.
    match serde_json::to_writer(&mut *out, &body) {
        Ok(()) if body.is_empty() => {
            out.truncate(start);
            out.push(b'}');
        }
        Ok(()) => out[start] = b',',
        Err(_) => {
            out.truncate(start);
            out.extend_from_slice(br#","code":"internal","message":"reply encoding failed"}"#);
        }
    }
    out.push(b'\n');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn req(line: &str) -> Request {
        parse(line.as_bytes()).unwrap().unwrap()
    }

    #[test]
    fn lines_parse_into_tag_command_and_arguments() {
        assert_eq!(req("PING").command, "PING");
        assert_eq!(req("ping\r").command, "ping");
        let r = req("@a.1 SEARCH {\"query\": \"x y\"}");
        assert_eq!(r.tag.as_deref(), Some("a.1"));
        assert_eq!(r.args["query"], "x y");
        assert_eq!(req("AUTH s3cret word").args["token"], "s3cret word");
        assert_eq!(parse(b"   ").unwrap(), None);
    }

    #[test]
    fn bad_lines_are_bad_requests_with_their_tag() {
        for bad in [
            &b"\xff\xfe\x00garbage"[..],
            b"SEARCH {\"query\": ",
            b"SEARCH [1,2]",
            b"GET 42",
            b"{\"query\": 1}",
            b"@ PING",
            b"@bad/tag PING",
        ] {
            let (_, f) = parse(bad).unwrap_err();
            assert_eq!(f.code, Code::BadRequest, "{}", String::from_utf8_lossy(bad));
        }
        let (tag, _) = parse(b"@t1 SEARCH {oops}").unwrap_err();
        assert_eq!(tag.as_deref(), Some("t1"));
    }

    #[test]
    fn a_reply_is_one_line_of_json() {
        let mut out = Vec::new();
        write_reply(
            &mut out,
            true,
            Some("t"),
            json!({"content": "two\nlines", "ok": "ignored"}),
        );
        assert_eq!(out.iter().filter(|b| **b == b'\n').count(), 1);
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v, json!({"ok": true, "tag": "t", "content": "two\nlines"}));
        assert!(out.starts_with(br#"{"ok":true,"tag":"t","#));
        let mut out = Vec::new();
        write_reply(&mut out, false, None, json!({}));
        assert_eq!(out, b"{\"ok\":false}\n");
    }
}
