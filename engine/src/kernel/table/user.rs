//! What the table keeps per user and beside it: the content-hash index, the canonical tags,
//! an archived record, the lexical indexes and their pending builds, the `UserIndex` with its
//! key set, tag frequencies, members and entities.

use crate::kernel::error::KernelError;
use crate::kernel::keyword::KeywordIndex;
use crate::kernel::record::{Category, Entity, EntityKind, Kind, Memory, MemoryId, TagSnapshot};
use crate::kernel::slots::Slots;
use crate::kernel::text_column::TextColumn;
use amberdb_index::KeySet;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// A user's content-hash index, for exact dedup: the newest record with each content hash.
///
/// An entry is the hash's first eight bytes with the id, 16 bytes where a map from the whole
/// hash took 40 (86 MB of the 0.53 GB an open of 1M records touches: `benchmarks.md`, "The
/// content-hash index at 16 bytes an entry"). The prefix is the table's hash (a sha256 is uniformly random already); a lookup
/// confirms the whole hash on the record itself, so two contents that share a prefix never
/// match each other.
#[derive(Debug, Default)]
pub(super) struct ContentHashes(hashbrown::HashTable<(u64, MemoryId)>);

pub(super) fn hash_prefix(hash: &[u8; 32]) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&hash[..8]);
    u64::from_le_bytes(word)
}

/// Whether an entry names a record whose content hash is `hash` (of prefix `prefix`): the
/// prefix first, then the whole hash on the record in `slots`.
pub(super) fn names_hash<'a>(
    prefix: u64,
    hash: &'a [u8; 32],
    slots: &'a Slots,
) -> impl Fn(&(u64, MemoryId)) -> bool + 'a {
    move |&(p, id)| p == prefix && slots.get(id.0).is_some_and(|m| m.content_hash == *hash)
}

impl ContentHashes {
    /// The record `hash` names; `slots` holds the records.
    pub(super) fn find(&self, hash: &[u8; 32], slots: &Slots) -> Option<MemoryId> {
        let prefix = hash_prefix(hash);
        self.0
            .find(prefix, names_hash(prefix, hash, slots))
            .map(|&(_, id)| id)
    }

    /// Makes `id` the record of `hash`, replacing the one it named.
    pub(super) fn insert(&mut self, hash: &[u8; 32], id: MemoryId, slots: &Slots) {
        let prefix = hash_prefix(hash);
        match self
            .0
            .entry(prefix, names_hash(prefix, hash, slots), |&(p, _)| p)
        {
            hashbrown::hash_table::Entry::Occupied(mut e) => e.get_mut().1 = id,
            hashbrown::hash_table::Entry::Vacant(e) => {
                e.insert((prefix, id));
            }
        }
    }

    /// Forgets `hash` if it names `id` (a newer record with the same content keeps it).
    pub(super) fn remove(&mut self, hash: &[u8; 32], id: MemoryId) {
        let prefix = hash_prefix(hash);
        if let Ok(e) = self
            .0
            .find_entry(prefix, |&(p, named)| p == prefix && named == id)
        {
            e.remove();
        }
    }
}

/// A user's canonical tags (`docs/semantics.md`, "Tags"): in registration order, each with
/// the embedding of its embedding form; removed only by a purge, when no record of the user
/// carries them any more.
#[derive(Debug, Default)]
pub(crate) struct CanonicalTags {
    pub(super) tags: Vec<String>,
    pub(super) by_name: HashMap<String, usize>,
    pub(super) vectors: Vec<f32>,
}

impl CanonicalTags {
    pub(crate) fn contains(&self, tag: &str) -> bool {
        self.by_name.contains_key(tag)
    }

    /// Tags with their vectors, in registration order.
    pub(crate) fn iter(&self, dim: usize) -> impl Iterator<Item = (&str, &[f32])> + '_ {
        self.tags
            .iter()
            .zip(self.vectors.chunks_exact(dim.max(1)))
            .map(|(t, v)| (t.as_str(), v))
    }

    pub(crate) fn names(&self) -> &[String] {
        &self.tags
    }

    /// The vectors, row-major in registration order (`names()[i]` is row `i`).
    pub(crate) fn vectors(&self) -> &[f32] {
        &self.vectors
    }

    /// Keeps the tags `keep` says, in their order, with their vectors; how many went.
    pub(super) fn retain(&mut self, keep: impl Fn(&str) -> bool) -> usize {
        let dim = self.vectors.len().checked_div(self.tags.len()).unwrap_or(0);
        let before = self.tags.len();
        let mut tags = Vec::with_capacity(before);
        let mut vectors = Vec::with_capacity(self.vectors.len());
        for (tag, vector) in std::mem::take(&mut self.tags)
            .into_iter()
            .zip(self.vectors.chunks_exact(dim.max(1)))
        {
            if keep(&tag) {
                vectors.extend_from_slice(vector);
                tags.push(tag);
            }
        }
        self.by_name = tags
            .iter()
            .enumerate()
            .map(|(i, t)| (t.clone(), i))
            .collect();
        self.tags = tags;
        self.vectors = vectors;
        before - self.tags.len()
    }
}

/// A record that left the live set, kept for lineage.
#[derive(Debug, Clone)]
pub(crate) struct Archived {
    pub(crate) record: Memory,
    pub(crate) vector: Vec<f32>,
}

/// A user's lexical indexes, over the content of its live records: the keyword index and the
/// text column.
#[derive(Debug, Default)]
pub(crate) struct Lexical {
    pub(super) keyword: KeywordIndex,
    pub(super) text: TextColumn,
}

impl Lexical {
    pub(super) fn add(&mut self, m: &Memory) {
        self.keyword.add(m.id.0, &m.content);
        self.text.add(m.id.0, &m.content);
    }

    /// Removes a record; `live` are the user's live keys after it left and `slots` the
    /// records, for the text column's rebuild.
    pub(super) fn remove(&mut self, m: &Memory, live: &KeySet, slots: &Slots) {
        self.keyword.remove(m.id.0, &m.content);
        if self.text.remove() {
            self.text = TextColumn::default();
            for k in live.iter() {
                slots.with(k, |m| self.text.add(k, &m.content));
            }
        }
    }

    /// The indexes of the records `keys` names in `slots`; `None` once `stop` is set. A
    /// record left in a mapped checkpoint is decoded for this alone (`Slots::with`).
    pub(super) fn build(keys: &KeySet, slots: &Slots, stop: &AtomicBool) -> Option<Lexical> {
        let mut lexical = Lexical::default();
        for (i, k) in keys.iter().enumerate() {
            if i % 4096 == 0 && stop.load(Ordering::Relaxed) {
                return None;
            }
            slots.with(k, |m| lexical.add(m));
        }
        Some(lexical)
    }
}

/// What `Table::lexical_pending` hands to the background build: a user's live keys and the
/// records as they were then.
pub(crate) struct PendingLexical {
    pub(super) user: String,
    pub(super) keys: KeySet,
    /// One snapshot shared by every pending user.
    pub(super) slots: Arc<Slots>,
}

impl PendingLexical {
    /// Builds the user's lexical indexes from what was live when this was taken (no lock
    /// needed: the records are shared copy-on-write); `None` once `stop` is set.
    pub(crate) fn build(&self, stop: &AtomicBool) -> Option<Lexical> {
        Lexical::build(&self.keys, &self.slots, stop)
    }
}

/// Records by tag, session, category or kind. Hashed with foldhash, not SipHash: a lookup
/// runs for every record a checkpoint loads (`keyword.rs` says why foldhash is enough).
pub(crate) type Members<K> = foldhash::HashMap<K, BTreeSet<MemoryId>>;

/// Everything indexed per user.
#[derive(Debug, Default)]
pub(crate) struct UserIndex {
    /// Content hashes of the records exact dedup sees: every kind but items.
    pub(super) by_hash: ContentHashes,
    /// Live items by key (`docs/semantics.md`, "Items"), in key order for listing.
    pub(crate) items: BTreeMap<String, MemoryId>,
    pub(crate) keys: KeySet,
    pub(super) tag_freq: BTreeMap<String, u64>,
    pub(crate) tag_members: Members<String>,
    pub(crate) session_members: Members<String>,
    pub(crate) category_members: Members<Category>,
    pub(crate) kind_members: Members<Kind>,
    /// `None` from an open until the background build installs it (`docs/durability.md`,
    /// "Recovery", R9): users loaded from a checkpoint start without, new users with.
    pub(super) lexical: Option<Lexical>,
    /// While a checkpoint loads: the members of its records, made into the sets above at the
    /// end of `Table::load`.
    pub(super) loading: Option<Box<StagedMembers>>,
    /// Live records whose validity is not "from when stored, still open": the only ones a
    /// search of the present checks one by one (`Memory::has_timed_validity`).
    pub(crate) timed: BTreeSet<MemoryId>,
    pub(super) canonical: CanonicalTags,
    pub(super) snapshots: BTreeMap<String, TagSnapshot>,
    /// The user itself; `None` until created (explicitly, or by its first record).
    pub(crate) entity: Option<Entity>,
    pub(crate) agents: BTreeMap<String, Entity>,
    pub(crate) sessions: BTreeMap<String, Entity>,
}

impl UserIndex {
    /// The keyword index. A search that uses it waits for the background build after an open
    /// first (`Db::wait_lexical`), so it is missing only when that build failed.
    ///
    /// # Errors
    /// `Internal` when it is missing.
    pub(crate) fn keyword(&self) -> Result<&KeywordIndex, KernelError> {
        self.lexical
            .as_ref()
            .map(|l| &l.keyword)
            .ok_or_else(|| KernelError::Internal {
                context: "keyword search",
                reason: "the keyword index was not built after the open (see the log)".into(),
            })
    }

    /// The text column; `None` until the background build after an open installs it.
    pub(crate) fn text(&self) -> Option<&TextColumn> {
        self.lexical.as_ref().map(|l| &l.text)
    }

    /// Indexes `m`; `slots` holds the other records (`m` may not be in it yet).
    pub(super) fn add(&mut self, m: &Memory, slots: &Slots) {
        match &m.item {
            Some(item) => {
                self.items.insert(item.key.clone(), m.id);
            }
            None => self.by_hash.insert(&m.content_hash, m.id, slots),
        }
        self.keys.insert(m.id.0);
        if let Some(lexical) = &mut self.lexical {
            lexical.add(m);
        }
        match &mut self.loading {
            Some(staged) => staged.add(m),
            None => self.add_fields(m),
        }
        if self.entity.is_none() {
            self.entity = Some(implicit(EntityKind::User, m, &m.user_id));
        }
        if let Some(s) = &m.session_id
            && !self.sessions.contains_key(s)
        {
            let mut e = implicit(EntityKind::Session, m, s);
            e.agent_id.clone_from(&m.agent_id);
            self.sessions.insert(s.clone(), e);
        }
        if let Some(a) = &m.agent_id
            && !self.agents.contains_key(a)
        {
            self.agents
                .insert(a.clone(), implicit(EntityKind::Agent, m, a));
        }
    }

    /// Indexes the fields `modify` may change: tags, session, category (and kind, which never
    /// changes but is indexed with them).
    pub(super) fn add_fields(&mut self, m: &Memory) {
        self.category_members
            .entry(m.category)
            .or_default()
            .insert(m.id);
        self.kind_members.entry(m.kind).or_default().insert(m.id);
        if m.has_timed_validity() {
            self.timed.insert(m.id);
        }
        for t in &m.tags {
            match self.tag_freq.get_mut(t) {
                Some(n) => *n += 1,
                None => {
                    self.tag_freq.insert(t.clone(), 1);
                }
            }
            add_member(&mut self.tag_members, t, m.id);
        }
        if let Some(s) = &m.session_id {
            add_member(&mut self.session_members, s, m.id);
        }
    }

    pub(super) fn remove_fields(&mut self, m: &Memory) {
        for set in [
            self.category_members.get_mut(&m.category),
            self.kind_members.get_mut(&m.kind),
        ]
        .into_iter()
        .flatten()
        {
            set.remove(&m.id);
        }
        self.timed.remove(&m.id);
        for t in &m.tags {
            if let Some(n) = self.tag_freq.get_mut(t) {
                *n -= 1;
                if *n == 0 {
                    self.tag_freq.remove(t);
                }
            }
            if let Some(set) = self.tag_members.get_mut(t) {
                set.remove(&m.id);
                if set.is_empty() {
                    self.tag_members.remove(t);
                }
            }
        }
        if let Some(s) = &m.session_id
            && let Some(set) = self.session_members.get_mut(s)
        {
            set.remove(&m.id);
            if set.is_empty() {
                self.session_members.remove(s);
            }
        }
    }
}

/// The members of the records a checkpoint loads, collected (in id order, as the checkpoint
/// holds them) and then made into sets in one bulk build each: an insert into a `BTreeSet` per
/// record and set was a fifth of a 1M-record open.
#[derive(Debug, Default)]
pub(super) struct StagedMembers {
    pub(super) categories: foldhash::HashMap<Category, Vec<MemoryId>>,
    pub(super) kinds: foldhash::HashMap<Kind, Vec<MemoryId>>,
    pub(super) tags: foldhash::HashMap<String, Vec<MemoryId>>,
    pub(super) sessions: foldhash::HashMap<String, Vec<MemoryId>>,
    pub(super) timed: Vec<MemoryId>,
}

impl StagedMembers {
    /// Stages what `UserIndex::add_fields` indexes.
    pub(super) fn add(&mut self, m: &Memory) {
        self.categories.entry(m.category).or_default().push(m.id);
        self.kinds.entry(m.kind).or_default().push(m.id);
        if m.has_timed_validity() {
            self.timed.push(m.id);
        }
        for t in &m.tags {
            stage_member(&mut self.tags, t, m.id);
        }
        if let Some(s) = &m.session_id {
            stage_member(&mut self.sessions, s, m.id);
        }
    }

    /// Moves everything staged into `u`'s sets (and tag frequencies).
    pub(super) fn finish(self, u: &mut UserIndex) {
        fn into_sets<K: std::hash::Hash + Eq>(
            staged: foldhash::HashMap<K, Vec<MemoryId>>,
            sets: &mut Members<K>,
        ) {
            for (key, ids) in staged {
                match sets.entry(key) {
                    std::collections::hash_map::Entry::Occupied(set) => set.into_mut().extend(ids),
                    // Sorted input: `from_iter` builds the tree bottom up.
                    std::collections::hash_map::Entry::Vacant(slot) => {
                        slot.insert(ids.into_iter().collect());
                    }
                }
            }
        }
        for (tag, ids) in &self.tags {
            *u.tag_freq.entry(tag.clone()).or_insert(0) += ids.len() as u64;
        }
        into_sets(self.categories, &mut u.category_members);
        into_sets(self.kinds, &mut u.kind_members);
        into_sets(self.tags, &mut u.tag_members);
        into_sets(self.sessions, &mut u.session_members);
        if u.timed.is_empty() {
            u.timed = self.timed.into_iter().collect();
        } else {
            u.timed.extend(self.timed);
        }
    }
}

/// Appends `id` to `name`'s staged members, copying the name only when it is new.
pub(super) fn stage_member(
    staged: &mut foldhash::HashMap<String, Vec<MemoryId>>,
    name: &str,
    id: MemoryId,
) {
    match staged.get_mut(name) {
        Some(ids) => ids.push(id),
        None => {
            staged.insert(name.to_owned(), vec![id]);
        }
    }
}

/// Adds `id` to `name`'s members, copying the name only when it is new (this runs for every
/// record a checkpoint loads).
pub(super) fn add_member(sets: &mut Members<String>, name: &str, id: MemoryId) {
    match sets.get_mut(name) {
        Some(set) => {
            set.insert(id);
        }
        None => {
            sets.insert(name.to_owned(), BTreeSet::from([id]));
        }
    }
}

/// The entity a record implies when none was recorded (stores written before entities
/// existed): named by its id, created when the record was.
pub(super) fn implicit(kind: EntityKind, m: &Memory, id: &str) -> Entity {
    Entity {
        kind,
        user_id: m.user_id.clone(),
        id: id.to_owned(),
        name: id.to_owned(),
        agent_id: None,
        created_at: m.created_at,
    }
}
