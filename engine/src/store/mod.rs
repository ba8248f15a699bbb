//! `Store`: the public handle of one amberdb database: the kernel's `Db` with the store's
//! options and hooks. The memory operations (`crate::memory`) are further `impl Store` blocks.
//!
//! Guarantees: those of `Db` (durability, one frame per operation, poisoning, readers that
//! never wait for a writer's prepare), and invalid input is a typed error that changes
//! nothing.
//!
//! One front door, in groups by what a user does, each in its own file:
//! - opening: `store/open.rs`; looking after a store (checkpoint, purge, backup, index builds,
//!   archive retention, stats): `store/maintenance.rs`; writes and batches, the handle's scope
//!   and durability: here;
//! - memories: storing (`memory/write/`), reading, history and lineage, feedback
//!   (`memory/read.rs`), compaction (`memory/compaction.rs`), mending (`memory/mend.rs`);
//! - search (`memory/search/`) and the MemFuse query (`memory/query.rs`);
//! - entities and messages (`memory/entities.rs`), tags and snapshots (`memory/tags.rs`),
//!   items (`memory/items.rs`);
//! - the embedder: re-embedding (`memory/reembed.rs`), restoring vectors (`memory/restore.rs`);
//! - a partition replica of a cluster: applying its stream, claiming it (`store/replica.rs`).

mod maintenance;
mod open;
mod replica;
mod requests;

pub use maintenance::{IndexStats, IvfSegmentStats, Stats, restore};
pub use replica::PartitionLog;
pub use requests::{Begun, RequestRun};

use crate::error::{EngineError, Result};
use crate::kernel::db::{Db, DeferredWrites, Durability, NextIds, PendingDurable, RequestMark};
use crate::kernel::log::Op;
use crate::kernel::record::{self, DEFAULT_USER, MemoryId, Timestamp};
use crate::kernel::recovery::OpenReport;
use crate::kernel::request::RequestId;
use crate::kernel::state::State;
use crate::options::StoreOptions;
use parking_lot::RwLockReadGuard;
use std::path::Path;
use std::sync::Arc;

pub(crate) struct Inner {
    pub(crate) db: Arc<Db>,
    pub(crate) options: StoreOptions,
    /// The embedder the store's vectors come from now: `options.embedder` until a
    /// re-embedding switches it (`Store::reembed`), which holds this lock for the switch.
    pub(crate) embedding: parking_lot::RwLock<Embedding>,
    /// Embeddings of the category label texts by the embedder of one epoch, computed on
    /// first need.
    pub(crate) category_labels: parking_lot::Mutex<Option<CategoryLabels>>,
    /// Held while a re-embedding runs: one at a time.
    pub(crate) reembedding: parking_lot::Mutex<()>,
    /// The request ids whose first attempt runs now (`Store::begin_request`).
    pub(crate) running_requests: parking_lot::Mutex<std::collections::HashSet<RequestId>>,
}

/// The category labels' vectors and the model epoch of the embedder that computed them.
pub(crate) type CategoryLabels = (u64, Arc<Vec<Vec<f32>>>);

/// An embedder and the model epoch it belongs to (`State::model_epoch`): vectors it computed
/// may be committed, or searched with, only while the state's epoch is the same.
#[derive(Clone)]
pub(crate) struct Embedding {
    pub(crate) embedder: Arc<dyn amberdb_embed::Embedder>,
    pub(crate) epoch: u64,
}

impl Drop for Inner {
    /// The last handle is gone: the maintenance thread finishes what it is doing and stops, a
    /// running index build stops (it changes nothing then), and both threads are joined, so
    /// the store's lock is released when this returns.
    fn drop(&mut self) {
        self.db.stop_background();
    }
}

/// An open amberdb store. Cheap to clone; all clones share one database.
#[derive(Clone)]
pub struct Store {
    pub(crate) inner: Arc<Inner>,
    /// The one user this handle acts for (`Store::scoped`), or every user.
    scope: Option<Arc<str>>,
    /// How this handle's writes are acknowledged: at once, or with a batch
    /// (`Store::deferred_batch`).
    durability: Durability,
    /// The request id this handle's first logged write carries (`Store::begin_request`).
    request: Option<Arc<RequestMark>>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("dir", &self.dir())
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

impl Store {
    /// This store as one user sees it: every call acts for `user_id` only. A request naming
    /// another user is refused (`OutOfScope`), and an id of another user's record, live or
    /// archived, is not found (`NotFound`), so its existence does not leak. What a server does
    /// for a connection whose token is bound to a user.
    ///
    /// # Errors
    /// `Invalid` for a bad user id.
    pub fn scoped(&self, user_id: &str) -> Result<Store> {
        record::validate_id("user_id", user_id)?;
        Ok(Store {
            inner: Arc::clone(&self.inner),
            scope: Some(Arc::from(user_id)),
            durability: self.durability.clone(),
            request: self.request.clone(),
        })
    }

    /// The user this handle is scoped to, if any.
    #[must_use]
    pub fn scope(&self) -> Option<&str> {
        self.scope.as_deref()
    }

    /// The user a request acts for: the one it names, else the scope's, else the default
    /// user; checked to be a valid id inside the scope.
    pub(crate) fn user_for(&self, named: Option<&str>) -> Result<String> {
        let user = match (&self.scope, named) {
            (Some(scope), Some(named)) if named != &**scope => {
                return Err(EngineError::OutOfScope {
                    field: "user_id",
                    user: named.to_owned(),
                    scope: scope.to_string(),
                });
            }
            (_, Some(named)) => named,
            (Some(scope), None) => scope,
            (None, None) => DEFAULT_USER,
        };
        record::validate_id("user_id", user)?;
        Ok(user.to_owned())
    }

    /// Whether this handle may reach the record `id` (live or archived): `NotFound` when it is
    /// another user's, as if it did not exist.
    pub(crate) fn reach(&self, state: &State, id: MemoryId) -> Result<()> {
        let Some(scope) = &self.scope else {
            return Ok(());
        };
        let owner = state
            .get(id)
            .or_else(|| state.archived(id).map(|a| &a.record))
            .map(|m| m.user_id.as_str());
        match owner {
            Some(owner) if owner != &**scope => Err(EngineError::NotFound { id }),
            _ => Ok(()),
        }
    }

    /// The store's clock.
    pub(crate) fn now(&self) -> Timestamp {
        self.inner.db.now()
    }

    /// Whether the keyword indexes and text columns the open left to the background are
    /// built (`docs/durability.md`, "Recovery", R9). Until then keyword and hybrid searches
    /// wait for them; a server waits before it gives such a request a running slot.
    #[must_use]
    pub fn lexical_ready(&self) -> bool {
        self.inner.db.lexical_ready()
    }

    /// What opening found and repaired.
    #[must_use]
    pub fn open_report(&self) -> &OpenReport {
        self.inner.db.open_report()
    }

    /// The store's directory.
    #[must_use]
    pub fn dir(&self) -> &Path {
        self.inner.db.dir()
    }

    /// Bytes of the store's files (logs, checkpoints, segments, identity).
    #[must_use]
    pub fn bytes_on_disk(&self) -> u64 {
        self.inner.db.bytes_on_disk()
    }

    /// The model id of the store's embedder: the one it was opened with, or the one a
    /// re-embedding switched it to since.
    #[must_use]
    pub fn embedder_id(&self) -> String {
        self.embedding().embedder.model_id().to_owned()
    }

    /// The cluster partition whose ids this store assigns (0 on a single node).
    #[must_use]
    pub fn partition(&self) -> u32 {
        self.inner.options.partition
    }

    /// The thresholds that read the cosines of the store's current embedder
    /// (`hooks::Calibration`): they switch with a re-embedding's switch.
    pub(crate) fn calibration(&self) -> &'static crate::hooks::Calibration {
        crate::hooks::Calibration::of_model(self.embedding().embedder.model_id())
    }

    /// The embedder the store's vectors come from now, and its epoch.
    pub(crate) fn embedding(&self) -> Embedding {
        self.inner.embedding.read().clone()
    }

    /// The write path for an operation whose vectors the embedder of `epoch` computed:
    /// `None`, with nothing written, when a re-embedding has switched the store to another
    /// embedder since (the caller embeds again).
    pub(crate) fn commit_embedded<T>(
        &self,
        epoch: u64,
        prepare: impl FnOnce(&NextIds, &State) -> Result<(Option<Op>, T)>,
    ) -> Result<Option<T>> {
        self.commit(|ids, state| {
            if state.model_epoch() != epoch {
                return Ok((None, None));
            }
            let (op, value) = prepare(ids, state)?;
            Ok((op, Some(value)))
        })
    }

    /// The write path (`Db::commit`): `prepare` turns a request into one logged operation.
    pub(crate) fn commit<T>(
        &self,
        prepare: impl FnOnce(&NextIds, &State) -> Result<(Option<Op>, T)>,
    ) -> Result<T> {
        self.inner
            .db
            .commit(&self.durability, self.request.as_deref(), prepare)
    }

    /// The state, for reading.
    pub(crate) fn read(&self) -> RwLockReadGuard<'_, State> {
        self.inner.db.read()
    }

    /// `OutOfScope` for a handle scoped to one user: `what` acts on every user's records.
    pub(crate) fn every_user(&self, what: &'static str) -> Result<()> {
        match self.scope() {
            Some(scope) => Err(EngineError::OutOfScope {
                field: what,
                user: "every user".into(),
                scope: scope.to_owned(),
            }),
            None => Ok(()),
        }
    }

    /// Runs `f` with a handle whose writes each return as soon as they are appended and
    /// applied, then makes them all durable with one fsync (shared with concurrent writers,
    /// `docs/durability.md`, "Group commit") before returning. For a server answering a
    /// pipelined batch: it replies to none of the batch's writes until this returns `Ok`, so
    /// acknowledged still means durable, and a batch of N stores costs one fsync instead of N.
    /// Only the handle `f` is given defers its writes; other handles, and other threads, write
    /// as they always do, and may read a batch's writes before they are durable (as they may
    /// read any write during its own fsync). Under `SyncPolicy::Batch` / `None` it only runs
    /// `f`.
    ///
    /// # Errors
    /// `Poisoned` if the final fsync fails: then none of the batch's writes may be reported as
    /// stored (they may or may not survive a crash). A batch that wrote nothing never fails
    /// here, so reads keep answering on a poisoned store. `f`'s own errors are in its result.
    pub fn durable_batch<T>(&self, f: impl FnOnce(&Store) -> T) -> Result<T> {
        let (value, pending) = self.deferred_batch(f);
        pending.wait()?;
        Ok(value)
    }

    /// `durable_batch` in two halves: runs `f` as it does and returns what must still become
    /// durable, so that the caller can give up what it holds for the work (a CPU slot) before
    /// it waits for the fsync, which many batches share. Nothing of the batch may be reported
    /// stored before [`PendingDurable::wait`] returns `Ok`. Called on a handle that is itself
    /// a batch's, `f`'s writes join that batch and what this returns waits for nothing.
    pub fn deferred_batch<T>(&self, f: impl FnOnce(&Store) -> T) -> (T, PendingDurable) {
        let (batch, outermost) = match &self.durability {
            Durability::Deferred(batch) => (Arc::clone(batch), false),
            Durability::Immediate | Durability::Forced => {
                (Arc::new(DeferredWrites::default()), true)
            }
        };
        let handle = Store {
            inner: Arc::clone(&self.inner),
            scope: self.scope.clone(),
            durability: Durability::Deferred(Arc::clone(&batch)),
            request: self.request.clone(),
        };
        let value = f(&handle);
        let pending = if outermost {
            self.inner.db.pending(&batch)
        } else {
            self.inner.db.pending(&DeferredWrites::default())
        };
        (value, pending)
    }

    /// Makes every write so far durable (a no-op cost under `Always`).
    ///
    /// # Errors
    /// `Poisoned` if the fsync fails.
    pub fn flush(&self) -> Result<()> {
        Ok(self.inner.db.flush()?)
    }

    /// Flushes and closes this handle. The store stays open while other clones live.
    ///
    /// # Errors
    /// As `flush`.
    pub fn close(self) -> Result<()> {
        self.flush()
    }
}
