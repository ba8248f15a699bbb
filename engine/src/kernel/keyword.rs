//! The keyword index: an inverted index over memory content, one per user, scored with BM25
//! (`docs/search.md`, "Keyword").
//!
//! Guarantees: after any sequence of `add` and `remove`, scores equal BM25 computed from
//! scratch over the live documents (document frequencies, lengths and the average length are
//! kept exactly; removed documents leave stale postings that are skipped and purged once they
//! outnumber the live ones). Derived state: never written to disk, rebuilt from the records
//! when a store opens (from the checkpoint and the log after it), so `add` runs once per record
//! on the open's path: it allocates nothing for a term already indexed (terms are interned to
//! ids, lowercase ASCII words are not copied) and hashes with foldhash instead of SipHash
//! (`docs/benchmarks.md`, "Opening a store"). Term strings live in one buffer, not one
//! allocation each (`Terms`): most terms of a large index occur in one document.

use foldhash::{HashMap, HashMapExt};
use std::hash::BuildHasher;

/// BM25 term-frequency saturation.
pub const BM25_K1: f32 = 1.2;
/// BM25 length normalization.
pub const BM25_B: f32 = 0.75;

/// Words that carry no meaning for a keyword search; a query made only of these (or of
/// punctuation) has no terms, and the search falls back to text (`docs/search.md`). Sorted
/// (looked up by binary search), none longer than `STOP_WORD_MAX_LEN` bytes.
const STOP_WORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "from", "has", "have", "he",
    "her", "his", "i", "if", "in", "into", "is", "it", "its", "me", "my", "no", "not", "of", "on",
    "or", "our", "she", "so", "such", "that", "the", "their", "then", "there", "these", "they",
    "this", "to", "was", "we", "were", "what", "when", "where", "which", "who", "will", "with",
    "you", "your",
];

const STOP_WORD_MAX_LEN: usize = 5;

fn is_stop_word(term: &str) -> bool {
    term.len() <= STOP_WORD_MAX_LEN && STOP_WORDS.binary_search(&term).is_ok()
}

/// The terms of `text`: maximal runs of letters, digits and `_`, lowercased, stop words
/// removed. `E4137`, `parse_config_v2` and `café` are one term each.
#[must_use]
pub fn tokenize(text: &str) -> Vec<String> {
    let mut terms = Vec::new();
    for_each_term(text, &mut String::new(), |t| terms.push(t.to_owned()));
    terms
}

/// Calls `f` with each term of `text`, in order, as `tokenize` returns them. A word that is
/// lowercase ASCII already is passed as it is; others are lowercased into `lower` (ASCII) or
/// with `str::to_lowercase` (anything else, whose rules depend on the context).
fn for_each_term(text: &str, lower: &mut String, mut f: impl FnMut(&str)) {
    for_each_word(text, lower, |term| {
        if !is_stop_word(term) {
            f(term);
        }
    });
}

/// Calls `f` with each word of `text`, lowercased as `for_each_term` lowercases, stop words
/// included.
fn for_each_word(text: &str, lower: &mut String, mut f: impl FnMut(&str)) {
    for word in text.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
        if word.is_empty() {
            continue;
        }
        let owned;
        let term = if !word.is_ascii() {
            owned = word.to_lowercase();
            owned.as_str()
        } else if word.bytes().any(|b| b.is_ascii_uppercase()) {
            lower.clear();
            lower.push_str(word);
            lower.make_ascii_lowercase();
            lower.as_str()
        } else {
            word
        };
        f(term);
    }
}

/// The position of a stop word in `STOP_WORDS`.
fn stop_word_index(term: &str) -> Option<usize> {
    if term.len() > STOP_WORD_MAX_LEN {
        return None;
    }
    STOP_WORDS.binary_search(&term).ok()
}

// NOTE: a document's stop words are a set of bits, bit `i` for `STOP_WORDS[i]`.
const _: () = assert!(STOP_WORDS.len() <= 64, "a stop-word set is one u64");

/// The stop words of `text`, as a set of bits.
fn stop_words_of(text: &str) -> u64 {
    let mut set = 0u64;
    for_each_word(text, &mut String::new(), |w| {
        if let Some(i) = stop_word_index(w) {
            set |= 1 << i;
        }
    });
    set
}

/// The words `score_all_words` scores a query by: every word, stop words included, each once.
pub(crate) fn query_words(query: &str) -> Vec<String> {
    let mut words: Vec<String> = Vec::new();
    for_each_word(query, &mut String::new(), |w| words.push(w.to_owned()));
    words.sort_unstable();
    words.dedup();
    words
}

/// One document in a term's postings: its key, the term's frequency in it, and its length in
/// terms (kept here so scoring reads one array, not a map per posting).
#[derive(Debug, Clone, Copy)]
struct Posting {
    key: u64,
    tf: u32,
    len: u32,
}

/// One term's postings, in insertion order, possibly with stale entries of removed documents;
/// `df` counts only live documents.
#[derive(Debug, Default)]
struct Postings {
    entries: Vec<Posting>,
    df: u32,
}

/// Terms interned to dense ids (`0, 1, 2, ...` in order of first use), their bytes in one
/// buffer. At 1M memories of the server bench (8M distinct terms) a boxed string and a 24-byte
/// map entry per term were a third of the index; here a term costs its bytes, a start offset
/// and a 4-byte table slot.
#[derive(Debug, Default)]
struct Terms {
    bytes: String,
    /// Where each term starts in `bytes`; a term ends where the next starts (the last at the
    /// end of `bytes`).
    starts: Vec<usize>,
    /// Ids, hashed by their term's bytes.
    ids: hashbrown::HashTable<u32>,
    hasher: foldhash::fast::FixedState,
}

impl Terms {
    fn len(&self) -> usize {
        self.starts.len()
    }

    fn term(&self, id: u32) -> &str {
        term_of(&self.bytes, &self.starts, id)
    }

    fn get(&self, term: &str) -> Option<u32> {
        self.find(term, self.hasher.hash_one(term))
    }

    fn find(&self, term: &str, hash: u64) -> Option<u32> {
        let (bytes, starts) = (&self.bytes, &self.starts);
        self.ids
            .find(hash, |&id| term_of(bytes, starts, id) == term)
            .copied()
    }

    /// The id of `term`, interning it first if it is new; `None` past `u32::MAX` terms.
    fn intern(&mut self, term: &str) -> Option<u32> {
        // Hashed once: `add` interns every word of every record an open loads.
        let hash = self.hasher.hash_one(term);
        if let Some(id) = self.find(term, hash) {
            return Some(id);
        }
        let id = u32::try_from(self.starts.len()).ok()?;
        self.starts.push(self.bytes.len());
        self.bytes.push_str(term);
        let (bytes, starts, hasher) = (&self.bytes, &self.starts, &self.hasher);
        self.ids
            .insert_unique(hash, id, |&id| hasher.hash_one(term_of(bytes, starts, id)));
        Some(id)
    }
}

/// Term `id` of a `Terms` buffer; empty for an id it does not hold.
fn term_of<'a>(bytes: &'a str, starts: &[usize], id: u32) -> &'a str {
    let i = id as usize;
    let start = starts.get(i).copied().unwrap_or(bytes.len());
    let end = starts.get(i + 1).copied().unwrap_or(bytes.len());
    bytes.get(start..end).unwrap_or_default()
}

/// Query terms the index holds, each with its postings and idf.
type TermWeights<'a> = Vec<(&'a str, &'a Postings, f64)>;

/// The inverted index of one user's live memories.
#[derive(Debug, Default)]
pub(crate) struct KeywordIndex {
    /// Each term's id: its place in `postings`.
    terms: Terms,
    postings: Vec<Postings>,
    /// Live documents and their lengths in terms.
    lengths: HashMap<u64, u32>,
    total_length: u64,
    /// Postings entries of removed documents not yet purged.
    stale: usize,
    /// The largest key ever added (sizes the dense score accumulator).
    max_key: u64,
    /// How many live documents hold each stop word (by its place in `STOP_WORDS`): their
    /// idf for `score_all_words`. Stop words have no postings: they never find a document.
    stop_df: Vec<u32>,
    /// Reused by `add`: the term ids of the document, and a lowercased word.
    scratch: (Vec<u32>, String),
}

/// Postings entries of removed documents tolerated before a purge: at least this many, and
/// more than the live entries.
const PURGE_AT_LEAST: usize = 4096;

impl KeywordIndex {
    /// Indexes a document; a key already present is left as it is (content never changes
    /// under an id).
    pub(crate) fn add(&mut self, key: u64, content: &str) {
        if self.lengths.contains_key(&key) {
            return;
        }
        let (doc, lower) = &mut self.scratch;
        doc.clear();
        let (terms, postings) = (&mut self.terms, &mut self.postings);
        let mut stops = 0u64;
        // One pass: stop words are counted, every other term is indexed.
        for_each_word(content, lower, |term| {
            if let Some(i) = stop_word_index(term) {
                stops |= 1 << i;
                return;
            }
            let Some(id) = terms.intern(term) else {
                return;
            };
            if postings.len() < terms.len() {
                postings.push(Postings::default());
            }
            doc.push(id);
        });
        let length = u32::try_from(doc.len()).unwrap_or(u32::MAX);
        doc.sort_unstable();
        for run in doc.chunk_by(|a, b| a == b) {
            let Some(p) = run.first().and_then(|&id| postings.get_mut(id as usize)) else {
                continue;
            };
            // Most terms of a large index occur in one document (a name, an id, a typo): a
            // first push would reserve four entries (64 bytes), so reserve one.
            if p.entries.capacity() == 0 {
                p.entries.reserve_exact(1);
            }
            p.entries.push(Posting {
                key,
                tf: u32::try_from(run.len()).unwrap_or(u32::MAX),
                len: length,
            });
            p.df += 1;
        }
        self.max_key = self.max_key.max(key);
        self.lengths.insert(key, length);
        self.total_length += u64::from(length);
        if self.stop_df.len() < STOP_WORDS.len() {
            self.stop_df.resize(STOP_WORDS.len(), 0);
        }
        for (i, df) in self.stop_df.iter_mut().enumerate() {
            *df += u32::from(stops >> i & 1 == 1);
        }
    }

    /// Removes a document (its content is needed to find its terms).
    pub(crate) fn remove(&mut self, key: u64, content: &str) {
        let Some(length) = self.lengths.remove(&key) else {
            return;
        };
        self.total_length -= u64::from(length);
        let stops = stop_words_of(content);
        for (i, df) in self.stop_df.iter_mut().enumerate() {
            *df = df.saturating_sub(u32::from(stops >> i & 1 == 1));
        }
        let mut terms = tokenize(content);
        terms.sort_unstable();
        terms.dedup();
        for t in &terms {
            if let Some(p) = self.postings_mut(t) {
                p.df = p.df.saturating_sub(1);
                self.stale += 1;
            }
        }
        if self.stale >= PURGE_AT_LEAST && self.stale > self.lengths.len() {
            self.purge();
        }
    }

    /// Drops the postings of removed documents, and the terms no live document holds (the
    /// survivors get new ids).
    fn purge(&mut self) {
        let lengths = &self.lengths;
        let old = std::mem::take(&mut self.terms);
        let mut kept = Vec::new();
        for (id, mut p) in (0..).zip(std::mem::take(&mut self.postings)) {
            if p.df == 0 {
                continue;
            }
            if self.terms.intern(old.term(id)).is_some() {
                p.entries.retain(|e| lengths.contains_key(&e.key));
                kept.push(p);
            }
        }
        self.postings = kept;
        self.stale = 0;
    }

    fn postings(&self, term: &str) -> Option<&Postings> {
        let id = self.terms.get(term)?;
        self.postings.get(id as usize)
    }

    fn postings_mut(&mut self, term: &str) -> Option<&mut Postings> {
        let id = self.terms.get(term)?;
        self.postings.get_mut(id as usize)
    }

    /// The distinct terms of `terms` that the index holds, with their idf; and the average
    /// document length. `None` when the index is empty.
    fn weights<'a>(&'a self, terms: &'a [String]) -> Option<(TermWeights<'a>, f64)> {
        let n = self.lengths.len();
        if n == 0 {
            return None;
        }
        #[expect(clippy::cast_precision_loss, reason = "BM25 is approximate")]
        let (n, avg) = (n as f64, self.total_length as f64 / n as f64);
        let mut seen: Vec<&str> = Vec::new();
        let mut out = Vec::new();
        for term in terms {
            if seen.contains(&term.as_str()) {
                continue;
            }
            seen.push(term);
            if let Some(p) = self.postings(term)
                && p.df > 0
            {
                let df = f64::from(p.df);
                out.push((term.as_str(), p, (1.0 + (n - df + 0.5) / (df + 0.5)).ln()));
            }
        }
        Some((out, avg))
    }

    /// BM25 of every live document that holds at least one of `terms` and passes `accept`
    /// (each distinct term counted once):
    /// `Σ idf(t) · tf·(k1+1) / (tf + k1·(1 − b + b·len/avg_len))`, with
    /// `idf(t) = ln(1 + (N − df + 0.5)/(df + 0.5))`. `accept` must refuse removed documents
    /// (a selection of live keys does). Scores accumulate in a dense array when the keys are
    /// dense enough, else in a map.
    pub(crate) fn scores(&self, terms: &[String], accept: impl Fn(u64) -> bool) -> Vec<(u64, f32)> {
        let Some((weights, avg)) = self.weights(terms) else {
            return Vec::new();
        };
        let span = usize::try_from(self.max_key)
            .unwrap_or(usize::MAX)
            .saturating_add(1);
        let mut out = Vec::new();
        if span <= self.lengths.len().saturating_mul(8) {
            let mut acc = vec![0.0f32; span];
            let mut touched = Vec::new();
            for (_, p, idf) in &weights {
                for e in &p.entries {
                    let Some(slot) = usize::try_from(e.key).ok().and_then(|i| acc.get_mut(i))
                    else {
                        continue;
                    };
                    if *slot == 0.0 {
                        touched.push(e.key);
                    }
                    *slot += term_score(*idf, e.tf, e.len, avg);
                }
            }
            for key in touched {
                if accept(key)
                    && let Some(&s) = usize::try_from(key).ok().and_then(|i| acc.get(i))
                {
                    out.push((key, s));
                }
            }
        } else {
            let mut acc: HashMap<u64, f32> = HashMap::new();
            for (_, p, idf) in &weights {
                for e in &p.entries {
                    *acc.entry(e.key).or_insert(0.0) += term_score(*idf, e.tf, e.len, avg);
                }
            }
            out.extend(acc.into_iter().filter(|(k, _)| accept(*k)));
        }
        out
    }

    /// BM25 of one document for every word of `query`, stop words included (their idf from
    /// how many live documents hold them), as a plain BM25 over all words scores it: the
    /// hybrid mode's keyword score of a candidate (`docs/search.md`, "Modes"). Lengths are
    /// counted in terms, as `scores` counts them. `None` if it holds none of the words.
    /// `words` is `query_words(query)`, read once per search.
    pub(crate) fn score_all_words(&self, words: &[String], content: &str) -> Option<f32> {
        let n = self.lengths.len();
        if n == 0 {
            return None;
        }
        #[expect(clippy::cast_precision_loss, reason = "BM25 is approximate")]
        let (n, avg) = (n as f64, self.total_length as f64 / n as f64);
        let mut doc: Vec<String> = Vec::new();
        for_each_word(content, &mut String::new(), |w| doc.push(w.to_owned()));
        let len =
            u32::try_from(doc.iter().filter(|w| !is_stop_word(w)).count()).unwrap_or(u32::MAX);
        let mut total = 0.0f32;
        let mut any = false;
        for w in words {
            let df = match stop_word_index(w) {
                Some(i) => self.stop_df.get(i).copied().unwrap_or(0),
                None => self.postings(w).map_or(0, |p| p.df),
            };
            let tf = doc.iter().filter(|d| *d == w).count();
            if df == 0 || tf == 0 {
                continue;
            }
            let df = f64::from(df);
            let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
            any = true;
            total += term_score(idf, u32::try_from(tf).unwrap_or(u32::MAX), len, avg);
        }
        any.then_some(total)
    }

    /// BM25 of one document given its content, equal to what `scores` gives it (same terms,
    /// same order of addition); `None` if it holds none of the terms.
    pub(crate) fn score_of(&self, terms: &[String], content: &str) -> Option<f32> {
        let (weights, avg) = self.weights(terms)?;
        let doc = tokenize(content);
        let len = u32::try_from(doc.len()).unwrap_or(u32::MAX);
        let mut total = 0.0f32;
        let mut any = false;
        for (term, _, idf) in &weights {
            let tf = doc.iter().filter(|w| w.as_str() == *term).count();
            if tf > 0 {
                any = true;
                total += term_score(*idf, u32::try_from(tf).unwrap_or(u32::MAX), len, avg);
            }
        }
        any.then_some(total)
    }
}

/// One term's share of a document's BM25.
fn term_score(idf: f64, tf: u32, len: u32, avg: f64) -> f32 {
    let (k1, b) = (f64::from(BM25_K1), f64::from(BM25_B));
    let tf = f64::from(tf);
    let norm = if avg > 0.0 {
        1.0 - b + b * f64::from(len) / avg
    } else {
        1.0
    };
    #[expect(clippy::cast_possible_truncation, reason = "scores are f32")]
    let s = (idf * tf * (k1 + 1.0) / (tf + k1 * norm)) as f32;
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokenize_keeps_codes_and_identifiers_and_drops_stop_words() {
        assert_eq!(
            tokenize("The E4137 error in parse_config_v2() -- is it Café?"),
            ["e4137", "error", "parse_config_v2", "café"]
        );
        assert!(tokenize("the, of; and!").is_empty());
    }

    #[test]
    fn all_words_scoring_counts_stop_words_by_their_own_idf() {
        let mut index = KeywordIndex::default();
        index.add(1, "a man is in the water");
        index.add(2, "a man is on the water");
        index.add(3, "a dog sleeps");
        let (inside, on) = (
            index.score_all_words(&query_words("man in water"), "a man is in the water"),
            index.score_all_words(&query_words("man in water"), "a man is on the water"),
        );
        assert!(inside.unwrap() > on.unwrap(), "{inside:?} {on:?}");
        // The stop word alone finds its documents' score, and leaves with them.
        assert!(
            index
                .score_all_words(&query_words("on"), "a man is on the water")
                .is_some()
        );
        index.remove(2, "a man is on the water");
        assert_eq!(
            index.score_all_words(&query_words("on"), "a man is on the water"),
            None
        );
        // Stop words still find nothing through the postings.
        assert!(index.scores(&tokenize("in"), |_| true).is_empty());
    }

    #[test]
    fn stop_words_are_sorted_and_short() {
        assert!(STOP_WORDS.is_sorted(), "binary search needs them sorted");
        assert!(STOP_WORDS.iter().all(|w| w.len() <= STOP_WORD_MAX_LEN));
        for w in STOP_WORDS {
            assert!(is_stop_word(w), "{w}");
        }
    }

    #[test]
    fn terms_are_lowercased_as_str_to_lowercase_does() {
        // Mixed case ASCII, non-ASCII with context rules (final sigma), and stop words in
        // capitals: the same terms as splitting and `str::to_lowercase`.
        let text = "Parse_CONFIG the The ΟΔΟΣ Straße ÉCOLE x_Y2 THE";
        let expected: Vec<String> = text
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .filter(|w| !w.is_empty())
            .map(str::to_lowercase)
            .filter(|w| !STOP_WORDS.contains(&w.as_str()))
            .collect();
        assert_eq!(tokenize(text), expected);
        assert_eq!(expected.len(), 5);
    }

    #[test]
    fn terms_intern_each_string_once_and_give_it_back() {
        // Enough terms for the table to grow many times; repeats, prefixes of each other,
        // non-ASCII and an empty string.
        let mut terms = Terms::default();
        let mut model: std::collections::HashMap<String, u32> = Default::default();
        for i in 0..50_000u32 {
            let s = match i % 5 {
                0 => format!("t{}", i / 3),
                1 => format!("t{}x", i / 7),
                2 => format!("café{}", i % 101),
                3 => String::new(),
                _ => format!("{i}"),
            };
            let next = u32::try_from(model.len()).unwrap();
            let want = *model.entry(s.clone()).or_insert(next);
            assert_eq!(terms.intern(&s), Some(want), "{s:?}");
        }
        assert_eq!(terms.len(), model.len());
        for (s, &id) in &model {
            assert_eq!(terms.get(s), Some(id));
            assert_eq!(terms.term(id), s);
        }
        assert_eq!(terms.get("absent"), None);
    }

    #[test]
    fn removed_documents_stop_counting_and_are_purged() {
        let mut ix = KeywordIndex::default();
        for k in 0..10_000u64 {
            ix.add(k, if k % 2 == 0 { "alpha beta" } else { "alpha" });
        }
        for k in 0..9_990u64 {
            ix.remove(k, if k % 2 == 0 { "alpha beta" } else { "alpha" });
        }
        assert_eq!(ix.lengths.len(), 10);
        let live = |k: u64| k >= 9_990;
        let s = ix.scores(&["beta".into()], live);
        assert_eq!(s.len(), 5, "only live documents score");
        assert!(ix.stale < PURGE_AT_LEAST + 2, "purged: {}", ix.stale);
        let fresh = {
            let mut f = KeywordIndex::default();
            for k in 9_990..10_000u64 {
                f.add(k, if k % 2 == 0 { "alpha beta" } else { "alpha" });
            }
            let mut s = f.scores(&["beta".into(), "alpha".into()], |_| true);
            s.sort_by_key(|x| x.0);
            s
        };
        let mut after = ix.scores(&["beta".into(), "alpha".into()], live);
        after.sort_by_key(|x| x.0);
        assert_eq!(after, fresh);
        for (key, score) in &fresh {
            let content = if key % 2 == 0 { "alpha beta" } else { "alpha" };
            assert_eq!(
                ix.score_of(&["beta".into(), "alpha".into()], content),
                Some(*score)
            );
        }
    }
}
