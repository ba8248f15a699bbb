//! HTTP against the `amberdb serve --http` process: the routes, statuses and safety rules of
//! docs/http.md, sent as a plain blocking HTTP/1.1 client would send them.

use crate::support::{Client, Server, still_serving};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// One HTTP/1.1 keep-alive connection; reconnects after a `Connection: close`.
pub struct Http {
    addr: SocketAddr,
    conn: Option<(TcpStream, BufReader<TcpStream>)>,
    /// Sent as `Authorization: Bearer` when set.
    pub token: Option<String>,
    closed_by_server: bool,
}

/// A response: status, headers (names lowercase), body.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "body of {} is not JSON ({e}): {:?}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

impl Http {
    pub fn connect(addr: SocketAddr) -> Http {
        Http {
            addr,
            conn: None,
            token: None,
            closed_by_server: false,
        }
    }

    fn stream(&mut self) -> &mut (TcpStream, BufReader<TcpStream>) {
        if self.conn.is_none() {
            let s = TcpStream::connect(self.addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
            let r = BufReader::new(s.try_clone().unwrap());
            self.conn = Some((s, r));
        }
        self.conn.as_mut().unwrap()
    }

    /// Sends raw request bytes and reads one response.
    pub fn raw(&mut self, request: &[u8]) -> Reply {
        let (s, _) = self.stream();
        s.write_all(request).unwrap();
        self.read_reply().expect("a response")
    }

    /// Reads one response (`None` when the server closed first).
    pub fn read_reply(&mut self) -> Option<Reply> {
        let (_, r) = self.conn.as_mut()?;
        let mut status_line = String::new();
        if r.read_line(&mut status_line).ok()? == 0 {
            self.conn = None;
            return None;
        }
        let status: u16 = status_line.split_whitespace().nth(1)?.parse().ok()?;
        let mut headers = Vec::new();
        loop {
            let mut line = String::new();
            r.read_line(&mut line).unwrap();
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            let (k, v) = line.split_once(':').unwrap();
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
        }
        let len: usize = headers
            .iter()
            .find(|(k, _)| k == "content-length")
            .map_or(0, |(_, v)| v.parse().unwrap());
        let mut body = vec![0; len];
        r.read_exact(&mut body).unwrap();
        let reply = Reply {
            status,
            headers,
            body,
        };
        if reply.header("connection") == Some("close") {
            self.closed_by_server = true;
            self.conn = None;
        }
        Some(reply)
    }

    /// `METHOD path` with a JSON body (none for `Value::Null`), and extra headers.
    pub fn send(
        &mut self,
        method: &str,
        path: &str,
        body: &Value,
        extra: &[(&str, &str)],
    ) -> Reply {
        let body = if body.is_null() {
            String::new()
        } else {
            body.to_string()
        };
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Length: {}\r\n",
            self.addr,
            body.len()
        );
        if !body.is_empty() {
            head.push_str("Content-Type: application/json\r\n");
        }
        if let Some(t) = &self.token {
            head.push_str(&format!("Authorization: Bearer {t}\r\n"));
        }
        for (k, v) in extra {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        head.push_str(&body);
        self.raw(head.as_bytes())
    }

    pub fn get(&mut self, path: &str) -> Reply {
        self.send("GET", path, &Value::Null, &[])
    }

    pub fn post(&mut self, path: &str, body: Value) -> Reply {
        self.send("POST", path, &body, &[])
    }
}

/// A client of either transport, as the every-command test drives it: a command and its
/// arguments in, the line protocol's reply shape out (`ok`, then the body).
pub trait Caller {
    fn call(&mut self, command: &str, args: Value) -> Value;
    fn closed(&mut self) -> bool;

    /// A call that must succeed, with a reply of its declared shape (`crate::reply`).
    fn ok(&mut self, command: &str, args: Value) -> Value {
        let r = self.call(command, args.clone());
        assert_eq!(r["ok"], true, "{command} {args} -> {r}");
        let declared = amberdb_server::commands::find(command).expect("a command of the table");
        if let Err(e) = amberdb_server::reply::check(&r, &declared.reply_fields()) {
            panic!("{command}: the reply is not as declared ({e}): {r}");
        }
        r
    }

    fn fails(&mut self, command: &str, args: Value, code: &str) -> Value {
        let r = self.call(command, args.clone());
        assert_eq!(r["ok"], false, "{command} {args} -> {r}");
        assert_eq!(r["code"], code, "{command} {args} -> {r}");
        assert!(r["message"].as_str().is_some_and(|m| !m.is_empty()), "{r}");
        r
    }
}

impl Caller for Client {
    fn call(&mut self, command: &str, args: Value) -> Value {
        Client::call(self, command, args)
    }

    fn closed(&mut self) -> bool {
        Client::closed(self)
    }
}

impl Caller for Http {
    /// `POST /v1/commands/{command}`; `ok` is whether the status is 200, and a failure's
    /// status must be its code's (docs/http.md, "Statuses").
    fn call(&mut self, command: &str, args: Value) -> Value {
        let reply = self.post(&format!("/v1/commands/{command}"), args);
        let mut body = reply.json();
        let ok = reply.status == 200;
        if !ok {
            assert_eq!(
                Some(reply.status),
                body["code"].as_str().map(status_of),
                "{command}: {}",
                String::from_utf8_lossy(&reply.body)
            );
        }
        body.as_object_mut().unwrap().insert("ok".into(), json!(ok));
        body
    }

    fn closed(&mut self) -> bool {
        self.closed_by_server
    }
}

/// The status docs/http.md gives each error code.
pub fn status_of(code: &str) -> u16 {
    match code {
        "bad_request" | "invalid" => 400,
        "unauthorized" => 401,
        "forbidden" => 403,
        "not_found" | "unknown_command" => 404,
        "timeout" => 408,
        "already_exists" => 409,
        "line_too_long" => 413,
        "limit_exceeded" => 422,
        "busy" => 429,
        "moved" => 421,
        "unavailable" | "too_many_connections" => 503,
        "disk_full" => 507,
        _ => 500,
    }
}

fn server(dir: &std::path::Path, extra: &[&str]) -> (Server, Http) {
    let server = Server::start(&dir.join("store"), extra);
    let http = Http::connect(server.http.expect("the server serves HTTP"));
    (server, http)
}

#[test]
fn resource_routes_run_their_commands_with_path_query_and_body() {
    let dir = tempfile::tempdir().unwrap();
    let (server, mut h) = server(dir.path(), &[]);
    let stored = h.post(
        "/v1/memories",
        json!({"content": "the deploy needs the staging key", "user_id": "ada", "tags": ["deploy"]}),
    );
    assert_eq!(stored.status, 200);
    let id = stored.json()["memory_id"].as_u64().unwrap();
    // A duplicate is an outcome: 200, the existing id.
    let dup = h.post(
        "/v1/memories",
        json!({"content": "the deploy needs the staging key", "user_id": "ada"}),
    );
    assert_eq!(
        (dup.status, &dup.json()["outcome"]),
        (200, &json!("duplicate"))
    );
    assert_eq!(dup.json()["memory_id"], id);
    let listed = h.get("/v1/memories?user_id=ada&limit=5");
    assert_eq!(listed.json()["memories"][0]["id"], id);
    assert_eq!(
        h.get(&format!("/v1/memories/{id}")).json()["memory"]["content"],
        "the deploy needs the staging key"
    );
    let updated = h.send(
        "PATCH",
        &format!("/v1/memories/{id}"),
        &json!({"content": "the deploy needs the production key"}),
        &[],
    );
    assert_eq!(updated.status, 200, "{:?}", updated.json());
    let new_id = updated.json()["memory_id"].as_u64().unwrap();
    assert_ne!(new_id, id);
    let history = h.get(&format!("/v1/memories/{new_id}/history"));
    assert_eq!(history.status, 200);
    let search = h.post(
        "/v1/search",
        json!({"query": "production key", "user_id": "ada"}),
    );
    assert_eq!(search.json()["results"][0]["id"], new_id);
    // Entities and a session's messages, ids in the path.
    assert_eq!(h.post("/v1/users", json!({"user_id": "bob"})).status, 200);
    assert_eq!(
        h.post("/v1/users/bob/sessions", json!({"session_id": "s1"}))
            .status,
        200
    );
    let added = h.post(
        "/v1/users/bob/sessions/s1/messages",
        json!({"messages": [{"role": "user", "content": "I moved to Lisbon"}]}),
    );
    assert_eq!(added.json()["count"], 1);
    assert_eq!(
        h.get("/v1/users/bob/sessions/s1").json()["session"]["id"],
        "s1"
    );
    assert_eq!(h.get("/v1/users/nobody").status, 404);
    // Items, the key in the path.
    let put = h.send(
        "PUT",
        "/v1/users/bob/items/prefs%2Fcoffee",
        &json!({"value": {"milk": "oat"}, "text": "coffee with oat milk"}),
        &[],
    );
    assert_eq!(put.status, 200, "{:?}", put.json());
    assert_eq!(
        h.get("/v1/users/bob/items/prefs%2Fcoffee").json()["item"]["key"],
        "prefs/coffee"
    );
    // A query value that is not its type is refused naming the field, 400.
    let bad = h.get("/v1/memories?limit=many");
    assert_eq!((bad.status, &bad.json()["field"]), (400, &json!("limit")));
    assert_eq!(
        h.send(
            "DELETE",
            &format!("/v1/memories/{new_id}"),
            &Value::Null,
            &[]
        )
        .status,
        200
    );
    assert_eq!(h.get(&format!("/v1/memories/{new_id}")).status, 404);
    drop(server);
}

#[test]
fn statuses_follow_the_error_codes_and_the_body_is_always_the_error_json() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, mut h) = server(dir.path(), &["--max-line-bytes", "4096"]);
    let check = |r: &Reply, status: u16, code: &str| {
        assert_eq!(r.status, status, "{:?}", String::from_utf8_lossy(&r.body));
        let body = r.json();
        assert_eq!(body["code"], code, "{body}");
        assert!(body["message"].as_str().is_some_and(|m| !m.is_empty()));
    };
    check(&h.get("/no/such/route"), 404, "not_found");
    check(
        &h.send("PUT", "/v1/search", &json!({}), &[]),
        405,
        "bad_request",
    );
    check(
        &h.post("/v1/commands/NO_SUCH", json!({})),
        404,
        "unknown_command",
    );
    check(
        &h.post("/v1/memories", json!({"content": "x", "bogus": 1})),
        400,
        "invalid",
    );
    check(&h.post("/v1/memories", json!({})), 400, "invalid");
    let not_json = b"POST /v1/memories HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 5\r\n\r\n{bad}";
    check(&h.raw(not_json), 400, "bad_request");
    let not_object = h.send("POST", "/v1/memories", &json!([1, 2]), &[]);
    check(&not_object, 400, "bad_request");
    let text = b"POST /v1/memories HTTP/1.1\r\nHost: localhost\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nhi";
    check(&h.raw(text), 415, "bad_request");
    let big = json!({"content": "y".repeat(8000)});
    check(&h.post("/v1/memories", big), 413, "limit_exceeded");
    let already = h.post("/v1/users", json!({"user_id": "ada"}));
    assert_eq!(already.status, 200);
    check(
        &h.post("/v1/users", json!({"user_id": "ada"})),
        409,
        "already_exists",
    );
    // Nothing of the refused requests was stored.
    assert_eq!(h.get("/v1/memories").json()["total"], 0);
}

#[test]
fn tokens_are_bearer_tokens_with_their_user_and_mode_on_every_route() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "admin-s3cret\nada ada-s3cret\nro ro-s3cret\n").unwrap();
    let (server, mut h) = server(dir.path(), &["--token-file", tokens.to_str().unwrap()]);
    let missing = h.get("/v1/memories");
    assert_eq!(missing.status, 401);
    assert!(
        missing
            .header("www-authenticate")
            .is_some_and(|v| v.starts_with("Bearer"))
    );
    h.token = Some("wrong".into());
    assert_eq!(h.get("/v1/memories").status, 401);
    assert_eq!(
        h.get("/metrics").status,
        401,
        "metrics need a token when tokens are set"
    );
    assert_eq!(h.get("/healthz").status, 200, "probes need none");
    h.token = Some("ada-s3cret".into());
    assert_eq!(
        h.post("/v1/memories", json!({"content": "ada's note"}))
            .status,
        200
    );
    let other = h.post("/v1/memories", json!({"content": "x", "user_id": "bob"}));
    assert_eq!(other.status, 403);
    h.token = Some("ro-s3cret".into());
    assert_eq!(h.get("/v1/memories?user_id=ada").json()["total"], 1);
    let write = h.post("/v1/memories", json!({"content": "from a read-only token"}));
    assert_eq!(
        (write.status, &write.json()["code"]),
        (403, &json!("forbidden"))
    );
    assert_eq!(h.get("/metrics").status, 200);
    // The line protocol follows the same modes.
    let mut line = server.client();
    line.ok("AUTH", json!({"token": "ro-s3cret"}));
    line.fails("STORE", json!({"content": "no"}), "forbidden");
    assert_eq!(
        line.ok("SEARCH", json!({"query": "note", "user_id": "ada"}))["results"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert!(!server.log().contains("s3cret"), "a token reached the log");
}

#[test]
fn host_and_origin_are_checked_and_cors_answers_only_the_allowlist() {
    let dir = tempfile::tempdir().unwrap();
    let (server, mut h) = server(
        dir.path(),
        &["--http-allow-origin", "https://app.example.com"],
    );
    let addr = server.http.unwrap();
    let req = |host: &str, origin: Option<&str>, method: &str| {
        let mut r = format!("{method} /healthz HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\n");
        if let Some(o) = origin {
            r.push_str(&format!(
                "Origin: {o}\r\nAccess-Control-Request-Method: POST\r\n"
            ));
        }
        r.push_str("\r\n");
        r.into_bytes()
    };
    // DNS rebinding: a name the server does not answer to.
    assert_eq!(h.raw(&req("evil.example", None, "GET")).status, 403);
    assert_eq!(
        h.raw(&req(&format!("localhost:{}", addr.port()), None, "GET"))
            .status,
        200
    );
    // The server's own origin, and one on the list, pass; others are refused.
    let own = format!("http://{addr}");
    assert_eq!(
        h.raw(&req(&addr.to_string(), Some(&own), "GET")).status,
        200
    );
    let listed = h.raw(&req(
        &addr.to_string(),
        Some("https://app.example.com"),
        "GET",
    ));
    assert_eq!(listed.status, 200);
    assert_eq!(
        listed.header("access-control-allow-origin"),
        Some("https://app.example.com")
    );
    let preflight = h.raw(&req(
        &addr.to_string(),
        Some("https://app.example.com"),
        "OPTIONS",
    ));
    assert_eq!(preflight.status, 204);
    assert!(
        preflight
            .header("access-control-allow-headers")
            .is_some_and(|v| v.contains("authorization"))
    );
    let evil = h.raw(&req(&addr.to_string(), Some("https://evil.example"), "GET"));
    assert_eq!(evil.status, 403);
    assert!(evil.header("access-control-allow-origin").is_none());
}

#[test]
fn beyond_loopback_needs_tokens_and_tls_or_says_insecure() {
    let dir = tempfile::tempdir().unwrap();
    let refused = |args: &[&str]| {
        let out = crate::support::amberdb()
            .args([
                "serve",
                "--embedder",
                "hashing",
                "--port",
                "0",
                "--data-dir",
            ])
            .arg(dir.path().join("store"))
            .args(args)
            .env_remove("AMBERDB_TOKEN")
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?} started");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    assert!(refused(&["--http", "0.0.0.0:0"]).contains("needs tokens"));
    assert!(refused(&["--bind", "0.0.0.0"]).contains("needs tokens"));
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "s3cret\n").unwrap();
    let t = tokens.to_str().unwrap();
    assert!(refused(&["--token-file", t, "--http", "0.0.0.0:0"]).contains("needs TLS"));
    assert!(refused(&["--tls-cert", "/x"]).contains("tls"));
    // With tokens and --insecure-http it starts.
    let server = Server::start(
        &dir.path().join("store"),
        &["--token-file", t, "--http", "0.0.0.0:0", "--insecure-http"],
    );
    let mut h = Http::connect(SocketAddr::from((
        [127, 0, 0, 1],
        server.http.unwrap().port(),
    )));
    h.token = Some("s3cret".into());
    assert_eq!(h.get("/v1/stats").status, 200);
}

#[test]
fn connections_share_the_cap_and_idle_ones_are_closed() {
    let dir = tempfile::tempdir().unwrap();
    let (server, _) = server(
        dir.path(),
        &["--max-connections", "2", "--idle-timeout", "1"],
    );
    let http = server.http.unwrap();
    let mut line = server.client();
    line.ok("PING", json!({}));
    let mut a = Http::connect(http);
    assert_eq!(a.get("/healthz").status, 200);
    // Two connections held (one line, one HTTP): the third is refused, 503.
    let mut b = Http::connect(http);
    let refused = b.get("/healthz");
    assert_eq!(
        (refused.status, &refused.json()["code"]),
        (503, &json!("too_many_connections"))
    );
    // An idle keep-alive connection is closed after idle_timeout, freeing its slot.
    std::thread::sleep(Duration::from_millis(2500));
    assert!(
        a.read_reply().is_none(),
        "the idle HTTP connection was closed"
    );
    let mut c = Http::connect(http);
    assert_eq!(c.get("/healthz").status, 200);
}

/// The MemFuse SDK from PyPI, unchanged, pointed at amberdb: `init`, `add`, `query`, each
/// reply valid under MemFuse's own contract schemas (tests/python/memfuse_client.py).
#[test]
fn the_memfuse_sdk_inits_adds_and_queries_unchanged() {
    let python = crate::support::sdk_python();
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "memfuse-s3cret\n").unwrap();
    let (server, _) = server(dir.path(), &["--token-file", tokens.to_str().unwrap()]);
    let url = format!("http://{}", server.http.unwrap());
    crate::support::run_python(
        &python,
        "memfuse_client.py",
        &[url.as_ref(), "memfuse-s3cret".as_ref()],
        &[],
        "all checks passed",
    );
}

/// The OpenAPI document: the committed docs/openapi.json is what the binary generates (run
/// `amberdb openapi > docs/openapi.json` after changing a command), valid under
/// openapi-spec-validator, served at /openapi.json, and a property-based run of schemathesis
/// against a real server finds no 5xx, no undocumented status or content type, and no reply
/// outside its schema. Commands that read or write files on the server's host (BACKUP, EXPORT,
/// IMPORT) and REEMBED are left out of the run: a fuzzer never names paths on this machine.
#[test]
fn the_openapi_document_is_current_valid_and_holds_under_schemathesis() {
    let generated = crate::support::amberdb().arg("openapi").output().unwrap();
    assert!(generated.status.success());
    let committed =
        std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/openapi.json")).unwrap();
    assert!(
        generated.stdout == committed,
        "docs/openapi.json differs from what `amberdb openapi` prints: run `amberdb openapi > docs/openapi.json`"
    );
    // Run as modules: the venv's entry-point scripts name the path it was built at.
    let python = crate::support::sdk_python();
    let validated = std::process::Command::new(&python)
        .args(["-m", "openapi_spec_validator"])
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/openapi.json"))
        .output()
        .unwrap();
    assert!(
        validated.status.success(),
        "{}",
        String::from_utf8_lossy(&validated.stdout)
    );
    let dir = tempfile::tempdir().unwrap();
    let (server, mut h) = server(dir.path(), &[]);
    assert_eq!(
        h.get("/openapi.json").json(),
        serde_json::from_slice::<Value>(&committed).unwrap()
    );
    let seed = std::env::var("SCHEMATHESIS_SEED").unwrap_or_else(|_| "20261202".to_owned());
    eprintln!("schemathesis seed {seed} (SCHEMATHESIS_SEED to change)");
    let run = std::process::Command::new(&python)
        .args([
            "-m",
            "schemathesis.cli",
            "run",
            &format!("http://{}/openapi.json", server.http.unwrap()),
        ])
        .args([
            "--seed",
            &seed,
            "--max-examples",
            "10",
            "--max-time",
            "45",
            "--workers",
            "1",
        ])
        .args([
            "--exclude-path-regex",
            "(BACKUP|EXPORT|IMPORT|REEMBED|^/mcp)",
        ])
        // Its stateful phase puts an id it sent in a body into a path without percent-encoding
        // it (a user "%F1%BB…" created, then /v1/users/%F1%BB… asked for, which is another id):
        // a false "created resource not found". The routes' ids round-trip in
        // resource_routes_run_their_commands_with_path_query_and_body.
        .args(["--phases", "examples,coverage,fuzzing"])
        // The argument schemas say types and ranges, not every rule of an id or a text (no
        // control characters, not blank): acceptance of valid data is not checked here.
        .args([
            "--exclude-checks",
            "positive_data_acceptance,negative_data_rejection",
        ])
        .env("NO_COLOR", "1")
        // Its cache and crash reports go in the test's own directory, not the clone.
        .current_dir(dir.path())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "schemathesis found failures:\n{out}");
    still_serving(&server);
}

/// `/metrics` passes `promtool check metrics` (Debian's prometheus package, which
/// `scripts/prometheus-tools` unpacks), counts requests by command and code, and carries no
/// user id, token or query text; `/readyz` says ready and `/healthz` answers.
#[test]
fn metrics_pass_promtool_and_carry_no_user_data() {
    let cache = crate::support::cache_dir().join("prometheus/usr/bin/promtool");
    assert!(
        cache.exists(),
        "{} is missing: run scripts/prometheus-tools (scripts/test does)",
        cache.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "ada ada-s3cret-token\n").unwrap();
    let (_server, mut h) = server(dir.path(), &["--token-file", tokens.to_str().unwrap()]);
    h.token = Some("ada-s3cret-token".into());
    h.post(
        "/v1/memories",
        json!({"content": "the secret recipe uses saffron"}),
    );
    h.post("/v1/search", json!({"query": "unusual query words zebra"}));
    h.get("/v1/memories/999");
    h.post("/v1/memories", json!({"content": "x", "bogus": 1}));
    let ready = h.get("/readyz");
    assert_eq!(
        (ready.status, &ready.json()["status"]),
        (200, &json!("ready"))
    );
    let metrics = h.get("/metrics");
    assert_eq!(metrics.status, 200);
    assert!(
        metrics
            .header("content-type")
            .is_some_and(|t| t.starts_with("text/plain; version=0.0.4"))
    );
    let text = String::from_utf8(metrics.body).unwrap();
    for line in [
        "amberdb_requests_total{command=\"STORE_MEMORY\",code=\"ok\"} 1",
        "amberdb_requests_total{command=\"STORE_MEMORY\",code=\"invalid\"} 1",
        "amberdb_requests_total{command=\"GET_BY_MEMORY_ID\",code=\"not_found\"} 1",
        "amberdb_store_memories 1",
    ] {
        assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
    }
    for private in ["ada", "s3cret", "saffron", "zebra"] {
        assert!(!text.contains(private), "{private} in /metrics");
    }
    let mut lint = std::process::Command::new(&cache)
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    lint.stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = lint.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// TLS on rustls: a self-signed certificate (made by `openssl` for the test) serves `https`,
/// which curl verifies against it; plain HTTP to the TLS port gets no answer; a certificate
/// file that is not one refuses the start, naming the file.
#[test]
fn tls_serves_https_and_a_bad_certificate_refuses_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    let made = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
        ])
        .args(["-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl makes the test's certificate");
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "s3cret\n").unwrap();
    let server = Server::start(
        &dir.path().join("store"),
        &[
            "--token-file",
            tokens.to_str().unwrap(),
            "--http",
            "127.0.0.1:0",
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
    );
    let port = server.http.unwrap().port();
    let curl = |url: String| {
        std::process::Command::new("curl")
            .args([
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "--max-time",
                "5",
                "--cacert",
            ])
            .arg(&cert)
            .args(["-H", "Authorization: Bearer s3cret", &url])
            .output()
            .unwrap()
    };
    let ok = curl(format!("https://127.0.0.1:{port}/v1/stats"));
    assert_eq!(String::from_utf8_lossy(&ok.stdout), "200");
    let plain = curl(format!("http://127.0.0.1:{port}/v1/stats"));
    assert_ne!(
        String::from_utf8_lossy(&plain.stdout),
        "200",
        "plain HTTP on the TLS port"
    );
    std::fs::write(dir.path().join("bad.pem"), "not a certificate\n").unwrap();
    let refused = crate::support::amberdb()
        .args([
            "serve",
            "--embedder",
            "hashing",
            "--port",
            "0",
            "--http",
            "127.0.0.1:0",
        ])
        .arg("--tls-cert")
        .arg(dir.path().join("bad.pem"))
        .arg("--tls-key")
        .arg(&key)
        .arg("--data-dir")
        .arg(dir.path().join("other"))
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("bad.pem"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
}

/// A client that sends requests and never reads the responses holds its connection no longer
/// than `idle_timeout` plus `slow_client_timeout`: then it is dropped and its slot is free.
#[test]
fn a_client_that_never_reads_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let (server, mut h) = server(
        dir.path(),
        &["--idle-timeout", "1", "--slow-client-timeout", "1"],
    );
    let stuck = std::net::TcpStream::connect(server.http.unwrap()).unwrap();
    let request = format!(
        "GET /openapi.json HTTP/1.1\r\nHost: {}\r\n\r\n",
        server.http.unwrap()
    );
    (&stuck).write_all(request.repeat(200).as_bytes()).unwrap();
    let open = |h: &mut Http| {
        let text = String::from_utf8(
            h.send("GET", "/metrics", &Value::Null, &[("Connection", "close")])
                .body,
        )
        .unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix("amberdb_connections_open "))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap()
    };
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(open(&mut h), 2.0, "the stuck connection and this one");
    std::thread::sleep(Duration::from_millis(3500));
    assert_eq!(open(&mut h), 1.0, "the stuck connection was dropped");
    drop(stuck);
}
