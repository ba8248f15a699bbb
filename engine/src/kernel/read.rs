//! The kernel's read API: what the layers above may read of a store's state, under
//! `Db::read` or inside a `Db::commit` prepare. The table and the vector collection stay the
//! kernel's (their fields and their writers are private to `kernel/`); the memory layer asks
//! `State` these questions, and gets the vector collection only as the index crate's read-only
//! `Collection` ([`State::vectors`]).

use crate::kernel::ids::MemoryId;
use crate::kernel::record::{Entity, EntityKind, Memory, TagSnapshot, Timestamp};
use crate::kernel::request::{RequestEntry, RequestId};
use crate::kernel::slots::Slots;
use crate::kernel::state::{Model, Stage, State, Unindexed};
use crate::kernel::table::{Archived, CanonicalTags, UserIndex};
use amberdb_index::{Collection, KeySet};
use std::collections::{BTreeMap, BTreeSet};

impl State {
    /// The vectors, for search and for reading one back (the index crate's API; read-only).
    pub(crate) fn vectors(&self) -> &Collection {
        &self.vectors
    }

    /// The embedder every vector of the state comes from.
    pub(crate) fn model(&self) -> &Model {
        &self.model
    }

    /// Bumped at every change of the model in this process: a write or a search whose vectors
    /// were computed before a switch sees it changed and embeds again.
    pub(crate) fn model_epoch(&self) -> u64 {
        self.model_epoch
    }

    /// What a re-embedding has staged and not switched to yet.
    pub(crate) fn stage(&self) -> Option<&Stage> {
        self.stage.as_ref()
    }

    /// What the request table holds of `id` (`kernel::request`).
    pub(crate) fn request(&self, id: &RequestId) -> Option<&RequestEntry> {
        self.requests.get(id)
    }

    /// Request ids the table holds (STATS).
    pub(crate) fn requests_held(&self) -> usize {
        self.requests.len()
    }

    /// Records whose vector is being restored from their text (R4b).
    pub(crate) fn unindexed(&self) -> &Unindexed {
        &self.unindexed
    }

    /// A live record.
    pub(crate) fn get(&self, id: MemoryId) -> Option<&Memory> {
        self.table.get(id)
    }

    /// Whether `id` is live, decoding nothing (a record an open left in its mapped
    /// checkpoint stays there).
    pub(crate) fn contains(&self, id: MemoryId) -> bool {
        self.table.contains(id)
    }

    /// The user's live memory whose content hashes to `hash` (an exact duplicate).
    pub(crate) fn find_hash(&self, user: &str, hash: &[u8; 32]) -> Option<MemoryId> {
        self.table.find_hash(user, hash)
    }

    /// The user's live item of `key`.
    pub(crate) fn find_item(&self, user: &str, key: &str) -> Option<MemoryId> {
        self.table.find_item(user, key)
    }

    /// Live records in id order.
    pub(crate) fn iter(&self) -> impl ExactSizeIterator<Item = &Memory> + '_ {
        self.table.iter()
    }

    /// Live memories, all users.
    pub(crate) fn live_count(&self) -> usize {
        self.table.len()
    }

    /// Users with at least one memory.
    pub(crate) fn users(&self) -> usize {
        self.table.users()
    }

    /// A user's index, if the user has ever existed.
    pub(crate) fn user(&self, user: &str) -> Option<&UserIndex> {
        self.table.user(user)
    }

    /// The keys (ids) of the user's live records, for a search inside one user.
    pub(crate) fn user_keys(&self, user: &str) -> Option<&KeySet> {
        self.table.user_keys(user)
    }

    /// Whether the entity exists.
    pub(crate) fn has_entity(&self, kind: EntityKind, user: &str, id: &str) -> bool {
        self.table.has_entity(kind, user, id)
    }

    /// Users that exist, in id order.
    pub(crate) fn user_entities(&self) -> Vec<&Entity> {
        self.table.user_entities()
    }

    /// The records by id, shared copy-on-write: cloning them is a reference per 1,024 ids.
    pub(crate) fn slots(&self) -> &Slots {
        self.table.slots()
    }

    /// How many of the user's live memories carry each tag.
    pub(crate) fn tag_frequencies(&self, user: &str) -> Option<&BTreeMap<String, u64>> {
        self.table.tag_frequencies(user)
    }

    /// The user's canonical tags and their vectors.
    pub(crate) fn canonical(&self, user: &str) -> Option<&CanonicalTags> {
        self.table.canonical(user)
    }

    /// The user's tag snapshots, by id.
    pub(crate) fn snapshots(&self, user: &str) -> Option<&BTreeMap<String, TagSnapshot>> {
        self.table.snapshots(user)
    }

    /// Every user's canonical tags, as (user, tag).
    pub(crate) fn canonical_tags(&self) -> impl Iterator<Item = (&str, &str)> + '_ {
        self.table.canonical_tags()
    }

    /// Live records in the member set `set` picks in each user, all users: from the sets,
    /// not a pass over the records (STATS holds the read lock while it counts).
    pub(crate) fn member_count(
        &self,
        set: impl Fn(&UserIndex) -> Option<&BTreeSet<MemoryId>>,
    ) -> usize {
        self.table.member_count(set)
    }

    /// The live and archived records that belong to an entity (`docs/search.md`,
    /// "Deleting"); `None` if the entity does not exist.
    pub(crate) fn records_of(
        &self,
        kind: EntityKind,
        user: &str,
        id: &str,
    ) -> Option<(Vec<MemoryId>, Vec<MemoryId>)> {
        self.table.records_of(kind, user, id)
    }

    /// An archived record (merged, updated, superseded or compacted away).
    pub(crate) fn archived(&self, id: MemoryId) -> Option<&Archived> {
        self.table.archived(id)
    }

    /// Every archived record, all users, in id order.
    pub(crate) fn archive_sorted(&self) -> Vec<&Archived> {
        self.table.archive_sorted()
    }

    /// Archived records, all users.
    pub(crate) fn archive_len(&self) -> usize {
        self.table.archive_len()
    }

    /// The user's archived records, in no order: a walk over the whole archive (`as_of`
    /// searches and `history` only).
    pub(crate) fn archived_of<'a>(&'a self, user: &'a str) -> impl Iterator<Item = &'a Archived> {
        self.table.archived_of(user)
    }

    /// The user's live records that do not hold at `t` (a validity that starts later or has
    /// ended): only the records with a timed validity are looked at.
    pub(crate) fn invalid_at(&self, user: &str, t: Timestamp) -> KeySet {
        self.table.invalid_at(user, t)
    }

    /// The live record that replaced `id` through a merge or an update, following the chain.
    pub(crate) fn successor(&self, id: MemoryId) -> Option<MemoryId> {
        self.table.successor(id)
    }

    /// Every archived record the lineage of `id` (live or archived) reaches through
    /// `supersedes`, depth first in `supersedes` order, each once.
    pub(crate) fn lineage(&self, id: MemoryId) -> Vec<&Archived> {
        self.table.lineage(id)
    }

    /// The text of a live or an archived record: what re-embedding and restoration embed.
    pub(crate) fn content_of(&self, id: MemoryId) -> Option<&str> {
        self.table.content_of(id)
    }
}
