//! Group commit: concurrent writers share fsyncs (`docs/durability.md` step 6), the local
//! journal's acknowledgement (`crate::kernel::journal::local`).
//!
//! Writers append their frame under the writer lock and publish its sequence number as
//! `written`. To make it durable, a writer either becomes the sync leader (no sync in flight):
//! it fsyncs the active log file outside every lock and then marks everything up to the
//! `written` it saw before the fsync as durable; or it waits on the condition variable for a
//! leader whose sync covers it. One fsync thus acknowledges every frame appended before it
//! started. A failed fsync poisons the store for good (invariant 7): the page cache can no
//! longer be trusted, so nothing is retried and every waiter gets `Poisoned`. The first cause
//! of poisoning is kept ([`PoisonCause`]: operation, file, OS error, time) and logged once.

use crate::kernel::error::{KernelError, Result};
use crate::kernel::record::Timestamp;
use crate::kernel::storage::StorageFile;
use parking_lot::{Condvar, Mutex};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Why a store refuses writes: the first failure that poisoned it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoisonCause {
    /// What failed: `append`, `fsync`, `apply`, `checkpoint`, or on a partition replica
    /// `replicate` (the stream did not hold a write, or a message could not be followed).
    pub operation: &'static str,
    /// The file it failed on.
    pub path: PathBuf,
    /// The operating system's error (or the engine's reason).
    pub error: String,
    /// When.
    pub since: Timestamp,
}

impl PoisonCause {
    pub(crate) fn new(operation: &'static str, path: &Path, error: impl ToString) -> PoisonCause {
        PoisonCause {
            operation,
            path: path.to_path_buf(),
            error: error.to_string(),
            since: Timestamp::now(),
        }
    }
}

#[derive(Debug)]
struct SyncState {
    durable: u64,
    syncing: bool,
}

/// Shared sync state of one store.
#[derive(Debug)]
pub(crate) struct GroupCommit {
    state: Mutex<SyncState>,
    cond: Condvar,
    written: AtomicU64,
    poisoned: AtomicBool,
    cause: Mutex<Option<PoisonCause>>,
    fsyncs: AtomicU64,
}

impl GroupCommit {
    /// `durable`: the last sequence number known durable at open.
    pub(crate) fn new(durable: u64) -> GroupCommit {
        GroupCommit {
            state: Mutex::new(SyncState {
                durable,
                syncing: false,
            }),
            cond: Condvar::new(),
            written: AtomicU64::new(durable),
            poisoned: AtomicBool::new(false),
            cause: Mutex::new(None),
            fsyncs: AtomicU64::new(0),
        }
    }

    /// Refuses writes from now on; the first cause is kept and logged.
    pub(crate) fn poison(&self, cause: PoisonCause) {
        {
            let mut first = self.cause.lock();
            if first.is_none() {
                tracing::error!(
                    operation = cause.operation,
                    path = %cause.path.display(),
                    error = %cause.error,
                    "the store is poisoned: writes are refused until it is reopened; reads go on"
                );
                *first = Some(cause);
            }
        }
        self.poisoned.store(true, Ordering::SeqCst);
        let _guard = self.state.lock();
        self.cond.notify_all();
    }

    pub(crate) fn is_poisoned(&self) -> bool {
        self.poisoned.load(Ordering::SeqCst)
    }

    /// What poisoned the store, if anything did.
    pub(crate) fn cause(&self) -> Option<PoisonCause> {
        self.cause.lock().clone()
    }

    /// Publishes that frames up to `seq` are appended. Called under the writer lock.
    pub(crate) fn set_written(&self, seq: u64) {
        self.written.store(seq, Ordering::SeqCst);
    }

    pub(crate) fn written(&self) -> u64 {
        self.written.load(Ordering::SeqCst)
    }

    pub(crate) fn durable(&self) -> u64 {
        self.state.lock().durable
    }

    /// Fsyncs performed so far.
    pub(crate) fn fsyncs(&self) -> u64 {
        self.fsyncs.load(Ordering::Relaxed)
    }

    /// Returns once every frame up to `seq` is durable. A leader fsyncs the file `active`
    /// names (the active log file, at its path) when it starts; frames are appended only to
    /// it, and a rotation happens only once everything written is durable, so that one fsync
    /// covers everything written before it.
    ///
    /// # Errors
    /// `Poisoned` if the store is or becomes poisoned first.
    pub(crate) fn wait_durable(
        &self,
        seq: u64,
        active: impl Fn() -> Option<(Arc<dyn StorageFile>, PathBuf)>,
    ) -> Result<()> {
        let mut s = self.state.lock();
        loop {
            if self.is_poisoned() {
                return Err(KernelError::Poisoned);
            }
            if s.durable >= seq {
                return Ok(());
            }
            if s.syncing {
                self.cond.wait(&mut s);
                continue;
            }
            let Some((file, path)) = active() else {
                return Err(KernelError::Internal {
                    context: "making the log durable",
                    reason: "no active log file (the open's replay has not opened one)".into(),
                });
            };
            s.syncing = true;
            let target = self.written();
            let synced = parking_lot::MutexGuard::unlocked(&mut s, || file.sync());
            s.syncing = false;
            self.fsyncs.fetch_add(1, Ordering::Relaxed);
            match synced {
                Ok(()) => s.durable = s.durable.max(target),
                Err(e) => {
                    // `poison` takes the state lock to wake waiters: release it first.
                    parking_lot::MutexGuard::unlocked(&mut s, || {
                        self.poison(PoisonCause::new("fsync", &path, e));
                    });
                }
            }
            self.cond.notify_all();
        }
    }
}
