//! How long an IVF build takes where the store runs it: on one thread (`IndexOptions::threads`
//! default), on the vectors the no-model (hashing) embedder gives the bench notes, where a
//! recall@10 of 0.95 needs a third of the lists, and on the `search` bench's synthetic clusters
//! (1,000 clusters, spread 0.5), where it needs few.
//! Prints each build's seconds, nlist, nprobe, recall and how many nprobes it searched at.
//!
//! Usage: `cargo run --release -p amberdb-benches --bin ivf_build [N]` (default 100,000).

#![expect(clippy::print_stdout, reason = "a bench tool reports on stdout")]

use amberdb_benches::{SEED, bench_notes, vectors};
use amberdb_embed::{Embedder, HashingEmbedder};
use amberdb_index::ivf::{IvfParams, build};
use std::time::Instant;

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .map_or(100_000, |a| a.parse().expect("N"));
    let seed = 0x1BF0 + n as u64;
    let embedder = HashingEmbedder::new();
    let dim = embedder.dim();
    let notes = bench_notes(n, seed);
    let texts: Vec<&str> = notes.iter().map(String::as_str).collect();
    let hashed: Vec<f32> = embedder
        .embed_batch(&texts)
        .expect("hashing embeds")
        .into_iter()
        .flatten()
        .collect();
    let synthetic = vectors(n, SEED);
    let keys: Vec<u64> = (1..=n as u64).collect();
    let one = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("pool");
    println!(
        "IVF build of {n} rows at {dim}-d on 1 thread, kernels {}",
        amberdb_index::kernels::backend()
    );
    for (data, vectors) in [
        ("hashing embedder, bench notes", &hashed),
        ("synthetic clusters", &synthetic),
    ] {
        let started = Instant::now();
        let built = one
            .install(|| build(&keys, vectors, dim, &IvfParams::new(seed)))
            .expect("build");
        println!(
            "{data:<32} {:>7.1} s  nlist {:>5}  nprobe {:>5}  recall@10 {:.3}  curve {:?}",
            started.elapsed().as_secs_f64(),
            built.nlist,
            built.nprobe,
            built.built_recall,
            built.curve
        );
    }
}
