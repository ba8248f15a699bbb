//! One user's live memories of one kind, as the dedup decisions see them.

use crate::hooks::dedup::Space;
use crate::kernel::record::{Kind, MemoryId};
use crate::kernel::slots::Slots;
use crate::kernel::state::State;
use amberdb_index::{
    Collection, KeyFilter, KeySet, Neighbour, Probe, RangeQuery, Scan, SearchParams,
};

/// Matching keys up to which a filtered vector search scores just those keys instead of
/// scanning (at least this many, or a sixteenth of the store).
pub(crate) const GATHER_KEYS: usize = 4096;

/// Live rows above which dedup's range queries use the compact (i8) scan.
const COMPACT_SCAN_ROWS: usize = 4_096;

/// Lists of each IVF segment a range query reads before it knows whether the segment holds
/// anything in range (`Probe::Range`): on real text at 100k, 16 lists find 99.0 % of the rows
/// at or above the dedup floor (0.65) that the built nprobe finds 99.3 % of, and all of them at
/// 0.8 and 0.9 (`docs/benchmarks.md`, "Store-time dedup at 1M").
const RANGE_PROBE_LISTS: u32 = 16;

pub(crate) struct UserSpace<'a> {
    pub(crate) state: &'a State,
    pub(crate) user: &'a str,
    pub(crate) kind: Kind,
}

/// A dedup range query: the best `limit` that `filter` accepts at or above `min_sim`, its IVF
/// probe stopping early when its first lists hold nothing in range.
fn range_params(filter: KeyFilter<'_>, limit: usize, min_sim: f32, scan: Scan) -> SearchParams<'_> {
    SearchParams {
        k: limit,
        filter: Some(filter),
        scan,
        min_score: min_sim,
        probe: Probe::Range(RANGE_PROBE_LISTS),
    }
}

/// The memory ids of a search's hits, best first.
fn ids(hits: Vec<Neighbour>) -> Vec<MemoryId> {
    hits.into_iter().map(|n| MemoryId(n.key)).collect()
}

/// What a range query over one user's live memories of one kind reads: the vectors, the
/// user's live keys and the records (for their kind). `UserSpace` lends them from the state
/// under its lock; compaction's duplicate search from a copy it takes once and reads with no
/// lock held (`Store::compaction_groups`).
pub(crate) struct RangeView<'a> {
    pub(crate) vectors: &'a Collection,
    /// The user's live keys; `None` when the user has none.
    pub(crate) keys: Option<&'a KeySet>,
    pub(crate) slots: &'a Slots,
    pub(crate) kind: Kind,
}

impl RangeView<'_> {
    /// Whether a range query over a user's `keys_len` memories scores just those keys instead
    /// of scanning: a user with few memories in a store of many users, one dot product each
    /// instead of every user's rows through the filter (the rule search's selections follow,
    /// `search`'s vector scan).
    fn gathers(&self, keys_len: usize) -> bool {
        let total = self.vectors.len();
        keys_len <= GATHER_KEYS.max(total / 16) && keys_len < total
    }

    /// The scan of a range query. Over COMPACT_SCAN_ROWS, the compact scan: i8 codes of the
    /// sealed rows (a quarter of the bytes), then the best 100 re-ranked exactly, so the
    /// threshold is applied to exact scores. Below it the f32 rows fit in cache and
    /// re-ranking only adds work (docs/benchmarks.md, "Hooks": 100k memories 8.8 → 3.1 ms,
    /// 10k 1.14 → 0.55 ms, but 1k 0.12 → 0.21 ms).
    fn scan(&self, limit: usize) -> Scan {
        if self.vectors.len() > COMPACT_SCAN_ROWS {
            Scan::i8_for(limit)
        } else {
            Scan::F32
        }
    }

    /// Whether `key` is one of the user's live memories of this view's kind.
    pub(crate) fn holds(&self, key: u64) -> bool {
        self.keys.is_some_and(|keys| keys.contains(key))
            && self.slots.get(key).is_some_and(|m| m.kind == self.kind)
    }

    /// The best `limit` of the user's memories of this kind at or above `min_sim` to `query`,
    /// best first, `exclude` left out (`Space::within`).
    pub(crate) fn within(
        &self,
        query: &[f32],
        min_sim: f32,
        limit: usize,
        exclude: Option<MemoryId>,
    ) -> Vec<MemoryId> {
        let Some(keys) = self.keys else {
            return Vec::new();
        };
        let accept = |key: u64| exclude != Some(MemoryId(key)) && self.holds(key);
        let params = |scan| range_params(&accept, limit, min_sim, scan);
        if self.gathers(keys.len()) {
            let mine: Vec<u64> = keys.iter().filter(|k| accept(*k)).collect();
            return self
                .vectors
                .search_keys(query, &mine, &params(Scan::F32))
                .map(ids)
                .unwrap_or_default();
        }
        self.vectors
            .search(query, &params(self.scan(limit)))
            .map(ids)
            .unwrap_or_default()
    }

    /// `within` for many stored memories at once, each refusing itself (compaction's
    /// duplicate search): the same answers, in `anchors` order. When the query scans a large
    /// store, the batch reads each list once for all the anchors that probe it
    /// (`Collection::search_range_batch`); otherwise it asks one by one.
    pub(crate) fn within_each(
        &self,
        anchors: &[(MemoryId, &[f32])],
        min_sim: f32,
        limit: usize,
    ) -> Vec<Vec<MemoryId>> {
        let one_by_one = || {
            anchors
                .iter()
                .map(|(id, v)| self.within(v, min_sim, limit, Some(*id)))
                .collect()
        };
        let Some(keys) = self.keys else {
            return vec![Vec::new(); anchors.len()];
        };
        let scan = self.scan(limit);
        if self.gathers(keys.len()) || scan == Scan::F32 {
            return one_by_one();
        }
        let accept = |key: u64| self.holds(key);
        let params = range_params(&accept, limit, min_sim, scan);
        let queries: Vec<RangeQuery<'_>> = anchors
            .iter()
            .map(|(id, v)| RangeQuery {
                vector: v,
                exclude: Some(id.0),
            })
            .collect();
        match self.vectors.search_range_batch(&queries, &params) {
            Ok(found) => found.into_iter().map(ids).collect(),
            // A stored vector the batch refuses (it never should): each asks alone, as
            // `within` would.
            Err(_) => one_by_one(),
        }
    }
}

impl<'a> UserSpace<'a> {
    /// The range-query view of this space, lent from the state.
    pub(crate) fn view(&self) -> RangeView<'a> {
        RangeView {
            vectors: self.state.vectors(),
            keys: self.state.user_keys(self.user),
            slots: self.state.slots(),
            kind: self.kind,
        }
    }
}

impl Space for UserSpace<'_> {
    fn within(
        &self,
        query: &[f32],
        min_sim: f32,
        limit: usize,
        exclude: Option<MemoryId>,
    ) -> Vec<MemoryId> {
        self.view().within(query, min_sim, limit, exclude)
    }

    fn lineage_vectors(&self, id: MemoryId) -> Vec<Vec<f32>> {
        let mut out: Vec<Vec<f32>> = self.vector(id).into_iter().collect();
        out.extend(self.state.lineage(id).into_iter().map(|a| a.vector.clone()));
        out
    }

    fn vector(&self, id: MemoryId) -> Option<Vec<f32>> {
        self.state.vectors().vector(id.0).map(<[f32]>::to_vec)
    }

    fn text(&self, id: MemoryId) -> Option<String> {
        self.state.get(id).map(|m| m.content.clone())
    }
}
