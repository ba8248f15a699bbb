//! A user's contents ASCII-lowercased and laid end to end, so a case-insensitive substring
//! search (the `text` mode and the text supplement, `docs/search.md`) is one SIMD pass over
//! contiguous bytes (`memchr::memmem`) instead of a pointer chase per record.
//!
//! Guarantees: `find` returns exactly the accepted documents whose content holds the needle
//! with ASCII case folding (a match never spans two documents). Removed documents stay until a
//! rebuild (`wants_rebuild`); callers skip them through their own liveness check. Derived
//! state, rebuilt with the records at open.

/// Documents, each `(start offset, key)`, over one byte buffer.
#[derive(Debug, Default)]
pub(crate) struct TextColumn {
    bytes: Vec<u8>,
    docs: Vec<(usize, u64)>,
    removed: usize,
}

/// Removed documents tolerated before a rebuild: at least this many, and more than the live.
const REBUILD_AT_LEAST: usize = 4096;

impl TextColumn {
    /// Appends a document.
    pub(crate) fn add(&mut self, key: u64, content: &str) {
        self.docs.push((self.bytes.len(), key));
        self.bytes
            .extend(content.bytes().map(|b| b.to_ascii_lowercase()));
    }

    /// Notes that a document left; true when the column should be rebuilt from the live ones.
    pub(crate) fn remove(&mut self) -> bool {
        self.removed += 1;
        self.removed >= REBUILD_AT_LEAST && self.removed * 2 > self.docs.len()
    }

    /// Keys of the documents that hold `needle` (ASCII, lowercase) and pass `accept`, each
    /// once, in column order.
    pub(crate) fn find(&self, needle: &[u8], accept: impl Fn(u64) -> bool) -> Vec<u64> {
        let mut out = Vec::new();
        if needle.is_empty() {
            return out;
        }
        let finder = memchr::memmem::Finder::new(needle);
        let mut at = 0;
        while let Some(found) = self.bytes.get(at..).and_then(|rest| finder.find(rest)) {
            let pos = at + found;
            // The document holding `pos`, and where the next one starts.
            let i = self.docs.partition_point(|d| d.0 <= pos).saturating_sub(1);
            let end = self.docs.get(i + 1).map_or(self.bytes.len(), |d| d.0);
            match self.docs.get(i) {
                Some(&(_, key)) if pos + needle.len() <= end => {
                    if accept(key) {
                        out.push(key);
                    }
                    at = end;
                }
                // A match across a document boundary: look again from just after its start.
                _ => at = pos + 1,
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_case_insensitively_once_per_document_never_across_two() {
        let mut c = TextColumn::default();
        c.add(1, "Kafka lag, KAFKA lag");
        c.add(2, "nothing here ka");
        c.add(3, "fka at the start; café");
        c.add(4, "kafka");
        assert_eq!(c.find(b"kafka", |_| true), [1, 4]);
        assert_eq!(c.find(b"kafka", |k| k != 1), [4]);
        // "ka" + "fka" straddle documents 2 and 3: not a match.
        assert_eq!(c.find(b"kafka", |k| k == 2 || k == 3), Vec::<u64>::new());
        assert_eq!(c.find("café".as_bytes(), |_| true), [3]);
        assert!(!c.remove());
    }
}
