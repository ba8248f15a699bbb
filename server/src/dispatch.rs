//! One dispatch for every transport (`docs/protocol.md`, "One dispatch"): the line protocol,
//! MCP (stdio and HTTP) and HTTP hand it parsed requests and frame what it answers; it owns
//! authentication, read-only tokens, admission by capacity, the wait for the keyword index,
//! batching with one fsync, and the request metrics. A command's properties come from its
//! declaration ([`Class`]), never from its name.
//!
//! A batch runs **in order** on the blocking pool inside `Store::deferred_batch`, so its writes
//! share one fsync that completes before any reply is handed back (acknowledged still means
//! durable). If that fsync fails the batch's replies are withheld: the transport gets one
//! `unavailable` failure and is told to close. A batch of control commands only
//! ([`Class::is_control`]) never waits for capacity; any other batch takes an admission
//! ticket, or, when `max_queued` batches wait already, every request is answered `busy` with a
//! retry hint and nothing runs.

use crate::args::{Args, Arguments as _, Code, Fail, Outcome};
use crate::auth::{Auth, Grant};
use crate::commands::{self, Class, Ctx, Session};
pub use crate::limits::{Admission, Limits};
use crate::metrics::Metrics;
use crate::route::{self, Partitions, Route};
use amberdb::Store;
use serde_json::{Map, Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

/// Failed AUTH attempts a connection gets before it is closed.
pub const MAX_AUTH_FAILURES: u32 = 3;

/// Reply bytes after which a batch stops and hands back what it has; its remaining requests
/// run in the next batch. Bounds what one connection makes the server hold: a pipeline of
/// large replies (50 memories of 10,000 characters each) is sent a megabyte or so at a time.
pub const MAX_BATCH_REPLY_BYTES: usize = 1 << 20;

/// Everything a request needs, shared by every transport of one server.
pub struct Shared {
    /// Where requests run: one store, or a cluster node's partitions.
    pub home: Home,
    /// Request counters and latencies (STATS).
    pub metrics: Arc<Metrics>,
    /// Limits.
    pub limits: Limits,
    /// Tokens.
    pub auth: Auth,
    /// Capacity: running and queued batches.
    pub admission: Arc<Admission>,
    /// Connections of every transport: `max_connections` permits.
    pub connections: Arc<Semaphore>,
    /// Connections that have not authenticated yet (tokens configured): a cap of their own,
    /// so that anyone who can connect cannot take every slot (docs/reliability.md).
    pub unauthenticated: Arc<Semaphore>,
}

/// Where a server's requests run (`crate::route`).
#[derive(Clone)]
pub enum Home {
    /// A single node's one store.
    One(Store),
    /// A cluster node: a store per partition, each request routed to its own.
    Cluster(Arc<dyn Partitions>),
}

impl Home {
    /// Every store open here.
    #[must_use]
    pub fn stores(&self) -> Vec<Store> {
        match self {
            Home::One(store) => vec![store.clone()],
            Home::Cluster(partitions) => partitions.stores(),
        }
    }
}

impl Home {
    /// Whether every store's keyword index is built.
    #[must_use]
    pub fn lexical_ready(&self) -> bool {
        match self {
            Home::One(store) => store.lexical_ready(),
            Home::Cluster(partitions) => partitions.stores().iter().all(Store::lexical_ready),
        }
    }
}

impl Shared {
    /// The server's state over a store.
    #[must_use]
    pub fn new(ctx: Ctx, limits: Limits, auth: Auth) -> Shared {
        Shared::over(Home::One(ctx.store), ctx.metrics, limits, auth)
    }

    /// The server's state over `home`.
    #[must_use]
    pub fn over(home: Home, metrics: Arc<Metrics>, limits: Limits, auth: Auth) -> Shared {
        let admission = Arc::new(Admission::new(&limits));
        // STATS (a command, which sees only `ctx`) reports the gauges.
        let _ = metrics.admission.set(Arc::clone(&admission));
        Shared {
            admission,
            connections: Arc::new(Semaphore::new(limits.max_connections)),
            unauthenticated: Arc::new(Semaphore::new(limits.max_unauthenticated)),
            home,
            metrics,
            limits,
            auth,
        }
    }

    /// The session of a request that presented `token` (HTTP's `Authorization: Bearer`), or
    /// none: trusted when the server has no token, `unauthorized` for a wrong or missing one.
    ///
    /// # Errors
    /// `unauthorized`.
    pub fn session_for(&self, token: Option<&str>, vmm_shapes: bool) -> Result<Session, Fail> {
        if !self.auth.enabled() {
            return Ok(Grant::default().session(vmm_shapes));
        }
        match token.map(|t| self.auth.check(t)) {
            Some(Some(grant)) => Ok(grant.session(vmm_shapes)),
            Some(None) => Err(Fail::new(Code::Unauthorized, "wrong token")),
            None => Err(Fail::new(
                Code::Unauthorized,
                "this server needs a token: send Authorization: Bearer <token>",
            )),
        }
    }
}

/// One request, parsed by its transport: the line protocol's `[@tag] COMMAND {args}`, an MCP
/// tool call, an HTTP route.
#[derive(Debug, Clone)]
pub struct Request {
    /// The line protocol's tag, echoed in the reply.
    pub tag: Option<String>,
    /// The command's name or alias, as sent.
    pub command: String,
    /// Its arguments, not yet checked.
    pub args: Map<String, Value>,
}

/// What a transport hands the dispatch: a request, or one its framing refused (a line too
/// long, not JSON), answered with that failure in order with the rest.
pub type Item = Result<Request, (Option<String>, Fail)>;

/// Where a batch's replies go, in request order: the line protocol encodes them as it goes,
/// HTTP and MCP keep them.
pub trait Replies: Send + Default + 'static {
    /// One reply: the request's tag and its result.
    fn push(&mut self, tag: Option<&str>, reply: Outcome);
    /// Bytes held so far (a batch stops at [`MAX_BATCH_REPLY_BYTES`]).
    fn bytes(&self) -> usize;
    /// Forgets every reply (a batch whose fsync failed).
    fn clear(&mut self);
}

/// Replies kept as values: HTTP's and MCP's.
#[derive(Debug, Default)]
pub struct Kept(pub Vec<Outcome>);

impl Replies for Kept {
    fn push(&mut self, _: Option<&str>, reply: Outcome) {
        self.0.push(reply);
    }

    fn bytes(&self) -> usize {
        0
    }

    fn clear(&mut self) {
        self.0.clear();
    }
}

/// A connection's state between batches.
#[derive(Debug, Clone, Default)]
pub struct Conn {
    /// Who it is.
    pub session: Session,
    /// Wrong AUTH attempts so far.
    pub auth_failures: u32,
}

/// What a batch did.
pub struct Ran<R> {
    /// The connection's state after it.
    pub conn: Conn,
    /// Its replies.
    pub replies: R,
    /// Whether the transport should close the connection (QUIT, too many wrong tokens, a
    /// failed fsync, a panic).
    pub close: bool,
    /// Requests not run because the replies reached [`MAX_BATCH_REPLY_BYTES`].
    pub rest: Vec<Item>,
}

/// Runs one batch of requests in order (module doc).
pub async fn run<R: Replies>(shared: &Arc<Shared>, conn: Conn, items: Vec<Item>, out: R) -> Ran<R> {
    // Searches of the keyword index wait for the index built after the open outside any slot,
    // so they cannot hold every running slot while gets, writes and vector searches queue.
    if !shared.home.lexical_ready()
        && items.iter().any(|i| {
            declared(i).is_some_and(|(c, args)| c.reads_keyword_index(args, &conn.session))
        })
    {
        while !shared.home.lexical_ready() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    // A batch of control commands never waits for capacity: STATS and PING answer during
    // overload (they read counters, not memories). A request that names no command is
    // answered without the store too.
    let control = items
        .iter()
        .all(|i| declared(i).is_none_or(|(c, _)| c.is_control()));
    let admitted = if control {
        None
    } else {
        match shared.admission.admit().await {
            Some(a) => Some(a),
            None => return busy(shared, conn, &items, out),
        }
    };
    let shared = Arc::clone(shared);
    let fallback = conn.clone();
    let task = tokio::task::spawn_blocking(move || {
        let (_ticket, running) = admitted.map(|a| (a.ticket, a.running)).unzip();
        let mut ran = Ran {
            conn,
            replies: out,
            close: false,
            rest: Vec::new(),
        };
        let Home::One(store) = &shared.home else {
            // A cluster node: each request runs on its partition's store and waits for its own
            // acknowledgement there (the stream's, `docs/cluster.md`); concurrent requests
            // share the stream's pipeline as one node's share an fsync.
            execute_all(&shared, None, &mut ran, items);
            return ran;
        };
        // One fsync for the whole batch, before any of its replies leaves (module doc).
        let ((), pending) = store.deferred_batch(|store| {
            // The batch's commands write through its handle: acknowledged once appended, made
            // durable together below.
            let ctx = Ctx {
                store: store.clone(),
                metrics: Arc::clone(&shared.metrics),
            };
            execute_all(&shared, Some(&ctx), &mut ran, items);
        });
        // The requests have run: the CPU slot goes to the next batch while this one waits for
        // its fsync, which concurrent batches share (group commit).
        drop(running);
        if let Err(e) = pending.wait() {
            tracing::error!(error = %e, "a batch could not be made durable; its replies are withheld");
            ran.replies.clear();
            let f = Fail::from(e);
            ran.replies.push(None, Err(Fail::new(
                f.code,
                "the store could not make this connection's last requests durable: none of their writes is acknowledged; the connection closes",
            )));
            ran.close = true;
        }
        ran
    });
    match task.await {
        Ok(ran) => ran,
        Err(e) => {
            // A handler panicked: say so, keep the server serving, close this connection.
            tracing::error!(error = %e, "a request panicked");
            let mut replies = R::default();
            replies.push(
                None,
                Err(Fail::new(
                    Code::Internal,
                    "the server failed on this request; the connection closes",
                )),
            );
            Ran {
                conn: fallback,
                replies,
                close: true,
                rest: Vec::new(),
            }
        }
    }
}

/// The class a request's command declares, with its arguments (`None`: it names no command).
fn declared(item: &Item) -> Option<(Class, &Map<String, Value>)> {
    let request = item.as_ref().ok()?;
    Some((commands::find(&request.command)?.class, &request.args))
}

/// Runs one request alone: MCP's and HTTP's batch of one. Returns its reply, and whether the
/// transport should close the connection (QUIT, a failed fsync, a panic).
pub async fn one(shared: &Arc<Shared>, session: Session, request: Request) -> (Outcome, bool) {
    let conn = Conn {
        session,
        auth_failures: 0,
    };
    let mut ran = run(shared, conn, vec![Ok(request)], Kept::default()).await;
    let reply = ran
        .replies
        .0
        .pop()
        .unwrap_or_else(|| Err(Fail::new(Code::Internal, "the request got no reply")));
    (reply, ran.close)
}

/// Answers every request of a batch that found the queue full `busy`, running none of them
/// (so each reply is an error and nothing changed). The hint is the time the queue ahead of
/// it takes at the median request time: `(max_queued / max_running + 1) × p50`.
fn busy<R: Replies>(shared: &Shared, conn: Conn, items: &[Item], mut out: R) -> Ran<R> {
    let metrics = &shared.metrics;
    let a = &shared.admission;
    let p50_ms = metrics.p50().as_secs_f64() * 1000.0;
    let retry_after_ms = ((a.max_queued / a.max_running + 1) as f64 * p50_ms)
        .ceil()
        .max(1.0);
    for item in items {
        let tag = match item {
            Ok(r) => r.tag.as_deref(),
            Err((tag, _)) => tag.as_deref(),
        };
        let mut f = Fail::new(
            Code::Busy,
            format!(
                "the server is at capacity ({} running, {} waiting): this request was not run; retry in about {retry_after_ms} ms",
                a.max_running, a.max_queued
            ),
        );
        f.body
            .insert("retry_after_ms".into(), json!(retry_after_ms));
        metrics.record(None, Duration::ZERO, Some(Code::Busy));
        out.push(tag, Err(f));
    }
    Ran {
        conn,
        replies: out,
        close: false,
        rest: Vec::new(),
    }
}

/// Runs a batch's requests in order until one closes the connection or the replies reach
/// [`MAX_BATCH_REPLY_BYTES`] (the rest are kept for the next batch). `batch`: the single
/// node's batch handle.
fn execute_all<R: Replies>(
    shared: &Shared,
    batch: Option<&Ctx>,
    ran: &mut Ran<R>,
    items: Vec<Item>,
) {
    let mut items = items.into_iter();
    for item in items.by_ref() {
        execute(shared, batch, ran, item);
        if ran.close {
            return;
        }
        if ran.replies.bytes() >= MAX_BATCH_REPLY_BYTES {
            break;
        }
    }
    ran.rest = items.collect();
}

/// Runs one request and appends its reply.
fn execute<R: Replies>(shared: &Shared, batch: Option<&Ctx>, ran: &mut Ran<R>, item: Item) {
    let metrics = &shared.metrics;
    let started = Instant::now();
    let mut req = match item {
        Ok(req) => req,
        Err((tag, f)) => {
            metrics.record(None, started.elapsed(), Some(f.code));
            ran.replies.push(tag.as_deref(), Err(f));
            return;
        }
    };
    let tag = req.tag.as_deref();
    let Some(command) = commands::find(&req.command) else {
        let f = commands::unknown(&req.command);
        metrics.record(None, started.elapsed(), Some(f.code));
        ran.replies.push(tag, Err(f));
        return;
    };
    let result = match (command.class, command.name) {
        (Class::Connection, "AUTH") => auth(shared, ran, req.args),
        // Checked like every command's: a QUIT with arguments it does not take is refused
        // and the connection stays open.
        (Class::Connection, _) => Args::checked(req.args, command.args).map(|_| {
            ran.close = true;
            json!({"reply": "BYE"})
        }),
        _ => route::take_min_seq(&mut req.args).and_then(|min_seq| {
            routed(shared, batch, &ran.conn.session, command, req.args, min_seq)
        }),
    };
    let error = result.as_ref().err().map(|f| f.code);
    metrics.record(Some(command.name), started.elapsed(), error);
    if let Err(f) = &result
        && f.code == Code::Internal
    {
        tracing::warn!(command = command.name, reply = %serde_json::Value::Object(f.body.clone()), "request failed");
    }
    ran.replies.push(tag, result);
}

/// Runs `command` on the store its route names (`crate::route`): the batch's on a single
/// node, its partition's on a cluster node.
fn routed(
    shared: &Shared,
    batch: Option<&Ctx>,
    session: &Session,
    command: &commands::Command,
    args: Map<String, Value>,
    min_seq: Option<u64>,
) -> Outcome {
    match (&shared.home, batch) {
        (Home::One(_), Some(batch)) => {
            if let Some(min) = min_seq {
                route::reach(&batch.store, 0, min)?;
            }
            commands::run(batch, session, command, args)
        }
        (Home::Cluster(partitions), _) => {
            let route = route::route_of(command, &args, session);
            if matches!(route, Route::Everywhere | Route::Partition(_)) {
                return crate::everywhere::run(
                    partitions.as_ref(),
                    &shared.metrics,
                    session,
                    command,
                    args,
                    min_seq,
                );
            }
            let Some(p) = route::partition_of(&route, partitions.count()) else {
                return node_wide(shared, partitions.as_ref(), session, command, args);
            };
            let ctx = Ctx {
                store: partitions.route(p, command.class.writes(), min_seq)?,
                metrics: Arc::clone(&shared.metrics),
            };
            // A store that refuses writes here is an owner that just lost its stream (a
            // publish not held: it poisons itself and reopens as a standby): the reply names
            // the partition, so a client sends the write again, with its request id, to
            // whichever node owns the partition next (`docs/cluster.md`, "What a publish can
            // end as").
            commands::run(&ctx, session, command, args).map_err(|mut f| {
                if f.code == Code::Unavailable && command.class.writes() {
                    f.body.entry("partition").or_insert(json!(p));
                    f.body.entry("retry_after_ms").or_insert(json!(250));
                }
                f
            })
        }
        (Home::One(_), None) => Err(Fail::new(
            Code::Internal,
            "a single node's request ran outside its batch",
        )),
    }
}

/// A cluster node's own request, which names no partition: PING, HELP, and STATS, which
/// reports every partition.
fn node_wide(
    shared: &Shared,
    partitions: &dyn Partitions,
    session: &Session,
    command: &commands::Command,
    args: Map<String, Value>,
) -> Outcome {
    let any = partitions.stores().into_iter().next().ok_or_else(|| {
        Fail::new(
            Code::Unavailable,
            "this node has no partition store open yet: retry in a moment",
        )
    })?;
    let ctx = Ctx {
        store: any,
        metrics: Arc::clone(&shared.metrics),
    };
    let mut reply = commands::run(&ctx, session, command, args)?;
    if matches!(command.class, Class::Status)
        && let Value::Object(o) = &mut reply
    {
        // One partition's store counters would mislead: the node's view replaces them.
        o.remove("store");
        o.insert("cluster".into(), partitions.status());
    }
    Ok(reply)
}

fn auth<R>(shared: &Shared, ran: &mut Ran<R>, args: Map<String, Value>) -> Outcome {
    let token = commands::Auth::parse(&mut Args::checked(args, commands::Auth::ARGS)?)?.token;
    if !shared.auth.enabled() {
        return Ok(
            json!({"reply": "OK", "message": "this server has no token: every connection may run every command"}),
        );
    }
    match shared.auth.check(&token) {
        Some(grant) => {
            ran.conn.session = grant.session(ran.conn.session.vmm_shapes);
            ran.conn.auth_failures = 0;
            Ok(json!({"reply": "OK", "user_id": grant.user, "read_only": grant.read_only}))
        }
        None => {
            ran.conn.auth_failures += 1;
            tracing::warn!(failures = ran.conn.auth_failures, "AUTH with a wrong token");
            let last = ran.conn.auth_failures >= MAX_AUTH_FAILURES;
            ran.close = last;
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

    fn request(line: &str) -> Request {
        let r = crate::protocol::parse(line.as_bytes()).unwrap().unwrap();
        Request {
            tag: r.tag,
            command: r.command,
            args: r.args,
        }
    }

    fn reads_keywords(line: &str, session: &Session) -> bool {
        let r = request(line);
        commands::find(&r.command).is_some_and(|c| c.class.reads_keyword_index(&r.args, session))
    }

    #[test]
    fn the_keyword_index_is_read_by_default_searches_and_named_modes_only() {
        let line_protocol = Session::trusted();
        for waits in [
            // Hybrid is the default mode: a search that names none reads the keyword index.
            r#"SEARCH_MEMORIES {"query": "keyword hybrid"}"#,
            r#"SEARCH_MEMORIES {"query": "x", "mode": "keyword"}"#,
            r#"@t1 search_memories {"query": "x", "mode": "HYBRID"}"#,
            r#"QUERY {"user_id": "u", "query": "x", "store_type": "keyword"}"#,
            r#"QUERY {"user_id": "u", "query": "x", "store_type": "hybrid"}"#,
        ] {
            assert!(reads_keywords(waits, &line_protocol), "{waits}");
        }
        for runs in [
            r#"SEARCH_MEMORIES {"query": "x", "mode": "vector"}"#,
            r#"SEARCH_MEMORIES {"query": "x", "mode": "text"}"#,
            // The similarity strategy has one mode, vector.
            r#"SEARCH_MEMORIES {"query": "x", "strategy": "similarity"}"#,
            r#"SEARCH_MEMORIES {"query": "x", "mode": "nonsense"}"#,
            r#"QUERY {"user_id": "u", "query": "x"}"#,
            r#"QUERY {"user_id": "u", "query": "x", "store_type": "vector"}"#,
            r#"STORE_MEMORY {"content": "mode keyword", "mode": "keyword"}"#,
            "PING",
        ] {
            assert!(!reads_keywords(runs, &line_protocol), "{runs}");
        }
        // Over MCP a search ranks by similarity unless told otherwise: vector, no keywords.
        let mcp = Session::mcp();
        assert!(!reads_keywords(r#"SEARCH_MEMORIES {"query": "x"}"#, &mcp));
        assert!(reads_keywords(
            r#"SEARCH_MEMORIES {"query": "x", "mode": "hybrid"}"#,
            &mcp
        ));
    }

    #[test]
    fn only_open_and_status_commands_skip_capacity_and_only_open_ones_skip_auth() {
        for c in commands::COMMANDS.iter() {
            let open = matches!(c.name, "PING" | "HELP" | "AUTH" | "QUIT");
            assert_eq!(c.class.needs_auth(), !open, "{}", c.name);
            assert_eq!(
                c.class.is_control(),
                open || c.name == "STATS",
                "{}",
                c.name
            );
            if c.name.starts_with("GET_") || c.name.starts_with("LIST_") {
                assert!(!c.class.writes(), "{} only reads", c.name);
            }
            if c.name.starts_with("DELETE_") || c.name.starts_with("CREATE_") {
                assert!(c.class.writes(), "{} writes", c.name);
            }
        }
    }
}
