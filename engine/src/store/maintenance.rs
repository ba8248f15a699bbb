//! Looking after a store: checkpoints, purges, backups, index builds, archive retention,
//! pausing the maintenance thread, and the store's numbers ([`Store::stats`]).

use super::Store;
use crate::error::Result;
use crate::kernel::backup::{Backup, Restored};
use crate::kernel::commit::PoisonCause;
use crate::kernel::db::IndexBuild;
use crate::kernel::maintenance::MaintenanceCounters;
use crate::kernel::maintenance::Purge;
use crate::kernel::record::{Category, Kind};
use std::path::Path;

/// Restores the backup in `backup` into `dir`, offline (`docs/durability.md`, "Backup and
/// restore"): the backup must pass `amberdb check`, `dir` must hold no store file and no open
/// store; every store file is copied and fsynced, `IDENTITY` last.
///
/// # Errors
/// `Invalid` for a backup with errors or a `dir` that holds a store; `Locked` when a store is
/// open in `dir`; `Io` / `DiskFull` (what was written is removed).
pub fn restore(backup: &Path, dir: &Path) -> Result<Restored> {
    Ok(crate::kernel::backup::restore(backup, dir)?)
}

/// Counters of a store.
#[derive(Debug, Clone, PartialEq)]
pub struct Stats {
    /// Live memories, all users.
    pub memories: usize,
    /// Users with at least one memory.
    pub users: usize,
    /// Live memories per kind, in `Kind::ALL` order.
    pub by_kind: Vec<(Kind, usize)>,
    /// Live memories per category, in `Category::ALL` order.
    pub by_category: Vec<(Category, usize)>,
    /// Sealed vector segments.
    pub sealed_segments: usize,
    /// Rows in the growing segment.
    pub growing_rows: usize,
    /// Sequence number of the last logged operation.
    pub last_seq: u64,
    /// The log's running CRC and the position it runs through (`docs/cluster.md`, "Running
    /// CRC"): `None` for a store opened from a checkpoint older than format v14.
    pub running_crc: Option<(u64, u32)>,
    /// Sequence number of the last durable one.
    pub durable_seq: u64,
    /// Sequence number of the newest checkpoint (0 if none).
    pub checkpoint_seq: u64,
    /// fsyncs of the log since open (group commit shares them).
    pub log_fsyncs: u64,
    /// Whether writes are refused after a failed write or fsync.
    pub poisoned: bool,
    /// What poisoned the store: operation, file, OS error, since when.
    pub poison_cause: Option<PoisonCause>,
    /// Writes refused since open because the disk was full (each cut back, nothing stored).
    pub disk_full_refusals: u64,
    /// Reads whose access could not be recorded (disk full, poisoned store): they were
    /// answered, only their access count was skipped.
    pub accesses_not_recorded: u64,
    /// Request ids remembered for retries (the last two windows, `docs/semantics.md`,
    /// "Retries and request ids").
    pub request_ids_held: usize,
    /// The configured memory limit.
    pub memory_limit: usize,
    /// The IVF index: its segments and its builds.
    pub index: IndexStats,
    /// Checkpoints and retention (`docs/durability.md`, "Maintenance").
    pub maintenance: MaintenanceCounters,
    /// The embedder the store's vectors come from, and its dimension.
    pub embedder: (String, usize),
    /// A re-embedding with vectors staged and no switch yet (`Store::reembed`).
    pub reembedding: Option<crate::memory::ReembedStatus>,
    /// Whether the keyword indexes and text columns are built: false for the seconds after
    /// an open of a large store while they are built in the background (keyword and hybrid
    /// searches wait for them; `docs/durability.md`, "Recovery", R9).
    pub lexical_ready: bool,
    /// Records whose vectors were in a damaged segment and are not restored yet: found by
    /// GET, listings and keyword search, not by vector search (`docs/durability.md`,
    /// "Recovery", R4b). 0 for a whole store.
    pub unindexed: usize,
    /// Of `unindexed`, the live records whose vectors are computed again and wait for the
    /// last of them (they all enter vector search together): restoration's progress.
    pub vectors_restored: usize,
    /// Files in the store's `quarantine/` folder: another store's files an open moved
    /// aside, never read or removed by this store (`docs/durability.md`, "File identity").
    pub quarantined: Vec<String>,
}

/// The IVF index in STATS (`docs/ivf.md`).
#[derive(Debug, Clone, PartialEq)]
pub struct IndexStats {
    /// Each IVF segment, in key order.
    pub segments: Vec<IvfSegmentStats>,
    /// Rows in sealed flat segments (scanned whole by every search).
    pub flat_rows: usize,
    /// A build is running.
    pub building: bool,
    /// Builds finished since open.
    pub builds: u64,
    /// Builds that failed since open (each left the store unchanged).
    pub failures: u64,
    /// The last build that finished.
    pub last_build: Option<IndexBuild>,
    /// Why the last failed build failed.
    pub last_error: Option<String>,
}

/// One IVF segment in STATS.
#[derive(Debug, Clone, PartialEq)]
pub struct IvfSegmentStats {
    /// Rows, live or under a tombstone.
    pub rows: usize,
    /// Lists.
    pub nlist: usize,
    /// Lists a search probes by default.
    pub nprobe: u32,
    /// Mean recall@10 measured at `nprobe` on held-out rows when it was built.
    pub built_recall: f32,
}

fn index_stats(
    state: &crate::kernel::state::State,
    c: crate::kernel::db::IndexCounters,
) -> IndexStats {
    let mut segments = Vec::new();
    let mut flat_rows = 0;
    for seg in state.vectors().sealed() {
        match seg.as_ivf() {
            Some(ivf) => {
                let (nprobe, built_recall) = ivf.nprobe();
                segments.push(IvfSegmentStats {
                    rows: ivf.len(),
                    nlist: ivf.nlist(),
                    nprobe,
                    built_recall,
                });
            }
            None => flat_rows += seg.len(),
        }
    }
    IndexStats {
        segments,
        flat_rows,
        building: c.building,
        builds: c.builds,
        failures: c.failures,
        last_build: c.last,
        last_error: c.last_error,
    }
}

impl Store {
    /// Seals the growing segment and writes a checkpoint now (`docs/durability.md` steps
    /// C0–C6), so that the next open replays only what follows, and removes what retention
    /// lets go. Writers wait only for its capture and finish, not for its files.
    ///
    /// # Errors
    /// `Poisoned`, or `Io` (which poisons the store).
    pub fn checkpoint(&self) -> Result<()> {
        Ok(self.inner.db.checkpoint()?)
    }

    /// Makes every memory deleted so far leave every file of the store now, and says what it
    /// removed (`docs/durability.md`, "Purge"): segments holding deleted rows are rewritten
    /// without them, a checkpoint is written, and the older checkpoint and every log file
    /// before the new one are removed, so deleted texts, tags and vectors are nowhere on disk.
    /// Until the next checkpoint the store has one checkpoint, read back before the older one
    /// went. Merged and superseded sources are kept (lineage, undo); memories deleted while it
    /// runs wait for the next purge. Reads and writes go on; writers wait only for the swaps.
    ///
    /// # Errors
    /// `Poisoned`, `Io`, `DiskFull`, `Internal`; a failure before the swap changes nothing.
    pub fn purge(&self) -> Result<Purge> {
        Ok(self.inner.db.purge()?)
    }

    /// Copies the store into `dest` (a new or empty directory, not inside the store) as it is
    /// at one commit, while reads and writes go on (`docs/durability.md`, "Backup and
    /// restore"): the newest checkpoint, its segments and the log after it, byte for byte, so
    /// ids, timestamps, lineage, access counts, tags and snapshots all come along. `IDENTITY` is
    /// written last, so an interrupted backup never opens. Checkpoints wait while it copies.
    /// Opened, the backup is the store after `Backup::seq`; `amberdb::restore` puts it back.
    ///
    /// # Errors
    /// `Invalid` for `dest`; `Poisoned` (reopen first); `Io`, `DiskFull` (what was written is
    /// removed). A scoped store refuses (`OutOfScope`): a backup holds every user.
    pub fn backup(&self, dest: impl AsRef<Path>) -> Result<Backup> {
        self.every_user("backup")?;
        Ok(self.inner.db.backup(dest.as_ref())?)
    }

    /// Pauses (`true`) or resumes (`false`) the store's automatic work: due checkpoints, purges
    /// and archive retention wait while paused, and run when it resumes (`docs/durability.md`,
    /// "Maintenance"). Explicit calls (`checkpoint`, `purge`, `backup`) still run. While paused
    /// the log grows past `checkpoint_bytes`, and an open after a crash replays all of it.
    pub fn pause_maintenance(&self, paused: bool) {
        self.inner.db.maintenance().set_paused(paused);
        self.inner.db.log_room_changed();
    }

    /// Forgets now the archived records `StoreOptions::archive_retention` lets go (the
    /// maintenance thread does it on its own, `docs/semantics.md`, "Archive retention"), and
    /// says how many. Their texts leave the files at the next purge.
    ///
    /// # Errors
    /// As any write.
    pub fn apply_archive_retention(&self) -> Result<usize> {
        Ok(self.inner.db.apply_archive_retention()?)
    }

    /// Whether writes are refused until the store is reopened (a failed write or fsync, a
    /// publish the stream did not hold): `stats().poisoned`, without counting anything.
    #[must_use]
    pub fn is_poisoned(&self) -> bool {
        self.inner.db.counters().poison_cause.is_some()
    }

    /// Counters.
    #[must_use]
    pub fn stats(&self) -> Stats {
        let c = self.inner.db.counters();
        let state = self.read();
        let by_kind = Kind::ALL
            .iter()
            .map(|k| (*k, state.member_count(|u| u.kind_members.get(k))))
            .collect();
        let by_category = Category::ALL
            .iter()
            .map(|c| (*c, state.member_count(|u| u.category_members.get(c))))
            .collect();
        Stats {
            memories: state.live_count(),
            users: state.users(),
            by_kind,
            by_category,
            sealed_segments: c.sealed_segments,
            growing_rows: c.growing_rows,
            last_seq: c.last_seq,
            running_crc: c.running_crc.crc.map(|crc| (c.running_crc.position, crc)),
            durable_seq: c.durable_seq,
            checkpoint_seq: c.checkpoint_seq,
            log_fsyncs: c.log_fsyncs,
            poisoned: c.poison_cause.is_some(),
            poison_cause: c.poison_cause,
            disk_full_refusals: c.disk_full_refusals,
            accesses_not_recorded: c.accesses_not_recorded,
            request_ids_held: state.requests_held(),
            memory_limit: self.inner.options.memory_limit,
            index: index_stats(&state, self.inner.db.index_counters()),
            maintenance: MaintenanceCounters {
                purge_pending: self.inner.db.unpurged_for().map(|d| d.as_secs_f64()),
                ..self.inner.db.maintenance().counters()
            },
            embedder: (state.model().id.clone(), state.model().dim),
            reembedding: Store::reembed_status(&state),
            lexical_ready: self.inner.db.lexical_ready(),
            unindexed: state.unindexed().len(),
            vectors_restored: state.unindexed().ready(),
            quarantined: self.inner.db.quarantined(),
        }
    }

    /// Builds an IVF segment of the sealed flat segments now, whatever their size, waiting
    /// for a background build first (`docs/ivf.md`). `Ok(None)`: no flat segment to index (the
    /// growing rows are sealed by a checkpoint first: `checkpoint` then `build_index`).
    /// Searches and writes go on while it trains; they wait only for the swap.
    ///
    /// # Errors
    /// `Poisoned`, `Io`, `DiskFull`; a failed build leaves the store as it was.
    pub fn build_index(&self) -> Result<Option<IndexBuild>> {
        Ok(self.inner.db.build_index(true)?)
    }
}
