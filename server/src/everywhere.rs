//! Commands that span every partition, on a cluster node (`docs/cluster.md`, "Commands that
//! span every partition"): LIST_USERS, LIST_ITEM_USERS, EXPORT, BACKUP, PURGE and MAINTENANCE
//! run on every partition store this node holds (each node holds one of every partition), in
//! partition order, and their replies are merged; REEMBED is refused, naming why, and so is
//! IMPORT unless it names the one partition its export belongs to (`amberdb cluster import`
//! splits an export by partition and sends each part to its owner: `import_into`).
//!
//! What each is on a node: the listings and EXPORT read this node's replicas, each as of the
//! position it has applied (no `min_seq`: a position names one partition); BACKUP writes one
//! whole store per partition into `dest/p-<partition>` (the layout of a node's data
//! directory, so a backup is a node's `--data`), EXPORT one export per partition into
//! `dest/p-<partition>.jsonl`; PURGE and MAINTENANCE act on this node's files and maintenance
//! threads (a replica's derived files are its own). Guarantees: nothing runs unless every
//! partition store is open here; BACKUP and EXPORT make `dest` a new directory and remove it
//! again if any partition fails, so an error reply leaves nothing behind.

use crate::args::{Code, Fail, Outcome};
use crate::commands::{self, Command, Ctx, Session};
use crate::metrics::Metrics;
use crate::route::Partitions;
use amberdb::Store;
use serde_json::{Map, Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Runs `command`, which spans every partition, on every partition store of this node.
///
/// # Errors
/// `invalid` for IMPORT, REEMBED, a `min_seq`, or a `dest` that is not a new absolute path;
/// `unavailable` while a partition store is not open here; the first partition's refusal
/// (naming the partition).
pub fn run(
    partitions: &dyn Partitions,
    metrics: &Arc<Metrics>,
    session: &Session,
    command: &Command,
    mut args: Map<String, Value>,
    min_seq: Option<u64>,
) -> Outcome {
    if command.name == "IMPORT" && args.contains_key("partition") {
        return import_into(partitions, metrics, session, command, args, min_seq);
    }
    refused(command.name)?;
    if min_seq.is_some() {
        return Err(Fail::invalid(
            crate::route::MIN_SEQ,
            format!(
                "{} spans every partition and a position names one: send it without min_seq",
                command.name
            ),
        ));
    }
    let stores = every_store(partitions)?;
    let dest = match command.name {
        "BACKUP" | "EXPORT" => Some(new_directory(&mut args)?),
        _ => None,
    };
    let mut replies = Vec::with_capacity(stores.len());
    for store in stores {
        let p = store.partition();
        let mut args = args.clone();
        if let Some(dest) = &dest {
            let part = match command.name {
                "BACKUP" => dest.join(format!("p-{p}")),
                _ => dest.join(format!("p-{p}.jsonl")),
            };
            args.insert("dest".into(), json!(part.display().to_string()));
        }
        let ctx = Ctx {
            store,
            metrics: Arc::clone(metrics),
        };
        match commands::run(&ctx, session, command, args) {
            Ok(reply) => replies.push((p, reply)),
            Err(mut f) => {
                if let Some(dest) = &dest {
                    // Only this command wrote there: `dest` was made new above.
                    let _ = std::fs::remove_dir_all(dest);
                }
                f.body.insert("partition".into(), json!(p));
                if let Some(Value::String(m)) = f.body.get_mut("message") {
                    *m = format!("partition {p}: {m}");
                }
                return Err(f);
            }
        }
    }
    Ok(merge(replies, dest.as_deref()))
}

/// IMPORT of one partition's export (`docs/cluster.md`, "From one node to a cluster"): run
/// by that partition's owner (elsewhere `moved`), once every line of the file is checked to
/// belong to it: a line of another partition's user, or one that is not JSON, refuses the
/// whole import before anything is written.
///
/// # Errors
/// `invalid` for a bad `partition` or `source`, a `min_seq`, or a line of another partition;
/// `moved` or `unavailable` from the partition's route; the import's own refusal.
fn import_into(
    partitions: &dyn Partitions,
    metrics: &Arc<Metrics>,
    session: &Session,
    command: &Command,
    mut args: Map<String, Value>,
    min_seq: Option<u64>,
) -> Outcome {
    let count = partitions.count();
    let p = args
        .shift_remove("partition")
        .and_then(|p| p.as_u64())
        .and_then(|p| u32::try_from(p).ok())
        .filter(|p| *p < count)
        .ok_or_else(|| {
            Fail::invalid(
                "partition",
                format!(
                    "a partition of this cluster: an integer from 0 to {}",
                    count - 1
                ),
            )
        })?;
    if min_seq.is_some() {
        return Err(Fail::invalid(
            crate::route::MIN_SEQ,
            "IMPORT is a write: send it without min_seq",
        ));
    }
    let source = match args.get("source") {
        Some(Value::String(s)) if Path::new(s).is_absolute() => PathBuf::from(s),
        _ => {
            return Err(Fail::invalid(
                "source",
                "an absolute path of an export on the partition owner's machine",
            ));
        }
    };
    let store = partitions.route(p, true, None)?;
    check_partition_of_lines(&source, p, count)?;
    let ctx = Ctx {
        store,
        metrics: Arc::clone(metrics),
    };
    let mut reply = commands::run(&ctx, session, command, args)?;
    if let Some(o) = reply.as_object_mut() {
        o.insert("partition".into(), json!(p));
    }
    Ok(reply)
}

/// Checks that `source` is an export whose every line belongs to a user of partition `p`
/// of `count`.
fn check_partition_of_lines(source: &Path, p: u32, count: u32) -> Result<(), Fail> {
    use std::io::BufRead;
    let bad = |why: String| Fail::invalid("source", why);
    let file = std::fs::File::open(source)
        .map_err(|e| bad(format!("opening {}: {e}", source.display())))?;
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        let n = i + 1;
        let line = line.map_err(|e| bad(format!("{}: line {n}: {e}", source.display())))?;
        if line.trim().is_empty() {
            continue;
        }
        let o: Map<String, Value> = serde_json::from_str(&line)
            .map_err(|e| bad(format!("line {n} is not a JSON object: {e}")))?;
        if n == 1 {
            if !crate::dump::is_header(&o) {
                return Err(bad(
                    "an import that names its partition takes an amberdb export (amberdb cluster import makes them)".into(),
                ));
            }
            continue;
        }
        let user = crate::dump::user_of_line(&o).unwrap_or(crate::route::DEFAULT_USER);
        let of = amberdb::cluster::partition_of_user(user, count);
        if of != p {
            return Err(bad(format!(
                "line {n}: user {user:?} belongs to partition {of}, not {p}: nothing was imported"
            )));
        }
    }
    Ok(())
}

/// The commands a node does not run over every partition, and why.
fn refused(name: &str) -> Result<(), Fail> {
    let why = match name {
        "IMPORT" => {
            "IMPORT writes to every partition and a node owns only some: `amberdb cluster import` splits an export by partition and sends each part, with its partition, to its owner (docs/cluster.md, \"From one node to a cluster\")"
        }
        "REEMBED" => {
            "REEMBED is not in cluster mode yet: every owner would run it through its stream and the cluster's embedder switch once all have (docs/cluster.md, \"Refused in cluster mode\")"
        }
        _ => return Ok(()),
    };
    Err(Fail::new(Code::Invalid, why))
}

/// Every partition store of this node, in partition order.
fn every_store(partitions: &dyn Partitions) -> Result<Vec<Store>, Fail> {
    let mut stores = partitions.stores();
    stores.sort_by_key(Store::partition);
    let missing: Vec<u32> = (0..partitions.count())
        .filter(|p| !stores.iter().any(|s| s.partition() == *p))
        .collect();
    if !missing.is_empty() {
        return Err(Fail::new(
            Code::Unavailable,
            format!(
                "partitions {missing:?} are not open on this node yet (being reopened): retry in a moment"
            ),
        ));
    }
    Ok(stores)
}

/// BACKUP's and EXPORT's `dest`, made a new directory (its parent must exist).
fn new_directory(args: &mut Map<String, Value>) -> Result<PathBuf, Fail> {
    let Some(Value::String(dest)) = args.get("dest") else {
        return Err(Fail::invalid(
            "dest",
            "an absolute path of a new directory on this node's machine: one store or export per partition goes in it",
        ));
    };
    let dest = PathBuf::from(dest);
    if !dest.is_absolute() {
        return Err(Fail::invalid(
            "dest",
            format!("{:?} must be an absolute path", dest.display()),
        ));
    }
    match std::fs::create_dir(&dest) {
        Ok(()) => Ok(dest),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(Fail::invalid(
            "dest",
            format!(
                "{} exists: on a cluster node this writes a new directory (one store or export per partition)",
                dest.display()
            ),
        )),
        Err(e) => Err(Fail::invalid(
            "dest",
            format!("creating {}: {e}", dest.display()),
        )),
    }
}

/// One reply from every partition's: `count`s summed, lists joined in partition order,
/// `success` all of them, and each object (`purged`, `backup`, ...) a list of every
/// partition's with its partition and log position.
fn merge(replies: Vec<(u32, Value)>, dest: Option<&Path>) -> Value {
    let mut out = Map::new();
    for (p, reply) in replies {
        let Value::Object(reply) = reply else {
            continue;
        };
        let seq = reply.get("seq").cloned();
        for (key, value) in reply {
            match (key.as_str(), value) {
                ("partition" | "seq", _) => {}
                ("count", Value::Number(n)) => {
                    let sum = out.get("count").and_then(Value::as_u64).unwrap_or(0);
                    out.insert(key, json!(sum + n.as_u64().unwrap_or(0)));
                }
                (_, Value::Bool(b)) => {
                    let all = out.get(&key).and_then(Value::as_bool).unwrap_or(true);
                    out.insert(key, json!(all && b));
                }
                (_, Value::Array(items)) => {
                    if let Value::Array(all) = out.entry(key).or_insert_with(|| json!([])) {
                        all.extend(items);
                    }
                }
                (_, Value::Object(mut each)) => {
                    each.insert("partition".into(), json!(p));
                    if let Some(seq) = &seq {
                        each.insert("seq".into(), seq.clone());
                    }
                    let slot = out.entry(key).or_insert_with(|| {
                        let mut o = Map::new();
                        if let Some(dest) = dest {
                            o.insert("dest".into(), json!(dest.display().to_string()));
                        }
                        o.insert("partitions".into(), json!([]));
                        Value::Object(o)
                    });
                    if let Some(Value::Array(list)) = slot.get_mut("partitions") {
                        list.push(Value::Object(each));
                    }
                }
                (_, other) => {
                    out.insert(key, other);
                }
            }
        }
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_merge_counts_lists_flags_and_each_partitions_object() {
        let merged = merge(
            vec![
                (0, json!({"success": true, "count": 2, "users": ["a", "b"]})),
                (1, json!({"success": true, "count": 1, "users": ["c"]})),
            ],
            None,
        );
        assert_eq!(
            merged,
            json!({"success": true, "count": 3, "users": ["a", "b", "c"]})
        );
        let merged = merge(
            vec![
                (0, json!({"backup": {"files": 3}, "partition": 0, "seq": 7})),
                (1, json!({"backup": {"files": 4}, "partition": 1, "seq": 2})),
            ],
            Some(Path::new("/b")),
        );
        assert_eq!(
            merged,
            json!({"backup": {"dest": "/b", "partitions": [
                {"files": 3, "partition": 0, "seq": 7},
                {"files": 4, "partition": 1, "seq": 2},
            ]}})
        );
        let merged = merge(
            vec![
                (0, json!({"success": true})),
                (1, json!({"success": false})),
            ],
            None,
        );
        assert_eq!(merged, json!({"success": false}));
    }
}
