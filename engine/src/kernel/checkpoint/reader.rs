//! Decodes a checkpoint, checking everything in the order of `docs/format/checkpoint.md`.

#![deny(clippy::unwrap_used, clippy::indexing_slicing)]

use super::format::{
    BODY_SEED, CLUSTER_VERSION, DELTA_VERSION, Delta, FLAG_DELTA, FLAG_LOG_CRC, HEADER_SEED,
    LEGACY_HEADER_LEN, LOG_CRC_VERSION, MAGIC, MIN_RECORD_BYTES, OWNER_VERSION, REQUEST_VERSION,
    SUPPORTED, header_len, segment_entry_len,
};
use crate::kernel::codec::{DecodeError, Decoder};
use crate::kernel::log::Op;
use crate::kernel::log::format::{
    TYPE_CANONICAL_TAG, TYPE_CLAIM, TYPE_ENTITY, TYPE_MODEL, TYPE_REEMBED, TYPE_REQUEST, TYPE_SKIP,
    TYPE_SNAPSHOT, TYPE_STORE_ARCHIVED, decode_payload,
};
use crate::kernel::record::{self, Memory};
use crate::kernel::segment_file::{SegmentEntry, SegmentKind};

/// A decoded checkpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    /// Last log sequence number included.
    pub seq: u64,
    /// Next id the store assigns.
    pub next_id: u64,
    /// Sealed segments, in key order.
    pub segments: Vec<SegmentEntry>,
    /// The archive, canonical tags and snapshots, as operations.
    pub aux: Vec<Op>,
    /// A delta's base and deletions (v8); `None` for a full checkpoint.
    pub delta: Option<Delta>,
    /// Live records, in id order (a delta's: those changed or created since its base).
    pub records: Vec<Memory>,
}

/// Why a checkpoint was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckpointError {
    /// Damaged: where and why.
    Corrupted(DecodeError),
    /// A version this build cannot read.
    Unsupported(u16),
}

fn crc(seed: u32, b: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new_with_initial(seed);
    h.update(b);
    h.finalize()
}

/// A checkpoint's header and segment list, checked; its records are decoded separately so
/// that opening can verify segments while it decodes them.
#[derive(Debug, Clone, PartialEq)]
pub struct Head {
    /// Last log sequence number included.
    pub seq: u64,
    /// Next id the store assigns.
    pub next_id: u64,
    /// Sealed segments, in key order.
    pub segments: Vec<SegmentEntry>,
    /// The archive, canonical tags and snapshots, as operations (v2).
    pub aux: Vec<Op>,
    /// A delta's base and deletions (v8); `None` for a full checkpoint.
    pub delta: Option<Delta>,
    /// The store the file names (`Owner::NONE` before v10).
    pub owner: amberdb_index::Owner,
    /// The log's running CRC through `seq` (v14; `None` when the file does not hold it).
    pub log_crc: Option<u32>,
    record_count: u64,
    records_at: usize,
}

impl Head {
    /// The records it holds (a delta's: those changed or created since its base).
    #[must_use]
    pub fn record_count(&self) -> u64 {
        self.record_count
    }
}

/// Checks everything but the records (they are covered by the body checksum already checked
/// here) and decodes the segment list.
///
/// # Errors
/// `CheckpointError`; never panics on any input.
pub fn decode_head(b: &[u8]) -> Result<Head, CheckpointError> {
    let corrupt = |offset, reason| CheckpointError::Corrupted(DecodeError { offset, reason });
    let mut d = Decoder::new(b);
    let e = CheckpointError::Corrupted;
    if b.len() < LEGACY_HEADER_LEN {
        return Err(corrupt(0, "shorter than the header"));
    }
    if d.take(4).map_err(e)? != MAGIC {
        return Err(corrupt(0, "bad magic"));
    }
    let version = d.u16().map_err(e)?;
    let flags = d.u16().map_err(e)?;
    let seq = d.u64().map_err(e)?;
    let next_id = d.u64().map_err(e)?;
    let record_count = d.u64().map_err(e)?;
    let segment_count = d.u64().map_err(e)?;
    let body_len = d.u64().map_err(e)?;
    let body_crc = d.u32().map_err(e)?;
    let aux_count = d.u64().map_err(e)?;
    let hdr_crc = d.u32().map_err(e)?;
    if crc(HEADER_SEED, b.get(..60).unwrap_or(&[])) != hdr_crc {
        return Err(corrupt(60, "header checksum mismatch"));
    }
    if !SUPPORTED.contains(&version) {
        return Err(CheckpointError::Unsupported(version));
    }
    let known_flags = match version {
        v if v >= LOG_CRC_VERSION => FLAG_DELTA | FLAG_LOG_CRC,
        v if v >= DELTA_VERSION => FLAG_DELTA,
        _ => 0,
    };
    if flags & !known_flags != 0 || (version == 1 && aux_count != 0) {
        return Err(corrupt(6, "unknown flags or reserved bytes set"));
    }
    let is_delta = flags & FLAG_DELTA != 0;
    let header_len = header_len(version);
    let (owner, log_crc) = owner_of_header(b, version, flags & FLAG_LOG_CRC != 0)?;
    let body = b.get(header_len..).unwrap_or(&[]);
    if body_len != body.len() as u64 {
        return Err(corrupt(40, "body length differs from the file"));
    }
    if crc(BODY_SEED, body) != body_crc {
        return Err(corrupt(48, "body checksum mismatch"));
    }
    // Each aux entry takes at least its type and length.
    let needed = segment_count
        .checked_mul(segment_entry_len(version))
        .and_then(|s| {
            record_count
                .checked_mul(MIN_RECORD_BYTES)
                .and_then(|r| r.checked_add(s))
                .and_then(|n| n.checked_add(aux_count.checked_mul(5)?))
        });
    if needed.is_none_or(|n| n > body_len) {
        return Err(corrupt(24, "counts exceed the body"));
    }
    // The decoder runs over the whole file from the body on, so its positions are the file's.
    let mut d = Decoder::new(b);
    d.take(header_len).map_err(at_file)?;
    let at = at_file;
    let mut delta = None;
    if is_delta {
        let base_seq = d.u64().map_err(at)?;
        let deleted_count = d.u64().map_err(at)?;
        let fits = deleted_count
            .checked_mul(8)
            .zip(needed)
            .and_then(|(ids, n)| ids.checked_add(n)?.checked_add(16));
        if fits.is_none_or(|n| n > body_len) {
            return Err(corrupt(header_len + 8, "deleted ids exceed the body"));
        }
        if base_seq >= seq {
            return Err(corrupt(header_len, "a delta's base is not older than it"));
        }
        delta = Some((base_seq, deleted_count));
    }
    let segments = decode_segments(&mut d, version, segment_count)?;
    let aux = decode_aux(&mut d, version, aux_count)?;
    let delta = match delta {
        None => None,
        Some((base_seq, count)) => Some(Delta {
            base_seq,
            deleted: decode_deleted(&mut d, count, next_id)?,
        }),
    };
    Ok(Head {
        seq,
        next_id,
        segments,
        aux,
        delta,
        owner,
        log_crc,
        record_count,
        records_at: d.pos(),
    })
}

/// The owner a v10 header names, its checksum checked (`Owner::NONE` before v10), and the log's
/// running CRC a v14 header holds when `has_log_crc` (its flag) says so.
fn owner_of_header(
    b: &[u8],
    version: u16,
    has_log_crc: bool,
) -> Result<(amberdb_index::Owner, Option<u32>), CheckpointError> {
    let corrupt = |offset, reason| CheckpointError::Corrupted(DecodeError { offset, reason });
    if version < OWNER_VERSION {
        return Ok((amberdb_index::Owner::NONE, None));
    }
    let ext = b
        .get(LEGACY_HEADER_LEN..header_len(version))
        .ok_or(corrupt(LEGACY_HEADER_LEN, "shorter than the header"))?;
    let stored = ext
        .get(28..32)
        .and_then(|s| s.try_into().ok())
        .map(u32::from_le_bytes);
    if stored != Some(crc(HEADER_SEED, ext.get(..28).unwrap_or(&[]))) {
        return Err(corrupt(92, "owner checksum mismatch"));
    }
    let field = ext
        .get(24..28)
        .and_then(|s| s.try_into().ok())
        .map(u32::from_le_bytes);
    let log_crc = match field {
        Some(crc) if has_log_crc => Some(crc),
        Some(0) => None,
        _ => return Err(corrupt(88, "reserved bytes set")),
    };
    let owner = ext
        .get(..24)
        .and_then(|o| o.try_into().ok())
        .map_or(amberdb_index::Owner::NONE, amberdb_index::Owner);
    Ok((owner, log_crc))
}

/// The owner a checkpoint file's header names, without reading its body (the store's census
/// of its files, `docs/durability.md`, "File identity"): `None` when the header does not read.
#[must_use]
pub fn header_owner(b: &[u8]) -> Option<amberdb_index::Owner> {
    let version = b
        .get(4..6)
        .and_then(|s| s.try_into().ok())
        .map(u16::from_le_bytes)?;
    let stored = b
        .get(60..64)
        .and_then(|s| s.try_into().ok())
        .map(u32::from_le_bytes);
    if b.get(..4) != Some(&MAGIC[..])
        || stored != Some(crc(HEADER_SEED, b.get(..60)?))
        || !SUPPORTED.contains(&version)
    {
        return None;
    }
    let flags = b
        .get(6..8)
        .and_then(|s| s.try_into().ok())
        .map(u16::from_le_bytes)?;
    let has_log_crc = version >= LOG_CRC_VERSION && flags & FLAG_LOG_CRC != 0;
    owner_of_header(b, version, has_log_crc)
        .ok()
        .map(|(o, _)| o)
}

/// A decoder's error: its offset is the file's already.
fn at_file(e: DecodeError) -> CheckpointError {
    CheckpointError::Corrupted(e)
}

/// The segment list: `count` entries (a kind and padding from version 5 on; flat before).
fn decode_segments(
    d: &mut Decoder<'_>,
    version: u16,
    count: u64,
) -> Result<Vec<SegmentEntry>, CheckpointError> {
    let at = at_file;
    let mut segments = Vec::with_capacity(usize::try_from(count).unwrap_or(0));
    for _ in 0..count {
        let (id, rows) = (d.u64().map_err(at)?, d.u64().map_err(at)?);
        let kind = if version >= 5 {
            let at_kind = d.pos();
            let kind = SegmentKind::from_code(d.u8().map_err(at)?);
            let pad = d.take(7).map_err(at)?;
            match kind {
                Some(kind) if pad.iter().all(|&b| b == 0) => kind,
                _ => {
                    return Err(at(DecodeError {
                        offset: at_kind,
                        reason: "unknown segment kind or padding set",
                    }));
                }
            }
        } else {
            SegmentKind::Flat
        };
        segments.push(SegmentEntry { id, rows, kind });
    }
    Ok(segments)
}

/// The aux section: `count` entries of the types a checkpoint holds.
fn decode_aux(d: &mut Decoder<'_>, version: u16, count: u64) -> Result<Vec<Op>, CheckpointError> {
    let at = at_file;
    let mut aux = Vec::with_capacity(usize::try_from(count).unwrap_or(0));
    for _ in 0..count {
        let t = d.u8().map_err(at)?;
        // Types written alone in a log, so not read as batch members.
        let model_types = [TYPE_MODEL, TYPE_REEMBED];
        let cluster_types = [TYPE_CLAIM, TYPE_SKIP];
        let held = [
            TYPE_STORE_ARCHIVED,
            TYPE_CANONICAL_TAG,
            TYPE_SNAPSHOT,
            TYPE_ENTITY,
        ]
        .contains(&t)
            || (version >= 6 && model_types.contains(&t))
            || (version >= REQUEST_VERSION && t == TYPE_REQUEST)
            || (version >= CLUSTER_VERSION && cluster_types.contains(&t));
        if !held {
            return Err(at(DecodeError {
                offset: d.pos(),
                reason: "aux entry of a type checkpoints do not hold",
            }));
        }
        let len = d.u32().map_err(at)? as usize;
        let start = d.pos();
        let mut member = Decoder::new(d.take(len).map_err(at)?);
        // Re-embedding frames may not stand in a batch; an aux entry is not one.
        let alone = model_types.contains(&t) || cluster_types.contains(&t);
        let op = decode_payload(t, &mut member, !alone).map_err(|e| {
            at(DecodeError {
                offset: start + e.offset,
                reason: e.reason,
            })
        })?;
        if member.remaining() != 0 {
            return Err(at(DecodeError {
                offset: d.pos(),
                reason: "trailing bytes in an aux entry",
            }));
        }
        aux.push(op);
    }
    Ok(aux)
}

/// A delta's deleted ids: `count` of them, increasing, each below `next_id`.
fn decode_deleted(
    d: &mut Decoder<'_>,
    count: u64,
    next_id: u64,
) -> Result<Vec<u64>, CheckpointError> {
    let at = at_file;
    let mut deleted = Vec::with_capacity(usize::try_from(count).unwrap_or(0));
    for _ in 0..count {
        let id = d.u64().map_err(at)?;
        if deleted.last().is_some_and(|&last| id <= last) || id >= next_id {
            return Err(at(DecodeError {
                offset: d.pos() - 8,
                reason: "deleted ids not increasing or not below next_id",
            }));
        }
        deleted.push(id);
    }
    Ok(deleted)
}

/// A decoded record and where its encoding starts: the offset in the checkpoint it was decoded
/// from, or in a delta's merge (`decode_merged_into`) in the delta (`in_delta`) or its base.
/// What an open keeps of a record instead of the record (`docs/architecture.md`, "Mapped
/// records").
#[derive(Debug, Clone, PartialEq)]
pub struct Located {
    /// The record.
    pub record: Memory,
    /// The offset of its first byte in the file.
    pub at: usize,
    /// The length of its encoding.
    pub len: usize,
    /// Whether the file is the delta of a merge rather than its base.
    pub in_delta: bool,
}

/// The records of a checkpoint whose head `decode_head` accepted, decoded one at a time as
/// they are asked for, in id order, each with its offset in `b`; after the last, the check
/// that no byte follows it. A decoding error is the last item.
pub fn records<'a>(b: &'a [u8], head: &'a Head) -> Records<'a> {
    Records {
        d: Decoder::new(b.get(head.records_at..).unwrap_or(&[])),
        head,
        left: head.record_count,
        last_id: 0,
        done: false,
    }
}

/// See `records`.
pub struct Records<'a> {
    d: Decoder<'a>,
    head: &'a Head,
    left: u64,
    last_id: u64,
    done: bool,
}

impl Records<'_> {
    fn corrupt(&mut self, reason: &'static str) -> Option<Result<Located, CheckpointError>> {
        self.done = true;
        Some(Err(CheckpointError::Corrupted(DecodeError {
            offset: self.head.records_at + self.d.pos(),
            reason,
        })))
    }
}

impl Iterator for Records<'_> {
    type Item = Result<Located, CheckpointError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let base = self.head.records_at;
        if self.left == 0 {
            if self.d.remaining() != 0 {
                return self.corrupt("trailing bytes");
            }
            self.done = true;
            return None;
        }
        let start = base + self.d.pos();
        let m = match record::decode(&mut self.d) {
            Ok(m) => m,
            Err(e) => {
                self.done = true;
                return Some(Err(CheckpointError::Corrupted(DecodeError {
                    offset: e.offset + base,
                    reason: e.reason,
                })));
            }
        };
        if m.id.0 <= self.last_id || m.id.0 >= self.head.next_id {
            return self.corrupt("record ids not increasing or not below next_id");
        }
        if let Some(delta) = &self.head.delta
            && delta.deleted.binary_search(&m.id.0).is_ok()
        {
            return self.corrupt("a record the delta also deletes");
        }
        self.last_id = m.id.0;
        self.left -= 1;
        Some(Ok(Located {
            record: m,
            at: start,
            len: base + self.d.pos() - start,
            in_delta: false,
        }))
    }
}

/// Decodes the records of a checkpoint whose head `decode_head` accepted, handing them to
/// `sink` in batches of up to `batch` records, in id order (so a consumer can index them while
/// the rest decode), each with its offset in `b`. Stops early, without error, if `sink`
/// returns false.
///
/// # Errors
/// `CheckpointError`; never panics on any input.
pub fn decode_records_into(
    b: &[u8],
    head: &Head,
    batch: usize,
    mut sink: impl FnMut(Vec<Located>) -> bool,
) -> Result<(), CheckpointError> {
    let batch = batch.max(1);
    let mut out = Vec::with_capacity(batch);
    for l in records(b, head) {
        out.push(l?);
        if out.len() == batch && !sink(std::mem::replace(&mut out, Vec::with_capacity(batch))) {
            return Ok(());
        }
    }
    if !out.is_empty() {
        sink(out);
    }
    Ok(())
}

/// Decodes a whole checkpoint.
///
/// # Errors
/// `CheckpointError`; never panics on any input.
pub fn decode(b: &[u8]) -> Result<Checkpoint, CheckpointError> {
    let head = decode_head(b)?;
    let mut records = Vec::new();
    decode_records_into(b, &head, 4096, |batch| {
        records.extend(batch.into_iter().map(|l| l.record));
        true
    })?;
    Ok(Checkpoint {
        seq: head.seq,
        next_id: head.next_id,
        segments: head.segments,
        aux: head.aux,
        delta: head.delta,
        records,
    })
}

/// Checks `b` as `decode` does, keeping no record, and returns its head: what reading a
/// checkpoint back costs when only its soundness matters (a purge's P5, `durability.md`;
/// `amberdb check` on every checkpoint but the newest). At 1M records `decode` would hold
/// them all, ~0.5 GB, for nothing.
///
/// # Errors
/// As `decode`.
pub fn verify(b: &[u8]) -> Result<Head, CheckpointError> {
    let head = decode_head(b)?;
    decode_records_into(b, &head, 4096, |batch| {
        drop(batch);
        true
    })?;
    Ok(head)
}

/// Whether `base` is the full checkpoint `delta` (of a checkpoint whose next id is
/// `delta_next_id`) applies to: full, at the delta's `base_seq`, with no id past
/// `delta_next_id`.
///
/// # Errors
/// `Corrupted`, naming what does not fit (offsets are the base's).
pub fn check_base(delta: &Delta, delta_next_id: u64, base: &Head) -> Result<(), CheckpointError> {
    let corrupt = |offset, reason| CheckpointError::Corrupted(DecodeError { offset, reason });
    if base.delta.is_some() {
        return Err(corrupt(6, "a delta's base is itself a delta"));
    }
    if base.seq != delta.base_seq {
        return Err(corrupt(8, "the base is at another sequence number"));
    }
    if base.next_id > delta_next_id {
        return Err(corrupt(16, "the base's next_id is past the delta's"));
    }
    Ok(())
}

/// Which file of a delta's merge a decoding error is in.
#[derive(Debug)]
pub enum MergeError {
    /// The base's records.
    Base(CheckpointError),
    /// The delta's records.
    Delta(CheckpointError),
}

/// The live records of a delta applied to its base, in id order: the base's records streamed
/// (`base_bytes`, `base`, as `decode_records_into` does), the delta's `deleted` ids dropped,
/// and its `changed` records (in id order, as `records` decodes the delta, one at a time as
/// the merge reaches them; marked `in_delta` here) put in place of or beside them. The caller
/// checked the pair with `check_base`. At most one changed record is held at a time: a delta
/// at an eighth of 1M records held whole was ~40 MB of memory at the open's peak.
///
/// # Errors
/// `MergeError`, naming the file whose records do not decode; never panics on any input.
pub fn decode_merged_into(
    base_bytes: &[u8],
    base: &Head,
    deleted: &[u64],
    changed: impl Iterator<Item = Result<Located, CheckpointError>>,
    batch: usize,
    mut sink: impl FnMut(Vec<Located>) -> bool,
) -> Result<(), MergeError> {
    let failed = std::cell::RefCell::new(None);
    // The changed records, ending at the first that does not decode (kept in `failed`).
    let mut changed = changed
        .map_while(|l| match l {
            Ok(l) => Some(Located {
                in_delta: true,
                ..l
            }),
            Err(e) => {
                *failed.borrow_mut() = Some(e);
                None
            }
        })
        .fuse()
        .peekable();
    let mut deleted = deleted.iter().copied().peekable();
    let mut open = true;
    let merged = decode_records_into(base_bytes, base, batch, |records| {
        // Most batches hold no change (changes gather at recent ids): handed on as they are.
        let last = records.last().map_or(0, |l| l.record.id.0);
        if changed.peek().is_none_or(|c| c.record.id.0 > last)
            && deleted.peek().is_none_or(|&d| d > last)
        {
            open = failed.borrow().is_none() && sink(records);
            return open;
        }
        let mut out = Vec::with_capacity(records.len());
        for l in records {
            let id = l.record.id;
            while let Some(c) = changed.next_if(|c| c.record.id < id) {
                out.push(c);
            }
            while deleted.next_if(|&d| d < id.0).is_some() {}
            if let Some(c) = changed.next_if(|c| c.record.id == id) {
                out.push(c);
            } else if deleted.next_if(|&d| d == id.0).is_none() {
                out.push(l);
            }
        }
        open = failed.borrow().is_none() && sink(out);
        open
    });
    // A base that does not decode ends the merge; the delta's rest is not decoded for it.
    merged.map_err(MergeError::Base)?;
    let batch = batch.max(1);
    let mut rest = Vec::with_capacity(batch);
    while open && let Some(c) = changed.next() {
        rest.push(c);
        if rest.len() == batch {
            open = sink(std::mem::replace(&mut rest, Vec::with_capacity(batch)));
        }
    }
    drop(changed);
    if let Some(e) = failed.into_inner() {
        return Err(MergeError::Delta(e));
    }
    if open && !rest.is_empty() {
        sink(rest);
    }
    Ok(())
}
