//! The write pipeline (`docs/semantics.md`, "Hooks"; `docs/durability.md` steps 1–7): plan
//! every hook, one model call for the content and every text the hooks need, then decide under
//! the writer lock and commit one frame.

mod decide;
mod plan;
mod request;
mod update;

use crate::error::{EngineError, Result};
use crate::memory::preview;
use crate::store::Store;
pub(crate) use decide::merge;
pub use request::*;

impl Store {
    /// Stores a memory through the store's hooks (`docs/semantics.md`): validated, tagged,
    /// categorized, checked against the user's memories for duplicates and older values of
    /// the same fact, then committed as one log frame. `Stored` says what happened and which
    /// live memory holds it (a merged one if it merged).
    ///
    /// # Errors
    /// `Invalid` / `LimitExceeded` for bad input (naming the rule), `DimensionMismatch` for a
    /// given vector of another dimension, `MemoryLimitReached`, `Poisoned`, `DiskFull`, `Io`,
    /// `Embed`. An exact duplicate is not an error: the outcome `Duplicate` with the id of the
    /// memory that holds the content.
    pub fn store(&self, req: impl Into<StoreRequest>) -> Result<Stored> {
        let mut req = req.into();
        let given = req.vector.take();
        let stored = self
            .refuse_known_duplicate(self.plan(req)?)
            .and_then(|planned| {
                let embedded = self.embed_one(&planned, given)?;
                self.decide_and_commit(planned, embedded)
            });
        self.duplicate_as_outcome(stored)
    }

    /// An exact duplicate as the outcome `Duplicate` naming the memory that holds the
    /// content, with that memory's fields: what every interface answers for a duplicate
    /// store (`docs/semantics.md`, "Dedup at store time", step 1). Other results pass unchanged.
    pub(crate) fn duplicate_as_outcome(&self, stored: Result<Stored>) -> Result<Stored> {
        let existing = match stored {
            Err(EngineError::AlreadyExists { existing }) => existing,
            other => return other,
        };
        let m = self.get(existing)?;
        Ok(Stored {
            memory_id: existing,
            outcome: Outcome::Duplicate,
            content_preview: preview(&m.content),
            category: m.category,
            category_reason: "existing",
            tags: m.tags,
            new_canonical_tags: Vec::new(),
            created_at: m.created_at,
            valid_from: m.valid_from,
            supersedes: Vec::new(),
            dedup_candidates: 0,
            decisions: Vec::new(),
            reason: Some(format!(
                "memory {existing} holds this content already; nothing was stored"
            )),
            replaced: None,
        })
    }

    /// Stores a memory written elsewhere (an export, another system's store), keeping its
    /// times, access count and feedback ([`Provenance`]) instead of starting them now: the
    /// same hooks and the same one commit as [`Store::store`]. Its validity begins at its
    /// `created_at` unless the memory says otherwise.
    ///
    /// # Errors
    /// As `store`; `Invalid` naming the field for a time in the future, before 1970, or
    /// before `created_at`, or a confidence outside 0..=1 (checked before anything happens).
    pub fn import(&self, req: impl Into<StoreRequest>, kept: Provenance) -> Result<Stored> {
        let mut req = req.into();
        let given = req.vector.take();
        let planned = self.refuse_known_duplicate(self.plan_kept(req, Some(kept))?)?;
        let embedded = self.embed_one(&planned, given)?;
        self.decide_and_commit(planned, embedded)
    }

    /// Stores several memories with **one** model call for all their contents and every text
    /// their hooks need (about 2× the rate of one `store` each with MiniLM,
    /// `docs/benchmarks.md`). Each memory is still its own commit, in input order, so a later
    /// one can be a duplicate of an earlier one; the result for each is what `store` would
    /// have returned for it.
    ///
    /// # Errors
    /// The outer error is the embedder failing, or a request that carries its own vector (a
    /// batch embeds every content); then nothing was stored.
    pub fn store_batch<R: Into<StoreRequest>>(&self, reqs: Vec<R>) -> Result<Vec<Result<Stored>>> {
        let reqs: Vec<StoreRequest> = reqs.into_iter().map(Into::into).collect();
        if reqs.iter().any(|r| r.vector.is_some()) {
            return Err(EngineError::Invalid {
                field: "vector",
                reason: "a batch embeds every content; store a memory with its own vector alone"
                    .into(),
            });
        }
        Ok(self
            .store_requests(reqs)?
            .into_iter()
            .map(|r| self.duplicate_as_outcome(r))
            .collect())
    }

    /// Steps 1–7 for many requests, with one model call.
    pub(crate) fn store_requests(&self, reqs: Vec<StoreRequest>) -> Result<Vec<Result<Stored>>> {
        self.store_planned(reqs.into_iter().map(|r| self.plan(r)).collect())
    }

    /// [`Store::import`] for many memories with **one** model call, as [`Store::store_batch`]
    /// is to [`Store::store`]: each memory is still its own commit, in input order, and the
    /// result for each is what `import` would have returned for it.
    ///
    /// # Errors
    /// As `store_batch`: a request with its own vector refuses the whole batch, and an
    /// embedder failure fails it; each memory's own errors are in its result.
    pub fn import_batch<R: Into<StoreRequest>>(
        &self,
        reqs: Vec<(R, Provenance)>,
    ) -> Result<Vec<Result<Stored>>> {
        let reqs: Vec<(StoreRequest, Provenance)> =
            reqs.into_iter().map(|(r, kept)| (r.into(), kept)).collect();
        if reqs.iter().any(|(r, _)| r.vector.is_some()) {
            return Err(EngineError::Invalid {
                field: "vector",
                reason: "a batch embeds every content; import a memory with its own vector alone"
                    .into(),
            });
        }
        self.store_planned(
            reqs.into_iter()
                .map(|(r, kept)| self.plan_kept(r, Some(kept)))
                .collect(),
        )
    }

    /// Deletes a memory.
    ///
    /// # Errors
    /// `NotFound` if no live memory has `id`; `Poisoned`, `DiskFull`, `Io`.
    pub fn delete(&self, id: crate::kernel::record::MemoryId) -> Result<()> {
        self.commit(|_, state| {
            self.reach(state, id)?;
            if !state.contains(id) {
                return Err(crate::memory::missing(state, id));
            }
            Ok((Some(crate::kernel::log::Op::Delete { id }), ()))
        })
    }
}
