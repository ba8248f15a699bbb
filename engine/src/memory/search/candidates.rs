//! Finding a search's candidates under the state read lock: the selection the filters leave,
//! the vector top, the keyword top and the text matches, and their fusion.

use super::request::*;
use crate::error::{EngineError, Result};
use crate::kernel::record::{Category, Kind, Memory, MemoryId, Timestamp};
use crate::kernel::state::State;
use crate::kernel::table::UserIndex;
use amberdb_index::{KeySet, Probe, Scan, SearchParams};
use std::collections::HashMap;

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
            .map_or_else(KeySet::new, |t| state.invalid_at(user, t));
        return if except.is_empty() {
            Selection::All(&u.keys)
        } else {
            Selection::AllBut {
                all: &u.keys,
                except,
            }
        };
    }
    let pass = |k: u64| state.get(MemoryId(k)).is_some_and(|m| filter.matches(m));
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
    let vectors = &state.vectors();
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
            if list.len() <= crate::memory::space::GATHER_KEYS.max(vectors.len() / 16) =>
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
        .get(MemoryId(key))
        .or_else(|| state.archived(MemoryId(key)).map(|a| &a.record))
}

/// A live or archived record's vector.
pub(super) fn vector_of(state: &State, key: u64) -> Option<&[f32]> {
    state
        .vectors()
        .vector(key)
        .or_else(|| state.archived(MemoryId(key)).map(|a| a.vector.as_slice()))
}

/// Whether `haystack` holds `needle` (already lowercase), ignoring case: ASCII case folding
/// without allocating when the needle is ASCII, full Unicode lowercasing otherwise.
pub(super) fn contains_folded(haystack: &str, needle: &str) -> bool {
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
pub(super) const TEXT_SCAN_KEYS: usize = 256;

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
        .vectors()
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
            let m = state.get(MemoryId(*key))?;
            Some((*key, index.score_all_words(&words, &m.content)?))
        })
        .collect();
    let max_bm25 = raws.values().copied().fold(0.0f32, f32::max);
    // What runs for this query (`Fusion::ByQuery` reads it).
    let fusion = fusion.for_query(text);
    Ok(order
        .into_iter()
        .map(|key| {
            let cosine = cosine_of(state, query, key);
            let raw = raws.get(&key).copied();
            let relevance = match fusion {
                Fusion::Rrf { k } => {
                    let rr =
                        |r: Option<usize>| r.map_or(0.0, |r| 1.0 / (f64::from(k) + r as f64 + 1.0));
                    #[expect(clippy::cast_possible_truncation, reason = "scores are f32")]
                    let s = (rr(vector_rank.get(&key).copied())
                        + rr(keyword_rank.get(&key).copied())) as f32;
                    s
                }
                weighted => {
                    let (wv, wk) = weighted.weights();
                    let norm = raw.map_or(0.0, |s| if max_bm25 > 0.0 { s / max_bm25 } else { 0.0 });
                    wv * cosine.unwrap_or(0.0).max(0.0) + wk * norm
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
