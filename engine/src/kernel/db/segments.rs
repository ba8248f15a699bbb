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

use crate::kernel::segment_file::SegmentEntry;
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

    /// A checkpoint sealed the growing rows into `entry`, after every segment.
    pub(in crate::kernel) fn sealed(&mut self, entry: SegmentEntry) {
        self.entries.push(entry);
        self.version += 1;
    }

    /// An index build's segment `entry` takes the place of the run `run` (B3), which is kept
    /// until no checkpoint names it.
    pub(in crate::kernel) fn built(&mut self, run: Range<usize>, entry: SegmentEntry) {
        let replaced: Vec<SegmentEntry> = self.entries.splice(run, [entry]).collect();
        for r in &replaced {
            self.purged_from.remove(&r.id);
        }
        self.replaced.extend(replaced);
        self.version += 1;
    }

    /// A purge rewrote segment `at` as `rewritten` (`None`: dropped it, nothing of it left);
    /// the old one is kept until no checkpoint names it. A position past the list changes
    /// nothing (the purge checked the list under the same writer lock).
    pub(in crate::kernel) fn purged(&mut self, at: usize, rewritten: Option<SegmentEntry>) {
        let Some(&old) = self.entries.get(at) else {
            return;
        };
        let root = self.purged_from.remove(&old.id).unwrap_or(old.id);
        if let Some(new) = rewritten {
            self.purged_from.insert(new.id, root);
        }
        self.entries.splice(at..=at, rewritten);
        self.replaced.push(old);
        self.version += 1;
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

    fn ids(s: &Segments) -> Vec<u64> {
        s.entries().iter().map(|e| e.id).collect()
    }

    #[test]
    fn every_change_is_kept_until_checkpointed_and_a_build_finds_its_run_after_purges() {
        let mut s = Segments::opened(Vec::new(), Vec::new(), false);
        assert!(!s.changed_since_checkpoint());
        for id in 1..=3 {
            s.sealed(SegmentEntry::flat(id, 10));
        }
        assert!(s.changed_since_checkpoint());
        s.checkpointed();
        assert!(!s.changed_since_checkpoint());
        // A build planned over 2 and 3; a purge rewrites 2 as 4, then 4 as 5, meanwhile.
        let roots: Vec<u64> = [2, 3].iter().map(|&id| s.root_of(id)).collect();
        s.purged(1, Some(SegmentEntry::flat(4, 8)));
        s.purged(1, Some(SegmentEntry::flat(5, 7)));
        assert_eq!(ids(&s), [1, 5, 3]);
        assert_eq!((s.root_of(5), s.root_of(3)), (2, 3));
        let run = s
            .descendants_of(&roots)
            .expect("the run, rewritten in place");
        assert_eq!(run, 1..3);
        s.built(run, SegmentEntry::flat(6, 15));
        assert_eq!(ids(&s), [1, 6]);
        assert!(s.changed_since_checkpoint());
        // A purge that drops a segment whole leaves no descendant.
        s.purged(0, None);
        assert_eq!(ids(&s), [6]);
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
}
