//! The labelled sets of `docs/search.md` ("Calibration"), run through a MiniLM store with the
//! default hooks, as a user switching to us would: statements of many relations, later
//! corrections (some in other words), restatements of the same fact, many-valued relations
//! that must not be replaced, and pairs that differ only in subject or relation. Reports the
//! write-time precision and recall of "update" and "merge" decisions, merges or updates across
//! slots, the share of questions whose top-1 default result holds the newest value (now and
//! `as_of` an earlier moment, per mode), how many results a default search returns, the
//! pair-level dedup F1 against a bare cosine threshold, and the `frequency` strategy before and
//! after 2,000 searches.
//!
//! Usage: `cargo run --release -p amberdb-benches --bin semantics_eval [SUBJECTS]` (at most
//! 50 people and 16 projects; needs the model: `amberdb model fetch`). Seeded (`AMBERDB_SEED`, printed).

#![expect(clippy::print_stdout, reason = "an evaluation tool reports on stdout")]
#![expect(
    clippy::cast_precision_loss,
    clippy::indexing_slicing,
    reason = "an evaluation tool: counts into ratios, indexes it built itself"
)]

use amberdb::{
    MemoryId, Mode, NewMemory, Outcome, Relation, SearchRequest, Store, StoreOptions, StoreRequest,
    Strategy, Timestamp,
};
use amberdb_index::synthetic::{SeededRng, seed_from_env};
use std::collections::HashMap;

const PEOPLE: &[&str] = &[
    "Alice", "Bruno", "Chiara", "Dmitri", "Elena", "Farid", "Greta", "Hiro", "Ines", "Jonas",
    "Keiko", "Lars", "Maya", "Nikolai", "Olga", "Pablo", "Quinn", "Rosa", "Sven", "Tariq", "Uma",
    "Viktor", "Wanda", "Xavier", "Yara", "Zoltan", "Amara", "Bilal", "Camille", "Diego", "Esther",
    "Felix", "Gianna", "Hassan", "Isla", "Jasper", "Kira", "Lucas", "Mirela", "Noah", "Oskar",
    "Priya", "Rafael", "Sofia", "Tomas", "Ulla", "Vera", "Wim", "Yusuf", "Zara",
];
const CITIES: &[&str] = &[
    "Lisbon", "Berlin", "Paris", "Madrid", "Oslo", "Vienna", "Prague", "Dublin", "Warsaw",
    "Athens", "Helsinki", "Zurich", "Tallinn", "Riga", "Porto", "Lyon", "Munich", "Krakow",
    "Seville", "Bergen", "Toronto", "Denver", "Austin", "Seattle", "Boston", "Osaka", "Seoul",
    "Nairobi", "Lagos", "Lima",
];
const COMPANIES: &[&str] = &[
    "Acme",
    "Globex",
    "Initech",
    "Umbrella",
    "Hooli",
    "Vandelay",
    "Stark",
    "Wayne",
    "Tyrell",
    "Cyberdyne",
    "Soylent",
    "Wonka",
    "Gringotts",
    "Monarch",
    "Oscorp",
    "Pied Piper",
];
const COLORS: &[&str] = &[
    "blue", "red", "green", "yellow", "purple", "orange", "teal", "black", "white", "pink",
];
const DATABASES: &[&str] = &[
    "Postgres",
    "MySQL",
    "SQLite",
    "MongoDB",
    "Cassandra",
    "Redis",
    "DynamoDB",
    "CockroachDB",
];
const EDITORS: &[&str] = &[
    "Vim", "Emacs", "VS Code", "Helix", "Zed", "IntelliJ", "Sublime",
];
const LANGUAGES: &[&str] = &[
    "French", "German", "Spanish", "Italian", "Japanese", "Korean", "Polish", "Greek", "Swedish",
    "Turkish", "Hindi", "Arabic",
];
const FOODS: &[&str] = &[
    "sushi",
    "tacos",
    "ramen",
    "pizza",
    "curry",
    "falafel",
    "dumplings",
    "paella",
    "pho",
    "risotto",
    "kimchi",
    "goulash",
];
const PROJECTS: &[&str] = &[
    "Atlas", "Borealis", "Cobalt", "Dynamo", "Ember", "Falcon", "Granite", "Harbor", "Ion",
    "Juniper", "Kestrel", "Lumen", "Meridian", "Nimbus", "Onyx", "Polaris",
];

/// A single-valued relation: statement templates (the first is the usual one, the others say
/// the same in other words) and the question that asks for its value.
struct Relation1 {
    name: &'static str,
    subjects: &'static [&'static str],
    values: &'static [&'static str],
    templates: &'static [&'static str],
    question: &'static str,
}

const SINGLE: &[Relation1] = &[
    Relation1 {
        name: "lives_in",
        subjects: PEOPLE,
        values: CITIES,
        templates: &["{S} lives in {V}.", "{S} lives in the city of {V}."],
        question: "Where does {S} live?",
    },
    Relation1 {
        name: "works_at",
        subjects: PEOPLE,
        values: COMPANIES,
        templates: &["{S} works at {V}.", "{S} works for {V} now."],
        question: "Which company does {S} work for?",
    },
    Relation1 {
        name: "favorite_color",
        subjects: PEOPLE,
        values: COLORS,
        templates: &[
            "{S}'s favorite color is {V}.",
            "The favorite color of {S} is {V}.",
        ],
        question: "What is {S}'s favorite color?",
    },
    Relation1 {
        name: "editor",
        subjects: PEOPLE,
        values: EDITORS,
        templates: &[
            "{S} uses {V} as code editor.",
            "{S} uses {V} as the editor for code.",
        ],
        question: "Which code editor does {S} use?",
    },
    Relation1 {
        name: "database",
        subjects: PROJECTS,
        values: DATABASES,
        templates: &[
            "The {S} project uses {V} as its database.",
            "The {S} project uses {V} as the main database.",
        ],
        question: "Which database does the {S} project use?",
    },
    Relation1 {
        name: "port",
        subjects: PROJECTS,
        values: &[
            "8080", "9090", "3000", "5432", "6379", "8443", "7733", "5000",
        ],
        templates: &[
            "The {S} service listens on port {V}.",
            "The {S} service listens on port {V} in production.",
        ],
        question: "Which port does the {S} service listen on?",
    },
];

/// Relations that hold many values: a second value must not replace the first.
const MULTI: &[(&str, &[&str], &str)] = &[
    ("likes", FOODS, "{S} likes {V}."),
    ("speaks", LANGUAGES, "{S} speaks {V}."),
    ("visited", CITIES, "{S} has visited {V}."),
];

/// Pairs of relations the model puts close together that are different facts: (slot name,
/// template) twice.
type NamedTemplate = (&'static str, &'static str);

const OTHER_RELATION: &[(NamedTemplate, NamedTemplate)] = &[
    (
        ("born_in", "{S} was born in {V}."),
        ("died_in", "{S} died in {V}."),
    ),
    (
        ("lives_in", "{S} lives in {V}."),
        ("works_in", "{S} works in {V}."),
    ),
    (
        ("manager_lives_in", "{S}'s manager lives in {V}."),
        ("brother_lives_in", "{S}'s brother lives in {V}."),
    ),
];

fn fill(t: &str, s: &str, v: &str) -> String {
    t.replace("{S}", s).replace("{V}", v)
}

/// A single-valued slot: its relation (an index of `SINGLE`), its subject, and its values in
/// order with the time each became valid.
type Slot = (usize, &'static str, Vec<(&'static str, i64)>);

/// What a stored statement is about: its slot and value.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
struct Fact {
    slot: String,
    value: String,
    multi: bool,
}

/// Texts of the stored statements, for `explain`.
static TEXTS: std::sync::Mutex<Vec<(MemoryId, String)>> = std::sync::Mutex::new(Vec::new());

#[derive(Default)]
struct Counts {
    update_pred: usize,
    update_pred_right: usize,
    update_labelled: usize,
    update_found: usize,
    merge_pred: usize,
    merge_pred_right: usize,
    merge_labelled: usize,
    merge_found: usize,
    across_slots: usize,
}

fn ratio(a: usize, b: usize) -> String {
    if b == 0 {
        "n/a".to_owned()
    } else {
        format!("{:.3} ({a}/{b})", a as f64 / b as f64)
    }
}

struct Eval {
    store: Store,
    facts: HashMap<MemoryId, Fact>,
    counts: Counts,
    clock: i64,
}

#[derive(Clone, Copy, PartialEq)]
enum Label {
    New,
    Update,
    Duplicate,
    Distinct,
}

impl Eval {
    /// With `AMBERDB_EVAL_VERBOSE` set, prints a decision that joined two slots.
    fn explain(&self, wrong: bool, text: &str, d: &amberdb::DedupDecision) {
        if wrong && std::env::var_os("AMBERDB_EVAL_VERBOSE").is_some() {
            let other = TEXTS
                .lock()
                .ok()
                .and_then(|t| {
                    t.iter()
                        .find(|(id, _)| *id == d.memory_id)
                        .map(|x| x.1.clone())
                })
                .unwrap_or_default();
            println!(
                "across slots: {other:?} -> {text:?}: {:?} ({})",
                d.relation,
                d.reason.reason()
            );
        }
    }

    fn store(&mut self, user: &str, text: &str, fact: Fact, label: Label) -> anyhow::Result<()> {
        self.clock += 86_400_000_000;
        let req = StoreRequest::new(
            NewMemory::new(text)
                .user(user)
                .valid_from(Timestamp(self.clock)),
        );
        let s = self.store.store(req)?;
        if s.outcome == Outcome::Duplicate {
            // The same text again (the exact hook): nothing to decide.
            return Ok(());
        }
        let mut updated_same_slot = false;
        let mut merged_same_value = false;
        if s.reason.is_none() {
            for d in &s.decisions {
                let Some(other) = self.facts.get(&d.memory_id) else {
                    continue;
                };
                let same_slot = other.slot == fact.slot;
                match d.relation {
                    Relation::Updates => {
                        self.counts.update_pred += 1;
                        if same_slot && other.value != fact.value && !fact.multi {
                            self.counts.update_pred_right += 1;
                            updated_same_slot = true;
                        }
                        self.counts.across_slots += usize::from(!same_slot);
                        self.explain(!same_slot, text, d);
                    }
                    Relation::Duplicate => {
                        self.counts.merge_pred += 1;
                        if same_slot && other.value == fact.value {
                            self.counts.merge_pred_right += 1;
                            merged_same_value = true;
                        }
                        self.counts.across_slots += usize::from(!same_slot);
                        self.explain(!same_slot, text, d);
                    }
                    Relation::Distinct | Relation::Unsure => {}
                }
            }
        }
        match label {
            Label::Update => {
                self.counts.update_labelled += 1;
                self.counts.update_found += usize::from(updated_same_slot);
            }
            Label::Duplicate => {
                self.counts.merge_labelled += 1;
                self.counts.merge_found += usize::from(merged_same_value);
            }
            Label::New | Label::Distinct => {}
        }
        if s.outcome != Outcome::History {
            self.facts.insert(s.memory_id, fact.clone());
        }
        if let Ok(mut t) = TEXTS.lock() {
            t.push((s.memory_id, text.to_owned()));
        }
        for id in s.supersedes {
            self.facts.entry(id).or_insert_with(|| fact.clone());
        }
        Ok(())
    }
}

fn main() -> anyhow::Result<()> {
    let subjects: usize = std::env::args().nth(1).map_or(Ok(50), |a| a.parse())?;
    let seed = seed_from_env("semantics_eval", 0x5E3A_471C);
    println!("semantics_eval: {subjects} subjects per relation at most (seed {seed:#x})");
    let mut rng = SeededRng::new(seed);
    let dir = tempfile::tempdir()?;
    let store = Store::open(dir.path(), StoreOptions::minilm()?.memory_limit(1_000_000))?;
    let mut eval = Eval {
        store,
        facts: HashMap::new(),
        counts: Counts::default(),
        clock: Timestamp::parse_rfc3339("2020-01-01T00:00:00Z").map_or(0, |t| t.0),
    };
    let user = "eval";
    let mut slots = first_values(&mut eval, &mut rng, subjects, user)?;
    let stored_before = eval.store.stats().memories;
    changes(&mut eval, &mut rng, &mut slots, user)?;
    questions(&eval, &slots, user, "the single-valued slots only")?;
    let (multi_pairs, other_pairs) = other_slots(&mut eval, &mut rng, &mut slots, subjects, user)?;
    report_decisions(&eval.counts, stored_before, multi_pairs, other_pairs);
    questions(
        &eval,
        &slots,
        user,
        "with other relations of the same subjects stored (born/died, lives/works, manager/brother, likes, speaks, visited)",
    )?;
    frequency_strategy(&eval, &slots, user)?;
    // Phase 5: pair-level dedup on fresh users: paraphrases (same slot, same value), near
    // misses (same slot another value; another subject; another relation), random pairs.
    println!("\n## Pairs (each in a fresh user): store-time dedup against a bare threshold");
    let pairs = templated_pairs(&mut rng, subjects);
    pair_f1(&eval.store, "templated", &pairs)?;
    real_pairs(&eval.store)
}

/// One value from `list`.
fn pick(rng: &mut SeededRng, list: &[&'static str]) -> &'static str {
    list[rng.below(list.len() as u64) as usize]
}

/// Phase 1: every slot of the single-valued relations gets a value. Returns each slot: the
/// relation's index, the subject, and its values in order with their `valid_from`.
fn first_values(
    eval: &mut Eval,
    rng: &mut SeededRng,
    subjects: usize,
    user: &str,
) -> anyhow::Result<Vec<Slot>> {
    // Phase 1: every slot gets a value.
    // slot -> (relation index, subject, values in order with their valid_from)
    let mut slots: Vec<Slot> = Vec::new();
    for (r, rel) in SINGLE.iter().enumerate() {
        for s in rel.subjects.iter().take(subjects) {
            let v = pick(rng, rel.values);
            let fact = Fact {
                slot: format!("{}:{s}", rel.name),
                value: v.to_owned(),
                multi: false,
            };
            eval.store(user, &fill(rel.templates[0], s, v), fact, Label::New)?;
            slots.push((r, s, vec![(v, eval.clock)]));
        }
    }
    Ok(slots)
}

/// Phase 2: corrections, restatements in other words.
fn changes(
    eval: &mut Eval,
    rng: &mut SeededRng,
    slots: &mut [Slot],
    user: &str,
) -> anyhow::Result<()> {
    let order: Vec<usize> = (0..slots.len()).collect();
    for &i in &order {
        let (r, s, ref mut history) = slots[i];
        let rel = &SINGLE[r];
        match rng.below(3) {
            0 | 1 => {
                // A new value, in the usual words or the other ones.
                let current = history.last().map_or("", |h| h.0);
                let mut v = pick(rng, rel.values);
                while v == current {
                    v = pick(rng, rel.values);
                }
                let t = rel.templates[rng.below(rel.templates.len() as u64) as usize];
                let fact = Fact {
                    slot: format!("{}:{s}", rel.name),
                    value: v.to_owned(),
                    multi: false,
                };
                eval.store(user, &fill(t, s, v), fact, Label::Update)?;
                history.push((v, eval.clock));
            }
            _ => {
                // The same value said again in other words.
                let v = history.last().map_or("", |h| h.0);
                let fact = Fact {
                    slot: format!("{}:{s}", rel.name),
                    value: v.to_owned(),
                    multi: false,
                };
                eval.store(user, &fill(rel.templates[1], s, v), fact, Label::Duplicate)?;
            }
        }
    }
    Ok(())
}

/// Phase 3: extra values of many-valued relations and other relations of the same subjects.
/// Returns how many pairs of each were stored.
fn other_slots(
    eval: &mut Eval,
    rng: &mut SeededRng,
    slots: &mut [Slot],
    subjects: usize,
    user: &str,
) -> anyhow::Result<(usize, usize)> {
    let mut multi_pairs = 0;
    for (name, values, template) in MULTI {
        for s in PEOPLE.iter().take(subjects.min(PEOPLE.len())) {
            let v = pick(rng, values);
            let fact = Fact {
                slot: format!("{name}:{s}"),
                value: v.to_owned(),
                multi: true,
            };
            eval.store(user, &fill(template, s, v), fact, Label::New)?;
        }
    }
    for (name, values, template) in MULTI {
        for s in PEOPLE.iter().take(subjects.min(PEOPLE.len())) {
            let v = pick(rng, values);
            let fact = Fact {
                slot: format!("{name}:{s}"),
                value: format!("{v}+"),
                multi: true,
            };
            eval.store(user, &fill(template, s, v), fact, Label::Distinct)?;
            multi_pairs += 1;
        }
    }
    let mut other_pairs = 0;
    for (a, b) in OTHER_RELATION {
        for s in PEOPLE.iter().take(subjects.min(PEOPLE.len()) / 2) {
            let v = pick(rng, CITIES);
            for ((name, t), label) in [(a, Label::New), (b, Label::Distinct)] {
                // The first may be a value of a slot the first phase filled (lives_in).
                let fact = Fact {
                    slot: format!("{name}:{s}"),
                    value: v.to_owned(),
                    multi: false,
                };
                eval.store(user, &fill(t, s, v), fact, label)?;
                if let Some(slot) = slots
                    .iter_mut()
                    .find(|(r, subject, _)| SINGLE[*r].name == *name && subject == s)
                {
                    slot.2.push((v, eval.clock));
                }
            }
            other_pairs += 1;
        }
    }
    Ok((multi_pairs, other_pairs))
}

/// The write-time decisions against the labels.
fn report_decisions(c: &Counts, stored_before: usize, multi_pairs: usize, other_pairs: usize) {
    println!(
        "\n## Write-time decisions ({} memories before the second phase)",
        stored_before
    );
    println!(
        "update: precision {}, recall {}",
        ratio(c.update_pred_right, c.update_pred),
        ratio(c.update_found, c.update_labelled)
    );
    println!(
        "merge:  precision {}, recall {}",
        ratio(c.merge_pred_right, c.merge_pred),
        ratio(c.merge_found, c.merge_labelled)
    );
    println!(
        "merges or updates across slots (different subject or relation): {} (of {} many-valued and {} other-relation pairs stored)",
        c.across_slots, multi_pairs, other_pairs
    );
}

/// Phase 4: the frequency strategy's newest value at top-1, before and after 2,000 searches.
fn frequency_strategy(eval: &Eval, slots: &[Slot], user: &str) -> anyhow::Result<()> {
    let freq_top1 = |eval: &Eval| -> anyhow::Result<f64> {
        let mut right = 0;
        for (r, s, history) in slots {
            let rel = &SINGLE[*r];
            let mut req = SearchRequest::new(fill(rel.question, s, ""))
                .user(user)
                .strategy(Strategy::Frequency);
            req.hooks.count_access = Some(false);
            let hits = eval.store.search(&req)?;
            let v = history.last().map_or("", |h| h.0);
            right +=
                usize::from(hits.results.first().is_some_and(|h| {
                    h.memory.content.contains(v) && h.memory.content.contains(*s)
                }));
        }
        Ok(right as f64 / slots.len() as f64)
    };
    let before = freq_top1(eval)?;
    for i in 0..2000 {
        let (r, s, _) = &slots[i % slots.len()];
        let req = SearchRequest::new(fill(SINGLE[*r].question, s, "")).user(user);
        eval.store.search(&req)?;
    }
    let after = freq_top1(eval)?;
    println!(
        "\n## frequency strategy: top-1 newest value {before:.3} before 2,000 searches, {after:.3} after"
    );

    Ok(())
}

/// Phase 5's templated pairs: a paraphrase, another subject, another relation, a random
/// statement, for each slot of the first subjects.
fn templated_pairs(rng: &mut SeededRng, subjects: usize) -> Vec<(String, String, bool)> {
    let mut pairs: Vec<(String, String, bool)> = Vec::new();
    for rel in SINGLE {
        for s in rel.subjects.iter().take(subjects.min(12)) {
            let v = pick(rng, rel.values);
            let w = loop {
                let w = pick(rng, rel.values);
                if w != v {
                    break w;
                }
            };
            let other = loop {
                let o = pick(rng, rel.subjects);
                if o != *s {
                    break o;
                }
            };
            pairs.push((
                fill(rel.templates[0], s, v),
                fill(rel.templates[1], s, v),
                true,
            ));
            pairs.push((
                fill(rel.templates[0], s, v),
                fill(rel.templates[0], other, v),
                false,
            ));
            let ((_, a), (_, b)) = OTHER_RELATION[rng.below(OTHER_RELATION.len() as u64) as usize];
            let city = pick(rng, CITIES);
            pairs.push((fill(a, s, city), fill(b, s, city), false));
            let r2 = &SINGLE[rng.below(SINGLE.len() as u64) as usize];
            pairs.push((
                fill(rel.templates[0], s, v),
                fill(
                    r2.templates[0],
                    pick(rng, r2.subjects),
                    pick(rng, r2.values),
                ),
                false,
            ));
            let _ = w;
        }
    }
    pairs
}

/// The real-text pairs `scripts/real-pairs` builds from Debian's package descriptions, when
/// they are there.
fn real_pairs(store: &Store) -> anyhow::Result<()> {
    let real =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/eval/real_pairs.tsv");
    match std::fs::read_to_string(&real) {
        Ok(text) => {
            let pairs: Vec<(String, String, bool)> = text
                .lines()
                .filter(|l| !l.starts_with('#'))
                .filter_map(|l| {
                    let mut f = l.splitn(3, '\t');
                    let label = f.next()?;
                    Some((f.next()?.to_owned(), f.next()?.to_owned(), label == "1"))
                })
                .collect();
            pair_f1(store, "real text (Debian package descriptions)", &pairs)?;
        }
        Err(_) => println!(
            "no {}: run scripts/real-pairs for the real-text pairs",
            real.display()
        ),
    }
    Ok(())
}

/// Store-time dedup on labelled pairs, each in a fresh user: the older text, then the newer
/// through the hooks. A pair counts as merged when the outcome is `merged` (the same
/// statement), as joined when it is merged or superseded (one live memory either way); a bare
/// cosine threshold at the dedup distance on the same pairs is the baseline.
fn pair_f1(store: &Store, title: &str, pairs: &[(String, String, bool)]) -> anyhow::Result<()> {
    let embedder = StoreOptions::minilm()?.embedder;
    // (tp, fp, fn) for merged, joined, bare threshold.
    let mut counts = [(0usize, 0usize, 0usize); 3];
    let mut tally = |k: usize, predicted: bool, same: bool| match (predicted, same) {
        (true, true) => counts[k].0 += 1,
        (true, false) => counts[k].1 += 1,
        (false, true) => counts[k].2 += 1,
        _ => {}
    };
    let first_user = store.stats().users;
    for (i, (a, b, same)) in pairs.iter().enumerate() {
        let u = format!("{title}-{}-{i}", first_user);
        store.store(NewMemory::new(a.as_str()).user(&u))?;
        let outcome = match store
            .store(StoreRequest::new(NewMemory::new(b.as_str()).user(&u)))?
            .outcome
        {
            // The same text: merged, as far as pairs go.
            Outcome::Duplicate => Outcome::Merged,
            other => other,
        };
        let va = embedder.embed_query(a)?;
        let vb = embedder.embed_query(b)?;
        let cos: f32 = va.iter().zip(&vb).map(|(x, y)| x * y).sum();
        tally(0, outcome == Outcome::Merged, *same);
        tally(1, outcome != Outcome::Stored, *same);
        tally(2, cos >= 1.0 - amberdb::hooks::DEDUP_DISTANCE, *same);
        if std::env::var_os("AMBERDB_EVAL_VERBOSE").is_some()
            && (outcome == Outcome::Merged) != *same
        {
            println!(
                "pair {}: {outcome:?} cos {cos:.3}: {a:?} / {b:?}",
                if *same { "missed" } else { "joined" }
            );
        }
    }
    let f1 = |(tp, fp, fneg): (usize, usize, usize)| {
        let p = tp as f64 / (tp + fp).max(1) as f64;
        let r = tp as f64 / (tp + fneg).max(1) as f64;
        let f = if p + r > 0.0 {
            2.0 * p * r / (p + r)
        } else {
            0.0
        };
        format!("precision {p:.3} recall {r:.3} F1 {f:.3}")
    };
    println!(
        "{title}: {} pairs ({} restatements): merged {}; merged or superseded {}; bare cosine >= 0.65 {}",
        pairs.len(),
        pairs.iter().filter(|p| p.2).count(),
        f1(counts[0]),
        f1(counts[1]),
        f1(counts[2]),
    );
    Ok(())
}

/// Asks every single-valued slot's question: top-1 holds the newest value; top-1 is a
/// statement of the slot at all (the model's part); an older value of the slot ranks above the
/// newest (the store's part); `as_of` a moment before the last update; per mode.
fn questions(eval: &Eval, slots: &[Slot], user: &str, title: &str) -> anyhow::Result<()> {
    println!("\n## Questions (limit 10, default settings): {title}");
    let live = eval.store.stats().memories;
    for mode in [Mode::Vector, Mode::Hybrid, Mode::Keyword] {
        let (mut newest, mut asked, mut then_right, mut then_asked) = (0, 0, 0, 0);
        let (mut of_slot, mut stale_first) = (0, 0);
        let mut counts: Vec<usize> = Vec::new();
        for (r, s, history) in slots {
            let rel = &SINGLE[*r];
            let slot = format!("{}:{s}", rel.name);
            let q = fill(rel.question, s, "");
            let ask = |as_of: Option<i64>| -> anyhow::Result<Vec<(MemoryId, String)>> {
                let mut req = SearchRequest::new(&q).user(user).mode(mode);
                req.as_of = as_of.map(Timestamp);
                req.hooks.count_access = Some(false);
                let hits = eval.store.search(&req)?;
                Ok(hits
                    .results
                    .into_iter()
                    .map(|h| (h.memory.id, h.memory.content))
                    .collect())
            };
            let in_slot = |id: &MemoryId| eval.facts.get(id).is_some_and(|f| f.slot == slot);
            let holds = |hit: Option<&(MemoryId, String)>, v: &str| {
                hit.is_some_and(|(id, t)| in_slot(id) && t.contains(v))
            };
            let page = ask(None)?;
            counts.push(page.len());
            asked += 1;
            let current = history.last().map_or("", |h| h.0);
            let right = holds(page.first(), current);
            newest += usize::from(right);
            if !right && mode == Mode::Vector && std::env::var_os("AMBERDB_EVAL_VERBOSE").is_some()
            {
                println!(
                    "missed: {q:?} wants {current:?}, page {:?}",
                    &page[..page.len().min(3)]
                );
            }
            of_slot += usize::from(page.first().is_some_and(|(id, _)| in_slot(id)));
            let first_current = page.iter().position(|h| holds(Some(h), current));
            let first_older = page.iter().position(|h| {
                in_slot(&h.0)
                    && !h.1.contains(current)
                    && history.iter().any(|(v, _)| h.1.contains(v))
            });
            if let Some(older) = first_older
                && first_current.is_none_or(|c| older < c)
            {
                stale_first += 1;
                if mode == Mode::Vector && std::env::var_os("AMBERDB_EVAL_VERBOSE").is_some() {
                    println!("stale first: {q:?} wants {current:?}, page {page:?}");
                }
            }
            if history.len() > 1 {
                let (old, from) = history[history.len() - 2];
                let page = ask(Some(from + 3_600_000_000))?;
                then_asked += 1;
                then_right += usize::from(holds(page.first(), old));
            }
        }
        counts.sort_unstable();
        println!(
            "{:<8} top-1 holds the newest value: {}; top-1 is a statement of the slot: {}; an older value above the newest: {}; as_of before the last update, top-1 holds that value: {}; results for limit 10: min {}, median {} ({live} live memories)",
            mode.as_str(),
            ratio(newest, asked),
            ratio(of_slot, asked),
            ratio(stale_first, asked),
            ratio(then_right, then_asked),
            counts.first().copied().unwrap_or(0),
            counts.get(counts.len() / 2).copied().unwrap_or(0),
        );
    }
    Ok(())
}
