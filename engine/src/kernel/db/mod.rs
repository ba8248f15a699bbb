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

mod checkpoint;
mod core;
mod indexing;
mod purge;
mod replica;
mod retention;
mod segments;
mod write;

use crate::kernel::config::{DbConfig, SyncPolicy};
use crate::kernel::error::{KernelError, Result};
use crate::kernel::lexical::{self};
use crate::kernel::maintenance::Maintenance;
use crate::kernel::record::MemoryId;
use crate::kernel::recovery::{self};
use crate::kernel::table::{Lexical, PendingLexical};
use amberdb_embed::Embedder;
pub use core::IndexBuild;
use core::*;
pub(crate) use core::{Counters, Db, IndexCounters, NextIds};
use parking_lot::{Condvar, Mutex, RwLock};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
pub use write::PendingDurable;
use write::batch_sync_loop;
pub(crate) use write::{DeferredWrites, Durability, RequestMark};

impl Drop for Db {
    fn drop(&mut self) {
        // Best effort: the accesses still waiting, and relaxed-policy writes, made durable
        // before the lock is released.
        if !self.journal.is_poisoned() {
            let _ = self.flush();
        }
    }
}

pub(crate) use crate::kernel::cluster::{MAX_PARTITIONS, PARTITION_SHIFT, partition_base};

impl Db {
    /// Opens or creates the database in `dir` (`docs/durability.md`, "Recovery").
    pub(crate) fn open(dir: &Path, embedder: &dyn Embedder, config: DbConfig) -> Result<Arc<Db>> {
        let r = recovery::recover(
            dir,
            &config.storage,
            embedder,
            config.store_id,
            config.tail_from_stream,
        )?;
        // What a purge would remove is not remembered across a restart, so an open notes a
        // delete when the files may hold one (`docs/durability.md`, "Purge"): the replayed log
        // deleted records, a segment holds deleted rows, or an older checkpoint is retained
        // (it, or the log after it, may hold records deleted since).
        let unpurged = (r.replayed_deletes
            || r.checkpoints.len() > 1
            || !r.state.vectors.sealed_tombstones().is_empty())
        .then(Instant::now);
        let db = Arc::new_cyclic(|me| Db {
            me: me.clone(),
            indexing: Indexing::default(),
            lexical: Arc::default(),
            checkpointing: Mutex::new(()),
            unpurged_since: Mutex::new(unpurged),
            archive_checked_at: Mutex::new(None),
            maintenance: Maintenance::default(),
            dir: dir.to_path_buf(),
            identity: r.identity,
            checkpoint_seq: AtomicU64::new(r.checkpoint_seq),
            running_crc: Mutex::new(RunningCrc {
                position: r.last_seq,
                crc: r.running_crc,
                last_frame: r.last_frame,
            }),
            writer: Mutex::new(Writer {
                log_bytes_since_checkpoint: r.log_bytes_after_checkpoint,
                next_seq: r.last_seq + 1,
                // A partition's ids begin at its base (`docs/cluster.md`).
                next_id: r.next_id.max(partition_base(config.partition) + 1),
                next_segment_id: r.next_segment_id,
                checkpoint_seq: r.checkpoint_seq,
                checkpoints: r.checkpoints,
                // Opened without a damaged segment (R4b): the next checkpoint names the
                // segments as they are now, even at the same sequence number (B3).
                segments: segments::Segments::opened(
                    r.segments,
                    r.replaced,
                    !r.report.damaged_segments.is_empty(),
                ),
                checkpoint_paused_until: None,
                tail_wait_timed_out: false,
                delta_base: r.delta_base,
                damaged: r.damaged,
            }),
            state: RwLock::new(r.state),
            journal: Box::new(r.journal),
            pending_touches: Mutex::new(Vec::new()),
            owner: RwLock::new(None),
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
                .map_err(KernelError::io(&db.dir))?;
        }
        if db.config.maintenance_thread {
            let weak = Arc::downgrade(&db);
            db.maintenance
                .start(move || weak.upgrade().map(|db| db.run_due_maintenance()).is_some())
                .map_err(KernelError::io(&db.dir))?;
            // A tail long enough to be due (after a crash) is checkpointed now, not after the
            // next write: the next open replays less the sooner it lands.
            if db.checkpoint_due(&db.writer.lock()) {
                db.maintenance.wake();
            }
        }
        // A store that already holds enough flat rows (opened after a crash mid-build, or
        // made before IVF segments existed) indexes them now.
        db.start_background_build();
        let pending = db.read().table.lexical_pending();
        let weak = Arc::downgrade(&db);
        lexical::start(pending, &db.lexical, move |p, built| {
            weak.upgrade()
                .map(|db| db.install_lexical(p, built))
                .is_some()
        });
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
    pub(in crate::kernel) fn not_restoring(&self) -> Result<()> {
        match self.state.read().unindexed.len() {
            0 => Ok(()),
            left => Err(KernelError::Restoring { left }),
        }
    }

    /// The files in the store's quarantine folder (`docs/durability.md`, "File identity").
    pub(crate) fn quarantined(&self) -> Vec<String> {
        crate::kernel::ownership::quarantined_files(self.storage(), &self.dir)
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
                    .map_err(|reason| KernelError::Internal {
                        context: "restoring vectors",
                        reason: reason.into(),
                    })?;
            if rebuilt {
                // Every live vector is a growing row now; the segments are replaced (B4:
                // their files go once no retained checkpoint names them).
                w.segments.all_replaced();
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
        if self.journal.is_poisoned() || self.maintenance.is_paused() {
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
            last_seq: self.journal.written(),
            running_crc: *self.running_crc.lock(),
            durable_seq: self.journal.durable(),
            checkpoint_seq: self.checkpoint_seq.load(Ordering::Acquire),
            log_fsyncs: self.journal.syncs(),
            poison_cause: self.journal.cause(),
            disk_full_refusals: self.disk_full_refusals.load(Ordering::Relaxed),
            accesses_not_recorded: self.accesses_not_recorded.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::indexing::build_run;
    use super::*;
    use crate::kernel::log::Op;
    use crate::kernel::record::Timestamp;
    use crate::kernel::segment_file::{SegmentEntry, SegmentKind};
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
            store_id: None,
            tail_from_stream: false,
            partition: 0,
        }
    }

    /// Stores records `ids` with seeded unit vectors, then checkpoints: one flat segment.
    fn store_segment(db: &Db, ids: std::ops::Range<u64>, rng: &mut SeededRng) {
        for i in ids {
            let record = crate::kernel::state::tests::record(i, &format!("text {i}"));
            let vector = rng.unit_vector(db.read().vectors.dim());
            db.commit(&Durability::Immediate, None, |_, _| {
                Ok::<_, KernelError>((Some(Op::Store { record, vector }), ()))
            })
            .expect("a store");
        }
        db.checkpoint().expect("checkpoint");
    }

    fn delete(db: &Db, id: u64) {
        db.commit(&Durability::Immediate, None, |_, _| {
            Ok::<_, KernelError>((Some(Op::Delete { id: MemoryId(id) }), ()))
        })
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
        assert_eq!(db.writer.lock().segments.entries().len(), 1);
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
        assert!(db.writer.lock().segments.entries().is_empty());
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
        db.commit(&Durability::Immediate, None, |_, _| {
            Ok::<_, KernelError>((Some(Op::Store { record, vector }), ()))
        })
        .expect("a store");
        let (release, held) = mpsc::channel::<()>();
        let (answered, reads) = mpsc::channel::<bool>();
        let db = &*db;
        std::thread::scope(|s| {
            // A writer whose prepare takes as long as the test wants (a store's dedup scans).
            s.spawn(move || {
                db.commit(&Durability::Immediate, None, |_, _| {
                    held.recv().expect("released");
                    Ok::<_, KernelError>((None, ()))
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
