//! Items (`docs/semantics.md`, "Items"): a JSON value under a key, per user. What the LangGraph
//! store of the Python package (`amberdb.langgraph`) calls.

use super::common::*;
use amberdb::Item;

const KEY: Arg = req("key", Ty::Str, "the item's key: 1..=512 characters");

fn put_item(ctx: &Ctx, _session: &Session, args: &mut Args) -> Outcome {
    let user = args.opt_str("user_id")?;
    let key = args.str("key")?;
    let value = args
        .opt_object("value")?
        .ok_or_else(|| Fail::invalid("value", "is required"))?;
    let text = args.str("text")?;
    let value = serde_json::to_string(&value)
        .map_err(|e| Fail::new(Code::Internal, format!("encoding the value: {e}")))?;
    let stored = engine(
        ctx.store
            .put_item(user.as_deref(), Item { key, value }, text),
    )?;
    let message = match stored.replaced {
        Some(old) => format!("Item replaced ({old} → {})", stored.memory_id),
        None => "Item stored".to_owned(),
    };
    to_reply(&stored, message)
}

fn get_item(ctx: &Ctx, _session: &Session, args: &mut Args) -> Outcome {
    let user = args.opt_str("user_id")?;
    let key = args.str("key")?;
    let item = engine(ctx.store.get_item(user.as_deref(), &key))?;
    Ok(json!({"success": true, "found": item.is_some(), "item": item}))
}

fn delete_item(ctx: &Ctx, _session: &Session, args: &mut Args) -> Outcome {
    let user = args.opt_str("user_id")?;
    let key = args.str("key")?;
    let deleted = engine(ctx.store.delete_item(user.as_deref(), &key))?;
    Ok(json!({
        "success": true,
        "deleted": deleted.is_some(),
        "memory_id": deleted,
        "message": match deleted {
            Some(id) => format!("Item {key:?} deleted (memory {id})"),
            None => format!("No item {key:?}: nothing deleted"),
        },
    }))
}

fn list_items(ctx: &Ctx, _session: &Session, args: &mut Args) -> Outcome {
    let user = args.opt_str("user_id")?;
    let prefix = args.opt_str("prefix")?.unwrap_or_default();
    let offset = args.opt_u64("offset")?.unwrap_or(0);
    let limit = args.opt_u64("limit")?.unwrap_or(10);
    let items = engine(ctx.store.list_items(
        user.as_deref(),
        &prefix,
        usize::try_from(offset).unwrap_or(usize::MAX),
        usize::try_from(limit).unwrap_or(usize::MAX),
    ))?;
    Ok(json!({"success": true, "count": items.len(), "items": items}))
}

fn list_item_users(ctx: &Ctx, _session: &Session, _args: &mut Args) -> Outcome {
    let users = ctx.store.item_users();
    Ok(json!({"success": true, "count": users.len(), "users": users}))
}

pub(super) const TABLE: &[Command] = &[
    Command {
        name: "PUT_ITEM",
        alias: None,
        tool: false,
        summary: "Puts a JSON value under a key, found by the meaning of text; replaces the key's item.",
        args: &[
            USER,
            KEY,
            req(
                "value",
                Ty::Object,
                "the value: a JSON object, at most 256 KiB",
            ),
            req(
                "text",
                Ty::Str,
                "what the item is found by: 1..=10,000 characters",
            ),
        ],
        run: Some(put_item),
    },
    Command {
        name: "GET_ITEM",
        alias: None,
        tool: false,
        summary: "The user's item of a key (found: false when there is none). Not an access.",
        args: &[USER, KEY],
        run: Some(get_item),
    },
    Command {
        name: "DELETE_ITEM",
        alias: None,
        tool: false,
        summary: "Deletes the user's item of a key (deleted: false when there was none).",
        args: &[USER, KEY],
        run: Some(delete_item),
    },
    Command {
        name: "LIST_ITEMS",
        alias: None,
        tool: false,
        summary: "The user's items whose key starts with prefix, in key order.",
        args: &[
            USER,
            opt("prefix", Ty::Str, "a key prefix; default: every key"),
            opt("offset", Ty::Int, "default 0").within(0, OFFSET),
            opt("limit", Ty::Int, "default 10").within(1, PAGE),
        ],
        run: Some(list_items),
    },
    Command {
        name: "LIST_ITEM_USERS",
        alias: None,
        tool: false,
        summary: "Every user that holds items, with how many (a scoped connection: its own).",
        args: &[],
        run: Some(list_item_users),
    },
];
