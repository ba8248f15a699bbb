//! The faults the rig injects (docs/reliability.md, "The cluster fault rig"), each ended by
//! healing it: every process runs again and every host is back on the bridge. A fault that
//! takes a partition's owner away is timed from the fault to the next write of that partition
//! acknowledged (`Probe`).

use super::super::kill::Rng;
use super::PARTITIONS;
use super::load::Load;
use super::world::World;
use amberdb_server::client::Client;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The kinds of fault, in the order the rig cycles through them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// kill -9 of a partition's owner, restarted after 0–2 s.
    OwnerKill,
    /// SIGSTOP of an owner for 7 s (past its 5 s lease), then SIGCONT.
    OwnerPause,
    /// The owner's host cut off from everyone for 10 s (its NATS server too), then healed.
    HostCut,
    /// kill -9 of the NATS server leading a partition's stream, restarted after 2 s.
    LeaderKill,
    /// Two of the three NATS servers killed for 8 s: nothing may be acknowledged meanwhile.
    NatsMajority,
    /// SIGSTOP of a node for 3 s (inside its leases) under load, then catching up.
    StandbyPause,
    /// A rogue insider with a node's credentials publishes a stale-epoch, a wrong-position and
    /// a duplicate frame straight into a partition's stream.
    Rogue,
    /// One NATS server (not the leader) stopped, its block files of a partition's stream (and
    /// in every other such fault its Raft snapshots too) truncated and bit-flipped, restarted
    /// and made the stream's leader if JetStream lets it lead.
    BlkDamage,
    /// A node killed, the end of one partition's local log torn off mid-frame, restarted.
    TornLog,
    /// A node killed, its data directory deleted, restarted (it starts from the shipped
    /// checkpoints and the streams).
    ReplicaWipe,
}

impl Kind {
    pub(crate) const ALL: [Kind; 10] = [
        Kind::OwnerKill,
        Kind::OwnerPause,
        Kind::HostCut,
        Kind::LeaderKill,
        Kind::NatsMajority,
        Kind::StandbyPause,
        Kind::Rogue,
        Kind::BlkDamage,
        Kind::TornLog,
        Kind::ReplicaWipe,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::OwnerKill => "owner-kill",
            Kind::OwnerPause => "owner-pause",
            Kind::HostCut => "host-cut",
            Kind::LeaderKill => "leader-kill",
            Kind::NatsMajority => "nats-majority",
            Kind::StandbyPause => "standby-pause",
            Kind::Rogue => "rogue",
            Kind::BlkDamage => "blk-damage",
            Kind::TornLog => "torn-log",
            Kind::ReplicaWipe => "replica-wipe",
        }
    }
}

/// What one fault did and what it measured.
#[derive(Debug, Default)]
pub(crate) struct Done {
    /// The partition it aimed at, and the host it hit.
    pub(crate) partition: u32,
    pub(crate) host: usize,
    /// Fault to the partition's next acknowledged write, when the fault took its owner or
    /// its stream's leader away.
    pub(crate) gap: Option<Duration>,
    /// Whether the host that died also led the partition's stream, the KV bucket or
    /// JetStream's meta group.
    pub(crate) leader_on_host: Option<bool>,
    /// Writes acknowledged while they must not have been (two NATS servers down).
    pub(crate) acked_in_outage: Option<u64>,
    /// What else it saw, for the ledger.
    pub(crate) note: String,
}

/// Writes of one user per partition, timed: the failover probe.
pub(crate) struct Probe {
    client: Client,
    users: Vec<String>,
    n: u64,
}

impl Probe {
    pub(crate) fn new(world: &World) -> Probe {
        let mut client = Client::connect(
            &world.seeds(),
            Some(super::world::TOKEN),
            Some(Duration::from_secs(3)),
        )
        .unwrap();
        client.set_failover_wait(Duration::from_secs(5));
        let users = (0..PARTITIONS)
            .map(|p| {
                (0..)
                    .map(|i| format!("probe{p}-{i}"))
                    .find(|u| amberdb::cluster::partition_of_user(u, PARTITIONS) == p)
                    .unwrap()
            })
            .collect();
        Probe {
            client,
            users,
            n: 0,
        }
    }

    /// Stores into partition `p` until one is acknowledged (recorded in the load's model);
    /// the time from `since`. Panics after two minutes.
    pub(crate) fn next_ack(&mut self, p: u32, since: Instant, load: &Load) -> Duration {
        let user = self.users[p as usize].clone();
        loop {
            assert!(
                since.elapsed() < Duration::from_secs(120),
                "partition {p} acknowledged nothing for two minutes"
            );
            self.n += 1;
            let content = format!("probe {p} write {} {}", self.n, since.elapsed().as_nanos());
            match self
                .client
                .call("STORE", &json!({"user_id": user, "content": content}))
            {
                Ok(r) => {
                    let took = since.elapsed();
                    let mut m = load.model();
                    m.acked += 1;
                    m.acked_at.push(Instant::now());
                    if r["outcome"] == "stored" {
                        let id = r["memory_id"].as_u64().unwrap();
                        m.live.insert(id, (user.clone(), content.clone()));
                        if m.created.insert(id, content.clone()).is_some() {
                            m.violations
                                .push(format!("probe memory {id} acknowledged twice"));
                        }
                    }
                    return took;
                }
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    /// Every probe user (the checks read them too).
    pub(crate) fn users(&self) -> &[String] {
        &self.users
    }
}

/// Injects one fault of `kind` and heals it.
pub(crate) fn inject(
    kind: Kind,
    world: &mut World,
    rng: &mut Rng,
    probe: &mut Probe,
    load: &Load,
) -> Done {
    let p = (rng.next() % u64::from(PARTITIONS)) as u32;
    let owner = wait_owner(world, p);
    let other = |rng: &mut Rng, not: usize| (not + 1 + (rng.next() % 2) as usize) % 3;
    let mut done = Done {
        partition: p,
        host: owner,
        ..Done::default()
    };
    match kind {
        Kind::OwnerKill => {
            world.kill_node(owner);
            let t0 = Instant::now();
            done.gap = Some(probe.next_ack(p, t0, load));
            std::thread::sleep(Duration::from_millis(rng.next() % 2000));
            world.start_node(owner);
        }
        Kind::OwnerPause => {
            let pid = world.node_pid(owner).unwrap();
            World::signal(pid, "-STOP");
            let t0 = Instant::now();
            done.gap = Some(probe.next_ack(p, t0, load));
            sleep_until(t0 + Duration::from_secs(7));
            World::signal(pid, "-CONT");
        }
        Kind::HostCut => {
            let stream = format!("AMBERDB_P{p}");
            let (led_stream, led_kv, led_meta) = (
                world.leader_of(&stream),
                world.leader_of("KV_amberdb_cluster"),
                world.meta_leader(),
            );
            done.leader_on_host =
                Some(led_stream == Some(owner) || led_kv == Some(owner) || led_meta == Some(owner));
            done.note = format!(
                "stream leader {led_stream:?}, KV leader {led_kv:?}, meta leader {led_meta:?}"
            );
            world.hosts.cut(owner);
            let t0 = Instant::now();
            // Wall-clock times in the nodes' log format, to read a cut step by step against
            // their logs and the NATS servers' (kept with AMBERDB_RIG_KEEP=1).
            let now = || amberdb::Timestamp::now().to_rfc3339();
            eprintln!("rig: host n{owner} cut at {}", now());
            done.gap = Some(probe.next_ack(p, t0, load));
            eprintln!("rig: next acknowledged write of p{p} at {}", now());
            sleep_until(t0 + Duration::from_secs(10));
            world.hosts.heal(owner);
        }
        Kind::LeaderKill => {
            let stream = format!("AMBERDB_P{p}");
            let leader = wait_leader(world, &stream);
            done.host = leader;
            world.kill_nats(leader);
            let t0 = Instant::now();
            done.gap = Some(probe.next_ack(p, t0, load));
            sleep_until(t0 + Duration::from_secs(2));
            world.start_nats(leader);
        }
        Kind::NatsMajority => {
            let alive = (rng.next() % 3) as usize;
            done.host = alive;
            let down: Vec<usize> = (0..3).filter(|&i| i != alive).collect();
            for &i in &down {
                world.kill_nats(i);
            }
            let t0 = Instant::now();
            std::thread::sleep(Duration::from_secs(8));
            let t1 = Instant::now();
            // An ack may have been on its way back when the servers died: the window starts 1 s on.
            let from = t0 + Duration::from_secs(1);
            done.acked_in_outage = Some(
                load.model()
                    .acked_at
                    .iter()
                    .filter(|t| **t >= from && **t < t1)
                    .count() as u64,
            );
            for &i in &down {
                world.start_nats(i);
            }
            done.gap = Some(probe.next_ack(p, t1, load));
            done.note = "gap: from the restart of the two servers".into();
        }
        Kind::StandbyPause => {
            let node = other(rng, owner);
            done.host = node;
            let pid = world.node_pid(node).unwrap();
            World::signal(pid, "-STOP");
            std::thread::sleep(Duration::from_secs(3));
            World::signal(pid, "-CONT");
        }
        Kind::Rogue => {
            done.note = rogue(world, p);
            let t0 = Instant::now();
            done.gap = Some(probe.next_ack(p, t0, load));
        }
        Kind::BlkDamage => {
            let stream = format!("AMBERDB_P{p}");
            let leader = wait_leader(world, &stream);
            let victim = other(rng, leader);
            done.host = victim;
            let group = raft_group(world, &stream);
            world.kill_nats(victim);
            let snapshots = rng.next().is_multiple_of(2);
            let damaged = damage(
                world.nats_store(victim),
                &stream,
                group.as_deref(),
                snapshots,
                rng,
            );
            world.start_nats(victim);
            let led = world.make_leader(&stream, victim);
            done.note = format!("raft group {group:?}, damaged {damaged:?}, made leader: {led}");
            let t0 = Instant::now();
            done.gap = Some(probe.next_ack(p, t0, load));
        }
        Kind::TornLog => {
            let node = other(rng, owner);
            done.host = node;
            world.kill_node(node);
            done.note = tear(&world.node_dir(node).join(format!("p-{p}")), rng);
            world.start_node(node);
        }
        Kind::ReplicaWipe => {
            let node = other(rng, owner);
            done.host = node;
            world.kill_node(node);
            std::fs::remove_dir_all(world.node_dir(node)).unwrap();
            world.start_node(node);
        }
    }
    done
}

fn sleep_until(t: Instant) {
    if let Some(left) = t.checked_duration_since(Instant::now()) {
        std::thread::sleep(left);
    }
}

/// The host whose node owns `p`, waited for (a fault just healed may leave it unowned a while).
fn wait_owner(world: &World, p: u32) -> usize {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(o) = world.owner_of(p) {
            return o;
        }
        assert!(Instant::now() < deadline, "partition {p} has no owner");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn wait_leader(world: &World, stream: &str) -> usize {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(l) = world.leader_of(stream) {
            return l;
        }
        assert!(Instant::now() < deadline, "{stream} has no leader");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A rogue insider's three messages into partition `p`'s stream: its last message again with
/// the epoch before its own (stale), with its own epoch and a position that is not the end
/// (wrong position), and byte for byte under a new message id (duplicate). Every replica must
/// make each a `Skip` and go on.
fn rogue(world: &World, p: u32) -> String {
    let url = world.nats_urls("n3");
    world.block_on(async move {
        let client = amberdb_server::cluster::connect_nats(&url).await.unwrap();
        let js = async_nats::jetstream::new(client);
        let last = patiently("read the stream's last message", || async {
            js.get_stream(format!("AMBERDB_P{p}"))
                .await
                .map_err(|e| e.to_string())?
                .get_last_raw_message_by_subject(&format!("amberdb.p.{p}"))
                .await
                .map_err(|e| e.to_string())
        })
        .await;
        let header = |name: &str| last.headers.get(name).map(|v| v.as_str().to_owned());
        let epoch: u64 = header("Amberdb-Epoch")
            .and_then(|e| e.parse().ok())
            .unwrap_or(1);
        let at = last.sequence;
        let mut sent = Vec::new();
        for (what, epoch, prev) in [
            ("stale", epoch.saturating_sub(1), at),
            ("wrong-position", epoch, at.saturating_sub(3)),
            (
                "duplicate",
                epoch,
                header("Amberdb-Prev")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0),
            ),
        ] {
            let mut h = async_nats::HeaderMap::new();
            h.insert("Amberdb-Epoch", epoch.to_string());
            h.insert("Amberdb-Prev", prev.to_string());
            if let Some(crc) = header("Amberdb-Crc") {
                h.insert("Amberdb-Crc", crc);
            }
            // The message id makes a retried publish a duplicate JetStream drops, so a retry
            // after a lost acknowledgement sends the frame once.
            h.insert("Nats-Msg-Id", format!("rogue-{what}-{p}-{at}"));
            let ack = patiently("publish a rogue frame", || async {
                js.publish_with_headers(format!("amberdb.p.{p}"), h.clone(), last.payload.clone())
                    .await
                    .map_err(|e| e.to_string())?
                    .await
                    .map_err(|e| e.to_string())
            })
            .await;
            sent.push(format!("{what} at {}", ack.sequence));
        }
        sent.join(", ")
    })
}

/// Runs `attempt` until it succeeds, for up to 60 s. A fault just healed leaves JetStream
/// answering "temporarily unavailable" (503) until its Raft groups have leaders again; the
/// rig's own requests wait that out as a client would, and fail only past the deadline.
async fn patiently<T, F, Fut>(what: &str, mut attempt: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match attempt().await {
            Ok(value) => return value,
            Err(e) if Instant::now() < deadline => {
                eprintln!("rig: {what}: {e}; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => panic!("rig: {what}: still failing after 60 s: {e}"),
        }
    }
}

/// The Raft group of `stream`, from `$JS.API.STREAM.INFO` as the operator reads it.
fn raft_group(world: &World, stream: &str) -> Option<String> {
    let info: Value = world.block_on(async {
        let c = world.admin_client();
        let reply = c
            .request(format!("$JS.API.STREAM.INFO.{stream}"), "".into())
            .await
            .ok()?;
        serde_json::from_slice(&reply.payload).ok()
    })?;
    info["cluster"]["raft_group"].as_str().map(str::to_owned)
}

/// Files below `root` whose path contains `part`, sorted.
fn files_under(root: &Path, part: &str, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(root).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files_under(&path, part, out);
        } else if path.to_string_lossy().contains(part) {
            out.push(path);
        }
    }
    out.sort();
}

/// Damages a stopped NATS server's copy of `stream` as Jepsen did (nats-server #7549, #7556):
/// every other block file of the stream's messages truncated to half, the rest with a bit
/// flipped; with `snapshots`, the stream's Raft group's snapshots too (a server whose snapshot
/// is damaged refuses the stream until it catches up from its peers). The files damaged.
fn damage(
    store: &Path,
    stream: &str,
    group: Option<&str>,
    snapshots: bool,
    rng: &mut Rng,
) -> Vec<String> {
    let mut files = Vec::new();
    files_under(store, &format!("streams/{stream}/msgs/"), &mut files);
    files.retain(|f| f.extension().is_some_and(|e| e == "blk"));
    if let (Some(g), true) = (group, snapshots) {
        files_under(store, &format!("/{g}/snapshots/"), &mut files);
    }
    let mut damaged = Vec::new();
    for (n, f) in files.iter().enumerate() {
        let Ok(mut bytes) = std::fs::read(f) else {
            continue;
        };
        if bytes.is_empty() {
            continue;
        }
        let name = f.strip_prefix(store).unwrap_or(f).display().to_string();
        if n % 2 == 0 {
            bytes.truncate(bytes.len() / 2);
            damaged.push(format!("{name} truncated"));
        } else {
            let at = (rng.next() % bytes.len() as u64) as usize;
            bytes[at] ^= 1 << (rng.next() % 8);
            damaged.push(format!("{name} flipped at {at}"));
        }
        std::fs::write(f, bytes).unwrap();
    }
    damaged
}

/// Tears the newest log file of a store directory: the last 1–20 bytes cut off (mid-frame).
fn tear(store: &Path, rng: &mut Rng) -> String {
    let mut logs: Vec<PathBuf> = std::fs::read_dir(store)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    let Some(newest) = logs.last() else {
        return "no log file".into();
    };
    let len = std::fs::metadata(newest).unwrap().len();
    let cut = (1 + rng.next() % 20).min(len);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(newest)
        .unwrap();
    f.set_len(len - cut).unwrap();
    f.sync_all().unwrap();
    format!("{} cut from {len} to {} bytes", newest.display(), len - cut)
}
