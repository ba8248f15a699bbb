//! The attacks of issue #54, from outside the process: a real `amberdb serve`, real files,
//! `prlimit`. `AMBERDB_BIN=<an older amberdb>` runs them against another build (the closing
//! note of stop 60 has the log of a run against `be275e8`, where each of them fails).

use crate::support::{Server, amberdb, text};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A store of `n` notes, written by a real server and checkpointed by its clean stop (its
/// log files kept, as retention keeps them): `prefix` says whose notes they are.
fn store_of(dir: &Path, prefix: &str, n: usize) -> Vec<u64> {
    let server = Server::start(dir, &[]);
    let mut c = server.client();
    let mut ids = Vec::new();
    for i in 0..n {
        let r = c.ok("STORE", json!({"content": note(prefix, i)}));
        ids.push(r["memory_id"].as_u64().unwrap());
    }
    drop(c);
    let (status, log) = server.terminate();
    assert!(status.success(), "{log}");
    ids
}

/// Note `i` of `prefix`'s: words of its own, so no two are near-duplicates a store merges.
fn note(prefix: &str, i: usize) -> String {
    const WORDS: [&str; 40] = [
        "kafka", "lisbon", "mortgage", "violin", "glacier", "pancake", "zinc", "orchid", "tractor",
        "sonnet", "quartz", "bamboo", "falcon", "yoga", "turbine", "saffron", "marathon", "pixel",
        "harbor", "lantern", "cobalt", "meadow", "walrus", "espresso", "canyon", "ballet", "rust",
        "tundra", "origami", "nebula", "cactus", "lagoon", "compiler", "thimble", "volcano",
        "mosaic", "parsley", "gondola", "quiver", "basalt",
    ];
    let words: Vec<&str> = (0..6)
        .map(|k| WORDS[(i * 7 + k * 13 + i / 40) % 40])
        .collect();
    format!("{prefix} note {i}: {} {}", words.join(" "), i * 7919)
}

fn files_named(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(prefix) && !n.ends_with(".tmp"))
        })
        .collect();
    v.sort();
    v
}

fn check(dir: &Path) -> (i32, String) {
    let out = amberdb()
        .args(["check", "--data-dir"])
        .arg(dir)
        .env("AMBERDB_LOG", "warn")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        text(&out.stdout) + &text(&out.stderr),
    )
}

/// The store id `amberdb check` prints.
fn store_id(dir: &Path) -> String {
    let (_, out) = check(dir);
    out.lines()
        .find_map(|l| l.strip_prefix("identity: version 2, store "))
        .unwrap_or_else(|| panic!("no store id in check's output: {out}"))
        .trim()
        .to_owned()
}

fn contents(server: &Server, ids: &[u64]) -> Vec<String> {
    let mut c = server.client();
    ids.iter()
        .map(|id| {
            let m = c.call("GET", json!({"memory_id": id}));
            m["memory"]["content"].as_str().unwrap_or("").to_owned()
        })
        .collect()
}

#[test]
fn a_checkpoint_or_log_of_another_store_is_refused_or_quarantined_never_served() {
    let tmp = tempfile::tempdir().unwrap();
    let (x, y) = (tmp.path().join("x"), tmp.path().join("y"));
    let ids = store_of(&x, "x", 40);
    store_of(&y, "y", 40);
    let (x_ckpt, y_ckpt) = (files_named(&x, "ckpt-"), files_named(&y, "ckpt-"));
    let name = x_ckpt.last().unwrap().file_name().unwrap().to_owned();
    assert_eq!(
        y_ckpt.last().unwrap().file_name().unwrap(),
        name,
        "the same shape"
    );

    // Y's checkpoint over X's, under the same name.
    std::fs::copy(y_ckpt.last().unwrap(), x.join(&name)).unwrap();
    let (code, out) = check(&x);
    assert_eq!(code, 1, "check must refuse a foreign checkpoint: {out}");
    let (xid, yid) = (store_id(&x), store_id(&y));
    assert_ne!(xid, yid);
    assert!(
        out.contains(name.to_str().unwrap()) && out.contains(&xid) && out.contains(&yid),
        "check names the file and both stores: {out}"
    );
    let server = Server::start(&x, &[]);
    let got = contents(&server, &ids);
    assert!(
        got.iter().all(|c| c.starts_with("x note")),
        "X served another store's texts: {:?}",
        got.iter().find(|c| !c.starts_with("x note"))
    );
    let stats = server.client().ok("STATS", json!({}));
    assert_eq!(
        stats["store"]["quarantined"].as_array().map(Vec::len),
        Some(1),
        "{stats}"
    );
    assert!(server.log().contains("quarantine"), "the log says so");
    drop(server);
    assert!(x.join("quarantine").join(&name).exists());
    let (code, out) = check(&x);
    assert_eq!(code, 0, "after the open moved it aside: {out}");
    assert!(out.contains("quarantine/"), "check still names it: {out}");

    // Y's newest log over X's, under the same name: X does not open, names the file.
    let x_log = files_named(&x, "wal-").pop().unwrap();
    let y_log = y.join(x_log.file_name().unwrap());
    assert!(y_log.exists(), "the same shape: {}", y_log.display());
    let own = std::fs::read(&x_log).unwrap();
    std::fs::copy(&y_log, &x_log).unwrap();
    let (code, out) = check(&x);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains(&yid) && out.contains(x_log.file_name().unwrap().to_str().unwrap()));
    let refused = amberdb()
        .args([
            "serve",
            "--port",
            "0",
            "--embedder",
            "hashing",
            "--data-dir",
        ])
        .arg(&x)
        .env("AMBERDB_LOG", "warn")
        .output()
        .unwrap();
    assert!(
        !refused.status.success(),
        "X opened with another store's log"
    );
    let said = text(&refused.stderr);
    assert!(
        said.contains("not this store's file") && said.contains(&yid),
        "{said}"
    );
    // Nothing of X was removed by the refused open: its own log back, it opens whole.
    std::fs::write(&x_log, own).unwrap();
    let server = Server::start(&x, &[]);
    assert!(
        contents(&server, &ids)
            .iter()
            .all(|c| c.starts_with("x note"))
    );
}

#[test]
fn a_foreign_backup_checkpoint_under_a_newer_name_is_quarantined_and_a_later_damage_loses_nothing()
{
    let tmp = tempfile::tempdir().unwrap();
    let (x, y) = (tmp.path().join("x"), tmp.path().join("y"));
    let ids = store_of(&x, "x", 30);
    store_of(&y, "y", 60);
    // Y's newer checkpoint copied into X under its own (newer) name.
    let y_ckpt = files_named(&y, "ckpt-").pop().unwrap();
    let planted = x.join(y_ckpt.file_name().unwrap());
    std::fs::copy(&y_ckpt, &planted).unwrap();
    let server = Server::start(&x, &[]);
    let mut c = server.client();
    for i in 0..40 {
        c.ok(
            "STORE",
            json!({"content": format!("x later note {i} on host {}", i * 17)}),
        );
    }
    drop(c);
    let (status, log) = server.terminate();
    assert!(status.success(), "{log}");
    assert!(
        !planted.exists(),
        "the foreign file stayed among the store's"
    );
    assert!(
        x.join("quarantine")
            .join(y_ckpt.file_name().unwrap())
            .exists()
    );
    // One flipped bit in X's newest checkpoint: X's own older files still recover it all.
    let newest = files_named(&x, "ckpt-").pop().unwrap();
    let mut b = std::fs::read(&newest).unwrap();
    let at = b.len() / 2;
    b[at] ^= 0x20;
    std::fs::write(&newest, b).unwrap();
    let server = Server::start(&x, &[]);
    assert!(
        contents(&server, &ids)
            .iter()
            .all(|c| c.starts_with("x note"))
    );
    let stats = server.client().ok("STATS", json!({}));
    assert_eq!(stats["store"]["memories"], 70, "{stats}");
}

#[test]
fn a_restored_backup_and_its_original_never_trade_files() {
    let tmp = tempfile::tempdir().unwrap();
    let (x, backup, restored) = (
        tmp.path().join("x"),
        tmp.path().join("backup"),
        tmp.path().join("restored"),
    );
    let ids = store_of(&x, "x", 20);
    let run = |args: &[&str]| {
        let out = amberdb()
            .args(args)
            .env("AMBERDB_LOG", "warn")
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
    };
    let s = |p: &Path| p.to_str().unwrap().to_owned();
    run(&[
        "backup",
        "--embedder",
        "hashing",
        "--data-dir",
        &s(&x),
        &s(&backup),
    ]);
    run(&["restore", &s(&backup), "--data-dir", &s(&restored)]);
    // Both go their own way.
    for (dir, who) in [(&x, "original"), (&restored, "restored")] {
        let server = Server::start(dir, &[]);
        let mut c = server.client();
        for i in 0..30 {
            c.ok(
                "STORE",
                json!({"content": format!("{who} later {i} with port {}", 1000 + i)}),
            );
        }
        drop(c);
        let (status, log) = server.terminate();
        assert!(status.success(), "{log}");
    }
    // The restored copy's newest files copied back into the original, under their names.
    for prefix in ["ckpt-", "seg-"] {
        for f in files_named(&restored, prefix) {
            let to = x.join(f.file_name().unwrap());
            std::fs::copy(&f, &to).unwrap();
        }
    }
    let (code, out) = check(&x);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("never was"),
        "another incarnation is named: {out}"
    );
    assert_eq!(
        store_id(&x),
        store_id(&restored),
        "a restore keeps the store's id"
    );
    let server = Server::start(&x, &[]);
    let got = contents(&server, &ids);
    assert!(got.iter().all(|c| c.starts_with("x note")), "{got:?}");
    let listed = server.client().ok("STATS", json!({}));
    assert_eq!(
        listed["store"]["memories"], 50,
        "the original's own 20 + 30: {listed}"
    );
    drop(server);
    // And the original's newest log into the restored copy: refused.
    let log = files_named(&x, "wal-").pop().unwrap();
    std::fs::copy(&log, restored.join(log.file_name().unwrap())).unwrap();
    let (code, out) = check(&restored);
    assert_eq!(code, 1, "{out}");
}

/// Every file of `dir` (quarantine included) that holds `needle`.
fn files_holding(dir: &Path, needle: &[u8]) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if std::fs::read(&p)
                .unwrap()
                .windows(needle.len())
                .any(|w| w == needle)
            {
                found.push(p);
            }
        }
    }
    found
}

#[test]
fn deleted_texts_leave_every_file_behind_a_damaged_checkpoint_or_segment() {
    for damaged in ["ckpt-", "seg-"] {
        let tmp = tempfile::tempdir().unwrap();
        let x = tmp.path().join("x");
        let ids = store_of(&x, "x", 60);
        let newest = files_named(&x, damaged).pop().unwrap();
        let mut b = std::fs::read(&newest).unwrap();
        let at = b.len() - 100;
        b[at] ^= 0x01;
        std::fs::write(&newest, b).unwrap();
        let server = Server::start(&x, &[]);
        let mut c = server.client();
        // Restoration after a damaged segment ends in a purge of its own; wait for it.
        let deadline = Instant::now() + Duration::from_secs(60);
        while c.ok("STATS", json!({}))["store"]["unindexed"] != 0 {
            assert!(Instant::now() < deadline, "restoration never ended");
            std::thread::sleep(Duration::from_millis(50));
        }
        for id in &ids[..30] {
            c.ok("DELETE", json!({"memory_id": id}));
        }
        c.ok("PURGE", json!({}));
        let leaks: Vec<(usize, Vec<PathBuf>)> = (0..30)
            .map(|i| {
                let needle = format!("x note {i}: ");
                (i, files_holding(&x, needle.as_bytes()))
            })
            .filter(|(_, f)| !f.is_empty())
            .collect();
        assert!(
            leaks.is_empty(),
            "{damaged} damaged: deleted texts left in {leaks:?}"
        );
        // The undeleted ones are all there.
        let kept = contents(&server, &ids[30..]);
        assert!(kept.iter().all(|t| t.starts_with("x note")));
        drop(c);
        drop(server);
        let (code, out) = check(&x);
        assert_eq!(code, 0, "{damaged}: {out}");
    }
}

/// Opens of `/proc/<pid>/fd`: the process's descriptors now.
fn descriptors_of(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, Iterator::count)
}

#[test]
fn idle_connection_storms_under_a_low_descriptor_limit_never_stop_writes_or_maintenance() {
    // With tokens (the unauthenticated cap and deadline) and without (every connection is
    // in, up to the cap the descriptors allow).
    storm(true);
    storm(false);
}

fn storm(with_tokens: bool) {
    let tmp = tempfile::tempdir().unwrap();
    let x = tmp.path().join("x");
    let tokens = tmp.path().join("tokens");
    std::fs::write(&tokens, "a-long-shared-token-for-the-storm\n").unwrap();
    store_of(&x, "x", 50);
    let token_args = if with_tokens {
        vec!["--token-file", tokens.to_str().unwrap()]
    } else {
        Vec::new()
    };
    let bin = std::env::var_os("AMBERDB_BIN").map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_amberdb")),
        PathBuf::from,
    );
    // prlimit as the wrapper: soft = hard = 256, so the server cannot raise it.
    let server = Server::start_wrapped(
        &x,
        &["prlimit", "--nofile=256:256", "--"],
        &bin,
        &[token_args.as_slice(), &["--purge-delay", "1"]].concat(),
    );
    let pid = server.child.id();
    let mut admin = server.client();
    if with_tokens {
        admin.ok(
            "AUTH",
            json!({"token": "a-long-shared-token-for-the-storm"}),
        );
    }
    // 400 idle connections (no AUTH) and 100 half-open ones (half a line, never finished).
    let mut storm = Vec::new();
    let mut refused = 0;
    for i in 0..500 {
        let Ok(mut s) = std::net::TcpStream::connect_timeout(&server.addr, Duration::from_secs(2))
        else {
            continue;
        };
        if i >= 400 {
            use std::io::Write;
            let _ = s.write_all(b"{\"command\": \"STO");
        }
        storm.push(s);
    }
    std::thread::sleep(Duration::from_millis(300));
    let peak_storm = descriptors_of(pid);
    // Refused clients got a reply, not silence.
    for s in &mut storm {
        use std::io::Read;
        s.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
        let mut buf = [0u8; 256];
        if let Ok(n) = s.read(&mut buf)
            && n > 0
            && String::from_utf8_lossy(&buf[..n]).contains("too_many_connections")
        {
            refused += 1;
        }
    }
    assert!(
        refused > 0,
        "past the cap, clients must hear too_many_connections"
    );
    // Under the storm: deletes, purges, checkpoints and a backup succeed, writes go on.
    let mut peak = peak_storm;
    for round in 0..5 {
        let r = admin.ok(
            "STORE",
            json!({"content": format!("written in the storm {round}")}),
        );
        let id = r["memory_id"].as_u64().unwrap();
        admin.ok("DELETE", json!({"memory_id": id}));
        let p = admin.call("PURGE", json!({}));
        assert_eq!(p["ok"], true, "PURGE under the storm: {p}");
        peak = peak.max(descriptors_of(pid));
    }
    let dest = tmp.path().join(format!("backup-{}", std::process::id()));
    let b = admin.call("BACKUP", json!({"dest": dest.to_str().unwrap()}));
    assert_eq!(b["ok"], true, "BACKUP under the storm: {b}");
    peak = peak.max(descriptors_of(pid));
    std::thread::sleep(Duration::from_millis(1500));
    let stats = admin.ok("STATS", json!({}));
    assert_eq!(stats["store"]["poisoned"], false, "{stats}");
    drop(storm);
    std::thread::sleep(Duration::from_millis(300));
    let after = admin.ok("STORE", json!({"content": "after the storm"}));
    assert_eq!(after["ok"], true, "{after}");
    assert!(peak <= 256, "{peak} descriptors at the peak");
    let log = server.log();
    let accept_lines = log.matches("accept failed").count();
    assert!(
        accept_lines <= 3,
        "the accept loop flooded the log: {accept_lines} lines"
    );
    eprintln!(
        "descriptors (tokens: {with_tokens}): {peak_storm} under the storm, {peak} at the peak with purges and a backup (soft limit 256), {refused} clients told too_many_connections"
    );
}

#[test]
fn an_unauthenticated_connection_has_a_deadline_when_tokens_are_configured() {
    let tmp = tempfile::tempdir().unwrap();
    let x = tmp.path().join("x");
    let tokens = tmp.path().join("tokens");
    std::fs::write(&tokens, "another-long-token-for-the-test\n").unwrap();
    let server = Server::start(
        &x,
        &[
            "--token-file",
            tokens.to_str().unwrap(),
            "--auth-timeout",
            "1",
        ],
    );
    let mut idle = server.client();
    let started = Instant::now();
    let reply: Option<Value> = idle.recv();
    let reply = reply.expect("a reply before the close");
    assert_eq!(reply["code"], "timeout", "{reply}");
    assert!(started.elapsed() < Duration::from_secs(5));
    // An authenticated one stays.
    let mut ok = server.client();
    ok.ok("AUTH", json!({"token": "another-long-token-for-the-test"}));
    std::thread::sleep(Duration::from_millis(1500));
    ok.ok("PING", json!({}));
}

#[test]
fn distinct_notes_that_differ_by_an_identifier_all_stay_live() {
    let tmp = tempfile::tempdir().unwrap();
    let x = tmp.path().join("x");
    let server = Server::start(&x, &[]);
    let mut c = server.client();
    let kinds = [
        ("the scheduler crashes if the queue is empty (ticket {})", 1),
        ("the login page fails with error {}", 400),
        ("the deploy is blocked by issue {}", 7),
        ("the refund was sent for order {}", 88_000),
        ("CI is red on build {}", 900),
        ("the parser bug is on line {}", 10),
    ];
    let mut n = 0;
    for (template, base) in kinds {
        for i in 0..250 {
            let content = template.replace("{}", &(base + i * 3).to_string());
            let r = c.ok("STORE", json!({"content": content}));
            assert_eq!(r["outcome"], "stored", "{content}: {r}");
            n += 1;
        }
    }
    let stats = c.ok("STATS", json!({}));
    assert_eq!(stats["store"]["memories"], n, "{stats}");
}

#[test]
fn check_names_the_missing_frames_as_an_inclusive_range() {
    let tmp = tempfile::tempdir().unwrap();
    let x = tmp.path().join("x");
    let server = Server::start(&x, &[]);
    let mut c = server.client();
    for i in 0..20 {
        c.ok("STORE", json!({"content": format!("gap note {i}")}));
    }
    c.ok("PURGE", json!({}));
    for i in 0..5 {
        c.ok("STORE", json!({"content": format!("after note {i}")}));
    }
    drop(c);
    let (status, _) = server.terminate();
    assert!(status.success());
    // The older log cut after its second frame: its later frames are missing before the
    // next log, and check names them first to last.
    let logs = files_named(&x, "wal-");
    assert!(logs.len() >= 2, "{logs:?}");
    let first_of = |p: &Path| -> u64 {
        let name = p.file_name().unwrap().to_str().unwrap();
        name.trim_start_matches("wal-")
            .trim_end_matches(".log")
            .parse()
            .unwrap()
    };
    let (older, next) = (&logs[0], first_of(&logs[1]));
    let bytes = std::fs::read(older).unwrap();
    // The header: 64 bytes from log version 9, 32 before.
    let mut pos = if u16::from_le_bytes([bytes[4], bytes[5]]) >= 9 {
        64
    } else {
        32
    };
    for _ in 0..2 {
        pos += 8 + u32::from_le_bytes(bytes[pos..pos + 4].try_into().unwrap()) as usize;
    }
    std::fs::write(older, &bytes[..pos]).unwrap();
    let (code, out) = check(&x);
    assert_eq!(code, 1, "{out}");
    let want = format!("frames {}–{} are missing", first_of(older) + 2, next - 1);
    assert!(out.contains(&want), "want {want:?} in {out}");
}

#[test]
fn mend_brings_back_the_ticket_notes_an_older_build_superseded() {
    // Written by amberdb 0.3 (`be275e8`): 20 notes that differ by a ticket number, 19 of
    // them archived as "the same subject and relation with a new value".
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tickets-0.3");
    let tmp = tempfile::tempdir().unwrap();
    let x = tmp.path().join("x");
    std::fs::create_dir_all(&x).unwrap();
    for e in std::fs::read_dir(&src).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), x.join(e.file_name())).unwrap();
    }
    let live = |x: &Path| {
        let out = crate::support::run_on(&["stats"], x);
        let said = text(&out.stdout);
        said.split_whitespace()
            .skip_while(|w| *w != "memories")
            .nth(1)
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no memory count in {said}"))
    };
    assert_eq!(live(&x), 1, "the fixture holds one live note");
    let out = crate::support::run_on(&["mend", "--apply"], &x);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("19 archived memories brought back"));
    assert_eq!(live(&x), 20);
}
