//! Export and import (`docs/semantics.md`, "Export and import"): every record out, live and
//! archived, and back with its id, lineage, validity and history; renumbered with lineage
//! rewritten in a store that gave the ids out; nothing stored twice.

use amberdb::{
    ExportedRecord, MemoryId, NewMemory, Role, Store, StoreOptions, Timestamp, UpdateRequest,
};

fn fresh() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreOptions::hashing()).unwrap();
    (dir, store)
}

/// A store with a note updated twice (three versions), a deleted note, chat turns with ids,
/// an item and a timed fact.
fn sample(store: &Store) -> MemoryId {
    let first = store
        .store(NewMemory::new("the deploy script lives in ops/deploy.sh").user("ada"))
        .unwrap()
        .memory_id;
    let gone = store
        .store(NewMemory::new("a note that is deleted").user("ada"))
        .unwrap()
        .memory_id;
    store.delete(gone).unwrap();
    let mut id = first;
    for text in [
        "the deploy script lives in tools/deploy.sh",
        "the deploy script lives in scripts/deploy.sh",
    ] {
        id = store
            .update(UpdateRequest {
                memory_id: Some(id),
                content: Some(text.into()),
                ..UpdateRequest::default()
            })
            .unwrap()
            .memory_id;
    }
    let turns = [
        amberdb::Turn {
            source_id: Some("m1".into()),
            ..amberdb::Turn::new(Role::User, "hello")
        },
        amberdb::Turn::new(Role::Assistant, "hi ada"),
    ];
    store.add_turns(Some("ada"), "chat", &turns).unwrap();
    let item = amberdb::Item {
        key: "prefs".into(),
        value: r#"{"theme": "dark"}"#.into(),
    };
    store
        .put_item(Some("ada"), item, "theme preference")
        .unwrap();
    let day = Timestamp::parse_rfc3339("2024-05-01").unwrap();
    store
        .store(
            NewMemory::new("ada lived in Lisbon")
                .user("ada")
                .valid_from(day),
        )
        .unwrap();
    id
}

fn by_id(records: &[ExportedRecord]) -> Vec<(u64, bool, String, Vec<MemoryId>)> {
    records
        .iter()
        .map(|r| {
            (
                r.memory.id.0,
                r.archived,
                r.memory.content.clone(),
                r.memory.supersedes.clone(),
            )
        })
        .collect()
}

#[test]
fn an_export_imported_into_a_new_store_is_the_same_store_ids_and_history_included() {
    let (_a, a) = fresh();
    let live = sample(&a);
    let out = a.export_all().unwrap();
    assert_eq!(
        out.records.iter().filter(|r| r.archived).count(),
        2,
        "two older versions"
    );
    let (_b, b) = fresh();
    let done = b.import_all(out.records.clone()).unwrap();
    assert!(done.ids_kept && done.renumbered.is_empty(), "{done:?}");
    let back = b.export_all().unwrap();
    assert_eq!(by_id(&back.records), by_id(&out.records));
    for (x, y) in out.records.iter().zip(&back.records) {
        assert_eq!(
            x.memory, y.memory,
            "every field, times and source id included"
        );
    }
    assert_eq!(b.history(live).unwrap().count, 3);
    assert_eq!(
        b.history(live).unwrap().versions.len(),
        a.history(live).unwrap().versions.len()
    );
    assert_eq!(
        b.lineage(live).unwrap().len(),
        a.lineage(live).unwrap().len()
    );
    // The deleted id stays given out: a new record does not take it.
    let next = b
        .store(NewMemory::new("a new note").user("ada"))
        .unwrap()
        .memory_id;
    assert!(next >= out.next_id, "{next} < {}", out.next_id);
    // Run again: nothing added.
    let again = b.import_all(out.records).unwrap();
    assert_eq!((again.stored, again.archived), (0, 0));
    // A turn sent again by id is still known.
    let resent = b
        .add_turns(
            Some("ada"),
            "chat",
            &[amberdb::Turn {
                source_id: Some("m1".into()),
                ..amberdb::Turn::new(Role::User, "hello")
            }],
        )
        .unwrap();
    assert!(resent.memory_ids.is_empty());
}

#[test]
fn an_import_into_a_store_that_gave_the_ids_out_renumbers_and_rewrites_lineage() {
    let (_a, a) = fresh();
    let live = sample(&a);
    let out = a.export_all().unwrap();
    let (_c, c) = fresh();
    for i in 0..5 {
        c.store(NewMemory::new(format!("already here {i}")).user("bob"))
            .unwrap();
    }
    let done = c.import_all(out.records.clone()).unwrap();
    assert!(!done.ids_kept, "{done:?}");
    assert_eq!(done.stored + done.archived, out.records.len());
    let here = done
        .renumbered
        .iter()
        .find(|(from, _)| *from == live)
        .map(|(_, to)| *to)
        .unwrap();
    let history = c.history(here).unwrap();
    assert_eq!(history.count, 3, "lineage followed through the new ids");
    let lineage: Vec<String> = c
        .lineage(here)
        .unwrap()
        .into_iter()
        .map(|m| m.content)
        .collect();
    assert!(
        lineage.iter().any(|t| t.contains("tools/deploy.sh")),
        "{lineage:?}"
    );
    assert_eq!(
        c.import_all(out.records).unwrap().stored,
        0,
        "run again: nothing added"
    );
}

#[test]
fn a_bad_record_is_refused_naming_it_and_nothing_is_written() {
    let (_a, a) = fresh();
    sample(&a);
    let mut records = a.export_all().unwrap().records;
    records[3].memory.content = String::new();
    let (_b, b) = fresh();
    let err = b.import_all(records.clone()).unwrap_err();
    assert!(err.to_string().contains("item 3"), "{err}");
    records[3].memory.content = "fine".into();
    records[4].memory.id = records[2].memory.id;
    let err = b.import_all(records).unwrap_err();
    assert!(err.to_string().contains("given twice"), "{err}");
    assert!(b.export_all().unwrap().records.is_empty());
}

#[test]
fn an_imported_item_replaces_the_live_item_of_its_key_as_a_put_does() {
    let (_a, a) = fresh();
    sample(&a);
    let out = a.export_all().unwrap();
    let (_c, c) = fresh();
    let mine = amberdb::Item {
        key: "prefs".into(),
        value: r#"{"theme": "light"}"#.into(),
    };
    c.put_item(Some("ada"), mine, "my theme").unwrap();
    let done = c.import_all(out.records).unwrap();
    assert_eq!(done.items_replaced, 1);
    let item = c.get_item(Some("ada"), "prefs").unwrap().unwrap();
    assert_eq!(item.item.unwrap().value, r#"{"theme": "dark"}"#);
    assert_eq!(
        c.list_items(Some("ada"), "", 0, 10).unwrap().len(),
        1,
        "one live item per key"
    );
}
