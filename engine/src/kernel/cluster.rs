//! What a partition's replicated log adds to a store's frames (`docs/cluster.md`, "Frames on
//! the stream"; `docs/format/log.md`, types 17 and 18): the `Claim` that gives the partition an
//! epoch, the `Skip` that stands where a stream message did not count, and what the state keeps
//! of them ([`ClusterLog`]: the last valid claim, and the chunks of a frame split across
//! messages that wait for its last one).
//!
//! Guarantees: the state kept here is a function of the frames alone, so every replica that
//! applied the same log holds the same epoch and the same open chunk group, and a checkpoint
//! holds it as the same frames (aux types 17 and 18); a claim's epoch only rises; a pending
//! chunk continues its group or starts a new one, and anything else closes the group.

use crate::kernel::codec::{DecodeError, Decoder, Encoder};
use crate::kernel::identity::StoreId;

/// Most bytes of one chunk message: a frame longer than this is published as consecutive
/// chunks (`docs/cluster.md`, "Chunks"); JetStream's `max_payload` is set to 8 MiB.
pub const CHUNK_BYTES: usize = 4 << 20;
/// Most chunks of one frame: a frame is at most 16 MiB and its prefix.
pub const MAX_CHUNKS: u32 = 5;
/// Most bytes of a claim's node name.
pub const MAX_NODE_NAME: usize = 256;

/// Bits of a memory id below its partition (`docs/cluster.md`, "Partitions, ids and stores"):
/// `id = partition << 40 | local`.
pub const PARTITION_SHIFT: u32 = 40;
/// The most partitions a cluster has: every id stays below 2^53, exact in JavaScript.
pub const MAX_PARTITIONS: u32 = 8_192;

/// The first id of `partition`, less one: its ids are `base + 1 ..< base + 2^40`.
#[must_use]
pub fn partition_base(partition: u32) -> u64 {
    u64::from(partition) << PARTITION_SHIFT
}

/// The partition a memory id belongs to.
#[must_use]
pub fn partition_of_id(id: u64) -> u64 {
    id >> PARTITION_SHIFT
}

/// The partition of `user_id` among `partitions`: the first 8 bytes of its sha256, little
/// endian, modulo `partitions` (stable across versions and platforms).
///
/// # Panics
/// Never: `partitions` of 0 is taken as 1.
#[must_use]
pub fn partition_of_user(user_id: &str, partitions: u32) -> u32 {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(user_id.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    let n = u64::from(partitions.max(1));
    u32::try_from(u64::from_le_bytes(first) % n).unwrap_or(0)
}

/// A node takes the partition from this position on (`docs/cluster.md`, "Ownership").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// Above every earlier valid claim's.
    pub epoch: u64,
    /// The claiming node's name (its address in `moved` replies).
    pub node: String,
    /// The partition's store: a claim of another store is damage, never a skip.
    pub store: StoreId,
}

/// Why a stream message did not count (`docs/cluster.md`, "Fencing").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkipReason {
    /// Its epoch is not the current one (a stale owner, or an epoch nobody claimed).
    Epoch,
    /// It names another previous position: something landed between its publisher's view and it.
    Position,
    /// A claim whose epoch is not above the current one (it lost a race, or replays an old one).
    LostClaim,
    /// A chunk that does not continue the open group, or a group's first chunk that does not
    /// count.
    Chunk,
    /// Chunk `i < n` of a group that counts so far: its bytes wait for the group's last chunk,
    /// which carries the whole frame's place in the state.
    Pending,
}

impl SkipReason {
    /// Its code in a `Skip` frame.
    #[must_use]
    pub fn code(self) -> u8 {
        match self {
            SkipReason::Epoch => 1,
            SkipReason::Position => 2,
            SkipReason::LostClaim => 3,
            SkipReason::Chunk => 4,
            SkipReason::Pending => 5,
        }
    }

    fn from_code(code: u8) -> Option<SkipReason> {
        Some(match code {
            1 => SkipReason::Epoch,
            2 => SkipReason::Position,
            3 => SkipReason::LostClaim,
            4 => SkipReason::Chunk,
            5 => SkipReason::Pending,
            _ => return None,
        })
    }
}

/// A chunk of a frame split across messages, kept in the `Skip` at its position until the
/// group's last chunk assembles the frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// 1-based, below `count`.
    pub index: u32,
    /// Chunks in the group, 2..=MAX_CHUNKS.
    pub count: u32,
    /// Its bytes of the frame, at most `CHUNK_BYTES`.
    pub bytes: Vec<u8>,
}

/// A position where a stream message did not count: the local log holds one frame per stream
/// position, so positions stay aligned on every replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skip {
    /// Why.
    pub reason: SkipReason,
    /// `Some` exactly when `reason` is `Pending`.
    pub chunk: Option<Chunk>,
}

pub(crate) fn encode_claim(c: &Claim, e: &mut Encoder<'_>) {
    e.u64(c.epoch);
    e.str(&c.node);
    e.bytes(&c.store.0);
}

pub(crate) fn decode_claim(d: &mut Decoder<'_>) -> Result<Claim, DecodeError> {
    let epoch = d.u64()?;
    if epoch == 0 {
        return d.fail("claim of epoch 0");
    }
    let node = d.str(MAX_NODE_NAME)?;
    let store = d
        .take(16)?
        .try_into()
        .map(StoreId)
        .or_else(|_| d.fail("claim's store id"))?;
    Ok(Claim { epoch, node, store })
}

pub(crate) fn encode_skip(s: &Skip, e: &mut Encoder<'_>) {
    e.u8(s.reason.code());
    if let Some(c) = &s.chunk {
        e.u32(c.index);
        e.u32(c.count);
        e.u32(u32::try_from(c.bytes.len()).unwrap_or(u32::MAX));
        e.bytes(&c.bytes);
    }
}

pub(crate) fn decode_skip(d: &mut Decoder<'_>) -> Result<Skip, DecodeError> {
    let Some(reason) = SkipReason::from_code(d.u8()?) else {
        return d.fail("unknown skip reason");
    };
    if reason != SkipReason::Pending {
        return Ok(Skip {
            reason,
            chunk: None,
        });
    }
    let index = d.u32()?;
    let count = d.u32()?;
    if !(2..=MAX_CHUNKS).contains(&count) || index == 0 || index >= count {
        return d.fail("pending chunk out of its group");
    }
    let len = d.u32()? as usize;
    if len == 0 || len > CHUNK_BYTES {
        return d.fail("pending chunk length out of bounds");
    }
    let bytes = d.take(len)?.to_vec();
    Ok(Skip {
        reason,
        chunk: Some(Chunk {
            index,
            count,
            bytes,
        }),
    })
}

/// One message of a partition's stream, as a replica reads it (`docs/cluster.md`, "Frames on
/// the stream"): its position and headers, and its body, a log frame or a chunk of one.
#[derive(Debug, Clone, Copy)]
pub struct StreamMessage<'a> {
    /// Its position in the stream (JetStream's sequence number): the local log's next.
    pub position: u64,
    /// `Amberdb-Epoch`: the epoch its publisher held.
    pub epoch: u64,
    /// `Amberdb-Prev`: the position its publisher expected just before it.
    pub prev: u64,
    /// `Amberdb-Chunk`: `Some((i, n))` for chunk `i` of `n` (1-based) of one frame.
    pub chunk: Option<(u32, u32)>,
    /// `Amberdb-Crc`: its publisher's running CRC through `prev` (`None`: a publisher that
    /// does not send one, or does not know its own).
    pub crc: Option<u32>,
    /// One encoded log frame (`docs/format/log.md`), or a chunk's bytes of one.
    pub body: &'a [u8],
}

/// Why a replica halts at a message that counts whose `Amberdb-Crc` is not its own running
/// CRC (`docs/cluster.md`, "Running CRC"): the `reason` of that `KernelError::Halted`.
pub const HISTORY_DIFFERS: &str = "the publisher's running CRC differs from this replica's: the stream's history is not the one this replica applied";

/// What a stream message became in the local log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// A frame that counts (whole, or assembled from its chunks), applied.
    Frame,
    /// A claim that counts: the partition's epoch is now `epoch`.
    Claim {
        /// The new epoch.
        epoch: u64,
    },
    /// It did not count: a `Skip` holds its position.
    Skip(SkipReason),
}

/// A message an owner hands to its partition's stream (`docs/cluster.md`, "Frames on the
/// stream"): the headers it carries, and its body, a log frame or a chunk of one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    /// The position it must land at: the owner's local sequence number.
    pub position: u64,
    /// `Amberdb-Epoch`: the owner's.
    pub epoch: u64,
    /// `Amberdb-Prev`: `position - 1`.
    pub prev: u64,
    /// `Amberdb-Chunk`: `Some((i, n))` for chunk `i` of `n`.
    pub chunk: Option<(u32, u32)>,
    /// `Amberdb-Crc`: the owner's running CRC through `prev` (`None`: it does not know it).
    pub crc: Option<u32>,
    /// The frame, or the chunk's bytes of it.
    pub body: Vec<u8>,
}

/// Where a partition owner's frames go: the replicated log. The store hands it every frame it
/// appends, in position order, under its writer mutex, and asks it at acknowledgement
/// (`Db::acknowledge`) whether the stream holds them; the JetStream publisher is the server's
/// (`docs/cluster.md`, "What a publish can end as").
pub trait Publisher: Send + Sync + std::fmt::Debug {
    /// Hands `message` to the stream. Must not block on the network (a bounded queue that is
    /// full may wait for room); a failure is reported by `wait`.
    fn publish(&self, message: Outgoing);

    /// Returns once the stream holds every message up to `position`, each at the position it
    /// was published for. `Err` (why) if one landed elsewhere, was refused, or its
    /// acknowledgement did not come: the store then poisons itself and never reports the
    /// write, nor any after it.
    ///
    /// # Errors
    /// Why the stream does not hold them.
    fn wait(&self, position: u64) -> Result<(), String>;
}

/// What a store keeps of its partition log: the last valid claim, and the open chunk group.
/// Empty on a store that never replicated (a single node).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterLog {
    /// A claim or skip was applied: the store is a partition replica, and its log grows only
    /// from the stream.
    replicated: bool,
    claim: Option<Claim>,
    /// The chunks of the open group, in order: `chunks[i]` is chunk `i + 1` of `count`.
    pending: Vec<Chunk>,
    /// A message that did not count landed after the last claim: no frame of its epoch
    /// counts again (`docs/cluster.md`, "Fencing", rule 3).
    interrupted: bool,
}

impl ClusterLog {
    /// The last valid claim, if any.
    #[must_use]
    pub fn claim(&self) -> Option<&Claim> {
        self.claim.as_ref()
    }

    /// Whether the store is a partition replica: its log holds a claim or a skip, and grows
    /// only from its partition's stream (`Db::apply_replicated`).
    #[must_use]
    pub fn is_replicated(&self) -> bool {
        self.replicated
    }

    /// The epoch of the last valid claim (0: never claimed).
    #[must_use]
    pub fn epoch(&self) -> u64 {
        self.claim.as_ref().map_or(0, |c| c.epoch)
    }

    /// Whether a message that did not count landed after the last claim, which fences the
    /// claim's epoch until the next one.
    #[must_use]
    pub fn is_interrupted(&self) -> bool {
        self.interrupted
    }

    /// The open chunk group: chunks held, and chunks in all (`None`: no group open).
    #[must_use]
    pub fn open_group(&self) -> Option<(u32, u32)> {
        let last = self.pending.last()?;
        Some((last.index, last.count))
    }

    /// The bytes of the open group's chunks, in order.
    pub(crate) fn pending_bytes(&self) -> impl Iterator<Item = &[u8]> {
        self.pending.iter().map(|c| c.bytes.as_slice())
    }

    /// Whether `claim` may apply: its epoch is above the current one.
    pub(crate) fn check_claim(&self, claim: &Claim) -> Result<(), &'static str> {
        if claim.epoch <= self.epoch() {
            return Err("claim of an epoch not above the partition's");
        }
        Ok(())
    }

    /// Whether `skip` may apply: a pending chunk starts a group or continues the open one.
    pub(crate) fn check_skip(&self, skip: &Skip) -> Result<(), &'static str> {
        let Some(c) = &skip.chunk else {
            return Ok(());
        };
        let continues = match self.open_group() {
            Some((held, count)) => c.count == count && c.index == held + 1,
            None => false,
        };
        if c.index == 1 || continues {
            Ok(())
        } else {
            Err("pending chunk that does not continue its group")
        }
    }

    /// Applies a checked claim: the epoch rises, its run begins, and an open group closes.
    pub(crate) fn apply_claim(&mut self, claim: Claim) {
        self.replicated = true;
        self.claim = Some(claim);
        self.pending.clear();
        self.interrupted = false;
    }

    /// Applies a checked skip: a pending chunk joins (or starts) the open group; any other
    /// (a message that did not count) closes it and interrupts the epoch.
    pub(crate) fn apply_skip(&mut self, skip: Skip) {
        self.replicated = true;
        match skip.chunk {
            Some(c) => {
                if c.index == 1 {
                    self.pending.clear();
                }
                self.pending.push(c);
            }
            None => {
                self.pending.clear();
                self.interrupted = true;
            }
        }
    }

    /// Any other frame applied: an open group closes (its last chunk, or what broke it).
    pub(crate) fn close_group(&mut self) {
        self.pending.clear();
    }

    /// The frames a checkpoint holds of it (aux types 17 and 18, `docs/format/checkpoint.md`):
    /// the claim, then the open group's chunks; after an interrupted claim (no group can be
    /// open then), or on a replica with neither, one `Skip` that is no chunk. Loading them in
    /// order gives this state again.
    pub(crate) fn frames(&self) -> (Option<Claim>, Vec<Skip>) {
        let mut skips: Vec<Skip> = self
            .pending
            .iter()
            .map(|c| Skip {
                reason: SkipReason::Pending,
                chunk: Some(c.clone()),
            })
            .collect();
        if self.replicated && skips.is_empty() && (self.claim.is_none() || self.interrupted) {
            skips.push(Skip {
                reason: SkipReason::Epoch,
                chunk: None,
            });
        }
        (self.claim.clone(), skips)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(epoch: u64) -> Claim {
        Claim {
            epoch,
            node: "n1".into(),
            store: StoreId([7; 16]),
        }
    }

    fn pending(index: u32, count: u32) -> Skip {
        Skip {
            reason: SkipReason::Pending,
            chunk: Some(Chunk {
                index,
                count,
                bytes: vec![u8::try_from(index).expect("small"); 3],
            }),
        }
    }

    #[test]
    fn users_and_ids_route_to_fixed_partitions() {
        // Frozen: a change here moves every user of every cluster.
        let got: Vec<u32> = ["default", "alice", "bob", ""]
            .iter()
            .map(|u| partition_of_user(u, 16))
            .collect();
        assert_eq!(got, FROZEN_PARTITIONS);
        assert_eq!(partition_of_user("alice", 1), 0);
        assert_eq!(partition_of_user("alice", 0), 0);
        let id = partition_base(5) + 77;
        assert_eq!(partition_of_id(id), 5);
        assert!(partition_base(MAX_PARTITIONS - 1) + (1 << PARTITION_SHIFT) <= 1 << 53);
    }

    /// Computed outside Rust: `int.from_bytes(sha256(u).digest()[:8], "little") % 16`.
    const FROZEN_PARTITIONS: [u32; 4] = [7, 11, 1, 3];

    #[test]
    fn claims_only_rise_and_close_an_open_group() {
        let mut log = ClusterLog::default();
        assert_eq!(log.epoch(), 0);
        log.check_claim(&claim(2)).expect("above 0");
        log.apply_claim(claim(2));
        assert!(log.check_claim(&claim(2)).is_err());
        assert!(log.check_claim(&claim(1)).is_err());
        log.apply_skip(pending(1, 3));
        assert_eq!(log.open_group(), Some((1, 3)));
        log.check_claim(&claim(3)).expect("above 2");
        log.apply_claim(claim(3));
        assert_eq!((log.epoch(), log.open_group()), (3, None));
    }

    #[test]
    fn a_pending_chunk_continues_its_group_or_starts_one() {
        let mut log = ClusterLog::default();
        assert!(log.check_skip(&pending(2, 3)).is_err(), "no group open");
        log.apply_skip(pending(1, 3));
        assert!(log.check_skip(&pending(2, 4)).is_err(), "another count");
        assert!(log.check_skip(&pending(3, 3)).is_err(), "a chunk missing");
        log.check_skip(&pending(2, 3)).expect("the next chunk");
        log.apply_skip(pending(2, 3));
        assert_eq!(log.pending_bytes().count(), 2);
        log.check_skip(&pending(1, 2)).expect("a new group");
        log.apply_skip(pending(1, 2));
        assert_eq!(log.open_group(), Some((1, 2)));
        log.apply_skip(Skip {
            reason: SkipReason::Epoch,
            chunk: None,
        });
        assert_eq!(log.open_group(), None, "any other skip closes the group");
    }

    #[test]
    fn a_checkpoint_holds_the_log_state_as_frames_that_load_back_to_it() {
        let load = |log: &ClusterLog| {
            let (claim, skips) = log.frames();
            let mut back = ClusterLog::default();
            if let Some(c) = claim {
                back.check_claim(&c).expect("a claim above 0");
                back.apply_claim(c);
            }
            for x in skips {
                back.check_skip(&x).expect("the group in order");
                back.apply_skip(x);
            }
            back
        };
        let mut log = ClusterLog::default();
        assert_eq!(load(&log), log, "a single node's: nothing");
        log.apply_skip(Skip {
            reason: SkipReason::Epoch,
            chunk: None,
        });
        assert_eq!(load(&log), log, "a replica never claimed");
        log.apply_claim(claim(4));
        assert_eq!(load(&log), log);
        log.apply_skip(pending(1, 3));
        log.apply_skip(pending(2, 3));
        assert_eq!(load(&log), log, "a group open across the checkpoint");
    }

    #[test]
    fn skip_and_claim_payloads_round_trip_and_bad_ones_are_refused() {
        for skip in [
            pending(1, 2),
            pending(4, 5),
            Skip {
                reason: SkipReason::LostClaim,
                chunk: None,
            },
        ] {
            let mut b = Vec::new();
            encode_skip(&skip, &mut Encoder::new(&mut b));
            assert_eq!(decode_skip(&mut Decoder::new(&b)).expect("decodes"), skip);
        }
        let mut b = Vec::new();
        encode_claim(&claim(9), &mut Encoder::new(&mut b));
        assert_eq!(
            decode_claim(&mut Decoder::new(&b)).expect("decodes"),
            claim(9)
        );
        let bad: [(&[u8], &str); 4] = [
            (&[9], "unknown skip reason"),
            (
                &[5, 2, 0, 0, 0, 2, 0, 0, 0],
                "pending chunk out of its group",
            ),
            (
                &[5, 1, 0, 0, 0, 6, 0, 0, 0],
                "pending chunk out of its group",
            ),
            (
                &[5, 1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0],
                "pending chunk length out of bounds",
            ),
        ];
        for (bytes, reason) in bad {
            assert_eq!(
                decode_skip(&mut Decoder::new(bytes))
                    .expect_err(reason)
                    .reason,
                reason
            );
        }
        let mut zero = Vec::new();
        encode_claim(&claim(0), &mut Encoder::new(&mut zero));
        assert_eq!(
            decode_claim(&mut Decoder::new(&zero))
                .expect_err("epoch 0")
                .reason,
            "claim of epoch 0"
        );
    }
}
