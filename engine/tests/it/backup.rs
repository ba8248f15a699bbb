//! Online backup and offline restore (issue #17, `docs/durability.md`, "Backup and restore"):
//! a backup opens as the store was at one commit, byte for byte in what it holds, while writes
//! go on; an interrupted backup never opens as a store with less in it; bad destinations are
//! refused before anything is written.

use super::support::small_options;
use amberdb::KernelError;
use amberdb::storage::{FaultyStorage, Storage};
use amberdb::{EngineError, Memory, MemoryId, NewMemory, SearchRequest, Store, StoreRequest};
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

const DIR: &str = "/s";

fn unit(i: u64) -> Vec<f32> {
    let mut v = [0.1f32; 8];
    v[(i % 8) as usize] = 1.0;
    v[((i / 8) % 8) as usize] += 0.5;
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter().map(|x| x / n).collect()
}

fn store_note(store: &Store, i: u64) -> MemoryId {
    store
        .store(
            StoreRequest::new(
                NewMemory::new(format!("note {i} about topic {}", i % 5))
                    .tags([format!("topic-{}", i % 5)])
                    .user(format!("user-{}", i % 3)),
            )
            .with_vector(unit(i)),
        )
        .unwrap()
        .memory_id
}

/// Everything a reader can see of a store, to compare two of them.
#[derive(Debug, PartialEq)]
struct Dump {
    memories: Vec<(Memory, Vec<f32>)>,
    tags: Vec<(String, u64)>,
    count: usize,
}

fn dump(store: &Store) -> Dump {
    Dump {
        memories: store
            .memory_ids()
            .into_iter()
            .map(|id| (store.get(id).unwrap(), store.vector(id).unwrap()))
            .collect(),
        tags: store.tag_frequencies(None).unwrap(),
        count: store.stats().memories,
    }
}

/// A store with two checkpoints, sealed segments, growing rows, deletes, accesses and a tag
/// snapshot (its id returned).
fn prepare_with_snapshot(fs: &FaultyStorage) -> (Store, String) {
    let store = Store::open(DIR, small_options(fs, 1000)).unwrap();
    for i in 0..40u64 {
        let id = store_note(&store, i);
        if i % 7 == 3 {
            store.delete(id).unwrap();
        }
        if i == 12 || i == 25 {
            store.checkpoint().unwrap();
        }
    }
    for q in ["note 4", "topic 2", "note 31"] {
        store
            .search(&SearchRequest::new(q).user("user-1").limit(3))
            .unwrap();
    }
    for id in store.memory_ids().into_iter().step_by(4) {
        store.record_access(id).unwrap();
    }
    let snapshot = store.snapshot_create(Some("user-2"), "before").unwrap();
    // Accesses are bookkeeping, durable at the next sync: make them durable, so that the
    // store after a power cut is the store before the backup.
    store.flush().unwrap();
    (store, snapshot.snapshot_id)
}

fn prepare(fs: &FaultyStorage) -> Store {
    prepare_with_snapshot(fs).0
}

#[test]
fn a_backup_opens_as_the_store_was_when_it_was_taken() {
    let fs = FaultyStorage::new();
    let (store, snapshot) = prepare_with_snapshot(&fs);
    let backup = store.backup("/b").unwrap();
    let before = dump(&store);
    assert!(before.memories.iter().any(|(m, _)| m.access_count > 0));
    // The store goes on; the backup does not follow it.
    for i in 40..60u64 {
        store_note(&store, i);
    }
    store.delete(before.memories[0].0.id).unwrap();
    let mut names = fs.list(Path::new("/b")).unwrap();
    names.sort();
    eprintln!("backup: {backup:?}, files {names:?}");
    assert_eq!(backup.files, names.len());
    assert!(names.iter().any(|n| n == "IDENTITY"));
    assert_eq!(names.iter().filter(|n| n.starts_with("ckpt-")).count(), 1);
    assert!(names.iter().any(|n| n.starts_with("seg-")));
    assert!(names.iter().any(|n| n.starts_with("wal-")));
    let copy = Store::open("/b", small_options(&fs, 1000)).unwrap();
    assert_eq!(dump(&copy), before);
    assert_eq!(copy.stats().last_seq, backup.seq);
    // The tag snapshot came along.
    let restored = copy.snapshot_restore(Some("user-2"), &snapshot).unwrap();
    assert!(restored.restored_count > 0, "{restored:?}");
    // It is a store of its own: it writes, and the original does not see it.
    let id = store_note(&copy, 1000);
    assert!(
        store
            .get(id)
            .map_or(true, |m| m.content != copy.get(id).unwrap().content)
    );
    drop(copy);
    assert_eq!(
        Store::open("/b", small_options(&fs, 1000))
            .unwrap()
            .stats()
            .memories,
        before.count + 1
    );
}

#[test]
fn a_restore_puts_a_backup_back_and_refuses_what_it_must() {
    let dir = tempfile::tempdir().unwrap();
    let (src, bak, out) = (
        dir.path().join("store"),
        dir.path().join("backup"),
        dir.path().join("restored"),
    );
    let options = || {
        amberdb::StoreOptions::new(std::sync::Arc::new(amberdb::HashingEmbedder::with_dim(8)))
            .memory_limit(1_000_000)
    };
    let store = Store::open(&src, options()).unwrap();
    for i in 0..30u64 {
        store_note(&store, i);
        if i == 10 {
            store.checkpoint().unwrap();
        }
    }
    store.backup(&bak).unwrap();
    let before = dump(&store);
    // A backup into a directory with anything in it, or into the store, is refused.
    let err = store.backup(&bak).unwrap_err();
    assert!(
        matches!(err, EngineError::Invalid { field: "dest", .. }),
        "{err}"
    );
    let err = store.backup(src.join("inside")).unwrap_err();
    assert!(
        matches!(err, EngineError::Invalid { field: "dest", .. }),
        "{err}"
    );
    assert!(!src.join("inside").exists());
    let scoped = store.scoped("user-1").unwrap();
    assert!(matches!(
        scoped.backup(dir.path().join("scoped")).unwrap_err(),
        EngineError::OutOfScope { .. }
    ));
    // A restore over the open store is refused: it is locked, and it holds a store.
    let err = amberdb::restore(&bak, &src).unwrap_err();
    assert!(
        matches!(err, EngineError::Kernel(KernelError::Locked { .. })),
        "{err}"
    );
    drop(scoped);
    drop(store);
    let err = amberdb::restore(&bak, &src).unwrap_err();
    assert!(
        matches!(err, EngineError::Invalid { field: "dir", .. }),
        "{err}"
    );
    // A damaged backup is refused, and nothing is written.
    let damaged = dir.path().join("damaged");
    std::fs::create_dir(&damaged).unwrap();
    for entry in std::fs::read_dir(&bak).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), damaged.join(entry.file_name())).unwrap();
    }
    let ckpt = std::fs::read_dir(&damaged)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with("ckpt-")
        })
        .unwrap();
    let mut bytes = std::fs::read(&ckpt).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    std::fs::write(&ckpt, bytes).unwrap();
    let err = amberdb::restore(&damaged, &out).unwrap_err();
    assert!(
        matches!(
            err,
            EngineError::Invalid {
                field: "backup",
                ..
            }
        ),
        "{err}"
    );
    assert!(!out.join("IDENTITY").exists());
    // The good one restores, and opens as the store was.
    let restored = amberdb::restore(&bak, &out).unwrap();
    assert!(restored.files >= 4, "{restored:?}");
    let reopened = Store::open(&out, options()).unwrap();
    assert_eq!(dump(&reopened), before);
    assert_eq!(amberdb::verify::verify(&out).unwrap().errors(), 0);
}

#[test]
fn a_power_cut_at_any_sync_point_of_a_backup_never_leaves_a_store_with_less() {
    let clean = FaultyStorage::new();
    let store = prepare(&clean);
    let before = clean.syncs();
    store.backup("/b").unwrap();
    let sync_points = clean.syncs() - before;
    drop(store);
    assert!(sync_points >= 5, "{sync_points} sync points");
    eprintln!("a backup: {sync_points} sync points x 3 crash images, both stores reopened");
    for k in 1..=sync_points {
        for image in super::support::crash_images(k) {
            let fs = FaultyStorage::new();
            let store = prepare(&fs);
            let expected = dump(&store);
            fs.crash_at_sync(k);
            let _ = store.backup("/b");
            assert!(fs.crashed(), "sync point {k} never reached");
            drop(store);
            let after = fs.crash_image(image);
            // The store itself is untouched.
            let source = Store::open(DIR, small_options(&after, 1000)).unwrap();
            assert!(
                dump(&source) == expected,
                "sync point {k}, {image:?}: the store changed"
            );
            // The backup is whole, or refuses to open (no IDENTITY), or holds no file at all.
            let names = after.list(Path::new("/b")).unwrap_or_default();
            if names.is_empty() {
                continue;
            }
            match Store::open("/b", small_options(&after, 1000)) {
                Ok(copy) => assert!(
                    dump(&copy) == expected,
                    "sync point {k}, {image:?}: the backup opened with other contents"
                ),
                Err(e) => {
                    assert!(!names.iter().any(|n| n == "IDENTITY"), "{k} {image:?}: {e}");
                    assert!(
                        matches!(e, EngineError::Kernel(KernelError::Corrupted { .. })),
                        "{e}"
                    );
                }
            }
        }
    }
}

#[test]
fn backups_taken_while_a_writer_and_checkpoints_run_each_hold_a_prefix_of_its_writes() {
    let fs = FaultyStorage::new();
    let store = Store::open(DIR, small_options(&fs, 50).maintenance_thread(true)).unwrap();
    let written: Mutex<Vec<(MemoryId, String)>> = Mutex::default();
    // The writer goes on past 800 stores until three backups are done: on a loaded machine
    // 800 stores can end before the third backup does.
    let taken = AtomicUsize::new(0);
    let backups = std::thread::scope(|s| {
        let writer = s.spawn(|| {
            let mut i = 0u64;
            while i < 800 || taken.load(Ordering::SeqCst) < 3 {
                let id = store_note(&store, i);
                let content = store.get(id).unwrap().content;
                written.lock().unwrap().push((id, content));
                if i.is_multiple_of(97) {
                    store.checkpoint().unwrap();
                }
                i += 1;
            }
        });
        let mut backups = Vec::new();
        while !writer.is_finished() {
            let dest = format!("/b{}", backups.len());
            backups.push(store.backup(&dest).unwrap());
            taken.fetch_add(1, Ordering::SeqCst);
        }
        writer.join().unwrap();
        backups
    });
    let written = written.into_inner().unwrap();
    assert!(backups.len() >= 3, "{} backups", backups.len());
    eprintln!("{} backups beside {} stores", backups.len(), written.len());
    let mut last_count = 0;
    for b in &backups {
        let copy = Store::open(&b.dest, small_options(&fs, 50)).unwrap();
        let ids = copy.memory_ids();
        // The writes it holds are the first ones, in order, with their contents.
        assert!(ids.len() >= last_count, "backups go forward");
        last_count = ids.len();
        assert!(ids.len() <= written.len());
        for (id, (wid, content)) in ids.iter().zip(&written) {
            assert_eq!(id, wid);
            assert_eq!(&copy.get(*id).unwrap().content, content);
        }
        assert_eq!(copy.stats().last_seq, b.seq);
    }
    assert_eq!(store.stats().maintenance.failures, 0);
}

#[test]
fn a_backup_that_fills_the_disk_removes_what_it_wrote_and_the_store_goes_on() {
    let fs = FaultyStorage::new();
    let store = prepare(&fs);
    let expected = dump(&store);
    fs.set_capacity(Some(fs.used_bytes() + 3_000));
    let err = store.backup("/b").unwrap_err();
    assert!(
        matches!(err, EngineError::Kernel(KernelError::DiskFull { .. })),
        "{err}"
    );
    assert_eq!(fs.list(Path::new("/b")).unwrap(), Vec::<String>::new());
    fs.set_capacity(None);
    assert!(dump(&store) == expected);
    store_note(&store, 500);
    store.backup("/b").unwrap();
    let copy = Store::open("/b", small_options(&fs, 1000)).unwrap();
    assert_eq!(copy.stats().memories, expected.count + 1);
}

#[test]
fn a_poisoned_store_refuses_a_backup_before_creating_anything_and_after_a_reopen_backs_up() {
    let fs = FaultyStorage::new();
    let store = prepare(&fs);
    // A store's fsync (its second operation) fails: the store is poisoned.
    fs.fail_op(2, true);
    assert!(store.store(NewMemory::new("lost to the fault")).is_err());
    assert!(store.stats().poisoned);
    let err = store.backup("/b").unwrap_err();
    assert!(
        matches!(err, EngineError::Kernel(KernelError::Poisoned)),
        "{err}"
    );
    assert!(
        fs.list(Path::new("/b")).is_err(),
        "the destination was created"
    );
    drop(store);
    let reopened = Store::open(DIR, small_options(&fs, 1000)).unwrap();
    reopened.backup("/b").unwrap();
    let copy = Store::open("/b", small_options(&fs, 1000)).unwrap();
    assert!(dump(&copy) == dump(&reopened));
}
