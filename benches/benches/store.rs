//! Durable stores with the no-model embedder under `SyncPolicy::Always`: one writer, and eight
//! writers sharing fsyncs through group commit. Then the open time of a 1M-record store with a
//! checkpoint (built once under target/bench-data; `AMBERDB_BENCH_OPEN=0` skips it).

use amberdb::{NewMemory, Store, StoreOptions};
use amberdb_benches::{bench_data_dir, checkpointed_store};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

static NEXT: AtomicU64 = AtomicU64::new(0);

fn fresh_store() -> (tempfile::TempDir, Store) {
    std::fs::create_dir_all(bench_data_dir()).expect("bench dir");
    let dir = tempfile::tempdir_in(bench_data_dir()).expect("tempdir");
    let store =
        Store::open(dir.path(), StoreOptions::hashing().memory_limit(10_000_000)).expect("open");
    (dir, store)
}

fn note() -> NewMemory {
    let i = NEXT.fetch_add(1, Ordering::Relaxed);
    NewMemory::new(format!(
        "note {i}: the deploy of service {} failed until the cache was warmed",
        i % 89
    ))
    .tags(["ops"])
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("durable_store");
    g.sample_size(10).measurement_time(Duration::from_secs(10));
    for writers in [1u64, 8] {
        g.throughput(Throughput::Elements(1));
        g.bench_function(format!("{writers}_writers"), |b| {
            b.iter_custom(|iters| {
                let (_dir, store) = fresh_store();
                let per = iters.div_ceil(writers);
                let start = Instant::now();
                std::thread::scope(|s| {
                    for _ in 0..writers {
                        let store = store.clone();
                        s.spawn(move || {
                            for _ in 0..per {
                                store.store(note()).expect("store");
                            }
                        });
                    }
                });
                start
                    .elapsed()
                    .mul_f64(iters as f64 / (per * writers) as f64)
            });
        });
    }
    g.finish();
    if std::env::var("AMBERDB_BENCH_OPEN").as_deref() != Ok("0") {
        let dir = checkpointed_store(1_000_000);
        let mut g = c.benchmark_group("open");
        g.sample_size(10).measurement_time(Duration::from_secs(20));
        g.bench_function("1M_records_checkpointed", |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let start = Instant::now();
                    let store = Store::open(&dir, StoreOptions::hashing().memory_limit(10_000_000))
                        .expect("open");
                    total += start.elapsed();
                    assert_eq!(store.stats().memories, 1_000_000);
                    drop(store); // outside the timing: freeing 1M records is not opening
                }
                total
            });
        });
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
