//! `amberdb import` of JSON Lines that are not a version-2 export (`dump.rs`, which
//! `amberdb export` writes and [`import`] hands over to): version-1 exports (entities, then
//! live memories, `{"type": "memory", ...}`, without ids kept) and bare `{"content": ...}`
//! objects with the store request's fields, as other tools write them.
//!
//! Import reads such lines: entities are created (an existing one is kept), memories go through `store_memory`
//! with exact dedup **on** (so importing a file twice stores it once) and semantic dedup, tag
//! and category normalization **off** (what was exported comes back as it was, not merged or
//! re-tagged). Chat messages are never deduplicated by the store (two turns may both say
//! "ok"), so import counts them instead: a message is skipped when the store already holds as
//! many turns with that user, session, role and content as the file has given so far; a file
//! imported twice adds nothing, and repeated turns survive. A memory comes back with its
//! history: its validity (`valid_from`, `valid_to`), times (`created_at`, `updated_at`,
//! `last_accessed_at`), `access_count`, feedback (`helpful_count`, `harmful_count`) and
//! `confidence` as exported (`Store::import`; a line without `created_at` is a new memory,
//! stored now). Only the id is the new store's. Memories are embedded 64 per model call, each
//! still its own commit, in file order. A line that fails is reported with its line number
//! and the import goes on; the summary counts each outcome.

use amberdb::KernelError;
use amberdb::hooks::WriteHook;
use amberdb::{
    Category, EngineError, EntityKind, HookOverrides, Item, Kind, NewMemory, Provenance, Role,
    Store, StoreRequest, Timestamp,
};
use serde_json::{Map, Value};
use std::io::BufRead;

/// What an import did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Imported {
    /// Lines read.
    pub lines: usize,
    /// Memories stored.
    pub stored: usize,
    /// Memories already in the store (same user, same content).
    pub duplicates: usize,
    /// Entities created.
    pub entities: usize,
    /// Entities that already existed.
    pub entities_existing: usize,
    /// Lines that failed: `(line number, why)`.
    pub failed: Vec<(usize, String)>,
    /// Source ids that name another memory here: `(source id, id here)`, a duplicate mapped
    /// to the memory that already held its text. A source id not listed is the same here
    /// (or its row failed). Only imports that carry ids fill it (vector-memory-mcp's).
    pub renumbered: Vec<(u64, u64)>,
    /// What the file was: `export` (version 2, ids kept or renumbered), `json lines`, `mem0`,
    /// `agent-memory-server`.
    pub format: &'static str,
    /// Version-2 exports: whether every record kept its id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ids_kept: Option<bool>,
    /// Version-2 exports: archived records stored (counted in `stored` too).
    pub archived: usize,
    /// mem0's graph relations, not memories: not imported.
    pub relations_skipped: usize,
}

impl Default for Imported {
    fn default() -> Imported {
        Imported {
            lines: 0,
            stored: 0,
            duplicates: 0,
            entities: 0,
            entities_existing: 0,
            failed: Vec::new(),
            renumbered: Vec::new(),
            format: "json lines",
            ids_kept: None,
            archived: 0,
            relations_skipped: 0,
        }
    }
}

/// A progress bar on stderr for `len` items (hidden when stderr is not a terminal).
pub(crate) fn progress(len: Option<u64>, what: &'static str) -> indicatif::ProgressBar {
    let bar =
        indicatif::ProgressBar::with_draw_target(len, indicatif::ProgressDrawTarget::stderr());
    let template = if len.is_some() {
        "{msg} {wide_bar} {pos}/{len} ({per_sec}, {eta} left)"
    } else {
        "{msg} {pos} ({per_sec})"
    };
    if let Ok(style) = indicatif::ProgressStyle::with_template(template) {
        bar.set_style(style);
    }
    bar.set_message(what);
    bar
}

/// Reads JSON Lines from `input` into `store` (module doc). `total` sizes the progress bar.
///
/// # Errors
/// Reading failed, or the store failed in a way that stops every later line (poisoned, I/O).
pub fn import(store: &Store, input: impl BufRead, total: Option<u64>) -> anyhow::Result<Imported> {
    import_objects(store, json_lines(input), total)
}

/// The lines of `input`, each `None` (blank), a JSON object, or why it is not one.
pub(crate) fn json_lines(
    input: impl BufRead,
) -> impl Iterator<Item = std::io::Result<Option<Result<Map<String, Value>, String>>>> {
    input.lines().map(|line| {
        line.map(|line| {
            (!line.trim().is_empty()).then(|| {
                serde_json::from_str::<Map<String, Value>>(&line)
                    .map_err(|e| format!("not a JSON object: {e}"))
            })
        })
    })
}

/// Imports objects of the export's shape, numbered from 1 as they come: `None` (a blank line)
/// is skipped, `Err` is a failure of that object; another system's import converts its
/// records into this shape (`mem0.rs`). Stops only when the store stops taking writes.
///
/// # Errors
/// Reading the input, or the store refusing writes (poisoned, I/O).
pub(crate) fn import_objects(
    store: &Store,
    objects: impl Iterator<Item = std::io::Result<Option<Result<Map<String, Value>, String>>>>,
    total: Option<u64>,
) -> anyhow::Result<Imported> {
    let bar = progress(total, "importing");
    let mut done = Imported::default();
    let mut messages = MessageCounts::of(store);
    let mut pending = Pending::default();
    for (i, object) in objects.enumerate() {
        let object = match object {
            Ok(object) => object,
            Err(e) => {
                // The lines read before it go in, as they would one at a time; then the
                // read error is the import's.
                let committed = pending.commit(store, &mut done);
                bar.finish_and_clear();
                committed?;
                return Err(e.into());
            }
        };
        bar.inc(1);
        let n = i + 1;
        done.lines = n;
        let obj = match object {
            None => continue,
            Some(Ok(o)) => o,
            Some(Err(why)) => {
                done.failed.push((n, why));
                continue;
            }
        };
        let parsed = match text(&obj, "type") {
            Ok(Some(t)) if t == "entity" => {
                // The memories before it may name it: they go first.
                pending.commit(store, &mut done)?;
                import_entity(store, &obj, &mut done).map(|()| None)
            }
            Ok(_) => memory_request(store, &obj, &mut done, &mut messages),
            Err(e) => Err(e),
        };
        match parsed {
            Ok(Some((req, kept))) => {
                if !pending.takes(&req, kept.is_some()) {
                    pending.commit(store, &mut done)?;
                }
                pending.push(n, req, kept);
                if pending.lines.len() == BATCH {
                    pending.commit(store, &mut done)?;
                }
            }
            Ok(None) => {}
            Err(
                e @ (EngineError::Kernel(KernelError::Poisoned)
                | EngineError::Kernel(KernelError::Io { .. })),
            ) => {
                bar.finish_and_clear();
                return Err(anyhow::Error::new(e)
                    .context(format!("line {n}: the store stopped taking writes")));
            }
            Err(e) => done.failed.push((n, e.to_string())),
        }
    }
    let committed = pending.commit(store, &mut done);
    bar.finish_and_clear();
    committed?;
    done.failed.sort_by_key(|(n, _)| *n);
    store.flush()?;
    Ok(done)
}

/// Memories per model call (`Store::import_batch`, `Store::store_batch`); each memory is
/// still its own commit, in file order.
const BATCH: usize = 64;

/// Memory lines parsed and waiting for their batch's model call. A batch holds lines of one
/// kind of call (all with their history, or all new), and at most one line per item key, so
/// that a later put of a key still finds the earlier one stored.
#[derive(Default)]
struct Pending {
    lines: Vec<usize>,
    reqs: Vec<StoreRequest>,
    kept: Vec<Provenance>,
    item_keys: std::collections::HashSet<(Option<String>, String)>,
}

impl Pending {
    fn item_key(req: &StoreRequest) -> Option<(Option<String>, String)> {
        let key = &req.memory.item.as_ref()?.key;
        Some((req.memory.user_id.clone(), key.clone()))
    }

    /// Whether `req` may join this batch.
    fn takes(&self, req: &StoreRequest, with_history: bool) -> bool {
        self.lines.is_empty()
            || ((self.kept.len() == self.lines.len()) == with_history
                && Pending::item_key(req).is_none_or(|k| !self.item_keys.contains(&k)))
    }

    fn push(&mut self, line: usize, req: StoreRequest, kept: Option<Provenance>) {
        if let Some(k) = Pending::item_key(&req) {
            self.item_keys.insert(k);
        }
        self.lines.push(line);
        self.reqs.push(req);
        self.kept.extend(kept);
    }

    /// Stores the batch (one model call) and counts each line's outcome.
    ///
    /// # Errors
    /// The store refusing writes (poisoned, I/O), with the line it happened at.
    fn commit(&mut self, store: &Store, done: &mut Imported) -> anyhow::Result<()> {
        if self.lines.is_empty() {
            return Ok(());
        }
        let lines = std::mem::take(&mut self.lines);
        let reqs = std::mem::take(&mut self.reqs);
        let kept = std::mem::take(&mut self.kept);
        self.item_keys.clear();
        let results = if kept.len() == reqs.len() {
            store.import_batch(reqs.into_iter().zip(kept).collect())
        } else {
            store.store_batch(reqs)
        };
        let stopped = |n: usize, e: EngineError| {
            anyhow::Error::new(e).context(format!("line {n}: the store stopped taking writes"))
        };
        let results = match results {
            Ok(results) => results,
            Err(
                e @ (EngineError::Kernel(KernelError::Poisoned)
                | EngineError::Kernel(KernelError::Io { .. })),
            ) => {
                return Err(stopped(lines[0], e));
            }
            Err(e) => {
                done.failed
                    .extend(lines.into_iter().map(|n| (n, e.to_string())));
                return Ok(());
            }
        };
        for (n, result) in lines.into_iter().zip(results) {
            match result {
                Ok(_) => done.stored += 1,
                Err(EngineError::AlreadyExists { .. }) => done.duplicates += 1,
                Err(
                    e @ (EngineError::Kernel(KernelError::Poisoned)
                    | EngineError::Kernel(KernelError::Io { .. })),
                ) => {
                    return Err(stopped(n, e));
                }
                Err(e) => done.failed.push((n, e.to_string())),
            }
        }
        Ok(())
    }
}

/// A string field (absent or null: `None`).
pub(crate) fn text(
    o: &Map<String, Value>,
    field: &'static str,
) -> Result<Option<String>, EngineError> {
    match o.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(EngineError::Invalid {
            field,
            reason: "must be a string".into(),
        }),
    }
}

/// An RFC 3339 time field.
pub(crate) fn time(
    o: &Map<String, Value>,
    field: &'static str,
) -> Result<Option<Timestamp>, EngineError> {
    text(o, field)?
        .map(|t| {
            Timestamp::parse_rfc3339(&t).ok_or(EngineError::Invalid {
                field,
                reason: format!("{t:?} is not an RFC 3339 time"),
            })
        })
        .transpose()
}

/// The hooks of an import, from a file or another system (module doc): what was stored comes
/// back as it was (no tag or category normalization, no merge of near duplicates), and exact
/// duplicates are stored once, so importing the same thing twice adds nothing.
pub(crate) fn import_hooks() -> HookOverrides {
    HookOverrides {
        skip: vec![
            WriteHook::Tags,
            WriteHook::Category,
            WriteHook::SemanticDedup,
        ],
        force: vec![WriteHook::ExactDedup],
        ..HookOverrides::default()
    }
}

/// A count field: a non-negative integer that fits `T`.
fn count<T: TryFrom<u64>>(o: &Map<String, Value>, field: &'static str) -> Result<T, EngineError> {
    let invalid = || EngineError::Invalid {
        field,
        reason: "must be a non-negative integer".into(),
    };
    match o.get(field) {
        None | Some(Value::Null) => T::try_from(0).map_err(|_| invalid()),
        Some(v) => v
            .as_u64()
            .and_then(|n| T::try_from(n).ok())
            .ok_or_else(invalid),
    }
}

/// The history an exported memory line carries (`created_at` and what follows it), if any.
fn provenance(o: &Map<String, Value>) -> Result<Option<Provenance>, EngineError> {
    let Some(created_at) = time(o, "created_at")? else {
        return Ok(None);
    };
    let updated_at = time(o, "updated_at")?.unwrap_or(created_at);
    let confidence = match o.get("confidence") {
        None | Some(Value::Null) => None,
        Some(v) => Some(v.as_f64().ok_or(EngineError::Invalid {
            field: "confidence",
            reason: "must be a number".into(),
        })? as f32),
    };
    Ok(Some(Provenance {
        created_at,
        updated_at,
        last_accessed_at: time(o, "last_accessed_at")?.unwrap_or(updated_at),
        access_count: count(o, "access_count")?,
        helpful_count: count(o, "helpful_count")?,
        harmful_count: count(o, "harmful_count")?,
        confidence,
        // A JSON Lines import gets new ids (its lines may come from several stores).
        id: None,
    }))
}

/// `(user, session, role, content)` of a message.
type MessageKey = (String, Option<String>, Option<String>, String);

/// Messages in the store, and in the file so far, per key (module doc).
struct MessageCounts {
    in_store: std::collections::HashMap<MessageKey, usize>,
    in_file: std::collections::HashMap<MessageKey, usize>,
}

impl MessageCounts {
    fn of(store: &Store) -> MessageCounts {
        let mut in_store = std::collections::HashMap::new();
        for id in store.memory_ids() {
            if let Ok(m) = store.get(id)
                && m.kind == Kind::Message
            {
                let key = (
                    m.user_id,
                    m.session_id,
                    m.role.map(|r| r.to_string()),
                    m.content,
                );
                *in_store.entry(key).or_insert(0) += 1;
            }
        }
        MessageCounts {
            in_store,
            in_file: std::collections::HashMap::new(),
        }
    }

    /// Counts one message of the file; true if the store already holds it.
    fn already_stored(&mut self, m: &NewMemory) -> bool {
        let key = (
            m.user_id
                .clone()
                .unwrap_or_else(|| amberdb::DEFAULT_USER.to_owned()),
            m.session_id.clone(),
            m.role.map(|r| r.to_string()),
            m.content.clone(),
        );
        let seen = self.in_file.entry(key.clone()).or_insert(0);
        *seen += 1;
        *seen <= self.in_store.get(&key).copied().unwrap_or(0)
    }
}

/// An item line's key and value (`docs/semantics.md`, "Items").
fn item_of(o: &Map<String, Value>) -> Result<Item, EngineError> {
    let key = text(o, "key")?.ok_or(EngineError::Invalid {
        field: "key",
        reason: "an item line needs a key".into(),
    })?;
    let Some(value @ Value::Object(_)) = o.get("value") else {
        return Err(EngineError::Invalid {
            field: "value",
            reason: "an item line needs a value that is a JSON object".into(),
        });
    };
    Ok(Item {
        key,
        value: value.to_string(),
    })
}

/// Whether the user's live item of the key holds this value and text already: importing a
/// file twice adds nothing (a put would replace the item with itself under a new id).
fn item_already_stored(store: &Store, m: &NewMemory) -> Result<bool, EngineError> {
    let Some(item) = &m.item else {
        return Ok(false);
    };
    let parsed = |v: &str| serde_json::from_str::<Value>(v).ok();
    Ok(store
        .get_item(m.user_id.as_deref(), &item.key)?
        .is_some_and(|live| {
            live.content == m.content
                && live.item.as_ref().map(|i| parsed(&i.value)) == Some(parsed(&item.value))
        }))
}

/// An entity line: creates the user, agent or session (an existing one is counted).
pub(crate) fn import_entity(
    store: &Store,
    o: &Map<String, Value>,
    done: &mut Imported,
) -> Result<(), EngineError> {
    let kind = EntityKind::parse(&text(o, "kind")?.unwrap_or_default())?;
    let id = text(o, "id")?.unwrap_or_default();
    let user = text(o, "user_id")?;
    let owner = if kind == EntityKind::User {
        None
    } else {
        user.as_deref()
    };
    let name = text(o, "name")?;
    let agent = text(o, "agent_id")?;
    match store.create_entity(kind, owner, &id, name.as_deref(), agent.as_deref()) {
        Ok(_) => {
            done.entities += 1;
            Ok(())
        }
        Err(EngineError::EntityExists { .. }) => {
            done.entities_existing += 1;
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// A memory line as the request that stores it, with its history if it has one; `None` when
/// the store holds it already (an item of the same key, text and value; a message counted).
fn memory_request(
    store: &Store,
    o: &Map<String, Value>,
    done: &mut Imported,
    messages: &mut MessageCounts,
) -> Result<Option<(StoreRequest, Option<Provenance>)>, EngineError> {
    let content = text(o, "content")?.ok_or(EngineError::Invalid {
        field: "content",
        reason: "a memory line needs content".into(),
    })?;
    let mut m = NewMemory::new(content);
    if let Some(c) = text(o, "category")? {
        m = m.category(Category::parse(&c)?);
    }
    if let Some(Value::Array(tags)) = o.get("tags") {
        m.tags = tags
            .iter()
            .filter_map(|t| t.as_str().map(str::to_owned))
            .collect();
        if m.tags.len() != tags.len() {
            return Err(EngineError::Invalid {
                field: "tags",
                reason: "must be strings".into(),
            });
        }
    }
    m.user_id = text(o, "user_id")?;
    m.session_id = text(o, "session_id")?;
    m.agent_id = text(o, "agent_id")?;
    if let Some(k) = text(o, "kind")? {
        m.kind = Kind::parse(&k)?;
    }
    if let Some(r) = text(o, "role")? {
        m.role = Some(Role::parse(&r)?);
    }
    m.valid_from = time(o, "valid_from")?;
    m.valid_to = time(o, "valid_to")?;
    if m.kind == Kind::Item {
        m.item = Some(item_of(o)?);
    }
    let kept = provenance(o)?;
    if (m.kind == Kind::Item && item_already_stored(store, &m)?)
        || (m.kind == Kind::Message && messages.already_stored(&m))
    {
        done.duplicates += 1;
        return Ok(None);
    }
    let req = StoreRequest {
        memory: m,
        vector: None,
        hooks: import_hooks(),
    };
    Ok(Some((req, kept)))
}
