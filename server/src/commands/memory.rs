//! Commands on one memory and a user's memories: store, get, update, delete, feedback, lineage and history, statistics, cleanup, compaction.

use super::common::*;

fn store_memory(ctx: &Ctx, session: &Session, args: &mut Args) -> Outcome {
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
    let mut reply = to_reply(&stored, message)?;
    // A duplicate is an outcome, never an error (`docs/semantics.md`, "Dedup at store time", step 1); over
    // MCP it reads as vector-memory-mcp's: `success: false`, "Memory already exists", the
    // existing `memory_id`, in a normal (non-isError) result agents act on.
    if stored.outcome == amberdb::Outcome::Duplicate
        && session.vmm_shapes
        && let Value::Object(o) = &mut reply
    {
        o.insert("success".into(), json!(false));
        o.insert("error".into(), json!("Memory already exists"));
    }
    Ok(reply)
}

/// What a store did, for people.
pub(super) fn stored_message(stored: &amberdb::Stored) -> String {
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
        amberdb::Outcome::Duplicate => format!(
            "Memory already exists with id {}; nothing was stored",
            stored.memory_id
        ),
    }
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

fn mend_preview(ctx: &Ctx, _session: &Session, args: &mut Args) -> Outcome {
    let user = args.opt_str("user_id")?;
    let preview = engine(ctx.store.mend_preview(user.as_deref()))?;
    let message = format!(
        "{} archived memories would come back; {} stay archived",
        preview.restore.len(),
        preview.kept
    );
    to_reply(&preview, message)
}

fn mend_apply(ctx: &Ctx, _session: &Session, args: &mut Args) -> Outcome {
    let user = args.opt_str("user_id")?;
    let preview = args.str("preview_id")?;
    let mended = engine(ctx.store.mend_apply(user.as_deref(), &preview))?;
    let message = format!("Brought back {} memories", mended.restored.len());
    to_reply(&mended, message)
}

fn mend_undo(ctx: &Ctx, _session: &Session, args: &mut Args) -> Outcome {
    let id = args.memory_id()?;
    let original = engine(ctx.store.mend_undo(id))?;
    let message = format!("Archived {id} again; memory {original} keeps its text");
    to_reply(
        &serde_json::json!({ "archived": id, "original": original }),
        message,
    )
}

/// The commands of this domain, in HELP's order.
pub(super) static TABLE: &[Command] = &[
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
            MERGE,
        ],
        run: Some(store_memory),
    },
    Command {
        name: "LIST_RECENT_MEMORIES",
        alias: Some("RECENT"),
        tool: true,
        summary: "The user's most recently created memories, newest first.",
        args: &[USER, opt("limit", Ty::Int, "default 10").within(1, PAGE)],
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
            MERGE,
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
            opt("days_old", Ty::Int, "1..=365; default 30").within(1, 365),
            opt("max_to_keep", Ty::Int, "100..=10,000; default 1000").within(100, 10_000),
        ],
        run: Some(clear_old),
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
        name: "MEND_PREVIEW",
        alias: None,
        tool: false,
        summary: "Archived memories that older dedup rules put away and this build's rules would keep live.",
        args: &[USER],
        run: Some(mend_preview),
    },
    Command {
        name: "MEND_APPLY",
        alias: None,
        tool: false,
        summary: "Brings back a mend preview's memories, in one frame.",
        args: &[USER, req("preview_id", Ty::Str, "from MEND_PREVIEW")],
        run: Some(mend_apply),
    },
    Command {
        name: "MEND_UNDO",
        alias: None,
        tool: false,
        summary: "Archives one memory mend brought back again.",
        args: &[MEMORY_ID],
        run: Some(mend_undo),
    },
];
