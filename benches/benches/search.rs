//! Exact top-10 over seeded clustered 384-d vectors: 100k and 1M rows, 1 and 2 threads, f32
//! and the i8 scan with exact re-rank; and a batch of queries sharing one pass at 1M.
//! Throughput is the f32 bytes a query covers (n × 384 × 4), so GB/s compare across types.
//! `AMBERDB_BENCH_SIZES=100000` skips the 1M set.

use amberdb_benches::{DIM, SEED, sealed_collection, vectors};
use amberdb_index::{Scan, SearchParams};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;
use std::time::Duration;

fn sizes() -> Vec<usize> {
    std::env::var("AMBERDB_BENCH_SIZES")
        .ok()
        .map(|s| s.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![100_000, 1_000_000])
}

fn bench(c: &mut Criterion) {
    let queries = vectors(64, SEED + 1);
    for n in sizes() {
        let collection = sealed_collection(&vectors(n, SEED));
        let mut g = c.benchmark_group(format!("top10_{n}"));
        g.sample_size(20)
            .measurement_time(Duration::from_secs(8))
            .throughput(Throughput::Bytes((n * DIM * 4) as u64));
        for threads in [1, 2] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .expect("pool");
            for (name, scan) in [("f32", Scan::F32), ("i8_rerank", Scan::i8_for(10))] {
                let p = SearchParams {
                    scan,
                    ..SearchParams::top(10)
                };
                let mut qi = 0;
                g.bench_function(BenchmarkId::new(name, format!("{threads}t")), |b| {
                    b.iter(|| {
                        qi = (qi + 1) % 64;
                        pool.install(|| {
                            collection.search(black_box(&queries[qi * DIM..(qi + 1) * DIM]), &p)
                        })
                        .expect("search")
                    });
                });
            }
        }
        g.finish();
        if n >= 1_000_000 {
            let mut g = c.benchmark_group(format!("batch_top10_{n}"));
            g.sample_size(10).measurement_time(Duration::from_secs(10));
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(2)
                .build()
                .expect("pool");
            for batch in [1usize, 16] {
                let qs: Vec<&[f32]> = queries.chunks_exact(DIM).take(batch).collect();
                g.throughput(Throughput::Elements(batch as u64));
                g.bench_function(BenchmarkId::new("f32_2t", batch), |b| {
                    b.iter(|| {
                        pool.install(|| {
                            collection.search_batch(black_box(&qs), &SearchParams::top(10))
                        })
                        .expect("batch")
                    });
                });
            }
            g.finish();
        }
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
