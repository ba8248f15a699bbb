//! All file I/O of the engine goes through [`Storage`] (`docs/durability.md`).
//!
//! [`FsStorage`] is the real file system. [`FaultyStorage`] is an in-memory file system that
//! keeps, per file, the bytes written and the bytes made durable by `sync`, and per directory
//! the entries made durable by `sync_dir`; it can fail the Nth operation (optionally tearing
//! that write), "crash" at the Nth sync, and produce the disk image a power cut would leave.
//! The engine never calls `std::fs` directly.

#[cfg(any(test, feature = "testing"))]
mod faulty;
mod fs;

#[cfg(any(test, feature = "testing"))]
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
    /// A read-only view of a file nothing writes while the view is held: a sealed one (never
    /// written again), or at recovery a log file being replayed (`docs/safety.md`).
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
    write_atomic_pieces(storage, dir, name, &mut |put| {
        put(bytes);
    })
}

/// Takes a piece of a file, answering whether to go on (`write_atomic_pieces`).
pub type PieceSink<'a> = dyn FnMut(&[u8]) -> bool + 'a;

/// `write_atomic` for a file made in pieces, never whole in memory (a purge's rewrite of a
/// gigabyte segment): `produce` hands each piece, in order, to the function it is given,
/// which answers whether to go on. Pieces are gathered into appends of `SYNC_EVERY_BYTES`,
/// each fsynced; the first failure stops the writing and is returned.
///
/// # Errors
/// Any I/O failure; the caller poisons the store.
pub fn write_atomic_pieces(
    storage: &dyn Storage,
    dir: &Path,
    name: &str,
    produce: &mut dyn FnMut(&mut PieceSink<'_>),
) -> io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    let file = storage.create(&tmp)?;
    let mut failed = None;
    let mut pending: Vec<u8> = Vec::new();
    {
        let mut append = |bytes: &[u8]| match append_synced(&*file, bytes) {
            Ok(()) => true,
            Err(e) => {
                failed = Some(e);
                false
            }
        };
        produce(&mut |mut piece| {
            while !piece.is_empty() {
                if pending.is_empty() && piece.len() >= SYNC_EVERY_BYTES {
                    // Whole chunks of a large piece go out as they are, without a copy.
                    let at = piece.len() - piece.len() % SYNC_EVERY_BYTES;
                    let (whole, rest) = piece.split_at(at);
                    piece = rest;
                    if !append(whole) {
                        return false;
                    }
                    continue;
                }
                let take = piece.len().min(SYNC_EVERY_BYTES - pending.len());
                let (now, rest) = piece.split_at(take);
                pending.extend_from_slice(now);
                piece = rest;
                if pending.len() == SYNC_EVERY_BYTES {
                    if !append(&pending) {
                        return false;
                    }
                    pending.clear();
                }
            }
            true
        });
    }
    if let Some(e) = failed {
        return Err(e);
    }
    append_synced(&*file, &pending)?;
    drop(file);
    storage.rename(&tmp, &dir.join(name))?;
    storage.sync_dir(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_written_in_pieces_is_their_concatenation_synced_every_chunk() {
        // Pieces smaller than a chunk, one that fills the pending chunk exactly, one larger
        // than two chunks arriving with none pending, and one arriving with some pending.
        let big = |n: usize, b: u8| vec![b; n];
        let pieces = [
            big(3, 1),
            big(SYNC_EVERY_BYTES - 3, 2),
            big(2 * SYNC_EVERY_BYTES + 5, 3),
            big(SYNC_EVERY_BYTES + 1, 4),
            big(0, 5),
            big(7, 6),
        ];
        let whole: Vec<u8> = pieces.concat();
        let fs = FaultyStorage::new();
        let dir = Path::new("/d");
        fs.create_dir_all(dir).unwrap();
        write_atomic_pieces(&fs, dir, "f", &mut |put| {
            for p in &pieces {
                assert!(put(p));
            }
        })
        .unwrap();
        assert!(fs.read(&dir.join("f")).unwrap() == whole);
        assert!(fs.read(&dir.join("f.tmp")).is_err(), "renamed");
        // Durable after a power cut, and never more than a chunk unsynced on the way.
        let cut = fs.crash_image(CrashImage::DropUnsynced);
        assert!(cut.read(&dir.join("f")).unwrap() == whole);
        // One fsync per chunk (the last one partial), and the directory's.
        assert_eq!(
            fs.syncs(),
            whole.len().div_ceil(SYNC_EVERY_BYTES) as u64 + 1
        );

        // A failing append stops the pieces: the producer is told, and the error returned.
        let fs = FaultyStorage::new();
        fs.create_dir_all(dir).unwrap();
        fs.fail_op(3, false);
        let mut refused = 0;
        let e = write_atomic_pieces(&fs, dir, "g", &mut |put| {
            for p in &pieces {
                if !put(p) {
                    refused += 1;
                    return;
                }
            }
        });
        assert!(e.is_err());
        assert_eq!(refused, 1);
        assert!(fs.read(&dir.join("g")).is_err(), "never renamed into place");
    }
}
