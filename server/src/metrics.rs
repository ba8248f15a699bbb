//! Counters an operator graphs: requests and errors by command and code, connections, and
//! latency quantiles (an HDR histogram of microseconds since start, 3 significant digits).
//!
//! Latency is the time a request spends in its handler, from parsed line to reply object; it
//! excludes queueing behind earlier requests of the same pipelined batch and the socket.
//!
//! STATS reports them as JSON ([`Metrics::snapshot`]); `/metrics` in Prometheus' text format
//! ([`Metrics::per_command`] and the gauges; `crate::http`).

use crate::args::Code;
use hdrhistogram::Histogram;
use parking_lot::Mutex;
use serde_json::{Map, Value, json};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Upper bounds of the per-command latency histogram's buckets, in seconds (Prometheus').
pub const LATENCY_BUCKETS: [f64; 14] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

/// One command's requests: by outcome (`ok` or an error code) and by latency.
#[derive(Debug, Clone, Default)]
pub struct CommandCounts {
    /// Requests that succeeded.
    pub ok: u64,
    /// Requests that failed, by [`Code::index`].
    pub failed: [u64; Code::ALL.len()],
    /// Requests whose handler time was at most each of [`LATENCY_BUCKETS`] (not cumulative:
    /// the last slot counts those over the last bound).
    pub buckets: [u64; LATENCY_BUCKETS.len() + 1],
    /// Sum of handler times, in seconds.
    pub seconds: f64,
}

impl CommandCounts {
    /// Every request of the command.
    #[must_use]
    pub fn total(&self) -> u64 {
        self.ok + self.failed.iter().sum::<u64>()
    }
}

/// The server's counters. Cheap to update from many threads.
pub struct Metrics {
    started: Instant,
    requests: AtomicU64,
    errors: [AtomicU64; Code::ALL.len()],
    per_command: Mutex<std::collections::BTreeMap<&'static str, CommandCounts>>,
    latency_us: Mutex<Histogram<u64>>,
    /// Connections open now.
    pub connections_open: AtomicU64,
    /// Connections accepted since start.
    pub connections_total: AtomicU64,
    /// Connections refused at `max_connections`.
    pub connections_refused: AtomicU64,
    /// Bytes read from clients.
    pub bytes_in: AtomicU64,
    /// Bytes written to clients.
    pub bytes_out: AtomicU64,
    /// The TCP server's admission, whose gauges STATS reports (unset for MCP and the CLI).
    pub admission: std::sync::OnceLock<std::sync::Arc<crate::limits::Admission>>,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}

impl Metrics {
    /// Zeroed counters.
    #[must_use]
    pub fn new() -> Metrics {
        Metrics {
            started: Instant::now(),
            requests: AtomicU64::new(0),
            errors: std::array::from_fn(|_| AtomicU64::new(0)),
            per_command: Mutex::new(std::collections::BTreeMap::new()),
            // 1 µs .. 1 h at 3 significant digits; `new_with_bounds` only fails on bad bounds.
            latency_us: Mutex::new(
                Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("constant, valid bounds"),
            ),
            connections_open: AtomicU64::new(0),
            connections_total: AtomicU64::new(0),
            connections_refused: AtomicU64::new(0),
            bytes_in: AtomicU64::new(0),
            bytes_out: AtomicU64::new(0),
            admission: std::sync::OnceLock::new(),
        }
    }

    /// Records one request: the command (`None` for lines that named none), how long its
    /// handler took, and its error code if it failed.
    pub fn record(&self, command: Option<&'static str>, took: Duration, error: Option<Code>) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        if let Some(code) = error {
            self.errors[code.index()].fetch_add(1, Ordering::Relaxed);
        }
        if let Some(name) = command {
            let seconds = took.as_secs_f64();
            {
                let mut all = self.per_command.lock();
                let c = all.entry(name).or_default();
                match error {
                    Some(code) => c.failed[code.index()] += 1,
                    None => c.ok += 1,
                }
                let slot = LATENCY_BUCKETS
                    .iter()
                    .position(|b| seconds <= *b)
                    .unwrap_or(LATENCY_BUCKETS.len());
                c.buckets[slot] += 1;
                c.seconds += seconds;
            }
            let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX).max(1);
            self.latency_us.lock().saturating_record(us);
        }
    }

    /// The median handler time so far (1 ms before any request).
    #[must_use]
    pub fn p50(&self) -> Duration {
        let h = self.latency_us.lock();
        if h.is_empty() {
            Duration::from_millis(1)
        } else {
            Duration::from_micros(h.value_at_quantile(0.5))
        }
    }

    /// Counts an error that no request carried (a refused connection, a timeout).
    pub fn count_error(&self, code: Code) {
        self.errors[code.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// Each command's counts so far, by name.
    #[must_use]
    pub fn per_command(&self) -> Vec<(&'static str, CommandCounts)> {
        self.per_command
            .lock()
            .iter()
            .map(|(k, v)| (*k, v.clone()))
            .collect()
    }

    /// Errors by code so far (requests' and connections').
    #[must_use]
    pub fn errors_by_code(&self) -> Vec<(Code, u64)> {
        Code::ALL
            .iter()
            .map(|c| (*c, self.errors[c.index()].load(Ordering::Relaxed)))
            .collect()
    }

    /// Seconds since the server started.
    #[must_use]
    pub fn uptime(&self) -> Duration {
        self.started.elapsed()
    }

    /// Requests answered so far.
    #[must_use]
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// The counters as STATS reports them.
    #[must_use]
    pub fn snapshot(&self) -> Map<String, Value> {
        let errors: Map<String, Value> = Code::ALL
            .iter()
            .map(|c| {
                (
                    c.as_str().to_owned(),
                    json!(self.errors[c.index()].load(Ordering::Relaxed)),
                )
            })
            .collect();
        let error_total: u64 = self.errors.iter().map(|e| e.load(Ordering::Relaxed)).sum();
        let per_command: Map<String, Value> = self
            .per_command
            .lock()
            .iter()
            .map(|(k, v)| ((*k).to_owned(), json!(v.total())))
            .collect();
        let latency = {
            let h = self.latency_us.lock();
            json!({
                "count": h.len(),
                "p50_us": h.value_at_quantile(0.50),
                "p90_us": h.value_at_quantile(0.90),
                "p99_us": h.value_at_quantile(0.99),
                "p999_us": h.value_at_quantile(0.999),
                "max_us": h.max(),
                "mean_us": (h.mean() * 10.0).round() / 10.0,
            })
        };
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut m = Map::new();
        m.insert(
            "uptime_seconds".into(),
            json!(self.started.elapsed().as_secs()),
        );
        m.insert("version".into(), json!(env!("CARGO_PKG_VERSION")));
        m.insert("requests".into(), json!(self.requests()));
        m.insert("errors".into(), json!(error_total));
        m.insert("errors_by_code".into(), Value::Object(errors));
        m.insert("requests_by_command".into(), Value::Object(per_command));
        m.insert("latency".into(), latency);
        m.insert(
            "connections".into(),
            json!({
                "open": load(&self.connections_open),
                "total": load(&self.connections_total),
                "refused": load(&self.connections_refused),
            }),
        );
        m.insert("bytes_in".into(), json!(load(&self.bytes_in)));
        m.insert("bytes_out".into(), json!(load(&self.bytes_out)));
        if let Some(a) = self.admission.get() {
            m.insert("admission".into(), a.gauges());
        }
        m
    }
}
