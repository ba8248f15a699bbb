//! Everything out and back in (`docs/semantics.md`, "Export and import"): every record a
//! store holds, live and archived, with its id, lineage, validity, times, usage, feedback,
//! decision and source id, and the same records put back.
//!
//! Guarantees: an export is one state (taken under one read of it, so a write that lands
//! meanwhile is in it whole or not at all); an import into a store that never gave out the
//! file's ids keeps every id, so `supersedes`, `history` and `lineage` read as they did; an
//! import into a store that did gives each new record a new id (in the file's id order) and
//! rewrites `supersedes` through the same map; a record the store already holds (the same
//! user, kind, session, role, content and `created_at`, or for a live note the same content
//! live: exact dedup) is not stored twice, so an import run again adds nothing. Each chunk of
//! records is one frame: a failure leaves whole chunks, and running the import again goes on
//! where it stopped.

use crate::error::{EngineError, Result};
use crate::kernel::log::Op;
use crate::kernel::record::{self, Entity, Kind, Memory, MemoryId, NewMemory};
use crate::memory::write::Provenance;
use crate::store::Store;
use std::collections::HashMap;

/// Records per frame (and per model call) of an import.
const CHUNK: usize = 256;

/// One record of an export: a memory and whether it is archived (lineage, history).
#[derive(Debug, Clone, PartialEq)]
pub struct ExportedRecord {
    /// The record, as the store holds it.
    pub memory: Memory,
    /// Archived: out of the live set, reachable through `supersedes`, `lineage`, `history`.
    pub archived: bool,
}

/// A store's contents at one state ([`Store::export_all`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Exported {
    /// Every user, agent and session.
    pub entities: Vec<Entity>,
    /// Every record, live and archived, in id order.
    pub records: Vec<ExportedRecord>,
    /// The id the store would give next (ids are never reused).
    pub next_id: MemoryId,
}

/// What [`Store::import_all`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ImportedRecords {
    /// Whether every record kept its id (module doc).
    pub ids_kept: bool,
    /// Live records stored.
    pub stored: usize,
    /// Archived records stored.
    pub archived: usize,
    /// Records the store already held (not stored again).
    pub duplicates: usize,
    /// `(id in the file, id here)` for every record whose id here is another.
    pub renumbered: Vec<(MemoryId, MemoryId)>,
    /// `supersedes` links to records neither the file nor the store holds, dropped when ids
    /// were renumbered (their ids would name other records here).
    pub unlinked: usize,
    /// Live items of this store replaced by the file's item of the same key (as a put does).
    pub items_replaced: usize,
}

/// What makes two records one: who, what kind, where, who said it, what, and when.
type Identity = (
    String,
    Kind,
    Option<String>,
    Option<record::Role>,
    [u8; 32],
    i64,
);

fn identity(m: &Memory) -> Identity {
    (
        m.user_id.clone(),
        m.kind,
        m.session_id.clone(),
        m.role,
        m.content_hash,
        m.created_at.0,
    )
}

impl Store {
    /// Every entity and every record, live and archived, as one state of the store (module
    /// doc). A handle scoped to one user exports that user's.
    ///
    /// # Errors
    /// None today; `Result` for the stores that will read from elsewhere.
    pub fn export_all(&self) -> Result<Exported> {
        // Before the state's lock (the writer's order); a write between the two shows in the
        // records, and the next id covers them below.
        let next_id = self.inner.db.next_id();
        let state = self.read();
        let in_scope = |user: &str| self.scope().is_none_or(|s| s == user);
        let mut records: Vec<ExportedRecord> = state
            .iter()
            .filter(|m| in_scope(&m.user_id))
            .map(|m| ExportedRecord {
                memory: m.clone(),
                archived: false,
            })
            .chain(
                state
                    .archive_sorted()
                    .into_iter()
                    .filter(|a| in_scope(&a.record.user_id))
                    .map(|a| ExportedRecord {
                        memory: a.record.clone(),
                        archived: true,
                    }),
            )
            .collect();
        records.sort_by_key(|r| r.memory.id);
        let next_id = next_id.max(records.last().map_or(1, |r| r.memory.id.0 + 1));
        drop(state);
        let entities = self
            .all_entities()
            .into_iter()
            .filter(|e| in_scope(&e.user_id))
            .collect();
        Ok(Exported {
            entities,
            records,
            next_id: MemoryId(next_id),
        })
    }

    /// Puts exported records back (module doc): checked whole before anything is written,
    /// then stored in chunks of 256, one frame each, with vectors from this store's embedder.
    ///
    /// # Errors
    /// `Invalid` / `LimitExceeded` naming the record (`records[i]`) and field, before anything
    /// is written; `MemoryLimitReached`; `Embed`, `Poisoned`, `DiskFull`, `Io` (the chunks
    /// before it are stored: the import may be run again).
    pub fn import_all(&self, mut records: Vec<ExportedRecord>) -> Result<ImportedRecords> {
        let now = self.now();
        for (i, r) in records.iter_mut().enumerate() {
            check_record(self, &mut r.memory, now)
                .map_err(|e| super::entities::at_position("records", i, e))?;
        }
        records.sort_by_key(|r| r.memory.id);
        if let Some(w) = records
            .windows(2)
            .find(|w| w[0].memory.id == w[1].memory.id)
        {
            return Err(EngineError::Invalid {
                field: "records",
                reason: format!("id {} is given twice", w[0].memory.id),
            });
        }
        let plan = self.plan_import(&records);
        let mut done = ImportedRecords {
            ids_kept: plan.keep_ids,
            duplicates: plan.held.len(),
            renumbered: plan
                .held
                .iter()
                .filter(|(from, to)| from != to)
                .map(|(f, t)| (*f, *t))
                .collect(),
            ..ImportedRecords::default()
        };
        let mut ids: HashMap<MemoryId, MemoryId> = plan.held.iter().copied().collect();
        // `ids` holds exactly the records held so far: the rest are new.
        let new: Vec<ExportedRecord> = records
            .into_iter()
            .filter(|r| !ids.contains_key(&r.memory.id))
            .collect();
        for chunk in new.chunks(CHUNK) {
            let texts: Vec<&str> = chunk.iter().map(|r| r.memory.content.as_str()).collect();
            let embedding = self.embedding();
            let vectors = embedding.embedder.embed_batch(&texts)?;
            if vectors.len() != texts.len() {
                return Err(self.embed_failed("returned another number of vectors"));
            }
            let limit = self.inner.options.memory_limit;
            let keep = plan.keep_ids;
            let committed = self.commit_embedded(embedding.epoch, |next, state| {
                let live = chunk.iter().filter(|r| !r.archived).count();
                if state.live_count() + live > limit {
                    return Err(EngineError::MemoryLimitReached {
                        limit,
                        held: state.live_count(),
                        adding: live,
                    });
                }
                if keep && chunk[0].memory.id < next.nth(0) {
                    return Err(EngineError::Invalid {
                        field: "records",
                        reason: "a write took ids this import keeps meanwhile; import again (it \
                                 goes on where it stopped)"
                            .into(),
                    });
                }
                let (ops, chunk_done) = chunk_ops(chunk, &vectors, keep, &ids, next, state);
                Ok((crate::memory::one_frame(ops), chunk_done))
            })?;
            let Some((assigned, unlinked, replaced)) = committed else {
                // A re-embedding switched the embedder meanwhile: nothing of this chunk was
                // written; the rest is refused rather than stored with mixed vectors.
                return Err(
                    self.embed_failed("the embedder changed during the import; import again")
                );
            };
            done.unlinked += unlinked;
            done.items_replaced += replaced;
            for ((from, to), r) in assigned.into_iter().zip(chunk) {
                ids.insert(from, to);
                if from != to {
                    done.renumbered.push((from, to));
                }
                if r.archived {
                    done.archived += 1;
                } else {
                    done.stored += 1;
                }
            }
        }
        done.renumbered.sort();
        Ok(done)
    }

    /// Which records the store holds already, and whether the file's ids can be kept.
    fn plan_import(&self, records: &[ExportedRecord]) -> ImportPlan {
        let next = self.inner.db.next_id();
        let state = self.read();
        let next = MemoryId(
            next.max(
                state
                    .iter()
                    .chain(state.archive_sorted().into_iter().map(|a| &a.record))
                    .map(|m| m.id.0 + 1)
                    .max()
                    .unwrap_or(1),
            ),
        );
        let mut by_identity: HashMap<Identity, MemoryId> = HashMap::new();
        for m in state
            .iter()
            .chain(state.archive_sorted().into_iter().map(|a| &a.record))
        {
            by_identity.entry(identity(m)).or_insert(m.id);
        }
        let mut held = Vec::new();
        let mut keep_ids = true;
        for r in records {
            let m = &r.memory;
            let same = by_identity.get(&identity(m)).copied().or_else(|| {
                // Exact dedup: one live note per content and user (messages and items are
                // not deduplicated by content).
                (!r.archived && matches!(m.kind, Kind::Memory | Kind::Knowledge))
                    .then(|| state.find_hash(&m.user_id, &m.content_hash))
                    .flatten()
            });
            match same {
                Some(here) => held.push((m.id, here)),
                None => keep_ids &= m.id >= next,
            }
        }
        ImportPlan { keep_ids, held }
    }
}

/// The operations that store one chunk of an import (ids assigned from `next` unless kept,
/// lineage rewritten through `ids`), and what they do: `(id in the file, id here)` pairs,
/// lineage links dropped, live items replaced.
fn chunk_ops(
    chunk: &[ExportedRecord],
    vectors: &[Vec<f32>],
    keep: bool,
    ids: &HashMap<MemoryId, MemoryId>,
    next: &crate::kernel::db::NextIds,
    state: &crate::kernel::state::State,
) -> (Vec<Op>, ChunkDone) {
    let mut ops = Vec::with_capacity(chunk.len());
    let mut assigned: Vec<(MemoryId, MemoryId)> = Vec::with_capacity(chunk.len());
    let mut unlinked = 0;
    let mut replaced = 0;
    for (i, (r, vector)) in chunk.iter().zip(vectors).enumerate() {
        let mut m = r.memory.clone();
        if !keep {
            m.id = next.nth(i as u64);
        }
        // Lineage points at older records: earlier chunks, records held, or this
        // chunk before this one.
        let here = |old: MemoryId| {
            ids.get(&old).copied().or_else(|| {
                assigned
                    .iter()
                    .find(|(from, _)| *from == old)
                    .map(|(_, to)| *to)
            })
        };
        let before = m.supersedes.len();
        m.supersedes = m
            .supersedes
            .iter()
            .filter_map(|old| here(*old).or(keep.then_some(*old)))
            .collect();
        unlinked += before - m.supersedes.len();
        // An item is put back as a put is: the live item of its key here, if
        // any, is replaced in the same frame (one live item per key).
        if let (false, Some(item)) = (r.archived, &m.item)
            && let Some(old) = state.find_item(&m.user_id, &item.key)
        {
            ops.push(Op::Delete { id: old });
            replaced += 1;
        }
        assigned.push((r.memory.id, m.id));
        ops.push(if r.archived {
            Op::StoreArchived {
                record: Box::new(m),
                vector: vector.clone(),
            }
        } else {
            Op::Store {
                record: Box::new(m),
                vector: vector.clone(),
            }
        });
    }
    (ops, (assigned, unlinked, replaced))
}

/// What one chunk did: `(id in the file, id here)`, links dropped, items replaced.
type ChunkDone = (Vec<(MemoryId, MemoryId)>, usize, usize);

/// [`Store::plan_import`]'s findings.
struct ImportPlan {
    keep_ids: bool,
    /// `(id in the file, id here)` of the records the store already holds.
    held: Vec<(MemoryId, MemoryId)>,
}

/// An exported record checked as the API checks what it stores, its content hash computed
/// again (the file's is not trusted).
fn check_record(store: &Store, m: &mut Memory, now: record::Timestamp) -> Result<()> {
    let new = NewMemory {
        content: m.content.clone(),
        category: m.category,
        category_text: None,
        tags: m.tags.clone(),
        user_id: Some(m.user_id.clone()),
        session_id: m.session_id.clone(),
        agent_id: m.agent_id.clone(),
        kind: m.kind,
        role: m.role,
        valid_from: Some(m.valid_from),
        valid_to: m.valid_to,
        item: m.item.clone(),
        source_id: m.source_id.clone(),
    };
    m.tags = record::validate_new(&new)?;
    store.user_for(Some(&m.user_id))?;
    Provenance {
        created_at: m.created_at,
        updated_at: m.updated_at,
        last_accessed_at: m.last_accessed_at,
        access_count: m.access_count,
        helpful_count: m.helpful_count,
        harmful_count: m.harmful_count,
        confidence: Some(m.confidence),
        id: None,
    }
    .validate(now)?;
    if m.valid_to.is_some_and(|to| to <= m.valid_from) {
        return Err(EngineError::Invalid {
            field: "valid_to",
            reason: "must be later than valid_from".into(),
        });
    }
    if m.id.0 == 0 || m.id.0 > crate::memory::write::MAX_SOURCE_ID {
        return Err(EngineError::Invalid {
            field: "id",
            reason: format!("must be in 1..={}", crate::memory::write::MAX_SOURCE_ID),
        });
    }
    m.content_hash = record::content_hash(&m.content);
    Ok(())
}
