//! The OpenAPI 3.1 document of the HTTP routes (`GET /openapi.json`; committed as
//! `docs/openapi.json`, which a test keeps equal to this), generated from the command table:
//! each route's parameters and body from its command's arguments, its `200` from the
//! command's reply declaration (`crate::reply`), every other status the one error body.

use super::table::{COMMAND_ROUTE, ROUTES};
use crate::commands::{self, COMMANDS, Command};
use crate::reply;
use serde_json::{Map, Value, json};

/// The document.
#[must_use]
pub fn document() -> Value {
    let mut paths = Map::new();
    for r in ROUTES {
        let c = commands::find(r.command).expect("a route names a command of the table");
        let entry = paths.entry(r.path.to_owned()).or_insert_with(|| json!({}));
        entry[r.method.to_ascii_lowercase()] = operation(c, r.method, r.path);
    }
    for c in COMMANDS.iter() {
        let path = COMMAND_ROUTE.replace("{command}", c.name);
        paths.insert(path.clone(), json!({"post": operation(c, "POST", &path)}));
    }
    for (path, mut item) in fixed_paths() {
        let declared: Vec<Value> = path_names(path)
            .iter()
            .map(|n| json!({"name": n, "in": "path", "required": true, "schema": {"type": "string"}}))
            .collect();
        if let Some(ops) = item.as_object_mut() {
            for (method, op) in ops.iter_mut() {
                if !declared.is_empty() {
                    op["parameters"] = json!(declared);
                }
                if op.get("operationId").is_none() {
                    op["operationId"] = json!(format!(
                        "{method}_{}",
                        path.trim_start_matches('/')
                            .replace(['/', '{', '}', '-', '.'], "_")
                    ));
                }
            }
        }
        paths.insert(path.to_owned(), item);
    }
    let mut schemas = Map::new();
    schemas.insert("Error".into(), reply::error_schema());
    for c in COMMANDS.iter() {
        schemas.insert(
            format!("{}_reply", c.name),
            reply::schema(&c.reply_fields()),
        );
    }
    schemas.insert("MemFuseEnvelope".into(), memfuse_envelope());
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "amberdb",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Persistent semantic memory for AI agents over HTTP/JSON: every command of the line protocol (docs/protocol.md) under POST /v1/commands/{COMMAND}, resource routes for the core operations, MemFuse's API, MCP over Streamable HTTP at /mcp, and operations. docs/http.md says every route, status and limit.",
            "license": {"name": "Apache-2.0", "identifier": "Apache-2.0"},
        },
        "servers": [{"url": "http://127.0.0.1:7734"}],
        "security": [{"bearer": []}, {}],
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer", "description": "A token of the server's token file; none needed when it has none."}},
            "schemas": schemas,
            "responses": {"Error": {"description": "The request failed and changed nothing: the code says why (docs/http.md, \"Statuses\").", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}},
        },
        "paths": paths,
    })
}

/// The path parameters of a route (`{name}`).
fn path_names(path: &str) -> Vec<&str> {
    path.split('/')
        .filter_map(|p| p.strip_prefix('{').and_then(|p| p.strip_suffix('}')))
        .collect()
}

fn operation(c: &Command, method: &str, path: &str) -> Value {
    let in_path = path_names(path);
    let input = c.input_schema();
    let mut parameters = Vec::new();
    let mut body = input.clone();
    let props = input["properties"].as_object().cloned().unwrap_or_default();
    let required: Vec<&str> = input["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    for name in &in_path {
        if let Some(s) = props.get(*name) {
            parameters
                .push(json!({"name": name, "in": "path", "required": true, "schema": scalar(s)}));
        }
    }
    if c.class.writes() {
        parameters.push(json!({"name": "Idempotency-Key", "in": "header", "required": false, "schema": {"type": "string", "format": "uuid"}, "description": "the request_id (a UUID version 7): a retry with it within 10 minutes is answered with the first attempt's reply and never applied twice"}));
    }
    let with_body = !matches!(method, "GET" | "DELETE");
    if !with_body {
        for (name, s) in &props {
            if !in_path.contains(&name.as_str()) {
                parameters.push(json!({"name": name, "in": "query", "required": required.contains(&name.as_str()), "schema": s, "style": "form", "explode": false}));
            }
        }
    }
    if let Some(b) = body.as_object_mut() {
        if let Some(Value::Object(p)) = b.get_mut("properties") {
            p.retain(|k, _| !in_path.contains(&k.as_str()));
        }
        if let Some(Value::Array(r)) = b.get_mut("required") {
            r.retain(|k| !k.as_str().is_some_and(|k| in_path.contains(&k)));
        }
    }
    let mut op = json!({
        "operationId": format!("{}_{}", method.to_ascii_lowercase(), path.trim_start_matches('/').replace(['/', '{', '}', '-'], "_")),
        "summary": c.summary,
        "description": format!("Runs {} (docs/protocol.md). Class: {}.", c.name, c.class.as_str()),
        "tags": [c.class.as_str()],
        "parameters": parameters,
        "responses": {
            "200": {"description": "The command's reply.", "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{}_reply", c.name)}}}},
            "default": {"$ref": "#/components/responses/Error"},
        },
    });
    if with_body {
        op["requestBody"] =
            json!({"required": false, "content": {"application/json": {"schema": body}}});
    }
    op
}

/// A path parameter's schema: a string or an integer, without the argument's description.
fn scalar(s: &Value) -> Value {
    let mut s = s.clone();
    if let Some(o) = s.as_object_mut() {
        o.remove("default");
    }
    s
}

fn memfuse_envelope() -> Value {
    json!({
        "type": "object",
        "properties": {
            "status": {"type": "string", "enum": ["success", "error"]},
            "code": {"type": "integer"},
            "data": {"type": ["object", "null"]},
            "message": {"type": "string"},
            "errors": {"type": ["array", "null"]},
        },
        "required": ["status", "code", "data", "message", "errors"],
    })
}

/// Routes that are not commands: operations, the document itself, MemFuse's API, MCP.
fn fixed_paths() -> Vec<(&'static str, Value)> {
    let envelope = json!({"description": "MemFuse's envelope.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/MemFuseEnvelope"}}}});
    let memfuse = |summary: &str, body: bool| {
        let mut op = json!({"summary": summary, "tags": ["memfuse"], "responses": {"200": envelope, "201": envelope, "default": envelope}});
        if body {
            op["requestBody"] =
                json!({"content": {"application/json": {"schema": {"type": "object"}}}});
        }
        op
    };
    let text = |summary: &str, ty: &str| json!({"summary": summary, "tags": ["operations"], "security": [{}], "responses": {"200": {"description": summary, "content": {ty: {"schema": {"type": if ty == "application/json" { "object" } else { "string" }}}}}, "default": {"$ref": "#/components/responses/Error"}}});
    let mut readyz = text(
        "200 when the store takes writes; 503 when it is poisoned or its disk is full",
        "application/json",
    );
    readyz["responses"]["503"] = json!({"description": "Not ready: the reasons say why.", "content": {"application/json": {"schema": {"type": "object"}}}});
    let mut metrics = text("Prometheus text format, 0.0.4", "text/plain");
    metrics["security"] = json!([{"bearer": []}, {}]);
    vec![
        (
            "/healthz",
            json!({"get": text("The process answers", "application/json")}),
        ),
        ("/readyz", json!({"get": readyz})),
        ("/metrics", json!({"get": metrics})),
        (
            "/openapi.json",
            json!({"get": text("This document", "application/json")}),
        ),
        (
            "/mcp",
            json!({"post": {
            "summary": "MCP over Streamable HTTP: one JSON-RPC message per POST (docs/http.md, \"MCP over HTTP\")",
            "tags": ["mcp"],
            "parameters": [{"name": "Mcp-Session-Id", "in": "header", "required": false, "schema": {"type": "string"}}],
            "requestBody": {"required": true, "content": {"application/json": {"schema": {"type": "object"}}}},
            "responses": {"200": {"description": "The JSON-RPC response (JSON, or one Server-Sent Event).", "content": {"application/json": {"schema": {"type": "object"}}, "text/event-stream": {"schema": {"type": "string"}}}}, "202": {"description": "A notification or response, accepted."}, "default": {"$ref": "#/components/responses/Error"}},
        }, "delete": {"summary": "Ends an MCP session", "tags": ["mcp"], "responses": {"204": {"description": "Ended."}, "default": {"$ref": "#/components/responses/Error"}}}}),
        ),
        (
            "/api/v1/health",
            json!({"get": memfuse("MemFuse: health", false)}),
        ),
        (
            "/api/v1/users",
            json!({"get": memfuse("MemFuse: users, or the one named ?name=", false), "post": memfuse("MemFuse: create a user {name, description}", true)}),
        ),
        (
            "/api/v1/users/{user_id}",
            json!({"get": memfuse("MemFuse: one user", false)}),
        ),
        (
            "/api/v1/users/{user_id}/query",
            json!({"post": memfuse("MemFuse: the query {query, session_id, agent_id, top_k, store_type, include_messages, include_knowledge, metadata}", true)}),
        ),
        (
            "/api/v1/agents",
            json!({"get": memfuse("MemFuse: the agent named ?name=", false), "post": memfuse("MemFuse: create an agent {name, description}", true)}),
        ),
        (
            "/api/v1/sessions",
            json!({"get": memfuse("MemFuse: a user's sessions (?user_id=, ?name=)", false), "post": memfuse("MemFuse: create a session {user_id, agent_id, name}", true)}),
        ),
        (
            "/api/v1/sessions/{session_id}/messages",
            json!({"post": memfuse("MemFuse: add messages {messages}", true)}),
        ),
    ]
}
