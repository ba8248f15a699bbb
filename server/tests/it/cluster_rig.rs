//! The cluster fault rig (issue #57; docs/reliability.md, "The cluster fault rig"): three
//! hosts in network namespaces on one bridge, each with a nats-server of one JetStream cluster
//! (R3, `sync_interval: always`) and an amberdb node; four writers log every acknowledgement
//! and every unknown outcome while faults of every kind (`faults::Kind`) are injected and
//! healed, one after another; after each, the cluster must agree again within 60 s and hold
//! every acknowledged write (`check`); at the end every partition store of every node passes
//! `amberdb check`.
//!
//! - `AMBERDB_RIG_FAULTS` (default 10: one of each kind) and `AMBERDB_RIG_SEED` (default: the
//!   clock; printed) size and repeat a run.
//! - `AMBERDB_RIG_KINDS=host-cut,rogue`: only these kinds of fault, in turn.
//! - `AMBERDB_RIG_LEDGER=FILE`: every fault is appended to FILE as a JSON line as it ends, a
//!   run goes on with the kind after the ledger's last, and the figures printed are the whole
//!   ledger's (`scripts/cluster-faults` runs the long run this way, resuming across sessions).
//! - `AMBERDB_OLD_BIN=PATH`: the run begins with a rolling upgrade: all three nodes start on
//!   that (older) build, then are replaced by this one, one at a time, under the load, each
//!   step checked as a fault is; NATS then runs without users, as a cluster of a build older
//!   than them did (the rogue insider needs no credentials there). Without it the run says it
//!   did no upgrade.

mod check;
mod faults;
mod load;
mod world;

use super::kill::{Rng, seed_from};
use faults::{Kind, Probe};
use load::Load;
use serde_json::{Value, json};
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use world::World;

/// Partitions of the rig's cluster: two per node, so every node owns some and each fault
/// moves a few.
pub(crate) const PARTITIONS: u32 = 6;

/// The faults run so far, one JSON object a line.
struct Ledger {
    path: Option<PathBuf>,
    entries: Vec<Value>,
}

impl Ledger {
    fn open() -> Ledger {
        let path = std::env::var_os("AMBERDB_RIG_LEDGER").map(PathBuf::from);
        let entries = path
            .as_ref()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        Ledger { path, entries }
    }

    fn faults(&self) -> impl Iterator<Item = &Value> {
        self.entries.iter().filter(|e| e["kind"].is_string())
    }

    fn append(&mut self, entry: Value) {
        if let Some(path) = &self.path {
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .unwrap();
            writeln!(f, "{entry}").unwrap();
            f.sync_all().unwrap();
        }
        self.entries.push(entry);
    }

    /// The figures of every fault and run in the ledger.
    fn summary(&self) -> String {
        let mut out = String::new();
        let faults: Vec<&Value> = self.faults().collect();
        let failed = faults
            .iter()
            .filter(|e| e["violations"].as_array().is_some_and(|v| !v.is_empty()))
            .count();
        let lost: u64 = faults.iter().filter_map(|e| e["lost"].as_u64()).sum();
        let runs: Vec<&Value> = self.entries.iter().filter(|e| e["run"].is_u64()).collect();
        let acked: u64 = runs.iter().filter_map(|r| r["acked"].as_u64()).sum();
        let unknown: u64 = runs.iter().filter_map(|r| r["unknown"].as_u64()).sum();
        out += &format!(
            "{} faults in {} runs: {failed} with a violation, {lost} acknowledged writes lost; {acked} writes acknowledged, {unknown} unknown in the finished runs\n",
            faults.len(),
            runs.len()
        );
        for kind in Kind::ALL {
            let of: Vec<&&Value> = faults.iter().filter(|e| e["kind"] == kind.name()).collect();
            let gaps = |filter: &dyn Fn(&Value) -> bool| -> Vec<f64> {
                of.iter()
                    .filter(|e| filter(e))
                    .filter_map(|e| e["gap_s"].as_f64())
                    .collect()
            };
            let converge: Vec<f64> = of.iter().filter_map(|e| e["converge_s"].as_f64()).collect();
            out += &format!(
                "  {:<14} {:>4}  converged {}",
                kind.name(),
                of.len(),
                quantiles(converge)
            );
            if kind == Kind::HostCut {
                out += &format!(
                    "; next ack, host led nothing {}; host led the stream, the KV or the meta group {}",
                    quantiles(gaps(&|e| e["leader_on_host"] == false)),
                    quantiles(gaps(&|e| e["leader_on_host"] == true))
                );
            } else {
                let g = gaps(&|_| true);
                if !g.is_empty() {
                    out += &format!("; next ack {}", quantiles(g));
                }
            }
            out += "\n";
        }
        out
    }
}

/// `p50 / p95 / max` of seconds, or `-`.
fn quantiles(mut v: Vec<f64>) -> String {
    if v.is_empty() {
        return "-".into();
    }
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    format!(
        "p50 {:.2} s, p95 {:.2} s, max {:.2} s (n={})",
        at(0.5),
        at(0.95),
        at(1.0),
        v.len()
    )
}

/// After a fault: agreement (timed), then, with the writers paused, the model check. The
/// violations found, and how long agreement took.
fn judge(world: &World, load: &Load, probe_users: &[String]) -> (Vec<String>, Option<f64>) {
    let converged = check::converge(world);
    load.pause();
    let mut violations = Vec::new();
    match check::converge(world) {
        Ok(_) => violations.extend(check::against_model(world, &load.model(), probe_users)),
        Err(e) => violations.push(e),
    }
    violations.extend(std::mem::take(&mut load.model().violations));
    load.resume();
    match converged {
        Ok(d) => (violations, Some(d.as_secs_f64())),
        Err(e) => {
            violations.push(e);
            (violations, None)
        }
    }
}

/// The rolling upgrade (module doc): every node on `old`, then one by one on this build.
fn upgrade(
    world: &mut World,
    load: &Load,
    probe: &Probe,
    ledger: &mut Ledger,
    seed: u64,
) -> Vec<String> {
    let new = PathBuf::from(env!("CARGO_BIN_EXE_amberdb"));
    let mut all = Vec::new();
    for i in 0..3 {
        std::thread::sleep(Duration::from_secs(3));
        world.stop_node(i);
        world.set_bin(i, &new);
        world.start_node(i);
        let (violations, converge) = judge(world, load, probe.users());
        eprintln!(
            "rig: n{i} upgraded; converged in {converge:?} s; {} violations",
            violations.len()
        );
        ledger.append(json!({
            "seed": seed, "upgrade": format!("n{i}"), "converge_s": converge,
            "violations": violations, "acked_so_far": load.model().acked,
        }));
        all.extend(violations);
    }
    all
}

#[test]
fn faults_of_every_kind_lose_no_acknowledged_write() {
    let faults: usize = std::env::var("AMBERDB_RIG_FAULTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(Kind::ALL.len());
    let seed = seed_from("AMBERDB_RIG_SEED");
    let old = std::env::var_os("AMBERDB_OLD_BIN").map(PathBuf::from);
    eprintln!("rig: seed {seed} (AMBERDB_RIG_SEED={seed} repeats it), {faults} faults");
    match &old {
        Some(old) => eprintln!("rig: a rolling upgrade from {} first", old.display()),
        None => eprintln!(
            "rig: no rolling upgrade in this run (AMBERDB_OLD_BIN unset; scripts/cluster-faults sets it)"
        ),
    }
    let mut rng = Rng(seed);
    let mut ledger = Ledger::open();
    let first_bin = old
        .clone()
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_amberdb")));
    // The older build predates NATS users (it cannot authenticate): an upgrade runs on NATS
    // without them, as such a cluster did.
    let mut world = World::start(PARTITIONS, &first_bin, old.is_none());
    check::converge(&world).expect("a new cluster agrees");
    let load = Load::start(&world.seeds(), world::TOKEN, seed);
    let mut probe = Probe::new(&world);
    let mut failures = Vec::new();
    if old.is_some() {
        failures.extend(upgrade(&mut world, &load, &probe, &mut ledger, seed));
    }
    let begun = ledger.faults().count();
    // AMBERDB_RIG_KINDS=host-cut,rogue: only these kinds, in turn (to look into one).
    let kinds: Vec<Kind> = match std::env::var("AMBERDB_RIG_KINDS") {
        Ok(names) => names
            .split(',')
            .map(|n| {
                *Kind::ALL
                    .iter()
                    .find(|k| k.name() == n.trim())
                    .unwrap_or_else(|| panic!("AMBERDB_RIG_KINDS: no fault kind {n:?}"))
            })
            .collect(),
        Err(_) => Kind::ALL.to_vec(),
    };
    for n in 0..faults {
        let kind = kinds[(begun + n) % kinds.len()];
        std::thread::sleep(Duration::from_millis(2000 + rng.next() % 2000));
        let t = Instant::now();
        let done = faults::inject(kind, &mut world, &mut rng, &mut probe, &load);
        let (mut violations, converge) = judge(&world, &load, probe.users());
        if let Some(acked) = done.acked_in_outage.filter(|a| *a > 0) {
            violations.push(format!(
                "{acked} writes acknowledged with two of three NATS servers down"
            ));
        }
        // Acknowledged data missing or changed (`check::against_model`'s wording), not every
        // violation that says "lost" (a halted partition's reason quotes JetStream's).
        let lost = violations
            .iter()
            .filter(|v| {
                (v.starts_with("acknowledged memory ") && v.ends_with(" is lost"))
                    || (v.starts_with("memory ")
                        && (v.contains(", acknowledged as ") || v.contains("live again")))
                    || (v.starts_with("item ") && v.contains(" is not its acknowledged value"))
            })
            .count();
        let gap = done.gap.map(|g| g.as_secs_f64());
        eprintln!(
            "rig: fault {} {} on partition {} host {}: next ack {gap:?} s, converged {converge:?} s, {} violations, {:.1} s; {}",
            begun + n,
            kind.name(),
            done.partition,
            done.host,
            violations.len(),
            t.elapsed().as_secs_f64(),
            done.note
        );
        for v in &violations {
            eprintln!("rig:   {v}");
        }
        ledger.append(json!({
            "seed": seed, "n": begun + n, "kind": kind.name(), "partition": done.partition,
            "host": done.host, "gap_s": gap, "leader_on_host": done.leader_on_host,
            "acked_in_outage": done.acked_in_outage, "converge_s": converge, "lost": lost,
            "violations": violations, "note": done.note, "acked_so_far": load.model().acked,
        }));
        let failed = !violations.is_empty();
        failures.extend(violations);
        // A cluster that did not recover would fail every later fault of this run for the
        // same reason: the run ends here (the long run's next chunk starts a new cluster).
        if failed {
            eprintln!("rig: the cluster did not recover: no more faults in this run");
            break;
        }
    }
    let (acked, unknown, bad_refused, fault_refused, unquoted) = {
        let m = load.model();
        (
            m.acked,
            m.unknown,
            m.bad_refused,
            m.fault_refused,
            m.applied_unquoted,
        )
    };
    load.stop();
    let unclean = world.stop_and_check();
    ledger.append(json!({
        "run": seed, "faults": faults, "acked": acked, "unknown": unknown + fault_refused,
        "bad_refused": bad_refused, "applied_unquoted": unquoted, "unclean_checks": unclean,
        "upgrade": old.is_some(),
    }));
    eprintln!(
        "rig: {acked} acknowledged ({unquoted} by a retry that quoted no reply), {unknown} unknown, {fault_refused} refused by a fault, {bad_refused} bad requests refused; amberdb check: {} unclean",
        unclean.len()
    );
    eprint!("rig ledger:\n{}", ledger.summary());
    assert!(failures.is_empty(), "violations: {failures:#?}");
    assert!(unclean.is_empty(), "amberdb check: {unclean:#?}");
}
