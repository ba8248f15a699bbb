//! The scans of a search, by chunk of rows: exact f32 scores, or i8 codes whose candidates
//! the search re-ranks exactly; a row's place packed into a candidate; what a chunk's scan
//! tells the probe of an IVF segment (`super::probe`).

use super::super::params::{KeyFilter, Probe, RANGE_SLACK, SearchParams};
use super::super::rows::{CHUNK_ROWS, Collection, Source};
use crate::bitcodes::{self, BLOCK_ROWS, Factors, ListTerms, SegmentQuery};
use crate::kernels::{bit_dots, each_dot_f32, each_dot_i8, prefetch};
use crate::quantize;
use crate::segment::{BitCodes, IvfSegment, Sealed};
use crate::topk::{Neighbour, TopK};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// The rows of one chunk: keys, f32 vectors, and i8 codes with scales when it has them (the
/// growing rows always do; a sealed flat segment when written with them).
type ChunkRows<'a> = (&'a [u64], &'a [f32], Option<(&'a [i8], &'a [f32])>);

#[derive(Debug, Clone, Copy)]
pub(super) struct Chunk {
    pub(super) source: Source,
    pub(super) start: usize,
    pub(super) end: usize,
    /// The IVF list the rows belong to, when they are a list's.
    pub(super) list: Option<u32>,
}

/// A row's place, packed into the key field of an i8 scan's candidates: the segment in the top
/// 24 bits (all ones for the growing rows), the row in the low 40 (a segment holds at most 2^40
/// rows; a collection fewer than 2^24 - 1 segments).
pub(super) struct Place;

impl Place {
    const ROW_BITS: u32 = 40;
    const GROWING: u64 = (1 << (64 - Self::ROW_BITS)) - 1;

    pub(super) fn pack(source: Source, row: usize) -> u64 {
        let segment = match source {
            Source::Sealed(s) => s as u64,
            Source::Growing => Self::GROWING,
        };
        (segment << Self::ROW_BITS) | row as u64
    }

    pub(super) fn unpack(place: u64) -> (Source, usize) {
        let segment = place >> Self::ROW_BITS;
        let source = if segment == Self::GROWING {
            Source::Growing
        } else {
            Source::Sealed(segment as usize)
        };
        (source, (place & ((1 << Self::ROW_BITS) - 1)) as usize)
    }
}

/// Splits `rows` of `source` (of IVF list `list`, when they are a list's) into chunks of at
/// most `CHUNK_ROWS`.
pub(super) fn push_chunks(
    out: &mut Vec<Chunk>,
    source: Source,
    rows: std::ops::Range<usize>,
    list: Option<u32>,
) {
    let mut start = rows.start;
    while start < rows.end {
        let end = (start + CHUNK_ROWS).min(rows.end);
        out.push(Chunk {
            source,
            start,
            end,
            list,
        });
        start = end;
    }
}

/// A query's i8 codes, and for a range query (`Probe::Range`) its floor in the scale of the
/// scan's approximate scores (`dot_i8 × row scale`, which leave out the query's own scale);
/// for a top-k query, its rotation by each IVF segment with 1-bit codes (`bitcodes`).
pub(super) struct QueryCodes {
    pub(super) codes: Vec<i8>,
    pub(super) range: bool,
    /// Rows scoring below this are skipped whole: no filter call, no candidate, not counted.
    /// A range query's floor less [`RANGE_SLACK`]; no floor for any other query.
    pub(super) skip_below: f32,
    /// By sealed segment: the query rotated and quantized for a segment with 1-bit codes,
    /// nothing for any other (and for every segment of a range query, which reads the i8
    /// codes: `docs/ivf.md`).
    pub(super) bits: Vec<Option<SegmentQuery>>,
    /// `|q|²`, made with `bits` (only a query that reads bit codes needs it).
    pub(super) norm2: f32,
    /// The best k-th exact score any piece of this query's scan has found so far.
    pub(super) floor: SharedFloor,
}

/// A score that only rises, shared by the pieces of one query's scan that run in parallel:
/// each piece's own top-k holds k results at or above its k-th score, so the query's k-th
/// best is at least the highest of those, and every piece may rule out rows below it. Without
/// it a piece rayon splits off starts from nothing and scored every row exactly until its
/// own top-k filled (5,700 rows a query instead of 130 on 1-thread runs at 64 lists).
pub(super) struct SharedFloor(AtomicU32);

impl SharedFloor {
    fn new() -> SharedFloor {
        SharedFloor(AtomicU32::new(Self::order(f32::NEG_INFINITY)))
    }

    /// `x`'s bits mapped so that unsigned order is the floats' order.
    fn order(x: f32) -> u32 {
        let bits = x.to_bits();
        if bits >> 31 == 1 {
            !bits
        } else {
            bits | 1 << 31
        }
    }

    pub(super) fn get(&self) -> f32 {
        let u = self.0.load(Ordering::Relaxed);
        f32::from_bits(if u >> 31 == 1 { u & !(1 << 31) } else { !u })
    }

    pub(super) fn raise(&self, x: f32) {
        if !x.is_nan() {
            self.0.fetch_max(Self::order(x), Ordering::Relaxed);
        }
    }
}

impl QueryCodes {
    pub(super) fn new(query: &[f32], p: &SearchParams<'_>) -> QueryCodes {
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
            bits: Vec::new(),
            norm2: 0.0,
            floor: SharedFloor::new(),
        }
    }

    /// The query rotated and quantized by each of `collection`'s segments with 1-bit codes
    /// (a top-k query only): one `dim × dim` product and one set of nibble tables a segment,
    /// shared by every list the probe reads there.
    pub(super) fn with_bit_queries(mut self, collection: &Collection, query: &[f32]) -> QueryCodes {
        if self.range || !collection.bit_scan {
            return self;
        }
        self.norm2 = query.iter().map(|x| x * x).sum();
        self.bits = collection
            .sealed
            .iter()
            .map(|s| {
                let codes = s.as_ivf().and_then(IvfSegment::bit_codes)?;
                let mut rotated = vec![0.0; query.len()];
                bitcodes::rotate(codes.rotation, query, &mut rotated);
                Some(SegmentQuery::new(&rotated))
            })
            .collect();
        self
    }
}

/// How a one-query scan reads a chunk (`Collection::read_as`).
enum ReadAs<'a> {
    /// A list of an IVF segment with 1-bit codes, and the query prepared for its segment.
    Bits {
        list: (usize, &'a IvfSegment, BitCodes<'a>),
        query: &'a SegmentQuery,
    },
    /// Rows with i8 codes: the growing rows, a flat segment written with them, a list of an
    /// older IVF segment (or any list for a range query).
    I8 {
        keys: &'a [u64],
        codes: &'a [i8],
        scales: &'a [f32],
    },
    /// A flat segment written without codes: scored exactly.
    F32,
}

/// What a scan of one chunk tells the probe of its segment (`Collection::scan_i8_into`).
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Tally {
    pub(super) accepted: usize,
    pub(super) examined: usize,
    pub(super) in_range: usize,
}

/// Where a scan puts its approximate candidates: the query's collector, or (in a range batch,
/// which keeps every row it finds in range) a list merged into it afterwards.
pub(super) trait Candidates {
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
pub(super) struct CodeScan<'a> {
    collection: &'a Collection,
    source: Source,
    start: usize,
    keys: &'a [u64],
    scales: &'a [f32],
    pub(super) qcodes: &'a QueryCodes,
    filter: Option<KeyFilter<'a>>,
    /// A key this query never returns (a batch query's own row).
    exclude: Option<u64>,
    /// Rows that pass are counted up to this many (the probe goes on while it has too few).
    count_to: usize,
    pub(super) tally: Tally,
}

impl<'a> CodeScan<'a> {
    #[expect(
        clippy::too_many_arguments,
        reason = "one chunk, one query, one filter"
    )]
    pub(super) fn new(
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
            // Every row of an unfiltered chunk is counted already: counting its rows again
            // (as this did) let a list of 79 rows count 100 and stopped the probe of a small
            // nprobe at one list, below the candidates it promises to gather.
            count_to: if unfiltered { 0 } else { count_to },
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
    pub(super) fn row(&mut self, row: usize, dot: i32, approx: &mut impl Candidates) {
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

impl Collection {
    /// Every row, in chunks: what an exact scan reads.
    pub(super) fn chunks(&self) -> Vec<Chunk> {
        let mut out = Vec::new();
        for (i, s) in self.sealed.iter().enumerate() {
            push_chunks(&mut out, Source::Sealed(i), 0..s.len(), None);
        }
        push_chunks(&mut out, Source::Growing, 0..self.growing_keys.len(), None);
        out
    }

    pub(super) fn chunk_rows(&self, c: Chunk) -> ChunkRows<'_> {
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
    pub(super) fn accepts(&self, key: u64, filter: Option<KeyFilter<'_>>) -> bool {
        (self.deleted.is_empty() || !self.deleted.contains(key)) && filter.is_none_or(|f| f(key))
    }

    /// Scores one chunk exactly. The filter runs only for rows that would enter the top-k,
    /// so an expensive filter costs little on an unselective scan.
    pub(super) fn scan_f32(&self, c: Chunk, query: &[f32], p: &SearchParams<'_>) -> TopK {
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

    /// How a one-query scan reads chunk `c`: every kind of rows it can meet, so a new code is
    /// a new arm here and in `scan_i8_into`, matched exhaustively.
    fn read_as<'a>(&'a self, c: Chunk, qcodes: &'a QueryCodes) -> ReadAs<'a> {
        if let (Source::Sealed(s), Some(list)) = (c.source, c.list)
            && let Some(Some(query)) = qcodes.bits.get(s)
            && let Some(ivf) = self.sealed.get(s).and_then(Sealed::as_ivf)
            && let Some(codes) = ivf.bit_codes()
        {
            return ReadAs::Bits {
                list: (list as usize, ivf, codes),
                query,
            };
        }
        match self.chunk_rows(c) {
            (keys, _, Some((codes, scales))) => ReadAs::I8 {
                keys,
                codes,
                scales,
            },
            (_, _, None) => ReadAs::F32,
        }
    }

    /// Scans one chunk into the collectors (`read_as`): a list with 1-bit codes straight into
    /// `exact` (`scan_bits_into`), i8 codes into `approx`, f32 rows without codes into `exact`.
    /// Returns what the probe of an IVF segment decides on: how many of its rows pass the
    /// filter and the tombstones, counted up to `count_to`, how many rows that count looked at
    /// (it goes on while it has found too few, and estimates the filter's selectivity from the
    /// two), and how many that pass score at or near `min_score`.
    pub(super) fn scan_i8_into(
        &self,
        c: Chunk,
        query: &[f32],
        qcodes: &QueryCodes,
        count_to: usize,
        p: &SearchParams<'_>,
        (approx, exact): (&mut TopK, &mut TopK),
    ) -> Tally {
        match self.read_as(c, qcodes) {
            ReadAs::Bits {
                list,
                query: prepared,
            } => {
                let query = (query, prepared, qcodes.norm2, &qcodes.floor);
                self.scan_bits_into(c, list, query, count_to, p, exact)
            }
            ReadAs::I8 {
                keys,
                codes,
                scales,
            } => {
                let mut scan =
                    CodeScan::new(self, c, keys, scales, qcodes, p.filter, None, count_to);
                each_dot_i8(&qcodes.codes, codes, |row, dot| scan.row(row, dot, approx));
                SCANNED
                    .i8_rows
                    .fetch_add(keys.len() as u64, Ordering::Relaxed);
                scan.tally
            }
            ReadAs::F32 => {
                let found = self.scan_f32(c, query, p);
                *exact = std::mem::replace(exact, TopK::new(0)).merge(found);
                Tally::default()
            }
        }
    }

    /// Scans one chunk of list `list` of an IVF segment with 1-bit codes (`docs/ivf.md`,
    /// "1-bit codes with error bounds"): each row's estimated score and its bound from the
    /// codes, and only the rows whose bound reaches the current k-th exact score (or
    /// `min_score`) and that pass the filter scored exactly from their f32 vectors, straight
    /// into `exact`, the query's `floor` raised as it fills. Counts for the probe as
    /// `scan_i8_into` does.
    fn scan_bits_into(
        &self,
        c: Chunk,
        (list, ivf, codes): (usize, &IvfSegment, BitCodes<'_>),
        (query, prepared, norm2, floor): (&[f32], &SegmentQuery, f32, &SharedFloor),
        count_to: usize,
        p: &SearchParams<'_>,
        exact: &mut TopK,
    ) -> Tally {
        let dim = self.dim;
        let Some(centroid) = ivf.centroids().get(list * dim..(list + 1) * dim) else {
            return Tally::default();
        };
        let mut centroid_score = 0.0;
        each_dot_f32(query, centroid, |_, s| centroid_score = s);
        let centroid_norm2 = ivf.centroid_norms().get(list).copied().unwrap_or(0.0);
        let terms = ListTerms::new(centroid_score, norm2, centroid_norm2);
        let (keys, vectors) = (ivf.keys(), ivf.vectors());
        let unfiltered = p.filter.is_none() && self.deleted.is_empty();
        let rows = c.end - c.start;
        let mut tally = if unfiltered {
            Tally {
                accepted: rows,
                examined: rows,
                in_range: 0,
            }
        } else {
            Tally::default()
        };
        let bytes = bitcodes::code_bytes(dim);
        let mut rescored = 0u64;
        let mut dots = [0u32; BLOCK_ROWS];
        let mut upper = [0.0f32; BLOCK_ROWS];
        let mut block = c.start / BLOCK_ROWS;
        while block * BLOCK_ROWS < c.end {
            let first = block * BLOCK_ROWS;
            let rows = first.max(c.start)..(first + BLOCK_ROWS).min(c.end);
            let at = first * bytes;
            bit_dots(
                codes.codes.get(at..at + bytes * BLOCK_ROWS).unwrap_or(&[]),
                &prepared.tables,
                &mut dots,
            );
            // Rows the probe counts are passed to the filter first, while too few have
            // passed (bit `i` of `known`: row `first + i` was; of `passed`: it passed).
            let (mut known, mut passed) = (0u32, 0u32);
            if !unfiltered {
                for row in rows.clone() {
                    if tally.accepted >= count_to {
                        break;
                    }
                    let ok = keys.get(row).is_some_and(|&k| self.accepts(k, p.filter));
                    tally.accepted += usize::from(ok);
                    tally.examined += 1;
                    known |= 1 << (row - first);
                    passed |= u32::from(ok) << (row - first);
                }
            }
            // Every row's upper bound, in one tight pass.
            let factors = codes
                .factors
                .get(rows.start * Factors::WIDTH..rows.end * Factors::WIDTH)
                .unwrap_or(&[]);
            let lane = rows.start - first;
            prepared.upper_bounds(
                terms,
                factors,
                dots.get(lane..).unwrap_or_default(),
                upper.get_mut(lane..).unwrap_or_default(),
            );
            // The rows whose bound reaches the floor and that pass the filter, their vectors
            // asked for all at once (`prefetch`), then scored against the floor as it rises.
            let mut floor_now = exact.threshold().max(p.min_score).max(floor.get());
            let mut candidates = [0u8; BLOCK_ROWS];
            let mut count = 0;
            for row in rows {
                let i = row - first;
                if upper.get(i).is_none_or(|&u| u < floor_now) {
                    continue;
                }
                let ok = if known >> i & 1 == 1 {
                    passed >> i & 1 == 1
                } else {
                    keys.get(row).is_some_and(|&k| self.accepts(k, p.filter))
                };
                if let (true, Some(slot), Some(v)) = (
                    ok,
                    candidates.get_mut(count),
                    vectors.get(row * dim..(row + 1) * dim),
                ) {
                    *slot = u8::try_from(i).unwrap_or(0);
                    count += 1;
                    prefetch(v);
                }
            }
            for &i in candidates.get(..count).unwrap_or_default() {
                let (i, row) = (usize::from(i), first + usize::from(i));
                if upper.get(i).is_none_or(|&u| u < floor_now) {
                    continue;
                }
                let (Some(&key), Some(v)) =
                    (keys.get(row), vectors.get(row * dim..(row + 1) * dim))
                else {
                    continue;
                };
                rescored += 1;
                each_dot_f32(query, v, |_, score| {
                    if score >= p.min_score {
                        exact.push(Neighbour { key, score });
                        floor.raise(exact.threshold());
                    }
                });
                floor_now = exact.threshold().max(p.min_score).max(floor.get());
            }
            block += 1;
        }
        SCANNED.bits_rows.fetch_add(rows as u64, Ordering::Relaxed);
        SCANNED.rescored.fetch_add(rescored, Ordering::Relaxed);
        tally
    }
}

/// Rows the top-k scans of this process have read, by code, and how many rows the bit scan
/// scored exactly (`Collection::scan_counts`): what the benches report as the bytes a query
/// reads. Counted once a chunk, so they cost nothing a row.
pub(super) struct Scanned {
    bits_rows: AtomicU64,
    i8_rows: AtomicU64,
    rescored: AtomicU64,
}

pub(super) static SCANNED: Scanned = Scanned {
    bits_rows: AtomicU64::new(0),
    i8_rows: AtomicU64::new(0),
    rescored: AtomicU64::new(0),
};

/// What `Collection::scan_counts` reports, since the last reset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ScanCounts {
    /// Rows read through their 1-bit codes (IVF segments of version 3).
    pub bits_rows: u64,
    /// Rows read through their i8 codes.
    pub i8_rows: u64,
    /// Rows of the bit scan scored exactly from their f32 vectors.
    pub rescored: u64,
}

impl Scanned {
    pub(super) fn take(&self) -> ScanCounts {
        ScanCounts {
            bits_rows: self.bits_rows.swap(0, Ordering::Relaxed),
            i8_rows: self.i8_rows.swap(0, Ordering::Relaxed),
            rescored: self.rescored.swap(0, Ordering::Relaxed),
        }
    }
}
