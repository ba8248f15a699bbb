//! The write path of a [`Db`] (`docs/durability.md`, "The write path", steps 3–7): prepare
//! and check under the read lock, append (step 4, [`Db::append`], the seam where a frame
//! enters the log), apply, then acknowledge (step 6, [`Db::acknowledge`], the seam where a
//! write is reported durable); accesses, group-commit batches, flush.

use super::core::*;
use crate::kernel::commit::PoisonCause;
use crate::kernel::config::SyncPolicy;
use crate::kernel::error::{KernelError, Result};
use crate::kernel::log::Op;
use crate::kernel::log::format::{
    FRAME_PREFIX, MAX_FRAME_LEN, TYPE_SKIP, encode_frame, fold_running_crc, stored_crc,
};
use crate::kernel::record::{MemoryId, Timestamp};
use crate::kernel::request::{RequestId, RequestRecord};
use crate::kernel::state::State;
use parking_lot::{Mutex, MutexGuard};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// The longest a write waits for a checkpoint at `log_tail_limit` (`Db::wait_for_log_room`).
pub(in crate::kernel) const LOG_TAIL_WAIT: Duration = Duration::from_secs(5);

/// How a write is acknowledged, said in its call (`docs/durability.md`, "Acknowledgement"),
/// as redb's `set_durability` says it for a transaction: [`Db::acknowledge`] reads it.
#[derive(Debug, Clone, Default)]
pub(crate) enum Durability {
    /// Returns once the store's `SyncPolicy` holds the write: under `Always`, after its fsync
    /// (shared with concurrent writers by group commit).
    #[default]
    Immediate,
    /// Returns once appended and applied; the batch the write belongs to waits for the fsync
    /// of all its writes once, at its end ([`PendingDurable::wait`]).
    Deferred(Arc<DeferredWrites>),
    /// Returns once the journal holds the write, whatever the `SyncPolicy`: a batch's end, a
    /// flush, a checkpoint's C0, a backup's K2.
    Forced,
}

/// A write's request id as a store handle carries it (`Db::commit`): the first operation
/// logged under it carries the mark.
#[derive(Debug)]
pub(crate) struct RequestMark {
    pub(crate) id: RequestId,
    pub(crate) fingerprint: u64,
    /// The position of the frame that carries the mark, once appended.
    marked: Mutex<Option<u64>>,
}

impl RequestMark {
    pub(crate) fn new(id: RequestId, fingerprint: u64) -> RequestMark {
        RequestMark {
            id,
            fingerprint,
            marked: Mutex::new(None),
        }
    }

    /// The position of the marked frame, if a write has logged one.
    pub(crate) fn marked(&self) -> Option<u64> {
        *self.marked.lock()
    }

    pub(crate) fn set_marked(&self, seq: u64) {
        *self.marked.lock() = Some(seq);
    }

    /// `op` with the mark as its batch's last member, for the frame at `seq`, and whether it
    /// carries it. An operation written alone (a re-embedding, a forget of archived records)
    /// carries none: a retry of its command runs it again, which those commands are made to
    /// survive (a re-embedding goes on from its stage, a forget finds nothing left to forget).
    pub(crate) fn mark(&self, op: Op, seq: u64, at: Timestamp) -> (Op, bool) {
        let mark = Op::Request(Box::new(RequestRecord {
            id: self.id,
            fingerprint: self.fingerprint,
            at,
            seq,
            reply: None,
        }));
        match op {
            Op::Batch(mut ops) => {
                ops.push(mark);
                (Op::Batch(ops), true)
            }
            op @ (Op::Reembed(_)
            | Op::ForgetArchived { .. }
            | Op::Model { .. }
            | Op::Request(_)) => (op, false),
            op => (Op::Batch(vec![op, mark]), true),
        }
    }
}

/// The writes of one deferred batch: the last sequence number they appended.
#[derive(Debug, Default)]
pub(crate) struct DeferredWrites {
    /// 0: the batch wrote nothing, so it has nothing to make durable and a poisoned store does
    /// not fail it.
    last_seq: AtomicU64,
}

/// The writes of a [`crate::Store::deferred_batch`] that are appended but perhaps not durable
/// yet.
#[must_use = "none of the batch's writes may be reported stored before `wait` returns Ok"]
pub struct PendingDurable {
    db: Arc<Db>,
    /// The last sequence number the batch's acknowledged writes appended; 0 for none.
    seq: u64,
}

impl std::fmt::Debug for PendingDurable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingDurable")
            .field("seq", &self.seq)
            .finish_non_exhaustive()
    }
}

impl PendingDurable {
    /// Returns once the batch's writes are durable (at once if it made none).
    ///
    /// # Errors
    /// `Poisoned` if the fsync fails: none of the batch's writes may be reported stored.
    pub fn wait(self) -> Result<()> {
        if self.seq == 0 {
            return Ok(());
        }
        self.db.acknowledge(&Durability::Forced, self.seq)
    }
}

/// A frame's body is at most `MAX_FRAME_LEN`: one atomic operation, refused before anything of
/// it is appended.
pub(in crate::kernel) fn frame_within_limit(frame: &[u8]) -> Result<()> {
    let body = frame.len().saturating_sub(FRAME_PREFIX);
    if body > MAX_FRAME_LEN as usize {
        return Err(KernelError::LimitExceeded {
            what: "bytes of one atomic operation (its log frame)",
            limit: MAX_FRAME_LEN as usize,
            got: body,
        });
    }
    Ok(())
}

pub(in crate::kernel) fn batch_sync_loop(db: &Weak<Db>, interval: std::time::Duration) {
    loop {
        std::thread::sleep(interval);
        let Some(db) = db.upgrade() else { return };
        if db.journal.is_poisoned() {
            return;
        }
        // A failure poisons the store; the next write reports it.
        let _ = db.acknowledge(&Durability::Forced, db.journal.written());
    }
}

impl Db {
    /// The write path, steps 3–7 of `docs/durability.md`: `prepare` turns the request into an
    /// operation against the current state (or a caller error), with what the caller gets once
    /// it is durable; no operation means nothing to write. It runs under the writer mutex and a
    /// read lock, so readers go on while it scans; the write lock is taken only to apply.
    /// `durability` says when it returns (step 6, [`Db::acknowledge`]). With a `request`, the
    /// first operation logged under it carries its mark in the same frame (`kernel::request`),
    /// so the write and the memory of it commit together.
    pub(crate) fn commit<T, E: From<KernelError>>(
        &self,
        durability: &Durability,
        request: Option<&RequestMark>,
        prepare: impl FnOnce(&NextIds, &State) -> Result<(Option<Op>, T), E>,
    ) -> Result<T, E> {
        let (seq, checkpoint_due, value) = {
            let mut w = self.writer.lock();
            self.wait_for_log_room(&mut w);
            // Accesses readers queued while the mutex was held go first: if appending them
            // fails and poisons the store, this write is refused before anything of it exists.
            self.drain_touches(&mut w);
            self.journal.check()?;
            // The first write under a request id carries its mark (`kernel::request`).
            let marking = request.filter(|r| r.marked().is_none());
            // step 3: prepare and check, under the read lock. Only the holder of the writer
            // mutex changes the state, so it is the same when the write lock is taken below.
            let (op, value, marked) = {
                let state = self.state.read();
                let (op, value) = prepare(&NextIds(w.next_id), &state)?;
                let Some(op) = op else {
                    return Ok(value);
                };
                self.check_id_range(&op)?;
                let (op, marked) = match marking {
                    Some(r) => r.mark(op, w.next_seq, self.now()),
                    None => (op, false),
                };
                if let Err(reason) = state.check(&op) {
                    // Nothing was written: the store stays as it was, and writable.
                    return Err(KernelError::Internal {
                        context: "checking an operation before it is logged",
                        reason: reason.to_owned(),
                    }
                    .into());
                }
                (op, value, marked)
            };
            // step 4: append.
            let seq = self.append(&mut w, &op)?;
            // step 5: apply, publish.
            self.apply(&mut w, seq, op)?;
            if let Some(r) = marking.filter(|_| marked) {
                r.set_marked(seq);
            }
            (seq, self.checkpoint_due(&w), value)
        };
        // step 6: durable as the write asked.
        self.acknowledge(durability, seq)?;
        // step 7: acknowledged. A due checkpoint is the maintenance thread's (never a reader's:
        // `touch` does not get here). Without the thread it runs here, after the write; its
        // failure is not this write's (the write is durable) and is logged, the reply stays
        // the write's own.
        if checkpoint_due {
            self.checkpoint_found_due();
        }
        Ok(value)
    }

    /// A partition's ids stay below its next partition's (`docs/cluster.md`, "Partitions, ids
    /// and stores"): 2^40 per partition.
    fn check_id_range(&self, op: &Op) -> Result<()> {
        let end = super::partition_base(self.config.partition) + (1 << super::PARTITION_SHIFT);
        match op.max_new_id() {
            Some(id) if self.config.partition > 0 && id >= end => Err(KernelError::LimitExceeded {
                what: "memory ids of one cluster partition",
                limit: 1 << super::PARTITION_SHIFT,
                got: usize::try_from(id - super::partition_base(self.config.partition))
                    .unwrap_or(usize::MAX),
            }),
            _ => Ok(()),
        }
    }

    /// Waits, the writer mutex released, while the log since the newest checkpoint holds
    /// `log_tail_limit` bytes and a due checkpoint can run, until one finishes; at most
    /// `LOG_TAIL_WAIT` (`docs/durability.md`, "Maintenance", a bounded log tail).
    pub(in crate::kernel) fn wait_for_log_room(&self, w: &mut MutexGuard<'_, Writer>) {
        let limit = self.config.log_tail_limit;
        let must_wait = |w: &Writer| {
            limit > 0
                && !MAINTAINING.get()
                && w.log_bytes_since_checkpoint >= limit
                && !w.tail_wait_timed_out
                && self.config.maintenance_thread
                && !self.maintenance.is_paused()
                && self.checkpoint_due(w)
                && self.journal.check().is_ok()
        };
        if !must_wait(w) {
            return;
        }
        let start = Instant::now();
        let deadline = start + LOG_TAIL_WAIT;
        while must_wait(w) {
            self.maintenance.wake();
            if self.log_room.wait_until(w, deadline).timed_out() {
                w.tail_wait_timed_out = must_wait(w);
                break;
            }
        }
        self.maintenance.record_write_wait(start.elapsed());
    }

    /// Wakes the writers `wait_for_log_room` holds: a checkpoint finished or failed, or
    /// maintenance was paused or resumed. Called with the writer mutex held or not.
    pub(crate) fn log_room_changed(&self) {
        self.log_room.notify_all();
    }

    /// Step 4, the seam where a frame enters the log: encodes and appends `op` as the next
    /// frame. Returns its sequence number. On a partition's owner the frame is also published
    /// (`Db::append_owned`); a partition replica's log grows only from its stream
    /// (`Db::apply_replicated`).
    ///
    /// # Errors
    /// `Invalid` on a partition replica that does not own the partition (nothing changed); as
    /// `append_frame`.
    pub(in crate::kernel) fn append(&self, w: &mut Writer, op: &Op) -> Result<u64> {
        if let Some(owner) = self.owner.read().clone() {
            return self.append_owned(w, &owner, op);
        }
        if self.state.read().cluster.is_replicated() {
            return Err(KernelError::Invalid {
                field: "write",
                reason: "this store is a partition replica: its log grows only from the partition's stream".into(),
            });
        }
        self.append_frame(w, op, &encode_frame(w.next_seq, op))
    }

    /// Appends `frame`, the encoded `op` for the next sequence number, and counts it.
    pub(in crate::kernel) fn append_frame(
        &self,
        w: &mut Writer,
        op: &Op,
        frame: &[u8],
    ) -> Result<u64> {
        let seq = w.next_seq;
        frame_within_limit(frame)?;
        match self.journal.append(seq, frame) {
            Ok(n) => w.log_bytes_since_checkpoint += n,
            Err(e) => {
                if matches!(e, KernelError::DiskFull { .. }) {
                    self.disk_full_refusals.fetch_add(1, Ordering::Relaxed);
                }
                return Err(e);
            }
        }
        if let Some(id) = op.max_new_id() {
            w.next_id = w.next_id.max(id + 1);
        }
        w.next_seq = seq + 1;
        let mut running = self.running_crc.lock();
        *running = RunningCrc {
            position: seq,
            crc: running.crc.map(|r| fold_running_crc(r, stored_crc(frame))),
            last_frame: (frame.get(FRAME_PREFIX) != Some(&TYPE_SKIP)).then(|| stored_crc(frame)),
        };
        Ok(seq)
    }

    /// Step 5: applies an appended, checked operation and publishes it. It cannot fail short
    /// of a bug; if it does, the state may be half changed, so the store is poisoned.
    pub(in crate::kernel) fn apply(&self, w: &mut Writer, seq: u64, op: Op) -> Result<()> {
        if op.deletes_records() {
            self.unpurged_since.lock().get_or_insert_with(Instant::now);
        }
        let switches = matches!(&op, Op::Reembed(r) if r.switch);
        let cancels =
            matches!(&op, Op::Reembed(r) if !r.switch && r.records.is_empty() && r.tags.is_empty());
        if cancels {
            // A dropped stage's vectors leave the files at the next purge.
            self.unpurged_since.lock().get_or_insert_with(Instant::now);
        }
        if switches {
            // The new vectors are all growing; the old segments are replaced (B4: their files
            // go once no retained checkpoint names them), and a purge removes the old vectors
            // from every file (`docs/durability.md`, "Re-embedding").
            w.segments.all_replaced();
            self.unpurged_since.lock().get_or_insert_with(Instant::now);
        }
        if let Err(reason) = self.state.write().apply_checked(op) {
            self.journal.poison(PoisonCause::new(
                "apply",
                &self.journal.active().path,
                reason,
            ));
            return Err(KernelError::Internal {
                context: "applying a logged operation",
                reason: reason.to_owned(),
            });
        }
        self.journal.set_written(seq);
        Ok(())
    }

    /// Counts an access of `ids` at `at`: a `Touch` frame, not waited for (access counts are
    /// bookkeeping, `docs/durability.md`, "Access counts"), and never waiting for a writer: when
    /// one holds the writer lock (a store's dedup may take milliseconds), the access is queued
    /// for whoever takes the lock next (the next write, access, checkpoint or flush), which
    /// appends it before its own work. Returns false when it could not be recorded (a
    /// full disk, a poisoned store); the read is answered all the same and
    /// `accesses_not_recorded` counts it.
    pub(crate) fn touch(&self, at: Timestamp, ids: Vec<MemoryId>) -> bool {
        // A replica's log grows only from its stream: its reads count no access here (an
        // owner's accesses are published, never waited for).
        if self.owner.read().is_none() && self.state.read().cluster.is_replicated() {
            return false;
        }
        if self.journal.check().is_err() {
            self.accesses_not_recorded.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        self.pending_touches.lock().push((at, ids));
        match self.writer.try_lock() {
            Some(mut w) => self.drain_touches(&mut w),
            None => true,
        }
    }

    /// Appends and applies the accesses waiting for the writer lock, each re-checked (a
    /// memory archived or deleted since its read is not counted). Returns false if any could
    /// not be recorded (each counted in `accesses_not_recorded`).
    pub(in crate::kernel) fn drain_touches(&self, w: &mut Writer) -> bool {
        let pending = std::mem::take(&mut *self.pending_touches.lock());
        let mut all = true;
        for (at, ids) in pending {
            let op = {
                let state = self.state.read();
                let ids: Vec<MemoryId> = ids
                    .into_iter()
                    .filter(|id| state.table.contains(*id))
                    .collect();
                if ids.is_empty() {
                    continue;
                }
                Op::Touch { at, ids }
            };
            let recorded = self.journal.check().is_ok()
                && self
                    .append(w, &op)
                    .and_then(|seq| self.apply(w, seq, op))
                    .inspect_err(|e| tracing::debug!(error = %e, "an access could not be recorded"))
                    .is_ok();
            if !recorded {
                self.accesses_not_recorded.fetch_add(1, Ordering::Relaxed);
                all = false;
            }
        }
        all
    }

    /// Step 6, the seam where a write is acknowledged, and the one place anything waits for
    /// the journal to hold frames (on a partition's owner, the stream too: `Db::replicated`): under `SyncPolicy::Always` an `Immediate` write waits for
    /// its fsync here and a `Deferred` one leaves it to its batch (`PendingDurable::wait`,
    /// which comes back here `Forced`); under `Batch` / `None` neither waits; a `Forced` wait
    /// always does. The cluster's journal acknowledges once the replicated log holds the frame
    /// (`docs/durability.md`, "Acknowledgement"; `docs/cluster.md`). A retry answered from
    /// the request table (`Store::begin_request`) comes here too, with its first attempt's
    /// position: a write is reported only once it is durable, whichever attempt reports it.
    pub(crate) fn acknowledge(&self, durability: &Durability, seq: u64) -> Result<()> {
        let always = self.config.sync == SyncPolicy::Always;
        let owner = self.owner.read().clone();
        match durability {
            Durability::Deferred(batch) => {
                if always || owner.is_some() {
                    batch.last_seq.fetch_max(seq, Ordering::AcqRel);
                }
                Ok(())
            }
            Durability::Immediate | Durability::Forced => {
                if always || matches!(durability, Durability::Forced) {
                    self.journal.acknowledge(seq)?;
                }
                match owner {
                    Some(owner) => self.replicated(&owner, seq),
                    None => Ok(()),
                }
            }
        }
    }

    /// What the writes of `batch` still need to become durable.
    pub(crate) fn pending(self: &Arc<Self>, batch: &DeferredWrites) -> PendingDurable {
        PendingDurable {
            db: Arc::clone(self),
            seq: batch.last_seq.load(Ordering::Acquire),
        }
    }

    /// Appends the accesses still waiting for the writer, then makes every write so far
    /// durable.
    pub(crate) fn flush(&self) -> Result<()> {
        {
            let mut w = self.writer.lock();
            if self.journal.check().is_ok() {
                self.drain_touches(&mut w);
            }
        }
        self.acknowledge(&Durability::Forced, self.journal.written())
    }
}
