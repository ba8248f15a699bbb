//! How long deleting a large user holds up every other user's writes (issue #13): a user with
//! `N` records (default 100,000; `delete_user N`) is deleted while a second thread stores a
//! small user's memories one at a time, durably; prints the delete's own time and the other
//! writer's latency before and during it (p50, p99, max).
//!
//! Usage: `cargo run -p amberdb-benches --bin delete_user [N]` (`--release` for release figures)

#![expect(clippy::print_stdout, reason = "a bench tool reports on stdout")]

use amberdb::{EntityKind, HookConfig, NewMemory, Store, StoreOptions, SyncPolicy};
use amberdb_benches::SEED;
use amberdb_index::synthetic::SeededRng;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

fn quantiles(mut v: Vec<Duration>) -> String {
    if v.is_empty() {
        return "no writes".to_owned();
    }
    v.sort();
    let at = |q: f64| v[((v.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e3;
    format!(
        "{} writes, p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        v.len(),
        at(0.5),
        at(0.99),
        at(1.0)
    )
}

fn main() -> anyhow::Result<()> {
    let n: usize = std::env::args().nth(1).map_or(Ok(100_000), |a| a.parse())?;
    let dir = tempfile::tempdir()?;
    let options = || {
        StoreOptions::hashing()
            .hooks(HookConfig::none())
            .memory_limit(10_000_000)
    };
    let store = Store::open(dir.path(), options().sync(SyncPolicy::None))?;
    let mut rng = SeededRng::new(SEED);
    let built = Instant::now();
    for i in 0..n {
        let mut m = NewMemory::new(format!("big user's note {i} {}", rng.next_u64()));
        m.user_id = Some("big".into());
        store.store(amberdb::StoreRequest::new(m).with_vector(rng.unit_vector(384)))?;
    }
    store.checkpoint()?;
    drop(store);
    println!(
        "built {n} records of user \"big\" in {:.1} s",
        built.elapsed().as_secs_f64()
    );
    let store = Store::open(dir.path(), options())?;

    let stop = Arc::new(AtomicBool::new(false));
    let deleting = Arc::new(AtomicBool::new(false));
    let writer = {
        let (store, stop, deleting) = (store.clone(), Arc::clone(&stop), Arc::clone(&deleting));
        std::thread::spawn(move || {
            let (mut before, mut during) = (Vec::new(), Vec::new());
            let mut rng = SeededRng::new(SEED + 1);
            let mut i = 0u64;
            while !stop.load(Ordering::SeqCst) {
                let during_delete = deleting.load(Ordering::SeqCst);
                let mut m = NewMemory::new(format!("small user's note {i}"));
                m.user_id = Some("small".into());
                let t = Instant::now();
                store
                    .store(amberdb::StoreRequest::new(m).with_vector(rng.unit_vector(384)))
                    .expect("small write");
                if during_delete && deleting.load(Ordering::SeqCst) {
                    during.push(t.elapsed());
                } else if !during_delete {
                    before.push(t.elapsed());
                }
                i += 1;
                std::thread::sleep(Duration::from_millis(1));
            }
            (before, during)
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    deleting.store(true, Ordering::SeqCst);
    let t = Instant::now();
    let deleted = store.delete_entity(EntityKind::User, None, "big")?;
    let took = t.elapsed();
    deleting.store(false, Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::SeqCst);
    let (before, during) = writer.join().expect("writer");
    println!(
        "delete_user of {} records: {:.1} ms",
        deleted.deleted_records,
        took.as_secs_f64() * 1e3
    );
    println!("other user's durable writes before: {}", quantiles(before));
    println!("other user's durable writes during: {}", quantiles(during));
    Ok(())
}
