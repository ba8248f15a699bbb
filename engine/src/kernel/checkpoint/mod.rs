//! Checkpoints: the metadata table and the sealed-segment list as of one log sequence number.
//!
//! Guarantees: a checkpoint is decoded only after its header and body checksums match and
//! every count is bounded by the bytes present; a bad one is a typed error and recovery falls
//! back to an older checkpoint or a full log replay. Not done here: writing the file (the
//! store does, `docs/durability.md` steps C3–C4).

pub mod format;
pub mod reader;
pub mod writer;

#[cfg(test)]
mod tests {
    use super::format::{BODY_SEED, HEADER_LEN, HEADER_SEED};
    use super::reader::{CheckpointError, decode};
    use super::writer::encode;
    use crate::kernel::segment_file::{SegmentEntry, SegmentKind};
    use crate::kernel::state::tests::record;

    fn crc(seed: u32, b: &[u8]) -> u32 {
        let mut h = crc32fast::Hasher::new_with_initial(seed);
        h.update(b);
        h.finalize()
    }

    /// Recomputes both checksums, so a test can change a field and reach the check after them.
    fn reseal(mut b: Vec<u8>) -> Vec<u8> {
        let body = crc(BODY_SEED, &b[HEADER_LEN..]);
        b[48..52].copy_from_slice(&body.to_le_bytes());
        let header = crc(HEADER_SEED, &b[..60]);
        b[60..64].copy_from_slice(&header.to_le_bytes());
        b
    }

    #[test]
    fn v5_segment_kinds_round_trip_and_a_bad_kind_or_pad_is_refused() {
        let segments = [
            SegmentEntry {
                id: 9,
                rows: 300,
                kind: SegmentKind::Ivf,
            },
            SegmentEntry::flat(4, 50),
        ];
        let records = [*record(1, "one"), *record(2, "two")];
        let bytes = encode(7, 3, &segments, &[], records.iter());
        let c = decode(&bytes).expect("decodes");
        assert_eq!(c.segments, segments, "kinds and key order kept");
        assert_eq!(c.records.len(), 2);
        let kind_at = HEADER_LEN + 16;
        for (at, value) in [
            (kind_at, 0u8),
            (kind_at, 3),
            (kind_at + 1, 1),
            (kind_at + 7, 9),
        ] {
            let mut b = bytes.clone();
            b[at] = value;
            assert!(
                matches!(decode(&reseal(b)), Err(CheckpointError::Corrupted(_))),
                "byte {at} = {value}"
            );
        }
        // A v4 file (16-byte entries, every segment flat) still reads: the same bytes without
        // the kind and pad, the version and length fixed.
        let mut v4 = bytes[..HEADER_LEN].to_vec();
        for s in bytes[HEADER_LEN..HEADER_LEN + 48].chunks(24) {
            v4.extend_from_slice(&s[..16]);
        }
        v4.extend_from_slice(&bytes[HEADER_LEN + 48..]);
        v4[4..6].copy_from_slice(&4u16.to_le_bytes());
        let body_len = (v4.len() - HEADER_LEN) as u64;
        v4[40..48].copy_from_slice(&body_len.to_le_bytes());
        let c = decode(&reseal(v4)).expect("v4 decodes");
        assert_eq!(
            c.segments,
            [SegmentEntry::flat(9, 300), SegmentEntry::flat(4, 50)]
        );
    }
}
