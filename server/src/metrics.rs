//! Counters an operator graphs: requests and errors by command and code, connections, and
//! latency quantiles (an HDR histogram of microseconds since start, 3 significant digits).
//!
//! Latency is the time a request spends in its handler, from parsed line to reply object; it
//! excludes queueing behind earlier requests of the same pipelined batch and the socket.

use crate::args::Code;
use hdrhistogram::Histogram;
use parking_lot::Mutex;
use serde_json::{Map, Value, json};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The server's counters. Cheap to update from many threads.
pub struct Metrics {
    started: Instant,
    requests: AtomicU64,
    errors: [AtomicU64; Code::ALL.len()],
    per_command: Mutex<std::collections::BTreeMap<&'static str, u64>>,
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
            *self.per_command.lock().entry(name).or_insert(0) += 1;
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
            .map(|(k, v)| ((*k).to_owned(), json!(v)))
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
        m.insert("ok".into(), Value::Bool(true));
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
