//! The seed's examples with the real model (`docs/semantics.md`): tag normalization, category
//! normalization, store-time dedup with the fact guard, lineage, load-time dedup, compaction
//! and its undo, tag preview / apply / snapshots, update and feedback.

use amberdb::{
    Category, EngineError, Feedback, HookConfig, HookOverrides, NewMemory, Outcome, Relation,
    SearchRequest, Store, StoreOptions, StoreRequest, Strategy, UpdateRequest, WriteHook,
};

fn minilm() -> StoreOptions {
    StoreOptions::minilm().unwrap_or_else(|e| panic!("{e}"))
}

fn open() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), minilm()).unwrap();
    (dir, store)
}

/// The tag `first` registers, then the tag `second` is stored as (user `n`, so each pair
/// starts from no canonical tags; semantic dedup off, so the two notes stay two).
fn tag_pair(store: &Store, first: &str, second: &str, n: usize) -> String {
    let user = format!("user {n}");
    store
        .store(
            NewMemory::new(format!("note tagged {first}"))
                .tags([first])
                .user(&user),
        )
        .unwrap();
    let s = store
        .store(StoreRequest {
            vector: None,
            memory: NewMemory::new(format!("another note tagged {second}"))
                .tags([second])
                .user(&user),
            hooks: HookOverrides {
                skip: vec![WriteHook::SemanticDedup],
                ..HookOverrides::default()
            },
        })
        .unwrap();
    assert_eq!(s.outcome, Outcome::Stored, "{s:?}");
    s.tags[0].clone()
}

#[test]
fn the_seed_tag_examples_with_the_real_model() {
    let (_dir, store) = open();
    // Merge: "api 2" counts as version 2.0, the same version as "API v2.0" (threshold 0.85).
    assert_eq!(tag_pair(&store, "API v2.0", "api 2", 1), "api v2.0");
    // No merge: the version guard, the colon guard, the asymmetry guard, glued numbers.
    assert_eq!(tag_pair(&store, "api v1", "api v2", 2), "api v2");
    assert_eq!(tag_pair(&store, "type:refactor", "type:bug", 3), "type:bug");
    assert_eq!(tag_pair(&store, "domain:billing", "billing", 4), "billing");
    assert_eq!(tag_pair(&store, "php7", "php8", 5), "php8");
    assert_eq!(tag_pair(&store, "type:refactor", "refactor", 6), "refactor");
    // Within one user, later tags meet every earlier canonical tag: "api v2" is version 2.0,
    // the same version as "API v2.0", so it joins it at 0.85.
    assert_eq!(tag_pair(&store, "API v2.0", "api v2", 7), "api v2.0");
    let canonical = store.canonical_tags(Some("user 2")).unwrap();
    assert_eq!(canonical, vec!["api v1", "api v2"]);
    assert_eq!(
        store.canonical_tags(Some("user 1")).unwrap(),
        vec!["api v2.0"]
    );
}

#[test]
fn laravel_joins_laravel_framework_only_through_the_boost() {
    let (_dir, store) = open();
    let embedder = amberdb_embed::default_embedder().unwrap();
    let v = embedder
        .embed_batch(&["laravel", "laravel framework"])
        .unwrap();
    let sim: f32 = v[0].iter().zip(&v[1]).map(|(a, b)| a * b).sum();
    eprintln!("laravel ~ laravel framework: {sim:.4}");
    assert!(
        (0.87..0.90).contains(&sim),
        "the boost is what decides: {sim}"
    );
    assert_eq!(
        tag_pair(&store, "laravel framework", "laravel", 1),
        "laravel framework"
    );
}

#[test]
fn categories_from_the_dictionary_and_from_meaning() {
    let (_dir, store) = open();
    let cases = [
        ("auth", Category::Security, "dictionary"),
        ("bug", Category::BugFix, "dictionary"),
        ("perf", Category::Performance, "dictionary"),
        ("Security", Category::Security, "exact"),
        (
            "speed-ups and optimizations of slow code",
            Category::Performance,
            "semantic",
        ),
        (
            "improving speed and throughput",
            Category::Performance,
            "semantic",
        ),
        ("zzzz qqqq", Category::Other, "fallback"),
    ];
    for (i, (text, want, reason)) in cases.into_iter().enumerate() {
        let s = store
            .store(StoreRequest::new(
                NewMemory::new(format!("category case {i}")).category_text(text),
            ))
            .unwrap();
        assert_eq!((s.category, s.category_reason), (want, reason), "{text}");
    }
}

/// `text` stored with semantic dedup off for this request.
fn no_dedup(text: &str) -> StoreRequest {
    StoreRequest {
        vector: None,
        memory: NewMemory::new(text),
        hooks: HookOverrides {
            skip: vec![WriteHook::SemanticDedup],
            ..HookOverrides::default()
        },
    }
}

const COFFEE: [&str; 3] = [
    "User likes coffee, flat white usually",
    "They are a coffee enthusiast, favorite coffee is flatwhite",
    "User loves coffee, especially flat white",
];

#[test]
fn paraphrases_stay_apart_unless_the_store_merges_paraphrases() {
    // The default merges only restatements in the same words: three paraphrases are three.
    let (_dir, store) = open();
    for text in COFFEE {
        let s = store.store(NewMemory::new(text)).unwrap();
        assert_eq!(s.outcome, Outcome::Stored, "{s:?}");
    }
    let same_words = store
        .store(NewMemory::new("user likes coffee - flat white, usually!"))
        .unwrap();
    assert_eq!(same_words.outcome, Outcome::Merged, "{same_words:?}");
    assert_eq!(store.list_recent(None, 50).unwrap().len(), 3);
}

/// A MiniLM store whose merges take paraphrases (`Merge::Paraphrases`).
fn paraphrase_merging_store(dir: &std::path::Path) -> Store {
    Store::open(
        dir,
        minilm().hooks(HookConfig {
            merge: amberdb::Merge::Paraphrases,
            ..HookConfig::default()
        }),
    )
    .unwrap()
}

#[test]
fn three_coffee_paraphrases_end_as_one_memory_with_lineage() {
    let dir = tempfile::tempdir().unwrap();
    let store = paraphrase_merging_store(dir.path());
    let mut stored = Vec::new();
    for text in COFFEE {
        let s = store
            .store(StoreRequest::new(NewMemory::new(text)))
            .unwrap();
        eprintln!(
            "{text:?}: {:?} {} {:?}",
            s.outcome, s.memory_id, s.supersedes
        );
        stored.push(s);
    }
    assert_eq!(stored[0].outcome, Outcome::Stored);
    assert_ne!(stored[1].outcome, Outcome::Stored, "{:?}", stored[1]);
    assert_ne!(stored[2].outcome, Outcome::Stored, "{:?}", stored[2]);
    let live = store.list_recent(None, 50).unwrap();
    assert_eq!(live.len(), 1, "{:?}", live);
    let last = stored[2].memory_id;
    assert_eq!(live[0].id, last);
    let lineage: Vec<String> = store
        .lineage(last)
        .unwrap()
        .into_iter()
        .map(|m| m.content)
        .collect();
    for text in COFFEE {
        assert!(
            lineage.contains(&text.to_owned()) || live[0].content == text,
            "{text} in lineage {lineage:?}"
        );
    }
    // The first memory's id now leads to the live one.
    match store.get(stored[0].memory_id) {
        Err(EngineError::Archived {
            superseded_by: Some(by),
            ..
        }) => assert_eq!(by, last),
        other => panic!("{other:?}"),
    }
}

#[test]
fn different_subjects_relations_and_extra_values_stay_apart() {
    let (_dir, store) = open();
    let pairs = [
        (
            "Alice owns the billing service",
            "Bob owns the billing service",
        ),
        (
            "Marie Curie was born in the city of Warsaw",
            "Marie Curie died in the city of Warsaw",
        ),
        ("Alice likes green tea", "Alice likes black coffee"),
        ("Bob speaks French at work", "Bob speaks German at work"),
    ];
    for (i, (a, b)) in pairs.into_iter().enumerate() {
        let user = format!("u{i}");
        store.store(NewMemory::new(a).user(&user)).unwrap();
        let s = store
            .store(StoreRequest::new(NewMemory::new(b).user(&user)))
            .unwrap();
        assert_eq!(s.outcome, Outcome::Stored, "{a} / {b}: {s:?}");
        assert_eq!(
            store.list_recent(Some(&user), 10).unwrap().len(),
            2,
            "{a} / {b}"
        );
    }
}

#[test]
fn a_new_value_of_the_same_slot_supersedes_the_old_one() {
    let (_dir, store) = open();
    let pairs = [
        (
            "The deploy runs on port 8080",
            "The deploy runs on port 9090",
        ),
        (
            "The team uses Postgres for the billing data",
            "The team uses MySQL for the billing data",
        ),
    ];
    for (i, (a, b)) in pairs.into_iter().enumerate() {
        let user = format!("u{i}");
        let old = store
            .store(NewMemory::new(a).user(&user))
            .unwrap()
            .memory_id;
        let s = store
            .store(StoreRequest::new(NewMemory::new(b).user(&user)))
            .unwrap();
        assert_eq!(s.outcome, Outcome::Superseded, "{a} / {b}: {s:?}");
        assert_eq!(s.supersedes, vec![old], "{a} / {b}");
        assert_eq!(s.decisions.len(), 1, "{a} / {b}");
        assert_eq!(s.decisions[0].memory_id, old);
        assert_eq!(s.decisions[0].relation, Relation::Updates);
        assert!(
            s.decisions[0].reason.reason().contains("new value"),
            "{:?}",
            s.decisions
        );
        let live = store.list_recent(Some(&user), 10).unwrap();
        assert_eq!(live.len(), 1, "{a} / {b}");
        assert_eq!(live[0].content, b);
    }
}

#[test]
fn an_opposite_statement_supersedes_the_older_one() {
    let (_dir, store) = open();
    for (i, (old, new)) in [
        ("User likes coffee", "User dislikes coffee"),
        ("User likes coffee", "User does not like coffee"),
        (
            "Always run migrations before deploying",
            "Never run migrations before deploying",
        ),
        ("The user prefers dark mode", "The user prefers light mode"),
    ]
    .into_iter()
    .enumerate()
    {
        let user = format!("u{i}");
        let older = store
            .store(NewMemory::new(old).user(&user))
            .unwrap()
            .memory_id;
        let s = store
            .store(StoreRequest::new(NewMemory::new(new).user(&user)))
            .unwrap();
        assert_eq!(s.outcome, Outcome::Superseded, "{old} / {new}: {s:?}");
        assert_eq!(s.supersedes, vec![older]);
        let live = store.list_recent(Some(&user), 10).unwrap();
        assert_eq!(live.len(), 1);
        assert_eq!(live[0].content, new, "not blended");
        assert_eq!(store.lineage(s.memory_id).unwrap()[0].content, old);
    }
}

#[test]
fn dedup_can_be_switched_off_or_tightened_per_request() {
    let (_dir, store) = open();
    store.store(NewMemory::new(COFFEE[0])).unwrap();
    let off = StoreRequest {
        vector: None,
        memory: NewMemory::new(COFFEE[2]),
        hooks: HookOverrides {
            skip: vec![WriteHook::SemanticDedup],
            ..HookOverrides::default()
        },
    };
    assert_eq!(store.store(off).unwrap().outcome, Outcome::Stored);
    let strict = StoreRequest {
        vector: None,
        memory: NewMemory::new(COFFEE[1]),
        hooks: HookOverrides {
            dedup_distance: Some(0.1),
            ..HookOverrides::default()
        },
    };
    assert_eq!(store.store(strict).unwrap().outcome, Outcome::Stored);
    assert_eq!(store.list_recent(None, 10).unwrap().len(), 3);
}

#[test]
fn search_folds_near_duplicates_and_counts_access() {
    let (_dir, store) = open();
    for text in COFFEE
        .iter()
        .chain(&["The staging database password rotates every monday"])
    {
        store.store(no_dedup(text)).unwrap();
    }
    // The default fold hides only a restatement in the same words, and keeps the page in
    // score order; the three paraphrases stay three results.
    {
        let (_dir, store) = open();
        for text in COFFEE
            .iter()
            .chain(&["user likes coffee - flat white, usually!"])
        {
            store.store(no_dedup(text)).unwrap();
        }
        let mut r = SearchRequest::new("what coffee does the user drink");
        r.threshold = Some(-1.0);
        r.hooks.count_access = Some(false);
        let hits = store.search(&r).unwrap();
        assert_eq!((hits.count, hits.folded_total), (3, 1), "{hits:?}");
        assert!(hits.results.windows(2).all(|w| w[0].score >= w[1].score));
    }
    // Every memory is a candidate (threshold -1), ranked by cosine.
    // The fact guard's fold (opt-in) folds the paraphrases too.
    let all_of = |q: &str| {
        let mut r = SearchRequest::new(q).strategy(Strategy::Similarity);
        r.threshold = Some(-1.0);
        r.hooks.fold = Some(amberdb::Fold::Slots);
        r
    };
    let hits = store
        .search(&all_of("what coffee does the user drink"))
        .unwrap();
    assert_eq!(hits.total, 4);
    assert!(hits.results[0].memory.content.contains("coffee"));
    assert!(hits.folded_total >= 1, "{hits:?}");
    assert_eq!(
        hits.results.iter().map(|h| h.folded).sum::<usize>(),
        hits.folded_total
    );
    assert_eq!(hits.results[0].memory.access_count, 1);
    let mut plain = all_of("what coffee does the user drink");
    plain.hooks.deduplicate = Some(false);
    let all = store.search(&plain).unwrap();
    assert_eq!(all.count, 4);
    assert_eq!(all.folded_total, 0);
    // A search counts a memory at most once in 15 minutes: still one, and stored.
    let top = store.get(all.results[0].memory.id).unwrap();
    assert_eq!(top.access_count, 1);
}

#[test]
fn compaction_previews_merges_and_undoes_through_lineage() {
    let (_dir, store) = open();
    let a = store.store(no_dedup(COFFEE[0])).unwrap().memory_id;
    let b = store
        .store(no_dedup("User likes coffee, usually a flat white"))
        .unwrap()
        .memory_id;
    store
        .store(no_dedup(
            "The staging database password rotates every monday",
        ))
        .unwrap();
    let preview = store.compact_preview(None, None).unwrap();
    assert_eq!(preview.groups.len(), 1, "{preview:?}");
    assert_eq!(preview.groups[0].members, vec![a, b]);
    assert_eq!((preview.memories_before, preview.memories_after), (3, 2));
    assert!(matches!(
        store.compact_apply(None, None, "0000000000000000"),
        Err(EngineError::PreviewMismatch { .. })
    ));
    let done = store
        .compact_apply(None, None, &preview.preview_id)
        .unwrap();
    let merged = done.merged[0].0;
    assert_eq!(done.merged[0].1, vec![a, b]);
    assert_eq!(store.list_recent(None, 10).unwrap().len(), 2);
    let undo = store.compact_undo(merged).unwrap();
    assert_eq!(undo.restored.len(), 2);
    let contents: Vec<String> = store
        .list_recent(None, 10)
        .unwrap()
        .into_iter()
        .map(|m| m.content)
        .collect();
    assert_eq!(contents.len(), 3);
    assert!(contents.contains(&COFFEE[0].to_owned()));
    assert!(matches!(
        store.get(merged),
        Err(EngineError::Archived { .. })
    ));
}

#[test]
fn tag_preview_apply_and_snapshot_restore() {
    let (_dir, store) = open();
    let plain = |text: &str, tag: &str| StoreRequest {
        vector: None,
        memory: NewMemory::new(text).tags([tag]),
        hooks: HookOverrides {
            skip: vec![WriteHook::Tags],
            ..HookOverrides::default()
        },
    };
    // "api v2" becomes canonical through the hook; "api version 2" bypasses it.
    store
        .store(NewMemory::new("the v2 endpoints").tags(["api v2"]))
        .unwrap();
    let m = store
        .store(plain("the version two endpoints", "api version 2"))
        .unwrap()
        .memory_id;
    assert_eq!(
        store.unique_tags(None).unwrap(),
        vec!["api v2", "api version 2"]
    );
    let preview = store.tag_normalize_preview(None, 0.85, 200).unwrap();
    assert_eq!(preview.planned_updates, 1, "{preview:?}");
    assert_eq!((preview.unique_before, preview.unique_after), (2, 1));
    assert!(matches!(
        store.tag_normalize_apply(None, &preview.preview_id, "nope", 0.85, 200),
        Err(EngineError::SnapshotNotFound { .. })
    ));
    let snap = store.snapshot_create(None, "before").unwrap();
    assert_eq!(snap.memory_count, 2);
    assert!(matches!(
        store.tag_normalize_apply(None, "0000000000000000", &snap.snapshot_id, 0.85, 200),
        Err(EngineError::PreviewMismatch { .. })
    ));
    let applied = store
        .tag_normalize_apply(None, &preview.preview_id, &snap.snapshot_id, 0.85, 200)
        .unwrap();
    assert_eq!(applied.applied_count, 1);
    assert_eq!(store.get(m).unwrap().tags, vec!["api v2"]);
    assert_eq!(
        store.tag_frequencies(None).unwrap(),
        vec![("api v2".into(), 2)]
    );
    let restored = store.snapshot_restore(None, &snap.snapshot_id).unwrap();
    // Both memories are rewritten from the snapshot (vector-memory-mcp's count); one changed.
    assert_eq!((restored.restored_count, restored.changed_count), (2, 1));
    assert_eq!(store.get(m).unwrap().tags, vec!["api version 2"]);
    // Same tags, same snapshot id.
    assert_eq!(
        store.snapshot_create(None, "again").unwrap().snapshot_id,
        snap.snapshot_id
    );
    let weights = store.tag_weights(None).unwrap();
    assert!((weights[0].1 - 1.0 / 2f64.ln()).abs() < 1e-9, "{weights:?}");
}

#[test]
fn update_keeps_lineage_and_feedback_moves_confidence() {
    let (dir, store) = open();
    let id = store
        .store(NewMemory::new("the build cache lives in target/").tags(["build"]))
        .unwrap()
        .memory_id;
    let same = store
        .update(UpdateRequest {
            memory_id: Some(id),
            tags: Some(vec!["build".into(), "cargo".into()]),
            ..UpdateRequest::default()
        })
        .unwrap();
    assert_eq!((same.memory_id, same.tags.len()), (id, 2));
    let moved = store
        .update(UpdateRequest {
            memory_id: Some(id),
            content: Some("the build cache lives in ~/.cache/amberdb-target".into()),
            ..UpdateRequest::default()
        })
        .unwrap();
    assert_ne!(moved.memory_id, id);
    assert_eq!(moved.supersedes, vec![id]);
    let up = store.feedback(moved.memory_id, Feedback::Helpful).unwrap();
    assert!((up.confidence - 0.55).abs() < 1e-6, "{up:?}");
    let down = store.feedback(moved.memory_id, Feedback::Harmful).unwrap();
    assert!((down.confidence - 0.44).abs() < 1e-6, "{down:?}");
    // All of it survives a checkpoint and a reopen: the archive, canonical tags, counts.
    store.checkpoint().unwrap();
    store.close().unwrap();
    let store = Store::open(dir.path(), minilm()).unwrap();
    let m = store.get(moved.memory_id).unwrap();
    assert_eq!((m.helpful_count, m.harmful_count), (1, 1));
    assert_eq!(
        store.lineage(m.id).unwrap()[0].content,
        "the build cache lives in target/"
    );
    assert_eq!(store.canonical_tags(None).unwrap(), vec!["build", "cargo"]);
    assert!(matches!(store.get(id), Err(EngineError::Archived { .. })));
}

#[test]
fn every_search_sees_only_what_is_valid_now() {
    let (_dir, store) = open();
    let at = |t: &str| amberdb::Timestamp::parse_rfc3339(t).unwrap();
    let ended = store
        .store(
            NewMemory::new("the office is closed for renovation")
                .valid_from(at("2020-01-01"))
                .valid_to(at("2021-01-01")),
        )
        .unwrap()
        .memory_id;
    let future = store
        .store(
            NewMemory::new("the office moves to the harbour building").valid_from(at("2999-01-01")),
        )
        .unwrap()
        .memory_id;
    let open_now = store
        .store(NewMemory::new("the office is open on weekdays"))
        .unwrap()
        .memory_id;
    let ids = |hits: Vec<amberdb::MemoryId>| {
        let mut v = hits;
        v.sort();
        v
    };
    let plain = store
        .search(
            &amberdb::SearchRequest::new("office")
                .strategy(amberdb::Strategy::Similarity)
                .without_hooks(),
        )
        .unwrap()
        .results;
    assert_eq!(
        ids(plain.iter().map(|h| h.memory.id).collect()),
        vec![open_now]
    );
    let mut r = SearchRequest::new("office");
    r.hooks.count_access = Some(false);
    let hits = store.search(&r).unwrap();
    assert_eq!(
        ids(hits.results.iter().map(|h| h.memory.id).collect()),
        vec![open_now]
    );
    assert_eq!(hits.total, 1);
    r.as_of = Some(at("2020-06-01"));
    let then = store.search(&r).unwrap();
    assert_eq!(
        ids(then.results.iter().map(|h| h.memory.id).collect()),
        vec![ended]
    );
    r.as_of = Some(at("2999-06-01"));
    let later = store.search(&r).unwrap();
    assert!(later.results.iter().any(|h| h.memory.id == future));
    // They are still stored, listed and counted.
    assert_eq!(store.stats().memories, 3);
}

#[test]
fn two_values_of_a_slot_valid_from_the_same_moment_reopen() {
    let (dir, store) = open();
    let at = amberdb::Timestamp::parse_rfc3339("2025-01-01").unwrap();
    let old = store
        .store(NewMemory::new("The deploy runs on port 8080").valid_from(at))
        .unwrap()
        .memory_id;
    let s = store
        .store(StoreRequest::new(
            NewMemory::new("The deploy runs on port 9090").valid_from(at),
        ))
        .unwrap();
    // The later said wins; the older held for the shortest time a record can say.
    assert_eq!(s.outcome, Outcome::Superseded, "{s:?}");
    store.close().unwrap();
    let store = Store::open(dir.path(), minilm()).unwrap();
    let replaced = store.lineage(s.memory_id).unwrap();
    assert_eq!(replaced[0].id, old);
    assert_eq!(replaced[0].valid_to, Some(amberdb::Timestamp(at.0 + 1)));
}

/// An `as_of` search that returns a replaced value counts it in `total` ("Found 1 of 1", not
/// "of 0").
#[test]
fn an_as_of_search_counts_the_replaced_values_it_may_return() {
    let (_dir, store) = open();
    let at = |d: &str| amberdb::Timestamp::parse_rfc3339(d).unwrap();
    store
        .store(NewMemory::new("Dora lives in Lisbon").valid_from(at("2024-01-01")))
        .unwrap();
    let berlin = store.store(NewMemory::new("Dora lives in Berlin")).unwrap();
    assert_eq!(berlin.outcome, Outcome::Superseded, "{berlin:?}");
    let mut r = SearchRequest::new("where does Dora live");
    r.as_of = Some(at("2024-06-01"));
    r.hooks.count_access = Some(false);
    let then = store.search(&r).unwrap();
    assert_eq!(then.results[0].memory.content, "Dora lives in Lisbon");
    assert!(then.total >= then.count && then.total >= 1, "{then:?}");
}

/// A store whose older rules merged paraphrases (here: `Merge::Paraphrases`, as every store
/// did before wave 3) is mended: the preview lists what this build's rules would keep live,
/// writes nothing, and an apply brings exactly that back, in one step a stale preview cannot
/// take; each restore undoes on its own.
#[test]
fn mend_brings_back_what_older_rules_merged_and_undoes_record_by_record() {
    let dir = tempfile::tempdir().unwrap();
    let store = paraphrase_merging_store(dir.path());
    for text in COFFEE {
        store.store(NewMemory::new(text)).unwrap();
    }
    // A restatement in the same words: this build merges it too, so it stays archived.
    let same = store
        .store(NewMemory::new("user likes coffee - flat white, usually!"))
        .unwrap();
    assert_eq!(same.outcome, Outcome::Merged, "{same:?}");
    assert_eq!(store.list_recent(None, 50).unwrap().len(), 1);

    let preview = store.mend_preview(None).unwrap();
    eprintln!("{preview:#?}");
    let back: Vec<&str> = preview
        .restore
        .iter()
        .map(|i| i.content_preview.as_str())
        .collect();
    assert_eq!(
        store.list_recent(None, 50).unwrap().len(),
        1,
        "a preview wrote"
    );
    assert!(!back.is_empty(), "nothing to mend: {preview:?}");
    assert!(
        !back.contains(&"user likes coffee - flat white, usually!"),
        "{back:?}"
    );
    assert!(preview.kept >= 1, "{preview:?}");

    assert!(matches!(
        store.mend_apply(None, "stale"),
        Err(EngineError::PreviewMismatch { .. })
    ));
    assert_eq!(
        store.list_recent(None, 50).unwrap().len(),
        1,
        "a refused apply wrote"
    );

    let mended = store.mend_apply(None, &preview.preview_id).unwrap();
    assert_eq!(mended.restored.len(), back.len());
    let live: Vec<String> = store
        .list_recent(None, 50)
        .unwrap()
        .into_iter()
        .map(|m| m.content)
        .collect();
    assert_eq!(live.len(), 1 + back.len(), "{live:?}");
    for (original, copy) in &mended.restored {
        let m = store.get(*copy).unwrap();
        assert_eq!(m.supersedes, vec![*original]);
        assert!(back.contains(&m.content.as_str()), "{m:?}");
    }
    // Nothing left to mend; an apply of the old preview id is refused.
    assert!(store.mend_preview(None).unwrap().restore.is_empty());
    assert!(store.mend_apply(None, &preview.preview_id).is_err());

    let (original, copy) = mended.restored[0];
    assert_eq!(store.mend_undo(copy).unwrap(), original);
    assert_eq!(store.list_recent(None, 50).unwrap().len(), back.len());
    assert!(matches!(store.get(copy), Err(EngineError::Archived { .. })));
    // Only a copy mend made undoes.
    let live_merged = same.memory_id;
    assert!(store.mend_undo(live_merged).is_err());
    // The undone record is listed again.
    assert_eq!(store.mend_preview(None).unwrap().restore.len(), 1);
}
