//! The real-text side of docs/ivf.md ("Measured on real text"), on the set `scripts/real-text`
//! builds in `$AMBERDB_REAL_TEXT_DIR` (default `~/.cache/amberdb/real-text`), or the DIR given.
//!
//! ```text
//! realtext embed DIR          embed passages.tsv and queries.tsv with our MiniLM into
//!                             passages.f32 / queries.f32 (resumable: rows already written
//!                             are kept, the rest appended)
//! realtext bench DIR N [Q]    on the first N passages and Q queries (default 1,000): exact
//!                             top-10 ground truth (cached), our exact f32 and i8 scans, an
//!                             IVF build (time, bytes) and its nprobe sweep at 1 and 2
//!                             threads, filtered search at 0.1 / 1 / 10 / 50 % selectivity;
//!                             writes amberdb-N.json for `benches/ivf/peers.py` and prints
//!                             the tables (with AMBERDB_KERNELS=avx2 or avx512bw, those
//!                             kernels on a host with more: amberdb-N-avx2.json or
//!                             amberdb-N-avx512bw.json, beside the default's)
//! realtext range DIR N [Q]    store-time dedup's range query (every row at or above a
//!                             similarity, at most 50) on the first N passages: for each
//!                             floor, the rows in range brute force finds, and the share of
//!                             them and the queries/s of an IVF probe by `Probe::Range` from
//!                             1 to 32 lists and by the built nprobe
//! realtext probe DIR N [Q] [NPROBE...]
//!                             the IVF sweep alone at the given nprobes (default: the
//!                             built one), 1 and 2 threads, against an index built once and
//!                             kept in DIR/ivf-N.seg (rebuilt when it no longer opens): for
//!                             profiling and for before/after figures of a change to the probe
//!                             (AMBERDB_PROBE_CODES=1-bit|i8 and AMBERDB_PROBE_THREADS=1|2
//!                             run one side alone; AMBERDB_IVF_NLIST sets the list count,
//!                             AMBERDB_PROBE_PASSES the passes a figure is the median of)
//! realtext open DIR FILE      the time to open an IVF segment file as a store opens it
//!                             (mapped, `MAP_POPULATE`, every check of its open), the
//!                             median of 5, the file in the page cache
//! ```
//!
//! Usage: `cargo run --release -p amberdb-benches --bin realtext -- bench ~/.cache/amberdb/real-text 100000`

#![expect(clippy::print_stdout, reason = "a bench tool reports on stdout")]

use amberdb_benches::minilm;
use amberdb_embed::Embedder;
use amberdb_index::ivf::{IvfParams, build};
use amberdb_index::segment::writer;
use amberdb_index::{Collection, FlatSegment, IvfSegment, Probe, Scan, SealedBytes, SearchParams};
use std::io::{BufRead, BufReader, Seek, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

const DIM: usize = 384;
const SEAL_ROWS: usize = 65_536;
const K: usize = 10;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let dir = args.get(2).map_or_else(default_dir, PathBuf::from);
    match args.get(1).map(String::as_str) {
        Some("embed") => {
            embed(&dir.join("queries.tsv"), &dir.join("queries.f32"))?;
            embed(&dir.join("passages.tsv"), &dir.join("passages.f32"))
        }
        Some("bench") => {
            let n: usize = args.get(3).map_or(Ok(100_000), |s| s.parse())?;
            let q: usize = args.get(4).map_or(Ok(1_000), |s| s.parse())?;
            bench(&dir, n, q)
        }
        Some("range") => {
            let n: usize = args.get(3).map_or(Ok(100_000), |s| s.parse())?;
            let q: usize = args.get(4).map_or(Ok(1_000), |s| s.parse())?;
            range(&dir, n, q)
        }
        Some("probe") => {
            let n: usize = args.get(3).map_or(Ok(100_000), |s| s.parse())?;
            let q: usize = args.get(4).map_or(Ok(1_000), |s| s.parse())?;
            let nprobes = args
                .get(5..)
                .unwrap_or(&[])
                .iter()
                .map(|s| s.parse())
                .collect::<Result<Vec<u32>, _>>()?;
            probe(&dir, n, q, &nprobes)
        }
        Some("open") => {
            let file = args.get(3).map(PathBuf::from).ok_or_else(|| {
                anyhow::anyhow!("usage: realtext open DIR FILE (an IVF segment `probe` kept)")
            })?;
            open_segment(&dir.join(file))
        }
        _ => anyhow::bail!(
            "usage: realtext embed DIR | realtext bench DIR N [QUERIES] | realtext range DIR N [QUERIES] | realtext probe DIR N [QUERIES] [NPROBE...] | realtext open DIR FILE"
        ),
    }
}

/// Embeds the text after the first tab of each line of `tsv`, appending to `out`.
fn embed(tsv: &Path, out: &Path) -> anyhow::Result<()> {
    let done = std::fs::metadata(out).map_or(0, |m| m.len()) as usize / (DIM * 4);
    // A partly written last row (a kill mid-write) is cut off and redone.
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(out)?;
    file.set_len((done * DIM * 4) as u64)?;
    let mut file = std::io::BufWriter::new(file);
    file.seek(std::io::SeekFrom::End(0))?;
    let model = minilm(2);
    let lines: Vec<String> = BufReader::new(std::fs::File::open(tsv)?)
        .lines()
        .collect::<Result<_, _>>()?;
    let texts: Vec<&str> = lines
        .iter()
        .map(|l| l.split_once('\t').map_or(l.as_str(), |(_, t)| t))
        .collect();
    let start = Instant::now();
    let mut written = done;
    for batch in texts.get(done..).unwrap_or(&[]).chunks(256) {
        for v in model.embed_batch(batch)? {
            for x in v {
                file.write_all(&x.to_le_bytes())?;
            }
        }
        written += batch.len();
        file.flush()?;
        if written % 10_240 < 256 {
            let rate = (written - done) as f64 / start.elapsed().as_secs_f64();
            println!(
                "{}: {written} / {} ({rate:.0}/s)",
                tsv.display(),
                texts.len()
            );
        }
    }
    println!(
        "{}: {} rows, {:.0} s for {}",
        out.display(),
        texts.len(),
        start.elapsed().as_secs_f64(),
        written - done
    );
    Ok(())
}

fn read_rows(path: &Path, n: usize) -> anyhow::Result<Vec<f32>> {
    let bytes = std::fs::read(path)?;
    let have = bytes.len() / (DIM * 4);
    anyhow::ensure!(
        have >= n,
        "{} has {have} rows, {n} asked: run scripts/real-text embed",
        path.display()
    );
    Ok(bytes
        .get(..n * DIM * 4)
        .unwrap_or(&[])
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect())
}

/// `AMBERDB_IVF_NLIST`: a list count for the benches' builds instead of `nlist_for` the rows
/// (to measure the trade between ranking lists and scanning them; not a product setting).
fn nlist_override() -> Option<usize> {
    std::env::var("AMBERDB_IVF_NLIST").ok()?.parse().ok()
}

/// Lists of the collection's one IVF segment.
fn ivf_nlist(c: &Collection) -> usize {
    c.sealed()
        .iter()
        .find_map(|s| s.as_ivf().map(IvfSegment::nlist))
        .unwrap_or(0)
}

/// Where `scripts/real-text` keeps the set: `$AMBERDB_REAL_TEXT_DIR`, else
/// `~/.cache/amberdb/real-text`.
fn default_dir() -> PathBuf {
    std::env::var_os("AMBERDB_REAL_TEXT_DIR").map_or_else(
        || {
            std::env::var_os("HOME")
                .map_or_else(|| PathBuf::from("."), PathBuf::from)
                .join(".cache/amberdb/real-text")
        },
        PathBuf::from,
    )
}

fn pool(threads: usize) -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("thread pool")
}

/// Flat segments of `SEAL_ROWS` with codes, as the engine seals them; keys 1..=n.
fn flat_collection(rows: &[f32]) -> anyhow::Result<Collection> {
    let mut c = Collection::new(DIM);
    let n = rows.len() / DIM;
    for start in (0..n).step_by(SEAL_ROWS) {
        let end = (start + SEAL_ROWS).min(n);
        let keys: Vec<u64> = (start as u64 + 1..=end as u64).collect();
        let bytes = writer::encode(
            &keys,
            &rows[start * DIM..end * DIM],
            DIM,
            true,
            amberdb_index::Owner::NONE,
        )?;
        c.push_sealed(FlatSegment::open("flat", SealedBytes::copy_from(&bytes))?)?;
    }
    Ok(c)
}

/// The ground truth `ground_truth` cached for `n` rows and `q` queries, if it did.
fn cached_truth(dir: &Path, n: usize, q: usize) -> Option<Vec<Vec<u64>>> {
    let bytes = std::fs::read(dir.join(format!("truth-{n}-{q}.u64"))).ok()?;
    if bytes.len() != q * K * 8 {
        return None;
    }
    let ids: Vec<u64> = bytes
        .chunks_exact(8)
        .map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
        .collect();
    Some(ids.chunks(K).map(<[u64]>::to_vec).collect())
}

/// Throughput and recall@10 of the IVF probe at `nprobe` lists on `threads` threads.
fn probe_at(
    ivf: &Collection,
    threads: usize,
    nprobe: u32,
    queries: &[f32],
    truth: &[Vec<u64>],
) -> (f64, f64) {
    let p = SearchParams {
        scan: Scan::i8_for(K),
        probe: Probe::Lists(nprobe),
        ..SearchParams::top(K)
    };
    run(threads, queries, truth, &|v| {
        keys_of(ivf.search(v, &p).unwrap_or_default())
    })
}

/// What the last `run` of an IVF probe read a query, from the scan's counts: the rows through
/// their codes (1-bit: 48 bytes and 16 of factors; i8: 384 and a scale), the rows scored
/// exactly (1,536 bytes of f32), and the centroids' i8 codes every query ranks the lists by.
/// Returns (rows by code, rows scored exactly, bytes).
fn read_per_query(queries: usize, nlist: usize) -> (f64, f64, f64) {
    let c = Collection::scan_counts();
    let per = |x: u64| x as f64 / (passes() * queries) as f64;
    let rows = per(c.bits_rows + c.i8_rows);
    let bytes = per(c.bits_rows) * 64.0
        + per(c.i8_rows) * (DIM as f64 + 4.0)
        + per(c.rescored) * 4.0 * DIM as f64
        + (nlist * (DIM + 4)) as f64;
    (rows, per(c.rescored), bytes)
}

/// Exact top-10 of every query (cached in truth-N-Q.u64).
fn ground_truth(
    dir: &Path,
    flat: &Collection,
    queries: &[f32],
    n: usize,
) -> anyhow::Result<Vec<Vec<u64>>> {
    let q = queries.len() / DIM;
    if let Some(truth) = cached_truth(dir, n, q) {
        return Ok(truth);
    }
    let path = dir.join(format!("truth-{n}-{q}.u64"));
    let start = Instant::now();
    let qs: Vec<&[f32]> = queries.chunks_exact(DIM).collect();
    let mut truth = Vec::new();
    for block in qs.chunks(64) {
        for hits in pool(2).install(|| flat.search_batch(block, &SearchParams::top(K)))? {
            truth.push(hits.iter().map(|h| h.key).collect::<Vec<_>>());
        }
    }
    let bytes: Vec<u8> = truth
        .iter()
        .flatten()
        .flat_map(|k| k.to_le_bytes())
        .collect();
    std::fs::write(&path, bytes)?;
    println!(
        "ground truth: {q} queries × {n} rows in {:.1} s",
        start.elapsed().as_secs_f64()
    );
    Ok(truth)
}

/// Passes over the queries a figure is the median of: 3, or AMBERDB_PROBE_PASSES (more for a
/// before/after comparison on a noisy host).
fn passes() -> usize {
    std::env::var("AMBERDB_PROBE_PASSES")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(3)
        .max(1)
}

/// Throughput and recall@10 of `search` over the queries, on `threads` threads (queries spread
/// over the threads, as a server's connections would): the median of `passes()` passes.
fn run(
    threads: usize,
    queries: &[f32],
    truth: &[Vec<u64>],
    search: &(dyn Fn(&[f32]) -> Vec<u64> + Sync),
) -> (f64, f64) {
    use rayon::prelude::*;
    let qs: Vec<&[f32]> = queries.chunks_exact(DIM).collect();
    let p = pool(threads);
    let mut rates = Vec::new();
    let mut found: Vec<Vec<u64>> = Vec::new();
    for _ in 0..passes() {
        let start = Instant::now();
        found = p.install(|| qs.par_iter().map(|q| search(q)).collect());
        rates.push(qs.len() as f64 / start.elapsed().as_secs_f64());
    }
    rates.sort_by(f64::total_cmp);
    let hits: usize = found
        .iter()
        .zip(truth)
        .map(|(f, t)| f.iter().filter(|k| t.contains(k)).count())
        .sum();
    (
        rates.get(rates.len() / 2).copied().unwrap_or(0.0),
        hits as f64 / (truth.len() * K) as f64,
    )
}

fn keys_of(hits: Vec<amberdb_index::Neighbour>) -> Vec<u64> {
    hits.into_iter().map(|h| h.key).collect()
}

/// Where `bench` writes its results: `amberdb-N.json`, or `amberdb-N-avx2.json` /
/// `amberdb-N-avx512bw.json` for a run capped to those kernels (`AMBERDB_KERNELS`), kept
/// beside the default's. A value of `AMBERDB_KERNELS` the kernels do not know is refused
/// before anything runs.
fn results_path(dir: &Path, n: usize) -> anyhow::Result<PathBuf> {
    use amberdb_index::kernels::{KernelsAsked, kernels_asked, kernels_env_error};
    if let Some(e) = kernels_env_error() {
        anyhow::bail!(e);
    }
    Ok(match kernels_asked() {
        Some(KernelsAsked::Avx2) => dir.join(format!("amberdb-{n}-avx2.json")),
        Some(KernelsAsked::Avx512Bw) => dir.join(format!("amberdb-{n}-avx512bw.json")),
        Some(KernelsAsked::Best) | None => dir.join(format!("amberdb-{n}.json")),
    })
}

fn bench(dir: &Path, n: usize, q: usize) -> anyhow::Result<()> {
    let path = results_path(dir, n)?;
    let rows = read_rows(&dir.join("passages.f32"), n)?;
    let queries = read_rows(&dir.join("queries.f32"), q)?;
    let flat = flat_collection(&rows)?;
    let truth = ground_truth(dir, &flat, &queries, n)?;
    let mut results = Vec::new();
    let mut line = |name: &str, param: String, threads: usize, qps: f64, recall: f64| {
        println!("| {name} | {param} | {threads} | {qps:.0} | {recall:.3} |");
        results.push(serde_json::json!({
            "name": name, "param": param, "threads": threads, "qps": qps, "recall": recall,
        }));
    };
    println!("| index | parameter | threads | queries/s | recall@10 |\n|---|---|---|---|---|");
    // The exact scans read everything: a tenth of the queries is plenty to time them.
    let nfew = (q / 10).max(20).min(q);
    let (few, few_truth) = (&queries[..nfew * DIM], &truth[..nfew]);
    for threads in [1, 2] {
        let (qps, r) = run(threads, few, few_truth, &|v| {
            keys_of(flat.search(v, &SearchParams::top(K)).unwrap_or_default())
        });
        line("amberdb exact f32 (flat)", "-".into(), threads, qps, r);
        let i8 = SearchParams {
            scan: Scan::i8_for(K),
            ..SearchParams::top(K)
        };
        let (qps, r) = run(threads, few, few_truth, &|v| {
            keys_of(flat.search(v, &i8).unwrap_or_default())
        });
        line(
            "amberdb exact i8 + re-rank (flat)",
            "-".into(),
            threads,
            qps,
            r,
        );
    }
    // The IVF build, on both threads (its k-means alone first, to say where the time goes).
    let keys: Vec<u64> = (1..=n as u64).collect();
    let start = Instant::now();
    let nlist = nlist_override().unwrap_or_else(|| amberdb_index::ivf::nlist_for(n));
    pool(2).install(|| {
        amberdb_index::kmeans::train(
            &rows,
            DIM,
            &amberdb_index::kmeans::KMeansParams::new(nlist, 7),
        )
    })?;
    let kmeans_secs = start.elapsed().as_secs_f64();
    println!("\nk-means alone: {kmeans_secs:.1} s (2 threads, {nlist} lists)");
    let start = Instant::now();
    let params = IvfParams {
        nlist: nlist_override(),
        ..IvfParams::new(7)
    };
    let built = pool(2).install(|| build(&keys, &rows, DIM, &params))?;
    let build_secs = start.elapsed().as_secs_f64();
    let file_bytes = built.bytes.len();
    println!(
        "\nIVF build: {build_secs:.1} s (2 threads), nlist {}, nprobe {} (built recall {:.3} on {} held-out rows), {:.1} MB; curve {:?}\n",
        built.nlist,
        built.nprobe,
        built.built_recall,
        built.held_out,
        file_bytes as f64 / 1e6,
        built.curve
    );
    let start = Instant::now();
    let seg = IvfSegment::open("ivf", SealedBytes::copy_from(&built.bytes))?;
    let open_secs = start.elapsed().as_secs_f64();
    let mut ivf = Collection::new(DIM);
    ivf.push_sealed(seg)?;
    let nprobes = sweep_points(built.nprobe, built.nlist);
    println!(
        "bit kernel: {}; scan kernels: {}",
        amberdb_index::kernels::bit_backend(),
        amberdb_index::kernels::backend()
    );
    println!("| index | parameter | threads | queries/s | recall@10 |\n|---|---|---|---|---|");
    // The segment's 1-bit codes (the default since version 3), then its i8 codes as every
    // search read them before: the same lists, the same data, the same run.
    let mut read = Vec::new();
    for (name, bits) in [("amberdb IVF", true), ("amberdb IVF, i8 codes", false)] {
        ivf.use_bit_codes(bits);
        for threads in [1, 2] {
            for &nprobe in &nprobes {
                let _ = Collection::scan_counts();
                let (qps, r) = probe_at(&ivf, threads, nprobe, &queries, &truth);
                let (rows, exact, bytes) = read_per_query(q, built.nlist);
                line(name, format!("nprobe={nprobe}"), threads, qps, r);
                if threads == 1 {
                    read.push(serde_json::json!({
                        "name": name, "nprobe": nprobe, "rows": rows, "rescored": exact,
                        "bytes": bytes,
                    }));
                }
                if r >= 0.995 {
                    break;
                }
            }
        }
    }
    print_reads(&read);
    ivf.use_bit_codes(true);
    let filtered = filtered_table(&flat, &ivf, &queries[..q.min(200) * DIM], n);
    let out = serde_json::json!({
        "rows": n, "queries": q, "nlist": built.nlist, "nprobe": built.nprobe,
        "built_recall": built.built_recall, "curve": built.curve,
        "build_seconds": build_secs, "kmeans_seconds": kmeans_secs, "open_seconds": open_secs, "index_bytes": file_bytes,
        "results": results, "filtered": filtered, "read_per_query": read,
        "bit_kernel": amberdb_index::kernels::bit_backend(), "scan_kernels": amberdb_index::kernels::backend(),
    });
    std::fs::write(&path, serde_json::to_string_pretty(&out)?)?;
    println!("\nwrote {}", path.display());
    Ok(())
}

/// The nprobes an IVF sweep measures: a fixed ladder and the build's own, up to `nlist`.
fn sweep_points(built: u32, nlist: usize) -> Vec<u32> {
    let mut nprobes: Vec<u32> = vec![
        1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768,
    ];
    nprobes.push(built);
    nprobes.sort_unstable();
    nprobes.dedup();
    nprobes.retain(|&p| p as usize <= nlist);
    nprobes
}

/// The table of what each IVF probe read a query (`read_per_query`, one thread).
fn print_reads(read: &[serde_json::Value]) {
    println!(
        "\n| index | nprobe | rows read a query | scored exactly | bytes read a query |\n|---|---|---|---|---|"
    );
    for r in read {
        println!(
            "| {} | {} | {:.0} | {:.0} | {:.2} MB |",
            r["name"].as_str().unwrap_or(""),
            r["nprobe"],
            r["rows"].as_f64().unwrap_or(0.0),
            r["rescored"].as_f64().unwrap_or(0.0),
            r["bytes"].as_f64().unwrap_or(0.0) / 1e6
        );
    }
}

/// Filtered searches at four selectivities: the engine's rule, exact over the matching keys
/// when they are few (GATHER_KEYS = 4,096 or a sixteenth of the rows), else the IVF probe with
/// the filter. Prints a table and returns its rows.
fn filtered_table(
    flat: &Collection,
    ivf: &Collection,
    fq: &[f32],
    n: usize,
) -> Vec<serde_json::Value> {
    println!(
        "\n| filter selectivity | path | threads | queries/s | recall@10 | fewest hits |\n|---|---|---|---|---|---|"
    );
    let mut filtered = Vec::new();
    for every in [1_000u64, 100, 10, 2] {
        let keep = move |k: u64| k.is_multiple_of(every);
        let matching: Vec<u64> = (1..=n as u64).filter(|k| keep(*k)).collect();
        let exact_p = SearchParams {
            filter: Some(&keep),
            ..SearchParams::top(K)
        };
        let want: Vec<Vec<u64>> = fq
            .chunks_exact(DIM)
            .map(|v| {
                keys_of(
                    pool(2)
                        .install(|| flat.search(v, &exact_p))
                        .unwrap_or_default(),
                )
            })
            .collect();
        let gather = matching.len() <= 4_096.max(n / 16);
        let probe_p = SearchParams {
            filter: Some(&keep),
            scan: Scan::i8_for(K),
            probe: Probe::Built,
            ..SearchParams::top(K)
        };
        let fewest = std::sync::atomic::AtomicUsize::new(usize::MAX);
        let search = |v: &[f32]| {
            let hits = if gather {
                ivf.search_keys(v, &matching, &exact_p)
            } else {
                ivf.search(v, &probe_p)
            }
            .unwrap_or_default();
            fewest.fetch_min(hits.len(), std::sync::atomic::Ordering::Relaxed);
            keys_of(hits)
        };
        for threads in [1, 2] {
            let (qps, r) = run(threads, fq, &want, &search);
            let path = if gather {
                "exact over matching keys"
            } else {
                "IVF probe, filter in the scan"
            };
            let least = fewest.load(std::sync::atomic::Ordering::Relaxed);
            println!(
                "| {:.1} % | {path} | {threads} | {qps:.0} | {r:.3} | {least} |",
                100.0 / every as f64
            );
            filtered.push(serde_json::json!({
                "selectivity": 1.0 / every as f64, "path": path, "threads": threads,
                "qps": qps, "recall": r, "fewest_hits": least,
            }));
        }
    }
    filtered
}

/// The IVF sweep alone at `nprobes` (none: the built nprobe), on an index built once and kept
/// in `DIR/ivf-N.seg`.
fn probe(dir: &Path, n: usize, q: usize, nprobes: &[u32]) -> anyhow::Result<()> {
    let queries = read_rows(&dir.join("queries.f32"), q)?;
    let nlist = nlist_override();
    let path = dir.join(format!(
        "ivf-{n}-v{}{}.seg",
        amberdb_index::segment::ivf::VERSION,
        nlist.map_or(String::new(), |l| format!("-nlist{l}"))
    ));
    let opened = std::fs::read(&path)
        .ok()
        .and_then(|bytes| IvfSegment::open("ivf", SealedBytes::copy_from(&bytes)).ok());
    let cached = cached_truth(dir, n, q);
    // The passages, read once, only when the index or the ground truth must be made.
    let rows = if opened.is_none() || cached.is_none() {
        read_rows(&dir.join("passages.f32"), n)?
    } else {
        Vec::new()
    };
    let seg = if let Some(seg) = opened {
        seg
    } else {
        let keys: Vec<u64> = (1..=n as u64).collect();
        let start = Instant::now();
        let params = IvfParams {
            nlist,
            ..IvfParams::new(7)
        };
        let built = pool(2).install(|| build(&keys, &rows, DIM, &params))?;
        println!(
            "IVF build: {:.1} s, written to {}",
            start.elapsed().as_secs_f64(),
            path.display()
        );
        std::fs::write(&path, &built.bytes)?;
        IvfSegment::open("ivf", SealedBytes::copy_from(&built.bytes))?
    };
    let truth = if let Some(truth) = cached {
        truth
    } else {
        ground_truth(dir, &flat_collection(&rows)?, &queries, n)?
    };
    let built = seg.nprobe().0;
    let nprobes = if nprobes.is_empty() {
        vec![built]
    } else {
        nprobes.to_vec()
    };
    let mut ivf = Collection::new(DIM);
    ivf.push_sealed(seg)?;
    let nlist = ivf_nlist(&ivf);
    println!(
        "{n} rows, {nlist} lists, built nprobe {built}; kernels: {}, bits {}",
        amberdb_index::kernels::backend(),
        amberdb_index::kernels::bit_backend()
    );
    println!(
        "| codes | nprobe | threads | queries/s | recall@10 | rows read | scored exactly | MB read |\n|---|---|---|---|---|---|---|---|"
    );
    // For profiling one side alone: AMBERDB_PROBE_CODES=1-bit or i8, AMBERDB_PROBE_THREADS=1.
    let codes = std::env::var("AMBERDB_PROBE_CODES").unwrap_or_default();
    let threads_only: Option<usize> = std::env::var("AMBERDB_PROBE_THREADS")
        .ok()
        .and_then(|t| t.parse().ok());
    for (name, bits) in [("1-bit", true), ("i8", false)] {
        if !codes.is_empty() && codes != name {
            continue;
        }
        ivf.use_bit_codes(bits);
        for threads in [1, 2] {
            if threads_only.is_some_and(|t| t != threads) {
                continue;
            }
            for &nprobe in &nprobes {
                let _ = Collection::scan_counts();
                let (qps, r) = probe_at(&ivf, threads, nprobe, &queries, &truth);
                let (rows, exact, bytes) = read_per_query(q, nlist);
                println!(
                    "| {name} | {nprobe} | {threads} | {qps:.0} | {r:.3} | {rows:.0} | {exact:.0} | {:.2} |",
                    bytes / 1e6
                );
            }
        }
    }
    Ok(())
}

/// The time `IvfSegment::open` takes over a mapped file, as a store's open maps its segments.
fn open_segment(path: &Path) -> anyhow::Result<()> {
    let mut times = Vec::new();
    let mut rows = 0;
    for _ in 0..5 {
        let start = Instant::now();
        let file = std::fs::File::open(path)?;
        let seg = IvfSegment::open("ivf", SealedBytes::map_file(&file, "ivf")?)?;
        times.push(start.elapsed().as_secs_f64());
        rows = seg.len();
    }
    times.sort_by(f64::total_cmp);
    let bytes = std::fs::metadata(path)?.len();
    println!(
        "{}: {rows} rows, {:.1} MB, open {:.3} s (median of 5; {:.3}..{:.3})",
        path.display(),
        bytes as f64 / 1e6,
        times.get(2).copied().unwrap_or(0.0),
        times.first().copied().unwrap_or(0.0),
        times.last().copied().unwrap_or(0.0),
    );
    Ok(())
}

/// Dedup's range query on real text: recall of the rows in range, and speed, per probe rule.
fn range(dir: &Path, n: usize, q: usize) -> anyhow::Result<()> {
    const LIMIT: usize = 50;
    let rows = read_rows(&dir.join("passages.f32"), n)?;
    let queries = read_rows(&dir.join("queries.f32"), q)?;
    let flat = flat_collection(&rows)?;
    let keys: Vec<u64> = (1..=n as u64).collect();
    let built = pool(2).install(|| build(&keys, &rows, DIM, &IvfParams::new(7)))?;
    let mut ivf = Collection::new(DIM);
    ivf.push_sealed(IvfSegment::open(
        "ivf",
        SealedBytes::copy_from(&built.bytes),
    )?)?;
    println!(
        "{n} passages, {q} queries; IVF nlist {}, built nprobe {} (recall@10 {:.3})\n",
        built.nlist, built.nprobe, built.built_recall
    );
    println!(
        "| floor | queries with a row in range | rows in range | probe | recall of the rows in range | queries/s (1 thread) |\n|---|---|---|---|---|---|"
    );
    for floor in [0.65f32, 0.8, 0.9] {
        let exact = SearchParams {
            min_score: floor,
            ..SearchParams::top(LIMIT)
        };
        let truth: Vec<Vec<u64>> = pool(2).install(|| {
            use rayon::prelude::*;
            queries
                .par_chunks_exact(DIM)
                .map(|v| keys_of(flat.search(v, &exact).unwrap_or_default()))
                .collect()
        });
        let with = truth.iter().filter(|t| !t.is_empty()).count();
        let total: usize = truth.iter().map(Vec::len).sum();
        let probes = [1, 2, 4, 8, 16, 32]
            .map(Probe::Range)
            .into_iter()
            .chain([Probe::Built]);
        for probe in probes {
            let params = SearchParams {
                min_score: floor,
                scan: Scan::i8_for(LIMIT),
                probe,
                ..SearchParams::top(LIMIT)
            };
            let (qps, _) = run(1, &queries, &truth, &|v| {
                keys_of(ivf.search(v, &params).unwrap_or_default())
            });
            let found: usize = queries
                .chunks_exact(DIM)
                .zip(&truth)
                .map(|(v, t)| {
                    keys_of(ivf.search(v, &params).unwrap_or_default())
                        .iter()
                        .filter(|k| t.contains(k))
                        .count()
                })
                .sum();
            #[expect(clippy::cast_precision_loss, reason = "a ratio of counts")]
            let recall = if total == 0 {
                1.0
            } else {
                found as f64 / total as f64
            };
            println!("| {floor} | {with} | {total} | {probe:?} | {recall:.4} | {qps:.0} |");
        }
    }
    Ok(())
}
