//! Every file kind of another store of the same shape (a log, a checkpoint, a flat and an IVF
//! segment), copied in under its own name and under a newer one (issue #54 item 1,
//! `docs/durability.md`, R3c): `verify` names it, a foreign log refuses the open and changes
//! nothing, a foreign checkpoint or segment is quarantined and never served.

use amberdb::{EngineError, HookConfig, KernelError, MemoryId, NewMemory, Store, StoreOptions};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn options() -> StoreOptions {
    StoreOptions::hashing()
        .maintenance_thread(false)
        .hooks(HookConfig::none())
}

/// A store of 50 records whose texts start with `who`: two checkpoints, an IVF segment of
/// the first 20 rows and a flat one of the rest, and a log tail.
fn store_of(dir: &Path, who: &str) -> BTreeMap<MemoryId, String> {
    let store = Store::open(dir, options()).unwrap();
    let mut want = BTreeMap::new();
    for i in 0..50 {
        let content = format!("{who} incident {i}: queue q{i} stalled on host h{}", i * 3);
        let id = store
            .store(amberdb::StoreRequest::new(NewMemory::new(&content)))
            .unwrap()
            .memory_id;
        want.insert(id, content);
        if i == 19 || i == 39 {
            store.checkpoint().unwrap();
        }
        if i == 19 {
            store
                .build_index()
                .unwrap()
                .expect("a flat segment to index");
        }
    }
    drop(store);
    want
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.path().is_file() {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// The newest file of `dir` whose name starts with `prefix` and ends with `suffix`.
fn newest(dir: &Path, prefix: &str, suffix: &str) -> PathBuf {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let n = p.file_name().unwrap().to_str().unwrap();
            n.starts_with(prefix) && n.ends_with(suffix)
        })
        .collect();
    v.sort();
    v.pop()
        .unwrap_or_else(|| panic!("no {prefix}*{suffix} in {}", dir.display()))
}

/// `name` with its number raised past any the store has (same width).
fn newer_name(name: &str) -> String {
    let digits: String = name.chars().filter(char::is_ascii_digit).collect();
    let bumped = format!("{:0width$}", 9_000_000_000u64, width = digits.len());
    name.replacen(&digits, &bumped, 1)
}

#[test]
fn every_file_kind_of_another_store_is_named_and_never_served() {
    let tmp = tempfile::tempdir().unwrap();
    let (x, y) = (tmp.path().join("x"), tmp.path().join("y"));
    let want = store_of(&x, "x");
    store_of(&y, "y");
    for (kind, prefix, suffix) in [
        ("log", "wal-", ".log"),
        ("checkpoint", "ckpt-", ".ckpt"),
        ("flat segment", "seg-", ".mnsf"),
        ("IVF segment", "seg-", ".mnsi"),
    ] {
        for newer in [false, true] {
            let case = format!(
                "{kind} under {} name",
                if newer { "a newer" } else { "its own" }
            );
            let dir = tmp.path().join(format!("case-{prefix}{suffix}-{newer}"));
            copy_dir(&x, &dir);
            let theirs = newest(&y, prefix, suffix);
            let name = theirs.file_name().unwrap().to_str().unwrap().to_owned();
            let name = if newer { newer_name(&name) } else { name };
            if !newer {
                assert!(dir.join(&name).exists(), "{case}: the same shape");
            }
            std::fs::copy(&theirs, dir.join(&name)).unwrap();
            let report = amberdb::verify::verify(&dir).unwrap();
            assert!(
                report
                    .findings
                    .iter()
                    .any(|f| f.file == name && f.what.contains("not this store's file")),
                "{case}: {:?}",
                report.findings
            );
            let before: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(&dir)
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.is_file() && p.file_name().unwrap() != "LOCK")
                .map(|p| (p.clone(), std::fs::read(&p).unwrap()))
                .collect();
            match Store::open(&dir, options()) {
                Err(EngineError::Kernel(KernelError::Foreign { file, why })) => {
                    assert_eq!(kind, "log", "{case}: refused");
                    assert_eq!(file, dir.join(&name), "{case}");
                    assert!(why.contains("belongs to store"), "{case}: {why}");
                    // Nothing was changed by the refusal.
                    for (p, bytes) in &before {
                        assert_eq!(&std::fs::read(p).unwrap(), bytes, "{case}: {}", p.display());
                    }
                }
                Err(e) => panic!("{case}: {e}"),
                Ok(store) => {
                    assert_ne!(kind, "log", "{case}: a foreign log was opened");
                    assert_eq!(store.open_report().quarantined.len(), 1, "{case}");
                    for (id, content) in &want {
                        assert_eq!(&store.get(*id).unwrap().content, content, "{case}");
                    }
                    // A segment the store's own checkpoint named is gone: its vectors come back
                    // from the texts (R4b) before the next checkpoint.
                    store.restore_vectors().unwrap();
                    store.checkpoint().unwrap();
                    drop(store);
                    assert!(dir.join("quarantine").join(&name).exists(), "{case}");
                    let report = amberdb::verify::verify(&dir).unwrap();
                    assert_eq!(report.errors(), 0, "{case}: {:?}", report.findings);
                }
            }
        }
    }
}

/// The descriptors a store's own work takes at once (issue #54 item 2): a checkpoint, a
/// purge, a backup and an index build running together, sampled from `/proc/self/fd`. The
/// server's reserve (`64 + 2 ×` the store's files, `server/src/descriptors.rs`) must cover
/// it; this measures it beside that formula.
#[test]
fn maintenance_running_together_stays_inside_the_descriptor_reserve() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("x");
    store_of(&dir, "x");
    let store = Store::open(&dir, options()).unwrap();
    for i in 0..200 {
        let content = format!("later incident {i}: disk d{i} full on rack r{}", i * 7);
        let id = store
            .store(amberdb::StoreRequest::new(NewMemory::new(&content)))
            .unwrap()
            .memory_id;
        if i % 3 == 0 {
            store.delete(id).unwrap();
        }
    }
    store.checkpoint().unwrap();
    let files = std::fs::read_dir(&dir).unwrap().count();
    let count = || std::fs::read_dir("/proc/self/fd").map_or(0, Iterator::count);
    let base = count();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let peak = std::thread::scope(|s| {
        let sampler = s.spawn(|| {
            let mut peak = 0;
            while !stop.load(std::sync::atomic::Ordering::Acquire) {
                peak = peak.max(count());
                std::thread::yield_now();
            }
            peak
        });
        let jobs = [
            s.spawn(|| {
                for _ in 0..5 {
                    store.checkpoint().unwrap();
                }
            }),
            s.spawn(|| {
                for _ in 0..3 {
                    store.purge().unwrap();
                }
            }),
            s.spawn(|| {
                store.backup(tmp.path().join("backup")).unwrap();
            }),
            s.spawn(|| {
                let _ = store.build_index().unwrap();
            }),
        ];
        for j in jobs {
            j.join().unwrap();
        }
        stop.store(true, std::sync::atomic::Ordering::Release);
        sampler.join().unwrap()
    });
    let used = peak.saturating_sub(base);
    let reserve = 64 + 2 * files;
    eprintln!(
        "descriptors: {used} at once beyond the {base} open before ({files} store files; reserve {reserve})"
    );
    assert!(
        used <= reserve,
        "{used} descriptors beyond the reserve {reserve}"
    );
}
