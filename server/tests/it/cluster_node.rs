//! Cluster nodes as a user runs them (`docs/cluster.md`, "The node" and "Routing"): `amberdb
//! cluster init`, then three `amberdb serve --cluster` processes on one NATS server. The Rust
//! client, given every node as a seed, routes each write to its partition's owner by
//! following `moved`; a replica answers a read once it has applied the write's `seq`; when the
//! node that owns partitions is killed, the others take them over and every acknowledged write
//! is on every live node, and on the killed one once it is back.

use super::cluster::{Nats, start_nats_with_users};
use crate::http::Http;
use crate::support::{Server, amberdb, text};
use amberdb::{HashingEmbedder, NewMemory, Store, StoreOptions};
use amberdb_server::client::Client;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) const PARTITIONS: u32 = 4;

pub(crate) fn init(nats: &Nats) {
    let out = init_command(nats);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// `amberdb cluster init` of `PARTITIONS` partitions, one replica, the hashing embedder.
fn init_command(nats: &Nats) -> std::process::Output {
    amberdb()
        .args([
            "cluster",
            "init",
            "--nats",
            &nats.as_user("admin"),
            "--partitions",
        ])
        .arg(PARTITIONS.to_string())
        // One server, the tests' own: they vouch for its settings.
        .args([
            "--replicas",
            "1",
            "--embedder",
            "hashing",
            "--unchecked-servers",
        ])
        .output()
        .unwrap()
}

pub(crate) fn node(dir: &std::path::Path, nats: &Nats, name: &str) -> Server {
    Server::start(dir, &["--cluster", &nats.as_user(name), "--node", name])
}

/// NATS with the cluster initialised, and `n` nodes `n0`, `n1`, ... in a new directory.
pub(crate) fn cluster_of(n: usize) -> (Nats, tempfile::TempDir, Vec<Server>) {
    let nats = start_nats_with_users();
    init(&nats);
    let dir = tempfile::tempdir().unwrap();
    let nodes = (0..n)
        .map(|i| node(&dir.path().join(format!("n{i}")), &nats, &format!("n{i}")))
        .collect();
    (nats, dir, nodes)
}

/// Partition → owner, as `node`'s STATS says.
fn owners(node: &Server) -> BTreeMap<u64, String> {
    let stats = node.client().ok("STATS", json!({}));
    stats["cluster"]["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["role"] == "owner" || p["owner"].is_string())
        .map(|p| {
            (
                p["partition"].as_u64().unwrap(),
                p["owner"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// Waits until every partition has an owner that `node` knows of.
pub(crate) fn all_owned(node: &Server) -> BTreeMap<u64, String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let o = owners(node);
        if o.len() == PARTITIONS as usize {
            return o;
        }
        assert!(Instant::now() < deadline, "partitions unowned: {o:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until `node` says `name` owns partition `p` (a lease's change reaches each node's
/// view within a tick).
fn owner_becomes(node: &Server, p: u64, name: &str) {
    let deadline = Instant::now() + Duration::from_secs(40);
    while owners(node).get(&p).map(String::as_str) != Some(name) {
        assert!(
            Instant::now() < deadline,
            "partition {p} not owned by {name}: {:?}",
            owners(node)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A user of partition `p`: the first `<prefix><p>-<i>` that hashes there.
pub(crate) fn user_in(p: u32, prefix: &str) -> String {
    (0..)
        .map(|i| format!("{prefix}{p}-{i}"))
        .find(|u| amberdb::cluster::partition_of_user(u, PARTITIONS) == p)
        .unwrap()
}

/// `node` holds memory `id` with `content` once it has applied `seq` of the id's partition.
fn holds(node: &Server, id: u64, seq: u64, content: &str) {
    let got = node
        .client()
        .ok("GET", json!({"memory_id": id, "min_seq": seq}));
    assert_eq!(got["memory"]["content"], content, "memory {id}");
}

#[test]
fn three_nodes_route_writes_to_their_owners_and_lose_nothing_when_an_owner_dies() {
    let nats = start_nats_with_users();
    init(&nats);
    let dir = tempfile::tempdir().unwrap();
    let mut nodes: Vec<Option<Server>> = (0..3)
        .map(|i| {
            Some(node(
                &dir.path().join(format!("n{i}")),
                &nats,
                &format!("n{i}"),
            ))
        })
        .collect();
    let live = |nodes: &[Option<Server>]| -> Vec<String> {
        nodes.iter().flatten().map(|s| s.addr.to_string()).collect()
    };
    let seeds = live(&nodes);
    let before = all_owned(nodes[0].as_ref().unwrap());
    // The client knows no owner yet: every write goes to the first seed, which answers
    // `moved` for partitions it does not own; the client follows and remembers.
    let mut client = Client::connect(&seeds, None, Some(Duration::from_secs(20))).unwrap();
    let mut acked: Vec<(u64, u64, String)> = Vec::new();
    for i in 0..40 {
        let content = format!("user {} fact {i}", i % 8);
        let r = client
            .call(
                "STORE",
                &json!({"user_id": format!("user-{}", i % 8), "content": content}),
            )
            .expect("stored");
        acked.push((
            r["memory_id"].as_u64().unwrap(),
            r["seq"].as_u64().unwrap(),
            content,
        ));
    }
    let partitions: std::collections::BTreeSet<u64> = acked
        .iter()
        .map(|(id, _, _)| amberdb::cluster::partition_of_id(*id))
        .collect();
    assert!(
        partitions.len() >= 2,
        "8 users fill several partitions: {partitions:?}"
    );
    // Every node holds every write once it has applied its seq: owners and replicas alike.
    for node in nodes.iter().flatten() {
        for (id, seq, content) in &acked {
            holds(node, *id, *seq, content);
        }
    }
    // A write sent to a node that does not own its partition is refused `moved` over HTTP
    // too: 421, naming the owner's address; nothing ran.
    let (replica, p, owner) = nodes
        .iter()
        .enumerate()
        .find_map(|(i, s)| {
            let s = s.as_ref()?;
            let name = format!("n{i}");
            before
                .iter()
                .find(|(_, o)| **o != name)
                .map(|(p, o)| (s, *p, o.clone()))
        })
        .expect("with three nodes, some node does not own some partition");
    let user = (0..)
        .map(|i| format!("probe-{i}"))
        .find(|u| u64::from(amberdb::cluster::partition_of_user(u, PARTITIONS)) == p)
        .unwrap();
    let r = Http::connect(replica.http.unwrap()).post(
        "/v1/commands/STORE_MEMORY",
        json!({"user_id": user, "content": "sent to a replica"}),
    );
    assert_eq!(r.status, 421, "{}", String::from_utf8_lossy(&r.body));
    let body = r.json();
    assert_eq!(body["code"], "moved");
    assert_eq!(body["owner"], owner.as_str());
    assert_eq!(body["partition"], p);
    assert!(body["address"].is_string(), "{body}");
    // `cluster status` shows, per partition, where every node's replica is and its lag.
    std::thread::sleep(Duration::from_millis(1500));
    let out = amberdb()
        .args(["cluster", "status", "--nats", &nats.as_user("admin")])
        .output()
        .unwrap();
    let status = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    for p in 0..PARTITIONS {
        let line = status
            .lines()
            .find(|l| l.starts_with(&format!("partition {p}:")))
            .unwrap_or_else(|| panic!("{status}"));
        for n in ["n0", "n1", "n2"] {
            assert!(line.contains(&format!("{n} at ")), "{line}");
        }
        assert!(line.contains("(lag "), "{line}");
    }
    // Kill -9 the node that owns the most partitions.
    let mut count: BTreeMap<&str, usize> = BTreeMap::new();
    for o in before.values() {
        *count.entry(o).or_default() += 1;
    }
    let dead = count
        .iter()
        .max_by_key(|(_, n)| **n)
        .map(|(o, _)| (*o).to_owned())
        .unwrap();
    let dead_index: usize = dead.trim_start_matches('n').parse().unwrap();
    let dead_partition = *before.iter().find(|(_, o)| **o == dead).unwrap().0;
    let dead_user = (0..)
        .map(|i| format!("after-{i}"))
        .find(|u| u64::from(amberdb::cluster::partition_of_user(u, PARTITIONS)) == dead_partition)
        .unwrap();
    nodes[dead_index].take().unwrap().kill9();
    let killed = Instant::now();
    let r = client
        .call(
            "STORE",
            &json!({"user_id": dead_user, "content": "the first write after the owner died"}),
        )
        .expect("the cluster fails over within the client's wait");
    let failover = killed.elapsed();
    eprintln!(
        "owner {dead} (partitions {:?}) killed: next acknowledged write on partition {dead_partition} after {:.2} s",
        before
            .iter()
            .filter(|(_, o)| **o == dead)
            .map(|(p, _)| p)
            .collect::<Vec<_>>(),
        failover.as_secs_f64()
    );
    acked.push((
        r["memory_id"].as_u64().unwrap(),
        r["seq"].as_u64().unwrap(),
        "the first write after the owner died".into(),
    ));
    for i in 0..16 {
        let content = format!("after the failover {i}");
        let r = client
            .call(
                "STORE",
                &json!({"user_id": format!("user-{}", i % 8), "content": content}),
            )
            .expect("stored after the failover");
        acked.push((
            r["memory_id"].as_u64().unwrap(),
            r["seq"].as_u64().unwrap(),
            content,
        ));
    }
    let after = all_owned(nodes.iter().flatten().next().unwrap());
    assert!(
        !after.values().any(|o| *o == dead),
        "the dead node owns nothing: {after:?}"
    );
    for node in nodes.iter().flatten() {
        for (id, seq, content) in &acked {
            holds(node, *id, *seq, content);
        }
    }
    // Back from the dead with its directory: a standby that catches up from the stream.
    let back = node(&dir.path().join(format!("n{dead_index}")), &nats, &dead);
    for (id, seq, content) in &acked {
        holds(&back, *id, *seq, content);
    }
    // Nothing twice: every partition holds as many memories as were acknowledged in it.
    let stats = back.client().ok("STATS", json!({}));
    let held: u64 = stats["cluster"]["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["memories"].as_u64().unwrap())
        .sum();
    assert_eq!(held, acked.len() as u64, "{stats}");
    // Ownership comes back with it: its preferred partition (its place among the three by
    // name) is handed over once it has been live for a while (docs/cluster.md, "Placement").
    let returned = Instant::now();
    owner_becomes(&back, dead_index as u64, &dead);
    eprintln!(
        "rebalance: {dead} owned partition {dead_index} again {:.2} s after it came back",
        returned.elapsed().as_secs_f64()
    );
}

#[test]
fn commands_that_span_every_partition_run_on_every_store_of_the_node_they_reach() {
    let (_nats, dir, nodes) = cluster_of(2);
    all_owned(&nodes[0]);
    let seeds: Vec<String> = nodes.iter().map(|s| s.addr.to_string()).collect();
    let mut client = Client::connect(&seeds, None, Some(Duration::from_secs(20))).unwrap();
    // A user in every partition, two memories each, one of them deleted.
    let users: Vec<String> = (0..PARTITIONS).map(|p| user_in(p, "span")).collect();
    let mut last = BTreeMap::new();
    for (p, user) in users.iter().enumerate() {
        for n in 0..2 {
            let r = client
                .call(
                    "STORE",
                    &json!({"user_id": user, "content": format!("{user} fact {n}")}),
                )
                .unwrap();
            last.insert(
                p as u64,
                (r["memory_id"].as_u64().unwrap(), r["seq"].as_u64().unwrap()),
            );
        }
        let (id, _) = last[&(p as u64)];
        let r = client.call("DELETE", &json!({"memory_id": id})).unwrap();
        last.insert(p as u64, (id, r["seq"].as_u64().unwrap()));
    }
    for node in &nodes {
        // Every replica has applied every partition's last write.
        for (p, (_, seq)) in &last {
            let user = &users[usize::try_from(*p).unwrap()];
            node.client().ok(
                "LIST_RECENT_MEMORIES",
                json!({"user_id": user, "min_seq": seq}),
            );
        }
        let mut c = node.client();
        let listed = c.ok("LIST_USERS", json!({}));
        assert_eq!(listed["count"], PARTITIONS, "{listed}");
        let names: std::collections::BTreeSet<String> =
            (listed["users"].as_array().unwrap().iter())
                .map(|u| u["user_id"].as_str().unwrap().to_owned())
                .collect();
        assert_eq!(names, users.iter().cloned().collect(), "{listed}");
        // BACKUP: one whole store per partition, each checked clean.
        let dest = dir.path().join(format!("backup-{}", node.addr.port()));
        let b = c.ok("BACKUP", json!({"dest": dest.display().to_string()}));
        let parts = b["backup"]["partitions"].as_array().unwrap();
        assert_eq!(parts.len(), PARTITIONS as usize, "{b}");
        for part in parts {
            assert_eq!(part["check"]["clean"], true, "{part}");
            let p = part["partition"].as_u64().unwrap();
            assert!(dest.join(format!("p-{p}")).join("IDENTITY").is_file());
        }
        // A dest that exists is refused and left as it was.
        let again = c.fails(
            "BACKUP",
            json!({"dest": dest.display().to_string()}),
            "invalid",
        );
        assert!(
            again["message"].as_str().unwrap().contains("exists"),
            "{again}"
        );
        // EXPORT: one export per partition; the live memories are every user's one.
        let out = dir.path().join(format!("export-{}", node.addr.port()));
        let e = c.ok("EXPORT", json!({"dest": out.display().to_string()}));
        let live: u64 = (e["export"]["partitions"].as_array().unwrap().iter())
            .map(|p| p["live"].as_u64().unwrap())
            .sum();
        assert_eq!(live, u64::from(PARTITIONS), "{e}");
        assert_eq!(
            std::fs::read_dir(&out).unwrap().count(),
            PARTITIONS as usize
        );
        // A bad argument fails on the first partition: nothing is left behind.
        let bad = dir.path().join(format!("bad-{}", node.addr.port()));
        c.fails(
            "EXPORT",
            json!({"dest": bad.display().to_string(), "bogus": 1}),
            "invalid",
        );
        assert!(!bad.exists(), "an error reply leaves nothing behind");
        // PURGE and MAINTENANCE act on this node's files and threads, owner or replica.
        let purged = c.ok("PURGE", json!({}));
        assert_eq!(
            purged["purged"]["partitions"].as_array().unwrap().len(),
            PARTITIONS as usize,
            "{purged}"
        );
        let m = c.ok("MAINTENANCE", json!({"paused": true}));
        assert!(
            (m["maintenance"]["partitions"].as_array().unwrap().iter())
                .all(|p| p["paused"] == true),
            "{m}"
        );
        c.ok("MAINTENANCE", json!({"paused": false}));
        for (command, why) in [
            ("IMPORT", "cluster import"),
            ("REEMBED", "not in cluster mode"),
        ] {
            let f = c.fails(command, json!({"source": "/nonexistent"}), "invalid");
            assert!(f["message"].as_str().unwrap().contains(why), "{f}");
        }
        let f = c.fails("LIST_USERS", json!({"min_seq": 1}), "invalid");
        assert!(f["message"].as_str().unwrap().contains("min_seq"), "{f}");
        // Nothing deleted came back, nothing was lost.
        let held: u64 = (0..u64::from(PARTITIONS))
            .map(|p| memories_in(node, p))
            .sum();
        assert_eq!(held, u64::from(PARTITIONS));
    }
}

/// `amberdb serve` with `args`: its exit status and stderr, once it exits (within 30 s).
fn refused_start(dir: &std::path::Path, args: &[&str]) -> String {
    let out = amberdb()
        .args([
            "serve",
            "--port",
            "0",
            "--embedder",
            "hashing",
            "--data-dir",
        ])
        .arg(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(!out.status.success(), "{args:?} started");
    text(&out.stderr)
}

#[test]
fn a_node_that_cannot_join_says_why_and_touches_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("node");
    let dead = format!("nats://127.0.0.1:{}", super::cluster::free_port());
    let why = refused_start(&data, &["--cluster", &dead]);
    assert!(why.contains("--cluster needs --node"), "{why}");
    let why = refused_start(&data, &["--cluster", &dead, "--node", "a b"]);
    assert!(why.contains("a node name is 1 to 64 letters"), "{why}");
    let why = refused_start(&data, &["--node", "n0"]);
    assert!(why.contains("--cluster"), "{why}");
    let why = refused_start(&data, &["--cluster", &dead, "--node", "n0"]);
    assert!(why.contains("connecting to NATS"), "{why}");
    let why = refused_start(
        &data,
        &["--cluster", "nats://127.0.0.1:notaport", "--node", "n0"],
    );
    assert!(why.contains("the NATS URL"), "{why}");
    let nats = start_nats_with_users();
    // NATS has users: no credentials, a wrong password, refused; the password never shown.
    let why = refused_start(&data, &["--cluster", &nats.url, "--node", "n0"]);
    assert!(why.contains("connecting to NATS"), "{why}");
    let wrong = nats.url.replace("nats://", "nats://n0:not-the-password@");
    let why = refused_start(&data, &["--cluster", &wrong, "--node", "n0"]);
    assert!(why.contains("connecting to NATS"), "{why}");
    assert!(!why.contains("not-the-password"), "{why}");
    let why = refused_start(&data, &["--cluster", &nats.as_user("n0"), "--node", "n0"]);
    assert!(why.contains("cluster init"), "not initialised: {why}");
    assert!(!why.contains(&super::cluster::password("n0")), "{why}");
    // None of the refused starts made a store.
    assert!(!data.exists() || std::fs::read_dir(&data).unwrap().next().is_none());
}

/// Memories partition `p` holds on `node`.
fn memories_in(node: &Server, p: u64) -> u64 {
    let stats = node.client().ok("STATS", json!({}));
    stats["cluster"]["partitions"][usize::try_from(p).unwrap()]["memories"]
        .as_u64()
        .unwrap()
}

#[test]
fn an_owner_paused_past_its_lease_acknowledges_nothing_and_comes_back_a_standby() {
    let (_nats, _dir, nodes) = cluster_of(3);
    let owned = all_owned(&nodes[0]);
    let (p, owner) = owned.iter().next().map(|(p, o)| (*p, o.clone())).unwrap();
    let paused: usize = owner.trim_start_matches('n').parse().unwrap();
    let user = (0..)
        .map(|i| format!("paused-{i}"))
        .find(|u| u64::from(amberdb::cluster::partition_of_user(u, PARTITIONS)) == p)
        .unwrap();
    let seeds: Vec<String> = nodes.iter().map(|s| s.addr.to_string()).collect();
    // A 2 s read timeout: a request to the paused owner is given up and sent elsewhere.
    let mut client = Client::connect(&seeds, None, Some(Duration::from_secs(2))).unwrap();
    client.set_failover_wait(Duration::from_secs(20));
    let mut acked = Vec::new();
    let store = |client: &mut Client, content: String| stored(client, &user, content);
    for i in 0..10 {
        acked.push(store(&mut client, format!("before the pause {i}")));
    }
    let pid = nodes[paused].child.id().to_string();
    let signal = |s: &str| {
        assert!(
            std::process::Command::new("kill")
                .args([s, &pid])
                .status()
                .unwrap()
                .success()
        );
    };
    signal("-STOP");
    let paused_at = Instant::now();
    // The first write goes to the paused owner (the client knows it), times out, and is sent
    // again, with its request id, until another node owns the partition.
    for i in 0..10 {
        acked.push(store(&mut client, format!("during the pause {i}")));
    }
    eprintln!(
        "owner {owner} paused: 10 writes acknowledged by another node {:.2} s later",
        paused_at.elapsed().as_secs_f64()
    );
    signal("-CONT");
    // Back, it finds its lease taken and its stream moved on: a standby, never an owner that
    // acknowledges. Its first write after the pause (read from the socket it was sent on)
    // could not have been acknowledged: that attempt was answered by the new owner.
    let back = &nodes[paused];
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let stats = back.client().ok("STATS", json!({}));
        let role = stats["cluster"]["partitions"][usize::try_from(p).unwrap()]["role"].clone();
        if role == "standby" {
            break;
        }
        assert!(Instant::now() < deadline, "still {role} after the pause");
        std::thread::sleep(Duration::from_millis(100));
    }
    // Refused, never run: `moved` once it has read the new lease (at once, or `unavailable`
    // naming the partition for the moment before).
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let refused = back.client().call(
            "STORE",
            json!({"user_id": user, "content": "sent to the old owner"}),
        );
        assert_eq!(refused["ok"], false, "{refused}");
        if refused["code"] == "moved" {
            assert_ne!(refused["owner"], owner.as_str(), "{refused}");
            break;
        }
        assert_eq!(refused["partition"], p, "{refused}");
        assert!(Instant::now() < deadline, "{refused}");
        std::thread::sleep(Duration::from_millis(50));
    }
    for node in &nodes {
        for (id, seq, content) in &acked {
            holds(node, *id, *seq, content);
        }
        assert_eq!(
            memories_in(node, p),
            acked.len() as u64,
            "none twice, none extra"
        );
    }
}

#[test]
fn owners_killed_in_a_row_lose_no_acknowledged_write() {
    let cycles: usize = std::env::var("AMBERDB_CLUSTER_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let seed = crate::kill::seed_from("AMBERDB_CLUSTER_SEED");
    eprintln!(
        "cluster kills: seed {seed} (AMBERDB_CLUSTER_SEED={seed} repeats it), {cycles} cycles"
    );
    let mut rng = crate::kill::Rng(seed);
    let nats = start_nats_with_users();
    init(&nats);
    let dir = tempfile::tempdir().unwrap();
    let mut nodes: Vec<Server> = (0..3)
        .map(|i| node(&dir.path().join(format!("n{i}")), &nats, &format!("n{i}")))
        .collect();
    // A node comes back where it was: the same directory, name and port.
    let restart = |i: usize, port: u16| {
        Server::start(
            &dir.path().join(format!("n{i}")),
            &[
                "--cluster",
                &nats.as_user(&format!("n{i}")),
                "--node",
                &format!("n{i}"),
                "--port",
                &port.to_string(),
            ],
        )
    };
    let seeds: Vec<String> = nodes.iter().map(|s| s.addr.to_string()).collect();
    let mut client = Client::connect(&seeds, None, Some(Duration::from_secs(5))).unwrap();
    client.set_failover_wait(Duration::from_secs(30));
    let users: Vec<String> = (0..PARTITIONS).map(|p| user_in(p, "k")).collect();
    let mut acked: Vec<(u64, u64, String)> = Vec::new();
    let store = |client: &mut Client, p: usize, n: usize| {
        stored(client, &users[p], format!("partition {p} write {n}"))
    };
    let mut gaps = Vec::new();
    let mut n = 0;
    for _ in 0..cycles {
        let owned = all_owned(&nodes[0]);
        for p in 0..PARTITIONS as usize {
            acked.push(store(&mut client, p, n));
            n += 1;
        }
        let p = usize::try_from(rng.next() % u64::from(PARTITIONS)).unwrap();
        let victim: usize = owned[&(p as u64)].trim_start_matches('n').parse().unwrap();
        nodes[victim].child.kill().unwrap();
        nodes[victim].child.wait().unwrap();
        let killed = Instant::now();
        acked.push(store(&mut client, p, n));
        n += 1;
        gaps.push(killed.elapsed().as_secs_f64());
        let port = nodes[victim].addr.port();
        nodes[victim] = restart(victim, port);
    }
    gaps.sort_by(f64::total_cmp);
    let at = |q: f64| gaps[((gaps.len() - 1) as f64 * q).round() as usize];
    eprintln!(
        "{cycles} owner kills: owner death to the next acknowledged write p50 {:.2} s, p95 {:.2} s, max {:.2} s; {} acknowledged writes",
        at(0.5),
        at(0.95),
        at(1.0),
        acked.len()
    );
    every_write_held_once(&nodes, &acked);
}

/// STOREs `content` for `user` through `client`: the memory id, position and content.
fn stored(client: &mut Client, user: &str, content: String) -> (u64, u64, String) {
    let r = client
        .call("STORE", &json!({"user_id": user, "content": content}))
        .expect("stored");
    (
        r["memory_id"].as_u64().unwrap(),
        r["seq"].as_u64().unwrap(),
        content,
    )
}

/// Every node holds every acknowledged write (memory id, position, content), each partition as
/// many memories as were acknowledged in it, and every replica the same history.
fn every_write_held_once(nodes: &[Server], acked: &[(u64, u64, String)]) {
    for node in nodes {
        for (id, seq, content) in acked {
            holds(node, *id, *seq, content);
        }
        let held: u64 = (0..u64::from(PARTITIONS))
            .map(|p| memories_in(node, p))
            .sum();
        assert_eq!(held, acked.len() as u64, "none lost, none twice");
    }
    same_history(nodes);
}

/// Waits until every node holds every partition at the same position with the same running
/// CRC (`docs/cluster.md`, "Running CRC"), as their STATS say.
fn same_history(nodes: &[Server]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let views: Vec<Vec<(Value, Value)>> = nodes
            .iter()
            .map(|n| {
                let stats = n.client().ok("STATS", json!({}));
                (stats["cluster"]["partitions"].as_array().unwrap().iter())
                    .map(|p| (p["position"].clone(), p["running_crc"].clone()))
                    .collect()
            })
            .collect();
        let known = views[0].iter().all(|(_, crc)| crc.is_string());
        if known && views.iter().all(|v| *v == views[0]) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "replicas differ after 30 s: {views:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `amberdb cluster …` with `args`: its exit status, stdout and stderr.
pub(crate) fn cluster_command(nats: &Nats, args: &[&str]) -> (bool, String, String) {
    let out = amberdb()
        .arg("cluster")
        .args(args)
        .args(["--nats", &nats.as_user("admin")])
        .output()
        .unwrap();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

#[test]
fn cluster_move_hands_a_partition_to_the_pinned_node_and_unpinned_it_goes_back() {
    let (nats, _dir, nodes) = cluster_of(2);
    // Partition 2 prefers n0 (2 mod 2 = 0).
    let before = all_owned(&nodes[0]);
    assert_eq!(before[&2], "n0", "{before:?}");
    let seeds: Vec<String> = nodes.iter().map(|s| s.addr.to_string()).collect();
    let mut client = Client::connect(&seeds, None, Some(Duration::from_secs(20))).unwrap();
    client.set_failover_wait(Duration::from_secs(30));
    let user = user_in(2, "moved");
    let mut acked = Vec::new();
    let mut write = |client: &mut Client, n: usize| {
        acked.push(stored(client, &user, format!("{user} write {n}")));
    };
    write(&mut client, 0);
    // Refused, naming why: a node that never registered, a partition out of range.
    let (ok, _, err) = cluster_command(&nats, &["move", "--partition", "2", "--to", "n9"]);
    assert!(!ok && err.contains("n0, n1"), "{err}");
    let (ok, _, err) = cluster_command(&nats, &["move", "--partition", "4", "--to", "n1"]);
    assert!(!ok && err.contains("0 to 3"), "{err}");
    let moving = Instant::now();
    let (ok, out, err) = cluster_command(&nats, &["move", "--partition", "2", "--to", "n1"]);
    assert!(ok, "{out}{err}");
    assert!(out.contains("pinned to n1, which owns it"), "{out}");
    eprintln!(
        "cluster move: n1 owned partition 2 after {:.2} s",
        moving.elapsed().as_secs_f64()
    );
    for node in &nodes {
        owner_becomes(node, 2, "n1");
    }
    let (_, status, _) = cluster_command(&nats, &["status"]);
    assert!(status.contains("pinned to n1"), "{status}");
    // The client follows the partition to its new owner.
    write(&mut client, 1);
    // Unpinned, it goes back to its preferred node once n1 has held it for a while.
    let (ok, out, err) = cluster_command(&nats, &["move", "--partition", "2", "--unpin"]);
    assert!(ok, "{out}{err}");
    let deadline = Instant::now() + Duration::from_secs(40);
    while owners(&nodes[1]).get(&2).map(String::as_str) != Some("n0") {
        assert!(
            Instant::now() < deadline,
            "partition 2 did not go back to n0"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    write(&mut client, 2);
    for node in &nodes {
        for (id, seq, content) in &acked {
            holds(node, *id, *seq, content);
        }
        assert_eq!(
            memories_in(node, 2),
            acked.len() as u64,
            "none lost, none twice"
        );
    }
    same_history(&nodes);
}

#[test]
fn a_new_node_starts_from_the_shipped_checkpoints_and_holds_everything() {
    let (nats, dir, mut nodes) = cluster_of(2);
    all_owned(&nodes[0]);
    let seeds: Vec<String> = nodes.iter().map(|s| s.addr.to_string()).collect();
    let mut client = Client::connect(&seeds, None, Some(Duration::from_secs(20))).unwrap();
    let mut acked = Vec::new();
    let write = |client: &mut Client, p: u32, n: usize| {
        stored(
            client,
            &user_in(p, "boot"),
            format!("partition {p} write {n}"),
        )
    };
    for p in 0..PARTITIONS {
        for n in 0..3 {
            acked.push(write(&mut client, p, n));
        }
    }
    // A memory deleted before the checkpoints: once they are shipped and the streams trimmed,
    // its text is in no file of any node or of NATS.
    let secret = "the deleted memory's text, never to be found again";
    let (id, _, _) = stored(&mut client, &user_in(0, "boot"), secret.to_owned());
    client.call("DELETE", &json!({"memory_id": id})).unwrap();
    // A purge checkpoints every store; each owner ships its checkpoint.
    nodes[0].client().ok("PURGE", json!({}));
    nodes[1].client().ok("PURGE", json!({}));
    wait_for_status(&nats, "every partition shipped", |status| {
        status.matches("shipped checkpoint").count() == PARTITIONS as usize
    });
    // The stream's tail after the shipped checkpoints.
    for p in 0..PARTITIONS {
        acked.push(write(&mut client, p, 3));
    }
    let fresh = node(&dir.path().join("n2"), &nats, "n2");
    let stats = fresh.client().ok("STATS", json!({}));
    for part in stats["cluster"]["partitions"].as_array().unwrap() {
        assert!(
            part["bootstrapped_from"].as_u64().is_some_and(|s| s > 0),
            "{part}"
        );
    }
    nodes.push(fresh);
    every_write_held_once(&nodes, &acked);
    // Every stream is trimmed below the shipped checkpoints.
    let trimmed = |status: &str| {
        status
            .lines()
            .filter(|l| l.starts_with("partition "))
            .all(|l| !l.contains("first position 1,") && !l.contains("first position 0,"))
    };
    wait_for_status(&nats, "every stream trimmed", trimmed);
    let mut holding = Vec::new();
    for root in [nats.store_dir(), dir.path().to_path_buf()] {
        files_holding(&root, secret.as_bytes(), &mut holding);
    }
    assert!(
        holding.is_empty(),
        "the deleted text is still in {holding:?}"
    );
    // A node down while the others write and checkpoint again finds its streams trimmed past
    // its stores: it moves them aside and starts from the shipped checkpoints.
    let down = nodes.pop().unwrap();
    down.kill9();
    for p in 0..PARTITIONS {
        acked.push(write(&mut client, p, 4));
    }
    nodes[0].client().ok("PURGE", json!({}));
    nodes[1].client().ok("PURGE", json!({}));
    let before = cluster_command(&nats, &["status"]).1;
    let firsts = |status: &str| -> Vec<String> {
        (status.lines())
            .filter_map(|l| {
                Some(
                    l.split("first position ")
                        .nth(1)?
                        .split(',')
                        .next()?
                        .to_owned(),
                )
            })
            .collect()
    };
    wait_for_status(&nats, "streams trimmed again", |status| {
        firsts(status)
            .iter()
            .zip(firsts(&before))
            .all(|(now, then)| *now != then)
    });
    let back = node(&dir.path().join("n2"), &nats, "n2");
    let aside = std::fs::read_dir(dir.path().join("n2"))
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().contains(".behind-"))
        .count();
    assert!(
        aside > 0,
        "a store the stream was trimmed past is moved aside"
    );
    nodes.push(back);
    every_write_held_once(&nodes, &acked);
}

/// Every file under `root` that holds `needle`.
fn files_holding(root: &std::path::Path, needle: &[u8], out: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for e in entries.filter_map(Result::ok) {
        let path = e.path();
        if path.is_dir() {
            files_holding(&path, needle, out);
        } else if std::fs::read(&path).is_ok_and(|b| b.windows(needle.len()).any(|w| w == needle)) {
            out.push(path);
        }
    }
}

/// Waits (at most 60 s) until `cluster status` satisfies `done`.
fn wait_for_status(nats: &Nats, what: &str, done: impl Fn(&str) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, status, _) = cluster_command(nats, &["status"]);
        if done(&status) {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: {status}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// A stream that begins past the shipped checkpoint (fault 87 of the long rig run: a leader's
/// damaged snapshot lost the stream's first messages, docs/reliability.md) leaves a new node
/// unable to follow it from the shipped checkpoint. The owner, which holds that history,
/// checkpoints and ships past the stream's beginning, and a new node starts from that and
/// holds every write. On the build before, nothing newer was shipped until the owner's next
/// checkpoint on its own schedule, and a new node refused to start ("its leader lost
/// messages").
#[test]
fn a_stream_that_begins_past_the_shipped_checkpoint_is_shipped_past_again() {
    use amberdb_server::cluster::{connect_nats, stream};
    let (nats, dir, mut nodes) = cluster_of(1);
    all_owned(&nodes[0]);
    let seeds = vec![nodes[0].addr.to_string()];
    let mut client = Client::connect(&seeds, None, Some(Duration::from_secs(20))).unwrap();
    let user = user_in(0, "begin");
    // Texts no hook relates to another (a number changed would supersede).
    let mut texts = [
        "owls hunt at night",
        "copper conducts electricity well",
        "the ferry leaves from pier nine",
        "basil needs warm soil",
        "the invoice is due in March",
        "a violin has four strings",
        "glaciers carve deep valleys",
        "the router reboots every Sunday",
    ]
    .into_iter()
    .map(str::to_owned);
    let mut acked = Vec::new();
    for _ in 0..3 {
        acked.push(stored(&mut client, &user, texts.next().unwrap()));
    }
    // A purge checkpoints every store; the owner ships them.
    nodes[0].client().ok("PURGE", json!({}));
    wait_for_status(&nats, "every partition shipped", |status| {
        status.matches("shipped checkpoint").count() == PARTITIONS as usize
    });
    for text in texts {
        acked.push(stored(&mut client, &user, text));
    }
    // The stream loses every message but its last two, as from a leader whose snapshot was
    // damaged: it begins past the shipped checkpoint.
    let first = tokio::runtime::Runtime::new().unwrap().block_on(async {
        let js = async_nats::jetstream::new(connect_nats(&nats.as_user("n0")).await.unwrap());
        let s = js.get_stream(stream::stream_name(0)).await.unwrap();
        let last = stream::last_position(&s).await.unwrap();
        stream::trim(&s, last - 1).await.unwrap();
        stream::first_position(&s).await.unwrap()
    });
    // The owner ships past the stream's beginning within a few of its shipping rounds (the
    // build before shipped nothing new: its store had no newer checkpoint).
    let shipped_past = |status: &str| {
        status
            .lines()
            .find(|l| l.starts_with("partition 0"))
            .and_then(|l| l.split("shipped checkpoint ").nth(1))
            .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|n| n.parse::<u64>().ok())
            .is_some_and(|seq| seq + 1 >= first)
    };
    wait_for_status(
        &nats,
        "a checkpoint shipped past the stream's beginning",
        shipped_past,
    );
    let fresh = node(&dir.path().join("n1"), &nats, "n1");
    nodes.push(fresh);
    every_write_held_once(&nodes, &acked);
    let stats = nodes[1].client().ok("STATS", json!({}));
    let from = stats["cluster"]["partitions"][0]["bootstrapped_from"]
        .as_u64()
        .unwrap_or(0);
    assert!(
        from + 1 >= first,
        "partition 0 made from a checkpoint at {from}, the stream begins at {first}: {stats}"
    );
}

/// NATS as `scripts/cluster` runs it (`scripts/nats-permissions.conf`): the operator's
/// `admin` makes the cluster, reads it and pins partitions, but a frame, a purge, a delete, a
/// changed stream, a lease or a shipped checkpoint from it is refused, and the streams hold
/// what they held; the nodes, each with its own user, run the cluster (every other test here
/// runs on such a server, trims included).
#[test]
fn only_nodes_may_write_frames_leases_and_trims_into_nats() {
    use amberdb_server::cluster::{connect_nats, stream};
    let (nats, _dir, nodes) = cluster_of(1);
    all_owned(&nodes[0]);
    let mut c = nodes[0].client();
    c.ok(
        "STORE",
        json!({"user_id": user_in(0, "u"), "content": "held through it all"}),
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut admin =
            async_nats::jetstream::new(connect_nats(&nats.as_user("admin")).await.unwrap());
        admin.set_timeout(Duration::from_secs(2));
        let mut partition = admin.get_stream(stream::stream_name(0)).await.unwrap();
        let held = partition.info().await.unwrap().state.messages;
        assert!(held >= 2, "a claim and a write: {held}");
        let frame = admin
            .publish(stream::subject(0), "a forged frame".into())
            .await;
        let frame = match frame {
            Ok(ack) => ack.await.map(|_| ()),
            Err(e) => Err(e),
        };
        assert!(frame.is_err(), "admin published a frame");
        assert!(partition.purge().await.is_err(), "admin purged a stream");
        assert!(
            admin.delete_stream(stream::stream_name(0)).await.is_err(),
            "admin deleted a stream"
        );
        let mut changed = partition.info().await.unwrap().config.clone();
        changed.deny_delete = false;
        assert!(
            admin.update_stream(changed).await.is_err(),
            "admin changed a stream"
        );
        let kv = admin.get_key_value("amberdb_cluster").await.unwrap();
        let lease = kv.put("lease.0", "admin owns it".into()).await;
        assert!(lease.is_err(), "admin wrote a lease");
        let shipped = admin.get_object_store("amberdb_ckpt").await.unwrap();
        let forged = shipped.put("p-0/MANIFEST", &mut &b"{}"[..]).await;
        assert!(forged.is_err(), "admin wrote a shipped checkpoint");
        let after = partition.info().await.unwrap().state.messages;
        assert_eq!(after, held, "the stream holds what it held");
        // Without credentials nothing connects.
        assert!(connect_nats(&nats.url).await.is_err());
    });
    // The node still owns and writes, and admin still reads the cluster.
    let r = c.ok(
        "STORE",
        json!({"user_id": user_in(0, "u"), "content": "written after"}),
    );
    holds(
        &nodes[0],
        r["memory_id"].as_u64().unwrap(),
        r["seq"].as_u64().unwrap(),
        "written after",
    );
    let (ok, out, err) = cluster_command(&nats, &["status"]);
    assert!(ok && out.contains("owner: n0"), "{out}{err}");
}

#[test]
fn a_partition_stream_edited_to_break_a_promise_is_refused_naming_the_field() {
    use amberdb_server::cluster::stream;
    let nats = super::cluster::start_nats();
    init(&nats);
    // An operator (or another program) gives partition 1's stream an age limit: JetStream
    // would drop messages the replicas and every acknowledged write need.
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let js = async_nats::jetstream::new(async_nats::connect(&nats.url).await.unwrap());
        let mut s = js.get_stream(stream::stream_name(1)).await.unwrap();
        let mut config = s.info().await.unwrap().config.clone();
        config.max_age = Duration::from_secs(3600);
        js.update_stream(config).await.unwrap();
    });
    // `cluster init` again (it checks every stream) says which field and what it needs.
    let out = init_command(&nats);
    let why = text(&out.stderr);
    assert!(!out.status.success(), "init passed over the stream: {why}");
    assert!(
        why.contains("stream AMBERDB_P1: max_age is 3600s, and amberdb needs no limit"),
        "{why}"
    );
    // A node refuses to start on it, with the same words.
    let dir = tempfile::tempdir().unwrap();
    let why = refused_start(
        &dir.path().join("n0"),
        &["--cluster", &nats.as_user("n0"), "--node", "n0"],
    );
    assert!(why.contains("opening partition 1"), "{why}");
    assert!(why.contains("max_age is 3600s"), "{why}");
}

/// A partition stream that vanished (JetStream's snapshot corruption can delete one) is not
/// made again by a node: the node refuses to start naming the command that makes it, the
/// stream stays missing, and `cluster init` makes it again. The build before made it again,
/// empty, at every node's open.
#[test]
fn a_node_never_makes_a_missing_partition_stream_again() {
    use amberdb_server::cluster::stream;
    let nats = super::cluster::start_nats();
    init(&nats);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let js = rt.block_on(async {
        async_nats::jetstream::new(async_nats::connect(&nats.url).await.unwrap())
    });
    let exists =
        |p: u32| rt.block_on(async { js.get_stream(stream::stream_name(p)).await.is_ok() });
    assert!(
        rt.block_on(js.delete_stream(stream::stream_name(2)))
            .unwrap()
            .success
    );
    assert!(!exists(2));
    let dir = tempfile::tempdir().unwrap();
    let why = refused_start(
        &dir.path().join("n0"),
        &["--cluster", &nats.as_user("n0"), "--node", "n0"],
    );
    assert!(why.contains("opening partition 2"), "{why}");
    assert!(
        why.contains("AMBERDB_P2 is missing") && why.contains("amberdb cluster init"),
        "{why}"
    );
    assert!(!exists(2), "the node made the stream again");
    // The operator's command makes it again; the node starts.
    init(&nats);
    assert!(exists(2));
    let n0 = node(&dir.path().join("n0"), &nats, "n0");
    drop(n0);
}

/// A standby (`n1`) whose store holds what partition 0's stream lost, set aside.
struct Diverged {
    nats: Nats,
    dir: tempfile::TempDir,
    n1: Server,
    /// The users' memories by content, as the owner acknowledged them.
    ids: BTreeMap<String, u64>,
    /// The intruder's first write at the shorter end, and the running CRC after its last.
    intruder: (u64, Option<String>),
    /// STATS' view of partition 0 on `n1` once it took the stream's history.
    view: Value,
}

/// NATS with the cluster initialised and two nodes, `n0` and `n1` (in `<dir>/n0`, `<dir>/n1`),
/// partition 0 pinned to `n0` and owned by it.
fn partition_zero_on_n0() -> (Nats, tempfile::TempDir, Server, Server) {
    let nats = super::cluster::start_nats();
    init(&nats);
    let dir = tempfile::tempdir().unwrap();
    let n0 = node(&dir.path().join("n0"), &nats, "n0");
    let n1 = node(&dir.path().join("n1"), &nats, "n1");
    let (ok, out, err) = cluster_command(&nats, &["move", "--partition", "0", "--to", "n0"]);
    assert!(ok, "{out}{err}");
    owner_becomes(&n1, 0, "n0");
    (nats, dir, n0, n1)
}

/// Partition 0 as `n`'s STATS shows it.
fn partition_zero(n: &Server) -> Value {
    n.client().ok("STATS", json!({}))["cluster"]["partitions"][0].clone()
}

/// Waits (30 s at most) until `standby` has applied partition 0 as far as `owner`.
fn caught_up(standby: &Server, owner: &Server) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while partition_zero(standby)["position"] != partition_zero(owner)["position"] {
        assert!(Instant::now() < deadline, "the standby never caught up");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The race the claim guard cannot always win (docs/cluster.md, "A replica whose history is
/// not the stream's"), made by hand: `n0` owns partition 0 and `n1` stands by; five facts are
/// stored (and with `delete`, the first deleted), and `n1` applies all of it; `n0` dies, the
/// stream loses its last message (and with `delete`, the two last: the fifth fact and the
/// delete), and an intruder claims at the shorter end and writes `writes` times (as many as
/// were lost: the stream ends where `n1`'s log does). Returns once `n1` has the claimer's
/// position and running CRC.
fn diverged_standby(delete: bool, writes: u64) -> Diverged {
    use amberdb_server::cluster::lease::{Lease, key};
    use amberdb_server::cluster::stream::{JetStreamPublisher, follow, publish_claim, stream_name};
    let (nats, dir, n0, n1) = partition_zero_on_n0();
    let user = user_in(0, "d");
    let mut c = n0.client();
    let mut ids = BTreeMap::new();
    for i in 0..5 {
        let content = format!("fact {i}");
        let stored = c.ok("STORE", json!({"user_id": user, "content": content}));
        ids.insert(content, stored["memory_id"].as_u64().unwrap());
    }
    if delete {
        c.ok("DELETE", json!({"memory_id": ids["fact 0"]}));
    }
    caught_up(&n1, &n0);
    n0.kill9();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let handle = rt.handle().clone();
    let intruder = rt.block_on(async {
        let js = async_nats::jetstream::new(async_nats::connect(&nats.url).await.unwrap());
        let lost = if delete { 2 } else { 1 };
        let end = super::cluster::lose_last_messages(&js, 0, super::cluster::Lost::Cut, lost).await;
        let settings = amberdb_server::cluster::settings::load(&js).await.unwrap();
        let id = settings.store(0).unwrap();
        // A claimer that read the shorter end: its store follows the stream to it, takes the
        // lease, claims there and writes once.
        let stream = js.get_stream(stream_name(0)).await.unwrap();
        let t_dir = tempfile::tempdir().unwrap();
        let t = Store::open(
            t_dir.path(),
            StoreOptions::new(Arc::new(HashingEmbedder::with_dim(settings.dim as usize)))
                .store_id(id)
                .tail_from_stream(true),
        )
        .unwrap();
        follow(&t, &stream, Some(end - 1)).await.unwrap();
        let epoch = t.partition_log().claim.unwrap().epoch + 1;
        let lease = Lease {
            node: "intruder".into(),
            epoch,
            expires_ms: super::cluster::a_minute_from_now_ms(),
            handoff: None,
        };
        let kv = js
            .get_key_value(amberdb_server::cluster::settings::BUCKET)
            .await
            .unwrap();
        kv.put(key(0), serde_json::to_vec(&lease).unwrap().into())
            .await
            .unwrap();
        let at = publish_claim(&js, 0, &t, epoch, "intruder", id)
            .await
            .unwrap();
        assert_eq!(at, end, "the claim takes the first lost message's position");
        follow(&t, &stream, Some(at)).await.unwrap();
        t.own_partition(
            epoch,
            JetStreamPublisher::start(&handle, js.clone(), 0, id, at),
        )
        .unwrap();
        let stored = t
            .store(NewMemory::new("the intruder's write").user("d"))
            .unwrap();
        for i in 1..writes {
            t.store(NewMemory::new(format!("the intruder's write {i}")).user("d"))
                .unwrap();
        }
        let log = t.partition_log();
        assert_eq!(log.position, end + writes);
        t.close().unwrap();
        (
            stored.memory_id.0,
            log.running_crc.map(|c| format!("{c:08x}")),
        )
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    let view = loop {
        let view = partition_zero(&n1);
        if view["running_crc"].as_str() == intruder.1.as_deref() {
            break view;
        }
        assert!(
            Instant::now() < deadline,
            "n1 never took the stream's history: {view}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    Diverged {
        nats,
        dir,
        n1,
        ids,
        intruder,
        view,
    }
}

/// The standby of `diverged_standby` finds the claim it passed without, sets its store aside
/// (kept on disk), makes it again from the stream, and ends at the stream's position with the
/// same running CRC as the claimer.
#[test]
fn a_standby_whose_history_is_not_the_streams_sets_its_store_aside_and_follows_the_stream() {
    let d = diverged_standby(false, 1);
    let aside = d.view["set_aside"].as_str().expect("a store set aside");
    assert!(aside.contains("p-0.diverged-"), "{}", d.view);
    let kept: Vec<_> = std::fs::read_dir(d.dir.path().join("n1"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("p-0.diverged-"))
        .collect();
    assert_eq!(kept.len(), 1, "the diverged store is kept: {kept:?}");
    let got = d.n1.client().ok("GET", json!({"memory_id": d.intruder.0}));
    assert_eq!(got["memory"]["content"], "the intruder's write");
    assert_eq!(
        memories_in(&d.n1, 0),
        5,
        "four of the five, and the intruder's"
    );
}

/// The stream lost two messages and the claimer wrote one: the stream ends where the
/// standby's log does, so no message past its end shows the standby its history is not the
/// stream's. It compares its last frame with the stream's message at that position, sets its
/// store aside and takes the stream's history. On the build before, it served its own history
/// until the next write to the partition.
#[test]
fn a_standby_as_long_as_a_stream_of_another_history_still_takes_the_streams() {
    let d = diverged_standby(true, 1);
    assert!(
        d.view["set_aside"]
            .as_str()
            .is_some_and(|a| a.contains("p-0.diverged-")),
        "{}",
        d.view
    );
    let got = d.n1.client().ok("GET", json!({"memory_id": d.intruder.0}));
    assert_eq!(got["memory"]["content"], "the intruder's write");
}

/// `amberdb cluster repair` on the store `diverged_standby` set aside, which holds a STORE and
/// a DELETE the stream lost: the report lists both (the fifth fact to restore, the delete of
/// the first to send again) and changes nothing; `--apply` brings the fifth fact back and
/// deletes the first; a second `--apply` writes nothing. Wrong arguments are refused before
/// anything is read.
#[test]
fn a_set_aside_stores_lost_writes_are_listed_then_written_back_once() {
    let d = diverged_standby(true, 2);
    // The intruder is gone: its lease lapses now, so n1 takes the partition and the writes
    // back have an owner.
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        use amberdb_server::cluster::lease::{Lease, key};
        let js = async_nats::jetstream::new(async_nats::connect(&d.nats.url).await.unwrap());
        let kv = js
            .get_key_value(amberdb_server::cluster::settings::BUCKET)
            .await
            .unwrap();
        let held = kv.get(key(0)).await.unwrap().unwrap();
        let mut lease: Lease = serde_json::from_slice(&held).unwrap();
        lease.expires_ms = 0;
        kv.put(key(0), serde_json::to_vec(&lease).unwrap().into())
            .await
            .unwrap();
    });
    owner_becomes(&d.n1, 0, "n1");
    let data = d.dir.path().join("n1");
    let aside = std::fs::read_dir(&data)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .find(|n| n.starts_with("p-0.diverged-"))
        .expect("a store set aside");
    let data_arg = data.display().to_string();
    let repair_from = |from: &str, extra: &[&str]| {
        let mut args = vec![
            "repair",
            "--data",
            &data_arg,
            "--partition",
            "0",
            "--from",
            from,
        ];
        args.extend_from_slice(extra);
        cluster_command(&d.nats, &args)
    };
    let repair = |extra: &[&str]| repair_from(&aside, extra);
    let (f0, f4) = (d.ids["fact 0"], d.ids["fact 4"]);
    let before = memories_in(&d.n1, 0);
    assert_eq!(
        before, 6,
        "facts 0 to 3 (its delete was lost) and the intruder's two: {}",
        d.view
    );
    let (ok, out, err) = repair(&[]);
    assert!(ok, "{out}{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["complete"], true, "{report}");
    assert_eq!(report["applied"], false);
    let entries = report["entries"].as_array().unwrap();
    let decision_of = |id: u64| -> Vec<String> {
        entries
            .iter()
            .filter(|e| e["memory_id"] == id)
            .map(|e| e["decision"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(decision_of(f4), vec!["restore"], "{report}");
    assert_eq!(decision_of(f0), vec!["apply"], "{report}");
    assert_eq!(memories_in(&d.n1, 0), before, "a report changes nothing");
    // Refused before anything is read: another partition's name, an unknown flag, --apply
    // without --work, and a --work that is not absolute.
    for (args, says) in [
        (
            vec!["--partition", "1"],
            "not a set-aside store of partition 1",
        ),
        (vec!["--bogus"], "--bogus"),
        (vec!["--apply"], "--work"),
        (vec!["--apply", "--work", "relative"], "absolute"),
    ] {
        let mut all = vec!["repair", "--data", &data_arg, "--from", &aside];
        if !args.contains(&"--partition") {
            all.extend(["--partition", "0"]);
        }
        all.extend(args.iter().copied());
        let (ok, out, err) = cluster_command(&d.nats, &all);
        assert!(!ok && err.contains(says), "{all:?}: {out}{err}");
    }
    // A set-aside name over another partition's store is refused by its store id.
    let other = data.join("p-0.diverged-1");
    std::fs::create_dir(&other).unwrap();
    std::fs::copy(data.join("p-1").join("IDENTITY"), other.join("IDENTITY")).unwrap();
    let (ok, out, err) = repair_from("p-0.diverged-1", &[]);
    assert!(!ok && err.contains("not partition 0's"), "{out}{err}");
    // Partition 0's store id with no log to compare: said, not called clean.
    let empty = data.join("p-0.diverged-2");
    std::fs::create_dir(&empty).unwrap();
    std::fs::copy(data.join("p-0").join("IDENTITY"), empty.join("IDENTITY")).unwrap();
    let (ok, out, err) = repair_from("p-0.diverged-2", &[]);
    assert!(!ok && err.contains("nothing can be compared"), "{out}{err}");
    let work = d.dir.path().join("repair-1");
    let (ok, out, err) = repair(&["--apply", "--work", &work.display().to_string()]);
    assert!(ok, "{out}{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    let restored = report["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["memory_id"] == f4)
        .unwrap()["id_now"]
        .as_u64()
        .expect("the restored fact's id now");
    let mut c = d.n1.client();
    let got = c.ok("GET", json!({"memory_id": restored}));
    assert_eq!(got["memory"]["content"], "fact 4");
    c.fails("GET", json!({"memory_id": f0}), "not_found");
    assert_eq!(memories_in(&d.n1, 0), before, "fact 4 back, fact 0 gone");
    // Again: nothing is stored twice, and the delete finds nothing to delete.
    let work = d.dir.path().join("repair-2");
    let (ok, out, err) = repair(&["--apply", "--work", &work.display().to_string()]);
    assert!(ok, "{out}{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert!(
        report["import"]
            .as_str()
            .unwrap()
            .contains("0 stored, 1 held already"),
        "{report}"
    );
    assert_eq!(
        decision_of_in(&report, f0),
        vec!["already_gone"],
        "{report}"
    );
    assert_eq!(memories_in(&d.n1, 0), before);
    assert!(
        data.join(&aside).join("IDENTITY").exists(),
        "the set-aside store is kept"
    );
    // The stream trimmed past the fork: the first frame both hold differs, so the fork may be
    // earlier. The report says it is incomplete (exit 1), and --apply writes nothing.
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        use amberdb_server::cluster::stream;
        let js = async_nats::jetstream::new(async_nats::connect(&d.nats.url).await.unwrap());
        let s = js.get_stream(stream::stream_name(0)).await.unwrap();
        let fork = report["fork"].as_u64().unwrap();
        stream::trim(&s, fork + 1).await.unwrap();
    });
    let (ok, out, err) = repair(&[]);
    assert!(!ok && err.contains("\"complete\": false"), "{out}{err}");
    let work = d.dir.path().join("repair-3");
    let (ok, out, err) = repair(&["--apply", "--work", &work.display().to_string()]);
    assert!(!ok && err.contains("--apply refused"), "{out}{err}");
    assert!(!work.exists(), "nothing written");
    assert_eq!(memories_in(&d.n1, 0), before);
}

/// The decisions `report` gives memory `id`'s entries.
fn decision_of_in(report: &Value, id: u64) -> Vec<String> {
    report["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["memory_id"] == id)
        .map(|e| e["decision"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn a_node_that_cannot_take_a_partition_says_why_and_stops_at_once() {
    use amberdb_server::cluster::stream;
    let nats = super::cluster::start_nats();
    init(&nats);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let js = rt.block_on(async {
        async_nats::jetstream::new(async_nats::connect(&nats.url).await.unwrap())
    });
    let dir = tempfile::tempdir().unwrap();
    let first = node(&dir.path().join("n0"), &nats, "n0");
    all_owned(&first);
    let user = user_in(0, "u");
    let mut c = first.client();
    for i in 0..3 {
        c.ok(
            "STORE",
            json!({"user_id": user, "content": format!("fact {i}")}),
        );
    }
    first.kill9();
    // The last message of partition 0's stream goes, as from a leader whose files lost it:
    // the stream still reports it as its last position.
    rt.block_on(async {
        let end =
            super::cluster::lose_last_messages(&js, 0, super::cluster::Lost::Reported, 1).await;
        let s = js.get_stream(stream::stream_name(0)).await.unwrap();
        assert_eq!(stream::last_position(&s).await.unwrap(), end);
    });
    // A new node takes the other partitions and says why it cannot take partition 0.
    let second = node(&dir.path().join("n1"), &nats, "n1");
    let deadline = Instant::now() + Duration::from_secs(60);
    let why = loop {
        let stats = second.client().ok("STATS", json!({}));
        let parts = stats["cluster"]["partitions"].as_array().unwrap().clone();
        let owned = parts.iter().filter(|p| p["role"] == "owner").count();
        if let Some(why) = parts[0]["not_taken"].as_str()
            && owned == PARTITIONS as usize - 1
        {
            break why.to_owned();
        }
        assert!(Instant::now() < deadline, "{stats}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(why.contains("cannot give what it says it holds"), "{why}");
    let refused = second.client().fails(
        "STORE",
        json!({"user_id": user, "content": "not while the stream cannot give its end"}),
        "unavailable",
    );
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("taking it here failed"),
        "{refused}"
    );
    // SIGTERM in the middle of a take (each waits `FOLLOW_STALL`, 5 s, and the next begins a
    // tick after one fails, which `not_taken` has just shown): out at once.
    std::thread::sleep(Duration::from_secs(1));
    let sent = Instant::now();
    let (status, log) = second.terminate();
    let took = sent.elapsed();
    eprintln!("out {took:?} after SIGTERM");
    assert!(status.success(), "{status}: {log}");
    assert!(
        took < Duration::from_secs(3),
        "exited {took:?} after SIGTERM"
    );
}

/// Fault 97 of the long rig run, made by hand: the owner dies and the stream loses its last
/// message, which the one standby applied. Nothing is claimed over the shorter stream: the
/// standby's own store holds more, so the partition has no owner, and STATS and a refused
/// write say why and what the way out is. The operator's way out (docs/cluster.md, "A
/// partition no leader can serve"): `amberdb cluster set-aside` is refused while the node
/// runs; on the stopped node it moves the store aside; started again, the node makes the
/// store from the stream, owns the partition and takes writes; `amberdb cluster repair
/// --apply` brings back the write only the set-aside store held.
#[test]
fn a_partition_whose_stream_lost_what_its_only_standby_holds_waits_for_the_operators_set_aside() {
    let (nats, dir, n0, n1) = partition_zero_on_n0();
    let data = dir.path().join("n1");
    let user = user_in(0, "f");
    let mut c = n0.client();
    let mut ids = Vec::new();
    for i in 0..3 {
        let stored = c.ok(
            "STORE",
            json!({"user_id": user, "content": format!("fact {i}")}),
        );
        ids.push(stored["memory_id"].as_u64().unwrap());
    }
    caught_up(&n1, &n0);
    // The stream loses the last message while n0's lease still holds (so no node takes the
    // partition before it is lost), then n0 dies.
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let js = async_nats::jetstream::new(async_nats::connect(&nats.url).await.unwrap());
        super::cluster::lose_last_messages(&js, 0, super::cluster::Lost::Cut, 1).await;
    });
    n0.kill9();
    // n0's lease lapses within 5 s; n1 then tries to take the partition every tick, and may not.
    let deadline = Instant::now() + Duration::from_secs(30);
    let why = loop {
        let view = partition_zero(&n1);
        if let Some(why) = view["not_taken"].as_str()
            && why.contains("applied")
        {
            break why.to_owned();
        }
        assert!(
            Instant::now() < deadline,
            "n1 never said why it does not own it: {view}\n{}",
            n1.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        why.contains("node n1 applied") && why.contains("amberdb cluster set-aside"),
        "{why}"
    );
    std::thread::sleep(Duration::from_secs(3));
    let view = partition_zero(&n1);
    assert_eq!(
        view["role"], "standby",
        "nothing claimed over the shorter stream: {view}"
    );
    let refused = n1.client().fails(
        "STORE",
        json!({"user_id": user, "content": "while nobody owns it"}),
        "unavailable",
    );
    assert!(
        refused["message"].as_str().unwrap().contains("set-aside"),
        "{refused}"
    );
    let data_arg = data.display().to_string();
    let set_aside = || {
        cluster_command(
            &nats,
            &["set-aside", "--data", &data_arg, "--partition", "0"],
        )
    };
    let (ok, out, err) = set_aside();
    assert!(
        !ok && err.contains("a running process holds the store"),
        "{out}{err}"
    );
    assert!(
        data.join("p-0").is_dir(),
        "a refused set-aside moves nothing"
    );
    for (args, says) in [
        (vec!["--partition", "9"], "the cluster has 4 partitions"),
        (vec!["--partition", "0", "--bogus"], "--bogus"),
    ] {
        let mut all = vec!["set-aside", "--data", &data_arg];
        all.extend(args);
        let (ok, out, err) = cluster_command(&nats, &all);
        assert!(!ok && err.contains(says), "{all:?}: {out}{err}");
    }
    let (status, _) = n1.terminate();
    assert!(status.success(), "n1 stops on SIGTERM: {status}");
    let (ok, out, err) = set_aside();
    assert!(ok, "{out}{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    let aside = report["set_aside"].as_str().unwrap().to_owned();
    assert!(
        aside.starts_with("p-0.aside-") && data.join(&aside).is_dir(),
        "{report}"
    );
    assert!(!data.join("p-0").exists(), "{report}");
    // Run again, nothing is left to move; a directory holding another partition's store under
    // p-0's name is refused by its store id, and stays.
    let (ok, out, err) = set_aside();
    assert!(!ok && err.contains("no such directory"), "{out}{err}");
    std::fs::create_dir(data.join("p-0")).unwrap();
    std::fs::copy(data.join("p-1/IDENTITY"), data.join("p-0/IDENTITY")).unwrap();
    std::fs::write(data.join("p-0/LOCK"), b"").unwrap();
    let (ok, out, err) = set_aside();
    assert!(!ok && err.contains("not partition 0's"), "{out}{err}");
    assert!(
        data.join("p-0/IDENTITY").is_file(),
        "a refused set-aside moves nothing"
    );
    std::fs::remove_dir_all(data.join("p-0")).unwrap();
    let n1 = node(&data, &nats, "n1");
    owner_becomes(&n1, 0, "n1");
    let mut c = n1.client();
    let after = c.ok(
        "STORE",
        json!({"user_id": user, "content": "after the set-aside"}),
    );
    assert!(after["memory_id"].as_u64().is_some(), "{after}");
    let work = dir.path().join("repair-work").display().to_string();
    let (ok, out, err) = cluster_command(
        &nats,
        &[
            "repair",
            "--data",
            &data_arg,
            "--partition",
            "0",
            "--from",
            &aside,
            "--apply",
            "--work",
            &work,
        ],
    );
    assert!(ok, "{out}{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["complete"], true, "{report}");
    // The lost write's id may have been given out again by the write after the set-aside: the
    // report says where it is now.
    let restored: Vec<&Value> = report["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["decision"] == "restore")
        .collect();
    assert_eq!(restored.len(), 1, "{report}");
    assert_eq!(restored[0]["memory_id"], ids[2], "{report}");
    let now = restored[0]["id_now"].as_u64().expect("restored with an id");
    let got = c.ok("GET", json!({"memory_id": now}));
    assert_eq!(got["memory"]["content"], "fact 2", "{report}");
    let got = c.ok("GET", json!({"memory_id": after["memory_id"]}));
    assert_eq!(got["memory"]["content"], "after the set-aside");
    for id in &ids[..2] {
        c.ok("GET", json!({"memory_id": id}));
    }
}
