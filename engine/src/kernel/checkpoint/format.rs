//! Byte layout of a checkpoint. The table is `docs/format/checkpoint.md`; keep them equal.
//!
//! ```text
//! off size field          meaning
//!   0    4 magic          b"MNCK"
//!   4    2 version        u16 LE; readers accept SUPPORTED
//!   6    2 flags          u16 LE; must be 0
//!   8    8 seq            u64 LE; last log sequence number included
//!  16    8 next_id        u64 LE
//!  24    8 record_count   u64 LE
//!  32    8 segment_count  u64 LE
//!  40    8 body_len       u64 LE
//!  48    4 body_crc       crc32 seeded BODY_SEED over the body
//!  52    8 aux_count      u64 LE; v2 (zero in v1)
//!  60    4 hdr_crc        crc32 seeded HEADER_SEED over bytes 0..60
//! body: segment_count × { segment_id u64, rows u64, kind u8, pad 7 × 0 }   (v5, key order;
//!       v1–v4: { segment_id u64, rows u64 }, every one flat)
//!       aux_count × { type u8, len u32, payload (log.md) }   (v2)
//!       record_count × record (log.md)
//! ```

use std::ops::RangeInclusive;

/// File magic.
pub const MAGIC: [u8; 4] = *b"MNCK";
/// Version this build writes.
pub const VERSION: u16 = 7;
/// Versions this build reads (v1 has no aux section, v2 no entities in it, v1–v4 no segment
/// kinds, v1–v5 no model and no staged re-embedding).
pub const SUPPORTED: RangeInclusive<u16> = 1..=VERSION;

/// Bytes of one segment entry in a checkpoint of `version`.
#[must_use]
pub fn segment_entry_len(version: u16) -> u64 {
    if version >= 5 { 24 } else { 16 }
}
/// Header length.
pub const HEADER_LEN: usize = 64;
/// CRC seed of the header.
pub const HEADER_SEED: u32 = 0x434b_5054;
/// CRC seed of the body.
pub const BODY_SEED: u32 = 0x424f_4459;
/// Smallest encoded record: the fixed fields plus empty strings and counts.
pub const MIN_RECORD_BYTES: u64 = 8 + 4 + 24 + 8 + 8 + 4 + 32 + 4 + 1 + 1 + 4 + 1 + 4;

/// The file name of the checkpoint at `seq`.
#[must_use]
pub fn file_name(seq: u64) -> String {
    format!("ckpt-{seq:020}.ckpt")
}

/// Parses a checkpoint file name back to its sequence number.
#[must_use]
pub fn parse_file_name(name: &str) -> Option<u64> {
    name.strip_prefix("ckpt-")?
        .strip_suffix(".ckpt")
        .filter(|d| d.len() == 20)?
        .parse()
        .ok()
}
