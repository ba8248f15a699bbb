//! The journal: the log behind one interface (`docs/cluster.md`, "The journal seam").
//!
//! The commit path reaches the log only through [`Journal`]: a frame enters it at
//! `Db::append` (step 4 of `docs/durability.md`, [`Journal::append`]), a write becomes
//! reportable at `Db::acknowledge` (step 6, [`Journal::acknowledge`]), the checkpoint starts a
//! new file at C2 ([`Journal::rotate`]), and the open applies what the journal holds after the
//! checkpoint (R6, [`Journal::replay`]). The local log ([`local::LocalJournal`]: log files and
//! group commit) implements it today; the replicated log of cluster mode implements it next.
//!
//! Guarantees every implementation keeps: frames are appended in sequence order under the
//! writer mutex and replayed in that order with no gap; `acknowledge(seq)` returns `Ok` only
//! once every frame up to `seq` is held (durable); once poisoned, a journal refuses every
//! append and acknowledgement until the store is reopened, and keeps the first cause.

pub(crate) mod fence;
pub(crate) mod local;
mod replay;

use crate::kernel::commit::PoisonCause;
use crate::kernel::error::{KernelError, Result};
use crate::kernel::log::Op;
use std::path::PathBuf;

/// Where frames are appended now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ActiveLog {
    /// The active log file.
    pub(crate) path: PathBuf,
    /// The sequence number of its first frame (its name's).
    pub(crate) first_seq: u64,
    /// Its length: where the next frame goes.
    pub(crate) bytes: u64,
}

/// What a replay found, for the open's report (`OpenReport`).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct ReplayReport {
    /// Frames handed to the applier.
    pub(crate) replayed_frames: u64,
    /// A torn tail cut: the file, and the length it was cut to.
    pub(crate) truncated_tail: Option<(PathBuf, u64)>,
}

/// What the open applies each replayed frame with (its sequence number, the checksum it stores,
/// for the running CRC, and the operation): `Err(reason)` if the frame cannot apply, which the
/// journal reports as corruption at the frame's place.
pub(crate) type ApplyFrame<'a> =
    dyn FnMut(u64, u32, Op) -> std::result::Result<(), &'static str> + 'a;

/// The log of one store, as the commit path sees it.
pub(crate) trait Journal: Send + Sync + std::fmt::Debug {
    /// R6, once, at the open, before any append: applies every frame held after `after` (the
    /// checkpoint's sequence number), in order, through `apply`, repairing what a crash left
    /// (a torn tail is cut) and refusing damage. Returns the last sequence number the journal
    /// holds (at least `after`).
    ///
    /// # Errors
    /// `Corrupted` (damage, a gap, a frame `apply` refused), `Foreign`, `Misnamed`,
    /// `UnsupportedVersion`, `Io`.
    fn replay(
        &mut self,
        after: u64,
        apply: &mut ApplyFrame<'_>,
        report: &mut ReplayReport,
    ) -> Result<u64>;

    /// Step 4: appends `frame`, the encoded frame of sequence number `seq` (one past the last
    /// appended), under the writer mutex. Not durable when it returns. Returns the bytes
    /// appended.
    ///
    /// # Errors
    /// `DiskFull`: nothing of the frame remains and the journal stays writable. Anything
    /// else poisons the journal (a partial frame may remain).
    fn append(&self, seq: u64, frame: &[u8]) -> Result<u64>;

    /// Step 5's end: frames up to `seq` are appended and applied (visible to readers).
    fn set_written(&self, seq: u64);

    /// The last sequence number appended and applied.
    fn written(&self) -> u64;

    /// Step 6: returns once every frame up to `seq` is held (durable).
    ///
    /// # Errors
    /// `Poisoned` if the journal is, or becomes, poisoned first: nothing up to `seq` may be
    /// reported stored.
    fn acknowledge(&self, seq: u64) -> Result<()>;

    /// C2: frames from `first_seq` on go to a new log file, which exists durably when this
    /// returns. Called under the writer mutex once everything written is held.
    ///
    /// # Errors
    /// `Io` (or `DiskFull`); appends stay in the old file, and the caller removes what the
    /// failed creation may have left (C2's undo, which poisons the store if it cannot).
    fn rotate(&self, first_seq: u64) -> Result<()>;

    /// Where frames are appended now.
    fn active(&self) -> ActiveLog;

    /// The last sequence number known held.
    fn durable(&self) -> u64;

    /// How many times the journal made frames durable (fsyncs of the local log).
    fn syncs(&self) -> u64;

    /// Refuses writes from now on; the first cause is kept and logged.
    fn poison(&self, cause: PoisonCause);

    /// What poisoned the journal, if anything did.
    fn cause(&self) -> Option<PoisonCause>;

    fn is_poisoned(&self) -> bool;

    /// Errors with `Poisoned` if the journal is poisoned.
    fn check(&self) -> Result<()> {
        if self.is_poisoned() {
            Err(KernelError::Poisoned)
        } else {
            Ok(())
        }
    }
}
