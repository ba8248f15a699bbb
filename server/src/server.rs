//! The TCP line-protocol server (`amberdb serve`), on tokio.
//!
//! Framing only: each connection is one task that reads bytes, cuts complete lines, parses
//! them, hands them to the one dispatch (`crate::dispatch::run`) as a batch, and writes the
//! batch's replies with one write. The dispatch runs them **in order** on the blocking pool, so
//! a pipelining client gets its replies in request order, and a batch of up to
//! `max_pipelined` requests (or up to 1 MiB of replies, `dispatch::MAX_BATCH_REPLY_BYTES`; the
//! rest run next) costs one wake-up, one write and **one fsync**, which completes before any
//! reply is sent (acknowledged still means durable). If that fsync fails, the batch's replies
//! are withheld, one `unavailable` error is sent and the connection closes. While a batch runs the
//! connection reads nothing more, so a client that never reads its replies is held back by
//! TCP, never by our memory.
//!
//! Limits (`docs/protocol.md`, "Limits"), each answered with an error line and never affecting
//! other connections: a line over `max_line_bytes` is answered `line_too_long` and skipped up
//! to its newline; more than `max_connections` (counted with HTTP's connections, one cap for
//! the server) get `too_many_connections` and are closed;
//! a connection silent for `idle_timeout`, or holding a half-sent line with no line completed
//! for `slow_client_timeout`, gets `timeout` and is closed, as is one that does not take its
//! replies within `slow_client_timeout`. At end of input (a half-closed socket) the last line
//! counts even without its newline, every line read is answered, then the socket closes.
//!
//! Capacity (`docs/protocol.md`, "Capacity", enforced by the dispatch): at most
//! `max_running` batches run at once and `max_queued` wait; a batch past that is answered
//! `busy` without running. A batch gives its running slot up before it waits for its fsync.
//!
//! Shutdown: [`serve`] stops accepting when `shutdown` resolves, lets each connection answer
//! the lines it has read, closes them, and returns once all are gone (or after `grace`).
//! The caller then makes the store durable and checkpoints (`run_server`).

use crate::args::{Code, Fail, Outcome};
use crate::dispatch::{self, Conn, Item, Replies, Request, Shared};
use crate::framing::{Framer, Line};
use crate::protocol;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

/// Serves `listener` until `shutdown` resolves, then drains connections (module doc).
///
/// # Errors
/// None today: accept errors (e.g. out of file descriptors) are logged and retried.
pub async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let (stop_tx, stop_rx) = watch::channel(false);
    let (alive_tx, mut alive_rx) = mpsc::channel::<()>(1);
    let mut accept_errors = AcceptErrors::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(a) => {
                        accept_errors.ok();
                        a
                    }
                    Err(e) => {
                        accept_errors.failed(&listener, &e, &shared).await;
                        continue;
                    }
                };
                let shared = Arc::clone(&shared);
                let pre_auth = if shared.auth.enabled() {
                    match Arc::clone(&shared.unauthenticated).try_acquire_owned() {
                        Ok(p) => Some(Some(p)),
                        Err(_) => None,
                    }
                } else {
                    Some(None)
                };
                match (Arc::clone(&shared.connections).try_acquire_owned(), pre_auth) {
                    (Ok(permit), Some(pre_auth)) => {
                        let stop = stop_rx.clone();
                        let alive = alive_tx.clone();
                        tokio::spawn(async move {
                            let m = &shared.metrics;
                            m.connections_open.fetch_add(1, Ordering::Relaxed);
                            m.connections_total.fetch_add(1, Ordering::Relaxed);
                            tracing::debug!(%peer, "connection opened");
                            connection(stream, &shared, stop, pre_auth).await;
                            tracing::debug!(%peer, "connection closed");
                            m.connections_open.fetch_sub(1, Ordering::Relaxed);
                            drop(permit);
                            drop(alive);
                        });
                    }
                    (slot, pre_auth) => {
                        drop(slot);
                        let unauthenticated = pre_auth.is_none();
                        tokio::spawn(refuse(stream, peer, shared, unauthenticated));
                    }
                }
            }
        }
    }
    tracing::info!("shutting down: no new connections; answering what was read");
    drop(listener);
    let _ = stop_tx.send(true);
    drop(alive_tx);
    if tokio::time::timeout(shared.limits.shutdown_grace, alive_rx.recv())
        .await
        .is_err()
    {
        tracing::warn!(
            grace = ?shared.limits.shutdown_grace,
            "connections still busy after the grace period; closing them"
        );
    }
    Ok(())
}

/// A server on its own tokio runtime and thread, listening on `127.0.0.1:0`, for a process
/// that embeds it (tests, benches): it stops, draining its connections, when dropped.
pub struct Running {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Where it serves HTTP (`Running::start_with_http`).
    pub http: Option<SocketAddr>,
    /// Its state: the store, counters, limits.
    pub shared: Arc<Shared>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Running {
    /// Starts serving `shared` on a loopback port.
    ///
    /// # Errors
    /// The runtime or the listener could not be made.
    pub fn start(shared: Arc<Shared>) -> std::io::Result<Running> {
        Running::start_serving(shared, false)
    }

    /// As `start`, serving HTTP too on another loopback port (`http`).
    ///
    /// # Errors
    /// The runtime or a listener could not be made.
    #[cfg(feature = "http")]
    pub fn start_with_http(shared: Arc<Shared>) -> std::io::Result<Running> {
        Running::start_serving(shared, true)
    }

    fn start_serving(shared: Arc<Shared>, with_http: bool) -> std::io::Result<Running> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?;
        let listener = runtime.block_on(TcpListener::bind("127.0.0.1:0"))?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (stop_http, http_stopped) = watch::channel(false);
        let http = if with_http {
            spawn_http(&runtime, &shared, http_stopped)?
        } else {
            None
        };
        let served = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("amberdb-serve".into())
            .spawn(move || {
                let done = runtime.block_on(serve(listener, served, async {
                    let _ = stopped.await;
                    let _ = stop_http.send(true);
                }));
                if let Err(e) = done {
                    tracing::error!(error = %e, "the embedded server stopped");
                }
            })?;
        Ok(Running {
            addr,
            http,
            shared,
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

/// Serves HTTP on another loopback port of `runtime` until `stop` (`Running::start_with_http`).
#[cfg(feature = "http")]
fn spawn_http(
    runtime: &tokio::runtime::Runtime,
    shared: &Arc<Shared>,
    stop: watch::Receiver<bool>,
) -> std::io::Result<Option<SocketAddr>> {
    let listener = runtime.block_on(TcpListener::bind("127.0.0.1:0"))?;
    let bound = listener.local_addr()?;
    let options = crate::http::HttpOptions {
        allow: crate::http::Allow::new(&bound, &[], &[]),
        tls: None,
    };
    runtime.spawn(crate::http::serve(
        listener,
        Arc::clone(shared),
        options,
        stop,
    ));
    Ok(Some(bound))
}

#[cfg(not(feature = "http"))]
fn spawn_http(
    _: &tokio::runtime::Runtime,
    _: &Arc<Shared>,
    _: watch::Receiver<bool>,
) -> std::io::Result<Option<SocketAddr>> {
    Ok(None)
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Accept failures, answered without flooding the log: the accept loop backs off (20 ms
/// doubling to 1 s) while they last and logs at most one line every 10 s. Out of
/// descriptors, it gives up a spare one to take the waiting connection and answer it
/// `too_many_connections` instead of leaving it unanswered in the backlog.
struct AcceptErrors {
    in_a_row: u32,
    unlogged: u64,
    logged_at: Option<Instant>,
    spare: Option<std::fs::File>,
}

impl AcceptErrors {
    fn new() -> AcceptErrors {
        AcceptErrors {
            in_a_row: 0,
            unlogged: 0,
            logged_at: None,
            spare: std::fs::File::open("/dev/null").ok(),
        }
    }

    fn ok(&mut self) {
        self.in_a_row = 0;
        if self.spare.is_none() {
            self.spare = std::fs::File::open("/dev/null").ok();
        }
    }

    async fn failed(&mut self, listener: &TcpListener, e: &std::io::Error, shared: &Arc<Shared>) {
        self.in_a_row = self.in_a_row.saturating_add(1);
        self.unlogged += 1;
        if self
            .logged_at
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(10))
        {
            tracing::warn!(error = %e, failures = self.unlogged, "accept failed; backing off");
            self.logged_at = Some(Instant::now());
            self.unlogged = 0;
        }
        if matches!(e.raw_os_error(), Some(23 | 24)) && self.spare.take().is_some() {
            // The spare descriptor is free now: take the waiting client and tell it.
            if let Ok(Ok((stream, peer))) =
                tokio::time::timeout(Duration::from_millis(10), listener.accept()).await
            {
                refuse(stream, peer, Arc::clone(shared), false).await;
            }
            self.spare = std::fs::File::open("/dev/null").ok();
        }
        let backoff = Duration::from_millis(20 << self.in_a_row.min(6).saturating_sub(1));
        tokio::time::sleep(backoff.min(Duration::from_secs(1))).await;
    }
}

/// Answers a connection over the limit (all connections, or `unauthenticated` ones), then
/// closes it.
async fn refuse(
    mut stream: TcpStream,
    peer: SocketAddr,
    shared: Arc<Shared>,
    unauthenticated: bool,
) {
    let m = &shared.metrics;
    m.connections_refused.fetch_add(1, Ordering::Relaxed);
    m.count_error(Code::TooManyConnections);
    let (max, what) = if unauthenticated {
        (
            shared.limits.max_unauthenticated,
            "connections not yet authenticated",
        )
    } else {
        (shared.limits.max_connections, "connections")
    };
    tracing::debug!(%peer, max, what, "connection refused: too many connections");
    let mut out = Vec::new();
    let fail = Fail::new(
        Code::TooManyConnections,
        format!("the server holds its maximum of {max} {what}; retry later"),
    );
    protocol::write_reply(&mut out, false, None, fail.into_reply().into());
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let _ = stream.write_all(&out).await;
        let _ = stream.shutdown().await;
    })
    .await;
}

/// One connection, until it ends (module doc).
async fn connection(
    stream: TcpStream,
    shared: &Arc<Shared>,
    mut stop: watch::Receiver<bool>,
    mut pre_auth: Option<tokio::sync::OwnedSemaphorePermit>,
) {
    let _ = stream.set_nodelay(true);
    let opened = Instant::now();
    let (mut rd, mut wr) = stream.into_split();
    let limits = &shared.limits;
    let mut conn = Conn {
        session: crate::commands::Session {
            authed: !shared.auth.enabled(),
            ..crate::commands::Session::default()
        },
        auth_failures: 0,
    };
    let mut framer = Framer::new(limits.max_line_bytes);
    let mut chunk = vec![0u8; 64 * 1024];
    let mut partial_since: Option<Instant> = None;
    let mut eof = false;
    let mut pending: Vec<Item> = Vec::new();
    loop {
        // Cut the complete lines in the buffer (at most a batch of them).
        // Lines left over from the last batch (its replies filled the buffer) run first.
        let mut items = std::mem::take(&mut pending);
        let room = limits.max_pipelined.saturating_sub(items.len());
        let mut lines = Vec::new();
        if framer.cut(&mut lines, room, eof) {
            // A line arrived whole: the client is not stalling, whatever it sends next.
            partial_since = None;
        }
        items.extend(lines.into_iter().filter_map(|l| parse_line(shared, l)));
        if !items.is_empty() {
            let ran = dispatch::run(shared, conn, items, LineReplies::default()).await;
            pending = ran.rest;
            conn = ran.conn;
            if conn.session.authed {
                // Authenticated: no longer counted among those that have not.
                pre_auth = None;
            }
            let out = ran.replies.0;
            shared
                .metrics
                .bytes_out
                .fetch_add(out.len() as u64, Ordering::Relaxed);
            let written =
                tokio::time::timeout(limits.slow_client_timeout, wr.write_all(&out)).await;
            if !matches!(written, Ok(Ok(()))) {
                tracing::debug!("client did not take its replies; closing");
                break;
            }
            if ran.close {
                break;
            }
            continue;
        }
        if eof {
            break;
        }
        // Wait for more bytes, or a timeout, or shutdown.
        if !framer.has_partial_line() {
            partial_since = None;
        } else if partial_since.is_none() {
            partial_since = Some(Instant::now());
        }
        let mut deadline = match partial_since {
            Some(t) => t + limits.slow_client_timeout,
            None => Instant::now() + limits.idle_timeout,
        };
        let auth_deadline = pre_auth.as_ref().map(|_| opened + limits.auth_timeout);
        if let Some(d) = auth_deadline {
            deadline = deadline.min(d);
        }
        tokio::select! {
            read = tokio::time::timeout_at(deadline.into(), rd.read(&mut chunk)) => match read {
                Err(_) => {
                    let (code, message) = if auth_deadline.is_some_and(|d| Instant::now() >= d) {
                        ("auth_timeout", format!("not authenticated within {:?} of connecting; closing", limits.auth_timeout))
                    } else if partial_since.is_some() {
                        ("slow_client_timeout", format!("a line stayed half-sent for {:?}; closing", limits.slow_client_timeout))
                    } else {
                        ("idle_timeout", format!("nothing arrived for {:?}; closing", limits.idle_timeout))
                    };
                    shared.metrics.count_error(Code::Timeout);
                    let mut f = Fail::new(Code::Timeout, message);
                    f.body.insert("timeout".into(), code.into());
                    let mut out = Vec::new();
                    protocol::write_reply(&mut out, false, None, f.into_reply().into());
                    let _ = tokio::time::timeout(Duration::from_secs(1), wr.write_all(&out)).await;
                    break;
                }
                Ok(Ok(0)) => eof = true,
                Ok(Ok(n)) => {
                    shared.metrics.bytes_in.fetch_add(n as u64, Ordering::Relaxed);
                    framer.push(&chunk[..n]);
                }
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "read failed; closing");
                    break;
                }
            },
            _ = stop.changed() => break,
        }
    }
    let _ = tokio::time::timeout(Duration::from_secs(1), wr.shutdown()).await;
}

/// A line as the dispatch's request: parsed, or the failure its framing met (`None`: a blank
/// line, which gets no reply).
fn parse_line(shared: &Shared, line: Line) -> Option<Item> {
    match line {
        Line::TooLong(len) => Some(Err((
            None,
            Fail::new(
                Code::LineTooLong,
                format!(
                    "the line is {len}+ bytes, over the limit of {}; it was skipped up to its newline",
                    shared.limits.max_line_bytes
                ),
            ),
        ))),
        Line::Request(bytes) => match protocol::parse(&bytes) {
            Ok(Some(r)) => Some(Ok(Request {
                tag: r.tag,
                command: r.command,
                args: r.args,
            })),
            Ok(None) => None,
            Err(refused) => Some(Err(refused)),
        },
    }
}

/// The line protocol's replies: one JSON line each, encoded as they come.
#[derive(Default)]
struct LineReplies(Vec<u8>);

impl Replies for LineReplies {
    fn push(&mut self, tag: Option<&str>, reply: Outcome) {
        match reply {
            Ok(body) => protocol::write_reply(&mut self.0, true, tag, body),
            Err(f) => protocol::write_reply(&mut self.0, false, tag, f.into_reply().into()),
        }
    }

    fn bytes(&self) -> usize {
        self.0.len()
    }

    fn clear(&mut self) {
        self.0.clear();
    }
}
