//! Sealed vector segment files of a store: naming, durable writing, opening.

use crate::kernel::error::{EngineError, Result};
use crate::kernel::storage::Storage;
use amberdb_index::{FlatSegment, IndexError};
use std::io;
use std::path::Path;

/// The file name of segment `id`.
#[must_use]
pub fn file_name(id: u64) -> String {
    format!("seg-{id:010}.mnsf")
}

/// Parses a segment file name back to its id.
#[must_use]
pub fn parse_file_name(name: &str) -> Option<u64> {
    name.strip_prefix("seg-")?
        .strip_suffix(".mnsf")
        .filter(|d| d.len() == 10)?
        .parse()
        .ok()
}

/// Maps and validates segment `id`, expecting `rows` rows.
///
/// # Errors
/// `Io` when it cannot be read, `Corrupted` when it fails a check or has another row count.
pub fn open(storage: &dyn Storage, dir: &Path, id: u64, rows: u64) -> Result<FlatSegment> {
    let path = dir.join(file_name(id));
    let bytes = storage.map(&path).map_err(EngineError::io(&path))?;
    let seg = FlatSegment::open(file_name(id), bytes).map_err(|e| match e {
        IndexError::Corrupted { offset, reason, .. } => EngineError::Corrupted {
            file: path.clone(),
            offset,
            reason,
        },
        IndexError::UnsupportedVersion {
            found, supported, ..
        } => EngineError::UnsupportedVersion {
            file: path.clone(),
            found,
            supported,
        },
        other => EngineError::Io {
            path: path.clone(),
            source: io::Error::other(other),
        },
    })?;
    if seg.len() as u64 != rows {
        return Err(EngineError::Corrupted {
            file: path,
            offset: 16,
            reason: "row count differs from the checkpoint",
        });
    }
    Ok(seg)
}
