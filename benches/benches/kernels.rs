//! Kernel ns/pair at 384-d: the scalar oracle, simsimd, and amberdb's scan kernels (AVX-512 F
//! and VNNI when the CPU has them), for f32 and i8; and the scan itself over 1,024 rows held
//! in cache (the figure that matters: per-call overheads are amortized there); and a k-means
//! of 20,000 rows into 566 lists on one thread, which is the multi-query tiles' work in an
//! IVF build (its i8 iterations, its exact f32 assignment).

use amberdb_benches::{DIM, SEED, vectors};
use amberdb_index::segment::writer;
use amberdb_index::{Collection, FlatSegment, Scan, SealedBytes, SearchParams, kernels, quantize};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;

fn pairs(c: &mut Criterion) {
    let v = vectors(2, SEED);
    let (a, b) = (&v[..DIM], &v[DIM..]);
    let (qa, _) = quantize::encode(a);
    let (qb, _) = quantize::encode(b);
    let mut g = c.benchmark_group("dot_f32_384");
    g.bench_function("scalar", |x| {
        x.iter(|| kernels::scalar::dot_f32(black_box(a), black_box(b)))
    });
    g.bench_function("simsimd", |x| {
        x.iter(|| kernels::dot_simsimd(black_box(a), black_box(b)))
    });
    g.bench_function("simsimd_cosine", |x| {
        x.iter(|| kernels::cosine(black_box(a), black_box(b)))
    });
    g.bench_function("amberdb", |x| {
        x.iter(|| kernels::dot(black_box(a), black_box(b)))
    });
    g.finish();
    let mut g = c.benchmark_group("dot_i8_384");
    g.bench_function("scalar", |x| {
        x.iter(|| kernels::scalar::dot_i8(black_box(&qa), black_box(&qb)))
    });
    g.bench_function("simsimd", |x| {
        x.iter(|| kernels::dot_i8_simsimd(black_box(&qa), black_box(&qb)))
    });
    g.bench_function("amberdb", |x| {
        x.iter(|| kernels::dot_i8(black_box(&qa), black_box(&qb)))
    });
    g.finish();
}

fn scan(c: &mut Criterion) {
    let rows = vectors(1024, SEED + 2);
    let query = vectors(1, SEED + 3);
    let keys: Vec<u64> = (1..=1024).collect();
    let bytes =
        writer::encode(&keys, &rows, DIM, true, amberdb_index::Owner::NONE).expect("encode");
    let mut sealed = Collection::new(DIM);
    sealed
        .push_sealed(FlatSegment::open("k", SealedBytes::copy_from(&bytes)).expect("open"))
        .expect("push");
    let mut g = c.benchmark_group("scan_1024_rows_384");
    g.throughput(Throughput::Elements(1024));
    let p = SearchParams::top(10);
    g.bench_function("f32", |x| {
        x.iter(|| sealed.search(black_box(&query), &p).expect("search"))
    });
    let p8 = SearchParams {
        scan: Scan::i8_for(10),
        ..p
    };
    g.bench_function("i8_rerank", |x| {
        x.iter(|| sealed.search(black_box(&query), &p8).expect("search"))
    });
    g.finish();
}

/// The 1-bit codes' kernel over 64 blocks of 32 rows (2,048 rows of 384 dimensions, 96 KiB of
/// codes: in L2), against one query's tables: the work of a probe's list scan without its
/// memory traffic.
fn bit_codes(c: &mut Criterion) {
    use amberdb_index::bitcodes::{BLOCK_ROWS, SegmentQuery, block_bytes};
    let query = vectors(1, SEED + 5);
    let prepared = SegmentQuery::new(&query);
    let mut state = SEED;
    let codes: Vec<u8> = (0..64 * block_bytes(DIM))
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            (state >> 56) as u8
        })
        .collect();
    let mut g = c.benchmark_group("bit_dots_2048_rows_384");
    g.throughput(Throughput::Elements(2048));
    g.bench_function(kernels::bit_backend(), |x| {
        x.iter(|| {
            let mut total = 0u32;
            let mut out = [0u32; BLOCK_ROWS];
            for block in codes.chunks_exact(block_bytes(DIM)) {
                kernels::bit_dots(black_box(block), &prepared.tables, &mut out);
                total = total.wrapping_add(out[0]);
            }
            total
        })
    });
    g.finish();
}

fn kmeans(c: &mut Criterion) {
    let rows = vectors(20_000, SEED + 4);
    let params = amberdb_index::kmeans::KMeansParams::new(566, SEED);
    let one = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("pool");
    let mut g = c.benchmark_group("kmeans_20000_rows_566_lists");
    g.sample_size(10);
    g.bench_function("1_thread", |x| {
        x.iter(|| {
            one.install(|| amberdb_index::kmeans::train(black_box(&rows), DIM, &params))
                .expect("train")
        })
    });
    g.finish();
}

criterion_group!(benches, pairs, scan, bit_codes, kmeans);
criterion_main!(benches);
