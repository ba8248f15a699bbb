//! Tag statistics, bulk re-normalization with a preview, and snapshots to undo it
//! (`docs/semantics.md`, "Operations").

use super::{in_range, short_id};
use crate::error::{EngineError, Result};
use crate::hooks::tags::{self as tag_rules, TagDecision, TagForm};
use crate::kernel::log::Op;
use crate::kernel::record::{MAX_DESCRIPTION_CHARS, MemoryId, TagSnapshot, Timestamp};
use crate::kernel::state::State;
use crate::store::Store;
use amberdb_index::kernels;
use std::collections::{BTreeMap, BTreeSet};

/// One planned tag rewrite.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TagChange {
    /// The tag in use.
    pub from: String,
    /// The canonical tag it becomes.
    pub to: String,
    /// Its similarity.
    pub similarity: f32,
    /// Memories that carry it.
    pub memories: usize,
}

/// `tag_normalize_preview`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TagPreview {
    /// Id of this plan: pass it to `tag_normalize_apply`.
    pub preview_id: String,
    /// Memories scanned.
    pub scanned: usize,
    /// Distinct tags in use now.
    pub unique_before: usize,
    /// Distinct tags in use after the rewrite.
    pub unique_after: usize,
    /// Tags that would be rewritten.
    pub planned_updates: usize,
    /// Memories that would change.
    pub affected_memories: usize,
    /// The 20 changes touching the most memories.
    pub changes: Vec<TagChange>,
}

/// `tag_normalize_apply`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TagsApplied {
    /// Memories whose tags changed.
    pub applied_count: usize,
    /// The plan applied.
    pub preview_id: String,
}

/// `snapshot_create`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SnapshotCreated {
    /// sha256 of the tag map, 16 hex digits: the same tags give the same id.
    pub snapshot_id: String,
    /// Memories it covers.
    pub memory_count: usize,
    /// When it was taken.
    pub created_at: Timestamp,
}

/// `snapshot_restore`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SnapshotRestored {
    /// Memories of the snapshot still live, whose tags are now the snapshot's (as
    /// vector-memory-mcp counts: every memory rewritten, changed or not).
    pub restored_count: usize,
    /// Of those, the memories whose tags differed and were set back.
    pub changed_count: usize,
    /// Memories of the snapshot no longer live (deleted or archived since).
    pub missing_count: usize,
}

/// Tag mapping plan of one user.
struct Plan {
    mapping: BTreeMap<String, (String, f32)>,
    tag_use: BTreeMap<String, usize>,
    scanned: usize,
}

fn check_threshold(threshold: f32, max_changes: usize) -> Result<()> {
    if !(threshold.is_finite() && (0.5..=1.0).contains(&threshold)) {
        return Err(EngineError::Invalid {
            field: "threshold",
            reason: format!("{threshold} is not in 0.5..=1.0"),
        });
    }
    in_range("max_changes", max_changes, 1, 10_000)
}

impl Store {
    /// Tags on the user's live memories, sorted (`get_unique_tags`).
    ///
    /// # Errors
    /// `Invalid` for a bad user id.
    pub fn unique_tags(&self, user_id: Option<&str>) -> Result<Vec<String>> {
        Ok(self
            .tag_frequencies(user_id)?
            .into_iter()
            .map(|(t, _)| t)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect())
    }

    /// The user's canonical tags, sorted (`get_canonical_tags`).
    ///
    /// # Errors
    /// `Invalid` for a bad user id.
    pub fn canonical_tags(&self, user_id: Option<&str>) -> Result<Vec<String>> {
        let user = self.user_for(user_id)?;
        let user = user.as_str();
        let state = self.read();
        let mut v: Vec<String> = state
            .canonical(user)
            .map(|c| c.names().to_vec())
            .unwrap_or_default();
        v.sort();
        Ok(v)
    }

    /// IDF weights `1/ln(1+freq)` of the user's tags, largest (rarest) first
    /// (`get_tag_weights`).
    ///
    /// # Errors
    /// `Invalid` for a bad user id.
    pub fn tag_weights(&self, user_id: Option<&str>) -> Result<Vec<(String, f64)>> {
        #[expect(clippy::cast_precision_loss, reason = "frequencies far below 2^52")]
        let mut v: Vec<(String, f64)> = self
            .tag_frequencies(user_id)?
            .into_iter()
            .map(|(t, n)| (t, 1.0 / (1.0 + n as f64).ln()))
            .collect();
        v.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        Ok(v)
    }

    /// The mapping of non-canonical tags in use to canonical tags (embedding outside locks).
    fn tag_plan(&self, user: &str, threshold: f32, max_changes: usize) -> Result<Plan> {
        let calibration = self.calibration();
        let (tag_use, scanned, unknown) = {
            let state = self.read();
            let mut tag_use: BTreeMap<String, usize> = BTreeMap::new();
            let mut scanned = 0;
            for m in state.iter().filter(|m| m.user_id == user) {
                scanned += 1;
                for t in &m.tags {
                    *tag_use.entry(t.clone()).or_default() += 1;
                }
            }
            let canonical = state.canonical(user);
            let unknown: Vec<String> = tag_use
                .keys()
                .filter(|t| !canonical.is_some_and(|c| c.contains(t)))
                .cloned()
                .collect();
            (tag_use, scanned, unknown)
        };
        let forms: Vec<String> = unknown
            .iter()
            .map(|t| tag_rules::embedding_form(t))
            .collect();
        let refs: Vec<&str> = forms.iter().map(String::as_str).collect();
        // Embedded again when a re-embedding switched the embedder meanwhile, so the tags are
        // compared with canonical vectors of the same model.
        let (vectors, state) = loop {
            let embedding = self.embedding();
            let vectors = if refs.is_empty() {
                Vec::new()
            } else {
                embedding.embedder.embed_batch(&refs)?
            };
            let state = self.read();
            if state.model_epoch() == embedding.epoch {
                break (vectors, state);
            }
        };
        let mut mapping = BTreeMap::new();
        if let Some(canonical) = state.canonical(user) {
            for (tag, v) in unknown.iter().zip(&vectors) {
                if mapping.len() >= max_changes {
                    break;
                }
                let form = TagForm::of(tag);
                let sims = kernels::dot_rows(v, canonical.vectors()).unwrap_or_default();
                let best = canonical
                    .names()
                    .iter()
                    .zip(sims)
                    .filter(|(_, sim)| *sim >= threshold)
                    .filter(|(name, sim)| {
                        tag_rules::decide(&form, &TagForm::of(name), *sim, calibration)
                            == TagDecision::Merge
                    })
                    .max_by(|a, b| a.1.total_cmp(&b.1));
                if let Some((name, sim)) = best {
                    mapping.insert(tag.clone(), (name.to_owned(), sim));
                }
            }
        }
        Ok(Plan {
            mapping,
            tag_use,
            scanned,
        })
    }

    /// What `tag_normalize_apply` would change, without changing anything: each tag in use
    /// that is not canonical, mapped to the best canonical tag that passes `threshold`
    /// (0.5..=1.0, default 0.90) and the merge decision, at most `max_changes` (1..=10,000).
    ///
    /// # Errors
    /// `Invalid` / `LimitExceeded` naming the parameter; `Embed`.
    pub fn tag_normalize_preview(
        &self,
        user_id: Option<&str>,
        threshold: f32,
        max_changes: usize,
    ) -> Result<TagPreview> {
        check_threshold(threshold, max_changes)?;
        let user = self.user_for(user_id)?;
        let user = user.as_str();
        let plan = self.tag_plan(user, threshold, max_changes)?;
        let affected = rewrites(&self.read(), user, &plan.mapping);
        let after: BTreeSet<&String> = plan
            .tag_use
            .keys()
            .map(|t| plan.mapping.get(t).map_or(t, |(to, _)| to))
            .collect();
        let mut changes: Vec<TagChange> = plan
            .mapping
            .iter()
            .map(|(from, (to, sim))| TagChange {
                from: from.clone(),
                to: to.clone(),
                similarity: *sim,
                memories: plan.tag_use.get(from).copied().unwrap_or(0),
            })
            .collect();
        changes.sort_by(|a, b| b.memories.cmp(&a.memories).then(a.from.cmp(&b.from)));
        let planned = changes.len();
        changes.truncate(20);
        Ok(TagPreview {
            preview_id: mapping_id(&plan.mapping),
            scanned: plan.scanned,
            unique_before: plan.tag_use.len(),
            unique_after: after.len(),
            planned_updates: planned,
            affected_memories: affected.len(),
            changes,
        })
    }

    /// Applies the plan `tag_normalize_preview` returned as `preview_id`, recomputed now (its
    /// id must match), after `snapshot_id` was taken: one frame rewrites every affected
    /// memory's tags (content and vectors untouched).
    ///
    /// # Errors
    /// `SnapshotNotFound`, `PreviewMismatch` (with both ids), `Invalid` / `LimitExceeded`.
    pub fn tag_normalize_apply(
        &self,
        user_id: Option<&str>,
        preview_id: &str,
        snapshot_id: &str,
        threshold: f32,
        max_changes: usize,
    ) -> Result<TagsApplied> {
        check_threshold(threshold, max_changes)?;
        let user = self.user_for(user_id)?;
        let user = user.as_str();
        self.require_snapshot(user, snapshot_id)?;
        let plan = self.tag_plan(user, threshold, max_changes)?;
        let expected = mapping_id(&plan.mapping);
        if expected != preview_id {
            return Err(EngineError::PreviewMismatch {
                expected,
                provided: preview_id.to_owned(),
            });
        }
        let applied = self.commit(|_, state| {
            let at = self.now();
            let ops: Vec<Op> = rewrites(state, user, &plan.mapping)
                .into_iter()
                .map(|(id, tags)| Op::SetTags { id, tags, at })
                .collect();
            let applied = ops.len();
            Ok((super::one_frame(ops), applied))
        })?;
        Ok(TagsApplied {
            applied_count: applied,
            preview_id: preview_id.to_owned(),
        })
    }

    fn require_snapshot(&self, user: &str, snapshot_id: &str) -> Result<()> {
        let state = self.read();
        if state
            .snapshots(user)
            .is_some_and(|s| s.contains_key(snapshot_id))
        {
            Ok(())
        } else {
            Err(EngineError::SnapshotNotFound {
                snapshot_id: snapshot_id.to_owned(),
            })
        }
    }

    /// Records every live memory's tags of the user (`snapshot_create`). The same tags give
    /// the same id; taking it again replaces the description.
    ///
    /// # Errors
    /// `LimitExceeded` for a description over 1,000 characters or a snapshot over one frame
    /// (16 MiB); `Poisoned`, `DiskFull`, `Io`.
    pub fn snapshot_create(
        &self,
        user_id: Option<&str>,
        description: &str,
    ) -> Result<SnapshotCreated> {
        let user = self.user_for(user_id)?;
        in_range(
            "description length (characters)",
            description.chars().count(),
            0,
            MAX_DESCRIPTION_CHARS,
        )?;
        let created_at = self.now();
        let (snapshot_id, memory_count) = self.commit(|_, state| {
            let entries: Vec<(MemoryId, Vec<String>)> = state
                .iter()
                .filter(|m| m.user_id == user)
                .map(|m| (m.id, m.tags.clone()))
                .collect();
            let map: BTreeMap<String, &Vec<String>> = entries
                .iter()
                .map(|(id, t)| (id.0.to_string(), t))
                .collect();
            let snapshot_id = short_id(&serde_json::json!(map));
            let created = (snapshot_id.clone(), entries.len());
            let op = Op::Snapshot(Box::new(TagSnapshot {
                user_id: user.clone(),
                snapshot_id,
                description: description.to_owned(),
                created_at,
                entries,
            }));
            Ok((Some(op), created))
        })?;
        Ok(SnapshotCreated {
            snapshot_id,
            memory_count,
            created_at,
        })
    }

    /// Sets every memory of the snapshot that is still live back to its recorded tags, in one
    /// frame (`snapshot_restore`).
    ///
    /// # Errors
    /// `SnapshotNotFound`; `Poisoned`, `DiskFull`, `Io`.
    pub fn snapshot_restore(
        &self,
        user_id: Option<&str>,
        snapshot_id: &str,
    ) -> Result<SnapshotRestored> {
        let user = self.user_for(user_id)?;
        let (restored, changed, missing) = self.commit(|_, state| {
            let snapshot = state
                .snapshots(&user)
                .and_then(|s| s.get(snapshot_id))
                .ok_or_else(|| EngineError::SnapshotNotFound {
                    snapshot_id: snapshot_id.to_owned(),
                })?;
            let at = self.now();
            let mut ops = Vec::new();
            let (mut restored, mut missing) = (0, 0);
            for (id, tags) in &snapshot.entries {
                match state.get(*id) {
                    Some(m) => {
                        restored += 1;
                        if &m.tags != tags {
                            ops.push(Op::SetTags {
                                id: *id,
                                tags: tags.clone(),
                                at,
                            });
                        }
                    }
                    None => missing += 1,
                }
            }
            let changed = ops.len();
            Ok((super::one_frame(ops), (restored, changed, missing)))
        })?;
        Ok(SnapshotRestored {
            restored_count: restored,
            changed_count: changed,
            missing_count: missing,
        })
    }
}

/// The user's memories whose tags `mapping` changes, with their tags after it (in order,
/// duplicates removed).
fn rewrites(
    state: &State,
    user: &str,
    mapping: &BTreeMap<String, (String, f32)>,
) -> Vec<(MemoryId, Vec<String>)> {
    state
        .iter()
        .filter(|m| m.user_id == user && m.tags.iter().any(|t| mapping.contains_key(t)))
        .map(|m| {
            let mut tags: Vec<String> = Vec::new();
            for t in &m.tags {
                let to = mapping.get(t).map_or(t, |(to, _)| to);
                if !tags.contains(to) {
                    tags.push(to.clone());
                }
            }
            (m.id, tags)
        })
        .collect()
}

fn mapping_id(mapping: &BTreeMap<String, (String, f32)>) -> String {
    let plain: BTreeMap<&String, &String> = mapping.iter().map(|(k, (v, _))| (k, v)).collect();
    short_id(&serde_json::json!(plain))
}
