//! A search's page: the kept results regrouped by session, cut to the window and its token
//! budget, with their neighbours; a reranked pool reordered and cut the same way
//! (`docs/search.md`, "Pages without crowding").

use super::candidates::*;
use super::request::*;
use crate::error::{EngineError, Result};
use crate::kernel::record::{Memory, MemoryId};
use crate::kernel::state::State;
use crate::kernel::table::UserIndex;
use std::collections::HashMap;

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
            let r = state.get(id)?;
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

/// `items` grouped by `session_of`, in the order given: each session's first item with the
/// items of its session after it; an item without a session alone.
fn by_session<T>(items: Vec<T>, session_of: impl Fn(&T) -> Option<String>) -> Vec<(T, Vec<T>)> {
    let mut groups: Vec<(T, Vec<T>)> = Vec::new();
    let mut of_session: HashMap<String, usize> = HashMap::new();
    for item in items {
        match session_of(&item) {
            Some(s) => match of_session.get(&s) {
                Some(&g) => groups[g].1.push(item),
                None => {
                    of_session.insert(s, groups.len());
                    groups.push((item, Vec::new()));
                }
            },
            None => groups.push((item, Vec::new())),
        }
    }
    groups
}

/// With `Group::Session`, the kept results regrouped by session (`by_session`): each
/// session's best kept, its other kept results (and what they folded) its members. Returns
/// the kept, their folds and their members (no members without grouping).
pub(super) fn grouped(
    ranked: &[(Candidate, f32, &Memory)],
    kept: Vec<usize>,
    folds: Vec<Vec<usize>>,
    group: Group,
) -> (Vec<usize>, Vec<Vec<usize>>, Vec<Vec<usize>>) {
    if group == Group::Records {
        let members = vec![Vec::new(); kept.len()];
        return (kept, folds, members);
    }
    let items: Vec<(usize, Vec<usize>)> = kept.into_iter().zip(folds).collect();
    let groups = by_session(items, |(i, _)| {
        ranked.get(*i).and_then(|r| r.2.session_id.clone())
    });
    let mut heads = Vec::with_capacity(groups.len());
    let mut head_folds = Vec::with_capacity(groups.len());
    let mut members = Vec::with_capacity(groups.len());
    for ((head, fold), rest) in groups {
        heads.push(head);
        head_folds.push(fold);
        members.push(
            rest.into_iter()
                .flat_map(|(i, f)| std::iter::once(i).chain(f))
                .collect(),
        );
    }
    (heads, head_folds, members)
}

/// A reranked pool grouped by session after the reranker's order (`by_session`): each
/// session's best hit with its others in `session_turns`.
fn grouped_hits(hits: Vec<SearchedHit>) -> Vec<SearchedHit> {
    by_session(hits, |h| h.memory.session_id.clone())
        .into_iter()
        .map(|(mut head, rest)| {
            for h in rest {
                head.session_turns.push(Also {
                    memory_id: h.memory.id,
                    score: h.score,
                });
                head.session_turns.extend(h.also);
            }
            head
        })
        .collect()
}

/// Where a page starts, how many results it holds, and the token budget it fits in.
#[derive(Debug, Clone, Copy)]
pub(super) struct Window {
    pub(super) offset: usize,
    pub(super) limit: usize,
    pub(super) budget: Option<usize>,
}

impl Window {
    /// The window `req` asks for; with a reranker's pool of `rerank`, the whole pool, which
    /// `reranked_page` reorders and cuts to the page asked for.
    pub(super) fn of(req: &SearchRequest, rerank: Option<usize>) -> Window {
        match rerank {
            Some(pool) => Window {
                offset: 0,
                limit: pool,
                budget: None,
            },
            None => Window {
                offset: req.offset,
                limit: req.limit,
                budget: req.max_tokens,
            },
        }
    }
}

/// Whether `content` fits in what is left of `budget` (`(limit, used, skipped)`), counting it
/// in when it does and as skipped when it does not; always true without a budget.
fn fits(
    budget: &mut Option<(usize, usize, usize)>,
    content: &str,
    embedding: &crate::store::Embedding,
) -> Result<bool> {
    let Some((limit, used, skipped)) = budget else {
        return Ok(true);
    };
    let t = embedding
        .embedder
        .count_tokens(content)
        .map_err(EngineError::from)?;
    if *used + t > *limit {
        *skipped += 1;
        return Ok(false);
    }
    *used += t;
    Ok(true)
}

/// The page: the kept results of `window`, within its token budget if it has one (a result
/// that does not fit is skipped). Returns the hits and, with a budget, the tokens used and the
/// results skipped.
#[expect(
    clippy::type_complexity,
    reason = "the page and its budget, as SEARCH reports them"
)]
pub(super) fn page(
    state: &State,
    u: &UserIndex,
    req: &SearchRequest,
    window: Window,
    embedding: &crate::store::Embedding,
    (ranked, carried): (&[(Candidate, f32, &Memory)], &HashMap<usize, f32>),
    (kept, folds, members): (Vec<usize>, &[Vec<usize>], &[Vec<usize>]),
) -> Result<(Vec<SearchedHit>, Option<(usize, usize)>)> {
    let mut budget = window.budget.map(|b| (b, 0usize, 0usize));
    let mut hits: Vec<SearchedHit> = Vec::with_capacity(window.limit);
    let listed = |indexes: &[usize]| -> Vec<Also> {
        indexes
            .iter()
            .filter_map(|&j| ranked.get(j))
            .map(|(_, score, m)| Also {
                memory_id: m.id,
                score: *score,
            })
            .collect()
    };
    let none: &[usize] = &[];
    for (n, (i, folded)) in kept.into_iter().zip(folds).enumerate().skip(window.offset) {
        if hits.len() == window.limit {
            break;
        }
        let Some((c, score, m)) = ranked.get(i) else {
            continue;
        };
        if !fits(&mut budget, &m.content, embedding)? {
            continue;
        }
        let carries = carried.get(&i).copied();
        hits.push(SearchedHit {
            memory: (*m).clone(),
            score: carries.unwrap_or(*score),
            similarity: c.cosine,
            distance: c.cosine.map(|s| 1.0 - s),
            keyword_score: c.bm25,
            source: c.source,
            folded: folded.len(),
            also: listed(folded),
            session_turns: listed(members.get(n).map_or(none, Vec::as_slice)),
            first_score: carries.map(|_| *score),
            context: if req.neighbours > 0 {
                neighbours_of(state, u, m, req.neighbours)
            } else {
                Vec::new()
            },
        });
    }
    Ok((hits, budget.map(|b| (b.1, b.2))))
}

/// The first results of `hits`, in order, at most `limit`, within `budget`.
#[expect(
    clippy::type_complexity,
    reason = "the page and its budget, as SEARCH reports them"
)]
fn within_budget(
    hits: impl Iterator<Item = SearchedHit>,
    limit: usize,
    mut budget: Option<(usize, usize, usize)>,
    embedding: &crate::store::Embedding,
) -> Result<(Vec<SearchedHit>, Option<(usize, usize, usize)>)> {
    let mut page = Vec::with_capacity(limit);
    for hit in hits {
        if page.len() == limit {
            break;
        }
        if fits(&mut budget, &hit.memory.content, embedding)? {
            page.push(hit);
        }
    }
    Ok((page, budget))
}

/// `hits` rescored by `reranker` against `query` and ordered by its score, best first (ties
/// in the order given); each keeps its strategy score as `first_score`. Runs outside every
/// lock: a cross-encoder takes tens of milliseconds a pair.
fn reranked(
    reranker: &dyn amberdb_embed::Reranker,
    query: &str,
    mut hits: Vec<SearchedHit>,
) -> Result<Vec<SearchedHit>> {
    let passages: Vec<&str> = hits.iter().map(|h| h.memory.content.as_str()).collect();
    let scores = reranker.score(query, &passages)?;
    for (hit, score) in hits.iter_mut().zip(scores) {
        hit.first_score.get_or_insert(hit.score);
        hit.score = score;
    }
    hits.sort_by(|a, b| b.score.total_cmp(&a.score));
    Ok(hits)
}

/// The page `req` asks for out of a reranker's `pool`: reordered by `reranker`, grouped by
/// session when asked, cut to the offset, the limit and the token budget. Returns the hits
/// and, with a budget, the tokens used and the results skipped.
#[expect(
    clippy::type_complexity,
    reason = "the page and its budget, as SEARCH reports them"
)]
pub(super) fn reranked_page(
    reranker: &dyn amberdb_embed::Reranker,
    req: &SearchRequest,
    pool: Vec<SearchedHit>,
    embedding: &crate::store::Embedding,
) -> Result<(Vec<SearchedHit>, Option<(usize, usize)>)> {
    let mut pool = reranked(reranker, &req.query, pool)?;
    if req.group == Group::Session {
        pool = grouped_hits(pool);
    }
    let budget = req.max_tokens.map(|b| (b, 0, 0));
    let (page, budget) = within_budget(
        pool.into_iter().skip(req.offset),
        req.limit,
        budget,
        embedding,
    )?;
    Ok((page, budget.map(|b| (b.1, b.2))))
}
