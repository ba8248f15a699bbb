//! i8 codes with one scale per vector: the compact storage type the scan reads first.
//!
//! `scale = max|vᵢ| / 127`, `codeᵢ = round(vᵢ / scale)`. For unit vectors in 384-d the
//! approximate score `scale_v · dot_i8(code_q, code_v)` orders neighbours closely enough that
//! re-ranking a few times k candidates with exact f32 recovers the f32 top-k (measured in
//! `tests/it/search.rs` and `docs/benchmarks.md`).

/// Writes the i8 codes of `v` into `codes` and returns the scale. `codes.len() == v.len()`.
///
/// Each code is `round(x · 127 / max|v|)` (halves away from zero), clamped to ±127. Written so
/// that the compiler vectorizes it on the baseline target: `f32::round` is a libm call per
/// element, and it made quantizing a vector most of the cost of replaying a STORE
/// (`docs/benchmarks.md`, "Opening 1M memories after the keyword index"). The result is the
/// same to the bit (`tests::the_vectorized_rounding_is_the_scalar_one`).
#[must_use]
pub fn encode_into(v: &[f32], codes: &mut [i8]) -> f32 {
    let max = max_abs(v);
    if max == 0.0 || !max.is_finite() {
        codes.fill(0);
        return 0.0;
    }
    let scale = max / 127.0;
    let inv = 127.0 / max;
    for (c, x) in codes.iter_mut().zip(v) {
        // Clamping first gives what clamping the rounded value gives (±127 are whole). Adding
        // 1.5 · 2^23 rounds to a whole number (halves to even) that the float's low bits hold;
        // ties the even rounding took toward zero are moved away from it. No float-to-int
        // cast: its saturation keeps the loop scalar.
        let y = (x * inv).clamp(-127.0, 127.0);
        let shifted = y + ROUNDING;
        #[expect(
            clippy::cast_possible_wrap,
            reason = "bit patterns of floats in [2^23, 2^24): the difference is the whole number"
        )]
        let even = shifted.to_bits() as i32 - ROUNDING.to_bits() as i32;
        let diff = y - (shifted - ROUNDING);
        let away = i32::from(diff == 0.5 && y > 0.0) - i32::from(diff == -0.5 && y < 0.0);
        let q = if y.is_nan() { 0 } else { even + away };
        #[expect(clippy::cast_possible_truncation, reason = "q is within [-127, 127]")]
        let code = q as i8;
        *c = code;
    }
    scale
}

/// 1.5 · 2^23: a float in [-127, 127] plus it lies where the float spacing is 1.
const ROUNDING: f32 = 12_582_912.0;

/// The largest `|x|` of `v` (NaN ignored), over 16 lanes so that it vectorizes.
fn max_abs(v: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 16];
    let mut chunks = v.chunks_exact(16);
    for chunk in &mut chunks {
        for (m, x) in lanes.iter_mut().zip(chunk) {
            *m = m.max(x.abs());
        }
    }
    let tail = chunks
        .remainder()
        .iter()
        .fold(0.0f32, |m, x| m.max(x.abs()));
    lanes.iter().fold(tail, |m, x| m.max(*x))
}

/// The i8 codes and scale of `v`.
#[must_use]
pub fn encode(v: &[f32]) -> (Vec<i8>, f32) {
    let mut codes = vec![0i8; v.len()];
    let scale = encode_into(v, &mut codes);
    (codes, scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_of_encode_is_within_half_a_step() {
        let v: Vec<f32> = (0..384).map(|i| ((i as f32) * 0.37).sin()).collect();
        let (codes, scale) = encode(&v);
        for (c, x) in codes.iter().zip(&v) {
            assert!((f32::from(*c) * scale - x).abs() <= scale * 0.5 + 1e-6);
        }
    }

    /// The formula before it was vectorized: `round` (halves away from zero), then clamp.
    fn scalar_codes(v: &[f32]) -> (Vec<i8>, f32) {
        let max = v.iter().fold(0.0f32, |m, x| m.max(x.abs()));
        if max == 0.0 || !max.is_finite() {
            return (vec![0; v.len()], 0.0);
        }
        let inv = 127.0 / max;
        #[expect(clippy::cast_possible_truncation, reason = "within [-127, 127]")]
        let codes = v
            .iter()
            .map(|x| (x * inv).round().clamp(-127.0, 127.0) as i8)
            .collect();
        (codes, max / 127.0)
    }

    #[test]
    fn the_vectorized_rounding_is_the_scalar_one() {
        // Halves, the float just below a half, values past ±127 once scaled (the max is not
        // the first element), NaN, and a seeded spread of ordinary vectors.
        let below_half = f32::from_bits(0.5f32.to_bits() - 1);
        let edge: Vec<f32> = [
            0.5,
            -0.5,
            1.5,
            -1.5,
            2.5,
            -2.5,
            126.5,
            -126.5,
            below_half,
            -below_half,
            127.0,
            -127.0,
            0.0,
            -0.0,
            3.0,
            f32::NAN,
            1e-30,
            -1e-30,
        ]
        .to_vec();
        let mut cases = vec![edge];
        for n in [1, 15, 16, 17, 384, 385] {
            let mut state = 0x5EED_u64 ^ n as u64;
            cases.push(
                (0..n)
                    .map(|_| {
                        state = state
                            .wrapping_mul(6_364_136_223_846_793_005)
                            .wrapping_add(1_442_695_040_888_963_407);
                        #[expect(clippy::cast_precision_loss, reason = "a test value")]
                        let u = (state >> 40) as f32 / (1u64 << 24) as f32;
                        (u - 0.5) * 3.0
                    })
                    .collect(),
            );
        }
        // Rows whose scaled values land exactly on halves: max 127 so that x * inv == x.
        cases.push(
            (0..=254)
                .map(|i| f32::from(i as u8) - 127.0 + 0.5)
                .chain([127.0])
                .collect(),
        );
        for v in &cases {
            let (want, want_scale) = scalar_codes(v);
            let (got, got_scale) = encode(v);
            assert_eq!(got, want, "{v:?}");
            assert_eq!(got_scale.to_bits(), want_scale.to_bits());
        }
    }

    #[test]
    fn zero_vector_has_zero_scale() {
        assert_eq!(encode(&[0.0; 8]), (vec![0; 8], 0.0));
    }
}
