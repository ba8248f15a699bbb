//! Seeded synthetic vectors for tests and benches: unit vectors around random cluster
//! centres. Synthetic clusters flatter approximate indexes (`docs/benchmarks.md`); they are used here for
//! the exact scan and the i8 re-rank, whose recall does not depend on cluster structure the
//! way IVF probing does.

/// xorshift64*: small, fast, reproducible on every platform.
#[derive(Debug, Clone)]
pub struct SeededRng(u64);

impl SeededRng {
    /// A generator from `seed`.
    #[must_use]
    pub fn new(seed: u64) -> SeededRng {
        SeededRng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// A random unit vector of `dim` values.
    pub fn unit_vector(&mut self, dim: usize) -> Vec<f32> {
        let mut v: Vec<f32> = (0..dim).map(|_| self.gaussian()).collect();
        normalize(&mut v);
        v
    }

    /// Approximately standard normal (sum of uniforms).
    pub fn gaussian(&mut self) -> f32 {
        #[expect(clippy::cast_precision_loss, reason = "random bits to a float")]
        let s: f32 = (0..4)
            .map(|_| (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32)
            .sum();
        (s - 2.0) * 1.732
    }
}

/// The seed of a randomized test: `AMBERDB_SEED` if set, else `default`. Printed (to stderr) so
/// that a failure can be replayed with `AMBERDB_SEED=<n>`.
#[must_use]
pub fn seed_from_env(test: &str, default: u64) -> u64 {
    let seed = std::env::var("AMBERDB_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default);
    eprintln!("{test}: seed {seed} (replay with AMBERDB_SEED={seed})");
    seed
}

/// Scales `v` to unit length (a zero vector stays zero).
pub(crate) fn normalize(v: &mut [f32]) {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if n > 0.0 {
        v.iter_mut().for_each(|x| *x /= n);
    }
}

/// `n` unit vectors of `dim`, row-major, drawn around `clusters` random centres with noise
/// `spread` (0.3–0.6 gives neighbourhoods like sentence embeddings).
#[must_use]
pub fn clustered(n: usize, dim: usize, clusters: usize, spread: f32, seed: u64) -> Vec<f32> {
    let mut rng = SeededRng::new(seed);
    let mut centres = vec![0.0f32; clusters.max(1) * dim];
    for c in centres.chunks_exact_mut(dim) {
        c.iter_mut().for_each(|x| *x = rng.gaussian());
        normalize(c);
    }
    let mut out = vec![0.0f32; n * dim];
    for row in out.chunks_exact_mut(dim) {
        #[expect(clippy::cast_possible_truncation, reason = "modulo a usize")]
        let c = (rng.next_u64() % clusters.max(1) as u64) as usize;
        let centre = centres.get(c * dim..(c + 1) * dim).unwrap_or(&[]);
        for (x, m) in row.iter_mut().zip(centre) {
            *x = m + spread * rng.gaussian() / (dim as f32).sqrt();
        }
        normalize(row);
    }
    out
}
