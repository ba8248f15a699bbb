//! MiniLM figures criterion does not give: sentences/s as a table, single-query latency
//! percentiles (spinning threads on and off), one session with 2 threads against a pool of two
//! 1-thread sessions under 2 concurrent callers, and peak RSS (measured in a fresh child
//! process, `embedbench rss`, so earlier runs do not raise its high-water mark).
//! It also writes its texts to target/bench-data/embed-{short,long}.txt for
//! `benches/embed/raw_ort.py`, the raw ONNX Runtime baseline (`benches/embed/run.sh` runs both).
//!
//! Usage: `cargo run --release -p amberdb-benches --bin embedbench [rss | headline]`

#![expect(clippy::print_stdout, reason = "a bench tool reports on stdout")]

use amberdb_benches::{SEED, bench_data_dir, bench_texts, minilm, minilm_with, status_kib};
use amberdb_embed::{Embedder, OnnxConfig, OnnxEmbedder};
use std::time::{Duration, Instant};

fn main() -> anyhow::Result<()> {
    let short = bench_texts(2048, 10, SEED);
    let long = bench_texts(256, 200, SEED);
    match std::env::args().nth(1).as_deref() {
        Some("rss") => return rss(),
        Some("headline") => {
            // The configurations the targets name, short enough to alternate with
            // raw_ort.py many times (benches/embed/run.sh).
            let model = minilm(2);
            println!(
                "amberdb short/32 {:.0} long/8 {:.0} short/1 {:.0}",
                sentences_per_second(&model, &short, 32),
                sentences_per_second(&model, &long, 8),
                sentences_per_second(&model, &short, 1)
            );
            return Ok(());
        }
        _ => {}
    }
    std::fs::create_dir_all(bench_data_dir())?;
    std::fs::write(bench_data_dir().join("embed-short.txt"), short.join("\n"))?;
    std::fs::write(bench_data_dir().join("embed-long.txt"), long.join("\n"))?;

    println!(
        "| texts | batch | 1 thread (sent/s) | 2 threads (sent/s) | 2 threads, spinning (sent/s) |\n|---|---|---|---|---|"
    );
    let spinning = minilm_with(OnnxConfig {
        intra_threads: 2,
        spinning: true,
        ..OnnxConfig::default()
    });
    let models = [minilm(1), minilm(2), spinning];
    for (name, texts) in [("short", &short), ("long", &long)] {
        for batch in [1, 8, 32] {
            let rates: Vec<String> = models
                .iter()
                .map(|m| format!("{:.0}", sentences_per_second(m, texts, batch)))
                .collect();
            println!("| {name} | {batch} | {} |", rates.join(" | "));
        }
    }

    println!("\nsingle short query, 500 distinct texts:");
    for spinning in [false, true] {
        for threads in [1, 2] {
            let model = minilm_with(OnnxConfig {
                intra_threads: threads,
                spinning,
                ..OnnxConfig::default()
            });
            let mut times: Vec<Duration> = short[..550]
                .iter()
                .map(|t| {
                    let start = Instant::now();
                    model.embed(t).expect("embed");
                    start.elapsed()
                })
                .skip(50)
                .collect();
            times.sort();
            let at = |p: usize| times[(times.len() * p / 100).min(times.len() - 1)];
            println!(
                "  {threads} thread(s), spinning {spinning}: p50 {:.2?} p90 {:.2?} p99 {:.2?}",
                at(50),
                at(90),
                at(99)
            );
        }
    }

    println!("\n2 callers, single short queries (1,000 in all):");
    for (sessions, threads) in [(1, 2), (2, 1)] {
        let model = minilm_with(OnnxConfig {
            sessions,
            intra_threads: threads,
            ..OnnxConfig::default()
        });
        let start = Instant::now();
        std::thread::scope(|s| {
            for caller in 0..2 {
                let model = &model;
                let texts = &short[caller * 500..(caller + 1) * 500];
                s.spawn(move || texts.iter().for_each(|t| drop(model.embed(t))));
            }
        });
        let rate = 1000.0 / start.elapsed().as_secs_f64();
        println!("  {sessions} session(s) x {threads} thread(s): {rate:.0} queries/s");
    }

    let child = std::process::Command::new(std::env::current_exe()?)
        .arg("rss")
        .output()?;
    print!("\n{}", String::from_utf8_lossy(&child.stdout));
    anyhow::ensure!(
        child.status.success(),
        "{}",
        String::from_utf8_lossy(&child.stderr)
    );
    Ok(())
}

/// Best of three ~1 s runs embedding `texts` in calls of `batch`.
fn sentences_per_second(model: &OnnxEmbedder, texts: &[String], batch: usize) -> f64 {
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    model.embed_batch(&refs[..batch]).expect("warm up");
    (0..3)
        .map(|_| {
            let start = Instant::now();
            let mut done = 0;
            for chunk in refs.chunks(batch).cycle() {
                model.embed_batch(chunk).expect("embed");
                done += chunk.len();
                if start.elapsed() > Duration::from_secs(1) {
                    break;
                }
            }
            done as f64 / start.elapsed().as_secs_f64()
        })
        .fold(0.0, f64::max)
}

/// Peak RSS of a process that loads MiniLM with the default config and embeds long and
/// 256-token texts in calls of 32 and 256.
fn rss() -> anyhow::Result<()> {
    let model = minilm(2);
    let after_load = status_kib("VmRSS:");
    let long = bench_texts(256, 200, SEED);
    let max = bench_texts(64, 300, SEED + 1);
    for texts in [&long, &max] {
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        for call in [32, 256] {
            for chunk in refs.chunks(call) {
                model.embed_batch(chunk)?;
            }
        }
    }
    println!(
        "RSS after load {} MiB; peak {} MiB after long (~202) and max (256-token) texts in calls of 32 and 256 (batch_tokens {})",
        after_load / 1024,
        status_kib("VmHWM:") / 1024,
        model.config().batch_tokens
    );
    Ok(())
}
