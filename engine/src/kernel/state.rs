//! The in-memory state of a store (the metadata table and the vector collection) and the one
//! way an operation changes it.
//!
//! `check` decides whether an operation applies, changing nothing; `apply` checks, then
//! changes. The write path checks before it appends (`docs/durability.md`, step 3), so a frame
//! in the log always applies and `apply` after an append cannot fail short of a bug. Replay
//! applies what the log holds, and a frame that does not apply there means a damaged log
//! (recovery refuses to open).

use crate::kernel::cluster::ClusterLog;
use crate::kernel::log::{Op, Reembed};
use crate::kernel::record::{EntityKind, MemoryId};
use crate::kernel::request::Requests;
use crate::kernel::table::Table;
use amberdb_index::Collection;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

/// Why an operation does not apply: a bug of the write path, or a damaged log.
pub(crate) type Refusal = &'static str;

/// The table and the vectors, changed together by `apply` under the store's write lock.
pub(crate) struct State {
    pub(in crate::kernel) table: Table,
    pub(in crate::kernel) vectors: Collection,
    /// The embedder every vector of the state comes from.
    pub(in crate::kernel) model: Model,
    /// Bumped at every change of `model` in this process: a write or a search whose vectors
    /// were computed before a switch sees it changed and embeds again.
    pub(in crate::kernel) model_epoch: u64,
    /// Vectors of a re-embedding not switched to yet (`docs/durability.md`, "Re-embedding").
    pub(in crate::kernel) stage: Option<Stage>,
    /// Records whose vector was in a damaged segment (`docs/durability.md`, "Recovery",
    /// R4b). No checkpoint is written while any is left.
    pub(in crate::kernel) unindexed: Unindexed,
    /// The request ids of the last two windows (`kernel::request`).
    pub(in crate::kernel) requests: Requests,
    /// The partition log's claim and open chunk group (`kernel::cluster`); empty on a single
    /// node.
    pub(in crate::kernel) cluster: ClusterLog,
}

/// Records (live, or archived since) whose vector was in a damaged segment: out of vector
/// search until restored from their texts (R4b).
#[derive(Debug, Default)]
pub(crate) struct Unindexed {
    /// Not embedded yet.
    pub(crate) waiting: BTreeSet<MemoryId>,
    /// Live records embedded again, put in the collection with the last of them: the
    /// collection takes keys in ascending order only, and these lie below its newer rows.
    restored: HashMap<MemoryId, Vec<f32>>,
}

impl Unindexed {
    /// Records waiting for a restored vector.
    pub(crate) fn waiting(ids: BTreeSet<MemoryId>) -> Unindexed {
        Unindexed {
            waiting: ids,
            restored: HashMap::new(),
        }
    }

    /// Records not in vector search yet.
    pub(crate) fn len(&self) -> usize {
        self.waiting.len() + self.restored.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Live records embedded again and waiting for the last of them: still out of vector
    /// search, but their work is done (restoration's progress, `Stats::vectors_restored`).
    pub(crate) fn ready(&self) -> usize {
        self.restored.len()
    }

    /// Forgets a record deleted for good.
    fn remove(&mut self, id: MemoryId) {
        self.waiting.remove(&id);
        self.restored.remove(&id);
    }
}

/// An embedder, as a store knows it: its model id and dimension.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Model {
    pub(crate) id: String,
    pub(crate) dim: usize,
}

/// New vectors, from one embedder, of records (live or archived) and canonical tags.
#[derive(Debug, Default)]
pub(crate) struct Stage {
    pub(crate) model: Option<Model>,
    pub(crate) records: HashMap<MemoryId, Vec<f32>>,
    pub(crate) tags: HashMap<(String, String), Vec<f32>>,
}

impl Stage {
    /// The operations that rebuild it (a checkpoint's aux section), at most `per_op` vectors
    /// each, records in id order then tags sorted.
    pub(crate) fn ops(&self, per_op: usize) -> Vec<Op> {
        let Some(model) = &self.model else {
            return Vec::new();
        };
        let frame = |records, tags| {
            Op::Reembed(Box::new(Reembed {
                model_id: model.id.clone(),
                dim: u32::try_from(model.dim).unwrap_or(u32::MAX),
                records,
                tags,
                switch: false,
            }))
        };
        let per_op = per_op.max(1);
        let mut records: Vec<(MemoryId, Vec<f32>)> =
            self.records.iter().map(|(k, v)| (*k, v.clone())).collect();
        records.sort_unstable_by_key(|r| r.0);
        let mut tags: Vec<(String, String, Vec<f32>)> = self
            .tags
            .iter()
            .map(|((u, t), v)| (u.clone(), t.clone(), v.clone()))
            .collect();
        tags.sort_unstable_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
        let mut ops: Vec<Op> = records
            .chunks(per_op)
            .map(|c| frame(c.to_vec(), Vec::new()))
            .collect();
        ops.extend(tags.chunks(per_op).map(|c| frame(Vec::new(), c.to_vec())));
        ops
    }
}

/// What the earlier members of a batch did to what the later ones look at, so that a batch is
/// checked whole before any of it is applied.
/// It borrows from the operation being checked.
#[derive(Default)]
struct Overlay<'a> {
    /// Records the batch stored (with their user and content hash) or took out of the live set.
    live: HashMap<MemoryId, Option<(&'a str, &'a [u8; 32])>>,
    /// Records the batch archived.
    archived: HashSet<MemoryId>,
    /// The highest id the batch stored.
    last_stored: Option<u64>,
    /// Canonical tags the batch registered, by user.
    canonical: HashSet<(&'a str, &'a str)>,
    /// Entities the batch created or deleted.
    entities: HashMap<(EntityKind, &'a str, &'a str), bool>,
}

impl State {
    /// A state of `table` and `vectors`, whose vectors come from `model`.
    pub(crate) fn new(table: Table, vectors: Collection, model: Model) -> State {
        State {
            table,
            vectors,
            model,
            model_epoch: 0,
            stage: None,
            unindexed: Unindexed::default(),
            requests: Requests::default(),
            cluster: ClusterLog::default(),
        }
    }

    /// Gives unindexed records their vectors (`docs/durability.md`, R4b, step 5): an
    /// archived one at once, a live one kept aside until the last is in; then the collection
    /// is rebuilt with every live vector as a growing row, in key order, as a re-embedding's
    /// switch does. Ids no longer waiting (deleted, or re-embedded) are skipped. Returns how
    /// many were restored and whether the collection was rebuilt (its segments replaced).
    pub(crate) fn restore_vectors(
        &mut self,
        vectors: Vec<(MemoryId, Vec<f32>)>,
    ) -> Result<(usize, bool), Refusal> {
        // Checked whole before anything changes: a refused batch leaves the state as it was.
        let vectors: Vec<(MemoryId, Vec<f32>)> = vectors
            .into_iter()
            .filter(|(id, _)| self.unindexed.waiting.contains(id))
            .collect();
        if vectors.iter().any(|(id, v)| {
            v.len() != self.model.dim
                || !(self.table.contains(*id) || self.table.archived(*id).is_some())
        }) {
            return Err("restored vector does not fit the store, or its record is gone");
        }
        let mut restored = 0;
        for (id, v) in vectors {
            if self.table.contains(id) {
                self.unindexed.restored.insert(id, v);
            } else if !self.table.set_archived_vector(id, v) {
                return Err("restore of an id that is neither live nor archived");
            }
            self.unindexed.waiting.remove(&id);
            restored += 1;
        }
        if !self.unindexed.waiting.is_empty() || self.unindexed.restored.is_empty() {
            return Ok((restored, false));
        }
        let mut restored_vectors = std::mem::take(&mut self.unindexed.restored);
        let mut vectors = Collection::new(self.model.dim);
        for m in self.table.iter() {
            let v = match restored_vectors.remove(&m.id) {
                Some(v) => v,
                None => self
                    .vectors
                    .vector(m.id.0)
                    .ok_or("a live record without a vector after restoring")?
                    .to_vec(),
            };
            vectors
                .insert(m.id.0, &v)
                .map_err(|_| "restored vector does not fit the store")?;
        }
        self.vectors = vectors;
        Ok((restored, true))
    }

    /// What a re-embedding to `model` still lacks: the live and archived records and the
    /// canonical tags without a staged vector from it.
    pub(crate) fn unstaged(&self, model: &Model) -> (Vec<MemoryId>, Vec<(String, String)>) {
        let staged = self
            .stage
            .as_ref()
            .filter(|s| s.model.as_ref() == Some(model));
        let has_record = |id: &MemoryId| staged.is_some_and(|s| s.records.contains_key(id));
        let mut records: Vec<MemoryId> = self
            .table
            .iter()
            .map(|m| m.id)
            .chain(self.table.archived_ids())
            .filter(|id| !has_record(id))
            .collect();
        records.sort_unstable();
        let tags = self
            .table
            .canonical_tags()
            .filter(|(u, t)| {
                !staged.is_some_and(|s| s.tags.contains_key(&((*u).to_owned(), (*t).to_owned())))
            })
            .map(|(u, t)| (u.to_owned(), t.to_owned()))
            .collect();
        (records, tags)
    }

    /// Whether `op` applies to the current state; nothing changes.
    pub(crate) fn check(&self, op: &Op) -> Result<(), Refusal> {
        self.check_in(op, &mut Overlay::default())
    }

    /// Checks `op`, then applies it. A batch is checked whole first, so it applies whole or
    /// not at all.
    pub(crate) fn apply(&mut self, op: Op) -> Result<(), Refusal> {
        self.check(&op)?;
        self.apply_checked(op)
    }

    /// The user and content hash of `id` if it is live after the batch's earlier members.
    fn live<'a>(&'a self, o: &Overlay<'a>, id: MemoryId) -> Option<(&'a str, &'a [u8; 32])> {
        match o.live.get(&id) {
            Some(known) => *known,
            None => self
                .table
                .get(id)
                .map(|m| (m.user_id.as_str(), &m.content_hash)),
        }
    }

    fn is_archived(&self, o: &Overlay<'_>, id: MemoryId) -> bool {
        o.archived.contains(&id) || self.table.archived(id).is_some()
    }

    fn check_in<'a>(&'a self, op: &'a Op, o: &mut Overlay<'a>) -> Result<(), Refusal> {
        let dim = self.vectors.dim();
        match op {
            Op::Store { record, vector } => {
                let id = record.id;
                if self.live(o, id).is_some() || self.is_archived(o, id) {
                    return Err("store of an id that exists");
                }
                self.vectors
                    .check_insert(id.0, vector, o.last_stored)
                    .map_err(|_| "vector does not fit the store")?;
                o.last_stored = Some(id.0);
                o.live
                    .insert(id, Some((&record.user_id, &record.content_hash)));
            }
            Op::Delete { id } => {
                if self.live(o, *id).is_none() {
                    return Err("delete of an id that does not exist");
                }
                o.live.insert(*id, None);
            }
            Op::Update { record } => match self.live(o, record.id) {
                Some((user, hash)) if user == record.user_id && *hash == record.content_hash => {}
                _ => return Err("update of an id that does not exist, or of its content or user"),
            },
            Op::Touch { ids, .. } => {
                if ids.iter().any(|id| self.live(o, *id).is_none()) {
                    return Err("touch of an id that does not exist");
                }
            }
            Op::SetTags { id, .. } => {
                if self.live(o, *id).is_none() {
                    return Err("tags of an id that does not exist");
                }
            }
            Op::Archive { id } => {
                if self.live(o, *id).is_none() {
                    return Err("archive of an id that does not exist");
                }
                o.live.insert(*id, None);
                o.archived.insert(*id);
            }
            Op::StoreArchived { record, vector } => {
                if vector.len() != dim {
                    return Err("vector does not fit the store");
                }
                if self.live(o, record.id).is_some() || self.is_archived(o, record.id) {
                    return Err("archived record of an id that exists");
                }
                o.archived.insert(record.id);
            }
            Op::CanonicalTag {
                user_id,
                tag,
                vector,
            } => {
                if vector.len() != dim {
                    return Err("canonical tag vector does not fit the store");
                }
                let registered = self
                    .table
                    .canonical(user_id)
                    .is_some_and(|c| c.contains(tag));
                if registered || !o.canonical.insert((user_id, tag)) {
                    return Err("canonical tag registered twice");
                }
            }
            Op::Snapshot(_) => {}
            Op::Entity(e) => {
                o.entities.insert((e.kind, &e.user_id, &e.id), true);
            }
            Op::DeleteEntity { kind, user_id, id } => {
                let key = (*kind, user_id.as_str(), id.as_str());
                let exists = o
                    .entities
                    .get(&key)
                    .copied()
                    .unwrap_or_else(|| self.table.has_entity(*kind, user_id, id));
                if !exists {
                    return Err("delete of an entity that does not exist");
                }
                // What it takes with it is not tracked record by record: nothing may follow
                // it in one batch (no write path builds such a batch).
                o.entities.insert(key, false);
            }
            Op::ForgetArchived { ids } => {
                let unique: HashSet<MemoryId> = ids.iter().copied().collect();
                if unique.len() != ids.len() {
                    return Err("an archived record forgotten twice in one frame");
                }
                if ids.iter().any(|id| !self.is_archived(o, *id)) {
                    return Err("forget of an id that is not archived");
                }
            }
            Op::Reembed(r) => self.check_reembed(r)?,
            Op::Model { model_id, dim } => {
                if model_id.is_empty() || *dim as usize != self.vectors.dim() {
                    return Err("model of another dimension than the vectors");
                }
            }
            Op::Batch(ops) => self.check_batch(ops, o)?,
            Op::Request(r) => self.requests.check(r)?,
            Op::Claim(c) => self.cluster.check_claim(c)?,
            Op::Skip(x) => self.cluster.check_skip(x)?,
        }
        Ok(())
    }

    /// A batch, member after member as it will apply: no re-embedding or forget inside it
    /// (written alone), nothing after an entity's deletion.
    fn check_batch<'a>(&'a self, ops: &'a [Op], o: &mut Overlay<'a>) -> Result<(), Refusal> {
        let mut after_delete = false;
        for op in ops {
            if after_delete && !matches!(op, Op::Request(_)) {
                return Err("an operation after an entity's deletion in one batch");
            }
            if matches!(
                op,
                Op::ForgetArchived { .. }
                    | Op::Reembed(_)
                    | Op::Model { .. }
                    | Op::Claim(_)
                    | Op::Skip(_)
            ) {
                // Written alone; in a batch they would need the overlay to track what they
                // removed or staged.
                return Err("forget archived or re-embedding inside a batch");
            }
            self.check_in(op, o)?;
            after_delete = matches!(op, Op::DeleteEntity { .. });
        }
        Ok(())
    }

    fn check_reembed(&self, r: &Reembed) -> Result<(), Refusal> {
        let model = Model {
            id: r.model_id.clone(),
            dim: r.dim as usize,
        };
        if model == self.model {
            // To the store's own model, with nothing in it: the stage is dropped.
            if r.records.is_empty() && r.tags.is_empty() && !r.switch {
                return Ok(());
            }
            return Err("re-embedding to the store's own model");
        }
        if model.id.is_empty() || model.dim == 0 {
            return Err("re-embedding to no model");
        }
        if r.records.iter().any(|(_, v)| v.len() != model.dim)
            || r.tags.iter().any(|(_, _, v)| v.len() != model.dim)
        {
            return Err("re-embedded vector of another dimension");
        }
        let exists = |id: &MemoryId| self.table.contains(*id) || self.table.archived(*id).is_some();
        if !r.records.iter().all(|(id, _)| exists(id)) {
            return Err("re-embedded vector of a record that does not exist");
        }
        let registered = |u: &str, t: &str| self.table.canonical(u).is_some_and(|c| c.contains(t));
        if !r.tags.iter().all(|(u, t, _)| registered(u, t)) {
            return Err("re-embedded vector of a tag that is not registered");
        }
        if r.switch && !self.completes(r) {
            return Err("switch to a model before every vector is re-embedded");
        }
        Ok(())
    }

    /// Whether every live and archived record and every canonical tag has a vector from
    /// `r`'s model once `r`'s are staged: what a switch needs.
    pub(crate) fn completes(&self, r: &Reembed) -> bool {
        let model = Model {
            id: r.model_id.clone(),
            dim: r.dim as usize,
        };
        let (records, tags) = self.unstaged(&model);
        let given: HashSet<MemoryId> = r.records.iter().map(|(id, _)| *id).collect();
        let given_tags: HashSet<(&str, &str)> = r
            .tags
            .iter()
            .map(|(u, t, _)| (u.as_str(), t.as_str()))
            .collect();
        records.iter().all(|id| given.contains(id))
            && tags
                .iter()
                .all(|(u, t)| given_tags.contains(&(u.as_str(), t.as_str())))
    }

    /// Stages `r`'s vectors and, if it switches, makes them the store's: a new collection
    /// of the live vectors (all growing: the next checkpoint seals them), and new vectors in
    /// the archive and the canonical tags.
    fn apply_reembed(&mut self, r: Reembed) -> Result<(), Refusal> {
        let model = Model {
            id: r.model_id,
            dim: r.dim as usize,
        };
        if model == self.model {
            self.stage = None;
            return Ok(());
        }
        let stage = self.stage.get_or_insert_with(Stage::default);
        if stage.model.as_ref() != Some(&model) {
            *stage = Stage {
                model: Some(model.clone()),
                ..Stage::default()
            };
        }
        stage.records.extend(r.records);
        stage
            .tags
            .extend(r.tags.into_iter().map(|(u, t, v)| ((u, t), v)));
        if !r.switch {
            return Ok(());
        }
        let mut stage = self.stage.take().unwrap_or_default();
        let mut vectors = Collection::new(model.dim);
        for m in self.table.iter() {
            let v = stage
                .records
                .remove(&m.id)
                .ok_or("switch to a model before every vector is re-embedded")?;
            vectors
                .insert(m.id.0, &v)
                .map_err(|_| "re-embedded vector does not fit")?;
        }
        self.table
            .replace_vectors(&mut stage.records, &mut stage.tags)
            .ok_or("switch to a model before every vector is re-embedded")?;
        self.vectors = vectors;
        self.model = model;
        self.model_epoch += 1;
        self.unindexed = Unindexed::default();
        Ok(())
    }

    /// Drops the staged vectors of what a delete removed.
    fn unstage_removed(&mut self, ids: &[MemoryId]) {
        for id in ids {
            self.unindexed.remove(*id);
        }
        if let Some(stage) = &mut self.stage {
            for id in ids {
                stage.records.remove(id);
            }
            let table = &self.table;
            stage
                .tags
                .retain(|(u, t), _| table.canonical(u).is_some_and(|c| c.contains(t)));
        }
    }

    /// Applies an operation `check` accepted. An error here is a bug (the write path then
    /// poisons the store).
    pub(crate) fn apply_checked(&mut self, op: Op) -> Result<(), Refusal> {
        // Only a pending chunk continues an open chunk group (`kernel::cluster`).
        if !matches!(op, Op::Skip(_) | Op::Claim(_)) {
            self.cluster.close_group();
        }
        let State {
            table,
            vectors,
            unindexed,
            model,
            ..
        } = self;
        match op {
            Op::Store { record, vector } => {
                vectors
                    .insert(record.id.0, &vector)
                    .map_err(|_| "vector does not fit the store")?;
                table.insert(*record);
            }
            Op::Delete { id } => {
                table
                    .remove(id)
                    .ok_or("delete of an id that does not exist")?;
                vectors.delete(id.0);
                self.unstage_removed(&[id]);
            }
            Op::Update { record } => {
                table
                    .replace(*record)
                    .ok_or("update of an id that does not exist, or of its content or user")?;
            }
            Op::Touch { at, ids } => {
                for id in ids {
                    table
                        .touch(id, at)
                        .ok_or("touch of an id that does not exist")?;
                }
            }
            Op::SetTags { id, tags, at } => {
                table
                    .set_tags(id, tags, at)
                    .ok_or("tags of an id that does not exist")?;
            }
            Op::Archive { id } => {
                // An unindexed record has no vector yet: the archive keeps a zero one until
                // restoration gives it its own (R4b).
                let vector = match vectors.vector(id.0) {
                    Some(v) => v.to_vec(),
                    None => match unindexed.restored.remove(&id) {
                        Some(v) => v,
                        None if unindexed.waiting.contains(&id) => vec![0.0; model.dim],
                        None => return Err("archive of an id that does not exist"),
                    },
                };
                let m = table
                    .remove(id)
                    .ok_or("archive of an id that does not exist")?;
                vectors.delete(id.0);
                table.insert_archived(Arc::unwrap_or_clone(m), vector);
            }
            Op::StoreArchived { record, vector } => {
                if !table.insert_archived(*record, vector) {
                    return Err("archived record of an id that exists");
                }
            }
            Op::CanonicalTag {
                user_id,
                tag,
                vector,
            } => {
                if !table.add_canonical(&user_id, tag, &vector) {
                    return Err("canonical tag registered twice");
                }
            }
            Op::Snapshot(s) => table.put_snapshot(*s),
            Op::Entity(e) => table.put_entity(*e),
            Op::ForgetArchived { ids } => {
                for id in &ids {
                    table
                        .forget_archived(*id)
                        .ok_or("forget of an id that is not archived")?;
                }
                self.unstage_removed(&ids);
            }
            Op::DeleteEntity { kind, user_id, id } => {
                let gone = table
                    .delete_entity(kind, &user_id, &id)
                    .ok_or("delete of an entity that does not exist")?;
                for m in &gone {
                    vectors.delete(m.0);
                }
                self.unstage_removed(&gone);
            }
            Op::Reembed(r) => self.apply_reembed(*r)?,
            Op::Model { model_id, dim } => {
                self.model = Model {
                    id: model_id,
                    dim: dim as usize,
                };
            }
            Op::Batch(ops) => {
                for op in ops {
                    self.apply_checked(op)?;
                }
            }
            Op::Request(r) => self.requests.apply(*r)?,
            Op::Claim(c) => self.cluster.apply_claim(*c),
            Op::Skip(x) => self.cluster.apply_skip(*x),
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::kernel::record::{self, Category, Kind, Memory, Timestamp};

    pub(crate) const DIM: usize = 4;

    pub(crate) fn record(id: u64, content: &str) -> Box<Memory> {
        Box::new(Memory {
            id: MemoryId(id),
            user_id: "u".into(),
            kind: Kind::Memory,
            session_id: None,
            agent_id: None,
            role: None,
            content: content.into(),
            content_hash: record::content_hash(content),
            category: Category::Other,
            tags: vec!["a".into()],
            created_at: Timestamp(1),
            updated_at: Timestamp(1),
            last_accessed_at: Timestamp(1),
            access_count: 0,
            helpful_count: 0,
            harmful_count: 0,
            confidence: 0.5,
            supersedes: Vec::new(),
            valid_from: Timestamp(1),
            valid_to: None,
            decision: None,
            item: None,
            source_id: None,
        })
    }

    fn store(id: u64, content: &str) -> Op {
        Op::Store {
            record: record(id, content),
            vector: vec![0.5; DIM],
        }
    }

    fn state_with_one() -> State {
        let mut s = State::new(
            Table::default(),
            Collection::new(DIM),
            Model {
                id: "test".into(),
                dim: DIM,
            },
        );
        s.apply(store(1, "one")).expect("a fresh store applies");
        s
    }

    #[test]
    fn an_update_that_changes_content_or_user_is_refused_and_changes_nothing() {
        let mut s = state_with_one();
        let mut other_content = record(1, "changed");
        other_content.tags = vec!["b".into()];
        let mut other_user = record(1, "one");
        other_user.user_id = "v".into();
        for bad in [other_content, other_user] {
            let op = Op::Update { record: bad };
            assert!(s.check(&op).is_err());
            assert!(s.apply(op).is_err());
            let kept = s.table.get(MemoryId(1)).expect("still live");
            assert_eq!((kept.content.as_str(), kept.user_id.as_str()), ("one", "u"));
            assert_eq!(kept.tags, vec!["a".to_owned()], "nothing half-applied");
        }
        let mut good = record(1, "one");
        good.tags = vec!["c".into()];
        s.apply(Op::Update { record: good })
            .expect("same content and user");
        assert_eq!(
            s.table.get(MemoryId(1)).map(|m| m.tags.clone()),
            Some(vec!["c".to_owned()])
        );
    }

    #[test]
    fn a_batch_is_checked_whole_before_any_of_it_applies() {
        let mut s = state_with_one();
        // The second member archives an id the batch itself stored: fine. The third deletes
        // what the second archived: refused, and so is the whole batch.
        let batch = Op::Batch(vec![
            store(2, "two"),
            Op::Archive { id: MemoryId(2) },
            Op::Delete { id: MemoryId(2) },
        ]);
        assert!(s.check(&batch).is_err());
        assert!(s.apply(batch).is_err());
        assert!(!s.table.contains(MemoryId(2)) && s.table.archived(MemoryId(2)).is_none());
        assert_eq!(s.vectors.len(), 1);
        // Keys must rise within a batch as across batches.
        let backwards = Op::Batch(vec![store(5, "five"), store(3, "three")]);
        assert!(s.check(&backwards).is_err());
        let ok = Op::Batch(vec![store(2, "two"), Op::Archive { id: MemoryId(2) }]);
        s.apply(ok).expect("a consistent batch applies");
        assert!(s.table.archived(MemoryId(2)).is_some());
        // A store of an archived id, a second registration of a tag, a vector of another
        // dimension: all refused by the check.
        assert!(s.check(&store(2, "again")).is_err());
        let tag = |t: &str| Op::CanonicalTag {
            user_id: "u".into(),
            tag: t.into(),
            vector: vec![1.0; DIM],
        };
        assert!(s.check(&Op::Batch(vec![tag("x"), tag("x")])).is_err());
        let wide = Op::Store {
            record: record(9, "nine"),
            vector: vec![0.5; DIM + 1],
        };
        assert!(s.check(&wide).is_err());
    }
}
