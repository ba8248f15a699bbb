//! Switching from another memory system's JSON: `amberdb import --from mem0 FILE.json` and
//! `amberdb import --from agent-memory-server FILE.json`.
//!
//! - **mem0**: what `get_all()` returns (the export its docs describe,
//!   `json.dump(m.get_all(user_id=...), f)`): an object whose `results` is a list of memories.
//! - **agent-memory-server**: its memory records as its REST API carries them: the body of
//!   `POST /v1/long-term-memory/` or the reply of `/v1/long-term-memory/search` (an object whose
//!   `memories` is a list). It has no export of its own; paging its search writes this file.
//!
//! A bare list of memories is read as well. Each memory becomes an item (`docs/semantics.md`,
//! "Items"), so that nothing it carries is lost: its `id` is the key, its text the text it is
//! found by, its user, agent and session (mem0's `run_id`) ours (created when missing; also
//! for a memory that then fails), its times and access count kept (`Store::import`), and
//! every other field (mem0's `hash`, `metadata`, `categories`; agent-memory-server's
//! `namespace`, `topics`, `entities`, `memory_type`, `memory_hash`, ...) the value, as the
//! system wrote it. Both systems deduplicated their memories already; items skip our dedup, and
//! a second import of the same file adds nothing (an item of the same key, text and value is
//! there). A memory that cannot be imported is reported by its position (from 1) and the rest
//! go in. mem0's graph `relations`, when the file has them, are not memories: they are counted
//! and reported, not imported.

use crate::transfer::{Imported, import_objects};
use amberdb::{EngineError, EntityKind, Store};
use anyhow::Context;
use serde_json::{Map, Value};
use std::collections::BTreeSet;
use std::path::Path;

/// A system whose JSON `amberdb import --from` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum System {
    /// mem0's `get_all()` output.
    Mem0,
    /// agent-memory-server's memory records.
    AgentMemoryServer,
}

impl System {
    /// The list of memories in the file's object.
    fn list_field(self) -> &'static str {
        match self {
            System::Mem0 => "results",
            System::AgentMemoryServer => "memories",
        }
    }

    /// Its memory's text field.
    fn text_field(self) -> &'static str {
        match self {
            System::Mem0 => "memory",
            System::AgentMemoryServer => "text",
        }
    }

    /// Its fields that map onto ours, `(theirs, ours)`; every other one goes into the value.
    fn mapped(self) -> &'static [(&'static str, &'static str)] {
        match self {
            System::Mem0 => &[
                ("user_id", "user_id"),
                ("agent_id", "agent_id"),
                ("run_id", "session_id"),
                ("created_at", "created_at"),
                ("updated_at", "updated_at"),
            ],
            System::AgentMemoryServer => &[
                ("user_id", "user_id"),
                ("session_id", "session_id"),
                ("created_at", "created_at"),
                ("updated_at", "updated_at"),
                ("last_accessed", "last_accessed_at"),
                ("access_count", "access_count"),
            ],
        }
    }

    /// Its name, as `--from` takes it.
    pub fn name(self) -> &'static str {
        match self {
            System::Mem0 => "mem0",
            System::AgentMemoryServer => "agent-memory-server",
        }
    }

    /// The system whose JSON the file at `path` holds, judged by its first JSON value: a list
    /// of memories, or an object with mem0's `results` or agent-memory-server's `memories`
    /// list; `None` for anything else (JSON Lines start with one object per line).
    ///
    /// # Errors
    /// The file cannot be read.
    pub fn detect(path: &Path) -> std::io::Result<Option<System>> {
        let file = std::io::BufReader::new(std::fs::File::open(path)?);
        let Some(Ok(first)) = serde_json::Deserializer::from_reader(file)
            .into_iter::<Value>()
            .next()
        else {
            return Ok(None);
        };
        let of_list = |list: &[Value]| {
            list.first().and_then(Value::as_object).and_then(|m| {
                if m.contains_key("memory") {
                    Some(System::Mem0)
                } else if m.contains_key("text") {
                    Some(System::AgentMemoryServer)
                } else {
                    None
                }
            })
        };
        Ok(match &first {
            Value::Array(list) => of_list(list),
            Value::Object(o) => match (o.get("results"), o.get("memories")) {
                (Some(Value::Array(_)), _) => Some(System::Mem0),
                (_, Some(Value::Array(list))) => of_list(list).or(Some(System::AgentMemoryServer)),
                _ => None,
            },
            _ => None,
        })
    }
}

/// The LangGraph namespace (its first label) mem0's memories go to by default: LangMem's
/// tools keep memories under `("memories", user)`, the amberdb user `memories.<user>`
/// (`docs/python.md`, "LangGraph").
pub const MEM0_NAMESPACE: &str = "memories";

/// What an import from another system did: the import's counts, and the graph relations
/// left out.
#[derive(Debug, Default)]
pub struct ForeignImported {
    /// Memories and entities, as for any import.
    pub done: Imported,
    /// Entries of the file's `relations` (mem0's graph memory), not imported.
    pub relations_skipped: usize,
}

/// Imports `system`'s file at `path`; memories without a user go to `user` (else the
/// default user).
///
/// # Errors
/// An unreadable file or one that is not the system's shape, or the store refusing writes.
pub fn import(
    store: &Store,
    system: System,
    path: &Path,
    user: Option<&str>,
    namespace: Option<&str>,
) -> anyhow::Result<ForeignImported> {
    let (name, list) = (system.name(), system.list_field());
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let file: Value = serde_json::from_str(&text)
        .with_context(|| format!("{} is not JSON ({name}'s memories)", path.display()))?;
    let (memories, relations) = match file {
        Value::Array(memories) => (memories, 0),
        Value::Object(mut o) => match o.remove(list) {
            Some(Value::Array(memories)) => (
                memories,
                o.get("relations")
                    .and_then(Value::as_array)
                    .map_or(0, Vec::len),
            ),
            _ => anyhow::bail!(
                "{}: expected {name}'s memories, an object with a {list:?} list (or a list of memories)",
                path.display()
            ),
        },
        _ => anyhow::bail!("{}: expected a list of {name} memories", path.display()),
    };
    let lines: Vec<Result<Map<String, Value>, String>> = memories
        .into_iter()
        .map(|m| line_of(system, m, user, namespace))
        .collect();
    let (created, existing) = create_entities(store, &lines)?;
    let total = lines.len() as u64;
    let mut done = import_objects(store, lines.into_iter().map(|l| Ok(Some(l))), Some(total))?;
    done.entities += created;
    done.entities_existing += existing;
    Ok(ForeignImported {
        done,
        relations_skipped: relations,
    })
}

/// One of `system`'s memories as a line of amberdb's export (an item with its times), or why
/// not.
fn line_of(
    system: System,
    memory: Value,
    user: Option<&str>,
    namespace: Option<&str>,
) -> Result<Map<String, Value>, String> {
    let (name, text_field) = (system.name(), system.text_field());
    let Value::Object(mut m) = memory else {
        return Err("not a JSON object".into());
    };
    let id = match m.get("id") {
        Some(Value::String(id)) if !id.is_empty() => id.clone(),
        _ => return Err(format!("a {name} memory needs its \"id\" (a string)")),
    };
    let Some(Value::String(text)) = m.remove(text_field) else {
        return Err(format!("{name} memory {id}: no {text_field:?} text"));
    };
    let mut line = Map::new();
    line.insert("kind".into(), "item".into());
    line.insert("key".into(), Value::String(id));
    line.insert("content".into(), Value::String(text.clone()));
    // The text in the value too, as LangMem's tools write and read it (`{"content": ...}`).
    m.insert("content".into(), Value::String(text));
    for (theirs, ours) in system.mapped() {
        match m.remove(*theirs) {
            None | Some(Value::Null) => {}
            Some(v) => {
                line.insert((*ours).into(), v);
            }
        }
    }
    if let Some(user) = user {
        line.entry("user_id").or_insert_with(|| user.into());
    }
    if let Some(prefix) = namespace.filter(|p| !p.is_empty()) {
        let user = line
            .get("user_id")
            .and_then(Value::as_str)
            .unwrap_or(amberdb::DEFAULT_USER);
        let namespaced = format!("{prefix}.{user}");
        line.insert("user_id".into(), Value::String(namespaced));
    }
    line.insert("value".into(), Value::Object(m));
    Ok(line)
}

/// Creates the users, agents and sessions the lines name (a session belongs to the agent of
/// its memories when they agree on one). Returns how many were created and how many existed.
fn create_entities(
    store: &Store,
    lines: &[Result<Map<String, Value>, String>],
) -> anyhow::Result<(usize, usize)> {
    let field =
        |l: &Map<String, Value>, f: &str| l.get(f).and_then(Value::as_str).map(str::to_owned);
    let mut users = BTreeSet::new();
    let mut agents = BTreeSet::new();
    let mut sessions: std::collections::BTreeMap<(String, String), BTreeSet<Option<String>>> =
        std::collections::BTreeMap::new();
    for l in lines.iter().flatten() {
        let user = field(l, "user_id").unwrap_or_else(|| amberdb::DEFAULT_USER.into());
        let agent = field(l, "agent_id");
        if let Some(a) = &agent {
            agents.insert((user.clone(), a.clone()));
        }
        if let Some(s) = field(l, "session_id") {
            sessions.entry((user.clone(), s)).or_default().insert(agent);
        }
        users.insert(user);
    }
    let (mut created, mut existing) = (0, 0);
    let mut create = |kind, user: Option<&str>, id: &str, agent: Option<&str>| {
        match store.create_entity(kind, user, id, None, agent) {
            Ok(_) => created += 1,
            Err(EngineError::EntityExists { .. }) => existing += 1,
            // A bad id fails the memories that name it, each reported.
            Err(EngineError::Invalid { .. } | EngineError::LimitExceeded { .. }) => {}
            Err(e) => return Err(e),
        }
        Ok(())
    };
    for u in &users {
        create(EntityKind::User, None, u, None)?;
    }
    for (u, a) in &agents {
        create(EntityKind::Agent, Some(u), a, None)?;
    }
    for ((u, s), their_agents) in &sessions {
        let agent = match their_agents.iter().collect::<Vec<_>>().as_slice() {
            [Some(a)] => Some(a.as_str()),
            _ => None,
        };
        create(EntityKind::Session, Some(u), s, agent)?;
    }
    Ok((created, existing))
}
