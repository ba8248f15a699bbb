//! The one error type of amberdb-index.

use std::ops::RangeInclusive;

/// Everything that can go wrong in the index, kept in three kinds: the caller's mistake
/// (`DimensionMismatch`, `InvalidVector`, `InvalidParameter`, `KeyOrder`), the data's (`Corrupted`,
/// `UnsupportedVersion`) and the environment's (`Io`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IndexError {
    /// Two vectors, or a vector and a collection, disagree on dimension.
    #[error("dimension mismatch: expected {expected}, got {got}")]
    DimensionMismatch {
        /// The dimension the collection or the other operand has.
        expected: usize,
        /// The dimension that was given.
        got: usize,
    },
    /// A vector holds NaN or infinity, or has zero dimensions.
    #[error("invalid vector: {reason}")]
    InvalidVector {
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A parameter outside what the operation accepts (k-means' `k`, iterations, ratio).
    #[error("invalid parameter: {0}")]
    InvalidParameter(&'static str),
    /// Keys must be inserted in strictly increasing order.
    #[error("key {key} is not greater than the last key {last}")]
    KeyOrder {
        /// The key that was given.
        key: u64,
        /// The largest key already present.
        last: u64,
    },
    /// Bytes of a segment failed a check.
    #[error("{file}: corrupted at offset {offset}: {reason}")]
    Corrupted {
        /// The segment's name.
        file: String,
        /// Byte offset of the bad field.
        offset: u64,
        /// Which check failed.
        reason: &'static str,
    },
    /// A segment of a format version this build cannot read.
    #[error("{file}: format version {found} not in {supported:?}")]
    UnsupportedVersion {
        /// The segment's name.
        file: String,
        /// The version in its header.
        found: u16,
        /// The versions this build reads.
        supported: RangeInclusive<u16>,
    },
    /// A long operation (an IVF build) was asked to stop before it finished.
    #[error("stopped before it finished")]
    Cancelled,
    /// Mapping a file failed.
    #[error("i/o on {file}: {source}")]
    Io {
        /// The file.
        file: String,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
}

/// Result alias of amberdb-index.
pub type Result<T, E = IndexError> = std::result::Result<T, E>;
