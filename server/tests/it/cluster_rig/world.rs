//! The rig's machines: three hosts (`netns::Hosts`), each with one nats-server of one JetStream
//! cluster and one amberdb node, every process startable, killable, pausable and restartable
//! on the same data and address, and what the test learns of them (owners, stream leaders).

use super::super::cluster::{authorization, nats_server_binary, password};
use crate::netns::Hosts;
use crate::support::{Server, amberdb, text};
use amberdb_server::client::Client;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Every host runs its processes on these ports of its own address.
const NATS_PORT: u16 = 4222;
/// Each NATS server's monitoring port, which `cluster init` reads (`cluster/servers.rs`).
const MONITOR_PORT: u16 = 8222;
const ROUTE_PORT: u16 = 6222;
const NODE_PORT: u16 = 7733;
/// The token every node takes and every client sends (nodes listen beyond loopback).
pub(crate) const TOKEN: &str = "rig-token-5be1";

/// One host's nats-server: running or not, always on the same store directory.
struct NatsHost {
    child: Option<Child>,
    config: PathBuf,
    store: PathBuf,
}

/// Three hosts, their NATS servers and amberdb nodes.
pub(crate) struct World {
    nats: Vec<NatsHost>,
    nodes: Vec<Option<Server>>,
    /// Which binary each node runs (a rolling upgrade changes them one by one).
    bins: Vec<PathBuf>,
    /// Whether NATS has a user per node (`scripts/nats-permissions.conf`); a cluster of a
    /// build older than NATS users runs without them.
    users: bool,
    pub(crate) dir: tempfile::TempDir,
    rt: tokio::runtime::Runtime,
    /// JetStream as the operator sees it (`admin`), once the servers run.
    admin: Option<async_nats::jetstream::Context>,
    /// Last, so every process has ended before the namespaces go.
    pub(crate) hosts: Hosts,
}

/// What a node's STATS says of one partition.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PartView {
    pub(crate) role: String,
    pub(crate) owner: Option<String>,
    pub(crate) position: Option<u64>,
    pub(crate) crc: Option<String>,
    pub(crate) halted: Option<String>,
}

impl World {
    /// Hosts, NATS (with users, or without for a build older than them), `amberdb cluster
    /// init` (R3, `partitions`, the hashing embedder) and a node per host running `bin`.
    pub(crate) fn start(partitions: u32, bin: &Path, users: bool) -> World {
        let hosts = Hosts::new(3);
        let dir = tempfile::tempdir().unwrap();
        let routes: Vec<String> = (0..3)
            .map(|i| format!("nats-route://{}:{ROUTE_PORT}", hosts.ip(i)))
            .collect();
        let nats = (0..3)
            .map(|i| {
                let home = dir.path().join(format!("nats{i}"));
                std::fs::create_dir_all(&home).unwrap();
                let config = home.join("nats.conf");
                let store = home.join("js");
                std::fs::write(
                    &config,
                    format!(
                        "server_name: nats{i}\nlisten: {ip}:{NATS_PORT}\nmax_payload: 8MB\n\
                         http: {ip}:{MONITOR_PORT}\n\
                         ping_interval: \"1s\"\nping_max: 3\n\
                         jetstream {{\n  store_dir: \"{}\"\n  sync_interval: always\n}}\n\
                         cluster {{\n  name: amberdb\n  listen: {ip}:{ROUTE_PORT}\n  routes: [{}]\n}}\n{}",
                        store.display(),
                        routes.join(", "),
                        if users { authorization() } else { String::new() },
                        ip = hosts.ip(i),
                    ),
                )
                .unwrap();
                NatsHost {
                    child: None,
                    config,
                    store,
                }
            })
            .collect();
        std::fs::write(dir.path().join("tokens"), format!("{TOKEN}\n")).unwrap();
        let rt = tokio::runtime::Runtime::new().unwrap();
        let mut world = World {
            nats,
            nodes: (0..3).map(|_| None).collect(),
            bins: vec![bin.to_owned(); 3],
            users,
            dir,
            admin: None,
            rt,
            hosts,
        };
        for i in 0..3 {
            world.start_nats(i);
        }
        let admin_url = world.nats_urls("admin");
        world.admin = Some(world.rt.block_on(async {
            let client = amberdb_server::cluster::connect_nats(&admin_url)
                .await
                .unwrap();
            async_nats::jetstream::new(client)
        }));
        world.init(partitions);
        for i in 0..3 {
            world.start_node(i);
        }
        world
    }

    /// The three NATS servers' URLs, with `user`'s password when NATS has users.
    pub(crate) fn nats_urls(&self, user: &str) -> String {
        let credentials = if self.users {
            format!("{user}:{}@", password(user))
        } else {
            String::new()
        };
        (0..3)
            .map(|i| format!("nats://{credentials}{}:{NATS_PORT}", self.hosts.ip(i)))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The three NATS servers' monitoring URLs.
    fn monitor_urls(&self) -> String {
        (0..3)
            .map(|i| format!("http://{}:{MONITOR_PORT}", self.hosts.ip(i)))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// `amberdb cluster init`, retried while JetStream elects its first leader.
    fn init(&self, partitions: u32) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let out = amberdb()
                .args([
                    "cluster",
                    "init",
                    "--embedder",
                    "hashing",
                    "--replicas",
                    "3",
                ])
                .args(["--partitions", &partitions.to_string()])
                .args(["--nats", &self.nats_urls("admin")])
                .args(["--monitor", &self.monitor_urls()])
                .output()
                .unwrap();
            if out.status.success() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "cluster init: {}",
                text(&out.stderr)
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// Starts host `i`'s nats-server on its store directory, once it listens.
    pub(crate) fn start_nats(&mut self, i: usize) {
        assert!(self.nats[i].child.is_none());
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join(format!("nats{i}.log")))
            .unwrap();
        let child = self
            .hosts
            .command(i, &nats_server_binary())
            .arg("-c")
            .arg(&self.nats[i].config)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.nats[i].child = Some(child);
        let addr = format!("{}:{NATS_PORT}", self.hosts.ip(i));
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect_timeout(
            &addr.parse().unwrap(),
            Duration::from_millis(200),
        )
        .is_err()
        {
            assert!(Instant::now() < deadline, "nats{i} did not listen");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// kill -9 of host `i`'s nats-server.
    pub(crate) fn kill_nats(&mut self, i: usize) {
        if let Some(mut c) = self.nats[i].child.take() {
            c.kill().ok();
            c.wait().ok();
        }
    }

    /// Where host `i`'s nats-server keeps JetStream's files.
    pub(crate) fn nats_store(&self, i: usize) -> &Path {
        &self.nats[i].store
    }

    /// Host `i`'s node's data directory.
    pub(crate) fn node_dir(&self, i: usize) -> PathBuf {
        self.dir.path().join(format!("n{i}"))
    }

    /// The nodes' addresses, as clients are given them.
    pub(crate) fn seeds(&self) -> Vec<String> {
        (0..3)
            .map(|i| format!("{}:{NODE_PORT}", self.hosts.ip(i)))
            .collect()
    }

    /// Starts host `i`'s node on its data directory and address.
    pub(crate) fn start_node(&mut self, i: usize) {
        assert!(self.nodes[i].is_none());
        let (ns, name, bind) = (self.hosts.ns(i), format!("n{i}"), self.hosts.ip(i));
        let tokens = self.dir.path().join("tokens");
        let node = Server::start_wrapped(
            &self.node_dir(i),
            &["ip", "netns", "exec", &ns],
            &self.bins[i],
            &[
                "--cluster",
                &self.nats_urls(&name),
                "--node",
                &name,
                "--bind",
                &bind,
                "--port",
                &NODE_PORT.to_string(),
                "--token-file",
                tokens.to_str().unwrap(),
            ],
        );
        self.nodes[i] = Some(node);
    }

    /// kill -9 of host `i`'s node (its log kept beside its data directory).
    pub(crate) fn kill_node(&mut self, i: usize) {
        if let Some(node) = self.nodes[i].take() {
            self.keep_log(i, &node);
            node.kill9();
        }
    }

    /// SIGTERM to host `i`'s node, which expires its leases and checkpoints; panics unless it
    /// exits cleanly.
    pub(crate) fn stop_node(&mut self, i: usize) {
        if let Some(node) = self.nodes[i].take() {
            self.keep_log(i, &node);
            let (status, log) = node.terminate();
            assert!(status.success(), "n{i} did not stop cleanly: {log}");
        }
    }

    fn keep_log(&self, i: usize, node: &Server) {
        let mut all = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join(format!("n{i}.log")))
            .unwrap();
        std::io::Write::write_all(&mut all, node.log().as_bytes()).ok();
    }

    /// SIGSTOP or SIGCONT to a process.
    pub(crate) fn signal(pid: u32, signal: &str) {
        let ok = Command::new("kill")
            .args([signal, &pid.to_string()])
            .status()
            .unwrap();
        assert!(ok.success(), "kill {signal} {pid}");
    }

    /// Host `i`'s node's process id, if it runs.
    pub(crate) fn node_pid(&self, i: usize) -> Option<u32> {
        self.nodes[i].as_ref().map(|n| n.child.id())
    }

    /// Host `i`'s nats-server's process id, if it runs.
    pub(crate) fn nats_pid(&self, i: usize) -> Option<u32> {
        self.nats[i].child.as_ref().map(Child::id)
    }

    /// Whether the cluster began on an older build (a rolling upgrade's).
    pub(crate) fn began_old(&self) -> bool {
        !self.users
    }

    /// Runs host `i`'s node on `bin` from its next start.
    pub(crate) fn set_bin(&mut self, i: usize, bin: &Path) {
        bin.clone_into(&mut self.bins[i]);
    }

    /// A client of node `i` alone (reads answered from its own stores).
    pub(crate) fn client_of(&self, i: usize) -> Option<Client> {
        let mut c = Client::connect(
            &[&self.seeds()[i]],
            Some(TOKEN),
            Some(Duration::from_secs(5)),
        )
        .ok()?;
        c.set_failover_wait(Duration::from_secs(1));
        c.set_read_your_writes(false);
        Some(c)
    }

    /// Node `i`'s view of every partition (None: it did not answer).
    pub(crate) fn view(&self, i: usize) -> Option<Vec<PartView>> {
        let stats = self.client_of(i)?.call("STATS", &json!({})).ok()?;
        let parts = stats.get("cluster")?.get("partitions")?.as_array()?.clone();
        Some(
            parts
                .iter()
                .map(|p| PartView {
                    role: p["role"].as_str().unwrap_or("").to_owned(),
                    owner: p["owner"].as_str().map(str::to_owned),
                    position: p["position"].as_u64(),
                    crc: p["running_crc"].as_str().map(str::to_owned),
                    halted: p["halted"].as_str().map(str::to_owned),
                })
                .collect(),
        )
    }

    /// The host whose node owns partition `p` now, as the first node that answers says.
    pub(crate) fn owner_of(&self, p: u32) -> Option<usize> {
        (0..3).filter_map(|i| self.view(i)).find_map(|v| {
            let part = v.get(p as usize)?;
            part.owner.as_deref()?.strip_prefix('n')?.parse().ok()
        })
    }

    /// The host whose nats-server leads JetStream stream `stream` (None: no leader now).
    pub(crate) fn leader_of(&self, stream: &str) -> Option<usize> {
        self.rt.block_on(async {
            let mut s = self.admin().get_stream(stream).await.ok()?;
            let info = tokio::time::timeout(Duration::from_secs(3), s.info())
                .await
                .ok()?
                .ok()?;
            let leader = info.cluster.as_ref()?.leader.clone()?;
            leader.strip_prefix("nats")?.parse().ok()
        })
    }

    /// The host whose NATS server leads JetStream's meta group (which creates and removes
    /// consumers, every node's catch-up and tail among them), from the servers' own logs: the
    /// latest "metadata leader" line of any of them. None before the first election.
    pub(crate) fn meta_leader(&self) -> Option<usize> {
        let mut latest: Option<(String, usize)> = None;
        for i in 0..3 {
            let log = std::fs::read_to_string(self.dir.path().join(format!("nats{i}.log")))
                .unwrap_or_default();
            for line in log.lines() {
                let leader = if line.contains("Self is new JetStream cluster metadata leader") {
                    Some(i)
                } else if let Some((_, rest)) = line.split_once("new metadata leader: nats") {
                    rest.split('/').next().and_then(|n| n.parse().ok())
                } else {
                    None
                };
                // "[pid] 2026/12/07 14:25:24.661587 [INF] ...": the date and time sort.
                let when: String = line.split_whitespace().skip(1).take(2).collect();
                if let Some(l) = leader
                    && latest.as_ref().is_none_or(|(t, _)| when > *t)
                {
                    latest = Some((when, l));
                }
            }
        }
        latest.map(|(_, l)| l)
    }

    /// Asks JetStream to move the leadership of `stream` to host `i` (a step-down naming it as
    /// preferred, repeated until it leads): false when it would not within 30 s.
    pub(crate) fn make_leader(&self, stream: &str, i: usize) -> bool {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if self.leader_of(stream) == Some(i) {
                return true;
            }
            let body = json!({"placement": {"preferred": format!("nats{i}")}}).to_string();
            self.rt.block_on(async {
                let subject = format!("$JS.API.STREAM.LEADER.STEPDOWN.{stream}");
                let c = self.admin().client();
                tokio::time::timeout(Duration::from_secs(3), c.request(subject, body.into()))
                    .await
                    .ok();
            });
            std::thread::sleep(Duration::from_millis(1500));
        }
        false
    }

    fn admin(&self) -> &async_nats::jetstream::Context {
        self.admin.as_ref().expect("NATS started")
    }

    /// A NATS connection as the operator (`admin`).
    pub(crate) fn admin_client(&self) -> async_nats::Client {
        self.admin().client()
    }

    /// Runs `f` on the rig's runtime.
    pub(crate) fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    /// Stops every node cleanly (SIGTERM) and runs `amberdb check` on each of their partition
    /// stores: the reports of any that is not clean.
    pub(crate) fn stop_and_check(&mut self) -> Vec<String> {
        for i in 0..3 {
            if let Some(pid) = self.node_pid(i) {
                World::signal(pid, "-CONT");
            }
            self.stop_node(i);
        }
        let mut bad = Vec::new();
        for i in 0..3 {
            let mut stores: Vec<PathBuf> = std::fs::read_dir(self.node_dir(i))
                .unwrap()
                .flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with("p-"))
                })
                .collect();
            stores.sort();
            for store in stores {
                let out = amberdb()
                    .args(["check", "--data-dir"])
                    .arg(&store)
                    .output()
                    .unwrap();
                if !out.status.success() {
                    bad.push(format!(
                        "{}: {}{}",
                        store.display(),
                        text(&out.stdout),
                        text(&out.stderr)
                    ));
                }
            }
        }
        bad
    }
}

impl Drop for World {
    fn drop(&mut self) {
        for i in 0..3 {
            if let Some(pid) = self.node_pid(i) {
                World::signal(pid, "-CONT");
            }
            if let Some(pid) = self.nats_pid(i) {
                World::signal(pid, "-CONT");
            }
            self.kill_node(i);
            self.kill_nats(i);
        }
        if std::thread::panicking() || std::env::var_os("AMBERDB_RIG_KEEP").is_some() {
            let old = std::mem::replace(&mut self.dir, tempfile::tempdir().unwrap());
            eprintln!("rig: logs and data kept in {}", old.keep().display());
        }
    }
}
