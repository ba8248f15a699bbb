//! Frozen fixtures of format version 1, written once by `cargo run -p mnemo-engine --example
//! write_fixture` and never regenerated: `tests/fixtures/v1/{store,torn,corrupt}` plus
//! `expected.tsv` (id, user, tags, content of every live record).

use mnemo_engine::{EngineError, MemoryId, SearchRequest, Store, StoreOptions};
use std::path::Path;

fn copy_of(name: &str) -> tempfile::TempDir {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/v1")
        .join(name);
    let dst = tempfile::tempdir().unwrap();
    for e in
        std::fs::read_dir(&src).unwrap_or_else(|e| panic!("fixture {} missing: {e}", src.display()))
    {
        let e = e.unwrap();
        std::fs::copy(e.path(), dst.path().join(e.file_name())).unwrap();
    }
    dst
}

fn expected() -> Vec<(u64, String, String, String)> {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/v1/expected.tsv"),
    )
    .unwrap();
    text.lines()
        .map(|l| {
            let f: Vec<&str> = l.splitn(4, '\t').collect();
            (
                f[0].parse().unwrap(),
                f[1].to_owned(),
                f[2].to_owned(),
                f[3].to_owned(),
            )
        })
        .collect()
}

#[test]
fn version_1_store_opens_with_every_record() {
    let dir = copy_of("store");
    let store = Store::open(dir.path(), StoreOptions::hashing()).unwrap();
    let report = store.open_report().clone();
    assert!(report.checkpoint_seq.is_some(), "fixture has a checkpoint");
    assert!(report.replayed_frames > 0, "fixture has a log tail");
    let want = expected();
    assert_eq!(store.stats().memories, want.len());
    for (id, user, tags, content) in &want {
        let m = store.get(MemoryId(*id)).unwrap();
        assert_eq!(
            (&m.user_id, m.tags.join(","), &m.content),
            (user, tags.clone(), content)
        );
    }
    let hit = &store.search(&SearchRequest::text(&want[0].3, 1)).unwrap()[0];
    assert_eq!(hit.memory.id, MemoryId(want[0].0));
}

#[test]
fn version_1_torn_copy_opens_without_its_last_frame() {
    let dir = copy_of("torn");
    let store = Store::open(dir.path(), StoreOptions::hashing()).unwrap();
    assert!(store.open_report().truncated_tail.is_some());
    let want = expected();
    assert_eq!(
        store.stats().memories,
        want.len() - 1,
        "the torn copy loses exactly its last store"
    );
}

#[test]
fn version_1_corrupt_copy_is_reported() {
    let dir = copy_of("corrupt");
    let err = Store::open(dir.path(), StoreOptions::hashing()).unwrap_err();
    assert!(matches!(err, EngineError::Corrupted { .. }), "{err}");
}
