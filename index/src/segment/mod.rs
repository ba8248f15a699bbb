//! Segments: immutable files of keys, f32 vectors and i8 codes. Flat segments
//! (`format`, `reader`, `writer`) are what stores hold today; IVF segments (`ivf`: rows
//! grouped by list, `docs/format/segment-ivf.md`) are encoded and opened, not yet searched or
//! held by a store (issue #16).
//!
//! Guarantees: a segment is only ever read after every byte of it passed the checks of
//! `docs/format/segment-flat.md` (`reader`); a truncated or damaged file is a typed error at
//! open, never a panic or a SIGBUS. Not done here: writing files (the engine writes the bytes
//! `writer::encode` returns through its storage layer) and deletes (tombstones live in
//! `Collection`).

pub mod format;
pub mod ivf;
pub mod reader;
pub mod writer;

pub use reader::FlatSegment;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::IndexError;
    use crate::mmap::SealedBytes;

    fn sample(count: usize, dim: usize, codes: bool) -> Vec<u8> {
        let keys: Vec<u64> = (0..count as u64).map(|k| k * 3 + 1).collect();
        #[expect(clippy::cast_precision_loss, reason = "test data")]
        let vectors: Vec<f32> = (0..count * dim).map(|i| (i as f32 * 0.01).sin()).collect();
        writer::encode(&keys, &vectors, dim, codes).unwrap()
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
            writer::encode(&[2, 1], &[0.0, 0.0], 1, false),
            Err(IndexError::KeyOrder { key: 1, last: 2 })
        ));
    }
}
