//! Operations (`docs/http.md`, "Operations"): `/healthz` (the process answers), `/readyz`
//! (the store is open and takes writes) and `/metrics` in Prometheus' text format, version
//! 0.0.4. Labels carry command names and error codes only: never a user id, a token or a
//! query.

use super::app::{App, authenticate, json_response};
use crate::args::Code;
use axum::Router;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;
use std::fmt::Write as _;
use std::sync::Arc;

/// The bytes free on the store's disk below which `/readyz` fails: room for four requests of
/// the largest size (`max_line_bytes`) and what they log.
fn low_disk(app: &App) -> Option<u64> {
    let store = app.shared.home.stores().into_iter().next()?;
    let free = rustix::fs::statvfs(store.dir())
        .ok()
        .map(|s| s.f_bavail.saturating_mul(s.f_frsize))?;
    let need = 4 * app.shared.limits.max_line_bytes as u64;
    (free < need).then_some(free)
}

pub(super) fn routes() -> Router<Arc<App>> {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/openapi.json", get(openapi))
}

async fn openapi() -> Response {
    json_response(StatusCode::OK, &super::openapi::document())
}

async fn healthz() -> Response {
    json_response(StatusCode::OK, &json!({"status": "ok"}))
}

/// 200 when the store takes writes; 503 when poisoned or its disk is (nearly) full. Vectors
/// being restored and a keyword index being built are said, not failed: the store answers.
async fn readyz(State(app): State<Arc<App>>) -> Response {
    // Every store open here: a cluster node's partitions (one poisoned is being reopened).
    let all: Vec<amberdb::Stats> = app
        .shared
        .home
        .stores()
        .iter()
        .map(amberdb::Store::stats)
        .collect();
    let low = low_disk(&app);
    let mut reasons = Vec::new();
    if all.iter().any(|s| s.poisoned) {
        reasons.push("poisoned: writes are refused until the store is reopened".to_owned());
    }
    let unindexed: usize = all.iter().map(|s| s.unindexed).sum();
    if let Some(free) = low {
        reasons.push(format!("the store's disk has {free} bytes free"));
    }
    let body = json!({
        "status": if reasons.is_empty() { "ready" } else { "not_ready" },
        "reasons": reasons,
        "restoring": unindexed > 0,
        "unindexed": unindexed,
        "lexical_ready": all.iter().all(|s| s.lexical_ready),
    });
    let status = if reasons.is_empty() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    json_response(status, &body)
}

/// `/metrics`: needs a token when the server has tokens (any token, read-only included).
async fn metrics(State(app): State<Arc<App>>, request: Request) -> Response {
    if let Err(refused) = authenticate(&app, &request, false) {
        return *refused;
    }
    (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        render(&app),
    )
        .into_response()
}

/// One metric family's header.
fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// A metric family of one sample.
fn single(out: &mut String, name: &str, kind: &str, help: &str, value: f64) {
    family(out, name, kind, help);
    let _ = writeln!(out, "{name} {value}");
}

fn render(app: &App) -> String {
    let m = &app.shared.metrics;
    let mut out = String::new();
    family(
        &mut out,
        "amberdb_requests_total",
        "counter",
        "Requests answered, by command and outcome (ok or the error code).",
    );
    let per_command = m.per_command();
    for (command, c) in &per_command {
        let _ = writeln!(
            out,
            "amberdb_requests_total{{command=\"{command}\",code=\"ok\"}} {}",
            c.ok
        );
        for code in Code::ALL {
            let n = c.failed[code.index()];
            if n > 0 {
                let _ = writeln!(
                    out,
                    "amberdb_requests_total{{command=\"{command}\",code=\"{}\"}} {n}",
                    code.as_str()
                );
            }
        }
    }
    family(
        &mut out,
        "amberdb_request_duration_seconds",
        "histogram",
        "Time in the handler, by command.",
    );
    for (command, c) in &per_command {
        let mut cumulative = 0;
        for (i, bound) in crate::metrics::LATENCY_BUCKETS.iter().enumerate() {
            cumulative += c.buckets[i];
            let _ = writeln!(
                out,
                "amberdb_request_duration_seconds_bucket{{command=\"{command}\",le=\"{bound}\"}} {cumulative}"
            );
        }
        let _ = writeln!(
            out,
            "amberdb_request_duration_seconds_bucket{{command=\"{command}\",le=\"+Inf\"}} {}",
            c.total()
        );
        let _ = writeln!(
            out,
            "amberdb_request_duration_seconds_sum{{command=\"{command}\"}} {}",
            c.seconds
        );
        let _ = writeln!(
            out,
            "amberdb_request_duration_seconds_count{{command=\"{command}\"}} {}",
            c.total()
        );
    }
    family(
        &mut out,
        "amberdb_errors_total",
        "counter",
        "Errors by code: of requests, and of connections refused or timed out.",
    );
    for (code, n) in m.errors_by_code() {
        let _ = writeln!(
            out,
            "amberdb_errors_total{{code=\"{}\"}} {n}",
            code.as_str()
        );
    }
    connections(&mut out, app);
    store(&mut out, app);
    out
}

fn connections(out: &mut String, app: &App) {
    use std::sync::atomic::Ordering::Relaxed;
    let m = &app.shared.metrics;
    let load = |a: &std::sync::atomic::AtomicU64| a.load(Relaxed) as f64;
    single(
        out,
        "amberdb_uptime_seconds",
        "gauge",
        "Seconds since the server started.",
        m.uptime().as_secs_f64(),
    );
    single(
        out,
        "amberdb_connections_open",
        "gauge",
        "Connections open now, every transport.",
        load(&m.connections_open),
    );
    single(
        out,
        "amberdb_connections_accepted_total",
        "counter",
        "Connections accepted since start.",
        load(&m.connections_total),
    );
    single(
        out,
        "amberdb_connections_refused_total",
        "counter",
        "Connections refused at max_connections or max_unauthenticated.",
        load(&m.connections_refused),
    );
    single(
        out,
        "amberdb_connections_max",
        "gauge",
        "max_connections.",
        app.shared.limits.max_connections as f64,
    );
    let a = &app.shared.admission;
    let g = a.gauges();
    let n = |k: &str| g[k].as_f64().unwrap_or(0.0);
    single(
        out,
        "amberdb_admission_running",
        "gauge",
        "Batches running now.",
        n("running"),
    );
    single(
        out,
        "amberdb_admission_admitted",
        "gauge",
        "Batches admitted now: running, queued or waiting for their fsync.",
        n("admitted"),
    );
    single(
        out,
        "amberdb_admission_max_running",
        "gauge",
        "max_running.",
        n("max_running"),
    );
    single(
        out,
        "amberdb_admission_max_queued",
        "gauge",
        "max_queued.",
        n("max_queued"),
    );
}

/// The store gauges, summed over every store open here (a cluster node's partitions).
fn store(out: &mut String, app: &App) {
    let mut summed: Vec<(&str, &str, &str, f64)> = Vec::new();
    for store in app.shared.home.stores() {
        for (i, sample) in store_samples(&store).into_iter().enumerate() {
            match summed.get_mut(i) {
                Some(s) => s.3 += sample.3,
                None => summed.push(sample),
            }
        }
    }
    for (name, kind, help, value) in summed {
        single(out, name, kind, help, value);
    }
}

type Sample = (&'static str, &'static str, &'static str, f64);

fn store_samples(store: &amberdb::Store) -> Vec<Sample> {
    let s = store.stats();
    let samples: [Sample; 8] = [
        (
            "amberdb_store_bytes",
            "gauge",
            "Bytes of the store's files on disk.",
            store.bytes_on_disk() as f64,
        ),
        (
            "amberdb_store_memories",
            "gauge",
            "Live memories, all users.",
            s.memories as f64,
        ),
        (
            "amberdb_store_users",
            "gauge",
            "Users with at least one memory.",
            s.users as f64,
        ),
        (
            "amberdb_store_sealed_segments",
            "gauge",
            "Sealed vector segments.",
            s.sealed_segments as f64,
        ),
        (
            "amberdb_store_growing_rows",
            "gauge",
            "Rows in the growing segment.",
            s.growing_rows as f64,
        ),
        (
            "amberdb_log_tail_frames",
            "gauge",
            "Logged operations after the newest checkpoint (replayed by an open).",
            s.last_seq.saturating_sub(s.checkpoint_seq) as f64,
        ),
        (
            "amberdb_log_undurable_frames",
            "gauge",
            "Logged operations not yet fsynced.",
            s.last_seq.saturating_sub(s.durable_seq) as f64,
        ),
        (
            "amberdb_log_fsyncs_total",
            "counter",
            "fsyncs of the log since open.",
            s.log_fsyncs as f64,
        ),
    ];
    samples.into_iter().chain(maintenance(&s)).collect()
}

fn maintenance(s: &amberdb::Stats) -> [Sample; 14] {
    let b = |v: bool| if v { 1.0 } else { 0.0 };
    let mx = &s.maintenance;
    [
        (
            "amberdb_checkpoints_total",
            "counter",
            "Checkpoints since open.",
            mx.checkpoints as f64,
        ),
        (
            "amberdb_checkpoint_failures_total",
            "counter",
            "Checkpoints that failed since open.",
            mx.failures as f64,
        ),
        (
            "amberdb_purges_total",
            "counter",
            "Purges since open.",
            mx.purges as f64,
        ),
        (
            "amberdb_purge_failures_total",
            "counter",
            "Purges that failed since open.",
            mx.purge_failures as f64,
        ),
        (
            "amberdb_index_builds_total",
            "counter",
            "IVF builds finished since open.",
            s.index.builds as f64,
        ),
        (
            "amberdb_index_build_failures_total",
            "counter",
            "IVF builds that failed since open.",
            s.index.failures as f64,
        ),
        (
            "amberdb_index_building",
            "gauge",
            "1 while an IVF build runs.",
            b(s.index.building),
        ),
        (
            "amberdb_index_flat_rows",
            "gauge",
            "Rows in sealed flat segments.",
            s.index.flat_rows as f64,
        ),
        (
            "amberdb_unindexed",
            "gauge",
            "Records whose vectors are being restored (out of vector search).",
            s.unindexed as f64,
        ),
        (
            "amberdb_vectors_restored",
            "gauge",
            "Of those, vectors computed again so far.",
            s.vectors_restored as f64,
        ),
        (
            "amberdb_lexical_ready",
            "gauge",
            "1 once the keyword index is built after the open.",
            b(s.lexical_ready),
        ),
        (
            "amberdb_poisoned",
            "gauge",
            "1 while writes are refused after a failed write or fsync.",
            b(s.poisoned),
        ),
        (
            "amberdb_disk_full_refusals_total",
            "counter",
            "Writes refused because the disk was full.",
            s.disk_full_refusals as f64,
        ),
        (
            "amberdb_quarantined_files",
            "gauge",
            "Another store's files moved aside by an open.",
            s.quarantined.len() as f64,
        ),
    ]
}
