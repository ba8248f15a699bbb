//! Ids the kernel assigns. A memory's id is allocated by the writer (`Writer::next_id`) in
//! commit order, so ids are monotonic and never reused, also across archives and deletes.

use std::fmt;

/// A memory's id: assigned by the store, monotonic, never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(transparent)]
pub struct MemoryId(pub u64);

impl fmt::Display for MemoryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}
