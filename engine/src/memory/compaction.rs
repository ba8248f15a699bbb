//! Compaction (`docs/semantics.md`, "Compaction"): the store-time merge over stored memories
//! at a stricter distance, with a preview, one frame per merged group, and an undo through
//! lineage.

use super::short_id;
use super::space::UserSpace;
use super::write::merge;
use crate::hooks::{check_distance, dedup};
use crate::kernel::error::{EngineError, Result};
use crate::kernel::log::Op;
use crate::kernel::record::{self, Kind, Memory, MemoryId};
use crate::store::Store;
use std::collections::HashSet;

/// Memories compaction would merge into one.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CompactionGroup {
    /// The oldest member, whose neighbours formed the group.
    pub anchor: MemoryId,
    /// Every member, the anchor first.
    pub members: Vec<MemoryId>,
}

/// `compact_preview`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CompactionPreview {
    /// Id of this plan: pass it to `compact_apply`.
    pub preview_id: String,
    /// The groups.
    pub groups: Vec<CompactionGroup>,
    /// Live memories of the user now.
    pub memories_before: usize,
    /// After applying.
    pub memories_after: usize,
}

/// `compact_apply`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Compacted {
    /// Each merged record and the ids it supersedes.
    pub merged: Vec<(MemoryId, Vec<MemoryId>)>,
    /// Groups skipped because a member changed since the plan.
    pub skipped: usize,
}

/// `compact_undo`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Unmerged {
    /// The merged record, now archived.
    pub archived: MemoryId,
    /// The sources, live again under new ids, in the merged record's `supersedes` order.
    pub restored: Vec<MemoryId>,
}

impl Store {
    fn compaction_groups(&self, user: &str, distance: f32) -> (Vec<CompactionGroup>, usize) {
        let state = self.read();
        let mut mine: Vec<&Memory> = state
            .table
            .iter()
            .filter(|m| m.user_id == user && !matches!(m.kind, Kind::Message | Kind::Item))
            .collect();
        let live = state.table.iter().filter(|m| m.user_id == user).count();
        mine.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
        let mut grouped: HashSet<MemoryId> = HashSet::new();
        let mut groups = Vec::new();
        for m in mine {
            if grouped.contains(&m.id) {
                continue;
            }
            let Some(v) = state.vectors.vector(m.id.0) else {
                continue;
            };
            let space = UserSpace {
                state: &state,
                user,
                kind: m.kind,
            };
            let plan = dedup::plan(&space, v, &m.content, 1.0 - distance, Some(m.id));
            let dups: Vec<MemoryId> = plan
                .duplicates
                .into_iter()
                .filter(|d| !grouped.contains(d))
                .collect();
            if dups.is_empty() {
                continue;
            }
            grouped.insert(m.id);
            grouped.extend(dups.iter().copied());
            let mut members = vec![m.id];
            members.extend(dups);
            groups.push(CompactionGroup {
                anchor: m.id,
                members,
            });
        }
        (groups, live)
    }

    /// Checks the request and computes the groups at `distance` (the store's
    /// `HookConfig::compaction_distance`, default 0.2, when `None`), with the live count and
    /// the plan's id.
    fn compaction_plan(
        &self,
        user_id: Option<&str>,
        distance: Option<f32>,
    ) -> Result<(Vec<CompactionGroup>, usize, String)> {
        let user = self.user_for(user_id)?;
        let user = user.as_str();
        record::validate_id("user_id", user)?;
        let distance = distance.unwrap_or(self.inner.options.hooks.compaction_distance);
        check_distance("distance", distance)?;
        let (groups, live) = self.compaction_groups(user, distance);
        let id = groups_id(&groups);
        Ok((groups, live, id))
    }

    /// The groups `compact_apply` would merge, at `distance` (`None`: the store's
    /// compaction distance, default 0.2), without writing.
    ///
    /// # Errors
    /// `Invalid` for a bad user id or distance.
    pub fn compact_preview(
        &self,
        user_id: Option<&str>,
        distance: Option<f32>,
    ) -> Result<CompactionPreview> {
        let (groups, live, preview_id) = self.compaction_plan(user_id, distance)?;
        let folded: usize = groups.iter().map(|g| g.members.len() - 1).sum();
        Ok(CompactionPreview {
            preview_id,
            memories_before: live,
            memories_after: live - folded,
            groups,
        })
    }

    /// Merges the groups of `preview_id`, recomputed now (the id must match): each group is
    /// one frame that archives its members and stores the merged record.
    ///
    /// # Errors
    /// `PreviewMismatch`, `Invalid`; `Poisoned`, `DiskFull`, `Io`.
    pub fn compact_apply(
        &self,
        user_id: Option<&str>,
        distance: Option<f32>,
        preview_id: &str,
    ) -> Result<Compacted> {
        let (groups, _, expected) = self.compaction_plan(user_id, distance)?;
        if expected != preview_id {
            return Err(EngineError::PreviewMismatch {
                expected,
                provided: preview_id.to_owned(),
            });
        }
        let mut merged = Vec::new();
        let mut skipped = 0;
        for g in &groups {
            let made = self.commit(|ids, state| {
                let members: Option<Vec<(&Memory, &[f32])>> = g
                    .members
                    .iter()
                    .map(|id| Some((state.table.get(*id)?, state.vectors.vector(id.0)?)))
                    .collect();
                // A member deleted or merged since the plan: the group is skipped.
                let Some(members) = members else {
                    return Ok((None, None));
                };
                let Some(((anchor, anchor_vector), rest)) = members.split_first() else {
                    return Ok((None, None));
                };
                let id = ids.nth(0);
                let Ok((record, vector)) = merge(id, anchor, anchor_vector, rest, &[], self.now())
                else {
                    return Ok((None, None));
                };
                let mut ops: Vec<Op> = g.members.iter().map(|m| Op::Archive { id: *m }).collect();
                let made = (id, record.supersedes.clone());
                ops.push(Op::Store {
                    record: Box::new(record),
                    vector,
                });
                Ok((Some(Op::Batch(ops)), Some(made)))
            })?;
            match made {
                Some(m) => merged.push(m),
                None => skipped += 1,
            }
        }
        Ok(Compacted { merged, skipped })
    }

    /// Undoes a merge or a supersede through lineage: one frame archives the record and stores
    /// each record it superseded again, with its text, vector, tags, counts and timestamps, a
    /// new id, and `supersedes` naming the archived record it restores (the first one also
    /// names the undone record, so its text stays reachable).
    ///
    /// # Errors
    /// `NotFound` / `Archived`; `Invalid` if the memory superseded nothing; `Poisoned`, `DiskFull`, `Io`.
    pub fn compact_undo(&self, merged: MemoryId) -> Result<Unmerged> {
        let restored = self.commit(|ids, state| {
            self.reach(state, merged)?;
            let m = state
                .table
                .get(merged)
                .ok_or_else(|| super::missing(state, merged))?;
            let sources: Vec<_> = m
                .supersedes
                .iter()
                .filter_map(|s| state.table.archived(*s))
                .collect();
            if sources.is_empty() {
                return Err(EngineError::Invalid {
                    field: "memory_id",
                    reason: format!("memory {merged} supersedes no archived memory"),
                });
            }
            let mut ops = vec![Op::Archive { id: merged }];
            let mut restored: Vec<MemoryId> = Vec::new();
            let mut hashes: HashSet<[u8; 32]> = HashSet::new();
            for a in sources {
                // A text already live (or restored a moment ago) stays archived: restoring it
                // again would make two live copies. It is still reachable through lineage.
                let hash = a.record.content_hash;
                if state
                    .table
                    .find_hash(&m.user_id, &hash)
                    .is_some_and(|id| id != merged)
                    || !hashes.insert(hash)
                {
                    continue;
                }
                let mut r = a.record.clone();
                r.id = ids.nth(restored.len() as u64);
                // An undone update makes the older value hold again.
                if r.decision
                    .is_some_and(crate::hooks::facts::Rule::closes_validity)
                {
                    r.valid_to = None;
                }
                r.decision = None;
                // The first copy also names the undone record, which stays reachable through
                // lineage: after a supersede it holds the only copy of the newer statement.
                r.supersedes = if restored.is_empty() {
                    vec![a.record.id, merged]
                } else {
                    vec![a.record.id]
                };
                restored.push(r.id);
                ops.push(Op::Store {
                    record: Box::new(r),
                    vector: a.vector.clone(),
                });
            }
            if restored.is_empty() {
                return Err(EngineError::Invalid {
                    field: "memory_id",
                    reason: format!("every text memory {merged} supersedes is live already"),
                });
            }
            Ok((Some(Op::Batch(ops)), restored))
        })?;
        Ok(Unmerged {
            archived: merged,
            restored,
        })
    }
}

fn groups_id(groups: &[CompactionGroup]) -> String {
    let ids: Vec<Vec<u64>> = groups
        .iter()
        .map(|g| g.members.iter().map(|m| m.0).collect())
        .collect();
    short_id(&serde_json::json!(ids))
}
