//! `REEMBED` attacked from outside the process (issue #17, `docs/durability.md`,
//! "Re-embedding"): the server is killed with SIGKILL while it re-embeds, restarts on its old
//! embedder with what was staged, finishes from there, and then opens with MiniLM only.

use super::support::Server;
use serde_json::json;
use std::time::{Duration, Instant};

#[test]
fn a_server_killed_while_it_reembeds_restarts_on_its_old_embedder_and_finishes_from_there() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let server = Server::start(&store, &[]);
    let mut c = server.client();
    let n = 1_500u64;
    for i in 0..n {
        c.ok(
            "STORE",
            json!({"content": format!("note {i} on the flaky login test and the deploy queue {}", i * 7919 % 1000)}),
        );
    }
    // Near-duplicates merged: what the store holds is what STATS says.
    let memories = c.ok("STATS", json!({}))["store"]["memories"].clone();
    // REEMBED on its own connection, never answered: SIGKILL once some chunks are staged.
    let mut re = server.client();
    re.send(b"REEMBED {\"embedder\": \"minilm\"}\n");
    let deadline = Instant::now() + Duration::from_secs(120);
    let staged = loop {
        let st = c.ok("STATS", json!({}));
        let staged = st["store"]["reembedding"]["staged"].as_u64().unwrap_or(0);
        if staged >= 256 {
            break staged;
        }
        assert!(Instant::now() < deadline, "nothing staged: {st}");
        std::thread::sleep(Duration::from_millis(20));
    };
    server.kill9();

    // Back on the hashing embedder, every memory there, the stage (at least what STATS saw,
    // acknowledged frames) with it.
    let server = Server::start(&store, &[]);
    let mut c = server.client();
    let st = c.ok("STATS", json!({}))["store"].clone();
    assert_eq!(st["memories"], memories, "{st}");
    assert_eq!(st["embedder"], "amberdb-hashing-v1-384", "{st}");
    let kept = st["reembedding"]["staged"].as_u64().unwrap();
    let total = st["reembedding"]["total"].as_u64().unwrap();
    assert!(
        kept >= staged && kept < total,
        "{kept} staged after the kill, {staged} before"
    );
    // It carries on from there: only the rest is embedded.
    let r = c.ok("REEMBED", json!({"embedder": "minilm"}));
    let done = r["reembed"]["records"].as_u64().unwrap() + r["reembed"]["tags"].as_u64().unwrap();
    assert_eq!(done, total - kept, "{r}");
    let (status, _) = server.terminate();
    assert!(status.success());

    // Now MiniLM opens it, finds by meaning, and the hashing embedder is refused.
    let server = Server::start(&store, &["--embedder", "minilm"]);
    let mut c = server.client();
    assert_eq!(c.ok("STATS", json!({}))["store"]["memories"], memories);
    let hits = c.ok(
        "SEARCH",
        json!({"query": "an unreliable sign-in check", "limit": 3}),
    );
    assert!(
        hits["results"][0]["content"]
            .as_str()
            .unwrap()
            .contains("flaky login test"),
        "{hits}"
    );
    drop(c);
    server.terminate();
    let refused = super::support::amberdb()
        .args(["stats", "--embedder", "hashing", "--data-dir"])
        .arg(&store)
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("all-MiniLM-L6-v2"));
}
