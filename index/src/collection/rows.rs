//! The rows of a [`Collection`]: its sealed segments and growing rows, inserts, deletes
//! (tombstones), sealing and the swap of a run of segments an index build replaces.

use crate::error::{IndexError, Result};
use crate::keyset::KeySet;
use crate::quantize;
use crate::segment::{FlatSegment, Sealed, writer};

#[derive(Debug, Clone, Copy)]
pub(super) enum Source {
    Sealed(usize),
    Growing,
}

/// The vectors of one space: sealed segments (immutable, mapped) and growing rows (in memory).
/// The growing rows keep i8 codes beside their f32 vectors, as a sealed segment does, so the
/// compact scan reads a quarter of their bytes too (`docs/ivf.md`, "Store-time dedup").
#[derive(Debug, Clone)]
pub struct Collection {
    pub(super) dim: usize,
    pub(super) sealed: Vec<Sealed>,
    pub(super) growing_keys: Vec<u64>,
    pub(super) growing_vectors: Vec<f32>,
    pub(super) growing_codes: Vec<i8>,
    pub(super) growing_scales: Vec<f32>,
    pub(super) deleted: KeySet,
    pub(super) live: usize,
    /// Whether an i8 top-k search reads the 1-bit codes of IVF segments that have them
    /// (`bitcodes`); on unless a comparison turns it off (`use_bit_codes`).
    pub(super) bit_scan: bool,
}

/// Checks a vector's dimension and values.
///
/// # Errors
/// `DimensionMismatch`, or `InvalidVector` for a non-finite value.
pub fn validate_vector(dim: usize, v: &[f32]) -> Result<()> {
    if v.len() != dim {
        return Err(IndexError::DimensionMismatch {
            expected: dim,
            got: v.len(),
        });
    }
    if v.iter().any(|x| !x.is_finite()) {
        return Err(IndexError::InvalidVector {
            reason: "non-finite value",
        });
    }
    Ok(())
}

/// The live growing rows copied out of a collection (`Collection::growing_rows`).
#[derive(Debug, Clone)]
pub struct GrowingRows {
    /// The growing rows there were, live or not: what `seal_growing_prefix` replaces.
    pub rows: usize,
    dim: usize,
    keys: Vec<u64>,
    vectors: Vec<f32>,
}

impl GrowingRows {
    /// Live rows copied.
    #[must_use]
    pub fn live(&self) -> usize {
        self.keys.len()
    }

    /// The rows as a flat segment file of the store `owner` names (`segment::writer`).
    ///
    /// # Errors
    /// As `writer::encode`.
    pub fn encode(&self, with_codes: bool, owner: crate::Owner) -> Result<Vec<u8>> {
        writer::encode(&self.keys, &self.vectors, self.dim, with_codes, owner)
    }
}

impl Collection {
    /// An empty collection of `dim`-dimensional vectors.
    #[must_use]
    pub fn new(dim: usize) -> Collection {
        Collection {
            dim,
            sealed: Vec::new(),
            growing_keys: Vec::new(),
            growing_vectors: Vec::new(),
            growing_codes: Vec::new(),
            growing_scales: Vec::new(),
            deleted: KeySet::new(),
            live: 0,
            bit_scan: true,
        }
    }

    /// Whether top-k searches read the 1-bit codes of IVF segments that have them (the
    /// default) or their i8 codes, as before version 3: what the benches and the recall tests
    /// compare.
    pub fn use_bit_codes(&mut self, on: bool) {
        self.bit_scan = on;
    }

    /// Vector dimension.
    #[must_use]
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Live (not deleted) rows.
    #[must_use]
    pub fn len(&self) -> usize {
        self.live
    }

    /// Whether there are no live rows.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Rows in the growing segment, deleted or not.
    #[must_use]
    pub fn growing_len(&self) -> usize {
        self.growing_keys.len()
    }

    /// The sealed segments, in key order.
    #[must_use]
    pub fn sealed(&self) -> &[Sealed] {
        &self.sealed
    }

    pub(super) fn last_key(&self) -> Option<u64> {
        self.growing_keys.last().copied().or_else(|| {
            self.sealed
                .iter()
                .rev()
                .find_map(|s| s.key_bounds())
                .map(|b| b.1)
        })
    }

    /// Appends a sealed segment (loading a store). Segments must arrive in key order and
    /// before any growing row.
    ///
    /// # Errors
    /// `DimensionMismatch`, or `KeyOrder` when its keys do not follow the existing ones.
    pub fn push_sealed(&mut self, segment: impl Into<Sealed>) -> Result<()> {
        let segment = segment.into();
        if segment.dim() != self.dim {
            return Err(IndexError::DimensionMismatch {
                expected: self.dim,
                got: segment.dim(),
            });
        }
        if let (Some(last), Some((first, _))) = (self.last_key(), segment.key_bounds())
            && first <= last
        {
            return Err(IndexError::KeyOrder { key: first, last });
        }
        self.live += segment.len();
        self.sealed.push(segment);
        Ok(())
    }

    /// Makes room for up to `rows` more growing rows (a replay that knows how many may come),
    /// so that appending them copies nothing. Best effort: `rows` is an upper bound read from
    /// a file's length, so memory the system will not give is simply not reserved (appending
    /// then grows the rows as it always does).
    pub fn reserve(&mut self, rows: usize) {
        let values = rows.saturating_mul(self.dim);
        let _ = self.growing_keys.try_reserve(rows).is_ok()
            && self.growing_scales.try_reserve(rows).is_ok()
            && self.growing_vectors.try_reserve(values).is_ok()
            && self.growing_codes.try_reserve(values).is_ok();
    }

    /// Adds a row to the growing segment. Keys must be strictly increasing across the whole
    /// collection.
    ///
    /// # Errors
    /// `DimensionMismatch`, `InvalidVector`, `KeyOrder`; nothing changes on error.
    pub fn insert(&mut self, key: u64, vector: &[f32]) -> Result<()> {
        self.check_insert(key, vector, None)?;
        self.growing_keys.push(key);
        self.growing_vectors.extend_from_slice(vector);
        let start = self.growing_codes.len();
        self.growing_codes.resize(start + self.dim, 0);
        let codes = self.growing_codes.get_mut(start..).unwrap_or(&mut []);
        self.growing_scales
            .push(quantize::encode_into(vector, codes));
        self.live += 1;
        Ok(())
    }

    /// Whether `insert(key, vector)` would succeed, changing nothing; `after` is a key the
    /// caller will insert first (a batch checked before any of it is applied).
    ///
    /// # Errors
    /// As `insert`.
    pub fn check_insert(&self, key: u64, vector: &[f32], after: Option<u64>) -> Result<()> {
        validate_vector(self.dim, vector)?;
        if let Some(last) = self.last_key().max(after).filter(|&last| key <= last) {
            return Err(IndexError::KeyOrder { key, last });
        }
        Ok(())
    }

    pub(super) fn locate(&self, key: u64) -> Option<(Source, usize)> {
        if let Ok(row) = self.growing_keys.binary_search(&key) {
            return Some((Source::Growing, row));
        }
        let seg = self
            .sealed
            .partition_point(|s| s.key_bounds().is_some_and(|(_, last)| last < key));
        let row = self.sealed.get(seg)?.row_of(key)?;
        Some((Source::Sealed(seg), row))
    }

    /// Whether `key` is present and not deleted.
    #[must_use]
    pub fn contains(&self, key: u64) -> bool {
        !self.deleted.contains(key) && self.locate(key).is_some()
    }

    /// The vector stored under `key`, unless deleted.
    #[must_use]
    pub fn vector(&self, key: u64) -> Option<&[f32]> {
        if self.deleted.contains(key) {
            return None;
        }
        self.row_vector(self.locate(key)?)
    }

    pub(super) fn row_vector(&self, (source, row): (Source, usize)) -> Option<&[f32]> {
        match source {
            Source::Growing => self
                .growing_vectors
                .get(row * self.dim..(row + 1) * self.dim),
            Source::Sealed(s) => self.sealed.get(s)?.vector(row),
        }
    }

    /// The deleted rows still held by sealed segments (what a purge rewrites them without):
    /// for each such segment, its position in `sealed()` and the rows' keys, ascending. Reads
    /// only the tombstones, not the rows.
    #[must_use]
    pub fn sealed_tombstones(&self) -> Vec<(usize, Vec<u64>)> {
        let mut by_segment: std::collections::BTreeMap<usize, Vec<u64>> =
            std::collections::BTreeMap::new();
        for key in self.deleted.iter() {
            if let Some((Source::Sealed(seg), _)) = self.locate(key) {
                by_segment.entry(seg).or_default().push(key);
            }
        }
        by_segment
            .into_iter()
            .map(|(seg, mut keys)| {
                keys.sort_unstable();
                (seg, keys)
            })
            .collect()
    }

    /// Marks `key` deleted (a tombstone). Returns whether it was live.
    pub fn delete(&mut self, key: u64) -> bool {
        if self.contains(key) {
            self.deleted.insert(key);
            self.live -= 1;
            true
        } else {
            false
        }
    }

    /// A copy of the live growing rows, for sealing them into a segment file away from the
    /// locks that guard this collection (`seal_growing_prefix` puts the file in their place).
    #[must_use]
    pub fn growing_rows(&self) -> GrowingRows {
        let mut keys = Vec::with_capacity(self.growing_keys.len());
        let mut vectors = Vec::with_capacity(self.growing_vectors.len());
        for (row, &key) in self.growing_keys.iter().enumerate() {
            if !self.deleted.contains(key) {
                keys.push(key);
                vectors.extend_from_slice(
                    self.growing_vectors
                        .get(row * self.dim..(row + 1) * self.dim)
                        .unwrap_or(&[]),
                );
            }
        }
        GrowingRows {
            rows: self.growing_keys.len(),
            dim: self.dim,
            keys,
            vectors,
        }
    }

    /// Replaces the first `rows` growing rows with `segment`, which holds those of them that
    /// were live when `growing_rows` copied them (`None`: none was). Rows inserted since stay
    /// growing; a row deleted since stays in the segment under its tombstone, and the
    /// tombstones of the rows left out are dropped.
    ///
    /// # Errors
    /// `InvalidParameter` when there are fewer growing rows, `DimensionMismatch`, or
    /// `KeyOrder` when the segment holds a key that is not among those rows or leaves out
    /// one that is live; nothing changes on error.
    pub fn seal_growing_prefix(&mut self, rows: usize, segment: Option<FlatSegment>) -> Result<()> {
        let prefix = self
            .growing_keys
            .get(..rows)
            .ok_or(IndexError::InvalidParameter(
                "fewer growing rows than sealed",
            ))?;
        let kept: &[u64] = segment.as_ref().map_or(&[], |s| s.keys());
        if let Some(s) = &segment
            && s.dim() != self.dim
        {
            return Err(IndexError::DimensionMismatch {
                expected: self.dim,
                got: s.dim(),
            });
        }
        let mut next = kept.iter().peekable();
        for &key in prefix {
            if next.peek() == Some(&&key) {
                next.next();
            } else if !self.deleted.contains(key) {
                return Err(IndexError::KeyOrder { key, last: key });
            }
        }
        if let Some(&key) = next.next() {
            return Err(IndexError::KeyOrder { key, last: key });
        }
        let left_out: Vec<u64> = prefix
            .iter()
            .copied()
            .filter(|k| kept.binary_search(k).is_err())
            .collect();
        for key in left_out {
            self.deleted.remove(key);
        }
        self.growing_keys.drain(..rows);
        self.growing_vectors.drain(..rows * self.dim);
        self.growing_codes.drain(..rows * self.dim);
        self.growing_scales.drain(..rows);
        if let Some(segment) = segment {
            self.sealed.push(Sealed::Flat(segment));
        }
        Ok(())
    }

    /// Replaces the sealed segments `run` (adjacent, in key order) by `segment` (an IVF
    /// segment built from their rows, or one segment rewritten without its deleted rows), or
    /// by nothing when no row is left: it must hold every one of their keys that is not
    /// deleted, and no other key (a key deleted since the new segment was made stays in it,
    /// under its tombstone). The tombstones of the keys it left out are dropped. Returns the
    /// replaced segments; nothing changes on error.
    ///
    /// # Errors
    /// `InvalidParameter` for a run out of range, `DimensionMismatch`, or `KeyOrder` naming a
    /// key that differs.
    pub fn replace_run(
        &mut self,
        run: std::ops::Range<usize>,
        segment: Option<Sealed>,
    ) -> Result<Vec<Sealed>> {
        self.swap_run(run, segment, false)
            .map(|(replaced, _)| replaced)
    }

    /// As [`replace_run`](Self::replace_run) for a segment built from rows some of which a
    /// rewrite of the run has dropped since (a purge during an index build): a key of
    /// `segment` that is in no segment now enters deleted, under a tombstone, since keys are
    /// never given twice. Returns the replaced segments and how many keys entered so.
    ///
    /// # Errors
    /// As `replace_run`, and `KeyOrder` for a key of `segment` held outside the run.
    pub fn absorb_run(
        &mut self,
        run: std::ops::Range<usize>,
        segment: Sealed,
    ) -> Result<(Vec<Sealed>, usize)> {
        self.swap_run(run, Some(segment), true)
    }

    pub(super) fn swap_run(
        &mut self,
        run: std::ops::Range<usize>,
        segment: Option<Sealed>,
        absorb: bool,
    ) -> Result<(Vec<Sealed>, usize)> {
        let replaced = self
            .sealed
            .get(run.clone())
            .filter(|r| !r.is_empty())
            .ok_or(IndexError::InvalidParameter(
                "no such run of sealed segments",
            ))?;
        if let Some(s) = &segment
            && s.dim() != self.dim
        {
            return Err(IndexError::DimensionMismatch {
                expected: self.dim,
                got: s.dim(),
            });
        }
        let mut old: Vec<u64> = replaced
            .iter()
            .flat_map(|s| s.keys().iter().copied())
            .collect();
        old.sort_unstable();
        let mut dropped = Vec::new();
        let mut absorbed = Vec::new();
        {
            let mut new: Box<dyn Iterator<Item = u64>> = match &segment {
                None => Box::new(std::iter::empty()),
                Some(Sealed::Flat(f)) => Box::new(f.keys().iter().copied()),
                Some(Sealed::Ivf(i)) => Box::new(i.sorted_keys()),
            };
            let mut new = new.by_ref().peekable();
            for &key in &old {
                while absorb && let Some(&extra) = new.peek().filter(|&&k| k < key) {
                    absorbed.push(extra);
                    new.next();
                }
                if new.peek() == Some(&key) {
                    new.next();
                } else if self.deleted.contains(key) {
                    dropped.push(key);
                } else {
                    return Err(IndexError::KeyOrder { key, last: key });
                }
            }
            if absorb {
                absorbed.extend(new.by_ref());
            }
            if let Some(key) = new.next() {
                return Err(IndexError::KeyOrder { key, last: key });
            }
        }
        // An absorbed key must be nowhere else: a key held outside the run would be found
        // twice.
        if let Some(&key) = absorbed.iter().find(|&&k| self.locate(k).is_some()) {
            return Err(IndexError::KeyOrder { key, last: key });
        }
        for key in dropped {
            self.deleted.remove(key);
        }
        for &key in &absorbed {
            self.deleted.insert(key);
        }
        Ok((self.sealed.splice(run, segment).collect(), absorbed.len()))
    }
}

/// Rows scanned by one task; small enough to balance two threads, large enough to amortize
/// task overhead (16,384 rows × 384 f32 = 24 MiB).
pub(super) const CHUNK_ROWS: usize = 16_384;
