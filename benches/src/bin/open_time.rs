//! How long opening a store takes: `open_time DIR [RUNS]` copies the store in `DIR` once (so
//! nothing here changes it), then opens the copy `RUNS` times (default 5) with the hashing
//! embedder and no maintenance thread, and prints each open (until `Store::open` returns), when
//! the resident memory then, when the lexical indexes built after it were ready, the median
//! open and the peak RSS.
//! The process exits without dropping the last store (dropping 1M records is not opening).
//!
//! The 1M store of the figures is `store_scale`'s (`cargo run --release -p amberdb-benches
//! --bin store_scale 1000000` builds `target/bench-data/store-scale-1000000` once).
//!
//! With `--in-place` after `RUNS` it opens `DIR` itself, not a copy (a copy made beforehand):
//! one open per process is what a restarted server pays, and copying 4 GB per process would
//! dwarf it.
//!
//! Usage: `cargo run --release -p amberdb-benches --bin open_time -- DIR [RUNS] [--in-place]`

#![expect(clippy::print_stdout, reason = "a bench tool reports on stdout")]

use amberdb::{Mode, SearchRequest, Store, StoreOptions};
use amberdb_benches::{copy_of_store, status_kib};
use std::path::PathBuf;
use std::time::Instant;

/// The allocator of the `amberdb` binary (server/src/main.rs): what a restarted server pays.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let mut args = std::env::args().skip(1);
    let usage = "usage: open_time DIR [RUNS] [--in-place]";
    let dir = PathBuf::from(args.next().expect(usage));
    let runs: usize = args.next().map_or(5, |r| r.parse().expect(usage));
    let in_place = match args.next().as_deref() {
        None => false,
        Some("--in-place") => true,
        Some(other) => panic!("unknown argument {other:?}: {usage}"),
    };
    let copy = (!in_place).then(|| copy_of_store(&dir));
    let path = copy.as_ref().map_or(dir.as_path(), |c| c.path());
    let mut times = Vec::with_capacity(runs);
    let mut last = None;
    for run in 0..runs {
        drop(last.take());
        let started = Instant::now();
        let store =
            Store::open(path, StoreOptions::hashing().maintenance_thread(false)).expect("open");
        let secs = started.elapsed().as_secs_f64();
        let resident_mib = status_kib("VmRSS:") / 1024;
        // The keyword indexes and text columns are built after the open (durability.md, R7);
        // a keyword search waits for them (before it looks the user up: a store without a
        // user "u" answers "not found" just as late).
        let _ = store.search(&SearchRequest::new("ready").user("u").mode(Mode::Keyword));
        assert!(store.stats().lexical_ready);
        let report = store.open_report();
        println!(
            "open {}: {secs:.3} s, {resident_mib} MiB resident ({} memories; checkpoint {:?}, a delta on {:?}, {} skipped, {} log frames replayed); keyword and text indexes ready after {:.3} s",
            run + 1,
            store.stats().memories,
            report.checkpoint_seq,
            report.checkpoint_delta_of,
            report.skipped_checkpoints.len(),
            report.replayed_frames,
            started.elapsed().as_secs_f64()
        );
        times.push(secs);
        last = Some(store);
    }
    times.sort_by(f64::total_cmp);
    println!(
        "median {:.3} s over {runs} opens; peak RSS {} MiB",
        times.get(runs / 2).copied().unwrap_or(f64::NAN),
        status_kib("VmHWM:") / 1024
    );
    // Leaks the open store on purpose (the process ends here); the copy is removed.
    std::mem::forget(last);
    drop(copy);
}
