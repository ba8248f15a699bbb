//! Opening a store: lock, identity, newest valid checkpoint, log replay, torn-tail repair.
//! Each step is numbered as in `docs/durability.md`, "Recovery".

use crate::kernel::checkpoint::{format as ckpt_format, reader as ckpt_reader};
use crate::kernel::error::{EngineError, Result};
use crate::kernel::identity::{self, Identity, IdentityError};
use crate::kernel::log::Op;
use crate::kernel::log::format::HeaderError;
use crate::kernel::log::reader::{ScanEnd, scan};
use crate::kernel::log::writer::{self as log_writer, LogWriter};
use crate::kernel::record::{MemoryId, Timestamp};
use crate::kernel::segment_file::{self, SegmentEntry, SegmentKind};
use crate::kernel::state::Model;
use crate::kernel::state::State;
use crate::kernel::storage::{Storage, StorageLock};
use crate::kernel::table::Table;
use amberdb_index::Collection;
use rayon::prelude::*;
use std::path::{Path, PathBuf};

/// Decoded log frames handed from the replay's scanner to its applier at a time, and batches
/// the scanner may run ahead by.
const REPLAY_BATCH: usize = 256;
const REPLAY_QUEUE: usize = 16;
/// Decoded checkpoint records the decoder hands the indexer at a time, and the batches it may
/// be ahead by. Every record in flight is decoded whole, strings and all, and dropped once
/// indexed (it stays mapped): what is in flight is fresh memory at the open's peak, which a
/// VM's host may have to back first (docs/benchmarks.md, "What fresh memory costs on a VM").
const LOAD_BATCH: usize = 4096;
const LOAD_QUEUE: usize = 2;

/// What `Store::open` found and repaired.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpenReport {
    /// Sequence number of the checkpoint the store was loaded from, if any.
    pub checkpoint_seq: Option<u64>,
    /// When that checkpoint is a delta, the full checkpoint it was applied to
    /// (`docs/durability.md`, "Incremental checkpoints").
    pub checkpoint_delta_of: Option<u64>,
    /// Checkpoints that were damaged or unusable, with the reason, newest first.
    pub skipped_checkpoints: Vec<String>,
    /// Log frames replayed after the checkpoint.
    pub replayed_frames: u64,
    /// A torn log tail that was cut off: the file and the offset it was cut at.
    pub truncated_tail: Option<(PathBuf, u64)>,
    /// Segment files no checkpoint refers to that were left in place, because a checkpoint
    /// could not be read to be sure (`docs/durability.md`, R4). Never read.
    pub orphan_segments: Vec<PathBuf>,
    /// Segment files no checkpoint refers to, removed: what a checkpoint interrupted before
    /// its commit point left behind.
    pub removed_orphan_segments: Vec<PathBuf>,
    /// Leftover `*.tmp` files of interrupted writes that were removed.
    pub removed_tmp_files: usize,
    /// Damaged segment files the store opened without, with the reason, because no sound
    /// checkpoint and its log could recover (`docs/durability.md`, "Recovery", R4b).
    pub damaged_segments: Vec<String>,
    /// Live records whose vectors were in those segments: out of vector search until the
    /// background restoration has embedded their texts again (`Stats::unindexed` says how
    /// many are left).
    pub unindexed: usize,
}

/// Everything recovery hands to the store.
pub(crate) struct Recovered {
    pub(crate) lock: Box<dyn StorageLock>,
    pub(crate) state: State,
    pub(crate) log: LogWriter,
    pub(crate) last_seq: u64,
    pub(crate) next_id: u64,
    pub(crate) next_segment_id: u64,
    pub(crate) checkpoint_seq: u64,
    /// Bytes of the log files after the checkpoint: what the next open would replay, which
    /// counts toward the next checkpoint (`checkpoint_bytes`) as if written since.
    pub(crate) log_bytes_after_checkpoint: u64,
    pub(crate) checkpoints: Vec<Retained>,
    /// The full checkpoint the table's changed ids count from (the loaded one, or the loaded
    /// delta's base); `None` when nothing was loaded.
    pub(crate) delta_base: Option<crate::kernel::checkpoint::DeltaBase>,
    pub(crate) segments: Vec<SegmentEntry>,
    /// Segment files an older retained checkpoint names and the loaded one does not: what an
    /// index build replaced, removed once no retained checkpoint names them (B4).
    pub(crate) replaced: Vec<SegmentEntry>,
    /// The replayed log deleted records: their texts are in the log files until a purge.
    pub(crate) replayed_deletes: bool,
    pub(crate) report: OpenReport,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> EngineError + '_ {
    move |source| EngineError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Creates `dir` if needed and takes its `LOCK`: one process at a time opens (or restores into)
/// a store directory (R1).
///
/// # Errors
/// `Locked` when another holds it; `Io`.
pub(crate) fn lock_dir(storage: &dyn Storage, dir: &Path) -> Result<Box<dyn StorageLock>> {
    storage.create_dir_all(dir).map_err(io(dir))?;
    let lock_path = dir.join("LOCK");
    storage.lock(&lock_path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::WouldBlock {
            EngineError::Locked { path: lock_path }
        } else {
            EngineError::Io {
                path: lock_path,
                source: e,
            }
        }
    })
}

/// A checkpoint file kept on disk, and the segment ids it names (`None`: its head could not
/// be read, so it might name any).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Retained {
    pub(crate) seq: u64,
    pub(crate) segments: Option<Vec<u64>>,
    /// A delta's base; `None` for a full checkpoint (or one whose head could not be read).
    pub(crate) delta_of: Option<u64>,
}

struct Base {
    seq: u64,
    next_id: u64,
    state: State,
    segments: Vec<SegmentEntry>,
    /// The full checkpoint the records count from: this one, or a delta's base.
    full: crate::kernel::checkpoint::DeltaBase,
    /// Segments named by the checkpoint that did not open, each with why: the state holds
    /// the others, and the records whose vectors they held are unindexed (R4b).
    damaged: Vec<String>,
}

/// A checkpoint file's error as the engine's, naming `path`.
fn checkpoint_error(path: &Path, e: ckpt_reader::CheckpointError) -> EngineError {
    match e {
        ckpt_reader::CheckpointError::Corrupted(d) => EngineError::Corrupted {
            file: path.to_path_buf(),
            offset: d.offset as u64,
            reason: d.reason,
        },
        ckpt_reader::CheckpointError::Unsupported(found) => EngineError::UnsupportedVersion {
            file: path.to_path_buf(),
            found,
            supported: ckpt_format::SUPPORTED,
        },
    }
}

/// A delta's base, mapped and checked.
struct DeltaParts {
    base_path: PathBuf,
    base_bytes: amberdb_index::SealedBytes,
    base_head: ckpt_reader::Head,
}

fn load_checkpoint(storage: &dyn Storage, dir: &Path, seq: u64, created: &Model) -> Result<Base> {
    let path = dir.join(ckpt_format::file_name(seq));
    let bytes = storage.map(&path).map_err(io(&path))?;
    let to_engine = |e| checkpoint_error(&path, e);
    let head = ckpt_reader::decode_head(bytes.as_slice()).map_err(to_engine)?;
    if head.seq != seq {
        return Err(EngineError::Misnamed {
            file: path,
            named: seq,
            header: head.seq,
        });
    }
    // A delta: its base must be there and sound ("Incremental checkpoints"); its records are
    // merged into the base's as they stream.
    let delta = match &head.delta {
        None => None,
        Some(d) => {
            let base_path = dir.join(ckpt_format::file_name(d.base_seq));
            let base_bytes = storage.map(&base_path).map_err(io(&base_path))?;
            let base_head = ckpt_reader::decode_head(base_bytes.as_slice())
                .map_err(|e| checkpoint_error(&base_path, e))?;
            ckpt_reader::check_base(d, head.next_id, &base_head)
                .map_err(|e| checkpoint_error(&base_path, e))?;
            Some(DeltaParts {
                base_path,
                base_bytes,
                base_head,
            })
        }
    };
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
    let (decoded, segments) = std::thread::scope(|s| {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<ckpt_reader::Located>>(LOAD_QUEUE);
        // Returns the ids a delta changed (its records' and its deleted ones): they count as
        // changed since the base, for the next delta.
        let decoder = s.spawn(|| -> Result<Vec<u64>> {
            let send = move |batch: Vec<ckpt_reader::Located>| tx.send(batch).is_ok();
            let Some(parts) = delta else {
                return ckpt_reader::decode_records_into(bytes.as_slice(), &head, LOAD_BATCH, send)
                    .map(|()| Vec::new())
                    .map_err(to_engine);
            };
            let deleted = head
                .delta
                .as_ref()
                .map_or(&[][..], |d| d.deleted.as_slice());
            // The delta's records decode one at a time as the merge reaches them.
            let mut ids: Vec<u64> = deleted.to_vec();
            let changed = ckpt_reader::records(bytes.as_slice(), &head).inspect(|l| {
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
    });
    let panicked = |_| EngineError::Corrupted {
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
    // A segment that does not open is left out, named (R4b): the records are whole, and the
    // caller decides whether a sound checkpoint recovers instead.
    let mut vectors = Collection::new(model.dim);
    let mut damaged = Vec::new();
    let mut sound_entries = Vec::with_capacity(head.segments.len());
    for (seg, entry) in segments.into_iter().zip(&head.segments) {
        let pushed = seg.and_then(|seg| {
            vectors
                .push_sealed(seg)
                .map_err(|_| EngineError::Corrupted {
                    file: dir.join(entry.file_name()),
                    offset: 0,
                    reason: "segment does not fit the store",
                })
        });
        match pushed {
            Ok(()) => sound_entries.push(*entry),
            Err(e)
                if e.kind() == crate::kernel::error::ErrorKind::Data
                    || matches!(e, EngineError::Io { .. }) =>
            {
                damaged.push(format!("{}: {e}", entry.file_name()));
            }
            Err(e) => return Err(e),
        }
    }
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
        return Err(EngineError::Corrupted {
            file: path,
            offset: 0,
            reason: "segments and records disagree",
        });
    }
    // The archive, canonical tags and snapshots (checkpoint.md, "Aux section").
    let mut state = State::new(table, vectors, model);
    state.unindexed = crate::kernel::state::Unindexed::waiting(unindexed);
    for op in head.aux {
        state.apply(op).map_err(|reason| EngineError::Corrupted {
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
        full,
        damaged,
    })
}

/// R4: removes the segment files no checkpoint refers to. They are what a checkpoint
/// interrupted before its commit point wrote (C1), and nothing reads them. We hold `LOCK`, so no
/// checkpoint is in progress. Only when every checkpoint file's head can be read: a segment of
/// a checkpoint we cannot read might be one it needs, so then they are only reported. The
/// loaded checkpoint (`loaded`: its sequence number and segments) is not decoded again.
/// Returns every checkpoint with the segment ids it names.
fn remove_orphan_segments(
    storage: &dyn Storage,
    dir: &Path,
    checkpoints: &[u64],
    loaded: (u64, &[SegmentEntry], Option<u64>),
    seg_files: &[(u64, SegmentKind)],
    report: &mut OpenReport,
) -> Result<Vec<Retained>> {
    let mut retained = Vec::new();
    for &seq in checkpoints {
        let (segments, delta_of) = if seq == loaded.0 {
            (Some(loaded.1.iter().map(|s| s.id).collect()), loaded.2)
        } else {
            let path = dir.join(ckpt_format::file_name(seq));
            storage
                .map(&path)
                .ok()
                .and_then(|b| ckpt_reader::decode_head(b.as_slice()).ok())
                .map_or((None, None), |head| {
                    (
                        Some(head.segments.iter().map(|s| s.id).collect()),
                        head.delta.map(|d| d.base_seq),
                    )
                })
        };
        retained.push(Retained {
            seq,
            segments,
            delta_of,
        });
    }
    let mut referenced: std::collections::HashSet<u64> = loaded.1.iter().map(|s| s.id).collect();
    let mut all_read = true;
    for r in &retained {
        match &r.segments {
            Some(ids) => referenced.extend(ids),
            None => all_read = false,
        }
    }
    let orphans: Vec<PathBuf> = seg_files
        .iter()
        .filter(|(id, _)| !referenced.contains(id))
        .map(|&(id, kind)| dir.join(segment_file::file_name(id, kind)))
        .collect();
    if !all_read {
        report.orphan_segments = orphans;
        return Ok(retained);
    }
    for path in &orphans {
        storage.remove(path).map_err(io(path))?;
    }
    if !orphans.is_empty() {
        storage.sync_dir(dir).map_err(io(dir))?;
    }
    report.removed_orphan_segments = orphans;
    Ok(retained)
}

/// Opens or creates the store in `dir` (`docs/durability.md`, steps R1–R8), step by step.
pub(crate) fn recover(
    dir: &Path,
    storage: &dyn Storage,
    embedder: &dyn amberdb_embed::Embedder,
) -> Result<Recovered> {
    let mut report = OpenReport::default();
    // R1: directory and lock.
    let lock = lock_dir(storage, dir)?;
    // R2: leftovers of interrupted atomic writes.
    let mut names = remove_tmp_files(storage, dir, &mut report)?;
    // R3: identity (read, or the store created).
    let identity = identity_of(storage, dir, embedder, &mut names)?;
    let created = Model {
        id: identity.model_id.clone(),
        dim: identity.dim as usize,
    };
    // R4: newest usable checkpoint.
    let checkpoints = sorted_seqs(&names, ckpt_format::parse_file_name);
    let logs = sorted_seqs(&names, log_writer::parse_file_name);
    let (base, misnamed_checkpoint) =
        choose_checkpoint(storage, dir, &checkpoints, &logs, &created, &mut report)?;
    let delta_base = base.as_ref().map(|b| b.full);
    // A delta's base is another checkpoint than the one loaded.
    let delta_of = base
        .as_ref()
        .and_then(|b| (b.full.seq != b.seq).then_some(b.full.seq));
    let Base {
        seq: ckpt_seq,
        next_id,
        state,
        mut segments,
        ..
    } = base.unwrap_or_else(|| Base {
        seq: 0,
        next_id: 1,
        state: State::new(
            Table::default(),
            Collection::new(created.dim),
            created.clone(),
        ),
        segments: Vec::new(),
        full: crate::kernel::checkpoint::DeltaBase { seq: 0, records: 0 },
        damaged: Vec::new(),
    });
    report.checkpoint_seq = (ckpt_seq > 0).then_some(ckpt_seq);
    report.checkpoint_delta_of = delta_of;
    let seg_files: Vec<(u64, SegmentKind)> = names
        .iter()
        .filter_map(|n| segment_file::parse_file_name(n))
        .collect();
    let next_segment_id = seg_files.iter().map(|s| s.0).max().map_or(1, |m| m + 1);
    let retained = remove_orphan_segments(
        storage,
        dir,
        &checkpoints,
        (ckpt_seq, &segments, delta_of),
        &seg_files,
        &mut report,
    )?;
    // R5: the log file that follows the checkpoint was made durable before the checkpoint was
    // (C2), and the first one before IDENTITY (R3a): without it, acknowledged writes are lost.
    if !logs.contains(&(ckpt_seq + 1)) {
        if let Some(e) = misnamed_checkpoint {
            return Err(e);
        }
        return Err(EngineError::Corrupted {
            file: dir.join(log_writer::file_name(ckpt_seq + 1)),
            offset: 0,
            reason: "log file missing: the writes after the checkpoint (or since the store was created) are gone",
        });
    }
    // R6: replay the log after the checkpoint.
    let mut replay = Replay {
        ckpt_seq,
        expected: ckpt_seq + 1,
        next_id,
        state,
        replayed_deletes: false,
        log_bytes_after_checkpoint: 0,
        last_file: None,
    };
    let start = logs
        .iter()
        .rposition(|&first| first <= ckpt_seq + 1)
        .unwrap_or(0);
    for (i, &first) in logs.iter().enumerate().skip(start) {
        let newest = i + 1 == logs.len();
        replay.file(storage, dir, first, newest, &mut report)?;
    }
    // R7: the log must reach the checkpoint.
    let last_seq = replay.expected - 1;
    if last_seq < ckpt_seq {
        return Err(EngineError::Corrupted {
            file: dir.to_path_buf(),
            offset: 0,
            reason: "log ends before the checkpoint it was synced for",
        });
    }
    let Replay {
        next_id,
        state,
        mut replayed_deletes,
        log_bytes_after_checkpoint,
        last_file,
        ..
    } = replay;
    // A replayed re-embedding switched the vectors: the checkpoint's segments hold the old
    // ones, replaced (B4, below) until a purge (which the open notes) removes them.
    if state.model_epoch > 0 {
        segments.clear();
        replayed_deletes = true;
    }
    check_embedder(&identity, &created, &state, embedder)?;
    // R8: the active log file.
    let log = match last_file {
        Some((path, len)) => LogWriter::open(storage, path.clone(), len).map_err(io(&path))?,
        None => LogWriter::create(storage, dir, last_seq + 1).map_err(io(dir))?,
    };
    let checkpoints: Vec<Retained> = retained.into_iter().filter(|r| r.seq <= ckpt_seq).collect();
    let replaced = seg_files
        .iter()
        .filter(|(id, _)| {
            !segments.iter().any(|s| s.id == *id)
                && checkpoints
                    .iter()
                    .any(|c| c.segments.as_ref().is_some_and(|ids| ids.contains(id)))
        })
        .map(|&(id, kind)| SegmentEntry { id, rows: 0, kind })
        .collect();
    Ok(Recovered {
        lock,
        state,
        log,
        last_seq,
        next_id,
        next_segment_id,
        checkpoint_seq: ckpt_seq,
        log_bytes_after_checkpoint,
        checkpoints,
        delta_base,
        segments,
        replaced,
        replayed_deletes,
        report,
    })
}

/// R2: removes the `.tmp` leftovers of interrupted atomic writes. Returns the other names in
/// `dir`.
fn remove_tmp_files(
    storage: &dyn Storage,
    dir: &Path,
    report: &mut OpenReport,
) -> Result<Vec<String>> {
    let mut names = storage.list(dir).map_err(io(dir))?;
    for tmp in names.iter().filter(|n| n.ends_with(".tmp")) {
        storage.remove(&dir.join(tmp)).map_err(io(&dir.join(tmp)))?;
        report.removed_tmp_files += 1;
    }
    names.retain(|n| !n.ends_with(".tmp"));
    Ok(names)
}

/// The sequence numbers of the files in `names` that `parse` recognises, in order.
fn sorted_seqs(names: &[String], parse: impl Fn(&str) -> Option<u64>) -> Vec<u64> {
    let mut seqs: Vec<u64> = names.iter().filter_map(|n| parse(n)).collect();
    seqs.sort_unstable();
    seqs
}

/// R3: the store's identity, read from `IDENTITY`, or, for a directory with no store file, a
/// new store created (R3a: its first log file, then `IDENTITY`; `names` gains the log file).
fn identity_of(
    storage: &dyn Storage,
    dir: &Path,
    embedder: &dyn amberdb_embed::Embedder,
    names: &mut Vec<String>,
) -> Result<Identity> {
    // A store is created log first, then IDENTITY (R3a): a directory whose only store file is
    // a first log file holding no frame is a creation that did not finish.
    let id_path = dir.join(identity::FILE_NAME);
    let first_log = log_writer::file_name(1);
    if !names.iter().any(|n| n == identity::FILE_NAME)
        && names.iter().all(|n| *n == first_log || n == "LOCK")
        && names.contains(&first_log)
    {
        let path = dir.join(&first_log);
        let len = storage.len(&path).map_err(io(&path))?;
        if len <= crate::kernel::log::format::HEADER_LEN as u64 {
            storage.remove(&path).map_err(io(&path))?;
            storage.sync_dir(dir).map_err(io(dir))?;
            names.retain(|n| *n != first_log);
        }
    }
    let has_data = names.iter().any(|n| {
        log_writer::parse_file_name(n).is_some()
            || ckpt_format::parse_file_name(n).is_some()
            || segment_file::parse_file_name(n).is_some()
    });
    if names.iter().any(|n| n == identity::FILE_NAME) {
        let bytes = storage.read(&id_path).map_err(io(&id_path))?;
        return identity::decode(&bytes).map_err(|e| match e {
            IdentityError::Corrupted(d) => EngineError::Corrupted {
                file: id_path.clone(),
                offset: d.offset as u64,
                reason: d.reason,
            },
            IdentityError::Unsupported(found) => EngineError::UnsupportedVersion {
                file: id_path.clone(),
                found,
                supported: identity::SUPPORTED,
            },
        });
    }
    if has_data {
        return Err(EngineError::Corrupted {
            file: id_path,
            offset: 0,
            reason: "store files exist but IDENTITY is missing",
        });
    }
    let dim = u32::try_from(embedder.dim()).map_err(|_| EngineError::Invalid {
        field: "embedder",
        reason: "dimension too large".into(),
    })?;
    let model_id = embedder.model_id();
    if model_id.is_empty() || model_id.len() > identity::MAX_MODEL_ID {
        return Err(EngineError::Invalid {
            field: "embedder",
            reason: "model id must be 1..=256 bytes".into(),
        });
    }
    let id = Identity {
        model_id: model_id.to_owned(),
        dim,
        created_at: Timestamp::now(),
    };
    // R3a: the first log file, then IDENTITY: once IDENTITY exists, a missing log file is a
    // lost one (R5).
    LogWriter::create(storage, dir, 1).map_err(io(&dir.join(&first_log)))?;
    names.push(first_log);
    crate::kernel::storage::write_atomic(storage, dir, identity::FILE_NAME, &identity::encode(&id))
        .map_err(io(&id_path))?;
    Ok(id)
}

/// R4 and R4b: the newest checkpoint that loads whole, or, when none does with the log after
/// it, the newest whose records decode, without its damaged segments. Also returns the newest
/// checkpoint refused as misnamed, the reason to give when the log cannot make up for it.
fn choose_checkpoint(
    storage: &dyn Storage,
    dir: &Path,
    checkpoints: &[u64],
    logs: &[u64],
    created: &Model,
    report: &mut OpenReport,
) -> Result<(Option<Base>, Option<EngineError>)> {
    let mut base = None;
    // The newest checkpoint whose records are whole but a segment is not (R4b): used only if
    // no sound checkpoint with the log after it recovers.
    let mut damaged: Option<Base> = None;
    let mut misnamed_checkpoint: Option<EngineError> = None;
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
                    || matches!(e, EngineError::Io { .. }) =>
            {
                report
                    .skipped_checkpoints
                    .push(format!("{}: {e}", ckpt_format::file_name(seq)));
                if misnamed_checkpoint.is_none() && matches!(e, EngineError::Misnamed { .. }) {
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

/// R3b: the embedder given must be the one the store's vectors come from now: the one
/// IDENTITY names, or the one a re-embedding switched to (`docs/durability.md`).
fn check_embedder(
    identity: &Identity,
    created: &Model,
    state: &State,
    embedder: &dyn amberdb_embed::Embedder,
) -> Result<()> {
    let same = if state.model == *created {
        identity.matches(embedder.model_id(), embedder.dim())
    } else {
        state.model.id == embedder.model_id() && state.model.dim == embedder.dim()
    };
    if same {
        return Ok(());
    }
    Err(EngineError::EmbedderMismatch {
        stored_model: state.model.id.clone(),
        stored_dim: state.model.dim,
        given_model: embedder.model_id().to_owned(),
        given_dim: embedder.dim(),
    })
}

/// What `scan` returned for one log file: how it ended, or `Err(Ok(_))` for a bad header and
/// `Err(Err(()))` when the applier stopped it.
type Scanned =
    std::result::Result<crate::kernel::log::reader::Scan, std::result::Result<HeaderError, ()>>;

/// R6 under way: the state the log's frames are applied to, and what the replay has found.
struct Replay {
    ckpt_seq: u64,
    /// The sequence number the next frame after the checkpoint must carry.
    expected: u64,
    next_id: u64,
    state: State,
    replayed_deletes: bool,
    log_bytes_after_checkpoint: u64,
    /// The newest log file and where its valid frames end: the writer appends there (R8).
    last_file: Option<(PathBuf, u64)>,
}

impl Replay {
    /// Replays the log file whose first sequence number is `first` (`newest`: the last one,
    /// whose torn tail is cut).
    fn file(
        &mut self,
        storage: &dyn Storage,
        dir: &Path,
        first: u64,
        newest: bool,
        report: &mut OpenReport,
    ) -> Result<()> {
        let path = dir.join(log_writer::file_name(first));
        // Every file is mapped, not copied: a kill loop at 1M left 130 MB of tail in the
        // newest alone, and a copy is as much fresh memory, which a VM's host may have to give
        // back first (docs/benchmarks.md, "What fresh memory costs on a VM"). Nothing writes
        // the files meanwhile (we hold LOCK; the writer opens after recovery), and the map
        // is dropped before the newest is cut or removed below (docs/safety.md).
        let mapped = storage.map(&path).map_err(io(&path))?;
        let bytes = mapped.as_slice();
        // File identity: a log under another's name (renamed, swapped, a stale copy) is
        // refused before any of its frames is applied (`docs/durability.md`, "File identity").
        if let Ok(header) = crate::kernel::log::format::decode_header(bytes)
            && header != first
        {
            return Err(EngineError::Misnamed {
                file: path,
                named: first,
                header,
            });
        }
        // Log files start at checkpoints (C2): one past the checkpoint holds only its tail.
        if first > self.ckpt_seq {
            self.log_bytes_after_checkpoint += bytes.len() as u64;
        }
        // A STORE frame carries its vector: at most this many rows can come from the file.
        self.state
            .vectors
            .reserve(bytes.len() / (self.state.vectors.dim() * 4).max(1));
        let (scanned, applied) = self.scan_and_apply(bytes, &path, report);
        let file_len = bytes.len();
        drop(mapped);
        applied?;
        let scanned = scanned.map_err(|_| EngineError::Corrupted {
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
        report: &mut OpenReport,
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
                applied = frames
                    .into_iter()
                    .try_for_each(|(seq, offset, op)| self.frame(path, seq, offset, op, report));
                if applied.is_err() {
                    break;
                }
            }
            drop(rx);
            (scanner.join(), applied)
        })
    }

    /// Applies one frame, unless the checkpoint holds it already.
    fn frame(
        &mut self,
        path: &Path,
        seq: u64,
        offset: u64,
        op: Op,
        report: &mut OpenReport,
    ) -> Result<()> {
        if seq <= self.ckpt_seq {
            return Ok(());
        }
        if seq != self.expected {
            return Err(EngineError::Corrupted {
                file: path.to_path_buf(),
                offset,
                reason: "gap in log sequence numbers",
            });
        }
        if let Some(id) = op.max_new_id() {
            self.next_id = self.next_id.max(id + 1);
        }
        self.replayed_deletes |= op.deletes_records();
        self.state
            .apply(op)
            .map_err(|reason| EngineError::Corrupted {
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
        report: &mut OpenReport,
    ) -> Result<()> {
        match scanned {
            Ok(s) => {
                if s.first_seq > self.expected {
                    return Err(EngineError::Corrupted {
                        file: path,
                        offset: 8,
                        reason: "log file starts after a gap",
                    });
                }
                match s.end {
                    ScanEnd::Clean => {}
                    ScanEnd::TornTail { offset } if newest => {
                        storage.truncate(&path, offset).map_err(io(&path))?;
                        report.truncated_tail = Some((path.clone(), offset));
                    }
                    ScanEnd::TornTail { offset } => {
                        return Err(EngineError::Corrupted {
                            file: path,
                            offset,
                            reason: "bad frame in a log file that is not the newest",
                        });
                    }
                    ScanEnd::Corrupted { offset, reason } => {
                        return Err(EngineError::Corrupted {
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
            Err(Err(())) => Err(EngineError::Corrupted {
                file: path,
                offset: 0,
                reason: "log replay stopped",
            }),
            Err(Ok(HeaderError::Unsupported(found))) => Err(EngineError::UnsupportedVersion {
                file: path,
                found,
                supported: crate::kernel::log::format::SUPPORTED,
            }),
            Err(Ok(HeaderError::Corrupted(reason))) => {
                // A header torn while the file was being created (step C2 or R3a) holds no
                // frames.
                if newest && file_len <= crate::kernel::log::format::HEADER_LEN {
                    storage.remove(&path).map_err(io(&path))?;
                    storage.sync_dir(dir).map_err(io(dir))?;
                    report.truncated_tail = Some((path, 0));
                    Ok(())
                } else {
                    Err(EngineError::Corrupted {
                        file: path,
                        offset: 0,
                        reason,
                    })
                }
            }
        }
    }
}
