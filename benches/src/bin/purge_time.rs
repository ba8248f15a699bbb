//! What a purge costs at scale: `purge_time DIR [DELETES]` copies the store in `DIR` (so
//! nothing here changes it), opens the copy with the hashing embedder and no maintenance
//! thread, deletes `DELETES` memories (default 1,000, spread evenly over the store's ids),
//! then purges (`docs/durability.md`, "Purge") and prints what the purge rewrote, its time, and
//! the process's peak RSS before and after it (which counts the new segment's mapped pages) and
//! its anonymous memory before and at most during it (what the purge allocated).
//!
//! The 1M store of the figures is the server bench's maintenance store
//! (`target/bench-data/server-maint-1000000`, `docs/benchmarks.md`, "Load beside
//! checkpoints, purges and backups").
//!
//! Usage: `cargo run --release -p amberdb-benches --bin purge_time -- DIR [DELETES]`

#![expect(clippy::print_stdout, reason = "a bench tool reports on stdout")]

use amberdb::{Store, StoreOptions};
use amberdb_benches::{copy_of_store, status_kib};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The allocator of the `amberdb` binary (server/src/main.rs).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let mut args = std::env::args().skip(1);
    let usage = "usage: purge_time DIR [DELETES]";
    let dir = PathBuf::from(args.next().expect(usage));
    let deletes: usize = args.next().map_or(1_000, |d| d.parse().expect(usage));
    if let Some(other) = args.next() {
        panic!("unknown argument {other:?}: {usage}");
    }
    let copy = copy_of_store(&dir);
    let store = Store::open(
        copy.path(),
        StoreOptions::hashing().maintenance_thread(false),
    )
    .expect("open");
    while !store.lexical_ready() {
        std::thread::sleep(Duration::from_millis(100));
    }
    let ids = store.memory_ids();
    let step = (ids.len() / deletes.max(1)).max(1);
    let mut deleted = 0;
    for id in ids.iter().step_by(step).take(deletes) {
        store.delete(*id).expect("delete");
        deleted += 1;
    }
    let before_mib = status_kib("VmHWM:") / 1024;
    let anon_before = status_kib("RssAnon:") / 1024;
    // The anonymous memory the purge allocates (VmHWM also counts the new segment's mapped
    // pages, which are the page cache's), sampled every 20 ms.
    let purging = AtomicBool::new(true);
    let started = Instant::now();
    let (purge, anon_peak) = std::thread::scope(|s| {
        let sampler = s.spawn(|| {
            let mut peak = 0;
            while purging.load(Ordering::Relaxed) {
                peak = peak.max(status_kib("RssAnon:") / 1024);
                std::thread::sleep(Duration::from_millis(20));
            }
            peak
        });
        let purge = store.purge().expect("purge");
        purging.store(false, Ordering::Relaxed);
        (purge, sampler.join().expect("sampler"))
    });
    println!(
        "{} memories, {deleted} deleted; purge: {} segments rewritten, {} rows dropped, {:.2} s ({:.2} s to return); peak RSS {before_mib} MiB before it, {} MiB after; anonymous {anon_before} MiB before it, at most {anon_peak} MiB during it; {} MB on disk after",
        ids.len(),
        purge.segments_rewritten,
        purge.rows_dropped,
        purge.seconds,
        started.elapsed().as_secs_f64(),
        status_kib("VmHWM:") / 1024,
        store.bytes_on_disk() / 1_000_000
    );
    // Dropping 1M records is not what is measured: the process ends here.
    std::mem::forget(store);
    drop(copy);
}
