//! The sealed segments a store holds: the one owner of the writer's segment list
//! (`docs/durability.md`, "Index builds", B1–B4, and "Purge").
//!
//! Guarantees: the list changes only through the methods below, one for each thing that
//! changes it (a checkpoint seals the growing rows; an index build swaps its segment in for a
//! run; a purge rewrites or drops one segment; a restoration or a re-embedding's switch
//! replaces them all); each change bumps the version, so the next checkpoint is written even
//! at the same sequence number (B3); every segment taken out is kept in `replaced` until no
//! retained checkpoint names it (B4); and a purge's rewrite remembers the segment it descends
//! from, so a build planned before the purge still finds its run.
//!
//! The files' list and the collection's mapped segments change together: `sealed`, `built`
//! and `purged` take the collection and change it first, and the files' list only when it
//! took the change, so the two hold the same segments in the same order after every change
//! (an error changes neither). `all_replaced` is the one change the collection makes itself:
//! a restoration or a re-embedding's switch rebuilds the whole collection from the records
//! (`State`), and the files' list is emptied beside it.

use crate::kernel::segment_file::SegmentEntry;
use amberdb_index::{Collection, FlatSegment, IndexError, Sealed};
use std::collections::HashMap;
use std::ops::Range;

/// The writer's sealed segments, in key order (the collection's order).
#[derive(Debug)]
pub(in crate::kernel) struct Segments {
    entries: Vec<SegmentEntry>,
    /// Bumped at every change of `entries`.
    version: u64,
    /// `version` as the newest checkpoint wrote it.
    checkpointed: u64,
    /// Segments taken out whose files are still on disk (B4).
    replaced: Vec<SegmentEntry>,
    /// For each segment a purge wrote, the id of the segment it descends from through purges.
    purged_from: HashMap<u64, u64>,
}

impl Segments {
    /// The segments an open found, and those replaced whose files are still there.
    /// `named_anew`: the open left out a damaged segment (R4b), so the next checkpoint names
    /// the segments as they are now even at the same sequence number.
    pub(in crate::kernel) fn opened(
        entries: Vec<SegmentEntry>,
        replaced: Vec<SegmentEntry>,
        named_anew: bool,
    ) -> Segments {
        Segments {
            entries,
            version: u64::from(named_anew),
            checkpointed: 0,
            replaced,
            purged_from: HashMap::new(),
        }
    }

    /// The segments, in key order.
    pub(in crate::kernel) fn entries(&self) -> &[SegmentEntry] {
        &self.entries
    }

    /// Whether the list changed since the newest checkpoint was written (B3).
    pub(in crate::kernel) fn changed_since_checkpoint(&self) -> bool {
        self.version != self.checkpointed
    }

    /// A checkpoint that names the list as it is now was written.
    pub(in crate::kernel) fn checkpointed(&mut self) {
        self.checkpointed = self.version;
    }

    /// A checkpoint sealed the first `rows` growing rows of `vectors` into `segment` (C5), kept
    /// in the file `entry` after every segment (`None` for both: none of those rows was live).
    ///
    /// # Errors
    /// The collection's refusal (`Collection::seal_growing_prefix`); nothing changed.
    pub(in crate::kernel) fn sealed(
        &mut self,
        vectors: &mut Collection,
        rows: usize,
        sealed: Option<(SegmentEntry, FlatSegment)>,
    ) -> amberdb_index::Result<()> {
        let (entry, segment) = sealed.unzip();
        vectors.seal_growing_prefix(rows, segment)?;
        if let Some(entry) = entry {
            self.entries.push(entry);
            self.version += 1;
        }
        Ok(())
    }

    /// An index build's segment `built` (file `entry`) takes the place of the run `run` (B3),
    /// which is kept until no checkpoint names it. Returns how many of its keys a purge had
    /// dropped meanwhile (`Collection::absorb_run`: they enter under tombstones).
    ///
    /// # Errors
    /// A run past the files' list, or the collection's refusal; nothing changed.
    pub(in crate::kernel) fn built(
        &mut self,
        vectors: &mut Collection,
        run: Range<usize>,
        (entry, built): (SegmentEntry, Sealed),
    ) -> amberdb_index::Result<usize> {
        if run.start > run.end || run.end > self.entries.len() {
            return Err(IndexError::InvalidParameter("a run past the segment list"));
        }
        let (_, absorbed) = vectors.absorb_run(run.clone(), built)?;
        let replaced: Vec<SegmentEntry> = self.entries.splice(run, [entry]).collect();
        for r in &replaced {
            self.purged_from.remove(&r.id);
        }
        self.replaced.extend(replaced);
        self.version += 1;
        Ok(absorbed)
    }

    /// A purge rewrote segment `at` as `rewritten` (`None`: dropped it, nothing of it left);
    /// the old one is kept until no checkpoint names it.
    ///
    /// # Errors
    /// A position past the files' list, or the collection's refusal; nothing changed.
    pub(in crate::kernel) fn purged(
        &mut self,
        vectors: &mut Collection,
        at: usize,
        rewritten: Option<(SegmentEntry, Sealed)>,
    ) -> amberdb_index::Result<()> {
        let Some(&old) = self.entries.get(at) else {
            return Err(IndexError::InvalidParameter("a segment past the list"));
        };
        let (entry, segment) = rewritten.unzip();
        vectors.replace_run(at..at + 1, segment)?;
        let root = self.purged_from.remove(&old.id).unwrap_or(old.id);
        if let Some(new) = entry {
            self.purged_from.insert(new.id, root);
        }
        self.entries.splice(at..=at, entry);
        self.replaced.push(old);
        self.version += 1;
        Ok(())
    }

    /// Every vector became a growing row (a restoration's rebuild, a re-embedding's switch):
    /// every segment is replaced, kept until no checkpoint names it.
    pub(in crate::kernel) fn all_replaced(&mut self) {
        let old = std::mem::take(&mut self.entries);
        self.replaced.extend(old);
        self.purged_from.clear();
        self.version += 1;
    }

    /// Lets go of the replaced segments whose ids `keep` refuses (B4); returns them.
    pub(in crate::kernel) fn retire_replaced(
        &mut self,
        keep: impl Fn(&SegmentEntry) -> bool,
    ) -> Vec<SegmentEntry> {
        let (kept, retired) = std::mem::take(&mut self.replaced)
            .into_iter()
            .partition(|e| keep(e));
        self.replaced = kept;
        retired
    }

    /// The segment `id` descends from through purges (itself when no purge wrote it).
    pub(in crate::kernel) fn root_of(&self, id: u64) -> u64 {
        self.purged_from.get(&id).copied().unwrap_or(id)
    }

    /// Where the segments descending from `roots` (a build's run, B1) are now: adjacent and in
    /// the same order, or `None` when there are none or they are not (B3).
    pub(in crate::kernel) fn descendants_of(&self, roots: &[u64]) -> Option<Range<usize>> {
        let found: Vec<(usize, usize)> = self
            .entries
            .iter()
            .enumerate()
            .filter_map(|(at, s)| {
                let root = self.root_of(s.id);
                roots
                    .iter()
                    .position(|&r| r == root)
                    .map(|planned| (at, planned))
            })
            .collect();
        let (first, last) = (found.first()?.0, found.last()?.0);
        let adjacent = found.len() == last - first + 1;
        let in_order = found.windows(2).all(|p| p[0].1 < p[1].1);
        (adjacent && in_order).then_some(first..last + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use amberdb_index::{Owner, SealedBytes};

    fn ids(s: &Segments) -> Vec<u64> {
        s.entries().iter().map(|e| e.id).collect()
    }

    #[test]
    fn every_change_is_kept_until_checkpointed_and_a_build_finds_its_run_after_purges() {
        let mut s = Segments::opened(Vec::new(), Vec::new(), false);
        let mut v = Collection::new(2);
        assert!(!s.changed_since_checkpoint());
        for id in 1..=3 {
            let keys = [10 * id, 10 * id + 1];
            for &k in &keys {
                v.insert(k, &[1.0, 0.0]).expect("insert");
            }
            s.sealed(&mut v, 2, Some((SegmentEntry::flat(id, 2), flat(&keys))))
                .expect("sealed");
        }
        in_step(&s, &v);
        assert!(s.changed_since_checkpoint());
        s.checkpointed();
        assert!(!s.changed_since_checkpoint());
        // A build planned over 2 and 3; a purge rewrites 2 as 4, then 4 as 5, meanwhile.
        let roots: Vec<u64> = [2, 3].iter().map(|&id| s.root_of(id)).collect();
        assert!(v.delete(21));
        s.purged(
            &mut v,
            1,
            Some((SegmentEntry::flat(4, 1), flat(&[20]).into())),
        )
        .expect("purged");
        s.purged(
            &mut v,
            1,
            Some((SegmentEntry::flat(5, 1), flat(&[20]).into())),
        )
        .expect("purged");
        assert_eq!(ids(&s), [1, 5, 3]);
        in_step(&s, &v);
        assert_eq!((s.root_of(5), s.root_of(3)), (2, 3));
        let run = s
            .descendants_of(&roots)
            .expect("the run, rewritten in place");
        assert_eq!(run, 1..3);
        let absorbed = s
            .built(
                &mut v,
                run,
                (SegmentEntry::flat(6, 3), flat(&[20, 30, 31]).into()),
            )
            .expect("built");
        assert_eq!(absorbed, 0);
        assert_eq!(ids(&s), [1, 6]);
        in_step(&s, &v);
        assert!(s.changed_since_checkpoint());
        // A purge that drops a segment whole leaves no descendant.
        assert!(v.delete(10) && v.delete(11));
        s.purged(&mut v, 0, None).expect("dropped");
        assert_eq!(ids(&s), [6]);
        in_step(&s, &v);
        assert_eq!(s.descendants_of(&[1]), None);
        // Everything taken out waits until no checkpoint names it.
        let retired: Vec<u64> = s
            .retire_replaced(|e| e.id == 2)
            .iter()
            .map(|e| e.id)
            .collect();
        assert_eq!(retired, [4, 5, 3, 1]);
        s.all_replaced();
        assert!(s.entries().is_empty());
        let rest: Vec<u64> = s.retire_replaced(|_| false).iter().map(|e| e.id).collect();
        assert_eq!(rest, [2, 6]);
        assert_eq!(s.root_of(5), 5, "lineage goes with a switch");
    }

    #[test]
    fn a_change_the_collection_refuses_changes_neither_list() {
        let mut s = Segments::opened(Vec::new(), Vec::new(), false);
        let mut v = Collection::new(2);
        v.insert(1, &[1.0, 0.0]).expect("insert");
        // A segment that leaves out a live growing row.
        let refused = s.sealed(&mut v, 1, Some((SegmentEntry::flat(1, 1), flat(&[2]))));
        assert!(refused.is_err());
        assert!(s.entries().is_empty() && !s.changed_since_checkpoint());
        assert_eq!((v.sealed().len(), v.growing_len()), (0, 1));
        s.sealed(&mut v, 1, Some((SegmentEntry::flat(1, 1), flat(&[1]))))
            .expect("sealed");
        s.checkpointed();
        // A purge past the list, a rewrite that drops a live key, a build of another key.
        assert!(s.purged(&mut v, 1, None).is_err());
        assert!(s.purged(&mut v, 0, None).is_err());
        let other = (SegmentEntry::flat(2, 1), flat(&[7]).into());
        assert!(s.built(&mut v, 0..1, other).is_err());
        let past = (SegmentEntry::flat(3, 1), flat(&[1]).into());
        assert!(s.built(&mut v, 0..2, past).is_err());
        assert_eq!(ids(&s), [1]);
        assert!(!s.changed_since_checkpoint());
        in_step(&s, &v);
        assert!(v.contains(1));
    }

    /// A flat segment of `keys`, each the same unit vector.
    fn flat(keys: &[u64]) -> FlatSegment {
        let vectors: Vec<f32> = keys.iter().flat_map(|_| [1.0, 0.0]).collect();
        let bytes = amberdb_index::segment::writer::encode(keys, &vectors, 2, false, Owner::NONE)
            .expect("encode");
        FlatSegment::open("test", SealedBytes::copy_from(&bytes)).expect("open")
    }

    /// The files' list and the collection hold as many segments, of as many rows.
    fn in_step(s: &Segments, v: &Collection) {
        let rows: Vec<u64> = s.entries().iter().map(|e| e.rows).collect();
        let held: Vec<u64> = v.sealed().iter().map(|g| g.len() as u64).collect();
        assert_eq!(rows, held, "the two lists in step");
    }
}
