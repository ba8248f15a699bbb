//! Building IVF segments (`docs/ivf.md`, "Building a segment"): k-means lists, then the nprobe
//! that meets a recall target, measured on queries drawn from the rows themselves.
//!
//! Guarantees: deterministic for a seed whatever the thread count (the k-means is, the held-out
//! rows are a seeded sample, and every search it measures is exact up to the candidates' order);
//! the segment's `nprobe` is the least one tried whose mean recall@10 on the held-out queries
//! reached the target (every list when none did), and its curve holds every point measured, so
//! a per-query recall target maps to a measured nprobe; invalid input is an error, never a
//! panic.
//!
//! The held-out queries are rows of the input, kept in the segment: each query's ground truth
//! is the exact top-10 of the other rows, and its own row is filtered out of the IVF search, so
//! a query never finds itself (the same as holding it out, without a second copy).

use crate::collection::{Collection, Probe, Scan, SearchParams};
use crate::error::{IndexError, Result};
use crate::kernels;
use crate::kmeans::{self, KMeansParams};
use crate::mmap::SealedBytes;
use crate::segment::ivf::{CURVE_POINTS, IvfBuild, IvfSegment, MAX_NLIST, encode, set_nprobe};
use crate::synthetic::SeededRng;
use crate::topk::{Neighbour, TopK};
use rayon::prelude::*;

/// Neighbours a recall is measured at (recall@10).
pub const RECALL_AT: usize = 10;
/// Most held-out queries a build measures recall on.
pub const MAX_HELD_OUT: usize = 1_000;
/// Recall the curve goes on to after the target, so a query may ask for more, up to
/// `CURVE_REACH` times the chosen nprobe.
const CURVE_CEILING: f32 = 0.99;
const CURVE_REACH: u32 = 4;

/// What to build.
#[derive(Debug, Clone, PartialEq)]
pub struct IvfParams {
    /// Mean recall@10 the default nprobe must reach, in `(0, 1]`.
    pub target_recall: f32,
    /// Lists; `None`: [`nlist_for`] the row count.
    pub nlist: Option<usize>,
    /// Seed of the k-means and of the held-out sample.
    pub seed: u64,
    /// The store the segment file belongs to (`Owner`).
    pub owner: crate::Owner,
}

impl IvfParams {
    /// recall@10 ≥ 0.95, `nlist_for` the rows.
    #[must_use]
    pub fn new(seed: u64) -> IvfParams {
        IvfParams {
            target_recall: 0.95,
            nlist: None,
            seed,
            owner: crate::Owner::NONE,
        }
    }
}

/// Lists for `count` rows: `round(4·√count)`, at least 1, at most `count` and 65,536
/// (FAISS's guidance is 4–16·√N; `docs/ivf.md`).
#[must_use]
pub fn nlist_for(count: usize) -> usize {
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss,
        reason = "a small positive count of lists"
    )]
    let n = (4.0 * (count as f64).sqrt()).round() as usize;
    n.clamp(1, count.clamp(1, MAX_NLIST as usize))
}

/// Held-out queries for `count` rows: a hundredth of them, at least 50 (or every row of a
/// smaller input), at most [`MAX_HELD_OUT`].
#[must_use]
pub fn held_out_for(count: usize) -> usize {
    (count / 100).clamp(count.min(50), MAX_HELD_OUT)
}

/// A built segment: its bytes and what the build measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Built {
    /// The segment file.
    pub bytes: Vec<u8>,
    /// Lists.
    pub nlist: usize,
    /// The default nprobe.
    pub nprobe: u32,
    /// Mean recall@10 at `nprobe`.
    pub built_recall: f32,
    /// `(nprobe, recall@10)`, nprobe increasing: searched at the default and at any nprobe
    /// tried before it, estimated elsewhere (`curve_around`).
    pub curve: Vec<(u32, f32)>,
    /// Queries measured on.
    pub held_out: usize,
}

fn invalid(reason: &'static str) -> IndexError {
    IndexError::InvalidParameter(reason)
}

/// Builds an IVF segment of `keys` (unique) and their `vectors` (`keys.len() × dim`, unit
/// vectors), on the current rayon pool.
///
/// # Errors
/// `InvalidParameter` for no rows, a target outside `(0, 1]`, or what the k-means or the
/// encoder refuse.
pub fn build(keys: &[u64], vectors: &[f32], dim: usize, params: &IvfParams) -> Result<Built> {
    build_until(keys, vectors, dim, params, &|| false)
}

/// As [`build`], giving up with `Cancelled` once `stop` returns true (asked between the
/// k-means' iterations and between recall measurements): a store closing does not wait for a
/// whole build.
///
/// # Errors
/// As `build`, or `Cancelled`.
pub fn build_until(
    keys: &[u64],
    vectors: &[f32],
    dim: usize,
    params: &IvfParams,
    stop: &(dyn Fn() -> bool + Sync),
) -> Result<Built> {
    let count = keys.len();
    if count == 0 || dim == 0 || vectors.len() != count * dim {
        return Err(invalid(
            "rows must be keys.len() × dim values, at least one",
        ));
    }
    if !(params.target_recall > 0.0 && params.target_recall <= 1.0) {
        return Err(invalid("target recall must be in (0, 1]"));
    }
    let nlist = params.nlist.unwrap_or_else(|| nlist_for(count));
    let clustering =
        kmeans::train_until(vectors, dim, &KMeansParams::new(nlist, params.seed), stop)?;
    let held_out = held_out_for(count);
    let segment_of = |nprobe: u32, built_recall: f32, curve: &[(u32, f32)]| {
        encode(&IvfBuild {
            keys,
            vectors,
            dim,
            centroids: &clustering.centroids,
            assignment: &clustering.assignment,
            nprobe,
            built_recall,
            target_recall: params.target_recall,
            held_out: u32::try_from(held_out).unwrap_or(u32::MAX),
            curve,
            owner: params.owner,
        })
    };
    // A provisional segment to measure on; the final one differs only in its header and curve.
    let provisional = segment_of(1, 0.0, &[])?;
    let seg = IvfSegment::open("build", SealedBytes::copy_from(&provisional))?;
    let queries = sample_rows(count, held_out, params.seed ^ 0x4845_4c44);
    let truth = ground_truth(keys, vectors, dim, &queries);
    let list_recall = list_recall(
        keys,
        vectors,
        &seg,
        &clustering.assignment,
        &queries,
        &truth,
    );
    let mut index = Collection::new(dim);
    index.push_sealed(seg)?;
    let recall_at = |nprobe: u32| measure(&index, keys, vectors, dim, &queries, &truth, nprobe);

    let nlist32 = u32::try_from(nlist).map_err(|_| invalid("too many lists"))?;
    let least = |recall: f32, from: u32| {
        (from..=nlist32)
            .find(|&p| list_recall.at(p) >= recall)
            .unwrap_or(nlist32)
    };
    // The least nprobe whose lists hold the target's share of the true neighbours, searched:
    // the i8 scan and its re-rank lose a little more, so while the search falls short, the
    // least nprobe whose lists make up for what it lost there, at least a sixteenth more.
    let mut measured: Vec<(u32, f32)> = Vec::new();
    let mut nprobe = least(params.target_recall, 1);
    let built_recall = loop {
        if stop() {
            return Err(IndexError::Cancelled);
        }
        let recall = recall_at(nprobe)?;
        measured.push((nprobe, recall));
        if recall >= params.target_recall || nprobe == nlist32 {
            break recall;
        }
        let lost = (list_recall.at(nprobe) - recall).max(0.0);
        let next = (nprobe + (nprobe / 16).max(1)).min(nlist32);
        nprobe = least(params.target_recall + lost, next).max(next);
    };
    let curve = curve_around(
        &list_recall,
        &measured,
        nprobe,
        params.target_recall,
        nlist32,
    );
    let mut bytes = provisional;
    set_nprobe(&mut bytes, nprobe, built_recall, &curve)?;
    Ok(Built {
        bytes,
        nlist,
        nprobe,
        built_recall,
        curve,
        held_out,
    })
}

/// For the held-out queries, how many of their true neighbours lie in the first `p` lists a
/// probe reads, for every `p`: the recall an exact scan of those lists would reach.
struct ListRecall {
    /// `within[p]`: neighbours whose list is among a query's first `p`, `p` in `0..=nlist`.
    within: Vec<u64>,
    /// Neighbours in all.
    wanted: u64,
}

impl ListRecall {
    #[expect(clippy::cast_precision_loss, reason = "a ratio of counts")]
    fn at(&self, p: u32) -> f32 {
        if self.wanted == 0 {
            return 1.0;
        }
        let within = self.within.get(p as usize).or(self.within.last());
        within.copied().unwrap_or(0) as f32 / self.wanted as f32
    }
}

/// Each query's lists in the order its probe reads them (the search's own centroid scores,
/// best first, ties to the lower list), and where its true neighbours' lists come in it. A
/// probe of `p` lists whose rows fall short of the scan's `candidates` reads as many lists
/// again until they do (`Collection`'s probe), so `p` counts the lists that probe reads.
fn list_recall(
    keys: &[u64],
    vectors: &[f32],
    seg: &IvfSegment,
    assignment: &[u32],
    queries: &[usize],
    truth: &[Vec<u64>],
) -> ListRecall {
    let nlist = seg.nlist();
    let candidates = match Scan::i8_for(RECALL_AT) {
        Scan::I8 { candidates } => candidates,
        Scan::F32 => RECALL_AT,
    };
    let wanted: std::collections::HashSet<u64> = truth.iter().flatten().copied().collect();
    let list_of: std::collections::HashMap<u64, u32> = keys
        .iter()
        .zip(assignment)
        .filter(|(k, _)| wanted.contains(k))
        .map(|(&k, &l)| (k, l))
        .collect();
    let sizes: Vec<usize> = (0..nlist).map(|l| seg.list_rows(l).len()).collect();
    let dim = seg.dim().max(1);
    let qs: Vec<&[f32]> = queries.iter().map(|&r| row(vectors, dim, r)).collect();
    // Every centroid score exact: the probe of `p` lists re-scores twice as many in f32 after
    // its i8 pass, and the true best `p` are all but always among them.
    let scores = crate::collection::centroid_scores(&qs, seg, nlist);
    let within = scores
        .par_iter()
        .zip(truth)
        .map(|(scores, want)| {
            let score = |l: usize| scores.get(l).copied().unwrap_or(f32::NEG_INFINITY);
            let mut order: Vec<usize> = (0..nlist).collect();
            order.sort_by(|&a, &b| score(b).total_cmp(&score(a)).then(a.cmp(&b)));
            let mut rank_of = vec![0usize; nlist];
            for (rank, &l) in order.iter().enumerate() {
                if let Some(r) = rank_of.get_mut(l) {
                    *r = rank;
                }
            }
            // Rows in the first `i` lists, less the query's own row (filtered out).
            let mut rows = Vec::with_capacity(nlist + 1);
            rows.push(0usize);
            for &l in &order {
                rows.push(rows.last().copied().unwrap_or(0) + sizes.get(l).copied().unwrap_or(0));
            }
            let mut ranks: Vec<usize> = want
                .iter()
                .filter_map(|k| list_of.get(k))
                .filter_map(|&l| rank_of.get(l as usize).copied())
                .collect();
            ranks.sort_unstable();
            let mut within = vec![0u64; nlist + 1];
            for (p, slot) in within.iter_mut().enumerate().skip(1) {
                let mut read = p;
                while read < nlist
                    && rows.get(read).copied().unwrap_or(0).saturating_sub(1) < candidates
                {
                    read = (read * 2).min(nlist);
                }
                *slot = ranks.partition_point(|&r| r < read) as u64;
            }
            within
        })
        .reduce(
            || vec![0u64; nlist + 1],
            |a, b| a.iter().zip(&b).map(|(x, y)| x + y).collect(),
        );
    ListRecall {
        within,
        wanted: truth.iter().map(|t| t.len() as u64).sum(),
    }
}

/// The recall curve a segment carries: the nprobes searched at (`measured`, the default
/// `nprobe` last; the last `CURVE_POINTS / 2` of them, so the curve fits its block however
/// many steps the search took), and between and beyond them the list recall scaled by what the
/// search reached at `nprobe` (an estimate): halvings below `nprobe` that stay under the
/// target, doublings above it up to `CURVE_REACH` × `nprobe` or recall `CURVE_CEILING`.
fn curve_around(
    list_recall: &ListRecall,
    measured: &[(u32, f32)],
    nprobe: u32,
    target: f32,
    nlist: u32,
) -> Vec<(u32, f32)> {
    let at_default = measured.last().map_or(0.0, |p| p.1);
    let scale = match list_recall.at(nprobe) {
        l if l > 0.0 => (at_default / l).min(1.0),
        _ => 1.0,
    };
    let estimate = |p: u32| (list_recall.at(p) * scale).clamp(0.0, 1.0);
    let mut curve: Vec<(u32, f32)> = measured
        .get(measured.len().saturating_sub(CURVE_POINTS / 2)..)
        .unwrap_or(measured)
        .to_vec();
    let mut below = nprobe / 2;
    while below >= 1 && curve.len() < CURVE_POINTS / 2 {
        if !curve.iter().any(|p| p.0 == below) && estimate(below) < target {
            curve.push((below, estimate(below)));
        }
        below /= 2;
    }
    let mut above = nprobe;
    while above < nlist.min(nprobe.saturating_mul(CURVE_REACH)) && curve.len() < CURVE_POINTS {
        above = above.saturating_mul(2).min(nlist);
        let recall = estimate(above).max(at_default);
        curve.push((above, recall));
        if recall >= CURVE_CEILING {
            break;
        }
    }
    curve.sort_by_key(|p| p.0);
    curve.dedup_by_key(|p| p.0);
    curve
}

/// `n` distinct row numbers below `count`, a seeded sample.
fn sample_rows(count: usize, n: usize, seed: u64) -> Vec<usize> {
    let mut rng = SeededRng::new(seed);
    let mut order: Vec<usize> = (0..count).collect();
    let n = n.min(count);
    for i in 0..n {
        #[expect(clippy::cast_possible_truncation, reason = "below count, a usize")]
        let j = i + rng.below((count - i) as u64) as usize;
        order.swap(i, j);
    }
    order.truncate(n);
    order
}

fn row(vectors: &[f32], dim: usize, r: usize) -> &[f32] {
    vectors.get(r * dim..(r + 1) * dim).unwrap_or(&[])
}

/// Rows per block of the ground truth's scan: a block stays in the core's L2 while every
/// query is scored against it.
const TRUTH_BLOCK_ROWS: usize = 512;

/// Each query's exact top-10 among the other rows: the multi-query kernel over blocks of rows,
/// four queries at a time (its sums round differently from the scan's `dot`, which can only
/// reorder exact ties).
fn ground_truth(keys: &[u64], vectors: &[f32], dim: usize, queries: &[usize]) -> Vec<Vec<u64>> {
    let qs: Vec<&[f32]> = queries.iter().map(|&r| row(vectors, dim, r)).collect();
    let fresh = || {
        qs.iter()
            .map(|_| TopK::new(RECALL_AT + 1))
            .collect::<Vec<_>>()
    };
    let tops = vectors
        .par_chunks(TRUTH_BLOCK_ROWS * dim)
        .enumerate()
        .map(|(b, block)| {
            let mut tops = fresh();
            for (g, four) in qs.chunks(4).enumerate() {
                kernels::each_dot_f32_tile(four, dim, block, |r, j, score| {
                    let key = keys.get(b * TRUTH_BLOCK_ROWS + r).copied().unwrap_or(0);
                    if let Some(top) = tops.get_mut(g * 4 + j)
                        && score > top.threshold()
                    {
                        top.push(Neighbour { key, score });
                    }
                });
            }
            tops
        })
        .reduce(fresh, |a, b| {
            a.into_iter().zip(b).map(|(x, y)| x.merge(y)).collect()
        });
    tops.into_iter()
        .zip(queries)
        .map(|(top, &r)| {
            let me = keys.get(r).copied();
            top.into_sorted()
                .into_iter()
                .map(|n| n.key)
                .filter(|k| Some(*k) != me)
                .take(RECALL_AT)
                .collect()
        })
        .collect()
}

/// Mean recall@10 of the i8 probe at `nprobe` lists.
fn measure(
    index: &Collection,
    keys: &[u64],
    vectors: &[f32],
    dim: usize,
    queries: &[usize],
    truth: &[Vec<u64>],
    nprobe: u32,
) -> Result<f32> {
    let hits: Vec<usize> = queries
        .par_iter()
        .zip(truth)
        .map(|(&r, want)| {
            let me = keys.get(r).copied();
            let not_me = move |k: u64| Some(k) != me;
            let p = SearchParams {
                k: RECALL_AT,
                filter: Some(&not_me),
                scan: Scan::i8_for(RECALL_AT),
                min_score: f32::NEG_INFINITY,
                probe: Probe::Lists(nprobe),
            };
            let got = index.search(row(vectors, dim, r), &p)?;
            Ok(got.iter().filter(|n| want.contains(&n.key)).count())
        })
        .collect::<Result<_>>()?;
    let wanted: usize = truth.iter().map(Vec::len).sum();
    #[expect(clippy::cast_precision_loss, reason = "a ratio of small counts")]
    Ok(if wanted == 0 {
        1.0
    } else {
        hits.iter().sum::<usize>() as f32 / wanted as f32
    })
}

#[cfg(test)]
mod tests {
    use super::{CURVE_POINTS, ListRecall, curve_around};

    #[test]
    fn a_curve_fits_its_block_however_many_nprobes_were_searched() {
        // 100 searches short of the target, one step apart, then the default at 101.
        let nlist = 200u32;
        let list_recall = ListRecall {
            within: (0..=u64::from(nlist)).collect(),
            wanted: u64::from(nlist),
        };
        let mut measured: Vec<(u32, f32)> = (1..=100).map(|p| (p, 0.5)).collect();
        measured.push((101, 0.95));
        let curve = curve_around(&list_recall, &measured, 101, 0.95, nlist);
        assert!(curve.len() <= CURVE_POINTS, "{} points", curve.len());
        assert!(curve.windows(2).all(|w| w[0].0 < w[1].0), "{curve:?}");
        assert!(
            curve.contains(&(101, 0.95)),
            "the default is kept: {curve:?}"
        );
    }
}
