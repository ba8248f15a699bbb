//! The TCP line-protocol server (`amberdb serve`), on tokio.
//!
//! Each connection is one task that reads bytes, cuts complete lines, runs them **in order**
//! as one batch on the blocking pool (store calls fsync), and writes the batch's replies with
//! one write. A pipelining client therefore gets its replies in request order, and a batch of
//! up to `max_pipelined` requests (or up to 1 MiB of replies, `MAX_BATCH_REPLY_BYTES`; the
//! rest run next) costs one wake-up, one write and **one fsync**: the batch runs inside
//! `Store::durable_batch`, so its writes share one fsync that completes before any reply is
//! sent (acknowledged still means durable). If that fsync fails, the batch's replies are
//! withheld, one `unavailable` error is sent and the connection closes. While a batch runs the
//! connection reads nothing more, so a client that never reads its replies is held back by
//! TCP, never by our memory.
//!
//! Limits (`docs/protocol.md`, "Limits"), each answered with an error line and never affecting
//! other connections: a line over `max_line_bytes` is answered `line_too_long` and skipped up
//! to its newline; more than `max_connections` get `too_many_connections` and are closed;
//! a connection silent for `idle_timeout`, or holding a half-sent line with no line completed
//! for `slow_client_timeout`, gets `timeout` and is closed, as is one that does not take its
//! replies within `slow_client_timeout`. At end of input (a half-closed socket) the last line
//! counts even without its newline, every line read is answered, then the socket closes.
//!
//! Capacity (`docs/protocol.md`, "Capacity"): at most `max_running` batches run at once and
//! `max_queued` wait; a batch past that is answered `busy` without running. A batch gives its
//! running slot up before it waits for its fsync.
//!
//! Shutdown: [`serve`] stops accepting when `shutdown` resolves, lets each connection answer
//! the lines it has read, closes them, and returns once all are gone (or after `grace`).
//! The caller then makes the store durable and checkpoints (`run_server`).

use crate::args::{Code, Fail};
use crate::commands::{self, Ctx, Session};
use crate::framing::{Framer, Line};
pub use crate::limits::{Admission, Limits};
use crate::protocol;
use sha2::{Digest, Sha256};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc, watch};

/// Whether a line is answered without the store (PING, STATS, HELP, AUTH, QUIT): a batch of
/// only these skips admission. Reads the command word only: the line's arguments are parsed
/// once, when it runs.
fn is_control(line: &Line) -> bool {
    let Line::Request(bytes) = line else {
        return false;
    };
    protocol::command_word(bytes)
        .and_then(commands::find)
        .is_some_and(|c| matches!(c.name, "PING" | "STATS" | "HELP" | "AUTH" | "QUIT"))
}

/// Whether a line is a search that reads the keyword index: `SEARCH_MEMORIES` with mode
/// keyword or hybrid, `QUERY` with store type keyword or hybrid. Asked only while the index is
/// being built after the open (`durability.md`, R9): a batch holding one waits for the build
/// before it takes a running slot, so keyword searches cannot hold every slot for seconds
/// while gets, writes and vector searches queue behind them.
fn uses_keyword_index(line: &Line) -> bool {
    let Line::Request(bytes) = line else {
        return false;
    };
    let Ok(Some(request)) = protocol::parse(bytes) else {
        return false;
    };
    let field = match commands::find(&request.command).map(|c| c.name) {
        Some("SEARCH_MEMORIES") => "mode",
        Some("QUERY") => "store_type",
        _ => return false,
    };
    request
        .args
        .get(field)
        .and_then(|v| v.as_str())
        .is_some_and(|v| v.eq_ignore_ascii_case("keyword") || v.eq_ignore_ascii_case("hybrid"))
}

/// Failed AUTH attempts a connection gets before it is closed.
pub const MAX_AUTH_FAILURES: u32 = 3;

/// The tokens a server accepts. Kept as SHA-256 digests; compared in constant time.
#[derive(Clone, Default)]
pub struct Auth {
    tokens: Vec<([u8; 32], Option<String>)>,
}

impl std::fmt::Debug for Auth {
    /// Never prints a token, nor its digest.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Auth {{ {} tokens, {} user-bound }}",
            self.tokens.len(),
            self.tokens.iter().filter(|t| t.1.is_some()).count()
        )
    }
}

impl Auth {
    /// No tokens: every connection is trusted (loopback use).
    #[must_use]
    pub fn none() -> Auth {
        Auth::default()
    }

    /// Adds a token; `user` binds it to one user.
    pub fn add(&mut self, token: &str, user: Option<String>) {
        self.tokens
            .push((Sha256::digest(token.as_bytes()).into(), user));
    }

    /// Whether any token is configured.
    #[must_use]
    pub fn enabled(&self) -> bool {
        !self.tokens.is_empty()
    }

    /// How many tokens, and how many of them are user-bound.
    #[must_use]
    pub fn counts(&self) -> (usize, usize) {
        (
            self.tokens.len(),
            self.tokens.iter().filter(|t| t.1.is_some()).count(),
        )
    }

    /// The session a token opens: `Some(None)` for a shared secret, `Some(Some(user))` for a
    /// user-bound token, `None` for a wrong one. Every configured token is compared, each in
    /// constant time over its SHA-256 digest, so neither the match nor its position leaks.
    #[must_use]
    pub fn check(&self, token: &str) -> Option<Option<String>> {
        let given: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let mut found = None;
        for (digest, user) in &self.tokens {
            let diff = digest
                .iter()
                .zip(given.iter())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b));
            if std::hint::black_box(diff) == 0 && found.is_none() {
                found = Some(user.clone());
            }
        }
        found
    }
}

/// Everything a connection needs.
pub struct Shared {
    /// Store and counters.
    pub ctx: Ctx,
    /// Limits.
    pub limits: Limits,
    /// Tokens.
    pub auth: Auth,
    /// Capacity: running and queued batches.
    pub admission: Arc<Admission>,
}

impl Shared {
    /// The server's state over a store.
    #[must_use]
    pub fn new(ctx: Ctx, limits: Limits, auth: Auth) -> Shared {
        let admission = Arc::new(Admission::new(&limits));
        // STATS (a command, which sees only `ctx`) reports the gauges.
        let _ = ctx.metrics.admission.set(Arc::clone(&admission));
        Shared {
            admission,
            ctx,
            limits,
            auth,
        }
    }
}

/// Serves `listener` until `shutdown` resolves, then drains connections (module doc).
///
/// # Errors
/// None today: accept errors (e.g. out of file descriptors) are logged and retried.
pub async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let slots = Arc::new(Semaphore::new(shared.limits.max_connections));
    // Connections that have not authenticated yet (tokens configured) have a cap of their
    // own, so that anyone who can connect cannot take every slot (docs/reliability.md).
    let unauthed = Arc::new(Semaphore::new(shared.limits.max_unauthenticated));
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
                    match Arc::clone(&unauthed).try_acquire_owned() {
                        Ok(p) => Some(Some(p)),
                        Err(_) => None,
                    }
                } else {
                    Some(None)
                };
                match (Arc::clone(&slots).try_acquire_owned(), pre_auth) {
                    (Ok(permit), Some(pre_auth)) => {
                        let stop = stop_rx.clone();
                        let alive = alive_tx.clone();
                        tokio::spawn(async move {
                            let m = &shared.ctx.metrics;
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
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?;
        let listener = runtime.block_on(TcpListener::bind("127.0.0.1:0"))?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let served = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("amberdb-serve".into())
            .spawn(move || {
                let done = runtime.block_on(serve(listener, served, async {
                    let _ = stopped.await;
                }));
                if let Err(e) = done {
                    tracing::error!(error = %e, "the embedded server stopped");
                }
            })?;
        Ok(Running {
            addr,
            shared,
            stop: Some(stop),
            thread: Some(thread),
        })
    }
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
    let m = &shared.ctx.metrics;
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
    let mut session = Session {
        authed: !shared.auth.enabled(),
        user: None,
        vmm_shapes: false,
    };
    let mut auth_failures = 0u32;
    let mut framer = Framer::new(limits.max_line_bytes);
    let mut chunk = vec![0u8; 64 * 1024];
    let mut partial_since: Option<Instant> = None;
    let mut eof = false;
    let mut pending: Vec<Line> = Vec::new();
    loop {
        // Cut the complete lines in the buffer (at most a batch of them).
        // Lines left over from the last batch (its replies filled the buffer) run first.
        let mut lines = std::mem::take(&mut pending);
        let room = limits.max_pipelined.saturating_sub(lines.len());
        if framer.cut(&mut lines, room, eof) {
            // A line arrived whole: the client is not stalling, whatever it sends next.
            partial_since = None;
        }
        if !lines.is_empty() {
            let batch = run_batch(shared, session, auth_failures, lines).await;
            pending = batch.rest;
            session = batch.session;
            auth_failures = batch.auth_failures;
            if session.authed {
                // Authenticated: no longer counted among those that have not.
                pre_auth = None;
            }
            shared
                .ctx
                .metrics
                .bytes_out
                .fetch_add(batch.out.len() as u64, Ordering::Relaxed);
            let written =
                tokio::time::timeout(limits.slow_client_timeout, wr.write_all(&batch.out)).await;
            if !matches!(written, Ok(Ok(()))) {
                tracing::debug!("client did not take its replies; closing");
                break;
            }
            if batch.close {
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
                    shared.ctx.metrics.count_error(Code::Timeout);
                    let mut f = Fail::new(Code::Timeout, message);
                    f.body.insert("timeout".into(), code.into());
                    let mut out = Vec::new();
                    protocol::write_reply(&mut out, false, None, f.into_reply().into());
                    let _ = tokio::time::timeout(Duration::from_secs(1), wr.write_all(&out)).await;
                    break;
                }
                Ok(Ok(0)) => eof = true,
                Ok(Ok(n)) => {
                    shared.ctx.metrics.bytes_in.fetch_add(n as u64, Ordering::Relaxed);
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

struct Batch {
    session: Session,
    auth_failures: u32,
    out: Vec<u8>,
    close: bool,
    /// Lines not run because the replies reached [`MAX_BATCH_REPLY_BYTES`].
    rest: Vec<Line>,
}

/// Reply bytes after which a batch stops and sends what it has; its remaining lines run in
/// the next batch. Bounds what one connection makes the server hold: a pipeline of large
/// replies (50 memories of 10,000 characters each) is sent a megabyte or so at a time instead
/// of `max_pipelined` of them at once.
const MAX_BATCH_REPLY_BYTES: usize = 1 << 20;

/// Runs a batch of lines in order on the blocking pool.
async fn run_batch(
    shared: &Arc<Shared>,
    session: Session,
    auth_failures: u32,
    lines: Vec<Line>,
) -> Batch {
    // Keyword searches wait for the keyword index built after the open outside any slot
    // (the lines are parsed once, and only while it is being built).
    if !shared.ctx.store.lexical_ready() && lines.iter().any(uses_keyword_index) {
        while !shared.ctx.store.lexical_ready() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    // A batch of control commands never waits for capacity: STATS and PING answer during
    // overload (they read counters, not memories).
    let admitted = if lines.iter().all(is_control) {
        None
    } else {
        match shared.admission.admit().await {
            Some(a) => Some(a),
            None => return busy(shared, session, auth_failures, &lines),
        }
    };
    let shared = Arc::clone(shared);
    let fallback = session.clone();
    let task = tokio::task::spawn_blocking(move || {
        let (_ticket, running) = admitted.map(|a| (a.ticket, a.running)).unzip();
        let mut batch = Batch {
            session,
            auth_failures,
            out: Vec::new(),
            close: false,
            rest: Vec::new(),
        };
        // One fsync for the whole batch, before any of its replies leaves (module doc).
        let ((), pending) = shared.ctx.store.deferred_batch(|store| {
            // The batch's commands write through its handle: acknowledged once appended, made
            // durable together below.
            let ctx = Ctx {
                store: store.clone(),
                metrics: Arc::clone(&shared.ctx.metrics),
            };
            let mut lines = lines.into_iter();
            for line in lines.by_ref() {
                execute(&shared, &ctx, &mut batch, &line);
                if batch.close {
                    return;
                }
                if batch.out.len() >= MAX_BATCH_REPLY_BYTES {
                    break;
                }
            }
            batch.rest = lines.collect();
        });
        // The requests have run: the CPU slot goes to the next batch while this one waits for
        // its fsync, which concurrent batches share (group commit).
        drop(running);
        if let Err(e) = pending.wait() {
            tracing::error!(error = %e, "a batch could not be made durable; its replies are withheld");
            batch.out.clear();
            let f = Fail::from(e);
            protocol::write_reply(&mut batch.out, false, None, Fail::new(
                f.code,
                "the store could not make this connection's last requests durable: none of their writes is acknowledged; the connection closes",
            ).into_reply().into());
            batch.close = true;
        }
        batch
    });
    match task.await {
        Ok(batch) => batch,
        Err(e) => {
            // A handler panicked: say so, keep the server serving, close this connection.
            tracing::error!(error = %e, "a request panicked");
            let mut out = Vec::new();
            let f = Fail::new(
                Code::Internal,
                "the server failed on this request; the connection closes",
            );
            protocol::write_reply(&mut out, false, None, f.into_reply().into());
            Batch {
                session: fallback,
                auth_failures,
                out,
                close: true,
                rest: Vec::new(),
            }
        }
    }
}

/// Answers every line of a batch that found the queue full `busy`, running none of them (so
/// each reply is an error and nothing changed). The hint is the time the queue ahead of it
/// takes at the median request time: `(max_queued / max_running + 1) × p50`.
fn busy(shared: &Shared, session: Session, auth_failures: u32, lines: &[Line]) -> Batch {
    let metrics = &shared.ctx.metrics;
    let a = &shared.admission;
    let p50_ms = metrics.p50().as_secs_f64() * 1000.0;
    let retry_after_ms = ((a.max_queued / a.max_running + 1) as f64 * p50_ms)
        .ceil()
        .max(1.0);
    let mut out = Vec::new();
    for line in lines {
        let tag = match line {
            Line::Request(bytes) => protocol::parse(bytes).ok().flatten().and_then(|r| r.tag),
            Line::TooLong(_) => None,
        };
        let mut f = Fail::new(
            Code::Busy,
            format!(
                "the server is at capacity ({} running, {} waiting): this request was not run; retry in about {retry_after_ms} ms",
                a.max_running, a.max_queued
            ),
        );
        f.body
            .insert("retry_after_ms".into(), serde_json::json!(retry_after_ms));
        metrics.record(None, Duration::ZERO, Some(Code::Busy));
        protocol::write_reply(&mut out, false, tag.as_deref(), f.into_reply().into());
    }
    Batch {
        session,
        auth_failures,
        out,
        close: false,
        rest: Vec::new(),
    }
}

/// Runs one line and appends its reply.
fn execute(shared: &Shared, ctx: &Ctx, batch: &mut Batch, line: &Line) {
    let metrics = &shared.ctx.metrics;
    let started = Instant::now();
    let bytes = match line {
        Line::TooLong(len) => {
            let f = Fail::new(
                Code::LineTooLong,
                format!(
                    "the line is {len}+ bytes, over the limit of {}; it was skipped up to its newline",
                    shared.limits.max_line_bytes
                ),
            );
            metrics.record(None, started.elapsed(), Some(f.code));
            protocol::write_reply(&mut batch.out, false, None, f.into_reply().into());
            return;
        }
        Line::Request(bytes) => bytes,
    };
    let req = match protocol::parse(bytes) {
        Ok(Some(req)) => req,
        Ok(None) => return,
        Err((tag, f)) => {
            metrics.record(None, started.elapsed(), Some(f.code));
            protocol::write_reply(&mut batch.out, false, tag.as_deref(), f.into_reply().into());
            return;
        }
    };
    let tag = req.tag.as_deref();
    let Some(command) = commands::find(&req.command) else {
        let f = commands::unknown(&req.command);
        metrics.record(None, started.elapsed(), Some(f.code));
        protocol::write_reply(&mut batch.out, false, tag, f.into_reply().into());
        return;
    };
    let result = match command.name {
        "AUTH" => auth(shared, batch, req.args),
        // Checked like every command's: a QUIT with arguments it does not take is refused
        // and the connection stays open.
        "QUIT" => crate::args::Args::checked(req.args, command.args).map(|_| {
            batch.close = true;
            serde_json::json!({"reply": "BYE"})
        }),
        _ => commands::run(ctx, &batch.session, command, req.args),
    };
    match result {
        Ok(body) => {
            metrics.record(Some(command.name), started.elapsed(), None);
            protocol::write_reply(&mut batch.out, true, tag, body);
        }
        Err(f) => {
            metrics.record(Some(command.name), started.elapsed(), Some(f.code));
            if f.code == Code::Internal {
                tracing::warn!(command = command.name, reply = %serde_json::Value::Object(f.body.clone()), "request failed");
            }
            protocol::write_reply(&mut batch.out, false, tag, f.into_reply().into());
        }
    }
}

fn auth(
    shared: &Shared,
    batch: &mut Batch,
    args: serde_json::Map<String, serde_json::Value>,
) -> crate::args::Outcome {
    use crate::args::Arguments as _;
    let token =
        commands::Auth::parse(&mut crate::args::Args::checked(args, commands::Auth::ARGS)?)?.token;
    if !shared.auth.enabled() {
        return Ok(
            serde_json::json!({"reply": "OK", "message": "this server has no token: every connection may run every command"}),
        );
    }
    match shared.auth.check(&token) {
        Some(user) => {
            batch.session = Session {
                authed: true,
                user: user.clone(),
                vmm_shapes: false,
            };
            batch.auth_failures = 0;
            Ok(serde_json::json!({"reply": "OK", "user_id": user}))
        }
        None => {
            batch.auth_failures += 1;
            tracing::warn!(failures = batch.auth_failures, "AUTH with a wrong token");
            let last = batch.auth_failures >= MAX_AUTH_FAILURES;
            batch.close = last;
            Err(Fail::new(
                Code::Unauthorized,
                if last {
                    format!("wrong token, {MAX_AUTH_FAILURES} times: the connection closes")
                } else {
                    "wrong token".to_owned()
                },
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyword_and_hybrid_searches_are_told_apart_from_everything_else() {
        let line = |s: &str| Line::Request(s.as_bytes().to_vec());
        for waits in [
            r#"SEARCH_MEMORIES {"query": "x", "mode": "keyword"}"#,
            r#"@t1 search_memories {"query": "x", "mode": "HYBRID"}"#,
            r#"QUERY {"user_id": "u", "query": "x", "store_type": "keyword"}"#,
        ] {
            assert!(uses_keyword_index(&line(waits)), "{waits}");
        }
        for runs in [
            r#"SEARCH_MEMORIES {"query": "keyword hybrid"}"#,
            r#"SEARCH_MEMORIES {"query": "x", "mode": "text"}"#,
            r#"QUERY {"user_id": "u", "query": "x", "store_type": "vector"}"#,
            r#"STORE_MEMORY {"content": "mode keyword", "mode": "keyword"}"#,
            "PING",
            "SEARCH_MEMORIES {not json",
        ] {
            assert!(!uses_keyword_index(&line(runs)), "{runs}");
        }
        assert!(!uses_keyword_index(&Line::TooLong(10)));
    }

    #[test]
    fn admission_runs_max_running_queues_max_queued_and_refuses_the_rest() {
        let limits = Limits {
            max_running: 2,
            max_queued: 1,
            ..Limits::default()
        };
        let a = Arc::new(Admission::new(&limits));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let first = a.admit().await.expect("a free slot");
            let second = a.admit().await.expect("a free slot");
            let waiting = tokio::spawn({
                let a = Arc::clone(&a);
                async move { a.admit().await.is_some() }
            });
            while a.tickets.available_permits() > 0 {
                tokio::task::yield_now().await;
            }
            assert!(a.admit().await.is_none(), "the queue is full: busy");
            drop(first);
            assert!(
                waiting.await.unwrap(),
                "the queued batch runs once a slot frees"
            );
            assert_eq!(
                a.tickets.available_permits(),
                2,
                "a finished batch gives its ticket back"
            );
            drop(second);
            assert!(a.admit().await.is_some());
        });
    }

    #[test]
    fn tokens_match_exactly_and_bind_their_user() {
        let mut auth = Auth::none();
        assert!(!auth.enabled());
        auth.add("shared-secret", None);
        auth.add("ada-token", Some("ada".into()));
        assert_eq!(auth.check("shared-secret"), Some(None));
        assert_eq!(auth.check("ada-token"), Some(Some("ada".into())));
        assert_eq!(auth.check("ada-token "), None);
        assert_eq!(auth.check(""), None);
        assert!(!format!("{auth:?}").contains("secret"));
    }
}
