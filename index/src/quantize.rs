//! i8 codes with one scale per vector: the compact storage type the scan reads first.
//!
//! `scale = max|vᵢ| / 127`, `codeᵢ = round(vᵢ / scale)`. For unit vectors in 384-d the
//! approximate score `scale_v · dot_i8(code_q, code_v)` orders neighbours closely enough that
//! re-ranking a few times k candidates with exact f32 recovers the f32 top-k (measured in
//! `tests/it/search.rs` and `docs/benchmarks.md`).

/// Writes the i8 codes of `v` into `codes` and returns the scale. `codes.len() == v.len()`.
#[must_use]
pub fn encode_into(v: &[f32], codes: &mut [i8]) -> f32 {
    let max = v.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    if max == 0.0 || !max.is_finite() {
        codes.fill(0);
        return 0.0;
    }
    let scale = max / 127.0;
    let inv = 127.0 / max;
    for (c, x) in codes.iter_mut().zip(v) {
        #[expect(
            clippy::cast_possible_truncation,
            reason = "rounded value is within [-127, 127]"
        )]
        let q = (x * inv).round().clamp(-127.0, 127.0) as i8;
        *c = q;
    }
    scale
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

    #[test]
    fn zero_vector_has_zero_scale() {
        assert_eq!(encode(&[0.0; 8]), (vec![0; 8], 0.0));
    }
}
