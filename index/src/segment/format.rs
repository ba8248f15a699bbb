//! Byte layout of a flat segment. The table is `docs/format/segment-flat.md`; keep them equal.
//!
//! ```text
//! off size field       meaning
//!   0    4 magic       b"MNSF"
//!   4    2 version     u16 LE; readers accept SUPPORTED
//!   6    2 flags       u16 LE; bit 0 = i8 block present; other bits must be 0
//!   8    4 dim         u32 LE; 1..=MAX_DIM
//!  12    4 metric      u32 LE; 0 = dot over unit vectors
//!  16    8 count       u64 LE
//!  24    8 file_len    u64 LE
//!  32   24 owner       v2: the store the file belongs to (`Owner`); v1: zero
//!  56    4 body_crc    crc32 seeded BODY_SEED over bytes 64..file_len
//!  60    4 hdr_crc     crc32 seeded HEADER_SEED over bytes 0..60
//! ```

use std::ops::{Range, RangeInclusive};

/// File magic.
pub const MAGIC: [u8; 4] = *b"MNSF";
/// Version this build writes (v2: the header names its store, `Owner`).
pub const VERSION: u16 = 2;
/// Versions this build reads.
pub const SUPPORTED: RangeInclusive<u16> = 1..=VERSION;
/// The first version whose header carries an `Owner`.
pub const OWNER_VERSION: u16 = 2;
/// Header length; every block starts on a multiple of this.
pub const HEADER_LEN: usize = 64;
/// Flag: an i8 code block and a scale block follow the f32 block.
pub const FLAG_I8_CODES: u16 = 1;
/// Largest dimension a segment may declare.
pub const MAX_DIM: u32 = 4096;
/// The only metric of v1: dot product over unit vectors.
pub const METRIC_DOT: u32 = 0;
/// CRC seed of the header.
pub const HEADER_SEED: u32 = 0x4d4e_5346;
/// CRC seed of the body.
pub const BODY_SEED: u32 = 0x5345_474d;

/// Which store a segment file belongs to: 24 bytes the caller chooses and compares (amberdb
/// writes its store id and incarnation, `docs/durability.md`, "File identity"); the index
/// only carries them. All zero (`Owner::NONE`) says nothing: a file written before owners
/// existed, or by a caller that has none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Owner(pub [u8; OWNER_LEN]);

/// Bytes of an `Owner`.
pub const OWNER_LEN: usize = 24;

impl Owner {
    /// No owner.
    pub const NONE: Owner = Owner([0; OWNER_LEN]);

    /// `None` for `Owner::NONE`.
    #[must_use]
    pub fn known(self) -> Option<Owner> {
        (self != Owner::NONE).then_some(self)
    }
}

/// Rounds `n` up to a multiple of 64.
#[must_use]
pub const fn align64(n: u64) -> u64 {
    n.div_ceil(64) * 64
}

/// Where each block of a segment lies, derived from `count`, `dim` and `flags` alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// Key block.
    pub keys: Range<u64>,
    /// f32 vector block.
    pub vectors: Range<u64>,
    /// i8 code block and f32 scale block, when present.
    pub codes: Option<(Range<u64>, Range<u64>)>,
    /// Total file length.
    pub file_len: u64,
}

impl Layout {
    /// The layout of a segment, or `None` when the sizes overflow u64.
    #[must_use]
    pub fn new(count: u64, dim: u32, with_codes: bool) -> Option<Layout> {
        let dim = u64::from(dim);
        let keys_start = HEADER_LEN as u64;
        let keys_end = keys_start.checked_add(count.checked_mul(8)?)?;
        let vec_start = align64(keys_end);
        let vec_end = vec_start.checked_add(count.checked_mul(dim)?.checked_mul(4)?)?;
        let mut end = align64(vec_end);
        let codes = if with_codes {
            let code_start = end;
            let code_end = code_start.checked_add(count.checked_mul(dim)?)?;
            let scale_start = align64(code_end);
            let scale_end = scale_start.checked_add(count.checked_mul(4)?)?;
            end = align64(scale_end);
            Some((code_start..code_end, scale_start..scale_end))
        } else {
            None
        };
        Some(Layout {
            keys: keys_start..keys_end,
            vectors: vec_start..vec_end,
            codes,
            file_len: end,
        })
    }
}

/// A crc32 with a non-zero seed, so zeroed bytes never validate.
#[must_use]
pub fn seeded_crc(seed: u32, bytes: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new_with_initial(seed);
    h.update(bytes);
    h.finalize()
}

/// `N` bytes at `at`, if the slice holds them.
pub(crate) fn field<const N: usize>(bytes: &[u8], at: usize) -> Option<[u8; N]> {
    bytes.get(at..at + N)?.try_into().ok()
}

/// The block `range` of a validated file as `T`s; empty when out of bounds or misaligned
/// (never for a file whose open checked its layout).
pub(crate) fn cast_block<'a, T: bytemuck::Pod>(bytes: &'a [u8], range: &Range<u64>) -> &'a [T] {
    let (Ok(start), Ok(end)) = (usize::try_from(range.start), usize::try_from(range.end)) else {
        return &[];
    };
    bytes
        .get(start..end)
        .and_then(|b| bytemuck::try_cast_slice(b).ok())
        .unwrap_or(&[])
}

/// Copies `bytes` into `out` at `at` (the encoders' one write; `out` was sized by the layout).
pub(crate) fn put(out: &mut [u8], at: u64, bytes: &[u8]) {
    let Ok(at) = usize::try_from(at) else { return };
    if let Some(dst) = out.get_mut(at..at + bytes.len()) {
        dst.copy_from_slice(bytes);
    }
}

/// Writes the body checksum (bytes 56..60, over the body) and then the header checksum (bytes
/// 60..64, over bytes 0..60) of an encoded 64-byte-header file.
pub(crate) fn seal(out: &mut [u8], body_seed: u32, header_seed: u32) {
    let body_crc = seeded_crc(body_seed, out.get(HEADER_LEN..).unwrap_or(&[]));
    seal_header(out, body_crc, header_seed);
}

/// Writes `body_crc` (bytes 56..60) and then the header checksum (bytes 60..64, over bytes
/// 0..60) into a header: `seal` for a file whose body is not in memory.
pub(crate) fn seal_header(header: &mut [u8], body_crc: u32, header_seed: u32) {
    put(header, 56, &body_crc.to_le_bytes());
    let hdr_crc = seeded_crc(header_seed, header.get(..60).unwrap_or(&[]));
    put(header, 60, &hdr_crc.to_le_bytes());
}
