//! Who a request may reach: a user's index, and whether the session and agent it names belong
//! to that user. Every operation scoped to a user checks through here.

use crate::error::{EngineError, Result};
use crate::kernel::record::DEFAULT_USER;
use crate::kernel::state::State;
use crate::kernel::table::UserIndex;

/// A user's index, if the user exists. The default user always exists.
pub(crate) fn user_index<'a>(state: &'a State, user: &str) -> Result<Option<&'a UserIndex>> {
    match state.user(user) {
        Some(u) if u.entity.is_some() => Ok(Some(u)),
        _ if user == DEFAULT_USER => Ok(state.user(user)),
        _ => Err(EngineError::EntityNotFound {
            field: "user_id",
            id: user.to_owned(),
        }),
    }
}

/// Checks that `user`'s session and agent exist: `EntityNotFound` naming the field. A
/// session's own agent wins over none; a different one is `Invalid`. Returns the agent to
/// record.
pub(crate) fn check_scope(
    state: &State,
    user: &str,
    session: Option<&str>,
    agent: Option<&str>,
) -> Result<Option<String>> {
    let u = state.user(user);
    let mut agent = agent.map(str::to_owned);
    if let Some(a) = &agent
        && !u.is_some_and(|u| u.agents.contains_key(a))
    {
        return Err(EngineError::EntityNotFound {
            field: "agent_id",
            id: a.clone(),
        });
    }
    if let Some(s) = session {
        let entity =
            u.and_then(|u| u.sessions.get(s))
                .ok_or_else(|| EngineError::EntityNotFound {
                    field: "session_id",
                    id: s.to_owned(),
                })?;
        match (&agent, &entity.agent_id) {
            (None, Some(own)) => agent = Some(own.clone()),
            (Some(a), Some(own)) if a != own => {
                return Err(EngineError::Invalid {
                    field: "agent_id",
                    reason: format!("session {s:?} belongs to agent {own:?}, not {a:?}"),
                });
            }
            _ => {}
        }
    }
    Ok(agent)
}
