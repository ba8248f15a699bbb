//! How long compaction's duplicate search takes: `compaction_time DIR [RUNS] [--in-place]
//! [--with-writes]` copies the store in `DIR` once (so nothing here changes it), opens the
//! copy with the hashing embedder and no maintenance thread, waits for its index, then runs
//! `compact_preview` for the default user at the store's compaction distance (0.2) `RUNS`
//! times (default 3), and prints each run (time, groups, memories before and after), the
//! median and the peak RSS. A preview writes nothing: it is the whole cost of deciding what
//! compaction merges, one range query per memory (`docs/ivf.md`, "Store-time dedup,
//! load-time folding, compaction").
//!
//! With `--with-writes`, a writer thread stores notes of another user one at a time
//! throughout, and each run also prints how many it stored and its slowest store: how long a
//! preview makes writes wait.
//!
//! The stores of the figures are the server bench's maintenance stores
//! (`target/bench-data/server-maint-100000`, `-1000000`; `docs/benchmarks.md`, "Compaction's
//! duplicate search"). With `--in-place` it opens `DIR` itself (a copy made beforehand).
//!
//! Usage: `cargo run --release -p amberdb-benches --bin compaction_time -- DIR [RUNS]
//! [--in-place]`

#![expect(clippy::print_stdout, reason = "a bench tool reports on stdout")]

use amberdb::{NewMemory, Store, StoreOptions};
use amberdb_benches::{copy_of_store, status_kib};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

fn main() {
    let usage = "usage: compaction_time DIR [RUNS] [--in-place]";
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(args.next().expect(usage));
    let runs: usize = args.next().map_or(3, |r| r.parse().expect(usage));
    let (mut in_place, mut with_writes) = (false, false);
    for flag in args {
        match flag.as_str() {
            "--in-place" => in_place = true,
            "--with-writes" => with_writes = true,
            other => panic!("unknown argument {other:?}: {usage}"),
        }
    }
    let copy = (!in_place).then(|| copy_of_store(&dir));
    let path = copy.as_ref().map_or(dir.as_path(), |c| c.path());
    let options = StoreOptions::hashing()
        .maintenance_thread(false)
        .memory_limit(10_000_000);
    let store = Store::open(path, options).expect("open");
    while store.stats().index.building {
        std::thread::sleep(Duration::from_millis(100));
    }
    let stats = store.stats();
    println!("{} memories; index: {:?}", stats.memories, stats.index);
    // Notes differ from those of an earlier process on the same store (an exact repeat is
    // refused).
    let tag = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let mut times = Vec::with_capacity(runs);
    for run in 0..runs {
        let done = AtomicBool::new(false);
        let (secs, preview, writes) = std::thread::scope(|s| {
            let writer = with_writes.then(|| {
                s.spawn(|| {
                    let (mut stored, mut slowest) = (0u64, Duration::ZERO);
                    while !done.load(Ordering::Relaxed) {
                        let note = NewMemory::new(format!("writer note {tag} {run} {stored}"))
                            .user("compaction-bench-writer");
                        let started = Instant::now();
                        store.store(note).expect("store");
                        slowest = slowest.max(started.elapsed());
                        stored += 1;
                    }
                    (stored, slowest)
                })
            });
            let started = Instant::now();
            let preview = store.compact_preview(None, None).expect("preview");
            let secs = started.elapsed().as_secs_f64();
            done.store(true, Ordering::Relaxed);
            let writes = writer.map(|w| w.join().expect("writer"));
            (secs, preview, writes)
        });
        println!(
            "run {}: {secs:.2} s, {} groups, {} memories → {}",
            run + 1,
            preview.groups.len(),
            preview.memories_before,
            preview.memories_after
        );
        if let Some((stored, slowest)) = writes {
            println!(
                "  meanwhile {stored} stores of another user, the slowest {:.1} ms",
                slowest.as_secs_f64() * 1000.0
            );
        }
        times.push(secs);
    }
    times.sort_by(f64::total_cmp);
    println!(
        "median {:.2} s over {runs} runs; peak RSS {} MiB",
        times.get(runs / 2).copied().unwrap_or(f64::NAN),
        status_kib("VmHWM:") / 1024
    );
    std::mem::forget(store);
    drop(copy);
}
