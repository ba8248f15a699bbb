//! `amberdb cluster import` (`docs/cluster.md`, "From one node to a cluster"): a single
//! node's export, split by partition and imported by every partition's owner. The export is
//! only read (the single-node store is exported while it serves, by EXPORT or `amberdb
//! export`, and never touched); the parts are written into a new directory the nodes can read
//! at the same path, each sent as IMPORT with its partition to its owner through the client,
//! which follows `moved` and sends it again with its request id across a failover. Each owner
//! checks every line of its part before it writes anything, and a record the partition holds
//! already is not stored twice, so running the import again after a failure goes on where it
//! stopped. Guarantees: the ids of every record, old and new, are written to `ids.tsv` in the
//! work directory; an export that does not decode, or a line without a user, changes nothing
//! anywhere.

use super::settings;
use crate::client::Client;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufRead, Write as _};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// One partition's part of the export.
#[derive(Debug, Default)]
struct Part {
    /// The part's lines (entities, then records, as the export had them).
    lines: Vec<String>,
    /// Its records' ids in the export, and their users.
    records: Vec<(u64, String)>,
    entities: usize,
}

/// Runs `amberdb cluster import`: `from` into the cluster of `js`, through `work` (a new
/// directory), with `token` if the nodes want one. Returns the report.
///
/// # Errors
/// An export that does not decode (naming its line), a `work` that exists, no node
/// registered, or a partition's import refused (the report names which partitions went in).
pub async fn run(
    js: &async_nats::jetstream::Context,
    from: PathBuf,
    work: PathBuf,
    token: Option<String>,
) -> anyhow::Result<String> {
    anyhow::ensure!(
        work.is_absolute(),
        "--work {:?} must be an absolute path (the nodes read the parts from it)",
        work.display()
    );
    let partitions = settings::load(js).await?.partitions;
    let seeds = settings::seeds(js, "start one first").await?;
    // The client is blocking: it runs beside the runtime.
    tokio::task::spawn_blocking(move || import(&from, &work, partitions, &seeds, token.as_deref()))
        .await?
}

/// Splits `from` and imports each part through the nodes at `seeds`; every record's old and
/// new id go to `<work>/ids.tsv` (`old_id`, `new_id`, `partition`, `user_id`). Returns the
/// report.
pub(super) fn import(
    from: &Path,
    work: &Path,
    partitions: u32,
    seeds: &[String],
    token: Option<&str>,
) -> anyhow::Result<String> {
    let (header, parts) = split(from, partitions)?;
    std::fs::create_dir(work).map_err(|e| {
        anyhow::anyhow!(
            "--work {}: {e} (the import writes its parts into a new directory)",
            work.display()
        )
    })?;
    let mut client = Client::connect(seeds, token, None)?;
    client.set_failover_wait(Duration::from_secs(60));
    let mut report = String::new();
    let mut ids = String::from("old_id\tnew_id\tpartition\tuser_id\n");
    let (mut stored, mut duplicates) = (0, 0);
    for (p, part) in &parts {
        let path = write_part(work, *p, &header, part)?;
        let reply = client
            .call(
                "IMPORT",
                &json!({"source": path.display().to_string(), "partition": p}),
            )
            .map_err(|e| {
                anyhow::anyhow!(
                    "partition {p}: {e} (partitions before it are imported; run the import \
                     again with a new --work: what a partition holds is not stored twice)"
                )
            })?;
        let done = reply.get("import").cloned().unwrap_or(Value::Null);
        let renumbered: BTreeMap<u64, u64> = done
            .get("renumbered")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|pair| Some((pair.get(0)?.as_u64()?, pair.get(1)?.as_u64()?)))
            .collect();
        for (old, user) in &part.records {
            let new = renumbered.get(old).copied().unwrap_or(*old);
            let _ = writeln!(ids, "{old}\t{new}\t{p}\t{user}");
        }
        let count = |k: &str| done.get(k).and_then(Value::as_u64).unwrap_or(0);
        stored += count("stored");
        duplicates += count("duplicates");
        let _ = writeln!(
            report,
            "partition {p}: {} records ({} stored, {} held already), {} entities",
            part.records.len(),
            count("stored"),
            count("duplicates"),
            part.entities
        );
    }
    let map = work.join("ids.tsv");
    std::fs::write(&map, ids)?;
    let _ = writeln!(
        report,
        "imported {} into {} partitions: {stored} stored, {duplicates} held already; every \
         record's old and new id in {}",
        from.display(),
        parts.len(),
        map.display()
    );
    Ok(report)
}

/// The export's header and its lines by partition, every line checked first.
fn split(
    from: &Path,
    partitions: u32,
) -> anyhow::Result<(Map<String, Value>, BTreeMap<u32, Part>)> {
    let file =
        std::fs::File::open(from).map_err(|e| anyhow::anyhow!("--from {}: {e}", from.display()))?;
    let mut header = None;
    let mut parts: BTreeMap<u32, Part> = BTreeMap::new();
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        let n = i + 1;
        let line = line.map_err(|e| anyhow::anyhow!("{}: line {n}: {e}", from.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        let o: Map<String, Value> = serde_json::from_str(&line).map_err(|e| {
            anyhow::anyhow!("{}: line {n} is not a JSON object: {e}", from.display())
        })?;
        if header.is_none() {
            anyhow::ensure!(
                crate::dump::is_header(&o),
                "{}: not an amberdb export (EXPORT or `amberdb export` makes one); for other \
                 files, IMPORT them on one node and export that",
                from.display()
            );
            header = Some(o);
            continue;
        }
        let user = crate::dump::user_of_line(&o).ok_or_else(|| {
            anyhow::anyhow!(
                "{}: line {n} is neither an entity nor a record with a user",
                from.display()
            )
        })?;
        let part = parts
            .entry(amberdb::cluster::partition_of_user(user, partitions))
            .or_default();
        if o.get("type").and_then(Value::as_str) == Some("record") {
            let id = o.get("id").and_then(Value::as_u64).ok_or_else(|| {
                anyhow::anyhow!("{}: line {n}: a record without an id", from.display())
            })?;
            part.records.push((id, user.to_owned()));
        } else {
            part.entities += 1;
        }
        part.lines.push(line);
    }
    let header = header.ok_or_else(|| anyhow::anyhow!("{}: an empty file", from.display()))?;
    Ok((header, parts))
}

/// Writes partition `p`'s part as an export of its own into `work`; returns its path.
fn write_part(
    work: &Path,
    p: u32,
    header: &Map<String, Value>,
    part: &Part,
) -> anyhow::Result<PathBuf> {
    let path = work.join(format!("p-{p}.jsonl"));
    let mut header = header.clone();
    header.insert("entities".into(), json!(part.entities));
    header.insert("records".into(), json!(part.records.len()));
    let mut out = std::io::BufWriter::new(std::fs::File::create_new(&path)?);
    writeln!(out, "{}", Value::Object(header))?;
    for line in &part.lines {
        writeln!(out, "{line}")?;
    }
    out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    Ok(path)
}
