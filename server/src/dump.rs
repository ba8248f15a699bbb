//! The whole store as JSON Lines, and back (`docs/semantics.md`, "Export and import";
//! `amberdb export`, `EXPORT`, `Store.export()` in Python).
//!
//! An export (version 2) is a header line, then every entity, then every record, live and
//! archived, in id order:
//!
//! ```text
//! {"type": "export", "format": "amberdb", "version": 2, "next_id": 9, "entities": 2, "records": 8}
//! {"type": "entity", "kind": "user", "user_id": "ada", "id": "ada", ...}
//! {"type": "record", "archived": false, "id": 8, "content": ..., "supersedes": [5], ...}
//! ```
//!
//! A record line holds every field of the record as the protocol returns it, plus `archived`
//! and `decision_code` (the fact guard's rule, `docs/format/log.md`); its `content_hash` is
//! computed again on import, never trusted. Import ([`import`]) creates the entities (an
//! existing one is kept) and puts the records back with `Store::import_all`: ids kept when the
//! store never gave them out, else renumbered with lineage rewritten, and records the store
//! holds already not stored twice. A version-1 file (live memories only, no header) is read by
//! `transfer::import` as before.

use crate::transfer::{Imported, text, time};
use amberdb::{
    Category, EngineError, Entity, ExportedRecord, ImportedRecords, Item, Kind, Memory, MemoryId,
    Role, Store,
};
use serde_json::{Map, Value, json};
use std::io::Write;

/// The export format this build writes.
pub const VERSION: u64 = 2;

/// What an export wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ExportCounts {
    /// Users, agents and sessions.
    pub entities: usize,
    /// Live records.
    pub live: usize,
    /// Archived records.
    pub archived: usize,
}

/// Writes every entity and record of `store`, as one state of it, to `out` (module doc).
///
/// # Errors
/// Writing failed.
pub fn export(store: &Store, out: impl Write) -> anyhow::Result<ExportCounts> {
    let all = store.export_all()?;
    write_export(
        out,
        all.next_id,
        &store.embedder_id(),
        &all.entities,
        &all.records,
    )
}

/// Writes an export (module doc) of `entities` and `records` to `out`: the header (with
/// `next_id`, the id the store would give next, and the `embedder` its vectors came from),
/// then a line for each.
///
/// # Errors
/// Writing failed.
pub(crate) fn write_export(
    mut out: impl Write,
    next_id: MemoryId,
    embedder: &str,
    entities: &[Entity],
    records: &[ExportedRecord],
) -> anyhow::Result<ExportCounts> {
    let header = json!({
        "type": "export", "format": "amberdb", "version": VERSION,
        "next_id": next_id, "entities": entities.len(), "records": records.len(),
        "embedder": embedder,
    });
    serde_json::to_writer(&mut out, &header)?;
    out.write_all(b"\n")?;
    for e in entities {
        let mut v = serde_json::to_value(e)?;
        if let Value::Object(o) = &mut v {
            o.insert("type".into(), json!("entity"));
        }
        serde_json::to_writer(&mut out, &v)?;
        out.write_all(b"\n")?;
    }
    let mut counts = ExportCounts {
        entities: entities.len(),
        live: 0,
        archived: 0,
    };
    for r in records {
        serde_json::to_writer(&mut out, &record_line(r)?)?;
        out.write_all(b"\n")?;
        if r.archived {
            counts.archived += 1;
        } else {
            counts.live += 1;
        }
    }
    out.flush()?;
    Ok(counts)
}

fn record_line(r: &ExportedRecord) -> anyhow::Result<Value> {
    let mut v = serde_json::to_value(&r.memory)?;
    if let Value::Object(o) = &mut v {
        o.insert("type".into(), json!("record"));
        o.insert("archived".into(), json!(r.archived));
        if let Some(rule) = r.memory.decision {
            o.insert("decision_code".into(), json!(rule.code()));
        }
    }
    Ok(v)
}

/// Whether `line` is the header of a version-2 export.
#[must_use]
pub fn is_header(line: &Map<String, Value>) -> bool {
    line.get("type").and_then(Value::as_str) == Some("export")
}

/// The user an export's entity or record line belongs to: a record's and a non-user entity's
/// `user_id`, a user entity's `id`; `None` for a line of neither kind or without one.
#[must_use]
pub fn user_of_line(line: &Map<String, Value>) -> Option<&str> {
    let field = match (line.get("type")?.as_str()?, line.get("kind")?.as_str()?) {
        ("entity", "user") => "id",
        ("entity" | "record", _) => "user_id",
        _ => return None,
    };
    line.get(field)?.as_str()
}

/// Imports the lines after a version-2 header (`lines`: numbered from 2, each a parsed
/// object or why not). Every record is checked before any is written; a line that is not a
/// record or entity fails the import, naming it.
///
/// # Errors
/// A header of another version, a bad line (named), or the store refusing the records.
pub fn import(
    store: &Store,
    header: &Map<String, Value>,
    lines: impl Iterator<Item = (usize, Result<Map<String, Value>, String>)>,
) -> anyhow::Result<(Imported, ImportedRecords)> {
    let version = header.get("version").and_then(Value::as_u64);
    if version != Some(VERSION) {
        anyhow::bail!(
            "line 1: an export of version {} (this build reads version {VERSION}, and files \
             without a header)",
            version.map_or_else(|| "?".to_owned(), |v| v.to_string())
        );
    }
    let mut done = Imported::default();
    let mut records = Vec::new();
    let mut entities = Vec::new();
    for (n, line) in lines {
        done.lines = n;
        let o = line.map_err(|why| anyhow::anyhow!("line {n}: {why}"))?;
        match o.get("type").and_then(Value::as_str) {
            Some("entity") => entities.push(o),
            Some("record") => {
                records.push(record_of(&o).map_err(|e| anyhow::anyhow!("line {n}: {e}"))?)
            }
            other => anyhow::bail!(
                "line {n}: a line of type {other:?} in an export (entity or record expected)"
            ),
        }
    }
    for o in &entities {
        crate::transfer::import_entity(store, o, &mut done)?;
    }
    let imported = store.import_all(records)?;
    done.format = "export";
    done.ids_kept = Some(imported.ids_kept);
    done.archived = imported.archived;
    done.stored = imported.stored + imported.archived;
    done.duplicates = imported.duplicates;
    done.renumbered = imported
        .renumbered
        .iter()
        .map(|(from, to)| (from.0, to.0))
        .collect();
    store.flush()?;
    Ok((done, imported))
}

fn invalid(field: &'static str, reason: impl Into<String>) -> EngineError {
    EngineError::Invalid {
        field,
        reason: reason.into(),
    }
}

fn needed<T>(v: Option<T>, field: &'static str) -> Result<T, EngineError> {
    v.ok_or_else(|| invalid(field, "a record line needs it"))
}

fn number<T: TryFrom<u64>>(o: &Map<String, Value>, field: &'static str) -> Result<T, EngineError> {
    o.get(field)
        .and_then(Value::as_u64)
        .and_then(|n| T::try_from(n).ok())
        .ok_or_else(|| invalid(field, "must be a non-negative integer in range"))
}

/// A record line as the record it describes (its hash is computed again by the import).
fn record_of(o: &Map<String, Value>) -> Result<ExportedRecord, EngineError> {
    let kind = Kind::parse(&needed(text(o, "kind")?, "kind")?)?;
    let tags = match o.get("tags") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(t)) => t
            .iter()
            .map(|t| t.as_str().map(str::to_owned))
            .collect::<Option<_>>()
            .ok_or_else(|| invalid("tags", "must be strings"))?,
        Some(_) => return Err(invalid("tags", "must be a list of strings")),
    };
    let supersedes = match o.get("supersedes") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(s)) => s
            .iter()
            .map(|id| id.as_u64().map(MemoryId))
            .collect::<Option<_>>()
            .ok_or_else(|| invalid("supersedes", "must be ids"))?,
        Some(_) => return Err(invalid("supersedes", "must be a list of ids")),
    };
    let decision = match o.get("decision_code") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_u64()
                .and_then(|c| u8::try_from(c).ok())
                .and_then(amberdb::Rule::from_code)
                .ok_or_else(|| invalid("decision_code", "not a rule's code"))?,
        ),
    };
    let item = if kind == Kind::Item {
        let Some(value @ Value::Object(_)) = o.get("value") else {
            return Err(invalid(
                "value",
                "an item needs a value that is a JSON object",
            ));
        };
        Some(Item {
            key: needed(text(o, "key")?, "key")?,
            value: value.to_string(),
        })
    } else {
        None
    };
    let confidence = o
        .get("confidence")
        .and_then(Value::as_f64)
        .ok_or_else(|| invalid("confidence", "must be a number"))? as f32;
    let created_at = needed(time(o, "created_at")?, "created_at")?;
    let content = needed(text(o, "content")?, "content")?;
    let memory = Memory {
        id: MemoryId(number(o, "id")?),
        user_id: needed(text(o, "user_id")?, "user_id")?,
        kind,
        session_id: text(o, "session_id")?,
        agent_id: text(o, "agent_id")?,
        role: text(o, "role")?.map(|r| Role::parse(&r)).transpose()?,
        content_hash: amberdb::content_hash(&content),
        content,
        category: Category::parse(&needed(text(o, "category")?, "category")?)?,
        tags,
        created_at,
        updated_at: time(o, "updated_at")?.unwrap_or(created_at),
        last_accessed_at: time(o, "last_accessed_at")?.unwrap_or(created_at),
        access_count: number(o, "access_count")?,
        helpful_count: number(o, "helpful_count")?,
        harmful_count: number(o, "harmful_count")?,
        confidence,
        supersedes,
        valid_from: time(o, "valid_from")?.unwrap_or(created_at),
        valid_to: time(o, "valid_to")?,
        decision,
        item,
        source_id: text(o, "source_id")?,
    };
    let archived = match o.get("archived") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(invalid("archived", "must be true or false")),
    };
    Ok(ExportedRecord { memory, archived })
}

/// Imports JSON Lines from `input`: a version-2 export (its header says so) with [`import`],
/// anything else with `transfer::import` (version-1 exports, `{"content": ...}` lines).
/// `total` sizes the progress bar.
///
/// # Errors
/// Reading failed, a bad export, or the store refusing writes.
pub fn import_lines(
    store: &Store,
    input: impl std::io::BufRead,
    total: Option<u64>,
) -> anyhow::Result<Imported> {
    let mut objects = crate::transfer::json_lines(input);
    let first = objects.next().transpose()?;
    if let Some(Some(Ok(header))) = &first
        && is_header(header)
    {
        let mut failed = None;
        let rest = objects.enumerate().filter_map(|(i, line)| match line {
            Ok(None) => None,
            Ok(Some(object)) => Some((i + 2, object)),
            Err(e) => {
                failed.get_or_insert(e);
                None
            }
        });
        let (done, _) = import(store, header, rest)?;
        return match failed {
            Some(e) => Err(e.into()),
            None => Ok(done),
        };
    }
    crate::transfer::import_objects(store, first.map(Ok).into_iter().chain(objects), total)
}

/// Imports the file at `path`, whatever amberdb reads: an export (either version), JSON Lines
/// of memories, or another system's JSON ([`crate::foreign::System::detect`]; mem0's memories
/// go to LangMem's namespace). `user` is where memories without one go (another system's).
///
/// # Errors
/// An unreadable file, a bad export, or the store refusing writes.
pub fn import_file(
    store: &Store,
    path: &std::path::Path,
    user: Option<&str>,
) -> anyhow::Result<Imported> {
    use anyhow::Context;
    if let Some(system) = crate::foreign::System::detect(path)
        .with_context(|| format!("reading {}", path.display()))?
    {
        let namespace =
            (system == crate::foreign::System::Mem0).then_some(crate::foreign::MEM0_NAMESPACE);
        let mut imported = crate::foreign::import(store, system, path, user, namespace)?;
        imported.done.format = system.name();
        imported.done.relations_skipped = imported.relations_skipped;
        return Ok(imported.done);
    }
    // Read whole and checked as text before anything is written: a file that cannot be read
    // changes nothing (a line that is not JSON is a failed line, reported; the rest go in).
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let text = String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        let line = e.as_bytes()[..at].iter().filter(|&&b| b == b'\n').count() + 1;
        anyhow::anyhow!(
            "{}: line {line} is not UTF-8 text (an export, JSON Lines, or mem0's / \
             agent-memory-server's JSON); nothing was imported",
            path.display()
        )
    })?;
    let lines = text.lines().count() as u64;
    import_lines(store, text.as_bytes(), Some(lines))
}
