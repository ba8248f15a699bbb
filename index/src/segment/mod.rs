//! Segments: immutable files of keys, f32 vectors and i8 codes. Flat segments
//! (`format`, `reader`, `writer`: rows in key order) and IVF segments (`ivf`: rows grouped by
//! list, `docs/format/segment-ivf.md`); a collection holds either as a [`Sealed`].
//!
//! Guarantees: a segment is only ever read after every byte of it passed the checks of
//! `docs/format/segment-flat.md` (`reader`); a truncated or damaged file is a typed error at
//! open, never a panic or a SIGBUS. Not done here: writing files (the engine writes the bytes
//! `writer::encode` returns, or the pieces `ivf::Kept::write` hands out, through its storage
//! layer) and deletes (tombstones live in `Collection`).

use crate::error::Result;

pub mod format;
pub mod ivf;
pub mod reader;
pub mod writer;

pub use ivf::{BitCodes, IvfSegment};
pub use reader::FlatSegment;

/// A sealed segment of either kind, as a collection holds it. Both keep their rows in
/// contiguous blocks (keys, f32 vectors, i8 codes with scales), so an exact scan reads either
/// the same way; only an IVF segment can be probed.
#[derive(Debug, Clone)]
pub enum Sealed {
    /// Rows in key order.
    Flat(FlatSegment),
    /// Rows grouped by list.
    Ivf(IvfSegment),
}

impl From<FlatSegment> for Sealed {
    fn from(s: FlatSegment) -> Sealed {
        Sealed::Flat(s)
    }
}

impl From<IvfSegment> for Sealed {
    fn from(s: IvfSegment) -> Sealed {
        Sealed::Ivf(s)
    }
}

/// What a segment file's header says of its owner, read without opening the file (a
/// store's census of its files before recovery touches any, `docs/durability.md`, "File
/// identity").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderOwner {
    /// The header (or the owner block) does not read: a damaged file, left to the open.
    Unreadable,
    /// A file of a version before owners, or one written with `Owner::NONE`.
    Unmarked,
    /// The owner the file names, its checksum verified.
    Owned(format::Owner),
}

/// The owner of the flat (`MNSF`) or IVF (`AMIV`) segment file `bytes`, from its header (and,
/// for IVF v2, its owner block) alone.
#[must_use]
pub fn header_owner(bytes: &[u8]) -> HeaderOwner {
    use format::{HEADER_LEN, field, seeded_crc};
    let Some(header) = bytes.get(..HEADER_LEN) else {
        return HeaderOwner::Unreadable;
    };
    let magic = field::<4>(header, 0);
    let hdr_crc = field::<4>(header, 60).map(u32::from_le_bytes);
    let version = field::<2>(header, 4).map_or(0, u16::from_le_bytes);
    let (seed, owner_version) = match magic {
        Some(format::MAGIC) => (format::HEADER_SEED, format::OWNER_VERSION),
        Some(ivf::MAGIC) => (ivf::HEADER_SEED, ivf::OWNER_VERSION),
        _ => return HeaderOwner::Unreadable,
    };
    if hdr_crc != Some(seeded_crc(seed, header.get(..60).unwrap_or(&[]))) {
        return HeaderOwner::Unreadable;
    }
    if version < owner_version {
        return HeaderOwner::Unmarked;
    }
    let owner = if magic == Some(format::MAGIC) {
        field::<{ format::OWNER_LEN }>(header, 32).map(format::Owner)
    } else {
        ivf::owner_at_end(bytes, header)
    };
    match owner {
        Some(o) if o == format::Owner::NONE => HeaderOwner::Unmarked,
        Some(o) => HeaderOwner::Owned(o),
        None => HeaderOwner::Unreadable,
    }
}

/// A segment's file rewritten without some of its rows (`Sealed::rewrite_kept`).
#[derive(Debug)]
pub enum Rewritten<'a> {
    /// No row is kept: the segment goes.
    Empty,
    /// A flat segment's bytes.
    Flat(Vec<u8>),
    /// An IVF segment, written in pieces (`ivf::Kept::write`): its file can be gigabytes.
    Ivf(Box<ivf::Kept<'a>>),
}

impl Rewritten<'_> {
    /// Hands the file to `out` in pieces, in order, until it answers `false`; returns whether
    /// every piece was taken (nothing to hand for `Empty`).
    pub fn write(&self, out: &mut dyn FnMut(&[u8]) -> bool) -> bool {
        match self {
            Rewritten::Empty => true,
            Rewritten::Flat(bytes) => out(bytes),
            Rewritten::Ivf(kept) => kept.write(out),
        }
    }
}

impl Sealed {
    /// This segment's file without the rows `keep` refuses, so that deleted rows leave the
    /// store's files (a purge). An IVF segment keeps its lists and stays IVF unless fewer
    /// rows than lists are left, which are written flat; a flat one stays flat, with i8 codes
    /// when `with_codes`.
    ///
    /// # Errors
    /// As `writer::encode`.
    pub fn rewrite_kept(
        &self,
        keep: &dyn Fn(u64) -> bool,
        with_codes: bool,
        owner: format::Owner,
    ) -> Result<Rewritten<'_>> {
        if let Sealed::Ivf(ivf) = self
            && let Some(kept) = ivf.kept(keep, owner)
        {
            return Ok(Rewritten::Ivf(Box::new(kept)));
        }
        let mut rows: Vec<(u64, usize)> = self
            .keys()
            .iter()
            .enumerate()
            .filter(|(_, k)| keep(**k))
            .map(|(row, &k)| (k, row))
            .collect();
        if rows.is_empty() {
            return Ok(Rewritten::Empty);
        }
        rows.sort_unstable();
        let keys: Vec<u64> = rows.iter().map(|r| r.0).collect();
        let mut vectors = Vec::with_capacity(rows.len() * self.dim());
        for &(_, row) in &rows {
            vectors.extend_from_slice(self.vector(row).unwrap_or(&[]));
        }
        writer::encode(&keys, &vectors, self.dim(), with_codes, owner).map(Rewritten::Flat)
    }

    /// The store the file names as its own.
    #[must_use]
    pub fn owner(&self) -> format::Owner {
        match self {
            Sealed::Flat(s) => s.owner(),
            Sealed::Ivf(s) => s.owner(),
        }
    }

    /// Vector dimension.
    #[must_use]
    pub fn dim(&self) -> usize {
        match self {
            Sealed::Flat(s) => s.dim(),
            Sealed::Ivf(s) => s.dim(),
        }
    }

    /// Rows.
    #[must_use]
    pub fn len(&self) -> usize {
        match self {
            Sealed::Flat(s) => s.len(),
            Sealed::Ivf(s) => s.len(),
        }
    }

    /// Whether it has no rows.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keys in row order (ascending for a flat segment, by list for an IVF one).
    #[must_use]
    pub fn keys(&self) -> &[u64] {
        match self {
            Sealed::Flat(s) => s.keys(),
            Sealed::Ivf(s) => s.keys(),
        }
    }

    /// Row-major f32 vectors.
    #[must_use]
    pub fn vectors(&self) -> &[f32] {
        match self {
            Sealed::Flat(s) => s.vectors(),
            Sealed::Ivf(s) => s.vectors(),
        }
    }

    /// i8 codes and scales, when the segment has them (an IVF segment always does).
    #[must_use]
    pub fn codes(&self) -> Option<(&[i8], &[f32])> {
        match self {
            Sealed::Flat(s) => s.codes(),
            Sealed::Ivf(s) => Some((s.codes(), s.scales())),
        }
    }

    /// The f32 vector of `row`.
    #[must_use]
    pub fn vector(&self, row: usize) -> Option<&[f32]> {
        match self {
            Sealed::Flat(s) => s.vector(row),
            Sealed::Ivf(s) => s.vector(row),
        }
    }

    /// The row holding `key`.
    #[must_use]
    pub fn row_of(&self, key: u64) -> Option<usize> {
        match self {
            Sealed::Flat(s) => s.row_of(key),
            Sealed::Ivf(s) => s.row_of(key),
        }
    }

    /// The smallest and largest key.
    #[must_use]
    pub fn key_bounds(&self) -> Option<(u64, u64)> {
        match self {
            Sealed::Flat(s) => Some((*s.keys().first()?, *s.keys().last()?)),
            Sealed::Ivf(s) => s.key_bounds(),
        }
    }

    /// The IVF segment, when it is one.
    #[must_use]
    pub fn as_ivf(&self) -> Option<&IvfSegment> {
        match self {
            Sealed::Ivf(s) => Some(s),
            Sealed::Flat(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::IndexError;
    use crate::mmap::SealedBytes;

    fn sample(count: usize, dim: usize, codes: bool) -> Vec<u8> {
        let keys: Vec<u64> = (0..count as u64).map(|k| k * 3 + 1).collect();
        #[expect(clippy::cast_precision_loss, reason = "test data")]
        let vectors: Vec<f32> = (0..count * dim).map(|i| (i as f32 * 0.01).sin()).collect();
        writer::encode(&keys, &vectors, dim, codes, format::Owner::NONE).unwrap()
    }

    #[test]
    fn decode_of_encode_is_identity() {
        for codes in [false, true] {
            let bytes = sample(37, 5, codes);
            let seg = FlatSegment::open("t", SealedBytes::copy_from(&bytes)).unwrap();
            assert_eq!(seg.len(), 37);
            assert_eq!(seg.keys()[3], 10);
            assert!((seg.vector(2).unwrap()[1] - (11.0f32 * 0.01).sin()).abs() < 1e-7);
            assert_eq!(seg.codes().is_some(), codes);
            assert_eq!(seg.row_of(10), Some(3));
            assert_eq!(seg.row_of(11), None);
        }
    }

    #[test]
    fn every_truncation_is_a_typed_error() {
        let bytes = sample(9, 4, true);
        for cut in 0..bytes.len() {
            let err = FlatSegment::open("t", SealedBytes::copy_from(&bytes[..cut])).unwrap_err();
            assert!(
                matches!(err, IndexError::Corrupted { .. }),
                "cut {cut}: {err}"
            );
        }
    }

    #[test]
    fn every_bit_flip_is_detected() {
        let bytes = sample(5, 3, true);
        for byte in 0..bytes.len() {
            for bit in 0..8 {
                let mut b = bytes.clone();
                b[byte] ^= 1 << bit;
                let err = FlatSegment::open("t", SealedBytes::copy_from(&b)).unwrap_err();
                assert!(
                    matches!(
                        err,
                        IndexError::Corrupted { .. } | IndexError::UnsupportedVersion { .. }
                    ),
                    "byte {byte} bit {bit}: {err}"
                );
            }
        }
    }

    #[test]
    fn unsorted_keys_are_refused_by_the_writer() {
        assert!(matches!(
            writer::encode(&[2, 1], &[0.0, 0.0], 1, false, format::Owner::NONE),
            Err(IndexError::KeyOrder { key: 1, last: 2 })
        ));
    }
}
