//! Users, agents and sessions: create, get, list, delete, and the messages and knowledge of a session.

use super::common::*;

/// The id field of each entity kind.
fn id_field(kind: EntityKind) -> &'static str {
    match kind {
        EntityKind::User => "user_id",
        EntityKind::Agent => "agent_id",
        EntityKind::Session => "session_id",
    }
}

/// `(owner, id)` of an entity request: a user is its own owner.
fn entity_ids(args: &mut Args, kind: EntityKind) -> Result<(Option<String>, String), Fail> {
    let owner = args.opt_str("user_id")?;
    match kind {
        EntityKind::User => {
            let id = owner.ok_or_else(|| Fail::invalid("user_id", "is required"))?;
            Ok((None, id))
        }
        _ => Ok((owner, args.str(id_field(kind))?)),
    }
}

fn create_entity(ctx: &Ctx, args: &mut Args, kind: EntityKind) -> Outcome {
    let (owner, id) = entity_ids(args, kind)?;
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

fn get_entity(ctx: &Ctx, args: &mut Args, kind: EntityKind) -> Outcome {
    let (owner, id) = entity_ids(args, kind)?;
    let e = engine(ctx.store.get_entity(kind, owner.as_deref(), &id))?;
    Ok(json!({"success": true, kind.as_str(): e}))
}

fn list_entities(ctx: &Ctx, args: &mut Args, kind: EntityKind) -> Outcome {
    let list = if kind == EntityKind::User {
        if args.has("user_id") {
            return Err(Fail::invalid("user_id", "LIST_USERS takes no user_id"));
        }
        // A user-bound connection's store is scoped: it lists its own user only.
        engine(ctx.store.list_entities(kind, None))?
    } else {
        let owner = args.opt_str("user_id")?;
        engine(ctx.store.list_entities(kind, owner.as_deref()))?
    };
    Ok(json!({"success": true, "count": list.len(), format!("{}s", kind.as_str()): list}))
}

fn delete_entity(ctx: &Ctx, args: &mut Args, kind: EntityKind) -> Outcome {
    let (owner, id) = entity_ids(args, kind)?;
    let deleted = engine(ctx.store.delete_entity(kind, owner.as_deref(), &id))?;
    let message = format!(
        "Deleted {kind} {id:?} and {} records",
        deleted.deleted_records
    );
    to_reply(&deleted, message)
}

macro_rules! entity_handlers {
    ($($name:ident => $f:ident($kind:ident)),* $(,)?) => {
        $(fn $name(ctx: &Ctx, _: &Session, args: &mut Args) -> Outcome {
            $f(ctx, args, EntityKind::$kind)
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
        // When the turn was said (its valid_from): an imported conversation keeps its times.
        let at = match m.remove("time") {
            None | Some(Value::Null) => None,
            Some(Value::String(t)) => Some(amberdb::Timestamp::parse_rfc3339(&t).ok_or_else(|| {
                Fail::invalid(
                    &field("time"),
                    format!("{t:?} is not an RFC 3339 time like 2026-11-22T09:30:00Z or a date like 2026-11-22"),
                )
            })?),
            Some(_) => return Err(Fail::invalid(&field("time"), "must be a string")),
        };
        if let Some(extra) = m.keys().next() {
            return Err(Fail::invalid(
                &field(extra),
                "unknown field (a message is {role, content, time})",
            ));
        }
        messages.push(amberdb::Turn { role, content, at });
    }
    let ids = engine(ctx.store.add_turns(user.as_deref(), &session_id, &messages))?;
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
            Ok(stored) => to_reply(&stored, super::memory::stored_message(&stored))
                .unwrap_or_else(|f| Value::Object(f.body)),
            Err(e) => Value::Object(Fail::from(e).body),
        })
        .collect();
    let stored = results.iter().filter(|r| r["success"] == true).count();
    Ok(json!({"success": true, "count": results.len(), "stored": stored, "results": results}))
}

/// The commands of this domain, in HELP's order.
pub(super) static TABLE: &[Command] = &[
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
            req(
                "messages",
                Ty::Messages,
                "[{role, content, time?}], at most 1,000; time: when the turn was said (RFC 3339 or a date), its valid_from",
            ),
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
];
