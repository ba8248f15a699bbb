//! The in-memory metadata table: every live record by id, and per user the content-hash index,
//! the key set (the scan's user filter) and the tag frequencies.
//!
//! Guarantees: all indexes change together in `insert` and `remove`, so they always agree
//! with the records. Not durable by itself: the log and checkpoints are.

use crate::record::{Memory, MemoryId};
use mnemo_index::KeySet;
use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

/// Hashes a sha256 content hash by its first eight bytes: it is already uniformly random, so
/// running SipHash over it again would only cost time (it showed up in the open profile).
#[derive(Debug, Default)]
pub(crate) struct ContentHashHasher(u64);

impl Hasher for ContentHashHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut word = [0u8; 8];
        for (w, b) in word.iter_mut().zip(bytes) {
            *w = *b;
        }
        self.0 ^= u64::from_le_bytes(word);
    }

    fn write_usize(&mut self, _length_prefix: usize) {}
}

type HashIndex = HashMap<[u8; 32], MemoryId, BuildHasherDefault<ContentHashHasher>>;

/// Everything indexed per user.
#[derive(Debug, Default)]
struct UserIndex {
    by_hash: HashIndex,
    keys: KeySet,
    tag_freq: BTreeMap<String, u64>,
}

impl UserIndex {
    fn add(&mut self, m: &Memory) {
        self.by_hash.insert(m.content_hash, m.id);
        self.keys.insert(m.id.0);
        for t in &m.tags {
            match self.tag_freq.get_mut(t) {
                Some(n) => *n += 1,
                None => {
                    self.tag_freq.insert(t.clone(), 1);
                }
            }
        }
    }
}

/// The live records and their indexes.
#[derive(Debug, Default)]
pub(crate) struct Table {
    slots: Vec<Option<Box<Memory>>>,
    live: usize,
    users: HashMap<String, UserIndex>,
}

impl Table {
    pub(crate) fn len(&self) -> usize {
        self.live
    }

    pub(crate) fn get(&self, id: MemoryId) -> Option<&Memory> {
        usize::try_from(id.0)
            .ok()
            .and_then(|i| self.slots.get(i))
            .and_then(|s| s.as_deref())
    }

    pub(crate) fn find_hash(&self, user: &str, hash: &[u8; 32]) -> Option<MemoryId> {
        self.users.get(user)?.by_hash.get(hash).copied()
    }

    pub(crate) fn user_keys(&self, user: &str) -> Option<&KeySet> {
        self.users.get(user).map(|u| &u.keys)
    }

    pub(crate) fn tag_frequencies(&self, user: &str) -> Option<&BTreeMap<String, u64>> {
        self.users.get(user).map(|u| &u.tag_freq)
    }

    pub(crate) fn users(&self) -> usize {
        self.users.values().filter(|u| !u.keys.is_empty()).count()
    }

    /// Live records in id order.
    pub(crate) fn iter(&self) -> impl ExactSizeIterator<Item = &Memory> + '_ {
        struct Live<'a> {
            inner: std::slice::Iter<'a, Option<Box<Memory>>>,
            left: usize,
        }
        impl<'a> Iterator for Live<'a> {
            type Item = &'a Memory;
            fn next(&mut self) -> Option<&'a Memory> {
                let m = self.inner.by_ref().find_map(|s| s.as_deref())?;
                self.left -= 1;
                Some(m)
            }
            fn size_hint(&self) -> (usize, Option<usize>) {
                (self.left, Some(self.left))
            }
        }
        impl ExactSizeIterator for Live<'_> {}
        Live {
            inner: self.slots.iter(),
            left: self.live,
        }
    }

    /// Makes room for ids up to `max_id` (loading a checkpoint).
    pub(crate) fn reserve(&mut self, max_id: u64) {
        let want = usize::try_from(max_id).unwrap_or(0).saturating_add(1);
        self.slots.reserve(want.saturating_sub(self.slots.len()));
    }

    /// Inserts a record whose id is not present.
    pub(crate) fn insert(&mut self, m: Memory) {
        let Ok(i) = usize::try_from(m.id.0) else {
            return;
        };
        if i >= self.slots.len() {
            self.slots.resize_with(i + 1, || None);
        }
        match self.users.get_mut(&m.user_id) {
            Some(u) => u.add(&m),
            None => {
                let mut u = UserIndex::default();
                u.add(&m);
                self.users.insert(m.user_id.clone(), u);
            }
        }
        if let Some(slot) = self.slots.get_mut(i) {
            if slot.is_none() {
                self.live += 1;
            }
            *slot = Some(Box::new(m));
        }
    }

    /// Removes a record, returning it.
    pub(crate) fn remove(&mut self, id: MemoryId) -> Option<Box<Memory>> {
        let m = usize::try_from(id.0)
            .ok()
            .and_then(|i| self.slots.get_mut(i))
            .and_then(Option::take)?;
        self.live -= 1;
        if let Some(u) = self.users.get_mut(&m.user_id) {
            if u.by_hash.get(&m.content_hash) == Some(&m.id) {
                u.by_hash.remove(&m.content_hash);
            }
            u.keys.remove(m.id.0);
            for t in &m.tags {
                if let Some(n) = u.tag_freq.get_mut(t) {
                    *n -= 1;
                    if *n == 0 {
                        u.tag_freq.remove(t);
                    }
                }
            }
        }
        Some(m)
    }
}
