//! The learned judge of store-time merges (`docs/semantics.md`, "Dedup at store time"; issue
//! #44): a logistic regression over what the fact guard already reads of two statements (their
//! cosine, the content words they share and do not, names, subject and predicate), trained on public labelled paraphrase pairs by `benches/src/bin/train_judge.rs`,
//! which writes the weights into `judge_weights.rs` with the data they came from.
//!
//! Guarantees: deterministic, a few hundred nanoseconds per pair after the guard's reading;
//! consulted only for pairs within the dedup distance that the guard's rules read as the same
//! statement in other words (or with detail added). It never turns a rule's "different fact",
//! "unsure" or "new value" into a merge: those rules read the words that decide (a number, a
//! negation, another subject).

use super::facts::{Decision, Reading, Relation, reading, signals_of};

mod weights {
    include!("judge_weights.rs");
}
mod bge_small_weights {
    include!("judge_weights_bge_small.rs");
}

/// The names of the judge's features, in the order of its weights.
pub const FEATURES: [&str; 12] = [
    "bias",
    "cosine",
    "content-word jaccard",
    "share of the older's words the newer lacks",
    "share of the newer's words the older lacks",
    "one side's words are all in the other",
    "a name only one side has",
    "the same predicate wording",
    "the subjects differ",
    "length ratio (|log|)",
    "cosine × jaccard",
    "words that differ (/10, at most 1)",
];

/// The judge's features of a pair, in `FEATURES` order.
pub(crate) fn features_of(older: &Reading, newer: &Reading, cosine: f32) -> [f32; 12] {
    let s = signals_of(older, newer);
    #[expect(
        clippy::cast_precision_loss,
        reason = "word counts of one statement are far below 2^24"
    )]
    let count = |n: usize| n as f32;
    let flag = |b: bool| if b { 1.0 } else { 0.0 };
    let union = count(s.words.0 + s.words.1 - s.shared).max(1.0);
    let jaccard = count(s.shared) / union;
    let share = |only: usize, words: usize| count(only) / count(words).max(1.0);
    [
        1.0,
        cosine,
        jaccard,
        share(s.only.0, s.words.0),
        share(s.only.1, s.words.1),
        flag(s.only.0 == 0 || s.only.1 == 0),
        flag(s.name_differs),
        flag(s.same_predicate),
        flag(s.subject_differs),
        ((1.0 + count(s.words.0)) / (1.0 + count(s.words.1)))
            .ln()
            .abs(),
        cosine * jaccard,
        (count(s.only.0 + s.only.1) / 10.0).min(1.0),
    ]
}

/// The features of two texts as the judge sees them (for its training script and its tests).
#[must_use]
pub fn features(older: &str, newer: &str, cosine: f32) -> [f32; 12] {
    features_of(&reading(older), &reading(newer), cosine)
}

/// Whether the guard's reading leaves the pair to the judge: the same statement in other
/// words.
#[must_use]
pub fn consulted(decision: &Decision) -> bool {
    decision.relation == Relation::Duplicate
}

/// A judge's weights: one per feature, in `FEATURES` order, and the probability at or above
/// which it merges (the lowest at which its merges on the training pairs were at least 99 %
/// right). Each model has its own (`Calibration::judge`): the cosine is one of the features.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct JudgeWeights {
    /// One weight per feature.
    pub weights: [f32; 12],
    /// The probability at or above which it merges.
    pub threshold: f32,
}

/// The judge trained on MiniLM's cosines (`judge_weights.rs`).
pub const MINILM: JudgeWeights = JudgeWeights {
    weights: weights::WEIGHTS,
    threshold: weights::THRESHOLD,
};

/// The judge trained on bge-small's cosines (`judge_weights_bge_small.rs`).
pub const BGE_SMALL: JudgeWeights = JudgeWeights {
    weights: bge_small_weights::WEIGHTS,
    threshold: bge_small_weights::THRESHOLD,
};

impl JudgeWeights {
    /// The probability that two statements say the same, from their features.
    #[must_use]
    pub fn probability(&self, features: &[f32; 12]) -> f32 {
        let z: f32 = features.iter().zip(self.weights).map(|(x, w)| x * w).sum();
        1.0 / (1.0 + (-z).exp())
    }

    /// Whether this judge merges a pair the guard left to it.
    pub(crate) fn merges(
        &self,
        older: &Reading,
        newer: &Reading,
        decision: &Decision,
        cosine: f32,
    ) -> bool {
        consulted(decision)
            && self.probability(&features_of(older, newer, cosine)) >= self.threshold
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(older: &str, newer: &str, cosine: f32) -> f32 {
        MINILM.probability(&features(older, newer, cosine))
    }

    #[test]
    fn a_restatement_scores_above_a_near_miss() {
        let same = p(
            "The user likes coffee, usually a flat white",
            "User likes coffee, flat white usually",
            0.95,
        );
        let other = p(
            "User prefers dark mode in the editor",
            "User prefers light mode in the terminal",
            0.80,
        );
        assert!(same > other, "{same} <= {other}");
        assert!(other < MINILM.threshold, "a near miss merges: {other}");
    }

    #[test]
    fn the_features_read_the_words_that_differ() {
        let f = features("a dog runs", "a dog runs", 1.0);
        assert!((f[2] - 1.0).abs() < f32::EPSILON && f[11] == 0.0, "{f:?}");
        let f = features("Ada lives in Paris", "Ada lives in Paris with Bob", 0.9);
        // Nothing the newer lacks; one name only the newer has; one content word differs.
        assert!(
            f[3] == 0.0 && f[4] > 0.0 && (f[6] - 1.0).abs() < f32::EPSILON,
            "{f:?}"
        );
        assert!((f[11] - 0.1).abs() < 1e-6, "{f:?}");
    }
}
