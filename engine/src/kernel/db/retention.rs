//! What a [`Db`] lets go of: retired checkpoint, log and segment files once nothing needs
//! them (`docs/durability.md`, "Retention"), and archived records past the archive
//! retention (`docs/semantics.md`, "Archive retention").

use super::core::*;
use crate::kernel::checkpoint::format as ckpt_format;
use crate::kernel::error::Result;
use crate::kernel::log::Op;
use crate::kernel::maintenance::Removed;
use crate::kernel::record::MemoryId;
use std::path::PathBuf;

/// How often (the store's clock) archive retention looks at the archived records' ages.
pub(in crate::kernel) const ARCHIVE_AGE_CHECK_US: i64 = 60_000_000;

impl Db {
    /// Archive retention, when due: the count at every call, the ages once a minute of the
    /// store's clock (`docs/semantics.md`, "Archive retention").
    pub(in crate::kernel) fn archive_retention_if_due(&self) -> Result<usize> {
        let r = self.config.archive_retention;
        if !r.is_set() {
            return Ok(0);
        }
        let now = self.now();
        let over = r
            .max_records
            .is_some_and(|max| self.state.read().table.archive_len() > max);
        let ages_due = r.max_age.is_some()
            && self
                .archive_checked_at
                .lock()
                .is_none_or(|at| now.0.saturating_sub(at.0) >= ARCHIVE_AGE_CHECK_US);
        if over || ages_due {
            self.apply_archive_retention()
        } else {
            Ok(0)
        }
    }

    /// Forgets the archived records archive retention lets go, now, in frames of at most
    /// `MAX_FORGET_IDS` ids. Returns how many.
    ///
    /// # Errors
    /// As any write (`Poisoned`, `Io`, `DiskFull`); what was forgotten before stays forgotten.
    pub(crate) fn apply_archive_retention(&self) -> Result<usize> {
        let r = self.config.archive_retention;
        let now = self.now();
        *self.archive_checked_at.lock() = Some(now);
        let max_age_us = r
            .max_age
            .map(|d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX));
        let doomed = self
            .state
            .read()
            .table
            .archive_to_forget(now, max_age_us, r.max_records);
        let mut forgotten = 0;
        for chunk in doomed.chunks(crate::kernel::log::format::MAX_FORGET_IDS) {
            forgotten += self.commit(&super::Durability::Immediate, None, |_, state| {
                // Still archived: a user's deletion may have taken some meanwhile.
                let ids: Vec<MemoryId> = chunk
                    .iter()
                    .copied()
                    .filter(|id| state.table.archived(*id).is_some())
                    .collect();
                let n = ids.len();
                Ok(((n > 0).then_some(Op::ForgetArchived { ids }), n))
            })?;
        }
        if forgotten > 0 {
            tracing::info!(forgotten, "archive retention forgot archived records");
            self.maintenance.record_forgotten(forgotten as u64);
        }
        Ok(forgotten)
    }

    /// Brings into memory the records an open left in a checkpoint about to be removed
    /// (`docs/architecture.md`, "Mapped records"), so that no slot keeps a removed file's
    /// blocks (and any deleted text in them) on the disk; before the removal, with the
    /// checkpoint mutex held (no other checkpoint or purge runs) and the writer mutex not.
    /// The checkpoint written just before decoded them into their cells
    /// (`write_checkpoint_files`), but for chunks a write copied since its capture: those
    /// are decoded here a chunk at a time under the read lock, so that the write lock, which
    /// stops reads, is held for references only. `replaced`: the sequence number of a
    /// checkpoint file that a new one at the same number has just replaced.
    pub(in crate::kernel) fn let_go(&self, retired: &[PathBuf], replaced: Option<u64>) {
        let seqs: Vec<u64> = retired
            .iter()
            .filter_map(|p| ckpt_format::parse_file_name(p.file_name()?.to_str()?))
            .chain(replaced)
            .collect();
        let files = self.state.read().table.mapped_in(&seqs);
        if files.is_empty() {
            return;
        }
        let mut chunk = 0;
        while self.state.read().table.decode_mapped_chunk(&files, chunk) {
            chunk += 1;
        }
        self.state.write().table.materialize(&seqs);
    }

    /// C6's choice, under the writer mutex (`docs/durability.md`, "Retention"): the two newest
    /// full checkpoints stay, and the newest delta on the newer of them, with every segment
    /// any of them names and every log file from the older full one on; the files of
    /// everything else are returned, to be removed with the writer mutex released
    /// (`remove_retired`).
    pub(in crate::kernel) fn retire(&self, w: &mut Writer) -> Vec<PathBuf> {
        // The checkpoint just written is sound and newer than any damaged one the open left:
        // those, and the segments only they may name, go now ("Damaged derived files").
        let mut retired = w.take_damaged();
        let fulls: Vec<u64> = w
            .checkpoints
            .iter()
            .filter(|c| c.delta_of.is_none())
            .map(|c| c.seq)
            .collect();
        let kept_fulls = fulls.get(fulls.len().saturating_sub(2)..).unwrap_or(&[]);
        let newest_full = kept_fulls.last().copied();
        let kept_delta = w
            .checkpoints
            .iter()
            .rev()
            .find(|c| c.delta_of.is_some() && c.delta_of == newest_full)
            .map(|c| c.seq);
        w.checkpoints.retain(|c| {
            let keep = kept_fulls.contains(&c.seq) || Some(c.seq) == kept_delta;
            if !keep {
                retired.push(self.dir.join(ckpt_format::file_name(c.seq)));
            }
            keep
        });
        if let [older, _] = kept_fulls {
            retired.extend(self.retire_logs_before(*older));
        }
        // B4: replaced segments that no retained checkpoint names (none while a retained
        // checkpoint's list is unknown).
        if w.checkpoints.iter().all(|c| c.segments.is_some()) {
            let named: std::collections::HashSet<u64> = w
                .checkpoints
                .iter()
                .flat_map(|c| c.segments.iter().flatten().copied())
                .chain(w.segments.entries().iter().map(|s| s.id))
                .collect();
            retired.extend(self.retire_replaced(w, &named));
        }
        retired
    }

    /// Lets go of the replaced segments (B4) whose ids are not in `named`: returns their files.
    pub(in crate::kernel) fn retire_replaced(
        &self,
        w: &mut Writer,
        named: &std::collections::HashSet<u64>,
    ) -> Vec<PathBuf> {
        w.segments
            .retire_replaced(|entry| named.contains(&entry.id))
            .iter()
            .map(|entry| self.dir.join(entry.file_name()))
            .collect()
    }

    /// The log files whose frames all precede the checkpoint at `seq`, oldest first: a file
    /// goes when the next one starts at or before `seq + 1`.
    pub(in crate::kernel) fn retire_logs_before(&self, seq: u64) -> Vec<PathBuf> {
        let active_first = self.journal.active().first_seq;
        let mut logs: Vec<u64> = self
            .storage()
            .list(&self.dir)
            .unwrap_or_default()
            .iter()
            .filter_map(|n| crate::kernel::log::writer::parse_file_name(n))
            .collect();
        logs.sort_unstable();
        logs.windows(2)
            .filter(|pair| pair[1] <= seq + 1 && pair[0] != active_first)
            .map(|pair| {
                self.dir
                    .join(crate::kernel::log::writer::file_name(pair[0]))
            })
            .collect()
    }

    /// C6's removals, with no lock a writer needs. A file that cannot be removed is logged and
    /// left: the next checkpoint's retention (log and checkpoint files) or the next open
    /// (orphan segments, R4) removes it; the checkpoint stands.
    pub(in crate::kernel) fn remove_retired(&self, retired: &[PathBuf]) -> Removed {
        let storage = self.storage();
        let mut removed = Removed::default();
        // Log files come oldest first; after one that stays, the later ones stay too, so the
        // log files left run without a gap (`amberdb check` and recovery read them in order).
        let mut log_kept = false;
        for path in retired {
            let is_log = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(crate::kernel::log::writer::parse_file_name)
                .is_some();
            if is_log && log_kept {
                continue;
            }
            let len = storage.len(path).unwrap_or(0);
            match storage.remove(path) {
                Ok(()) => {
                    removed.files += 1;
                    removed.bytes += len;
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    log_kept |= is_log;
                    tracing::warn!(path = %path.display(), error = %e, "retention could not remove a file");
                }
            }
        }
        if !retired.is_empty()
            && let Err(e) = storage.sync_dir(&self.dir)
        {
            tracing::warn!(error = %e, "retention could not sync the directory");
        }
        self.maintenance.record_removed(removed);
        removed
    }
}
