//! Disk per live memory under churn, and what is left after deleting 90 % (issue #17): does
//! the store stay bounded, and does a delete give the space back?
//!
//! 1. Fill: `N` memories (default 1,000,000) of 100 users, in durable batches of 512 (the
//!    no-model embedder, 384-d; hooks off but the tags hook, so the figure is the engine's).
//! 2. Churn: `N / 2` operations, a third each: store a new memory, update one's tags, delete
//!    one; the live count stays near `N`. The directory's size is sampled every 10,000.
//! 3. Settle: wait for one maintenance cycle (`AMBERDB_BENCH_PURGE_DELAY` seconds after the last
//!    delete, default 20, then the purge), then a checkpoint: disk per live memory.
//! 4. Delete 90 % of the live memories (random, seeded), wait for one maintenance cycle the
//!    same way: the directory against its peak.
//!
//! Index builds run in the background as they would (their files count while they exist).
//! Prints each phase's directory size, bytes per live memory, and the vector bytes
//! (384 × 4 f32 and 384 i8 codes per row) it holds.
//!
//! Usage: `cargo run --release -p amberdb-benches --bin disk_churn [N]`

#![expect(clippy::print_stdout, reason = "a bench tool reports on stdout")]

use amberdb::{
    HookConfig, MemoryId, NewMemory, Store, StoreOptions, SyncPolicy, UpdateRequest, WriteHook,
};
use amberdb_benches::bench_notes;
use amberdb_index::synthetic::SeededRng;
use std::time::{Duration, Instant};

/// f32 vector and i8 codes of one row at 384-d.
const VECTOR_BYTES: f64 = 384.0 * 4.0 + 384.0;

/// A seeded index below `n`.
fn below(rng: &mut SeededRng, n: usize) -> usize {
    rng.below(n.max(1) as u64) as usize
}

fn mb(b: u64) -> f64 {
    b as f64 / 1e6
}

fn report(phase: &str, store: &Store, peak: &mut u64) -> u64 {
    let bytes = store.bytes_on_disk();
    *peak = (*peak).max(bytes);
    let live = store.stats().memories.max(1) as f64;
    println!(
        "{phase:<28} {:>10.1} MB  {:>9} live  {:>7.0} B/live  {:>6.0} B/live beyond the vector bytes ({VECTOR_BYTES:.0})",
        mb(bytes),
        store.stats().memories,
        bytes as f64 / live,
        bytes as f64 / live - VECTOR_BYTES,
    );
    bytes
}

/// One maintenance cycle after the last delete: waits until a purge has finished after it
/// (a purge has run since `since_purges` and no delete waits for one), no index build runs,
/// then checkpoints.
fn settle(store: &Store, since_purges: u64) {
    let started = Instant::now();
    loop {
        let m = store.stats().maintenance;
        if m.purges > since_purges && m.purge_pending.is_none() {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let purged = started.elapsed().as_secs_f64();
    while store.stats().index.building {
        std::thread::sleep(Duration::from_millis(200));
    }
    store.checkpoint().expect("checkpoint");
    eprintln!(
        "  settled in {:.1} s (the purge after {purged:.1} s): {:?}",
        started.elapsed().as_secs_f64(),
        store.stats().maintenance.last_purge
    );
    print_index(store);
}

/// The index builds so far, the last one, and the segments.
fn print_index(store: &Store) {
    let index = store.stats().index;
    println!(
        "  index: {} builds, {} failed (last error {:?}); last {:?}; IVF segments (rows, nlist, nprobe) {:?}, {} flat rows",
        index.builds,
        index.failures,
        index.last_error,
        index.last_build,
        index
            .segments
            .iter()
            .map(|s| (s.rows, s.nlist, s.nprobe))
            .collect::<Vec<_>>(),
        index.flat_rows
    );
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .map_or(1_000_000, |a| a.parse().expect("N"));
    let delay: u64 = std::env::var("AMBERDB_BENCH_PURGE_DELAY")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let seed = 0xD15C_0000 + n as u64;
    eprintln!("disk_churn: N {n}, purge delay {delay} s, seed {seed}");
    let dir =
        tempfile::tempdir_in(concat!(env!("CARGO_MANIFEST_DIR"), "/../target")).expect("tempdir");
    let options = StoreOptions::hashing()
        .memory_limit(2 * n + 1_000)
        .sync(SyncPolicy::Always)
        .purge_delay(Some(Duration::from_secs(delay)))
        .hooks(HookConfig {
            write: vec![WriteHook::Tags],
            ..HookConfig::none()
        });
    let store = Store::open(dir.path(), options).expect("open");
    let mut rng = SeededRng::new(seed);
    let mut peak = 0u64;
    let texts = bench_notes(n + n / 6 + 1, seed);
    let mut next_text = 0usize;
    let mut new_memory = |rng: &mut SeededRng| {
        let t = texts[next_text % texts.len()].clone();
        next_text += 1;
        NewMemory::new(t)
            .user(format!("user-{}", below(rng, 100)))
            .tags([format!("t{}", below(rng, 50))])
    };
    let started = Instant::now();
    let mut live: Vec<MemoryId> = Vec::with_capacity(n + n / 2);
    while live.len() < n {
        let batch: Vec<NewMemory> = (0..512.min(n - live.len()))
            .map(|_| new_memory(&mut rng))
            .collect();
        let stored = store
            .durable_batch(|deferred| deferred.store_batch(batch))
            .expect("durable")
            .expect("stored");
        live.extend(stored.into_iter().map(|r| r.expect("stored").memory_id));
    }
    eprintln!("filled in {:.0} s", started.elapsed().as_secs_f64());
    report("after the fill", &store, &mut peak);
    print_index(&store);

    let started = Instant::now();
    let ops = n / 2;
    let (mut stores, mut updates, mut deletes) = (0, 0, 0);
    for i in 0..ops {
        match below(&mut rng, 3) {
            0 => {
                let r = store.store(new_memory(&mut rng)).expect("store");
                live.push(r.memory_id);
                stores += 1;
            }
            1 => {
                let id = live[below(&mut rng, live.len())];
                store
                    .update(UpdateRequest {
                        memory_id: Some(id),
                        tags: Some(vec![format!("t{}", below(&mut rng, 50)), "updated".into()]),
                        ..UpdateRequest::default()
                    })
                    .expect("update");
                updates += 1;
            }
            _ => {
                let k = below(&mut rng, live.len());
                store.delete(live.swap_remove(k)).expect("delete");
                deletes += 1;
            }
        }
        if (i + 1) % 10_000 == 0 {
            let bytes = store.bytes_on_disk();
            peak = peak.max(bytes);
        }
    }
    eprintln!(
        "churn: {stores} stores, {updates} updates, {deletes} deletes in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    report("during churn (its end)", &store, &mut peak);
    let m = store.stats().maintenance;
    println!(
        "  during churn: {} purges, {} checkpoints, {} index builds; retention and purges removed {:.1} MB",
        m.purges,
        m.checkpoints,
        store.stats().index.builds,
        mb(m.removed.bytes)
    );
    print_index(&store);
    println!("{:<28} {:>10.1} MB", "peak so far", mb(peak));
    settle(&store, store.stats().maintenance.purges);
    report("churn, one cycle later", &store, &mut peak);

    let started = Instant::now();
    delete_all_but_a_tenth(&store, live, &mut rng);
    eprintln!("deleted 90 % in {:.0} s", started.elapsed().as_secs_f64());
    report("90 % deleted", &store, &mut peak);
    settle(&store, store.stats().maintenance.purges);
    let after = report("90 % deleted, one cycle on", &store, &mut peak);
    let files = files_in(dir.path());
    eprintln!("  files: {files:?}");
    println!(
        "{:<28} {:>10.1} MB; after deleting 90 %: {:.1} % of the peak",
        "peak",
        mb(peak),
        100.0 * after as f64 / peak as f64
    );
}

/// Deletes all but a tenth of `live`, in durable batches of 512.
fn delete_all_but_a_tenth(store: &Store, mut live: Vec<MemoryId>, rng: &mut SeededRng) {
    let keep = live.len() / 10;
    while live.len() > keep {
        let k = below(rng, live.len());
        let victims: Vec<MemoryId> = (0..512.min(live.len() - keep))
            .map(|_| live.swap_remove(k.min(live.len() - 1)))
            .collect();
        store
            .durable_batch(|batch| {
                for id in victims {
                    batch.delete(id).expect("delete");
                }
            })
            .expect("durable");
    }
}

/// The files in `dir` with their sizes, by name.
fn files_in(dir: &std::path::Path) -> Vec<(String, u64)> {
    let mut files: Vec<(String, u64)> = std::fs::read_dir(dir)
        .expect("list")
        .map(|e| {
            let e = e.expect("entry");
            (
                e.file_name().to_string_lossy().into_owned(),
                e.metadata().map_or(0, |m| m.len()),
            )
        })
        .collect();
    files.sort();
    files
}
