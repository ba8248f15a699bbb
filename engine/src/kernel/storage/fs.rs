//! The real file system.

use super::{Storage, StorageFile, StorageLock};
use amberdb_index::SealedBytes;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

/// [`Storage`] over `std::fs`.
#[derive(Debug, Default, Clone, Copy)]
pub struct FsStorage;

#[derive(Debug)]
struct FsFile(File);

impl StorageFile for FsFile {
    fn append(&self, buf: &[u8]) -> io::Result<()> {
        (&self.0).write_all(buf)
    }

    fn sync(&self) -> io::Result<()> {
        self.0.sync_data()
    }
}

#[derive(Debug)]
struct FsLock(#[expect(dead_code, reason = "held for its Drop, which releases the flock")] File);

impl StorageLock for FsLock {}

impl Storage for FsStorage {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)
    }

    fn len(&self, path: &Path) -> io::Result<u64> {
        std::fs::metadata(path).map(|m| m.len())
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            if let Ok(name) = entry?.file_name().into_string() {
                names.push(name);
            }
        }
        names.sort();
        Ok(names)
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        std::fs::read(path)
    }

    fn map(&self, path: &Path) -> io::Result<SealedBytes> {
        let file = File::open(path)?;
        SealedBytes::map_file(&file, &path.display().to_string()).map_err(io::Error::other)
    }

    fn create(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        // O_APPEND, like `open_append`: every write lands at the end even after `truncate`
        // cut the file back (a disk-full append, durability.md step 4); a plain write cursor
        // would stay past the cut and leave a hole of zeros in the log.
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        file.set_len(0)?;
        Ok(Box::new(FsFile(file)))
    }

    fn open_append(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        Ok(Box::new(FsFile(
            OpenOptions::new().append(true).open(path)?,
        )))
    }

    fn truncate(&self, path: &Path, len: u64) -> io::Result<()> {
        let f = OpenOptions::new().write(true).open(path)?;
        f.set_len(len)?;
        f.sync_all()
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }

    fn lock(&self, path: &Path) -> io::Result<Box<dyn StorageLock>> {
        let f = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)?;
        match f.try_lock() {
            Ok(()) => Ok(Box::new(FsLock(f))),
            Err(std::fs::TryLockError::WouldBlock) => Err(io::ErrorKind::WouldBlock.into()),
            Err(std::fs::TryLockError::Error(e)) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appends_after_a_truncate_land_at_the_new_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        std::fs::write(&path, b"old content").unwrap();
        let fs = FsStorage;
        let created = fs.create(&path).unwrap();
        created.append(b"abcdef").unwrap();
        fs.truncate(&path, 2).unwrap();
        created.append(b"XY").unwrap();
        assert_eq!(
            fs.read(&path).unwrap(),
            b"abXY",
            "no hole where the cut was"
        );
        let reopened = fs.open_append(&path).unwrap();
        fs.truncate(&path, 3).unwrap();
        reopened.append(b"Z").unwrap();
        assert_eq!(fs.read(&path).unwrap(), b"abXZ");
    }
}
