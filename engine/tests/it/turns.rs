//! Chat turns sent again (`docs/semantics.md`, "Chat turns sent again"): a thread passed whole
//! on every turn is stored once; ids are kept and recognised; what was skipped is said.

use amberdb::{EngineError, HeldBy, HeldTurns, Role, Store, StoreOptions, Turn};

fn fresh() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreOptions::hashing()).unwrap();
    (dir, store)
}

fn thread(n: usize, ids: bool) -> Vec<Turn> {
    (0..n)
        .map(|i| Turn {
            source_id: ids.then(|| format!("m{i}")),
            ..Turn::new(
                if i % 2 == 0 {
                    Role::User
                } else {
                    Role::Assistant
                },
                format!("turn number {i}"),
            )
        })
        .collect()
}

fn turns_of(store: &Store) -> Vec<String> {
    let mut all: Vec<String> = store
        .list_recent(Some("u"), 50)
        .unwrap()
        .into_iter()
        .map(|m| m.content)
        .collect();
    all.reverse();
    all
}

#[test]
fn a_thread_passed_whole_on_every_turn_is_stored_once() {
    for ids in [false, true] {
        let (_dir, store) = fresh();
        for n in 1..=10 {
            let added = store.add_turns(Some("u"), "t", &thread(n, ids)).unwrap();
            assert_eq!(added.memory_ids.len(), 1, "turn {n} (ids: {ids})");
            assert_eq!(added.skipped.len(), n - 1);
            let by = if ids { HeldBy::Id } else { HeldBy::Position };
            assert!(
                added
                    .skipped
                    .iter()
                    .enumerate()
                    .all(|(i, h)| h.position == i && h.by == by)
            );
        }
        let want: Vec<String> = thread(10, false).into_iter().map(|t| t.content).collect();
        assert_eq!(turns_of(&store), want, "ids: {ids}");
    }
}

#[test]
fn a_window_with_ids_stores_only_its_new_turns_and_one_without_stores_all() {
    let (_dir, store) = fresh();
    store.add_turns(Some("u"), "t", &thread(6, true)).unwrap();
    // The last three and one new, as a trimmed LangGraph state passes them.
    let window = thread(7, true)[3..].to_vec();
    let added = store.add_turns(Some("u"), "t", &window).unwrap();
    assert_eq!((added.memory_ids.len(), added.skipped.len()), (1, 3));
    // Without ids a window is not the whole thread: every turn of it is new.
    let (_dir, store) = fresh();
    store.add_turns(Some("u"), "t", &thread(6, false)).unwrap();
    let window = thread(7, false)[3..].to_vec();
    let added = store.add_turns(Some("u"), "t", &window).unwrap();
    assert_eq!((added.memory_ids.len(), added.skipped.len()), (4, 0));
}

#[test]
fn a_thread_that_differs_from_the_session_is_stored_and_skip_held_false_stores_all() {
    let (_dir, store) = fresh();
    store.add_turns(Some("u"), "t", &thread(3, false)).unwrap();
    let mut other = thread(3, false);
    other[1].content = "something else".into();
    let added = store.add_turns(Some("u"), "t", &other).unwrap();
    assert_eq!((added.memory_ids.len(), added.skipped.len()), (3, 0));
    let added = store
        .add_turns_with(Some("u"), "t", &thread(2, false), HeldTurns::Store)
        .unwrap();
    assert_eq!((added.memory_ids.len(), added.skipped.len()), (2, 0));
    assert_eq!(turns_of(&store).len(), 8);
}

#[test]
fn one_id_twice_in_one_call_is_refused_and_nothing_is_stored() {
    let (_dir, store) = fresh();
    let mut turns = thread(3, true);
    turns[2].source_id = Some("m0".into());
    let err = store.add_turns(Some("u"), "t", &turns).unwrap_err();
    assert!(
        matches!(&err, EngineError::Invalid { field: "messages", reason } if reason.contains("item 2") && reason.contains("item 0")),
        "{err}"
    );
    assert!(turns_of(&store).is_empty());
    let mut bad = thread(1, false);
    bad[0].source_id = Some("line\nbreak".into());
    assert!(store.add_turns(Some("u"), "t", &bad).is_err());
}

#[test]
fn two_callers_sending_the_same_thread_at_once_store_it_once() {
    let (_dir, store) = fresh();
    let store = std::sync::Arc::new(store);
    for n in [4, 8] {
        let workers: Vec<_> = (0..4)
            .map(|_| {
                let store = store.clone();
                std::thread::spawn(move || {
                    store.add_turns(Some("u"), "t", &thread(n, false)).unwrap()
                })
            })
            .collect();
        let stored: usize = workers
            .into_iter()
            .map(|w| w.join().unwrap().memory_ids.len())
            .sum();
        // Each round adds four turns to the session, whoever stores them.
        assert_eq!(stored, 4, "thread of {n}");
        assert_eq!(turns_of(&store).len(), n);
    }
}

/// A power cut at every sync point of a thread sent whole on every turn (with ids), with
/// checkpoints between: after each, every acknowledged turn is there with its id, and the
/// thread sent again stores only what was never acknowledged.
#[test]
fn every_sync_point_of_a_resent_thread_survives_a_power_cut() {
    use super::support::{crash_images, small_options};
    use amberdb::storage::FaultyStorage;
    use std::path::Path;

    let full = thread(12, true);
    let run = |store: &Store| -> usize {
        let mut acked = 0;
        for n in 1..=full.len() {
            match store.add_turns(Some("u"), "t", &full[..n]) {
                Ok(_) => acked = n, // the first n turns are held
                Err(_) => return acked,
            }
            if n % 4 == 0 && store.checkpoint().is_err() {
                return acked;
            }
        }
        acked
    };
    let clean = FaultyStorage::new();
    let store = Store::open(Path::new("/s"), small_options(&clean, 3)).unwrap();
    let before = clean.syncs();
    assert_eq!(run(&store), full.len());
    let points = clean.syncs() - before;
    drop(store);
    assert!(points > 12, "{points} sync points");
    let mut cuts = 0;
    for k in 1..=points {
        let fs = FaultyStorage::new();
        let store = Store::open(Path::new("/s"), small_options(&fs, 3)).unwrap();
        fs.crash_at_sync(k);
        let acked = run(&store);
        drop(store);
        for image in crash_images(k) {
            let disk = fs.crash_image(image);
            let store = Store::open(Path::new("/s"), small_options(&disk, 3)).unwrap();
            let held = turns_of(&store);
            assert!(held.len() >= acked, "sync point {k}, {image:?}: {held:?}");
            let want: Vec<String> = full[..held.len()]
                .iter()
                .map(|t| t.content.clone())
                .collect();
            assert_eq!(held, want, "sync point {k}, {image:?}: a prefix, in order");
            let added = store.add_turns(Some("u"), "t", &full).unwrap();
            assert_eq!(added.skipped.len(), held.len(), "sync point {k}, {image:?}");
            assert!(added.skipped.iter().all(|h| h.by == HeldBy::Id));
            assert_eq!(turns_of(&store).len(), full.len());
            cuts += 1;
        }
    }
    eprintln!(
        "{points} sync points x 3 crash images = {cuts} power cuts, 0 acknowledged turns lost"
    );
}
