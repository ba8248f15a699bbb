//! How long searches wait for writers that run store-time dedup (issue #15): a user with `N`
//! memories (default 20,000; `read_under_dedup N`), every hook on, the no-model embedder. One
//! thread searches the user's memories for `AMBERDB_BENCH_SECONDS` (default 5) alone, then as
//! long again while a second thread stores new memories into the same user, durably, one at a
//! time: each store's semantic dedup scans the user's vectors. Prints the searches' latency
//! alone and under the writer (p50, p99, max) and the writer's rate.
//!
//! Usage: `cargo run --release -p amberdb-benches --bin read_under_dedup [N]`

#![expect(clippy::print_stdout, reason = "a bench tool reports on stdout")]

use amberdb::{HookConfig, Mode, NewMemory, SearchRequest, Store, StoreOptions, SyncPolicy};
use amberdb_benches::{SEED, bench_texts};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

fn quantiles(mut v: Vec<Duration>) -> String {
    v.sort();
    let at = |q: f64| v[((v.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e3;
    format!(
        "{} searches, p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        v.len(),
        at(0.5),
        at(0.99),
        at(1.0)
    )
}

/// Searches until `stop`, one at a time; the latency of each.
fn search_until(store: &Store, queries: &[String], stop: &AtomicBool) -> Vec<Duration> {
    let mut took = Vec::new();
    for q in queries.iter().cycle() {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let req = SearchRequest::new(q.clone()).user("u").mode(Mode::Vector);
        let t = Instant::now();
        let hits = store.search(&req).expect("search");
        took.push(t.elapsed());
        assert!(!hits.results.is_empty(), "the user has memories");
    }
    took
}

fn main() -> anyhow::Result<()> {
    let n: usize = std::env::args().nth(1).map_or(Ok(20_000), |a| a.parse())?;
    let seconds: u64 = std::env::var("AMBERDB_BENCH_SECONDS").map_or(Ok(5), |s| s.parse())?;
    let phase = Duration::from_secs(seconds);
    let dir = tempfile::tempdir()?;
    let options = || {
        StoreOptions::hashing()
            .hooks(HookConfig::default())
            .memory_limit(10_000_000)
    };
    let texts = bench_texts(n + 200_000, 12, SEED);
    let (prefill, fresh) = texts.split_at(n);
    {
        let store = Store::open(dir.path(), options().sync(SyncPolicy::None))?;
        let built = Instant::now();
        let batch: Vec<NewMemory> = prefill
            .iter()
            .map(|t| NewMemory::new(t.clone()).user("u"))
            .collect();
        for r in store.store_batch(batch)? {
            r?;
        }
        store.checkpoint()?;
        println!(
            "built {n} memories of user \"u\" in {:.1} s",
            built.elapsed().as_secs_f64()
        );
    }
    let store = Store::open(dir.path(), options())?;
    let queries: Vec<String> = bench_texts(1_000, 6, SEED + 7);

    let stop = AtomicBool::new(false);
    let alone = std::thread::scope(|s| {
        let reader = s.spawn(|| search_until(&store, &queries, &stop));
        std::thread::sleep(phase);
        stop.store(true, Ordering::SeqCst);
        reader.join().expect("reader")
    });

    let stop = Arc::new(AtomicBool::new(false));
    let stored = AtomicU64::new(0);
    let under_writer = std::thread::scope(|s| {
        s.spawn(|| {
            for t in fresh {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                let req = amberdb::StoreRequest::new(NewMemory::new(t.clone()).user("u"));
                store.store(req).expect("store");
                stored.fetch_add(1, Ordering::Relaxed);
            }
        });
        // Let the writer start before the reader measures.
        std::thread::sleep(Duration::from_millis(100));
        let reader = s.spawn(|| search_until(&store, &queries, &stop));
        std::thread::sleep(phase);
        stop.store(true, Ordering::SeqCst);
        reader.join().expect("reader")
    });
    println!("search alone:        {}", quantiles(alone));
    println!("search under writer: {}", quantiles(under_writer));
    let stored = stored.load(Ordering::Relaxed);
    println!(
        "writer: {stored} durable stores with every hook on, {:.0}/s",
        stored as f64 / (phase.as_secs_f64() + 0.1)
    );
    Ok(())
}
