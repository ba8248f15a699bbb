//! Semantic dedup decisions (`docs/semantics.md`, "Dedup at store time", "Dedup at load time"):
//! which stored memories a new (or, in compaction, a stored) memory would merge with, through the
//! cohesion check, complete linkage over lineage, and the fact guard. Pure over a `Space`, so
//! the false-positive scenarios run with controlled vectors.

use super::MAX_MERGE_GROUP;
use super::facts::{Decision, Relation, relation};
use crate::record::MemoryId;
use mnemo_index::kernels;

/// What the dedup decision needs to see of a store: one user's live memories of one kind.
pub(crate) trait Space {
    /// Live memories with similarity >= `min_sim` to `query`, best first, at most `limit`,
    /// never `exclude`.
    fn within(
        &self,
        query: &[f32],
        min_sim: f32,
        limit: usize,
        exclude: Option<MemoryId>,
    ) -> Vec<MemoryId>;
    /// The live memory's vector and the vectors of every archived record its lineage reaches.
    fn lineage_vectors(&self, id: MemoryId) -> Vec<Vec<f32>>;
    /// The live memory's vector.
    fn vector(&self, id: MemoryId) -> Option<Vec<f32>>;
    /// The live memory's text.
    fn text(&self, id: MemoryId) -> Option<String>;
}

/// The decision for one new memory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Plan {
    /// Candidates that say the same: merged with the new memory.
    pub(crate) duplicates: Vec<MemoryId>,
    /// Candidates the new memory updates: archived, superseded by it.
    pub(crate) updated: Vec<MemoryId>,
    /// Candidates left alone because they state a different fact.
    pub(crate) distinct: Vec<MemoryId>,
    /// Why the vector group as a whole was refused, if it was.
    pub(crate) refused: Option<&'static str>,
    /// Near neighbours the range query found (before cohesion and the fact guard).
    pub(crate) candidates: usize,
    /// Each candidate the fact guard judged, with its decision and the reason.
    pub(crate) decisions: Vec<(MemoryId, Decision)>,
}

/// The cohesion check of agent-memory-server (its issue #200): every candidate's own range
/// query must find every other candidate and nothing outside the group, unless the group is
/// at the cap, where a window filled to the cap may hold outsiders and miss members.
pub(crate) fn cohesive(space: &dyn Space, candidates: &[MemoryId], min_sim: f32) -> bool {
    let capped = candidates.len() >= MAX_MERGE_GROUP;
    candidates.iter().all(|&c| {
        let Some(v) = space.vector(c) else {
            return false;
        };
        let window = space.within(&v, min_sim, MAX_MERGE_GROUP, Some(c));
        let full = window.len() >= MAX_MERGE_GROUP;
        let outsider = window.iter().any(|w| !candidates.contains(w));
        let missing = candidates.iter().any(|o| *o != c && !window.contains(o));
        (!outsider || capped) && (!missing || (capped && full))
    })
}

/// Whether `vector` is within `min_sim` of everything `candidate` already absorbed (complete
/// linkage), so merges cannot snowball along a chain of near neighbours.
fn linked(space: &dyn Space, candidate: MemoryId, vector: &[f32], min_sim: f32) -> bool {
    space
        .lineage_vectors(candidate)
        .iter()
        .all(|v| kernels::cosine(v, vector).is_ok_and(|s| s >= min_sim))
}

/// Decides what a memory with `vector` and `text` merges with. `anchor` is the memory itself
/// when it is already stored (compaction).
pub(crate) fn plan(
    space: &dyn Space,
    vector: &[f32],
    text: &str,
    min_sim: f32,
    anchor: Option<MemoryId>,
) -> Plan {
    let mut candidates = space.within(vector, min_sim, MAX_MERGE_GROUP, anchor);
    candidates.truncate(MAX_MERGE_GROUP);
    let mut plan = Plan {
        candidates: candidates.len(),
        ..Plan::default()
    };
    if candidates.is_empty() {
        return plan;
    }
    // A stored anchor is part of the group its candidates' windows see.
    let mut group = candidates.clone();
    if let Some(a) = anchor {
        group.push(a);
    }
    if !cohesive(space, &group, min_sim) {
        plan.refused = Some("cohesion: the neighbours are not all close to one another");
        return plan;
    }
    for c in candidates {
        if !linked(space, c, vector, min_sim) {
            plan.distinct.push(c);
            continue;
        }
        let older = space.text(c).unwrap_or_default();
        let decision = relation(&older, text);
        match decision.relation {
            Relation::Duplicate => plan.duplicates.push(c),
            Relation::Updates => plan.updated.push(c),
            Relation::Distinct | Relation::Unsure => plan.distinct.push(c),
        }
        plan.decisions.push((c, decision));
    }
    plan
}

/// Load-time dedup: `hits` (unit vectors, best first) folded into clusters. Returns the
/// indexes of the first `max_kept` kept hits, each with how many later hits within `min_sim`
/// of it were folded into it. A hit is only compared with kept hits, and once `max_kept` are
/// kept the rest can only fold (they would fall off the page anyway): the cost is
/// `O(hits · max_kept)` dot products, not quadratic in the hits.
#[must_use]
pub fn fold(vectors: &[&[f32]], min_sim: f32, max_kept: usize) -> Vec<(usize, usize)> {
    let mut kept: Vec<(usize, usize)> = Vec::new();
    for (i, v) in vectors.iter().enumerate() {
        let home = kept.iter().position(|(k, _)| {
            vectors
                .get(*k)
                .is_some_and(|kv| kernels::dot(kv, v).is_ok_and(|s| s >= min_sim))
        });
        if let Some((_, folded)) = home.and_then(|h| kept.get_mut(h)) {
            *folded += 1;
        } else if kept.len() < max_kept {
            kept.push((i, 0));
        }
    }
    kept
}
