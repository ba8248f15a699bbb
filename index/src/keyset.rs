//! A growable bitmap of u64 keys. Compact for dense keys (amberdb's ids are assigned
//! monotonically from 1, so a million ids cost 125 KiB); lookups are one shift and one mask.

/// A set of u64 keys as a bitmap.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeySet {
    words: Vec<u64>,
    len: usize,
}

impl KeySet {
    /// An empty set.
    #[must_use]
    pub fn new() -> KeySet {
        KeySet::default()
    }

    /// Adds `key`; returns whether it was absent. Memory grows to `key / 8` bytes.
    pub fn insert(&mut self, key: u64) -> bool {
        let (word, bit) = (usize::try_from(key / 64).unwrap_or(usize::MAX), key % 64);
        if word >= self.words.len() {
            self.words.resize(word + 1, 0);
        }
        let Some(w) = self.words.get_mut(word) else {
            return false;
        };
        let was = *w & (1 << bit) != 0;
        *w |= 1 << bit;
        if !was {
            self.len += 1;
        }
        !was
    }

    /// Removes `key`; returns whether it was present.
    pub fn remove(&mut self, key: u64) -> bool {
        let (word, bit) = (usize::try_from(key / 64).unwrap_or(usize::MAX), key % 64);
        let Some(w) = self.words.get_mut(word) else {
            return false;
        };
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
        usize::try_from(key / 64)
            .ok()
            .and_then(|w| self.words.get(w))
            .is_some_and(|w| w & (1 << (key % 64)) != 0)
    }

    /// Number of keys.
    #[must_use]
    pub fn len(&self) -> usize {
        self.len
    }

    /// The keys in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        self.words.iter().enumerate().flat_map(|(i, &w)| {
            let base = (i as u64) * 64;
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
}
