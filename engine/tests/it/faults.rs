//! What the environment does to a store, and what the store must do about it (issue #13):
//! a full disk refuses writes cleanly and keeps reads; a failed fsync poisons writes, names its
//! cause and leaves reads answering; a lost log file and a bad frame are reported by file and
//! offset; an interrupted checkpoint or creation leaves nothing behind after the next open.

use super::support::small_options;
use amberdb::KernelError;
use amberdb::log::Op;
use amberdb::log::format::encode_frame;
use amberdb::storage::{CrashImage, FaultyStorage, Storage};
use amberdb::{
    EngineError, HashingEmbedder, MemoryId, NewMemory, SearchRequest, Store, StoreOptions,
};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

const DIR: &str = "/s";

fn unit(i: u64) -> Vec<f32> {
    let mut v = [0.1f32; 8];
    v[(i % 8) as usize] = 1.0;
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter().map(|x| x / n).collect()
}

fn files(fs: &FaultyStorage) -> Vec<String> {
    fs.list(Path::new(DIR)).unwrap()
}

fn newest_log(fs: &FaultyStorage) -> PathBuf {
    let name = files(fs)
        .into_iter()
        .filter(|n| n.starts_with("wal-"))
        .max()
        .unwrap();
    Path::new(DIR).join(name)
}

/// Every acknowledged record is there, byte-exact, and no refused one is.
fn check_reopened(image: &FaultyStorage, acked: &BTreeMap<MemoryId, String>, refused: &[String]) {
    let store = Store::open(DIR, small_options(image, 1000)).unwrap();
    for (id, content) in acked {
        assert_eq!(&store.get(*id).unwrap().content, content, "{id}");
    }
    let all = store.memory_ids();
    for id in all {
        let c = store.get(id).unwrap().content;
        assert!(!refused.contains(&c), "refused write {c:?} is stored");
    }
    assert!(
        store.open_report().truncated_tail.is_none(),
        "no partial frame was left"
    );
}

#[test]
fn a_full_disk_refuses_writes_cleanly_keeps_reads_and_resumes_once_space_is_freed() {
    let fs = FaultyStorage::new();
    let store = Store::open(DIR, small_options(&fs, 1000)).unwrap();
    let mut acked = BTreeMap::new();
    for i in 0..20 {
        let c = format!("note {i} before the disk fills");
        acked.insert(
            store
                .store(amberdb::StoreRequest::new(NewMemory::new(&c)).with_vector(unit(i)))
                .unwrap()
                .memory_id,
            c,
        );
    }
    fs.set_capacity(Some(fs.used_bytes() + 600));
    let mut refused = Vec::new();
    for i in 20..60 {
        let c = format!("note {i} while the disk fills up, with some padding to make it larger");
        let log_before = fs.read(&newest_log(&fs)).unwrap().len();
        match store.store(amberdb::StoreRequest::new(NewMemory::new(&c)).with_vector(unit(i))) {
            Ok(s) => {
                acked.insert(s.memory_id, c);
            }
            Err(EngineError::Kernel(KernelError::DiskFull { path, .. })) => {
                assert_eq!(path, newest_log(&fs));
                assert_eq!(
                    fs.read(&path).unwrap().len(),
                    log_before,
                    "the partial frame is cut back"
                );
                refused.push(c);
            }
            Err(e) => panic!("write {i}: expected DiskFull, got {e}"),
        }
    }
    assert!(
        refused.len() > 30,
        "the disk filled: {} refused",
        refused.len()
    );
    let stats = store.stats();
    assert!(!stats.poisoned, "a full disk does not poison");
    assert_eq!(stats.disk_full_refusals, refused.len() as u64);

    // Reads answer; their access counts are skipped and counted.
    let first = *acked.keys().next().unwrap();
    for _ in 0..50 {
        assert_eq!(store.record_access(first).unwrap().id, first);
    }
    let hits = store
        .search(&SearchRequest::new("note 3 before the disk fills"))
        .unwrap();
    assert!(hits.count > 0);
    let s = store.stats();
    assert!(s.accesses_not_recorded >= 45, "{s:?}");

    // A checkpoint cannot be written either: refused, nothing left behind, not poisoned.
    let before = files(&fs);
    assert!(matches!(
        store.checkpoint(),
        Err(EngineError::Kernel(KernelError::DiskFull { .. }))
    ));
    // Its capture may have moved appends to the next log file (C2), which stays: it is where
    // the next frame goes. No segment or checkpoint file stays.
    let added: Vec<String> = files(&fs)
        .into_iter()
        .filter(|f| !before.contains(f))
        .collect();
    assert!(
        added.iter().all(|f| f.starts_with("wal-")),
        "a failed checkpoint removes what it wrote: {added:?}"
    );
    assert!(!store.stats().poisoned);

    // Space comes back: writes resume by themselves.
    fs.set_capacity(None);
    for i in 60..70 {
        let c = format!("note {i} after space was freed");
        acked.insert(
            store
                .store(amberdb::StoreRequest::new(NewMemory::new(&c)).with_vector(unit(i)))
                .unwrap()
                .memory_id,
            c,
        );
    }
    store.checkpoint().unwrap();
    let c = "note after the checkpoint".to_owned();
    acked.insert(
        store
            .store(amberdb::StoreRequest::new(NewMemory::new(&c)).with_vector(unit(7)))
            .unwrap()
            .memory_id,
        c,
    );
    eprintln!(
        "{} acknowledged, {} refused for a full disk, 0 lost",
        acked.len(),
        refused.len()
    );
    for image in [CrashImage::DropUnsynced, CrashImage::KeepUnsynced] {
        check_reopened(&fs.crash_image(image), &acked, &refused);
    }
}

#[test]
fn an_automatic_checkpoint_that_finds_the_disk_full_does_not_fail_its_write() {
    let fs = FaultyStorage::new();
    let store = Store::open(DIR, small_options(&fs, 3)).unwrap();
    let mut acked = BTreeMap::new();
    let before = fs.used_bytes();
    let c = "first".to_owned();
    acked.insert(
        store
            .store(amberdb::StoreRequest::new(NewMemory::new(&c)).with_vector(unit(0)))
            .unwrap()
            .memory_id,
        c,
    );
    let frame = fs.used_bytes() - before;
    let c = "second".to_owned();
    acked.insert(
        store
            .store(amberdb::StoreRequest::new(NewMemory::new(&c)).with_vector(unit(1)))
            .unwrap()
            .memory_id,
        c,
    );
    // Room for the third frame, not for the segment its checkpoint seals.
    fs.set_capacity(Some(fs.used_bytes() + frame + frame / 4));
    let files_before = files(&fs);
    let c = "third".to_owned();
    let id = store
        .store(amberdb::StoreRequest::new(NewMemory::new(&c)).with_vector(unit(2)))
        .expect("the write is durable: its checkpoint's failure is not its own")
        .memory_id;
    acked.insert(id, c);
    let stats = store.stats();
    assert!(!stats.poisoned);
    assert_eq!(stats.checkpoint_seq, 0, "the checkpoint did not happen");
    // Only the next log file (C2), where appends go now, is new: no segment, no checkpoint.
    let added: Vec<String> = files(&fs)
        .into_iter()
        .filter(|f| !files_before.contains(f))
        .collect();
    assert!(
        added.iter().all(|f| f.starts_with("wal-")),
        "and left no file behind: {added:?}"
    );
    fs.set_capacity(None);
    store.checkpoint().unwrap();
    assert!(store.stats().checkpoint_seq > 0);
    check_reopened(&fs.crash_image(CrashImage::DropUnsynced), &acked, &[]);
}

#[test]
fn a_failed_fsync_poisons_writes_with_its_cause_and_reads_go_on() {
    for (failing_op, operation) in [(2, "fsync"), (1, "append")] {
        let fs = FaultyStorage::new();
        let store = Store::open(DIR, small_options(&fs, 1000)).unwrap();
        let kept = store
            .store(amberdb::StoreRequest::new(NewMemory::new("kept")).with_vector(unit(0)))
            .unwrap()
            .memory_id;
        // A store is an append (op 1) then an fsync (op 2).
        fs.fail_op(failing_op, true);
        let err = store
            .store(amberdb::StoreRequest::new(NewMemory::new("lost")).with_vector(unit(1)))
            .unwrap_err();
        assert!(
            matches!(
                err,
                EngineError::Kernel(KernelError::Poisoned)
                    | EngineError::Kernel(KernelError::Io { .. })
            ),
            "{operation}: {err}"
        );
        let stats = store.stats();
        assert!(stats.poisoned);
        let cause = stats.poison_cause.expect("the cause is kept");
        assert_eq!(cause.operation, operation);
        assert_eq!(cause.path, newest_log(&fs));
        assert!(cause.error.contains("injected"), "{}", cause.error);
        // Writes are refused; reads, searches and read-only batches answer.
        assert!(matches!(
            store.store(amberdb::StoreRequest::new(NewMemory::new("refused")).with_vector(unit(2))),
            Err(EngineError::Kernel(KernelError::Poisoned))
        ));
        assert_eq!(store.record_access(kept).unwrap().content, "kept");
        assert!(store.search(&SearchRequest::new("kept")).is_ok());
        let read = store
            .durable_batch(|batch| batch.get(kept).map(|m| m.content))
            .expect("a batch of reads has nothing to make durable");
        assert_eq!(read.unwrap(), "kept");
        let refused = store
            .durable_batch(|batch| {
                batch.store(
                    amberdb::StoreRequest::new(NewMemory::new("refused")).with_vector(unit(3)),
                )
            })
            .unwrap();
        assert!(matches!(
            refused,
            Err(EngineError::Kernel(KernelError::Poisoned))
        ));
        assert!(store.stats().accesses_not_recorded >= 1);
    }
}

fn real_store(dir: &Path) -> Store {
    Store::open(
        dir,
        StoreOptions::new(Arc::new(HashingEmbedder::with_dim(8))).seal_rows(1000),
    )
    .unwrap()
}

/// A store in `dir` holding `a0..a4`, checkpointed.
fn checkpointed_store(dir: &Path) -> Store {
    let store = real_store(dir);
    for i in 0..5 {
        store
            .store(amberdb::StoreRequest::new(NewMemory::new(format!("a{i}"))).with_vector(unit(i)))
            .unwrap();
    }
    store.checkpoint().unwrap();
    store
}

fn log_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_str().unwrap().starts_with("wal-"))
        .collect();
    v.sort();
    v
}

fn assert_lost(dir: &Path, lost: &Path) {
    match Store::open(
        dir,
        StoreOptions::new(Arc::new(HashingEmbedder::with_dim(8))),
    ) {
        Err(EngineError::Kernel(KernelError::Corrupted { file, reason, .. })) => {
            assert_eq!(file, lost, "{reason}");
        }
        Err(e) => panic!("expected Corrupted naming {}, got {e}", lost.display()),
        Ok(_) => panic!("a store that lost {} opened", lost.display()),
    }
    let report = amberdb::verify::verify(dir).unwrap();
    let name = lost.file_name().unwrap().to_str().unwrap();
    assert!(
        report
            .findings
            .iter()
            .any(|i| i.file == name && i.severity == amberdb::verify::Severity::Error),
        "check does not name {name}: {report:?}"
    );
}

#[test]
fn a_lost_log_file_is_corruption_that_open_and_check_name() {
    // After a checkpoint: the log that follows it.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let store = checkpointed_store(&dir);
    for i in 0..3 {
        store
            .store(amberdb::StoreRequest::new(NewMemory::new(format!("b{i}"))).with_vector(unit(i)))
            .unwrap();
    }
    drop(store);
    assert!(amberdb::verify::verify(&dir).unwrap().errors() == 0);
    let newest = log_files(&dir).pop().unwrap();
    std::fs::remove_file(&newest).unwrap();
    assert_lost(&dir, &newest);

    // With no checkpoint: the first log.
    let dir = tmp.path().join("fresh");
    let store = real_store(&dir);
    store
        .store(amberdb::StoreRequest::new(NewMemory::new("only")).with_vector(unit(0)))
        .unwrap();
    drop(store);
    let first = log_files(&dir).pop().unwrap();
    std::fs::remove_file(&first).unwrap();
    assert_lost(&dir, &first);
}

#[test]
fn a_creation_cut_at_any_sync_point_opens_as_a_new_store() {
    let clean = FaultyStorage::new();
    let before = clean.syncs();
    drop(Store::open(DIR, small_options(&clean, 3)).unwrap());
    let sync_points = clean.syncs() - before;
    assert!(sync_points >= 3, "{sync_points}");
    for k in 1..=sync_points {
        let fs = FaultyStorage::new();
        fs.crash_at_sync(k);
        assert!(Store::open(DIR, small_options(&fs, 3)).is_err());
        for image in [CrashImage::DropUnsynced, CrashImage::KeepUnsynced] {
            let image = fs.crash_image(image);
            let store = Store::open(DIR, small_options(&image, 3))
                .unwrap_or_else(|e| panic!("sync point {k}: {e}"));
            let id = store
                .store(amberdb::StoreRequest::new(NewMemory::new("x")).with_vector(unit(0)))
                .unwrap()
                .memory_id;
            assert_eq!(id, MemoryId(1));
        }
    }
}

#[test]
fn open_removes_segment_files_no_checkpoint_names_unless_one_is_unreadable() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    drop(checkpointed_store(&dir));
    let seg = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "mnsf"))
        .unwrap();
    let orphan = dir.join("seg-0000000099.mnsf");
    std::fs::copy(&seg, &orphan).unwrap();
    let store = real_store(&dir);
    assert_eq!(
        store.open_report().removed_orphan_segments,
        vec![orphan.clone()]
    );
    assert!(store.open_report().orphan_segments.is_empty());
    assert!(!orphan.exists());
    assert_eq!(store.stats().memories, 5);
    // A new checkpoint never takes the id of a file that was there at open.
    store
        .store(amberdb::StoreRequest::new(NewMemory::new("c")).with_vector(unit(1)))
        .unwrap();
    store.checkpoint().unwrap();
    drop(store);
    assert!(amberdb::verify::verify(&dir).unwrap().errors() == 0);

    // A damaged newest checkpoint might have named the file: it stays until a sound newer
    // checkpoint is written, and then goes with the damaged checkpoint (item 3 of #54).
    std::fs::copy(&seg, &orphan).unwrap();
    let newest_ckpt = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "ckpt"))
        .max()
        .unwrap();
    std::fs::write(&newest_ckpt, b"garbage").unwrap();
    let store = real_store(&dir);
    // The newest checkpoint's own segment is unreferenced too now: neither is removed.
    assert!(store.open_report().orphan_segments.contains(&orphan));
    assert!(store.open_report().removed_orphan_segments.is_empty());
    assert!(
        store
            .open_report()
            .orphan_segments
            .iter()
            .all(|p| p.exists())
    );
    assert_eq!(
        store.stats().memories,
        6,
        "rebuilt from the older checkpoint and the log"
    );
    store.checkpoint().unwrap();
    assert!(
        !orphan.exists(),
        "the orphan outlived the next sound checkpoint"
    );
    assert!(
        !newest_ckpt.exists() || amberdb::verify::verify(&dir).unwrap().errors() == 0,
        "the damaged checkpoint outlived the next sound checkpoint"
    );
    drop(store);
    assert_eq!(amberdb::verify::verify(&dir).unwrap().errors(), 0);
}

#[test]
fn a_frame_that_does_not_apply_is_reported_at_its_offset() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let store = real_store(&dir);
    store
        .store(amberdb::StoreRequest::new(NewMemory::new("one")).with_vector(unit(0)))
        .unwrap();
    drop(store);
    let log = log_files(&dir).pop().unwrap();
    let mut bytes = std::fs::read(&log).unwrap();
    let offset = bytes.len() as u64;
    // A valid frame (CRC and all) deleting an id that never existed.
    bytes.extend(encode_frame(2, &Op::Delete { id: MemoryId(99) }));
    std::fs::write(&log, bytes).unwrap();
    match Store::open(
        &dir,
        StoreOptions::new(Arc::new(HashingEmbedder::with_dim(8))),
    ) {
        Err(EngineError::Kernel(KernelError::Corrupted {
            file, offset: at, ..
        })) => {
            assert_eq!(file, log);
            assert_eq!(at, offset);
        }
        Err(e) => panic!("expected Corrupted, got {e}"),
        Ok(_) => panic!("a frame deleting a missing id was accepted"),
    }
}

#[test]
fn a_list_of_messages_is_stored_whole_or_not_at_all() {
    let fs = FaultyStorage::new();
    let store = Store::open(DIR, small_options(&fs, 1000)).unwrap();
    store
        .create_entity(amberdb::EntityKind::Session, None, "chat", None, None)
        .unwrap();
    let turns: Vec<(amberdb::Role, String)> = (0..8)
        .map(|i| {
            (
                amberdb::Role::User,
                format!("turn {i} of a conversation that fills the disk"),
            )
        })
        .collect();
    // Room for a few turns, not for all eight: the list is refused whole.
    fs.set_capacity(Some(fs.used_bytes() + 400));
    let err = store.add_messages(None, "chat", &turns).unwrap_err();
    assert!(
        matches!(err, EngineError::Kernel(KernelError::DiskFull { .. })),
        "{err}"
    );
    let count = |s: &Store| s.stats().memories;
    assert_eq!(count(&store), 0, "a refused list left turns behind");
    fs.set_capacity(None);
    let ids = store.add_messages(None, "chat", &turns).unwrap();
    assert_eq!(ids.len(), 8);
    assert_eq!(count(&store), 8);
    // After a crash at any point the list is all there or not at all.
    drop(store);
    let reopened = Store::open(
        DIR,
        small_options(&fs.crash_image(CrashImage::KeepUnsynced), 1000),
    )
    .unwrap();
    assert_eq!(count(&reopened), 8);
    let ordered: Vec<String> = ids
        .iter()
        .map(|id| reopened.get(*id).unwrap().content)
        .collect();
    assert_eq!(
        ordered,
        turns.iter().map(|t| t.1.clone()).collect::<Vec<_>>()
    );
}
