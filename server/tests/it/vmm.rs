//! Switching from vector-memory-mcp: `amberdb import` of its SQLite store, and `amberdb mcp
//! --working-dir` importing it on the first start. The database is made here with
//! vector-memory-mcp's schema (`../shared/reference/peers.md` §1.1); its `vec0` table is
//! declared in the schema as sqlite-vec declares it, without the extension (amberdb must not
//! need it: it never reads that table).

use crate::support::{run_on, text};
use amberdb::{Category, Store, StoreOptions, Timestamp};
use std::path::Path;
use std::process::{Command, Stdio};

const SCHEMA: &str = include_str!("../fixtures/vector_memory_mcp.sql");

/// (content, category, tags JSON, created_at, updated_at, access_count), in id order.
const ROWS: [(&str, &str, &str, &str, &str, i64); 5] = [
    (
        "pytest -x stops at the first failure",
        "tool-usage",
        r#"["python", "testing"]"#,
        "2025-01-15T10:30:00.123456+00:00",
        "2025-02-01T08:00:00+00:00",
        4,
    ),
    // Naive times (UTC), as Python's isoformat() and SQLite's CURRENT_TIMESTAMP write them.
    (
        "the login test was flaky: two tests shared a cookie",
        "bug-fix",
        "[]",
        "2025-03-01T12:00:00",
        "2025-03-02 09:15:00",
        0,
    ),
    (
        "a row whose category is not one",
        "nonsense",
        "[]",
        "2025-03-03T00:00:00+00:00",
        "2025-03-03T00:00:00+00:00",
        0,
    ),
    (
        "a row whose tags are not JSON",
        "other",
        "not json",
        "2025-03-04T00:00:00+00:00",
        "2025-03-04T00:00:00+00:00",
        0,
    ),
    // Older than the first, and the same text: amberdb's exact dedup keeps one.
    (
        "pytest -x stops at the first failure",
        "tool-usage",
        "[]",
        "2024-12-01T00:00:00+00:00",
        "2024-12-01T00:00:00+00:00",
        1,
    ),
];

fn make_vmm_store(working_dir: &Path) -> std::path::PathBuf {
    let db = working_dir.join("memory").join("vector_memory.db");
    std::fs::create_dir_all(db.parent().unwrap()).unwrap();
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.execute_batch(SCHEMA).unwrap();
    // The vec0 virtual table, as sqlite-vec records it, without loading sqlite-vec.
    conn.execute_batch(
        "PRAGMA writable_schema = ON;
         INSERT INTO sqlite_master (type, name, tbl_name, rootpage, sql) VALUES
           ('table', 'memory_vectors', 'memory_vectors', 0,
            'CREATE VIRTUAL TABLE memory_vectors USING vec0(embedding float[384])');
         PRAGMA writable_schema = OFF;",
    )
    .unwrap();
    for (i, (content, category, tags, created, updated, count)) in ROWS.iter().enumerate() {
        conn.execute(
            "INSERT INTO memory_metadata (content_hash, content, category, tags, created_at, updated_at, access_count) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            rusqlite::params![format!("hash{i}"), content, category, tags, created, updated, count],
        )
        .unwrap();
    }
    db
}

fn t(s: &str) -> Timestamp {
    Timestamp::parse_rfc3339(s).unwrap()
}

#[test]
fn import_keeps_contents_categories_tags_times_and_access_counts() {
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path().join("project");
    let db = make_vmm_store(&work);
    let before = std::fs::read(&db).unwrap();
    let store = tmp.path().join("store");
    let w = work.to_str().unwrap();

    let out = run_on(&["import", "--working-dir", w], &store);
    assert_eq!(out.status.code(), Some(1), "a row failed: {out:?}");
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("5 rows: 2 memories stored, 1 already there"),
        "{stdout}"
    );
    assert!(stdout.contains("2 failed"), "{stdout}");
    // Ids are kept (the store was empty); the duplicate names the memory that holds its text.
    assert!(stdout.contains("row id 5 is memory 1 here"), "{stdout}");
    assert_eq!(stdout.matches(" is memory ").count(), 1, "{stdout}");
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("row id 3") && stderr.contains("nonsense"),
        "{stderr}"
    );
    assert!(
        stderr.contains("row id 4") && stderr.contains("tags"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read(&db).unwrap(),
        before,
        "read-only: the file is unchanged"
    );

    {
        let s = Store::open(&store, StoreOptions::hashing()).unwrap();
        let mut all: Vec<_> = s
            .memory_ids()
            .into_iter()
            .map(|id| s.get(id).unwrap())
            .collect();
        all.sort_by_key(|m| m.id);
        assert_eq!(all.len(), 2);
        // Every row keeps its id (issue #45, item 7): an id an agent remembered names the same
        // memory after the switch. The later copy of the pytest note (id 5) is the duplicate.
        let ids: Vec<u64> = all.iter().map(|m| m.id.0).collect();
        assert_eq!(ids, [1, 2]);
        let pytest = &all[0];
        assert_eq!(pytest.content, "pytest -x stops at the first failure");
        assert_eq!(pytest.created_at, t("2025-01-15T10:30:00.123456Z"));
        assert_eq!(pytest.access_count, 4);
        let flaky = &all[1];
        assert_eq!(flaky.category, Category::BugFix);
        assert!(flaky.tags.is_empty());
        assert_eq!(flaky.created_at, t("2025-03-01T12:00:00Z"));
        assert_eq!(flaky.updated_at, t("2025-03-02T09:15:00Z"));
        assert_eq!(flaky.last_accessed_at, flaky.updated_at);
        assert_eq!(flaky.valid_from, flaky.created_at);
        assert_eq!(flaky.user_id, "default");
    }

    // The file itself, into another user; a second import adds nothing.
    let out = run_on(&["import", db.to_str().unwrap(), "--user", "ann"], &store);
    assert!(
        text(&out.stdout).contains("2 memories stored, 1 already there"),
        "{out:?}"
    );
    // Into a store that used ids 1 and 2 already: new ids, each listed.
    for line in [
        "row id 1 is memory 3 here",
        "row id 2 is memory 4 here",
        "row id 5 is memory 3 here",
    ] {
        assert!(text(&out.stdout).contains(line), "{line}: {out:?}");
    }
    let again = run_on(&["import", db.to_str().unwrap(), "--user", "ann"], &store);
    assert!(
        text(&again.stdout).contains("0 memories stored, 3 already there"),
        "{again:?}"
    );
    let s = Store::open(&store, StoreOptions::hashing()).unwrap();
    let ann = s.list_recent(Some("ann"), 10).unwrap();
    assert_eq!(ann.len(), 2);
    assert_eq!(ann[0].created_at, t("2025-03-01T12:00:00Z"), "newest first");
    let tagged = ann
        .iter()
        .find(|m| m.content.starts_with("pytest"))
        .unwrap();
    assert_eq!(tagged.created_at, t("2025-01-15T10:30:00.123456Z"));
    assert_eq!(tagged.id.0, 3);
}

#[test]
fn bad_import_arguments_change_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let out = run_on(&["import"], &store);
    assert_eq!(out.status.code(), Some(2), "an input is required: {out:?}");
    let jsonl = tmp.path().join("x.jsonl");
    std::fs::write(&jsonl, "{\"content\": \"one\"}\n").unwrap();
    let out = run_on(
        &["import", jsonl.to_str().unwrap(), "--user", "ann"],
        &store,
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(text(&out.stderr).contains("--user is for a vector-memory-mcp store"));
    let out = run_on(
        &["import", "--working-dir", tmp.path().to_str().unwrap()],
        &store,
    );
    assert_eq!(
        out.status.code(),
        Some(2),
        "no vector_memory.db there: {out:?}"
    );
    assert!(text(&out.stderr).contains("vector_memory.db"), "{out:?}");
    let not_vmm = tmp.path().join("other.db");
    rusqlite::Connection::open(&not_vmm)
        .unwrap()
        .execute_batch("CREATE TABLE t (x);")
        .unwrap();
    let out = run_on(&["import", not_vmm.to_str().unwrap()], &store);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(text(&out.stderr).contains("memory_metadata"), "{out:?}");
    if store.exists() {
        let s = Store::open(&store, StoreOptions::hashing()).unwrap();
        assert_eq!(s.stats().memories, 0);
    }
}

/// An MCP client configured for vector-memory-mcp changes its command to `amberdb mcp
/// --working-dir DIR`: the first start brings the old memories along, once.
#[test]
fn mcp_imports_the_old_store_on_its_first_start_only() {
    use std::io::Write;
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path().join("project");
    make_vmm_store(&work);
    let start = || {
        let mut child = Command::new(env!("CARGO_BIN_EXE_amberdb"))
            .args(["mcp", "--embedder", "hashing", "--working-dir"])
            .arg(&work)
            .env("AMBERDB_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let call = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_memory_stats","arguments":{}}}"#;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(format!("{call}\n").as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{out:?}");
        let reply: serde_json::Value =
            serde_json::from_str(text(&out.stdout).lines().next().unwrap()).unwrap();
        (
            reply["result"]["structuredContent"]["total_memories"]
                .as_u64()
                .unwrap(),
            text(&out.stderr),
        )
    };
    let (total, stderr) = start();
    assert_eq!(total, 2, "{stderr}");
    assert!(stderr.contains("imported vector-memory-mcp's"), "{stderr}");
    assert!(stderr.contains("row id 3"), "{stderr}");
    let record: serde_json::Value = serde_json::from_slice(
        &std::fs::read(work.join("memory").join("amberdb-import.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(record["stored"], 2);
    let (total, stderr) = start();
    assert_eq!(total, 2);
    assert!(!stderr.contains("imported"), "once only: {stderr}");
    assert!(
        work.join("memory")
            .join("amberdb")
            .join("IDENTITY")
            .is_file()
    );
}
