//! The store identity file (`docs/format/identity.md`): format version and embedder.
//!
//! ```text
//! off size field          meaning
//!   0    4 magic          b"MNID"
//!   4    2 version        u16 LE; readers accept SUPPORTED
//!   6    2 flags          u16 LE; must be 0
//!   8    4 dim            u32 LE
//!  12    4 model_id_len   u32 LE; 1..=MAX_MODEL_ID
//!  16    8 created_at     i64 LE, µs since the epoch
//!  24    n model_id       UTF-8
//! 24+n   4 crc            crc32 seeded SEED over bytes 0..24+n
//! ```

#![deny(clippy::unwrap_used, clippy::indexing_slicing)]

use crate::kernel::codec::{DecodeError, Decoder, Encoder};
use crate::kernel::record::Timestamp;
use std::ops::RangeInclusive;

/// File name.
pub const FILE_NAME: &str = "IDENTITY";
/// File magic.
pub const MAGIC: [u8; 4] = *b"MNID";
/// Version this build writes.
pub const VERSION: u16 = 1;
/// Versions this build reads.
pub const SUPPORTED: RangeInclusive<u16> = 1..=1;
/// Longest model id.
pub const MAX_MODEL_ID: usize = 256;
/// CRC seed.
pub const SEED: u32 = 0x4944_4e54;

/// What a store was created with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The embedder's model id.
    pub model_id: String,
    /// The embedder's dimension.
    pub dim: u32,
    /// When the store was created.
    pub created_at: Timestamp,
}

/// The no-model embedder's id before the project was renamed: stores it created say
/// `mnemo-hashing-v1-<dim>` in their IDENTITY and open unchanged (`docs/format/identity.md`).
const LEGACY_HASHING_PREFIX: &str = "mnemo-hashing-v1-";
const HASHING_PREFIX: &str = "amberdb-hashing-v1-";

impl Identity {
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
pub(crate) enum IdentityError {
    Corrupted(DecodeError),
    Unsupported(u16),
}

fn crc(bytes: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new_with_initial(SEED);
    h.update(bytes);
    h.finalize()
}

/// Encodes an identity file.
#[must_use]
pub fn encode(id: &Identity) -> Vec<u8> {
    let mut b = Vec::new();
    let mut e = Encoder::new(&mut b);
    e.bytes(&MAGIC);
    e.u16(VERSION);
    e.u16(0);
    e.u32(id.dim);
    e.u32(u32::try_from(id.model_id.len()).unwrap_or(u32::MAX));
    e.i64(id.created_at.0);
    e.bytes(id.model_id.as_bytes());
    let c = crc(&b);
    b.extend_from_slice(&c.to_le_bytes());
    b
}

/// Decodes an identity file.
pub(crate) fn decode(b: &[u8]) -> Result<Identity, IdentityError> {
    let corrupt = |offset, reason| IdentityError::Corrupted(DecodeError { offset, reason });
    let mut d = Decoder::new(b);
    let magic = d.take(4).map_err(IdentityError::Corrupted)?;
    if magic != MAGIC {
        return Err(corrupt(0, "bad magic"));
    }
    let version = d.u16().map_err(IdentityError::Corrupted)?;
    let flags = d.u16().map_err(IdentityError::Corrupted)?;
    let dim = d.u32().map_err(IdentityError::Corrupted)?;
    let len = d.u32().map_err(IdentityError::Corrupted)? as usize;
    let created_at = Timestamp(d.i64().map_err(IdentityError::Corrupted)?);
    if !(1..=MAX_MODEL_ID).contains(&len) {
        return Err(corrupt(12, "model id length out of bounds"));
    }
    let model = d.take(len).map_err(IdentityError::Corrupted)?;
    let body_len = d.pos();
    let stored = d.u32().map_err(IdentityError::Corrupted)?;
    if d.remaining() != 0 {
        return Err(corrupt(d.pos(), "trailing bytes"));
    }
    if crc(b.get(..body_len).unwrap_or(&[])) != stored {
        return Err(corrupt(body_len, "checksum mismatch"));
    }
    if !SUPPORTED.contains(&version) {
        return Err(IdentityError::Unsupported(version));
    }
    if flags != 0 {
        return Err(corrupt(6, "unknown flags"));
    }
    let model_id = std::str::from_utf8(model)
        .map_err(|_| corrupt(24, "model id is not UTF-8"))?
        .to_owned();
    Ok(Identity {
        model_id,
        dim,
        created_at,
    })
}
