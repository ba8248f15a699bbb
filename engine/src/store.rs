//! `Store`: the public handle of one amberdb database: the kernel's `Db` with the store's
//! options and hooks. The memory operations (`crate::memory`) are further `impl Store` blocks.
//!
//! Guarantees: those of `Db` (durability, one frame per operation, poisoning, readers that
//! never wait for a writer's prepare), and invalid input is a typed error that changes
//! nothing.

use crate::kernel::commit::PoisonCause;
use crate::kernel::db::{Db, DbConfig, NextIds, PendingDurable};
use crate::kernel::error::{EngineError, Result};
use crate::kernel::log::Op;
use crate::kernel::record::{self, Category, DEFAULT_USER, Kind, Memory, MemoryId, Timestamp};
use crate::kernel::recovery::OpenReport;
use crate::kernel::state::State;
use crate::options::{MAX_MEMORY_LIMIT, StoreOptions};
use amberdb_index::{Scan, SearchParams};
use parking_lot::RwLockReadGuard;
use std::path::Path;
use std::sync::Arc;

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

pub(crate) struct Inner {
    pub(crate) db: Arc<Db>,
    pub(crate) options: StoreOptions,
    /// Embeddings of the category label texts, computed on first need.
    pub(crate) category_labels: std::sync::OnceLock<Vec<Vec<f32>>>,
}

/// An open amberdb store. Cheap to clone; all clones share one database.
#[derive(Clone)]
pub struct Store {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("dir", &self.dir())
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
        let config = DbConfig {
            storage: Arc::clone(&options.storage),
            sync: options.sync,
            seal_rows: options.seal_rows,
            checkpoint_bytes: options.checkpoint_bytes,
            vector_codes: options.vector_codes,
            clock: Arc::clone(&options.clock),
        };
        let db = Db::open(dir.as_ref(), &*options.embedder, config)?;
        Ok(Store {
            inner: Arc::new(Inner {
                db,
                options,
                category_labels: std::sync::OnceLock::new(),
            }),
        })
    }

    /// The store's clock.
    pub(crate) fn now(&self) -> Timestamp {
        self.inner.db.now()
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

    /// The write path (`Db::commit`): `prepare` turns a request into one logged operation.
    pub(crate) fn commit<T>(
        &self,
        prepare: impl FnOnce(&NextIds, &State) -> Result<(Option<Op>, T)>,
    ) -> Result<T> {
        self.inner.db.commit(prepare)
    }

    /// The state, for reading.
    pub(crate) fn read(&self) -> RwLockReadGuard<'_, State> {
        self.inner.db.read()
    }

    /// Seals the growing segment and writes a checkpoint (`docs/durability.md` steps C0–C6),
    /// so that the next open replays only what follows. Blocks writers while it runs.
    ///
    /// # Errors
    /// `Poisoned`, or `Io` (which poisons the store).
    pub fn checkpoint(&self) -> Result<()> {
        self.inner.db.checkpoint()
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
        self.inner.db.deferred_batch(f)
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

    /// Ids of every live memory of every user, ascending: what an export walks (with `get`,
    /// skipping any deleted meanwhile) without holding the store's lock while it writes.
    #[must_use]
    pub fn memory_ids(&self) -> Vec<MemoryId> {
        self.read().table.iter().map(|m| m.id).collect()
    }

    /// The memory with `id`. A plain read: it does not count as an access.
    ///
    /// # Errors
    /// `NotFound`; `Archived` (with the successor) for a merged or superseded id.
    pub fn get(&self, id: MemoryId) -> Result<Memory> {
        let state = self.read();
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
        self.read()
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
        let state = self.read();
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
        let state = self.read();
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
        let state = self.read();
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
        let c = self.inner.db.counters();
        let state = self.read();
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
        }
    }
}
