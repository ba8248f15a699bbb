//! The server's limits (`docs/protocol.md`, "Limits") and admission by capacity
//! ("Capacity"): how many batches run, how many wait, and the rest answered `busy`.

use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;

/// The server's limits (`docs/protocol.md`, "Limits").
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// Longest request line, in bytes (1 MiB).
    pub max_line_bytes: usize,
    /// Most connections at once (1,024).
    pub max_connections: usize,
    /// A connection with nothing to say for this long is closed (300 s).
    pub idle_timeout: Duration,
    /// A line half-sent, or replies not taken, for this long closes the connection (30 s).
    pub slow_client_timeout: Duration,
    /// Most requests run in one batch of a connection (1,024); more wait for the next.
    pub max_pipelined: usize,
    /// Batches (of any connections) run at once on the blocking pool: the server's capacity
    /// (default: two per core, measured best in `docs/benchmarks.md`, "Server: overload").
    pub max_running: usize,
    /// Batches that may wait for a running slot (default: 64). A batch past that is not run:
    /// each of its requests is answered `busy` with a retry hint, so the requests admitted
    /// keep a bounded latency under overload.
    pub max_queued: usize,
    /// How long shutdown waits for connections to finish (10 s).
    pub shutdown_grace: Duration,
    /// Most connections at once that have not authenticated, when tokens are configured
    /// (256, and at most a quarter of `max_connections`: `descriptors::apply`).
    pub max_unauthenticated: usize,
    /// A connection that has not authenticated this long after it opened, when tokens are
    /// configured, is answered `timeout` and closed (10 s).
    pub auth_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_line_bytes: 1 << 20,
            max_connections: 1024,
            idle_timeout: Duration::from_secs(300),
            slow_client_timeout: Duration::from_secs(30),
            max_pipelined: 1024,
            max_running: default_running(),
            max_queued: 64,
            shutdown_grace: Duration::from_secs(10),
            max_unauthenticated: 256,
            auth_timeout: Duration::from_secs(10),
        }
    }
}

/// The default capacity: two running batches per core (one per core left the cores idle
/// between batches: 25 % fewer searches/s on 2 cores, `docs/benchmarks.md`).
fn default_running() -> usize {
    2 * std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
}

/// Admission by capacity (`docs/protocol.md`, "Capacity"): `max_running` batches run, up to
/// `max_queued` wait, and the rest are answered `busy`. A batch holds an admission ticket (one
/// of `max_running + max_queued`) from the moment it is admitted until it is done, and a
/// running slot while it runs; so the count is exact, and a batch that was handed a slot but
/// not yet polled never makes the next one look like overload.
#[derive(Debug)]
pub struct Admission {
    pub(crate) tickets: Arc<Semaphore>,
    pub(crate) running: Arc<Semaphore>,
    pub(crate) max_queued: usize,
    pub(crate) max_running: usize,
}

/// What an admitted batch holds: its ticket until it is done, its running slot until its
/// requests have run (not while it waits for the fsync it shares with other batches).
pub(crate) struct Admitted {
    pub(crate) ticket: tokio::sync::OwnedSemaphorePermit,
    pub(crate) running: tokio::sync::OwnedSemaphorePermit,
}

impl Admission {
    /// Capacity per `limits`.
    #[must_use]
    pub fn new(limits: &Limits) -> Admission {
        Admission {
            tickets: Arc::new(Semaphore::new(limits.max_running + limits.max_queued)),
            running: Arc::new(Semaphore::new(limits.max_running)),
            max_queued: limits.max_queued,
            max_running: limits.max_running,
        }
    }

    /// A running slot: at once, or after waiting in the queue; `None` when the queue is full.
    pub(crate) async fn admit(&self) -> Option<Admitted> {
        let ticket = Arc::clone(&self.tickets).try_acquire_owned().ok()?;
        let running = Arc::clone(&self.running).acquire_owned().await.ok()?;
        Some(Admitted { ticket, running })
    }

    /// STATS' view: the limits, the batches running and those admitted (running, queued, or
    /// waiting for their fsync).
    #[must_use]
    pub fn gauges(&self) -> serde_json::Value {
        let capacity = self.max_running + self.max_queued;
        serde_json::json!({
            "max_running": self.max_running,
            "max_queued": self.max_queued,
            "running": self.max_running - self.running.available_permits(),
            "admitted": capacity - self.tickets.available_permits(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admission_runs_max_running_queues_max_queued_and_refuses_the_rest() {
        let limits = Limits {
            max_running: 2,
            max_queued: 1,
            ..Limits::default()
        };
        let a = Arc::new(Admission::new(&limits));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let first = a.admit().await.expect("a free slot");
            let second = a.admit().await.expect("a free slot");
            let waiting = tokio::spawn({
                let a = Arc::clone(&a);
                async move { a.admit().await.is_some() }
            });
            while a.tickets.available_permits() > 0 {
                tokio::task::yield_now().await;
            }
            assert!(a.admit().await.is_none(), "the queue is full: busy");
            drop(first);
            assert!(
                waiting.await.unwrap(),
                "the queued batch runs once a slot frees"
            );
            assert_eq!(
                a.tickets.available_permits(),
                2,
                "a finished batch gives its ticket back"
            );
            drop(second);
            assert!(a.admit().await.is_some());
        });
    }
}
