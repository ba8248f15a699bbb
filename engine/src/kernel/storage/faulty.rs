//! `FaultyStorage`: an in-memory file system with a power-cut model and fault injection.
//!
//! Model: every file (an inode) has `written` bytes and `durable` bytes; `sync` copies the
//! former to the latter. Every directory has its current entries and its durable entries;
//! `sync_dir` copies the former to the latter. A power cut ([`FaultyStorage::crash_image`])
//! keeps the durable entries and, for each file, its durable bytes, plus, depending on the
//! [`CrashImage`], nothing, a prefix, or all of the bytes appended since its last sync. That is
//! the ext4 `data=ordered` append model the log is designed for (`docs/durability.md`).
//!
//! Faults: `fail_op(n, torn)` makes the nth mutating operation (append, sync, create, rename,
//! remove, truncate, sync_dir; counted from 1) fail, writing half its buffer first when `torn`;
//! `crash_at_sync(n)` makes the nth sync (file or directory) fail without taking effect and
//! every later operation fail too, as if the machine had died there. `set_capacity(bytes)`
//! makes a full disk: an append past it writes what fits and fails with `StorageFull`
//! (ENOSPC), as `write(2)` does.

use super::{Storage, StorageFile, StorageLock};
use amberdb_index::SealedBytes;
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What survives of the bytes appended since a file's last sync.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashImage {
    /// Nothing (the page cache was lost).
    DropUnsynced,
    /// The first `numerator / 256` of them, cut at a 512-byte boundary when possible
    /// (a torn write).
    TearUnsynced {
        /// Fraction kept, in 256ths.
        numerator: u8,
    },
    /// All of them (a process kill: the page cache survives). Directory entries too.
    KeepUnsynced,
}

#[derive(Debug, Clone, Default)]
struct Inode {
    written: Vec<u8>,
    durable: Vec<u8>,
}

#[derive(Debug, Default)]
struct State {
    inodes: Vec<Inode>,
    entries: BTreeMap<PathBuf, usize>,
    durable_entries: BTreeMap<PathBuf, usize>,
    dirs: HashSet<PathBuf>,
    locks: HashSet<PathBuf>,
    ops: u64,
    syncs: u64,
    fail_op: Option<(u64, bool)>,
    crash_at_sync: Option<u64>,
    crashed: bool,
    capacity: Option<u64>,
}

fn injected() -> io::Error {
    io::Error::other("injected fault")
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, path.display().to_string())
}

impl State {
    /// Counts a mutating op; errors if it is the one to fail. Returns `Some(torn)` on failure.
    fn begin_op(&mut self) -> Result<(), bool> {
        if self.crashed {
            return Err(false);
        }
        self.ops += 1;
        match self.fail_op {
            Some((n, torn)) if n == self.ops => Err(torn),
            _ => Ok(()),
        }
    }

    fn begin_sync(&mut self) -> io::Result<()> {
        self.begin_op().map_err(|_| injected())?;
        self.syncs += 1;
        if self.crash_at_sync == Some(self.syncs) {
            self.crashed = true;
            return Err(injected());
        }
        Ok(())
    }

    /// Bytes held by the files that have a name.
    fn used(&self) -> u64 {
        self.entries
            .values()
            .filter_map(|&i| self.inodes.get(i))
            .map(|f| f.written.len() as u64)
            .sum()
    }

    fn inode(&self, path: &Path) -> io::Result<usize> {
        self.entries
            .get(path)
            .copied()
            .ok_or_else(|| not_found(path))
    }
}

/// The in-memory, fault-injecting [`Storage`]. Clones share the same disk.
#[derive(Debug, Clone, Default)]
pub struct FaultyStorage {
    state: Arc<Mutex<State>>,
}

#[derive(Debug)]
struct FaultyFile {
    state: Arc<Mutex<State>>,
    inode: usize,
}

impl StorageFile for FaultyFile {
    fn append(&self, buf: &[u8]) -> io::Result<()> {
        let mut s = self.state.lock();
        let inode = self.inode;
        match s.begin_op() {
            Ok(()) => {
                let room = s.capacity.map_or(u64::MAX, |c| c.saturating_sub(s.used()));
                let fits = usize::try_from(room).unwrap_or(usize::MAX).min(buf.len());
                if let Some(f) = s.inodes.get_mut(inode) {
                    f.written.extend_from_slice(buf.get(..fits).unwrap_or(&[]));
                }
                if fits < buf.len() {
                    return Err(io::ErrorKind::StorageFull.into());
                }
                Ok(())
            }
            Err(torn) => {
                if torn && let Some(f) = s.inodes.get_mut(inode) {
                    f.written
                        .extend_from_slice(buf.get(..buf.len() / 2).unwrap_or(&[]));
                }
                Err(injected())
            }
        }
    }

    fn sync(&self) -> io::Result<()> {
        let mut s = self.state.lock();
        s.begin_sync()?;
        if let Some(f) = s.inodes.get_mut(self.inode) {
            f.durable.clone_from(&f.written);
        }
        Ok(())
    }
}

#[derive(Debug)]
struct FaultyLock {
    state: Arc<Mutex<State>>,
    path: PathBuf,
}

impl StorageLock for FaultyLock {}

impl Drop for FaultyLock {
    fn drop(&mut self) {
        self.state.lock().locks.remove(&self.path);
    }
}

impl FaultyStorage {
    /// An empty disk with no faults planned.
    #[must_use]
    pub fn new() -> FaultyStorage {
        FaultyStorage::default()
    }

    /// Fails the `n`th mutating operation from now (1 = the next one); `torn` writes half of
    /// an append's buffer before failing.
    pub fn fail_op(&self, n: u64, torn: bool) {
        let mut s = self.state.lock();
        s.fail_op = Some((s.ops + n, torn));
    }

    /// "Crashes" at the `n`th sync from now: that sync does not take effect, it and every
    /// later operation fail.
    pub fn crash_at_sync(&self, n: u64) {
        let mut s = self.state.lock();
        s.crash_at_sync = Some(s.syncs + n);
    }

    /// Makes the disk hold at most `bytes` (over all named files), or lifts the limit.
    /// Lowering it below what is used fails the next append that grows a file.
    pub fn set_capacity(&self, bytes: Option<u64>) {
        self.state.lock().capacity = bytes;
    }

    /// Bytes held by the files that have a name.
    #[must_use]
    pub fn used_bytes(&self) -> u64 {
        self.state.lock().used()
    }

    /// Mutating operations so far.
    #[must_use]
    pub fn ops(&self) -> u64 {
        self.state.lock().ops
    }

    /// Syncs (file and directory) so far.
    #[must_use]
    pub fn syncs(&self) -> u64 {
        self.state.lock().syncs
    }

    /// Whether a planned crash has happened.
    #[must_use]
    pub fn crashed(&self) -> bool {
        self.state.lock().crashed
    }

    /// The disk a power cut would leave now, as a fresh storage with no faults and no locks.
    #[must_use]
    pub fn crash_image(&self, image: CrashImage) -> FaultyStorage {
        let s = self.state.lock();
        let entries = if image == CrashImage::KeepUnsynced {
            &s.entries
        } else {
            &s.durable_entries
        };
        let mut out = State {
            dirs: s.dirs.clone(),
            ..State::default()
        };
        for (path, &inode) in entries {
            let Some(f) = s.inodes.get(inode) else {
                continue;
            };
            let content = match image {
                CrashImage::KeepUnsynced => f.written.clone(),
                CrashImage::DropUnsynced => f.durable.clone(),
                CrashImage::TearUnsynced { numerator } => {
                    if f.written.starts_with(&f.durable) {
                        let extra = f.written.len() - f.durable.len();
                        let mut keep = extra * usize::from(numerator) / 256;
                        if keep >= 512 {
                            keep -= keep % 512;
                        }
                        f.written
                            .get(..f.durable.len() + keep)
                            .unwrap_or(&f.durable)
                            .to_vec()
                    } else {
                        f.durable.clone()
                    }
                }
            };
            out.inodes.push(Inode {
                written: content.clone(),
                durable: content,
            });
            let id = out.inodes.len() - 1;
            out.entries.insert(path.clone(), id);
            out.durable_entries.insert(path.clone(), id);
        }
        FaultyStorage {
            state: Arc::new(Mutex::new(out)),
        }
    }

    /// Replaces the content of `path` (durably), for corruption tests.
    ///
    /// # Errors
    /// `NotFound` when there is no such file.
    pub fn overwrite(&self, path: &Path, content: Vec<u8>) -> io::Result<()> {
        let mut s = self.state.lock();
        let inode = s.inode(path)?;
        if let Some(f) = s.inodes.get_mut(inode) {
            f.written.clone_from(&content);
            f.durable = content;
        }
        Ok(())
    }
}

impl Storage for FaultyStorage {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.state.lock().dirs.insert(dir.to_path_buf());
        Ok(())
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let s = self.state.lock();
        if !s.dirs.contains(dir) {
            return Err(not_found(dir));
        }
        Ok(s.entries
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name()?.to_str().map(str::to_owned))
            .collect())
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        let s = self.state.lock();
        let inode = s.inode(path)?;
        Ok(s.inodes
            .get(inode)
            .map(|f| f.written.clone())
            .unwrap_or_default())
    }

    fn map(&self, path: &Path) -> io::Result<SealedBytes> {
        let s = self.state.lock();
        let inode = s.inode(path)?;
        Ok(SealedBytes::copy_from(
            s.inodes.get(inode).map_or(&[][..], |f| &f.written),
        ))
    }

    fn create(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        let mut s = self.state.lock();
        s.begin_op().map_err(|_| injected())?;
        let inode = match s.entries.get(path) {
            Some(&i) => {
                if let Some(f) = s.inodes.get_mut(i) {
                    f.written.clear();
                }
                i
            }
            None => {
                s.inodes.push(Inode::default());
                let i = s.inodes.len() - 1;
                s.entries.insert(path.to_path_buf(), i);
                i
            }
        };
        Ok(Box::new(FaultyFile {
            state: Arc::clone(&self.state),
            inode,
        }))
    }

    fn open_append(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        let s = self.state.lock();
        let inode = s.inode(path)?;
        Ok(Box::new(FaultyFile {
            state: Arc::clone(&self.state),
            inode,
        }))
    }

    fn truncate(&self, path: &Path, len: u64) -> io::Result<()> {
        let mut s = self.state.lock();
        s.begin_sync()?;
        let inode = s.inode(path)?;
        if let Some(f) = s.inodes.get_mut(inode) {
            f.written
                .truncate(usize::try_from(len).unwrap_or(usize::MAX));
            f.durable.clone_from(&f.written);
        }
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut s = self.state.lock();
        s.begin_op().map_err(|_| injected())?;
        let inode = s.entries.remove(from).ok_or_else(|| not_found(from))?;
        s.entries.insert(to.to_path_buf(), inode);
        Ok(())
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        let mut s = self.state.lock();
        s.begin_op().map_err(|_| injected())?;
        s.entries
            .remove(path)
            .map(|_| ())
            .ok_or_else(|| not_found(path))
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut s = self.state.lock();
        s.begin_sync()?;
        let State {
            entries,
            durable_entries,
            ..
        } = &mut *s;
        durable_entries.retain(|p, _| p.parent() != Some(dir));
        for (p, i) in entries.iter().filter(|(p, _)| p.parent() == Some(dir)) {
            durable_entries.insert(p.clone(), *i);
        }
        Ok(())
    }

    fn lock(&self, path: &Path) -> io::Result<Box<dyn StorageLock>> {
        let mut s = self.state.lock();
        if !s.locks.insert(path.to_path_buf()) {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(Box::new(FaultyLock {
            state: Arc::clone(&self.state),
            path: path.to_path_buf(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn power_cut_keeps_only_synced_bytes_and_entries() {
        let fs = FaultyStorage::new();
        let dir = Path::new("/d");
        fs.create_dir_all(dir).unwrap();
        let f = fs.create(&dir.join("a")).unwrap();
        f.append(b"hello").unwrap();
        f.sync().unwrap();
        f.append(b" world").unwrap();
        // Entry not yet durable: the file vanishes.
        assert!(
            fs.crash_image(CrashImage::DropUnsynced)
                .read(&dir.join("a"))
                .is_err()
        );
        fs.sync_dir(dir).unwrap();
        assert_eq!(
            fs.crash_image(CrashImage::DropUnsynced)
                .read(&dir.join("a"))
                .unwrap(),
            b"hello"
        );
        assert_eq!(
            fs.crash_image(CrashImage::KeepUnsynced)
                .read(&dir.join("a"))
                .unwrap(),
            b"hello world"
        );
        let torn = fs
            .crash_image(CrashImage::TearUnsynced { numerator: 128 })
            .read(&dir.join("a"))
            .unwrap();
        assert_eq!(torn, b"hello wo");
    }

    #[test]
    fn planned_faults_fire_once_or_forever() {
        let fs = FaultyStorage::new();
        fs.create_dir_all(Path::new("/d")).unwrap();
        let f = fs.create(Path::new("/d/a")).unwrap();
        fs.fail_op(1, true);
        assert!(f.append(b"abcd").is_err());
        assert_eq!(fs.read(Path::new("/d/a")).unwrap(), b"ab");
        f.append(b"x").unwrap();
        fs.crash_at_sync(1);
        assert!(f.sync().is_err());
        assert!(f.append(b"y").is_err() && fs.crashed());
    }

    #[test]
    fn a_full_disk_writes_what_fits_and_says_storage_full() {
        let fs = FaultyStorage::new();
        fs.create_dir_all(Path::new("/d")).unwrap();
        let f = fs.create(Path::new("/d/a")).unwrap();
        f.append(b"abc").unwrap();
        fs.set_capacity(Some(5));
        let e = f.append(b"defg").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::StorageFull);
        assert_eq!(fs.read(Path::new("/d/a")).unwrap(), b"abcde");
        fs.remove(Path::new("/d/a")).unwrap();
        assert_eq!(fs.used_bytes(), 0, "a removed file frees its space");
        fs.set_capacity(None);
        f.append(b"h").unwrap();
    }

    #[test]
    fn lock_is_exclusive_until_dropped() {
        let fs = FaultyStorage::new();
        let l = fs.lock(Path::new("/LOCK")).unwrap();
        assert_eq!(
            fs.lock(Path::new("/LOCK")).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
        drop(l);
        assert!(fs.lock(Path::new("/LOCK")).is_ok());
    }
}
