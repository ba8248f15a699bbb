//! Exact top-10 over seeded clustered 384-d vectors: 100k and 1M rows, 1 and 2 threads, f32
//! and the i8 scan with exact re-rank; and a batch of queries sharing one pass at 1M.
//! Throughput is the f32 bytes a query covers (n × 384 × 4), so GB/s compare across types.
//! `AMBERDB_BENCH_SIZES=100000` skips the 1M set.
//!
//! Then the same 100k rows as one IVF segment (`ivf_100000`): a top-10 probe at the built
//! nprobe, and 1,024 stored rows asking for their neighbours at or above 0.8 (compaction's
//! duplicate search, `Probe::Range(16)`), one query at a time against one batch
//! (`Collection::search_range_batch`), on 2 threads. Criterion's `--bench search ivf` runs
//! just these.

use amberdb_benches::{DIM, SEED, sealed_collection, vectors};
use amberdb_index::ivf::{IvfParams, build};
use amberdb_index::{Collection, IvfSegment, Probe, RangeQuery, Scan, SealedBytes, SearchParams};
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

fn ivf(c: &mut Criterion) {
    let n = 100_000;
    let data = vectors(n, SEED);
    let keys: Vec<u64> = (1..=n as u64).collect();
    let started = std::time::Instant::now();
    let built = build(&keys, &data, DIM, &IvfParams::new(SEED)).expect("build");
    eprintln!(
        "ivf_{n}: built in {:.2} s on {} threads, kernels {}: nlist {}, nprobe {}, recall {:.3}",
        started.elapsed().as_secs_f64(),
        rayon::current_num_threads(),
        amberdb_index::kernels::backend(),
        built.nlist,
        built.nprobe,
        built.built_recall
    );
    let mut collection = Collection::new(DIM);
    collection
        .push_sealed(
            IvfSegment::open("bench-ivf", SealedBytes::copy_from(&built.bytes)).expect("open"),
        )
        .expect("push");
    let queries = vectors(64, SEED + 1);
    let mut g = c.benchmark_group(format!("ivf_{n}"));
    g.sample_size(20).measurement_time(Duration::from_secs(8));
    let one = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("pool");
    let p = SearchParams {
        scan: Scan::i8_for(10),
        probe: Probe::Built,
        ..SearchParams::top(10)
    };
    let mut qi = 0;
    g.throughput(Throughput::Elements(1));
    g.bench_function("top10_built_nprobe_1t", |b| {
        b.iter(|| {
            qi = (qi + 1) % 64;
            one.install(|| collection.search(black_box(&queries[qi * DIM..(qi + 1) * DIM]), &p))
                .expect("search")
        });
    });
    let two = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .expect("pool");
    let range = SearchParams {
        min_score: 0.8,
        scan: Scan::i8_for(50),
        probe: Probe::Range(16),
        ..SearchParams::top(50)
    };
    let asking: Vec<RangeQuery<'_>> = data
        .chunks_exact(DIM)
        .zip(&keys)
        .step_by(n / 1024)
        .take(1024)
        .map(|(vector, &key)| RangeQuery {
            vector,
            exclude: Some(key),
        })
        .collect();
    g.sample_size(10)
        .throughput(Throughput::Elements(asking.len() as u64));
    g.bench_function("range_1024_one_by_one_2t", |b| {
        b.iter(|| {
            two.install(|| {
                for q in &asking {
                    let own = |key: u64| q.exclude != Some(key);
                    let p = SearchParams {
                        filter: Some(&own),
                        ..range
                    };
                    collection.search(black_box(q.vector), &p).expect("search");
                }
            });
        });
    });
    g.bench_function("range_1024_batch_2t", |b| {
        b.iter(|| {
            two.install(|| collection.search_range_batch(black_box(&asking), &range))
                .expect("batch")
        });
    });
    g.finish();
}

criterion_group!(benches, bench, ivf);
criterion_main!(benches);
