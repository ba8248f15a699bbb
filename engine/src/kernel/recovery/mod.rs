//! Opening a store: lock, identity, newest valid checkpoint, log replay, torn-tail repair.
//! Each step is numbered as in `docs/durability.md`, "Recovery".

mod checkpoint;
mod found;

use crate::kernel::checkpoint::format as ckpt_format;
use crate::kernel::error::{KernelError, Result};
use crate::kernel::identity::{self, Identity, IdentityError, StoreId};
use crate::kernel::journal::local::LocalJournal;
use crate::kernel::journal::{Journal, ReplayReport};
use crate::kernel::log::format::{Op, fold_running_crc};
use crate::kernel::log::writer::{self as log_writer, LogWriter};
use crate::kernel::segment_file::{self, SegmentEntry, SegmentKind};
use crate::kernel::state::Model;
use crate::kernel::state::State;
use crate::kernel::storage::{Storage, StorageLock};
use checkpoint::{Base, choose_checkpoint, remove_orphan_segments};
pub use found::OpenReport;
use found::io;
pub(crate) use found::{Recovered, Retained};
use std::path::Path;
use std::sync::Arc;

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
            KernelError::Locked { path: lock_path }
        } else {
            KernelError::Io {
                path: lock_path,
                source: e,
            }
        }
    })
}

/// Opens or creates the store in `dir` (`docs/durability.md`, steps R1–R8), step by step.
pub(crate) fn recover(
    dir: &Path,
    shared_storage: &Arc<dyn Storage>,
    embedder: &dyn amberdb_embed::Embedder,
    store_id: Option<StoreId>,
    tail_from_stream: bool,
) -> Result<Recovered> {
    let storage = &**shared_storage;
    let mut report = OpenReport::default();
    // R1: directory and lock.
    let lock = lock_dir(storage, dir)?;
    // R2: leftovers of interrupted atomic writes.
    let mut names = remove_tmp_files(storage, dir, &mut report)?;
    // R3, R3c, R3d: identity, every file's owner, a store id for a store made before them.
    let (identity, census) =
        owned_files(storage, dir, embedder, store_id, &mut names, &mut report)?;
    let owner = identity.owner();
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
        log_crc,
        ..
    } = base.unwrap_or_else(|| Base::empty(&created));
    report.checkpoint_seq = (ckpt_seq > 0).then_some(ckpt_seq);
    report.checkpoint_delta_of = delta_of;
    let seg_files: Vec<(u64, SegmentKind)> = names
        .iter()
        .filter_map(|n| segment_file::parse_file_name(n))
        .collect();
    let next_segment_id = seg_files.iter().map(|s| s.0).max().map_or(1, |m| m + 1);
    let checkpoint::Kept { retained, damaged } = remove_orphan_segments(
        storage,
        dir,
        &checkpoints,
        (ckpt_seq, &segments, delta_of),
        &seg_files,
        &mut report,
    )?;
    // R5, but not for a replica that reads its tail from the stream: the open below drops
    // every log file after the checkpoint anyway and starts a new one there (R8), and a kill
    // inside that start leaves the file torn or gone; the stream holds what it held.
    let logs = if tail_from_stream {
        drop_log_tail(storage, dir, logs, ckpt_seq, &mut report)?
    } else {
        log_follows(dir, &logs, ckpt_seq, misnamed_checkpoint)?;
        logs
    };
    // R6–R8: the journal replays the log after the checkpoint and opens the active file.
    let mut journal = LocalJournal::new(
        Arc::clone(shared_storage),
        dir,
        owner,
        logs,
        census.log_limits,
    );
    let Tail {
        last_seq,
        state,
        next_id,
        running_crc,
        last_frame,
        mut replayed_deletes,
        replayed,
    } = replay_tail(
        &mut journal,
        storage,
        dir,
        (ckpt_seq, state, next_id, log_crc),
        tail_from_stream,
    )?;
    report.replayed_frames = replayed.replayed_frames;
    report.truncated_tail = replayed.truncated_tail;
    // A replayed re-embedding switched the vectors: the checkpoint's segments hold the old
    // ones, replaced (B4, below) until a purge (which the open notes) removes them.
    if state.model_epoch > 0 {
        segments.clear();
        replayed_deletes = true;
    }
    check_embedder(&identity, &created, &state, embedder)?;
    let (checkpoints, replaced, damaged) =
        kept_after_open(dir, &seg_files, &segments, retained, ckpt_seq, damaged);
    Ok(Recovered {
        lock,
        identity,
        state,
        log_bytes_after_checkpoint: journal.replayed_bytes(),
        journal,
        last_seq,
        running_crc,
        last_frame,
        next_id,
        next_segment_id,
        checkpoint_seq: ckpt_seq,
        checkpoints,
        delta_base,
        segments,
        replaced,
        replayed_deletes,
        damaged,
        report,
    })
}

/// What R6 left: the last sequence number, the state, next id and running CRC after the log's
/// frames.
struct Tail {
    last_seq: u64,
    state: State,
    next_id: u64,
    running_crc: Option<u32>,
    last_frame: Option<u32>,
    replayed_deletes: bool,
    replayed: ReplayReport,
}

/// R6: the journal replays the log after the checkpoint (`base`: its sequence number, state,
/// next id and running CRC) onto the checkpoint's state.
fn replay_tail(
    journal: &mut LocalJournal,
    storage: &dyn Storage,
    dir: &Path,
    base: (u64, State, u64, Option<u32>),
    tail_from_stream: bool,
) -> Result<Tail> {
    let (ckpt_seq, mut state, mut next_id, mut running_crc) = base;
    let mut replayed_deletes = false;
    let mut last_frame = None;
    // A STORE frame carries its vector: at most this many rows can come from the files.
    let replayed_len: u64 = (journal.files_after(ckpt_seq).iter())
        .map(|first| {
            storage
                .len(&dir.join(log_writer::file_name(*first)))
                .unwrap_or(0)
        })
        .sum();
    state
        .vectors
        .reserve(replayed_len as usize / (state.vectors.dim() * 4).max(1));
    let mut replayed = ReplayReport::default();
    let last_seq = journal.replay(
        ckpt_seq,
        &mut |seq, stored, op| {
            // The checkpoint's own file holds frames after it only when its rotation failed
            // (C2): a tail this open cannot drop without cutting inside a file.
            if tail_from_stream && seq > ckpt_seq {
                return Err("a frame after the checkpoint in its own log file (a failed rotation): rebuild this replica from the stream");
            }
            if let Some(id) = op.max_new_id() {
                next_id = next_id.max(id + 1);
            }
            replayed_deletes |= op.deletes_records();
            running_crc = running_crc.map(|r| fold_running_crc(r, stored));
            last_frame = (!matches!(op, Op::Skip(_))).then_some(stored);
            state.apply(op)
        },
        &mut replayed,
    )?;
    Ok(Tail {
        last_seq,
        state,
        next_id,
        running_crc,
        last_frame,
        replayed_deletes,
        replayed,
    })
}

/// A partition replica's open (`docs/cluster.md`, "Cutting a stale tail"): the log files after
/// the checkpoint are removed, so the store opens at the checkpoint and reads the rest of its
/// partition's stream again. A checkpoint holds only frames the stream holds (an owner's C0
/// waits for it), so what is removed is either re-read or a stale owner's unacknowledged tail.
/// Returns the log files kept.
fn drop_log_tail(
    storage: &dyn Storage,
    dir: &Path,
    logs: Vec<u64>,
    ckpt_seq: u64,
    report: &mut OpenReport,
) -> Result<Vec<u64>> {
    let (kept, dropped): (Vec<u64>, Vec<u64>) = logs.into_iter().partition(|&f| f <= ckpt_seq);
    for first in &dropped {
        let path = dir.join(log_writer::file_name(*first));
        storage.remove(&path).map_err(io(&path))?;
    }
    if !dropped.is_empty() {
        storage.sync_dir(dir).map_err(io(dir))?;
    }
    report.dropped_log_files = dropped.len() as u64;
    Ok(kept)
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
/// new store created (R3a: its first log file, then `IDENTITY`; `names` gains the log file)
/// with the id `store_id` asks for (a cluster partition's, `docs/cluster.md`) or a new one.
fn identity_of(
    storage: &dyn Storage,
    dir: &Path,
    embedder: &dyn amberdb_embed::Embedder,
    store_id: Option<StoreId>,
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
            IdentityError::Corrupted(d) => KernelError::Corrupted {
                file: id_path.clone(),
                offset: d.offset as u64,
                reason: d.reason,
            },
            IdentityError::Unsupported(found) => KernelError::UnsupportedVersion {
                file: id_path.clone(),
                found,
                supported: identity::SUPPORTED,
            },
        });
    }
    if has_data {
        return Err(KernelError::Corrupted {
            file: id_path,
            offset: 0,
            reason: "store files exist but IDENTITY is missing",
        });
    }
    let dim = u32::try_from(embedder.dim()).map_err(|_| KernelError::Invalid {
        field: "embedder",
        reason: "dimension too large".into(),
    })?;
    let model_id = embedder.model_id();
    if model_id.is_empty() || model_id.len() > identity::MAX_MODEL_ID {
        return Err(KernelError::Invalid {
            field: "embedder",
            reason: "model id must be 1..=256 bytes".into(),
        });
    }
    let mut id = Identity::new(model_id.to_owned(), dim).map_err(io(&id_path))?;
    if let Some(store) = store_id {
        id.store = store;
    }
    // R3a: the first log file, then IDENTITY: once IDENTITY exists, a missing log file is a
    // lost one (R5).
    LogWriter::create(storage, dir, 1, id.owner()).map_err(io(&dir.join(&first_log)))?;
    names.push(first_log);
    crate::kernel::storage::write_atomic(storage, dir, identity::FILE_NAME, &identity::encode(&id))
        .map_err(io(&id_path))?;
    Ok(id)
}

/// R3 (identity read, or the store created), R3c (every file's owner judged before any is
/// read as the store's or removed: a foreign log refuses the open, foreign checkpoints and
/// segments go into quarantine) and R3d (a store made before store ids gets its id, once).
fn owned_files(
    storage: &dyn Storage,
    dir: &Path,
    embedder: &dyn amberdb_embed::Embedder,
    store_id: Option<StoreId>,
    names: &mut Vec<String>,
    report: &mut OpenReport,
) -> Result<(Identity, crate::kernel::ownership::Census)> {
    let identity = identity_of(storage, dir, embedder, store_id, names)?;
    // A store opened as a cluster partition's must be that partition's (before any effect).
    if let Some(asked) = store_id
        && (identity.is_legacy() || identity.store != asked)
    {
        return Err(KernelError::Invalid {
            field: "store_id",
            reason: format!(
                "{} holds store {}, not {asked}: a partition's replicas are one store, and a directory of another store (or one made before store ids) cannot serve as it",
                dir.display(),
                identity.store
            ),
        });
    }
    let census = crate::kernel::ownership::census(storage, dir, &identity, names)?;
    report.quarantined.clone_from(&census.quarantined);
    Ok((upgrade_identity(storage, dir, identity)?, census))
}

/// R3d: an `IDENTITY` of version 1 (a store made before store ids) rewritten as version 2
/// with a new id, atomically (`.tmp`, fsync, rename, directory fsync): the one rewrite
/// `docs/format/identity.md` allows. Files written before stay readable and are trusted as
/// they were; from now on the store no longer opens with a build that predates ids.
fn upgrade_identity(storage: &dyn Storage, dir: &Path, identity: Identity) -> Result<Identity> {
    if !identity.is_legacy() {
        return Ok(identity);
    }
    let path = dir.join(identity::FILE_NAME);
    let upgraded = identity.upgraded().map_err(io(&path))?;
    crate::kernel::storage::write_atomic(
        storage,
        dir,
        identity::FILE_NAME,
        &identity::encode(&upgraded),
    )
    .map_err(io(&path))?;
    tracing::info!(store = %upgraded.store, "the store was given its id (IDENTITY version 2)");
    Ok(upgraded)
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
    Err(KernelError::EmbedderMismatch {
        stored_model: state.model.id.clone(),
        stored_dim: state.model.dim,
        given_model: embedder.model_id().to_owned(),
        given_dim: embedder.dim(),
    })
}

/// What the store keeps after the open: the retained checkpoints (the loaded one and older),
/// the segments an index build replaced (B4), and the damaged files for the next sound
/// checkpoint to remove. Checkpoints newer than the one loaded were skipped (a damaged
/// segment with a sound recovery beside it, a name that is not theirs): derived, never
/// loaded, they and the segments only they name join those ("Damaged derived files").
fn kept_after_open(
    dir: &Path,
    seg_files: &[(u64, SegmentKind)],
    segments: &[SegmentEntry],
    retained: Vec<Retained>,
    ckpt_seq: u64,
    damaged: Vec<std::path::PathBuf>,
) -> (Vec<Retained>, Vec<SegmentEntry>, Vec<std::path::PathBuf>) {
    let (checkpoints, skipped): (Vec<Retained>, Vec<Retained>) =
        retained.into_iter().partition(|r| r.seq <= ckpt_seq);
    let replaced = replaced_segments(seg_files, segments, &checkpoints);
    let mut damaged = damaged;
    damaged.extend(skipped_files(
        dir,
        seg_files,
        segments,
        &checkpoints,
        &skipped,
    ));
    (checkpoints, replaced, damaged)
}

/// The files of checkpoints newer than the loaded one (`skipped`) and the segment files only
/// they name (not loaded, not named by a retained checkpoint).
fn skipped_files(
    dir: &Path,
    files: &[(u64, SegmentKind)],
    loaded: &[SegmentEntry],
    retained: &[Retained],
    skipped: &[Retained],
) -> Vec<std::path::PathBuf> {
    let named_by = |list: &[Retained], id: u64| {
        list.iter()
            .any(|c| c.segments.as_ref().is_some_and(|ids| ids.contains(&id)))
    };
    let mut out: Vec<std::path::PathBuf> = skipped
        .iter()
        .map(|c| dir.join(ckpt_format::file_name(c.seq)))
        .collect();
    out.extend(
        files
            .iter()
            .filter(|(id, _)| {
                !loaded.iter().any(|s| s.id == *id)
                    && !named_by(retained, *id)
                    && named_by(skipped, *id)
            })
            .map(|&(id, kind)| dir.join(segment_file::file_name(id, kind))),
    );
    out
}

/// Segment files an older retained checkpoint names and the loaded one does not: what an index
/// build replaced, removed once no retained checkpoint names them (B4).
fn replaced_segments(
    files: &[(u64, SegmentKind)],
    loaded: &[SegmentEntry],
    checkpoints: &[Retained],
) -> Vec<SegmentEntry> {
    files
        .iter()
        .filter(|(id, _)| {
            !loaded.iter().any(|s| s.id == *id)
                && checkpoints
                    .iter()
                    .any(|c| c.segments.as_ref().is_some_and(|ids| ids.contains(id)))
        })
        .map(|&(id, kind)| SegmentEntry { id, rows: 0, kind })
        .collect()
}

/// R5: the log file that follows the checkpoint was made durable before the checkpoint was
/// (C2), and the first one before IDENTITY (R3a): without it, acknowledged writes are lost.
/// A checkpoint refused as misnamed is the better reason then.
fn log_follows(
    dir: &Path,
    logs: &[u64],
    ckpt_seq: u64,
    misnamed_checkpoint: Option<KernelError>,
) -> Result<()> {
    if logs.contains(&(ckpt_seq + 1)) {
        return Ok(());
    }
    if let Some(e) = misnamed_checkpoint {
        return Err(e);
    }
    Err(KernelError::Corrupted {
        file: dir.join(log_writer::file_name(ckpt_seq + 1)),
        offset: 0,
        reason: "log file missing: the writes after the checkpoint (or since the store was created) are gone",
    })
}
