//! What recovery finds and hands on: the `OpenReport`, everything the store starts from
//! (`Recovered`), the checkpoints it keeps (`Retained`).

use crate::kernel::error::KernelError;
use crate::kernel::segment_file::SegmentEntry;
use crate::kernel::state::State;
use crate::kernel::storage::StorageLock;
use std::path::{Path, PathBuf};

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
    /// Log files after the checkpoint dropped by a partition replica's open
    /// (`StoreOptions::tail_from_stream`): their frames are read again from the stream.
    pub dropped_log_files: u64,
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
    /// Checkpoint and segment files of another store (or of a diverged copy of this one)
    /// moved into the store's `quarantine/` folder, each with why (`docs/durability.md`,
    /// "File identity"). Never read, never removed by the store.
    pub quarantined: Vec<String>,
    /// Damaged checkpoints removed because a sound newer one was loaded, and the segment
    /// files only they named (`docs/durability.md`, "Damaged derived files").
    pub removed_damaged: Vec<PathBuf>,
}

/// Everything recovery hands to the store.
pub(crate) struct Recovered {
    pub(crate) lock: Box<dyn StorageLock>,
    /// Which store this is: the owner its new files carry.
    pub(crate) identity: crate::kernel::identity::Identity,
    pub(crate) state: State,
    /// The log, replayed (R6) with its active file open (R8).
    pub(crate) journal: crate::kernel::journal::local::LocalJournal,
    pub(crate) last_seq: u64,
    /// The log's running CRC through `last_seq` (`docs/cluster.md`, "Running CRC"): `None`
    /// when the checkpoint loaded did not hold it.
    pub(crate) running_crc: Option<u32>,
    /// The stored checksum of the last frame replayed unless it is a `Skip` (`None` too when
    /// none was replayed): `RunningCrc::last_frame`.
    pub(crate) last_frame: Option<u32>,
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
    /// Damaged checkpoints newer than the loaded one, and the segment files only they may
    /// name: removed once the next checkpoint is sound (`docs/durability.md`, "Damaged
    /// derived files").
    pub(crate) damaged: Vec<PathBuf>,
    pub(crate) report: OpenReport,
}

pub(super) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> KernelError + '_ {
    move |source| KernelError::Io {
        path: path.to_path_buf(),
        source,
    }
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
