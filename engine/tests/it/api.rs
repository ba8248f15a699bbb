//! The library API as a user calls it: bad input, locking, embedder identity, poisoning,
//! group commit, sync policies, filters.

use super::support::small_options;
use amberdb::KernelError;
use amberdb::storage::FaultyStorage;
use amberdb::{
    Category, EngineError, EntityKind, HashingEmbedder, HookConfig, Kind, MemoryId, Mode,
    NewMemory, Role, ScanMode, SearchRequest, Store, StoreOptions, SyncPolicy, Timestamp,
};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

#[test]
fn bad_input_is_a_typed_error_and_changes_nothing() {
    let fs = FaultyStorage::new();
    let store = Store::open(Path::new("/a"), small_options(&fs, 100)).unwrap();
    let id = store
        .store(NewMemory::new("the one good memory"))
        .unwrap()
        .memory_id;
    let before = (store.stats(), fs.ops());
    let cases: Vec<(EngineError, &str)> = vec![
        (store.store(NewMemory::new("")).unwrap_err(), "empty"),
        (
            store.store(NewMemory::new("x".repeat(10_001))).unwrap_err(),
            "long",
        ),
        (
            store
                .store(NewMemory::new("x").tags((0..11).map(|i| i.to_string())))
                .unwrap_err(),
            "tags",
        ),
        (
            store
                .store(NewMemory::new("x").tags(["t".repeat(101)]))
                .unwrap_err(),
            "tag length",
        ),
        (
            store.store(NewMemory::new("x").user("")).unwrap_err(),
            "user",
        ),
        (
            store
                .store(NewMemory::new("x").kind(Kind::Message))
                .unwrap_err(),
            "message without role",
        ),
        (
            store
                .store(amberdb::StoreRequest::new(NewMemory::new("x")).with_vector(vec![1.0; 7]))
                .unwrap_err(),
            "dimension",
        ),
        (
            store
                .store(
                    amberdb::StoreRequest::new(NewMemory::new("x")).with_vector(vec![f32::NAN; 8]),
                )
                .unwrap_err(),
            "nan",
        ),
        (store.delete(MemoryId(999)).unwrap_err(), "delete missing"),
        (store.get(MemoryId(0)).unwrap_err(), "get 0"),
        (
            store
                .search(&SearchRequest::by_vector(vec![1.0; 3]))
                .unwrap_err(),
            "query dimension",
        ),
        (
            store.search(&SearchRequest::new("x").limit(0)).unwrap_err(),
            "k 0",
        ),
        (
            store
                .search(&SearchRequest::new("x").limit(51))
                .unwrap_err(),
            "k large",
        ),
        (
            store.search(&SearchRequest::new("   ")).unwrap_err(),
            "empty query",
        ),
    ];
    for (err, what) in &cases {
        assert_eq!(err.kind(), amberdb::ErrorKind::Caller, "{what}: {err}");
    }
    assert!(matches!(
        cases[1].0,
        EngineError::LimitExceeded {
            limit: 10_000,
            got: 10_001,
            ..
        }
    ));
    assert!(matches!(
        cases[6].0,
        EngineError::DimensionMismatch {
            expected: 8,
            got: 7
        }
    ));
    // A duplicate is an outcome, not an error, and changes nothing either.
    let dup = store.store(NewMemory::new("the one good memory")).unwrap();
    assert_eq!(
        (dup.outcome, dup.memory_id),
        (amberdb::Outcome::Duplicate, id)
    );
    assert_eq!(
        (store.stats(), fs.ops()),
        before,
        "a refused request changed the store"
    );
    // The same content for another user is not a duplicate.
    store
        .store(NewMemory::new("the one good memory").user("bob"))
        .unwrap();
}

#[test]
fn memory_limit_is_enforced_and_named() {
    let fs = FaultyStorage::new();
    let store = Store::open(Path::new("/a"), small_options(&fs, 100).memory_limit(2)).unwrap();
    store.store(NewMemory::new("one")).unwrap();
    store.store(NewMemory::new("two")).unwrap();
    assert!(matches!(
        store.store(NewMemory::new("three")),
        Err(EngineError::MemoryLimitReached {
            limit: 2,
            held: 2,
            adding: 1
        })
    ));
    // Reopened under a lower limit, the store holds more than it: the error says how many.
    drop(store);
    let store = Store::open(Path::new("/a"), small_options(&fs, 100).memory_limit(1)).unwrap();
    assert!(matches!(
        store.store(NewMemory::new("three")),
        Err(EngineError::MemoryLimitReached {
            limit: 1,
            held: 2,
            adding: 1
        })
    ));
    drop(store);
    let store = Store::open(Path::new("/a"), small_options(&fs, 100).memory_limit(4)).unwrap();
    // Messages are stored all together or not at all: three do not fit beside two under 4.
    store
        .create_entity(EntityKind::Session, None, "chat", None, None)
        .unwrap();
    let turns = ["three", "four", "five"].map(|t| (Role::User, t.to_owned()));
    assert!(matches!(
        store.add_messages(None, "chat", &turns),
        Err(EngineError::MemoryLimitReached {
            limit: 4,
            held: 2,
            adding: 3
        })
    ));
    assert_eq!(store.stats().memories, 2, "refused messages store nothing");
    assert!(matches!(
        Store::open(
            Path::new("/b"),
            small_options(&fs, 1).memory_limit(10_000_001)
        ),
        Err(EngineError::LimitExceeded { .. })
    ));
}

#[test]
fn one_process_owns_a_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreOptions::hashing()).unwrap();
    assert!(matches!(
        Store::open(dir.path(), StoreOptions::hashing()),
        Err(EngineError::Kernel(KernelError::Locked { .. }))
    ));
    drop(store);
    Store::open(dir.path(), StoreOptions::hashing()).unwrap();
}

#[test]
fn another_embedder_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    Store::open(dir.path(), StoreOptions::hashing())
        .unwrap()
        .store(NewMemory::new("x"))
        .unwrap();
    let other = StoreOptions::new(Arc::new(HashingEmbedder::with_dim(256)));
    let err = Store::open(dir.path(), other).unwrap_err();
    assert!(
        matches!(
            err,
            EngineError::EmbedderMismatch {
                stored_dim: 384,
                given_dim: 256,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn a_failed_fsync_poisons_until_reopen() {
    let fs = FaultyStorage::new();
    let store = Store::open(Path::new("/p"), small_options(&fs, 100)).unwrap();
    let kept = store.store(NewMemory::new("before")).unwrap().memory_id;
    fs.fail_op(2, false); // the append succeeds, its fsync fails
    assert!(matches!(
        store.store(NewMemory::new("failed")),
        Err(EngineError::Kernel(KernelError::Poisoned))
    ));
    // Even though the disk works again, nothing is retried or trusted.
    assert!(matches!(
        store.store(NewMemory::new("later")),
        Err(EngineError::Kernel(KernelError::Poisoned))
    ));
    assert!(matches!(
        store.delete(kept),
        Err(EngineError::Kernel(KernelError::Poisoned))
    ));
    assert!(store.stats().poisoned);
    assert_eq!(store.get(kept).unwrap().content, "before");
    // Reads that count an access keep answering; the access is not counted.
    let got = store.record_access(kept).unwrap();
    assert_eq!((got.content.as_str(), got.access_count), ("before", 0));
    let mut q = SearchRequest::new("before").mode(Mode::Text);
    q.user_id = None;
    let hits = store.search(&q).unwrap();
    assert_eq!(hits.count, 1);
    assert_eq!(hits.results[0].memory.access_count, 0);
    drop(store);
    let store = Store::open(Path::new("/p"), small_options(&fs, 100)).unwrap();
    assert!(!store.stats().poisoned);
    store.store(NewMemory::new("later")).unwrap();
}

#[test]
fn concurrent_writers_share_fsyncs() {
    let dir = tempfile::tempdir().unwrap();
    // Engine behaviour only: the hooks would merge "writer 0 note 1" with "writer 1 note 0".
    let options = StoreOptions::hashing()
        .memory_limit(100_000)
        .hooks(HookConfig::none());
    let store = Store::open(dir.path(), options).unwrap();
    let fsyncs_before = store.stats().log_fsyncs;
    std::thread::scope(|s| {
        for t in 0..8 {
            let store = store.clone();
            s.spawn(move || {
                for i in 0..200 {
                    store
                        .store(NewMemory::new(format!("writer {t} note {i}")))
                        .unwrap();
                }
            });
        }
    });
    let stats = store.stats();
    assert_eq!(stats.memories, 1600);
    assert_eq!(stats.durable_seq, stats.last_seq);
    let fsyncs = stats.log_fsyncs - fsyncs_before;
    assert!(
        fsyncs < 1600,
        "group commit shared no fsync: {fsyncs} fsyncs for 1600 writes"
    );
    eprintln!("1600 durable stores from 8 threads took {fsyncs} fsyncs");
}

#[test]
fn relaxed_policies_sync_later_and_say_so() {
    let fs = FaultyStorage::new();
    let none = Store::open(
        Path::new("/n"),
        small_options(&fs, 100).sync(SyncPolicy::None),
    )
    .unwrap();
    none.store(NewMemory::new("a")).unwrap();
    let s = none.stats();
    assert!(s.durable_seq < s.last_seq, "None must not fsync on write");
    none.flush().unwrap();
    assert_eq!(none.stats().durable_seq, none.stats().last_seq);
    let batch = Store::open(
        Path::new("/b"),
        small_options(&fs, 100).sync(SyncPolicy::Batch {
            interval: Duration::from_millis(5),
        }),
    )
    .unwrap();
    batch.store(NewMemory::new("b")).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while batch.stats().durable_seq < batch.stats().last_seq {
        assert!(std::time::Instant::now() < deadline, "batch sync never ran");
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn filters_apply_inside_the_scan_and_fill_k() {
    let fs = FaultyStorage::new();
    let store = Store::open(Path::new("/f"), small_options(&fs, 50)).unwrap();
    // 300 decoys closer to the query than the 5 targets; a post-filter over a top-k would miss.
    for i in 0..300 {
        store
            .store(
                amberdb::StoreRequest::new(
                    NewMemory::new(format!("decoy {i}")).category(Category::Other),
                )
                .with_vector(vec![1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]),
            )
            .unwrap();
    }
    let mut targets = Vec::new();
    store
        .create_entity(EntityKind::Agent, None, "a1", None, None)
        .unwrap();
    store
        .create_entity(EntityKind::Session, None, "s1", None, Some("a1"))
        .unwrap();
    for i in 0..5 {
        let m = NewMemory::new(format!("target {i}"))
            .category(Category::Security)
            .tags(["vault"])
            .agent("a1")
            .message("s1", Role::User);
        targets.push(
            store
                .store(
                    amberdb::StoreRequest::new(m)
                        .with_vector(vec![0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]),
                )
                .unwrap()
                .memory_id,
        );
    }
    let q = vec![1.0, 0.1, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0];
    // The plain engine search: exact cosine, nothing folded, no access counted.
    let by = |f: &dyn Fn(&mut SearchRequest)| {
        let mut req = SearchRequest::by_vector(q.clone()).limit(5).without_hooks();
        f(&mut req);
        store
            .search(&req)
            .unwrap()
            .results
            .iter()
            .map(|h| h.memory.id)
            .collect::<Vec<_>>()
    };
    assert_eq!(by(&|r| r.category = Some(Category::Security)), targets);
    assert_eq!(
        by(&|r| r.tags = vec!["VAULT".into(), "nope".into()]),
        targets
    );
    assert_eq!(
        by(&|r| {
            r.kind = Some(Kind::Message);
            r.session_id = Some("s1".into());
            r.agent_id = Some("a1".into());
        }),
        targets
    );
    assert!(
        store
            .search(&SearchRequest {
                session_id: Some("s2".into()),
                ..SearchRequest::by_vector(q.clone())
            })
            .is_err_and(|e| matches!(
                e,
                EngineError::EntityNotFound {
                    field: "session_id",
                    ..
                }
            )),
        "a session that does not exist is named, not an empty page"
    );
    // A user who has stored nothing has an empty page, not an error (issue #46).
    let empty = store
        .search(&SearchRequest::by_vector(q.clone()).user("nobody"))
        .unwrap();
    assert_eq!((empty.count, empty.total), (0, 0));
    let t0 = store.get(targets[0]).unwrap().created_at;
    assert_eq!(
        by(&|r| {
            r.created_after = Some(t0);
            r.category = Some(Category::Security);
        }),
        targets
    );
    assert!(by(&|r| r.created_before = Some(Timestamp(1))).is_empty());
    // Compact scan agrees here.
    store.checkpoint().unwrap();
    assert_eq!(
        by(&|r| {
            r.scan = ScanMode::Compact;
            r.category = Some(Category::Security);
        }),
        targets
    );
}

#[test]
fn list_recent_tags_and_stats() {
    let fs = FaultyStorage::new();
    let store = Store::open(Path::new("/l"), small_options(&fs, 100)).unwrap();
    let a = store
        .store(NewMemory::new("first").tags(["Rust", "db"]))
        .unwrap()
        .memory_id;
    let b = store
        .store(
            NewMemory::new("second")
                .tags(["rust"])
                .category(Category::BugFix),
        )
        .unwrap()
        .memory_id;
    store
        .store(NewMemory::new("other user").user("bob"))
        .unwrap();
    let recent: Vec<MemoryId> = store
        .list_recent(None, 10)
        .unwrap()
        .iter()
        .map(|m| m.id)
        .collect();
    assert_eq!(recent, vec![b, a]);
    assert_eq!(
        store.tag_frequencies(None).unwrap(),
        vec![("rust".to_string(), 2), ("db".to_string(), 1)]
    );
    store.delete(a).unwrap();
    assert_eq!(
        store.tag_frequencies(None).unwrap(),
        vec![("rust".to_string(), 1)]
    );
    let s = store.stats();
    assert_eq!((s.memories, s.users), (2, 2));
    assert_eq!(
        s.by_category
            .iter()
            .find(|c| c.0 == Category::BugFix)
            .unwrap()
            .1,
        1
    );
    let m = store.get(b).unwrap();
    assert_eq!(
        (m.kind, m.access_count, m.confidence, m.supersedes.len()),
        (Kind::Memory, 0, 0.5, 0)
    );
}

#[test]
fn a_durable_batch_takes_one_fsync_and_is_durable_when_it_returns() {
    use amberdb::storage::CrashImage;
    let fs = FaultyStorage::new();
    let store = Store::open(Path::new("/b"), small_options(&fs, 1000)).unwrap();
    let before = store.stats().log_fsyncs;
    let ids = store
        .durable_batch(|batch| {
            let ids: Vec<_> = (0..10)
                .map(|i| {
                    batch
                        .store(NewMemory::new(format!("batched {i}")))
                        .unwrap()
                        .memory_id
                })
                .collect();
            // Inside the batch nothing has been fsynced yet: a power cut now loses them all.
            let lost = Store::open(
                Path::new("/b"),
                small_options(&fs.crash_image(CrashImage::DropUnsynced), 1000),
            )
            .unwrap();
            assert_eq!(
                lost.stats().memories,
                0,
                "deferred writes are not durable yet"
            );
            ids
        })
        .unwrap();
    assert_eq!(
        store.stats().log_fsyncs - before,
        1,
        "ten stores, one fsync"
    );
    // Once it returns, a power cut keeps every one.
    let after = Store::open(
        Path::new("/b"),
        small_options(&fs.crash_image(CrashImage::DropUnsynced), 1000),
    )
    .unwrap();
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(after.get(*id).unwrap().content, format!("batched {i}"));
    }
    // Outside a batch every store waits for its own fsync again.
    store.store(NewMemory::new("alone")).unwrap();
    assert_eq!(store.stats().log_fsyncs - before, 2);
}

#[test]
fn only_the_batchs_handle_defers_and_a_batch_inside_a_batch_joins_it() {
    use amberdb::storage::CrashImage;
    let fs = FaultyStorage::new();
    let store = Store::open(Path::new("/h"), small_options(&fs, 1000)).unwrap();
    let before = store.stats().log_fsyncs;
    let (inner_pending, alone) = store
        .durable_batch(|batch| {
            batch.store(NewMemory::new("deferred")).unwrap();
            // A batch opened on the batch's handle joins it: its pending waits for nothing.
            let ((), inner) = batch.deferred_batch(|nested| {
                nested.store(NewMemory::new("nested")).unwrap();
            });
            // The store's own handle is not the batch's: this write waits for its fsync.
            let alone = store.store(NewMemory::new("alone")).unwrap().memory_id;
            assert_eq!(
                store.stats().log_fsyncs - before,
                1,
                "the plain write's own fsync"
            );
            (inner, alone)
        })
        .unwrap();
    inner_pending.wait().unwrap();
    let after = Store::open(
        Path::new("/h"),
        small_options(&fs.crash_image(CrashImage::DropUnsynced), 1000),
    )
    .unwrap();
    assert_eq!(after.stats().memories, 3);
    assert_eq!(after.get(alone).unwrap().content, "alone");
}

#[test]
fn a_durable_batch_whose_fsync_fails_is_an_error() {
    let fs = FaultyStorage::new();
    let store = Store::open(Path::new("/f"), small_options(&fs, 1000)).unwrap();
    let result = store.durable_batch(|batch| {
        batch.store(NewMemory::new("appended")).unwrap();
        fs.fail_op(1, false); // the batch's fsync
    });
    assert!(
        matches!(result, Err(EngineError::Kernel(KernelError::Poisoned))),
        "{result:?}"
    );
    assert!(store.stats().poisoned);
}

#[test]
fn a_scoped_store_reaches_its_users_records_only_through_every_call() {
    let fs = FaultyStorage::new();
    let store = Store::open(Path::new("/scoped"), small_options(&fs, 100)).unwrap();
    let bobs = store
        .store(NewMemory::new("bob's note about the cache").user("bob"))
        .unwrap()
        .memory_id;
    let ada = store.scoped("ada").unwrap();
    assert_eq!(ada.scope(), Some("ada"));
    let adas = ada
        .store(NewMemory::new("ada's note about the queue"))
        .unwrap();
    assert_eq!(
        store.get(adas.memory_id).unwrap().user_id,
        "ada",
        "no user means the scope's"
    );
    let before = store.stats().last_seq;
    let not_found = |r: Result<(), EngineError>| {
        assert!(
            matches!(r, Err(EngineError::NotFound { id }) if id == bobs),
            "{r:?}"
        );
    };
    not_found(ada.get(bobs).map(drop));
    not_found(ada.record_access(bobs).map(drop));
    not_found(ada.vector(bobs).map(drop));
    not_found(ada.lineage(bobs).map(drop));
    not_found(ada.history(bobs).map(drop));
    not_found(ada.delete(bobs));
    not_found(ada.feedback(bobs, amberdb::Feedback::Helpful).map(drop));
    not_found(
        ada.update(amberdb::UpdateRequest {
            memory_id: Some(bobs),
            tags: Some(vec!["mine".into()]),
            ..amberdb::UpdateRequest::default()
        })
        .map(drop),
    );
    let out_of_scope = |r: Result<(), EngineError>| {
        assert!(
            matches!(&r, Err(EngineError::OutOfScope { field: "user_id", user, .. }) if user == "bob"),
            "{r:?}"
        );
    };
    out_of_scope(
        ada.store(NewMemory::new("into bob's").user("bob"))
            .map(drop),
    );
    out_of_scope(
        ada.search(&SearchRequest::new("note").user("bob"))
            .map(drop),
    );
    out_of_scope(ada.list_recent(Some("bob"), 10).map(drop));
    out_of_scope(ada.user_stats(Some("bob")).map(drop));
    out_of_scope(ada.delete_entity(EntityKind::User, None, "bob").map(drop));
    out_of_scope(ada.unique_tags(Some("bob")).map(drop));
    out_of_scope(ada.tag_frequencies(Some("bob")).map(drop));
    out_of_scope(ada.get_entity(EntityKind::User, None, "bob").map(drop));
    out_of_scope(
        ada.list_entities(EntityKind::Session, Some("bob"))
            .map(drop),
    );
    assert_eq!(
        store.stats().last_seq,
        before,
        "every refusal changed nothing"
    );
    // What the scope sees: its own.
    assert_eq!(ada.memory_ids(), vec![adas.memory_id]);
    assert!(
        ada.all_entities()
            .iter()
            .all(|e| e.user_id == "ada" || e.id == "ada")
    );
    let users = ada.list_entities(EntityKind::User, None).unwrap();
    assert_eq!(
        users.iter().map(|u| u.id.as_str()).collect::<Vec<_>>(),
        ["ada"]
    );
    let found = ada
        .search(&SearchRequest::new("note about").mode(Mode::Text))
        .unwrap();
    assert_eq!(found.results.len(), 1);
    assert_eq!(found.results[0].memory.id, adas.memory_id);
    assert_eq!(
        store.get(bobs).unwrap().user_id,
        "bob",
        "bob's note untouched"
    );
}

/// `Store::import` keeps a memory's history (times, usage, feedback) instead of starting it
/// now, checks that history before anything happens, and the store reads it as it would its
/// own: recency order, retention by age, a reopen.
#[test]
fn an_import_keeps_times_and_counts_and_refuses_impossible_ones() {
    use amberdb::{Provenance, StoreRequest};
    let fs = FaultyStorage::new();
    let store = Store::open(Path::new("/a"), small_options(&fs, 100)).unwrap();
    let t = |s: &str| Timestamp::parse_rfc3339(s).unwrap();
    let kept = Provenance {
        created_at: t("2025-03-01T10:00:00Z"),
        updated_at: t("2025-04-01T10:00:00Z"),
        last_accessed_at: t("2025-05-01T10:00:00Z"),
        access_count: 7,
        helpful_count: 2,
        harmful_count: 1,
        confidence: Some(0.8),
        id: Some(MemoryId(40)),
    };
    let old = store
        .import(NewMemory::new("an old note from another store"), kept)
        .unwrap();
    let new = store.store(NewMemory::new("a note stored today")).unwrap();
    // Its source id is kept (nothing at or above it used yet); ids go on from it.
    assert_eq!((old.memory_id, new.memory_id), (MemoryId(40), MemoryId(41)));
    let m = store.get(old.memory_id).unwrap();
    assert_eq!(
        (m.created_at, m.updated_at, m.last_accessed_at),
        (kept.created_at, kept.updated_at, kept.last_accessed_at)
    );
    assert_eq!(
        (m.access_count, m.helpful_count, m.harmful_count),
        (7, 2, 1)
    );
    assert!((m.confidence - 0.8).abs() < 1e-6);
    assert_eq!(
        m.valid_from, kept.created_at,
        "it held since it was created"
    );
    assert_eq!(old.created_at, kept.created_at);
    // Newest first by creation, whatever the ids say.
    let recent: Vec<MemoryId> = store
        .list_recent(None, 10)
        .unwrap()
        .iter()
        .map(|m| m.id)
        .collect();
    assert_eq!(recent, vec![new.memory_id, old.memory_id]);

    let before = (store.stats(), fs.ops());
    let now = Timestamp::now();
    let future = Timestamp(now.0 + 3_600_000_000);
    let refused = [
        (Provenance::created(future), "created_at"),
        (Provenance::created(Timestamp(-1)), "created_at"),
        (
            Provenance {
                updated_at: t("2025-02-01T00:00:00Z"),
                ..kept
            },
            "updated_at",
        ),
        (
            Provenance {
                last_accessed_at: future,
                ..kept
            },
            "last_accessed_at",
        ),
        (
            Provenance {
                confidence: Some(1.5),
                ..kept
            },
            "confidence",
        ),
        (
            Provenance {
                id: Some(MemoryId(0)),
                ..kept
            },
            "id",
        ),
    ];
    for (p, field) in refused {
        match store.import(NewMemory::new("never stored"), p) {
            Err(EngineError::Invalid { field: f, .. }) => assert_eq!(f, field),
            other => panic!("{field}: {other:?}"),
        }
    }
    let with_valid_to_before_creation = NewMemory {
        valid_to: Some(t("2025-01-01T00:00:00Z")),
        ..NewMemory::new("closed before it began")
    };
    assert!(matches!(
        store.import(StoreRequest::new(with_valid_to_before_creation), kept),
        Err(EngineError::Invalid {
            field: "valid_to",
            ..
        })
    ));
    assert_eq!(
        before,
        (store.stats(), fs.ops()),
        "a refused import changed nothing"
    );

    drop(store);
    let store = Store::open(Path::new("/a"), small_options(&fs, 100)).unwrap();
    let reopened = store.get(old.memory_id).unwrap();
    assert_eq!(
        (reopened.created_at, reopened.access_count),
        (kept.created_at, 7)
    );
    // Filters by time read the kept age.
    let mut before_2026 = SearchRequest::new("note");
    before_2026.created_before = Some(t("2026-01-01T00:00:00Z"));
    let hits = store.search(&before_2026).unwrap();
    let ids: Vec<MemoryId> = hits.results.iter().map(|h| h.memory.id).collect();
    assert_eq!(ids, vec![old.memory_id]);
    // A source id below one already used cannot be kept: the next free one.
    let late = store
        .import(
            NewMemory::new("a note whose id was taken"),
            Provenance {
                id: Some(MemoryId(5)),
                ..kept
            },
        )
        .unwrap();
    assert_eq!(late.memory_id, MemoryId(new.memory_id.0 + 1));
}
