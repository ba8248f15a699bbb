//! Byte layout of the log. The tables are `docs/format/log.md`; keep them equal.
//!
//! ```text
//! file header (32 bytes)
//! off size field       meaning
//!   0    4 magic       b"MNWL"
//!   4    2 version     u16 LE; readers accept SUPPORTED
//!   6    2 flags       u16 LE; must be 0
//!   8    8 first_seq   u64 LE
//!  16   12 reserved    zero
//!  28    4 hdr_crc     crc32 seeded HEADER_SEED over bytes 0..28
//!
//! frame
//! off size field   meaning
//!   0    4 len     u32 LE = 1 + 8 + payload; MIN_FRAME_LEN..=MAX_FRAME_LEN
//!   4    4 crc     crc32 seeded FRAME_CRC_SEED over bytes 0..4 then 8..8+len
//!   8    1 type    TYPE_STORE | TYPE_DELETE
//!   9    8 seq     u64 LE
//!  17    * payload
//! ```

#![deny(clippy::unwrap_used, clippy::indexing_slicing)]

use crate::codec::{DecodeError, Decoder, Encoder};
use crate::record::{self, Memory, MemoryId};
use std::ops::RangeInclusive;

/// File magic.
pub const MAGIC: [u8; 4] = *b"MNWL";
/// Version this build writes.
pub const VERSION: u16 = 1;
/// Versions this build reads.
pub const SUPPORTED: RangeInclusive<u16> = 1..=1;
/// File header length.
pub const HEADER_LEN: usize = 32;
/// CRC seed of the file header.
pub const HEADER_SEED: u32 = 0x574c_4f47;
/// CRC seed of every frame ("mnem").
pub const FRAME_CRC_SEED: u32 = 0x6d6e_656d;
/// Bytes before `type`: len and crc.
pub const FRAME_PREFIX: usize = 8;
/// Smallest `len`: type + seq.
pub const MIN_FRAME_LEN: u32 = 9;
/// Largest `len`: 16 MiB, far above the largest record (40 KB of content, 16 KB of vector).
pub const MAX_FRAME_LEN: u32 = 16 << 20;
/// Frame type: store a memory.
pub const TYPE_STORE: u8 = 1;
/// Frame type: delete a memory.
pub const TYPE_DELETE: u8 = 2;

/// One operation, as logged.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// A new memory and its vector.
    Store {
        /// The record.
        record: Box<Memory>,
        /// Its embedding.
        vector: Vec<f32>,
    },
    /// A deletion.
    Delete {
        /// The deleted id.
        id: MemoryId,
    },
}

fn crc(seed: u32, parts: &[&[u8]]) -> u32 {
    let mut h = crc32fast::Hasher::new_with_initial(seed);
    for p in parts {
        h.update(p);
    }
    h.finalize()
}

/// The 32-byte header of a log file starting at `first_seq`.
#[must_use]
pub fn encode_header(first_seq: u64) -> Vec<u8> {
    let mut b = Vec::with_capacity(HEADER_LEN);
    b.extend_from_slice(&MAGIC);
    b.extend_from_slice(&VERSION.to_le_bytes());
    b.extend_from_slice(&0u16.to_le_bytes());
    b.extend_from_slice(&first_seq.to_le_bytes());
    b.extend_from_slice(&[0; 12]);
    let c = crc(HEADER_SEED, &[&b]);
    b.extend_from_slice(&c.to_le_bytes());
    b
}

/// Why a header was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderError {
    /// Damaged or short.
    Corrupted(&'static str),
    /// A version this build cannot read.
    Unsupported(u16),
}

/// Decodes a file header, returning `first_seq`.
///
/// # Errors
/// `HeaderError` in the order magic, checksum, version, flags, first_seq.
pub fn decode_header(b: &[u8]) -> Result<u64, HeaderError> {
    let h = b
        .get(..HEADER_LEN)
        .ok_or(HeaderError::Corrupted("shorter than the header"))?;
    if h.get(..4) != Some(&MAGIC[..]) {
        return Err(HeaderError::Corrupted("bad magic"));
    }
    let stored = h
        .get(28..32)
        .and_then(|s| s.try_into().ok())
        .map(u32::from_le_bytes);
    if stored != Some(crc(HEADER_SEED, &[h.get(..28).unwrap_or(&[])])) {
        return Err(HeaderError::Corrupted("header checksum mismatch"));
    }
    let version = h
        .get(4..6)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u16::from_le_bytes);
    if !SUPPORTED.contains(&version) {
        return Err(HeaderError::Unsupported(version));
    }
    if h.get(6..8) != Some(&[0, 0][..]) {
        return Err(HeaderError::Corrupted("unknown flags"));
    }
    let first_seq = h
        .get(8..16)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u64::from_le_bytes);
    if first_seq == 0 {
        return Err(HeaderError::Corrupted("first sequence number is zero"));
    }
    Ok(first_seq)
}

/// Encodes `op` as a frame with sequence number `seq`.
#[must_use]
pub fn encode_frame(seq: u64, op: &Op) -> Vec<u8> {
    let mut b = vec![0u8; FRAME_PREFIX];
    let mut e = Encoder::new(&mut b);
    match op {
        Op::Store { record, vector } => {
            e.u8(TYPE_STORE);
            e.u64(seq);
            record::encode(record, &mut e);
            e.u32(u32::try_from(vector.len()).unwrap_or(u32::MAX));
            for x in vector {
                e.f32(*x);
            }
        }
        Op::Delete { id } => {
            e.u8(TYPE_DELETE);
            e.u64(seq);
            e.u64(id.0);
        }
    }
    let len = u32::try_from(b.len() - FRAME_PREFIX).unwrap_or(u32::MAX);
    let c = crc(
        FRAME_CRC_SEED,
        &[&len.to_le_bytes(), b.get(FRAME_PREFIX..).unwrap_or(&[])],
    );
    if let Some(prefix) = b.get_mut(..FRAME_PREFIX) {
        prefix.copy_from_slice(&[len.to_le_bytes(), c.to_le_bytes()].concat());
    }
    b
}

/// A frame whose length and checksum are valid (its payload is not decoded yet).
#[derive(Debug, Clone, Copy)]
pub struct RawFrame<'a> {
    /// The frame type.
    pub frame_type: u8,
    /// The sequence number.
    pub seq: u64,
    /// The payload.
    pub payload: &'a [u8],
    /// Total bytes of the frame, prefix included.
    pub total_len: usize,
}

/// Checks the frame at the start of `b`: length bounds, then checksum.
///
/// # Errors
/// Which check failed.
pub fn check_frame(b: &[u8]) -> Result<RawFrame<'_>, &'static str> {
    let len_bytes: [u8; 4] = b
        .get(..4)
        .and_then(|s| s.try_into().ok())
        .ok_or("truncated frame prefix")?;
    let len = u32::from_le_bytes(len_bytes);
    if !(MIN_FRAME_LEN..=MAX_FRAME_LEN).contains(&len) {
        return Err("frame length out of bounds");
    }
    let total = FRAME_PREFIX + len as usize;
    let body = b
        .get(FRAME_PREFIX..total)
        .ok_or("frame runs past the end of the file")?;
    let stored = b
        .get(4..8)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u32::from_le_bytes);
    if crc(FRAME_CRC_SEED, &[&len_bytes, body]) != stored {
        return Err("frame checksum mismatch");
    }
    let frame_type = *body.first().ok_or("empty frame")?;
    let seq = body
        .get(1..9)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u64::from_le_bytes);
    Ok(RawFrame {
        frame_type,
        seq,
        payload: body.get(9..).unwrap_or(&[]),
        total_len: total,
    })
}

/// Decodes the payload of a checked frame into an operation.
///
/// # Errors
/// An unknown type or a payload that does not decode completely.
pub fn decode_op(f: &RawFrame<'_>) -> Result<Op, DecodeError> {
    let mut d = Decoder::new(f.payload);
    let op = match f.frame_type {
        TYPE_STORE => {
            let record = record::decode(&mut d)?;
            let dim = d.u32()? as usize;
            if dim > d.remaining() / 4 {
                return d.fail("vector length out of bounds");
            }
            let mut vector = Vec::with_capacity(dim);
            for _ in 0..dim {
                vector.push(d.f32()?);
            }
            Op::Store {
                record: Box::new(record),
                vector,
            }
        }
        TYPE_DELETE => Op::Delete {
            id: MemoryId(d.u64()?),
        },
        _ => return d.fail("unknown frame type"),
    };
    if d.remaining() != 0 {
        return d.fail("trailing bytes in frame");
    }
    Ok(op)
}
