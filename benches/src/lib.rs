//! Shared setup of amberdb's benches: seeded data sets and prebuilt stores.

pub mod facts;
pub mod load;
pub mod locomo;
pub mod plain;
pub mod public;

use amberdb::{NewMemory, Store, StoreOptions, SyncPolicy};
use amberdb_index::segment::writer;
use amberdb_index::synthetic::clustered;
use amberdb_index::{Collection, FlatSegment, SealedBytes};
use std::path::{Path, PathBuf};

/// Dimension of every bench (MiniLM's).
pub const DIM: usize = 384;
/// Rows per sealed segment, as the engine seals them.
pub const SEAL_ROWS: usize = 65_536;
/// Seed of the data sets.
pub const SEED: u64 = 0x00BE_7C11;

/// `n` seeded clustered unit vectors (1,000 clusters, spread 0.5).
#[must_use]
pub fn vectors(n: usize, seed: u64) -> Vec<f32> {
    clustered(n, DIM, 1000, 0.5, seed)
}

/// A collection of `vectors` (keys 1..=n) sealed into segments of `SEAL_ROWS`, with i8 codes.
///
/// # Panics
/// If encoding fails, which it cannot for finite vectors.
#[must_use]
pub fn sealed_collection(vectors: &[f32]) -> Collection {
    let mut c = Collection::new(DIM);
    for (i, chunk) in vectors.chunks(SEAL_ROWS * DIM).enumerate() {
        let first = (i * SEAL_ROWS) as u64 + 1;
        let keys: Vec<u64> = (first..first + (chunk.len() / DIM) as u64).collect();
        let bytes =
            writer::encode(&keys, chunk, DIM, true, amberdb_index::Owner::NONE).expect("encode");
        c.push_sealed(
            FlatSegment::open(format!("bench-{i}"), SealedBytes::copy_from(&bytes)).expect("open"),
        )
        .expect("push");
    }
    c
}

/// Where benches keep data they build once (under `target/`, never tmpfs).
#[must_use]
pub fn bench_data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench-data")
}

/// The store `target/bench-data/<name>`, built once: the first call opens it with `options`,
/// lets `fill` write it, checkpoints, closes and marks it `BUILT`; later calls (and runs)
/// return it as it is. A build that was interrupted (no mark) starts over.
///
/// # Panics
/// On any engine error.
pub fn store_built_once(name: &str, options: StoreOptions, fill: impl FnOnce(&Store)) -> PathBuf {
    let dir = bench_data_dir().join(name);
    let done = dir.join("BUILT");
    if done.exists() {
        return dir;
    }
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!("building {}", dir.display());
    let store = Store::open(&dir, options).expect("open");
    fill(&store);
    store.checkpoint().expect("checkpoint");
    store.close().expect("close");
    std::fs::write(done, b"").expect("marker");
    dir
}

/// A fresh copy of the store in `dir` (every file but its lock) in a temporary directory under
/// `bench_data_dir`: a run that writes starts from the same bytes whatever earlier runs did.
///
/// # Panics
/// On any I/O error.
#[must_use]
pub fn copy_of_store(dir: &Path) -> tempfile::TempDir {
    let copy = tempfile::tempdir_in(bench_data_dir()).expect("tempdir");
    for entry in std::fs::read_dir(dir).expect("list") {
        let entry = entry.expect("entry");
        if entry.file_name() != "LOCK" {
            std::fs::copy(entry.path(), copy.path().join(entry.file_name())).expect("copy");
        }
    }
    copy
}

/// Builds (once) a store of `n` memories with a checkpoint covering all of them, and returns
/// its directory. Uses `SyncPolicy::None` and synthetic vectors: the bench measures opening.
///
/// # Panics
/// On any engine error.
#[must_use]
pub fn checkpointed_store(n: usize) -> PathBuf {
    let options = StoreOptions::hashing()
        .sync(SyncPolicy::None)
        .memory_limit(n.max(1));
    store_built_once(&format!("open-{n}"), options, |store| {
        let v = vectors(n, SEED ^ 0x0BE7);
        for (i, row) in v.chunks_exact(DIM).enumerate() {
            let text = format!(
                "memory {i}: an agent noted that service {} times out after {} ms under load",
                i % 97,
                i % 1000
            );
            store
                .store(
                    amberdb::StoreRequest::new(
                        NewMemory::new(text)
                            .tags(["bench", if i % 2 == 0 { "even" } else { "odd" }]),
                    )
                    .with_vector(row.to_vec()),
                )
                .expect("store");
        }
    })
}

/// Words the embedding benches draw texts from (plain English, mostly one word piece each).
pub const BENCH_WORDS: &[&str] = &[
    "the",
    "agent",
    "remembers",
    "user",
    "prefers",
    "short",
    "answers",
    "with",
    "code",
    "examples",
    "deploy",
    "failed",
    "because",
    "cache",
    "was",
    "cold",
    "after",
    "restart",
    "database",
    "timeout",
    "under",
    "load",
    "increase",
    "pool",
    "size",
    "tests",
    "flaky",
    "shared",
    "session",
    "cookie",
    "token",
    "rotates",
    "every",
    "month",
    "review",
    "pull",
    "request",
    "before",
    "merge",
    "memory",
    "search",
    "meaning",
    "vector",
    "index",
    "segment",
    "log",
    "checkpoint",
    "recovery",
    "coffee",
    "morning",
    "meeting",
    "project",
    "deadline",
    "team",
    "release",
    "version",
    "python",
    "rust",
    "server",
    "client",
    "network",
    "latency",
    "disk",
    "write",
    "read",
    "query",
    "result",
    "error",
    "message",
    "config",
    "file",
    "path",
    "build",
    "script",
    "install",
    "package",
    "weather",
    "city",
    "travel",
    "book",
    "music",
    "dinner",
    "friend",
    "family",
    "health",
    "doctor",
];

/// `count` seeded texts of `words` words each: "short" texts are 10 words (~12 word pieces
/// with `[CLS]`/`[SEP]`), "long" ones 200 (~202), as in `docs/benchmarks.md`, "MiniLM embeddings".
#[must_use]
pub fn bench_texts(count: usize, words: usize, seed: u64) -> Vec<String> {
    let mut rng = amberdb_index::synthetic::SeededRng::new(seed);
    (0..count)
        .map(|_| {
            (0..words)
                .map(|_| BENCH_WORDS[rng.below(BENCH_WORDS.len() as u64) as usize])
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

/// `count` seeded notes, as a store's memories: four words of the bench vocabulary and eight
/// made-up ones (letters only), so two notes share little: the common case of a store, with no
/// near duplicate (dedup still scans).
#[must_use]
pub fn bench_notes(count: usize, seed: u64) -> Vec<String> {
    bench_texts(count, 4, seed)
        .into_iter()
        .enumerate()
        .map(|(i, t)| {
            let made_up: Vec<String> = (0..8u64)
                .map(|j| {
                    let h = (seed ^ ((i as u64) << 8) ^ j).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                    (0..6)
                        .map(|k| char::from(b'a' + ((h >> (40 + 4 * k)) & 15) as u8))
                        .collect::<String>()
                })
                .collect();
            format!("{t} {}", made_up.join(" "))
        })
        .collect()
}

/// The store options of an evaluation run (`public_eval`, `chat_eval`): MiniLM's, or with
/// `AMBERDB_EVAL_EMBEDDER=bge-small` the same around bge-small (`OnnxConfig::bge_small`), so
/// the store reads every cosine with that model's calibration (`hooks::Calibration`).
///
/// # Errors
/// A model's files are missing, or the variable names another model.
pub fn eval_options() -> anyhow::Result<StoreOptions> {
    let minilm = StoreOptions::minilm()?;
    match std::env::var("AMBERDB_EVAL_EMBEDDER").as_deref() {
        Err(_) | Ok("minilm") => Ok(minilm),
        Ok("bge-small") => {
            let bge = amberdb_embed::OnnxEmbedder::open(
                &amberdb_embed::ModelFiles::in_dir(&amberdb_embed::ModelFiles::bge_small_dir()),
                amberdb_embed::OnnxConfig::bge_small(),
            )?;
            let mut options = minilm;
            options.embedder = std::sync::Arc::new(bge);
            Ok(options)
        }
        Ok(other) => anyhow::bail!("AMBERDB_EVAL_EMBEDDER={other}: minilm or bge-small"),
    }
}

/// MiniLM from the default model directory with `intra_threads`, or a panic that says to run
/// `scripts/fetch-model`.
///
/// # Panics
/// When the model is missing or broken.
#[must_use]
pub fn minilm(intra_threads: usize) -> amberdb_embed::OnnxEmbedder {
    minilm_with(amberdb_embed::OnnxConfig {
        intra_threads,
        ..amberdb_embed::OnnxConfig::default()
    })
}

/// MiniLM from the default model directory with `config`.
///
/// # Panics
/// When the model is missing or broken.
#[must_use]
pub fn minilm_with(config: amberdb_embed::OnnxConfig) -> amberdb_embed::OnnxEmbedder {
    let files = amberdb_embed::ModelFiles::in_dir(&amberdb_embed::ModelFiles::default_dir());
    amberdb_embed::OnnxEmbedder::open(&files, config).unwrap_or_else(|e| panic!("{e}"))
}

/// A field of `/proc/self/status` in KiB (`"VmHWM:"`: the peak RSS; `"VmRSS:"`: now), 0 when
/// it cannot be read.
#[must_use]
pub fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}
