//! `search_memories` latency per mode (`docs/benchmarks.md`, "Search"), p50 and p99 over many
//! distinct queries, at 10k and 100k memories (and 1M with `AMBERDB_SEARCH_SIZES=...,1000000`).
//!
//! A custom harness rather than criterion: criterion reports a median with confidence bounds,
//! and the targets are about the tail too. Each configuration runs `QUERIES` distinct queries
//! once as a warm-up and then once timed, one at a time, on the public API with its defaults
//! (access counting on, load-time dedup on).
//!
//! The stores are built once under `target/bench-data/search-<n>`: texts of four common words
//! (of 87) and eight made-up ones, clustered synthetic 384-d vectors, 1% of them in category
//! `security`. Queries are two common words and a made-up word of one memory, and their
//! vector is a perturbed copy of that memory's: the result sets look like real ones (a few
//! close neighbours, a cluster around them) without embedding a million texts. The store's
//! embedder answers a query from that table ("query embedding excluded"); with
//! `included` it also runs MiniLM on the query text first and pays for it, as a real search
//! does on a query-cache miss.

use amberdb::{
    Category, Fusion, HookConfig, Mode, NewMemory, SearchRequest, Store, StoreOptions, Strategy,
    SyncPolicy,
};
use amberdb_benches::{BENCH_WORDS, DIM, copy_of_store, minilm, store_built_once, vectors};
use amberdb_embed::{EmbedError, Embedder};
use std::collections::HashMap;
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

const QUERIES: usize = 300;

/// Builds one configuration's request for a query text.
type MakeRequest = Box<dyn Fn(&str) -> SearchRequest>;
const SEED: u64 = 0x5EA4_C400;

/// The bench's embedder: a table of query vectors, optionally behind a real MiniLM call.
struct TableEmbedder {
    table: HashMap<String, Vec<f32>>,
    model: Option<Arc<dyn Embedder>>,
}

impl Embedder for TableEmbedder {
    fn model_id(&self) -> &str {
        "amberdb-bench-table-384"
    }
    fn dim(&self) -> usize {
        DIM
    }
    fn embed_batch(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if let Some(m) = &self.model {
            m.embed_batch(texts)?;
        }
        Ok(texts
            .iter()
            .map(|t| {
                self.table
                    .get(*t)
                    .cloned()
                    .unwrap_or_else(|| vec![0.0; DIM])
            })
            .collect())
    }
}

fn made_up(i: usize, j: u64) -> String {
    let h = ((i as u64) << 8 ^ j ^ SEED).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (0..7)
        .map(|k| char::from(b'a' + ((h >> (36 + 4 * k)) & 15) as u8))
        .collect()
}

fn text(i: usize) -> String {
    let w = BENCH_WORDS.len();
    let common: Vec<&str> = (0..4)
        .map(|j| BENCH_WORDS[(i.wrapping_mul(2_654_435_761) >> (j * 7)) % w])
        .collect();
    let rare: Vec<String> = (0..8).map(|j| made_up(i, j)).collect();
    format!("{} {}", common.join(" "), rare.join(" "))
}

fn options(table: HashMap<String, Vec<f32>>, model: Option<Arc<dyn Embedder>>) -> StoreOptions {
    StoreOptions::new(Arc::new(TableEmbedder { table, model }))
        .sync(SyncPolicy::None)
        .memory_limit(10_000_000)
}

/// Builds the store of `n` memories once; returns its directory.
fn build(n: usize) -> std::path::PathBuf {
    let options = options(HashMap::new(), None).hooks(HookConfig::none());
    store_built_once(&format!("search-{n}"), options, |store| {
        let v = vectors(n, SEED);
        for (i, row) in v.chunks_exact(DIM).enumerate() {
            let category = if i % 100 == 42 {
                Category::Security
            } else {
                Category::Other
            };
            store
                .store(
                    amberdb::StoreRequest::new(NewMemory::new(text(i)).category(category))
                        .with_vector(row.to_vec()),
                )
                .expect("store");
        }
    })
}

/// `QUERIES` queries aimed at memories spread over the store: (text, vector).
fn queries(store: &Store, n: usize) -> Vec<(String, Vec<f32>)> {
    let w = BENCH_WORDS.len();
    (0..QUERIES)
        .map(|q| {
            let target = (q * 7919 + 13) % n;
            let full = text(target);
            let words: Vec<&str> = full.split(' ').take(2).collect();
            let query = format!("{} {} {}", words[0], words[1], made_up(target, 3));
            let mut v = store
                .vector(amberdb::MemoryId(target as u64 + 1))
                .expect("vector");
            for (d, x) in v.iter_mut().enumerate() {
                *x += 0.02 * (((q * 31 + d * 17) % w) as f32 / w as f32 - 0.5);
            }
            let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            v.iter_mut().for_each(|x| *x /= norm);
            (query, v)
        })
        .collect()
}

fn quantiles(mut t: Vec<Duration>) -> (f64, f64) {
    t.sort();
    let at = |p: f64| t[((t.len() as f64 * p) as usize).min(t.len() - 1)].as_secs_f64() * 1e3;
    (at(0.50), at(0.99))
}

fn main() {
    let sizes: Vec<usize> = std::env::var("AMBERDB_SEARCH_SIZES")
        .ok()
        .map(|s| s.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![10_000, 100_000]);
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "| memories | configuration | embedding | p50 ms | p99 ms | results/query |"
    )
    .expect("stdout");
    writeln!(out, "|---|---|---|---|---|---|").expect("stdout");
    for n in sizes {
        let dir = build(n);
        let probe = Store::open(&dir, options(HashMap::new(), None)).expect("open");
        let qs = queries(&probe, n);
        drop(probe);
        let table: HashMap<String, Vec<f32>> = qs.iter().cloned().collect();
        let configs: Vec<(&str, MakeRequest)> = vec![
            (
                "vector, similarity",
                Box::new(|q| SearchRequest::new(q).strategy(Strategy::Similarity)),
            ),
            ("vector, composite", Box::new(|q| SearchRequest::new(q))),
            (
                "keyword, composite",
                Box::new(|q| SearchRequest::new(q).mode(Mode::Keyword)),
            ),
            (
                "hybrid 0.7/0.3, composite",
                Box::new(|q| SearchRequest::new(q).mode(Mode::Hybrid)),
            ),
            (
                "hybrid RRF, composite",
                Box::new(|q| SearchRequest {
                    fusion: Fusion::rrf(),
                    ..SearchRequest::new(q).mode(Mode::Hybrid)
                }),
            ),
            (
                "text, composite",
                Box::new(|q| SearchRequest::new(q).mode(Mode::Text)),
            ),
            (
                "vector, similarity, 1% category filter",
                Box::new(|q| SearchRequest {
                    category: Some(amberdb::Category::Security),
                    ..SearchRequest::new(q).strategy(Strategy::Similarity)
                }),
            ),
        ];
        // `AMBERDB_SEARCH_ONLY=hybrid` runs the configurations whose name holds it (for a profile).
        let only = std::env::var("AMBERDB_SEARCH_ONLY").unwrap_or_default();
        let configs: Vec<_> = configs
            .into_iter()
            .filter(|(name, _)| name.contains(only.as_str()))
            .collect();
        for included in [false, true] {
            // Uncached: the warm-up pass must not answer the timed pass's model calls.
            let model = included.then(|| Arc::new(minilm(2)) as Arc<dyn Embedder>);
            // A fresh copy per pass: access counting writes to the store.
            let copy = copy_of_store(&dir);
            let store = Store::open(copy.path(), options(table.clone(), model)).expect("open");
            for (name, make) in &configs {
                let mut results = 0;
                for (q, _) in &qs {
                    store.search(&make(q)).expect("warm");
                }
                let times: Vec<Duration> = qs
                    .iter()
                    .map(|(q, _)| {
                        let req = make(q);
                        let start = Instant::now();
                        let hits = store.search(&req).expect("search");
                        let t = start.elapsed();
                        results += hits.count;
                        t
                    })
                    .collect();
                let (p50, p99) = quantiles(times);
                writeln!(
                    out,
                    "| {n} | {name} | {} | {p50:.2} | {p99:.2} | {:.1} |",
                    if included { "included" } else { "excluded" },
                    results as f64 / QUERIES as f64
                )
                .expect("stdout");
            }
        }
    }
}
