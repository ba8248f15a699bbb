//! Checkpoints of a [`Db`] (`docs/durability.md`, "Checkpoint", C0–C6): when one is due, the
//! capture under the writer mutex, the files written with no lock held, the finish.

use super::Durability;
use super::core::*;
use crate::kernel::checkpoint::DeltaBase;
use crate::kernel::checkpoint::{format as ckpt_format, writer as ckpt_writer};
use crate::kernel::commit::PoisonCause;
use crate::kernel::error::{KernelError, Result};
use crate::kernel::error::{internal, io_error};
use crate::kernel::log::Op;
use crate::kernel::maintenance::CheckpointRun;
use crate::kernel::recovery::Retained;
use crate::kernel::segment_file::{self, SegmentEntry};
use crate::kernel::state::State;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// How long automatic checkpoints pause after one failed for a full disk.
pub(in crate::kernel) const CHECKPOINT_RETRY_AFTER_DISK_FULL: Duration = Duration::from_secs(10);
/// How long automatic checkpoints wait after one found no file descriptor left.
pub(in crate::kernel) const CHECKPOINT_RETRY_AFTER_DESCRIPTORS: Duration = Duration::from_secs(2);

/// What asked for a checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::kernel) enum CheckpointAsk {
    /// The maintenance thread or a write found one due: only if still due, and not while
    /// another runs. A delta when one may be.
    IfDue,
    /// A caller (`checkpoint`, an index build): now, a delta when one may be.
    Now,
    /// A purge: now, and full, so that no older file is needed for what it holds.
    Full,
}

/// What a checkpoint's capture took under the writer mutex, for C3–C4 to write with no lock
/// held (`docs/durability.md`, "Checkpoint").
pub(in crate::kernel) struct Capture {
    seq: u64,
    /// The log's running CRC through `seq`, when the store knows it.
    log_crc: Option<u32>,
    /// The checkpoint file at `seq` exists and is replaced (B3).
    rewrite: bool,
    next_id: u64,
    /// The segment list the checkpoint names: the sealed segments, then `sealed` if any.
    segments: Vec<SegmentEntry>,
    /// The growing rows C1 copied, and the segment they become.
    growing: amberdb_index::GrowingRows,
    sealed: Option<SegmentEntry>,
    /// The archive, entities, canonical tags and snapshots, as operations.
    aux: Vec<Op>,
    /// The live records, shared with the table (copy-on-write).
    records: crate::kernel::table::Snapshot,
    /// `log_bytes_since_checkpoint` when captured.
    log_bytes: u64,
    /// Full or a delta, with what each needs.
    kind: CaptureKind,
    /// The full checkpoint before this one that retention keeps beside it (the newest; a
    /// delta's base), unless a purge is to remove every older checkpoint.
    kept_full: Option<u64>,
}

impl Capture {
    /// Where in the log the checkpoint stands.
    fn log_point(&self) -> ckpt_format::LogPoint {
        ckpt_format::LogPoint {
            seq: self.seq,
            crc: self.log_crc,
        }
    }

    /// Whether the file of the checkpoint at `seq` may be removed once this one is written:
    /// every checkpoint but the full one kept beside it, and this one's own sequence number
    /// when it writes that file again (`docs/architecture.md`, "Mapped records").
    fn may_remove(&self, seq: u64) -> bool {
        Some(seq) != self.kept_full || (self.rewrite && seq == self.seq)
    }
}

/// What a capture writes: every record, or those changed since a base.
pub(in crate::kernel) enum CaptureKind {
    /// Every live record. `taken`: the changed ids it took from the table, given back if it
    /// fails (a later delta on the old base still needs them).
    Full { taken: amberdb_index::KeySet },
    /// A delta on the full checkpoint at `base_seq`: the ids changed since it.
    Delta {
        base_seq: u64,
        changed: amberdb_index::KeySet,
    },
}

impl CaptureKind {
    /// A delta's base; `None`: full.
    fn delta_of(&self) -> Option<u64> {
        match self {
            CaptureKind::Delta { base_seq, .. } => Some(*base_seq),
            CaptureKind::Full { .. } => None,
        }
    }
}

/// A checkpoint's aux section (`docs/format/checkpoint.md`): the model first, then the
/// entities, archive, canonical tags and snapshots, then what a re-embedding has staged, then
/// the request ids of the last two windows (`kernel::request`), then the partition log's claim
/// and open chunk group (`kernel::cluster`).
pub(in crate::kernel) fn checkpoint_aux(state: &State) -> Vec<Op> {
    let mut aux = vec![Op::Model {
        model_id: state.model.id.clone(),
        dim: u32::try_from(state.model.dim).unwrap_or(u32::MAX),
    }];
    aux.extend(state.table.aux_ops(state.vectors.dim()));
    if let Some(stage) = &state.stage {
        aux.extend(stage.ops(REEMBED_VECTORS_PER_FRAME));
    }
    aux.extend(
        state
            .requests
            .records()
            .into_iter()
            .map(|r| Op::Request(Box::new(r))),
    );
    let (claim, pending) = state.cluster.frames();
    aux.extend(claim.map(|c| Op::Claim(Box::new(c))));
    aux.extend(pending.into_iter().map(|x| Op::Skip(Box::new(x))));
    aux
}

/// Most vectors in one staged entry of a checkpoint: 4 MiB at 1,024 dimensions, 16 MiB at the
/// 4,096 a re-embedding allows (aux entries are bounded by the checkpoint's length only).
pub(in crate::kernel) const REEMBED_VECTORS_PER_FRAME: usize = 1_024;

impl Db {
    pub(in crate::kernel) fn checkpoint_due(&self, w: &Writer) -> bool {
        (w.log_bytes_since_checkpoint >= self.config.checkpoint_bytes
            || self.state.read().vectors.growing_len() >= self.config.seal_rows)
            && w.checkpoint_paused_until
                .is_none_or(|t| Instant::now() >= t)
    }

    /// Step 7: a checkpoint is due. The maintenance thread runs it, or this thread, after the
    /// write it follows, when the store has none (`docs/durability.md`, "Maintenance").
    pub(in crate::kernel) fn checkpoint_found_due(&self) {
        if self.config.maintenance_thread {
            self.maintenance.wake();
        } else if !self.maintenance.is_paused() {
            self.checkpoint_if_due();
        }
    }

    /// Checkpoints if the thresholds are still crossed once the writer lock is held again
    /// (another writer may have checkpointed in between). A failure is logged and counted, not
    /// returned: no client asked for this checkpoint.
    pub(in crate::kernel) fn checkpoint_if_due(&self) {
        if let Err(e) = self.checkpoint_under_lock(true) {
            tracing::error!(error = %e, "automatic checkpoint failed");
        }
    }

    /// Seals the growing segment and writes a checkpoint (`docs/durability.md` steps C0–C6),
    /// so that the next open replays only what follows. Writers wait only for the capture and
    /// the finish.
    pub(crate) fn checkpoint(&self) -> Result<()> {
        self.checkpoint_under_lock(false)
    }

    /// Runs `f` with checkpoints, purges and index swaps held off, once the one under way has
    /// finished: a re-embedding's switch makes every vector a growing row, and a checkpoint
    /// captured before it would, at its finish, seal the old growing rows over the new ones
    /// (`docs/durability.md`, "Re-embedding"). The checkpoint mutex comes first, as always.
    pub(crate) fn between_checkpoints<T>(&self, f: impl FnOnce() -> T) -> T {
        let _turn = self.checkpointing.lock();
        maintaining(f)
    }

    /// Takes the checkpoint mutex and checkpoints, then starts an index build if rows were
    /// sealed. `only_if_due`: only if still due once the writer lock is held, and not at all
    /// while another checkpoint runs (the next write or wake-up looks again).
    pub(in crate::kernel) fn checkpoint_under_lock(&self, only_if_due: bool) -> Result<()> {
        let sealed = {
            let _turn = if only_if_due {
                match self.checkpointing.try_lock() {
                    Some(turn) => turn,
                    None => return Ok(()),
                }
            } else {
                self.checkpointing.lock()
            };
            self.checkpoint_holding(if only_if_due {
                CheckpointAsk::IfDue
            } else {
                CheckpointAsk::Now
            })?
        };
        if sealed {
            self.start_background_build();
        }
        Ok(())
    }

    /// C0–C6 with the checkpoint mutex held by the caller: capture under the writer mutex,
    /// write with no lock a writer needs, finish under the writer mutex. A failure before the
    /// commit point removes what it wrote; for a full disk it pauses automatic checkpoints
    /// (`DiskFull`; the log still holds everything), any other failure poisons the store.
    /// Returns whether rows were sealed.
    pub(in crate::kernel) fn checkpoint_holding(&self, ask: CheckpointAsk) -> Result<bool> {
        let start = Instant::now();
        let capture = {
            let mut w = self.writer.lock();
            if ask == CheckpointAsk::IfDue && !self.checkpoint_due(&w) {
                return Ok(false);
            }
            // No checkpoint can say a record has no vector: none until restored (R4b).
            if let Err(e) = self.not_restoring() {
                return match ask {
                    CheckpointAsk::IfDue => Ok(false),
                    _ => Err(e),
                };
            }
            self.drain_touches(&mut w);
            self.journal.check()?;
            match self.capture(&mut w, ask) {
                Ok(Some(capture)) => capture,
                Ok(None) => return Ok(false),
                Err(e) => return Err(self.checkpoint_failed(&mut w, e)),
            }
        };
        let held = start.elapsed();
        let mut created = Vec::new();
        let written = self
            .write_checkpoint_files(&capture, &mut created)
            .or_else(|e| {
                self.undo_checkpoint_files(&created)?;
                Err(e)
            });
        let mut w = self.writer.lock();
        let finish_start = Instant::now();
        let give_back = |capture: &Capture| {
            if let CaptureKind::Full { taken } = &capture.kind {
                self.state.write().table.mark_changed(taken.iter());
            }
        };
        match written {
            Ok((segment, bytes)) => {
                let retired = match self.finish_checkpoint(&mut w, &capture, segment) {
                    Ok(retired) => retired,
                    Err(e) => {
                        give_back(&capture);
                        return Err(self.checkpoint_failed(&mut w, e));
                    }
                };
                drop(w);
                let writers_waited = held + finish_start.elapsed();
                // A checkpoint written again at its sequence number replaced that file.
                self.let_go(&retired, capture.rewrite.then_some(capture.seq));
                let removed = self.remove_retired(&retired);
                self.maintenance.record_checkpoint(CheckpointRun {
                    seq: capture.seq,
                    delta_of: capture.kind.delta_of(),
                    bytes,
                    sealed_rows: capture.sealed.map_or(0, |e| e.rows),
                    seconds: start.elapsed().as_secs_f64(),
                    writers_waited: writers_waited.as_secs_f64(),
                    removed,
                });
                Ok(capture.sealed.is_some())
            }
            Err(e) => {
                give_back(&capture);
                Err(self.checkpoint_failed(&mut w, e))
            }
        }
    }

    /// A checkpoint failed short of its commit point: a full disk pauses automatic checkpoints,
    /// anything else poisons the store. Returns the error, counted in STATS.
    pub(in crate::kernel) fn checkpoint_failed(
        &self,
        w: &mut Writer,
        e: KernelError,
    ) -> KernelError {
        w.tail_wait_timed_out = false;
        self.log_room_changed();
        let e = e.descriptors_told_apart();
        match &e {
            KernelError::DiskFull { .. } => {
                w.checkpoint_paused_until = Some(Instant::now() + CHECKPOINT_RETRY_AFTER_DISK_FULL);
            }
            // No descriptor left (an open failed, nothing half written): like a full disk, a
            // pause and a retry, never a poisoning (docs/reliability.md, "Descriptors").
            KernelError::OutOfDescriptors { .. } => {
                w.checkpoint_paused_until =
                    Some(Instant::now() + CHECKPOINT_RETRY_AFTER_DESCRIPTORS);
            }
            KernelError::Poisoned => return e,
            _ => {
                let path = match &e {
                    KernelError::Io { path, .. } => path.clone(),
                    _ => self.dir.clone(),
                };
                self.journal
                    .poison(PoisonCause::new("checkpoint", &path, &e));
            }
        }
        self.maintenance.record_failure(&e);
        e
    }

    /// Removes the files a checkpoint wrote before failing short of its commit point
    /// (`docs/durability.md`, "Checkpoint"), so a full disk does not fill further with orphans
    /// and appends stay in the old log file, which ends where the next frame continues.
    ///
    /// # Errors
    /// `Io` for a file that exists and could not be removed: the caller poisons the store (a
    /// stray `wal-<S+1>.log` would later hold frames its header does not start at).
    pub(in crate::kernel) fn undo_checkpoint_files(&self, created: &[PathBuf]) -> Result<()> {
        let storage = self.storage();
        for path in created {
            let tmp = PathBuf::from(format!("{}.tmp", path.display()));
            for p in [path, &tmp] {
                match storage.remove(p) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        return Err(KernelError::Io {
                            path: p.clone(),
                            source: e,
                        });
                    }
                    _ => {}
                }
            }
        }
        storage
            .sync_dir(&self.dir)
            .map_err(KernelError::io(&self.dir))
    }

    /// C0–C2 and the snapshot, under the writer mutex. `None`: nothing to checkpoint (nothing
    /// written and no segment changed since the last one).
    pub(in crate::kernel) fn capture(
        &self,
        w: &mut Writer,
        ask: CheckpointAsk,
    ) -> Result<Option<Capture>> {
        // C0: everything appended is durable; the checkpoint covers exactly that.
        let seq = self.journal.written();
        self.acknowledge(&Durability::Forced, seq)?;
        // Nothing written since the last checkpoint: only an index build's new segment list
        // is worth a checkpoint, which then replaces the file at the same sequence number (B3).
        // A purge's full checkpoint replaces a delta at the same number: the delta's base,
        // which the purge then removes, still holds what was deleted.
        let rewrite = seq == w.checkpoint_seq;
        let newest_is_delta = w.checkpoints.last().is_some_and(|c| c.delta_of.is_some());
        if rewrite
            && !w.segments.changed_since_checkpoint()
            && !(ask == CheckpointAsk::Full && newest_is_delta)
        {
            return Ok(None);
        }
        // C1: copy the live growing rows; C3 writes them as a segment under a new id, never
        // given again in this process even if this checkpoint fails.
        let growing = self.state.read().vectors.growing_rows();
        let sealed = (growing.live() > 0).then(|| {
            let entry = SegmentEntry::flat(w.next_segment_id, growing.live() as u64);
            w.next_segment_id += 1;
            entry
        });
        // C2: the log file that follows the checkpoint exists before the checkpoint does, so
        // a checkpoint at S without `wal-<S+1>.log` means a lost log file (R5).
        if self.journal.active().first_seq != seq + 1 {
            let path = self
                .dir
                .join(crate::kernel::log::writer::file_name(seq + 1));
            if let Err(e) = self.journal.rotate(seq + 1) {
                self.undo_checkpoint_files(std::slice::from_ref(&path))?;
                return Err(e);
            }
        }
        // Full or a delta ("Incremental checkpoints"); no slot changes while the writer mutex
        // is held, so the changed ids and the snapshot agree.
        let mut state = self.state.write();
        let delta_on = w.delta_base.filter(|base| {
            ask != CheckpointAsk::Full
                && base.seq < seq
                && state.table.changed().len() as f64
                    <= base.records as f64 * self.config.delta_max_share
        });
        let kind = match delta_on {
            Some(base) => CaptureKind::Delta {
                base_seq: base.seq,
                changed: state.table.changed().clone(),
            },
            None => CaptureKind::Full {
                taken: state.table.take_changed(),
            },
        };
        let records = state.table.snapshot();
        let state = parking_lot::RwLockWriteGuard::downgrade(state);
        Ok(Some(Capture {
            seq,
            // Under the writer mutex every appended frame is applied: `seq` is the last one.
            log_crc: self.running_crc.lock().at(seq),
            rewrite,
            next_id: w.next_id,
            segments: w.segments.entries().iter().copied().chain(sealed).collect(),
            growing,
            sealed,
            aux: checkpoint_aux(&state),
            records,
            log_bytes: w.log_bytes_since_checkpoint,
            kind,
            kept_full: w
                .delta_base
                .map(|base| base.seq)
                .filter(|_| ask != CheckpointAsk::Full),
        }))
    }

    /// C3–C4 with no lock held: the segment of the copied growing rows, then the checkpoint
    /// file, each durable; the checkpoint's rename is the commit point. Every file it creates
    /// is pushed to `created` first, for the caller to remove on failure. Returns the new
    /// segment, mapped, and the checkpoint's size.
    pub(in crate::kernel) fn write_checkpoint_files(
        &self,
        capture: &Capture,
        created: &mut Vec<PathBuf>,
    ) -> Result<(Option<amberdb_index::FlatSegment>, u64)> {
        let storage = self.storage();
        let dir = &self.dir;
        // Records an open left in a mapped checkpoint come into memory at the finish of the
        // checkpoint whose retention removes that file (`docs/architecture.md`, "Mapped
        // records"). Decoded here, with no lock held, that costs the finish next to nothing.
        capture.records.decode_mapped(|seq| capture.may_remove(seq));
        let mut segment = None;
        if let Some(entry) = &capture.sealed {
            let name = entry.file_name();
            created.push(dir.join(&name));
            let encoded = capture
                .growing
                .encode(self.config.vector_codes, self.identity.owner())
                .map_err(|e| internal("encoding the growing rows as a segment", e))?;
            crate::kernel::storage::write_atomic(storage, dir, &name, &encoded)
                .map_err(|source| io_error(dir.join(&name), source))?;
            drop(encoded);
            match segment_file::open(storage, dir, entry)? {
                amberdb_index::Sealed::Flat(flat) => segment = Some(flat),
                amberdb_index::Sealed::Ivf(_) => {
                    return Err(internal(
                        "reading back the growing rows' segment",
                        "it opened as an IVF segment",
                    ));
                }
            }
        }
        let bytes = match &capture.kind {
            CaptureKind::Full { .. } => ckpt_writer::encode(
                self.identity.owner(),
                capture.log_point(),
                capture.next_id,
                &capture.segments,
                &capture.aux,
                None,
                capture.records.to_write(),
            ),
            CaptureKind::Delta { base_seq, changed } => {
                // A changed id live now is written whole; one that is not is deleted.
                let (mut live, mut deleted) = (Vec::new(), Vec::new());
                for id in changed.iter() {
                    match capture.records.one_to_write(id) {
                        Some(r) => live.push(r),
                        None => deleted.push(id),
                    }
                }
                let delta = ckpt_format::Delta {
                    base_seq: *base_seq,
                    deleted,
                };
                ckpt_writer::encode(
                    self.identity.owner(),
                    capture.log_point(),
                    capture.next_id,
                    &capture.segments,
                    &capture.aux,
                    Some(&delta),
                    live.into_iter(),
                )
            }
        };
        let name = ckpt_format::file_name(capture.seq);
        if capture.rewrite {
            // The file at `seq` stays until the rename replaces it: only the temporary is ours
            // to remove on failure.
            created.push(dir.join(format!("{name}.tmp")));
        } else {
            created.push(dir.join(&name));
        }
        crate::kernel::storage::write_atomic(storage, dir, &name, &bytes)
            .map_err(|source| io_error(dir.join(&name), source))?;
        Ok((segment, bytes.len() as u64))
    }

    /// C5 and C6's choice under the writer mutex: the new segment replaces the growing rows
    /// it holds, the checkpoint becomes the newest, and retention picks what no retained
    /// checkpoint needs. Returns the files to remove.
    ///
    /// # Errors
    /// `Internal` if the segment does not fit the growing rows (a bug): the store is poisoned
    /// by the caller; the checkpoint on disk stands.
    pub(in crate::kernel) fn finish_checkpoint(
        &self,
        w: &mut Writer,
        capture: &Capture,
        segment: Option<amberdb_index::FlatSegment>,
    ) -> Result<Vec<PathBuf>> {
        // C5
        let sealed = match (capture.sealed, segment) {
            (Some(entry), Some(segment)) => Some((entry, segment)),
            (None, None) => None,
            _ => {
                return Err(internal(
                    "replacing the growing rows by their segment",
                    "a segment without its file, or a file without its segment",
                ));
            }
        };
        w.segments
            .sealed(
                &mut self.state.write().vectors,
                capture.growing.rows,
                sealed,
            )
            .map_err(|e| internal("replacing the growing rows by their segment", e))?;
        w.checkpoint_seq = capture.seq;
        self.checkpoint_seq.store(capture.seq, Ordering::Release);
        let named = Some(capture.segments.iter().map(|s| s.id).collect());
        let delta_of = capture.kind.delta_of();
        if delta_of.is_none() {
            w.delta_base = Some(DeltaBase {
                seq: capture.seq,
                records: capture.records.len() as u64,
            });
        }
        match w.checkpoints.last_mut() {
            Some(last) if last.seq == capture.seq => {
                last.segments = named;
                last.delta_of = delta_of;
            }
            _ => w.checkpoints.push(Retained {
                seq: capture.seq,
                segments: named,
                delta_of,
            }),
        }
        w.segments.checkpointed();
        w.log_bytes_since_checkpoint = w
            .log_bytes_since_checkpoint
            .saturating_sub(capture.log_bytes);
        w.checkpoint_paused_until = None;
        w.tail_wait_timed_out = false;
        self.log_room_changed();
        // C6, the choice; the removals follow with the writer mutex released.
        Ok(self.retire(w))
    }
}
