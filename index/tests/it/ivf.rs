//! IVF segment files (`docs/format/segment-ivf.md`): round trip, and every truncation, bit
//! flip and structural lie refused at open.

use amberdb_index::kmeans::{KMeansParams, train};
use amberdb_index::mmap::SealedBytes;
use amberdb_index::segment::format::{HEADER_LEN, seeded_crc};
use amberdb_index::segment::ivf::{
    BODY_SEED, HEADER_SEED, IvfBuild, IvfLayout, IvfSegment, encode,
};
use amberdb_index::{HeaderOwner, Owner, header_owner};

/// The store a test's files belong to.
const OWNER: Owner = Owner([7; 24]);

fn build(
    count: usize,
    dim: usize,
    nlist: usize,
    seed: u64,
) -> (Vec<u64>, Vec<f32>, Vec<u32>, Vec<u8>) {
    let vectors = amberdb_index::synthetic::clustered(count, dim, nlist, 0.4, seed);
    // Keys out of order and sparse, as after deletes and merges.
    let keys: Vec<u64> = (0..count as u64)
        .map(|i| (i * 7919) % 100_003 + 1)
        .collect();
    let c = train(&vectors, dim, &KMeansParams::new(nlist, seed)).unwrap();
    let bytes = encode(&IvfBuild {
        keys: &keys,
        vectors: &vectors,
        dim,
        centroids: &c.centroids,
        assignment: &c.assignment,
        nprobe: 2,
        built_recall: 0.97,
        target_recall: 0.95,
        held_out: 10,
        curve: &[(1, 0.9), (2, 0.97), (nlist as u32, 1.0)],
        owner: OWNER,
    })
    .unwrap();
    (keys, vectors, c.assignment, bytes)
}

#[test]
fn a_segment_round_trips_every_row_in_its_list() {
    let (keys, vectors, assignment, bytes) = build(500, 16, 8, 3);
    let s = IvfSegment::open("t", SealedBytes::copy_from(&bytes)).unwrap();
    assert_eq!(
        (s.len(), s.dim(), s.nlist(), s.nprobe()),
        (500, 16, 8, (2, 0.97))
    );
    let mut total = 0;
    for l in 0..8 {
        total += s.list_rows(l).len();
    }
    assert_eq!(total, 500);
    // The owner block (v2) reads back, at open and from the header alone.
    assert_eq!(s.owner(), OWNER);
    assert_eq!(header_owner(&bytes), HeaderOwner::Owned(OWNER));
    for (i, k) in keys.iter().enumerate() {
        let row = s.row_of(*k).unwrap();
        assert_eq!(s.keys()[row], *k);
        assert_eq!(
            &s.vectors()[row * 16..(row + 1) * 16],
            &vectors[i * 16..(i + 1) * 16]
        );
        // The row sits in the list the clustering gave it.
        assert!(
            s.list_rows(assignment[i] as usize).contains(&row),
            "row {i}"
        );
    }
    assert!(s.row_of(0).is_none());
    assert_eq!(s.curve(), &[(1, 0.9), (2, 0.97), (8, 1.0)]);
    assert_eq!(s.nprobe_for_recall(0.95), 2);
    assert_eq!(s.nprobe_for_recall(0.5), 1);
    assert_eq!(s.nprobe_for_recall(1.0), 8);
    let mut sorted = keys.clone();
    sorted.sort_unstable();
    assert_eq!(s.sorted_keys().collect::<Vec<_>>(), sorted);
    assert_eq!(s.key_bounds(), Some((sorted[0], sorted[499])));
}

#[test]
fn every_truncation_and_every_bit_flip_is_refused_at_open() {
    let (_, _, _, bytes) = build(12, 4, 3, 5);
    for len in 0..bytes.len() {
        assert!(
            IvfSegment::open("t", SealedBytes::copy_from(&bytes[..len])).is_err(),
            "truncated to {len}"
        );
    }
    for at in 0..bytes.len() {
        for bit in 0..8 {
            let mut b = bytes.clone();
            b[at] ^= 1 << bit;
            assert!(
                IvfSegment::open("t", SealedBytes::copy_from(&b)).is_err(),
                "bit {bit} of byte {at}"
            );
        }
    }
}

#[test]
fn a_structurally_wrong_body_is_refused_even_with_good_checksums() {
    let (_, _, _, bytes) = build(12, 4, 3, 5);
    let reseal = |mut b: Vec<u8>| {
        let body = seeded_crc(BODY_SEED, &b[HEADER_LEN..]);
        b[56..60].copy_from_slice(&body.to_le_bytes());
        let hdr = seeded_crc(HEADER_SEED, &b[..60]);
        b[60..64].copy_from_slice(&hdr.to_le_bytes());
        b
    };
    let layout = IvfLayout::new(12, 4, 3, amberdb_index::segment::ivf::VERSION).unwrap();
    // Two keys equal.
    let mut b = bytes.clone();
    let k0 = layout.keys.start as usize;
    let first: [u8; 8] = b[k0..k0 + 8].try_into().unwrap();
    b[k0 + 8..k0 + 16].copy_from_slice(&first);
    assert!(IvfSegment::open("t", SealedBytes::copy_from(&reseal(b))).is_err());
    // A list bound past the row count.
    let mut b = bytes.clone();
    let s1 = layout.list_start.start as usize + 8;
    b[s1..s1 + 8].copy_from_slice(&99u64.to_le_bytes());
    assert!(IvfSegment::open("t", SealedBytes::copy_from(&reseal(b))).is_err());
    // by_key naming one row twice.
    let mut b = bytes.clone();
    let bk = layout.by_key.start as usize;
    let r0: [u8; 4] = b[bk..bk + 4].try_into().unwrap();
    b[bk + 4..bk + 8].copy_from_slice(&r0);
    assert!(IvfSegment::open("t", SealedBytes::copy_from(&reseal(b))).is_err());
    // A curve point past nlist, and points out of order.
    let c0 = layout.curve.start as usize;
    let mut b = bytes.clone();
    b[c0 + 16..c0 + 20].copy_from_slice(&9u32.to_le_bytes());
    assert!(IvfSegment::open("t", SealedBytes::copy_from(&reseal(b))).is_err());
    let mut b = bytes.clone();
    b[c0..c0 + 4].copy_from_slice(&2u32.to_le_bytes());
    assert!(IvfSegment::open("t", SealedBytes::copy_from(&reseal(b))).is_err());
    // Bytes after the last used point.
    let mut b = bytes.clone();
    b[c0 + 8 * 31 + 4] = 1;
    assert!(IvfSegment::open("t", SealedBytes::copy_from(&reseal(b))).is_err());
    // nprobe past nlist.
    let mut b = bytes;
    b[36..40].copy_from_slice(&4u32.to_le_bytes());
    assert!(IvfSegment::open("t", SealedBytes::copy_from(&reseal(b))).is_err());
}

#[test]
fn encode_refuses_what_open_would() {
    let v = vec![1.0f32, 0.0, 0.0, 1.0];
    let c = vec![1.0f32, 0.0];
    let ok = IvfBuild {
        keys: &[1, 2],
        vectors: &v,
        dim: 2,
        centroids: &c,
        assignment: &[0, 0],
        nprobe: 1,
        built_recall: 1.0,
        target_recall: 0.95,
        held_out: 2,
        curve: &[(1, 1.0)],
        owner: OWNER,
    };
    assert!(encode(&ok).is_ok());
    assert!(
        encode(&IvfBuild {
            keys: &[1, 1],
            ..ok
        })
        .is_err(),
        "duplicate keys"
    );
    assert!(
        encode(&IvfBuild {
            assignment: &[0, 1],
            ..ok
        })
        .is_err(),
        "no such list"
    );
    assert!(
        encode(&IvfBuild { nprobe: 2, ..ok }).is_err(),
        "nprobe past nlist"
    );
    assert!(
        encode(&IvfBuild {
            built_recall: 1.5,
            ..ok
        })
        .is_err()
    );
    assert!(
        encode(&IvfBuild {
            centroids: &[1.0, 0.0, 0.0, 1.0, 0.6, 0.8],
            ..ok
        })
        .is_err(),
        "nlist past rows"
    );
    assert!(
        encode(&IvfBuild {
            curve: &[(1, 0.5), (1, 0.6)],
            ..ok
        })
        .is_err(),
        "curve nprobe not increasing"
    );
    assert!(
        encode(&IvfBuild {
            curve: &[(2, 0.5)],
            ..ok
        })
        .is_err(),
        "curve nprobe past nlist"
    );
    assert!(
        encode(&IvfBuild {
            vectors: &[f32::NAN, 0.0, 0.0, 1.0],
            ..ok
        })
        .is_err()
    );
}

/// A valid 12-row, 3-list segment of dimension 4 (the fuzz seed and the mutation proptest).
pub fn small_segment() -> Vec<u8> {
    build(12, 4, 3, 5).3
}

/// The fuzz targets' seeds: `ivf_open` starts from the frozen version-2 file, `ivf_v3_open`
/// from `small_segment()` at this build's version (with 1-bit codes).
#[test]
fn the_fuzz_seeds_are_valid_segments() {
    let seeds = concat!(env!("CARGO_MANIFEST_DIR"), "/../fuzz/seeds");
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");
    let v2 = std::fs::read(format!("{seeds}/ivf_open/small.mnsi")).expect("the ivf_open seed");
    assert_eq!(
        v2,
        std::fs::read(format!("{fixtures}/ivf-v2.mnsi")).unwrap()
    );
    assert!(amberdb_index::fuzz_ivf_open(&v2));
    let path = format!("{seeds}/ivf_v3_open/small.mnsi");
    // After a format change: AMBERDB_REGENERATE_SEEDS=1 rewrites the seed, then this checks it.
    if std::env::var_os("AMBERDB_REGENERATE_SEEDS").is_some() {
        std::fs::write(&path, small_segment()).expect("write the seed");
    }
    let seed = std::fs::read(&path).expect("fuzz/seeds/ivf_v3_open/small.mnsi");
    assert_eq!(
        seed,
        small_segment(),
        "regenerate the seed: it is small_segment()'s bytes"
    );
    assert!(amberdb_index::fuzz_ivf_v3_open(&seed));
    assert!(amberdb_index::fuzz_ivf_v3_open(&v2));
}

/// The pieces `kept` hands out, joined.
fn kept_file(s: &IvfSegment, keep: &dyn Fn(u64) -> bool) -> Option<Vec<u8>> {
    let kept = s.kept(keep, OWNER)?;
    let mut file = Vec::new();
    assert!(kept.write(&mut |piece| {
        file.extend_from_slice(piece);
        true
    }));
    assert_eq!(file.len() as u64, kept.file_len());
    Some(file)
}

#[test]
fn a_segment_without_some_rows_is_byte_for_byte_what_encode_writes_for_the_rest() {
    // Seeded: the segment, and which rows go (none, one, a third, all but one per list...).
    let seed = 11;
    eprintln!("seed {seed}");
    let (keys, vectors, assignment, bytes) = build(600, 24, 8, seed);
    let s = IvfSegment::open("t", SealedBytes::copy_from(&bytes)).unwrap();
    let dropped: [&dyn Fn(u64) -> bool; 4] =
        [&|_| false, &|k| k == keys[17], &|k| k % 3 == 0, &|k| {
            k % 7 != 1
        }];
    for (case, drop) in dropped.iter().enumerate() {
        let keep = |k: u64| !drop(k);
        let rows: Vec<usize> = (0..keys.len()).filter(|&i| keep(keys[i])).collect();
        let file = kept_file(&s, &keep).unwrap();
        let want = encode(&IvfBuild {
            keys: &rows.iter().map(|&i| keys[i]).collect::<Vec<_>>(),
            vectors: &rows
                .iter()
                .flat_map(|&i| vectors[i * 24..(i + 1) * 24].iter().copied())
                .collect::<Vec<_>>(),
            dim: 24,
            centroids: s.centroids(),
            assignment: &rows.iter().map(|&i| assignment[i]).collect::<Vec<_>>(),
            nprobe: 2,
            built_recall: 0.97,
            target_recall: 0.95,
            held_out: 10,
            curve: s.curve(),
            owner: OWNER,
        })
        .unwrap();
        assert!(file == want, "case {case}: {} rows kept", rows.len());
        let back = IvfSegment::open("k", SealedBytes::copy_from(&file)).unwrap();
        assert_eq!(back.len(), rows.len(), "case {case}");
    }
    // Fewer rows than lists: not an IVF segment any more.
    assert!(kept_file(&s, &|k| k == keys[0]).is_none());
    // A writer that stops is not asked again, and the write says so.
    let kept = s.kept(&|_| true, OWNER).unwrap();
    let mut calls = 0;
    assert!(!kept.write(&mut |_| {
        calls += 1;
        calls < 3
    }));
    assert_eq!(calls, 3);
}

/// Frozen IVF segments of each version (never regenerated): v1 (written by `be275e8`, no
/// owner), v2 (an owner block) and v3 (1-bit codes), all open; v1 names no owner; only v3 has
/// bit codes, and searching through them finds what the i8 codes find.
#[test]
fn frozen_segments_of_every_version_open() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");
    let v1 = std::fs::read(format!("{dir}/ivf-v1.mnsi")).unwrap();
    let v2 = std::fs::read(format!("{dir}/ivf-v2.mnsi")).unwrap();
    let v3 = std::fs::read(format!("{dir}/ivf-v3.mnsi")).unwrap();
    let s1 = IvfSegment::open("v1", SealedBytes::copy_from(&v1)).unwrap();
    let s2 = IvfSegment::open("v2", SealedBytes::copy_from(&v2)).unwrap();
    let s3 = IvfSegment::open("v3", SealedBytes::copy_from(&v3)).unwrap();
    assert_eq!((s1.len(), s2.len(), s3.len()), (12, 12, 12));
    assert_eq!(s1.keys(), s2.keys());
    assert_eq!(s2.keys(), s3.keys());
    assert_eq!(s1.owner(), Owner::NONE);
    assert_eq!(header_owner(&v1), HeaderOwner::Unmarked);
    assert_eq!(s2.owner(), OWNER);
    assert_eq!(header_owner(&v2), HeaderOwner::Owned(OWNER));
    assert_eq!(s3.owner(), OWNER);
    assert_eq!(header_owner(&v3), HeaderOwner::Owned(OWNER));
    assert!(s1.bit_codes().is_none() && s2.bit_codes().is_none());
    assert!(s3.bit_codes().is_some());
    let query = s3.vector(5).unwrap().to_vec();
    let mut found = Vec::new();
    for seg in [s2, s3] {
        let mut c = amberdb_index::Collection::new(4);
        c.push_sealed(seg).unwrap();
        let p = amberdb_index::SearchParams {
            scan: amberdb_index::Scan::i8_for(3),
            probe: amberdb_index::Probe::Lists(3),
            ..amberdb_index::SearchParams::top(3)
        };
        found.push(c.search(&query, &p).unwrap());
    }
    assert_eq!(found[0], found[1]);
}
