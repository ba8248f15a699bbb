//! Frozen fixtures of every format version, each written once by `cargo run -p amberdb
//! --example write_fixture` (by the build of that version) and never regenerated:
//! `tests/fixtures/v<N>/{store,torn,corrupt}` plus `expected.tsv` (id, user, tags, content of
//! every live record); version 2 adds `lineage.tsv` (a live id and the ids it supersedes),
//! version 3 `entities.tsv` (every user, agent and session: kind, user, id, name, agent);
//! version 8 `chat/` and `chat.tsv` (turns of every role, a delta checkpoint); version 11
//! `requests/` and `requests.tsv` (writes that carried request ids, and their kept replies);
//! version 12 `partition/` and `partition.tsv`; version 13 (checkpoint v14) `crc.tsv` (each
//! store's position and running CRC).

use amberdb::KernelError;
use amberdb::{
    EngineError, EntityKind, MemoryId, SearchRequest, Store, StoreOptions, Strategy, Timestamp,
};
use std::path::Path;

fn copy_of(name: &str) -> tempfile::TempDir {
    copy_of_version(1, name)
}

fn copy_of_version(version: u16, name: &str) -> tempfile::TempDir {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("tests/fixtures/v{version}"))
        .join(name);
    let dst = tempfile::tempdir().unwrap();
    for e in
        std::fs::read_dir(&src).unwrap_or_else(|e| panic!("fixture {} missing: {e}", src.display()))
    {
        let e = e.unwrap();
        std::fs::copy(e.path(), dst.path().join(e.file_name())).unwrap();
    }
    dst
}

fn expected() -> Vec<(u64, String, String, String)> {
    expected_of(1)
}

fn expected_of(version: u16) -> Vec<(u64, String, String, String)> {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(format!("tests/fixtures/v{version}/expected.tsv")),
    )
    .unwrap();
    text.lines()
        .map(|l| {
            let f: Vec<&str> = l.splitn(4, '\t').collect();
            (
                f[0].parse().unwrap(),
                f[1].to_owned(),
                f[2].to_owned(),
                f[3].to_owned(),
            )
        })
        .collect()
}

#[test]
fn version_1_store_opens_with_every_record() {
    let dir = copy_of("store");
    let store = Store::open(dir.path(), StoreOptions::hashing()).unwrap();
    let report = store.open_report().clone();
    assert!(report.checkpoint_seq.is_some(), "fixture has a checkpoint");
    assert!(report.replayed_frames > 0, "fixture has a log tail");
    let want = expected();
    assert_eq!(store.stats().memories, want.len());
    for (id, user, tags, content) in &want {
        let m = store.get(MemoryId(*id)).unwrap();
        assert_eq!(
            (&m.user_id, m.tags.join(","), &m.content),
            (user, tags.clone(), content)
        );
    }
    let exact = SearchRequest::new(&want[0].3)
        .limit(1)
        .strategy(Strategy::Similarity)
        .without_hooks();
    let hit = &store.search(&exact).unwrap().results[0];
    assert_eq!(hit.memory.id, MemoryId(want[0].0));
}

#[test]
fn version_1_torn_copy_opens_without_its_last_frame() {
    let dir = copy_of("torn");
    let store = Store::open(dir.path(), StoreOptions::hashing()).unwrap();
    assert!(store.open_report().truncated_tail.is_some());
    let want = expected();
    assert_eq!(
        store.stats().memories,
        want.len() - 1,
        "the torn copy loses exactly its last store"
    );
}

#[test]
fn version_1_corrupt_copy_is_reported() {
    let dir = copy_of("corrupt");
    let err = Store::open(dir.path(), StoreOptions::hashing()).unwrap_err();
    assert!(
        matches!(err, EngineError::Kernel(KernelError::Corrupted { .. })),
        "{err}"
    );
}

/// Opens a v2+ store fixture and checks its records, lineage, canonical tags and counts.
fn check_v2_store(version: u16) -> (tempfile::TempDir, Store) {
    let dir = copy_of_version(version, "store");
    let store = Store::open(dir.path(), StoreOptions::hashing()).unwrap();
    let report = store.open_report().clone();
    assert!(
        report.checkpoint_seq.is_some() && report.replayed_frames > 0,
        "{report:?}"
    );
    let want = expected_of(version);
    assert_eq!(store.stats().memories, want.len());
    for (id, user, tags, content) in &want {
        let m = store.get(MemoryId(*id)).unwrap();
        assert_eq!(
            (&m.user_id, m.tags.join(","), &m.content),
            (user, tags.clone(), content)
        );
    }
    let lineage = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(format!("tests/fixtures/v{version}/lineage.tsv")),
    )
    .unwrap();
    for line in lineage.lines() {
        let (id, sources) = line.split_once('\t').unwrap();
        let m = store.get(MemoryId(id.parse().unwrap())).unwrap();
        assert_eq!(format!("{:?}", m.supersedes), sources);
        // Every source is in the archive (from the checkpoint's aux section or the log).
        assert_eq!(store.lineage(m.id).unwrap().len(), m.supersedes.len());
        for s in &m.supersedes {
            assert!(matches!(store.get(*s), Err(EngineError::Archived { .. })));
        }
    }
    let canonical = store.canonical_tags(None).unwrap();
    for t in [
        "rust",
        "nextest",
        "testing",
        "storage",
        "durability",
        "keys",
    ] {
        assert!(canonical.contains(&t.to_owned()), "{t} in {canonical:?}");
    }
    let accessed = store.get(MemoryId(3)).unwrap();
    assert_eq!((accessed.access_count, accessed.helpful_count), (1, 1));
    (dir, store)
}

#[test]
fn version_2_store_opens_with_its_archive_lineage_tags_and_snapshot() {
    let (_dir, store) = check_v2_store(2);
    // Entities did not exist in v2: the records' users and sessions are registered from them.
    let users: Vec<String> = store
        .list_entities(EntityKind::User, None)
        .unwrap()
        .into_iter()
        .map(|e| e.id)
        .collect();
    assert_eq!(users, ["alice", "default"]);
    let s = store
        .get_entity(EntityKind::Session, Some("alice"), "s-1")
        .unwrap();
    assert_eq!(s.name, "s-1");
    assert!(matches!(
        store.get_entity(EntityKind::Session, None, "s-1"),
        Err(EngineError::EntityNotFound {
            field: "session_id",
            ..
        })
    ));
}

#[test]
fn version_3_store_opens_with_its_entities_and_without_the_deleted_user() {
    let (_dir, store) = check_v2_store(3);
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/v3/entities.tsv"),
    )
    .unwrap();
    let mut listed = String::new();
    for e in store.all_entities() {
        listed.push_str(&format!(
            "{}\t{}\t{}\t{}\t{}\n",
            e.kind,
            e.user_id,
            e.id,
            e.name,
            e.agent_id.unwrap_or_default()
        ));
    }
    let sorted = |t: &str| {
        let mut lines: Vec<String> = t.lines().map(str::to_owned).collect();
        lines.sort();
        lines
    };
    assert_eq!(sorted(&listed), sorted(&text));
    assert!(matches!(
        store.get_entity(EntityKind::User, None, "bob"),
        Err(EngineError::EntityNotFound {
            field: "user_id",
            ..
        })
    ));
    // The messages in s-1 recorded the session's agent.
    let m = store.get(MemoryId(11)).unwrap();
    assert_eq!(m.agent_id.as_deref(), Some("helper"));
}

#[test]
fn version_2_torn_copy_opens_without_its_last_frame() {
    let dir = copy_of_version(2, "torn");
    let store = Store::open(dir.path(), StoreOptions::hashing()).unwrap();
    assert!(store.open_report().truncated_tail.is_some());
    assert_eq!(store.stats().memories, expected_of(2).len() - 1);
}

#[test]
fn version_2_corrupt_copy_is_reported() {
    let dir = copy_of_version(2, "corrupt");
    let err = Store::open(dir.path(), StoreOptions::hashing()).unwrap_err();
    assert!(
        matches!(err, EngineError::Kernel(KernelError::Corrupted { .. })),
        "{err}"
    );
}

#[test]
fn version_3_torn_copy_opens_without_its_last_frame() {
    let dir = copy_of_version(3, "torn");
    let store = Store::open(dir.path(), StoreOptions::hashing()).unwrap();
    assert!(store.open_report().truncated_tail.is_some());
    assert_eq!(store.stats().memories, expected_of(3).len() - 1);
    // The deletion of bob came before the torn frame: it stands.
    assert!(store.get_entity(EntityKind::User, None, "bob").is_err());
}

#[test]
fn version_3_corrupt_copy_is_reported() {
    let dir = copy_of_version(3, "corrupt");
    let err = Store::open(dir.path(), StoreOptions::hashing()).unwrap_err();
    assert!(
        matches!(err, EngineError::Kernel(KernelError::Corrupted { .. })),
        "{err}"
    );
}

#[test]
fn version_4_store_opens_with_validity_history_and_as_of() {
    let (_dir, store) = check_v2_store(4);
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/v4/validity.tsv"),
    )
    .unwrap();
    let mut listed = String::new();
    for head in [MemoryId(9), MemoryId(12)] {
        for v in store.history(head).unwrap().versions {
            listed.push_str(&format!(
                "{}\t{}\t{}\t{}\t{}\t{}\n",
                v.memory.id,
                v.status,
                v.memory.decision.map_or("-", |d| d.reason()),
                v.memory.valid_from.to_rfc3339(),
                v.memory
                    .valid_to
                    .map_or("-".to_owned(), Timestamp::to_rfc3339),
                v.memory.content
            ));
        }
    }
    assert_eq!(listed, text);
    // Searches of the present see the current value; as_of sees the value of that moment.
    let city = |as_of: Option<&str>| {
        let mut r = SearchRequest::new("where does Dora live").user("dora");
        r.as_of = as_of.map(|t| Timestamp::parse_rfc3339(t).unwrap());
        r.hooks.count_access = Some(false);
        let hits = store.search(&r).unwrap();
        hits.results
            .iter()
            .map(|h| h.memory.content.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(city(None), ["Dora lives in Berlin"]);
    assert_eq!(city(Some("2023-01-01T00:00:00Z")), ["Dora lives in Paris"]);
    assert_eq!(city(Some("2024-06-01T00:00:00Z")), ["Dora lives in Lisbon"]);
    assert!(city(Some("2020-01-01T00:00:00Z")).is_empty());
}

#[test]
fn version_5_store_opens_and_its_forgotten_archive_stays_forgotten() {
    check_v2_store(5);
    let dir = copy_of_version(5, "forget");
    let store = Store::open(dir.path(), StoreOptions::hashing()).unwrap();
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/v5/forget.tsv"),
    )
    .unwrap();
    let mut counts = std::collections::BTreeMap::new();
    for line in text.lines() {
        let (id, status) = line.split_once('\t').unwrap();
        let got = match store.get(MemoryId(id.parse().unwrap())) {
            Ok(_) => "live",
            Err(EngineError::Archived { .. }) => "archived",
            Err(EngineError::NotFound { .. }) => "forgotten",
            Err(e) => panic!("{id}: {e}"),
        };
        assert_eq!(got, status, "memory {id}");
        *counts.entry(status).or_insert(0) += 1;
    }
    // Forgotten before the checkpoint and in the log after it.
    assert_eq!(counts["forgotten"], 4);
    assert_eq!(counts["archived"], 2);
    assert_eq!(store.stats().memories, 6);
}

#[test]
fn version_6_store_opens_and_its_reembedded_copy_opens_with_the_new_embedder_only() {
    check_v2_store(6);
    let dir = copy_of_version(6, "reembed");
    match Store::open(dir.path(), StoreOptions::hashing()) {
        Err(EngineError::EmbedderMismatch {
            stored_model,
            stored_dim,
            ..
        }) => assert_eq!(
            (stored_model.as_str(), stored_dim),
            ("amberdb-hashing-v1-64", 64)
        ),
        other => panic!("opened with the embedder it was made with: {other:?}"),
    }
    let new = std::sync::Arc::new(amberdb::HashingEmbedder::with_dim(64));
    let store = Store::open(dir.path(), StoreOptions::new(new.clone())).unwrap();
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/v6/reembed.tsv"),
    )
    .unwrap();
    let mut n = 0;
    for line in text.lines() {
        let (id, content) = line.split_once('\t').unwrap();
        let id = MemoryId(id.parse().unwrap());
        assert_eq!(store.get(id).unwrap().content, content);
        let want = amberdb::Embedder::embed(&*new, content).unwrap();
        assert_eq!(store.vector(id).unwrap(), want, "memory {id}");
        n += 1;
    }
    assert_eq!((n, store.stats().memories), (8, 8));
}

#[test]
fn version_7_store_opens_with_its_items_replaced_and_deleted_by_key() {
    check_v2_store(7);
    let dir = copy_of_version(7, "items");
    let store = Store::open(dir.path(), StoreOptions::hashing()).unwrap();
    assert!(
        store.open_report().replayed_frames > 0,
        "fixture has a log tail"
    );
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/v7/items.tsv"),
    )
    .unwrap();
    let mut n = 0;
    for line in text.lines() {
        let f: Vec<&str> = line.splitn(4, '\t').collect();
        let m = store
            .get_item(Some(f[0]), f[1])
            .unwrap()
            .unwrap_or_else(|| panic!("item {line} missing"));
        let item = m.item.as_ref().unwrap();
        assert_eq!((item.value.as_str(), m.content.as_str()), (f[2], f[3]));
        n += 1;
    }
    assert_eq!(n, 4);
    for (user, key) in [("prefs.bob", "gone"), ("prefs.bob", "drink")] {
        assert_eq!(store.get_item(Some(user), key).unwrap(), None, "{key}");
    }
    let users: Vec<(String, usize)> = store
        .item_users()
        .into_iter()
        .map(|u| (u.user_id, u.items))
        .collect();
    assert_eq!(users, [("prefs.alice".into(), 2), ("prefs.bob".into(), 2)]);
    // A put of a key the fixture holds still replaces it.
    let item = amberdb::Item {
        key: "food".into(),
        value: "{}".into(),
    };
    let put = store.put_item(Some("prefs.bob"), item, "bob eats").unwrap();
    assert!(put.replaced.is_some());
}

#[test]
fn version_8_store_opens_with_its_tool_turns_and_its_delta() {
    check_v2_store(8);
    let dir = copy_of_version(8, "chat");
    let store = Store::open(dir.path(), StoreOptions::hashing()).unwrap();
    let report = store.open_report();
    assert_eq!(
        report.checkpoint_delta_of,
        Some(1),
        "the newest checkpoint is a delta"
    );
    assert!(report.replayed_frames > 0, "fixture has a log tail");
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/v8/chat.tsv"),
    )
    .unwrap();
    let mut tools = 0;
    for line in text.lines() {
        let f: Vec<&str> = line.splitn(3, '\t').collect();
        let m = store.get(MemoryId(f[0].parse().unwrap())).unwrap();
        assert_eq!(
            (m.role.map(amberdb::Role::as_str), m.content.as_str()),
            (Some(f[1]), f[2])
        );
        assert_eq!(m.session_id.as_deref(), Some("thread-1"));
        tools += usize::from(f[1] == "tool");
    }
    assert_eq!((text.lines().count(), tools), (8, 2));
    // The session goes on, tool turns included.
    let more = store
        .add_turns(
            Some("ann"),
            "thread-1",
            &[amberdb::Turn {
                role: amberdb::Role::Tool,
                content: "{\"city\": \"Faro\"}".into(),
                at: None,
                source_id: None,
            }],
        )
        .unwrap();
    assert_eq!(
        store.get(more.memory_ids[0]).unwrap().role,
        Some(amberdb::Role::Tool)
    );
}

#[test]
fn version_9_store_opens_and_every_file_names_its_store() {
    check_v2_store(9);
    let dir = copy_of_version(9, "store");
    let id =
        amberdb::identity::decode(&std::fs::read(dir.path().join("IDENTITY")).unwrap()).unwrap();
    assert!(!id.is_legacy(), "a v9 fixture's IDENTITY has a store id");
    let mut files = 0;
    for e in std::fs::read_dir(dir.path()).unwrap() {
        let path = e.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_owned();
        if name == "IDENTITY" || name == "LOCK" {
            continue;
        }
        let owner = amberdb::ownership::header_owner(&amberdb::storage::FsStorage, &path);
        assert_eq!(owner, Some(id.owner()), "{name} names its store");
        files += 1;
    }
    assert!(files >= 4, "logs, a checkpoint and a segment: {files}");
}

#[test]
fn version_10_store_keeps_each_turns_source_id_and_knows_a_turn_sent_again() {
    check_v2_store(10);
    let dir = copy_of_version(10, "chat");
    let store = Store::open(dir.path(), StoreOptions::hashing()).unwrap();
    assert_eq!(store.open_report().checkpoint_delta_of, Some(1));
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/v10/chat.tsv"),
    )
    .unwrap();
    let mut again = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.splitn(4, '\t').collect();
        let m = store.get(MemoryId(f[0].parse().unwrap())).unwrap();
        assert_eq!(
            (m.content.as_str(), m.source_id.as_deref()),
            (f[2], Some(f[3])),
            "turn {} (in the full checkpoint, the delta or the log tail)",
            f[0]
        );
        again.push(amberdb::Turn {
            role: amberdb::Role::parse(f[1]).unwrap(),
            content: f[2].to_owned(),
            at: None,
            source_id: Some(f[3].to_owned()),
        });
    }
    // The thread sent again, with one new turn at its end: only that one is stored.
    again.push(amberdb::Turn::new(amberdb::Role::User, "Thanks!"));
    let added = store.add_turns(Some("ann"), "thread-1", &again).unwrap();
    assert_eq!(added.memory_ids.len(), 1);
    assert_eq!(added.skipped.len(), 8);
    assert!(added.skipped.iter().all(|h| h.by == amberdb::HeldBy::Id));
}

#[test]
fn version_11_store_answers_its_request_ids_from_the_checkpoint_and_the_log() {
    check_v2_store(11);
    // The fixture's clock (write_fixture.rs, `REQUESTS_AT`) plus a minute: inside the window.
    let at = Timestamp(1_796_212_800_000_000 + 60_000_000);
    let options = || StoreOptions::hashing().clock(std::sync::Arc::new(move || at));
    let dir = copy_of_version(11, "requests");
    let store = Store::open(dir.path(), options()).unwrap();
    assert!(
        store.open_report().replayed_frames > 0,
        "fixture has a log tail"
    );
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/v11/requests.tsv"),
    )
    .unwrap();
    let memories = store.stats().memories;
    assert_eq!(memories, 4, "bob's note went with bob");
    assert_eq!(store.stats().request_ids_held, 5);
    for line in text.lines() {
        let f: Vec<&str> = line.splitn(4, '\t').collect();
        let id = amberdb::RequestId::parse(f[0]).unwrap();
        let fingerprint: u64 = f[1].parse().unwrap();
        let begun = store.begin_request(id, fingerprint).unwrap();
        match (f[2], begun) {
            ("answered", amberdb::Begun::Answered(reply)) => assert_eq!(reply, f[3]),
            ("unanswered", amberdb::Begun::AppliedUnanswered { seq }) => assert!(seq > 0),
            (want, got) => panic!("request {}: want {want}, got {got:?}", f[0]),
        }
        // Another request under the same id is refused.
        assert!(store.begin_request(id, fingerprint + 100).is_err());
    }
    assert_eq!(store.stats().memories, memories, "nothing applied again");
    // Half an hour later the ids are past their window: refused, not run.
    drop(store);
    let late = Timestamp(at.0 + 30 * 60_000_000);
    let store = Store::open(
        dir.path(),
        StoreOptions::hashing().clock(std::sync::Arc::new(move || late)),
    )
    .unwrap();
    let first = text.lines().next().unwrap().split('\t').next().unwrap();
    let e = store
        .begin_request(amberdb::RequestId::parse(first).unwrap(), 11)
        .unwrap_err();
    assert!(e.to_string().contains("remembered for 600 s"), "{e}");
}

#[test]
fn version_12_replica_holds_its_claim_and_open_chunk_group_and_completes_it() {
    check_v2_store(12);
    let (_dir, store) = check_partition_fixture(12);
    assert_eq!(
        store.stats().running_crc,
        None,
        "a checkpoint before v14 does not hold the running CRC, so nothing after it knows it"
    );
}

#[test]
fn version_13_stores_know_their_running_crc_which_is_the_one_their_log_files_define() {
    check_v2_store(13);
    check_partition_fixture(13);
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/v13/crc.tsv"),
    )
    .unwrap();
    let expected: Vec<(String, u64, u32)> = text
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            (
                f[0].to_owned(),
                f[1].parse().unwrap(),
                u32::from_str_radix(f[2], 16).unwrap(),
            )
        })
        .collect();
    assert_eq!(expected.len(), 3);
    for (name, position, crc) in &expected {
        let dir = copy_of_version(13, name);
        let options = match name.as_str() {
            "partition" => partition_options(&partition_store_id(13)),
            _ => StoreOptions::hashing(),
        };
        let store = Store::open(dir.path(), options.maintenance_thread(false)).unwrap();
        assert_eq!(store.stats().running_crc, Some((*position, *crc)), "{name}");
        store.close().unwrap();
    }
    // The definition, from the log files alone: `store/` keeps every frame since position 1.
    let dir = copy_of_version(13, "store");
    let mut running = 0u32;
    let mut last = 0;
    for log in [
        "wal-00000000000000000001.log",
        "wal-00000000000000000016.log",
    ] {
        let bytes = std::fs::read(dir.path().join(log)).unwrap();
        let mut at = 64;
        while at < bytes.len() {
            let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
            let stored = &bytes[at + 4..at + 8];
            let seq = u64::from_le_bytes(bytes[at + 9..at + 17].try_into().unwrap());
            if seq > last {
                let mut h = crc32fast::Hasher::new_with_initial(running);
                h.update(stored);
                running = h.finalize();
                last = seq;
            }
            at += 8 + len;
        }
    }
    assert_eq!((last, running), (expected[0].1, expected[0].2), "store/");
}

fn partition_store_id(version: u16) -> amberdb::StoreId {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(format!("tests/fixtures/v{version}/partition.tsv")),
    )
    .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("store\t"))
        .unwrap()
        .parse()
        .unwrap()
}

fn partition_options(store_id: &amberdb::StoreId) -> StoreOptions {
    StoreOptions::new(std::sync::Arc::new(amberdb::HashingEmbedder::with_dim(8)))
        .maintenance_thread(false)
        .store_id(*store_id)
}

/// Opens `partition/` of fixture `version` and checks what it holds, then completes its open
/// chunk group with the message `partition.tsv` names. Returns the copy and the store open on it.
fn check_partition_fixture(version: u16) -> (tempfile::TempDir, Store) {
    use amberdb::cluster::{Applied, StreamMessage};
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(format!("tests/fixtures/v{version}/partition.tsv")),
    )
    .unwrap();
    let field = |name: &str| -> Vec<&str> {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}\t")))
            .unwrap_or_else(|| panic!("{name} in partition.tsv"))
            .split('\t')
            .collect()
    };
    let store_id: amberdb::StoreId = field("store")[0].parse().unwrap();
    let dir = copy_of_version(version, "partition");
    let store = Store::open(dir.path(), partition_options(&store_id)).unwrap();
    assert!(store.open_report().replayed_frames > 0, "a log tail");
    let log = store.partition_log();
    let claim = log.claim.clone().unwrap();
    assert_eq!(
        vec![claim.epoch.to_string(), claim.node],
        field("claim"),
        "the claim"
    );
    assert_eq!(log.position.to_string(), field("position")[0]);
    let (held, count) = log.open_group.unwrap();
    assert_eq!(
        vec![held.to_string(), count.to_string()],
        field("open_group")
    );
    let live: Vec<(u64, String)> = text
        .lines()
        .filter_map(|l| l.strip_prefix("live\t"))
        .map(|l| {
            let (id, content) = l.split_once('\t').unwrap();
            (id.parse().unwrap(), content.to_owned())
        })
        .collect();
    assert_eq!(live.len(), 4);
    for (id, content) in &live {
        assert_eq!(&store.get(MemoryId(*id)).unwrap().content, content);
    }
    for id in 1..=8 {
        if !live.iter().any(|(l, _)| *l == id) && id != 8 {
            assert!(store.get(MemoryId(id)).is_err(), "{id} did not count");
        }
    }
    // The message that completes the open group.
    let next = field("next");
    let (i, n) = next[3].split_once('/').unwrap();
    let body: Vec<u8> = (0..next[4].len())
        .step_by(2)
        .map(|k| u8::from_str_radix(&next[4][k..k + 2], 16).unwrap())
        .collect();
    let applied = store
        .apply_replicated(&StreamMessage {
            position: next[0].parse().unwrap(),
            epoch: next[1].parse().unwrap(),
            prev: next[2].parse().unwrap(),
            chunk: Some((i.parse().unwrap(), n.parse().unwrap())),
            crc: None,
            body: &body,
        })
        .unwrap();
    assert_eq!(applied, Applied::Frame);
    assert_eq!(
        store.get(MemoryId(8)).unwrap().content,
        "completed by message 15"
    );
    (dir, store)
}

#[test]
fn a_store_from_before_store_ids_gets_one_at_its_first_open_and_keeps_its_old_files() {
    let dir = copy_of_version(8, "store");
    let before = std::fs::read(dir.path().join("IDENTITY")).unwrap();
    assert_eq!(u16::from_le_bytes([before[4], before[5]]), 1);
    let store = Store::open(dir.path(), StoreOptions::hashing()).unwrap();
    let want = expected_of(8);
    for (id, ..) in &want {
        assert!(
            store.get(MemoryId(*id)).is_ok(),
            "record {id} after the upgrade"
        );
    }
    drop(store);
    let after =
        amberdb::identity::decode(&std::fs::read(dir.path().join("IDENTITY")).unwrap()).unwrap();
    assert!(!after.is_legacy());
    // The id is made once: a second open keeps it.
    let store = Store::open(dir.path(), StoreOptions::hashing()).unwrap();
    drop(store);
    let again =
        amberdb::identity::decode(&std::fs::read(dir.path().join("IDENTITY")).unwrap()).unwrap();
    assert_eq!(again.store, after.store);
    let report = amberdb::verify::verify(dir.path()).unwrap();
    assert_eq!(report.errors(), 0, "{:?}", report.findings);
    assert_eq!(report.identity_version, 2);
}
