//! Load generator for `amberdb serve` over loopback (`docs/benchmarks.md`, "Server").
//!
//! The server runs in this process exactly as `amberdb serve` runs it (`amberdb_server::server::
//! serve` on a tokio runtime, no-model hashing embedder, durable `SyncPolicy::Always`); the
//! clients are blocking threads, one connection each, writing `depth` requests and then
//! reading `depth` replies (depth 1 = not pipelined). Each row runs for `AMBERDB_LOAD_SECONDS`
//! (default 3) and reports requests/s and the latency of a round trip (one request, or one
//! pipelined batch) at p50/p99. Every reply is checked for `{"ok":true`.
//!
//! Rows: GET (10k memories), durable STORE (fresh store per row, every hook on, one user per
//! connection), SEARCH on 100k memories (composite vector search, limit 10; hybrid too), each
//! with 1, 16 and 64 connections, not pipelined and pipelined 32 deep; then overload (hybrid
//! searches from 1x, 2x and 4x the server's capacity of connections, with admission by capacity
//! and without it: requests/s admitted, p50/p99 of admitted requests, the `busy` rate); then
//! 1,000 idle connections held while one client measures GET latency before, during and after.
//!
//! `AMBERDB_LOAD_ONLY=store` runs the rows whose name contains it; `AMBERDB_LOAD_CONNS=16` and
//! `AMBERDB_LOAD_DEPTHS=32` pick connection counts and depths. The 100k store is built once
//! under `target/bench-data/server-search-100000`.
//!
//! Run: `CARGO_PROFILE_BENCH_LTO=false cargo bench -p amberdb-benches --bench server_load`

use amberdb::{HookConfig, NewMemory, Store, StoreOptions, SyncPolicy};
use amberdb_benches::load::{self, drive, quantile, report};
use amberdb_server::auth::Auth;
use amberdb_server::commands::Ctx;
use amberdb_server::dispatch::{Limits, Shared};
use amberdb_server::metrics::Metrics;
use amberdb_server::server::Running;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A server on 127.0.0.1:0 over `store`, on its own runtime; stops when dropped. Its limits
/// are the defaults, but `AMBERDB_LOAD_RUNNING=<n>` sets `max_running` (4096: no admission).
fn start(store: Store) -> Running {
    start_with(store, limits())
}

/// The default limits, with `AMBERDB_LOAD_RUNNING` applied.
fn limits() -> Limits {
    let d = Limits::default();
    Limits {
        max_running: std::env::var("AMBERDB_LOAD_RUNNING")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(d.max_running),
        ..d
    }
}

/// As `start`, with `limits` (connections raised to 4,096 for the load).
fn start_with(store: Store, limits: Limits) -> Running {
    Running::start(Arc::new(Shared::new(
        Ctx {
            store,
            metrics: std::sync::Arc::new(Metrics::new()),
        },
        Limits {
            max_connections: 4096,
            ..limits
        },
        Auth::none(),
    )))
    .expect("start the server")
}

fn seconds() -> f64 {
    std::env::var("AMBERDB_LOAD_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0)
}

fn wanted(name: &str) -> bool {
    std::env::var("AMBERDB_LOAD_ONLY").map_or(true, |only| name.contains(&only))
}

/// Connection counts of the rows (`AMBERDB_LOAD_CONNS=16` for one).
fn conns() -> Vec<usize> {
    std::env::var("AMBERDB_LOAD_CONNS").map_or_else(
        |_| vec![1, 16, 64],
        |v| v.split(',').filter_map(|c| c.trim().parse().ok()).collect(),
    )
}

/// Pipeline depths of the rows (`AMBERDB_LOAD_DEPTHS=32` for one).
fn depths() -> Vec<usize> {
    std::env::var("AMBERDB_LOAD_DEPTHS").map_or_else(
        |_| vec![1, 32],
        |v| v.split(',').filter_map(|c| c.trim().parse().ok()).collect(),
    )
}

fn options() -> StoreOptions {
    StoreOptions::hashing().memory_limit(10_000_000)
}

const WORDS: &[&str] = &[
    "cache",
    "deploy",
    "login",
    "token",
    "database",
    "timeout",
    "pool",
    "queue",
    "retry",
    "index",
    "branch",
    "release",
    "config",
    "test",
    "flaky",
    "memory",
    "latency",
    "backup",
    "quota",
    "schema",
    "migration",
    "socket",
    "thread",
    "build",
];

fn made_up(i: u64, j: u64) -> String {
    let h = (i << 8 ^ j ^ 0x5EED).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (0..7)
        .map(|k| char::from(b'a' + ((h >> (36 + 4 * k)) & 15) as u8))
        .collect()
}

/// Four common words and eight made-up ones: distinct texts with a realistic vocabulary.
fn text(i: u64) -> String {
    let w = WORDS.len() as u64;
    let common: Vec<&str> = (0..4)
        .map(|j| WORDS[((i.wrapping_mul(2_654_435_761) >> (j * 7)) % w) as usize])
        .collect();
    let rare: Vec<String> = (0..8).map(|j| made_up(i, j)).collect();
    format!("{} {}", common.join(" "), rare.join(" "))
}

/// A store of `n` memories of `text(i)`, built once without hooks or fsyncs.
fn prebuilt(name: &str, n: u64) -> PathBuf {
    let options = options().sync(SyncPolicy::None).hooks(HookConfig::none());
    amberdb_benches::store_built_once(&format!("{name}-{n}"), options, |store| {
        for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
            let batch = chunk.iter().map(|i| NewMemory::new(text(*i))).collect();
            for r in store.store_batch(batch).expect("embed") {
                r.expect("store");
            }
        }
    })
}

/// Every row of connection counts × depths for one request kind, on one server.
fn sweep(
    server: &Running,
    name: &str,
    secs: f64,
    request: Arc<dyn Fn(usize, u64) -> String + Send + Sync>,
) {
    for conns in conns() {
        for depth in depths() {
            let r = drive(server.addr, conns, depth, secs, Arc::clone(&request));
            report(name, conns, depth, &r);
        }
    }
}

fn main() {
    let secs = seconds();
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(
            out,
            "server load, {secs} s per row, loopback, in-process server"
        );
    }
    if wanted("get") {
        let dir = prebuilt("server-get", 10_000);
        let server = start(Store::open(&dir, options()).expect("open"));
        sweep(
            &server,
            "GET",
            secs,
            Arc::new(|c, n| {
                let id = (c as u64 * 7919 + n * 104_729) % 10_000 + 1;
                format!("GET {{\"memory_id\": {id}}}")
            }),
        );
    }
    for (name, skip) in [
        ("STORE durable", ""),
        (
            "STORE durable, no sem",
            ", \"skip_hooks\": [\"semantic_dedup\"]",
        ),
    ] {
        if !wanted(&name.to_lowercase()) {
            continue;
        }
        for conns in conns() {
            for depth in depths() {
                let dir = tempfile::tempdir().expect("tempdir");
                let server = start(Store::open(dir.path(), options()).expect("open"));
                let r = drive(
                    server.addr,
                    conns,
                    depth,
                    secs,
                    Arc::new(move |c, n| {
                        format!(
                            "STORE {{\"content\": \"{}\", \"user_id\": \"user{c}\"{skip}}}",
                            text((c as u64) << 32 | n)
                        )
                    }),
                );
                report(name, conns, depth, &r);
                let fsyncs: u64 = server
                    .shared
                    .home
                    .stores()
                    .iter()
                    .map(|s| s.stats().log_fsyncs)
                    .sum();
                let mut out = std::io::stdout().lock();
                let _ = writeln!(
                    out,
                    "    {} stores shared {fsyncs} fsyncs ({:.1} per fsync)",
                    r.requests,
                    r.requests as f64 / fsyncs.max(1) as f64
                );
            }
        }
    }
    if wanted("search") {
        let n = std::env::var("AMBERDB_LOAD_SEARCH_SIZE")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(100_000);
        let dir = prebuilt("server-search", n);
        let server = start(Store::open(&dir, options()).expect("open"));
        let query = move |c: usize, k: u64| {
            let target = (c as u64 * 7919 + k * 104_729) % n;
            let full = text(target);
            let words: Vec<&str> = full.split(' ').collect();
            format!("{} {} {}", words[0], words[1], words[5])
        };
        for (name, mode) in [("SEARCH 100k", "vector"), ("SEARCH 100k hybrid", "hybrid")] {
            sweep(
                &server,
                name,
                secs,
                Arc::new(move |c, k| {
                    format!(
                        "SEARCH {{\"query\": \"{}\", \"mode\": \"{mode}\", \"count_access\": false}}",
                        query(c, k)
                    )
                }),
            );
        }
    }
    if wanted("overload") {
        // Hybrid searches on 100k memories, one request at a time per client, at 1x, 2x and 4x
        // the capacity (max_running + max_queued): admitted with capacity, and as before it
        // (every batch ran at once: running slots far above any client count).
        let n = 100_000;
        let dir = prebuilt("server-search", n);
        let d = limits();
        let capacity = d.max_running + d.max_queued;
        let query = Arc::new(move |c: usize, k: u64| {
            let full = text((c as u64 * 7919 + k * 104_729) % n);
            let w: Vec<&str> = full.split(' ').collect();
            format!(
                "SEARCH {{\"query\": \"{} {} {}\", \"mode\": \"hybrid\", \"count_access\": false}}",
                w[0], w[1], w[5]
            )
        });
        for (name, limits) in [
            ("hybrid, capacity", d.clone()),
            (
                "hybrid, unbounded",
                Limits {
                    max_running: 4096,
                    ..d.clone()
                },
            ),
        ] {
            let server = start_with(Store::open(&dir, options()).expect("open"), limits);
            for times in [1, 2, 4] {
                let conns = capacity * times;
                let r = drive(server.addr, conns, 1, secs, Arc::clone(&query) as _);
                report(&format!("{name} {times}x"), conns, 1, &r);
            }
        }
    }
    if wanted("maintenance") {
        maintenance_rows(secs);
    }
    // Minutes of MiniLM: only when asked for by name.
    if std::env::var("AMBERDB_LOAD_ONLY").is_ok_and(|only| only.contains("reembed")) {
        reembed_row(secs);
    }
    if wanted("idle") {
        let dir = prebuilt("server-get", 10_000);
        let server = start(Store::open(&dir, options()).expect("open"));
        let get = Arc::new(|_: usize, n: u64| format!("GET {{\"memory_id\": {}}}", n % 10_000 + 1));
        let before = drive(server.addr, 1, 1, secs, Arc::clone(&get) as _);
        report("GET, 0 idle", 1, 1, &before);
        let mut idle: Vec<TcpStream> = (0..1000)
            .map(|_| TcpStream::connect(server.addr).expect("idle connect"))
            .collect();
        std::thread::sleep(Duration::from_millis(500));
        let during = drive(server.addr, 1, 1, secs, Arc::clone(&get) as _);
        report("GET, 1,000 idle", 1, 1, &during);
        // Every idle connection is still served.
        let mut answered = 0;
        for s in &mut idle {
            s.write_all(b"PING\n").expect("ping");
        }
        for s in &idle {
            let mut line = String::new();
            BufReader::new(s).read_line(&mut line).expect("pong");
            answered += usize::from(line.contains("PONG"));
        }
        let open = server
            .shared
            .metrics
            .connections_open
            .load(std::sync::atomic::Ordering::Relaxed);
        drop(idle);
        std::thread::sleep(Duration::from_millis(200));
        let after = drive(server.addr, 1, 1, secs, get as _);
        report("GET, after idle", 1, 1, &after);
        let mut out = std::io::stdout().lock();
        let _ = writeln!(
            out,
            "    1,000 idle connections: {answered} answered PING afterwards, {open} open at once, errors {}",
            before.errors + during.errors + after.errors
        );
    }
}

/// `AMBERDB_LOAD_MAINT_SIZE`, default 100,000.
fn maintenance_size() -> u64 {
    std::env::var("AMBERDB_LOAD_MAINT_SIZE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000)
}

/// `AMBERDB_LOAD_CONNS`, default 16.
fn maintenance_conns() -> usize {
    std::env::var("AMBERDB_LOAD_CONNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(16)
}

/// The store of `n` memories of the maintenance rows, built once, then checkpointed and
/// indexed, as a store that grew at a user's pace would be (`docs/ivf.md`, "When a build
/// runs"), so no row waits for a build at open.
fn maintenance_base(n: u64) -> PathBuf {
    amberdb_benches::store_built_once(
        &format!("server-maint-{n}"),
        options().sync(SyncPolicy::None).hooks(HookConfig::none()),
        |store| {
            for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
                let batch = chunk.iter().map(|i| NewMemory::new(text(*i))).collect();
                for r in store.store_batch(batch).expect("embed") {
                    r.expect("store");
                }
            }
            store.checkpoint().expect("checkpoint");
            store.build_index().expect("index");
        },
    )
}

/// A fresh copy of `base` opened with `options`, indexed as its open does and with the keyword
/// indexes the open builds after it returns (R9) done, so every row starts from the same
/// settled state (at 1M that build took 45 % of the CPU through a first row that did not wait
/// for it); with the time that took.
fn open_copy(base: &std::path::Path, options: StoreOptions) -> (Store, f64, tempfile::TempDir) {
    let started = Instant::now();
    let copy = amberdb_benches::copy_of_store(base);
    let store = Store::open(copy.path(), options).expect("open");
    while store.stats().index.building || !store.lexical_ready() {
        std::thread::sleep(Duration::from_millis(100));
    }
    (store, started.elapsed().as_secs_f64(), copy)
}

/// Re-embedding the maintenance rows' store (`AMBERDB_LOAD_MAINT_SIZE` memories, the hashing
/// embedder) to MiniLM while `AMBERDB_LOAD_CONNS` connections search it (vector search,
/// limit 10): search p50/p99 before, during (windows of `secs` until it is done) and after
/// (queries embedded by MiniLM then), the re-embedding's time and how long searches waited for
/// the switch. Needs the model (`scripts/fetch-model`).
fn reembed_row(secs: f64) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let n = maintenance_size();
    let conns = maintenance_conns();
    let base = maintenance_base(n);
    let minilm = amberdb_embed::default_embedder().expect("the MiniLM model (scripts/fetch-model)");
    let (store, _, _copy) = open_copy(&base, options());
    let server = start(store.clone());
    let search: Arc<dyn Fn(usize, u64) -> String + Send + Sync> = Arc::new(move |c, k| {
        let full = text((c as u64 * 7919 + k * 104_729) % n);
        let w: Vec<&str> = full.split(' ').collect();
        format!(
            "SEARCH {{\"query\": \"{} {} {}\", \"count_access\": false, \"mode\": \"vector\"}}",
            w[0], w[1], w[5]
        )
    });
    let say = |line: String| {
        let _ = writeln!(std::io::stdout().lock(), "{line}");
    };
    say(format!(
        "re-embedding: {n} memories, hashing -> MiniLM, {conns} connections searching"
    ));
    let before = drive(server.addr, conns, 1, secs, Arc::clone(&search));
    report("SEARCH, before", conns, 1, &before);
    let done = Arc::new(AtomicBool::new(false));
    let worker = {
        let (store, done) = (store.clone(), Arc::clone(&done));
        std::thread::spawn(move || {
            let r = store.reembed(minilm).expect("reembed");
            done.store(true, Ordering::Release);
            r
        })
    };
    let mut during = load::Result {
        requests: 0,
        errors: 0,
        busy: 0,
        seconds: 0.0,
        latencies_us: Vec::new(),
    };
    while !done.load(Ordering::Acquire) {
        let window = drive(server.addr, conns, 1, secs, Arc::clone(&search));
        during.requests += window.requests;
        during.errors += window.errors;
        during.busy += window.busy;
        during.seconds += window.seconds;
        during.latencies_us.extend(window.latencies_us);
    }
    let r = worker.join().expect("reembed thread");
    during.latencies_us.sort_unstable();
    report("SEARCH, during", conns, 1, &during);
    // Right after the switch the new vectors are one flat segment and their IVF index builds
    // in the background; then the steady state.
    let just_after = drive(server.addr, conns, 1, secs, Arc::clone(&search));
    report("SEARCH, just after", conns, 1, &just_after);
    // A build starts when the purge's checkpoint sealed enough rows (`IndexOptions::min_rows`);
    // below that the store stays flat and exact.
    let waited = Instant::now();
    std::thread::sleep(Duration::from_secs(1));
    while store.stats().index.building {
        std::thread::sleep(Duration::from_millis(200));
    }
    let index = store.stats().index;
    say(format!(
        "    {:.1} s later: {} IVF segments, {} flat rows",
        waited.elapsed().as_secs_f64(),
        index.segments.len(),
        index.flat_rows
    ));
    let after = drive(server.addr, conns, 1, secs, Arc::clone(&search));
    report("SEARCH, after (MiniLM)", conns, 1, &after);
    say(format!(
        "    re-embedded {} records and {} tags in {:.1} s ({:.0} records/s); searches waited {:.3} s for the switch; {:.0} MB on disk after; p99 during {:.2}x before",
        r.records,
        r.tags,
        r.seconds,
        r.records as f64 / r.seconds.max(1e-9),
        r.switch_seconds,
        r.bytes_after as f64 / 1e6,
        quantile(&during.latencies_us, 0.99) / quantile(&before.latencies_us, 0.99).max(1e-9)
    ));
}

/// A load beside the store's own background work, three rows, each on a fresh copy of the
/// prebuilt store of `AMBERDB_LOAD_MAINT_SIZE` (default 100,000) memories, durable, every hook
/// on:
/// - quiet: default options (no checkpoint or purge falls due in a row's time);
/// - checkpoints + purges: reopened with `checkpoint_bytes` 4 MiB and `purge_delay` 1 s, and 1 %
///   of the prebuilt memories deleted every second, so the maintenance thread checkpoints every
///   few seconds and purges (rewriting the segments holding the deleted rows) after each delete;
/// - backups: default options, online backups back to back from another thread, each into a new
///   directory.
///
/// The load: `AMBERDB_LOAD_MIX=store` has every connection store; the default, half store and
/// half search. Each row reports requests/s, p50/p99, and what ran beside it.
fn maintenance_rows(secs: f64) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let n = maintenance_size();
    let conns = maintenance_conns();
    let store_only = std::env::var("AMBERDB_LOAD_MIX").is_ok_and(|m| m == "store");
    let base = maintenance_base(n);
    let open = |options: StoreOptions| open_copy(&base, options);
    // Each row stores texts of its own (`row` in the top bits), so none is a duplicate.
    let load = |row: u64| -> Arc<dyn Fn(usize, u64) -> String + Send + Sync> {
        Arc::new(move |c, k| {
            if store_only || c % 2 == 0 {
                format!(
                    "STORE {{\"content\": \"{}\", \"user_id\": \"user{c}\"}}",
                    text(row << 48 | (c as u64) << 32 | k)
                )
            } else {
                let full = text((c as u64 * 7919 + k * 104_729) % n);
                let w: Vec<&str> = full.split(' ').collect();
                format!(
                    "SEARCH {{\"query\": \"{} {} {}\", \"count_access\": false}}",
                    w[0], w[1], w[5]
                )
            }
        })
    };
    let kind = if store_only { "store" } else { "mixed" };
    let say = |line: String| {
        let _ = writeln!(std::io::stdout().lock(), "{line}");
    };

    let (store, opened, _copy) = open(options());
    say(format!(
        "maintenance rows: {n} memories (opened, indexed and keyword-indexed in {opened:.1} s), {conns} connections, {}",
        if store_only {
            "all STORE (durable, every hook)"
        } else {
            "half STORE (durable, every hook), half SEARCH"
        }
    ));
    let server = start(store.clone());
    let quiet = drive(server.addr, conns, 1, secs, load(1));
    report(&format!("{kind}, quiet"), conns, 1, &quiet);
    drop(server);
    drop(store);

    let mut busy_options = options().purge_delay(Some(Duration::from_secs(1)));
    busy_options.checkpoint_bytes = 4 << 20;
    let (store, _, _copy) = open(busy_options);
    let server = start(store.clone());
    let before = store.stats().maintenance;
    let stop = Arc::new(AtomicBool::new(false));
    let deleter = {
        let (store, stop) = (store.clone(), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut next = 1u64;
            while !stop.load(Ordering::Acquire) {
                let victims: Vec<u64> = (next..next + 1_000).collect();
                next += 1_000;
                store
                    .durable_batch(|batch| {
                        for id in victims {
                            let _ = batch.delete(amberdb::MemoryId(id));
                        }
                    })
                    .expect("durable");
                std::thread::sleep(Duration::from_secs(1));
            }
        })
    };
    let busy = drive(server.addr, conns, 1, secs, load(2));
    stop.store(true, Ordering::Release);
    deleter.join().expect("deleter");
    report(&format!("{kind}, ckpt + purge"), conns, 1, &busy);
    let m = store.stats().maintenance;
    say(format!(
        "    beside it, on the maintenance thread: {} checkpoints (the last {:.2} s, writers waited {:.1} ms), {} purges (the last {:.2} s, {} rows dropped); p99 {:.2}x quiet",
        m.checkpoints - before.checkpoints,
        m.last.as_ref().map_or(0.0, |c| c.seconds),
        m.longest_writers_wait * 1e3,
        m.purges - before.purges,
        m.last_purge.as_ref().map_or(0.0, |p| p.seconds),
        m.last_purge.as_ref().map_or(0, |p| p.rows_dropped),
        quantile(&busy.latencies_us, 0.99) / quantile(&quiet.latencies_us, 0.99).max(1e-9)
    ));
    drop(server);
    drop(store);

    let (store, _, _copy) = open(options());
    let server = start(store.clone());
    stop.store(false, Ordering::Release);
    let worker = {
        let (store, stop) = (store.clone(), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut runs = Vec::new();
            while !stop.load(Ordering::Acquire) {
                let dest =
                    tempfile::tempdir_in(amberdb_benches::bench_data_dir()).expect("tempdir");
                let b = store.backup(dest.path().join("backup")).expect("backup");
                runs.push((b.seconds, b.bytes));
            }
            runs
        })
    };
    let during = drive(server.addr, conns, 1, secs, load(3));
    stop.store(true, Ordering::Release);
    let mut runs = worker.join().expect("worker");
    report(&format!("{kind}, backups"), conns, 1, &during);
    runs.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (median_s, bytes) = runs.get(runs.len() / 2).copied().unwrap_or((0.0, 0));
    say(format!(
        "    beside it: {} backups of {:.0} MB back to back, median {median_s:.2} s each ({:.0} MB/s); p99 {:.2}x quiet",
        runs.len(),
        bytes as f64 / 1e6,
        bytes as f64 / 1e6 / median_s.max(1e-9),
        quantile(&during.latencies_us, 0.99) / quantile(&quiet.latencies_us, 0.99).max(1e-9)
    ));
}
