//! The cost of one library call, for the Python API's overhead (`python/bench/overhead.py`
//! runs this beside the same calls through `amberdb.Store`; `docs/benchmarks.md`, "Python").
//!
//! `cargo run --release -p amberdb-benches --bin api_calls -- N` stores N memories (the
//! hashing embedder, default hooks, durable) and runs N searches (default hooks but no access
//! counted: a counted access is a durable write, whose fsync would drown the difference
//! measured), and prints one JSON line: the median and p99 microseconds of each kind of call.
//! The texts are the ones the Python script uses.

#![expect(clippy::print_stdout, reason = "a bench binary prints its figures")]

use amberdb::{NewMemory, SearchRequest, Store, StoreOptions};
use std::time::Instant;

fn note(i: usize) -> String {
    format!(
        "note {i}: the cache {} warms in {} seconds at boot",
        i % 37,
        i % 11
    )
}

fn query(i: usize) -> String {
    format!("cache {} warm boot", i % 37)
}

fn summary(mut micros: Vec<f64>) -> serde_json::Value {
    micros.sort_by(f64::total_cmp);
    let at = |q: f64| micros[((micros.len() - 1) as f64 * q).round() as usize];
    serde_json::json!({"median_us": at(0.5), "p99_us": at(0.99)})
}

fn main() -> anyhow::Result<()> {
    let n: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(2000);
    let dir = tempfile::tempdir()?;
    let store = Store::open(dir.path(), StoreOptions::hashing())?;
    let mut stores = Vec::with_capacity(n);
    for i in 0..n {
        let t = Instant::now();
        let _ = store.store(NewMemory::new(note(i)));
        stores.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let mut searches = Vec::with_capacity(n);
    for i in 0..n {
        let t = Instant::now();
        let mut req = SearchRequest::new(query(i));
        req.hooks.count_access = Some(false);
        let hits = store.search(&req)?;
        std::hint::black_box(hits);
        searches.push(t.elapsed().as_secs_f64() * 1e6);
    }
    println!(
        "{}",
        serde_json::json!({"calls": n, "store": summary(stores), "search": summary(searches)})
    );
    Ok(())
}
