//! Compaction (`docs/semantics.md`, "Compaction"): the store-time merge over stored memories
//! at a stricter distance, with a preview, one frame per merged group, and an undo through
//! lineage.

use super::short_id;
use super::space::{RangeView, UserSpace};
use super::write::merge;
use crate::error::{EngineError, Result};
use crate::hooks::judge::JudgeWeights;
use crate::hooks::{check_distance, dedup};
use crate::kernel::log::Op;
use crate::kernel::record::{self, Kind, Memory, MemoryId, Timestamp};
use crate::store::Store;
use std::collections::{HashMap, HashSet};

/// Memories whose neighbours compaction asks for in one batch (`RangeView::within_each`):
/// enough that a list of the index is read once for several of them (at 1M memories, 16 of
/// 4,000 lists each: 8 queries a list), few enough that their probes stay ~64 MB an IVF
/// segment. At 1M, 512 took 179 s and 2,048 took 110 s (`docs/benchmarks.md`,
/// "Compaction's duplicate search").
const NEIGHBOURS_BATCH: usize = 2048;

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
    /// Live memories of the user when the plan started (the copy its search read).
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
    /// The groups at `distance`, and the user's live memories. The duplicate search, the
    /// costly part (minutes at 1M memories), reads a copy of the vectors, the records and the
    /// user's keys taken once under the read lock (the sealed segments and the records are
    /// shared, the growing rows copied) and holds no lock, so writes go on at their own pace.
    /// Each batch of `NEIGHBOURS_BATCH` memories is then grouped under a short read lock from
    /// the records as they are then: a memory or a neighbour deleted since the copy is left
    /// out, one stored since is in no group. A write during the search can change the plan,
    /// which `compact_apply` notices (it recomputes the plan and compares ids).
    fn compaction_groups(&self, user: &str, distance: f32) -> (Vec<CompactionGroup>, usize) {
        let (order, live, vectors, slots, keys) = {
            let state = self.read();
            let mut mine: Vec<(Timestamp, MemoryId)> = state
                .iter()
                .filter(|m| m.user_id == user && !matches!(m.kind, Kind::Message | Kind::Item))
                .map(|m| (m.created_at, m.id))
                .collect();
            mine.sort_unstable();
            let live = state.iter().filter(|m| m.user_id == user).count();
            (
                mine,
                live,
                state.vectors().clone(),
                state.slots().clone(),
                state.user_keys(user).cloned(),
            )
        };
        #[cfg(test)]
        tests::AFTER_COPY.with(|hook| hook.take().map(|f| f()));
        let copied = |kind| RangeView {
            vectors: &vectors,
            keys: keys.as_ref(),
            slots: &slots,
            kind,
        };
        let min_sim = 1.0 - distance;
        let judge = &self.calibration().judge;
        let mut grouped: HashSet<MemoryId> = HashSet::new();
        let mut groups = Vec::new();
        for block in order.chunks(NEIGHBOURS_BATCH) {
            let block: Vec<&Memory> = block.iter().filter_map(|(_, id)| slots.get(id.0)).collect();
            // The neighbours of the block's memories not grouped yet, asked kind by kind (each
            // kind is its own space). A memory an earlier one of the block groups has them
            // asked for nothing, which costs a little work and changes no answer.
            let mut near: HashMap<MemoryId, Vec<MemoryId>> = HashMap::new();
            let mut kinds: Vec<Kind> = Vec::new();
            for m in &block {
                if !kinds.contains(&m.kind) {
                    kinds.push(m.kind);
                }
            }
            for kind in kinds {
                let anchors: Vec<(MemoryId, &[f32])> = block
                    .iter()
                    .filter(|m| m.kind == kind && !grouped.contains(&m.id))
                    .filter_map(|m| Some((m.id, vectors.vector(m.id.0)?)))
                    .collect();
                let answers = copied(kind).within_each(&anchors, min_sim, dedup::GUARD_CANDIDATES);
                near.extend(anchors.iter().map(|a| a.0).zip(answers));
            }
            let state = self.read();
            for copy in block {
                let Some(m) = state.get(copy.id) else {
                    continue;
                };
                let space = UserSpace {
                    state: &state,
                    user,
                    kind: m.kind,
                };
                if let Some(candidates) = near.get_mut(&m.id) {
                    let now = space.view();
                    candidates.retain(|c| now.holds(c.0));
                }
                if let Some(group) = group_of(&space, m, (min_sim, judge), &mut near, &grouped) {
                    grouped.extend(group.members.iter().copied());
                    groups.push(group);
                }
            }
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
        let distance = distance
            .or(self.inner.options.hooks.compaction_distance)
            .unwrap_or(self.calibration().compaction_distance);
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
                    .map(|id| Some((state.get(*id)?, state.vectors().vector(id.0)?)))
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
                .get(merged)
                .ok_or_else(|| super::missing(state, merged))?;
            let sources: Vec<_> = m
                .supersedes
                .iter()
                .filter_map(|s| state.archived(*s))
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

/// The group `m` anchors, if it is not grouped yet and has duplicates not grouped yet, its
/// neighbours taken from `near` (`UserSpace::within_each`).
fn group_of(
    space: &UserSpace<'_>,
    m: &Memory,
    (min_sim, judge): (f32, &JudgeWeights),
    near: &mut HashMap<MemoryId, Vec<MemoryId>>,
    grouped: &HashSet<MemoryId>,
) -> Option<CompactionGroup> {
    if grouped.contains(&m.id) {
        return None;
    }
    let v = space.state.vectors().vector(m.id.0)?;
    let candidates = near.remove(&m.id)?;
    // Compaction is asked for, previewed and undoable: it merges what the fact guard reads
    // as the same statement in other words too, where a store's automatic merges take only
    // identical restatements (`docs/semantics.md`, "Compaction").
    let plan = dedup::plan_among(
        space,
        candidates,
        v,
        &m.content,
        min_sim,
        Some(m.id),
        (crate::hooks::Merge::Paraphrases, judge),
    );
    let dups: Vec<MemoryId> = plan
        .duplicates
        .into_iter()
        .filter(|d| !grouped.contains(d))
        .collect();
    if dups.is_empty() {
        return None;
    }
    let mut members = vec![m.id];
    members.extend(dups);
    Some(CompactionGroup {
        anchor: m.id,
        members,
    })
}

fn groups_id(groups: &[CompactionGroup]) -> String {
    let ids: Vec<Vec<u64>> = groups
        .iter()
        .map(|g| g.members.iter().map(|m| m.0).collect())
        .collect();
    short_id(&serde_json::json!(ids))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hooks::dedup::Space;
    use crate::{HookConfig, NewMemory, StoreOptions, SyncPolicy};

    /// Compaction as it was before its neighbours came in batches: one range probe
    /// (`UserSpace::within`) per memory, in the same order. The model the batch must equal.
    fn one_probe_per_memory(store: &Store, user: &str, distance: f32) -> Vec<CompactionGroup> {
        let state = store.read();
        let mut mine: Vec<&Memory> = state
            .iter()
            .filter(|m| m.user_id == user && !matches!(m.kind, Kind::Message | Kind::Item))
            .collect();
        mine.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
        let mut grouped: HashSet<MemoryId> = HashSet::new();
        let mut groups = Vec::new();
        for m in mine {
            let space = UserSpace {
                state: &state,
                user,
                kind: m.kind,
            };
            let Some(v) = state.vectors().vector(m.id.0) else {
                continue;
            };
            let near = space.within(v, 1.0 - distance, dedup::GUARD_CANDIDATES, Some(m.id));
            let mut only = HashMap::from([(m.id, near)]);
            let judge = &store.calibration().judge;
            if let Some(g) = group_of(&space, m, (1.0 - distance, judge), &mut only, &grouped) {
                grouped.extend(g.members.iter().copied());
                groups.push(g);
            }
        }
        groups
    }

    thread_local! {
        /// Run by `compaction_groups` on its thread once it has its copy and before it
        /// searches: what a concurrent writer does then.
        pub(super) static AFTER_COPY: std::cell::Cell<Option<Box<dyn FnOnce()>>> =
            std::cell::Cell::new(None);
    }

    #[test]
    fn the_duplicate_search_holds_no_lock_and_groups_what_is_live_when_it_groups() {
        let dir = tempfile::tempdir().unwrap();
        let store = plain_store(dir.path());
        let mut batch = Vec::new();
        for i in 0..800u64 {
            batch.push(NewMemory::new(note(i)));
            if i % 10 == 0 {
                batch.push(NewMemory::new(format!("{} again", note(i))));
            }
        }
        for r in store.store_batch(batch).unwrap() {
            r.unwrap();
        }
        let user = record::DEFAULT_USER;
        let before = store.compaction_groups(user, 0.2).0;
        assert!(before.len() >= 40, "{} groups", before.len());
        // The writer deletes the anchor of every third group and the second member of every
        // other third, and stores a note like no other, while the search runs. Were a lock
        // held across the search, its first write would wait for it forever on this thread.
        let doomed: Vec<MemoryId> = before
            .iter()
            .enumerate()
            .filter_map(|(i, g)| match i % 3 {
                0 => Some(g.anchor),
                1 => g.members.get(1).copied(),
                _ => None,
            })
            .collect();
        let writer = store.clone();
        let stored = std::sync::Arc::new(std::sync::Mutex::new(None));
        let seen = std::sync::Arc::clone(&stored);
        let gone = doomed.clone();
        AFTER_COPY.with(|hook| {
            hook.set(Some(Box::new(move || {
                for id in gone {
                    writer.delete(id).unwrap();
                }
                let id = writer
                    .store(NewMemory::new("zq unlike any other note"))
                    .unwrap()
                    .memory_id;
                *seen.lock().unwrap() = Some(id);
            })));
        });
        let (during, live) = store.compaction_groups(user, 0.2);
        let stored = stored
            .lock()
            .unwrap()
            .expect("the writer ran during the search");
        assert_eq!(live, 880, "the live count is the copy's");
        for g in &during {
            assert!(
                !g.members.contains(&stored),
                "{g:?} holds a memory stored after the copy"
            );
            for d in &doomed {
                assert!(
                    !g.members.contains(d),
                    "{g:?} holds {d:?}, deleted before grouping"
                );
            }
        }
        // What is left groups as a search of the store now would group it (the new note is
        // like no other, so it changes no group).
        assert_eq!(during, one_probe_per_memory(&store, user, 0.2));
        assert!(
            during.len() < before.len(),
            "the deleted anchors' groups are gone"
        );
    }

    /// A store with no hooks and no syncs: compaction's decisions alone.
    fn plain_store(dir: &std::path::Path) -> Store {
        let options = StoreOptions::hashing()
            .sync(SyncPolicy::None)
            .hooks(HookConfig::none());
        Store::open(dir, options).unwrap()
    }

    /// A note from a few common words and three made-up ones: the hashing embedder puts two
    /// notes far apart unless they share most words.
    fn note(i: u64) -> String {
        const WORDS: [&str; 8] = [
            "cache", "deploy", "login", "token", "backup", "report", "meeting", "invoice",
        ];
        let word = |j: u64| WORDS[((i * 2_654_435_761) >> (j * 5)) as usize % WORDS.len()];
        let rare: Vec<String> = (0..3).map(|j| format!("w{}x{j}", i * 7 + j)).collect();
        format!("{} {} {}", word(0), word(1), rare.join(" "))
    }

    #[test]
    fn batched_neighbours_group_exactly_as_one_probe_per_memory() {
        let dir = tempfile::tempdir().unwrap();
        let store = plain_store(dir.path());
        // 6,000 notes of one user (some knowledge, a kind of its own), each tenth said again
        // in other words, and another user's notes the filter must keep out.
        let mut batch = Vec::new();
        for i in 0..6_000u64 {
            let kind = if i % 7 == 0 {
                Kind::Knowledge
            } else {
                Kind::Memory
            };
            batch.push(NewMemory::new(note(i)).kind(kind));
            if i % 10 == 0 {
                batch.push(NewMemory::new(format!("{} again", note(i))).kind(kind));
            }
            if i % 5 == 0 {
                batch.push(NewMemory::new(note(i)).user("someone else"));
            }
        }
        for chunk in batch.chunks(1000) {
            for r in store.store_batch(chunk.to_vec()).unwrap() {
                r.unwrap();
            }
        }
        // Most rows in an IVF segment, some sealed flat, the rest growing; some deleted.
        store.checkpoint().unwrap();
        store.build_index().unwrap();
        let more: Vec<NewMemory> = (6_000..6_600u64)
            .map(|i| NewMemory::new(note(i - 6_000)))
            .collect();
        for r in store.store_batch(more).unwrap() {
            r.unwrap();
        }
        let doomed: Vec<MemoryId> = store
            .read()
            .iter()
            .filter(|m| m.user_id == record::DEFAULT_USER && m.id.0 % 17 == 0)
            .map(|m| m.id)
            .collect();
        for id in doomed {
            store.delete(id).unwrap();
        }
        assert!(
            store
                .read()
                .vectors()
                .sealed()
                .iter()
                .any(|s| s.as_ivf().is_some()),
            "the batch reads IVF lists"
        );
        let user = record::DEFAULT_USER;
        for distance in [0.05, 0.2, 0.35] {
            let (batched, _) = store.compaction_groups(user, distance);
            let model = one_probe_per_memory(&store, user, distance);
            assert_eq!(batched, model, "distance {distance}");
            assert!(
                batched.len() >= 300,
                "distance {distance}: {}",
                batched.len()
            );
        }
    }
}
