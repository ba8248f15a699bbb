//! Semantic dedup decisions (`docs/semantics.md`, "Dedup at store time", "Dedup at load time"):
//! which stored memories a new (or, in compaction, a stored) memory would merge with, through the
//! cohesion check, complete linkage over lineage, and the fact guard. Pure over a `Space`, so
//! the false-positive scenarios run with controlled vectors.

use super::judge::JudgeWeights;
use super::{MAX_MERGE_GROUP, Merge};

/// Most neighbours the fact guard judges for one memory: the limit of a plan's range query.
pub(crate) const GUARD_CANDIDATES: usize = 50;
use super::facts::{Decision, Reading, Relation, reading, relation_of};
use crate::kernel::record::{MemoryId, Timestamp};
use amberdb_index::kernels;
use std::collections::BTreeSet;

/// What the dedup decision needs to see of a store: one user's live memories of one kind.
pub(crate) trait Space {
    /// Live memories with similarity >= `min_sim` to `query`, best first, at most `limit`,
    /// never `exclude`.
    fn within(
        &self,
        query: &[f32],
        min_sim: f32,
        limit: usize,
        exclude: Option<MemoryId>,
    ) -> Vec<MemoryId>;
    /// The live memory's vector and the vectors of every archived record its lineage reaches.
    fn lineage_vectors(&self, id: MemoryId) -> Vec<Vec<f32>>;
    /// The live memory's vector.
    fn vector(&self, id: MemoryId) -> Option<Vec<f32>>;
    /// The live memory's text.
    fn text(&self, id: MemoryId) -> Option<String>;
}

/// The decision for one new memory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Plan {
    /// Candidates that say the same: merged with the new memory.
    pub(crate) duplicates: Vec<MemoryId>,
    /// Candidates the new memory updates: archived, superseded by it.
    pub(crate) updated: Vec<MemoryId>,
    /// Candidates left alone because they state a different fact.
    pub(crate) distinct: Vec<MemoryId>,
    /// Why the merge of the duplicates was refused, if it was (they then count as distinct;
    /// updates are decided pair by pair and stand).
    pub(crate) refused: Option<&'static str>,
    /// Near neighbours the range query found (before cohesion and the fact guard).
    pub(crate) candidates: usize,
    /// Each candidate the fact guard judged, with its decision and the reason.
    pub(crate) decisions: Vec<(MemoryId, Decision)>,
}

impl Plan {
    /// The rule the fact guard decided `id` by.
    pub(crate) fn rule_of(&self, id: MemoryId) -> Option<super::facts::Rule> {
        self.decisions
            .iter()
            .find(|(c, _)| *c == id)
            .map(|(_, d)| d.rule)
    }
}

/// The cohesion check, our form of agent-memory-server's guard against chains (its issue
/// #200): the statements a merge joins must all be within the distance of one another (a
/// clique), so a memory that bridges two distant ones merges with neither. Unlike the peer's,
/// a neighbour that states another fact does not veto the merge: in a store of many similar
/// statements ("X lives in Y" for every X) the peer's rule refuses nearly every merge and
/// update (`docs/semantics.md`, step 3).
pub(crate) fn cohesive(space: &dyn Space, group: &[MemoryId], min_sim: f32) -> bool {
    let vectors: Vec<Vec<f32>> = group.iter().filter_map(|c| space.vector(*c)).collect();
    vectors.len() == group.len()
        && vectors.iter().enumerate().all(|(i, a)| {
            vectors
                .iter()
                .skip(i + 1)
                .all(|b| kernels::dot(a, b).is_ok_and(|s| s >= min_sim))
        })
}

/// Whether `vector` is within `min_sim` of everything `candidate` already absorbed (complete
/// linkage), so merges cannot snowball along a chain of near neighbours.
fn linked(space: &dyn Space, candidate: MemoryId, vector: &[f32], min_sim: f32) -> bool {
    space
        .lineage_vectors(candidate)
        .iter()
        .all(|v| kernels::cosine(v, vector).is_ok_and(|s| s >= min_sim))
}

/// Decides what a memory with `vector` and `text` merges with. `anchor` is the memory itself
/// when it is already stored (compaction).
pub(crate) fn plan(
    space: &dyn Space,
    vector: &[f32],
    text: &str,
    min_sim: f32,
    anchor: Option<MemoryId>,
    (merge, judge): (Merge, &JudgeWeights),
) -> Plan {
    // The fact guard reads more neighbours than a merge may join: in a store of many similar
    // statements the older value of the same slot is often not among the nearest ten.
    let candidates = space.within(vector, min_sim, GUARD_CANDIDATES, anchor);
    plan_among(
        space,
        candidates,
        vector,
        text,
        min_sim,
        anchor,
        (merge, judge),
    )
}

/// `plan` with its range query already answered: `candidates` is what
/// `space.within(vector, min_sim, GUARD_CANDIDATES, anchor)` returns (compaction answers many
/// of them in one batch).
pub(crate) fn plan_among(
    space: &dyn Space,
    mut candidates: Vec<MemoryId>,
    vector: &[f32],
    text: &str,
    min_sim: f32,
    anchor: Option<MemoryId>,
    (merge, judge): (Merge, &JudgeWeights),
) -> Plan {
    candidates.truncate(GUARD_CANDIDATES);
    let mut plan = Plan {
        candidates: candidates.len(),
        ..Plan::default()
    };
    if candidates.is_empty() {
        return plan;
    }
    let new = reading(text);
    for c in candidates {
        if !linked(space, c, vector, min_sim) {
            plan.distinct.push(c);
            continue;
        }
        let older = reading(&space.text(c).unwrap_or_default());
        let mut decision = relation_of(&older, &new);
        if decision.relation == Relation::Duplicate
            && merge == Merge::Sure
            && decision.rule != super::facts::Rule::SameWords
        {
            // Precision first: the same statement in other words merges only when the
            // learned judge is sure of it, or the store asks for paraphrases to merge
            // (`Merge::Paraphrases`).
            let cosine = space
                .vector(c)
                .and_then(|v| kernels::dot(&v, vector).ok())
                .unwrap_or(0.0);
            if !judge.merges(&older, &new, &decision, cosine) {
                decision.relation = Relation::Unsure;
            }
        }
        match decision.relation {
            Relation::Duplicate => plan.duplicates.push(c),
            Relation::Updates => plan.updated.push(c),
            Relation::Distinct | Relation::Unsure => plan.distinct.push(c),
        }
        plan.decisions.push((c, decision));
    }
    // The nearest duplicates, at most a merge group of them.
    let beyond = plan.duplicates.len().min(MAX_MERGE_GROUP);
    plan.distinct.extend(plan.duplicates.drain(beyond..));
    // A stored anchor is part of the group it would merge.
    let mut group = plan.duplicates.clone();
    if let Some(a) = anchor {
        group.push(a);
    }
    if !plan.duplicates.is_empty() && !cohesive(space, &group, min_sim) {
        plan.refused = Some("cohesion: the duplicates are not all close to one another");
        plan.distinct.append(&mut plan.duplicates);
    }
    plan
}

/// One search result as load-time dedup sees it.
pub(crate) struct FoldItem<'a> {
    /// Its unit vector.
    pub(crate) vector: &'a [f32],
    /// Its text.
    pub(crate) text: &'a str,
    /// When it became valid (orders two statements of one slot).
    pub(crate) at: Timestamp,
    /// Its text as the fact guard reads it, read on first use (a text is compared with
    /// several others, and reading it is most of a comparison's cost).
    pub(crate) reading: std::cell::OnceCell<Reading>,
}

impl<'a> FoldItem<'a> {
    /// An item not yet read by the guard.
    pub(crate) fn new(vector: &'a [f32], text: &'a str, at: Timestamp) -> FoldItem<'a> {
        FoldItem {
            vector,
            text,
            at,
            reading: std::cell::OnceCell::new(),
        }
    }

    fn read(&self) -> &Reading {
        self.reading.get_or_init(|| reading(self.text))
    }
}

/// What the fact guard says the later-valid of two items is to the earlier one, and whether
/// `b` is the later one.
fn guard(a: &FoldItem<'_>, b: &FoldItem<'_>) -> (Decision, bool) {
    let b_newer = b.at > a.at;
    let (older, newer) = if b_newer { (a, b) } else { (b, a) };
    (relation_of(older.read(), newer.read()), b_newer)
}

fn close(a: &FoldItem<'_>, b: &FoldItem<'_>, min_sim: f32) -> bool {
    kernels::dot(a.vector, b.vector).is_ok_and(|s| s >= min_sim)
}

/// The default load-time dedup (`docs/semantics.md`, "Dedup at load time") over `items`, best
/// first: a result within `min_sim` of a kept one that has exactly its content words in the
/// same order (the guard's `SameWords`: the same statement up to case, punctuation and stop
/// words) folds into it. Nothing moves: the kept results stay in the order given, so a page ranked by
/// score stays in score order, and a result that differs in one content word is never hidden.
/// Returns the first `max_kept` kept hits, each with the later hits folded into it.
#[must_use]
pub(crate) fn fold_duplicates(
    items: &[FoldItem<'_>],
    min_sim: f32,
    max_kept: usize,
) -> Vec<(usize, Vec<usize>)> {
    let mut kept: Vec<(usize, Vec<usize>)> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let home = kept.iter_mut().find(|(k, _)| {
            items.get(*k).is_some_and(|kept_item| {
                close(kept_item, item, min_sim)
                    && relation_of(kept_item.read(), item.read()).rule
                        == super::facts::Rule::SameWords
            })
        });
        if let Some(slot) = home {
            slot.1.push(i);
        } else if kept.len() < max_kept {
            kept.push((i, Vec::new()));
        } else {
            break;
        }
    }
    kept
}

/// The newest value of a slot first, for a question, in the default fold (`docs/search.md`,
/// "Changed facts"): a kept result moves right in front of a higher kept result within
/// `min_sim` of it when it became valid later and `newer_value_of` says it is a newer value of
/// the same slot. Never by storage time alone (`at` is when each statement became valid).
/// Nothing is folded or dropped. Returns, for each result moved, its index and the index of
/// the result it moved in front of (whose score it carries on the page, so the page stays in
/// score order).
pub(crate) fn newest_of_slot_first(
    items: &[FoldItem<'_>],
    kept: &mut [(usize, Vec<usize>)],
    min_sim: f32,
    question: &BTreeSet<String>,
) -> Vec<(usize, usize)> {
    let mut moves = Vec::new();
    let mut j = 1;
    while j < kept.len() {
        let newer = kept.get(j).and_then(|k| items.get(k.0));
        let older_at = (0..j).find(|&i| {
            let (Some(a), Some(b)) = (kept.get(i).and_then(|k| items.get(k.0)), newer) else {
                return false;
            };
            b.at > a.at && close(a, b, min_sim) && newer_value_of(a, b, question)
        });
        if let Some(i) = older_at
            && let (Some(&(moved, _)), Some(&(older, _))) = (kept.get(j), kept.get(i))
        {
            if let Some(span) = kept.get_mut(i..=j) {
                span.rotate_right(1);
            }
            moves.push((moved, older));
        }
        j += 1;
    }
    moves
}

/// Most content words a statement may hold that the other lacks, for two statements to be
/// read as two answers to one question: a value of a slot is a word or two ("Tamil",
/// "Equatorial Guinea"), not a clause.
const MAX_ANSWER_WORDS: usize = 2;

/// Whether `b` states a newer value of `a`'s slot, for `question` (its content words). Never
/// when the question names a word only `a` holds: it then asks for `a` ("A man plays the
/// guitar" finds "A man is playing guitar", never the newer "A man is playing a piano" in
/// front of it), or for `a`'s subject ("Bob likes tea" never goes before "Alice likes tea" for
/// "What does Alice like?"). Otherwise when either
/// - the fact guard reads the pair with confidence as the same slot with another value, or the
///   opposite statement (`Relation::Updates`); or
/// - the two answer the question with different values: each holds one or two content words
///   more often than the other (its value), and `a` holds a word of the question (which `b`
///   then holds too). "Tamil was the language of Thillu Mullu" and "Korean was the language of
///   Thillu Mullu" answer "What is the original language of Thillu Mullu?", though the guard
///   reads "Tamil" as the subject.
fn newer_value_of(a: &FoldItem<'_>, b: &FoldItem<'_>, question: &BTreeSet<String>) -> bool {
    let (ra, rb) = (a.read(), b.read());
    let (wa, wb) = (ra.words(), rb.words());
    if wa.difference(&wb).any(|w| question.contains(*w)) {
        return false;
    }
    let value = |n: usize| (1..=MAX_ANSWER_WORDS).contains(&n);
    let two_answers = value(ra.excess_over(rb).len())
        && value(rb.excess_over(ra).len())
        && wa.iter().any(|w| question.contains(*w));
    two_answers || guard(a, b).0.relation == Relation::Updates
}

/// The opt-in slot fold (`Fold::Slots`; `docs/semantics.md`, "Dedup at load time") over
/// `items`, best first. Within `min_sim` of a kept hit, the fact guard decides: a duplicate folds into it; an older
/// value of its slot folds into it too, and a newer value takes its place (the older one
/// folded); anything else (another fact, a pair the guard is unsure of) is kept, so folding
/// never drops a result that is not a duplicate or an outdated value. Then a newer statement
/// the guard is unsure of is moved in front of the older one it sits near. Returns the first
/// `max_kept` kept hits, each with the hits folded into it: `O(hits · max_kept)` comparisons.
#[must_use]
pub(crate) fn fold_slots(
    items: &[FoldItem<'_>],
    min_sim: f32,
    max_kept: usize,
) -> Vec<(usize, Vec<usize>)> {
    let mut kept: Vec<(usize, Vec<usize>)> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let mut newer_unsure = false;
        let mut home: Option<(usize, bool)> = None;
        for (h, (k, _)) in kept.iter().enumerate() {
            let Some(kept_item) = items.get(*k) else {
                continue;
            };
            if !close(kept_item, item, min_sim) {
                continue;
            }
            match guard(kept_item, item) {
                (d, _) if d.relation == Relation::Duplicate => home = Some((h, false)),
                (d, item_newer) if d.relation == Relation::Updates => {
                    home = Some((h, item_newer));
                }
                (d, item_newer) if d.relation == Relation::Unsure => {
                    newer_unsure |= item_newer;
                    continue;
                }
                _ => continue,
            }
            break;
        }
        if let Some((h, replaces)) = home {
            if let Some(slot) = kept.get_mut(h) {
                if replaces {
                    let older = std::mem::replace(&mut slot.0, i);
                    slot.1.push(older);
                } else {
                    slot.1.push(i);
                }
            }
        } else if kept.len() < max_kept || newer_unsure {
            kept.push((i, Vec::new()));
        }
    }
    // Newest value of a slot first: move each hit in front of the first older statement of
    // its slot kept before it.
    let mut j = 1;
    while let Some(item_j) = kept.get(j).map(|k| k.0) {
        let slot_older = (0..j).find(|&i| {
            let (Some(a), Some(b)) = (kept.get(i).and_then(|k| items.get(k.0)), items.get(item_j))
            else {
                return false;
            };
            // Two statements of one subject the guard is unsure of are ordered by time
            // however far apart the model puts them; any other unsure pair only when near.
            let (d, b_newer) = guard(a, b);
            b_newer
                && matches!(d.relation, Relation::Unsure | Relation::Updates)
                && (d.same_subject || close(a, b, min_sim))
        });
        if let Some(i) = slot_older {
            let moved = kept.remove(j);
            kept.insert(i, moved);
        }
        j += 1;
    }
    kept.truncate(max_kept);
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item<'a>(vector: &'a [f32], text: &'a str, at: i64) -> FoldItem<'a> {
        FoldItem::new(vector, text, Timestamp(at))
    }

    #[test]
    fn folding_keeps_other_facts_and_puts_the_newest_value_first() {
        let v = [1.0, 0.0];
        let items = [
            // The older value ranks first, as the model often prefers it.
            item(&v, "The capital of Kenya is Mombasa", 1),
            item(&v, "The capital of Kenya is Nairobi", 2),
            item(&v, "The capital of Kenya is Nairobi.", 3),
            item(&v, "The capital of Spain is Madrid", 4),
        ];
        // The newer value takes the older's place and the older folds into it, with the
        // paraphrase of the newer; the other subject stays on the page.
        assert_eq!(
            fold_slots(&items, 0.9, 10),
            vec![(1, vec![0, 2]), (3, vec![])]
        );
        assert_eq!(fold_slots(&items, 0.9, 1), vec![(1, vec![0, 2])]);
        // A pair the guard is unsure of stays on the page, the newer first.
        let unsure = [
            item(&v, "Nairobi is the capital of Kenya", 1),
            item(&v, "The capital of Kenya is Mombasa", 2),
        ];
        assert_eq!(fold_slots(&unsure, 0.9, 10), vec![(1, vec![]), (0, vec![])]);
    }

    #[test]
    fn the_default_fold_hides_only_the_same_words_and_keeps_the_order() {
        let v = [1.0, 0.0];
        let far = [0.0, 1.0];
        let items = [
            item(&v, "The capital of Kenya is Mombasa", 1),
            item(&v, "The capital of Kenya is Nairobi", 2),
            item(&v, "the capital of Kenya is Nairobi!", 3),
            item(&far, "The capital of Kenya is Mombasa.", 4),
            item(&v, "The capital of Kenya is Mombasa.", 5),
        ];
        // The older value stays first (score order); the newer value is another result; only
        // the restatement in the same words folds, and only within the distance.
        assert_eq!(
            fold_duplicates(&items, 0.9, 10),
            vec![(0, vec![4]), (1, vec![2]), (3, vec![])]
        );
        assert_eq!(
            fold_duplicates(&items, 0.9, 2),
            vec![(0, vec![]), (1, vec![2])]
        );
    }

    fn question(q: &str) -> BTreeSet<String> {
        super::super::facts::content_words(q)
    }

    fn moved(items: &[FoldItem<'_>], q: &str) -> (Vec<usize>, Vec<(usize, usize)>) {
        let mut kept = fold_duplicates(items, 0.9, 10);
        let moves = newest_of_slot_first(items, &mut kept, 0.9, &question(q));
        (kept.into_iter().map(|k| k.0).collect(), moves)
    }

    #[test]
    fn a_newer_value_of_a_slot_moves_in_front_of_the_older_and_nothing_else_does() {
        let v = [1.0, 0.0];
        let far = [0.0, 1.0];
        // The guard's confident update: the newer value moves in front, carrying its score.
        let items = [
            item(&v, "The capital of Kenya is Mombasa", 1),
            item(&v, "The capital of Spain is Madrid", 5),
            item(&v, "The capital of Kenya is Nairobi", 2),
        ];
        assert_eq!(
            moved(&items, "What is the capital of Kenya?"),
            (vec![2, 0, 1], vec![(2, 0)])
        );
        // Two answers to the question, the value first in the sentence (the guard reads
        // "Tamil" as the subject): the newer first.
        let items = [
            item(&v, "Tamil was the language of Thillu Mullu.", 1),
            item(&v, "Korean was the language of Thillu Mullu.", 2),
        ];
        let q = "What is the original language of Thillu Mullu?";
        assert_eq!(moved(&items, q), (vec![1, 0], vec![(1, 0)]));
        // A value that repeats the subject's name is still a value.
        let items = [
            item(&v, "Mercury Montclair is created by Mercury.", 1),
            item(&v, "Mercury Montclair is created by Toyota.", 2),
        ];
        let q = "Which company is Mercury Montclair produced by?";
        assert_eq!(moved(&items, q), (vec![1, 0], vec![(1, 0)]));
        // Never across the subject the question names, never by time when far apart, never
        // the older in front of the newer.
        let items = [
            item(&v, "Alice likes green tea", 1),
            item(&v, "Bob likes green tea", 2),
        ];
        assert_eq!(moved(&items, "What does Alice like?"), (vec![0, 1], vec![]));
        let items = [
            item(&v, "Tamil was the language of Thillu Mullu.", 1),
            item(&far, "Korean was the language of Thillu Mullu.", 2),
        ];
        assert_eq!(moved(&items, q), (vec![0, 1], vec![]));
        let items = [
            item(&v, "Korean was the language of Thillu Mullu.", 2),
            item(&v, "Tamil was the language of Thillu Mullu.", 1),
        ];
        let q = "What is the original language of Thillu Mullu?";
        assert_eq!(moved(&items, q), (vec![0, 1], vec![]));
        // A question that names the older statement's own words asks for it.
        let items = [
            item(&v, "A man is playing the guitar", 1),
            item(&v, "A man is playing the piano", 2),
        ];
        assert_eq!(moved(&items, "A man plays a guitar"), (vec![0, 1], vec![]));
        assert_eq!(
            moved(&items, "What does the man play?"),
            (vec![1, 0], vec![(1, 0)])
        );
        // A statement that differs by a clause, not a value, stays where its score put it.
        let items = [
            item(&v, "Tamil was the language of Thillu Mullu.", 1),
            item(
                &v,
                "Korean dubbing of Thillu Mullu aired on a cable channel in Seoul.",
                2,
            ),
        ];
        assert_eq!(moved(&items, q), (vec![0, 1], vec![]));
    }
}
