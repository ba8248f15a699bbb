//! HTTP/JSON (`amberdb serve --http ADDR`, `docs/http.md`): resource routes over the commands,
//! every command under `POST /v1/commands/{COMMAND}`, MemFuse's routes, MCP over Streamable
//! HTTP at `/mcp`, `/metrics`, `/healthz`, `/readyz` and the inspector page at `/`.
//!
//! Framing only: every request runs through the one dispatch (`crate::dispatch`), so limits,
//! admission, tokens and errors are the line protocol's. Routing is axum's; connections are
//! ours: this accept loop takes each one's permit from the same `max_connections` (and, with
//! tokens, `max_unauthenticated`) as the line protocol, and closes a connection idle for
//! `idle_timeout`, one that sent no request with a valid token within `auth_timeout`, one
//! whose request headers or body stay half-sent for `slow_client_timeout`, and, once closing,
//! one that does not take the response it is sent within `slow_client_timeout`. HTTP/1.1 only,
//! keep-alive on; TLS on rustls when a certificate is given.

mod app;
mod guard;
mod inspector;
mod mcp;
mod memfuse;
pub mod openapi;
mod ops;
mod routes;
mod sessions;
mod table;

use crate::dispatch::Shared;
use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use app::ConnState;
pub use app::{Allow, HttpOptions};

/// Serves HTTP on `listener` until `stop` turns true, then lets each connection finish the
/// request it is answering and closes it (module doc).
pub async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    options: HttpOptions,
    mut stop: watch::Receiver<bool>,
) {
    let tls = options.tls.clone();
    let app = routes::router(Arc::clone(&shared), options);
    let (alive_tx, mut alive_rx) = tokio::sync::mpsc::channel::<()>(1);
    loop {
        let (stream, peer) = tokio::select! {
            _ = stop.changed() => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "HTTP accept failed; backing off");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let pre_auth = if shared.auth.enabled() {
            Arc::clone(&shared.unauthenticated)
                .try_acquire_owned()
                .ok()
                .map(Some)
        } else {
            Some(None)
        };
        let slot = Arc::clone(&shared.connections).try_acquire_owned().ok();
        let (Some(slot), Some(pre_auth)) = (slot, pre_auth) else {
            tokio::spawn(refuse(stream, Arc::clone(&shared)));
            continue;
        };
        let shared = Arc::clone(&shared);
        let app = app.clone();
        let tls = tls.clone();
        let stop = stop.clone();
        let alive = alive_tx.clone();
        tokio::spawn(async move {
            let m = &shared.metrics;
            m.connections_open.fetch_add(1, Ordering::Relaxed);
            m.connections_total.fetch_add(1, Ordering::Relaxed);
            let state = Arc::new(ConnState {
                pre_auth: Mutex::new(pre_auth),
                in_flight: AtomicUsize::new(0),
                last_active: Mutex::new(Instant::now()),
            });
            match tls {
                Some(acceptor) => {
                    let handshake = tokio::time::timeout(
                        shared.limits.slow_client_timeout,
                        acceptor.accept(stream),
                    );
                    match handshake.await {
                        Ok(Ok(stream)) => connection(stream, &shared, app, state, stop).await,
                        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                    }
                }
                None => connection(stream, &shared, app, state, stop).await,
            }
            m.connections_open.fetch_sub(1, Ordering::Relaxed);
            drop(slot);
            drop(alive);
        });
    }
    drop(listener);
    drop(alive_tx);
    if tokio::time::timeout(shared.limits.shutdown_grace, alive_rx.recv())
        .await
        .is_err()
    {
        tracing::warn!("HTTP connections still busy after the grace period; closing them");
    }
}

/// One connection until it ends: hyper serves its requests; a watchdog closes it when idle,
/// unauthenticated too long, or at shutdown (gracefully: a request being answered finishes).
async fn connection<S>(
    stream: S,
    shared: &Arc<Shared>,
    app: axum::Router,
    state: Arc<ConnState>,
    mut stop: watch::Receiver<bool>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    use tower::ServiceExt as _;
    let opened = Instant::now();
    let limits = &shared.limits;
    let service = {
        let state = Arc::clone(&state);
        hyper::service::service_fn(move |mut request: hyper::Request<hyper::body::Incoming>| {
            let in_flight = state.started();
            request.extensions_mut().insert(Arc::clone(&state));
            let app = app.clone();
            async move {
                let response = app.oneshot(request.map(axum::body::Body::new)).await;
                drop(in_flight);
                response
            }
        })
    };
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(limits.slow_client_timeout)
        .keep_alive(true)
        .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
    tokio::pin!(conn);
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    // Once asked to close, a connection gets `slow_client_timeout` to finish the response it
    // is writing; a client that never reads it is then dropped, so it holds no slot for good.
    let mut closing: Option<Instant> = None;
    loop {
        tokio::select! {
            done = conn.as_mut() => {
                if let Err(e) = done {
                    tracing::debug!(error = %e, "HTTP connection ended with an error");
                }
                return;
            }
            _ = tick.tick() => {
                if let Some(since) = closing {
                    if since.elapsed() >= limits.slow_client_timeout {
                        tracing::debug!("client did not take its response; closing");
                        return;
                    }
                    continue;
                }
                let idle = state.in_flight.load(Ordering::Relaxed) == 0
                    && state.last_active.lock().elapsed() >= limits.idle_timeout;
                let unauthenticated = state.pre_auth.lock().is_some()
                    && opened.elapsed() >= limits.auth_timeout;
                if idle || unauthenticated {
                    shared.metrics.count_error(crate::args::Code::Timeout);
                    conn.as_mut().graceful_shutdown();
                    closing = Some(Instant::now());
                }
            }
            _ = stop.changed(), if closing.is_none() => {
                conn.as_mut().graceful_shutdown();
                closing = Some(Instant::now());
            }
        }
    }
}

/// Answers a connection over the cap `503 too_many_connections` and closes it.
async fn refuse(mut stream: TcpStream, shared: Arc<Shared>) {
    let m = &shared.metrics;
    m.connections_refused.fetch_add(1, Ordering::Relaxed);
    m.count_error(crate::args::Code::TooManyConnections);
    let body = crate::args::Fail::new(
        crate::args::Code::TooManyConnections,
        format!(
            "the server holds its maximum of {} connections; retry later",
            shared.limits.max_connections
        ),
    );
    let body = serde_json::Value::Object(body.body).to_string();
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let _ = stream.write_all(response.as_bytes()).await;
        let _ = stream.shutdown().await;
    })
    .await;
}
