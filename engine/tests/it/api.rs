//! The library API as a user calls it: bad input, locking, embedder identity, poisoning,
//! group commit, sync policies, filters.

use super::support::small_options;
use amberdb::storage::FaultyStorage;
use amberdb::{
    Category, EngineError, EntityKind, Filter, HashingEmbedder, HookConfig, Kind, MemoryId, Mode,
    NewMemory, Role, SearchMemories, SearchRequest, Store, StoreOptions, SyncPolicy, Timestamp,
};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

#[test]
fn bad_input_is_a_typed_error_and_changes_nothing() {
    let fs = FaultyStorage::new();
    let store = Store::open(Path::new("/a"), small_options(&fs, 100)).unwrap();
    let id = store.store(NewMemory::new("the one good memory")).unwrap();
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
                .store_embedded(NewMemory::new("x"), vec![1.0; 7])
                .unwrap_err(),
            "dimension",
        ),
        (
            store
                .store_embedded(NewMemory::new("x"), vec![f32::NAN; 8])
                .unwrap_err(),
            "nan",
        ),
        (store.delete(MemoryId(999)).unwrap_err(), "delete missing"),
        (store.get(MemoryId(0)).unwrap_err(), "get 0"),
        (
            store
                .search(&SearchRequest::vector(vec![1.0; 3], 5))
                .unwrap_err(),
            "query dimension",
        ),
        (
            store.search(&SearchRequest::text("x", 0)).unwrap_err(),
            "k 0",
        ),
        (
            store.search(&SearchRequest::text("x", 1001)).unwrap_err(),
            "k large",
        ),
        (
            store.search(&SearchRequest::text("   ", 3)).unwrap_err(),
            "empty query",
        ),
        (
            store
                .store(NewMemory::new("the one good memory"))
                .unwrap_err(),
            "duplicate",
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
    assert!(matches!(cases[14].0, EngineError::AlreadyExists { existing } if existing == id));
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
        Err(EngineError::MemoryLimitReached { limit: 2 })
    ));
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
        Err(EngineError::Locked { .. })
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
    let kept = store.store(NewMemory::new("before")).unwrap();
    fs.fail_op(2, false); // the append succeeds, its fsync fails
    assert!(matches!(
        store.store(NewMemory::new("failed")),
        Err(EngineError::Poisoned)
    ));
    // Even though the disk works again, nothing is retried or trusted.
    assert!(matches!(
        store.store(NewMemory::new("later")),
        Err(EngineError::Poisoned)
    ));
    assert!(matches!(store.delete(kept), Err(EngineError::Poisoned)));
    assert!(store.stats().poisoned);
    assert_eq!(store.get(kept).unwrap().content, "before");
    // Reads that count an access keep answering; the access is not counted.
    let got = store.get_by_memory_id(kept).unwrap();
    assert_eq!((got.content.as_str(), got.access_count), ("before", 0));
    let mut q = SearchMemories::new("before").mode(Mode::Text);
    q.user_id = None;
    let hits = store.search_memories(&q).unwrap();
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
            .store_embedded(
                NewMemory::new(format!("decoy {i}")).category(Category::Other),
                vec![1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
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
                .store_embedded(m, vec![0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
                .unwrap(),
        );
    }
    let q = vec![1.0, 0.1, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0];
    let by = |f: Filter| {
        store
            .search(&SearchRequest::vector(q.clone(), 5).filter(f))
            .unwrap()
            .iter()
            .map(|h| h.memory.id)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        by(Filter {
            category: Some(Category::Security),
            ..Filter::default()
        }),
        targets
    );
    assert_eq!(
        by(Filter {
            tags_any: vec!["VAULT".into(), "nope".into()],
            ..Filter::default()
        }),
        targets
    );
    assert_eq!(
        by(Filter {
            kind: Some(Kind::Message),
            session_id: Some("s1".into()),
            agent_id: Some("a1".into()),
            ..Filter::default()
        }),
        targets
    );
    assert!(
        by(Filter {
            session_id: Some("s2".into()),
            ..Filter::default()
        })
        .is_empty()
    );
    assert!(by(Filter::user("nobody")).is_empty());
    let t0 = store.get(targets[0]).unwrap().created_at;
    assert_eq!(
        by(Filter {
            created_after: Some(t0),
            category: Some(Category::Security),
            ..Filter::default()
        }),
        targets
    );
    assert!(
        by(Filter {
            created_before: Some(Timestamp(0)),
            ..Filter::default()
        })
        .is_empty()
    );
    // Compact scan agrees here.
    let compact = SearchRequest {
        scan: amberdb::ScanMode::Compact,
        ..SearchRequest::vector(q.clone(), 5).filter(Filter {
            category: Some(Category::Security),
            ..Filter::default()
        })
    };
    store.checkpoint().unwrap();
    assert_eq!(
        store
            .search(&compact)
            .unwrap()
            .iter()
            .map(|h| h.memory.id)
            .collect::<Vec<_>>(),
        targets
    );
}

#[test]
fn list_recent_tags_and_stats() {
    let fs = FaultyStorage::new();
    let store = Store::open(Path::new("/l"), small_options(&fs, 100)).unwrap();
    let a = store
        .store(NewMemory::new("first").tags(["Rust", "db"]))
        .unwrap();
    let b = store
        .store(
            NewMemory::new("second")
                .tags(["rust"])
                .category(Category::BugFix),
        )
        .unwrap();
    store
        .store(NewMemory::new("other user").user("bob"))
        .unwrap();
    let recent: Vec<MemoryId> = store
        .list_recent("default", 10)
        .unwrap()
        .iter()
        .map(|m| m.id)
        .collect();
    assert_eq!(recent, vec![b, a]);
    assert_eq!(
        store.tag_frequencies("default"),
        vec![("rust".to_string(), 2), ("db".to_string(), 1)]
    );
    store.delete(a).unwrap();
    assert_eq!(
        store.tag_frequencies("default"),
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
        .durable_batch(|| {
            let ids: Vec<_> = (0..10)
                .map(|i| store.store(NewMemory::new(format!("batched {i}"))).unwrap())
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
fn a_durable_batch_whose_fsync_fails_is_an_error() {
    let fs = FaultyStorage::new();
    let store = Store::open(Path::new("/f"), small_options(&fs, 1000)).unwrap();
    let result = store.durable_batch(|| {
        store.store(NewMemory::new("appended")).unwrap();
        fs.fail_op(1, false); // the batch's fsync
    });
    assert!(matches!(result, Err(EngineError::Poisoned)), "{result:?}");
    assert!(store.stats().poisoned);
}
