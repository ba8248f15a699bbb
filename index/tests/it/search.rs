//! Search against brute force: exact for f32 (sealed and growing rows, tombstones, filters,
//! any thread count), and recall@10 >= 0.99 for the i8 scan with re-rank.

use amberdb_index::segment::writer;
use amberdb_index::synthetic::{clustered, seed_from_env as seed};
use amberdb_index::{Collection, FlatSegment, Scan, SealedBytes, SearchParams, kernels};
use proptest::prelude::*;

/// A collection of `n` rows with keys 1..=n, sealed in segments of `seal` rows (codes on),
/// the rest growing.
fn build(vectors: &[f32], dim: usize, seal: usize) -> Collection {
    let n = vectors.len() / dim;
    let mut c = Collection::new(dim);
    let sealed_rows = n / seal * seal;
    for start in (0..sealed_rows).step_by(seal) {
        let keys: Vec<u64> = (start as u64 + 1..=(start + seal) as u64).collect();
        let bytes = writer::encode(
            &keys,
            &vectors[start * dim..(start + seal) * dim],
            dim,
            true,
            amberdb_index::Owner::NONE,
        )
        .unwrap();
        c.push_sealed(FlatSegment::open("s", SealedBytes::copy_from(&bytes)).unwrap())
            .unwrap();
    }
    for row in sealed_rows..n {
        c.insert(row as u64 + 1, &vectors[row * dim..(row + 1) * dim])
            .unwrap();
    }
    c
}

fn brute(
    vectors: &[f32],
    dim: usize,
    q: &[f32],
    k: usize,
    keep: &dyn Fn(u64) -> bool,
) -> Vec<(u64, f32)> {
    let mut all: Vec<(u64, f32)> = vectors
        .chunks_exact(dim)
        .enumerate()
        .map(|(i, v)| (i as u64 + 1, kernels::dot(q, v).unwrap()))
        .filter(|(key, _)| keep(*key))
        .collect();
    all.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    all.truncate(k);
    all
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn f32_search_equals_brute_force(n in 1usize..400, seal in 1usize..64, k in 1usize..30, modulus in 1u64..5, deletes in proptest::collection::vec(1u64..400, 0..40), seed in 0u64..1000) {
        let dim = 16;
        let vectors = clustered(n, dim, 7, 0.5, seed);
        let mut c = build(&vectors, dim, seal);
        for d in &deletes {
            c.delete(*d);
        }
        let q = clustered(1, dim, 1, 0.5, seed + 1);
        let filter = move |key: u64| key.is_multiple_of(modulus);
        let p = SearchParams { k, filter: Some(&filter), ..SearchParams::top(k) };
        let keep = |key: u64| key.is_multiple_of(modulus) && !deletes.contains(&key);
        let want = brute(&vectors, dim, &q, k, &keep);
        for threads in [1, 2] {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            let got: Vec<(u64, f32)> = pool.install(|| c.search(&q, &p)).unwrap().iter().map(|n| (n.key, n.score)).collect();
            prop_assert_eq!(&got, &want);
        }
        let batch = c.search_batch(&[&q, &q], &p).unwrap();
        prop_assert_eq!(batch[1].iter().map(|n| (n.key, n.score)).collect::<Vec<_>>(), want);
    }
}

#[test]
fn i8_scan_recall_at_10_is_at_least_0_99() {
    let seed = seed("i8_scan_recall_at_10_is_at_least_0_99", 42);
    let (n, dim, queries) = (20_000, 384, 100);
    let vectors = clustered(n, dim, 50, 0.5, seed);
    let qs = clustered(queries, dim, 50, 0.5, seed + 1);
    // Sealed segments with growing rows after them, then every row growing: both scan codes.
    for seal in [8192, n + 1] {
        i8_recall_is_at_least_0_99(&build(&vectors, dim, seal), &vectors, &qs, seal);
    }
}

fn i8_recall_is_at_least_0_99(c: &Collection, vectors: &[f32], qs: &[f32], seal: usize) {
    let (n, dim, queries) = (vectors.len() / 384, 384, qs.len() / 384);
    let mut hit = 0;
    for q in qs.chunks_exact(dim) {
        let exact: Vec<u64> = c
            .search(q, &SearchParams::top(10))
            .unwrap()
            .iter()
            .map(|n| n.key)
            .collect();
        let p = SearchParams {
            scan: Scan::i8_for(10),
            ..SearchParams::top(10)
        };
        let approx = c.search(q, &p).unwrap();
        hit += approx.iter().filter(|n| exact.contains(&n.key)).count();
        // Re-ranked scores are exact.
        for nb in &approx {
            let row = (nb.key - 1) as usize;
            assert_eq!(
                nb.score,
                kernels::dot(q, &vectors[row * dim..(row + 1) * dim]).unwrap()
            );
        }
    }
    let recall = hit as f64 / (queries * 10) as f64;
    eprintln!(
        "i8 + re-rank recall@10 over {n} clustered 384-d vectors (sealed in {seal}s), {queries} queries: {recall:.4}"
    );
    assert!(recall >= 0.99, "recall@10 {recall}");
}

#[test]
fn bad_queries_and_inserts_are_typed_errors() {
    let mut c = Collection::new(4);
    c.insert(5, &[1.0, 0.0, 0.0, 0.0]).unwrap();
    assert!(c.insert(5, &[1.0, 0.0, 0.0, 0.0]).is_err(), "key order");
    assert!(c.insert(6, &[1.0, 0.0]).is_err(), "dimension");
    assert!(c.insert(6, &[f32::NAN, 0.0, 0.0, 0.0]).is_err(), "nan");
    assert!(c.search(&[1.0; 3], &SearchParams::top(1)).is_err());
    assert!(
        c.search(&[f32::INFINITY; 4], &SearchParams::top(1))
            .is_err()
    );
    assert_eq!(c.len(), 1);
}

#[test]
fn sealing_a_copy_of_the_growing_rows_keeps_what_came_after_and_refuses_a_wrong_segment() {
    use amberdb_index::{FlatSegment, SealedBytes};
    let segment = |rows: &amberdb_index::GrowingRows| {
        FlatSegment::open(
            "g",
            SealedBytes::copy_from(&rows.encode(true, amberdb_index::Owner::NONE).unwrap()),
        )
        .unwrap()
    };
    let mut c = Collection::new(2);
    c.insert(1, &[1.0, 0.0]).unwrap();
    c.insert(2, &[0.0, 1.0]).unwrap();
    c.insert(3, &[0.6, 0.8]).unwrap();
    c.delete(1);
    let copied = c.growing_rows();
    assert_eq!((copied.rows, copied.live()), (3, 2));
    // While the file is written: a row comes, a copied row goes.
    c.insert(4, &[0.8, 0.6]).unwrap();
    c.delete(2);
    // Refusals change nothing: too many rows, a segment missing a live row.
    assert!(c.seal_growing_prefix(5, Some(segment(&copied))).is_err());
    let mut fewer = Collection::new(2);
    fewer.insert(2, &[0.0, 1.0]).unwrap();
    assert!(
        c.seal_growing_prefix(3, Some(segment(&fewer.growing_rows())))
            .is_err(),
        "row 3 is live and missing"
    );
    let mut stranger = Collection::new(2);
    stranger.insert(9, &[0.0, 1.0]).unwrap();
    assert!(
        c.seal_growing_prefix(3, Some(segment(&stranger.growing_rows())))
            .is_err(),
        "a key that is not among the rows"
    );
    assert_eq!((c.growing_len(), c.len()), (4, 2));
    c.seal_growing_prefix(copied.rows, Some(segment(&copied)))
        .unwrap();
    assert_eq!((c.growing_len(), c.sealed().len(), c.len()), (1, 1, 2));
    let keys: Vec<u64> = c
        .search(&[1.0, 0.0], &SearchParams::top(5))
        .unwrap()
        .iter()
        .map(|n| n.key)
        .collect();
    assert_eq!(keys, [4, 3], "2 is deleted in the segment, 4 still growing");
    // Every copied row dead: the prefix just goes.
    c.delete(4);
    let dead = c.growing_rows();
    assert_eq!(dead.live(), 0);
    c.seal_growing_prefix(dead.rows, None).unwrap();
    assert_eq!((c.growing_len(), c.len()), (0, 1));
    c.insert(5, &[1.0, 0.0]).unwrap();
    assert_eq!(
        c.search(&[1.0, 0.0], &SearchParams::top(5)).unwrap()[0].key,
        5
    );
}

#[test]
fn a_reserve_the_system_cannot_give_changes_nothing_and_rows_still_append() {
    let dim = 8;
    let vectors = clustered(64, dim, 4, 0.1, seed("a_reserve_the_system_cannot_give", 7));
    let mut c = Collection::new(dim);
    // More than any address space: refused inside, not a panic or an abort.
    c.reserve(usize::MAX / 2);
    c.reserve(1_000);
    for (i, v) in vectors.chunks_exact(dim).enumerate() {
        c.insert(i as u64 + 1, v).expect("insert");
    }
    assert_eq!(c.len(), 64);
    let hits = c
        .search(&vectors[..dim], &SearchParams::top(1))
        .expect("search");
    assert_eq!(hits.first().map(|h| h.key), Some(1));
}
