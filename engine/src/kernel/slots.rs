//! Records by id, in chunks shared copy-on-write.
//!
//! A snapshot (what a checkpoint encodes after the writer lock is released,
//! `docs/durability.md`, "Checkpoint") costs a reference per chunk of `CHUNK` ids, not one per
//! record. Changing a record in a chunk a snapshot still shares copies the chunk first (`CHUNK`
//! references), then the record; a snapshot never sees a change made after it was taken.

use crate::kernel::record::Memory;
use std::sync::Arc;

/// Ids per chunk.
const CHUNK: usize = 1024;

type Chunk = Arc<Vec<Option<Arc<Memory>>>>;

/// Records by id.
#[derive(Debug, Default, Clone)]
pub(crate) struct Slots {
    chunks: Vec<Chunk>,
}

/// The chunk and the place in it of `id`.
fn place(id: u64) -> Option<(usize, usize)> {
    let i = usize::try_from(id).ok()?;
    Some((i / CHUNK, i % CHUNK))
}

impl Slots {
    pub(crate) fn get(&self, id: u64) -> Option<&Memory> {
        let (c, j) = place(id)?;
        self.chunks.get(c)?.get(j)?.as_deref()
    }

    /// The record with `id`, to change: copied first if a snapshot shares it.
    pub(crate) fn get_mut(&mut self, id: u64) -> Option<&mut Memory> {
        let slot = self.slot_mut(id)?;
        slot.as_mut().map(Arc::make_mut)
    }

    /// Takes the record with `id` out.
    pub(crate) fn take(&mut self, id: u64) -> Option<Arc<Memory>> {
        self.slot_mut(id)?.take()
    }

    /// The slot of a present record, its chunk copied first if a snapshot shares it. `None`,
    /// copying nothing, when there is no record.
    fn slot_mut(&mut self, id: u64) -> Option<&mut Option<Arc<Memory>>> {
        let (c, j) = place(id)?;
        let chunk = self.chunks.get_mut(c)?;
        chunk.get(j)?.as_ref()?;
        Arc::make_mut(chunk).get_mut(j)
    }

    /// Puts `m` at its id, already shared (a checkpoint's decoder thread allocates the
    /// records it hands over, off the indexing thread). Returns whether the slot was empty.
    pub(crate) fn put(&mut self, m: Arc<Memory>) -> bool {
        let Some((c, j)) = place(m.id.0) else {
            return false;
        };
        if self.chunks.len() <= c {
            self.chunks
                .resize_with(c + 1, || Arc::new(vec![None; CHUNK]));
        }
        let Some(slot) = self
            .chunks
            .get_mut(c)
            .and_then(|chunk| Arc::make_mut(chunk).get_mut(j))
        else {
            return false;
        };
        let was_empty = slot.is_none();
        *slot = Some(m);
        was_empty
    }

    /// Makes room for ids up to `max_id`.
    pub(crate) fn reserve(&mut self, max_id: u64) {
        let want = place(max_id).map_or(0, |(c, _)| c + 1);
        self.chunks.reserve(want.saturating_sub(self.chunks.len()));
    }

    /// Present records in id order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Memory> + '_ {
        self.chunks
            .iter()
            .flat_map(|chunk| chunk.iter().filter_map(|s| s.as_deref()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::state::tests::record;

    #[test]
    fn a_snapshot_keeps_what_it_saw_while_the_slots_change() {
        let mut slots = Slots::default();
        for id in [1, 2, 1500, 5000] {
            assert!(slots.put(record(id, &format!("v{id}")).into()));
        }
        assert!(
            !slots.put(record(2, "v2 again").into()),
            "the slot was taken"
        );
        let snapshot = slots.clone();
        slots.get_mut(1).expect("present").content = "changed".into();
        assert_eq!(slots.take(1500).expect("present").content, "v1500");
        assert!(slots.put(record(7000, "new").into()));
        assert!(slots.get_mut(3).is_none() && slots.take(3).is_none());
        let seen: Vec<(u64, &str)> = snapshot
            .iter()
            .map(|m| (m.id.0, m.content.as_str()))
            .collect();
        assert_eq!(
            seen,
            [(1, "v1"), (2, "v2 again"), (1500, "v1500"), (5000, "v5000")]
        );
        let now: Vec<(u64, &str)> = slots.iter().map(|m| (m.id.0, m.content.as_str())).collect();
        assert_eq!(
            now,
            [
                (1, "changed"),
                (2, "v2 again"),
                (5000, "v5000"),
                (7000, "new")
            ]
        );
        assert_eq!(slots.get(5000).map(|m| m.content.as_str()), Some("v5000"));
        assert!(slots.get(u64::MAX).is_none());
    }
}
