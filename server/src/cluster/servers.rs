//! What `amberdb cluster init` checks of the NATS servers before it fixes a cluster's settings:
//! each server's own account of its configuration, read from its monitoring endpoint
//! (`GET <url>/varz`, nats-server's `http:` listener), against what amberdb's promises need
//! (docs/cluster.md, "Why JetStream, and what it must not do"):
//!
//! - `jetstream { sync_interval: always }`: with JetStream's default (an fsync every two
//!   minutes) a server that loses power can lose messages it acknowledged, and a majority of
//!   such servers loses them for good (Jepsen's NATS 2.12.1 analysis, nats-server #7564);
//! - in a cluster of servers, `ping_interval` of at most 1 s and `ping_max` of at most 3: with
//!   the defaults (two minutes, two) a server cut off without a word stays the others' route
//!   peer for 20 s and more, and every failover waits for it ("What a host cut waits for").
//!
//! Guarantees: a server that cannot be read, or says anything else, refuses the init, naming
//! the server and the setting; nothing is written before every server passed.

use anyhow::Context as _;
use serde_json::Value;
use std::time::Duration;

/// The longest ping interval a server of a cluster may have.
pub const PING_INTERVAL_AT_MOST: Duration = Duration::from_secs(1);
/// The most unanswered pings a server of a cluster may wait for.
pub const PING_MAX_AT_MOST: u64 = 3;
/// How long one server's monitoring endpoint may take to answer.
const READ_LIMIT: Duration = Duration::from_secs(5);

/// Checks every server whose monitoring URL is in `monitors` (`http://host:port`). Returns one
/// line per server.
///
/// # Errors
/// A server that cannot be read or whose settings break a promise (module doc), named.
pub async fn check(monitors: &[String]) -> anyhow::Result<String> {
    anyhow::ensure!(!monitors.is_empty(), "no monitoring URL given");
    let mut report = String::new();
    for url in monitors {
        let varz = tokio::time::timeout(READ_LIMIT, varz(url))
            .await
            .map_err(|_| {
                anyhow::anyhow!("{url}/varz: no answer within {} s", READ_LIMIT.as_secs())
            })?
            .with_context(|| format!("reading {url}/varz"))?;
        let name =
            judge(&varz).map_err(|why| anyhow::anyhow!("the NATS server at {url}: {why}"))?;
        report += &format!("checked NATS server {name} ({url}): sync_interval always, pings fit\n");
    }
    Ok(report)
}

/// Whether a server's `/varz` keeps amberdb's promises (module doc): its name, or why not.
///
/// # Errors
/// What it breaks, with the line its configuration needs.
pub fn judge(varz: &Value) -> Result<String, String> {
    let name = varz["server_name"]
        .as_str()
        .unwrap_or("(unnamed)")
        .to_owned();
    let Some(jetstream) = varz["jetstream"]["config"].as_object() else {
        return Err(format!("{name} runs without JetStream"));
    };
    if jetstream.get("sync_always") != Some(&Value::Bool(true)) {
        let every = jetstream
            .get("sync_interval")
            .and_then(Value::as_u64)
            .map_or_else(
                || "its default".to_owned(),
                |ns| format!("{} s", ns / 1_000_000_000),
            );
        return Err(format!(
            "{name} fsyncs JetStream every {every}, not before each acknowledgement: it needs `jetstream {{ sync_interval: always }}`"
        ));
    }
    // Route pings matter only between servers.
    let clustered = varz["cluster"]["urls"]
        .as_array()
        .is_some_and(|u| !u.is_empty())
        || varz["cluster"]["name"]
            .as_str()
            .is_some_and(|n| !n.is_empty());
    if clustered {
        let interval = varz["ping_interval"].as_u64().map(Duration::from_nanos);
        if interval.is_none_or(|i| i > PING_INTERVAL_AT_MOST) {
            return Err(format!(
                "{name} pings its peers every {}: a server cut off is noticed that late; it needs `ping_interval: \"1s\"`",
                interval.map_or_else(|| "(not said)".to_owned(), |i| format!("{i:?}"))
            ));
        }
        let max = varz["ping_max"].as_u64();
        if max.is_none_or(|m| m > PING_MAX_AT_MOST) {
            return Err(format!(
                "{name} waits for {} unanswered pings: it needs `ping_max: 3` (or fewer)",
                max.map_or_else(|| "(not said)".to_owned(), |m| m.to_string())
            ));
        }
    }
    Ok(name)
}

/// `GET <url>/varz`, its JSON.
async fn varz(url: &str) -> anyhow::Result<Value> {
    use http_body_util::BodyExt as _;
    let uri: hyper::Uri = format!("{}/varz", url.trim_end_matches('/'))
        .parse()
        .context("not a URL")?;
    anyhow::ensure!(
        uri.scheme_str() == Some("http"),
        "a monitoring URL is http://host:port"
    );
    let host = uri.host().context("no host")?.to_owned();
    let port = uri.port_u16().unwrap_or(80);
    let stream = tokio::net::TcpStream::connect((host.as_str(), port)).await?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    let request = hyper::Request::get(uri.path())
        .header(hyper::header::HOST, format!("{host}:{port}"))
        .body(http_body_util::Empty::<hyper::body::Bytes>::new())?;
    let response = sender.send_request(request).await?;
    anyhow::ensure!(response.status().is_success(), "HTTP {}", response.status());
    let body = response.into_body().collect().await?.to_bytes();
    Ok(serde_json::from_slice(&body)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn server(sync_always: bool, ping_s: u64, ping_max: u64, clustered: bool) -> Value {
        json!({
            "server_name": "nats1",
            "ping_interval": ping_s * 1_000_000_000,
            "ping_max": ping_max,
            "jetstream": {"config": {"sync_interval": 120_000_000_000_u64, "sync_always": sync_always}},
            "cluster": if clustered { json!({"name": "amberdb", "urls": ["10.0.0.2:6222"]}) } else { json!({}) },
        })
    }

    #[test]
    fn a_server_that_fsyncs_before_each_acknowledgement_and_pings_each_second_passes() {
        assert_eq!(judge(&server(true, 1, 3, true)).unwrap(), "nats1");
        // Alone, its route pings do not matter.
        assert_eq!(judge(&server(true, 120, 2, false)).unwrap(), "nats1");
    }

    #[test]
    fn each_broken_promise_is_refused_naming_the_setting() {
        let lazy = judge(&server(false, 1, 3, true)).unwrap_err();
        assert!(
            lazy.contains("every 120 s") && lazy.contains("sync_interval: always"),
            "{lazy}"
        );
        let slow = judge(&server(true, 120, 2, true)).unwrap_err();
        assert!(
            slow.contains("every 120s") && slow.contains("ping_interval"),
            "{slow}"
        );
        let patient = judge(&server(true, 1, 5, true)).unwrap_err();
        assert!(
            patient.contains("5 unanswered") && patient.contains("ping_max"),
            "{patient}"
        );
        let without = judge(&json!({"server_name": "n"})).unwrap_err();
        assert!(without.contains("without JetStream"), "{without}");
    }
}
