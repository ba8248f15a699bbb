//! The inspector page in a real browser: a seeded store behind a token, Debian's headless
//! Chromium driven through chromium-driver by tests/python/inspector_browser.py (Selenium,
//! from the SDK venv), every view clicked through and asserted on, a screenshot of each saved.
//! Looking changes nothing: the log's last sequence and every access count are the same after.
//!
//! The screenshots go to `target/inspector/` (`AMBERDB_INSPECTOR_SHOTS` overrides);
//! `scripts/inspector-screenshots` copies them into docs/img for the README.

use crate::http::Http;
use crate::support::{Server, run_python, sdk_python};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

const TOKEN: &str = "inspect-s3cret";

fn chromium_tools() -> (PathBuf, PathBuf) {
    let chromium =
        std::env::var_os("AMBERDB_CHROMIUM").map_or("/usr/bin/chromium".into(), PathBuf::from);
    let driver = std::env::var_os("AMBERDB_CHROMEDRIVER")
        .map_or("/usr/bin/chromedriver".into(), PathBuf::from);
    for tool in [&chromium, &driver] {
        assert!(
            tool.exists(),
            "{} is missing: run scripts/browser-tools (scripts/test does) to install Debian's chromium and chromium-driver",
            tool.display()
        );
    }
    (chromium, driver)
}

fn ok(h: &mut Http, command: &str, args: Value) -> Value {
    let r = h.post(&format!("/v1/commands/{command}"), args);
    assert_eq!(
        r.status,
        200,
        "{command}: {}",
        String::from_utf8_lossy(&r.body)
    );
    r.json()
}

/// A store with two users, a session of chat turns, notes in several categories, a fact whose
/// value was replaced, and a restatement that a search folds. Returns the replaced fact's id.
fn seed(h: &mut Http) -> u64 {
    ok(
        h,
        "CREATE_USER",
        json!({"user_id": "ada", "name": "Ada Lovelace"}),
    );
    ok(h, "CREATE_USER", json!({"user_id": "bob"}));
    let note = |h: &mut Http, user: &str, content: &str, category: &str, tags: &[&str]| {
        ok(
            h,
            "STORE_MEMORY",
            json!({"user_id": user, "content": content, "category": category, "tags": tags}),
        )["memory_id"]
            .as_u64()
            .unwrap()
    };
    let fact = |h: &mut Http, content: &str, from: &str| {
        ok(
            h,
            "STORE_MEMORY",
            json!({"user_id": "ada", "content": content, "category": "tool-usage", "tags": ["editor"],
                   "valid_from": from, "dedup_distance": 0.9}),
        )
    };
    let old = fact(h, "Ada's editor is Vim", "2025-01-06")["memory_id"]
        .as_u64()
        .unwrap();
    note(
        h,
        "ada",
        "The deploy script needs the staging key from the vault",
        "architecture",
        &["deploy"],
    );
    note(
        h,
        "ada",
        "Flaky test fixed by pinning the clock in the scheduler",
        "bug-fix",
        &["tests"],
    );
    note(
        h,
        "ada",
        "Profiling showed the JSON encoder dominates request time",
        "performance",
        &[],
    );
    note(
        h,
        "bob",
        "Bob prefers tabs over spaces",
        "other",
        &["style"],
    );
    let newer = fact(h, "Ada's editor is Helix", "2026-06-01");
    assert_eq!(newer["outcome"], "superseded", "{newer}");
    let new = newer["memory_id"].as_u64().unwrap();
    assert_ne!(old, new);
    // The same statement said twice in other punctuation: a search folds one into the other.
    for text in [
        "I open every file in my editor with line numbers on",
        "I open every file in my editor, with line numbers on!",
    ] {
        ok(
            h,
            "STORE_MEMORY",
            json!({"user_id": "ada", "content": text, "category": "tool-usage", "tags": ["editor"], "skip_hooks": ["semantic_dedup"]}),
        );
    }
    ok(
        h,
        "CREATE_SESSION",
        json!({"user_id": "ada", "session_id": "trip", "name": "Planning the Lisbon trip"}),
    );
    ok(
        h,
        "ADD_MESSAGES",
        json!({"user_id": "ada", "session_id": "trip", "messages": [
            {"role": "user", "content": "I need a flight to Lisbon on the 14th"},
            {"role": "assistant", "content": "There is a direct flight at 09:40 from Amsterdam"},
            {"role": "user", "content": "Book a window seat, and I am vegetarian"},
        ]}),
    );
    let history = ok(h, "HISTORY", json!({"memory_id": new}));
    let statuses: Vec<&str> = history["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["status"].as_str().unwrap())
        .collect();
    assert_eq!(
        statuses,
        ["current", "replaced"],
        "the seed has a replaced value: {history}"
    );
    new
}

/// What looking must not change: the log's last sequence, and each record's access count.
fn untouched(h: &mut Http) -> (Value, Vec<(u64, u64)>) {
    let seq = ok(h, "STATS", json!({}))["store"]["last_seq"].clone();
    let mut counts = Vec::new();
    for user in ["ada", "bob"] {
        let page = ok(
            h,
            "LIST_RECENT_MEMORIES",
            json!({"user_id": user, "limit": 50, "archived": "all"}),
        );
        for m in page["memories"].as_array().unwrap() {
            counts.push((
                m["id"].as_u64().unwrap(),
                m["access_count"].as_u64().unwrap(),
            ));
        }
    }
    (seq, counts)
}

fn shots_dir() -> PathBuf {
    std::env::var_os("AMBERDB_INSPECTOR_SHOTS").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/inspector"),
        PathBuf::from,
    )
}

#[test]
fn the_inspector_shows_every_view_in_a_real_browser_and_changes_nothing() {
    let (chromium, driver) = chromium_tools();
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, format!("{TOKEN}\n")).unwrap();
    // The real model, so the scores and folds on the screenshots are what a user sees.
    let server = Server::start(
        &dir.path().join("store"),
        &[
            "--token-file",
            tokens.to_str().unwrap(),
            "--embedder",
            "minilm",
        ],
    );
    let addr = server.http.expect("the server serves HTTP");
    let mut h = Http::connect(addr);
    h.token = Some(TOKEN.into());
    let fact = seed(&mut h);
    let before = untouched(&mut h);
    let shots = shots_dir();
    let url = format!("http://{addr}");
    let fact = fact.to_string();
    let args = ["--url", &url, "--token", TOKEN, "--fact", &fact];
    let mut argv: Vec<&std::ffi::OsStr> = args.iter().map(std::ffi::OsStr::new).collect();
    argv.extend([std::ffi::OsStr::new("--shots"), shots.as_os_str()]);
    let chromium = chromium.to_string_lossy().into_owned();
    let driver = driver.to_string_lossy().into_owned();
    let out = run_python(
        &sdk_python(),
        "inspector_browser.py",
        &argv,
        &[
            ("AMBERDB_CHROMIUM", &chromium),
            ("AMBERDB_CHROMEDRIVER", &driver),
        ],
        "inspector: passed",
    );
    eprintln!("{out}");
    assert_eq!(untouched(&mut h), before, "looking changed the store");
    for view in ["users", "sessions", "memories", "memory", "search", "stats"] {
        assert!(
            shots.join(format!("inspector-{view}.png")).exists(),
            "no screenshot of {view}"
        );
    }
}

#[test]
fn the_page_and_its_files_are_served_with_a_strict_policy_and_no_token() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, format!("{TOKEN}\n")).unwrap();
    let server = Server::start(
        &dir.path().join("store"),
        &["--token-file", tokens.to_str().unwrap()],
    );
    let mut h = Http::connect(server.http.unwrap());
    for (path, kind) in [
        ("/", "text/html"),
        ("/inspector/inspector.js", "text/javascript"),
        ("/inspector/inspector.css", "text/css"),
    ] {
        let r = h.get(path);
        assert_eq!(r.status, 200, "{path} needs no token: it holds no data");
        assert!(
            r.header("content-type").unwrap().starts_with(kind),
            "{path}"
        );
        let policy = r.header("content-security-policy").unwrap();
        assert!(policy.contains("connect-src 'self'") && policy.contains("frame-ancestors 'none'"));
        assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    }
    // The data behind it still needs the token.
    assert_eq!(h.post("/v1/commands/LIST_USERS", json!({})).status, 401);
    assert_eq!(h.get("/inspector/nothing.js").status, 404);
    // A page's own writes are refused like any other: the page is not a way around the token.
    assert_eq!(h.post("/", json!({})).status, 405);
}

#[test]
fn memories_list_by_kind_category_tags_session_validity_and_archive_over_the_query_string() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("store"), &[]);
    let mut h = Http::connect(server.http.unwrap());
    let fact = seed(&mut h);
    let ids = |h: &mut Http, query: &str| -> Vec<u64> {
        let r = h.get(&format!("/v1/memories?user_id=ada&limit=50&{query}"));
        assert_eq!(
            r.status,
            200,
            "{query}: {}",
            String::from_utf8_lossy(&r.body)
        );
        let body = r.json();
        let ids: Vec<u64> = body["memories"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["id"].as_u64().unwrap())
            .collect();
        assert_eq!(body["total"], ids.len(), "{query}");
        ids
    };
    let live = ids(&mut h, "");
    assert!(live.contains(&fact) && live.len() == 9, "{live:?}");
    assert_eq!(ids(&mut h, "kind=message").len(), 3);
    assert_eq!(ids(&mut h, "session_id=trip").len(), 3);
    assert_eq!(ids(&mut h, "category=tool-usage&tags=EDITOR").len(), 3);
    assert_eq!(ids(&mut h, "tags=deploy,tests").len(), 2);
    // The replaced value: archived, its validity ended; nothing live has ended.
    let archived = ids(&mut h, "archived=archived");
    assert_eq!(archived.len(), 1);
    assert_eq!(ids(&mut h, "valid=false&archived=all"), archived);
    assert!(ids(&mut h, "valid=false").is_empty());
    assert_eq!(ids(&mut h, "archived=all").len(), 10);
    // A bad filter is refused, naming it, and lists nothing.
    for bad in [
        "archived=both",
        "valid=maybe",
        "kind=note",
        "category=nonsense",
    ] {
        let r = h.get(&format!("/v1/memories?user_id=ada&{bad}"));
        assert_eq!(r.status, 400, "{bad}: {}", String::from_utf8_lossy(&r.body));
        let name = bad.split('=').next().unwrap();
        assert!(String::from_utf8_lossy(&r.body).contains(name), "{bad}");
    }
}
