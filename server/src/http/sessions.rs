//! MCP sessions over HTTP (`crate::http::mcp`): id → the grant that opened it and when it
//! was last used.

use crate::args::{Code, Fail};
use crate::auth::Grant;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::time::Instant;

/// Sessions held at most; past that the one idle longest is dropped (its client initializes
/// again on its next message's `404`).
pub const MAX_SESSIONS: usize = 4096;

pub(super) const SESSION_HEADER: &str = "mcp-session-id";

/// The open MCP sessions: id → the grant that opened it and when it was last used.
#[derive(Default)]
pub(crate) struct Sessions(Mutex<HashMap<String, (Grant, Instant)>>);

impl Sessions {
    pub(super) fn open(&self, grant: Grant) -> Result<String, Fail> {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes)
            .map_err(|e| Fail::new(Code::Internal, format!("no random session id: {e}")))?;
        let id: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let mut all = self.0.lock();
        if all.len() >= MAX_SESSIONS {
            let oldest = all
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                all.remove(&k);
            }
        }
        all.insert(id.clone(), (grant, Instant::now()));
        Ok(id)
    }

    /// Whether `id` is open for `grant`: `Ok`, or the status that says why not.
    pub(super) fn check(&self, id: &str, grant: &Grant) -> Result<(), Fail> {
        let mut all = self.0.lock();
        match all.get_mut(id) {
            None => Err(Fail::new(
                Code::NotFound,
                "no such MCP session (ended, or the server restarted): initialize again",
            )),
            Some((owner, _)) if owner != grant => Err(Fail::new(
                Code::Forbidden,
                "this MCP session was opened with another token",
            )),
            Some((_, used)) => {
                *used = Instant::now();
                Ok(())
            }
        }
    }

    pub(super) fn close(&self, id: &str) -> bool {
        self.0.lock().remove(id).is_some()
    }
}
