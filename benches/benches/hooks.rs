//! What the write hooks (tag and category normalization, exact and semantic dedup) add to a
//! store, at 1k / 10k / 100k memories and 10 / 1,000 / 10,000 canonical tags
//! (`docs/benchmarks.md`, "Hooks").
//!
//! `hooks/{on,off}/<memories>/<canonical tags>`: one `store_memory` of a new memory with one
//! canonical tag and one spelling variant of another (which the hook embeds and compares with
//! every canonical tag), on a store built once per size, with the no-model embedder so the
//! figure is the engine's and the hooks' own work (the model call is measured apart). Each
//! stored memory is deleted untimed, so the store keeps its size.
//! `hooks_minilm/{on,off}`: the same store operation with the real model on a 1k store: the
//! latency a user sees, which the hooks' cost is compared with. Both under `SyncPolicy::None`:
//! the fsync is the same with and without hooks and would only add noise.

use amberdb::{
    HookConfig, HookOverrides, NewMemory, Outcome, Store, StoreOptions, StoreRequest, SyncPolicy,
    WriteHook,
};
use amberdb_benches::{BENCH_WORDS, bench_data_dir, bench_notes, copy_of_store, minilm};
use amberdb_embed::Embedder;
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Stores whose semantic dedup found a near neighbour.
static DEDUP_FOUND: AtomicU64 = AtomicU64::new(0);

const SIZES: [usize; 3] = [1_000, 10_000, 100_000];
const TAG_COUNTS: [usize; 3] = [10, 1_000, 10_000];

/// The `i`th canonical tag: three words of the bench vocabulary, `i` in base 87.
fn tag(i: usize) -> String {
    let w = BENCH_WORDS.len();
    format!(
        "{}-{}-{}",
        BENCH_WORDS[i % w],
        BENCH_WORDS[(i / w) % w],
        BENCH_WORDS[(i / w / w + 1) % w]
    )
}

/// A spelling of `tag(i)` that is not itself canonical but has the same embedding form, so
/// the tags hook embeds it (in the store's one model call), compares it with every canonical
/// tag and maps it onto `tag(i)`, and the canonical count stays put.
fn variant(i: usize) -> String {
    tag(i).replace('-', "_")
}

/// A fresh copy (in a temporary directory) of a store of `n` memories carrying `tags`
/// distinct canonical tags, built once under `target/bench-data`: every run starts from the
/// same bytes, whatever earlier runs did to their copies.
fn store_of(n: usize, tags: usize) -> (tempfile::TempDir, Store) {
    let dir = bench_data_dir().join(format!("hooks-{n}-{tags}"));
    let options = || {
        StoreOptions::hashing()
            .sync(SyncPolicy::None)
            .memory_limit(10_000_000)
    };
    if !dir.join("BUILT").exists() {
        let _ = std::fs::remove_dir_all(&dir);
        // Built with the tags hook only: semantic dedup over a growing store is quadratic.
        let fill = HookConfig {
            write: vec![WriteHook::Tags],
            ..HookConfig::none()
        };
        let store = Store::open(&dir, options().hooks(fill)).expect("open");
        let texts = bench_notes(n, 0x000B_EEF0 + n as u64);
        let per = tags.div_ceil(n).clamp(1, 10);
        let batch: Vec<NewMemory> = texts
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let first = i * per;
                NewMemory::new(format!("{t} {i}")).tags((first..first + per).map(|j| tag(j % tags)))
            })
            .collect();
        for chunk in batch.chunks(4096) {
            for r in store.store_batch(chunk.to_vec()).expect("store") {
                r.expect("stored");
            }
        }
        store.checkpoint().expect("checkpoint");
        store.close().expect("close");
        std::fs::write(dir.join("BUILT"), b"").expect("mark");
    }
    let copy = copy_of_store(&dir);
    let store = Store::open(copy.path(), options()).expect("reopen");
    (copy, store)
}

/// Times `iters` stores of fresh texts with one canonical tag and one variant, deleting each
/// stored memory (untimed) so the store keeps its size. The deleted rows stay in the growing
/// segment, which every dedup scan reads, until a checkpoint seals it: with hooks on, a
/// checkpoint (untimed) every 256 stores keeps them from piling up (measured: 3,000 stores
/// and deletes without one made a 1k-memory store's hooked store 7× slower).
fn timed_stores(store: &Store, texts: &[String], tags: usize, on: bool, iters: u64) -> Duration {
    let hooks = if on {
        HookOverrides::default()
    } else {
        HookOverrides {
            skip: WriteHook::ALL.to_vec(),
            ..HookOverrides::default()
        }
    };
    let mut total = Duration::ZERO;
    for i in 0..iters as usize {
        let req = StoreRequest {
            vector: None,
            memory: NewMemory::new(&texts[i % texts.len()])
                .tags([tag(i % tags), variant((i * 7 + 3) % tags)]),
            hooks: hooks.clone(),
        };
        let start = Instant::now();
        let stored = store.store(req).expect("store");
        total += start.elapsed();
        if stored.dedup_candidates > 0 {
            DEDUP_FOUND.fetch_add(1, Ordering::Relaxed);
        }
        if stored.outcome == Outcome::Stored {
            store.delete(stored.memory_id).expect("delete");
        } else {
            // A merge or supersede with the fill: undo it so the next sample sees the same store.
            // A merge restores the new memory's own text first (it is the merged record's first
            // source): delete that copy too, or the next store of the text is a duplicate.
            let undo = store.compact_undo(stored.memory_id).expect("undo");
            if stored.outcome == Outcome::Merged
                && let Some(copy) = undo.restored.first()
            {
                store.delete(*copy).expect("delete");
            }
        }
        if (on && i % 256 == 255) || i % 65_536 == 65_535 {
            store.checkpoint().expect("checkpoint");
        }
    }
    total
}

fn hooks(c: &mut Criterion) {
    let mut g = c.benchmark_group("hooks");
    g.sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    let texts = bench_notes(512, 0x0057_0E11);
    for n in SIZES {
        for tags in TAG_COUNTS {
            let (_copy, store) = store_of(n, tags);
            let canonical = store.canonical_tags(None).expect("tags").len();
            eprintln!("hooks/{n}/{tags}: {canonical} canonical tags");
            for on in [true, false] {
                let id = BenchmarkId::new(if on { "on" } else { "off" }, format!("{n}/{tags}"));
                g.bench_function(id, |b| {
                    b.iter_custom(|iters| timed_stores(&store, &texts, tags, on, iters));
                });
            }
            assert_eq!(
                store.canonical_tags(None).expect("tags").len(),
                canonical,
                "the variants must map onto canonical tags"
            );
            eprintln!(
                "hooks/{n}/{tags}: {} stores found a near neighbour",
                DEDUP_FOUND.swap(0, Ordering::Relaxed)
            );
        }
    }
    g.finish();
}

fn hooks_minilm(c: &mut Criterion) {
    let mut g = c.benchmark_group("hooks_minilm");
    g.sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(6));
    let dir = tempfile::tempdir().expect("tempdir");
    let options = StoreOptions::new(std::sync::Arc::new(minilm(2)))
        .sync(SyncPolicy::None)
        .memory_limit(10_000_000);
    let store = Store::open(dir.path(), options).expect("open");
    let fill: Vec<NewMemory> = bench_notes(1_000, 0x000B_EEF1)
        .into_iter()
        .enumerate()
        .map(|(i, t)| NewMemory::new(t).tags([tag(i % 10)]))
        .collect();
    for r in store.store_batch(fill).expect("fill") {
        r.expect("stored");
    }
    let texts = bench_notes(512, 0x0057_0E12);
    for on in [true, false] {
        g.bench_function(if on { "on" } else { "off" }, |b| {
            b.iter_custom(|iters| timed_stores(&store, &texts, 10, on, iters));
        });
    }
    // The model calls inside those stores: the content alone (hooks off) and the content with
    // the tag variant the hook embeds beside it (hooks on). What "on" adds beyond the second
    // is the hooks' own cost.
    let embedder = minilm(2);
    let variant_form = variant(3).replace('_', " ");
    let mut i = 0;
    g.bench_function("model/content", |b| {
        b.iter(|| {
            i += 1;
            embedder
                .embed_batch(&[texts[i % texts.len()].as_str()])
                .expect("embed")
        });
    });
    g.bench_function("model/content+tag", |b| {
        b.iter(|| {
            i += 1;
            embedder
                .embed_batch(&[texts[i % texts.len()].as_str(), variant_form.as_str()])
                .expect("embed")
        });
    });
    g.finish();
}

/// The fact guard's cost per judged neighbour (`docs/benchmarks.md`, "Hooks"): a store judges
/// up to 50, a search each candidate within the cluster distance of a kept hit.
fn fact_guard(c: &mut Criterion) {
    let pairs = [
        (
            "Alice lives in Lisbon.",
            "Alice lives in the city of Berlin.",
        ),
        (
            "The Atlas project uses Postgres as its database.",
            "The Atlas project uses MySQL as the main database.",
        ),
        (
            "User likes coffee, flat white usually",
            "They are a coffee enthusiast, favorite coffee is flatwhite",
        ),
    ];
    c.bench_function("fact_guard/relation", |b| {
        b.iter(|| {
            for (a, n) in pairs {
                std::hint::black_box(amberdb::hooks::facts::relation(a, n));
            }
        });
    });
}

criterion_group!(benches, hooks, hooks_minilm, fact_guard);
criterion_main!(benches);
