//! The kernel's configuration: what a store's options tell the kernel (durability, the
//! clock, checkpoint and index thresholds, retention). `crate::options::StoreOptions` is the
//! product's front; it re-exports the public types here, and the kernel imports nothing from
//! it (issue #47: the two used to import each other).

use crate::kernel::record::Timestamp;
use crate::kernel::storage::Storage;
use std::sync::Arc;
use std::time::Duration;

/// When an acknowledged write is made durable (`docs/durability.md`, "Sync policies").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncPolicy {
    /// Default. Every write is fsynced (shared with concurrent writers) before it returns:
    /// acknowledged means durable.
    Always,
    /// Writes return once appended; a background thread fsyncs every `interval`. A power cut
    /// loses at most the writes of the last interval; a process crash loses nothing.
    Batch {
        /// Time between fsyncs.
        interval: Duration,
    },
    /// Writes are fsynced only at checkpoint, `flush` and `close`. For bulk import: a power cut
    /// can lose everything since the last of those.
    None,
}

/// A source of timestamps.
pub type Clock = Arc<dyn Fn() -> Timestamp + Send + Sync>;

/// What the kernel needs to know of a store's options.
#[derive(Clone)]
pub(crate) struct DbConfig {
    pub(crate) storage: Arc<dyn Storage>,
    pub(crate) sync: SyncPolicy,
    pub(crate) seal_rows: usize,
    pub(crate) checkpoint_bytes: u64,
    /// Log bytes since the newest checkpoint past which writes wait for it (0: never).
    pub(crate) log_tail_limit: u64,
    /// A checkpoint is a delta while the changed records are at most this share of the base's.
    pub(crate) delta_max_share: f64,
    pub(crate) vector_codes: bool,
    pub(crate) clock: Clock,
    pub(crate) index: IndexOptions,
    /// Checkpoints run on the maintenance thread (else after the write that finds one due).
    pub(crate) maintenance_thread: bool,
    /// The maintenance thread purges a delete this long after it (`None`: never on its own).
    pub(crate) purge_delay: Option<Duration>,
    /// Which archived records the maintenance thread forgets.
    pub(crate) archive_retention: ArchiveRetention,
    /// The store id a new store is created with, and an existing one must have (a cluster
    /// partition's, `docs/cluster.md`); `None`: a new id, and any store opens.
    pub(crate) store_id: Option<crate::kernel::identity::StoreId>,
    /// Open at the newest checkpoint and drop the log after it: a partition replica reads the
    /// rest from its stream (`docs/cluster.md`, "Cutting a stale tail").
    pub(crate) tail_from_stream: bool,
    /// The store's cluster partition (`docs/cluster.md`, "Partitions, ids and stores"): its
    /// memory ids are `partition << 40 | local`, `local` from 1 and below 2^40; 0 on one node.
    pub(crate) partition: u32,
}

/// Which archived records the maintenance thread forgets (`docs/semantics.md`, "Archive
/// retention"). Both `None` (the default): none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ArchiveRetention {
    /// Archived records replaced longer ago than this are forgotten.
    pub max_age: Option<std::time::Duration>,
    /// Past this many archived records, the oldest are forgotten.
    pub max_records: Option<usize>,
}

impl ArchiveRetention {
    /// Whether it forgets anything at all.
    #[must_use]
    pub fn is_set(&self) -> bool {
        self.max_age.is_some() || self.max_records.is_some()
    }
}

/// When and how IVF segments are built (`docs/ivf.md`, "When a build runs").
#[derive(Debug, Clone, PartialEq)]
pub struct IndexOptions {
    /// Rows in sealed flat segments (after the last IVF segment) from which a background build
    /// indexes them. Default 65,536 (one sealed segment: `docs/benchmarks.md`, "IVF", says where
    /// it pays). 0: never in the background (`Store::build_index` still builds).
    pub min_rows: usize,
    /// Mean recall@10 a segment's default nprobe must reach, in `(0, 1]`. Default 0.95.
    pub target_recall: f32,
    /// Threads a build uses. Default 1, so a build never takes both cores from clients.
    pub threads: usize,
}

impl Default for IndexOptions {
    fn default() -> IndexOptions {
        IndexOptions {
            min_rows: 65_536,
            target_recall: 0.95,
            threads: 1,
        }
    }
}

impl IndexOptions {
    /// Checks the values.
    ///
    /// # Errors
    /// `Invalid` for a recall outside `(0, 1]` or no threads.
    pub fn validate(&self) -> crate::kernel::error::Result<()> {
        if !(self.target_recall > 0.0 && self.target_recall <= 1.0) {
            return Err(crate::kernel::error::KernelError::Invalid {
                field: "index.target_recall",
                reason: "must be in (0, 1]".into(),
            });
        }
        if self.threads == 0 || self.threads > 256 {
            return Err(crate::kernel::error::KernelError::Invalid {
                field: "index.threads",
                reason: "must be 1..=256".into(),
            });
        }
        Ok(())
    }
}
