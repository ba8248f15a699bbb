//! This machine's streaming read bandwidth, the floor of every exact scan: sums a 1.536 GB
//! f32 array (the size of 1M × 384 vectors) on 1 and 2 threads and prints the best of 5.
//!
//! Usage: `cargo run --release -p amberdb-benches --bin membw`

#![expect(clippy::print_stdout, reason = "a bench tool reports on stdout")]

use rayon::prelude::*;
use std::time::Instant;

/// Sums with 32 independent lanes so that the loop is bound by memory, not by add latency.
fn sum(chunk: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 32];
    let (blocks, tail) = chunk.as_chunks::<32>();
    for block in blocks {
        for (l, x) in lanes.iter_mut().zip(block) {
            *l += x;
        }
    }
    lanes.iter().sum::<f32>() + tail.iter().sum::<f32>()
}

fn main() -> anyhow::Result<()> {
    let n = 384_000_000usize;
    #[expect(clippy::cast_precision_loss, reason = "filler values")]
    let data: Vec<f32> = (0..n).map(|i| (i % 7) as f32).collect();
    let gb = (n * 4) as f64 / 1e9;
    for threads in [1, 2] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()?;
        let mut best = f64::MAX;
        for _ in 0..5 {
            let start = Instant::now();
            let total: f32 = pool.install(|| data.par_chunks(1 << 20).map(sum).sum());
            std::hint::black_box(total);
            best = best.min(start.elapsed().as_secs_f64());
        }
        println!(
            "{threads} thread(s): {:.1} ms for {gb:.3} GB = {:.1} GB/s (best of 5)",
            best * 1e3,
            gb / best
        );
    }
    Ok(())
}
