//! The line-protocol load generator the server benches share (`docs/benchmarks.md`,
//! "Server"): blocking client threads, one connection each, writing `depth` requests and then
//! reading `depth` replies (depth 1 = not pipelined); every reply is checked for `{"ok":true`,
//! and a `busy` reply is waited out as a client should.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a run measured.
pub struct Result {
    /// Requests sent.
    pub requests: u64,
    /// Replies other than `ok` and `busy`.
    pub errors: u64,
    /// Requests answered `busy` (not run).
    pub busy: u64,
    /// How long the run took.
    pub seconds: f64,
    /// Round trips of admitted batches, sorted, in microseconds.
    pub latencies_us: Vec<u32>,
}

/// The `q` quantile of sorted microseconds, in milliseconds.
#[must_use]
pub fn quantile(sorted: &[u32], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    f64::from(sorted[i]) / 1000.0
}

/// Runs `conns` clients for `seconds`, each sending batches of `depth` requests made by
/// `request(conn, n)`.
///
/// # Panics
/// If a connection fails.
pub fn drive(
    addr: SocketAddr,
    conns: usize,
    depth: usize,
    seconds: f64,
    request: Arc<dyn Fn(usize, u64) -> String + Send + Sync>,
) -> Result {
    drive_to(&vec![addr; conns], depth, seconds, request)
}

/// As [`drive`], client `c` connected to `addrs[c]` (a cluster's owner of its user).
///
/// # Panics
/// If a connection fails.
pub fn drive_to(
    addrs: &[SocketAddr],
    depth: usize,
    seconds: f64,
    request: Arc<dyn Fn(usize, u64) -> String + Send + Sync>,
) -> Result {
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(seconds);
    let threads: Vec<_> = addrs
        .iter()
        .copied()
        .enumerate()
        .map(|(c, addr)| {
            let request = Arc::clone(&request);
            std::thread::spawn(move || {
                let mut stream = TcpStream::connect(addr).expect("connect");
                stream.set_nodelay(true).expect("nodelay");
                let mut reader = BufReader::new(stream.try_clone().expect("clone"));
                let (mut n, mut errors, mut busy, mut lat) = (0u64, 0u64, 0u64, Vec::new());
                let mut batch = String::new();
                let mut line = String::new();
                while Instant::now() < deadline {
                    batch.clear();
                    for _ in 0..depth {
                        batch.push_str(&request(c, n));
                        batch.push('\n');
                        n += 1;
                    }
                    let t = Instant::now();
                    stream.write_all(batch.as_bytes()).expect("write");
                    let mut admitted = true;
                    for _ in 0..depth {
                        line.clear();
                        reader.read_line(&mut line).expect("read");
                        if line.starts_with("{\"ok\":false,\"code\":\"busy\"") {
                            busy += 1;
                            admitted = false;
                            // As a client should: wait the hint, then retry.
                            let hint = serde_json::from_str::<serde_json::Value>(&line)
                                .ok()
                                .and_then(|r| r["retry_after_ms"].as_f64())
                                .unwrap_or(10.0);
                            std::thread::sleep(Duration::from_secs_f64(hint / 1000.0));
                        } else if !line.starts_with("{\"ok\":true") {
                            errors += 1;
                            if errors == 1 {
                                eprintln!("error reply: {}", &line[..line.len().min(300)]);
                            }
                        }
                    }
                    // Latency of admitted round trips only: a `busy` reply is immediate.
                    if admitted {
                        lat.push(u32::try_from(t.elapsed().as_micros()).unwrap_or(u32::MAX));
                    }
                }
                (n, errors, busy, lat)
            })
        })
        .collect();
    let mut r = Result {
        requests: 0,
        errors: 0,
        busy: 0,
        seconds: 0.0,
        latencies_us: Vec::new(),
    };
    for t in threads {
        let (n, e, b, l) = t.join().expect("client");
        r.requests += n;
        r.errors += e;
        r.busy += b;
        r.latencies_us.extend(l);
    }
    r.seconds = started.elapsed().as_secs_f64();
    r.latencies_us.sort_unstable();
    r
}

/// Prints one row: requests/s, p50/p99 of a round trip, errors, the `busy` rate.
pub fn report(name: &str, conns: usize, depth: usize, r: &Result) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "{name:<22} conns {conns:>4}  depth {depth:>3}  {:>9.0} req/s  p50 {:>8.3} ms  p99 {:>8.3} ms  errors {}  busy {:.1} %",
        (r.requests - r.busy) as f64 / r.seconds,
        quantile(&r.latencies_us, 0.50),
        quantile(&r.latencies_us, 0.99),
        r.errors,
        100.0 * r.busy as f64 / r.requests.max(1) as f64
    );
}
