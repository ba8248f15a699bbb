//! IVF segments in a store (`docs/ivf.md`, `docs/durability.md` B1–B4): a build keeps every
//! answer of the exact scan, survives reopening and a power cut at every one of its sync
//! points, runs in the background and merges, and never keeps a closed store open.

use super::support::{Rng, seed, small_options};
use amberdb::KernelError;
use amberdb::storage::{FaultyStorage, Storage};
use amberdb::{
    EngineError, IndexOptions, MemoryId, NewMemory, Probe, ScanMode, SearchRequest, Store,
    StoreOptions, StoreRequest,
};
use std::path::Path;
use std::time::{Duration, Instant};

const DIM: usize = 8;

fn options(fs: &FaultyStorage, seal_rows: usize, min_rows: usize) -> StoreOptions {
    let mut o = small_options(fs, seal_rows);
    o.hooks = amberdb::HookConfig::none();
    o.index = IndexOptions {
        min_rows,
        ..IndexOptions::default()
    };
    o
}

/// Vectors around a few directions, so lists mean something.
fn vectors(n: usize, seed: u64) -> Vec<Vec<f32>> {
    amberdb_index::synthetic::clustered(n, DIM, 12, 0.6, seed)
        .chunks_exact(DIM)
        .map(<[f32]>::to_vec)
        .collect()
}

fn fill(store: &Store, vs: &[Vec<f32>]) -> Vec<MemoryId> {
    vs.iter()
        .enumerate()
        .map(|(i, v)| {
            store
                .store(
                    StoreRequest::new(NewMemory::new(format!("memory {i}"))).with_vector(v.clone()),
                )
                .expect("store")
                .memory_id
        })
        .collect()
}

fn search(store: &Store, q: &[f32], scan: ScanMode, probe: Probe) -> Vec<(MemoryId, f32)> {
    store
        .search(
            &SearchRequest::by_vector(q.to_vec())
                .limit(10)
                .scan(scan)
                .probe(probe)
                .without_hooks(),
        )
        .expect("search")
        .results
        .iter()
        .map(|h| (h.memory.id, h.score))
        .collect()
}

fn exact_answers(store: &Store, queries: &[Vec<f32>]) -> Vec<Vec<(MemoryId, f32)>> {
    queries
        .iter()
        .map(|q| search(store, q, ScanMode::Exact, Probe::Built))
        .collect()
}

fn segment_files(fs: &FaultyStorage) -> Vec<String> {
    let mut v: Vec<String> = fs
        .list(Path::new("/s"))
        .unwrap()
        .into_iter()
        .filter(|n| n.starts_with("seg-"))
        .collect();
    v.sort();
    v
}

#[test]
fn an_index_build_keeps_every_answer_and_survives_reopen() {
    let seed = seed("an_index_build_keeps_every_answer", 21);
    eprintln!("seed {seed}");
    let fs = FaultyStorage::new();
    let store = Store::open(Path::new("/s"), options(&fs, 50, 0)).unwrap();
    let ids = fill(&store, &vectors(600, seed));
    let mut rng = Rng::new(seed);
    for _ in 0..40 {
        let _ = store.delete(ids[rng.below(600) as usize]);
    }
    store.checkpoint().unwrap();
    let queries = vectors(20, seed + 1);
    let before = exact_answers(&store, &queries);
    let flat = store.stats().sealed_segments;
    assert!(flat >= 10, "{flat} flat segments");

    let built = store
        .build_index()
        .unwrap()
        .expect("flat segments to index");
    let live = store.stats().memories as u64;
    assert_eq!((built.rows, built.replaced), (live, flat));
    assert!(built.built_recall >= 0.95, "{built:?}");
    let stats = store.stats();
    assert_eq!(stats.index.segments.len(), 1);
    assert_eq!(stats.index.flat_rows, 0);
    assert_eq!(stats.index.builds, 1);
    assert_eq!(stats.sealed_segments, 1);
    assert_eq!(stats.index.segments[0].nprobe, built.nprobe);
    // The exact scan reads the IVF segment whole: the same answers, the same scores.
    assert_eq!(exact_answers(&store, &queries), before);
    // The probe: ten hits always; every list probed, the exact answer's members.
    let mut hit = 0;
    for (q, want) in queries.iter().zip(&before) {
        assert_eq!(search(&store, q, ScanMode::Compact, Probe::Built).len(), 10);
        let all = search(&store, q, ScanMode::Compact, Probe::Lists(u32::MAX));
        hit += all.iter().filter(|h| want.contains(h)).count();
    }
    assert!(hit >= 190, "{hit} of 200");
    // Nothing to index twice.
    assert_eq!(store.build_index().unwrap(), None);

    // Deletes and writes after the build.
    let gone = before[0][0].0;
    store.delete(gone).unwrap();
    assert!(
        search(&store, &queries[0], ScanMode::Compact, Probe::Built)
            .iter()
            .all(|h| h.0 != gone)
    );
    let fresh = fill(&store, &queries[1..2]);
    assert_eq!(
        search(&store, &queries[1], ScanMode::Compact, Probe::Built)[0].0,
        fresh[0]
    );
    let after = exact_answers(&store, &queries);
    drop(store);

    let store = Store::open(Path::new("/s"), options(&fs, 50, 0)).unwrap();
    assert_eq!(store.stats().index.segments.len(), 1);
    assert_eq!(exact_answers(&store, &queries), after);
    assert!(store.open_report().orphan_segments.is_empty());
    // The replaced flat files stay while a retained checkpoint names them: a delta keeps its
    // base, which may (docs/durability.md, "Incremental checkpoints"). Once none does (a
    // purge leaves one full checkpoint), they are gone.
    for i in 0..2 {
        fill(&store, &queries[i..=i]);
        store.checkpoint().unwrap();
    }
    store.purge().unwrap();
    assert_eq!(
        segment_files(&fs).len(),
        store.stats().sealed_segments,
        "{:?}",
        segment_files(&fs)
    );
    // A second build merges the new flat segments with the IVF one (binary counter).
    let again = store.build_index().unwrap().expect("two flat segments");
    assert_eq!(again.replaced, 2, "{again:?}: the small flat tail alone");
    assert_eq!(store.stats().index.segments.len(), 2);
}

#[test]
fn a_purge_that_fills_the_disk_inside_an_ivf_rewrite_changes_nothing() {
    let seed = seed("a_purge_that_fills_the_disk", 23);
    eprintln!("seed {seed}");
    let fs = FaultyStorage::new();
    let store = Store::open(Path::new("/s"), options(&fs, 50, 0)).unwrap();
    let ids = fill(&store, &vectors(600, seed));
    store.checkpoint().unwrap();
    store.build_index().unwrap().expect("an IVF segment");
    let ivf: Vec<String> = segment_files(&fs)
        .into_iter()
        .filter(|n| n.ends_with(".mnsi"))
        .collect();
    assert_eq!(ivf.len(), 1, "{:?}", segment_files(&fs));
    let ivf_len = fs.read(&Path::new("/s").join(&ivf[0])).unwrap().len() as u64;
    let mut rng = Rng::new(seed);
    let mut deleted = 0;
    for _ in 0..30 {
        deleted += u64::from(store.delete(ids[rng.below(600) as usize]).is_ok());
    }
    let queries = vectors(20, seed + 1);
    let before = exact_answers(&store, &queries);
    let files = segment_files(&fs);
    // Room for half of the rewritten IVF file: P2 runs out inside it (the rewrite is written
    // in pieces, so the failure comes part way through the segment, not before it).
    fs.set_capacity(Some(fs.used_bytes() + ivf_len / 2));
    let e = store.purge().unwrap_err();
    assert!(
        matches!(e, EngineError::Kernel(KernelError::DiskFull { .. })),
        "{e:?}"
    );
    assert_eq!(segment_files(&fs), files, "no new segment, no .tmp left");
    assert_eq!(exact_answers(&store, &queries), before, "reads go on");
    assert_eq!(store.stats().maintenance.purges, 0);
    fs.set_capacity(None);
    let purge = store.purge().unwrap();
    assert_eq!((purge.segments_rewritten, purge.rows_dropped), (1, deleted));
    assert_eq!(exact_answers(&store, &queries), before);
    drop(store);
    let store = Store::open(Path::new("/s"), options(&fs, 50, 0)).unwrap();
    assert_eq!(exact_answers(&store, &queries), before);
    assert_eq!(
        store.stats().index.segments.len(),
        1,
        "still one IVF segment"
    );
}

#[test]
fn a_power_cut_at_every_sync_point_of_a_build_loses_nothing() {
    let seed = seed("a_power_cut_at_every_sync_point_of_a_build", 5);
    eprintln!("seed {seed}");
    let vs = vectors(300, seed);
    let queries = vectors(8, seed + 1);
    let prepare = |fs: &FaultyStorage| {
        let store = Store::open(Path::new("/s"), options(fs, 60, 0)).unwrap();
        let ids = fill(&store, &vs);
        store.delete(ids[7]).unwrap();
        store.checkpoint().unwrap();
        let want = exact_answers(&store, &queries);
        (store, ids, want)
    };
    let clean = FaultyStorage::new();
    let (store, _, _) = prepare(&clean);
    let before = clean.syncs();
    store.build_index().unwrap().expect("built");
    let sync_points = clean.syncs() - before;
    drop(store);
    assert!(sync_points >= 4, "{sync_points} sync points in a build");
    let mut cuts = 0;
    for k in 1..=sync_points {
        let fs = FaultyStorage::new();
        let (store, ids, want) = prepare(&fs);
        fs.crash_at_sync(k);
        let result = store.build_index();
        assert!(fs.crashed(), "sync point {k} never reached: {result:?}");
        drop(store);
        for image in super::support::crash_images(k) {
            let what = format!("sync point {k} of {sync_points}, {image:?}");
            let disk = fs.crash_image(image);
            let store = Store::open(Path::new("/s"), options(&disk, 60, 0))
                .unwrap_or_else(|e| panic!("{what}: reopen: {e}"));
            assert!(store.open_report().orphan_segments.is_empty(), "{what}");
            assert_eq!(store.stats().memories, 299, "{what}");
            assert!(store.get(ids[7]).is_err(), "{what}: a delete undone");
            assert_eq!(exact_answers(&store, &queries), want, "{what}");
            // Either the old flat segments or the IVF one, whole; a build works again.
            let ivf = store.stats().index.segments.len();
            assert!(ivf <= 1, "{what}");
            if ivf == 0 {
                store
                    .build_index()
                    .unwrap_or_else(|e| panic!("{what}: rebuild: {e}"));
                assert_eq!(exact_answers(&store, &queries), want, "{what}");
            }
            fill(&store, &queries[..1]);
            cuts += 1;
        }
    }
    eprintln!(
        "{sync_points} sync points of a build × 3 crash images = {cuts} power cuts, nothing lost"
    );
}

fn wait_idle(store: &Store, builds: u64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let s = store.stats().index;
        if s.builds >= builds && !s.building {
            return;
        }
        assert!(Instant::now() < deadline, "no background build: {s:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn background_builds_index_sealed_rows_and_merge_like_a_binary_counter() {
    let seed = seed("background_builds", 8);
    eprintln!("seed {seed}");
    let dir = tempfile::tempdir().unwrap();
    let fs_options = |min_rows| {
        let mut o = StoreOptions::new(std::sync::Arc::new(amberdb::HashingEmbedder::with_dim(DIM)))
            .seal_rows(100)
            .memory_limit(100_000)
            .hooks(amberdb::HookConfig::none());
        o.index = IndexOptions {
            min_rows,
            ..IndexOptions::default()
        };
        o
    };
    let store = Store::open(dir.path(), fs_options(100)).unwrap();
    let vs = vectors(800, seed);
    let queries = vectors(10, seed + 1);
    let mut builds = 0;
    for (round, chunk) in vs.chunks(100).enumerate() {
        fill(&store, chunk);
        // The 100th row seals a segment, which starts a build in the background.
        builds += 1;
        wait_idle(&store, builds);
        let sizes: Vec<usize> = store
            .stats()
            .index
            .segments
            .iter()
            .map(|s| s.rows)
            .collect();
        // Rows 100·(round+1) as a binary number: one segment per set bit, largest first.
        let n = (round + 1) * 100;
        let want: Vec<usize> = (0..4)
            .rev()
            .filter(|b| (n / 100) & (1 << b) != 0)
            .map(|b| 100 << b)
            .collect();
        assert_eq!(sizes, want, "after {n} rows");
        assert_eq!(store.stats().index.flat_rows, 0);
    }
    let want = exact_answers(&store, &queries);
    assert_eq!(store.stats().index.failures, 0);
    drop(store);
    // Reopened: the same segments, the same answers.
    let store = Store::open(dir.path(), fs_options(100)).unwrap();
    assert_eq!(store.stats().index.segments.len(), 1);
    assert_eq!(exact_answers(&store, &queries), want);
    drop(store);

    // Closing while a build runs does not wait for it, and leaves the store as it was.
    let store = Store::open(dir.path(), fs_options(1_000)).unwrap();
    fill(&store, &vectors(4_000, seed + 2));
    let started = Instant::now();
    while !store.stats().index.building && started.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(store);
    let store = Store::open(dir.path(), fs_options(0)).expect("the closed store's lock is free");
    assert_eq!(store.stats().memories, 4_800);
    assert!(store.open_report().orphan_segments.is_empty());
}

#[test]
fn index_options_and_probes_are_checked() {
    let fs = FaultyStorage::new();
    let mut o = options(&fs, 50, 0);
    o.index.target_recall = 1.5;
    assert!(Store::open(Path::new("/s"), o).is_err());
    let mut o = options(&fs, 50, 0);
    o.index.threads = 0;
    assert!(Store::open(Path::new("/s"), o).is_err());
    let store = Store::open(Path::new("/s"), options(&fs, 50, 0)).unwrap();
    fill(&store, &vectors(10, 1));
    let q = SearchRequest::by_vector(vec![1.0; DIM]);
    for bad in [
        Probe::Lists(0),
        Probe::Range(0),
        Probe::Recall(0.0),
        Probe::Recall(1.5),
        Probe::Recall(f32::NAN),
    ] {
        let e = store.search(&q.clone().probe(bad)).unwrap_err();
        assert!(
            matches!(e, amberdb::EngineError::Invalid { .. }),
            "{bad:?}: {e}"
        );
    }
    assert_eq!(
        store.search(&q.probe(Probe::Recall(0.99))).unwrap().count,
        10
    );
}

#[test]
fn store_time_dedup_finds_a_duplicate_through_the_index() {
    let seed = seed("store_time_dedup_through_the_index", 4);
    eprintln!("seed {seed}");
    let dir = tempfile::tempdir().unwrap();
    let dim = 32;
    let mut o = StoreOptions::new(std::sync::Arc::new(amberdb::HashingEmbedder::with_dim(dim)))
        .seal_rows(2_000)
        .memory_limit(100_000);
    o.index.min_rows = 0;
    let store = Store::open(dir.path(), o).unwrap();
    let mut rng = Rng::new(seed);
    let target_vector = rng.unit_vector(dim);
    let target = store
        .store(
            StoreRequest::new(NewMemory::new("cache keys expire hourly in redis"))
                .with_vector(target_vector.clone()),
        )
        .unwrap()
        .memory_id;
    // More rows than the compact scan's threshold (4,096), so dedup's range query scans codes.
    let fillers: Vec<StoreRequest> = (0..5_000)
        .map(|i| {
            StoreRequest::new(NewMemory::new(format!(
                "filler note {i} about zebra{i} and quokka{i}"
            )))
            .with_vector(rng.unit_vector(dim))
        })
        .collect();
    for f in fillers {
        store.store(f).unwrap();
    }
    store.checkpoint().unwrap();
    store.build_index().unwrap().expect("an index");
    assert_eq!(store.stats().index.flat_rows, 0);
    assert!(store.stats().memories > 4_096);
    // The same fact, reworded, with a vector a hair away: merged with the indexed memory.
    let near: Vec<f32> = {
        let mut v: Vec<f32> = target_vector
            .iter()
            .map(|x| x + 0.01 * rng.gaussian())
            .collect();
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter_mut().for_each(|x| *x /= n);
        v
    };
    let again = store
        .store(
            StoreRequest::new(NewMemory::new("Cache keys expire hourly in Redis."))
                .with_vector(near),
        )
        .unwrap();
    assert_eq!(again.outcome, amberdb::Outcome::Merged, "{again:?}");
    assert!(matches!(
        store.get(target),
        Err(amberdb::EngineError::Archived { .. })
    ));
}
