//! The lexical indexes (each user's keyword index and text column) of the users an open loaded
//! from a checkpoint, built in the background after the open (`docs/durability.md`,
//! "Recovery", R9).
//!
//! They are derived from the records and were most of the time of opening a large store
//! (`docs/benchmarks.md`, "Opening a store"). Until they are installed the store serves
//! everything else; keyword and hybrid searches wait (`wait`), text searches check each
//! record's content instead of the column, and writes leave the pending users' indexes alone.
//!
//! Guarantees: once `wait` returns, every user has its lexical indexes, equal to a build from
//! the live records then (`Table::install_lexical` applies what changed during the build). A
//! build thread that stops early (the store closing, or a panic) still releases the waiters; a
//! search then fails with `Internal` instead of answering from a missing index. `stop` (at
//! close) ends the thread within a few thousand records and joins it, so the store's lock is
//! free when the close returns.

use crate::kernel::table::{Lexical, PendingLexical};
use parking_lot::{Condvar, Mutex};
use rayon::prelude::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Instant;

/// The background build: whether it is done, its waiters, and its thread.
#[derive(Debug, Default)]
pub(crate) struct LexicalBuild {
    done: Mutex<bool>,
    finished: Condvar,
    /// Set at close: the build gives up.
    stop: AtomicBool,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl LexicalBuild {
    /// Blocks until the build is done (at once when nothing was pending). Never call it
    /// holding the state lock: the build takes it to install.
    pub(crate) fn wait(&self) {
        let mut done = self.done.lock();
        while !*done {
            self.finished.wait(&mut done);
        }
    }

    /// Whether it is done.
    pub(crate) fn is_done(&self) -> bool {
        *self.done.lock()
    }

    fn finish(&self) {
        *self.done.lock() = true;
        self.finished.notify_all();
    }

    /// Makes a running build give up, and waits for its thread.
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        let handle = self.thread.lock().take();
        if let Some(handle) = handle
            && handle.thread().id() != std::thread::current().id()
        {
            let _ = handle.join();
        }
    }
}

/// Marks the build done when dropped: at the end of the thread, whatever ended it.
struct FinishOnDrop(Arc<LexicalBuild>);

impl Drop for FinishOnDrop {
    fn drop(&mut self) {
        self.0.finish();
    }
}

/// Starts building the lexical indexes an open left `pending`, on a thread of its own; in
/// this thread when none can be started. `install` installs one user's (`Db::install_lexical`)
/// and returns false when the store is gone.
pub(crate) fn start(
    pending: Vec<PendingLexical>,
    build: &Arc<LexicalBuild>,
    install: impl Fn(&PendingLexical, Lexical) -> bool + Send + 'static,
) {
    if pending.is_empty() {
        build.finish();
        return;
    }
    // The work waits in a slot the thread takes it from: if the thread cannot start, the
    // closure is dropped but the work is still here to do in this thread.
    let work = Arc::new(Mutex::new(Some((pending, install))));
    let guard = FinishOnDrop(Arc::clone(build));
    let shared = Arc::clone(build);
    let handed = Arc::clone(&work);
    let spawned = std::thread::Builder::new()
        .name("amberdb-lexical".into())
        .spawn(move || {
            let _finish = guard;
            if let Some((pending, install)) = handed.lock().take() {
                build_and_install(&install, &shared.stop, pending);
            }
        });
    match spawned {
        Ok(handle) => *build.thread.lock() = Some(handle),
        Err(e) => {
            // The closure, and with it the guard, was dropped: waiters are released already,
            // so build here, before the open returns and anyone can search.
            tracing::warn!(error = %e, "the lexical index thread could not start; building in the open");
            if let Some((pending, install)) = work.lock().take() {
                for p in pending {
                    if let Some(built) = p.build(&build.stop) {
                        install(&p, built);
                    }
                }
            }
        }
    }
}

/// Builds every pending user's indexes from its snapshot (users in parallel, no lock held),
/// then installs each under the state's write lock. Gives up when `stop` is set or the store
/// is gone.
fn build_and_install(
    install: &dyn Fn(&PendingLexical, Lexical) -> bool,
    stop: &AtomicBool,
    pending: Vec<PendingLexical>,
) {
    let started = Instant::now();
    let users = pending.len();
    let built: Option<Vec<_>> = pending
        .into_par_iter()
        .map(|p| p.build(stop).map(|lexical| (p, lexical)))
        .collect();
    let Some(built) = built else {
        return;
    };
    for (p, lexical) in built {
        if !install(&p, lexical) {
            return;
        }
    }
    tracing::info!(
        users,
        seconds = started.elapsed().as_secs_f64(),
        "keyword and text indexes built after the open"
    );
}
