//! Shared helpers: seeded randomness and small stores.

use mnemo_engine::storage::FaultyStorage;
use mnemo_engine::{HashingEmbedder, StoreOptions};
use std::sync::Arc;

/// The seed of a randomized test: `MNEMO_SEED` if set, else `default`. Printed so a failure
/// can be replayed.
pub fn seed(test: &str, default: u64) -> u64 {
    let seed = std::env::var("MNEMO_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default);
    eprintln!("{test}: seed {seed} (replay with MNEMO_SEED={seed})");
    seed
}

/// A small deterministic generator (xorshift64*), so tests need no rand crate.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    pub fn unit_vector(&mut self, dim: usize) -> Vec<f32> {
        #[expect(clippy::cast_precision_loss, reason = "test data")]
        let mut v: Vec<f32> = (0..dim)
            .map(|_| (self.below(2001) as f32 / 1000.0) - 1.0)
            .collect();
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-6);
        v.iter_mut().for_each(|x| *x /= n);
        v
    }
}

/// Options for a small 8-d store on `storage`, sealing every `seal_rows` rows.
pub fn small_options(storage: &FaultyStorage, seal_rows: usize) -> StoreOptions {
    StoreOptions::new(Arc::new(HashingEmbedder::with_dim(8)))
        .storage(Arc::new(storage.clone()))
        .seal_rows(seal_rows)
        .memory_limit(1_000_000)
}
