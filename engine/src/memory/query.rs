//! The MemFuse query (`docs/search.md`, "The MemFuse query"): one user's memories, messages
//! and knowledge across all of its sessions, each result tagged with its scope, in MemFuse's
//! response envelope; and `graph` retrieval, one hop from the vector hits along edges amberdb
//! knows (rare shared tags, neighbouring turns of a session, merge lineage).
//!
//! Guarantees: only the named user's records are read (graph edges included); an unknown
//! user, session or agent is `EntityNotFound` naming the field, never a wider search.

use super::in_range;
use super::scope::{check_scope, user_index};
use super::search::{
    Fusion, MAX_PAGE, RecordFilter, ScanMode, Selection, Source, cosine_of, fuse, keyword_top,
    select, vector_top,
};
use crate::error::{EngineError, Result};
use crate::kernel::keyword::tokenize;
use crate::kernel::record::{Kind, Memory, MemoryId, Role, Timestamp};
use crate::kernel::state::State;
use crate::kernel::table::UserIndex;
use crate::store::Store;
use amberdb_index::Probe;
use std::collections::HashMap;

/// Results of a query when the caller gives no `top_k`.
pub const DEFAULT_TOP_K: usize = 5;
/// Tags on more memories than this are not graph edges (they connect too much to mean much).
pub const GRAPH_MAX_TAG_FREQUENCY: u64 = 50;
/// Weight of a session edge: turns this close in a session are neighbours.
pub const GRAPH_SESSION_WEIGHT: f32 = 0.5;
/// How many turns before and after a hit its session edges reach.
pub const GRAPH_SESSION_WINDOW: usize = 2;
/// Weight of a lineage edge (one record's lineage reaches the other).
pub const GRAPH_LINEAGE_WEIGHT: f32 = 0.8;

/// Which retrieval a query uses (MemFuse `store_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StoreType {
    /// Cosine over embeddings, at least 0.3 (the default).
    #[default]
    Vector,
    /// BM25.
    Keyword,
    /// Vector and keyword fused 0.7 / 0.3.
    Hybrid,
    /// The vector hits and their one-hop neighbours.
    Graph,
}

impl StoreType {
    /// Parses the protocol spelling.
    ///
    /// # Errors
    /// `Invalid` naming the allowed values.
    pub fn parse(s: &str) -> Result<StoreType> {
        match s.trim().to_ascii_lowercase().as_str() {
            "vector" => Ok(StoreType::Vector),
            "keyword" => Ok(StoreType::Keyword),
            "hybrid" => Ok(StoreType::Hybrid),
            "graph" => Ok(StoreType::Graph),
            other => Err(EngineError::Invalid {
                field: "store_type",
                reason: format!("{other:?} is not one of vector, keyword, hybrid, graph"),
            }),
        }
    }
}

/// A MemFuse query.
#[derive(Debug, Clone, PartialEq)]
pub struct Query {
    /// The text: 1..=1,000 characters.
    pub query: String,
    /// Tags each result `in_session` or `cross_session`; it does not narrow the search.
    pub session_id: Option<String>,
    /// Only records of this agent (knowledge, which belongs to the user, is kept).
    pub agent_id: Option<String>,
    /// Results, 1..=50 (default 5).
    pub top_k: usize,
    /// Retrieval.
    pub store_type: StoreType,
    /// Whether chat messages are searched (default true).
    pub include_messages: bool,
    /// Whether knowledge items are searched (default true).
    pub include_knowledge: bool,
    /// A prompt's token budget: the best results whose contents fit, in ranking order, at
    /// most `top_k` (`search.md`, "Packed for a prompt").
    pub max_tokens: Option<usize>,
    /// Rescores the first this many results (at least `top_k`) with the store's cross-encoder
    /// and orders them by its score (`search.md`, "Reranking"); `None`: the retrieval's order.
    pub rerank: Option<usize>,
}

impl Query {
    /// Five results for `query` by vector, over memories, messages and knowledge.
    #[must_use]
    pub fn new(query: impl Into<String>) -> Query {
        Query {
            query: query.into(),
            session_id: None,
            agent_id: None,
            top_k: DEFAULT_TOP_K,
            store_type: StoreType::Vector,
            include_messages: true,
            include_knowledge: true,
            max_tokens: None,
            rerank: None,
        }
    }
}

/// How a result was found.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Retrieval {
    /// `vector`, `keyword`, `hybrid` or `graph`.
    pub source: Source,
    /// Cosine to the query, when the query was embedded.
    pub similarity: Option<f32>,
}

/// Where a result sits.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ResultMetadata {
    /// The owner.
    pub user_id: String,
    /// The agent, if any.
    pub agent_id: Option<String>,
    /// The session, if any.
    pub session_id: Option<String>,
    /// That session's name.
    pub session_name: Option<String>,
    /// `in_session` / `cross_session` when the query named a session and the record has one;
    /// otherwise `None`.
    pub scope: Option<&'static str>,
    /// How it was found.
    pub retrieval: Retrieval,
}

/// One query result.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct QueryResult {
    /// The record id.
    pub id: MemoryId,
    /// Its text.
    pub content: String,
    /// The retrieval's score (cosine, normalized BM25, fused, or edge weight × seed score).
    pub score: f32,
    /// `memory`, `message` or `knowledge`.
    #[serde(rename = "type")]
    pub kind: Kind,
    /// A message's role.
    pub role: Option<Role>,
    /// When stored.
    pub created_at: Timestamp,
    /// When last changed.
    pub updated_at: Timestamp,
    /// Scope and provenance.
    pub metadata: ResultMetadata,
}

/// The `data` of a query reply.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct QueryData {
    /// Best first.
    pub results: Vec<QueryResult>,
    /// How many.
    pub total: usize,
    /// Which score `score` is: the retrieval's, or the reranker's (`rerank`).
    pub scored_by: super::search::ScoredBy,
}

impl Store {
    /// The MemFuse query for `user_id` (`docs/search.md`).
    ///
    /// # Errors
    /// `EntityNotFound` naming `user_id`, `session_id` or `agent_id` (a session of another
    /// user is not found); `Invalid` / `LimitExceeded`; `Embed` for the vector, hybrid and
    /// graph retrievals when the query cannot be embedded. Never for the access count (skipped
    /// and counted when it cannot be recorded).
    pub fn query(&self, user_id: &str, q: &Query) -> Result<QueryData> {
        // A re-embedding that switched the embedder while the query was answered with the
        // old one's vector: answered again (`Store::reembed`), whatever the first try returned
        // (as `Store::search`).
        loop {
            let embedding = self.embedding();
            let data = self.query_embedded(user_id, q, &embedding);
            if self.read().model_epoch() == embedding.epoch {
                return data;
            }
        }
    }

    fn query_embedded(
        &self,
        user_id: &str,
        q: &Query,
        embedding: &crate::store::Embedding,
    ) -> Result<QueryData> {
        self.user_for(Some(user_id))?;
        check_query(q)?;
        // A reranked query retrieves its whole pool, rescores it outside the lock, then
        // takes its best `top_k` within the budget.
        let rerank = self.query_rerank(q)?;
        let asked = q;
        let pooled;
        let q = match rerank {
            Some(pool) => {
                pooled = Query {
                    top_k: pool,
                    max_tokens: None,
                    ..q.clone()
                };
                &pooled
            }
            None => q,
        };
        let mut kinds = vec![Kind::Memory];
        if q.include_messages {
            kinds.push(Kind::Message);
        }
        if q.include_knowledge {
            kinds.push(Kind::Knowledge);
        }
        let filter = RecordFilter {
            kinds: Some(kinds),
            agent: q.agent_id.clone(),
            agent_spares_knowledge: true,
            valid_at: Some(self.now()),
            ..RecordFilter::default()
        };
        let embedded = if q.store_type == StoreType::Keyword {
            None
        } else {
            Some(embedding.embedder.embed_query(&q.query)?)
        };
        if matches!(q.store_type, StoreType::Keyword | StoreType::Hybrid) {
            // Not under the state lock: the build installs under it (R9).
            self.inner.db.wait_lexical();
        }
        let (results, ids) = {
            let state = self.read();
            let u = user_index(&state, user_id)?;
            check_scope(&state, user_id, q.session_id.as_deref(), None)?;
            check_scope(&state, user_id, None, q.agent_id.as_deref())?;
            let Some(u) = u else {
                return Ok(QueryData {
                    results: Vec::new(),
                    total: 0,
                    scored_by: super::search::ScoredBy::Strategy,
                });
            };
            let sel = select(&state, user_id, u, &filter);
            let found = retrieve(
                &state,
                u,
                &sel,
                q,
                (embedded.as_deref(), self.calibration().query_threshold),
            )?;
            let mut room = q.max_tokens;
            let mut results: Vec<QueryResult> = Vec::with_capacity(found.len());
            for (key, score, source) in found {
                if results.len() == q.top_k {
                    break;
                }
                let Some(m) = state.get(MemoryId(key)) else {
                    continue;
                };
                if let Some(left) = &mut room {
                    let t = embedding.embedder.count_tokens(&m.content)?;
                    if t > *left {
                        continue;
                    }
                    *left -= t;
                }
                let similarity = embedded.as_deref().and_then(|e| cosine_of(&state, e, key));
                results.push(result(u, m, q, score, source, similarity));
            }
            let ids = results.iter().map(|r| r.id).collect::<Vec<_>>();
            (results, ids)
        };
        let (results, ids) = match (rerank, &self.inner.options.reranker) {
            (Some(_), Some(reranker)) => {
                let page = reranked_results(reranker.as_ref(), asked, results, embedding)?;
                let ids = page.iter().map(|r| r.id).collect::<Vec<_>>();
                (page, ids)
            }
            _ => (results, ids),
        };
        if !ids.is_empty() {
            self.touch(ids);
        }
        Ok(QueryData {
            total: results.len(),
            results,
            scored_by: if rerank.is_some() {
                super::search::ScoredBy::Reranker
            } else {
                super::search::ScoredBy::Strategy
            },
        })
    }

    /// A reranked query's pool (at least `top_k`), checked as a search's is.
    fn query_rerank(&self, q: &Query) -> Result<Option<usize>> {
        let Some(n) = q.rerank else {
            return Ok(None);
        };
        in_range(
            "rerank_candidates",
            n,
            1,
            super::search::MAX_RERANK_CANDIDATES,
        )?;
        self.check_reranker()?;
        Ok(Some(n.max(q.top_k)))
    }
}

/// `(key, score, source)`, best first, at most `top_k`. `query_threshold`: the least cosine
/// of the query's vector candidates and graph seeds (`Calibration::query_threshold`, MemFuse's
/// 0.3 with MiniLM): the query returns what is related, and graph retrieval needs seeds that
/// are (`search.md`, "The MemFuse query"). `search_memories` has no default threshold.
fn retrieve(
    state: &State,
    u: &UserIndex,
    sel: &Selection<'_>,
    q: &Query,
    (embedded, query_threshold): (Option<&[f32]>, f32),
) -> Result<Vec<(u64, f32, Source)>> {
    // A token budget may skip long results: it chooses among three times as many.
    let k = if q.max_tokens.is_some() {
        3 * q.top_k
    } else {
        q.top_k
    };
    // The query's vector candidates: the store's default scan and probe.
    let nearest = |e: &[f32]| {
        vector_top(
            state,
            sel,
            e,
            k,
            query_threshold,
            ScanMode::Auto,
            Probe::Built,
        )
    };
    let mut out: Vec<(u64, f32, Source)> = match (q.store_type, embedded) {
        (StoreType::Keyword, _) => {
            let top = keyword_top(u, sel, &tokenize(&q.query), k)?;
            let max = top.first().map_or(1.0, |t| t.1);
            top.into_iter()
                .map(|(key, s)| (key, if max > 0.0 { s / max } else { 0.0 }, Source::Keyword))
                .collect()
        }
        (StoreType::Hybrid, Some(e)) => {
            let terms = tokenize(&q.query);
            let vector = nearest(e)?;
            let keyword = keyword_top(u, sel, &terms, k)?;
            fuse(
                state,
                u,
                (e, &q.query),
                &vector,
                &keyword,
                Fusion::default(),
            )?
            .into_iter()
            .map(|c| (c.key, c.relevance, c.source))
            .collect()
        }
        (StoreType::Graph, Some(e)) => {
            let seeds = nearest(e)?;
            graph(state, u, sel, &seeds)
        }
        (_, Some(e)) => nearest(e)?
            .into_iter()
            .map(|(key, s)| (key, s, Source::Vector))
            .collect(),
        (_, None) => Vec::new(),
    };
    out.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    out.truncate(k);
    Ok(out)
}

/// The seeds with their one-hop neighbours (`docs/search.md`, "Graph retrieval"): each
/// neighbour scores its edge weight times its seed's score, keeping its best; a seed keeps its
/// own score when that is higher.
fn graph(
    state: &State,
    u: &UserIndex,
    sel: &Selection<'_>,
    seeds: &[(u64, f32)],
) -> Vec<(u64, f32, Source)> {
    let mut best: HashMap<u64, (f32, Source)> = HashMap::new();
    for &(key, score) in seeds {
        best.insert(key, (score, Source::Vector));
    }
    let mut offer = |key: u64, score: f32| {
        if !sel.contains(key) {
            return;
        }
        let e = best.entry(key).or_insert((score, Source::Graph));
        e.0 = e.0.max(score);
    };
    for &(key, score) in seeds {
        let Some(m) = state.get(MemoryId(key)) else {
            continue;
        };
        for (neighbour, weight) in edges(state, u, m) {
            if neighbour != key {
                offer(neighbour, weight * score);
            }
        }
    }
    best.into_iter().map(|(k, (s, src))| (k, s, src)).collect()
}

/// The edges of `m`, with weights in (0, 1].
fn edges(state: &State, u: &UserIndex, m: &Memory) -> Vec<(u64, f32)> {
    let mut out: HashMap<u64, f32> = HashMap::new();
    let freq = state.tag_frequencies(&m.user_id);
    for t in &m.tags {
        let Some(&f) = freq.and_then(|f| f.get(t)) else {
            continue;
        };
        if f > GRAPH_MAX_TAG_FREQUENCY {
            continue;
        }
        #[expect(clippy::cast_precision_loss, reason = "a count")]
        #[expect(clippy::cast_possible_truncation, reason = "weights are f32")]
        let w = (1.0 / (1.0 + f as f64).ln()) as f32;
        for other in u.tag_members.get(t).into_iter().flatten() {
            let e = out.entry(other.0).or_insert(0.0);
            *e = (*e + w).min(1.0);
        }
    }
    if let Some(s) = &m.session_id
        && let Some(members) = u.session_members.get(s)
    {
        let before = members.range(..m.id).rev().take(GRAPH_SESSION_WINDOW);
        let after = members
            .range(MemoryId(m.id.0 + 1)..)
            .take(GRAPH_SESSION_WINDOW);
        for other in before.chain(after) {
            let e = out.entry(other.0).or_insert(0.0);
            *e = e.max(GRAPH_SESSION_WEIGHT);
        }
    }
    for a in state.lineage(m.id) {
        if let Some(live) = state.successor(a.record.id)
            && state.get(live).is_some_and(|l| l.user_id == m.user_id)
        {
            let e = out.entry(live.0).or_insert(0.0);
            *e = e.max(GRAPH_LINEAGE_WEIGHT);
        }
    }
    out.into_iter().collect()
}

fn result(
    u: &UserIndex,
    m: &Memory,
    q: &Query,
    score: f32,
    source: Source,
    similarity: Option<f32>,
) -> QueryResult {
    let scope = match (&q.session_id, &m.session_id) {
        (Some(asked), Some(own)) if m.kind != Kind::Knowledge => Some(if asked == own {
            "in_session"
        } else {
            "cross_session"
        }),
        _ => None,
    };
    QueryResult {
        id: m.id,
        content: m.content.clone(),
        score,
        kind: m.kind,
        role: m.role,
        created_at: m.created_at,
        updated_at: m.updated_at,
        metadata: ResultMetadata {
            user_id: m.user_id.clone(),
            agent_id: m.agent_id.clone(),
            session_id: m.session_id.clone(),
            session_name: m
                .session_id
                .as_ref()
                .and_then(|s| u.sessions.get(s))
                .map(|s| s.name.clone()),
            scope,
            retrieval: Retrieval { source, similarity },
        },
    }
}

/// The query's text, `top_k` and `max_tokens` in range.
fn check_query(q: &Query) -> Result<()> {
    if q.query.trim().is_empty() {
        return Err(EngineError::Invalid {
            field: "query",
            reason: "must not be empty".into(),
        });
    }
    in_range(
        "query length (characters)",
        q.query.chars().count(),
        1,
        super::search::MAX_QUERY_CHARS,
    )?;
    in_range("top_k", q.top_k, 1, MAX_PAGE)?;
    if let Some(n) = q.max_tokens {
        in_range("max_tokens", n, 1, super::search::MAX_TOKEN_BUDGET)?;
    }
    Ok(())
}

/// A reranked pool's page: `results` rescored by `reranker` against the question `asked`,
/// best first, the first `top_k` that fit its token budget, each with the reranker's score.
/// Runs outside every lock.
fn reranked_results(
    reranker: &dyn amberdb_embed::Reranker,
    asked: &Query,
    results: Vec<QueryResult>,
    embedding: &crate::store::Embedding,
) -> Result<Vec<QueryResult>> {
    let passages: Vec<&str> = results.iter().map(|r| r.content.as_str()).collect();
    let scores = reranker.score(&asked.query, &passages)?;
    let mut scored: Vec<(f32, QueryResult)> = scores.into_iter().zip(results).collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0));
    let mut room = asked.max_tokens;
    let mut page = Vec::with_capacity(asked.top_k);
    for (score, mut r) in scored {
        if page.len() == asked.top_k {
            break;
        }
        if let Some(left) = &mut room {
            let t = embedding.embedder.count_tokens(&r.content)?;
            if t > *left {
                continue;
            }
            *left -= t;
        }
        r.score = score;
        page.push(r);
    }
    Ok(page)
}
