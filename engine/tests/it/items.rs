//! Items (`docs/semantics.md`, "Items"): a JSON value under a key, per user. Put, replace,
//! get, list, delete and search as a LangGraph store uses them; random operations against a
//! map across checkpoints and reopens; a power cut at every sync point of puts that replace.

use super::support::{Rng, crash_images, seed, small_options};
use amberdb::KernelError;
use amberdb::storage::FaultyStorage;
use amberdb::{
    EngineError, HookConfig, Item, Kind, NewMemory, SearchRequest, Store, StoreOptions,
    UpdateRequest,
};
use std::collections::BTreeMap;
use std::path::Path;

fn item(key: &str, value: &str) -> Item {
    Item {
        key: key.to_owned(),
        value: value.to_owned(),
    }
}

/// Every live item of `user`, key → (value, text), through `list_items` pages of 7.
fn listed(store: &Store, user: &str) -> BTreeMap<String, (String, String)> {
    let mut out = BTreeMap::new();
    loop {
        let page = store.list_items(Some(user), "", out.len(), 7).unwrap();
        if page.is_empty() {
            return out;
        }
        for m in page {
            let it = m.item.expect("a listed item has a key and a value");
            assert!(
                out.insert(it.key.clone(), (it.value, m.content)).is_none(),
                "key {} listed twice",
                it.key
            );
        }
    }
}

#[test]
fn items_are_put_replaced_read_listed_searched_and_deleted_by_key() {
    let dir = tempfile::tempdir().unwrap();
    // Every write hook on: none of them may touch an item.
    let options = || StoreOptions::hashing().hooks(HookConfig::default());
    let store = Store::open(dir.path(), options()).unwrap();
    let first = store
        .put_item(
            Some("prefs.alice"),
            item("food", r#"{"likes": "pizza", "n": 1}"#),
            "alice likes pizza",
        )
        .unwrap();
    assert_eq!(first.replaced, None);
    // The same text under another key is another item: no dedup, merge or fact guard.
    let twin = store
        .put_item(
            Some("prefs.alice"),
            item("food-copy", r#"{"likes": "pizza"}"#),
            "alice likes pizza",
        )
        .unwrap();
    assert_eq!(twin.outcome, amberdb::Outcome::Stored);
    assert!(twin.supersedes.is_empty());
    // A note with the same text as an item is not its duplicate either way.
    store
        .store(NewMemory::new("alice likes pizza").user("prefs.alice"))
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(2));
    let second = store
        .put_item(
            Some("prefs.alice"),
            item("food", r#"{"likes": "sushi", "n": 2}"#),
            "alice likes sushi",
        )
        .unwrap();
    assert_eq!(second.replaced, Some(first.memory_id));
    assert_eq!(
        second.created_at, first.created_at,
        "the key's creation kept"
    );
    let got = store
        .get_item(Some("prefs.alice"), "food")
        .unwrap()
        .unwrap();
    assert_eq!(
        (got.id, got.kind, got.item.as_ref().unwrap().value.as_str()),
        (
            second.memory_id,
            Kind::Item,
            r#"{"likes": "sushi", "n": 2}"#
        )
    );
    assert!(got.updated_at > got.created_at);
    assert!(matches!(
        store.get(first.memory_id),
        Err(EngineError::NotFound { .. })
    ));
    // The value is its JSON object on the wire, not a string.
    let json = serde_json::to_value(&got).unwrap();
    assert_eq!(json["key"], "food");
    assert_eq!(json["value"]["likes"], "sushi");
    // Other users do not see it; another user's key is another item.
    assert_eq!(store.get_item(Some("prefs.bob"), "food").unwrap(), None);
    store
        .put_item(Some("prefs.bob"), item("food", "{}"), "bob's food")
        .unwrap();
    // A search of items finds both of alice's, unfolded, and only items.
    let mut req = SearchRequest::new("alice likes pizza");
    req.user_id = Some("prefs.alice".into());
    req.kind = Some(Kind::Item);
    let hits = store.search(&req).unwrap();
    let keys: Vec<&str> = hits
        .results
        .iter()
        .map(|h| h.memory.item.as_ref().unwrap().key.as_str())
        .collect();
    assert_eq!(keys.len(), 2, "{keys:?}");
    assert!(keys.contains(&"food-copy") && keys.contains(&"food"));
    // Prefix listing, in key order.
    let page = store
        .list_items(Some("prefs.alice"), "food-", 0, 10)
        .unwrap();
    assert_eq!(page.len(), 1);
    assert_eq!(page[0].item.as_ref().unwrap().key, "food-copy");
    assert_eq!(
        store
            .item_users()
            .iter()
            .map(|u| (u.user_id.as_str(), u.items))
            .collect::<Vec<_>>(),
        [("prefs.alice", 2), ("prefs.bob", 1)]
    );
    // An update cannot change an item behind its key's back; a compaction leaves items be.
    let refused = store.update(UpdateRequest {
        memory_id: Some(second.memory_id),
        tags: Some(vec!["x".into()]),
        ..UpdateRequest::default()
    });
    assert!(
        matches!(refused, Err(EngineError::Invalid { field: "kind", .. })),
        "{refused:?}"
    );
    let preview = store
        .compact_preview(Some("prefs.alice"), Some(0.9))
        .unwrap();
    assert!(preview.groups.is_empty(), "{preview:?}");
    assert_eq!(listed(&store, "prefs.alice").len(), 2);
    // Bad keys and values are refused before any effect.
    let before = store.stats();
    for (bad, field) in [
        (item("", "{}"), "key"),
        (item("a\nb", "{}"), "key"),
        (item("k", "[1, 2]"), "value"),
        (item("k", "{\"a\": "), "value"),
        (item("k", "\"text\""), "value"),
    ] {
        match store.put_item(Some("prefs.alice"), bad.clone(), "text") {
            Err(EngineError::Invalid { field: f, .. }) => assert_eq!(f, field, "{bad:?}"),
            other => panic!("{bad:?}: {other:?}"),
        }
    }
    assert!(matches!(
        store.put_item(Some("prefs.alice"), item(&"k".repeat(513), "{}"), "t"),
        Err(EngineError::LimitExceeded { .. })
    ));
    let big = format!(r#"{{"a": "{}"}}"#, "x".repeat(256 * 1024));
    assert!(matches!(
        store.put_item(Some("prefs.alice"), item("k", &big), "t"),
        Err(EngineError::LimitExceeded { .. })
    ));
    assert!(matches!(
        store.store(NewMemory::new("x").kind(Kind::Item)),
        Err(EngineError::Invalid { field: "kind", .. })
    ));
    assert_eq!(store.stats().last_seq, before.last_seq, "a refusal wrote");
    // Delete by key; a missing key deletes nothing.
    assert_eq!(
        store.delete_item(Some("prefs.alice"), "food-copy").unwrap(),
        Some(twin.memory_id)
    );
    let seq = store.stats().last_seq;
    assert_eq!(
        store.delete_item(Some("prefs.alice"), "food-copy").unwrap(),
        None
    );
    assert_eq!(store.stats().last_seq, seq);
    // What a reopen (from a checkpoint, then from the log) gives back is the same.
    let want = (listed(&store, "prefs.alice"), listed(&store, "prefs.bob"));
    store.checkpoint().unwrap();
    store
        .put_item(Some("prefs.bob"), item("food", r#"{"v": 3}"#), "bob eats")
        .unwrap();
    let want_bob = listed(&store, "prefs.bob");
    drop(store);
    let store = Store::open(dir.path(), options()).unwrap();
    assert_eq!(listed(&store, "prefs.alice"), want.0);
    assert_ne!(want.1, want_bob);
    assert_eq!(listed(&store, "prefs.bob"), want_bob);
    drop(store);
    let report = amberdb::verify::verify(dir.path()).unwrap();
    assert_eq!(report.errors(), 0, "{report:?}");
}

/// The model: per user, key → (value, text).
type Model = BTreeMap<(String, String), (String, String)>;

#[test]
fn random_puts_and_deletes_match_a_map_across_checkpoints_and_reopens() {
    let seed = seed(
        "random_puts_and_deletes_match_a_map_across_checkpoints_and_reopens",
        41,
    );
    let mut rng = Rng::new(seed);
    let fs = FaultyStorage::new();
    let mut store = Store::open(Path::new("/s"), small_options(&fs, 5)).unwrap();
    let mut model = Model::new();
    let users = ["a", "a.b", "c"];
    for step in 0..400 {
        let user = users[rng.below(3) as usize];
        let key = format!("k{}", rng.below(12));
        match rng.below(10) {
            0..=5 => {
                let value = format!(r#"{{"step": {step}}}"#);
                // Texts repeat, so that a dedup that wrongly ran would merge them.
                let text = format!("text {}", rng.below(4));
                store
                    .put_item(Some(user), item(&key, &value), text.clone())
                    .unwrap();
                model.insert((user.into(), key), (value, text));
            }
            6 | 7 => {
                let gone = store.delete_item(Some(user), &key).unwrap();
                assert_eq!(
                    gone.is_some(),
                    model.remove(&(user.into(), key)).is_some(),
                    "step {step}"
                );
            }
            8 => store.checkpoint().unwrap(),
            _ => {
                drop(store);
                store = Store::open(Path::new("/s"), small_options(&fs, 5)).unwrap();
            }
        }
    }
    for user in users {
        let want: BTreeMap<String, (String, String)> = model
            .iter()
            .filter(|((u, _), _)| u == user)
            .map(|((_, k), v)| (k.clone(), v.clone()))
            .collect();
        assert_eq!(listed(&store, user), want, "user {user}, seed {seed}");
    }
    let items = store
        .stats()
        .by_kind
        .iter()
        .find(|(k, _)| *k == Kind::Item)
        .map(|(_, n)| *n);
    assert_eq!(items, Some(model.len()));
}

#[test]
fn a_put_that_replaces_leaves_the_old_item_or_the_new_after_a_power_cut_at_every_sync_point() {
    let seed = seed(
        "a_put_that_replaces_leaves_the_old_item_or_the_new_after_a_power_cut_at_every_sync_point",
        5,
    );
    let puts = 24u64;
    let run = |store: &Store| {
        // Key k{i % 3} holds value i: every put after the third replaces.
        let mut acked = BTreeMap::new();
        for i in 0..puts {
            let key = format!("k{}", i % 3);
            match store.put_item(
                None,
                item(&key, &format!(r#"{{"i": {i}}}"#)),
                format!("t{i}"),
            ) {
                Ok(_) => {
                    acked.insert(key, i);
                }
                Err(
                    EngineError::Kernel(KernelError::Poisoned)
                    | EngineError::Kernel(KernelError::Io { .. }),
                ) => return (acked, Some(i)),
                Err(e) => panic!("put {i}: {e}"),
            }
            if i % 7 == 6 && store.checkpoint().is_err() {
                return (acked, None);
            }
        }
        (acked, None)
    };
    let clean = FaultyStorage::new();
    let store = Store::open(Path::new("/s"), small_options(&clean, 4)).unwrap();
    let before = clean.syncs();
    run(&store);
    let sync_points = clean.syncs() - before;
    drop(store);
    assert!(sync_points >= puts, "{sync_points} sync points");
    let mut cuts = 0;
    for k in 1..=sync_points {
        let fs = FaultyStorage::new();
        let store = Store::open(Path::new("/s"), small_options(&fs, 4)).unwrap();
        fs.crash_at_sync(k);
        let (acked, in_flight) = run(&store);
        assert!(fs.crashed(), "sync point {k} never reached");
        drop(store);
        for image in crash_images(k ^ seed) {
            let what = format!("sync point {k}, {image:?}, seed {seed}");
            let disk = fs.crash_image(image);
            let store = Store::open(Path::new("/s"), small_options(&disk, 4))
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            let live = listed(&store, amberdb::DEFAULT_USER);
            for key in ["k0", "k1", "k2"] {
                let want = acked.get(key).copied();
                let got = live.get(key).map(|(v, _)| {
                    let v: serde_json::Value = serde_json::from_str(v).unwrap();
                    v["i"].as_u64().unwrap()
                });
                let in_flight_here = in_flight.filter(|i| format!("k{}", i % 3) == key);
                assert!(
                    got == want || (got.is_some() && got == in_flight_here),
                    "{what}: key {key} holds {got:?}, acknowledged {want:?}, in flight {in_flight_here:?}"
                );
            }
            // One live record per key: the replaced one went in the same frame.
            let items = store
                .stats()
                .by_kind
                .iter()
                .find(|(k, _)| *k == Kind::Item)
                .map_or(0, |(_, n)| *n);
            assert_eq!(items, live.len(), "{what}");
            cuts += 1;
        }
    }
    eprintln!("{sync_points} sync points, {cuts} power cuts: every key old or new, never both");
}

#[test]
fn concurrent_puts_of_the_same_keys_leave_one_live_item_per_key() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreOptions::hashing()).unwrap();
    std::thread::scope(|s| {
        for t in 0..4 {
            let store = &store;
            s.spawn(move || {
                for i in 0..50 {
                    let key = format!("k{}", i % 3);
                    let value = format!(r#"{{"thread": {t}, "i": {i}}}"#);
                    store
                        .put_item(None, item(&key, &value), format!("t{t} {i}"))
                        .unwrap();
                }
            });
        }
    });
    let live = listed(&store, amberdb::DEFAULT_USER);
    assert_eq!(live.keys().collect::<Vec<_>>(), ["k0", "k1", "k2"]);
    assert_eq!(store.stats().memories, 3, "every replaced item deleted");
}
