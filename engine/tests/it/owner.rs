//! A partition's owner (`docs/cluster.md`, "Ownership", "What a publish can end as"): once the
//! claim it published is applied, every frame it appends is published at its position and a
//! write is acknowledged only once the stream holds it; a replica of the stream then holds what
//! the owner holds. A stream that does not hold a write (another message at its position, no
//! acknowledgement) poisons the owner before the write is reported.

use super::replica::{Published, Stream, apply, live, open, options};
use amberdb::cluster::{Applied, Outgoing, Publisher, SkipReason};
use amberdb::{
    EntityKind, ErrorKind, MemoryId, NewMemory, Role, SearchRequest, Store, StoreId, SyncPolicy,
};
use parking_lot::Mutex;
use std::sync::Arc;

/// A partition stream in memory: messages land at the next position, whoever publishes them.
#[derive(Debug, Default)]
struct MemoryStream {
    stream: Mutex<Stream>,
    /// The first publish that did not land where it was meant to, or was refused.
    failed: Mutex<Option<String>>,
    /// Publishes are refused (no acknowledgement comes).
    refusing: Mutex<bool>,
}

impl Publisher for MemoryStream {
    fn publish(&self, m: Outgoing) {
        if *self.refusing.lock() {
            self.failed
                .lock()
                .get_or_insert_with(|| format!("no acknowledgement for position {}", m.position));
            return;
        }
        let mut stream = self.stream.lock();
        let landed = stream.next();
        if landed != m.position {
            self.failed.lock().get_or_insert_with(|| {
                format!("published for position {}, landed at {landed}", m.position)
            });
        }
        stream.0.push(Published::from(m));
    }

    fn wait(&self, position: u64) -> Result<(), String> {
        if let Some(why) = self.failed.lock().clone() {
            return Err(why);
        }
        let held = self.stream.lock().next() - 1;
        if held < position {
            return Err(format!("the stream holds {held}, not {position}"));
        }
        Ok(())
    }
}

impl MemoryStream {
    fn snapshot(&self) -> Stream {
        self.stream.lock().clone()
    }
}

/// An owner at epoch 1 of a new partition, and its stream.
fn owner(dir: &std::path::Path, id: StoreId, sync: SyncPolicy) -> (Store, Arc<MemoryStream>) {
    let store = Store::open(dir, options(id).sync(sync)).expect("open");
    let stream = Arc::new(MemoryStream::default());
    let claim = store.claim_message(1, "node-a").expect("a claim");
    assert_eq!((claim.position, claim.prev, claim.crc), (1, 0, Some(0)));
    stream.stream.lock().0.push(Published::from(claim));
    let applied = store
        .apply_replicated(&stream.snapshot().message(1))
        .expect("the claim applies");
    assert_eq!(applied, Applied::Claim { epoch: 1 });
    store
        .own_partition(1, Arc::clone(&stream) as Arc<dyn Publisher>)
        .expect("owns it");
    (store, stream)
}

#[test]
fn a_replica_of_an_owners_stream_holds_what_the_owner_holds() {
    let id = StoreId::random().expect("random");
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (store, stream) = owner(a.path(), id, SyncPolicy::Always);
    let mut ids = Vec::new();
    for i in 0..12 {
        let mut m = NewMemory::new(format!("fact {i} about the deploy pipeline and its owners"));
        m.tags = vec![format!("t{}", i % 3)];
        ids.push(store.store(m).expect("stored").memory_id);
    }
    store.delete(ids[3]).expect("deleted");
    store
        .create_entity(EntityKind::User, None, "bob", Some("Bob"), None)
        .expect("a user");
    // A search counts accesses: published, never waited for.
    let hits = store
        .search(&SearchRequest::new("deploy pipeline"))
        .expect("search");
    assert!(!hits.results.is_empty());
    // An ADD_MESSAGES batch of about 5 MiB: one frame, published as two chunks.
    let long = "a long turn of a long chat ".repeat(330);
    let turns: Vec<(Role, String)> = (0..600)
        .map(|i| (Role::User, format!("{i} {long}")))
        .collect();
    let turn_ids = store
        .add_messages(None, "s1", &turns)
        .expect("a batch of turns");
    assert_eq!(turn_ids.len(), 600);
    store.flush().expect("flush");
    let s = stream.snapshot();
    let chunked = s.0.iter().filter(|m| m.chunk.is_some()).count();
    assert_eq!(chunked, 2, "the batch went out as two chunks");
    assert_eq!(store.partition_log().position, s.next() - 1);
    // A replica of the stream holds the same memories, with the same access counts.
    let replica = open(b.path(), id);
    let applied = apply(&replica, &s, 1..=s.next() - 1);
    assert!(
        applied.iter().all(|a| matches!(
            a,
            Applied::Frame | Applied::Claim { .. } | Applied::Skip(SkipReason::Pending)
        )),
        "{applied:?}"
    );
    // Their logs are the same history: the running CRC each message carried matched.
    assert!(replica.partition_log().running_crc.is_some());
    assert_eq!(replica.partition_log(), store.partition_log());
    for id in ids.iter().chain(&turn_ids) {
        let (o, r) = (store.get(*id), replica.get(*id));
        match (o, r) {
            (Ok(o), Ok(r)) => assert_eq!(
                (o.content, o.access_count, o.tags),
                (r.content, r.access_count, r.tags)
            ),
            (Err(_), Err(_)) => {}
            (o, r) => panic!("{id:?}: owner {o:?}, replica {r:?}"),
        }
    }
    assert!(live(&replica, ids[3].0).is_none(), "the delete replicated");
    assert!(replica.get_entity(EntityKind::User, None, "bob").is_ok());
    // The owner reopened is a replica until it owns the partition again.
    store.close().expect("close");
    let reopened = open(a.path(), id);
    assert_eq!(reopened.partition_log(), replica.partition_log());
    let e = reopened
        .store(NewMemory::new("not the owner any more"))
        .expect_err("a replica");
    assert_eq!(e.kind(), ErrorKind::Caller, "{e}");
}

#[test]
fn a_replica_halts_where_the_publishers_history_differs_from_its_own() {
    use amberdb::{EngineError, KernelError};
    let id = StoreId::random().expect("random");
    let (a, b, c) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let (store, stream) = owner(a.path(), id, SyncPolicy::Always);
    for text in ["one", "two", "three"] {
        store.store(NewMemory::new(text)).expect("stored");
    }
    let s = stream.snapshot();
    assert_eq!(s.next(), 5, "a claim and three frames");
    assert!(
        s.0.iter().all(|m| m.crc.is_some()),
        "every message carries one"
    );
    // Message 3 as a stream that changed what a replica applied would deliver it: its
    // publisher's history through position 2 is not this replica's.
    let mut changed = s.clone();
    changed.0[2].crc = changed.0[2].crc.map(|c| c ^ 1);
    let replica = open(b.path(), id);
    apply(&replica, &changed, 1..=2);
    let e = replica
        .apply_replicated(&changed.message(3))
        .expect_err("another history");
    assert!(
        matches!(&e, EngineError::Kernel(KernelError::Halted { position: 3, reason }) if reason.contains("running CRC")),
        "{e}"
    );
    assert!(
        replica.stats().poisoned,
        "halted: nothing past it is followed"
    );
    assert!(replica.apply_replicated(&changed.message(3)).is_err());
    // A message without one (a publisher of an older build) is not compared; a stale
    // publisher's is a skip whatever it says.
    let mut older = s.clone();
    older.0[2].crc = None;
    older.0.push(stale_copy(&s, 9));
    let other = open(c.path(), id);
    let applied = apply(&other, &older, 1..=5);
    assert_eq!(applied[2], Applied::Frame);
    assert_eq!(applied[4], Applied::Skip(SkipReason::Epoch));
    let (owners, theirs) = (store.partition_log(), other.partition_log());
    assert_eq!(theirs.position, 5);
    assert_ne!(theirs.running_crc, None);
    assert_eq!(owners.position, 4);
}

/// A frame published at epoch `epoch` with a running CRC nobody holds.
fn stale_copy(s: &super::replica::Stream, epoch: u64) -> Published {
    let mut m = s.0[3].clone();
    m.epoch = epoch;
    m.prev = s.next() - 1;
    m.crc = Some(0x1234_5678);
    m
}

#[test]
fn a_write_the_stream_holds_elsewhere_poisons_the_owner_and_is_never_reported() {
    let id = StoreId::random().expect("random");
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (store, stream) = owner(a.path(), id, SyncPolicy::Always);
    let first = store
        .store(NewMemory::new("held by the stream"))
        .expect("stored")
        .memory_id;
    // Another node claims the partition meanwhile: its claim takes the owner's next position.
    {
        let mut s = stream.stream.lock();
        s.claim(id, 2, 2);
    }
    let e = store
        .store(NewMemory::new("published after the new claim"))
        .expect_err("the stream holds another message there");
    assert_eq!(e.kind(), ErrorKind::Environment, "{e}");
    assert!(
        store
            .stats()
            .poison_cause
            .is_some_and(|c| c.error.contains("landed at 4")),
        "the cause is kept"
    );
    assert!(store.store(NewMemory::new("after")).is_err(), "poisoned");
    assert!(store.get(first).is_ok(), "reads go on");
    // Every replica: the new claim counts, the old owner's late frame does not.
    let s = stream.snapshot();
    let replica = open(b.path(), id);
    assert_eq!(
        apply(&replica, &s, 1..=4),
        [
            Applied::Claim { epoch: 1 },
            Applied::Frame,
            Applied::Claim { epoch: 2 },
            Applied::Skip(SkipReason::Epoch)
        ]
    );
    assert!(replica.get(first).is_ok());
    assert_eq!(replica.stats().memories, 1);
}

#[test]
fn with_no_acknowledgement_from_the_stream_nothing_is_reported_stored_whatever_the_sync_policy() {
    for sync in [SyncPolicy::Always, SyncPolicy::None] {
        let id = StoreId::random().expect("random");
        let dir = tempfile::tempdir().unwrap();
        let (store, stream) = owner(dir.path(), id, sync);
        store.store(NewMemory::new("acknowledged")).expect("stored");
        *stream.refusing.lock() = true;
        let e = store
            .store(NewMemory::new("never acknowledged"))
            .expect_err("no acknowledgement");
        assert_eq!(e.kind(), ErrorKind::Environment, "{sync:?}: {e}");
        // A deferred batch waits for the stream at its end, as a fsync.
        let (written, pending) = store.deferred_batch(|b| b.store(NewMemory::new("in a batch")));
        assert!(written.is_err() || pending.wait().is_err(), "{sync:?}");
    }
}

#[test]
fn only_the_claim_a_store_applied_last_makes_it_the_owner() {
    let id = StoreId::random().expect("random");
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), id);
    let stream = Arc::new(MemoryStream::default());
    let publisher = || Arc::clone(&stream) as Arc<dyn Publisher>;
    let e = store.own_partition(1, publisher()).expect_err("no claim");
    assert_eq!(e.kind(), ErrorKind::Caller, "{e}");
    let claim = store.claim_message(3, "node-a").expect("a claim");
    stream.stream.lock().0.push(Published::from(claim));
    apply(&store, &stream.snapshot(), 1..=1);
    assert!(
        store.own_partition(2, publisher()).is_err(),
        "another epoch"
    );
    store.own_partition(3, publisher()).expect("its claim");
    assert!(store.own_partition(3, publisher()).is_err(), "once");
    let e = store
        .apply_replicated(&stream.snapshot().message(1))
        .expect_err("an owner does not apply its stream");
    assert_eq!(e.kind(), ErrorKind::Caller, "{e}");
    assert!(store.get(MemoryId(1)).is_err());
}

/// A poisoned owner's log ends in a write the stream holds elsewhere; reopened as a replica
/// with `tail_from_stream`, it drops its log after its newest checkpoint (which the stream
/// holds all of) and, applying the stream from there, holds what every replica holds.
#[test]
fn a_stale_owner_reopened_from_its_checkpoint_and_the_stream_holds_what_every_replica_holds() {
    let id = StoreId::random().expect("random");
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (store, stream) = owner(a.path(), id, SyncPolicy::Always);
    for i in 0..3 {
        store
            .store(NewMemory::new(format!("before the checkpoint {i}")))
            .expect("stored");
    }
    store
        .checkpoint()
        .expect("checkpoint: the stream holds everything");
    let checkpointed = store.partition_log().position;
    store
        .store(NewMemory::new("after the checkpoint"))
        .expect("stored");
    stream.stream.lock().claim(id, 2, checkpointed + 1);
    let stale = "published after the new claim";
    assert!(store.store(NewMemory::new(stale)).is_err());
    store.close().ok();
    // Without dropping its tail the old owner would hold a write no replica holds.
    let kept = open(a.path(), id);
    assert!(
        kept.list_recent(None, 20)
            .unwrap()
            .iter()
            .any(|m| m.content == stale)
    );
    drop(kept);
    let reopened = Store::open(a.path(), options(id).tail_from_stream(true)).expect("reopens");
    assert_eq!(reopened.partition_log().position, checkpointed);
    assert!(reopened.open_report().dropped_log_files >= 1);
    let s = stream.snapshot();
    apply(&reopened, &s, checkpointed + 1..=s.next() - 1);
    let replica = open(b.path(), id);
    apply(&replica, &s, 1..=s.next() - 1);
    assert_eq!(reopened.partition_log(), replica.partition_log());
    let texts = |store: &Store| -> Vec<String> {
        let mut t: Vec<String> = store
            .list_recent(None, 20)
            .unwrap()
            .into_iter()
            .map(|m| m.content)
            .collect();
        t.sort();
        t
    };
    assert_eq!(texts(&reopened), texts(&replica));
    assert!(!texts(&reopened).iter().any(|t| t == stale));
    assert_eq!(texts(&replica).len(), 4);
}

#[test]
fn a_partitions_owner_assigns_ids_above_its_base_and_its_replicas_keep_them() {
    use amberdb::cluster::{MAX_PARTITIONS, partition_base, partition_of_id};
    let id = StoreId::random().expect("random");
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let store = Store::open(a.path(), options(id).partition(5)).expect("open");
    let stream = Arc::new(MemoryStream::default());
    let claim = store.claim_message(1, "node-a").expect("a claim");
    stream.stream.lock().0.push(Published::from(claim));
    apply(&store, &stream.snapshot(), 1..=1);
    store
        .own_partition(1, Arc::clone(&stream) as Arc<dyn Publisher>)
        .expect("owns it");
    let first = store.store(NewMemory::new("the first")).unwrap().memory_id;
    assert_eq!(first, MemoryId(partition_base(5) + 1));
    assert_eq!(partition_of_id(first.0), 5);
    // Every path that keys by id works at the partition's ids: search, turns, delete,
    // checkpoint (segments), reopen.
    for i in 0..30 {
        store
            .store(NewMemory::new(format!(
                "deploy note {i} about the release train"
            )))
            .unwrap();
    }
    let turns = store
        .add_messages(
            None,
            "s",
            &[(Role::User, "hello".into()), (Role::Assistant, "hi".into())],
        )
        .unwrap();
    assert!(turns.iter().all(|t| partition_of_id(t.0) == 5));
    store.delete(MemoryId(partition_base(5) + 2)).unwrap();
    let hits = store.search(&SearchRequest::new("release train")).unwrap();
    assert!(!hits.results.is_empty());
    store.checkpoint().unwrap();
    store.flush().unwrap();
    let before = store.stats().memories;
    let replica = Store::open(b.path(), options(id).partition(5)).expect("open");
    let s = stream.snapshot();
    apply(&replica, &s, 1..=s.next() - 1);
    assert_eq!(replica.get(first).unwrap().content, "the first");
    assert_eq!(replica.stats().memories, before);
    replica.checkpoint().unwrap();
    drop(replica);
    let replica = Store::open(b.path(), options(id).partition(5)).expect("reopen");
    assert_eq!(replica.stats().memories, before);
    let hits = replica
        .search(&SearchRequest::new("release train"))
        .unwrap();
    assert!(!hits.results.is_empty());
    assert!(
        hits.results
            .iter()
            .all(|h| partition_of_id(h.memory.id.0) == 5)
    );
    let e = Store::open(
        tempfile::tempdir().unwrap().path(),
        options(id).partition(MAX_PARTITIONS),
    )
    .expect_err("8,192 partitions at most");
    assert_eq!(e.kind(), ErrorKind::Caller, "{e}");
}

/// A replica's open drops every log file after its checkpoint and starts a new one there
/// (`docs/cluster.md`, "Cutting a stale tail"): that new file's header is not yet whole when a
/// kill lands in its creation, or it is gone. Either way the stream holds everything after the
/// checkpoint, so the next replica open starts a new file again instead of refusing the
/// partition as a lost log (the cluster fault rig's torn-log fault on a header-only log, seed
/// 1796691212694473172). A single store's open still refuses a missing log (R5).
#[test]
fn a_replica_whose_log_after_the_checkpoint_is_torn_or_gone_opens_from_the_stream() {
    let id = StoreId::random().expect("random");
    for damage in ["torn header end", "torn header", "gone"] {
        let dir = tempfile::tempdir().unwrap();
        drop(Store::open(dir.path(), options(id).tail_from_stream(true)).expect("created"));
        let wal = dir.path().join("wal-00000000000000000001.log");
        let len = std::fs::metadata(&wal).unwrap().len();
        match damage {
            "torn header" | "torn header end" => std::fs::OpenOptions::new()
                .write(true)
                .open(&wal)
                .unwrap()
                .set_len(if damage == "torn header" {
                    len / 2
                } else {
                    len - 5
                })
                .unwrap(),
            _ => std::fs::remove_file(&wal).unwrap(),
        }
        if damage == "gone" {
            let e = Store::open(dir.path(), options(id)).expect_err("a single store refuses");
            assert!(e.to_string().contains("log file missing"), "{e}");
        }
        let store = Store::open(dir.path(), options(id).tail_from_stream(true))
            .unwrap_or_else(|e| panic!("{damage}: {e}"));
        assert_eq!(store.partition_log().position, 0, "{damage}");
        drop(store);
        assert_eq!(
            std::fs::metadata(&wal).unwrap().len(),
            len,
            "{damage}: a new whole file"
        );
    }
}
