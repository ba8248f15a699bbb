//! Scalar oracles: the plain loops every SIMD kernel is tested against.

/// Dot product of two f32 vectors of equal length, accumulated in f64.
#[must_use]
pub fn dot_f32(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| f64::from(*x) * f64::from(*y))
        .sum()
}

/// Cosine similarity of two f32 vectors; 0 when either has zero norm.
#[must_use]
pub fn cosine_f32(a: &[f32], b: &[f32]) -> f64 {
    let norms = dot_f32(a, a) * dot_f32(b, b);
    if norms == 0.0 {
        0.0
    } else {
        dot_f32(a, b) / norms.sqrt()
    }
}

/// Dot product of two i8 vectors of equal length, exact in i64.
#[must_use]
pub fn dot_i8(a: &[i8], b: &[i8]) -> i64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| i64::from(*x) * i64::from(*y))
        .sum()
}
