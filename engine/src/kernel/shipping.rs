//! What a shipped checkpoint of a store is made of (`docs/cluster.md`, "Shipped checkpoints
//! and new nodes"): the store's identity, its checkpoint and segment files, and the log file
//! that follows its newest checkpoint as its header alone (an empty log: recovery wants one
//! after a checkpoint, and a replica's open removes it and reads the stream instead).
//!
//! Guarantees: only names the open recognises as this store's files are listed; segment files
//! (never rewritten under their name) are the only ones [`is_immutable`] says so of.

use crate::kernel::{checkpoint, identity, log, segment_file};
use std::path::Path;

/// What a ship of a store directory takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shippable {
    /// The newest checkpoint's sequence number.
    pub seq: u64,
    /// Each file's name and the bytes to ship of it (a prefix), sorted by name.
    pub files: Vec<(String, u64)>,
}

/// What a ship of the store in `dir` takes; `None` while the store has no checkpoint (or the
/// log after it is not there yet).
///
/// # Errors
/// The directory could not be read.
pub fn shippable_files(dir: &Path) -> std::io::Result<Option<Shippable>> {
    let mut files = Vec::new();
    let mut newest = None;
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let Ok(name) = e.file_name().into_string() else {
            continue;
        };
        let seq = checkpoint::format::parse_file_name(&name);
        if seq.is_some() {
            newest = newest.max(seq);
        }
        if name == identity::FILE_NAME
            || seq.is_some()
            || segment_file::parse_file_name(&name).is_some()
        {
            files.push((name, e.metadata()?.len()));
        }
    }
    let Some(seq) = newest else {
        return Ok(None);
    };
    let next_log = log::writer::file_name(seq + 1);
    if !dir.join(&next_log).exists() {
        return Ok(None);
    }
    files.push((next_log, log::format::HEADER_LEN as u64));
    files.sort();
    Ok(Some(Shippable { seq, files }))
}

/// Whether the store file `name` never changes once written (a segment file).
#[must_use]
pub fn is_immutable(name: &str) -> bool {
    segment_file::parse_file_name(name).is_some()
}

/// Whether `dir` holds a store (its `IDENTITY` file).
#[must_use]
pub fn holds_store(dir: &Path) -> bool {
    dir.join(identity::FILE_NAME).exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ship_takes_the_identity_checkpoints_segments_and_the_next_logs_header() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!holds_store(dir.path()));
        for (name, len) in [
            ("IDENTITY", 80),
            ("ckpt-00000000000000000007.ckpt", 500),
            ("seg-0000000001.mnsf", 300),
            ("wal-00000000000000000001.log", 900),
            ("LOCK", 0),
            ("notes.txt", 3),
        ] {
            std::fs::write(dir.path().join(name), vec![0u8; len]).unwrap();
        }
        assert_eq!(
            shippable_files(dir.path()).unwrap(),
            None,
            "no log after it yet"
        );
        std::fs::write(dir.path().join("wal-00000000000000000008.log"), [0u8; 200]).unwrap();
        let Shippable { seq, files } = shippable_files(dir.path()).unwrap().unwrap();
        assert_eq!(seq, 7);
        assert_eq!(
            files,
            [
                ("IDENTITY", 80),
                ("ckpt-00000000000000000007.ckpt", 500),
                ("seg-0000000001.mnsf", 300),
                ("wal-00000000000000000008.log", 64),
            ]
            .map(|(n, l)| (n.to_owned(), l))
        );
        assert!(holds_store(dir.path()));
        assert!(is_immutable("seg-0000000001.mnsf") && !is_immutable("IDENTITY"));
    }
}
