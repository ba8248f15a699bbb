//! The store identity file (`docs/format/identity.md`): format version, embedder, and which
//! store this is (its id and the incarnations a restore made of it).
//!
//! ```text
//! off size field          meaning
//!   0    4 magic          b"MNID"
//!   4    2 version        u16 LE; readers accept SUPPORTED
//!   6    2 flags          u16 LE; must be 0
//!   8    4 dim            u32 LE
//!  12    4 model_id_len   u32 LE; 1..=MAX_MODEL_ID
//!  16    8 created_at     i64 LE, µs since the epoch
//! v1:
//!  24    n model_id       UTF-8
//! 24+n   4 crc            crc32 seeded SEED over bytes 0..24+n
//! v2:
//!  24   16 store_id       random, never all zero
//!  40    4 incarnations   u32 LE; 1..=MAX_INCARNATIONS
//!  44    4 reserved       zero
//!  48    n model_id       UTF-8
//! 48+n  24×k incarnation  { id u64 (never 0), since_seq u64, since_segment u64 }, oldest first
//!  ...   4 crc            crc32 seeded SEED over every byte before it
//! ```

#![deny(clippy::unwrap_used, clippy::indexing_slicing)]

use crate::kernel::codec::{DecodeError, Decoder, Encoder};
use crate::kernel::record::Timestamp;
use amberdb_index::Owner;
use std::ops::RangeInclusive;

/// File name.
pub const FILE_NAME: &str = "IDENTITY";
/// File magic.
pub const MAGIC: [u8; 4] = *b"MNID";
/// Version this build writes (v2: the store id and its incarnations).
pub const VERSION: u16 = 2;
/// Versions this build reads.
pub const SUPPORTED: RangeInclusive<u16> = 1..=VERSION;
/// Longest model id.
pub const MAX_MODEL_ID: usize = 256;
/// Most incarnations one identity lists (a restore adds one).
pub const MAX_INCARNATIONS: usize = 4096;
/// CRC seed.
pub const SEED: u32 = 0x4944_4e54;

/// A store's id: 128 random bits made when the store is created (or when a store made before
/// ids is first opened by a build that has them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct StoreId(pub [u8; 16]);

impl std::fmt::Display for StoreId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl StoreId {
    /// A new id: 128 random bits, never all zero (what `amberdb cluster init` makes for each
    /// partition, `docs/cluster.md`).
    ///
    /// # Errors
    /// When the OS has no random bytes to give.
    pub fn random() -> std::io::Result<StoreId> {
        random().map(StoreId)
    }
}

impl std::str::FromStr for StoreId {
    type Err = String;

    /// 32 hexadecimal digits, as `Display` writes them.
    fn from_str(s: &str) -> Result<StoreId, String> {
        let bad = || format!("a store id is 32 hexadecimal digits, not {s:?}");
        if s.len() != 32 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad());
        }
        let mut id = [0u8; 16];
        for (i, b) in id.iter_mut().enumerate() {
            let digits = s.get(2 * i..2 * i + 2).ok_or_else(bad)?;
            *b = u8::from_str_radix(digits, 16).map_err(|_| bad())?;
        }
        Ok(StoreId(id))
    }
}

/// One life of a store: its creation, or a restore from a backup. Files written in it carry
/// its `id`; it began after sequence number `since_seq` (the restore point) with segment ids
/// from `since_segment` on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Incarnation {
    /// Random, never 0.
    pub id: u64,
    /// The last sequence number it shares with the incarnation before it (0 for the first).
    pub since_seq: u64,
    /// The first segment id it may have made (0 for the first).
    pub since_segment: u64,
}

/// What a store was created with, and which store it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The embedder's model id.
    pub model_id: String,
    /// The embedder's dimension.
    pub dim: u32,
    /// When the store was created.
    pub created_at: Timestamp,
    /// The store's id; all zero in a v1 file (a store made before ids: `upgraded` gives it one).
    pub store: StoreId,
    /// Its incarnations, oldest first; the last is the current one. Empty in a v1 file.
    pub incarnations: Vec<Incarnation>,
}

/// How far a file may be trusted, by the owner its header names (`Identity::judge`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// This store's current incarnation, or a file from before owners (trusted as it was).
    Own,
    /// An earlier incarnation of this store: its frames up to `seq` and its segments below
    /// `segment` are the store's own history; anything past them is a diverged copy's.
    Until {
        /// The last sequence number of it this store shares.
        seq: u64,
        /// The first segment id it may not have.
        segment: u64,
    },
    /// Another store, or an incarnation this one never had: why, both ids named.
    Foreign(String),
}

/// The no-model embedder's id before the project was renamed: stores it created say
/// `mnemo-hashing-v1-<dim>` in their IDENTITY and open unchanged (`docs/format/identity.md`).
const LEGACY_HASHING_PREFIX: &str = "mnemo-hashing-v1-";
const HASHING_PREFIX: &str = "amberdb-hashing-v1-";

/// Random bytes from the OS; a store id or incarnation is never all zero.
fn random<const N: usize>() -> std::io::Result<[u8; N]> {
    loop {
        let mut b = [0u8; N];
        getrandom::fill(&mut b).map_err(|e| std::io::Error::other(e.to_string()))?;
        if b.iter().any(|&x| x != 0) {
            return Ok(b);
        }
    }
}

impl Identity {
    /// A new store's identity: a new id, one incarnation.
    ///
    /// # Errors
    /// When the OS has no random bytes to give.
    pub fn new(model_id: String, dim: u32) -> std::io::Result<Identity> {
        Ok(Identity {
            model_id,
            dim,
            created_at: Timestamp::now(),
            store: StoreId(random()?),
            incarnations: vec![Incarnation {
                id: u64::from_le_bytes(random()?),
                since_seq: 0,
                since_segment: 0,
            }],
        })
    }

    /// Whether this is a v1 identity (no store id yet).
    #[must_use]
    pub fn is_legacy(&self) -> bool {
        self.incarnations.is_empty()
    }

    /// A v1 identity given its id (the one rewrite `docs/format/identity.md` allows); any
    /// other is returned as it is.
    ///
    /// # Errors
    /// When the OS has no random bytes to give.
    pub fn upgraded(self) -> std::io::Result<Identity> {
        if !self.is_legacy() {
            return Ok(self);
        }
        let fresh = Identity::new(self.model_id, self.dim)?;
        Ok(Identity {
            created_at: self.created_at,
            ..fresh
        })
    }

    /// This identity after a restore at sequence number `seq` whose files hold segment ids
    /// below `segment`: a new incarnation. `None` when the list is full.
    ///
    /// # Errors
    /// When the OS has no random bytes to give.
    pub fn restored(mut self, seq: u64, segment: u64) -> std::io::Result<Option<Identity>> {
        if self.incarnations.len() >= MAX_INCARNATIONS {
            return Ok(None);
        }
        self.incarnations.push(Incarnation {
            id: u64::from_le_bytes(random()?),
            since_seq: seq,
            since_segment: segment,
        });
        Ok(Some(self))
    }

    /// The owner this store writes into every file it makes now (`Owner::NONE` for a v1
    /// identity, which only a read-only check ever sees).
    #[must_use]
    pub fn owner(&self) -> Owner {
        self.incarnations
            .last()
            .map_or(Owner::NONE, |i| owner_of(self.store, i.id))
    }

    /// How far a file whose header names `owner` may be trusted (`docs/durability.md`, "File
    /// identity").
    #[must_use]
    pub fn judge(&self, owner: Owner) -> Verdict {
        if owner == Owner::NONE {
            return Verdict::Own;
        }
        let (store, incarnation) = parts_of(owner);
        let ours = || match self.incarnations.last() {
            Some(i) => format!("this store is {}, incarnation {:016x}", self.store, i.id),
            None => "this store was made before store ids, so no file of it names one".into(),
        };
        if self.is_legacy() || store != self.store {
            return Verdict::Foreign(format!(
                "the file belongs to store {store}, incarnation {incarnation:016x}; {}",
                ours()
            ));
        }
        let Some(at) = self.incarnations.iter().position(|i| i.id == incarnation) else {
            return Verdict::Foreign(format!(
                "the file belongs to incarnation {incarnation:016x} of this store {store}, which this copy never was (a restore that went its own way); {}",
                ours()
            ));
        };
        match self.incarnations.get(at + 1) {
            None => Verdict::Own,
            Some(next) => Verdict::Until {
                seq: next.since_seq,
                segment: next.since_segment,
            },
        }
    }

    /// Whether this store was created with the embedder `model_id` of dimension `dim`. The
    /// only two spellings of one embedder are the hashing embedder's ids before and after the
    /// rename; no file is rewritten.
    #[must_use]
    pub fn matches(&self, model_id: &str, dim: usize) -> bool {
        let stored = match self.model_id.strip_prefix(LEGACY_HASHING_PREFIX) {
            Some(rest) => model_id.strip_prefix(HASHING_PREFIX) == Some(rest),
            None => self.model_id == model_id,
        };
        stored && self.dim as usize == dim
    }
}

/// The owner bytes of a store's incarnation: the store id, then the incarnation (u64 LE).
#[must_use]
pub fn owner_of(store: StoreId, incarnation: u64) -> Owner {
    let mut b = [0u8; amberdb_index::segment::format::OWNER_LEN];
    if let Some(s) = b.get_mut(..16) {
        s.copy_from_slice(&store.0);
    }
    if let Some(i) = b.get_mut(16..24) {
        i.copy_from_slice(&incarnation.to_le_bytes());
    }
    Owner(b)
}

/// The store id and incarnation of owner bytes.
#[must_use]
pub fn parts_of(owner: Owner) -> (StoreId, u64) {
    let mut store = [0u8; 16];
    store.copy_from_slice(owner.0.get(..16).unwrap_or(&[0; 16]));
    let incarnation = owner
        .0
        .get(16..24)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_le_bytes);
    (StoreId(store), incarnation)
}

/// The model id the store in `dir` was created with, as its `IDENTITY` records it: `None`
/// when the directory holds no `IDENTITY` (no store yet) or one this build cannot read (the
/// open then says why). What an open without an explicit embedder uses
/// (`docs/durability.md`, "Which embedder an open uses").
#[must_use]
pub fn recorded_model(dir: &std::path::Path) -> Option<String> {
    let bytes = std::fs::read(dir.join(FILE_NAME)).ok()?;
    let id = decode(&bytes).ok()?;
    Some(match id.model_id.strip_prefix(LEGACY_HASHING_PREFIX) {
        Some(dim) => format!("{HASHING_PREFIX}{dim}"),
        None => id.model_id,
    })
}

/// Why an identity file was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdentityError {
    /// Damaged: where and why.
    Corrupted(DecodeError),
    /// A version this build cannot read.
    Unsupported(u16),
}

fn crc(bytes: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new_with_initial(SEED);
    h.update(bytes);
    h.finalize()
}

/// Encodes an identity file at this build's version (a v1 identity, with no incarnation,
/// as v1: only tests write one).
#[must_use]
pub fn encode(id: &Identity) -> Vec<u8> {
    let mut b = Vec::new();
    let mut e = Encoder::new(&mut b);
    e.bytes(&MAGIC);
    e.u16(if id.is_legacy() { 1 } else { VERSION });
    e.u16(0);
    e.u32(id.dim);
    e.u32(u32::try_from(id.model_id.len()).unwrap_or(u32::MAX));
    e.i64(id.created_at.0);
    if !id.is_legacy() {
        e.bytes(&id.store.0);
        e.u32(u32::try_from(id.incarnations.len()).unwrap_or(u32::MAX));
        e.u32(0);
    }
    e.bytes(id.model_id.as_bytes());
    for i in &id.incarnations {
        e.u64(i.id);
        e.u64(i.since_seq);
        e.u64(i.since_segment);
    }
    let c = crc(&b);
    b.extend_from_slice(&c.to_le_bytes());
    b
}

/// Decodes an identity file.
///
/// # Errors
/// `IdentityError`; never panics on any input.
pub fn decode(b: &[u8]) -> Result<Identity, IdentityError> {
    let corrupt = |offset, reason| IdentityError::Corrupted(DecodeError { offset, reason });
    let c = IdentityError::Corrupted;
    let mut d = Decoder::new(b);
    let magic = d.take(4).map_err(c)?;
    if magic != MAGIC {
        return Err(corrupt(0, "bad magic"));
    }
    let version = d.u16().map_err(c)?;
    let flags = d.u16().map_err(c)?;
    let dim = d.u32().map_err(c)?;
    let len = d.u32().map_err(c)? as usize;
    let created_at = Timestamp(d.i64().map_err(c)?);
    // The crc covers everything before the last four bytes, whatever the version says.
    let body_len = b.len().saturating_sub(4);
    let stored = b
        .get(body_len..)
        .and_then(|s| s.try_into().ok())
        .map(u32::from_le_bytes);
    if b.len() < 28 || stored != Some(crc(b.get(..body_len).unwrap_or(&[]))) {
        return Err(corrupt(body_len, "checksum mismatch"));
    }
    if !SUPPORTED.contains(&version) {
        return Err(IdentityError::Unsupported(version));
    }
    if flags != 0 {
        return Err(corrupt(6, "unknown flags"));
    }
    let (store, count) = if version >= 2 {
        let store = d.take(16).map_err(c)?;
        let count = d.u32().map_err(c)? as usize;
        if d.u32().map_err(c)? != 0 {
            return Err(corrupt(44, "reserved bytes set"));
        }
        if store.iter().all(|&x| x == 0) {
            return Err(corrupt(24, "store id is zero"));
        }
        if !(1..=MAX_INCARNATIONS).contains(&count) {
            return Err(corrupt(40, "incarnation count out of bounds"));
        }
        let mut id = [0u8; 16];
        id.copy_from_slice(store);
        (StoreId(id), count)
    } else {
        (StoreId::default(), 0)
    };
    if !(1..=MAX_MODEL_ID).contains(&len) {
        return Err(corrupt(12, "model id length out of bounds"));
    }
    let model_at = d.pos();
    let model = d.take(len).map_err(c)?;
    if d.remaining() != 4 + count * 24 {
        return Err(corrupt(
            d.pos(),
            "length differs from the incarnation count",
        ));
    }
    let mut incarnations = Vec::with_capacity(count);
    for _ in 0..count {
        let at = d.pos();
        let i = Incarnation {
            id: d.u64().map_err(c)?,
            since_seq: d.u64().map_err(c)?,
            since_segment: d.u64().map_err(c)?,
        };
        let ordered = incarnations
            .last()
            .is_none_or(|p: &Incarnation| p.since_seq <= i.since_seq);
        if i.id == 0 || !ordered || incarnations.iter().any(|p| p.id == i.id) {
            return Err(corrupt(at, "incarnation zero, repeated or out of order"));
        }
        incarnations.push(i);
    }
    let model_id = std::str::from_utf8(model)
        .map_err(|_| corrupt(model_at, "model id is not UTF-8"))?
        .to_owned();
    Ok(Identity {
        model_id,
        dim,
        created_at,
        store,
        incarnations,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn a_store_id_reads_back_from_its_hex_and_nothing_else_does() {
        let id = StoreId::random().unwrap();
        assert_eq!(id.to_string().parse::<StoreId>(), Ok(id));
        for bad in [
            "",
            "00",
            &"g".repeat(32),
            &"0".repeat(33),
            &"é".repeat(16),
            &"+f".repeat(16),
        ] {
            assert!(bad.parse::<StoreId>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn an_identity_round_trips_and_judges_files_by_store_and_incarnation() {
        let id = Identity::new("m".into(), 8).unwrap();
        assert_eq!(decode(&encode(&id)).unwrap(), id);
        let restored = id.clone().restored(40, 3).unwrap().unwrap();
        assert_eq!(decode(&encode(&restored)).unwrap(), restored);
        // The restore's files are its own; the original's are trusted up to the restore point.
        assert_eq!(restored.judge(restored.owner()), Verdict::Own);
        assert_eq!(
            restored.judge(id.owner()),
            Verdict::Until {
                seq: 40,
                segment: 3
            }
        );
        assert_eq!(restored.judge(Owner::NONE), Verdict::Own);
        // The original never was the restore; another store is another store.
        assert!(matches!(id.judge(restored.owner()), Verdict::Foreign(_)));
        let other = Identity::new("m".into(), 8).unwrap();
        let Verdict::Foreign(why) = id.judge(other.owner()) else {
            panic!("another store's file judged its own");
        };
        assert!(why.contains(&other.store.to_string()) && why.contains(&id.store.to_string()));
    }

    #[test]
    fn a_version_1_identity_reads_and_is_upgraded_keeping_its_embedder_and_creation() {
        let v1 = Identity {
            model_id: "m".into(),
            dim: 8,
            created_at: Timestamp(7),
            store: StoreId::default(),
            incarnations: Vec::new(),
        };
        let bytes = encode(&v1);
        assert_eq!(u16::from_le_bytes([bytes[4], bytes[5]]), 1);
        let read = decode(&bytes).unwrap();
        assert!(read.is_legacy());
        // Any file that names an owner is foreign to a store that has none.
        let other = Identity::new("m".into(), 8).unwrap();
        assert!(matches!(read.judge(other.owner()), Verdict::Foreign(_)));
        let up = read.upgraded().unwrap();
        assert!(!up.is_legacy());
        assert_eq!(
            (up.model_id.as_str(), up.dim, up.created_at),
            ("m", 8, Timestamp(7))
        );
        assert_ne!(up.store, StoreId::default());
    }

    #[test]
    fn damaged_identities_are_refused_and_random_bytes_never_panic() {
        let good = encode(&Identity::new("model".into(), 4).unwrap());
        for i in 0..good.len() {
            let mut bad = good.clone();
            bad[i] ^= 0x10;
            assert!(decode(&bad).is_err(), "a flip at {i} accepted");
            assert!(decode(&good[..i]).is_err(), "a cut at {i} accepted");
        }
    }
}
