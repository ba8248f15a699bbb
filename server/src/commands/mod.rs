//! Every command of the line protocol, and every MCP tool: one table, one handler each.
//!
//! The server is a thin layer over the library: a handler takes its arguments out of the
//! request ([`Args`]), calls one library operation and returns its result shape as JSON.
//! `docs/protocol.md` is this table written out. MCP tools are the same handlers under their
//! lowercase names (vector-memory-mcp's names, `docs/protocol.md`).
//!
//! Tenancy: a connection authenticated with a user-bound token ([`Session::user`]) gets its
//! own user when a request names none, `forbidden` when it names another, and `not_found` for
//! a memory id of another user (whether such an id exists is not revealed).

use crate::args::{Args, Code, Fail, Outcome, Ty};
use crate::metrics::Metrics;
use amberdb::hooks::WriteHook;
use amberdb::query::{Query, QueryData, StoreType};
use amberdb::{
    Category, EngineError, EntityKind, Feedback, Fusion, HookOverrides, Kind, Mode, NewMemory,
    Probe, Role, SearchRequest, Store, StoreRequest, Strategy, UpdateRequest,
};
use serde::Serialize;
use serde_json::{Map, Value, json};
use std::sync::Arc;

mod admin;
mod entities;
mod items;
mod memory;
mod search;
mod tags;

pub use admin::unknown;

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
}

impl Session {
    /// A session that may do anything (no auth configured, the CLI).
    #[must_use]
    pub fn trusted() -> Session {
        Session {
            authed: true,
            user: None,
            vmm_shapes: false,
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

/// One argument of a command.
#[derive(Debug)]
pub struct Arg {
    /// Its name in the JSON object.
    pub name: &'static str,
    /// Its type.
    pub ty: Ty,
    /// Whether it must be given.
    pub required: bool,
    /// For an integer: the least and the most it may be (the parser refuses others before
    /// the command runs; HELP and the MCP schema show them).
    pub range: Option<(u64, u64)>,
    /// What it does, with its default.
    pub help: &'static str,
}

/// A page's most results (`amberdb::MAX_PAGE`), as an argument's range states it.
const PAGE: u64 = amberdb::MAX_PAGE as u64;
/// The most results a page may skip (`amberdb::MAX_OFFSET`).
const OFFSET: u64 = amberdb::MAX_OFFSET as u64;

impl Arg {
    /// With a range: `min..=max`.
    const fn within(self, min: u64, max: u64) -> Arg {
        Arg {
            range: Some((min, max)),
            ..self
        }
    }
}

const fn req(name: &'static str, ty: Ty, help: &'static str) -> Arg {
    Arg {
        name,
        ty,
        required: true,
        range: None,
        help,
    }
}

const fn opt(name: &'static str, ty: Ty, help: &'static str) -> Arg {
    Arg {
        name,
        ty,
        required: false,
        range: None,
        help,
    }
}

type Handler = fn(&Ctx, &Session, &mut Args) -> Outcome;

/// A command: its names, its arguments and its handler.
pub struct Command {
    /// The protocol name (`STORE_MEMORY`).
    pub name: &'static str,
    /// A short alias for people (`STORE`).
    pub alias: Option<&'static str>,
    /// Whether it is an MCP tool (under `name` in lowercase).
    pub tool: bool,
    /// One line for HELP and the tool description.
    pub summary: &'static str,
    /// Its arguments.
    pub args: &'static [Arg],
    /// The handler; `None` for AUTH and QUIT, which the connection itself answers.
    pub run: Option<Handler>,
}

impl Command {
    /// The MCP tool name.
    #[must_use]
    pub fn tool_name(&self) -> String {
        self.name.to_ascii_lowercase()
    }

    /// JSON Schema of the arguments (MCP's `inputSchema`).
    #[must_use]
    pub fn input_schema(&self) -> Value {
        let mut props = Map::new();
        for a in self.args {
            let mut s = a.ty.schema();
            if let Value::Object(o) = &mut s {
                o.insert("description".into(), json!(a.help));
                if let Some((min, max)) = a.range {
                    o.insert("minimum".into(), json!(min));
                    o.insert("maximum".into(), json!(max));
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
            .args
            .iter()
            .map(|a| {
                let mut h = json!({"name": a.name, "type": a.ty.schema()["type"], "required": a.required, "help": a.help});
                if let (Some((min, max)), Value::Object(o)) = (a.range, &mut h) {
                    o.insert("range".into(), json!([min, max]));
                }
                h
            })
            .collect();
        json!({"command": self.name, "alias": self.alias, "summary": self.summary, "arguments": args})
    }
}

/// Looks a command up by name or alias, case-insensitively.
#[must_use]
pub fn find(name: &str) -> Option<&'static Command> {
    COMMANDS.iter().copied().find(|c| {
        c.name.eq_ignore_ascii_case(name) || c.alias.is_some_and(|a| a.eq_ignore_ascii_case(name))
    })
}

/// Commands whose name is close to `name` (for `unknown_command` replies).
#[must_use]
pub fn close_to(name: &str) -> Vec<&'static str> {
    let upper = name.to_ascii_uppercase();
    let mut close: Vec<&str> = COMMANDS
        .iter()
        .filter(|c| {
            let n = c.name;
            (upper.len() >= 3 && (n.contains(&upper) || upper.contains(n)))
                || edit_distance(n, &upper) <= 2
                || c.alias.is_some_and(|a| edit_distance(a, &upper) <= 2)
        })
        .map(|c| c.name)
        .collect();
    close.truncate(5);
    close
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            cur.push(
                (prev[j] + usize::from(ca != *cb))
                    .min(prev[j + 1] + 1)
                    .min(cur[j] + 1),
            );
        }
        prev = cur;
    }
    prev[b.len()]
}

/// Runs a command's handler (not AUTH / QUIT) with its arguments.
///
/// # Errors
/// The command's failure; `unauthorized` before AUTH.
pub fn run(ctx: &Ctx, session: &Session, command: &Command, args: Map<String, Value>) -> Outcome {
    if !session.authed && !matches!(command.name, "PING" | "HELP") {
        return Err(Fail::new(
            Code::Unauthorized,
            "this server needs AUTH <token> first",
        ));
    }
    let Some(handler) = command.run else {
        return Err(Fail::new(
            Code::BadRequest,
            format!(
                "{} is answered by the connection, not run as a tool",
                command.name
            ),
        ));
    };
    // Every argument is checked (unknown names and JSON types) before the handler runs, and
    // each handler takes all of its arguments before its one library call: an error reply
    // means nothing changed (docs/protocol.md, "Errors").
    let mut args = Args::checked(args, command.args)?;
    // A user-bound connection runs every command on a store scoped to its user: the library
    // refuses another user's name and does not find another user's records.
    let scoped;
    let ctx = match &session.user {
        Some(user) => {
            scoped = Ctx {
                store: ctx.store.scoped(user)?,
                metrics: Arc::clone(&ctx.metrics),
            };
            &scoped
        }
        None => ctx,
    };
    handler(ctx, session, &mut args)
}

/// A result shape as a reply object.
/// A library result as a reply: its fields, `success: true` and a `message` for people (the
/// seed's shape, which vector-memory-mcp clients read). The library's results are plain typed
/// values; this is the one place the wire shape is made.
fn to_reply<T: Serialize>(v: &T, message: String) -> Outcome {
    let mut reply = serde_json::to_value(v)
        .map_err(|e| Fail::new(Code::Internal, format!("encoding the reply: {e}")))?;
    if let Value::Object(o) = &mut reply {
        o.insert("success".into(), json!(true));
        o.insert("message".into(), json!(message));
    }
    Ok(reply)
}

fn forbidden(named: &str) -> Fail {
    let mut f = Fail::new(
        Code::Forbidden,
        format!("this connection's token is bound to another user than {named:?}"),
    );
    f.body.insert("field".into(), json!("user_id"));
    f
}

fn write_hook(name: &str) -> Result<WriteHook, Fail> {
    Ok(match name {
        "tags" => WriteHook::Tags,
        "category" => WriteHook::Category,
        "exact_dedup" => WriteHook::ExactDedup,
        "semantic_dedup" => WriteHook::SemanticDedup,
        other => {
            return Err(Fail::invalid(
                "skip_hooks",
                format!("{other:?} is not one of tags, category, exact_dedup, semantic_dedup"),
            ));
        }
    })
}

/// The write-hook overrides a store or update request may carry.
fn write_overrides(args: &mut Args) -> Result<HookOverrides, Fail> {
    let mut o = HookOverrides::default();
    for h in args.opt_strs("skip_hooks")?.unwrap_or_default() {
        o.skip.push(write_hook(&h)?);
    }
    for h in args.opt_strs("force_hooks")?.unwrap_or_default() {
        o.force.push(write_hook(&h)?);
    }
    o.dedup_distance = args.opt_f32("dedup_distance")?;
    o.merge = args
        .opt_str("merge")?
        .map(|m| parsed("merge", amberdb::Merge::parse(&m)))
        .transpose()?;
    Ok(o)
}

fn engine<T>(r: amberdb::Result<T>) -> Result<T, Fail> {
    r.map_err(Fail::from)
}

fn parsed<T>(field: &str, r: amberdb::Result<T>) -> Result<T, Fail> {
    r.map_err(|e| match e {
        EngineError::Invalid { reason, .. } => Fail::invalid(field, reason),
        other => Fail::from(other),
    })
}

// ---- handlers ----------------------------------------------------------------------------

const USER: Arg = opt("user_id", Ty::Str, "the user (tenant); default \"default\"");
const MEMORY_ID: Arg = req("memory_id", Ty::Int, "a memory's id (≥ 1)").within(1, u64::MAX);
const SKIP_HOOKS: Arg = opt(
    "skip_hooks",
    Ty::StrList,
    "write hooks off for this request: tags, category, exact_dedup, semantic_dedup",
);
const FORCE_HOOKS: Arg = opt(
    "force_hooks",
    Ty::StrList,
    "write hooks on for this request",
);
const DEDUP_DISTANCE: Arg = opt(
    "dedup_distance",
    Ty::Num,
    "store-time semantic dedup cosine distance, (0, 2); default 0.35",
);

const MERGE: Arg = opt(
    "merge",
    Ty::Str,
    "which near duplicates semantic dedup merges: sure (default) or paraphrases",
);

/// Every command, in HELP's order: the server's own, then by domain.
pub static COMMANDS: std::sync::LazyLock<Vec<&'static Command>> = std::sync::LazyLock::new(|| {
    [
        admin::TABLE,
        memory::TABLE,
        search::TABLE,
        tags::TABLE,
        entities::TABLE,
        items::TABLE,
    ]
    .iter()
    .flat_map(|t| t.iter())
    .collect()
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_memfuse_envelope_follows_http_codes_and_names_the_field() {
        let missing = search::envelope(&Err(EngineError::EntityNotFound {
            field: "session_id",
            id: "s9".into(),
        }));
        assert_eq!(
            (&missing["status"], &missing["code"]),
            (&json!("error"), &json!(404))
        );
        assert_eq!(missing["errors"][0]["field"], "session_id");
        assert!(missing["data"].is_null());
        let bad = search::envelope(&Err(EngineError::Invalid {
            field: "top_k",
            reason: "too many".into(),
        }));
        assert_eq!(
            (&bad["code"], &bad["errors"][0]["field"]),
            (&json!(422), &json!("top_k"))
        );
        let ok = search::envelope(&Ok(QueryData {
            results: Vec::new(),
            total: 0,
        }));
        assert_eq!(
            (&ok["status"], &ok["code"]),
            (&json!("success"), &json!(200))
        );
        assert_eq!(ok["data"]["total"], 0);
        assert!(ok["errors"].is_null());
    }

    #[test]
    fn a_library_result_gains_success_and_a_message_in_the_server() {
        let reply = to_reply(&json!({"memory_id": 3}), "Memory stored".into()).unwrap();
        assert_eq!(
            reply,
            json!({"memory_id": 3, "success": true, "message": "Memory stored"})
        );
    }

    #[test]
    fn names_and_aliases_are_unique_and_found_case_insensitively() {
        let mut seen = std::collections::HashSet::new();
        for c in COMMANDS.iter() {
            assert!(seen.insert(c.name), "{}", c.name);
            if let Some(a) = c.alias {
                assert!(seen.insert(a), "{a}");
            }
            assert!(std::ptr::eq(
                find(&c.name.to_ascii_lowercase()).unwrap(),
                *c
            ));
            let mut names = std::collections::HashSet::new();
            for a in c.args {
                assert!(names.insert(a.name), "{} repeats {}", c.name, a.name);
            }
        }
        assert_eq!(find("search").unwrap().name, "SEARCH_MEMORIES");
        assert!(find("SERACH").is_none());
        assert!(close_to("SERACH").contains(&"SEARCH_MEMORIES"));
    }
}
