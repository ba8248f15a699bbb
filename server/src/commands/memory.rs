//! Commands on one memory and a user's memories: store, get, update, delete, feedback, lineage and history, statistics, cleanup, compaction.

use super::common::*;

arguments! {
    /// STORE_MEMORY.
    struct StoreMemory {
        content: String = req("content", Ty::Str, "the text, at most 10,000 characters"),
        category: Option<String> = opt(
            "category",
            Ty::Str,
            "one of the nine categories, or text the category hook maps; other when left out and the hook finds none",
        ),
        tags: Vec<String> = opt("tags", Ty::StrList, "at most 10 tags of at most 100 characters"),
        user: Option<String> = USER,
        session: Option<String> = opt(
            "session_id",
            Ty::Str,
            "a session of the user (create it first)",
        ),
        agent: Option<String> = opt("agent_id", Ty::Str, "an agent of the user (create it first)"),
        kind: Option<Kind> = opt("kind", Ty::Str, "memory (default), message or knowledge"),
        role: Option<Role> = opt("role", Ty::Str, "a message's role: user, assistant or system"),
        valid_from: Option<amberdb::Timestamp> = opt(
            "valid_from",
            Ty::Str,
            "from when the statement holds (RFC 3339 or a date); default now",
        ),
        valid_to: Option<amberdb::Timestamp> = opt(
            "valid_to",
            Ty::Str,
            "until when it holds (RFC 3339 or a date); default open",
        ),
        skip_hooks: Vec<WriteHook> = SKIP_HOOKS,
        force_hooks: Vec<WriteHook> = FORCE_HOOKS,
        dedup_distance: Option<f32> = DEDUP_DISTANCE,
        merge: Option<amberdb::Merge> = MERGE,
    }
}

fn store_memory(ctx: &Ctx, session: &Session, a: StoreMemory) -> Outcome {
    let mut m = NewMemory::new(a.content);
    if let Some(c) = a.category {
        m = m.category_text(c);
    }
    m.tags = a.tags;
    m.user_id = a.user;
    m.session_id = a.session;
    m.agent_id = a.agent;
    if let Some(k) = a.kind {
        m.kind = k;
    }
    m.role = a.role;
    m.valid_from = a.valid_from;
    m.valid_to = a.valid_to;
    let hooks = write_overrides(a.skip_hooks, a.force_hooks, a.dedup_distance, a.merge);
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

arguments! {
    /// LIST_RECENT_MEMORIES.
    struct ListRecent {
        user: Option<String> = USER,
        limit: usize = opt("limit", Ty::Int, "a page's most memories")
            .within(1, PAGE)
            .or(Fallback::Int(10)),
        offset: usize = opt("offset", Ty::Int, "memories to skip, newest first (paging: offset += limit while has_more)")
            .within(0, u32::MAX as u64)
            .or(Fallback::Int(0)),
        kind: Option<Kind> = KIND_FILTER,
        category: Option<Category> = CATEGORY_FILTER,
        tags: Vec<String> = opt("tags", Ty::StrList, "only records with any of these tags"),
        session_id: Option<String> = SESSION_FILTER,
        valid: Option<bool> = opt(
            "valid",
            Ty::Bool,
            "true: only statements that hold now; false: only those whose validity ended or has not begun",
        ),
        archived: Option<amberdb::Shelf> = opt(
            "archived",
            Ty::Str,
            "live (default), archived (what merges, updates and compactions archived) or all",
        ),
    }
}

fn list_recent(ctx: &Ctx, _session: &Session, a: ListRecent) -> Outcome {
    let filter = amberdb::ListFilter {
        kind: a.kind,
        category: a.category,
        tags: a.tags,
        session_id: a.session_id,
        valid_now: a.valid,
        shelf: a.archived.unwrap_or_default(),
    };
    let (memories, total) =
        engine(
            ctx.store
                .list_page(a.user.as_deref(), &filter, a.offset, a.limit),
        )?;
    Ok(json!({
        "success": true,
        "total": total,
        "offset": a.offset,
        "has_more": a.offset + memories.len() < total,
        "count": memories.len(),
        "message": format!("{} recent memories", memories.len()),
        "memories": memories,
    }))
}

fn get_by_id(ctx: &Ctx, _session: &Session, a: OneMemory) -> Outcome {
    let m = engine(ctx.store.record_access(a.id))?;
    Ok(json!({"success": true, "memory": m}))
}

fn delete_by_id(ctx: &Ctx, _session: &Session, a: OneMemory) -> Outcome {
    let id = a.id;
    engine(ctx.store.delete(id))?;
    Ok(json!({
        "success": true,
        "memory_id": id,
        "message": format!("Memory {id} deleted"),
    }))
}

arguments! {
    /// UPDATE_MEMORY.
    struct UpdateMemory {
        id: amberdb::MemoryId = MEMORY_ID,
        content: Option<String> = opt("content", Ty::Str, "new text"),
        category: Option<String> = opt("category", Ty::Str, "new category"),
        tags: Option<Vec<String>> = opt("tags", Ty::StrList, "new tags"),
        skip_hooks: Vec<WriteHook> = SKIP_HOOKS,
        force_hooks: Vec<WriteHook> = FORCE_HOOKS,
        dedup_distance: Option<f32> = DEDUP_DISTANCE,
        merge: Option<amberdb::Merge> = MERGE,
    }
}

fn update_memory(ctx: &Ctx, _session: &Session, a: UpdateMemory) -> Outcome {
    let asked = a.id;
    let req = UpdateRequest {
        memory_id: Some(asked),
        content: a.content,
        category: a.category,
        tags: a.tags,
        hooks: write_overrides(a.skip_hooks, a.force_hooks, a.dedup_distance, a.merge),
    };
    let updated = engine(ctx.store.update(req))?;
    let message = if asked == updated.memory_id {
        format!("Memory {} updated", updated.memory_id)
    } else {
        format!("Memory {asked} updated as {}", updated.memory_id)
    };
    to_reply(&updated, message)
}

arguments! {
    /// FEEDBACK.
    struct GiveFeedback {
        id: amberdb::MemoryId = MEMORY_ID,
        feedback: String = req("feedback", Ty::Str, "helpful or harmful"),
    }
}

fn feedback(ctx: &Ctx, _session: &Session, a: GiveFeedback) -> Outcome {
    let f = match a.feedback.as_str() {
        "helpful" => Feedback::Helpful,
        "harmful" => Feedback::Harmful,
        other => {
            return Err(Fail::invalid(
                "feedback",
                format!("{other:?} is not helpful or harmful"),
            ));
        }
    };
    let result = engine(ctx.store.feedback(a.id, f))?;
    let message = format!("Feedback recorded; confidence {:.3}", result.confidence);
    to_reply(&result, message)
}

fn lineage(ctx: &Ctx, _session: &Session, a: OneMemory) -> Outcome {
    let lineage = engine(ctx.store.lineage(a.id))?;
    Ok(json!({"success": true, "memory_id": a.id, "count": lineage.len(), "lineage": lineage}))
}

fn history(ctx: &Ctx, _session: &Session, a: OneMemory) -> Outcome {
    let history = engine(ctx.store.history(a.id))?;
    let message = format!("{} versions", history.count);
    to_reply(&history, message)
}

fn memory_stats(ctx: &Ctx, _session: &Session, a: OneUser) -> Outcome {
    let stats = engine(ctx.store.user_stats(a.user.as_deref()))?;
    let message = format!("{} memories", stats.total_memories);
    to_reply(&stats, message)
}

arguments! {
    /// CLEAR_OLD_MEMORIES.
    struct ClearOld {
        user: Option<String> = USER,
        days_old: u64 = opt("days_old", Ty::Int, "memories older than this many days")
            .within(1, 365)
            .or(Fallback::Int(30)),
        max_to_keep: usize = opt("max_to_keep", Ty::Int, "the most memories kept")
            .within(100, 10_000)
            .or(Fallback::Int(1000)),
    }
}

fn clear_old(ctx: &Ctx, _session: &Session, a: ClearOld) -> Outcome {
    let cleared = engine(ctx.store.clear_old_memories(
        a.user.as_deref(),
        a.days_old,
        a.max_to_keep,
    ))?;
    let message = if cleared.deleted_count == 0 {
        "No memories need to be deleted".to_owned()
    } else {
        format!("Deleted {} old memories", cleared.deleted_count)
    };
    to_reply(&cleared, message)
}

arguments! {
    /// COMPACT_PREVIEW.
    struct CompactPreview {
        user: Option<String> = USER,
        distance: Option<f32> = opt("distance", Ty::Num, "cosine distance; default 0.20"),
    }
}

fn compact_preview(ctx: &Ctx, _session: &Session, a: CompactPreview) -> Outcome {
    let preview = engine(ctx.store.compact_preview(a.user.as_deref(), a.distance))?;
    let message = format!(
        "{} groups would merge {} memories away",
        preview.groups.len(),
        preview.memories_before - preview.memories_after
    );
    to_reply(&preview, message)
}

arguments! {
    /// COMPACT_APPLY.
    struct CompactApply {
        user: Option<String> = USER,
        distance: Option<f32> = opt("distance", Ty::Num, "as in the preview"),
        preview: String = req("preview_id", Ty::Str, "from COMPACT_PREVIEW"),
    }
}

fn compact_apply(ctx: &Ctx, _session: &Session, a: CompactApply) -> Outcome {
    let compacted = engine(
        ctx.store
            .compact_apply(a.user.as_deref(), a.distance, &a.preview),
    )?;
    let message = format!("Merged {} groups", compacted.merged.len());
    to_reply(&compacted, message)
}

fn compact_undo(ctx: &Ctx, _session: &Session, a: OneMemory) -> Outcome {
    let unmerged = engine(ctx.store.compact_undo(a.id))?;
    let message = format!("Restored {} memories", unmerged.restored.len());
    to_reply(&unmerged, message)
}

fn mend_preview(ctx: &Ctx, _session: &Session, a: OneUser) -> Outcome {
    let preview = engine(ctx.store.mend_preview(a.user.as_deref()))?;
    let message = format!(
        "{} archived memories would come back; {} stay archived",
        preview.restore.len(),
        preview.kept
    );
    to_reply(&preview, message)
}

arguments! {
    /// MEND_APPLY.
    struct MendApply {
        user: Option<String> = USER,
        preview: String = req("preview_id", Ty::Str, "from MEND_PREVIEW"),
    }
}

fn mend_apply(ctx: &Ctx, _session: &Session, a: MendApply) -> Outcome {
    let mended = engine(ctx.store.mend_apply(a.user.as_deref(), &a.preview))?;
    let message = format!("Brought back {} memories", mended.restored.len());
    to_reply(&mended, message)
}

fn mend_undo(ctx: &Ctx, _session: &Session, a: OneMemory) -> Outcome {
    let id = a.id;
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
        class: Class::Write,
        summary: "Stores a memory through the hooks (tags, category, exact and semantic dedup).",
        args: StoreMemory::ARGS,
        reply: STORED,
        run: Some(|c, s, a| store_memory(c, s, StoreMemory::parse(a)?)),
    },
    Command {
        name: "LIST_RECENT_MEMORIES",
        alias: Some("RECENT"),
        tool: true,
        class: Class::Read,
        summary: "The user's most recently created records, newest first, by kind, category, tags, session, validity or archive.",
        args: ListRecent::ARGS,
        reply: &[
            field("success", Bool),
            field("total", Int),
            field("offset", Int),
            field("has_more", Bool),
            field("count", Int),
            field("message", Str),
            field("memories", Array),
        ],
        run: Some(|c, s, a| list_recent(c, s, ListRecent::parse(a)?)),
    },
    Command {
        name: "GET_BY_MEMORY_ID",
        alias: Some("GET"),
        tool: true,
        class: Class::Read,
        summary: "One memory by id (counted as an access).",
        args: OneMemory::ARGS,
        reply: &[field("success", Bool), field("memory", Object)],
        run: Some(|c, s, a| get_by_id(c, s, OneMemory::parse(a)?)),
    },
    Command {
        name: "DELETE_BY_MEMORY_ID",
        alias: Some("DELETE"),
        tool: true,
        class: Class::Write,
        summary: "Deletes a memory for good.",
        args: OneMemory::ARGS,
        reply: &[
            field("success", Bool),
            field("memory_id", Int),
            field("message", Str),
        ],
        run: Some(|c, s, a| delete_by_id(c, s, OneMemory::parse(a)?)),
    },
    Command {
        name: "UPDATE_MEMORY",
        alias: Some("UPDATE"),
        tool: true,
        class: Class::Write,
        summary: "Changes a memory's content, category or tags (new content gets a new id that supersedes the old).",
        args: UpdateMemory::ARGS,
        reply: &[
            field("memory_id", Int),
            field("supersedes", Array),
            field("tags", Array),
            field("category", Str),
            field("success", Bool),
            field("message", Str),
        ],
        run: Some(|c, s, a| update_memory(c, s, UpdateMemory::parse(a)?)),
    },
    Command {
        name: "FEEDBACK",
        alias: None,
        tool: true,
        class: Class::Write,
        summary: "Marks a memory helpful or harmful (moves its confidence).",
        args: GiveFeedback::ARGS,
        reply: &[
            field("memory_id", Int),
            field("helpful_count", Int),
            field("harmful_count", Int),
            field("confidence", Num),
            field("success", Bool),
            field("message", Str),
        ],
        run: Some(|c, s, a| feedback(c, s, GiveFeedback::parse(a)?)),
    },
    Command {
        name: "LINEAGE",
        alias: None,
        tool: true,
        class: Class::Read,
        summary: "The archived records a memory merged, superseded or replaced.",
        args: OneMemory::ARGS,
        reply: &[
            field("success", Bool),
            field("memory_id", Int),
            field("count", Int),
            field("lineage", Array),
        ],
        run: Some(|c, s, a| lineage(c, s, OneMemory::parse(a)?)),
    },
    Command {
        name: "HISTORY",
        alias: None,
        tool: true,
        class: Class::Read,
        summary: "A fact's versions with their validity, newest first (replaced values included).",
        args: OneMemory::ARGS,
        reply: &[
            field("memory_id", Int),
            field("versions", Array),
            field("count", Int),
            field("success", Bool),
            field("message", Str),
        ],
        run: Some(|c, s, a| history(c, s, OneMemory::parse(a)?)),
    },
    Command {
        name: "GET_MEMORY_STATS",
        alias: None,
        tool: true,
        class: Class::Read,
        summary: "The user's counts, categories, size and health (vector-memory-mcp's stats).",
        args: OneUser::ARGS,
        reply: &[
            field("total_memories", Int),
            field("store_memories", Int),
            field("memory_limit", Int),
            field("usage_percentage", Num),
            field("categories", Object),
            field("recent_week_count", Int),
            field("database_size_mb", Num),
            field("embedding_model", Str),
            field("embedding_dimensions", Int),
            field("top_accessed", Array),
            field("health_status", Str),
            field("archived", Int),
            field("success", Bool),
            field("message", Str),
        ],
        run: Some(|c, s, a| memory_stats(c, s, OneUser::parse(a)?)),
    },
    Command {
        name: "CLEAR_OLD_MEMORIES",
        alias: None,
        tool: true,
        class: Class::Write,
        summary: "Deletes the least-accessed memories older than days_old, keeping max_to_keep.",
        args: ClearOld::ARGS,
        reply: &[
            field("deleted_count", Int),
            field("deleted_ids", Array),
            field("remaining_count", Int),
            field("success", Bool),
            field("message", Str),
        ],
        run: Some(|c, s, a| clear_old(c, s, ClearOld::parse(a)?)),
    },
    Command {
        name: "COMPACT_PREVIEW",
        alias: None,
        tool: true,
        class: Class::Read,
        summary: "Groups of near-duplicate memories that compaction would merge.",
        args: CompactPreview::ARGS,
        reply: &[
            field("preview_id", Str),
            field("groups", Array),
            field("memories_before", Int),
            field("memories_after", Int),
            field("success", Bool),
            field("message", Str),
        ],
        run: Some(|c, s, a| compact_preview(c, s, CompactPreview::parse(a)?)),
    },
    Command {
        name: "COMPACT_APPLY",
        alias: None,
        tool: true,
        class: Class::Write,
        summary: "Merges a preview's groups (each merge keeps its sources in lineage).",
        args: CompactApply::ARGS,
        reply: &[
            field("merged", Array),
            field("skipped", Int),
            field("success", Bool),
            field("message", Str),
        ],
        run: Some(|c, s, a| compact_apply(c, s, CompactApply::parse(a)?)),
    },
    Command {
        name: "COMPACT_UNDO",
        alias: None,
        tool: true,
        class: Class::Write,
        summary: "Undoes one merge: its sources come back.",
        args: OneMemory::ARGS,
        reply: &[
            field("archived", Int),
            field("restored", Array),
            field("success", Bool),
            field("message", Str),
        ],
        run: Some(|c, s, a| compact_undo(c, s, OneMemory::parse(a)?)),
    },
    Command {
        name: "MEND_PREVIEW",
        alias: None,
        tool: false,
        class: Class::Read,
        summary: "Archived memories that older dedup rules put away and this build's rules would keep live.",
        args: OneUser::ARGS,
        reply: &[
            field("preview_id", Str),
            field("restore", Array),
            field("kept", Int),
            field("success", Bool),
            field("message", Str),
        ],
        run: Some(|c, s, a| mend_preview(c, s, OneUser::parse(a)?)),
    },
    Command {
        name: "MEND_APPLY",
        alias: None,
        tool: false,
        class: Class::Write,
        summary: "Brings back a mend preview's memories, in one frame.",
        args: MendApply::ARGS,
        reply: &[
            field("restored", Array),
            field("success", Bool),
            field("message", Str),
        ],
        run: Some(|c, s, a| mend_apply(c, s, MendApply::parse(a)?)),
    },
    Command {
        name: "MEND_UNDO",
        alias: None,
        tool: false,
        class: Class::Write,
        summary: "Archives one memory mend brought back again.",
        args: OneMemory::ARGS,
        reply: &[
            field("archived", Int),
            field("original", Int),
            field("success", Bool),
            field("message", Str),
        ],
        run: Some(|c, s, a| mend_undo(c, s, OneMemory::parse(a)?)),
    },
];
