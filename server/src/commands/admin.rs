//! Commands about the store: STATS, PURGE, BACKUP, EXPORT, IMPORT, MAINTENANCE, REEMBED.

use super::common::*;

/// `forbidden` for a connection whose token is bound to one user: `command` acts on every
/// user's records.
fn every_user(session: &Session, command: &str) -> Result<(), Fail> {
    match &session.user {
        Some(bound) => Err(forbidden(&format!(
            "every user ({command}; {bound}'s token is user-bound)"
        ))),
        None => Ok(()),
    }
}

fn stats(ctx: &Ctx, session: &Session, _: NoArgs) -> Outcome {
    every_user(session, "STATS")?;
    let s = ctx.store.stats();
    let by_kind: Map<String, Value> = s
        .by_kind
        .iter()
        .map(|(k, n)| (k.to_string(), json!(n)))
        .collect();
    let by_category: Map<String, Value> = s
        .by_category
        .iter()
        .map(|(c, n)| (c.to_string(), json!(n)))
        .collect();
    let reembedding = s.reembedding.as_ref().map(|r| {
        json!({
            "model": r.model_id,
            "dimensions": r.dim,
            "staged": r.staged,
            "total": r.total,
        })
    });
    let mut store = json!({
        "dir": ctx.store.dir().display().to_string(),
        "bytes_on_disk": ctx.store.bytes_on_disk(),
        "memories": s.memories,
        "users": s.users,
        "by_kind": by_kind,
        "by_category": by_category,
        "sealed_segments": s.sealed_segments,
        "growing_rows": s.growing_rows,
        "last_seq": s.last_seq,
        "running_crc": s.running_crc.map(|(position, crc)| json!({
            "position": position,
            "crc": format!("{crc:08x}"),
        })),
        "durable_seq": s.durable_seq,
        "checkpoint_seq": s.checkpoint_seq,
        "log_fsyncs": s.log_fsyncs,
        "poisoned": s.poisoned,
        "poison_cause": s.poison_cause.as_ref().map(|c| json!({
            "operation": c.operation,
            "file": c.path.display().to_string(),
            "error": c.error,
            "since": c.since.to_rfc3339(),
        })),
        "disk_full_refusals": s.disk_full_refusals,
        "accesses_not_recorded": s.accesses_not_recorded,
        "request_ids_held": s.request_ids_held,
        "memory_limit": s.memory_limit,
        "embedder": ctx.store.embedder_id(),
        "index": json!({
            "segments": s.index.segments.iter().map(|g| json!({
                "rows": g.rows,
                "nlist": g.nlist,
                "nprobe": g.nprobe,
                "built_recall": g.built_recall,
            })).collect::<Vec<_>>(),
            "flat_rows": s.index.flat_rows,
            "building": s.index.building,
            "builds": s.index.builds,
            "failures": s.index.failures,
            "last_build": s.index.last_build.as_ref().map(|b| json!({
                "segment_id": b.segment_id,
                "rows": b.rows,
                "replaced": b.replaced,
                "nlist": b.nlist,
                "nprobe": b.nprobe,
                "built_recall": b.built_recall,
                "seconds": b.seconds,
            })),
            "last_error": s.index.last_error,
        }),
        "maintenance": maintenance_stats(&s.maintenance),
    });
    store["embedding_dimensions"] = json!(s.embedder.1);
    store["reembedding"] = reembedding.unwrap_or(Value::Null);
    store["lexical_ready"] = json!(s.lexical_ready);
    store["unindexed"] = json!(s.unindexed);
    store["vectors_restored"] = json!(s.vectors_restored);
    store["quarantined"] = json!(s.quarantined);
    let mut reply = ctx.metrics.snapshot();
    reply.insert("store".into(), store);
    Ok(Value::Object(reply))
}

/// STATS' `maintenance` object.
fn maintenance_stats(m: &amberdb::MaintenanceCounters) -> Value {
    json!({
        "thread": m.thread,
        "checkpoints": m.checkpoints,
        "failures": m.failures,
        "last_checkpoint": m.last.as_ref().map(|c| json!({
            "seq": c.seq,
            "bytes": c.bytes,
            "sealed_rows": c.sealed_rows,
            "delta_of": c.delta_of,
            "seconds": c.seconds,
            "writers_waited_seconds": c.writers_waited,
            "removed_files": c.removed.files,
            "removed_bytes": c.removed.bytes,
        })),
        "longest_writers_wait_seconds": m.longest_writers_wait,
        "writes_waited": m.writes_waited,
        "longest_write_wait_seconds": m.longest_write_wait,
        "last_error": m.last_error,
        "removed_files": m.removed.files,
        "removed_bytes": m.removed.bytes,
        "purges": m.purges,
        "purge_failures": m.purge_failures,
        "purge_pending_seconds": m.purge_pending,
        "archived_forgotten": m.archived_forgotten,
        "paused": m.paused,
        "last_purge": m.last_purge.as_ref().map(|p| json!({
            "segments_rewritten": p.segments_rewritten,
            "rows_dropped": p.rows_dropped,
            "removed_files": p.removed.files,
            "removed_bytes": p.removed.bytes,
            "seconds": p.seconds,
        })),
    })
}

fn purge(ctx: &Ctx, session: &Session, _: NoArgs) -> Outcome {
    every_user(session, "PURGE")?;
    let p = engine(ctx.store.purge())?;
    Ok(json!({
        "purged": {
            "segments_rewritten": p.segments_rewritten,
            "rows_dropped": p.rows_dropped,
            "removed_files": p.removed.files,
            "removed_bytes": p.removed.bytes,
            "seconds": p.seconds,
        }
    }))
}

arguments! {
    /// BACKUP.
    struct Backup {
        dest: String = req(
            "dest",
            Ty::Str,
            "an absolute path: a new or empty directory outside the store",
        ),
    }
}

fn backup(ctx: &Ctx, session: &Session, a: Backup) -> Outcome {
    every_user(session, "BACKUP")?;
    let dest = std::path::PathBuf::from(a.dest);
    if !dest.is_absolute() {
        return Err(Fail::new(
            Code::Invalid,
            format!(
                "dest {:?} must be an absolute path (a directory on the server's machine)",
                dest.display()
            ),
        ));
    }
    let b = engine(ctx.store.backup(&dest))?;
    // The copy is checked as `amberdb check` would, so the reply says it is whole.
    let check = match crate::check::check(&dest) {
        Ok((_, code, report)) => json!({
            "clean": code == crate::check::CLEAN,
            "errors": report.errors(),
            "findings": report.findings.iter().map(|f| format!("{}: {}", f.file, f.what)).collect::<Vec<_>>(),
        }),
        Err(e) => json!({"clean": false, "errors": 1, "findings": [e.to_string()]}),
    };
    Ok(json!({
        "backup": {
            "dest": b.dest.display().to_string(),
            "seq": b.seq,
            "files": b.files,
            "bytes": b.bytes,
            "seconds": b.seconds,
            "check": check,
        }
    }))
}

arguments! {
    /// EXPORT.
    struct Export {
        dest: String = req(
            "dest",
            Ty::Str,
            "an absolute path of a new file on the server's machine: every entity and record (live and archived), as one state",
        ),
    }
}

/// A path argument that must be absolute (a file on the server's machine).
fn absolute(field: &str, path: String) -> Result<std::path::PathBuf, Fail> {
    let path = std::path::PathBuf::from(path);
    if path.is_absolute() {
        Ok(path)
    } else {
        Err(Fail::invalid(
            field,
            format!(
                "{:?} must be an absolute path (a file on the server's machine)",
                path.display()
            ),
        ))
    }
}

fn export(ctx: &Ctx, session: &Session, a: Export) -> Outcome {
    every_user(session, "EXPORT")?;
    let dest = absolute("dest", a.dest)?;
    let file = match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&dest)
    {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return Err(Fail::invalid(
                "dest",
                format!(
                    "{} exists: an export writes a new file (remove it, or name another)",
                    dest.display()
                ),
            ));
        }
        Err(e) => {
            return Err(Fail::new(
                Code::Invalid,
                format!("creating {}: {e}", dest.display()),
            ));
        }
    };
    let written = (|| -> anyhow::Result<crate::dump::ExportCounts> {
        let mut out = std::io::BufWriter::new(file);
        let counts = crate::dump::export(&ctx.store, &mut out)?;
        out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        Ok(counts)
    })();
    match written {
        Ok(counts) => Ok(
            json!({"export": {"dest": dest.display().to_string(), "version": crate::dump::VERSION, "entities": counts.entities, "live": counts.live, "archived": counts.archived}}),
        ),
        Err(e) => {
            // A part of an export is no export: nothing is left behind.
            let _ = std::fs::remove_file(&dest);
            Err(Fail::new(
                Code::Internal,
                format!("writing {}: {e:#}", dest.display()),
            ))
        }
    }
}

arguments! {
    /// IMPORT.
    struct Import {
        source: String = req(
            "source",
            Ty::Str,
            "an absolute path of a file on the server's machine: an export (EXPORT, amberdb export), JSON Lines of memories, or mem0's / agent-memory-server's JSON",
        ),
        partition: Option<u64> = opt(
            "partition",
            Ty::Int,
            "cluster mode only (amberdb cluster import sends it): the partition every user of the export belongs to; the partition's owner imports it, once every line is checked",
        ),
    }
}

fn import(ctx: &Ctx, session: &Session, a: Import) -> Outcome {
    every_user(session, "IMPORT")?;
    if a.partition.is_some() {
        // A cluster node takes `partition` out before it runs the import
        // (`crate::everywhere`): here it reached one node, which holds no partitions.
        return Err(Fail::invalid(
            "partition",
            "partition is for a cluster node (amberdb cluster import): this server is one node, whose store holds every user",
        ));
    }
    let source = absolute("source", a.source)?;
    if !source.is_file() {
        return Err(Fail::invalid(
            "source",
            format!("{} is not a file", source.display()),
        ));
    }
    match crate::dump::import_file(&ctx.store, &source, None) {
        Ok(done) => Ok(json!({"import": done})),
        Err(e) => Err(match e.downcast::<amberdb::EngineError>() {
            Ok(engine_error) => Fail::from(engine_error),
            Err(e) => Fail::new(Code::Invalid, format!("{e:#}")),
        }),
    }
}

arguments! {
    /// REEMBED.
    struct Reembed {
        embedder: Option<String> = opt(
            "embedder",
            Ty::Str,
            "minilm (from AMBERDB_MODEL_DIR or ~/.cache/amberdb/all-MiniLM-L6-v2), bge-small (from ~/.cache/amberdb/bge-small-en-v1.5) or hashing (384-d)",
        ),
        cancel: bool = opt(
            "cancel",
            Ty::Bool,
            "true drops what an interrupted re-embedding staged",
        )
        .or(Fallback::Bool(false)),
    }
}

fn reembed(ctx: &Ctx, session: &Session, a: Reembed) -> Outcome {
    every_user(session, "REEMBED")?;
    if a.cancel {
        let dropped = engine(ctx.store.cancel_reembed())?;
        return Ok(json!({"reembed": {"cancelled": dropped}}));
    }
    let Some(name) = a.embedder else {
        return Err(Fail::new(
            Code::Invalid,
            "give embedder (minilm, bge-small or hashing), or cancel: true".to_owned(),
        ));
    };
    let choice = crate::embedder::EmbedderChoice::named(&name)
        .map_err(|reason| Fail::new(Code::Invalid, reason))?;
    let embedder = engine(
        crate::embedder::open_options(choice, None)
            .map(|o| o.embedder)
            .map_err(amberdb::EngineError::from),
    )?;
    let r = engine(ctx.store.reembed(embedder))?;
    Ok(json!({
        "reembed": {
            "model": r.model_id,
            "dimensions": r.dim,
            "records": r.records,
            "tags": r.tags,
            "seconds": r.seconds,
            "switch_seconds": r.switch_seconds,
            "bytes_on_disk": r.bytes_after,
            "restart_with": format!("--embedder {name}"),
        }
    }))
}

arguments! {
    /// MAINTENANCE.
    struct Maintenance {
        paused: Option<bool> = opt(
            "paused",
            Ty::Bool,
            "true pauses, false resumes; absent only reports",
        ),
    }
}

fn maintenance(ctx: &Ctx, session: &Session, a: Maintenance) -> Outcome {
    every_user(session, "MAINTENANCE")?;
    if let Some(paused) = a.paused {
        ctx.store.pause_maintenance(paused);
    }
    let m = ctx.store.stats().maintenance;
    Ok(json!({
        "maintenance": {
            "paused": m.paused,
            "checkpoints": m.checkpoints,
            "purges": m.purges,
            "purge_pending_seconds": m.purge_pending,
            "archived_forgotten": m.archived_forgotten,
        }
    }))
}

/// The commands of this domain, in HELP's order.
pub(super) static TABLE: &[Command] = &[
    Command {
        name: "STATS",
        alias: None,
        tool: false,
        class: Class::Status,
        summary: "Server counters (requests, errors, latency quantiles, connections) and the store's size.",
        args: NoArgs::ARGS,
        reply: &[
            // A cluster node reports its partitions (`cluster`) instead of one store's.
            field("store", Object).maybe(),
            field("cluster", Object).maybe(),
            field("uptime_seconds", Int),
            field("version", Str),
            field("requests", Int),
            field("errors", Int),
            field("errors_by_code", Object),
            field("requests_by_command", Object),
            field("latency", Object),
            field("connections", Object),
            field("bytes_in", Int),
            field("bytes_out", Int),
            field("admission", Object),
        ],
        run: Some(|c, s, a| stats(c, s, NoArgs::parse(a)?)),
    },
    Command {
        name: "PURGE",
        alias: None,
        tool: false,
        class: Class::Write,
        summary: "Makes every deleted memory leave the store's files now (texts, tags, vectors) and says what it removed.",
        args: NoArgs::ARGS,
        reply: &[field("purged", Object)],
        run: Some(|c, s, a| purge(c, s, NoArgs::parse(a)?)),
    },
    Command {
        name: "BACKUP",
        alias: None,
        tool: false,
        class: Class::Write,
        summary: "Copies the store, as it is at one commit, into an empty directory on the server's machine while it serves, and checks the copy.",
        args: Backup::ARGS,
        reply: &[field("backup", Object)],
        run: Some(|c, s, a| backup(c, s, Backup::parse(a)?)),
    },
    Command {
        name: "EXPORT",
        alias: None,
        tool: false,
        class: Class::Write,
        summary: "Writes every entity and record, live and archived, with ids, lineage and validity, as one state of the store, to a new file on the server's machine.",
        args: Export::ARGS,
        reply: &[field("export", Object)],
        run: Some(|c, s, a| export(c, s, Export::parse(a)?)),
    },
    Command {
        name: "IMPORT",
        alias: None,
        tool: false,
        class: Class::Write,
        summary: "Reads an export (ids kept when this store never gave them out), JSON Lines of memories, or mem0's / agent-memory-server's JSON from a file on the server's machine.",
        args: Import::ARGS,
        reply: &[field("import", Object)],
        run: Some(|c, s, a| import(c, s, Import::parse(a)?)),
    },
    Command {
        name: "MAINTENANCE",
        alias: None,
        tool: false,
        class: Class::Write,
        summary: "Pauses or resumes the store's automatic checkpoints, purges and archive retention, and says what they did.",
        args: Maintenance::ARGS,
        reply: &[field("maintenance", Object)],
        run: Some(|c, s, a| maintenance(c, s, Maintenance::parse(a)?)),
    },
    Command {
        name: "REEMBED",
        alias: None,
        tool: false,
        class: Class::Write,
        summary: "Moves the store to another embedder from its stored texts while it serves (new vectors staged, one switch, old vectors purged); replies when done.",
        args: Reembed::ARGS,
        reply: &[field("reembed", Object)],
        run: Some(|c, s, a| reembed(c, s, Reembed::parse(a)?)),
    },
];
