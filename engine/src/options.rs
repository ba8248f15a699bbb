//! How a store is opened.

use crate::hooks::HookConfig;
pub use crate::kernel::config::{ArchiveRetention, Clock, IndexOptions, SyncPolicy};
use crate::kernel::identity::StoreId;
use crate::kernel::record::Timestamp;
use crate::kernel::storage::{FsStorage, Storage};
use amberdb_embed::{Embedder, HashingEmbedder};
use std::sync::Arc;

/// Options of `Store::open`.
#[derive(Clone)]
pub struct StoreOptions {
    /// Turns text into vectors; recorded in the store and checked at every open.
    pub embedder: Arc<dyn Embedder>,
    /// Where the bytes go: real files, unless a test injects faults (`StoreOptions::storage`,
    /// with the `testing` feature).
    pub(crate) storage: Arc<dyn Storage>,
    /// When writes become durable.
    pub sync: SyncPolicy,
    /// Most live memories the store holds (default 10,000, at most 10,000,000).
    pub memory_limit: usize,
    /// Growing-segment rows that trigger sealing it (and a checkpoint). Default 65,536:
    /// 96 MiB of f32 at 384-d, scanned by 4 parallel chunks.
    pub seal_rows: usize,
    /// Log bytes since the last checkpoint that trigger a checkpoint. Default 64 MiB, which
    /// bounds what an open must replay.
    pub checkpoint_bytes: u64,
    /// Log bytes since the newest checkpoint past which a write waits (at most 5 s) for the
    /// due checkpoint to finish: what bounds the log an open replays after crash upon crash
    /// (`docs/durability.md`, "Maintenance"). Default 96 MiB; 0: writes never wait; below
    /// `checkpoint_bytes`, writes wait whenever a checkpoint is due.
    pub log_tail_limit: u64,
    /// A checkpoint writes only the records changed since the newest full checkpoint (a
    /// delta) while those are at most this share of its records; past it, every record.
    /// Default 1/8 (`docs/durability.md`, "Incremental checkpoints"); 0: every checkpoint is
    /// full; must be a number `>= 0`.
    pub delta_max_share: f64,
    /// Whether sealed segments also carry i8 codes for the compact scan. Default true.
    pub vector_codes: bool,
    /// Write and read hooks (`docs/semantics.md`). Default: all on.
    pub hooks: HookConfig,
    /// Where timestamps come from: `Timestamp::now` unless a test sets the time.
    pub clock: Clock,
    /// When and how IVF segments are built (`docs/ivf.md`).
    pub index: IndexOptions,
    /// Whether due checkpoints run on the store's maintenance thread (default true) or after
    /// the write that finds one due (false: deterministic, no thread; `docs/durability.md`,
    /// "Maintenance").
    pub maintenance_thread: bool,
    /// How long after a delete the maintenance thread purges it from every file of the store
    /// (`docs/durability.md`, "Purge"). Default 10 minutes; `None`: only `Store::purge` does.
    pub purge_delay: Option<std::time::Duration>,
    /// How long and how many archived records (merged and superseded sources) are kept
    /// (`docs/semantics.md`, "Archive retention"). Default: all, forever.
    pub archive_retention: ArchiveRetention,
    /// The store id a new store is created with, and an existing one must have: every
    /// replica of a cluster partition is one store (`docs/cluster.md`). Default `None`: a new
    /// store gets a new id, and any store opens.
    pub store_id: Option<StoreId>,
    /// Opens at the newest checkpoint and drops the log after it, which a cluster partition's
    /// replica reads again from its stream: a node that owned the partition may hold frames
    /// the stream does not (`docs/cluster.md`, "Cutting a stale tail"). Default `false`.
    pub tail_from_stream: bool,
    /// The store's cluster partition, below 8,192: its memory ids are `partition << 40 |
    /// local` (`docs/cluster.md`, "Partitions, ids and stores"). Default 0, a single node's
    /// ids.
    pub partition: u32,
    /// The cross-encoder a search with `rerank` rescores its first candidates with
    /// (`docs/search.md`, "Reranking"). Default `None`: such a search is refused, naming how
    /// to get one; [`StoreOptions::minilm`] sets the shipped one, loaded at its first use.
    pub reranker: Option<Arc<dyn amberdb_embed::Reranker>>,
}

impl std::fmt::Debug for StoreOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreOptions")
            .field("embedder", &self.embedder.model_id())
            .field("storage", &self.storage)
            .field("sync", &self.sync)
            .field("memory_limit", &self.memory_limit)
            .field("seal_rows", &self.seal_rows)
            .field("checkpoint_bytes", &self.checkpoint_bytes)
            .field("log_tail_limit", &self.log_tail_limit)
            .field("delta_max_share", &self.delta_max_share)
            .field("vector_codes", &self.vector_codes)
            .field("hooks", &self.hooks)
            .field("index", &self.index)
            .field("maintenance_thread", &self.maintenance_thread)
            .field("purge_delay", &self.purge_delay)
            .field("archive_retention", &self.archive_retention)
            .field("store_id", &self.store_id)
            .field("tail_from_stream", &self.tail_from_stream)
            .field("partition", &self.partition)
            .field(
                "reranker",
                &self.reranker.as_ref().map(|r| r.model_id().to_owned()),
            )
            .finish()
    }
}

/// How long after a delete the maintenance thread purges it, by default.
pub const DEFAULT_PURGE_DELAY: std::time::Duration = std::time::Duration::from_secs(600);

/// Largest configurable memory limit.
pub const MAX_MEMORY_LIMIT: usize = 10_000_000;

/// Live memories a store holds by default, all users, chat turns included: an agent storing
/// a turn every few seconds all week stays under it (vector-memory-mcp's 10,000 was reached
/// in a day by a chat loop; issue #46). `StoreOptions::memory_limit`, Python's
/// `memory_limit=`, the server's `--memory-limit` change it.
pub const DEFAULT_MEMORY_LIMIT: usize = 1_000_000;

impl StoreOptions {
    /// Defaults around `embedder`.
    #[must_use]
    pub fn new(embedder: Arc<dyn Embedder>) -> StoreOptions {
        StoreOptions {
            embedder,
            storage: Arc::new(FsStorage),
            sync: SyncPolicy::Always,
            memory_limit: DEFAULT_MEMORY_LIMIT,
            seal_rows: 65_536,
            checkpoint_bytes: 64 << 20,
            log_tail_limit: 96 << 20,
            delta_max_share: 0.125,
            vector_codes: true,
            hooks: HookConfig::default(),
            clock: Arc::new(Timestamp::now),
            index: IndexOptions::default(),
            maintenance_thread: true,
            purge_delay: Some(DEFAULT_PURGE_DELAY),
            archive_retention: ArchiveRetention::default(),
            store_id: None,
            tail_from_stream: false,
            partition: 0,
            reranker: None,
        }
    }

    /// Defaults with the default embedder: all-MiniLM-L6-v2 from
    /// `amberdb_embed::ModelFiles::default_dir()` (what `scripts/fetch-model` fills), behind a
    /// query cache.
    ///
    /// # Errors
    /// When the model files are missing or broken: the error names the path, the command that
    /// fetches them and the no-model alternative, [`StoreOptions::hashing`]. There is no silent
    /// fallback: a store remembers its embedder and refuses any other.
    #[cfg(feature = "onnx")]
    pub fn minilm() -> Result<StoreOptions, amberdb_embed::EmbedError> {
        let reranker = amberdb_embed::LazyReranker::new(amberdb_embed::default_reranker_dir());
        Ok(StoreOptions::new(amberdb_embed::default_embedder()?).reranker(Arc::new(reranker)))
    }

    /// Sets the reranker searches with `rerank` use.
    #[must_use]
    pub fn reranker(mut self, reranker: Arc<dyn amberdb_embed::Reranker>) -> StoreOptions {
        self.reranker = Some(reranker);
        self
    }

    /// Defaults with the no-model `HashingEmbedder` (384-d): the explicit zero-setup choice.
    #[must_use]
    pub fn hashing() -> StoreOptions {
        StoreOptions::new(Arc::new(HashingEmbedder::new()))
    }

    /// Sets the sync policy.
    #[must_use]
    pub fn sync(mut self, sync: SyncPolicy) -> StoreOptions {
        self.sync = sync;
        self
    }

    /// Sets the storage: a test's `FaultyStorage` or crash image (the `testing` feature).
    #[cfg(feature = "testing")]
    #[must_use]
    pub fn storage(mut self, storage: Arc<dyn Storage>) -> StoreOptions {
        self.storage = storage;
        self
    }

    /// Sets the memory limit (checked against `MAX_MEMORY_LIMIT` at open).
    #[must_use]
    pub fn memory_limit(mut self, limit: usize) -> StoreOptions {
        self.memory_limit = limit;
        self
    }

    /// Sets the hooks (`docs/semantics.md`); `HookConfig::none()` is the plain engine.
    #[must_use]
    pub fn hooks(mut self, hooks: HookConfig) -> StoreOptions {
        self.hooks = hooks;
        self
    }

    /// Sets the clock (tests of age-dependent operations).
    #[must_use]
    pub fn clock(mut self, clock: Clock) -> StoreOptions {
        self.clock = clock;
        self
    }

    /// Sets the rows that seal the growing segment.
    #[must_use]
    pub fn seal_rows(mut self, rows: usize) -> StoreOptions {
        self.seal_rows = rows;
        self
    }

    /// Sets the share of a full checkpoint's records up to which a checkpoint is a delta
    /// (`delta_max_share`).
    #[must_use]
    pub fn delta_max_share(mut self, share: f64) -> StoreOptions {
        self.delta_max_share = share;
        self
    }

    /// Checks a `delta_max_share` (`Store::open` does; a caller can before creating
    /// anything).
    ///
    /// # Errors
    /// `Invalid` for a negative share or one that is not a number.
    pub fn check_delta_max_share(share: f64) -> crate::Result<f64> {
        if share.is_nan() || share < 0.0 {
            return Err(crate::EngineError::Invalid {
                field: "delta_max_share",
                reason: format!("must be a number >= 0 (0: every checkpoint full), got {share}"),
            });
        }
        Ok(share)
    }

    /// Runs due checkpoints on the maintenance thread (true, the default) or after the write
    /// that finds one due (false).
    #[must_use]
    pub fn maintenance_thread(mut self, on: bool) -> StoreOptions {
        self.maintenance_thread = on;
        self
    }

    /// Sets how long after a delete the maintenance thread purges it (`None`: never on its
    /// own).
    #[must_use]
    pub fn purge_delay(mut self, delay: Option<std::time::Duration>) -> StoreOptions {
        self.purge_delay = delay;
        self
    }

    /// Sets which archived records are forgotten (default: none).
    #[must_use]
    pub fn archive_retention(mut self, retention: ArchiveRetention) -> StoreOptions {
        self.archive_retention = retention;
        self
    }

    /// Creates the store with id `id`, or opens it only if it has that id (a cluster
    /// partition's replica; default: any).
    #[must_use]
    pub fn store_id(mut self, id: StoreId) -> StoreOptions {
        self.store_id = Some(id);
        self
    }

    /// Opens at the newest checkpoint, dropping the log after it, for a cluster partition's
    /// replica that reads the rest from its stream (default: off).
    #[must_use]
    pub fn tail_from_stream(mut self, on: bool) -> StoreOptions {
        self.tail_from_stream = on;
        self
    }

    /// Makes the store partition `partition`'s (below 8,192): it assigns memory ids from
    /// `partition << 40 | 1` (default 0: a single node's ids, from 1).
    #[must_use]
    pub fn partition(mut self, partition: u32) -> StoreOptions {
        self.partition = partition;
        self
    }
}
