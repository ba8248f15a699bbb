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
    use super::format::{BODY_SEED, Delta, HEADER_LEN, HEADER_SEED, LogPoint};
    use super::reader::{
        CheckpointError, MergeError, check_base, decode, decode_head, decode_merged_into, records,
    };
    use super::writer::{Record, encode};
    use crate::kernel::record::Memory;
    use crate::kernel::segment_file::{SegmentEntry, SegmentKind};
    use crate::kernel::state::tests::record;

    /// A checkpoint at `seq` whose writer did not know the log's running CRC.
    fn at(seq: u64) -> LogPoint {
        LogPoint { seq, crc: None }
    }

    fn crc(seed: u32, b: &[u8]) -> u32 {
        let mut h = crc32fast::Hasher::new_with_initial(seed);
        h.update(b);
        h.finalize()
    }

    /// Recomputes both checksums, so a test can change a field and reach the check after them.
    fn reseal(mut b: Vec<u8>) -> Vec<u8> {
        let body_at = super::format::header_len(u16::from_le_bytes([b[4], b[5]]));
        let body = crc(BODY_SEED, &b[body_at..]);
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
        let bytes = encode(
            amberdb_index::Owner::NONE,
            at(7),
            3,
            &segments,
            &[],
            None,
            records.iter().map(Record::Decoded),
        );
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
        // (A v4 header is the first 64 bytes of a v10 one: no owner.)
        let legacy = super::format::LEGACY_HEADER_LEN;
        let mut v4 = bytes[..legacy].to_vec();
        for s in bytes[HEADER_LEN..HEADER_LEN + 48].chunks(24) {
            v4.extend_from_slice(&s[..16]);
        }
        v4.extend_from_slice(&bytes[HEADER_LEN + 48..]);
        v4[4..6].copy_from_slice(&4u16.to_le_bytes());
        let body_len = (v4.len() - legacy) as u64;
        v4[40..48].copy_from_slice(&body_len.to_le_bytes());
        let c = decode(&reseal(v4)).expect("v4 decodes");
        assert_eq!(
            c.segments,
            [SegmentEntry::flat(9, 300), SegmentEntry::flat(4, 50)]
        );
    }

    /// A delta round-trips, merges into its base (changed replaced, created added, deleted
    /// dropped, an id the base lacks ignored), and every truncation and bit flip of it is
    /// refused.
    #[test]
    fn a_delta_round_trips_merges_into_its_base_and_refuses_every_damage() {
        let base_records = [*record(1, "one"), *record(2, "two"), *record(4, "four")];
        let base = encode(
            amberdb_index::Owner::NONE,
            at(10),
            5,
            &[],
            &[],
            None,
            base_records.iter().map(Record::Decoded),
        );
        let mut changed_two = *record(2, "two");
        changed_two.access_count = 7;
        let delta_records = [changed_two.clone(), *record(6, "six")];
        let delta = Delta {
            base_seq: 10,
            deleted: vec![3, 4],
        };
        let segments = [SegmentEntry::flat(2, 3)];
        let bytes = encode(
            amberdb_index::Owner::NONE,
            at(15),
            7,
            &segments,
            &[],
            Some(&delta),
            delta_records.iter().map(Record::Decoded),
        );
        let c = decode(&bytes).expect("decodes");
        assert_eq!(c.delta.as_ref(), Some(&delta));
        assert_eq!((c.seq, c.next_id), (15, 7));
        assert_eq!(c.segments, segments);
        assert_eq!(c.records, delta_records);

        let (head, base_head) = (decode_head(&bytes).unwrap(), decode_head(&base).unwrap());
        check_base(&delta, head.next_id, &base_head).expect("the base fits");
        let mut located = Vec::new();
        let changed = records(&bytes, &head);
        decode_merged_into(&base, &base_head, &delta.deleted, changed, 2, |b| {
            located.extend(b);
            true
        })
        .unwrap();
        // Each record's offset is where it decodes from, in the file it came from.
        for l in &located {
            let file = if l.in_delta { &bytes } else { &base };
            let again = crate::kernel::record::decode(&mut crate::kernel::codec::Decoder::new(
                &file[l.at..],
            ))
            .unwrap();
            assert_eq!(again, l.record);
            let mut encoded = Vec::new();
            crate::kernel::record::encode(
                &l.record,
                &mut crate::kernel::codec::Encoder::new(&mut encoded),
            );
            assert_eq!(&file[l.at..l.at + l.len], encoded, "its length");
        }
        let merged: Vec<Memory> = located.into_iter().map(|l| l.record).collect();
        let ids: Vec<u64> = merged.iter().map(|m| m.id.0).collect();
        assert_eq!(ids, [1, 2, 6], "4 deleted, 3 was never there, 6 created");
        assert_eq!(merged[1].access_count, 7, "2 is the delta's version");
        // The delta is not its own base, nor is a full checkpoint at another seq.
        assert!(check_base(&delta, head.next_id, &head).is_err());
        let other = decode_head(&encode(
            amberdb_index::Owner::NONE,
            at(11),
            5,
            &[],
            &[],
            None,
            base_records.iter().map(Record::Decoded),
        ))
        .unwrap();
        assert!(check_base(&delta, head.next_id, &other).is_err());

        for len in 0..bytes.len() {
            assert!(decode(&bytes[..len]).is_err(), "cut at {len}");
        }
        for byte in 0..bytes.len() {
            for bit in 0..8 {
                let mut b = bytes.clone();
                b[byte] ^= 1 << bit;
                assert!(decode(&b).is_err(), "bit {bit} of byte {byte}");
            }
        }
        // Checksums fixed, the fields are still checked: the flag before v8, a base not
        // older than the delta, deleted ids out of order, a record that is also deleted.
        let mut v7 = bytes.clone();
        v7[4..6].copy_from_slice(&7u16.to_le_bytes());
        let mut late_base = bytes.clone();
        late_base[HEADER_LEN..HEADER_LEN + 8].copy_from_slice(&15u64.to_le_bytes());
        let deleted_at = HEADER_LEN + 16 + 24;
        let mut unordered = bytes.clone();
        unordered[deleted_at..deleted_at + 8].copy_from_slice(&4u64.to_le_bytes());
        let mut both = bytes.clone();
        both[deleted_at + 8..deleted_at + 16].copy_from_slice(&6u64.to_le_bytes());
        for (what, b) in [
            ("v7 with the flag", v7),
            ("base not older", late_base),
            ("deleted ids unordered", unordered),
            ("deleted and changed", both),
        ] {
            assert!(
                matches!(decode(&reseal(b)), Err(CheckpointError::Corrupted(_))),
                "{what}"
            );
        }

        // A merge names the file whose records do not decode: the delta's (a record it also
        // deletes, found only as the merge reaches it), or the base's (ids out of order).
        let mut both = bytes.clone();
        both[deleted_at + 8..deleted_at + 16].copy_from_slice(&6u64.to_le_bytes());
        let both = reseal(both);
        let both_head = decode_head(&both).expect("the head alone is sound");
        let deleted = &both_head.delta.as_ref().unwrap().deleted;
        let changed = records(&both, &both_head);
        let merged = decode_merged_into(&base, &base_head, deleted, changed, 1, |_| true);
        assert!(
            matches!(
                merged,
                Err(MergeError::Delta(CheckpointError::Corrupted(_)))
            ),
            "{merged:?}"
        );
        let unordered_base = encode(
            amberdb_index::Owner::NONE,
            at(10),
            5,
            &[],
            &[],
            None,
            [*record(2, "two"), *record(1, "one")]
                .iter()
                .map(Record::Decoded),
        );
        let unordered_head = decode_head(&unordered_base).expect("the head alone is sound");
        let changed = records(&bytes, &head);
        let merged = decode_merged_into(
            &unordered_base,
            &unordered_head,
            &delta.deleted,
            changed,
            1,
            |_| true,
        );
        assert!(
            matches!(merged, Err(MergeError::Base(CheckpointError::Corrupted(_)))),
            "{merged:?}"
        );
    }

    #[test]
    fn v14_holds_the_logs_running_crc_only_with_its_flag() {
        let owner = amberdb_index::Owner([7; 24]);
        let records = [*record(1, "one")];
        let write = |crc| {
            encode(
                owner,
                LogPoint { seq: 4, crc },
                2,
                &[],
                &[],
                None,
                records.iter().map(Record::Decoded),
            )
        };
        let known = write(Some(0xdead_beef));
        assert_eq!(u16::from_le_bytes([known[6], known[7]]), 2, "LOG_CRC set");
        assert_eq!(
            decode_head(&known).expect("decodes").log_crc,
            Some(0xdead_beef)
        );
        assert_eq!(super::reader::header_owner(&known), Some(owner));
        let unknown = write(None);
        assert_eq!(decode_head(&unknown).expect("decodes").log_crc, None);
        // Zero is a CRC like any other when the flag says it is one.
        assert_eq!(
            decode_head(&write(Some(0))).expect("decodes").log_crc,
            Some(0)
        );
        // The field without its flag is a reserved byte set.
        let mut stray = unknown.clone();
        stray[88] = 1;
        let o = crc(HEADER_SEED, &stray[64..92]);
        stray[92..96].copy_from_slice(&o.to_le_bytes());
        assert!(
            matches!(decode_head(&stray), Err(CheckpointError::Corrupted(d)) if d.offset == 88)
        );
        // The flag in a version that does not know it.
        let mut old = known.clone();
        old[4..6].copy_from_slice(&13u16.to_le_bytes());
        assert!(
            matches!(decode_head(&reseal(old)), Err(CheckpointError::Corrupted(d)) if d.offset == 6)
        );
    }
}
/// The full checkpoint the changed ids are counted from, which a delta applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DeltaBase {
    pub(crate) seq: u64,
    /// Its records.
    pub(crate) records: u64,
}
