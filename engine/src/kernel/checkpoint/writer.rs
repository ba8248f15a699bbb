//! Encodes a checkpoint.

use super::format::{
    BODY_SEED, Delta, FLAG_DELTA, FLAG_LOG_CRC, HEADER_LEN, HEADER_SEED, LEGACY_HEADER_LEN,
    LogPoint, MAGIC, VERSION,
};
use crate::kernel::codec::Encoder;
use crate::kernel::log::Op;
use crate::kernel::log::format::{encode_payload, op_type};
use crate::kernel::record::{self, Memory};
use crate::kernel::segment_file::SegmentEntry;

fn crc(seed: u32, b: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new_with_initial(seed);
    h.update(b);
    h.finalize()
}

/// A record to write: decoded, or its encoding as a checkpoint already holds it (a record an
/// open left in its mapped checkpoint, copied without being decoded: `docs/architecture.md`,
/// "Mapped records"). A record's encoding is the same in every checkpoint version.
#[derive(Debug, Clone, Copy)]
pub enum Record<'a> {
    /// A record in memory, encoded here.
    Decoded(&'a Memory),
    /// A record's encoding, copied as it is.
    Encoded(&'a [u8]),
}

/// Encodes the checkpoint at `at` (its sequence number and the log's running CRC there):
/// sealed `segments` (in key order), the `aux` operations that rebuild the archive, canonical
/// tags and snapshots, and `records` (in id order): every live record, or with `delta` the
/// records changed or created since its base; a file of the store `owner` names.
#[must_use]
pub fn encode<'a>(
    owner: amberdb_index::Owner,
    at: LogPoint,
    next_id: u64,
    segments: &[SegmentEntry],
    aux: &[Op],
    delta: Option<&Delta>,
    records: impl ExactSizeIterator<Item = Record<'a>>,
) -> Vec<u8> {
    let record_count = records.len() as u64;
    // The body is encoded after room for the header, which is filled in last: a checkpoint of
    // 1M records is ~230 MB, and building it apart and then copying it cost a second buffer
    // of that size on every checkpoint.
    let mut out = Vec::with_capacity(HEADER_LEN + segments.len() * 24 + records.len() * 256);
    out.resize(HEADER_LEN, 0);
    {
        let mut e = Encoder::new(&mut out);
        if let Some(d) = delta {
            e.u64(d.base_seq);
            e.u64(d.deleted.len() as u64);
        }
        for s in segments {
            e.u64(s.id);
            e.u64(s.rows);
            e.u8(s.kind.code());
            e.bytes(&[0; 7]);
        }
        for op in aux {
            let mut payload = Vec::new();
            encode_payload(op, &mut Encoder::new(&mut payload));
            e.u8(op_type(op));
            e.u32(u32::try_from(payload.len()).unwrap_or(u32::MAX));
            e.bytes(&payload);
        }
        for id in delta.iter().flat_map(|d| &d.deleted) {
            e.u64(*id);
        }
        for r in records {
            match r {
                Record::Decoded(m) => record::encode(m, &mut e),
                Record::Encoded(bytes) => e.bytes(bytes),
            }
        }
    }
    let body = out.get(HEADER_LEN..).unwrap_or(&[]);
    let mut header = Vec::with_capacity(HEADER_LEN);
    let mut e = Encoder::new(&mut header);
    e.bytes(&MAGIC);
    e.u16(VERSION);
    let delta_flag = if delta.is_some() { FLAG_DELTA } else { 0 };
    let crc_flag = if at.crc.is_some() { FLAG_LOG_CRC } else { 0 };
    e.u16(delta_flag | crc_flag);
    e.u64(at.seq);
    e.u64(next_id);
    e.u64(record_count);
    e.u64(segments.len() as u64);
    e.u64(body.len() as u64);
    e.u32(crc(BODY_SEED, body));
    e.u64(aux.len() as u64);
    let h = crc(HEADER_SEED, &header);
    header.extend_from_slice(&h.to_le_bytes());
    header.extend_from_slice(&owner.0);
    header.extend_from_slice(&at.crc.unwrap_or(0).to_le_bytes());
    let o = crc(HEADER_SEED, header.get(LEGACY_HEADER_LEN..).unwrap_or(&[]));
    header.extend_from_slice(&o.to_le_bytes());
    if let Some(room) = out.get_mut(..HEADER_LEN) {
        room.copy_from_slice(&header);
    }
    out
}
