//! The fact guard of semantic dedup (`docs/semantics.md`, "Dedup at store time", step 4): at a
//! cosine distance of 0.35 the model also pairs sentences that differ in the one word that
//! matters. The guard decides by *where* two statements differ (`docs/semantics.md`, "Slots"):
//! a statement is read as subject, relation and value; the same subject and relation with
//! another value is an update, another subject or another relation is a different fact, and a
//! relation that holds many values at once (`likes`, `speaks`, `has visited`) is never
//! overwritten. Every decision carries the reason it was taken, for audit.
//!
//! Guarantees: deterministic, lexical, English-centred; no name, pronoun or capital letter is
//! evidence of a different fact on its own (a capital letter only marks a word as a value).

mod words;

use super::numbers::{identifies, is_number};
pub use crate::kernel::rule::Rule;
use std::collections::BTreeSet;
use words::*;

/// How a newer text relates to an older one the vector search paired it with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Relation {
    /// The same fact, however phrased: merge.
    Duplicate,
    /// Different facts (another subject, another relation, or one more value of a relation
    /// that holds many): keep both.
    Distinct,
    /// The same slot (subject and relation) with a new value, or the opposite statement (a
    /// negation, an antonym): the newer supersedes the older, whose validity it closes.
    Updates,
    /// Not confident either way (both the subject and the rest differ, or nothing is shared):
    /// keep both at write time; a search puts the newer of the two first.
    Unsure,
}

/// A decision and why it was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// What the newer statement is to the older.
    pub relation: Relation,
    /// The rule that decided, for people and for audit.
    pub rule: Rule,
    /// Both statements have the same subject and share words after it: a pair the guard is
    /// unsure of is then likely two values of one slot, and a search orders it by time.
    pub same_subject: bool,
}

/// One word of a statement.
#[derive(Debug, Clone)]
struct Word {
    /// Lowercased, possessive `'s` removed.
    text: String,
    /// Capitalized and not the first word of a sentence (nor after a quote or a colon).
    name: bool,
    /// Index in the statement's full word sequence.
    at: usize,
}

/// A statement read for the guard.
#[derive(Clone)]
struct Statement {
    /// Every word, lowercased (stop words included).
    all: Vec<String>,
    /// Content words in order.
    content: Vec<Word>,
    /// Index of the first predicate marker, if any.
    predicate_at: Option<usize>,
    /// How a copula's relational noun phrase reads the sentence (`Statement::noun_reading`).
    noun: NounReading,
}

/// How a copula followed by a relational noun reads a statement: "Spanish is the language of
/// Ecuador" and "Islam is Ibn Saud's official religion" state the slot of the thing after
/// `of` / `by` or before `'s` (Ecuador's language), and the words before the copula are its
/// value; the grammatical subject is not the slot's subject.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NounReading {
    /// No relational noun after a copula: the words before the predicate are the subject.
    Plain,
    /// `the N of X`, `the N used by X`, `X's N`: one value per subject (the definite
    /// article); the subject is the words at `subject.0..subject.1` of the statement.
    Definite { subject: (usize, usize) },
    /// `a N of X`: one of many, and which of the two is the slot's subject the words do not
    /// say (`Russian was a language used by Leskov`: Leskov's; `Ines is a citizen of
    /// Spain`: Ines's). The subject is read as for `Plain`; a new value never replaces
    /// another at write time.
    Indefinite,
}

/// Word tokens of `text`: `(lowercased, capitalized_mid_sentence)`. A contraction ending in
/// `n't` yields the word `not` as well. A sentence, a quotation and a clause after a colon
/// each open with a word that is not taken for a name.
fn tokens(text: &str) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    let mut sentence_start = true;
    let mut word = String::new();
    // Only spaces since the last word: a numeral then belongs to the name before it.
    let mut spaced = true;
    // The last word began with a capital letter (a name, or a sentence's first word).
    let mut capital = false;
    let flush = |word: &mut String,
                 out: &mut Vec<(String, bool)>,
                 start: &mut bool,
                 capital: &mut bool,
                 spaced: bool| {
        if word.is_empty() {
            return;
        }
        let upper = word.chars().next().is_some_and(char::is_uppercase);
        let name = !*start && upper;
        // A regnal or sequel numeral right after a capitalized word ("Pedro I", "Gregory
        // XV", "Rocky II") is a number, never the pronoun "I" ("Melanie, I think").
        let after_name = spaced && !*start && *capital;
        *capital = upper;
        if let Some(n) = roman_numeral(word).filter(|_| after_name) {
            out.push((n.to_string(), false));
            word.clear();
            *start = false;
            return;
        }
        let lower = word.to_lowercase();
        if let Some(stem) = lower
            .strip_suffix("n't")
            .or_else(|| (lower == "cannot").then_some("can"))
        {
            // "won't" is "will not", "can't" and "cannot" are "can not".
            let stem = match stem {
                "wo" => "will",
                "ca" => "can",
                "sha" => "shall",
                other => other,
            };
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
            if !word.is_empty() {
                flush(
                    &mut word,
                    &mut out,
                    &mut sentence_start,
                    &mut capital,
                    spaced,
                );
                spaced = true;
            }
            spaced &= c.is_whitespace();
            if ends_sentence || matches!(c, '!' | '?' | '\n' | ':' | '"' | '“' | '(') {
                sentence_start = true;
            }
        }
    }
    word = word.trim_end_matches('.').trim_matches('\'').to_owned();
    flush(
        &mut word,
        &mut out,
        &mut sentence_start,
        &mut capital,
        spaced,
    );
    out
}

/// A word without its inflection's usual ending ("likes", "liked", "liking" → "lik"): enough
/// to see that "does not like" negates "likes".
fn stem(word: &str) -> &str {
    ["ing", "ed", "es", "s", "e"]
        .iter()
        .find_map(|suffix| word.strip_suffix(suffix).filter(|s| s.len() >= 3))
        .unwrap_or(word)
}

/// The value of a roman numeral written in capitals from I, V, X and L (1..=89), if `word`
/// is one: how regnal names and numbered titles write their numbers.
fn roman_numeral(word: &str) -> Option<u32> {
    if word.is_empty() || word.len() > 7 {
        return None;
    }
    let digit = |c: char| match c {
        'I' => Some(1),
        'V' => Some(5),
        'X' => Some(10),
        'L' => Some(50),
        _ => None,
    };
    let values: Vec<u32> = word.chars().map(digit).collect::<Option<_>>()?;
    let mut total = 0;
    for (i, v) in values.iter().enumerate() {
        if values.get(i + 1).is_some_and(|next| next > v) {
            total -= i64::from(*v);
        } else {
            total += i64::from(*v);
        }
    }
    u32::try_from(total).ok().filter(|t| *t > 0)
}

fn read(text: &str) -> Statement {
    let toks = tokens(text);
    let mut all = Vec::with_capacity(toks.len());
    let mut content = Vec::new();
    let mut predicate_at = None;
    for (at, (w, name)) in toks.into_iter().enumerate() {
        let stripped = w.trim_end_matches("'s").to_owned();
        if predicate_at.is_none() && at > 0 && PREDICATE_MARKERS.contains(&stripped.as_str()) {
            predicate_at = Some(at);
        }
        if !stripped.is_empty() && !STOP_WORDS.contains(&stripped.as_str()) {
            content.push(Word {
                text: stripped,
                name,
                at,
            });
        }
        all.push(w);
    }
    let mut statement = Statement {
        all,
        content,
        predicate_at,
        noun: NounReading::Plain,
    };
    statement.noun = statement.noun_reading();
    statement
}

/// Content words: tokens minus stop words, possessive `'s` removed.
#[must_use]
pub fn content_words(text: &str) -> BTreeSet<String> {
    read(text).content.into_iter().map(|w| w.text).collect()
}

/// Whether `w` names a thing, not a quantity (`numbers::identifies`): never a slot's value.
fn is_identifier(s: &Statement, w: &Word) -> bool {
    let before = w.at.checked_sub(1).and_then(|i| s.all.get(i));
    identifies(before.map(String::as_str), &w.text)
}

fn negated(words: &[String]) -> bool {
    words
        .iter()
        .filter(|w| NEGATIONS.contains(&w.as_str()))
        .count()
        % 2
        == 1
}

impl Statement {
    /// Content words the other statement lacks (negations aside: parity decides them).
    fn only<'a>(&'a self, other: &BTreeSet<&str>) -> Vec<&'a Word> {
        self.content
            .iter()
            .filter(|w| !other.contains(w.text.as_str()) && !NEGATIONS.contains(&w.text.as_str()))
            .collect()
    }

    /// Whether two adjacent words of this statement are one word of `other`.
    fn has_compound(&self, other: &Statement) -> bool {
        let mut joined = String::new();
        self.content.windows(2).any(|pair| {
            let [a, b] = pair else { return false };
            joined.clear();
            joined.push_str(&a.text);
            joined.push_str(&b.text);
            other.content.iter().any(|w| w.text == joined)
        })
    }

    /// This statement with two adjacent words written as one where `other` has them as one
    /// word ("flat white" against "flatwhite"); borrowed when there is none.
    fn joined<'a>(&'a self, other: &Statement) -> std::borrow::Cow<'a, Statement> {
        if self.has_compound(other) {
            let mut copy = self.clone();
            copy.join_compounds(other);
            std::borrow::Cow::Owned(copy)
        } else {
            std::borrow::Cow::Borrowed(self)
        }
    }

    /// Writes two adjacent words as one where the other statement has them as one word
    /// ("flat white" against "flatwhite").
    fn join_compounds(&mut self, other: &Statement) {
        let theirs: BTreeSet<&str> = other.content.iter().map(|w| w.text.as_str()).collect();
        let mut out: Vec<Word> = Vec::with_capacity(self.content.len());
        let mut words = std::mem::take(&mut self.content).into_iter().peekable();
        while let Some(w) = words.next() {
            if let Some(next) = words.peek() {
                let joined = format!("{}{}", w.text, next.text);
                if theirs.contains(joined.as_str()) {
                    words.next();
                    out.push(Word { text: joined, ..w });
                    continue;
                }
            }
            out.push(w);
        }
        self.content = out;
    }

    fn words(&self) -> BTreeSet<&str> {
        self.content.iter().map(|w| w.text.as_str()).collect()
    }

    /// Its content words that occur more often in it than in `other` (counted with their
    /// repeats: "Leeds's capital is Leeds" holds "leeds" once more than "Leeds's capital is
    /// Havana").
    fn excess_over<'a>(&'a self, other: &Statement) -> BTreeSet<&'a str> {
        let count = |s: &Statement, w: &str| s.content.iter().filter(|c| c.text == w).count();
        self.content
            .iter()
            .map(|w| w.text.as_str())
            .filter(|w| count(self, w) > count(other, w))
            .collect()
    }

    /// Its numbers, sorted, each as often as it occurs.
    fn numbers(&self) -> Vec<&str> {
        let mut n: Vec<&str> = self
            .content
            .iter()
            .map(|w| w.text.as_str())
            .filter(|w| is_number(w))
            .collect();
        n.sort_unstable();
        n
    }

    /// The word that opens the predicate.
    fn verb(&self) -> Option<&str> {
        self.predicate_at
            .and_then(|p| self.all.get(p))
            .map(|w| w.trim_end_matches("'s"))
    }

    /// The relation's wording: the word that opens the predicate and the function words right
    /// after it ("lives in", "works at", "is").
    fn predicate(&self) -> Option<Vec<&str>> {
        let p = self.predicate_at?;
        let verb = self.all.get(p)?.trim_end_matches("'s");
        if let Some(phrase) = self.copula_phrase(p, verb) {
            return Some(phrase);
        }
        let mut words = vec![verb];
        words.extend(
            self.all
                .iter()
                .skip(p + 1)
                .map(String::as_str)
                .take_while(|w| STOP_WORDS.contains(w))
                // "lives in the city of X" and "lives in X" are one relation.
                .filter(|w| !matches!(*w, "a" | "an" | "the")),
        );
        Some(words)
    }

    /// A copula's whole predicate: "is a citizen of" and "is associated with the sport of"
    /// are two relations, not one "is". The words from the copula to the last preposition
    /// before the first name or number (at most six words on), articles left out; `None`
    /// when no content word stands between them (the usual `predicate`).
    fn copula_phrase<'a>(&'a self, p: usize, verb: &'a str) -> Option<Vec<&'a str>> {
        let last = self.copula_end(p, verb)?;
        let phrase: Vec<&str> = std::iter::once(verb)
            .chain(
                self.all
                    .get(p + 1..=last)?
                    .iter()
                    .map(String::as_str)
                    .filter(|w| !matches!(*w, "a" | "an" | "the")),
            )
            .collect();
        let has_content = phrase.iter().skip(1).any(|w| !STOP_WORDS.contains(w));
        has_content.then_some(phrase)
    }

    /// Where a copula's predicate ends: the last preposition before the first name or number
    /// within six words of the copula at `p`.
    fn copula_end(&self, p: usize, verb: &str) -> Option<usize> {
        if !COPULAS.contains(&verb) {
            return None;
        }
        let valued: BTreeSet<usize> = self
            .content
            .iter()
            .filter(|w| w.name || is_number(&w.text))
            .map(|w| w.at)
            .collect();
        let end = (p + 7).min(self.all.len());
        let mut last_preposition = None;
        for at in p + 1..end {
            if valued.contains(&at) {
                break;
            }
            if self
                .all
                .get(at)
                .is_some_and(|w| PREPOSITIONS.contains(&w.as_str()))
            {
                last_preposition = Some(at);
            }
        }
        last_preposition
    }

    /// The reading of a copula followed by an article or a possessive and a relational noun
    /// (`NounReading`): `VALUE is the N of SUBJECT`, `VALUE is the N used by SUBJECT`,
    /// `VALUE is SUBJECT's N`; `a` / `an` for one of many. Only when a content word names the
    /// relation and the subject holds a content word.
    fn noun_reading(&self) -> NounReading {
        let Some(p) = self.predicate_at else {
            return NounReading::Plain;
        };
        let Some(verb) = self.all.get(p).map(String::as_str) else {
            return NounReading::Plain;
        };
        if !COPULAS.contains(&verb) || p == 0 {
            return NounReading::Plain;
        }
        let content_in =
            |from: usize, to: usize| self.content.iter().any(|w| (from..to).contains(&w.at));
        let article = self.all.get(p + 1).map(String::as_str);
        if matches!(article, Some("the" | "a" | "an")) {
            let Some(last) = self.copula_end(p, verb) else {
                return NounReading::Plain;
            };
            let ends_with_of_or_by = self
                .all
                .get(last)
                .is_some_and(|w| matches!(w.as_str(), "of" | "by"));
            let subject = (last + 1, self.all.len());
            if !ends_with_of_or_by || !content_in(p + 2, last) || !content_in(subject.0, subject.1)
            {
                return NounReading::Plain;
            }
            return if article == Some("the") {
                NounReading::Definite { subject }
            } else {
                NounReading::Indefinite
            };
        }
        // `X's N`: a possessive within five words of the copula, a content word after it; no
        // preposition between but the `of` inside a name (`Stephen I of Hungary's`).
        let name_or_number = |at: usize| {
            self.content
                .iter()
                .any(|w| w.at == at && (w.name || is_number(&w.text)))
        };
        let inside_a_name =
            |at: usize| self.all[at] == "of" && name_or_number(at - 1) && name_or_number(at + 1);
        let possessive = (p + 1..(p + 6).min(self.all.len())).find(|&at| {
            self.all[at].ends_with("'s")
                && (p + 1..at)
                    .all(|k| !PREPOSITIONS.contains(&self.all[k].as_str()) || inside_a_name(k))
        });
        match possessive {
            Some(at) if content_in(p + 1, at + 1) && content_in(at + 1, self.all.len()) => {
                NounReading::Definite {
                    subject: (p + 1, at + 1),
                }
            }
            _ => NounReading::Plain,
        }
    }

    /// Whether the predicate is a copula and a present participle ("is playing", "are
    /// fighting"): an activity, an event that many values can take at once, never one slot
    /// with one value.
    fn progressive(&self) -> bool {
        let Some(p) = self.predicate_at else {
            return false;
        };
        self.all
            .get(p)
            .is_some_and(|v| COPULAS.contains(&v.as_str()))
            && self
                .all
                .iter()
                .skip(p + 1)
                .find(|w| !matches!(w.as_str(), "not" | "still" | "also" | "now" | "always"))
                .is_some_and(|w| w.len() > 4 && w.ends_with("ing"))
    }

    /// Whether the statement opens with an indefinite subject ("a dog", "an engineer", "two
    /// men", "someone"): it introduces an entity of its own, which no earlier statement
    /// named.
    fn indefinite(&self) -> bool {
        self.all
            .first()
            .is_some_and(|w| INDEFINITES.contains(&w.as_str()) || is_number(w))
    }

    /// Whether `w` stands before the predicate: part of the subject.
    fn in_subject(&self, w: &Word) -> bool {
        match self.noun {
            NounReading::Plain | NounReading::Indefinite => {
                self.predicate_at.is_some_and(|p| w.at < p)
            }
            NounReading::Definite { subject } => (subject.0..subject.1).contains(&w.at),
        }
    }

    /// Whether `w` comes after every content word the two statements share: the value.
    fn in_tail(&self, w: &Word, shared: &BTreeSet<&str>) -> bool {
        if matches!(self.noun, NounReading::Definite { .. }) {
            // `VALUE is the N of SUBJECT`: the value stands before the copula.
            return self.predicate_at.is_some_and(|p| w.at < p);
        }
        self.content
            .iter()
            .filter(|c| shared.contains(c.text.as_str()))
            .all(|c| c.at < w.at)
    }
}

fn decide(relation: Relation, rule: Rule) -> Decision {
    Decision {
        relation,
        rule,
        same_subject: false,
    }
}

/// A decision about two statements of the same subject.
fn decide_same_subject(relation: Relation, rule: Rule) -> Decision {
    Decision {
        same_subject: true,
        ..decide(relation, rule)
    }
}

/// A text read once, to be compared with many others (`relation_of`): a search compares each
/// of its candidates with several.
pub(crate) struct Reading(Statement);

impl Reading {
    /// Its content words (`content_words`).
    pub(crate) fn words(&self) -> BTreeSet<&str> {
        self.0.words()
    }

    /// Its content words that occur more often in it than in `other`.
    pub(crate) fn excess_over<'a>(&'a self, other: &Reading) -> BTreeSet<&'a str> {
        self.0.excess_over(&other.0)
    }
}

/// Reads `text` for the guard.
pub(crate) fn reading(text: &str) -> Reading {
    Reading(read(text))
}

/// How `newer` relates to `older` (the vector search already paired them), and why.
#[must_use]
pub fn relation(older: &str, newer: &str) -> Decision {
    relation_of(&reading(older), &reading(newer))
}

/// `relation` of two texts already read: the wording rules, then the subject's, then the
/// value rules (`docs/semantics.md`, "Slots: how the fact guard decides").
pub(crate) fn relation_of(older: &Reading, newer: &Reading) -> Decision {
    let o = older.0.joined(&newer.0);
    let n = newer.0.joined(&o);
    let (wo, wn) = (o.words(), n.words());
    let d = Difference {
        only_old: o.only(&wn),
        only_new: n.only(&wo),
        // An activity ("is playing the guitar") is an event: one does not close another.
        event: o.progressive() || n.progressive(),
        o: &o,
        n: &n,
        wo: &wo,
        wn: &wn,
    };
    let decision = wording_rule(&d).unwrap_or_else(|| value_rule(&d));
    // A newer statement of an indefinite subject is about an entity of its own ("A dog runs
    // through the field" after "A dog runs through the woods": two dogs): it may say again
    // what another said (a duplicate), never replace it, and a search does not order the two
    // by time.
    match decision.relation {
        Relation::Updates if newer.0.indefinite() => decide(Relation::Distinct, Rule::OtherSubject),
        Relation::Unsure if newer.0.indefinite() => decide(Relation::Unsure, decision.rule),
        _ => decision,
    }
}

/// Two statements side by side: each one, its content words, and the words only it has.
struct Difference<'a> {
    o: &'a Statement,
    n: &'a Statement,
    wo: &'a BTreeSet<&'a str>,
    wn: &'a BTreeSet<&'a str>,
    only_old: Vec<&'a Word>,
    only_new: Vec<&'a Word>,
    /// Either one is an activity.
    event: bool,
}

/// The rules read from the words alone: a negation or an antonym, the same words (in the
/// same order or not), another relation word, other numbers, detail added.
fn wording_rule(d: &Difference<'_>) -> Option<Decision> {
    let (o, n, event) = (d.o, d.n, d.event);
    let (only_old, only_new) = (&d.only_old, &d.only_new);
    // A negation, or an antonym, updates only the statement it negates: every other content
    // word the same. Beside any other difference it says nothing about one slot ("I don't
    // like horror" does not close "I like the beach at night").
    if negated(&o.all) != negated(&n.all) {
        // "likes" and "does not like" say the same words: compare stems.
        // A word whose antonym is a negation ("always" / "never") is part of the negation.
        fn stems(only: &[&Word]) -> Vec<String> {
            let negation_partner = |w: &str| {
                ANTONYMS
                    .iter()
                    .any(|(a, b)| a == &w && NEGATIONS.contains(b))
            };
            let mut s: Vec<String> = only
                .iter()
                .filter(|w| !negation_partner(&w.text))
                .map(|w| stem(&w.text).to_owned())
                .collect();
            s.sort_unstable();
            s
        }
        let relation = if stems(only_old) == stems(only_new) && !event {
            Relation::Updates
        } else {
            Relation::Distinct
        };
        return Some(decide(relation, Rule::Negation));
    }
    let has = |set: &[&Word], w: &str| set.iter().any(|s| s.text == w);
    if ANTONYMS.iter().any(|(x, y)| {
        (has(only_old, x) && has(only_new, y)) || (has(only_old, y) && has(only_new, x))
    }) {
        let relation = if only_old.len() == 1 && only_new.len() == 1 {
            Relation::Updates
        } else {
            Relation::Distinct
        };
        return Some(decide(relation, Rule::Antonym));
    }
    if only_old.is_empty() && only_new.is_empty() {
        // The same words in another order can swap who does what ("a dog is licking a
        // baby" / "a baby is licking a dog"): a restatement only in the same order.
        let order = |s: &Statement| -> Vec<String> {
            let mut seen = BTreeSet::new();
            s.content
                .iter()
                .filter(|w| seen.insert(w.text.as_str()))
                .map(|w| w.text.clone())
                .collect()
        };
        if order(o) != order(n) {
            return Some(decide(Relation::Unsure, Rule::Inversion));
        }
        return Some(decide(Relation::Duplicate, Rule::SameWords));
    }
    if RELATION_GROUPS.iter().any(|g| {
        only_old.iter().any(|w| g.contains(&w.text.as_str()))
            && only_new.iter().any(|w| g.contains(&w.text.as_str()))
    }) {
        return Some(decide(Relation::Distinct, Rule::OtherRelation));
    }
    // The same numbers, counted: "1-to-1" is not "4-to-1" although both hold a 1.
    let (numbers_old, numbers_new) = (o.numbers(), n.numbers());
    let exclusive = |only: &[&Word]| only.iter().any(|w| is_number(&w.text));
    let each_has_its_own = exclusive(only_old) && exclusive(only_new);
    if numbers_old != numbers_new && !each_has_its_own {
        // One side's numbers are among the other's, or only one side has any: a number is
        // an identifier ("Half-Life" / "Half-Life 2", "Gregory I" / "Gregory"), counted
        // ("1-to-1" / "4-to-1"), never detail added to the same statement. A number each
        // side lacks (a new port) is judged by the rules below.
        return Some(decide(Relation::Distinct, Rule::OtherNumber));
    }
    if only_old.is_empty() || only_new.is_empty() {
        // A word the shorter side says more often than the longer one was replaced, not
        // kept: "Mercury Montclair is created by Mercury" / "... by Toyota" (a value that
        // repeats the subject's name) gives one slot two values, never one statement with
        // detail added.
        let shorter_keeps_its_words = if only_old.is_empty() {
            o.excess_over(n).is_empty()
        } else {
            n.excess_over(o).is_empty()
        };
        if shorter_keeps_its_words {
            return Some(decide(Relation::Duplicate, Rule::AddsDetail));
        }
        return Some(decide(Relation::Unsure, Rule::OneWordReplaced));
    }
    None
}

/// The rules that need the sentence's parts: a shared word, the subject, then whether what
/// differs is a value of the same relation.
fn value_rule(d: &Difference<'_>) -> Decision {
    let (o, n, wo, wn, event) = (d.o, d.n, d.wo, d.wn, d.event);
    let (only_old, only_new) = (&d.only_old, &d.only_new);
    let shared: BTreeSet<&str> = wo.intersection(wn).copied().collect();
    if shared.is_empty() {
        return decide(Relation::Unsure, Rule::NothingShared);
    }
    let subject_old = only_old.iter().filter(|w| o.in_subject(w)).count();
    let subject_new = only_new.iter().filter(|w| n.in_subject(w)).count();
    if subject_old > 0 && subject_new > 0 {
        return decide(Relation::Distinct, Rule::OtherSubject);
    }
    if subject_old + subject_new > 0 || swapped_roles(d, &shared) {
        // One side's subject holds what the other says after its predicate: an inversion
        // ("Nairobi is the capital of Kenya", "Boeing owns Google Alerts" / "Google owns
        // Boeing Phantom Works") or another fact; nothing lexical tells which.
        return decide(Relation::Unsure, Rule::Inversion);
    }
    // After a known predicate, the tail, a name and a number are values wherever they stand
    // ("uses Postgres for billing", "runs on port 8080"). Without one only a word of the tail
    // is: a number there is a label ("note 7"), not a value.
    let value_like = |s: &Statement, only: &[&Word]| {
        only.iter().all(|w| {
            // An identifier is never a value (D9): "(ticket 12)" / "(ticket 776)".
            if is_identifier(s, w) {
                return false;
            }
            let tail = s.in_tail(w, &shared);
            if s.predicate_at.is_some() {
                tail || w.name || is_number(&w.text)
            } else {
                tail && !is_number(&w.text)
            }
        })
    };
    // The relation both share holds many values ("likes", "speaks"): a new value adds one. A
    // name in the subject is never the relation's word ("Wilkie Collins is the author of Our
    // Mutual Friend").
    let multi = o.content.iter().any(|w| {
        !(w.name && o.in_subject(w))
            && shared.contains(w.text.as_str())
            && MULTI_VALUED.contains(&w.text.as_str())
    });
    // `a N of X` on either side: one of many values, of one subject or the other.
    let indefinite = o.noun == NounReading::Indefinite || n.noun == NounReading::Indefinite;
    // A value is only new if the relation is the same: both predicates say it in the same
    // words ("lives in" is not "works in").
    let same_predicate = o.predicate() == n.predicate();
    // A slot's value is a few words ("Lisbon", "the night shift"); a longer difference is
    // another statement that shares its opening ("The dollar was at 116.92 yen ... flat" /
    // "... 116.78 yen, down 0.1 percent"), which no value replaces.
    let short_values = only_old.len() <= MAX_VALUE_WORDS && only_new.len() <= MAX_VALUE_WORDS;
    if same_predicate && value_like(o, only_old) && value_like(n, only_new) {
        if multi || event {
            return decide_same_subject(Relation::Distinct, Rule::ManyValued);
        }
        if indefinite {
            return decide(Relation::Unsure, Rule::ManyValued);
        }
        if o.predicate_at.is_none() {
            // No verb says what the last words are ("Note about apples" / "... pears"): a
            // new value or another note. Keep both; a search shows the newer first.
            return decide_same_subject(Relation::Unsure, Rule::NoPredicate);
        }
        if !short_values {
            return decide_same_subject(Relation::Unsure, Rule::TooDifferent);
        }
        return decide_same_subject(Relation::Updates, Rule::NewValue);
    }
    // A name or number on both sides that the other lacks: another value (or another thing).
    // A number that identifies ("ticket 12") is another thing, never a value.
    let valued = |s: &Statement, only: &[&Word]| {
        only.iter()
            .any(|w| w.name || (is_number(&w.text) && !is_identifier(s, w)))
    };
    if valued(o, only_old) && valued(n, only_new) && o.predicate_at.is_some() {
        if same_predicate && !multi && !event && !indefinite && short_values {
            return decide_same_subject(Relation::Updates, Rule::NewValueReworded);
        }
        // The same verb with other function words ("works at" / "works for ... now") is
        // likely the same relation; another verb is another relation.
        if o.verb() == n.verb() && !multi {
            return decide_same_subject(Relation::Unsure, Rule::ValueOtherWording);
        }
        return decide(Relation::Unsure, Rule::ValueOtherRelation);
    }
    if only_old.iter().chain(only_new).any(|w| is_number(&w.text)) {
        return decide_same_subject(Relation::Distinct, Rule::OtherNumber);
    }
    if only_old.len() == 1 && only_new.len() == 1 {
        if multi {
            return decide_same_subject(Relation::Distinct, Rule::ManyValued);
        }
        // One word replaced outside a value the predicate names: a new value, a synonym
        // ("likes" / "loves") or another event; on public pairs nearly half are the same
        // statement. Unsure: never superseded at write time.
        return decide_same_subject(Relation::Unsure, Rule::OneWordReplaced);
    }
    // Several words differ: a paraphrase when two in five content words or more are shared
    // (the vector search already found the two close).
    let union = wo.union(wn).count();
    if 5 * shared.len() >= 2 * union {
        return decide_same_subject(Relation::Duplicate, Rule::Paraphrase);
    }
    decide(Relation::Unsure, Rule::TooDifferent)
}

/// Whether a word both statements share is the subject of one and not of the other, both
/// having a predicate: the two say who relates to whom the other way round.
fn swapped_roles(d: &Difference<'_>, shared: &BTreeSet<&str>) -> bool {
    if d.o.predicate_at.is_none() || d.n.predicate_at.is_none() {
        return false;
    }
    fn subject_words(s: &Statement) -> BTreeSet<&str> {
        s.content
            .iter()
            .filter(|w| s.in_subject(w))
            .map(|w| w.text.as_str())
            .collect()
    }
    let (so, sn) = (subject_words(d.o), subject_words(d.n));
    shared.iter().any(|w| so.contains(w) != sn.contains(w))
}

/// What the learned judge (`super::judge`) reads of two statements besides their cosine: the
/// counts the guard's rules decide by, as numbers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Signals {
    /// Distinct content words of the older and the newer statement.
    pub(crate) words: (usize, usize),
    /// Content words both have.
    pub(crate) shared: usize,
    /// Content words only the older, only the newer has (negations aside).
    pub(crate) only: (usize, usize),
    /// A name only one of them has.
    pub(crate) name_differs: bool,
    /// Both predicates say the relation in the same words.
    pub(crate) same_predicate: bool,
    /// A word before the predicate only one of them has: the subjects differ.
    pub(crate) subject_differs: bool,
}

/// The signals of two texts already read.
pub(crate) fn signals_of(older: &Reading, newer: &Reading) -> Signals {
    let o = older.0.joined(&newer.0);
    let n = newer.0.joined(&o);
    let (wo, wn) = (o.words(), n.words());
    let (only_old, only_new) = (o.only(&wn), n.only(&wo));
    Signals {
        words: (wo.len(), wn.len()),
        shared: wo.intersection(&wn).count(),
        only: (only_old.len(), only_new.len()),
        name_differs: only_old.iter().chain(&only_new).any(|w| w.name),
        same_predicate: o.predicate() == n.predicate(),
        subject_differs: only_old.iter().any(|w| o.in_subject(w))
            || only_new.iter().any(|w| n.in_subject(w)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Relation::*;

    fn rel(a: &str, b: &str) -> Relation {
        relation(a, b).relation
    }

    #[test]
    fn paraphrases_are_duplicates() {
        let a = "User likes coffee, flat white usually";
        assert_eq!(
            rel(a, "The user likes coffee, usually a flat white"),
            Duplicate
        );
        // The same words in another order: read as unsure (word order can swap roles).
        assert_eq!(
            rel(
                "Run cargo test with --workspace to test every crate",
                "To test every crate, run cargo test --workspace"
            ),
            Unsure
        );
        assert_eq!(
            rel(
                "Deploys happen on fridays after lunch",
                "The deploys happen on fridays, after lunch, every week"
            ),
            Duplicate
        );
        // Names, pronouns and capital letters are not evidence of another fact on their own.
        assert_eq!(
            rel(
                "I said: Use the staging cluster",
                "I said use the staging cluster"
            ),
            Duplicate
        );
        assert_eq!(
            rel("O Romeo, the meeting moved", "Romeo, the meeting moved"),
            Duplicate
        );
    }

    #[test]
    fn another_subject_or_relation_is_another_fact() {
        assert_eq!(
            rel(
                "Alice owns the billing service",
                "Bob owns the billing service"
            ),
            Distinct
        );
        assert_eq!(
            rel(
                "Marie Curie was born in the city of Warsaw",
                "Marie Curie died in the city of Warsaw"
            ),
            Distinct
        );
        assert_eq!(
            rel(
                "defensive tackle is associated with American football",
                "defensive back is associated with American football"
            ),
            Distinct
        );
        assert_eq!(
            rel(
                "The capital of France is Paris",
                "The capital of Spain is Paris"
            ),
            Distinct
        );
    }

    #[test]
    fn same_slot_new_value_updates() {
        assert_eq!(
            rel(
                "The capital of Kenya is Nairobi",
                "The capital of Kenya is Mombasa"
            ),
            Updates
        );
        assert_eq!(
            rel(
                "The deploy runs on port 8080",
                "The deploy runs on port 9090"
            ),
            Updates
        );
        assert_eq!(
            rel(
                "The team uses Postgres for billing",
                "The team uses MySQL for billing"
            ),
            Updates
        );
        assert_eq!(
            rel("Her favorite color is blue", "Her favorite color is red"),
            Updates
        );
        assert_eq!(
            rel("Alice lives in Paris", "Alice lives in Berlin"),
            Updates
        );
        // A value that repeats the subject's name, replaced: never detail added (a merge
        // would hide the new value).
        assert_eq!(
            rel(
                "Mercury Montclair is created by Mercury.",
                "Mercury Montclair is created by Toyota."
            ),
            Unsure
        );
        assert_eq!(
            rel(
                "Leeds's capital city is Leeds.",
                "Leeds's capital city is Havana."
            ),
            Unsure
        );
    }

    /// Two news sentences with the same opening are two statements, not two values of one
    /// slot (MRPC: before the cap, 2 % of its different-meaning pairs were superseded).
    #[test]
    fn a_long_different_tail_is_not_a_new_value() {
        for (old, new) in [
            (
                "Klarman was arrested by FBI agents in the Hamptons, an exclusive summer resort enclave east of New York City.",
                "Klarman was arrested by FBI agents Monday morning at his home in New York.",
            ),
            (
                "The long-running newsmagazine Dateline NBC has been cut from three to two airings per week and is searching for a replacement for retiring co-anchor Jane Pauley.",
                "The long-running newsmagazine Dateline NBC has been cut from three to two airings per week, losing its Tuesday berth.",
            ),
        ] {
            assert_ne!(rel(old, new), Updates, "{old} / {new}");
        }
        // A value of a few words still replaces the old one.
        assert_eq!(
            rel(
                "Alice works on the billing service",
                "Alice works on the search ranking team"
            ),
            Updates
        );
    }

    #[test]
    fn contractions_and_repeated_numbers() {
        assert_eq!(
            rel(
                "mini-dinstall won't care about removed files",
                "mini-dinstall will not care about removed files"
            ),
            Duplicate
        );
        assert_eq!(
            rel("You can't mount it twice", "You cannot mount it twice"),
            Duplicate
        );
        assert_eq!(
            rel(
                "The signatures are 1-to-1 equivalent to NumPy",
                "The signatures are 4-to-1 equivalent to NumPy"
            ),
            Distinct
        );
    }

    #[test]
    fn numbered_labels_without_a_predicate_are_distinct() {
        assert_eq!(
            rel("pipelined python note 1", "pipelined python note 2"),
            Distinct
        );
        assert_eq!(
            rel("after the checkpoint 3", "after the checkpoint 4"),
            Distinct
        );
    }

    /// D9 (issue #54): notes that differ by an identifier are two notes; a quantity a
    /// relation takes is still a new value.
    #[test]
    fn identifiers_are_never_a_new_value_and_quantities_still_are() {
        for (older, newer) in [
            (
                "the scheduler crashes if the queue is empty (ticket 12)",
                "the scheduler crashes if the queue is empty (ticket 776)",
            ),
            (
                "The login page fails with error 503",
                "The login page fails with error 502",
            ),
            (
                "Deploy blocked by issue 4411",
                "Deploy blocked by issue 4412",
            ),
            (
                "The refund was sent for order 88123",
                "The refund was sent for order 88124",
            ),
            ("CI is red on build 9001", "CI is red on build 9002"),
            (
                "The crash was fixed in commit a3f9c21",
                "The crash was fixed in commit 77be0d4",
            ),
            (
                "Customer reported it in JIRA-123",
                "Customer reported it in JIRA-456",
            ),
            (
                "The parser bug is on line 88",
                "The parser bug is on line 91",
            ),
            (
                "We pinned the SDK at version 3",
                "We pinned the SDK at version 4",
            ),
        ] {
            let d = relation(older, newer);
            assert_ne!(d.relation, Updates, "{older:?} / {newer:?}: {:?}", d.rule);
        }
        assert_eq!(
            rel("The API runs on port 8080", "The API runs on port 9090"),
            Updates
        );
        assert_eq!(rel("Bob is 34 years old", "Bob is 35 years old"), Updates);
    }

    #[test]
    fn many_valued_relations_keep_every_value() {
        assert_eq!(rel("Alice likes tea", "Alice likes coffee"), Distinct);
        assert_eq!(rel("Bob speaks French", "Bob speaks German"), Distinct);
        assert_eq!(
            rel("Carol has visited Lisbon", "Carol has visited Oslo"),
            Distinct
        );
        // An owner owns many things: `BBC owns Broadcasting House` is Broadcasting House's
        // owner, not the BBC's only property.
        assert_eq!(
            rel("BBC owns Broadcasting House.", "BBC owns BBC Music."),
            Distinct
        );
    }

    #[test]
    fn negations_and_antonyms_update() {
        assert_eq!(rel("User likes coffee", "User dislikes coffee"), Updates);
        assert_eq!(
            rel("User likes coffee", "User does not like coffee"),
            Updates
        );
        assert_eq!(
            rel("User likes coffee", "User doesn't like coffee"),
            Updates
        );
        assert_eq!(
            rel(
                "Always run migrations before deploying",
                "Never run migrations before deploying"
            ),
            Updates
        );
        assert_eq!(
            rel("The user prefers dark mode", "The user prefers light mode"),
            Updates
        );
        assert_eq!(
            rel("The build is not cached", "The build is cached"),
            Updates
        );
    }

    #[test]
    fn negation_beside_another_difference_is_another_fact() {
        // Chat turns the old rule superseded: a negation says nothing of another statement.
        assert_eq!(
            rel(
                "I love going to the beach at night",
                "I don't like going to the mountains at night"
            ),
            Distinct
        );
        assert_eq!(
            rel(
                "User prefers dark mode in the editor",
                "User prefers light mode in the terminal"
            ),
            Distinct
        );
    }

    #[test]
    fn numerals_sequels_and_regnal_names_are_identifiers() {
        assert_eq!(
            rel(
                "Pedro I was a king of Portugal",
                "Pedro Arrupe was a Jesuit"
            ),
            Distinct
        );
        assert_eq!(
            rel("Half-Life is a video game", "Half-Life 2 is a video game"),
            Distinct
        );
        assert_eq!(
            rel("Gregory I was a pope", "Gregory XV was a pope"),
            Distinct
        );
        assert_eq!(roman_numeral("XV"), Some(15));
        assert_eq!(roman_numeral("IV"), Some(4));
        assert_eq!(roman_numeral("Xmas"), None);
        // The pronoun stays a pronoun after a comma or at a sentence's start.
        let words: Vec<String> = tokens("Melanie, I think so. I agree with Bob")
            .into_iter()
            .map(|(w, _)| w)
            .collect();
        assert_eq!(words.iter().filter(|w| *w == "i").count(), 2);
    }

    #[test]
    fn an_activity_is_an_event_not_a_slot() {
        assert_eq!(
            rel("A man is playing a guitar", "A man is playing a flute"),
            Distinct
        );
        assert_eq!(
            rel("A man is playing a guitar", "A man is not playing a guitar"),
            Distinct
        );
        assert_eq!(rel("Alice is in Paris", "Alice is in Berlin"), Updates);
    }

    #[test]
    fn a_newer_indefinite_subject_is_an_entity_of_its_own() {
        // Two captions of two photos: two dogs, two dancers.
        let d = relation(
            "A black and white dog runs through the grass.",
            "A black and white dog runs through the water.",
        );
        assert_eq!((d.relation, d.rule), (Distinct, Rule::OtherSubject));
        // Unsure of it, the guard keeps both, and a search does not order them by time.
        let d = relation("Two women dance on a stage", "Two women dance on a ship");
        assert_ne!(d.relation, Updates);
        assert!(!d.same_subject);
        // It may still say what another said.
        assert_eq!(
            rel(
                "A woman riding a brown horse.",
                "A woman is riding the brown horse."
            ),
            Duplicate
        );
        // A definite subject may name what an indefinite one introduced: still an update.
        assert_eq!(
            rel(
                "A dog runs through the grass.",
                "The dog runs through the water."
            ),
            Updates
        );
        assert_eq!(
            rel(
                "The dog runs through the grass",
                "The dog runs through the water"
            ),
            Updates
        );
    }

    #[test]
    fn the_same_words_in_another_order_are_not_a_restatement() {
        assert_eq!(
            rel("A dog is licking a baby", "A baby is licking a dog"),
            Unsure
        );
        assert_eq!(
            rel("A dog is licking a baby", "a dog is licking the baby!"),
            Duplicate
        );
    }

    #[test]
    fn a_copula_relation_is_its_whole_predicate() {
        assert_eq!(
            rel(
                "Rafael Nadal is associated with the sport of tennis",
                "Rafael Nadal is a citizen of Spain"
            ),
            Unsure
        );
        assert_eq!(
            rel(
                "Nairobi is the capital of Kenya",
                "Nairobi is the capital of Kenya."
            ),
            Duplicate
        );
        // `a N of X` is one of many, of Ines or of Spain: the words do not say whose, so
        // neither replaces the other at write time.
        assert_eq!(
            rel(
                "Ines is a citizen of Spain",
                "Ines is a citizen of Portugal"
            ),
            Unsure
        );
        assert_eq!(
            rel(
                "Russian was a language used by Nikolai Leskov.",
                "Russian was a language used by Glamourina."
            ),
            Unsure
        );
    }

    #[test]
    fn the_noun_of_a_copula_names_the_slot() {
        // `VALUE is the N of SUBJECT`: the slot is the subject's, the value stands first.
        assert_eq!(
            rel(
                "French was the language of L'Hebdo.",
                "French was the language of Le Devoir."
            ),
            Distinct
        );
        assert_eq!(
            rel(
                "Spanish is the official language of Ecuador.",
                "English is the official language of Ecuador."
            ),
            Updates
        );
        assert_eq!(
            rel(
                "Hebrew is the language typically used by Marcus Licinius Crassus.",
                "Hebrew is the language typically used by Henry Clay Frick."
            ),
            Distinct
        );
        assert_eq!(
            rel(
                "Bob is the manager of the billing team",
                "Carol is the manager of the billing team"
            ),
            Updates
        );
        // `VALUE is SUBJECT's N`.
        assert_eq!(
            rel(
                "Islam is Ibn Saud's official religion.",
                "Islam is Uthman ibn Affan's official religion."
            ),
            Distinct
        );
        assert_eq!(
            rel(
                "Islam is Ibn Saud's official religion.",
                "Christianity is Ibn Saud's official religion."
            ),
            Updates
        );
        assert_eq!(
            rel(
                "Christianity is Conrad I of Germany's official religion.",
                "Christianity is Stephen I of Hungary's official religion."
            ),
            Distinct
        );
        assert_eq!(
            rel(
                "Charles Dickens is the author of Bleak House",
                "Charles Dickens is the author of Our Mutual Friend"
            ),
            Distinct
        );
        // A title that ends in a word of the many-valued list is a name, not the relation.
        assert_eq!(
            rel(
                "Charles Dickens is the author of Our Mutual Friend",
                "Wilkie Collins is the author of Our Mutual Friend"
            ),
            Updates
        );
        // A many-valued word of the predicate still counts when capitalized.
        assert_eq!(
            rel(
                "The Note's Must-Reads for Monday, November 25, 2013",
                "The Note's Must-Reads for Tuesday, October 8, 2013"
            ),
            Distinct
        );
    }

    #[test]
    fn a_shared_word_in_another_role_is_an_inversion() {
        assert_eq!(
            rel(
                "Google owns Boeing Phantom Works.",
                "Boeing owns Google Alerts."
            ),
            Unsure
        );
    }

    #[test]
    fn another_preposition_is_another_relation() {
        assert_eq!(rel("Tariq works at Acme", "Tariq works in Austin"), Unsure);
        assert_eq!(
            rel("Tariq works at Acme", "Tariq works for Globex now"),
            Unsure
        );
        assert_eq!(
            rel(
                "The Atlas project uses Postgres as its database",
                "The Atlas project uses MySQL as the main database"
            ),
            Updates
        );
    }

    #[test]
    fn another_predicate_is_not_a_new_value() {
        assert_eq!(
            rel(
                "Alice prefers answers with code examples in Python",
                "Alice lives in Lisbon"
            ),
            Unsure
        );
    }

    #[test]
    fn unsure_pairs_are_kept_apart() {
        assert_eq!(
            rel(
                "Nairobi is the capital of Kenya",
                "The capital of Kenya is Mombasa"
            ),
            Unsure
        );
        assert_eq!(rel("Flat white please", "Green tea today"), Unsure);
        // A paraphrase in other words, with a compound written as one word.
        assert_eq!(
            rel(
                "User likes coffee, flat white usually",
                "They are a coffee enthusiast, favorite coffee is flatwhite"
            ),
            Duplicate
        );
        assert_eq!(
            relation("Alice lives in Paris", "Alice lives in Berlin").rule,
            Rule::NewValue
        );
        for r in Rule::ALL {
            assert_eq!(Rule::from_code(r.code()), Some(r));
        }
        assert_eq!(Rule::from_code(0), None);
    }
}
