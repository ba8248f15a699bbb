//! Step 3 of a write, under the writer mutex: the hooks decide (tags, exact and semantic
//! dedup, merge or supersede, the memory limit) and one operation is committed.

use super::plan::*;
use super::request::*;
use crate::error::{EngineError, KernelError, Result};
use crate::hooks::facts::content_words;
use crate::hooks::tags::{self as tag_rules, TagDecision, TagForm};
use crate::hooks::{Effective, dedup};
use crate::kernel::log::Op;
use crate::kernel::record::{self, MAX_TAGS, Memory, MemoryId, Timestamp};
use crate::kernel::state::State;
use crate::memory::space::UserSpace;
use crate::memory::{check_vector, model_switched, preview};
use crate::store::Store;
use amberdb_index::kernels;

/// For an item: deletes the user's live item of the same key in the frame that stores `new`
/// (`docs/semantics.md`, "Items"), and returns its id. A new put keeps when the key was first
/// written (an import keeps its own times).
pub(super) fn replace_item(
    state: &State,
    user: &str,
    new: &mut Memory,
    keep_created: bool,
    ops: &mut Vec<Op>,
) -> Option<MemoryId> {
    let key = &new.item.as_ref()?.key;
    let old = state.get(state.find_item(user, key)?)?;
    if keep_created {
        if new.valid_from == new.created_at {
            new.valid_from = old.created_at;
        }
        new.created_at = old.created_at;
    }
    ops.push(Op::Delete { id: old.id });
    Some(old.id)
}

/// Archives each live record of `ids` with the rule that decided it (`Memory::decision`,
/// for audit) and, when `close_at` is given, its validity closed then (unless it ended
/// earlier): one `Update` and one `Archive` each.
pub(super) fn archive_decided(
    state: &State,
    ids: &[MemoryId],
    close_at: Option<Timestamp>,
    plan: &dedup::Plan,
    ops: &mut Vec<Op>,
) {
    for id in ids {
        if let Some(old) = state.get(*id) {
            let mut decided = old.clone();
            if let Some(at) = close_at {
                // A value replaced at the moment it began held for the shortest time a
                // record can say (validity must end after it starts, docs/format/log.md).
                let end = old.valid_to.map_or(at, |t| t.min(at));
                decided.valid_to = Some(end.max(Timestamp(old.valid_from.0.saturating_add(1))));
            }
            decided.decision = plan.rule_of(*id);
            ops.push(Op::Update {
                record: Box::new(decided),
            });
        }
        ops.push(Op::Archive { id: *id });
    }
}

/// The decide phase of the tags hook: each tag → an exact canonical tag, the best canonical
/// tag the merge decision accepts, or a new canonical tag (one `CanonicalTag` op each).
/// Returns the stored tags (unique, in input order), the ops and the new canonical names.
pub(crate) fn resolve_tags(
    state: &State,
    user: &str,
    tags: &[String],
    vectors: &[Option<Vec<f32>>],
    eff: &Effective,
) -> (Vec<String>, Vec<Op>, Vec<String>) {
    let calibration = eff.calibration;
    if !eff.tags {
        return (tags.to_vec(), Vec::new(), Vec::new());
    }
    // Lowest raw similarity that can still merge (the related threshold less the boost): the
    // merge decision is skipped below it.
    let prefilter = calibration.tag_related - calibration.tag_substring_boost;
    let canonical = state.canonical(user);
    let mut added: Vec<(String, TagForm, Vec<f32>)> = Vec::new();
    let mut out: Vec<String> = Vec::with_capacity(tags.len());
    let mut ops = Vec::new();
    for (tag, vector) in tags.iter().zip(vectors) {
        let exact = canonical.is_some_and(|c| c.contains(tag)) || added.iter().any(|a| &a.0 == tag);
        let chosen = if exact {
            tag.clone()
        } else if let Some(v) = vector {
            let form = TagForm::of(tag);
            let mut best: Option<(f32, String)> = None;
            let mut consider = |name: &str, cform: &TagForm, sim: f32| {
                if sim >= prefilter
                    && best.as_ref().is_none_or(|(b, _)| sim > *b)
                    && tag_rules::decide(&form, cform, sim, calibration) == TagDecision::Merge
                {
                    best = Some((sim, name.to_owned()));
                }
            };
            if let Some(c) = canonical {
                // One kernel call over every canonical vector; the form and the decision only
                // for the few that can pass.
                let sims = kernels::dot_rows(v, c.vectors()).unwrap_or_default();
                for (name, sim) in c.names().iter().zip(sims) {
                    if sim >= prefilter {
                        consider(name, &TagForm::of(name), sim);
                    }
                }
            }
            for (name, cform, cv) in &added {
                consider(name, cform, kernels::dot(v, cv).unwrap_or(0.0));
            }
            match best {
                Some((_, name)) => name,
                None => {
                    ops.push(Op::CanonicalTag {
                        user_id: user.to_owned(),
                        tag: tag.clone(),
                        vector: v.clone(),
                    });
                    added.push((tag.clone(), form, v.clone()));
                    tag.clone()
                }
            }
        } else {
            tag.clone()
        };
        if !out.contains(&chosen) {
            out.push(chosen);
        }
    }
    let names = added.into_iter().map(|a| a.0).collect();
    (out, ops, names)
}

/// The deterministic merge (`docs/semantics.md`, "Dedup at store time", step 5) of `new` (not
/// stored yet, with `new_vector`) and the live `sources`; `updated` are superseded as well.
/// Returns the merged record (id `id`) and its vector, or why the merge is refused.
pub(crate) fn merge(
    id: MemoryId,
    new: &Memory,
    new_vector: &[f32],
    sources: &[(&Memory, &[f32])],
    updated: &[MemoryId],
    now: Timestamp,
) -> Result<(Memory, Vec<f32>), &'static str> {
    let all: Vec<(&Memory, &[f32])> = std::iter::once((new, new_vector))
        .chain(sources.iter().copied())
        .collect();
    let kept = all
        .iter()
        .max_by(|a, b| completeness(a.0).cmp(&completeness(b.0)))
        .copied()
        .ok_or("nothing to merge")?;
    let mut tags: Vec<String> = Vec::new();
    for (m, _) in &all {
        for t in &m.tags {
            if !tags.contains(t) {
                tags.push(t.clone());
            }
        }
    }
    if tags.len() > MAX_TAGS {
        return Err("merge refused: the union of the tags is over 10; stored on its own");
    }
    let max_conf = all.iter().map(|(m, _)| m.confidence).fold(0.0f32, f32::max);
    let mut supersedes: Vec<MemoryId> = all.iter().map(|(m, _)| m.id).collect();
    supersedes.extend_from_slice(updated);
    let k = kept.0;
    Ok((
        Memory {
            id,
            user_id: k.user_id.clone(),
            kind: k.kind,
            session_id: k.session_id.clone(),
            agent_id: k.agent_id.clone(),
            role: k.role,
            content: k.content.clone(),
            content_hash: k.content_hash,
            category: k.category,
            tags,
            created_at: all.iter().map(|(m, _)| m.created_at).min().unwrap_or(now),
            updated_at: now,
            last_accessed_at: all
                .iter()
                .map(|(m, _)| m.last_accessed_at)
                .max()
                .unwrap_or(now),
            access_count: all.iter().map(|(m, _)| m.access_count).sum(),
            helpful_count: all.iter().map(|(m, _)| m.helpful_count).sum(),
            harmful_count: all.iter().map(|(m, _)| m.harmful_count).sum(),
            confidence: max_conf + 0.1 * (1.0 - max_conf),
            supersedes,
            // One statement, however often said: it holds from its first saying, until the
            // latest end any saying gave (open if one is open).
            valid_from: all.iter().map(|(m, _)| m.valid_from).min().unwrap_or(now),
            valid_to: all
                .iter()
                .map(|(m, _)| m.valid_to)
                .try_fold(Timestamp(i64::MIN), |acc, t| t.map(|t| acc.max(t))),
            decision: None,
            item: k.item.clone(),
            source_id: k.source_id.clone(),
        },
        kept.1.to_vec(),
    ))
}

/// How complete a text is: distinct content words, then characters, then recency.
pub(super) fn completeness(m: &Memory) -> (usize, usize, Timestamp, MemoryId) {
    (
        content_words(&m.content).len(),
        m.content.chars().count(),
        m.created_at,
        m.id,
    )
}

impl Store {
    /// Stores every request as a plain record, all in one frame or none (`add_turns`): for
    /// requests whose hooks are off (no dedup, no tag or category resolution), as long as
    /// `unchanged` holds of the state they are committed to (checked under the writer lock);
    /// `None` when it did not, and nothing was stored. Any error means nothing was stored.
    ///
    /// # Errors
    /// As `store_memory`, naming no position (the caller validated each request first);
    /// `LimitExceeded` when the whole list is over one frame (16 MiB).
    pub(crate) fn store_all_or_none(
        &self,
        reqs: Vec<StoreRequest>,
        unchanged: &dyn Fn(&State) -> bool,
    ) -> Result<Option<Vec<MemoryId>>> {
        let planned: Vec<Planned> = reqs
            .into_iter()
            .map(|r| self.plan(r))
            .collect::<Result<_>>()?;
        loop {
            if let Some(ids) = self.store_all_or_none_embedded(&planned, unchanged)? {
                return Ok(ids);
            }
        }
    }

    /// `store_all_or_none` with one embedder; `None` if a re-embedding switched it meanwhile,
    /// `Some(None)` if `unchanged` failed.
    pub(super) fn store_all_or_none_embedded(
        &self,
        planned: &[Planned],
        unchanged: &dyn Fn(&State) -> bool,
    ) -> Result<Option<Option<Vec<MemoryId>>>> {
        let refs: Vec<&Planned> = planned.iter().collect();
        let embedded = self.embed_planned(&refs, None)?;
        // One model call, so one epoch; with nothing embedded, any epoch is the right one.
        let epoch = embedded
            .first()
            .map_or_else(|| self.embedding().epoch, |e| e.epoch);
        let mut categories = Vec::with_capacity(planned.len());
        for (p, e) in planned.iter().zip(&embedded) {
            check_vector(e.dim, &e.content)?;
            categories.push(self.resolve_category(&p.category, e).0);
        }
        let limit = self.inner.options.memory_limit;
        let now = self.now();
        self.commit_embedded(epoch, |next, state| {
            if !unchanged(state) {
                return Ok((None, None));
            }
            if state.live_count() + planned.len() > limit {
                return Err(EngineError::MemoryLimitReached {
                    limit,
                    held: state.live_count(),
                    adding: planned.len(),
                });
            }
            let mut ops = Vec::with_capacity(planned.len());
            let mut ids = Vec::with_capacity(planned.len());
            for (i, ((p, e), category)) in
                planned.iter().zip(&embedded).zip(&categories).enumerate()
            {
                // Chat turns create their session (the table makes its entity from the first
                // record that names it): only one that exists is checked.
                let session =
                    p.m.session_id
                        .as_deref()
                        .filter(|s| state.has_entity(record::EntityKind::Session, &p.user, s));
                let agent_id = crate::memory::scope::check_scope(
                    state,
                    &p.user,
                    session,
                    p.m.agent_id.as_deref(),
                )?;
                let id = next.nth(i as u64);
                let record = p.record(
                    id,
                    (*category, p.tags.clone(), agent_id),
                    p.content_hash,
                    now,
                );
                ops.push(Op::Store {
                    record: Box::new(record),
                    vector: e.content.clone(),
                });
                ids.push(id);
            }
            Ok((crate::memory::one_frame(ops), Some(ids)))
        })
    }

    /// Steps 3–7: the decide phase of every hook under the writer lock, then one commit. When
    /// a re-embedding switched the store's embedder after `e` was computed, the request is
    /// embedded again by the new one; a caller's own vector is refused then.
    pub(super) fn decide_and_commit(&self, p: Planned, mut e: Embedded) -> Result<Stored> {
        loop {
            if let Some(stored) = self.decide_and_commit_embedded(&p, &e)? {
                return Ok(stored);
            }
            if e.given {
                return Err(model_switched());
            }
            e = self.embed_one(&p, None)?;
        }
    }

    pub(super) fn decide_and_commit_embedded(
        &self,
        p: &Planned,
        e: &Embedded,
    ) -> Result<Option<Stored>> {
        check_vector(e.dim, &e.content)?;
        let (category, category_reason) = self.resolve_category(&p.category, e);
        let limit = self.inner.options.memory_limit;
        let content_hash = p.content_hash;
        let now = self.now();
        let eff = p.eff.with_calibration(e.calibration);
        self.commit_embedded(e.epoch, |ids, state| {
            let (tags, mut ops, new_canonical) =
                resolve_tags(state, &p.user, &p.tags, &e.tags, &eff);
            let m = &p.m;
            let agent_id = crate::memory::scope::check_scope(
                state,
                &p.user,
                m.session_id.as_deref(),
                m.agent_id.as_deref(),
            )?;
            if p.eff.exact_dedup
                && m.kind != record::Kind::Message
                && let Some(existing) = state.find_hash(&p.user, &content_hash)
            {
                return Err(EngineError::AlreadyExists { existing });
            }
            // An import keeps its source id when no id at or above it is used yet.
            let id = p
                .kept
                .and_then(|k| k.id)
                .filter(|id| *id >= ids.nth(0))
                .unwrap_or(ids.nth(0));
            let mut new = p.record(id, (category, tags, agent_id), content_hash, now);
            let replaced = replace_item(state, &p.user, &mut new, p.kept.is_none(), &mut ops);
            let plan = semantic_plan(state, p, e);
            let mut reason = plan.refused.map(str::to_owned);
            // Updated statements that became valid before the new one (or at the same moment:
            // the later said wins) are its older values; any other is a newer value of the
            // slot, which makes the new one history
            // (`docs/semantics.md`, "Validity in time").
            let (older, later): (Vec<MemoryId>, Vec<MemoryId>) =
                plan.updated.iter().partition(|id| {
                    state
                        .get(**id)
                        .is_some_and(|o| o.valid_from <= new.valid_from)
                });
            let mut archived: Vec<MemoryId> = Vec::new();
            let mut merged_record = None;
            if !plan.duplicates.is_empty() {
                let merged_id = MemoryId(new.id.0.saturating_add(1)).max(ids.nth(1));
                match merged(state, &plan, (&new, &e.content), &older, merged_id, now) {
                    Ok((merged, changes)) => {
                        ops.extend(changes.ops);
                        archived.extend(changes.archived);
                        merged_record = Some(merged);
                    }
                    Err(why) => reason = Some(why.to_owned()),
                }
            }
            let (outcome, live) = match merged_record {
                Some(merged) => (Outcome::Merged, merged),
                None if !later.is_empty() => {
                    let (linked, changes) =
                        as_history(state, &plan, (&mut new, &e.content), &older, &later)?;
                    ops.extend(changes.ops);
                    archived.extend(changes.archived);
                    (Outcome::History, linked)
                }
                None => {
                    let mut outcome = Outcome::Stored;
                    if !older.is_empty() {
                        archive_decided(state, &older, Some(new.valid_from), &plan, &mut ops);
                        archived.extend(&older);
                        new.supersedes.clone_from(&older);
                        outcome = Outcome::Superseded;
                    }
                    ops.push(Op::Store {
                        record: Box::new(new.clone()),
                        vector: e.content.clone(),
                    });
                    (outcome, new)
                }
            };
            // A merge or a supersede archives at least as many live memories as it adds.
            if archived.is_empty() && replaced.is_none() && state.live_count() >= limit {
                return Err(EngineError::MemoryLimitReached {
                    limit,
                    held: state.live_count(),
                    adding: 1,
                });
            }
            let stored = Stored {
                memory_id: live.id,
                outcome,
                content_preview: preview(&live.content),
                category: live.category,
                category_reason,
                tags: live.tags.clone(),
                new_canonical_tags: new_canonical,
                created_at: live.created_at,
                valid_from: live.valid_from,
                supersedes: archived,
                dedup_candidates: plan.candidates,
                decisions: plan
                    .decisions
                    .iter()
                    .map(|(id, d)| DedupDecision {
                        memory_id: *id,
                        relation: d.relation,
                        reason: d.rule,
                    })
                    .collect(),
                reason,
                replaced,
            };
            Ok((crate::memory::one_frame(ops), stored))
        })
    }
}

/// Semantic dedup's plan for a new statement (none for a message, or with the hook off).
fn semantic_plan(state: &State, p: &Planned, e: &Embedded) -> dedup::Plan {
    let eff = p.eff.with_calibration(e.calibration);
    if !eff.semantic_dedup || p.m.kind == record::Kind::Message {
        return dedup::Plan::default();
    }
    let space = UserSpace {
        state,
        user: &p.user,
        kind: p.m.kind,
    };
    dedup::plan(
        &space,
        &e.content,
        &p.m.content,
        1.0 - eff.dedup_distance(),
        None,
        (eff.merge, &eff.calibration.judge),
    )
}

/// The operations one decision adds, and the live memories it archives.
#[derive(Default)]
struct Changes {
    ops: Vec<Op>,
    archived: Vec<MemoryId>,
}

/// A merge of the new statement (`new`, its vector) with its duplicates: the merged record at
/// `merged_id`, with the new saying, the duplicates and the older values archived; or why it
/// cannot merge.
fn merged(
    state: &State,
    plan: &dedup::Plan,
    (new, vector): (&Memory, &[f32]),
    older: &[MemoryId],
    merged_id: MemoryId,
    now: Timestamp,
) -> std::result::Result<(Memory, Changes), &'static str> {
    let sources: Vec<(&Memory, &[f32])> = plan
        .duplicates
        .iter()
        .filter_map(|id| Some((state.get(*id)?, state.vectors().vector(id.0)?)))
        .collect();
    let (merged, merged_vector) = merge(merged_id, new, vector, &sources, older, now)?;
    let mut c = Changes::default();
    // The new saying goes straight to the archive, merged for the rule that found its first
    // duplicate.
    let mut said = new.clone();
    said.decision = plan.duplicates.first().and_then(|d| plan.rule_of(*d));
    c.ops.push(Op::StoreArchived {
        record: Box::new(said),
        vector: vector.to_vec(),
    });
    c.archived.push(new.id);
    archive_decided(state, &plan.duplicates, None, plan, &mut c.ops);
    c.archived.extend(&plan.duplicates);
    archive_decided(state, older, Some(new.valid_from), plan, &mut c.ops);
    c.archived.extend(older);
    c.ops.push(Op::Store {
        record: Box::new(merged.clone()),
        vector: merged_vector,
    });
    Ok((merged, c))
}

/// The new statement stored as history: the earliest newer value of its slot (`later`)
/// closes it and names it in its lineage; the older values are archived. Returns the
/// successor as linked.
fn as_history(
    state: &State,
    plan: &dedup::Plan,
    (new, vector): (&mut Memory, &[f32]),
    older: &[MemoryId],
    later: &[MemoryId],
) -> Result<(Memory, Changes)> {
    let successor = later
        .iter()
        .filter_map(|id| state.get(*id))
        .min_by_key(|m| (m.valid_from, m.id))
        .ok_or_else(|| {
            EngineError::Kernel(KernelError::Internal {
                context: "store",
                reason: "a newer value of the slot is not live".into(),
            })
        })?;
    let mut c = Changes::default();
    archive_decided(state, older, Some(new.valid_from), plan, &mut c.ops);
    c.archived.extend(older);
    new.supersedes = older.to_vec();
    new.decision = plan.rule_of(successor.id);
    // It holds until the next value of the slot: the successor, or a replaced value in its
    // lineage that began after this one.
    let next_from = state
        .lineage(successor.id)
        .iter()
        .map(|a| &a.record)
        .filter(|r| r.valid_to.is_some() && r.valid_from > new.valid_from)
        .map(|r| r.valid_from)
        .fold(successor.valid_from, Timestamp::min);
    new.valid_to = Some(new.valid_to.map_or(next_from, |t| t.min(next_from)));
    c.ops.push(Op::StoreArchived {
        record: Box::new(new.clone()),
        vector: vector.to_vec(),
    });
    let mut linked = successor.clone();
    linked.supersedes.push(new.id);
    c.ops.push(Op::Update {
        record: Box::new(linked.clone()),
    });
    c.archived.push(new.id);
    Ok((linked, c))
}
