//! MiniLM throughput: short (~12 word pieces) and long (~202) texts in batches of 1, 8 and 32,
//! with 1 and 2 ONNX Runtime threads; and a cached query next to an uncached one. Needs
//! `scripts/fetch-model`. Latency percentiles and peak RSS: `cargo run --release -p
//! mnemo-benches --bin embedbench` (docs/benchmarks.md).

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use mnemo_benches::{SEED, bench_texts, minilm};
use mnemo_embed::{CachedEmbedder, DEFAULT_QUERY_CACHE, Embedder};
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

criterion_group!(benches, throughput, query_cache);
criterion_main!(benches);
