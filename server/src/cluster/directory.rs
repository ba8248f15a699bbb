//! A node's view of the cluster's KV bucket: every node's registration (`node.<name>`) and
//! every partition's pin (`pin.<p>`), kept current by one KV watch held for the node's life.
//!
//! Before, every node listed the bucket every second and every claim listed it again. Each
//! listing is an ephemeral consumer, made and removed through JetStream's meta group: with
//! three nodes that kept the group busy enough that, when its leader's host was cut off,
//! consumers went unmade for 20 s and so did every claim (docs/cluster.md, "What a host cut
//! waits for"). A watch is one consumer, made again only when its connection is lost.
//!
//! Guarantees: the view changes only to one a watch delivered whole (the bucket's history to
//! its last message, then every change after it in order); [`Directory::names`] answers only
//! once there is one, and a claim reads the registrations of those names afresh
//! (`lease::take`). Between watches the last whole view stands.

use super::lease::Peer;
use super::stream::StreamError;
use async_nats::jetstream::kv;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The pause before a lost watch is made again.
const AGAIN: Duration = Duration::from_millis(250);

/// The node's view (module doc).
#[derive(Debug, Default)]
pub struct Directory {
    view: Mutex<View>,
}

#[derive(Debug, Default)]
struct View {
    peers: BTreeMap<String, Peer>,
    pins: BTreeMap<u32, String>,
    /// Whether a watch has delivered the bucket's whole history.
    whole: bool,
}

impl Directory {
    /// Every node's registration as last seen (one that does not decode is left out).
    pub fn peers(&self) -> BTreeMap<String, Peer> {
        self.view.lock().peers.clone()
    }

    /// Every partition's pin as last seen (a value that is not a node name is left out).
    pub fn pins(&self) -> BTreeMap<u32, String> {
        self.view.lock().pins.clone()
    }

    /// Runs `f` on the registrations and pins as last seen.
    pub fn with<T>(
        &self,
        f: impl FnOnce(&BTreeMap<String, Peer>, &BTreeMap<u32, String>) -> T,
    ) -> T {
        let view = self.view.lock();
        f(&view.peers, &view.pins)
    }

    /// The name of every node that ever registered (as last seen).
    ///
    /// # Errors
    /// No watch has yet delivered the bucket's whole history.
    pub fn names(&self) -> Result<Vec<String>, StreamError> {
        let view = self.view.lock();
        if !view.whole {
            return Err(StreamError::Nats {
                context: "reading the nodes' registrations",
                reason: "the KV bucket's watch has not delivered it yet".to_owned(),
            });
        }
        Ok(view.peers.keys().cloned().collect())
    }

    /// Keeps the view: one watch of the bucket's registrations and pins, made again
    /// a quarter of a second after it is lost, until `stop` says so.
    pub async fn keep(&self, kv: kv::Store, mut stop: tokio::sync::watch::Receiver<bool>) {
        use futures_util::StreamExt;
        loop {
            let watched = async {
                let mut watch = kv
                    // `settings`, written once by `cluster init`, makes the history never empty:
                    // its last message says the history is whole.
                    .watch_many_with_history(["settings", "node.>", "pin.>"])
                    .await
                    .map_err(|e| e.to_string())?;
                // The history is gathered apart and replaces the view once whole, so a view
                // never misses a node because a watch is being made again.
                let mut gathering = Some(View::default());
                while let Some(entry) = watch.next().await {
                    let entry = entry.map_err(|e| e.to_string())?;
                    let mut view = self.view.lock();
                    let into = gathering.as_mut().unwrap_or(&mut view);
                    let put = entry.operation == kv::Operation::Put;
                    into.apply(&entry.key, Some(&entry.value[..]).filter(|_| put));
                    if entry.seen_current
                        && let Some(whole) = gathering.take()
                    {
                        view.peers = whole.peers;
                        view.pins = whole.pins;
                        view.whole = true;
                    }
                }
                Ok::<(), String>(())
            };
            tokio::select! {
                ended = watched => {
                    if let Err(e) = ended {
                        tracing::debug!(error = %e, "the KV bucket's watch");
                    }
                }
                _ = stop.wait_for(|stopping| *stopping) => return,
            }
            tokio::select! {
                () = tokio::time::sleep(AGAIN) => {}
                _ = stop.wait_for(|stopping| *stopping) => return,
            }
        }
    }

    /// Waits until the view holds the bucket's whole history, or `limit` passes.
    pub async fn wait_whole(&self, limit: Duration) {
        let until = Instant::now() + limit;
        while !self.view.lock().whole && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl View {
    /// One change of the bucket: `key` now holds `value`, or nothing (deleted or purged).
    fn apply(&mut self, key: &str, value: Option<&[u8]>) {
        let value = value.filter(|v| !v.is_empty());
        if let Some(name) = key.strip_prefix("node.") {
            match value.map(serde_json::from_slice::<Peer>) {
                Some(Ok(peer)) => {
                    self.peers.insert(name.to_owned(), peer);
                }
                _ => {
                    self.peers.remove(name);
                }
            }
        } else if let Some(p) = key.strip_prefix("pin.").and_then(|p| p.parse().ok()) {
            match value.and_then(super::placement::pinned_node) {
                Some(name) => {
                    self.pins.insert(p, name);
                }
                None => {
                    self.pins.remove(&p);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(address: &str) -> Vec<u8> {
        serde_json::to_vec(&Peer {
            address: address.into(),
            http: None,
            expires_ms: 1,
            positions: Vec::new(),
            running_crcs: Vec::new(),
            checkpoints: Vec::new(),
            acknowledged: Vec::new(),
            formats: super::super::lease::Formats::THIS_BUILD,
        })
        .unwrap()
    }

    #[test]
    fn changes_put_and_remove_registrations_and_pins_and_leave_the_rest() {
        let mut view = View::default();
        view.apply("settings", Some(b"{}"));
        view.apply("lease.3", Some(b"{}"));
        view.apply("node.a", Some(&peer("10.0.0.1:7878")));
        view.apply("node.b", Some(&peer("10.0.0.2:7878")));
        view.apply("node.c", Some(b"not a registration"));
        view.apply("pin.3", Some(b"b"));
        view.apply("pin.4", Some(b"not a name!"));
        view.apply("pin.x", Some(b"a"));
        assert_eq!(view.peers.keys().collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(view.pins, BTreeMap::from([(3, "b".to_owned())]));
        // A newer registration replaces the older; a deletion or an empty value removes.
        view.apply("node.a", Some(&peer("10.0.0.9:7878")));
        assert_eq!(view.peers["a"].address, "10.0.0.9:7878");
        view.apply("node.b", None);
        view.apply("pin.3", Some(b""));
        assert_eq!(view.peers.keys().collect::<Vec<_>>(), ["a"]);
        assert!(view.pins.is_empty());
    }

    #[test]
    fn no_names_are_given_before_a_watch_delivered_the_bucket_whole() {
        let directory = Directory::default();
        directory
            .view
            .lock()
            .apply("node.a", Some(&peer("10.0.0.1:7878")));
        let refused = directory.names().unwrap_err().to_string();
        assert!(refused.contains("has not delivered it yet"), "{refused}");
        directory.view.lock().whole = true;
        assert_eq!(directory.names().unwrap(), ["a"]);
    }
}
