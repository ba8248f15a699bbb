//! The changed-facts set (issue #58, item 6; `docs/search.md`, "Changed facts"): facts of many
//! subjects, each stated once and later stated again with another value, and a question about
//! its current value. Built the way CounterFact was (Meng et al. 2022): a T-REx triple's
//! object is replaced by another object of the same relation. The data is public and nobody
//! here wrote it: T-REx triples (Elsahar et al. 2018, CC BY-SA 4.0) with ParaRel's paraphrased
//! patterns of each relation (Elazar et al. 2021, MIT) for the statements, and MQuAKE's
//! question template of each relation (Zhong et al. 2023, MIT) for the questions; fetched by
//! `scripts/fetch-eval-data` into `facts/`. A statement and its change use a pattern each,
//! drawn at random (the same one half the time), so a change is often said in other words.
//!
//! Relations are split by their index in [`RELATIONS`]: even ones tune, odd ones are held out.

use amberdb_index::synthetic::SeededRng;
use anyhow::Context;
use std::collections::HashMap;
use std::path::Path;

/// The relations of the set: T-REx's property ids with ParaRel patterns and a MQuAKE question.
pub const RELATIONS: &[&str] = &[
    "P27", "P108", "P159", "P937", "P413", "P140", "P1412", "P127", "P36", "P37", "P176", "P178",
    "P495", "P740", "P364", "P407",
];

/// One changed fact.
#[derive(Debug, Clone)]
pub struct Change {
    /// The property id.
    pub relation: &'static str,
    /// Whether the relation is held out (odd index in [`RELATIONS`]).
    pub held_out: bool,
    /// The subject.
    pub subject: String,
    /// The value first stated, and the statement.
    pub old: (String, String),
    /// The value it changed to, and the statement.
    pub new: (String, String),
    /// The question about the current value.
    pub question: String,
}

/// The patterns, triples and questions of every relation, read from `dir/facts/`.
pub struct Source {
    patterns: HashMap<&'static str, Vec<String>>,
    triples: HashMap<&'static str, Vec<(String, String)>>,
    questions: HashMap<&'static str, String>,
}

fn lines(path: &Path) -> anyhow::Result<Vec<serde_json::Value>> {
    crate::public::read_data(path)?
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).with_context(|| format!("{}: a line", path.display())))
        .collect()
}

impl Source {
    /// Reads the set's files under `dir/facts/`.
    ///
    /// # Errors
    /// A file missing (run `scripts/fetch-eval-data`) or not of its shape.
    pub fn read(dir: &Path) -> anyhow::Result<Source> {
        let dir = dir.join("facts");
        let templates: serde_json::Value = serde_json::from_str(&crate::public::read_data(
            &dir.join("question_templates.json"),
        )?)?;
        let mut source = Source {
            patterns: HashMap::new(),
            triples: HashMap::new(),
            questions: HashMap::new(),
        };
        for &r in RELATIONS {
            let patterns = lines(&dir.join("patterns").join(format!("{r}.jsonl")))?
                .iter()
                .filter_map(|p| p["pattern"].as_str().map(str::to_owned))
                .filter(|p| p.contains("[X]") && p.contains("[Y]"))
                .collect();
            let triples = lines(&dir.join("trex").join(format!("{r}.jsonl")))?
                .iter()
                .filter_map(|t| {
                    Some((
                        t["sub_label"].as_str()?.to_owned(),
                        t["obj_label"].as_str()?.to_owned(),
                    ))
                })
                .collect();
            let question = templates[r]
                .as_str()
                .with_context(|| format!("no question template for {r}"))?
                .to_owned();
            source.patterns.insert(r, patterns);
            source.triples.insert(r, triples);
            source.questions.insert(r, question);
        }
        Ok(source)
    }

    /// `n` changes, spread over the relations in turn, subjects distinct within a relation,
    /// drawn with `seed`.
    #[must_use]
    pub fn changes(&self, n: usize, seed: u64) -> Vec<Change> {
        let mut rng = SeededRng::new(seed);
        let mut used: HashMap<&str, Vec<bool>> = HashMap::new();
        let mut out = Vec::with_capacity(n);
        let mut tries = 0;
        while out.len() < n && tries < n * 20 {
            tries += 1;
            let k = out.len() % RELATIONS.len();
            let r = RELATIONS[k];
            let triples = &self.triples[r];
            let patterns = &self.patterns[r];
            if triples.len() < 2 || patterns.is_empty() {
                continue;
            }
            let taken = used.entry(r).or_insert_with(|| vec![false; triples.len()]);
            let i = pick(&mut rng, triples.len());
            if taken[i] {
                continue;
            }
            let (subject, old) = &triples[i];
            let new = &triples[pick(&mut rng, triples.len())].1;
            if new == old {
                continue;
            }
            taken[i] = true;
            let p_old = &patterns[pick(&mut rng, patterns.len())];
            let p_new = if pick(&mut rng, 2) == 0 {
                p_old
            } else {
                &patterns[pick(&mut rng, patterns.len())]
            };
            out.push(Change {
                relation: r,
                held_out: k % 2 == 1,
                subject: subject.clone(),
                old: (old.clone(), statement(p_old, subject, old)),
                new: (new.clone(), statement(p_new, subject, new)),
                question: self.questions[r].replace("[X]", subject),
            });
        }
        out
    }
}

/// A number below `n`.
fn pick(rng: &mut SeededRng, n: usize) -> usize {
    usize::try_from(rng.below(n as u64)).unwrap_or(0)
}

/// A pattern with its subject and object filled in, as a sentence.
fn statement(pattern: &str, subject: &str, object: &str) -> String {
    let s = pattern.replace("[X]", subject).replace("[Y]", object);
    let s = s.replace(" .", ".").replace(" ,", ",");
    let mut s = s.trim().to_owned();
    if !s.ends_with('.') {
        s.push('.');
    }
    let mut chars = s.chars();
    match chars.next() {
        Some(c) => c.to_uppercase().chain(chars).collect(),
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_read_as_sentences() {
        assert_eq!(
            statement("[X] works for [Y] .", "Ada", "Acme"),
            "Ada works for Acme."
        );
        assert_eq!(
            statement("playing as a [Y], [X]", "Koke", "midfielder"),
            "Playing as a midfielder, Koke."
        );
    }
}
