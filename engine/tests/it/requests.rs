//! Request ids (`docs/semantics.md`, "Retries and request ids"): a retry inside the window is
//! answered with the first attempt's reply, across reopens and checkpoints, and is never
//! applied twice; a power cut at every sync point leaves the write and its mark together.

use super::support::{crash_images, seed, small_options};
use amberdb::storage::FaultyStorage;
use amberdb::{
    Begun, EngineError, EntityKind, NewMemory, REQUEST_WINDOW_MICROS, RequestId, Store,
    StoreOptions, Timestamp,
};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

/// A store handle's run of one request: its reply, or how a retry was answered.
fn store_once(
    store: &Store,
    id: RequestId,
    fingerprint: u64,
    text: &str,
) -> Result<String, EngineError> {
    match store.begin_request(id, fingerprint)? {
        Begun::Run(run) => {
            let stored = run.store().store(NewMemory::new(text))?;
            let reply = format!("stored {}", stored.memory_id.0);
            run.finish(reply.clone())?;
            Ok(reply)
        }
        Begun::Answered(reply) => Ok(format!("again: {reply}")),
        Begun::AppliedUnanswered { seq } => Ok(format!("applied at {seq}")),
        Begun::Running => Ok("running".into()),
    }
}

#[test]
fn a_retry_is_answered_with_the_first_reply_across_reopens_and_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let now = Timestamp::now();
    let a = RequestId::new(now).unwrap();
    let b = RequestId::new(now).unwrap();
    {
        let store = Store::open(dir.path(), StoreOptions::hashing()).unwrap();
        let first = store_once(&store, a, 1, "the deploy key rotates monthly").unwrap();
        assert!(first.starts_with("stored "), "{first}");
        assert_eq!(
            store_once(&store, a, 1, "the deploy key rotates monthly").unwrap(),
            format!("again: {first}")
        );
        assert_eq!(store.stats().memories, 1, "applied once");
        // The same id for another request is refused, and changes nothing.
        let e = store_once(&store, a, 2, "something else").unwrap_err();
        assert!(e.to_string().contains("another request"), "{e}");
        assert_eq!(store.stats().memories, 1);
        store_once(&store, b, 1, "the staging database is in eu-west-1").unwrap();
        assert_eq!(store.stats().request_ids_held, 2);
    }
    // After a reopen the log holds the table; after a checkpoint (and another reopen) the
    // checkpoint does.
    for checkpoint in [false, true] {
        let store = Store::open(dir.path(), StoreOptions::hashing()).unwrap();
        let again = store_once(&store, a, 1, "the deploy key rotates monthly").unwrap();
        assert!(again.starts_with("again: stored "), "{again}");
        assert_eq!(store.stats().memories, 2, "nothing applied twice");
        assert_eq!(store.stats().request_ids_held, 2);
        if checkpoint {
            store.checkpoint().unwrap();
        }
    }
    let store = Store::open(dir.path(), StoreOptions::hashing()).unwrap();
    assert!(
        store.open_report().replayed_frames == 0,
        "{:?}",
        store.open_report()
    );
    assert!(
        store_once(&store, b, 1, "the staging database is in eu-west-1")
            .unwrap()
            .starts_with("again: ")
    );
    assert_eq!(store.stats().memories, 2);
}

#[test]
fn ids_past_the_window_are_refused_and_old_ids_are_forgotten() {
    let dir = tempfile::tempdir().unwrap();
    let clock_at = Arc::new(AtomicI64::new(Timestamp::now().0));
    let clock = {
        let c = Arc::clone(&clock_at);
        Arc::new(move || Timestamp(c.load(Ordering::SeqCst)))
    };
    let store = Store::open(dir.path(), StoreOptions::hashing().clock(clock)).unwrap();
    let made = Timestamp(clock_at.load(Ordering::SeqCst));
    let a = RequestId::new(made).unwrap();
    store_once(&store, a, 1, "one").unwrap();
    // Inside the window: answered.
    clock_at.fetch_add(REQUEST_WINDOW_MICROS - 1_000_000, Ordering::SeqCst);
    assert!(
        store_once(&store, a, 1, "one")
            .unwrap()
            .starts_with("again: ")
    );
    // Past it: refused, never applied again.
    clock_at.fetch_add(2_000_000, Ordering::SeqCst);
    let e = store_once(&store, a, 1, "one").unwrap_err();
    assert!(e.to_string().contains("remembered for 600 s"), "{e}");
    assert_eq!(store.stats().memories, 1);
    // An id made too far ahead of the store's clock is refused too.
    let ahead = RequestId::new(Timestamp(
        clock_at.load(Ordering::SeqCst) + 2 * REQUEST_WINDOW_MICROS,
    ))
    .unwrap();
    assert!(store_once(&store, ahead, 1, "two").is_err());
    // Two windows on, the next request's mark forgets the first.
    clock_at.fetch_add(2 * REQUEST_WINDOW_MICROS, Ordering::SeqCst);
    let b = RequestId::new(Timestamp(clock_at.load(Ordering::SeqCst))).unwrap();
    store_once(&store, b, 1, "two").unwrap();
    assert_eq!(store.stats().request_ids_held, 1);
}

#[test]
fn an_attempt_that_runs_is_running_to_its_retry_and_one_that_stopped_unanswered_says_where() {
    let dir = tempfile::tempdir().unwrap();
    let a = RequestId::new(Timestamp::now()).unwrap();
    {
        let store = Store::open(dir.path(), StoreOptions::hashing()).unwrap();
        let Begun::Run(run) = store.begin_request(a, 9).unwrap() else {
            panic!("a new id runs");
        };
        assert!(matches!(store.begin_request(a, 9).unwrap(), Begun::Running));
        run.store().store(NewMemory::new("half done")).unwrap();
        assert!(matches!(store.begin_request(a, 9).unwrap(), Begun::Running));
        // The process stops before the reply is kept: the run is dropped unfinished.
        drop(run);
        assert!(matches!(
            store.begin_request(a, 9).unwrap(),
            Begun::AppliedUnanswered { .. }
        ));
    }
    let store = Store::open(dir.path(), StoreOptions::hashing()).unwrap();
    let Begun::AppliedUnanswered { seq } = store.begin_request(a, 9).unwrap() else {
        panic!("the mark survived the reopen");
    };
    assert!(seq >= 1);
    assert_eq!(store.stats().memories, 1, "never applied twice");
}

#[test]
fn a_request_that_changed_nothing_keeps_nothing_and_a_deletion_carries_its_mark() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreOptions::hashing()).unwrap();
    let now = Timestamp::now();
    // A failed write changes nothing and keeps nothing: a retry runs again.
    let a = RequestId::new(now).unwrap();
    let Begun::Run(run) = store.begin_request(a, 1).unwrap() else {
        panic!()
    };
    assert!(run.store().delete(amberdb::MemoryId(12_345)).is_err());
    run.finish("not found".into()).unwrap();
    assert!(matches!(store.begin_request(a, 1).unwrap(), Begun::Run(_)));
    assert_eq!(store.stats().request_ids_held, 0);
    // A user's deletion (a frame nothing may follow but the mark) carries it.
    let mut note = NewMemory::new("alice's note");
    note.user_id = Some("alice".into());
    store.store(note).unwrap();
    let b = RequestId::new(now).unwrap();
    let Begun::Run(run) = store.begin_request(b, 1).unwrap() else {
        panic!()
    };
    run.store()
        .delete_entity(EntityKind::User, None, "alice")
        .unwrap();
    run.finish("deleted".into()).unwrap();
    assert!(matches!(store.begin_request(b, 1).unwrap(), Begun::Answered(r) if r == "deleted"));
}

#[test]
fn a_power_cut_at_every_sync_point_leaves_a_write_with_its_mark_or_neither() {
    let seed = seed(
        "a_power_cut_at_every_sync_point_leaves_a_write_with_its_mark_or_neither",
        3,
    );
    let now = Timestamp::now();
    let ids: Vec<RequestId> = (0..12).map(|_| RequestId::new(now).unwrap()).collect();
    let run = |store: &Store| {
        let mut acked = Vec::new();
        for (i, id) in ids.iter().enumerate() {
            match store_once(store, *id, i as u64, &format!("fact number {i}")) {
                Ok(_) => acked.push(i),
                Err(_) => return acked,
            }
            if i % 5 == 4 && store.checkpoint().is_err() {
                return acked;
            }
        }
        acked
    };
    let clean = FaultyStorage::new();
    let store = Store::open(Path::new("/s"), small_options(&clean, 4)).unwrap();
    let before = clean.syncs();
    run(&store);
    let sync_points = clean.syncs() - before;
    drop(store);
    let mut cuts = 0;
    for k in 1..=sync_points {
        let fs = FaultyStorage::new();
        let store = Store::open(Path::new("/s"), small_options(&fs, 4)).unwrap();
        fs.crash_at_sync(k);
        let acked = run(&store);
        drop(store);
        for image in crash_images(k ^ seed) {
            let what = format!("sync point {k}, {image:?}, seed {seed}");
            let store = Store::open(Path::new("/s"), small_options(&fs.crash_image(image), 4))
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            for (i, id) in ids.iter().enumerate() {
                let text = format!("fact number {i}");
                let held = store
                    .list_recent(None, 50)
                    .unwrap()
                    .iter()
                    .any(|m| m.content == text);
                let begun = store.begin_request(*id, i as u64).unwrap();
                let marked = !matches!(begun, Begun::Run(_));
                assert_eq!(
                    held, marked,
                    "{what}: request {i}: memory held {held}, marked {marked}"
                );
                if acked.contains(&i) {
                    assert!(
                        matches!(begun, Begun::Answered(_)),
                        "{what}: acknowledged request {i} not answered: {begun:?}"
                    );
                }
            }
            cuts += 1;
        }
    }
    eprintln!(
        "{sync_points} sync points, {cuts} power cuts: every write with its mark or neither, every acknowledged one answered"
    );
}

#[test]
fn a_retry_is_not_answered_before_its_first_attempt_is_durable() {
    let fs = FaultyStorage::new();
    let store = Store::open(Path::new("/s"), small_options(&fs, 4)).unwrap();
    let a = RequestId::new(Timestamp::now()).unwrap();
    // The first attempt runs in a batch: appended and applied, its fsync still to come.
    let ((), pending) = store.deferred_batch(|batch| {
        let Begun::Run(run) = batch.begin_request(a, 1).unwrap() else {
            panic!("a new id runs");
        };
        run.store()
            .store(NewMemory::new("the NAS backs up at two"))
            .unwrap();
        run.finish("stored".into()).unwrap();
        // The fsync that would make it durable fails: a retry on another handle meanwhile
        // must not report it.
        fs.crash_at_sync(1);
        let retry = store.begin_request(a, 1);
        assert!(
            retry.is_err(),
            "a retry reported a write that was not durable: {retry:?}"
        );
    });
    assert!(pending.wait().is_err(), "the batch's fsync failed too");
}
