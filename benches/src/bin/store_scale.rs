//! STORE with every hook on at 10k memories against 1M (issue #16): does a write cost the same
//! whatever the store holds?
//!
//! For each size `N` (default `10000 1000000`) a store of `N` notes of one user is built once
//! under `target/bench-data/store-scale-N` (the tags hook only, `SyncPolicy::None`, through
//! `store_batch`, so it takes seconds instead of the hours a hooked fill would), and from
//! 65,536 memories on its sealed segments are indexed before it is closed. Each run copies it, opens the copy durable
//! (`SyncPolicy::Always`) with every hook on and the no-model embedder, waits for the index
//! builds the store starts at open (so none runs beside the measured writes), then times
//! `AMBERDB_BENCH_STORES` (default 5,000) stores of new notes into the same user, one at a time,
//! each acknowledged after its fsync. Prints the stores/s of every 10,000 and of all, the
//! latency's p50 / p99, the index's shape before the writes, and how many stores found a near
//! neighbour. A run past 65,536 stores includes a checkpoint sealing the growing rows (inside
//! the store that crosses it) and the index build after it (in the background).
//!
//! `AMBERDB_BENCH_MIN_ROWS` sets `IndexOptions::min_rows` for the measured writes.
//!
//! Usage: `cargo run --release -p amberdb-benches --bin store_scale [N ...]`

#![expect(clippy::print_stdout, reason = "a bench tool reports on stdout")]

use amberdb::{
    HookConfig, IndexOptions, NewMemory, Outcome, Store, StoreOptions, SyncPolicy, WriteHook,
};
use amberdb_benches::{bench_notes, copy_of_store, store_built_once};
use std::time::{Duration, Instant};

const USER: &str = "u";
/// Stores per line of the running report.
const WINDOW: usize = 10_000;

fn options(n: usize) -> StoreOptions {
    StoreOptions::hashing().memory_limit(2 * n + 1_000_000)
}

/// The store of `n` notes, built once; returns a fresh copy of it.
fn copy_of(n: usize) -> tempfile::TempDir {
    let fill = HookConfig {
        write: vec![WriteHook::Tags],
        ..HookConfig::none()
    };
    let built = store_built_once(
        &format!("store-scale-{n}"),
        options(n).sync(SyncPolicy::None).hooks(fill),
        |store| {
            let started = Instant::now();
            let texts = bench_notes(n, 0x5CA1_E000 + n as u64);
            for (c, chunk) in texts.chunks(4_096).enumerate() {
                let batch: Vec<NewMemory> = chunk
                    .iter()
                    .map(|t| {
                        NewMemory::new(t.clone())
                            .user(USER)
                            .tags([format!("t{}", c % 50)])
                    })
                    .collect();
                for r in store.store_batch(batch).expect("store") {
                    r.expect("stored");
                }
            }
            eprintln!("filled {n} in {:.1} s", started.elapsed().as_secs_f64());
            // The fill outruns the background builds; a store that grew at a user's pace
            // would have indexed its sealed segments by now (`docs/ivf.md`, "When a build
            // runs"), so index them before the copy is taken, once.
            if n >= IndexOptions::default().min_rows {
                store.checkpoint().expect("checkpoint");
                let built = Instant::now();
                store.build_index().expect("build");
                eprintln!("indexed in {:.1} s", built.elapsed().as_secs_f64());
            }
        },
    );
    copy_of_store(&built)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    let sizes: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("sizes are numbers of memories"))
        .collect();
    let sizes = if sizes.is_empty() {
        vec![10_000, 1_000_000]
    } else {
        sizes
    };
    let stores: usize = std::env::var("AMBERDB_BENCH_STORES")
        .map_or(5_000, |v| v.parse().expect("AMBERDB_BENCH_STORES"));
    let texts = bench_notes(stores, 0x0057_0E5C);
    for n in sizes {
        let copy = copy_of(n);
        let opened = Instant::now();
        let mut measured = options(n).sync(SyncPolicy::Always);
        if let Ok(rows) = std::env::var("AMBERDB_BENCH_MIN_ROWS") {
            measured.index.min_rows = rows.parse().expect("AMBERDB_BENCH_MIN_ROWS");
        }
        let store = Store::open(copy.path(), measured).expect("open");
        let open_time = opened.elapsed();
        // The builds the store starts by itself at open (`docs/ivf.md`, "When a build runs"),
        // waited for: none runs beside the measured writes.
        let built = Instant::now();
        while store.stats().index.building {
            std::thread::sleep(Duration::from_millis(50));
        }
        let build_time = built.elapsed();
        let stats = store.stats();
        let ivf: Vec<String> = stats
            .index
            .segments
            .iter()
            .map(|s| {
                format!(
                    "{} rows, nprobe {} of {} lists (recall {:.3})",
                    s.rows, s.nprobe, s.nlist, s.built_recall
                )
            })
            .collect();
        println!(
            "{n} memories: open {:.0} ms, pending builds {:.1} s; IVF segments {ivf:?}, flat rows {}, growing rows {}",
            ms(open_time),
            build_time.as_secs_f64(),
            stats.index.flat_rows,
            stats.growing_rows
        );
        if stores == 0 {
            continue;
        }
        let mut took = Vec::with_capacity(stores);
        let mut near = 0;
        let started = Instant::now();
        let mut window = Instant::now();
        for (i, text) in texts.iter().enumerate() {
            if i > 0 && i % WINDOW == 0 {
                let s = store.stats();
                println!(
                    "  stores {}..{i}: {:.0} stores/s; now flat rows {}, growing rows {}, IVF segments {}",
                    i - WINDOW,
                    WINDOW as f64 / window.elapsed().as_secs_f64(),
                    s.index.flat_rows,
                    s.growing_rows,
                    s.index.segments.len()
                );
                window = Instant::now();
            }
            let t = Instant::now();
            let stored = store
                .store(NewMemory::new(text.clone()).user(USER).tags(["t7"]))
                .expect("store");
            took.push(t.elapsed());
            if stored.dedup_candidates > 0 || stored.outcome != Outcome::Stored {
                near += 1;
            }
        }
        let elapsed = started.elapsed();
        took.sort();
        let at = |q: f64| ms(took[((took.len() - 1) as f64 * q) as usize]);
        let after = store.stats();
        let m = &after.maintenance;
        println!(
            "{n} memories: {stores} stores in {:.2} s: {:.0} stores/s, p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms; {near} found a near neighbour; after: growing rows {}, checkpoints to seq {}; {} checkpoint(s) in the background, writers waited at most {:.1} ms for one, the last took {:.2} s; retention removed {} files, {:.0} MB",
            elapsed.as_secs_f64(),
            stores as f64 / elapsed.as_secs_f64(),
            at(0.5),
            at(0.99),
            at(1.0),
            after.growing_rows,
            after.checkpoint_seq,
            m.checkpoints,
            m.longest_writers_wait * 1e3,
            m.last.as_ref().map_or(0.0, |c| c.seconds),
            m.removed.files,
            m.removed.bytes as f64 / 1e6,
        );
        store.close().expect("close");
    }
}
