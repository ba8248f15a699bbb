//! agent-memory-server's false-positive scenarios (`docs/semantics.md`, "Where we differ from the peers") with controlled
//! vectors: each memory's vector is chosen, its text is a word-order variant of the same words
//! (so the fact guard calls every pair a duplicate and only the vectors decide).

use amberdb::{
    EngineError, HashingEmbedder, HookConfig, HookOverrides, MemoryId, NewMemory, Outcome, Store,
    StoreOptions, StoreRequest, WriteHook,
};
use std::sync::Arc;

const DIM: usize = 3;

fn open_with(hooks: HookConfig) -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let options = StoreOptions::new(Arc::new(HashingEmbedder::with_dim(DIM))).hooks(hooks);
    let store = Store::open(dir.path(), options).unwrap();
    (dir, store)
}

fn open() -> (tempfile::TempDir, Store) {
    open_with(HookConfig::default())
}

fn unit(v: [f32; 3]) -> Vec<f32> {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter().map(|x| x / n).collect()
}

/// A point at `deg` degrees on the unit circle of the first two axes.
fn at(deg: f32) -> Vec<f32> {
    let r = deg.to_radians();
    vec![r.cos(), r.sin(), 0.0]
}

/// The same words in a different order for every `n`: distinct content, same content words.
/// The `n`th restatement of one sentence in the same words (the vectors, not the words,
/// decide these tests; the fact guard reads every pair as the same statement).
fn text(n: usize) -> String {
    format!("cache keys expire hourly in redis{}", ".".repeat(n + 1))
}

fn store(store: &Store, n: usize, v: Vec<f32>) -> MemoryId {
    store
        .store(StoreRequest::new(NewMemory::new(text(n))).with_vector(v))
        .unwrap()
        .memory_id
}

fn live(store: &Store) -> Vec<amberdb::Memory> {
    store.list_recent(None, 50).unwrap()
}

#[test]
fn unrelated_memories_do_not_merge() {
    let (_d, s) = open();
    store(&s, 0, unit([1.0, 0.0, 0.0]));
    store(&s, 1, unit([0.0, 1.0, 0.0]));
    store(&s, 2, unit([0.0, 0.0, 1.0]));
    assert_eq!(live(&s).len(), 3);
}

#[test]
fn a_bridge_memory_is_refused_by_the_cohesion_check() {
    let (_d, s) = open();
    store(&s, 0, unit([1.0, 0.0, 0.0]));
    store(&s, 1, unit([0.0, 1.0, 0.0]));
    // 0.2929 from both, within 0.35 of both, but they are 1.0 apart.
    store(&s, 2, unit([1.0, 1.0, 0.0]));
    assert_eq!(live(&s).len(), 3);
}

#[test]
fn the_threshold_decides_around_the_bridge_distance() {
    // The bridge is at distance 0.2929 from its one neighbour.
    let strict_hooks = HookConfig {
        dedup_distance: Some(0.29),
        ..HookConfig::default()
    };
    let (_d1, strict) = open_with(strict_hooks);
    store(&strict, 0, unit([1.0, 0.0, 0.0]));
    store(&strict, 1, unit([1.0, 1.0, 0.0]));
    assert_eq!(live(&strict).len(), 2, "0.2929 > 0.29: no merge");
    let (_d2, default) = open();
    store(&default, 0, unit([1.0, 0.0, 0.0]));
    store(&default, 1, unit([1.0, 1.0, 0.0]));
    assert_eq!(live(&default).len(), 1, "0.2929 <= 0.35: merged");
}

#[test]
fn a_tight_cluster_merges_into_one_with_every_source_in_lineage() {
    let (_d, s) = open();
    let ids: Vec<MemoryId> = (0..4)
        .map(|i| store(&s, i, unit([1.0, 0.02 * i as f32, 0.01])))
        .collect();
    let now = live(&s);
    assert_eq!(now.len(), 1, "{now:?}");
    let lineage: Vec<String> = s
        .lineage(now[0].id)
        .unwrap()
        .into_iter()
        .map(|m| m.content)
        .collect();
    for i in 0..4 {
        assert!(lineage.contains(&text(i)), "{} in {lineage:?}", text(i));
    }
    assert!(matches!(s.get(ids[0]), Err(EngineError::Archived { .. })));
}

#[test]
fn a_capped_group_of_ten_still_merges() {
    // Piled up with semantic dedup off, as in the peer's test, then one more with it on: it
    // finds 10 candidates (the cap), whose windows are full and may hold the 2 outsiders.
    let (_d, s) = open();
    for i in 0..12 {
        let req = StoreRequest {
            vector: None,
            memory: NewMemory::new(text(i)),
            hooks: HookOverrides {
                skip: vec![WriteHook::SemanticDedup],
                ..HookOverrides::default()
            },
        };
        s.store(req.with_vector(unit([1.0, 0.001 * i as f32, 0.0])))
            .unwrap();
    }
    assert_eq!(live(&s).len(), 12);
    let out = s
        .store(StoreRequest::new(NewMemory::new(text(12))).with_vector(unit([1.0, 0.0005, 0.0])))
        .unwrap();
    assert_eq!(out.outcome, Outcome::Merged, "{out:?}");
    assert_eq!(out.supersedes.len(), 11, "the new memory and 10 candidates");
    assert_eq!(live(&s).len(), 12 - 10 + 1);
}

#[test]
fn a_chain_of_near_neighbours_does_not_snowball() {
    let (_d, s) = open();
    // Each point is 30 degrees (distance 0.134) from the previous one; 60 degrees apart is
    // distance 0.5, outside 0.35. Without complete linkage every store would merge into one.
    for (i, deg) in [0.0, 30.0, 60.0, 90.0, 120.0, 150.0]
        .into_iter()
        .enumerate()
    {
        store(&s, i, at(deg));
    }
    let now = live(&s);
    assert!(now.len() >= 3, "snowballed into {} memories", now.len());
    for m in &now {
        let mut vectors = vec![s.vector(m.id).unwrap()];
        for a in s.lineage(m.id).unwrap() {
            let n: usize = (0..6).find(|n| text(*n) == a.content).unwrap();
            vectors.push(at(30.0 * n as f32));
        }
        for a in &vectors {
            for b in &vectors {
                let sim: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
                assert!(sim >= 0.65 - 1e-6, "memory {} spans {sim}", m.id);
            }
        }
    }
}

/// The hashing embedder under another model's name: what a store sees of its embedder is the
/// id (which picks the calibration) and the vectors, which these tests choose.
struct Named(&'static str, HashingEmbedder);

impl amberdb::Embedder for Named {
    fn model_id(&self) -> &str {
        self.0
    }
    fn dim(&self) -> usize {
        self.1.dim()
    }
    fn embed_batch(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, amberdb_embed::EmbedError> {
        self.1.embed_batch(texts)
    }
}

/// Every threshold is the embedder's (`hooks::Calibration`): two restatements at a cosine of
/// 0.70 (distance 0.30) merge in a MiniLM store (its dedup distance 0.35) and stay apart in a
/// store whose embedder is bge-small (0.241: bge-small's cosines run higher, and 0.70 is
/// below the median of its different-meaning pairs); a distance the store sets is used as
/// given whatever the embedder.
#[test]
fn the_dedup_distance_is_the_embedders_unless_the_store_sets_one() {
    let open_named = |id: &'static str, hooks: HookConfig| {
        let dir = tempfile::tempdir().unwrap();
        let embedder = Arc::new(Named(id, HashingEmbedder::with_dim(DIM)));
        let store = Store::open(dir.path(), StoreOptions::new(embedder).hooks(hooks)).unwrap();
        (dir, store)
    };
    let seventy = 0.70f32.acos().to_degrees();
    for (id, hooks, live_after) in [
        (
            "sentence-transformers/all-MiniLM-L6-v2",
            HookConfig::default(),
            1,
        ),
        ("BAAI/bge-small-en-v1.5", HookConfig::default(), 2),
        (
            "BAAI/bge-small-en-v1.5",
            HookConfig {
                dedup_distance: Some(0.35),
                ..HookConfig::default()
            },
            1,
        ),
    ] {
        let (_d, s) = open_named(id, hooks.clone());
        store(&s, 0, at(0.0));
        store(&s, 1, at(seventy));
        assert_eq!(live(&s).len(), live_after, "{id} with {hooks:?}");
    }
}
