//! MCP over stdio (`amberdb mcp`): JSON-RPC 2.0, one message per line on stdin and stdout.
//!
//! `initialize` (protocol revisions 2024-11-05 through 2025-11-25: the client's when we know
//! it, else our newest), `ping`, `tools/list` and `tools/call`; notifications get no answer.
//! The tools are the protocol's commands under lowercase names — vector-memory-mcp's
//! (`store_memory`, `search_memories`, `get_memory_stats`, ...), then the MemFuse query and
//! the users / agents / sessions operations — run by the same handlers as the TCP server
//! (`commands.rs`), so their arguments and result fields are the same. A tool's result is its
//! reply object, as JSON text and as `structuredContent`; a failed call has `isError: true`
//! and the seed's `{success: false, error, message}` fields. stdout carries only protocol
//! messages; logs go to stderr.
//!
//! The messages are the transport's own business; a tool call runs through the one dispatch
//! (`crate::dispatch`) as every transport's requests do. Over stdio the caller is trusted;
//! over HTTP (`crate::http`, `/mcp`) its session comes from its bearer token.

use crate::commands::{self, COMMANDS, Session};
use crate::dispatch::{self, Request, Shared};
use serde_json::{Value, json};
use std::io::{BufRead, Write};
use std::sync::Arc;

/// The protocol revisions `initialize` accepts, oldest first.
pub const PROTOCOL_VERSIONS: &[&str] = &["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

/// Longest message accepted on stdin (16 MiB).
pub const MAX_MESSAGE_BYTES: usize = 16 << 20;

const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const METHOD_NOT_FOUND: i64 = -32601;
const INVALID_PARAMS: i64 = -32602;

/// Serves MCP on `input` / `output` until `input` ends, each tool call run on `runtime`.
///
/// # Errors
/// Reading stdin or writing stdout failed.
pub fn serve(
    shared: &Arc<Shared>,
    runtime: &tokio::runtime::Runtime,
    mut input: impl BufRead,
    mut output: impl Write,
) -> std::io::Result<()> {
    let session = Session::mcp();
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = std::io::Read::take(&mut input, MAX_MESSAGE_BYTES as u64 + 1)
            .read_until(b'\n', &mut line)?;
        if n == 0 {
            return Ok(());
        }
        let reply = if line.len() > MAX_MESSAGE_BYTES && !line.ends_with(b"\n") {
            // Skip the rest of the over-long message.
            let mut rest = Vec::new();
            input.read_until(b'\n', &mut rest)?;
            Some(error(
                Value::Null,
                INVALID_REQUEST,
                format!("message over {MAX_MESSAGE_BYTES} bytes"),
            ))
        } else {
            runtime.block_on(handle(shared, &session, &line))
        };
        if let Some(reply) = reply {
            serde_json::to_writer(&mut output, &reply)?;
            output.write_all(b"\n")?;
            output.flush()?;
        }
    }
}

/// A JSON-RPC error message.
pub fn error(id: Value, code: i64, message: impl Into<String>) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message.into()}})
}

/// Answers one message (`None` for a notification or a blank line).
pub async fn handle(shared: &Arc<Shared>, session: &Session, line: &[u8]) -> Option<Value> {
    if line.iter().all(u8::is_ascii_whitespace) {
        return None;
    }
    let msg: Value = match serde_json::from_slice(line) {
        Ok(v) => v,
        Err(e) => return Some(error(Value::Null, PARSE_ERROR, format!("not JSON: {e}"))),
    };
    answer(shared, session, msg).await
}

/// Answers one parsed message (`None` for a notification or a response).
pub async fn answer(shared: &Arc<Shared>, session: &Session, msg: Value) -> Option<Value> {
    let Some(obj) = msg.as_object() else {
        return Some(error(
            Value::Null,
            INVALID_REQUEST,
            "a message is one JSON object",
        ));
    };
    let method = obj.get("method").and_then(Value::as_str);
    let Some(id) = obj.get("id").cloned() else {
        // A notification (initialized, cancelled, ...) or a response to nothing we sent.
        if let Some(m) = method {
            tracing::debug!(method = m, "notification");
        }
        return None;
    };
    let Some(method) = method else {
        return Some(error(id, INVALID_REQUEST, "a request has a method"));
    };
    let params = obj.get("params").cloned().unwrap_or(Value::Null);
    let result = match method {
        "initialize" => Ok(initialize(&params)),
        "ping" => Ok(json!({})),
        "tools/list" => Ok(tools_list()),
        "tools/call" => tools_call(shared, session, &params).await,
        other => Err((METHOD_NOT_FOUND, format!("no method {other:?}"))),
    };
    Some(match result {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err((code, message)) => error(id, code, message),
    })
}

fn initialize(params: &Value) -> Value {
    let asked = params.get("protocolVersion").and_then(Value::as_str);
    let version = asked
        .filter(|v| PROTOCOL_VERSIONS.contains(v))
        .unwrap_or(PROTOCOL_VERSIONS[PROTOCOL_VERSIONS.len() - 1]);
    json!({
        "protocolVersion": version,
        "capabilities": {"tools": {"listChanged": false}},
        "serverInfo": {"name": "amberdb", "version": env!("CARGO_PKG_VERSION")},
        "instructions": "Persistent semantic memory. store_memory what you learn; search_memories by meaning before you start a task; when a fact changes, store the new statement: the older one is kept as history (history, as_of); users, agents and sessions keep tenants apart.",
    })
}

fn tools_list() -> Value {
    let tools: Vec<Value> = COMMANDS
        .iter()
        .filter(|c| c.tool)
        .map(|c| json!({"name": c.tool_name(), "description": c.summary, "inputSchema": c.input_schema()}))
        .collect();
    json!({"tools": tools})
}

async fn tools_call(
    shared: &Arc<Shared>,
    session: &Session,
    params: &Value,
) -> Result<Value, (i64, String)> {
    let name = params
        .get("name")
        .and_then(Value::as_str)
        .ok_or((INVALID_PARAMS, "tools/call needs a tool name".to_owned()))?;
    let command = commands::find(name)
        .filter(|c| c.tool && c.tool_name() == name)
        .ok_or_else(|| (INVALID_PARAMS, format!("Unknown tool: {name}")))?;
    let args = match params.get("arguments") {
        None | Some(Value::Null) => serde_json::Map::new(),
        Some(Value::Object(a)) => a.clone(),
        Some(_) => return Err((INVALID_PARAMS, "arguments must be an object".to_owned())),
    };
    let request = Request {
        tag: None,
        command: command.name.to_owned(),
        args,
    };
    let (body, is_error) = match dispatch::one(shared, session.clone(), request).await.0 {
        Ok(body) => (body, false),
        Err(f) => (Value::Object(f.body), true),
    };
    let structured = match &body {
        Value::Object(_) => body.clone(),
        other => json!({"result": other}),
    };
    Ok(json!({
        "content": [{"type": "text", "text": body.to_string()}],
        "structuredContent": structured,
        "isError": is_error,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;
    use amberdb::{Store, StoreOptions};

    fn handle(ctx: &Arc<Shared>, line: &[u8]) -> Option<Value> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime.block_on(super::handle(ctx, &Session::mcp(), line))
    }

    fn call(ctx: &Arc<Shared>, msg: Value) -> Option<Value> {
        handle(ctx, msg.to_string().as_bytes())
    }

    #[test]
    fn a_session_initializes_lists_and_calls() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = Arc::new(Shared::new(
            crate::commands::Ctx {
                store: Store::open(dir.path(), StoreOptions::hashing()).unwrap(),
                metrics: Arc::new(Metrics::new()),
            },
            crate::limits::Limits::default(),
            crate::auth::Auth::none(),
        ));
        let init = call(&ctx, json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}))
        .unwrap();
        assert_eq!(init["result"]["protocolVersion"], "2025-06-18");
        let init = call(&ctx, json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "1999-01-01"}})).unwrap();
        assert_eq!(init["result"]["protocolVersion"], "2025-11-25");
        assert_eq!(
            call(
                &ctx,
                json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
            ),
            None
        );

        let tools = call(
            &ctx,
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
        )
        .unwrap();
        let names: Vec<&str> = tools["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        for seed in [
            "store_memory",
            "search_memories",
            "list_recent_memories",
            "get_by_memory_id",
            "delete_by_memory_id",
            "get_memory_stats",
            "clear_old_memories",
            "get_unique_tags",
            "get_canonical_tags",
            "get_tag_frequencies",
            "get_tag_weights",
            "tag_normalize_preview",
            "tag_normalize_apply",
            "snapshot_create",
            "snapshot_restore",
            "query",
            "create_user",
            "add_messages",
            "add_knowledge",
        ] {
            assert!(names.contains(&seed), "{seed}");
        }

        let stored = call(&ctx, json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
            "params": {"name": "store_memory", "arguments": {"content": "the build needs protoc 3.21", "tags": ["build"]}}})).unwrap();
        assert_eq!(stored["result"]["isError"], false);
        assert_eq!(stored["result"]["structuredContent"]["success"], true);
        let again = call(&ctx, json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
            "params": {"name": "store_memory", "arguments": {"content": "the build needs protoc 3.21"}}})).unwrap();
        // A duplicate is vector-memory-mcp's answer: a normal result, success false.
        assert_eq!(again["result"]["isError"], false);
        assert_eq!(again["result"]["structuredContent"]["success"], false);
        assert_eq!(again["result"]["structuredContent"]["outcome"], "duplicate");
        assert_eq!(
            again["result"]["structuredContent"]["memory_id"],
            stored["result"]["structuredContent"]["memory_id"]
        );

        let unknown = call(&ctx, json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "STORE_MEMORY"}})).unwrap();
        assert_eq!(unknown["error"]["code"], INVALID_PARAMS);
        assert_eq!(
            call(
                &ctx,
                json!({"jsonrpc": "2.0", "id": 6, "method": "resources/list"})
            )
            .unwrap()["error"]["code"],
            METHOD_NOT_FOUND
        );
        assert_eq!(
            handle(&ctx, b"{not json").unwrap()["error"]["code"],
            PARSE_ERROR
        );
    }
}
