//! The product's error: everything a caller of amberdb can be told went wrong.
//!
//! The memory layer's refusals (a memory not found, a duplicate, a limit, a scope) are its own
//! variants; the store's own failures (I/O, a full disk, poisoning, damaged bytes) are the
//! kernel's [`KernelError`], wrapped in [`EngineError::Kernel`] as it was raised. The caller
//! mistakes the kernel finds (an invalid field, a limit, a dimension or an embedder that does
//! not match) come out as this error's variants of the same names, so a caller matches one
//! `EngineError::Invalid` whichever layer refused.

pub use crate::kernel::error::{ErrorKind, KernelError};
use crate::kernel::ids::MemoryId;

/// Everything that can go wrong in amberdb.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// A field of a request is invalid.
    #[error("invalid {field}: {reason}")]
    Invalid {
        /// The field.
        field: &'static str,
        /// What is wrong and what is allowed.
        reason: String,
    },
    /// A request exceeds a documented limit; nothing was truncated or stored.
    #[error("{what} is {got}, over the limit of {limit}")]
    LimitExceeded {
        /// What was measured.
        what: &'static str,
        /// The limit.
        limit: usize,
        /// What was given.
        got: usize,
    },
    /// The same content already exists for this user.
    #[error("memory already exists: {existing}")]
    AlreadyExists {
        /// The id of the existing record.
        existing: MemoryId,
    },
    /// No live memory has this id.
    #[error("memory not found: {id}")]
    NotFound {
        /// The id asked for.
        id: MemoryId,
    },
    /// The memory left the live set through a merge, an update or a compaction; its record is
    /// kept in the archive (`Store::lineage`).
    #[error("memory {id} was superseded{}", superseded_by.map(|b| format!(" by {b}")).unwrap_or_default())]
    Archived {
        /// The id asked for.
        id: MemoryId,
        /// The live memory that replaced it, if one does.
        superseded_by: Option<MemoryId>,
    },
    /// A user, agent or session that does not exist (or belongs to another user).
    #[error("{field} {id:?} not found")]
    EntityNotFound {
        /// `user_id`, `agent_id` or `session_id`.
        field: &'static str,
        /// The id asked for.
        id: String,
    },
    /// A user, agent or session that exists already.
    #[error("{field} {id:?} already exists")]
    EntityExists {
        /// `user_id`, `agent_id` or `session_id`.
        field: &'static str,
        /// The id given.
        id: String,
    },
    /// A tag snapshot id that does not exist for this user.
    #[error("snapshot not found: {snapshot_id}")]
    SnapshotNotFound {
        /// The id asked for.
        snapshot_id: String,
    },
    /// A preview id that does not match the plan computed now.
    #[error("preview id mismatch: expected {expected}, got {provided}")]
    PreviewMismatch {
        /// The id of the plan as it is now.
        expected: String,
        /// The id the caller gave.
        provided: String,
    },
    /// The memories a write adds do not fit under the store's limit.
    #[error(
        "memory limit reached: {held} of {limit} memories held; adding {adding} would pass it \
         (delete memories, or open the store with a higher memory limit: StoreOptions::memory_limit, \
         Python's memory_limit=, the server's --memory-limit)"
    )]
    MemoryLimitReached {
        /// The configured limit.
        limit: usize,
        /// Live memories in the store (more than `limit` when it was opened with a lower one).
        held: usize,
        /// What the refused write would have added.
        adding: usize,
    },
    /// A store scoped to one user (`Store::scoped`) was asked to act for another.
    #[error("{field} {user:?} is outside this store's scope (it acts for {scope:?} only)")]
    OutOfScope {
        /// The argument naming the other user.
        field: &'static str,
        /// The user it named.
        user: String,
        /// The user the store is scoped to.
        scope: String,
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
    /// The embedder failed.
    #[error("embedding failed: {0}")]
    Embed(#[from] amberdb_embed::EmbedError),
    /// The store itself failed: I/O, a full disk, a held lock, poisoning, damaged or unknown
    /// bytes, a broken invariant (`KernelError`).
    #[error(transparent)]
    Kernel(KernelError),
}

impl From<KernelError> for EngineError {
    /// The kernel's caller mistakes become this error's variants of the same names; the rest
    /// is wrapped as it is.
    fn from(e: KernelError) -> EngineError {
        match e {
            KernelError::Invalid { field, reason } => EngineError::Invalid { field, reason },
            KernelError::LimitExceeded { what, limit, got } => {
                EngineError::LimitExceeded { what, limit, got }
            }
            KernelError::DimensionMismatch { expected, got } => {
                EngineError::DimensionMismatch { expected, got }
            }
            KernelError::EmbedderMismatch {
                stored_model,
                stored_dim,
                given_model,
                given_dim,
            } => EngineError::EmbedderMismatch {
                stored_model,
                stored_dim,
                given_model,
                given_dim,
            },
            other => EngineError::Kernel(other),
        }
    }
}

impl EngineError {
    /// Whose failure this is.
    #[must_use]
    pub fn kind(&self) -> ErrorKind {
        match self {
            EngineError::Invalid { .. }
            | EngineError::LimitExceeded { .. }
            | EngineError::AlreadyExists { .. }
            | EngineError::NotFound { .. }
            | EngineError::Archived { .. }
            | EngineError::EntityNotFound { .. }
            | EngineError::EntityExists { .. }
            | EngineError::SnapshotNotFound { .. }
            | EngineError::PreviewMismatch { .. }
            | EngineError::MemoryLimitReached { .. }
            | EngineError::OutOfScope { .. }
            | EngineError::DimensionMismatch { .. }
            | EngineError::EmbedderMismatch { .. } => ErrorKind::Caller,
            EngineError::Embed(_) => ErrorKind::Environment,
            EngineError::Kernel(e) => e.kind(),
        }
    }

    /// The store's own failure, if this is one.
    #[must_use]
    pub fn kernel(&self) -> Option<&KernelError> {
        match self {
            EngineError::Kernel(e) => Some(e),
            _ => None,
        }
    }

    /// An index error about `field`: a wrong dimension stays `DimensionMismatch`, anything
    /// else is `Invalid` naming the field.
    pub(crate) fn from_index(field: &'static str, e: amberdb_index::IndexError) -> EngineError {
        match e {
            amberdb_index::IndexError::DimensionMismatch { expected, got } => {
                EngineError::DimensionMismatch { expected, got }
            }
            other => EngineError::Invalid {
                field,
                reason: other.to_string(),
            },
        }
    }
}

/// Result alias of amberdb.
pub type Result<T, E = EngineError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kernel_caller_mistake_is_flattened_and_a_store_failure_is_wrapped_with_its_words() {
        let invalid = EngineError::from(KernelError::Invalid {
            field: "role",
            reason: "unknown".into(),
        });
        assert!(matches!(
            invalid,
            EngineError::Invalid { field: "role", .. }
        ));
        assert_eq!(invalid.kind(), ErrorKind::Caller);
        assert!(invalid.kernel().is_none());

        let poisoned = EngineError::from(KernelError::Poisoned);
        assert!(matches!(
            poisoned,
            EngineError::Kernel(KernelError::Poisoned)
        ));
        assert_eq!(poisoned.to_string(), KernelError::Poisoned.to_string());
        assert_eq!(poisoned.kind(), ErrorKind::Environment);
        assert!(matches!(poisoned.kernel(), Some(KernelError::Poisoned)));

        let damaged = EngineError::from(KernelError::Corrupted {
            file: "wal-1.log".into(),
            offset: 7,
            reason: "crc",
        });
        assert_eq!(damaged.kind(), ErrorKind::Data);
    }
}
