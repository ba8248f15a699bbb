//! The segment decoders on random and mutated bytes: never a panic (the bodies of the fuzz
//! targets `segment_open` and `ivf_open`).

use amberdb_index::segment::writer;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = amberdb_index::fuzz_segment_open(&data);
    }

    #[test]
    fn mutated_segments_never_panic(at in 0usize..4096, value in any::<u8>(), cut in 0usize..4096) {
        let keys: Vec<u64> = (1..=9).collect();
        let bytes = writer::encode(&keys, &vec![0.25; 9 * 12], 12, true, amberdb_index::Owner::NONE).unwrap();
        let mut b = bytes.clone();
        let i = at % b.len();
        b[i] = value;
        b.truncate(cut.max(1).min(b.len()));
        let accepted = amberdb_index::fuzz_segment_open(&b);
        prop_assert!(!accepted || b == bytes[..b.len()] && b.len() == bytes.len(), "accepted damaged bytes");
    }

    #[test]
    fn ivf_random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..1024)) {
        let _ = amberdb_index::fuzz_ivf_open(&data);
        let _ = amberdb_index::fuzz_ivf_v3_open(&data);
    }

    #[test]
    fn mutated_ivf_segments_never_panic(at in 0usize..8192, value in any::<u8>(), cut in 0usize..8192) {
        let bytes = super::ivf::small_segment();
        let mut b = bytes.clone();
        let i = at % b.len();
        b[i] = value;
        b.truncate(cut.max(1).min(b.len()));
        let accepted = amberdb_index::fuzz_ivf_v3_open(&b);
        prop_assert!(!accepted || b == bytes, "accepted damaged bytes");
    }
}
