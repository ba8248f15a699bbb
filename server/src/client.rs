//! A Rust client of the line protocol (`docs/protocol.md`), blocking, one connection at a
//! time: what the CLI's commands that talk to a running server use (`amberdb backup
//! --server`, `export --server`, `import --server`), and the client the cluster's routing
//! grows into (`docs/cluster.md`, "Replicas, reads and the client").
//!
//! Guarantees: a reply with `"ok": false` is an error carrying the server's code, message and
//! whole reply ([`ClientError::Refused`]), never a value; several seed addresses are tried in
//! order until one answers; a request is sent again only when that cannot run it twice: a
//! read after a lost connection (on the next seed), a write after a lost connection with the
//! same request id (every write carries one: the caller's `request_id`, or one the client
//! makes, so the server answers a resent write with its first attempt's reply and never runs
//! it twice), and any request the server answered `busy` (it was not run; after the
//! `retry_after_ms` it named, capped). A write whose resend could not reach any server is
//! [`ClientError::Unknown`]: it may or may not have run, and the error names its request id,
//! with which a later retry learns which (within the server's 10-minute window).

use crate::commands::{self, Class};
use serde_json::{Map, Value, json};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::Duration;

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

/// A client of one server (or of the first that answers among several seeds).
#[derive(Debug)]
pub struct Client {
    seeds: Vec<String>,
    token: Option<String>,
    timeout: Option<Duration>,
    connection: Option<Connection>,
}

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
            connection: None,
        };
        client.reconnect(0)?;
        Ok(client)
    }

    /// The address of the server this client talks to now.
    #[must_use]
    pub fn addr(&self) -> Option<&str> {
        self.connection.as_ref().map(|c| c.addr.as_str())
    }

    /// Runs `command` with `args` (a JSON object, or `null` for none) and returns the reply
    /// object (with its `"ok": true`).
    ///
    /// # Errors
    /// See [`ClientError`]: `Refused` carries the server's code; `Unknown` a write whose
    /// outcome the client cannot know.
    pub fn call(&mut self, command: &str, args: &Value) -> Result<Map<String, Value>, ClientError> {
        let Some(found) = commands::find(command) else {
            return Err(ClientError::Request(format!("unknown command {command:?}")));
        };
        let mut args = args.clone();
        let mut request_id = None;
        if found.class.writes() {
            if args.is_null() {
                args = json!({});
            }
            if let Value::Object(o) = &mut args {
                if !o.contains_key("request_id") {
                    let id = amberdb::RequestId::new(amberdb::Timestamp::now()).map_err(|e| {
                        ClientError::Request(format!("no randomness for a request id: {e}"))
                    })?;
                    o.insert("request_id".into(), json!(id.to_string()));
                }
                request_id = o
                    .get("request_id")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
            }
        }
        let line = match &args {
            Value::Null => found.name.to_owned(),
            Value::Object(_) => format!("{} {args}", found.name),
            _ => {
                return Err(ClientError::Request(format!(
                    "the arguments of {} must be a JSON object",
                    found.name
                )));
            }
        };
        // A read may be sent again after a lost connection, and a write with its request id.
        let rereadable = request_id.is_some()
            || matches!(
                found.class,
                Class::Open | Class::Status | Class::Read | Class::Search(_)
            );
        let mut busy = 0;
        let mut lost_once = false;
        loop {
            match self.send(&line) {
                Ok(reply) => {
                    if reply.get("ok") == Some(&Value::Bool(true)) {
                        return Ok(reply);
                    }
                    let code = reply
                        .get("code")
                        .and_then(Value::as_str)
                        .unwrap_or("internal");
                    if code == "busy" && busy < BUSY_RETRIES {
                        busy += 1;
                        let ms = reply.get("retry_after_ms").and_then(Value::as_u64);
                        std::thread::sleep(
                            ms.map_or(MAX_BUSY_WAIT, Duration::from_millis)
                                .min(MAX_BUSY_WAIT),
                        );
                        continue;
                    }
                    return Err(refused(reply));
                }
                Err(Lost::NotJson { addr, reply }) => {
                    self.connection = None;
                    return Err(ClientError::Protocol { addr, reply });
                }
                Err(lost) => {
                    let unsent = matches!(lost, Lost::BeforeSending(_));
                    let addr = self.addr().unwrap_or_default().to_owned();
                    let next = self.next_seed();
                    self.connection = None;
                    let reason = lost.reason();
                    let unknown = |reason: String| match &request_id {
                        Some(id) if !unsent => ClientError::Unknown {
                            addr: addr.clone(),
                            reason: format!(
                                "{reason}; send it again with request_id {id} within 10 minutes to learn whether it ran"
                            ),
                        },
                        _ => ClientError::Unreachable {
                            tried: vec![(addr.clone(), reason)],
                        },
                    };
                    if !(unsent || rereadable) {
                        return Err(ClientError::Unknown { addr, reason });
                    }
                    if lost_once {
                        return Err(unknown(reason));
                    }
                    lost_once = true;
                    if let Err(e) = self.reconnect(next) {
                        return Err(match e {
                            ClientError::Unreachable { .. } => unknown(e.to_string()),
                            e => e,
                        });
                    }
                }
            }
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
        self.connection = None;
        let mut tried = Vec::new();
        for i in 0..self.seeds.len() {
            let addr = self.seeds[(first + i) % self.seeds.len()].clone();
            match open(&addr, self.timeout) {
                Ok(c) => {
                    self.connection = Some(c);
                    if let Some(token) = self.token.clone() {
                        let line = format!("AUTH {}", json!({ "token": token }));
                        match self.send(&line) {
                            Ok(r) if r.get("ok") == Some(&Value::Bool(true)) => {}
                            Ok(r) => return Err(refused(r)),
                            Err(lost) => {
                                tried.push((addr, lost.reason()));
                                self.connection = None;
                                continue;
                            }
                        }
                    }
                    return Ok(());
                }
                Err(e) => tried.push((addr, e.to_string())),
            }
        }
        Err(ClientError::Unreachable { tried })
    }

    /// Sends one line and reads one reply line.
    fn send(&mut self, line: &str) -> Result<Map<String, Value>, Lost> {
        let Some(c) = self.connection.as_mut() else {
            return Err(Lost::BeforeSending("not connected".into()));
        };
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
