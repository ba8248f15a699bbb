//! MCP over Streamable HTTP at `/mcp` (`docs/http.md`, "MCP over HTTP"; the transport of MCP
//! 2025-03-26 and later): a `POST` carries one JSON-RPC message; a request is answered with
//! one JSON object, or with one Server-Sent Event when the client accepts only
//! `text/event-stream`; a notification or a response gets `202`. `initialize` opens a session
//! whose id comes back in `Mcp-Session-Id`; every later message carries it (`400` without,
//! `404` for one the server does not hold, which tells the client to initialize again), and
//! `DELETE /mcp` ends it. The server sends nothing unasked, so `GET /mcp` is `405`, as the
//! specification allows.
//!
//! The tools and their answers are `amberdb mcp`'s (`crate::mcp`); the caller's session comes
//! from its bearer token, checked on every message, and a session stays bound to the grant that
//! opened it (another token gets `403`). MCP's OAuth flow is not offered: a static bearer
//! token from the token file.

use super::app::{App, authenticate, fail_response, json_response, read_bytes};
use super::sessions::SESSION_HEADER;
use crate::args::{Code, Fail};
use crate::auth::Grant;
use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodFilter, on};
use serde_json::Value;
use std::sync::Arc;

pub(super) fn routes() -> Router<Arc<App>> {
    Router::new().route(
        "/mcp",
        on(MethodFilter::POST, post)
            .on(MethodFilter::DELETE, delete)
            .fallback(no_stream),
    )
}

fn grant_of(session: &crate::commands::Session) -> Grant {
    Grant {
        user: session.user.clone(),
        read_only: session.read_only,
    }
}

fn session_id(headers: &HeaderMap) -> Option<String> {
    headers
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

async fn post(State(app): State<Arc<App>>, request: Request) -> Response {
    let session = match authenticate(&app, &request, true) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let grant = grant_of(&session);
    let (parts, body) = request.into_parts();
    let headers = parts.headers;
    let bytes = match read_bytes(&app.shared, &headers, body).await {
        Ok(b) => b,
        Err(r) => return *r,
    };
    let msg: Value = match serde_json::from_slice(&bytes) {
        Ok(v) => v,
        Err(e) => {
            return rpc_error(StatusCode::BAD_REQUEST, -32700, format!("not JSON: {e}"));
        }
    };
    if msg.is_array() {
        return rpc_error(
            StatusCode::BAD_REQUEST,
            -32600,
            "one JSON-RPC message per POST (batches are not supported)".to_owned(),
        );
    }
    let initialize = msg.get("method").and_then(Value::as_str) == Some("initialize");
    let mut opened = None;
    if initialize {
        match app.mcp.open(grant) {
            Ok(id) => opened = Some(id),
            Err(f) => return fail_response(f),
        }
    } else {
        let Some(id) = session_id(&headers) else {
            return fail_response(Fail::new(
                Code::BadRequest,
                "no Mcp-Session-Id: send initialize first, then its session id with every message",
            ));
        };
        if let Err(f) = app.mcp.check(&id, &grant) {
            return fail_response(f);
        }
    }
    let Some(reply) = crate::mcp::answer(&app.shared, &session, msg).await else {
        // A notification or a response: accepted, nothing to say.
        return StatusCode::ACCEPTED.into_response();
    };
    let mut response = if accepts_only_stream(&headers) {
        (
            StatusCode::OK,
            [
                (header::CONTENT_TYPE, "text/event-stream"),
                (header::CACHE_CONTROL, "no-cache"),
            ],
            format!("event: message\ndata: {reply}\n\n"),
        )
            .into_response()
    } else {
        json_response(StatusCode::OK, &reply)
    };
    if let Some(id) = opened
        && let Ok(v) = HeaderValue::from_str(&id)
    {
        response.headers_mut().insert(SESSION_HEADER, v);
    }
    response
}

/// Whether the client takes an event stream and not plain JSON.
fn accepts_only_stream(headers: &HeaderMap) -> bool {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    accept.contains("text/event-stream")
        && !accept.contains("application/json")
        && !accept.contains("*/*")
}

async fn delete(State(app): State<Arc<App>>, request: Request) -> Response {
    let session = match authenticate(&app, &request, true) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let Some(id) = session_id(request.headers()) else {
        return fail_response(Fail::new(Code::BadRequest, "no Mcp-Session-Id to end"));
    };
    if let Err(f) = app.mcp.check(&id, &grant_of(&session)) {
        return fail_response(f);
    }
    app.mcp.close(&id);
    StatusCode::NO_CONTENT.into_response()
}

/// `GET /mcp` (and any other method): this server opens no stream of its own.
async fn no_stream() -> Response {
    let mut r = fail_response(Fail::new(
        Code::BadRequest,
        "this server sends nothing unasked: no event stream to open; POST messages to /mcp",
    ));
    *r.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
    r.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("POST, DELETE"));
    r
}

fn rpc_error(status: StatusCode, code: i64, message: String) -> Response {
    json_response(status, &crate::mcp::error(Value::Null, code, message))
}
