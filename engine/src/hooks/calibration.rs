//! What reads an embedder's cosines, per model (issue #58 item 2; `docs/search.md`, "A second
//! embedder"): the store-time dedup distance, the load-time cluster distance, compaction's
//! distance, the tag and category thresholds, the MemFuse query's cut and the learned judge's
//! weights. Each was fitted to one model's scale of cosines, and another model puts the same
//! pairs elsewhere: under bge-small, pairs labelled different in meaning sit at a median
//! cosine of 0.67-0.80, under MiniLM at 0.52-0.73, so MiniLM's numbers would merge and match
//! under bge-small what they must not.
//!
//! Guarantees: a store reads every cosine against the calibration of the model its vectors
//! come from now (`Calibration::of_model` of the current embedder's id, so a re-embedding's
//! switch changes it with the vectors); a setting the user gives (`HookConfig`, a request's
//! overrides) is used as given. MiniLM's calibration is the one every figure before issue
//! #58 item 2 was measured with; the hashing embedder and any model this build does not name
//! read with it, as they always have.

use super::judge::JudgeWeights;

/// One model's thresholds (cosine similarities unless named a distance).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Calibration {
    /// The model ids it is for.
    pub models: &'static [&'static str],
    /// Store-time semantic dedup distance (`HookConfig::dedup_distance` when not set).
    pub dedup_distance: f32,
    /// Load-time cluster distance (`HookConfig::cluster_distance` when not set).
    pub cluster_distance: f32,
    /// Compaction distance (`HookConfig::compaction_distance` when not set).
    pub compaction_distance: f32,
    /// Two tags this similar are one tag.
    pub tag_similarity: f32,
    /// Two versioned tags of the same version this similar are one tag.
    pub tag_related: f32,
    /// Added to a tag pair's similarity when one tag contains the other.
    pub tag_substring_boost: f32,
    /// Two tags with different numbers are one tag only this similar.
    pub number_guard_override: f32,
    /// A category is chosen only this similar to the input.
    pub category_min_similarity: f32,
    /// ... and this much more similar than `other`.
    pub category_margin: f32,
    /// The MemFuse query's similarity cut.
    pub query_threshold: f32,
    /// The learned judge of store-time merges.
    pub judge: JudgeWeights,
}

impl Calibration {
    /// sentence-transformers/all-MiniLM-L6-v2's: the numbers the store was built and measured
    /// with (docs/search.md, "Calibration: defaults that fit MiniLM" and "The learned judge").
    pub const MINILM: Calibration = Calibration {
        models: &["sentence-transformers/all-MiniLM-L6-v2"],
        dedup_distance: 0.35,
        cluster_distance: 0.40,
        compaction_distance: 0.20,
        tag_similarity: 0.90,
        tag_related: 0.85,
        tag_substring_boost: 0.03,
        number_guard_override: 0.95,
        category_min_similarity: 0.50,
        category_margin: 0.10,
        query_threshold: 0.3,
        judge: super::judge::MINILM,
    };

    /// BAAI/bge-small-en-v1.5's: MiniLM's thresholds carried to bge-small's scale by matching
    /// quantiles on the tuning splits' 9,576 labelled pairs (MRPC train, SICK train, STS 2014;
    /// `embedder_eval`, docs/search.md, "A second embedder"): each value is the cosine above
    /// which bge-small puts as many of those pairs as MiniLM puts above MiniLM's value. On the
    /// held-out splits the pairs of different meaning above each mapped value are as many as
    /// MiniLM's or fewer (at the dedup similarity 47.9 % under MiniLM, 46.6 % under
    /// bge-small). Margins scale with the map's slope where they apply (0.55 near the category
    /// threshold, 0.68 near the tag thresholds). The judge is retrained on bge-small's cosines
    /// (`train_judge --embedder bge-small`).
    pub const BGE_SMALL: Calibration = Calibration {
        models: &["BAAI/bge-small-en-v1.5"],
        // 0.65 -> 0.759
        dedup_distance: 0.241,
        // 0.60 -> 0.730
        cluster_distance: 0.270,
        // 0.80 -> 0.858
        compaction_distance: 0.142,
        // 0.90 -> 0.926
        tag_similarity: 0.926,
        // 0.85 -> 0.892
        tag_related: 0.892,
        // 0.03 x 0.68
        tag_substring_boost: 0.020,
        // 0.95 -> 0.962
        number_guard_override: 0.962,
        // 0.50 -> 0.675
        category_min_similarity: 0.675,
        // 0.10 x 0.55
        category_margin: 0.055,
        // 0.30 -> 0.557 (mapped on sentence pairs, not on question-to-memory pairs)
        query_threshold: 0.557,
        judge: super::judge::BGE_SMALL,
    };

    /// Every calibration this build has.
    const ALL: &'static [Calibration] = &[Calibration::MINILM, Calibration::BGE_SMALL];

    /// The calibration of the model `model_id` names: its own, else MiniLM's.
    #[must_use]
    pub fn of_model(model_id: &str) -> &'static Calibration {
        Calibration::ALL
            .iter()
            .find(|c| c.models.contains(&model_id))
            .unwrap_or(&Calibration::MINILM)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minilm_and_models_this_build_does_not_name_read_with_minilms_numbers() {
        for id in [
            "sentence-transformers/all-MiniLM-L6-v2",
            "amberdb-hashing-v1-384",
            "someone/else",
            "",
        ] {
            assert_eq!(Calibration::of_model(id), &Calibration::MINILM, "{id}");
        }
        assert_eq!(
            Calibration::of_model("BAAI/bge-small-en-v1.5"),
            &Calibration::BGE_SMALL
        );
    }

    /// Every calibration is a set of thresholds one could run: distances in (0, 2), cosines
    /// in (0, 1], and each of bge-small's stricter than MiniLM's (bge-small's cosines run
    /// higher).
    #[test]
    fn every_calibration_is_in_range_and_bge_small_reads_higher() {
        for c in Calibration::ALL {
            for d in [c.dedup_distance, c.cluster_distance, c.compaction_distance] {
                assert!(d > 0.0 && d < 2.0, "{c:?}");
            }
            for s in [
                c.tag_similarity,
                c.tag_related,
                c.number_guard_override,
                c.category_min_similarity,
                c.query_threshold,
            ] {
                assert!(s > 0.0 && s <= 1.0, "{c:?}");
            }
            assert!(
                c.tag_related <= c.tag_similarity && c.tag_similarity <= c.number_guard_override
            );
            assert!(c.judge.threshold > 0.0 && c.judge.threshold < 1.0);
        }
        let (m, b) = (Calibration::MINILM, Calibration::BGE_SMALL);
        assert!(b.dedup_distance < m.dedup_distance && b.cluster_distance < m.cluster_distance);
        assert!(b.tag_similarity > m.tag_similarity && b.query_threshold > m.query_threshold);
    }
}
