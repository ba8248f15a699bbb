//! `Store::search`: plan (validate, embed, outside every lock), gather the candidates, fold,
//! rank, page, count accesses (`docs/search.md`).

use super::candidates::*;
use super::page::*;
use super::rank::*;
use super::request::*;
use crate::error::{EngineError, Result};
use crate::hooks::Fold;
use crate::hooks::dedup::{FoldItem, fold_duplicates, fold_slots, newest_of_slot_first};
use crate::hooks::facts::content_words;
use crate::hooks::{Effective, LOAD_DEDUP_OVERFETCH};
use crate::kernel::keyword::tokenize;
use crate::kernel::record::{self, Kind, Memory, MemoryId, Timestamp};
use crate::kernel::state::State;
use crate::kernel::table::UserIndex;
use crate::memory::scope::check_scope;
use crate::memory::{check_vector, in_range};
use crate::store::Store;
use amberdb_index::Probe;
use std::collections::HashMap;

/// How many of the user's replaced statements (archived, validity closed) pass the filters,
/// its validity at the `as_of` moment among them: what an `as_of` search may return beside
/// the live selection.
pub(super) fn replaced_count(state: &State, plan: &Plan) -> usize {
    state
        .archived_of(&plan.user)
        .filter(|a| a.record.valid_to.is_some() && plan.filter.matches(&a.record))
        .count()
}

/// Candidates among the user's replaced statements (archived, validity closed) that were
/// valid at the `as_of` moment and pass the filters, scored as `mode` scores live ones: an
/// exact pass over the user's archive.
pub(super) fn replaced_candidates(
    state: &State,
    u: &UserIndex,
    plan: &Plan,
    mode: Mode,
    query: Option<&[f32]>,
    live: &[Candidate],
) -> Result<Vec<Candidate>> {
    let max_bm25 = live.iter().filter_map(|c| c.bm25).fold(0.0f32, f32::max);
    let mut out = Vec::new();
    for a in state.archived_of(&plan.user) {
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

/// A validated request.
pub(super) struct Plan {
    user: String,
    scan: ScanMode,
    probe: Probe,
    filter: RecordFilter,
    threshold: f32,
    needle: String,
    terms: Vec<String>,
    eff: Effective,
    /// A reranked search's pool: how many candidates the reranker scores (at least the
    /// page's end).
    rerank: Option<usize>,
    /// What the ranking adds to the strategy's score: the query's windows of time and their
    /// boost, and the session lend.
    adjust: Adjust,
}

/// What the ranking adds to the strategy's score (not with `similarity`).
struct Adjust {
    windows: Vec<super::dates::Window>,
    date_boost: f32,
    session_lend: f32,
}

impl Store {
    fn plan_search(&self, req: &SearchRequest) -> Result<Plan> {
        let mut eff = Effective::of(&self.inner.options.hooks, &req.hooks, self.calibration())?;
        // Items are the caller's values under the caller's keys: a search of items returns
        // each one, never folded into another (`docs/semantics.md`, "Items").
        eff.load_dedup &= req.kind != Some(Kind::Item);
        let chars = req.query.chars().count();
        let by_vector = req.vector.is_some() && req.mode == Mode::Vector;
        if let Some(v) = &req.vector {
            check_vector(self.read().vectors().dim(), v)?;
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
        check_probe(req.probe)?;
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
        check_fusion(req.fusion)?;
        check_time_windows(req)?;
        let rerank = self.rerank_pool(req)?;
        let date_boost = req.date_boost.unwrap_or(DEFAULT_DATE_BOOST);
        for (field, v) in [
            ("date_boost", date_boost),
            ("session_lend", req.session_lend),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return Err(EngineError::Invalid {
                    field,
                    reason: format!("{v} is not in [0, 1]"),
                });
            }
        }
        let adjust = Adjust {
            windows: if date_boost > 0.0 && req.strategy != Strategy::Similarity {
                super::dates::windows(&req.query, req.as_of.unwrap_or_else(|| self.now()))
            } else {
                Vec::new()
            },
            date_boost,
            session_lend: if req.strategy == Strategy::Similarity {
                0.0
            } else {
                req.session_lend
            },
        };
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
            rerank,
            adjust,
        })
    }

    /// A reranked search's pool of candidates, checked: 1..=`MAX_RERANK_CANDIDATES`, at
    /// least the page's end, a store with a reranker, a strategy other than `similarity`.
    fn rerank_pool(&self, req: &SearchRequest) -> Result<Option<usize>> {
        let Some(n) = req.rerank else {
            return Ok(None);
        };
        in_range("rerank_candidates", n, 1, MAX_RERANK_CANDIDATES)?;
        let page_end = req.offset + req.limit;
        if page_end > MAX_RERANK_CANDIDATES {
            return Err(EngineError::Invalid {
                field: "rerank",
                reason: format!(
                    "a reranked page ends within the first {MAX_RERANK_CANDIDATES} results (offset + limit is {page_end})"
                ),
            });
        }
        if req.strategy == Strategy::Similarity {
            return Err(EngineError::Invalid {
                field: "rerank",
                reason: "the similarity strategy ranks by exact cosine only; rerank another strategy's candidates".into(),
            });
        }
        self.check_reranker()?;
        Ok(Some(n.max(page_end)))
    }

    /// An error unless the store was opened with a reranker (a reranked search or query).
    pub(crate) fn check_reranker(&self) -> Result<()> {
        if self.inner.options.reranker.is_none() {
            return Err(EngineError::Invalid {
                field: "rerank",
                reason: format!(
                    "this store has no reranker: {}",
                    amberdb_embed::RERANKER_FIX
                ),
            });
        }
        Ok(())
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
            if self.read().model_epoch() == embedding.epoch {
                return hits;
            }
            if req.vector.is_some() {
                return Err(crate::memory::model_switched());
            }
        }
    }

    fn search_embedded(
        &self,
        req: &SearchRequest,
        embedding: &crate::store::Embedding,
    ) -> Result<Hits> {
        let plan = self.plan_search(req)?;
        let (mode, query, mut fallback) = query_of(req, &plan, embedding)?;
        let window = Window::of(req, plan.rerank);
        let page_end = window.offset + window.limit;
        let mut fetch = first_fetch(req.strategy, page_end, &plan);
        if matches!(mode, Mode::Keyword | Mode::Hybrid) {
            // Not under the state lock: the build installs under it (R9).
            self.inner.db.wait_lexical();
        }
        let now = self.now();
        let tokens: Option<(usize, usize)>;
        let (hits, total, folded_total) = {
            let state = self.read();
            check_scope(&state, &plan.user, plan.filter.session.as_deref(), None)?;
            check_scope(&state, &plan.user, None, plan.filter.agent.as_deref())?;
            // A user who has stored nothing yet has nothing to find: an empty page, not an
            // error (a new user's first turn searches before it stores).
            let Some(u) = state.user(&plan.user) else {
                return Ok(empty_hits(req, fallback));
            };
            let sel = select(&state, &plan.user, u, &plan.filter);
            let mut query_tags = plan.filter.tags.clone();
            query_tags.extend(plan.terms.iter().cloned());
            query_tags.push(plan.needle.clone());
            let freq = state.tag_frequencies(&plan.user);
            // A token budget may skip long results: it chooses among three pages' worth.
            let kept_wanted = if window.budget.is_some() {
                page_end + 2 * window.limit
            } else {
                page_end
            };
            loop {
                let (candidates, supplement) =
                    self.candidates(&state, u, &sel, &plan, req, mode, query.as_deref(), fetch)?;
                let exhausted = candidates.len() < fetch || fetch >= sel.len();
                let ranked = ranked(
                    &state,
                    candidates,
                    req.strategy,
                    (&query_tags, freq),
                    (now, &plan.adjust),
                );
                let Folded {
                    kept,
                    folds,
                    carried,
                } = folded(&state, &ranked, &plan, &req.query, kept_wanted);
                // A reranked search groups after the reranker has ordered its pool.
                let group = if plan.rerank.is_some() {
                    Group::Records
                } else {
                    req.group
                };
                let (kept, folds, members) = grouped(&ranked, kept, folds, group);
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
                let folded_total = folds.iter().take(page_end).map(Vec::len).sum();
                let hits;
                (hits, tokens) = page(
                    &state,
                    u,
                    req,
                    window,
                    embedding,
                    (&ranked, &carried),
                    (kept, &folds, &members),
                )?;
                let total = if plan.filter.as_of {
                    sel.len() + replaced_count(&state, &plan)
                } else {
                    sel.len()
                };
                break (hits, total, folded_total);
            }
        };
        let (mut hits, tokens) = match (plan.rerank, &self.inner.options.reranker) {
            (Some(_), Some(reranker)) => reranked_page(reranker.as_ref(), req, hits, embedding)?,
            _ => (hits, tokens),
        };
        if plan.eff.access {
            self.count_accesses(&mut hits, now);
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
            scored_by: if plan.rerank.is_some() {
                ScoredBy::Reranker
            } else {
                ScoredBy::Strategy
            },
            fallback,
        })
    }

    /// Counts an access of each hit, once per `SEARCH_ACCESS_INTERVAL_US` (its first access
    /// always counts), and shows it in the hit.
    fn count_accesses(&self, hits: &mut [SearchedHit], now: Timestamp) {
        let due = |m: &Memory| {
            m.access_count == 0
                || now.0.saturating_sub(m.last_accessed_at.0) >= SEARCH_ACCESS_INTERVAL_US
        };
        let counted: Vec<MemoryId> = hits
            .iter()
            .filter(|h| due(&h.memory))
            .map(|h| h.memory.id)
            .collect();
        if !counted.is_empty()
            && let Some(at) = self.touch(counted)
        {
            for h in hits.iter_mut().filter(|h| due(&h.memory)) {
                h.memory.access_count += 1;
                h.memory.last_accessed_at = h.memory.last_accessed_at.max(at);
            }
        }
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

pub(super) fn empty_hits(req: &SearchRequest, fallback: Option<String>) -> Hits {
    Hits {
        results: Vec::new(),
        count: 0,
        total: 0,
        folded_total: 0,
        tokens: req.max_tokens.map(|_| 0),
        over_budget: req.max_tokens.map(|_| 0),
        strategy: req.strategy,
        mode: req.mode,
        scored_by: if req.rerank.is_some() {
            ScoredBy::Reranker
        } else {
            ScoredBy::Strategy
        },
        fallback,
    }
}

/// The mode a search runs in, its query vector, and the fallback to report: a keyword query
/// without terms searches text; when the embedder fails, a hybrid search falls back to
/// keywords and a vector one to text (a `similarity` search fails instead).
fn query_of(
    req: &SearchRequest,
    plan: &Plan,
    embedding: &crate::store::Embedding,
) -> Result<(Mode, Option<Vec<f32>>, Option<String>)> {
    let mut mode = req.mode;
    if mode == Mode::Keyword && plan.terms.is_empty() {
        return Ok((
            Mode::Text,
            None,
            Some("the query has no keyword terms (only stop words or punctuation); searched text instead".into()),
        ));
    }
    if !matches!(mode, Mode::Vector | Mode::Hybrid) {
        return Ok((mode, None, None));
    }
    if let Some(v) = &req.vector {
        return Ok((mode, Some(v.clone()), None));
    }
    match embedding.embedder.embed_query(&req.query) {
        Ok(q) => Ok((mode, Some(q), None)),
        Err(e) if req.strategy == Strategy::Similarity => Err(e.into()),
        Err(e) => {
            let fallback = format!(
                "embeddings unavailable ({e}); searched {} instead",
                if mode == Mode::Hybrid {
                    "keywords"
                } else {
                    "text"
                }
            );
            mode = if mode == Mode::Hybrid {
                Mode::Keyword
            } else {
                Mode::Text
            };
            Ok((mode, None, Some(fallback)))
        }
    }
}

/// How many candidates a search fetches first. The ranking strategies over-fetch 4× (at
/// least 60, as mem0) because their score reorders candidates; that also covers load-time
/// dedup's 3× over-fetch. When folding leaves the page short, the search fetches 4× more
/// until the page is full or the selection is exhausted.
fn first_fetch(strategy: Strategy, page_end: usize, plan: &Plan) -> usize {
    let dedup_fetch = if plan.eff.load_dedup {
        page_end * LOAD_DEDUP_OVERFETCH
    } else {
        page_end
    };
    match strategy {
        Strategy::Similarity => dedup_fetch,
        _ => (4 * page_end).max(60).max(dedup_fetch),
    }
}

/// The candidates with their records, scored by `strategy` (with the tag boost of the query's
/// tags and terms, `tags`, but for `similarity`), best first, ties by key.
fn ranked<'s>(
    state: &'s State,
    candidates: Vec<Candidate>,
    strategy: Strategy,
    tags: (&[String], Option<&std::collections::BTreeMap<String, u64>>),
    (now, adjust): (Timestamp, &Adjust),
) -> Vec<(Candidate, f32, &'s Memory)> {
    let mut ranked: Vec<(Candidate, f32, &Memory)> = candidates
        .into_iter()
        .filter_map(|c| {
            let m = record_of(state, c.key)?;
            let boost = if strategy == Strategy::Similarity {
                0.0
            } else {
                tag_boost(m, tags.0, tags.1)
            };
            let dated = if adjust.windows.iter().any(|w| w.holds(m.valid_from)) {
                adjust.date_boost
            } else {
                0.0
            };
            Some((
                c,
                strategy_score(strategy, m, c.relevance, boost, now) + dated,
                m,
            ))
        })
        .collect();
    if adjust.session_lend > 0.0 {
        lend_within_sessions(&mut ranked, adjust.session_lend);
    }
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.key.cmp(&b.0.key)));
    ranked
}

/// Each record of a session gains `lend` times the best score of another record of its
/// session among `ranked` (scores read before any is changed).
fn lend_within_sessions(ranked: &mut [(Candidate, f32, &Memory)], lend: f32) {
    let mut best: HashMap<&str, (f32, f32)> = HashMap::new();
    for (_, score, m) in ranked.iter() {
        if let Some(s) = m.session_id.as_deref() {
            let top = best
                .entry(s)
                .or_insert((f32::NEG_INFINITY, f32::NEG_INFINITY));
            if *score > top.0 {
                *top = (*score, top.0);
            } else if *score > top.1 {
                top.1 = *score;
            }
        }
    }
    for (_, score, m) in ranked.iter_mut() {
        let Some(&(first, second)) = m.session_id.as_deref().and_then(|s| best.get(s)) else {
            continue;
        };
        let other = if *score >= first { second } else { first };
        if other.is_finite() {
            *score += lend * other;
        }
    }
}

/// What load-time dedup made of the ranking: the indexes of `ranked` kept, in page order, the
/// indexes each one folded, and the page score of each kept result moved in front of an older
/// value of its slot (`newest_of_slot_first`: it carries that one's score).
struct Folded {
    kept: Vec<usize>,
    folds: Vec<Vec<usize>>,
    carried: HashMap<usize, f32>,
}

/// Load-time dedup (`plan.eff.fold`): every one kept, none folded, without it.
fn folded(
    state: &State,
    ranked: &[(Candidate, f32, &Memory)],
    plan: &Plan,
    query: &str,
    kept_wanted: usize,
) -> Folded {
    if !plan.eff.load_dedup {
        return Folded {
            kept: (0..ranked.len()).collect(),
            folds: vec![Vec::new(); ranked.len()],
            carried: HashMap::new(),
        };
    }
    let items: Vec<FoldItem<'_>> = ranked
        .iter()
        .map(|r| {
            FoldItem::new(
                vector_of(state, r.0.key).unwrap_or(&[]),
                &r.2.content,
                r.2.valid_from,
            )
        })
        .collect();
    let min_sim = 1.0 - plan.eff.cluster_distance();
    let mut carried = HashMap::new();
    let kept = match plan.eff.fold {
        Fold::Duplicates => {
            let mut kept = fold_duplicates(&items, min_sim, kept_wanted);
            // Only a question asks for a current value: a statement searched for its
            // restatements keeps its page in score order (on SICK's paraphrases the move
            // cost 12 points of R@1).
            let moves = if is_question(query) {
                newest_of_slot_first(&items, &mut kept, min_sim, &content_words(query))
            } else {
                Vec::new()
            };
            for (moved, older) in moves {
                let score = carried
                    .get(&older)
                    .copied()
                    .or_else(|| ranked.get(older).map(|r| r.1));
                if let Some(score) = score {
                    carried.insert(moved, score);
                }
            }
            kept
        }
        Fold::Slots => fold_slots(&items, min_sim, kept_wanted),
    };
    let (kept, folds) = kept.into_iter().unzip();
    Folded {
        kept,
        folds,
        carried,
    }
}

/// `nprobe` and `recall` in range.
fn check_probe(probe: Probe) -> Result<()> {
    match probe {
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
    Ok(())
}

/// Fusion weights finite, non-negative and not both zero; an RRF k of at least 1.
fn check_fusion(fusion: Fusion) -> Result<()> {
    match fusion {
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
    Ok(())
}

/// Each time window's end later than its start.
fn check_time_windows(req: &SearchRequest) -> Result<()> {
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
    Ok(())
}
