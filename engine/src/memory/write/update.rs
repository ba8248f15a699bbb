//! `Store::update`: new tags or category in place; new content re-embedded into a record that
//! supersedes the old one.

use super::decide::*;
use super::plan::*;
use super::request::*;
use crate::error::{EngineError, Result};
use crate::kernel::log::Op;
use crate::kernel::record::{MemoryId, NewMemory};
use crate::memory::check_vector;
use crate::store::Store;

impl Store {
    /// Updates a memory (`update`): new tags or category keep its id; new content is
    /// re-embedded into a new record that supersedes the old one, which stays in lineage with
    /// its text and vector. Counts, feedback and `created_at` carry over.
    ///
    /// # Errors
    /// `NotFound` / `Archived`; `Invalid` if nothing is to change or a field is invalid;
    /// `AlreadyExists` if the new content is another memory's; `Embed`, `Poisoned`, `DiskFull`, `Io`.
    pub fn update(&self, req: UpdateRequest) -> Result<Updated> {
        let id = req.memory_id.ok_or_else(|| EngineError::Invalid {
            field: "memory_id",
            reason: "must be given".into(),
        })?;
        if req.content.is_none() && req.category.is_none() && req.tags.is_none() {
            return Err(EngineError::Invalid {
                field: "update",
                reason: "give at least one of content, category, tags".into(),
            });
        }
        let old = self.get(id)?;
        let new_content = req.content.as_ref().is_some_and(|c| *c != old.content);
        let mut m = NewMemory::new(req.content.clone().unwrap_or_else(|| old.content.clone()))
            .category(old.category)
            .tags(req.tags.clone().unwrap_or_else(|| old.tags.clone()))
            .kind(old.kind);
        m.user_id = Some(old.user_id.clone());
        m.session_id.clone_from(&old.session_id);
        m.agent_id.clone_from(&old.agent_id);
        m.role = old.role;
        m.category_text.clone_from(&req.category);
        let p = self.plan(StoreRequest {
            memory: m,
            vector: None,
            hooks: req.hooks.clone(),
        })?;
        // A re-embedding that switches the embedder between here and the commit makes it
        // refuse; the update is then embedded again by the new one.
        loop {
            let given = if new_content {
                None
            } else {
                Some(self.vector(id)?)
            };
            let e = self.embed_one(&p, given)?;
            if let Some(updated) = self.update_embedded(id, new_content, &p, &e)? {
                return Ok(updated);
            }
        }
    }

    pub(super) fn update_embedded(
        &self,
        id: MemoryId,
        new_content: bool,
        p: &Planned,
        e: &Embedded,
    ) -> Result<Option<Updated>> {
        check_vector(e.dim, &e.content)?;
        let (category, _) = self.resolve_category(&p.category, e);
        let now = self.now();
        self.commit_embedded(e.epoch, |ids, state| {
            let current = state
                .get(id)
                .ok_or_else(|| crate::memory::missing(state, id))?;
            let (tags, mut ops, _) = resolve_tags(
                state,
                &p.user,
                &p.tags,
                &e.tags,
                &p.eff.with_calibration(e.calibration),
            );
            let mut record = current.clone();
            record.tags.clone_from(&tags);
            record.category = category;
            record.updated_at = now;
            let mut supersedes = Vec::new();
            if new_content {
                let hash = p.content_hash;
                if let Some(existing) = state.find_hash(&p.user, &hash) {
                    return Err(EngineError::AlreadyExists { existing });
                }
                record.id = ids.nth(0);
                record.content.clone_from(&p.m.content);
                record.content_hash = hash;
                record.supersedes = vec![id];
                supersedes.push(id);
                ops.push(Op::Archive { id });
                ops.push(Op::Store {
                    record: Box::new(record.clone()),
                    vector: e.content.clone(),
                });
            } else {
                ops.push(Op::Update {
                    record: Box::new(record.clone()),
                });
            }
            let updated = Updated {
                memory_id: record.id,
                supersedes,
                tags,
                category,
            };
            Ok((crate::memory::one_frame(ops), updated))
        })
    }
}
