//! A store as a replica of one partition of a cluster (`docs/cluster.md`): it applies the
//! partition's stream message by message, and makes the claim a node publishes to take the
//! partition. The stream itself (JetStream, leases, the publisher) is the server's; this is the
//! part every replica runs alike, so that all of them hold the same log and the same state.
//!
//! Guarantees: those of `Db::apply_replicated`. A store becomes a replica with the first
//! message it applies, and stays one (its log holds a claim or a skip): from then on its own
//! writes are refused `Invalid` and its reads count no accesses, until it owns the partition
//! (`Store::own_partition`); a single-node store that never applies a message is unchanged.

use crate::error::Result;
use crate::kernel::cluster::{Applied, Claim, Outgoing, Publisher, StreamMessage};
use crate::store::Store;
use std::sync::Arc;

/// What a store holds of its partition's log (`Store::partition_log`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionLog {
    /// It applied a message: its log grows only from the stream.
    pub replicated: bool,
    /// The last valid claim: the partition's owner and epoch (`None`: never claimed).
    pub claim: Option<Claim>,
    /// The last position applied (the local log's last sequence number).
    pub position: u64,
    /// The local log's running CRC through `position` (`docs/cluster.md`, "Running CRC"):
    /// replicas at the same position that hold the same history hold the same one. `None`
    /// for a store opened from a checkpoint older than v14.
    pub running_crc: Option<u32>,
    /// A frame split into chunks being assembled: chunks held, and chunks in all.
    pub open_group: Option<(u32, u32)>,
    /// A message that did not count landed after the last claim: no frame of the claim's
    /// epoch counts again, until the next claim (`docs/cluster.md`, "Fencing", rule 3).
    pub interrupted: bool,
}

impl Store {
    /// Applies the next message of this store's partition stream, in stream order
    /// (`docs/cluster.md`, "Fencing"), and says what it became. Not durable when it returns
    /// (the stream holds it); `flush` or the sync policy makes the local log durable.
    ///
    /// # Errors
    /// `Invalid` if `m.position` is not the next one (nothing changed); `Kernel(Halted)` if the
    /// message cannot be followed: a frame that fails its checks, or counts but does not apply
    /// here (the store is poisoned: reads go on, writes are refused); as any write.
    pub fn apply_replicated(&self, m: &StreamMessage<'_>) -> Result<Applied> {
        Ok(self.inner.db.apply_replicated(m)?)
    }

    /// The `Claim` message this node publishes to take the partition at `epoch`, for the next
    /// position (with its headers' values and the running CRC before it); nothing changes
    /// until the stream holds it and it is applied (`docs/cluster.md`, "Ownership").
    ///
    /// # Errors
    /// `Invalid` for an epoch not above the partition's or a node name of 0 or over 256 bytes.
    pub fn claim_message(&self, epoch: u64, node: &str) -> Result<Outgoing> {
        Ok(self.inner.db.claim_message(epoch, node)?)
    }

    /// Makes this node the owner of its partition at `epoch`, once the claim it published is
    /// applied (`docs/cluster.md`, "Ownership"): from now on its writes are published through
    /// `publisher` and acknowledged only once the stream holds them; its reads count accesses
    /// again (published, never waited for). For as long as the store is open.
    ///
    /// # Errors
    /// `Invalid` if the last claim the store applied is not of `epoch`, or it owns the
    /// partition already; `Poisoned`.
    pub fn own_partition(&self, epoch: u64, publisher: Arc<dyn Publisher>) -> Result<()> {
        Ok(self.inner.db.own(epoch, publisher)?)
    }

    /// The position of the local log's last frame and its stored checksum, when a stream
    /// message carries that frame whole (anything but a `Skip`, which the replica writes
    /// itself): another message at that position is another history
    /// (`amberdb::cluster::frame_crc` gives a message's). `None` for a `Skip`, and after an
    /// open that replayed no frame. Not part of `PartitionLog`, which replicas of one history
    /// hold alike whatever their opens replayed.
    #[must_use]
    pub fn last_frame_crc(&self) -> Option<(u64, u32)> {
        self.inner.db.last_frame_crc()
    }

    /// What this store holds of its partition's log.
    #[must_use]
    pub fn partition_log(&self) -> PartitionLog {
        let (log, position, running_crc) = self.inner.db.partition_log();
        PartitionLog {
            replicated: log.is_replicated(),
            claim: log.claim().cloned(),
            position,
            running_crc,
            open_group: log.open_group(),
            interrupted: log.is_interrupted(),
        }
    }
}
