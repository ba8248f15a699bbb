//! MemFuse's API as its SDK (`memfuse==0.3.3`) calls it (`docs/http.md`, "MemFuse"): health,
//! users, agents and sessions by name, a session's messages, and the query, in MemFuse's
//! envelope `{status, code, data, message, errors}` with its status codes and field names,
//! on these routes only. Each call runs amberdb commands through the one dispatch.
//!
//! How MemFuse's model maps onto amberdb's: a MemFuse user's id is its name, which is the
//! amberdb user id. A MemFuse agent is global and amberdb's belong to a user: creating one
//! checks its name and stores nothing; a session that names it creates it under the
//! session's user. A MemFuse session id is global and amberdb's is per user: the id MemFuse
//! sees is `USER~SESSION`, each part with every byte outside `[A-Za-z0-9_-]` written `.XX`
//! (so it needs no escaping in a URL and splits back without doubt).

use super::app::{App, authenticate, body_args, json_response};
use crate::args::{Code, Fail, Outcome};
use crate::commands::Session;
use crate::dispatch::{self, Request as Call};
use axum::Router;
use axum::extract::{Path, RawQuery, Request, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::{get, post};
use serde_json::{Map, Value, json};
use std::sync::Arc;

pub(super) fn routes() -> Router<Arc<App>> {
    Router::new()
        .route("/api/v1/health", get(health))
        .route("/api/v1/health/", get(health))
        .route("/api/v1/users", get(find_users).post(create_user))
        .route("/api/v1/users/{user_id}", get(get_user))
        .route("/api/v1/users/{user_id}/query", post(query))
        .route("/api/v1/users/{user_id}/query/", post(query))
        .route("/api/v1/agents", get(find_agents).post(create_agent))
        .route("/api/v1/sessions", get(find_sessions).post(create_session))
        .route("/api/v1/sessions/{session_id}/messages", post(add_messages))
}

/// A MemFuse session id for an amberdb user and session (module doc).
#[must_use]
pub fn session_id(user: &str, session: &str) -> String {
    format!("{}~{}", escape(user), escape(session))
}

/// The amberdb user and session of a MemFuse session id, `None` for one this server did not
/// give out.
#[must_use]
pub fn parse_session_id(id: &str) -> Option<(String, String)> {
    let (user, session) = id.split_once('~')?;
    Some((unescape(user)?, unescape(session)?))
}

fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b == b'_' || b == b'-' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!(".{b:02X}"));
        }
    }
    out
}

fn unescape(s: &str) -> Option<String> {
    let mut bytes = Vec::with_capacity(s.len());
    let mut it = s.bytes();
    while let Some(b) = it.next() {
        if b == b'.' {
            let hex = [it.next()?, it.next()?];
            bytes.push(u8::from_str_radix(std::str::from_utf8(&hex).ok()?, 16).ok()?);
        } else if b.is_ascii_alphanumeric() || b == b'_' || b == b'-' {
            bytes.push(b);
        } else {
            return None;
        }
    }
    String::from_utf8(bytes).ok()
}

/// A success in MemFuse's envelope.
fn success(status: StatusCode, data: Value, message: impl Into<String>) -> Response {
    let body = json!({
        "status": "success",
        "code": status.as_u16(),
        "data": data,
        "message": message.into(),
        "errors": null,
    });
    json_response(status, &body)
}

/// A failure in MemFuse's envelope: its HTTP status (`invalid` and limits are 422, as
/// MemFuse's validation errors), and `errors: [{field, message}]`.
fn failure(f: &Fail) -> Response {
    let status = match f.code {
        Code::Invalid | Code::LimitExceeded => StatusCode::UNPROCESSABLE_ENTITY,
        c => StatusCode::from_u16(c.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
    };
    failure_at(status, f)
}

/// A failure in MemFuse's envelope under `status`.
fn failure_at(status: StatusCode, f: &Fail) -> Response {
    let message = f
        .body
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("failed");
    let field = f
        .body
        .get("field")
        .and_then(Value::as_str)
        .unwrap_or("request");
    let body = json!({
        "status": "error",
        "code": status.as_u16(),
        "data": null,
        "message": message,
        "errors": [{"field": field, "message": message}],
    });
    let mut r = json_response(status, &body);
    if status == StatusCode::UNAUTHORIZED {
        r.headers_mut().insert(
            axum::http::header::WWW_AUTHENTICATE,
            axum::http::HeaderValue::from_static("Bearer realm=\"amberdb\""),
        );
    }
    r
}

/// Runs one command for a MemFuse route.
async fn call(app: &App, session: &Session, command: &str, args: Value) -> Outcome {
    let args = match args {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    let request = Call {
        tag: None,
        command: command.to_owned(),
        args,
    };
    dispatch::one(&app.shared, session.clone(), request).await.0
}

/// The session of a request, or its failure in the envelope.
fn who(app: &App, request: &Request) -> Result<Session, Box<Response>> {
    authenticate(app, request, false).map_err(|r| {
        let status = r.status();
        Box::new(failure(&Fail::new(
            if status == StatusCode::UNAUTHORIZED {
                Code::Unauthorized
            } else {
                Code::Forbidden
            },
            "this server needs a token: MemFuse(api_key=...) sends it as Authorization: Bearer",
        )))
    })
}

/// The session of a request and its body's arguments, or the failure in the envelope (a body
/// refused keeps its status: 413, 415, 408, 400).
async fn request_body(
    app: &App,
    request: Request,
) -> Result<(Session, Map<String, Value>), Box<Response>> {
    let session = who(app, &request)?;
    let (parts, body) = request.into_parts();
    let args = body_args(&app.shared, &parts.headers, body)
        .await
        .map_err(|(status, f)| Box::new(failure_at(status, &f)))?;
    Ok((session, args))
}

fn query_param(raw: Option<&str>, name: &str) -> Option<String> {
    form_urlencoded::parse(raw?.as_bytes())
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

async fn health() -> Response {
    success(
        StatusCode::OK,
        json!({"status": "ok", "server": "amberdb", "amberdb_version": env!("CARGO_PKG_VERSION")}),
        "amberdb answers MemFuse's API",
    )
}

/// An amberdb user as MemFuse shows one.
fn user_shape(e: &Value) -> Value {
    json!({
        "id": e["id"],
        "name": e["name"],
        "description": null,
        "created_at": e["created_at"],
        "updated_at": e["created_at"],
    })
}

async fn find_users(
    State(app): State<Arc<App>>,
    RawQuery(q): RawQuery,
    request: Request,
) -> Response {
    let session = match who(&app, &request) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    match query_param(q.as_deref(), "name") {
        Some(name) => match call(&app, &session, "GET_USER", json!({"user_id": name})).await {
            Ok(r) => success(
                StatusCode::OK,
                json!({"users": [user_shape(&r["user"])]}),
                "User found",
            ),
            Err(f) => failure(&f),
        },
        None => match call(&app, &session, "LIST_USERS", json!({})).await {
            Ok(r) => {
                let users: Vec<Value> = r["users"]
                    .as_array()
                    .map_or_else(Vec::new, |u| u.iter().map(user_shape).collect());
                success(StatusCode::OK, json!({"users": users}), "Users listed")
            }
            Err(f) => failure(&f),
        },
    }
}

async fn get_user(
    State(app): State<Arc<App>>,
    Path(user): Path<String>,
    request: Request,
) -> Response {
    let session = match who(&app, &request) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    match call(&app, &session, "GET_USER", json!({"user_id": user})).await {
        Ok(r) => success(
            StatusCode::OK,
            json!({"user": user_shape(&r["user"])}),
            "User found",
        ),
        Err(f) => failure(&f),
    }
}

/// A create's body: `name` required, `description` taken and not kept (amberdb's entities
/// have a name only; the reply says so); any other field refused, naming `what` it creates.
async fn named_body(
    app: &App,
    request: Request,
    what: &str,
) -> Result<(Session, String), Box<Response>> {
    let (session, mut args) = request_body(app, request).await?;
    args.remove("description");
    let name = match args.remove("name") {
        Some(Value::String(n)) => n,
        _ => {
            return Err(Box::new(failure(&Fail::invalid(
                "name",
                "is required: a string",
            ))));
        }
    };
    if let Some(extra) = args.keys().next() {
        return Err(Box::new(failure(&Fail::invalid(
            extra,
            format!("is not a field of {what} (name, description)"),
        ))));
    }
    Ok((session, name))
}

async fn create_user(State(app): State<Arc<App>>, request: Request) -> Response {
    let (session, name) = match named_body(&app, request, "a user").await {
        Ok(b) => b,
        Err(r) => return *r,
    };
    match call(
        &app,
        &session,
        "CREATE_USER",
        json!({"user_id": name, "name": name}),
    )
    .await
    {
        Ok(r) => success(
            StatusCode::CREATED,
            json!({"user": user_shape(&r["user"])}),
            "User created (amberdb keeps no description)",
        ),
        Err(f) => failure(&f),
    }
}

fn agent_shape(name: &str) -> Value {
    json!({"id": name, "name": name, "description": null})
}

async fn find_agents(
    State(app): State<Arc<App>>,
    RawQuery(q): RawQuery,
    request: Request,
) -> Response {
    if let Err(r) = who(&app, &request) {
        return *r;
    }
    match query_param(q.as_deref(), "name") {
        Some(name) => match amberdb::validate_id("agent_id", &name) {
            Ok(()) => success(
                StatusCode::OK,
                json!({"agents": [agent_shape(&name)]}),
                "Agent found (agents are names until a session uses them)",
            ),
            Err(e) => failure(&Fail::from(e)),
        },
        None => failure(&Fail::invalid(
            "name",
            "is required: amberdb's agents belong to users; list them per user at /v1/users/{user_id}/agents",
        )),
    }
}

async fn create_agent(State(app): State<Arc<App>>, request: Request) -> Response {
    let (_, name) = match named_body(&app, request, "an agent").await {
        Ok(b) => b,
        Err(r) => return *r,
    };
    match amberdb::validate_id("agent_id", &name) {
        Ok(()) => success(
            StatusCode::CREATED,
            json!({"agent": agent_shape(&name)}),
            "Agent accepted: it is created under a user when a session names it",
        ),
        Err(e) => failure(&Fail::from(e)),
    }
}

fn session_shape(e: &Value) -> Value {
    let user = e["user_id"].as_str().unwrap_or_default();
    let id = e["id"].as_str().unwrap_or_default();
    json!({
        "id": session_id(user, id),
        "name": e["name"],
        "user_id": user,
        "agent_id": e["agent_id"],
        "created_at": e["created_at"],
        "updated_at": e["created_at"],
    })
}

async fn find_sessions(
    State(app): State<Arc<App>>,
    RawQuery(q): RawQuery,
    request: Request,
) -> Response {
    let session = match who(&app, &request) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let Some(user) = query_param(q.as_deref(), "user_id") else {
        return failure(&Fail::invalid(
            "user_id",
            "is required: amberdb's sessions belong to a user",
        ));
    };
    let found = match query_param(q.as_deref(), "name") {
        Some(name) => call(
            &app,
            &session,
            "GET_SESSION",
            json!({"user_id": user, "session_id": name}),
        )
        .await
        .map(|r| vec![session_shape(&r["session"])]),
        None => call(&app, &session, "LIST_SESSIONS", json!({"user_id": user}))
            .await
            .map(|r| {
                r["sessions"]
                    .as_array()
                    .map_or_else(Vec::new, |s| s.iter().map(session_shape).collect())
            }),
    };
    match found {
        Ok(sessions) => success(
            StatusCode::OK,
            json!({"sessions": sessions}),
            "Sessions found",
        ),
        Err(f) => failure(&f),
    }
}

/// `POST /api/v1/sessions {user_id, agent_id, name?}`: the session's agent is created under
/// its user first when it has none of that name; a session without a name gets
/// `session-<random>`. An existing session is `409` before anything is created.
async fn create_session(State(app): State<Arc<App>>, request: Request) -> Response {
    let (session, args) = match request_body(&app, request).await {
        Ok(b) => b,
        Err(r) => return *r,
    };
    let text = |k: &str| args.get(k).and_then(Value::as_str).map(str::to_owned);
    let Some(user) = text("user_id") else {
        return failure(&Fail::invalid("user_id", "is required"));
    };
    if let Some(extra) = args
        .keys()
        .find(|k| !matches!(k.as_str(), "user_id" | "agent_id" | "name"))
    {
        return failure(&Fail::invalid(
            extra,
            "is not a field of a session (user_id, agent_id, name)",
        ));
    }
    let name = match text("name") {
        Some(n) => n,
        None => {
            let mut b = [0u8; 6];
            if getrandom::fill(&mut b).is_err() {
                return failure(&Fail::new(Code::Internal, "no random session name"));
            }
            format!(
                "session-{}",
                b.iter().map(|x| format!("{x:02x}")).collect::<String>()
            )
        }
    };
    let agent = text("agent_id");
    match call(
        &app,
        &session,
        "GET_SESSION",
        json!({"user_id": user, "session_id": name}),
    )
    .await
    {
        Ok(_) => {
            return failure(&Fail::new(
                Code::AlreadyExists,
                format!("user {user:?} has a session {name:?} already"),
            ));
        }
        Err(f) if f.code == Code::NotFound => {}
        Err(f) => return failure(&f),
    }
    if let Some(agent) = &agent {
        match call(
            &app,
            &session,
            "GET_AGENT",
            json!({"user_id": user, "agent_id": agent}),
        )
        .await
        {
            Ok(_) => {}
            Err(f) if f.code == Code::NotFound => {
                if let Err(f) = call(
                    &app,
                    &session,
                    "CREATE_AGENT",
                    json!({"user_id": user, "agent_id": agent}),
                )
                .await
                {
                    return failure(&f);
                }
            }
            Err(f) => return failure(&f),
        }
    }
    let mut create = json!({"user_id": user, "session_id": name, "name": name});
    if let Some(agent) = agent {
        create["agent_id"] = json!(agent);
    }
    match call(&app, &session, "CREATE_SESSION", create).await {
        Ok(r) => success(
            StatusCode::CREATED,
            json!({"session": session_shape(&r["session"])}),
            "Session created",
        ),
        Err(f) => failure(&f),
    }
}

async fn add_messages(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    request: Request,
) -> Response {
    let (session, mut args) = match request_body(&app, request).await {
        Ok(b) => b,
        Err(r) => return *r,
    };
    let Some((user, session_name)) = parse_session_id(&id) else {
        return failure(&Fail::new(
            Code::NotFound,
            format!("no session {id:?}: a session id comes from POST /api/v1/sessions"),
        ));
    };
    args.insert("user_id".into(), json!(user));
    args.insert("session_id".into(), json!(session_name));
    match call(&app, &session, "ADD_MESSAGES", Value::Object(args)).await {
        Ok(r) => {
            let ids: Vec<Value> = r["memory_ids"].as_array().map_or_else(Vec::new, |a| {
                a.iter().map(|i| json!(i.to_string())).collect()
            });
            let skipped = r["skipped"].clone();
            success(
                StatusCode::CREATED,
                json!({"message_ids": ids, "skipped": skipped}),
                format!("{} messages added", ids.len()),
            )
        }
        Err(f) => failure(&f),
    }
}

/// `POST /api/v1/users/{user_id}/query`: the QUERY command; `session_id` is MemFuse's (module
/// doc), `metadata` is taken and not used (its search has no use for it), results in the shape
/// of MemFuse's contract (string ids, `level`, scores within 0..=1, notes as `knowledge`).
async fn query(
    State(app): State<Arc<App>>,
    Path(user): Path<String>,
    request: Request,
) -> Response {
    let (session, mut args) = match request_body(&app, request).await {
        Ok(b) => b,
        Err(r) => return *r,
    };
    args.remove("metadata");
    if let Some(Value::String(id)) = args.get("session_id").cloned() {
        match parse_session_id(&id) {
            Some((owner, s)) if owner == user => {
                args.insert("session_id".into(), json!(s));
            }
            _ => {
                let mut f = Fail::new(
                    Code::NotFound,
                    format!("session {id:?} not found for user {user:?}"),
                );
                f.body.insert("field".into(), json!("session_id"));
                return failure(&f);
            }
        }
    }
    args.insert("user_id".into(), json!(user));
    match call(&app, &session, "QUERY", Value::Object(args)).await {
        Ok(r) => {
            let results: Vec<Value> = r["data"]["results"].as_array().map_or_else(Vec::new, |a| {
                a.iter().map(|x| result_shape(&user, x)).collect()
            });
            let total = results.len();
            success(
                StatusCode::OK,
                json!({"results": results, "total": total}),
                format!("Found {total} results"),
            )
        }
        Err(f) => {
            let mut f = f;
            if let Some(Value::Array(errors)) = f.body.get("errors").cloned()
                && let Some(field) = errors.first().and_then(|e| e["field"].as_str())
            {
                f.body.insert("field".into(), json!(field));
            }
            failure(&f)
        }
    }
}

fn result_shape(user: &str, r: &Value) -> Value {
    let mut metadata = r["metadata"].clone();
    if let Some(m) = metadata.as_object_mut() {
        if let Some(s) = m
            .get("session_id")
            .and_then(Value::as_str)
            .map(str::to_owned)
        {
            m.insert("session_id".into(), json!(session_id(user, &s)));
        }
        m.insert("level".into(), json!(0));
    }
    let kind = match r["type"].as_str() {
        Some("message") => "message",
        _ => "knowledge",
    };
    json!({
        "id": r["id"].to_string(),
        "content": r["content"],
        "score": r["score"].as_f64().unwrap_or(0.0).clamp(0.0, 1.0),
        "type": kind,
        "role": r["role"],
        "created_at": r["created_at"],
        "updated_at": r["updated_at"],
        "metadata": metadata,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids_split_back_whatever_the_ids_hold() {
        for (u, s) in [("ada", "s1"), ("a~b", "c.d"), ("ü ser/1", "~"), ("", "x")] {
            let id = session_id(u, s);
            assert!(
                id.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"_-.~".contains(&b)),
                "{id}"
            );
            assert_eq!(id.matches('~').count(), 1, "{id}");
            assert_eq!(parse_session_id(&id), Some((u.to_owned(), s.to_owned())));
        }
        assert_eq!(parse_session_id("no-tilde"), None);
        assert_eq!(parse_session_id("a~.Z"), None);
        assert_eq!(parse_session_id("a~b c"), None);
    }
}
