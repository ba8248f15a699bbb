//! `amberdb._amberdb`: the native half of the Python wheel (`python/amberdb` is the other).
//!
//! Nothing here is a second implementation. The module exposes three entry points into the
//! same Rust code the `amberdb` binary runs:
//!
//! - `run_cli`: the whole command line ([`amberdb_server::cli::main`]), for the wheel's
//!   `amberdb` command, with MiniLM fetched on first use;
//! - `NativeStore`: an open store, whose `NativeStore::call` runs one protocol command
//!   through the command table the server and MCP run ([`amberdb_server::commands::run`]):
//!   the same argument checks, the same error codes, the same replies, with no socket;
//! - `check`: `amberdb check` of a store directory, as a report.
//!
//! Arguments and replies cross as JSON text: the Python side (`amberdb/_api.py`) turns
//! replies into typed results and error replies into exceptions. Every call releases the GIL
//! while the engine works, so Python threads run meanwhile and several threads may call one
//! store at once (the engine is thread-safe).

use amberdb_server::cli::ModelPolicy;
use amberdb_server::commands::{self, Ctx, Session};
use amberdb_server::{EmbedderChoice, metrics::Metrics};
use parking_lot::RwLock;
use pyo3::exceptions::{PyNotADirectoryError, PyOSError, PyValueError};
use pyo3::prelude::*;
use serde_json::{Map, Value};
use std::path::PathBuf;
use std::sync::Arc;

/// Runs the `amberdb` command line with `argv` (the program name first) and returns its exit
/// code. MiniLM is fetched first when a command needs it and it is not there.
#[pyfunction]
fn run_cli(py: Python<'_>, argv: Vec<String>) -> u8 {
    py.detach(|| amberdb_server::cli::main(argv, ModelPolicy::FetchIfMissing))
}

/// `amberdb check` of the store in `path`, which must not be open: returns the exit code
/// (0 clean, 1 damaged) and the report as JSON text.
#[pyfunction]
fn check(py: Python<'_>, path: PathBuf) -> PyResult<(u8, String)> {
    py.detach(|| {
        let (_, code, report) = amberdb_server::check::check(&path)
            .map_err(|e| PyOSError::new_err(format!("{e:#}")))?;
        let json = serde_json::to_string(&report)
            .map_err(|e| PyValueError::new_err(format!("encoding the report: {e}")))?;
        Ok((code, json))
    })
}

/// An open store. Closed by [`NativeStore::close`] (or when Python drops it).
#[pyclass(frozen)]
struct NativeStore {
    /// `None` once closed. Calls hold the read lock while they run, so `close` waits for them.
    ctx: RwLock<Option<Ctx>>,
}

#[pymethods]
impl NativeStore {
    /// Opens (or creates) the store in `path` with `embedder` (`minilm` or `hashing`; `None`:
    /// the one the store was made with, MiniLM for a new store); MiniLM from `model_dir` (else
    /// the default model directory), fetched first when `fetch_model` and its files are
    /// missing.
    #[new]
    #[pyo3(signature = (path, embedder=None, model_dir=None, fetch_model=true, memory_limit=None, hooks=None))]
    fn open(
        py: Python<'_>,
        path: PathBuf,
        embedder: Option<&str>,
        model_dir: Option<PathBuf>,
        fetch_model: bool,
        memory_limit: Option<usize>,
        hooks: Option<&str>,
    ) -> PyResult<NativeStore> {
        // The store-wide hook settings `serve` takes as flags, as a JSON object of the same
        // names (`semantic_dedup`, `dedup_distance`, `merge`, `fold`, `cluster_distance`).
        let hooks: amberdb_server::config::FileConfig = match hooks {
            None => amberdb_server::config::FileConfig::default(),
            Some(json) => serde_json::from_str(json)
                .map_err(|e| PyValueError::new_err(format!("hook settings: {e}")))?,
        };
        let given = embedder
            .map(EmbedderChoice::named)
            .transpose()
            .map_err(PyValueError::new_err)?;
        let choice = amberdb_server::embedder_for(given, &path);
        if let Some(limit) = memory_limit
            && !(1..=amberdb::MAX_MEMORY_LIMIT).contains(&limit)
        {
            return Err(PyValueError::new_err(format!(
                "memory_limit {limit} is not in 1..={}",
                amberdb::MAX_MEMORY_LIMIT
            )));
        }
        py.detach(|| {
            let model_dir = model_dir.as_deref();
            if fetch_model {
                let model = match choice {
                    EmbedderChoice::BgeSmall => "bge-small",
                    EmbedderChoice::Minilm | EmbedderChoice::Hashing => "MiniLM",
                };
                amberdb_server::ensure_model(choice, model_dir)
                    .map_err(|e| PyOSError::new_err(format!("fetching {model}: {e:#}")))?;
            }
            let mut options = amberdb_server::open_options(choice, model_dir)
                .map_err(|e| PyOSError::new_err(e.to_string()))?;
            if let Some(limit) = memory_limit {
                options.memory_limit = limit;
            }
            amberdb_server::config::HookFlags::default()
                .apply(&hooks, &mut options.hooks)
                .map_err(|e| PyValueError::new_err(format!("{e:#}")))?;
            if path.exists() && !path.is_dir() {
                return Err(PyNotADirectoryError::new_err(format!(
                    "{} is a file, not a store directory: give a directory (a new one is made)",
                    path.display()
                )));
            }
            std::fs::create_dir_all(&path)
                .map_err(|e| PyOSError::new_err(format!("creating {}: {e}", path.display())))?;
            let store = amberdb::Store::open(&path, options).map_err(|e| match &e {
                // Said in this API's words: the names `embedder=` takes.
                amberdb::EngineError::EmbedderMismatch { stored_model, .. } => {
                    let made_with = match amberdb_server::embedder_of_model(stored_model) {
                        Some(c) => format!("embedder=\"{}\"", c.name()),
                        None => format!("the embedder of {stored_model}"),
                    };
                    PyValueError::new_err(format!(
                        "the store {} was made with {made_with}: open it with that, or leave \
                         embedder out (a store remembers its embedder); `amberdb reembed` moves \
                         it to another",
                        path.display()
                    ))
                }
                _ => PyOSError::new_err(format!("opening the store {}: {e}", path.display())),
            })?;
            Ok(NativeStore {
                ctx: RwLock::new(Some(Ctx {
                    store,
                    metrics: Arc::new(Metrics::new()),
                })),
            })
        })
    }

    /// Runs one protocol command (`STORE_MEMORY`, `SEARCH`, ...) with its arguments (a JSON
    /// object as text). Returns whether it succeeded and the reply as JSON text: the protocol's
    /// reply without `ok`, or its error reply (`code`, `message`, `field`, ...).
    fn call(&self, py: Python<'_>, command: &str, args: &str) -> PyResult<(bool, String)> {
        py.detach(|| {
            let guard = self.ctx.read();
            let ctx = guard
                .as_ref()
                .ok_or_else(|| PyValueError::new_err("the store is closed"))?;
            let outcome = match serde_json::from_str::<Map<String, Value>>(args) {
                Err(e) => Err(amberdb_server::args::Fail::new(
                    amberdb_server::args::Code::BadRequest,
                    format!("the arguments are not a JSON object: {e}"),
                )),
                Ok(args) => match commands::find(command) {
                    None => Err(commands::unknown(command)),
                    Some(c) => commands::run(ctx, &Session::trusted(), c, args),
                },
            };
            let (ok, body) = match outcome {
                Ok(reply) => (true, reply),
                Err(fail) => (false, Value::Object(fail.body)),
            };
            let text = serde_json::to_string(&body)
                .map_err(|e| PyValueError::new_err(format!("encoding the reply: {e}")))?;
            Ok((ok, text))
        })
    }

    /// Flushes and closes the store (waiting for calls in flight); later calls fail. A second
    /// close does nothing.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| {
            let Some(ctx) = self.ctx.write().take() else {
                return Ok(());
            };
            ctx.store
                .close()
                .map_err(|e| PyOSError::new_err(format!("closing the store: {e}")))
        })
    }

    /// Whether [`NativeStore::close`] ran.
    #[getter]
    fn closed(&self) -> bool {
        self.ctx.read().is_none()
    }
}

/// The module `amberdb._amberdb`.
#[pymodule]
fn _amberdb(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(run_cli, m)?)?;
    m.add_function(wrap_pyfunction!(check, m)?)?;
    m.add_class::<NativeStore>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
