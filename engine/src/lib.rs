//! amberdb: persistent semantic memory for AI agents, as an embedded database.
//!
//! **Where to start.** [`Store::open`] a directory with [`StoreOptions`] (the MiniLM embedder by
//! default, [`StoreOptions::hashing`] for no model); then one method per operation:
//!
//! | to | call | with | and get |
//! |---|---|---|---|
//! | store a memory | [`Store::store`] | a [`NewMemory`] or a [`StoreRequest`] (own vector, hook overrides) | [`Stored`]: id, [`Outcome`], dedup decisions |
//! | import a memory written elsewhere | [`Store::import`], [`Store::import_batch`] | a [`StoreRequest`] and its [`Provenance`] (times, access count, feedback kept) | [`Stored`] |
//! | store many, one model call | [`Store::store_batch`] | memories | one result each |
//! | find by meaning, keywords or text | [`Store::search`] | a [`SearchRequest`]: text or vector, [`Mode`], [`Strategy`], filters, [`ScanMode`], `as_of`, `max_tokens` | [`Hits`] |
//! | read one | [`Store::get`] (plain) / [`Store::record_access`] (counted) | a [`MemoryId`] | [`Memory`] |
//! | change, delete | [`Store::update`] / [`Store::delete`] | an [`UpdateRequest`] / an id | [`Updated`] / `()` |
//! | a fact's versions | [`Store::history`], [`Store::lineage`] | an id | [`History`] / archived records |
//! | users, agents, sessions | [`Store::create_entity`], [`Store::add_messages`], [`Store::delete_entity`] | | |
//! | ask across a user's sessions | [`Store::query`] | a [`query::Query`] | [`query::QueryData`] |
//! | tags, snapshots, compaction, cleanup | `unique_tags`, `tag_normalize_*`, `snapshot_*`, `compact_*`, `clear_old_memories` | | typed results |
//! | the numbers | [`Store::stats`] (the store) / [`Store::user_stats`] (one user) | | [`Stats`] / [`MemoryStats`] |
//! | look after the store | [`Store::checkpoint`], [`Store::purge`], [`Store::backup`], [`Store::build_index`], [`Store::flush`] | | [`Purge`], [`IndexBuild`] |
//! | many writes, one fsync | [`Store::durable_batch`] / [`Store::deferred_batch`] | a closure given the batch's handle | its value, [`PendingDurable`] |
//!
//! Each group lives in its own file: `store/` (opening, looking after, batches), `memory/write/`,
//! `memory/read.rs`, `memory/search/`, `memory/query.rs`, `memory/entities.rs`, `memory/tags.rs`,
//! `memory/items.rs`, `memory/compaction.rs`, `memory/mend.rs`, `memory/reembed.rs`.
//!
//! A store scoped to one user ([`Store::scoped`]) reaches that user's records only, through
//! every call. Errors are [`EngineError`]s; [`EngineError::kind`] sorts them (caller, data,
//! I/O). Results are plain typed values: the wire shapes of the server (`success`, `message`,
//! error envelopes) are built in `amberdb-server`, not here.
//!
//! **What is underneath.** A store is a directory: a CRC-framed log of every change
//! (`wal-*.log`), checkpoints of the metadata table (`ckpt-*.ckpt`), sealed vector segments
//! (`seg-*.mnsf`, mapped read-only), an `IDENTITY` that pins the embedder, and a `LOCK`. The
//! kernel (`src/kernel/`, private) makes it durable and consistent (`docs/durability.md` is
//! the commit protocol the code cites step by step); the memory semantics ([`hooks`] and the
//! `memory` module: dedup, slots and validity in time, tags, categories, search strategies)
//! sit on top of it and read it through its read API (`kernel/read.rs`). Its failures reach a
//! caller as [`EngineError::Kernel`] ([`KernelError`]). Its files and its fault-injecting
//! storage are public only with the `testing` feature (tests and format fixtures), its
//! decoders only with `fuzzing`; [`verify`] (the offline check) and [`restore`] are public.
//!
//! Guarantees: an acknowledged write is durable under the default `SyncPolicy::Always`; each
//! operation has one commit point (its log frame); torn tails are truncated, damage followed
//! by valid data is reported as `Corrupted`, never dropped; one process owns a store; a failed
//! fsync poisons it for writes while reads go on; another embedder is refused; an error means
//! nothing changed; readers never wait for a writer's dedup.
//!
//! ```
//! use amberdb::query::Query;
//! use amberdb::{
//!     Category, EntityKind, Mode, NewMemory, Outcome, Role, SearchRequest, Store, StoreOptions,
//!     Strategy, Timestamp,
//! };
//!
//! let dir = tempfile::tempdir()?;
//! // The default embedder, all-MiniLM-L6-v2, from the directory `scripts/fetch-model` fills.
//! // `StoreOptions::hashing()` is the no-model choice; a store keeps the one it was created with.
//! let store = Store::open(dir.path(), StoreOptions::minilm()?)?;
//! let id = store
//!     .store(
//!         NewMemory::new("cargo test needs --workspace to run every crate's tests")
//!             .category(Category::ToolUsage)
//!             .tags(["rust", "cargo"]),
//!     )?
//!     .memory_id;
//! store.store(NewMemory::new("the staging database password rotates every monday"))?;
//!
//! let hits = store.search(&SearchRequest::new("how do I run the tests of every crate"))?;
//! assert_eq!(hits.results[0].memory.id, id);
//!
//! // Durable: close, reopen, still there.
//! store.close()?;
//! let store = Store::open(dir.path(), StoreOptions::minilm()?)?;
//! assert_eq!(store.get(id)?.tags, vec!["rust", "cargo"]);
//! let tagged = SearchRequest::new("cargo").tags(["cargo"]);
//! assert_eq!(store.search(&tagged)?.count, 1);
//!
//! // The same statement again merges, keeping both texts in lineage; the same text again is
//! // the outcome `Duplicate`; a paraphrase in other words stays its own memory by default.
//! let first = store.store(NewMemory::new("User likes coffee, flat white usually"))?;
//! let again = store.store(NewMemory::new("user likes coffee - flat white, usually!"))?;
//! assert_eq!(again.outcome, Outcome::Merged);
//! assert!(again.supersedes.contains(&first.memory_id));
//! let same = store.store(NewMemory::new("user likes coffee - flat white, usually!"))?;
//! assert_eq!((same.outcome, same.memory_id), (Outcome::Duplicate, again.memory_id));
//! let by_meaning = SearchRequest::new("what does the user drink").strategy(Strategy::Similarity);
//! assert_eq!(store.search(&by_meaning)?.results[0].memory.id, again.memory_id);
//!
//! // Keywords find what meaning misses (an error code); every filter applies inside the search.
//! store.store(NewMemory::new("The nightly backup stopped when the quota filled up (code E4137)"))?;
//! let code = store.search(&SearchRequest::new("E4137").mode(Mode::Keyword))?;
//! assert_eq!(code.count, 1);
//!
//! // Facts change: a newer value of the same slot closes the older one's validity, and
//! // `as_of` asks about any moment.
//! let lisbon = NewMemory::new("Dora lives in Lisbon")
//!     .user("dora")
//!     .valid_from(Timestamp::parse_rfc3339("2024-01-01").unwrap());
//! store.store(lisbon)?;
//! let berlin = store.store(NewMemory::new("Dora lives in Berlin").user("dora"))?;
//! assert_eq!(berlin.outcome, Outcome::Superseded);
//! let now = store.search(&SearchRequest::new("where does Dora live").user("dora"))?;
//! assert_eq!(now.results[0].memory.content, "Dora lives in Berlin");
//! let mut then = SearchRequest::new("where does Dora live").user("dora");
//! then.as_of = Timestamp::parse_rfc3339("2024-06-01");
//! assert_eq!(store.search(&then)?.results[0].memory.content, "Dora lives in Lisbon");
//! assert_eq!(store.history(berlin.memory_id)?.count, 2);
//!
//! // A store scoped to a user cannot reach another user's records.
//! let doras = store.scoped("dora")?;
//! assert!(doras.get(id).is_err());
//! assert_eq!(doras.get(berlin.memory_id)?.user_id, "dora");
//!
//! // Users, sessions and the MemFuse query across a user's sessions.
//! store.create_entity(EntityKind::User, None, "ada", None, None)?;
//! store.create_entity(EntityKind::Session, Some("ada"), "chat-1", Some("Laptop help"), None)?;
//! store.add_messages(Some("ada"), "chat-1", &[(Role::User, "my laptop will not boot".into())])?;
//! let mut q = Query::new("computer does not start");
//! q.session_id = Some("chat-1".into());
//! let answer = store.query("ada", &q)?;
//! assert_eq!(answer.results[0].metadata.scope, Some("in_session"));
//! // Deleting the user deletes all of its data, in one commit.
//! store.delete_entity(EntityKind::User, None, "ada")?;
//! assert!(store.query("ada", &q).is_err());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod error;
pub mod hooks;
mod kernel;
mod memory;
pub mod options;
mod store;

pub use error::{EngineError, ErrorKind, KernelError, Result};
pub use hooks::facts::Relation;
pub use hooks::{Fold, HookConfig, HookOverrides, Merge, ReadHook, WriteHook};
pub use kernel::commit::PoisonCause;
pub use kernel::verify;
/// The store's files and the storage seam, for tests that write damaged or crashed stores
/// and frozen format fixtures: the `testing` feature only, not part of the stable API.
#[cfg(feature = "testing")]
pub use kernel::{checkpoint, codec, identity, log, ownership, segment_file, storage};
pub use memory::{
    Also, Cleared, Compacted, CompactionGroup, CompactionPreview, DEFAULT_DATE_BOOST,
    DEFAULT_RERANK_CANDIDATES, DEFAULT_SESSION_LEND, DedupDecision, EntityDeleted, Exported,
    ExportedRecord, Feedback, FeedbackResult, Fusion, Group, HYBRID_WEIGHTS, HeldBy, HeldTurn,
    HeldTurns, History, Hits, ImportedRecords, ItemUser, ListFilter, Listed, MAX_NEIGHBOURS,
    MAX_OFFSET, MAX_PAGE, MAX_QUERY_CHARS, MAX_RERANK_CANDIDATES, MemoryStats, MendItem,
    MendPreview, Mended, Mode, Neighbour, Outcome, Provenance, RRF_K, ReembedStatus, Reembedded,
    SEARCH_ACCESS_INTERVAL_US, STATEMENT_MIN_WORDS, STATEMENT_WEIGHTS, ScanMode, ScoredBy,
    SearchRequest, SearchedHit, Shelf, SnapshotCreated, SnapshotRestored, Source, StoreRequest,
    Stored, Strategy, TagChange, TagPreview, TagsApplied, TopAccessed, Turn, TurnsAdded, Unmerged,
    UpdateRequest, Updated, Version, frequency, importance, preview, recency, strategy_score,
};
/// The MemFuse query API (`docs/search.md`, "The MemFuse query").
pub mod query {
    pub use crate::memory::{
        DEFAULT_TOP_K, GRAPH_LINEAGE_WEIGHT, GRAPH_MAX_TAG_FREQUENCY, GRAPH_SESSION_WEIGHT,
        GRAPH_SESSION_WINDOW, Query, QueryData, QueryResult, ResultMetadata, Retrieval, StoreType,
    };
}
pub use amberdb_embed::{Embedder, HashingEmbedder, Reranker};
pub use amberdb_index::Probe;
/// The error for a value of `AMBERDB_KERNELS` (the cap on the scan kernels) it does not know
/// (`docs/ivf.md`, "Kernels"): a program refuses to start on the error.
pub use amberdb_index::kernels::kernels_env_error;
pub use kernel::backup::{Backup, Restored};
pub use kernel::db::{IndexBuild, PendingDurable};
pub use kernel::identity::{StoreId, recorded_model};
pub use kernel::maintenance::Purge;
pub use kernel::maintenance::{CheckpointRun, MaintenanceCounters, Removed};
pub use kernel::record::{
    Category, DEFAULT_USER, Entity, EntityKind, Item, Kind, Memory, MemoryId, NewMemory, Role,
    TagSnapshot, Timestamp, content_hash, validate_id,
};
pub use kernel::recovery::OpenReport;
pub use kernel::request::{REQUEST_WINDOW_MICROS, RequestId};
pub use kernel::rule::Rule;
pub use options::{
    ArchiveRetention, Clock, DEFAULT_MEMORY_LIMIT, DEFAULT_PURGE_DELAY, IndexOptions,
    MAX_MEMORY_LIMIT, StoreOptions, SyncPolicy,
};
pub use store::{
    Begun, IndexStats, IvfSegmentStats, PartitionLog, RequestRun, Stats, Store, restore,
};
/// A store as a replica of a cluster's partition (`docs/cluster.md`): the stream's messages and
/// the frames they become.
pub mod cluster {
    pub use crate::kernel::cluster::{
        Applied, CHUNK_BYTES, Chunk, Claim, HISTORY_DIFFERS, MAX_CHUNKS, MAX_NODE_NAME,
        MAX_PARTITIONS, Outgoing, PARTITION_SHIFT, Publisher, Skip, SkipReason, StreamMessage,
        partition_base, partition_of_id, partition_of_user,
    };
    pub use crate::kernel::frames::{
        Effect, LoggedFrame, frame_crc, frame_effects, logged_frames, store_id_of,
    };
    pub use crate::kernel::shipping::{Shippable, holds_store, is_immutable, shippable_files};

    /// The log format this build writes: its frames are what an owner publishes
    /// (`docs/format/log.md`; a build reads every earlier version).
    pub const LOG_VERSION: u16 = crate::kernel::log::format::VERSION;
    /// The checkpoint format this build writes: what an owner ships
    /// (`docs/format/checkpoint.md`; a build reads every earlier version).
    pub const CHECKPOINT_VERSION: u16 = crate::kernel::checkpoint::format::VERSION;
}

/// Decoders of bytes from disk, exposed for the fuzz targets and their proptests (the
/// `fuzzing` feature). Each runs its decoder on arbitrary bytes and never panics.
#[cfg(feature = "fuzzing")]
pub mod fuzzing {
    /// Scans arbitrary bytes as a log file. Returns the number of valid frames.
    #[must_use]
    pub fn log_scan(data: &[u8]) -> u64 {
        crate::kernel::log::reader::scan::<()>(data, |_, _, _| Ok(())).map_or(0, |s| s.frames)
    }

    /// Decodes arbitrary bytes as a checkpoint. Returns whether they were accepted.
    #[must_use]
    pub fn checkpoint_decode(data: &[u8]) -> bool {
        crate::kernel::checkpoint::reader::decode(data).is_ok()
    }

    /// Decodes arbitrary bytes as an identity file. Returns whether they were accepted.
    #[must_use]
    pub fn identity_decode(data: &[u8]) -> bool {
        crate::kernel::identity::decode(data).is_ok()
    }
}
