//! Searching a [`Collection`]: the exact and i8 searches, the re-rank, and range and batch
//! queries, over the scans of `scan` (by chunk of rows) and the probes of `probe` (IVF
//! segments' lists).

mod probe;
mod scan;

pub(crate) use probe::centroid_scores;
pub use scan::ScanCounts;

use super::params::{Probe, Scan, SearchParams};
use super::rows::{Collection, Source, validate_vector};
use crate::error::{IndexError, Result};
use crate::kernels::{each_dot_f32, each_dot_f32_batch, each_dot_i8_tile};
use crate::topk::{Neighbour, TopK};
use probe::{ListProbe, count_into};
use rayon::prelude::*;
use scan::{Chunk, CodeScan, Place, QueryCodes, Tally};

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

impl Collection {
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

    /// The i8 scan: every row of the flat segments and the growing rows, the probed lists of
    /// each IVF segment; then the best `candidates` re-ranked exactly.
    fn search_i8(&self, query: &[f32], candidates: usize, p: &SearchParams<'_>) -> Vec<Neighbour> {
        let candidates = candidates.max(p.k);
        let qcodes = QueryCodes::new(query, p).with_bit_queries(self, query);
        let (mut chunks, mut probes) = self.first_chunks(p.probe, |i, ivf| {
            // A list read through its bit codes scores its centroid exactly itself (the bound
            // needs it): its rank needs no exact score first.
            let reads_bits = qcodes.bits.get(i).is_some_and(Option::is_some);
            let rescore = if reads_bits { 0 } else { p.probe.rescored(ivf) };
            centroid_scores(&[query], ivf, rescore)
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

    /// The rows this process's top-k scans have read since the last call, by code, and how
    /// many the 1-bit scan scored exactly: the benches' bytes a query reads. Process-wide (every
    /// collection, every thread), counted once a chunk.
    #[must_use]
    pub fn scan_counts() -> ScanCounts {
        scan::SCANNED.take()
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
