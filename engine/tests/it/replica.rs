//! A store as a replica of a cluster partition (`docs/cluster.md`, "Fencing", "Chunks"): it
//! applies its partition's stream message by message, every message becomes one frame of its
//! local log at the same position, and replicas that applied the same stream hold the same
//! state, however often they were checkpointed and reopened meanwhile. Damage halts the
//! partition on the node and is never skipped.

use super::support::{Rng, seed};
use amberdb::cluster::{Applied, CHUNK_BYTES, Claim, SkipReason, StreamMessage};
use amberdb::log::format::{Op, encode_frame};
use amberdb::{
    Category, EngineError, ErrorKind, HashingEmbedder, KernelError, Kind, Memory, MemoryId,
    NewMemory, Store, StoreId, StoreOptions, Timestamp,
};
use std::path::Path;
use std::sync::Arc;

const DIM: usize = 8;

pub(super) fn options(store: StoreId) -> StoreOptions {
    StoreOptions::new(Arc::new(HashingEmbedder::with_dim(DIM)))
        .maintenance_thread(false)
        .store_id(store)
}

pub(super) fn open(dir: &Path, store: StoreId) -> Store {
    Store::open(dir, options(store)).expect("the replica opens")
}

pub(super) fn memory(id: u64, content: &str) -> Memory {
    Memory {
        id: MemoryId(id),
        user_id: "default".into(),
        kind: Kind::Memory,
        session_id: None,
        agent_id: None,
        role: None,
        content: content.into(),
        content_hash: amberdb::content_hash(content),
        category: Category::Other,
        tags: vec![],
        created_at: Timestamp(1),
        updated_at: Timestamp(1),
        last_accessed_at: Timestamp(1),
        access_count: 0,
        helpful_count: 0,
        harmful_count: 0,
        confidence: 1.0,
        supersedes: vec![],
        valid_from: Timestamp(1),
        valid_to: None,
        decision: None,
        item: None,
        source_id: None,
    }
}

pub(super) fn store_op(id: u64, content: &str) -> Op {
    let mut vector = vec![0.0; DIM];
    vector[usize::try_from(id).expect("small") % DIM] = 1.0;
    Op::Store {
        record: Box::new(memory(id, content)),
        vector,
    }
}

/// A message as a publisher sent it.
#[derive(Debug, Clone)]
pub(super) struct Published {
    pub(super) epoch: u64,
    pub(super) prev: u64,
    pub(super) chunk: Option<(u32, u32)>,
    /// `Amberdb-Crc`: `None` where a test publishes without one.
    pub(super) crc: Option<u32>,
    pub(super) body: Vec<u8>,
}

impl From<amberdb::cluster::Outgoing> for Published {
    fn from(m: amberdb::cluster::Outgoing) -> Published {
        Published {
            epoch: m.epoch,
            prev: m.prev,
            chunk: m.chunk,
            crc: m.crc,
            body: m.body,
        }
    }
}

/// A partition's stream: message `i` is at position `i + 1`.
#[derive(Debug, Default, Clone)]
pub(super) struct Stream(pub(super) Vec<Published>);

impl Stream {
    pub(super) fn next(&self) -> u64 {
        self.0.len() as u64 + 1
    }

    /// Publishes `op` as one frame, as an owner of `epoch` that saw the stream end at `prev`:
    /// its frame names position `prev + 1`, wherever it lands.
    pub(super) fn frame(&mut self, epoch: u64, prev: u64, op: &Op) -> u64 {
        let position = self.next();
        self.0.push(Published {
            epoch,
            prev,
            chunk: None,
            crc: None,
            body: encode_frame(prev + 1, op),
        });
        position
    }

    pub(super) fn claim(&mut self, store: StoreId, epoch: u64, prev: u64) -> u64 {
        let claim = Op::Claim(Box::new(Claim {
            epoch,
            node: format!("node-{epoch}"),
            store,
        }));
        self.frame(epoch, prev, &claim)
    }

    /// Publishes `op` as chunks cut at `cuts` (byte offsets), consecutive, each naming the
    /// one before it: the frame's sequence number is the last chunk's position.
    pub(super) fn chunks(&mut self, epoch: u64, op: &Op, cuts: &[usize]) -> u64 {
        let count = u32::try_from(cuts.len() + 1).expect("few");
        let last = self.next() + u64::from(count) - 1;
        let frame = encode_frame(last, op);
        let mut bounds = vec![0];
        bounds.extend_from_slice(cuts);
        bounds.push(frame.len());
        for (i, w) in bounds.windows(2).enumerate() {
            let prev = self.next() - 1;
            self.0.push(Published {
                epoch,
                prev,
                chunk: Some((u32::try_from(i).expect("few") + 1, count)),
                crc: None,
                body: frame[w[0]..w[1]].to_vec(),
            });
        }
        last
    }

    pub(super) fn message(&self, position: u64) -> StreamMessage<'_> {
        let p = &self.0[usize::try_from(position - 1).expect("small")];
        StreamMessage {
            position,
            epoch: p.epoch,
            prev: p.prev,
            chunk: p.chunk,
            crc: p.crc,
            body: &p.body,
        }
    }
}

pub(super) fn apply(
    store: &Store,
    stream: &Stream,
    positions: std::ops::RangeInclusive<u64>,
) -> Vec<Applied> {
    positions
        .map(|p| {
            store
                .apply_replicated(&stream.message(p))
                .unwrap_or_else(|e| panic!("position {p}: {e}"))
        })
        .collect()
}

pub(super) fn live(store: &Store, id: u64) -> Option<String> {
    store.get(MemoryId(id)).ok().map(|m| m.content)
}

fn halted_at(e: &EngineError) -> Option<(u64, &'static str)> {
    match e {
        EngineError::Kernel(KernelError::Halted { position, reason }) => Some((*position, reason)),
        _ => None,
    }
}

#[test]
fn a_replica_applies_claims_frames_and_skips_and_reopens_to_the_same_state() {
    let dir = tempfile::tempdir().expect("tempdir");
    let id = StoreId::random().expect("random");
    let mut s = Stream::default();
    s.frame(0, 0, &store_op(1, "before any claim")); // 1: nobody claimed
    s.claim(id, 1, 1); // 2
    s.frame(1, 2, &store_op(2, "the owner's first write")); // 3
    s.frame(1, 2, &store_op(3, "pipelined behind an intruder")); // 4: wrong prev
    // 5: in place, but the owner's frame for 4 did not land at 4: it builds on a frame the
    // stream does not hold, and its epoch is fenced (rule 3).
    s.frame(
        1,
        4,
        &store_op(4, "the owner in place after a frame that missed its place"),
    );
    s.claim(id, 2, 5); // 6: the owner claims again
    s.frame(2, 6, &store_op(5, "the next epoch's write")); // 7
    s.claim(id, 2, 7); // 8: a claim that is not above the epoch
    s.claim(id, 3, 8); // 9
    s.chunks(3, &store_op(6, "a frame in three chunks"), &[10, 40]); // 10, 11, 12
    s.claim(id, 4, 12); // 13
    s.frame(3, 13, &store_op(7, "the old owner, fenced")); // 14
    let store = open(dir.path(), id);
    let applied = apply(&store, &s, 1..=14);
    use Applied::{Claim as C, Frame as F, Skip as S};
    assert_eq!(
        applied,
        [
            S(SkipReason::Epoch),
            C { epoch: 1 },
            F,
            S(SkipReason::Position),
            S(SkipReason::Epoch),
            C { epoch: 2 },
            F,
            S(SkipReason::LostClaim),
            C { epoch: 3 },
            S(SkipReason::Pending),
            S(SkipReason::Pending),
            F,
            C { epoch: 4 },
            S(SkipReason::Epoch),
        ]
    );
    let expect = |store: &Store| {
        let held: Vec<Option<String>> = (1..=7).map(|i| live(store, i)).collect();
        assert_eq!(
            held,
            [
                None,
                Some("the owner's first write".into()),
                None,
                None,
                Some("the next epoch's write".into()),
                Some("a frame in three chunks".into()),
                None
            ]
        );
        let log = store.partition_log();
        assert!(log.replicated);
        assert_eq!((log.position, log.open_group), (14, None));
        assert_eq!(
            log.claim.map(|c| (c.epoch, c.node)),
            Some((4, "node-4".into()))
        );
        // The old owner's frame at 14 interrupted epoch 4.
        assert!(log.interrupted);
    };
    expect(&store);
    // Out of order: refused, nothing changed.
    let e = store
        .apply_replicated(&s.message(14))
        .expect_err("applied already");
    assert_eq!(e.kind(), ErrorKind::Caller, "{e}");
    // The replica's own writes are refused: its log grows only from the stream.
    let e = store
        .store(NewMemory::new("a local write"))
        .expect_err("a replica refuses its own writes");
    assert_eq!(e.kind(), ErrorKind::Caller, "{e}");
    assert!(e.to_string().contains("partition replica"), "{e}");
    expect(&store);
    store.close().expect("close");
    let store = open(dir.path(), id);
    expect(&store);
    store.checkpoint().expect("checkpoint");
    store.close().expect("close");
    // The interruption is in the checkpoint: the reopened replica judges as one that never
    // stopped, and the owner of epoch 4 counts again only once it claims again.
    let store = open(dir.path(), id);
    expect(&store);
    s.frame(4, 14, &store_op(8, "epoch 4 in place, fenced"));
    s.claim(id, 5, 15);
    s.frame(5, 16, &store_op(9, "the new owner's write"));
    assert_eq!(
        apply(&store, &s, 15..=17),
        [S(SkipReason::Epoch), C { epoch: 5 }, F]
    );
    assert_eq!(live(&store, 8), None);
    assert_eq!(live(&store, 9).as_deref(), Some("the new owner's write"));
    assert!(!store.partition_log().interrupted);
}

/// `Store::last_frame_crc`: the stored checksum of the last frame, when a message carries it
/// whole (the message body's own), none after a `Skip` the replica wrote itself, and the same
/// again after a reopen that replays the log.
#[test]
fn the_last_frame_checksum_is_the_messages_and_none_after_a_skip() {
    use amberdb::cluster::frame_crc;
    let dir = tempfile::tempdir().expect("tempdir");
    let id = StoreId::random().expect("random");
    let mut s = Stream::default();
    s.claim(id, 1, 0); // 1
    s.frame(1, 1, &store_op(1, "a write")); // 2
    s.frame(1, 1, &store_op(2, "not in place")); // 3: wrong prev, a Skip
    let store = open(dir.path(), id);
    apply(&store, &s, 1..=2);
    let write = frame_crc(s.message(2).body).expect("a whole frame");
    assert_eq!(store.last_frame_crc(), Some((2, write)));
    store.close().expect("close");
    let store = open(dir.path(), id);
    assert_eq!(store.last_frame_crc(), Some((2, write)), "replayed");
    assert_eq!(
        apply(&store, &s, 3..=3),
        [Applied::Skip(SkipReason::Position)]
    );
    assert_eq!(store.last_frame_crc(), None);
}

#[test]
fn a_chunk_group_open_across_a_checkpoint_and_a_reopen_completes_as_on_a_replica_that_never_stopped()
 {
    let id = StoreId::random().expect("random");
    let mut s = Stream::default();
    s.claim(id, 1, 0);
    s.chunks(
        1,
        &store_op(1, "split across a checkpoint and a reopen"),
        &[5, 30, 60],
    );
    let (steady, stopped) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let steady = open(steady.path(), id);
    apply(&steady, &s, 1..=5);
    let dir = stopped.path();
    let store = open(dir, id);
    apply(&store, &s, 1..=2);
    store.checkpoint().expect("checkpoint with a group open");
    apply(&store, &s, 3..=3);
    assert_eq!(store.partition_log().open_group, Some((2, 4)));
    store.close().expect("close");
    let store = open(dir, id);
    assert_eq!(store.partition_log().open_group, Some((2, 4)));
    assert_eq!(
        apply(&store, &s, 4..=5),
        [Applied::Skip(SkipReason::Pending), Applied::Frame]
    );
    assert_eq!(store.partition_log(), steady.partition_log());
    assert_eq!(
        live(&store, 1).as_deref(),
        Some("split across a checkpoint and a reopen")
    );
    assert_eq!(live(&steady, 1), live(&store, 1));
}

#[test]
fn frames_of_four_mebibytes_chunks_count_and_a_longer_chunk_does_not() {
    let id = StoreId::random().expect("random");
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), id);
    let mut s = Stream::default();
    s.claim(id, 1, 0);
    // A batch of about 10 MiB: three chunks, the first two exactly CHUNK_BYTES long.
    let text = "x".repeat(9_000);
    let batch = Op::Batch(
        (1..=1_100)
            .map(|i| store_op(i, &format!("{i} {text}")))
            .collect(),
    );
    let len = encode_frame(1, &batch).len();
    assert!(len > 2 * CHUNK_BYTES && len < 3 * CHUNK_BYTES, "{len}");
    let last = s.chunks(1, &batch, &[CHUNK_BYTES, 2 * CHUNK_BYTES]);
    // A chunk one byte longer than any publisher cuts never counts.
    let over = Op::Batch(vec![store_op(2_000, &text); 1]);
    let mut frame = encode_frame(last + 1, &over);
    frame.resize(CHUNK_BYTES + 1, 0);
    s.0.push(Published {
        epoch: 1,
        prev: last,
        chunk: Some((1, 2)),
        crc: None,
        body: frame,
    });
    let applied = apply(&store, &s, 1..=last + 1);
    assert_eq!(
        applied[1..],
        [
            Applied::Skip(SkipReason::Pending),
            Applied::Skip(SkipReason::Pending),
            Applied::Frame,
            Applied::Skip(SkipReason::Chunk)
        ]
    );
    assert!(live(&store, 1_100).is_some_and(|c| c.starts_with("1100 ")));
    store.close().expect("close");
    let store = open(dir.path(), id);
    assert_eq!(store.partition_log().position, last + 1);
    assert!(live(&store, 1).is_some());
}

#[test]
fn damage_halts_the_partition_before_anything_of_it_is_written_and_reads_go_on() {
    let id = StoreId::random().expect("random");
    let mut s = Stream::default();
    s.claim(id, 1, 0);
    s.frame(1, 1, &store_op(1, "applied before the damage"));
    s.frame(1, 2, &store_op(2, "damaged in the stream"));
    let good = s.0[2].body.clone();
    s.0[2].body[30] ^= 0x10;
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), id);
    apply(&store, &s, 1..=2);
    let e = store
        .apply_replicated(&s.message(3))
        .expect_err("a damaged frame");
    assert_eq!(e.kind(), ErrorKind::Data, "{e}");
    assert_eq!(halted_at(&e), Some((3, "frame checksum mismatch")));
    // Reads go on; the store refuses everything else until it is reopened.
    assert!(live(&store, 1).is_some());
    s.0[2].body = good;
    let e = store.apply_replicated(&s.message(3)).expect_err("poisoned");
    assert_eq!(e.kind(), ErrorKind::Environment, "{e}");
    store.close().ok();
    let store = open(dir.path(), id);
    assert_eq!(
        store.partition_log().position,
        2,
        "nothing of it was written"
    );
    assert_eq!(apply(&store, &s, 3..=3), [Applied::Frame]);
    assert!(live(&store, 2).is_some());
}

#[test]
fn a_stream_this_replica_cannot_follow_halts_it() {
    let id = StoreId::random().expect("random");
    let other = StoreId::random().expect("random");
    type Case = (&'static str, fn(&mut Stream, StoreId), &'static str);
    let cases: [Case; 4] = [
        (
            "a claim of another partition's store",
            |s, other| {
                s.claim(other, 2, 2);
            },
            "a claim of another store: the stream is another partition's",
        ),
        (
            "a counted frame the state refuses",
            |s, _| {
                s.frame(1, 2, &store_op(1, "stored twice"));
            },
            "store of an id that exists",
        ),
        (
            "a frame at another position than its own",
            |s, _| {
                let body = encode_frame(9, &store_op(5, "misplaced"));
                s.0.push(Published {
                    epoch: 1,
                    prev: 2,
                    chunk: None,
                    crc: None,
                    body,
                });
            },
            "a frame that counts whose sequence number is not its stream position",
        ),
        (
            "chunks that assemble to no frame",
            |s, _| {
                for i in 1..=2 {
                    s.0.push(Published {
                        epoch: 1,
                        prev: s.next() - 1,
                        chunk: Some((i, 2)),
                        crc: None,
                        body: vec![7; 20],
                    });
                }
            },
            "frame length out of bounds",
        ),
    ];
    for (what, damage, reason) in cases {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path(), id);
        let mut s = Stream::default();
        s.claim(id, 1, 0);
        s.frame(1, 1, &store_op(1, "first"));
        damage(&mut s, other);
        let last = s.next() - 1;
        apply(&store, &s, 1..=last - 1);
        let e = store.apply_replicated(&s.message(last)).expect_err(what);
        assert_eq!(halted_at(&e).map(|h| h.1), Some(reason), "{what}: {e}");
        assert!(live(&store, 1).is_some(), "{what}: reads go on");
    }
}

#[test]
fn a_partition_store_opens_only_with_its_own_id() {
    let id = StoreId::random().expect("random");
    let dir = tempfile::tempdir().unwrap();
    open(dir.path(), id).close().expect("close");
    let other = StoreId::random().expect("random");
    let e = Store::open(dir.path(), options(other)).expect_err("another id");
    assert_eq!(e.kind(), ErrorKind::Caller, "{e}");
    assert!(e.to_string().contains(&id.to_string()), "{e}");
    // A store opened without an id opens as it is; with its own, too.
    let mut any = options(id);
    any.store_id = None;
    Store::open(dir.path(), any)
        .expect("no id asked")
        .close()
        .expect("close");
    open(dir.path(), id);
}

/// Replicas that apply one random stream (three publishers and a rogue insider, claims,
/// pipelined and stale frames, chunk groups, broken ones) hold the same state, whether they
/// ran without stopping or were checkpointed and reopened at random points; a memory is held
/// exactly when its message counted.
#[test]
fn replicas_of_one_random_stream_agree_however_often_they_stop() {
    let seed = seed(
        "replicas_of_one_random_stream_agree_however_often_they_stop",
        57,
    );
    let mut rng = Rng::new(seed);
    let id = StoreId::random().expect("random");
    let mut seen = std::collections::BTreeMap::<String, usize>::new();
    for round in 0..8 {
        let mut s = Stream::default();
        let mut next_id = 1;
        // Each publisher's view: (its epoch, the position it believes last).
        let mut views = [(0u64, 0u64); 4];
        let mut top_epoch = 0;
        let mut owner = 0;
        for _ in 0..60 {
            // The node that claimed last acts half the time, as an owner does.
            let p = if rng.below(2) == 0 {
                owner
            } else {
                usize::try_from(rng.below(4)).expect("small")
            };
            let rogue = p == 3;
            if rng.below(if rogue { 5 } else { 2 }) == 0 {
                // Catch up with the stream, as a publisher that reads it does.
                views[p].1 = s.next() - 1;
            }
            let (epoch, prev) = views[p];
            match rng.below(8) {
                0 => {
                    // A rogue replays an old epoch in place; an honest node claims above all
                    // it has seen, where it believes the stream ends.
                    let (epoch, prev) = if rogue {
                        (1 + rng.below(top_epoch.max(1)), s.next() - 1)
                    } else {
                        (top_epoch + 1, prev)
                    };
                    top_epoch = top_epoch.max(epoch);
                    let at = s.claim(id, epoch, prev);
                    views[p] = (epoch, at);
                    if !rogue {
                        owner = p;
                    }
                }
                1 | 2 => {
                    let cut = 5 + usize::try_from(rng.below(40)).expect("small");
                    let at = s.chunks(epoch, &store_op(next_id, "chunked"), &[cut]);
                    next_id += 1;
                    views[p].1 = at;
                    if rng.below(3) == 0 {
                        // Another publisher's message lands inside the group: it breaks.
                        let chunk = s.0.pop().expect("the last chunk");
                        s.frame(0, 0, &store_op(next_id, "intruder"));
                        next_id += 1;
                        s.0.push(chunk);
                    }
                }
                3 | 4 if rogue => {
                    // An insider claims above all, in place, and sends a lone last chunk in
                    // its epoch, in place (right after the claim: its epoch not yet fenced).
                    top_epoch += 1;
                    s.claim(id, top_epoch, s.next() - 1);
                    s.0.push(Published {
                        epoch: top_epoch,
                        prev: s.next() - 1,
                        chunk: Some((2, 2)),
                        crc: None,
                        body: vec![1; 16],
                    });
                }
                _ => {
                    let at = s.frame(epoch, prev, &store_op(next_id, "whole"));
                    next_id += 1;
                    views[p].1 = at;
                }
            }
        }
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let steady = open(a.path(), id);
        let applied = apply(&steady, &s, 1..=s.next() - 1);
        for a in &applied {
            let kind = match a {
                Applied::Claim { .. } => "claim".to_owned(),
                other => format!("{other:?}"),
            };
            *seen.entry(kind).or_default() += 1;
        }
        let mut stopping = open(b.path(), id);
        let mut position = 1;
        while position < s.next() {
            let upto = (position + rng.below(8)).min(s.next() - 1);
            apply(&stopping, &s, position..=upto);
            position = upto + 1;
            match rng.below(3) {
                0 => stopping.checkpoint().expect("checkpoint"),
                1 => {
                    stopping.close().expect("close");
                    stopping = open(b.path(), id);
                }
                _ => {}
            }
        }
        let what = format!("round {round}, seed {seed}");
        assert_eq!(steady.partition_log(), stopping.partition_log(), "{what}");
        let counted = applied.iter().filter(|a| **a == Applied::Frame).count();
        let held: Vec<u64> = (1..next_id)
            .filter(|i| live(&steady, *i).is_some())
            .collect();
        assert_eq!(held.len(), counted, "{what}: one memory per counted frame");
        for i in 1..next_id {
            assert_eq!(live(&steady, i), live(&stopping, i), "{what}: id {i}");
        }
    }
    eprintln!("verdicts: {seen:?}");
    // The streams reach every case of the rule (a seed that does not is a weak seed).
    for kind in [
        "Frame",
        "claim",
        "Skip(Epoch)",
        "Skip(Position)",
        "Skip(LostClaim)",
        "Skip(Pending)",
        "Skip(Chunk)",
    ] {
        assert!(seen.contains_key(kind), "no {kind} in {seen:?}");
    }
}

/// A power cut at every sync point of a replica applying a stream (flushes, checkpoints with a
/// chunk group open) leaves a prefix of the stream: the replica reopens at some position and,
/// applying the stream from there, ends where a replica that never stopped ends.
#[test]
fn a_power_cut_at_every_sync_point_leaves_a_prefix_the_stream_completes() {
    use amberdb::storage::FaultyStorage;
    let seed = seed(
        "a_power_cut_at_every_sync_point_leaves_a_prefix_the_stream_completes",
        57,
    );
    let id = StoreId::random().expect("random");
    let mut s = Stream::default();
    s.frame(0, 0, &store_op(1, "before any claim"));
    s.claim(id, 1, 1);
    for i in 2..6 {
        s.frame(1, s.next() - 1, &store_op(i, "in place"));
    }
    s.chunks(1, &store_op(6, "in three chunks"), &[20, 50]);
    s.frame(1, 3, &store_op(7, "behind others"));
    s.claim(id, 2, s.next() - 1);
    s.chunks(2, &store_op(8, "in two chunks"), &[30]);
    for i in 9..12 {
        s.frame(2, s.next() - 1, &store_op(i, "the second owner's"));
    }
    let last = s.next() - 1;
    let faulty = |fs: &FaultyStorage| options(id).storage(Arc::new(fs.clone()));
    let run = |store: &Store| {
        for p in 1..=last {
            if store.apply_replicated(&s.message(p)).is_err()
                || store.flush().is_err()
                || (p % 4 == 0 && store.checkpoint().is_err())
            {
                return;
            }
        }
    };
    let steady = FaultyStorage::new();
    let store = Store::open(Path::new("/r"), faulty(&steady)).expect("open");
    let before = steady.syncs();
    run(&store);
    let sync_points = steady.syncs() - before;
    let want = (
        store.partition_log(),
        (1..12).map(|i| live(&store, i)).collect::<Vec<_>>(),
    );
    drop(store);
    let mut cuts = 0;
    for k in 1..=sync_points {
        let fs = FaultyStorage::new();
        let store = Store::open(Path::new("/r"), faulty(&fs)).expect("open");
        fs.crash_at_sync(k);
        run(&store);
        drop(store);
        for image in super::support::crash_images(k ^ seed) {
            let what = format!("sync point {k}, {image:?}, seed {seed}");
            let store = Store::open(Path::new("/r"), faulty(&fs.crash_image(image)))
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            let from = store.partition_log().position + 1;
            for p in from..=last {
                store
                    .apply_replicated(&s.message(p))
                    .unwrap_or_else(|e| panic!("{what}: position {p}: {e}"));
            }
            let got = (
                store.partition_log(),
                (1..12).map(|i| live(&store, i)).collect::<Vec<_>>(),
            );
            assert_eq!(got, want, "{what}: resumed at {from}");
            cuts += 1;
        }
    }
    assert!(sync_points > 10, "{sync_points} sync points");
    eprintln!("{sync_points} sync points, {cuts} power cuts: every replica completed the stream");
}

/// `StreamMessage::claim_in_place`: what a replica past a position asks of the stream's message
/// there when a frame of an epoch it never saw claimed arrives (`docs/cluster.md`, "A replica
/// whose history is not the stream's").
#[test]
fn a_claim_in_place_is_told_from_a_late_claim_another_frame_and_a_forged_header() {
    let id = StoreId::random().expect("random");
    let mut s = Stream::default();
    s.claim(id, 1, 0); // 1: in place
    s.frame(1, 1, &store_op(1, "a write")); // 2: not a claim
    s.claim(id, 2, 1); // 3: a late claim, published for position 2
    s.claim(id, 2, 3); // 4: in place
    s.chunks(2, &store_op(2, "in chunks"), &[10]); // 5, 6
    let claims: Vec<Option<u64>> = (1..=6).map(|p| s.message(p).claim_in_place()).collect();
    assert_eq!(claims, [Some(1), None, None, Some(2), None, None]);
    // A header whose epoch is not the claim's own is no publisher's claim.
    let mut forged = s.message(4);
    forged.epoch = 7;
    assert_eq!(forged.claim_in_place(), None);
    // Damage is no claim.
    let mut bytes = s.message(4).body.to_vec();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    let damaged = StreamMessage {
        body: &bytes,
        ..s.message(4)
    };
    assert_eq!(damaged.claim_in_place(), None);
}
