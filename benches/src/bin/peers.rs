//! The amberdb half of the side-by-side comparison (`benches/peers/run.sh`): writes the seeded
//! vectors and queries as raw little-endian f32 files for the Python peers, times amberdb's exact
//! top-10 on the same data (one query at a time; f32 on 1 and 2 threads, i8 + re-rank on 1 and
//! 2), and writes `amberdb.json` with the medians and each query's exact top-10 ids.
//!
//! Usage: `peers <rows> <queries> <out_dir>`

#![expect(clippy::print_stdout, reason = "a bench tool reports on stdout")]

use amberdb_benches::{DIM, SEED, sealed_collection, vectors};
use amberdb_index::{Scan, SearchParams};
use anyhow::Context;
use std::io::Write;
use std::time::Instant;

fn write_f32(path: &std::path::Path, v: &[f32]) -> anyhow::Result<()> {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    for x in v {
        f.write_all(&x.to_le_bytes())?;
    }
    f.flush()?;
    Ok(())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let rows: usize = args.get(1).context("rows")?.parse()?;
    let nq: usize = args.get(2).context("queries")?.parse()?;
    let out = std::path::PathBuf::from(args.get(3).context("out_dir")?);
    std::fs::create_dir_all(&out)?;
    let data = vectors(rows, SEED);
    let queries = vectors(nq, SEED + 1);
    write_f32(&out.join("vectors.f32"), &data)?;
    write_f32(&out.join("queries.f32"), &queries)?;
    let collection = sealed_collection(&data);
    drop(data);
    let mut results = serde_like::Json::default();
    let mut exact_ids: Vec<Vec<u64>> = Vec::new();
    for (name, threads, scan) in [
        ("amberdb f32", 1, Scan::F32),
        ("amberdb f32", 2, Scan::F32),
        ("amberdb i8+rerank", 1, Scan::i8_for(10)),
        ("amberdb i8+rerank", 2, Scan::i8_for(10)),
    ] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()?;
        let p = SearchParams {
            scan,
            ..SearchParams::top(10)
        };
        let mut times = Vec::new();
        let mut hits = 0usize;
        for (i, q) in queries.chunks_exact(DIM).enumerate() {
            let start = Instant::now();
            let found = pool.install(|| collection.search(q, &p))?;
            times.push(start.elapsed().as_secs_f64() * 1e3);
            // Keys are 1-based; the peers number rows from 0.
            let ids: Vec<u64> = found.iter().map(|n| n.key - 1).collect();
            if exact_ids.len() <= i {
                exact_ids.push(ids);
            } else if let Some(want) = exact_ids.get(i) {
                hits += ids.iter().filter(|id| want.contains(id)).count();
            }
        }
        let recall = if scan == Scan::F32 && threads == 1 {
            1.0
        } else {
            hits as f64 / (10 * nq) as f64
        };
        let ms = median(times);
        println!("{name:<22} {threads} thread(s)  median {ms:8.2} ms/query  recall@10 {recall:.4}");
        results.push(name, threads, ms, recall);
    }
    std::fs::write(
        out.join("amberdb.json"),
        results.finish(&exact_ids, amberdb_index::kernels::backend()),
    )?;
    Ok(())
}

/// A few lines of JSON by hand: the bench crate needs no serde for one file.
mod serde_like {
    #[derive(Default)]
    pub struct Json(Vec<String>);

    impl Json {
        pub fn push(&mut self, name: &str, threads: usize, ms: f64, recall: f64) {
            self.0.push(format!(
                "{{\"name\": \"{name}\", \"threads\": {threads}, \"median_ms\": {ms:.3}, \"recall_at_10\": {recall:.4}}}"
            ));
        }

        pub fn finish(self, exact: &[Vec<u64>], backend: &str) -> String {
            let ids: Vec<String> = exact
                .iter()
                .map(|q| {
                    format!(
                        "[{}]",
                        q.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")
                    )
                })
                .collect();
            format!(
                "{{\"backend\": \"{backend}\", \"results\": [{}], \"exact_top10\": [{}]}}\n",
                self.0.join(", "),
                ids.join(", ")
            )
        }
    }
}
