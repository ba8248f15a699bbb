//! Switching from another system's JSON (`foreign.rs`): `amberdb import --from mem0` of what
//! its `get_all()` returns (`tests/fixtures/mem0_get_all.json`, in the shape mem0's docs show:
//! `results` with `id`, `memory`, `hash`, `metadata`, `categories`, times and scopes; graph
//! `relations` beside), and `--from agent-memory-server` of its memory records
//! (`tests/fixtures/agent_memory_server_memories.json`, a search reply's shape).

use crate::support::{run_on, text};
use amberdb::{Kind, SearchRequest, Store, StoreOptions, Timestamp};

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/mem0_get_all.json"
);
const AMS_FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/agent_memory_server_memories.json"
);

#[test]
fn a_mem0_export_imports_as_items_keeping_ids_times_scopes_and_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("store");
    let out = run_on(&["import", "--from", "mem0", FIXTURE], &data);
    let (so, se) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "two memories fail: {so}{se}");
    assert!(
        so.contains("5 memories read: 3 memories stored, 0 already there"),
        "{so}"
    );
    assert!(so.contains("2 failed"), "{so}");
    assert!(se.contains("memory 3:") && se.contains("\"id\""), "{se}");
    assert!(
        se.contains("memory 5:") && se.contains("created_at"),
        "{se}"
    );
    assert!(se.contains("1 graph relations not imported"), "{se}");

    let store = Store::open(&data, StoreOptions::hashing()).unwrap();
    let cricket = store
        .get_item(
            Some("memories.alice"),
            "13efe83b-a8df-4ec0-814e-428d6e8451eb",
        )
        .unwrap()
        .expect("kept under its mem0 id, in LangMem's namespace (\"memories\", \"alice\")");
    assert_eq!(cricket.content, "Likes to play cricket on weekends");
    assert_eq!(cricket.kind, Kind::Item);
    assert_eq!(
        cricket.created_at,
        Timestamp::parse_rfc3339("2024-07-26T17:44:36.275141Z").unwrap(),
        "mem0's offset time, kept"
    );
    assert_eq!(
        cricket.updated_at, cricket.created_at,
        "updated_at null: never changed"
    );
    let value: serde_json::Value =
        serde_json::from_str(&cricket.item.as_ref().unwrap().value).unwrap();
    assert_eq!(
        value,
        serde_json::json!({
            "id": "13efe83b-a8df-4ec0-814e-428d6e8451eb",
            "content": "Likes to play cricket on weekends",
            "hash": "87bcddeb-fe45-4353-bc22-15a841c50308",
            "metadata": {"category": "hobbies", "source": "chat"},
            "categories": ["hobbies", "sports"],
        }),
        "the text as LangMem reads it, and every field not mapped onto the record"
    );
    let diet = store
        .get_item(
            Some("memories.alice"),
            "2d6f0a4e-3c1b-4f8e-9a57-0b1c2d3e4f50",
        )
        .unwrap()
        .unwrap();
    assert_eq!(
        (diet.agent_id.as_deref(), diet.session_id.as_deref()),
        (Some("diet-coach"), Some("run-42"))
    );
    assert_eq!(
        diet.updated_at,
        Timestamp::parse_rfc3339("2024-09-12T17:30:00Z").unwrap()
    );
    let concise = store
        .get_item(
            Some("memories.default"),
            "7c9e6679-7425-40de-944b-e07fc1f90ae7",
        )
        .unwrap()
        .expect("no user_id: the default user's namespace");
    assert!(concise.content.contains("ünïcode"));
    // Found by meaning as any memory, and among the user's items.
    let mut req = SearchRequest::new("what sport does she play?");
    req.user_id = Some("memories.alice".into());
    req.kind = Some(Kind::Item);
    assert_eq!(store.search(&req).unwrap().results.len(), 2);
    drop(store);

    // A second import adds nothing.
    let again = run_on(&["import", "--from", "mem0", FIXTURE], &data);
    assert!(
        text(&again.stdout).contains("0 memories stored, 3 already there"),
        "{}",
        text(&again.stdout)
    );
    // Without --from the file is known by its shape, and said so.
    let detected = run_on(&["import", FIXTURE], &data);
    assert!(
        text(&detected.stderr).contains("holds mem0's JSON")
            && text(&detected.stdout).contains("0 memories stored, 3 already there"),
        "{}{}",
        text(&detected.stdout),
        text(&detected.stderr)
    );
    // --namespace "" keeps mem0's plain users.
    let plain = dir.path().join("plain");
    run_on(
        &["import", "--from", "mem0", "--namespace", "", FIXTURE],
        &plain,
    );
    let store = Store::open(&plain, StoreOptions::hashing()).unwrap();
    assert!(
        store
            .get_item(Some("alice"), "13efe83b-a8df-4ec0-814e-428d6e8451eb")
            .unwrap()
            .is_some()
    );
    drop(store);
    // --user sends memories without a user to it.
    let other = dir.path().join("other");
    let out = run_on(
        &["import", "--from", "mem0", "--user", "carol", FIXTURE],
        &other,
    );
    assert!(
        text(&out.stdout).contains("3 memories stored"),
        "{}",
        text(&out.stdout)
    );
    let store = Store::open(&other, StoreOptions::hashing()).unwrap();
    assert!(
        store
            .get_item(
                Some("memories.carol"),
                "7c9e6679-7425-40de-944b-e07fc1f90ae7"
            )
            .unwrap()
            .is_some()
    );
}

#[test]
fn a_file_that_is_not_mem0s_is_refused_with_nothing_stored() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("store");
    for (name, body) in [
        ("object.json", r#"{"memories": []}"#),
        ("text.json", "not json at all"),
        ("number.json", "42"),
    ] {
        let file = dir.path().join(name);
        std::fs::write(&file, body).unwrap();
        let out = run_on(&["import", "--from", "mem0", file.to_str().unwrap()], &data);
        assert_ne!(out.status.code(), Some(0), "{name}");
        assert!(
            text(&out.stderr).contains(name),
            "{name}: {}",
            text(&out.stderr)
        );
    }
    let out = run_on(
        &["import", "--from", "mem0", "--working-dir", "/tmp"],
        &data,
    );
    assert_eq!(out.status.code(), Some(2), "clap refuses the mix");
    let out = run_on(&["import", "--from", "letta", FIXTURE], &data);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("mem0"), "{}", text(&out.stderr));
    if data.exists() {
        let store = Store::open(&data, StoreOptions::hashing()).unwrap();
        assert_eq!(store.stats().memories, 0);
    }
}

#[test]
fn agent_memory_server_records_import_as_items_keeping_access_counts_and_topics() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("store");
    let out = run_on(
        &["import", "--from", "agent-memory-server", AMS_FIXTURE],
        &data,
    );
    let (so, se) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{so}{se}");
    assert!(so.contains("3 memories read: 2 memories stored"), "{so}");
    assert!(se.contains("memory 3:") && se.contains("content"), "{se}");
    let store = Store::open(&data, StoreOptions::hashing()).unwrap();
    let seats = store
        .get_item(Some("u-7"), "01JN7Q5X1B2C3D4E5F6G7H8J9K")
        .unwrap()
        .unwrap();
    assert_eq!(seats.content, "User prefers window seats on long flights");
    assert_eq!(seats.session_id.as_deref(), Some("trip-planning"));
    assert_eq!(seats.access_count, 3);
    assert_eq!(
        (seats.created_at, seats.last_accessed_at),
        (
            Timestamp::parse_rfc3339("2025-02-01T10:00:00Z").unwrap(),
            Timestamp::parse_rfc3339("2025-03-01T10:00:00Z").unwrap()
        )
    );
    let value: serde_json::Value =
        serde_json::from_str(&seats.item.as_ref().unwrap().value).unwrap();
    assert_eq!(value["namespace"], "travel");
    assert_eq!(
        value["topics"],
        serde_json::json!(["travel", "preferences"])
    );
    assert_eq!(value["memory_type"], "semantic");
    assert!(value.get("text").is_none() && value.get("access_count").is_none());
    drop(store);
    let again = run_on(
        &["import", "--from", "agent-memory-server", AMS_FIXTURE],
        &data,
    );
    assert!(
        text(&again.stdout).contains("0 memories stored, 2 already there"),
        "{}",
        text(&again.stdout)
    );
    // mem0's file is not agent-memory-server's: its list has another name.
    let out = run_on(&["import", "--from", "agent-memory-server", FIXTURE], &data);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        text(&out.stderr).contains("\"memories\""),
        "{}",
        text(&out.stderr)
    );
}
