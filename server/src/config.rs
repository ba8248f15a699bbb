//! `amberdb serve`'s settings: flag, then `AMBERDB_*` environment, then the config file, then the
//! default (`docs/protocol.md`, "Running the server").
//!
//! The config file is TOML with the flags' names (`port = 7733`, `data_dir = "..."`, ...);
//! an unknown key is an error, never ignored. The shared secret comes only from `AMBERDB_TOKEN`
//! or a token file, never from a flag (flags show up in `ps`) and is never logged.

use crate::auth::Auth;
use crate::limits::Limits;
use anyhow::{Context, bail};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The default port.
pub const DEFAULT_PORT: u16 = 7733;

/// Settings given on the command line (or through their `AMBERDB_*` variables); `None` = not
/// given, so the config file or the default decides.
#[derive(Debug, Default, Clone, clap::Args)]
pub struct ServeFlags {
    /// A TOML file with any of the settings below (flags and environment win over it).
    #[arg(long, env = "AMBERDB_CONFIG")]
    pub config: Option<PathBuf>,
    /// Address to listen on [default: 127.0.0.1, loopback only].
    #[arg(long, env = "AMBERDB_BIND")]
    pub bind: Option<IpAddr>,
    /// Port [default: 7733; 0 picks a free one and prints it].
    #[arg(long, env = "AMBERDB_PORT")]
    pub port: Option<u16>,
    /// Store directory [default: ~/.local/share/amberdb/store].
    #[arg(long, env = "AMBERDB_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// File of tokens, one per line: `[ro|rw] [USER_ID] TOKEN`: `ro` may only read, a
    /// `USER_ID` binds the token to that user; a bare `TOKEN` may do anything. `#` starts a
    /// comment.
    #[arg(long, env = "AMBERDB_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
    /// Longest request line in bytes [default: 1048576].
    #[arg(long, env = "AMBERDB_MAX_LINE_BYTES")]
    pub max_line_bytes: Option<usize>,
    /// Most connections at once [default: 1024].
    #[arg(long, env = "AMBERDB_MAX_CONNECTIONS")]
    pub max_connections: Option<usize>,
    /// Seconds a silent connection stays open [default: 300].
    #[arg(long, env = "AMBERDB_IDLE_TIMEOUT")]
    pub idle_timeout: Option<u64>,
    /// Seconds a half-sent line or an untaken reply may wait [default: 30].
    #[arg(long, env = "AMBERDB_SLOW_CLIENT_TIMEOUT")]
    pub slow_client_timeout: Option<u64>,
    /// Most requests of one connection run in one batch [default: 1024].
    #[arg(long, env = "AMBERDB_MAX_PIPELINED")]
    pub max_pipelined: Option<usize>,
    /// Batches run at once: the server's capacity [default: two per core].
    #[arg(long, env = "AMBERDB_MAX_RUNNING")]
    pub max_running: Option<usize>,
    /// Batches that may wait for capacity; past that, requests are answered `busy` [default:
    /// 64].
    #[arg(long, env = "AMBERDB_MAX_QUEUED")]
    pub max_queued: Option<usize>,
    /// With tokens: most connections at once that have not authenticated yet [default: 256,
    /// at most a quarter of max_connections].
    #[arg(long, env = "AMBERDB_MAX_UNAUTHENTICATED")]
    pub max_unauthenticated: Option<usize>,
    /// With tokens: seconds a connection has to authenticate before it is closed [default:
    /// 10].
    #[arg(long, env = "AMBERDB_AUTH_TIMEOUT")]
    pub auth_timeout: Option<u64>,
    /// Most live memories in the store, all users, chat turns included (1000..=10000000)
    /// [default: 1000000].
    #[arg(long, env = "AMBERDB_MEMORY_LIMIT")]
    pub memory_limit: Option<usize>,
    /// How long deleted and replaced memories stay on disk.
    #[command(flatten)]
    pub retention: RetentionFlags,
    /// HTTP beside the line protocol.
    #[command(flatten)]
    pub http: HttpFlags,
    /// Runs as a node of a cluster on NATS JetStream (docs/cluster.md): the NATS server of a
    /// cluster `amberdb cluster init` made (several: comma-separated). The data directory then
    /// holds one store per partition.
    #[arg(long, env = "AMBERDB_CLUSTER", value_name = "NATS_URL")]
    pub cluster: Option<String>,
    /// With --cluster: this node's name, unique in the cluster (letters, digits, '-', '_').
    #[arg(long, env = "AMBERDB_NODE", requires = "cluster")]
    pub node: Option<String>,
}

/// `serve --cluster`: where the cluster is, and who this node is.
#[derive(Debug, Clone)]
pub struct ClusterFlags {
    /// The NATS servers.
    pub nats: String,
    /// This node's name.
    pub node: String,
}

/// HTTP/JSON, MCP over HTTP, `/metrics` and the inspector (`docs/http.md`), for `serve`.
#[derive(Debug, Default, Clone, clap::Args)]
pub struct HttpFlags {
    /// Also serve HTTP on this address, e.g. 127.0.0.1:7734 [default: no HTTP]. Beyond
    /// loopback it needs tokens, and TLS or --insecure-http.
    #[arg(long = "http", env = "AMBERDB_HTTP")]
    pub addr: Option<SocketAddr>,
    /// TLS certificate chain (PEM) for --http.
    #[arg(long, env = "AMBERDB_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// TLS private key (PEM) for --http.
    #[arg(long, env = "AMBERDB_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Serve HTTP beyond loopback without TLS (behind a TLS-terminating proxy).
    #[arg(long, env = "AMBERDB_INSECURE_HTTP")]
    pub insecure_http: bool,
    /// A Host name HTTP answers to besides the loopback names and the --http address
    /// (repeatable; DNS rebinding protection).
    #[arg(
        long = "http-allow-host",
        env = "AMBERDB_HTTP_ALLOW_HOSTS",
        value_delimiter = ','
    )]
    pub allow_hosts: Vec<String>,
    /// An Origin that browsers may call HTTP from (repeatable; CORS), e.g.
    /// `https://app.example.com`.
    #[arg(
        long = "http-allow-origin",
        env = "AMBERDB_HTTP_ALLOW_ORIGINS",
        value_delimiter = ','
    )]
    pub allow_origins: Vec<String>,
}

/// HTTP as resolved (`ServeConfig::http`).
#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// Where to listen.
    pub addr: SocketAddr,
    /// Certificate and key, for TLS.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// Host names beyond the loopback names.
    pub allow_hosts: Vec<String>,
    /// Origins allowed cross-origin.
    pub allow_origins: Vec<String>,
}

/// How long deleted and replaced memories stay on disk, for `serve` and `mcp`: flag, then
/// `AMBERDB_*` environment, then the config file, then the engine's default
/// (`docs/durability.md`, "Purge"; `docs/semantics.md`, "Archive retention").
#[derive(Debug, Default, Clone, clap::Args)]
pub struct RetentionFlags {
    /// Seconds after a delete when the maintenance thread purges it from every file of the
    /// store; 0: only PURGE does [default: 600].
    #[arg(long, env = "AMBERDB_PURGE_DELAY")]
    pub purge_delay: Option<u64>,
    /// Days an archived record (a merged or superseded source) is kept after it was replaced
    /// [default: forever].
    #[arg(long, env = "AMBERDB_ARCHIVE_MAX_AGE_DAYS")]
    pub archive_max_age_days: Option<u64>,
    /// Most archived records kept; past it the oldest are forgotten [default: all].
    #[arg(long, env = "AMBERDB_ARCHIVE_MAX_RECORDS")]
    pub archive_max_records: Option<usize>,
    /// A checkpoint writes only the records changed since the last full one while they are
    /// at most this share of its records; a delta's base keeps deleted texts until the next
    /// full checkpoint or a purge; 0: every checkpoint full [default: 0.125].
    #[arg(long, env = "AMBERDB_DELTA_MAX_SHARE", value_parser = parse_share)]
    pub delta_max_share: Option<f64>,
    /// MiB of log since the last checkpoint past which a write waits (at most 5 s) for the
    /// due checkpoint: bounds what an open replays after a crash; 0: writes never wait
    /// [default: 96].
    #[arg(long, env = "AMBERDB_LOG_TAIL_LIMIT_MIB")]
    pub log_tail_limit_mib: Option<u64>,
}

/// A share for `--delta-max-share`, checked as the engine does, before anything is created.
fn parse_share(text: &str) -> std::result::Result<f64, String> {
    let share = text
        .trim()
        .parse::<f64>()
        .map_err(|e| format!("not a number ({e})"))?;
    amberdb::StoreOptions::check_delta_max_share(share).map_err(|e| e.to_string())
}

impl RetentionFlags {
    /// Sets the store's purge delay and archive retention from the flags, then `file`; what
    /// neither gives keeps the engine's default.
    pub fn apply(&self, file: &FileConfig, options: &mut amberdb::StoreOptions) {
        if let Some(seconds) = self.purge_delay.or(file.purge_delay) {
            options.purge_delay = (seconds > 0).then(|| Duration::from_secs(seconds));
        }
        let archive = amberdb::ArchiveRetention {
            max_age: self
                .archive_max_age_days
                .or(file.archive_max_age_days)
                .map(|days| Duration::from_secs(days.saturating_mul(86_400))),
            max_records: self.archive_max_records.or(file.archive_max_records),
        };
        if archive.is_set() {
            options.archive_retention = archive;
        }
        if let Some(share) = self.delta_max_share.or(file.delta_max_share) {
            options.delta_max_share = share;
        }
        if let Some(mib) = self.log_tail_limit_mib.or(file.log_tail_limit_mib) {
            options.log_tail_limit = mib.saturating_mul(1 << 20);
        }
    }
}

/// The store-wide defaults of the hooks (`docs/semantics.md`, "Hooks"), for `serve` and
/// `mcp`: flag, then `AMBERDB_*` environment, then the config file, then the engine's default.
/// A request can still override each for itself.
#[derive(Debug, Default, Clone, clap::Args)]
pub struct HookFlags {
    /// Store-time semantic dedup: merge paraphrases, supersede a fact's older value
    /// (true/false) [default: true].
    #[arg(long, env = "AMBERDB_SEMANTIC_DEDUP")]
    pub semantic_dedup: Option<bool>,
    /// Its cosine distance, in (0, 2) [default: the embedder's; MiniLM's 0.35].
    #[arg(long, env = "AMBERDB_DEDUP_DISTANCE")]
    pub dedup_distance: Option<f32>,
    /// Which near duplicates it merges: `sure` (the same words, or what the learned judge is
    /// sure of) or `paraphrases` (the fact guard's looser readings too) [default: sure].
    #[arg(long, env = "AMBERDB_MERGE")]
    pub merge: Option<String>,
    /// Load-time folding of near-duplicate search results (true/false) [default: true].
    #[arg(long, env = "AMBERDB_FOLD")]
    pub fold: Option<bool>,
    /// Its cosine distance, in (0, 2) [default: the embedder's; MiniLM's 0.40].
    #[arg(long, env = "AMBERDB_CLUSTER_DISTANCE")]
    pub cluster_distance: Option<f32>,
}

impl HookFlags {
    /// Applies the flags, then the file's keys, to a store's hook config.
    ///
    /// # Errors
    /// A distance out of range, naming the setting.
    pub fn apply(&self, file: &FileConfig, hooks: &mut amberdb::HookConfig) -> anyhow::Result<()> {
        use amberdb::{ReadHook, WriteHook};
        if let Some(on) = self.semantic_dedup.or(file.semantic_dedup) {
            hooks.write.retain(|h| *h != WriteHook::SemanticDedup);
            if on {
                hooks.write.push(WriteHook::SemanticDedup);
            }
        }
        if let Some(on) = self.fold.or(file.fold) {
            hooks.read.retain(|h| *h != ReadHook::LoadDedup);
            if on {
                hooks.read.push(ReadHook::LoadDedup);
            }
        }
        if let Some(d) = self.dedup_distance.or(file.dedup_distance) {
            hooks.dedup_distance = Some(d);
        }
        if let Some(m) = self.merge.as_ref().or(file.merge.as_ref()) {
            hooks.merge = amberdb::Merge::parse(m).map_err(|e| anyhow::anyhow!("{e}"))?;
        }
        if let Some(d) = self.cluster_distance.or(file.cluster_distance) {
            hooks.cluster_distance = Some(d);
        }
        hooks.validate().map_err(|e| anyhow::anyhow!("{e}"))
    }
}

/// Reads a config file (`None`: no file, every key unset).
///
/// # Errors
/// The file cannot be read, is not TOML, or has an unknown key.
pub fn read_config_file(path: Option<&Path>) -> anyhow::Result<FileConfig> {
    match path {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading the config file {}", path.display()))?;
            toml::from_str::<FileConfig>(&text)
                .with_context(|| format!("the config file {}", path.display()))
        }
        None => Ok(FileConfig::default()),
    }
}

/// The config file: the same settings as the flags of `serve` and `mcp`.
#[derive(Debug, Default, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    bind: Option<IpAddr>,
    http: Option<SocketAddr>,
    port: Option<u16>,
    data_dir: Option<PathBuf>,
    token_file: Option<PathBuf>,
    max_line_bytes: Option<usize>,
    max_connections: Option<usize>,
    idle_timeout: Option<u64>,
    slow_client_timeout: Option<u64>,
    max_pipelined: Option<usize>,
    max_running: Option<usize>,
    max_queued: Option<usize>,
    max_unauthenticated: Option<usize>,
    auth_timeout: Option<u64>,
    memory_limit: Option<usize>,
    purge_delay: Option<u64>,
    archive_max_age_days: Option<u64>,
    archive_max_records: Option<usize>,
    delta_max_share: Option<f64>,
    log_tail_limit_mib: Option<u64>,
    semantic_dedup: Option<bool>,
    dedup_distance: Option<f32>,
    merge: Option<String>,
    fold: Option<bool>,
    cluster_distance: Option<f32>,
}

impl FileConfig {
    /// The store directory the file names.
    #[must_use]
    pub fn data_dir(&self) -> Option<&Path> {
        self.data_dir.as_deref()
    }

    /// The memory limit the file names.
    #[must_use]
    pub fn memory_limit(&self) -> Option<usize> {
        self.memory_limit
    }
}

/// Resolved settings.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Where to listen.
    pub addr: SocketAddr,
    /// HTTP beside the line protocol, when asked for.
    pub http: Option<HttpConfig>,
    /// The store.
    pub data_dir: PathBuf,
    /// Limits.
    pub limits: Limits,
    /// Tokens.
    pub auth: Auth,
    /// The store's memory limit, when given.
    pub memory_limit: Option<usize>,
    /// Purge delay and archive retention, as given (applied with the file by `run_server`).
    pub retention: RetentionFlags,
    /// The config file as read (its hook keys apply to the store's options).
    pub file: FileConfig,
    /// A cluster node's, with `--cluster`.
    pub cluster: Option<ClusterFlags>,
}

/// The default store directory: `$XDG_DATA_HOME/amberdb/store`, else `~/.local/share/amberdb/store`.
#[must_use]
pub fn default_data_dir() -> PathBuf {
    let base = std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
        .unwrap_or_else(|| PathBuf::from("."));
    base.join("amberdb").join("store")
}

impl HttpFlags {
    /// The HTTP listener's settings, checked against the rules of `docs/http.md`, "Safety".
    ///
    /// # Errors
    /// TLS flags without `--http`; beyond loopback without tokens, or without TLS and
    /// without `--insecure-http`.
    fn resolve(
        &self,
        addr: Option<SocketAddr>,
        tokens: bool,
    ) -> anyhow::Result<Option<HttpConfig>> {
        let tls = self.tls_cert.clone().zip(self.tls_key.clone());
        let Some(addr) = addr else {
            if tls.is_some() || self.insecure_http {
                bail!(
                    "--tls-cert, --tls-key and --insecure-http are for --http, which is not given"
                );
            }
            return Ok(None);
        };
        if !addr.ip().is_loopback() {
            if !tokens {
                bail!("--http {addr} beyond loopback needs tokens (--token-file or AMBERDB_TOKEN)");
            }
            if tls.is_none() && !self.insecure_http {
                bail!(
                    "--http {addr} beyond loopback needs TLS (--tls-cert and --tls-key), or --insecure-http behind a TLS-terminating proxy"
                );
            }
        }
        Ok(Some(HttpConfig {
            addr,
            tls,
            allow_hosts: self.allow_hosts.clone(),
            allow_origins: self.allow_origins.clone(),
        }))
    }
}

impl ServeFlags {
    /// Merges flags, the config file and defaults; reads the tokens (`AMBERDB_TOKEN`, the token
    /// file).
    ///
    /// # Errors
    /// An unreadable or invalid config or token file, or a limit of 0.
    pub fn resolve(&self) -> anyhow::Result<ServeConfig> {
        let file = read_config_file(self.config.as_deref())?;
        let d = Limits::default();
        let limits = Limits {
            max_line_bytes: positive(
                "max_line_bytes",
                self.max_line_bytes.or(file.max_line_bytes),
                d.max_line_bytes,
            )?,
            max_connections: positive(
                "max_connections",
                self.max_connections.or(file.max_connections),
                d.max_connections,
            )?,
            idle_timeout: Duration::from_secs(positive(
                "idle_timeout",
                self.idle_timeout.or(file.idle_timeout),
                d.idle_timeout.as_secs(),
            )?),
            slow_client_timeout: Duration::from_secs(positive(
                "slow_client_timeout",
                self.slow_client_timeout.or(file.slow_client_timeout),
                d.slow_client_timeout.as_secs(),
            )?),
            max_pipelined: positive(
                "max_pipelined",
                self.max_pipelined.or(file.max_pipelined),
                d.max_pipelined,
            )?,
            max_running: positive(
                "max_running",
                self.max_running.or(file.max_running),
                d.max_running,
            )?,
            max_queued: positive(
                "max_queued",
                self.max_queued.or(file.max_queued),
                d.max_queued,
            )?,
            shutdown_grace: d.shutdown_grace,
            max_unauthenticated: positive(
                "max_unauthenticated",
                self.max_unauthenticated.or(file.max_unauthenticated),
                d.max_unauthenticated,
            )?,
            auth_timeout: Duration::from_secs(positive(
                "auth_timeout",
                self.auth_timeout.or(file.auth_timeout),
                d.auth_timeout.as_secs(),
            )?),
        };
        let mut auth = Auth::none();
        if let Ok(token) = std::env::var("AMBERDB_TOKEN") {
            if token.trim().is_empty() {
                bail!("AMBERDB_TOKEN is set but empty; unset it to run without a token");
            }
            auth.add(token.trim(), crate::auth::Grant::default());
        }
        if let Some(path) = self.token_file.as_ref().or(file.token_file.as_ref()) {
            read_token_file(path, &mut auth)?;
        }
        let ip = self
            .bind
            .or(file.bind)
            .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
        let port = self.port.or(file.port).unwrap_or(DEFAULT_PORT);
        let addr = SocketAddr::new(ip, port);
        // Beyond loopback, every transport needs tokens (docs/http.md, "Safety").
        if !ip.is_loopback() && !auth.enabled() {
            bail!(
                "listening on {addr} beyond loopback needs tokens (--token-file or AMBERDB_TOKEN): anyone who can reach it could read and write every user"
            );
        }
        let http = self
            .http
            .resolve(self.http.addr.or(file.http), auth.enabled())?;
        Ok(ServeConfig {
            addr,
            http,
            data_dir: self
                .data_dir
                .clone()
                .or_else(|| file.data_dir.clone())
                .unwrap_or_else(default_data_dir),
            limits,
            auth,
            memory_limit: self.memory_limit.or(file.memory_limit),
            retention: self.retention.clone(),
            file,
            cluster: match (&self.cluster, &self.node) {
                (None, _) => None,
                (Some(nats), Some(node)) => Some(ClusterFlags {
                    nats: nats.clone(),
                    node: node.clone(),
                }),
                (Some(_), None) => anyhow::bail!(
                    "--cluster needs --node NAME: this node's name, unique in the cluster"
                ),
            },
        })
    }
}

fn positive<T: PartialEq + Default + Copy>(
    name: &str,
    given: Option<T>,
    default: T,
) -> anyhow::Result<T> {
    match given {
        Some(v) if v == T::default() => bail!("{name} must be at least 1"),
        Some(v) => Ok(v),
        None => Ok(default),
    }
}

/// Reads `[ro|rw] [USER_ID] TOKEN` lines (`crate::auth`). Errors name the line, never the
/// token.
fn read_token_file(path: &Path, auth: &mut Auth) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the token file {}", path.display()))?;
    let before = auth.counts().0;
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        match crate::auth::parse_token_line(line) {
            Ok((token, grant)) => auth.add(token, grant),
            Err(why) => bail!("{} line {}: {why}", path.display(), n + 1),
        }
    }
    if auth.counts().0 == before {
        bail!("the token file {} holds no token", path.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use amberdb::{HookConfig, ReadHook, WriteHook};

    #[test]
    fn retention_settings_come_from_flags_then_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("amberdb.toml");
        std::fs::write(
            &path,
            "purge_delay = 30\narchive_max_age_days = 7\narchive_max_records = 500\ndelta_max_share = 0.25\nlog_tail_limit_mib = 0\n",
        )
        .unwrap();
        let file = read_config_file(Some(&path)).unwrap();
        let flags = RetentionFlags {
            archive_max_records: Some(100),
            ..RetentionFlags::default()
        };
        let mut options = amberdb::StoreOptions::hashing();
        flags.apply(&file, &mut options);
        assert_eq!(options.purge_delay, Some(Duration::from_secs(30)));
        assert_eq!(options.delta_max_share, 0.25);
        assert_eq!(options.log_tail_limit, 0, "0: writes never wait");
        assert_eq!(
            options.archive_retention,
            amberdb::ArchiveRetention {
                max_age: Some(Duration::from_secs(7 * 86_400)),
                max_records: Some(100),
            }
        );
        // Nothing given: the engine's defaults; 0 turns the purge off.
        let mut options = amberdb::StoreOptions::hashing();
        RetentionFlags::default().apply(&FileConfig::default(), &mut options);
        assert_eq!(options.purge_delay, Some(amberdb::DEFAULT_PURGE_DELAY));
        assert_eq!(options.delta_max_share, 0.125);
        assert_eq!(options.log_tail_limit, 96 << 20);
        assert!(!options.archive_retention.is_set());
        let off = RetentionFlags {
            purge_delay: Some(0),
            ..RetentionFlags::default()
        };
        off.apply(&FileConfig::default(), &mut options);
        assert_eq!(options.purge_delay, None);
        let flags = RetentionFlags {
            log_tail_limit_mib: Some(200),
            ..RetentionFlags::default()
        };
        flags.apply(&file, &mut options);
        assert_eq!(options.log_tail_limit, 200 << 20, "the flag over the file");
        for bad in ["nan", "-0.5", "x", ""] {
            assert!(parse_share(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_share("0"), Ok(0.0));
    }

    #[test]
    fn hook_defaults_come_from_flags_then_the_file_then_the_engine() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("amberdb.toml");
        std::fs::write(
            &path,
            "semantic_dedup = false\nfold = false\ndedup_distance = 0.2\nmerge = \"paraphrases\"\n",
        )
        .unwrap();
        let file = read_config_file(Some(&path)).unwrap();
        let mut hooks = HookConfig::default();
        HookFlags::default().apply(&file, &mut hooks).unwrap();
        assert!(!hooks.write.contains(&WriteHook::SemanticDedup));
        assert!(!hooks.read.contains(&ReadHook::LoadDedup));
        assert!((hooks.dedup_distance.unwrap_or(0.0) - 0.2).abs() < 1e-6);
        assert_eq!(hooks.merge, amberdb::Merge::Paraphrases);
        let wrong = HookFlags {
            merge: Some("all".into()),
            ..HookFlags::default()
        };
        let err = wrong
            .apply(&FileConfig::default(), &mut HookConfig::default())
            .unwrap_err();
        assert!(err.to_string().contains("paraphrases"), "{err}");
        let flags = HookFlags {
            semantic_dedup: Some(true),
            cluster_distance: Some(0.3),
            ..HookFlags::default()
        };
        let mut hooks = HookConfig::default();
        flags.apply(&file, &mut hooks).unwrap();
        assert!(hooks.write.contains(&WriteHook::SemanticDedup));
        assert!(!hooks.read.contains(&ReadHook::LoadDedup), "the file's");
        assert!((hooks.cluster_distance.unwrap_or(0.0) - 0.3).abs() < 1e-6);
        let bad = HookFlags {
            dedup_distance: Some(2.5),
            ..HookFlags::default()
        };
        let err = bad
            .apply(&FileConfig::default(), &mut HookConfig::default())
            .unwrap_err();
        assert!(err.to_string().contains("dedup_distance"), "{err}");
        std::fs::write(&path, "semantic_dedupe = false\n").unwrap();
        assert!(read_config_file(Some(&path)).is_err(), "an unknown key");
    }

    #[test]
    fn flags_win_over_the_config_file_which_wins_over_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("amberdb.toml");
        std::fs::write(
            &file,
            "port = 9001\ndata_dir = \"/srv/amberdb\"\nmax_line_bytes = 4096\nidle_timeout = 60\nmemory_limit = 50000\n",
        )
        .unwrap();
        let flags = ServeFlags {
            config: Some(file.clone()),
            port: Some(9002),
            ..ServeFlags::default()
        };
        let c = flags.resolve().unwrap();
        assert_eq!(
            c.addr,
            "127.0.0.1:9002".parse().unwrap(),
            "the flag wins; loopback by default"
        );
        assert_eq!(c.data_dir, PathBuf::from("/srv/amberdb"));
        assert_eq!(c.limits.max_line_bytes, 4096);
        assert_eq!(c.limits.idle_timeout, Duration::from_secs(60));
        assert_eq!(c.limits.max_connections, Limits::default().max_connections);
        assert_eq!(c.memory_limit, Some(50_000));

        std::fs::write(&file, "port = 9001\nmax_line_byte = 10\n").unwrap();
        let err = format!("{:#}", flags.resolve().unwrap_err());
        assert!(
            err.contains("max_line_byte"),
            "an unknown key is named: {err}"
        );
        let zero = ServeFlags {
            max_connections: Some(0),
            ..ServeFlags::default()
        };
        assert!(format!("{:#}", zero.resolve().unwrap_err()).contains("max_connections"));
    }

    #[test]
    fn a_token_file_binds_users_and_its_errors_never_show_a_token() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("tokens");
        std::fs::write(
            &file,
            "# comment\n\nshared-s3cret\nada ada-s3cret\nro ro-s3cret\n",
        )
        .unwrap();
        let mut auth = Auth::none();
        read_token_file(&file, &mut auth).unwrap();
        assert_eq!(auth.counts(), (3, 1));
        let grant = auth.check("ada-s3cret").unwrap();
        assert_eq!(
            (grant.user.as_deref(), grant.read_only),
            (Some("ada"), false)
        );
        assert!(auth.check("ro-s3cret").unwrap().read_only);
        std::fs::write(&file, "ada ada-s3cret extra-word\n").unwrap();
        let err = format!(
            "{:#}",
            read_token_file(&file, &mut Auth::none()).unwrap_err()
        );
        assert!(err.contains("line 1") && !err.contains("s3cret"), "{err}");
        std::fs::write(&file, "# nothing\n").unwrap();
        assert!(
            read_token_file(&file, &mut Auth::none()).is_err(),
            "an empty token file is an error"
        );
    }
}
