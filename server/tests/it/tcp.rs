//! The line protocol over real TCP (127.0.0.1:0), against the `amberdb serve` process.

use crate::http::{Caller, Http};
use crate::support::{Client, Server, still_serving};
use amberdb_server::commands::COMMANDS;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

fn ids(reply: &Value, list: &str) -> Vec<u64> {
    reply[list]
        .as_array()
        .unwrap_or_else(|| panic!("no {list} in {reply}"))
        .iter()
        .map(|r| r["id"].as_u64().unwrap())
        .collect()
}

/// Every command of the table, through a session a user would have, with its result checked.
#[test]
fn every_command_works_over_tcp() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("store"), &[]);
    every_command_works(dir.path(), &mut server.client());
}

/// The same, over HTTP (`POST /v1/commands/{COMMAND}`): the same results, and each failure's
/// status its code's (docs/http.md).
#[test]
fn every_command_works_over_http() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("store"), &[]);
    every_command_works(dir.path(), &mut Http::connect(server.http.unwrap()));
}

fn every_command_works(dir: &Path, c: &mut dyn Caller) {
    let mut used = BTreeSet::new();
    let mut ok = |c: &mut dyn Caller, cmd: &str, args: Value| {
        used.insert(crate::tcp::canonical(cmd));
        c.ok(cmd, args)
    };

    assert_eq!(ok(&mut *c, "PING", json!({}))["reply"], "PONG");
    let help = ok(&mut *c, "HELP", json!({}));
    assert_eq!(help["commands"].as_array().unwrap().len(), COMMANDS.len());
    let search_help = ok(&mut *c, "HELP", json!({"command": "search"}));
    assert_eq!(search_help["command"], "SEARCH_MEMORIES");
    assert!(
        search_help["arguments"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["name"] == "created_after")
    );
    assert_eq!(
        ok(&mut *c, "AUTH", json!({"token": "anything"}))["reply"],
        "OK"
    );

    // Memories.
    let flaky = ok(
        &mut *c,
        "STORE_MEMORY",
        json!({"content": "the login test is flaky because two tests share one session cookie", "category": "bug-fix", "tags": ["flaky", "auth"]}),
    );
    assert_eq!(flaky["outcome"], "stored");
    let flaky_id = flaky["memory_id"].as_u64().unwrap();
    let pool = ok(&mut *c, "STORE", json!({"content": "raise the postgres connection pool when the API times out under load", "tags": ["postgres"]}))["memory_id"].as_u64().unwrap();
    // A duplicate is an outcome, not an error (docs/semantics.md, "Dedup at store time").
    let dup = ok(
        &mut *c,
        "STORE",
        json!({"content": "the login test is flaky because two tests share one session cookie"}),
    );
    assert_eq!(dup["outcome"], "duplicate");
    assert_eq!(
        dup["memory_id"], flaky_id,
        "the duplicate names the existing id"
    );

    let found = ok(
        &mut *c,
        "SEARCH_MEMORIES",
        json!({"query": "postgres pool", "mode": "keyword"}),
    );
    assert_eq!(ids(&found, "results"), vec![pool]);
    let text = ok(
        &mut *c,
        "SEARCH",
        json!({"query": "SESSION COOKIE", "mode": "text", "tags": ["flaky"], "created_after": "2000-01-01"}),
    );
    assert_eq!(ids(&text, "results"), vec![flaky_id]);
    let similar = ok(
        &mut *c,
        "SEARCH",
        json!({"query": "login test flaky session cookie", "strategy": "similarity", "threshold": 0.0, "limit": 1}),
    );
    assert_eq!(ids(&similar, "results"), vec![flaky_id]);
    let hybrid = ok(
        &mut *c,
        "SEARCH",
        json!({"query": "postgres", "mode": "hybrid", "fusion": "rrf", "threshold": 0.0}),
    );
    assert_eq!(ids(&hybrid, "results")[0], pool);

    let recent = ok(&mut *c, "LIST_RECENT_MEMORIES", json!({"limit": 5}));
    assert_eq!(ids(&recent, "memories"), vec![pool, flaky_id]);
    let got = ok(&mut *c, "GET_BY_MEMORY_ID", json!({"memory_id": flaky_id}));
    assert_eq!(got["memory"]["tags"], json!(["flaky", "auth"]));
    let fb = ok(
        &mut *c,
        "FEEDBACK",
        json!({"memory_id": flaky_id, "feedback": "helpful"}),
    );
    assert_eq!(fb["helpful_count"], 1);
    let updated = ok(
        &mut *c,
        "UPDATE_MEMORY",
        json!({"memory_id": pool, "content": "raise the postgres pool to 50 connections when the API times out"}),
    );
    let pool2 = updated["memory_id"].as_u64().unwrap();
    assert_ne!(pool2, pool, "new content is a new record");
    let lineage = ok(&mut *c, "LINEAGE", json!({"memory_id": pool2}));
    assert_eq!(ids(&lineage, "lineage"), vec![pool]);
    let gone = c.fails("GET", json!({"memory_id": pool}), "not_found");
    assert_eq!(
        gone["memory_id"], pool2,
        "an archived id names its successor"
    );

    // Validity in time: a fact, a newer value that closes it, history and as_of.
    let lisbon = ok(
        &mut *c,
        "STORE",
        json!({"content": "Dora lives in Lisbon", "user_id": "dora", "valid_from": "2024-01-01"}),
    );
    let berlin = ok(
        &mut *c,
        "STORE",
        json!({"content": "Dora lives in Berlin", "user_id": "dora", "valid_from": "2025-03-01T00:00:00Z", "dedup_distance": 0.9}),
    );
    assert_eq!(berlin["outcome"], "superseded", "{berlin}");
    assert_eq!(berlin["decisions"][0]["relation"], "updates");
    let history = ok(
        &mut *c,
        "HISTORY",
        json!({"memory_id": lisbon["memory_id"]}),
    );
    assert_eq!(history["memory_id"], berlin["memory_id"]);
    assert_eq!(history["versions"][0]["status"], "current");
    assert_eq!(history["versions"][1]["status"], "replaced");
    assert_eq!(
        history["versions"][1]["valid_to"],
        "2025-03-01T00:00:00.000000Z"
    );
    let then = ok(
        &mut *c,
        "SEARCH",
        json!({"query": "where does Dora live", "user_id": "dora", "as_of": "2024-06-01"}),
    );
    assert_eq!(then["results"][0]["content"], "Dora lives in Lisbon");
    assert_eq!(then["query"], "where does Dora live");
    let now = ok(
        &mut *c,
        "SEARCH",
        json!({"query": "where does Dora live", "user_id": "dora"}),
    );
    assert_eq!(now["count"], 1);
    assert_eq!(now["results"][0]["content"], "Dora lives in Berlin");
    c.fails(
        "STORE",
        json!({"content": "Dora visits Rome", "user_id": "dora", "valid_from": "2025-01-02", "valid_to": "2025-01-01"}),
        "invalid",
    );

    // Tags, snapshots, compaction.
    assert_eq!(
        ok(&mut *c, "GET_UNIQUE_TAGS", json!({}))["tags"],
        json!(["auth", "flaky", "postgres"])
    );
    assert!(
        ok(&mut *c, "GET_CANONICAL_TAGS", json!({}))["count"]
            .as_u64()
            .unwrap()
            >= 3
    );
    assert_eq!(
        ok(&mut *c, "GET_TAG_FREQUENCIES", json!({}))["frequencies"]["flaky"],
        1
    );
    let w = ok(&mut *c, "GET_TAG_WEIGHTS", json!({}))["weights"]["flaky"]
        .as_f64()
        .unwrap();
    assert!((w - 1.0 / 2f64.ln()).abs() < 1e-9, "{w}");
    let snap = ok(&mut *c, "SNAPSHOT_CREATE", json!({"description": "before"}));
    let snapshot_id = snap["snapshot_id"].as_str().unwrap().to_owned();
    let preview = ok(&mut *c, "TAG_NORMALIZE_PREVIEW", json!({"threshold": 0.95}));
    let applied = ok(
        &mut *c,
        "TAG_NORMALIZE_APPLY",
        json!({"preview_id": preview["preview_id"], "snapshot_id": snapshot_id, "threshold": 0.95}),
    );
    assert_eq!(applied["applied_count"], preview["planned_updates"]);
    ok(
        &mut *c,
        "UPDATE",
        json!({"memory_id": flaky_id, "tags": ["cookies"]}),
    );
    let restored = ok(
        &mut *c,
        "SNAPSHOT_RESTORE",
        json!({"snapshot_id": snapshot_id}),
    );
    assert!(restored["restored_count"].as_u64().unwrap() >= 1);
    assert_eq!(
        ok(&mut *c, "GET", json!({"memory_id": flaky_id}))["memory"]["tags"],
        json!(["flaky", "auth"])
    );

    // Two spellings of one fact, stored past semantic dedup: compaction finds them.
    let twin = |text: &str| json!({"content": text, "skip_hooks": ["semantic_dedup"]});
    let a = ok(
        &mut *c,
        "STORE",
        twin("deploys run from the release branch every friday"),
    )["memory_id"]
        .as_u64()
        .unwrap();
    let b = ok(
        &mut *c,
        "STORE",
        twin("Deploys run from the release branch, every Friday."),
    )["memory_id"]
        .as_u64()
        .unwrap();
    let groups = ok(&mut *c, "COMPACT_PREVIEW", json!({"distance": 0.3}));
    assert_eq!(groups["groups"].as_array().unwrap().len(), 1, "{groups}");
    let compacted = ok(
        &mut *c,
        "COMPACT_APPLY",
        json!({"distance": 0.3, "preview_id": groups["preview_id"]}),
    );
    let merged = compacted["merged"][0][0].as_u64().unwrap();
    let mut sources: Vec<u64> = compacted["merged"][0][1]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    sources.sort_unstable();
    assert_eq!(sources, vec![a, b]);
    let undone = ok(&mut *c, "COMPACT_UNDO", json!({"memory_id": merged}));
    assert_eq!(undone["archived"], merged);
    let back = undone["restored"][0].as_u64().unwrap();
    // Mend: a paraphrase merged by a looser rule than the default's comes back, and goes
    // again on undo.
    let mend = ok(&mut *c, "MEND_PREVIEW", json!({}));
    assert_eq!(mend["restore"], json!([]), "nothing yet: {mend}");
    c.fails("STORE", json!({"content": "x", "merge": "all"}), "invalid");
    ok(
        &mut *c,
        "STORE",
        json!({"content": "The nightly backup runs at two in the morning"}),
    );
    let merged = ok(
        &mut *c,
        "STORE",
        json!({"content": "The nightly backup runs at two in the morning on the db host", "merge": "paraphrases"}),
    );
    assert_eq!(merged["outcome"], "merged", "{merged}");
    let mend = ok(&mut *c, "MEND_PREVIEW", json!({}));
    assert_eq!(mend["restore"].as_array().unwrap().len(), 1, "{mend}");
    c.fails("MEND_APPLY", json!({"preview_id": "stale"}), "invalid");
    let mended = ok(
        &mut *c,
        "MEND_APPLY",
        json!({"preview_id": mend["preview_id"]}),
    );
    let copy = mended["restored"][0][1].as_u64().unwrap();
    c.fails("MEND_UNDO", json!({"memory_id": back}), "invalid");
    let undone = ok(&mut *c, "MEND_UNDO", json!({"memory_id": copy}));
    assert_eq!(undone["archived"], copy, "{undone}");
    ok(
        &mut *c,
        "DELETE_BY_MEMORY_ID",
        json!({"memory_id": merged["memory_id"]}),
    );

    let stats = ok(&mut *c, "GET_MEMORY_STATS", json!({}));
    assert_eq!(stats["total_memories"], 4, "{stats}");
    // Categories largest first, as docs/protocol.md says (alphabetically "architecture"
    // would come first).
    for (i, text) in [
        "pool sizing: 20 connections",
        "index the tenant column",
        "cache the plan",
    ]
    .iter()
    .enumerate()
    {
        let category = if i == 0 {
            "architecture"
        } else {
            "performance"
        };
        ok(
            &mut *c,
            "STORE",
            json!({"content": text, "user_id": "cats", "category": category}),
        );
    }
    let cats = ok(&mut *c, "GET_MEMORY_STATS", json!({"user_id": "cats"}));
    let order: Vec<(&str, u64)> = cats["categories"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_u64().unwrap()))
        .collect();
    assert_eq!(order, [("performance", 2), ("architecture", 1)], "{cats}");
    ok(&mut *c, "DELETE_USER", json!({"user_id": "cats"}));
    let cleared = ok(
        &mut *c,
        "CLEAR_OLD_MEMORIES",
        json!({"days_old": 1, "max_to_keep": 100}),
    );
    assert_eq!(cleared["deleted_count"], 0, "nothing is a day old");
    ok(&mut *c, "DELETE_BY_MEMORY_ID", json!({"memory_id": back}));
    c.fails("GET", json!({"memory_id": back}), "not_found");

    // Users, agents, sessions, messages, knowledge, the MemFuse query.
    assert_eq!(
        ok(
            &mut *c,
            "CREATE_USER",
            json!({"user_id": "ada", "name": "Ada"})
        )["user"]["name"],
        "Ada"
    );
    ok(
        &mut *c,
        "CREATE_AGENT",
        json!({"user_id": "ada", "agent_id": "helper"}),
    );
    ok(
        &mut *c,
        "CREATE_SESSION",
        json!({"user_id": "ada", "session_id": "s1", "agent_id": "helper", "name": "laptop"}),
    );
    assert_eq!(
        ok(&mut *c, "GET_USER", json!({"user_id": "ada"}))["user"]["id"],
        "ada"
    );
    assert_eq!(
        ok(
            &mut *c,
            "GET_AGENT",
            json!({"user_id": "ada", "agent_id": "helper"})
        )["agent"]["id"],
        "helper"
    );
    assert_eq!(
        ok(
            &mut *c,
            "GET_SESSION",
            json!({"user_id": "ada", "session_id": "s1"})
        )["session"]["agent_id"],
        "helper"
    );
    let users: Vec<String> = ok(&mut *c, "LIST_USERS", json!({}))["users"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(users, vec!["ada", "default", "dora"]);
    assert_eq!(
        ok(&mut *c, "LIST_AGENTS", json!({"user_id": "ada"}))["count"],
        1
    );
    assert_eq!(
        ok(&mut *c, "LIST_SESSIONS", json!({"user_id": "ada"}))["count"],
        1
    );
    let msgs = ok(
        &mut *c,
        "ADD_MESSAGES",
        json!({"user_id": "ada", "session_id": "s1", "messages": [
        {"role": "user", "content": "my laptop will not boot after the update"},
        {"role": "assistant", "content": "hold the power button for ten seconds"}]}),
    );
    assert_eq!(msgs["count"], 2);
    // A turn carries its own time (its valid_from); valid_after / valid_before filter by it.
    let dated = ok(
        &mut *c,
        "ADD_MESSAGES",
        json!({"user_id": "ada", "session_id": "s1", "messages": [
        {"role": "user", "content": "last year my laptop ran linux", "time": "2025-03-01"}]}),
    );
    let old_turn = dated["memory_ids"][0].clone();
    let then = ok(
        &mut *c,
        "SEARCH",
        json!({"user_id": "ada", "query": "laptop", "mode": "keyword", "valid_before": "2026-01-01"}),
    );
    assert_eq!(then["count"], 1, "{then}");
    assert_eq!(then["results"][0]["id"], old_turn);
    let bad = c.fails(
        "ADD_MESSAGES",
        json!({"user_id": "ada", "session_id": "s1", "messages": [
        {"role": "user", "content": "never stored"}, {"role": "user", "content": "x", "time": "yesterday"}]}),
        "invalid",
    );
    assert_eq!(bad["field"], "messages[1].time", "{bad}");
    let none = ok(
        &mut *c,
        "SEARCH",
        json!({"user_id": "ada", "query": "never stored", "mode": "text"}),
    );
    assert_eq!(none["count"], 0, "an error means nothing was stored");
    let know = ok(
        &mut *c,
        "ADD_KNOWLEDGE",
        json!({"user_id": "ada", "items": ["ada prefers dark mode", "ada prefers dark mode"]}),
    );
    assert_eq!(know["count"], 2);
    assert_eq!(know["stored"], 1, "a fact stored twice is one: {know}");
    let q = ok(
        &mut *c,
        "QUERY",
        json!({"user_id": "ada", "query": "laptop boot", "session_id": "s1", "store_type": "keyword"}),
    );
    assert_eq!(q["status"], "success");
    assert_eq!(q["status_code"], 200);
    assert_eq!(q["data"]["results"][0]["metadata"]["scope"], "in_session");
    let q404 = c.fails(
        "QUERY",
        json!({"user_id": "nobody", "query": "x"}),
        "not_found",
    );
    assert_eq!(q404["status_code"], 404);
    assert_eq!(q404["errors"][0]["field"], "user_id");
    assert_eq!(
        ok(
            &mut *c,
            "DELETE_SESSION",
            json!({"user_id": "ada", "session_id": "s1"})
        )["deleted_records"],
        3,
        "the session's three turns"
    );
    ok(
        &mut *c,
        "DELETE_AGENT",
        json!({"user_id": "ada", "agent_id": "helper"}),
    );
    assert_eq!(
        ok(&mut *c, "DELETE_USER", json!({"user_id": "ada"}))["deleted_records"],
        1
    );
    c.fails("GET_USER", json!({"user_id": "ada"}), "not_found");

    let stats = ok(&mut *c, "STATS", json!({}));
    assert!(stats["requests"].as_u64().unwrap() > 50, "{stats}");
    assert!(
        stats["errors_by_code"]["not_found"].as_u64().unwrap() >= 4,
        "{stats}"
    );
    assert!(stats["latency"]["p99_us"].as_u64().unwrap() > 0);
    assert_eq!(stats["store"]["memories"], 4, "{stats}"); // and dora's current city
    assert!(stats["store"]["bytes_on_disk"].as_u64().unwrap() > 0);
    assert_eq!(stats["connections"]["open"], 1);

    // PURGE: a deleted memory's text leaves every file of the store.
    let gone = ok(
        &mut *c,
        "STORE",
        json!({"content": "purge-me-xyzzy, a note to forget"}),
    )["memory_id"]
        .as_u64()
        .unwrap();
    ok(&mut *c, "DELETE", json!({"memory_id": gone}));
    let purged = ok(&mut *c, "PURGE", json!({}));
    assert!(
        purged["purged"]["removed_files"].as_u64().unwrap() > 0,
        "{purged}"
    );
    let store_dir = dir.join("store");
    for entry in std::fs::read_dir(&store_dir).unwrap() {
        let path = entry.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        assert!(
            !bytes.windows(14).any(|w| w == b"purge-me-xyzzy"),
            "{} still holds the purged text",
            path.display()
        );
    }

    // BACKUP: a checked copy that opens as the store; refused into a non-empty or relative
    // directory.
    let backup_dir = dir.join("backup");
    let b = ok(
        &mut *c,
        "BACKUP",
        json!({"dest": backup_dir.display().to_string()}),
    );
    assert_eq!(b["backup"]["check"]["clean"], true, "{b}");
    assert!(b["backup"]["files"].as_u64().unwrap() >= 2, "{b}");
    assert!(backup_dir.join("IDENTITY").exists());
    for dest in [backup_dir.display().to_string(), "relative/dir".to_owned()] {
        let r = c.call("BACKUP", json!({ "dest": dest }));
        assert_eq!(r["code"], "invalid", "{r}");
    }
    assert!(!std::path::Path::new("relative").exists());
    // EXPORT: every record, ids and lineage kept, to a new file; IMPORT of it into this store
    // (which gave those ids out) adds nothing; a file that exists, or a relative path, is
    // refused with nothing written.
    let export_file = dir.join("export.jsonl");
    let e = ok(
        &mut *c,
        "EXPORT",
        json!({"dest": export_file.display().to_string()}),
    );
    assert!(e["export"]["live"].as_u64().unwrap() >= 1, "{e}");
    let written = std::fs::read(&export_file).unwrap();
    for dest in [
        export_file.display().to_string(),
        "relative.jsonl".to_owned(),
    ] {
        let r = c.call("EXPORT", json!({ "dest": dest }));
        assert_eq!(r["code"], "invalid", "{r}");
    }
    assert_eq!(
        std::fs::read(&export_file).unwrap(),
        written,
        "a refused EXPORT wrote nothing"
    );
    assert!(!std::path::Path::new("relative.jsonl").exists());
    let i = ok(
        &mut *c,
        "IMPORT",
        json!({"source": export_file.display().to_string()}),
    );
    assert_eq!(i["import"]["format"], "export", "{i}");
    assert_eq!(i["import"]["stored"], 0, "everything is here already: {i}");
    let r = c.call("IMPORT", json!({"source": "/nonexistent/file.jsonl"}));
    assert_eq!(r["code"], "invalid", "{r}");
    // A file that is not text past its first lines: refused whole, nothing stored from it.
    let half_text = dir.join("half.jsonl");
    let mut bytes = b"{\"content\": \"a line before the damage\"}\n".to_vec();
    bytes.extend([0xff, 0xfe, b'\n']);
    std::fs::write(&half_text, bytes).unwrap();
    let r = c.call("IMPORT", json!({"source": half_text.display().to_string()}));
    assert_eq!(r["code"], "invalid", "{r}");
    assert!(r["message"].as_str().unwrap().contains("line 2"), "{r}");
    let found = ok(
        &mut *c,
        "SEARCH",
        json!({"query": "a line before the damage", "mode": "keyword"}),
    );
    assert_eq!(found["results"].as_array().unwrap().len(), 0, "{found}");
    // MAINTENANCE: pause, report, resume.
    let m = ok(&mut *c, "MAINTENANCE", json!({"paused": true}));
    assert_eq!(m["maintenance"]["paused"], true, "{m}");
    assert_eq!(
        ok(&mut *c, "STATS", json!({}))["store"]["maintenance"]["paused"],
        true
    );
    let m = ok(&mut *c, "MAINTENANCE", json!({"paused": false}));
    assert_eq!(m["maintenance"]["paused"], false, "{m}");
    let r = c.call("MAINTENANCE", json!({"paused": "yes"}));
    assert_eq!(r["code"], "invalid", "{r}");

    // Items: a JSON value under a key; a put of a live key replaces it; reading by key is
    // not an access; a search of kind item finds them; deleting a missing key changes nothing.
    let put = ok(
        &mut *c,
        "PUT_ITEM",
        json!({"user_id": "lg.users", "key": "k1", "value": {"likes": ["tea", 2]}, "text": "likes tea"}),
    );
    assert!(put["replaced"].is_null(), "{put}");
    let again = ok(
        &mut *c,
        "PUT_ITEM",
        json!({"user_id": "lg.users", "key": "k1", "value": {"likes": "coffee"}, "text": "likes coffee"}),
    );
    assert_eq!(again["replaced"], put["memory_id"], "{again}");
    assert_eq!(again["created_at"], put["created_at"], "{again}");
    let got = ok(
        &mut *c,
        "GET_ITEM",
        json!({"user_id": "lg.users", "key": "k1"}),
    );
    assert_eq!(
        (&got["found"], &got["item"]["value"], &got["item"]["kind"]),
        (&json!(true), &json!({"likes": "coffee"}), &json!("item")),
        "{got}"
    );
    assert_eq!(got["item"]["access_count"], 0, "{got}");
    ok(
        &mut *c,
        "PUT_ITEM",
        json!({"user_id": "lg.users", "key": "k2", "value": {}, "text": "likes tea"}),
    );
    let listed = ok(
        &mut *c,
        "LIST_ITEMS",
        json!({"user_id": "lg.users", "prefix": "k"}),
    );
    assert_eq!(listed["count"], 2, "{listed}");
    assert_eq!(listed["items"][1]["key"], "k2", "{listed}");
    let found = ok(
        &mut *c,
        "SEARCH",
        json!({"user_id": "lg.users", "query": "likes tea", "kind": "item"}),
    );
    assert_eq!(found["count"], 2, "{found}");
    let users = ok(&mut *c, "LIST_ITEM_USERS", json!({}));
    assert_eq!(users["users"], json!([{"user_id": "lg.users", "items": 2}]));
    for bad in [
        json!({"key": "k", "value": [1], "text": "t"}),
        json!({"key": "", "value": {}, "text": "t"}),
        json!({"key": "k", "value": {}}),
    ] {
        let r = c.call("PUT_ITEM", bad.clone());
        assert_eq!(r["code"], "invalid", "{bad} -> {r}");
    }
    for key in ["k1", "k2"] {
        let d = ok(
            &mut *c,
            "DELETE_ITEM",
            json!({"user_id": "lg.users", "key": key}),
        );
        assert_eq!(d["deleted"], true, "{d}");
    }
    let d = ok(
        &mut *c,
        "DELETE_ITEM",
        json!({"user_id": "lg.users", "key": "k1"}),
    );
    assert_eq!(d["deleted"], false, "{d}");
    let none = ok(
        &mut *c,
        "GET_ITEM",
        json!({"user_id": "lg.users", "key": "k1"}),
    );
    assert_eq!(
        (&none["found"], &none["item"]),
        (&json!(false), &Value::Null)
    );

    // REEMBED: the store moves from the hashing embedder to MiniLM while it serves; unknown
    // embedders and its own are refused with nothing changed.
    for (embedder, code) in [("word2vec", "invalid"), ("hashing", "invalid")] {
        let r = c.call("REEMBED", json!({ "embedder": embedder }));
        assert_eq!(r["code"], code, "{r}");
    }
    assert_eq!(c.call("REEMBED", json!({}))["code"], "invalid");
    let r = ok(&mut *c, "REEMBED", json!({"cancel": true}));
    assert_eq!(r["reembed"]["cancelled"], false, "nothing was staged: {r}");
    let r = ok(&mut *c, "REEMBED", json!({"embedder": "minilm"}));
    assert_eq!(
        r["reembed"]["model"], "sentence-transformers/all-MiniLM-L6-v2",
        "{r}"
    );
    assert!(r["reembed"]["records"].as_u64().unwrap() >= 4, "{r}");
    let stats = ok(&mut *c, "STATS", json!({}));
    assert_eq!(
        stats["store"]["embedder"],
        "sentence-transformers/all-MiniLM-L6-v2"
    );
    assert_eq!(stats["store"]["embedding_dimensions"], 384);
    assert!(stats["store"]["reembedding"].is_null(), "{stats}");
    assert_eq!(stats["store"]["memories"], 4, "{stats}");

    assert_eq!(ok(&mut *c, "QUIT", json!({}))["reply"], "BYE");
    assert!(c.closed());

    let all: BTreeSet<&str> = COMMANDS.iter().map(|c| c.name).collect();
    let used: BTreeSet<&str> = used.iter().map(String::as_str).collect();
    assert_eq!(
        all.difference(&used).collect::<Vec<_>>(),
        Vec::<&&str>::new(),
        "commands the test never ran"
    );
}

/// Arguments a command refuses, each naming its field, with nothing run: the same over
/// every transport (the line protocol's test above, HTTP's below).
fn bad_arguments_are_refused_naming_the_field(c: &mut dyn Caller) {
    let unknown = c.fails("SERACH", json!({"query": "x"}), "unknown_command");
    assert_eq!(unknown["did_you_mean"][0], "SEARCH_MEMORIES");
    let typo = c.fails(
        "SEARCH",
        json!({"query": "x", "catgory": "security"}),
        "invalid",
    );
    assert_eq!(
        typo["field"],
        json!(["catgory"]),
        "a typo never silently drops a filter"
    );
    assert_eq!(
        c.fails("SEARCH", json!({"query": "x", "limit": "ten"}), "invalid")["field"],
        "limit"
    );
    assert_eq!(
        c.fails(
            "SEARCH",
            json!({"query": "x", "limit": 51}),
            "limit_exceeded"
        )["field"],
        "limit"
    );
    assert_eq!(
        c.fails("GET", json!({"memory_id": -3}), "invalid")["field"],
        "memory_id"
    );
    // The IVF probe: a number of lists or a recall, checked, never both.
    assert_eq!(
        c.fails("SEARCH", json!({"query": "x", "nprobe": 0}), "invalid")["field"],
        "nprobe"
    );
    assert_eq!(
        c.fails("SEARCH", json!({"query": "x", "recall": 1.5}), "invalid")["field"],
        "recall"
    );
    assert_eq!(
        c.fails(
            "SEARCH",
            json!({"query": "x", "nprobe": 4, "recall": 0.9}),
            "invalid"
        )["field"],
        "recall"
    );
    assert_eq!(
        c.ok("SEARCH", json!({"query": "x", "recall": 0.99}))["count"],
        0
    );
    assert_eq!(
        c.ok("SEARCH", json!({"query": "x", "nprobe": 8}))["count"],
        0
    );
    let index = &c.ok("STATS", json!({}))["store"]["index"];
    assert_eq!(index["builds"], 0);
    assert_eq!(index["segments"], json!([]));
    assert_eq!(
        c.fails(
            "SEARCH",
            json!({"query": "x", "created_after": "last tuesday"}),
            "invalid"
        )["field"],
        "created_after"
    );
    c.fails(
        "STORE",
        json!({"content": "x".repeat(10_001)}),
        "limit_exceeded",
    );
}

#[test]
fn bad_arguments_are_refused_alike_over_http() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("store"), &[]);
    bad_arguments_are_refused_naming_the_field(&mut Http::connect(server.http.unwrap()));
}

/// The table name of a command or alias.
pub fn canonical(name: &str) -> String {
    amberdb_server::commands::find(name).map_or_else(|| name.to_owned(), |c| c.name.to_owned())
}

#[test]
fn pipelined_requests_are_answered_in_order_and_tags_come_back() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("store"), &[]);
    let mut c = server.client();
    let mut batch = String::new();
    for i in 0..300 {
        if i % 3 == 0 {
            batch.push_str(&format!(
                "@req-{i} STORE {{\"content\": \"pipelined note number {i}\"}}\n"
            ));
        } else if i % 3 == 1 {
            batch.push_str("PING\n");
        } else {
            batch.push_str(&format!("@req-{i} SEARCH {{\"query\": \"number {}\", \"mode\": \"text\", \"deduplicate\": false}}\n", i - 2));
        }
    }
    c.send(batch.as_bytes());
    let mut stored = Vec::new();
    for i in 0..300 {
        let r = c.recv().unwrap();
        assert_eq!(r["ok"], true, "{r}");
        match i % 3 {
            0 => {
                assert_eq!(r["tag"], format!("req-{i}"));
                stored.push(r["memory_id"].as_u64().unwrap());
            }
            1 => assert_eq!(r["reply"], "PONG"),
            _ => {
                // Requests run in order: the store just before this search is visible to it.
                assert_eq!(r["tag"], format!("req-{i}"));
                let hits: Vec<u64> = r["results"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|h| h["id"].as_u64().unwrap())
                    .collect();
                assert!(hits.contains(stored.last().unwrap()), "{r}");
            }
        }
    }
    assert_eq!(stored.len(), 100);
    assert!(stored.windows(2).all(|w| w[0] < w[1]));
}

#[test]
fn bad_input_gets_a_clear_error_and_the_connection_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("store"), &["--max-line-bytes", "16384"]);
    let mut c = server.client();
    // Malformed JSON, a non-object, an unknown command, an unknown or mistyped argument,
    // a missing one, an out-of-range one, binary garbage, a bad tag: each one error reply.
    c.fails("SEARCH", json!(null), "bad_request");
    c.send(b"SEARCH {\"query\": \"unterminated\n");
    assert_eq!(c.recv().unwrap()["code"], "bad_request");
    c.send(b"STORE [\"content\"]\n");
    assert_eq!(c.recv().unwrap()["code"], "bad_request");
    bad_arguments_are_refused_naming_the_field(&mut c);
    c.send(b"\x00\x9f\x92\x96\xff garbage \xfe\n");
    assert_eq!(c.recv().unwrap()["code"], "bad_request");
    c.send(b"@bad/tag PING\n");
    assert_eq!(c.recv().unwrap()["code"], "bad_request");
    // Blank lines get no reply; the next request does.
    c.send(b"\n\r\n   \nPING\n");
    assert_eq!(c.recv().unwrap()["reply"], "PONG");

    // A line over the limit: one error, skipped to its newline, then the next line runs.
    let mut long = b"STORE {\"content\": \"".to_vec();
    long.extend(std::iter::repeat_n(b'a', 30_000));
    long.extend_from_slice(b"\"}\nPING\n");
    c.send(&long);
    let too_long = c.recv().unwrap();
    assert_eq!(too_long["code"], "line_too_long", "{too_long}");
    assert_eq!(c.recv().unwrap()["reply"], "PONG");
    // The same with the long line arriving in pieces slower than one read.
    c.send(&long[..10_000]);
    std::thread::sleep(Duration::from_millis(50));
    c.send(&long[10_000..]);
    assert_eq!(c.recv().unwrap()["code"], "line_too_long");
    assert_eq!(c.recv().unwrap()["reply"], "PONG");
    c.ok(
        "STORE",
        json!({"content": "still storing after all of that"}),
    );

    // A half-closed socket: the last line without its newline still counts, every line is
    // answered, then the server closes.
    let mut half = server.client();
    half.send(b"PING\n@last STORE {\"content\": \"sent just before shutdown(SHUT_WR)\"}");
    half.shutdown_write();
    assert_eq!(half.recv().unwrap()["reply"], "PONG");
    let last = half.recv().unwrap();
    assert_eq!(
        (last["ok"].clone(), last["tag"].clone()),
        (json!(true), json!("last")),
        "{last}"
    );
    assert!(half.closed());
    let stats = c.ok("STATS", json!({}));
    assert!(
        stats["errors_by_code"]["bad_request"].as_u64().unwrap() >= 5,
        "{stats}"
    );
    assert_eq!(stats["errors_by_code"]["line_too_long"], 2);
    still_serving(&server);
}

#[test]
fn connection_limits_and_timeouts_close_only_the_offender() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        &dir.path().join("store"),
        &[
            "--max-connections",
            "4",
            "--idle-timeout",
            "2",
            "--slow-client-timeout",
            "1",
        ],
    );
    let mut held: Vec<Client> = (0..4).map(|_| server.client()).collect();
    for c in &mut held {
        c.ok("PING", json!({}));
    }
    // The fifth is told why and closed; the four keep working.
    let mut fifth = server.client();
    let refused = fifth.recv().unwrap();
    assert_eq!(refused["code"], "too_many_connections", "{refused}");
    assert!(fifth.closed());
    for c in &mut held {
        c.ok("PING", json!({}));
    }
    // A slow client: half a line, then nothing for longer than the slow-client timeout.
    held[0].send(b"SEARCH {\"query\": ");
    let started = Instant::now();
    let slow = held[0].recv().unwrap();
    assert_eq!(
        (slow["code"].clone(), slow["timeout"].clone()),
        (json!("timeout"), json!("slow_client_timeout")),
        "{slow}"
    );
    assert!(started.elapsed() >= Duration::from_millis(900));
    assert!(held[0].closed());
    // An idle client: nothing at all for the idle timeout. Meanwhile another one is busy.
    let idle_started = Instant::now();
    let mut busy = held.pop().unwrap();
    while idle_started.elapsed() < Duration::from_millis(2500) {
        busy.ok("PING", json!({}));
        std::thread::sleep(Duration::from_millis(200));
    }
    let idle = held[1].recv().unwrap();
    assert_eq!(idle["timeout"], "idle_timeout", "{idle}");
    assert!(held[1].closed());
    // Slots freed by closed connections are reusable.
    let mut again = server.client();
    again.ok("PING", json!({}));
    let stats = again.ok("STATS", json!({}));
    assert_eq!(stats["connections"]["refused"], 1, "{stats}");
    assert!(
        stats["errors_by_code"]["timeout"].as_u64().unwrap() >= 2,
        "{stats}"
    );
}

#[test]
fn a_pipeline_of_large_replies_arrives_whole_and_in_order() {
    // 100 pipelined requests whose replies are ~190 KB each: the server sends them a megabyte
    // or so at a time (the rest of the batch runs after), never all 19 MB at once.
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("store"), &[]);
    let mut c = server.client();
    for i in 0..20 {
        let content = format!("{i} {}", "long note text ".repeat(600));
        c.ok(
            "STORE",
            json!({"content": content, "skip_hooks": ["semantic_dedup"]}),
        );
    }
    let mut batch = String::new();
    for i in 0..100 {
        batch.push_str(&format!("@r{i} RECENT {{\"limit\": 20}}\n"));
    }
    batch.push_str("@last PING\n");
    c.send(batch.as_bytes());
    for i in 0..100 {
        let r = c.recv().unwrap();
        assert_eq!(r["tag"], format!("r{i}"));
        assert_eq!(r["memories"].as_array().unwrap().len(), 20);
    }
    assert_eq!(c.recv().unwrap()["tag"], "last");
}

#[test]
fn a_client_streaming_lines_split_across_reads_is_not_a_slow_client() {
    // Every read ends in the middle of a line, for longer than the slow-client timeout: the
    // client is making progress, so it must not be cut off.
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("store"), &["--slow-client-timeout", "1"]);
    let mut c = server.client();
    let started = Instant::now();
    let mut sent = 0;
    c.send(b"PI");
    while started.elapsed() < Duration::from_millis(2500) {
        c.send(b"NG\nPI");
        sent += 1;
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(c.recv().unwrap()["reply"], "PONG", "after {sent} lines");
    }
    c.send(b"NG\n");
    assert_eq!(c.recv().unwrap()["reply"], "PONG");
}

#[test]
fn tokens_authenticate_bind_users_and_never_reach_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(
        &tokens,
        "# user-bound tokens\nada ada-secret-7f3a\nbob bob-secret-91c2\n",
    )
    .unwrap();
    let server = Server::start_with_env(
        &dir.path().join("store"),
        &["--token-file", tokens.to_str().unwrap()],
        &[("AMBERDB_TOKEN", "admin-secret-55e1")],
    );
    let mut anon = server.client();
    assert_eq!(
        anon.call("PING", json!({}))["reply"],
        "PONG",
        "PING needs no token"
    );
    anon.fails("SEARCH", json!({"query": "x"}), "unauthorized");
    anon.fails("AUTH", json!({"token": "guess-1"}), "unauthorized");
    anon.send(b"AUTH guess-2\n");
    assert_eq!(anon.recv().unwrap()["code"], "unauthorized");
    anon.send(b"AUTH guess-3\n");
    assert_eq!(anon.recv().unwrap()["code"], "unauthorized");
    assert!(anon.closed(), "three wrong tokens close the connection");

    let mut admin = server.client();
    admin.send(b"AUTH admin-secret-55e1\n");
    assert_eq!(admin.recv().unwrap()["ok"], true);
    for user in ["ada", "bob"] {
        admin.ok("CREATE_USER", json!({"user_id": user}));
    }
    let admins = admin.ok(
        "STORE",
        json!({"content": "default user's note", "user_id": "default"}),
    )["memory_id"]
        .as_u64()
        .unwrap();

    let mut ada = server.client();
    let authed = ada.ok("AUTH", json!({"token": "ada-secret-7f3a"}));
    assert_eq!(authed["user_id"], "ada");
    let note = ada.ok(
        "STORE",
        json!({"content": "ada's own note about the cache"}),
    )["memory_id"]
        .as_u64()
        .unwrap();
    assert_eq!(
        admin.ok("GET", json!({"memory_id": note}))["memory"]["user_id"],
        "ada",
        "no user_id means the bound user"
    );
    ada.ok(
        "STORE",
        json!({"content": "named explicitly", "user_id": "ada"}),
    );
    ada.fails(
        "STORE",
        json!({"content": "into bob's namespace", "user_id": "bob"}),
        "forbidden",
    );
    ada.fails(
        "SEARCH",
        json!({"query": "note", "user_id": "default"}),
        "forbidden",
    );
    ada.fails("GET", json!({"memory_id": admins}), "not_found");
    ada.fails("DELETE", json!({"memory_id": admins}), "not_found");
    ada.fails(
        "UPDATE",
        json!({"memory_id": admins, "tags": ["mine"]}),
        "not_found",
    );
    ada.fails("STATS", json!({}), "forbidden");
    ada.fails("PURGE", json!({}), "forbidden");
    ada.fails("BACKUP", json!({"dest": "/tmp/ada-backup"}), "forbidden");
    ada.fails("MAINTENANCE", json!({"paused": true}), "forbidden");
    ada.fails("REEMBED", json!({"embedder": "minilm"}), "forbidden");
    ada.fails("DELETE_USER", json!({"user_id": "bob"}), "forbidden");
    // Every other way to another user's records: the library's scoped handle refuses each.
    for command in ["HISTORY", "LINEAGE", "COMPACT_UNDO"] {
        ada.fails(command, json!({"memory_id": admins}), "not_found");
    }
    ada.fails(
        "FEEDBACK",
        json!({"memory_id": admins, "feedback": "harmful"}),
        "not_found",
    );
    ada.fails(
        "QUERY",
        json!({"query": "note", "user_id": "default"}),
        "forbidden",
    );
    ada.fails(
        "CREATE_SESSION",
        json!({"session_id": "s", "user_id": "bob"}),
        "forbidden",
    );
    ada.fails("CREATE_USER", json!({"user_id": "mallory"}), "forbidden");
    ada.fails("GET_USER", json!({"user_id": "default"}), "forbidden");
    for command in ["GET_UNIQUE_TAGS", "GET_TAG_FREQUENCIES", "GET_TAG_WEIGHTS"] {
        ada.fails(command, json!({"user_id": "default"}), "forbidden");
    }
    ada.fails(
        "ADD_KNOWLEDGE",
        json!({"items": ["x"], "user_id": "default"}),
        "forbidden",
    );
    let users = ada.ok("LIST_USERS", json!({}));
    assert_eq!(users["users"].as_array().unwrap().len(), 1, "{users}");
    let found = ada.ok("SEARCH", json!({"query": "note", "mode": "text"}));
    assert!(
        found["results"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["user_id"] == "ada"),
        "{found}"
    );
    assert_eq!(
        admin.ok("GET", json!({"memory_id": admins}))["memory"]["content"],
        "default user's note",
        "nothing of another user was touched"
    );

    let (status, log) = server.terminate();
    assert!(status.success(), "{log}");
    for secret in [
        "admin-secret-55e1",
        "ada-secret-7f3a",
        "bob-secret-91c2",
        "guess-1",
        "guess-2",
    ] {
        assert!(!log.contains(secret), "the log holds a token: {log}");
    }
    assert!(log.contains("AUTH with a wrong token"), "{log}");
}

#[test]
fn sigterm_finishes_what_was_read_makes_it_durable_and_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let server = Server::start(&store, &[]);
    let mut c = server.client();
    let mut batch = String::new();
    for i in 0..200 {
        batch.push_str(&format!(
            "STORE {{\"content\": \"written right before SIGTERM {i}\"}}\n"
        ));
    }
    c.send(batch.as_bytes());
    // The first reply means the batch is being run; SIGTERM lands while it runs.
    assert_eq!(c.recv().unwrap()["ok"], true);
    let (status, log) = server.terminate();
    assert!(status.success(), "{log}");
    assert!(log.contains("stopped cleanly"), "{log}");
    let mut answered = 1;
    while let Some(r) = c.recv() {
        assert_eq!(r["ok"], true, "{r}");
        answered += 1;
    }
    assert_eq!(
        answered, 200,
        "every request read before shutdown is answered"
    );
    // Checkpointed: the next open replays nothing.
    let server = Server::start(&store, &[]);
    assert!(
        server.log().contains("replayed_frames: 0"),
        "{}",
        server.log()
    );
    let mut c = server.client();
    assert_eq!(c.ok("GET_MEMORY_STATS", json!({}))["total_memories"], 200);
}

/// 64 clients at once, each storing its own notes and finding each by text and by id while
/// the others write; every result is checked.
#[test]
fn sixty_four_concurrent_clients_store_and_search_with_checked_results() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("store"), &[]);
    let addr = server.addr;
    let notes = 15;
    let threads: Vec<_> = (0..64)
        .map(|i| {
            std::thread::spawn(move || {
                let mut c = Client::connect(addr);
                let user = format!("team-{}", i % 8);
                let mut mine = Vec::new();
                for j in 0..notes {
                    let marker = format!("marker{i}x{j}");
                    let r = c.ok("STORE", json!({"content": format!("client {i} note {j} {marker}"), "user_id": user, "skip_hooks": ["semantic_dedup"]}));
                    let id = r["memory_id"].as_u64().unwrap();
                    let found = c.ok("SEARCH", json!({"query": marker, "mode": "text", "user_id": user}));
                    let hits: Vec<u64> = found["results"].as_array().unwrap().iter().map(|h| h["id"].as_u64().unwrap()).collect();
                    assert_eq!(hits, vec![id], "client {i} note {j}");
                    let kw = c.ok("SEARCH", json!({"query": marker, "mode": "keyword", "user_id": user}));
                    assert_eq!(kw["results"][0]["id"], id);
                    mine.push(id);
                }
                for (j, id) in mine.iter().enumerate() {
                    let m = c.ok("GET", json!({"memory_id": id}));
                    assert_eq!(m["memory"]["content"], format!("client {i} note {j} marker{i}x{j}"));
                    assert_eq!(m["memory"]["user_id"], user);
                }
                mine
            })
        })
        .collect();
    let mut all: Vec<u64> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    let n = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), n, "every store got its own id");
    assert_eq!(n, 64 * notes);
    let mut c = server.client();
    for t in 0..8 {
        let stats = c.ok("GET_MEMORY_STATS", json!({"user_id": format!("team-{t}")}));
        assert_eq!(stats["total_memories"], 8 * notes, "{stats}");
    }
    let stats = c.ok("STATS", json!({}));
    assert_eq!(stats["errors"], 0, "{stats}");
    assert_eq!(stats["connections"]["total"], 65);
}

/// A client written the way a user would: Python's standard library, no helper of ours.
#[test]
fn a_python_standard_library_client_works() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("store"), &[]);
    let (ip, port) = (server.addr.ip().to_string(), server.addr.port().to_string());
    // The system's python3 (Debian: apt install python3): the standard library is all it uses.
    crate::support::run_python(
        Path::new("python3"),
        "stdlib_client.py",
        &[ip.as_ref(), port.as_ref()],
        &[],
        "python client: all checks passed",
    );
}
