//! The kernel's error: what can go wrong below the memory layer.

use std::ops::RangeInclusive;
use std::path::PathBuf;

/// Which party a failure belongs to; the server maps each to a reply code in one `match`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The caller asked for something invalid; nothing changed.
    Caller,
    /// The environment failed (I/O, lock held, store poisoned).
    Environment,
    /// Bytes on disk are damaged or of an unknown version.
    Data,
    /// The engine broke one of its own invariants (a bug): the store is poisoned.
    Internal,
}

/// Everything that can go wrong in the kernel: the store's own failures (I/O, a full disk, a
/// held lock, poisoning, damaged or unknown bytes, a broken invariant) and the few caller
/// mistakes the kernel itself finds (a record or frame over a limit, a field it cannot encode,
/// a vector or an embedder that does not match the store). It knows nothing of what a memory
/// means: the product's error (`crate::error::EngineError`) wraps it, flattening the caller
/// mistakes into its own variants of the same names.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KernelError {
    /// A field of a record or an option is invalid.
    #[error("invalid {field}: {reason}")]
    Invalid {
        /// The field.
        field: &'static str,
        /// What is wrong and what is allowed.
        reason: String,
    },
    /// A record or an operation exceeds a documented limit; nothing was truncated or stored.
    #[error("{what} is {got}, over the limit of {limit}")]
    LimitExceeded {
        /// What was measured.
        what: &'static str,
        /// The limit.
        limit: usize,
        /// What was given.
        got: usize,
    },
    /// A vector of the wrong dimension.
    #[error("dimension mismatch: expected {expected}, got {got}")]
    DimensionMismatch {
        /// The store's dimension.
        expected: usize,
        /// What was given.
        got: usize,
    },
    /// The store's vectors come from another embedder.
    #[error(
        "the store's vectors come from embedder {stored_model} ({stored_dim}-d), opened with \
         {given_model} ({given_dim}-d): open it with that one, or move it to another with \
         `amberdb reembed` (Store::reembed)"
    )]
    EmbedderMismatch {
        /// Model id recorded in the store.
        stored_model: String,
        /// Dimension recorded in the store.
        stored_dim: usize,
        /// Model id of the embedder given to `open`.
        given_model: String,
        /// Its dimension.
        given_dim: usize,
    },
    /// Another process (or another `Store` in this one) has the store open.
    #[error("store {path} is locked by another process")]
    Locked {
        /// The lock file.
        path: PathBuf,
    },
    /// An earlier write or fsync failed (on a cluster partition's owner: the stream did not
    /// hold a write); the store refuses writes until it is reopened. STATS `poison_cause` says
    /// which.
    #[error(
        "store is poisoned by an earlier failed write, fsync or (in a cluster) publish; reopen it to recover (STATS poison_cause says which)"
    )]
    Poisoned,
    /// The disk (or the user's quota) is full. The write was cut back before it could be
    /// acknowledged: nothing of it is stored, and the store stays writable, so writes succeed
    /// again once space is freed.
    #[error("disk full writing {path}: {source}; nothing was stored, free space and retry")]
    DiskFull {
        /// The file the write failed on.
        path: PathBuf,
        /// The operating system's error (ENOSPC or EDQUOT).
        #[source]
        source: std::io::Error,
    },
    /// The process ran out of file descriptors (EMFILE, ENFILE) opening `path`: nothing was
    /// written through it, so nothing is lost and the store stays writable; a checkpoint,
    /// purge or backup refused so runs again later (`docs/reliability.md`, "Descriptors").
    #[error(
        "out of file descriptors opening {path}: {source}; nothing changed, retry later (fewer connections, or a higher `ulimit -n`)"
    )]
    OutOfDescriptors {
        /// The file that could not be opened.
        path: PathBuf,
        /// The operating system's error (EMFILE or ENFILE).
        #[source]
        source: std::io::Error,
    },
    /// Records opened without their vectors (a damaged segment, `docs/durability.md`, R4b)
    /// are being restored from their texts: until then no checkpoint, purge or backup can be
    /// written. Nothing changed; retry once `Stats::unindexed` is 0.
    #[error(
        "{left} records' vectors are being rebuilt from their texts after a damaged segment; \
         no checkpoint, purge or backup until that is done (nothing changed; retry when STATS \
         unindexed is 0)"
    )]
    Restoring {
        /// Records still without a vector.
        left: usize,
    },
    /// The store is closing: a long operation (an index build) stopped before it changed
    /// anything.
    #[error("the store is closing: stopped before anything changed")]
    Cancelled,
    /// The engine broke one of its own invariants: a bug, never the caller's doing. The store
    /// is poisoned (writes refused until reopened, which rebuilds from the log).
    #[error("internal error {context}: {reason}")]
    Internal {
        /// What the engine was doing.
        context: &'static str,
        /// What went wrong.
        reason: String,
    },
    /// An I/O call failed.
    #[error("i/o on {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// Bytes on disk failed a check.
    #[error("{file}: corrupted at offset {offset}: {reason}")]
    Corrupted {
        /// The file.
        file: PathBuf,
        /// Byte offset of the damage.
        offset: u64,
        /// Which check failed.
        reason: &'static str,
    },
    /// A partition's replicated log holds a message this replica cannot follow: a frame that
    /// fails its checks, or one its state refuses (`docs/cluster.md`, "Fencing", rule 1). The
    /// partition halts on this node: reads go on, writes are refused, and nothing past the
    /// message is applied. Corruption is never skipped.
    #[error(
        "the partition log halted at stream position {position}: {reason}; reads go on, writes are refused until an operator repairs the stream or this replica"
    )]
    Halted {
        /// The stream position of the message.
        position: u64,
        /// Which check failed.
        reason: &'static str,
    },
    /// A log or checkpoint file whose header names another sequence number than its file
    /// name (`docs/durability.md`, "File identity"): renamed, swapped or copied.
    #[error(
        "{file}: its name says sequence {named}, its header says {header}: the file was renamed, swapped or copied; put the right file back or restore a backup"
    )]
    Misnamed {
        /// The file.
        file: PathBuf,
        /// The sequence number its name says.
        named: u64,
        /// The sequence number its header says.
        header: u64,
    },
    /// A file of another store, or of a copy of this one that went its own way
    /// (`docs/durability.md`, "File identity"): never read as this store's.
    #[error(
        "{file}: not this store's file: {why}; move it out of the store directory (or restore a backup)"
    )]
    Foreign {
        /// The file.
        file: PathBuf,
        /// Whose it is and whose this store is.
        why: String,
    },
    /// A file of a format version this build cannot read.
    #[error("{file}: format version {found} not in {supported:?}")]
    UnsupportedVersion {
        /// The file.
        file: PathBuf,
        /// The version found.
        found: u16,
        /// The versions this build reads.
        supported: RangeInclusive<u16>,
    },
}

impl KernelError {
    /// Whose failure this is.
    #[must_use]
    pub fn kind(&self) -> ErrorKind {
        match self {
            KernelError::Invalid { .. }
            | KernelError::LimitExceeded { .. }
            | KernelError::DimensionMismatch { .. }
            | KernelError::EmbedderMismatch { .. } => ErrorKind::Caller,
            KernelError::Locked { .. }
            | KernelError::Cancelled
            | KernelError::Poisoned
            | KernelError::DiskFull { .. }
            | KernelError::OutOfDescriptors { .. }
            | KernelError::Restoring { .. }
            | KernelError::Io { .. } => ErrorKind::Environment,
            KernelError::Corrupted { .. }
            | KernelError::Misnamed { .. }
            | KernelError::Foreign { .. }
            | KernelError::Halted { .. }
            | KernelError::UnsupportedVersion { .. } => ErrorKind::Data,
            KernelError::Internal { .. } => ErrorKind::Internal,
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> KernelError {
        let path = path.into();
        move |source| KernelError::Io { path, source }
    }
}

/// Result alias of the kernel.
pub type Result<T, E = KernelError> = std::result::Result<T, E>;
/// Whether an I/O error says the disk (or the user's quota) is full: a write that failed so
/// before its fsync is cut back and refused, and the store stays writable.
pub(crate) fn is_disk_full(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
    )
}

/// Whether an I/O error says the process (EMFILE) or the system (ENFILE) has no file
/// descriptor left: it comes from an open, before anything is written through the file.
pub(crate) fn is_out_of_descriptors(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(23 | 24))
}

/// An I/O failure writing `path`: `DiskFull` for a full disk or quota, `OutOfDescriptors`
/// when no file descriptor is left.
pub(crate) fn io_error(path: PathBuf, source: std::io::Error) -> KernelError {
    if is_disk_full(&source) {
        KernelError::DiskFull { path, source }
    } else if is_out_of_descriptors(&source) {
        KernelError::OutOfDescriptors { path, source }
    } else {
        KernelError::Io { path, source }
    }
}

impl KernelError {
    /// This error with an `Io` that ran out of file descriptors told apart
    /// (`OutOfDescriptors`): the one I/O failure that leaves nothing half written.
    #[must_use]
    pub(crate) fn descriptors_told_apart(self) -> KernelError {
        match self {
            KernelError::Io { path, source } => io_error(path, source),
            e => e,
        }
    }
}

/// A broken invariant of the engine (`KernelError::Internal`).
pub(crate) fn internal(context: &'static str, e: impl std::fmt::Display) -> KernelError {
    KernelError::Internal {
        context,
        reason: e.to_string(),
    }
}
