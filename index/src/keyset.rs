//! A growable bitmap of u64 keys. Compact for dense keys (amberdb's ids are assigned
//! monotonically, so a million ids cost 125 KiB, wherever they start: a cluster partition's
//! ids begin at `partition << 40`, and the bitmap begins at its first key's word); lookups are
//! one shift, one subtraction and one mask.

/// A set of u64 keys as a bitmap.
#[derive(Debug, Clone, Default)]
pub struct KeySet {
    /// Bits of the keys from `first_word * 64` on.
    words: Vec<u64>,
    /// The word index of `words[0]`.
    first_word: u64,
    len: usize,
}

impl PartialEq for KeySet {
    fn eq(&self, other: &KeySet) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl Eq for KeySet {}

impl KeySet {
    /// An empty set.
    #[must_use]
    pub fn new() -> KeySet {
        KeySet::default()
    }

    /// The index in `words` of `key`'s word, if the bitmap reaches below it.
    fn word_of(&self, key: u64) -> Option<usize> {
        usize::try_from((key / 64).checked_sub(self.first_word)?).ok()
    }

    /// Adds `key`; returns whether it was absent. Memory grows to the span of the keys / 8
    /// bytes.
    pub fn insert(&mut self, key: u64) -> bool {
        let word = key / 64;
        if self.words.is_empty() {
            self.first_word = word;
        } else if word < self.first_word {
            let below = usize::try_from(self.first_word - word).unwrap_or(usize::MAX);
            self.words.splice(0..0, std::iter::repeat_n(0, below));
            self.first_word = word;
        }
        let Some(i) = self.word_of(key) else {
            return false;
        };
        if i >= self.words.len() {
            self.words.resize(i + 1, 0);
        }
        let Some(w) = self.words.get_mut(i) else {
            return false;
        };
        let bit = key % 64;
        let was = *w & (1 << bit) != 0;
        *w |= 1 << bit;
        if !was {
            self.len += 1;
        }
        !was
    }

    /// Removes `key`; returns whether it was present.
    pub fn remove(&mut self, key: u64) -> bool {
        let Some(w) = self.word_of(key).and_then(|i| self.words.get_mut(i)) else {
            return false;
        };
        let bit = key % 64;
        let was = *w & (1 << bit) != 0;
        *w &= !(1 << bit);
        if was {
            self.len -= 1;
        }
        was
    }

    /// Whether `key` is in the set.
    #[inline]
    #[must_use]
    pub fn contains(&self, key: u64) -> bool {
        self.word_of(key)
            .and_then(|i| self.words.get(i))
            .is_some_and(|w| w & (1 << (key % 64)) != 0)
    }

    /// Number of keys.
    #[must_use]
    pub fn len(&self) -> usize {
        self.len
    }

    /// The keys in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        let first = self.first_word;
        self.words.iter().enumerate().flat_map(move |(i, &w)| {
            let base = (first + i as u64) * 64;
            let mut rest = w;
            std::iter::from_fn(move || {
                if rest == 0 {
                    return None;
                }
                let bit = u64::from(rest.trailing_zeros());
                rest &= rest - 1;
                Some(base + bit)
            })
        })
    }

    /// Whether the set is empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_remove_contains() {
        let mut s = KeySet::new();
        assert!(s.insert(0) && s.insert(64) && s.insert(1000));
        assert!(!s.insert(64));
        assert!(s.contains(1000) && !s.contains(999) && !s.contains(u64::MAX));
        assert!(s.remove(64) && !s.remove(64));
        assert_eq!(s.len(), 2);
        assert_eq!(s.iter().collect::<Vec<_>>(), [0, 1000]);
        s.insert(63);
        s.insert(64);
        assert_eq!(s.iter().collect::<Vec<_>>(), [0, 63, 64, 1000]);
    }

    #[test]
    fn a_set_of_one_partitions_keys_costs_their_span_not_their_size() {
        let base = 5u64 << 40;
        let mut s = KeySet::new();
        assert!(s.insert(base + 1_000) && s.insert(base + 1));
        assert!(s.contains(base + 1) && s.contains(base + 1_000) && !s.contains(1));
        assert!(s.words.len() <= 17, "{} words", s.words.len());
        assert!(!s.remove(1) && s.remove(base + 1));
        assert_eq!(s.iter().collect::<Vec<_>>(), [base + 1_000]);
        let mut t = KeySet::new();
        t.insert(base + 1_000);
        assert_eq!(s, t, "equal whatever order built them");
        assert_ne!(s, KeySet::new());
    }
}
