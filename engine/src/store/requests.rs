//! Writes that carry a request id (`docs/semantics.md`, "Retries and request ids"): a retry
//! inside the window is answered with the first attempt's reply and never applied twice.
//!
//! A caller (the server's dispatch) begins a request with its id and a fingerprint of what it
//! asks; a new one runs on the handle it is given, whose first logged write carries the mark
//! (`Db::commit`), and is finished with the reply it produced, kept in a frame of its own.
//! On a batch's handle (`Store::deferred_batch`, as the server runs every request) the write
//! and its reply share the batch's one fsync. While it runs, the same id in this process is
//! `Running`; a retry answered from the table is answered only once the first attempt's write
//! is durable (under the handle's durability, as a write of its own would be).

use crate::error::{EngineError, Result};
use crate::kernel::db::RequestMark;
use crate::kernel::log::Op;
use crate::kernel::request::{MAX_KEPT_REPLY, RequestId, RequestRecord};
use crate::store::Store;
use std::sync::Arc;

/// What a request id found.
#[derive(Debug)]
pub enum Begun {
    /// A new request: run it on the handle, then [`RequestRun::finish`] with its reply.
    Run(RequestRun),
    /// Answered before: the first attempt's reply, as it was kept (JSON text).
    Answered(String),
    /// Applied before, at log position `seq`, with no reply kept: the store stopped between
    /// the write and its reply's frame, before that attempt was acknowledged.
    AppliedUnanswered {
        /// The position of the write's frame.
        seq: u64,
    },
    /// The first attempt is still running in this process.
    Running,
}

/// A request being run: its handle, and the id held as running until it is dropped.
#[derive(Debug)]
pub struct RequestRun {
    store: Store,
    mark: Arc<RequestMark>,
}

impl RequestRun {
    /// The handle to run the request on: its first logged write carries the mark.
    #[must_use]
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Keeps `reply` for retries, if the request wrote anything (a request that changed
    /// nothing is run again by a retry, which changes nothing either). A reply longer than
    /// 1 MiB is kept as a note saying so, with the write's position.
    ///
    /// # Errors
    /// As any write (`DiskFull`, `Poisoned`): the request's own write stands, and a retry is
    /// answered `AppliedUnanswered`.
    pub fn finish(self, reply: String) -> Result<()> {
        let Some(seq) = self.mark.marked() else {
            return Ok(());
        };
        let reply = if reply.len() > MAX_KEPT_REPLY {
            serde_json::json!({
                "reply": "OK",
                "request_id": self.mark.id.to_string(),
                "seq": seq,
                "note": format!(
                    "the first attempt's reply was {} bytes, longer than the {MAX_KEPT_REPLY} kept for retries",
                    reply.len()
                ),
            })
            .to_string()
        } else {
            reply
        };
        let record = RequestRecord {
            id: self.mark.id,
            fingerprint: self.mark.fingerprint,
            at: self.store.now(),
            seq,
            reply: Some(reply),
        };
        self.store
            .commit(|_, _| Ok((Some(Op::Request(Box::new(record))), ())))
    }
}

impl Drop for RequestRun {
    fn drop(&mut self) {
        self.store
            .inner
            .running_requests
            .lock()
            .remove(&self.mark.id);
    }
}

impl Store {
    /// Begins a write that carries `id`; `fingerprint` is a hash of what it asks (command and
    /// arguments), which a retry must repeat.
    ///
    /// # Errors
    /// `Invalid` (field `request_id`) for an id made more than the window ago or ahead (a
    /// retry that late is refused, never applied again), or one used before for another
    /// request. An answer from the table is given once the first attempt's write is
    /// durable: `Poisoned` (or `DiskFull`) if that fails.
    pub fn begin_request(&self, id: RequestId, fingerprint: u64) -> Result<Begun> {
        let invalid = |reason: String| EngineError::Invalid {
            field: "request_id",
            reason,
        };
        id.check_window(self.now()).map_err(invalid)?;
        let (answer, seq) = {
            // The table is looked up under the running set's lock, so an attempt that
            // finishes meanwhile is either running or in the table.
            let mut running = self.inner.running_requests.lock();
            let state = self.read();
            let Some(e) = state.request(&id) else {
                if !running.insert(id) {
                    return Ok(Begun::Running);
                }
                let mark = Arc::new(RequestMark::new(id, fingerprint));
                return Ok(Begun::Run(RequestRun {
                    store: Store {
                        request: Some(Arc::clone(&mark)),
                        ..self.clone()
                    },
                    mark,
                }));
            };
            if e.fingerprint != fingerprint {
                return Err(invalid(format!(
                    "request id {id} was first used for another request (another command or \
                     other arguments); a retry must send the same request"
                )));
            }
            let answer = match &e.reply {
                Some(reply) => Begun::Answered(reply.clone()),
                None if running.contains(&id) => return Ok(Begun::Running),
                None => Begun::AppliedUnanswered { seq: e.seq },
            };
            (answer, e.seq)
        };
        // The first attempt's write may still wait for its fsync (its batch's): this answer
        // reports it, so it waits as a write of this handle would.
        self.inner.db.acknowledge(&self.durability, seq)?;
        Ok(answer)
    }
}
