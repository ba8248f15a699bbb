//! What a write asks for and what it answers: `StoreRequest`, `Provenance`, `Outcome`,
//! `Stored`, `DedupDecision`, `UpdateRequest`, `Updated`.

use crate::error::{EngineError, Result};
use crate::hooks::HookOverrides;
use crate::hooks::facts::{Relation, Rule};
use crate::kernel::record::{Category, MemoryId, NewMemory, Timestamp};

/// A memory to store, with what the caller may add: its vector, and changes to the store's
/// hooks for this request. A `NewMemory` converts into one with neither.
#[derive(Debug, Clone, PartialEq)]
pub struct StoreRequest {
    /// The memory.
    pub memory: NewMemory,
    /// The content's vector, if the caller computed it (of the store's dimension); else the
    /// store's embedder computes it. Hooks that need other texts embedded (new tags, a
    /// category phrase) use the store's embedder either way.
    pub vector: Option<Vec<f32>>,
    /// Changes to the store's hooks for this request.
    pub hooks: HookOverrides,
}

impl StoreRequest {
    /// `memory` with the store's hooks.
    #[must_use]
    pub fn new(memory: NewMemory) -> StoreRequest {
        StoreRequest {
            memory,
            vector: None,
            hooks: HookOverrides::default(),
        }
    }

    /// With the content's vector.
    #[must_use]
    pub fn with_vector(mut self, vector: Vec<f32>) -> StoreRequest {
        self.vector = Some(vector);
        self
    }
}

/// What a memory carries from the store it was first written in, kept by
/// [`Store::import`](crate::Store::import): its times, usage and feedback. A store of a new memory sets them to now
/// and zero; an import (`amberdb import`, from an export or another system) keeps them, so
/// recency ranking, retention by age and the access counts go on as they were.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Provenance {
    /// When it was first stored. Not in the future, not before 1970.
    pub created_at: Timestamp,
    /// When it last changed: from `created_at` to now.
    pub updated_at: Timestamp,
    /// When it was last read: from `created_at` to now.
    pub last_accessed_at: Timestamp,
    /// Times it was read.
    pub access_count: u64,
    /// Helpful feedback received.
    pub helpful_count: u32,
    /// Harmful feedback received.
    pub harmful_count: u32,
    /// Its confidence, 0..=1; the initial one when `None`.
    pub confidence: Option<f32>,
    /// The id it had where it came from (an import): it keeps it when it is above every id
    /// the store has used (ids only grow: an import into an empty store, in source-id
    /// order), else it gets the next free id and `Stored::memory_id` says which.
    pub id: Option<MemoryId>,
}

/// The largest source id an import keeps: 2^53, the largest integer every JSON reader holds.
pub const MAX_SOURCE_ID: u64 = 1 << 53;

impl Provenance {
    /// A memory first stored at `created_at`, changed and read then, never since.
    #[must_use]
    pub fn created(created_at: Timestamp) -> Provenance {
        Provenance {
            created_at,
            updated_at: created_at,
            last_accessed_at: created_at,
            access_count: 0,
            helpful_count: 0,
            harmful_count: 0,
            confidence: None,
            id: None,
        }
    }

    pub(crate) fn validate(&self, now: Timestamp) -> Result<()> {
        let invalid = |field: &'static str, reason: String| EngineError::Invalid { field, reason };
        // Ids a JSON number holds exactly, as every interface writes them.
        if let Some(id) = self.id
            && !(1..=MAX_SOURCE_ID).contains(&id.0)
        {
            return Err(invalid(
                "id",
                format!("{} is not a memory id in 1..={MAX_SOURCE_ID}", id.0),
            ));
        }
        if self.created_at.0 < 0 || self.created_at > now {
            return Err(invalid(
                "created_at",
                format!(
                    "{} is not between 1970 and now ({})",
                    self.created_at.to_rfc3339(),
                    now.to_rfc3339()
                ),
            ));
        }
        for (field, t) in [
            ("updated_at", self.updated_at),
            ("last_accessed_at", self.last_accessed_at),
        ] {
            if t < self.created_at || t > now {
                return Err(invalid(
                    field,
                    format!(
                        "{} is not between created_at ({}) and now",
                        t.to_rfc3339(),
                        self.created_at.to_rfc3339()
                    ),
                ));
            }
        }
        if let Some(c) = self.confidence
            && !(0.0..=1.0).contains(&c)
        {
            return Err(invalid("confidence", format!("{c} is not in 0..=1")));
        }
        Ok(())
    }
}

impl From<NewMemory> for StoreRequest {
    fn from(memory: NewMemory) -> StoreRequest {
        StoreRequest::new(memory)
    }
}

/// What a store did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// A new live memory.
    Stored,
    /// Merged with near duplicates into a new record (the sources are archived).
    Merged,
    /// Stored, superseding memories it updates (their validity closed, they are archived).
    Superseded,
    /// An earlier value of a slot whose newer value is stored already (its `valid_from` is
    /// before the newer one's): kept in the archive with its validity closed, in the newer
    /// one's lineage, out of searches of the present.
    History,
    /// The user holds this exact content already (the exact dedup hook): nothing was
    /// stored; `memory_id` is the memory that holds it. An outcome, not an error, on every
    /// interface (`docs/semantics.md`, "Dedup at store time", step 1).
    Duplicate,
}

/// The result of `store_memory`, in the seed's shape.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Stored {
    /// The live memory that now holds the content: the new one, or the merged one.
    pub memory_id: MemoryId,
    /// What happened.
    pub outcome: Outcome,
    /// First 100 characters of the live memory's content.
    pub content_preview: String,
    /// The category chosen.
    pub category: Category,
    /// How it was chosen: `exact`, `dictionary`, `semantic`, `fallback`, or `given`.
    pub category_reason: &'static str,
    /// The tags stored, normalized.
    pub tags: Vec<String>,
    /// Tags this store registered as new canonical tags.
    pub new_canonical_tags: Vec<String>,
    /// When the live memory was created (the oldest source's time after a merge).
    pub created_at: Timestamp,
    /// When the live memory's validity begins (`docs/semantics.md`, "Validity in time").
    pub valid_from: Timestamp,
    /// Ids this store archived (merged or superseded), and for a merge the new memory's own
    /// archived id first.
    pub supersedes: Vec<MemoryId>,
    /// Near neighbours semantic dedup found within its distance (0 when it is off), before the
    /// cohesion check and the fact guard.
    pub dedup_candidates: usize,
    /// What the fact guard decided about each candidate, and why (for audit).
    pub decisions: Vec<DedupDecision>,
    /// Why a merge was not made, when candidates were found but refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// For an item: the live item of the same key this store deleted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replaced: Option<MemoryId>,
}

/// The fact guard's decision about one near neighbour of a stored memory.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DedupDecision {
    /// The neighbour.
    pub memory_id: MemoryId,
    /// What the new memory is to it.
    pub relation: Relation,
    /// The rule that decided (as text on the wire).
    pub reason: Rule,
}

/// An `update_memory` request: the fields to change (`None` keeps the current value).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct UpdateRequest {
    /// The live memory to update.
    pub memory_id: Option<MemoryId>,
    /// New content: re-embedded, and the memory gets a new id that supersedes the old one.
    pub content: Option<String>,
    /// New category, as text (normalized by the category hook).
    pub category: Option<String>,
    /// New tags (normalized by the tags hook).
    pub tags: Option<Vec<String>>,
    /// Per-request hook changes.
    pub hooks: HookOverrides,
}

/// The result of `update_memory`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Updated {
    /// The live memory now: the same id, or a new one when the content changed.
    pub memory_id: MemoryId,
    /// The id the new one supersedes (when the content changed).
    pub supersedes: Vec<MemoryId>,
    /// Tags after the update.
    pub tags: Vec<String>,
    /// Category after the update.
    pub category: Category,
}
