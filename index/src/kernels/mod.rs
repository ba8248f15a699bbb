//! Similarity kernels: one safe, length-checked entry point per operation.
//!
//! [`dot`] and [`dot_i8`] are the scan kernels (`x86.rs`), picked once at run time: AVX-512 F
//! and AVX-512 VNNI when the CPU has them, AVX2 and FMA when it has those only, simsimd
//! otherwise. The collection scans with exactly these functions, so a brute force written with
//! [`dot`] reproduces its scores bit for bit on the same machine. [`cosine`] and the
//! `*_simsimd` baselines go through simsimd. Why the scan has its own paths: simsimd's f32 dot
//! accumulates in f64, its i8 VNNI kernel needs the whole Ice Lake feature set (so on this
//! project's machines it runs its AVX2 i8 kernel), and it scores one pair per call;
//! `docs/benchmarks.md` (kernels) has the measurements.
//!
//! The multi-query kernels (`each_dot_f32_tile`, `each_dot_i8_tile`, crate-private) score up to
//! four queries against a tile of rows at a time in registers (four rows with AVX-512, two with
//! AVX2's sixteen registers): k-means and IVF assignment, the ranking of an IVF segment's
//! lists, and compaction's batches of range queries. The f32 one rounds differently from
//! [`dot`] but gives a pair the same bits whatever the other queries; the i8 one is exact.
//!
//! Every kernel set the test host can run (AVX-512, AVX2, simsimd) is tested: every one-query
//! kernel against the plain loops in [`scalar`] for every length 0..=1024 and every start
//! offset 0..16, the multi-query ones for every row count up to 9 and dimensions 1..=40 and
//! around the block sizes (`tests` below). Tolerances: f32 dot within `1e-5 · (1 + Σ|aᵢbᵢ|)`
//! of the f64 oracle; i8 dot exact.
//!
//! [`bit_dots`] (`bits.rs`) is the 1-bit codes' kernel (`crate::bitcodes`): a block of 32
//! rows' bits against a query's nibble tables (`vpermb` or `vpshufb` lookups, 32 rows at a
//! time), exact, with AVX-512 VBMI, AVX-512 BW or AVX2, tested against [`bit_dots_scalar`].
//!
//! Scores mean "higher is closer": simsimd's `cos` returns a *distance*, and
//! [`cosine`] is the one function that turns it into a similarity.

mod bits;
pub mod scalar;
mod x86;

pub use bits::{BLOCK_ROWS, BitTables, TABLE_LEN, bit_backend, bit_dots, bit_dots_scalar};

pub use x86::{KernelsAsked, backend, kernels_asked, kernels_env_error};
pub(crate) use x86::{
    each_dot_f32, each_dot_f32_batch, each_dot_f32_tile, each_dot_i8, each_dot_i8_tile, prefetch,
};

use crate::error::{IndexError, Result};
use simsimd::SpatialSimilarity;

fn check_lengths(a: usize, b: usize) -> Result<()> {
    if a == b {
        Ok(())
    } else {
        Err(IndexError::DimensionMismatch {
            expected: a,
            got: b,
        })
    }
}

/// Dot product of two f32 vectors, with the scan kernel. For unit vectors, their cosine.
///
/// # Errors
/// `DimensionMismatch` when the lengths differ.
pub fn dot(a: &[f32], b: &[f32]) -> Result<f32> {
    check_lengths(a.len(), b.len())?;
    let mut score = 0.0;
    each_dot_f32(a, b, |_, s| score = s);
    Ok(score)
}

/// Dot products of `query` with every row of `rows` (row-major, `query.len()` wide), in row
/// order, with the scan kernel: one call for a whole matrix instead of one per row.
///
/// # Errors
/// `DimensionMismatch` when `query` is empty or `rows` is not a whole number of rows.
pub fn dot_rows(query: &[f32], rows: &[f32]) -> Result<Vec<f32>> {
    if query.is_empty() || !rows.len().is_multiple_of(query.len()) {
        return Err(IndexError::DimensionMismatch {
            expected: query.len(),
            got: rows.len(),
        });
    }
    let mut out = vec![0.0; rows.len() / query.len()];
    each_dot_f32(query, rows, |i, s| {
        if let Some(o) = out.get_mut(i) {
            *o = s;
        }
    });
    Ok(out)
}

/// Dot product of two i8 vectors, exact, with the scan kernel.
///
/// # Errors
/// `DimensionMismatch` when the lengths differ.
pub fn dot_i8(a: &[i8], b: &[i8]) -> Result<i32> {
    check_lengths(a.len(), b.len())?;
    let mut score = 0;
    each_dot_i8(a, b, |_, s| score = s);
    Ok(score)
}

/// Cosine similarity (1 = same direction) of two f32 vectors through simsimd; 0 for a zero
/// vector.
///
/// # Errors
/// `DimensionMismatch` when the lengths differ.
pub fn cosine(a: &[f32], b: &[f32]) -> Result<f32> {
    check_lengths(a.len(), b.len())?;
    if a.is_empty() {
        return Ok(0.0);
    }
    let distance = <f32 as SpatialSimilarity>::cos(a, b).unwrap_or(1.0);
    #[expect(clippy::cast_possible_truncation, reason = "similarity in [-1, 1]")]
    Ok((1.0 - distance) as f32)
}

/// simsimd's f32 dot product: the baseline the benches compare the scan kernel with.
///
/// # Errors
/// `DimensionMismatch` when the lengths differ.
pub fn dot_simsimd(a: &[f32], b: &[f32]) -> Result<f32> {
    check_lengths(a.len(), b.len())?;
    #[expect(
        clippy::cast_possible_truncation,
        reason = "f32 inputs, f64 accumulator"
    )]
    Ok(<f32 as SpatialSimilarity>::dot(a, b).map_or(0.0, |d| d as f32))
}

/// simsimd's i8 dot product: the baseline for [`dot_i8`].
///
/// # Errors
/// `DimensionMismatch` when the lengths differ.
pub fn dot_i8_simsimd(a: &[i8], b: &[i8]) -> Result<i32> {
    check_lengths(a.len(), b.len())?;
    #[expect(
        clippy::cast_possible_truncation,
        reason = "exact integer result < 2^31"
    )]
    Ok(<i8 as SpatialSimilarity>::dot(a, b).map_or(0, |d| d as i32))
}

#[cfg(test)]
mod tests {
    use super::x86::for_each_backend;
    use super::*;
    use proptest::prelude::*;

    fn seeded_f32(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                #[expect(clippy::cast_precision_loss, reason = "test data")]
                let v = (s % 2001) as f32 / 1000.0 - 1.0;
                v
            })
            .collect()
    }

    #[test]
    fn f32_dot_matches_oracle_for_every_length_and_offset() {
        for_each_backend(|backend| {
            for len in 0..=1024 {
                for offset in 0..16 {
                    let a = seeded_f32(len + offset, len as u64);
                    let b = seeded_f32(len + offset, len as u64 + 7);
                    let (a, b) = (&a[offset..], &b[offset..]);
                    let oracle = scalar::dot_f32(a, b);
                    let magnitude: f64 =
                        a.iter().zip(b).map(|(x, y)| f64::from((x * y).abs())).sum();
                    for got in [dot(a, b).unwrap(), dot_simsimd(a, b).unwrap()] {
                        let got = f64::from(got);
                        assert!(
                            (got - oracle).abs() <= 1e-5 * (1.0 + magnitude),
                            "{backend}: len {len} offset {offset}: {got} vs {oracle}"
                        );
                    }
                }
            }
        });
    }

    #[test]
    fn dot_rows_equals_one_dot_per_row() {
        for_each_backend(|backend| {
            for (dim, rows) in [(1, 5), (3, 7), (16, 1), (384, 33), (385, 4)] {
                let q = seeded_f32(dim, 1);
                let m = seeded_f32(dim * rows, 2);
                let all = dot_rows(&q, &m).unwrap();
                assert_eq!(all.len(), rows);
                for (r, got) in all.iter().enumerate() {
                    assert_eq!(
                        *got,
                        dot(&q, &m[r * dim..(r + 1) * dim]).unwrap(),
                        "{backend}: {dim} {r}"
                    );
                }
            }
            assert!(dot_rows(&[], &[1.0]).is_err());
            assert!(dot_rows(&[1.0, 2.0], &[1.0, 2.0, 3.0]).is_err());
            assert!(dot_rows(&[1.0, 2.0], &[]).unwrap().is_empty());
        });
    }

    #[test]
    fn i8_dot_is_exact_for_every_length_and_offset() {
        for_each_backend(|backend| {
            for len in 0..=1024usize {
                for offset in 0..16 {
                    #[expect(clippy::cast_possible_truncation, reason = "test data")]
                    let a: Vec<i8> = (0..len + offset)
                        .map(|i| ((i * 37 + len) % 255) as u8 as i8)
                        .collect();
                    #[expect(clippy::cast_possible_truncation, reason = "test data")]
                    let b: Vec<i8> = (0..len + offset)
                        .map(|i| ((i * 91 + 3) % 255) as u8 as i8)
                        .collect();
                    let (a, b) = (&a[offset..], &b[offset..]);
                    assert_eq!(
                        i64::from(dot_i8(a, b).unwrap()),
                        scalar::dot_i8(a, b),
                        "{backend}: len {len}"
                    );
                }
            }
        });
    }

    #[test]
    fn the_multi_query_tile_matches_the_oracle_for_every_shape() {
        for_each_backend(|backend| {
            for dim in (1..=40).chain([63, 64, 65, 384]) {
                for rows in 0..=9 {
                    let m = seeded_f32(dim * rows, dim as u64 + 3);
                    for nq in 1..=5 {
                        let qs: Vec<Vec<f32>> =
                            (0..nq).map(|j| seeded_f32(dim, 100 + j as u64)).collect();
                        let refs: Vec<&[f32]> = qs.iter().map(Vec::as_slice).collect();
                        let mut seen = vec![0u32; rows * 4];
                        each_dot_f32_tile(&refs, dim, &m, |r, j, got| {
                            seen[r * 4 + j] += 1;
                            let row = &m[r * dim..(r + 1) * dim];
                            // A pair scores the same bits alone as in a tile.
                            let mut alone = f32::NAN;
                            each_dot_f32_tile(&[&qs[j]], dim, row, |_, _, s| alone = s);
                            assert_eq!(
                                got.to_bits(),
                                alone.to_bits(),
                                "{backend}: dim {dim} rows {rows}"
                            );
                            let oracle = scalar::dot_f32(&qs[j], row);
                            let magnitude: f64 = qs[j]
                                .iter()
                                .zip(row)
                                .map(|(x, y)| f64::from((x * y).abs()))
                                .sum();
                            assert!(
                                (f64::from(got) - oracle).abs() <= 1e-5 * (1.0 + magnitude),
                                "{backend}: dim {dim} rows {rows} q {j}: {got} vs {oracle}"
                            );
                        });
                        // Every pair once, and a fifth query ignored.
                        let want = nq.min(4);
                        for r in 0..rows {
                            for j in 0..4 {
                                assert_eq!(
                                    seen[r * 4 + j],
                                    u32::from(j < want),
                                    "{backend}: dim {dim} rows {rows}"
                                );
                            }
                        }
                    }
                }
            }
        });
    }

    #[test]
    fn the_i8_multi_query_tile_is_exact_for_every_shape() {
        for_each_backend(|backend| {
            #[expect(clippy::cast_possible_truncation, reason = "test data")]
            let codes = |n: usize, seed: usize| -> Vec<i8> {
                (0..n)
                    .map(|i| ((i * 37 + seed * 91) % 255) as u8 as i8)
                    .collect()
            };
            for dim in (1..=40).chain([63, 64, 65, 127, 128, 129, 384]) {
                for rows in 0..=9 {
                    let m = codes(dim * rows, dim + 3);
                    for nq in 1..=5 {
                        let qs: Vec<Vec<i8>> = (0..nq).map(|j| codes(dim, 100 + j)).collect();
                        let refs: Vec<&[i8]> = qs.iter().map(Vec::as_slice).collect();
                        let mut seen = vec![0u32; rows * 4];
                        each_dot_i8_tile(&refs, dim, &m, |r, j, got| {
                            seen[r * 4 + j] += 1;
                            let oracle = scalar::dot_i8(&qs[j], &m[r * dim..(r + 1) * dim]);
                            assert_eq!(
                                i64::from(got),
                                oracle,
                                "{backend}: dim {dim} rows {rows} q {j}"
                            );
                        });
                        let want = nq.min(4);
                        for r in 0..rows {
                            for j in 0..4 {
                                assert_eq!(
                                    seen[r * 4 + j],
                                    u32::from(j < want),
                                    "{backend}: dim {dim} rows {rows}"
                                );
                            }
                        }
                    }
                }
            }
        });
    }

    #[test]
    fn mismatched_lengths_are_an_error() {
        assert!(matches!(
            dot(&[1.0], &[1.0, 2.0]),
            Err(IndexError::DimensionMismatch { .. })
        ));
        assert!(matches!(
            cosine(&[1.0], &[]),
            Err(IndexError::DimensionMismatch { .. })
        ));
        assert!(matches!(
            dot_i8(&[1], &[]),
            Err(IndexError::DimensionMismatch { .. })
        ));
    }

    proptest! {
        #[test]
        fn cosine_matches_oracle(a in proptest::collection::vec(-10.0f32..10.0, 1..400), seed in 0u64..1000) {
            let b = seeded_f32(a.len(), seed);
            let got = f64::from(cosine(&a, &b).unwrap());
            let oracle = scalar::cosine_f32(&a, &b);
            prop_assert!((got - oracle).abs() <= 1e-4, "{} vs {}", got, oracle);
        }
    }
}
