//! Reads and single-record changes of the seed: get (an access), delete, stats,
//! cleanup, feedback, lineage. Search is `search.rs`.

use super::{in_range, preview};
use crate::error::{EngineError, Result};
use crate::kernel::log::Op;
use crate::kernel::record::{self, Category, Memory, MemoryId};
use crate::store::Store;

/// `get_memory_stats`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct MemoryStats {
    /// The user's live memories.
    pub total_memories: usize,
    /// Live memories of every user.
    pub store_memories: usize,
    /// The store's memory limit.
    pub memory_limit: usize,
    /// `store_memories / memory_limit`, percent, one decimal.
    pub usage_percentage: f64,
    /// The user's memories per category, largest first (a JSON object, as
    /// vector-memory-mcp's).
    #[serde(serialize_with = "category_counts")]
    pub categories: Vec<(Category, usize)>,
    /// The user's memories created in the last 7 days.
    pub recent_week_count: usize,
    /// Bytes of the store's files, in MiB, two decimals.
    pub database_size_mb: f64,
    /// The embedder's model id.
    pub embedding_model: String,
    /// Its dimension.
    pub embedding_dimensions: usize,
    /// The user's five most accessed memories.
    pub top_accessed: Vec<TopAccessed>,
    /// `Healthy` under 70% use, `Monitor - Consider cleanup` under 90%, else `Warning - Near
    /// limit`.
    pub health_status: &'static str,
    /// Records kept in the archive (all users).
    pub archived: usize,
}

/// One of `MemoryStats::top_accessed`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TopAccessed {
    /// The memory.
    pub memory_id: MemoryId,
    /// Its first 100 characters.
    pub content_preview: String,
    /// Its access count.
    pub access_count: u64,
}

/// Category counts as one JSON object, largest first.
fn category_counts<S: serde::Serializer>(
    counts: &[(Category, usize)],
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut map = s.serialize_map(Some(counts.len()))?;
    for (c, n) in counts {
        map.serialize_entry(c.as_str(), n)?;
    }
    map.end()
}

/// `clear_old_memories`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Cleared {
    /// How many were deleted.
    pub deleted_count: usize,
    /// Which.
    pub deleted_ids: Vec<MemoryId>,
    /// The user's live memories left.
    pub remaining_count: usize,
}

/// Feedback on a memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feedback {
    /// It helped: confidence moves 0.1 of the way to 1.
    Helpful,
    /// It misled: confidence moves 0.2 of the way to 0.
    Harmful,
}

/// The result of `feedback`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct FeedbackResult {
    /// The memory.
    pub memory_id: MemoryId,
    /// Helpful feedback so far.
    pub helpful_count: u32,
    /// Harmful feedback so far.
    pub harmful_count: u32,
    /// Confidence now.
    pub confidence: f32,
}

impl Store {
    /// Counts one access of the memory `id` (what the seed's `get_by_memory_id` does) and
    /// returns it as counted. A plain read is `get`. A poisoned store still answers, without
    /// counting (`Stats::accesses_not_recorded`).
    ///
    /// # Errors
    /// `NotFound`; `Archived` with the successor for a merged or superseded id.
    pub fn record_access(&self, id: MemoryId) -> Result<Memory> {
        let mut m = self.get(id)?;
        if let Some(at) = self.touch(vec![id]) {
            m.access_count += 1;
            m.last_accessed_at = m.last_accessed_at.max(at);
        }
        Ok(m)
    }

    /// One user's statistics (the seed's `get_memory_stats`); `stats` is the store's.
    ///
    /// # Errors
    /// `Invalid` for a bad user id.
    pub fn user_stats(&self, user_id: Option<&str>) -> Result<MemoryStats> {
        let user = self.user_for(user_id)?;
        let user = user.as_str();
        let week_ago = self.now().minus_days(7);
        let state = self.read();
        let mine: Vec<&Memory> = state.iter().filter(|m| m.user_id == user).collect();
        let mut categories: Vec<(Category, usize)> = Category::ALL
            .iter()
            .map(|c| (*c, mine.iter().filter(|m| m.category == *c).count()))
            .filter(|(_, n)| *n > 0)
            .collect();
        categories.sort_by_key(|c| std::cmp::Reverse(c.1));
        let mut top: Vec<&Memory> = mine.clone();
        top.sort_by(|a, b| b.access_count.cmp(&a.access_count).then(a.id.cmp(&b.id)));
        let top_accessed = top
            .iter()
            .take(5)
            .map(|m| TopAccessed {
                memory_id: m.id,
                content_preview: preview(&m.content),
                access_count: m.access_count,
            })
            .collect();
        let limit = self.inner.options.memory_limit;
        let store_memories = state.live_count();
        #[expect(clippy::cast_precision_loss, reason = "a percentage")]
        let usage = (store_memories as f64 / limit as f64 * 1000.0).round() / 10.0;
        let health_status = if usage < 70.0 {
            "Healthy"
        } else if usage < 90.0 {
            "Monitor - Consider cleanup"
        } else {
            "Warning - Near limit"
        };
        let bytes = self.bytes_on_disk();
        #[expect(clippy::cast_precision_loss, reason = "a size in MiB")]
        let mb = (bytes as f64 / f64::from(1 << 20) * 100.0).round() / 100.0;
        let embedder = self.embedding().embedder;
        Ok(MemoryStats {
            total_memories: mine.len(),
            store_memories,
            memory_limit: limit,
            usage_percentage: usage,
            categories,
            recent_week_count: mine.iter().filter(|m| m.created_at >= week_ago).count(),
            database_size_mb: mb,
            embedding_model: embedder.model_id().to_owned(),
            embedding_dimensions: embedder.dim(),
            top_accessed,
            health_status,
            archived: state.archive_len(),
        })
    }

    /// Deletes the user's memories older than `days_old` (1..=365) while more than
    /// `max_to_keep` (100..=10,000) remain, least accessed first, then oldest: one frame
    /// (`clear_old_memories`). Younger memories are never deleted.
    ///
    /// # Errors
    /// `Invalid` / `LimitExceeded` naming the parameter; `Poisoned`, `DiskFull`, `Io`.
    pub fn clear_old_memories(
        &self,
        user_id: Option<&str>,
        days_old: u64,
        max_to_keep: usize,
    ) -> Result<Cleared> {
        let user = self.user_for(user_id)?;
        record::validate_id("user_id", &user)?;
        in_range(
            "days_old",
            usize::try_from(days_old).unwrap_or(usize::MAX),
            1,
            365,
        )?;
        in_range("max_to_keep", max_to_keep, 100, 10_000)?;
        let cutoff = self.now().minus_days(days_old);
        let (deleted, remaining) = self.commit(|_, state| {
            let mine: Vec<&Memory> = state.iter().filter(|m| m.user_id == user).collect();
            let mut old: Vec<&&Memory> = mine.iter().filter(|m| m.created_at < cutoff).collect();
            old.sort_by(|a, b| {
                a.access_count
                    .cmp(&b.access_count)
                    .then(a.created_at.cmp(&b.created_at))
                    .then(a.id.cmp(&b.id))
            });
            let n = old.len().min(mine.len().saturating_sub(max_to_keep));
            let deleted: Vec<MemoryId> = old.iter().take(n).map(|m| m.id).collect();
            let ops = deleted.iter().map(|id| Op::Delete { id: *id }).collect();
            Ok((super::one_frame(ops), (deleted, mine.len() - n)))
        })?;
        Ok(Cleared {
            deleted_count: deleted.len(),
            deleted_ids: deleted,
            remaining_count: remaining,
        })
    }

    /// Records helpful or harmful feedback and moves the memory's confidence.
    ///
    /// # Errors
    /// `NotFound` / `Archived`; `Poisoned`, `DiskFull`, `Io`.
    pub fn feedback(&self, id: MemoryId, feedback: Feedback) -> Result<FeedbackResult> {
        let m = self.commit(|_, state| {
            self.reach(state, id)?;
            let mut m = state.get(id).cloned().ok_or_else(|| missing(state, id))?;
            match feedback {
                Feedback::Helpful => {
                    m.helpful_count = m.helpful_count.saturating_add(1);
                    m.confidence += 0.1 * (1.0 - m.confidence);
                }
                Feedback::Harmful => {
                    m.harmful_count = m.harmful_count.saturating_add(1);
                    m.confidence -= 0.2 * m.confidence;
                }
            }
            m.updated_at = self.now();
            let op = Op::Update {
                record: Box::new(m.clone()),
            };
            Ok((Some(op), m))
        })?;
        Ok(FeedbackResult {
            memory_id: id,
            helpful_count: m.helpful_count,
            harmful_count: m.harmful_count,
            confidence: m.confidence,
        })
    }

    /// Every archived record `id`'s lineage reaches (what it merged, superseded or replaced),
    /// depth first, each once.
    ///
    /// # Errors
    /// `NotFound` if `id` is neither live nor archived.
    pub fn lineage(&self, id: MemoryId) -> Result<Vec<Memory>> {
        let state = self.read();
        self.reach(&state, id)?;
        if !state.contains(id) && state.archived(id).is_none() {
            return Err(EngineError::NotFound { id });
        }
        Ok(state
            .lineage(id)
            .into_iter()
            .map(|a| a.record.clone())
            .collect())
    }

    /// The versions of the fact `id` belongs to (`docs/semantics.md`, "Validity in time"):
    /// from the live record that holds it now (following `id`'s successors), that record and
    /// everything its lineage reaches, with their validity, newest `valid_from` first.
    ///
    /// # Errors
    /// `NotFound` if `id` is neither live nor archived.
    pub fn history(&self, id: MemoryId) -> Result<History> {
        let state = self.read();
        self.reach(&state, id)?;
        let head = if state.contains(id) {
            id
        } else if state.archived(id).is_some() {
            state.successor(id).unwrap_or(id)
        } else {
            return Err(EngineError::NotFound { id });
        };
        let mut versions: Vec<Version> = Vec::new();
        let head_record = state
            .get(head)
            .map(|m| (m.clone(), "current"))
            .or_else(|| state.archived(head).map(|a| (a.record.clone(), "replaced")));
        if let Some((m, status)) = head_record {
            versions.push(Version { memory: m, status });
        }
        for a in state.lineage(head) {
            let status = if a.record.valid_to.is_some() {
                "replaced"
            } else {
                "merged"
            };
            versions.push(Version {
                memory: a.record.clone(),
                status,
            });
        }
        versions.sort_by(|a, b| {
            (b.memory.valid_from, b.memory.id).cmp(&(a.memory.valid_from, a.memory.id))
        });
        Ok(History {
            memory_id: head,
            count: versions.len(),
            versions,
        })
    }
}

/// One version of a fact in `history`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Version {
    /// The record, with its validity.
    #[serde(flatten)]
    pub memory: Memory,
    /// `current` (live), `replaced` (a newer value of its slot closed its validity), or
    /// `merged` (an earlier saying of the same statement, or an edited text).
    pub status: &'static str,
}

/// The result of `history`: a fact's versions, the latest valid first.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct History {
    /// The record holding the fact now (the live end of the lineage).
    pub memory_id: MemoryId,
    /// Every version, by `valid_from`, newest first.
    pub versions: Vec<Version>,
    /// How many.
    pub count: usize,
}

/// `NotFound`, or `Archived` with the successor when `id` is in the archive.
pub(crate) fn missing(state: &crate::kernel::state::State, id: MemoryId) -> EngineError {
    if state.archived(id).is_some() {
        EngineError::Archived {
            id,
            superseded_by: state.successor(id),
        }
    } else {
        EngineError::NotFound { id }
    }
}

impl Store {
    /// Ids of every live memory this handle reaches (every user's, or its scope's), ascending:
    /// what an export walks (with `get`, skipping any deleted meanwhile) without holding the
    /// store's lock while it writes.
    #[must_use]
    pub fn memory_ids(&self) -> Vec<MemoryId> {
        let state = self.read();
        let mine = |m: &&Memory| self.scope().is_none_or(|s| m.user_id == s);
        state.iter().filter(mine).map(|m| m.id).collect()
    }

    /// The memory with `id`. A plain read: it does not count as an access.
    ///
    /// # Errors
    /// `NotFound`; `Archived` (with the successor) for a merged or superseded id.
    pub fn get(&self, id: MemoryId) -> Result<Memory> {
        let state = self.read();
        self.reach(&state, id)?;
        state
            .get(id)
            .cloned()
            .ok_or_else(|| crate::memory::missing(&state, id))
    }

    /// The stored vector of `id`.
    ///
    /// # Errors
    /// `NotFound`.
    pub fn vector(&self, id: MemoryId) -> Result<Vec<f32>> {
        let state = self.read();
        self.reach(&state, id)?;
        state
            .vectors()
            .vector(id.0)
            .map(<[f32]>::to_vec)
            .ok_or(EngineError::NotFound { id })
    }

    /// Tag frequencies of the user's live memories, most frequent first (then alphabetical).
    ///
    /// # Errors
    /// `Invalid` for a bad user id, `OutOfScope` for another user than this handle's.
    pub fn tag_frequencies(&self, user_id: Option<&str>) -> Result<Vec<(String, u64)>> {
        let user = self.user_for(user_id)?;
        let state = self.read();
        let mut v: Vec<(String, u64)> = state
            .tag_frequencies(&user)
            .map(|f| f.iter().map(|(t, n)| (t.clone(), *n)).collect())
            .unwrap_or_default();
        v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        Ok(v)
    }
}
