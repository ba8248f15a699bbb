//! What every command shares: the context and session it runs in, the command table's types,
//! the argument specs every domain uses, and the reply helpers.

pub(super) use crate::args::{Arg, Arguments, Fallback, arguments, opt, req};
pub(super) use crate::args::{Args, Code, Fail, Outcome, Ty, parsed};
pub(super) use crate::metrics::Metrics;
pub(super) use crate::reply::Json::{Array, Bool, Int, Num, Object, Str};
pub(super) use crate::reply::{Field, field};
pub(super) use amberdb::hooks::WriteHook;
pub(super) use amberdb::query::{Query, QueryData, StoreType};
pub(super) use amberdb::{
    Category, EngineError, EntityKind, Feedback, Fusion, HookOverrides, Kind, Mode, NewMemory,
    Probe, Role, SearchRequest, Store, StoreRequest, Strategy, UpdateRequest,
};
pub(super) use serde::Serialize;
pub(super) use serde_json::{Map, Value, json};
pub(super) use std::sync::Arc;

/// What every request can reach: the store and the server's counters.
pub struct Ctx {
    /// The store.
    pub store: Store,
    /// Request counters and latencies (STATS).
    pub metrics: Arc<Metrics>,
}

/// Per-connection state.
#[derive(Debug, Clone, Default)]
pub struct Session {
    /// Whether the connection may run commands (always, when the server has no token).
    pub authed: bool,
    /// The user a user-bound token confines the connection to.
    pub user: Option<String>,
    /// vector-memory-mcp's shapes (MCP): a search ranks by similarity unless told otherwise,
    /// and its similarities and distances are rounded to 3 decimals.
    pub vmm_shapes: bool,
    /// A read-only token's: commands of [`Class::Write`] are refused (`forbidden`).
    pub read_only: bool,
}

impl Session {
    /// A session that may do anything (no auth configured, the CLI).
    #[must_use]
    pub fn trusted() -> Session {
        Session {
            authed: true,
            user: None,
            vmm_shapes: false,
            read_only: false,
        }
    }

    /// A trusted session with vector-memory-mcp's shapes: MCP's.
    #[must_use]
    pub fn mcp() -> Session {
        Session {
            vmm_shapes: true,
            ..Session::trusted()
        }
    }
}

/// A page's most results (`amberdb::MAX_PAGE`), as an argument's range states it.
pub(super) const PAGE: u64 = amberdb::MAX_PAGE as u64;

/// The most results a page may skip (`amberdb::MAX_OFFSET`).
pub(super) const OFFSET: u64 = amberdb::MAX_OFFSET as u64;

pub(super) type Handler = fn(&Ctx, &Session, &mut Args) -> Outcome;

/// What a command touches, which decides how every transport runs it (`crate::dispatch`):
/// whether it needs authentication, waits for capacity, may run on a read-only token, or waits
/// for the keyword index. Declared with the command, so no transport matches names.
#[derive(Clone, Copy)]
pub enum Class {
    /// Answered before authentication and without the store (PING, HELP).
    Open,
    /// The connection's own (AUTH, QUIT): answered by the dispatch, never a tool.
    Connection,
    /// Counters and gauges (STATS): needs authentication, never waits for capacity.
    Status,
    /// Reads the store: a read-only token may run it (a read still counts an access).
    Read,
    /// A read that may read the keyword index: the function says whether this request does
    /// (the dispatch holds such a request outside any running slot while the index is being
    /// built after an open).
    Search(fn(&Map<String, Value>, &Session) -> bool),
    /// Changes the store, or writes a file on the server's host: refused to a read-only token.
    Write,
}

impl Class {
    /// Whether it is answered without the store, and so never waits for capacity.
    #[must_use]
    pub fn is_control(self) -> bool {
        matches!(self, Class::Open | Class::Connection | Class::Status)
    }

    /// Whether a connection must authenticate first (when the server has tokens).
    #[must_use]
    pub fn needs_auth(self) -> bool {
        !matches!(self, Class::Open | Class::Connection)
    }

    /// Whether it may change the store.
    #[must_use]
    pub fn writes(self) -> bool {
        matches!(self, Class::Write)
    }

    /// Whether this request reads the keyword index.
    #[must_use]
    pub fn reads_keyword_index(self, args: &Map<String, Value>, session: &Session) -> bool {
        match self {
            Class::Search(reads) => reads(args, session),
            _ => false,
        }
    }

    /// HELP's and the OpenAPI document's name for it.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Class::Open => "open",
            Class::Connection => "connection",
            Class::Status => "status",
            Class::Read | Class::Search(_) => "read",
            Class::Write => "write",
        }
    }
}

/// A command: its names, its arguments and its handler.
pub struct Command {
    /// The protocol name (`STORE_MEMORY`).
    pub name: &'static str,
    /// A short alias for people (`STORE`).
    pub alias: Option<&'static str>,
    /// Whether it is an MCP tool (under `name` in lowercase).
    pub tool: bool,
    /// What it touches (authentication, capacity, read-only tokens, the keyword index).
    pub class: Class,
    /// One line for HELP and the tool description.
    pub summary: &'static str,
    /// Its arguments.
    pub args: &'static [Arg],
    /// Its successful reply's top-level fields (`crate::reply`).
    pub reply: &'static [Field],
    /// The handler; `None` for AUTH and QUIT, which the connection itself answers.
    pub run: Option<Handler>,
}

/// Adds where a write was made to its reply: `partition` and `seq` (a read with `min_seq` of
/// it sees the write on any replica).
pub(super) fn mark_position(reply: &mut Value, store: &Store) {
    if let Value::Object(o) = reply {
        o.insert("partition".into(), json!(store.partition()));
        o.insert("seq".into(), json!(store.partition_log().position));
    }
}

/// What every write's reply adds (`crate::route`): the partition and log position it was made
/// at, for a read's `min_seq`.
pub const POSITION: [Field; 2] = [field("partition", Int), field("seq", Int)];

impl Command {
    /// Its successful reply's fields, a write's `partition` and `seq` included.
    #[must_use]
    pub fn reply_fields(&self) -> Vec<Field> {
        let mut fields = self.reply.to_vec();
        if self.class.writes() {
            fields.extend(POSITION);
        }
        fields
    }

    /// The MCP tool name.
    #[must_use]
    pub fn tool_name(&self) -> String {
        self.name.to_ascii_lowercase()
    }

    /// Every argument it takes: its own, and a write's `request_id`.
    pub fn arguments(&self) -> impl Iterator<Item = &'static Arg> + '_ {
        let request_id: &'static [Arg] = if self.class.writes() {
            std::slice::from_ref(&REQUEST_ID)
        } else {
            &[]
        };
        self.args.iter().chain(request_id)
    }

    /// JSON Schema of the arguments (MCP's `inputSchema`).
    #[must_use]
    pub fn input_schema(&self) -> Value {
        let mut props = Map::new();
        for a in self.arguments() {
            let mut s = a.ty.schema();
            if let Value::Object(o) = &mut s {
                // Models read the description more than the schema's keywords: it names the
                // default too.
                let description = match a.default {
                    Some(d) => format!("{}; default {}", a.help, d.to_json()),
                    None => a.help.to_owned(),
                };
                o.insert("description".into(), json!(description));
                if let Some((min, max)) = a.range {
                    o.insert("minimum".into(), json!(min));
                    o.insert("maximum".into(), json!(max));
                }
                if let Some(d) = a.default {
                    o.insert("default".into(), d.to_json());
                }
            }
            props.insert(a.name.into(), s);
        }
        let required: Vec<&str> = self
            .args
            .iter()
            .filter(|a| a.required)
            .map(|a| a.name)
            .collect();
        json!({"type": "object", "properties": props, "required": required, "additionalProperties": false})
    }

    /// HELP for this command.
    #[must_use]
    pub fn help(&self) -> Value {
        let args: Vec<Value> = self
            .arguments()
            .map(|a| {
                let mut h = json!({"name": a.name, "type": a.ty.schema()["type"], "required": a.required, "help": a.help});
                if let Value::Object(o) = &mut h {
                    if let Some((min, max)) = a.range {
                        o.insert("range".into(), json!([min, max]));
                    }
                    if let Some(d) = a.default {
                        o.insert("default".into(), d.to_json());
                    }
                }
                h
            })
            .collect();
        json!({"command": self.name, "alias": self.alias, "summary": self.summary, "class": self.class.as_str(), "arguments": args})
    }
}

/// A result shape as a reply object.
/// A library result as a reply: its fields, `success: true` and a `message` for people (the
/// seed's shape, which vector-memory-mcp clients read). The library's results are plain typed
/// values; this is the one place the wire shape is made.
pub(super) fn to_reply<T: Serialize>(v: &T, message: String) -> Outcome {
    let mut reply = serde_json::to_value(v)
        .map_err(|e| Fail::new(Code::Internal, format!("encoding the reply: {e}")))?;
    if let Value::Object(o) = &mut reply {
        o.insert("success".into(), json!(true));
        o.insert("message".into(), json!(message));
    }
    Ok(reply)
}

pub(super) fn forbidden(named: &str) -> Fail {
    let mut f = Fail::new(
        Code::Forbidden,
        format!("this connection's token is bound to another user than {named:?}"),
    );
    f.body.insert("field".into(), json!("user_id"));
    f
}

/// The write-hook overrides a store or update request may carry.
pub(super) fn write_overrides(
    skip: Vec<WriteHook>,
    force: Vec<WriteHook>,
    dedup_distance: Option<f32>,
    merge: Option<amberdb::Merge>,
) -> HookOverrides {
    HookOverrides {
        skip,
        force,
        dedup_distance,
        merge,
        ..HookOverrides::default()
    }
}

pub(super) fn engine<T>(r: amberdb::Result<T>) -> Result<T, Fail> {
    r.map_err(Fail::from)
}

/// The reply of a store (STORE_MEMORY, PUT_ITEM): the library's `StoreResult` and the
/// seed's `success` and `message`.
pub(super) const STORED: &[Field] = &[
    field("memory_id", Int),
    field("outcome", Str),
    field("content_preview", Str),
    field("category", Str),
    field("category_reason", Str),
    field("tags", Array),
    field("new_canonical_tags", Array),
    field("created_at", Str),
    field("valid_from", Str),
    field("supersedes", Array),
    field("dedup_candidates", Int),
    field("decisions", Array),
    field("success", Bool),
    field("message", Str),
    field("reason", Str).maybe(),
    field("replaced", Int).maybe(),
];

/// The argument every write command takes.
pub(super) const REQUEST_ID: Arg = opt(
    "request_id",
    Ty::Str,
    "a UUID version 7 made when the request was first sent: a retry with it within 10 minutes is answered with the first attempt's reply and never applied twice",
);

pub(super) const USER: Arg = opt("user_id", Ty::Str, "the user (tenant); default \"default\"");

pub(super) const MEMORY_ID: Arg =
    req("memory_id", Ty::Int, "a memory's id (≥ 1)").within(1, u64::MAX);

/// A search's reranking (`docs/search.md`, "Reranking"), shared by SEARCH and QUERY.
pub(super) const RERANK: Arg = opt(
    "rerank",
    Ty::Bool,
    "rescore the first candidates with the cross-encoder and order the page by its score; default off (slower: docs/search.md, Reranking)",
);

pub(super) const RERANK_CANDIDATES: Arg = opt(
    "rerank_candidates",
    Ty::Int,
    "how many first candidates the cross-encoder rescores (at least the page's end); default 20",
)
.within(1, amberdb::MAX_RERANK_CANDIDATES as u64);

/// The record filters that listing and search share.
pub(super) const KIND_FILTER: Arg = opt("kind", Ty::Str, "only memory, message, knowledge or item");
pub(super) const CATEGORY_FILTER: Arg = opt("category", Ty::Str, "only this category");
pub(super) const SESSION_FILTER: Arg = opt("session_id", Ty::Str, "only this session's records");

pub(super) const SKIP_HOOKS: Arg = opt(
    "skip_hooks",
    Ty::StrList,
    "write hooks off for this request: tags, category, exact_dedup, semantic_dedup",
);

pub(super) const FORCE_HOOKS: Arg = opt(
    "force_hooks",
    Ty::StrList,
    "write hooks on for this request",
);

pub(super) const DEDUP_DISTANCE: Arg = opt(
    "dedup_distance",
    Ty::Num,
    "store-time semantic dedup cosine distance, (0, 2); default the embedder's (MiniLM: 0.35)",
);

pub(super) const MERGE: Arg = opt(
    "merge",
    Ty::Str,
    "which near duplicates semantic dedup merges: sure (default) or paraphrases",
);

arguments! {
    /// A command without arguments.
    pub(super) struct NoArgs {}
}

arguments! {
    /// A command on one user's memories.
    pub(super) struct OneUser {
        user: Option<String> = USER,
    }
}

arguments! {
    /// A command on one memory.
    pub(super) struct OneMemory {
        id: amberdb::MemoryId = MEMORY_ID,
    }
}
