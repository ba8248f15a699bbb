//! The Rust client (`amberdb_server::client`) against the real server and against servers
//! that misbehave on purpose: a dead seed, a connection lost after a write was sent, `busy`,
//! a reply that is not JSON, a wrong token.

use crate::support::Server;
use amberdb_server::client::{Client, ClientError};
use serde_json::json;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::time::Duration;

/// An address nothing listens on (a port bound, then released).
fn dead_addr() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

/// A one-connection server on loopback that answers each line it reads with the next of
/// `replies` (`None`: close the connection without answering). Returns its address and the
/// lines it read.
fn scripted(replies: Vec<Option<&'static str>>) -> (String, std::thread::JoinHandle<Vec<String>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let handle = std::thread::spawn(move || {
        let (stream, _) = l.accept().unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut writer = stream;
        let mut seen = Vec::new();
        for reply in replies {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                break;
            }
            seen.push(line.trim_end().to_owned());
            let Some(reply) = reply else { break };
            writer.write_all(reply.as_bytes()).unwrap();
            writer.write_all(b"\n").unwrap();
        }
        seen
    });
    (addr, handle)
}

#[test]
fn a_client_skips_a_dead_seed_and_reports_a_refusal_with_the_servers_code() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "shared-secret-1\n").unwrap();
    let server = Server::start(
        &dir.path().join("store"),
        &["--token-file", tokens.to_str().unwrap()],
    );
    let live = server.addr.to_string();
    let seeds = [dead_addr(), live.clone()];
    let mut c = Client::connect(
        &seeds,
        Some("shared-secret-1"),
        Some(Duration::from_secs(10)),
    )
    .expect("the second seed answers");
    assert_eq!(c.addr(), Some(live.as_str()));
    let stored = c
        .call(
            "STORE",
            &json!({"user_id": "ada", "content": "the deploy key rotates on Fridays"}),
        )
        .expect("store");
    let id = stored["memory_id"].as_u64().expect("an id");
    let got = c.call("GET", &json!({"memory_id": id})).expect("get");
    assert_eq!(
        got["memory"]["content"],
        "the deploy key rotates on Fridays"
    );
    match c.call("GET", &json!({"memory_id": id + 1000})) {
        Err(ClientError::Refused { code, reply, .. }) => {
            assert_eq!(code, "not_found");
            assert_eq!(reply["ok"], false);
        }
        other => panic!("a missing memory is a refusal, got {other:?}"),
    }
    assert!(matches!(
        c.call("STORE", &json!({"user_id": "ada", "content": ""})),
        Err(ClientError::Refused { code, .. }) if code == "invalid"
    ));
    assert!(matches!(
        c.call("NOT_A_COMMAND", &json!({})),
        Err(ClientError::Request(_))
    ));
    assert!(matches!(
        c.call("GET", &json!([1])),
        Err(ClientError::Request(_))
    ));
    // Nothing the refusals named was stored.
    let listed = c
        .call("LIST_RECENT_MEMORIES", &json!({"user_id": "ada"}))
        .expect("list");
    assert_eq!(listed["memories"].as_array().map(Vec::len), Some(1));
    match Client::connect(&[live.as_str()], Some("wrong"), None) {
        Err(ClientError::Refused { code, .. }) => assert_eq!(code, "unauthorized"),
        other => panic!("a wrong token is refused, got {other:?}"),
    }
    match Client::connect(&[dead_addr(), dead_addr()], None, None) {
        Err(ClientError::Unreachable { tried }) => assert_eq!(tried.len(), 2),
        other => panic!("no seed answers, got {other:?}"),
    }
}

/// A one-connection proxy to `to` that forwards the first line it reads, reads the server's
/// reply, and drops the connection without passing it on: a write that ran, whose reply was
/// lost. Returns its address and the line it forwarded.
fn loses_the_reply(to: String) -> (String, std::thread::JoinHandle<String>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let handle = std::thread::spawn(move || {
        let (stream, _) = l.accept().unwrap();
        let mut line = String::new();
        BufReader::new(stream).read_line(&mut line).unwrap();
        let upstream = std::net::TcpStream::connect(&to).unwrap();
        (&upstream).write_all(line.as_bytes()).unwrap();
        let mut reply = String::new();
        BufReader::new(&upstream).read_line(&mut reply).unwrap();
        line.trim_end().to_owned()
    });
    (addr, handle)
}

#[test]
fn a_lost_reply_is_fetched_again_by_its_request_id_and_the_write_runs_once() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("store"), &[]);
    let live = server.addr.to_string();
    // A read: the first seed takes it and drops the connection; the second answers.
    let (flaky, seen) = scripted(vec![None]);
    let mut c =
        Client::connect(&[flaky, live.clone()], None, Some(Duration::from_secs(10))).unwrap();
    let stats = c
        .call("STATS", &serde_json::Value::Null)
        .expect("read again elsewhere");
    assert_eq!(stats["ok"], true);
    assert_eq!(c.addr(), Some(live.as_str()));
    assert_eq!(seen.join().unwrap(), vec!["STATS"]);
    // A write that ran and whose reply was lost: the client sends it again, with the request
    // id it made, and gets the first attempt's reply; the store holds it once.
    let (proxy, forwarded) = loses_the_reply(live.clone());
    let mut c =
        Client::connect(&[proxy, live.clone()], None, Some(Duration::from_secs(10))).unwrap();
    let stored = c
        .call(
            "STORE",
            &json!({"user_id": "ada", "content": "sent twice, stored once"}),
        )
        .expect("answered by its request id");
    let line = forwarded.join().unwrap();
    assert!(
        line.contains("\"request_id\""),
        "the client made an id: {line}"
    );
    let mut check = server.client();
    let listed = check.ok("LIST_RECENT_MEMORIES", json!({"user_id": "ada"}));
    let memories = listed["memories"].as_array().unwrap();
    assert_eq!(memories.len(), 1, "ran once: {listed}");
    assert_eq!(stored["memory_id"], memories[0]["id"], "{stored:?}");
    // A write whose every seed is gone after it was sent: unknown, naming its request id.
    let (flaky, seen) = scripted(vec![None]);
    let mut c = Client::connect(
        &[flaky.clone(), dead_addr()],
        None,
        Some(Duration::from_secs(10)),
    )
    .unwrap();
    c.set_failover_wait(Duration::from_secs(1));
    match c.call(
        "STORE",
        &json!({"user_id": "ada", "content": "nobody answers"}),
    ) {
        Err(ClientError::Unknown { addr, reason }) => {
            assert_eq!(addr, flaky);
            assert!(reason.contains("request_id"), "{reason}");
        }
        other => panic!("a write no server answered is unknown, got {other:?}"),
    }
    assert_eq!(seen.join().unwrap().len(), 1);
}

#[test]
fn busy_is_retried_after_the_wait_it_names_and_a_reply_that_is_not_json_is_an_error() {
    let (addr, seen) = scripted(vec![
        Some(r#"{"ok":false,"code":"busy","message":"at capacity","retry_after_ms":20}"#),
        Some(r#"{"ok":true,"pong":true}"#),
        Some("this is not json"),
    ]);
    let mut c = Client::connect(&[addr.as_str()], None, Some(Duration::from_secs(10))).unwrap();
    let started = std::time::Instant::now();
    let pong = c
        .call("PING", &serde_json::Value::Null)
        .expect("answered after busy");
    assert_eq!(pong["pong"], true);
    assert!(
        started.elapsed() >= Duration::from_millis(20),
        "it waited as told"
    );
    match c.call("PING", &serde_json::Value::Null) {
        Err(ClientError::Protocol { reply, .. }) => assert_eq!(reply, "this is not json"),
        other => panic!("a reply that is not JSON is an error, got {other:?}"),
    }
    assert_eq!(seen.join().unwrap(), vec!["PING", "PING", "PING"]);
}
