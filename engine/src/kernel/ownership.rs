//! Which store each file belongs to (`docs/durability.md`, "File identity", R3c): the census
//! an open takes of its log, checkpoint and segment files before it reads or removes any of
//! them, and the quarantine folder a foreign file is moved into.
//!
//! Guarantees: a log file of another store (or of an incarnation this one never was, or of an
//! earlier one past the restore point) refuses the open before anything is changed; a
//! checkpoint or segment file of that kind is moved into `quarantine/` (never removed, never
//! read as the store's), named in the open report and the log. Files of formats from before
//! owners name none and are trusted as they were. Not done here: a file's frames past its
//! incarnation's restore point are found by the replay (`recovery::replay`), which reads them.

use crate::kernel::checkpoint::{format as ckpt_format, reader as ckpt_reader};
use crate::kernel::error::{KernelError, Result};
use crate::kernel::identity::{Identity, Verdict};
use crate::kernel::log::format as log_format;
use crate::kernel::log::writer as log_writer;
use crate::kernel::segment_file;
use crate::kernel::storage::Storage;
use amberdb_index::{HeaderOwner, Owner};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The folder inside a store that foreign files are moved into.
pub const QUARANTINE_DIR: &str = "quarantine";

/// What the census found.
#[derive(Debug, Default)]
pub(crate) struct Census {
    /// Log files of an earlier incarnation (by first sequence number): the last sequence
    /// number of them this store shares.
    pub(crate) log_limits: BTreeMap<u64, u64>,
    /// Checkpoint and segment files moved into the quarantine folder, each with why.
    pub(crate) quarantined: Vec<String>,
}

/// What kind of store file `name` is, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FileKind {
    Log(u64),
    Checkpoint(u64),
    Segment(u64),
}

fn kind_of(name: &str) -> Option<FileKind> {
    log_writer::parse_file_name(name)
        .map(FileKind::Log)
        .or_else(|| ckpt_format::parse_file_name(name).map(FileKind::Checkpoint))
        .or_else(|| segment_file::parse_file_name(name).map(|(id, _)| FileKind::Segment(id)))
}

/// The owner a store file's header names: `None` when the header does not read (a damaged
/// file: the open's own checks name it).
#[must_use]
pub fn header_owner(storage: &dyn Storage, path: &Path) -> Option<Owner> {
    let name = path.file_name()?.to_str()?;
    let bytes = storage.map(path).ok()?;
    let b = bytes.as_slice();
    match kind_of(name)? {
        FileKind::Log(_) => log_format::decode_header(b).ok().map(|h| h.owner),
        FileKind::Checkpoint(_) => ckpt_reader::header_owner(b),
        FileKind::Segment(_) => match amberdb_index::header_owner(b) {
            HeaderOwner::Owned(o) => Some(o),
            HeaderOwner::Unmarked => Some(Owner::NONE),
            HeaderOwner::Unreadable => None,
        },
    }
}

/// A store file judged by the owner its header names (`Identity::judge`, with an earlier
/// incarnation's restore point applied to the file's kind).
pub(crate) struct Judged {
    /// Why it is not this store's; `None`: it may be read as the store's own.
    pub(crate) foreign: Option<String>,
    /// For a log file of an earlier incarnation: the last sequence number of it this store
    /// shares (a frame past it is foreign, found by the replay).
    pub(crate) log_limit: Option<u64>,
    /// Whether it is a log file (a foreign one refuses the open; others are quarantined).
    pub(crate) is_log: bool,
}

/// The judgement of the store file `name` in `dir` against `identity`: `None` for a name
/// that is not a log, checkpoint or segment file's, or a header that does not read (a damaged
/// file: the open's own checks name it). The one rule the open's census and `verify` share.
pub(crate) fn judge_file(
    storage: &dyn Storage,
    dir: &Path,
    identity: &Identity,
    name: &str,
) -> Option<Judged> {
    let kind = kind_of(name)?;
    let owner = header_owner(storage, &dir.join(name))?;
    let is_log = matches!(kind, FileKind::Log(_));
    let (foreign, log_limit) = match identity.judge(owner) {
        Verdict::Own => (None, None),
        Verdict::Foreign(why) => (Some(why), None),
        Verdict::Until { seq, segment } => match kind {
            FileKind::Log(first) if first > seq + 1 => (
                Some(format!(
                    "a log of an earlier incarnation of this store that starts after its restore point (sequence number {seq}): a diverged copy's"
                )),
                None,
            ),
            FileKind::Log(_) => (None, Some(seq)),
            FileKind::Checkpoint(at) if at > seq => (
                Some(format!(
                    "a checkpoint of an earlier incarnation of this store past its restore point (sequence number {seq}): a diverged copy's"
                )),
                None,
            ),
            FileKind::Segment(id) if id >= segment => (
                Some(format!(
                    "a segment of an earlier incarnation of this store made after its restore (ids from {segment} on are this incarnation's): a diverged copy's"
                )),
                None,
            ),
            FileKind::Checkpoint(_) | FileKind::Segment(_) => (None, None),
        },
    };
    Some(Judged {
        foreign,
        log_limit,
        is_log,
    })
}

/// R3c: every log, checkpoint and segment file in `names` judged by the owner its header
/// names. A foreign log refuses the open (`Foreign`) before anything is moved; then foreign
/// checkpoints and segments are moved into the quarantine folder and taken out of `names`.
///
/// # Errors
/// `Foreign` naming the log file and both stores; `Io` when a move fails.
pub(crate) fn census(
    storage: &dyn Storage,
    dir: &Path,
    identity: &Identity,
    names: &mut Vec<String>,
) -> Result<Census> {
    let mut census = Census::default();
    let mut foreign = Vec::new();
    for name in names.iter() {
        let Some(judged) = judge_file(storage, dir, identity, name) else {
            continue;
        };
        if let (Some(first), Some(limit)) = (log_writer::parse_file_name(name), judged.log_limit) {
            census.log_limits.insert(first, limit);
        }
        if let Some(why) = judged.foreign {
            if judged.is_log {
                return Err(KernelError::Foreign {
                    file: dir.join(name),
                    why,
                });
            }
            foreign.push((name.clone(), why));
        }
    }
    for (name, why) in foreign {
        let to = quarantine(storage, dir, &name)?;
        tracing::warn!(file = %dir.join(&name).display(), moved_to = %to.display(), %why, "a file of another store, moved into quarantine");
        census.quarantined.push(format!("{name}: {why}"));
        names.retain(|n| *n != name);
    }
    Ok(census)
}

/// Moves the file `name` of `dir` into the quarantine folder under a name no earlier move
/// used, durably (both directories synced). Returns where it went.
///
/// # Errors
/// `Io`.
pub(crate) fn quarantine(storage: &dyn Storage, dir: &Path, name: &str) -> Result<PathBuf> {
    let folder = dir.join(QUARANTINE_DIR);
    storage
        .create_dir_all(&folder)
        .map_err(KernelError::io(&folder))?;
    let taken = storage.list(&folder).map_err(KernelError::io(&folder))?;
    let target = (0u32..)
        .map(|n| {
            if n == 0 {
                name.to_owned()
            } else {
                format!("{name}.{n}")
            }
        })
        .find(|candidate| !taken.contains(candidate))
        .unwrap_or_else(|| name.to_owned());
    let to = folder.join(target);
    let from = dir.join(name);
    storage.rename(&from, &to).map_err(KernelError::io(&from))?;
    storage
        .sync_dir(&folder)
        .map_err(KernelError::io(&folder))?;
    storage.sync_dir(dir).map_err(KernelError::io(dir))?;
    Ok(to)
}

/// The files in the quarantine folder of `dir` (none when it does not exist).
#[must_use]
pub fn quarantined_files(storage: &dyn Storage, dir: &Path) -> Vec<String> {
    let mut names = storage.list(&dir.join(QUARANTINE_DIR)).unwrap_or_default();
    names.sort();
    names
}
