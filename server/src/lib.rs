//! amberdb-server: the `amberdb` binary, as a library so tests can call it.
//!
//! - [`server`]: the TCP line protocol (`amberdb serve`, `docs/protocol.md`), on tokio;
//! - [`mcp`]: MCP over stdio (`amberdb mcp`);
//! - [`commands`]: the one command table both run, a thin layer over the library;
//! - [`transfer`], [`check`]: the CLI's import / export and integrity check.
//!
//! The embedder is MiniLM unless the user explicitly asks for the no-model one
//! ([`EmbedderChoice`]); missing model files are an error that says how to fetch them, never
//! a silent switch.
//!
//! ```
//! use amberdb_server::{EmbedderChoice, open_options};
//! let dir = tempfile::tempdir()?;
//! let report = amberdb_server::demo(dir.path(), open_options(EmbedderChoice::Hashing, None)?)?;
//! assert!(report.contains("reopened"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod args;
pub mod auth;
pub mod check;
pub mod cli;
pub mod client;
#[cfg(feature = "cluster")]
pub mod cluster;
pub mod commands;
pub mod config;
pub mod descriptors;
pub mod dispatch;
pub mod dump;
pub mod embedder;
pub mod everywhere;
pub mod fail;
pub mod foreign;
pub mod framing;
#[cfg(feature = "http")]
pub mod http;
pub mod limits;
pub mod mcp;
pub mod metrics;
pub mod protocol;
pub mod reply;
pub mod route;
pub mod server;
pub mod transfer;
pub mod vmm;

pub use embedder::{
    EmbedderChoice, Fetch, embedder_for, embedder_of_model, ensure_model, fetch_model,
    model_present, open_options, recorded_embedder,
};

use amberdb::KernelError;
use amberdb::{
    Category, EngineError, NewMemory, Result, SearchRequest, Store, StoreOptions, Strategy,
};
use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;

/// Runs `amberdb serve` until SIGTERM or ctrl-c: opens the store, listens, prints
/// `listening on ADDR` on stdout, serves, then (`docs/protocol.md`, "Shutdown") stops
/// accepting, answers what each connection has read, makes everything durable and
/// checkpoints.
///
/// # Errors
/// The store cannot be opened (locked, corrupted, another embedder), the address cannot be
/// bound, or the final flush / checkpoint fails.
pub fn run_server(config: config::ServeConfig, mut options: StoreOptions) -> anyhow::Result<()> {
    use anyhow::Context;
    use std::io::Write;
    if let Some(limit) = config.memory_limit {
        options.memory_limit = limit;
    }
    config.retention.apply(&config.file, &mut options);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("amberdb-io")
        .build()
        .context("starting the runtime")?;
    std::fs::create_dir_all(&config.data_dir)
        .with_context(|| format!("creating {}", config.data_dir.display()))?;
    // Descriptors are a budget (docs/reliability.md): the soft limit raised, connections
    // capped to what the store leaves free.
    let store_files = std::fs::read_dir(&config.data_dir).map_or(0, Iterator::count);
    let budget = descriptors::raise(store_files);
    let mut config = config;
    descriptors::apply(&budget, &mut config.limits);
    tracing::info!(
        soft_limit_before = budget.soft_before,
        soft_limit = budget.soft,
        hard_limit = budget.hard,
        reserve = budget.reserve,
        max_connections = config.limits.max_connections,
        max_unauthenticated = config.limits.max_unauthenticated,
        "file descriptors"
    );
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind(config.addr))
        .with_context(|| format!("listening on {}", config.addr))?;
    let addr = listener.local_addr()?;
    // HTTP is bound before the store opens, so a cluster node registers where it serves it.
    let http_listener = bind_http(&runtime, config.http.as_ref())?;
    let http_addr = http_listener.as_ref().and_then(|l| l.local_addr().ok());
    let home = open_home(&runtime, &config, options, addr, http_addr)?;
    let (tokens, bound) = config.auth.counts();
    tracing::info!(%addr, tokens, user_bound = bound, limits = ?config.limits, "listening");
    let shared = Arc::new(dispatch::Shared::over(
        home.clone(),
        std::sync::Arc::new(metrics::Metrics::new()),
        config.limits,
        config.auth,
    ));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let http = start_http(
        &runtime,
        config.http.as_ref(),
        http_listener,
        &shared,
        stop_rx,
    )?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "listening on {addr}")?;
        if let Some((url, _)) = &http {
            writeln!(out, "http on {url}")?;
        }
        out.flush()?;
    }
    runtime.block_on(server::serve(listener, Arc::clone(&shared), async {
        shutdown_signal().await;
        let _ = stop_tx.send(true);
    }))?;
    if let Some((_, task)) = http {
        let _ = runtime.block_on(task);
    }
    tracing::info!(
        requests = shared.metrics.requests(),
        "connections closed; flushing and checkpointing"
    );
    drop(shared);
    match home {
        dispatch::Home::One(store) => {
            runtime.shutdown_timeout(std::time::Duration::from_secs(5));
            close_store(store)
        }
        dispatch::Home::Cluster(node) => {
            runtime.block_on(node.stop());
            runtime.shutdown_timeout(std::time::Duration::from_secs(5));
            tracing::info!("stopped cleanly");
            Ok(())
        }
    }
}

/// Flushes, checkpoints and closes a single node's store at shutdown.
fn close_store(store: Store) -> anyhow::Result<()> {
    use anyhow::Context;
    store.flush().context("flushing the store")?;
    match store.checkpoint() {
        // Vectors still being restored (R4b): the next open carries on; nothing is lost.
        Err(amberdb::EngineError::Kernel(KernelError::Restoring { left })) => {
            tracing::warn!(left, "not checkpointed: vectors still being restored");
        }
        done => done.context("checkpointing the store")?,
    }
    let seq = store.stats().checkpoint_seq;
    store.close().context("closing the store")?;
    tracing::info!(checkpoint_seq = seq, "stopped cleanly");
    Ok(())
}

/// Opens what the server serves: the store, or (`--cluster`) the node's partition stores.
fn open_home(
    runtime: &tokio::runtime::Runtime,
    config: &config::ServeConfig,
    options: StoreOptions,
    addr: std::net::SocketAddr,
    http_addr: Option<std::net::SocketAddr>,
) -> anyhow::Result<dispatch::Home> {
    use anyhow::Context;
    if let Some(cluster) = &config.cluster {
        #[cfg(not(feature = "cluster"))]
        {
            let _ = (runtime, cluster, addr, http_addr);
            anyhow::bail!("--cluster: this amberdb is built without the cluster feature");
        }
        #[cfg(feature = "cluster")]
        {
            let peer = cluster::lease::Peer {
                address: addr.to_string(),
                http: config.http.as_ref().zip(http_addr).map(|(h, bound)| {
                    let scheme = if h.tls.is_some() { "https" } else { "http" };
                    format!("{scheme}://{bound}")
                }),
                expires_ms: 0,
                positions: Vec::new(),
                running_crcs: Vec::new(),
                checkpoints: Vec::new(),
                acknowledged: Vec::new(),
                formats: cluster::lease::Formats::THIS_BUILD,
            };
            let node_config = cluster::node::NodeConfig {
                nats: cluster.nats.clone(),
                name: cluster.node.clone(),
                data_dir: config.data_dir.clone(),
            };
            let node = runtime
                .block_on(cluster::node::Node::start(&node_config, &options, peer))
                .context("joining the cluster")?;
            tracing::info!(
                node = %cluster.node,
                nats = %cluster::shown_nats_urls(&cluster.nats),
                "cluster node started"
            );
            let partitions: Arc<dyn route::Partitions> = node;
            return Ok(dispatch::Home::Cluster(partitions));
        }
    }
    let store = Store::open(&config.data_dir, options)
        .with_context(|| format!("opening the store {}", config.data_dir.display()))?;
    let report = store.open_report();
    tracing::info!(dir = %config.data_dir.display(), memories = store.stats().memories, report = ?report, "store open");
    if report.unindexed > 0 {
        tracing::warn!(damaged = ?report.damaged_segments, unindexed = report.unindexed, "opened without damaged segments: their records are live and found by keyword search; their vectors are being rebuilt from the texts in the background (STATS unindexed)");
    }
    Ok(dispatch::Home::One(store))
}

/// Binds HTTP's address, if HTTP is asked for (a taken port fails the start).
fn bind_http(
    runtime: &tokio::runtime::Runtime,
    config: Option<&config::HttpConfig>,
) -> anyhow::Result<Option<tokio::net::TcpListener>> {
    use anyhow::Context;
    let Some(config) = config else {
        return Ok(None);
    };
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind(config.addr))
        .with_context(|| format!("listening for HTTP on {}", config.addr))?;
    Ok(Some(listener))
}

/// Serves HTTP on `listener` (bound by [`bind_http`]) on `runtime` until `stop`; returns its
/// URL and task.
fn start_http(
    runtime: &tokio::runtime::Runtime,
    config: Option<&config::HttpConfig>,
    listener: Option<tokio::net::TcpListener>,
    shared: &Arc<dispatch::Shared>,
    stop: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<Option<(String, tokio::task::JoinHandle<()>)>> {
    let (Some(config), Some(listener)) = (config, listener) else {
        return Ok(None);
    };
    #[cfg(not(feature = "http"))]
    {
        let _ = (runtime, shared, stop, listener);
        anyhow::bail!(
            "--http {}: this amberdb is built without the http feature",
            config.addr
        );
    }
    #[cfg(feature = "http")]
    {
        let tls = match &config.tls {
            Some((cert, key)) => Some(http::HttpOptions::tls(cert, key)?),
            None => None,
        };
        let bound = listener.local_addr()?;
        let scheme = if tls.is_some() { "https" } else { "http" };
        let options = http::HttpOptions {
            allow: http::Allow::new(&bound, &config.allow_hosts, &config.allow_origins),
            tls,
        };
        tracing::info!(%bound, scheme, "HTTP listening");
        let task = runtime.spawn(http::serve(listener, Arc::clone(shared), options, stop));
        Ok(Some((format!("{scheme}://{bound}"), task)))
    }
}

/// Resolves on SIGTERM or ctrl-c (SIGINT).
async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = ctrl_c => tracing::info!("ctrl-c"),
                    _ = term.recv() => tracing::info!("SIGTERM"),
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "no SIGTERM handler; ctrl-c still stops the server");
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

/// Runs `amberdb mcp` on stdin / stdout until stdin ends, then flushes and closes the store.
///
/// # Errors
/// The store cannot be opened, stdio fails, or the final flush fails.
pub fn run_mcp(dir: &Path, options: StoreOptions) -> anyhow::Result<()> {
    use anyhow::Context;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let store = Store::open(dir, options)
        .with_context(|| format!("opening the store {}", dir.display()))?;
    tracing::info!(dir = %dir.display(), "MCP on stdio");
    // One client, trusted: no token, the default limits; its tool calls go through the one
    // dispatch as every transport's do.
    let shared = Arc::new(dispatch::Shared::new(
        commands::Ctx {
            store: store.clone(),
            metrics: std::sync::Arc::new(metrics::Metrics::new()),
        },
        limits::Limits::default(),
        auth::Auth::none(),
    ));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    mcp::serve(
        &shared,
        &runtime,
        std::io::stdin().lock(),
        std::io::stdout().lock(),
    )?;
    drop(runtime);
    drop(shared);
    store.flush().context("flushing the store")?;
    store.close().context("closing the store")?;
    Ok(())
}

/// Entry points for the fuzz targets (`fuzz/`), `pub` so that a proptest runs them too.
pub mod fuzzing {
    use crate::args::Args;
    use crate::commands;

    /// A request line from the network: framing, then the named command's argument check.
    /// Must never panic. Returns whether the line named a command with acceptable arguments.
    #[must_use]
    pub fn request_line(line: &[u8]) -> bool {
        let Ok(Some(req)) = crate::protocol::parse(line) else {
            return false;
        };
        let Some(command) = commands::find(&req.command) else {
            let _ = commands::unknown(&req.command);
            return false;
        };
        Args::checked(req.args, command.args).is_ok()
    }
}

/// What the demo stores: the kind of things an agent learns.
const NOTES: &[(&str, Category, &[&str])] = &[
    (
        "cargo nextest runs the workspace tests in parallel and retries flaky ones",
        Category::ToolUsage,
        &["rust", "testing"],
    ),
    (
        "the login test was flaky because two tests shared one session cookie",
        Category::BugFix,
        &["auth", "flaky"],
    ),
    (
        "we keep an append-only log and checkpoint the metadata table for fast opens",
        Category::Architecture,
        &["storage"],
    ),
    (
        "raise the postgres connection pool when the API times out under load",
        Category::Performance,
        &["postgres"],
    ),
    (
        "never log the AUTH token; compare it in constant time",
        Category::Security,
        &["auth"],
    ),
];

/// Stores the sample notes in `dir` (skipping ones already there), closes, reopens, searches,
/// and returns a human-readable report.
///
/// # Errors
/// Any engine error, e.g. the store is locked by a running process.
pub fn demo(dir: &Path, options: StoreOptions) -> Result<String> {
    let mut out = String::new();
    let _ = writeln!(out, "embedder {}", options.embedder.model_id());
    let store = Store::open(dir, options.clone())?;
    for (text, category, tags) in NOTES {
        match store.store(
            NewMemory::new(*text)
                .category(*category)
                .tags(tags.iter().copied()),
        ) {
            Ok(stored) if stored.outcome == amberdb::Outcome::Duplicate => {
                let _ = writeln!(out, "already stored as #{}: {text}", stored.memory_id);
            }
            Ok(stored) => {
                let _ = writeln!(out, "stored #{}: {text}", stored.memory_id);
            }
            Err(e) => return Err(e),
        }
    }
    store.close()?;
    let store = Store::open(dir, options)?;
    let _ = writeln!(
        out,
        "reopened {}: {} memories",
        dir.display(),
        store.stats().memories
    );
    for query in [
        "why was the login test flaky",
        "database timeouts under load",
        "keeping credentials secret",
    ] {
        let _ = writeln!(out, "search {query:?}:");
        let request = SearchRequest::new(query)
            .limit(2)
            .strategy(Strategy::Similarity)
            .without_hooks();
        for hit in store.search(&request)?.results {
            let _ = writeln!(
                out,
                "  {:.3}  #{} [{}] {}",
                hit.score, hit.memory.id, hit.memory.category, hit.memory.content
            );
        }
    }
    Ok(out)
}

/// A report of a store's counters.
///
/// # Errors
/// Any engine error from opening the store.
pub fn stats(dir: &Path, options: StoreOptions) -> Result<String> {
    let store = Store::open(dir, options)?;
    let s = store.stats();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "memories {}  users {}  sealed segments {}  growing rows {}",
        s.memories, s.users, s.sealed_segments, s.growing_rows
    );
    let _ = writeln!(
        out,
        "last seq {}  checkpoint seq {}",
        s.last_seq, s.checkpoint_seq
    );
    let report = store.open_report();
    if report.unindexed > 0 {
        let _ = writeln!(
            out,
            "unindexed {} at open ({} now): opened without the damaged segment(s) {}; their records are live and found by keyword search, and a store that stays open (`serve`, `mcp`, `compact`) rebuilds their vectors from the texts (docs/durability.md, R4b)",
            report.unindexed,
            s.unindexed,
            report.damaged_segments.join("; ")
        );
    }
    for (category, n) in s.by_category.iter().filter(|c| c.1 > 0) {
        let _ = writeln!(out, "  {category}: {n}");
    }
    let _ = writeln!(
        out,
        "index: {} IVF segment(s), {} rows in flat segments",
        s.index.segments.len(),
        s.index.flat_rows
    );
    for g in &s.index.segments {
        let _ = writeln!(
            out,
            "  {} rows, {} lists, nprobe {} (recall@10 {:.3} when built)",
            g.rows, g.nlist, g.nprobe, g.built_recall
        );
    }
    let m = &s.maintenance;
    let _ = writeln!(
        out,
        "maintenance: {} checkpoint(s) since open, {} failed; retention removed {} file(s), {} bytes",
        m.checkpoints, m.failures, m.removed.files, m.removed.bytes
    );
    let _ = writeln!(
        out,
        "purges: {} since open, {} failed; archive retention forgot {} record(s){}",
        m.purges,
        m.purge_failures,
        m.archived_forgotten,
        m.purge_pending.map_or_else(String::new, |s| format!(
            "; the oldest delete not purged yet waited {s:.0} s"
        ))
    );
    if let Some(e) = &m.last_error {
        let _ = writeln!(out, "  last failure: {e}");
    }
    Ok(out)
}

/// `amberdb purge`: makes every deleted memory leave the store's files now
/// (`docs/durability.md`, "Purge"), and says what it removed.
///
/// # Errors
/// As `Store::open` and `purge`.
pub fn purge(dir: &Path, options: StoreOptions) -> Result<String> {
    let store = Store::open(dir, options)?;
    let p = store.purge()?;
    Ok(format!(
        "purged: {} deleted row(s) dropped from {} segment(s); removed {} file(s), {} bytes, in {:.2} s\n",
        p.rows_dropped, p.segments_rewritten, p.removed.files, p.removed.bytes, p.seconds
    ))
}

/// `amberdb backup DEST`: copies the store in `dir` into `dest` as it is at one commit, then
/// checks the copy (`docs/durability.md`, "Backup and restore"). Returns the report and
/// whether the copy checked clean. A store a server holds open is `Locked`: the CLI then says
/// to use `--server`.
///
/// # Errors
/// As `Store::open`, `Store::backup` and `check`.
pub fn backup(dir: &Path, options: StoreOptions, dest: &Path) -> anyhow::Result<(String, bool)> {
    let store = match Store::open(dir, options) {
        Err(EngineError::Kernel(KernelError::Locked { .. })) => anyhow::bail!(
            "the store {} is open in another process (a running server?): back it up through \
             the server with `amberdb backup {} --server HOST:PORT` (or send it BACKUP)",
            dir.display(),
            dest.display()
        ),
        other => other?,
    };
    let b = store.backup(dest)?;
    store.close()?;
    let (check, code, _) = check::check(dest)?;
    Ok((
        format!(
            "backed up {} at commit {}: {} files, {} bytes, in {:.2} s\n{check}",
            dir.display(),
            b.seq,
            b.files,
            b.bytes,
            b.seconds
        ),
        code == check::CLEAN,
    ))
}

/// `amberdb backup DEST --server ADDR`: sends BACKUP to a running server and reports its
/// reply. `dest` is made absolute here: it names a directory on the server's machine.
///
/// # Errors
/// Connection and I/O failures; the server's error reply.
pub fn backup_via_server(
    addr: &str,
    token_file: Option<&Path>,
    dest: &Path,
) -> anyhow::Result<(String, bool)> {
    let dest = std::path::absolute(dest)?;
    let reply = ask_server(
        addr,
        token_file,
        "BACKUP",
        serde_json::json!({ "dest": dest.display().to_string() }),
    )?;
    let b = &reply["backup"];
    let clean = b["check"]["clean"] == serde_json::Value::Bool(true);
    let mut out = format!(
        "backed up through {addr} at commit {} into {}: {} files, {} bytes, in {:.2} s\ncheck: {}\n",
        b["seq"],
        dest.display(),
        b["files"],
        b["bytes"],
        b["seconds"].as_f64().unwrap_or(0.0),
        if clean { "clean" } else { "ERRORS" }
    );
    for f in b["check"]["findings"].as_array().into_iter().flatten() {
        let _ = writeln!(out, "  {}", f.as_str().unwrap_or_default());
    }
    Ok((out, clean))
}

/// `amberdb export --server ADDR --output FILE`: the running server writes its store's
/// export into `dest` (a new file; `EXPORT`). Returns the summary to print.
///
/// # Errors
/// The server cannot be reached, refuses the token, or refuses the file (it exists).
pub fn export_via_server(
    addr: &str,
    token_file: Option<&Path>,
    dest: &Path,
) -> anyhow::Result<String> {
    let dest = std::path::absolute(dest)?;
    let reply = ask_server(
        addr,
        token_file,
        "EXPORT",
        serde_json::json!({ "dest": dest.display().to_string() }),
    )?;
    let e = &reply["export"];
    Ok(format!(
        "exported through {addr} into {}: {} entities, {} live and {} archived records",
        dest.display(),
        e["entities"],
        e["live"],
        e["archived"]
    ))
}

/// `amberdb reembed --to EMBEDDER`: moves the store in `dir` to another embedder
/// (`docs/durability.md`, "Re-embedding"); with `server`, asks the running server to.
///
/// # Errors
/// The store is open elsewhere (use `--server`), the new embedder cannot be loaded, or any
/// engine error.
pub fn reembed(
    dir: &Path,
    options: StoreOptions,
    to: EmbedderChoice,
    to_name: &str,
    model_dir: Option<&Path>,
) -> anyhow::Result<String> {
    let embedder = open_options(to, model_dir)?.embedder;
    let store = match Store::open(dir, options) {
        Err(EngineError::Kernel(KernelError::Locked { .. })) => anyhow::bail!(
            "the store {} is open in another process (a running server?): re-embed it through \
             the server with `amberdb reembed --to {to_name} --server HOST:PORT` (or send it REEMBED)",
            dir.display()
        ),
        other => other?,
    };
    let r = store.reembed(embedder)?;
    store.close()?;
    Ok(format!(
        "re-embedded {} to {} ({}-d): {} records and {} tags in {:.2} s (reads and writes waited {:.3} s for the switch); {} bytes on disk\nopen it with --embedder {to_name} from now on\n",
        dir.display(),
        r.model_id,
        r.dim,
        r.records,
        r.tags,
        r.seconds,
        r.switch_seconds,
        r.bytes_after
    ))
}

/// `amberdb reembed --to EMBEDDER --server ADDR`: sends REEMBED and reports the reply.
///
/// # Errors
/// Connection and I/O failures; the server's error reply.
pub fn reembed_via_server(
    addr: &str,
    token_file: Option<&Path>,
    to_name: &str,
) -> anyhow::Result<String> {
    let reply = ask_server(
        addr,
        token_file,
        "REEMBED",
        serde_json::json!({ "embedder": to_name }),
    )?;
    let r = &reply["reembed"];
    Ok(format!(
        "re-embedded through {addr} to {} ({}-d): {} records and {} tags in {:.2} s (reads and writes waited {:.3} s for the switch); {} bytes on disk\nrestart the server with --embedder {to_name}\n",
        r["model"].as_str().unwrap_or_default(),
        r["dimensions"],
        r["records"],
        r["tags"],
        r["seconds"].as_f64().unwrap_or(0.0),
        r["switch_seconds"].as_f64().unwrap_or(0.0),
        r["bytes_on_disk"]
    ))
}

/// Runs one command on a running server through [`client::Client`] (authenticating first
/// with the first shared token of `token_file`, if given) and returns its reply, or the
/// server's refusal as an error.
fn ask_server(
    addr: &str,
    token_file: Option<&Path>,
    command: &str,
    args: serde_json::Value,
) -> anyhow::Result<serde_json::Value> {
    use anyhow::Context as _;
    let token = token_file.map(auth::shared_token).transpose()?;
    let mut client = client::Client::connect(&[addr], token.as_deref(), None)
        .with_context(|| format!("connecting to the server at {addr}"))?;
    Ok(serde_json::Value::Object(client.call(command, &args)?))
}

/// `amberdb restore BACKUP`: checks the backup and copies it into `dir`, which must hold no
/// store and no open one (`docs/durability.md`, "Backup and restore").
///
/// # Errors
/// As `amberdb::restore`.
pub fn restore(backup: &Path, dir: &Path) -> Result<String> {
    let r = amberdb::restore(backup, dir)?;
    Ok(format!(
        "restored {} into {}: {} files, {} bytes, in {:.2} s\n",
        backup.display(),
        dir.display(),
        r.files,
        r.bytes,
        r.seconds
    ))
}

/// `amberdb index`: seals the growing rows, then builds an IVF segment of every flat one
/// (`docs/ivf.md`), and says what it built.
///
/// # Errors
/// As `Store::open`, `checkpoint` and `build_index`.
pub fn build_index(dir: &Path, options: StoreOptions) -> Result<String> {
    let store = Store::open(dir, options)?;
    // A store opened without a damaged segment gets its vectors back first (R4b).
    store.restore_vectors()?;
    store.checkpoint()?;
    Ok(match store.build_index()? {
        None => "nothing to index: no flat segment\n".to_owned(),
        Some(b) => format!(
            "built segment {}: {} rows from {} segment(s), {} lists, nprobe {} (recall@10 {:.3} on held-out rows) in {:.1} s\n",
            b.segment_id, b.rows, b.replaced, b.nlist, b.nprobe, b.built_recall, b.seconds
        ),
    })
}
