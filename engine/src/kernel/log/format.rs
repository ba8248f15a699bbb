//! Byte layout of the log. The tables are `docs/format/log.md`; keep them equal.
//!
//! ```text
//! file header (v9: 64 bytes; v1–v8: 32 bytes, `hdr_crc` at 28 over bytes 0..28)
//! off size field       meaning
//!   0    4 magic       b"MNWL"
//!   4    2 version     u16 LE; readers accept SUPPORTED
//!   6    2 flags       u16 LE; must be 0
//!   8    8 first_seq   u64 LE
//!  16   24 owner       v9: store id (16) and incarnation (u64 LE): `identity::owner_of`
//!  40   20 reserved    zero
//!  60    4 hdr_crc     crc32 seeded HEADER_SEED over bytes 0..60
//!
//! frame
//! off size field   meaning
//!   0    4 len     u32 LE = 1 + 8 + payload; MIN_FRAME_LEN..=MAX_FRAME_LEN
//!   4    4 crc     crc32 seeded FRAME_CRC_SEED over bytes 0..4 then 8..8+len
//!   8    1 type    TYPE_STORE ..= TYPE_SKIP
//!   9    8 seq     u64 LE
//!  17    * payload
//! ```

#![deny(clippy::unwrap_used, clippy::indexing_slicing)]

use crate::kernel::cluster::{self, Claim, Skip};
use crate::kernel::codec::{DecodeError, Decoder, Encoder};
use crate::kernel::record::{
    self, Entity, EntityKind, MAX_TAG_CHARS, MAX_TAGS, Memory, MemoryId, TagSnapshot, Timestamp,
};
use crate::kernel::request::{MAX_KEPT_REPLY, RequestId, RequestRecord};
use amberdb_index::Owner;
use std::ops::RangeInclusive;

/// File magic.
pub const MAGIC: [u8; 4] = *b"MNWL";
/// Version this build writes.
pub const VERSION: u16 = 12;
/// Versions this build reads (v1 files hold only store and delete frames, v2 no entities, v4
/// no forgotten archive, v5 no re-embedding, v6 no items, v7 no tool role, v8 no owner, v9 no
/// record source ids, v10 no request ids, v11 no claims and skips).
pub const SUPPORTED: RangeInclusive<u16> = 1..=VERSION;
/// The first version whose header names its store.
pub const OWNER_VERSION: u16 = 9;
/// File header length this build writes.
pub const HEADER_LEN: usize = 64;
/// File header length of v1–v8.
pub const LEGACY_HEADER_LEN: usize = 32;

/// The header length of a file of `version`.
#[must_use]
pub fn header_len(version: u16) -> usize {
    if version >= OWNER_VERSION {
        HEADER_LEN
    } else {
        LEGACY_HEADER_LEN
    }
}
/// CRC seed of the file header.
pub const HEADER_SEED: u32 = 0x574c_4f47;
/// CRC seed of every frame ("mnem").
pub const FRAME_CRC_SEED: u32 = 0x6d6e_656d;
/// Bytes before `type`: len and crc.
pub const FRAME_PREFIX: usize = 8;
/// Smallest `len`: type + seq.
pub const MIN_FRAME_LEN: u32 = 9;
/// Largest `len`: 16 MiB, far above the largest record (40 KB of content, 16 KB of vector).
pub const MAX_FRAME_LEN: u32 = 16 << 20;
/// Frame type: store a memory.
pub const TYPE_STORE: u8 = 1;
/// Frame type: delete a memory.
pub const TYPE_DELETE: u8 = 2;
/// Frame type (v2): replace a live record's fields (same id, same content, same vector).
pub const TYPE_UPDATE: u8 = 3;
/// Frame type (v2): count an access of some memories.
pub const TYPE_TOUCH: u8 = 4;
/// Frame type (v2): replace one memory's tags.
pub const TYPE_SET_TAGS: u8 = 5;
/// Frame type (v2): move a live memory, with its vector, to the archive (lineage).
pub const TYPE_ARCHIVE: u8 = 6;
/// Frame type (v2): put a record and its vector straight into the archive.
pub const TYPE_STORE_ARCHIVED: u8 = 7;
/// Frame type (v2): register a canonical tag of a user, with its embedding.
pub const TYPE_CANONICAL_TAG: u8 = 8;
/// Frame type (v2): a tag snapshot.
pub const TYPE_SNAPSHOT: u8 = 9;
/// Frame type (v2): several of the above, applied as one commit.
pub const TYPE_BATCH: u8 = 10;
/// Frame type (v3): create or replace a user, agent or session.
pub const TYPE_ENTITY: u8 = 11;
/// Frame type (v3): delete a user, agent or session and every record that belongs to it.
pub const TYPE_DELETE_ENTITY: u8 = 12;
/// Frame type (v5): archived records removed for good (archive retention).
pub const TYPE_FORGET_ARCHIVED: u8 = 13;
/// Frame type (v6): vectors of another embedder, staged, and with `switch` the change of
/// model (`docs/durability.md`, "Re-embedding").
pub const TYPE_REEMBED: u8 = 14;
/// Frame type (v6): the model a checkpoint's vectors belong to (checkpoint aux only).
pub const TYPE_MODEL: u8 = 15;
/// Frame type (v11): a request id's mark (in its write's frame) or its kept reply.
pub const TYPE_REQUEST: u8 = 16;
/// Frame type (v12): a node takes a replicated partition (`kernel::cluster`).
pub const TYPE_CLAIM: u8 = 17;
/// Frame type (v12): a stream position whose message did not count (`kernel::cluster`).
pub const TYPE_SKIP: u8 = 18;
/// Most ids in one `ForgetArchived` frame.
pub const MAX_FORGET_IDS: usize = 8_192;
/// Most operations in one batch.
pub const MAX_BATCH_OPS: usize = 1 << 20;

/// One operation, as logged.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// A new memory and its vector.
    Store {
        /// The record.
        record: Box<Memory>,
        /// Its embedding.
        vector: Vec<f32>,
    },
    /// A deletion.
    Delete {
        /// The deleted id.
        id: MemoryId,
    },
    /// New field values for a live record; its id and content (so its vector) are unchanged.
    Update {
        /// The record as it is after the update.
        record: Box<Memory>,
    },
    /// Reads that count as an access: `access_count += 1`, `last_accessed_at = at`.
    Touch {
        /// When.
        at: Timestamp,
        /// The memories read (each live).
        ids: Vec<MemoryId>,
    },
    /// New tags for one live memory; `updated_at = at`.
    SetTags {
        /// The memory.
        id: MemoryId,
        /// Its tags from now on.
        tags: Vec<String>,
        /// When.
        at: Timestamp,
    },
    /// A live memory leaves the live set (search, lists, counts) and is kept, with its
    /// vector, in the archive, where lineage (`supersedes`) can still reach it.
    Archive {
        /// The memory.
        id: MemoryId,
    },
    /// A record that goes straight to the archive (the new memory of a store-time merge).
    StoreArchived {
        /// The record.
        record: Box<Memory>,
        /// Its embedding.
        vector: Vec<f32>,
    },
    /// A canonical tag of a user and the embedding normalization compares with.
    CanonicalTag {
        /// The user.
        user_id: String,
        /// The tag.
        tag: String,
        /// Its embedding (embedding form, `docs/semantics.md`).
        vector: Vec<f32>,
    },
    /// A snapshot of every tag of a user's memories.
    Snapshot(Box<TagSnapshot>),
    /// Operations applied together: the frame is the one commit point of all of them.
    Batch(Vec<Op>),
    /// A user, agent or session, created or replaced.
    Entity(Box<Entity>),
    /// A user, agent or session leaves, with everything that belongs to it
    /// (`docs/search.md`, "Deleting"): live and archived records, and for a user its
    /// canonical tags, snapshots, agents and sessions.
    DeleteEntity {
        /// User, agent or session.
        kind: EntityKind,
        /// The owner.
        user_id: String,
        /// The entity.
        id: String,
    },
    /// Archived records leave the archive for good (archive retention, `docs/semantics.md`).
    ForgetArchived {
        /// The archived ids, at most `MAX_FORGET_IDS`.
        ids: Vec<MemoryId>,
    },
    /// Vectors of another embedder, and with `switch` the change to it.
    Reembed(Box<Reembed>),
    /// The embedder a state's vectors belong to when it is not the one `IDENTITY` names
    /// (checkpoint aux, first).
    Model {
        /// The embedder's model id.
        model_id: String,
        /// Its dimension.
        dim: u32,
    },
    /// A request id's mark, or the reply kept for it (`kernel::request`).
    Request(Box<RequestRecord>),
    /// A node takes the replicated partition from here on (`kernel::cluster`); written alone.
    Claim(Box<Claim>),
    /// A stream message that did not count, at its position (`kernel::cluster`); written
    /// alone.
    Skip(Box<Skip>),
}

/// Re-embedding work (`docs/durability.md`, "Re-embedding"): new vectors for records (live or
/// archived) and canonical tags, staged until a frame with `switch` makes them the store's.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Reembed {
    /// The embedder the vectors come from.
    pub model_id: String,
    /// Its dimension; every vector has it.
    pub dim: u32,
    /// Records and their new vectors.
    pub records: Vec<(MemoryId, Vec<f32>)>,
    /// Canonical tags (user, tag) and their new vectors.
    pub tags: Vec<(String, String, Vec<f32>)>,
    /// Whether this frame switches the store to `model_id`: every record and canonical tag
    /// has a staged vector once its entries are added.
    pub switch: bool,
}

impl Op {
    /// The largest memory id this operation creates, if any (the store's `next_id` follows it).
    #[must_use]
    pub fn max_new_id(&self) -> Option<u64> {
        match self {
            Op::Store { record, .. } | Op::StoreArchived { record, .. } => Some(record.id.0),
            Op::Batch(ops) => ops.iter().filter_map(Op::max_new_id).max(),
            _ => None,
        }
    }

    /// Whether it deletes records (what a purge then removes from the files,
    /// `docs/durability.md`, "Purge").
    #[must_use]
    pub fn deletes_records(&self) -> bool {
        match self {
            Op::Delete { .. } | Op::DeleteEntity { .. } | Op::ForgetArchived { .. } => true,
            Op::Batch(ops) => ops.iter().any(Op::deletes_records),
            _ => false,
        }
    }
}

fn crc(seed: u32, parts: &[&[u8]]) -> u32 {
    let mut h = crc32fast::Hasher::new_with_initial(seed);
    for p in parts {
        h.update(p);
    }
    h.finalize()
}

/// The header of a log file of the store `owner` names, starting at `first_seq`.
#[must_use]
pub fn encode_header(first_seq: u64, owner: Owner) -> Vec<u8> {
    let mut b = Vec::with_capacity(HEADER_LEN);
    b.extend_from_slice(&MAGIC);
    b.extend_from_slice(&VERSION.to_le_bytes());
    b.extend_from_slice(&0u16.to_le_bytes());
    b.extend_from_slice(&first_seq.to_le_bytes());
    b.extend_from_slice(&owner.0);
    b.extend_from_slice(&[0; 20]);
    let c = crc(HEADER_SEED, &[&b]);
    b.extend_from_slice(&c.to_le_bytes());
    b
}

/// A log file's header, checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The sequence number of its first frame.
    pub first_seq: u64,
    /// The store it names (`Owner::NONE` before v9).
    pub owner: Owner,
    /// Its length: where the first frame starts.
    pub len: usize,
}

/// Why a header was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderError {
    /// Damaged or short.
    Corrupted(&'static str),
    /// A version this build cannot read.
    Unsupported(u16),
}

/// Decodes a file header.
///
/// # Errors
/// `HeaderError` in the order magic, version (which says the header's length), length,
/// checksum, flags, first_seq.
pub fn decode_header(b: &[u8]) -> Result<Header, HeaderError> {
    if b.get(..4) != Some(&MAGIC[..]) {
        return Err(HeaderError::Corrupted(if b.len() < LEGACY_HEADER_LEN {
            "shorter than the header"
        } else {
            "bad magic"
        }));
    }
    let version = b
        .get(4..6)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u16::from_le_bytes);
    // The version says the header's length, so its checksum's place. One this build does not
    // know is refused as unsupported when either known length's checksum holds (a newer
    // build's file), as damaged otherwise.
    let crc_holds = |len: usize| {
        let stored = b
            .get(len.saturating_sub(4)..len)
            .and_then(|s| s.try_into().ok())
            .map(u32::from_le_bytes);
        stored.is_some() && stored == b.get(..len - 4).map(|h| crc(HEADER_SEED, &[h]))
    };
    if !SUPPORTED.contains(&version) {
        return Err(if crc_holds(LEGACY_HEADER_LEN) || crc_holds(HEADER_LEN) {
            HeaderError::Unsupported(version)
        } else {
            HeaderError::Corrupted("header checksum mismatch")
        });
    }
    let len = header_len(version);
    let h = b
        .get(..len)
        .ok_or(HeaderError::Corrupted("shorter than the header"))?;
    if !crc_holds(len) {
        return Err(HeaderError::Corrupted("header checksum mismatch"));
    }
    if h.get(6..8) != Some(&[0, 0][..]) {
        return Err(HeaderError::Corrupted("unknown flags"));
    }
    let first_seq = h
        .get(8..16)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u64::from_le_bytes);
    if first_seq == 0 {
        return Err(HeaderError::Corrupted("first sequence number is zero"));
    }
    let owner = h
        .get(16..40)
        .filter(|_| version >= OWNER_VERSION)
        .and_then(|o| o.try_into().ok())
        .map_or(Owner::NONE, Owner);
    if version >= OWNER_VERSION && h.get(40..60).is_none_or(|r| r.iter().any(|&x| x != 0)) {
        return Err(HeaderError::Corrupted("reserved bytes set"));
    }
    Ok(Header {
        first_seq,
        owner,
        len,
    })
}

/// Encodes `op` as a frame with sequence number `seq`.
#[must_use]
pub fn encode_frame(seq: u64, op: &Op) -> Vec<u8> {
    let mut b = vec![0u8; FRAME_PREFIX];
    let mut e = Encoder::new(&mut b);
    e.u8(op_type(op));
    e.u64(seq);
    encode_payload(op, &mut e);
    let len = u32::try_from(b.len() - FRAME_PREFIX).unwrap_or(u32::MAX);
    let c = crc(
        FRAME_CRC_SEED,
        &[&len.to_le_bytes(), b.get(FRAME_PREFIX..).unwrap_or(&[])],
    );
    if let Some(prefix) = b.get_mut(..FRAME_PREFIX) {
        prefix.copy_from_slice(&[len.to_le_bytes(), c.to_le_bytes()].concat());
    }
    b
}

/// The checksum a frame stores (bytes 4..8), read without checking it: what the running CRC
/// folds (`docs/cluster.md`, "Running CRC"). 0 for fewer than 8 bytes.
#[must_use]
pub fn stored_crc(frame: &[u8]) -> u32 {
    frame
        .get(4..8)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u32::from_le_bytes)
}

/// The log's running CRC after a frame whose stored checksum is `frame_crc`, from `running`,
/// the running CRC before it (an empty log's is 0): crc32 seeded with `running` over the
/// checksum's 4 bytes, little-endian (`docs/cluster.md`, "Running CRC").
#[must_use]
pub fn fold_running_crc(running: u32, frame_crc: u32) -> u32 {
    crc(running, &[&frame_crc.to_le_bytes()])
}

/// A frame whose length and checksum are valid (its payload is not decoded yet).
#[derive(Debug, Clone, Copy)]
pub struct RawFrame<'a> {
    /// The frame type.
    pub frame_type: u8,
    /// The sequence number.
    pub seq: u64,
    /// The payload.
    pub payload: &'a [u8],
    /// Total bytes of the frame, prefix included.
    pub total_len: usize,
}

/// Checks the frame at the start of `b`: length bounds, then checksum.
///
/// # Errors
/// Which check failed.
pub fn check_frame(b: &[u8]) -> Result<RawFrame<'_>, &'static str> {
    let len_bytes: [u8; 4] = b
        .get(..4)
        .and_then(|s| s.try_into().ok())
        .ok_or("truncated frame prefix")?;
    let len = u32::from_le_bytes(len_bytes);
    if !(MIN_FRAME_LEN..=MAX_FRAME_LEN).contains(&len) {
        return Err("frame length out of bounds");
    }
    let total = FRAME_PREFIX + len as usize;
    let body = b
        .get(FRAME_PREFIX..total)
        .ok_or("frame runs past the end of the file")?;
    let stored = stored_crc(b);
    if crc(FRAME_CRC_SEED, &[&len_bytes, body]) != stored {
        return Err("frame checksum mismatch");
    }
    let frame_type = *body.first().ok_or("empty frame")?;
    let seq = body
        .get(1..9)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u64::from_le_bytes);
    Ok(RawFrame {
        frame_type,
        seq,
        payload: body.get(9..).unwrap_or(&[]),
        total_len: total,
    })
}

/// The frame type of `op`.
#[must_use]
pub fn op_type(op: &Op) -> u8 {
    match op {
        Op::Store { .. } => TYPE_STORE,
        Op::Delete { .. } => TYPE_DELETE,
        Op::Update { .. } => TYPE_UPDATE,
        Op::Touch { .. } => TYPE_TOUCH,
        Op::SetTags { .. } => TYPE_SET_TAGS,
        Op::Archive { .. } => TYPE_ARCHIVE,
        Op::StoreArchived { .. } => TYPE_STORE_ARCHIVED,
        Op::CanonicalTag { .. } => TYPE_CANONICAL_TAG,
        Op::Snapshot(_) => TYPE_SNAPSHOT,
        Op::Batch(_) => TYPE_BATCH,
        Op::Entity(_) => TYPE_ENTITY,
        Op::DeleteEntity { .. } => TYPE_DELETE_ENTITY,
        Op::ForgetArchived { .. } => TYPE_FORGET_ARCHIVED,
        Op::Reembed(_) => TYPE_REEMBED,
        Op::Model { .. } => TYPE_MODEL,
        Op::Request(_) => TYPE_REQUEST,
        Op::Claim(_) => TYPE_CLAIM,
        Op::Skip(_) => TYPE_SKIP,
    }
}

fn encode_vector(v: &[f32], e: &mut Encoder<'_>) {
    e.u32(u32::try_from(v.len()).unwrap_or(u32::MAX));
    for x in v {
        e.f32(*x);
    }
}

fn encode_tags(tags: &[String], e: &mut Encoder<'_>) {
    e.u8(u8::try_from(tags.len()).unwrap_or(u8::MAX));
    for t in tags {
        e.str(t);
    }
}

/// Encodes `op`'s payload (everything after `type` and `seq`; a batch's members carry their
/// own type and length).
pub(crate) fn encode_payload(op: &Op, e: &mut Encoder<'_>) {
    match op {
        Op::Store { record, vector } | Op::StoreArchived { record, vector } => {
            record::encode(record, e);
            encode_vector(vector, e);
        }
        Op::Delete { id } | Op::Archive { id } => e.u64(id.0),
        Op::Update { record } => record::encode(record, e),
        Op::ForgetArchived { ids } => {
            e.u32(u32::try_from(ids.len()).unwrap_or(u32::MAX));
            for id in ids {
                e.u64(id.0);
            }
        }
        Op::Touch { at, ids } => {
            e.i64(at.0);
            e.u32(u32::try_from(ids.len()).unwrap_or(u32::MAX));
            for id in ids {
                e.u64(id.0);
            }
        }
        Op::SetTags { id, tags, at } => {
            e.u64(id.0);
            e.i64(at.0);
            encode_tags(tags, e);
        }
        Op::CanonicalTag {
            user_id,
            tag,
            vector,
        } => {
            e.str(user_id);
            e.str(tag);
            encode_vector(vector, e);
        }
        Op::Reembed(r) => {
            e.u8(u8::from(r.switch));
            e.str(&r.model_id);
            e.u32(r.dim);
            e.u32(u32::try_from(r.records.len()).unwrap_or(u32::MAX));
            for (id, v) in &r.records {
                e.u64(id.0);
                encode_vector(v, e);
            }
            e.u32(u32::try_from(r.tags.len()).unwrap_or(u32::MAX));
            for (user, tag, v) in &r.tags {
                e.str(user);
                e.str(tag);
                encode_vector(v, e);
            }
        }
        Op::Model { model_id, dim } => {
            e.str(model_id);
            e.u32(*dim);
        }
        Op::Request(r) => {
            e.bytes(&r.id.0);
            e.u64(r.fingerprint);
            e.i64(r.at.0);
            e.u64(r.seq);
            e.opt_str(r.reply.as_deref());
        }
        Op::Claim(c) => cluster::encode_claim(c, e),
        Op::Skip(x) => cluster::encode_skip(x, e),
        Op::Snapshot(s) => record::encode_snapshot(s, e),
        Op::Entity(x) => record::encode_entity(x, e),
        Op::DeleteEntity { kind, user_id, id } => record::encode_entity_key(*kind, user_id, id, e),
        Op::Batch(ops) => {
            e.u32(u32::try_from(ops.len()).unwrap_or(u32::MAX));
            for op in ops {
                let mut member = Vec::new();
                encode_payload(op, &mut Encoder::new(&mut member));
                e.u8(op_type(op));
                e.u32(u32::try_from(member.len()).unwrap_or(u32::MAX));
                e.bytes(&member);
            }
        }
    }
}

fn decode_vector(d: &mut Decoder<'_>) -> Result<Vec<f32>, DecodeError> {
    let dim = d.u32()? as usize;
    if dim > d.remaining() / 4 {
        return d.fail("vector length out of bounds");
    }
    let mut vector = Vec::with_capacity(dim);
    for _ in 0..dim {
        vector.push(d.f32()?);
    }
    Ok(vector)
}

fn decode_tags(d: &mut Decoder<'_>) -> Result<Vec<String>, DecodeError> {
    let n = usize::from(d.u8()?);
    if n > MAX_TAGS {
        return d.fail("too many tags");
    }
    let mut tags = Vec::with_capacity(n);
    for _ in 0..n {
        tags.push(d.str(MAX_TAG_CHARS * 4)?);
    }
    Ok(tags)
}

fn decode_model_id(d: &mut Decoder<'_>) -> Result<String, DecodeError> {
    let id = d.str(crate::kernel::identity::MAX_MODEL_ID)?;
    if id.is_empty() {
        return d.fail("empty model id");
    }
    Ok(id)
}

fn decode_reembed(d: &mut Decoder<'_>) -> Result<Reembed, DecodeError> {
    let switch = match d.u8()? {
        0 => false,
        1 => true,
        _ => return d.fail("unknown re-embedding flag"),
    };
    let model_id = decode_model_id(d)?;
    let dim = d.u32()?;
    let vector = |d: &mut Decoder<'_>| {
        let v = decode_vector(d)?;
        if v.len() != dim as usize || v.is_empty() {
            return d.fail("re-embedded vector of another dimension");
        }
        Ok(v)
    };
    let n = d.u32()? as usize;
    // Each record takes at least its id, a length and one component.
    if n > d.remaining() / 16 {
        return d.fail("re-embedded record count out of bounds");
    }
    let mut records = Vec::with_capacity(n);
    for _ in 0..n {
        let id = MemoryId(d.u64()?);
        records.push((id, vector(d)?));
    }
    let n = d.u32()? as usize;
    if n > d.remaining() / 16 {
        return d.fail("re-embedded tag count out of bounds");
    }
    let mut tags = Vec::with_capacity(n);
    for _ in 0..n {
        let user = d.str(record::MAX_ID_CHARS * 4)?;
        let tag = d.str(MAX_TAG_CHARS * 4)?;
        tags.push((user, tag, vector(d)?));
    }
    Ok(Reembed {
        model_id,
        dim,
        records,
        tags,
        switch,
    })
}

fn decode_request(d: &mut Decoder<'_>) -> Result<RequestRecord, DecodeError> {
    let id = d
        .take(16)?
        .try_into()
        .map(RequestId)
        .or_else(|_| d.fail("request id"))?;
    let fingerprint = d.u64()?;
    let at = Timestamp(d.i64()?);
    let seq = d.u64()?;
    let reply = d.opt_str(MAX_KEPT_REPLY)?;
    Ok(RequestRecord {
        id,
        fingerprint,
        at,
        seq,
        reply,
    })
}

/// Decodes one payload of type `frame_type`, which must use up `d`. Batches may not nest.
///
/// # Errors
/// An unknown type, a nested batch, or a payload that does not decode completely.
pub(crate) fn decode_payload(
    frame_type: u8,
    d: &mut Decoder<'_>,
    in_batch: bool,
) -> Result<Op, DecodeError> {
    let op = match frame_type {
        TYPE_STORE | TYPE_STORE_ARCHIVED => {
            let record = Box::new(record::decode(d)?);
            let vector = decode_vector(d)?;
            if frame_type == TYPE_STORE {
                Op::Store { record, vector }
            } else {
                Op::StoreArchived { record, vector }
            }
        }
        TYPE_DELETE => Op::Delete {
            id: MemoryId(d.u64()?),
        },
        TYPE_ARCHIVE => Op::Archive {
            id: MemoryId(d.u64()?),
        },
        TYPE_UPDATE => Op::Update {
            record: Box::new(record::decode(d)?),
        },
        TYPE_TOUCH => {
            let at = Timestamp(d.i64()?);
            let n = d.u32()? as usize;
            if n > d.remaining() / 8 {
                return d.fail("touch count out of bounds");
            }
            let mut ids = Vec::with_capacity(n);
            for _ in 0..n {
                ids.push(MemoryId(d.u64()?));
            }
            Op::Touch { at, ids }
        }
        TYPE_SET_TAGS => {
            let id = MemoryId(d.u64()?);
            let at = Timestamp(d.i64()?);
            Op::SetTags {
                id,
                tags: decode_tags(d)?,
                at,
            }
        }
        TYPE_CANONICAL_TAG => Op::CanonicalTag {
            user_id: d.str(record::MAX_ID_CHARS * 4)?,
            tag: d.str(MAX_TAG_CHARS * 4)?,
            vector: decode_vector(d)?,
        },
        TYPE_SNAPSHOT => Op::Snapshot(Box::new(record::decode_snapshot(d)?)),
        TYPE_ENTITY => Op::Entity(Box::new(record::decode_entity(d)?)),
        TYPE_DELETE_ENTITY => Op::DeleteEntity {
            kind: record::decode_entity_kind(d)?,
            user_id: d.str(record::MAX_ID_CHARS * 4)?,
            id: d.str(record::MAX_ID_CHARS * 4)?,
        },
        TYPE_FORGET_ARCHIVED => {
            let n = d.u32()? as usize;
            if n > MAX_FORGET_IDS || n > d.remaining() / 8 {
                return d.fail("forget count out of bounds");
            }
            let mut ids = Vec::with_capacity(n);
            for _ in 0..n {
                ids.push(MemoryId(d.u64()?));
            }
            Op::ForgetArchived { ids }
        }
        TYPE_REQUEST => Op::Request(Box::new(decode_request(d)?)),
        TYPE_REEMBED if !in_batch => Op::Reembed(Box::new(decode_reembed(d)?)),
        TYPE_MODEL if !in_batch => Op::Model {
            model_id: decode_model_id(d)?,
            dim: d.u32()?,
        },
        TYPE_BATCH if !in_batch => {
            let n = d.u32()? as usize;
            // Each member takes at least its type and length.
            if n > MAX_BATCH_OPS || n > d.remaining() / 5 {
                return d.fail("batch count out of bounds");
            }
            let mut ops = Vec::with_capacity(n);
            for _ in 0..n {
                let t = d.u8()?;
                let len = d.u32()? as usize;
                let mut member = Decoder::new(d.take(len)?);
                ops.push(decode_payload(t, &mut member, true)?);
                if member.remaining() != 0 {
                    return d.fail("trailing bytes in a batch member");
                }
            }
            Op::Batch(ops)
        }
        TYPE_CLAIM if !in_batch => Op::Claim(Box::new(cluster::decode_claim(d)?)),
        TYPE_SKIP if !in_batch => Op::Skip(Box::new(cluster::decode_skip(d)?)),
        TYPE_BATCH => return d.fail("nested batch"),
        TYPE_CLAIM | TYPE_SKIP => return d.fail("claim or skip inside a batch"),
        TYPE_REEMBED | TYPE_MODEL => return d.fail("re-embedding inside a batch"),
        _ => return d.fail("unknown frame type"),
    };
    Ok(op)
}

/// Decodes the payload of a checked frame into an operation.
///
/// # Errors
/// An unknown type or a payload that does not decode completely.
pub fn decode_op(f: &RawFrame<'_>) -> Result<Op, DecodeError> {
    let mut d = Decoder::new(f.payload);
    let op = decode_payload(f.frame_type, &mut d, false)?;
    if d.remaining() != 0 {
        return d.fail("trailing bytes in frame");
    }
    Ok(op)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::record::{Category, Kind};

    fn record(id: u64) -> Box<Memory> {
        Box::new(Memory {
            id: MemoryId(id),
            user_id: "u".into(),
            kind: Kind::Memory,
            session_id: Some("s".into()),
            agent_id: None,
            role: None,
            content: format!("content {id}"),
            content_hash: record::content_hash("x"),
            category: Category::Security,
            tags: vec!["a".into(), "type:bug".into()],
            created_at: Timestamp(1),
            updated_at: Timestamp(2),
            last_accessed_at: Timestamp(3),
            access_count: 4,
            helpful_count: 5,
            harmful_count: 6,
            confidence: 0.5,
            supersedes: vec![MemoryId(1), MemoryId(2)],
            valid_from: Timestamp(1),
            valid_to: Some(Timestamp(9)),
            decision: Some(crate::kernel::rule::Rule::NewValue),
            item: None,
            source_id: None,
        })
    }

    fn round_trip(op: &Op) -> Op {
        let frame = encode_frame(7, op);
        let raw = check_frame(&frame).expect("frame checks");
        assert_eq!((raw.seq, raw.frame_type), (7, op_type(op)));
        decode_op(&raw).expect("frame decodes")
    }

    #[test]
    fn every_operation_round_trips_alone_and_in_a_batch() {
        let ops = vec![
            Op::Store {
                record: record(3),
                vector: vec![0.5, -0.25],
            },
            Op::Delete { id: MemoryId(9) },
            Op::Update { record: record(4) },
            Op::Touch {
                at: Timestamp(10),
                ids: vec![MemoryId(1), MemoryId(5)],
            },
            Op::SetTags {
                id: MemoryId(2),
                tags: vec!["x".into()],
                at: Timestamp(11),
            },
            Op::Archive { id: MemoryId(8) },
            Op::StoreArchived {
                record: record(12),
                vector: vec![1.0, 0.0],
            },
            Op::CanonicalTag {
                user_id: "u".into(),
                tag: "api v2".into(),
                vector: vec![0.0, 1.0],
            },
            Op::Snapshot(Box::new(TagSnapshot {
                user_id: "u".into(),
                snapshot_id: "0123456789abcdef".into(),
                description: "before rename".into(),
                created_at: Timestamp(13),
                entries: vec![(MemoryId(1), vec!["a".into()]), (MemoryId(2), vec![])],
            })),
            Op::ForgetArchived {
                ids: vec![MemoryId(7), MemoryId(70)],
            },
        ];
        for op in &ops {
            assert_eq!(&round_trip(op), op);
        }
        let batch = Op::Batch(ops);
        assert_eq!(round_trip(&batch), batch);
        assert_eq!(batch.max_new_id(), Some(12));
    }

    #[test]
    fn reembedding_frames_round_trip_alone_and_are_refused_in_a_batch_or_off_their_dimension() {
        let reembed = Op::Reembed(Box::new(Reembed {
            model_id: "amberdb-hashing-v1-3".into(),
            dim: 3,
            records: vec![
                (MemoryId(4), vec![0.1, 0.2, 0.3]),
                (MemoryId(9), vec![1.0; 3]),
            ],
            tags: vec![("u".into(), "rust".into(), vec![0.0, 1.0, 0.0])],
            switch: true,
        }));
        let model = Op::Model {
            model_id: "m".into(),
            dim: 7,
        };
        for op in [&reembed, &model] {
            assert_eq!(&round_trip(op), op);
        }
        for op in [reembed.clone(), model] {
            let frame = encode_frame(1, &Op::Batch(vec![op]));
            let raw = check_frame(&frame).expect("frame checks");
            assert_eq!(
                decode_op(&raw).expect_err("in a batch").reason,
                "re-embedding inside a batch"
            );
        }
        let Op::Reembed(mut off) = reembed else {
            unreachable!("built above")
        };
        if let Some((_, v)) = off.records.get_mut(1) {
            v.push(0.5);
        }
        let frame = encode_frame(1, &Op::Reembed(off));
        let raw = check_frame(&frame).expect("frame checks");
        assert_eq!(
            decode_op(&raw)
                .expect_err("a 4-d vector in a 3-d frame")
                .reason,
            "re-embedded vector of another dimension"
        );
    }

    #[test]
    fn claims_and_skips_round_trip_alone_and_are_refused_in_a_batch() {
        use crate::kernel::cluster::{Chunk, SkipReason};
        let claim = Op::Claim(Box::new(Claim {
            epoch: 3,
            node: "node-2".into(),
            store: crate::kernel::identity::StoreId([9; 16]),
        }));
        let skip = Op::Skip(Box::new(Skip {
            reason: SkipReason::Pending,
            chunk: Some(Chunk {
                index: 1,
                count: 2,
                bytes: vec![1, 2, 3],
            }),
        }));
        for op in [claim, skip] {
            assert_eq!(round_trip(&op), op);
            let frame = encode_frame(1, &Op::Batch(vec![op]));
            let raw = check_frame(&frame).expect("frame checks");
            assert_eq!(
                decode_op(&raw).expect_err("in a batch").reason,
                "claim or skip inside a batch"
            );
        }
    }

    #[test]
    fn a_forget_frame_over_its_bound_is_refused() {
        let mut payload = Vec::new();
        let mut e = Encoder::new(&mut payload);
        e.u32(u32::try_from(MAX_FORGET_IDS + 1).expect("fits"));
        for i in 0..=MAX_FORGET_IDS {
            e.u64(i as u64);
        }
        let raw = RawFrame {
            frame_type: TYPE_FORGET_ARCHIVED,
            seq: 1,
            payload: &payload,
            total_len: 0,
        };
        assert_eq!(
            decode_op(&raw).expect_err("over the bound").reason,
            "forget count out of bounds"
        );
    }

    #[test]
    fn a_nested_batch_or_a_short_member_is_refused() {
        let nested = Op::Batch(vec![Op::Batch(vec![Op::Delete { id: MemoryId(1) }])]);
        let frame = encode_frame(1, &nested);
        let raw = check_frame(&frame).expect("frame checks");
        assert_eq!(decode_op(&raw).expect_err("nested").reason, "nested batch");

        let mut payload = Vec::new();
        let mut e = Encoder::new(&mut payload);
        e.u32(1);
        e.u8(TYPE_DELETE);
        e.u32(4); // a delete needs 8 bytes
        e.u32(0);
        let raw = RawFrame {
            frame_type: TYPE_BATCH,
            seq: 1,
            payload: &payload,
            total_len: 0,
        };
        assert!(decode_op(&raw).is_err());
    }
}
