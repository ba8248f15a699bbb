//! Durable STORE on a cluster against one node, in one run (`docs/benchmarks.md`, "Cluster
//! against one node"): the release `amberdb` (`AMBERDB_BIN`, default `target/release/amberdb`)
//! served alone (`SyncPolicy::Always`, the hashing embedder, every hook on), then the cluster
//! `scripts/cluster` brings up on this machine (three NATS servers with `sync_interval: always`,
//! R3 streams, 16 partitions, three nodes: six processes on the same cores). Each client is
//! one connection with its own user, connected to its user's owner (as a routing client is
//! once it has learned the owners), writing `depth` STOREs then reading their replies, for
//! `AMBERDB_LOAD_SECONDS` (default 10) per row: requests/s and p50/p99 of a round trip, 16
//! clients at depth 1 and 32 (`AMBERDB_LOAD_CONNS`, `AMBERDB_LOAD_DEPTHS`), with the embedder
//! `AMBERDB_LOAD_EMBEDDER` (`hashing`, the default, or `minilm`). Then a replica's catch-up:
//! the third node is stopped (SIGSTOP) until the others own its partitions, the first two
//! take `AMBERDB_LOAD_SECONDS` of writes, and it is resumed: how far behind it was, and the
//! messages per second it applied until every partition store was at the stream's end.
//!
//! Run: `cargo build --release -p amberdb-server && cargo run --release -p amberdb-benches
//! --bin cluster_load`

use amberdb_benches::load::{self, drive_to, report};
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn env_list(name: &str, default: &[usize]) -> Vec<usize> {
    std::env::var(name).map_or_else(
        |_| default.to_vec(),
        |v| v.split(',').filter_map(|c| c.trim().parse().ok()).collect(),
    )
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn binary() -> PathBuf {
    let bin = std::env::var_os("AMBERDB_BIN")
        .map_or_else(|| root().join("target/release/amberdb"), PathBuf::from);
    assert!(
        bin.exists(),
        "{} is missing: cargo build --release -p amberdb-server",
        bin.display()
    );
    bin
}

/// The embedder of both runs.
fn embedder() -> String {
    std::env::var("AMBERDB_LOAD_EMBEDDER").unwrap_or_else(|_| "hashing".into())
}

/// One line-protocol exchange.
fn ask(addr: SocketAddr, line: &str) -> serde_json::Value {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.write_all(format!("{line}\n").as_bytes()).expect("write");
    let mut reply = String::new();
    BufReader::new(s).read_line(&mut reply).expect("read");
    serde_json::from_str(&reply).expect("a JSON reply")
}

fn store_line(c: usize, n: u64) -> String {
    format!(
        "STORE {{\"content\": \"client {c} remembers fact {n}: the {} build of {} failed on {}\", \"user_id\": \"user{c}\"}}",
        n % 97,
        n % 13,
        n % 7
    )
}

fn rows(name: &str, addrs: &dyn Fn(usize) -> Vec<SocketAddr>) -> Vec<(usize, usize, load::Result)> {
    let secs = std::env::var("AMBERDB_LOAD_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10.0);
    let mut out = Vec::new();
    for conns in env_list("AMBERDB_LOAD_CONNS", &[16]) {
        for depth in env_list("AMBERDB_LOAD_DEPTHS", &[1, 32]) {
            let r = drive_to(&addrs(conns), depth, secs, Arc::new(store_line));
            report(name, conns, depth, &r);
            out.push((conns, depth, r));
        }
    }
    out
}

/// `amberdb serve` alone on a fresh store.
fn single(dir: &Path) -> (Child, SocketAddr) {
    let mut child = Command::new(binary())
        .args([
            "serve",
            "--embedder",
            &embedder(),
            "--port",
            "0",
            "--data-dir",
        ])
        .arg(dir)
        .env("AMBERDB_LOG", "warn")
        .stdout(Stdio::piped())
        .spawn()
        .expect("amberdb serve");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("listening");
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .expect("listening on ADDR")
        .parse()
        .expect("an address");
    (child, addr)
}

/// `scripts/cluster` in `dir`: the process, and the nodes' line-protocol addresses by name.
fn cluster(dir: &Path) -> (Child, Vec<(String, SocketAddr)>) {
    let mut child = Command::new(root().join("scripts/cluster"))
        .env("AMBERDB_EMBEDDER", embedder())
        .env("AMBERDB_CLUSTER_DIR", dir)
        .env("AMBERDB_CLUSTER_BASE", "17833")
        .stdout(Stdio::piped())
        .spawn()
        .expect("scripts/cluster");
    let mut nodes = Vec::new();
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    // Read to its last line: a closed pipe would stop the script at its next echo.
    loop {
        let line = lines
            .next()
            .expect("the cluster's addresses")
            .expect("a line");
        if line.starts_with("logs:") {
            break;
        }
        if let Some((name, rest)) = line.split_once(": ")
            && name.starts_with("node")
            && let Some(addr) = rest.split_whitespace().next()
        {
            nodes.push((name.to_owned(), addr.parse().expect("an address")));
        }
    }
    (child, nodes)
}

/// Every partition's owner and each node's position in it, as `addr`'s STATS says.
fn partitions(addr: SocketAddr) -> Vec<(Option<String>, u64)> {
    let stats = ask(addr, "STATS");
    (stats["cluster"]["partitions"]
        .as_array()
        .cloned()
        .unwrap_or_default())
    .iter()
    .map(|p| {
        (
            p["owner"].as_str().map(str::to_owned),
            p["position"].as_u64().unwrap_or(0),
        )
    })
    .collect()
}

/// Waits until `check` holds of every node's partitions (at most 60 s).
fn wait_until(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !check() {
        assert!(Instant::now() < deadline, "{what} within 60 s");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The pid of the node whose data directory is `dir` (from `/proc`).
fn pid_of(dir: &Path) -> u32 {
    let wanted = dir.display().to_string();
    std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .find(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                let args: Vec<&[u8]> = c.split(|&b| b == 0).collect();
                args.windows(2)
                    .any(|w| w[0] == b"--data-dir" && w[1] == wanted.as_bytes())
            })
        })
        .expect("the node's process")
}

/// A standby stopped while the others take writes, then resumed: messages it was behind, and
/// seconds until it applied them.
fn catch_up(dir: &Path, nodes: &[(String, SocketAddr)]) -> (u64, f64) {
    let (name, addr) = nodes.last().cloned().expect("three nodes");
    let pid = pid_of(&dir.join(&name)).to_string();
    let signal = |s: &str| {
        Command::new("kill").args([s, &pid]).status().expect("kill");
    };
    let before: Vec<u64> = partitions(addr).iter().map(|(_, at)| *at).collect();
    signal("-STOP");
    let others = &nodes[..nodes.len() - 1];
    wait_until("the others own the stopped node's partitions", || {
        partitions(others[0].1)
            .iter()
            .all(|(o, _)| o.as_deref().is_some_and(|o| o != name))
    });
    let owners: Vec<String> = (partitions(others[0].1).into_iter())
        .map(|(o, _)| o.unwrap_or_default())
        .collect();
    let count = u32::try_from(owners.len()).expect("a partition count");
    let owner_of = |c: usize| {
        let p = amberdb::cluster::partition_of_user(&format!("user{c}"), count);
        (others.iter())
            .find(|(n, _)| *n == owners[p as usize])
            .map(|(_, a)| *a)
            .expect("an owner")
    };
    rows("STORE, cluster, a node stopped", &|conns| {
        (0..conns).map(owner_of).collect()
    });
    // The stream's end of every partition: its owner's position.
    let ends: Vec<u64> = (0..owners.len())
        .map(|p| {
            let owner = others.iter().find(|(n, _)| *n == owners[p]).expect("owner");
            partitions(owner.1)[p].1
        })
        .collect();
    let resumed = Instant::now();
    signal("-CONT");
    wait_until("the resumed node at every stream's end", || {
        let at = partitions(addr);
        at.len() == ends.len() && ends.iter().zip(&at).all(|(e, (_, a))| a >= e)
    });
    let behind = ends
        .iter()
        .zip(&before)
        .map(|(e, b)| e.saturating_sub(*b))
        .sum();
    (behind, resumed.elapsed().as_secs_f64())
}

fn main() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (mut one, addr) = single(&dir.path().join("single"));
    let alone = rows("STORE, one node", &|conns| vec![addr; conns]);
    one.kill().ok();
    one.wait().ok();
    let (mut run, nodes) = cluster(&dir.path().join("cluster"));
    // Every partition owned, and who owns it.
    let deadline = Instant::now() + Duration::from_secs(60);
    let owners = loop {
        let stats = ask(nodes[0].1, "STATS");
        let parts = stats["cluster"]["partitions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let owners: Vec<Option<String>> = parts
            .iter()
            .map(|p| p["owner"].as_str().map(str::to_owned))
            .collect();
        if !owners.is_empty() && owners.iter().all(Option::is_some) {
            break owners.into_iter().flatten().collect::<Vec<_>>();
        }
        assert!(Instant::now() < deadline, "partitions unowned: {stats}");
        std::thread::sleep(Duration::from_millis(200));
    };
    let partitions = u32::try_from(owners.len()).expect("a partition count");
    let owner_of = |c: usize| {
        let p = amberdb::cluster::partition_of_user(&format!("user{c}"), partitions);
        let name = &owners[p as usize];
        nodes
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, a)| *a)
            .expect("the owner is a node")
    };
    let clustered = rows("STORE, cluster", &|conns| {
        (0..conns).map(owner_of).collect()
    });
    let (behind, seconds) = catch_up(&dir.path().join("cluster"), &nodes);
    let _ = Command::new("kill")
        .args(["-TERM", &run.id().to_string()])
        .status();
    run.wait().ok();
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "catch-up: the resumed node was {behind} messages behind and at every stream's end after {seconds:.2} s: {:.0} messages/s",
        behind as f64 / seconds
    );
    for ((conns, depth, a), (_, _, c)) in alone.iter().zip(&clustered) {
        // Acknowledged STOREs only: a `moved` or `unavailable` reply (a partition changing
        // owner under load, which a routing client follows) stored nothing.
        let rate = |r: &load::Result| (r.requests - r.busy - r.errors) as f64 / r.seconds;
        let _ = writeln!(
            out,
            "{conns} clients, depth {depth}: the cluster does {:.2}x the single node's acknowledged STOREs/s ({} refused while a partition changed owner); p50 {:.3} vs {:.3} ms, p99 {:.3} vs {:.3} ms",
            rate(c) / rate(a),
            c.errors,
            load::quantile(&c.latencies_us, 0.5),
            load::quantile(&a.latencies_us, 0.5),
            load::quantile(&c.latencies_us, 0.99),
            load::quantile(&a.latencies_us, 0.99),
        );
    }
}
