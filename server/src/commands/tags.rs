//! Tags and tag snapshots: the unique, canonical and weighted tags of a user, normalization (preview, apply) and snapshots.

use super::common::*;

fn unique_tags(ctx: &Ctx, _session: &Session, a: OneUser) -> Outcome {
    let tags = engine(ctx.store.unique_tags(a.user.as_deref()))?;
    Ok(json!({"success": true, "count": tags.len(), "tags": tags}))
}

fn canonical_tags(ctx: &Ctx, _session: &Session, a: OneUser) -> Outcome {
    let tags = engine(ctx.store.canonical_tags(a.user.as_deref()))?;
    Ok(json!({"success": true, "count": tags.len(), "tags": tags}))
}

fn tag_frequencies(ctx: &Ctx, _session: &Session, a: OneUser) -> Outcome {
    let freq = engine(ctx.store.tag_frequencies(a.user.as_deref()))?;
    let map: Map<String, Value> = freq.into_iter().map(|(t, n)| (t, json!(n))).collect();
    Ok(json!({"success": true, "count": map.len(), "frequencies": map}))
}

fn tag_weights(ctx: &Ctx, _session: &Session, a: OneUser) -> Outcome {
    let weights = engine(ctx.store.tag_weights(a.user.as_deref()))?;
    let map: Map<String, Value> = weights.into_iter().map(|(t, w)| (t, json!(w))).collect();
    Ok(json!({"success": true, "count": map.len(), "weights": map}))
}

const THRESHOLD: Arg = opt(
    "threshold",
    Ty::Num,
    "least similarity of a tag to its canonical one",
)
.or(Fallback::Num(0.90));
const MAX_CHANGES: Arg = opt("max_changes", Ty::Int, "most mappings").or(Fallback::Int(200));

arguments! {
    /// TAG_NORMALIZE_PREVIEW.
    struct TagPreview {
        user: Option<String> = USER,
        threshold: f32 = THRESHOLD,
        max_changes: usize = MAX_CHANGES,
    }
}

fn tag_preview(ctx: &Ctx, _session: &Session, a: TagPreview) -> Outcome {
    let preview = engine(ctx.store.tag_normalize_preview(
        a.user.as_deref(),
        a.threshold,
        a.max_changes,
    ))?;
    let message = format!(
        "{} tags would be rewritten on {} memories",
        preview.planned_updates, preview.affected_memories
    );
    to_reply(&preview, message)
}

arguments! {
    /// TAG_NORMALIZE_APPLY: the preview's arguments, as given to the preview.
    struct TagApply {
        user: Option<String> = USER,
        preview: String = req("preview_id", Ty::Str, "from TAG_NORMALIZE_PREVIEW"),
        snapshot: String = req("snapshot_id", Ty::Str, "from SNAPSHOT_CREATE"),
        threshold: f32 = THRESHOLD,
        max_changes: usize = MAX_CHANGES,
    }
}

fn tag_apply(ctx: &Ctx, _session: &Session, a: TagApply) -> Outcome {
    let applied = engine(ctx.store.tag_normalize_apply(
        a.user.as_deref(),
        &a.preview,
        &a.snapshot,
        a.threshold,
        a.max_changes,
    ))?;
    let message = if applied.applied_count == 0 {
        "Nothing to change".to_owned()
    } else {
        format!("Rewrote the tags of {} memories", applied.applied_count)
    };
    to_reply(&applied, message)
}

arguments! {
    /// SNAPSHOT_CREATE.
    struct SnapshotCreate {
        user: Option<String> = USER,
        description: String = opt("description", Ty::Str, "for people").or(Fallback::Str("")),
    }
}

fn snapshot_create(ctx: &Ctx, _session: &Session, a: SnapshotCreate) -> Outcome {
    let created = engine(ctx.store.snapshot_create(a.user.as_deref(), &a.description))?;
    let message = format!(
        "Snapshot {} of {} memories",
        created.snapshot_id, created.memory_count
    );
    to_reply(&created, message)
}

arguments! {
    /// SNAPSHOT_RESTORE.
    struct SnapshotRestore {
        user: Option<String> = USER,
        snapshot: String = req("snapshot_id", Ty::Str, "from SNAPSHOT_CREATE"),
    }
}

fn snapshot_restore(ctx: &Ctx, _session: &Session, a: SnapshotRestore) -> Outcome {
    let restored = engine(ctx.store.snapshot_restore(a.user.as_deref(), &a.snapshot))?;
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
        class: Class::Read,
        summary: "The tags on the user's memories, sorted.",
        args: OneUser::ARGS,
        reply: &[
            field("success", Bool),
            field("count", Int),
            field("tags", Array),
        ],
        run: Some(|c, s, a| unique_tags(c, s, OneUser::parse(a)?)),
    },
    Command {
        name: "GET_CANONICAL_TAGS",
        alias: None,
        tool: true,
        class: Class::Read,
        summary: "The user's canonical tags, sorted.",
        args: OneUser::ARGS,
        reply: &[
            field("success", Bool),
            field("count", Int),
            field("tags", Array),
        ],
        run: Some(|c, s, a| canonical_tags(c, s, OneUser::parse(a)?)),
    },
    Command {
        name: "GET_TAG_FREQUENCIES",
        alias: None,
        tool: true,
        class: Class::Read,
        summary: "{tag: memories using it}.",
        args: OneUser::ARGS,
        reply: &[
            field("success", Bool),
            field("count", Int),
            field("frequencies", Object),
        ],
        run: Some(|c, s, a| tag_frequencies(c, s, OneUser::parse(a)?)),
    },
    Command {
        name: "GET_TAG_WEIGHTS",
        alias: None,
        tool: true,
        class: Class::Read,
        summary: "{tag: 1/ln(1+frequency)}: rare tags weigh more.",
        args: OneUser::ARGS,
        reply: &[
            field("success", Bool),
            field("count", Int),
            field("weights", Object),
        ],
        run: Some(|c, s, a| tag_weights(c, s, OneUser::parse(a)?)),
    },
    Command {
        name: "TAG_NORMALIZE_PREVIEW",
        alias: None,
        tool: true,
        class: Class::Read,
        summary: "Which tags would map to canonical ones (nothing changes).",
        args: TagPreview::ARGS,
        reply: &[
            field("preview_id", Str),
            field("scanned", Int),
            field("unique_before", Int),
            field("unique_after", Int),
            field("planned_updates", Int),
            field("affected_memories", Int),
            field("changes", Array),
            field("success", Bool),
            field("message", Str),
        ],
        run: Some(|c, s, a| tag_preview(c, s, TagPreview::parse(a)?)),
    },
    Command {
        name: "TAG_NORMALIZE_APPLY",
        alias: None,
        tool: true,
        class: Class::Write,
        summary: "Applies a preview's mapping (needs a snapshot to undo it), in one commit.",
        args: TagApply::ARGS,
        reply: &[
            field("applied_count", Int),
            field("preview_id", Str),
            field("success", Bool),
            field("message", Str),
        ],
        run: Some(|c, s, a| tag_apply(c, s, TagApply::parse(a)?)),
    },
    Command {
        name: "SNAPSHOT_CREATE",
        alias: None,
        tool: true,
        class: Class::Write,
        summary: "Saves every memory's tags.",
        args: SnapshotCreate::ARGS,
        reply: &[
            field("snapshot_id", Str),
            field("memory_count", Int),
            field("created_at", Str),
            field("success", Bool),
            field("message", Str),
        ],
        run: Some(|c, s, a| snapshot_create(c, s, SnapshotCreate::parse(a)?)),
    },
    Command {
        name: "SNAPSHOT_RESTORE",
        alias: None,
        tool: true,
        class: Class::Write,
        summary: "Puts every memory's tags back as a snapshot saved them.",
        args: SnapshotRestore::ARGS,
        reply: &[
            field("restored_count", Int),
            field("changed_count", Int),
            field("missing_count", Int),
            field("success", Bool),
            field("message", Str),
        ],
        run: Some(|c, s, a| snapshot_restore(c, s, SnapshotRestore::parse(a)?)),
    },
];
