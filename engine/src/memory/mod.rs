//! The seed's memory operations on `Store` (`docs/semantics.md`, "Operations"): the write
//! pipeline that runs the hooks, and the typed calls whose JSON is the seed's result shape.
//!
//! Guarantees: every operation that changes more than one record (a merge, a supersede, a tag
//! rewrite, a restore, a compaction group, a store that registers canonical tags) is one log
//! frame; every parameter out of its documented range is an error naming the range, never
//! clamped; the hooks' decisions are made under the writer lock.

mod compaction;
mod entities;
mod items;
mod list;
mod mend;
mod query;
mod read;
mod reembed;
mod restore;
mod scope;
mod search;
mod space;
mod tags;
mod transfer;
mod turns;
mod write;

pub use compaction::{Compacted, CompactionGroup, CompactionPreview, Unmerged};
pub use entities::EntityDeleted;
pub use items::ItemUser;
pub use list::{ListFilter, Listed, Shelf};
pub use mend::{MendItem, MendPreview, Mended};
pub use query::{
    DEFAULT_TOP_K, GRAPH_LINEAGE_WEIGHT, GRAPH_MAX_TAG_FREQUENCY, GRAPH_SESSION_WEIGHT,
    GRAPH_SESSION_WINDOW, Query, QueryData, QueryResult, ResultMetadata, Retrieval, StoreType,
};
pub use read::{Cleared, Feedback, FeedbackResult, History, MemoryStats, TopAccessed, Version};
pub use reembed::{ReembedStatus, Reembedded};
pub use search::{
    Also, DEFAULT_DATE_BOOST, DEFAULT_RERANK_CANDIDATES, DEFAULT_SESSION_LEND, Fusion, Group,
    HYBRID_WEIGHTS, Hits, MAX_NEIGHBOURS, MAX_OFFSET, MAX_PAGE, MAX_QUERY_CHARS,
    MAX_RERANK_CANDIDATES, Mode, Neighbour, RRF_K, SEARCH_ACCESS_INTERVAL_US, STATEMENT_MIN_WORDS,
    STATEMENT_WEIGHTS, ScanMode, ScoredBy, SearchRequest, SearchedHit, Source, Strategy, frequency,
    importance, recency, strategy_score,
};
pub use tags::{SnapshotCreated, SnapshotRestored, TagChange, TagPreview, TagsApplied};
pub use transfer::{Exported, ExportedRecord, ImportedRecords};
pub use turns::{HeldBy, HeldTurn, HeldTurns, Turn, TurnsAdded};
pub use write::{DedupDecision, Outcome, Provenance, StoreRequest, Stored, UpdateRequest, Updated};

pub(crate) use read::missing;
pub(crate) use restore::start as start_restoring;

use crate::error::{EngineError, Result};

/// The first 16 hex digits of the sha256 of `json` (snapshot and preview ids, as the peer).
fn short_id(json: &serde_json::Value) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(json.to_string().as_bytes());
    digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// `value` must be in `range`, else `LimitExceeded` / `Invalid` naming it.
fn in_range(what: &'static str, value: usize, min: usize, max: usize) -> Result<()> {
    if value > max {
        return Err(EngineError::LimitExceeded {
            what,
            limit: max,
            got: value,
        });
    }
    if value < min {
        return Err(EngineError::Invalid {
            field: what,
            reason: format!("{value} is below the minimum of {min}"),
        });
    }
    Ok(())
}

/// A vector a caller gave (to store or to search with): the store's dimension, finite.
fn check_vector(dim: usize, v: &[f32]) -> Result<()> {
    amberdb_index::validate_vector(dim, v).map_err(|e| EngineError::from_index("vector", e))
}

/// A caller's own vector met a switch of the store's embedder (a re-embedding) before it was
/// committed: nothing was written.
fn model_switched() -> EngineError {
    EngineError::Invalid {
        field: "vector",
        reason: "the store switched to another embedder (a re-embedding) while this request ran; nothing was written: embed with the new one".into(),
    }
}

/// The first 100 characters and `...` when there is more (the peer's `content_preview`).
/// A memory's content as replies preview it: its first 100 characters, `...` after them when
/// there are more.
#[must_use]
pub fn preview(content: &str) -> String {
    let mut p: String = content.chars().take(100).collect();
    if content.chars().nth(100).is_some() {
        p.push_str("...");
    }
    p
}

/// `ops` as one frame: nothing for none, the operation itself for one, a `Batch` for more.
fn one_frame(mut ops: Vec<crate::kernel::log::Op>) -> Option<crate::kernel::log::Op> {
    match ops.len() {
        0 => None,
        1 => ops.pop(),
        _ => Some(crate::kernel::log::Op::Batch(ops)),
    }
}
