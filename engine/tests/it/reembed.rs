//! Re-embedding (issue #17, `docs/durability.md`, "Re-embedding"): a store moves to another
//! embedder with nothing lost but its old vectors, while it is read and written, and a crash at
//! any sync point leaves it whole on one embedder or the other.

use amberdb::storage::{FaultyStorage, Storage};
use amberdb::{
    Embedder, EngineError, HashingEmbedder, Memory, MemoryId, NewMemory, SearchRequest, Store,
    StoreOptions, UpdateRequest,
};
use std::path::Path;
use std::sync::Arc;

const DIR: &str = "/s";
const OLD_DIM: usize = 24;
const NEW_DIM: usize = 40;

fn old() -> Arc<dyn Embedder> {
    Arc::new(HashingEmbedder::with_dim(OLD_DIM))
}

fn new() -> Arc<dyn Embedder> {
    Arc::new(HashingEmbedder::with_dim(NEW_DIM))
}

/// The new embedder, 5 ms slower per call: a re-embedding long enough for reads and writes
/// to run during every phase of it.
struct Slow(HashingEmbedder);

impl Embedder for Slow {
    fn model_id(&self) -> &str {
        self.0.model_id()
    }
    fn dim(&self) -> usize {
        self.0.dim()
    }
    fn embed_batch(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, amberdb_embed::EmbedError> {
        std::thread::sleep(std::time::Duration::from_millis(5));
        self.0.embed_batch(texts)
    }
}

/// Every hook on (tags register canonical tags with vectors), small segments.
fn options(fs: &FaultyStorage, embedder: Arc<dyn Embedder>) -> StoreOptions {
    StoreOptions::new(embedder)
        .storage(Arc::new(fs.clone()))
        .seal_rows(16)
        .maintenance_thread(false)
}

/// Live records, archived ones (updates), deleted ones, two users, tags.
fn fill(store: &Store, n: u64) -> Vec<MemoryId> {
    let mut ids = Vec::new();
    for i in 0..n {
        let user = if i % 2 == 0 { "ann" } else { "bob" };
        let text = format!(
            "note {i} about topic{} and the {} colour",
            i % 7,
            ["red", "green", "blue"][(i % 3) as usize]
        );
        let id = store
            .store(
                NewMemory::new(&text)
                    .user(user)
                    .tags([format!("topic{}", i % 5), "shared".to_owned()]),
            )
            .unwrap()
            .memory_id;
        ids.push(id);
        if i == n / 2 {
            store.checkpoint().unwrap();
        }
    }
    for id in ids.iter().step_by(9).copied().collect::<Vec<_>>() {
        store
            .update(UpdateRequest {
                memory_id: Some(id),
                content: Some(format!("rewritten note {id} with other words")),
                ..UpdateRequest::default()
            })
            .unwrap();
    }
    for id in ids.iter().skip(4).step_by(11) {
        let _ = store.delete(*id);
    }
    store.memory_ids()
}

/// Every record, live and archived, by id, with access counts left out only where reading
/// counts an access.
fn contents(store: &Store) -> Vec<(Memory, Vec<Memory>)> {
    let mut ids = store.memory_ids();
    ids.sort();
    ids.into_iter()
        .map(|id| (store.get(id).unwrap(), store.lineage(id).unwrap()))
        .collect()
}

fn file_bytes(fs: &FaultyStorage) -> Vec<u8> {
    let mut all = Vec::new();
    for name in fs.list(Path::new(DIR)).unwrap() {
        if let Ok(b) = fs.read(&Path::new(DIR).join(&name)) {
            all.extend(b);
        }
    }
    all
}

fn as_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[test]
fn a_reembedded_store_keeps_everything_but_its_old_vectors() {
    let fs = FaultyStorage::new();
    let store = Store::open(DIR, options(&fs, old())).unwrap();
    let live = fill(&store, 120);
    let before = contents(&store);
    let old_vector = store.vector(live[3]).unwrap();
    assert_eq!(old_vector.len(), OLD_DIM);
    let tags_before = store.canonical_tags(Some("ann")).unwrap();
    assert!(!tags_before.is_empty());

    let done = store.reembed(new()).unwrap();
    eprintln!("{done:?}");
    assert_eq!(
        (done.model_id.as_str(), done.dim),
        (new().model_id(), NEW_DIM)
    );
    assert!(
        done.records >= live.len(),
        "{} < {}",
        done.records,
        live.len()
    );
    assert!(done.tags >= tags_before.len());
    assert_eq!(store.embedder_id(), new().model_id());
    assert_eq!(
        store.stats().embedder,
        (new().model_id().to_owned(), NEW_DIM)
    );
    assert!(store.stats().reembedding.is_none());
    // Nothing changed but the vectors, which are the new embedder's of each text.
    assert_eq!(contents(&store), before);
    assert_eq!(store.canonical_tags(Some("ann")).unwrap(), tags_before);
    for id in &live {
        let m = store.get(*id).unwrap();
        assert_eq!(
            store.vector(*id).unwrap(),
            new().embed(&m.content).unwrap(),
            "{id}"
        );
    }
    // Search and write with the new embedder.
    let hits = store
        .search(&SearchRequest::new("note 5 about topic5").user("bob"))
        .unwrap();
    assert!(hits.count > 0);
    let added = store
        .store(NewMemory::new("a note written after the switch").user("ann"))
        .unwrap()
        .memory_id;
    assert_eq!(store.vector(added).unwrap().len(), NEW_DIM);
    // The old vectors left every file (the purge after the switch).
    let needle = as_bytes(&old_vector);
    let bytes = file_bytes(&fs);
    assert!(
        !bytes.windows(needle.len()).any(|w| w == needle),
        "an old vector is still in the files"
    );
    let after = contents(&store);
    drop(store);
    // The store opens with the new embedder only.
    match Store::open(DIR, options(&fs, old())) {
        Err(EngineError::EmbedderMismatch {
            stored_model,
            stored_dim,
            ..
        }) => assert_eq!(
            (stored_model.as_str(), stored_dim),
            (new().model_id(), NEW_DIM)
        ),
        other => panic!("opened with the old embedder: {other:?}"),
    }
    let reopened = Store::open(DIR, options(&fs, new())).unwrap();
    assert_eq!(contents(&reopened), after);
    assert_eq!(reopened.vector(added).unwrap().len(), NEW_DIM);
    // And it moves back.
    reopened.reembed(old()).unwrap();
    assert_eq!(reopened.vector(live[3]).unwrap(), old_vector);
}

#[test]
fn a_reembedding_refuses_bad_requests_and_changes_nothing() {
    let fs = FaultyStorage::new();
    let store = Store::open(DIR, options(&fs, old())).unwrap();
    fill(&store, 10);
    let seq = store.stats().last_seq;
    let same = store.reembed(old());
    assert!(
        matches!(
            same,
            Err(EngineError::Invalid {
                field: "embedder",
                ..
            })
        ),
        "{same:?}"
    );
    let scoped = store.scoped("ann").unwrap().reembed(new());
    assert!(
        matches!(scoped, Err(EngineError::OutOfScope { .. })),
        "{scoped:?}"
    );
    assert_eq!(
        store.stats().last_seq,
        seq,
        "a refused re-embedding wrote nothing"
    );
    assert_eq!(store.stats().embedder.1, OLD_DIM);
}

#[test]
fn reads_and_writes_go_on_while_a_store_is_reembedded() {
    let fs = FaultyStorage::new();
    let store = Store::open(DIR, options(&fs, old())).unwrap();
    fill(&store, 300);
    let stored = std::sync::Mutex::new(Vec::new());
    let done = std::sync::atomic::AtomicBool::new(false);
    let (mut writes, mut searches) = (0, 0);
    std::thread::scope(|s| {
        let writer = s.spawn(|| {
            let mut during = 0u64;
            for n in 0u64.. {
                let finished = done.load(std::sync::atomic::Ordering::Acquire);
                if finished && n >= 50 {
                    break;
                }
                let text = format!("written during the re-embedding number {n}");
                let id = store
                    .store(NewMemory::new(&text).user("ann"))
                    .unwrap()
                    .memory_id;
                stored.lock().unwrap().push((id, text));
                during += u64::from(!finished);
            }
            during
        });
        let reader = s.spawn(|| {
            let mut during = 0u64;
            for n in 0u64.. {
                let finished = done.load(std::sync::atomic::Ordering::Acquire);
                if finished && n >= 50 {
                    break;
                }
                let hits = store
                    .search(&SearchRequest::new("note about topic3 green").user("ann"))
                    .unwrap();
                assert!(
                    hits.count > 0,
                    "a search during the re-embedding found nothing"
                );
                during += u64::from(!finished);
            }
            during
        });
        store
            .reembed(Arc::new(Slow(HashingEmbedder::with_dim(NEW_DIM))))
            .unwrap();
        done.store(true, std::sync::atomic::Ordering::Release);
        writes = writer.join().unwrap();
        searches = reader.join().unwrap();
    });
    assert!(
        writes > 0 && searches > 0,
        "{writes} writes, {searches} searches during it"
    );
    eprintln!("{writes} writes and {searches} searches during the re-embedding");
    // Every write is there, with the new embedder's vector of its text.
    for (id, text) in stored.lock().unwrap().iter() {
        assert_eq!(&store.get(*id).unwrap().content, text);
        assert_eq!(
            store.vector(*id).unwrap(),
            new().embed(text).unwrap(),
            "{id}"
        );
    }
    drop(store);
    let reopened = Store::open(DIR, options(&fs, new())).unwrap();
    for (id, text) in stored.lock().unwrap().iter() {
        assert_eq!(&reopened.get(*id).unwrap().content, text);
    }
}

#[test]
fn a_power_cut_at_any_sync_point_of_a_reembedding_leaves_one_whole_store() {
    let prepare = |fs: &FaultyStorage| -> (Store, Vec<(Memory, Vec<Memory>)>) {
        let store = Store::open(DIR, options(fs, old())).unwrap();
        fill(&store, 40);
        let c = contents(&store);
        (store, c)
    };
    let clean = FaultyStorage::new();
    let (store, _) = prepare(&clean);
    let start = clean.syncs();
    store.reembed(new()).unwrap();
    let sync_points = clean.syncs() - start;
    drop(store);
    assert!(sync_points >= 4, "{sync_points} sync points");
    eprintln!(
        "a re-embedding: {sync_points} sync points x 3 crash images, each reopened and checked"
    );
    let mut switched = 0;
    for k in 1..=sync_points {
        for image in super::support::crash_images(k) {
            let fs = FaultyStorage::new();
            let (store, before) = prepare(&fs);
            fs.crash_at_sync(k);
            let _ = store.reembed(new());
            assert!(fs.crashed(), "sync point {k} never reached");
            drop(store);
            let after = fs.crash_image(image);
            // It opens on exactly one of the two embedders, with every record.
            let (reopened, on_new) = match Store::open(DIR, options(&after, old())) {
                Ok(s) => (s, false),
                Err(EngineError::EmbedderMismatch { .. }) => (
                    Store::open(DIR, options(&after, new()))
                        .unwrap_or_else(|e| panic!("sync point {k}, {image:?}: {e}")),
                    true,
                ),
                Err(e) => panic!("sync point {k}, {image:?}: {e}"),
            };
            switched += usize::from(on_new);
            assert_eq!(contents(&reopened), before, "sync point {k}, {image:?}");
            let dim = if on_new { NEW_DIM } else { OLD_DIM };
            for (m, _) in &before {
                assert_eq!(reopened.vector(m.id).unwrap().len(), dim);
            }
            // A re-embedding cut short carries on; one that switched is done, and its store
            // checkpoints, purges and reopens on the new embedder.
            if on_new {
                reopened.checkpoint().unwrap();
                reopened.purge().unwrap();
            } else {
                reopened.reembed(new()).unwrap();
            }
            assert_eq!(reopened.stats().embedder.1, NEW_DIM);
            assert_eq!(contents(&reopened), before);
            drop(reopened);
            let again = Store::open(DIR, options(&after, new()))
                .unwrap_or_else(|e| panic!("sync point {k}, {image:?}, second open: {e}"));
            assert_eq!(contents(&again), before, "sync point {k}, {image:?}");
            for (m, _) in &before {
                assert_eq!(
                    again.vector(m.id).unwrap(),
                    new().embed(&m.content).unwrap()
                );
            }
        }
    }
    assert!(switched > 0, "no crash image was on the new embedder");
}

/// The new embedder, failing from its `fail_from`-th call on.
struct Failing {
    inner: HashingEmbedder,
    calls: std::sync::atomic::AtomicUsize,
    fail_from: usize,
}

impl Embedder for Failing {
    fn model_id(&self) -> &str {
        self.inner.model_id()
    }
    fn dim(&self) -> usize {
        self.inner.dim()
    }
    fn embed_batch(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, amberdb_embed::EmbedError> {
        let n = self
            .calls
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if n + 1 >= self.fail_from {
            return Err(amberdb_embed::EmbedError::Failed {
                model_id: self.model_id().to_owned(),
                reason: "the test's embedder fails now".into(),
            });
        }
        self.inner.embed_batch(texts)
    }
}

#[test]
fn an_interrupted_reembedding_carries_on_from_what_it_staged_across_a_checkpoint_and_a_reopen() {
    let fs = FaultyStorage::new();
    let store = Store::open(DIR, options(&fs, old())).unwrap();
    let live = fill(&store, 400);
    let failing = Arc::new(Failing {
        inner: HashingEmbedder::with_dim(NEW_DIM),
        calls: Default::default(),
        fail_from: 2,
    });
    let cut = store.reembed(failing);
    assert!(matches!(cut, Err(EngineError::Embed(_))), "{cut:?}");
    // Still the old embedder, with one chunk staged.
    let status = store.stats().reembedding.expect("a re-embedding is staged");
    assert_eq!(
        (status.model_id.as_str(), status.dim),
        (new().model_id(), NEW_DIM)
    );
    assert!(
        status.staged > 0 && status.staged < status.total,
        "{status:?}"
    );
    assert_eq!(store.vector(live[0]).unwrap().len(), OLD_DIM);
    // A staged record deleted leaves the stage; the stage survives a checkpoint and a reopen.
    store.delete(live[0]).unwrap();
    assert_eq!(store.stats().reembedding.unwrap().staged, status.staged - 1);
    store.checkpoint().unwrap();
    drop(store);
    let store = Store::open(DIR, options(&fs, old())).unwrap();
    let reopened = store.stats().reembedding.expect("the stage came back");
    assert_eq!(reopened.staged, status.staged - 1);
    // The next call embeds only the rest.
    let before = contents(&store);
    let done = store.reembed(new()).unwrap();
    assert_eq!(done.records + done.tags, reopened.total - reopened.staged);
    assert_eq!(contents(&store), before);
    for id in store.memory_ids() {
        let m = store.get(id).unwrap();
        assert_eq!(
            store.vector(id).unwrap(),
            new().embed(&m.content).unwrap(),
            "{id}"
        );
    }
    assert!(store.stats().reembedding.is_none());
}

#[test]
fn a_cancelled_reembedding_leaves_no_staged_vector_behind() {
    let fs = FaultyStorage::new();
    let store = Store::open(DIR, options(&fs, old())).unwrap();
    fill(&store, 400);
    assert!(!store.cancel_reembed().unwrap(), "nothing to cancel yet");
    let failing = Arc::new(Failing {
        inner: HashingEmbedder::with_dim(NEW_DIM),
        calls: Default::default(),
        fail_from: 2,
    });
    assert!(store.reembed(failing).is_err());
    let staged_vector = new()
        .embed(&store.get(store.memory_ids()[0]).unwrap().content)
        .unwrap();
    assert!(store.stats().reembedding.is_some());
    assert!(store.cancel_reembed().unwrap());
    assert!(store.stats().reembedding.is_none());
    assert!(store.scoped("ann").unwrap().cancel_reembed().is_err());
    // The purge that follows leaves none of the staged vectors in the files, and a reopen
    // brings no stage back.
    store.purge().unwrap();
    let needle = as_bytes(&staged_vector);
    assert!(!file_bytes(&fs).windows(needle.len()).any(|w| w == needle));
    drop(store);
    let store = Store::open(DIR, options(&fs, old())).unwrap();
    assert!(store.stats().reembedding.is_none());
    assert_eq!(store.stats().embedder.1, OLD_DIM);
}

#[test]
fn the_new_vectors_are_indexed_after_a_reembedding() {
    let fs = FaultyStorage::new();
    // Rows are sealed only by explicit checkpoints and the purge, as in a store whose growing
    // segment is far from full.
    let mut o = options(&fs, old()).seal_rows(100_000);
    o.index = amberdb::IndexOptions {
        min_rows: 64,
        ..amberdb::IndexOptions::default()
    };
    let store = Store::open(DIR, o.clone()).unwrap();
    fill(&store, 300);
    store.checkpoint().unwrap();
    store.reembed(new()).unwrap();
    // The purge after the switch sealed every new vector; a build indexes them as after any
    // checkpoint that seals rows, without another write.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while store.stats().index.segments.is_empty() || store.stats().index.building {
        assert!(
            std::time::Instant::now() < deadline,
            "no index of the new vectors: {:?}",
            store.stats().index
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(
        store.stats().index.flat_rows,
        0,
        "{:?}",
        store.stats().index
    );
    let hits = store
        .search(&SearchRequest::new("note 5 about topic5").user("bob"))
        .unwrap();
    assert!(hits.count > 0);
    drop(store);
    let reopened = Store::open(DIR, options(&fs, new())).unwrap();
    assert!(!reopened.stats().index.segments.is_empty());
}
