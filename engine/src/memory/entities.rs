//! Users, agents and sessions (`docs/search.md`, "Users, agents, sessions"), and the two
//! record kinds that hang off them: messages (in a session) and knowledge (per user).
//!
//! Guarantees: creating or deleting an entity is one log frame, and deleting one deletes
//! every record that belongs to it in that same frame (all of it or none of it after a crash);
//! an agent or session is looked up only under its own user, so another user's is "not found".

use super::Stored;
use super::scope::{check_scope, user_index};
use super::write::StoreRequest;
use crate::error::{EngineError, Result};
use crate::kernel::log::Op;
use crate::kernel::record::{self, Entity, EntityKind, Kind, MAX_NAME_CHARS, NewMemory};
use crate::kernel::state::State;
use crate::store::Store;

/// The field that names an entity of `kind` in requests and errors.
#[must_use]
pub(crate) fn field_of(kind: EntityKind) -> &'static str {
    match kind {
        EntityKind::User => "user_id",
        EntityKind::Agent => "agent_id",
        EntityKind::Session => "session_id",
    }
}

/// What `delete_entity` removed.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct EntityDeleted {
    /// User, agent or session.
    pub kind: EntityKind,
    /// Its id.
    pub id: String,
    /// Live records deleted with it.
    pub deleted_records: usize,
}

fn lookup<'a>(state: &'a State, kind: EntityKind, user: &str, id: &str) -> Result<&'a Entity> {
    let not_found = || EngineError::EntityNotFound {
        field: field_of(kind),
        id: id.to_owned(),
    };
    let u = match kind {
        EntityKind::User => state.user(id),
        _ => user_index(state, user)?,
    }
    .ok_or_else(not_found)?;
    match kind {
        EntityKind::User => u.entity.as_ref(),
        EntityKind::Agent => u.agents.get(id),
        EntityKind::Session => u.sessions.get(id),
    }
    .ok_or_else(not_found)
}

impl Store {
    /// Creates a user, agent or session. `user_id` is the owner (ignored for a user, whose
    /// id is `id`); it must exist (the default user always does). A session may name an
    /// agent of the same user. `name` defaults to the id.
    ///
    /// # Errors
    /// `Invalid` / `LimitExceeded` for a bad id or name; `EntityExists`; `EntityNotFound`
    /// for the owner or the session's agent; `Poisoned`, `DiskFull`, `Io`.
    pub fn create_entity(
        &self,
        kind: EntityKind,
        user_id: Option<&str>,
        id: &str,
        name: Option<&str>,
        agent_id: Option<&str>,
    ) -> Result<Entity> {
        let id = id.trim();
        record::validate_id(field_of(kind), id)?;
        let user = self.user_for(match kind {
            EntityKind::User => Some(id),
            _ => user_id,
        })?;
        let user = user.as_str();
        let name = name.map_or(id, str::trim);
        let chars = name.chars().count();
        super::in_range("name length (characters)", chars, 1, MAX_NAME_CHARS)?;
        if kind != EntityKind::Session && agent_id.is_some() {
            return Err(EngineError::Invalid {
                field: "agent_id",
                reason: "only a session has an agent".into(),
            });
        }
        let now = self.now();
        self.commit(|_, state| {
            if lookup(state, kind, user, id).is_ok() {
                return Err(EngineError::EntityExists {
                    field: field_of(kind),
                    id: id.to_owned(),
                });
            }
            let mut ops = Vec::new();
            if kind != EntityKind::User {
                user_index(state, user)?;
                if state.user(user).is_none_or(|u| u.entity.is_none()) {
                    ops.push(Op::Entity(Box::new(Entity {
                        kind: EntityKind::User,
                        user_id: user.to_owned(),
                        id: user.to_owned(),
                        name: user.to_owned(),
                        agent_id: None,
                        created_at: now,
                    })));
                }
            }
            let agent_id = check_scope(state, user, None, agent_id)?;
            let entity = Entity {
                kind,
                user_id: user.to_owned(),
                id: id.to_owned(),
                name: name.to_owned(),
                agent_id,
                created_at: now,
            };
            ops.push(Op::Entity(Box::new(entity.clone())));
            Ok((super::one_frame(ops), entity))
        })
    }

    /// A user, agent or session (`user_id` is the owner; ignored for a user).
    ///
    /// # Errors
    /// `EntityNotFound` naming the field (also for an agent or session of another user).
    pub fn get_entity(&self, kind: EntityKind, user_id: Option<&str>, id: &str) -> Result<Entity> {
        // A user is its own owner: a scoped handle may look up itself only.
        let user = self.user_for(match kind {
            EntityKind::User => Some(id),
            _ => user_id,
        })?;
        let state = self.read();
        lookup(&state, kind, &user, id).cloned()
    }

    /// Every user (`kind` user, `user_id` ignored; a scoped handle sees its own), or the agents
    /// or sessions of a user, in id order.
    ///
    /// # Errors
    /// `EntityNotFound` for an unknown user.
    pub fn list_entities(&self, kind: EntityKind, user_id: Option<&str>) -> Result<Vec<Entity>> {
        let state = self.read();
        if kind == EntityKind::User {
            let users = state.user_entities().into_iter();
            let in_scope = users.filter(|u| self.scope().is_none_or(|s| u.id == s));
            return Ok(in_scope.cloned().collect());
        }
        let Some(u) = user_index(&state, &self.user_for(user_id)?)? else {
            return Ok(Vec::new());
        };
        let map = if kind == EntityKind::Agent {
            &u.agents
        } else {
            &u.sessions
        };
        Ok(map.values().cloned().collect())
    }

    /// Every entity of the store: each user (in id order) followed by its agents and its
    /// sessions (what an export writes).
    #[must_use]
    pub fn all_entities(&self) -> Vec<Entity> {
        let state = self.read();
        let mut out = Vec::new();
        let users = state.user_entities();
        let in_scope = users
            .into_iter()
            .filter(|u| self.scope().is_none_or(|s| u.id == s));
        for user in in_scope {
            out.push(user.clone());
            if let Some(u) = state.user(&user.id) {
                out.extend(u.agents.values().cloned());
                out.extend(u.sessions.values().cloned());
            }
        }
        out
    }

    /// Deletes a user, agent or session and everything that belongs to it, in one frame:
    /// a user's records (live and archived), canonical tags, snapshots, agents and sessions;
    /// a session's records; an agent's records, its sessions and their records.
    ///
    /// # Errors
    /// `EntityNotFound`; `Poisoned`, `DiskFull`, `Io`.
    pub fn delete_entity(
        &self,
        kind: EntityKind,
        user_id: Option<&str>,
        id: &str,
    ) -> Result<EntityDeleted> {
        let user = self.user_for(match kind {
            EntityKind::User => Some(id),
            _ => user_id,
        })?;
        let user = user.as_str();
        let deleted_records = self.commit(|_, state| {
            lookup(state, kind, user, id)?;
            let (live, _) = state.records_of(kind, user, id).unwrap_or_default();
            let op = Op::DeleteEntity {
                kind,
                user_id: user.to_owned(),
                id: id.to_owned(),
            };
            Ok((Some(op), live.len()))
        })?;
        Ok(EntityDeleted {
            kind,
            id: id.to_owned(),
            deleted_records,
        })
    }

    /// Adds knowledge items (user-level facts) to `user_id`, with the store's hooks (a fact
    /// stored twice is one fact). The user is created with its first item.
    ///
    /// # Errors
    /// Per item, as `store_memory`.
    pub fn add_knowledge(
        &self,
        user_id: Option<&str>,
        items: &[String],
    ) -> Result<Vec<Result<Stored>>> {
        let user = self.user_for(user_id)?;
        let user = user.as_str();
        let reqs = items
            .iter()
            .map(|c| StoreRequest::new(NewMemory::new(c.clone()).user(user).kind(Kind::Knowledge)))
            .collect();
        // A fact held already is the outcome `Duplicate`, as for `store`, not an error.
        Ok(self
            .store_requests(reqs)?
            .into_iter()
            .map(|r| self.duplicate_as_outcome(r))
            .collect())
    }
}

/// `e` with the position of the item it is about.
pub(super) fn at_position(field: &'static str, i: usize, e: EngineError) -> EngineError {
    match e {
        EngineError::Invalid { field: f, reason } => EngineError::Invalid {
            field,
            reason: format!("item {i}: {f}: {reason}"),
        },
        other => other,
    }
}
