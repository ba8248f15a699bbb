//! The replica path of a partition's replicated log (`docs/cluster.md`, "Fencing", "Chunks",
//! "Replicas"): every stream message, taken in stream order, becomes exactly one frame of the
//! local log at the same position, so local sequence number = stream position on every replica.
//!
//! Guarantees: a message is judged from the log before it alone (the fence, resumed from the
//! state's claim and open chunk group), so every replica that applied the same stream holds the
//! same frames and the same state; a message that counts is kept byte for byte as published (or
//! as its chunks assemble); one that does not is a `Skip`; a frame that fails its checks, or that
//! counts but that the state refuses, halts the partition on this node (the store is poisoned
//! with the cause: reads go on, writes are refused) before anything of it is written. Once a
//! store holds a claim or a skip its log grows only from here: local writes are refused and
//! reads count no accesses (`Db::append`, `Db::touch`), until the node owns the partition
//! (`Db::own`, after the claim it published is applied): then every frame it appends is also
//! published at its position (a frame longer than a chunk as its chunks, with `Skip { pending }`
//! frames in the local log), and a write is acknowledged only once the stream holds it
//! (`Db::replicated`); a stream that does not poisons the store, which never reports that write
//! or any after it.

use super::core::*;
use crate::kernel::cluster::{
    Applied, CHUNK_BYTES, Chunk, Claim, ClusterLog, HISTORY_DIFFERS, MAX_CHUNKS, Outgoing,
    Publisher, Skip, SkipReason, StreamMessage,
};
use crate::kernel::commit::PoisonCause;
use crate::kernel::error::{KernelError, Result};
use crate::kernel::journal::fence::{Fence, Message, Verdict};
use crate::kernel::log::Op;
use crate::kernel::log::format::{TYPE_CLAIM, check_frame, decode_op, encode_frame};
use crate::kernel::state::State;
use std::borrow::Cow;
use std::sync::Arc;

impl StreamMessage<'_> {
    /// The epoch of the claim this message is, if it is a whole, sound claim frame published
    /// for its own position (`Amberdb-Prev` the position before it, its frame's sequence
    /// number its position): a claim that counts in every history that reaches the position
    /// before it with a lower epoch (`docs/cluster.md`, "Fencing", rule 2). A replica past
    /// this position whose epoch is below it did not apply it there: its history is not the
    /// stream's ("A replica whose history is not the stream's").
    #[must_use]
    pub fn claim_in_place(&self) -> Option<u64> {
        if self.chunk.is_some() || self.prev + 1 != self.position {
            return None;
        }
        let raw = check_frame(self.body).ok()?;
        if raw.total_len != self.body.len()
            || raw.seq != self.position
            || raw.frame_type != TYPE_CLAIM
        {
            return None;
        }
        match decode_op(&raw).ok()? {
            Op::Claim(c) if c.epoch == self.epoch => Some(c.epoch),
            _ => None,
        }
    }
}

/// A message judged: what the local log gets at its position, and what it became.
struct Judged<'m> {
    op: Op,
    frame: Cow<'m, [u8]>,
    applied: Applied,
}

impl Db {
    /// Applies the next message of the partition's stream (`docs/cluster.md`, "Fencing"). Not
    /// durable when it returns: the stream holds it, and the local log is made durable as any
    /// write's (the store's `SyncPolicy`, `Db::flush`); after a crash the replica reads the
    /// stream again from its local end.
    ///
    /// # Errors
    /// `Invalid` if `m.position` is not the local log's next (nothing changed); `Halted` if the
    /// message cannot be followed (the store is poisoned with the cause); `Poisoned` once it
    /// is; as any write (`DiskFull`: nothing changed).
    pub(crate) fn apply_replicated(&self, m: &StreamMessage<'_>) -> Result<Applied> {
        let mut w = self.writer.lock();
        self.journal.check()?;
        if self.owner.read().is_some() {
            return Err(KernelError::Invalid {
                field: "position",
                reason: "this node owns the partition: its log is what it publishes".into(),
            });
        }
        if m.position != w.next_seq {
            return Err(KernelError::Invalid {
                field: "position",
                reason: format!(
                    "stream position {} is not the local log's next, {}: messages apply in stream order, once each",
                    m.position, w.next_seq
                ),
            });
        }
        let judged = {
            let state = self.state.read();
            self.judge(&state, self.running_crc.lock().at(m.position - 1), m)
        };
        let judged = match judged {
            Ok(j) => j,
            Err(reason) => {
                self.journal.poison(PoisonCause::new(
                    "replicate",
                    &self.journal.active().path,
                    reason,
                ));
                return Err(KernelError::Halted {
                    position: m.position,
                    reason,
                });
            }
        };
        let seq = self.append_frame(&mut w, &judged.op, &judged.frame)?;
        self.apply(&mut w, seq, judged.op)?;
        Ok(judged.applied)
    }

    /// Makes this node the partition's owner at `epoch`, the epoch of the claim its log holds
    /// last (`docs/cluster.md`, "Ownership", step 4): from now on every frame it appends is
    /// published through `publisher`, and a write is acknowledged only once the stream holds
    /// it. For as long as the store is open: ownership lost shows at the next publish, which
    /// poisons the store (it then reopens as a replica).
    ///
    /// # Errors
    /// `Invalid` if the store's last claim is not of `epoch`, or it owns the partition already.
    pub(crate) fn own(&self, epoch: u64, publisher: Arc<dyn Publisher>) -> Result<()> {
        let _w = self.writer.lock();
        self.journal.check()?;
        let mut owner = self.owner.write();
        let held = self.state.read().cluster.epoch();
        if owner.is_some() || held != epoch || epoch == 0 {
            return Err(KernelError::Invalid {
                field: "epoch",
                reason: format!(
                    "this store's last claim is of epoch {held}{}: a node owns a partition once the claim it published is applied",
                    if owner.is_some() {
                        " and it owns the partition already"
                    } else {
                        ""
                    }
                ),
            });
        }
        *owner = Some(Owner { epoch, publisher });
        Ok(())
    }

    /// Step 4 on a partition's owner: appends `op` and hands it to the publisher at its
    /// position; a frame longer than a chunk is appended as `Skip { pending }` frames and the
    /// frame at the last chunk's position, and published as that many chunks
    /// (`docs/cluster.md`, "Chunks"), so the local log and the stream hold the same positions.
    pub(in crate::kernel) fn append_owned(
        &self,
        w: &mut Writer,
        owner: &Owner,
        op: &Op,
    ) -> Result<u64> {
        // Each message carries the running CRC through the position before its own.
        let message = |position: u64, chunk, crc, body: &[u8]| Outgoing {
            position,
            epoch: owner.epoch,
            prev: position - 1,
            chunk,
            crc,
            body: body.to_vec(),
        };
        let frame = encode_frame(w.next_seq, op);
        let count = frame.len().div_ceil(CHUNK_BYTES);
        if count <= 1 {
            let before = self.running_crc.lock().at(w.next_seq - 1);
            let seq = self.append_frame(w, op, &frame)?;
            owner.publisher.publish(message(seq, None, before, &frame));
            return Ok(seq);
        }
        // The whole frame's limit before any of its chunks is appended.
        super::write::frame_within_limit(&frame)?;
        let n = u32::try_from(count).unwrap_or(u32::MAX);
        if n > MAX_CHUNKS {
            return Err(KernelError::LimitExceeded {
                what: "chunks of one frame",
                limit: MAX_CHUNKS as usize,
                got: count,
            });
        }
        // The frame's own sequence number is its last chunk's position.
        let frame = encode_frame(w.next_seq + u64::from(n) - 1, op);
        let pieces: Vec<&[u8]> = frame.chunks(CHUNK_BYTES).collect();
        for (i, bytes) in (1..n).zip(&pieces) {
            let skip = Op::Skip(Box::new(Skip {
                reason: SkipReason::Pending,
                chunk: Some(Chunk {
                    index: i,
                    count: n,
                    bytes: bytes.to_vec(),
                }),
            }));
            let before = self.running_crc.lock().at(w.next_seq - 1);
            let seq = self.append_frame(w, &skip, &encode_frame(w.next_seq, &skip))?;
            self.apply(w, seq, skip)?;
            owner
                .publisher
                .publish(message(seq, Some((i, n)), before, bytes));
        }
        let before = self.running_crc.lock().at(w.next_seq - 1);
        let seq = self.append_frame(w, op, &frame)?;
        let last = pieces.last().copied().unwrap_or_default();
        owner
            .publisher
            .publish(message(seq, Some((n, n)), before, last));
        Ok(seq)
    }

    /// Step 6 on a partition's owner: once the stream holds every frame up to `seq`; if it
    /// does not, the store is poisoned and nothing from here on is reported stored.
    pub(in crate::kernel) fn replicated(&self, owner: &Owner, seq: u64) -> Result<()> {
        owner.publisher.wait(seq).map_err(|why| {
            self.journal.poison(PoisonCause::new(
                "replicate",
                &self.journal.active().path,
                why,
            ));
            KernelError::Poisoned
        })
    }

    /// The partition log as this store holds it: its claim and open chunk group, the last
    /// position applied and the running CRC through it (`docs/cluster.md`, "Replicas").
    pub(crate) fn partition_log(&self) -> (ClusterLog, u64, Option<u32>) {
        let _w = self.writer.lock();
        let position = self.journal.written();
        let crc = self.running_crc.lock().at(position);
        (self.state.read().cluster.clone(), position, crc)
    }

    /// The last frame's position and stored checksum, when it is known and a stream message
    /// carries it whole (`RunningCrc::last_frame`).
    pub(crate) fn last_frame_crc(&self) -> Option<(u64, u32)> {
        let running = *self.running_crc.lock();
        running.last_frame.map(|crc| (running.position, crc))
    }

    /// The `Claim` a node publishes to take the partition at epoch `epoch` (`docs/cluster.md`,
    /// "Ownership", step 3): the message for the local log's next position, with the running
    /// CRC before it. Nothing changes here: the claim counts once the stream holds it and it is
    /// applied.
    ///
    /// # Errors
    /// `Invalid` for an epoch not above the partition's or a node name over 256 bytes.
    pub(crate) fn claim_message(&self, epoch: u64, node: &str) -> Result<Outgoing> {
        let w = self.writer.lock();
        let claim = Claim {
            epoch,
            node: node.to_owned(),
            store: self.identity.store,
        };
        let state = self.state.read();
        if let Err(reason) = state.cluster.check_claim(&claim) {
            return Err(KernelError::Invalid {
                field: "epoch",
                reason: format!("{reason} ({})", state.cluster.epoch()),
            });
        }
        if node.len() > crate::kernel::cluster::MAX_NODE_NAME || node.is_empty() {
            return Err(KernelError::Invalid {
                field: "node",
                reason: "a node name is 1 to 256 bytes".into(),
            });
        }
        Ok(Outgoing {
            position: w.next_seq,
            epoch,
            prev: w.next_seq - 1,
            chunk: None,
            crc: self.running_crc.lock().at(w.next_seq - 1),
            body: encode_frame(w.next_seq, &Op::Claim(Box::new(claim))),
        })
    }

    /// What the local log gets for `m`, or why the partition halts; `running_crc` is this
    /// store's through the position before `m`'s.
    fn judge<'m>(
        &self,
        state: &State,
        running_crc: Option<u32>,
        m: &StreamMessage<'m>,
    ) -> std::result::Result<Judged<'m>, &'static str> {
        // Damage halts whatever the message's verdict: a whole frame's checks come first.
        let whole = match m.chunk {
            None => Some(sound_frame(m.body)?),
            Some(_) => None,
        };
        let verdict = match m.chunk {
            // A chunk header no publisher of this build writes never counts.
            Some((i, n))
                if !(2..=MAX_CHUNKS).contains(&n)
                    || i == 0
                    || i > n
                    || m.body.is_empty()
                    || m.body.len() > CHUNK_BYTES =>
            {
                Verdict::Skip(SkipReason::Chunk)
            }
            _ => {
                let mut fence = Fence::resume(
                    state.cluster.epoch(),
                    m.position - 1,
                    state.cluster.open_group(),
                    state.cluster.is_interrupted(),
                );
                fence.judge(&Message {
                    position: m.position,
                    epoch: m.epoch,
                    prev: m.prev,
                    claim: whole == Some(TYPE_CLAIM),
                    chunk: m.chunk,
                })
            }
        };
        // A message that counts was published from this replica's view: its history up to
        // here must be this replica's (`docs/cluster.md`, "Running CRC").
        let counts = !matches!(verdict, Verdict::Skip(r) if r != SkipReason::Pending);
        if counts
            && let (Some(theirs), Some(ours)) = (m.crc, running_crc)
            && theirs != ours
        {
            return Err(HISTORY_DIFFERS);
        }
        let judged = match verdict {
            Verdict::Apply | Verdict::Claim { .. } => {
                let op = counted_frame(m.body, m.position)?;
                Judged {
                    applied: match &op {
                        Op::Claim(c) => Applied::Claim { epoch: c.epoch },
                        _ => Applied::Frame,
                    },
                    op,
                    frame: Cow::Borrowed(m.body),
                }
            }
            Verdict::ApplyAssembled { .. } => {
                let mut frame: Vec<u8> = state.cluster.pending_bytes().flatten().copied().collect();
                frame.extend_from_slice(m.body);
                sound_frame(&frame)?;
                let op = counted_frame(&frame, m.position)?;
                if matches!(op, Op::Claim(_)) {
                    return Err("a claim split into chunks");
                }
                Judged {
                    op,
                    frame: Cow::Owned(frame),
                    applied: Applied::Frame,
                }
            }
            Verdict::Skip(reason) => {
                let chunk = match (reason, m.chunk) {
                    (SkipReason::Pending, Some((index, count))) => Some(Chunk {
                        index,
                        count,
                        bytes: m.body.to_vec(),
                    }),
                    _ => None,
                };
                let op = Op::Skip(Box::new(Skip { reason, chunk }));
                Judged {
                    frame: Cow::Owned(encode_frame(m.position, &op)),
                    op,
                    applied: Applied::Skip(reason),
                }
            }
        };
        if let Op::Claim(c) = &judged.op
            && c.store != self.identity.store
        {
            return Err("a claim of another store: the stream is another partition's");
        }
        // A frame that counts but does not apply means this replica's history is not the
        // publisher's.
        state.check(&judged.op)?;
        Ok(judged)
    }
}

/// A whole frame from the stream is sound: its length and checksum pass and it fills the
/// message. Returns its type. (A stale publisher's frame is sound but names another position:
/// only a frame that counts must sit at its own, `counted_frame`.)
fn sound_frame(body: &[u8]) -> std::result::Result<u8, &'static str> {
    let raw = check_frame(body)?;
    if raw.total_len != body.len() {
        return Err("bytes after the message's frame");
    }
    Ok(raw.frame_type)
}

/// A sound frame that counts: it sits at its position, and it decodes.
fn counted_frame(frame: &[u8], position: u64) -> std::result::Result<Op, &'static str> {
    let raw = check_frame(frame)?;
    if raw.seq != position {
        return Err("a frame that counts whose sequence number is not its stream position");
    }
    decode_op(&raw).map_err(|e| e.reason)
}
