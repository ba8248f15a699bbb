//! `search_memories`: strategies, modes, fusion, filters, pagination and the read hooks
//! (`docs/search.md`).
//!
//! Guarantees: every filter is applied while candidates are gathered (never to a finished
//! top-k), so a selective filter still fills its page; `similarity` ranks by exact cosine and
//! never falls back to anything else; a fallback of any other strategy or mode is reported in
//! `Hits::fallback`; nothing outside the user is ever read.

use super::scope::check_scope;
use super::{check_vector, in_range};
use crate::hooks::Fold;
use crate::hooks::dedup::{FoldItem, fold_duplicates, fold_slots};
use crate::hooks::{Effective, HookOverrides, LOAD_DEDUP_OVERFETCH};
use crate::kernel::error::{EngineError, Result};
use crate::kernel::keyword::tokenize;
use crate::kernel::record::{self, Category, Kind, Memory, MemoryId, Timestamp};
use crate::kernel::state::State;
use crate::kernel::table::UserIndex;
use crate::store::Store;
use amberdb_index::{KeySet, Probe, Scan, SearchParams};
use std::collections::HashMap;

/// Longest search query, in characters.
pub const MAX_QUERY_CHARS: usize = 1000;
/// Most results one page may hold.
pub const MAX_PAGE: usize = 50;
/// Largest offset.
pub const MAX_OFFSET: usize = 10_000;
/// Largest token budget of one search.
pub const MAX_TOKEN_BUDGET: usize = 1_000_000;
/// The minimum score when none is asked for: every candidate (`docs/search.md`,
/// "Calibration": MiniLM's scores of relevant memories start well below any fixed cut; a
/// caller's own vectors need not be normalized).
pub(crate) const NO_THRESHOLD: f32 = f32::NEG_INFINITY;
/// A search counts a memory it returns as accessed at most once in this many microseconds
/// (15 minutes, as agent-memory-server): a memory that every search returns must not climb
/// the `frequency` ranking by being returned (`docs/search.md`, "Access counting").
pub const SEARCH_ACCESS_INTERVAL_US: i64 = 15 * 60 * 1_000_000;
/// Default fusion weights of the `hybrid` mode.
pub const HYBRID_WEIGHTS: (f32, f32) = (0.7, 0.3);
/// The k of reciprocal-rank fusion (as MemFuse and the RRF paper).
pub const RRF_K: u32 = 60;
/// Half-life of `freshness` (days since last access) and `novelty` (days since created).
pub const RECENCY_HALF_LIVES_DAYS: (f64, f64) = (7.0, 30.0);
/// Accesses at which `frequency` reaches one half.
pub const FREQUENCY_HALF: f64 = 5.0;
/// Largest boost a matching rare tag adds to a ranking score.
pub const TAG_BOOST: f32 = 0.1;
/// Rows above which the vector scan reads i8 codes and re-ranks exactly.
const COMPACT_SCAN_ROWS: usize = 4096;

macro_rules! named_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
        #[serde(rename_all = "lowercase")]
        pub enum $name { $($(#[$vm])* $variant),+ }

        impl $name {
            /// Parses the protocol spelling.
            ///
            /// # Errors
            /// `Invalid` naming the allowed values.
            pub fn parse(s: &str) -> Result<$name> {
                match s.trim().to_ascii_lowercase().as_str() {
                    $($text => Ok($name::$variant),)+
                    other => Err(EngineError::Invalid {
                        field: stringify!($name),
                        reason: format!("{other:?} is not one of {:?}", [$($text),+]),
                    }),
                }
            }

            /// The protocol spelling.
            #[must_use]
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }
    };
}

named_enum!(
    /// How results are ranked (`docs/search.md`, "Strategies").
    Strategy {
        /// Exact cosine only; no fallback.
        Similarity = "similarity",
        /// Relevance with recency, importance and frequency (the default).
        #[default]
        Composite = "composite",
        /// Mostly how recently it was used and created.
        Recency = "recency",
        /// Mostly how often it was accessed.
        Frequency = "frequency",
        /// Mostly confidence and feedback.
        Importance = "importance",
    }
);

named_enum!(
    /// Where candidates come from (`docs/search.md`, "Modes").
    Mode {
        /// Cosine over the embeddings.
        Vector = "vector",
        /// BM25 over the content.
        Keyword = "keyword",
        /// Both, fused (the default: on long chats it finds what neither finds alone,
        /// `docs/search.md`, "Judged on public data").
        #[default]
        Hybrid = "hybrid",
        /// Case-insensitive substring.
        Text = "text",
    }
);

/// How `hybrid` combines its two lists.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fusion {
    /// `vector·cos⁺ + keyword·bm25/max(bm25)` (each score normalized to 0..1).
    Weighted {
        /// Weight of the vector score.
        vector: f32,
        /// Weight of the keyword score.
        keyword: f32,
    },
    /// Reciprocal rank: `Σ 1/(k + rank)` over the lists a result is in.
    Rrf {
        /// The rank offset (60 by default).
        k: u32,
    },
}

impl Fusion {
    /// Reciprocal-rank fusion with k = 60.
    #[must_use]
    pub fn rrf() -> Fusion {
        Fusion::Rrf { k: RRF_K }
    }
}

impl Default for Fusion {
    fn default() -> Fusion {
        Fusion::Weighted {
            vector: HYBRID_WEIGHTS.0,
            keyword: HYBRID_WEIGHTS.1,
        }
    }
}

/// A `search_memories` request.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchRequest {
    /// The text: 1..=1,000 characters. May be empty with a `vector` in the vector mode.
    pub query: String,
    /// A query vector of the store's dimension, used instead of embedding `query` (vector
    /// and hybrid modes).
    pub vector: Option<Vec<f32>>,
    /// The user; `"default"` when `None`.
    pub user_id: Option<String>,
    /// Results per page, 1..=50 (default 10).
    pub limit: usize,
    /// Results to skip, 0..=10,000.
    pub offset: usize,
    /// Ranking.
    pub strategy: Strategy,
    /// Candidate source. `similarity` allows only `vector`.
    pub mode: Mode,
    /// Minimum cosine of a vector candidate, in [-1, 1]; none by default, so a search returns
    /// `limit` results whenever the selection holds that many (`docs/search.md`,
    /// "Calibration").
    pub threshold: Option<f32>,
    /// Fusion of the `hybrid` mode.
    pub fusion: Fusion,
    /// Only this category.
    pub category: Option<Category>,
    /// Only memories with at least one of these tags.
    pub tags: Vec<String>,
    /// Only this kind.
    pub kind: Option<Kind>,
    /// Only this session (of this user).
    pub session_id: Option<String>,
    /// Only this agent (of this user).
    pub agent_id: Option<String>,
    /// Only created at or after.
    pub created_after: Option<Timestamp>,
    /// Only created before.
    pub created_before: Option<Timestamp>,
    /// Only about a moment at or after: a record's `valid_from` (a chat turn's own time, a
    /// fact's start), not when it was stored.
    pub valid_after: Option<Timestamp>,
    /// Only about a moment before (`valid_from`).
    pub valid_before: Option<Timestamp>,
    /// The moment asked about: statements valid then, replaced ones included
    /// (`docs/semantics.md`, "Validity in time"). `None`: what is valid now.
    pub as_of: Option<Timestamp>,
    /// A token budget for a prompt (`docs/search.md`, "Packed for a prompt"): the page holds
    /// the best results whose contents fit in this many tokens of the embedder's tokenizer,
    /// in ranking order (a newer value of a slot before an older one), at most `limit`.
    pub max_tokens: Option<usize>,
    /// Which representation the vector scan reads.
    pub scan: ScanMode,
    /// Per-request hook changes (`deduplicate`, `dedup_threshold`, `count_access`).
    pub hooks: HookOverrides,
    /// How many lists of each IVF segment the compact scan probes (`docs/ivf.md`): the
    /// segment's built nprobe, a number of lists, or a recall target.
    pub probe: Probe,
    /// Each result in a session carries up to this many records before and as many after it
    /// in its session (`SearchedHit::context`), 0..=`MAX_NEIGHBOURS` (default 0): a short
    /// reply ("It's a mix of drama and romance!") is often answered by the turn before it
    /// (`docs/search.md`, "Session neighbours").
    pub neighbours: usize,
}

/// Most session neighbours a search result carries on each side.
pub const MAX_NEIGHBOURS: usize = 5;

/// Which representation a vector scan reads (`docs/search.md`, "The vector scan").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ScanMode {
    /// Exact f32 scores over small selections; over 4,096 rows the compact scan.
    #[default]
    Auto,
    /// Exact f32 scores always.
    Exact,
    /// i8 codes first, exact re-rank of the candidates: a quarter of the bytes, recall@10
    /// >= 0.99 (`docs/benchmarks.md`).
    Compact,
}

impl SearchRequest {
    /// The first 10 results for `query`, composite strategy, hybrid mode.
    #[must_use]
    pub fn new(query: impl Into<String>) -> SearchRequest {
        SearchRequest {
            query: query.into(),
            vector: None,
            user_id: None,
            limit: 10,
            offset: 0,
            strategy: Strategy::default(),
            mode: Mode::default(),
            threshold: None,
            fusion: Fusion::default(),
            category: None,
            tags: Vec::new(),
            kind: None,
            session_id: None,
            agent_id: None,
            created_after: None,
            created_before: None,
            valid_after: None,
            valid_before: None,
            as_of: None,
            max_tokens: None,
            scan: ScanMode::Auto,
            hooks: HookOverrides::default(),
            probe: Probe::Built,
            neighbours: 0,
        }
    }

    /// The first 10 nearest to `vector` by cosine (the `similarity` strategy, vector mode).
    #[must_use]
    pub fn by_vector(vector: Vec<f32>) -> SearchRequest {
        SearchRequest {
            vector: Some(vector),
            strategy: Strategy::Similarity,
            mode: Mode::Vector,
            ..SearchRequest::new("")
        }
    }

    /// Sets the page size (1..=50).
    #[must_use]
    pub fn limit(mut self, limit: usize) -> SearchRequest {
        self.limit = limit;
        self
    }

    /// Sets the scan mode.
    #[must_use]
    pub fn scan(mut self, scan: ScanMode) -> SearchRequest {
        self.scan = scan;
        self
    }

    /// Sets how many lists of each IVF segment the compact scan probes.
    #[must_use]
    pub fn probe(mut self, probe: Probe) -> SearchRequest {
        self.probe = probe;
        self
    }

    /// Only memories with at least one of `tags`.
    #[must_use]
    pub fn tags<I, T>(mut self, tags: I) -> SearchRequest
    where
        I: IntoIterator<Item = T>,
        T: Into<String>,
    {
        self.tags = tags.into_iter().map(Into::into).collect();
        self
    }

    /// The plain engine search: no load-time folding and no access counted.
    #[must_use]
    pub fn without_hooks(mut self) -> SearchRequest {
        self.hooks.deduplicate = Some(false);
        self.hooks.count_access = Some(false);
        self
    }

    /// Sets the strategy.
    #[must_use]
    pub fn strategy(mut self, strategy: Strategy) -> SearchRequest {
        self.strategy = strategy;
        if strategy == Strategy::Similarity {
            // The one mode the pure cosine ranking has.
            self.mode = Mode::Vector;
        }
        self
    }

    /// Sets the mode.
    #[must_use]
    pub fn mode(mut self, mode: Mode) -> SearchRequest {
        self.mode = mode;
        self
    }

    /// Sets the user.
    #[must_use]
    pub fn user(mut self, user: impl Into<String>) -> SearchRequest {
        self.user_id = Some(user.into());
        self
    }
}

/// Where a result came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// The vector search.
    Vector,
    /// The keyword index.
    Keyword,
    /// Both lists of a hybrid search.
    Hybrid,
    /// A substring match.
    Text,
    /// A neighbour of a vector hit (MemFuse `graph` retrieval).
    Graph,
}

/// One search result.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SearchedHit {
    /// The memory (as stored after this search's access was counted).
    #[serde(flatten)]
    pub memory: Memory,
    /// The ranking score (the strategy's formula; exact cosine for `similarity`).
    pub score: f32,
    /// Cosine similarity to the query, when the query was embedded.
    pub similarity: Option<f32>,
    /// `1 - similarity`.
    pub distance: Option<f32>,
    /// Raw BM25 score, when the keyword index scored it.
    pub keyword_score: Option<f32>,
    /// Which search found it.
    pub source: Source,
    /// Results within the cluster distance of this one that load-time dedup folded into it.
    pub folded: usize,
    /// With `neighbours`: the records of its session right before and after it, in session
    /// order, itself left out (whatever the search's filters; live records only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub context: Vec<Neighbour>,
}

/// A record next to a search result in its session.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Neighbour {
    /// Its id.
    pub memory_id: MemoryId,
    /// Where it stands from the result: -1 the record right before, 1 right after.
    pub position: i64,
    /// Its role, for a chat turn.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<crate::kernel::record::Role>,
    /// Its text.
    pub content: String,
    /// When it holds from (a chat turn's own time).
    pub valid_from: Timestamp,
}

/// The live records up to `n` before and after `m` in its session, in session order.
fn neighbours_of(state: &State, u: &UserIndex, m: &Memory, n: usize) -> Vec<Neighbour> {
    let Some(members) = m.session_id.as_ref().and_then(|s| u.session_members.get(s)) else {
        return Vec::new();
    };
    let before: Vec<MemoryId> = members.range(..m.id).rev().take(n).copied().collect();
    let after = members.range(MemoryId(m.id.0 + 1)..).take(n).copied();
    let at = |k: usize| i64::try_from(k).unwrap_or(i64::MAX);
    before
        .iter()
        .enumerate()
        .rev()
        .map(|(k, id)| (-at(k + 1), *id))
        .chain(after.enumerate().map(|(k, id)| (at(k + 1), id)))
        .filter_map(|(position, id)| {
            let r = state.table.get(id)?;
            Some(Neighbour {
                memory_id: id,
                position,
                role: r.role,
                content: r.content.clone(),
                valid_from: r.valid_from,
            })
        })
        .collect()
}

/// The result of `search_memories`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Hits {
    /// The page.
    pub results: Vec<SearchedHit>,
    /// Results on this page.
    pub count: usize,
    /// Memories of the user that match the filters (whatever their score): the set searched.
    pub total: usize,
    /// Results folded by load-time dedup into the results up to the end of this page.
    pub folded_total: usize,
    /// With a token budget: the tokens the page's contents take.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens: Option<usize>,
    /// With a token budget: results that ranked on the page but did not fit in it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub over_budget: Option<usize>,
    /// The strategy used.
    pub strategy: Strategy,
    /// The mode used.
    pub mode: Mode,
    /// Why the search did something other than the mode asked (text supplement, a keyword
    /// query with no terms, embeddings unavailable); `None` when it did not.
    pub fallback: Option<String>,
}

/// A candidate before ranking.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Candidate {
    pub(crate) key: u64,
    pub(crate) cosine: Option<f32>,
    pub(crate) bm25: Option<f32>,
    /// The mode's score in 0..1 (cosine, normalized BM25, fused, or a text match).
    pub(crate) relevance: f32,
    pub(crate) source: Source,
}

/// The record filters of a search, checked against each record while candidates are
/// gathered.
#[derive(Debug, Clone, Default)]
pub(crate) struct RecordFilter {
    pub(crate) category: Option<Category>,
    pub(crate) tags: Vec<String>,
    pub(crate) kinds: Option<Vec<Kind>>,
    pub(crate) session: Option<String>,
    pub(crate) agent: Option<String>,
    /// The agent filter keeps knowledge, which belongs to the user, not to an agent (the
    /// MemFuse query).
    pub(crate) agent_spares_knowledge: bool,
    pub(crate) created_after: Option<Timestamp>,
    pub(crate) created_before: Option<Timestamp>,
    /// `[after, before)` on `valid_from`.
    pub(crate) valid_after: Option<Timestamp>,
    pub(crate) valid_before: Option<Timestamp>,
    /// Only statements valid at this moment (`None`: no validity filter).
    pub(crate) valid_at: Option<Timestamp>,
    /// The caller asked about a moment (`as_of`): every record's validity is checked, and
    /// replaced statements (archived, validity closed) are searched too.
    pub(crate) as_of: bool,
}

impl RecordFilter {
    fn is_empty(&self) -> bool {
        !self.as_of
            && self.category.is_none()
            && self.tags.is_empty()
            && self.kinds.is_none()
            && self.session.is_none()
            && self.agent.is_none()
            && self.created_after.is_none()
            && self.created_before.is_none()
            && self.valid_after.is_none()
            && self.valid_before.is_none()
    }

    pub(crate) fn matches(&self, m: &Memory) -> bool {
        self.category.is_none_or(|c| m.category == c)
            && (self.tags.is_empty() || m.tags.iter().any(|t| self.tags.contains(t)))
            && self.kinds.as_ref().is_none_or(|k| k.contains(&m.kind))
            && self
                .session
                .as_ref()
                .is_none_or(|s| m.session_id.as_ref() == Some(s))
            && self.agent.as_ref().is_none_or(|a| {
                m.agent_id.as_ref() == Some(a)
                    || (self.agent_spares_knowledge && m.kind == Kind::Knowledge)
            })
            && self.created_after.is_none_or(|t| m.created_at >= t)
            && self.created_before.is_none_or(|t| m.created_at < t)
            && self.valid_after.is_none_or(|t| m.valid_from >= t)
            && self.valid_before.is_none_or(|t| m.valid_from < t)
            && self.valid_at.is_none_or(|t| m.valid_at(t))
    }
}

/// The keys a search may return: every live key of the user, or those that pass a filter.
pub(crate) enum Selection<'a> {
    All(&'a KeySet),
    /// Every live key but a few (statements not valid now).
    AllBut {
        all: &'a KeySet,
        except: KeySet,
    },
    Keys {
        list: Vec<u64>,
        set: KeySet,
    },
}

impl Selection<'_> {
    pub(crate) fn len(&self) -> usize {
        match self {
            Selection::All(k) => k.len(),
            Selection::AllBut { all, except } => all.len() - except.len(),
            Selection::Keys { list, .. } => list.len(),
        }
    }

    pub(crate) fn contains(&self, key: u64) -> bool {
        match self {
            Selection::All(k) => k.contains(key),
            Selection::AllBut { all, except } => all.contains(key) && !except.contains(key),
            Selection::Keys { set, .. } => set.contains(key),
        }
    }

    fn keys(&self) -> Box<dyn Iterator<Item = u64> + '_> {
        match self {
            Selection::All(k) => Box::new(k.iter()),
            Selection::AllBut { all, except } => {
                Box::new(all.iter().filter(|k| !except.contains(*k)))
            }
            Selection::Keys { list, .. } => Box::new(list.iter().copied()),
        }
    }
}

/// The user's keys that pass `filter`.
pub(crate) fn select<'a>(
    state: &State,
    user: &str,
    u: &'a UserIndex,
    filter: &RecordFilter,
) -> Selection<'a> {
    if filter.is_empty() {
        // A search of the present checks only the records whose validity is not the default
        // one; usually there are none.
        let except = filter
            .valid_at
            .map_or_else(KeySet::new, |t| state.table.invalid_at(user, t));
        return if except.is_empty() {
            Selection::All(&u.keys)
        } else {
            Selection::AllBut {
                all: &u.keys,
                except,
            }
        };
    }
    let pass = |k: u64| {
        state
            .table
            .get(MemoryId(k))
            .is_some_and(|m| filter.matches(m))
    };
    // Walk the smallest index the filter names (session, category, tags, kinds), checking
    // every filter on each record it holds; the user's whole key set only if none applies.
    let empty = std::collections::BTreeSet::new();
    let mut sources: Vec<Vec<&std::collections::BTreeSet<MemoryId>>> = Vec::new();
    if let Some(s) = &filter.session {
        sources.push(vec![u.session_members.get(s).unwrap_or(&empty)]);
    }
    if let Some(c) = &filter.category {
        sources.push(vec![u.category_members.get(c).unwrap_or(&empty)]);
    }
    if !filter.tags.is_empty() {
        sources.push(
            filter
                .tags
                .iter()
                .map(|t| u.tag_members.get(t).unwrap_or(&empty))
                .collect(),
        );
    }
    if let Some(kinds) = &filter.kinds {
        sources.push(
            kinds
                .iter()
                .map(|k| u.kind_members.get(k).unwrap_or(&empty))
                .collect(),
        );
    }
    let size = |sets: &Vec<&std::collections::BTreeSet<MemoryId>>| -> usize {
        sets.iter().map(|s| s.len()).sum()
    };
    let mut list: Vec<u64> = match sources.iter().min_by_key(|s| size(s)) {
        Some(sets) if size(sets) < u.keys.len() => sets
            .iter()
            .flat_map(|s| s.iter().map(|id| id.0))
            .filter(|k| pass(*k))
            .collect(),
        _ => u.keys.iter().filter(|k| pass(*k)).collect(),
    };
    // Several tag sets may hold one record.
    list.sort_unstable();
    list.dedup();
    let mut set = KeySet::new();
    for k in &list {
        set.insert(*k);
    }
    Selection::Keys { list, set }
}

/// The exact top `k` by cosine among the selection, at least `min_score`: the matching keys
/// one by one when they are few, else a scan (i8 codes re-ranked exactly above 4,096 rows)
/// whose filter is the selection.
pub(crate) fn vector_top(
    state: &State,
    sel: &Selection<'_>,
    query: &[f32],
    k: usize,
    min_score: f32,
    scan: ScanMode,
    probe: Probe,
) -> Result<Vec<(u64, f32)>> {
    let vectors = &state.vectors;
    let accept = |key: u64| sel.contains(key);
    let mut params = SearchParams {
        k,
        filter: Some(&accept),
        min_score,
        probe,
        ..SearchParams::top(k)
    };
    let found = match sel {
        Selection::Keys { list, .. }
            if list.len() <= super::space::GATHER_KEYS.max(vectors.len() / 16) =>
        {
            vectors.search_keys(query, list, &params)
        }
        _ => {
            let compact = match scan {
                ScanMode::Auto => sel.len() > COMPACT_SCAN_ROWS,
                ScanMode::Exact => false,
                ScanMode::Compact => true,
            };
            if compact {
                params.scan = Scan::i8_for(k);
            }
            vectors.search(query, &params)
        }
    }
    .map_err(|e| EngineError::from_index("query", e))?;
    Ok(found.into_iter().map(|n| (n.key, n.score)).collect())
}

/// A live or archived record.
pub(crate) fn record_of(state: &State, key: u64) -> Option<&Memory> {
    state
        .table
        .get(MemoryId(key))
        .or_else(|| state.table.archived(MemoryId(key)).map(|a| &a.record))
}

/// A live or archived record's vector.
fn vector_of(state: &State, key: u64) -> Option<&[f32]> {
    state.vectors.vector(key).or_else(|| {
        state
            .table
            .archived(MemoryId(key))
            .map(|a| a.vector.as_slice())
    })
}

/// How many of the user's replaced statements (archived, validity closed) pass the filters,
/// its validity at the `as_of` moment among them: what an `as_of` search may return beside
/// the live selection.
fn replaced_count(state: &State, plan: &Plan) -> usize {
    state
        .table
        .archived_of(&plan.user)
        .filter(|a| a.record.valid_to.is_some() && plan.filter.matches(&a.record))
        .count()
}

/// Candidates among the user's replaced statements (archived, validity closed) that were
/// valid at the `as_of` moment and pass the filters, scored as `mode` scores live ones: an
/// exact pass over the user's archive.
fn replaced_candidates(
    state: &State,
    u: &UserIndex,
    plan: &Plan,
    mode: Mode,
    query: Option<&[f32]>,
    live: &[Candidate],
) -> Result<Vec<Candidate>> {
    let max_bm25 = live.iter().filter_map(|c| c.bm25).fold(0.0f32, f32::max);
    let mut out = Vec::new();
    for a in state.table.archived_of(&plan.user) {
        let m = &a.record;
        if m.valid_to.is_none() || !plan.filter.matches(m) {
            continue;
        }
        let key = m.id.0;
        let candidate = match (mode, query) {
            (Mode::Vector | Mode::Hybrid, Some(q)) => {
                let Some(cos) = amberdb_index::kernels::dot(q, &a.vector).ok() else {
                    continue;
                };
                if cos < plan.threshold {
                    continue;
                }
                Candidate {
                    key,
                    cosine: Some(cos),
                    bm25: None,
                    relevance: cos,
                    source: Source::Vector,
                }
            }
            (Mode::Keyword, _) => {
                let Some(b) = u.keyword()?.score_of(&plan.terms, &m.content) else {
                    continue;
                };
                Candidate {
                    key,
                    cosine: None,
                    bm25: Some(b),
                    relevance: (b / max_bm25.max(b)).min(1.0),
                    source: Source::Keyword,
                }
            }
            _ => {
                if !contains_folded(&m.content, &plan.needle) {
                    continue;
                }
                Candidate {
                    key,
                    cosine: None,
                    bm25: None,
                    relevance: 1.0,
                    source: Source::Text,
                }
            }
        };
        out.push(candidate);
    }
    Ok(out)
}

/// Whether `haystack` holds `needle` (already lowercase), ignoring case: ASCII case folding
/// without allocating when the needle is ASCII, full Unicode lowercasing otherwise.
fn contains_folded(haystack: &str, needle: &str) -> bool {
    if needle.is_ascii() {
        let (n, h) = (needle.as_bytes(), haystack.as_bytes());
        let Some(&first) = n.first() else {
            return true;
        };
        // Jump between occurrences of the first byte in either case (memchr is SIMD), then
        // compare the rest.
        memchr::memchr2_iter(first, first.to_ascii_uppercase(), h).any(|at| {
            h.get(at..at + n.len())
                .is_some_and(|w| w.eq_ignore_ascii_case(n))
        })
    } else {
        haystack.to_lowercase().contains(needle)
    }
}

/// Selections up to this size are checked record by record; larger ones scan the user's
/// text column.
const TEXT_SCAN_KEYS: usize = 256;

/// Keys of the selection whose content holds `needle` (already lowercase), newest first, at
/// most `k`: one pass over the user's text column (`text_column.rs`) for an ASCII needle and a
/// large selection, else (or while the column is being built after an open) each record's
/// content.
pub(crate) fn text_matches(
    state: &State,
    u: &UserIndex,
    sel: &Selection<'_>,
    needle: &str,
    k: usize,
) -> Vec<u64> {
    let column = u
        .text()
        .filter(|_| needle.is_ascii() && sel.len() > TEXT_SCAN_KEYS);
    let mut keys: Vec<u64> = if let Some(column) = column {
        column.find(needle.as_bytes(), |key| sel.contains(key))
    } else {
        sel.keys()
            .filter(|key| {
                state
                    .table
                    .get(MemoryId(*key))
                    .is_some_and(|m| contains_folded(&m.content, needle))
            })
            .collect()
    };
    keys.sort_unstable_by(|a, b| b.cmp(a));
    keys.truncate(k);
    keys
}

/// BM25 of the selection's documents that hold a query term, best first, at most `k`.
pub(crate) fn keyword_top(
    u: &UserIndex,
    sel: &Selection<'_>,
    terms: &[String],
    k: usize,
) -> Result<Vec<(u64, f32)>> {
    let mut top = u.keyword()?.scores(terms, |key| sel.contains(key));
    let order = |a: &(u64, f32), b: &(u64, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
    if top.len() > k && k > 0 {
        top.select_nth_unstable_by(k - 1, order);
        top.truncate(k);
    }
    top.sort_unstable_by(order);
    top.truncate(k);
    Ok(top)
}

/// Cosine of the query with `key`'s vector.
pub(crate) fn cosine_of(state: &State, query: &[f32], key: u64) -> Option<f32> {
    state
        .vectors
        .vector(key)
        .and_then(|v| amberdb_index::kernels::dot(query, v).ok())
}

/// Fuses a vector list and a keyword list (each best first) into candidates, each with its
/// exact cosine and its exact BM25 (a candidate of one list is scored by the other too; the
/// keyword list's best is the selection's best BM25, which normalizes).
pub(crate) fn fuse(
    state: &State,
    u: &UserIndex,
    query: (&[f32], &str),
    vector: &[(u64, f32)],
    keyword: &[(u64, f32)],
    fusion: Fusion,
) -> Result<Vec<Candidate>> {
    let (query, text) = query;
    let index = u.keyword()?;
    let ranks = |list: &[(u64, f32)]| -> HashMap<u64, usize> {
        list.iter().enumerate().map(|(i, x)| (x.0, i)).collect()
    };
    let (vector_rank, keyword_rank) = (ranks(vector), ranks(keyword));
    let mut order: Vec<u64> = vector.iter().map(|v| v.0).collect();
    order.extend(
        keyword
            .iter()
            .map(|k| k.0)
            .filter(|k| !vector_rank.contains_key(k)),
    );
    // Every candidate's BM25 over all the query's words, stop words included, as a plain
    // BM25 scores it ("a man is in the water" is not "a man is on the water"): the keyword
    // list, whose terms leave stop words out, only finds candidates. Normalized by the best.
    let words = crate::kernel::keyword::query_words(text);
    let raws: HashMap<u64, f32> = order
        .iter()
        .filter_map(|key| {
            let m = state.table.get(MemoryId(*key))?;
            Some((*key, index.score_all_words(&words, &m.content)?))
        })
        .collect();
    let max_bm25 = raws.values().copied().fold(0.0f32, f32::max);
    Ok(order
        .into_iter()
        .map(|key| {
            let cosine = cosine_of(state, query, key);
            let raw = raws.get(&key).copied();
            let relevance = match fusion {
                Fusion::Weighted {
                    vector: wv,
                    keyword: wk,
                } => {
                    let norm = raw.map_or(0.0, |s| if max_bm25 > 0.0 { s / max_bm25 } else { 0.0 });
                    wv * cosine.unwrap_or(0.0).max(0.0) + wk * norm
                }
                Fusion::Rrf { k } => {
                    let rr =
                        |r: Option<usize>| r.map_or(0.0, |r| 1.0 / (f64::from(k) + r as f64 + 1.0));
                    #[expect(clippy::cast_possible_truncation, reason = "scores are f32")]
                    let s = (rr(vector_rank.get(&key).copied())
                        + rr(keyword_rank.get(&key).copied())) as f32;
                    s
                }
            };
            let source = match (
                vector_rank.contains_key(&key),
                keyword_rank.contains_key(&key),
            ) {
                (true, true) => Source::Hybrid,
                (true, false) => Source::Vector,
                _ => Source::Keyword,
            };
            Candidate {
                key,
                cosine,
                bm25: raw,
                relevance,
                source,
            }
        })
        .collect())
}

/// `freshness` and `novelty` combined: `0.6·2^(−days since access / 7) + 0.4·2^(−days since
/// created / 30)`.
#[must_use]
pub fn recency(m: &Memory, now: Timestamp) -> f32 {
    let days = |t: Timestamp| {
        #[expect(clippy::cast_precision_loss, reason = "days, approximately")]
        let d = (now.0 - t.0).max(0) as f64 / 86_400_000_000.0;
        d
    };
    let (h_access, h_created) = RECENCY_HALF_LIVES_DAYS;
    let fresh = (-days(m.last_accessed_at) / h_access).exp2();
    let novel = (-days(m.created_at) / h_created).exp2();
    #[expect(clippy::cast_possible_truncation, reason = "scores are f32")]
    let r = (0.6 * fresh + 0.4 * novel) as f32;
    r
}

/// `a / (a + 5)` for `a` accesses: 0 for none, one half at five, towards 1.
#[must_use]
pub fn frequency(m: &Memory) -> f32 {
    #[expect(clippy::cast_precision_loss, reason = "a count")]
    let a = m.access_count as f64;
    #[expect(clippy::cast_possible_truncation, reason = "scores are f32")]
    let f = (a / (a + FREQUENCY_HALF)) as f32;
    f
}

/// `0.5·confidence + 0.3·(helpful+1)/(helpful+harmful+2) + 0.2·frequency`.
#[must_use]
pub fn importance(m: &Memory) -> f32 {
    let h = f64::from(m.helpful_count);
    let x = f64::from(m.harmful_count);
    #[expect(clippy::cast_possible_truncation, reason = "scores are f32")]
    let feedback = ((h + 1.0) / (h + x + 2.0)) as f32;
    0.5 * m.confidence + 0.3 * feedback + 0.2 * frequency(m)
}

/// `0.1 · min(1, max weight)` over the memory's tags that the query names, a tag's weight
/// being `1/ln(1 + frequency)`: a tag on one memory boosts by the full 0.1, one on 100 by 0.02.
fn tag_boost(
    m: &Memory,
    query_tags: &[String],
    freq: Option<&std::collections::BTreeMap<String, u64>>,
) -> f32 {
    let Some(freq) = freq else { return 0.0 };
    let best = m
        .tags
        .iter()
        .filter(|t| query_tags.contains(t))
        .filter_map(|t| freq.get(t))
        .map(|f| {
            #[expect(clippy::cast_precision_loss, reason = "a count")]
            let w = 1.0 / (1.0 + *f as f64).ln();
            w
        })
        .fold(0.0f64, f64::max);
    #[expect(clippy::cast_possible_truncation, reason = "scores are f32")]
    let b = TAG_BOOST * best.min(1.0) as f32;
    b
}

/// The score `strategy` gives a memory of relevance `r`.
#[must_use]
pub fn strategy_score(strategy: Strategy, m: &Memory, r: f32, boost: f32, now: Timestamp) -> f32 {
    match strategy {
        Strategy::Similarity => r,
        Strategy::Composite => {
            0.6 * r + 0.2 * recency(m, now) + 0.1 * importance(m) + 0.1 * frequency(m) + boost
        }
        Strategy::Recency => 0.4 * r + 0.6 * recency(m, now) + boost,
        Strategy::Frequency => 0.4 * r + 0.6 * frequency(m) + boost,
        Strategy::Importance => 0.4 * r + 0.6 * importance(m) + boost,
    }
}

/// A validated request.
struct Plan {
    user: String,
    scan: ScanMode,
    probe: Probe,
    filter: RecordFilter,
    threshold: f32,
    needle: String,
    terms: Vec<String>,
    eff: Effective,
}

impl Store {
    fn plan_search(&self, req: &SearchRequest) -> Result<Plan> {
        let mut eff = Effective::of(&self.inner.options.hooks, &req.hooks)?;
        // Items are the caller's values under the caller's keys: a search of items returns
        // each one, never folded into another (`docs/semantics.md`, "Items").
        eff.load_dedup &= req.kind != Some(Kind::Item);
        let chars = req.query.chars().count();
        let by_vector = req.vector.is_some() && req.mode == Mode::Vector;
        if let Some(v) = &req.vector {
            check_vector(self.read().vectors.dim(), v)?;
        }
        if req.query.trim().is_empty() && !by_vector {
            return Err(EngineError::Invalid {
                field: "query",
                reason: "Search query cannot be empty".into(),
            });
        }
        in_range(
            "query length (characters)",
            chars,
            usize::from(!by_vector),
            MAX_QUERY_CHARS,
        )?;
        in_range("limit", req.limit, 1, MAX_PAGE)?;
        match req.probe {
            Probe::Lists(0) | Probe::Range(0) => {
                return Err(EngineError::Invalid {
                    field: "nprobe",
                    reason: "must be at least 1".into(),
                });
            }
            Probe::Recall(r) if !(r > 0.0 && r <= 1.0) => {
                return Err(EngineError::Invalid {
                    field: "recall",
                    reason: format!("{r} is not in (0, 1]"),
                });
            }
            _ => {}
        }
        in_range("offset", req.offset, 0, MAX_OFFSET)?;
        in_range("neighbours", req.neighbours, 0, MAX_NEIGHBOURS)?;
        if let Some(n) = req.max_tokens {
            in_range("max_tokens", n, 1, MAX_TOKEN_BUDGET)?;
        }
        if req.strategy == Strategy::Similarity && req.mode != Mode::Vector {
            return Err(EngineError::Invalid {
                field: "mode",
                reason: format!(
                    "the similarity strategy is vector only; {:?} needs another strategy",
                    req.mode.as_str()
                ),
            });
        }
        let threshold = req.threshold.unwrap_or(NO_THRESHOLD);
        if req.threshold.is_some() && !(-1.0..=1.0).contains(&threshold) {
            return Err(EngineError::Invalid {
                field: "threshold",
                reason: format!("{threshold} is not a cosine in [-1, 1]"),
            });
        }
        match req.fusion {
            Fusion::Weighted { vector, keyword }
                if !(vector.is_finite() && keyword.is_finite())
                    || vector < 0.0
                    || keyword < 0.0
                    || vector + keyword <= 0.0 =>
            {
                return Err(EngineError::Invalid {
                    field: "fusion",
                    reason: "weights must be finite, non-negative, and not both zero".into(),
                });
            }
            Fusion::Rrf { k: 0 } => {
                return Err(EngineError::Invalid {
                    field: "fusion",
                    reason: "the RRF k must be at least 1".into(),
                });
            }
            _ => {}
        }
        if let (Some(a), Some(b)) = (req.created_after, req.created_before)
            && a >= b
        {
            return Err(EngineError::Invalid {
                field: "created_before",
                reason: "must be later than created_after".into(),
            });
        }
        if let (Some(a), Some(b)) = (req.valid_after, req.valid_before)
            && a >= b
        {
            return Err(EngineError::Invalid {
                field: "valid_before",
                reason: "must be later than valid_after".into(),
            });
        }
        let user = self.user_for(req.user_id.as_deref())?;
        let category = req.category;
        Ok(Plan {
            scan: req.scan,
            probe: req.probe,
            filter: RecordFilter {
                category,
                tags: req.tags.iter().map(|t| record::canonical_tag(t)).collect(),
                kinds: req.kind.map(|k| vec![k]),
                session: req.session_id.clone(),
                agent: req.agent_id.clone(),
                agent_spares_knowledge: false,
                created_after: req.created_after,
                created_before: req.created_before,
                valid_after: req.valid_after,
                valid_before: req.valid_before,
                valid_at: Some(req.as_of.unwrap_or_else(|| self.now())),
                as_of: req.as_of.is_some(),
            },
            user,
            threshold,
            needle: req.query.trim().to_lowercase(),
            terms: tokenize(&req.query),
            eff,
        })
    }

    /// Searches the user's memories (`docs/search.md`): candidates from the mode, filtered
    /// inside the search, ranked by the strategy, folded by load-time dedup, paginated, and
    /// counted as accessed.
    ///
    /// # Errors
    /// `Invalid` / `LimitExceeded` naming the parameter; `EntityNotFound` for an unknown
    /// session or agent (a user with nothing stored gets an empty page); `Embed` when the `similarity` strategy cannot embed the query.
    /// Never for the access count: one that cannot be recorded is skipped and counted
    /// (`Stats::accesses_not_recorded`).
    pub fn search(&self, req: &SearchRequest) -> Result<Hits> {
        // A re-embedding that switched the embedder while the search ran with the old one's
        // query vector: searched again (`Store::reembed`), whatever the first try returned (a
        // query vector of the old dimension against the new vectors is a dimension mismatch).
        // A caller's own vector is refused.
        loop {
            let embedding = self.embedding();
            let hits = self.search_embedded(req, &embedding);
            if self.read().model_epoch == embedding.epoch {
                return hits;
            }
            if req.vector.is_some() {
                return Err(super::model_switched());
            }
        }
    }

    fn search_embedded(
        &self,
        req: &SearchRequest,
        embedding: &crate::store::Embedding,
    ) -> Result<Hits> {
        let plan = self.plan_search(req)?;
        let mut fallback: Option<String> = None;
        let mut mode = req.mode;
        if mode == Mode::Keyword && plan.terms.is_empty() {
            mode = Mode::Text;
            fallback = Some("the query has no keyword terms (only stop words or punctuation); searched text instead".into());
        }
        let query = if let (Some(v), Mode::Vector | Mode::Hybrid) = (&req.vector, mode) {
            Some(v.clone())
        } else if matches!(mode, Mode::Vector | Mode::Hybrid) {
            match embedding.embedder.embed_query(&req.query) {
                Ok(q) => Some(q),
                Err(e) if req.strategy == Strategy::Similarity => return Err(e.into()),
                Err(e) => {
                    fallback = Some(format!(
                        "embeddings unavailable ({e}); searched {} instead",
                        if mode == Mode::Hybrid {
                            "keywords"
                        } else {
                            "text"
                        }
                    ));
                    mode = if mode == Mode::Hybrid {
                        Mode::Keyword
                    } else {
                        Mode::Text
                    };
                    None
                }
            }
        } else {
            None
        };
        let page_end = req.offset + req.limit;
        // The ranking strategies over-fetch 4× (at least 60, as mem0) because their score
        // reorders candidates; that also covers load-time dedup's 3× over-fetch. When folding
        // leaves the page short, the search fetches 4× more until the page is full or the
        // selection is exhausted.
        let dedup_fetch = if plan.eff.load_dedup {
            page_end * LOAD_DEDUP_OVERFETCH
        } else {
            page_end
        };
        let mut fetch = match req.strategy {
            Strategy::Similarity => dedup_fetch,
            _ => (4 * page_end).max(60).max(dedup_fetch),
        };
        if matches!(mode, Mode::Keyword | Mode::Hybrid) {
            // Not under the state lock: the build installs under it (R9).
            self.inner.db.wait_lexical();
        }
        let now = self.now();
        let tokens: Option<(usize, usize)>;
        let (mut hits, total, folded_total) = {
            let state = self.read();
            check_scope(&state, &plan.user, plan.filter.session.as_deref(), None)?;
            check_scope(&state, &plan.user, None, plan.filter.agent.as_deref())?;
            // A user who has stored nothing yet has nothing to find: an empty page, not an
            // error (a new user's first turn searches before it stores).
            let Some(u) = state.table.user(&plan.user) else {
                return Ok(empty_hits(req, fallback));
            };
            let sel = select(&state, &plan.user, u, &plan.filter);
            let mut query_tags = plan.filter.tags.clone();
            query_tags.extend(plan.terms.iter().cloned());
            query_tags.push(plan.needle.clone());
            let freq = state.table.tag_frequencies(&plan.user);
            // A token budget may skip long results: it chooses among three pages' worth.
            let kept_wanted = if req.max_tokens.is_some() {
                page_end + 2 * req.limit
            } else {
                page_end
            };
            loop {
                let (candidates, supplement) =
                    self.candidates(&state, u, &sel, &plan, req, mode, query.as_deref(), fetch)?;
                let exhausted = candidates.len() < fetch || fetch >= sel.len();
                let mut ranked: Vec<(Candidate, f32, &Memory)> = candidates
                    .into_iter()
                    .filter_map(|c| {
                        let m = record_of(&state, c.key)?;
                        let boost = if req.strategy == Strategy::Similarity {
                            0.0
                        } else {
                            tag_boost(m, &query_tags, freq)
                        };
                        Some((
                            c,
                            strategy_score(req.strategy, m, c.relevance, boost, now),
                            m,
                        ))
                    })
                    .collect();
                ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.key.cmp(&b.0.key)));
                let (kept, folds): (Vec<usize>, Vec<usize>) = if plan.eff.load_dedup {
                    let items: Vec<FoldItem<'_>> = ranked
                        .iter()
                        .map(|r| {
                            FoldItem::new(
                                vector_of(&state, r.0.key).unwrap_or(&[]),
                                &r.2.content,
                                r.2.valid_from,
                            )
                        })
                        .collect();
                    let min_sim = 1.0 - plan.eff.cluster_distance;
                    match plan.eff.fold {
                        Fold::Duplicates => fold_duplicates(&items, min_sim, kept_wanted),
                        Fold::Slots => fold_slots(&items, min_sim, kept_wanted),
                    }
                    .into_iter()
                    .unzip()
                } else {
                    ((0..ranked.len()).collect(), vec![0; ranked.len()])
                };
                if kept.len() < kept_wanted.min(page_end) && !exhausted {
                    fetch = fetch.saturating_mul(4).min(sel.len());
                    continue;
                }
                if let Some(s) = supplement {
                    fallback = Some(s);
                }
                // What was folded into the results up to the end of this page: the
                // candidates past the last kept result were never compared, so they count
                // as not folded, whatever they are.
                let folded_total = folds.iter().take(page_end).sum();
                let mut budget = req.max_tokens.map(|b| (b, 0usize, 0usize));
                let mut hits: Vec<SearchedHit> = Vec::with_capacity(req.limit);
                for (i, folded) in kept.into_iter().zip(folds.iter().copied()).skip(req.offset) {
                    if hits.len() == req.limit {
                        break;
                    }
                    let Some((c, score, m)) = ranked.get(i) else {
                        continue;
                    };
                    if let Some((limit, used, skipped)) = &mut budget {
                        let t = embedding
                            .embedder
                            .count_tokens(&m.content)
                            .map_err(EngineError::from)?;
                        if *used + t > *limit {
                            *skipped += 1;
                            continue;
                        }
                        *used += t;
                    }
                    hits.push(SearchedHit {
                        memory: (*m).clone(),
                        score: *score,
                        similarity: c.cosine,
                        distance: c.cosine.map(|s| 1.0 - s),
                        keyword_score: c.bm25,
                        source: c.source,
                        folded,
                        context: if req.neighbours > 0 {
                            neighbours_of(&state, u, m, req.neighbours)
                        } else {
                            Vec::new()
                        },
                    });
                }
                tokens = budget.map(|b| (b.1, b.2));
                let total = if plan.filter.as_of {
                    sel.len() + replaced_count(&state, &plan)
                } else {
                    sel.len()
                };
                break (hits, total, folded_total);
            }
        };
        // A hit counts once per SEARCH_ACCESS_INTERVAL_US (its first access always counts).
        let due = |m: &Memory| {
            m.access_count == 0
                || now.0.saturating_sub(m.last_accessed_at.0) >= SEARCH_ACCESS_INTERVAL_US
        };
        let counted: Vec<MemoryId> = hits
            .iter()
            .filter(|h| due(&h.memory))
            .map(|h| h.memory.id)
            .collect();
        if plan.eff.access
            && !counted.is_empty()
            && let Some(at) = self.touch(counted)
        {
            for h in hits.iter_mut().filter(|h| due(&h.memory)) {
                h.memory.access_count += 1;
                h.memory.last_accessed_at = h.memory.last_accessed_at.max(at);
            }
        }
        Ok(Hits {
            count: hits.len(),
            results: hits,
            total,
            folded_total,
            tokens: tokens.map(|t| t.0),
            over_budget: tokens.map(|t| t.1),
            strategy: req.strategy,
            mode,
            fallback,
        })
    }

    /// The candidates of `mode` for one search, at most `fetch` from each list, and the
    /// fallback to report when text matches supplemented a short vector list.
    #[expect(
        clippy::too_many_arguments,
        reason = "the parts of one validated search"
    )]
    fn candidates(
        &self,
        state: &State,
        u: &UserIndex,
        sel: &Selection<'_>,
        plan: &Plan,
        req: &SearchRequest,
        mode: Mode,
        query: Option<&[f32]>,
        fetch: usize,
    ) -> Result<(Vec<Candidate>, Option<String>)> {
        let page_end = req.offset + req.limit;
        let mut fallback = None;
        let mut candidates: Vec<Candidate> = Vec::new();
        match (mode, query) {
            (Mode::Vector, Some(q)) => {
                for (key, cos) in
                    vector_top(state, sel, q, fetch, plan.threshold, plan.scan, plan.probe)?
                {
                    candidates.push(Candidate {
                        key,
                        cosine: Some(cos),
                        bm25: None,
                        relevance: cos,
                        source: Source::Vector,
                    });
                }
                if req.strategy != Strategy::Similarity && candidates.len() < page_end {
                    let before = candidates.len();
                    for key in text_matches(state, u, sel, &plan.needle, fetch) {
                        if candidates.iter().all(|c| c.key != key) {
                            let cos = cosine_of(state, q, key);
                            candidates.push(Candidate {
                                key,
                                cosine: cos,
                                bm25: None,
                                relevance: cos.unwrap_or(0.0).max(plan.threshold),
                                source: Source::Text,
                            });
                        }
                    }
                    if candidates.len() > before {
                        fallback = Some(format!(
                            "{before} vector results were fewer than {page_end}; text matches supplemented them"
                        ));
                    }
                }
            }
            (Mode::Hybrid, Some(q)) => {
                // The scan (parallel inside) and the keyword lookup run side by side.
                let (vector, keyword) = rayon::join(
                    || vector_top(state, sel, q, fetch, plan.threshold, plan.scan, plan.probe),
                    || keyword_top(u, sel, &plan.terms, fetch),
                );
                candidates = fuse(state, u, (q, &req.query), &vector?, &keyword?, req.fusion)?;
            }
            (Mode::Keyword, _) => {
                let keyword = keyword_top(u, sel, &plan.terms, fetch)?;
                let max = keyword.first().map_or(1.0, |k| k.1);
                candidates = keyword
                    .into_iter()
                    .map(|(key, s)| Candidate {
                        key,
                        cosine: None,
                        bm25: Some(s),
                        relevance: if max > 0.0 { s / max } else { 0.0 },
                        source: Source::Keyword,
                    })
                    .collect();
            }
            _ => {
                candidates = text_matches(state, u, sel, &plan.needle, fetch)
                    .into_iter()
                    .map(|key| Candidate {
                        key,
                        cosine: None,
                        bm25: None,
                        relevance: 1.0,
                        source: Source::Text,
                    })
                    .collect();
            }
        }
        if plan.filter.as_of {
            candidates.extend(replaced_candidates(
                state,
                u,
                plan,
                mode,
                query,
                &candidates,
            )?);
        }
        Ok((candidates, fallback))
    }

    /// Counts `ids` as accessed now (`Db::touch`: never waits for a writer). Returns the
    /// time recorded, or `None` when it could not be recorded (a full disk, a poisoned store):
    /// the read is answered all the same, and `Stats::accesses_not_recorded` counts it.
    pub(crate) fn touch(&self, ids: Vec<MemoryId>) -> Option<Timestamp> {
        let at = self.now();
        self.inner.db.touch(at, ids).then_some(at)
    }
}

fn empty_hits(req: &SearchRequest, fallback: Option<String>) -> Hits {
    Hits {
        results: Vec::new(),
        count: 0,
        total: 0,
        folded_total: 0,
        tokens: req.max_tokens.map(|_| 0),
        over_budget: req.max_tokens.map(|_| 0),
        strategy: req.strategy,
        mode: req.mode,
        fallback,
    }
}
