//! Damage to every file kind: torn and zero-filled tails, bit flips, random overwrites.
//! Rules (docs/format/*.md): a torn tail is truncated; damage followed by valid data is
//! `Corrupted`; a damaged checkpoint or segment falls back to the log; never a panic, never
//! wrong data.

use super::support::{Rng, seed, small_options};
use amberdb::KernelError;
use amberdb::storage::{FaultyStorage, Storage};
use amberdb::{EngineError, MemoryId, NewMemory, Store};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const DIR: &str = "/c";

/// A store with `n` records and, if `checkpoint`, a checkpoint after the first half.
fn build(n: u64, checkpoint: bool) -> (FaultyStorage, BTreeMap<MemoryId, String>) {
    let at: &[u64] = if checkpoint { &[n / 2] } else { &[] };
    build_with_checkpoints(n, at)
}

/// A store with `n` records and a checkpoint after each index in `at`: the first full, the
/// others deltas on it (docs/durability.md, "Incremental checkpoints").
fn build_with_checkpoints(n: u64, at: &[u64]) -> (FaultyStorage, BTreeMap<MemoryId, String>) {
    let fs = FaultyStorage::new();
    let options = small_options(&fs, 1000).delta_max_share(f64::INFINITY);
    let store = Store::open(Path::new(DIR), options).unwrap();
    let mut rng = Rng::new(n);
    let mut want = BTreeMap::new();
    for i in 0..n {
        let content = format!(
            "record {i} with some text to make frames longer {}",
            rng.next_u64()
        );
        let id = store
            .store(
                amberdb::StoreRequest::new(NewMemory::new(&content).tags(["x"]))
                    .with_vector(rng.unit_vector(8)),
            )
            .unwrap()
            .memory_id;
        want.insert(id, content);
        if at.contains(&i) {
            store.checkpoint().unwrap();
        }
    }
    drop(store);
    (fs, want)
}

fn files(fs: &FaultyStorage, prefix: &str) -> Vec<PathBuf> {
    fs.list(Path::new(DIR))
        .unwrap()
        .into_iter()
        .filter(|n| n.starts_with(prefix))
        .map(|n| Path::new(DIR).join(n))
        .collect()
}

fn open(fs: &FaultyStorage) -> amberdb::Result<Store> {
    Store::open(Path::new(DIR), small_options(fs, 1000))
}

/// Every record the store returns equals the original; returns how many there are.
fn check_subset(store: &Store, want: &BTreeMap<MemoryId, String>) -> usize {
    let mut n = 0;
    for id in 1..=want.len() as u64 + 2 {
        if let Ok(m) = store.get(MemoryId(id)) {
            assert_eq!(
                Some(&m.content),
                want.get(&MemoryId(id)),
                "wrong data for {id}"
            );
            n += 1;
        }
    }
    n
}

/// Frame start offsets of a log file image (its header is `HEADER_LEN` bytes).
fn frame_starts(bytes: &[u8]) -> Vec<usize> {
    let mut out = Vec::new();
    let mut pos = amberdb::log::format::HEADER_LEN;
    while pos + 8 <= bytes.len() {
        out.push(pos);
        pos += 8 + u32::from_le_bytes(bytes[pos..pos + 4].try_into().unwrap()) as usize;
    }
    out
}

#[test]
fn every_torn_tail_is_truncated_to_a_prefix() {
    let (fs, want) = build(12, false);
    let wal = files(&fs, "wal-").remove(0);
    let full = fs.read(&wal).unwrap();
    let starts = frame_starts(&full);
    for cut in amberdb::log::format::HEADER_LEN..full.len() {
        let img = fs.crash_image(amberdb::storage::CrashImage::KeepUnsynced);
        img.overwrite(&wal, full[..cut].to_vec()).unwrap();
        let store = open(&img).unwrap_or_else(|e| panic!("cut {cut}: {e}"));
        let whole = starts
            .iter()
            .skip(1)
            .chain(std::iter::once(&full.len()))
            .filter(|&&end| end <= cut)
            .count();
        assert_eq!(check_subset(&store, &want), whole, "cut {cut}");
        for id in 1..=whole as u64 {
            assert!(store.get(MemoryId(id)).is_ok(), "cut {cut}: not a prefix");
        }
        assert_eq!(
            store.open_report().truncated_tail.is_some(),
            !starts.contains(&cut),
            "cut {cut}"
        );
    }
}

/// On the real file system: recovery maps the newest log file too (`docs/safety.md`), so the
/// map must be gone before the torn tail is cut and the writer appends to the file.
#[test]
fn a_torn_newest_log_file_on_disk_is_replayed_from_its_map_cut_and_appended_to() {
    let dir = tempfile::tempdir().unwrap();
    let stored = |store: &Store, i: u64| {
        let content = format!("on disk {i}");
        let request = amberdb::StoreRequest::new(NewMemory::new(&content));
        (store.store(request).unwrap().memory_id, content)
    };
    let store = Store::open(dir.path(), amberdb::StoreOptions::hashing()).unwrap();
    let mut want: BTreeMap<MemoryId, String> = (0..50).map(|i| stored(&store, i)).collect();
    drop(store);
    let newest = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("wal-"))
        .max()
        .unwrap();
    let good = std::fs::read(&newest).unwrap();
    let mut torn = good.clone();
    torn.extend_from_slice(&[0x5a; 999]);
    std::fs::write(&newest, &torn).unwrap();

    let store = Store::open(dir.path(), amberdb::StoreOptions::hashing()).unwrap();
    let report = store.open_report().clone();
    assert_eq!(report.replayed_frames, 50, "{report:?}");
    assert_eq!(
        report.truncated_tail,
        Some((newest.clone(), good.len() as u64))
    );
    assert_eq!(
        std::fs::read(&newest).unwrap(),
        good,
        "cut back to the last frame"
    );
    want.extend((50..60).map(|i| stored(&store, i)));
    drop(store);

    let store = Store::open(dir.path(), amberdb::StoreOptions::hashing()).unwrap();
    assert_eq!(store.open_report().truncated_tail, None);
    assert_eq!(store.stats().memories, want.len());
    for (id, content) in &want {
        assert_eq!(&store.get(*id).unwrap().content, content);
    }
}

#[test]
fn zero_filled_and_garbage_tails_are_truncated() {
    let (fs, want) = build(10, true);
    let wal = files(&fs, "wal-").pop().unwrap();
    let mut rng = Rng::new(seed("zero_filled_and_garbage_tails_are_truncated", 11));
    let good = fs.read(&wal).unwrap();
    for tail in [
        vec![0u8; 4096],
        (0..777).map(|_| rng.next_u64() as u8).collect(),
    ] {
        let img = fs.crash_image(amberdb::storage::CrashImage::KeepUnsynced);
        img.overwrite(&wal, [good.clone(), tail].concat()).unwrap();
        let store = open(&img).unwrap();
        assert_eq!(check_subset(&store, &want), want.len());
        assert!(store.open_report().truncated_tail.is_some());
        assert_eq!(
            img.read(&wal).unwrap(),
            good,
            "tail not cut back to the last valid frame"
        );
    }
}

#[test]
fn a_bit_flip_before_valid_frames_is_reported_with_its_offset() {
    let (fs, want) = build(8, false);
    let wal = files(&fs, "wal-").remove(0);
    let full = fs.read(&wal).unwrap();
    let starts = frame_starts(&full);
    let mut rng = Rng::new(seed(
        "a_bit_flip_before_valid_frames_is_reported_with_its_offset",
        3,
    ));
    let mut flips = 0;
    for (i, &start) in starts.iter().enumerate() {
        let end = starts.get(i + 1).copied().unwrap_or(full.len());
        for _ in 0..25 {
            let at = start + rng.below((end - start) as u64) as usize;
            let mut bad = full.clone();
            bad[at] ^= 1 << rng.below(8);
            let img = fs.crash_image(amberdb::storage::CrashImage::KeepUnsynced);
            img.overwrite(&wal, bad).unwrap();
            flips += 1;
            match open(&img) {
                Err(EngineError::Kernel(KernelError::Corrupted { file, offset, .. })) => {
                    assert!(end < full.len(), "last frame must count as a torn tail");
                    assert_eq!(file, wal);
                    assert_eq!(offset, start as u64, "frame {i}, flipped byte {at}");
                }
                Ok(store) => {
                    assert_eq!(
                        end,
                        full.len(),
                        "flip in frame {i} of {} went unreported",
                        starts.len()
                    );
                    assert_eq!(check_subset(&store, &want), want.len() - 1);
                }
                Err(e) => panic!("unexpected {e}"),
            }
        }
    }
    eprintln!(
        "{flips} log bit flips: each reported at its frame's offset, or cut as a torn last frame"
    );
}

#[test]
fn damaged_checkpoints_and_segments_fall_back_to_the_log() {
    let (fs, want) = build(20, true);
    let mut rng = Rng::new(seed(
        "damaged_checkpoints_and_segments_fall_back_to_the_log",
        5,
    ));
    let mut trials = 0;
    for prefix in ["ckpt-", "seg-"] {
        let path = files(&fs, prefix).remove(0);
        let good = fs.read(&path).unwrap();
        for _ in 0..60 {
            let mut bad = good.clone();
            let at = rng.below(bad.len() as u64) as usize;
            bad[at] ^= 1 << rng.below(8);
            let img = fs.crash_image(amberdb::storage::CrashImage::KeepUnsynced);
            img.overwrite(&path, bad).unwrap();
            let store =
                open(&img).unwrap_or_else(|e| panic!("{}: flip at {at}: {e}", path.display()));
            assert_eq!(
                store.open_report().skipped_checkpoints.len(),
                1,
                "{}: flip at {at}",
                path.display()
            );
            assert_eq!(store.open_report().checkpoint_seq, None);
            assert_eq!(check_subset(&store, &want), want.len());
            trials += 1;
        }
        // A missing file is the same as a damaged one.
        let img = fs.crash_image(amberdb::storage::CrashImage::KeepUnsynced);
        img.remove(&path).unwrap();
        assert_eq!(check_subset(&open(&img).unwrap(), &want), want.len());
    }
    eprintln!("{trials} damaged checkpoints/segments: all detected, 0 records lost");
}

#[test]
fn a_damaged_identity_is_corruption() {
    let (fs, _) = build(2, false);
    let path = Path::new(DIR).join("IDENTITY");
    let good = fs.read(&path).unwrap();
    for at in 0..good.len() {
        let mut bad = good.clone();
        bad[at] ^= 0x10;
        let img = fs.crash_image(amberdb::storage::CrashImage::KeepUnsynced);
        img.overwrite(&path, bad).unwrap();
        let err = open(&img).unwrap_err();
        assert!(
            matches!(
                err,
                EngineError::Kernel(KernelError::Corrupted { .. })
                    | EngineError::Kernel(KernelError::UnsupportedVersion { .. })
            ),
            "byte {at}: {err}"
        );
    }
    let img = fs.crash_image(amberdb::storage::CrashImage::KeepUnsynced);
    img.remove(&path).unwrap();
    assert!(matches!(
        open(&img).unwrap_err(),
        EngineError::Kernel(KernelError::Corrupted { .. })
    ));
}

#[test]
fn random_overwrites_never_panic_or_return_wrong_data() {
    random_overwrites(
        build(16, true),
        "random_overwrites_never_panic_or_return_wrong_data",
        99,
    );
}

#[test]
fn random_overwrites_of_a_delta_and_its_base_never_panic_or_return_wrong_data() {
    let (fs, want) = build_with_checkpoints(24, &[8, 16]);
    let names = files(&fs, "ckpt-");
    assert_eq!(names.len(), 2, "a base and a delta: {names:?}");
    random_overwrites(
        (fs, want),
        "random_overwrites_of_a_delta_and_its_base_never_panic_or_return_wrong_data",
        98,
    );
}

fn random_overwrites(
    (fs, want): (FaultyStorage, BTreeMap<MemoryId, String>),
    name: &str,
    default_seed: u64,
) {
    let mut rng = Rng::new(seed(name, default_seed));
    let all: Vec<PathBuf> = fs
        .list(Path::new(DIR))
        .unwrap()
        .into_iter()
        .filter(|n| n != "LOCK")
        .map(|n| Path::new(DIR).join(n))
        .collect();
    let (mut refused, mut opened) = (0, 0);
    for _ in 0..400 {
        let path = &all[rng.below(all.len() as u64) as usize];
        let mut bytes = fs.read(path).unwrap();
        if bytes.is_empty() {
            continue;
        }
        let at = rng.below(bytes.len() as u64) as usize;
        let len = 1 + rng.below(64) as usize;
        for b in bytes.iter_mut().skip(at).take(len) {
            *b = rng.next_u64() as u8;
        }
        let img = fs.crash_image(amberdb::storage::CrashImage::KeepUnsynced);
        img.overwrite(path, bytes).unwrap();
        match open(&img) {
            Ok(store) => {
                check_subset(&store, &want);
                opened += 1;
            }
            Err(e) => {
                assert_eq!(
                    e.kind(),
                    amberdb::ErrorKind::Data,
                    "{}: {e}",
                    path.display()
                );
                refused += 1;
            }
        }
    }
    eprintln!(
        "400 random overwrites: {refused} refused as corrupt, {opened} opened with only correct records, 0 panics"
    );
}

/// A store on disk with two checkpoints, each of which starts a log file: the records
/// written, by id.
fn on_disk(dir: &Path) -> BTreeMap<MemoryId, String> {
    let store = Store::open(dir, amberdb::StoreOptions::hashing()).unwrap();
    let mut want = BTreeMap::new();
    for i in 0..30 {
        let content = format!("note {i} about the build cache");
        let s = store
            .store(amberdb::StoreRequest {
                memory: NewMemory::new(&content),
                vector: None,
                hooks: amberdb::HookOverrides {
                    skip: vec![amberdb::WriteHook::SemanticDedup],
                    ..amberdb::HookOverrides::default()
                },
            })
            .unwrap();
        want.insert(s.memory_id, content);
        if i == 9 || i == 19 {
            store.checkpoint().unwrap();
        }
    }
    store.close().unwrap();
    want
}

fn named(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(prefix))
        })
        .collect();
    v.sort();
    v
}

fn swap(a: &Path, b: &Path) {
    let tmp = a.with_extension("swap");
    std::fs::rename(a, &tmp).unwrap();
    std::fs::rename(b, a).unwrap();
    std::fs::rename(&tmp, b).unwrap();
}

/// `check`'s errors about `file`.
fn check_errors_about(dir: &Path, file: &Path) -> Vec<String> {
    let name = file.file_name().unwrap().to_str().unwrap();
    amberdb::verify::verify(dir)
        .unwrap()
        .findings
        .into_iter()
        .filter(|f| f.severity == amberdb::verify::Severity::Error && f.file == name)
        .map(|f| f.what)
        .collect()
}

/// `check` names `file` as one under another file's name.
fn assert_reported_misnamed(dir: &Path, file: &Path) {
    let errors = check_errors_about(dir, file);
    assert!(
        errors
            .iter()
            .any(|e| e.contains("renamed, swapped or copied")),
        "{}: {errors:?}",
        file.display()
    );
}

/// Logs swapped by name, or an old log copied under a newer name, are refused at open before
/// any frame is applied, and `check` names them; nothing is written, so putting the files
/// back opens the store with every record (issue #45, items 1 and 2).
#[test]
fn a_log_under_another_name_is_refused_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    let want = on_disk(dir.path());
    assert_eq!(amberdb::verify::verify(dir.path()).unwrap().errors(), 0);
    let logs = named(dir.path(), "wal-");
    // The log before the older checkpoint is gone; the two after it remain.
    assert_eq!(logs.len(), 2, "{logs:?}");
    let (a, b) = (&logs[0], &logs[1]);
    swap(a, b);
    match Store::open(dir.path(), amberdb::StoreOptions::hashing()) {
        Err(EngineError::Kernel(KernelError::Misnamed {
            file,
            named,
            header,
        })) => {
            assert!(file == *a || file == *b, "{}", file.display());
            assert_ne!(named, header);
        }
        other => panic!("a swapped log opened: {:?}", other.map(|_| ())),
    }
    for f in [a, b] {
        assert_reported_misnamed(dir.path(), f);
    }
    swap(a, b);
    let store = Store::open(dir.path(), amberdb::StoreOptions::hashing()).unwrap();
    assert_eq!(check_subset(&store, &want), want.len());
    store.close().unwrap();

    // A stale copy of the oldest log under a name after the newest.
    let stale = dir.path().join("wal-00000000000000100000.log");
    std::fs::copy(&logs[0], &stale).unwrap();
    match Store::open(dir.path(), amberdb::StoreOptions::hashing()) {
        Err(EngineError::Kernel(KernelError::Misnamed { file, named, .. })) => {
            assert_eq!(file, stale);
            assert_eq!(named, 100_000);
        }
        other => panic!("a stale copy opened: {:?}", other.map(|_| ())),
    }
    assert!(!check_errors_about(dir.path(), &stale).is_empty());
    std::fs::remove_file(&stale).unwrap();
    let store = Store::open(dir.path(), amberdb::StoreOptions::hashing()).unwrap();
    assert_eq!(check_subset(&store, &want), want.len());
}

/// Checkpoints swapped by name are never loaded: `check` names both, and an open that cannot
/// recover without them (the log no longer reaches back) refuses naming a checkpoint, not a
/// log file; one that can (an older checkpoint, or the whole log) opens and lists them as
/// skipped (issue #45, item 3).
#[test]
fn checkpoints_under_each_others_names_are_reported_not_loaded() {
    let dir = tempfile::tempdir().unwrap();
    let want = on_disk(dir.path());
    let ckpts = named(dir.path(), "ckpt-");
    assert_eq!(ckpts.len(), 2, "{ckpts:?}");
    swap(&ckpts[0], &ckpts[1]);
    for f in &ckpts {
        assert_reported_misnamed(dir.path(), f);
    }
    // The log before the older checkpoint is gone: the open cannot recover, and says
    // which checkpoint is wrong (it named a missing wal-…1.log before).
    match Store::open(dir.path(), amberdb::StoreOptions::hashing()) {
        Err(EngineError::Kernel(KernelError::Misnamed { file, .. })) => {
            assert!(ckpts.contains(&file), "{}", file.display());
        }
        other => panic!("{:?}", other.map(|_| ())),
    }
    swap(&ckpts[0], &ckpts[1]);
    let store = Store::open(dir.path(), amberdb::StoreOptions::hashing()).unwrap();
    assert_eq!(check_subset(&store, &want), want.len());
}

/// A store of `n` notes (the hashing embedder's vectors) with two full checkpoints, both
/// naming the first segment: the first after `n / 2`, the second at the end. Returns the
/// storage, the notes by id and that shared segment (docs/durability.md, R4b).
fn with_a_shared_segment(n: u64) -> (FaultyStorage, BTreeMap<MemoryId, String>, PathBuf) {
    let fs = FaultyStorage::new();
    let store = Store::open(Path::new(DIR), small_options(&fs, 1000)).unwrap();
    let mut want = BTreeMap::new();
    for i in 0..n {
        let content = format!("note {i}: the {} runbook mentions port {}", i * 7, 9000 + i);
        let id = store
            .store(amberdb::StoreRequest::new(NewMemory::new(&content)))
            .unwrap()
            .memory_id;
        want.insert(id, content);
        if i + 1 == n / 2 || i + 1 == n {
            store.checkpoint().unwrap();
        }
    }
    drop(store);
    let mut segments = files(&fs, "seg-");
    segments.sort();
    assert_eq!(segments.len(), 2, "{segments:?}");
    assert!(
        files(&fs, "wal-").len() < 3,
        "retention removed the first log file"
    );
    (fs, want, segments.remove(0))
}

fn flip_a_bit(fs: &FaultyStorage, path: &Path, at: usize) -> FaultyStorage {
    let mut bad = fs.read(path).unwrap();
    let at = at % bad.len();
    bad[at] ^= 0x04;
    let img = fs.crash_image(amberdb::storage::CrashImage::KeepUnsynced);
    img.overwrite(path, bad).unwrap();
    img
}

/// The ids a plain vector search for `text` returns among its first five.
fn vector_hits(store: &Store, text: &str) -> Vec<MemoryId> {
    let req = amberdb::SearchRequest::new(text)
        .limit(5)
        .strategy(amberdb::Strategy::Similarity)
        .mode(amberdb::Mode::Vector)
        .without_hooks();
    store
        .search(&req)
        .unwrap()
        .results
        .iter()
        .map(|h| h.memory.id)
        .collect()
}

/// Before wave 3 one flipped bit in a segment both retained checkpoints name made the store
/// impossible to open (the open fell back to sequence 0 and wanted `wal-…1.log`). Now it
/// opens without it: every record live, keyword search finds them all, vector search the
/// others; no checkpoint, purge or backup until the vectors are rebuilt from the texts;
/// then the store is whole again, and reopens so.
#[test]
fn a_damaged_shared_segment_opens_unindexed_and_restores() {
    let (fs, want, shared) = with_a_shared_segment(40);
    let mut rng = Rng::new(seed(
        "a_damaged_shared_segment_opens_unindexed_and_restores",
        11,
    ));
    let img = flip_a_bit(&fs, &shared, rng.below(1 << 20) as usize);
    let store = open(&img).unwrap_or_else(|e| panic!("open with a damaged shared segment: {e}"));
    let report = store.open_report().clone();
    assert_eq!(report.damaged_segments.len(), 1, "{report:?}");
    let name = shared.file_name().unwrap().to_str().unwrap();
    assert!(report.damaged_segments[0].starts_with(name), "{report:?}");
    assert_eq!(
        report.unindexed, 20,
        "the first half was in the damaged segment"
    );
    assert_eq!(store.unindexed(), 20);
    assert_eq!(store.stats().unindexed, 20);
    assert_eq!(
        check_subset(&store, &want),
        want.len(),
        "every record is live"
    );
    let (first, first_text) = want.iter().next().map(|(k, v)| (*k, v.clone())).unwrap();
    let (last, last_text) = want.iter().last().map(|(k, v)| (*k, v.clone())).unwrap();
    // Vector search finds the indexed half, not the unindexed; keyword search finds both.
    assert_eq!(vector_hits(&store, &last_text).first(), Some(&last));
    assert!(!vector_hits(&store, &first_text).contains(&first));
    let keyword = amberdb::SearchRequest::new(&first_text)
        .limit(5)
        .mode(amberdb::Mode::Keyword)
        .without_hooks();
    let hits = store.search(&keyword).unwrap().results;
    assert_eq!(hits.first().map(|h| h.memory.id), Some(first));
    // No checkpoint, purge or backup yet; each refusal changes nothing.
    let files_before = img.list(Path::new(DIR)).unwrap();
    let seq_before = store.stats().checkpoint_seq;
    for refused in [
        store.checkpoint().map(drop),
        store.purge().map(drop),
        store.backup("/backup").map(drop),
    ] {
        assert!(
            matches!(
                refused,
                Err(EngineError::Kernel(KernelError::Restoring { left: 20 }))
            ),
            "{refused:?}"
        );
    }
    assert_eq!(img.list(Path::new(DIR)).unwrap(), files_before);
    assert_eq!(store.stats().checkpoint_seq, seq_before);
    // Writes go on, unindexed records included: one deleted, one's content replaced (the old
    // version is archived without a vector until restored).
    let second = MemoryId(first.0 + 1);
    let third = MemoryId(first.0 + 2);
    store.delete(second).unwrap();
    let updated = store
        .update(amberdb::UpdateRequest {
            memory_id: Some(third),
            content: Some("note two, rewritten: the runbook moved to the wiki".into()),
            ..amberdb::UpdateRequest::default()
        })
        .unwrap();
    assert_eq!(store.unindexed(), 19, "the deleted one is not waited for");
    // Restored on this thread (no maintenance thread): 18 live, 1 archived.
    assert_eq!(store.restore_vectors().unwrap(), 19);
    assert_eq!(store.unindexed(), 0);
    assert!(
        store.stats().checkpoint_seq > seq_before,
        "restoring wrote a checkpoint"
    );
    assert_eq!(vector_hits(&store, &first_text).first(), Some(&first));
    drop(store);
    // Reopened: whole, from the checkpoint restoration wrote.
    let store = open(&img).unwrap();
    let report = store.open_report();
    assert!(report.damaged_segments.is_empty(), "{report:?}");
    assert_eq!(report.unindexed, 0);
    assert_eq!(vector_hits(&store, &first_text).first(), Some(&first));
    assert!(store.get(second).is_err());
    assert_eq!(
        store.get(updated.memory_id).unwrap().content,
        "note two, rewritten: the runbook moved to the wiki"
    );
    let mut rest = want.clone();
    rest.remove(&second);
    rest.remove(&third);
    for (id, text) in &rest {
        assert_eq!(&store.get(*id).unwrap().content, text);
    }
    // The purge that ended restoration let go of the damaged file and the checkpoints that
    // named it.
    let name = shared.file_name().unwrap().to_str().unwrap().to_owned();
    assert!(!img.list(Path::new(DIR)).unwrap().contains(&name));
    assert_eq!(files(&img, "ckpt-").len(), 1);
}

/// A crash while vectors are being restored loses nothing: the next open starts over from
/// the same checkpoint and log, writes acknowledged meanwhile included.
#[test]
fn a_crash_before_restoration_ends_reopens_the_same_way() {
    let (fs, want, shared) = with_a_shared_segment(30);
    let img = flip_a_bit(&fs, &shared, 100);
    let store = open(&img).unwrap();
    assert_eq!(store.unindexed(), 15);
    assert_eq!(check_subset(&store, &want), want.len());
    let added = store
        .store(amberdb::StoreRequest::new(NewMemory::new(
            "written while the vectors were missing",
        )))
        .unwrap()
        .memory_id;
    drop(store);
    let crashed = img.crash_image(amberdb::storage::CrashImage::DropUnsynced);
    let store = open(&crashed).unwrap();
    assert_eq!(store.unindexed(), 15);
    for (id, text) in &want {
        assert_eq!(&store.get(*id).unwrap().content, text);
    }
    assert_eq!(
        store.get(added).unwrap().content,
        "written while the vectors were missing"
    );
    assert_eq!(store.restore_vectors().unwrap(), 15);
    assert_eq!(store.unindexed(), 0);
}

/// With a maintenance thread the vectors come back by themselves.
#[test]
fn a_store_with_a_maintenance_thread_restores_in_the_background() {
    let (fs, want, shared) = with_a_shared_segment(30);
    let img = flip_a_bit(&fs, &shared, 7);
    let store = Store::open(
        Path::new(DIR),
        small_options(&img, 1000).maintenance_thread(true),
    )
    .unwrap();
    assert_eq!(store.open_report().unindexed, 15);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while store.unindexed() > 0 {
        assert!(std::time::Instant::now() < deadline, "not restored in 60 s");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let (first, text) = want.iter().next().unwrap();
    assert_eq!(vector_hits(&store, text).first(), Some(first));
}

/// On a real directory: `check` names the damaged shared segment before, and is clean once
/// the open has restored the vectors (the purge that ends restoration removed the file).
#[test]
fn check_is_clean_once_the_vectors_of_a_flat_segment_are_restored() {
    damaged_shared_segment_on_disk(false);
}

/// The same with the shared segment an IVF one (`docs/ivf.md`): every IVF segment is named
/// by both retained checkpoints.
#[test]
fn check_is_clean_once_the_vectors_of_an_ivf_segment_are_restored() {
    damaged_shared_segment_on_disk(true);
}

fn damaged_shared_segment_on_disk(ivf: bool) {
    let dir = tempfile::tempdir().unwrap();
    let options = || {
        amberdb::StoreOptions::hashing()
            .maintenance_thread(false)
            .hooks(amberdb::HookConfig::none())
    };
    let store = Store::open(dir.path(), options()).unwrap();
    let mut want = BTreeMap::new();
    for i in 0..40 {
        let content = format!("incident {i}: queue q{i} stalled on host h{}", i * 3);
        let id = store
            .store(amberdb::StoreRequest::new(NewMemory::new(&content)))
            .unwrap()
            .memory_id;
        want.insert(id, content);
        if i == 19 || i == 39 {
            store.checkpoint().unwrap();
        }
        if i == 19 && ivf {
            let built = store
                .build_index()
                .unwrap()
                .expect("a flat segment to index");
            assert_eq!(built.rows, 20);
        }
    }
    drop(store);
    let mut segments = named(dir.path(), "seg-");
    segments.sort();
    let shared = segments.remove(0);
    assert_eq!(
        shared.to_str().unwrap().ends_with(".mnsi"),
        ivf,
        "{shared:?} and {segments:?}"
    );
    let mut bytes = std::fs::read(&shared).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x01;
    std::fs::write(&shared, bytes).unwrap();
    assert_eq!(check_errors_about(dir.path(), &shared).len(), 1);
    let store = Store::open(dir.path(), options()).unwrap();
    assert_eq!(store.unindexed(), 20);
    assert_eq!(store.restore_vectors().unwrap(), 20);
    drop(store);
    let report = amberdb::verify::verify(dir.path()).unwrap();
    assert_eq!(report.errors(), 0, "{:?}", report.findings);
    assert!(!shared.exists());
    let store = Store::open(dir.path(), options()).unwrap();
    assert!(store.open_report().damaged_segments.is_empty());
    for (id, text) in &want {
        assert_eq!(&store.get(*id).unwrap().content, text);
    }
}
