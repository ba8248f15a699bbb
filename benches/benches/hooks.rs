//! What the write hooks (tag and category normalization, exact and semantic dedup) add to a
//! store, at 1k / 10k / 100k memories and 10 / 1,000 / 10,000 canonical tags
//! (`docs/benchmarks.md`, "Hooks").
//!
//! `hooks/{on,off}/<memories>/<canonical tags>`: one `store_memory` of a new memory with one
//! existing and one new tag, on a store built once per size, with the no-model embedder so the
//! figure is the engine's and the hooks' own work (the model call is measured apart).
//! `hooks_minilm/{on,off}`: the same store operation with the real model on a 1k store: the
//! latency a user sees, which the hooks' cost is compared with. Both under `SyncPolicy::None`:
//! the fsync is the same with and without hooks and would only add noise.

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use mnemo_benches::{bench_data_dir, bench_texts, minilm};
use mnemo_engine::{
    HookConfig, HookOverrides, NewMemory, Store, StoreOptions, StoreRequest, SyncPolicy, WriteHook,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

const SIZES: [usize; 3] = [1_000, 10_000, 100_000];
const TAG_COUNTS: [usize; 3] = [10, 1_000, 10_000];

fn tag(i: usize) -> String {
    // Distinct words, not numbered variants of one word, so normalization keeps them apart.
    format!(
        "t{:x}",
        (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40
    )
}

/// A store of `n` memories carrying `tags` distinct canonical tags (built once under
/// `target/bench-data`).
fn store_of(n: usize, tags: usize) -> Store {
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
        let texts = bench_texts(n, 12, 0x000B_EEF0 + n as u64);
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
    Store::open(&dir, options()).expect("reopen")
}

fn request(store_n: u64, with_hooks: bool) -> StoreRequest {
    let hooks = if with_hooks {
        HookOverrides::default()
    } else {
        HookOverrides {
            skip: WriteHook::ALL.to_vec(),
            ..HookOverrides::default()
        }
    };
    StoreRequest {
        memory: NewMemory::new(format!(
            "bench note {store_n}: the deploy of service {} failed on a missing env var",
            store_n * 7919
        ))
        .tags([tag(0), format!("fresh tag {store_n:x}")]),
        hooks,
    }
}

fn hooks(c: &mut Criterion) {
    let mut g = c.benchmark_group("hooks");
    g.sample_size(30).measurement_time(Duration::from_secs(4));
    let counter = AtomicU64::new(1);
    for n in SIZES {
        for tags in TAG_COUNTS {
            let store = store_of(n, tags);
            let canonical = store.canonical_tags(None).expect("tags").len();
            eprintln!("hooks/{n}/{tags}: {canonical} canonical tags");
            for on in [false, true] {
                let id = BenchmarkId::new(if on { "on" } else { "off" }, format!("{n}/{tags}"));
                g.bench_function(id, |b| {
                    b.iter(|| {
                        let i = counter.fetch_add(1, Ordering::Relaxed);
                        store.store_memory(request(i, on)).expect("store")
                    });
                });
            }
        }
    }
    g.finish();
}

fn hooks_minilm(c: &mut Criterion) {
    let mut g = c.benchmark_group("hooks_minilm");
    g.sample_size(30).measurement_time(Duration::from_secs(6));
    let dir = tempfile::tempdir().expect("tempdir");
    let options = StoreOptions::new(std::sync::Arc::new(minilm(2)))
        .sync(SyncPolicy::None)
        .memory_limit(10_000_000);
    let store = Store::open(dir.path(), options).expect("open");
    let texts = bench_texts(1_000, 12, 0x000B_EEF1);
    let batch: Vec<NewMemory> = texts.iter().map(NewMemory::new).collect();
    for r in store.store_batch(batch).expect("fill") {
        let _ = r;
    }
    let counter = AtomicU64::new(1);
    for on in [false, true] {
        g.bench_function(if on { "on" } else { "off" }, |b| {
            b.iter(|| {
                let i = counter.fetch_add(1, Ordering::Relaxed);
                store.store_memory(request(i, on)).expect("store")
            });
        });
    }
    g.finish();
}

criterion_group!(benches, hooks, hooks_minilm);
criterion_main!(benches);
