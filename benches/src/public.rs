//! Public labelled pair sets as the quality evaluation reads them (`public_eval` and the CI
//! slice test, `docs/search.md`, "Judged on public data"): pairs of texts labelled the same
//! meaning or not, the paraphrase retrieval task built from them, and the committed slice's
//! file format.

use amberdb::Embedder;
use anyhow::Context;
use std::collections::{HashMap, HashSet};
use std::path::Path;

/// One labelled pair: two texts and whether they say the same.
#[derive(Debug, Clone)]
pub struct Pair {
    /// The first text (stored first).
    pub a: String,
    /// The second text.
    pub b: String,
    /// Labelled the same meaning.
    pub same: bool,
}

/// SemEval STS lines, `score \t A \t B`; unscored lines skipped. The same meaning: a score of
/// at least 4 of 5 ("mostly equivalent, unimportant details differ").
#[must_use]
pub fn read_sts(text: &str) -> Vec<Pair> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split('\t');
            let score: f32 = f.next()?.trim().parse().ok()?;
            Some(Pair {
                a: f.next()?.trim().to_owned(),
                b: f.next()?.trim().to_owned(),
                same: score >= 4.0,
            })
        })
        .collect()
}

/// A split of a labelled pair set (`docs/search.md`, "Judged on public data").
pub struct PairSet {
    /// The set's short name on the command line: `mrpc`, `sick`, `sts`.
    pub key: &'static str,
    /// The set's name in tables.
    pub name: &'static str,
    /// The split's name in tables.
    pub split: &'static str,
    /// Held out: never used to choose a rule, a weight or a threshold.
    pub held_out: bool,
    /// Its pairs.
    pub pairs: Vec<Pair>,
}

/// Reads a file of the evaluation data, naming the script that fetches it when it is missing.
///
/// # Errors
/// The file cannot be read.
pub fn read_data(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| {
        format!(
            "{}: missing; run scripts/fetch-eval-data first",
            path.display()
        )
    })
}

impl PairSet {
    /// Every split of MRPC, SICK and STS under `dir` (as `scripts/fetch-eval-data` lays them
    /// out), tuning splits first.
    ///
    /// # Errors
    /// A file is missing.
    pub fn all(dir: &Path) -> anyhow::Result<Vec<PairSet>> {
        Ok(vec![
            PairSet::mrpc(dir, "msr-para-train.tsv", "train", false)?,
            PairSet::mrpc(dir, "msr-para-test.tsv", "test", true)?,
            PairSet::sick(dir, "SICK_train.txt", "train", false)?,
            PairSet::sick(dir, "SICK_test_annotated.txt", "test", true)?,
            PairSet::sts(
                dir,
                &["2014-images.tsv", "2014-headlines.tsv"],
                "2014 (tuning)",
                false,
            )?,
            PairSet::sts(
                dir,
                &["2015-images.tsv", "2015-headlines.tsv"],
                "2015 (held out)",
                true,
            )?,
        ])
    }

    /// MRPC: `Quality \t #1 ID \t #2 ID \t #1 String \t #2 String`, a header line.
    fn mrpc(
        dir: &Path,
        file: &str,
        split: &'static str,
        held_out: bool,
    ) -> anyhow::Result<PairSet> {
        let pairs = read_data(&dir.join("mrpc").join(file))?
            .lines()
            .skip(1)
            .filter_map(|l| {
                let f: Vec<&str> = l.split('\t').collect();
                let [quality, _, _, a, b] = f.as_slice() else {
                    return None;
                };
                Some(Pair {
                    a: a.trim().to_owned(),
                    b: b.trim().to_owned(),
                    same: quality.trim_start_matches('\u{feff}') == "1",
                })
            })
            .collect();
        Ok(PairSet {
            key: "mrpc",
            name: "MRPC",
            split,
            held_out,
            pairs,
        })
    }

    /// SICK: `pair_ID \t A \t B \t relatedness \t entailment`. The same meaning: entailment
    /// and relatedness at least 4.5 of 5 (a restatement, not only a related sentence).
    fn sick(
        dir: &Path,
        file: &str,
        split: &'static str,
        held_out: bool,
    ) -> anyhow::Result<PairSet> {
        let pairs = read_data(&dir.join("sick").join(file))?
            .lines()
            .skip(1)
            .filter_map(|l| {
                let f: Vec<&str> = l.split('\t').collect();
                let score: f32 = f.get(3)?.parse().ok()?;
                Some(Pair {
                    a: f.get(1)?.trim().to_owned(),
                    b: f.get(2)?.trim().to_owned(),
                    same: score >= 4.5 && f.get(4)?.trim() == "ENTAILMENT",
                })
            })
            .collect();
        Ok(PairSet {
            key: "sick",
            name: "SICK",
            split,
            held_out,
            pairs,
        })
    }

    /// SemEval STS captions and headlines (`read_sts`).
    fn sts(
        dir: &Path,
        files: &[&str],
        split: &'static str,
        held_out: bool,
    ) -> anyhow::Result<PairSet> {
        let mut pairs = Vec::new();
        for file in files {
            pairs.extend(read_sts(&read_data(&dir.join("sts").join(file))?));
        }
        Ok(PairSet {
            key: "sts",
            name: "STS captions+headlines",
            split,
            held_out,
            pairs,
        })
    }
}

/// Every text of `sets`, once, with its MiniLM vector (256 texts a batch).
///
/// # Errors
/// The embedder fails.
pub fn embed_texts(
    sets: &[PairSet],
    embedder: &dyn Embedder,
) -> anyhow::Result<HashMap<String, Vec<f32>>> {
    let mut texts: Vec<&str> = sets
        .iter()
        .flat_map(|s| s.pairs.iter().flat_map(|p| [p.a.as_str(), p.b.as_str()]))
        .collect();
    texts.sort_unstable();
    texts.dedup();
    let mut vectors = HashMap::with_capacity(texts.len());
    for chunk in texts.chunks(256) {
        for (t, v) in chunk.iter().zip(embedder.embed_batch(chunk)?) {
            vectors.insert((*t).to_owned(), v);
        }
    }
    Ok(vectors)
}

/// Paraphrase retrieval over the texts of a pair set: the second text of every paraphrase
/// pair asks for the first, among every other text of the set (the queries themselves are
/// not stored).
pub struct Retrieval {
    /// The stored texts, each once.
    pub corpus: Vec<String>,
    /// Each query and the index in `corpus` of the text it restates.
    pub queries: Vec<(String, usize)>,
}

impl Retrieval {
    /// The task of `pairs`.
    #[must_use]
    pub fn of(pairs: &[Pair]) -> Retrieval {
        let asks = |p: &&Pair| p.same && p.a != p.b;
        let query_texts: HashSet<&str> = pairs.iter().filter(asks).map(|p| p.b.as_str()).collect();
        let mut corpus: Vec<String> = Vec::new();
        let mut seen = HashSet::new();
        for p in pairs {
            for t in [p.a.as_str(), p.b.as_str()] {
                if !query_texts.contains(t) && seen.insert(t) {
                    corpus.push(t.to_owned());
                }
            }
        }
        let index: HashMap<&str, usize> = corpus
            .iter()
            .enumerate()
            .map(|(i, t)| (t.as_str(), i))
            .collect();
        let queries = pairs
            .iter()
            .filter(asks)
            .filter_map(|p| Some((p.b.clone(), *index.get(p.a.as_str())?)))
            .collect();
        Retrieval { corpus, queries }
    }
}

/// The meaning of each text of `pairs`: texts joined by a pair labelled the same meaning share
/// one (connected components), every other text has its own. For "distinct meanings per
/// page" (`docs/search.md`, "Pages without crowding").
#[must_use]
pub fn meanings(pairs: &[Pair]) -> HashMap<String, usize> {
    let mut ids: HashMap<String, usize> = HashMap::new();
    let mut parent: Vec<usize> = Vec::new();
    let mut id = |t: &str, parent: &mut Vec<usize>| {
        let n = ids.len();
        *ids.entry(t.to_owned()).or_insert_with(|| {
            parent.push(n);
            n
        })
    };
    fn root(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    let mut joins = Vec::new();
    for p in pairs {
        let (a, b) = (id(&p.a, &mut parent), id(&p.b, &mut parent));
        if p.same {
            joins.push((a, b));
        }
    }
    for (a, b) in joins {
        let (ra, rb) = (root(&mut parent, a), root(&mut parent, b));
        if ra != rb {
            parent[ra] = rb;
        }
    }
    let mut out = HashMap::new();
    let names: Vec<(String, usize)> = ids.iter().map(|(t, i)| (t.clone(), *i)).collect();
    for (t, i) in names {
        out.insert(t, root(&mut parent, i));
    }
    out
}

/// Vectors computed once and looked up by text: the committed slice's MiniLM vectors, so
/// the CI check embeds nothing. Reports its model as MiniLM's (the vectors are MiniLM's);
/// a text it does not hold is an error.
pub struct TableEmbedder {
    vectors: HashMap<String, Vec<f32>>,
    dim: usize,
}

impl TableEmbedder {
    /// An embedder answering from `vectors`, all of dimension `dim`.
    #[must_use]
    pub fn new(vectors: HashMap<String, Vec<f32>>, dim: usize) -> TableEmbedder {
        TableEmbedder { vectors, dim }
    }

    /// Reads a slice written by [`write_slice`]: `texts.txt` (one text a line) and
    /// `vectors.f16` (each text's vector, f16 little-endian, in the same order).
    ///
    /// # Errors
    /// When a file is missing or the sizes disagree.
    pub fn read(dir: &std::path::Path, dim: usize) -> std::io::Result<TableEmbedder> {
        let texts = std::fs::read_to_string(dir.join("texts.txt"))?;
        let bytes = std::fs::read(dir.join("vectors.f16"))?;
        let texts: Vec<&str> = texts.lines().collect();
        if bytes.len() != texts.len() * dim * 2 {
            return Err(std::io::Error::other(format!(
                "{}: {} bytes for {} texts of {dim} dimensions",
                dir.display(),
                bytes.len(),
                texts.len()
            )));
        }
        let values: Vec<f32> = bytes
            .chunks_exact(2)
            .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect();
        let vectors = texts
            .iter()
            .zip(values.chunks_exact(dim))
            .map(|(t, v)| {
                let n = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
                ((*t).to_owned(), v.iter().map(|x| x / n).collect())
            })
            .collect();
        Ok(TableEmbedder { vectors, dim })
    }

    /// The vector of `text`, if held.
    #[must_use]
    pub fn vector(&self, text: &str) -> Option<&[f32]> {
        self.vectors.get(text).map(Vec::as_slice)
    }
}

impl Embedder for TableEmbedder {
    fn model_id(&self) -> &str {
        "sentence-transformers/all-MiniLM-L6-v2 (precomputed)"
    }

    fn dim(&self) -> usize {
        self.dim
    }

    fn embed_batch(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, amberdb_embed::EmbedError> {
        texts
            .iter()
            .map(|t| {
                self.vectors
                    .get(*t)
                    .cloned()
                    .ok_or_else(|| amberdb_embed::EmbedError::Failed {
                        model_id: self.model_id().to_owned(),
                        reason: format!("no precomputed vector for {t:?}"),
                    })
            })
            .collect()
    }
}

/// Writes `texts` and their vectors as a slice [`TableEmbedder::read`] reads.
///
/// # Errors
/// On I/O.
pub fn write_slice(
    dir: &std::path::Path,
    texts: &[&str],
    vectors: &[Vec<f32>],
) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut t = String::new();
    let mut bytes = Vec::new();
    for (text, v) in texts.iter().zip(vectors) {
        if text.contains('\n') {
            return Err(std::io::Error::other(format!("{text:?} spans lines")));
        }
        t.push_str(text);
        t.push('\n');
        for x in v {
            bytes.extend_from_slice(&half::f16::from_f32(*x).to_le_bytes());
        }
    }
    std::fs::write(dir.join("texts.txt"), t)?;
    std::fs::write(dir.join("vectors.f16"), bytes)
}
