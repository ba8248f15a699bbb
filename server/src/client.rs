//! A Rust client of the line protocol (`docs/protocol.md`), blocking: what the CLI's commands
//! that talk to a running server use (`amberdb backup --server`, `export --server`, `import
//! --server`), and a client of a cluster's nodes (`docs/cluster.md`, "Routing").
//!
//! Guarantees: a reply with `"ok": false` is an error carrying the server's code, message and
//! whole reply ([`ClientError::Refused`]), never a value; several seed addresses are tried in
//! order until one answers; a request is sent again only when that cannot run it twice: a
//! read after a lost connection, a write after a lost connection with the same request id
//! (every write carries one: the caller's `request_id`, or one the client makes, so the server
//! answers a resent write with its first attempt's reply and never runs it twice), any request
//! the server answered `busy` (it was not run; after the `retry_after_ms` it named, capped),
//! `moved` (a cluster node that does not own the partition ran nothing: the request goes to
//! the owner the reply names, and the client remembers it, so the next request of that
//! partition goes there first), and a cluster's `unavailable` naming a partition (no node owns
//! it while a lease lapses: nothing ran; sent again to the next seed, since the node that
//! answered may see the cluster through a cut-off NATS server). An address that accepted no
//! connection is tried after the others for [`DOWN_FOR`], so a dead node's connect timeout is
//! not paid at every retry. Lost connections and `unavailable` are retried for
//! at most [`FAILOVER_WAIT`]; a write whose resend could not reach any server by then is
//! [`ClientError::Unknown`]: it may or may not have run, and the error names its request id,
//! with which a later retry learns which (within the server's 10-minute window). Reads carry
//! `min_seq`: the position of this client's last write to their partition (read-your-writes on
//! any replica; `set_read_your_writes(false)` turns it off).

use crate::commands::{self, Class, Session};
use crate::route::{self, Route};
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// How often a request answered `busy` is sent again before the error is returned.
pub const BUSY_RETRIES: u32 = 3;
/// The longest wait before a retry after `busy`, whatever `retry_after_ms` says.
pub const MAX_BUSY_WAIT: Duration = Duration::from_secs(2);

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No seed address accepted a connection (each with its error).
    #[error("no server answered: {}", tried.iter().map(|(a, e)| format!("{a}: {e}")).collect::<Vec<_>>().join("; "))]
    Unreachable {
        /// Every address tried, with why it failed.
        tried: Vec<(String, String)>,
    },
    /// The server answered with an error: nothing changed (`docs/protocol.md`, "Errors").
    #[error("the server refused ({code}): {message}")]
    Refused {
        /// The protocol code (`invalid`, `not_found`, ...).
        code: String,
        /// What the server said to do.
        message: String,
        /// The whole reply.
        reply: Map<String, Value>,
    },
    /// The connection to `addr` was lost after a write was sent: it may or may not have run.
    #[error(
        "the connection to {addr} was lost after the request was sent ({reason}): it may or may not have run"
    )]
    Unknown {
        /// The server it was sent to.
        addr: String,
        /// What was lost.
        reason: String,
    },
    /// The server's reply is not a JSON object.
    #[error("the server at {addr} sent a reply that is not a JSON object: {reply:?}")]
    Protocol {
        /// The server.
        addr: String,
        /// The reply line, as it came.
        reply: String,
    },
    /// The request cannot be sent (an unknown command, or arguments that are not an object).
    #[error("{0}")]
    Request(String),
}

/// One open connection.
#[derive(Debug)]
struct Connection {
    addr: String,
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

/// A request ready to send.
struct Prepared {
    line: String,
    route: Route,
    writes: bool,
    rereadable: bool,
    request_id: Option<String>,
}

/// How long a call keeps trying while a cluster fails over (a lost owner, `unavailable`
/// while no node owns the partition) before it reports the error.
pub const FAILOVER_WAIT: Duration = Duration::from_secs(15);
/// The pause between rounds of retries.
pub const RETRY_PAUSE: Duration = Duration::from_millis(200);
/// `moved` replies followed at once in one call; later ones wait [`RETRY_PAUSE`] each, until
/// [`FAILOVER_WAIT`].
pub const MAX_HOPS: u32 = 5;

/// A client of one server, or of a cluster's nodes (module doc).
#[derive(Debug)]
pub struct Client {
    seeds: Vec<String>,
    token: Option<String>,
    timeout: Option<Duration>,
    failover_wait: Duration,
    /// Open connections, by address, and the one requests go to when no owner is known.
    connections: HashMap<String, Connection>,
    current: Option<String>,
    /// What `moved` replies taught: the cluster's partition count, and partitions' owners.
    partitions: Option<u32>,
    owners: HashMap<u32, String>,
    /// The newest position of each partition this client wrote (read-your-writes).
    written: HashMap<u32, u64>,
    read_your_writes: bool,
    /// Addresses that accepted no connection lately, and when: tried after the others for
    /// [`DOWN_FOR`], so a dead node's connect timeout is not paid at every retry.
    down: HashMap<String, Instant>,
}

/// How long an address that accepted no connection is tried after the others.
pub const DOWN_FOR: Duration = Duration::from_secs(5);

impl Client {
    /// A client of the first of `seeds` that accepts a connection (tried in order), which
    /// authenticates with `token` (`AUTH`) when given. `timeout` bounds each read and write
    /// (`None`: wait as long as the server takes).
    ///
    /// # Errors
    /// `Unreachable` when no seed accepts; `Refused` when the token is refused.
    pub fn connect(
        seeds: &[impl AsRef<str>],
        token: Option<&str>,
        timeout: Option<Duration>,
    ) -> Result<Client, ClientError> {
        if seeds.is_empty() {
            return Err(ClientError::Request("no server address given".into()));
        }
        let mut client = Client {
            seeds: seeds.iter().map(|s| s.as_ref().to_owned()).collect(),
            token: token.map(str::to_owned),
            timeout,
            failover_wait: FAILOVER_WAIT,
            connections: HashMap::new(),
            current: None,
            partitions: None,
            owners: HashMap::new(),
            written: HashMap::new(),
            read_your_writes: true,
            down: HashMap::new(),
        };
        client.reconnect(0)?;
        Ok(client)
    }

    /// How long a call keeps retrying through a failover ([`FAILOVER_WAIT`] unless set).
    pub fn set_failover_wait(&mut self, wait: Duration) {
        self.failover_wait = wait;
    }

    /// Whether reads ask for the position of this client's last write to their partition
    /// (`min_seq`), so any replica that answers has that write (on by default).
    pub fn set_read_your_writes(&mut self, on: bool) {
        self.read_your_writes = on;
    }

    /// The address of the server this client talks to now.
    #[must_use]
    pub fn addr(&self) -> Option<&str> {
        self.current.as_deref()
    }

    /// The position of this client's last acknowledged write to partition `p`.
    #[must_use]
    pub fn written_seq(&self, p: u32) -> Option<u64> {
        self.written.get(&p).copied()
    }

    /// Runs `command` with `args` (a JSON object, or `null` for none) and returns the reply
    /// object (with its `"ok": true`). In a cluster the request goes to the node that owns its
    /// partition when the client knows it, follows `moved`, and waits out a failover (module
    /// doc).
    ///
    /// # Errors
    /// See [`ClientError`]: `Refused` carries the server's code; `Unknown` a write whose
    /// outcome the client cannot know.
    pub fn call(&mut self, command: &str, args: &Value) -> Result<Map<String, Value>, ClientError> {
        let Some(found) = commands::find(command) else {
            return Err(ClientError::Request(format!("unknown command {command:?}")));
        };
        let mut args = match args {
            Value::Null => Map::new(),
            Value::Object(o) => o.clone(),
            _ => {
                return Err(ClientError::Request(format!(
                    "the arguments of {} must be a JSON object",
                    found.name
                )));
            }
        };
        let writes = found.class.writes();
        let mut request_id = None;
        if writes {
            if !args.contains_key("request_id") {
                let id = amberdb::RequestId::new(amberdb::Timestamp::now()).map_err(|e| {
                    ClientError::Request(format!("no randomness for a request id: {e}"))
                })?;
                args.insert("request_id".into(), json!(id.to_string()));
            }
            request_id = args
                .get("request_id")
                .and_then(Value::as_str)
                .map(str::to_owned);
        }
        let to = route::route_of(found, &args, &Session::trusted());
        let partition = |c: &Client| match &to {
            Route::Id(_) | Route::Partition(_) => route::partition_of(&to, u32::MAX),
            _ => c.partitions.and_then(|n| route::partition_of(&to, n)),
        };
        if !writes
            && self.read_your_writes
            && !args.contains_key("min_seq")
            && let Some(seq) = partition(self).and_then(|p| self.written_seq(p))
        {
            args.insert("min_seq".into(), json!(seq));
        }
        let line = if args.is_empty() && !writes {
            found.name.to_owned()
        } else {
            format!("{} {}", found.name, Value::Object(args))
        };
        // A read may be sent again after a lost connection, and a write with its request id.
        let rereadable = request_id.is_some()
            || matches!(
                found.class,
                Class::Open | Class::Status | Class::Read | Class::Search(_)
            );
        self.deliver(&Prepared {
            line,
            route: to,
            writes,
            rereadable,
            request_id,
        })
    }

    /// Sends a request to its partition's owner (or the current node) until it is answered,
    /// following `moved` and waiting out a failover (module doc).
    fn deliver(&mut self, request: &Prepared) -> Result<Map<String, Value>, ClientError> {
        let Prepared {
            line,
            route: to,
            writes,
            rereadable,
            request_id,
        } = request;
        let (line, writes, rereadable) = (line.as_str(), *writes, *rereadable);
        let partition = |c: &Client| match to {
            Route::Id(_) | Route::Partition(_) => route::partition_of(to, u32::MAX),
            _ => c.partitions.and_then(|n| route::partition_of(to, n)),
        };
        let deadline = Instant::now() + self.failover_wait;
        let (mut busy, mut hops) = (0, 0);
        // Where a sent request's reply was lost, and why (its outcome is then unknown).
        let mut lost_at: Option<(String, String)> = None;
        loop {
            let owner = partition(self).and_then(|p| self.owners.get(&p).cloned());
            if let Err(e) = self.connect_for(owner.as_deref()) {
                if let Some(p) = partition(self) {
                    self.owners.remove(&p);
                }
                if Instant::now() < deadline {
                    std::thread::sleep(RETRY_PAUSE);
                    continue;
                }
                return Err(match (lost_at, request_id) {
                    (Some((addr, reason)), Some(id)) => unknown(addr, &reason, id),
                    (Some((addr, reason)), None) => ClientError::Unknown { addr, reason },
                    (None, _) => e,
                });
            }
            let reply = match self.send(line) {
                Ok(reply) => reply,
                Err(Lost::NotJson { addr, reply }) => {
                    self.drop_connection();
                    return Err(ClientError::Protocol { addr, reply });
                }
                Err(lost) => {
                    let unsent = matches!(lost, Lost::BeforeSending(_));
                    let addr = self.addr().unwrap_or_default().to_owned();
                    self.drop_connection();
                    self.owners.retain(|_, a| *a != addr);
                    let reason = lost.reason();
                    if !(unsent || rereadable) {
                        return Err(ClientError::Unknown { addr, reason });
                    }
                    if !unsent {
                        lost_at = Some((addr, reason));
                    }
                    if Instant::now() >= deadline {
                        return Err(match (lost_at, request_id) {
                            (Some((addr, reason)), Some(id)) => unknown(addr, &reason, id),
                            (Some((addr, reason)), None) => ClientError::Unknown { addr, reason },
                            (None, _) => ClientError::Unreachable { tried: Vec::new() },
                        });
                    }
                    continue;
                }
            };
            if reply.get("ok") == Some(&Value::Bool(true)) {
                if let (true, Some(p), Some(seq)) = (
                    writes,
                    reply.get("partition").and_then(Value::as_u64),
                    reply.get("seq").and_then(Value::as_u64),
                ) && let Ok(p) = u32::try_from(p)
                {
                    let held = self.written.entry(p).or_insert(0);
                    *held = (*held).max(seq);
                }
                return Ok(reply);
            }
            let code = reply
                .get("code")
                .and_then(Value::as_str)
                .unwrap_or("internal");
            let wait = reply.get("retry_after_ms").and_then(Value::as_u64);
            match code {
                "busy" if busy < BUSY_RETRIES => {
                    busy += 1;
                    std::thread::sleep(
                        wait.map_or(MAX_BUSY_WAIT, Duration::from_millis)
                            .min(MAX_BUSY_WAIT),
                    );
                }
                // Followed at once up to MAX_HOPS times, then paced: during a failover the
                // nodes name the dead owner until its lease lapses.
                "moved" if hops < MAX_HOPS || Instant::now() < deadline => {
                    hops += 1;
                    self.learn(&reply);
                    if hops > MAX_HOPS || reply.get("address").and_then(Value::as_str).is_none() {
                        std::thread::sleep(RETRY_PAUSE);
                    }
                }
                // A cluster's routing refusal (it names the partition): nothing ran, and a
                // node will own the partition once a lease lapses.
                "unavailable" if reply.contains_key("partition") && Instant::now() < deadline => {
                    std::thread::sleep(
                        wait.map_or(RETRY_PAUSE, Duration::from_millis)
                            .clamp(Duration::from_millis(20), Duration::from_secs(1)),
                    );
                    // The next attempt asks another node: this one may see the cluster
                    // through a NATS server that is cut off (its leases stale), and only a
                    // node that reads them can name the owner.
                    if let Some(p) = reply.get("partition").and_then(Value::as_u64) {
                        self.owners.remove(&u32::try_from(p).unwrap_or(u32::MAX));
                    }
                    if self.seeds.len() > 1 {
                        let _ = self.reconnect(self.next_seed());
                    }
                }
                _ => return Err(refused(reply)),
            }
        }
    }

    /// What a `moved` reply says: the partition count and the partition's owner.
    fn learn(&mut self, reply: &Map<String, Value>) {
        let int = |k: &str| {
            reply
                .get(k)
                .and_then(Value::as_u64)
                .and_then(|v| u32::try_from(v).ok())
        };
        if let Some(n) = int("partitions") {
            self.partitions = Some(n);
        }
        if let Some(p) = int("partition") {
            match reply.get("address").and_then(Value::as_str) {
                Some(addr) => self.owners.insert(p, addr.to_owned()),
                None => self.owners.remove(&p),
            };
        }
    }

    /// Makes `owner` (else the current connection, else the next seed that answers) the
    /// connection requests go to.
    fn connect_for(&mut self, owner: Option<&str>) -> Result<(), ClientError> {
        if let Some(addr) = owner {
            if !self.connections.contains_key(addr) {
                if self.is_down(addr) {
                    return Err(ClientError::Unreachable {
                        tried: vec![(
                            addr.to_owned(),
                            "accepted no connection a moment ago".into(),
                        )],
                    });
                }
                let c = self
                    .open_authed(addr)
                    .inspect_err(|e| self.mark_down(addr, e))?;
                self.connections.insert(addr.to_owned(), c);
            }
            self.current = Some(addr.to_owned());
            return Ok(());
        }
        if self
            .current
            .as_ref()
            .is_some_and(|a| self.connections.contains_key(a))
        {
            return Ok(());
        }
        self.reconnect(self.next_seed())
    }

    fn drop_connection(&mut self) {
        if let Some(addr) = &self.current {
            self.connections.remove(addr);
        }
    }

    /// The index of the seed after the one connected now.
    fn next_seed(&self) -> usize {
        let now = self
            .addr()
            .and_then(|a| self.seeds.iter().position(|s| s == a));
        now.map_or(0, |i| (i + 1) % self.seeds.len())
    }

    /// Connects to the first seed that accepts, from `first` on (wrapping), and
    /// authenticates.
    fn reconnect(&mut self, first: usize) -> Result<(), ClientError> {
        let mut tried = Vec::new();
        let n = self.seeds.len();
        // The addresses that lately accepted no connection come last.
        let mut order: Vec<String> = (0..n)
            .map(|i| self.seeds[(first + i) % n].clone())
            .collect();
        order.sort_by_key(|a| self.is_down(a));
        for addr in order {
            match self.open_authed(&addr) {
                Ok(c) => {
                    self.down.remove(&addr);
                    self.connections.insert(addr.clone(), c);
                    self.current = Some(addr);
                    return Ok(());
                }
                Err(e @ ClientError::Unreachable { .. }) => {
                    self.mark_down(&addr, &e);
                    if let ClientError::Unreachable { tried: t } = e {
                        tried.extend(t);
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Err(ClientError::Unreachable { tried })
    }

    /// Whether `addr` accepted no connection within [`DOWN_FOR`].
    fn is_down(&self, addr: &str) -> bool {
        self.down
            .get(addr)
            .is_some_and(|at| at.elapsed() < DOWN_FOR)
    }

    /// Notes that `addr` accepted no connection (`e` is `Unreachable`).
    fn mark_down(&mut self, addr: &str, e: &ClientError) {
        if matches!(e, ClientError::Unreachable { .. }) {
            self.down.insert(addr.to_owned(), Instant::now());
        }
    }

    /// A new connection to `addr`, authenticated when the client has a token.
    fn open_authed(&self, addr: &str) -> Result<Connection, ClientError> {
        let unreachable = |e: String| ClientError::Unreachable {
            tried: vec![(addr.to_owned(), e)],
        };
        let mut c = open(addr, self.timeout).map_err(|e| unreachable(e.to_string()))?;
        if let Some(token) = &self.token {
            let line = format!("AUTH {}", json!({ "token": token }));
            match exchange(&mut c, &line) {
                Ok(r) if r.get("ok") == Some(&Value::Bool(true)) => {}
                Ok(r) => return Err(refused(r)),
                Err(lost) => return Err(unreachable(lost.reason())),
            }
        }
        Ok(c)
    }

    /// Sends one line on the current connection and reads one reply line.
    fn send(&mut self, line: &str) -> Result<Map<String, Value>, Lost> {
        let Some(c) = self
            .current
            .as_ref()
            .and_then(|a| self.connections.get_mut(a))
        else {
            return Err(Lost::BeforeSending("not connected".into()));
        };
        exchange(c, line)
    }
}

fn unknown(addr: String, reason: &str, id: &str) -> ClientError {
    ClientError::Unknown {
        addr,
        reason: format!(
            "{reason}; send it again with request_id {id} within 10 minutes to learn whether it ran"
        ),
    }
}

/// Sends one line and reads one reply line.
fn exchange(c: &mut Connection, line: &str) -> Result<Map<String, Value>, Lost> {
    let sent = c
        .writer
        .write_all(line.as_bytes())
        .and_then(|()| c.writer.write_all(b"\n"))
        .and_then(|()| c.writer.flush());
    if let Err(e) = sent {
        // Nothing of a line without its newline is run (`docs/protocol.md`, "Framing").
        return Err(Lost::BeforeSending(e.to_string()));
    }
    let mut reply = String::new();
    match c.reader.read_line(&mut reply) {
        Ok(0) => {
            return Err(Lost::AfterSending(
                "the server closed the connection".into(),
            ));
        }
        Ok(_) => {}
        Err(e) => return Err(Lost::AfterSending(e.to_string())),
    }
    match serde_json::from_str::<Value>(&reply) {
        Ok(Value::Object(map)) => Ok(map),
        _ => Err(Lost::NotJson {
            addr: c.addr.clone(),
            reply: reply.trim_end().to_owned(),
        }),
    }
}

/// A connection that failed a request.
enum Lost {
    /// Before the line was whole on the wire: the server cannot have run it.
    BeforeSending(String),
    /// After: it may have.
    AfterSending(String),
    /// The reply was not a JSON object.
    NotJson { addr: String, reply: String },
}

impl Lost {
    fn reason(self) -> String {
        match self {
            Lost::BeforeSending(r) | Lost::AfterSending(r) => r,
            Lost::NotJson { reply, .. } => format!("a reply that is not JSON: {reply:?}"),
        }
    }
}

fn open(addr: &str, timeout: Option<Duration>) -> std::io::Result<Connection> {
    let writer = match timeout {
        Some(t) => {
            let mut last = None;
            let mut stream = None;
            for a in std::net::ToSocketAddrs::to_socket_addrs(addr)? {
                match TcpStream::connect_timeout(&a, t) {
                    Ok(s) => {
                        stream = Some(s);
                        break;
                    }
                    Err(e) => last = Some(e),
                }
            }
            stream.ok_or_else(|| {
                last.unwrap_or_else(|| std::io::Error::other("the address resolves to nothing"))
            })?
        }
        None => TcpStream::connect(addr)?,
    };
    writer.set_read_timeout(timeout)?;
    writer.set_write_timeout(timeout)?;
    writer.set_nodelay(true)?;
    Ok(Connection {
        addr: addr.to_owned(),
        reader: BufReader::new(writer.try_clone()?),
        writer,
    })
}

fn refused(reply: Map<String, Value>) -> ClientError {
    let text = |k: &str| reply.get(k).and_then(Value::as_str).map(str::to_owned);
    ClientError::Refused {
        code: text("code").unwrap_or_else(|| "internal".into()),
        message: text("message").unwrap_or_else(|| Value::Object(reply.clone()).to_string()),
        reply,
    }
}
