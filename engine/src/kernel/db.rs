//! `Db`: one open database, the kernel's API to the layers above it.
//!
//! It owns the state (behind a read-write lock), the writer (log file, id and sequence
//! counters, behind a mutex), group commit and the store's lock file. Callers read with
//! [`Db::read`] and change the state only through [`Db::commit`]: a `prepare` closure that
//! turns a request into one logged operation.
//!
//! Guarantees (each tested in `tests/it`): under `SyncPolicy::Always` a commit that returns
//! `Ok` is durable and visible to every later read; each operation is one log frame, so after
//! any crash it is there whole or not at all; an operation is checked against the state before
//! it is appended, so a logged frame always applies; a failed append or fsync poisons the
//! store (writes refused until reopened, reads go on). Readers wait for no writer's `prepare`
//! (a store's dedup scans run under the read lock) and for no fsync: only for the apply of an
//! operation, which changes memory only. Reads may observe a write while its fsync is still in
//! flight (before it is acknowledged); see `docs/durability.md`, "Visibility".

use crate::kernel::backup;
use crate::kernel::checkpoint::{format as ckpt_format, writer as ckpt_writer};
use crate::kernel::commit::{GroupCommit, PoisonCause};
use crate::kernel::config::{DbConfig, SyncPolicy};
use crate::kernel::error::{EngineError, Result};
use crate::kernel::lexical::{self, LexicalBuild};
use crate::kernel::log::Op;
use crate::kernel::log::format::{FRAME_PREFIX, MAX_FRAME_LEN, encode_frame};
use crate::kernel::log::writer::LogWriter;
use crate::kernel::maintenance::{CheckpointRun, Maintenance, Removed};
use crate::kernel::record::{MemoryId, Timestamp};
use crate::kernel::recovery::{self, OpenReport, Retained};
use crate::kernel::segment_file::{self, SegmentEntry, SegmentKind};
use crate::kernel::state::State;
use crate::kernel::storage::{Storage, StorageLock};
use crate::kernel::table::{Lexical, PendingLexical};
use amberdb_embed::Embedder;
use parking_lot::{Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard};
use std::cell::Cell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

thread_local! {
    /// Set while this thread runs maintenance or holds the checkpoint mutex: its writes never
    /// wait for a checkpoint at `log_tail_limit`, which would be waiting for itself
    /// (`Db::wait_for_log_room`).
    static MAINTAINING: Cell<bool> = const { Cell::new(false) };
    /// Set inside `Db::deferred_batch` on this thread: acknowledged writes skip their own
    /// wait for durability, and the batch waits once at its end.
    static DEFERRED: Cell<bool> = const { Cell::new(false) };
    /// The last sequence number an acknowledged write of this thread's batch appended (0: the
    /// batch wrote nothing, so it has nothing to make durable and a poisoned store does not
    /// fail it).
    static DEFERRED_SEQ: Cell<u64> = const { Cell::new(0) };
}

/// How long automatic checkpoints pause after one failed for a full disk.
const CHECKPOINT_RETRY_AFTER_DISK_FULL: Duration = Duration::from_secs(10);
/// The longest a write waits for a checkpoint at `log_tail_limit` (`Db::wait_for_log_room`).
const LOG_TAIL_WAIT: Duration = Duration::from_secs(5);

/// Runs `f` with `MAINTAINING` set on this thread (restored even if `f` panics).
fn maintaining<T>(f: impl FnOnce() -> T) -> T {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            MAINTAINING.set(self.0);
        }
    }
    let _restore = Restore(MAINTAINING.replace(true));
    f()
}

/// What asked for a checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CheckpointAsk {
    /// The maintenance thread or a write found one due: only if still due, and not while
    /// another runs. A delta when one may be.
    IfDue,
    /// A caller (`checkpoint`, an index build): now, a delta when one may be.
    Now,
    /// A purge: now, and full, so that no older file is needed for what it holds.
    Full,
}

/// The full checkpoint the changed ids are counted from, which a delta applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DeltaBase {
    pub(crate) seq: u64,
    /// Its records.
    pub(crate) records: u64,
}

/// Whether an I/O error says the disk (or the user's quota) is full: a write that failed so
/// before its fsync is cut back and refused, and the store stays writable.
pub(crate) fn is_disk_full(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
    )
}

/// The ids the operation being prepared may assign: `nth(0)` is the next free one.
pub(crate) struct NextIds(u64);

impl NextIds {
    /// The `i`-th free id, counting from 0.
    pub(crate) fn nth(&self, i: u64) -> MemoryId {
        MemoryId(self.0 + i)
    }
}

/// What a checkpoint's capture took under the writer mutex, for C3–C4 to write with no lock
/// held (`docs/durability.md`, "Checkpoint").
struct Capture {
    seq: u64,
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
    /// Whether the file of the checkpoint at `seq` may be removed once this one is written:
    /// every checkpoint but the full one kept beside it, and this one's own sequence number
    /// when it writes that file again (`docs/architecture.md`, "Mapped records").
    fn may_remove(&self, seq: u64) -> bool {
        Some(seq) != self.kept_full || (self.rewrite && seq == self.seq)
    }
}

/// What a capture writes: every record, or those changed since a base.
enum CaptureKind {
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

fn internal(context: &'static str, e: impl std::fmt::Display) -> EngineError {
    EngineError::Internal {
        context,
        reason: e.to_string(),
    }
}

/// An I/O failure writing `path`: `DiskFull` for a full disk or quota.
pub(crate) fn io_error(path: PathBuf, source: std::io::Error) -> EngineError {
    if is_disk_full(&source) {
        EngineError::DiskFull { path, source }
    } else {
        EngineError::Io { path, source }
    }
}

pub(crate) struct Writer {
    log: LogWriter,
    next_seq: u64,
    next_id: u64,
    next_segment_id: u64,
    checkpoint_seq: u64,
    log_bytes_since_checkpoint: u64,
    /// The checkpoint files kept, oldest first, with the segments each names.
    checkpoints: Vec<Retained>,
    /// The sealed segments, in key order (the collection's order).
    segments: Vec<SegmentEntry>,
    /// Bumped at every change of `segments`; a checkpoint is written even at the same sequence
    /// number while it differs from `segments_checkpointed` (`docs/durability.md`, B3).
    segments_version: u64,
    /// `segments_version` as the newest checkpoint wrote it.
    segments_checkpointed: u64,
    /// Segments an index build replaced whose files are still on disk (B4).
    replaced: Vec<SegmentEntry>,
    /// For each segment a purge wrote, the id of the segment it descends from through purges:
    /// what a build planned before those purges names it by (`docs/durability.md`, B3).
    purged_from: HashMap<u64, u64>,
    /// Automatic checkpoints wait until then after one failed for a full disk.
    checkpoint_paused_until: Option<Instant>,
    /// A write's wait for a checkpoint at `log_tail_limit` timed out: writes go on without
    /// waiting until a checkpoint finishes or fails.
    tail_wait_timed_out: bool,
    /// The newest full checkpoint, when the table's changed ids count from it (`None`: the
    /// next checkpoint is full).
    delta_base: Option<DeltaBase>,
}

impl Writer {
    /// The segment `id` descends from through purges (itself when no purge wrote it).
    fn root_of(&self, id: u64) -> u64 {
        self.purged_from.get(&id).copied().unwrap_or(id)
    }

    /// Where the segments descending from `roots` (a build's run, B1) are now: adjacent and in
    /// the same order, or `None` when there are none or they are not (B3).
    fn descendants_of(&self, roots: &[u64]) -> Option<std::ops::Range<usize>> {
        let found: Vec<(usize, usize)> = self
            .segments
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

/// What one index build did (`Store::build_index`, STATS).
#[derive(Debug, Clone, PartialEq)]
pub struct IndexBuild {
    /// The new IVF segment's id.
    pub segment_id: u64,
    /// Its rows.
    pub rows: u64,
    /// The segments it replaced.
    pub replaced: usize,
    /// Its lists.
    pub nlist: usize,
    /// The lists a search probes by default.
    pub nprobe: u32,
    /// The mean recall@10 measured at `nprobe` on held-out rows.
    pub built_recall: f32,
    /// Wall time, gathering to checkpoint.
    pub seconds: f64,
}

/// What a purge did (`Store::purge`).
#[derive(Debug, Clone, PartialEq)]
pub struct Purge {
    /// Segments rewritten without their deleted rows (or dropped, when none was left).
    pub segments_rewritten: usize,
    /// Deleted rows whose vectors left the segment files.
    pub rows_dropped: u64,
    /// The files removed: replaced segments, older checkpoints, log files.
    pub removed: Removed,
    /// Canonical tags that no record of their user carries any more, gone with the deleted
    /// records (the purge's checkpoint no longer holds them).
    pub tags_forgotten: usize,
    /// Wall time.
    pub seconds: f64,
}

/// The index builds of one store: one at a time, in the background or asked for.
#[derive(Default)]
struct Indexing {
    /// A build is running (or a background one starting).
    running: AtomicBool,
    /// Set when the store closes: a running build gives up at its next check.
    stop: Arc<AtomicBool>,
    /// The background build thread, joined at close.
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    builds: AtomicU64,
    failures: AtomicU64,
    last: Mutex<Option<IndexBuild>>,
    last_error: Mutex<Option<String>>,
}

/// B1's choice: the run of sealed segments to index, and the id of the new one.
struct BuildPlan {
    run: std::ops::Range<usize>,
    /// The vectors' dimension.
    dim: usize,
    entries: Vec<SegmentEntry>,
    /// Each entry's root (`Writer::purged_from`): a purge during the build rewrites the entry,
    /// and B3 finds the rewritten one by it.
    roots: Vec<u64>,
    segments: Vec<amberdb_index::Sealed>,
    id: u64,
}

/// The run a build indexes (`docs/ivf.md`, "When a build runs"): the flat segments after the
/// last IVF segment once they hold `min_rows` rows (any rows when `min_rows` is 0), then, going
/// back, every IVF segment no larger than what the run holds so far, so segments merge like a
/// binary counter: each row is rebuilt O(log n) times and there are O(log n) segments.
pub(crate) fn build_run(
    segments: &[SegmentEntry],
    min_rows: u64,
) -> Option<std::ops::Range<usize>> {
    let first_flat = segments
        .iter()
        .rposition(|s| s.kind == SegmentKind::Ivf)
        .map_or(0, |i| i + 1);
    let tail = segments.get(first_flat..)?;
    let mut rows: u64 = tail.iter().map(|s| s.rows).sum();
    if tail.is_empty() || rows < min_rows.max(1) {
        return None;
    }
    let mut start = first_flat;
    while let Some(prev) = start.checked_sub(1).and_then(|i| segments.get(i)) {
        if prev.rows > rows {
            break;
        }
        rows += prev.rows;
        start -= 1;
    }
    Some(start..segments.len())
}

/// The kernel's counters, for `Stats`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Counters {
    pub(crate) sealed_segments: usize,
    pub(crate) growing_rows: usize,
    pub(crate) last_seq: u64,
    pub(crate) durable_seq: u64,
    pub(crate) checkpoint_seq: u64,
    pub(crate) log_fsyncs: u64,
    pub(crate) poison_cause: Option<PoisonCause>,
    pub(crate) disk_full_refusals: u64,
    pub(crate) accesses_not_recorded: u64,
}

/// How often (the store's clock) archive retention looks at the archived records' ages.
const ARCHIVE_AGE_CHECK_US: i64 = 60_000_000;

/// One open database.
pub(crate) struct Db {
    dir: PathBuf,
    config: DbConfig,
    state: RwLock<State>,
    writer: Mutex<Writer>,
    commit: GroupCommit,
    /// Accesses waiting for the writer lock, applied by whoever holds it next
    /// (`Db::touch`).
    pending_touches: Mutex<Vec<(Timestamp, Vec<MemoryId>)>>,
    /// Where writes wait at `log_tail_limit` for a checkpoint (with the writer mutex).
    log_room: Condvar,
    /// The newest checkpoint's sequence number, readable without the writer lock.
    checkpoint_seq: AtomicU64,
    disk_full_refusals: AtomicU64,
    accesses_not_recorded: AtomicU64,
    report: OpenReport,
    indexing: Indexing,
    /// The lexical indexes built after the open (R9).
    lexical: Arc<LexicalBuild>,
    /// One checkpoint at a time; taken before the writer mutex.
    checkpointing: Mutex<()>,
    /// When the oldest delete no purge has covered yet was applied (`docs/durability.md`,
    /// "Purge": the maintenance thread purges `purge_delay` after it).
    unpurged_since: Mutex<Option<Instant>>,
    /// When (the store's clock) archive retention last looked at the ages.
    archive_checked_at: Mutex<Option<Timestamp>>,
    maintenance: Maintenance,
    /// This database, for the background threads it starts (they hold it weakly).
    me: Weak<Db>,
    _lock: Box<dyn StorageLock>,
}

impl Db {
    /// Opens or creates the database in `dir` (`docs/durability.md`, "Recovery").
    pub(crate) fn open(dir: &Path, embedder: &dyn Embedder, config: DbConfig) -> Result<Arc<Db>> {
        let r = recovery::recover(dir, &*config.storage, embedder)?;
        // What a purge would remove is not remembered across a restart, so an open notes a
        // delete when the files may hold one (`docs/durability.md`, "Purge"): the replayed log
        // deleted records, a segment holds deleted rows, or an older checkpoint is retained
        // (it, or the log after it, may hold records deleted since).
        let unpurged = (r.replayed_deletes
            || r.checkpoints.len() > 1
            || !r.state.vectors.sealed_tombstones().is_empty())
        .then(Instant::now);
        let commit = GroupCommit::new(r.last_seq, Arc::clone(&r.log.file), r.log.path.clone());
        let db = Arc::new_cyclic(|me| Db {
            me: me.clone(),
            indexing: Indexing::default(),
            lexical: Arc::default(),
            checkpointing: Mutex::new(()),
            unpurged_since: Mutex::new(unpurged),
            archive_checked_at: Mutex::new(None),
            maintenance: Maintenance::default(),
            dir: dir.to_path_buf(),
            checkpoint_seq: AtomicU64::new(r.checkpoint_seq),
            writer: Mutex::new(Writer {
                log_bytes_since_checkpoint: r.log_bytes_after_checkpoint,
                log: r.log,
                next_seq: r.last_seq + 1,
                next_id: r.next_id,
                next_segment_id: r.next_segment_id,
                checkpoint_seq: r.checkpoint_seq,
                checkpoints: r.checkpoints,
                // Opened without a damaged segment (R4b): the next checkpoint names the
                // segments as they are now, even at the same sequence number (B3).
                segments_version: u64::from(!r.report.damaged_segments.is_empty()),
                segments: r.segments,
                segments_checkpointed: 0,
                replaced: r.replaced,
                purged_from: HashMap::new(),
                checkpoint_paused_until: None,
                tail_wait_timed_out: false,
                delta_base: r.delta_base,
            }),
            state: RwLock::new(r.state),
            commit,
            pending_touches: Mutex::new(Vec::new()),
            log_room: Condvar::new(),
            disk_full_refusals: AtomicU64::new(0),
            accesses_not_recorded: AtomicU64::new(0),
            report: r.report,
            _lock: r.lock,
            config,
        });
        if let SyncPolicy::Batch { interval } = db.config.sync {
            let weak = Arc::downgrade(&db);
            std::thread::Builder::new()
                .name("amberdb-batch-sync".into())
                .spawn(move || batch_sync_loop(&weak, interval))
                .map_err(EngineError::io(&db.dir))?;
        }
        if db.config.maintenance_thread {
            db.maintenance
                .start(Arc::downgrade(&db))
                .map_err(EngineError::io(&db.dir))?;
            // A tail long enough to be due (after a crash) is checkpointed now, not after the
            // next write: the next open replays less the sooner it lands.
            if db.checkpoint_due(&db.writer.lock()) {
                db.maintenance.wake();
            }
        }
        // A store that already holds enough flat rows (opened after a crash mid-build, or
        // made before IVF segments existed) indexes them now.
        db.start_background_build();
        lexical::start(&db, &db.lexical);
        Ok(db)
    }

    /// Waits until the lexical indexes built after the open are installed (R9); at once
    /// when they are. Keyword and hybrid searches call it before taking the state lock.
    pub(crate) fn wait_lexical(&self) {
        self.lexical.wait();
    }

    /// Whether the lexical indexes built after the open are installed.
    pub(crate) fn lexical_ready(&self) -> bool {
        self.lexical.is_done()
    }

    /// Installs a user's lexical indexes built after the open (`Table::install_lexical`).
    /// Takes only the state lock: they are derived, nothing durable changes.
    pub(crate) fn install_lexical(&self, pending: &PendingLexical, built: Lexical) {
        self.state.write().table.install_lexical(pending, built);
    }

    /// `Restoring` while records opened without their vectors wait for them (R4b): no
    /// checkpoint, purge or backup can be written until then.
    fn not_restoring(&self) -> Result<()> {
        match self.state.read().unindexed.len() {
            0 => Ok(()),
            left => Err(EngineError::Restoring { left }),
        }
    }

    /// Records still without a vector (R4b).
    pub(crate) fn unindexed(&self) -> usize {
        self.state.read().unindexed.len()
    }

    /// Gives unindexed records their vectors, computed from their texts by the store's
    /// embedder (R4b, step 5), under the writer mutex so no checkpoint is captured halfway;
    /// when the last is in, purges: a full checkpoint, the only one, and the damaged file
    /// gone.
    /// Returns how many were restored.
    pub(crate) fn restore_vectors(&self, vectors: Vec<(MemoryId, Vec<f32>)>) -> Result<usize> {
        // The last batch rebuilds the collection: no checkpoint or index swap in between, as
        // for a re-embedding's switch.
        let (restored, whole) = self.between_checkpoints(|| -> Result<(usize, bool)> {
            let mut w = self.writer.lock();
            let mut state = self.state.write();
            if state.unindexed.is_empty() {
                return Ok((0, false));
            }
            let (restored, rebuilt) =
                state
                    .restore_vectors(vectors)
                    .map_err(|reason| EngineError::Internal {
                        context: "restoring vectors",
                        reason: reason.into(),
                    })?;
            if rebuilt {
                // Every live vector is a growing row now; the segments are replaced (B4:
                // their files go once no retained checkpoint names them).
                let old = std::mem::take(&mut w.segments);
                w.replaced.extend(old);
                w.purged_from.clear();
                w.segments_version += 1;
            }
            Ok((restored, rebuilt || state.unindexed.is_empty()))
        })?;
        // Whole again: a purge writes the full checkpoint, reads it back and lets go of the
        // older ones, which name the damaged segment, and of that file (P4–P5). The vectors
        // stand whatever it does: a failed purge is logged and due again for the maintenance
        // thread, as after a re-embedding's switch.
        if whole && let Err(e) = self.purge() {
            tracing::warn!(error = %e, "the purge after restoring vectors failed; it runs again later");
            self.unpurged_since.lock().get_or_insert_with(Instant::now);
        }
        Ok(restored)
    }

    /// The maintenance thread's handle and counters.
    pub(crate) fn maintenance(&self) -> &Maintenance {
        &self.maintenance
    }

    /// What the maintenance thread runs when woken: a checkpoint if one is due, then a purge
    /// if the oldest delete not purged yet is `purge_delay` old (`docs/durability.md`,
    /// "Purge").
    pub(crate) fn run_due_maintenance(&self) {
        if self.commit.is_poisoned() || self.maintenance.is_paused() {
            return;
        }
        // Its writes (archive retention's) never wait for the checkpoint it runs itself.
        maintaining(|| {
            self.checkpoint_if_due();
            if let Err(e) = self.archive_retention_if_due() {
                tracing::warn!(error = %e, "archive retention failed; it is tried again at the next wake-up");
            }
            let due = self.config.purge_delay.is_some_and(|delay| {
                self.unpurged_since
                    .lock()
                    .is_some_and(|since| since.elapsed() >= delay)
            });
            if due && let Err(e) = self.purge() {
                tracing::warn!(error = %e, "the automatic purge failed; it is tried again after another delay");
            }
        });
    }

    /// Archive retention, when due: the count at every call, the ages once a minute of the
    /// store's clock (`docs/semantics.md`, "Archive retention").
    fn archive_retention_if_due(&self) -> Result<usize> {
        let r = self.config.archive_retention;
        if !r.is_set() {
            return Ok(0);
        }
        let now = self.now();
        let over = r
            .max_records
            .is_some_and(|max| self.state.read().table.archive_len() > max);
        let ages_due = r.max_age.is_some()
            && self
                .archive_checked_at
                .lock()
                .is_none_or(|at| now.0.saturating_sub(at.0) >= ARCHIVE_AGE_CHECK_US);
        if over || ages_due {
            self.apply_archive_retention()
        } else {
            Ok(0)
        }
    }

    /// Forgets the archived records archive retention lets go, now, in frames of at most
    /// `MAX_FORGET_IDS` ids. Returns how many.
    ///
    /// # Errors
    /// As any write (`Poisoned`, `Io`, `DiskFull`); what was forgotten before stays forgotten.
    pub(crate) fn apply_archive_retention(&self) -> Result<usize> {
        let r = self.config.archive_retention;
        let now = self.now();
        *self.archive_checked_at.lock() = Some(now);
        let max_age_us = r
            .max_age
            .map(|d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX));
        let doomed = self
            .state
            .read()
            .table
            .archive_to_forget(now, max_age_us, r.max_records);
        let mut forgotten = 0;
        for chunk in doomed.chunks(crate::kernel::log::format::MAX_FORGET_IDS) {
            forgotten += self.commit(|_, state| {
                // Still archived: a user's deletion may have taken some meanwhile.
                let ids: Vec<MemoryId> = chunk
                    .iter()
                    .copied()
                    .filter(|id| state.table.archived(*id).is_some())
                    .collect();
                let n = ids.len();
                Ok(((n > 0).then_some(Op::ForgetArchived { ids }), n))
            })?;
        }
        if forgotten > 0 {
            tracing::info!(forgotten, "archive retention forgot archived records");
            self.maintenance.record_forgotten(forgotten as u64);
        }
        Ok(forgotten)
    }

    /// How long the oldest delete not purged yet has waited.
    pub(crate) fn unpurged_for(&self) -> Option<Duration> {
        self.unpurged_since.lock().map(|since| since.elapsed())
    }

    /// Stops the background work (maintenance, index builds, the lexical build after the
    /// open) and waits for it (at close).
    pub(crate) fn stop_background(&self) {
        self.maintenance.stop();
        self.stop_indexing();
        self.lexical.stop();
    }

    /// The state, for reading. Held briefly: a writer's apply waits for it.
    pub(crate) fn read(&self) -> RwLockReadGuard<'_, State> {
        self.state.read()
    }

    /// The store's clock.
    pub(crate) fn now(&self) -> Timestamp {
        (self.config.clock)()
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    pub(crate) fn open_report(&self) -> &OpenReport {
        &self.report
    }

    pub(crate) fn storage(&self) -> &dyn Storage {
        &*self.config.storage
    }

    /// Bytes of the store's files (logs, checkpoints, segments, identity).
    pub(crate) fn bytes_on_disk(&self) -> u64 {
        let storage = self.storage();
        storage
            .list(&self.dir)
            .unwrap_or_default()
            .iter()
            .filter_map(|n| storage.len(&self.dir.join(n)).ok())
            .sum()
    }

    /// The kernel's counters, without waiting for any writer.
    pub(crate) fn counters(&self) -> Counters {
        let state = self.state.read();
        Counters {
            sealed_segments: state.vectors.sealed().len(),
            growing_rows: state.vectors.growing_len(),
            last_seq: self.commit.written(),
            durable_seq: self.commit.durable(),
            checkpoint_seq: self.checkpoint_seq.load(Ordering::Acquire),
            log_fsyncs: self.commit.fsyncs(),
            poison_cause: self.commit.cause(),
            disk_full_refusals: self.disk_full_refusals.load(Ordering::Relaxed),
            accesses_not_recorded: self.accesses_not_recorded.load(Ordering::Relaxed),
        }
    }

    /// The write path, steps 3–7 of `docs/durability.md`: `prepare` turns the request into an
    /// operation against the current state (or a caller error), with what the caller gets once
    /// it is durable; no operation means nothing to write. It runs under the writer mutex and a
    /// read lock, so readers go on while it scans; the write lock is taken only to apply.
    pub(crate) fn commit<T>(
        &self,
        prepare: impl FnOnce(&NextIds, &State) -> Result<(Option<Op>, T)>,
    ) -> Result<T> {
        let (seq, checkpoint_due, value) = {
            let mut w = self.writer.lock();
            self.wait_for_log_room(&mut w);
            // Accesses readers queued while the mutex was held go first: if appending them
            // fails and poisons the store, this write is refused before anything of it exists.
            self.drain_touches(&mut w);
            self.commit.check()?;
            // step 3: prepare and check, under the read lock. Only the holder of the writer
            // mutex changes the state, so it is the same when the write lock is taken below.
            let (op, value) = {
                let state = self.state.read();
                let (op, value) = prepare(&NextIds(w.next_id), &state)?;
                let Some(op) = op else {
                    return Ok(value);
                };
                if let Err(reason) = state.check(&op) {
                    // Nothing was written: the store stays as it was, and writable.
                    return Err(EngineError::Internal {
                        context: "checking an operation before it is logged",
                        reason: reason.to_owned(),
                    });
                }
                (op, value)
            };
            // step 4: append.
            let seq = self.append(&mut w, &op)?;
            // step 5: apply, publish.
            self.apply(&mut w, seq, op)?;
            (seq, self.checkpoint_due(&w), value)
        };
        // step 6: durability per policy (inside `durable_batch`, once at the batch's end).
        if self.config.sync == SyncPolicy::Always {
            if DEFERRED.get() {
                DEFERRED_SEQ.set(DEFERRED_SEQ.get().max(seq));
            } else {
                self.commit.wait_durable(seq)?;
            }
        }
        // step 7: acknowledged. A due checkpoint is the maintenance thread's (never a reader's:
        // `touch` does not get here). Without the thread it runs here, after the write; its
        // failure is not this write's (the write is durable) and is logged, the reply stays
        // the write's own.
        if checkpoint_due {
            self.checkpoint_found_due();
        }
        Ok(value)
    }

    /// Waits, the writer mutex released, while the log since the newest checkpoint holds
    /// `log_tail_limit` bytes and a due checkpoint can run, until one finishes; at most
    /// `LOG_TAIL_WAIT` (`docs/durability.md`, "Maintenance", a bounded log tail).
    fn wait_for_log_room(&self, w: &mut MutexGuard<'_, Writer>) {
        let limit = self.config.log_tail_limit;
        let must_wait = |w: &Writer| {
            limit > 0
                && !MAINTAINING.get()
                && w.log_bytes_since_checkpoint >= limit
                && !w.tail_wait_timed_out
                && self.config.maintenance_thread
                && !self.maintenance.is_paused()
                && self.checkpoint_due(w)
                && self.commit.check().is_ok()
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

    /// Step 4: encodes and appends `op` as the next frame. Returns its sequence number.
    fn append(&self, w: &mut Writer, op: &Op) -> Result<u64> {
        let seq = w.next_seq;
        let frame = encode_frame(seq, op);
        let body = frame.len() - FRAME_PREFIX;
        if body > MAX_FRAME_LEN as usize {
            return Err(EngineError::LimitExceeded {
                what: "bytes of one atomic operation (its log frame)",
                limit: MAX_FRAME_LEN as usize,
                got: body,
            });
        }
        match w.log.append_frame(&frame) {
            Ok(n) => w.log_bytes_since_checkpoint += n,
            Err(source) => return Err(self.append_failed(w, source)),
        }
        if let Some(id) = op.max_new_id() {
            w.next_id = w.next_id.max(id + 1);
        }
        w.next_seq = seq + 1;
        Ok(seq)
    }

    /// Step 5: applies an appended, checked operation and publishes it. It cannot fail short
    /// of a bug; if it does, the state may be half changed, so the store is poisoned.
    fn apply(&self, w: &mut Writer, seq: u64, op: Op) -> Result<()> {
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
            let old = std::mem::take(&mut w.segments);
            w.replaced.extend(old);
            w.purged_from.clear();
            w.segments_version += 1;
            self.unpurged_since.lock().get_or_insert_with(Instant::now);
        }
        if let Err(reason) = self.state.write().apply_checked(op) {
            self.commit
                .poison(PoisonCause::new("apply", &w.log.path, reason));
            return Err(EngineError::Internal {
                context: "applying a logged operation",
                reason: reason.to_owned(),
            });
        }
        self.commit.set_written(seq);
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
        if self.commit.check().is_err() {
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
    fn drain_touches(&self, w: &mut Writer) -> bool {
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
            let recorded = self.commit.check().is_ok()
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

    /// Step 4 failed. An append that failed for a full disk wrote nothing durable and was never
    /// acknowledged: its partial frame is cut back and the store stays writable (`DiskFull`).
    /// Any other failure, or a cut that fails, may leave a partial frame that a later append
    /// would bury mid-file, so it poisons the store (`docs/durability.md` step 4).
    fn append_failed(&self, w: &Writer, source: std::io::Error) -> EngineError {
        let path = w.log.path.clone();
        if is_disk_full(&source) {
            match self.storage().truncate(&path, w.log.bytes) {
                Ok(()) => {
                    self.disk_full_refusals.fetch_add(1, Ordering::Relaxed);
                    return EngineError::DiskFull { path, source };
                }
                Err(cut) => {
                    self.commit.poison(PoisonCause::new(
                        "append",
                        &path,
                        format!("{source}; cutting the partial frame back failed: {cut}"),
                    ));
                    return EngineError::Io { path, source };
                }
            }
        }
        self.commit
            .poison(PoisonCause::new("append", &path, &source));
        EngineError::Io { path, source }
    }

    fn checkpoint_due(&self, w: &Writer) -> bool {
        (w.log_bytes_since_checkpoint >= self.config.checkpoint_bytes
            || self.state.read().vectors.growing_len() >= self.config.seal_rows)
            && w.checkpoint_paused_until
                .is_none_or(|t| Instant::now() >= t)
    }

    /// Step 7: a checkpoint is due. The maintenance thread runs it, or this thread, after the
    /// write it follows, when the store has none (`docs/durability.md`, "Maintenance").
    fn checkpoint_found_due(&self) {
        if self.config.maintenance_thread {
            self.maintenance.wake();
        } else if !self.maintenance.is_paused() {
            self.checkpoint_if_due();
        }
    }

    /// Checkpoints if the thresholds are still crossed once the writer lock is held again
    /// (another writer may have checkpointed in between). A failure is logged and counted, not
    /// returned: no client asked for this checkpoint.
    fn checkpoint_if_due(&self) {
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
    fn checkpoint_under_lock(&self, only_if_due: bool) -> Result<()> {
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
    fn checkpoint_holding(&self, ask: CheckpointAsk) -> Result<bool> {
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
            self.commit.check()?;
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
    fn checkpoint_failed(&self, w: &mut Writer, e: EngineError) -> EngineError {
        w.tail_wait_timed_out = false;
        self.log_room_changed();
        match &e {
            EngineError::DiskFull { .. } => {
                w.checkpoint_paused_until = Some(Instant::now() + CHECKPOINT_RETRY_AFTER_DISK_FULL);
            }
            EngineError::Poisoned => return e,
            _ => {
                let path = match &e {
                    EngineError::Io { path, .. } => path.clone(),
                    _ => self.dir.clone(),
                };
                self.commit
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
    fn undo_checkpoint_files(&self, created: &[PathBuf]) -> Result<()> {
        let storage = self.storage();
        for path in created {
            let tmp = PathBuf::from(format!("{}.tmp", path.display()));
            for p in [path, &tmp] {
                match storage.remove(p) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        return Err(EngineError::Io {
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
            .map_err(EngineError::io(&self.dir))
    }

    /// C0–C2 and the snapshot, under the writer mutex. `None`: nothing to checkpoint (nothing
    /// written and no segment changed since the last one).
    fn capture(&self, w: &mut Writer, ask: CheckpointAsk) -> Result<Option<Capture>> {
        // C0: everything appended is durable; the checkpoint covers exactly that.
        let seq = self.commit.written();
        self.commit.wait_durable(seq)?;
        // Nothing written since the last checkpoint: only an index build's new segment list
        // is worth a checkpoint, which then replaces the file at the same sequence number (B3).
        // A purge's full checkpoint replaces a delta at the same number: the delta's base,
        // which the purge then removes, still holds what was deleted.
        let rewrite = seq == w.checkpoint_seq;
        let newest_is_delta = w.checkpoints.last().is_some_and(|c| c.delta_of.is_some());
        if rewrite
            && w.segments_version == w.segments_checkpointed
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
        if w.log.first_seq != seq + 1 {
            let path = self
                .dir
                .join(crate::kernel::log::writer::file_name(seq + 1));
            let log = match LogWriter::create(self.storage(), &self.dir, seq + 1) {
                Ok(log) => log,
                Err(source) => {
                    self.undo_checkpoint_files(std::slice::from_ref(&path))?;
                    return Err(io_error(path, source));
                }
            };
            self.commit
                .set_file(Arc::clone(&log.file), log.path.clone());
            w.log = log;
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
            rewrite,
            next_id: w.next_id,
            segments: w.segments.iter().copied().chain(sealed).collect(),
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
    fn write_checkpoint_files(
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
                .encode(self.config.vector_codes)
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
                capture.seq,
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
                    capture.seq,
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
    fn finish_checkpoint(
        &self,
        w: &mut Writer,
        capture: &Capture,
        segment: Option<amberdb_index::FlatSegment>,
    ) -> Result<Vec<PathBuf>> {
        // C5
        self.state
            .write()
            .vectors
            .seal_growing_prefix(capture.growing.rows, segment)
            .map_err(|e| internal("replacing the growing rows by their segment", e))?;
        if let Some(entry) = capture.sealed {
            w.segments.push(entry);
            w.segments_version += 1;
        }
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
        w.segments_checkpointed = w.segments_version;
        w.log_bytes_since_checkpoint = w
            .log_bytes_since_checkpoint
            .saturating_sub(capture.log_bytes);
        w.checkpoint_paused_until = None;
        w.tail_wait_timed_out = false;
        self.log_room_changed();
        // C6, the choice; the removals follow with the writer mutex released.
        Ok(self.retire(w))
    }

    /// Brings into memory the records an open left in a checkpoint about to be removed
    /// (`docs/architecture.md`, "Mapped records"), so that no slot keeps a removed file's
    /// blocks (and any deleted text in them) on the disk; before the removal, with the
    /// checkpoint mutex held (no other checkpoint or purge runs) and the writer mutex not.
    /// The checkpoint written just before decoded them into their cells
    /// (`write_checkpoint_files`), but for chunks a write copied since its capture: those
    /// are decoded here a chunk at a time under the read lock, so that the write lock, which
    /// stops reads, is held for references only. `replaced`: the sequence number of a
    /// checkpoint file that a new one at the same number has just replaced.
    fn let_go(&self, retired: &[PathBuf], replaced: Option<u64>) {
        let seqs: Vec<u64> = retired
            .iter()
            .filter_map(|p| ckpt_format::parse_file_name(p.file_name()?.to_str()?))
            .chain(replaced)
            .collect();
        let files = self.state.read().table.mapped_in(&seqs);
        if files.is_empty() {
            return;
        }
        let mut chunk = 0;
        while self.state.read().table.decode_mapped_chunk(&files, chunk) {
            chunk += 1;
        }
        self.state.write().table.materialize(&seqs);
    }

    /// C6's choice, under the writer mutex (`docs/durability.md`, "Retention"): the two newest
    /// full checkpoints stay, and the newest delta on the newer of them, with every segment
    /// any of them names and every log file from the older full one on; the files of
    /// everything else are returned, to be removed with the writer mutex released
    /// (`remove_retired`).
    fn retire(&self, w: &mut Writer) -> Vec<PathBuf> {
        let mut retired = Vec::new();
        let fulls: Vec<u64> = w
            .checkpoints
            .iter()
            .filter(|c| c.delta_of.is_none())
            .map(|c| c.seq)
            .collect();
        let kept_fulls = fulls.get(fulls.len().saturating_sub(2)..).unwrap_or(&[]);
        let newest_full = kept_fulls.last().copied();
        let kept_delta = w
            .checkpoints
            .iter()
            .rev()
            .find(|c| c.delta_of.is_some() && c.delta_of == newest_full)
            .map(|c| c.seq);
        w.checkpoints.retain(|c| {
            let keep = kept_fulls.contains(&c.seq) || Some(c.seq) == kept_delta;
            if !keep {
                retired.push(self.dir.join(ckpt_format::file_name(c.seq)));
            }
            keep
        });
        if let [older, _] = kept_fulls {
            retired.extend(self.retire_logs_before(w, *older));
        }
        // B4: replaced segments that no retained checkpoint names (none while a retained
        // checkpoint's list is unknown).
        if w.checkpoints.iter().all(|c| c.segments.is_some()) {
            let named: std::collections::HashSet<u64> = w
                .checkpoints
                .iter()
                .flat_map(|c| c.segments.iter().flatten().copied())
                .chain(w.segments.iter().map(|s| s.id))
                .collect();
            w.replaced.retain(|entry| {
                let keep = named.contains(&entry.id);
                if !keep {
                    retired.push(self.dir.join(entry.file_name()));
                }
                keep
            });
        }
        retired
    }

    /// The log files whose frames all precede the checkpoint at `seq`, oldest first: a file
    /// goes when the next one starts at or before `seq + 1`.
    fn retire_logs_before(&self, w: &Writer, seq: u64) -> Vec<PathBuf> {
        let mut logs: Vec<u64> = self
            .storage()
            .list(&self.dir)
            .unwrap_or_default()
            .iter()
            .filter_map(|n| crate::kernel::log::writer::parse_file_name(n))
            .collect();
        logs.sort_unstable();
        logs.windows(2)
            .filter(|pair| pair[1] <= seq + 1 && pair[0] != w.log.first_seq)
            .map(|pair| {
                self.dir
                    .join(crate::kernel::log::writer::file_name(pair[0]))
            })
            .collect()
    }

    /// C6's removals, with no lock a writer needs. A file that cannot be removed is logged and
    /// left: the next checkpoint's retention (log and checkpoint files) or the next open
    /// (orphan segments, R4) removes it; the checkpoint stands.
    fn remove_retired(&self, retired: &[PathBuf]) -> Removed {
        let storage = self.storage();
        let mut removed = Removed::default();
        // Log files come oldest first; after one that stays, the later ones stay too, so the
        // log files left run without a gap (`amberdb check` and recovery read them in order).
        let mut log_kept = false;
        for path in retired {
            let is_log = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(crate::kernel::log::writer::parse_file_name)
                .is_some();
            if is_log && log_kept {
                continue;
            }
            let len = storage.len(path).unwrap_or(0);
            match storage.remove(path) {
                Ok(()) => {
                    removed.files += 1;
                    removed.bytes += len;
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    log_kept |= is_log;
                    tracing::warn!(path = %path.display(), error = %e, "retention could not remove a file");
                }
            }
        }
        if !retired.is_empty()
            && let Err(e) = storage.sync_dir(&self.dir)
        {
            tracing::warn!(error = %e, "retention could not sync the directory");
        }
        self.maintenance.record_removed(removed);
        removed
    }

    /// Starts a background index build if one is due and none is running
    /// (`docs/durability.md`, B1–B4). The thread holds the database weakly: a store that closes
    /// meanwhile is not kept open by it, and it gives up at its next check.
    fn start_background_build(&self) {
        let min_rows = self.config.index.min_rows;
        if min_rows == 0 || self.indexing.stop.load(Ordering::Acquire) {
            return;
        }
        let due = build_run(&self.writer.lock().segments, min_rows as u64).is_some();
        if !due || self.indexing.running.swap(true, Ordering::AcqRel) {
            return;
        }
        // Spawned under the slot's lock, after checking `stop` again: `stop_indexing` sets
        // `stop` first and then takes the slot, so it joins every thread started before it.
        let mut slot = self.indexing.thread.lock();
        if self.indexing.stop.load(Ordering::Acquire) {
            self.indexing.running.store(false, Ordering::Release);
            return;
        }
        let weak = self.me.clone();
        let spawned = std::thread::Builder::new()
            .name("amberdb-index".into())
            .spawn(move || {
                crate::kernel::maintenance::lower_priority();
                let built = background_build(&weak);
                if let Some(db) = weak.upgrade() {
                    db.indexing.running.store(false, Ordering::Release);
                    if built {
                        // Another may be due: the segments sealed while this one ran, or the
                        // ones that replaced a stale build's.
                        db.start_background_build();
                    }
                }
            });
        match spawned {
            Ok(handle) => *slot = Some(handle),
            Err(e) => {
                self.indexing.running.store(false, Ordering::Release);
                tracing::warn!(error = %e, "the index build thread could not start");
            }
        }
    }

    /// Builds one IVF segment now, waiting for a running build first. `force`: index the flat
    /// segments whatever their size. `Ok(None)` when there is nothing to index.
    ///
    /// # Errors
    /// `Poisoned`, `Io`, `DiskFull`, `Internal`; the store is unchanged by a failed build.
    pub(crate) fn build_index(&self, force: bool) -> Result<Option<IndexBuild>> {
        while self.indexing.running.swap(true, Ordering::AcqRel) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let min_rows = if force {
            0
        } else {
            self.config.index.min_rows as u64
        };
        let result = self.plan_build(min_rows).map_or(Ok(None), |plan| {
            let start = Instant::now();
            let (keys, vectors) = self.gather(&plan);
            let built = self.train(&keys, &vectors, &plan);
            drop(vectors);
            self.install(plan, keys.len(), built, start).map(Some)
        });
        self.indexing.running.store(false, Ordering::Release);
        self.record_build(&result);
        result
    }

    fn record_build(&self, result: &Result<Option<IndexBuild>>) {
        match result {
            Ok(Some(b)) => {
                self.indexing.builds.fetch_add(1, Ordering::Relaxed);
                *self.indexing.last.lock() = Some(b.clone());
                tracing::info!(
                    segment = b.segment_id,
                    rows = b.rows,
                    nlist = b.nlist,
                    nprobe = b.nprobe,
                    recall = b.built_recall,
                    seconds = b.seconds,
                    "index built"
                );
            }
            Ok(None) | Err(EngineError::Cancelled) => {}
            Err(e) => {
                self.indexing.failures.fetch_add(1, Ordering::Relaxed);
                *self.indexing.last_error.lock() = Some(e.to_string());
                tracing::warn!(error = %e, "index build failed; the store is unchanged");
            }
        }
    }

    /// B1: the run to index, its segments (shared maps) and a new segment id.
    fn plan_build(&self, min_rows: u64) -> Option<BuildPlan> {
        let mut w = self.writer.lock();
        let run = build_run(&w.segments, min_rows)?;
        let state = self.state.read();
        let segments = state.vectors.sealed();
        if segments.len() != w.segments.len() {
            return None;
        }
        let entries = w.segments.get(run.clone())?.to_vec();
        let plan = BuildPlan {
            dim: state.vectors.dim(),
            roots: entries.iter().map(|e| w.root_of(e.id)).collect(),
            entries,
            segments: segments.get(run.clone())?.to_vec(),
            run,
            id: w.next_segment_id,
        };
        w.next_segment_id += 1;
        Some(plan)
    }

    /// B2, first half: the run's rows live now, a segment at a time under the read lock.
    fn gather(&self, plan: &BuildPlan) -> (Vec<u64>, Vec<f32>) {
        let rows: usize = plan.segments.iter().map(amberdb_index::Sealed::len).sum();
        let mut keys = Vec::with_capacity(rows);
        let mut vectors = Vec::with_capacity(rows * plan.dim);
        for seg in &plan.segments {
            let state = self.state.read();
            for (row, &key) in seg.keys().iter().enumerate() {
                if state.vectors.contains(key)
                    && let Some(v) = seg.vector(row)
                {
                    keys.push(key);
                    vectors.extend_from_slice(v);
                }
            }
        }
        (keys, vectors)
    }

    /// B2, second half: the lists and the nprobe, on the build's own threads.
    fn train(
        &self,
        keys: &[u64],
        vectors: &[f32],
        plan: &BuildPlan,
    ) -> Result<amberdb_index::ivf::Built> {
        train_segment(
            keys,
            vectors,
            plan.dim,
            &self.config.index,
            plan.id,
            &self.indexing.stop,
        )
    }

    /// B2's file, then B3 and the checkpoint. The file is removed again if anything fails
    /// before the swap.
    fn install(
        &self,
        plan: BuildPlan,
        rows: usize,
        built: Result<amberdb_index::ivf::Built>,
        start: Instant,
    ) -> Result<IndexBuild> {
        let built = built?;
        let storage = self.storage();
        let entry = SegmentEntry {
            id: plan.id,
            rows: rows as u64,
            kind: SegmentKind::Ivf,
        };
        let name = entry.file_name();
        let path = self.dir.join(&name);
        let discard = |e: EngineError| {
            for p in [path.clone(), self.dir.join(format!("{name}.tmp"))] {
                let _ = storage.remove(&p);
            }
            let _ = storage.sync_dir(&self.dir);
            e
        };
        crate::kernel::storage::write_atomic(storage, &self.dir, &name, &built.bytes).map_err(
            |source| {
                discard(if is_disk_full(&source) {
                    EngineError::DiskFull {
                        path: path.clone(),
                        source,
                    }
                } else {
                    EngineError::Io {
                        path: path.clone(),
                        source,
                    }
                })
            },
        )?;
        let Ok(amberdb_index::Sealed::Ivf(ivf)) = segment_file::open(storage, &self.dir, &entry)
        else {
            return Err(discard(EngineError::Internal {
                context: "opening the IVF segment a build wrote",
                reason: "it does not read back as an IVF segment".into(),
            }));
        };
        // B3: the swap, then a checkpoint that names the new segment, both under the
        // checkpoint mutex (taken before the writer mutex, as every checkpoint takes them).
        let turn = self.checkpointing.lock();
        let mut w = self.writer.lock();
        if let Err(e) = self.commit.check() {
            return Err(discard(e));
        }
        // The run as it is now: the planned segments, or what purges rewrote them into.
        let Some(run) = w.descendants_of(&plan.roots) else {
            return Err(discard(EngineError::Internal {
                context: "swapping in an IVF segment",
                reason: "the segments it replaces were replaced during the build".into(),
            }));
        };
        let swapped = self
            .state
            .write()
            .vectors
            .absorb_run(run.clone(), ivf.into());
        let absorbed = match swapped {
            Ok((_, absorbed)) => absorbed,
            Err(e) => {
                return Err(discard(EngineError::Internal {
                    context: "swapping in an IVF segment",
                    reason: e.to_string(),
                }));
            }
        };
        let replaced: Vec<SegmentEntry> = w.segments.splice(run, [entry]).collect();
        for r in &replaced {
            w.purged_from.remove(&r.id);
        }
        w.replaced.extend(replaced);
        w.segments_version += 1;
        drop(w);
        if absorbed > 0 {
            // Rows a purge dropped during the build, back under tombstones: deleted at least a
            // purge ago, so due now (B3).
            let due = Instant::now()
                .checked_sub(self.config.purge_delay.unwrap_or_default())
                .unwrap_or_else(Instant::now);
            let mut since = self.unpurged_since.lock();
            *since = Some(since.map_or(due, |s| s.min(due)));
        }
        // The swap has happened: the build stands whatever the checkpoint does. A failed
        // checkpoint poisons the store or pauses checkpoints as any does
        // (`checkpoint_holding`), and the next one names the new segment; reporting the build
        // failed would say the store is unchanged when it is not.
        if let Err(e) = self.checkpoint_holding(CheckpointAsk::Now) {
            tracing::warn!(error = %e, "the checkpoint after an index build failed; the next one names the segment");
        }
        drop(turn);
        Ok(IndexBuild {
            segment_id: entry.id,
            rows: entry.rows,
            replaced: plan.entries.len(),
            nlist: built.nlist,
            nprobe: built.nprobe,
            built_recall: built.built_recall,
            seconds: start.elapsed().as_secs_f64(),
        })
    }

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
        let result = self.purge_holding(start, &mut noted);
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
    fn purge_holding(&self, start: Instant, noted: &mut Option<Instant>) -> Result<Purge> {
        // P1: the segments holding deleted rows, and the rows deleted now.
        let plan = {
            let mut w = self.writer.lock();
            self.commit.check()?;
            self.not_restoring()?;
            // Every delete applied so far is covered from here on; later ones note again.
            *noted = self.unpurged_since.lock().take();
            let state = self.state.read();
            let plan: Vec<_> = state
                .vectors
                .sealed_tombstones()
                .into_iter()
                .filter_map(|(i, dead)| {
                    let entry = *w.segments.get(i)?;
                    Some((i, entry, state.vectors.sealed().get(i)?.clone(), dead))
                })
                .collect();
            drop(state);
            plan.into_iter()
                .map(|(i, entry, seg, dead)| {
                    let id = w.next_segment_id;
                    w.next_segment_id += 1;
                    (i, entry, seg, dead, id)
                })
                .collect::<Vec<_>>()
        };
        // P2: each rewritten without those rows, written and read back; no lock held.
        let mut rewritten = Vec::with_capacity(plan.len());
        let mut written = Vec::new();
        let discard = |written: &[PathBuf]| {
            let _ = self.undo_checkpoint_files(written);
        };
        let mut rows_dropped = 0u64;
        for (i, entry, seg, dead, id) in &plan {
            use amberdb_index::segment::Rewritten;
            let keep = |k: u64| dead.binary_search(&k).is_err();
            let rewrite = match seg.rewrite_kept(&keep, self.config.vector_codes) {
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
        // P3: the swap, last segment first so the indices stay right.
        let tags_forgotten = {
            let mut w = self.writer.lock();
            if let Err(e) = self.commit.check() {
                discard(&written);
                return Err(e);
            }
            if rewritten
                .iter()
                .any(|(i, entry, _)| w.segments.get(*i) != Some(entry))
            {
                discard(&written);
                return Err(internal(
                    "purging segments",
                    "the segments changed meanwhile",
                ));
            }
            let mut state = self.state.write();
            for (i, entry, new) in rewritten.into_iter().rev() {
                let (new_entry, segment) = match new {
                    Some((e, s)) => (Some(e), Some(s)),
                    None => (None, None),
                };
                if let Err(e) = state.vectors.replace_run(i..i + 1, segment) {
                    drop(state);
                    self.commit.poison(PoisonCause::new("purge", &self.dir, &e));
                    return Err(internal("swapping in a purged segment", e));
                }
                let root = w.purged_from.remove(&entry.id).unwrap_or(entry.id);
                if let Some(new) = new_entry {
                    w.purged_from.insert(new.id, root);
                }
                w.segments.splice(i..=i, new_entry);
                w.replaced.push(entry);
                w.segments_version += 1;
            }
            // A deleted memory's tags go with it: P4's checkpoint holds only the canonical
            // tags some record still carries, and P5 removes the files that named the others.
            // No frame: a purge that fails before P4 leaves them, and the next one drops them.
            state.table.forget_unused_canonical_tags()
        };
        // P4: a full checkpoint names the new list and holds no deleted record (a delta's base
        // would still hold the deleted ones).
        self.checkpoint_holding(CheckpointAsk::Full)?;
        // P5: the newest checkpoint, read back, becomes the only one; everything older goes.
        // The read-back takes no lock a writer needs (at 1M it reads and decodes ~250 MB for
        // a second): the file is never written again, and no other checkpoint runs while the
        // purge holds the checkpoint mutex.
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
        let path = self.dir.join(ckpt_format::file_name(newest));
        let bytes = self.storage().map(&path).map_err(EngineError::io(&path))?;
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
            return Err(EngineError::Corrupted {
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
            let keep = w.checkpoints.len().saturating_sub(1);
            let older: Vec<Retained> = w.checkpoints.drain(..keep).collect();
            let mut retired: Vec<PathBuf> = older
                .iter()
                .map(|c| self.dir.join(ckpt_format::file_name(c.seq)))
                .collect();
            retired.extend(self.retire_logs_before(&w, newest));
            let named: std::collections::HashSet<u64> = w.segments.iter().map(|s| s.id).collect();
            w.replaced.retain(|entry| {
                let keep = named.contains(&entry.id);
                if !keep {
                    retired.push(self.dir.join(entry.file_name()));
                }
                keep
            });
            retired
        };
        self.let_go(&retired, None);
        let removed = self.remove_retired(&retired);
        Ok(Purge {
            segments_rewritten: plan.len(),
            rows_dropped,
            removed,
            tags_forgotten,
            seconds: start.elapsed().as_secs_f64(),
        })
    }

    /// Copies the store into `dest` as it is at one commit, while reads and writes go on
    /// (`docs/durability.md`, "Backup and restore", K1–K4).
    ///
    /// # Errors
    /// `Invalid` for a `dest` that is not empty or is inside the store; `Poisoned`; `Io`,
    /// `DiskFull` (what was written is removed).
    pub(crate) fn backup(&self, dest: &Path) -> Result<backup::Backup> {
        let start = Instant::now();
        let storage = self.storage();
        // K1: no file the backup reads is removed or replaced until it is done.
        let _turn = self.checkpointing.lock();
        // K2: one durable commit, and where each file ends for it. A poisoned store is
        // refused here, before anything is created.
        let (seq, checkpoint, active, active_len) = {
            let mut w = self.writer.lock();
            self.not_restoring()?;
            self.drain_touches(&mut w);
            self.commit.check()?;
            let seq = self.commit.written();
            self.commit.wait_durable(seq)?;
            let checkpoint = w.checkpoints.last().map_or(0, |c| c.seq);
            (seq, checkpoint, w.log.first_seq, w.log.bytes)
        };
        backup::prepare_dest(storage, &self.dir, dest)?;
        // K3's list: the checkpoint's segments and the checkpoint, then the log after it.
        let mut parts = Vec::new();
        if checkpoint > 0 {
            let name = ckpt_format::file_name(checkpoint);
            let path = self.dir.join(&name);
            let bytes = storage.map(&path).map_err(EngineError::io(&path))?;
            let head =
                crate::kernel::checkpoint::reader::decode_head(bytes.as_slice()).map_err(|_| {
                    EngineError::Corrupted {
                        file: path.clone(),
                        offset: 0,
                        reason: "the newest checkpoint's head does not decode",
                    }
                })?;
            parts.extend(head.segments.iter().map(|e| backup::Part {
                name: e.file_name(),
                len: None,
            }));
            // A delta is opened with its base ("Incremental checkpoints").
            if let Some(delta) = &head.delta {
                parts.push(backup::Part {
                    name: ckpt_format::file_name(delta.base_seq),
                    len: None,
                });
            }
            parts.push(backup::Part { name, len: None });
        }
        let mut logs: Vec<u64> = storage
            .list(&self.dir)
            .map_err(EngineError::io(&self.dir))?
            .iter()
            .filter_map(|n| crate::kernel::log::writer::parse_file_name(n))
            .filter(|&first| first > checkpoint && first <= active)
            .collect();
        logs.sort_unstable();
        parts.extend(logs.into_iter().map(|first| backup::Part {
            name: crate::kernel::log::writer::file_name(first),
            len: (first == active).then_some(active_len),
        }));
        // K3–K4, with the writer mutex released: writes go on. The copy runs on a thread of
        // lower priority, as maintenance does, so that requests come first.
        let (files, bytes) = std::thread::scope(|s| {
            s.spawn(|| {
                crate::kernel::maintenance::lower_priority();
                backup::copy_store_files(storage, &self.dir, dest, &parts)
            })
            .join()
        })
        .map_err(|_| internal("copying the backup", "the copy thread panicked"))??;
        Ok(backup::Backup {
            dest: dest.to_path_buf(),
            seq,
            files,
            bytes,
            seconds: start.elapsed().as_secs_f64(),
        })
    }

    /// Stops a running background build and waits for its thread (at close).
    pub(crate) fn stop_indexing(&self) {
        self.indexing.stop.store(true, Ordering::Release);
        // The slot's lock is not held while joining: a finishing thread takes it to see
        // `stop` and start no other.
        loop {
            let handle = self.indexing.thread.lock().take();
            let Some(handle) = handle else { break };
            if handle.thread().id() == std::thread::current().id() {
                break;
            }
            let _ = handle.join();
        }
    }

    /// The index's figures for STATS.
    pub(crate) fn index_counters(&self) -> IndexCounters {
        IndexCounters {
            building: self.indexing.running.load(Ordering::Acquire),
            builds: self.indexing.builds.load(Ordering::Relaxed),
            failures: self.indexing.failures.load(Ordering::Relaxed),
            last: self.indexing.last.lock().clone(),
            last_error: self.indexing.last_error.lock().clone(),
        }
    }

    /// Runs `f`, whose acknowledged writes on this thread each return as soon as they are
    /// appended and applied, and returns what must still become durable (see
    /// `Store::deferred_batch`).
    pub(crate) fn deferred_batch<T>(
        self: &Arc<Self>,
        f: impl FnOnce() -> T,
    ) -> (T, PendingDurable) {
        struct Restore(bool);
        impl Drop for Restore {
            fn drop(&mut self) {
                DEFERRED.set(self.0);
            }
        }
        let outermost = !DEFERRED.get();
        if outermost {
            // A batch that panicked on this (pooled) thread may have left its sequence here.
            DEFERRED_SEQ.set(0);
        }
        let outer = Restore(DEFERRED.replace(true));
        let value = f();
        drop(outer);
        // Only the outermost batch makes the writes durable, if it made any.
        let seq = if outermost {
            DEFERRED_SEQ.replace(0)
        } else {
            0
        };
        (
            value,
            PendingDurable {
                db: Arc::clone(self),
                seq,
            },
        )
    }

    /// Appends the accesses still waiting for the writer, then makes every write so far
    /// durable.
    pub(crate) fn flush(&self) -> Result<()> {
        {
            let mut w = self.writer.lock();
            if self.commit.check().is_ok() {
                self.drain_touches(&mut w);
            }
        }
        self.commit.wait_durable(self.commit.written())
    }
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
        self.db.commit.wait_durable(self.seq)
    }
}

/// The index's figures for STATS.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct IndexCounters {
    pub(crate) building: bool,
    pub(crate) builds: u64,
    pub(crate) failures: u64,
    pub(crate) last: Option<IndexBuild>,
    pub(crate) last_error: Option<String>,
}

/// A checkpoint's aux section (`docs/format/checkpoint.md`): the model first, then the
/// entities, archive, canonical tags and snapshots, then what a re-embedding has staged.
fn checkpoint_aux(state: &State) -> Vec<Op> {
    let mut aux = vec![Op::Model {
        model_id: state.model.id.clone(),
        dim: u32::try_from(state.model.dim).unwrap_or(u32::MAX),
    }];
    aux.extend(state.table.aux_ops(state.vectors.dim()));
    if let Some(stage) = &state.stage {
        aux.extend(stage.ops(REEMBED_VECTORS_PER_FRAME));
    }
    aux
}

/// Most vectors in one staged entry of a checkpoint: 4 MiB at 1,024 dimensions, 16 MiB at the
/// 4,096 a re-embedding allows (aux entries are bounded by the checkpoint's length only).
const REEMBED_VECTORS_PER_FRAME: usize = 1_024;

/// k-means and nprobe for a segment, on `options.threads` threads, giving up when `stop` is
/// set. Seeded by the segment id, so a rebuild of the same rows is the same file.
fn train_segment(
    keys: &[u64],
    vectors: &[f32],
    dim: usize,
    options: &crate::kernel::config::IndexOptions,
    id: u64,
    stop: &AtomicBool,
) -> Result<amberdb_index::ivf::Built> {
    let params = amberdb_index::ivf::IvfParams {
        target_recall: options.target_recall,
        nlist: None,
        seed: id,
    };
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(options.threads)
        .thread_name(|i| format!("amberdb-index-{i}"))
        .build()
        .map_err(|e| EngineError::Internal {
            context: "starting the index build's threads",
            reason: e.to_string(),
        })?;
    let stopped = || stop.load(Ordering::Acquire);
    pool.install(|| amberdb_index::ivf::build_until(keys, vectors, dim, &params, &stopped))
        .map_err(|e| match e {
            amberdb_index::IndexError::Cancelled => EngineError::Cancelled,
            e => EngineError::Internal {
                context: "building an IVF segment",
                reason: e.to_string(),
            },
        })
}

/// One background build: B1 and the gathering with the database held, the training without
/// it (a closing store is not kept open), B2's file and B3 with it again. Returns whether
/// another build may be due: one was built, or the segments changed under it.
fn background_build(weak: &Weak<Db>) -> bool {
    let Some(db) = weak.upgrade() else {
        return false;
    };
    let min_rows = db.config.index.min_rows as u64;
    let Some(plan) = db.plan_build(min_rows) else {
        return false;
    };
    let start = Instant::now();
    let (keys, vectors) = db.gather(&plan);
    let (dim, options, stop) = (
        plan.dim,
        db.config.index.clone(),
        Arc::clone(&db.indexing.stop),
    );
    drop(db);
    let built = train_segment(&keys, &vectors, dim, &options, plan.id, &stop);
    drop(vectors);
    let Some(db) = weak.upgrade() else {
        return false;
    };
    if stop.load(Ordering::Acquire) {
        return false;
    }
    let (run, entries) = (plan.run.clone(), plan.entries.clone());
    let result = db.install(plan, keys.len(), built, start).map(Some);
    db.record_build(&result);
    // A build whose segments changed meanwhile (a purge rewrote them, a re-embedding replaced
    // them) built nothing: the segments there now may be due, as after a build.
    let stale = result.is_err() && db.writer.lock().segments.get(run) != Some(&entries[..]);
    matches!(result, Ok(Some(_))) || stale
}

fn batch_sync_loop(db: &Weak<Db>, interval: std::time::Duration) {
    loop {
        std::thread::sleep(interval);
        let Some(db) = db.upgrade() else { return };
        if db.commit.is_poisoned() {
            return;
        }
        // A failure poisons the store; the next write reports it.
        let _ = db.commit.wait_durable(db.commit.written());
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        // Best effort: the accesses still waiting, and relaxed-policy writes, made durable
        // before the lock is released.
        if !self.commit.is_poisoned() {
            let _ = self.flush();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::storage::FsStorage;
    use amberdb_index::SearchParams;
    use amberdb_index::synthetic::SeededRng;
    use std::sync::mpsc;

    #[test]
    fn builds_index_the_flat_tail_and_merge_like_a_binary_counter() {
        let flat = |id, rows| SegmentEntry::flat(id, rows);
        let ivf = |id, rows| SegmentEntry {
            id,
            rows,
            kind: SegmentKind::Ivf,
        };
        assert_eq!(build_run(&[], 0), None);
        assert_eq!(build_run(&[flat(1, 50)], 100), None, "too few flat rows");
        assert_eq!(build_run(&[flat(1, 50), flat(2, 50)], 100), Some(0..2));
        assert_eq!(build_run(&[flat(1, 50)], 0), Some(0..1), "forced: any rows");
        assert_eq!(build_run(&[ivf(3, 100)], 0), None, "nothing flat");
        // The tail reaches back over IVF segments no larger than what it holds so far.
        assert_eq!(build_run(&[ivf(3, 100), flat(4, 100)], 100), Some(0..2));
        assert_eq!(build_run(&[ivf(3, 200), flat(4, 100)], 100), Some(1..2));
        assert_eq!(
            build_run(&[ivf(3, 400), ivf(5, 200), ivf(6, 100), flat(7, 100)], 100),
            Some(0..4)
        );
        assert_eq!(
            build_run(&[ivf(3, 800), ivf(5, 200), flat(7, 100)], 100),
            Some(2..3)
        );
        // A small flat segment before an IVF one (never made by builds) is swept in.
        assert_eq!(
            build_run(&[flat(1, 10), ivf(3, 100), flat(4, 100)], 100),
            Some(0..3)
        );
    }

    fn test_config() -> DbConfig {
        DbConfig {
            storage: Arc::new(FsStorage),
            sync: SyncPolicy::Always,
            seal_rows: 1 << 16,
            checkpoint_bytes: 1 << 26,
            log_tail_limit: 0,
            delta_max_share: 0.125,
            vector_codes: true,
            clock: Arc::new(Timestamp::now),
            index: crate::kernel::config::IndexOptions::default(),
            maintenance_thread: false,
            purge_delay: None,
            archive_retention: crate::kernel::config::ArchiveRetention::default(),
        }
    }

    /// Stores records `ids` with seeded unit vectors, then checkpoints: one flat segment.
    fn store_segment(db: &Db, ids: std::ops::Range<u64>, rng: &mut SeededRng) {
        for i in ids {
            let record = crate::kernel::state::tests::record(i, &format!("text {i}"));
            let vector = rng.unit_vector(db.read().vectors.dim());
            db.commit(|_, _| Ok((Some(Op::Store { record, vector }), ())))
                .expect("a store");
        }
        db.checkpoint().expect("checkpoint");
    }

    fn delete(db: &Db, id: u64) {
        db.commit(|_, _| Ok((Some(Op::Delete { id: MemoryId(id) }), ())))
            .expect("a delete");
    }

    /// Keys of every sealed segment, ascending.
    fn sealed_keys(db: &Db) -> Vec<u64> {
        let state = db.read();
        let mut keys: Vec<u64> = state
            .vectors
            .sealed()
            .iter()
            .flat_map(|s| s.keys().iter().copied())
            .collect();
        keys.sort_unstable();
        keys
    }

    #[test]
    fn a_build_lands_after_a_purge_rewrote_its_segments_and_its_deleted_rows_go_next() {
        let dir = tempfile::tempdir().expect("tempdir");
        let embedder = amberdb_embed::HashingEmbedder::new();
        let db = Db::open(dir.path(), &embedder, test_config()).expect("open");
        let mut rng = SeededRng::new(17);
        store_segment(&db, 1..201, &mut rng);
        store_segment(&db, 201..401, &mut rng);
        // B1 and B2 of a build of both segments, then a purge rewrites them under it.
        let plan = db.plan_build(0).expect("a run to build");
        assert_eq!(plan.entries.len(), 2);
        let start = Instant::now();
        let (keys, vectors) = db.gather(&plan);
        let built = db.train(&keys, &vectors, &plan);
        for id in [3, 150, 250] {
            delete(&db, id);
        }
        let purge = db.purge().expect("purge");
        assert_eq!((purge.segments_rewritten, purge.rows_dropped), (2, 3));
        assert!(db.unpurged_for().is_none(), "the purge took the note");
        delete(&db, 399); // after the purge: still in its segment, under its tombstone
        let build = db
            .install(plan, keys.len(), built, start)
            .expect("the build lands on the rewritten segments");
        assert_eq!((build.rows, build.replaced), (400, 2));
        // The rows the purge dropped are back in the new segment, deleted; a purge is due.
        assert_eq!(db.writer.lock().segments.len(), 1);
        assert_eq!(sealed_keys(&db), (1..401).collect::<Vec<_>>());
        let live = |db: &Db| {
            let state = db.read();
            (1..401u64)
                .filter(|&k| state.vectors.contains(k))
                .collect::<Vec<_>>()
        };
        let expected: Vec<u64> = (1..401)
            .filter(|k| ![3, 150, 250, 399].contains(k))
            .collect();
        assert_eq!(live(&db), expected);
        assert_eq!(db.read().vectors.len(), db.read().table.len());
        assert!(
            db.unpurged_for().is_some(),
            "the absorbed rows make a purge due"
        );
        let query = db.read().vectors.vector(1).expect("live").to_vec();
        let hits = db
            .read()
            .vectors
            .search(&query, &SearchParams::top(400))
            .expect("search");
        assert_eq!(hits.len(), 396, "every live row and no deleted one");
        // The next purge rewrites the IVF segment without them; the open agrees.
        db.purge().expect("purge");
        let kept: Vec<u64> = sealed_keys(&db);
        assert_eq!(kept, expected);
        drop(db);
        let db = Db::open(dir.path(), &embedder, test_config()).expect("reopen");
        assert_eq!(live(&db), expected);
        assert_eq!(sealed_keys(&db), expected);
    }

    #[test]
    fn a_build_whose_rows_a_purge_dropped_entirely_is_stale_and_leaves_no_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let embedder = amberdb_embed::HashingEmbedder::new();
        let db = Db::open(dir.path(), &embedder, test_config()).expect("open");
        let mut rng = SeededRng::new(18);
        store_segment(&db, 1..101, &mut rng);
        let plan = db.plan_build(0).expect("a run to build");
        let id = plan.id;
        let start = Instant::now();
        let (keys, vectors) = db.gather(&plan);
        let built = db.train(&keys, &vectors, &plan);
        for i in 1..101 {
            delete(&db, i);
        }
        db.purge().expect("purge");
        let err = db
            .install(plan, keys.len(), built, start)
            .expect_err("nothing left to replace");
        assert!(
            err.to_string().contains("replaced during the build"),
            "{err}"
        );
        let name = SegmentEntry {
            id,
            rows: 0,
            kind: SegmentKind::Ivf,
        }
        .file_name();
        assert!(
            !dir.path().join(name).exists(),
            "the stale build's file is removed"
        );
        assert!(db.writer.lock().segments.is_empty());
    }

    #[test]
    fn readers_and_accesses_never_wait_for_a_writer_preparing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = DbConfig {
            maintenance_thread: true,
            ..test_config()
        };
        let embedder = amberdb_embed::HashingEmbedder::new();
        let db = Db::open(dir.path(), &embedder, config).expect("open");
        let record = crate::kernel::state::tests::record(1, "one");
        let id = record.id;
        let vector = vec![0.5; embedder.dim()];
        db.commit(|_, _| Ok((Some(Op::Store { record, vector }), ())))
            .expect("a store");
        let (release, held) = mpsc::channel::<()>();
        let (answered, reads) = mpsc::channel::<bool>();
        let db = &*db;
        std::thread::scope(|s| {
            // A writer whose prepare takes as long as the test wants (a store's dedup scans).
            s.spawn(move || {
                db.commit(|_, _| {
                    held.recv().expect("released");
                    Ok((None, ()))
                })
            });
            while db.writer.try_lock().is_some() {
                std::thread::yield_now();
            }
            // While it prepares, a reader reads the state and counts an access.
            s.spawn(move || {
                let rows = db.read().table.len();
                let counted = db.touch(db.now(), vec![id]);
                answered.send(rows == 1 && counted).expect("test waits");
            });
            let read = reads.recv_timeout(Duration::from_secs(10));
            release.send(()).expect("writer waits");
            assert_eq!(read, Ok(true), "the reader waited for the writer's prepare");
        });
        // The access waited in the queue; the next one to take the writer lock appends it.
        let count = || db.read().table.get(id).map(|m| m.access_count);
        assert_eq!(
            count(),
            Some(0),
            "queued, not applied behind the writer's back"
        );
        db.flush().expect("flush");
        assert_eq!(count(), Some(1));
        assert_eq!(db.counters().accesses_not_recorded, 0);
    }
}
