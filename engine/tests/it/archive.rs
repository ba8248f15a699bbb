//! Archive retention (issue #17, `docs/semantics.md`, "Archive retention"): replaced records
//! are kept by default; with a retention set, those replaced too long ago, or past the count,
//! are forgotten (gone from `get` and lineage, after reopen and checkpoint too), and a purge
//! then removes their texts from every file.

use super::support::small_options;
use amberdb::storage::{FaultyStorage, Storage};
use amberdb::{
    ArchiveRetention, EngineError, MemoryId, NewMemory, Store, StoreOptions, StoreRequest,
    Timestamp, UpdateRequest,
};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

const DIR: &str = "/s";
const HOUR: i64 = 3_600_000_000;
const DAY: i64 = 24 * HOUR;

fn unit(i: u64) -> Vec<f32> {
    let mut v = [0.1f32; 8];
    v[(i % 8) as usize] = 1.0;
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter().map(|x| x / n).collect()
}

/// `small_options` on a clock the test moves.
fn options(fs: &FaultyStorage, now: &Arc<AtomicI64>, retention: ArchiveRetention) -> StoreOptions {
    let clock = Arc::clone(now);
    small_options(fs, 1000)
        .clock(Arc::new(move || Timestamp(clock.load(Ordering::SeqCst))))
        .archive_retention(retention)
}

fn rewrite(store: &Store, id: MemoryId, text: String) -> MemoryId {
    store
        .update(UpdateRequest {
            memory_id: Some(id),
            content: Some(text),
            ..UpdateRequest::default()
        })
        .unwrap()
        .memory_id
}

/// Ten memories stored at `t0`, each rewritten at `t0 + 1 h` (the originals archived), the
/// first five rewritten again at `t0 + 3 h`. Returns (originals, second versions, live).
fn history(store: &Store, now: &AtomicI64) -> (Vec<MemoryId>, Vec<MemoryId>, Vec<MemoryId>) {
    let t0 = now.load(Ordering::SeqCst);
    let originals: Vec<MemoryId> = (0..10u64)
        .map(|i| {
            store
                .store(
                    StoreRequest::new(NewMemory::new(format!("first-version-{i:02} of a note")))
                        .with_vector(unit(i)),
                )
                .unwrap()
                .memory_id
        })
        .collect();
    now.store(t0 + HOUR, Ordering::SeqCst);
    let seconds: Vec<MemoryId> = originals
        .iter()
        .enumerate()
        .map(|(i, id)| rewrite(store, *id, format!("second-version-{i:02} of a note")))
        .collect();
    now.store(t0 + 3 * HOUR, Ordering::SeqCst);
    let mut live: Vec<MemoryId> = seconds[..5]
        .iter()
        .enumerate()
        .map(|(i, id)| rewrite(store, *id, format!("third-version-{i:02} of a note")))
        .collect();
    live.extend_from_slice(&seconds[5..]);
    (originals, seconds, live)
}

fn all_bytes(fs: &FaultyStorage) -> Vec<u8> {
    fs.list(Path::new(DIR))
        .unwrap()
        .iter()
        .flat_map(|n| fs.read(&Path::new(DIR).join(n)).unwrap())
        .collect()
}

fn holds(bytes: &[u8], needle: &str) -> bool {
    bytes.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[test]
fn archived_records_past_the_age_are_forgotten_and_purged_and_stay_forgotten() {
    let fs = FaultyStorage::new();
    let now = Arc::new(AtomicI64::new(Timestamp::now().0));
    let retention = ArchiveRetention {
        max_age: Some(Duration::from_secs(86_400)),
        max_records: None,
    };
    let store = Store::open(DIR, options(&fs, &now, retention)).unwrap();
    let (originals, seconds, live) = history(&store, &now);
    // Nothing is old enough yet.
    assert_eq!(store.apply_archive_retention().unwrap(), 0);
    assert!(matches!(
        store.get(originals[0]).unwrap_err(),
        EngineError::Archived { .. }
    ));
    store.checkpoint().unwrap();
    // A day and a minute after the first rewrite: the originals go, the second versions
    // (replaced two hours later) stay.
    let t0 = now.load(Ordering::SeqCst) - 3 * HOUR;
    now.store(t0 + HOUR + DAY + 60_000_000, Ordering::SeqCst);
    assert_eq!(store.apply_archive_retention().unwrap(), 10);
    assert_eq!(store.stats().maintenance.archived_forgotten, 10);
    let check = |s: &Store| {
        for id in &originals {
            assert!(
                matches!(s.get(*id).unwrap_err(), EngineError::NotFound { .. }),
                "{id} is still archived"
            );
        }
        for id in &seconds[..5] {
            assert!(matches!(
                s.get(*id).unwrap_err(),
                EngineError::Archived { .. }
            ));
        }
        for (i, id) in live.iter().enumerate() {
            let lineage = s.lineage(*id).unwrap();
            assert_eq!(lineage.len(), usize::from(i < 5), "{id}: {lineage:?}");
            assert!(
                lineage
                    .iter()
                    .all(|m| m.content.starts_with("second-version"))
            );
        }
        assert_eq!(s.stats().memories, 10);
    };
    check(&store);
    // Again: nothing more.
    assert_eq!(store.apply_archive_retention().unwrap(), 0);
    drop(store);
    // Replayed from the log, then from a checkpoint.
    let store = Store::open(DIR, options(&fs, &now, retention)).unwrap();
    check(&store);
    store.checkpoint().unwrap();
    drop(store);
    let store = Store::open(DIR, options(&fs, &now, retention)).unwrap();
    check(&store);
    // A purge takes the forgotten texts out of every file; the kept ones stay.
    store.purge().unwrap();
    let bytes = all_bytes(&fs);
    for i in 0..10 {
        assert!(!holds(&bytes, &format!("first-version-{i:02}")), "{i}");
    }
    assert!(holds(&bytes, "second-version-03"));
    assert!(holds(&bytes, "third-version-03"));
}

#[test]
fn past_the_count_the_oldest_archived_records_go_and_nothing_without_a_retention() {
    let now = Arc::new(AtomicI64::new(Timestamp::now().0));
    // The default keeps everything.
    let fs = FaultyStorage::new();
    let store = Store::open(DIR, options(&fs, &now, ArchiveRetention::default())).unwrap();
    let (originals, _, _) = history(&store, &now);
    now.fetch_add(1000 * DAY, Ordering::SeqCst);
    assert_eq!(store.apply_archive_retention().unwrap(), 0);
    assert!(matches!(
        store.get(originals[9]).unwrap_err(),
        EngineError::Archived { .. }
    ));
    drop(store);

    let fs = FaultyStorage::new();
    let retention = ArchiveRetention {
        max_age: None,
        max_records: Some(7),
    };
    let store = Store::open(DIR, options(&fs, &now, retention)).unwrap();
    let (originals, seconds, _) = history(&store, &now);
    // 15 archived: the 8 replaced first (originals, oldest ids first at the same time) go.
    assert_eq!(store.apply_archive_retention().unwrap(), 8);
    let archived = |id: &MemoryId| matches!(store.get(*id), Err(EngineError::Archived { .. }));
    assert_eq!(originals.iter().filter(|id| archived(id)).count(), 2);
    assert_eq!(seconds[..5].iter().filter(|id| archived(id)).count(), 5);
}

#[test]
fn the_maintenance_thread_applies_the_retention_without_being_asked() {
    let fs = FaultyStorage::new();
    let now = Arc::new(AtomicI64::new(Timestamp::now().0));
    let retention = ArchiveRetention {
        max_age: None,
        max_records: Some(3),
    };
    let store = Store::open(DIR, options(&fs, &now, retention).maintenance_thread(true)).unwrap();
    history(&store, &now);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while store.stats().maintenance.archived_forgotten < 12 {
        assert!(
            std::time::Instant::now() < deadline,
            "not applied within 20 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(store.stats().maintenance.archived_forgotten, 12);
}
