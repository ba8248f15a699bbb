//! Opens a flat segment from sealed bytes, checking everything before handing out a slice.

#![deny(clippy::unwrap_used, clippy::indexing_slicing)]

use super::format::{
    BODY_SEED, FLAG_I8_CODES, HEADER_LEN, HEADER_SEED, Layout, MAGIC, MAX_DIM, METRIC_DOT,
    OWNER_LEN, OWNER_VERSION, Owner, SUPPORTED, field, seeded_crc,
};
use crate::error::{IndexError, Result};
use crate::mmap::SealedBytes;
use std::ops::Range;

/// An immutable, validated segment: keys, f32 vectors and optional i8 codes over sealed bytes.
#[derive(Debug, Clone)]
pub struct FlatSegment {
    name: String,
    bytes: SealedBytes,
    dim: usize,
    count: usize,
    layout: Layout,
    owner: Owner,
}

impl FlatSegment {
    /// Validates `bytes` as a segment named `name` (used in errors), in the order of
    /// `docs/format/segment-flat.md`: length, magic, version, flags, dim, metric, header CRC,
    /// layout, body CRC, key order.
    ///
    /// # Errors
    /// `Corrupted` or `UnsupportedVersion`; never panics on any input.
    pub fn open(name: impl Into<String>, bytes: SealedBytes) -> Result<FlatSegment> {
        let name = name.into();
        let corrupt = |offset: u64, reason: &'static str| IndexError::Corrupted {
            file: name.clone(),
            offset,
            reason,
        };
        let b = bytes.as_slice();
        let header = b
            .get(..HEADER_LEN)
            .ok_or_else(|| corrupt(0, "shorter than the header"))?;
        if field::<4>(header, 0) != Some(MAGIC) {
            return Err(corrupt(0, "bad magic"));
        }
        let u16_at = |at| field::<2>(header, at).map_or(0, u16::from_le_bytes);
        let u32_at = |at| field::<4>(header, at).map_or(0, u32::from_le_bytes);
        let u64_at = |at| field::<8>(header, at).map_or(0, u64::from_le_bytes);
        let stored_hdr_crc = u32_at(60);
        if seeded_crc(HEADER_SEED, header.get(..60).unwrap_or(&[])) != stored_hdr_crc {
            return Err(corrupt(60, "header checksum mismatch"));
        }
        let version = u16_at(4);
        if !SUPPORTED.contains(&version) {
            return Err(IndexError::UnsupportedVersion {
                file: name.clone(),
                found: version,
                supported: SUPPORTED,
            });
        }
        let flags = u16_at(6);
        if flags & !FLAG_I8_CODES != 0 {
            return Err(corrupt(6, "unknown flags"));
        }
        let dim = u32_at(8);
        if !(1..=MAX_DIM).contains(&dim) {
            return Err(corrupt(8, "dimension out of range"));
        }
        if u32_at(12) != METRIC_DOT {
            return Err(corrupt(12, "unknown metric"));
        }
        let owner = Owner(field::<OWNER_LEN>(header, 32).unwrap_or_default());
        if version < OWNER_VERSION && owner != Owner::NONE {
            return Err(corrupt(32, "reserved bytes not zero"));
        }
        let count = u64_at(16);
        let file_len = u64_at(24);
        if file_len != b.len() as u64 {
            return Err(corrupt(24, "file length differs from header"));
        }
        let layout = Layout::new(count, dim, flags & FLAG_I8_CODES != 0)
            .filter(|l| l.file_len == file_len)
            .ok_or_else(|| corrupt(16, "count and dimension do not match the file length"))?;
        if seeded_crc(BODY_SEED, b.get(HEADER_LEN..).unwrap_or(&[])) != u32_at(56) {
            return Err(corrupt(56, "body checksum mismatch"));
        }
        let count = usize::try_from(count).map_err(|_| corrupt(16, "count too large"))?;
        let name = name.clone();
        let segment = FlatSegment {
            name,
            bytes,
            dim: dim as usize,
            count,
            layout,
            owner,
        };
        let keys = segment.keys();
        if keys.len() != count || segment.vectors().len() != count * segment.dim {
            return Err(corrupt(HEADER_LEN as u64, "misaligned block"));
        }
        if let Some(i) = keys.windows(2).position(|w| w.first() >= w.get(1)) {
            return Err(corrupt(
                HEADER_LEN as u64 + 8 * (i as u64 + 1),
                "keys not increasing",
            ));
        }
        Ok(segment)
    }

    fn block<T: bytemuck::Pod>(&self, range: &Range<u64>) -> &[T] {
        // `open` checked that every block is in bounds and aligned.
        super::format::cast_block(self.bytes.as_slice(), range)
    }

    /// The segment's name, as given at open.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The store the file names as its own (`Owner::NONE` before v2).
    #[must_use]
    pub fn owner(&self) -> Owner {
        self.owner
    }

    /// Vector dimension.
    #[must_use]
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Number of rows.
    #[must_use]
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether the segment has no rows.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Keys, strictly increasing.
    #[must_use]
    pub fn keys(&self) -> &[u64] {
        self.block(&self.layout.keys)
    }

    /// Row-major f32 vectors, `len() * dim()` values.
    #[must_use]
    pub fn vectors(&self) -> &[f32] {
        self.block(&self.layout.vectors)
    }

    /// The i8 codes (row-major) and per-row scales, when the segment has them.
    #[must_use]
    pub fn codes(&self) -> Option<(&[i8], &[f32])> {
        let (codes, scales) = self.layout.codes.as_ref()?;
        Some((self.block(codes), self.block(scales)))
    }

    /// The f32 vector of row `row`.
    #[must_use]
    pub fn vector(&self, row: usize) -> Option<&[f32]> {
        self.vectors().get(row * self.dim..(row + 1) * self.dim)
    }

    /// The row holding `key`, by binary search.
    #[must_use]
    pub fn row_of(&self, key: u64) -> Option<usize> {
        self.keys().binary_search(&key).ok()
    }
}
