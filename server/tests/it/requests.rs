//! Request ids over the wire (`docs/protocol.md`, "Request ids"; `docs/http.md`, "Retries"):
//! a write sent again with its `request_id` (HTTP: `Idempotency-Key`) is answered with the
//! first attempt's reply and runs once, ADD_MESSAGES and UPDATE included, across a restart;
//! a bad or reused id is refused and changes nothing.

use crate::http::Http;
use crate::support::Server;
use serde_json::{Value, json};

fn id() -> String {
    amberdb::RequestId::new(amberdb::Timestamp::now())
        .unwrap()
        .to_string()
}

fn without_ok(mut v: Value) -> Value {
    v.as_object_mut().map(|o| o.remove("ok"));
    v
}

#[test]
fn a_write_sent_again_with_its_request_id_is_answered_the_same_and_runs_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let (store_id, messages_id, update_id) = (id(), id(), id());
    let (first_store, first_messages, first_update);
    {
        let server = Server::start(&store, &[]);
        let mut c = server.client();
        let store_args = json!({"user_id": "ada", "content": "the build cache lives on the NAS", "request_id": store_id});
        first_store = without_ok(c.ok("STORE", store_args.clone()));
        assert_eq!(without_ok(c.ok("STORE", store_args.clone())), first_store);
        // The same id for another request: refused, nothing changes.
        let reused = c.fails(
            "STORE",
            json!({"user_id": "ada", "content": "another text", "request_id": store_id}),
            "invalid",
        );
        assert!(
            reused["message"]
                .as_str()
                .unwrap()
                .contains("another request"),
            "{reused}"
        );
        // ADD_MESSAGES and UPDATE, which exact dedup cannot make idempotent.
        let turns = json!({"user_id": "ada", "session_id": "s1", "skip_held": false, "messages": [
            {"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi there"}],
            "request_id": messages_id});
        first_messages = without_ok(c.ok("ADD_MESSAGES", turns.clone()));
        assert_eq!(without_ok(c.ok("ADD_MESSAGES", turns)), first_messages);
        let memory_id = first_store["memory_id"].clone();
        let update = json!({"memory_id": memory_id, "tags": ["infra"], "request_id": update_id});
        first_update = without_ok(c.ok("UPDATE", update.clone()));
        assert_eq!(without_ok(c.ok("UPDATE", update)), first_update);
        // Bad ids: refused before anything runs.
        for bad in [
            json!("not-a-uuid"),
            json!(12),
            json!("6ba7b810-9dad-41d1-80b4-00c04fd430c8"),
        ] {
            let f = c.fails(
                "STORE",
                json!({"user_id": "ada", "content": "never stored", "request_id": bad}),
                "invalid",
            );
            assert!(f["message"].as_str().unwrap().contains("request id"), "{f}");
        }
        // A read takes no request id.
        c.fails("STATS", json!({"request_id": id()}), "invalid");
        let stats = c.ok("STATS", json!({}));
        assert_eq!(stats["store"]["request_ids_held"], 3, "{stats}");
        server.terminate();
    }
    // After a restart the log answers.
    let server = Server::start(&store, &[]);
    let mut c = server.client();
    let again = without_ok(c.ok(
        "STORE",
        json!({"user_id": "ada", "content": "the build cache lives on the NAS", "request_id": store_id}),
    ));
    // A kept reply quotes its memory as it is now (`docs/semantics.md`, "A kept reply quotes
    // no memory"): the UPDATE since gave it a tag, and nothing else differs.
    let mut expected = first_store.clone();
    expected["tags"] = json!(["infra"]);
    assert_eq!(again, expected);
    let listed = c.ok(
        "LIST_RECENT_MEMORIES",
        json!({"user_id": "ada", "limit": 50, "kind": "memory"}),
    );
    assert_eq!(listed["memories"].as_array().unwrap().len(), 1, "{listed}");
    let session = c.ok(
        "LIST_RECENT_MEMORIES",
        json!({"user_id": "ada", "limit": 50, "kind": "message"}),
    );
    assert_eq!(
        session["memories"].as_array().unwrap().len(),
        2,
        "the turns were stored once: {session}"
    );
    assert_eq!(first_update["tags"], json!(["infra"]), "{first_update}");
}

#[test]
fn http_takes_the_request_id_from_idempotency_key() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("store"), &[]);
    let mut h = Http::connect(server.http.expect("the server serves HTTP"));
    let key = id();
    let body = json!({"content": "the release is cut on Tuesdays", "user_id": "ada"});
    let first = h.send("POST", "/v1/memories", &body, &[("Idempotency-Key", &key)]);
    assert_eq!(first.status, 200);
    let again = h.send("POST", "/v1/memories", &body, &[("Idempotency-Key", &key)]);
    assert_eq!((again.status, again.json()), (200, first.json()));
    let listed = h.get("/v1/memories?user_id=ada&limit=5").json();
    assert_eq!(listed["memories"].as_array().unwrap().len(), 1);
    // The header and the body disagree: 400, nothing stored.
    let mut both = body.clone();
    both["request_id"] = json!(id());
    let clash = h.send("POST", "/v1/memories", &both, &[("Idempotency-Key", &key)]);
    assert_eq!(clash.status, 400);
    assert!(
        clash.json()["message"]
            .as_str()
            .unwrap()
            .contains("Idempotency-Key")
    );
    // A read refuses the header rather than ignore it.
    let read = h.send(
        "GET",
        "/v1/memories?user_id=ada",
        &Value::Null,
        &[("Idempotency-Key", &key)],
    );
    assert_eq!(read.status, 400);
    let bad = h.send("POST", "/v1/memories", &body, &[("Idempotency-Key", "abc")]);
    assert_eq!(bad.status, 400);
    let listed = h.get("/v1/memories?user_id=ada&limit=5").json();
    assert_eq!(listed["memories"].as_array().unwrap().len(), 1);
}
