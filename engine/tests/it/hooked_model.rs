//! Random operation sequences with every hook on (merges, supersedes, compaction and its undo,
//! updates, tag snapshots, deletes, checkpoints, reopens), checked after every step against
//! the invariants of `docs/semantics.md` and, at every reopen, against the state before it.

use super::support::{Rng, seed};
use amberdb::storage::FaultyStorage;
use amberdb::{
    EngineError, HashingEmbedder, Memory, MemoryId, NewMemory, Store, StoreOptions, StoreRequest,
    UpdateRequest,
};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

const DIM: usize = 8;

/// Every hook on, paraphrases merged too (`Merge::Paraphrases`), so the sequences merge.
fn options(fs: &FaultyStorage) -> StoreOptions {
    StoreOptions::new(Arc::new(HashingEmbedder::with_dim(DIM)))
        .storage(Arc::new(fs.clone()))
        .seal_rows(5)
        .hooks(amberdb::HookConfig {
            merge: amberdb::Merge::Paraphrases,
            ..amberdb::HookConfig::default()
        })
}

/// A vector near one of four cluster centres.
fn vector(rng: &mut Rng, cluster: u64) -> Vec<f32> {
    let mut v = vec![0.0f32; DIM];
    v[cluster as usize * 2] = 1.0;
    for x in &mut v {
        *x += (rng.below(1000) as f32 / 1000.0 - 0.5) * 0.2;
    }
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter().map(|x| x / n).collect()
}

/// Texts of a cluster: word-order variants (duplicates to the fact guard), variants with a
/// number (distinct facts) and with one replaced word (updates).
fn text(rng: &mut Rng, cluster: u64, n: u64) -> String {
    let words = ["cache", "keys", "expire", "hourly", "in", "redis"];
    let mut w: Vec<&str> = words.to_vec();
    w.rotate_left((n % 6) as usize);
    match rng.below(4) {
        0 => format!("cluster {cluster} retries {} {}", rng.below(4), w.join(" ")),
        // A new value of one slot: the newer updates (supersedes) the older.
        1 => format!(
            "The colour of cluster {cluster} is {}",
            ["red", "blue", "green"][rng.below(3) as usize]
        ),
        _ => format!(
            "cluster {cluster} {} {}",
            w.join(" "),
            ".".repeat((n / 6) as usize)
        ),
    }
}

/// Every live memory, by id (ids are never reused; 300 steps assign far fewer than 4,000).
fn live(store: &Store) -> Vec<Memory> {
    (1..4_000)
        .filter_map(|i| store.get(amberdb::MemoryId(i)).ok())
        .collect()
}

/// Everything a reopen must give back: live memories, each one's lineage, canonical tags.
type Snapshot = (Vec<Memory>, Vec<(MemoryId, Vec<String>)>, Vec<String>);

fn state(store: &Store) -> Snapshot {
    let live = live(store);
    let lineage = live
        .iter()
        .map(|m| {
            let contents = store
                .lineage(m.id)
                .unwrap()
                .into_iter()
                .map(|a| a.content)
                .collect();
            (m.id, contents)
        })
        .collect();
    (live, lineage, store.canonical_tags(None).unwrap())
}

fn check_invariants(store: &Store, stored_texts: &BTreeSet<String>, deleted: &BTreeSet<String>) {
    let live = live(store);
    let mut contents = BTreeSet::new();
    let mut reachable: BTreeSet<String> = BTreeSet::new();
    let mut freq: BTreeMap<String, u64> = BTreeMap::new();
    for m in &live {
        assert!(
            contents.insert(m.content.clone()),
            "two live copies of {:?}",
            m.content
        );
        reachable.insert(m.content.clone());
        for s in &m.supersedes {
            assert!(
                matches!(store.get(*s), Err(EngineError::Archived { .. })),
                "source {s} of {} is not archived",
                m.id
            );
        }
        for a in store.lineage(m.id).unwrap() {
            reachable.insert(a.content);
        }
        for t in &m.tags {
            *freq.entry(t.clone()).or_default() += 1;
        }
    }
    // Nothing stored is lost: every text is live, in a live memory's lineage, or was deleted
    // (itself or the live memory that held it).
    for t in stored_texts {
        assert!(
            reachable.contains(t) || deleted.contains(t),
            "{t:?} is neither live, in lineage, nor deleted"
        );
    }
    let mut want: Vec<(String, u64)> = freq.into_iter().collect();
    want.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    assert_eq!(
        store.tag_frequencies(None).unwrap(),
        want,
        "frequencies follow live memories"
    );
}

#[test]
fn random_hooked_operations_keep_every_fact_and_survive_reopens() {
    let seed = seed(
        "random_hooked_operations_keep_every_fact_and_survive_reopens",
        0x4B00C,
    );
    let mut rng = Rng::new(seed);
    let fs = FaultyStorage::new();
    let dir = Path::new("/hooked");
    let mut store = Store::open(dir, options(&fs)).unwrap();
    let mut stored_texts: BTreeSet<String> = BTreeSet::new();
    let mut deleted: BTreeSet<String> = BTreeSet::new();
    let mut outcomes = BTreeMap::new();
    for step in 0..300u64 {
        match rng.below(20) {
            0..=11 => {
                let cluster = rng.below(4);
                let n = rng.below(30);
                let t = text(&mut rng, cluster, n);
                let tag = ["alpha", "beta", "gamma delta"][rng.below(3) as usize];
                let req = StoreRequest::new(NewMemory::new(&t).tags([tag]));
                match store.store(req.with_vector(vector(&mut rng, cluster))) {
                    Ok(s) => {
                        *outcomes.entry(format!("{:?}", s.outcome)).or_insert(0) += 1;
                        stored_texts.insert(t);
                    }
                    Err(EngineError::AlreadyExists { .. }) => {}
                    Err(e) => panic!("seed {seed} step {step}: {e}"),
                }
            }
            12 => {
                let all = live(&store);
                if let Some(m) = all.get(rng.below(all.len().max(1) as u64) as usize) {
                    // What the deleted memory held: itself and its lineage.
                    for a in store.lineage(m.id).unwrap() {
                        deleted.insert(a.content);
                    }
                    store.delete(m.id).unwrap();
                    deleted.insert(m.content.clone());
                }
            }
            13 => {
                let p = store.compact_preview(None, Some(0.3)).unwrap();
                let done = store.compact_apply(None, Some(0.3), &p.preview_id).unwrap();
                *outcomes.entry("compacted".into()).or_insert(0) += done.merged.len();
            }
            14 => {
                let merged: Vec<Memory> = live(&store)
                    .into_iter()
                    .filter(|m| !m.supersedes.is_empty())
                    .collect();
                if let Some(m) = merged.first() {
                    match store.compact_undo(m.id) {
                        Ok(_) => *outcomes.entry("undone".into()).or_insert(0) += 1,
                        // Every text it supersedes is live already: nothing to undo.
                        Err(EngineError::Invalid { .. }) => {}
                        Err(e) => panic!("seed {seed} step {step}: {e}"),
                    }
                }
            }
            15 => {
                let all = live(&store);
                if let Some(m) = all.first() {
                    let req = UpdateRequest {
                        memory_id: Some(m.id),
                        tags: Some(vec!["updated".into()]),
                        ..UpdateRequest::default()
                    };
                    store.update(req).unwrap();
                }
            }
            16 => {
                let snap = store.snapshot_create(None, "s").unwrap();
                store.snapshot_restore(None, &snap.snapshot_id).unwrap();
            }
            17 => store.checkpoint().unwrap(),
            _ => {
                let before = state(&store);
                drop(store);
                store = Store::open(dir, options(&fs)).unwrap();
                assert_eq!(
                    state(&store),
                    before,
                    "seed {seed} step {step}: reopen differs"
                );
            }
        }
        check_invariants(&store, &stored_texts, &deleted);
    }
    eprintln!("seed {seed}: outcomes {outcomes:?}");
    for kind in ["Stored", "Merged", "Superseded", "undone"] {
        assert!(
            outcomes.get(kind).copied().unwrap_or(0) > 0,
            "no {kind} in {outcomes:?}"
        );
    }
}
