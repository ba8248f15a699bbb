//! All file I/O of the engine goes through [`Storage`] (`docs/durability.md`).
//!
//! [`FsStorage`] is the real file system. [`FaultyStorage`] is an in-memory file system that
//! keeps, per file, the bytes written and the bytes made durable by `sync`, and per directory
//! the entries made durable by `sync_dir`; it can fail the Nth operation (optionally tearing
//! that write), "crash" at the Nth sync, and produce the disk image a power cut would leave.
//! The engine never calls `std::fs` directly.

mod faulty;
mod fs;

pub use faulty::{CrashImage, FaultyStorage};
pub use fs::FsStorage;

use amberdb_index::SealedBytes;
use std::fmt::Debug;
use std::io;
use std::path::Path;

/// A file open for appending.
pub trait StorageFile: Send + Sync + Debug {
    /// Appends all of `buf`. On error an unknown prefix of `buf` may have been written.
    ///
    /// # Errors
    /// As the operating system reports.
    fn append(&self, buf: &[u8]) -> io::Result<()>;

    /// Makes every appended byte durable (`fdatasync`).
    ///
    /// # Errors
    /// As the operating system reports; after an error the file's durable state is unknown.
    fn sync(&self) -> io::Result<()>;
}

/// Holds an exclusive lock until dropped.
pub trait StorageLock: Send + Sync + Debug {}

/// The file-system operations the engine uses, and no others.
pub trait Storage: Send + Sync + Debug {
    /// Creates `dir` and its parents.
    ///
    /// # Errors
    /// As the operating system reports.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Names of the files in `dir`.
    ///
    /// # Errors
    /// As the operating system reports.
    fn list(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// The whole content of `path`.
    ///
    /// # Errors
    /// As the operating system reports.
    fn read(&self, path: &Path) -> io::Result<Vec<u8>>;
    /// The length of `path` in bytes (statistics only).
    ///
    /// # Errors
    /// As the operating system reports.
    fn len(&self, path: &Path) -> io::Result<u64> {
        self.read(path).map(|b| b.len() as u64)
    }
    /// A read-only view of a sealed (never again written) file.
    ///
    /// # Errors
    /// As the operating system reports.
    fn map(&self, path: &Path) -> io::Result<SealedBytes>;
    /// Creates `path` empty (truncating it if it exists) for appending.
    ///
    /// # Errors
    /// As the operating system reports.
    fn create(&self, path: &Path) -> io::Result<Box<dyn StorageFile>>;
    /// Opens an existing `path` for appending at its end.
    ///
    /// # Errors
    /// As the operating system reports.
    fn open_append(&self, path: &Path) -> io::Result<Box<dyn StorageFile>>;
    /// Cuts `path` to `len` bytes and syncs it.
    ///
    /// # Errors
    /// As the operating system reports.
    fn truncate(&self, path: &Path, len: u64) -> io::Result<()>;
    /// Renames `from` to `to`, replacing `to`. Durable after `sync_dir`.
    ///
    /// # Errors
    /// As the operating system reports.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes `path`. Durable after `sync_dir`.
    ///
    /// # Errors
    /// As the operating system reports.
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// Makes the entries of `dir` (creates, renames, removes) durable.
    ///
    /// # Errors
    /// As the operating system reports.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Takes an exclusive lock on `path`, creating it; `WouldBlock` if it is held.
    ///
    /// # Errors
    /// `WouldBlock` when held elsewhere, or as the operating system reports.
    fn lock(&self, path: &Path) -> io::Result<Box<dyn StorageLock>>;
}

/// Bytes a large file write appends between two fsyncs: dirty data never piles up past this,
/// so the log's fsyncs, which on ext4's ordered journal can wait for every dirty block of
/// the file system, never wait for a whole segment or checkpoint (`docs/durability.md`,
/// "Maintenance").
pub const SYNC_EVERY_BYTES: usize = 8 << 20;

/// Appends `bytes` to `file` and makes them durable, with an fsync every `SYNC_EVERY_BYTES`.
///
/// # Errors
/// As `append` and `sync`.
pub fn append_synced(file: &dyn StorageFile, bytes: &[u8]) -> io::Result<()> {
    for chunk in bytes.chunks(SYNC_EVERY_BYTES) {
        file.append(chunk)?;
        file.sync()?;
    }
    if bytes.is_empty() {
        file.sync()?;
    }
    Ok(())
}

/// Writes `bytes` as `name` atomically: `name.tmp`, fsync (every `SYNC_EVERY_BYTES`),
/// rename, directory fsync (`docs/durability.md` steps C1 and C3–C4).
///
/// # Errors
/// Any I/O failure; the caller poisons the store.
pub fn write_atomic(storage: &dyn Storage, dir: &Path, name: &str, bytes: &[u8]) -> io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    let file = storage.create(&tmp)?;
    append_synced(&*file, bytes)?;
    drop(file);
    storage.rename(&tmp, &dir.join(name))?;
    storage.sync_dir(dir)
}
