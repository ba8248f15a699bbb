//! IVF segment files (`docs/format/segment-ivf.md`; keep the two equal): encoding and the
//! validating open; `Collection` searches them (issue #16, `docs/ivf.md`).
//!
//! Guarantees: `IvfSegment::open` reads nothing before every check of the format page passed,
//! in its order; a truncated or damaged file is a typed error, never a panic or a read past the
//! mapping; `encode` refuses input that `open` would refuse.

#![deny(clippy::unwrap_used, clippy::indexing_slicing)]

use super::format::{
    HEADER_LEN, MAX_DIM, METRIC_DOT, OWNER_LEN, Owner, align64, field, put, seal, seeded_crc,
};
use crate::bitcodes::{self, BLOCK_ROWS, Factors};
use crate::error::{IndexError, Result};
use crate::mmap::SealedBytes;
use crate::quantize;
use rayon::prelude::*;
use std::ops::{Range, RangeInclusive};
use std::sync::Arc;

mod kept;
pub use kept::Kept;

/// File magic.
pub const MAGIC: [u8; 4] = *b"AMIV";
/// Version this build writes (v2: an owner block ends the file, `Owner`; v3: 1-bit codes with
/// error bounds follow it, `bitcodes`).
pub const VERSION: u16 = 3;
/// Versions this build reads.
pub const SUPPORTED: RangeInclusive<u16> = 1..=VERSION;
/// The first version with an owner block.
pub const OWNER_VERSION: u16 = 2;
/// The first version with 1-bit codes.
pub const BITS_VERSION: u16 = 3;
/// Seed of the rotation a build stores (`bitcodes::rotation`): any fixed seed serves, since
/// the rotation is drawn independently of the rows and kept in the file.
pub const ROTATION_SEED: u64 = 0x2024_0059;
/// CRC seed of the owner block.
pub const OWNER_SEED: u32 = 0x4f57_4e52;
/// Most lists a segment may have.
pub const MAX_NLIST: u32 = 65_536;
/// CRC seed of the header.
pub const HEADER_SEED: u32 = 0x414d_4956;
/// CRC seed of the body.
pub const BODY_SEED: u32 = 0x4956_4244;
/// Points of the recall curve a segment carries (`nprobe → recall@10` at build).
pub const CURVE_POINTS: usize = 32;

/// Where each block lies, derived from `count`, `dim` and `nlist` alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IvfLayout {
    /// `CURVE_POINTS` × `{ nprobe u32, recall f32 }`.
    pub curve: Range<u64>,
    /// `nlist × dim` f32 centroids.
    pub centroids: Range<u64>,
    /// `nlist + 1` u64 prefix sums.
    pub list_start: Range<u64>,
    /// `count` u64 keys, by list.
    pub keys: Range<u64>,
    /// `count` f32 scales.
    pub scales: Range<u64>,
    /// `count × dim` i8 codes.
    pub codes: Range<u64>,
    /// `count × dim` f32 vectors.
    pub vectors: Range<u64>,
    /// `count` u32 row numbers in key order.
    pub by_key: Range<u64>,
    /// v2: the owner (`OWNER_LEN` bytes) and its crc32 (seeded `OWNER_SEED`).
    pub owner: Option<Range<u64>>,
    /// v3: the 1-bit codes' blocks, the last ones.
    pub bits: Option<BitsLayout>,
    /// Total file length.
    pub file_len: u64,
}

impl IvfLayout {
    /// The layout of a file of `version`, or `None` when the sizes overflow.
    #[must_use]
    pub fn new(count: u64, dim: u32, nlist: u32, version: u16) -> Option<IvfLayout> {
        let dim = u64::from(dim);
        let nlist = u64::from(nlist);
        let mut at = HEADER_LEN as u64;
        let mut block = |bytes: u64| -> Option<Range<u64>> {
            let start = align64(at);
            let end = start.checked_add(bytes)?;
            at = end;
            Some(start..end)
        };
        let curve = block(CURVE_POINTS as u64 * 8)?;
        let centroids = block(nlist.checked_mul(dim)?.checked_mul(4)?)?;
        let list_start = block(nlist.checked_add(1)?.checked_mul(8)?)?;
        let keys = block(count.checked_mul(8)?)?;
        let scales = block(count.checked_mul(4)?)?;
        let codes = block(count.checked_mul(dim)?)?;
        let vectors = block(count.checked_mul(dim)?.checked_mul(4)?)?;
        let by_key = block(count.checked_mul(4)?)?;
        let owner = if version >= OWNER_VERSION {
            Some(block(OWNER_LEN as u64 + 4)?)
        } else {
            None
        };
        let bits = if version >= BITS_VERSION {
            let block_len = bitcodes::block_bytes(usize::try_from(dim).ok()?) as u64;
            let blocks = count.div_ceil(BLOCK_ROWS as u64);
            Some(BitsLayout {
                rotation: block(dim.checked_mul(dim)?.checked_mul(4)?)?,
                factors: block(count.checked_mul(4 * Factors::WIDTH as u64)?)?,
                codes: block(blocks.checked_mul(block_len)?)?,
            })
        } else {
            None
        };
        Some(IvfLayout {
            curve,
            centroids,
            list_start,
            keys,
            scales,
            codes,
            vectors,
            by_key,
            owner,
            bits,
            file_len: align64(at),
        })
    }
}

/// Where the 1-bit codes' blocks lie in a version-3 file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BitsLayout {
    /// `dim × dim` f32: the rotation `R`, row-major.
    pub rotation: Range<u64>,
    /// `count × 4` f32: each row's `Factors`, as keys.
    pub factors: Range<u64>,
    /// `ceil(count / 32) × code_bytes(dim) × 32` bytes: the rows' bits in blocks of 32 rows.
    pub codes: Range<u64>,
}

/// A version-3 segment's 1-bit codes (`bitcodes`), as a search reads them.
#[derive(Debug, Clone, Copy)]
pub struct BitCodes<'a> {
    /// `R`, row-major `dim × dim`.
    pub rotation: &'a [f32],
    /// Each row's factors (`Factors::of_row`).
    pub factors: &'a [f32],
    /// The rows' bits in blocks of `BLOCK_ROWS`, byte-major (`bitcodes::put_row`).
    pub codes: &'a [u8],
}

/// What a build hands to `encode`.
#[derive(Debug, Clone, Copy)]
pub struct IvfBuild<'a> {
    /// One key per row, unique (any order).
    pub keys: &'a [u64],
    /// Row-major vectors, `keys.len() × dim`.
    pub vectors: &'a [f32],
    /// Dimension.
    pub dim: usize,
    /// `nlist × dim` unit centroids.
    pub centroids: &'a [f32],
    /// Each row's list, `< nlist`.
    pub assignment: &'a [u32],
    /// The lists a search probes by default.
    pub nprobe: u32,
    /// Mean recall@10 measured at `nprobe`.
    pub built_recall: f32,
    /// The recall asked for.
    pub target_recall: f32,
    /// Queries the recall was measured on.
    pub held_out: u32,
    /// Recall@10 measured at each nprobe tried (nprobe strictly increasing, at most
    /// `CURVE_POINTS`); a per-query recall target maps to the least nprobe that reached it.
    pub curve: &'a [(u32, f32)],
    /// The store the file belongs to.
    pub owner: Owner,
}

/// The owner block of a v2 file: the owner, then its crc32.
fn owner_block(owner: Owner) -> [u8; OWNER_LEN + 4] {
    let mut block = [0u8; OWNER_LEN + 4];
    put(&mut block, 0, &owner.0);
    put(
        &mut block,
        OWNER_LEN as u64,
        &seeded_crc(OWNER_SEED, &owner.0).to_le_bytes(),
    );
    block
}

/// The owner of a v2 file whose checked `header` says its dimension, rows and lists: the
/// owner block's, when the file is as long as the header says and the block's crc matches.
pub(crate) fn owner_at_end(bytes: &[u8], header: &[u8]) -> Option<Owner> {
    let u32_at = |at| field::<4>(header, at).map(u32::from_le_bytes);
    let count = field::<8>(header, 16).map(u64::from_le_bytes)?;
    let file_len = field::<8>(header, 24).map(u64::from_le_bytes)?;
    let version = field::<2>(header, 4).map(u16::from_le_bytes)?;
    let layout = IvfLayout::new(count, u32_at(8)?, u32_at(32)?, version)?;
    if layout.file_len != file_len || file_len != bytes.len() as u64 {
        return None;
    }
    read_owner_block(super::format::cast_block::<u8>(bytes, &layout.owner?))
}

/// The owner an owner block names, when its crc matches.
fn read_owner_block(block: &[u8]) -> Option<Owner> {
    let owner = field::<OWNER_LEN>(block, 0)?;
    let crc = field::<4>(block, OWNER_LEN).map(u32::from_le_bytes)?;
    (seeded_crc(OWNER_SEED, &owner) == crc).then_some(Owner(owner))
}

fn invalid(reason: &'static str) -> IndexError {
    IndexError::InvalidParameter(reason)
}

/// What `encode` checks of a build before it writes a byte: the dimension, the row and
/// centroid counts, the lists, nprobe, the recalls and the curve, finite values. Returns the
/// dimension and nlist as the header stores them.
fn check_build(b: &IvfBuild<'_>) -> Result<(u32, u32)> {
    let dim32 = u32::try_from(b.dim)
        .ok()
        .filter(|d| (1..=MAX_DIM).contains(d))
        .ok_or(invalid("dimension must be 1..=4096"))?;
    let count = b.keys.len();
    if b.vectors.len() != count * b.dim {
        return Err(IndexError::DimensionMismatch {
            expected: count * b.dim,
            got: b.vectors.len(),
        });
    }
    if !b.centroids.len().is_multiple_of(b.dim) {
        return Err(invalid("centroids must be whole vectors"));
    }
    let nlist = u32::try_from(b.centroids.len() / b.dim)
        .ok()
        .filter(|n| (1..=MAX_NLIST).contains(n) && *n as usize <= count)
        .ok_or(invalid(
            "nlist must be 1..=65,536 and at most the row count",
        ))?;
    if b.assignment.len() != count || b.assignment.iter().any(|&a| a >= nlist) {
        return Err(invalid("every row needs a list below nlist"));
    }
    let in_range = (1..=nlist).contains(&b.nprobe)
        && (0.0..=1.0).contains(&b.built_recall)
        && b.target_recall > 0.0
        && b.target_recall <= 1.0;
    if !in_range {
        return Err(invalid("nprobe in 1..=nlist, recalls in [0, 1]"));
    }
    if !curve_is_valid(b.curve, nlist) {
        return Err(invalid(
            "curve: at most 32 points, nprobe increasing in 1..=nlist, recalls in [0, 1]",
        ));
    }
    if b.vectors.iter().chain(b.centroids).any(|x| !x.is_finite()) {
        return Err(IndexError::InvalidVector {
            reason: "non-finite value",
        });
    }
    Ok((dim32, nlist))
}

/// Encodes an IVF segment: rows grouped by list, ascending key within a list.
///
/// # Errors
/// `InvalidParameter` / `InvalidVector` / `DimensionMismatch` for input `open` would refuse.
pub fn encode(b: &IvfBuild<'_>) -> Result<Vec<u8>> {
    let (dim32, nlist) = check_build(b)?;
    let count = b.keys.len();
    let key = |r: usize| b.keys.get(r).copied().unwrap_or(0);
    let list = |r: usize| b.assignment.get(r).copied().unwrap_or(0);
    // Rows in file order: by list, then key.
    let mut order: Vec<usize> = (0..count).collect();
    order.sort_by_key(|&r| (list(r), key(r)));
    let mut sorted = b.keys.to_vec();
    sorted.sort_unstable();
    if sorted.windows(2).any(|w| w.first() == w.get(1)) {
        return Err(invalid("keys must be unique"));
    }
    // Row numbers (in file order) sorted by key.
    let mut by_key: Vec<u32> =
        (0..u32::try_from(count).map_err(|_| invalid("too many rows"))?).collect();
    by_key.sort_by_key(|&i| order.get(i as usize).map_or(0, |&r| key(r)));
    let layout =
        IvfLayout::new(count as u64, dim32, nlist, VERSION).ok_or(invalid("segment too large"))?;
    let len = usize::try_from(layout.file_len).map_err(|_| invalid("segment too large"))?;
    let mut out = vec![0u8; len];
    for (i, (nprobe, recall)) in b.curve.iter().enumerate() {
        let at = layout.curve.start + 8 * i as u64;
        put(&mut out, at, &nprobe.to_le_bytes());
        put(&mut out, at + 4, &recall.to_le_bytes());
    }
    for (i, x) in b.centroids.iter().enumerate() {
        put(
            &mut out,
            layout.centroids.start + 4 * i as u64,
            &x.to_le_bytes(),
        );
    }
    // Prefix sums of the list sizes, counted in one pass.
    let mut sizes = vec![0u64; nlist as usize];
    for &a in b.assignment {
        if let Some(s) = sizes.get_mut(a as usize) {
            *s += 1;
        }
    }
    let mut start = 0u64;
    put(&mut out, layout.list_start.start, &start.to_le_bytes());
    for (l, size) in sizes.iter().enumerate() {
        start += size;
        put(
            &mut out,
            layout.list_start.start + 8 * (l as u64 + 1),
            &start.to_le_bytes(),
        );
    }
    let mut codes = vec![0i8; b.dim];
    for (row, &r) in order.iter().enumerate() {
        let row = row as u64;
        let v = b.vectors.get(r * b.dim..(r + 1) * b.dim).unwrap_or(&[]);
        put(&mut out, layout.keys.start + 8 * row, &key(r).to_le_bytes());
        let scale = quantize::encode_into(v, &mut codes);
        put(
            &mut out,
            layout.scales.start + 4 * row,
            &scale.to_le_bytes(),
        );
        put(
            &mut out,
            layout.codes.start + row * u64::from(dim32),
            bytemuck::cast_slice(&codes),
        );
        for (j, x) in v.iter().enumerate() {
            put(
                &mut out,
                layout.vectors.start + 4 * (row * u64::from(dim32) + j as u64),
                &x.to_le_bytes(),
            );
        }
    }
    for (i, r) in by_key.iter().enumerate() {
        put(
            &mut out,
            layout.by_key.start + 4 * i as u64,
            &r.to_le_bytes(),
        );
    }
    put(&mut out, 0, &MAGIC);
    put(&mut out, 4, &VERSION.to_le_bytes());
    put(&mut out, 8, &dim32.to_le_bytes());
    put(&mut out, 12, &METRIC_DOT.to_le_bytes());
    put(&mut out, 16, &(count as u64).to_le_bytes());
    put(&mut out, 24, &layout.file_len.to_le_bytes());
    put(&mut out, 32, &nlist.to_le_bytes());
    put(&mut out, 36, &b.nprobe.to_le_bytes());
    put(&mut out, 40, &b.built_recall.to_le_bytes());
    put(&mut out, 44, &b.target_recall.to_le_bytes());
    put(&mut out, 48, &b.held_out.to_le_bytes());
    if let Some(at) = &layout.owner {
        put(&mut out, at.start, &owner_block(b.owner));
    }
    if let Some(at) = &layout.bits {
        let rotation = bitcodes::rotation(b.dim, ROTATION_SEED);
        let mut rotated_centroids = vec![0.0f32; b.centroids.len()];
        for (c, out) in b
            .centroids
            .chunks_exact(b.dim)
            .zip(rotated_centroids.chunks_exact_mut(b.dim))
        {
            bitcodes::rotate(&rotation, c, out);
        }
        let (factors, codes) = bit_blocks(b, &order, &rotation, &rotated_centroids);
        put(&mut out, at.rotation.start, bytemuck::cast_slice(&rotation));
        put(&mut out, at.factors.start, bytemuck::cast_slice(&factors));
        put(&mut out, at.codes.start, bytemuck::cast_slice(&codes));
    }
    seal(&mut out, BODY_SEED, HEADER_SEED);
    Ok(out)
}

/// The 1-bit codes of the rows in file order (`order`: file row → build row): each row's
/// factors, and its bits in blocks of `BLOCK_ROWS` (`bitcodes::put_row`). Blocks in
/// parallel, rows rotated four at a time.
fn bit_blocks(
    b: &IvfBuild<'_>,
    order: &[usize],
    rotation: &[f32],
    rotated_centroids: &[f32],
) -> (Vec<f32>, Vec<u8>) {
    let dim = b.dim;
    let words = bitcodes::words(dim);
    fn row(m: &[f32], dim: usize, i: usize) -> &[f32] {
        m.get(i * dim..(i + 1) * dim).unwrap_or(&[])
    }
    let blocks: Vec<(Vec<f32>, Vec<u8>)> = order
        .par_chunks(BLOCK_ROWS)
        .map(|rows| {
            let mut factors = Vec::with_capacity(rows.len() * Factors::WIDTH);
            let mut block = vec![0u8; bitcodes::block_bytes(dim)];
            let mut rotated = vec![vec![0.0f32; dim]; 4];
            let mut bits = vec![0u64; words];
            for (q, four) in rows.chunks(4).enumerate() {
                let xs: Vec<&[f32]> = four.iter().map(|&r| row(b.vectors, dim, r)).collect();
                bitcodes::rotate_four(rotation, &xs, &mut rotated);
                for (k, (&r, rv)) in four.iter().zip(&rotated).enumerate() {
                    let l = b.assignment.get(r).copied().unwrap_or(0) as usize;
                    let f = bitcodes::encode_row(
                        row(b.vectors, dim, r),
                        row(b.centroids, dim, l),
                        rv,
                        row(rotated_centroids, dim, l),
                        &mut bits,
                    );
                    factors.extend(f.to_array());
                    bitcodes::put_row(&mut block, 4 * q + k, &bits);
                }
            }
            (factors, block)
        })
        .collect();
    let mut factors = Vec::with_capacity(order.len() * Factors::WIDTH);
    let mut codes = Vec::with_capacity(blocks.len() * bitcodes::block_bytes(dim));
    for (f, c) in blocks {
        factors.extend(f);
        codes.extend(c);
    }
    (factors, codes)
}

/// Sets the nprobe, its recall and the curve of an encoded segment (what a build measures on
/// the segment it encoded), and seals it again.
///
/// # Errors
/// `InvalidParameter` for values `encode` would refuse, or bytes that are not an encoded
/// segment's.
pub fn set_nprobe(
    bytes: &mut [u8],
    nprobe: u32,
    built_recall: f32,
    curve: &[(u32, f32)],
) -> Result<()> {
    let u32_at = |at: usize| {
        bytes
            .get(at..at + 4)
            .and_then(|b| <[u8; 4]>::try_from(b).ok())
            .map(u32::from_le_bytes)
    };
    let nlist = u32_at(32).ok_or(invalid("not an encoded IVF segment"))?;
    if bytes.get(..4) != Some(&MAGIC[..]) {
        return Err(invalid("not an encoded IVF segment"));
    }
    if !(1..=nlist).contains(&nprobe)
        || !(0.0..=1.0).contains(&built_recall)
        || !curve_is_valid(curve, nlist)
    {
        return Err(invalid(
            "nprobe in 1..=nlist, recalls in [0, 1], a valid curve",
        ));
    }
    let curve_at = align64(HEADER_LEN as u64);
    for i in 0..CURVE_POINTS {
        let (n, r) = curve.get(i).copied().unwrap_or((0, 0.0));
        let at = curve_at + 8 * i as u64;
        put(bytes, at, &n.to_le_bytes());
        put(
            bytes,
            at + 4,
            &if n == 0 { 0u32 } else { r.to_bits() }.to_le_bytes(),
        );
    }
    put(bytes, 36, &nprobe.to_le_bytes());
    put(bytes, 40, &built_recall.to_le_bytes());
    seal(bytes, BODY_SEED, HEADER_SEED);
    Ok(())
}

fn curve_is_valid(curve: &[(u32, f32)], nlist: u32) -> bool {
    curve.len() <= CURVE_POINTS
        && curve
            .iter()
            .all(|(n, r)| (1..=nlist).contains(n) && (0.0..=1.0).contains(r))
        && curve.windows(2).all(|w| match w {
            [a, b] => a.0 < b.0,
            _ => true,
        })
}

/// An open, validated IVF segment.
#[derive(Debug, Clone)]
pub struct IvfSegment {
    bytes: SealedBytes,
    owner: Owner,
    dim: usize,
    count: usize,
    nlist: usize,
    nprobe: u32,
    built_recall: f32,
    curve: Vec<(u32, f32)>,
    layout: IvfLayout,
    /// The centroids' i8 codes and scales (`quantize`), made at open: a query ranks the lists
    /// by these first (a quarter of the bytes of the f32 centroids, which at 4,000 lists were
    /// a fixed 6 MB read a query) and re-scores the best in f32 (`Collection`'s probe).
    centroid_codes: Arc<[i8]>,
    centroid_scales: Arc<[f32]>,
    /// `|c|²` of each centroid, made at open: a probe of the 1-bit codes needs `|q − c|`.
    centroid_norms: Arc<[f32]>,
}

impl IvfSegment {
    /// Validates `bytes` in the order of `docs/format/segment-ivf.md`.
    ///
    /// # Errors
    /// `Corrupted` naming the offset and the check, or `UnsupportedVersion`.
    pub fn open(name: &str, bytes: SealedBytes) -> Result<IvfSegment> {
        let corrupt = |offset: u64, reason: &'static str| IndexError::Corrupted {
            file: name.to_owned(),
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
        let f32_at = |at| field::<4>(header, at).map_or(f32::NAN, f32::from_le_bytes);
        if seeded_crc(HEADER_SEED, header.get(..60).unwrap_or(&[])) != u32_at(60) {
            return Err(corrupt(60, "header checksum mismatch"));
        }
        let version = u16_at(4);
        if !SUPPORTED.contains(&version) {
            return Err(IndexError::UnsupportedVersion {
                file: name.to_owned(),
                found: version,
                supported: SUPPORTED,
            });
        }
        if u16_at(6) != 0 {
            return Err(corrupt(6, "unknown flags"));
        }
        let dim = u32_at(8);
        if !(1..=MAX_DIM).contains(&dim) {
            return Err(corrupt(8, "dimension out of range"));
        }
        if u32_at(12) != METRIC_DOT {
            return Err(corrupt(12, "unknown metric"));
        }
        let count = u64_at(16);
        let nlist = u32_at(32);
        if !(1..=MAX_NLIST).contains(&nlist) || count < u64::from(nlist) {
            return Err(corrupt(32, "nlist out of range"));
        }
        let nprobe = u32_at(36);
        if !(1..=nlist).contains(&nprobe) {
            return Err(corrupt(36, "nprobe out of range"));
        }
        let (built, target) = (f32_at(40), f32_at(44));
        if !((0.0..=1.0).contains(&built) && target > 0.0 && target <= 1.0) {
            return Err(corrupt(40, "recall out of range"));
        }
        if u32_at(52) != 0 {
            return Err(corrupt(52, "reserved bytes not zero"));
        }
        let file_len = u64_at(24);
        if file_len != b.len() as u64 {
            return Err(corrupt(24, "file length differs from header"));
        }
        let layout = IvfLayout::new(count, dim, nlist, version)
            .filter(|l| l.file_len == file_len)
            .ok_or_else(|| {
                corrupt(
                    16,
                    "count, dimension and nlist do not match the file length",
                )
            })?;
        if seeded_crc(BODY_SEED, b.get(HEADER_LEN..).unwrap_or(&[])) != u32_at(56) {
            return Err(corrupt(56, "body checksum mismatch"));
        }
        let owner = match &layout.owner {
            None => Owner::NONE,
            Some(at) => read_owner_block(super::format::cast_block::<u8>(b, at))
                .ok_or_else(|| corrupt(at.start, "owner block checksum mismatch"))?,
        };
        let segment = IvfSegment {
            owner,
            dim: dim as usize,
            count: usize::try_from(count).map_err(|_| corrupt(16, "count too large"))?,
            nlist: nlist as usize,
            nprobe,
            built_recall: built,
            curve: Vec::new(),
            layout,
            bytes,
            centroid_codes: Arc::from([]),
            centroid_scales: Arc::from([]),
            centroid_norms: Arc::from([]),
        };
        let mut segment = segment;
        segment.curve = segment.read_curve(&corrupt)?;
        segment.check_structure(&corrupt)?;
        let dim = segment.dim;
        let mut codes = vec![0i8; segment.centroids().len()];
        let scales: Vec<f32> = segment
            .centroids()
            .chunks_exact(dim)
            .zip(codes.chunks_exact_mut(dim))
            .map(|(c, code)| quantize::encode_into(c, code))
            .collect();
        segment.centroid_codes = codes.into();
        segment.centroid_scales = scales.into();
        segment.centroid_norms = segment
            .centroids()
            .chunks_exact(dim)
            .map(|c| c.iter().map(|x| x * x).sum())
            .collect();
        Ok(segment)
    }

    /// The curve's used points: a prefix of non-zero nprobes, then zero bytes.
    fn read_curve(
        &self,
        corrupt: &impl Fn(u64, &'static str) -> IndexError,
    ) -> Result<Vec<(u32, f32)>> {
        let raw: &[u32] = self.block(&self.layout.curve);
        let points: Vec<(u32, f32)> = raw
            .chunks_exact(2)
            .map(|p| match p {
                [n, r] => (*n, f32::from_bits(*r)),
                _ => (0, 0.0),
            })
            .collect();
        let used = points.iter().take_while(|p| p.0 != 0).count();
        let rest_zero = raw
            .get(2 * used..)
            .is_some_and(|r| r.iter().all(|&w| w == 0));
        let used = points.get(..used).unwrap_or(&[]);
        let nlist = u32::try_from(self.nlist).unwrap_or(0);
        if points.len() != CURVE_POINTS || !rest_zero || !curve_is_valid(used, nlist) {
            return Err(corrupt(
                self.layout.curve.start,
                "recall curve out of order",
            ));
        }
        Ok(used.to_vec())
    }

    fn check_structure(&self, corrupt: &impl Fn(u64, &'static str) -> IndexError) -> Result<()> {
        let (count, dim, nlist) = (self.count, self.dim, self.nlist);
        let starts = self.list_starts();
        let keys = self.keys();
        let by_key = self.by_key();
        let sizes_ok = self.centroids().len() == nlist * dim
            && starts.len() == nlist + 1
            && keys.len() == count
            && self.scales().len() == count
            && self.codes().len() == count * dim
            && self.vectors().len() == count * dim
            && by_key.len() == count;
        if !sizes_ok {
            return Err(corrupt(HEADER_LEN as u64, "misaligned block"));
        }
        if self.centroids().iter().any(|x| !x.is_finite()) {
            return Err(corrupt(self.layout.centroids.start, "centroid not finite"));
        }
        if starts.first() != Some(&0)
            || starts.last() != Some(&(count as u64))
            || starts.windows(2).any(|w| w.first() > w.get(1))
        {
            return Err(corrupt(
                self.layout.list_start.start,
                "list bounds out of order",
            ));
        }
        for l in 0..nlist {
            let rows = self.list_rows(l);
            if keys
                .get(rows)
                .is_none_or(|k| k.windows(2).any(|w| w.first() >= w.get(1)))
            {
                return Err(corrupt(
                    self.layout.keys.start,
                    "keys not increasing in a list",
                ));
            }
        }
        self.check_bits(corrupt)?;
        let key_at = |i: &u32| keys.get(*i as usize).copied();
        let mut seen = vec![false; count];
        for i in by_key {
            match seen.get_mut(*i as usize) {
                Some(s) if !*s => *s = true,
                _ => {
                    return Err(corrupt(
                        self.layout.by_key.start,
                        "by_key is not a permutation",
                    ));
                }
            }
        }
        if by_key
            .windows(2)
            .any(|w| w.first().and_then(key_at) >= w.get(1).and_then(key_at))
        {
            return Err(corrupt(
                self.layout.by_key.start,
                "keys not unique or by_key out of order",
            ));
        }
        Ok(())
    }

    /// A version-3 file's 1-bit codes: every block its size, every row's factors possible, and
    /// the rotation orthogonal on four of its rows.
    fn check_bits(&self, corrupt: &impl Fn(u64, &'static str) -> IndexError) -> Result<()> {
        let (Some(at), Some(codes)) = (&self.layout.bits, self.bit_codes()) else {
            return Ok(());
        };
        let dim = self.dim;
        let sizes_ok = codes.rotation.len() == dim * dim
            && codes.factors.len() == self.count * Factors::WIDTH
            && codes.codes.len() == self.count.div_ceil(BLOCK_ROWS) * bitcodes::block_bytes(dim);
        if !sizes_ok {
            return Err(corrupt(at.rotation.start, "misaligned block"));
        }
        let sample = [0, dim / 3, 2 * dim / 3, dim - 1];
        if !bitcodes::is_orthogonal(codes.rotation, dim, &sample) {
            return Err(corrupt(at.rotation.start, "rotation not orthogonal"));
        }
        if (0..self.count).any(|r| !Factors::of_row(codes.factors, r).is_valid(dim)) {
            return Err(corrupt(at.factors.start, "bit code factors out of range"));
        }
        Ok(())
    }

    /// The 1-bit codes of a version-3 file (`None` before it).
    #[must_use]
    pub fn bit_codes(&self) -> Option<BitCodes<'_>> {
        let at = self.layout.bits.as_ref()?;
        Some(BitCodes {
            rotation: self.block(&at.rotation),
            factors: self.block(&at.factors),
            codes: self.block(&at.codes),
        })
    }

    fn block<T: bytemuck::Pod>(&self, range: &Range<u64>) -> &[T] {
        // `open` checked that every block is in bounds and aligned.
        super::format::cast_block(self.bytes.as_slice(), range)
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

    /// Rows.
    #[must_use]
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether it has no rows (never true for a valid file).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Lists.
    #[must_use]
    pub fn nlist(&self) -> usize {
        self.nlist
    }

    /// The lists a search probes by default, and the recall@10 measured there at build.
    #[must_use]
    pub fn nprobe(&self) -> (u32, f32) {
        (self.nprobe, self.built_recall)
    }

    /// Recall@10 measured at build for each nprobe tried, nprobe increasing.
    #[must_use]
    pub fn curve(&self) -> &[(u32, f32)] {
        &self.curve
    }

    /// The least nprobe whose measured recall reached `target`: the built nprobe when the
    /// curve is empty and the target is no more than it was built for, else every list.
    #[must_use]
    pub fn nprobe_for_recall(&self, target: f32) -> u32 {
        let all = u32::try_from(self.nlist).unwrap_or(u32::MAX);
        if self.curve.is_empty() {
            return if target <= self.built_recall {
                self.nprobe
            } else {
                all
            };
        }
        self.curve
            .iter()
            .find(|(_, r)| *r >= target)
            .map_or(all, |(n, _)| *n)
    }

    /// The f32 vector of `row`.
    #[must_use]
    pub fn vector(&self, row: usize) -> Option<&[f32]> {
        self.vectors().get(row * self.dim..(row + 1) * self.dim)
    }

    /// The smallest and largest key.
    #[must_use]
    pub fn key_bounds(&self) -> Option<(u64, u64)> {
        let keys = self.keys();
        let by_key = self.by_key();
        let at = |i: Option<&u32>| i.and_then(|&r| keys.get(r as usize).copied());
        Some((at(by_key.first())?, at(by_key.last())?))
    }

    /// Keys in ascending order.
    pub fn sorted_keys(&self) -> impl Iterator<Item = u64> + '_ {
        let keys = self.keys();
        self.by_key()
            .iter()
            .map(move |&r| keys.get(r as usize).copied().unwrap_or(0))
    }

    /// The centroids, row-major.
    #[must_use]
    pub fn centroids(&self) -> &[f32] {
        self.block(&self.layout.centroids)
    }

    /// `|c|²` of each centroid.
    #[must_use]
    pub fn centroid_norms(&self) -> &[f32] {
        &self.centroid_norms
    }

    /// The centroids' i8 codes (row-major) and their scales.
    #[must_use]
    pub fn centroid_codes(&self) -> (&[i8], &[f32]) {
        (&self.centroid_codes, &self.centroid_scales)
    }

    fn list_starts(&self) -> &[u64] {
        self.block(&self.layout.list_start)
    }

    /// The rows of list `l`.
    #[must_use]
    pub fn list_rows(&self, l: usize) -> Range<usize> {
        let s = self.list_starts();
        let at = |i: usize| s.get(i).and_then(|&x| usize::try_from(x).ok()).unwrap_or(0);
        at(l)..at(l + 1).max(at(l))
    }

    /// Keys in row order (by list, ascending within a list).
    #[must_use]
    pub fn keys(&self) -> &[u64] {
        self.block(&self.layout.keys)
    }

    /// Per-row i8 scales.
    #[must_use]
    pub fn scales(&self) -> &[f32] {
        self.block(&self.layout.scales)
    }

    /// Row-major i8 codes.
    #[must_use]
    pub fn codes(&self) -> &[i8] {
        self.block(&self.layout.codes)
    }

    /// Row-major f32 vectors.
    #[must_use]
    pub fn vectors(&self) -> &[f32] {
        self.block(&self.layout.vectors)
    }

    fn by_key(&self) -> &[u32] {
        self.block(&self.layout.by_key)
    }

    /// The row holding `key`.
    #[must_use]
    pub fn row_of(&self, key: u64) -> Option<usize> {
        let keys = self.keys();
        let by_key = self.by_key();
        let i = by_key
            .binary_search_by_key(&key, |&r| keys.get(r as usize).copied().unwrap_or(0))
            .ok()?;
        by_key.get(i).map(|&r| r as usize)
    }
}
