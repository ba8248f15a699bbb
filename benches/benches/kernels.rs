//! Kernel ns/pair at 384-d: scalar oracle vs simsimd, for f32 and i8.

use criterion::{Criterion, criterion_group, criterion_main};
use mnemo_benches::{DIM, SEED, vectors};
use mnemo_index::{kernels, quantize};
use std::hint::black_box;

fn bench(c: &mut Criterion) {
    let v = vectors(2, SEED);
    let (a, b) = (&v[..DIM], &v[DIM..]);
    let (qa, _) = quantize::encode(a);
    let (qb, _) = quantize::encode(b);
    let mut g = c.benchmark_group("dot_f32_384");
    g.bench_function("scalar", |bench| {
        bench.iter(|| kernels::scalar::dot_f32(black_box(a), black_box(b)))
    });
    g.bench_function("simsimd", |bench| {
        bench.iter(|| kernels::dot(black_box(a), black_box(b)))
    });
    g.bench_function("simsimd_cosine", |bench| {
        bench.iter(|| kernels::cosine(black_box(a), black_box(b)))
    });
    g.finish();
    let mut g = c.benchmark_group("dot_i8_384");
    g.bench_function("scalar", |bench| {
        bench.iter(|| kernels::scalar::dot_i8(black_box(&qa), black_box(&qb)))
    });
    g.bench_function("simsimd", |bench| {
        bench.iter(|| kernels::dot_i8(black_box(&qa), black_box(&qb)))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
