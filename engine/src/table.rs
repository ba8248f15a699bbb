//! The in-memory metadata table: every live record by id, the per-user content-hash index,
//! per-user key sets (the scan's user filter) and per-user tag frequencies.
//!
//! Guarantees: all indexes change together in `insert` and `remove`, so they always agree
//! with the records. Not durable by itself: the log and checkpoints are.

use crate::record::{Memory, MemoryId};
use mnemo_index::KeySet;
use std::collections::{BTreeMap, HashMap};

/// The live records and their indexes.
#[derive(Debug, Default)]
pub(crate) struct Table {
    slots: Vec<Option<Box<Memory>>>,
    live: usize,
    by_hash: HashMap<String, HashMap<[u8; 32], MemoryId>>,
    user_keys: HashMap<String, KeySet>,
    tag_freq: HashMap<String, BTreeMap<String, u64>>,
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
        self.by_hash.get(user)?.get(hash).copied()
    }

    pub(crate) fn user_keys(&self, user: &str) -> Option<&KeySet> {
        self.user_keys.get(user)
    }

    pub(crate) fn tag_frequencies(&self, user: &str) -> Option<&BTreeMap<String, u64>> {
        self.tag_freq.get(user)
    }

    pub(crate) fn users(&self) -> usize {
        self.user_keys.values().filter(|k| !k.is_empty()).count()
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

    /// Inserts a record whose id is not present.
    pub(crate) fn insert(&mut self, m: Memory) {
        let Ok(i) = usize::try_from(m.id.0) else {
            return;
        };
        if i >= self.slots.len() {
            self.slots.resize_with(i + 1, || None);
        }
        self.by_hash
            .entry(m.user_id.clone())
            .or_default()
            .insert(m.content_hash, m.id);
        self.user_keys
            .entry(m.user_id.clone())
            .or_default()
            .insert(m.id.0);
        let freq = self.tag_freq.entry(m.user_id.clone()).or_default();
        for t in &m.tags {
            *freq.entry(t.clone()).or_default() += 1;
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
        if let Some(h) = self.by_hash.get_mut(&m.user_id)
            && h.get(&m.content_hash) == Some(&m.id)
        {
            h.remove(&m.content_hash);
        }
        if let Some(k) = self.user_keys.get_mut(&m.user_id) {
            k.remove(m.id.0);
        }
        if let Some(freq) = self.tag_freq.get_mut(&m.user_id) {
            for t in &m.tags {
                if let Some(n) = freq.get_mut(t) {
                    *n -= 1;
                    if *n == 0 {
                        freq.remove(t);
                    }
                }
            }
        }
        Some(m)
    }
}
