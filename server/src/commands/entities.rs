//! Users, agents and sessions: create, get, list, delete, and the messages and knowledge of a session.

use super::common::*;

arguments! {
    /// CREATE_USER.
    struct CreateUser {
        id: String = req("user_id", Ty::Str, "the new user's id"),
        name: Option<String> = NAME,
    }
}

arguments! {
    /// CREATE_AGENT.
    struct CreateAgent {
        user: Option<String> = USER,
        id: String = req("agent_id", Ty::Str, "the new agent's id"),
        name: Option<String> = NAME,
    }
}

arguments! {
    /// CREATE_SESSION.
    struct CreateSession {
        user: Option<String> = USER,
        id: String = req("session_id", Ty::Str, "the new session's id"),
        name: Option<String> = NAME,
        agent: Option<String> = opt("agent_id", Ty::Str, "the session's agent"),
    }
}

arguments! {
    /// GET_USER, DELETE_USER.
    struct OneUserEntity {
        id: String = req("user_id", Ty::Str, "the user"),
    }
}

arguments! {
    /// GET_AGENT, DELETE_AGENT.
    struct OneAgent {
        user: Option<String> = USER,
        id: String = req("agent_id", Ty::Str, "the agent"),
    }
}

arguments! {
    /// GET_SESSION, DELETE_SESSION.
    struct OneSession {
        user: Option<String> = USER,
        id: String = req("session_id", Ty::Str, "the session"),
    }
}

const NAME: Arg = opt("name", Ty::Str, "for people");

/// An entity named by a request: its kind, its owner (none for a user) and its id.
struct Named {
    kind: EntityKind,
    owner: Option<String>,
    id: String,
}

impl From<OneUserEntity> for Named {
    fn from(a: OneUserEntity) -> Named {
        Named {
            kind: EntityKind::User,
            owner: None,
            id: a.id,
        }
    }
}

impl From<OneAgent> for Named {
    fn from(a: OneAgent) -> Named {
        Named {
            kind: EntityKind::Agent,
            owner: a.user,
            id: a.id,
        }
    }
}

impl From<OneSession> for Named {
    fn from(a: OneSession) -> Named {
        Named {
            kind: EntityKind::Session,
            owner: a.user,
            id: a.id,
        }
    }
}

fn create(ctx: &Ctx, e: Named, name: Option<String>, agent: Option<String>) -> Outcome {
    let created = engine(ctx.store.create_entity(
        e.kind,
        e.owner.as_deref(),
        &e.id,
        name.as_deref(),
        agent.as_deref(),
    ))?;
    Ok(json!({"success": true, e.kind.as_str(): created}))
}

fn create_user(ctx: &Ctx, _: &Session, a: CreateUser) -> Outcome {
    let e = Named {
        kind: EntityKind::User,
        owner: None,
        id: a.id,
    };
    create(ctx, e, a.name, None)
}

fn create_agent(ctx: &Ctx, _: &Session, a: CreateAgent) -> Outcome {
    let e = Named {
        kind: EntityKind::Agent,
        owner: a.user,
        id: a.id,
    };
    create(ctx, e, a.name, None)
}

fn create_session(ctx: &Ctx, _: &Session, a: CreateSession) -> Outcome {
    let e = Named {
        kind: EntityKind::Session,
        owner: a.user,
        id: a.id,
    };
    create(ctx, e, a.name, a.agent)
}

fn get_entity(ctx: &Ctx, _: &Session, e: Named) -> Outcome {
    let found = engine(ctx.store.get_entity(e.kind, e.owner.as_deref(), &e.id))?;
    Ok(json!({"success": true, e.kind.as_str(): found}))
}

fn delete_entity(ctx: &Ctx, _: &Session, e: Named) -> Outcome {
    let deleted = engine(ctx.store.delete_entity(e.kind, e.owner.as_deref(), &e.id))?;
    let message = format!(
        "Deleted {} {:?} and {} records",
        e.kind, e.id, deleted.deleted_records
    );
    to_reply(&deleted, message)
}

fn list_entities(ctx: &Ctx, kind: EntityKind, owner: Option<String>) -> Outcome {
    // A user-bound connection's store is scoped: LIST_USERS lists its own user only.
    let list = engine(ctx.store.list_entities(kind, owner.as_deref()))?;
    Ok(json!({"success": true, "count": list.len(), format!("{}s", kind.as_str()): list}))
}

arguments! {
    /// ADD_MESSAGES.
    struct AddMessages {
        user: Option<String> = USER,
        session: String = req("session_id", Ty::Str, "the session"),
        messages: Vec<Map<String, Value>> = req(
            "messages",
            Ty::Messages,
            "[{role, content, time?, id?}], at most 1,000; time: when the turn was said (RFC 3339 or a date), its valid_from; id: the caller's id for the turn (a LangChain or OpenAI message id)",
        ),
        skip_held: bool = opt(
            "skip_held",
            Ty::Bool,
            "true (default): a turn the session holds is not stored again (its id is held, or the turns begin with the whole session and it is at a held position with the same role and content); false stores every turn",
        )
        .or(Fallback::Bool(true)),
    }
}

fn add_messages(ctx: &Ctx, _session: &Session, a: AddMessages) -> Outcome {
    let mut messages = Vec::with_capacity(a.messages.len());
    for (i, mut m) in a.messages.into_iter().enumerate() {
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
        let source_id = match m.remove("id") {
            None | Some(Value::Null) => None,
            Some(Value::String(id)) => Some(id),
            Some(_) => return Err(Fail::invalid(&field("id"), "must be a string")),
        };
        if let Some(extra) = m.keys().next() {
            return Err(Fail::invalid(
                &field(extra),
                "unknown field (a message is {role, content, time, id})",
            ));
        }
        messages.push(amberdb::Turn {
            role,
            content,
            at,
            source_id,
        });
    }
    let held = if a.skip_held {
        amberdb::HeldTurns::Skip
    } else {
        amberdb::HeldTurns::Store
    };
    let added = engine(
        ctx.store
            .add_turns_with(a.user.as_deref(), &a.session, &messages, held),
    )?;
    Ok(json!({
        "success": true,
        "count": added.memory_ids.len(),
        "memory_ids": added.memory_ids,
        "skipped": added.skipped,
    }))
}

arguments! {
    /// ADD_KNOWLEDGE.
    struct AddKnowledge {
        user: Option<String> = USER,
        items: Vec<String> = req("items", Ty::StrList, "the facts, at most 1,000"),
    }
}

fn add_knowledge(ctx: &Ctx, _session: &Session, a: AddKnowledge) -> Outcome {
    let results = engine(ctx.store.add_knowledge(a.user.as_deref(), &a.items))?;
    let results: Vec<Value> = results
        .into_iter()
        .map(|r| match r {
            Ok(stored) => to_reply(&stored, super::memory::stored_message(&stored))
                .unwrap_or_else(|f| Value::Object(f.body)),
            Err(e) => Value::Object(Fail::from(e).body),
        })
        .collect();
    let stored = results
        .iter()
        .filter(|r| r["success"] == true && r["outcome"] != "duplicate")
        .count();
    Ok(json!({"success": true, "count": results.len(), "stored": stored, "results": results}))
}

/// The reply of the three deletes: the entity's kind and id, and the records it took along.
const DELETED: &[Field] = &[
    field("kind", Str),
    field("id", Str),
    field("deleted_records", Int),
    field("success", Bool),
    field("message", Str),
];

/// The commands of this domain, in HELP's order.
pub(super) static TABLE: &[Command] = &[
    Command {
        name: "CREATE_USER",
        alias: None,
        tool: true,
        class: Class::Write,
        summary: "Creates a user.",
        args: CreateUser::ARGS,
        reply: &[field("success", Bool), field("user", Object)],
        run: Some(|c, s, a| create_user(c, s, CreateUser::parse(a)?)),
    },
    Command {
        name: "CREATE_AGENT",
        alias: None,
        tool: true,
        class: Class::Write,
        summary: "Creates an agent of a user.",
        args: CreateAgent::ARGS,
        reply: &[field("success", Bool), field("agent", Object)],
        run: Some(|c, s, a| create_agent(c, s, CreateAgent::parse(a)?)),
    },
    Command {
        name: "CREATE_SESSION",
        alias: None,
        tool: true,
        class: Class::Write,
        summary: "Creates a session of a user (optionally with one of its agents).",
        args: CreateSession::ARGS,
        reply: &[field("success", Bool), field("session", Object)],
        run: Some(|c, s, a| create_session(c, s, CreateSession::parse(a)?)),
    },
    Command {
        name: "GET_USER",
        alias: None,
        tool: true,
        class: Class::Read,
        summary: "A user.",
        args: OneUserEntity::ARGS,
        reply: &[field("success", Bool), field("user", Object)],
        run: Some(|c, s, a| get_entity(c, s, OneUserEntity::parse(a)?.into())),
    },
    Command {
        name: "GET_AGENT",
        alias: None,
        tool: true,
        class: Class::Read,
        summary: "An agent of a user.",
        args: OneAgent::ARGS,
        reply: &[field("success", Bool), field("agent", Object)],
        run: Some(|c, s, a| get_entity(c, s, OneAgent::parse(a)?.into())),
    },
    Command {
        name: "GET_SESSION",
        alias: None,
        tool: true,
        class: Class::Read,
        summary: "A session of a user.",
        args: OneSession::ARGS,
        reply: &[field("success", Bool), field("session", Object)],
        run: Some(|c, s, a| get_entity(c, s, OneSession::parse(a)?.into())),
    },
    Command {
        name: "LIST_USERS",
        alias: None,
        tool: true,
        class: Class::Read,
        summary: "Every user.",
        args: NoArgs::ARGS,
        reply: &[
            field("success", Bool),
            field("count", Int),
            field("users", Array),
        ],
        run: Some(|c, _, a| {
            NoArgs::parse(a)?;
            list_entities(c, EntityKind::User, None)
        }),
    },
    Command {
        name: "LIST_AGENTS",
        alias: None,
        tool: true,
        class: Class::Read,
        summary: "A user's agents.",
        args: OneUser::ARGS,
        reply: &[
            field("success", Bool),
            field("count", Int),
            field("agents", Array),
        ],
        run: Some(|c, _, a| list_entities(c, EntityKind::Agent, OneUser::parse(a)?.user)),
    },
    Command {
        name: "LIST_SESSIONS",
        alias: None,
        tool: true,
        class: Class::Read,
        summary: "A user's sessions.",
        args: OneUser::ARGS,
        reply: &[
            field("success", Bool),
            field("count", Int),
            field("sessions", Array),
        ],
        run: Some(|c, _, a| list_entities(c, EntityKind::Session, OneUser::parse(a)?.user)),
    },
    Command {
        name: "DELETE_USER",
        alias: None,
        tool: true,
        class: Class::Write,
        summary: "Deletes a user and everything of it, in one commit.",
        args: OneUserEntity::ARGS,
        reply: DELETED,
        run: Some(|c, s, a| delete_entity(c, s, OneUserEntity::parse(a)?.into())),
    },
    Command {
        name: "DELETE_AGENT",
        alias: None,
        tool: true,
        class: Class::Write,
        summary: "Deletes an agent, its sessions and their records, in one commit.",
        args: OneAgent::ARGS,
        reply: DELETED,
        run: Some(|c, s, a| delete_entity(c, s, OneAgent::parse(a)?.into())),
    },
    Command {
        name: "DELETE_SESSION",
        alias: None,
        tool: true,
        class: Class::Write,
        summary: "Deletes a session and its messages, in one commit.",
        args: OneSession::ARGS,
        reply: DELETED,
        run: Some(|c, s, a| delete_entity(c, s, OneSession::parse(a)?.into())),
    },
    Command {
        name: "ADD_MESSAGES",
        alias: None,
        tool: true,
        class: Class::Write,
        summary: "Adds chat turns to a session (a turn the session holds is not stored again).",
        args: AddMessages::ARGS,
        reply: &[
            field("success", Bool),
            field("count", Int),
            field("memory_ids", Array),
            field("skipped", Array),
        ],
        run: Some(|c, s, a| add_messages(c, s, AddMessages::parse(a)?)),
    },
    Command {
        name: "ADD_KNOWLEDGE",
        alias: None,
        tool: true,
        class: Class::Write,
        summary: "Adds user-level facts (through the hooks: a fact stored twice is one).",
        args: AddKnowledge::ARGS,
        reply: &[
            field("success", Bool),
            field("count", Int),
            field("stored", Int),
            field("results", Array),
        ],
        run: Some(|c, s, a| add_knowledge(c, s, AddKnowledge::parse(a)?)),
    },
];
