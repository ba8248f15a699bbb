//! Writes the frozen fixtures of the current format version into
//! `engine/tests/fixtures/v<version>/`. Run once per format version; the test suite opens them
//! forever after (`tests/it/fixtures.rs`). Version 1 was written by the version-1 build;
//! version 2 adds a merge, a supersede, canonical tags, a snapshot and a restore, accesses,
//! feedback and an update, some before the checkpoint (its aux section) and some after;
//! version 3 adds users, agents and sessions (created before and after the checkpoint) and the
//! deletion of a user with its records; version 4 adds validity in time: facts with a given
//! `valid_from`, updates that close the older value's validity (before and after the
//! checkpoint) with the rule that decided each, and an earlier value stored late (history);
//! version 5 adds `forget/`, a store whose archive retention forgot archived records before and
//! after its checkpoint; version 6 adds `reembed/`, a store re-embedded from the 384-d hashing
//! embedder to the 64-d one, with writes after the switch in its log; version 7 adds `items/`,
//! items put, replaced and deleted by key before and after its checkpoint; version 8 adds
//! `chat/`, a session whose turns of every role (`tool` is new) were stored before and after
//! a full checkpoint and a delta on it, with more in the log tail; version 9 (IDENTITY v2,
//! checkpoint v10, segments v2) is the same scenario with every file naming its store; version
//! 10 (log v10, checkpoint v11) gives every chat turn of `chat/` a source id (a message id,
//! written in `chat.tsv`'s fourth column); version 11 (log v11, checkpoint v12) adds
//! `requests/`, writes that carried request ids before and after a checkpoint (one whose reply
//! was never kept), and `requests.tsv`: each id, its fingerprint and how a retry is answered;
//! version 12 (log v12, checkpoint v13) adds `partition/`, a cluster partition's replica that
//! applied a stream of claims, frames, skips and chunks, with a chunk group open across its
//! checkpoint and another at its end, and `partition.tsv`: what it holds and the message that
//! completes the last group; version 13 (log v12, checkpoint v14: the first fixture version
//! that is not the log's) is the same scenarios with every checkpoint holding the log's
//! running CRC, and `crc.tsv`: each store's position and running CRC after its last frame.

/// The fixture version this build writes: the format changes so far, in landing order (the
/// log's version until version 12; checkpoint v14 is the 13th).
const FIXTURE_VERSION: u16 = 13;
use amberdb::{
    Category, EntityKind, Feedback, MemoryId, NewMemory, Outcome, Role, Store, StoreOptions,
    StoreRequest, Timestamp, UpdateRequest,
};
use std::path::Path;

fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        std::fs::copy(e.path(), to.join(e.file_name()))?;
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root =
        Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/v{FIXTURE_VERSION}"));
    if root.exists() {
        return Err(format!(
            "{} exists: fixtures are frozen, never regenerated",
            root.display()
        )
        .into());
    }
    let dir = root.join("store");
    let store = Store::open(&dir, StoreOptions::hashing())?;
    let notes = [
        (
            "default",
            "Use cargo nextest for faster parallel test runs",
            Category::ToolUsage,
            vec!["rust", "testing"],
        ),
        (
            "default",
            "The flaky login test was a race on the session cookie",
            Category::BugFix,
            vec!["auth", "flaky"],
        ),
        (
            "default",
            "We chose an append-only log with checkpoints for durability",
            Category::Architecture,
            vec!["storage"],
        ),
        (
            "alice",
            "Alice prefers answers with code examples in Python",
            Category::Other,
            vec!["preference"],
        ),
        (
            "alice",
            "Postgres connection pool exhausted under load; raise max_connections",
            Category::Performance,
            vec!["postgres", "db"],
        ),
        (
            "default",
            "Rotate the API key every ninety days",
            Category::Security,
            vec!["keys"],
        ),
    ];
    let store_notes = |notes: &[(&str, &str, Category, Vec<&str>)]| -> amberdb::Result<Vec<_>> {
        notes
            .iter()
            .map(|(user, text, category, tags)| {
                store
                    .store(
                        NewMemory::new(*text)
                            .user(*user)
                            .category(*category)
                            .tags(tags.clone()),
                    )
                    .map(|s| s.memory_id)
            })
            .collect()
    };
    let mut ids = store_notes(&notes[..4])?;
    // Version 2: a merge (archive + store in one batch frame), canonical tags, a snapshot,
    // an access, feedback and a tag update, all before the checkpoint.
    let merged = store.store(StoreRequest::new(
        NewMemory::new("Use cargo nextest for faster, parallel test runs")
            .category(Category::ToolUsage)
            .tags(["rust", "nextest"]),
    ))?;
    if merged.outcome != Outcome::Merged {
        return Err(format!("expected a merge, got {merged:?}").into());
    }
    ids[0] = merged.memory_id;
    let snapshot = store.snapshot_create(None, "fixture")?;
    store.record_access(ids[2])?;
    store.feedback(ids[2], Feedback::Helpful)?;
    store.update(UpdateRequest {
        memory_id: Some(ids[2]),
        tags: Some(vec!["storage".into(), "durability".into()]),
        ..UpdateRequest::default()
    })?;
    // Version 3: entities in the checkpoint's aux section, and a user to delete later.
    store.create_entity(
        EntityKind::Agent,
        Some("alice"),
        "helper",
        Some("Helper bot"),
        None,
    )?;
    store.create_entity(
        EntityKind::Session,
        Some("alice"),
        "s-1",
        Some("Password help"),
        Some("helper"),
    )?;
    store.create_entity(EntityKind::User, None, "bob", Some("Bob"), None)?;
    store.store(NewMemory::new("Bob keeps his notes in org-mode").user("bob"))?;
    // Version 4: a fact and a newer value of its slot, both with a given valid_from.
    let at = |s: &str| Timestamp::parse_rfc3339(s).ok_or("bad time");
    let store_at = |user: &str,
                    text: &str,
                    from: &str,
                    want: Outcome|
     -> Result<MemoryId, Box<dyn std::error::Error>> {
        // The hashing embedder scores related sentences lower than a model: a wide distance.
        let mut req = StoreRequest::new(NewMemory::new(text).user(user).valid_from(at(from)?));
        req.hooks.dedup_distance = Some(0.9);
        let s = store.store(req)?;
        if s.outcome != want {
            return Err(format!("{text}: expected {want:?}, got {s:?}").into());
        }
        Ok(s.memory_id)
    };
    store_at(
        "dora",
        "Dora lives in Lisbon",
        "2024-01-01T00:00:00Z",
        Outcome::Stored,
    )?;
    let city = store_at(
        "dora",
        "Dora lives in Berlin",
        "2025-03-01T00:00:00Z",
        Outcome::Superseded,
    )?;
    store.checkpoint()?;
    // After the checkpoint: an earlier value stored late, and another slot updated.
    store_at(
        "dora",
        "Dora lives in Paris",
        "2022-06-01T00:00:00Z",
        Outcome::History,
    )?;
    store_at(
        "erin",
        "Erin's team deploys on port 8080",
        "2023-01-01T00:00:00Z",
        Outcome::Stored,
    )?;
    let port = store_at(
        "erin",
        "Erin's team deploys on port 9090",
        "2024-02-01T00:00:00Z",
        Outcome::Superseded,
    )?;
    // After the checkpoint, in the log tail: a restore (a batch of tag rewrites) and an
    // update of content (archive + store).
    store.snapshot_restore(None, &snapshot.snapshot_id)?;
    let moved = store.update(UpdateRequest {
        memory_id: Some(ids[3]),
        content: Some("Alice prefers answers with code examples in Python or Rust".into()),
        ..UpdateRequest::default()
    })?;
    ids[3] = moved.memory_id;
    ids.extend(store_notes(&notes[4..])?);
    ids.push(
        store
            .store(
                NewMemory::new("How do I reset my password?")
                    .user("alice")
                    .message("s-1", Role::User),
            )?
            .memory_id,
    );
    store.delete(ids[1])?; // sealed row: tombstone
    store.delete(ids[4])?; // growing row
    store.create_entity(EntityKind::Session, Some("alice"), "s-2", None, None)?;
    store.delete_entity(EntityKind::User, None, "bob")?;
    ids.push(
        store
            .store(
                NewMemory::new("Open the settings page and choose reset.")
                    .user("alice")
                    .message("s-1", Role::Assistant),
            )?
            .memory_id,
    );
    ids.extend([city, port]);
    let mut tsv = String::new();
    for id in &ids {
        if let Ok(m) = store.get(*id) {
            tsv.push_str(&format!(
                "{}\t{}\t{}\t{}\n",
                m.id,
                m.user_id,
                m.tags.join(","),
                m.content
            ));
        }
    }
    let mut entities = String::new();
    for e in store.all_entities() {
        entities.push_str(&format!(
            "{}\t{}\t{}\t{}\t{}\n",
            e.kind,
            e.user_id,
            e.id,
            e.name,
            e.agent_id.unwrap_or_default()
        ));
    }
    let mut validity = String::new();
    for id in [city, port] {
        for v in store.history(id)?.versions {
            validity.push_str(&format!(
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
    store.close()?;
    std::fs::remove_file(dir.join("LOCK"))?;
    std::fs::write(root.join("validity.tsv"), validity)?;
    std::fs::write(root.join("entities.tsv"), entities)?;
    std::fs::write(root.join("expected.tsv"), tsv)?;
    std::fs::write(
        root.join("lineage.tsv"),
        format!(
            "{}\t{:?}\n{}\t{:?}\n",
            merged.memory_id, merged.supersedes, moved.memory_id, moved.supersedes
        ),
    )?;
    let wal = std::fs::read_dir(&dir)?
        .filter_map(Result::ok)
        .map(|e| e.file_name().into_string().unwrap_or_default())
        .filter(|n| n.starts_with("wal-"))
        .max()
        .ok_or("no log file")?;
    for copy in ["torn", "corrupt"] {
        copy_dir(&dir, &root.join(copy))?;
    }
    let bytes = std::fs::read(dir.join(&wal))?;
    // torn: the last frame loses its final 100 bytes.
    std::fs::write(root.join("torn").join(&wal), &bytes[..bytes.len() - 100])?;
    // corrupt: one bit flipped in the first frame after the header, with valid frames after it.
    let mut bad = bytes.clone();
    bad[32 + 20] ^= 0x04;
    std::fs::write(root.join("corrupt").join(&wal), bad)?;
    write_forget_fixture(&root)?;
    write_reembed_fixture(&root)?;
    write_items_fixture(&root)?;
    write_chat_fixture(&root)?;
    write_requests_fixture(&root)?;
    write_partition_fixture(&root)?;
    write_crc_table(&root)?;
    eprintln!("wrote {}", root.display());
    Ok(())
}

/// Version 5: `forget/`, a store whose archive retention forgot archived records in the
/// checkpoint's past and in the log tail, and `forget.tsv`: each id of its history with
/// `live`, `archived` or `forgotten`.
fn write_forget_fixture(root: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let dir = root.join("forget");
    let retention = amberdb::ArchiveRetention {
        max_age: None,
        max_records: Some(2),
    };
    let store = Store::open(
        &dir,
        StoreOptions::hashing()
            .archive_retention(retention)
            .maintenance_thread(false),
    )?;
    let mut ids: Vec<MemoryId> = (0..6)
        .map(|i| {
            store
                .store(NewMemory::new(format!(
                    "Retention fixture note {i}, first wording"
                )))
                .map(|s| s.memory_id)
        })
        .collect::<Result<_, _>>()?;
    let mut history: Vec<MemoryId> = ids.clone();
    let mut rewrite = |store: &Store, i: usize, wording: &str| -> amberdb::Result<()> {
        let u = store.update(UpdateRequest {
            memory_id: Some(ids[i]),
            content: Some(format!("Retention fixture note {i}, {wording} wording")),
            ..UpdateRequest::default()
        })?;
        ids[i] = u.memory_id;
        history.push(u.memory_id);
        Ok(())
    };
    for i in 0..4 {
        rewrite(&store, i, "second")?;
    }
    let before = store.apply_archive_retention()?;
    store.checkpoint()?;
    for i in 4..6 {
        rewrite(&store, i, "second")?;
    }
    let after = store.apply_archive_retention()?;
    if (before, after) != (2, 2) {
        return Err(format!("expected 2 and 2 forgotten, got {before} and {after}").into());
    }
    let mut tsv = String::new();
    for id in &history {
        let status = match store.get(*id) {
            Ok(_) => "live",
            Err(amberdb::EngineError::Archived { .. }) => "archived",
            Err(_) => "forgotten",
        };
        tsv.push_str(&format!("{id}\t{status}\n"));
    }
    store.close()?;
    std::fs::remove_file(dir.join("LOCK"))?;
    std::fs::write(root.join("forget.tsv"), tsv)?;
    Ok(())
}

/// Version 6: `reembed/`, a store made with the 384-d hashing embedder, re-embedded to the
/// 64-d one (its checkpoint names the model), with records stored after the switch in the log
/// tail, and `reembed.tsv`: id and content of every live record.
fn write_reembed_fixture(root: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let dir = root.join("reembed");
    let store = Store::open(&dir, StoreOptions::hashing().maintenance_thread(false))?;
    for i in 0..5 {
        store.store(
            NewMemory::new(format!("Re-embedding fixture note {i} about colour {i}"))
                .tags(["fixture"]),
        )?;
    }
    store.checkpoint()?;
    store.reembed(std::sync::Arc::new(amberdb::HashingEmbedder::with_dim(64)))?;
    for i in 5..8 {
        store.store(NewMemory::new(format!(
            "Re-embedding fixture note {i}, written after the switch"
        )))?;
    }
    let mut tsv = String::new();
    for id in store.memory_ids() {
        tsv.push_str(&format!("{id}\t{}\n", store.get(id)?.content));
    }
    store.close()?;
    std::fs::remove_file(dir.join("LOCK"))?;
    std::fs::write(root.join("reembed.tsv"), tsv)?;
    Ok(())
}

/// Version 8: `chat/`, a session of every role's turns (a tool's output is new) stored
/// before a full checkpoint, between it and a delta on it, and after both; `chat.tsv`: id,
/// role, content and (version 10) source id of every turn.
fn write_chat_fixture(root: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let dir = root.join("chat");
    let store = Store::open(
        &dir,
        StoreOptions::hashing()
            .maintenance_thread(false)
            .delta_max_share(f64::INFINITY),
    )?;
    let sent = std::cell::Cell::new(0);
    let turns = |list: &[(Role, &str)]| {
        let turns: Vec<amberdb::Turn> = list
            .iter()
            .map(|(role, content)| {
                sent.set(sent.get() + 1);
                amberdb::Turn {
                    role: *role,
                    content: (*content).to_owned(),
                    at: None,
                    source_id: Some(format!("lc-{}", sent.get())),
                }
            })
            .collect();
        store.add_turns(Some("ann"), "thread-1", &turns)
    };
    turns(&[
        (Role::System, "You are a helpful travel agent."),
        (Role::User, "What is the weather in Lisbon?"),
        (Role::Assistant, "Let me check the forecast."),
        (
            Role::Tool,
            "{\"city\": \"Lisbon\", \"forecast\": \"sunny, 24 C\"}",
        ),
    ])?;
    store.checkpoint()?;
    turns(&[
        (Role::Assistant, "It is sunny in Lisbon, 24 degrees."),
        (Role::User, "And in Porto?"),
        (
            Role::Tool,
            "{\"city\": \"Porto\", \"forecast\": \"rain, 17 C\"}",
        ),
    ])?;
    store.checkpoint()?;
    turns(&[(
        Role::Assistant,
        "Rain in Porto, 17 degrees: take an umbrella.",
    )])?;
    let mut tsv = String::new();
    for m in store.list_recent(Some("ann"), 50)?.iter().rev() {
        let role = m.role.map_or("none", Role::as_str);
        let source = m.source_id.as_deref().unwrap_or("");
        tsv.push_str(&format!("{}\t{role}\t{}\t{source}\n", m.id.0, m.content));
    }
    store.close()?;
    std::fs::remove_file(dir.join("LOCK"))?;
    std::fs::write(root.join("chat.tsv"), tsv)?;
    Ok(())
}

/// The store clock of `requests/`: 2026-12-02 12:00:00 UTC (a test reads it at this time,
/// inside the ids' window).
pub const REQUESTS_AT: i64 = 1_796_212_800_000_000;

/// Version 11: `requests/`, writes that carried request ids: three before a checkpoint (a
/// store, a user's deletion, and a store whose reply was never kept, as when the process
/// stops between the two frames), two after it in the log tail; `requests.tsv`: id,
/// fingerprint, then `answered` and the kept reply, or `unanswered`.
fn write_requests_fixture(root: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let dir = root.join("requests");
    let clock = std::sync::Arc::new(|| Timestamp(REQUESTS_AT));
    let store = Store::open(
        &dir,
        StoreOptions::hashing()
            .maintenance_thread(false)
            .clock(clock),
    )?;
    let mut tsv = String::new();
    let mut run = |fingerprint: u64,
                   keep: bool,
                   write: &dyn Fn(&Store) -> amberdb::Result<String>|
     -> Result<(), Box<dyn std::error::Error>> {
        let id = amberdb::RequestId::new(Timestamp(REQUESTS_AT))?;
        let amberdb::Begun::Run(run) = store.begin_request(id, fingerprint)? else {
            return Err("a new request id runs".into());
        };
        let reply = write(run.store())?;
        if keep {
            run.finish(reply.clone())?;
            tsv.push_str(&format!("{id}\t{fingerprint}\tanswered\t{reply}\n"));
        } else {
            drop(run);
            tsv.push_str(&format!("{id}\t{fingerprint}\tunanswered\t\n"));
        }
        Ok(())
    };
    let mut bob = NewMemory::new("bob prefers tea");
    bob.user_id = Some("bob".into());
    store.store(bob)?;
    let store_text = |text: &'static str| {
        move |s: &Store| {
            s.store(NewMemory::new(text))
                .map(|r| format!("{{\"memory_id\":{}}}", r.memory_id.0))
        }
    };
    run(
        11,
        true,
        &store_text("the release train leaves on Thursdays"),
    )?;
    run(12, true, &|s: &Store| {
        s.delete_entity(EntityKind::User, None, "bob")
            .map(|_| "{\"deleted\":\"bob\"}".to_owned())
    })?;
    run(
        13,
        false,
        &store_text("the on-call rota changes on Mondays"),
    )?;
    store.checkpoint()?;
    run(14, true, &store_text("the office closes at six"))?;
    run(15, true, &store_text("the VPN needs a hardware key"))?;
    store.close()?;
    std::fs::remove_file(dir.join("LOCK"))?;
    std::fs::write(root.join("requests.tsv"), tsv)?;
    Ok(())
}

/// Version 7: `items/`, items of two users put, replaced and deleted by key before and after
/// the checkpoint (and a note beside them), and `items.tsv`: user, key, value and text of
/// every live item.
fn write_items_fixture(root: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let dir = root.join("items");
    let store = Store::open(&dir, StoreOptions::hashing().maintenance_thread(false))?;
    let put = |user: &str, key: &str, value: &str, text: &str| {
        let item = amberdb::Item {
            key: key.into(),
            value: value.into(),
        };
        store.put_item(Some(user), item, text).map(|_| ())
    };
    put(
        "prefs.alice",
        "food",
        r#"{"likes": "pizza"}"#,
        "alice likes pizza",
    )?;
    put(
        "prefs.alice",
        "drink",
        r#"{"likes": "tea"}"#,
        "alice drinks tea",
    )?;
    put(
        "prefs.bob",
        "food",
        r#"{"likes": "soup"}"#,
        "bob likes soup",
    )?;
    put(
        "prefs.bob",
        "gone",
        r#"{"x": 1}"#,
        "deleted before the checkpoint",
    )?;
    store.delete_item(Some("prefs.bob"), "gone")?;
    store.store(NewMemory::new("a note beside the items").user("prefs.alice"))?;
    store.checkpoint()?;
    put(
        "prefs.alice",
        "food",
        r#"{"likes": "sushi", "since": 2026}"#,
        "alice likes sushi",
    )?;
    put(
        "prefs.bob",
        "drink",
        r#"{"likes": "coffee"}"#,
        "deleted after the checkpoint",
    )?;
    store.delete_item(Some("prefs.bob"), "drink")?;
    put(
        "prefs.bob",
        "ünïcode/ключ",
        r#"{"nested": {"a": [1, 2]}}"#,
        "bob's nested value",
    )?;
    let mut tsv = String::new();
    for user in ["prefs.alice", "prefs.bob"] {
        for m in store.list_items(Some(user), "", 0, 50)? {
            let item = m.item.as_ref().ok_or("a listed item without a key")?;
            tsv.push_str(&format!(
                "{user}\t{}\t{}\t{}\n",
                item.key, item.value, m.content
            ));
        }
    }
    store.close()?;
    std::fs::remove_file(dir.join("LOCK"))?;
    std::fs::write(root.join("items.tsv"), tsv)?;
    Ok(())
}

/// A record stored by a partition's owner (8-d vectors), as the stream carries it.
fn partition_store_op(id: u64, content: &str) -> amberdb::log::format::Op {
    let mut vector = vec![0.0; 8];
    vector[usize::try_from(id).unwrap_or(0) % 8] = 1.0;
    let record = amberdb::Memory {
        id: MemoryId(id),
        user_id: "default".into(),
        kind: amberdb::Kind::Memory,
        session_id: None,
        agent_id: None,
        role: None,
        content: content.into(),
        content_hash: amberdb::content_hash(content),
        category: Category::Other,
        tags: vec![],
        created_at: Timestamp(REQUESTS_AT),
        updated_at: Timestamp(REQUESTS_AT),
        last_accessed_at: Timestamp(REQUESTS_AT),
        access_count: 0,
        helpful_count: 0,
        harmful_count: 0,
        confidence: 1.0,
        supersedes: vec![],
        valid_from: Timestamp(REQUESTS_AT),
        valid_to: None,
        decision: None,
        item: None,
        source_id: None,
    };
    amberdb::log::format::Op::Store {
        record: Box::new(record),
        vector,
    }
}

/// A stream message as published: epoch, previous position, chunk, body.
type Published = (u64, u64, Option<(u32, u32)>, Vec<u8>);

/// The store id of `partition/` (`partition.tsv` names it too).
pub const PARTITION_STORE: [u8; 16] = [0x57; 16];

/// Version 12: `partition/`, a replica that applied positions 1..=14 of a partition stream:
/// a frame before any claim (1), a claim (2), frames in place and one behind an intruder
/// (3..=5), a lost claim (6), a frame in three chunks with the checkpoint taken after the
/// second (7..=9), a second claim (10), the old owner fenced (11), a lone chunk (12), a frame
/// (13), and the first of two chunks (14); `partition.tsv`: the store id, the claim, the
/// position, the open group, the live ids, and message 15 (which completes the group).
fn write_partition_fixture(root: &Path) -> Result<(), Box<dyn std::error::Error>> {
    use amberdb::cluster::{Claim, StreamMessage};
    use amberdb::log::format::{Op, encode_frame};
    let store_id = amberdb::StoreId(PARTITION_STORE);
    let dir = root.join("partition");
    let store = Store::open(
        &dir,
        StoreOptions::new(std::sync::Arc::new(amberdb::HashingEmbedder::with_dim(8)))
            .maintenance_thread(false)
            .store_id(store_id),
    )?;
    let claim = |epoch: u64, node: &str| {
        Op::Claim(Box::new(Claim {
            epoch,
            node: node.into(),
            store: store_id,
        }))
    };
    // Positions 1, 2, ...
    let mut stream: Vec<Published> = Vec::new();
    let whole = |stream: &mut Vec<_>, epoch: u64, prev: u64, op: &Op| {
        let position = stream.len() as u64 + 1;
        stream.push((epoch, prev, None, encode_frame(position, op)));
    };
    whole(
        &mut stream,
        0,
        0,
        &partition_store_op(1, "before any claim"),
    );
    whole(&mut stream, 1, 1, &claim(1, "node-a"));
    whole(
        &mut stream,
        1,
        2,
        &partition_store_op(2, "the owner's first write"),
    );
    whole(
        &mut stream,
        1,
        2,
        &partition_store_op(3, "behind an intruder"),
    );
    whole(
        &mut stream,
        1,
        4,
        &partition_store_op(4, "the owner in place"),
    );
    whole(&mut stream, 1, 5, &claim(1, "node-c"));
    let chunked = |stream: &mut Vec<_>, epoch: u64, op: &Op, count: u32| {
        let first = stream.len() as u64 + 1;
        let frame = encode_frame(first + u64::from(count) - 1, op);
        let n = frame.len() / count as usize;
        for i in 0..count {
            let end = if i + 1 == count {
                frame.len()
            } else {
                n * (i as usize + 1)
            };
            let bytes = frame[n * i as usize..end].to_vec();
            stream.push((epoch, first + u64::from(i) - 1, Some((i + 1, count)), bytes));
        }
    };
    chunked(
        &mut stream,
        1,
        &partition_store_op(5, "a frame in three chunks"),
        3,
    );
    whole(&mut stream, 2, 9, &claim(2, "node-b"));
    whole(
        &mut stream,
        1,
        10,
        &partition_store_op(6, "the old owner, fenced"),
    );
    stream.push((2, 11, Some((2, 2)), vec![1; 16]));
    whole(
        &mut stream,
        2,
        12,
        &partition_store_op(7, "the new owner's write"),
    );
    chunked(
        &mut stream,
        2,
        &partition_store_op(8, "completed by message 15"),
        2,
    );
    let message = |position: u64, m: &Published| {
        let (epoch, prev, chunk, body) = m;
        (position, *epoch, *prev, *chunk, body.clone())
    };
    for (i, m) in stream.iter().take(14).enumerate() {
        let (position, epoch, prev, chunk, body) = message(i as u64 + 1, m);
        store.apply_replicated(&StreamMessage {
            position,
            epoch,
            prev,
            chunk,
            crc: None,
            body: &body,
        })?;
        if position == 8 {
            store.checkpoint()?;
        }
    }
    let log = store.partition_log();
    let mut tsv = format!("store\t{store_id}\n");
    if let Some(c) = &log.claim {
        tsv.push_str(&format!("claim\t{}\t{}\n", c.epoch, c.node));
    }
    tsv.push_str(&format!("position\t{}\n", log.position));
    if let Some((held, count)) = log.open_group {
        tsv.push_str(&format!("open_group\t{held}\t{count}\n"));
    }
    for id in 1..=8 {
        if let Ok(m) = store.get(MemoryId(id)) {
            tsv.push_str(&format!("live\t{id}\t{}\n", m.content));
        }
    }
    let (epoch, prev, chunk, body) = stream[14].clone();
    let (i, n) = chunk.ok_or("message 15 is a chunk")?;
    let hex: String = body.iter().map(|b| format!("{b:02x}")).collect();
    tsv.push_str(&format!("next\t15\t{epoch}\t{prev}\t{i}/{n}\t{hex}\n"));
    store.close()?;
    std::fs::remove_file(dir.join("LOCK"))?;
    std::fs::write(root.join("partition.tsv"), tsv)?;
    Ok(())
}

/// `crc.tsv`: for each fixture store, its last position and the running CRC through it
/// (`docs/cluster.md`, "Running CRC"), as the store reports it.
fn write_crc_table(root: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let mut tsv = String::new();
    for (name, options) in [
        ("store", StoreOptions::hashing()),
        ("chat", StoreOptions::hashing()),
        (
            "partition",
            StoreOptions::new(std::sync::Arc::new(amberdb::HashingEmbedder::with_dim(8)))
                .store_id(amberdb::StoreId(PARTITION_STORE)),
        ),
    ] {
        // A copy: opening a store may write (a checkpoint, a rotated log), the fixture never.
        let scratch = tempfile::tempdir()?;
        copy_dir(&root.join(name), scratch.path())?;
        let store = Store::open(scratch.path(), options.maintenance_thread(false))?;
        let (position, crc) = store
            .stats()
            .running_crc
            .ok_or("a store of this build knows its running CRC")?;
        tsv.push_str(&format!("{name}\t{position}\t{crc:08x}\n"));
        store.close()?;
    }
    std::fs::write(root.join("crc.tsv"), tsv)?;
    Ok(())
}
