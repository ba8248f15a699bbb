//! mnemo-server: what the `mnemo` binary does, as a library so tests can call it.
//!
//! Today that is the demo the README runs and `stats`; the TCP line protocol, MCP over stdio
//! and the rest of the CLI arrive with issue #6. The embedder is MiniLM unless the user
//! explicitly asks for the no-model one ([`EmbedderChoice`]); missing model files are an error
//! that says how to fetch them, never a silent switch.
//!
//! ```
//! use mnemo_server::{EmbedderChoice, open_options};
//! let dir = tempfile::tempdir()?;
//! let report = mnemo_server::demo(dir.path(), open_options(EmbedderChoice::Hashing, None)?)?;
//! assert!(report.contains("reopened"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use mnemo_embed::EmbedError;
use mnemo_engine::{Category, EngineError, NewMemory, Result, SearchRequest, Store, StoreOptions};
use std::fmt::Write as _;
use std::path::Path;

/// Which embedder a store is opened with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum EmbedderChoice {
    /// sentence-transformers/all-MiniLM-L6-v2 (the default; needs `scripts/fetch-model`).
    Minilm,
    /// The no-model hashing embedder: zero setup, lexical rather than semantic.
    Hashing,
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
    Ok(match choice {
        EmbedderChoice::Hashing => StoreOptions::hashing(),
        EmbedderChoice::Minilm => StoreOptions::new(
            model_dir.map_or_else(mnemo_embed::default_embedder, mnemo_embed::minilm_embedder)?,
        ),
    })
}

/// What the demo stores: the kind of things an agent learns.
const NOTES: &[(&str, Category, &[&str])] = &[
    (
        "cargo nextest runs the workspace tests in parallel and retries flaky ones",
        Category::ToolUsage,
        &["rust", "testing"],
    ),
    (
        "the login test was flaky because two tests shared one session cookie",
        Category::BugFix,
        &["auth", "flaky"],
    ),
    (
        "we keep an append-only log and checkpoint the metadata table for fast opens",
        Category::Architecture,
        &["storage"],
    ),
    (
        "raise the postgres connection pool when the API times out under load",
        Category::Performance,
        &["postgres"],
    ),
    (
        "never log the AUTH token; compare it in constant time",
        Category::Security,
        &["auth"],
    ),
];

/// Stores the sample notes in `dir` (skipping ones already there), closes, reopens, searches,
/// and returns a human-readable report.
///
/// # Errors
/// Any engine error, e.g. the store is locked by a running process.
pub fn demo(dir: &Path, options: StoreOptions) -> Result<String> {
    let mut out = String::new();
    let _ = writeln!(out, "embedder {}", options.embedder.model_id());
    let store = Store::open(dir, options.clone())?;
    for (text, category, tags) in NOTES {
        match store.store(
            NewMemory::new(*text)
                .category(*category)
                .tags(tags.iter().copied()),
        ) {
            Ok(id) => {
                let _ = writeln!(out, "stored #{id}: {text}");
            }
            Err(EngineError::AlreadyExists { existing }) => {
                let _ = writeln!(out, "already stored as #{existing}: {text}");
            }
            Err(e) => return Err(e),
        }
    }
    store.close()?;
    let store = Store::open(dir, options)?;
    let _ = writeln!(
        out,
        "reopened {}: {} memories",
        dir.display(),
        store.stats().memories
    );
    for query in [
        "why was the login test flaky",
        "database timeouts under load",
        "keeping credentials secret",
    ] {
        let _ = writeln!(out, "search {query:?}:");
        for hit in store.search(&SearchRequest::text(query, 2))? {
            let _ = writeln!(
                out,
                "  {:.3}  #{} [{}] {}",
                hit.score, hit.memory.id, hit.memory.category, hit.memory.content
            );
        }
    }
    Ok(out)
}

/// A report of a store's counters.
///
/// # Errors
/// Any engine error from opening the store.
pub fn stats(dir: &Path, options: StoreOptions) -> Result<String> {
    let store = Store::open(dir, options)?;
    let s = store.stats();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "memories {}  users {}  sealed segments {}  growing rows {}",
        s.memories, s.users, s.sealed_segments, s.growing_rows
    );
    let _ = writeln!(
        out,
        "last seq {}  checkpoint seq {}",
        s.last_seq, s.checkpoint_seq
    );
    for (category, n) in s.by_category.iter().filter(|c| c.1 > 0) {
        let _ = writeln!(out, "  {category}: {n}");
    }
    Ok(out)
}
