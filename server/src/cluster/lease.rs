//! Who should own a partition, and where the nodes are: a lease per partition in the
//! cluster's KV bucket, each node's registration (`node.<name>`: its addresses and how far
//! each of its partition stores is; `docs/cluster.md`, "Ownership: the lease and the claim",
//! "The node"), and the claim procedure that
//! makes a node the owner. The lease only says who should try; what decides who may write is
//! the log (the claim that counts), so a lease two nodes both believe they hold (a clock
//! skewed past the lease, a paused node) costs a failed claim or a poisoned store, never a
//! write acknowledged and lost.
//!
//! Guarantees: a lease is taken or renewed only by a compare-and-set on the revision read, so
//! of two nodes racing for an expired lease one wins; a node claims only after it has applied
//! the stream to its end, with an epoch above every epoch it has seen in the log or the lease;
//! it owns the partition only once its own claim is applied and counted.

use super::stream::{
    JetStreamPublisher, StreamError, bounded, follow, last_position, publish_claim,
};
use amberdb::{Store, StoreId};
use async_nats::jetstream::{self, kv, stream};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long a lease lasts without renewal.
pub const LEASE: Duration = Duration::from_secs(5);
/// How often an owner renews it.
pub const RENEW_EVERY: Duration = Duration::from_secs(1);
/// A partition's lease, as the KV bucket holds it under `lease.<partition>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// The node that holds it.
    pub node: String,
    /// The epoch it claimed (or is claiming) under it.
    pub epoch: u64,
    /// Milliseconds since the Unix epoch (the holder's clock) at which it lapses.
    pub expires_ms: u64,
    /// The node its holder handed the partition to when it let the lease lapse
    /// (`placement`): that node takes it at once, any other after two leases.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handoff: Option<String>,
}

/// Partition `p`'s lease key.
#[must_use]
pub fn key(partition: u32) -> String {
    format!("lease.{partition}")
}

/// Milliseconds since the Unix epoch, this node's clock.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn nats(context: &'static str) -> impl FnOnce(String) -> StreamError {
    move |reason| StreamError::Nats { context, reason }
}

/// The lease of partition `p` and its revision, if any.
///
/// # Errors
/// JetStream's refusal, or a lease that does not decode.
pub async fn read(kv: &kv::Store, partition: u32) -> Result<Option<(Lease, u64)>, StreamError> {
    let Some(entry) = bounded("reading a lease", kv.entry(key(partition))).await? else {
        return Ok(None);
    };
    if entry.value.is_empty() {
        return Ok(None);
    }
    let lease = serde_json::from_slice(&entry.value)
        .map_err(|e| nats("a lease that does not decode")(e.to_string()))?;
    Ok(Some((lease, entry.revision)))
}

/// Writes `lease` over the revision read (`None`: there was none). Returns the new revision,
/// or `None` if someone else wrote first.
async fn swap(
    kv: &kv::Store,
    partition: u32,
    lease: &Lease,
    revision: Option<u64>,
) -> Result<Option<u64>, StreamError> {
    let value = serde_json::to_vec(lease)
        .map_err(|e| nats("encoding a lease")(e.to_string()))?
        .into();
    let written = match revision {
        None => kv
            .create(key(partition), value)
            .await
            .map_err(|e| e.to_string()),
        Some(r) => kv
            .update(key(partition), value, r)
            .await
            .map_err(|e| e.to_string()),
    };
    // A create of a key that exists, or an update of a revision that is not the last: lost.
    Ok(written.ok())
}

/// Renews a held lease: the new revision, or `None` if it was taken meanwhile.
///
/// # Errors
/// JetStream's refusal.
pub async fn renew(
    kv: &kv::Store,
    partition: u32,
    lease: &mut Lease,
    revision: u64,
) -> Result<Option<u64>, StreamError> {
    lease.expires_ms = now_ms() + u64::try_from(LEASE.as_millis()).unwrap_or(u64::MAX);
    swap(kv, partition, lease, Some(revision)).await
}

/// A partition this node owns: its epoch, and its lease's revision.
#[derive(Debug, Clone)]
pub struct Owned {
    /// The epoch of the claim that counted.
    pub epoch: u64,
    /// The lease as written, and its revision, for `renew`.
    pub lease: Lease,
    /// The lease's revision.
    pub revision: u64,
    /// The publisher the store publishes through, which says how far JetStream acknowledged.
    pub publisher: Arc<JetStreamPublisher>,
}

/// What a node needs to take a partition.
#[derive(Debug, Clone)]
pub struct Partition<'a> {
    /// The cluster's JetStream.
    pub js: &'a jetstream::Context,
    /// The cluster's KV bucket.
    pub kv: &'a kv::Store,
    /// The name of every node that registered in the cluster (a node's `Directory`): their
    /// registrations are read afresh before a claim.
    pub nodes: &'a [String],
    /// The partition's stream.
    pub stream: &'a stream::Stream,
    /// Its number.
    pub partition: u32,
    /// Its store id (from the settings).
    pub store_id: StoreId,
    /// The highest position JetStream acknowledged to this node for it (its publishers' and
    /// claims', since the node started): nothing is claimed on a stream that ends before it.
    pub acknowledged: u64,
}

/// The claim procedure (`docs/cluster.md`, "Ownership", steps 1–4): if the lease is free or
/// lapsed, the node catches up with the stream, takes the lease, publishes a claim above every
/// epoch it has seen, and applies the stream to it; it then owns the partition, its writes
/// published through a new publisher on `runtime`. `None` if another node holds the lease or
/// won a race.
///
/// # Errors
/// The store's refusal (a halted partition) or JetStream's.
pub async fn take(
    p: &Partition<'_>,
    store: &Store,
    node: &str,
    runtime: &tokio::runtime::Handle,
) -> Result<Option<Owned>, StreamError> {
    let held = read(p.kv, p.partition).await?;
    if let Some((lease, _)) = &held
        && lease.node != node
        && lease.expires_ms > now_ms()
    {
        return Ok(None);
    }
    // 1: catch up.
    let end = last_position(p.stream).await?;
    // A stream that ends before what it acknowledged to this node lost acknowledged messages
    // (a damaged leader; this node, their publisher, knows it without asking anyone): as below.
    if end < p.acknowledged {
        let e = StreamError::LostAcknowledged {
            end,
            acknowledged: p.acknowledged,
        };
        super::stream::ask_leader_change(p.js, p.partition, &e.to_string()).await;
        return Err(e);
    }
    // A stream that ends before what this node's store or a live replica applied lost
    // acknowledged messages (a damaged leader): a claim on it would write over them. Its
    // leadership is asked to move, and nothing is claimed until the stream holds them again
    // (or an operator sets the store that holds them aside: docs/cluster.md, "A partition no
    // leader can serve").
    let applied = store.partition_log().position;
    if end < applied {
        let e = StreamError::ShorterThanReplicas {
            end,
            held: applied,
            node: node.to_owned(),
        };
        super::stream::ask_leader_change(p.js, p.partition, &e.to_string()).await;
        return Err(e);
    }
    let now = now_ms();
    // Every registration, or no claim: one left unread could be the replica that holds more.
    if let Some((other, held)) = registrations(p.kv, p.nodes)
        .await?
        .into_iter()
        .filter(|(name, peer)| name != node && peer.expires_ms > now)
        .filter_map(|(name, peer)| {
            let at = |v: &Vec<Option<u64>>| v.get(p.partition as usize).copied().flatten();
            Some((name, at(&peer.positions).max(at(&peer.acknowledged))?))
        })
        .max_by_key(|(_, held)| *held)
        && held > end
    {
        let e = StreamError::ShorterThanReplicas {
            end,
            held,
            node: other,
        };
        super::stream::ask_leader_change(p.js, p.partition, &e.to_string()).await;
        return Err(e);
    }
    follow(store, p.stream, Some(end)).await?;
    let seen = held.as_ref().map_or(0, |(l, _)| l.epoch);
    let epoch = store.partition_log().claim.map_or(0, |c| c.epoch).max(seen) + 1;
    // 2: the lease, compare-and-set on the revision read.
    let mut lease = Lease {
        node: node.to_owned(),
        epoch,
        expires_ms: now_ms() + u64::try_from(LEASE.as_millis()).unwrap_or(u64::MAX),
        handoff: None,
    };
    let Some(revision) = swap(p.kv, p.partition, &lease, held.map(|(_, r)| r)).await? else {
        return Ok(None);
    };
    // 3: the claim.
    let at = match publish_claim(p.js, p.partition, store, epoch, node, p.store_id).await {
        Ok(at) => at,
        // Another claim came first (or the leader refused this one's position): a lost race.
        Err(
            StreamError::ClaimLost { .. }
            | StreamError::Nats {
                context: super::stream::CLAIM_REFUSED,
                ..
            },
        ) => return Ok(None),
        // Not published (no stream leader answers at once): the caller says why and tries
        // again.
        Err(e) => return Err(e),
    };
    // 4: apply the stream to it; own the partition if it counted.
    follow(store, p.stream, Some(at)).await?;
    let counted = store
        .partition_log()
        .claim
        .is_some_and(|c| c.epoch == epoch && c.node == node);
    if !counted {
        return Ok(None);
    }
    let publisher = JetStreamPublisher::start(runtime, p.js.clone(), p.partition, p.store_id, at);
    store.own_partition(epoch, publisher.clone())?;
    // The lease is renewed from here; a renewal right away covers the claim's time.
    let revision = renew(p.kv, p.partition, &mut lease, revision)
        .await?
        .unwrap_or(revision);
    Ok(Some(Owned {
        epoch,
        lease,
        revision,
        publisher,
    }))
}

/// Renews `owned`'s lease every `RENEW_EVERY` until it is lost (someone else wrote it) or the
/// task is dropped. Returns when lost.
pub async fn keep(kv: kv::Store, partition: u32, mut owned: Owned) {
    loop {
        tokio::time::sleep(RENEW_EVERY).await;
        match renew(&kv, partition, &mut owned.lease, owned.revision).await {
            Ok(Some(revision)) => owned.revision = revision,
            Ok(None) => return,
            Err(e) => tracing::warn!(error = %e, partition, "renewing a lease"),
        }
    }
}

/// A node name: 1 to 64 letters, digits, `-` or `_` (it is part of a KV key).
///
/// # Errors
/// Why it is not one.
pub fn check_name(name: &str) -> anyhow::Result<()> {
    let fine = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    anyhow::ensure!(
        fine,
        "--node {name:?}: a node name is 1 to 64 letters, digits, '-' or '_'"
    );
    Ok(())
}

/// Where a node is reached, as it registers itself under `node.<name>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Peer {
    /// The line protocol's address.
    pub address: String,
    /// HTTP's URL, if it serves HTTP.
    pub http: Option<String>,
    /// Milliseconds since the Unix epoch (its clock) after which it counts as gone.
    pub expires_ms: u64,
    /// The position each of its partition stores has applied (`None`: being reopened), as of
    /// its last registration.
    #[serde(default)]
    pub positions: Vec<Option<u64>>,
    /// Each partition store's running CRC through its position (`docs/cluster.md`, "Running
    /// CRC"; `None`: unknown), beside `positions`.
    #[serde(default)]
    pub running_crcs: Vec<Option<u32>>,
    /// Each partition store's newest checkpoint (`None`: not open, or halted): a stream is
    /// trimmed only below every live node's (`docs/cluster.md`, "Trimmed streams").
    #[serde(default)]
    pub checkpoints: Vec<Option<u64>>,
    /// Per partition, the highest position JetStream acknowledged to this node's publisher
    /// since the node started (`None`: none): a stream that ends before it lost acknowledged
    /// messages, whatever its stores now hold (`docs/cluster.md`, "When the stream loses what
    /// it acknowledged").
    #[serde(default)]
    pub acknowledged: Vec<Option<u64>>,
    /// The formats it writes (`docs/cluster.md`, "Rolling upgrades"); a registration without
    /// them is a build from before the field, which writes [`Formats::FIRST`].
    #[serde(default = "Formats::first")]
    pub formats: Formats,
}

/// The on-disk and on-stream formats a build writes: its log frames' version (what it
/// publishes) and its checkpoints' (what it ships). Later builds read every earlier version,
/// so the oldest formats among live nodes are the ones every live node reads: only nodes that
/// write them may own a partition (`placement::may_own`). Ordered by log, then checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Formats {
    /// `amberdb::cluster::LOG_VERSION` of the build.
    pub log: u16,
    /// `amberdb::cluster::CHECKPOINT_VERSION` of the build.
    pub checkpoint: u16,
}

impl Formats {
    /// The formats of the first build with cluster mode (the frames `Claim` and `Skip`, log
    /// v12; checkpoint v13), which registered none.
    pub const FIRST: Formats = Formats {
        log: 12,
        checkpoint: 13,
    };

    /// The formats this build writes.
    pub const THIS_BUILD: Formats = Formats {
        log: amberdb::cluster::LOG_VERSION,
        checkpoint: amberdb::cluster::CHECKPOINT_VERSION,
    };

    fn first() -> Formats {
        Formats::FIRST
    }
}

/// Registers (or renews) node `name` as `peer` under `node.<name>`.
///
/// # Errors
/// JetStream's refusal.
pub async fn register(kv: &kv::Store, name: &str, peer: &Peer) -> anyhow::Result<()> {
    let value = serde_json::to_vec(peer)?;
    kv.put(format!("node.{name}"), value.into())
        .await
        .map_err(|e| anyhow::anyhow!("registering node {name}: {e}"))?;
    Ok(())
}

/// The registrations of the nodes `names`, read now (direct gets, answered by any replica of
/// the bucket: no consumer), by name; one missing or that does not decode is left out.
///
/// # Errors
/// A read JetStream refused or did not answer within
/// [`READ_LIMIT`](super::stream::READ_LIMIT).
async fn registrations(
    kv: &kv::Store,
    names: &[String],
) -> Result<std::collections::BTreeMap<String, Peer>, StreamError> {
    let mut peers = std::collections::BTreeMap::new();
    for name in names {
        if let Some(bytes) =
            bounded("reading a registration", kv.get(format!("node.{name}"))).await?
            && let Ok(peer) = serde_json::from_slice::<Peer>(&bytes)
        {
            peers.insert(name.clone(), peer);
        }
    }
    Ok(peers)
}

/// Every node's registration, by name (one that does not decode is left out).
///
/// # Errors
/// A read JetStream refused or did not answer within
/// [`READ_LIMIT`](super::stream::READ_LIMIT): never a partial list.
pub async fn registered(
    kv: &kv::Store,
) -> Result<std::collections::BTreeMap<String, Peer>, StreamError> {
    let mut peers = std::collections::BTreeMap::new();
    for (name, bytes) in entries(kv, "node.").await? {
        if let Ok(peer) = serde_json::from_slice::<Peer>(&bytes) {
            peers.insert(name, peer);
        }
    }
    Ok(peers)
}

/// Every key of the bucket that begins with `prefix`, without it, and its value (deleted keys
/// left out).
///
/// # Errors
/// A read JetStream refused or did not answer within
/// [`READ_LIMIT`](super::stream::READ_LIMIT): never a partial list.
pub(crate) async fn entries(
    kv: &kv::Store,
    prefix: &str,
) -> Result<Vec<(String, Vec<u8>)>, StreamError> {
    use futures_util::StreamExt;
    const CONTEXT: &str = "listing the cluster's KV bucket";
    let mut keys = bounded(CONTEXT, kv.keys()).await?;
    let mut out = Vec::new();
    while let Some(key) = bounded(CONTEXT, async { Ok::<_, String>(keys.next().await) }).await? {
        let key = key.map_err(|e| nats(CONTEXT)(e.to_string()))?;
        if let Some(rest) = key.strip_prefix(prefix)
            && let Some(bytes) = bounded(CONTEXT, kv.get(&key)).await?
        {
            out.push((rest.to_owned(), bytes.to_vec()));
        }
    }
    Ok(out)
}
