//! kill -9 over TCP: clients (two on the line protocol, pipelining; two on HTTP, keep-alive)
//! record every store and delete the server acknowledged; the server
//! is killed (SIGKILL) at random moments and restarted, many times, with automatic purges due
//! a second after a delete; every acknowledged store is there afterwards, with its content,
//! under its id, and no acknowledged delete came back. `AMBERDB_KILL_CYCLES` (default 12) and
//! `AMBERDB_KILL_SEED` (default: the clock; printed) repeat or lengthen a run;
//! `AMBERDB_KILL_FROM=DIR` starts from a copy of the store in DIR (a big one, to time the opens
//! after each kill: printed as p50 / p99 / max); `AMBERDB_KILL_PURGE_DELAY=SECONDS` (default 1)
//! sets the server's `--purge-delay` (at 1M a purge rewrites the whole IVF segment and never
//! finishes between kills: the opens are timed with and without them).

use crate::support::{Client, Server, amberdb};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The seed environment variable `var` gives, else one from the clock (printed by the caller).
pub(crate) fn seed_from(var: &str) -> u64 {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        })
}

/// splitmix64: enough randomness for kill timing, seeded and printed.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// What the clients were told: stores (id, content) and deletes.
#[derive(Default)]
struct Acked {
    stores: Vec<(u64, String)>,
    /// Of `stores`, how many were acknowledged over HTTP.
    over_http: usize,
    deletes: Vec<u64>,
    /// Deletes sent, acknowledged or not (one cut off by the kill may have been applied).
    deletes_sent: Vec<u64>,
}

/// Stores pipelined batches of 8, then deletes the batch's first, until the connection dies;
/// records each acknowledged store and delete.
fn writer(addr: SocketAddr, tag: String, acked: Arc<Mutex<Acked>>) {
    let Ok(mut stream) = TcpStream::connect(addr) else {
        return;
    };
    let Ok(read_half) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(read_half);
    for batch in 0.. {
        let contents: Vec<String> = (0..8)
            .map(|i| format!("{tag} batch {batch} note {i}"))
            .collect();
        let mut lines = String::new();
        for c in &contents {
            lines.push_str(&format!(
                "STORE {}\n",
                json!({"content": c, "skip_hooks": ["semantic_dedup"]})
            ));
        }
        if stream.write_all(lines.as_bytes()).is_err() {
            return;
        }
        let mut first = None;
        for content in contents {
            let Some(reply) = read_reply(&mut reader) else {
                return; // killed: this store was never acknowledged
            };
            assert_eq!(reply["ok"], true, "{reply}");
            let id = reply["memory_id"].as_u64().unwrap();
            first.get_or_insert(id);
            acked.lock().unwrap().stores.push((id, content));
        }
        let Some(victim) = first else { return };
        acked.lock().unwrap().deletes_sent.push(victim);
        let line = format!("DELETE {}\n", json!({ "memory_id": victim }));
        if stream.write_all(line.as_bytes()).is_err() {
            return;
        }
        let Some(reply) = read_reply(&mut reader) else {
            return;
        };
        assert_eq!(reply["ok"], true, "{reply}");
        acked.lock().unwrap().deletes.push(victim);
    }
}

/// As `writer`, over HTTP: one request in flight on a keep-alive connection, `POST
/// /v1/memories` eight times, then `DELETE /v1/memories/{first}`; a reply is acknowledged
/// only when it arrived whole with status 200.
fn http_writer(addr: SocketAddr, tag: String, acked: Arc<Mutex<Acked>>) {
    let Ok(mut stream) = TcpStream::connect(addr) else {
        return;
    };
    let Ok(read_half) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(read_half);
    let mut send = |method: &str, path: &str, body: String| -> Option<Value> {
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).ok()?;
        http_reply(&mut reader)
    };
    for batch in 0.. {
        let mut first = None;
        for i in 0..8 {
            let content = format!("{tag} batch {batch} note {i}");
            let body = json!({"content": content, "skip_hooks": ["semantic_dedup"]}).to_string();
            let Some(reply) = send("POST", "/v1/memories", body) else {
                return; // killed: this store was never acknowledged
            };
            let id = reply["memory_id"].as_u64().unwrap();
            first.get_or_insert(id);
            let mut a = acked.lock().unwrap();
            a.stores.push((id, content));
            a.over_http += 1;
        }
        let Some(victim) = first else { return };
        acked.lock().unwrap().deletes_sent.push(victim);
        if send("DELETE", &format!("/v1/memories/{victim}"), String::new()).is_none() {
            return;
        }
        acked.lock().unwrap().deletes.push(victim);
    }
}

/// A whole `200` response's JSON body, or `None` when the connection died first; any other
/// status fails the test (nothing here is refused but by the kill).
fn http_reply(reader: &mut BufReader<TcpStream>) -> Option<Value> {
    let mut status = String::new();
    if reader.read_line(&mut status).ok()? == 0 || !status.ends_with('\n') {
        return None;
    }
    let mut len = None;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).ok()? == 0 || !h.ends_with('\n') {
            return None;
        }
        if h == "\r\n" {
            break;
        }
        if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse::<usize>().ok();
        }
    }
    let mut body = vec![0; len?];
    std::io::Read::read_exact(reader, &mut body).ok()?;
    assert!(
        status.starts_with("HTTP/1.1 200"),
        "{status} {}",
        String::from_utf8_lossy(&body)
    );
    serde_json::from_slice(&body).ok()
}

/// The next whole reply line, or `None` when the connection died first.
fn read_reply(reader: &mut BufReader<TcpStream>) -> Option<Value> {
    let mut line = String::new();
    match reader.read_line(&mut line) {
        Ok(n) if n > 0 && line.ends_with('\n') => {
            Some(serde_json::from_str(&line).expect("a whole reply line is JSON"))
        }
        _ => None,
    }
}

fn assert_all_there(client: &mut Client, acked: &Acked) {
    for id in &acked.deletes {
        let r = client.call("GET", json!({ "memory_id": id }));
        assert_eq!(
            r["code"], "not_found",
            "acknowledged delete of {id} came back: {r}"
        );
    }
    let maybe_deleted: std::collections::HashSet<u64> =
        acked.deletes_sent.iter().copied().collect();
    for (id, content) in acked
        .stores
        .iter()
        .filter(|(id, _)| !maybe_deleted.contains(id))
    {
        let r = client.call("GET", json!({"memory_id": id, }));
        assert_eq!(r["ok"], true, "acknowledged store {id} is lost: {r}");
        assert_eq!(
            r["memory"]["content"], *content,
            "store {id} holds other content"
        );
    }
}

/// The KiB of free memory this VM's balloon has reported to its host since boot, and how long
/// after being freed it reports them (Linux `page_reporting`); `None` where there is none.
fn host_page_reporting() -> Option<(u64, u64)> {
    let read = |name: &str| {
        std::fs::read_to_string(format!("/sys/module/page_reporting/parameters/{name}"))
            .ok()?
            .trim()
            .parse::<u64>()
            .ok()
    };
    Some((read("reported_kib")?, read("min_free_ms")?))
}

#[test]
fn kill_9_never_loses_an_acknowledged_store() {
    let cycles: u64 = std::env::var("AMBERDB_KILL_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(12);
    let seed = seed_from("AMBERDB_KILL_SEED");
    eprintln!("kill -9 test: seed {seed} (AMBERDB_KILL_SEED={seed} repeats it), {cycles} cycles");
    let mut rng = Rng(seed);
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    if let Some(from) = std::env::var_os("AMBERDB_KILL_FROM") {
        std::fs::create_dir_all(&store).unwrap();
        for e in std::fs::read_dir(&from).unwrap() {
            let e = e.unwrap();
            if e.file_name() != "LOCK" && e.file_name() != "BUILT" {
                let to = store.join(e.file_name());
                std::fs::copy(e.path(), &to).unwrap();
                // Written back before the first start, so that its open does not share the
                // disk with the copy's 2 GB of writeback (an open after a kill never does).
                std::fs::File::open(&to).unwrap().sync_all().unwrap();
            }
        }
    }
    let reported_before = host_page_reporting();
    let mut opens = Vec::new();
    let acked = Arc::new(Mutex::new(Acked::default()));
    let purge_delay = std::env::var("AMBERDB_KILL_PURGE_DELAY").unwrap_or_else(|_| "1".into());
    eprintln!("purge delay {purge_delay} s");
    let flags = [
        "--memory-limit",
        "10000000",
        "--purge-delay",
        purge_delay.as_str(),
    ];
    let mut killed_before_first_ack = 0;
    let mut purges = 0;
    let mut checkpoints = Vec::new();
    for cycle in 0..cycles {
        let started = std::time::Instant::now();
        let server = Server::start(&store, &flags);
        opens.push((started.elapsed(), replayed_frames(&server.log())));
        let before = acked.lock().unwrap().stores.len();
        let writers: Vec<_> = (0..4)
            .map(|w| {
                let acked = Arc::clone(&acked);
                let (addr, http) = (server.addr, server.http.expect("the server serves HTTP"));
                let tag = format!("cycle {cycle} writer {w}");
                std::thread::spawn(move || {
                    if w < 2 {
                        writer(addr, tag, acked);
                    } else {
                        http_writer(http, tag, acked);
                    }
                })
            })
            .collect();
        // One cycle in four runs long enough for an automatic purge to start.
        let run_ms = if rng.next().is_multiple_of(4) {
            1_100 + rng.next() % 900
        } else {
            50 + rng.next() % 250
        };
        std::thread::sleep(Duration::from_millis(run_ms));
        let log = server.log();
        purges += log.matches("purge done").count();
        checkpoints.push(log.matches("checkpoint written").count());
        server.kill9();
        for w in writers {
            w.join().unwrap();
        }
        if acked.lock().unwrap().stores.len() == before {
            // Killed before the first acknowledgement (e.g. during a checkpoint): a kill point
            // too, with nothing to check but that the store still opens.
            killed_before_first_ack += 1;
        }
    }
    assert!(
        killed_before_first_ack < cycles,
        "no cycle acknowledged a store: the test checked nothing"
    );
    assert!(
        acked.lock().unwrap().over_http > 0,
        "no store was acknowledged over HTTP: its writers checked nothing"
    );
    let acked = std::mem::take(&mut *acked.lock().unwrap());
    let server = Server::start(&store, &flags);
    let mut client = server.client();
    assert_all_there(&mut client, &acked);
    let ids: std::collections::HashSet<u64> = acked.stores.iter().map(|a| a.0).collect();
    assert_eq!(
        ids.len(),
        acked.stores.len(),
        "an id was acknowledged twice"
    );
    let stats = client.ok("GET_MEMORY_STATS", json!({}));
    assert!(
        stats["total_memories"].as_u64().unwrap()
            >= (acked.stores.len() - acked.deletes.len()) as u64
    );
    let each: Vec<String> = opens
        .iter()
        .zip(&checkpoints)
        .map(|((t, frames), written)| format!("{:.2} s ({frames}) {written}", t.as_secs_f64()))
        .collect();
    eprintln!(
        "opens in cycle order (log frames replayed, + delta: opened from a delta; then the checkpoints written before the kill): {}",
        each.join(", ")
    );
    // The first start follows the copy (or creation), not a kill: timed apart.
    let first = opens.first().map_or(0.0, |o| o.0.as_secs_f64());
    let mut opens: Vec<Duration> = opens.into_iter().skip(1).map(|(t, _)| t).collect();
    opens.sort();
    let at = |q: f64| {
        opens
            .get(((opens.len().max(1) - 1) as f64 * q).round() as usize)
            .map_or(f64::NAN, Duration::as_secs_f64)
    };
    eprintln!(
        "opens after a kill (process start to listening, {} of them): p50 {:.2} s, p99 {:.2} s, max {:.2} s; the first start, after the copy: {first:.2} s",
        opens.len(),
        at(0.5),
        at(0.99),
        at(1.0)
    );
    // On a VM whose balloon reports freed pages, an open that follows a kill may find them
    // taken back by the host, and wait for them (docs/benchmarks.md, "Huge pages off").
    match (reported_before, host_page_reporting()) {
        (Some((before, _)), Some((after, delay_ms))) => eprintln!(
            "host free page reporting: {} MiB handed back to the host during the run, {delay_ms} ms after being freed",
            after.saturating_sub(before) / 1024
        ),
        _ => eprintln!("host free page reporting: none on this machine"),
    }
    eprintln!(
        "kill -9: {cycles} cycles ({killed_before_first_ack} before the first ack), {} acknowledged stores ({} over HTTP), 0 lost, {} acknowledged deletes, none back; {} in the store (the rest were written but never acknowledged); {purges} automatic purges finished between kills",
        acked.stores.len(),
        acked.over_http,
        acked.deletes.len(),
        stats["total_memories"]
    );
    drop(client);
    server.kill9();
    // The files of a store killed mid-write pass the integrity check (a torn tail is a warning).
    let out = amberdb()
        .args(["check", "--data-dir"])
        .arg(&store)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{report}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(report.contains("ok: 0 errors"), "{report}");
}

/// The log frames an open replayed, from the server's `store open` line (`?` if absent).
/// The log frames the open replayed, from the server's "store open" line, and "+ delta"
/// when it opened from a delta checkpoint (`docs/durability.md`, "Incremental checkpoints").
fn replayed_frames(log: &str) -> String {
    let frames = log
        .split("replayed_frames: ")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .unwrap_or("?");
    if log.contains("checkpoint_delta_of: Some(") {
        format!("{frames} + delta")
    } else {
        frames.to_owned()
    }
}
