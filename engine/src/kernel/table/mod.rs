//! The in-memory metadata table: every live record by id; the archive of records that left the
//! live set through a merge or an update (with their vectors, for lineage and undo); and per
//! user the content-hash index, the key set (the scan's user filter), the tag frequencies and
//! members, the session members, the keyword index, the canonical tags with their embeddings,
//! the tag snapshots, and the user's entities (itself, its agents, its sessions).
//!
//! Guarantees: all indexes change together in `insert`, `modify` and `remove`, so they always
//! agree with the records; a user's data lives under its `UserIndex` (and the archive), so
//! deleting a user drops all of it at once. Not durable by itself: the log and checkpoints
//! are.

mod archive;
mod user;

use crate::kernel::checkpoint::writer as ckpt_writer;
use crate::kernel::log::Op;
use crate::kernel::record::{Entity, EntityKind, Memory, MemoryId, TagSnapshot, Timestamp};
use crate::kernel::slots::Slots;
use amberdb_index::{KeySet, SealedBytes};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
pub(crate) use user::{Archived, CanonicalTags, Lexical, PendingLexical, UserIndex};

/// An iterator that knows how many items it has left.
struct Counted<I> {
    inner: I,
    left: usize,
}

impl<I: Iterator> Iterator for Counted<I> {
    type Item = I::Item;
    fn next(&mut self) -> Option<I::Item> {
        let m = self.inner.next()?;
        self.left = self.left.saturating_sub(1);
        Some(m)
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl<I: Iterator> ExactSizeIterator for Counted<I> {}

/// The live records at one moment (`Table::snapshot`).
pub(crate) struct Snapshot {
    slots: Slots,
    live: usize,
    mapped: Vec<(u64, SealedBytes)>,
}

impl Snapshot {
    /// How many records were live.
    pub(crate) fn len(&self) -> usize {
        self.live
    }

    /// The records in id order as a checkpoint writes them: one an open left in its mapped
    /// checkpoint as the bytes it has there, not decoded.
    pub(crate) fn to_write(&self) -> impl ExactSizeIterator<Item = ckpt_writer::Record<'_>> + '_ {
        Counted {
            inner: self.slots.to_write(),
            left: self.live,
        }
    }

    /// The record with `id`, if it was live, as `to_write` gives it.
    pub(crate) fn one_to_write(&self, id: u64) -> Option<ckpt_writer::Record<'_>> {
        self.slots.one_to_write(id)
    }

    /// Decodes every record still in a mapped checkpoint whose sequence number `may_go`
    /// into its once-cell, off the writer lock: the live table shares those cells in every
    /// chunk not copied since the snapshot, so `Table::materialize` under the lock finds
    /// them decoded.
    pub(crate) fn decode_mapped(&self, may_go: impl Fn(u64) -> bool) {
        for (_, file) in self.mapped.iter().filter(|(seq, _)| may_go(*seq)) {
            self.slots.decode_mapped_in(file);
        }
    }
}

/// The live records and their indexes.
#[derive(Debug, Default)]
pub(crate) struct Table {
    /// Records by id, copy-on-write so that a checkpoint's snapshot is cheap.
    pub(super) slots: Slots,
    pub(super) live: usize,
    /// By user id; foldhash, as `Members`.
    pub(super) users: foldhash::HashMap<String, UserIndex>,
    pub(super) archive: HashMap<MemoryId, Archived>,
    pub(super) superseded_by: HashMap<MemoryId, MemoryId>,
    /// The checkpoints (sequence number, map) that records loaded at open were left in
    /// (`docs/architecture.md`, "Mapped records"), until `materialize` lets each go.
    pub(super) mapped: Vec<(u64, SealedBytes)>,
    /// The ids whose slot changed (stored, changed, touched, removed) since the newest full
    /// checkpoint's capture: what a delta checkpoint writes (`docs/durability.md`,
    /// "Incremental checkpoints"). Every place that changes a slot marks it; loading a
    /// checkpoint marks nothing.
    pub(super) changed: KeySet,
}

/// Drops `garbage` on a short-lived thread, so that freeing a large structure does not hold a
/// lock its owner holds; inline if no thread can be started.
fn drop_elsewhere<T: Send + 'static>(garbage: T) {
    let cell = std::sync::Arc::new(parking_lot::Mutex::new(Some(garbage)));
    let theirs = std::sync::Arc::clone(&cell);
    if std::thread::Builder::new()
        .name("amberdb-free".into())
        .spawn(move || drop(theirs.lock().take()))
        .is_err()
    {
        drop(cell.lock().take());
    }
}

impl Table {
    pub(crate) fn len(&self) -> usize {
        self.live
    }

    pub(crate) fn get(&self, id: MemoryId) -> Option<&Memory> {
        self.slots.get(id.0)
    }

    /// Whether `id` is live, decoding nothing (a record an open left in its mapped
    /// checkpoint stays there).
    pub(crate) fn contains(&self, id: MemoryId) -> bool {
        self.slots.contains(id.0)
    }

    pub(crate) fn find_hash(&self, user: &str, hash: &[u8; 32]) -> Option<MemoryId> {
        self.users.get(user)?.by_hash.find(hash, &self.slots)
    }

    /// The user's live item of `key`.
    pub(crate) fn find_item(&self, user: &str, key: &str) -> Option<MemoryId> {
        self.users.get(user)?.items.get(key).copied()
    }

    pub(crate) fn user_keys(&self, user: &str) -> Option<&KeySet> {
        self.users.get(user).map(|u| &u.keys)
    }

    /// The records by id, shared copy-on-write: cloning them is a reference per 1,024 ids.
    pub(crate) fn slots(&self) -> &Slots {
        &self.slots
    }

    pub(crate) fn tag_frequencies(&self, user: &str) -> Option<&BTreeMap<String, u64>> {
        self.users.get(user).map(|u| &u.tag_freq)
    }

    pub(crate) fn canonical(&self, user: &str) -> Option<&CanonicalTags> {
        self.users.get(user).map(|u| &u.canonical)
    }

    /// Registers a canonical tag; false if the user has it already.
    pub(crate) fn add_canonical(&mut self, user: &str, tag: String, vector: &[f32]) -> bool {
        let c = &mut self.user_mut(user).canonical;
        if c.by_name.contains_key(&tag) {
            return false;
        }
        c.by_name.insert(tag.clone(), c.tags.len());
        c.tags.push(tag);
        c.vectors.extend_from_slice(vector);
        true
    }

    pub(crate) fn snapshots(&self, user: &str) -> Option<&BTreeMap<String, TagSnapshot>> {
        self.users.get(user).map(|u| &u.snapshots)
    }

    /// Adds a snapshot, replacing one with the same id.
    pub(crate) fn put_snapshot(&mut self, s: TagSnapshot) {
        self.user_mut(&s.user_id)
            .snapshots
            .insert(s.snapshot_id.clone(), s);
    }

    /// The operations that rebuild the entities, the archive, the canonical tags and the
    /// snapshots (a checkpoint's aux section): every entity, then archived records in id
    /// order, then per user (sorted) the canonical tags in registration order and the
    /// snapshots by id.
    pub(crate) fn aux_ops(&self, dim: usize) -> Vec<Op> {
        let mut ops = self.entity_ops();
        ops.extend(
            self.archive_sorted()
                .into_iter()
                .map(|a| Op::StoreArchived {
                    record: Box::new(a.record.clone()),
                    vector: a.vector.clone(),
                }),
        );
        let mut users: Vec<(&String, &UserIndex)> = self.users.iter().collect();
        users.sort_by(|a, b| a.0.cmp(b.0));
        for (user, index) in users {
            ops.extend(
                index
                    .canonical
                    .iter(dim)
                    .map(|(tag, vector)| Op::CanonicalTag {
                        user_id: user.clone(),
                        tag: tag.to_owned(),
                        vector: vector.to_vec(),
                    }),
            );
            ops.extend(
                index
                    .snapshots
                    .values()
                    .map(|s| Op::Snapshot(Box::new(s.clone()))),
            );
        }
        ops
    }

    /// Every user's canonical tags, as (user, tag).
    pub(crate) fn canonical_tags(&self) -> impl Iterator<Item = (&str, &str)> + '_ {
        self.users.iter().flat_map(|(user, index)| {
            index
                .canonical
                .tags
                .iter()
                .map(move |t| (user.as_str(), t.as_str()))
        })
    }

    /// Removes each user's canonical tags that none of its records, live or archived, carries
    /// (a purge, `docs/durability.md`, "Purge": a tag can be as personal as a text); returns
    /// how many went.
    pub(crate) fn forget_unused_canonical_tags(&mut self) -> usize {
        let mut archived: HashMap<String, std::collections::HashSet<String>> = HashMap::new();
        for a in self.archive.values() {
            archived
                .entry(a.record.user_id.clone())
                .or_default()
                .extend(a.record.tags.iter().cloned());
        }
        let mut removed = 0;
        for (user, index) in &mut self.users {
            let live = &index.tag_freq;
            let kept = archived.get(user);
            removed += index.canonical.retain(|t| {
                live.get(t).is_some_and(|n| *n > 0) || kept.is_some_and(|k| k.contains(t))
            });
        }
        removed
    }

    /// The user's index, created if it has none: with empty lexical indexes, or, when
    /// `loading` a checkpoint, with none (the background build makes them, R9) and its
    /// members staged (`load` makes them sets). Takes the map, not `self`, so that a caller
    /// can lend the records beside it.
    pub(super) fn user_entry<'u>(
        users: &'u mut foldhash::HashMap<String, UserIndex>,
        user: &str,
        loading: bool,
    ) -> &'u mut UserIndex {
        if !users.contains_key(user) {
            users.insert(
                user.to_owned(),
                UserIndex {
                    lexical: (!loading).then(Lexical::default),
                    loading: loading.then(Box::default),
                    ..UserIndex::default()
                },
            );
        }
        users
            .get_mut(user)
            .unwrap_or_else(|| unreachable!("inserted above"))
    }

    pub(super) fn user_mut(&mut self, user: &str) -> &mut UserIndex {
        Self::user_entry(&mut self.users, user, false)
    }

    pub(crate) fn users(&self) -> usize {
        self.users.values().filter(|u| !u.keys.is_empty()).count()
    }

    /// Live records in the member set `set` picks in each user, all users: from the sets,
    /// not a pass over the records (STATS holds the read lock while it counts).
    pub(crate) fn member_count(
        &self,
        set: impl Fn(&UserIndex) -> Option<&BTreeSet<MemoryId>>,
    ) -> usize {
        self.users.values().filter_map(set).map(BTreeSet::len).sum()
    }

    /// Every entity, for a checkpoint's aux section: per user (sorted) the user, its agents,
    /// its sessions.
    pub(super) fn entity_ops(&self) -> Vec<Op> {
        let mut users: Vec<(&String, &UserIndex)> = self.users.iter().collect();
        users.sort_by(|a, b| a.0.cmp(b.0));
        let mut ops = Vec::new();
        for (_, u) in users {
            let all = u
                .entity
                .iter()
                .chain(u.agents.values())
                .chain(u.sessions.values());
            ops.extend(all.map(|e| Op::Entity(Box::new(e.clone()))));
        }
        ops
    }

    /// Live records in id order.
    pub(crate) fn iter(&self) -> impl ExactSizeIterator<Item = &Memory> + '_ {
        Counted {
            inner: self.slots.iter(),
            left: self.live,
        }
    }

    /// The live records as they are now, for a checkpoint to encode after the writer lock is
    /// released (`docs/durability.md`, "Checkpoint"): a reference per 1,024 ids.
    pub(crate) fn snapshot(&self) -> Snapshot {
        Snapshot {
            slots: self.slots.clone(),
            live: self.live,
            mapped: self.mapped.clone(),
        }
    }

    /// Makes room for ids up to `max_id` (loading a checkpoint).
    pub(crate) fn reserve(&mut self, max_id: u64) {
        self.slots.reserve(max_id);
    }

    /// Inserts a record whose id is not present.
    pub(crate) fn insert(&mut self, m: Memory) {
        let m = Arc::new(m);
        self.changed.insert(m.id.0);
        self.index(&m, false);
        if self.slots.put(m) {
            self.live += 1;
        }
    }

    /// Inserts the records of a checkpoint being loaded (ids not present), each given with
    /// the index in `files` (sequence number, map) of the checkpoint that holds it and its
    /// bytes there: the table indexes the record and keeps only its place, to decode it
    /// again when it is read (`docs/architecture.md`, "Mapped records"). The users they
    /// create have no lexical indexes until the background build installs them (R9); their
    /// members are staged and made into sets at the end, one bulk build per set.
    pub(crate) fn load(
        &mut self,
        files: Vec<(u64, SealedBytes)>,
        records: impl Iterator<Item = (Memory, usize, std::ops::Range<usize>)>,
    ) {
        for (m, file, at) in records {
            self.index(&m, true);
            // The loader names only the files it gives; a record it did not is kept decoded.
            let put = match files.get(file) {
                Some((_, bytes)) => self.slots.put_mapped(m, bytes.clone(), at),
                None => self.slots.put(Arc::new(m)),
            };
            if put {
                self.live += 1;
            }
        }
        self.mapped.extend(files);
        for u in self.users.values_mut() {
            if let Some(staged) = u.loading.take() {
                staged.finish(u);
            }
        }
    }

    /// The ids changed since the newest full checkpoint's capture (`changed`).
    pub(crate) fn changed(&self) -> &KeySet {
        &self.changed
    }

    /// Takes the changed ids out, leaving none (a full checkpoint's capture).
    pub(crate) fn take_changed(&mut self) -> KeySet {
        std::mem::take(&mut self.changed)
    }

    /// Marks `ids` changed: those a full checkpoint that failed had taken, or a delta's and the
    /// replay's at open.
    pub(crate) fn mark_changed(&mut self, ids: impl IntoIterator<Item = u64>) {
        for id in ids {
            self.changed.insert(id);
        }
    }

    /// Indexes a record about to be put in its slot.
    pub(super) fn index(&mut self, m: &Memory, loading: bool) {
        self.note_lineage(m);
        Self::user_entry(&mut self.users, &m.user_id, loading).add(m, &self.slots);
    }

    /// The maps of the checkpoints in `seqs` that records are still left in.
    pub(crate) fn mapped_in(&self, seqs: &[u64]) -> Vec<SealedBytes> {
        self.mapped
            .iter()
            .filter(|(seq, _)| seqs.contains(seq))
            .map(|(_, file)| file.clone())
            .collect()
    }

    /// Decodes the records of chunk `chunk` still mapped in one of `files` into their
    /// once-cells, changing no slot (`Db::let_go` runs it under the read lock). Returns
    /// whether there was such a chunk.
    pub(crate) fn decode_mapped_chunk(&self, files: &[SealedBytes], chunk: usize) -> bool {
        self.slots.decode_mapped_chunk(files, chunk)
    }

    /// Decodes into memory every record still in a mapped checkpoint whose sequence number
    /// is in `seqs`, so that no slot keeps that checkpoint's map: done before retention
    /// removes the file (`docs/architecture.md`, "Mapped records").
    pub(crate) fn materialize(&mut self, seqs: &[u64]) {
        let slots = &mut self.slots;
        self.mapped.retain(|(seq, file)| {
            let going = seqs.contains(seq);
            if going {
                slots.materialize_in(file);
            }
            !going
        });
    }

    /// The users without lexical indexes, each with its live keys and the records now: what
    /// the background build works from (R9).
    pub(crate) fn lexical_pending(&self) -> Vec<PendingLexical> {
        let slots = Arc::new(self.slots.clone());
        self.users
            .iter()
            .filter(|(_, u)| u.lexical.is_none())
            .map(|(user, u)| PendingLexical {
                user: user.clone(),
                keys: u.keys.clone(),
                slots: Arc::clone(&slots),
            })
            .collect()
    }

    /// Installs the lexical indexes `built` from `pending`, first bringing them up to date
    /// with what changed since: records live then and not now leave, records live now and
    /// not then are added (content never changes under an id, so a record live at both
    /// moments is indexed right). A user deleted meanwhile, or one that has its indexes
    /// already, is left as it is.
    pub(crate) fn install_lexical(&mut self, pending: &PendingLexical, mut built: Lexical) {
        let Some(u) = self.users.get_mut(&pending.user) else {
            return;
        };
        if u.lexical.is_some() {
            return;
        }
        for gone in pending.keys.iter().filter(|k| !u.keys.contains(*k)) {
            if let Some(m) = pending.slots.get(gone) {
                built.remove(m, &u.keys, &self.slots);
            }
        }
        for new in u.keys.iter().filter(|k| !pending.keys.contains(*k)) {
            if let Some(m) = self.slots.get(new) {
                built.add(m);
            }
        }
        u.lexical = Some(built);
    }

    /// Removes a record, returning it.
    pub(crate) fn remove(&mut self, id: MemoryId) -> Option<Arc<Memory>> {
        let m = self.slots.take(id.0)?;
        self.changed.insert(id.0);
        self.live -= 1;
        if let Some(u) = self.users.get_mut(&m.user_id) {
            u.by_hash.remove(&m.content_hash, m.id);
            if let Some(item) = &m.item
                && u.items.get(&item.key) == Some(&m.id)
            {
                u.items.remove(&item.key);
            }
            u.keys.remove(m.id.0);
            u.remove_fields(&m);
            if let Some(lexical) = &mut u.lexical {
                lexical.remove(&m, &u.keys, &self.slots);
            }
        }
        Some(m)
    }

    /// Replaces a live record by `record`, which must keep its id, user and content (so its
    /// vector, hash and keyword postings); tags and session are re-indexed. `None`, changing
    /// nothing, if `record.id` is not live or the rule is broken.
    pub(crate) fn replace(&mut self, record: Memory) -> Option<()> {
        let id = record.id;
        let same = self
            .get(id)
            .is_some_and(|m| m.user_id == record.user_id && m.content_hash == record.content_hash);
        if !same {
            return None;
        }
        // An update may name an earlier value of its slot in its lineage.
        for s in &record.supersedes {
            self.superseded_by.insert(*s, id);
        }
        self.reindexed(id, |m| *m = record)
    }

    /// Sets a live record's tags and `updated_at`, re-indexing its tags. `None` if `id` is not
    /// live.
    pub(crate) fn set_tags(
        &mut self,
        id: MemoryId,
        tags: Vec<String>,
        at: Timestamp,
    ) -> Option<()> {
        self.reindexed(id, |m| {
            m.tags = tags;
            m.updated_at = at;
        })
    }

    /// Changes a live record in place through `f`, which keeps its id, user and content (the
    /// callers above check or guarantee it), re-indexing its tags and session.
    pub(super) fn reindexed(&mut self, id: MemoryId, f: impl FnOnce(&mut Memory)) -> Option<()> {
        let m = self.slots.get_mut(id.0)?;
        self.changed.insert(id.0);
        let u = self.users.get_mut(&m.user_id)?;
        u.remove_fields(m);
        f(m);
        u.add_fields(m);
        Some(())
    }

    /// Whether the entity exists.
    pub(crate) fn has_entity(&self, kind: EntityKind, user: &str, id: &str) -> bool {
        self.users.get(user).is_some_and(|u| match kind {
            EntityKind::User => u.entity.is_some(),
            EntityKind::Agent => u.agents.contains_key(id),
            EntityKind::Session => u.sessions.contains_key(id),
        })
    }

    /// Counts one access of a live record: `access_count + 1`, `last_accessed_at` at least
    /// `at`. No index holds either field, so nothing is re-indexed (a touch is on every read's
    /// path). `None` if `id` is not live.
    pub(crate) fn touch(&mut self, id: MemoryId, at: Timestamp) -> Option<()> {
        let m = self.slots.get_mut(id.0)?;
        self.changed.insert(id.0);
        m.access_count = m.access_count.saturating_add(1);
        m.last_accessed_at = m.last_accessed_at.max(at);
        Some(())
    }

    /// A user's index, if the user has ever existed.
    pub(crate) fn user(&self, user: &str) -> Option<&UserIndex> {
        self.users.get(user)
    }

    /// Users that exist, in id order.
    pub(crate) fn user_entities(&self) -> Vec<&Entity> {
        let mut v: Vec<&Entity> = self
            .users
            .values()
            .filter_map(|u| u.entity.as_ref())
            .collect();
        v.sort_by(|a, b| a.id.cmp(&b.id));
        v
    }

    /// Creates or replaces an entity.
    pub(crate) fn put_entity(&mut self, e: Entity) {
        let u = self.user_mut(&e.user_id);
        match e.kind {
            EntityKind::User => u.entity = Some(e),
            EntityKind::Agent => {
                u.agents.insert(e.id.clone(), e);
            }
            EntityKind::Session => {
                u.sessions.insert(e.id.clone(), e);
            }
        }
    }

    /// The live and archived records that belong to an entity (`docs/search.md`,
    /// "Deleting"); `None` if the entity does not exist.
    pub(crate) fn records_of(
        &self,
        kind: EntityKind,
        user: &str,
        id: &str,
    ) -> Option<(Vec<MemoryId>, Vec<MemoryId>)> {
        let u = self.users.get(user)?;
        let belongs: Box<dyn Fn(&Memory) -> bool> = match kind {
            EntityKind::User => {
                u.entity.as_ref()?;
                Box::new(|_| true)
            }
            EntityKind::Session => {
                u.sessions.get(id)?;
                Box::new(move |m| m.session_id.as_deref() == Some(id))
            }
            EntityKind::Agent => {
                u.agents.get(id)?;
                let sessions: BTreeSet<String> = u
                    .sessions
                    .values()
                    .filter(|s| s.agent_id.as_deref() == Some(id))
                    .map(|s| s.id.clone())
                    .collect();
                Box::new(move |m| {
                    m.agent_id.as_deref() == Some(id)
                        || m.session_id.as_ref().is_some_and(|s| sessions.contains(s))
                })
            }
        };
        let live: Vec<MemoryId> = u
            .keys
            .iter()
            .map(MemoryId)
            .filter(|k| self.get(*k).is_some_and(&belongs))
            .collect();
        let archived: Vec<MemoryId> = self
            .archive
            .values()
            .filter(|a| a.record.user_id == user && belongs(&a.record))
            .map(|a| a.record.id)
            .collect();
        Some((live, archived))
    }

    /// Deletes an entity and every record that belongs to it (`records_of`): returns the live
    /// ids removed, whose vectors the caller deletes. `None` if the entity does not exist.
    pub(crate) fn delete_entity(
        &mut self,
        kind: EntityKind,
        user: &str,
        id: &str,
    ) -> Option<Vec<MemoryId>> {
        let (live, archived) = self.records_of(kind, user, id)?;
        if kind == EntityKind::User {
            // The user's whole index goes: take its records out of the slots without
            // unindexing them one by one (keyword postings, text column rebuilds), which cost
            // ~0.9 s at 100k records under the writer lock (docs/benchmarks.md, "Deleting a
            // user"). What is freed is dropped on another thread, off every lock.
            let index = self.users.remove(user);
            let mut freed = Vec::with_capacity(live.len());
            for k in &live {
                if let Some(m) = self.slots.take(k.0) {
                    self.changed.insert(k.0);
                    self.live -= 1;
                    freed.push(m);
                }
            }
            drop_elsewhere((index, freed));
        } else {
            for k in &live {
                self.remove(*k);
            }
        }
        for k in &archived {
            self.archive.remove(k);
        }
        self.superseded_by
            .retain(|from, to| !archived.contains(from) && !archived.contains(to));
        match kind {
            EntityKind::User => {}
            EntityKind::Session => {
                if let Some(u) = self.users.get_mut(user) {
                    u.sessions.remove(id);
                }
            }
            EntityKind::Agent => {
                if let Some(u) = self.users.get_mut(user) {
                    u.agents.remove(id);
                    u.sessions.retain(|_, s| s.agent_id.as_deref() != Some(id));
                }
            }
        }
        Some(live)
    }
}

#[cfg(test)]
mod tests {
    use super::user::Members;
    use super::*;
    use crate::kernel::record::Category;
    use crate::kernel::state::tests::record;
    use proptest::prelude::*;
    use std::sync::atomic::AtomicBool;

    const WORDS: [&str; 6] = ["alpha", "Beta", "gamma", "delta", "epsilon", "zeta"];

    fn memory(id: u64, user: usize, words: &[usize]) -> Memory {
        let content: Vec<&str> = words.iter().map(|w| WORDS[w % WORDS.len()]).collect();
        let mut m = *record(id, &content.join(" "));
        m.user_id = format!("user{user}");
        // Members vary with the words: category, tags, session, timed validity.
        m.category = Category::ALL[words[0] % Category::ALL.len()];
        m.tags = words
            .iter()
            .map(|w| format!("t{}", w % 3))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        m.session_id = (words.len() > 2).then(|| format!("s{}", words[1] % 2));
        if words.len() == 4 {
            m.valid_to = Some(Timestamp(5));
        }
        m
    }

    /// `records` as a checkpoint being loaded gives them: encoded one after the other in one
    /// file, each with the file's index (0) and its bytes there.
    fn mapped(
        records: impl Iterator<Item = Memory>,
    ) -> (
        SealedBytes,
        impl Iterator<Item = (Memory, usize, std::ops::Range<usize>)>,
    ) {
        let records: Vec<Memory> = records.collect();
        let mut buf = Vec::new();
        let mut offsets = Vec::new();
        for m in &records {
            let start = buf.len();
            crate::kernel::record::encode(m, &mut crate::kernel::codec::Encoder::new(&mut buf));
            offsets.push(start..buf.len());
        }
        let records = records
            .into_iter()
            .zip(offsets)
            .map(move |(m, at)| (m, 0, at));
        (SealedBytes::copy_from(&buf), records)
    }

    /// A user, its keyword scores (key, score bits) for each word, and its text matches of
    /// each word, sorted.
    type UserView = (String, Vec<Vec<(u64, u32)>>, Vec<Vec<u64>>);

    /// Every user's view, by user.
    fn lexical_view(t: &Table) -> Vec<UserView> {
        let mut users: Vec<&String> = t.users.keys().collect();
        users.sort();
        users
            .into_iter()
            .map(|name| {
                let u = &t.users[name];
                let index = u.keyword().expect("built");
                let text = u.text().expect("built");
                let scores = WORDS
                    .iter()
                    .map(|w| {
                        let mut s: Vec<(u64, u32)> = index
                            .scores(&[w.to_lowercase()], |k| u.keys.contains(k))
                            .into_iter()
                            .map(|(k, s)| (k, s.to_bits()))
                            .collect();
                        s.sort_unstable();
                        s
                    })
                    .collect();
                let found = WORDS
                    .iter()
                    .map(|w| {
                        let mut f = text.find(w.to_lowercase().as_bytes(), |k| u.keys.contains(k));
                        f.sort_unstable();
                        f
                    })
                    .collect();
                (name.clone(), scores, found)
            })
            .collect()
    }

    /// Every user's non-empty member sets and tag frequencies, by user.
    fn members_view(t: &Table) -> Vec<(String, String)> {
        fn sets<K: std::fmt::Debug>(m: &Members<K>) -> BTreeMap<String, &BTreeSet<MemoryId>> {
            m.iter()
                .filter(|(_, s)| !s.is_empty())
                .map(|(k, s)| (format!("{k:?}"), s))
                .collect()
        }
        let mut users: Vec<(String, String)> = t
            .users
            .iter()
            .filter(|(_, u)| !u.keys.is_empty())
            .map(|(name, u)| {
                let view = format!(
                    "{:?} {:?} {:?} {:?} {:?} {:?}",
                    sets(&u.category_members),
                    sets(&u.kind_members),
                    sets(&u.tag_members),
                    sets(&u.session_members),
                    u.tag_freq,
                    u.timed
                );
                (name.clone(), view)
            })
            .collect();
        users.sort();
        users
    }

    /// Content hashes that share their first eight bytes in pairs, so that the index's prefix
    /// meets every case: a new hash, the same hash again, and a different hash with the
    /// same prefix.
    fn crafted_hash(i: usize) -> [u8; 32] {
        let mut h = [0u8; 32];
        h[0] = u8::try_from(i / 2).unwrap_or(u8::MAX);
        h[31] = u8::try_from(i % 2).unwrap_or(u8::MAX);
        h
    }

    proptest! {
        /// `find_hash` against a map from (user, whole hash) to the newest record stored with
        /// it, which a delete of that record clears: stores of six hashes in three prefix
        /// pairs, by two users, and deletes of live records.
        #[test]
        fn the_content_hash_index_names_the_newest_record_of_each_whole_hash(
            ops in proptest::collection::vec((0usize..4, 0usize..6, 0usize..2), 1..80),
        ) {
            let mut t = Table::default();
            let mut model: BTreeMap<(usize, [u8; 32]), MemoryId> = BTreeMap::new();
            let mut live: Vec<(MemoryId, usize, [u8; 32])> = Vec::new();
            for (id, (op, which, user)) in (1u64..).zip(ops) {
                if op == 0 && !live.is_empty() {
                    let (gone, user, hash) = live.remove(which % live.len());
                    prop_assert!(t.remove(gone).is_some());
                    if model.get(&(user, hash)) == Some(&gone) {
                        model.remove(&(user, hash));
                    }
                } else {
                    let mut m = memory(id, user, &[which]);
                    m.content_hash = crafted_hash(which);
                    live.push((m.id, user, m.content_hash));
                    model.insert((user, m.content_hash), m.id);
                    t.insert(m);
                }
                for user in 0..2 {
                    for which in 0..6 {
                        let hash = crafted_hash(which);
                        prop_assert_eq!(
                            t.find_hash(&format!("user{user}"), &hash),
                            model.get(&(user, hash)).copied(),
                            "user {} hash {}", user, which
                        );
                    }
                }
            }
        }

        /// The build after an open (R9): records loaded from a checkpoint, then inserts and
        /// removes while the build works from its snapshot; once installed, the lexical
        /// indexes equal those of a table built from the live records from scratch.
        #[test]
        fn lexical_indexes_installed_after_changes_equal_a_fresh_build(
            loaded in prop::collection::vec((0usize..3, prop::collection::vec(0usize..6, 1..5)), 1..60),
            changes in prop::collection::vec((any::<bool>(), 0usize..4, prop::collection::vec(0usize..6, 1..5), any::<prop::sample::Index>()), 0..60),
        ) {
            let mut t = Table::default();
            let (file, records) = mapped(
                loaded
                    .iter()
                    .enumerate()
                    .map(|(i, (user, words))| memory(i as u64 + 1, *user, words)),
            );
            t.load(vec![(1, file)], records);
            let pending = t.lexical_pending();
            prop_assert!(t.users.values().all(|u| u.keyword().is_err() && u.text().is_none()));
            let mut next = loaded.len() as u64 + 1;
            for (insert, user, words, pick) in changes {
                let live: Vec<u64> = t.iter().map(|m| m.id.0).collect();
                if insert || live.is_empty() {
                    t.insert(memory(next, user, &words));
                    next += 1;
                } else {
                    t.remove(MemoryId(live[pick.index(live.len())]));
                }
            }
            for p in &pending {
                let built = p.build(&AtomicBool::new(false)).expect("not stopped");
                t.install_lexical(p, built);
            }
            let mut fresh = Table::default();
            for m in t.iter() {
                fresh.insert(m.clone());
            }
            // Users whose records all left keep an empty index; a fresh table has no entry.
            let view: Vec<_> = lexical_view(&t)
                .into_iter()
                .filter(|(name, _, _)| !t.users[name].keys.is_empty())
                .collect();
            prop_assert_eq!(view, lexical_view(&fresh));
            prop_assert_eq!(members_view(&t), members_view(&fresh));
        }
    }
}
