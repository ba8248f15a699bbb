//! `request_id` on every write command (`docs/protocol.md`, "Request ids"): a retry with the
//! same id is answered with the first attempt's reply and never run twice. The library keeps
//! the ids and replies in the store's log (`amberdb::Store::begin_request`); this module
//! takes the id out of the arguments, fingerprints the request, and keeps and restores the
//! reply (a failure included: a command that changed something and then failed answers its
//! retry with that failure).

use super::common::*;
use amberdb::{Begun, RequestId};
use sha2::{Digest, Sha256};

/// The request id `args` carry, taken out of them.
///
/// # Errors
/// `invalid` naming `request_id` for one that is not a string or not a version-7 UUID.
pub(super) fn take(args: &mut Map<String, Value>) -> Result<Option<RequestId>, Fail> {
    match args.shift_remove("request_id") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => RequestId::parse(&s)
            .map(Some)
            .map_err(|why| Fail::invalid("request_id", why)),
        Some(_) => Err(Fail::invalid(
            "request_id",
            "a request id is a string (a UUID version 7)",
        )),
    }
}

/// A hash of what a request asks: the command, the user the connection is bound to, and
/// every argument (keys sorted at every depth, so the order a client sent them in does not
/// count).
pub(super) fn fingerprint(command: &str, user: Option<&str>, args: &Map<String, Value>) -> u64 {
    let mut h = Sha256::new();
    h.update(command.as_bytes());
    h.update([0]);
    h.update(user.unwrap_or("").as_bytes());
    h.update([0]);
    canonical(&Value::Object(args.clone()), &mut h);
    let digest = h.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(digest.get(..8).unwrap_or(&[0; 8]));
    u64::from_le_bytes(first)
}

fn canonical(v: &Value, h: &mut Sha256) {
    match v {
        Value::Object(o) => {
            let mut keys: Vec<&String> = o.keys().collect();
            keys.sort();
            h.update(b"{");
            for k in keys {
                h.update(serde_json::to_string(k).unwrap_or_default().as_bytes());
                h.update(b":");
                if let Some(v) = o.get(k) {
                    canonical(v, h);
                }
                h.update(b",");
            }
            h.update(b"}");
        }
        Value::Array(a) => {
            h.update(b"[");
            for v in a {
                canonical(v, h);
                h.update(b",");
            }
            h.update(b"]");
        }
        other => h.update(other.to_string().as_bytes()),
    }
}

/// Runs `handler` under request id `id` on `ctx`'s store: answers a retry from what the
/// first attempt kept, or runs it and keeps its reply. The write and its reply's frame share
/// one fsync: on a batch's handle (the dispatch's) they join its batch, on any other (the
/// Python `Store`'s) they make one, which is durable before the reply returns.
pub(super) fn run_once(
    ctx: &Ctx,
    id: RequestId,
    fingerprint: u64,
    handler: impl FnOnce(&Ctx) -> Outcome,
) -> Outcome {
    let (outcome, pending) = ctx.store.deferred_batch(|store| {
        let on = Ctx {
            store: store.clone(),
            metrics: Arc::clone(&ctx.metrics),
        };
        answer(&on, id, fingerprint, handler)
    });
    engine(pending.wait().map_err(amberdb::EngineError::from))?;
    outcome
}

fn answer(
    ctx: &Ctx,
    id: RequestId,
    fingerprint: u64,
    handler: impl FnOnce(&Ctx) -> Outcome,
) -> Outcome {
    match engine(ctx.store.begin_request(id, fingerprint))? {
        Begun::Answered(kept) => restore(&kept).map(|reply| with_text(&ctx.store, reply)),
        Begun::AppliedUnanswered { seq } => Ok(json!({
            "success": true,
            "request_id": id.to_string(),
            "applied_at_seq": seq,
            "message": format!(
                "request {id} was applied (log position {seq}) but its reply was not kept: the \
                 server stopped between the write and its reply, before it acknowledged it"
            ),
        })),
        Begun::Running => {
            let mut f = Fail::new(
                Code::Busy,
                format!(
                    "request {id} is still running (its first attempt): retry in a moment with \
                     the same id for its reply"
                ),
            );
            f.body.insert("retry_after_ms".into(), json!(100));
            Err(f)
        }
        Begun::Run(run) => {
            let on = Ctx {
                store: run.store().clone(),
                metrics: Arc::clone(&ctx.metrics),
            };
            let result = handler(&on);
            if let Err(e) = run.finish(keep(&result)) {
                // The write stands and is answered; a retry is told it was applied.
                tracing::warn!(request_id = %id, error = %e, "keeping a request's reply failed");
            }
            result
        }
    }
}

/// The fields of a reply that quote the memory it names (`memory_id`): kept replies leave them
/// out, so a deleted memory's text and tags leave every file with it (`docs/semantics.md`,
/// "Retries and request ids"); a retry's reply takes them from the memory as it is then.
const QUOTED: [&str; 2] = ["content_preview", "tags"];

/// Where a kept reply lists the `QUOTED` fields it left out.
const LEFT_OUT: &str = "~quoted";

/// `reply` with the fields a kept reply left out (`LEFT_OUT`) filled from the memory it names
/// as it is now: empty when that memory is gone.
fn with_text(store: &amberdb::Store, mut reply: Value) -> Value {
    let Some(o) = reply.as_object_mut() else {
        return reply;
    };
    let Some(Value::Array(left_out)) = o.shift_remove(LEFT_OUT) else {
        return reply;
    };
    let now = (o.get("memory_id").and_then(Value::as_u64))
        .and_then(|id| store.get(amberdb::MemoryId(id)).ok());
    for field in left_out.iter().filter_map(Value::as_str) {
        let value = match field {
            "content_preview" => json!(
                now.as_ref()
                    .map_or_else(String::new, |m| amberdb::preview(&m.content))
            ),
            _ => json!(now.as_ref().map_or_else(Vec::new, |m| m.tags.clone())),
        };
        o.insert(field.to_owned(), value);
    }
    reply
}

/// The text a reply is kept as: `{"ok": reply}` (without the fields that quote a memory,
/// `QUOTED`) or `{"fail": {"code", "body"}}`.
fn keep(result: &Outcome) -> String {
    match result {
        Ok(v) => {
            let mut v = v.clone();
            if let Some(o) = v.as_object_mut()
                && o.contains_key("memory_id")
            {
                let left_out: Vec<&str> = QUOTED
                    .into_iter()
                    .filter(|f| o.shift_remove(*f).is_some())
                    .collect();
                if !left_out.is_empty() {
                    o.insert(LEFT_OUT.into(), json!(left_out));
                }
            }
            json!({ "ok": v })
        }
        Err(f) => json!({ "fail": { "code": f.code.as_str(), "body": f.body } }),
    }
    .to_string()
}

fn restore(kept: &str) -> Outcome {
    let broken = || Fail::new(Code::Internal, "a kept reply does not decode");
    let v: Value = serde_json::from_str(kept).map_err(|_| broken())?;
    if let Some(ok) = v.get("ok") {
        return Ok(ok.clone());
    }
    let fail = v.get("fail").ok_or_else(broken)?;
    let code = fail
        .get("code")
        .and_then(Value::as_str)
        .and_then(|c| Code::ALL.into_iter().find(|k| k.as_str() == c))
        .ok_or_else(broken)?;
    let body = fail
        .get("body")
        .and_then(Value::as_object)
        .cloned()
        .ok_or_else(broken)?;
    Err(Fail { code, body })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fingerprint_ignores_key_order_and_sees_every_value_and_the_bound_user() {
        let a: Map<String, Value> =
            serde_json::from_str(r#"{"content": "x", "tags": ["a", "b"], "o": {"p": 1, "q": 2}}"#)
                .unwrap();
        let b: Map<String, Value> =
            serde_json::from_str(r#"{"o": {"q": 2, "p": 1}, "tags": ["a", "b"], "content": "x"}"#)
                .unwrap();
        let c: Map<String, Value> =
            serde_json::from_str(r#"{"content": "x", "tags": ["b", "a"], "o": {"p": 1, "q": 2}}"#)
                .unwrap();
        assert_eq!(
            fingerprint("STORE_MEMORY", None, &a),
            fingerprint("STORE_MEMORY", None, &b)
        );
        assert_ne!(
            fingerprint("STORE_MEMORY", None, &a),
            fingerprint("STORE_MEMORY", None, &c)
        );
        assert_ne!(
            fingerprint("STORE_MEMORY", None, &a),
            fingerprint("UPDATE_MEMORY", None, &a)
        );
        assert_ne!(
            fingerprint("STORE_MEMORY", None, &a),
            fingerprint("STORE_MEMORY", Some("alice"), &a)
        );
    }

    #[test]
    fn kept_replies_come_back_as_they_were_failures_included() {
        let ok: Outcome = Ok(json!({"memory_id": 3, "success": true}));
        assert_eq!(restore(&keep(&ok)), ok);
        let fail: Outcome = Err(Fail::new(Code::NotFound, "no memory 9"));
        assert_eq!(restore(&keep(&fail)), fail);
        assert!(restore("not json").is_err());
    }

    #[test]
    fn kept_replies_quote_no_memory_and_a_retry_takes_its_text_as_it_is_now() {
        let dir = tempfile::tempdir().unwrap();
        let store = amberdb::Store::open(dir.path(), amberdb::StoreOptions::hashing()).unwrap();
        let id = store
            .store(amberdb::NewMemory::new("a secret about the launch").tags(["launch"]))
            .unwrap()
            .memory_id;
        let first: Outcome = Ok(json!({
            "memory_id": id.0, "outcome": "stored",
            "content_preview": "a secret about the launch", "tags": ["launch"],
        }));
        let kept = keep(&first);
        assert!(
            !kept.contains("secret") && !kept.contains("launch"),
            "{kept}"
        );
        let retried = restore(&kept).map(|r| with_text(&store, r));
        assert_eq!(retried, first, "the same reply while the memory lives");
        store.delete(id).unwrap();
        let gone = with_text(&store, restore(&kept).unwrap());
        assert_eq!(gone["content_preview"], "");
        assert_eq!(gone["tags"], json!([]));
        // A reply that quoted nothing comes back as it was.
        let deleted: Outcome = Ok(json!({"memory_id": id.0, "success": true}));
        assert_eq!(
            restore(&keep(&deleted)).map(|r| with_text(&store, r)),
            deleted
        );
    }
}
