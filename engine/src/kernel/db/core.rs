//! What every job of a [`Db`] shares: the state, the writer (log file, counters, segment
//! list), group commit, the configuration, the maintenance handle, and the small accessors. The
//! jobs (`write`, `checkpoint`, `retention`, `indexing`, `purge`, `crate::kernel::backup`) each
//! add their own `impl Db` in their file; `db/mod.rs` keeps the open and the orchestration.

use crate::kernel::checkpoint::DeltaBase;
use crate::kernel::commit::PoisonCause;
use crate::kernel::config::DbConfig;
use crate::kernel::journal::Journal;
use crate::kernel::lexical::LexicalBuild;
use crate::kernel::maintenance::Maintenance;
use crate::kernel::record::{MemoryId, Timestamp};
use crate::kernel::recovery::{OpenReport, Retained};
use crate::kernel::state::State;
use crate::kernel::storage::{Storage, StorageLock};
use parking_lot::{Condvar, Mutex, RwLock, RwLockReadGuard};
use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Weak};
use std::time::Instant;

thread_local! {
    /// Set while this thread runs maintenance or holds the checkpoint mutex: its writes never
    /// wait for a checkpoint at `log_tail_limit`, which would be waiting for itself
    /// (`Db::wait_for_log_room`).
    pub(in crate::kernel) static MAINTAINING: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` with `MAINTAINING` set on this thread (restored even if `f` panics).
pub(in crate::kernel) fn maintaining<T>(f: impl FnOnce() -> T) -> T {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            MAINTAINING.set(self.0);
        }
    }
    let _restore = Restore(MAINTAINING.replace(true));
    f()
}

/// The ids the operation being prepared may assign: `nth(0)` is the next free one.
pub(crate) struct NextIds(pub(in crate::kernel) u64);

impl NextIds {
    /// The `i`-th free id, counting from 0.
    pub(crate) fn nth(&self, i: u64) -> MemoryId {
        MemoryId(self.0 + i)
    }
}

pub(crate) struct Writer {
    pub(in crate::kernel) next_seq: u64,
    pub(in crate::kernel) next_id: u64,
    pub(in crate::kernel) next_segment_id: u64,
    pub(in crate::kernel) checkpoint_seq: u64,
    pub(in crate::kernel) log_bytes_since_checkpoint: u64,
    /// The checkpoint files kept, oldest first, with the segments each names.
    pub(in crate::kernel) checkpoints: Vec<Retained>,
    /// The sealed segments (`Segments`: the one owner of the list).
    pub(in crate::kernel) segments: super::segments::Segments,
    /// Automatic checkpoints wait until then after one failed for a full disk.
    pub(in crate::kernel) checkpoint_paused_until: Option<Instant>,
    /// A write's wait for a checkpoint at `log_tail_limit` timed out: writes go on without
    /// waiting until a checkpoint finishes or fails.
    pub(in crate::kernel) tail_wait_timed_out: bool,
    /// The newest full checkpoint, when the table's changed ids count from it (`None`: the
    /// next checkpoint is full).
    pub(in crate::kernel) delta_base: Option<DeltaBase>,
    /// Damaged checkpoints and the segment files only they may name, removed by the next
    /// sound checkpoint's retention (`docs/durability.md`, "Damaged derived files").
    pub(in crate::kernel) damaged: Vec<PathBuf>,
}

impl Writer {
    /// The damaged files the open left (`damaged`), taken for removal now that a sound
    /// checkpoint is written: all but a checkpoint file name a retained checkpoint has since
    /// taken (written at the same sequence number, it replaced the damaged file).
    pub(in crate::kernel) fn take_damaged(&mut self) -> Vec<PathBuf> {
        let retained: Vec<String> = self
            .checkpoints
            .iter()
            .map(|c| crate::kernel::checkpoint::format::file_name(c.seq))
            .collect();
        std::mem::take(&mut self.damaged)
            .into_iter()
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_none_or(|n| !retained.iter().any(|r| r == n))
            })
            .collect()
    }
}

/// What one index build did (`Store::build_index`, STATS).
#[derive(Debug, Clone, PartialEq)]
pub struct IndexBuild {
    /// The new IVF segment's id.
    pub segment_id: u64,
    /// Its rows.
    pub rows: u64,
    /// The segments it replaced.
    pub replaced: usize,
    /// Its lists.
    pub nlist: usize,
    /// The lists a search probes by default.
    pub nprobe: u32,
    /// The mean recall@10 measured at `nprobe` on held-out rows.
    pub built_recall: f32,
    /// Wall time, gathering to checkpoint.
    pub seconds: f64,
}

/// The index builds of one store: one at a time, in the background or asked for.
#[derive(Default)]
pub(in crate::kernel) struct Indexing {
    /// A build is running (or a background one starting).
    pub(in crate::kernel) running: AtomicBool,
    /// Set when the store closes: a running build gives up at its next check.
    pub(in crate::kernel) stop: Arc<AtomicBool>,
    /// The background build thread, joined at close.
    pub(in crate::kernel) thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    pub(in crate::kernel) builds: AtomicU64,
    pub(in crate::kernel) failures: AtomicU64,
    pub(in crate::kernel) last: Mutex<Option<IndexBuild>>,
    pub(in crate::kernel) last_error: Mutex<Option<String>>,
}

/// The log's running CRC and the position it runs through (`docs/cluster.md`, "Running CRC").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RunningCrc {
    /// The last frame folded in.
    pub(crate) position: u64,
    /// `None` when the store was opened from a checkpoint that did not hold it.
    pub(crate) crc: Option<u32>,
    /// The stored checksum of the frame at `position` when it is a frame a stream message
    /// carries whole (anything but a `Skip`, which a replica writes itself); `None` for a
    /// `Skip`, and after an open that replayed no frame.
    pub(crate) last_frame: Option<u32>,
}

impl RunningCrc {
    /// The running CRC through `position`, if it runs through exactly there.
    pub(crate) fn at(self, position: u64) -> Option<u32> {
        self.crc.filter(|_| self.position == position)
    }
}

/// The kernel's counters, for `Stats`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Counters {
    pub(crate) sealed_segments: usize,
    pub(crate) growing_rows: usize,
    pub(crate) last_seq: u64,
    pub(crate) running_crc: RunningCrc,
    pub(crate) durable_seq: u64,
    pub(crate) checkpoint_seq: u64,
    pub(crate) log_fsyncs: u64,
    pub(crate) poison_cause: Option<PoisonCause>,
    pub(crate) disk_full_refusals: u64,
    pub(crate) accesses_not_recorded: u64,
}

/// One open database.
pub(crate) struct Db {
    pub(in crate::kernel) dir: PathBuf,
    /// Which store this is (`docs/durability.md`, "File identity"): every file it writes
    /// carries `identity.owner()`.
    pub(in crate::kernel) identity: crate::kernel::identity::Identity,
    pub(in crate::kernel) config: DbConfig,
    pub(in crate::kernel) state: RwLock<State>,
    pub(in crate::kernel) writer: Mutex<Writer>,
    /// The log's running CRC through the last frame appended: changed only under the writer
    /// mutex, read without it (STATS).
    pub(in crate::kernel) running_crc: Mutex<RunningCrc>,
    /// The log: every frame is appended, acknowledged and rotated through it (`docs/cluster.md`,
    /// "The journal seam").
    pub(in crate::kernel) journal: Box<dyn Journal>,
    /// Set once this node owns its partition (`Db::own`): every frame is also published, and
    /// acknowledged only once the stream holds it. Never unset while the store is open: a
    /// lost ownership shows at the next publish, which poisons the store.
    pub(in crate::kernel) owner: RwLock<Option<Owner>>,
    /// Accesses waiting for the writer lock, applied by whoever holds it next
    /// (`Db::touch`).
    pub(in crate::kernel) pending_touches: Mutex<Vec<(Timestamp, Vec<MemoryId>)>>,
    /// Where writes wait at `log_tail_limit` for a checkpoint (with the writer mutex).
    pub(in crate::kernel) log_room: Condvar,
    /// The newest checkpoint's sequence number, readable without the writer lock.
    pub(in crate::kernel) checkpoint_seq: AtomicU64,
    pub(in crate::kernel) disk_full_refusals: AtomicU64,
    pub(in crate::kernel) accesses_not_recorded: AtomicU64,
    pub(in crate::kernel) report: OpenReport,
    pub(in crate::kernel) indexing: Indexing,
    /// The lexical indexes built after the open (R9).
    pub(in crate::kernel) lexical: Arc<LexicalBuild>,
    /// One checkpoint at a time; taken before the writer mutex.
    pub(in crate::kernel) checkpointing: Mutex<()>,
    /// When the oldest delete no purge has covered yet was applied (`docs/durability.md`,
    /// "Purge": the maintenance thread purges `purge_delay` after it).
    pub(in crate::kernel) unpurged_since: Mutex<Option<Instant>>,
    /// When (the store's clock) archive retention last looked at the ages.
    pub(in crate::kernel) archive_checked_at: Mutex<Option<Timestamp>>,
    pub(in crate::kernel) maintenance: Maintenance,
    /// This database, for the background threads it starts (they hold it weakly).
    pub(in crate::kernel) me: Weak<Db>,
    pub(in crate::kernel) _lock: Box<dyn StorageLock>,
}

/// The partition this node owns: its epoch, and where its frames go.
#[derive(Debug, Clone)]
pub(crate) struct Owner {
    pub(crate) epoch: u64,
    pub(crate) publisher: Arc<dyn crate::kernel::cluster::Publisher>,
}

/// The index's figures for STATS.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct IndexCounters {
    pub(crate) building: bool,
    pub(crate) builds: u64,
    pub(crate) failures: u64,
    pub(crate) last: Option<IndexBuild>,
    pub(crate) last_error: Option<String>,
}

impl Db {
    /// The state, for reading. Held briefly: a writer's apply waits for it.
    pub(crate) fn read(&self) -> RwLockReadGuard<'_, State> {
        self.state.read()
    }

    /// The id the writer gives next. Takes the writer mutex: never call it holding the
    /// state's lock (a writer takes the mutex, then the lock).
    pub(crate) fn next_id(&self) -> u64 {
        self.writer.lock().next_id
    }

    /// The store's clock.
    pub(crate) fn now(&self) -> Timestamp {
        (self.config.clock)()
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    pub(crate) fn open_report(&self) -> &OpenReport {
        &self.report
    }

    pub(crate) fn storage(&self) -> &dyn Storage {
        &*self.config.storage
    }
}
