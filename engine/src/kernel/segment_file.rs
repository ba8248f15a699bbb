//! Sealed vector segment files of a store: their kinds, naming, opening.
//!
//! Flat segments are `seg-<id>.mnsf` (`docs/format/segment-flat.md`), IVF segments
//! `seg-<id>.mnsi` (`docs/format/segment-ivf.md`); ids come from one counter, so an id names
//! one file whatever its kind.

use crate::kernel::error::{KernelError, Result};
use crate::kernel::storage::Storage;
use amberdb_index::{FlatSegment, IndexError, IvfSegment, Sealed};
use std::io;
use std::path::Path;

/// What a segment file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SegmentKind {
    /// Rows in key order.
    Flat,
    /// Rows grouped by list.
    Ivf,
}

impl SegmentKind {
    /// The byte a v5 checkpoint writes.
    #[must_use]
    pub fn code(self) -> u8 {
        match self {
            SegmentKind::Flat => 1,
            SegmentKind::Ivf => 2,
        }
    }

    /// The kind of a v5 checkpoint's byte.
    #[must_use]
    pub fn from_code(code: u8) -> Option<SegmentKind> {
        match code {
            1 => Some(SegmentKind::Flat),
            2 => Some(SegmentKind::Ivf),
            _ => None,
        }
    }

    fn extension(self) -> &'static str {
        match self {
            SegmentKind::Flat => "mnsf",
            SegmentKind::Ivf => "mnsi",
        }
    }
}

/// One segment of a checkpoint's list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentEntry {
    /// Its id (the file name).
    pub id: u64,
    /// The rows it must hold.
    pub rows: u64,
    /// Its kind.
    pub kind: SegmentKind,
}

impl SegmentEntry {
    /// A flat segment.
    #[must_use]
    pub fn flat(id: u64, rows: u64) -> SegmentEntry {
        SegmentEntry {
            id,
            rows,
            kind: SegmentKind::Flat,
        }
    }

    /// Its file name.
    #[must_use]
    pub fn file_name(&self) -> String {
        file_name(self.id, self.kind)
    }
}

/// The file name of segment `id` of `kind`.
#[must_use]
pub fn file_name(id: u64, kind: SegmentKind) -> String {
    format!("seg-{id:010}.{}", kind.extension())
}

/// Parses a segment file name back to its id and kind.
#[must_use]
pub fn parse_file_name(name: &str) -> Option<(u64, SegmentKind)> {
    let (stem, ext) = name.strip_prefix("seg-")?.split_once('.')?;
    let kind = [SegmentKind::Flat, SegmentKind::Ivf]
        .into_iter()
        .find(|k| k.extension() == ext)?;
    let id = Some(stem).filter(|d| d.len() == 10)?.parse().ok()?;
    Some((id, kind))
}

/// Maps and validates the segment `entry` names, expecting its row count.
///
/// # Errors
/// `Io` when it cannot be read, `Corrupted` when it fails a check or has another row count.
pub fn open(storage: &dyn Storage, dir: &Path, entry: &SegmentEntry) -> Result<Sealed> {
    let name = entry.file_name();
    let path = dir.join(&name);
    let bytes = storage.map(&path).map_err(KernelError::io(&path))?;
    let seg = match entry.kind {
        SegmentKind::Flat => FlatSegment::open(name, bytes).map(Sealed::Flat),
        SegmentKind::Ivf => IvfSegment::open(&name, bytes).map(Sealed::Ivf),
    }
    .map_err(|e| match e {
        IndexError::Corrupted { offset, reason, .. } => KernelError::Corrupted {
            file: path.clone(),
            offset,
            reason,
        },
        IndexError::UnsupportedVersion {
            found, supported, ..
        } => KernelError::UnsupportedVersion {
            file: path.clone(),
            found,
            supported,
        },
        other => KernelError::Io {
            path: path.clone(),
            source: io::Error::other(other),
        },
    })?;
    if seg.len() as u64 != entry.rows {
        return Err(KernelError::Corrupted {
            file: path,
            offset: 16,
            reason: "row count differs from the checkpoint",
        });
    }
    Ok(seg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_strangers_are_not_segments() {
        for kind in [SegmentKind::Flat, SegmentKind::Ivf] {
            let name = file_name(42, kind);
            assert_eq!(parse_file_name(&name), Some((42, kind)));
            assert_eq!(SegmentKind::from_code(kind.code()), Some(kind));
        }
        assert_eq!(file_name(7, SegmentKind::Ivf), "seg-0000000007.mnsi");
        for stranger in [
            "seg-42.mnsf",
            "seg-0000000042.mnsx",
            "seg-0000000042.mnsf.tmp",
            "seg-000000004x.mnsi",
            "ckpt-0000000042.mnsf",
        ] {
            assert_eq!(parse_file_name(stranger), None, "{stranger}");
        }
        assert_eq!(SegmentKind::from_code(0), None);
        assert_eq!(SegmentKind::from_code(3), None);
    }
}
