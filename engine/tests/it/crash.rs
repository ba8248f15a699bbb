//! Power cuts at every sync point of a mixed workload, and every single I/O operation failed.
//!
//! After each, the disk image a power cut would leave is reopened and checked: every
//! acknowledged store is there (byte-exact) unless an acknowledged delete removed it, no
//! acknowledged delete is undone, and an unacknowledged operation is either absent or whole.

use super::support::{Rng, seed, small_options};
use amberdb::KernelError;
use amberdb::storage::{CrashImage, FaultyStorage, Storage};
use amberdb::{MemoryId, NewMemory, Store};
use std::collections::BTreeMap;
use std::path::Path;

#[derive(Debug, Clone)]
enum Attempt {
    Store { content: String, vector: Vec<f32> },
    Delete { id: MemoryId },
    Checkpoint,
}

/// A workload of stores, deletes and checkpoints, the same for every crash point.
fn workload(seed: u64) -> Vec<Attempt> {
    let mut rng = Rng::new(seed);
    let mut out = Vec::new();
    let mut stored = 0u64;
    for i in 0..40 {
        match rng.below(10) {
            0 if stored > 0 => out.push(Attempt::Delete {
                id: MemoryId(1 + rng.below(stored)),
            }),
            1 => out.push(Attempt::Checkpoint),
            _ => {
                out.push(Attempt::Store {
                    content: format!("record {i} {}", rng.next_u64()),
                    vector: rng.unit_vector(8),
                });
                stored += 1;
            }
        }
    }
    out
}

#[derive(Debug, Default)]
struct Ledger {
    acked: BTreeMap<MemoryId, String>,
    acked_deletes: Vec<MemoryId>,
    /// The delete that was in flight when the storage failed: unacknowledged, so it may or
    /// may not have taken effect.
    pending_delete: Option<MemoryId>,
    attempted: Vec<String>,
}

/// Runs the workload until the storage fails; returns what was acknowledged.
fn run_until_failure(store: &Store, work: &[Attempt]) -> Ledger {
    let mut l = Ledger::default();
    for a in work {
        match a {
            Attempt::Store { content, vector } => {
                l.attempted.push(content.clone());
                match store.store(
                    amberdb::StoreRequest::new(NewMemory::new(content)).with_vector(vector.clone()),
                ) {
                    Ok(s) => {
                        l.acked.insert(s.memory_id, content.clone());
                    }
                    Err(
                        amberdb::EngineError::Kernel(KernelError::Poisoned)
                        | amberdb::EngineError::Kernel(KernelError::Io { .. }),
                    ) => {
                        return l;
                    }
                    Err(e) => panic!("unexpected error {e}"),
                }
            }
            Attempt::Delete { id } => match store.delete(*id) {
                Ok(()) => l.acked_deletes.push(*id),
                Err(amberdb::EngineError::NotFound { .. }) => {}
                Err(_) => {
                    l.pending_delete = Some(*id);
                    return l;
                }
            },
            Attempt::Checkpoint => {
                if store.checkpoint().is_err() {
                    return l;
                }
            }
        }
    }
    l
}

fn verify(image: &FaultyStorage, ledger: &Ledger, what: &str) {
    let store = Store::open(Path::new("/s"), small_options(image, 3))
        .unwrap_or_else(|e| panic!("{what}: reopen failed: {e}"));
    // What an interrupted checkpoint sealed is gone: every segment file left is one the
    // store reads (segments only accumulate here, so the newest checkpoint names them all).
    let segment_files = image
        .list(Path::new("/s"))
        .unwrap()
        .iter()
        .filter(|n| n.starts_with("seg-"))
        .count();
    assert!(store.open_report().orphan_segments.is_empty(), "{what}");
    assert_eq!(
        segment_files,
        store.stats().sealed_segments,
        "{what}: orphan segments left"
    );
    for (id, content) in &ledger.acked {
        if ledger.acked_deletes.contains(id) {
            assert!(
                store.get(*id).is_err(),
                "{what}: acknowledged delete of {id} undone"
            );
        } else if ledger.pending_delete != Some(*id) {
            let m = store
                .get(*id)
                .unwrap_or_else(|_| panic!("{what}: acknowledged store {id} lost"));
            assert_eq!(&m.content, content, "{what}: record {id} changed");
        }
    }
    for id in 1..=ledger.attempted.len() as u64 + 1 {
        if let Ok(m) = store.get(MemoryId(id)) {
            assert!(
                ledger.attempted.contains(&m.content),
                "{what}: record {id} was never written: {:?}",
                m.content
            );
            assert_eq!(
                store.vector(MemoryId(id)).map(|v| v.len()).ok(),
                Some(8),
                "{what}: record {id} half there"
            );
        }
    }
    // The store accepts writes again.
    store
        .store(
            amberdb::StoreRequest::new(NewMemory::new(format!("after {what}")))
                .with_vector(vec![0.5; 8]),
        )
        .unwrap_or_else(|e| panic!("{what}: write after reopen: {e}"));
}

fn images(seed: u64) -> [CrashImage; 3] {
    #[expect(clippy::cast_possible_truncation, reason = "any byte")]
    let numerator = (seed % 256) as u8;
    [
        CrashImage::DropUnsynced,
        CrashImage::TearUnsynced { numerator },
        CrashImage::KeepUnsynced,
    ]
}

#[test]
fn every_sync_point_survives_a_power_cut() {
    power_cut_at_every_sync_point("every_sync_point_survives_a_power_cut", 0xC0FFEE, 0.125);
}

/// Every checkpoint after the first is a delta on it (docs/durability.md, "Incremental
/// checkpoints"): a power cut at each of their sync points, and at the full one's.
#[test]
fn every_sync_point_of_delta_checkpoints_survives_a_power_cut() {
    power_cut_at_every_sync_point(
        "every_sync_point_of_delta_checkpoints_survives_a_power_cut",
        0xDE17A,
        f64::INFINITY,
    );
}

/// `small_options` with checkpoints that are deltas while the changes are at most `share`
/// of their base's records.
fn options(fs: &FaultyStorage, share: f64) -> amberdb::StoreOptions {
    small_options(fs, 3).delta_max_share(share)
}

fn power_cut_at_every_sync_point(name: &str, default_seed: u64, share: f64) {
    let seed = seed(name, default_seed);
    let work = workload(seed);
    // Count the sync points of a clean run.
    let clean = FaultyStorage::new();
    let store = Store::open(Path::new("/s"), options(&clean, share)).unwrap();
    let before = clean.syncs();
    let full = run_until_failure(&store, &work);
    assert_eq!(
        full.acked.len(),
        work.iter()
            .filter(|a| matches!(a, Attempt::Store { .. }))
            .count()
    );
    let sync_points = clean.syncs() - before;
    let deltas = clean
        .list(Path::new("/s"))
        .unwrap()
        .iter()
        .filter(|n| n.starts_with("ckpt-"))
        .filter(|n| {
            let bytes = clean.read(&Path::new("/s").join(n)).unwrap();
            u16::from_le_bytes([bytes[6], bytes[7]]) & 1 == 1
        })
        .count();
    assert!(
        deltas > 0 || share.is_finite(),
        "no delta on disk after the clean run"
    );
    drop(store);
    assert!(
        sync_points > 40,
        "workload too small: {sync_points} sync points"
    );
    let mut cuts = 0;
    for k in 1..=sync_points {
        let fs = FaultyStorage::new();
        let store = Store::open(Path::new("/s"), options(&fs, share)).unwrap();
        fs.crash_at_sync(k);
        let ledger = run_until_failure(&store, &work);
        assert!(fs.crashed(), "sync point {k} never reached");
        for image in images(seed.wrapping_add(k)) {
            verify(
                &fs.crash_image(image),
                &ledger,
                &format!("sync point {k}, {image:?}"),
            );
            cuts += 1;
        }
    }
    eprintln!(
        "{sync_points} sync points x 3 crash images = {cuts} simulated power cuts, 0 acknowledged writes lost"
    );
}

#[test]
fn every_failed_operation_poisons_and_loses_nothing() {
    failure_of_every_operation("every_failed_operation_poisons_and_loses_nothing", 7, 0.125);
}

#[test]
fn every_failed_operation_of_delta_checkpoints_poisons_and_loses_nothing() {
    failure_of_every_operation(
        "every_failed_operation_of_delta_checkpoints_poisons_and_loses_nothing",
        8,
        f64::INFINITY,
    );
}

fn failure_of_every_operation(name: &str, default_seed: u64, share: f64) {
    let seed = seed(name, default_seed);
    let work = workload(seed);
    let clean = FaultyStorage::new();
    let store = Store::open(Path::new("/s"), options(&clean, share)).unwrap();
    let before = clean.ops();
    run_until_failure(&store, &work);
    let ops = clean.ops() - before;
    drop(store);
    for n in 1..=ops {
        for torn in [false, true] {
            let fs = FaultyStorage::new();
            let store = Store::open(Path::new("/s"), options(&fs, share)).unwrap();
            fs.fail_op(n, torn);
            let ledger = run_until_failure(&store, &work);
            if ledger.acked.len() < work.len() && store.stats().poisoned {
                assert!(matches!(
                    store.store(
                        amberdb::StoreRequest::new(NewMemory::new("refused"))
                            .with_vector(vec![0.1; 8])
                    ),
                    Err(amberdb::EngineError::Kernel(KernelError::Poisoned))
                ));
                // Reads still work on a poisoned store.
                for id in ledger.acked.keys().filter(|id| {
                    !ledger.acked_deletes.contains(id) && ledger.pending_delete != Some(**id)
                }) {
                    assert!(store.get(*id).is_ok());
                }
            }
            drop(store);
            // The process lives on: the disk keeps what was written.
            verify(
                &fs.crash_image(CrashImage::KeepUnsynced),
                &ledger,
                &format!("failed op {n} torn={torn}"),
            );
            verify(
                &fs.crash_image(CrashImage::DropUnsynced),
                &ledger,
                &format!("failed op {n} torn={torn}, then power cut"),
            );
        }
    }
    eprintln!(
        "{ops} operations x 2 (clean, torn) failed one at a time, 0 acknowledged writes lost"
    );
}

/// The hooked workload: merges (a batch frame of archive + store), a snapshot, tag updates,
/// a snapshot restore (a batch frame of tag rewrites), a checkpoint, another merge.
mod hooked {
    use amberdb::storage::{CrashImage, FaultyStorage};
    use amberdb::{
        EngineError, HashingEmbedder, KernelError, NewMemory, Outcome, Store, StoreOptions,
        StoreRequest, UpdateRequest,
    };
    use std::path::Path;
    use std::sync::Arc;

    /// Checkpoints after the write that finds one due (no maintenance thread), so a run's
    /// sync points are the same every time.
    /// Merges of paraphrases on (`Merge::Paraphrases`): the workload's merges are of
    /// texts in other words.
    fn options(fs: &FaultyStorage) -> StoreOptions {
        StoreOptions::new(Arc::new(HashingEmbedder::with_dim(8)))
            .storage(Arc::new(fs.clone()))
            .seal_rows(3)
            .maintenance_thread(false)
            .hooks(amberdb::HookConfig {
                merge: amberdb::Merge::Paraphrases,
                ..amberdb::HookConfig::default()
            })
    }

    fn near(axis: usize, eps: f32) -> Vec<f32> {
        let mut v = [0.0f32; 8];
        v[axis] = 1.0;
        v[(axis + 1) % 8] = eps;
        let n = (1.0 + eps * eps).sqrt();
        v.iter().map(|x| x / n).collect()
    }

    /// What the run got acknowledged, step by step.
    #[derive(Debug, Default)]
    struct Acked {
        merges: Vec<(amberdb::MemoryId, Vec<amberdb::MemoryId>)>,
        snapshot: Option<String>,
        updated: bool,
        restored: bool,
        /// The newer value of a slot and the older one it closed.
        superseded: Option<(amberdb::MemoryId, Vec<amberdb::MemoryId>)>,
        failed: bool,
    }

    fn run(store: &Store) -> Acked {
        let mut a = Acked::default();
        let fail = |e: EngineError, a: &mut Acked| {
            assert!(
                matches!(
                    e,
                    EngineError::Kernel(KernelError::Poisoned)
                        | EngineError::Kernel(KernelError::Io { .. })
                ),
                "unexpected {e}"
            );
            a.failed = true;
        };
        let stores = [
            ("cats like fish", near(0, 0.0), "pets"),
            ("Cats like fish!", near(0, 0.05), "pets"),
            ("dogs chase balls", near(2, 0.0), "dogs"),
        ];
        for (text, v, tag) in stores {
            match store.store(StoreRequest::new(NewMemory::new(text).tags([tag])).with_vector(v)) {
                Ok(s) if s.outcome == Outcome::Merged => a.merges.push((s.memory_id, s.supersedes)),
                Ok(_) => {}
                Err(e) => {
                    fail(e, &mut a);
                    return a;
                }
            }
        }
        match store.snapshot_create(None, "before") {
            Ok(s) => a.snapshot = Some(s.snapshot_id),
            Err(e) => {
                fail(e, &mut a);
                return a;
            }
        }
        let ids: Vec<_> = store
            .list_recent(None, 50)
            .unwrap()
            .into_iter()
            .map(|m| m.id)
            .collect();
        for id in ids {
            let req = UpdateRequest {
                memory_id: Some(id),
                tags: Some(vec!["x".into(), "y".into()]),
                ..UpdateRequest::default()
            };
            if let Err(e) = store.update(req) {
                fail(e, &mut a);
                return a;
            }
        }
        a.updated = true;
        match store.snapshot_restore(None, a.snapshot.as_deref().unwrap_or("")) {
            Ok(_) => a.restored = true,
            Err(e) => {
                fail(e, &mut a);
                return a;
            }
        }
        // A newer value of a slot: one frame closes the older one's validity, archives it and
        // stores the newer.
        for (text, eps) in [
            ("the deploy runs on port 8080", 0.0),
            ("the deploy runs on port 9090", 0.05),
        ] {
            match store
                .store(amberdb::StoreRequest::new(NewMemory::new(text)).with_vector(near(4, eps)))
            {
                Ok(s) if s.outcome == Outcome::Superseded => {
                    a.superseded = Some((s.memory_id, s.supersedes));
                }
                Ok(_) => {}
                Err(e) => {
                    fail(e, &mut a);
                    return a;
                }
            }
        }
        if let Err(e) = store.checkpoint() {
            fail(e, &mut a);
            return a;
        }
        let last = StoreRequest::new(NewMemory::new("the dogs chase the balls").tags(["dogs"]));
        match store.store(last.with_vector(near(2, 0.05))) {
            Ok(s) if s.outcome == Outcome::Merged => a.merges.push((s.memory_id, s.supersedes)),
            Ok(s) => panic!("expected a merge: {s:?}"),
            Err(e) => fail(e, &mut a),
        }
        a
    }

    fn verify(image: &FaultyStorage, acked: &Acked, what: &str) {
        let store = Store::open(Path::new("/h"), options(image))
            .unwrap_or_else(|e| panic!("{what}: reopen failed: {e}"));
        let live = store.list_recent(None, 50).unwrap();
        // A merge is whole: a live record's sources are all archived, none live.
        for m in &live {
            for s in &m.supersedes {
                assert!(
                    matches!(store.get(*s), Err(EngineError::Archived { .. })),
                    "{what}: source {s} of live {} is not archived",
                    m.id
                );
            }
        }
        // A supersede is whole: the newer value live means the older is archived with its
        // validity closed where the newer begins; the older live means no newer one.
        let port = |p: &str| live.iter().find(|m| m.content.ends_with(p)).cloned();
        if let Some(newer) = port("9090") {
            assert!(
                port("8080").is_none(),
                "{what}: both values of the slot are live"
            );
            let lineage = store.lineage(newer.id).unwrap();
            assert!(
                lineage
                    .iter()
                    .any(|o| o.content.ends_with("8080") && o.valid_to == Some(newer.valid_from)),
                "{what}: the older value's validity is not closed: {lineage:?}"
            );
        }
        if let Some((newer, older)) = &acked.superseded {
            let m = store
                .get(*newer)
                .unwrap_or_else(|e| panic!("{what}: acknowledged supersede {newer} lost: {e}"));
            assert_eq!(&m.supersedes, older, "{what}");
        }
        // Acknowledged merges survived.
        for (merged, sources) in &acked.merges {
            let m = store
                .get(*merged)
                .unwrap_or_else(|e| panic!("{what}: acknowledged merge {merged} lost: {e}"));
            assert_eq!(&m.supersedes, sources, "{what}");
        }
        // The tag rewrite is all or nothing: every live memory has its snapshot tags, or
        // every one has the updated tags.
        let updated = live.iter().filter(|m| m.tags == ["x", "y"]).count();
        if acked.restored {
            assert_eq!(updated, 0, "{what}: an acknowledged restore was undone");
        } else if acked.updated {
            assert!(
                updated == 0 || updated == live.len(),
                "{what}: a restore applied to {} of {} memories",
                live.len() - updated,
                live.len()
            );
        }
        // Canonical tags came back with their memories.
        for m in &live {
            for t in &m.tags {
                if t != "x" && t != "y" {
                    assert!(
                        store.canonical_tags(None).unwrap().contains(t),
                        "{what}: tag {t} of {} is not canonical",
                        m.id
                    );
                }
            }
        }
    }

    #[test]
    fn every_sync_point_of_merges_and_tag_rewrites_is_atomic() {
        let clean = FaultyStorage::new();
        let store = Store::open(Path::new("/h"), options(&clean)).unwrap();
        let before = clean.syncs();
        let full = run(&store);
        assert!(
            !full.failed && full.restored && full.merges.len() == 2 && full.superseded.is_some(),
            "{full:?}"
        );
        let sync_points = clean.syncs() - before;
        drop(store);
        let mut cuts = 0;
        for k in 1..=sync_points {
            let fs = FaultyStorage::new();
            let store = Store::open(Path::new("/h"), options(&fs)).unwrap();
            fs.crash_at_sync(k);
            let acked = run(&store);
            assert!(fs.crashed(), "sync point {k} never reached");
            for image in [
                CrashImage::DropUnsynced,
                CrashImage::TearUnsynced { numerator: 128 },
                CrashImage::KeepUnsynced,
            ] {
                verify(
                    &fs.crash_image(image),
                    &acked,
                    &format!("sync point {k}, {image:?}"),
                );
                cuts += 1;
            }
        }
        eprintln!(
            "{sync_points} sync points x 3 images = {cuts} power cuts of merges and tag rewrites"
        );
        assert!(sync_points >= 10, "{sync_points}");
    }
}
