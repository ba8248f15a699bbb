//! The local journal: the store's log files (`docs/format/log.md`) and group commit
//! (`crate::kernel::commit`), behind [`Journal`].
//!
//! Guarantees: frames go to the active file only, in sequence order; `acknowledge(seq)` returns
//! once an fsync that started after frame `seq` was appended has succeeded (one fsync for every
//! waiter it covers); a failed fsync or append poisons it for good (the page cache can no
//! longer be trusted), while an append refused for a full disk is cut back and leaves it
//! writable (`docs/durability.md` step 4).

use super::replay::Replay;
use super::{ActiveLog, ApplyFrame, Journal, ReplayReport};
use crate::kernel::commit::{GroupCommit, PoisonCause};
use crate::kernel::error::{KernelError, Result, io_error, is_disk_full};
use crate::kernel::log::writer::{self as log_writer, LogWriter};
use crate::kernel::storage::{Storage, StorageFile};
use amberdb_index::Owner;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A store's log files.
#[derive(Debug)]
pub(crate) struct LocalJournal {
    storage: Arc<dyn Storage>,
    dir: PathBuf,
    /// The store every file it creates names.
    owner: Owner,
    /// The log files found at the open (first sequence numbers, ascending), and for those of
    /// an earlier incarnation the last sequence number of them this store shares (R3c).
    found: Vec<u64>,
    limits: BTreeMap<u64, u64>,
    /// Bytes of the log files after the checkpoint, as the replay found them.
    replayed_bytes: u64,
    commit: GroupCommit,
    /// `None` until the replay opened it (R8).
    active: Mutex<Option<LogWriter>>,
}

impl LocalJournal {
    /// The journal of the log files `found` in `dir` (first sequence numbers, ascending;
    /// `limits`: R3c's), before its replay.
    pub(crate) fn new(
        storage: Arc<dyn Storage>,
        dir: &Path,
        owner: Owner,
        found: Vec<u64>,
        limits: BTreeMap<u64, u64>,
    ) -> LocalJournal {
        LocalJournal {
            storage,
            dir: dir.to_path_buf(),
            owner,
            found,
            limits,
            replayed_bytes: 0,
            commit: GroupCommit::new(0),
            active: Mutex::new(None),
        }
    }

    /// The log files found at the open that hold frames after `after` (by first sequence
    /// number): the one holding `after + 1` and every one after it (log files start at
    /// checkpoints, C2).
    pub(crate) fn files_after(&self, after: u64) -> &[u64] {
        let start = self
            .found
            .iter()
            .rposition(|&first| first <= after + 1)
            .unwrap_or(0);
        &self.found[start..]
    }

    /// Bytes of the log files after the checkpoint at the open: what the next open would
    /// replay, which counts toward the next checkpoint as if written since.
    pub(crate) fn replayed_bytes(&self) -> u64 {
        self.replayed_bytes
    }

    /// The active file and its path, for an fsync (`None` before the replay opened it).
    fn active_file(&self) -> Option<(Arc<dyn StorageFile>, PathBuf)> {
        let active = self.active.lock();
        let log = active.as_ref()?;
        Some((Arc::clone(&log.file), log.path.clone()))
    }

    /// An append failed: one refused for a full disk is cut back to where the file ended
    /// before it (`DiskFull`, the journal stays writable); anything else, or a cut that
    /// fails, poisons it.
    fn append_failed(&self, log: &LogWriter, source: std::io::Error) -> KernelError {
        let path = log.path.clone();
        if is_disk_full(&source) {
            match self.storage.truncate(&path, log.bytes) {
                Ok(()) => return KernelError::DiskFull { path, source },
                Err(cut) => {
                    self.poison(PoisonCause::new(
                        "append",
                        &path,
                        format!("{source}; cutting the partial frame back failed: {cut}"),
                    ));
                    return KernelError::Io { path, source };
                }
            }
        }
        self.poison(PoisonCause::new("append", &path, &source));
        KernelError::Io { path, source }
    }
}

impl Journal for LocalJournal {
    fn replay(
        &mut self,
        after: u64,
        apply: &mut ApplyFrame<'_>,
        report: &mut ReplayReport,
    ) -> Result<u64> {
        let storage = Arc::clone(&self.storage);
        let mut replay = Replay {
            ckpt_seq: after,
            expected: after + 1,
            apply,
            log_bytes_after_checkpoint: 0,
            last_file: None,
            limits: std::mem::take(&mut self.limits),
        };
        let files = self.files_after(after).to_vec();
        for (i, &first) in files.iter().enumerate() {
            let newest = i + 1 == files.len();
            replay.file(&*storage, &self.dir, first, newest, report)?;
        }
        let last_seq = replay.expected - 1;
        // R7: the log must reach the checkpoint.
        if last_seq < after {
            return Err(KernelError::Corrupted {
                file: self.dir.clone(),
                offset: 0,
                reason: "log ends before the checkpoint it was synced for",
            });
        }
        self.replayed_bytes = replay.log_bytes_after_checkpoint;
        // R8: the active log file, where the valid frames of the newest end. When the newest
        // is the checkpoint's own file (a cluster replica's open dropped the files after the
        // checkpoint, `docs/cluster.md`, "Cutting a stale tail"), appends start a new file
        // after it, as the checkpoint's rotation (C2) had: the next open finds the file R5
        // requires, and drops it again instead of finding frames inside the checkpoint's file.
        let checkpoints_own = after > 0 && files.last().is_some_and(|&first| first <= after);
        let log = match replay.last_file {
            Some((path, len)) if !checkpoints_own => {
                LogWriter::open(&*storage, path.clone(), len).map_err(KernelError::io(&path))?
            }
            _ => LogWriter::create(&*storage, &self.dir, last_seq + 1, self.owner)
                .map_err(KernelError::io(&self.dir))?,
        };
        *self.active.lock() = Some(log);
        self.commit = GroupCommit::new(last_seq);
        Ok(last_seq)
    }

    fn append(&self, seq: u64, frame: &[u8]) -> Result<u64> {
        let mut active = self.active.lock();
        let Some(log) = active.as_mut() else {
            return Err(KernelError::Internal {
                context: "appending to the log",
                reason: format!("frame {seq} before the journal's replay opened a file"),
            });
        };
        match log.append_frame(frame) {
            Ok(n) => Ok(n),
            // A failed append leaves `log.bytes` where the file ended before it.
            Err(source) => Err(self.append_failed(log, source)),
        }
    }

    fn set_written(&self, seq: u64) {
        self.commit.set_written(seq);
    }

    fn written(&self) -> u64 {
        self.commit.written()
    }

    fn acknowledge(&self, seq: u64) -> Result<()> {
        self.commit.wait_durable(seq, || self.active_file())
    }

    fn rotate(&self, first_seq: u64) -> Result<()> {
        let path = self.dir.join(log_writer::file_name(first_seq));
        match LogWriter::create(&*self.storage, &self.dir, first_seq, self.owner) {
            Ok(log) => {
                *self.active.lock() = Some(log);
                Ok(())
            }
            Err(source) => Err(io_error(path, source)),
        }
    }

    fn active(&self) -> ActiveLog {
        match &*self.active.lock() {
            Some(log) => ActiveLog {
                path: log.path.clone(),
                first_seq: log.first_seq,
                bytes: log.bytes,
            },
            None => ActiveLog {
                path: self.dir.clone(),
                first_seq: 0,
                bytes: 0,
            },
        }
    }

    fn durable(&self) -> u64 {
        self.commit.durable()
    }

    fn syncs(&self) -> u64 {
        self.commit.fsyncs()
    }

    fn poison(&self, cause: PoisonCause) {
        self.commit.poison(cause);
    }

    fn cause(&self) -> Option<PoisonCause> {
        self.commit.cause()
    }

    fn is_poisoned(&self) -> bool {
        self.commit.is_poisoned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::log::Op;
    use crate::kernel::log::format::encode_frame;
    use crate::kernel::record::{MemoryId, Timestamp};
    use crate::kernel::storage::FsStorage;

    fn touch(seq: u64) -> Vec<u8> {
        let op = Op::Touch {
            at: Timestamp(1),
            ids: vec![MemoryId(seq)],
        };
        encode_frame(seq, &op)
    }

    fn journal(dir: &Path) -> LocalJournal {
        let storage: Arc<dyn Storage> = Arc::new(FsStorage);
        let found = storage
            .list(dir)
            .unwrap_or_default()
            .iter()
            .filter_map(|n| log_writer::parse_file_name(n))
            .collect::<std::collections::BTreeSet<u64>>()
            .into_iter()
            .collect();
        LocalJournal::new(storage, dir, Owner([7; 24]), found, BTreeMap::new())
    }

    /// Replays a journal in `dir` from 0, collecting every frame it hands over.
    fn replayed(dir: &Path) -> (LocalJournal, Vec<u64>) {
        let mut j = journal(dir);
        let mut seen = Vec::new();
        let last = j
            .replay(
                0,
                &mut |seq, _crc, _op| {
                    seen.push(seq);
                    Ok(())
                },
                &mut ReplayReport::default(),
            )
            .expect("replay");
        assert_eq!(last, seen.last().copied().unwrap_or(0));
        (j, seen)
    }

    #[test]
    fn before_its_replay_a_journal_refuses_appends_and_acknowledgements_without_panicking() {
        let dir = tempfile::tempdir().expect("tempdir");
        let j = journal(dir.path());
        assert!(matches!(
            j.append(1, &touch(1)),
            Err(KernelError::Internal { .. })
        ));
        j.set_written(1);
        assert!(matches!(
            j.acknowledge(1),
            Err(KernelError::Internal { .. })
        ));
        assert!(
            !j.is_poisoned(),
            "a refusal before the open is not a poisoning"
        );
    }

    #[test]
    fn what_is_appended_and_acknowledged_across_a_rotation_replays_in_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (j, seen) = replayed(dir.path());
        assert!(seen.is_empty());
        assert_eq!(
            j.active().first_seq,
            1,
            "an empty store's first log starts at 1"
        );
        for seq in 1..=3 {
            j.append(seq, &touch(seq)).expect("append");
            j.set_written(seq);
        }
        let syncs = j.syncs();
        j.acknowledge(3).expect("acknowledge");
        assert_eq!(j.durable(), 3);
        assert_eq!(j.syncs(), syncs + 1, "one fsync covers the three frames");
        j.acknowledge(2).expect("already held");
        assert_eq!(
            j.syncs(),
            syncs + 1,
            "nothing to sync for a frame already held"
        );
        j.rotate(4).expect("rotate");
        assert_eq!(j.active().first_seq, 4);
        j.append(4, &touch(4)).expect("append after the rotation");
        j.set_written(4);
        j.acknowledge(4).expect("acknowledge after the rotation");
        drop(j);
        let (j, seen) = replayed(dir.path());
        assert_eq!(seen, vec![1, 2, 3, 4]);
        assert_eq!(j.active().first_seq, 4, "appends go on in the newest file");
        assert_eq!(j.durable(), 4);
    }

    #[test]
    fn appends_after_a_dropped_tail_start_the_file_after_the_checkpoint() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (j, _) = replayed(dir.path());
        for seq in 1..=3 {
            j.append(seq, &touch(seq)).expect("append");
            j.set_written(seq);
        }
        j.acknowledge(3).expect("acknowledge");
        drop(j);
        // A checkpoint at 3 whose rotated file (4) a replica's open removed: the newest file
        // is the checkpoint's own.
        let mut j = journal(dir.path());
        let last = j
            .replay(3, &mut |_, _, _| Ok(()), &mut ReplayReport::default())
            .expect("replay");
        assert_eq!(last, 3);
        assert_eq!(j.active().first_seq, 4, "a new file after the checkpoint");
        j.append(4, &touch(4)).expect("append");
        j.set_written(4);
        j.acknowledge(4).expect("acknowledge");
        drop(j);
        let names = FsStorage.list(dir.path()).expect("list");
        assert!(
            names
                .iter()
                .any(|n| log_writer::parse_file_name(n) == Some(4)),
            "{names:?}"
        );
        let (_, seen) = replayed(dir.path());
        assert_eq!(seen, vec![1, 2, 3, 4]);
    }

    #[test]
    fn a_frame_the_applier_refuses_is_corruption_at_its_place() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (j, _) = replayed(dir.path());
        for seq in 1..=2 {
            j.append(seq, &touch(seq)).expect("append");
            j.set_written(seq);
        }
        j.acknowledge(2).expect("acknowledge");
        drop(j);
        let mut j = journal(dir.path());
        let refused = j.replay(
            0,
            &mut |seq, _crc, _op| if seq == 2 { Err("refused") } else { Ok(()) },
            &mut ReplayReport::default(),
        );
        assert!(
            matches!(refused, Err(KernelError::Corrupted { reason: "refused", offset, .. }) if offset > 0),
            "{refused:?}"
        );
    }
}
