//! Every command of the line protocol, and every MCP tool: one table, one handler each.
//!
//! The server is a thin layer over the library: a handler takes its arguments out of the
//! request ([`Args`]), calls one library operation and returns its result shape as JSON.
//! `docs/protocol.md` is this table written out. MCP tools are the same handlers under their
//! lowercase names (vector-memory-mcp's names, `reference/peers.md` §1.2).
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
    Role, SearchRequest, Store, StoreRequest, Strategy, UpdateRequest,
};
use serde::Serialize;
use serde_json::{Map, Value, json};
use std::sync::Arc;

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
    /// What it does, with its default.
    pub help: &'static str,
}

const fn req(name: &'static str, ty: Ty, help: &'static str) -> Arg {
    Arg {
        name,
        ty,
        required: true,
        help,
    }
}

const fn opt(name: &'static str, ty: Ty, help: &'static str) -> Arg {
    Arg {
        name,
        ty,
        required: false,
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
            .map(|a| json!({"name": a.name, "type": a.ty.schema()["type"], "required": a.required, "help": a.help}))
            .collect();
        json!({"command": self.name, "alias": self.alias, "summary": self.summary, "arguments": args})
    }
}

/// Looks a command up by name or alias, case-insensitively.
#[must_use]
pub fn find(name: &str) -> Option<&'static Command> {
    COMMANDS.iter().find(|c| {
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

fn ping(_: &Ctx, _: &Session, _: &mut Args) -> Outcome {
    Ok(json!({"reply": "PONG"}))
}

fn help(_: &Ctx, _: &Session, args: &mut Args) -> Outcome {
    if let Some(name) = args.opt_str("command")? {
        let c = find(&name).ok_or_else(|| unknown(&name))?;
        return Ok(c.help());
    }
    let commands: Vec<Value> = COMMANDS
        .iter()
        .map(|c| json!({"command": c.name, "alias": c.alias, "summary": c.summary}))
        .collect();
    Ok(json!({
        "commands": commands,
        "usage": "COMMAND {\"arg\": value, ...}  one per line; HELP {\"command\": \"SEARCH\"} lists a command's arguments; docs/protocol.md has it all",
    }))
}

/// `unknown_command`, with the close names.
pub fn unknown(name: &str) -> Fail {
    let close = close_to(name);
    let mut f = Fail::new(
        Code::UnknownCommand,
        if close.is_empty() {
            format!("no command {name:?}; HELP lists them")
        } else {
            format!(
                "no command {name:?}; did you mean {}? HELP lists them",
                close.join(" or ")
            )
        },
    );
    f.body.insert("did_you_mean".into(), json!(close));
    f
}

fn stats(ctx: &Ctx, session: &Session, _: &mut Args) -> Outcome {
    if let Some(bound) = &session.user {
        return Err(forbidden(&format!(
            "every user (STATS; {bound}'s token is user-bound)"
        )));
    }
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
    let store = json!({
        "dir": ctx.store.dir().display().to_string(),
        "bytes_on_disk": ctx.store.bytes_on_disk(),
        "memories": s.memories,
        "users": s.users,
        "by_kind": by_kind,
        "by_category": by_category,
        "sealed_segments": s.sealed_segments,
        "growing_rows": s.growing_rows,
        "last_seq": s.last_seq,
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
        "memory_limit": s.memory_limit,
        "embedder": ctx.store.embedder_id(),
    });
    let mut reply = ctx.metrics.snapshot();
    reply.insert("store".into(), store);
    Ok(Value::Object(reply))
}

fn store_memory(ctx: &Ctx, _session: &Session, args: &mut Args) -> Outcome {
    let mut m = NewMemory::new(args.str("content")?);
    if let Some(c) = args.opt_str("category")? {
        m = m.category_text(c);
    }
    m.tags = args.opt_strs("tags")?.unwrap_or_default();
    m.user_id = args.opt_str("user_id")?;
    m.session_id = args.opt_str("session_id")?;
    m.agent_id = args.opt_str("agent_id")?;
    if let Some(k) = args.opt_str("kind")? {
        m.kind = parsed("kind", Kind::parse(&k))?;
    }
    if let Some(r) = args.opt_str("role")? {
        m.role = Some(parsed("role", Role::parse(&r))?);
    }
    m.valid_from = args.opt_time("valid_from")?;
    m.valid_to = args.opt_time("valid_to")?;
    let hooks = write_overrides(args)?;
    let stored = engine(ctx.store.store(StoreRequest {
        memory: m,
        vector: None,
        hooks,
    }))?;
    let message = stored_message(&stored);
    to_reply(&stored, message)
}

/// What a store did, for people.
fn stored_message(stored: &amberdb::Stored) -> String {
    match stored.outcome {
        amberdb::Outcome::Stored => "Memory stored".to_owned(),
        amberdb::Outcome::Merged => format!(
            "Merged with {} similar memories into {}",
            stored.supersedes.len().saturating_sub(1),
            stored.memory_id
        ),
        amberdb::Outcome::Superseded => format!(
            "Stored; it updates {} older memories",
            stored.supersedes.len()
        ),
        amberdb::Outcome::History => format!(
            "Stored as an earlier value of {}, which holds from {}",
            stored.memory_id,
            stored.valid_from.to_rfc3339()
        ),
    }
}

fn search_memories(ctx: &Ctx, session: &Session, args: &mut Args) -> Outcome {
    let mut q = SearchRequest::new(args.str("query")?);
    q.user_id = args.opt_str("user_id")?;
    if let Some(n) = args.opt_u64("limit")? {
        q.limit = usize::try_from(n).unwrap_or(usize::MAX);
    }
    if let Some(n) = args.opt_u64("offset")? {
        q.offset = usize::try_from(n).unwrap_or(usize::MAX);
    }
    if let Some(s) = args.opt_str("mode")? {
        q.mode = parsed("mode", Mode::parse(&s))?;
    }
    q.strategy = match args.opt_str("strategy")? {
        Some(s) => parsed("strategy", Strategy::parse(&s))?,
        // vector-memory-mcp ranks a vector search by similarity alone.
        None if session.vmm_shapes && q.mode == Mode::Vector => Strategy::Similarity,
        None => Strategy::default(),
    };
    q.threshold = args.opt_f32("threshold")?;
    let (vector, keyword) = (
        args.opt_f32("vector_weight")?,
        args.opt_f32("keyword_weight")?,
    );
    let rrf_k = args.opt_in("rrf_k", 1, 10_000)?;
    match args.opt_str("fusion")?.as_deref() {
        None | Some("weighted") => {
            if let Fusion::Weighted {
                vector: v,
                keyword: k,
            } = &mut q.fusion
            {
                *v = vector.unwrap_or(*v);
                *k = keyword.unwrap_or(*k);
            }
            if rrf_k.is_some() {
                return Err(Fail::invalid("rrf_k", "only with fusion \"rrf\""));
            }
        }
        Some("rrf") => {
            if vector.is_some() || keyword.is_some() {
                return Err(Fail::invalid(
                    "fusion",
                    "weights are for fusion \"weighted\"",
                ));
            }
            q.fusion = Fusion::Rrf {
                k: rrf_k.map_or(60, |k| u32::try_from(k).unwrap_or(60)),
            };
        }
        Some(other) => {
            return Err(Fail::invalid(
                "fusion",
                format!("{other:?} is not weighted or rrf"),
            ));
        }
    }
    q.category = args
        .opt_str("category")?
        .map(|c| parsed("category", Category::parse(c.trim())))
        .transpose()?;
    q.tags = args.opt_strs("tags")?.unwrap_or_default();
    if let Some(k) = args.opt_str("kind")? {
        q.kind = Some(parsed("kind", Kind::parse(&k))?);
    }
    q.session_id = args.opt_str("session_id")?;
    q.agent_id = args.opt_str("agent_id")?;
    q.created_after = args.opt_time("created_after")?;
    q.created_before = args.opt_time("created_before")?;
    q.as_of = args.opt_time("as_of")?;
    q.max_tokens = args
        .opt_u64("max_tokens")?
        .map(|n| usize::try_from(n).unwrap_or(usize::MAX));
    q.hooks.deduplicate = args.opt_bool("deduplicate")?;
    q.hooks.dedup_threshold = args.opt_f32("dedup_threshold")?;
    q.hooks.count_access = args.opt_bool("count_access")?;
    let hits = engine(ctx.store.search(&q))?;
    let message = if hits.results.is_empty() {
        "No matching memories found".to_owned()
    } else {
        format!(
            "Found {} of {} matching memories",
            hits.results.len(),
            hits.total
        )
    };
    let mut reply = to_reply(&hits, message)?;
    // The page and the query, echoed as vector-memory-mcp does.
    if let Value::Object(o) = &mut reply {
        o.insert("query".into(), json!(q.query));
        o.insert("offset".into(), json!(q.offset));
        o.insert("limit".into(), json!(q.limit));
        o.insert(
            "has_more".into(),
            json!(hits.results.len() == q.limit && q.offset + q.limit < hits.total),
        );
        if session.vmm_shapes
            && let Some(Value::Array(results)) = o.get_mut("results")
        {
            for r in results.iter_mut().filter_map(Value::as_object_mut) {
                for field in ["similarity", "distance"] {
                    if let Some(x) = r.get(field).and_then(Value::as_f64) {
                        r.insert(field.into(), json!((x * 1000.0).round() / 1000.0));
                    }
                }
            }
        }
    }
    Ok(reply)
}

fn list_recent(ctx: &Ctx, _session: &Session, args: &mut Args) -> Outcome {
    let user = args.opt_str("user_id")?;
    let limit = args.opt_u64("limit")?.unwrap_or(10);
    let memories = engine(ctx.store.list_recent(
        user.as_deref(),
        usize::try_from(limit).unwrap_or(usize::MAX),
    ))?;
    Ok(json!({
        "success": true,
        "count": memories.len(),
        "message": format!("{} recent memories", memories.len()),
        "memories": memories,
    }))
}

fn get_by_id(ctx: &Ctx, _session: &Session, args: &mut Args) -> Outcome {
    let id = args.memory_id()?;
    let m = engine(ctx.store.record_access(id))?;
    Ok(json!({"success": true, "memory": m}))
}

fn delete_by_id(ctx: &Ctx, _session: &Session, args: &mut Args) -> Outcome {
    let id = args.memory_id()?;
    engine(ctx.store.delete(id))?;
    Ok(json!({
        "success": true,
        "memory_id": id,
        "message": format!("Memory {id} deleted"),
    }))
}

fn update_memory(ctx: &Ctx, _session: &Session, args: &mut Args) -> Outcome {
    let req = UpdateRequest {
        memory_id: Some(args.memory_id()?),
        content: args.opt_str("content")?,
        category: args.opt_str("category")?,
        tags: args.opt_strs("tags")?,
        hooks: write_overrides(args)?,
    };
    let asked = req.memory_id;
    let updated = engine(ctx.store.update(req))?;
    let message = match asked {
        Some(id) if id != updated.memory_id => {
            format!("Memory {id} updated as {}", updated.memory_id)
        }
        _ => format!("Memory {} updated", updated.memory_id),
    };
    to_reply(&updated, message)
}

fn feedback(ctx: &Ctx, _session: &Session, args: &mut Args) -> Outcome {
    let id = args.memory_id()?;
    let f = match args.str("feedback")?.as_str() {
        "helpful" => Feedback::Helpful,
        "harmful" => Feedback::Harmful,
        other => {
            return Err(Fail::invalid(
                "feedback",
                format!("{other:?} is not helpful or harmful"),
            ));
        }
    };
    let result = engine(ctx.store.feedback(id, f))?;
    let message = format!("Feedback recorded; confidence {:.3}", result.confidence);
    to_reply(&result, message)
}

fn lineage(ctx: &Ctx, _session: &Session, args: &mut Args) -> Outcome {
    let id = args.memory_id()?;
    let lineage = engine(ctx.store.lineage(id))?;
    Ok(json!({"success": true, "memory_id": id, "count": lineage.len(), "lineage": lineage}))
}

fn history(ctx: &Ctx, _session: &Session, args: &mut Args) -> Outcome {
    let id = args.memory_id()?;
    let history = engine(ctx.store.history(id))?;
    let message = format!("{} versions", history.count);
    to_reply(&history, message)
}

fn memory_stats(ctx: &Ctx, _session: &Session, args: &mut Args) -> Outcome {
    let user = args.opt_str("user_id")?;
    let stats = engine(ctx.store.user_stats(user.as_deref()))?;
    let message = format!("{} memories", stats.total_memories);
    to_reply(&stats, message)
}

fn clear_old(ctx: &Ctx, _session: &Session, args: &mut Args) -> Outcome {
    let user = args.opt_str("user_id")?;
    let days = args.opt_u64("days_old")?.unwrap_or(30);
    let keep = args.opt_u64("max_to_keep")?.unwrap_or(1000);
    let cleared = engine(ctx.store.clear_old_memories(
        user.as_deref(),
        days,
        usize::try_from(keep).unwrap_or(usize::MAX),
    ))?;
    let message = if cleared.deleted_count == 0 {
        "No memories need to be deleted".to_owned()
    } else {
        format!("Deleted {} old memories", cleared.deleted_count)
    };
    to_reply(&cleared, message)
}

fn unique_tags(ctx: &Ctx, _session: &Session, args: &mut Args) -> Outcome {
    let user = args.opt_str("user_id")?;
    let tags = engine(ctx.store.unique_tags(user.as_deref()))?;
    Ok(json!({"success": true, "count": tags.len(), "tags": tags}))
}

fn canonical_tags(ctx: &Ctx, _session: &Session, args: &mut Args) -> Outcome {
    let user = args.opt_str("user_id")?;
    let tags = engine(ctx.store.canonical_tags(user.as_deref()))?;
    Ok(json!({"success": true, "count": tags.len(), "tags": tags}))
}

fn tag_frequencies(ctx: &Ctx, _session: &Session, args: &mut Args) -> Outcome {
    let user = args.opt_str("user_id")?;
    let freq = ctx
        .store
        .tag_frequencies(user.as_deref().unwrap_or(amberdb::record::DEFAULT_USER));
    let map: Map<String, Value> = freq.into_iter().map(|(t, n)| (t, json!(n))).collect();
    Ok(json!({"success": true, "count": map.len(), "frequencies": map}))
}

fn tag_weights(ctx: &Ctx, _session: &Session, args: &mut Args) -> Outcome {
    let user = args.opt_str("user_id")?;
    let weights = engine(ctx.store.tag_weights(user.as_deref()))?;
    let map: Map<String, Value> = weights.into_iter().map(|(t, w)| (t, json!(w))).collect();
    Ok(json!({"success": true, "count": map.len(), "weights": map}))
}

fn tag_preview(ctx: &Ctx, _session: &Session, args: &mut Args) -> Outcome {
    let user = args.opt_str("user_id")?;
    let threshold = args.opt_f32("threshold")?.unwrap_or(0.90);
    let max = args.opt_u64("max_changes")?.unwrap_or(200);
    let preview = engine(ctx.store.tag_normalize_preview(
        user.as_deref(),
        threshold,
        usize::try_from(max).unwrap_or(usize::MAX),
    ))?;
    let message = format!(
        "{} tags would be rewritten on {} memories",
        preview.planned_updates, preview.affected_memories
    );
    to_reply(&preview, message)
}

fn tag_apply(ctx: &Ctx, _session: &Session, args: &mut Args) -> Outcome {
    let user = args.opt_str("user_id")?;
    let preview = args.str("preview_id")?;
    let snapshot = args.str("snapshot_id")?;
    let threshold = args.opt_f32("threshold")?.unwrap_or(0.90);
    let max = args.opt_u64("max_changes")?.unwrap_or(200);
    let applied = engine(ctx.store.tag_normalize_apply(
        user.as_deref(),
        &preview,
        &snapshot,
        threshold,
        usize::try_from(max).unwrap_or(usize::MAX),
    ))?;
    let message = if applied.applied_count == 0 {
        "Nothing to change".to_owned()
    } else {
        format!("Rewrote the tags of {} memories", applied.applied_count)
    };
    to_reply(&applied, message)
}

fn snapshot_create(ctx: &Ctx, _session: &Session, args: &mut Args) -> Outcome {
    let user = args.opt_str("user_id")?;
    let description = args.opt_str("description")?.unwrap_or_default();
    let created = engine(ctx.store.snapshot_create(user.as_deref(), &description))?;
    let message = format!(
        "Snapshot {} of {} memories",
        created.snapshot_id, created.memory_count
    );
    to_reply(&created, message)
}

fn snapshot_restore(ctx: &Ctx, _session: &Session, args: &mut Args) -> Outcome {
    let user = args.opt_str("user_id")?;
    let id = args.str("snapshot_id")?;
    let restored = engine(ctx.store.snapshot_restore(user.as_deref(), &id))?;
    let message = format!(
        "Restored the tags of {} memories ({} changed)",
        restored.restored_count, restored.changed_count
    );
    to_reply(&restored, message)
}

fn compact_preview(ctx: &Ctx, _session: &Session, args: &mut Args) -> Outcome {
    let user = args.opt_str("user_id")?;
    let distance = args.opt_f32("distance")?;
    let preview = engine(ctx.store.compact_preview(user.as_deref(), distance))?;
    let message = format!(
        "{} groups would merge {} memories away",
        preview.groups.len(),
        preview.memories_before - preview.memories_after
    );
    to_reply(&preview, message)
}

fn compact_apply(ctx: &Ctx, _session: &Session, args: &mut Args) -> Outcome {
    let user = args.opt_str("user_id")?;
    let distance = args.opt_f32("distance")?;
    let preview = args.str("preview_id")?;
    let compacted = engine(ctx.store.compact_apply(user.as_deref(), distance, &preview))?;
    let message = format!("Merged {} groups", compacted.merged.len());
    to_reply(&compacted, message)
}

fn compact_undo(ctx: &Ctx, _session: &Session, args: &mut Args) -> Outcome {
    let id = args.memory_id()?;
    let unmerged = engine(ctx.store.compact_undo(id))?;
    let message = format!("Restored {} memories", unmerged.restored.len());
    to_reply(&unmerged, message)
}

/// The id field of each entity kind.
fn id_field(kind: EntityKind) -> &'static str {
    match kind {
        EntityKind::User => "user_id",
        EntityKind::Agent => "agent_id",
        EntityKind::Session => "session_id",
    }
}

/// `(owner, id)` of an entity request: a user is its own owner.
fn entity_ids(
    _session: &Session,
    args: &mut Args,
    kind: EntityKind,
) -> Result<(Option<String>, String), Fail> {
    let owner = args.opt_str("user_id")?;
    match kind {
        EntityKind::User => {
            let id = owner.ok_or_else(|| Fail::invalid("user_id", "is required"))?;
            Ok((None, id))
        }
        _ => Ok((owner, args.str(id_field(kind))?)),
    }
}

fn create_entity(ctx: &Ctx, session: &Session, args: &mut Args, kind: EntityKind) -> Outcome {
    let (owner, id) = entity_ids(session, args, kind)?;
    let name = args.opt_str("name")?;
    let agent = if kind == EntityKind::Session {
        args.opt_str("agent_id")?
    } else {
        None
    };
    let e = engine(ctx.store.create_entity(
        kind,
        owner.as_deref(),
        &id,
        name.as_deref(),
        agent.as_deref(),
    ))?;
    Ok(json!({"success": true, kind.as_str(): e}))
}

fn get_entity(ctx: &Ctx, session: &Session, args: &mut Args, kind: EntityKind) -> Outcome {
    let (owner, id) = entity_ids(session, args, kind)?;
    let e = engine(ctx.store.get_entity(kind, owner.as_deref(), &id))?;
    Ok(json!({"success": true, kind.as_str(): e}))
}

fn list_entities(ctx: &Ctx, session: &Session, args: &mut Args, kind: EntityKind) -> Outcome {
    let list = if kind == EntityKind::User {
        if args.has("user_id") {
            return Err(Fail::invalid("user_id", "LIST_USERS takes no user_id"));
        }
        let all = engine(ctx.store.list_entities(kind, None))?;
        match &session.user {
            Some(bound) => all.into_iter().filter(|e| e.id == *bound).collect(),
            None => all,
        }
    } else {
        let owner = args.opt_str("user_id")?;
        engine(ctx.store.list_entities(kind, owner.as_deref()))?
    };
    Ok(json!({"success": true, "count": list.len(), format!("{}s", kind.as_str()): list}))
}

fn delete_entity(ctx: &Ctx, session: &Session, args: &mut Args, kind: EntityKind) -> Outcome {
    let (owner, id) = entity_ids(session, args, kind)?;
    let deleted = engine(ctx.store.delete_entity(kind, owner.as_deref(), &id))?;
    let message = format!(
        "Deleted {kind} {id:?} and {} records",
        deleted.deleted_records
    );
    to_reply(&deleted, message)
}

macro_rules! entity_handlers {
    ($($name:ident => $f:ident($kind:ident)),* $(,)?) => {
        $(fn $name(ctx: &Ctx, session: &Session, args: &mut Args) -> Outcome {
            $f(ctx, session, args, EntityKind::$kind)
        })*
    };
}

entity_handlers!(
    create_user => create_entity(User),
    create_agent => create_entity(Agent),
    create_session => create_entity(Session),
    get_user => get_entity(User),
    get_agent => get_entity(Agent),
    get_session => get_entity(Session),
    list_users => list_entities(User),
    list_agents => list_entities(Agent),
    list_sessions => list_entities(Session),
    delete_user => delete_entity(User),
    delete_agent => delete_entity(Agent),
    delete_session => delete_entity(Session),
);

fn add_messages(ctx: &Ctx, _session: &Session, args: &mut Args) -> Outcome {
    let user = args.opt_str("user_id")?;
    let session_id = args.str("session_id")?;
    let raw = args
        .opt_objects("messages")?
        .ok_or_else(|| Fail::invalid("messages", "is required"))?;
    let mut messages = Vec::with_capacity(raw.len());
    for (i, mut m) in raw.into_iter().enumerate() {
        let field = |name: &str| format!("messages[{i}].{name}");
        let role = match m.remove("role") {
            Some(Value::String(r)) => parsed(&field("role"), Role::parse(&r))?,
            _ => {
                return Err(Fail::invalid(
                    &field("role"),
                    "must be user, assistant or system",
                ));
            }
        };
        let content = match m.remove("content") {
            Some(Value::String(c)) => c,
            _ => return Err(Fail::invalid(&field("content"), "must be a string")),
        };
        if let Some(extra) = m.keys().next() {
            return Err(Fail::invalid(
                &field(extra),
                "unknown field (a message is {role, content})",
            ));
        }
        messages.push((role, content));
    }
    let ids = engine(
        ctx.store
            .add_messages(user.as_deref(), &session_id, &messages),
    )?;
    Ok(json!({"success": true, "count": ids.len(), "memory_ids": ids}))
}

fn add_knowledge(ctx: &Ctx, _session: &Session, args: &mut Args) -> Outcome {
    let user = args.opt_str("user_id")?;
    let items = args
        .opt_strs("items")?
        .ok_or_else(|| Fail::invalid("items", "is required"))?;
    let results = engine(ctx.store.add_knowledge(user.as_deref(), &items))?;
    let results: Vec<Value> = results
        .into_iter()
        .map(|r| match r {
            Ok(stored) => {
                to_reply(&stored, stored_message(&stored)).unwrap_or_else(|f| Value::Object(f.body))
            }
            Err(e) => Value::Object(Fail::from(e).body),
        })
        .collect();
    let stored = results.iter().filter(|r| r["success"] == true).count();
    Ok(json!({"success": true, "count": results.len(), "stored": stored, "results": results}))
}

/// MemFuse's response envelope: `{status, code, data, message, errors}`. Errors name their
/// field; the code follows HTTP (200, 404 for an unknown user / session / agent, 422 for a
/// bad parameter, 503 when embeddings are unavailable, 500 otherwise).
fn envelope(result: &amberdb::Result<QueryData>) -> Value {
    match result {
        Ok(data) => json!({
            "status": "success",
            "code": 200,
            "data": data,
            "message": format!("Found {} results", data.total),
            "errors": null,
        }),
        Err(e) => {
            let (code, field) = match e {
                EngineError::EntityNotFound { field, .. } => (404, *field),
                EngineError::Invalid { field, .. } => (422, *field),
                EngineError::LimitExceeded { what, .. } => (422, *what),
                EngineError::Embed(_) => (503, "query"),
                _ if e.kind() == amberdb::ErrorKind::Caller => (400, "request"),
                _ => (500, "request"),
            };
            json!({
                "status": "error",
                "code": code,
                "data": null,
                "message": e.to_string(),
                "errors": [{"field": field, "message": e.to_string()}],
            })
        }
    }
}

fn query(ctx: &Ctx, _session: &Session, args: &mut Args) -> Outcome {
    let user = args
        .opt_str("user_id")?
        .unwrap_or_else(|| amberdb::record::DEFAULT_USER.to_owned());
    let mut q = Query::new(args.str("query")?);
    q.session_id = args.opt_str("session_id")?;
    q.agent_id = args.opt_str("agent_id")?;
    if let Some(k) = args.opt_in("top_k", 1, 50)? {
        q.top_k = k;
    }
    q.max_tokens = args
        .opt_u64("max_tokens")?
        .map(|n| usize::try_from(n).unwrap_or(usize::MAX));
    if let Some(t) = args.opt_str("store_type")? {
        q.store_type = parsed("store_type", StoreType::parse(&t))?;
    }
    if let Some(b) = args.opt_bool("include_messages")? {
        q.include_messages = b;
    }
    if let Some(b) = args.opt_bool("include_knowledge")? {
        q.include_knowledge = b;
    }
    let result = ctx.store.query(&user, &q);
    // MemFuse's envelope, with its HTTP-style number in `status_code`: on this protocol
    // `code` is always the error code of `docs/protocol.md`.
    let mut body = envelope(&result);
    let status = body.as_object_mut().and_then(|env| env.remove("code"));
    match result {
        Ok(_) => {
            if let (Some(env), Some(status)) = (body.as_object_mut(), status) {
                env.insert("status_code".into(), status);
            }
            Ok(body)
        }
        Err(e) => {
            let mut f = Fail::from(e);
            if let Value::Object(env) = body {
                f.body.extend(env);
            }
            if let Some(status) = status {
                f.body.insert("status_code".into(), status);
            }
            Err(f)
        }
    }
}

// ---- the table -----------------------------------------------------------------------------

const USER: Arg = opt("user_id", Ty::Str, "the user (tenant); default \"default\"");
const MEMORY_ID: Arg = req("memory_id", Ty::Int, "a memory's id (≥ 1)");
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

/// Every command, in HELP's order.
pub static COMMANDS: &[Command] = &[
    Command {
        name: "PING",
        alias: None,
        tool: false,
        summary: "Replies PONG.",
        args: &[],
        run: Some(ping),
    },
    Command {
        name: "HELP",
        alias: None,
        tool: false,
        summary: "Lists the commands, or one command's arguments.",
        args: &[opt("command", Ty::Str, "a command name")],
        run: Some(help),
    },
    Command {
        name: "AUTH",
        alias: None,
        tool: false,
        summary: "Authenticates the connection: AUTH <token> or AUTH {\"token\": ...}.",
        args: &[req(
            "token",
            Ty::Str,
            "the shared secret, or a user-bound token",
        )],
        run: None,
    },
    Command {
        name: "QUIT",
        alias: None,
        tool: false,
        summary: "Closes the connection after the reply.",
        args: &[],
        run: None,
    },
    Command {
        name: "STATS",
        alias: None,
        tool: false,
        summary: "Server counters (requests, errors, latency quantiles, connections) and the store's size.",
        args: &[],
        run: Some(stats),
    },
    Command {
        name: "STORE_MEMORY",
        alias: Some("STORE"),
        tool: true,
        summary: "Stores a memory through the hooks (tags, category, exact and semantic dedup).",
        args: &[
            req("content", Ty::Str, "the text, at most 10,000 characters"),
            opt(
                "category",
                Ty::Str,
                "one of the nine categories, or text the category hook maps; default other",
            ),
            opt(
                "tags",
                Ty::StrList,
                "at most 10 tags of at most 100 characters",
            ),
            USER,
            opt(
                "session_id",
                Ty::Str,
                "a session of the user (create it first)",
            ),
            opt(
                "agent_id",
                Ty::Str,
                "an agent of the user (create it first)",
            ),
            opt("kind", Ty::Str, "memory (default), message or knowledge"),
            opt(
                "role",
                Ty::Str,
                "a message's role: user, assistant or system",
            ),
            opt(
                "valid_from",
                Ty::Str,
                "from when the statement holds (RFC 3339 or a date); default now",
            ),
            opt(
                "valid_to",
                Ty::Str,
                "until when it holds (RFC 3339 or a date); default open",
            ),
            SKIP_HOOKS,
            FORCE_HOOKS,
            DEDUP_DISTANCE,
        ],
        run: Some(store_memory),
    },
    Command {
        name: "SEARCH_MEMORIES",
        alias: Some("SEARCH"),
        tool: true,
        summary: "Searches a user's memories by meaning, keywords or text (docs/search.md).",
        args: &[
            req(
                "query",
                Ty::Str,
                "what to look for, at most 1,000 characters",
            ),
            USER,
            opt("limit", Ty::Int, "results per page, 1..=50; default 10"),
            opt("offset", Ty::Int, "results to skip, 0..=10,000; default 0"),
            opt(
                "strategy",
                Ty::Str,
                "composite (default), similarity, recency, frequency, importance",
            ),
            opt("mode", Ty::Str, "vector (default), keyword, hybrid, text"),
            opt(
                "threshold",
                Ty::Num,
                "least cosine of a vector candidate; default none (the limit best)",
            ),
            opt(
                "fusion",
                Ty::Str,
                "hybrid's fusion: weighted (default) or rrf",
            ),
            opt(
                "vector_weight",
                Ty::Num,
                "weighted fusion's vector weight; default 0.7",
            ),
            opt(
                "keyword_weight",
                Ty::Num,
                "weighted fusion's keyword weight; default 0.3",
            ),
            opt("rrf_k", Ty::Int, "rrf's rank offset; default 60"),
            opt("category", Ty::Str, "only this category"),
            opt("tags", Ty::StrList, "only memories with any of these tags"),
            opt("kind", Ty::Str, "only memory, message or knowledge"),
            opt("session_id", Ty::Str, "only this session's records"),
            opt("agent_id", Ty::Str, "only this agent's records"),
            opt(
                "created_after",
                Ty::Str,
                "only created at or after (RFC 3339 or a date)",
            ),
            opt(
                "created_before",
                Ty::Str,
                "only created before (RFC 3339 or a date)",
            ),
            opt(
                "as_of",
                Ty::Str,
                "what was valid at this moment (RFC 3339 or a date); default now",
            ),
            opt(
                "max_tokens",
                Ty::Int,
                "a prompt's token budget: the best results that fit, counted by the model's tokenizer",
            ),
            opt(
                "deduplicate",
                Ty::Bool,
                "fold near-identical results; default on",
            ),
            opt(
                "dedup_threshold",
                Ty::Num,
                "load-time cluster distance; default 0.40",
            ),
            opt(
                "count_access",
                Ty::Bool,
                "count the returned memories as accessed; default on",
            ),
        ],
        run: Some(search_memories),
    },
    Command {
        name: "LIST_RECENT_MEMORIES",
        alias: Some("RECENT"),
        tool: true,
        summary: "The user's most recently created memories, newest first.",
        args: &[USER, opt("limit", Ty::Int, "1..=50; default 10")],
        run: Some(list_recent),
    },
    Command {
        name: "GET_BY_MEMORY_ID",
        alias: Some("GET"),
        tool: true,
        summary: "One memory by id (counted as an access).",
        args: &[MEMORY_ID],
        run: Some(get_by_id),
    },
    Command {
        name: "DELETE_BY_MEMORY_ID",
        alias: Some("DELETE"),
        tool: true,
        summary: "Deletes a memory for good.",
        args: &[MEMORY_ID],
        run: Some(delete_by_id),
    },
    Command {
        name: "UPDATE_MEMORY",
        alias: Some("UPDATE"),
        tool: true,
        summary: "Changes a memory's content, category or tags (new content gets a new id that supersedes the old).",
        args: &[
            MEMORY_ID,
            opt("content", Ty::Str, "new text"),
            opt("category", Ty::Str, "new category"),
            opt("tags", Ty::StrList, "new tags"),
            SKIP_HOOKS,
            FORCE_HOOKS,
            DEDUP_DISTANCE,
        ],
        run: Some(update_memory),
    },
    Command {
        name: "FEEDBACK",
        alias: None,
        tool: true,
        summary: "Marks a memory helpful or harmful (moves its confidence).",
        args: &[MEMORY_ID, req("feedback", Ty::Str, "helpful or harmful")],
        run: Some(feedback),
    },
    Command {
        name: "LINEAGE",
        alias: None,
        tool: true,
        summary: "The archived records a memory merged, superseded or replaced.",
        args: &[MEMORY_ID],
        run: Some(lineage),
    },
    Command {
        name: "HISTORY",
        alias: None,
        tool: true,
        summary: "A fact's versions with their validity, newest first (replaced values included).",
        args: &[MEMORY_ID],
        run: Some(history),
    },
    Command {
        name: "GET_MEMORY_STATS",
        alias: None,
        tool: true,
        summary: "The user's counts, categories, size and health (vector-memory-mcp's stats).",
        args: &[USER],
        run: Some(memory_stats),
    },
    Command {
        name: "CLEAR_OLD_MEMORIES",
        alias: None,
        tool: true,
        summary: "Deletes the least-accessed memories older than days_old, keeping max_to_keep.",
        args: &[
            USER,
            opt("days_old", Ty::Int, "≥ 1; default 30"),
            opt("max_to_keep", Ty::Int, "≥ 100; default 1000"),
        ],
        run: Some(clear_old),
    },
    Command {
        name: "GET_UNIQUE_TAGS",
        alias: None,
        tool: true,
        summary: "The tags on the user's memories, sorted.",
        args: &[USER],
        run: Some(unique_tags),
    },
    Command {
        name: "GET_CANONICAL_TAGS",
        alias: None,
        tool: true,
        summary: "The user's canonical tags, sorted.",
        args: &[USER],
        run: Some(canonical_tags),
    },
    Command {
        name: "GET_TAG_FREQUENCIES",
        alias: None,
        tool: true,
        summary: "{tag: memories using it}.",
        args: &[USER],
        run: Some(tag_frequencies),
    },
    Command {
        name: "GET_TAG_WEIGHTS",
        alias: None,
        tool: true,
        summary: "{tag: 1/ln(1+frequency)}: rare tags weigh more.",
        args: &[USER],
        run: Some(tag_weights),
    },
    Command {
        name: "TAG_NORMALIZE_PREVIEW",
        alias: None,
        tool: true,
        summary: "Which tags would map to canonical ones (nothing changes).",
        args: &[
            USER,
            opt("threshold", Ty::Num, "least similarity; default 0.90"),
            opt("max_changes", Ty::Int, "most mappings; default 200"),
        ],
        run: Some(tag_preview),
    },
    Command {
        name: "TAG_NORMALIZE_APPLY",
        alias: None,
        tool: true,
        summary: "Applies a preview's mapping (needs a snapshot to undo it), in one commit.",
        args: &[
            USER,
            req("preview_id", Ty::Str, "from TAG_NORMALIZE_PREVIEW"),
            req("snapshot_id", Ty::Str, "from SNAPSHOT_CREATE"),
            opt("threshold", Ty::Num, "as in the preview; default 0.90"),
            opt("max_changes", Ty::Int, "as in the preview; default 200"),
        ],
        run: Some(tag_apply),
    },
    Command {
        name: "SNAPSHOT_CREATE",
        alias: None,
        tool: true,
        summary: "Saves every memory's tags.",
        args: &[USER, opt("description", Ty::Str, "for people")],
        run: Some(snapshot_create),
    },
    Command {
        name: "SNAPSHOT_RESTORE",
        alias: None,
        tool: true,
        summary: "Puts every memory's tags back as a snapshot saved them.",
        args: &[USER, req("snapshot_id", Ty::Str, "from SNAPSHOT_CREATE")],
        run: Some(snapshot_restore),
    },
    Command {
        name: "COMPACT_PREVIEW",
        alias: None,
        tool: true,
        summary: "Groups of near-duplicate memories that compaction would merge.",
        args: &[
            USER,
            opt("distance", Ty::Num, "cosine distance; default 0.20"),
        ],
        run: Some(compact_preview),
    },
    Command {
        name: "COMPACT_APPLY",
        alias: None,
        tool: true,
        summary: "Merges a preview's groups (each merge keeps its sources in lineage).",
        args: &[
            USER,
            opt("distance", Ty::Num, "as in the preview"),
            req("preview_id", Ty::Str, "from COMPACT_PREVIEW"),
        ],
        run: Some(compact_apply),
    },
    Command {
        name: "COMPACT_UNDO",
        alias: None,
        tool: true,
        summary: "Undoes one merge: its sources come back.",
        args: &[MEMORY_ID],
        run: Some(compact_undo),
    },
    Command {
        name: "CREATE_USER",
        alias: None,
        tool: true,
        summary: "Creates a user.",
        args: &[
            req("user_id", Ty::Str, "the new user's id"),
            opt("name", Ty::Str, "for people"),
        ],
        run: Some(create_user),
    },
    Command {
        name: "CREATE_AGENT",
        alias: None,
        tool: true,
        summary: "Creates an agent of a user.",
        args: &[
            USER,
            req("agent_id", Ty::Str, "the new agent's id"),
            opt("name", Ty::Str, "for people"),
        ],
        run: Some(create_agent),
    },
    Command {
        name: "CREATE_SESSION",
        alias: None,
        tool: true,
        summary: "Creates a session of a user (optionally with one of its agents).",
        args: &[
            USER,
            req("session_id", Ty::Str, "the new session's id"),
            opt("name", Ty::Str, "for people"),
            opt("agent_id", Ty::Str, "the session's agent"),
        ],
        run: Some(create_session),
    },
    Command {
        name: "GET_USER",
        alias: None,
        tool: true,
        summary: "A user.",
        args: &[req("user_id", Ty::Str, "the user")],
        run: Some(get_user),
    },
    Command {
        name: "GET_AGENT",
        alias: None,
        tool: true,
        summary: "An agent of a user.",
        args: &[USER, req("agent_id", Ty::Str, "the agent")],
        run: Some(get_agent),
    },
    Command {
        name: "GET_SESSION",
        alias: None,
        tool: true,
        summary: "A session of a user.",
        args: &[USER, req("session_id", Ty::Str, "the session")],
        run: Some(get_session),
    },
    Command {
        name: "LIST_USERS",
        alias: None,
        tool: true,
        summary: "Every user.",
        args: &[],
        run: Some(list_users),
    },
    Command {
        name: "LIST_AGENTS",
        alias: None,
        tool: true,
        summary: "A user's agents.",
        args: &[USER],
        run: Some(list_agents),
    },
    Command {
        name: "LIST_SESSIONS",
        alias: None,
        tool: true,
        summary: "A user's sessions.",
        args: &[USER],
        run: Some(list_sessions),
    },
    Command {
        name: "DELETE_USER",
        alias: None,
        tool: true,
        summary: "Deletes a user and everything of it, in one commit.",
        args: &[req("user_id", Ty::Str, "the user")],
        run: Some(delete_user),
    },
    Command {
        name: "DELETE_AGENT",
        alias: None,
        tool: true,
        summary: "Deletes an agent, its sessions and their records, in one commit.",
        args: &[USER, req("agent_id", Ty::Str, "the agent")],
        run: Some(delete_agent),
    },
    Command {
        name: "DELETE_SESSION",
        alias: None,
        tool: true,
        summary: "Deletes a session and its messages, in one commit.",
        args: &[USER, req("session_id", Ty::Str, "the session")],
        run: Some(delete_session),
    },
    Command {
        name: "ADD_MESSAGES",
        alias: None,
        tool: true,
        summary: "Adds chat turns to a session (never deduplicated).",
        args: &[
            USER,
            req("session_id", Ty::Str, "the session"),
            req("messages", Ty::Messages, "[{role, content}], at most 1,000"),
        ],
        run: Some(add_messages),
    },
    Command {
        name: "ADD_KNOWLEDGE",
        alias: None,
        tool: true,
        summary: "Adds user-level facts (through the hooks: a fact stored twice is one).",
        args: &[USER, req("items", Ty::StrList, "the facts, at most 1,000")],
        run: Some(add_knowledge),
    },
    Command {
        name: "QUERY",
        alias: None,
        tool: true,
        summary: "MemFuse's query across a user's sessions, in MemFuse's envelope.",
        args: &[
            USER,
            req("query", Ty::Str, "what to look for"),
            opt(
                "session_id",
                Ty::Str,
                "marks results in_session / cross_session (does not narrow)",
            ),
            opt(
                "agent_id",
                Ty::Str,
                "only this agent's records (and knowledge)",
            ),
            opt("top_k", Ty::Int, "1..=50; default 5"),
            opt(
                "max_tokens",
                Ty::Int,
                "a prompt's token budget: the best results that fit",
            ),
            opt(
                "store_type",
                Ty::Str,
                "vector (default), keyword, hybrid, graph",
            ),
            opt("include_messages", Ty::Bool, "default true"),
            opt("include_knowledge", Ty::Bool, "default true"),
        ],
        run: Some(query),
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_memfuse_envelope_follows_http_codes_and_names_the_field() {
        let missing = envelope(&Err(EngineError::EntityNotFound {
            field: "session_id",
            id: "s9".into(),
        }));
        assert_eq!(
            (&missing["status"], &missing["code"]),
            (&json!("error"), &json!(404))
        );
        assert_eq!(missing["errors"][0]["field"], "session_id");
        assert!(missing["data"].is_null());
        let bad = envelope(&Err(EngineError::Invalid {
            field: "top_k",
            reason: "too many".into(),
        }));
        assert_eq!(
            (&bad["code"], &bad["errors"][0]["field"]),
            (&json!(422), &json!("top_k"))
        );
        let ok = envelope(&Ok(QueryData {
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
        for c in COMMANDS {
            assert!(seen.insert(c.name), "{}", c.name);
            if let Some(a) = c.alias {
                assert!(seen.insert(a), "{a}");
            }
            assert!(std::ptr::eq(find(&c.name.to_ascii_lowercase()).unwrap(), c));
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
