//! Import of a vector-memory-mcp store: its SQLite file, `WORKING_DIR/memory/vector_memory.db`
//! (`../shared/reference/peers.md` §1.1 has its schema).
//!
//! Every row of `memory_metadata` becomes one memory of the target user (`default` unless
//! told), keeping its content, category, tags, `created_at`, `updated_at` (also its last
//! access: vector-memory-mcp moves `updated_at` when a search returns a row) and
//! `access_count` (`Store::import`). The vectors of its `vec0` table are not read (that needs
//! the sqlite-vec extension loaded); the content is embedded again by the store's embedder,
//! which for MiniLM is the model vector-memory-mcp used. Tag and category normalization and
//! semantic dedup are off (what was stored comes back as it was); exact dedup is on, so a
//! second import of the same file adds nothing. The file is opened read-only and never
//! changed, and read whole before anything is stored (a damaged file stores nothing). Rows
//! go in batches of `BATCH` (64) per model call, each its own commit. A row that fails is
//! reported with its id and the import goes on.

use crate::transfer::Imported;
use amberdb::KernelError;
use amberdb::{
    Category, EngineError, MemoryId, NewMemory, Provenance, Store, StoreRequest, Timestamp,
};
use anyhow::Context;
use std::path::{Path, PathBuf};

/// Where vector-memory-mcp keeps its store under its `--working-dir`.
#[must_use]
pub fn database_in(working_dir: &Path) -> PathBuf {
    working_dir.join("memory").join("vector_memory.db")
}

/// Whether `path` is an SQLite database file (by its 16-byte header).
#[must_use]
pub fn is_sqlite(path: &Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 16];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut head))
        .is_ok()
        && &head == b"SQLite format 3\0"
}

/// One row of `memory_metadata`.
struct Row {
    id: i64,
    content: Option<String>,
    category: Option<String>,
    tags: Option<String>,
    created_at: Option<String>,
    updated_at: Option<String>,
    access_count: Option<i64>,
}

/// Imports the vector-memory-mcp database `db` into `store`, for `user` (module doc).
///
/// # Errors
/// The file is not an SQLite database or has no `memory_metadata` table, or the store
/// stopped taking writes (poisoned, I/O).
pub fn import(store: &Store, db: &Path, user: Option<&str>) -> anyhow::Result<Imported> {
    let conn = rusqlite::Connection::open_with_flags(
        db,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .with_context(|| format!("opening {}", db.display()))?;
    let rows = read_rows(&conn).with_context(|| {
        format!(
            "reading memory_metadata from {} (is it vector-memory-mcp's store?)",
            db.display()
        )
    })?;
    let mut done = Imported::default();
    let bar = crate::transfer::progress(Some(rows.len() as u64), "importing");
    // Batches share one model call (`Store::import_batch`); each row is still its own commit.
    for chunk in rows.chunks(BATCH) {
        let mut ids = Vec::with_capacity(chunk.len());
        let mut batch = Vec::with_capacity(chunk.len());
        for row in chunk {
            match request(row, user) {
                Ok(req) => {
                    ids.push(row.id);
                    batch.push(req);
                }
                Err(e) => done.failed.push((row_number(row.id), e.to_string())),
            }
        }
        let results = store
            .import_batch(batch)
            .with_context(|| format!("rows from id {}", chunk[0].id))?;
        for (id, result) in ids.into_iter().zip(results) {
            let source = u64::try_from(id).unwrap_or(0);
            match result {
                Ok(stored) => {
                    done.stored += 1;
                    if stored.memory_id.0 != source {
                        done.renumbered.push((source, stored.memory_id.0));
                    }
                }
                Err(EngineError::AlreadyExists { existing }) => {
                    done.duplicates += 1;
                    done.renumbered.push((source, existing.0));
                }
                Err(
                    e @ (EngineError::Kernel(KernelError::Poisoned)
                    | EngineError::Kernel(KernelError::Io { .. })),
                ) => {
                    bar.finish_and_clear();
                    return Err(anyhow::Error::new(e)
                        .context(format!("row id {id}: the store stopped taking writes")));
                }
                Err(e) => done.failed.push((row_number(id), e.to_string())),
            }
        }
        done.lines += chunk.len();
        bar.inc(chunk.len() as u64);
    }
    done.failed.sort_by_key(|(id, _)| *id);
    bar.finish_and_clear();
    store.flush()?;
    Ok(done)
}

/// Rows per model call.
const BATCH: usize = 64;

fn row_number(id: i64) -> usize {
    usize::try_from(id).unwrap_or(0)
}

fn read_rows(conn: &rusqlite::Connection) -> rusqlite::Result<Vec<Row>> {
    // In id order: each row keeps its id in a store that has used none at or above it (an
    // empty store), so an id an agent remembered names the same memory after the switch.
    let mut stmt = conn.prepare(
        "SELECT id, content, category, tags, created_at, updated_at, access_count \
         FROM memory_metadata ORDER BY id",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok(Row {
            id: r.get(0)?,
            content: r.get(1)?,
            category: r.get(2)?,
            tags: r.get(3)?,
            created_at: r.get(4)?,
            updated_at: r.get(5)?,
            access_count: r.get(6)?,
        })
    })?;
    rows.collect()
}

fn invalid(field: &'static str, reason: impl Into<String>) -> EngineError {
    EngineError::Invalid {
        field,
        reason: reason.into(),
    }
}

/// A time as vector-memory-mcp writes it: ISO 8601 in UTC, with an offset
/// (`2025-01-15T10:30:00.123456+00:00`) or without one (Python's naive `isoformat()`, or
/// SQLite's `2025-01-15 10:30:00`), which is UTC.
fn parse_time(field: &'static str, text: &str) -> Result<Timestamp, EngineError> {
    let t = text.trim().replacen(' ', "T", 1);
    let has_offset = t.ends_with('Z')
        || t.get(10..)
            .is_some_and(|rest| rest.contains('+') || rest.contains('-'));
    let full = if has_offset || t.len() <= 10 {
        t
    } else {
        format!("{t}Z")
    };
    Timestamp::parse_rfc3339(&full)
        .ok_or_else(|| invalid(field, format!("{text:?} is not an ISO 8601 time")))
}

/// The import of one row: the memory and the history it keeps.
fn request(row: &Row, user: Option<&str>) -> Result<(StoreRequest, Provenance), EngineError> {
    let content = row
        .content
        .clone()
        .ok_or_else(|| invalid("content", "is NULL"))?;
    let mut m = NewMemory::new(content);
    m.user_id = user.map(str::to_owned);
    if let Some(c) = row.category.as_deref().filter(|c| !c.is_empty()) {
        m.category = Category::parse(c)?;
    }
    if let Some(tags) = row.tags.as_deref().filter(|t| !t.trim().is_empty()) {
        m.tags = serde_json::from_str::<Vec<String>>(tags)
            .map_err(|e| invalid("tags", format!("not a JSON array of strings: {e}")))?;
    }
    let created_at = match row.created_at.as_deref() {
        Some(t) => parse_time("created_at", t)?,
        None => return Err(invalid("created_at", "is NULL")),
    };
    let updated_at = match row.updated_at.as_deref() {
        Some(t) => parse_time("updated_at", t)?.max(created_at),
        None => created_at,
    };
    let access_count = u64::try_from(row.access_count.unwrap_or(0))
        .map_err(|_| invalid("access_count", "is negative"))?;
    let kept = Provenance {
        created_at,
        updated_at,
        last_accessed_at: updated_at,
        access_count,
        id: u64::try_from(row.id)
            .ok()
            .filter(|id| *id >= 1)
            .map(MemoryId),
        ..Provenance::created(created_at)
    };
    let req = StoreRequest {
        memory: m,
        vector: None,
        hooks: crate::transfer::import_hooks(),
    };
    Ok((req, kept))
}

/// Where `amberdb mcp` records that it imported vector-memory-mcp's store in `working_dir`.
fn import_record(working_dir: &Path) -> PathBuf {
    working_dir.join("memory").join("amberdb-import.json")
}

/// Whether `amberdb mcp --working-dir DIR` has vector-memory-mcp's store to import: there is
/// one, and no record says it was imported (checked before the store is opened for it).
#[must_use]
pub fn import_pending(working_dir: &Path) -> bool {
    database_in(working_dir).is_file() && !import_record(working_dir).exists()
}

/// `amberdb mcp --working-dir DIR` on a directory vector-memory-mcp used, when
/// [`import_pending`]: imports its store into `store`, then records it in
/// `DIR/memory/amberdb-import.json` (written after the import completes; an interrupted
/// import runs again, and exact dedup skips what the first run stored).
///
/// # Errors
/// As [`import`]; or the record cannot be written.
pub fn import_on_first_start(store: &Store, working_dir: &Path) -> anyhow::Result<Imported> {
    let db = database_in(working_dir);
    let record = import_record(working_dir);
    let done = import(store, &db, None)?;
    let summary = serde_json::json!({
        "from": db.display().to_string(),
        "at": Timestamp::now().to_rfc3339(),
        "rows": done.lines,
        "stored": done.stored,
        "already_there": done.duplicates,
        "failed": done.failed.iter().map(|(_, why)| why).collect::<Vec<_>>(),
    });
    let tmp = record.with_extension("json.tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(&summary)?)
        .and_then(|()| std::fs::rename(&tmp, &record))
        .with_context(|| format!("writing {}", record.display()))?;
    Ok(done)
}
