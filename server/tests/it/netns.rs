//! Hosts for the cluster fault rig (`cluster_rig.rs`, docs/reliability.md "The cluster fault
//! rig"): network namespaces on one bridge, made as root with iproute2 and removed when
//! dropped. Host `i` is namespace `<prefix>h<i>` with `eth0` at `10.231.<net>.<i + 1>/24`; the
//! bridge `<prefix>br` in the test's own namespace has `.254`, so the test's clients reach every
//! host and the hosts reach each other through it. Cutting a host sets its bridge port down:
//! its packets vanish both ways, silently, as when a machine's cable is pulled (connections
//! hang rather than fail; iptables is not needed for a two-way cut).

use std::process::Command;

/// Namespaces on one bridge; every one of them and the bridge are deleted when dropped.
pub(crate) struct Hosts {
    prefix: String,
    net: u8,
    count: usize,
}

/// Runs `ip ARGS`, panicking with its stderr when it fails (the rig needs root).
fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .expect("iproute2's ip");
    assert!(
        out.status.success(),
        "ip {}: {} (the cluster fault rig needs root and iproute2)",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
}

/// Whether process `pid` still runs.
fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Removes what rigs of processes that no longer run left behind (a rig killed before its
/// `Drop`): namespaces and bridges named `abr<pid>…`.
fn sweep_leftovers() {
    let dead = |name: &str| -> bool {
        name.strip_prefix("abr")
            .map(|rest| {
                rest.chars()
                    .take_while(char::is_ascii_digit)
                    .collect::<String>()
            })
            .and_then(|pid| pid.parse().ok())
            .is_some_and(|pid| !alive(pid))
    };
    let list = Command::new("ip").args(["netns", "list"]).output();
    for line in list
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
        .lines()
    {
        let name = line.split_whitespace().next().unwrap_or("");
        if dead(name) {
            // Its processes outlived the rig (killed before its `Drop`): they go first.
            let pids = Command::new("ip").args(["netns", "pids", name]).output();
            for pid in pids
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default()
                .split_whitespace()
            {
                Command::new("kill").args(["-9", pid]).status().ok();
            }
            Command::new("ip")
                .args(["netns", "del", name])
                .status()
                .ok();
        }
    }
    let links = Command::new("ip")
        .args(["-o", "link", "show", "type", "bridge"])
        .output();
    for line in links
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
        .lines()
    {
        let name = line.split(':').nth(1).unwrap_or("").trim();
        if dead(name) {
            Command::new("ip").args(["link", "del", name]).status().ok();
        }
    }
}

impl Hosts {
    /// `count` hosts (at most 9) on a new bridge.
    pub(crate) fn new(count: usize) -> Hosts {
        assert!(count < 10);
        sweep_leftovers();
        let pid = std::process::id();
        let hosts = Hosts {
            prefix: format!("abr{pid}"),
            net: u8::try_from(pid % 250).unwrap(),
            count,
        };
        let bridge = hosts.bridge();
        ip(&["link", "add", &bridge, "type", "bridge"]);
        ip(&[
            "addr",
            "add",
            &format!("{}/24", hosts.gateway()),
            "dev",
            &bridge,
        ]);
        ip(&["link", "set", &bridge, "up"]);
        for i in 0..count {
            let (ns, port, inner) = (hosts.ns(i), hosts.port(i), format!("{}i{i}", hosts.prefix));
            ip(&["netns", "add", &ns]);
            ip(&["link", "add", &port, "type", "veth", "peer", "name", &inner]);
            ip(&["link", "set", &port, "master", &bridge]);
            ip(&["link", "set", &port, "up"]);
            ip(&["link", "set", &inner, "netns", &ns]);
            let inside = |args: &[&str]| {
                let mut all = vec!["netns", "exec", ns.as_str(), "ip"];
                all.extend_from_slice(args);
                ip(&all);
            };
            inside(&["link", "set", &inner, "name", "eth0"]);
            inside(&["addr", "add", &format!("{}/24", hosts.ip(i)), "dev", "eth0"]);
            inside(&["link", "set", "eth0", "up"]);
            inside(&["link", "set", "lo", "up"]);
        }
        hosts
    }

    fn bridge(&self) -> String {
        format!("{}br", self.prefix)
    }

    /// The bridge's end of host `i`'s cable.
    fn port(&self, i: usize) -> String {
        format!("{}v{i}", self.prefix)
    }

    /// Host `i`'s namespace.
    pub(crate) fn ns(&self, i: usize) -> String {
        format!("{}h{i}", self.prefix)
    }

    /// Host `i`'s address.
    pub(crate) fn ip(&self, i: usize) -> String {
        format!("10.231.{}.{}", self.net, i + 1)
    }

    /// The test's own address on the bridge.
    fn gateway(&self) -> String {
        format!("10.231.{}.254", self.net)
    }

    /// A command that runs `program` on host `i`.
    pub(crate) fn command(&self, i: usize, program: &std::path::Path) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns(i)]).arg(program);
        c
    }

    /// Cuts host `i` off from every other host and from the test's clients.
    pub(crate) fn cut(&self, i: usize) {
        ip(&["link", "set", &self.port(i), "down"]);
    }

    /// Puts host `i` back on the bridge.
    pub(crate) fn heal(&self, i: usize) {
        ip(&["link", "set", &self.port(i), "up"]);
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for i in 0..self.count {
            Command::new("ip")
                .args(["netns", "del", &self.ns(i)])
                .status()
                .ok();
        }
        Command::new("ip")
            .args(["link", "del", &self.bridge()])
            .status()
            .ok();
    }
}
