//! Safety on every HTTP route (`docs/http.md`, "Safety"), as the MCP specification asks of its
//! HTTP transport: the `Host` header is checked against an allowlist (loopback names by
//! default) so a DNS-rebinding page cannot reach a loopback server by another name; a request
//! whose `Origin` is present must come from the server's own origin or one on the CORS
//! allowlist, else `403`; a request with no `Origin` (curl, SDKs) is judged by its token alone.
//! Allowed cross-origin requests get CORS headers, and their preflights an answer.

use super::app::{Allow, App, fail_response};
use crate::args::{Code, Fail};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

/// The name part of a `Host` header or an origin's authority: `[::1]:7734` → `::1`.
fn host_name(authority: &str) -> String {
    let a = authority.trim().to_ascii_lowercase();
    if let Some(rest) = a.strip_prefix('[') {
        return rest.split(']').next().unwrap_or("").to_owned();
    }
    match a.rsplit_once(':') {
        Some((name, port)) if port.chars().all(|c| c.is_ascii_digit()) => name.to_owned(),
        _ => a,
    }
}

/// How a request's `Origin` stands: none sent, the server's own, on the allowlist, or not.
#[derive(Debug, PartialEq)]
enum OriginIs {
    Absent,
    Same,
    Allowed(HeaderValue),
    Refused,
}

fn origin_of(headers: &HeaderMap, allow: &Allow) -> OriginIs {
    let Some(origin) = headers.get(header::ORIGIN) else {
        return OriginIs::Absent;
    };
    let Ok(text) = origin.to_str() else {
        return OriginIs::Refused;
    };
    let text = text.trim().trim_end_matches('/').to_ascii_lowercase();
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_ascii_lowercase);
    let authority = text.split_once("://").map(|(_, a)| a);
    if authority.is_some() && authority == host.as_deref() {
        return OriginIs::Same;
    }
    if allow.cross_origin_allowed(&text) {
        return OriginIs::Allowed(origin.clone());
    }
    OriginIs::Refused
}

/// Checks `Host` and `Origin`, answers CORS preflights, adds CORS headers (module doc).
pub(super) async fn guard(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    let headers = request.headers();
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(host_name);
    if !host
        .as_deref()
        .is_some_and(|h| app.options.allow.host_allowed(h))
    {
        return refused(
            &app,
            format!(
                "Host {:?} is not one this server answers to (DNS rebinding protection); start it with --http-allow-host NAME",
                host.unwrap_or_default()
            ),
        );
    }
    let origin = origin_of(headers, &app.options.allow);
    if origin == OriginIs::Refused {
        return refused(
            &app,
            "this Origin may not call the server; start it with --http-allow-origin ORIGIN"
                .to_owned(),
        );
    }
    let preflight = request.method() == Method::OPTIONS
        && headers.contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
    let mut response = if preflight {
        (
            StatusCode::NO_CONTENT,
            [
                (
                    header::ACCESS_CONTROL_ALLOW_METHODS,
                    "GET, POST, PUT, PATCH, DELETE, OPTIONS",
                ),
                (
                    header::ACCESS_CONTROL_ALLOW_HEADERS,
                    "authorization, content-type, mcp-session-id, mcp-protocol-version, last-event-id",
                ),
                (header::ACCESS_CONTROL_MAX_AGE, "600"),
            ],
        )
            .into_response()
    } else {
        next.run(request).await
    };
    if let OriginIs::Allowed(origin) = origin {
        let h = response.headers_mut();
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        h.insert(header::VARY, HeaderValue::from_static("origin"));
        h.insert(
            header::ACCESS_CONTROL_EXPOSE_HEADERS,
            HeaderValue::from_static("mcp-session-id, retry-after, www-authenticate"),
        );
    }
    response
}

fn refused(app: &App, message: String) -> Response {
    app.shared.metrics.count_error(Code::Forbidden);
    fail_response(Fail::new(Code::Forbidden, message))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names_lose_their_port_and_brackets() {
        assert_eq!(host_name("127.0.0.1:7734"), "127.0.0.1");
        assert_eq!(host_name("[::1]:7734"), "::1");
        assert_eq!(host_name("LocalHost"), "localhost");
        assert_eq!(host_name("evil.example:80"), "evil.example");
    }

    #[test]
    fn an_origin_is_the_servers_own_on_the_list_or_refused() {
        let listen: std::net::SocketAddr = "0.0.0.0:7734".parse().unwrap();
        let allow = Allow::new(&listen, &[], &["https://App.example.com/".to_owned()]);
        assert!(
            !allow.host_allowed("0.0.0.0"),
            "all addresses is not a name"
        );
        let headers = |origin: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::HOST, HeaderValue::from_static("127.0.0.1:7734"));
            h.insert(header::ORIGIN, HeaderValue::from_str(origin).unwrap());
            h
        };
        assert_eq!(
            origin_of(&headers("http://127.0.0.1:7734"), &allow),
            OriginIs::Same
        );
        assert!(matches!(
            origin_of(&headers("https://app.example.com"), &allow),
            OriginIs::Allowed(_)
        ));
        for refused in ["http://127.0.0.1:9999", "http://evil.example", "null"] {
            assert_eq!(origin_of(&headers(refused), &allow), OriginIs::Refused);
        }
        assert_eq!(origin_of(&HeaderMap::new(), &allow), OriginIs::Absent);
    }
}
