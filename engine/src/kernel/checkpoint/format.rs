//! Byte layout of a checkpoint. The table is `docs/format/checkpoint.md`; keep them equal.
//!
//! ```text
//! off size field          meaning
//!   0    4 magic          b"MNCK"
//!   4    2 version        u16 LE; readers accept SUPPORTED
//!   6    2 flags          u16 LE; v8: bit 0 DELTA; v14: bit 1 LOG_CRC; the rest 0 (before v8: all 0)
//!   8    8 seq            u64 LE; last log sequence number included
//!  16    8 next_id        u64 LE
//!  24    8 record_count   u64 LE
//!  32    8 segment_count  u64 LE
//!  40    8 body_len       u64 LE
//!  48    4 body_crc       crc32 seeded BODY_SEED over the body
//!  52    8 aux_count      u64 LE; v2 (zero in v1)
//!  60    4 hdr_crc        crc32 seeded HEADER_SEED over bytes 0..60
//!  64   24 owner          v10: store id (16) and incarnation (u64 LE): `identity::owner_of`
//!  88    4 log_crc        v14 with LOG_CRC: the log's running CRC through seq; else zero
//!  92    4 owner_crc      v10: crc32 seeded HEADER_SEED over bytes 64..92
//! body (at 96 from v10, at 64 before): DELTA only: base_seq u64, deleted_count u64   (v8)
//!       segment_count × { segment_id u64, rows u64, kind u8, pad 7 × 0 }   (v5, key order;
//!       v1–v4: { segment_id u64, rows u64 }, every one flat)
//!       aux_count × { type u8, len u32, payload (log.md) }   (v2)
//!       DELTA only: deleted_count × id u64, increasing   (v8)
//!       record_count × record (log.md), in id order
//! ```

use std::ops::RangeInclusive;

/// File magic.
pub const MAGIC: [u8; 4] = *b"MNCK";
/// Version this build writes.
pub const VERSION: u16 = 14;
/// Versions this build reads (v1 has no aux section, v2 no entities in it, v1–v4 no segment
/// kinds, v1–v5 no model and no staged re-embedding, v1–v7 no deltas, v1–v8 no tool role,
/// v1–v9 no owner, v1–v10 no record source ids,
/// v1–v11 no request ids, v1–v12 no claims and pending chunks, v1–v13 no running CRC).
pub const SUPPORTED: RangeInclusive<u16> = 1..=VERSION;
/// The first version whose header names its store.
pub const OWNER_VERSION: u16 = 10;
/// The first version whose aux section may hold request ids (type 16).
pub const REQUEST_VERSION: u16 = 12;
/// The first version whose aux section may hold a partition's claim and pending chunks (types
/// 17 and 18).
pub const CLUSTER_VERSION: u16 = 13;
/// Flag bit: the checkpoint is a delta on the full checkpoint at `base_seq` (v8).
pub const FLAG_DELTA: u16 = 1;
/// Flag bit: `log_crc` holds the log's running CRC through `seq` (v14).
pub const FLAG_LOG_CRC: u16 = 2;
/// The first version that may set `FLAG_LOG_CRC`.
pub const LOG_CRC_VERSION: u16 = 14;

/// Where in the log a checkpoint stands (`docs/cluster.md`, "Running CRC").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogPoint {
    /// The last log sequence number it includes.
    pub seq: u64,
    /// The log's running CRC through `seq`; `None` when its writer did not know it.
    pub crc: Option<u32>,
}
/// The first version that may set `FLAG_DELTA`.
pub const DELTA_VERSION: u16 = 8;

/// Bytes of one segment entry in a checkpoint of `version`.
#[must_use]
pub fn segment_entry_len(version: u16) -> u64 {
    if version >= 5 { 24 } else { 16 }
}
/// What makes a checkpoint a delta (`../../../docs/durability.md`, "Incremental
/// checkpoints"): the full checkpoint it applies to, and the ids live there that are not now.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Delta {
    /// The sequence number of the full checkpoint the delta applies to.
    pub base_seq: u64,
    /// Ids to drop from the base's records, increasing. An id the base does not hold is
    /// nothing to drop (a record restored after the base and deleted again).
    pub deleted: Vec<u64>,
}

/// Header length this build writes.
pub const HEADER_LEN: usize = 96;
/// Header length of v1–v9 (and the part of a v10 header `hdr_crc` covers, with it).
pub const LEGACY_HEADER_LEN: usize = 64;

/// The header length of a file of `version`.
#[must_use]
pub fn header_len(version: u16) -> usize {
    if version >= OWNER_VERSION {
        HEADER_LEN
    } else {
        LEGACY_HEADER_LEN
    }
}
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
