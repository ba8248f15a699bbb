//! What a search of a [`super::Collection`] asks for: the representation it scans, how many IVF
//! lists it probes, the filter, the floor.

use crate::segment::IvfSegment;

/// Which representation the scan reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scan {
    /// Exact f32 dot products.
    F32,
    /// i8 codes first, then an exact f32 re-rank of the best `candidates` rows.
    I8 {
        /// How many approximate candidates to re-rank (at least k).
        candidates: usize,
    },
}

impl Scan {
    /// The i8 scan with the candidate count used in the benchmarks: `max(8·k, 100)`.
    #[must_use]
    pub fn i8_for(k: usize) -> Scan {
        Scan::I8 {
            candidates: (k * 8).max(100),
        }
    }
}

/// How many lists of each IVF segment an i8 search probes first (it probes further when they
/// hold too few rows that pass the filter).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Probe {
    /// The nprobe chosen at build to meet the segment's recall target.
    #[default]
    Built,
    /// This many lists (at most every list).
    Lists(u32),
    /// The least nprobe whose recall@10, measured at build, reached this.
    Recall(f32),
    /// A range query (the best `k` at or above `SearchParams::min_score`, as store-time dedup
    /// asks): this many lists first; if none of their rows reaches the floor (by approximate
    /// score, within [`RANGE_SLACK`]) the probe stops there, else it goes on as `Built`. Most
    /// stores have no near neighbour, and such a query costs a few lists instead of the
    /// built nprobe (on data with little structure, nearly every list; `docs/ivf.md`,
    /// "Store-time dedup").
    Range(u32),
}

/// How far below the floor an approximate (i8) score may be and still count as a row in range
/// for `Probe::Range` (rows further below are skipped). The i8 error of a cosine of unit
/// vectors is at most `‖q‖₁·max|v|/254 + ‖v‖₁·max|q|/254`: about 0.03 at 384 dimensions with
/// no component above 0.2, as MiniLM's are; typically a tenth of that.
pub const RANGE_SLACK: f32 = 0.03;

impl Probe {
    pub(super) fn lists(self, seg: &IvfSegment) -> usize {
        let n = match self {
            Probe::Built => seg.nprobe().0,
            Probe::Lists(n) | Probe::Range(n) => n,
            Probe::Recall(r) => seg.nprobe_for_recall(r),
        };
        (n as usize).clamp(1, seg.nlist())
    }

    /// Lists of `seg` whose centroid scores this probe has exact (`centroid_scores`): enough
    /// for the lists it reads first. A range probe that goes on to the built nprobe orders
    /// the lists past those by their i8 scores: re-scoring all of them up front cost every
    /// STORE's dedup an f32 pass over two thirds of the centroids on data with little
    /// structure (built nprobe 1,234 of 3,384 lists), though most probes stop at their first
    /// lists.
    pub(super) fn rescored(self, seg: &IvfSegment) -> usize {
        rescored_lists(self.lists(seg))
    }
}

/// A predicate over keys, evaluated inside the scan.
pub type KeyFilter<'a> = &'a (dyn Fn(u64) -> bool + Sync);

/// What to search for.
#[derive(Clone, Copy)]
pub struct SearchParams<'a> {
    /// Number of neighbours wanted.
    pub k: usize,
    /// Only keys for which this returns true are considered.
    pub filter: Option<KeyFilter<'a>>,
    /// Representation to scan.
    pub scan: Scan,
    /// Results scoring below this are dropped (after any re-rank).
    pub min_score: f32,
    /// Lists of each IVF segment the i8 scan probes first.
    pub probe: Probe,
}

impl SearchParams<'_> {
    /// Exact top-`k` with no filter and no score floor.
    #[must_use]
    pub fn top(k: usize) -> SearchParams<'static> {
        SearchParams {
            k,
            filter: None,
            scan: Scan::F32,
            min_score: f32::NEG_INFINITY,
            probe: Probe::Built,
        }
    }
}

impl std::fmt::Debug for SearchParams<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SearchParams")
            .field("k", &self.k)
            .field("filter", &self.filter.is_some())
            .field("scan", &self.scan)
            .field("min_score", &self.min_score)
            .field("probe", &self.probe)
            .finish()
    }
}

/// Lists whose centroid scores a probe of `lists` lists has exact: twice as many, and at least
/// 64 (a probe that goes further orders the rest by their i8 scores).
pub(super) fn rescored_lists(lists: usize) -> usize {
    lists.saturating_mul(2).max(64)
}
