//! Plain baselines that anything deciding what a user finds is judged beside (STYLE.md 33):
//! exact cosine, BM25 and a 0.7·cosine + 0.3·BM25/max mix over the same texts and vectors.
//! Written here on purpose, sharing no code with the engine's search, so a defect there
//! cannot hide in the baseline too.
//!
//! BM25 is the textbook one: k1 1.2, b 0.75, `idf = ln(1 + (N − df + 0.5) / (df + 0.5))`,
//! words are maximal runs of alphanumeric characters, lowercased, nothing removed.

use std::collections::HashMap;

/// BM25's term-frequency saturation.
const K1: f32 = 1.2;
/// BM25's length normalization.
const B: f32 = 0.75;
/// The mix's weights: cosine, then BM25 divided by the best BM25 of the query.
pub const MIX: (f32, f32) = (0.7, 0.3);

/// The words BM25 counts.
#[must_use]
pub fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// The three baselines over one corpus.
pub struct Baselines<'a> {
    vectors: Vec<&'a [f32]>,
    postings: HashMap<String, Vec<(usize, u32)>>,
    lengths: Vec<u32>,
    mean_length: f32,
}

/// Each baseline's top rows (indices into the corpus), best first.
pub struct Ranked {
    /// By exact cosine (dot product of unit vectors).
    pub cosine: Vec<usize>,
    /// By BM25; rows without a query word never rank.
    pub bm25: Vec<usize>,
    /// By `0.7·max(0, cos) + 0.3·bm25/max bm25`.
    pub mix: Vec<usize>,
}

impl<'a> Baselines<'a> {
    /// Indexes `texts` with their unit `vectors` (the same order).
    #[must_use]
    pub fn new(texts: &[&str], vectors: &[&'a [f32]]) -> Baselines<'a> {
        let mut postings: HashMap<String, Vec<(usize, u32)>> = HashMap::new();
        let mut lengths = Vec::with_capacity(texts.len());
        for (row, t) in texts.iter().enumerate() {
            let ws = words(t);
            lengths.push(u32::try_from(ws.len()).unwrap_or(u32::MAX));
            let mut tf: HashMap<String, u32> = HashMap::new();
            for w in ws {
                *tf.entry(w).or_default() += 1;
            }
            for (w, n) in tf {
                postings.entry(w).or_default().push((row, n));
            }
        }
        let total: f64 = lengths.iter().map(|l| f64::from(*l)).sum();
        #[expect(clippy::cast_possible_truncation, reason = "a mean length")]
        let mean_length = (total / lengths.len().max(1) as f64) as f32;
        Baselines {
            vectors: vectors.to_vec(),
            postings,
            lengths,
            mean_length,
        }
    }

    /// BM25 of every row for `query` (0 for rows without a query word).
    #[must_use]
    pub fn bm25(&self, query: &str) -> Vec<f32> {
        let mut scores = vec![0.0f32; self.lengths.len()];
        #[expect(clippy::cast_precision_loss, reason = "document counts")]
        let n = self.lengths.len() as f32;
        let mut terms = words(query);
        terms.sort_unstable();
        terms.dedup();
        for t in terms {
            let Some(list) = self.postings.get(&t) else {
                continue;
            };
            #[expect(clippy::cast_precision_loss, reason = "document counts")]
            let df = list.len() as f32;
            let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
            for &(row, tf) in list {
                #[expect(clippy::cast_precision_loss, reason = "term counts")]
                let (tf, len) = (
                    tf as f32,
                    self.lengths.get(row).copied().unwrap_or(0) as f32,
                );
                let norm = K1 * (1.0 - B + B * len / self.mean_length.max(1e-6));
                if let Some(s) = scores.get_mut(row) {
                    *s += idf * tf * (K1 + 1.0) / (tf + norm);
                }
            }
        }
        scores
    }

    /// The top `k` rows of each baseline for `query` with its unit vector `query_vector`.
    #[must_use]
    pub fn rank(&self, query: &str, query_vector: &[f32], k: usize) -> Ranked {
        let cos: Vec<f32> = self
            .vectors
            .iter()
            .map(|v| v.iter().zip(query_vector).map(|(a, b)| a * b).sum())
            .collect();
        let bm25 = self.bm25(query);
        let best = bm25.iter().copied().fold(0.0f32, f32::max);
        let mix: Vec<f32> = cos
            .iter()
            .zip(&bm25)
            .map(|(c, b)| MIX.0 * c.max(0.0) + if best > 0.0 { MIX.1 * b / best } else { 0.0 })
            .collect();
        let top = |scores: &[f32], keep: &dyn Fn(usize) -> bool| {
            let mut rows: Vec<usize> = (0..scores.len()).filter(|r| keep(*r)).collect();
            rows.sort_by(|a, b| {
                let (sa, sb) = (scores.get(*a).copied(), scores.get(*b).copied());
                sb.partial_cmp(&sa)
                    .unwrap_or(std::cmp::Ordering::Equal)
                    .then(a.cmp(b))
            });
            rows.truncate(k);
            rows
        };
        Ranked {
            cosine: top(&cos, &|_| true),
            bm25: top(&bm25, &|r| bm25.get(r).is_some_and(|s| *s > 0.0)),
            mix: top(&mix, &|_| true),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bm25_prefers_the_rare_word_and_the_short_text() {
        let texts = ["the cat sat", "the dog sat on the mat today", "the dog"];
        let v = [1.0f32, 0.0];
        let vectors: Vec<&[f32]> = vec![&v; 3];
        let b = Baselines::new(&texts, &vectors);
        let r = b.rank("dog", &v, 3);
        assert_eq!(r.bm25, vec![2, 1]);
        // "the" is in every text: it scores, but little.
        let s = b.bm25("the cat");
        assert!(s[0] > s[1] && s[1] > 0.0);
    }
}
