//! Which node should own each partition (`docs/cluster.md`, "Placement: `cluster move` and
//! rebalancing"): a partition pinned by `amberdb cluster move` (KV key `pin.<partition>`)
//! belongs to its pinned node while that node is live; any other to the `p mod n`-th live node
//! by name. An owner that is not the partition's preferred node hands it over: it lets its
//! lease lapse naming the preferred node (`Lease::handoff`), which takes it at once (others
//! wait two leases, as for any lapsed lease); it catches up with the stream and claims, as any
//! taker does, so a hand-over is a failover without the wait.
//!
//! Only a node that writes the oldest formats among the live nodes may own a partition
//! ([`may_own`], `docs/cluster.md`, "Rolling upgrades"): during a rolling upgrade the nodes
//! not yet upgraded own every partition and the upgraded ones follow them as replicas, since a
//! newer build reads every older format and an older one may not read a newer; once the last
//! old node is gone the upgraded ones own. A pin to a node that may not own is passed over.
//!
//! Guarantees: the decision is a pure function of the registrations, the pins and the clock
//! (`preferred`, `Handoff::due`); an owner hands over only to a live node that has the
//! partition's store open (it registers a position for it), only when that node has been the
//! preferred one for [`STABLE`], and, unless the partition is pinned there, not before it has
//! owned the partition for [`HOLD`], so nodes whose views differ for a moment do not pass a
//! partition back and forth.

use super::lease::{Formats, Peer};
use async_nats::jetstream::kv;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// How long the same other node must be preferred before an owner hands the partition over.
pub const STABLE: Duration = Duration::from_secs(3);
/// How long an owner keeps a partition it was not pinned to before it rebalances it.
pub const HOLD: Duration = Duration::from_secs(10);

/// Partition `p`'s pin key.
#[must_use]
pub fn pin_key(partition: u32) -> String {
    format!("pin.{partition}")
}

/// Whether `me`, writing `mine`, may own a partition: no live node writes older formats.
#[must_use]
pub fn may_own(mine: Formats, me: &str, peers: &BTreeMap<String, Peer>, now_ms: u64) -> bool {
    peers
        .iter()
        .filter(|(name, peer)| *name != me && peer.expires_ms > now_ms)
        .all(|(_, peer)| peer.formats >= mine)
}

/// The node that should own partition `p`: its pinned node if that one is live, else the
/// `p mod n`-th live node by name, among the live nodes that may own ([`may_own`]). `me`,
/// which writes `Formats::THIS_BUILD`, counts as live whatever its registration says.
#[must_use]
pub fn preferred(
    p: u32,
    me: &str,
    peers: &BTreeMap<String, Peer>,
    pins: &BTreeMap<u32, String>,
    now_ms: u64,
) -> Option<String> {
    let formats = |name: &str| {
        if name == me {
            Formats::THIS_BUILD
        } else {
            peers.get(name).map_or(Formats::THIS_BUILD, |x| x.formats)
        }
    };
    let alive = |name: &str| name == me || peers.get(name).is_some_and(|x| x.expires_ms > now_ms);
    let oldest = peers
        .keys()
        .map(String::as_str)
        .chain([me])
        .filter(|n| alive(n))
        .map(formats)
        .min()
        .unwrap_or(Formats::THIS_BUILD);
    let live = |name: &str| alive(name) && formats(name) == oldest;
    if let Some(pinned) = pins.get(&p).filter(|n| live(n)) {
        return Some(pinned.clone());
    }
    let mut names: Vec<&str> = peers
        .keys()
        .map(String::as_str)
        .filter(|n| live(n))
        .collect();
    if live(me) && !names.contains(&me) {
        names.push(me);
        names.sort_unstable();
    }
    let n = u32::try_from(names.len()).ok().filter(|&n| n > 0)?;
    names.get((p % n) as usize).map(|s| (*s).to_owned())
}

/// An owner's watch for a hand-over of one partition.
#[derive(Debug)]
pub struct Handoff {
    owned_since: Instant,
    /// The other node preferred at the last look, and since when.
    candidate: Option<(String, Instant)>,
}

impl Handoff {
    /// The watch of a partition owned from now on.
    #[must_use]
    pub fn new() -> Handoff {
        Handoff {
            owned_since: Instant::now(),
            candidate: None,
        }
    }

    /// The node to hand partition `p` to now, if any (module doc).
    pub fn due(
        &mut self,
        p: u32,
        me: &str,
        peers: &BTreeMap<String, Peer>,
        pins: &BTreeMap<u32, String>,
        now: (Instant, u64),
    ) -> Option<String> {
        let (at, now_ms) = now;
        let target = preferred(p, me, peers, pins, now_ms).filter(|t| t != me);
        let ready = target.filter(|t| {
            peers
                .get(t)
                .and_then(|peer| peer.positions.get(p as usize).copied().flatten())
                .is_some()
        });
        let Some(target) = ready else {
            self.candidate = None;
            return None;
        };
        let since = match &self.candidate {
            Some((name, since)) if *name == target => *since,
            _ => {
                self.candidate = Some((target.clone(), at));
                at
            }
        };
        let pinned = pins.get(&p) == Some(&target);
        let held_long_enough = pinned || at.duration_since(self.owned_since) >= HOLD;
        (at.duration_since(since) >= STABLE && held_long_enough).then_some(target)
    }
}

impl Default for Handoff {
    fn default() -> Handoff {
        Handoff::new()
    }
}

/// The node a pin's value names, if it names one: the one reading of a `pin.<p>` value, for
/// `pins` and the node's directory alike.
#[must_use]
pub fn pinned_node(value: &[u8]) -> Option<String> {
    String::from_utf8(value.to_vec())
        .ok()
        .filter(|name| super::lease::check_name(name).is_ok())
}

/// Every pin in the bucket (a value that is not a node name is left out).
///
/// # Errors
/// A read JetStream refused or did not answer in time (`lease::entries`).
pub async fn pins(kv: &kv::Store) -> Result<BTreeMap<u32, String>, super::stream::StreamError> {
    let mut pins = BTreeMap::new();
    for (p, bytes) in super::lease::entries(kv, "pin.").await? {
        if let Ok(p) = p.parse()
            && let Some(name) = pinned_node(&bytes)
        {
            pins.insert(p, name);
        }
    }
    Ok(pins)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(live: bool, at: Option<u64>) -> Peer {
        Peer {
            address: String::new(),
            http: None,
            expires_ms: if live { u64::MAX } else { 0 },
            positions: vec![at; 4],
            running_crcs: Vec::new(),
            checkpoints: Vec::new(),
            acknowledged: Vec::new(),
            formats: Formats::THIS_BUILD,
        }
    }

    #[test]
    fn in_a_rolling_upgrade_only_the_nodes_of_the_oldest_formats_own() {
        let older = Formats {
            log: Formats::THIS_BUILD.log - 1,
            checkpoint: Formats::THIS_BUILD.checkpoint,
        };
        let mut peers: BTreeMap<String, Peer> = [
            ("a".to_owned(), peer(true, Some(1))),
            ("b".to_owned(), peer(true, Some(1))),
            ("c".to_owned(), peer(true, Some(1))),
        ]
        .into();
        peers.get_mut("b").unwrap().formats = older;
        let none = BTreeMap::new();
        // b is not upgraded yet: it owns every partition, and a, upgraded, may not own.
        for p in 0..4 {
            assert_eq!(preferred(p, "a", &peers, &none, 1).as_deref(), Some("b"));
        }
        assert!(!may_own(Formats::THIS_BUILD, "a", &peers, 1));
        assert!(may_own(older, "b", &peers, 1));
        // A pin to an upgraded node waits for the upgrade to finish.
        let pins: BTreeMap<u32, String> = [(0, "c".to_owned())].into();
        assert_eq!(preferred(0, "a", &peers, &pins, 1).as_deref(), Some("b"));
        // b's registration lapses (it is being replaced): the upgraded nodes own.
        peers.get_mut("b").unwrap().expires_ms = 0;
        assert!(may_own(Formats::THIS_BUILD, "a", &peers, 1));
        assert_eq!(preferred(0, "a", &peers, &pins, 1).as_deref(), Some("c"));
        assert_eq!(preferred(1, "a", &peers, &none, 1).as_deref(), Some("c"));
        // A registration from before the field is the first cluster build's.
        let old: Peer =
            serde_json::from_str(r#"{"address": "x", "http": null, "expires_ms": 9}"#).unwrap();
        assert_eq!(old.formats, Formats::FIRST);
        assert!(Formats::FIRST <= Formats::THIS_BUILD);
    }

    #[test]
    fn the_preferred_node_is_the_live_pinned_one_else_the_p_mod_n_th_live_one() {
        let mut peers: BTreeMap<String, Peer> = [
            ("a".to_owned(), peer(true, Some(1))),
            ("b".to_owned(), peer(true, Some(1))),
            ("c".to_owned(), peer(false, Some(1))),
        ]
        .into();
        let none = BTreeMap::new();
        let got: Vec<_> = (0..4)
            .map(|p| preferred(p, "a", &peers, &none, 1))
            .collect();
        assert_eq!(got, ["a", "b", "a", "b"].map(|s| Some(s.to_owned())));
        // A dead node counts for itself only.
        assert_eq!(preferred(2, "c", &peers, &none, 1).as_deref(), Some("c"));
        let pins: BTreeMap<u32, String> = [(0, "b".to_owned()), (1, "c".to_owned())].into();
        assert_eq!(preferred(0, "a", &peers, &pins, 1).as_deref(), Some("b"));
        assert_eq!(
            preferred(1, "a", &peers, &pins, 1).as_deref(),
            Some("b"),
            "a pin to a dead node is passed over"
        );
        peers.clear();
        assert_eq!(preferred(3, "a", &peers, &none, 1).as_deref(), Some("a"));
    }

    #[test]
    fn an_owner_hands_over_only_to_a_ready_node_preferred_long_enough() {
        let peers: BTreeMap<String, Peer> = [
            ("a".to_owned(), peer(true, Some(1))),
            ("b".to_owned(), peer(true, Some(1))),
        ]
        .into();
        let none = BTreeMap::new();
        let t0 = Instant::now();
        let mut h = Handoff {
            owned_since: t0,
            candidate: None,
        };
        // Partition 1 prefers b; a owns it.
        assert_eq!(h.due(1, "a", &peers, &none, (t0, 1)), None, "just seen");
        assert_eq!(
            h.due(1, "a", &peers, &none, (t0 + STABLE, 1)),
            None,
            "held too briefly"
        );
        assert_eq!(
            h.due(1, "a", &peers, &none, (t0 + HOLD, 1)).as_deref(),
            Some("b")
        );
        // A preferred owner keeps it.
        assert_eq!(h.due(0, "a", &peers, &none, (t0 + HOLD, 1)), None);
        // A pin hands over after STABLE, however briefly it was held.
        let pins: BTreeMap<u32, String> = [(0, "b".to_owned())].into();
        let mut h = Handoff {
            owned_since: t0,
            candidate: None,
        };
        assert_eq!(h.due(0, "a", &peers, &pins, (t0, 1)), None);
        assert_eq!(
            h.due(0, "a", &peers, &pins, (t0 + STABLE, 1)).as_deref(),
            Some("b")
        );
        // A target without the partition's store open (reopening, halted) is not ready.
        let mut closed = peers.clone();
        closed.insert("b".into(), peer(true, None));
        let mut h = Handoff {
            owned_since: t0,
            candidate: None,
        };
        for s in 0..20 {
            assert_eq!(
                h.due(0, "a", &closed, &pins, (t0 + Duration::from_secs(s), 1)),
                None
            );
        }
    }
}
