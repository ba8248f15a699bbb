//! Engine hooks (`docs/semantics.md`, "Hooks"): the ordered lists of write hooks (tag and
//! category normalization, exact and semantic dedup) and read hooks (load-time dedup, access
//! counting) a store runs, configured per store and overridden per request.
//!
//! Guarantees: a hook never writes by itself; whatever the write hooks decide becomes part of
//! the one log frame of the operation, decided under the writer lock. Switching every hook off
//! gives the plain engine: tags trimmed and lowercased, the category as given, only the
//! engine's limits checked, exact duplicates stored. Not here: the pipeline that runs them
//! (`crate::memory`).

pub mod calibration;
pub mod category;
pub mod dedup;
pub mod facts;
pub mod judge;
pub(crate) mod numbers;
pub mod tags;

use crate::error::{EngineError, Result};
pub use calibration::Calibration;

/// MiniLM's store-time dedup distance (cosine distance; similarity >= 0.65): the default with
/// MiniLM (`Calibration::dedup_distance` for other models).
pub const DEDUP_DISTANCE: f32 = Calibration::MINILM.dedup_distance;
/// MiniLM's load-time cluster distance.
pub const CLUSTER_DISTANCE: f32 = Calibration::MINILM.cluster_distance;
/// MiniLM's compaction distance.
pub const COMPACTION_DISTANCE: f32 = Calibration::MINILM.compaction_distance;
/// Most candidates one semantic merge considers.
pub const MAX_MERGE_GROUP: usize = 10;
/// How many times the page a deduplicating search over-fetches.
pub const LOAD_DEDUP_OVERFETCH: usize = 3;

/// A hook on the write path, in the order the pipeline runs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WriteHook {
    /// Tag validation and semantic normalization.
    Tags,
    /// Category normalization.
    Category,
    /// Same content, same user: `AlreadyExists`.
    ExactDedup,
    /// Near duplicates: merge or supersede.
    SemanticDedup,
}

/// A hook on the read path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReadHook {
    /// Fold near-identical results into the best of each cluster.
    LoadDedup,
    /// Count returned memories as accessed.
    Access,
}

impl WriteHook {
    /// All write hooks, in pipeline order.
    pub const ALL: &'static [WriteHook] = &[
        WriteHook::Tags,
        WriteHook::Category,
        WriteHook::ExactDedup,
        WriteHook::SemanticDedup,
    ];
}

impl ReadHook {
    /// All read hooks, in pipeline order.
    pub const ALL: &'static [ReadHook] = &[ReadHook::LoadDedup, ReadHook::Access];
}

/// What load-time dedup folds (`docs/semantics.md`, "Dedup at load time").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fold {
    /// Only results that say the same in the same content words within the cluster distance:
    /// the lower-ranked folds into the higher, the page stays in score order (the default).
    #[default]
    Duplicates,
    /// The fact guard's fold: duplicates and older values of one slot fold, a newer value
    /// takes the older's place and a newer unsure statement moves in front, so the page is
    /// ordered by time within a slot, not by score. Measured in `docs/search.md`; opt-in.
    Slots,
}

impl Fold {
    /// Parses the protocol spelling.
    ///
    /// # Errors
    /// `Invalid` naming the allowed values.
    pub fn parse(s: &str) -> Result<Fold> {
        match s.trim().to_ascii_lowercase().as_str() {
            "duplicates" => Ok(Fold::Duplicates),
            "slots" => Ok(Fold::Slots),
            other => Err(EngineError::Invalid {
                field: "fold",
                reason: format!("{other:?} is not one of [\"duplicates\", \"slots\"]"),
            }),
        }
    }
}

/// Which near duplicates store-time dedup merges (`docs/semantics.md`, "Dedup at store
/// time"). Measured on public labelled pairs in `docs/search.md`, "Judged on public data".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Merge {
    /// A restatement in the same content words in the same order (case, punctuation and stop
    /// words aside), or one the learned judge (`judge`) is sure of: the only merges whose
    /// precision on public pairs is ≥ 0.99 (the default).
    #[default]
    Sure,
    /// Also everything the fact guard reads as the same statement in other words or with
    /// detail added: more merges, measured precision 0.49–0.84 on public pairs; opt-in.
    Paraphrases,
}

impl Merge {
    /// Parses the protocol spelling.
    ///
    /// # Errors
    /// `Invalid` naming the allowed values.
    pub fn parse(s: &str) -> Result<Merge> {
        match s.trim().to_ascii_lowercase().as_str() {
            "sure" => Ok(Merge::Sure),
            "paraphrases" => Ok(Merge::Paraphrases),
            other => Err(EngineError::Invalid {
                field: "merge",
                reason: format!("{other:?} is not one of [\"sure\", \"paraphrases\"]"),
            }),
        }
    }
}

/// A store's hooks and their settings.
#[derive(Debug, Clone, PartialEq)]
pub struct HookConfig {
    /// Write hooks that run (the pipeline order is fixed; this says which are on).
    pub write: Vec<WriteHook>,
    /// Read hooks that run.
    pub read: Vec<ReadHook>,
    /// Store-time semantic dedup distance, in (0, 2); `None`: the current embedder's
    /// (`Calibration::dedup_distance`; MiniLM's 0.35).
    pub dedup_distance: Option<f32>,
    /// Load-time cluster distance, in (0, 2); `None`: the current embedder's (MiniLM's 0.40).
    pub cluster_distance: Option<f32>,
    /// Compaction distance, in (0, 2); `None`: the current embedder's (MiniLM's 0.20).
    pub compaction_distance: Option<f32>,
    /// What load-time dedup folds when it is on.
    pub fold: Fold,
    /// Which near duplicates store-time dedup merges.
    pub merge: Merge,
}

impl Default for HookConfig {
    fn default() -> HookConfig {
        HookConfig {
            write: WriteHook::ALL.to_vec(),
            read: ReadHook::ALL.to_vec(),
            dedup_distance: None,
            cluster_distance: None,
            compaction_distance: None,
            fold: Fold::Duplicates,
            merge: Merge::Sure,
        }
    }
}

impl HookConfig {
    /// No hooks: the plain engine.
    #[must_use]
    pub fn none() -> HookConfig {
        HookConfig {
            write: Vec::new(),
            read: Vec::new(),
            ..HookConfig::default()
        }
    }

    /// Checks the distances.
    ///
    /// # Errors
    /// `Invalid` naming the setting.
    pub fn validate(&self) -> Result<()> {
        for (field, d) in [
            ("dedup_distance", self.dedup_distance),
            ("cluster_distance", self.cluster_distance),
            ("compaction_distance", self.compaction_distance),
        ] {
            if let Some(d) = d {
                check_distance(field, d)?;
            }
        }
        Ok(())
    }
}

/// Checks a cosine distance setting: finite, in (0, 2).
///
/// # Errors
/// `Invalid` naming `field`.
pub fn check_distance(field: &'static str, d: f32) -> Result<()> {
    if d.is_finite() && d > 0.0 && d < 2.0 {
        Ok(())
    } else {
        Err(EngineError::Invalid {
            field,
            reason: format!("{d} is not a cosine distance in (0, 2)"),
        })
    }
}

/// Per-request changes to a store's hooks. `None` keeps the store's setting.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HookOverrides {
    /// Write hooks switched off for this request.
    pub skip: Vec<WriteHook>,
    /// Write hooks switched on for this request (even if the store has them off).
    pub force: Vec<WriteHook>,
    /// Store-time dedup distance for this request.
    pub dedup_distance: Option<f32>,
    /// Load-time dedup on or off for this request.
    pub deduplicate: Option<bool>,
    /// Load-time cluster distance for this request.
    pub dedup_threshold: Option<f32>,
    /// What load-time dedup folds for this request.
    pub fold: Option<Fold>,
    /// Which near duplicates store-time dedup merges for this request.
    pub merge: Option<Merge>,
    /// Count this read as an access, or not.
    pub count_access: Option<bool>,
}

/// The hooks in effect for one request.
#[derive(Debug, Clone, PartialEq)]
pub struct Effective {
    /// Tag normalization on.
    pub tags: bool,
    /// Category normalization on.
    pub category: bool,
    /// Exact dedup on.
    pub exact_dedup: bool,
    /// Semantic dedup on.
    pub semantic_dedup: bool,
    /// Load-time dedup on.
    pub load_dedup: bool,
    /// Access counting on.
    pub access: bool,
    /// Store-time dedup distance the store or the request set (`None`: the calibration's).
    dedup_set: Option<f32>,
    /// Load-time cluster distance the store or the request set (`None`: the calibration's).
    cluster_set: Option<f32>,
    /// What load-time dedup folds.
    pub fold: Fold,
    /// Which near duplicates store-time dedup merges.
    pub merge: Merge,
    /// The thresholds of the embedder whose cosines are read (`with_calibration`).
    pub calibration: &'static Calibration,
}

impl Effective {
    /// The store's config with `o` applied, distances not set by either from `calibration`
    /// (the current embedder's).
    ///
    /// # Errors
    /// `Invalid` for a distance out of range.
    pub fn of(
        config: &HookConfig,
        o: &HookOverrides,
        calibration: &'static Calibration,
    ) -> Result<Effective> {
        let write = |h: WriteHook| {
            o.force.contains(&h) || (config.write.contains(&h) && !o.skip.contains(&h))
        };
        let dedup_set = o.dedup_distance.or(config.dedup_distance);
        let cluster_set = o.dedup_threshold.or(config.cluster_distance);
        if let Some(d) = dedup_set {
            check_distance("dedup_distance", d)?;
        }
        if let Some(d) = cluster_set {
            check_distance("dedup_threshold", d)?;
        }
        Ok(Effective {
            tags: write(WriteHook::Tags),
            category: write(WriteHook::Category),
            exact_dedup: write(WriteHook::ExactDedup),
            semantic_dedup: write(WriteHook::SemanticDedup),
            load_dedup: o
                .deduplicate
                .unwrap_or(config.read.contains(&ReadHook::LoadDedup)),
            access: o
                .count_access
                .unwrap_or(config.read.contains(&ReadHook::Access)),
            dedup_set,
            cluster_set,
            fold: o.fold.unwrap_or(config.fold),
            merge: o.merge.unwrap_or(config.merge),
            calibration,
        })
    }

    /// Store-time dedup distance: the one set, else the calibration's.
    #[must_use]
    pub fn dedup_distance(&self) -> f32 {
        self.dedup_set.unwrap_or(self.calibration.dedup_distance)
    }

    /// Load-time cluster distance: the one set, else the calibration's.
    #[must_use]
    pub fn cluster_distance(&self) -> f32 {
        self.cluster_set
            .unwrap_or(self.calibration.cluster_distance)
    }

    /// The same settings read against `calibration`: a write's vectors are read with the
    /// thresholds of the embedder that computed them, which a re-embedding's switch between
    /// the plan and the embedding makes another than the plan's.
    #[must_use]
    pub fn with_calibration(&self, calibration: &'static Calibration) -> Effective {
        Effective {
            calibration,
            ..self.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_switch_hooks_and_thresholds_for_one_request() {
        let store = HookConfig::default();
        let e = Effective::of(&store, &HookOverrides::default(), &Calibration::MINILM).unwrap();
        assert!(e.tags && e.category && e.exact_dedup && e.semantic_dedup && e.load_dedup);
        assert!((e.dedup_distance() - 0.35).abs() < 1e-6);
        let o = HookOverrides {
            skip: vec![WriteHook::SemanticDedup],
            dedup_threshold: Some(0.2),
            deduplicate: Some(false),
            ..HookOverrides::default()
        };
        let e = Effective::of(&store, &o, &Calibration::MINILM).unwrap();
        assert!(!e.semantic_dedup && e.exact_dedup && !e.load_dedup);
        assert!((e.cluster_distance() - 0.2).abs() < 1e-6);
        let forced = HookOverrides {
            force: vec![WriteHook::Tags],
            ..HookOverrides::default()
        };
        let e = Effective::of(&HookConfig::none(), &forced, &Calibration::MINILM).unwrap();
        assert!(e.tags && !e.category && !e.semantic_dedup && !e.access);
        let bad = HookOverrides {
            dedup_distance: Some(f32::NAN),
            ..HookOverrides::default()
        };
        assert!(Effective::of(&store, &bad, &Calibration::MINILM).is_err());
        assert!(
            HookConfig {
                cluster_distance: Some(2.0),
                ..HookConfig::default()
            }
            .validate()
            .is_err()
        );
    }

    /// A distance the store or the request does not set is the embedder's; one it sets is
    /// used as given, whatever the embedder.
    #[test]
    fn unset_distances_are_the_embedders_and_set_ones_are_kept() {
        const OTHER: Calibration = Calibration {
            dedup_distance: 0.2,
            cluster_distance: 0.25,
            ..Calibration::MINILM
        };
        let unset = HookConfig::default();
        let e = Effective::of(&unset, &HookOverrides::default(), &OTHER).unwrap();
        assert!(
            (e.dedup_distance() - 0.2).abs() < 1e-6 && (e.cluster_distance() - 0.25).abs() < 1e-6
        );
        assert_eq!(e.calibration, &OTHER);
        // Read against another embedder's calibration (a write whose vectors a re-embedding's
        // new embedder computed), an unset distance is that embedder's.
        let moved = e.with_calibration(&Calibration::MINILM);
        assert!((moved.dedup_distance() - 0.35).abs() < 1e-6);
        assert!((moved.cluster_distance() - 0.40).abs() < 1e-6);
        let set = HookConfig {
            dedup_distance: Some(0.3),
            ..HookConfig::default()
        };
        let e = Effective::of(&set, &HookOverrides::default(), &OTHER).unwrap();
        assert!((e.dedup_distance() - 0.3).abs() < 1e-6);
        let moved = e.with_calibration(&Calibration::MINILM);
        assert!(
            (moved.dedup_distance() - 0.3).abs() < 1e-6,
            "a set distance stays"
        );
        let asked = HookOverrides {
            dedup_distance: Some(0.1),
            ..HookOverrides::default()
        };
        let e = Effective::of(&set, &asked, &OTHER).unwrap();
        assert!((e.dedup_distance() - 0.1).abs() < 1e-6);
    }
}
