//! Decoders of bytes from disk on random and mutated input: never a panic. These are the
//! bodies of the fuzz targets in `fuzz/` (`log_scan`, `checkpoint_decode`, `identity_decode`).

use amberdb::fuzzing;
use amberdb::log::format::{Op, encode_frame, encode_header};
use amberdb::{Category, Kind, Memory, MemoryId, Timestamp};
use proptest::prelude::*;

fn sample_log() -> Vec<u8> {
    let mut b = encode_header(1, amberdb_index::Owner::NONE);
    for seq in 1..=3u64 {
        // The third is an item (format v7): its key and value are decoded and checked too.
        let item = (seq == 3).then(|| amberdb::Item {
            key: "k".into(),
            value: r#"{"v": [1]}"#.into(),
        });
        let m = Memory {
            id: MemoryId(seq),
            user_id: "u".into(),
            kind: if item.is_some() {
                Kind::Item
            } else {
                Kind::Memory
            },
            session_id: None,
            agent_id: Some("a".into()),
            role: None,
            content: format!("content {seq}"),
            content_hash: [7; 32],
            category: Category::Learning,
            tags: vec!["t".into()],
            created_at: Timestamp(1),
            updated_at: Timestamp(2),
            last_accessed_at: Timestamp(3),
            access_count: 0,
            helpful_count: 0,
            harmful_count: 0,
            confidence: 1.0,
            supersedes: vec![MemoryId(0)],
            valid_from: Timestamp(1),
            valid_to: None,
            decision: None,
            item,
            source_id: (seq == 1).then(|| "msg-1".into()),
        };
        b.extend(encode_frame(
            seq,
            &Op::Store {
                record: Box::new(m),
                vector: vec![0.5; 4],
            },
        ));
    }
    b.extend(encode_frame(4, &Op::Delete { id: MemoryId(2) }));
    b
}

#[test]
fn the_sample_log_decodes_whole() {
    assert_eq!(fuzzing::log_scan(&sample_log()), 4);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic_a_decoder(data in proptest::collection::vec(any::<u8>(), 0..600)) {
        let _ = fuzzing::log_scan(&data);
        let _ = fuzzing::checkpoint_decode(&data);
        let _ = fuzzing::identity_decode(&data);
    }

    #[test]
    fn mutated_logs_never_panic_and_keep_a_valid_prefix(at in any::<usize>(), value in any::<u8>(), cut in any::<usize>()) {
        let good = sample_log();
        let mut b = good.clone();
        let i = at % b.len();
        b[i] = value;
        b.truncate(1 + cut % b.len());
        prop_assert!(fuzzing::log_scan(&b) <= 4);
    }
}
