//! Search (`docs/search.md`) without the model: BM25 against a hand computation, the keyword
//! index across deletes and crashes, filters inside the search at 100k, strategies and fusion
//! against their formulas, fallbacks, pagination, entities, the MemFuse query's scopes, tenant
//! isolation in every mode, and the atomicity of deleting a user.

use super::support::{Rng, seed};
use amberdb::query::{Query, StoreType};
use amberdb::storage::{CrashImage, FaultyStorage};
use amberdb::{
    Category, Clock, Embedder, EngineError, EntityKind, Fusion, HashingEmbedder, HookConfig, Kind,
    MemoryId, Mode, NewMemory, Role, SearchRequest, Source, Store, StoreOptions, Strategy,
    SyncPolicy, Timestamp, strategy_score,
};
use amberdb_embed::EmbedError;
use std::f32::consts::LN_2;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// A fixed "now" so recency is deterministic.
const NOW: Timestamp = Timestamp(1_790_000_000_000_000);

fn options(fs: &FaultyStorage) -> StoreOptions {
    StoreOptions::new(Arc::new(HashingEmbedder::with_dim(16)))
        .storage(Arc::new(fs.clone()))
        .memory_limit(1_000_000)
        .hooks(HookConfig::none())
        .clock(Arc::new(|| NOW) as Clock)
}

fn open() -> (FaultyStorage, Store) {
    let fs = FaultyStorage::new();
    let store = Store::open(Path::new("/s"), options(&fs)).unwrap();
    (fs, store)
}

fn keyword(q: &str) -> SearchRequest {
    let mut r = SearchRequest::new(q).mode(Mode::Keyword);
    r.hooks.count_access = Some(false);
    r.hooks.deduplicate = Some(false);
    r
}

/// `(id, raw BM25)` of a keyword search, best first.
fn bm25(store: &Store, q: &str) -> Vec<(u64, f32)> {
    store
        .search(&keyword(q))
        .unwrap()
        .results
        .iter()
        .map(|h| (h.memory.id.0, h.keyword_score.unwrap()))
        .collect()
}

fn assert_scores(got: &[(u64, f32)], want: &[(u64, f32)]) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for ((gid, gs), (wid, ws)) in got.iter().zip(want) {
        assert_eq!(gid, wid, "{got:?} vs {want:?}");
        assert!((gs - ws).abs() < 1e-5, "id {gid}: {gs} vs {ws}");
    }
}

const CORPUS: [&str; 4] = [
    "the cat sat on the mat",
    "the dog chased the cat",
    "cat cat cat dog",
    "a bird in the hand",
];

#[test]
fn bm25_equals_a_reference_computed_by_hand() {
    let (_fs, store) = open();
    let ids: Vec<u64> = CORPUS
        .iter()
        .map(|t| store.store(NewMemory::new(*t)).unwrap().memory_id.0)
        .collect();
    // Terms (stop words the, on, a, in dropped): d1 cat sat mat (3), d2 dog chased cat (3),
    // d3 cat×3 dog (4), d4 bird hand (2). N = 4, avgdl = 12/4 = 3; k1 = 1.2, b = 0.75.
    // idf(cat) = ln(1 + (4−3+0.5)/(3+0.5)) = ln(1.4285714) = 0.3566749
    // idf(dog) = ln(1 + (4−2+0.5)/(2+0.5)) = ln 2         = 0.6931472
    // d1, d2: |d| = avgdl, so norm = 1 and a tf of 1 scores exactly idf.
    // d3: norm = 0.25 + 0.75·4/3 = 1.25; cat: 3·2.2/(3 + 1.5) = 1.4666667, dog: 2.2/2.5 = 0.88.
    let d1 = 0.356_674_9;
    let d2 = 0.356_674_9 + LN_2;
    let d3 = 1.466_666_7 * 0.356_674_9 + 0.88 * LN_2;
    assert_scores(
        &bm25(&store, "cat dog"),
        &[(ids[2], d3), (ids[1], d2), (ids[0], d1)],
    );
    // A repeated query term counts once; case and punctuation do not matter.
    assert_scores(&bm25(&store, "CAT, cat... Dog!"), &bm25(&store, "cat dog"));
    // After deleting d2: N = 3, avgdl = 9/3 = 3, df(cat) = 2, df(dog) = 1.
    // idf(cat) = ln(1 + 1.5/2.5) = ln 1.6 = 0.4700036; idf(dog) = ln(1 + 2.5/1.5) = 0.9808293.
    store.delete(MemoryId(ids[1])).unwrap();
    let d3 = 1.466_666_7 * 0.470_003_6 + 0.88 * 0.980_829_3;
    assert_scores(
        &bm25(&store, "cat dog"),
        &[(ids[2], d3), (ids[0], 0.470_003_6)],
    );
}

#[test]
fn keyword_index_is_rebuilt_after_a_crash() {
    let (fs, store) = open();
    for (i, t) in CORPUS.iter().enumerate() {
        store.store(NewMemory::new(*t)).unwrap();
        if i == 1 {
            store.checkpoint().unwrap();
        }
    }
    store.delete(MemoryId(1)).unwrap();
    let before = bm25(&store, "cat dog bird");
    assert_eq!(before.len(), 3);
    // Power cut: only what was fsynced survives (every acknowledged write was).
    let image = fs.crash_image(CrashImage::DropUnsynced);
    drop(store);
    let reopened = Store::open(Path::new("/s"), options(&image)).unwrap();
    assert_scores(&bm25(&reopened, "cat dog bird"), &before);
}

/// The keyword indexes and text columns of a loaded checkpoint are built after the open, in
/// the background (`docs/durability.md`, "Recovery", R9): writes and deletes right after the
/// open, before and while they are built, and then every lexical search answers as the same
/// store that never closed.
#[test]
fn lexical_indexes_built_after_the_open_answer_as_before() {
    let seed = seed("lexical_after_open", 0x1e81_ca17);
    let mut rng = Rng::new(seed);
    let words = [
        "amber", "river", "stone", "cloud", "ember", "field", "glass", "north",
    ];
    let text = |rng: &mut Rng| {
        (0..6)
            .map(|_| words[rng.below(words.len() as u64) as usize])
            .collect::<Vec<_>>()
            .join(" ")
            + &format!(" n{}", rng.below(1_000_000))
    };
    let (fs, original) = open();
    for user in ["u1", "u2"] {
        let batch: Vec<NewMemory> = (0..10_000)
            .map(|_| NewMemory::new(text(&mut rng)).user(user))
            .collect();
        for r in original.store_batch(batch).unwrap() {
            r.unwrap();
        }
    }
    original.checkpoint().unwrap();
    let image = fs.crash_image(CrashImage::DropUnsynced);
    let reopened = Store::open(Path::new("/s"), options(&image)).unwrap();
    // The same changes to both, at once after the open.
    let news: Vec<String> = (0..50)
        .map(|i| format!("{} fresh{i}", text(&mut rng)))
        .collect();
    for store in [&original, &reopened] {
        for (i, t) in news.iter().enumerate() {
            let user = if i % 2 == 0 { "u1" } else { "u2" };
            store.store(NewMemory::new(t.clone()).user(user)).unwrap();
        }
        for id in (1..=20_000).step_by(97) {
            store.delete(MemoryId(id)).unwrap();
        }
    }
    // fresh8 was stored by u1, fresh7 by u2.
    for (user, fresh) in [("u1", "fresh8"), ("u2", "fresh7")] {
        for q in ["amber river", "glass north ember", fresh, "stone"] {
            for mode in [Mode::Keyword, Mode::Hybrid, Mode::Text] {
                let mut r = SearchRequest::new(q).user(user).mode(mode);
                r.hooks.count_access = Some(false);
                r.hooks.deduplicate = Some(false);
                r.limit = 30;
                let answer = |s: &Store| -> Vec<(u64, Option<f32>)> {
                    s.search(&r)
                        .unwrap()
                        .results
                        .iter()
                        .map(|h| (h.memory.id.0, h.keyword_score))
                        .collect()
                };
                let (want, got) = (answer(&original), answer(&reopened));
                assert!(!want.is_empty(), "seed {seed}: {user} {q} {mode:?}");
                assert_eq!(got.len(), want.len(), "seed {seed}: {user} {q} {mode:?}");
                for ((gid, gs), (wid, ws)) in got.iter().zip(&want) {
                    assert_eq!(gid, wid, "seed {seed}: {user} {q} {mode:?}");
                    assert_eq!(gs.is_some(), ws.is_some());
                    if let (Some(g), Some(w)) = (gs, ws) {
                        assert!((g - w).abs() < 1e-5, "seed {seed}: {g} vs {w}");
                    }
                }
            }
        }
    }
    assert!(reopened.stats().lexical_ready);
}

#[test]
fn keyword_queries_without_terms_fall_back_to_text_and_say_so() {
    let (_fs, store) = open();
    store.store(NewMemory::new("To be or not to be")).unwrap();
    store.store(NewMemory::new("Something else")).unwrap();
    let hits = store.search(&keyword("to be")).unwrap();
    assert_eq!(hits.mode, Mode::Text);
    assert!(
        hits.fallback
            .as_deref()
            .unwrap()
            .contains("no keyword terms")
    );
    assert_eq!(hits.count, 1);
    assert_eq!(hits.results[0].source, Source::Text);
}

/// An embedder that can be made to fail, with the hashing embedder's identity.
struct Flaky {
    inner: HashingEmbedder,
    failing: AtomicBool,
}

impl Embedder for Flaky {
    fn model_id(&self) -> &str {
        self.inner.model_id()
    }
    fn dim(&self) -> usize {
        self.inner.dim()
    }
    fn embed_batch(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if self.failing.load(Ordering::SeqCst) {
            return Err(EmbedError::WrongDimension {
                expected: self.dim(),
                got: 0,
            });
        }
        self.inner.embed_batch(texts)
    }
}

#[test]
fn similarity_never_falls_back_and_the_others_say_when_they_do() {
    let flaky = Arc::new(Flaky {
        inner: HashingEmbedder::with_dim(16),
        failing: AtomicBool::new(false),
    });
    let fs = FaultyStorage::new();
    let store = Store::open(
        Path::new("/f"),
        StoreOptions::new(flaky.clone())
            .storage(Arc::new(fs))
            .hooks(HookConfig::none()),
    )
    .unwrap();
    store
        .store(NewMemory::new("the kafka consumer lags behind the producer by several minutes during the nightly batch"))
        .unwrap();
    store
        .store(NewMemory::new("unrelated note about lunch"))
        .unwrap();
    // Composite, embeddings working, but no vector candidate reaches the 0.6 asked for: the
    // substring match supplements and the reply says so.
    let mut r = SearchRequest::new("kafka").mode(Mode::Vector);
    r.threshold = Some(0.6);
    r.hooks.count_access = Some(false);
    let hits = store.search(&r).unwrap();
    assert_eq!(hits.count, 1, "{hits:?}");
    assert_eq!(hits.results[0].source, Source::Text);
    assert!(hits.fallback.unwrap().contains("text matches supplemented"));
    // Similarity with the same query: cosine only, nothing supplemented.
    let mut sim = r.clone().strategy(Strategy::Similarity);
    sim.threshold = Some(0.99);
    let hits = store.search(&sim).unwrap();
    assert_eq!((hits.count, hits.fallback), (0, None));

    flaky.failing.store(true, Ordering::SeqCst);
    assert!(matches!(
        store.search(&sim).unwrap_err(),
        EngineError::Embed(_)
    ));
    let hits = store.search(&r).unwrap();
    assert_eq!(hits.mode, Mode::Text);
    assert!(hits.fallback.unwrap().contains("embeddings unavailable"));
    assert_eq!(hits.count, 1);
    let hybrid = store.search(&r.clone().mode(Mode::Hybrid)).unwrap();
    assert_eq!(hybrid.mode, Mode::Keyword);
    assert_eq!(hybrid.results[0].source, Source::Keyword);
    assert!(matches!(
        store
            .search(
                &SearchRequest::new("x")
                    .strategy(Strategy::Similarity)
                    .mode(Mode::Keyword)
            )
            .unwrap_err(),
        EngineError::Invalid { field: "mode", .. }
    ));
}

#[test]
fn strategies_rank_by_their_documented_formulas() {
    let (_fs, store) = open();
    // Same text, so the same cosine for all: only the strategy's other terms differ.
    let text = "deploy with blue green switching";
    let plain = store
        .store(NewMemory::new(text).tags(["common"]))
        .unwrap()
        .memory_id;
    let helpful = store
        .store(NewMemory::new(text).tags(["common"]))
        .unwrap()
        .memory_id;
    let used = store
        .store(NewMemory::new(text).tags(["common", "zebra"]))
        .unwrap()
        .memory_id;
    for _ in 0..5 {
        store
            .store(NewMemory::new("filler").tags(["common"]))
            .unwrap();
    }
    store.feedback(helpful, amberdb::Feedback::Helpful).unwrap();
    store.feedback(helpful, amberdb::Feedback::Helpful).unwrap();
    for _ in 0..3 {
        store.record_access(used).unwrap();
    }
    let rank = |strategy: Strategy, q: &str| {
        let mut r = SearchRequest::new(q).strategy(strategy).mode(Mode::Vector);
        r.threshold = Some(-1.0);
        r.hooks.count_access = Some(false);
        r.hooks.deduplicate = Some(false);
        store.search(&r).unwrap()
    };
    assert_eq!(
        rank(Strategy::Importance, text).results[0].memory.id,
        helpful
    );
    assert_eq!(rank(Strategy::Frequency, text).results[0].memory.id, used);
    // Every score is the documented formula of the memory's own fields (no boost: no query
    // term names a tag).
    for strategy in [
        Strategy::Composite,
        Strategy::Recency,
        Strategy::Frequency,
        Strategy::Importance,
    ] {
        for h in rank(strategy, text).results {
            let want = strategy_score(strategy, &h.memory, h.similarity.unwrap(), 0.0, NOW);
            assert!((h.score - want).abs() < 1e-6, "{strategy:?} {h:?}");
        }
    }
    // "zebra" names a tag used once: a boost of 0.1 · min(1, 1/ln 2) = 0.1 lifts `used` by
    // exactly 0.1 over what it scores otherwise; "common" (8 uses) boosts by 0.1/ln 9.
    let zebra = format!("{text} zebra");
    let hits = rank(Strategy::Composite, &zebra);
    let top = &hits.results[0];
    assert_eq!(top.memory.id, used);
    let base = strategy_score(
        Strategy::Composite,
        &top.memory,
        top.similarity.unwrap(),
        0.0,
        NOW,
    );
    assert!((top.score - base - 0.1).abs() < 1e-6, "{top:?}");
    // Feedback and use lift a memory over the same text with neither.
    let composite: Vec<MemoryId> = rank(Strategy::Composite, text)
        .results
        .iter()
        .map(|h| h.memory.id)
        .filter(|id| [plain, helpful, used].contains(id))
        .collect();
    assert_eq!(composite.last(), Some(&plain), "{composite:?}");
}

#[test]
fn recency_decays_with_the_documented_half_lives() {
    let (_fs, store) = open();
    let id = store.store(NewMemory::new("x")).unwrap().memory_id;
    let mut m = store.get(id).unwrap();
    let day = 86_400_000_000;
    assert!((amberdb::recency(&m, NOW) - 1.0).abs() < 1e-6);
    m.last_accessed_at = Timestamp(NOW.0 - 7 * day);
    assert!((amberdb::recency(&m, NOW) - (0.6 * 0.5 + 0.4)).abs() < 1e-6);
    m.created_at = Timestamp(NOW.0 - 30 * day);
    assert!((amberdb::recency(&m, NOW) - 0.5).abs() < 1e-6);
    m.access_count = 5;
    assert!((amberdb::frequency(&m) - 0.5).abs() < 1e-6);
    m.helpful_count = 1;
    m.harmful_count = 1;
    m.confidence = 0.4;
    assert!((amberdb::importance(&m) - (0.5 * 0.4 + 0.3 * 0.5 + 0.2 * 0.5)).abs() < 1e-6);
}

#[test]
fn hybrid_fuses_normalized_scores_and_rrf_ranks() {
    let (_fs, store) = open();
    for t in [
        "rust borrow checker errors",
        "the borrow checker rejects two mutable borrows",
        "cooking pasta al dente",
        "rust traits and generics",
    ] {
        store.store(NewMemory::new(t)).unwrap();
    }
    let mut r = SearchRequest::new("borrow checker").mode(Mode::Hybrid);
    r.threshold = Some(-1.0);
    r.hooks.count_access = Some(false);
    r.hooks.deduplicate = Some(false);
    let hits = store.search(&r).unwrap();
    let max = hits
        .results
        .iter()
        .filter_map(|h| h.keyword_score)
        .fold(0.0f32, f32::max);
    assert!(max > 0.0);
    for h in &hits.results {
        // Every candidate has its exact cosine, and its BM25 if any term matches.
        let cos = h.similarity.unwrap();
        let r = 0.7 * cos.max(0.0) + 0.3 * h.keyword_score.map_or(0.0, |s| s / max);
        let want = strategy_score(Strategy::Composite, &h.memory, r, 0.0, NOW);
        assert!((h.score - want).abs() < 1e-5, "{h:?}");
    }
    r.fusion = Fusion::rrf();
    let hits = store.search(&r).unwrap();
    // In both lists, the keyword leader is ranked first or second by cosine: its RRF is at
    // least 1/61 + 1/62, above anything in one list only (at most 1/61).
    let top = &hits.results[0];
    assert_eq!(top.source, Source::Hybrid, "{hits:?}");
    assert!(top.memory.content.contains("borrow"));
    assert!(matches!(
        store
            .search(&SearchRequest {
                fusion: Fusion::Weighted {
                    vector: 0.0,
                    keyword: 0.0
                },
                ..r.clone()
            })
            .unwrap_err(),
        EngineError::Invalid {
            field: "fusion",
            ..
        }
    ));
}

#[test]
fn pages_are_disjoint_and_in_order() {
    let (_fs, store) = open();
    for i in 0..30 {
        store
            .store(NewMemory::new(format!(
                "incident report {i} {}",
                "disk ".repeat(i % 7 + 1)
            )))
            .unwrap();
    }
    let page = |offset: usize, limit: usize| {
        let mut r = keyword("disk incident");
        r.offset = offset;
        r.limit = limit;
        let h = store.search(&r).unwrap();
        assert_eq!(h.total, 30);
        h.results.iter().map(|h| h.memory.id).collect::<Vec<_>>()
    };
    let all = page(0, 30);
    assert_eq!(all.len(), 30);
    let pieces: Vec<MemoryId> = [page(0, 10), page(10, 10), page(20, 10)].concat();
    assert_eq!(pieces, all);
    assert!(page(30, 10).is_empty());
}

#[test]
fn a_filter_matching_a_tenth_of_a_percent_of_100k_fills_its_page() {
    let seed = seed("filter_at_100k", 0x5eed_0100);
    let mut rng = Rng::new(seed);
    let fs = FaultyStorage::new();
    let store = Store::open(
        Path::new("/big"),
        options(&fs).sync(SyncPolicy::None).seal_rows(16_384),
    )
    .unwrap();
    let embedder = HashingEmbedder::with_dim(16);
    let query = embedder.embed("the query").unwrap();
    let mut targets = Vec::new();
    for i in 0..100_000u32 {
        let target = i % 1000 == 7;
        // Decoys are the query itself (cosine 1): a filter applied after a top-k would only
        // ever see decoys.
        let v = if target {
            rng.unit_vector(16)
        } else {
            query.clone()
        };
        let mut m = NewMemory::new(format!("memory {i}"));
        if target {
            m = m.category(Category::Security).tags(["audit"]);
        }
        let id = store
            .store(amberdb::StoreRequest::new(m).with_vector(v))
            .unwrap()
            .memory_id;
        if target {
            targets.push(id);
        }
    }
    assert_eq!(targets.len(), 100);
    let brute = {
        let mut scored: Vec<(MemoryId, f32)> = targets
            .iter()
            .map(|id| {
                let v = store.vector(*id).unwrap();
                (*id, v.iter().zip(&query).map(|(a, b)| a * b).sum())
            })
            .collect();
        scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        scored
    };
    for filter in [
        &(|r: &mut SearchRequest| r.category = Some(Category::Security))
            as &dyn Fn(&mut SearchRequest),
        &|r: &mut SearchRequest| r.tags = vec!["audit".into()],
    ] {
        let mut r = SearchRequest::new("the query").strategy(Strategy::Similarity);
        r.threshold = Some(-1.0);
        r.limit = 50;
        r.hooks.count_access = Some(false);
        r.hooks.deduplicate = Some(false);
        filter(&mut r);
        let hits = store.search(&r).unwrap();
        assert_eq!((hits.count, hits.total), (50, 100));
        let got: Vec<MemoryId> = hits.results.iter().map(|h| h.memory.id).collect();
        let want: Vec<MemoryId> = brute.iter().take(50).map(|b| b.0).collect();
        assert_eq!(got, want, "the exact top 50 of the 100 that match");
        // The second page holds the other 50.
        r.offset = 50;
        assert_eq!(store.search(&r).unwrap().count, 50);
    }
    // A 10% time-range filter goes through the scan with the selection as its filter.
    let mut r = SearchRequest::new("the query").strategy(Strategy::Similarity);
    r.threshold = Some(-1.0);
    r.limit = 50;
    r.kind = Some(Kind::Memory);
    r.category = Some(Category::Other);
    r.hooks.count_access = Some(false);
    let hits = store.search(&r).unwrap();
    assert_eq!((hits.count, hits.total), (50, 99_900));
    assert!(
        hits.results
            .iter()
            .all(|h| h.memory.category == Category::Other)
    );
}

#[test]
fn entities_are_created_listed_and_scoped_to_their_user() {
    let (_fs, store) = open();
    let not_found = |e: EngineError| match e {
        EngineError::EntityNotFound { field, .. } => field,
        other => panic!("{other}"),
    };
    assert_eq!(
        not_found(
            store
                .create_entity(EntityKind::Agent, Some("ghost"), "a", None, None)
                .unwrap_err()
        ),
        "user_id"
    );
    store
        .create_entity(EntityKind::User, None, "u1", Some("User One"), None)
        .unwrap();
    store
        .create_entity(EntityKind::User, None, "u2", None, None)
        .unwrap();
    assert!(matches!(
        store
            .create_entity(EntityKind::User, None, "u1", None, None)
            .unwrap_err(),
        EngineError::EntityExists {
            field: "user_id",
            ..
        }
    ));
    store
        .create_entity(EntityKind::Agent, Some("u1"), "bot", None, None)
        .unwrap();
    assert_eq!(
        not_found(
            store
                .create_entity(EntityKind::Session, Some("u2"), "s", None, Some("bot"))
                .unwrap_err()
        ),
        "agent_id",
        "u1's agent is not u2's"
    );
    store
        .create_entity(
            EntityKind::Session,
            Some("u1"),
            "s",
            Some("Chat"),
            Some("bot"),
        )
        .unwrap();
    store
        .create_entity(EntityKind::Session, Some("u2"), "s", None, None)
        .unwrap();
    assert_eq!(
        store.get_entity(EntityKind::User, None, "u1").unwrap().name,
        "User One"
    );
    assert_eq!(
        store
            .get_entity(EntityKind::Session, Some("u1"), "s")
            .unwrap()
            .agent_id
            .as_deref(),
        Some("bot")
    );
    assert_eq!(
        not_found(
            store
                .get_entity(EntityKind::Agent, Some("u2"), "bot")
                .unwrap_err()
        ),
        "agent_id"
    );
    let users: Vec<String> = store
        .list_entities(EntityKind::User, None)
        .unwrap()
        .into_iter()
        .map(|e| e.id)
        .collect();
    assert_eq!(users, ["u1", "u2"]);
    // Messages need an existing session of the user, a role, and content.
    let ids = store
        .add_messages(
            Some("u1"),
            "s",
            &[
                (Role::User, "hello".into()),
                (Role::Assistant, "hello".into()),
            ],
        )
        .unwrap();
    assert_eq!(ids.len(), 2, "two turns saying the same are two turns");
    assert_eq!(store.get(ids[1]).unwrap().agent_id.as_deref(), Some("bot"));
    // Turns create their session, and their user, in the same commit (issue #46).
    let created = store
        .add_messages(Some("u9"), "fresh", &[(Role::User, "first turn".into())])
        .unwrap();
    assert_eq!(
        store.get(created[0]).unwrap().session_id.as_deref(),
        Some("fresh")
    );
    assert!(
        store
            .list_entities(EntityKind::Session, Some("u9"))
            .unwrap()
            .iter()
            .any(|s| s.id == "fresh")
    );
    assert!(
        store
            .add_messages(Some("u9"), "bad id\n", &[(Role::User, "x".into())])
            .is_err()
    );
    assert!(matches!(
        store
            .add_messages(
                Some("u1"),
                "s",
                &[(Role::User, "ok".into()), (Role::User, " ".into())]
            )
            .unwrap_err(),
        EngineError::Invalid {
            field: "messages",
            ..
        }
    ));
    assert_eq!(
        store.list_recent(Some("u1"), 10).unwrap().len(),
        2,
        "nothing of the refused batch was stored"
    );
    assert_eq!(
        not_found(
            store
                .store(NewMemory::new("x").user("u1").session("elsewhere"))
                .unwrap_err()
        ),
        "session_id"
    );
    assert!(
        store
            .add_knowledge(Some("u1"), &["likes tea".into()])
            .unwrap()[0]
            .is_ok()
    );
    // Deleting the session deletes its messages; the user's knowledge stays.
    let d = store
        .delete_entity(EntityKind::Session, Some("u1"), "s")
        .unwrap();
    assert_eq!(d.deleted_records, 2);
    assert_eq!(store.list_recent(Some("u1"), 10).unwrap().len(), 1);
    assert!(store.get(ids[0]).is_err());
    // Deleting the agent deletes it; deleting the user deletes everything, and the id is free.
    store
        .delete_entity(EntityKind::Agent, Some("u1"), "bot")
        .unwrap();
    let d = store.delete_entity(EntityKind::User, None, "u1").unwrap();
    assert_eq!(d.deleted_records, 1);
    assert_eq!(
        not_found(store.get_entity(EntityKind::User, None, "u1").unwrap_err()),
        "user_id"
    );
    assert_eq!(
        store
            .search(&SearchRequest::new("tea").user("u1"))
            .unwrap()
            .count,
        0,
        "a deleted user's search is empty"
    );
    store
        .create_entity(EntityKind::User, None, "u1", None, None)
        .unwrap();
    assert_eq!(store.list_recent(Some("u1"), 10).unwrap().len(), 0);
}

/// u1 with agents a1, a2; sessions s1 (a1), s2 (a2); two messages in each, a knowledge item,
/// and a memory with no session, all mentioning "deploy".
fn scoped_store() -> (FaultyStorage, Store) {
    let (fs, store) = open();
    store
        .create_entity(EntityKind::User, None, "u1", None, None)
        .unwrap();
    for (a, s) in [("a1", "s1"), ("a2", "s2")] {
        store
            .create_entity(EntityKind::Agent, Some("u1"), a, None, None)
            .unwrap();
        store
            .create_entity(
                EntityKind::Session,
                Some("u1"),
                s,
                Some(&format!("{s} name")),
                Some(a),
            )
            .unwrap();
        store
            .add_messages(
                Some("u1"),
                s,
                &[
                    (Role::User, format!("how do I deploy from {s}")),
                    (Role::Assistant, format!("deploy {s} with the pipeline")),
                ],
            )
            .unwrap();
    }
    store
        .add_knowledge(Some("u1"), &["deploy uses blue green".into()])
        .unwrap()[0]
        .as_ref()
        .unwrap();
    store
        .store(NewMemory::new("deploy checklist for fridays").user("u1"))
        .unwrap();
    (fs, store)
}

#[test]
fn the_memfuse_query_tags_scope_and_honours_agent_and_include_flags() {
    let (_fs, store) = scoped_store();
    let q = |f: &dyn Fn(&mut Query)| {
        let mut q = Query::new("deploy");
        q.store_type = StoreType::Keyword;
        q.top_k = 50;
        f(&mut q);
        store.query("u1", &q)
    };
    let all = q(&|q| q.session_id = Some("s1".into())).unwrap();
    assert_eq!(all.total, 6);
    for r in &all.results {
        let want = match (r.kind, r.metadata.session_id.as_deref()) {
            (Kind::Message, Some("s1")) => Some("in_session"),
            (Kind::Message, Some(_)) => Some("cross_session"),
            _ => None,
        };
        assert_eq!(r.metadata.scope, want, "{r:?}");
        assert_eq!(r.metadata.retrieval.source, Source::Keyword);
        if let Some(s) = &r.metadata.session_id {
            assert_eq!(
                r.metadata.session_name.as_deref(),
                Some(format!("{s} name").as_str())
            );
        }
    }
    assert!(
        q(&|_| {})
            .unwrap()
            .results
            .iter()
            .all(|r| r.metadata.scope.is_none())
    );
    let a1 = q(&|q| q.agent_id = Some("a1".into())).unwrap();
    let kinds: Vec<(Kind, Option<&str>)> = a1
        .results
        .iter()
        .map(|r| (r.kind, r.metadata.agent_id.as_deref()))
        .collect();
    assert_eq!(a1.total, 3, "{kinds:?}");
    assert!(
        kinds
            .iter()
            .all(|k| *k == (Kind::Message, Some("a1")) || k.0 == Kind::Knowledge)
    );
    let no_messages = q(&|q| q.include_messages = false).unwrap();
    assert!(no_messages.results.iter().all(|r| r.kind != Kind::Message));
    assert_eq!(no_messages.total, 2);
    let no_knowledge = q(&|q| q.include_knowledge = false).unwrap();
    assert!(
        no_knowledge
            .results
            .iter()
            .all(|r| r.kind != Kind::Knowledge)
    );
    assert_eq!(no_knowledge.total, 5);
    // Not found, naming the field, in the envelope too.
    store
        .create_entity(EntityKind::User, None, "u2", None, None)
        .unwrap();
    store
        .create_entity(EntityKind::Session, Some("u2"), "theirs", None, None)
        .unwrap();
    for (user, f, field) in [
        (
            "nobody",
            &(|_: &mut Query| {}) as &dyn Fn(&mut Query),
            "user_id",
        ),
        (
            "u1",
            &|q: &mut Query| q.session_id = Some("theirs".into()),
            "session_id",
        ),
        (
            "u1",
            &|q: &mut Query| q.agent_id = Some("a9".into()),
            "agent_id",
        ),
    ] {
        let mut query = Query::new("deploy");
        f(&mut query);
        let got = store.query(user, &query);
        assert!(
            matches!(&got, Err(EngineError::EntityNotFound { field: f, .. }) if *f == field),
            "{got:?}"
        );
    }
    let ok = q(&|_| {}).unwrap();
    assert_eq!(ok.total, 6);
    let first = serde_json::to_value(&ok.results[0]).unwrap();
    assert_eq!(first["metadata"]["retrieval"]["source"], "keyword");
}

#[test]
fn graph_retrieval_follows_rare_tags_and_session_turns() {
    let (_fs, store) = open();
    store
        .create_entity(EntityKind::Session, None, "chat", None, None)
        .unwrap();
    let turns = store
        .add_messages(
            None,
            "chat",
            &[
                (Role::User, "my laptop will not boot".into()),
                (
                    Role::Assistant,
                    "hold the power button for ten seconds".into(),
                ),
                (Role::User, "thanks".into()),
            ],
        )
        .unwrap();
    let seed_id = store
        .store(NewMemory::new("grafana dashboards for latency").tags(["observability"]))
        .unwrap()
        .memory_id;
    let tagged = store
        .store(NewMemory::new("alert routing rules").tags(["observability"]))
        .unwrap()
        .memory_id;
    let unrelated = store
        .store(NewMemory::new("lunch menu").tags(["food"]))
        .unwrap()
        .memory_id;
    let graph = |text: &str| {
        let mut q = Query::new(text);
        q.store_type = StoreType::Graph;
        q.top_k = 1;
        let seeds = store.query("default", &q).unwrap();
        q.top_k = 10;
        (seeds, store.query("default", &q).unwrap())
    };
    // The exact text embeds to itself (cosine 1): one seed; its tag neighbour scores
    // 1/ln(1+2) (the tag is on 2 memories) times 1.
    let (seeds, found) = graph("grafana dashboards for latency");
    assert_eq!(seeds.results[0].id, seed_id);
    let neighbour = found
        .results
        .iter()
        .find(|r| r.id == tagged)
        .expect("tag edge");
    assert_eq!(neighbour.metadata.retrieval.source, Source::Graph);
    let w = (1.0 / 3f64.ln()) as f32;
    assert!((neighbour.score - w).abs() < 1e-5, "{neighbour:?}");
    // No edge reaches the lunch menu: if it is there at all, the vector search found it.
    assert!(
        found
            .results
            .iter()
            .all(|r| r.id != unrelated || r.metadata.retrieval.source == Source::Vector)
    );
    // A message's neighbouring turns come with it, at least 0.5 × its score of 1.
    let (seeds, found) = graph("hold the power button for ten seconds");
    assert_eq!(seeds.results[0].id, turns[1]);
    for t in [turns[0], turns[2]] {
        let r = found
            .results
            .iter()
            .find(|r| r.id == t)
            .expect("session edge");
        assert!(r.score >= 0.5 - 1e-5, "{r:?}");
    }
}

#[test]
fn no_mode_and_no_edge_ever_crosses_users() {
    let (_fs, store) = open();
    let texts = [
        "the staging database password rotates on mondays",
        "error E4137 means the quota is full",
        "use the blue green deploy for releases",
    ];
    let mut mine = Vec::new();
    for user in ["u1", "u2"] {
        store
            .create_entity(EntityKind::User, None, user, None, None)
            .unwrap();
        store
            .create_entity(EntityKind::Session, Some(user), "s", None, None)
            .unwrap();
        store
            .add_messages(
                Some(user),
                "s",
                &[(Role::User, texts[0].into()), (Role::User, texts[1].into())],
            )
            .unwrap();
        for t in texts {
            let id = store
                .store(NewMemory::new(t).user(user).tags(["ops", "rare-tag"]))
                .unwrap()
                .memory_id;
            if user == "u1" {
                mine.push(id);
            }
        }
        store.add_knowledge(Some(user), &[texts[2].into()]).unwrap();
    }
    let owner = |id: MemoryId| store.get(id).unwrap().user_id;
    for text in texts {
        for strategy in [Strategy::Similarity, Strategy::Composite] {
            let modes: &[Mode] = if strategy == Strategy::Similarity {
                &[Mode::Vector]
            } else {
                &[Mode::Vector, Mode::Keyword, Mode::Hybrid, Mode::Text]
            };
            for mode in modes {
                let mut r = SearchRequest::new(text)
                    .user("u1")
                    .strategy(strategy)
                    .mode(*mode);
                r.threshold = Some(-1.0);
                r.limit = 50;
                let hits = store.search(&r).unwrap();
                assert!(hits.count > 0, "{strategy:?} {mode:?} {text}");
                assert!(
                    hits.results.iter().all(|h| h.memory.user_id == "u1"),
                    "{strategy:?} {mode:?}"
                );
            }
        }
        for store_type in [
            StoreType::Vector,
            StoreType::Keyword,
            StoreType::Hybrid,
            StoreType::Graph,
        ] {
            let mut q = Query::new(text);
            q.store_type = store_type;
            q.top_k = 50;
            let found = store.query("u1", &q).unwrap();
            assert!(found.total > 0, "{store_type:?} {text}");
            for r in &found.results {
                assert_eq!(owner(r.id), "u1", "{store_type:?}: {r:?}");
                assert_eq!(r.metadata.user_id, "u1");
            }
        }
    }
    assert_eq!(mine.len(), 3);
}

/// What a run got acknowledged: the delete of u1, u1's records, u2's records.
#[derive(Debug, PartialEq)]
struct DeleteRun {
    deleted: bool,
    u1: usize,
    u2: usize,
}

fn delete_run(store: &Store) -> DeleteRun {
    let mut acked = DeleteRun {
        deleted: false,
        u1: 0,
        u2: 0,
    };
    if store
        .create_entity(EntityKind::User, None, "u1", None, None)
        .and_then(|_| store.create_entity(EntityKind::Session, Some("u1"), "s", None, None))
        .is_err()
    {
        return acked;
    }
    for i in 0..6 {
        if store
            .store(NewMemory::new(format!("u1 note {i}")).user("u1"))
            .is_err()
        {
            return acked;
        }
        acked.u1 += 1;
        if store
            .add_messages(Some("u1"), "s", &[(Role::User, format!("turn {i}"))])
            .is_err()
        {
            return acked;
        }
        acked.u1 += 1;
        if store
            .store(NewMemory::new(format!("u2 note {i}")).user("u2"))
            .is_err()
        {
            return acked;
        }
        acked.u2 += 1;
        if i == 2 && store.checkpoint().is_err() {
            return acked;
        }
    }
    acked.deleted = store.delete_entity(EntityKind::User, None, "u1").is_ok();
    acked
}

#[test]
fn deleting_a_user_is_atomic_at_every_crash_point() {
    let clean = FaultyStorage::new();
    let store = Store::open(Path::new("/d"), options(&clean)).unwrap();
    let before = clean.syncs();
    assert_eq!(
        delete_run(&store),
        DeleteRun {
            deleted: true,
            u1: 12,
            u2: 6
        }
    );
    let sync_points = clean.syncs() - before;
    drop(store);
    let mut cuts = 0;
    for k in 1..=sync_points {
        let fs = FaultyStorage::new();
        let store = Store::open(Path::new("/d"), options(&fs)).unwrap();
        fs.crash_at_sync(k);
        let acked = delete_run(&store);
        assert!(fs.crashed(), "sync point {k} never reached");
        drop(store);
        for image in [
            CrashImage::DropUnsynced,
            CrashImage::TearUnsynced { numerator: 77 },
            CrashImage::KeepUnsynced,
        ] {
            let what = format!("sync point {k}, {image:?}, acknowledged {acked:?}");
            let reopened = Store::open(Path::new("/d"), options(&fs.crash_image(image))).unwrap();
            let count = |user: &str| reopened.list_recent(Some(user), 50).map_or(0, |l| l.len());
            let u1_exists = reopened.get_entity(EntityKind::User, None, "u1").is_ok();
            assert!(
                !(acked.deleted && u1_exists),
                "{what}: an acknowledged delete was lost"
            );
            if u1_exists {
                assert!(
                    count("u1") >= acked.u1,
                    "{what}: acknowledged u1 records lost"
                );
            } else {
                // All of u1 went, or none of it was ever there: no record anywhere but u2's,
                // no session, no keyword posting.
                assert_eq!(reopened.stats().memories, count("u2"), "{what}");
                assert!(
                    reopened
                        .get_entity(EntityKind::Session, Some("u1"), "s")
                        .is_err()
                );
                if count("u2") > 0 {
                    let mut r = keyword("note");
                    r.user_id = Some("u2".into());
                    r.limit = 50;
                    let hits = reopened.search(&r).unwrap();
                    assert_eq!(hits.count, count("u2"), "{what}");
                }
            }
            assert!(
                count("u2") >= acked.u2,
                "{what}: acknowledged u2 records lost"
            );
            cuts += 1;
        }
    }
    eprintln!("{sync_points} sync points x 3 images = {cuts} power cuts around a user deletion");
    assert!(sync_points >= 20, "{sync_points}");
}

#[test]
fn time_range_agent_and_kind_filters_select_inside_the_search() {
    let now = Arc::new(std::sync::atomic::AtomicI64::new(NOW.0));
    let clock_now = Arc::clone(&now);
    let fs = FaultyStorage::new();
    let store = Store::open(
        Path::new("/t"),
        options(&fs).clock(Arc::new(move || Timestamp(clock_now.load(Ordering::SeqCst))) as Clock),
    )
    .unwrap();
    let day = 86_400_000_000;
    store
        .create_entity(EntityKind::Agent, None, "bot", None, None)
        .unwrap();
    let mut ids = Vec::new();
    for d in 0..3 {
        now.store(NOW.0 + d * day, Ordering::SeqCst);
        ids.push(
            store
                .store(NewMemory::new(format!("deploy note day {d}")))
                .unwrap()
                .memory_id,
        );
        ids.push(
            store
                .store(NewMemory::new(format!("deploy note by bot day {d}")).agent("bot"))
                .unwrap()
                .memory_id,
        );
    }
    store
        .add_knowledge(None, &["deploy knowledge".into()])
        .unwrap()[0]
        .as_ref()
        .unwrap();
    let found = |f: &dyn Fn(&mut SearchRequest)| {
        let mut r = keyword("deploy");
        r.limit = 50;
        f(&mut r);
        let hits = store.search(&r).unwrap();
        assert_eq!(hits.total, hits.count, "every match fits the page");
        let mut got: Vec<MemoryId> = hits.results.iter().map(|h| h.memory.id).collect();
        got.sort();
        got
    };
    let at = |d: i64| Timestamp(NOW.0 + d * day);
    // [day 1, day 2): the two memories of day 1.
    assert_eq!(
        found(&|r| {
            r.created_after = Some(at(1));
            r.created_before = Some(at(2));
        }),
        [ids[2], ids[3]]
    );
    assert_eq!(
        found(&|r| r.agent_id = Some("bot".into())),
        [ids[1], ids[3], ids[5]]
    );
    assert_eq!(
        found(&|r| {
            r.agent_id = Some("bot".into());
            r.created_after = Some(at(2));
        }),
        [ids[5]]
    );
    assert_eq!(found(&|r| r.kind = Some(Kind::Knowledge)).len(), 1);
    assert_eq!(found(&|_| {}).len(), 7);
    let mut bad = keyword("deploy");
    bad.created_after = Some(at(2));
    bad.created_before = Some(at(1));
    assert!(matches!(
        store.search(&bad).unwrap_err(),
        EngineError::Invalid {
            field: "created_before",
            ..
        }
    ));
    bad = keyword("deploy");
    bad.agent_id = Some("ghost".into());
    assert!(matches!(
        store.search(&bad).unwrap_err(),
        EngineError::EntityNotFound {
            field: "agent_id",
            ..
        }
    ));
}

/// An exact duplicate is answered before its content is embedded: with the embedder down, a
/// store of a known content still answers the outcome `Duplicate` and an import says
/// `AlreadyExists` (a re-import of a whole file pays no model call), while a new content gets
/// the embedder's error.
#[test]
fn an_exact_duplicate_is_answered_without_the_model() {
    let flaky = Arc::new(Flaky {
        inner: HashingEmbedder::with_dim(16),
        failing: AtomicBool::new(false),
    });
    let store = Store::open(
        Path::new("/d"),
        StoreOptions::new(flaky.clone()).storage(Arc::new(FaultyStorage::new())),
    )
    .unwrap();
    let first = store
        .store(NewMemory::new("the nightly batch starts at two"))
        .unwrap()
        .memory_id;
    flaky.failing.store(true, Ordering::SeqCst);
    let again = store.store(NewMemory::new("the nightly batch starts at two"));
    let again = again.unwrap();
    assert_eq!(
        (again.outcome, again.memory_id),
        (amberdb::Outcome::Duplicate, first)
    );
    let kept = amberdb::Provenance::created(Timestamp::parse_rfc3339("2025-01-01").unwrap());
    let batch = store
        .import_batch(vec![(
            NewMemory::new("the nightly batch starts at two"),
            kept,
        )])
        .unwrap();
    assert!(matches!(
        batch[0],
        Err(EngineError::AlreadyExists { existing }) if existing == first
    ));
    assert!(matches!(
        store.store(NewMemory::new("a content never seen")),
        Err(EngineError::Embed(_))
    ));
    assert_eq!(store.stats().memories, 1);
}

/// A chat imported with its turns' own times: `valid_after` / `valid_before` place a turn by
/// when it was said, while `created_after` / `created_before` still mean when it was stored.
#[test]
fn chat_turns_keep_their_own_times_and_filter_by_them() {
    let (_fs, store) = open();
    store
        .create_entity(EntityKind::User, None, "ann", None, None)
        .unwrap();
    store
        .create_entity(EntityKind::Session, Some("ann"), "s1", None, None)
        .unwrap();
    let day = |d: &str| Timestamp::parse_rfc3339(d).unwrap();
    let ids = store
        .add_turns(
            Some("ann"),
            "s1",
            &[
                amberdb::Turn {
                    role: Role::User,
                    content: "we adopted a cat called Miso".into(),
                    at: Some(day("2023-05-08")),
                    source_id: None,
                },
                amberdb::Turn {
                    role: Role::User,
                    content: "the cat Miso learned to open doors".into(),
                    at: Some(day("2023-07-20")),
                    source_id: None,
                },
                amberdb::Turn {
                    role: Role::Assistant,
                    content: "a cat that opens doors is clever".into(),
                    at: None,
                    source_id: None,
                },
            ],
        )
        .unwrap()
        .memory_ids;
    assert_eq!(store.get(ids[0]).unwrap().valid_from, day("2023-05-08"));
    let search = |after: Option<&str>, before: Option<&str>| {
        let mut r = SearchRequest::new("cat").user("ann").mode(Mode::Keyword);
        r.valid_after = after.map(day);
        r.valid_before = before.map(day);
        r.hooks.count_access = Some(false);
        let mut got: Vec<MemoryId> = store
            .search(&r)
            .unwrap()
            .results
            .iter()
            .map(|h| h.memory.id)
            .collect();
        got.sort_unstable();
        got
    };
    assert_eq!(search(None, None), ids);
    assert_eq!(search(None, Some("2023-06-01")), [ids[0]]);
    assert_eq!(search(Some("2023-06-01"), Some("2023-12-31")), [ids[1]]);
    // Stored now: created_after a day in 2023 finds all three.
    let mut created = SearchRequest::new("cat").user("ann").mode(Mode::Keyword);
    created.created_after = Some(day("2024-01-01"));
    assert_eq!(store.search(&created).unwrap().count, 3);
    let mut backwards = SearchRequest::new("cat").user("ann");
    backwards.valid_after = Some(day("2023-07-01"));
    backwards.valid_before = Some(day("2023-06-01"));
    assert!(matches!(
        store.search(&backwards),
        Err(EngineError::Invalid {
            field: "valid_before",
            ..
        })
    ));
}

/// `neighbours: n` gives each result in a session the records right before and after it in
/// that session, in session order and itself left out, whatever the filters; the page itself
/// (ids, order, scores) is the page without it. Out of range is refused.
#[test]
fn a_result_carries_its_session_neighbours() {
    let (_fs, store) = open();
    store
        .create_entity(EntityKind::User, None, "u", None, None)
        .unwrap();
    store
        .create_entity(EntityKind::Session, Some("u"), "s", None, None)
        .unwrap();
    let turns: Vec<(Role, String)> = [
        "What are you reading lately?",
        "A novel about a lighthouse keeper",
        "What genre is it?",
        "It's a mix of drama and romance!",
        "Sounds lovely",
    ]
    .iter()
    .enumerate()
    .map(|(i, t)| {
        let role = if i % 2 == 0 {
            Role::User
        } else {
            Role::Assistant
        };
        (role, (*t).to_owned())
    })
    .collect();
    let ids = store.add_messages(Some("u"), "s", &turns).unwrap();
    store
        .store(NewMemory::new("a note about romance novels, in no session").user("u"))
        .unwrap();
    let mut req = keyword("romance").user("u");
    let plain = store.search(&req).unwrap();
    req.neighbours = 1;
    let with = store.search(&req).unwrap();
    let page = |h: &amberdb::Hits| -> Vec<(MemoryId, f32)> {
        h.results.iter().map(|r| (r.memory.id, r.score)).collect()
    };
    assert_eq!(page(&plain), page(&with), "the page is the same");
    assert!(plain.results.iter().all(|r| r.context.is_empty()));
    let turn = with
        .results
        .iter()
        .find(|r| r.memory.id == ids[3])
        .expect("the turn is found");
    let around: Vec<(MemoryId, i64)> = turn
        .context
        .iter()
        .map(|n| (n.memory_id, n.position))
        .collect();
    assert_eq!(around, [(ids[2], -1), (ids[4], 1)]);
    assert_eq!(turn.context[0].content, "What genre is it?");
    assert_eq!(turn.context[0].role, Some(Role::User));
    let note = with
        .results
        .iter()
        .find(|r| r.memory.session_id.is_none())
        .expect("the note is found");
    assert!(note.context.is_empty(), "no session, no neighbours");
    // Two on each side, cut at the session's ends.
    req.neighbours = 2;
    let two = store.search(&req).unwrap();
    let turn = two.results.iter().find(|r| r.memory.id == ids[3]).unwrap();
    let around: Vec<i64> = turn.context.iter().map(|n| n.position).collect();
    assert_eq!(around, [-2, -1, 1]);
    req.neighbours = amberdb::MAX_NEIGHBOURS + 1;
    assert!(matches!(
        store.search(&req),
        Err(EngineError::LimitExceeded {
            what: "neighbours",
            ..
        })
    ));
}
