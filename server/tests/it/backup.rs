//! `amberdb backup` and `amberdb restore` as a user runs them (issue #17,
//! `docs/durability.md`, "Backup and restore"): a backup taken through a running server
//! while a client writes, checked, restored into a new directory, and opened as the store was
//! at one commit.

use super::support::{Server, amberdb};
use serde_json::{Value, json};
use std::path::Path;
use std::process::Output;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

fn run(args: &[&str]) -> Output {
    amberdb()
        .args(args)
        .env_remove("AMBERDB_DATA_DIR")
        .output()
        .unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `amberdb backup DEST --server ADDR --token-file TOKENS`.
fn through_server(dest: &Path, addr: &str, tokens: &Path) -> Output {
    run(&[
        "backup",
        s(dest),
        "--server",
        addr,
        "--token-file",
        s(tokens),
    ])
}

#[test]
fn a_backup_through_the_running_server_restores_as_the_store_was_at_one_commit() {
    let dir = tempfile::tempdir().unwrap();
    let (store, tokens) = (dir.path().join("store"), dir.path().join("tokens"));
    let (dest, restored) = (dir.path().join("backup"), dir.path().join("restored"));
    std::fs::write(
        &tokens,
        "# shared, then user-bound\nshared-secret-1\nada ada-token-22\n",
    )
    .unwrap();
    let server = Server::start(&store, &["--token-file", s(&tokens)]);
    let acked: Mutex<Vec<(u64, String)>> = Mutex::default();
    let stop = AtomicBool::new(false);
    let addr = server.addr.to_string();
    let (acked_before, backup_out) = std::thread::scope(|scope| {
        scope.spawn(|| {
            let mut c = server.client();
            c.ok("AUTH", json!({"token": "shared-secret-1"}));
            let mut i = 0u64;
            while !stop.load(Ordering::Acquire) || i < 200 {
                let content = format!("note {i}: the build cache lives in {} ", i * 7919);
                let r = c.ok(
                    "STORE",
                    json!({"content": content, "tags": [format!("t{}", i % 4)]}),
                );
                acked
                    .lock()
                    .unwrap()
                    .push((r["memory_id"].as_u64().unwrap(), content));
                i += 1;
            }
        });
        while acked.lock().unwrap().len() < 100 {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        // The store is the server's: the command says how to go through it.
        let local = run(&[
            "backup",
            s(&dest),
            "--embedder",
            "hashing",
            "--data-dir",
            s(&store),
        ]);
        assert_eq!(local.status.code(), Some(2), "{}", text(&local));
        assert!(text(&local).contains("--server"), "{}", text(&local));
        assert!(!dest.exists());
        // A user-bound token may not copy every user's memories.
        let ada = dir.path().join("ada-tokens");
        std::fs::write(&ada, "ada ada-token-22\n").unwrap();
        let refused = run(&[
            "backup",
            s(&dest),
            "--server",
            &addr,
            "--token-file",
            s(&ada),
        ]);
        assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
        let acked_before = acked.lock().unwrap().len();
        let out = through_server(&dest, &addr, &tokens);
        stop.store(true, Ordering::Release);
        (acked_before, out)
    });
    assert!(backup_out.status.success(), "{}", text(&backup_out));
    assert!(
        text(&backup_out).contains("check: clean"),
        "{}",
        text(&backup_out)
    );
    // An export through the same server: every record, into a new file, while it serves.
    let export_file = dir.path().join("export.jsonl");
    let export = |file: &Path| {
        run(&[
            "export",
            "--server",
            &addr,
            "--token-file",
            s(&tokens),
            "--output",
            s(file),
        ])
    };
    let exported = export(&export_file);
    assert!(exported.status.success(), "{}", text(&exported));
    let first = std::fs::read_to_string(&export_file).unwrap();
    assert!(first.starts_with("{\"type\":\"export\""), "{first:.100}");
    assert!(first.lines().any(|l| l.contains("\"type\":\"record\"")));
    let exists = export(&export_file);
    assert_eq!(exists.status.code(), Some(2), "{}", text(&exists));
    assert!(text(&exists).contains("exists"), "{}", text(&exists));
    // The same again is refused: the directory is not empty.
    let again = through_server(&dest, &addr, &tokens);
    assert_eq!(again.status.code(), Some(2), "{}", text(&again));
    assert!(text(&again).contains("not empty"), "{}", text(&again));
    let (status, _) = server.terminate();
    assert!(status.success());

    let check = run(&["check", "--data-dir", s(&dest)]);
    assert_eq!(check.status.code(), Some(0), "{}", text(&check));
    let out = run(&["restore", s(&dest), "--data-dir", s(&restored)]);
    assert!(out.status.success(), "{}", text(&out));
    // Restoring over a store is refused.
    let over = run(&["restore", s(&dest), "--data-dir", s(&store)]);
    assert_eq!(over.status.code(), Some(2), "{}", text(&over));
    assert!(text(&over).contains("holds a store"), "{}", text(&over));

    let export = run(&[
        "export",
        "--embedder",
        "hashing",
        "--data-dir",
        s(&restored),
    ]);
    assert!(export.status.success(), "{}", text(&export));
    let memories: Vec<(u64, String)> = String::from_utf8_lossy(&export.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v["type"] == "record" && v["archived"] == false)
        .map(|v| {
            (
                v["id"].as_u64().unwrap(),
                v["content"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let acked = acked.into_inner().unwrap();
    eprintln!(
        "backup holds {} memories; {acked_before} acknowledged before it began, {} in all",
        memories.len(),
        acked.len()
    );
    // Every write acknowledged before the backup began, then a prefix of the later ones.
    assert!(memories.len() >= acked_before && memories.len() < acked.len());
    assert_eq!(memories[..], acked[..memories.len()]);
}
