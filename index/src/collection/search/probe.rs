//! The probes of IVF segments: a query's scores against a segment's centroids, its lists best
//! first, and how far it reads (`docs/ivf.md`, "Searching").

use super::super::params::{Probe, SearchParams};
use super::super::rows::{CHUNK_ROWS, Collection, Source};
use super::scan::{Chunk, QueryCodes, Tally, push_chunks};
use crate::kernels::{each_dot_f32_tile, each_dot_i8_tile};
use crate::quantize;
use crate::segment::{IvfSegment, Sealed};
use crate::topk::TopK;
use rayon::prelude::*;

/// Centroids scored at a time by `centroid_scores`: 256 × 384 i8 codes = 96 KiB (or 64 × 384
/// f32 when every score is exact), held in cache while every query of a task passes over them.
const CENTROID_BLOCK_BYTES: usize = 96 << 10;

/// Queries of a batch one task scores against a segment's centroids.
const CENTROID_TASK: usize = 256;

/// Every query's scores against `ivf`'s centroids, in query order: for each list an
/// approximate score from the i8 codes (`quantize`: both scales times the exact integer dot),
/// then the `rescore` best of those replaced by exact f32 scores. The f32 centroids at 4,000
/// lists are a 6 MB read a query, the codes a quarter of it, and the lists a probe reads come
/// from the best few by approximate score (`docs/ivf.md`, "Searching"). With `rescore` at least
/// the list count, every score is exact and the codes are not read.
///
/// A pair scores the same whatever the other queries (the i8 kernels are exact; the f32
/// re-score goes through the one-query tile): one query alone (a search) and the same query
/// in a batch rank the lists alike. A batch reads the centroids a block at a time for
/// `CENTROID_TASK` queries instead of whole for each: at 100k rows a segment's centroids are
/// 2.6 MB, and scoring them one query at a time was most of a compaction's time.
pub(crate) fn centroid_scores(
    queries: &[&[f32]],
    ivf: &IvfSegment,
    rescore: usize,
) -> Vec<Vec<f32>> {
    let centroids = ivf.centroids();
    let (codes, code_scales) = ivf.centroid_codes();
    let dim = ivf.dim().max(1);
    let nlist = centroids.len() / dim;
    let exact = rescore >= nlist;
    let score = |task: &[&[f32]]| {
        let mut scores: Vec<Vec<f32>> = task.iter().map(|_| vec![0.0; nlist]).collect();
        if exact {
            let block_rows = (CENTROID_BLOCK_BYTES / (4 * dim)).max(1);
            for (b, block) in centroids.chunks(block_rows * dim).enumerate() {
                for (four, out) in task.chunks(4).zip(scores.chunks_mut(4)) {
                    each_dot_f32_tile(four, dim, block, |r, j, s| {
                        if let Some(o) = out.get_mut(j).and_then(|o| o.get_mut(b * block_rows + r))
                        {
                            *o = s;
                        }
                    });
                }
            }
            return scores;
        }
        let encoded: Vec<(Vec<i8>, f32)> = task.iter().map(|q| quantize::encode(q)).collect();
        let groups: Vec<Vec<&[i8]>> = encoded
            .chunks(4)
            .map(|four| four.iter().map(|(c, _)| c.as_slice()).collect())
            .collect();
        let block_rows = (CENTROID_BLOCK_BYTES / dim).max(1);
        for (b, block) in codes.chunks(block_rows * dim).enumerate() {
            for ((four, qs), out) in encoded.chunks(4).zip(&groups).zip(scores.chunks_mut(4)) {
                each_dot_i8_tile(qs, dim, block, |r, j, dot| {
                    let l = b * block_rows + r;
                    let scale = four.get(j).map_or(0.0, |q| q.1)
                        * code_scales.get(l).copied().unwrap_or(0.0);
                    if let Some(o) = out.get_mut(j).and_then(|o| o.get_mut(l)) {
                        #[expect(clippy::cast_precision_loss, reason = "approximate score")]
                        let approx = dot as f32 * scale;
                        *o = approx;
                    }
                });
            }
        }
        for (query, out) in task.iter().zip(&mut scores).filter(|_| rescore > 0) {
            let mut best: Vec<u32> = (0..u32::try_from(nlist).unwrap_or(0)).collect();
            let at = |l: &u32| out.get(*l as usize).copied().unwrap_or(f32::NEG_INFINITY);
            best.select_nth_unstable_by(rescore, |a, b| at(b).total_cmp(&at(a)).then(a.cmp(b)));
            for &l in best.get(..rescore).unwrap_or(&[]) {
                let l = l as usize;
                let row = centroids.get(l * dim..(l + 1) * dim).unwrap_or(&[]);
                each_dot_f32_tile(&[query], dim, row, |_, _, s| {
                    if let Some(o) = out.get_mut(l) {
                        *o = s;
                    }
                });
            }
        }
        scores
    };
    if queries.len() <= CENTROID_TASK {
        return score(queries);
    }
    queries
        .par_chunks(CENTROID_TASK)
        .flat_map_iter(score)
        .collect()
}

/// Adds what a scan of a chunk of `source` found to the probe of its segment, when it is an
/// IVF segment's.
pub(super) fn count_into(probes: &mut [ListProbe], source: Source, tally: Tally) {
    if let Source::Sealed(i) = source
        && let Some(probe) = probes.iter_mut().find(|pr| pr.segment == i)
    {
        probe.accepted += tally.accepted;
        probe.examined += tally.examined;
        probe.in_range += tally.in_range;
    }
}

/// The probing of one IVF segment by one query: its lists best first (sorted only as far as
/// probing has gone: most queries never look past the first `nprobe`).
pub(super) struct ListProbe {
    segment: usize,
    scores: Vec<f32>,
    order: Vec<u32>,
    sorted: usize,
    /// The lists asked for (`Probe`), and those probed so far.
    first: usize,
    probed: usize,
    /// Rows that passed the filter and the tombstones, of the rows examined for it.
    accepted: usize,
    examined: usize,
    /// A range query's probe (`Probe::Range`): whether it is still deciding if its first lists
    /// hold a row in range, how many they held, and where it goes on from if they did (the
    /// built nprobe).
    range: bool,
    deciding: bool,
    in_range: usize,
    built: usize,
}

impl ListProbe {
    /// The probe of segment `segment` for a query whose score against each of its centroids
    /// is `scores` (`centroid_scores`).
    fn new(segment: usize, ivf: &IvfSegment, scores: Vec<f32>, probe: Probe) -> ListProbe {
        let first = probe.lists(ivf);
        let order: Vec<u32> = (0..u32::try_from(scores.len()).unwrap_or(0)).collect();
        let mut probe = ListProbe {
            segment,
            scores,
            order,
            sorted: 0,
            first,
            probed: first,
            accepted: 0,
            examined: 0,
            range: matches!(probe, Probe::Range(_)),
            deciding: matches!(probe, Probe::Range(_)),
            in_range: 0,
            built: Probe::Built.lists(ivf),
        };
        probe.sort_upto(first);
        probe
    }

    /// How far to probe after a round (no further than `probed`: done). Never fewer results
    /// because of the index: while the probed lists hold fewer accepted rows than the scan keeps
    /// candidates, as many lists again. And a filter's recall: a filter that passes a fraction
    /// `s` of the rows puts its true top-10 further out, so the probe reaches `first / √s`
    /// lists (measured on real text, `docs/benchmarks.md`: 10 % selectivity at the built
    /// nprobe gave recall 0.90, `first / s` would read half the index). A range probe
    /// (`Probe::Range`) whose first lists held no row in range stops there; one whose lists did
    /// goes on from the built nprobe, widened for the filter's selectivity among the rows in
    /// range, and promises no count (its answer is what lies above the floor).
    fn next(&mut self, candidates: usize) -> usize {
        let lists = self.order.len();
        if self.deciding {
            if self.in_range == 0 {
                return self.probed;
            }
            self.deciding = false;
            self.first = self.first.max(self.built);
        }
        #[expect(clippy::cast_precision_loss, reason = "a ratio of row counts")]
        let selectivity = if self.examined == 0 {
            1.0
        } else {
            self.accepted as f64 / self.examined as f64
        };
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss,
            reason = "a list count"
        )]
        let for_recall = (self.first as f64 / selectivity.max(1e-9).sqrt()).ceil() as usize;
        let for_count = if !self.range && self.accepted < candidates {
            self.probed * 2
        } else {
            0
        };
        for_recall.max(for_count).min(lists)
    }

    /// Orders `order[..upto]` best first (highest centroid score, ties to the lower list),
    /// every list there better than every list after it.
    fn sort_upto(&mut self, upto: usize) {
        if upto <= self.sorted {
            return;
        }
        let scores = &self.scores;
        let score = |l: u32| scores.get(l as usize).copied().unwrap_or(f32::NEG_INFINITY);
        let better = |a: &u32, b: &u32| score(*b).total_cmp(&score(*a)).then(a.cmp(b));
        let rest = self.order.get_mut(self.sorted..).unwrap_or(&mut []);
        let take = (upto - self.sorted).min(rest.len());
        if take < rest.len() {
            rest.select_nth_unstable_by(take, better);
        }
        if let Some(head) = rest.get_mut(..take) {
            head.sort_unstable_by(better);
        }
        self.sorted += take;
    }
}

impl Collection {
    /// Scans `chunks` into the collectors (in parallel when they hold enough rows to pay for
    /// it), adding each IVF segment's accepted rows to its probe.
    pub(super) fn scan_round(
        &self,
        chunks: &[Chunk],
        query: &[f32],
        qcodes: &QueryCodes,
        p: &SearchParams<'_>,
        found: (&mut TopK, &mut TopK),
        probes: &mut [ListProbe],
    ) {
        let (approx, exact) = found;
        let candidates = approx.capacity();
        let mut count = |source: Source, tally: Tally| count_into(probes, source, tally);
        let rows: usize = chunks.iter().map(|c| c.end - c.start).sum();
        if rows <= CHUNK_ROWS {
            for c in chunks {
                let accepted = self.scan_i8_into(*c, query, qcodes, candidates, p, (approx, exact));
                count(c.source, accepted);
            }
            return;
        }
        // One pair of collectors per piece of work rayon splits off, not per chunk: a
        // collector's threshold rises as it fills, and a fresh one per list of a few hundred
        // rows took nearly every row as a candidate (a quarter of a probe's time went to the
        // heaps at 1M rows, `docs/benchmarks.md`).
        type Found = (TopK, TopK, Vec<(Source, Tally)>);
        let fresh = || (TopK::new(candidates), TopK::new(p.k), Vec::new());
        let (a, e, tallies) = chunks
            .par_iter()
            .fold(fresh, |(mut a, mut e, mut tallies): Found, c| {
                let tally = self.scan_i8_into(*c, query, qcodes, candidates, p, (&mut a, &mut e));
                tallies.push((c.source, tally));
                (a, e, tallies)
            })
            .reduce(fresh, |(a, e, mut tallies), (a2, e2, tallies2)| {
                tallies.extend(tallies2);
                (a.merge(a2), e.merge(e2), tallies)
            });
        *approx = std::mem::replace(approx, TopK::new(0)).merge(a);
        *exact = std::mem::replace(exact, TopK::new(0)).merge(e);
        for (source, tally) in tallies {
            count(source, tally);
        }
    }

    /// What a query's i8 scan reads first: every row of the flat segments and the
    /// growing rows, and the first lists of each IVF segment; with the probes of those
    /// segments, which decide how far it goes on.
    ///
    /// `centroids(i, ivf)` gives the query's scores against the centroids of the IVF segment
    /// at `i`.
    pub(super) fn first_chunks(
        &self,
        probe: Probe,
        mut centroids: impl FnMut(usize, &IvfSegment) -> Vec<f32>,
    ) -> (Vec<Chunk>, Vec<ListProbe>) {
        let mut chunks = Vec::new();
        let mut probes = Vec::new();
        for (i, s) in self.sealed.iter().enumerate() {
            match s.as_ivf() {
                None => push_chunks(&mut chunks, Source::Sealed(i), 0..s.len(), None),
                Some(ivf) => {
                    let probe = ListProbe::new(i, ivf, centroids(i, ivf), probe);
                    for &l in probe.order.get(..probe.probed).unwrap_or(&[]) {
                        let rows = ivf.list_rows(l as usize);
                        push_chunks(&mut chunks, Source::Sealed(i), rows, Some(l));
                    }
                    probes.push(probe);
                }
            }
        }
        push_chunks(
            &mut chunks,
            Source::Growing,
            0..self.growing_keys.len(),
            None,
        );
        (chunks, probes)
    }

    /// The lists the probes go on to after a round, in chunks (none: the scan is done).
    pub(super) fn further_chunks(&self, probes: &mut [ListProbe], candidates: usize) -> Vec<Chunk> {
        let mut chunks = Vec::new();
        for probe in probes {
            let next = probe.next(candidates);
            if next <= probe.probed {
                continue;
            }
            probe.sort_upto(next);
            if let Some(Sealed::Ivf(ivf)) = self.sealed.get(probe.segment) {
                for &l in probe.order.get(probe.probed..next).unwrap_or(&[]) {
                    push_chunks(
                        &mut chunks,
                        Source::Sealed(probe.segment),
                        ivf.list_rows(l as usize),
                        Some(l),
                    );
                }
            }
            probe.probed = next;
        }
        chunks
    }
}

#[cfg(test)]
mod tests {
    use super::{ListProbe, centroid_scores};
    use crate::collection::params::rescored_lists;
    use crate::ivf::{IvfParams, build};
    use crate::mmap::SealedBytes;
    use crate::segment::IvfSegment;

    /// The order a probe reads lists in: best score first, ties to the lower list.
    fn best_first(scores: &[f32]) -> Vec<usize> {
        let mut order: Vec<usize> = (0..scores.len()).collect();
        order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
        order
    }

    #[test]
    fn lists_ranked_from_i8_codes_then_rescored_are_the_lists_exact_scores_rank_first() {
        let (n, dim, seed) = (12_000usize, 48usize, 11u64);
        eprintln!("seed {seed}");
        let vectors = crate::synthetic::clustered(n, dim, 60, 0.6, seed);
        let keys: Vec<u64> = (1..=n as u64).collect();
        let params = IvfParams {
            nlist: Some(400),
            ..IvfParams::new(seed)
        };
        let built = build(&keys, &vectors, dim, &params).unwrap();
        let seg = IvfSegment::open("ivf", SealedBytes::copy_from(&built.bytes)).unwrap();
        let queries = crate::synthetic::clustered(40, dim, 60, 0.6, seed + 1);
        let qs: Vec<&[f32]> = queries.chunks_exact(dim).collect();
        for lists in [1, 8, 32, 100] {
            let rescore = rescored_lists(lists);
            let batch = centroid_scores(&qs, &seg, rescore);
            for (i, q) in qs.iter().enumerate() {
                let exact = centroid_scores(&[q], &seg, seg.nlist()).remove(0);
                let mixed = centroid_scores(&[q], &seg, rescore).remove(0);
                // Alone and in a batch, the same bits.
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&mixed), bits(&batch[i]), "query {i}, {lists} lists");
                // `rescore` of them exact, the probe's first lists the exact ones.
                let same = mixed.iter().zip(&exact).filter(|(a, b)| a == b).count();
                assert!(same >= rescore, "query {i}: {same} exact of {rescore}");
                assert_eq!(
                    best_first(&mixed)[..lists],
                    best_first(&exact)[..lists],
                    "query {i}, {lists} lists"
                );
            }
        }
    }

    #[test]
    fn a_probe_sorted_in_steps_orders_the_lists_as_one_full_sort() {
        let scores: Vec<f32> = (0..200u32)
            .map(|i| ((i * 7919) % 101) as f32 / 10.0)
            .collect();
        let mut full: Vec<u32> = (0..200).collect();
        full.sort_by(|&a, &b| {
            scores[b as usize]
                .total_cmp(&scores[a as usize])
                .then(a.cmp(&b))
        });
        for first in [1, 3, 50, 199, 200] {
            let mut probe = ListProbe {
                segment: 0,
                scores: scores.clone(),
                order: (0..200).collect(),
                sorted: 0,
                first,
                probed: first,
                accepted: 0,
                examined: 0,
                range: false,
                deciding: false,
                in_range: 0,
                built: first,
            };
            let mut upto = first;
            probe.sort_upto(upto);
            while upto < 200 {
                assert_eq!(
                    &probe.order[..upto],
                    &full[..upto],
                    "first {first}, upto {upto}"
                );
                upto = (upto * 2).min(200);
                probe.sort_upto(upto);
            }
            assert_eq!(probe.order, full);
        }
    }
}
