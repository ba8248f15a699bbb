//! Every command of the line protocol, and every MCP tool: one table, one handler each.
//!
//! The server is a thin layer over the library: a handler takes its arguments out of the
//! request ([`Args`]), calls one library operation and returns its result shape as JSON.
//! `docs/protocol.md` is this table written out. MCP tools are the same handlers under their
//! lowercase names (vector-memory-mcp's names, `docs/protocol.md`).
//!
//! Tenancy: a connection authenticated with a user-bound token ([`Session::user`]) gets its
//! own user when a request names none, `forbidden` when it names another, and `not_found` for
//! a memory id of another user (whether such an id exists is not revealed).

mod admin;
mod common;
mod entities;
mod items;
mod memory;
mod requests;
mod search;
mod tags;

use common::*;
pub use common::{Class, Command, Ctx, Session};

fn ping(_: &Ctx, _: &Session, _: NoArgs) -> Outcome {
    Ok(json!({"reply": "PONG"}))
}

arguments! {
    /// HELP.
    struct Help {
        command: Option<String> = opt("command", Ty::Str, "a command name"),
    }
}

arguments! {
    /// AUTH (the connection runs it).
    pub struct Auth {
        token: String = req("token", Ty::Str, "the shared secret, or a user-bound token"),
    }
}

fn help(_: &Ctx, _: &Session, a: Help) -> Outcome {
    if let Some(name) = a.command {
        let c = find(&name).ok_or_else(|| unknown(&name))?;
        return Ok(c.help());
    }
    let commands: Vec<Value> = COMMANDS
        .iter()
        .map(|c| json!({"command": c.name, "alias": c.alias, "summary": c.summary}))
        .collect();
    Ok(json!({
        "commands": commands,
        "usage": "COMMAND {\"arg\": value, ...}  one per line; HELP {\"command\": \"SEARCH\"} lists a command's arguments; docs/protocol.md has it all",
    }))
}

/// `unknown_command`, with the close names.
pub fn unknown(name: &str) -> Fail {
    let close = close_to(name);
    let mut f = Fail::new(
        Code::UnknownCommand,
        if close.is_empty() {
            format!("no command {name:?}; HELP lists them")
        } else {
            format!(
                "no command {name:?}; did you mean {}? HELP lists them",
                close.join(" or ")
            )
        },
    );
    f.body.insert("did_you_mean".into(), json!(close));
    f
}

/// The server's own commands: PING, HELP, and AUTH and QUIT (which the connection runs).
static SERVER: &[Command] = &[
    Command {
        name: "PING",
        alias: None,
        tool: false,
        class: Class::Open,
        summary: "Replies PONG.",
        args: NoArgs::ARGS,
        reply: &[field("reply", Str)],
        run: Some(|c, s, a| ping(c, s, NoArgs::parse(a)?)),
    },
    Command {
        name: "HELP",
        alias: None,
        tool: false,
        class: Class::Open,
        summary: "Lists the commands, or one command's arguments.",
        args: Help::ARGS,
        reply: &[
            field("commands", Array).maybe(),
            field("usage", Str).maybe(),
            field("command", Str).maybe(),
            field("alias", Str).or_null().maybe(),
            field("summary", Str).maybe(),
            field("class", Str).maybe(),
            field("arguments", Array).maybe(),
        ],
        run: Some(|c, s, a| help(c, s, Help::parse(a)?)),
    },
    Command {
        name: "AUTH",
        alias: None,
        tool: false,
        class: Class::Connection,
        summary: "Authenticates the connection: AUTH <token> or AUTH {\"token\": ...}.",
        args: Auth::ARGS,
        reply: &[
            field("reply", Str),
            field("message", Str).maybe(),
            field("user_id", Str).or_null().maybe(),
            field("read_only", Bool).maybe(),
        ],
        run: None,
    },
    Command {
        name: "QUIT",
        alias: None,
        tool: false,
        class: Class::Connection,
        summary: "Closes the connection after the reply.",
        args: NoArgs::ARGS,
        reply: &[field("reply", Str)],
        run: None,
    },
];

/// Looks a command up by name or alias, case-insensitively.
#[must_use]
pub fn find(name: &str) -> Option<&'static Command> {
    COMMANDS.iter().copied().find(|c| {
        c.name.eq_ignore_ascii_case(name) || c.alias.is_some_and(|a| a.eq_ignore_ascii_case(name))
    })
}

/// Commands whose name is close to `name` (for `unknown_command` replies).
#[must_use]
pub fn close_to(name: &str) -> Vec<&'static str> {
    let upper = name.to_ascii_uppercase();
    let mut close: Vec<&str> = COMMANDS
        .iter()
        .filter(|c| {
            let n = c.name;
            (upper.len() >= 3 && (n.contains(&upper) || upper.contains(n)))
                || edit_distance(n, &upper) <= 2
                || c.alias.is_some_and(|a| edit_distance(a, &upper) <= 2)
        })
        .map(|c| c.name)
        .collect();
    close.truncate(5);
    close
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            cur.push(
                (prev[j] + usize::from(ca != *cb))
                    .min(prev[j + 1] + 1)
                    .min(cur[j] + 1),
            );
        }
        prev = cur;
    }
    prev[b.len()]
}

/// Runs a command's handler (not AUTH / QUIT) with its arguments.
///
/// # Errors
/// The command's failure; `unauthorized` before AUTH.
pub fn run(ctx: &Ctx, session: &Session, command: &Command, args: Map<String, Value>) -> Outcome {
    if !session.authed && command.class.needs_auth() {
        return Err(Fail::new(
            Code::Unauthorized,
            "this server needs a token first (AUTH <token>, or Authorization: Bearer over HTTP)",
        ));
    }
    if session.read_only && command.class.writes() {
        return Err(Fail::new(
            Code::Forbidden,
            format!(
                "{} changes the store; this token is read-only",
                command.name
            ),
        ));
    }
    let Some(handler) = command.run else {
        return Err(Fail::new(
            Code::BadRequest,
            format!(
                "{} is answered by the connection, not run as a tool",
                command.name
            ),
        ));
    };
    // A write's request id (docs/protocol.md, "Request ids") is every write's argument, and
    // its fingerprint is of everything else the request says.
    let mut args = args;
    let request = if command.class.writes() {
        requests::take(&mut args)?.map(|id| {
            (
                id,
                requests::fingerprint(command.name, session.user.as_deref(), &args),
            )
        })
    } else {
        None
    };
    // Every argument is checked (unknown names and JSON types) before the handler runs, and
    // each handler takes all of its arguments before its one library call: an error reply
    // means nothing changed (docs/protocol.md, "Errors").
    let mut args = Args::checked(args, command.args)?;
    // A user-bound connection runs every command on a store scoped to its user: the library
    // refuses another user's name and does not find another user's records.
    let scoped;
    let ctx = match &session.user {
        Some(user) => {
            scoped = Ctx {
                store: ctx.store.scoped(user)?,
                metrics: Arc::clone(&ctx.metrics),
            };
            &scoped
        }
        None => ctx,
    };
    // A write's reply says where it was made (`crate::route`), before a request id keeps it.
    let writes = command.class.writes();
    let mut run = |on: &Ctx| {
        let mut reply = handler(on, session, &mut args)?;
        if writes {
            mark_position(&mut reply, &on.store);
        }
        Ok(reply)
    };
    match request {
        Some((id, fingerprint)) => requests::run_once(ctx, id, fingerprint, run),
        None => run(ctx),
    }
}

/// Every command, in HELP's order: the server's own, then by domain.
pub static COMMANDS: std::sync::LazyLock<Vec<&'static Command>> = std::sync::LazyLock::new(|| {
    [
        SERVER,
        admin::TABLE,
        memory::TABLE,
        search::TABLE,
        tags::TABLE,
        entities::TABLE,
        items::TABLE,
    ]
    .iter()
    .flat_map(|t| t.iter())
    .collect()
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_memfuse_envelope_follows_http_codes_and_names_the_field() {
        let missing = search::envelope(&Err(EngineError::EntityNotFound {
            field: "session_id",
            id: "s9".into(),
        }));
        assert_eq!(
            (&missing["status"], &missing["code"]),
            (&json!("error"), &json!(404))
        );
        assert_eq!(missing["errors"][0]["field"], "session_id");
        assert!(missing["data"].is_null());
        let bad = search::envelope(&Err(EngineError::Invalid {
            field: "top_k",
            reason: "too many".into(),
        }));
        assert_eq!(
            (&bad["code"], &bad["errors"][0]["field"]),
            (&json!(422), &json!("top_k"))
        );
        let ok = search::envelope(&Ok(QueryData {
            results: Vec::new(),
            total: 0,
            scored_by: amberdb::ScoredBy::Strategy,
        }));
        assert_eq!(
            (&ok["status"], &ok["code"]),
            (&json!("success"), &json!(200))
        );
        assert_eq!(ok["data"]["total"], 0);
        assert!(ok["errors"].is_null());
    }

    #[test]
    fn a_library_result_gains_success_and_a_message_in_the_server() {
        let reply = to_reply(&json!({"memory_id": 3}), "Memory stored".into()).unwrap();
        assert_eq!(
            reply,
            json!({"memory_id": 3, "success": true, "message": "Memory stored"})
        );
    }

    #[test]
    fn names_and_aliases_are_unique_and_found_case_insensitively() {
        let mut seen = std::collections::HashSet::new();
        for c in COMMANDS.iter() {
            assert!(seen.insert(c.name), "{}", c.name);
            if let Some(a) = c.alias {
                assert!(seen.insert(a), "{a}");
            }
            assert!(std::ptr::eq(
                find(&c.name.to_ascii_lowercase()).unwrap(),
                *c
            ));
            let mut names = std::collections::HashSet::new();
            for a in c.args {
                assert!(names.insert(a.name), "{} repeats {}", c.name, a.name);
            }
        }
        assert_eq!(find("search").unwrap().name, "SEARCH_MEMORIES");
        assert!(find("SERACH").is_none());
        assert!(close_to("SERACH").contains(&"SEARCH_MEMORIES"));
    }
}
