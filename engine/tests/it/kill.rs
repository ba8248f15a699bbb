//! A real process killed with SIGKILL mid-write, many times: every acknowledged write survives.
//!
//! The test re-runs its own binary as a child (`AMBERDB_KILL_CHILD=<dir>`). The child opens the
//! store and, from four threads, stores records (and deletes some), printing `ACK <id> <content>`
//! or `DEL <id>` only after the call returned `Ok`, and `DELETING <id>` before a delete (an
//! unacknowledged delete may or may not survive the kill). The parent reads those lines, kills the child
//! at a seeded random moment (sometimes before it finished opening), reopens the store and
//! checks every acknowledged line. `AMBERDB_KILL_CYCLES` sets the number of cycles (default 25).

use super::support::{Rng, seed};
use amberdb::{HookConfig, MemoryId, NewMemory, Store, StoreOptions};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const TEST_NAME: &str = "kill::kill_9_loses_no_acknowledged_write";

/// The engine alone: merges would change which id holds a content (tests/it/semantics.rs
/// crashes merges).
fn options() -> StoreOptions {
    StoreOptions::hashing()
        .seal_rows(300)
        .memory_limit(10_000_000)
        .hooks(HookConfig::none())
}

fn child(dir: &Path, cycle: u64) -> ! {
    let store = Store::open(dir, options()).expect("child open");
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let store = store.clone();
            std::thread::spawn(move || {
                let mut last: Option<MemoryId> = None;
                for i in 0u64.. {
                    let content = format!("kill cycle {cycle} thread {t} op {i}");
                    let id = store
                        .store(NewMemory::new(&content).tags([format!("t{t}")]))
                        .expect("child store")
                        .memory_id;
                    writeln!(std::io::stdout().lock(), "ACK {} {content}", id.0).expect("stdout");
                    if t == 3
                        && i % 10 == 9
                        && let Some(prev) = last.take()
                    {
                        writeln!(std::io::stdout().lock(), "DELETING {}", prev.0).expect("stdout");
                        store.delete(prev).expect("child delete");
                        writeln!(std::io::stdout().lock(), "DEL {}", prev.0).expect("stdout");
                    }
                    last = Some(id);
                }
            })
        })
        .collect();
    for t in threads {
        let _ = t.join();
    }
    std::process::exit(3)
}

#[test]
fn kill_9_loses_no_acknowledged_write() {
    if let Ok(dir) = std::env::var("AMBERDB_KILL_CHILD") {
        let cycle = std::env::var("AMBERDB_KILL_CYCLE")
            .ok()
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        child(Path::new(&dir), cycle);
    }
    let seed = seed("kill_9_loses_no_acknowledged_write", 0x5EED);
    let cycles: u64 = std::env::var("AMBERDB_KILL_CYCLES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(25);
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().unwrap();
    let mut acked: BTreeMap<u64, String> = BTreeMap::new();
    let mut deleted: Vec<u64> = Vec::new();
    let exe = std::env::current_exe().unwrap();
    let mut kills_during_open = 0;
    let started = Instant::now();
    for cycle in 0..cycles {
        let mut child = Command::new(&exe)
            .args([TEST_NAME, "--exact", "--nocapture", "--test-threads=1"])
            .env("AMBERDB_KILL_CHILD", dir.path())
            .env("AMBERDB_KILL_CYCLE", cycle.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        // One cycle in eight kills before the first acknowledgement (often during recovery).
        let target = if rng.below(8) == 0 {
            0
        } else {
            1 + rng.below(400)
        };
        let mut pending = None;
        let mut record = |line: &str, acked: &mut BTreeMap<u64, String>, deleted: &mut Vec<u64>| {
            if let Some(rest) = line.strip_prefix("ACK ") {
                let (id, content) = rest.split_once(' ').unwrap();
                acked.insert(id.parse().unwrap(), content.to_owned());
            } else if let Some(id) = line.strip_prefix("DELETING ") {
                pending = Some(id.parse::<u64>().unwrap());
            } else if let Some(id) = line.strip_prefix("DEL ") {
                deleted.push(id.parse().unwrap());
                pending = None;
            }
        };
        if target == 0 {
            std::thread::sleep(Duration::from_millis(rng.below(30)));
            kills_during_open += 1;
        } else {
            let mut seen = 0;
            while seen < target {
                let Some(Ok(line)) = lines.next() else {
                    let out = child.wait_with_output().unwrap();
                    panic!(
                        "child exited early ({}): {}",
                        out.status,
                        String::from_utf8_lossy(&out.stderr)
                    );
                };
                seen += u64::from(line.starts_with("ACK "));
                record(&line, &mut acked, &mut deleted);
            }
        }
        child.kill().unwrap();
        child.wait().unwrap();
        // Acknowledgements still in the pipe were printed after `Ok`: they count.
        for line in lines.map_while(Result::ok) {
            record(&line, &mut acked, &mut deleted);
        }
        // A delete in flight at the kill either happened or not; both are correct.
        let in_flight = pending;
        let store_check = Store::open(dir.path(), options())
            .unwrap_or_else(|e| panic!("cycle {cycle}: reopen failed: {e}"));
        if let Some(id) = in_flight
            && store_check.get(MemoryId(id)).is_err()
        {
            deleted.push(id);
        }
        drop(store_check);
        let store = Store::open(dir.path(), options())
            .unwrap_or_else(|e| panic!("cycle {cycle}: reopen failed: {e}"));
        for (id, content) in &acked {
            match store.get(MemoryId(*id)) {
                Ok(m) => {
                    assert!(
                        !deleted.contains(id),
                        "cycle {cycle}: acknowledged delete of {id} undone"
                    );
                    assert_eq!(&m.content, content, "cycle {cycle}: record {id} changed");
                }
                Err(_) => assert!(
                    deleted.contains(id),
                    "cycle {cycle}: acknowledged store {id} lost"
                ),
            }
        }
    }
    eprintln!(
        "{cycles} SIGKILLs ({kills_during_open} before the first ack), {} acknowledged stores, {} acknowledged deletes, 0 lost, {:.1}s",
        acked.len(),
        deleted.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(
        acked.len() as u64 >= cycles * 10,
        "too few acknowledged writes to mean anything"
    );
}
