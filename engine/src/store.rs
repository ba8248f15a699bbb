//! `Store`: the public handle of one amberdb database: the kernel's `Db` with the store's
//! options and hooks. The memory operations (`crate::memory`) are further `impl Store` blocks.
//!
//! Guarantees: those of `Db` (durability, one frame per operation, poisoning, readers that
//! never wait for a writer's prepare), and invalid input is a typed error that changes
//! nothing.

use crate::kernel::backup::Backup;
use crate::kernel::commit::PoisonCause;
use crate::kernel::config::DbConfig;
use crate::kernel::db::{Db, DeferredWrites, Durability, IndexBuild, NextIds, PendingDurable};
use crate::kernel::error::{EngineError, Result};
use crate::kernel::log::Op;
use crate::kernel::maintenance::MaintenanceCounters;
use crate::kernel::maintenance::Purge;
use crate::kernel::record::{self, Category, DEFAULT_USER, Kind, Memory, MemoryId, Timestamp};
use crate::kernel::recovery::OpenReport;
use crate::kernel::state::State;
use crate::options::{MAX_MEMORY_LIMIT, StoreOptions};
use parking_lot::RwLockReadGuard;
use std::path::Path;
use std::sync::Arc;

/// Counters of a store.
#[derive(Debug, Clone, PartialEq)]
pub struct Stats {
    /// Live memories, all users.
    pub memories: usize,
    /// Users with at least one memory.
    pub users: usize,
    /// Live memories per kind, in `Kind::ALL` order.
    pub by_kind: Vec<(Kind, usize)>,
    /// Live memories per category, in `Category::ALL` order.
    pub by_category: Vec<(Category, usize)>,
    /// Sealed vector segments.
    pub sealed_segments: usize,
    /// Rows in the growing segment.
    pub growing_rows: usize,
    /// Sequence number of the last logged operation.
    pub last_seq: u64,
    /// Sequence number of the last durable one.
    pub durable_seq: u64,
    /// Sequence number of the newest checkpoint (0 if none).
    pub checkpoint_seq: u64,
    /// fsyncs of the log since open (group commit shares them).
    pub log_fsyncs: u64,
    /// Whether writes are refused after a failed write or fsync.
    pub poisoned: bool,
    /// What poisoned the store: operation, file, OS error, since when.
    pub poison_cause: Option<PoisonCause>,
    /// Writes refused since open because the disk was full (each cut back, nothing stored).
    pub disk_full_refusals: u64,
    /// Reads whose access could not be recorded (disk full, poisoned store): they were
    /// answered, only their access count was skipped.
    pub accesses_not_recorded: u64,
    /// The configured memory limit.
    pub memory_limit: usize,
    /// The IVF index: its segments and its builds.
    pub index: IndexStats,
    /// Checkpoints and retention (`docs/durability.md`, "Maintenance").
    pub maintenance: MaintenanceCounters,
    /// The embedder the store's vectors come from, and its dimension.
    pub embedder: (String, usize),
    /// A re-embedding with vectors staged and no switch yet (`Store::reembed`).
    pub reembedding: Option<crate::memory::ReembedStatus>,
    /// Whether the keyword indexes and text columns are built: false for the seconds after
    /// an open of a large store while they are built in the background (keyword and hybrid
    /// searches wait for them; `docs/durability.md`, "Recovery", R9).
    pub lexical_ready: bool,
    /// Records whose vectors were in a damaged segment and are not restored yet: found by
    /// GET, listings and keyword search, not by vector search (`docs/durability.md`,
    /// "Recovery", R4b). 0 for a whole store.
    pub unindexed: usize,
}

/// The IVF index in STATS (`docs/ivf.md`).
#[derive(Debug, Clone, PartialEq)]
pub struct IndexStats {
    /// Each IVF segment, in key order.
    pub segments: Vec<IvfSegmentStats>,
    /// Rows in sealed flat segments (scanned whole by every search).
    pub flat_rows: usize,
    /// A build is running.
    pub building: bool,
    /// Builds finished since open.
    pub builds: u64,
    /// Builds that failed since open (each left the store unchanged).
    pub failures: u64,
    /// The last build that finished.
    pub last_build: Option<IndexBuild>,
    /// Why the last failed build failed.
    pub last_error: Option<String>,
}

/// One IVF segment in STATS.
#[derive(Debug, Clone, PartialEq)]
pub struct IvfSegmentStats {
    /// Rows, live or under a tombstone.
    pub rows: usize,
    /// Lists.
    pub nlist: usize,
    /// Lists a search probes by default.
    pub nprobe: u32,
    /// Mean recall@10 measured at `nprobe` on held-out rows when it was built.
    pub built_recall: f32,
}

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
    /// Whether `dir` holds a store: any of its files (`IDENTITY`, a log file, a checkpoint, a
    /// segment), so a store missing its `IDENTITY` counts and its open names the damage. A
    /// missing directory holds none. Tools that act on an existing store ask this first, as
    /// [`Store::open`] would create one.
    ///
    /// # Errors
    /// `Io` when `dir` exists and cannot be listed.
    pub fn exists(dir: impl AsRef<Path>) -> Result<bool> {
        let dir = dir.as_ref();
        // Through the storage seam, as every file access of the engine.
        use crate::kernel::storage::Storage as _;
        match crate::kernel::storage::FsStorage.list(dir) {
            Ok(names) => Ok(names
                .iter()
                .any(|n| crate::kernel::backup::is_store_file(n))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(EngineError::io(dir)(e)),
        }
    }

    /// Opens the store in `dir`, creating it if the directory is empty or missing.
    ///
    /// # Errors
    /// `Locked` if another process has it open, `EmbedderMismatch` if it was created with
    /// another embedder, `Corrupted` / `UnsupportedVersion` for damaged files (the message
    /// names the file and offset), `Io`, or `LimitExceeded` for a bad memory limit.
    pub fn open(dir: impl AsRef<Path>, options: StoreOptions) -> Result<Store> {
        if options.memory_limit == 0 || options.memory_limit > MAX_MEMORY_LIMIT {
            return Err(EngineError::LimitExceeded {
                what: "memory_limit",
                limit: MAX_MEMORY_LIMIT,
                got: options.memory_limit,
            });
        }
        options.hooks.validate()?;
        options.index.validate()?;
        StoreOptions::check_delta_max_share(options.delta_max_share)?;
        let config = DbConfig {
            storage: Arc::clone(&options.storage),
            sync: options.sync,
            seal_rows: options.seal_rows,
            checkpoint_bytes: options.checkpoint_bytes,
            log_tail_limit: options.log_tail_limit,
            delta_max_share: options.delta_max_share,
            maintenance_thread: options.maintenance_thread,
            purge_delay: options.purge_delay,
            archive_retention: options.archive_retention,
            vector_codes: options.vector_codes,
            clock: Arc::clone(&options.clock),
            index: options.index.clone(),
        };
        let db = Db::open(dir.as_ref(), &*options.embedder, config)?;
        let epoch = db.read().model_epoch;
        let inner = Arc::new(Inner {
            db,
            embedding: parking_lot::RwLock::new(Embedding {
                embedder: Arc::clone(&options.embedder),
                epoch,
            }),
            options,
            category_labels: parking_lot::Mutex::new(None),
            reembedding: parking_lot::Mutex::new(()),
        });
        // Records opened without their vectors (a damaged segment, R4b) get them back in the
        // background; without a maintenance thread the caller runs `Store::restore_vectors`.
        if inner.db.unindexed() > 0 && inner.options.maintenance_thread {
            crate::memory::start_restoring(&inner).map_err(EngineError::io(dir.as_ref()))?;
        }
        Ok(Store {
            inner,
            scope: None,
            durability: Durability::Immediate,
        })
    }

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
            .table
            .get(id)
            .or_else(|| state.table.archived(id).map(|a| &a.record))
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
            if state.model_epoch != epoch {
                return Ok((None, None));
            }
            let (op, value) = prepare(ids, state)?;
            Ok((op, Some(value)))
        })
    }

    /// Deletes a memory.
    ///
    /// # Errors
    /// `NotFound` if no live memory has `id`; `Poisoned`, `DiskFull`, `Io`.
    pub fn delete(&self, id: MemoryId) -> Result<()> {
        self.commit(|_, state| {
            self.reach(state, id)?;
            if !state.table.contains(id) {
                return Err(crate::memory::missing(state, id));
            }
            Ok((Some(Op::Delete { id }), ()))
        })
    }

    /// The write path (`Db::commit`): `prepare` turns a request into one logged operation.
    pub(crate) fn commit<T>(
        &self,
        prepare: impl FnOnce(&NextIds, &State) -> Result<(Option<Op>, T)>,
    ) -> Result<T> {
        self.inner.db.commit(&self.durability, prepare)
    }

    /// The state, for reading.
    pub(crate) fn read(&self) -> RwLockReadGuard<'_, State> {
        self.inner.db.read()
    }

    /// Seals the growing segment and writes a checkpoint now (`docs/durability.md` steps
    /// C0–C6), so that the next open replays only what follows, and removes what retention
    /// lets go. Writers wait only for its capture and finish, not for its files.
    ///
    /// # Errors
    /// `Poisoned`, or `Io` (which poisons the store).
    pub fn checkpoint(&self) -> Result<()> {
        self.inner.db.checkpoint()
    }

    /// Makes every memory deleted so far leave every file of the store now, and says what it
    /// removed (`docs/durability.md`, "Purge"): segments holding deleted rows are rewritten
    /// without them, a checkpoint is written, and the older checkpoint and every log file
    /// before the new one are removed, so deleted texts, tags and vectors are nowhere on disk.
    /// Until the next checkpoint the store has one checkpoint, read back before the older one
    /// went. Merged and superseded sources are kept (lineage, undo); memories deleted while it
    /// runs wait for the next purge. Reads and writes go on; writers wait only for the swaps.
    ///
    /// # Errors
    /// `Poisoned`, `Io`, `DiskFull`, `Internal`; a failure before the swap changes nothing.
    pub fn purge(&self) -> Result<Purge> {
        self.inner.db.purge()
    }

    /// Copies the store into `dest` (a new or empty directory, not inside the store) as it is
    /// at one commit, while reads and writes go on (`docs/durability.md`, "Backup and
    /// restore"): the newest checkpoint, its segments and the log after it, byte for byte, so
    /// ids, timestamps, lineage, access counts, tags and snapshots all come along. `IDENTITY` is
    /// written last, so an interrupted backup never opens. Checkpoints wait while it copies.
    /// Opened, the backup is the store after `Backup::seq`; `amberdb::restore` puts it back.
    ///
    /// # Errors
    /// `Invalid` for `dest`; `Poisoned` (reopen first); `Io`, `DiskFull` (what was written is
    /// removed). A scoped store refuses (`OutOfScope`): a backup holds every user.
    pub fn backup(&self, dest: impl AsRef<Path>) -> Result<Backup> {
        self.every_user("backup")?;
        self.inner.db.backup(dest.as_ref())
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

    /// Pauses (`true`) or resumes (`false`) the store's automatic work: due checkpoints, purges
    /// and archive retention wait while paused, and run when it resumes (`docs/durability.md`,
    /// "Maintenance"). Explicit calls (`checkpoint`, `purge`, `backup`) still run. While paused
    /// the log grows past `checkpoint_bytes`, and an open after a crash replays all of it.
    pub fn pause_maintenance(&self, paused: bool) {
        self.inner.db.maintenance().set_paused(paused);
        self.inner.db.log_room_changed();
    }

    /// Forgets now the archived records `StoreOptions::archive_retention` lets go (the
    /// maintenance thread does it on its own, `docs/semantics.md`, "Archive retention"), and
    /// says how many. Their texts leave the files at the next purge.
    ///
    /// # Errors
    /// As any write.
    pub fn apply_archive_retention(&self) -> Result<usize> {
        self.inner.db.apply_archive_retention()
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
            Durability::Immediate => (Arc::new(DeferredWrites::default()), true),
        };
        let handle = Store {
            inner: Arc::clone(&self.inner),
            scope: self.scope.clone(),
            durability: Durability::Deferred(Arc::clone(&batch)),
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
        self.inner.db.flush()
    }

    /// Flushes and closes this handle. The store stays open while other clones live.
    ///
    /// # Errors
    /// As `flush`.
    pub fn close(self) -> Result<()> {
        self.flush()
    }

    /// Ids of every live memory this handle reaches (every user's, or its scope's), ascending:
    /// what an export walks (with `get`, skipping any deleted meanwhile) without holding the
    /// store's lock while it writes.
    #[must_use]
    pub fn memory_ids(&self) -> Vec<MemoryId> {
        let state = self.read();
        let mine = |m: &&Memory| self.scope.as_deref().is_none_or(|s| m.user_id == s);
        state.table.iter().filter(mine).map(|m| m.id).collect()
    }

    /// The memory with `id`. A plain read: it does not count as an access.
    ///
    /// # Errors
    /// `NotFound`; `Archived` (with the successor) for a merged or superseded id.
    pub fn get(&self, id: MemoryId) -> Result<Memory> {
        let state = self.read();
        self.reach(&state, id)?;
        state
            .table
            .get(id)
            .cloned()
            .ok_or_else(|| crate::memory::missing(&state, id))
    }

    /// The stored vector of `id`.
    ///
    /// # Errors
    /// `NotFound`.
    pub fn vector(&self, id: MemoryId) -> Result<Vec<f32>> {
        let state = self.read();
        self.reach(&state, id)?;
        state
            .vectors
            .vector(id.0)
            .map(<[f32]>::to_vec)
            .ok_or(EngineError::NotFound { id })
    }

    /// Tag frequencies of the user's live memories, most frequent first (then alphabetical).
    ///
    /// # Errors
    /// `Invalid` for a bad user id, `OutOfScope` for another user than this handle's.
    pub fn tag_frequencies(&self, user_id: Option<&str>) -> Result<Vec<(String, u64)>> {
        let user = self.user_for(user_id)?;
        let state = self.read();
        let mut v: Vec<(String, u64)> = state
            .table
            .tag_frequencies(&user)
            .map(|f| f.iter().map(|(t, n)| (t.clone(), *n)).collect())
            .unwrap_or_default();
        v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        Ok(v)
    }

    /// Counters.
    #[must_use]
    pub fn stats(&self) -> Stats {
        let c = self.inner.db.counters();
        let state = self.read();
        let by_kind = Kind::ALL
            .iter()
            .map(|k| (*k, state.table.member_count(|u| u.kind_members.get(k))))
            .collect();
        let by_category = Category::ALL
            .iter()
            .map(|c| (*c, state.table.member_count(|u| u.category_members.get(c))))
            .collect();
        Stats {
            memories: state.table.len(),
            users: state.table.users(),
            by_kind,
            by_category,
            sealed_segments: c.sealed_segments,
            growing_rows: c.growing_rows,
            last_seq: c.last_seq,
            durable_seq: c.durable_seq,
            checkpoint_seq: c.checkpoint_seq,
            log_fsyncs: c.log_fsyncs,
            poisoned: c.poison_cause.is_some(),
            poison_cause: c.poison_cause,
            disk_full_refusals: c.disk_full_refusals,
            accesses_not_recorded: c.accesses_not_recorded,
            memory_limit: self.inner.options.memory_limit,
            index: index_stats(&state, self.inner.db.index_counters()),
            maintenance: MaintenanceCounters {
                purge_pending: self.inner.db.unpurged_for().map(|d| d.as_secs_f64()),
                ..self.inner.db.maintenance().counters()
            },
            embedder: (state.model.id.clone(), state.model.dim),
            reembedding: Store::reembed_status(&state),
            lexical_ready: self.inner.db.lexical_ready(),
            unindexed: state.unindexed.len(),
        }
    }

    /// Builds an IVF segment of the sealed flat segments now, whatever their size, waiting
    /// for a background build first (`docs/ivf.md`). `Ok(None)`: no flat segment to index (the
    /// growing rows are sealed by a checkpoint first: `checkpoint` then `build_index`).
    /// Searches and writes go on while it trains; they wait only for the swap.
    ///
    /// # Errors
    /// `Poisoned`, `Io`, `DiskFull`; a failed build leaves the store as it was.
    pub fn build_index(&self) -> Result<Option<IndexBuild>> {
        self.inner.db.build_index(true)
    }
}

fn index_stats(
    state: &crate::kernel::state::State,
    c: crate::kernel::db::IndexCounters,
) -> IndexStats {
    let mut segments = Vec::new();
    let mut flat_rows = 0;
    for seg in state.vectors.sealed() {
        match seg.as_ivf() {
            Some(ivf) => {
                let (nprobe, built_recall) = ivf.nprobe();
                segments.push(IvfSegmentStats {
                    rows: ivf.len(),
                    nlist: ivf.nlist(),
                    nprobe,
                    built_recall,
                });
            }
            None => flat_rows += seg.len(),
        }
    }
    IndexStats {
        segments,
        flat_rows,
        building: c.building,
        builds: c.builds,
        failures: c.failures,
        last_build: c.last,
        last_error: c.last_error,
    }
}
