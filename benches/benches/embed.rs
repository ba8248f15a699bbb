//! MiniLM throughput: short (~12 word pieces) and long (~202) texts in batches of 1, 8 and 32,
//! with 1 and 2 ONNX Runtime threads; a cached query next to an uncached one; and a durable
//! store's write path, 32 memories by `store` each next to one `store_batch`. Needs
//! `scripts/fetch-model`. Latency percentiles and peak RSS: `cargo run --release -p
//! amberdb-benches --bin embedbench` (docs/benchmarks.md).

use amberdb::{NewMemory, Store, StoreOptions};
use amberdb_benches::{SEED, bench_data_dir, bench_texts, minilm};
use amberdb_embed::{CachedEmbedder, DEFAULT_QUERY_CACHE, Embedder};
use criterion::{BatchSize, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

fn throughput(c: &mut Criterion) {
    for (name, words) in [("short", 10), ("long", 200)] {
        let texts = bench_texts(32, words, SEED);
        let mut g = c.benchmark_group(format!("minilm_{name}"));
        g.sample_size(10)
            .measurement_time(Duration::from_secs(if words > 10 { 8 } else { 4 }));
        for threads in [1, 2] {
            let model = minilm(threads);
            for batch in [1_usize, 8, 32] {
                let refs: Vec<&str> = texts[..batch].iter().map(String::as_str).collect();
                g.throughput(Throughput::Elements(batch as u64));
                g.bench_with_input(
                    BenchmarkId::new(format!("{threads}_threads"), batch),
                    &refs,
                    |b, refs| b.iter(|| model.embed_batch(black_box(refs)).expect("embed")),
                );
            }
        }
        g.finish();
    }
}

fn query_cache(c: &mut Criterion) {
    let model: Arc<dyn Embedder> = Arc::new(minilm(2));
    let cached = CachedEmbedder::new(Arc::clone(&model), DEFAULT_QUERY_CACHE);
    let query = "why did the deploy fail after the restart";
    cached.embed_query(query).expect("warm");
    let mut g = c.benchmark_group("query");
    g.bench_function("minilm_uncached", |b| {
        b.iter(|| model.embed_query(black_box(query)).expect("embed"));
    });
    g.bench_function("minilm_cached", |b| {
        b.iter(|| cached.embed_query(black_box(query)).expect("embed"));
    });
    g.finish();
}

fn write_path(c: &mut Criterion) {
    std::fs::create_dir_all(bench_data_dir()).expect("bench dir");
    let dir = tempfile::tempdir_in(bench_data_dir()).expect("tempdir");
    let options = StoreOptions::new(Arc::new(minilm(2))).memory_limit(10_000_000);
    let store = Store::open(dir.path(), options).expect("open");
    let texts = bench_texts(4096, 10, SEED);
    let mut next = 0_usize;
    // Unique contents: a repeated one would be refused as a duplicate, not stored.
    let mut batch = || -> Vec<NewMemory> {
        (0..32)
            .map(|_| {
                next += 1;
                NewMemory::new(format!("{} {next}", texts[next % texts.len()]))
            })
            .collect()
    };
    let mut g = c.benchmark_group("minilm_store_32");
    g.sample_size(10).throughput(Throughput::Elements(32));
    g.bench_function("store_each", |b| {
        b.iter_batched(
            &mut batch,
            |memories| {
                memories
                    .into_iter()
                    .map(|m| store.store(m).expect("store").memory_id)
                    .collect::<Vec<_>>()
            },
            BatchSize::SmallInput,
        );
    });
    g.bench_function("store_batch", |b| {
        b.iter_batched(
            &mut batch,
            |memories| store.store_batch(memories).expect("batch"),
            BatchSize::SmallInput,
        );
    });
    g.finish();
}

criterion_group!(benches, throughput, query_cache, write_path);
criterion_main!(benches);
