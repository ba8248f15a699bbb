//! Faults seen from outside, over real TCP (issue #13): an error reply means nothing changed,
//! for every command; a poisoned store keeps answering reads, PING and STATS; a full disk
//! refuses writes, keeps reads and takes writes again once space is freed.

use crate::http::{Caller, Http};
use crate::support::{Client, Server};
use amberdb::storage::FaultyStorage;
use amberdb::{HashingEmbedder, Store, StoreOptions};
use amberdb_server::args::Ty;
use amberdb_server::auth::Auth;
use amberdb_server::commands::{COMMANDS, Command, Ctx};
use amberdb_server::dispatch::{Limits, Shared};
use amberdb_server::metrics::Metrics;
use amberdb_server::server::Running;
use serde_json::{Map, Value, json};
use std::path::Path;
use std::sync::Arc;

/// A plausible value of `name`'s type, so that only the one defect under test is wrong.
fn plausible(command: &str, name: &str, ty: Ty) -> Value {
    match (name, ty) {
        ("memory_id", _) => json!(2),
        ("content", _) => json!(format!("phantom probe of {command}")),
        ("query", _) => json!("probe"),
        ("user_id", _) => json!("ada"),
        ("agent_id", _) => json!("helper"),
        ("session_id", _) => json!("s1"),
        ("feedback", _) => json!("helpful"),
        ("kind", _) => json!("memory"),
        ("role", _) => json!("user"),
        ("category", _) => json!("bug-fix"),
        ("strategy", _) => json!("composite"),
        ("mode", _) => json!("vector"),
        ("fusion", _) => json!("weighted"),
        ("store_type", _) => json!("vector"),
        ("command", _) => json!("SEARCH"),
        ("created_after" | "created_before", _) => json!("2000-01-01"),
        ("skip_hooks" | "force_hooks", _) => json!(["tags"]),
        ("days_old", _) => json!(1),
        ("max_to_keep", _) => json!(100),
        ("limit" | "top_k" | "max_changes", _) => json!(5),
        ("offset", _) => json!(0),
        (_, Ty::Str) => json!("x"),
        (_, Ty::Int) => json!(1),
        (_, Ty::Num) => json!(0.5),
        (_, Ty::Bool) => json!(true),
        (_, Ty::StrList) => json!(["phantom"]),
        (_, Ty::Messages) => json!([{"role": "user", "content": "phantom message"}]),
        (_, Ty::Object) => json!({"phantom": command}),
    }
}

/// A value of another JSON type than `ty`.
fn mistyped(ty: Ty) -> Value {
    match ty {
        Ty::Str => json!(5),
        Ty::Int | Ty::Num | Ty::Bool | Ty::StrList | Ty::Messages | Ty::Object => {
            json!("not that")
        }
    }
}

fn plausible_args(c: &Command) -> Map<String, Value> {
    c.args
        .iter()
        .filter(|a| a.name != "rrf_k")
        .map(|a| (a.name.to_owned(), plausible(c.name, a.name, a.ty)))
        .collect()
}

/// What a request could have changed: the log's last sequence number (every write, even an
/// access count, takes one) and the live memories.
fn state(c: &mut dyn Caller) -> (u64, u64) {
    let s = c.ok("STATS", json!({}));
    (
        s["store"]["last_seq"].as_u64().unwrap(),
        s["store"]["memories"].as_u64().unwrap(),
    )
}

fn seed_store(c: &mut dyn Caller) {
    for i in 0..3 {
        c.ok(
            "STORE",
            json!({"content": format!("seed note {i} about caching"), "skip_hooks": ["semantic_dedup"]}),
        );
    }
    c.ok("CREATE_USER", json!({"user_id": "ada"}));
    c.ok(
        "CREATE_AGENT",
        json!({"user_id": "ada", "agent_id": "helper"}),
    );
    c.ok(
        "CREATE_SESSION",
        json!({"user_id": "ada", "session_id": "s1"}),
    );
}

#[test]
fn an_error_reply_means_nothing_changed_for_every_command_and_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let server = Server::start(&path, &[]);
    let mut c = server.client();
    let mut h = Http::connect(server.http.unwrap());
    seed_store(&mut c);
    let before = state(&mut c);
    let mut refused = 0;
    // Each request is sent over the line protocol and over HTTP: refused alike, nothing
    // changed by either.
    let mut check = |c: &mut dyn Caller, command: &str, args: Map<String, Value>, what: &str| {
        for (transport, c) in [("line", &mut *c), ("http", &mut h as &mut dyn Caller)] {
            let reply = c.call(command, Value::Object(args.clone()));
            assert_eq!(
                reply["ok"], false,
                "{transport} {command} {what} {args:?} -> {reply}"
            );
            assert!(
                ["invalid", "limit_exceeded"].contains(&reply["code"].as_str().unwrap()),
                "{transport} {command} {what}: {reply}"
            );
            assert_eq!(
                state(c),
                before,
                "{transport} {command} {what}: an error reply changed the store"
            );
            refused += 1;
        }
    };
    // Every command, the connection-level ones (AUTH, QUIT) too: a refused QUIT keeps the
    // connection open, which the next check's STATS shows.
    for command in COMMANDS.iter() {
        // An unknown argument beside plausible ones.
        let mut args = plausible_args(command);
        args.insert("bogus".into(), json!(1));
        check(&mut c, command.name, args, "with an unknown argument");
        // Each argument of the wrong type in turn.
        for arg in command.args {
            let mut args = plausible_args(command);
            args.insert(arg.name.into(), mistyped(arg.ty));
            check(
                &mut c,
                command.name,
                args,
                &format!("with {} mistyped", arg.name),
            );
        }
    }
    // Out of range, for the commands that write.
    let long = "x".repeat(10_001);
    let tags: Vec<String> = (0..11).map(|i| format!("t{i}")).collect();
    for (command, args) in [
        ("STORE", json!({"content": long})),
        ("STORE", json!({"content": "eleven tags", "tags": tags})),
        (
            "STORE",
            json!({"content": "bad hook", "skip_hooks": ["nope"]}),
        ),
        ("STORE", json!({"content": "bad kind", "kind": "thought"})),
        (
            "STORE",
            json!({"content": "bad distance", "dedup_distance": 7.5}),
        ),
        ("UPDATE", json!({"memory_id": 2, "content": long})),
        ("UPDATE", json!({"memory_id": 0, "content": "zero"})),
        ("DELETE", json!({"memory_id": 0})),
        ("FEEDBACK", json!({"memory_id": 2, "feedback": "meh"})),
        ("CLEAR_OLD_MEMORIES", json!({"days_old": 0})),
        ("CLEAR_OLD_MEMORIES", json!({"max_to_keep": 5})),
        (
            "ADD_MESSAGES",
            json!({"user_id": "ada", "session_id": "s1", "messages": [{"role": "robot", "content": "x"}]}),
        ),
        (
            "ADD_MESSAGES",
            json!({"user_id": "ada", "session_id": "s1", "messages": [{"role": "user", "content": "x", "extra": 1}]}),
        ),
        ("SEARCH", json!({"query": "probe", "limit": 51})),
        ("SEARCH", json!({"query": "probe", "threshold": 1e300})),
        (
            "QUERY",
            json!({"user_id": "ada", "query": "probe", "top_k": 99}),
        ),
    ] {
        let Value::Object(args) = args else {
            unreachable!()
        };
        check(&mut c, command, args, "out of range");
    }
    eprintln!(
        "{refused} refused requests over {} commands, 0 changes",
        COMMANDS.len()
    );
    let (status, _) = server.terminate();
    assert!(status.success());
    let server = Server::start(&path, &[]);
    let mut c = server.client();
    assert_eq!(state(&mut c), before, "still unchanged after a restart");
    for id in 1..=3 {
        let m = c.ok("GET", json!({"memory_id": id}));
        assert_eq!(
            m["memory"]["content"],
            format!("seed note {} about caching", id - 1)
        );
    }
}

/// A server over a store on `FaultyStorage`, in this process.
fn serve_faulty(fs: &FaultyStorage) -> Running {
    let options =
        StoreOptions::new(Arc::new(HashingEmbedder::with_dim(384))).storage(Arc::new(fs.clone()));
    let store = Store::open(Path::new("/store"), options).unwrap();
    Running::start(Arc::new(Shared::new(
        Ctx {
            store,
            metrics: std::sync::Arc::new(Metrics::new()),
        },
        Limits::default(),
        Auth::none(),
    )))
    .unwrap()
}

#[test]
fn a_poisoned_store_answers_reads_ping_and_stats_and_says_why() {
    let fs = FaultyStorage::new();
    let server = serve_faulty(&fs);
    let mut c = Client::connect(server.addr);
    let kept = c.ok("STORE", json!({"content": "kept before the disk died"}))["memory_id"]
        .as_u64()
        .unwrap();
    // The disk dies at the next fsync: that write is never acknowledged.
    fs.crash_at_sync(1);
    let lost = c.call("STORE", json!({"content": "written as the disk died"}));
    assert_eq!(lost["ok"], false, "{lost}");
    assert_eq!(lost["code"], "unavailable");
    assert!(
        c.closed(),
        "a batch whose fsync failed closes its connection"
    );

    for _ in 0..20 {
        let mut c = Client::connect(server.addr);
        assert_eq!(c.ok("PING", json!({}))["reply"], "PONG");
        let got = c.ok("GET", json!({"memory_id": kept}));
        assert_eq!(got["memory"]["content"], "kept before the disk died");
        c.ok("SEARCH", json!({"query": "kept before the disk died"}));
        let refused = c.fails("STORE", json!({"content": "refused"}), "unavailable");
        assert!(
            refused["message"].as_str().unwrap().contains("reopen"),
            "{refused}"
        );
        // The connection stays open after a refused write.
        assert_eq!(c.ok("PING", json!({}))["reply"], "PONG");
    }
    let stats = Client::connect(server.addr).ok("STATS", json!({}));
    let store = &stats["store"];
    assert_eq!(store["poisoned"], true);
    assert_eq!(store["poison_cause"]["operation"], "fsync");
    assert!(
        store["poison_cause"]["file"]
            .as_str()
            .unwrap()
            .ends_with(".log"),
        "{store}"
    );
    assert!(
        store["poison_cause"]["error"]
            .as_str()
            .unwrap()
            .contains("injected")
    );
    assert!(
        store["poison_cause"]["since"]
            .as_str()
            .unwrap()
            .starts_with("20")
    );
    assert!(store["accesses_not_recorded"].as_u64().unwrap() >= 20);
}

/// A tmpfs of `size` mounted on `at` for the test's life (the test needs root, as CI has).
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    fn mount(at: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(at).unwrap();
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(at)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "mounting a {size} tmpfs on {} needs root (CI runs as root): {}",
            at.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        Tmpfs(at.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// Fills the file system of `dir` up to about `leave` free bytes with one file.
fn fill(dir: &Path, leave: u64) -> std::path::PathBuf {
    use std::io::Write;
    let path = dir.join("filler");
    let mut f = std::fs::File::create(&path).unwrap();
    let chunk = vec![0xA5u8; 64 * 1024];
    let mut written = 0u64;
    loop {
        match f.write(&chunk) {
            Ok(0) => break,
            Ok(n) => written += n as u64,
            Err(e) if e.raw_os_error() == Some(28) => break,
            Err(e) => panic!("filling: {e}"),
        }
    }
    f.set_len(written.saturating_sub(leave)).unwrap();
    f.sync_all().unwrap();
    path
}

#[test]
fn a_full_disk_refuses_writes_keeps_reads_and_takes_writes_again_once_space_is_freed() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let _mount = Tmpfs::mount(&store, "8m");
    let server = Server::start(&store, &[]);
    let mut c = server.client();
    let filler = fill(&store, 96 * 1024);
    let mut acked = Vec::new();
    let mut refused = 0;
    for i in 0.. {
        let content = format!(
            "note {i}: {}",
            "padding words of a longer memory ".repeat(20)
        );
        let r = c.call(
            "STORE",
            json!({"content": content, "skip_hooks": ["semantic_dedup"]}),
        );
        if r["ok"] == true {
            acked.push((r["memory_id"].as_u64().unwrap(), content));
            assert_eq!(
                refused, 0,
                "a write succeeded between refusals with no space freed"
            );
            continue;
        }
        assert_eq!(r["code"], "disk_full", "{r}");
        refused += 1;
        if refused == 5 {
            break;
        }
    }
    assert!(acked.len() >= 10, "only {} writes fit", acked.len());
    // Reads keep answering: their access counts are skipped, never an outage.
    for (id, content) in &acked {
        let m = c.ok("GET", json!({"memory_id": id}));
        assert_eq!(&m["memory"]["content"], content);
    }
    c.ok("SEARCH", json!({"query": "note 3"}));
    let s = c.ok("STATS", json!({}));
    assert_eq!(s["store"]["poisoned"], false, "{s}");
    assert!(s["store"]["disk_full_refusals"].as_u64().unwrap() >= 5);
    assert!(s["errors_by_code"]["disk_full"].as_u64().unwrap() >= 5);

    // Space is freed: writes resume by themselves.
    std::fs::remove_file(&filler).unwrap();
    for i in 0..20 {
        let content = format!("after space was freed {i}");
        let r = c.ok(
            "STORE",
            json!({"content": content, "skip_hooks": ["semantic_dedup"]}),
        );
        acked.push((r["memory_id"].as_u64().unwrap(), content));
    }
    server.kill9();
    let server = Server::start(&store, &[]);
    let mut c = server.client();
    for (id, content) in &acked {
        let m = c.ok("GET", json!({"memory_id": id}));
        assert_eq!(
            &m["memory"]["content"], content,
            "acknowledged write {id} lost"
        );
    }
    let memories = c.ok("STATS", json!({}))["store"]["memories"]
        .as_u64()
        .unwrap();
    assert_eq!(memories, acked.len() as u64, "no refused write was stored");
    eprintln!(
        "{} acknowledged, {refused} refused for a full disk, 0 lost after kill -9",
        acked.len()
    );
}

#[test]
fn the_request_line_fuzz_body_never_panics() {
    use proptest::prelude::*;
    let seeds: Vec<Vec<u8>> =
        std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds/request_line"))
            .unwrap()
            .map(|e| std::fs::read(e.unwrap().path()).unwrap())
            .collect();
    assert!(seeds.len() >= 5);
    assert!(
        seeds
            .iter()
            .any(|s| amberdb_server::fuzzing::request_line(s)),
        "some seed is a valid request"
    );
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 2_000,
        ..ProptestConfig::default()
    });
    let seeds_for_mutation = seeds.clone();
    runner
        .run(
            &(
                0..seeds_for_mutation.len(),
                any::<Vec<(usize, u8)>>(),
                any::<Vec<u8>>(),
            ),
            |(i, edits, raw)| {
                let mut line = seeds_for_mutation[i].clone();
                for (at, byte) in edits {
                    if !line.is_empty() {
                        let at = at % line.len();
                        line[at] = byte;
                    }
                }
                let _ = amberdb_server::fuzzing::request_line(&line);
                let _ = amberdb_server::fuzzing::request_line(&raw);
                Ok(())
            },
        )
        .unwrap();
}

/// The binary with every fsync failing with EIO from the moment a trigger file exists
/// (`tests/shim/failing_fsync.c`, compiled here with `cc` and loaded through `LD_PRELOAD`): the
/// issue's run, a real OS error through the real binary.
#[test]
fn a_real_fsync_eio_poisons_the_binary_which_keeps_answering_and_logs_why() {
    let dir = tempfile::tempdir().unwrap();
    let shim = dir.path().join("failing_fsync.so");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/shim/failing_fsync.c");
    let built = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&shim)
        .arg(&source)
        .arg("-ldl")
        .output()
        .expect("this test compiles its LD_PRELOAD shim with cc (gcc or clang)");
    assert!(
        built.status.success(),
        "cc: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    let trigger = dir.path().join("disk-dies-now");
    let store = dir.path().join("store");
    let env = [
        ("LD_PRELOAD", shim.to_str().unwrap()),
        ("AMBERDB_SHIM_FAIL_FSYNC_WHEN", trigger.to_str().unwrap()),
    ];
    let server = Server::start_with_env(&store, &[], &env);
    let mut c = server.client();
    let acked: Vec<u64> = (0..5)
        .map(|i| {
            c.ok(
                "STORE",
                json!({"content": format!("durable note {i} from before the disk died")}),
            )["memory_id"]
                .as_u64()
                .unwrap()
        })
        .collect();
    std::fs::write(&trigger, b"").unwrap();
    let lost = c.call("STORE", json!({"content": "written as the disk died"}));
    assert_eq!(lost["code"], "unavailable", "{lost}");
    assert!(c.closed());
    for _ in 0..10 {
        let mut c = server.client();
        assert_eq!(c.ok("PING", json!({}))["reply"], "PONG");
        for id in &acked {
            c.ok("GET", json!({"memory_id": id}));
        }
        c.ok("SEARCH", json!({"query": "durable before the disk died"}));
        c.fails("STORE", json!({"content": "refused"}), "unavailable");
    }
    let stats = server.client().ok("STATS", json!({}));
    let cause = &stats["store"]["poison_cause"];
    assert_eq!(cause["operation"], "fsync", "{stats}");
    assert!(
        cause["error"].as_str().unwrap().contains("os error 5"),
        "{cause}"
    );
    let log = server.log();
    assert!(
        log.contains("poisoned") && log.contains("os error 5"),
        "the OS error is logged when the store poisons:\n{log}"
    );
    server.kill9();
    std::fs::remove_file(&trigger).unwrap();
    let server = Server::start(&store, &[]);
    let mut c = server.client();
    for id in &acked {
        c.ok("GET", json!({"memory_id": id}));
    }
    c.ok(
        "STORE",
        json!({"content": "writable again after the reopen"}),
    );
}

/// Past capacity a request is answered `busy` with a retry hint and nothing runs; control
/// commands still answer; the retried request succeeds. The queue is filled by observation
/// (STATS' gauges), not by timing.
#[test]
fn past_capacity_a_write_is_answered_busy_changes_nothing_and_succeeds_on_retry() {
    use amberdb::{HookConfig, NewMemory, SyncPolicy};
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(
        dir.path(),
        StoreOptions::hashing()
            .hooks(HookConfig::none())
            .memory_limit(100_000)
            .sync(SyncPolicy::None),
    )
    .unwrap();
    for chunk in 0..20 {
        let batch = (0..1000)
            .map(|i| NewMemory::new(format!("note {chunk} {i} about caches, queues and pools")))
            .collect();
        for r in store.store_batch(batch).unwrap() {
            r.unwrap();
        }
    }
    let server = Running::start(Arc::new(Shared::new(
        Ctx {
            store,
            metrics: std::sync::Arc::new(Metrics::new()),
        },
        Limits {
            max_running: 1,
            max_queued: 1,
            ..Limits::default()
        },
        Auth::none(),
    )))
    .unwrap();
    let mut control = Client::connect(server.addr);
    let memories = |c: &mut Client| c.ok("STATS", json!({}))["store"]["memories"].clone();
    let before = memories(&mut control);
    // Two connections each pipeline a long run of hybrid searches: one runs, one waits.
    let heavy: String = (0..1024)
        .map(|i| format!("SEARCH {{\"query\": \"caches queues pools {i}\", \"mode\": \"hybrid\", \"limit\": 50, \"count_access\": false}}\n"))
        .collect();
    let mut loaders: Vec<Client> = (0..2).map(|_| Client::connect(server.addr)).collect();
    for l in &mut loaders {
        l.stream.write_all(heavy.as_bytes()).unwrap();
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let gauges = control.ok("STATS", json!({}))["admission"].clone();
        if gauges["running"] == 1 && gauges["admitted"] == 2 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the queue never filled: {gauges}"
        );
    }
    let mut c = Client::connect(server.addr);
    c.send(b"@t1 STORE {\"content\": \"refused while the server is full\"}\n");
    let busy = c.recv().unwrap();
    assert_eq!(busy["code"], "busy", "{busy}");
    assert_eq!(busy["tag"], "t1");
    assert!(busy["retry_after_ms"].as_f64().unwrap() >= 1.0, "{busy}");
    assert_eq!(
        c.ok("PING", json!({}))["reply"],
        "PONG",
        "control commands still answer"
    );
    assert_eq!(
        memories(&mut control),
        before,
        "a busy write changed nothing"
    );
    for l in &mut loaders {
        for _ in 0..1024 {
            assert_eq!(l.recv().unwrap()["ok"], true);
        }
    }
    c.ok(
        "STORE",
        json!({"content": "refused while the server is full"}),
    );
    assert_eq!(
        memories(&mut control).as_u64().unwrap(),
        before.as_u64().unwrap() + 1
    );
    let stats = control.ok("STATS", json!({}));
    assert!(stats["errors_by_code"]["busy"].as_u64().unwrap() >= 1);
}
