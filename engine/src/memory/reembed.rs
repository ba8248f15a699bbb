//! Re-embedding: moving a store to another embedder online, from its stored texts
//! (`docs/durability.md`, "Re-embedding").
//!
//! Guarantees: nothing a store holds is lost (ids, texts, timestamps, lineage, counts, tags and
//! snapshots are untouched; only vectors change); reads and writes go on throughout, and wait
//! only while the last few vectors are embedded and the switch is committed; every step is a
//! logged frame, so a crash at any point leaves the store on the old embedder with the work
//! done so far staged, and the next `reembed` to the same embedder carries on from there. After
//! the switch a purge removes the old vectors from every file.

use crate::error::{EngineError, KernelError, Result};
use crate::kernel::log::{Op, Reembed};
use crate::kernel::record::MemoryId;
use crate::kernel::state::{Model, State};
use crate::store::{Embedding, Store};
use amberdb_embed::Embedder;
use std::sync::Arc;
use std::time::Instant;

/// Texts embedded per model call and per staged frame.
const CHUNK: usize = 256;
/// What may be left unstaged when the switch begins: embedded while reads and writes wait.
const SWITCH_AT: usize = 64;
/// Passes over what lacks a vector before the switch takes the rest.
const MAX_ROUNDS: usize = 4;
/// Switch attempts before giving up (each one finds the writes that slipped in and tries again).
const SWITCH_ATTEMPTS: usize = 8;

/// What a re-embedding did (`Store::reembed`).
#[derive(Debug, Clone, PartialEq)]
pub struct Reembedded {
    /// The embedder the store uses now.
    pub model_id: String,
    /// Its dimension.
    pub dim: usize,
    /// Records (live and archived) embedded by this call; earlier calls may have staged more.
    pub records: usize,
    /// Canonical tags embedded by this call.
    pub tags: usize,
    /// Seconds from the call to the switch.
    pub seconds: f64,
    /// Seconds reads and writes waited for the switch.
    pub switch_seconds: f64,
    /// Bytes of the store's files after the purge that removed the old vectors.
    pub bytes_after: u64,
}

/// A re-embedding under way (STATS).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReembedStatus {
    /// The embedder it moves to.
    pub model_id: String,
    /// Its dimension.
    pub dim: usize,
    /// Records and canonical tags with a new vector staged.
    pub staged: usize,
    /// Records (live and archived) and canonical tags the store holds.
    pub total: usize,
}

impl Store {
    /// Moves the store to `embedder`: every live and archived record's text and every
    /// canonical tag is embedded again, on the caller's thread, staged in
    /// the log a chunk at a time, then one frame switches the store to the new vectors
    /// (`docs/durability.md`, "Re-embedding"). Searches and writes go on throughout; those
    /// that embedded with the old embedder when the switch lands run again with the new one.
    /// Afterwards the store must be opened with `embedder`. A call interrupted (a crash, an
    /// error) leaves the store on its old embedder; calling again with the same embedder
    /// carries on from what was staged.
    ///
    /// # Errors
    /// `OutOfScope` for a scoped handle; `Invalid` for the store's own embedder, a bad model
    /// id or dimension, or while another re-embedding runs; `Embed` when the new embedder fails
    /// (what was staged stays); `Poisoned`, `DiskFull`, `Io`. Every error comes before the
    /// switch: once it is committed the call succeeds, and a purge after it that fails is
    /// logged and run again by the maintenance thread.
    pub fn reembed(&self, embedder: Arc<dyn Embedder>) -> Result<Reembedded> {
        self.every_user("reembed")?;
        let target = Model {
            id: embedder.model_id().to_owned(),
            dim: embedder.dim(),
        };
        let invalid = |reason: String| EngineError::Invalid {
            field: "embedder",
            reason,
        };
        if target.id.is_empty() || target.id.len() > crate::kernel::identity::MAX_MODEL_ID {
            return Err(invalid("model id must be 1..=256 bytes".into()));
        }
        if target.dim == 0 || target.dim > MAX_DIM {
            return Err(invalid(format!("dimension must be 1..={MAX_DIM}")));
        }
        if *self.read().model() == target {
            return Err(invalid(format!(
                "the store already uses {} ({}-d)",
                target.id, target.dim
            )));
        }
        let _running = self.reembed_turn()?;
        let start = Instant::now();
        let mut done = (0, 0);
        // Stage everything but the last few, with reads and writes going on. Writes keep
        // adding records; after MAX_ROUNDS passes what they added waits for the switch.
        for _ in 0..MAX_ROUNDS {
            let (records, tags) = self.read().unstaged(&target);
            if records.len() + tags.len() <= SWITCH_AT {
                break;
            }
            for chunk in records.chunks(CHUNK) {
                done.0 += self.stage(&*embedder, &target, chunk, &[], false)?.0;
            }
            for chunk in tags.chunks(CHUNK) {
                done.1 += self.stage(&*embedder, &target, &[], chunk, false)?.1;
            }
        }
        // The switch: new embeddings wait while the rest is embedded and the switch frame is
        // committed, so nothing the old embedder computed is committed after it. Writes that
        // embedded before the gate closed may still commit records; the switch frame then
        // finds them unstaged, stages what it has, and the next attempt takes them.
        // No checkpoint may be between its capture and its finish when the switch lands
        // (`Db::between_checkpoints`): one under way finishes first, and the next waits.
        for _ in 0..SWITCH_ATTEMPTS {
            let waited = Instant::now();
            let switched = self.inner.db.between_checkpoints(|| -> Result<bool> {
                let mut gate = self.inner.embedding.write();
                let switched = loop {
                    let (records, tags) = self.read().unstaged(&target);
                    let last = records.len() + tags.len() <= CHUNK;
                    let records = &records[..records.len().min(CHUNK)];
                    let tags = &tags[..tags.len().min(CHUNK - records.len())];
                    let (r, t, switched) = self.stage(&*embedder, &target, records, tags, last)?;
                    done.0 += r;
                    done.1 += t;
                    if last {
                        break switched;
                    }
                };
                if switched {
                    *gate = Embedding {
                        embedder: Arc::clone(&embedder),
                        epoch: self.read().model_epoch(),
                    };
                }
                Ok(switched)
            })?;
            if !switched {
                continue;
            }
            let switch_seconds = waited.elapsed().as_secs_f64();
            let seconds = start.elapsed().as_secs_f64();
            tracing::info!(model = %target.id, dim = target.dim, records = done.0, tags = done.1, seconds, switch_seconds, "re-embedded; purging the old vectors");
            // The old vectors leave every file now (the switch noted them as deleted). The
            // switch stands whatever the purge does: a failed one is logged, counted (STATS)
            // and run again by the maintenance thread, and the reply stays the switch's.
            if let Err(e) = self.inner.db.purge() {
                tracing::warn!(error = %e, "the purge after a re-embedding failed; the maintenance thread runs it again");
            }
            return Ok(Reembedded {
                model_id: target.id,
                dim: target.dim,
                records: done.0,
                tags: done.1,
                seconds,
                switch_seconds,
                bytes_after: self.bytes_on_disk(),
            });
        }
        Err(EngineError::Kernel(KernelError::Internal {
            context: "re-embedding",
            reason: format!(
                "writes kept adding records during {SWITCH_ATTEMPTS} switch attempts; what was staged stays, call again"
            ),
        }))
    }

    /// Drops what an interrupted re-embedding staged (its vectors leave the files at the next
    /// purge). Returns whether there was anything.
    ///
    /// # Errors
    /// `OutOfScope` for a scoped handle; `Invalid` while a re-embedding runs; `Poisoned`,
    /// `DiskFull`, `Io`.
    pub fn cancel_reembed(&self) -> Result<bool> {
        self.every_user("reembed")?;
        let _running = self.reembed_turn()?;
        self.commit(|_, state| {
            if state.stage().is_none() {
                return Ok((None, false));
            }
            let op = Op::Reembed(Box::new(Reembed {
                model_id: state.model().id.clone(),
                dim: u32::try_from(state.model().dim).unwrap_or(u32::MAX),
                ..Reembed::default()
            }));
            Ok((Some(op), true))
        })
    }

    /// The one re-embedding (or cancellation) of the store at a time; `Invalid` while another
    /// runs.
    fn reembed_turn(&self) -> Result<parking_lot::MutexGuard<'_, ()>> {
        self.inner
            .reembedding
            .try_lock()
            .ok_or_else(|| EngineError::Invalid {
                field: "embedder",
                reason: "a re-embedding of this store is running".into(),
            })
    }

    /// The re-embedding under way, if one has staged vectors (`Stats`).
    pub(crate) fn reembed_status(state: &State) -> Option<ReembedStatus> {
        let stage = state.stage()?;
        let model = stage.model.as_ref()?;
        Some(ReembedStatus {
            model_id: model.id.clone(),
            dim: model.dim,
            staged: stage.records.len() + stage.tags.len(),
            total: state.live_count() + state.archive_len() + state.canonical_tags().count(),
        })
    }

    /// Embeds `records` and `tags` with `embedder` and commits them as one frame (with
    /// `switch`, the frame that switches, if nothing else lacks a vector by then). Records and
    /// tags deleted meanwhile are left out. Returns what it staged and whether it switched.
    fn stage(
        &self,
        embedder: &dyn Embedder,
        target: &Model,
        records: &[MemoryId],
        tags: &[(String, String)],
        switch: bool,
    ) -> Result<(usize, usize, bool)> {
        let texts: Vec<(MemoryId, String)> = {
            let state = self.read();
            records
                .iter()
                .filter_map(|id| Some((*id, state.content_of(*id)?.to_owned())))
                .collect()
        };
        let forms: Vec<String> = tags
            .iter()
            .map(|(_, t)| crate::hooks::tags::embedding_form(t))
            .collect();
        let refs: Vec<&str> = texts
            .iter()
            .map(|(_, t)| t.as_str())
            .chain(forms.iter().map(String::as_str))
            .collect();
        let vectors = if refs.is_empty() {
            Vec::new()
        } else {
            embedder.embed_batch(&refs)?
        };
        if vectors.len() != refs.len() || vectors.iter().any(|v| v.len() != target.dim) {
            return Err(EngineError::Embed(amberdb_embed::EmbedError::Failed {
                model_id: target.id.clone(),
                reason: format!(
                    "returned {} vectors for {} texts, or vectors not of dimension {}",
                    vectors.len(),
                    refs.len(),
                    target.dim
                ),
            }));
        }
        let mut vectors = vectors.into_iter();
        let new_records: Vec<(MemoryId, Vec<f32>)> = texts
            .iter()
            .map(|(id, _)| *id)
            .zip(vectors.by_ref())
            .collect();
        let new_tags: Vec<(String, String, Vec<f32>)> = tags
            .iter()
            .cloned()
            .zip(vectors)
            .map(|((u, t), v)| (u, t, v))
            .collect();
        self.commit(|_, state| {
            let exists = |id: &MemoryId| state.contains(*id) || state.archived(*id).is_some();
            let registered = |u: &str, t: &str| state.canonical(u).is_some_and(|c| c.contains(t));
            let records: Vec<(MemoryId, Vec<f32>)> = new_records
                .iter()
                .filter(|(id, _)| exists(id))
                .cloned()
                .collect();
            let tags: Vec<(String, String, Vec<f32>)> = new_tags
                .iter()
                .filter(|(u, t, _)| registered(u, t))
                .cloned()
                .collect();
            let counts = (records.len(), tags.len());
            let mut op = Reembed {
                model_id: target.id.clone(),
                dim: u32::try_from(target.dim).unwrap_or(u32::MAX),
                records,
                tags,
                switch,
            };
            if switch {
                if !state.completes(&op) {
                    // Stage what we have; the caller finds the rest and tries again.
                    op.switch = false;
                    let staged = !(op.records.is_empty() && op.tags.is_empty());
                    return Ok((
                        staged.then(|| Op::Reembed(Box::new(op))),
                        (counts.0, counts.1, false),
                    ));
                }
            } else if op.records.is_empty() && op.tags.is_empty() {
                return Ok((None, (0, 0, false)));
            }
            Ok((
                Some(Op::Reembed(Box::new(op))),
                (counts.0, counts.1, switch),
            ))
        })
    }
}

/// Largest dimension a store re-embeds to: 4,096 f32 (16 KiB) per vector.
const MAX_DIM: usize = 4_096;
