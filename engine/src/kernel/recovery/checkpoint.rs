//! R4 and R4b: choosing and loading the checkpoint a store opens from (a delta with its base),
//! its records, segments and aux section, and the segment files no checkpoint names.

use super::found::*;
use crate::kernel::checkpoint::{format as ckpt_format, reader as ckpt_reader};
use crate::kernel::error::{KernelError, Result};
use crate::kernel::log::Op;
use crate::kernel::record::MemoryId;
use crate::kernel::segment_file::{self, SegmentEntry, SegmentKind};
use crate::kernel::state::Model;
use crate::kernel::state::State;
use crate::kernel::storage::Storage;
use crate::kernel::table::Table;
use amberdb_index::Collection;
use rayon::prelude::*;
use std::path::{Path, PathBuf};

/// Decoded checkpoint records the decoder hands the indexer at a time, and the batches it may
/// be ahead by. Every record in flight is decoded whole, strings and all, and dropped once
/// indexed (it stays mapped): what is in flight is fresh memory at the open's peak, which a
/// VM's host may have to back first (docs/benchmarks.md, "What fresh memory costs on a VM").
pub(super) const LOAD_BATCH: usize = 4096;

pub(super) const LOAD_QUEUE: usize = 2;

pub(super) struct Base {
    pub(super) seq: u64,
    pub(super) next_id: u64,
    pub(super) state: State,
    pub(super) segments: Vec<SegmentEntry>,
    /// The log's running CRC through `seq` (`None`: a checkpoint older than v14 does not
    /// hold it).
    pub(super) log_crc: Option<u32>,
    /// The full checkpoint the records count from: this one, or a delta's base.
    pub(super) full: crate::kernel::checkpoint::DeltaBase,
    /// Segments named by the checkpoint that did not open, each with why: the state holds
    /// the others, and the records whose vectors they held are unindexed (R4b).
    pub(super) damaged: Vec<String>,
}

impl Base {
    /// No checkpoint: the store as created, replayed from its first log file.
    pub(super) fn empty(created: &Model) -> Base {
        Base {
            seq: 0,
            next_id: 1,
            state: State::new(
                Table::default(),
                Collection::new(created.dim),
                created.clone(),
            ),
            segments: Vec::new(),
            // An empty log's running CRC.
            log_crc: Some(0),
            full: crate::kernel::checkpoint::DeltaBase { seq: 0, records: 0 },
            damaged: Vec::new(),
        }
    }
}

/// A checkpoint file's error as the engine's, naming `path`.
pub(super) fn checkpoint_error(path: &Path, e: ckpt_reader::CheckpointError) -> KernelError {
    match e {
        ckpt_reader::CheckpointError::Corrupted(d) => KernelError::Corrupted {
            file: path.to_path_buf(),
            offset: d.offset as u64,
            reason: d.reason,
        },
        ckpt_reader::CheckpointError::Unsupported(found) => KernelError::UnsupportedVersion {
            file: path.to_path_buf(),
            found,
            supported: ckpt_format::SUPPORTED,
        },
    }
}

/// A delta's base, mapped and checked.
pub(super) struct DeltaParts {
    pub(super) base_path: PathBuf,
    pub(super) base_bytes: amberdb_index::SealedBytes,
    pub(super) base_head: ckpt_reader::Head,
}

pub(super) fn load_checkpoint(
    storage: &dyn Storage,
    dir: &Path,
    seq: u64,
    created: &Model,
) -> Result<Base> {
    let path = dir.join(ckpt_format::file_name(seq));
    let bytes = storage.map(&path).map_err(io(&path))?;
    let to_engine = |e| checkpoint_error(&path, e);
    let head = ckpt_reader::decode_head(bytes.as_slice()).map_err(to_engine)?;
    if head.seq != seq {
        return Err(KernelError::Misnamed {
            file: path,
            named: seq,
            header: head.seq,
        });
    }
    // A delta: its base must be there and sound ("Incremental checkpoints"); its records are
    // merged into the base's as they stream.
    let delta = delta_parts(storage, dir, &head)?;
    let full = match &delta {
        Some(parts) => crate::kernel::checkpoint::DeltaBase {
            seq: parts.base_head.seq,
            records: parts.base_head.record_count(),
        },
        None => crate::kernel::checkpoint::DeltaBase {
            seq,
            records: head.record_count(),
        },
    };

    // Three independent jobs at once: decode the records (streamed in batches), index them
    // as they arrive, and checksum the segments. Opening a 1M-record store was 2.3 s in
    // sequence (docs/benchmarks.md, open).
    let mut table = Table::default();
    table.reserve(head.next_id);
    // The records stay in the mapped files they were decoded from (`docs/architecture.md`,
    // "Mapped records"): a delta's merge takes them from the base or the delta.
    let files = match &delta {
        Some(parts) => vec![
            (parts.base_head.seq, parts.base_bytes.clone()),
            (seq, bytes.clone()),
        ],
        None => vec![(seq, bytes.clone())],
    };
    let (decoded, segments) = decode_all(storage, dir, (&bytes, &head), delta, &mut table, files);
    let panicked = |_| KernelError::Corrupted {
        file: path.clone(),
        offset: 0,
        reason: "decoder thread panicked",
    };
    let delta_ids = decoded.map_err(panicked)??;
    let segments = segments.map_err(panicked)?;
    // The model the vectors belong to: the first aux entry when a re-embedding changed it
    // (checkpoint.md), else the one the store was created with.
    let model = match head.aux.first() {
        Some(Op::Model { model_id, dim }) => Model {
            id: model_id.clone(),
            dim: *dim as usize,
        },
        _ => created.clone(),
    };
    let (mut vectors, sound_entries, damaged) = collection_of(dir, &model, &head, segments)?;
    // Tombstones are derived: a sealed key with no record is deleted (checkpoint.md).
    let dead: Vec<u64> = vectors
        .sealed()
        .iter()
        .flat_map(|s| s.keys().iter().copied())
        .filter(|k| !table.contains(MemoryId(*k)))
        .collect();
    for k in dead {
        vectors.delete(k);
    }
    // Every live record has its vector in a segment, but those of a damaged one (R4b).
    let unindexed: std::collections::BTreeSet<MemoryId> = if damaged.is_empty() {
        std::collections::BTreeSet::new()
    } else {
        table
            .iter()
            .map(|m| m.id)
            .filter(|id| !vectors.contains(id.0))
            .collect()
    };
    if vectors.len() + unindexed.len() != table.len() {
        return Err(KernelError::Corrupted {
            file: path,
            offset: 0,
            reason: "segments and records disagree",
        });
    }
    // The archive, canonical tags and snapshots (checkpoint.md, "Aux section").
    let mut state = State::new(table, vectors, model);
    state.unindexed = crate::kernel::state::Unindexed::waiting(unindexed);
    for op in head.aux {
        let loaded = match op {
            // A request's mark and reply at once (checkpoint.md, aux type 16).
            Op::Request(r) => state.requests.load(*r),
            op => state.apply(op),
        };
        loaded.map_err(|reason| KernelError::Corrupted {
            file: path.clone(),
            offset: 0,
            reason,
        })?;
    }
    state.table.mark_changed(delta_ids);
    Ok(Base {
        seq,
        next_id: head.next_id,
        state,
        segments: sound_entries,
        log_crc: head.log_crc,
        full,
        damaged,
    })
}

/// A delta's base, mapped and checked against the delta's head (`None` for a full
/// checkpoint): it must be there and sound ("Incremental checkpoints").
pub(super) fn delta_parts(
    storage: &dyn Storage,
    dir: &Path,
    head: &ckpt_reader::Head,
) -> Result<Option<DeltaParts>> {
    let Some(d) = &head.delta else {
        return Ok(None);
    };
    let base_path = dir.join(ckpt_format::file_name(d.base_seq));
    let base_bytes = storage.map(&base_path).map_err(io(&base_path))?;
    let base_head = ckpt_reader::decode_head(base_bytes.as_slice())
        .map_err(|e| checkpoint_error(&base_path, e))?;
    ckpt_reader::check_base(d, head.next_id, &base_head)
        .map_err(|e| checkpoint_error(&base_path, e))?;
    Ok(Some(DeltaParts {
        base_path,
        base_bytes,
        base_head,
    }))
}

/// What `decode_all`'s two threads returned: the ids a delta changed, and each segment opened.
pub(super) type Decoded = (
    std::thread::Result<Result<Vec<u64>>>,
    std::thread::Result<Vec<Result<amberdb_index::Sealed>>>,
);

/// Three independent jobs at once: decode the checkpoint's records (streamed in batches; a
/// delta's merged with its base's), load them into `table` as they arrive, and open and
/// checksum the segments. Opening a 1M-record store was 2.3 s in sequence
/// (docs/benchmarks.md, open).
pub(super) fn decode_all(
    storage: &dyn Storage,
    dir: &Path,
    (bytes, head): (&amberdb_index::SealedBytes, &ckpt_reader::Head),
    delta: Option<DeltaParts>,
    table: &mut Table,
    files: Vec<(u64, amberdb_index::SealedBytes)>,
) -> Decoded {
    let path = dir.join(ckpt_format::file_name(head.seq));
    let to_engine = |e| checkpoint_error(&path, e);
    std::thread::scope(|s| {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<ckpt_reader::Located>>(LOAD_QUEUE);
        // Returns the ids a delta changed (its records' and its deleted ones): they count as
        // changed since the base, for the next delta.
        let decoder = s.spawn(|| -> Result<Vec<u64>> {
            let send = move |batch: Vec<ckpt_reader::Located>| tx.send(batch).is_ok();
            let Some(parts) = delta else {
                return ckpt_reader::decode_records_into(bytes.as_slice(), head, LOAD_BATCH, send)
                    .map(|()| Vec::new())
                    .map_err(to_engine);
            };
            let deleted = head
                .delta
                .as_ref()
                .map_or(&[][..], |d| d.deleted.as_slice());
            // The delta's records decode one at a time as the merge reaches them.
            let mut ids: Vec<u64> = deleted.to_vec();
            let changed = ckpt_reader::records(bytes.as_slice(), head).inspect(|l| {
                if let Ok(l) = l {
                    ids.push(l.record.id.0);
                }
            });
            ckpt_reader::decode_merged_into(
                parts.base_bytes.as_slice(),
                &parts.base_head,
                deleted,
                changed,
                LOAD_BATCH,
                send,
            )
            .map_err(|e| match e {
                ckpt_reader::MergeError::Base(e) => checkpoint_error(&parts.base_path, e),
                ckpt_reader::MergeError::Delta(e) => to_engine(e),
            })?;
            Ok(ids)
        });
        let verifier = s.spawn(|| {
            head.segments
                .par_iter()
                .map(|entry| segment_file::open(storage, dir, entry))
                .collect::<Vec<Result<_>>>()
        });
        // A delta's records are in the second file; everything else in the first.
        let records = rx
            .into_iter()
            .flatten()
            .map(|l| (l.record, usize::from(l.in_delta), l.at..l.at + l.len));
        table.load(files, records);
        (decoder.join(), verifier.join())
    })
}

/// The collection of a checkpoint's segments. A segment that does not open is left out,
/// named (R4b): the records are whole, and the caller decides whether a sound checkpoint
/// recovers instead. Returns the collection, the entries that opened and the damaged ones.
pub(super) fn collection_of(
    dir: &Path,
    model: &Model,
    head: &ckpt_reader::Head,
    segments: Vec<Result<amberdb_index::Sealed>>,
) -> Result<(Collection, Vec<SegmentEntry>, Vec<String>)> {
    let mut vectors = Collection::new(model.dim);
    let mut damaged = Vec::new();
    let mut sound_entries = Vec::with_capacity(head.segments.len());
    for (seg, entry) in segments.into_iter().zip(&head.segments) {
        let pushed = seg.and_then(|seg| {
            vectors
                .push_sealed(seg)
                .map_err(|_| KernelError::Corrupted {
                    file: dir.join(entry.file_name()),
                    offset: 0,
                    reason: "segment does not fit the store",
                })
        });
        match pushed {
            Ok(()) => sound_entries.push(*entry),
            Err(e)
                if e.kind() == crate::kernel::error::ErrorKind::Data
                    || matches!(e, KernelError::Io { .. }) =>
            {
                damaged.push(format!("{}: {e}", entry.file_name()));
            }
            Err(e) => return Err(e),
        }
    }
    Ok((vectors, sound_entries, damaged))
}

/// What R4's clean-up keeps: every checkpoint whose head reads, with the segment ids it
/// names, and the files left for the next sound checkpoint to remove (`Recovered::damaged`).
pub(super) struct Kept {
    pub(super) retained: Vec<Retained>,
    pub(super) damaged: Vec<PathBuf>,
}

/// R4: removes the segment files no checkpoint refers to. They are what a checkpoint
/// interrupted before its commit point wrote (C1), and nothing reads them. We hold `LOCK`, so no
/// checkpoint is in progress. A checkpoint whose head is damaged is derived data that never
/// loads: older than the loaded one, it is removed now, with the segments only it may name;
/// newer, it and those segments wait for the next sound checkpoint (`docs/durability.md`,
/// "Damaged derived files"), so a purge never leaves deleted texts behind it. A checkpoint
/// that cannot be read at all (an I/O error) might need any segment: then they are only
/// reported. The loaded checkpoint (`loaded`: its sequence number and segments) is not
/// decoded again. Returns every checkpoint with the segment ids it names.
pub(super) fn remove_orphan_segments(
    storage: &dyn Storage,
    dir: &Path,
    checkpoints: &[u64],
    loaded: (u64, &[SegmentEntry], Option<u64>),
    seg_files: &[(u64, SegmentKind)],
    report: &mut OpenReport,
) -> Result<Kept> {
    let mut retained = Vec::new();
    let mut damaged_newer = Vec::new();
    let mut damaged_older = Vec::new();
    let mut all_read = true;
    for &seq in checkpoints {
        if seq == loaded.0 {
            retained.push(Retained {
                seq,
                segments: Some(loaded.1.iter().map(|s| s.id).collect()),
                delta_of: loaded.2,
            });
            continue;
        }
        let path = dir.join(ckpt_format::file_name(seq));
        let Ok(bytes) = storage.map(&path) else {
            all_read = false;
            retained.push(Retained {
                seq,
                segments: None,
                delta_of: None,
            });
            continue;
        };
        match ckpt_reader::decode_head(bytes.as_slice()) {
            Ok(head) => retained.push(Retained {
                seq,
                segments: Some(head.segments.iter().map(|s| s.id).collect()),
                delta_of: head.delta.map(|d| d.base_seq),
            }),
            Err(ckpt_reader::CheckpointError::Corrupted(_)) if seq < loaded.0 => {
                damaged_older.push(path);
            }
            Err(ckpt_reader::CheckpointError::Corrupted(_)) => damaged_newer.push(path),
            // A newer build's file is not damage: it stays, and so may what it names.
            Err(ckpt_reader::CheckpointError::Unsupported(_)) => {
                all_read = false;
                retained.push(Retained {
                    seq,
                    segments: None,
                    delta_of: None,
                });
            }
        }
    }
    let mut referenced: std::collections::HashSet<u64> = loaded.1.iter().map(|s| s.id).collect();
    for r in &retained {
        referenced.extend(r.segments.iter().flatten());
    }
    let orphans: Vec<PathBuf> = seg_files
        .iter()
        .filter(|(id, _)| !referenced.contains(id))
        .map(|&(id, kind)| dir.join(segment_file::file_name(id, kind)))
        .collect();
    let mut removed = damaged_older;
    let mut damaged = damaged_newer;
    match (all_read, damaged.is_empty()) {
        (false, _) => report.orphan_segments = orphans,
        (true, true) => removed.extend(orphans),
        (true, false) => {
            report.orphan_segments.clone_from(&orphans);
            damaged.extend(orphans);
        }
    }
    for path in &removed {
        storage.remove(path).map_err(io(path))?;
    }
    if !removed.is_empty() {
        storage.sync_dir(dir).map_err(io(dir))?;
    }
    let (segments, checkpoints): (Vec<PathBuf>, Vec<PathBuf>) = removed
        .into_iter()
        .partition(|p| p.extension().is_some_and(|e| e != "ckpt"));
    report.removed_orphan_segments = segments;
    report.removed_damaged = checkpoints;
    Ok(Kept { retained, damaged })
}

/// R4 and R4b: the newest checkpoint that loads whole, or, when none does with the log after
/// it, the newest whose records decode, without its damaged segments. Also returns the newest
/// checkpoint refused as misnamed, the reason to give when the log cannot make up for it.
pub(super) fn choose_checkpoint(
    storage: &dyn Storage,
    dir: &Path,
    checkpoints: &[u64],
    logs: &[u64],
    created: &Model,
    report: &mut OpenReport,
) -> Result<(Option<Base>, Option<KernelError>)> {
    let mut base = None;
    // The newest checkpoint whose records are whole but a segment is not (R4b): used only if
    // no sound checkpoint with the log after it recovers.
    let mut damaged: Option<Base> = None;
    let mut misnamed_checkpoint: Option<KernelError> = None;
    for &seq in checkpoints.iter().rev() {
        match load_checkpoint(storage, dir, seq, created) {
            Ok(b) if !b.damaged.is_empty() => {
                report.skipped_checkpoints.push(format!(
                    "{}: damaged segment {}",
                    ckpt_format::file_name(seq),
                    b.damaged.join("; ")
                ));
                if damaged.is_none() {
                    damaged = Some(b);
                }
            }
            Ok(b) => {
                base = Some(b);
                break;
            }
            Err(e)
                if e.kind() == crate::kernel::error::ErrorKind::Data
                    || matches!(e, KernelError::Io { .. }) =>
            {
                report
                    .skipped_checkpoints
                    .push(format!("{}: {e}", ckpt_format::file_name(seq)));
                if misnamed_checkpoint.is_none() && matches!(e, KernelError::Misnamed { .. }) {
                    misnamed_checkpoint = Some(e);
                }
            }
            Err(e) => return Err(e),
        }
    }
    // R4b: a sound checkpoint (or none, from the first log file) recovers everything when the
    // log after it is there; else the newest with a damaged segment, without it.
    let sound_recovers = logs.contains(&(base.as_ref().map_or(0, |b| b.seq) + 1));
    if !sound_recovers && let Some(d) = damaged {
        report
            .skipped_checkpoints
            .retain(|s| !s.starts_with(&format!("{}:", ckpt_format::file_name(d.seq))));
        report.damaged_segments.clone_from(&d.damaged);
        report.unindexed = d.state.unindexed.len();
        base = Some(d);
    }
    Ok((base, misnamed_checkpoint))
}
