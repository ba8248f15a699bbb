//! mnemo-embed: text in, vectors out.
//!
//! Guarantees: an [`Embedder`] is deterministic for its `model_id` and returns vectors of
//! exactly `dim()` values; the engine records both and refuses a store opened with another.
//! [`HashingEmbedder`] needs no model files and is always available. Not here yet: the MiniLM
//! embedder (ONNX) and the query cache.
//!
//! ```
//! use mnemo_embed::{Embedder, HashingEmbedder};
//!
//! let e = HashingEmbedder::new();
//! let v = e.embed_batch(&["fix the flaky test", "flaky test fixed"])?;
//! assert_eq!(v[0].len(), e.dim());
//! let similarity: f32 = v[0].iter().zip(&v[1]).map(|(a, b)| a * b).sum();
//! assert!(similarity > 0.3);
//! # Ok::<(), mnemo_embed::EmbedError>(())
//! ```

pub mod error;
pub mod hashing;

pub use error::EmbedError;
pub use hashing::HashingEmbedder;

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
}
