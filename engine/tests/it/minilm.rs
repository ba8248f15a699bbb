//! The store with its default embedder, the real MiniLM model (fetched by
//! `scripts/fetch-model`, which `scripts/test` runs first; missing files fail these tests).

use amberdb::{EngineError, NewMemory, SearchRequest, Store, StoreOptions, Strategy};

fn minilm_options() -> StoreOptions {
    StoreOptions::minilm().unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn a_search_for_car_finds_automobile_among_distractors() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), minilm_options()).unwrap();
    let distractors = [
        "physician",
        "The quarterly tax filing deadline is next Tuesday.",
        "A penguin waddled across the frozen beach at dawn.",
        "User prefers tabs over spaces in Python files",
        "the kubernetes pod is stuck in CrashLoopBackOff",
        "banana bread needs three ripe bananas",
    ];
    for text in distractors {
        store.store(NewMemory::new(text)).unwrap();
    }
    let automobile = store.store(NewMemory::new("automobile")).unwrap().memory_id;
    store.close().unwrap();

    // After a reopen too: the vectors are the stored ones, the query is embedded fresh.
    let store = Store::open(dir.path(), minilm_options()).unwrap();
    let mut request = SearchRequest::new("car")
        .strategy(Strategy::Similarity)
        .without_hooks();
    request.threshold = Some(0.3);
    let hits = store.search(&request).unwrap().results;
    let found: Vec<(&str, f32)> = hits
        .iter()
        .map(|h| (h.memory.content.as_str(), h.score))
        .collect();
    eprintln!("car at 0.3: {found:?}");
    assert_eq!(
        hits.first().map(|h| h.memory.id),
        Some(automobile),
        "{found:?}"
    );
    assert!(hits[0].score >= 0.8, "{found:?}");
    assert!(
        hits.iter()
            .all(|h| h.score >= 0.3 && !h.memory.content.contains("penguin")),
        "{found:?}"
    );
}

#[test]
fn a_store_keeps_the_embedder_it_was_created_with() {
    let hashing_store = tempfile::tempdir().unwrap();
    Store::open(hashing_store.path(), StoreOptions::hashing())
        .unwrap()
        .close()
        .unwrap();
    let minilm_store = tempfile::tempdir().unwrap();
    Store::open(minilm_store.path(), minilm_options())
        .unwrap()
        .close()
        .unwrap();

    // Both are 384-d: only the recorded model id tells them apart.
    for (dir, other) in [
        (hashing_store.path(), minilm_options()),
        (minilm_store.path(), StoreOptions::hashing()),
    ] {
        match Store::open(dir, other) {
            Err(EngineError::EmbedderMismatch {
                stored_model,
                given_model,
                ..
            }) => {
                assert_ne!(stored_model, given_model);
            }
            other => panic!("expected EmbedderMismatch, got {other:?}"),
        }
    }
}

#[test]
fn missing_model_files_say_how_to_get_them() {
    let dir = tempfile::tempdir().unwrap();
    let files = amberdb_embed::ModelFiles::in_dir(&dir.path().join("nowhere"));
    let error = amberdb_embed::OnnxEmbedder::open(&files, amberdb_embed::OnnxConfig::default())
        .map(|_| ())
        .map_err(EngineError::from)
        .expect_err("no model there");
    let message = error.to_string();
    assert!(
        message.contains("amberdb model fetch") && message.contains("nowhere"),
        "{message}"
    );
}

#[test]
fn a_batch_is_embedded_once_and_stored_as_one_store_each() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), minilm_options()).unwrap();
    let results = store
        .store_batch(vec![
            NewMemory::new("the deploy failed because the cache was cold"),
            NewMemory::new("   "), // invalid: empty content
            NewMemory::new("User prefers dark mode in every editor"),
            NewMemory::new("the deploy failed because the cache was cold"), // same as the first
            NewMemory::new("x".repeat(10_001)), // over the content limit: refused, not cut
        ])
        .unwrap();
    assert_eq!(results.len(), 5);
    let first = results[0].as_ref().unwrap().memory_id;
    assert!(
        matches!(
            results[1],
            Err(EngineError::Invalid {
                field: "content",
                ..
            })
        ),
        "{results:?}"
    );
    let second = results[2].as_ref().unwrap().memory_id;
    assert!(
        matches!(&results[3], Ok(s) if s.outcome == amberdb::Outcome::Duplicate && s.memory_id == first),
        "{results:?}"
    );
    assert!(
        matches!(results[4], Err(EngineError::LimitExceeded { .. })),
        "{results:?}"
    );
    assert_eq!(store.stats().memories, 2);

    // Each stored vector is the one `store` would have computed for that text alone.
    let embedder = minilm_options().embedder;
    for (id, text) in [
        (first, "the deploy failed because the cache was cold"),
        (second, "User prefers dark mode in every editor"),
    ] {
        let alone = embedder.embed(text).unwrap();
        let stored = store.vector(id).unwrap();
        let cos: f32 = alone.iter().zip(&stored).map(|(a, b)| a * b).sum();
        assert!(cos > 0.9999, "{text}: cosine {cos}");
    }
    let hits = store
        .search(&SearchRequest::new("which theme does the user like").limit(1))
        .unwrap()
        .results;
    assert_eq!(hits[0].memory.id, second);
}
