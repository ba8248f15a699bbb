//! Shared helpers: seeded randomness (from `amberdb_index::synthetic`) and small stores.

use amberdb::storage::FaultyStorage;
use amberdb::{HashingEmbedder, HookConfig, StoreOptions, WriteHook};
use std::sync::Arc;

pub use amberdb_index::synthetic::{SeededRng as Rng, seed_from_env as seed};

/// Options for a small 8-d store on `storage`, sealing every `seal_rows` rows, with exact
/// dedup the only hook: the engine's own behaviour, which the model and crash tests check
/// against a `Vec`. Checkpoints run after the write that finds them due (no maintenance
/// thread), so a run's sync points are the same every time.
pub fn small_options(storage: &FaultyStorage, seal_rows: usize) -> StoreOptions {
    StoreOptions::new(Arc::new(HashingEmbedder::with_dim(8)))
        .storage(Arc::new(storage.clone()))
        .seal_rows(seal_rows)
        .maintenance_thread(false)
        .memory_limit(1_000_000)
        .hooks(HookConfig {
            write: vec![WriteHook::ExactDedup],
            ..HookConfig::none()
        })
}

/// The three disks a power cut at sync point `k` can leave (`CrashImage`): unsynced bytes
/// dropped, torn at a fraction that differs from one sync point to the next, or kept.
pub fn crash_images(k: impl Into<u64>) -> [amberdb::storage::CrashImage; 3] {
    use amberdb::storage::CrashImage;
    [
        CrashImage::DropUnsynced,
        CrashImage::TearUnsynced {
            numerator: (k.into() * 53 % 256) as u8,
        },
        CrashImage::KeepUnsynced,
    ]
}
