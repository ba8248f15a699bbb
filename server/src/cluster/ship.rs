//! Shipped checkpoints (`docs/cluster.md`, "Shipped checkpoints and new nodes"): a partition's
//! owner copies its store's newest checkpoint files, the segments and the identity they need
//! into the JetStream object store bucket [`BUCKET`] under `p-<partition>/`, then writes the
//! round's manifest (`p-<partition>/MANIFEST`, the commit point of a ship); a node whose
//! partition store does not exist yet bootstraps it from the manifest's files and reads the
//! stream only after the shipped checkpoint.
//!
//! Guarantees: a manifest names only files uploaded whole in its round, from one state of the
//! store directory (a round in which a file changed, appeared or went is abandoned and tried
//! again), so a bootstrap opens a store as the owner's was at one checkpoint; segment files
//! are immutable and uploaded once; objects no manifest names are removed after the manifest
//! that stopped naming them. A bootstrap writes every file under a temporary name and renames
//! it, then syncs the directory, and refuses a manifest of another store id; recovery checks
//! every file as at any open (CRCs, owners). Only the owner ships, and only it trims its
//! partition's stream, below what it shipped and every live node's checkpoint (`trim_point`).

use super::lease::{Peer, now_ms};
use amberdb::{Store, StoreId};
use async_nats::jetstream::{self, object_store};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::io::AsyncReadExt;

/// The object store bucket of every partition's shipped checkpoints.
pub const BUCKET: &str = "amberdb_ckpt";
/// How often an owner looks for a checkpoint newer than the one it shipped last.
pub const SHIP_EVERY: Duration = Duration::from_secs(2);

/// How long an owner waits after a trim that failed before it tries again.
pub const TRIM_RETRY: Duration = Duration::from_secs(60);

/// What one ship holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// The partition's store id.
    pub store: String,
    /// The newest checkpoint's sequence number: the stream is read after it.
    pub seq: u64,
    /// The file names, each an object `p-<partition>/<name>`.
    pub files: Vec<String>,
}

fn object(partition: u32, name: &str) -> String {
    format!("p-{partition}/{name}")
}

/// The bucket, made if it is not there (`replicas` copies, file storage).
///
/// # Errors
/// JetStream's refusal.
pub async fn bucket(
    js: &jetstream::Context,
    replicas: usize,
) -> anyhow::Result<object_store::ObjectStore> {
    if let Ok(b) = js.get_object_store(BUCKET).await {
        return Ok(b);
    }
    js.create_object_store(object_store::Config {
        bucket: BUCKET.into(),
        description: Some("amberdb: every partition's shipped checkpoints".into()),
        num_replicas: replicas,
        ..Default::default()
    })
    .await
    .map_err(|e| anyhow::anyhow!("creating the object store bucket {BUCKET}: {e}"))
}

/// How long reading a manifest waits out a bucket without a leader (just made, or electing
/// one: JetStream answers "no responders" or times out meanwhile).
const LEADERLESS_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// The partition's last manifest, if any.
///
/// # Errors
/// JetStream's refusal (after `LEADERLESS_WAIT` of a bucket without a leader) or a
/// manifest that does not decode.
pub async fn manifest(
    bucket: &object_store::ObjectStore,
    partition: u32,
) -> anyhow::Result<Option<Manifest>> {
    let deadline = tokio::time::Instant::now() + LEADERLESS_WAIT;
    let mut read = loop {
        match bucket.get(object(partition, "MANIFEST")).await {
            Ok(read) => break read,
            Err(e) if e.kind() == object_store::GetErrorKind::NotFound => return Ok(None),
            // Found by scripts/cluster: a node that started just after `cluster init` made
            // the R3 bucket met it before its stream had a leader, and refused to start.
            Err(e)
                if tokio::time::Instant::now() < deadline
                    && (e.kind() == object_store::GetErrorKind::TimedOut
                        || e.to_string().contains("no responders")) =>
            {
                tokio::time::sleep(std::time::Duration::from_millis(250)).await;
            }
            Err(e) => anyhow::bail!("reading partition {partition}'s manifest: {e}"),
        }
    };
    let mut bytes = Vec::new();
    read.read_to_end(&mut bytes).await?;
    Ok(Some(serde_json::from_slice(&bytes)?))
}

/// Ships the store in `dir` of partition `partition` (module doc), unless its newest
/// checkpoint is `shipped` already. Returns the checkpoint shipped, if any.
///
/// # Errors
/// A file that changed or went during the round (nothing is committed: try again), or
/// JetStream's refusal.
pub async fn ship(
    bucket: &object_store::ObjectStore,
    partition: u32,
    store: StoreId,
    dir: &Path,
    shipped: u64,
) -> anyhow::Result<Option<u64>> {
    let Some(round) = amberdb::cluster::shippable_files(dir)? else {
        return Ok(None);
    };
    let seq = round.seq;
    if seq <= shipped {
        return Ok(None);
    }
    for (name, len) in &round.files {
        let key = object(partition, name);
        let immutable = amberdb::cluster::is_immutable(name);
        if immutable && bucket.info(&key).await.is_ok() {
            continue;
        }
        let mut file = tokio::fs::File::open(dir.join(name)).await?;
        let mut limited = (&mut file).take(*len);
        bucket
            .put(key.as_str(), &mut limited)
            .await
            .map_err(|e| anyhow::anyhow!("uploading {key}: {e}"))?;
    }
    // One state of the directory: the round is committed only if nothing changed meanwhile.
    let after = amberdb::cluster::shippable_files(dir)?;
    anyhow::ensure!(
        after.as_ref() == Some(&round),
        "the store's files changed while they were shipped"
    );
    let manifest = Manifest {
        store: store.to_string(),
        seq,
        files: round.files.into_iter().map(|(n, _)| n).collect(),
    };
    let bytes = serde_json::to_vec(&manifest)?;
    bucket
        .put(
            object(partition, "MANIFEST").as_str(),
            &mut bytes.as_slice(),
        )
        .await
        .map_err(|e| anyhow::anyhow!("writing partition {partition}'s manifest: {e}"))?;
    remove_unnamed(bucket, partition, &manifest).await;
    Ok(Some(seq))
}

/// Removes the partition's objects the manifest does not name (a failure is left for the next
/// ship).
async fn remove_unnamed(bucket: &object_store::ObjectStore, partition: u32, m: &Manifest) {
    use futures_util::StreamExt;
    let prefix = object(partition, "");
    let Ok(mut list) = bucket.list().await else {
        return;
    };
    let mut gone = Vec::new();
    while let Some(Ok(info)) = list.next().await {
        if let Some(name) = info.name.strip_prefix(&prefix)
            && name != "MANIFEST"
            && !m.files.iter().any(|f| f == name)
        {
            gone.push(info.name.clone());
        }
    }
    for name in gone {
        let _ = bucket.delete(&name).await;
    }
}

/// Makes the store of partition `partition` in `dir`, which holds no store yet, from the last
/// manifest. Returns the checkpoint it holds, or `None` when nothing was shipped.
///
/// # Errors
/// A manifest of another store, an object missing or cut short (a ship removed it meanwhile:
/// open again), or a write that failed (what was written is removed).
pub async fn bootstrap(
    bucket: &object_store::ObjectStore,
    partition: u32,
    store: StoreId,
    dir: &Path,
) -> anyhow::Result<Option<u64>> {
    let Some(m) = manifest(bucket, partition).await? else {
        return Ok(None);
    };
    anyhow::ensure!(
        m.store == store.to_string(),
        "partition {partition}'s shipped checkpoint is of store {}, not {store}: another cluster's bucket",
        m.store
    );
    tokio::fs::create_dir_all(dir).await?;
    let mut written: Vec<PathBuf> = Vec::new();
    let fetched = fetch_all(bucket, partition, dir, &m, &mut written).await;
    if let Err(e) = fetched {
        for path in written {
            let _ = tokio::fs::remove_file(path).await;
        }
        return Err(e);
    }
    let dir = dir.to_path_buf();
    tokio::task::spawn_blocking(move || std::fs::File::open(&dir)?.sync_all()).await??;
    Ok(Some(m.seq))
}

async fn fetch_all(
    bucket: &object_store::ObjectStore,
    partition: u32,
    dir: &Path,
    m: &Manifest,
    written: &mut Vec<PathBuf>,
) -> anyhow::Result<()> {
    for name in &m.files {
        anyhow::ensure!(
            !name.contains('/') && !name.starts_with('.'),
            "a manifest naming {name:?}, which is no store file"
        );
        let key = object(partition, name);
        let mut read = bucket
            .get(&key)
            .await
            .map_err(|e| anyhow::anyhow!("fetching {key}: {e}"))?;
        let tmp = dir.join(format!("{name}.tmp"));
        written.push(tmp.clone());
        let mut file = tokio::fs::File::create(&tmp).await?;
        tokio::io::copy(&mut read, &mut file).await?;
        file.sync_all().await?;
        let path = dir.join(name);
        tokio::fs::rename(&tmp, &path).await?;
        written.push(path);
    }
    Ok(())
}

/// Where the stream of partition `p` may be trimmed once checkpoint `shipped` is shipped: below
/// the oldest checkpoint any live node holds of it, and never above `shipped` (a node without
/// the partition's store open, or one that registered no checkpoint, holds it back: `None`).
/// A node whose registration lapsed is not waited for: back, it finds the stream trimmed past
/// its store and starts again from the shipped checkpoint (`docs/cluster.md`, "Trimmed
/// streams").
#[must_use]
pub fn trim_point(
    shipped: u64,
    p: u32,
    me: &str,
    peers: &BTreeMap<String, Peer>,
    now_ms: u64,
) -> Option<u64> {
    let live = peers
        .iter()
        .filter(|(name, peer)| peer.expires_ms > now_ms || *name == me);
    let mut floor = shipped;
    let mut any = false;
    for (_, peer) in live {
        floor = floor.min(peer.checkpoints.get(p as usize).copied().flatten()?);
        any = true;
    }
    (any && floor > 0).then_some(floor)
}

/// An owner's shipper: every [`SHIP_EVERY`], checkpoints `store` when the stream begins past
/// its newest checkpoint, ships it once it has a newer checkpoint than the last shipped, then
/// trims the partition's stream below [`trim_point`] (`peers`
/// gives the nodes' registrations, `me` this node's name); runs until aborted (the owner stops
/// owning).
pub async fn keep_shipping(
    bucket: object_store::ObjectStore,
    stream: async_nats::jetstream::stream::Stream,
    (partition, store_id): (u32, StoreId),
    (dir, store): (PathBuf, Store),
    (me, peers): (String, impl Fn() -> BTreeMap<String, Peer> + Send + 'static),
) {
    let mut shipped = 0;
    // A trim that failed (a stream made with deny_purge refuses every one) waits a minute.
    let mut retry_at = std::time::Instant::now();
    loop {
        tokio::time::sleep(SHIP_EVERY).await;
        // One read of where the stream begins serves the round.
        let first = super::stream::first_position(&stream).await;
        // A stream that begins past the store's newest checkpoint lost its first messages (a
        // leader's damaged snapshot; our own trims stay below every live node's checkpoint),
        // and a node that needs a store made from the shipped checkpoint cannot follow it.
        // The owner holds that history: it checkpoints now, and the checkpoint is shipped
        // below (docs/cluster.md, "When the stream loses what it acknowledged").
        if let Ok(first) = first
            && store.stats().checkpoint_seq + 1 < first
        {
            let at = store.clone();
            match tokio::task::spawn_blocking(move || at.checkpoint().map_err(|e| e.to_string()))
                .await
                .unwrap_or_else(|e| Err(e.to_string()))
            {
                Ok(()) => tracing::warn!(
                    partition,
                    first,
                    "the stream begins past the newest checkpoint: checkpointed to ship it"
                ),
                Err(e) => {
                    tracing::warn!(partition, error = %e, "checkpointing for a stream that begins past it")
                }
            }
        }
        if store.stats().checkpoint_seq > shipped {
            match ship(&bucket, partition, store_id, &dir, shipped).await {
                Ok(Some(seq)) => {
                    tracing::info!(partition, seq, "shipped a checkpoint");
                    shipped = seq;
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(partition, error = %e, "shipping a checkpoint; trying again");
                }
            }
        }
        let Some(point) = trim_point(shipped, partition, &me, &peers(), now_ms()) else {
            continue;
        };
        let first = first.unwrap_or(u64::MAX);
        if point + 1 > first && std::time::Instant::now() >= retry_at {
            match super::stream::trim(&stream, point + 1).await {
                Ok(n) => tracing::info!(
                    partition,
                    below = point + 1,
                    messages = n,
                    "trimmed the stream"
                ),
                Err(e) => {
                    retry_at = std::time::Instant::now() + TRIM_RETRY;
                    tracing::warn!(partition, error = %e, "trimming the stream; trying again in a minute");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(live: bool, checkpoint: Option<u64>) -> Peer {
        Peer {
            address: String::new(),
            http: None,
            expires_ms: if live { u64::MAX } else { 0 },
            positions: Vec::new(),
            running_crcs: Vec::new(),
            checkpoints: vec![None, checkpoint],
            acknowledged: Vec::new(),
            formats: super::super::lease::Formats::THIS_BUILD,
        }
    }

    #[test]
    fn a_stream_is_trimmed_below_every_live_nodes_checkpoint_and_the_shipped_one() {
        let mut peers: BTreeMap<String, Peer> = [
            ("a".to_owned(), peer(true, Some(40))),
            ("b".to_owned(), peer(true, Some(25))),
            ("c".to_owned(), peer(false, Some(3))),
        ]
        .into();
        assert_eq!(
            trim_point(30, 1, "a", &peers, 1),
            Some(25),
            "b's checkpoint"
        );
        assert_eq!(
            trim_point(20, 1, "a", &peers, 1),
            Some(20),
            "never above the shipped one"
        );
        assert_eq!(trim_point(0, 1, "a", &peers, 1), None, "nothing shipped");
        assert_eq!(
            trim_point(30, 0, "a", &peers, 1),
            None,
            "no checkpoint registered"
        );
        peers.insert("b".into(), peer(true, None));
        assert_eq!(
            trim_point(30, 1, "a", &peers, 1),
            None,
            "b's store not open"
        );
        peers.clear();
        assert_eq!(
            trim_point(30, 1, "a", &peers, 1),
            None,
            "no registrations read"
        );
    }
}
