//! A bounded top-k collector with a total, deterministic order: higher score first, then the
//! lower key. Equal inputs give equal outputs whatever the scan order or thread count.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

/// One result: a key and its score (higher is closer).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Neighbour {
    /// The key given at insert.
    pub key: u64,
    /// Similarity; for unit vectors, the cosine.
    pub score: f32,
}

impl Eq for Neighbour {}

impl Ord for Neighbour {
    /// "Greater" means "better": higher score, then lower key.
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .total_cmp(&other.score)
            .then_with(|| other.key.cmp(&self.key))
    }
}

impl PartialOrd for Neighbour {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Keeps the best `k` neighbours pushed into it.
#[derive(Debug, Clone)]
pub struct TopK {
    k: usize,
    heap: BinaryHeap<Reverse<Neighbour>>,
}

impl TopK {
    /// An empty collector of at most `k` results.
    #[must_use]
    pub fn new(k: usize) -> TopK {
        TopK {
            k,
            heap: BinaryHeap::with_capacity(k.min(4096) + 1),
        }
    }

    /// How many results it keeps.
    #[must_use]
    pub fn capacity(&self) -> usize {
        self.k
    }

    /// The score a new candidate must beat to enter, or `-inf` while not full.
    #[inline]
    #[must_use]
    pub fn threshold(&self) -> f32 {
        if self.heap.len() < self.k {
            f32::NEG_INFINITY
        } else {
            self.heap.peek().map_or(f32::NEG_INFINITY, |r| r.0.score)
        }
    }

    /// Offers a candidate.
    #[inline]
    pub fn push(&mut self, candidate: Neighbour) {
        if self.k == 0 {
            return;
        }
        if self.heap.len() < self.k {
            self.heap.push(Reverse(candidate));
        } else if let Some(mut worst) = self.heap.peek_mut()
            && candidate > worst.0
        {
            // Replaced in place: one sift down when `worst` drops, where a pop and a push
            // sift twice.
            *worst = Reverse(candidate);
        }
    }

    /// Merges another collector into this one.
    #[must_use]
    pub fn merge(mut self, mut other: TopK) -> TopK {
        // Push the smaller heap into the larger (one that fits this collector's k).
        if other.heap.len() > self.heap.len() && other.heap.len() <= self.k {
            std::mem::swap(&mut self.heap, &mut other.heap);
        }
        for Reverse(n) in other.heap {
            self.push(n);
        }
        self
    }

    /// The results, best first.
    #[must_use]
    pub fn into_sorted(self) -> Vec<Neighbour> {
        let mut v: Vec<Neighbour> = self.heap.into_iter().map(|r| r.0).collect();
        v.sort_by(|a, b| b.cmp(a));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_best_k_with_ties_broken_by_lower_key() {
        let mut t = TopK::new(3);
        for (key, score) in [(5, 0.5), (1, 0.9), (4, 0.5), (2, 0.1), (3, 0.5)] {
            t.push(Neighbour { key, score });
        }
        let keys: Vec<u64> = t.into_sorted().iter().map(|n| n.key).collect();
        assert_eq!(keys, vec![1, 3, 4]);
    }

    #[test]
    fn zero_k_keeps_nothing() {
        let mut t = TopK::new(0);
        t.push(Neighbour { key: 1, score: 1.0 });
        assert!(t.into_sorted().is_empty());
    }
}
