//! What a number in a statement is, for the fact guard (`facts`, `docs/semantics.md`,
//! "Slots"): any token with a digit or a number word is a number; one that *identifies* (a
//! ticket, issue, order, build, error, version or line number, an id, a hash, a code) names
//! one thing among many and is never a slot's new value (issue #54, D9). Pure functions of
//! the words; no state.

/// Numbers written as words: as much a label as a digit ("Fresh memory one" / "two").
const NUMBER_WORDS: &[&str] = &[
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve", "twenty", "hundred", "thousand", "first", "second", "third", "fourth",
    "fifth",
];

/// Whether the (lowercased) word is a number: it holds a digit, or is a number word.
pub(crate) fn is_number(w: &str) -> bool {
    w.chars().any(|c| c.is_ascii_digit()) || NUMBER_WORDS.contains(&w)
}

/// Words after which a number names one thing among many, never a quantity that changes:
/// "ticket 12", "issue 776", "order 5521", "build 42", "error 503", "version 3", "line 88".
#[rustfmt::skip]
const IDENTIFIER_NOUNS: &[&str] = &[
    "ticket", "tickets", "issue", "issues", "bug", "bugs", "pr", "mr", "order", "orders",
    "build", "builds", "error", "errors", "errno", "code", "codes", "version", "versions", "v",
    "id", "ids", "no", "case", "incident", "incidents", "invoice", "job", "run", "task",
    "tasks", "item", "request", "commit", "hash", "ref", "reference", "release", "rfc", "cve",
    "sku", "serial", "account", "patch", "revision", "rev", "line", "section", "chapter",
    "page", "row", "test", "step", "episode", "season", "exception", "status", "pid", "uid",
    "pull", "changeset", "number",
];

/// Units and ordinals glued to a quantity ("8gb", "30s", "5k", "2nd"): a quantity, not a code.
const QUANTITY_SUFFIXES: &[&str] = &[
    "st", "nd", "rd", "th", "s", "k", "m", "gb", "mb", "kb", "ms", "x", "h", "px", "pm", "am", "%",
];

/// Whether `word` (lowercased), right after `before`, is a number that names a thing rather
/// than a quantity: it follows one of `IDENTIFIER_NOUNS`, or mixes letters and digits the way
/// ids, hashes and codes do ("a3f9c21", "jira-123", "e42"), or is a run of 7 or more hex
/// digits.
pub(crate) fn identifies(before: Option<&str>, word: &str) -> bool {
    if !is_number(word) {
        return false;
    }
    let before = before.map(|p| p.trim_end_matches(['#', ':', '.']));
    if before.is_some_and(|p| IDENTIFIER_NOUNS.contains(&p)) {
        return true;
    }
    let t = word.trim_start_matches('#');
    let letters = t.chars().filter(char::is_ascii_alphabetic).count();
    let digits = t.chars().filter(char::is_ascii_digit).count();
    let hex_run = t.len() >= 7 && t.chars().all(|c| c.is_ascii_hexdigit());
    let quantity = QUANTITY_SUFFIXES.iter().any(|u| {
        t.strip_suffix(u)
            .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit() || c == '.'))
    });
    (letters > 0 && digits > 0 && !quantity) || hex_run
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_hashes_and_codes_identify_and_quantities_do_not() {
        for (before, word) in [
            (Some("ticket"), "12"),
            (Some("error"), "503"),
            (Some("build:"), "42"),
            (None, "a3f9c21"),
            (None, "jira-123"),
            (None, "deadbeef42"),
        ] {
            assert!(identifies(before, word), "{before:?} {word}");
        }
        for (before, word) in [
            (Some("port"), "8080"),
            (None, "34"),
            (None, "8gb"),
            (None, "2nd"),
            (None, "3.11"),
            (Some("ticket"), "open"),
        ] {
            assert!(!identifies(before, word), "{before:?} {word}");
        }
    }
}
