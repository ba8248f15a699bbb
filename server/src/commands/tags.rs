//! Tags and tag snapshots: the unique, canonical and weighted tags of a user, normalization (preview, apply) and snapshots.

use super::common::*;

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
    let freq = engine(ctx.store.tag_frequencies(user.as_deref()))?;
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

/// The commands of this domain, in HELP's order.
pub(super) static TABLE: &[Command] = &[
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
];
