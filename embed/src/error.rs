//! The one error type of mnemo-embed.

/// Why text could not be turned into vectors.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EmbedError {
    /// The embedder produced a vector of the wrong length (a broken model).
    #[error("embedder returned {got} dimensions, expected {expected}")]
    WrongDimension {
        /// What the embedder declares.
        expected: usize,
        /// What it produced.
        got: usize,
    },
    /// The embedder could not run (model files missing, runtime failure, ...).
    #[error("embedder {model_id} failed: {reason}")]
    Failed {
        /// Which embedder.
        model_id: String,
        /// What went wrong, and what to do about it.
        reason: String,
    },
}
