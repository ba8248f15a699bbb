//! `HashingEmbedder`: a deterministic, no-model embedder (feature hashing of weighted terms).
//!
//! Tokenization (the rules of the seed's TF-IDF search module):
//! 1. Lowercase.
//! 2. Split on every character that is not alphanumeric, `_`, `+` or `#`, so identifiers
//!    (`snake_case`) and programming terms (`c++`, `c#`, `f#`) stay whole; a `.` inside a word
//!    is kept too (`node.js`, `v1.2`), a trailing one is not.
//! 3. Drop English stop-words (`STOP_WORDS`) and tokens that are only punctuation.
//!
//! Weighting: each unigram weighs `1 + ln(tf)` (sublinear term frequency) times an IDF proxy
//! that favours longer, rarer-looking tokens, `1 + ln(len)/4`; adjacent unigram pairs add
//! bigram features at half weight. A true corpus IDF is not used on purpose: it would change
//! stored vectors as the corpus grows. Each feature is hashed (FNV-1a, 64-bit) to one of `dim`
//! buckets with a sign from another bit, then the vector is L2-normalized. Text with no tokens
//! embeds to the zero vector, which scores 0 against everything.

use crate::{EmbedError, Embedder};
use std::collections::HashMap;

/// English stop-words dropped before hashing.
pub const STOP_WORDS: &[&str] = &[
    "a",
    "about",
    "above",
    "after",
    "again",
    "against",
    "all",
    "am",
    "an",
    "and",
    "any",
    "are",
    "as",
    "at",
    "be",
    "because",
    "been",
    "before",
    "being",
    "below",
    "between",
    "both",
    "but",
    "by",
    "can",
    "could",
    "did",
    "do",
    "does",
    "doing",
    "down",
    "during",
    "each",
    "few",
    "for",
    "from",
    "further",
    "had",
    "has",
    "have",
    "having",
    "he",
    "her",
    "here",
    "hers",
    "herself",
    "him",
    "himself",
    "his",
    "how",
    "i",
    "if",
    "in",
    "into",
    "is",
    "it",
    "its",
    "itself",
    "just",
    "me",
    "more",
    "most",
    "my",
    "myself",
    "no",
    "nor",
    "not",
    "now",
    "of",
    "off",
    "on",
    "once",
    "only",
    "or",
    "other",
    "our",
    "ours",
    "ourselves",
    "out",
    "over",
    "own",
    "same",
    "she",
    "should",
    "so",
    "some",
    "such",
    "than",
    "that",
    "the",
    "their",
    "theirs",
    "them",
    "themselves",
    "then",
    "there",
    "these",
    "they",
    "this",
    "those",
    "through",
    "to",
    "too",
    "under",
    "until",
    "up",
    "very",
    "was",
    "we",
    "were",
    "what",
    "when",
    "where",
    "which",
    "while",
    "who",
    "whom",
    "why",
    "will",
    "with",
    "would",
    "you",
    "your",
    "yours",
    "yourself",
    "yourselves",
];

/// Splits `text` into tokens by the rules in the module doc.
#[must_use]
pub fn tokenize(text: &str) -> Vec<String> {
    let lower = text.to_lowercase();
    let mut out = Vec::new();
    for raw in lower.split(|c: char| !(c.is_alphanumeric() || matches!(c, '_' | '+' | '#' | '.'))) {
        let token = raw.trim_matches('.');
        if token.chars().any(char::is_alphanumeric) && !STOP_WORDS.contains(&token) {
            out.push(token.to_owned());
        }
    }
    out
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The deterministic no-model embedder. Same text, same vector, on every machine.
#[derive(Debug, Clone)]
pub struct HashingEmbedder {
    dim: usize,
    model_id: String,
}

impl HashingEmbedder {
    /// The default: 384 dimensions, like MiniLM, so stores can switch by re-embedding only.
    #[must_use]
    pub fn new() -> HashingEmbedder {
        HashingEmbedder::with_dim(384)
    }

    /// A hashing embedder of `dim` dimensions (at least 1).
    #[must_use]
    pub fn with_dim(dim: usize) -> HashingEmbedder {
        let dim = dim.max(1);
        HashingEmbedder {
            dim,
            model_id: format!("amberdb-hashing-v1-{dim}"),
        }
    }

    fn add(&self, v: &mut [f32], feature: &str, weight: f32) {
        let h = fnv1a(feature.as_bytes());
        #[expect(
            clippy::cast_possible_truncation,
            reason = "modulo dim, which is a usize"
        )]
        let bucket = (h % self.dim as u64) as usize;
        let sign = if h >> 63 == 0 { 1.0 } else { -1.0 };
        if let Some(x) = v.get_mut(bucket) {
            *x += sign * weight;
        }
    }

    /// Embeds one text.
    #[must_use]
    pub fn embed_one(&self, text: &str) -> Vec<f32> {
        let tokens = tokenize(text);
        let mut tf: HashMap<&str, u32> = HashMap::new();
        for t in &tokens {
            *tf.entry(t.as_str()).or_default() += 1;
        }
        let mut v = vec![0.0f32; self.dim];
        for (term, count) in &tf {
            #[expect(clippy::cast_precision_loss, reason = "small counts and lengths")]
            let weight =
                (1.0 + (*count as f32).ln()) * (1.0 + (term.chars().count() as f32).ln() / 4.0);
            self.add(&mut v, term, weight);
        }
        for pair in tokens.windows(2) {
            if let [a, b] = pair {
                self.add(&mut v, &format!("{a} {b}"), 0.5);
            }
        }
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        if norm > 0.0 {
            v.iter_mut().for_each(|x| *x /= norm);
        }
        v
    }
}

impl Default for HashingEmbedder {
    fn default() -> Self {
        HashingEmbedder::new()
    }
}

impl Embedder for HashingEmbedder {
    fn model_id(&self) -> &str {
        &self.model_id
    }

    fn dim(&self) -> usize {
        self.dim
    }

    fn embed_batch(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts.iter().map(|t| self.embed_one(t)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cos(a: &[f32], b: &[f32]) -> f32 {
        a.iter().zip(b).map(|(x, y)| x * y).sum()
    }

    #[test]
    fn tokenizer_keeps_programming_terms_and_drops_stop_words() {
        assert_eq!(
            tokenize("The C++ and C# code in node.js uses snake_case, F#."),
            vec!["c++", "c#", "code", "node.js", "uses", "snake_case", "f#"]
        );
        assert!(tokenize("the of and ...").is_empty());
    }

    #[test]
    fn vectors_are_unit_deterministic_and_share_words() {
        let e = HashingEmbedder::new();
        let a = e.embed_one("rust borrow checker error in async code");
        let b = e.embed_one("fixing a borrow checker error");
        let c = e.embed_one("recipe for banana bread");
        assert_eq!(a, e.embed_one("rust borrow checker error in async code"));
        assert!((cos(&a, &a) - 1.0).abs() < 1e-5);
        assert!(cos(&a, &b) > 0.4, "{}", cos(&a, &b));
        assert!(cos(&a, &c).abs() < 0.2, "{}", cos(&a, &c));
        assert_eq!(e.embed_one("the of"), vec![0.0; 384]);
    }
}
