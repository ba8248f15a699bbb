//! A cluster's settings in the JetStream KV bucket `amberdb_cluster` (`docs/cluster.md`,
//! "Partitions, ids and stores"): the partition count, the embedder, the replica count, and
//! every partition's store id, fixed by `amberdb cluster init`; and the commands that read or
//! change the cluster's state in it, `amberdb cluster status` and `amberdb cluster move` (which
//! pins a partition to a node, `placement`).
//!
//! Guarantees: `init` writes the settings once (a KV create, which fails if the key exists),
//! so two racing inits agree on one set; an init that asks for other settings than those
//! there is refused naming the field, and changes nothing; a node whose embedder differs from
//! the settings' is refused the same way (`Settings::check`). Every partition's stream exists
//! when `init` returns.

use super::stream::{StreamError, ensure_stream, stream_name};
use amberdb::StoreId;
use amberdb::cluster::MAX_PARTITIONS;
use async_nats::jetstream::{self, kv};
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// The KV bucket of a cluster's settings (and, next, its leases).
pub const BUCKET: &str = "amberdb_cluster";
/// The key of the settings in it.
pub const SETTINGS_KEY: &str = "settings";
/// Partitions when `cluster init` is not told: the smallest power of two that spreads a
/// three-node cluster's ownership to within one partition of even and moves a sixth of the
/// load when a node dies (docs/cluster.md).
pub const DEFAULT_PARTITIONS: u32 = 16;
/// Copies of every stream (and of the bucket) when not told: JetStream's R3.
pub const DEFAULT_REPLICAS: usize = 3;

/// What `cluster init` fixes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settings {
    /// The settings' own format version (1).
    pub version: u32,
    /// Partitions, 1..=8,192.
    pub partitions: u32,
    /// The embedder every partition store is made with.
    pub model_id: String,
    /// Its dimension.
    pub dim: u32,
    /// Copies of every stream, 1..=5.
    pub replicas: usize,
    /// Partition `p`'s store id, at index `p` (32 hexadecimal digits each).
    pub stores: Vec<String>,
}

/// Why settings are refused.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// A value out of its range.
    #[error("invalid {field}: {reason}")]
    Invalid {
        /// The field.
        field: &'static str,
        /// What is allowed.
        reason: String,
    },
    /// The cluster was initialised with another value.
    #[error(
        "the cluster's {field} is {held}, not {asked}: it is fixed at `amberdb cluster init` (docs/cluster.md)"
    )]
    Differs {
        /// The field.
        field: &'static str,
        /// What the cluster holds.
        held: String,
        /// What was asked.
        asked: String,
    },
    /// No cluster settings in the bucket.
    #[error("no cluster settings at {0}: run `amberdb cluster init` first")]
    Missing(String),
    /// The settings in the bucket do not decode.
    #[error("the cluster settings do not decode: {0}")]
    Damaged(String),
    /// JetStream failed a request.
    #[error(transparent)]
    Stream(#[from] StreamError),
}

fn nats(context: &'static str) -> impl FnOnce(String) -> SettingsError {
    move |reason| SettingsError::Stream(StreamError::Nats { context, reason })
}

impl Settings {
    /// New settings with a new store id for every partition.
    ///
    /// # Errors
    /// `Invalid` for partitions outside 1..=8,192 or replicas outside 1..=5; `Damaged` if the
    /// OS has no random bytes.
    pub fn new(
        partitions: u32,
        model_id: &str,
        dim: u32,
        replicas: usize,
    ) -> Result<Settings, SettingsError> {
        if !(1..=MAX_PARTITIONS).contains(&partitions) {
            return Err(SettingsError::Invalid {
                field: "partitions",
                reason: format!(
                    "1 to {MAX_PARTITIONS} (every id stays below 2^53), not {partitions}"
                ),
            });
        }
        if !(1..=5).contains(&replicas) {
            return Err(SettingsError::Invalid {
                field: "replicas",
                reason: format!("1 to 5 (JetStream's stream replicas), not {replicas}"),
            });
        }
        let stores = (0..partitions)
            .map(|_| StoreId::random().map(|s| s.to_string()))
            .collect::<std::io::Result<Vec<_>>>()
            .map_err(|e| SettingsError::Damaged(e.to_string()))?;
        Ok(Settings {
            version: 1,
            partitions,
            model_id: model_id.to_owned(),
            dim,
            replicas,
            stores,
        })
    }

    /// Partition `p`'s store id.
    ///
    /// # Errors
    /// `Invalid` for a partition the cluster does not have, `Damaged` for a bad id.
    pub fn store(&self, partition: u32) -> Result<StoreId, SettingsError> {
        let id = self
            .stores
            .get(partition as usize)
            .ok_or_else(|| SettingsError::Invalid {
                field: "partition",
                reason: format!("the cluster has {} partitions", self.partitions),
            })?;
        id.parse().map_err(SettingsError::Damaged)
    }

    /// Whether a node (or an init) with `wanted`'s partitions, embedder and replicas may join.
    ///
    /// # Errors
    /// `Differs`, naming the first field that differs.
    pub fn check(&self, wanted: &Settings) -> Result<(), SettingsError> {
        let differs =
            |field, held: String, asked: String| Err(SettingsError::Differs { field, held, asked });
        if self.partitions != wanted.partitions {
            return differs(
                "partitions",
                self.partitions.to_string(),
                wanted.partitions.to_string(),
            );
        }
        if (self.model_id.as_str(), self.dim) != (wanted.model_id.as_str(), wanted.dim) {
            return differs(
                "embedder",
                format!("{} ({}-d)", self.model_id, self.dim),
                format!("{} ({}-d)", wanted.model_id, wanted.dim),
            );
        }
        if self.replicas != wanted.replicas {
            return differs(
                "replicas",
                self.replicas.to_string(),
                wanted.replicas.to_string(),
            );
        }
        Ok(())
    }
}

async fn bucket(js: &jetstream::Context, replicas: usize) -> Result<kv::Store, SettingsError> {
    if let Ok(store) = js.get_key_value(BUCKET).await {
        return Ok(store);
    }
    js.create_key_value(kv::Config {
        bucket: BUCKET.to_owned(),
        history: 1,
        storage: jetstream::stream::StorageType::File,
        num_replicas: replicas,
        ..Default::default()
    })
    .await
    .map_err(|e| nats("creating the cluster's KV bucket")(e.to_string()))
}

/// Initialises the cluster with `wanted` (or finds it initialised with the same partitions,
/// embedder and replicas), and creates every partition's stream. Returns the settings held
/// and whether this call wrote them.
///
/// # Errors
/// `Differs` if the cluster holds other settings (nothing changed); JetStream's refusal.
pub async fn init(
    js: &jetstream::Context,
    wanted: &Settings,
) -> Result<(Settings, bool), SettingsError> {
    let kv = bucket(js, wanted.replicas).await?;
    let encoded = serde_json::to_vec(wanted).map_err(|e| SettingsError::Damaged(e.to_string()))?;
    let created = match kv.create(SETTINGS_KEY, encoded.into()).await {
        Ok(_) => true,
        Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => false,
        Err(e) => return Err(nats("writing the cluster settings")(e.to_string())),
    };
    let held = load(js).await?;
    held.check(wanted)?;
    for p in 0..held.partitions {
        ensure_stream(js, p, held.replicas).await?;
    }
    Ok((held, created))
}

/// The cluster's settings.
///
/// # Errors
/// `Missing` before `cluster init`; `Damaged`; JetStream's refusal.
pub async fn load(js: &jetstream::Context) -> Result<Settings, SettingsError> {
    let kv = js
        .get_key_value(BUCKET)
        .await
        .map_err(|_| SettingsError::Missing(format!("the KV bucket {BUCKET}")))?;
    let bytes = kv
        .get(SETTINGS_KEY)
        .await
        .map_err(|e| nats("reading the cluster settings")(e.to_string()))?
        .ok_or_else(|| SettingsError::Missing(format!("{BUCKET}/{SETTINGS_KEY}")))?;
    let settings: Settings =
        serde_json::from_slice(&bytes).map_err(|e| SettingsError::Damaged(e.to_string()))?;
    if settings.version != 1 || settings.stores.len() != settings.partitions as usize {
        return Err(SettingsError::Damaged(format!(
            "version {} with {} store ids for {} partitions",
            settings.version,
            settings.stores.len(),
            settings.partitions
        )));
    }
    Ok(settings)
}

/// `amberdb cluster status`: the settings, then one line per partition (its store id, its
/// stream's messages, bytes and last position, and its lease: owner, epoch, time left).
///
/// # Errors
/// As `load`; JetStream's refusal.
pub async fn status(js: &jetstream::Context) -> Result<String, SettingsError> {
    let settings = load(js).await?;
    let mut out = format!(
        "partitions: {}\nembedder: {} ({}-d)\nreplicas: {}\n",
        settings.partitions, settings.model_id, settings.dim, settings.replicas
    );
    let kv = js
        .get_key_value(BUCKET)
        .await
        .map_err(|e| nats("opening the cluster's KV bucket")(e.to_string()))?;
    let peers = super::lease::registered(&kv)
        .await
        .map_err(|e| nats("reading the nodes' registrations")(e.to_string()))?;
    let pins = super::placement::pins(&kv)
        .await
        .map_err(|e| nats("reading the partitions' pins")(e.to_string()))?;
    let shipped = js.get_object_store(super::ship::BUCKET).await.ok();
    for p in 0..settings.partitions {
        let mut lease = match super::lease::read(&kv, p).await? {
            None => "owner: none".to_owned(),
            Some((l, _)) => {
                let left = i128::from(l.expires_ms) - i128::from(super::lease::now_ms());
                match &l.handoff {
                    _ if left > 0 => {
                        format!("owner: {} epoch {} ({} ms left)", l.node, l.epoch, left)
                    }
                    Some(to) => format!("owner: {} epoch {} (handed to {to})", l.node, l.epoch),
                    None => format!("owner: {} epoch {} (lapsed)", l.node, l.epoch),
                }
            }
        };
        if let Some(to) = pins.get(&p) {
            lease.push_str(&format!(", pinned to {to}"));
        }
        if let Some(bucket) = &shipped
            && let Ok(Some(m)) = super::ship::manifest(bucket, p).await
        {
            lease.push_str(&format!("; shipped checkpoint {}", m.seq));
        }
        let name = stream_name(p);
        let (line, last) = match js.get_stream(&name).await {
            Ok(stream) => match stream.get_info().await {
                Ok(info) => (
                    format!(
                        "{} messages, {} bytes, first position {}, last position {}",
                        info.state.messages,
                        info.state.bytes,
                        info.state.first_sequence,
                        info.state.last_sequence
                    ),
                    Some(info.state.last_sequence),
                ),
                Err(e) => (format!("unreadable: {e}"), None),
            },
            Err(e) => (format!("missing: {e}"), None),
        };
        out.push_str(&format!(
            "partition {p}: store {}, stream {name}: {line}; {lease}; {}\n",
            settings.store(p)?,
            replicas(&peers, p, last)
        ));
    }
    Ok(out)
}

/// `amberdb cluster move`: pins partition `p` to node `to` (`None`: unpins it) and, for a pin,
/// waits at most `wait` until `to` owns it. Returns the report.
///
/// # Errors
/// A partition out of range, a node that never registered (naming those that did), JetStream's
/// refusal, or a move not done within `wait` (the pin stays: the owner hands over once `to`
/// is live with the partition's store open).
pub async fn move_partition(
    js: &async_nats::jetstream::Context,
    p: u32,
    to: Option<&str>,
    wait: Duration,
) -> anyhow::Result<String> {
    let settings = load(js).await?;
    anyhow::ensure!(
        p < settings.partitions,
        "partition {p}: the cluster has partitions 0 to {}",
        settings.partitions - 1
    );
    let kv = js
        .get_key_value(BUCKET)
        .await
        .map_err(|e| anyhow::anyhow!("opening the cluster's KV bucket: {e}"))?;
    let Some(to) = to else {
        kv.delete(super::placement::pin_key(p))
            .await
            .map_err(|e| anyhow::anyhow!("unpinning partition {p}: {e}"))?;
        return Ok(format!(
            "partition {p} unpinned: it belongs to the p mod n-th live node again, which its owner hands it to\n"
        ));
    };
    super::lease::check_name(to)?;
    let peers = super::lease::registered(&kv).await?;
    anyhow::ensure!(
        peers.contains_key(to),
        "no node {to:?} ever registered in this cluster (registered: {})",
        peers.keys().cloned().collect::<Vec<_>>().join(", ")
    );
    kv.put(
        super::placement::pin_key(p),
        to.to_owned().into_bytes().into(),
    )
    .await
    .map_err(|e| anyhow::anyhow!("pinning partition {p}: {e}"))?;
    let deadline = Instant::now() + wait;
    loop {
        if let Some((lease, _)) = super::lease::read(&kv, p).await?
            && lease.node == to
            && lease.expires_ms > super::lease::now_ms()
        {
            return Ok(format!(
                "partition {p} pinned to {to}, which owns it at epoch {}\n",
                lease.epoch
            ));
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "partition {p} is pinned to {to}, which does not own it after {} s: its owner hands it over once {to} is live with the partition's store open (amberdb cluster status)",
            wait.as_secs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `replicas: n0 at 12 crc 0a1b2c3d (lag 0), n1 at 9 (lag 3, gone)`: where each registered
/// node's store of partition `p` is, as of its last registration, behind the stream's last
/// position, with its running CRC there; replicas at one position with different CRCs are
/// named (`docs/cluster.md`, "Running CRC").
fn replicas(
    peers: &std::collections::BTreeMap<String, super::lease::Peer>,
    p: u32,
    last: Option<u64>,
) -> String {
    if peers.is_empty() {
        return "replicas: no node registered".into();
    }
    let now = super::lease::now_ms();
    let at = |peer: &super::lease::Peer| peer.positions.get(p as usize).copied().flatten();
    let crc = |peer: &super::lease::Peer| peer.running_crcs.get(p as usize).copied().flatten();
    let mut seen = std::collections::BTreeMap::new();
    let mut differ = std::collections::BTreeSet::new();
    for peer in peers.values() {
        if let (Some(at), Some(crc)) = (at(peer), crc(peer))
            && *seen.entry(at).or_insert(crc) != crc
        {
            differ.insert(at);
        }
    }
    let each: Vec<String> = peers
        .iter()
        .map(|(name, peer)| {
            let gone = if peer.expires_ms > now { "" } else { ", gone" };
            let Some(at) = at(peer) else {
                return format!("{name} (no position{gone})");
            };
            let crc = crc(peer).map_or(String::new(), |c| format!(" crc {c:08x}"));
            let lag = last.map_or(String::new(), |last| {
                format!("lag {}", last.saturating_sub(at))
            });
            let differs = if differ.contains(&at) {
                ", HISTORIES DIFFER"
            } else {
                ""
            };
            let notes = [
                lag.as_str(),
                gone.trim_start_matches(", "),
                differs.trim_start_matches(", "),
            ]
            .into_iter()
            .filter(|n| !n.is_empty())
            .collect::<Vec<_>>()
            .join(", ");
            if notes.is_empty() {
                format!("{name} at {at}{crc}")
            } else {
                format!("{name} at {at}{crc} ({notes})")
            }
        })
        .collect();
    format!("replicas: {}", each.join(", "))
}

/// The address of every registered node: the seeds a command's client of the cluster
/// connects to.
///
/// # Errors
/// The KV bucket cannot be read, or no node is registered (`needs` says what wanted one).
pub async fn seeds(
    js: &async_nats::jetstream::Context,
    needs: &str,
) -> anyhow::Result<Vec<String>> {
    let kv = js
        .get_key_value(BUCKET)
        .await
        .map_err(|e| anyhow::anyhow!("the KV bucket {}: {e}", BUCKET))?;
    let seeds: Vec<String> = super::lease::registered(&kv)
        .await?
        .into_values()
        .map(|peer| peer.address)
        .collect();
    anyhow::ensure!(
        !seeds.is_empty(),
        "no node is registered in the cluster: {needs}"
    );
    Ok(seeds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_refuse_out_of_range_values_and_name_the_field_that_differs() {
        assert!(Settings::new(0, "m", 8, 1).is_err());
        assert!(Settings::new(MAX_PARTITIONS + 1, "m", 8, 1).is_err());
        assert!(Settings::new(4, "m", 8, 6).is_err());
        let a = Settings::new(4, "m", 8, 1).unwrap();
        assert_eq!(a.stores.len(), 4);
        let ids: std::collections::BTreeSet<_> = a.stores.iter().collect();
        assert_eq!(ids.len(), 4, "a store id per partition");
        a.store(3).unwrap();
        assert!(a.store(4).is_err());
        a.check(&Settings::new(4, "m", 8, 1).unwrap())
            .expect("same settings, other ids");
        for (other, field) in [
            (Settings::new(8, "m", 8, 1).unwrap(), "partitions"),
            (Settings::new(4, "n", 8, 1).unwrap(), "embedder"),
            (Settings::new(4, "m", 16, 1).unwrap(), "embedder"),
            (Settings::new(4, "m", 8, 3).unwrap(), "replicas"),
        ] {
            let e = a.check(&other).unwrap_err();
            assert!(
                matches!(e, SettingsError::Differs { field: f, .. } if f == field),
                "{e}"
            );
        }
    }

    #[test]
    fn replicas_show_lag_and_crc_and_name_histories_that_differ() {
        let peer = |at: Option<u64>, crc: Option<u32>| super::super::lease::Peer {
            address: "127.0.0.1:1".into(),
            http: None,
            expires_ms: u64::MAX,
            positions: vec![None, at],
            running_crcs: vec![None, crc],
            checkpoints: Vec::new(),
            acknowledged: Vec::new(),
            formats: super::super::lease::Formats::THIS_BUILD,
        };
        let peers: std::collections::BTreeMap<String, _> = [
            ("a".to_owned(), peer(Some(12), Some(0xab))),
            ("b".to_owned(), peer(Some(12), Some(0xab))),
            ("c".to_owned(), peer(Some(9), None)),
        ]
        .into();
        assert_eq!(
            replicas(&peers, 1, Some(12)),
            "replicas: a at 12 crc 000000ab (lag 0), b at 12 crc 000000ab (lag 0), c at 9 (lag 3)"
        );
        let mut split = peers.clone();
        split.insert("b".into(), peer(Some(12), Some(0xcd)));
        let line = replicas(&split, 1, Some(12));
        assert!(
            line.contains("a at 12 crc 000000ab (lag 0, HISTORIES DIFFER)")
                && line.contains("b at 12 crc 000000cd (lag 0, HISTORIES DIFFER)")
                && line.ends_with("c at 9 (lag 3)"),
            "{line}"
        );
        assert_eq!(
            replicas(&peers, 0, None),
            "replicas: a (no position), b (no position), c (no position)"
        );
    }
}
