//! Tag validation and semantic normalization (`docs/semantics.md`, "Tags"): pure functions of
//! the tag text and similarities, so the guard table can be tested with similarities fed in.

use super::Calibration;
use crate::error::{EngineError, Result};
use crate::kernel::record::MAX_TAG_CHARS;
use std::collections::BTreeSet;

// The similarities a merge needs are the embedder's (`Calibration::tag_similarity`,
// `tag_related`, `tag_substring_boost`, `number_guard_override`; MiniLM's 0.90, 0.85, 0.03
// and 0.95).

/// Shortest word the substring boost accepts.
pub const TAG_SUBSTRING_MIN_LENGTH: usize = 4;
/// Words the substring boost never accepts.
pub const TAG_SUBSTRING_STOP_WORDS: &[&str] = &[
    "api", "ui", "db", "test", "auth", "infra", "ci", "cd", "app", "lib", "sdk", "cli", "gui",
    "web", "sql", "orm", "log", "cfg", "env", "dev", "prod", "stg",
];
/// Prefixes a `prefix:value` tag may have.
pub const COLON_PREFIXES: &[&str] = &[
    "type",
    "domain",
    "strict",
    "cognitive",
    "batch",
    "module",
    "vendor",
    "priority",
    "scope",
    "layer",
];

/// Validates one tag (`docs/semantics.md`, "Tags": with errors where the peer drops or truncates) and returns
/// its stored form: trimmed, lowercase, single spaces, `prefix:suffix` rebuilt.
///
/// # Errors
/// `Invalid` naming the rule, or `LimitExceeded` for a tag over 100 characters.
pub fn validate_tag(raw: &str) -> Result<String> {
    let trimmed = raw.trim();
    let invalid = |reason: String| EngineError::Invalid {
        field: "tags",
        reason,
    };
    if trimmed.is_empty() {
        return Err(invalid("a tag must not be empty".into()));
    }
    let chars = trimmed.chars().count();
    if chars > MAX_TAG_CHARS {
        return Err(EngineError::LimitExceeded {
            what: "tag length (characters)",
            limit: MAX_TAG_CHARS,
            got: chars,
        });
    }
    let lower = trimmed.to_lowercase();
    let collapsed = lower.split_whitespace().collect::<Vec<_>>().join(" ");
    if let Some(bad) = collapsed
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || "-_ .:".contains(*c)))
    {
        return Err(invalid(format!(
            "tag {raw:?} has {bad:?}; tags may use only a-z, 0-9, '-', '_', ' ', '.' and ':'"
        )));
    }
    let Some((prefix, suffix)) = collapsed.split_once(':') else {
        return Ok(collapsed);
    };
    let (prefix, suffix) = (prefix.trim(), suffix.trim());
    if !COLON_PREFIXES.contains(&prefix) {
        return Err(invalid(format!(
            "tag {raw:?} has prefix {prefix:?}; a prefix must be one of {COLON_PREFIXES:?}"
        )));
    }
    if suffix.is_empty() {
        return Err(invalid(format!("tag {raw:?} has nothing after its prefix")));
    }
    Ok(format!("{prefix}:{suffix}"))
}

/// A tag as the merge decision sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagForm {
    /// The embedding form (what is embedded and compared).
    pub embedding: String,
    /// Its version, normalized (`2` → `2.0`), if it has one.
    pub version: Option<String>,
    /// Every number in it, normalized, glued to letters or not.
    pub numbers: BTreeSet<String>,
    /// The part before `:`, if the tag has one.
    pub prefix: Option<String>,
    /// The part after `:`.
    pub suffix: Option<String>,
}

fn dashes_to_spaces(s: &str) -> String {
    s.to_lowercase()
        .chars()
        .map(|c| if c == '-' || c == '_' { ' ' } else { c })
        .collect()
}

/// The embedding form: lowercase, `-`/`_` runs to a space, `version`/`ver` to `v`, `v2` to
/// `v 2`, whitespace collapsed.
#[must_use]
pub fn embedding_form(tag: &str) -> String {
    let spaced = dashes_to_spaces(tag);
    let words: Vec<String> = spaced
        .split_whitespace()
        .map(|w| match w {
            "version" | "ver" => "v".to_owned(),
            _ => match w.strip_prefix('v') {
                Some(rest) if rest.starts_with(|c: char| c.is_ascii_digit()) => {
                    format!("v {rest}")
                }
                _ => w.to_owned(),
            },
        })
        .collect();
    words.join(" ")
}

/// `1.02` → `1.2`, `2` → `2.0`.
fn normalize_number(n: &str) -> String {
    let parts: Vec<String> = n
        .split('.')
        .map(|p| {
            let t = p.trim_start_matches('0');
            if t.is_empty() { "0" } else { t }.to_owned()
        })
        .collect();
    if parts.len() == 1 {
        format!("{}.0", parts.concat())
    } else {
        parts.join(".")
    }
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The version number starting at byte `at` of `s` (`\d+(\.\d+)*`), if any.
fn number_at(s: &str, at: usize, dotted_parts: Option<usize>) -> Option<&str> {
    let rest = s.get(at..)?;
    let mut end = 0;
    let mut parts = 0;
    let bytes = rest.as_bytes();
    loop {
        let digits = bytes
            .get(end..)?
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count();
        if digits == 0 {
            break;
        }
        end += digits;
        parts += 1;
        let more = dotted_parts.is_none_or(|max| parts < max);
        if more
            && bytes.get(end) == Some(&b'.')
            && bytes.get(end + 1).is_some_and(u8::is_ascii_digit)
        {
            end += 1;
        } else {
            break;
        }
    }
    (end > 0).then(|| rest.get(..end)).flatten()
}

/// The version of a tag: the first match of `\bv\s*N`, `\bversion\s+N`, `\bver\s+N`,
/// `\bapi\s+N`, normalized.
#[must_use]
pub fn version_of(tag: &str) -> Option<String> {
    let s = dashes_to_spaces(tag);
    for (word, needs_space) in [
        ("v", false),
        ("version", true),
        ("ver", true),
        ("api", true),
    ] {
        for (at, _) in s.match_indices(word) {
            let boundary = s[..at].chars().next_back().is_none_or(|c| !is_word_char(c));
            if !boundary {
                continue;
            }
            let after = at + word.len();
            let spaces = s[after..].chars().take_while(|c| c.is_whitespace()).count();
            if needs_space && spaces == 0 {
                continue;
            }
            if let Some(n) = number_at(&s, after + spaces, None) {
                return Some(normalize_number(n));
            }
        }
    }
    None
}

/// Every number in a tag (`\d+(\.\d+)?`), *including digits glued to letters*: `php7` has 7.
#[must_use]
pub fn numbers_of(tag: &str) -> BTreeSet<String> {
    let s = tag.to_lowercase();
    let mut out = BTreeSet::new();
    let mut i = 0;
    while i < s.len() {
        let starts = s.as_bytes().get(i).is_some_and(u8::is_ascii_digit)
            && (i == 0 || !s.as_bytes().get(i - 1).is_some_and(u8::is_ascii_digit));
        if starts && let Some(n) = number_at(&s, i, Some(2)) {
            out.insert(normalize_number(n));
            i += n.len();
        } else {
            i += 1;
        }
    }
    out
}

impl TagForm {
    /// The form of a validated tag.
    #[must_use]
    pub fn of(tag: &str) -> TagForm {
        let (prefix, suffix) = match tag.split_once(':') {
            Some((p, s)) => (Some(p.trim().to_owned()), Some(s.trim().to_owned())),
            None => (None, None),
        };
        TagForm {
            embedding: embedding_form(tag),
            version: version_of(tag),
            numbers: numbers_of(tag),
            prefix,
            suffix,
        }
    }

    fn words(&self) -> BTreeSet<&str> {
        self.embedding.split_whitespace().collect()
    }
}

/// Why the merge decision came out as it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TagDecision {
    /// Merge (the similarity, after any boost, passed the threshold and no guard fired).
    Merge,
    /// Both have versions and they differ.
    VersionGuard,
    /// Same prefix, different suffix.
    ColonGuard,
    /// Exactly one of the two has a prefix.
    AsymmetryGuard,
    /// Below the threshold.
    BelowThreshold,
    /// Different numbers and similarity under 0.95.
    NumberGuard,
}

/// The similarity after the substring boost, if it applies.
#[must_use]
pub fn boosted(a: &TagForm, b: &TagForm, sim: f32, boost: f32) -> f32 {
    let plain = |t: &TagForm| t.version.is_none() && t.prefix.is_none() && t.numbers.is_empty();
    if !(plain(a) && plain(b)) {
        return sim;
    }
    let (wa, wb) = (a.words(), b.words());
    let smaller = if wa.len() < wb.len() && wa.is_subset(&wb) {
        wa
    } else if wb.len() < wa.len() && wb.is_subset(&wa) {
        wb
    } else {
        return sim;
    };
    // The longest word of the smaller set (ties: the first in order), so the choice is
    // deterministic where the peer's is arbitrary.
    let word = smaller
        .iter()
        .copied()
        .fold("", |best, w| if w.len() > best.len() { w } else { best });
    if word.chars().count() >= TAG_SUBSTRING_MIN_LENGTH && !TAG_SUBSTRING_STOP_WORDS.contains(&word)
    {
        (sim + boost).min(1.0)
    } else {
        sim
    }
}

/// The merge decision (`docs/semantics.md`, "Tags") for tags `a` and `b` at similarity `sim`.
#[must_use]
pub fn decide(a: &TagForm, b: &TagForm, sim: f32, c: &Calibration) -> TagDecision {
    if let (Some(va), Some(vb)) = (&a.version, &b.version)
        && va != vb
    {
        return TagDecision::VersionGuard;
    }
    match (&a.prefix, &b.prefix) {
        (Some(pa), Some(pb)) if pa == pb && a.suffix != b.suffix => {
            return TagDecision::ColonGuard;
        }
        (Some(_), None) | (None, Some(_)) => return TagDecision::AsymmetryGuard,
        _ => {}
    }
    let sim = boosted(a, b, sim, c.tag_substring_boost);
    let same_version = a.version.is_some() && a.version == b.version;
    let threshold = if same_version {
        c.tag_related
    } else {
        c.tag_similarity
    };
    if sim < threshold {
        return TagDecision::BelowThreshold;
    }
    if a.version.is_none()
        && b.version.is_none()
        && !a.numbers.is_empty()
        && !b.numbers.is_empty()
        && a.numbers != b.numbers
        && sim < c.number_guard_override
    {
        return TagDecision::NumberGuard;
    }
    TagDecision::Merge
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(a: &str, b: &str, sim: f32) -> TagDecision {
        decide(&TagForm::of(a), &TagForm::of(b), sim, &Calibration::MINILM)
    }

    #[test]
    fn the_peer_decision_table() {
        use TagDecision::*;
        // `docs/semantics.md`, "Tags": the decisions of the peer's functions, row by row.
        assert_eq!(d("api v1", "api v2", 0.99), VersionGuard);
        assert_eq!(d("api v2", "api version 2", 0.86), Merge);
        assert_eq!(d("api v2", "api version 2", 0.84), BelowThreshold);
        assert_eq!(d("api v2.0", "api 2", 0.86), Merge);
        assert_eq!(d("type:refactor", "type:bug", 0.99), ColonGuard);
        assert_eq!(d("type:refactor", "refactor", 0.99), AsymmetryGuard);
        assert_eq!(d("scope:api", "layer:api", 0.95), Merge);
        assert_eq!(d("php 7", "php 8", 0.94), NumberGuard);
        assert_eq!(d("php 7", "php 8", 0.96), Merge);
        // The peer merges this row (no number found in glued tokens); the seed says php7 ≠ php8.
        assert_eq!(d("php7", "php8", 0.91), NumberGuard);
        assert_eq!(d("laravel", "laravel framework", 0.870), Merge);
        assert_eq!(d("laravel", "laravel framework", 0.869), BelowThreshold);
        assert_eq!(d("api", "api gateway", 0.88), BelowThreshold);
        assert_eq!(d("auth", "auth flow", 0.89), BelowThreshold);
        assert_eq!(d("docker", "kubernetes", 0.90), Merge);
    }

    #[test]
    fn more_cases_for_every_guard() {
        use TagDecision::*;
        // Version guard: the number forms all normalize; equal versions are not guarded.
        assert_eq!(d("v01.02", "v1.2", 0.5), BelowThreshold);
        assert_eq!(d("api_version_2", "API v2.0", 0.86), Merge);
        assert_eq!(d("ver 3", "v 4", 0.999), VersionGuard);
        // One side versioned, the other not: no version guard, plain threshold.
        assert_eq!(d("api v2", "api", 0.89), BelowThreshold);
        // Colon: same prefix same suffix merges; different prefixes are not guarded.
        assert_eq!(d("type:bug", "type:bug", 1.0), Merge);
        assert_eq!(d("scope:api", "layer:web", 0.80), BelowThreshold);
        assert_eq!(d("refactor", "type:refactor", 0.99), AsymmetryGuard);
        // Number guard: numbers glued or spaced, decimals; same numbers are not guarded.
        assert_eq!(d("oauth2", "oauth1", 0.94), NumberGuard);
        assert_eq!(d("python 3.11", "python 3.12", 0.94), NumberGuard);
        assert_eq!(d("python 3.11", "python3.11", 0.91), Merge);
        assert_eq!(d("laravel-10", "laravel 10", 0.92), Merge);
        assert_eq!(d("es2015", "es6", 0.949), NumberGuard);
        assert_eq!(d("es2015", "es6", 0.95), Merge);
        // Boost: needs a strict subset, a word of >= 4 characters, not a stop word, and no
        // number, version or colon anywhere.
        assert_eq!(d("react", "react native", 0.871), Merge);
        assert_eq!(d("react native", "react", 0.871), Merge);
        assert_eq!(d("test", "test runner", 0.89), BelowThreshold);
        assert_eq!(d("vue", "vue router", 0.89), BelowThreshold);
        assert_eq!(d("react 18", "react 18 hooks", 0.89), BelowThreshold);
        assert_eq!(d("laravel", "laravel", 0.89), BelowThreshold);
        // Boost is capped at 1.
        assert!(
            (boosted(
                &TagForm::of("kafka"),
                &TagForm::of("kafka streams"),
                0.99,
                0.03
            ) - 1.0)
                .abs()
                < 1e-6
        );
    }

    #[test]
    fn forms_versions_and_numbers_match_the_peer_table() {
        // `docs/semantics.md`, "Tags": embedding forms, versions and numbers.
        let rows: &[(&str, &str, Option<&str>, &[&str])] = &[
            ("API v2.0", "api v 2.0", Some("2.0"), &["2.0"]),
            ("api_version_2", "api v 2", Some("2.0"), &["2.0"]),
            ("Ver 3", "v 3", Some("3.0"), &["3.0"]),
            ("laravel-10", "laravel 10", None, &["10.0"]),
            ("python 3.11", "python 3.11", None, &["3.11"]),
            ("v01.02", "v 01.02", Some("1.2"), &["1.2"]),
            ("php7", "php7", None, &["7.0"]),
            ("version2", "version2", None, &["2.0"]),
        ];
        for (input, form, version, numbers) in rows {
            assert_eq!(embedding_form(input), *form, "{input}");
            assert_eq!(version_of(input).as_deref(), *version, "{input}");
            let want: BTreeSet<String> = numbers.iter().map(|s| (*s).to_owned()).collect();
            assert_eq!(numbers_of(input), want, "{input}");
        }
        assert_eq!(version_of("api 2").as_deref(), Some("2.0"));
        assert_eq!(version_of("dev2"), None);
    }

    #[test]
    fn validation_errors_instead_of_drops() {
        assert_eq!(validate_tag("  Type : Refactor ").unwrap(), "type:refactor");
        assert_eq!(validate_tag("Rust   Async").unwrap(), "rust async");
        assert_eq!(validate_tag("node.js").unwrap(), "node.js");
        let err = validate_tag("c++").unwrap_err().to_string();
        assert!(err.contains("'+'") && err.contains("a-z"), "{err}");
        assert!(validate_tag("café").is_err());
        assert!(validate_tag("a/b").is_err());
        let err = validate_tag("foo:bar").unwrap_err().to_string();
        assert!(err.contains("\"foo\"") && err.contains("layer"), "{err}");
        assert!(validate_tag("type:").is_err());
        assert!(validate_tag("   ").is_err());
        assert!(matches!(
            validate_tag(&"x".repeat(101)),
            Err(EngineError::LimitExceeded {
                limit: 100,
                got: 101,
                ..
            })
        ));
        assert_eq!(validate_tag(&"x".repeat(100)).unwrap().len(), 100);
    }
}
