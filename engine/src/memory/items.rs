//! Items (`docs/semantics.md`, "Items"): a JSON value under a key, per user, found by key or
//! by the meaning of its text. What a LangGraph `BaseStore` keeps.
//!
//! Guarantees: a user has at most one live item per key; a put of a live key deletes the old
//! record in the frame that stores the new one, so a crash leaves the old item or the new one,
//! never both or neither; no write hook changes, merges or refuses an item; reading an item by
//! key writes nothing.

use crate::error::Result;
use crate::kernel::log::Op;
use crate::kernel::record::{Item, Memory, MemoryId, NewMemory, validate_item_key};
use crate::memory::search::{MAX_OFFSET, MAX_PAGE};
use crate::memory::{Stored, in_range};
use crate::store::Store;

/// A user that holds items, and how many.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ItemUser {
    /// The user.
    pub user_id: String,
    /// Its live items.
    pub items: usize,
}

impl Store {
    /// Puts `value` (a JSON object) under `key` for the user, found by the meaning of `text`:
    /// `store` of [`NewMemory::item`]. A live item of the same key is replaced in the same
    /// frame (`Stored::replaced`), keeping when the key was first written.
    ///
    /// # Errors
    /// As `store`: `Invalid` / `LimitExceeded` naming `key`, `value` or `content`, and the
    /// rest.
    pub fn put_item(
        &self,
        user_id: Option<&str>,
        item: Item,
        text: impl Into<String>,
    ) -> Result<Stored> {
        let mut m = NewMemory::item(item.key, item.value, text);
        m.user_id = user_id.map(str::to_owned);
        self.store(m)
    }

    /// The user's live item of `key`, if any. Not an access: nothing is written.
    ///
    /// # Errors
    /// `Invalid` for a bad user id or key; `OutOfScope`.
    pub fn get_item(&self, user_id: Option<&str>, key: &str) -> Result<Option<Memory>> {
        let user = self.user_for(user_id)?;
        validate_item_key(key)?;
        let state = self.read();
        Ok(state
            .find_item(&user, key)
            .and_then(|id| state.get(id))
            .cloned())
    }

    /// Deletes the user's live item of `key`; `None` when there is none (nothing changes).
    ///
    /// # Errors
    /// `Invalid`, `OutOfScope`, and a failed commit's errors.
    pub fn delete_item(&self, user_id: Option<&str>, key: &str) -> Result<Option<MemoryId>> {
        let user = self.user_for(user_id)?;
        validate_item_key(key)?;
        self.commit(|_, state| {
            Ok(match state.find_item(&user, key) {
                Some(id) => (Some(Op::Delete { id }), Some(id)),
                None => (None, None),
            })
        })
    }

    /// The user's live items whose key starts with `prefix`, in key order, from `offset`.
    ///
    /// # Errors
    /// `Invalid` for a bad user id, a prefix with control characters, or a limit out of
    /// 1..=50 or an offset out of 0..=10,000.
    pub fn list_items(
        &self,
        user_id: Option<&str>,
        prefix: &str,
        offset: usize,
        limit: usize,
    ) -> Result<Vec<Memory>> {
        let user = self.user_for(user_id)?;
        if !prefix.is_empty() {
            validate_item_key(prefix)?;
        }
        in_range("limit", limit, 1, MAX_PAGE)?;
        in_range("offset", offset, 0, MAX_OFFSET)?;
        let state = self.read();
        let Some(u) = state.user(&user) else {
            return Ok(Vec::new());
        };
        Ok(u.items
            .range(prefix.to_owned()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .skip(offset)
            .take(limit)
            .filter_map(|(_, id)| state.get(*id).cloned())
            .collect())
    }

    /// Every user that holds a live item (of a scoped store: its user, if it holds one), in
    /// user order.
    #[must_use]
    pub fn item_users(&self) -> Vec<ItemUser> {
        let state = self.read();
        state
            .user_entities()
            .into_iter()
            .filter(|e| self.scope().is_none_or(|s| s == e.user_id))
            .filter_map(|e| {
                let items = state.user(&e.user_id)?.items.len();
                (items > 0).then(|| ItemUser {
                    user_id: e.user_id.clone(),
                    items,
                })
            })
            .collect()
    }
}
