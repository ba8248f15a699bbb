//! Records by id, in chunks shared copy-on-write.
//!
//! A snapshot (what a checkpoint encodes after the writer lock is released,
//! `docs/durability.md`, "Checkpoint") costs a reference per chunk of `CHUNK` ids, not one per
//! record. Changing a record in a chunk a snapshot still shares copies the chunk first (`CHUNK`
//! slots), then the record; a snapshot never sees a change made after it was taken.
//!
//! A record an open loads stays in the checkpoint it mapped (`docs/architecture.md`, "Mapped
//! records"): its slot holds the map and the record's offset, and the record is decoded into
//! the slot's once-cell when it is first read. Changing or taking it out decodes it for good.
//! `materialize_in` decodes every record of one file for good, so that no slot keeps that
//! file's map alive.

use crate::kernel::checkpoint::writer::Record;
use crate::kernel::codec::Decoder;
use crate::kernel::record::{self, Memory};
use amberdb_index::SealedBytes;
use std::sync::{Arc, OnceLock};

/// Ids per chunk.
const CHUNK: usize = 1024;

type Chunk = Arc<Vec<Option<Slot>>>;

/// One record: in memory, or still in a mapped checkpoint.
#[derive(Debug, Clone)]
enum Slot {
    Decoded(Arc<Memory>),
    Mapped(Mapped),
}

// What a slot costs (docs/architecture.md, "Mapped records", M1).
const _: () = assert!(std::mem::size_of::<Option<Slot>>() <= 48);

/// A record left in a mapped checkpoint, and its decoded form once read.
#[derive(Debug, Clone)]
struct Mapped {
    bytes: SealedBytes,
    /// Where the record's encoding starts in `bytes`, and its length.
    at: usize,
    len: u32,
    decoded: OnceLock<Arc<Memory>>,
}

impl Mapped {
    /// The record, decoded at the first call. `None` if the bytes no longer decode: they
    /// decoded when the open loaded them, from a file the store never writes again, so only
    /// a change made under the map by someone else gets here (outside the contract, as a
    /// truncation's SIGBUS is, `docs/safety.md`); it is logged, never a panic.
    fn record(&self) -> Option<&Arc<Memory>> {
        if let Some(m) = self.decoded.get() {
            return Some(m);
        }
        let m = self.decode()?;
        Some(self.decoded.get_or_init(|| Arc::new(m)))
    }

    /// The record's encoding, as the checkpoint holds it.
    fn encoded(&self) -> &[u8] {
        let end = self.at.saturating_add(self.len as usize);
        self.bytes.as_slice().get(self.at..end).unwrap_or(&[])
    }

    /// The record decoded afresh, leaving the once-cell as it is.
    fn decode(&self) -> Option<Memory> {
        record::decode(&mut Decoder::new(self.encoded()))
            .inspect_err(|e| {
                tracing::error!(
                    offset = self.at + e.offset,
                    reason = e.reason,
                    "a record left in a mapped checkpoint no longer decodes"
                );
            })
            .ok()
    }
}

impl Slot {
    /// The record as a checkpoint writes it: a mapped one as its bytes (its once-cell, if
    /// read, holds the same record: a change makes the slot decoded).
    fn to_write(&self) -> Record<'_> {
        match self {
            Slot::Decoded(m) => Record::Decoded(m),
            Slot::Mapped(mapped) => Record::Encoded(mapped.encoded()),
        }
    }

    fn record(&self) -> Option<&Arc<Memory>> {
        match self {
            Slot::Decoded(m) => Some(m),
            Slot::Mapped(mapped) => mapped.record(),
        }
    }

    /// Makes the slot decoded; `None`, leaving it as it was, if its bytes no longer decode.
    fn decode(&mut self) -> Option<&mut Arc<Memory>> {
        if let Slot::Mapped(mapped) = self {
            let m = Arc::clone(mapped.record()?);
            *self = Slot::Decoded(m);
        }
        match self {
            Slot::Decoded(m) => Some(m),
            Slot::Mapped(_) => None,
        }
    }
}

/// Records by id: by the id's local part below its cluster partition (`docs/cluster.md`,
/// "Partitions, ids and stores"), since a store holds one partition's ids, which lie 2^40
/// apart from another's. The partition is the first record's; an id of another has no place.
#[derive(Debug, Default, Clone)]
pub(crate) struct Slots {
    chunks: Vec<Chunk>,
    /// The high bits (`id >> PARTITION_SHIFT`) of every id held, once one is.
    partition: Option<u64>,
}

/// The local part of an id (below its partition).
const LOCAL_MASK: u64 = (1 << crate::kernel::cluster::PARTITION_SHIFT) - 1;

impl Slots {
    /// The chunk and the place in it of `id`; `None` for an id of another partition.
    fn place(&self, id: u64) -> Option<(usize, usize)> {
        let partition = id >> crate::kernel::cluster::PARTITION_SHIFT;
        if self.partition.is_some_and(|p| p != partition) {
            return None;
        }
        let i = usize::try_from(id & LOCAL_MASK).ok()?;
        Some((i / CHUNK, i % CHUNK))
    }

    pub(crate) fn get(&self, id: u64) -> Option<&Memory> {
        let (c, j) = self.place(id)?;
        self.chunks.get(c)?.get(j)?.as_ref()?.record().map(|m| &**m)
    }

    /// Runs `f` on the record with `id` without keeping it decoded: a mapped record not read
    /// before is decoded for `f` alone and dropped after, so a scan of every record (the
    /// lexical build after an open) leaves no record in memory that no one reads.
    pub(crate) fn with<R>(&self, id: u64, f: impl FnOnce(&Memory) -> R) -> Option<R> {
        let (c, j) = self.place(id)?;
        match self.chunks.get(c)?.get(j)?.as_ref()? {
            Slot::Decoded(m) => Some(f(m)),
            Slot::Mapped(mapped) => match mapped.decoded.get() {
                Some(m) => Some(f(m)),
                None => mapped.decode().map(|m| f(&m)),
            },
        }
    }

    /// Whether a record has `id`, decoding nothing.
    pub(crate) fn contains(&self, id: u64) -> bool {
        self.place(id).is_some_and(|(c, j)| {
            self.chunks
                .get(c)
                .and_then(|chunk| chunk.get(j))
                .is_some_and(Option::is_some)
        })
    }

    /// The record with `id`, to change: copied first if a snapshot shares it.
    pub(crate) fn get_mut(&mut self, id: u64) -> Option<&mut Memory> {
        let slot = self.slot_mut(id)?;
        slot.as_mut()?.decode().map(Arc::make_mut)
    }

    /// Takes the record with `id` out.
    pub(crate) fn take(&mut self, id: u64) -> Option<Arc<Memory>> {
        let slot = self.slot_mut(id)?;
        let m = Arc::clone(slot.as_mut()?.decode()?);
        *slot = None;
        Some(m)
    }

    /// The slot of a present record, its chunk copied first if a snapshot shares it. `None`,
    /// copying nothing, when there is no record.
    fn slot_mut(&mut self, id: u64) -> Option<&mut Option<Slot>> {
        let (c, j) = self.place(id)?;
        let chunk = self.chunks.get_mut(c)?;
        chunk.get(j)?.as_ref()?;
        Arc::make_mut(chunk).get_mut(j)
    }

    /// Puts `m` at its id, already shared. Returns whether the slot was empty.
    pub(crate) fn put(&mut self, m: Arc<Memory>) -> bool {
        let id = m.id.0;
        self.put_slot(id, Slot::Decoded(m))
    }

    /// Puts `m`, which a checkpoint being loaded holds at `at` in `bytes`, as its place
    /// there, to be decoded when first read (`m` itself is dropped). An encoding longer than
    /// 4 GiB, which no checkpoint writes (a record's fields are bounded far below that), is
    /// kept decoded instead. Returns whether the slot was empty.
    pub(crate) fn put_mapped(
        &mut self,
        m: Memory,
        bytes: SealedBytes,
        at: std::ops::Range<usize>,
    ) -> bool {
        let id = m.id.0;
        let slot = match u32::try_from(at.len()) {
            Ok(len) => Slot::Mapped(Mapped {
                bytes,
                at: at.start,
                len,
                decoded: OnceLock::new(),
            }),
            Err(_) => Slot::Decoded(Arc::new(m)),
        };
        self.put_slot(id, slot)
    }

    fn put_slot(&mut self, id: u64, value: Slot) -> bool {
        self.partition
            .get_or_insert(id >> crate::kernel::cluster::PARTITION_SHIFT);
        let Some((c, j)) = self.place(id) else {
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
        *slot = Some(value);
        was_empty
    }

    /// Present records in id order as a checkpoint writes them (`Slot::to_write`): a mapped
    /// one is copied, not decoded.
    pub(crate) fn to_write(&self) -> impl Iterator<Item = Record<'_>> + '_ {
        self.chunks
            .iter()
            .flat_map(|chunk| chunk.iter().flatten().map(Slot::to_write))
    }

    /// The record with `id` as `to_write` gives it.
    pub(crate) fn one_to_write(&self, id: u64) -> Option<Record<'_>> {
        let (c, j) = self.place(id)?;
        self.chunks.get(c)?.get(j)?.as_ref().map(Slot::to_write)
    }

    /// Decodes every record still mapped in `file` into its once-cell (shared with every
    /// clone of a chunk not copied since), changing no slot.
    pub(crate) fn decode_mapped_in(&self, file: &SealedBytes) {
        for chunk in 0..self.chunks.len() {
            self.decode_mapped_chunk(std::slice::from_ref(file), chunk);
        }
    }

    /// As `decode_mapped_in`, for the records of chunk `chunk` mapped in one of `files`.
    /// Returns whether there was such a chunk.
    pub(crate) fn decode_mapped_chunk(&self, files: &[SealedBytes], chunk: usize) -> bool {
        let Some(slots) = self.chunks.get(chunk) else {
            return false;
        };
        for slot in slots.iter().flatten() {
            if let Slot::Mapped(mapped) = slot
                && files.iter().any(|f| mapped.bytes.same(f))
            {
                mapped.record();
            }
        }
        true
    }

    /// Decodes every record mapped in `file` into its slot for good, so that no slot holds
    /// that file's map any more. Records already read cost a reference each; the others are
    /// decoded here. A chunk with no such slot is not copied. Returns how many there were;
    /// one whose bytes no longer decode stays mapped (`Mapped::record`).
    pub(crate) fn materialize_in(&mut self, file: &SealedBytes) -> usize {
        let in_file = |slot: &Slot| matches!(slot, Slot::Mapped(m) if m.bytes.same(file));
        let mut decoded = 0;
        for chunk in &mut self.chunks {
            if !chunk.iter().flatten().any(in_file) {
                continue;
            }
            for slot in Arc::make_mut(chunk).iter_mut().flatten() {
                if in_file(slot) && slot.decode().is_some() {
                    decoded += 1;
                }
            }
        }
        decoded
    }

    /// Makes room for ids up to `max_id`.
    pub(crate) fn reserve(&mut self, max_id: u64) {
        let want = self.place(max_id).map_or(0, |(c, _)| c + 1);
        self.chunks.reserve(want.saturating_sub(self.chunks.len()));
    }

    /// Present records in id order (a mapped one decoded into its once-cell as it is met).
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Memory> + '_ {
        self.chunks.iter().flat_map(|chunk| {
            chunk
                .iter()
                .filter_map(|s| s.as_ref()?.record().map(|m| &**m))
        })
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

    /// Records encoded one after the other in one file, with where each is.
    fn file_of(records: &[Memory]) -> (SealedBytes, Vec<std::ops::Range<usize>>) {
        let mut buf = Vec::new();
        let mut offsets = Vec::new();
        for m in records {
            let start = buf.len();
            record::encode(m, &mut crate::kernel::codec::Encoder::new(&mut buf));
            offsets.push(start..buf.len());
        }
        (SealedBytes::copy_from(&buf), offsets)
    }

    #[test]
    fn mapped_records_read_change_and_leave_like_decoded_ones() {
        let records: Vec<Memory> = [1, 2, 3, 1500]
            .map(|id| *record(id, &format!("m{id}")))
            .into();
        let (file, offsets) = file_of(&records);
        let mut slots = Slots::default();
        for (m, at) in records.iter().zip(&offsets) {
            assert!(slots.put_mapped(m.clone(), file.clone(), at.clone()));
        }
        let snapshot = slots.clone();
        assert_eq!(slots.with(3, |m| m.content.clone()).as_deref(), Some("m3"));
        assert_eq!(slots.get(2), Some(&records[1]), "decoded at its first read");
        slots.get_mut(1).expect("present").content = "changed".into();
        assert_eq!(slots.take(3).as_deref(), Some(&records[2]));
        assert!(slots.put(record(7000, "new").into()));
        // A checkpoint copies what is still mapped, and encodes the rest.
        let written: Vec<bool> = slots
            .to_write()
            .map(|r| matches!(r, Record::Encoded(_)))
            .collect();
        assert_eq!(
            written,
            [false, true, true, false],
            "2 and 1500 are still mapped"
        );
        match slots.one_to_write(1500) {
            Some(Record::Encoded(b)) => assert_eq!(b, &file.as_slice()[offsets[3].clone()]),
            other => panic!("{other:?}"),
        }
        let now: Vec<&str> = slots.iter().map(|m| m.content.as_str()).collect();
        assert_eq!(now, ["changed", "m2", "m1500", "new"]);
        let seen: Vec<&Memory> = snapshot.iter().collect();
        assert_eq!(
            seen,
            records.iter().collect::<Vec<_>>(),
            "the snapshot as it was"
        );

        // Another file's records stay as they are.
        let (other, _) = file_of(&records);
        slots.decode_mapped_in(&other);
        assert_eq!(slots.materialize_in(&other), 0);
        // Materializing decodes the rest for good: no slot refers to the file any more.
        snapshot.decode_mapped_in(&file);
        assert_eq!(
            slots.materialize_in(&file),
            2,
            "2 and 1500 were still mapped"
        );
        assert_eq!(slots.materialize_in(&file), 0);
        let now: Vec<&str> = slots.iter().map(|m| m.content.as_str()).collect();
        assert_eq!(now, ["changed", "m2", "m1500", "new"]);
    }

    #[test]
    fn a_mapped_record_that_no_longer_decodes_reads_as_absent_without_a_panic() {
        let records = [*record(1, "kept"), *record(2, "damaged")];
        let (file, offsets) = file_of(&records);
        // The second record cut short: what a change under the map would leave.
        let cut = SealedBytes::copy_from(&file.as_slice()[..offsets[1].start + 5]);
        let mut slots = Slots::default();
        slots.put_mapped(records[0].clone(), cut.clone(), offsets[0].clone());
        slots.put_mapped(records[1].clone(), cut.clone(), offsets[1].clone());
        assert_eq!(slots.get(1).map(|m| m.content.as_str()), Some("kept"));
        assert!(slots.get(2).is_none());
        assert!(slots.get_mut(2).is_none() && slots.take(2).is_none());
        assert_eq!(slots.iter().count(), 1);
        assert_eq!(
            slots.materialize_in(&cut),
            1,
            "the damaged slot stays mapped"
        );
        assert!(slots.get(2).is_none());
    }
}
