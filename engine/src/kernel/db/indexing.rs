//! IVF index builds of a [`Db`] (`docs/ivf.md`, B1–B4): which run of segments to build, the
//! gathering and training (in the background or asked for), the install.

use super::checkpoint::CheckpointAsk;
use super::core::*;
use crate::kernel::error::is_disk_full;
use crate::kernel::error::{KernelError, Result};
use crate::kernel::segment_file::{self, SegmentEntry, SegmentKind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// B1's choice: the run of sealed segments to index, and the id of the new one.
pub(in crate::kernel) struct BuildPlan {
    pub(super) run: std::ops::Range<usize>,
    /// The vectors' dimension.
    pub(super) dim: usize,
    pub(super) entries: Vec<SegmentEntry>,
    /// Each entry's root (`Segments::root_of`): a purge during the build rewrites the entry,
    /// and B3 finds the rewritten one by it.
    pub(super) roots: Vec<u64>,
    pub(super) segments: Vec<amberdb_index::Sealed>,
    pub(super) id: u64,
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

/// k-means and nprobe for a segment, on `options.threads` threads, giving up when `stop` is
/// set. Seeded by the segment id, so a rebuild of the same rows is the same file.
pub(in crate::kernel) fn train_segment(
    keys: &[u64],
    vectors: &[f32],
    dim: usize,
    options: &crate::kernel::config::IndexOptions,
    (id, owner): (u64, amberdb_index::Owner),
    stop: &AtomicBool,
) -> Result<amberdb_index::ivf::Built> {
    let params = amberdb_index::ivf::IvfParams {
        target_recall: options.target_recall,
        nlist: None,
        seed: id,
        owner,
    };
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(options.threads)
        .thread_name(|i| format!("amberdb-index-{i}"))
        .build()
        .map_err(|e| KernelError::Internal {
            context: "starting the index build's threads",
            reason: e.to_string(),
        })?;
    let stopped = || stop.load(Ordering::Acquire);
    pool.install(|| amberdb_index::ivf::build_until(keys, vectors, dim, &params, &stopped))
        .map_err(|e| match e {
            amberdb_index::IndexError::Cancelled => KernelError::Cancelled,
            e => KernelError::Internal {
                context: "building an IVF segment",
                reason: e.to_string(),
            },
        })
}

/// One background build: B1 and the gathering with the database held, the training without
/// it (a closing store is not kept open), B2's file and B3 with it again. Returns whether
/// another build may be due: one was built, or the segments changed under it.
pub(in crate::kernel) fn background_build(weak: &Weak<Db>) -> bool {
    let Some(db) = weak.upgrade() else {
        return false;
    };
    let min_rows = db.config.index.min_rows as u64;
    let Some(plan) = db.plan_build(min_rows) else {
        return false;
    };
    let start = Instant::now();
    let (keys, vectors) = db.gather(&plan);
    let (dim, options, stop, owner) = (
        plan.dim,
        db.config.index.clone(),
        Arc::clone(&db.indexing.stop),
        db.identity.owner(),
    );
    drop(db);
    let built = train_segment(&keys, &vectors, dim, &options, (plan.id, owner), &stop);
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
    let stale =
        result.is_err() && db.writer.lock().segments.entries().get(run) != Some(&entries[..]);
    matches!(result, Ok(Some(_))) || stale
}

impl Db {
    /// Starts a background index build if one is due and none is running
    /// (`docs/durability.md`, B1–B4). The thread holds the database weakly: a store that closes
    /// meanwhile is not kept open by it, and it gives up at its next check.
    pub(in crate::kernel) fn start_background_build(&self) {
        let min_rows = self.config.index.min_rows;
        if min_rows == 0 || self.indexing.stop.load(Ordering::Acquire) {
            return;
        }
        let due = build_run(self.writer.lock().segments.entries(), min_rows as u64).is_some();
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

    pub(in crate::kernel) fn record_build(&self, result: &Result<Option<IndexBuild>>) {
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
            Ok(None) | Err(KernelError::Cancelled) => {}
            Err(e) => {
                self.indexing.failures.fetch_add(1, Ordering::Relaxed);
                *self.indexing.last_error.lock() = Some(e.to_string());
                tracing::warn!(error = %e, "index build failed; the store is unchanged");
            }
        }
    }

    /// B1: the run to index, its segments (shared maps) and a new segment id.
    pub(in crate::kernel) fn plan_build(&self, min_rows: u64) -> Option<BuildPlan> {
        let mut w = self.writer.lock();
        let run = build_run(w.segments.entries(), min_rows)?;
        let state = self.state.read();
        let segments = state.vectors.sealed();
        if segments.len() != w.segments.entries().len() {
            return None;
        }
        let entries = w.segments.entries().get(run.clone())?.to_vec();
        let plan = BuildPlan {
            dim: state.vectors.dim(),
            roots: entries.iter().map(|e| w.segments.root_of(e.id)).collect(),
            entries,
            segments: segments.get(run.clone())?.to_vec(),
            run,
            id: w.next_segment_id,
        };
        w.next_segment_id += 1;
        Some(plan)
    }

    /// B2, first half: the run's rows live now, a segment at a time under the read lock.
    pub(in crate::kernel) fn gather(&self, plan: &BuildPlan) -> (Vec<u64>, Vec<f32>) {
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
    pub(in crate::kernel) fn train(
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
            (plan.id, self.identity.owner()),
            &self.indexing.stop,
        )
    }

    /// B2's file, then B3 and the checkpoint. The file is removed again if anything fails
    /// before the swap.
    pub(in crate::kernel) fn install(
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
        let discard = |e: KernelError| {
            for p in [path.clone(), self.dir.join(format!("{name}.tmp"))] {
                let _ = storage.remove(&p);
            }
            let _ = storage.sync_dir(&self.dir);
            e
        };
        crate::kernel::storage::write_atomic(storage, &self.dir, &name, &built.bytes).map_err(
            |source| {
                discard(if is_disk_full(&source) {
                    KernelError::DiskFull {
                        path: path.clone(),
                        source,
                    }
                } else {
                    KernelError::Io {
                        path: path.clone(),
                        source,
                    }
                })
            },
        )?;
        let Ok(amberdb_index::Sealed::Ivf(ivf)) = segment_file::open(storage, &self.dir, &entry)
        else {
            return Err(discard(KernelError::Internal {
                context: "opening the IVF segment a build wrote",
                reason: "it does not read back as an IVF segment".into(),
            }));
        };
        // B3: the swap, then a checkpoint that names the new segment, both under the
        // checkpoint mutex (taken before the writer mutex, as every checkpoint takes them).
        let turn = self.checkpointing.lock();
        let mut w = self.writer.lock();
        if let Err(e) = self.journal.check() {
            return Err(discard(e));
        }
        // The run as it is now: the planned segments, or what purges rewrote them into.
        let Some(run) = w.segments.descendants_of(&plan.roots) else {
            return Err(discard(KernelError::Internal {
                context: "swapping in an IVF segment",
                reason: "the segments it replaces were replaced during the build".into(),
            }));
        };
        let swapped = w
            .segments
            .built(&mut self.state.write().vectors, run, (entry, ivf.into()));
        let absorbed = match swapped {
            Ok(absorbed) => absorbed,
            Err(e) => {
                return Err(discard(KernelError::Internal {
                    context: "swapping in an IVF segment",
                    reason: e.to_string(),
                }));
            }
        };
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
}
