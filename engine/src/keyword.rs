//! The keyword index: an inverted index over memory content, one per user, scored with BM25
//! (`docs/search.md`, "Keyword").
//!
//! Guarantees: after any sequence of `add` and `remove`, scores equal BM25 computed from
//! scratch over the live documents (document frequencies, lengths and the average length are
//! kept exactly; removed documents leave stale postings that are skipped and purged once they
//! outnumber the live ones). Derived state: never written to disk, rebuilt from the records
//! when a store opens (from the checkpoint and the log after it).

use std::collections::HashMap;

/// BM25 term-frequency saturation.
pub const BM25_K1: f32 = 1.2;
/// BM25 length normalization.
pub const BM25_B: f32 = 0.75;

/// Words that carry no meaning for a keyword search; a query made only of these (or of
/// punctuation) has no terms, and the search falls back to text (`docs/search.md`).
const STOP_WORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "from", "has", "have", "he",
    "her", "his", "i", "if", "in", "into", "is", "it", "its", "me", "my", "no", "not", "of", "on",
    "or", "our", "she", "so", "such", "that", "the", "their", "then", "there", "these", "they",
    "this", "to", "was", "we", "were", "what", "when", "where", "which", "who", "will", "with",
    "you", "your",
];

/// The terms of `text`: maximal runs of letters, digits and `_`, lowercased, stop words
/// removed. `E4137`, `parse_config_v2` and `café` are one term each.
#[must_use]
pub fn tokenize(text: &str) -> Vec<String> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .filter(|w| !STOP_WORDS.contains(&w.as_str()))
        .collect()
}

/// One term's postings: `(document, term frequency)`, in insertion order, possibly with stale
/// entries of removed documents; `df` counts only live documents.
#[derive(Debug, Default)]
struct Postings {
    entries: Vec<(u64, u32)>,
    df: u32,
}

/// The inverted index of one user's live memories.
#[derive(Debug, Default)]
pub(crate) struct KeywordIndex {
    terms: HashMap<String, Postings>,
    /// Live documents and their lengths in terms.
    lengths: HashMap<u64, u32>,
    total_length: u64,
    /// Postings entries of removed documents not yet purged.
    stale: usize,
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
        let terms = tokenize(content);
        let length = u32::try_from(terms.len()).unwrap_or(u32::MAX);
        let mut counts: HashMap<String, u32> = HashMap::new();
        for t in terms {
            *counts.entry(t).or_insert(0) += 1;
        }
        for (term, tf) in counts {
            let p = self.terms.entry(term).or_default();
            p.entries.push((key, tf));
            p.df += 1;
        }
        self.lengths.insert(key, length);
        self.total_length += u64::from(length);
    }

    /// Removes a document (its content is needed to find its terms).
    pub(crate) fn remove(&mut self, key: u64, content: &str) {
        let Some(length) = self.lengths.remove(&key) else {
            return;
        };
        self.total_length -= u64::from(length);
        let mut terms = tokenize(content);
        terms.sort_unstable();
        terms.dedup();
        for t in &terms {
            if let Some(p) = self.terms.get_mut(t) {
                p.df = p.df.saturating_sub(1);
                self.stale += 1;
            }
        }
        if self.stale >= PURGE_AT_LEAST && self.stale > self.lengths.len() {
            self.purge();
        }
    }

    fn purge(&mut self) {
        let lengths = &self.lengths;
        self.terms.retain(|_, p| {
            p.entries.retain(|(k, _)| lengths.contains_key(k));
            p.df > 0
        });
        self.stale = 0;
    }

    /// BM25 of every live document that holds at least one of `terms` (each distinct term
    /// counted once):
    /// `Σ idf(t) · tf·(k1+1) / (tf + k1·(1 − b + b·len/avg_len))`, with
    /// `idf(t) = ln(1 + (N − df + 0.5)/(df + 0.5))`.
    pub(crate) fn scores(&self, terms: &[String]) -> HashMap<u64, f32> {
        let mut out: HashMap<u64, f32> = HashMap::new();
        let n = self.lengths.len();
        if n == 0 {
            return out;
        }
        #[expect(clippy::cast_precision_loss, reason = "BM25 is approximate")]
        let (n, avg) = (n as f64, self.total_length as f64 / n as f64);
        let mut seen: Vec<&str> = Vec::new();
        for term in terms {
            if seen.contains(&term.as_str()) {
                continue;
            }
            seen.push(term);
            let Some(p) = self.terms.get(term) else {
                continue;
            };
            if p.df == 0 {
                continue;
            }
            let df = f64::from(p.df);
            let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
            let (k1, b) = (f64::from(BM25_K1), f64::from(BM25_B));
            for &(key, tf) in &p.entries {
                let Some(&len) = self.lengths.get(&key) else {
                    continue;
                };
                let tf = f64::from(tf);
                let norm = if avg > 0.0 {
                    1.0 - b + b * f64::from(len) / avg
                } else {
                    1.0
                };
                #[expect(clippy::cast_possible_truncation, reason = "scores are f32")]
                let s = (idf * tf * (k1 + 1.0) / (tf + k1 * norm)) as f32;
                *out.entry(key).or_insert(0.0) += s;
            }
        }
        out
    }
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
    fn removed_documents_stop_counting_and_are_purged() {
        let mut ix = KeywordIndex::default();
        for k in 0..10_000u64 {
            ix.add(k, if k % 2 == 0 { "alpha beta" } else { "alpha" });
        }
        for k in 0..9_990u64 {
            ix.remove(k, if k % 2 == 0 { "alpha beta" } else { "alpha" });
        }
        assert_eq!(ix.lengths.len(), 10);
        let s = ix.scores(&["beta".into()]);
        assert_eq!(s.len(), 5, "only live documents score");
        assert!(ix.stale < PURGE_AT_LEAST + 2, "purged: {}", ix.stale);
        let fresh = {
            let mut f = KeywordIndex::default();
            for k in 9_990..10_000u64 {
                f.add(k, if k % 2 == 0 { "alpha beta" } else { "alpha" });
            }
            f.scores(&["beta".into(), "alpha".into()])
        };
        assert_eq!(ix.scores(&["beta".into(), "alpha".into()]), fresh);
    }
}
