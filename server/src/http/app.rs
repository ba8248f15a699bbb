//! What every HTTP route shares (`crate::http`): the app state, a connection's state, the
//! allowlists, the bearer token, bodies within their limits, and responses with the error
//! JSON and its status. Imports no other module of `http` but the MCP session table.

use super::sessions::Sessions;
use crate::args::{Code, Fail, Outcome};
use crate::dispatch::Shared;
use axum::body::Bytes;
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use parking_lot::Mutex;
use serde_json::{Map, Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;
use tokio::sync::OwnedSemaphorePermit;

/// What every route reaches.
pub(crate) struct App {
    pub(crate) shared: Arc<Shared>,
    pub(crate) options: HttpOptions,
    pub(crate) mcp: Sessions,
}

/// What an HTTP listener is configured with beyond the server's limits and tokens.
pub struct HttpOptions {
    /// The `Host` and `Origin` allowlists (`docs/http.md`, "Safety").
    pub allow: Allow,
    /// TLS, when `--tls-cert` and `--tls-key` are given.
    pub tls: Option<tokio_rustls::TlsAcceptor>,
}

impl HttpOptions {
    /// Reads a PEM certificate chain and private key for TLS.
    ///
    /// # Errors
    /// A file cannot be read, holds no certificate or key, or rustls refuses them.
    pub fn tls(
        cert: &std::path::Path,
        key: &std::path::Path,
    ) -> anyhow::Result<tokio_rustls::TlsAcceptor> {
        use anyhow::Context;
        use tokio_rustls::rustls::pki_types::pem::PemObject;
        use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
            .with_context(|| format!("reading the certificate {}", cert.display()))?
            .collect::<Result<_, _>>()
            .with_context(|| format!("parsing the certificate {}", cert.display()))?;
        anyhow::ensure!(!certs.is_empty(), "{} holds no certificate", cert.display());
        let key = PrivateKeyDer::from_pem_file(key)
            .with_context(|| format!("reading the private key {}", key.display()))?;
        let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
        let config = tokio_rustls::rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .context("TLS protocol versions")?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .context("the TLS certificate and key")?;
        Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
    }
}

/// One connection's state, which its requests update: whether it has authenticated (its
/// `max_unauthenticated` permit is given back then), how many requests are in flight, and
/// when the last one ended.
pub(crate) struct ConnState {
    pub(super) pre_auth: Mutex<Option<OwnedSemaphorePermit>>,
    pub(super) in_flight: AtomicUsize,
    pub(super) last_active: Mutex<Instant>,
}

impl ConnState {
    /// A request of this connection presented a valid token (or none was needed).
    pub(crate) fn authenticated(&self) {
        self.pre_auth.lock().take();
    }

    pub(super) fn started(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(Arc::clone(self))
    }
}

/// A request in flight; when it ends, the connection's idle time starts again.
pub(crate) struct InFlight(Arc<ConnState>);

impl Drop for InFlight {
    fn drop(&mut self) {
        *self.0.last_active.lock() = Instant::now();
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The `Host` names and cross-origin `Origin`s a listener accepts.
#[derive(Debug, Clone)]
pub struct Allow {
    /// Host names (no port), lowercase: `localhost`, `127.0.0.1`, `::1` and any given.
    pub hosts: Vec<String>,
    /// Origins allowed cross-origin (`https://app.example.com`), lowercase, no trailing `/`.
    pub origins: Vec<String>,
}

impl Allow {
    /// Loopback names, the listen address (when it is one address, not all), and `hosts` /
    /// `origins` as given.
    #[must_use]
    pub fn new(listen: &std::net::SocketAddr, hosts: &[String], origins: &[String]) -> Allow {
        let mut all: Vec<String> = ["localhost", "127.0.0.1", "::1"]
            .iter()
            .map(|h| (*h).to_owned())
            .collect();
        if !listen.ip().is_unspecified() {
            all.push(listen.ip().to_string());
        }
        all.extend(hosts.iter().map(|h| h.trim().to_ascii_lowercase()));
        Allow {
            hosts: all,
            origins: origins
                .iter()
                .map(|o| o.trim().trim_end_matches('/').to_ascii_lowercase())
                .collect(),
        }
    }

    pub(super) fn host_allowed(&self, host: &str) -> bool {
        self.hosts.iter().any(|h| h == host)
    }

    pub(super) fn cross_origin_allowed(&self, origin: &str) -> bool {
        self.origins.iter().any(|o| o == origin)
    }
}

/// The session of a request from its bearer token (module doc of `guard.rs`: the token is
/// checked on every route but the probes). `vmm_shapes` for MCP's.
pub(super) fn authenticate(
    app: &App,
    request: &Request,
    vmm_shapes: bool,
) -> Result<crate::commands::Session, Box<Response>> {
    let token = bearer(request.headers());
    match app.shared.session_for(token, vmm_shapes) {
        Ok(session) => {
            if let Some(state) = request.extensions().get::<Arc<ConnState>>() {
                state.authenticated();
            }
            Ok(session)
        }
        Err(f) => {
            app.shared.metrics.count_error(f.code);
            Err(Box::new(fail_response(f)))
        }
    }
}

/// The token of `Authorization: Bearer <token>`.
pub(super) fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then_some(token.trim())
}

/// Reads a JSON object body within the size limit and the slow-client deadline: empty is `{}`;
/// over the limit `413`, too slow `408`, not JSON `400`, not `application/json` `415`.
pub(super) async fn read_body(
    shared: &Shared,
    headers: &HeaderMap,
    body: axum::body::Body,
) -> Result<Map<String, Value>, Box<Response>> {
    body_args(shared, headers, body)
        .await
        .map_err(|(status, f)| refused_with(shared, status, f))
}

/// A body's bytes, within the limits (`read_body`).
pub(super) async fn read_bytes(
    shared: &Shared,
    headers: &HeaderMap,
    body: axum::body::Body,
) -> Result<Bytes, Box<Response>> {
    body_bytes(shared, headers, body)
        .await
        .map_err(|(status, f)| refused_with(shared, status, f))
}

/// `read_body`'s arguments, or the status and failure of a body refused: for routes that
/// answer failures in a shape of their own (MemFuse's envelope).
pub(super) async fn body_args(
    shared: &Shared,
    headers: &HeaderMap,
    body: axum::body::Body,
) -> Result<Map<String, Value>, (StatusCode, Fail)> {
    let bytes = body_bytes(shared, headers, body).await?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(Map::new());
    }
    let bad = |m: String| (StatusCode::BAD_REQUEST, Fail::new(Code::BadRequest, m));
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(bad("the body is one JSON object of arguments".to_owned())),
        Err(e) => Err(bad(format!("the body is not JSON: {e}"))),
    }
}

async fn body_bytes(
    shared: &Shared,
    headers: &HeaderMap,
    body: axum::body::Body,
) -> Result<Bytes, (StatusCode, Fail)> {
    use http_body_util::BodyExt as _;
    let limit = shared.limits.max_line_bytes;
    let limited = http_body_util::Limited::new(body, limit);
    let collected = tokio::time::timeout(shared.limits.slow_client_timeout, limited.collect());
    let bytes = match collected.await {
        Err(_) => {
            let mut f = Fail::new(
                Code::Timeout,
                format!(
                    "the body did not arrive within {:?}",
                    shared.limits.slow_client_timeout
                ),
            );
            f.body
                .insert("timeout".into(), json!("slow_client_timeout"));
            return Err((StatusCode::REQUEST_TIMEOUT, f));
        }
        Ok(Err(e))
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some() =>
        {
            let f = Fail::new(
                Code::LimitExceeded,
                format!("the body is over the limit of {limit} bytes (max_line_bytes)"),
            );
            return Err((StatusCode::PAYLOAD_TOO_LARGE, f));
        }
        Ok(Err(e)) => {
            let f = Fail::new(Code::BadRequest, format!("reading the body: {e}"));
            return Err((StatusCode::BAD_REQUEST, f));
        }
        Ok(Ok(c)) => c.to_bytes(),
    };
    if !bytes.is_empty() && !is_json(headers) {
        let f = Fail::new(
            Code::BadRequest,
            "the body must be JSON: send Content-Type: application/json",
        );
        return Err((StatusCode::UNSUPPORTED_MEDIA_TYPE, f));
    }
    Ok(bytes)
}

/// A refused body's response: its failure, counted, under `status`.
fn refused_with(shared: &Shared, status: StatusCode, f: Fail) -> Box<Response> {
    let mut r = refuse(shared, f);
    *r.status_mut() = status;
    r
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| {
            let t = t.trim().to_ascii_lowercase();
            t == "application/json" || t.ends_with("+json")
        })
}

pub(super) fn refuse(shared: &Shared, f: Fail) -> Box<Response> {
    shared.metrics.count_error(f.code);
    Box::new(fail_response(f))
}

/// A command's reply as a response: 200 and the reply, or the failure's status and body.
pub(super) fn reply_response(reply: Outcome) -> Response {
    match reply {
        Ok(body) => json_response(StatusCode::OK, &body),
        Err(f) => fail_response(f),
    }
}

/// A failure as a response: its status (`Code::http_status`), its JSON body, and the headers
/// a status asks for (`WWW-Authenticate` on 401, `Retry-After` on 429).
pub(crate) fn fail_response(f: Fail) -> Response {
    let status =
        StatusCode::from_u16(f.code.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let retry_after = f
        .body
        .get("retry_after_ms")
        .and_then(Value::as_f64)
        .map(|ms| (ms / 1000.0).ceil().max(1.0) as u64);
    let mut response = json_response(status, &Value::Object(f.body));
    let h = response.headers_mut();
    match status {
        StatusCode::UNAUTHORIZED => {
            h.insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"amberdb\""),
            );
        }
        StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE => {
            if let Some(s) = retry_after.or(Some(1)) {
                h.insert(header::RETRY_AFTER, HeaderValue::from(s));
            }
        }
        _ => {}
    }
    response
}

/// A JSON body with its status.
pub(crate) fn json_response(status: StatusCode, body: &Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bearer_token_is_read_from_its_header_whatever_the_scheme_case() {
        let mut h = HeaderMap::new();
        assert_eq!(bearer(&h), None);
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("bearer  abc "),
        );
        assert_eq!(bearer(&h), Some("abc"));
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic abc"));
        assert_eq!(bearer(&h), None);
    }
}
