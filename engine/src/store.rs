//! `Store`: the public handle of one amberdb database.
//!
//! Guarantees (each tested in `tests/it`): under `SyncPolicy::Always` a write that returns
//! `Ok` is durable and visible to every later read; each store or delete is one log frame, so
//! after any crash it is there whole or not at all; a failed append or fsync poisons the store
//! (writes refused until reopened); invalid input is a typed error and changes nothing.
//! Reads may observe a write while its fsync is still in flight (before it is acknowledged);
//! see `docs/durability.md`, "Visibility".

use crate::kernel::checkpoint::{format as ckpt_format, writer as ckpt_writer};
use crate::kernel::commit::{GroupCommit, PoisonCause};
use crate::kernel::error::{EngineError, Result};
use crate::kernel::log::Op;
use crate::kernel::log::format::{FRAME_PREFIX, MAX_FRAME_LEN, encode_frame};
use crate::kernel::log::writer::LogWriter;
use crate::kernel::record::{self, Category, DEFAULT_USER, Kind, Memory, MemoryId, Timestamp};
use crate::kernel::recovery::{self, OpenReport};
use crate::kernel::segment_file;
use crate::kernel::storage::StorageLock;
use crate::kernel::table::Table;
use crate::options::{MAX_MEMORY_LIMIT, StoreOptions, SyncPolicy};
use amberdb_index::{Collection, Scan, SearchParams};
use parking_lot::{Mutex, RwLock};
use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

thread_local! {
    /// Set inside `Store::durable_batch` on this thread: acknowledged writes skip their own
    /// wait for durability, and the batch waits once at its end.
    static DEFERRED: Cell<bool> = const { Cell::new(false) };
    /// The last sequence number an acknowledged write of this thread's batch appended (0: the
    /// batch wrote nothing, so it has nothing to make durable and a poisoned store does not
    /// fail it).
    static DEFERRED_SEQ: Cell<u64> = const { Cell::new(0) };
}

/// How long automatic checkpoints pause after one failed for a full disk.
const CHECKPOINT_RETRY_AFTER_DISK_FULL: Duration = Duration::from_secs(10);

/// Whether an I/O error says the disk (or the user's quota) is full: a write that failed so
/// before its fsync is cut back and refused, and the store stays writable.
pub(crate) fn is_disk_full(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
    )
}

/// Most results one search may ask for.
pub const MAX_K: usize = 1000;

/// What to search with.
#[derive(Debug, Clone, PartialEq)]
pub enum Query {
    /// Text, embedded with the store's embedder.
    Text(String),
    /// A vector of the store's dimension.
    Vector(Vec<f32>),
}

/// Which representation the scan reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ScanMode {
    /// Exact f32 scores (default).
    #[default]
    Exact,
    /// i8 codes first, exact re-rank of the candidates: fewer bytes, recall@10 >= 0.99.
    Compact,
}

/// Conditions a hit must meet; all are applied inside the vector scan.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// The user; `"default"` when `None`. Searches never cross users.
    pub user_id: Option<String>,
    /// Only this session.
    pub session_id: Option<String>,
    /// Only this agent.
    pub agent_id: Option<String>,
    /// Only this kind.
    pub kind: Option<Kind>,
    /// Only this category.
    pub category: Option<Category>,
    /// At least one of these tags (canonical form compared); empty means no tag condition.
    pub tags_any: Vec<String>,
    /// Created at or after.
    pub created_after: Option<Timestamp>,
    /// Created before.
    pub created_before: Option<Timestamp>,
}

impl Filter {
    /// Everything of one user.
    #[must_use]
    pub fn user(user_id: impl Into<String>) -> Filter {
        Filter {
            user_id: Some(user_id.into()),
            ..Filter::default()
        }
    }

    fn needs_record(&self) -> bool {
        self.session_id.is_some()
            || self.agent_id.is_some()
            || self.kind.is_some()
            || self.category.is_some()
            || !self.tags_any.is_empty()
            || self.created_after.is_some()
            || self.created_before.is_some()
    }

    fn matches(&self, m: &Memory, tags: &[String]) -> bool {
        self.session_id
            .as_ref()
            .is_none_or(|s| m.session_id.as_ref() == Some(s))
            && self
                .agent_id
                .as_ref()
                .is_none_or(|a| m.agent_id.as_ref() == Some(a))
            && self.kind.is_none_or(|k| m.kind == k)
            && self.category.is_none_or(|c| m.category == c)
            && (tags.is_empty() || m.tags.iter().any(|t| tags.contains(t)))
            && self.created_after.is_none_or(|t| m.created_at >= t)
            && self.created_before.is_none_or(|t| m.created_at < t)
    }
}

/// A search.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchRequest {
    /// Text or vector.
    pub query: Query,
    /// Results wanted, 1..=`MAX_K`.
    pub k: usize,
    /// Conditions.
    pub filter: Filter,
    /// Drop hits scoring below this cosine similarity.
    pub min_score: Option<f32>,
    /// Exact or compact scan.
    pub scan: ScanMode,
}

impl SearchRequest {
    /// The `k` best matches of `text` for the default user.
    #[must_use]
    pub fn text(text: impl Into<String>, k: usize) -> SearchRequest {
        SearchRequest {
            query: Query::Text(text.into()),
            k,
            filter: Filter::default(),
            min_score: None,
            scan: ScanMode::Exact,
        }
    }

    /// The `k` nearest to `vector` for the default user.
    #[must_use]
    pub fn vector(vector: Vec<f32>, k: usize) -> SearchRequest {
        SearchRequest {
            query: Query::Vector(vector),
            k,
            filter: Filter::default(),
            min_score: None,
            scan: ScanMode::Exact,
        }
    }

    /// Sets the filter.
    #[must_use]
    pub fn filter(mut self, filter: Filter) -> SearchRequest {
        self.filter = filter;
        self
    }
}

/// One search result.
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    /// The record.
    pub memory: Memory,
    /// Cosine similarity to the query; higher is closer.
    pub score: f32,
}

/// Counters of a store.
#[derive(Debug, Clone, PartialEq, Eq)]
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
}

pub(crate) struct State {
    pub(crate) table: Table,
    pub(crate) vectors: Collection,
}

pub(crate) struct Writer {
    log: LogWriter,
    next_seq: u64,
    pub(crate) next_id: u64,
    next_segment_id: u64,
    checkpoint_seq: u64,
    log_bytes_since_checkpoint: u64,
    checkpoints: Vec<u64>,
    segments: Vec<(u64, u64)>,
    /// Automatic checkpoints wait until then after one failed for a full disk.
    checkpoint_paused_until: Option<Instant>,
}

pub(crate) struct Inner {
    dir: PathBuf,
    pub(crate) options: StoreOptions,
    pub(crate) state: RwLock<State>,
    /// Embeddings of the category label texts, computed on first need.
    pub(crate) category_labels: std::sync::OnceLock<Vec<Vec<f32>>>,
    writer: Mutex<Writer>,
    commit: GroupCommit,
    /// `Stats::disk_full_refusals`.
    disk_full_refusals: AtomicU64,
    /// `Stats::accesses_not_recorded`.
    pub(crate) accesses_not_recorded: AtomicU64,
    report: OpenReport,
    _lock: Box<dyn StorageLock>,
}

/// An open amberdb store. Cheap to clone; all clones share one database.
#[derive(Clone)]
pub struct Store {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("dir", &self.inner.dir)
            .finish_non_exhaustive()
    }
}

impl Store {
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
        let dir = dir.as_ref().to_path_buf();
        let r = recovery::recover(&dir, &*options.storage, &*options.embedder)?;
        let commit = GroupCommit::new(r.last_seq, Arc::clone(&r.log.file), r.log.path.clone());
        let inner = Arc::new(Inner {
            dir,
            writer: Mutex::new(Writer {
                log_bytes_since_checkpoint: 0,
                log: r.log,
                next_seq: r.last_seq + 1,
                next_id: r.next_id,
                next_segment_id: r.next_segment_id,
                checkpoint_seq: r.checkpoint_seq,
                checkpoints: r.checkpoints,
                segments: r.segments,
                checkpoint_paused_until: None,
            }),
            state: RwLock::new(State {
                table: r.table,
                vectors: r.vectors,
            }),
            commit,
            disk_full_refusals: AtomicU64::new(0),
            accesses_not_recorded: AtomicU64::new(0),
            category_labels: std::sync::OnceLock::new(),
            report: r.report,
            _lock: r.lock,
            options,
        });
        if let SyncPolicy::Batch { interval } = inner.options.sync {
            let weak = Arc::downgrade(&inner);
            std::thread::Builder::new()
                .name("amberdb-batch-sync".into())
                .spawn(move || batch_sync_loop(&weak, interval))
                .map_err(EngineError::io(&inner.dir))?;
        }
        Ok(Store { inner })
    }

    /// The store's clock.
    pub(crate) fn now(&self) -> Timestamp {
        (self.inner.options.clock)()
    }

    /// What opening found and repaired.
    #[must_use]
    pub fn open_report(&self) -> &OpenReport {
        &self.inner.report
    }

    /// The store's directory.
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// Bytes of the store's files (logs, checkpoints, segments, identity).
    #[must_use]
    pub fn bytes_on_disk(&self) -> u64 {
        let storage = &*self.inner.options.storage;
        let dir = self.dir();
        storage
            .list(dir)
            .unwrap_or_default()
            .iter()
            .filter_map(|n| storage.len(&dir.join(n)).ok())
            .sum()
    }

    /// The model id of the store's embedder (what its `IDENTITY` pins).
    #[must_use]
    pub fn embedder_id(&self) -> &str {
        self.inner.options.embedder.model_id()
    }

    /// Deletes a memory.
    ///
    /// # Errors
    /// `NotFound` if no live memory has `id`; `Poisoned`, `DiskFull`, `Io`.
    pub fn delete(&self, id: MemoryId) -> Result<()> {
        self.commit(|_, state| {
            if state.table.get(id).is_none() {
                return Err(crate::memory::missing(state, id));
            }
            Ok((Some(Op::Delete { id }), ()))
        })
    }

    /// The write path, steps 3–7 of `docs/durability.md`: `prepare` checks the operation
    /// against the current state under the writer lock and returns it (or a caller error),
    /// with what the caller gets once it is durable. No operation means nothing to write.
    pub(crate) fn commit<T>(
        &self,
        prepare: impl FnOnce(&Writer, &State) -> Result<(Option<Op>, T)>,
    ) -> Result<T> {
        self.commit_as(true, prepare)
    }

    /// `commit` without waiting for durability in step 6 (`docs/durability.md`, "Access
    /// counts"): the frame is appended and applied, and becomes durable with the next
    /// acknowledged write, flush, checkpoint or close. For bookkeeping a reader should not wait
    /// an fsync for (access counts); never for anything a caller is told is stored.
    pub(crate) fn commit_unacknowledged<T>(
        &self,
        prepare: impl FnOnce(&Writer, &State) -> Result<(Option<Op>, T)>,
    ) -> Result<T> {
        self.commit_as(false, prepare)
    }

    fn commit_as<T>(
        &self,
        acknowledged: bool,
        prepare: impl FnOnce(&Writer, &State) -> Result<(Option<Op>, T)>,
    ) -> Result<T> {
        let inner = &*self.inner;
        let (seq, checkpoint_due, value) = {
            let mut w = inner.writer.lock();
            inner.commit.check()?;
            let mut state = inner.state.write();
            let (op, value) = prepare(&w, &state)?;
            let Some(op) = op else {
                return Ok(value);
            };
            let seq = w.next_seq;
            let frame = encode_frame(seq, &op);
            let body = frame.len() - FRAME_PREFIX;
            if body > MAX_FRAME_LEN as usize {
                return Err(EngineError::LimitExceeded {
                    what: "bytes of one atomic operation (its log frame)",
                    limit: MAX_FRAME_LEN as usize,
                    got: body,
                });
            }
            // step 4: append.
            match w.log.append_frame(&frame) {
                Ok(n) => w.log_bytes_since_checkpoint += n,
                Err(source) => return Err(self.append_failed(&w, source)),
            }
            if let Some(id) = op.max_new_id() {
                w.next_id = w.next_id.max(id + 1);
            }
            // step 5: apply, publish.
            let State { table, vectors } = &mut *state;
            if let Err(reason) = recovery::apply(table, vectors, op) {
                inner
                    .commit
                    .poison(PoisonCause::new("apply", &w.log.path, reason));
                return Err(EngineError::Internal {
                    context: "applying a logged operation",
                    reason: reason.to_owned(),
                });
            }
            w.next_seq = seq + 1;
            inner.commit.set_written(seq);
            (seq, self.checkpoint_due(&w, &state), value)
        };
        // step 6: durability per policy (inside `durable_batch`, once at the batch's end).
        if acknowledged && inner.options.sync == SyncPolicy::Always {
            if DEFERRED.get() {
                DEFERRED_SEQ.set(DEFERRED_SEQ.get().max(seq));
            } else {
                inner.commit.wait_durable(seq)?;
            }
        }
        // step 7: acknowledged. Housekeeping may follow, on acknowledged writes only: a reader
        // counting an access never pays for a checkpoint. Its failure is not this write's (the
        // write is durable): it poisons the store or, for a full disk, pauses checkpoints, and
        // is logged; the reply stays the write's own.
        if acknowledged && checkpoint_due {
            self.checkpoint_if_due();
        }
        Ok(value)
    }

    /// Step 4 failed. An append that failed for a full disk wrote nothing durable and was never
    /// acknowledged: its partial frame is cut back and the store stays writable (`DiskFull`).
    /// Any other failure, or a cut that fails, may leave a partial frame that a later append
    /// would bury mid-file, so it poisons the store (`docs/durability.md` step 4).
    fn append_failed(&self, w: &Writer, source: std::io::Error) -> EngineError {
        let inner = &*self.inner;
        let path = w.log.path.clone();
        if is_disk_full(&source) {
            match inner.options.storage.truncate(&path, w.log.bytes) {
                Ok(()) => {
                    inner.disk_full_refusals.fetch_add(1, Ordering::Relaxed);
                    return EngineError::DiskFull { path, source };
                }
                Err(cut) => {
                    inner.commit.poison(PoisonCause::new(
                        "append",
                        &path,
                        format!("{source}; cutting the partial frame back failed: {cut}"),
                    ));
                    return EngineError::Io { path, source };
                }
            }
        }
        inner
            .commit
            .poison(PoisonCause::new("append", &path, &source));
        EngineError::Io { path, source }
    }

    fn checkpoint_due(&self, w: &Writer, state: &State) -> bool {
        (w.log_bytes_since_checkpoint >= self.inner.options.checkpoint_bytes
            || state.vectors.growing_len() >= self.inner.options.seal_rows)
            && w.checkpoint_paused_until
                .is_none_or(|t| Instant::now() >= t)
    }

    /// Checkpoints if the thresholds are still crossed once the writer lock is held again
    /// (another writer may have checkpointed in between). A failure is logged, not returned:
    /// the write that found the checkpoint due was already acknowledged.
    fn checkpoint_if_due(&self) {
        if let Err(e) = self.checkpoint_under_lock(true) {
            tracing::error!(error = %e, "automatic checkpoint failed");
        }
    }

    /// Seals the growing segment and writes a checkpoint (`docs/durability.md` steps C0–C6),
    /// so that the next open replays only what follows. Blocks writers while it runs.
    ///
    /// # Errors
    /// `Poisoned`, or `Io` (which poisons the store).
    pub fn checkpoint(&self) -> Result<()> {
        self.checkpoint_under_lock(false)
    }

    /// Takes the writer lock and checkpoints (only if still due, when `only_if_due`). A failure
    /// before the commit point for a full disk removes what it wrote and pauses automatic
    /// checkpoints (`DiskFull`; the log still holds everything). Any other failure poisons
    /// the store.
    fn checkpoint_under_lock(&self, only_if_due: bool) -> Result<()> {
        let inner = &*self.inner;
        let mut w = inner.writer.lock();
        if only_if_due && !self.checkpoint_due(&w, &inner.state.read()) {
            return Ok(());
        }
        inner.commit.check()?;
        let result = self.checkpoint_locked(&mut w);
        match &result {
            Ok(()) => w.checkpoint_paused_until = None,
            Err(EngineError::DiskFull { .. }) => {
                w.checkpoint_paused_until = Some(Instant::now() + CHECKPOINT_RETRY_AFTER_DISK_FULL);
            }
            Err(EngineError::Poisoned) => {}
            Err(e) => {
                let path = match e {
                    EngineError::Io { path, .. } => path.clone(),
                    _ => inner.dir.clone(),
                };
                inner
                    .commit
                    .poison(PoisonCause::new("checkpoint", &path, e));
            }
        }
        result
    }

    /// Removes the files a checkpoint wrote before failing short of its commit point
    /// (`docs/durability.md`, C1–C4), so a full disk does not fill further with orphans and
    /// appends stay in the old log file, which ends where the next frame continues.
    ///
    /// # Errors
    /// `Io` for a file that exists and could not be removed: the caller poisons the store (a
    /// stray `wal-<S+1>.log` would later hold frames its header does not start at).
    fn undo_checkpoint_files(&self, created: &[PathBuf]) -> Result<()> {
        let storage = &*self.inner.options.storage;
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
            .sync_dir(&self.inner.dir)
            .map_err(EngineError::io(&self.inner.dir))
    }

    fn checkpoint_locked(&self, w: &mut Writer) -> Result<()> {
        let inner = &*self.inner;
        let storage = &*inner.options.storage;
        let dir = &inner.dir;
        // C0: everything appended is durable; the checkpoint covers exactly that.
        let seq = inner.commit.written();
        inner.commit.wait_durable(seq)?;
        if seq == w.checkpoint_seq {
            return Ok(());
        }
        // C1–C4: files; a failure before the commit point (C4) removes them again.
        let mut created = Vec::new();
        let written = self.write_checkpoint_files(w, seq, &mut created);
        let (segments, sealed, log) = match written {
            Ok(v) => v,
            Err(e) => {
                self.undo_checkpoint_files(&created)?;
                return Err(e);
            }
        };
        // C5: the sealed segment replaces the growing rows; with nothing live to seal, the
        // deleted rows are dropped so scans stop reading them. Then append to the new log.
        match sealed {
            None => {
                inner.state.write().vectors.drop_dead_growing();
            }
            Some(seg) => inner.state.write().vectors.seal_growing(seg).map_err(|e| {
                EngineError::Internal {
                    context: "replacing the growing rows by their sealed segment",
                    reason: e.to_string(),
                }
            })?,
        }
        w.segments = segments;
        w.checkpoint_seq = seq;
        w.checkpoints.push(seq);
        w.log_bytes_since_checkpoint = 0;
        inner
            .commit
            .set_file(Arc::clone(&log.file), log.path.clone());
        w.log = log;
        // C6: keep the two newest checkpoints.
        while w.checkpoints.len() > 2 {
            let old = w.checkpoints.remove(0);
            let path = dir.join(ckpt_format::file_name(old));
            storage.remove(&path).map_err(EngineError::io(&path))?;
        }
        storage.sync_dir(dir).map_err(EngineError::io(dir))
    }

    /// Steps C1–C4: the sealed segment, the next log file and the checkpoint file, each durable.
    /// Every file it creates is pushed to `created` first, for the caller to remove on failure.
    /// A write that fails for a full disk is `DiskFull`.
    #[expect(
        clippy::type_complexity,
        reason = "the three results of one step, used once"
    )]
    fn write_checkpoint_files(
        &self,
        w: &mut Writer,
        seq: u64,
        created: &mut Vec<PathBuf>,
    ) -> Result<(
        Vec<(u64, u64)>,
        Option<amberdb_index::FlatSegment>,
        LogWriter,
    )> {
        let inner = &*self.inner;
        let storage = &*inner.options.storage;
        let dir = &inner.dir;
        let io = |path: PathBuf| {
            move |source: std::io::Error| {
                if is_disk_full(&source) {
                    EngineError::DiskFull { path, source }
                } else {
                    EngineError::Io { path, source }
                }
            }
        };
        // C1: seal the growing rows.
        let (encoded, rows) = inner
            .state
            .read()
            .vectors
            .encode_growing(inner.options.vector_codes)
            .map_err(|e| EngineError::Internal {
                context: "encoding the growing rows as a segment",
                reason: e.to_string(),
            })?;
        let mut segments = w.segments.clone();
        let sealed = if rows > 0 {
            let id = w.next_segment_id;
            let name = segment_file::file_name(id);
            created.push(dir.join(&name));
            // Never reuse the id, even if this attempt fails (durability.md, crash points).
            w.next_segment_id += 1;
            crate::kernel::storage::write_atomic(storage, dir, &name, &encoded)
                .map_err(io(dir.join(&name)))?;
            segments.push((id, rows as u64));
            Some(segment_file::open(storage, dir, id, rows as u64)?)
        } else {
            None
        };
        drop(encoded);
        // C2: the log file that follows the checkpoint exists before the checkpoint does, so
        // a checkpoint at S without `wal-<S+1>.log` means a lost log file (R5).
        let log_path = dir.join(crate::kernel::log::writer::file_name(seq + 1));
        created.push(log_path.clone());
        let log = LogWriter::create(storage, dir, seq + 1).map_err(io(log_path))?;
        // C3–C4: the checkpoint, atomically; the rename is the commit point.
        let bytes = {
            let state = inner.state.read();
            let aux = state.table.aux_ops(inner.options.embedder.dim());
            ckpt_writer::encode(seq, w.next_id, &segments, &aux, state.table.iter())
        };
        let name = ckpt_format::file_name(seq);
        created.push(dir.join(&name));
        crate::kernel::storage::write_atomic(storage, dir, &name, &bytes)
            .map_err(io(dir.join(&name)))?;
        Ok((segments, sealed, log))
    }

    /// Runs `f`, whose writes on this thread each return as soon as they are appended and
    /// applied, then makes them all durable with one fsync (shared with concurrent writers,
    /// `docs/durability.md`, "Group commit") before returning. For a server answering a
    /// pipelined batch: it replies to none of the batch's writes until this returns `Ok`, so
    /// acknowledged still means durable, and a batch of N stores costs one fsync instead of N.
    /// Other threads may read a batch's writes before they are durable (as they may read any
    /// write during its own fsync). Under `SyncPolicy::Batch` / `None` it only runs `f`.
    ///
    /// # Errors
    /// `Poisoned` if the final fsync fails: then none of the batch's writes may be reported as
    /// stored (they may or may not survive a crash). A batch that wrote nothing never fails
    /// here, so reads keep answering on a poisoned store. `f`'s own errors are in its result.
    pub fn durable_batch<T>(&self, f: impl FnOnce() -> T) -> Result<T> {
        let (value, pending) = self.deferred_batch(f);
        pending.wait()?;
        Ok(value)
    }

    /// `durable_batch` in two halves: runs `f` as it does and returns what must still become
    /// durable, so that the caller can give up what it holds for the work (a CPU slot) before
    /// it waits for the fsync, which many batches share. Nothing of the batch may be reported
    /// stored before [`PendingDurable::wait`] returns `Ok`.
    pub fn deferred_batch<T>(&self, f: impl FnOnce() -> T) -> (T, PendingDurable) {
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
                store: self.clone(),
                seq,
            },
        )
    }

    /// Makes every write so far durable (a no-op cost under `Always`).
    ///
    /// # Errors
    /// `Poisoned` if the fsync fails.
    pub fn flush(&self) -> Result<()> {
        let seq = self.inner.commit.written();
        self.inner.commit.wait_durable(seq)
    }

    /// Flushes and closes this handle. The store stays open while other clones live.
    ///
    /// # Errors
    /// As `flush`.
    pub fn close(self) -> Result<()> {
        self.flush()
    }

    /// Ids of every live memory of every user, ascending: what an export walks (with `get`,
    /// skipping any deleted meanwhile) without holding the store's lock while it writes.
    #[must_use]
    pub fn memory_ids(&self) -> Vec<MemoryId> {
        self.inner.state.read().table.iter().map(|m| m.id).collect()
    }

    /// The memory with `id`. A plain read: it does not count as an access.
    ///
    /// # Errors
    /// `NotFound`; `Archived` (with the successor) for a merged or superseded id.
    pub fn get(&self, id: MemoryId) -> Result<Memory> {
        let state = self.inner.state.read();
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
        self.inner
            .state
            .read()
            .vectors
            .vector(id.0)
            .map(<[f32]>::to_vec)
            .ok_or(EngineError::NotFound { id })
    }

    /// The nearest memories to the query that pass the filter, best first (score, then id).
    ///
    /// # Errors
    /// `Invalid` / `LimitExceeded` for a bad request, `DimensionMismatch`, `Embed`.
    pub fn search(&self, req: &SearchRequest) -> Result<Vec<Hit>> {
        if req.k == 0 || req.k > MAX_K {
            return Err(EngineError::LimitExceeded {
                what: "k",
                limit: MAX_K,
                got: req.k,
            });
        }
        if let Some(u) = &req.filter.user_id {
            record::validate_id("user_id", u)?;
        }
        if req.min_score.is_some_and(|s| !s.is_finite()) {
            return Err(EngineError::Invalid {
                field: "min_score",
                reason: "must be a finite number".into(),
            });
        }
        let vector = match &req.query {
            Query::Text(t) => {
                if t.trim().is_empty() {
                    return Err(EngineError::Invalid {
                        field: "query",
                        reason: "must not be empty".into(),
                    });
                }
                self.inner.options.embedder.embed_query(t)?
            }
            Query::Vector(v) => v.clone(),
        };
        let user = req.filter.user_id.as_deref().unwrap_or(DEFAULT_USER);
        let tags: Vec<String> = req
            .filter
            .tags_any
            .iter()
            .map(|t| record::canonical_tag(t))
            .collect();
        let state = self.inner.state.read();
        let Some(keys) = state.table.user_keys(user) else {
            return Ok(Vec::new());
        };
        let table = &state.table;
        let needs_record = req.filter.needs_record();
        // What is valid now, as every search (`docs/semantics.md`, "Validity in time").
        let invalid = table.invalid_at(user, self.now());
        let accept = |key: u64| {
            keys.contains(key)
                && !invalid.contains(key)
                && (!needs_record
                    || table
                        .get(MemoryId(key))
                        .is_some_and(|m| req.filter.matches(m, &tags)))
        };
        let scan = match req.scan {
            ScanMode::Exact => Scan::F32,
            ScanMode::Compact => Scan::i8_for(req.k),
        };
        let params = SearchParams {
            k: req.k,
            filter: Some(&accept),
            scan,
            min_score: req.min_score.unwrap_or(f32::NEG_INFINITY),
        };
        let found = state
            .vectors
            .search(&vector, &params)
            .map_err(|e| EngineError::from_index("query", e))?;
        Ok(found
            .into_iter()
            .filter_map(|n| {
                Some(Hit {
                    memory: table.get(MemoryId(n.key))?.clone(),
                    score: n.score,
                })
            })
            .collect())
    }

    /// The `limit` most recently created memories of `user_id` (newest first).
    ///
    /// # Errors
    /// `Invalid` for a bad user id.
    pub fn list_recent(&self, user_id: &str, limit: usize) -> Result<Vec<Memory>> {
        record::validate_id("user_id", user_id)?;
        let state = self.inner.state.read();
        let mut mine: Vec<&Memory> = state
            .table
            .iter()
            .filter(|m| m.user_id == user_id)
            .collect();
        mine.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(b.id.cmp(&a.id)));
        Ok(mine.into_iter().take(limit).cloned().collect())
    }

    /// Tag frequencies of `user_id`, most frequent first (then alphabetical).
    #[must_use]
    pub fn tag_frequencies(&self, user_id: &str) -> Vec<(String, u64)> {
        let state = self.inner.state.read();
        let mut v: Vec<(String, u64)> = state
            .table
            .tag_frequencies(user_id)
            .map(|f| f.iter().map(|(t, n)| (t.clone(), *n)).collect())
            .unwrap_or_default();
        v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        v
    }

    /// Counters.
    #[must_use]
    pub fn stats(&self) -> Stats {
        let w = self.inner.writer.lock();
        let state = self.inner.state.read();
        let mut by_kind: Vec<(Kind, usize)> = Kind::ALL.iter().map(|k| (*k, 0)).collect();
        let mut by_category: Vec<(Category, usize)> =
            Category::ALL.iter().map(|c| (*c, 0)).collect();
        for m in state.table.iter() {
            if let Some(e) = by_kind.iter_mut().find(|e| e.0 == m.kind) {
                e.1 += 1;
            }
            if let Some(e) = by_category.iter_mut().find(|e| e.0 == m.category) {
                e.1 += 1;
            }
        }
        Stats {
            memories: state.table.len(),
            users: state.table.users(),
            by_kind,
            by_category,
            sealed_segments: state.vectors.sealed().len(),
            growing_rows: state.vectors.growing_len(),
            last_seq: w.next_seq - 1,
            durable_seq: self.inner.commit.durable(),
            checkpoint_seq: w.checkpoint_seq,
            log_fsyncs: self.inner.commit.fsyncs(),
            poisoned: self.inner.commit.is_poisoned(),
            poison_cause: self.inner.commit.cause(),
            disk_full_refusals: self.inner.disk_full_refusals.load(Ordering::Relaxed),
            accesses_not_recorded: self.inner.accesses_not_recorded.load(Ordering::Relaxed),
            memory_limit: self.inner.options.memory_limit,
        }
    }
}

/// The writes of a [`Store::deferred_batch`] that are appended but perhaps not durable yet.
#[must_use = "none of the batch's writes may be reported stored before `wait` returns Ok"]
#[derive(Debug)]
pub struct PendingDurable {
    store: Store,
    /// The last sequence number the batch's acknowledged writes appended; 0 for none.
    seq: u64,
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
        self.store.inner.commit.wait_durable(self.seq)
    }
}

fn batch_sync_loop(store: &Weak<Inner>, interval: std::time::Duration) {
    loop {
        std::thread::sleep(interval);
        let Some(inner) = store.upgrade() else { return };
        if inner.commit.is_poisoned() {
            return;
        }
        // A failure poisons the store; the next write reports it.
        let _ = inner.commit.wait_durable(inner.commit.written());
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Best effort: make relaxed-policy writes durable before the lock is released.
        if !self.commit.is_poisoned() {
            let _ = self.commit.wait_durable(self.commit.written());
        }
    }
}
