//! Listing against a model (`docs/semantics.md`, "Listing"): random records (kinds,
//! categories, tags, sessions, validity in the past, present or future, some archived by an
//! update) listed with random filters give what a plain filter over a `Vec` of the same records
//! gives, newest first, page after page.

use amberdb::{
    Category, EntityKind, HookOverrides, Kind, ListFilter, MemoryId, NewMemory, Role, Shelf, Store,
    StoreOptions, StoreRequest, Timestamp, UpdateRequest, WriteHook,
};
use proptest::prelude::*;

const TAGS: [&str; 3] = ["rust", "db", "ops"];
const SESSIONS: [&str; 2] = ["s1", "s2"];
const CATEGORIES: [Category; 3] = [Category::BugFix, Category::Learning, Category::Other];

#[derive(Debug, Clone)]
struct Spec {
    message: bool,
    category: usize,
    tag: Option<usize>,
    session: Option<usize>,
    /// 0: from now, open; 1: ended in the past; 2: begins in the future.
    validity: u8,
    user: bool,
    /// Updated afterwards: the original is archived, its successor live.
    updated: bool,
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        any::<bool>(),
        0..CATEGORIES.len(),
        proptest::option::of(0..TAGS.len()),
        proptest::option::of(0..SESSIONS.len()),
        0u8..3,
        any::<bool>(),
        prop::bool::weighted(0.2),
    )
        .prop_map(
            |(message, category, tag, session, validity, user, updated)| Spec {
                message,
                category,
                tag,
                // A message belongs to a session.
                session: if message {
                    session.or(Some(0))
                } else {
                    session
                },
                validity,
                user,
                updated,
            },
        )
}

fn filter() -> impl Strategy<Value = ListFilter> {
    (
        proptest::option::of(any::<bool>()),
        proptest::option::of(0..CATEGORIES.len()),
        proptest::option::of(0..TAGS.len()),
        proptest::option::of(0..SESSIONS.len()),
        proptest::option::of(any::<bool>()),
        0u8..3,
    )
        .prop_map(
            |(message, category, tag, session, valid_now, shelf)| ListFilter {
                kind: message.map(|m| if m { Kind::Message } else { Kind::Memory }),
                category: category.map(|c| CATEGORIES[c]),
                // Tags match as stored tags do: canonicalized.
                tags: tag
                    .map(|t| vec![TAGS[t].to_uppercase()])
                    .unwrap_or_default(),
                session_id: session.map(|s| SESSIONS[s].to_owned()),
                valid_now,
                shelf: [Shelf::Live, Shelf::Archived, Shelf::All][shelf as usize],
            },
        )
}

fn at(d: &str) -> Timestamp {
    Timestamp::parse_rfc3339(d).unwrap()
}

fn store_all(store: &Store, specs: &[Spec]) {
    for user in ["ann", "bob"] {
        store
            .create_entity(EntityKind::User, None, user, None, None)
            .unwrap();
        for session in SESSIONS {
            store
                .create_entity(EntityKind::Session, Some(user), session, None, None)
                .unwrap();
        }
    }
    for (n, s) in specs.iter().enumerate() {
        let mut m = NewMemory::new(format!("record {n} about {}", TAGS[n % 3]))
            .user(if s.user { "ann" } else { "bob" })
            .category(CATEGORIES[s.category])
            .tags(s.tag.map(|t| TAGS[t]));
        if s.message {
            m = m.kind(Kind::Message);
            m.role = Some(Role::User);
        }
        if let Some(x) = s.session {
            m = m.session(SESSIONS[x]);
        }
        m = match s.validity {
            1 => m.valid_from(at("2020-01-01")).valid_to(at("2021-01-01")),
            2 => m.valid_from(at("2999-01-01")),
            _ => m,
        };
        let hooks = HookOverrides {
            skip: vec![
                WriteHook::SemanticDedup,
                WriteHook::ExactDedup,
                WriteHook::Tags,
                WriteHook::Category,
            ],
            ..HookOverrides::default()
        };
        let id = store
            .store(StoreRequest {
                vector: None,
                memory: m,
                hooks: hooks.clone(),
            })
            .unwrap()
            .memory_id;
        if s.updated {
            store
                .update(UpdateRequest {
                    memory_id: Some(id),
                    content: Some(format!("record {n}, edited")),
                    hooks,
                    ..UpdateRequest::default()
                })
                .unwrap();
        }
    }
}

fn check(store: &Store, f: &ListFilter) -> Result<(), TestCaseError> {
    // Every record of ann, live and archived, unfiltered: what the model filters.
    let everything = ListFilter {
        shelf: Shelf::All,
        ..ListFilter::default()
    };
    let (all, total) = store.list_page(Some("ann"), &everything, 0, 50).unwrap();
    prop_assert_eq!(all.len(), total);
    let now = Timestamp::now();
    let tags: Vec<String> = f.tags.iter().map(|t| t.to_lowercase()).collect();
    let expected: Vec<MemoryId> = all
        .iter()
        .filter(|l| match f.shelf {
            Shelf::Live => !l.archived,
            Shelf::Archived => l.archived,
            Shelf::All => true,
        })
        .map(|l| &l.memory)
        .filter(|m| f.kind.is_none_or(|k| m.kind == k))
        .filter(|m| f.category.is_none_or(|c| m.category == c))
        .filter(|m| tags.is_empty() || m.tags.iter().any(|t| tags.contains(t)))
        .filter(|m| {
            f.session_id
                .as_ref()
                .is_none_or(|s| m.session_id.as_ref() == Some(s))
        })
        .filter(|m| f.valid_now.is_none_or(|v| m.valid_at(now) == v))
        .map(|m| m.id)
        .collect();
    // Paged by 3: each record once, in order, and `total` is what passes.
    let mut got = Vec::new();
    loop {
        let (page, total) = store.list_page(Some("ann"), f, got.len(), 3).unwrap();
        prop_assert_eq!(total, expected.len());
        if page.is_empty() {
            break;
        }
        prop_assert!(page.iter().all(|l| l.memory.user_id == "ann"));
        got.extend(page.iter().map(|l| l.memory.id));
    }
    prop_assert_eq!(got, expected);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn listing_filters_match_a_vec(
        specs in proptest::collection::vec(spec(), 1..30),
        filters in proptest::collection::vec(filter(), 1..12),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), StoreOptions::hashing()).unwrap();
        store_all(&store, &specs);
        for f in &filters {
            check(&store, f)?;
        }
        // The order is newest first: created, then id.
        let all = ListFilter { shelf: Shelf::All, ..ListFilter::default() };
        let (page, _) = store.list_page(Some("ann"), &all, 0, 50).unwrap();
        prop_assert!(page.windows(2).all(|w| (w[0].memory.created_at, w[0].memory.id) >= (w[1].memory.created_at, w[1].memory.id)));
    }
}

#[test]
fn an_archived_record_is_listed_only_when_asked_for_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreOptions::hashing()).unwrap();
    let old = store
        .store(NewMemory::new("the build uses make").user("ann"))
        .unwrap()
        .memory_id;
    let new = store
        .update(UpdateRequest {
            memory_id: Some(old),
            content: Some("the build uses cargo".into()),
            ..UpdateRequest::default()
        })
        .unwrap()
        .memory_id;
    let list = |shelf| {
        let f = ListFilter {
            shelf,
            ..ListFilter::default()
        };
        let (page, _) = store.list_page(Some("ann"), &f, 0, 10).unwrap();
        page.iter()
            .map(|l| (l.memory.id, l.archived))
            .collect::<Vec<_>>()
    };
    assert_eq!(list(Shelf::Live), [(new, false)]);
    assert_eq!(list(Shelf::Archived), [(old, true)]);
    assert_eq!(list(Shelf::All).len(), 2);
    // The seed's shape for a live record: nothing new in its JSON.
    let (live, _) = store
        .list_page(Some("ann"), &ListFilter::default(), 0, 10)
        .unwrap();
    let json = serde_json::to_value(&live[0]).unwrap();
    assert!(json.get("archived").is_none(), "{json}");
    let f = ListFilter {
        shelf: Shelf::Archived,
        ..ListFilter::default()
    };
    let (archived, _) = store.list_page(Some("ann"), &f, 0, 10).unwrap();
    assert_eq!(
        serde_json::to_value(&archived[0]).unwrap()["archived"],
        true
    );
    assert!(Shelf::parse("both").is_err());
    assert!(
        store
            .list_page(Some("ann"), &ListFilter::default(), 0, 0)
            .is_err(),
        "limit 0 refused"
    );
}
