//! Changed facts (issue #58, item 6; `docs/search.md`, "Changed facts"): the public
//! changed-facts set (`amberdb_benches::facts`) stored through the default hooks, every
//! statement first and every change after it, at four sizes; then every question asked.
//! Reported per split (tuning relations, held-out relations) and size: the share of questions
//! whose top-1 default result holds the newest value, beside plain cosine and plain cosine
//! read with the newest statement of the same subject and relation first (the set's labels:
//! an oracle of the reading), and the store-time decisions that archived a statement of
//! another subject or relation (false consolidations) among all merges and supersedes.
//!
//! Usage: `cargo run --release -p amberdb-benches --bin facts_eval -- DATA_DIR [SIZE...]`
//! (default 250 1000 2500 5000 changes; needs `scripts/fetch-eval-data` and MiniLM).
//! Deterministic (seeded).

#![expect(clippy::print_stdout, reason = "an evaluation tool reports on stdout")]
#![expect(
    clippy::cast_precision_loss,
    clippy::indexing_slicing,
    reason = "an evaluation tool: counts into ratios, indexes it built itself"
)]

use amberdb::{MemoryId, NewMemory, Outcome, SearchRequest, Store, StoreOptions, StoreRequest};
use amberdb_benches::facts::Source;
use amberdb_benches::plain::Baselines;
use std::collections::HashMap;
use std::path::Path;

/// Top-1 newest counts of one split: asked, default, plain cosine, cosine read newest-first.
#[derive(Default)]
struct Split {
    asked: usize,
    default: usize,
    slots: usize,
    cosine: usize,
    cosine_newest: usize,
    wrong: Vec<String>,
}

fn ratio(n: usize, d: usize) -> String {
    format!("{:.3}", n as f64 / d.max(1) as f64)
}

fn run(dir: &Path, source: &Source, size: usize) -> anyhow::Result<()> {
    let changes = source.changes(size, 0x00FA_C75E ^ size as u64);
    let options = StoreOptions::minilm()?.memory_limit(10_000_000);
    let embedder = options.embedder.clone();
    let store_dir = dir.join(format!("facts-eval-{size}"));
    if store_dir.exists() {
        std::fs::remove_dir_all(&store_dir)?;
    }
    let store = Store::open(&store_dir, options)?;
    let user = "facts";
    // Every statement's record: (change index, new?) by id.
    let mut whose: HashMap<MemoryId, (usize, bool)> = HashMap::new();
    let (mut decisions, mut false_joins) = (0, 0);
    for (new, pick) in [(false, 0), (true, 1)] {
        for (i, c) in changes.iter().enumerate() {
            let text = if pick == 0 { &c.old.1 } else { &c.new.1 };
            let stored =
                store.store(StoreRequest::new(NewMemory::new(text.as_str()).user(user)))?;
            if matches!(stored.outcome, Outcome::Merged | Outcome::Superseded) {
                decisions += 1;
                for archived in &stored.supersedes {
                    if let Some(&(j, _)) = whose.get(archived)
                        && (changes[j].subject != c.subject || changes[j].relation != c.relation)
                    {
                        false_joins += 1;
                        if std::env::var_os("AMBERDB_EVAL_VERBOSE").is_some() {
                            let (j_new, j) = (whose[archived].1, &changes[j]);
                            println!(
                                "  false consolidation ({:?}): {text:?} archived {:?}",
                                stored.outcome,
                                if j_new { &j.new.1 } else { &j.old.1 }
                            );
                        }
                    }
                }
            }
            whose.insert(stored.memory_id, (i, new));
        }
    }
    // Plain cosine over every statement, both kept.
    let texts: Vec<&str> = changes
        .iter()
        .flat_map(|c| [c.old.1.as_str(), c.new.1.as_str()])
        .collect();
    let mut vectors = Vec::with_capacity(texts.len());
    for chunk in texts.chunks(256) {
        vectors.extend(embedder.embed_batch(chunk)?);
    }
    let refs: Vec<&[f32]> = vectors.iter().map(Vec::as_slice).collect();
    let plain = Baselines::new(&texts, &refs);
    let mut splits = [Split::default(), Split::default()];
    for (i, c) in changes.iter().enumerate() {
        let s = &mut splits[usize::from(c.held_out)];
        s.asked += 1;
        let mut req = SearchRequest::new(c.question.as_str()).user(user).limit(10);
        req.hooks.count_access = Some(false);
        let hits = store.search(&req)?;
        // The top hit holds the newest value when it is the new statement's record, or a
        // record whose text is the new statement (a merge kept the older record's id).
        let holds_new = |top: &amberdb::SearchedHit| {
            whose.get(&top.memory.id) == Some(&(i, true)) || top.memory.content == c.new.1
        };
        match hits.results.first() {
            Some(top) if holds_new(top) => s.default += 1,
            top => s.wrong.push(format!(
                "{:?} -> {:?} (old: {:?}, new: {:?})",
                c.question,
                top.map(|t| t.memory.content.clone()),
                c.old.1,
                c.new.1
            )),
        }
        let mut slots = req.clone();
        slots.hooks.fold = Some(amberdb::Fold::Slots);
        if store.search(&slots)?.results.first().is_some_and(holds_new) {
            s.slots += 1;
        }
        let qv = embedder.embed_query(&c.question)?;
        let ranked = plain.rank(&c.question, &qv, 10);
        // Rows 2i and 2i + 1 are this change's old and new statements.
        if ranked.cosine.first() == Some(&(2 * i + 1)) {
            s.cosine += 1;
        }
        let first_of_this = ranked.cosine.iter().position(|r| r / 2 == i);
        let newest_first = match first_of_this {
            Some(p) if ranked.cosine[..p].is_empty() => ranked.cosine.contains(&(2 * i + 1)),
            _ => false,
        };
        s.cosine_newest += usize::from(newest_first);
    }
    for (name, s) in ["tuning relations", "held-out relations"]
        .iter()
        .zip(&splits)
    {
        println!(
            "| {size} | {name} | {} | {} | {} | {} | {} |",
            s.asked,
            ratio(s.default, s.asked),
            ratio(s.slots, s.asked),
            ratio(s.cosine, s.asked),
            ratio(s.cosine_newest, s.asked)
        );
        if std::env::var_os("AMBERDB_EVAL_VERBOSE").is_some() {
            for w in &s.wrong {
                println!("  miss: {w}");
            }
        }
    }
    println!(
        "| {size} | false consolidations | {false_joins} of {decisions} merges and supersedes ({}) | | | |",
        ratio(false_joins, decisions)
    );
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let dir = args
        .next()
        .ok_or_else(|| anyhow::anyhow!("usage: facts_eval DATA_DIR [SIZE...]"))?;
    let sizes: Vec<usize> = args.map(|a| a.parse()).collect::<Result<_, _>>()?;
    let sizes = if sizes.is_empty() {
        vec![250, 1000, 2500, 5000]
    } else {
        sizes
    };
    let source = Source::read(Path::new(&dir))?;
    println!(
        "| changes | split | questions | default top-1 newest | fold: slots | plain cosine | plain cosine, newest of the subject first |"
    );
    println!("|---|---|---|---|---|---|---|");
    for size in sizes {
        run(Path::new(&dir), &source, size)?;
    }
    Ok(())
}
