//! Mend (`docs/semantics.md`, "Mend"): the store-time decisions of older rules judged again.
//! A store made before the precision-first rules (issue #44) holds memories the fact guard
//! archived wrongly: chat turns superseded, different incidents merged, paraphrases of other
//! facts closed as older values. Mend reads every archived record a guard decision archived
//! behind a live memory, asks the rules of this build whether they would archive it now, and
//! brings back each one they would not: previewed, applied in one frame, undone record by
//! record.
//!
//! Guarantees: the preview writes nothing; an apply whose recomputed plan differs from the
//! preview's id changes nothing (`PreviewMismatch`); a restored record is a new live copy of
//! the archived one (its text, vector, tags, counts and times, a validity the decision closed
//! opened again) whose lineage names it, so the archive and every history keep what they had;
//! a record a compaction or a user archived (no guard decision) is never touched; a text that
//! is live already is never restored twice.

use super::short_id;
use crate::error::{EngineError, Result};
use crate::hooks::facts::{Relation, Rule, reading, relation_of};
use crate::hooks::judge::JudgeWeights;
use crate::kernel::log::Op;
use crate::kernel::record::{self, Kind, Memory, MemoryId};
use crate::kernel::state::State;
use crate::store::Store;
use amberdb_index::kernels;
use std::collections::HashSet;

/// One archived record mend would bring back.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct MendItem {
    /// The archived record.
    pub archived: MemoryId,
    /// The live memory whose lineage holds it.
    pub behind: MemoryId,
    /// Why it was archived, as the rule that decided then said it.
    pub archived_because: &'static str,
    /// What the rules of this build read of it beside the live memory's text.
    pub now: &'static str,
    /// The first 100 characters of its text.
    pub content_preview: String,
}

/// `mend_preview`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct MendPreview {
    /// Id of this plan: pass it to `mend_apply`.
    pub preview_id: String,
    /// What would come back, oldest archived id first.
    pub restore: Vec<MendItem>,
    /// Archived records a guard decision archived that the rules of this build archive too.
    pub kept: usize,
}

/// `mend_apply`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Mended {
    /// Each archived record and the live copy that brings it back.
    pub restored: Vec<(MemoryId, MemoryId)>,
}

/// How the rules of this build read two texts of one lineage: whether they would keep them
/// as one (the same statement, as sure as a default merge is, or two values of one slot),
/// and the reason.
fn joined(a: &Memory, b: &Memory, cosine: f32, judge: &JudgeWeights) -> (bool, &'static str) {
    if a.kind == Kind::Message || b.kind == Kind::Message {
        return (false, "a chat turn is an event: never merged or superseded");
    }
    let (older, newer) = if a.valid_from <= b.valid_from {
        (reading(&a.content), reading(&b.content))
    } else {
        (reading(&b.content), reading(&a.content))
    };
    let d = relation_of(&older, &newer);
    let keep = match d.relation {
        Relation::Updates => true,
        Relation::Duplicate => {
            d.rule == Rule::SameWords || judge.merges(&older, &newer, &d, cosine)
        }
        Relation::Distinct | Relation::Unsure => false,
    };
    let reason = if keep || d.relation != Relation::Duplicate {
        d.rule.reason()
    } else {
        "another wording, which a default merge no longer joins"
    };
    (keep, reason)
}

/// Most texts of one lineage mend judges pairwise; a longer lineage is judged against its
/// live memory only.
const MAX_LINEAGE: usize = 256;

impl Store {
    /// The plan: for each of `user`'s live memories, the texts its lineage holds that a guard
    /// decision archived, grouped as the rules of this build would keep them (texts joined by
    /// a sure merge or an update are one group); the group of the live text stays as it is,
    /// and every other group comes back as its earliest record. Also how many archived texts
    /// stay archived.
    fn mend_plan(&self, state: &State, user: &str) -> (Vec<MendItem>, usize) {
        let mut restore = Vec::new();
        let mut kept = 0;
        let mut texts: HashSet<[u8; 32]> = HashSet::new();
        let judge = &self.calibration().judge;
        let mut live: Vec<&Memory> = state.iter().filter(|m| m.user_id == user).collect();
        live.sort_unstable_by_key(|m| m.id);
        for m in live {
            // The live text, then each archived text once, oldest first, with whether a
            // live memory holds it already (a restored copy, an undone merge).
            let mut nodes: Vec<(&Memory, &[f32])> = Vec::new();
            let mut is_live: Vec<bool> = vec![true];
            let Some(v) = state.vectors().vector(m.id.0) else {
                continue;
            };
            nodes.push((m, v));
            let mut lineage: Vec<&crate::kernel::table::Archived> = state
                .lineage(m.id)
                .into_iter()
                .filter(|a| a.record.decision.is_some())
                .collect();
            lineage.sort_unstable_by_key(|a| a.record.id);
            for a in lineage {
                let hash = a.record.content_hash;
                if hash == m.content_hash || !texts.insert(hash) {
                    continue;
                }
                is_live.push(state.find_hash(user, &hash).is_some());
                nodes.push((&a.record, &a.vector));
            }
            if is_live.iter().all(|l| *l) {
                continue;
            }
            // Union-find over the texts the rules of this build keep as one.
            let mut parent: Vec<usize> = (0..nodes.len()).collect();
            fn root(parent: &mut [usize], mut i: usize) -> usize {
                while parent[i] != i {
                    parent[i] = parent[parent[i]];
                    i = parent[i];
                }
                i
            }
            let mut why: Vec<&'static str> = vec![""; nodes.len()];
            let pairwise = nodes.len() <= MAX_LINEAGE;
            for i in 1..nodes.len() {
                let others = if pairwise { 0..i } else { 0..1 };
                for j in others {
                    let (a, b) = (nodes[i], nodes[j]);
                    let cosine = kernels::dot(a.1, b.1).unwrap_or(0.0);
                    let (one, reason) = joined(a.0, b.0, cosine, judge);
                    if j == 0 {
                        why[i] = reason;
                    }
                    if one {
                        let (ri, rj) = (root(&mut parent, i), root(&mut parent, j));
                        parent[ri.max(rj)] = ri.min(rj);
                    }
                }
            }
            // A group with a live text stays as it is; any other comes back once.
            let mut covered: HashSet<usize> = HashSet::new();
            for (i, l) in is_live.iter().enumerate() {
                if *l {
                    covered.insert(root(&mut parent, i));
                }
            }
            for i in 1..nodes.len() {
                if is_live[i] {
                    continue;
                }
                if !covered.insert(root(&mut parent, i)) {
                    kept += 1;
                    continue;
                }
                let r = nodes[i].0;
                restore.push(MendItem {
                    archived: r.id,
                    behind: m.id,
                    archived_because: r.decision.map_or("", Rule::reason),
                    now: why[i],
                    content_preview: super::preview(&r.content),
                });
            }
        }
        restore.sort_unstable_by_key(|i| i.archived);
        (restore, kept)
    }

    /// What `mend_apply` would bring back for `user_id`, without writing.
    ///
    /// # Errors
    /// `Invalid` for a bad user id; `OutOfScope`.
    pub fn mend_preview(&self, user_id: Option<&str>) -> Result<MendPreview> {
        let user = self.user_for(user_id)?;
        record::validate_id("user_id", &user)?;
        let state = self.read();
        let (restore, kept) = self.mend_plan(&state, &user);
        Ok(MendPreview {
            preview_id: plan_id(&restore),
            restore,
            kept,
        })
    }

    /// Brings back what the preview `preview_id` listed, recomputed now (the id must match),
    /// in one frame.
    ///
    /// # Errors
    /// `PreviewMismatch`; `Invalid`; `MemoryLimitReached` when the store has no room for them;
    /// `Poisoned`, `DiskFull`, `Io`.
    pub fn mend_apply(&self, user_id: Option<&str>, preview_id: &str) -> Result<Mended> {
        let user = self.user_for(user_id)?;
        record::validate_id("user_id", &user)?;
        let limit = self.inner.options.memory_limit;
        let restored = self.commit(|ids, state| {
            let (restore, _) = self.mend_plan(state, &user);
            let expected = plan_id(&restore);
            if expected != preview_id {
                return Err(EngineError::PreviewMismatch {
                    expected,
                    provided: preview_id.to_owned(),
                });
            }
            if !restore.is_empty() && state.live_count() + restore.len() > limit {
                return Err(EngineError::MemoryLimitReached {
                    limit,
                    held: state.live_count(),
                    adding: restore.len(),
                });
            }
            let mut ops = Vec::with_capacity(restore.len());
            let mut restored = Vec::with_capacity(restore.len());
            for (k, item) in restore.iter().enumerate() {
                let Some(a) = state.archived(item.archived) else {
                    continue;
                };
                let mut r = a.record.clone();
                r.id = ids.nth(k as u64);
                if r.decision.is_some_and(Rule::closes_validity) {
                    r.valid_to = None;
                }
                r.decision = None;
                r.supersedes = vec![a.record.id];
                restored.push((a.record.id, r.id));
                ops.push(Op::Store {
                    record: Box::new(r),
                    vector: a.vector.clone(),
                });
            }
            Ok((super::one_frame(ops), restored))
        })?;
        Ok(Mended { restored })
    }

    /// Undoes one restore of `mend_apply`: archives the live copy again (its lineage keeps
    /// it), with the decision that archived the original.
    ///
    /// # Errors
    /// `NotFound` / `Archived`; `Invalid` when `restored` is not a copy mend made;
    /// `Poisoned`, `DiskFull`, `Io`.
    pub fn mend_undo(&self, restored: MemoryId) -> Result<MemoryId> {
        self.commit(|_, state| {
            self.reach(state, restored)?;
            let m = state
                .get(restored)
                .ok_or_else(|| super::missing(state, restored))?;
            let original = match m.supersedes.as_slice() {
                [one] => state.archived(*one),
                _ => None,
            }
            .filter(|a| a.record.content_hash == m.content_hash && a.record.decision.is_some())
            .ok_or_else(|| EngineError::Invalid {
                field: "memory_id",
                reason: format!("memory {restored} is not a record mend brought back"),
            })?;
            let mut again = m.clone();
            again.decision = original.record.decision;
            again.valid_to = original.record.valid_to;
            let ops = vec![
                Op::Update {
                    record: Box::new(again),
                },
                Op::Archive { id: restored },
            ];
            Ok((super::one_frame(ops), original.record.id))
        })
    }
}

fn plan_id(restore: &[MendItem]) -> String {
    let ids: Vec<(u64, u64)> = restore.iter().map(|i| (i.archived.0, i.behind.0)).collect();
    short_id(&serde_json::json!(ids))
}
