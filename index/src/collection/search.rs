//! Searching a [`Collection`]: the f32 and i8 scans in chunks on the rayon pool, the IVF
//! probes, the re-rank, range and batch queries.

use super::params::{KeyFilter, Probe, RANGE_SLACK, Scan, SearchParams};
use super::rows::{CHUNK_ROWS, Collection, Source, validate_vector};
use crate::error::{IndexError, Result};
use crate::kernels::{
    each_dot_f32, each_dot_f32_batch, each_dot_f32_tile, each_dot_i8, each_dot_i8_tile,
};
use crate::quantize;
use crate::segment::{IvfSegment, Sealed};
use crate::topk::{Neighbour, TopK};
use rayon::prelude::*;

/// The rows of one chunk: keys, f32 vectors, and i8 codes with scales when it has them (the
/// growing rows always do; a sealed flat segment when written with them).
type ChunkRows<'a> = (&'a [u64], &'a [f32], Option<(&'a [i8], &'a [f32])>);

#[derive(Debug, Clone, Copy)]
struct Chunk {
    source: Source,
    start: usize,
    end: usize,
}

/// A row's place, packed into the key field of an i8 scan's candidates: the segment in the top
/// 24 bits (all ones for the growing rows), the row in the low 40 (a segment holds at most 2^40
/// rows; a collection fewer than 2^24 - 1 segments).
struct Place;

impl Place {
    const ROW_BITS: u32 = 40;
    const GROWING: u64 = (1 << (64 - Self::ROW_BITS)) - 1;

    fn pack(source: Source, row: usize) -> u64 {
        let segment = match source {
            Source::Sealed(s) => s as u64,
            Source::Growing => Self::GROWING,
        };
        (segment << Self::ROW_BITS) | row as u64
    }

    fn unpack(place: u64) -> (Source, usize) {
        let segment = place >> Self::ROW_BITS;
        let source = if segment == Self::GROWING {
            Source::Growing
        } else {
            Source::Sealed(segment as usize)
        };
        (source, (place & ((1 << Self::ROW_BITS) - 1)) as usize)
    }
}

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
        for (query, out) in task.iter().zip(&mut scores) {
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
fn count_into(probes: &mut [ListProbe], source: Source, tally: Tally) {
    if let Source::Sealed(i) = source
        && let Some(probe) = probes.iter_mut().find(|pr| pr.segment == i)
    {
        probe.accepted += tally.accepted;
        probe.examined += tally.examined;
        probe.in_range += tally.in_range;
    }
}

/// Splits `rows` of `source` into chunks of at most `CHUNK_ROWS`.
fn push_chunks(out: &mut Vec<Chunk>, source: Source, rows: std::ops::Range<usize>) {
    let mut start = rows.start;
    while start < rows.end {
        let end = (start + CHUNK_ROWS).min(rows.end);
        out.push(Chunk { source, start, end });
        start = end;
    }
}

/// A query's i8 codes, and for a range query (`Probe::Range`) its floor in the scale of the
/// scan's approximate scores (`dot_i8 × row scale`, which leave out the query's own scale).
struct QueryCodes {
    codes: Vec<i8>,
    range: bool,
    /// Rows scoring below this are skipped whole: no filter call, no candidate, not counted.
    /// A range query's floor less [`RANGE_SLACK`]; no floor for any other query.
    skip_below: f32,
}

impl QueryCodes {
    fn new(query: &[f32], p: &SearchParams<'_>) -> QueryCodes {
        let (codes, scale) = quantize::encode(query);
        let range = matches!(p.probe, Probe::Range(_));
        let floor = p.min_score - RANGE_SLACK;
        let skip_below = if !range || floor.is_nan() {
            f32::NEG_INFINITY
        } else if scale > 0.0 {
            floor / scale
        } else if floor <= 0.0 {
            // A zero query scores 0 against every row.
            f32::NEG_INFINITY
        } else {
            f32::INFINITY
        };
        QueryCodes {
            codes,
            range,
            skip_below,
        }
    }
}

/// What a scan of one chunk tells the probe of its segment (`Collection::scan_i8_into`).
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    accepted: usize,
    examined: usize,
    in_range: usize,
}

/// Where a scan puts its approximate candidates: the query's collector, or (in a range batch,
/// which keeps every row it finds in range) a list merged into it afterwards.
trait Candidates {
    /// The score a candidate must beat to be worth offering.
    fn threshold(&self) -> f32;
    fn push(&mut self, candidate: Neighbour);
}

impl Candidates for TopK {
    fn threshold(&self) -> f32 {
        TopK::threshold(self)
    }
    fn push(&mut self, candidate: Neighbour) {
        TopK::push(self, candidate);
    }
}

impl Candidates for Vec<Neighbour> {
    fn threshold(&self) -> f32 {
        f32::NEG_INFINITY
    }
    fn push(&mut self, candidate: Neighbour) {
        Vec::push(self, candidate);
    }
}

/// The i8 scan of one chunk for one query, a row at a time, fed by the one-query kernel
/// (`Collection::scan_i8_into`) or the multi-query one (`Collection::search_range_batch`).
/// What it decides for a row depends only on that row's score and the rows before it, so both
/// scans decide alike.
struct CodeScan<'a> {
    collection: &'a Collection,
    source: Source,
    start: usize,
    keys: &'a [u64],
    scales: &'a [f32],
    qcodes: &'a QueryCodes,
    filter: Option<KeyFilter<'a>>,
    /// A key this query never returns (a batch query's own row).
    exclude: Option<u64>,
    /// Rows that pass are counted up to this many (the probe goes on while it has too few).
    count_to: usize,
    tally: Tally,
}

impl<'a> CodeScan<'a> {
    #[expect(
        clippy::too_many_arguments,
        reason = "one chunk, one query, one filter"
    )]
    fn new(
        collection: &'a Collection,
        c: Chunk,
        keys: &'a [u64],
        scales: &'a [f32],
        qcodes: &'a QueryCodes,
        filter: Option<KeyFilter<'a>>,
        exclude: Option<u64>,
        count_to: usize,
    ) -> CodeScan<'a> {
        let unfiltered = filter.is_none() && collection.deleted.is_empty() && exclude.is_none();
        let accepted = if unfiltered { keys.len() } else { 0 };
        CodeScan {
            collection,
            source: c.source,
            start: c.start,
            keys,
            scales,
            qcodes,
            filter,
            exclude,
            count_to,
            tally: Tally {
                accepted,
                examined: accepted,
                in_range: 0,
            },
        }
    }

    #[inline]
    fn passes(&self, key: u64) -> bool {
        self.exclude != Some(key) && self.collection.accepts(key, self.filter)
    }

    /// Row `row` of the chunk scored `dot` against the query's codes.
    #[inline]
    fn row(&mut self, row: usize, dot: i32, approx: &mut impl Candidates) {
        #[expect(clippy::cast_precision_loss, reason = "approximate score")]
        let score = dot as f32 * self.scales.get(row).copied().unwrap_or(0.0);
        if score < self.qcodes.skip_below {
            return;
        }
        let Some(&key) = self.keys.get(row) else {
            return;
        };
        // Known for the rows counted; evaluated lazily for the rest.
        let mut passes = None;
        if self.tally.accepted < self.count_to {
            let ok = self.passes(key);
            self.tally.accepted += usize::from(ok);
            self.tally.examined += 1;
            passes = Some(ok);
        }
        if (self.qcodes.range || score > approx.threshold())
            && passes.unwrap_or_else(|| self.passes(key))
        {
            self.tally.in_range += usize::from(self.qcodes.range);
            // The candidate's place, not its key: the re-rank reads the row directly.
            approx.push(Neighbour {
                key: Place::pack(self.source, self.start + row),
                score,
            });
        }
    }
}

/// One query of a range batch (`Collection::search_range_batch`).
#[derive(Debug, Clone, Copy)]
pub struct RangeQuery<'a> {
    /// The query vector.
    pub vector: &'a [f32],
    /// A key this query never returns (in compaction, the memory asking).
    pub exclude: Option<u64>,
}

/// A range batch's state for one of its queries.
struct BatchQuery {
    qcodes: QueryCodes,
    probes: Vec<ListProbe>,
    approx: TopK,
    exact: TopK,
    /// The chunks it reads in the next round.
    pending: Vec<Chunk>,
}

/// What scanning one chunk found for one query of a batch: the query, what its probe counts,
/// its candidates in range, and, for f32 rows, its exact results.
type BatchFinding = (usize, Tally, Vec<Neighbour>, Option<TopK>);

/// The probing of one IVF segment by one query: its lists best first (sorted only as far as
/// probing has gone: most queries never look past the first `nprobe`).
struct ListProbe {
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
    /// Every row, in chunks: what an exact scan reads.
    fn chunks(&self) -> Vec<Chunk> {
        let mut out = Vec::new();
        for (i, s) in self.sealed.iter().enumerate() {
            push_chunks(&mut out, Source::Sealed(i), 0..s.len());
        }
        push_chunks(&mut out, Source::Growing, 0..self.growing_keys.len());
        out
    }

    fn chunk_rows(&self, c: Chunk) -> ChunkRows<'_> {
        match c.source {
            Source::Growing => (
                self.growing_keys.get(c.start..c.end).unwrap_or(&[]),
                self.growing_vectors
                    .get(c.start * self.dim..c.end * self.dim)
                    .unwrap_or(&[]),
                Some((
                    self.growing_codes
                        .get(c.start * self.dim..c.end * self.dim)
                        .unwrap_or(&[]),
                    self.growing_scales.get(c.start..c.end).unwrap_or(&[]),
                )),
            ),
            Source::Sealed(s) => {
                let Some(seg) = self.sealed.get(s) else {
                    return (&[], &[], None);
                };
                let codes = seg.codes().map(|(codes, scales)| {
                    (
                        codes
                            .get(c.start * self.dim..c.end * self.dim)
                            .unwrap_or(&[]),
                        scales.get(c.start..c.end).unwrap_or(&[]),
                    )
                });
                (
                    seg.keys().get(c.start..c.end).unwrap_or(&[]),
                    seg.vectors()
                        .get(c.start * self.dim..c.end * self.dim)
                        .unwrap_or(&[]),
                    codes,
                )
            }
        }
    }

    #[inline]
    fn accepts(&self, key: u64, filter: Option<KeyFilter<'_>>) -> bool {
        (self.deleted.is_empty() || !self.deleted.contains(key)) && filter.is_none_or(|f| f(key))
    }

    /// Scores one chunk exactly. The filter runs only for rows that would enter the top-k,
    /// so an expensive filter costs little on an unselective scan.
    fn scan_f32(&self, c: Chunk, query: &[f32], p: &SearchParams<'_>) -> TopK {
        let (keys, vectors, _) = self.chunk_rows(c);
        let mut top = TopK::new(p.k);
        each_dot_f32(query, vectors, |row, score| {
            if score > top.threshold()
                && score >= p.min_score
                && let Some(&key) = keys.get(row)
                && self.accepts(key, p.filter)
            {
                top.push(Neighbour { key, score });
            }
        });
        top
    }

    /// Scans one chunk into the collectors: its i8 codes into `approx` when it has them, else
    /// its f32 rows into `exact`. Returns what the probe of an IVF segment decides on: how many
    /// of its rows pass the filter and the tombstones, counted up to `count_to`, how many rows
    /// that count looked at (it goes on while it has found too few, and estimates the filter's
    /// selectivity from the two), and how many that pass score at or near `min_score`.
    fn scan_i8_into(
        &self,
        c: Chunk,
        query: &[f32],
        qcodes: &QueryCodes,
        count_to: usize,
        p: &SearchParams<'_>,
        (approx, exact): (&mut TopK, &mut TopK),
    ) -> Tally {
        let (keys, _, codes) = self.chunk_rows(c);
        let Some((codes, scales)) = codes else {
            let found = self.scan_f32(c, query, p);
            *exact = std::mem::replace(exact, TopK::new(0)).merge(found);
            return Tally::default();
        };
        let mut scan = CodeScan::new(self, c, keys, scales, qcodes, p.filter, None, count_to);
        each_dot_i8(&qcodes.codes, codes, |row, dot| scan.row(row, dot, approx));
        scan.tally
    }

    /// One chunk of a range batch, read once for all its `readers` (indexes into `queries`
    /// and `states`): i8 codes four queries at a time through the multi-query kernel, each
    /// query's rows decided as `scan_i8_into` decides them; f32 rows (a flat segment written
    /// without codes) one query at a time, as `scan_i8_into` reads them.
    fn scan_chunk_for(
        &self,
        c: Chunk,
        readers: &[usize],
        queries: &[RangeQuery<'_>],
        states: &[BatchQuery],
        count_to: usize,
        p: &SearchParams<'_>,
    ) -> Vec<BatchFinding> {
        let (keys, _, codes) = self.chunk_rows(c);
        let Some((codes, scales)) = codes else {
            return readers
                .iter()
                .filter_map(|&i| {
                    let q = queries.get(i)?;
                    let accepts =
                        |key: u64| q.exclude != Some(key) && p.filter.is_none_or(|f| f(key));
                    let own = SearchParams {
                        filter: Some(&accepts),
                        ..*p
                    };
                    let exact = self.scan_f32(c, q.vector, &own);
                    Some((i, Tally::default(), Vec::new(), Some(exact)))
                })
                .collect();
        };
        let mut found = Vec::with_capacity(readers.len());
        for group in readers.chunks(4) {
            let mut scans: Vec<(usize, CodeScan<'_>, Vec<Neighbour>)> = group
                .iter()
                .filter_map(|&i| {
                    let (q, state) = (queries.get(i)?, states.get(i)?);
                    let scan = CodeScan::new(
                        self,
                        c,
                        keys,
                        scales,
                        &state.qcodes,
                        p.filter,
                        q.exclude,
                        count_to,
                    );
                    Some((i, scan, Vec::new()))
                })
                .collect();
            let qcodes: Vec<&[i8]> = scans.iter().map(|s| s.1.qcodes.codes.as_slice()).collect();
            each_dot_i8_tile(&qcodes, self.dim, codes, |row, j, dot| {
                if let Some((_, scan, approx)) = scans.get_mut(j) {
                    scan.row(row, dot, approx);
                }
            });
            found.extend(
                scans
                    .into_iter()
                    .map(|(i, scan, approx)| (i, scan.tally, approx, None)),
            );
        }
        found
    }

    /// Scans `chunks` into the collectors (in parallel when they hold enough rows to pay for
    /// it), adding each IVF segment's accepted rows to its probe.
    fn scan_round(
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
    fn first_chunks(
        &self,
        probe: Probe,
        mut centroids: impl FnMut(usize, &IvfSegment) -> Vec<f32>,
    ) -> (Vec<Chunk>, Vec<ListProbe>) {
        let mut chunks = Vec::new();
        let mut probes = Vec::new();
        for (i, s) in self.sealed.iter().enumerate() {
            match s.as_ivf() {
                None => push_chunks(&mut chunks, Source::Sealed(i), 0..s.len()),
                Some(ivf) => {
                    let probe = ListProbe::new(i, ivf, centroids(i, ivf), probe);
                    for &l in probe.order.get(..probe.probed).unwrap_or(&[]) {
                        push_chunks(&mut chunks, Source::Sealed(i), ivf.list_rows(l as usize));
                    }
                    probes.push(probe);
                }
            }
        }
        push_chunks(&mut chunks, Source::Growing, 0..self.growing_keys.len());
        (chunks, probes)
    }

    /// The lists the probes go on to after a round, in chunks (none: the scan is done).
    fn further_chunks(&self, probes: &mut [ListProbe], candidates: usize) -> Vec<Chunk> {
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
                    );
                }
            }
            probe.probed = next;
        }
        chunks
    }

    /// The i8 scan: every row of the flat segments and the growing rows, the probed lists of
    /// each IVF segment; then the best `candidates` re-ranked exactly.
    fn search_i8(&self, query: &[f32], candidates: usize, p: &SearchParams<'_>) -> Vec<Neighbour> {
        let candidates = candidates.max(p.k);
        let qcodes = QueryCodes::new(query, p);
        let (mut chunks, mut probes) = self.first_chunks(p.probe, |_, ivf| {
            centroid_scores(&[query], ivf, p.probe.rescored(ivf))
                .pop()
                .unwrap_or_default()
        });
        let mut approx = TopK::new(candidates);
        let mut exact = TopK::new(p.k);
        while !chunks.is_empty() {
            self.scan_round(
                &chunks,
                query,
                &qcodes,
                p,
                (&mut approx, &mut exact),
                &mut probes,
            );
            chunks = self.further_chunks(&mut probes, candidates);
        }
        self.rerank(query, approx, exact, p.min_score)
    }

    /// The approximate candidates re-ranked with exact scores, joined with the exact results
    /// (`min_score` applied to the exact scores): an i8 scan's answer.
    fn rerank(&self, query: &[f32], approx: TopK, exact: TopK, min_score: f32) -> Vec<Neighbour> {
        let mut top = exact;
        for n in approx.into_sorted() {
            let (source, row) = Place::unpack(n.key);
            let key = match source {
                Source::Growing => self.growing_keys.get(row),
                Source::Sealed(s) => self.sealed.get(s).and_then(|seg| seg.keys().get(row)),
            };
            if let (Some(&key), Some(v)) = (key, self.row_vector((source, row))) {
                each_dot_f32(query, v, |_, score| {
                    if score >= min_score {
                        top.push(Neighbour { key, score });
                    }
                });
            }
        }
        top.into_sorted()
    }

    /// Many range queries at once (compaction's duplicate search): for each query, exactly
    /// what `search` returns for its vector with `p` and with its `exclude` refused by the
    /// filter. `p` must be an i8 scan (`Scan::I8`) with `Probe::Range`.
    ///
    /// Each round, every chunk of rows some query reads — a list of an IVF segment, a part of
    /// a flat segment or of the growing rows — is read once for all the queries that read it,
    /// their i8 codes four at a time in registers (the multi-query kernel), the chunks in
    /// parallel. One query's rows are decided exactly as its own scan decides them (the same
    /// chunks, counts and candidates), so the answers are the same; what changes is that a
    /// list is read once per batch instead of once per query. The batch holds each query's
    /// probes and candidates at once: callers pass a few thousand queries at a time.
    ///
    /// # Errors
    /// `InvalidParameter` when `p` is not an i8 range scan; as `search`, for the first bad
    /// query.
    pub fn search_range_batch(
        &self,
        queries: &[RangeQuery<'_>],
        p: &SearchParams<'_>,
    ) -> Result<Vec<Vec<Neighbour>>> {
        let (Scan::I8 { candidates }, Probe::Range(_)) = (p.scan, p.probe) else {
            return Err(IndexError::InvalidParameter(
                "a range batch is an i8 scan with Probe::Range",
            ));
        };
        for q in queries {
            validate_vector(self.dim, q.vector)?;
        }
        if p.k == 0 || self.live == 0 {
            return Ok(vec![Vec::new(); queries.len()]);
        }
        let candidates = candidates.max(p.k);
        // Each IVF segment's centroid scores, by segment, then by query.
        let vectors: Vec<&[f32]> = queries.iter().map(|q| q.vector).collect();
        let mut scores: Vec<Vec<Vec<f32>>> = self
            .sealed
            .iter()
            .map(|s| {
                s.as_ivf()
                    .map(|ivf| centroid_scores(&vectors, ivf, p.probe.rescored(ivf)))
                    .unwrap_or_default()
            })
            .collect();
        let mut states: Vec<BatchQuery> = Vec::with_capacity(queries.len());
        for (i, q) in queries.iter().enumerate() {
            let (pending, probes) = self.first_chunks(p.probe, |segment, _| {
                scores
                    .get_mut(segment)
                    .and_then(|by_query| by_query.get_mut(i))
                    .map(std::mem::take)
                    .unwrap_or_default()
            });
            states.push(BatchQuery {
                qcodes: QueryCodes::new(q.vector, p),
                probes,
                approx: TopK::new(candidates),
                exact: TopK::new(p.k),
                pending,
            });
        }
        loop {
            // Each chunk read this round, with the queries that read it.
            let mut readers: std::collections::BTreeMap<u64, (Chunk, Vec<usize>)> =
                std::collections::BTreeMap::new();
            for (i, state) in states.iter_mut().enumerate() {
                for c in state.pending.drain(..) {
                    readers
                        .entry(Place::pack(c.source, c.start))
                        .or_insert_with(|| (c, Vec::new()))
                        .1
                        .push(i);
                }
            }
            if readers.is_empty() {
                break;
            }
            let work: Vec<(Chunk, Vec<usize>)> = readers.into_values().collect();
            let found: Vec<Vec<BatchFinding>> = work
                .par_iter()
                .map(|(c, who)| self.scan_chunk_for(*c, who, queries, &states, candidates, p))
                .collect();
            for ((c, _), findings) in work.iter().zip(found) {
                for (i, tally, approx, exact) in findings {
                    let Some(state) = states.get_mut(i) else {
                        continue;
                    };
                    for n in approx {
                        state.approx.push(n);
                    }
                    if let Some(e) = exact {
                        state.exact = std::mem::replace(&mut state.exact, TopK::new(0)).merge(e);
                    }
                    count_into(&mut state.probes, c.source, tally);
                }
            }
            for state in &mut states {
                state.pending = self.further_chunks(&mut state.probes, candidates);
            }
        }
        Ok(states
            .into_par_iter()
            .zip(queries)
            .map(|(state, q)| self.rerank(q.vector, state.approx, state.exact, p.min_score))
            .collect())
    }

    /// The `k` nearest live rows to `query` that pass the filter, best first.
    ///
    /// Runs on the current rayon pool; `ThreadPool::install` chooses the thread count.
    ///
    /// # Errors
    /// `DimensionMismatch` or `InvalidVector` for a bad query.
    pub fn search(&self, query: &[f32], p: &SearchParams<'_>) -> Result<Vec<Neighbour>> {
        validate_vector(self.dim, query)?;
        if p.k == 0 || self.live == 0 {
            return Ok(Vec::new());
        }
        match p.scan {
            Scan::F32 => Ok(self
                .chunks()
                .par_iter()
                .map(|c| self.scan_f32(*c, query, p))
                .reduce(|| TopK::new(p.k), TopK::merge)
                .into_sorted()),
            Scan::I8 { candidates } => Ok(self.search_i8(query, candidates, p)),
        }
    }

    /// Exact f32 top-k over just `keys` (those live): one dot product per key instead of a
    /// scan, for a filter whose matching keys are few and known (`p.scan` and `p.filter` are
    /// ignored). Ordered as `search`.
    ///
    /// # Errors
    /// `DimensionMismatch` / `NonFinite` for a bad query.
    pub fn search_keys(
        &self,
        query: &[f32],
        keys: &[u64],
        p: &SearchParams<'_>,
    ) -> Result<Vec<Neighbour>> {
        validate_vector(self.dim, query)?;
        let mut top = TopK::new(p.k);
        if p.k == 0 {
            return Ok(Vec::new());
        }
        for &key in keys {
            if let Some(v) = self.vector(key) {
                each_dot_f32(query, v, |_, score| {
                    if score >= p.min_score {
                        top.push(Neighbour { key, score });
                    }
                });
            }
        }
        Ok(top.into_sorted())
    }

    /// Exact f32 search for many queries at once: each chunk of rows is read once for the
    /// whole batch, so the batch costs far less memory traffic than the queries one by one.
    /// `p.scan` is ignored (always exact). Results are in query order.
    ///
    /// # Errors
    /// As `search`, for the first bad query.
    pub fn search_batch(
        &self,
        queries: &[&[f32]],
        p: &SearchParams<'_>,
    ) -> Result<Vec<Vec<Neighbour>>> {
        for q in queries {
            validate_vector(self.dim, q)?;
        }
        if p.k == 0 || self.live == 0 {
            return Ok(vec![Vec::new(); queries.len()]);
        }
        let fresh = || queries.iter().map(|_| TopK::new(p.k)).collect::<Vec<_>>();
        let tops = self
            .chunks()
            .par_iter()
            .map(|c| {
                let (keys, vectors, _) = self.chunk_rows(*c);
                let mut tops = fresh();
                each_dot_f32_batch(queries, self.dim, vectors, |row, q, score| {
                    if let Some(top) = tops.get_mut(q)
                        && score > top.threshold()
                        && score >= p.min_score
                        && let Some(&key) = keys.get(row)
                        && self.accepts(key, p.filter)
                    {
                        top.push(Neighbour { key, score });
                    }
                });
                tops
            })
            .reduce(fresh, |a, b| {
                a.into_iter().zip(b).map(|(x, y)| x.merge(y)).collect()
            });
        Ok(tops.into_iter().map(TopK::into_sorted).collect())
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
