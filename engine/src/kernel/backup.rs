//! Online backup and offline restore (`docs/durability.md`, "Backup and restore", K1–K4).
//!
//! A backup is the store's own files, copied byte for byte into an empty directory: the
//! newest checkpoint, the segments it names, and the log after it cut at one durable commit.
//! `IDENTITY` is written last: a directory holding store files without it refuses to open, so
//! an interrupted backup or restore is never taken for a store with less in it. `Db::backup`
//! chooses the files under the store's locks (K1–K2); this module copies them (K3–K4).

use crate::kernel::checkpoint::format as ckpt_format;
use crate::kernel::db::{Db, Durability};
use crate::kernel::error::{KernelError, Result};
use crate::kernel::error::{internal, io_error};
use crate::kernel::identity;
use crate::kernel::log::writer as log_writer;
use crate::kernel::segment_file;
use crate::kernel::storage::{FsStorage, Storage};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// What a backup wrote (`Store::backup`).
#[derive(Debug, Clone, PartialEq)]
pub struct Backup {
    /// The directory written.
    pub dest: PathBuf,
    /// The commit it holds: opened, the backup is the store as it was after this sequence
    /// number.
    pub seq: u64,
    /// Files copied.
    pub files: usize,
    /// Their bytes.
    pub bytes: u64,
    /// Wall time.
    pub seconds: f64,
}

/// What a restore wrote (`amberdb::restore`).
#[derive(Debug, Clone, PartialEq)]
pub struct Restored {
    /// Files copied.
    pub files: usize,
    /// Their bytes.
    pub bytes: u64,
    /// Wall time, the check of the backup included.
    pub seconds: f64,
}

/// One file to copy: its name, and how many of its bytes (`None`: all).
pub(crate) struct Part {
    pub(crate) name: String,
    pub(crate) len: Option<u64>,
}

/// Whether `name` is one of a store's files (not `LOCK`, not a temporary).
pub(crate) fn is_store_file(name: &str) -> bool {
    name == identity::FILE_NAME
        || log_writer::parse_file_name(name).is_some()
        || ckpt_format::parse_file_name(name).is_some()
        || segment_file::parse_file_name(name).is_some()
}

fn invalid(field: &'static str, reason: String) -> KernelError {
    KernelError::Invalid { field, reason }
}

/// K3's target: `dest` must not be the store or inside it, and must hold no file; it is
/// created if missing.
pub(crate) fn prepare_dest(storage: &dyn Storage, store_dir: &Path, dest: &Path) -> Result<()> {
    let absolute = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    if absolute(dest).starts_with(absolute(store_dir)) {
        return Err(invalid(
            "dest",
            format!(
                "{} is the store's directory or inside it; back up to a directory of its own",
                dest.display()
            ),
        ));
    }
    match storage.list(dest) {
        Ok(names) if !names.is_empty() => Err(invalid(
            "dest",
            format!(
                "{} is not empty ({} entries); a backup goes into a new or empty directory",
                dest.display(),
                names.len()
            ),
        )),
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            storage.create_dir_all(dest).map_err(KernelError::io(dest))
        }
        Err(e) => Err(KernelError::Io {
            path: dest.to_path_buf(),
            source: e,
        }),
    }
}

/// Copies `len` bytes (all when `None`) of `from` to `to`, durably. Returns the bytes copied.
fn copy_file(storage: &dyn Storage, from: &Path, to: &Path, len: Option<u64>) -> Result<u64> {
    let src = storage.map(from).map_err(KernelError::io(from))?;
    let bytes = src.as_slice();
    let n = len.map_or(bytes.len(), |l| {
        usize::try_from(l).unwrap_or(usize::MAX).min(bytes.len())
    });
    if len.is_some_and(|l| l > n as u64) {
        return Err(KernelError::Corrupted {
            file: from.to_path_buf(),
            offset: n as u64,
            reason: "shorter than the length the backup was taken at",
        });
    }
    let file = storage.create(to).map_err(KernelError::io(to))?;
    crate::kernel::storage::append_synced(&*file, bytes.get(..n).unwrap_or_default())
        .map_err(|source| io_error(to.to_path_buf(), source))?;
    Ok(n as u64)
}

/// Refuses a file among `parts` (in `from`) that `identity` does not own: a backup or a
/// restore copies only the store's own files (`docs/durability.md`, "File identity").
fn check_owners(
    storage: &dyn Storage,
    from: &Path,
    identity: &identity::Identity,
    parts: &[Part],
) -> Result<()> {
    for part in parts {
        let path = from.join(&part.name);
        let owner = crate::kernel::ownership::header_owner(storage, &path)
            .unwrap_or(amberdb_index::Owner::NONE);
        if let identity::Verdict::Foreign(why) = identity.judge(owner) {
            return Err(KernelError::Foreign { file: path, why });
        }
    }
    Ok(())
}

/// What a copy writes last, before `IDENTITY`: a restore's new incarnation, with the log file
/// it begins (`docs/durability.md`, "Backup and restore").
pub(crate) struct Finish {
    /// The `IDENTITY` to write (`None`: the source's, byte for byte).
    identity: Option<identity::Identity>,
    /// A new log file to create, starting at this sequence number, of that identity.
    log_from: Option<u64>,
}

/// K3–K4: copies `parts` from `from` into `dest` (already prepared), then `IDENTITY` as the
/// commit point. On failure removes what it wrote. Returns the files and bytes written.
pub(crate) fn copy_store_files(
    storage: &dyn Storage,
    from: &Path,
    dest: &Path,
    parts: &[Part],
    finish: &Finish,
) -> Result<(usize, u64)> {
    let mut written: Vec<PathBuf> = Vec::new();
    let result = (|| {
        let mut bytes = 0;
        for part in parts {
            let to = dest.join(&part.name);
            written.push(to.clone());
            bytes += copy_file(storage, &from.join(&part.name), &to, part.len)?;
        }
        let mut files = parts.len() + 1;
        if let (Some(first), Some(id)) = (finish.log_from, &finish.identity) {
            written.push(dest.join(crate::kernel::log::writer::file_name(first)));
            crate::kernel::log::writer::LogWriter::create(storage, dest, first, id.owner())
                .map_err(KernelError::io(dest))?;
            files += 1;
        }
        storage.sync_dir(dest).map_err(KernelError::io(dest))?;
        let id_from = from.join(identity::FILE_NAME);
        let id = match &finish.identity {
            Some(id) => identity::encode(id),
            None => storage.read(&id_from).map_err(KernelError::io(&id_from))?,
        };
        let id_to = dest.join(identity::FILE_NAME);
        written.push(id_to.clone());
        written.push(dest.join(format!("{}.tmp", identity::FILE_NAME)));
        crate::kernel::storage::write_atomic(storage, dest, identity::FILE_NAME, &id)
            .map_err(|source| io_error(id_to.clone(), source))?;
        Ok((files, bytes + id.len() as u64))
    })();
    if result.is_err() {
        for path in &written {
            let _ = storage.remove(path);
        }
        let _ = storage.sync_dir(dest);
    }
    result
}

/// The last sequence number a (checked) backup holds, and the name of its newest log file
/// when that holds no frame.
fn backup_end(storage: &dyn Storage, backup: &Path) -> Result<(u64, Option<String>)> {
    let names = storage.list(backup).map_err(KernelError::io(backup))?;
    let newest_log = names
        .iter()
        .filter_map(|n| crate::kernel::log::writer::parse_file_name(n))
        .max();
    let newest_ckpt = names
        .iter()
        .filter_map(|n| ckpt_format::parse_file_name(n))
        .max()
        .unwrap_or(0);
    let Some(first) = newest_log else {
        return Ok((newest_ckpt, None));
    };
    let name = crate::kernel::log::writer::file_name(first);
    let path = backup.join(&name);
    let bytes = storage.map(&path).map_err(KernelError::io(&path))?;
    let scan = crate::kernel::log::reader::scan::<()>(bytes.as_slice(), |_, _, _| Ok(())).map_err(
        |_| KernelError::Corrupted {
            file: path.clone(),
            offset: 0,
            reason: "the backup's newest log does not read",
        },
    )?;
    let last = (first + scan.frames).saturating_sub(1).max(newest_ckpt);
    Ok((last, (scan.frames == 0).then_some(name)))
}

/// Restores the backup in `backup` into `dir`, offline (`crate::restore` documents it).
pub(crate) fn restore(backup: &Path, dir: &Path) -> Result<Restored> {
    let start = Instant::now();
    let storage = FsStorage;
    let report = crate::kernel::verify::verify(backup)?;
    let has_identity = storage
        .list(backup)
        .map_err(KernelError::io(backup))?
        .iter()
        .any(|n| n == identity::FILE_NAME);
    if report.errors() > 0 || !has_identity {
        let first = report
            .findings
            .iter()
            .find(|f| f.severity == crate::kernel::verify::Severity::Error)
            .map_or_else(
                || "it has no IDENTITY".to_owned(),
                |f| format!("{}: {}", f.file, f.what),
            );
        return Err(invalid(
            "backup",
            format!(
                "{} is not a complete backup ({} error(s); first: {first}); amberdb check says more",
                backup.display(),
                report.errors()
            ),
        ));
    }
    let _lock = crate::kernel::recovery::lock_dir(&storage, dir)?;
    let present: Vec<String> = storage
        .list(dir)
        .map_err(KernelError::io(dir))?
        .into_iter()
        .filter(|n| is_store_file(n))
        .collect();
    if !present.is_empty() {
        return Err(invalid(
            "dir",
            format!(
                "{} holds a store ({} store files); restore into a new or empty directory",
                dir.display(),
                present.len()
            ),
        ));
    }
    let id_path = backup.join(identity::FILE_NAME);
    let id_bytes = storage.read(&id_path).map_err(KernelError::io(&id_path))?;
    let backed_up = identity::decode(&id_bytes)
        .map_err(|_| invalid("backup", format!("{}: damaged", id_path.display())))?;
    let mut parts: Vec<Part> = storage
        .list(backup)
        .map_err(KernelError::io(backup))?
        .into_iter()
        .filter(|n| is_store_file(n) && n != identity::FILE_NAME)
        .map(|name| Part { name, len: None })
        .collect();
    check_owners(&storage, backup, &backed_up, &parts)?;
    // The restore is a new incarnation of the store: the same id, a new incarnation from
    // the backup's last commit on, and a log file of its own after it, so the frames it
    // writes never land in a file of the old one (`docs/durability.md`, "Backup and restore").
    let (last_seq, empty_newest) = backup_end(&storage, backup)?;
    let since_segment = parts
        .iter()
        .filter_map(|p| segment_file::parse_file_name(&p.name))
        .map(|(id, _)| id + 1)
        .max()
        .unwrap_or(1);
    let upgraded = backed_up.upgraded().map_err(KernelError::io(&id_path))?;
    let restored = upgraded
        .restored(last_seq, since_segment)
        .map_err(KernelError::io(&id_path))?
        .ok_or_else(|| {
            invalid(
                "backup",
                format!(
                    "{} has been restored {} times; back up the restored store again instead",
                    backup.display(),
                    identity::MAX_INCARNATIONS
                ),
            )
        })?;
    // A newest log holding no frame is replaced by the restore's own.
    if let Some(name) = &empty_newest {
        parts.retain(|p| p.name != *name);
    }
    let finish = Finish {
        identity: Some(restored),
        log_from: Some(last_seq + 1),
    };
    let (files, bytes) = copy_store_files(&storage, backup, dir, &parts, &finish)?;
    Ok(Restored {
        files,
        bytes,
        seconds: start.elapsed().as_secs_f64(),
    })
}

impl Db {
    /// Copies the store into `dest` as it is at one commit, while reads and writes go on
    /// (`docs/durability.md`, "Backup and restore", K1–K4).
    ///
    /// # Errors
    /// `Invalid` for a `dest` that is not empty or is inside the store; `Poisoned`; `Io`,
    /// `DiskFull` (what was written is removed).
    pub(crate) fn backup(&self, dest: &Path) -> Result<Backup> {
        self.backup_at(dest)
            .map_err(KernelError::descriptors_told_apart)
    }

    /// `backup`, with I/O errors as they came.
    fn backup_at(&self, dest: &Path) -> Result<Backup> {
        let start = Instant::now();
        let storage = self.storage();
        // K1: no file the backup reads is removed or replaced until it is done.
        let _turn = self.checkpointing.lock();
        // K2: one durable commit, and where each file ends for it. A poisoned store is
        // refused here, before anything is created.
        let (seq, checkpoint, active, active_len) = {
            let mut w = self.writer.lock();
            self.not_restoring()?;
            self.drain_touches(&mut w);
            self.journal.check()?;
            let seq = self.journal.written();
            self.acknowledge(&Durability::Forced, seq)?;
            let checkpoint = w.checkpoints.last().map_or(0, |c| c.seq);
            let active = self.journal.active();
            (seq, checkpoint, active.first_seq, active.bytes)
        };
        prepare_dest(storage, &self.dir, dest)?;
        // K3's list: the checkpoint's segments and the checkpoint, then the log after it.
        let mut parts = Vec::new();
        if checkpoint > 0 {
            let name = ckpt_format::file_name(checkpoint);
            let path = self.dir.join(&name);
            let bytes = storage.map(&path).map_err(KernelError::io(&path))?;
            let head =
                crate::kernel::checkpoint::reader::decode_head(bytes.as_slice()).map_err(|_| {
                    KernelError::Corrupted {
                        file: path.clone(),
                        offset: 0,
                        reason: "the newest checkpoint's head does not decode",
                    }
                })?;
            parts.extend(head.segments.iter().map(|e| Part {
                name: e.file_name(),
                len: None,
            }));
            // A delta is opened with its base ("Incremental checkpoints").
            if let Some(delta) = &head.delta {
                parts.push(Part {
                    name: ckpt_format::file_name(delta.base_seq),
                    len: None,
                });
            }
            parts.push(Part { name, len: None });
        }
        let mut logs: Vec<u64> = storage
            .list(&self.dir)
            .map_err(KernelError::io(&self.dir))?
            .iter()
            .filter_map(|n| crate::kernel::log::writer::parse_file_name(n))
            .filter(|&first| first > checkpoint && first <= active)
            .collect();
        logs.sort_unstable();
        parts.extend(logs.into_iter().map(|first| Part {
            name: crate::kernel::log::writer::file_name(first),
            len: (first == active).then_some(active_len),
        }));
        // Only the store's own files: one copied in beside it since the open is refused.
        check_owners(storage, &self.dir, &self.identity, &parts)?;
        // K3–K4, with the writer mutex released: writes go on. The copy runs on a thread of
        // lower priority, as maintenance does, so that requests come first.
        let finish = Finish {
            identity: None,
            log_from: None,
        };
        let (files, bytes) = std::thread::scope(|s| {
            s.spawn(|| {
                crate::kernel::maintenance::lower_priority();
                copy_store_files(storage, &self.dir, dest, &parts, &finish)
            })
            .join()
        })
        .map_err(|_| internal("copying the backup", "the copy thread panicked"))??;
        Ok(Backup {
            dest: dest.to_path_buf(),
            seq,
            files,
            bytes,
            seconds: start.elapsed().as_secs_f64(),
        })
    }
}
