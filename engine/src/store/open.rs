//! Opening a store: [`Store::exists`] and [`Store::open`] (the kernel's open, then the store's
//! own: its embedder, options and the background restoration of R4b).

use super::{Embedding, Inner, Store};
use crate::error::{EngineError, KernelError, Result};
use crate::kernel::config::DbConfig;
use crate::kernel::db::{Db, Durability};
use crate::options::{MAX_MEMORY_LIMIT, StoreOptions};
use std::path::Path;
use std::sync::Arc;

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
            Err(e) => Err(KernelError::io(dir)(e).into()),
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
        if options.partition >= crate::kernel::db::MAX_PARTITIONS {
            return Err(EngineError::LimitExceeded {
                what: "cluster partition",
                limit: crate::kernel::db::MAX_PARTITIONS as usize - 1,
                got: options.partition as usize,
            });
        }
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
            store_id: options.store_id,
            tail_from_stream: options.tail_from_stream,
            partition: options.partition,
            vector_codes: options.vector_codes,
            clock: Arc::clone(&options.clock),
            index: options.index.clone(),
        };
        let db = Db::open(dir.as_ref(), &*options.embedder, config)?;
        let epoch = db.read().model_epoch();
        let inner = Arc::new(Inner {
            db,
            embedding: parking_lot::RwLock::new(Embedding {
                embedder: Arc::clone(&options.embedder),
                epoch,
            }),
            options,
            category_labels: parking_lot::Mutex::new(None),
            reembedding: parking_lot::Mutex::new(()),
            running_requests: parking_lot::Mutex::default(),
        });
        // Records opened without their vectors (a damaged segment, R4b) get them back in the
        // background; without a maintenance thread the caller runs `Store::restore_vectors`.
        if inner.db.unindexed() > 0 && inner.options.maintenance_thread {
            crate::memory::start_restoring(&inner).map_err(KernelError::io(dir.as_ref()))?;
        }
        Ok(Store {
            inner,
            scope: None,
            durability: Durability::Immediate,
            request: None,
        })
    }
}
