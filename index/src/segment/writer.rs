//! Encodes a flat segment into bytes. The caller writes them durably (`*.tmp`, fsync, rename,
//! directory fsync); the index never touches the file system on the write side.

#![deny(clippy::unwrap_used, clippy::indexing_slicing)]

use super::format::{
    BODY_SEED, FLAG_I8_CODES, HEADER_SEED, Layout, MAGIC, MAX_DIM, METRIC_DOT, Owner, VERSION, put,
    seal,
};
use crate::error::{IndexError, Result};
use crate::quantize;

/// Encodes `keys` (strictly increasing) and their row-major `vectors` of `dim` f32 each, as a
/// file of the store `owner` names.
///
/// # Errors
/// `DimensionMismatch` when `vectors.len() != keys.len() * dim`, `KeyOrder` when keys are not
/// strictly increasing, `InvalidVector` for a zero or too large `dim` or a non-finite value.
pub fn encode(
    keys: &[u64],
    vectors: &[f32],
    dim: usize,
    with_codes: bool,
    owner: Owner,
) -> Result<Vec<u8>> {
    let dim32 = u32::try_from(dim)
        .ok()
        .filter(|d| (1..=MAX_DIM).contains(d))
        .ok_or(IndexError::InvalidVector {
            reason: "dimension must be 1..=4096",
        })?;
    if vectors.len() != keys.len() * dim {
        return Err(IndexError::DimensionMismatch {
            expected: keys.len() * dim,
            got: vectors.len(),
        });
    }
    if let Some(w) = keys.windows(2).find(|w| w.first() >= w.get(1)) {
        let (last, key) = (
            w.first().copied().unwrap_or(0),
            w.get(1).copied().unwrap_or(0),
        );
        return Err(IndexError::KeyOrder { key, last });
    }
    if vectors.iter().any(|x| !x.is_finite()) {
        return Err(IndexError::InvalidVector {
            reason: "non-finite value",
        });
    }
    let count = keys.len() as u64;
    let layout = Layout::new(count, dim32, with_codes).ok_or(IndexError::InvalidVector {
        reason: "segment too large",
    })?;
    let len = usize::try_from(layout.file_len).map_err(|_| IndexError::InvalidVector {
        reason: "segment too large",
    })?;
    let mut out = vec![0u8; len];
    for (i, k) in keys.iter().enumerate() {
        put(&mut out, layout.keys.start + 8 * i as u64, &k.to_le_bytes());
    }
    for (i, x) in vectors.iter().enumerate() {
        put(
            &mut out,
            layout.vectors.start + 4 * i as u64,
            &x.to_le_bytes(),
        );
    }
    if let Some((codes, scales)) = &layout.codes {
        let mut buf = vec![0i8; dim];
        for (row, v) in vectors.chunks_exact(dim).enumerate() {
            let scale = quantize::encode_into(v, &mut buf);
            put(
                &mut out,
                codes.start + (row * dim) as u64,
                bytemuck::cast_slice(&buf),
            );
            put(
                &mut out,
                scales.start + 4 * row as u64,
                &scale.to_le_bytes(),
            );
        }
    }
    let flags = if with_codes { FLAG_I8_CODES } else { 0 };
    put(&mut out, 0, &MAGIC);
    put(&mut out, 4, &VERSION.to_le_bytes());
    put(&mut out, 6, &flags.to_le_bytes());
    put(&mut out, 8, &dim32.to_le_bytes());
    put(&mut out, 12, &METRIC_DOT.to_le_bytes());
    put(&mut out, 16, &count.to_le_bytes());
    put(&mut out, 24, &layout.file_len.to_le_bytes());
    put(&mut out, 32, &owner.0);
    seal(&mut out, BODY_SEED, HEADER_SEED);
    Ok(out)
}
