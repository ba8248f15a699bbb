//! A cluster node (`amberdb serve --cluster`; `docs/cluster.md`, "The node"): one store per
//! partition under `<data>/p-<partition>`, made with the store id the settings give it, and
//! one task per partition that keeps it a standby (tailing the stream) or its owner (the lease
//! renewed, writes published), and reopens it as a standby when it is poisoned or loses the
//! lease. The node registers its addresses in the KV bucket (`node.<name>`), so a write sent to
//! a node that does not own its partition is answered `moved` with the owner's address.
//!
//! Guarantees: a node serves a partition's writes only while its own claim is the last that
//! counted and its lease lives (the lease says who should try; the log decides who may write,
//! `lease.rs`); a store that is poisoned (a publish the stream did not hold) is closed and
//! reopened from its checkpoint and the stream before it serves again, so it never answers from
//! a state the stream does not hold; reads go to whatever store is open, and wait for the
//! `min_seq` they ask for.

use super::directory::Directory;
use super::lease::{self, LEASE, Lease, Partition, Peer, RENEW_EVERY, now_ms, register};
use super::settings::{self, Settings};
use super::stream::{StreamError, existing_stream, follow, stream_name};
use crate::args::{Code, Fail};
use crate::route::{self, Partitions};
use amberdb::{Store, StoreOptions};
use async_nats::jetstream::{self, kv};
use parking_lot::{Mutex, RwLock};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often a partition's task looks at its lease and its store.
pub const TICK: Duration = Duration::from_millis(250);
/// How long a starting node waits before it takes a free partition: two registrations of every
/// node started with it.
pub const SETTLE: Duration = Duration::from_secs(2);

/// What a node needs to join its cluster.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// A NATS server of the cluster (`nats://host:port`; several, comma-separated).
    pub nats: String,
    /// This node's name, unique in the cluster (letters, digits, `-`, `_`; 1 to 64).
    pub name: String,
    /// Where its partition stores live.
    pub data_dir: PathBuf,
}

/// A partition's role on this node.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Role {
    Opening,
    Standby,
    Owner { epoch: u64 },
    Halted(String),
}

struct Part {
    partition: u32,
    store: RwLock<Option<Store>>,
    role: Mutex<Role>,
    /// The lease as last read: who owns it, at which epoch, until when.
    lease: Mutex<Option<Lease>>,
    /// The shipped checkpoint this node's store was made from, if it was (`ship::bootstrap`).
    bootstrapped: Mutex<Option<u64>>,
    /// The position the last store this node closed for the partition had applied: a store
    /// opened again starts from its checkpoint, behind it, and serves no read until it is
    /// back there, so reads on one node never go back in time (`docs/cluster.md`, "Replicas,
    /// reads and the client").
    read_floor: std::sync::atomic::AtomicU64,
    /// Why this node's last attempt to take the partition failed, until one succeeds or is
    /// declined (another node holds the lease): shown in STATS and in a refused write.
    not_taken: Mutex<Option<String>>,
    /// The highest position JetStream acknowledged to this node's publishers for the
    /// partition since the node started (read when an ownership ends): a claim by this node,
    /// and by any node that reads its registration, waits for a stream that holds it.
    acknowledged: std::sync::atomic::AtomicU64,
    /// The last store this node set aside for the partition (its directory now), and why:
    /// shown in STATS.
    set_aside: Mutex<Option<String>>,
    /// The claim position of the last divergence this node set a store aside for: a store made
    /// again that diverges there again is halted, not set aside in a loop.
    diverged_at: Mutex<Option<u64>>,
}

/// A running node: its partition stores and the tasks that keep them.
pub struct Node {
    name: String,
    settings: Settings,
    parts: Vec<Arc<Part>>,
    /// Every node's registration and the partitions `amberdb cluster move` pinned
    /// (`placement`), kept by one watch of the KV bucket.
    directory: Arc<Directory>,
    stop: tokio::sync::watch::Sender<bool>,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl Node {
    /// Joins the cluster: loads its settings (refusing an embedder other than `options`'),
    /// registers `peer` under this node's name, and starts a task per partition on `runtime`.
    ///
    /// # Errors
    /// NATS unreachable, the cluster not initialised, settings that differ, a bad name.
    pub async fn start(
        config: &NodeConfig,
        options: &StoreOptions,
        peer: Peer,
    ) -> anyhow::Result<Arc<Node>> {
        lease::check_name(&config.name)?;
        let js = jetstream::new(super::connect_nats(&config.nats).await?);
        let settings = settings::load(&js).await?;
        let dim = u32::try_from(options.embedder.dim())?;
        let model = options.embedder.model_id();
        anyhow::ensure!(
            (settings.model_id.as_str(), settings.dim) == (model, dim),
            "the cluster's embedder is {} ({}-d), not {model} ({dim}-d): start the node with the cluster's (docs/cluster.md)",
            settings.model_id,
            settings.dim
        );
        let kv = js
            .get_key_value(settings::BUCKET)
            .await
            .map_err(|e| anyhow::anyhow!("the cluster's KV bucket: {e}"))?;
        let mut peer = peer;
        peer.expires_ms = now_ms() + millis(LEASE);
        register(&kv, &config.name, &peer).await?;
        let (stop, _) = tokio::sync::watch::channel(false);
        let parts = (0..settings.partitions)
            .map(|partition| {
                Arc::new(Part {
                    partition,
                    store: RwLock::new(None),
                    role: Mutex::new(Role::Opening),
                    lease: Mutex::new(None),
                    bootstrapped: Mutex::new(None),
                    read_floor: std::sync::atomic::AtomicU64::new(0),
                    not_taken: Mutex::new(None),
                    acknowledged: std::sync::atomic::AtomicU64::new(0),
                    set_aside: Mutex::new(None),
                    diverged_at: Mutex::new(None),
                })
            })
            .collect();
        let node = Arc::new(Node {
            name: config.name.clone(),
            settings,
            parts,
            directory: Arc::new(Directory::default()),
            stop,
            tasks: Mutex::new(Vec::new()),
        });
        let mut tasks = vec![tokio::spawn({
            let (directory, kv, stop) = (
                Arc::clone(&node.directory),
                kv.clone(),
                node.stop.subscribe(),
            );
            async move { directory.keep(kv, stop).await }
        })];
        node.directory.wait_whole(SETTLE).await;
        let shipped = super::ship::bucket(&js, node.settings.replicas).await?;
        let mut runs = Vec::new();
        for part in &node.parts {
            let run = PartitionRun {
                node: Arc::clone(&node),
                part: Arc::clone(part),
                js: js.clone(),
                kv: kv.clone(),
                shipped: shipped.clone(),
                dir: config.data_dir.join(format!("p-{}", part.partition)),
                options: options.clone(),
            };
            // Every store is open before the node serves: a request never finds one opening
            // except after a reopen.
            let store = run
                .open()
                .await
                .map_err(|e| anyhow::anyhow!("opening partition {}: {e:#}", part.partition))?;
            *part.store.write() = Some(store.clone());
            runs.push((run, store));
        }
        tasks.push(tokio::spawn(Arc::clone(&node).heartbeat(kv.clone(), peer)));
        for (run, store) in runs {
            tasks.push(tokio::spawn(run.run(store)));
        }
        *node.tasks.lock() = tasks;
        Ok(node)
    }

    /// Stops every task: owners release their leases (so another node takes over at once),
    /// every store is flushed, checkpointed and closed.
    pub async fn shut_down(&self) {
        let _ = self.stop.send(true);
        let tasks = std::mem::take(&mut *self.tasks.lock());
        for t in tasks {
            let _ = t.await;
        }
    }

    /// Re-registers this node every `RENEW_EVERY`.
    async fn heartbeat(self: Arc<Node>, kv: kv::Store, mut peer: Peer) {
        let mut stop = self.stop.subscribe();
        loop {
            tokio::select! {
                () = tokio::time::sleep(RENEW_EVERY) => {}
                _ = stop.changed() => {
                    // Gone at once: no partition prefers a stopped node.
                    peer.expires_ms = 0;
                    let _ = register(&kv, &self.name, &peer).await;
                    return;
                }
            }
            peer.expires_ms = now_ms() + millis(LEASE);
            // Where each partition store is, for `cluster status`'s replica lag.
            // A halted partition has no position to offer: nothing hands it over to this node.
            let logs: Vec<_> = (self.parts.iter())
                .map(|p| {
                    let halted = matches!(*p.role.lock(), Role::Halted(_));
                    let store = p.store.read();
                    store.as_ref().filter(|_| !halted).map(Store::partition_log)
                })
                .collect();
            peer.positions = logs
                .iter()
                .map(|l| l.as_ref().map(|l| l.position))
                .collect();
            peer.running_crcs = logs.iter().map(|l| l.as_ref()?.running_crc).collect();
            peer.acknowledged = (self.parts.iter())
                .map(|p| {
                    let at = p.acknowledged.load(std::sync::atomic::Ordering::Acquire);
                    (at > 0).then_some(at)
                })
                .collect();
            peer.checkpoints = (self.parts.iter())
                .map(|p| {
                    let halted = matches!(*p.role.lock(), Role::Halted(_));
                    let store = p.store.read();
                    store
                        .as_ref()
                        .filter(|_| !halted)
                        .map(|s| s.stats().checkpoint_seq)
                })
                .collect();
            if let Err(e) = register(&kv, &self.name, &peer).await {
                tracing::warn!(error = %e, "registering the node");
            }
        }
    }

    /// The node that should own partition `p` (`placement::preferred`).
    fn preferred(&self, p: u32) -> Option<String> {
        self.directory
            .with(|peers, pins| super::placement::preferred(p, &self.name, peers, pins, now_ms()))
    }

    /// The node this owner should hand partition `p` to now (`placement::Handoff`).
    fn handoff_due(&self, p: u32, watch: &mut super::placement::Handoff) -> Option<String> {
        self.directory
            .with(|peers, pins| watch.due(p, &self.name, peers, pins, (Instant::now(), now_ms())))
    }

    fn moved(&self, p: u32, lease: &Lease) -> Fail {
        let peer = self
            .directory
            .with(|peers, _| peers.get(&lease.node).cloned());
        let mut f = Fail::new(
            Code::Moved,
            format!(
                "partition {p} is owned by node {} (epoch {}){}: send the request there",
                lease.node,
                lease.epoch,
                peer.as_ref()
                    .map_or(String::new(), |peer| format!(" at {}", peer.address))
            ),
        );
        f.body.insert("partition".into(), json!(p));
        f.body
            .insert("partitions".into(), json!(self.settings.partitions));
        f.body.insert("owner".into(), json!(lease.node));
        f.body.insert("epoch".into(), json!(lease.epoch));
        f.body.insert(
            "address".into(),
            json!(peer.as_ref().map(|p| p.address.clone())),
        );
        f.body
            .insert("http".into(), json!(peer.and_then(|p| p.http)));
        f
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn unavailable(p: u32, why: &str) -> Fail {
    let mut f = Fail::new(
        Code::Unavailable,
        format!("partition {p}: {why}; nothing ran: retry in a moment"),
    );
    f.body.insert("partition".into(), json!(p));
    f.body.insert("retry_after_ms".into(), json!(millis(TICK)));
    f
}

impl Partitions for Node {
    fn count(&self) -> u32 {
        self.settings.partitions
    }

    fn route(&self, p: u32, writes: bool, min_seq: Option<u64>) -> Result<Store, Fail> {
        let Some(part) = self.parts.get(p as usize) else {
            return Err(Fail::new(
                Code::NotFound,
                format!(
                    "no partition {p}: the cluster has {} (an id names its partition)",
                    self.settings.partitions
                ),
            ));
        };
        // A store being reopened (after a poisoning) is waited for, as `min_seq` is.
        let deadline = Instant::now() + route::MIN_SEQ_WAIT;
        let store = loop {
            if let Some(store) = part.store.read().clone() {
                break store;
            }
            // An open that failed says why at once (it is retried meanwhile).
            if let Role::Halted(why) = part.role.lock().clone() {
                return Err(unavailable(p, &format!("halted here: {why}")));
            }
            if Instant::now() >= deadline {
                return Err(unavailable(p, "its store is being reopened on this node"));
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        if writes {
            let role = part.role.lock().clone();
            match role {
                // Poisoned: reopening as a standby within a tick (`own`).
                Role::Owner { .. } if store.is_poisoned() => {
                    return Err(unavailable(
                        p,
                        "its owner here lost its stream and is reopening",
                    ));
                }
                Role::Owner { .. } => return Ok(store),
                Role::Halted(why) => return Err(unavailable(p, &format!("halted here: {why}"))),
                Role::Opening | Role::Standby => {}
            }
            let lease = part.lease.lock().clone();
            return match lease {
                Some(l) if l.expires_ms > now_ms() && l.node != self.name => Err(self.moved(p, &l)),
                _ => match part.not_taken.lock().clone() {
                    Some(why) => Err(unavailable(
                        p,
                        &format!("no node owns it right now; taking it here failed: {why}"),
                    )),
                    None => Err(unavailable(p, "no node owns it right now (a lease lapsed)")),
                },
            };
        }
        let floor = part.read_floor.load(std::sync::atomic::Ordering::Acquire);
        let min = min_seq.unwrap_or(0).max(floor);
        if min > 0 {
            route::reach(&store, p, min)?;
        }
        Ok(store)
    }

    fn status(&self) -> Value {
        let partitions: Vec<Value> = self
            .parts
            .iter()
            .map(|part| {
                let role = part.role.lock().clone();
                let lease = part.lease.lock().clone();
                let store = part.store.read().clone();
                let log = store.as_ref().map(Store::partition_log);
                json!({
                    "partition": part.partition,
                    "role": match &role {
                        Role::Opening => "opening",
                        Role::Standby => "standby",
                        Role::Owner { .. } => "owner",
                        Role::Halted(_) => "halted",
                    },
                    "halted": match &role { Role::Halted(why) => json!(why), _ => Value::Null },
                    "not_taken": part.not_taken.lock().clone(),
                    "epoch": log.as_ref().and_then(|l| l.claim.as_ref()).map(|c| c.epoch),
                    "owner": lease.as_ref().map(|l| l.node.clone()),
                    "position": log.as_ref().map(|l| l.position),
                    "running_crc": log.as_ref().and_then(|l| l.running_crc).map(|c| format!("{c:08x}")),
                    "memories": store.as_ref().map(|s| s.stats().memories),
                    "bootstrapped_from": *part.bootstrapped.lock(),
                    "set_aside": part.set_aside.lock().clone(),
                })
            })
            .collect();
        json!({
            "node": self.name,
            "partitions_count": self.settings.partitions,
            "owned": self.parts.iter().filter(|p| matches!(*p.role.lock(), Role::Owner { .. })).count(),
            "partitions": partitions,
        })
    }

    fn stop(&self) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(self.shut_down())
    }

    fn stores(&self) -> Vec<Store> {
        self.parts
            .iter()
            .filter_map(|p| p.store.read().clone())
            .collect()
    }
}

/// One partition's task.
struct PartitionRun {
    node: Arc<Node>,
    part: Arc<Part>,
    js: jetstream::Context,
    kv: kv::Store,
    /// The bucket of shipped checkpoints (`ship`).
    shipped: async_nats::jetstream::object_store::ObjectStore,
    dir: PathBuf,
    options: StoreOptions,
}

/// Why a partition's store is closed and opened again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reopen {
    Stop,
    Poisoned,
    LeaseLost,
    /// Handed to the partition's preferred node (`placement`).
    HandedOver,
    /// The stream was trimmed past the store's position: it starts again from the shipped
    /// checkpoint (`open`).
    Behind,
    /// The store's history is not the stream's (`StreamError::Diverged`, at the claim's
    /// position): it is set aside and made again from the shipped checkpoint and the stream.
    Diverged {
        at: u64,
    },
}

impl PartitionRun {
    fn set_role(&self, role: Role) {
        *self.part.role.lock() = role;
    }

    fn stopping(&self) -> bool {
        *self.node.stop.borrow()
    }

    async fn run(self, first: Store) {
        let p = self.part.partition;
        let started = now_ms();
        let mut opened = Some(first);
        // Failed opens in a row: the first retries come soon, since the usual cause is the
        // store just closed, still held by a request in flight (its LOCK), and a partition
        // reopening is a partition refusing requests.
        let mut failed: u32 = 0;
        while !self.stopping() {
            let store = match opened.take() {
                Some(store) => store,
                None => match self.open().await {
                    Ok(store) => {
                        failed = 0;
                        store
                    }
                    Err(e) => {
                        tracing::error!(partition = p, error = %e, "opening a partition store; retrying");
                        self.set_role(Role::Halted(e.to_string()));
                        let backoff = Duration::from_millis(100)
                            .saturating_mul(1 << failed.min(6))
                            .min(LEASE);
                        failed = failed.saturating_add(1);
                        tokio::time::sleep(backoff).await;
                        continue;
                    }
                },
            };
            *self.part.store.write() = Some(store.clone());
            let why = self.serve(&store, started).await;
            tracing::info!(partition = p, ?why, "closing the partition store");
            *self.part.store.write() = None;
            // A poisoned owner applied a write the stream may not hold: its position is no
            // floor for the reopened store, which follows the stream's history.
            if !store.is_poisoned() {
                let at = store.partition_log().position;
                self.part
                    .read_floor
                    .fetch_max(at, std::sync::atomic::Ordering::AcqRel);
            }
            self.set_role(Role::Opening);
            let closed = tokio::task::spawn_blocking(move || {
                if matches!(why, Reopen::Stop) && !store.is_poisoned() {
                    store.flush()?;
                    // A checkpoint spares the next open the stream since the last one.
                    if let Err(e) = store.checkpoint() {
                        tracing::warn!(error = %e, "checkpointing a partition store at stop");
                    }
                }
                store.close()
            })
            .await;
            if let Ok(Err(e)) = closed {
                tracing::warn!(partition = p, error = %e, "closing a partition store");
            }
            if let Reopen::Diverged { at } = why {
                let again = self.part.diverged_at.lock().replace(at) == Some(at);
                let set_aside = if again {
                    Err(format!(
                        "a store made again from the shipped checkpoint and the stream diverged at position {at} again"
                    ))
                } else {
                    self.set_aside("diverged").map_err(|e| e.to_string())
                };
                if let Err(why) = set_aside {
                    self.halt(format!(
                        "its history is not the stream's (a claim at position {at} it passed without) and it could not be made again: {why}"
                    ))
                    .await;
                }
            }
        }
    }

    /// Moves the partition's store directory aside (never removed: `p-<p>.<why>-<ms>`), so
    /// the next open makes it again from the shipped checkpoint and the stream.
    fn set_aside(&self, why: &str) -> std::io::Result<PathBuf> {
        let p = self.part.partition;
        let aside = self.dir.with_file_name(format!("p-{p}.{why}-{}", now_ms()));
        std::fs::rename(&self.dir, &aside)?;
        tracing::warn!(partition = p, aside = %aside.display(), "the store is set aside and made again from the shipped checkpoint and the stream");
        *self.part.set_aside.lock() = Some(format!("{} ({why})", aside.display()));
        Ok(aside)
    }

    async fn open(&self) -> anyhow::Result<Store> {
        let p = self.part.partition;
        let stream = existing_stream(&self.js, p, self.node.settings.replicas).await?;
        let store = self.open_here().await?;
        // A store the stream was trimmed past cannot follow it: it is moved aside, never
        // removed, and the partition starts again from the shipped checkpoint.
        let first = super::stream::first_position(&stream).await?;
        let next = store.partition_log().position + 1;
        if first <= next {
            return Ok(store);
        }
        // Trimmed only below a shipped checkpoint (`ship::trim_point`): a stream that begins
        // past every shipped checkpoint lost its first messages (a damaged leader), and this
        // store is kept as it is while another leader is asked for.
        let shipped = super::ship::manifest(&self.shipped, p)
            .await?
            .map_or(0, |m| m.seq);
        if shipped + 1 < first {
            let why = format!(
                "the stream begins at position {first}, past every shipped checkpoint ({shipped}), and this store needs {next}: its leader lost messages"
            );
            super::stream::ask_leader_change(&self.js, p, &why).await;
            tokio::task::spawn_blocking(move || store.close()).await??;
            anyhow::bail!("partition {p}: {why}");
        }
        tokio::task::spawn_blocking(move || store.close()).await??;
        tracing::warn!(
            partition = p,
            needed = next,
            first,
            "the stream was trimmed past this store"
        );
        self.set_aside("behind")?;
        let store = self.open_here().await?;
        let next = store.partition_log().position + 1;
        anyhow::ensure!(
            first <= next,
            "partition {p}: no shipped checkpoint reaches the stream's first position {first} (the store made from it needs {next})"
        );
        Ok(store)
    }

    /// Opens the partition's store in this node's directory; one this node never had starts
    /// from the newest shipped checkpoint, if any.
    async fn open_here(&self) -> anyhow::Result<Store> {
        let p = self.part.partition;
        let id = self.node.settings.store(p)?;
        let options = self
            .options
            .clone()
            .partition(p)
            .store_id(id)
            .tail_from_stream(true);
        // A store this node never had starts from the newest shipped checkpoint, if any.
        if !amberdb::cluster::holds_store(&self.dir)
            && let Some(seq) = super::ship::bootstrap(&self.shipped, p, id, &self.dir).await?
        {
            tracing::info!(
                partition = p,
                seq,
                "made the store from a shipped checkpoint"
            );
            *self.part.bootstrapped.lock() = Some(seq);
        }
        let dir = self.dir.clone();
        let store = tokio::task::spawn_blocking(move || open_store(&dir, options)).await??;
        Ok(store)
    }

    /// Serves the partition until its store must be reopened.
    async fn serve(&self, store: &Store, started: u64) -> Reopen {
        let p = self.part.partition;
        let stream = loop {
            match self.js.get_stream(stream_name(p)).await {
                Ok(s) => break s,
                Err(e) if self.stopping() => {
                    tracing::warn!(partition = p, error = %e, "the stream at stop");
                    return Reopen::Stop;
                }
                Err(e) => {
                    tracing::warn!(partition = p, error = %e, "reading the partition's stream");
                    tokio::time::sleep(TICK).await;
                }
            }
        };
        loop {
            self.set_role(Role::Standby);
            let tail = {
                let (store, stream) = (store.clone(), stream.clone());
                tokio::spawn(async move { follow(&store, &stream, None).await })
            };
            let next = self.stand_by(store, &stream, &tail, started).await;
            tail.abort();
            match tail.await {
                Ok(Err(e @ StreamError::Trimmed { .. })) => {
                    tracing::warn!(partition = p, error = %e, "the store is behind the stream");
                    return Reopen::Behind;
                }
                Ok(Err(e @ StreamError::Diverged { position, .. })) => {
                    tracing::error!(partition = p, error = %e, "this replica's history is not the stream's");
                    return Reopen::Diverged { at: position };
                }
                // The tail halted the store (a frame that fails its checks, or does not apply).
                _ if store.is_poisoned() => {
                    let why = store
                        .stats()
                        .poison_cause
                        .map_or_else(String::new, |c| c.error);
                    return self.halt(why).await;
                }
                _ => {}
            }
            match next {
                Standby::Stop => return Reopen::Stop,
                // The tail ended (a lost connection, a consumer JetStream would not make):
                // a tick before the next, so a refusal is not retried in a busy loop (each
                // attempt leaves an ephemeral consumer behind on the servers for a while).
                Standby::Tail => {
                    tokio::time::sleep(TICK).await;
                    continue;
                }
                Standby::Take => {}
                Standby::Diverged { at } => {
                    tracing::error!(
                        partition = p,
                        position = at,
                        "this replica's last frame is not the stream's message at its position"
                    );
                    return Reopen::Diverged { at };
                }
            }
            let Ok(store_id) = self.node.settings.store(p) else {
                return self
                    .halt("the settings hold no valid store id for it".into())
                    .await;
            };
            let Some(taken) = self.try_take(store, &stream, store_id).await else {
                return Reopen::Stop;
            };
            *self.part.not_taken.lock() = match &taken {
                Err(e) => Some(e.to_string()),
                Ok(_) => None,
            };
            match taken {
                Ok(Some(owned)) => {
                    tracing::info!(partition = p, epoch = owned.epoch, "owning the partition");
                    self.set_role(Role::Owner { epoch: owned.epoch });
                    *self.part.lease.lock() = Some(owned.lease.clone());
                    return self.own(store, &stream, owned).await;
                }
                // Another node holds the lease or won the race, or the claim was not published
                // (a stream without a leader answers at once): a tick before the next try, as
                // after an error, or the loop makes a tail and a KV listing, each an ephemeral
                // consumer, as fast as the servers answer (found by the fault rig: hundreds a
                // second, until JetStream refused more consumers).
                Ok(None) => tokio::time::sleep(TICK).await,
                Err(e) if store.is_poisoned() => return self.halt(e.to_string()).await,
                Err(e) => {
                    tracing::warn!(partition = p, error = %e, "taking the partition");
                    tokio::time::sleep(TICK).await;
                }
            }
        }
    }

    /// One try at the claim procedure (`lease::take`), which reads the registration of every
    /// node in this node's view afresh (nothing is claimed before a watch delivered the view
    /// whole). `None` if the node stops meanwhile: a take given up half way is what a crash at
    /// that point is, a lease that lapses, a claim no one serves.
    async fn try_take(
        &self,
        store: &Store,
        stream: &async_nats::jetstream::stream::Stream,
        store_id: amberdb::StoreId,
    ) -> Option<Result<Option<lease::Owned>, StreamError>> {
        let nodes = match self.node.directory.names() {
            Ok(nodes) => nodes,
            Err(e) => return Some(Err(e)),
        };
        let partition = Partition {
            js: &self.js,
            kv: &self.kv,
            nodes: &nodes,
            stream,
            partition: self.part.partition,
            store_id,
            acknowledged: self
                .part
                .acknowledged
                .load(std::sync::atomic::Ordering::Acquire),
        };
        let runtime = tokio::runtime::Handle::current();
        let mut stop = self.node.stop.subscribe();
        tokio::select! {
            taken = lease::take(&partition, store, &self.node.name, &runtime) => Some(taken),
            _ = stop.wait_for(|stopping| *stopping) => None,
        }
    }

    /// A standby: the stream followed (by `tail`), the lease watched.
    async fn stand_by(
        &self,
        store: &Store,
        stream: &async_nats::jetstream::stream::Stream,
        tail: &tokio::task::JoinHandle<Result<u64, StreamError>>,
        started: u64,
    ) -> Standby {
        let p = self.part.partition;
        let mut stop = self.node.stop.subscribe();
        // The lease is read at once (a store just reopened holds the lease it had), then
        // every tick.
        let mut first = true;
        let mut ticks: u32 = 0;
        // The position the tail last moved from, and since when, while the stream held more.
        let mut stuck: Option<(u64, Instant)> = None;
        // The last position at which this replica's last frame was compared with the stream.
        let mut compared: Option<u64> = None;
        loop {
            ticks = ticks.wrapping_add(1);
            // Every two seconds: a stream that ends before what this replica applied lost
            // acknowledged messages (a damaged leader); its leadership is asked to move
            // (`docs/cluster.md`, "When the stream loses what it acknowledged").
            if ticks.is_multiple_of(8)
                && let Ok(end) = super::stream::last_position(stream).await
            {
                let at = store.partition_log().position;
                if end < at {
                    let why = format!(
                        "the stream ends at position {end}, before position {at} this replica applied"
                    );
                    super::stream::ask_leader_change(&self.js, p, &why).await;
                }
                // A replica as long as the stream notices a history that differs only at the
                // next message past its end: one that never comes on an idle partition. Its last
                // frame is compared with the stream's message there, once per position
                // (docs/cluster.md, "A replica whose history is not the stream's").
                if end == at && compared != Some(at) {
                    compared = Some(at);
                    if let Some((last, crc)) = store.last_frame_crc()
                        && last == at
                        && super::stream::holds_frame(stream, at, crc).await == Some(false)
                    {
                        return Standby::Diverged { at };
                    }
                }
                // A tail that delivers nothing while the stream holds more is tailed again:
                // its consumer may sit on a leader that cannot give it (found by the fault
                // rig: a standby stayed minutes behind after `.blk` damage while the others
                // went on).
                stuck = match stuck {
                    Some((was, since)) if was == at && end > at => {
                        if since.elapsed() >= super::stream::FOLLOW_STALL {
                            tracing::warn!(
                                partition = p,
                                position = at,
                                end,
                                "the tail delivered nothing while the stream holds more: tailing again"
                            );
                            return Standby::Tail;
                        }
                        Some((was, since))
                    }
                    _ if end > at => Some((at, Instant::now())),
                    _ => None,
                };
            }
            if !first {
                tokio::select! {
                    () = tokio::time::sleep(TICK) => {}
                    _ = stop.changed() => {}
                }
            }
            first = false;
            if self.stopping() {
                return Standby::Stop;
            }
            if should_take(self, p, started).await {
                return Standby::Take;
            }
            if tail.is_finished() {
                // The connection was lost: tail again from where the store is.
                return Standby::Tail;
            }
        }
    }

    /// Owns the partition: renews the lease until the store is poisoned, the lease is lost, or
    /// the node stops (which releases it).
    async fn own(
        &self,
        store: &Store,
        stream: &async_nats::jetstream::stream::Stream,
        mut owned: lease::Owned,
    ) -> Reopen {
        let p = self.part.partition;
        let mut watch = super::placement::Handoff::new();
        let node = Arc::clone(&self.node);
        let shipper = self.node.settings.store(p).ok().map(|id| {
            tokio::spawn(super::ship::keep_shipping(
                self.shipped.clone(),
                stream.clone(),
                (p, id),
                (self.dir.clone(), store.clone()),
                (self.node.name.clone(), move || node.directory.peers()),
            ))
        });
        let why = self.owning(store, &mut owned, &mut watch).await;
        if let Some(shipper) = shipper {
            shipper.abort();
        }
        self.part.acknowledged.fetch_max(
            owned.publisher.acknowledged(),
            std::sync::atomic::Ordering::AcqRel,
        );
        why
    }

    /// The owner's loop (`own`).
    async fn owning(
        &self,
        store: &Store,
        owned: &mut lease::Owned,
        watch: &mut super::placement::Handoff,
    ) -> Reopen {
        let p = self.part.partition;
        let mut stop = self.node.stop.subscribe();
        let mut renewed = Instant::now();
        loop {
            tokio::select! {
                () = tokio::time::sleep(TICK) => {}
                _ = stop.changed() => {}
            }
            if self.stopping() {
                // Released: another node takes the partition without waiting for the lease.
                owned.lease.expires_ms = 0;
                let _ = self
                    .kv
                    .update(
                        lease::key(p),
                        serde_json::to_vec(&owned.lease).unwrap_or_default().into(),
                        owned.revision,
                    )
                    .await;
                return Reopen::Stop;
            }
            if store.is_poisoned() {
                return Reopen::Poisoned;
            }
            if renewed.elapsed() >= RENEW_EVERY {
                match lease::renew(&self.kv, p, &mut owned.lease, owned.revision).await {
                    Ok(Some(revision)) => {
                        owned.revision = revision;
                        renewed = Instant::now();
                        *self.part.lease.lock() = Some(owned.lease.clone());
                    }
                    Ok(None) => return Reopen::LeaseLost,
                    Err(e) => tracing::warn!(partition = p, error = %e, "renewing the lease"),
                }
                if let Some(to) = self.node.handoff_due(p, watch) {
                    // Lapsed now: the two leases others wait count from here.
                    owned.lease.expires_ms = now_ms();
                    owned.lease.handoff = Some(to.clone());
                    let value = serde_json::to_vec(&owned.lease).unwrap_or_default();
                    match self
                        .kv
                        .update(lease::key(p), value.into(), owned.revision)
                        .await
                    {
                        Ok(_) => {
                            tracing::info!(partition = p, to, "handing the partition over");
                            return Reopen::HandedOver;
                        }
                        // Written meanwhile: the next renewal finds out whose it is.
                        Err(e) => tracing::warn!(partition = p, error = %e, "handing over"),
                    }
                }
                // A lease not renewed for its length may be another node's by now.
                if renewed.elapsed() >= LEASE {
                    return Reopen::LeaseLost;
                }
            }
        }
    }

    /// Halts the partition on this node (`docs/cluster.md`, "Fencing", rule 1): reads go on,
    /// writes are refused, STATS says why, until the node stops.
    async fn halt(&self, why: String) -> Reopen {
        tracing::error!(
            partition = self.part.partition,
            why,
            "the partition halts on this node"
        );
        self.set_role(Role::Halted(why));
        let mut stop = self.node.stop.subscribe();
        while !self.stopping() {
            let _ = stop.changed().await;
        }
        Reopen::Stop
    }
}

/// What a standby does next.
enum Standby {
    Take,
    Tail,
    Stop,
    /// The stream holds another message at the position this replica's log ends with.
    Diverged {
        at: u64,
    },
}

/// Reads the lease into the partition's view and says whether this node should take it now:
/// the lease is its own (from before a restart or a reopen), or was handed to it, or free or
/// lapsed (and handed to no other) while this node
/// has been up for [`SETTLE`] and is the partition's preferred one, or no preferred node took
/// it within two leases.
async fn should_take(run: &PartitionRun, p: u32, started: u64) -> bool {
    let held = match lease::read(&run.kv, p).await {
        Ok(held) => held.map(|(l, _)| l),
        Err(e) => {
            tracing::warn!(partition = p, error = %e, "reading a lease");
            return false;
        }
    };
    *run.part.lease.lock() = held.clone();
    let now = now_ms();
    match held {
        Some(l) if l.node == run.node.name && l.handoff.is_none() => true,
        Some(l) if l.expires_ms > now => false,
        // Handed to this node by its last owner (`placement`).
        Some(l) if l.handoff.as_deref() == Some(run.node.name.as_str()) => true,
        // Handed to another: it takes it, or anyone after two leases.
        Some(l) if l.handoff.is_some() => now > l.expires_ms.max(started) + 2 * millis(LEASE),
        // Nodes started together see each other before any takes a free partition, so the
        // partitions spread over them (`preferred`).
        _ if now < started + millis(SETTLE) => false,
        held => {
            let lapsed_at = held.map_or(started, |l| l.expires_ms.max(started));
            run.node.preferred(p).as_deref() == Some(run.node.name.as_str())
                || now > lapsed_at + 2 * millis(LEASE)
        }
    }
}

fn open_store(dir: &Path, options: StoreOptions) -> anyhow::Result<Store> {
    std::fs::create_dir_all(dir)?;
    let store = Store::open(dir, options)?;
    let dropped = store.open_report().dropped_log_files;
    if dropped > 0 {
        tracing::info!(dir = %dir.display(), dropped, "log files after the checkpoint dropped: the stream holds them");
    }
    Ok(store)
}
