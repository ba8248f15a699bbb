//! HTTP beside the line protocol, in one run (`docs/benchmarks.md`, "HTTP beside the line
//! protocol"): the same server (`Running::start_with_http`: both transports on one store, no-model
//! hashing embedder, durable `SyncPolicy::Always`), 16 keep-alive clients with one request in
//! flight each (the line protocol at depth 1), for STORE (a fresh store per transport, one user
//! per client, every hook on) and SEARCH (10,000 memories, hybrid, limit 10). Reports
//! requests/s and round-trip p50/p99 per transport, and HTTP's throughput as a share of the line
//! protocol's. Every reply is checked (`{"ok":true` / status 200).
//!
//! Run: `CARGO_PROFILE_BENCH_LTO=false cargo bench -p amberdb-benches --bench http_load`
//! (`AMBERDB_LOAD_SECONDS`, default 5, per row).

use amberdb::{HookConfig, NewMemory, Store, StoreOptions, SyncPolicy};
use amberdb_server::auth::Auth;
use amberdb_server::commands::Ctx;
use amberdb_server::dispatch::{Limits, Shared};
use amberdb_server::metrics::Metrics;
use amberdb_server::server::Running;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

const CLIENTS: usize = 16;

/// A line of the report on stdout (the workspace denies `println!` outside tests).
macro_rules! say {
    ($($t:tt)*) => {{
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, $($t)*);
    }};
}

#[derive(Clone, Copy, PartialEq)]
enum Transport {
    Line,
    Http,
}

fn start(store: Store) -> Running {
    Running::start_with_http(Arc::new(Shared::new(
        Ctx {
            store,
            metrics: Arc::new(Metrics::new()),
        },
        Limits::default(),
        Auth::none(),
    )))
    .expect("start the server")
}

fn options() -> StoreOptions {
    StoreOptions::hashing()
        .memory_limit(10_000_000)
        .sync(SyncPolicy::Always)
}

/// One keep-alive client: sends a command with its JSON arguments, waits for the reply.
struct Client {
    transport: Transport,
    stream: TcpStream,
    reader: BufReader<TcpStream>,
    addr: SocketAddr,
}

impl Client {
    fn connect(transport: Transport, addr: SocketAddr) -> Client {
        let stream = TcpStream::connect(addr).expect("connect");
        stream.set_nodelay(true).expect("nodelay");
        let reader = BufReader::new(stream.try_clone().expect("clone"));
        Client {
            transport,
            stream,
            reader,
            addr,
        }
    }

    /// Whether the reply was a success.
    fn call(&mut self, command: &str, args: &str) -> bool {
        match self.transport {
            Transport::Line => {
                self.stream
                    .write_all(format!("{command} {args}\n").as_bytes())
                    .expect("write");
                let mut line = String::new();
                self.reader.read_line(&mut line).expect("read");
                line.starts_with("{\"ok\":true")
            }
            Transport::Http => {
                let request = format!(
                    "POST /v1/commands/{command} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{args}",
                    self.addr,
                    args.len()
                );
                self.stream.write_all(request.as_bytes()).expect("write");
                let mut status = String::new();
                self.reader.read_line(&mut status).expect("read");
                let mut len = 0usize;
                loop {
                    let mut h = String::new();
                    self.reader.read_line(&mut h).expect("read");
                    if h == "\r\n" {
                        break;
                    }
                    if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                        len = v.trim().parse().expect("a length");
                    }
                }
                let mut body = vec![0; len];
                self.reader.read_exact(&mut body).expect("body");
                status.starts_with("HTTP/1.1 200")
            }
        }
    }
}

struct Row {
    requests: u64,
    errors: u64,
    seconds: f64,
    latencies_us: Vec<u32>,
}

fn drive(
    transport: Transport,
    addr: SocketAddr,
    seconds: f64,
    request: Arc<dyn Fn(usize, u64) -> (&'static str, String) + Send + Sync>,
) -> Row {
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(seconds);
    let threads: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let request = Arc::clone(&request);
            std::thread::spawn(move || {
                let mut client = Client::connect(transport, addr);
                let (mut n, mut errors, mut lat) = (0u64, 0u64, Vec::new());
                while Instant::now() < deadline {
                    let (command, args) = request(c, n);
                    let t = Instant::now();
                    if !client.call(command, &args) {
                        errors += 1;
                    }
                    lat.push(u32::try_from(t.elapsed().as_micros()).unwrap_or(u32::MAX));
                    n += 1;
                }
                (n, errors, lat)
            })
        })
        .collect();
    let mut row = Row {
        requests: 0,
        errors: 0,
        seconds: 0.0,
        latencies_us: Vec::new(),
    };
    for t in threads {
        let (n, e, l) = t.join().expect("client");
        row.requests += n;
        row.errors += e;
        row.latencies_us.extend(l);
    }
    row.seconds = started.elapsed().as_secs_f64();
    row.latencies_us.sort_unstable();
    row
}

fn quantile(sorted: &[u32], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    f64::from(sorted[((sorted.len() - 1) as f64 * q).round() as usize]) / 1000.0
}

fn report(name: &str, transport: Transport, r: &Row) -> f64 {
    let rate = r.requests as f64 / r.seconds;
    say!(
        "{name:<8} {:<14} clients {CLIENTS}  {rate:>8.0} req/s  p50 {:>7.3} ms  p99 {:>7.3} ms  errors {}",
        if transport == Transport::Line {
            "line protocol"
        } else {
            "http"
        },
        quantile(&r.latencies_us, 0.50),
        quantile(&r.latencies_us, 0.99),
        r.errors
    );
    assert_eq!(r.errors, 0, "{name}: error replies");
    rate
}

const WORDS: &[&str] = &[
    "cache", "deploy", "login", "token", "database", "timeout", "pool", "queue", "retry", "index",
    "branch", "release", "config", "test", "flaky", "memory", "latency", "backup", "quota",
];

fn text(i: u64) -> String {
    let w = |k: u64| {
        WORDS[(i.wrapping_mul(2_654_435_761).wrapping_add(k * 97) % WORDS.len() as u64) as usize]
    };
    format!(
        "note {i}: the {} {} needs a {} after the {}",
        w(1),
        w(2),
        w(3),
        w(4)
    )
}

fn main() {
    let seconds: f64 = std::env::var("AMBERDB_LOAD_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5.0);
    say!(
        "http_load: {CLIENTS} keep-alive clients, one request in flight each, SyncPolicy::Always, {seconds} s a row"
    );
    for transport in [Transport::Line, Transport::Http] {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = start(Store::open(dir.path(), options()).expect("open"));
        let addr = match transport {
            Transport::Line => server.addr,
            Transport::Http => server.http.expect("http"),
        };
        let store: Arc<dyn Fn(usize, u64) -> (&'static str, String) + Send + Sync> =
            Arc::new(|c, n| {
                let content = text(c as u64 * 1_000_000 + n);
                (
                    "STORE_MEMORY",
                    format!("{{\"user_id\": \"u{c}\", \"content\": \"{content}\"}}"),
                )
            });
        let r = drive(transport, addr, seconds, store);
        report("STORE", transport, &r);
    }
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let seeding = options().sync(SyncPolicy::None).hooks(HookConfig::none());
        let store = Store::open(dir.path(), seeding).expect("open");
        for chunk in (0..10_000u64).collect::<Vec<_>>().chunks(1_000) {
            let batch = chunk.iter().map(|i| NewMemory::new(text(*i))).collect();
            for r in store.store_batch(batch).expect("embed") {
                r.expect("store");
            }
        }
        store.flush().expect("flush");
        store.close().expect("close");
    }
    let server = start(Store::open(dir.path(), options()).expect("open"));
    let mut rates = Vec::new();
    for transport in [Transport::Line, Transport::Http] {
        let addr = match transport {
            Transport::Line => server.addr,
            Transport::Http => server.http.expect("http"),
        };
        let search: Arc<dyn Fn(usize, u64) -> (&'static str, String) + Send + Sync> =
            Arc::new(|c, n| {
                let w = WORDS[(c + n as usize) % WORDS.len()];
                (
                    "SEARCH_MEMORIES",
                    format!("{{\"query\": \"the {w} needs\", \"limit\": 10}}"),
                )
            });
        let r = drive(transport, addr, seconds, search);
        rates.push(report("SEARCH", transport, &r));
    }
    say!(
        "SEARCH: http at {:.0} % of the line protocol's throughput",
        100.0 * rates[1] / rates[0]
    );
}
