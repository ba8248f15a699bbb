//! R6 of the local journal: the log files after the checkpoint, replayed file by file: frames
//! checked and decoded on one thread, handed in order to the open's applier on another; a torn
//! tail cut, any other damage refused (`docs/durability.md`, "Recovery").

use super::{ApplyFrame, ReplayReport};
use crate::kernel::error::{KernelError, Result};
use crate::kernel::log::Op;
use crate::kernel::log::format::{HeaderError, stored_crc};
use crate::kernel::log::reader::{ScanEnd, scan};
use crate::kernel::log::writer::{self as log_writer};
use crate::kernel::storage::Storage;
use std::path::{Path, PathBuf};

/// Decoded log frames handed from the replay's scanner to its applier at a time, and batches
/// the scanner may run ahead by.
pub(super) const REPLAY_BATCH: usize = 256;

pub(super) const REPLAY_QUEUE: usize = 16;

/// What `scan` returned for one log file: how it ended, or `Err(Ok(_))` for a bad header and
/// `Err(Err(()))` when the applier stopped it.
pub(super) type Scanned =
    std::result::Result<crate::kernel::log::reader::Scan, std::result::Result<HeaderError, ()>>;

/// R6 under way: where the replay is, and what it has found.
pub(super) struct Replay<'a, 'f> {
    /// The checkpoint's sequence number: frames up to it are not applied again.
    pub(super) ckpt_seq: u64,
    /// The sequence number the next frame after the checkpoint must carry.
    pub(super) expected: u64,
    pub(super) apply: &'a mut ApplyFrame<'f>,
    pub(super) log_bytes_after_checkpoint: u64,
    /// The newest log file and where its valid frames end: the writer appends there (R8).
    pub(super) last_file: Option<(PathBuf, u64)>,
    /// Log files of an earlier incarnation (by first sequence number) and the last sequence
    /// number of them this store shares (R3c): a frame past it is a diverged copy's.
    pub(super) limits: std::collections::BTreeMap<u64, u64>,
}

impl Replay<'_, '_> {
    /// Replays the log file whose first sequence number is `first` (`newest`: the last one,
    /// whose torn tail is cut).
    pub(super) fn file(
        &mut self,
        storage: &dyn Storage,
        dir: &Path,
        first: u64,
        newest: bool,
        report: &mut ReplayReport,
    ) -> Result<()> {
        let path = dir.join(log_writer::file_name(first));
        // Every file is mapped, not copied: a kill loop at 1M left 130 MB of tail in the
        // newest alone, and a copy is as much fresh memory, which a VM's host may have to give
        // back first (docs/benchmarks.md, "What fresh memory costs on a VM"). Nothing writes
        // the files meanwhile (we hold LOCK; the writer opens after recovery), and the map
        // is dropped before the newest is cut or removed below (docs/safety.md).
        let mapped = storage.map(&path).map_err(KernelError::io(&path))?;
        let bytes = mapped.as_slice();
        // File identity: a log under another's name (renamed, swapped, a stale copy) is
        // refused before any of its frames is applied (`docs/durability.md`, "File identity").
        if let Ok(header) = crate::kernel::log::format::decode_header(bytes)
            && header.first_seq != first
        {
            return Err(KernelError::Misnamed {
                file: path,
                named: first,
                header: header.first_seq,
            });
        }
        let limit = self.limits.get(&first).copied();
        // Log files start at checkpoints (C2): one past the checkpoint holds only its tail.
        if first > self.ckpt_seq {
            self.log_bytes_after_checkpoint += bytes.len() as u64;
        }
        let (scanned, applied) = self.scan_and_apply(bytes, &path, limit, report);
        let file_len = bytes.len();
        drop(mapped);
        applied?;
        let scanned = scanned.map_err(|_| KernelError::Corrupted {
            file: path.clone(),
            offset: 0,
            reason: "log scanner thread panicked",
        })?;
        self.end_of_file(storage, dir, path, scanned, newest, file_len, report)
    }

    /// Two threads: one checks and decodes the frames (checksums, records, vectors), the other
    /// (this one) applies them in order; alone, the decoding was a third of the replay.
    /// Returns the scanner's result (`Err` if it panicked) and the applier's.
    fn scan_and_apply(
        &mut self,
        bytes: &[u8],
        path: &Path,
        limit: Option<u64>,
        report: &mut ReplayReport,
    ) -> (std::thread::Result<Scanned>, Result<()>) {
        std::thread::scope(|s| {
            let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<(u64, u64, Op)>>(REPLAY_QUEUE);
            let scanner = s.spawn(move || {
                let mut batch = Vec::with_capacity(REPLAY_BATCH);
                let scanned = scan(bytes, |seq, offset, op| {
                    batch.push((seq, offset, op));
                    if batch.len() < REPLAY_BATCH {
                        return Ok(());
                    }
                    let full = std::mem::replace(&mut batch, Vec::with_capacity(REPLAY_BATCH));
                    // The applier stopped at an error of its own, which it reports.
                    tx.send(full).map_err(|_| ())
                });
                // The frames before a bad one are applied, as a torn tail's are.
                if !batch.is_empty() {
                    let _ = tx.send(batch);
                }
                scanned
            });
            let mut applied = Ok(());
            for frames in rx.iter() {
                applied = frames.into_iter().try_for_each(|(seq, offset, op)| {
                    if let Some(limit) = limit
                        && seq > limit
                    {
                        return Err(KernelError::Foreign {
                            file: path.to_path_buf(),
                            why: format!(
                                "a log of an earlier incarnation of this store whose frames run past its restore point (sequence number {limit}): a diverged copy's"
                            ),
                        });
                    }
                    let stored = usize::try_from(offset)
                        .ok()
                        .and_then(|at| bytes.get(at..))
                        .map_or(0, stored_crc);
                    self.frame(path, (seq, stored), offset, op, report)
                });
                if applied.is_err() {
                    break;
                }
            }
            drop(rx);
            (scanner.join(), applied)
        })
    }

    /// Hands one frame to the applier, unless the checkpoint holds it already.
    fn frame(
        &mut self,
        path: &Path,
        (seq, stored): (u64, u32),
        offset: u64,
        op: Op,
        report: &mut ReplayReport,
    ) -> Result<()> {
        if seq <= self.ckpt_seq {
            return Ok(());
        }
        if seq != self.expected {
            return Err(KernelError::Corrupted {
                file: path.to_path_buf(),
                offset,
                reason: "gap in log sequence numbers",
            });
        }
        (self.apply)(seq, stored, op).map_err(|reason| KernelError::Corrupted {
            file: path.to_path_buf(),
            offset,
            reason,
        })?;
        self.expected += 1;
        report.replayed_frames += 1;
        Ok(())
    }

    /// How a file's scan ended: clean, a torn tail (cut when it is the newest file), or damage.
    #[expect(clippy::too_many_arguments, reason = "one step of the replay, named")]
    fn end_of_file(
        &mut self,
        storage: &dyn Storage,
        dir: &Path,
        path: PathBuf,
        scanned: Scanned,
        newest: bool,
        file_len: usize,
        report: &mut ReplayReport,
    ) -> Result<()> {
        match scanned {
            Ok(s) => {
                if s.first_seq > self.expected {
                    return Err(KernelError::Corrupted {
                        file: path,
                        offset: 8,
                        reason: "log file starts after a gap",
                    });
                }
                match s.end {
                    ScanEnd::Clean => {}
                    ScanEnd::TornTail { offset } if newest => {
                        storage
                            .truncate(&path, offset)
                            .map_err(KernelError::io(&path))?;
                        report.truncated_tail = Some((path.clone(), offset));
                    }
                    ScanEnd::TornTail { offset } => {
                        return Err(KernelError::Corrupted {
                            file: path,
                            offset,
                            reason: "bad frame in a log file that is not the newest",
                        });
                    }
                    ScanEnd::Corrupted { offset, reason } => {
                        return Err(KernelError::Corrupted {
                            file: path,
                            offset,
                            reason,
                        });
                    }
                }
                self.last_file = Some((path, s.valid_end));
                Ok(())
            }
            // The applier stopped: only at an error of its own, returned before this.
            Err(Err(())) => Err(KernelError::Corrupted {
                file: path,
                offset: 0,
                reason: "log replay stopped",
            }),
            Err(Ok(HeaderError::Unsupported(found))) => Err(KernelError::UnsupportedVersion {
                file: path,
                found,
                supported: crate::kernel::log::format::SUPPORTED,
            }),
            Err(Ok(HeaderError::Corrupted(reason))) => {
                // A header torn while the file was being created (step C2 or R3a) holds no
                // frames.
                if newest && file_len <= crate::kernel::log::format::HEADER_LEN {
                    storage.remove(&path).map_err(KernelError::io(&path))?;
                    storage.sync_dir(dir).map_err(KernelError::io(dir))?;
                    report.truncated_tail = Some((path, 0));
                    Ok(())
                } else {
                    Err(KernelError::Corrupted {
                        file: path,
                        offset: 0,
                        reason,
                    })
                }
            }
        }
    }
}
