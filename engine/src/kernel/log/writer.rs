//! Appends frames to the active log file.

use super::format::encode_header;
use crate::kernel::storage::{Storage, StorageFile};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The file name of the log file whose first frame is `first_seq`.
#[must_use]
pub fn file_name(first_seq: u64) -> String {
    format!("wal-{first_seq:020}.log")
}

/// Parses a log file name back to its first sequence number.
#[must_use]
pub fn parse_file_name(name: &str) -> Option<u64> {
    name.strip_prefix("wal-")?
        .strip_suffix(".log")
        .filter(|d| d.len() == 20)?
        .parse()
        .ok()
}

/// The active log file.
#[derive(Debug, Clone)]
pub struct LogWriter {
    pub(crate) path: PathBuf,
    /// The sequence number its first frame has (its name's).
    pub(crate) first_seq: u64,
    pub(crate) file: Arc<dyn StorageFile>,
    pub(crate) bytes: u64,
}

impl LogWriter {
    /// Creates a new log file of the store `owner` names, starting at `first_seq`: header
    /// written and fsynced, directory fsynced (`docs/durability.md` steps C2 and R3a).
    ///
    /// # Errors
    /// Any I/O failure; the caller poisons the store.
    pub fn create(
        storage: &dyn Storage,
        dir: &Path,
        first_seq: u64,
        owner: amberdb_index::Owner,
    ) -> io::Result<LogWriter> {
        let path = dir.join(file_name(first_seq));
        let file: Arc<dyn StorageFile> = Arc::from(storage.create(&path)?);
        let header = encode_header(first_seq, owner);
        file.append(&header)?;
        file.sync()?;
        storage.sync_dir(dir)?;
        Ok(LogWriter {
            path,
            first_seq,
            file,
            bytes: header.len() as u64,
        })
    }

    /// Opens an existing, already recovered log file for appending after `len` bytes.
    ///
    /// # Errors
    /// `InvalidInput` for a path that is not a log file's name; any I/O failure.
    pub fn open(storage: &dyn Storage, path: PathBuf, len: u64) -> io::Result<LogWriter> {
        let first_seq = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(parse_file_name)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "not a log file's name"))?;
        let file = Arc::from(storage.open_append(&path)?);
        Ok(LogWriter {
            path,
            first_seq,
            file,
            bytes: len,
        })
    }

    /// Appends an encoded frame (`format::encode_frame`; not synced). Returns the bytes
    /// written. The store encodes first, so an operation too big for one frame is refused
    /// before anything reaches the file.
    ///
    /// # Errors
    /// Any I/O failure; an unknown prefix may be on disk, so the caller poisons the store.
    pub fn append_frame(&mut self, frame: &[u8]) -> io::Result<u64> {
        self.file.append(frame)?;
        self.bytes += frame.len() as u64;
        Ok(frame.len() as u64)
    }
}
