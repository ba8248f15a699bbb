//! Incremental checkpoints (`docs/durability.md`, "Incremental checkpoints"): a store opened
//! from a delta and its base is the store that was closed, a damaged delta falls back to its
//! base and a damaged base to the older full checkpoint, retention keeps what those fallbacks
//! need, and a backup of a delta opens.

use super::support::{Rng, seed, small_options};
use amberdb::KernelError;
use amberdb::storage::{CrashImage, FaultyStorage, Storage};
use amberdb::{EntityKind, Memory, MemoryId, NewMemory, Store, StoreRequest, UpdateRequest};
use std::path::Path;

const DIR: &str = "/s";

fn options(fs: &FaultyStorage, share: f64) -> amberdb::StoreOptions {
    // Checkpoints only when asked: the test decides which are deltas.
    small_options(fs, 1_000_000).delta_max_share(share)
}

/// Everything a reopen must give back: each live record whole, with its vector and lineage.
fn dump(store: &Store) -> Vec<(Memory, Vec<f32>, Vec<Memory>)> {
    let mut ids = store.memory_ids();
    ids.sort_unstable();
    ids.into_iter()
        .map(|id| {
            (
                store.get(id).unwrap(),
                store.vector(id).unwrap(),
                store.lineage(id).unwrap(),
            )
        })
        .collect()
}

fn store_one(store: &Store, rng: &mut Rng, user: &str, i: usize) -> MemoryId {
    let m = NewMemory::new(format!("note {i} {}", rng.next_u64()))
        .user(user)
        .tags(["first"]);
    store
        .store(StoreRequest::new(m).with_vector(rng.unit_vector(8)))
        .unwrap()
        .memory_id
}

/// Gives each of `ids` the tag "changed".
fn retag(store: &Store, ids: &[MemoryId]) {
    for id in ids {
        store
            .update(UpdateRequest {
                memory_id: Some(*id),
                tags: Some(vec!["changed".into()]),
                ..UpdateRequest::default()
            })
            .unwrap();
    }
}

/// The checkpoint files, oldest first, each with whether it is a delta (flag bit 0).
fn checkpoints(fs: &FaultyStorage) -> Vec<(String, bool)> {
    let mut names: Vec<String> = fs
        .list(Path::new(DIR))
        .unwrap()
        .into_iter()
        .filter(|n| n.starts_with("ckpt-"))
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|n| {
            let bytes = fs.read(&Path::new(DIR).join(&n)).unwrap();
            let delta = u16::from_le_bytes([bytes[6], bytes[7]]) & 1 == 1;
            (n, delta)
        })
        .collect()
}

fn log_files(fs: &FaultyStorage) -> Vec<String> {
    let mut names: Vec<String> = fs
        .list(Path::new(DIR))
        .unwrap()
        .into_iter()
        .filter(|n| n.starts_with("wal-"))
        .collect();
    names.sort();
    names
}

/// The checkpoint files in the directory `dir`, oldest first.
fn checkpoint_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("ckpt-"))
        .collect();
    names.sort();
    names
}

/// Random stores, tag updates, content updates (a new id superseding the old), accesses,
/// deletes, user deletions, checkpoints and reopens; after every reopen the store is the one
/// that was closed, record for record.
fn reopen_gives_back_what_was_live(name: &str, default_seed: u64, share: f64) {
    let seed = seed(name, default_seed);
    let mut rng = Rng::new(seed);
    let fs = FaultyStorage::new();
    let mut store = Store::open(DIR, options(&fs, share)).unwrap();
    let users = ["ada", "bob", "cy"];
    let (mut from_delta, mut checkpoints_taken) = (0, 0);
    for i in 0..400 {
        let ids = store.memory_ids();
        let pick = |rng: &mut Rng| ids[rng.below(ids.len() as u64) as usize];
        match rng.below(20) {
            0..=6 => {
                let user = users[rng.below(3) as usize];
                store_one(&store, &mut rng, user, i);
            }
            7 | 8 if !ids.is_empty() => {
                let id = pick(&mut rng);
                store
                    .update(UpdateRequest {
                        memory_id: Some(id),
                        tags: Some(vec![format!("t{}", rng.below(5))]),
                        ..UpdateRequest::default()
                    })
                    .unwrap();
            }
            9 if !ids.is_empty() => {
                let id = pick(&mut rng);
                store
                    .update(UpdateRequest {
                        memory_id: Some(id),
                        content: Some(format!("rewritten {i}")),
                        ..UpdateRequest::default()
                    })
                    .unwrap();
            }
            10 | 11 if !ids.is_empty() => {
                store.record_access(pick(&mut rng)).unwrap();
            }
            12 | 13 if !ids.is_empty() => store.delete(pick(&mut rng)).unwrap(),
            14 => {
                let user = users[rng.below(3) as usize];
                match store.delete_entity(EntityKind::User, None, user) {
                    Ok(_) | Err(amberdb::EngineError::EntityNotFound { .. }) => {}
                    Err(e) => panic!("deleting user {user}: {e}"),
                }
            }
            15..=17 => {
                store.checkpoint().unwrap();
                checkpoints_taken += 1;
            }
            18 | 19 => {
                let before = dump(&store);
                let stats = store.stats();
                drop(store);
                store = Store::open(DIR, options(&fs, share)).unwrap();
                assert!(
                    store.open_report().skipped_checkpoints.is_empty(),
                    "seed {seed}, step {i}: {:?}",
                    store.open_report()
                );
                from_delta += usize::from(store.open_report().checkpoint_delta_of.is_some());
                assert_eq!(
                    dump(&store),
                    before,
                    "seed {seed}, step {i}: reopened store"
                );
                assert_eq!(store.stats().memories, stats.memories);
            }
            _ => {}
        }
    }
    eprintln!(
        "seed {seed}, share {share}: {checkpoints_taken} checkpoints, {from_delta} opens from a delta"
    );
    if share > 0.0 {
        assert!(from_delta > 0, "seed {seed}: no open read a delta");
    } else {
        assert_eq!(from_delta, 0, "share 0 writes no delta");
    }
}

#[test]
fn every_checkpoint_a_delta_reopens_exactly() {
    reopen_gives_back_what_was_live(
        "every_checkpoint_a_delta_reopens_exactly",
        31,
        f64::INFINITY,
    );
}

#[test]
fn deltas_at_the_default_share_reopen_exactly() {
    reopen_gives_back_what_was_live("deltas_at_the_default_share_reopen_exactly", 32, 0.125);
}

#[test]
fn no_delta_at_share_zero_and_a_bad_share_is_refused() {
    reopen_gives_back_what_was_live("no_delta_at_share_zero_and_a_bad_share_is_refused", 33, 0.0);
    for bad in [f64::NAN, -0.5] {
        let fs = FaultyStorage::new();
        let err = Store::open(DIR, options(&fs, bad)).unwrap_err();
        assert!(
            matches!(
                err,
                amberdb::EngineError::Invalid {
                    field: "delta_max_share",
                    ..
                }
            ),
            "{bad}: {err}"
        );
        assert!(
            fs.list(Path::new(DIR)).unwrap_or_default().is_empty(),
            "{bad}: nothing created"
        );
    }
}

/// Flips one byte in the middle of `name` on a copy of the disk.
fn damaged(fs: &FaultyStorage, name: &str) -> FaultyStorage {
    let image = fs.crash_image(CrashImage::KeepUnsynced);
    let path = Path::new(DIR).join(name);
    let mut bytes = image.read(&path).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x40;
    image.remove(&path).unwrap();
    let file = image.create(&path).unwrap();
    file.append(&bytes).unwrap();
    file.sync().unwrap();
    image
}

#[test]
fn a_damaged_delta_falls_back_to_its_base_and_a_damaged_base_to_the_older_full() {
    let mut rng = Rng::new(seed("a_damaged_delta_falls_back", 5));
    let fs = FaultyStorage::new();
    let store = Store::open(DIR, options(&fs, 0.125)).unwrap();
    let mut ids: Vec<MemoryId> = (0..40)
        .map(|i| store_one(&store, &mut rng, "ada", i))
        .collect();
    store.checkpoint().unwrap(); // A: the first is full
    ids.extend((40..50).map(|i| store_one(&store, &mut rng, "ada", i)));
    store.checkpoint().unwrap(); // B: 10 changes on A's 40 records, past an eighth: full
    retag(&store, &ids[..3]);
    store.delete(ids[3]).unwrap();
    store.record_access(ids[4]).unwrap();
    store_one(&store, &mut rng, "bob", 50);
    store.checkpoint().unwrap(); // D: 6 changes on B's 50 records: a delta
    let files = checkpoints(&fs);
    let kinds: Vec<bool> = files.iter().map(|f| f.1).collect();
    assert_eq!(kinds, [false, false, true], "{files:?}");
    let (a, b, d) = (&files[0].0, &files[1].0, &files[2].0);
    assert!(
        store.stats().maintenance.last.unwrap().delta_of.is_some(),
        "STATS names the delta's base"
    );
    let want = dump(&store);
    drop(store);

    // Sound: the delta and its base.
    let store = Store::open(DIR, options(&fs, 0.125)).unwrap();
    let b_seq: u64 = b[5..25].parse().unwrap();
    assert_eq!(store.open_report().checkpoint_delta_of, Some(b_seq));
    assert_eq!(dump(&store), want);
    drop(store);

    // A damaged delta: its base and the log after it.
    let image = damaged(&fs, d);
    let store = Store::open(DIR, options(&image, 0.125)).unwrap();
    let report = store.open_report();
    assert_eq!(report.checkpoint_seq, Some(b_seq), "{report:?}");
    assert_eq!(report.checkpoint_delta_of, None);
    assert!(
        report.skipped_checkpoints[0].starts_with(d.as_str()),
        "{report:?}"
    );
    assert_eq!(dump(&store), want);
    drop(store);

    // A damaged base, the delta sound: neither opens; the older full one and its log do.
    let image = damaged(&fs, b);
    let store = Store::open(DIR, options(&image, 0.125)).unwrap();
    let report = store.open_report();
    let a_seq: u64 = a[5..25].parse().unwrap();
    assert_eq!(report.checkpoint_seq, Some(a_seq), "{report:?}");
    assert_eq!(report.skipped_checkpoints.len(), 2, "{report:?}");
    assert!(
        report.skipped_checkpoints[0].contains(b.as_str()),
        "the delta names its base"
    );
    assert_eq!(dump(&store), want);
}

#[test]
fn retention_keeps_two_full_checkpoints_and_the_newest_delta_and_a_backup_takes_the_base() {
    let mut rng = Rng::new(seed("retention_keeps_two_full_checkpoints", 6));
    let fs = FaultyStorage::new();
    let store = Store::open(DIR, options(&fs, 0.125)).unwrap();
    for i in 0..80 {
        store_one(&store, &mut rng, "ada", i);
    }
    store.checkpoint().unwrap(); // A, full
    let kinds = |fs: &FaultyStorage| checkpoints(fs).into_iter().map(|c| c.1).collect::<Vec<_>>();
    store_one(&store, &mut rng, "ada", 80);
    store.checkpoint().unwrap(); // a delta on A
    store_one(&store, &mut rng, "ada", 81);
    store.checkpoint().unwrap(); // another: the first goes, it holds nothing the second lacks
    assert_eq!(kinds(&fs), [false, true]);
    let logs_with_one_full = log_files(&fs);
    for i in 82..100 {
        store_one(&store, &mut rng, "ada", i);
    }
    store.checkpoint().unwrap(); // 20 changes on 80: B, full; the delta on A goes
    assert_eq!(kinds(&fs), [false, false]);
    // The log since A stays while A is the older full checkpoint; the file before it goes.
    let logs = log_files(&fs);
    assert_eq!(logs[0], "wal-00000000000000000081.log", "{logs:?}");
    assert!(
        logs_with_one_full[1..].iter().all(|l| logs.contains(l)),
        "{logs:?}"
    );
    store_one(&store, &mut rng, "ada", 100);
    store.checkpoint().unwrap(); // a delta on B
    assert_eq!(kinds(&fs), [false, false, true]);

    // A backup of a delta carries its base, and opens as the store.
    let want = dump(&store);
    let backup = store.backup("/backup").unwrap();
    let mut copied: Vec<String> = fs
        .list(Path::new("/backup"))
        .unwrap()
        .into_iter()
        .filter(|n| n.starts_with("ckpt-"))
        .collect();
    copied.sort();
    let on_disk: Vec<String> = checkpoints(&fs).into_iter().map(|c| c.0).collect();
    assert_eq!(copied, on_disk[1..], "{backup:?}: the delta and its base");
    let restored = Store::open("/backup", options(&fs, 0.125)).unwrap();
    assert!(restored.open_report().checkpoint_delta_of.is_some());
    assert_eq!(dump(&restored), want);
    drop(restored);

    for i in 101..140 {
        store_one(&store, &mut rng, "ada", i);
    }
    store.checkpoint().unwrap(); // C, full: A and the delta on B go, and A's log
    let files = checkpoints(&fs);
    assert_eq!(
        files.iter().map(|c| c.1).collect::<Vec<_>>(),
        [false, false]
    );
    assert_eq!(
        files[0].0, on_disk[1],
        "B and C are the two full checkpoints"
    );
    let b_seq: u64 = files[0].0[5..25].parse().unwrap();
    assert_eq!(
        log_files(&fs)[0],
        format!("wal-{:020}.log", b_seq + 1),
        "the log before B went"
    );
    // A purge writes a full checkpoint even right after a delta, and keeps only it.
    store_one(&store, &mut rng, "ada", 140);
    store.checkpoint().unwrap();
    assert_eq!(kinds(&fs), [false, false, true]);
    store.purge().unwrap();
    assert_eq!(kinds(&fs), [false]);
    let want = dump(&store);
    drop(store);
    let store = Store::open(DIR, options(&fs, 0.125)).unwrap();
    assert_eq!(dump(&store), want);
}

/// `check` reads a delta as the store opens it, merged with its base, and names a base that
/// is damaged; segments only an older checkpoint names are no orphans.
#[test]
fn check_verifies_a_delta_with_its_base() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(seed("check_verifies_a_delta_with_its_base", 7));
    let options = || {
        small_options(&FaultyStorage::new(), 1_000_000)
            .storage(std::sync::Arc::new(amberdb::storage::FsStorage))
            .delta_max_share(0.125)
    };
    let store = Store::open(dir.path(), options()).unwrap();
    let ids: Vec<MemoryId> = (0..40)
        .map(|i| store_one(&store, &mut rng, "ada", i))
        .collect();
    store.checkpoint().unwrap();
    store.delete(ids[0]).unwrap();
    store.record_access(ids[1]).unwrap();
    store_one(&store, &mut rng, "ada", 40);
    store.checkpoint().unwrap();
    let live = store.stats().memories;
    drop(store);
    let report = amberdb::verify::verify(dir.path()).unwrap();
    assert_eq!(report.errors(), 0, "{report:?}");
    assert!(report.findings.is_empty(), "{report:?}");
    assert_eq!(
        report.checkpoint_records, live,
        "the delta merged with its base"
    );

    let names = checkpoint_files(dir.path());
    let base = dir.path().join(&names[0]);
    let mut bytes = std::fs::read(&base).unwrap();
    let at = bytes.len() - 10;
    bytes[at] ^= 1;
    std::fs::write(&base, bytes).unwrap();
    let report = amberdb::verify::verify(dir.path()).unwrap();
    assert!(
        report
            .findings
            .iter()
            .any(|f| f.file == names[1] && f.what.contains(&names[0])),
        "the delta's finding names its base: {report:?}"
    );
}

/// A full checkpoint takes the changed ids with it; one that fails (here a purge's, on a full
/// disk) gives them back, or the next delta on the old base would miss those changes.
#[test]
fn a_full_checkpoint_that_fails_gives_its_changes_back_to_the_next_delta() {
    let mut rng = Rng::new(seed("a_full_checkpoint_that_fails_gives", 8));
    let fs = FaultyStorage::new();
    let store = Store::open(DIR, options(&fs, 0.125)).unwrap();
    let ids: Vec<MemoryId> = (0..40)
        .map(|i| store_one(&store, &mut rng, "ada", i))
        .collect();
    store.checkpoint().unwrap(); // the base
    retag(&store, &ids[..3]);
    store.record_access(ids[3]).unwrap();
    // The purge's full checkpoint finds the disk full.
    fs.set_capacity(Some(fs.used_bytes() + 64));
    let err = store.purge().unwrap_err();
    assert!(
        matches!(
            err,
            amberdb::EngineError::Kernel(KernelError::DiskFull { .. })
        ),
        "{err}"
    );
    fs.set_capacity(None);
    store.checkpoint().unwrap();
    assert_eq!(
        checkpoints(&fs).iter().map(|c| c.1).collect::<Vec<_>>(),
        [false, true],
        "the base and a delta"
    );
    let want = dump(&store);
    drop(store);
    let store = Store::open(DIR, options(&fs, 0.125)).unwrap();
    assert!(store.open_report().checkpoint_delta_of.is_some());
    assert_eq!(dump(&store), want);
}

/// `check` decodes every checkpoint and cross-checks the newest one that decodes, the one an
/// open starts from: a damaged newest leaves the older one to be cross-checked, a damaged
/// older one is named and the newest is cross-checked.
#[test]
fn check_cross_checks_the_newest_checkpoint_that_decodes() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(seed(
        "check_cross_checks_the_newest_checkpoint_that_decodes",
        11,
    ));
    let options = || {
        small_options(&FaultyStorage::new(), 1_000_000)
            .storage(std::sync::Arc::new(amberdb::storage::FsStorage))
            .delta_max_share(0.0)
    };
    let store = Store::open(dir.path(), options()).unwrap();
    for i in 0..30 {
        store_one(&store, &mut rng, "ada", i);
    }
    store.checkpoint().unwrap();
    for i in 30..40 {
        store_one(&store, &mut rng, "ada", i);
    }
    store.checkpoint().unwrap();
    drop(store);
    let names = checkpoint_files(dir.path());
    assert_eq!(names.len(), 2, "the previous checkpoint is kept: {names:?}");
    let report = amberdb::verify::verify(dir.path()).unwrap();
    assert_eq!(report.errors(), 0, "{report:?}");
    assert_eq!(report.checkpoint_records, 40);

    let flip = |name: &str| {
        let path = dir.path().join(name);
        let mut bytes = std::fs::read(&path).unwrap();
        let at = bytes.len() / 2;
        bytes[at] ^= 0x10;
        std::fs::write(&path, bytes).unwrap();
    };
    let damaged = |report: &amberdb::verify::Report, name: &str| {
        report
            .findings
            .iter()
            .any(|f| f.file == name && f.what.starts_with("damaged"))
    };
    flip(&names[1]);
    let report = amberdb::verify::verify(dir.path()).unwrap();
    assert!(damaged(&report, &names[1]), "{report:?}");
    assert_eq!(
        report.checkpoint_records, 30,
        "the older checkpoint cross-checked"
    );
    flip(&names[1]);
    flip(&names[0]);
    let report = amberdb::verify::verify(dir.path()).unwrap();
    assert!(damaged(&report, &names[0]), "{report:?}");
    assert_eq!(report.errors(), 1, "{report:?}");
    assert_eq!(report.checkpoint_records, 40, "the newest cross-checked");
    flip(&names[1]);
    let report = amberdb::verify::verify(dir.path()).unwrap();
    let files: Vec<&str> = report.findings.iter().map(|f| f.file.as_str()).collect();
    assert_eq!(
        files[..2],
        [&names[0], &names[1]],
        "oldest first: {report:?}"
    );
    assert!(damaged(&report, &names[0]) && damaged(&report, &names[1]));
    assert_eq!(report.checkpoint_records, 0, "nothing to cross-check");
}
