//! The maintenance thread of a store (`docs/durability.md`, "Maintenance"): checkpoints,
//! retention and automatic purges run here, never in a client's request.
//!
//! A write that finds a checkpoint due wakes the thread; it also wakes every second, so
//! thresholds crossed by accesses alone are caught. It holds the database weakly while it
//! waits, so a store that closes is not kept open by it, and it is joined at close. What it
//! did is counted for STATS.

use crate::kernel::error::KernelError;
use parking_lot::{Condvar, Mutex};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How long the thread sleeps when nobody wakes it.
const IDLE_WAKE: Duration = Duration::from_secs(1);

/// Files and bytes retention removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Removed {
    /// Files removed.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// One checkpoint that reached its commit point.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckpointRun {
    /// The sequence number it covers.
    pub seq: u64,
    /// A delta's base (`docs/durability.md`, "Incremental checkpoints"); `None`: full.
    pub delta_of: Option<u64>,
    /// The checkpoint file's bytes.
    pub bytes: u64,
    /// Rows it sealed into a new segment.
    pub sealed_rows: u64,
    /// Wall time, capture to retention.
    pub seconds: f64,
    /// Time writers waited for it (its capture and finish, under the writer mutex).
    pub writers_waited: f64,
    /// What its retention removed.
    pub removed: Removed,
}

/// What maintenance did since the store opened, for STATS.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MaintenanceCounters {
    /// Whether a thread runs maintenance (else due checkpoints run after the write that found
    /// them due).
    pub thread: bool,
    /// Checkpoints written.
    pub checkpoints: u64,
    /// Checkpoints that failed.
    pub failures: u64,
    /// The newest checkpoint written.
    pub last: Option<CheckpointRun>,
    /// The longest writers waited for one checkpoint (seconds).
    pub longest_writers_wait: f64,
    /// Writes that waited for a checkpoint at `StoreOptions::log_tail_limit`.
    pub writes_waited: u64,
    /// The longest of those waits (seconds).
    pub longest_write_wait: f64,
    /// The last failure's message.
    pub last_error: Option<String>,
    /// Everything retention and purges removed.
    pub removed: Removed,
    /// Purges run (automatic and asked for).
    pub purges: u64,
    /// Purges that failed.
    pub purge_failures: u64,
    /// The newest purge.
    pub last_purge: Option<Purge>,
    /// How long the oldest delete not purged yet has waited (seconds); `None`: none waits.
    pub purge_pending: Option<f64>,
    /// Archived records archive retention forgot.
    pub archived_forgotten: u64,
    /// Automatic work is paused (`Store::pause_maintenance`).
    pub paused: bool,
}

/// How writers wake the thread, shared with it (it waits on this, not on the database).
#[derive(Default)]
struct Signal {
    /// Work may be due: set by writers, taken by the thread.
    due: Mutex<bool>,
    wake: Condvar,
    stop: AtomicBool,
}

/// The thread's handle, its wake-up and its counters.
#[derive(Default)]
pub(crate) struct Maintenance {
    /// Automatic work (checkpoints, purges, archive retention) waits while set.
    paused: AtomicBool,
    signal: Arc<Signal>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    counters: Mutex<MaintenanceCounters>,
}

impl Maintenance {
    /// Starts the thread, which calls `work` at each wake-up until it returns false (the
    /// store is gone) or the thread is stopped. `work` holds the store only while it runs.
    ///
    /// # Errors
    /// When the thread cannot be spawned.
    pub(crate) fn start(&self, work: impl Fn() -> bool + Send + 'static) -> std::io::Result<()> {
        let signal = Arc::clone(&self.signal);
        let handle = std::thread::Builder::new()
            .name("amberdb-maintenance".into())
            .spawn(move || run(&work, &signal))?;
        *self.thread.lock() = Some(handle);
        self.counters.lock().thread = true;
        Ok(())
    }

    /// Wakes the thread: a checkpoint may be due.
    pub(crate) fn wake(&self) {
        *self.signal.due.lock() = true;
        self.signal.wake.notify_one();
    }

    /// Stops the thread and waits for it (at close). Work under way finishes first.
    pub(crate) fn stop(&self) {
        self.signal.stop.store(true, Ordering::Release);
        self.wake();
        let handle = self.thread.lock().take();
        if let Some(handle) = handle
            && handle.thread().id() != std::thread::current().id()
        {
            let _ = handle.join();
        }
    }

    /// Pauses or resumes automatic work; resuming wakes the thread.
    pub(crate) fn set_paused(&self, paused: bool) {
        self.paused.store(paused, Ordering::Release);
        tracing::info!(paused, "maintenance paused or resumed");
        if !paused {
            self.wake();
        }
    }

    pub(crate) fn is_paused(&self) -> bool {
        self.paused.load(Ordering::Acquire)
    }

    pub(crate) fn record_checkpoint(&self, run: CheckpointRun) {
        tracing::info!(
            seq = run.seq,
            bytes = run.bytes,
            sealed_rows = run.sealed_rows,
            seconds = run.seconds,
            writers_waited = run.writers_waited,
            removed_files = run.removed.files,
            "checkpoint written"
        );
        let mut c = self.counters.lock();
        c.checkpoints += 1;
        c.longest_writers_wait = c.longest_writers_wait.max(run.writers_waited);
        c.last = Some(run);
    }

    pub(crate) fn record_write_wait(&self, waited: std::time::Duration) {
        let mut c = self.counters.lock();
        c.writes_waited += 1;
        c.longest_write_wait = c.longest_write_wait.max(waited.as_secs_f64());
    }

    pub(crate) fn record_failure(&self, e: &KernelError) {
        let mut c = self.counters.lock();
        c.failures += 1;
        c.last_error = Some(e.to_string());
    }

    pub(crate) fn record_purge(&self, purge: Purge) {
        tracing::info!(
            segments_rewritten = purge.segments_rewritten,
            rows_dropped = purge.rows_dropped,
            removed_files = purge.removed.files,
            removed_bytes = purge.removed.bytes,
            seconds = purge.seconds,
            "purge done"
        );
        let mut c = self.counters.lock();
        c.purges += 1;
        c.last_purge = Some(purge);
    }

    pub(crate) fn record_purge_failure(&self, e: &KernelError) {
        let mut c = self.counters.lock();
        c.purge_failures += 1;
        c.last_error = Some(e.to_string());
    }

    pub(crate) fn record_forgotten(&self, n: u64) {
        self.counters.lock().archived_forgotten += n;
    }

    pub(crate) fn record_removed(&self, removed: Removed) {
        let mut c = self.counters.lock();
        c.removed.files += removed.files;
        c.removed.bytes += removed.bytes;
    }

    pub(crate) fn counters(&self) -> MaintenanceCounters {
        MaintenanceCounters {
            paused: self.is_paused(),
            ..self.counters.lock().clone()
        }
    }
}

/// Lowers the calling thread's CPU priority (about nice 10 on Linux), so that background work
/// (maintenance, index builds) yields the CPU to requests under load and takes what is idle
/// otherwise (`docs/durability.md`, "Maintenance"). A failure is logged and harmless.
pub(crate) fn lower_priority() {
    use thread_priority::{ThreadPriority, ThreadPriorityValue, set_current_thread_priority};
    // The crate maps 0..=99 onto nice 19..=-20; 24 is nice 10.
    let lowered = ThreadPriorityValue::try_from(24u8)
        .map_err(|e| e.to_string())
        .and_then(|v| {
            set_current_thread_priority(ThreadPriority::Crossplatform(v))
                .map_err(|e| format!("{e:?}"))
        });
    if let Err(e) = lowered {
        tracing::debug!(error = %e, "could not lower a background thread's priority");
    }
}

/// The thread: wait to be woken (or `IDLE_WAKE`), run what is due, until stopped or the
/// store is gone.
fn run(work: &dyn Fn() -> bool, signal: &Signal) {
    lower_priority();
    loop {
        {
            let mut due = signal.due.lock();
            if !*due && !signal.stop.load(Ordering::Acquire) {
                signal.wake.wait_for(&mut due, IDLE_WAKE);
            }
            *due = false;
        }
        if signal.stop.load(Ordering::Acquire) {
            return;
        }
        if !work() {
            return;
        }
    }
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

#[cfg(test)]
mod tests {
    #[test]
    #[cfg(target_os = "linux")]
    fn background_threads_run_at_a_lower_priority() {
        let nice = std::thread::spawn(|| {
            super::lower_priority();
            // Field 19 of /proc/thread-self/stat, counted after the command's closing paren.
            let stat = std::fs::read_to_string("/proc/thread-self/stat").expect("stat");
            let after = stat.rsplit_once(')').expect("comm").1;
            after
                .split_whitespace()
                .nth(16)
                .expect("nice")
                .parse::<i32>()
                .expect("number")
        })
        .join()
        .expect("thread");
        assert!((5..=15).contains(&nice), "nice {nice}");
    }
}
