//! Purges of a [`Db`] (`docs/durability.md`, "Purge", P1–P5): deleted rows and archived
//! texts leave every file.

use super::checkpoint::CheckpointAsk;
use super::core::*;
use crate::kernel::checkpoint::format as ckpt_format;
use crate::kernel::commit::PoisonCause;
use crate::kernel::error::{KernelError, Result};
use crate::kernel::error::{internal, io_error};
use crate::kernel::maintenance::Purge;
use crate::kernel::maintenance::Removed;
use crate::kernel::recovery::Retained;
use crate::kernel::segment_file::{self, SegmentEntry, SegmentKind};
use std::path::PathBuf;
use std::time::Instant;

impl Db {
    /// Makes the deleted records leave every file now (`docs/durability.md`, "Purge"): P1–P5.
    ///
    /// # Errors
    /// `Poisoned`, `Io`, `DiskFull`, `Internal`. A failure before P3 changes nothing; after it,
    /// the rewritten segments stand and the checkpoint's failure is handled as any
    /// checkpoint's.
    pub(crate) fn purge(&self) -> Result<Purge> {
        let start = Instant::now();
        let turn = self.checkpointing.lock();
        let mut noted = None;
        let result = self
            .purge_holding(start, &mut noted)
            .map_err(KernelError::descriptors_told_apart);
        drop(turn);
        match &result {
            Ok(p) => self.maintenance.record_purge(p.clone()),
            Err(e) => {
                // The deletes P1 took are not purged: they are due again after another delay.
                if noted.is_some() {
                    self.unpurged_since.lock().get_or_insert_with(Instant::now);
                }
                self.maintenance.record_purge_failure(e);
            }
        }
        // P4 sealed the growing rows as any checkpoint does: they are indexed the same way
        // (after a re-embedding, every vector of the store).
        if result.is_ok() {
            self.start_background_build();
        }
        result
    }

    /// P1–P5 with the checkpoint mutex held. P1 moves the deletes' note into `noted`.
    pub(in crate::kernel) fn purge_holding(
        &self,
        start: Instant,
        noted: &mut Option<Instant>,
    ) -> Result<Purge> {
        let plan = self.purge_plan(noted)?;
        let (rewritten, written, rows_dropped) = self.purge_rewrite(&plan)?;
        let tags_forgotten = self.purge_swap(rewritten, &written)?;
        // P4: a full checkpoint names the new list and holds no deleted record (a delta's base
        // would still hold the deleted ones).
        self.checkpoint_holding(CheckpointAsk::Full)?;
        // P5: the newest checkpoint, read back, becomes the only one; everything older goes.
        // No checkpoint even now: nothing was ever written, so nothing was deleted.
        let Some(newest) = self.writer.lock().checkpoints.last().map(|c| c.seq) else {
            return Ok(Purge {
                segments_rewritten: 0,
                rows_dropped: 0,
                removed: Removed::default(),
                tags_forgotten,
                seconds: start.elapsed().as_secs_f64(),
            });
        };
        let removed = self.keep_only(newest)?;
        Ok(Purge {
            segments_rewritten: plan.len(),
            rows_dropped,
            removed,
            tags_forgotten,
            seconds: start.elapsed().as_secs_f64(),
        })
    }

    /// P1: the segments holding deleted rows, the rows deleted now, and the id each one's
    /// rewrite gets. Every delete applied so far is covered from here on (its note moves into
    /// `noted`); later ones note again.
    fn purge_plan(&self, noted: &mut Option<Instant>) -> Result<Vec<PurgeOf>> {
        let mut w = self.writer.lock();
        self.journal.check()?;
        self.not_restoring()?;
        // Every delete applied so far is covered from here on; later ones note again.
        *noted = self.unpurged_since.lock().take();
        let state = self.state.read();
        let plan: Vec<_> = state
            .vectors
            .sealed_tombstones()
            .into_iter()
            .filter_map(|(i, dead)| {
                let entry = *w.segments.entries().get(i)?;
                Some((i, entry, state.vectors.sealed().get(i)?.clone(), dead))
            })
            .collect();
        drop(state);
        Ok(plan
            .into_iter()
            .map(|(i, entry, seg, dead)| {
                let id = w.next_segment_id;
                w.next_segment_id += 1;
                (i, entry, seg, dead, id)
            })
            .collect::<Vec<_>>())
    }

    /// P2: each planned segment rewritten without its deleted rows, written and read back; no
    /// lock held. Returns the rewrites (`None`: no row left), the files written, and the rows
    /// dropped. A failure removes what it wrote.
    fn purge_rewrite(&self, plan: &[PurgeOf]) -> Result<(Vec<Rewrite>, Vec<PathBuf>, u64)> {
        // P2: each rewritten without those rows, written and read back; no lock held.
        let mut rewritten = Vec::with_capacity(plan.len());
        let mut written = Vec::new();
        let discard = |written: &[PathBuf]| {
            let _ = self.undo_checkpoint_files(written);
        };
        let mut rows_dropped = 0u64;
        for (i, entry, seg, dead, id) in plan {
            use amberdb_index::segment::Rewritten;
            let keep = |k: u64| dead.binary_search(&k).is_err();
            let rewrite =
                match seg.rewrite_kept(&keep, self.config.vector_codes, self.identity.owner()) {
                    Ok(r) => r,
                    Err(e) => {
                        discard(&written);
                        return Err(internal("rewriting a segment without its deleted rows", e));
                    }
                };
            rows_dropped += dead.len() as u64;
            let kind = match &rewrite {
                Rewritten::Empty => {
                    rewritten.push((*i, *entry, None));
                    continue;
                }
                Rewritten::Flat(_) => SegmentKind::Flat,
                Rewritten::Ivf(_) => SegmentKind::Ivf,
            };
            let new = SegmentEntry {
                id: *id,
                rows: entry.rows - dead.len() as u64,
                kind,
            };
            let name = new.file_name();
            written.push(self.dir.join(&name));
            let wrote = crate::kernel::storage::write_atomic_pieces(
                self.storage(),
                &self.dir,
                &name,
                &mut |put| {
                    rewrite.write(put);
                },
            );
            let opened = wrote
                .map_err(|source| io_error(self.dir.join(&name), source))
                .and_then(|()| segment_file::open(self.storage(), &self.dir, &new));
            match opened {
                Ok(seg) => rewritten.push((*i, *entry, Some((new, seg)))),
                Err(e) => {
                    discard(&written);
                    return Err(e);
                }
            }
        }
        Ok((rewritten, written, rows_dropped))
    }

    /// P3: the swap, last segment first so the indices stay right, and the canonical tags no
    /// record carries any more forgotten. Returns how many. A failure before the swap removes
    /// the files `written`.
    fn purge_swap(&self, rewritten: Vec<Rewrite>, written: &[PathBuf]) -> Result<usize> {
        let discard = |written: &[PathBuf]| {
            let _ = self.undo_checkpoint_files(written);
        };
        let mut w = self.writer.lock();
        if let Err(e) = self.journal.check() {
            discard(written);
            return Err(e);
        }
        if rewritten
            .iter()
            .any(|(i, entry, _)| w.segments.entries().get(*i) != Some(entry))
        {
            discard(written);
            return Err(internal(
                "purging segments",
                "the segments changed meanwhile",
            ));
        }
        let mut state = self.state.write();
        for (i, _, new) in rewritten.into_iter().rev() {
            if let Err(e) = w.segments.purged(&mut state.vectors, i, new) {
                drop(state);
                self.journal
                    .poison(PoisonCause::new("purge", &self.dir, &e));
                return Err(internal("swapping in a purged segment", e));
            }
        }
        // A deleted memory's tags go with it: P4's checkpoint holds only the canonical
        // tags some record still carries, and P5 removes the files that named the others.
        // No frame: a purge that fails before P4 leaves them, and the next one drops them.
        Ok(state.table.forget_unused_canonical_tags())
    }

    /// P5: the checkpoint at `newest`, read back, becomes the only one: the older ones, the log
    /// files before it and the segments it does not name are let go and removed. The
    /// read-back takes no lock a writer needs (at 1M it reads and decodes ~250 MB for a
    /// second): the file is never written again, and no other checkpoint runs while the purge
    /// holds the checkpoint mutex.
    fn keep_only(&self, newest: u64) -> Result<Removed> {
        let path = self.dir.join(ckpt_format::file_name(newest));
        let bytes = self.storage().map(&path).map_err(KernelError::io(&path))?;
        // What falls back to the older checkpoint is about to go: the newest must read.
        if let Err(e) = crate::kernel::checkpoint::reader::verify(bytes.as_slice()) {
            let (offset, reason) = match e {
                crate::kernel::checkpoint::reader::CheckpointError::Corrupted(d) => {
                    (d.offset as u64, d.reason)
                }
                crate::kernel::checkpoint::reader::CheckpointError::Unsupported(_) => {
                    (0, "the purge's checkpoint does not read back")
                }
            };
            return Err(KernelError::Corrupted {
                file: path,
                offset,
                reason,
            });
        }
        drop(bytes);
        let retired = {
            let mut w = self.writer.lock();
            if w.checkpoints.last().map(|c| c.seq) != Some(newest) {
                return Err(internal(
                    "purging",
                    "the checkpoints changed while the purge held the checkpoint mutex",
                ));
            }
            let mut retired: Vec<PathBuf> = w.take_damaged();
            let keep = w.checkpoints.len().saturating_sub(1);
            let older: Vec<Retained> = w.checkpoints.drain(..keep).collect();
            retired.extend(
                older
                    .iter()
                    .map(|c| self.dir.join(ckpt_format::file_name(c.seq))),
            );
            retired.extend(self.retire_logs_before(newest));
            let named: std::collections::HashSet<u64> =
                w.segments.entries().iter().map(|s| s.id).collect();
            retired.extend(self.retire_replaced(&mut w, &named));
            retired
        };
        self.let_go(&retired, None);
        let removed = self.remove_retired(&retired);
        Ok(removed)
    }
}

/// One segment P1 found holding deleted rows: where it is in the list, its entry and rows,
/// the keys deleted (sorted), and the id its rewrite gets.
type PurgeOf = (usize, SegmentEntry, amberdb_index::Sealed, Vec<u64>, u64);

/// One segment P2 rewrote: where it was, its entry, and the new entry and segment (`None`
/// when no row was left).
type Rewrite = (
    usize,
    SegmentEntry,
    Option<(SegmentEntry, amberdb_index::Sealed)>,
);
