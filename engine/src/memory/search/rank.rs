//! The strategies' scores: recency, frequency, importance and the tag boost.

use super::request::*;
use crate::kernel::record::{Memory, Timestamp};

/// `freshness` and `novelty` combined: `0.6·2^(−days since access / 7) + 0.4·2^(−days since
/// created / 30)`.
#[must_use]
pub fn recency(m: &Memory, now: Timestamp) -> f32 {
    let days = |t: Timestamp| {
        #[expect(clippy::cast_precision_loss, reason = "days, approximately")]
        let d = (now.0 - t.0).max(0) as f64 / 86_400_000_000.0;
        d
    };
    let (h_access, h_created) = RECENCY_HALF_LIVES_DAYS;
    let fresh = (-days(m.last_accessed_at) / h_access).exp2();
    let novel = (-days(m.created_at) / h_created).exp2();
    #[expect(clippy::cast_possible_truncation, reason = "scores are f32")]
    let r = (0.6 * fresh + 0.4 * novel) as f32;
    r
}

/// `a / (a + 5)` for `a` accesses: 0 for none, one half at five, towards 1.
#[must_use]
pub fn frequency(m: &Memory) -> f32 {
    #[expect(clippy::cast_precision_loss, reason = "a count")]
    let a = m.access_count as f64;
    #[expect(clippy::cast_possible_truncation, reason = "scores are f32")]
    let f = (a / (a + FREQUENCY_HALF)) as f32;
    f
}

/// `0.5·confidence + 0.3·(helpful+1)/(helpful+harmful+2) + 0.2·frequency`.
#[must_use]
pub fn importance(m: &Memory) -> f32 {
    let h = f64::from(m.helpful_count);
    let x = f64::from(m.harmful_count);
    #[expect(clippy::cast_possible_truncation, reason = "scores are f32")]
    let feedback = ((h + 1.0) / (h + x + 2.0)) as f32;
    0.5 * m.confidence + 0.3 * feedback + 0.2 * frequency(m)
}

/// `0.1 · min(1, max weight)` over the memory's tags that the query names, a tag's weight
/// being `1/ln(1 + frequency)`: a tag on one memory boosts by the full 0.1, one on 100 by 0.02.
pub(super) fn tag_boost(
    m: &Memory,
    query_tags: &[String],
    freq: Option<&std::collections::BTreeMap<String, u64>>,
) -> f32 {
    let Some(freq) = freq else { return 0.0 };
    let best = m
        .tags
        .iter()
        .filter(|t| query_tags.contains(t))
        .filter_map(|t| freq.get(t))
        .map(|f| {
            #[expect(clippy::cast_precision_loss, reason = "a count")]
            let w = 1.0 / (1.0 + *f as f64).ln();
            w
        })
        .fold(0.0f64, f64::max);
    #[expect(clippy::cast_possible_truncation, reason = "scores are f32")]
    let b = TAG_BOOST * best.min(1.0) as f32;
    b
}

/// The score `strategy` gives a memory of relevance `r`.
#[must_use]
pub fn strategy_score(strategy: Strategy, m: &Memory, r: f32, boost: f32, now: Timestamp) -> f32 {
    match strategy {
        Strategy::Similarity => r,
        Strategy::Composite => {
            0.6 * r + 0.2 * recency(m, now) + 0.1 * importance(m) + 0.1 * frequency(m) + boost
        }
        Strategy::Recency => 0.4 * r + 0.6 * recency(m, now) + boost,
        Strategy::Frequency => 0.4 * r + 0.6 * frequency(m) + boost,
        Strategy::Importance => 0.4 * r + 0.6 * importance(m) + boost,
    }
}
