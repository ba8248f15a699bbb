//! Items (`docs/semantics.md`, "Items"): a JSON value under a key, per user. What the LangGraph
//! store of the Python package (`amberdb.langgraph`) calls.

use super::common::*;
use amberdb::Item;

const KEY: Arg = req("key", Ty::Str, "the item's key: 1..=512 characters");

arguments! {
    /// PUT_ITEM.
    struct PutItem {
        user: Option<String> = USER,
        key: String = KEY,
        value: Map<String, Value> = req(
            "value",
            Ty::Object,
            "the value: a JSON object, at most 256 KiB",
        ),
        text: String = req("text", Ty::Str, "what the item is found by: 1..=10,000 characters"),
    }
}

fn put_item(ctx: &Ctx, _session: &Session, a: PutItem) -> Outcome {
    let value = serde_json::to_string(&a.value)
        .map_err(|e| Fail::new(Code::Internal, format!("encoding the value: {e}")))?;
    let stored = engine(
        ctx.store
            .put_item(a.user.as_deref(), Item { key: a.key, value }, a.text),
    )?;
    let message = match stored.replaced {
        Some(old) => format!("Item replaced ({old} → {})", stored.memory_id),
        None => "Item stored".to_owned(),
    };
    to_reply(&stored, message)
}

arguments! {
    /// GET_ITEM and DELETE_ITEM.
    struct OneItem {
        user: Option<String> = USER,
        key: String = KEY,
    }
}

fn get_item(ctx: &Ctx, _session: &Session, a: OneItem) -> Outcome {
    let item = engine(ctx.store.get_item(a.user.as_deref(), &a.key))?;
    Ok(json!({"success": true, "found": item.is_some(), "item": item}))
}

fn delete_item(ctx: &Ctx, _session: &Session, a: OneItem) -> Outcome {
    let key = a.key;
    let deleted = engine(ctx.store.delete_item(a.user.as_deref(), &key))?;
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

arguments! {
    /// LIST_ITEMS.
    struct ListItems {
        user: Option<String> = USER,
        prefix: String = opt("prefix", Ty::Str, "a key prefix; every key when left out")
            .or(Fallback::Str("")),
        offset: usize = opt("offset", Ty::Int, "items to skip")
            .within(0, OFFSET)
            .or(Fallback::Int(0)),
        limit: usize = opt("limit", Ty::Int, "a page's most items")
            .within(1, PAGE)
            .or(Fallback::Int(10)),
    }
}

fn list_items(ctx: &Ctx, _session: &Session, a: ListItems) -> Outcome {
    let items = engine(
        ctx.store
            .list_items(a.user.as_deref(), &a.prefix, a.offset, a.limit),
    )?;
    Ok(json!({"success": true, "count": items.len(), "items": items}))
}

fn list_item_users(ctx: &Ctx, _session: &Session, _: NoArgs) -> Outcome {
    let users = ctx.store.item_users();
    Ok(json!({"success": true, "count": users.len(), "users": users}))
}

pub(super) const TABLE: &[Command] = &[
    Command {
        name: "PUT_ITEM",
        alias: None,
        tool: false,
        class: Class::Write,
        summary: "Puts a JSON value under a key, found by the meaning of text; replaces the key's item.",
        args: PutItem::ARGS,
        reply: STORED,
        run: Some(|c, s, a| put_item(c, s, PutItem::parse(a)?)),
    },
    Command {
        name: "GET_ITEM",
        alias: None,
        tool: false,
        class: Class::Read,
        summary: "The user's item of a key (found: false when there is none). Not an access.",
        args: OneItem::ARGS,
        reply: &[
            field("success", Bool),
            field("found", Bool),
            field("item", Object).or_null(),
        ],
        run: Some(|c, s, a| get_item(c, s, OneItem::parse(a)?)),
    },
    Command {
        name: "DELETE_ITEM",
        alias: None,
        tool: false,
        class: Class::Write,
        summary: "Deletes the user's item of a key (deleted: false when there was none).",
        args: OneItem::ARGS,
        reply: &[
            field("success", Bool),
            field("deleted", Bool),
            field("memory_id", Int).or_null(),
            field("message", Str),
        ],
        run: Some(|c, s, a| delete_item(c, s, OneItem::parse(a)?)),
    },
    Command {
        name: "LIST_ITEMS",
        alias: None,
        tool: false,
        class: Class::Read,
        summary: "The user's items whose key starts with prefix, in key order.",
        args: ListItems::ARGS,
        reply: &[
            field("success", Bool),
            field("count", Int),
            field("items", Array),
        ],
        run: Some(|c, s, a| list_items(c, s, ListItems::parse(a)?)),
    },
    Command {
        name: "LIST_ITEM_USERS",
        alias: None,
        tool: false,
        class: Class::Read,
        summary: "Every user that holds items, with how many (a scoped connection: its own).",
        args: NoArgs::ARGS,
        reply: &[
            field("success", Bool),
            field("count", Int),
            field("users", Array),
        ],
        run: Some(|c, s, a| list_item_users(c, s, NoArgs::parse(a)?)),
    },
];
