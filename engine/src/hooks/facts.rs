//! The fact guard of semantic dedup (`docs/semantics.md`, "Dedup at store time", step 4): at a
//! cosine distance of 0.35 the model also pairs sentences that differ in the one word that
//! matters. A lexical comparison of the two texts' content words decides whether a pair is a
//! duplicate, two distinct facts, or a newer statement that contradicts an older one.

use std::collections::BTreeSet;

/// How a newer text relates to an older one the vector search paired it with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Relation {
    /// The same fact: merge.
    Duplicate,
    /// Different facts (another number or name): keep both.
    Distinct,
    /// The newer says the opposite (a negation, an antonym) or restates the same slot with one
    /// word replaced, which may be a new value (`blue` → `red`) or a synonym (`likes` →
    /// `loves`): the newer supersedes the older, which stays in lineage. Either reading loses
    /// nothing.
    Updates,
}

const STOP_WORDS: &[&str] = &[
    "a",
    "an",
    "the",
    "is",
    "are",
    "was",
    "were",
    "be",
    "been",
    "being",
    "am",
    "to",
    "of",
    "in",
    "on",
    "at",
    "for",
    "with",
    "by",
    "from",
    "as",
    "and",
    "or",
    "but",
    "it",
    "its",
    "this",
    "that",
    "these",
    "those",
    "they",
    "them",
    "their",
    "he",
    "she",
    "his",
    "her",
    "we",
    "our",
    "you",
    "your",
    "i",
    "my",
    "me",
    "has",
    "have",
    "had",
    "do",
    "does",
    "did",
    "so",
    "very",
    "s",
    "usually",
    "especially",
    "really",
    "also",
    "just",
    "which",
    "who",
    "what",
];

const NEGATIONS: &[&str] = &[
    "not", "no", "never", "without", "cannot", "nor", "none", "nobody", "nothing", "neither",
];

/// Pairs of words that state opposite things; either order.
const ANTONYMS: &[(&str, &str)] = &[
    ("like", "dislike"),
    ("likes", "dislikes"),
    ("love", "hate"),
    ("loves", "hates"),
    ("prefer", "avoid"),
    ("prefers", "avoids"),
    ("enable", "disable"),
    ("enabled", "disabled"),
    ("always", "never"),
    ("true", "false"),
    ("yes", "no"),
    ("allow", "deny"),
    ("allowed", "denied"),
    ("accept", "reject"),
    ("include", "exclude"),
    ("dark", "light"),
    ("on", "off"),
    ("before", "after"),
    ("increase", "decrease"),
    ("up", "down"),
    ("open", "closed"),
    ("public", "private"),
    ("sync", "async"),
    ("synchronous", "asynchronous"),
    ("safe", "unsafe"),
    ("valid", "invalid"),
    ("success", "failure"),
    ("pass", "fail"),
    ("passes", "fails"),
    ("works", "broken"),
    ("start", "stop"),
    ("min", "max"),
    ("minimum", "maximum"),
    ("more", "less"),
    ("faster", "slower"),
    ("better", "worse"),
    ("required", "optional"),
    ("mandatory", "optional"),
];

/// Word tokens of `text`: `(lowercased, capitalized_mid_sentence)`. A contraction ending in
/// `n't` yields the word `not` as well.
fn tokens(text: &str) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    let mut sentence_start = true;
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut Vec<(String, bool)>, start: &mut bool| {
        if word.is_empty() {
            return;
        }
        let name = !*start && word.chars().next().is_some_and(char::is_uppercase);
        let lower = word.to_lowercase();
        if let Some(stem) = lower.strip_suffix("n't") {
            out.push((stem.to_owned(), false));
            out.push(("not".to_owned(), false));
        } else {
            out.push((lower, name));
        }
        word.clear();
        *start = false;
    };
    for c in text.chars() {
        if c.is_alphanumeric() || c == '\'' || c == '’' || (c == '.' && !word.is_empty()) {
            word.push(if c == '’' { '\'' } else { c });
        } else {
            // A trailing dot ended a sentence, not a number like 3.11.
            let ends_sentence = word.ends_with('.');
            let trimmed = word.trim_end_matches('.').trim_matches('\'').to_owned();
            word = trimmed;
            flush(&mut word, &mut out, &mut sentence_start);
            if ends_sentence || matches!(c, '!' | '?' | '\n') {
                sentence_start = true;
            }
        }
    }
    word = word.trim_end_matches('.').trim_matches('\'').to_owned();
    flush(&mut word, &mut out, &mut sentence_start);
    out
}

/// Content words: tokens minus stop words, possessive `'s` removed.
#[must_use]
pub fn content_words(text: &str) -> BTreeSet<String> {
    tokens(text)
        .into_iter()
        .map(|(w, _)| w.trim_end_matches("'s").to_owned())
        .filter(|w| !w.is_empty() && !STOP_WORDS.contains(&w.as_str()))
        .collect()
}

fn names(text: &str) -> BTreeSet<String> {
    tokens(text)
        .into_iter()
        .filter(|(_, name)| *name)
        .map(|(w, _)| w.trim_end_matches("'s").to_owned())
        .collect()
}

/// The first word, if capitalized and not a stop word.
fn initial(text: &str) -> Option<String> {
    let first = text.split_whitespace().next()?;
    let word: String = first.chars().take_while(|c| c.is_alphanumeric()).collect();
    let lower = word.to_lowercase();
    (word.chars().next().is_some_and(char::is_uppercase) && !STOP_WORDS.contains(&lower.as_str()))
        .then_some(lower)
}

fn is_number(w: &str) -> bool {
    w.chars().any(|c| c.is_ascii_digit())
}

fn negated(words: &BTreeSet<String>) -> bool {
    words
        .iter()
        .filter(|w| NEGATIONS.contains(&w.as_str()))
        .count()
        % 2
        == 1
}

/// How `newer` relates to `older` (the vector search already paired them).
#[must_use]
pub fn relation(older: &str, newer: &str) -> Relation {
    // Negations are stop-word-free content, so take them from the full token lists.
    let all = |t: &str| -> BTreeSet<String> { tokens(t).into_iter().map(|(w, _)| w).collect() };
    let (ao, an) = (all(older), all(newer));
    let (co, cn) = (content_words(older), content_words(newer));
    let only_old: BTreeSet<&String> = co.difference(&cn).collect();
    let only_new: BTreeSet<&String> = cn.difference(&co).collect();
    if only_old.iter().chain(&only_new).any(|w| is_number(w)) {
        return Relation::Distinct;
    }
    let (no, nn) = (names(older), names(newer));
    if no
        .symmetric_difference(&nn)
        .any(|n| !ao.contains(n) || !an.contains(n))
    {
        return Relation::Distinct;
    }
    if negated(&ao) != negated(&an) {
        return Relation::Updates;
    }
    let opposite = ANTONYMS.iter().any(|(x, y)| {
        let has = |set: &BTreeSet<&String>, w: &str| set.iter().any(|s| s.as_str() == w);
        (has(&only_old, x) && has(&only_new, y)) || (has(&only_old, y) && has(&only_new, x))
    });
    if opposite {
        return Relation::Updates;
    }
    // A capitalized first word may be a name too ("Alice owns ..." vs "Bob owns ..."): when
    // both texts open with a capitalized content word the other lacks, treat it as one.
    if let (Some(a), Some(b)) = (initial(older), initial(newer))
        && only_old.contains(&a)
        && only_new.contains(&b)
    {
        return Relation::Distinct;
    }
    let old_words: Vec<&&String> = only_old
        .iter()
        .filter(|w| !NEGATIONS.contains(&w.as_str()))
        .collect();
    let new_words: Vec<&&String> = only_new
        .iter()
        .filter(|w| !NEGATIONS.contains(&w.as_str()))
        .collect();
    if old_words.len() == 1 && new_words.len() == 1 {
        return Relation::Updates;
    }
    Relation::Duplicate
}

#[cfg(test)]
mod tests {
    use super::*;
    use Relation::*;

    #[test]
    fn paraphrases_are_duplicates() {
        let a = "User likes coffee, flat white usually";
        let b = "They are a coffee enthusiast, favorite coffee is flatwhite";
        let c = "User loves coffee, especially flat white";
        assert_eq!(relation(a, b), Duplicate);
        assert_eq!(relation(b, c), Duplicate);
        assert_eq!(
            relation(
                "Run cargo test with --workspace to test every crate",
                "To test every crate, run cargo test --workspace"
            ),
            Duplicate
        );
    }

    #[test]
    fn numbers_and_names_make_distinct_facts() {
        assert_eq!(
            relation(
                "The deploy runs on port 8080",
                "The deploy runs on port 9090"
            ),
            Distinct
        );
        assert_eq!(
            relation(
                "Alice owns the billing service",
                "Bob owns the billing service"
            ),
            Distinct
        );
        assert_eq!(
            relation("Python 3.11 is required", "Python 3.12 is required"),
            Distinct
        );
        assert_eq!(
            relation(
                "The team uses Postgres for billing",
                "The team uses MySQL for billing"
            ),
            Distinct
        );
        // A capitalized first word counts as a name only against another one.
        assert_eq!(
            relation(
                "Deploys happen on fridays after lunch",
                "Releases happen on fridays after lunch"
            ),
            Distinct
        );
        assert_eq!(
            relation(
                "Deploys happen on fridays after lunch",
                "The deploys happen on fridays, after lunch, every week"
            ),
            Duplicate
        );
    }

    #[test]
    fn negations_antonyms_and_new_values_contradict() {
        assert_eq!(
            relation("User likes coffee", "User dislikes coffee"),
            Updates
        );
        assert_eq!(
            relation("User likes coffee", "User does not like coffee"),
            Updates
        );
        assert_eq!(
            relation("User likes coffee", "User doesn't like coffee"),
            Updates
        );
        assert_eq!(
            relation(
                "Always run migrations before deploying",
                "Never run migrations before deploying"
            ),
            Updates
        );
        assert_eq!(
            relation("The user prefers dark mode", "The user prefers light mode"),
            Updates
        );
        assert_eq!(
            relation("Her favorite color is blue", "Her favorite color is red"),
            Updates
        );
        assert_eq!(
            relation("The build is not cached", "The build is cached"),
            Updates
        );
        // A synonym in one slot: the newer wins, the older stays in lineage.
        assert_eq!(
            relation(
                "User likes coffee, flat white usually",
                "User loves coffee, especially flat white"
            ),
            Updates
        );
    }
}
