//! 1-bit codes with error bounds (RaBitQ, Gao & Long, SIGMOD 2024), as `docs/ivf.md` designs
//! them ("1-bit codes with error bounds"): what an IVF segment of version 3 stores per row, and
//! what a query computes once a segment ([`SegmentQuery`]) and per probed list ([`ListTerms`])
//! to estimate every row's score with a bound.
//!
//! Guarantees:
//! - [`encode_row`] is deterministic; [`rotation`] is deterministic for a seed and stored in
//!   the segment, so a file never depends on a generator's version.
//! - [`SegmentQuery::estimate`] is the unbiased estimate of `⟨v, q⟩` and [`SegmentQuery::bound`] its
//!   error bound: the paper's bound on the 1-bit estimate (`EPSILON` standard errors) plus the
//!   same multiple of the 4-bit query's rounding error. It is a probabilistic bound: how
//!   often a true neighbour falls outside it is measured (`docs/ivf.md`), not assumed.
//! - The bit arithmetic ([`crate::kernels::bit_dots`]) is exact on every kernel path.
//!
//! The math, for a unit row `v` in the list of centroid `c`, with `d = v − c`, `r = |d|`,
//! `o = d / r`, rotation `R` (orthogonal) and bits `b = [R·o ≥ 0]`:
//! `⟨v, q⟩ = ⟨c, q⟩ + ⟨d, c⟩ + ⟨d, t⟩` with `t = q − c`, and
//! `⟨d, t⟩ ≈ (r / w) · ⟨2b − 1, R·t⟩ / √D` where `w = |R·o|₁ / √D` is how well the bits stand
//! for `o`. `⟨2b − 1, R·t⟩ = ⟨2b − 1, R·q⟩ − ⟨2b − 1, R·c⟩`: the second term is the row's own
//! and is folded into its stored `add` at build, so a query is rotated and quantized once a
//! segment, and a list adds only `⟨c, q⟩` and `|t|`. Per row three factors and the count of
//! its ones are stored ([`Factors`]).

use crate::synthetic::SeededRng;

/// The block and table shapes the kernel reads (`crate::kernels`, where they are defined).
pub use crate::kernels::{BLOCK_ROWS, TABLE_LEN};
/// Standard errors the bound spans (the paper's choice, 1.9; measured in `docs/ivf.md`).
pub const EPSILON: f32 = 1.9;
/// Largest level of the query's quantized rotated residual (16 levels a dimension, so a
/// nibble's table entry, four levels summed, fits a byte).
const QUERY_LEVELS: f32 = 15.0;
/// `1 / √12`: the standard deviation of a rounding error, in steps.
const ROUNDING_SD: f32 = 0.288_675_13;

/// u64 words of one row's bits.
#[must_use]
pub fn words(dim: usize) -> usize {
    dim.div_ceil(64)
}

/// Bytes of one row's bits (whole u64 words: `dim` rounded up to a multiple of 64, over 8).
#[must_use]
pub fn code_bytes(dim: usize) -> usize {
    words(dim) * 8
}

/// Bytes of a block of `BLOCK_ROWS` rows' bits.
#[must_use]
pub fn block_bytes(dim: usize) -> usize {
    code_bytes(dim) * BLOCK_ROWS
}

/// Puts one row's bits (`words(dim)` u64, as `encode_row` makes them) into lane `lane` of a
/// block (`block_bytes(dim)` bytes): byte `k` of the row (bits `8k..8k + 8`, little-endian)
/// at `k · 32 + lane`.
pub fn put_row(block: &mut [u8], lane: usize, bits: &[u64]) {
    for (k, byte) in bits.iter().flat_map(|w| w.to_le_bytes()).enumerate() {
        if let Some(slot) = block.get_mut(k * BLOCK_ROWS + lane) {
            *slot = byte;
        }
    }
}

/// Row `lane`'s bits in a block, as `put_row` took them.
#[must_use]
pub fn row_of(block: &[u8], lane: usize, words: usize) -> Vec<u64> {
    (0..words)
        .map(|w| {
            let byte = |b: usize| block.get((w * 8 + b) * BLOCK_ROWS + lane).copied();
            u64::from_le_bytes(std::array::from_fn(|b| byte(b).unwrap_or(0)))
        })
        .collect()
}

/// A row's stored factors, four f32 (`docs/format/segment-ivf.md`, version 3).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Factors {
    /// `⟨d, c⟩`: the residual against its centroid.
    pub add: f32,
    /// `r / w`: what scales the bits' inner product back to the residual's.
    pub rescale: f32,
    /// `r · √(1 − w²) / w`: the residual's spread the bits do not capture; times `|t|` and
    /// `1 / √(D − 1)` it is one standard error of the estimate.
    pub error: f32,
    /// How many of the row's bits are one.
    pub ones: f32,
}

impl Factors {
    /// f32 values a row's factors take in a file.
    pub const WIDTH: usize = 4;

    /// Row `row`'s factors in a block of them (`WIDTH` f32 a row; zero past its end).
    #[inline]
    #[must_use]
    pub fn of_row(block: &[f32], row: usize) -> Factors {
        match block.get(row * Self::WIDTH..(row + 1) * Self::WIDTH) {
            Some(&[add, rescale, error, ones]) => Factors {
                add,
                rescale,
                error,
                ones,
            },
            _ => Factors::default(),
        }
    }

    /// The factors as a file stores them.
    #[must_use]
    pub fn to_array(self) -> [f32; Self::WIDTH] {
        [self.add, self.rescale, self.error, self.ones]
    }

    /// Whether the factors could have come from `encode_row` at dimension `dim`.
    #[must_use]
    pub fn is_valid(&self, dim: usize) -> bool {
        #[expect(clippy::cast_precision_loss, reason = "a dimension")]
        let dim = dim as f32;
        self.add.is_finite()
            && self.rescale.is_finite()
            && self.error.is_finite()
            && self.rescale >= 0.0
            && self.error >= 0.0
            && self.ones >= 0.0
            && self.ones <= dim
            && self.ones.fract() == 0.0
    }
}

/// A seeded random orthogonal `dim × dim` matrix, row-major: rows of Gaussian values made
/// orthonormal by modified Gram–Schmidt in f64. A row that comes out degenerate (never, in
/// practice) is drawn again.
#[must_use]
pub fn rotation(dim: usize, seed: u64) -> Vec<f32> {
    let mut rng = SeededRng::new(seed ^ 0x5241_4249_5451);
    let mut rows: Vec<Vec<f64>> = Vec::with_capacity(dim);
    while rows.len() < dim {
        let mut v: Vec<f64> = (0..dim).map(|_| f64::from(rng.gaussian())).collect();
        for _ in 0..2 {
            for u in &rows {
                let along: f64 = v.iter().zip(u).map(|(a, b)| a * b).sum();
                for (x, y) in v.iter_mut().zip(u) {
                    *x -= along * y;
                }
            }
        }
        let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
        if norm > 1e-6 {
            for x in &mut v {
                *x /= norm;
            }
            rows.push(v);
        }
    }
    #[expect(clippy::cast_possible_truncation, reason = "f32 storage")]
    rows.into_iter().flatten().map(|x| x as f32).collect()
}

/// `R · x` for the row-major square `rotation`, into `out` (`x.len()` values), with the
/// scan kernel.
pub fn rotate(rotation: &[f32], x: &[f32], out: &mut [f32]) {
    crate::kernels::each_dot_f32(x, rotation, |i, s| {
        if let Some(o) = out.get_mut(i) {
            *o = s;
        }
    });
}

/// `R · x` for up to four rows `xs` at once, into `outs` (each `dim` values), with the
/// multi-query kernel: how a build rotates every row.
pub fn rotate_four(rotation: &[f32], xs: &[&[f32]], outs: &mut [Vec<f32>]) {
    let dim = xs.first().map_or(0, |x| x.len());
    crate::kernels::each_dot_f32_tile(xs, dim, rotation, |i, j, s| {
        if let Some(o) = outs.get_mut(j).and_then(|o| o.get_mut(i)) {
            *o = s;
        }
    });
}

/// Whether `rotation` (`dim × dim`, row-major) is orthogonal within `1e-4` on the rows
/// `sample` picks: each against every row. What a segment's open checks of a stored rotation.
#[must_use]
pub fn is_orthogonal(rotation: &[f32], dim: usize, sample: &[usize]) -> bool {
    if rotation.len() != dim * dim || rotation.iter().any(|x| !x.is_finite()) {
        return false;
    }
    let row = |i: usize| rotation.get(i * dim..(i + 1) * dim).unwrap_or(&[]);
    sample.iter().all(|&i| {
        (0..dim).all(|j| {
            let dot: f64 = row(i)
                .iter()
                .zip(row(j))
                .map(|(a, b)| f64::from(*a) * f64::from(*b))
                .sum();
            let want = if i == j { 1.0 } else { 0.0 };
            (dot - want).abs() < 1e-4
        })
    })
}

/// The code of unit row `v` (rotated: `rotated_v = R · v`) in the list whose centroid is
/// `c` (rotated: `rotated_c`): its bits into `bits` (`words(dim)` words, bit `i % 64` of word
/// `i / 64` for rotated dimension `i`, the rest zero) and its factors. `add` holds
/// `⟨d, c⟩ − rescale · ⟨2b − 1, R·c⟩ / √dim`, so that a query quantized once for the whole
/// segment (`SegmentQuery`) needs nothing of the list but `⟨c, q⟩` and `|q − c|`.
pub fn encode_row(
    v: &[f32],
    c: &[f32],
    rotated_v: &[f32],
    rotated_c: &[f32],
    bits: &mut [u64],
) -> Factors {
    let dim = v.len();
    bits.fill(0);
    let add: f32 = v.iter().zip(c).map(|(a, b)| (a - b) * b).sum();
    // R·d = R·v − R·c.
    let residual = || rotated_v.iter().zip(rotated_c).map(|(a, b)| a - b);
    let r = residual().map(|x| x * x).sum::<f32>().sqrt();
    if r <= f32::EPSILON {
        // The row is its centroid: the estimate is exact without bits.
        return Factors {
            add,
            ..Factors::default()
        };
    }
    let mut ones = 0u32;
    let (mut l1, mut signed_c) = (0.0f32, 0.0f32);
    for ((i, x), rc) in residual().enumerate().zip(rotated_c) {
        l1 += x.abs();
        if x >= 0.0
            && let Some(w) = bits.get_mut(i / 64)
        {
            *w |= 1 << (i % 64);
            ones += 1;
            signed_c += rc;
        } else {
            signed_c -= rc;
        }
    }
    #[expect(clippy::cast_precision_loss, reason = "a dimension")]
    let sqrt_dim = (dim as f32).sqrt();
    let w = (l1 / r / sqrt_dim).clamp(f32::EPSILON, 1.0);
    let rescale = r / w;
    #[expect(clippy::cast_precision_loss, reason = "at most the dimension")]
    Factors {
        add: add - rescale * signed_c / sqrt_dim,
        rescale,
        error: r * (1.0 - w * w).max(0.0).sqrt() / w,
        ones: ones as f32,
    }
}

/// A query prepared for one segment: `R · q` quantized to 16 levels a dimension (between its
/// least and greatest value) as nibble tables, once for every list the probe reads there.
#[derive(Debug, Clone)]
pub struct SegmentQuery {
    /// For each group of 4 dimensions (a nibble of a row's bits: dimensions `4m..4m + 4`),
    /// `TABLE_LEN` bytes: entry `n` is the sum of the levels of the dimensions whose bit is
    /// set in `n` (at most 60). `code_bytes(dim) × 2` tables.
    pub tables: crate::kernels::BitTables,
    /// The quantization: value `i` is `low + step · level_i`.
    low: f32,
    step: f32,
    /// `Σ` of the quantized values, over the real dimensions.
    sum: f32,
    /// `1 / √D` and `1 / √(D − 1)`.
    inv_sqrt_dim: f32,
    inv_sqrt_dim_less_one: f32,
}

/// What a probed list adds to a segment's query: `⟨c, q⟩` and `|q − c|`.
#[derive(Debug, Clone, Copy)]
pub struct ListTerms {
    /// `⟨c, q⟩`.
    pub centroid_score: f32,
    /// `|q − c|`.
    pub residual_norm: f32,
}

impl ListTerms {
    /// The terms of the list whose centroid `c` scores `centroid_score` against `q`, from
    /// `|q|²` and `|c|²`: `|q − c|² = |q|² − 2⟨c, q⟩ + |c|²`.
    #[must_use]
    pub fn new(centroid_score: f32, query_norm2: f32, centroid_norm2: f32) -> ListTerms {
        ListTerms {
            centroid_score,
            residual_norm: (query_norm2 - 2.0 * centroid_score + centroid_norm2)
                .max(0.0)
                .sqrt(),
        }
    }
}

impl SegmentQuery {
    /// The query whose rotation by the segment is `rotated_q` (`R · q`).
    #[must_use]
    pub fn new(rotated_q: &[f32]) -> SegmentQuery {
        let dim = rotated_q.len();
        let words = words(dim);
        let (mut low, mut high) = rotated_q
            .iter()
            .fold((f32::INFINITY, f32::NEG_INFINITY), |(l, h), &x| {
                (l.min(x), h.max(x))
            });
        if !(low.is_finite() && high.is_finite()) {
            (low, high) = (0.0, 0.0);
        }
        let step = if high > low {
            (high - low) / QUERY_LEVELS
        } else {
            0.0
        };
        let inverse = if step > 0.0 { 1.0 / step } else { 0.0 };
        // Each value's level, rounded to the nearest (the cast truncates a non-negative value
        // and saturates anything out of range); zeros past `dim`.
        let mut level_of = vec![0u8; words * 64];
        for (l, &x) in level_of.iter_mut().zip(rotated_q) {
            #[expect(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                reason = "a level in 0..=15"
            )]
            let level = ((x - low) * inverse + 0.5) as u8;
            *l = level.min(15);
        }
        let levels: u32 = level_of.iter().map(|&l| u32::from(l)).sum();
        // Entry n of a table: the levels of the dimensions whose bit n has, summed (≤ 60).
        let mut tables = vec![0u8; level_of.len() / 4 * TABLE_LEN];
        for (table, four) in tables
            .chunks_exact_mut(TABLE_LEN)
            .zip(level_of.as_chunks::<4>().0)
        {
            let [a, b, c, d] = *four;
            let entries: [u8; TABLE_LEN] = std::array::from_fn(|n| {
                let bit = |i: usize| u8::from(n >> i & 1 == 1);
                bit(0) * a + bit(1) * b + bit(2) * c + bit(3) * d
            });
            table.copy_from_slice(&entries);
        }
        #[expect(clippy::cast_precision_loss, reason = "a dimension and a small sum")]
        let (dim_f, levels) = (dim as f32, levels as f32);
        SegmentQuery {
            tables: crate::kernels::BitTables::new(tables),
            low,
            step,
            sum: dim_f * low + step * levels,
            inv_sqrt_dim: 1.0 / dim_f.sqrt(),
            inv_sqrt_dim_less_one: 1.0 / (dim_f - 1.0).max(1.0).sqrt(),
        }
    }

    /// The estimate of `⟨v, q⟩` for a row of a list with `terms`, with `factors`, whose bits
    /// weigh `dot` against the query's levels (`Σ_i b_i · level_i`,
    /// [`crate::kernels::bit_dots`]).
    #[inline]
    #[must_use]
    pub fn estimate(&self, terms: ListTerms, factors: &Factors, dot: u32) -> f32 {
        #[expect(clippy::cast_precision_loss, reason = "at most 15 × 4096")]
        let with_ones = self.low * factors.ones + self.step * dot as f32;
        let signed = 2.0 * with_ones - self.sum;
        terms.centroid_score + factors.add + factors.rescale * signed * self.inv_sqrt_dim
    }

    /// How far the true score may lie from [`SegmentQuery::estimate`] (`EPSILON` standard
    /// errors of the 1-bit estimate and of the query's rounding).
    #[inline]
    #[must_use]
    pub fn bound(&self, terms: ListTerms, factors: &Factors) -> f32 {
        let error_unit = terms.residual_norm * self.inv_sqrt_dim_less_one;
        EPSILON * (factors.error * error_unit + factors.rescale * self.step * ROUNDING_SD)
    }

    /// `estimate + bound` for a run of rows of one list: `factors` (`Factors::WIDTH` f32 a
    /// row, as a file holds them) and their `dots`, into `upper` (as many as there are rows in
    /// all three). The same sum regrouped into per-list constants, one pass the compiler
    /// vectorizes: a scan calls it for every row.
    pub fn upper_bounds(&self, terms: ListTerms, factors: &[f32], dots: &[u32], upper: &mut [f32]) {
        // upper = cq + add + rescale · (base + per_one · ones + per_dot · dot) + per_error · error
        let base = -self.sum * self.inv_sqrt_dim + EPSILON * self.step * ROUNDING_SD;
        let per_one = 2.0 * self.low * self.inv_sqrt_dim;
        let per_dot = 2.0 * self.step * self.inv_sqrt_dim;
        let per_error = EPSILON * terms.residual_norm * self.inv_sqrt_dim_less_one;
        for ((u, &[add, rescale, error, ones]), &dot) in upper
            .iter_mut()
            .zip(factors.as_chunks::<{ Factors::WIDTH }>().0)
            .zip(dots)
        {
            #[expect(clippy::cast_precision_loss, reason = "at most 15 × 4096")]
            let dot = dot as f32;
            *u = terms.centroid_score
                + add
                + rescale * (base + per_one * ones + per_dot * dot)
                + per_error * error;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::scalar;
    use crate::synthetic::{SeededRng, seed_from_env};

    fn unit(rng: &mut SeededRng, dim: usize) -> Vec<f32> {
        rng.unit_vector(dim)
    }

    #[test]
    fn the_rotation_is_orthogonal_and_the_same_for_a_seed() {
        for dim in [1, 3, 64, 100, 384] {
            let r = rotation(dim, 5);
            let all: Vec<usize> = (0..dim).collect();
            assert!(is_orthogonal(&r, dim, &all), "dim {dim}");
            assert_eq!(r, rotation(dim, 5));
            assert_ne!(r, rotation(dim, 6));
        }
        let mut bad = rotation(16, 1);
        bad[17] += 0.01;
        assert!(!is_orthogonal(&bad, 16, &[1]));
    }

    /// Each row's estimate lies within its bound for nearly every pair, the estimate is
    /// unbiased, and the bound is tight enough to rule most rows out.
    #[test]
    fn estimates_fall_within_their_bounds_and_are_unbiased() {
        let seed = seed_from_env("estimates_fall_within_their_bounds", 41);
        eprintln!("seed {seed}");
        let mut rng = SeededRng::new(seed);
        for dim in [64, 100, 384] {
            let rot = rotation(dim, seed);
            let words = words(dim);
            let mut c = unit(&mut rng, dim);
            // A centroid is the mean of unit rows: shorter than one.
            for x in &mut c {
                *x *= 0.7;
            }
            let mut rc = vec![0.0; dim];
            rotate(&rot, &c, &mut rc);
            let (mut outside, mut pairs, mut bias, mut width) = (0usize, 0usize, 0.0f64, 0.0f64);
            for _ in 0..40 {
                let q = unit(&mut rng, dim);
                let mut rq = vec![0.0; dim];
                rotate(&rot, &q, &mut rq);
                let sq = SegmentQuery::new(&rq);
                let terms = ListTerms::new(
                    scalar::dot_f32(&c, &q) as f32,
                    scalar::dot_f32(&q, &q) as f32,
                    scalar::dot_f32(&c, &c) as f32,
                );
                for _ in 0..50 {
                    // Rows near the centroid, as a list holds them.
                    let mut v: Vec<f32> = c.iter().map(|x| x + 0.05 * rng.gaussian()).collect();
                    crate::synthetic::normalize(&mut v);
                    let mut bits = vec![0u64; words];
                    let mut rv = vec![0.0; dim];
                    rotate(&rot, &v, &mut rv);
                    let f = encode_row(&v, &c, &rv, &rc, &mut bits);
                    let mut block = vec![0u8; block_bytes(dim)];
                    put_row(&mut block, 5, &bits);
                    assert_eq!(row_of(&block, 5, words), bits);
                    let mut dots = [0u32; BLOCK_ROWS];
                    crate::kernels::bit_dots_scalar(&block, sq.tables.plain(), &mut dots);
                    let dot = dots[5];
                    let est = sq.estimate(terms, &f, dot);
                    let exact = scalar::dot_f32(&v, &q) as f32;
                    let bound = sq.bound(terms, &f);
                    let mut upper = [0.0];
                    sq.upper_bounds(terms, &f.to_array(), &[dot], &mut upper);
                    assert!(
                        (upper[0] - (est + bound)).abs() < 1e-4,
                        "{} vs {}",
                        upper[0],
                        est + bound
                    );
                    pairs += 1;
                    outside += usize::from((est - exact).abs() > bound);
                    bias += f64::from(est - exact);
                    width += f64::from(bound);
                }
            }
            let bias = bias / pairs as f64;
            let width = width / pairs as f64;
            eprintln!("dim {dim}: {outside} of {pairs} outside, bias {bias:.5}, bound {width:.4}");
            // EPSILON = 1.9 standard errors: about 5.7 % outside either side for a normal error.
            assert!(
                outside * 100 <= pairs * 6,
                "dim {dim}: {outside} of {pairs} outside"
            );
            assert!(bias.abs() < 0.01, "dim {dim}: bias {bias}");
            assert!(width < 0.25, "dim {dim}: mean bound {width}");
        }
    }

    #[test]
    fn a_row_at_its_centroid_scores_exactly() {
        let dim = 64;
        let rot = rotation(dim, 2);
        let mut rng = SeededRng::new(2);
        let c = unit(&mut rng, dim);
        let mut rc = vec![0.0; dim];
        rotate(&rot, &c, &mut rc);
        let mut bits = vec![7u64; 1];
        let f = encode_row(&c, &c, &rc, &rc, &mut bits);
        assert_eq!(bits, [0]);
        let q = unit(&mut rng, dim);
        let mut rq = vec![0.0; dim];
        rotate(&rot, &q, &mut rq);
        let cq = scalar::dot_f32(&c, &q) as f32;
        let sq = SegmentQuery::new(&rq);
        let terms = ListTerms::new(cq, 1.0, scalar::dot_f32(&c, &c) as f32);
        assert!((sq.estimate(terms, &f, 0) - cq).abs() < 1e-5);
        assert_eq!(sq.bound(terms, &f), 0.0);
        assert!(f.is_valid(dim));
    }
}
