//! The table's archive: records that left the live set through a merge or an update, with
//! their vectors, for lineage, `as_of`, undo and archive retention.

use super::Table;
use super::user::*;
use crate::kernel::record::{Memory, MemoryId, Timestamp};
use amberdb_index::KeySet;
use std::collections::HashMap;

impl Table {
    pub(crate) fn archived(&self, id: MemoryId) -> Option<&Archived> {
        self.archive.get(&id)
    }

    /// The user's live records that do not hold at `t` (a validity that starts later or has
    /// ended): only the records with a timed validity are looked at.
    pub(crate) fn invalid_at(&self, user: &str, t: Timestamp) -> KeySet {
        let mut out = KeySet::new();
        if let Some(u) = self.users.get(user) {
            for id in &u.timed {
                if self.get(*id).is_some_and(|m| !m.valid_at(t)) {
                    out.insert(id.0);
                }
            }
        }
        out
    }

    /// The user's archived records, in no order: a walk over the whole archive (`as_of`
    /// searches and `history` only).
    pub(crate) fn archived_of<'a>(&'a self, user: &'a str) -> impl Iterator<Item = &'a Archived> {
        self.archive
            .values()
            .filter(move |a| a.record.user_id == user)
    }

    pub(crate) fn archive_len(&self) -> usize {
        self.archive.len()
    }

    /// Archived records in id order.
    pub(crate) fn archive_sorted(&self) -> Vec<&Archived> {
        let mut v: Vec<&Archived> = self.archive.values().collect();
        v.sort_by_key(|a| a.record.id);
        v
    }

    /// The ids of the archived records, in no order.
    pub(crate) fn archived_ids(&self) -> impl Iterator<Item = MemoryId> + '_ {
        self.archive.keys().copied()
    }

    /// Gives every archived record and canonical tag its vector from `records` and `tags`
    /// (re-embedding's switch, `docs/durability.md`, "Re-embedding"), taking them out. `None`,
    /// with nothing changed, if one of them has none there.
    pub(crate) fn replace_vectors(
        &mut self,
        records: &mut HashMap<MemoryId, Vec<f32>>,
        tags: &mut HashMap<(String, String), Vec<f32>>,
    ) -> Option<()> {
        let covered = self.archive.keys().all(|id| records.contains_key(id))
            && self
                .canonical_tags()
                .all(|(u, t)| tags.contains_key(&(u.to_owned(), t.to_owned())));
        if !covered {
            return None;
        }
        for (id, a) in &mut self.archive {
            a.vector = records.remove(id)?;
        }
        for (user, index) in &mut self.users {
            let c = &mut index.canonical;
            let mut vectors = Vec::new();
            for t in &c.tags {
                vectors.extend(tags.remove(&(user.clone(), t.clone()))?);
            }
            c.vectors = vectors;
        }
        Some(())
    }

    /// The text of a live or an archived record: what re-embedding and restoration embed.
    pub(crate) fn content_of(&self, id: MemoryId) -> Option<&str> {
        self.get(id)
            .map(|m| m.content.as_str())
            .or_else(|| self.archived(id).map(|a| a.record.content.as_str()))
    }

    /// Gives an archived record its vector (restoration, `docs/durability.md`, R4b); false if
    /// the id is not archived.
    pub(crate) fn set_archived_vector(&mut self, id: MemoryId, vector: Vec<f32>) -> bool {
        match self.archive.get_mut(&id) {
            Some(a) => {
                a.vector = vector;
                true
            }
            None => false,
        }
    }

    /// Puts a record into the archive; false if its id is live or archived already.
    pub(crate) fn insert_archived(&mut self, record: Memory, vector: Vec<f32>) -> bool {
        if self.contains(record.id) || self.archive.contains_key(&record.id) {
            return false;
        }
        self.note_lineage(&record);
        self.archive.insert(record.id, Archived { record, vector });
        true
    }

    /// The archived records archive retention forgets at `now` (`docs/semantics.md`, "Archive
    /// retention"): those replaced before `now - max_age`, then, past `max_records`, the
    /// oldest. A record counts from the `updated_at` of the record that superseded it (set
    /// when it replaced it, later if that one changed since: never too early), else from its
    /// own `updated_at`. Oldest first.
    pub(crate) fn archive_to_forget(
        &self,
        now: Timestamp,
        max_age_us: Option<i64>,
        max_records: Option<usize>,
    ) -> Vec<MemoryId> {
        let replaced_at = |a: &Archived| {
            self.superseded_by
                .get(&a.record.id)
                .and_then(|s| {
                    self.get(*s)
                        .or_else(|| self.archived(*s).map(|b| &b.record))
                })
                .map_or(a.record.updated_at, |s| s.updated_at)
        };
        let mut by_age: Vec<(Timestamp, MemoryId)> = self
            .archive
            .values()
            .map(|a| (replaced_at(a), a.record.id))
            .collect();
        by_age.sort_unstable();
        let too_old = max_age_us.map_or(0, |age| {
            let cutoff = now.0.saturating_sub(age);
            by_age.partition_point(|(at, _)| at.0 < cutoff)
        });
        let too_many = max_records.map_or(0, |max| by_age.len().saturating_sub(max));
        by_age
            .into_iter()
            .take(too_old.max(too_many))
            .map(|(_, id)| id)
            .collect()
    }

    /// Removes an archived record for good (archive retention). Lineage that names it skips it
    /// from now on. `None` if `id` is not archived.
    pub(crate) fn forget_archived(&mut self, id: MemoryId) -> Option<()> {
        self.archive.remove(&id)?;
        self.superseded_by.remove(&id);
        Some(())
    }

    /// Every archived record the lineage of `id` (live or archived) reaches through
    /// `supersedes`, depth first in `supersedes` order, each once.
    pub(crate) fn lineage(&self, id: MemoryId) -> Vec<&Archived> {
        let root = self
            .get(id)
            .or_else(|| self.archived(id).map(|a| &a.record));
        let mut todo: Vec<MemoryId> = root
            .map(|m| m.supersedes.iter().rev().copied().collect())
            .unwrap_or_default();
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        while let Some(s) = todo.pop() {
            if !seen.insert(s) {
                continue;
            }
            if let Some(a) = self.archived(s) {
                out.push(a);
                todo.extend(a.record.supersedes.iter().rev().copied());
            }
        }
        out
    }

    /// The live record that replaced `id` through a merge or an update, following the chain.
    pub(crate) fn successor(&self, id: MemoryId) -> Option<MemoryId> {
        let mut at = *self.superseded_by.get(&id)?;
        // Lineage is acyclic (a record only supersedes older ids); the bound is a safeguard.
        for _ in 0..64 {
            match self.superseded_by.get(&at) {
                Some(next) if !self.contains(at) => at = *next,
                _ => break,
            }
        }
        Some(at)
    }

    pub(super) fn note_lineage(&mut self, m: &Memory) {
        for s in &m.supersedes {
            self.superseded_by.insert(*s, m.id);
        }
    }
}
