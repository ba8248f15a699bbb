//! Chat turns (`docs/semantics.md`, "Chat turns" and "Chat turns sent again"): messages added
//! to a session, in order, all in one frame or none.
//!
//! Guarantees: a turn the session already holds is not stored again, by one rule on every
//! transport: a turn with a source id (a LangChain or OpenAI message id) that one of the
//! session's turns carries, or, when the turns given begin with every turn the session holds
//! (the whole thread sent again, as LangGraph passes its state), a turn at a position the
//! session holds with the same role and content. Which turns were skipped, and why, is in the
//! result. The check and the write are one step under the writer lock: two callers adding
//! the same thread at once store it once.

use super::entities::at_position;
use super::write::StoreRequest;
use crate::error::{EngineError, Result};
use crate::hooks::{HookOverrides, WriteHook};
use crate::kernel::record::{self, Kind, Memory, MemoryId, NewMemory, Role, Timestamp};
use crate::kernel::state::State;
use crate::store::Store;
use std::collections::HashMap;

/// One chat turn for [`Store::add_turns`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Turn {
    /// Who said it.
    pub role: Role,
    /// What was said.
    pub content: String,
    /// When it was said, if known (its `valid_from`); `None`: when it is stored.
    pub at: Option<Timestamp>,
    /// The caller's id for the turn (a LangChain or OpenAI message id), kept with the record:
    /// a turn sent again with the same id is not stored again.
    pub source_id: Option<String>,
}

impl Turn {
    /// A turn said now, without a source id.
    #[must_use]
    pub fn new(role: Role, content: impl Into<String>) -> Turn {
        Turn {
            role,
            content: content.into(),
            at: None,
            source_id: None,
        }
    }
}

/// What to do with turns the session already holds ([`Store::add_turns_with`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HeldTurns {
    /// Skip them (the rule in the module doc): the default.
    #[default]
    Skip,
    /// Store every turn given, as new turns (a caller that sends only new turns, and means a
    /// repeated one).
    Store,
}

/// Why a turn given was not stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HeldBy {
    /// A turn of the session carries its source id.
    Id,
    /// The turns given begin with the whole session, and this one is at a position the
    /// session holds with the same role and content.
    Position,
}

/// A turn given that the session already held.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct HeldTurn {
    /// Its position in the turns given, from 0.
    pub position: usize,
    /// The record that holds it.
    pub memory_id: MemoryId,
    /// Why it counts as held.
    pub by: HeldBy,
}

/// What [`Store::add_turns`] did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TurnsAdded {
    /// The ids of the turns stored, in the order given.
    pub memory_ids: Vec<MemoryId>,
    /// The turns given that were already held, in the order given.
    pub skipped: Vec<HeldTurn>,
}

/// The session's turns as the rule reads them: how many, and the newest id (a concurrent add
/// changes one of them).
type SessionMark = (usize, Option<MemoryId>);

/// The live turns of `session`, oldest first.
fn session_turns<'a>(state: &'a State, user: &str, session: &str) -> Vec<&'a Memory> {
    let Some(members) = state
        .user(user)
        .and_then(|u| u.session_members.get(session))
    else {
        return Vec::new();
    };
    members
        .iter()
        .filter_map(|id| state.get(*id))
        .filter(|m| m.kind == Kind::Message)
        .collect()
}

/// Which of `turns` the session holds (module doc), and the mark they were judged at.
fn held_turns(
    state: &State,
    user: &str,
    session: &str,
    turns: &[Turn],
) -> (Vec<HeldTurn>, SessionMark) {
    let held = session_turns(state, user, session);
    let mark = (held.len(), held.last().map(|m| m.id));
    let by_source: HashMap<&str, MemoryId> = held
        .iter()
        .filter_map(|m| Some((m.source_id.as_deref()?, m.id)))
        .collect();
    let same = |m: &Memory, t: &Turn| {
        m.role == Some(t.role)
            && m.content == t.content
            && match (&m.source_id, &t.source_id) {
                (Some(a), Some(b)) => a == b,
                _ => true,
            }
    };
    let whole_thread = held.len() <= turns.len() && held.iter().zip(turns).all(|(m, t)| same(m, t));
    let skipped = turns
        .iter()
        .enumerate()
        .filter_map(|(position, t)| {
            if let Some(id) = t.source_id.as_deref().and_then(|s| by_source.get(s)) {
                return Some(HeldTurn {
                    position,
                    memory_id: *id,
                    by: HeldBy::Id,
                });
            }
            (whole_thread && position < held.len()).then(|| HeldTurn {
                position,
                memory_id: held[position].id,
                by: HeldBy::Position,
            })
        })
        .collect();
    (skipped, mark)
}

impl Store {
    /// Adds chat turns to a session of `user_id`, in order, each dated when it is added: as
    /// [`Store::add_turns`] with no turn's time or id given. Returns the ids of the turns
    /// stored (a turn the session already held is not stored again).
    ///
    /// # Errors
    /// As [`Store::add_turns`].
    pub fn add_messages(
        &self,
        user_id: Option<&str>,
        session_id: &str,
        messages: &[(Role, String)],
    ) -> Result<Vec<MemoryId>> {
        let turns: Vec<Turn> = messages
            .iter()
            .map(|(role, content)| Turn::new(*role, content.clone()))
            .collect();
        Ok(self.add_turns(user_id, session_id, &turns)?.memory_ids)
    }

    /// [`Store::add_turns_with`], skipping the turns the session already holds.
    ///
    /// # Errors
    /// As [`Store::add_turns_with`].
    pub fn add_turns(
        &self,
        user_id: Option<&str>,
        session_id: &str,
        turns: &[Turn],
    ) -> Result<TurnsAdded> {
        self.add_turns_with(user_id, session_id, turns, HeldTurns::Skip)
    }

    /// Adds chat turns to a session of `user_id`, in order: each a `message` record with its
    /// role (non-empty content), its source id when given, and, when the turn says when it
    /// was said, that time as its `valid_from` (what `valid_after` / `valid_before` filter
    /// on; `created_at` stays the moment it was stored). With [`HeldTurns::Skip`] a turn the
    /// session already holds is not stored again (module doc); otherwise turns are never
    /// deduplicated (two turns saying "ok" are two turns); tags and categories do not apply.
    /// All are embedded in one batch.
    ///
    /// The user and the session are created with the first turns when they do not exist yet
    /// (as a stored memory creates its user), in the same commit.
    ///
    /// # Errors
    /// `Invalid` / `LimitExceeded` for the session id or a turn, naming its position (checked
    /// for every turn before any is stored; two turns with one source id are refused);
    /// `Embed`, `MemoryLimitReached`, `Poisoned`, `DiskFull`, `Io`, `LimitExceeded` for a list
    /// over one frame (16 MiB). The turns are one log frame: an error means none was stored.
    pub fn add_turns_with(
        &self,
        user_id: Option<&str>,
        session_id: &str,
        turns: &[Turn],
        held: HeldTurns,
    ) -> Result<TurnsAdded> {
        let user = self.user_for(user_id)?;
        let user = user.as_str();
        record::validate_id("session_id", session_id)?;
        let reqs: Vec<StoreRequest> = turns
            .iter()
            .map(|t| turn_request(user, session_id, t))
            .collect();
        let mut sources: HashMap<&str, usize> = HashMap::new();
        for (i, (r, t)) in reqs.iter().zip(turns).enumerate() {
            record::validate_new(&r.memory).map_err(|e| at_position("messages", i, e.into()))?;
            if let Some(first) = t.source_id.as_deref().and_then(|s| sources.insert(s, i)) {
                return Err(EngineError::Invalid {
                    field: "messages",
                    reason: format!(
                        "item {i}: its id is the id of item {first}: one turn, sent twice"
                    ),
                });
            }
        }
        loop {
            let (skipped, mark) = match held {
                HeldTurns::Skip => held_turns(&self.read(), user, session_id, turns),
                HeldTurns::Store => (Vec::new(), (0, None)),
            };
            let new: Vec<StoreRequest> = reqs
                .iter()
                .enumerate()
                .filter(|(i, _)| !skipped.iter().any(|h| h.position == *i))
                .map(|(_, r)| r.clone())
                .collect();
            if new.is_empty() {
                return Ok(TurnsAdded {
                    memory_ids: Vec::new(),
                    skipped,
                });
            }
            // What was judged held must still be what the session holds when the turns are
            // committed: a concurrent add to the session means judging again.
            let unchanged = |state: &State| {
                held == HeldTurns::Store || {
                    let turns = session_turns(state, user, session_id);
                    (turns.len(), turns.last().map(|m| m.id)) == mark
                }
            };
            if let Some(memory_ids) = self.store_all_or_none(new, &unchanged)? {
                return Ok(TurnsAdded {
                    memory_ids,
                    skipped,
                });
            }
        }
    }
}

/// The store request of one turn: a plain record, no hook.
fn turn_request(user: &str, session_id: &str, t: &Turn) -> StoreRequest {
    let mut m = NewMemory::new(t.content.clone())
        .user(user)
        .message(session_id, t.role);
    if let Some(at) = t.at {
        m = m.valid_from(at);
    }
    m.source_id.clone_from(&t.source_id);
    StoreRequest {
        memory: m,
        vector: None,
        hooks: HookOverrides {
            skip: vec![
                WriteHook::ExactDedup,
                WriteHook::SemanticDedup,
                WriteHook::Tags,
                WriteHook::Category,
            ],
            ..HookOverrides::default()
        },
    }
}
