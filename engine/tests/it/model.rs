//! Model-based test: random sequences of store / delete / search / reopen / checkpoint against
//! a `Vec` and brute-force search give identical answers.

use super::support::small_options;
use amberdb::storage::FaultyStorage;
use amberdb::{Category, EngineError, MemoryId, NewMemory, SearchRequest, Store};
use proptest::prelude::*;
use std::path::Path;

const USERS: [&str; 2] = ["alice", "bob"];
const TAGS: [&str; 3] = ["rust", "db", "ops"];

#[derive(Debug, Clone)]
enum Step {
    Store {
        text: u8,
        user: usize,
        category: usize,
        tag: usize,
        vector: Vec<f32>,
    },
    Delete {
        pick: usize,
    },
    Search {
        vector: Vec<f32>,
        k: usize,
        user: usize,
        by_category: Option<usize>,
        by_tag: Option<usize>,
    },
    Reopen,
    Checkpoint,
}

#[derive(Debug, Clone)]
struct Row {
    id: MemoryId,
    user: usize,
    content: String,
    category: Category,
    tag: String,
    vector: Vec<f32>,
}

fn vector() -> impl Strategy<Value = Vec<f32>> {
    proptest::collection::vec(-1.0f32..1.0, 8)
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (0u8..40, 0..2usize, 0..9usize, 0..3usize, vector()).prop_map(|(text, user, category, tag, vector)| Step::Store { text, user, category, tag, vector }),
        2 => (0..64usize).prop_map(|pick| Step::Delete { pick }),
        3 => (vector(), 1..12usize, 0..2usize, proptest::option::of(0..9usize), proptest::option::of(0..3usize))
            .prop_map(|(vector, k, user, by_category, by_tag)| Step::Search { vector, k, user, by_category, by_tag }),
        1 => Just(Step::Reopen),
        1 => Just(Step::Checkpoint),
    ]
}

fn brute_force(
    rows: &[Row],
    q: &[f32],
    k: usize,
    user: usize,
    category: Option<Category>,
    tag: Option<&str>,
) -> Vec<(MemoryId, f32)> {
    let mut scored: Vec<(MemoryId, f32)> = rows
        .iter()
        .filter(|r| {
            r.user == user
                && category.is_none_or(|c| r.category == c)
                && tag.is_none_or(|t| r.tag == t)
        })
        .map(|r| (r.id, amberdb_index::kernels::dot(q, &r.vector).unwrap()))
        .collect();
    scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    scored.truncate(k);
    scored
}

fn run(steps: Vec<Step>) -> Result<(), TestCaseError> {
    let fs = FaultyStorage::new();
    let dir = Path::new("/store");
    let open = || Store::open(dir, small_options(&fs, 4));
    let mut store = open().unwrap();
    let mut rows: Vec<Row> = Vec::new();
    let mut users_seen = [false; USERS.len()];
    for step in steps {
        match step {
            Step::Store {
                text,
                user,
                category,
                tag,
                vector,
            } => {
                let content = format!("note {text}");
                let category = Category::ALL[category];
                let m = NewMemory::new(&content)
                    .user(USERS[user])
                    .category(category)
                    .tags([TAGS[tag]]);
                let existing = rows
                    .iter()
                    .find(|r| r.user == user && r.content == content)
                    .map(|r| r.id);
                match (
                    store.store(amberdb::StoreRequest::new(m).with_vector(vector.clone())),
                    existing,
                ) {
                    (Ok(stored), Some(want)) if stored.outcome == amberdb::Outcome::Duplicate => {
                        prop_assert_eq!(stored.memory_id, want)
                    }
                    (Ok(stored), None) => {
                        let id = stored.memory_id;
                        prop_assert!(rows.iter().all(|r| r.id < id), "ids must grow");
                        users_seen[user] = true;
                        rows.push(Row {
                            id,
                            user,
                            content,
                            category,
                            tag: TAGS[tag].into(),
                            vector,
                        });
                    }
                    (got, want) => prop_assert!(
                        false,
                        "store: got {:?}, model says existing {:?}",
                        got,
                        want
                    ),
                }
            }
            Step::Delete { pick } => {
                if rows.is_empty() {
                    let missing = matches!(
                        store.delete(MemoryId(9999)),
                        Err(EngineError::NotFound { .. })
                    );
                    prop_assert!(missing, "delete of a missing id");
                } else {
                    let row = rows.remove(pick % rows.len());
                    store.delete(row.id).unwrap();
                    let gone = matches!(store.get(row.id), Err(EngineError::NotFound { .. }));
                    prop_assert!(gone, "deleted record still readable");
                }
            }
            Step::Search {
                vector,
                k,
                user,
                by_category,
                by_tag,
            } => {
                let category = by_category.map(|c| Category::ALL[c]);
                let tag = by_tag.map(|t| TAGS[t]);
                let request = SearchRequest {
                    category,
                    tags: tag.iter().map(|t| (*t).to_string()).collect(),
                    ..SearchRequest::by_vector(vector.clone())
                        .user(USERS[user])
                        .limit(k)
                        .without_hooks()
                };
                let got: Vec<(MemoryId, f32)> = match store.search(&request) {
                    Ok(hits) => hits
                        .results
                        .iter()
                        .map(|h| (h.memory.id, h.score))
                        .collect(),
                    // A user exists from its first memory on; before it, a search names it.
                    Err(EngineError::EntityNotFound {
                        field: "user_id", ..
                    }) if !users_seen[user] => Vec::new(),
                    Err(e) => return Err(TestCaseError::fail(format!("search: {e}"))),
                };
                prop_assert_eq!(got, brute_force(&rows, &vector, k, user, category, tag));
            }
            Step::Reopen => {
                drop(store);
                store = open().unwrap();
            }
            Step::Checkpoint => store.checkpoint().unwrap(),
        }
        let stats = store.stats();
        prop_assert_eq!(stats.memories, rows.len());
        // STATS counts from the member sets; the model counts its rows.
        for (category, count) in &stats.by_category {
            prop_assert_eq!(
                *count,
                rows.iter().filter(|r| r.category == *category).count()
            );
        }
    }
    for r in &rows {
        let m = store.get(r.id).unwrap();
        prop_assert_eq!(&m.content, &r.content);
        prop_assert_eq!(store.vector(r.id).unwrap(), r.vector.clone());
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn store_matches_a_vec_and_brute_force(steps in proptest::collection::vec(step(), 1..80)) {
        run(steps)?;
    }
}
