//! Every error case of every seed operation, and the seed's result and error shapes
//! (`docs/semantics.md`, "Operations"), on a no-model store.

use amberdb::{
    Category, EngineError, Feedback, MemoryId, NewMemory, SearchRequest, Store, StoreOptions,
    StoreRequest, Timestamp, UpdateRequest,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

fn open() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreOptions::hashing().memory_limit(3)).unwrap();
    (dir, store)
}

fn limit(e: &EngineError) -> Option<usize> {
    match e {
        EngineError::LimitExceeded { limit, .. } => Some(*limit),
        _ => None,
    }
}

fn invalid_field(e: &EngineError) -> Option<&'static str> {
    match e {
        EngineError::Invalid { field, .. } => Some(field),
        _ => None,
    }
}

#[test]
fn store_memory_errors_name_the_rule_and_store_nothing() {
    let (_d, store) = open();
    let st = |m: NewMemory| store.store(StoreRequest::new(m)).unwrap_err();
    assert_eq!(limit(&st(NewMemory::new("x".repeat(10_001)))), Some(10_000));
    assert_eq!(invalid_field(&st(NewMemory::new(" \n "))), Some("content"));
    assert_eq!(
        limit(&st(
            NewMemory::new("x").tags((0..11).map(|i| format!("t{i}")))
        )),
        Some(10)
    );
    assert_eq!(
        limit(&st(NewMemory::new("x").tags(["y".repeat(101)]))),
        Some(100)
    );
    for bad in ["c++", "naïve", "a/b", "foo:bar", "type:", ""] {
        assert_eq!(
            invalid_field(&st(NewMemory::new("x").tags([bad]))),
            Some("tags"),
            "{bad}"
        );
    }
    assert_eq!(store.stats().memories, 0, "nothing was stored");
    let empty_category = store
        .store(StoreRequest::new(NewMemory::new("x").category_text("")))
        .unwrap();
    assert_eq!(empty_category.category_reason, "fallback");
    let first = empty_category.memory_id;
    // A duplicate is an outcome naming the memory that holds the content.
    let dup = store.store(NewMemory::new("x")).unwrap();
    assert_eq!(
        (dup.outcome, dup.memory_id),
        (amberdb::Outcome::Duplicate, first)
    );
    store.store(NewMemory::new("two, about trains")).unwrap();
    store
        .store(NewMemory::new("the third one: kafka retention"))
        .unwrap();
    let full = st(NewMemory::new("three, about the weather in june"));
    assert!(matches!(
        full,
        EngineError::MemoryLimitReached {
            limit: 3,
            held: 3,
            adding: 1
        }
    ));
}

#[test]
fn search_list_and_get_errors() {
    let (_d, store) = open();
    let id = store
        .store(NewMemory::new("the staging password rotates"))
        .unwrap()
        .memory_id;
    let search = |f: &dyn Fn(&mut SearchRequest)| {
        let mut r = SearchRequest::new("password");
        f(&mut r);
        store.search(&r)
    };
    assert_eq!(
        invalid_field(&search(&|r| r.query = "  ".into()).unwrap_err()),
        Some("query")
    );
    assert_eq!(
        limit(&search(&|r| r.query = "q".repeat(1001)).unwrap_err()),
        Some(1000)
    );
    assert_eq!(limit(&search(&|r| r.limit = 51).unwrap_err()), Some(50));
    assert_eq!(
        invalid_field(&search(&|r| r.limit = 0).unwrap_err()),
        Some("limit")
    );
    assert_eq!(
        limit(&search(&|r| r.offset = 10_001).unwrap_err()),
        Some(10_000)
    );
    assert_eq!(
        invalid_field(&Category::parse("secrets").unwrap_err().into()),
        Some("Category"),
        "an unknown category is an error, not an unfiltered search"
    );
    assert_eq!(
        invalid_field(&search(&|r| r.hooks.dedup_threshold = Some(2.5)).unwrap_err()),
        Some("dedup_threshold")
    );
    let ok = search(&|r| r.category = Some(Category::Other)).unwrap();
    assert_eq!((ok.count, ok.total), (1, 1));
    let nobody = search(&|r| r.user_id = Some("nobody".into())).unwrap();
    assert_eq!(
        (nobody.count, nobody.total),
        (0, 0),
        "a user who stored nothing has an empty page, not an error (a new user's first turn)"
    );
    // No threshold by default: the one memory is the best there is.
    let unrelated = search(&|r| r.query = "zebra crossing".into()).unwrap();
    assert_eq!(unrelated.count, 1);
    let none = search(&|r| {
        r.query = "zebra crossing".into();
        r.threshold = Some(0.6);
    })
    .unwrap();
    assert_eq!((none.count, none.results.len()), (0, 0));

    assert_eq!(limit(&store.list_recent(None, 51).unwrap_err()), Some(50));
    assert_eq!(
        invalid_field(&store.list_recent(None, 0).unwrap_err()),
        Some("limit")
    );
    assert!(matches!(
        store.record_access(MemoryId(99)),
        Err(EngineError::NotFound { .. })
    ));
    let got = store.record_access(id).unwrap();
    assert_eq!(got.access_count, 2, "the search above and this get");
    let json = serde_json::to_value(&got).unwrap();
    assert_eq!(json["id"], id.0);
    assert_eq!(json["category"], "other");
    assert!(json["created_at"].as_str().unwrap().ends_with('Z'));
    assert!(matches!(
        store.get(MemoryId(99)),
        Err(EngineError::NotFound { id: MemoryId(99) })
    ));
}

#[test]
fn delete_cleanup_feedback_update_tags_and_snapshot_errors() {
    let (_d, store) = open();
    let id = store
        .store(NewMemory::new("a").tags(["x"]))
        .unwrap()
        .memory_id;
    assert!(matches!(
        store.delete(MemoryId(7)),
        Err(EngineError::NotFound { .. })
    ));
    assert_eq!(
        invalid_field(&store.clear_old_memories(None, 0, 1000).unwrap_err()),
        Some("days_old")
    );
    assert_eq!(
        limit(&store.clear_old_memories(None, 366, 1000).unwrap_err()),
        Some(365)
    );
    assert_eq!(
        invalid_field(&store.clear_old_memories(None, 30, 99).unwrap_err()),
        Some("max_to_keep")
    );
    assert_eq!(
        limit(&store.clear_old_memories(None, 30, 10_001).unwrap_err()),
        Some(10_000)
    );
    let cleared = store.clear_old_memories(None, 30, 100).unwrap();
    assert_eq!(
        (cleared.deleted_count, cleared.remaining_count),
        (0, 1),
        "nothing is old"
    );
    assert!(cleared.deleted_ids.is_empty());
    assert!(matches!(
        store.feedback(MemoryId(7), Feedback::Helpful),
        Err(EngineError::NotFound { .. })
    ));
    assert_eq!(
        invalid_field(&store.update(UpdateRequest::default()).unwrap_err()),
        Some("memory_id")
    );
    assert_eq!(
        invalid_field(
            &store
                .update(UpdateRequest {
                    memory_id: Some(id),
                    ..UpdateRequest::default()
                })
                .unwrap_err()
        ),
        Some("update")
    );
    assert!(matches!(
        store.update(UpdateRequest {
            memory_id: Some(MemoryId(7)),
            content: Some("b".into()),
            ..UpdateRequest::default()
        }),
        Err(EngineError::NotFound { .. })
    ));
    assert_eq!(
        invalid_field(&store.tag_normalize_preview(None, 0.4, 200).unwrap_err()),
        Some("threshold")
    );
    assert_eq!(
        limit(&store.tag_normalize_preview(None, 0.9, 10_001).unwrap_err()),
        Some(10_000)
    );
    assert!(matches!(
        store.tag_normalize_apply(None, "p", "missing", 0.9, 200),
        Err(EngineError::SnapshotNotFound { .. })
    ));
    assert!(matches!(
        store.snapshot_restore(None, "missing"),
        Err(EngineError::SnapshotNotFound { .. })
    ));
    assert_eq!(
        limit(&store.snapshot_create(None, &"d".repeat(1001)).unwrap_err()),
        Some(1000)
    );
    assert_eq!(
        invalid_field(&store.compact_preview(None, Some(0.0)).unwrap_err()),
        Some("distance")
    );
    assert!(matches!(
        store.compact_undo(id),
        Err(EngineError::Invalid {
            field: "memory_id",
            ..
        })
    ));
    for user in ["", "bad\u{7}user"] {
        assert_eq!(
            invalid_field(&store.unique_tags(Some(user)).unwrap_err()),
            Some("user_id")
        );
        assert_eq!(
            invalid_field(&store.user_stats(Some(user)).unwrap_err()),
            Some("user_id")
        );
    }
    let stats = serde_json::to_value(store.user_stats(None).unwrap()).unwrap();
    assert_eq!(stats["total_memories"], 1);
    assert_eq!(stats["health_status"], "Healthy");
    assert_eq!(stats["embedding_model"], "amberdb-hashing-v1-384");
    store.delete(id).unwrap();
    assert!(
        store.unique_tags(None).unwrap().is_empty(),
        "frequencies follow deletes"
    );
    assert_eq!(
        store.canonical_tags(None).unwrap(),
        vec!["x"],
        "canonical tags stay"
    );
}

#[test]
fn clear_old_memories_deletes_the_least_accessed_old_ones_in_one_frame() {
    let now = Arc::new(AtomicI64::new(Timestamp::now().0));
    let clock_now = Arc::clone(&now);
    let clock: amberdb::Clock = Arc::new(move || Timestamp(clock_now.load(Ordering::SeqCst)));
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreOptions::hashing().clock(clock)).unwrap();
    let day = 86_400_000_000;
    // 120 memories 40 days old, 30 of them read once; then 10 new ones.
    let mut old = Vec::new();
    for i in 0..120 {
        old.push(
            store
                .store(NewMemory::new(format!(
                    "old note {i} on subject {}",
                    i * 7919 + 1
                )))
                .unwrap()
                .memory_id,
        );
        now.fetch_add(1, Ordering::SeqCst);
    }
    for id in &old[..30] {
        store.record_access(*id).unwrap();
    }
    now.fetch_add(40 * day, Ordering::SeqCst);
    for i in 0..10 {
        store
            .store(NewMemory::new(format!(
                "new note {i} on subject {}",
                i * 104_729 + 2
            )))
            .unwrap();
    }
    assert_eq!(store.stats().memories, 130);
    let cleared = store.clear_old_memories(None, 30, 100).unwrap();
    // 130 - 100 = 30 to delete, all old ones never read, oldest first.
    assert_eq!(cleared.deleted_count, 30);
    assert_eq!(cleared.deleted_ids, old[30..60].to_vec());
    assert_eq!(cleared.remaining_count, 100);
    // Younger than days_old is never deleted, even over max_to_keep.
    let cleared = store.clear_old_memories(None, 50, 100).unwrap();
    assert_eq!(cleared.deleted_count, 0);
    assert_eq!(store.stats().memories, 100);
    let stats = store.user_stats(None).unwrap();
    assert_eq!(stats.recent_week_count, 10);
}

#[test]
fn a_search_counts_an_access_at_most_once_in_fifteen_minutes() {
    let now = Arc::new(AtomicI64::new(Timestamp::now().0));
    let clock_now = Arc::clone(&now);
    let clock: amberdb::Clock = Arc::new(move || Timestamp(clock_now.load(Ordering::SeqCst)));
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreOptions::hashing().clock(clock)).unwrap();
    let id = store
        .store(NewMemory::new("the build cache lives on the nfs share"))
        .unwrap()
        .memory_id;
    let search = || {
        let hits = store
            .search(&SearchRequest::new("where is the build cache"))
            .unwrap();
        hits.results[0].memory.access_count
    };
    // 2,000 searches in a burst: one access, so `frequency` cannot feed on its own results.
    for _ in 0..2000 {
        assert_eq!(search(), 1);
        now.fetch_add(1_000, Ordering::SeqCst);
    }
    now.fetch_add(amberdb::SEARCH_ACCESS_INTERVAL_US, Ordering::SeqCst);
    assert_eq!(search(), 2);
    // An explicit get is a use: it always counts.
    assert_eq!(store.record_access(id).unwrap().access_count, 3);
    assert_eq!(store.record_access(id).unwrap().access_count, 4);
}
