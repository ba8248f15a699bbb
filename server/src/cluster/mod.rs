//! Cluster mode on NATS JetStream (`docs/cluster.md`), behind the `cluster` feature: a
//! partition's stream, the publisher an owner's store hands its frames to, the claim, and the
//! tail a replica applies (`stream`); the cluster's settings in its KV bucket and the
//! `amberdb cluster init|status|move` commands (`settings`, here), `import`, `repair` and
//! `set-aside` (`repair`); a partition's lease and the claim procedure (`lease`); which node
//! should own each partition (`placement`); the node that runs them for every partition
//! (`node`), which the dispatch routes requests to (`crate::route`).

pub mod directory;
pub mod import;
pub mod lease;
pub mod node;
pub mod placement;
pub mod repair;
pub mod servers;
pub mod settings;
pub mod ship;
pub mod stream;

use crate::EmbedderChoice;
use std::path::PathBuf;

/// `amberdb cluster …`.
#[derive(Debug, clap::Subcommand)]
pub enum ClusterAction {
    /// Fixes the cluster's settings (partitions, embedder, replicas, a store id per partition)
    /// in the KV bucket `amberdb_cluster` and creates every partition's stream; run again with
    /// the same settings it changes nothing, with others it is refused.
    Init {
        /// A NATS server of the cluster.
        #[arg(long, env = "AMBERDB_NATS", default_value = "nats://127.0.0.1:4222")]
        nats: String,
        /// Partitions, fixed for the cluster's life (1 to 8,192).
        #[arg(long, default_value_t = settings::DEFAULT_PARTITIONS)]
        partitions: u32,
        /// Copies of every stream (1 to 5; JetStream's R3 by default).
        #[arg(long, default_value_t = settings::DEFAULT_REPLICAS)]
        replicas: usize,
        /// The embedder every partition store is made with [default: minilm].
        #[arg(long, env = "AMBERDB_EMBEDDER", value_enum)]
        embedder: Option<EmbedderChoice>,
        /// MiniLM's files [default: ~/.cache/amberdb/all-MiniLM-L6-v2].
        #[arg(long, env = "AMBERDB_MODEL_DIR")]
        model_dir: Option<PathBuf>,
        /// Every NATS server's monitoring URL (`http://host:port`, the servers' `http:`
        /// setting), comma-separated: init reads each one's settings first and refuses a server
        /// that does not fsync before each acknowledgement or, in a cluster, pings its peers
        /// less often than every second (docs/cluster.md).
        #[arg(long, env = "AMBERDB_NATS_MONITOR", value_delimiter = ',')]
        monitor: Vec<String>,
        /// Skips that check, for servers whose monitoring cannot be reached: you vouch for
        /// their `sync_interval: always`, `ping_interval: "1s"` and `ping_max: 3`.
        #[arg(long, conflicts_with = "monitor")]
        unchecked_servers: bool,
    },
    /// Moves a partition's store aside on a stopped node (`p-<p>.aside-<ms>` in --data), so the
    /// node makes it again from the shipped checkpoint and the stream when it starts: the way
    /// out when the node's store holds what no copy of the stream does and nothing is claimed
    /// (docs/cluster.md, "A partition no leader can serve"). Then `cluster repair` lists and
    /// writes back what only the set-aside store held. A running node's store is refused.
    SetAside {
        /// A NATS server of the cluster.
        #[arg(long, env = "AMBERDB_NATS", default_value = "nats://127.0.0.1:4222")]
        nats: String,
        /// The stopped node's data directory.
        #[arg(long)]
        data: PathBuf,
        /// The partition.
        #[arg(long)]
        partition: u32,
    },
    /// Prints the cluster's settings and every partition's store and stream.
    Status {
        /// A NATS server of the cluster.
        #[arg(long, env = "AMBERDB_NATS", default_value = "nats://127.0.0.1:4222")]
        nats: String,
    },
    /// Imports a single node's export: split by partition, each part imported by its owner,
    /// every record's old and new id written to `<work>/ids.tsv` (docs/cluster.md, "From one
    /// node to a cluster").
    Import {
        /// A NATS server of the cluster.
        #[arg(long, env = "AMBERDB_NATS", default_value = "nats://127.0.0.1:4222")]
        nats: String,
        /// The export (EXPORT or `amberdb export` of the single node); only read.
        #[arg(long)]
        from: PathBuf,
        /// A new directory, at a path every node can read, for the parts and `ids.tsv`.
        #[arg(long)]
        work: PathBuf,
        /// A file holding the nodes' shared token, if they want one.
        #[arg(long, env = "AMBERDB_TOKEN_FILE")]
        token_file: Option<PathBuf>,
    },
    /// Pins a partition to a node, whose owner then hands it over (and waits until it has), or
    /// unpins it (docs/cluster.md, "Placement").
    Move {
        /// A NATS server of the cluster.
        #[arg(long, env = "AMBERDB_NATS", default_value = "nats://127.0.0.1:4222")]
        nats: String,
        /// The partition.
        #[arg(long)]
        partition: u32,
        /// The node to pin it to (a registered node's name).
        #[arg(long, required_unless_present = "unpin", conflicts_with = "unpin")]
        to: Option<String>,
        /// Unpins it: it belongs to the `p mod n`-th live node again.
        #[arg(long)]
        unpin: bool,
        /// How long to wait for the new owner, in seconds.
        #[arg(long, default_value_t = 30)]
        wait: u64,
    },
    /// Lists what a store set aside (`p-<p>.diverged-<ms>`) holds that the partition's stream
    /// lost, with a decision for each lost write, and with `--apply` writes the new records
    /// and deletes back through the owner (docs/cluster.md, "`amberdb cluster repair`"). The
    /// set-aside store is only read.
    Repair {
        /// A NATS server of the cluster.
        #[arg(long, env = "AMBERDB_NATS", default_value = "nats://127.0.0.1:4222")]
        nats: String,
        /// The node's data directory, which holds the set-aside store.
        #[arg(long)]
        data: PathBuf,
        /// The partition.
        #[arg(long)]
        partition: u32,
        /// The set-aside store's directory name in --data (STATS' `set_aside`).
        #[arg(long)]
        from: String,
        /// Writes the lost records and deletes back (without it: a report only).
        #[arg(long, requires = "work")]
        apply: bool,
        /// With --apply: a new directory, at a path the owner can read, for the lost records.
        #[arg(long, requires = "apply")]
        work: Option<PathBuf>,
        /// A file holding the nodes' shared token, if they want one.
        #[arg(long, env = "AMBERDB_TOKEN_FILE")]
        token_file: Option<PathBuf>,
    },
}

/// Runs `amberdb cluster …`. Returns its report.
///
/// # Errors
/// A refused or failed command, with the reason.
pub fn run(action: ClusterAction) -> anyhow::Result<String> {
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        match action {
            ClusterAction::Init {
                nats,
                partitions,
                replicas,
                embedder,
                model_dir,
                monitor,
                unchecked_servers,
            } => {
                anyhow::ensure!(
                    unchecked_servers || !monitor.is_empty(),
                    "cluster init checks the NATS servers' settings first: give every server's monitoring URL with --monitor http://host:port,... (the servers' `http:` setting), or --unchecked-servers to vouch for them yourself (docs/cluster.md)"
                );
                let options = crate::open_options(
                    embedder.unwrap_or(EmbedderChoice::Minilm),
                    model_dir.as_deref(),
                )?;
                let dim = u32::try_from(options.embedder.dim())?;
                let wanted = settings::Settings::new(
                    partitions,
                    options.embedder.model_id(),
                    dim,
                    replicas,
                )?;
                let checked = if unchecked_servers {
                    "NATS servers not checked (--unchecked-servers)\n".to_owned()
                } else {
                    servers::check(&monitor).await?
                };
                let js = connect(&nats).await?;
                let (held, created) = settings::init(&js, &wanted).await?;
                Ok(format!(
                    "{checked}{} cluster: {} partitions, embedder {} ({}-d), {} replicas\n",
                    if created {
                        "initialised the"
                    } else {
                        "already initialised:"
                    },
                    held.partitions,
                    held.model_id,
                    held.dim,
                    held.replicas
                ))
            }
            ClusterAction::Import {
                nats,
                from,
                work,
                token_file,
            } => {
                let token = token_of(token_file.as_deref())?;
                let js = connect(&nats).await?;
                import::run(&js, from, work, token).await
            }
            ClusterAction::Repair {
                nats,
                data,
                partition,
                from,
                apply,
                work,
                token_file,
            } => {
                let token = token_of(token_file.as_deref())?;
                let js = connect(&nats).await?;
                let request = repair::Request {
                    data,
                    partition,
                    from,
                    apply: work.filter(|_| apply),
                    token,
                };
                repair::run(&js, request).await
            }
            ClusterAction::SetAside {
                nats,
                data,
                partition,
            } => {
                let js = connect(&nats).await?;
                repair::set_aside(&js, &data, partition).await
            }
            ClusterAction::Status { nats } => {
                let js = connect(&nats).await?;
                Ok(settings::status(&js).await?)
            }
            ClusterAction::Move {
                nats,
                partition,
                to,
                unpin: _,
                wait,
            } => {
                let js = connect(&nats).await?;
                settings::move_partition(
                    &js,
                    partition,
                    to.as_deref(),
                    std::time::Duration::from_secs(wait),
                )
                .await
            }
        }
    })
}

/// The nodes' shared token from `--token-file`, if given.
fn token_of(file: Option<&std::path::Path>) -> anyhow::Result<Option<String>> {
    file.map(crate::auth::shared_token).transpose()
}

async fn connect(urls: &str) -> anyhow::Result<async_nats::jetstream::Context> {
    Ok(async_nats::jetstream::new(connect_nats(urls).await?))
}

/// A connection to the cluster's NATS servers: `urls` is one `nats://host:port` or several,
/// comma-separated (the client fails over between them). A user and password in a URL
/// (`nats://node0:secret@host:port`, docs/cluster.md, "NATS users and permissions") are the
/// connection's credentials; no message and no log line shows the password.
///
/// # Errors
/// A URL that does not parse (naming it, without its password), URLs naming two users, or no
/// server reachable.
pub async fn connect_nats(urls: &str) -> anyhow::Result<async_nats::Client> {
    let (servers, credentials) = parse_nats_urls(urls)?;
    // A server cut off without a word (a pulled cable, a partition) is noticed only by pings
    // that go unanswered: three intervals. The client's default, a minute, kept a node on a
    // dead server for three (its leases unreadable, its replicas stopped) while the others
    // served: the cluster fault rig's host cut found it. At one second the node moves to
    // another server of the list within the 5 s lease.
    let options = async_nats::ConnectOptions::new().ping_interval(NATS_PING_INTERVAL);
    let options = match credentials {
        Some((user, password)) => options.user_and_password(user, password),
        None => options,
    };
    options
        .connect(servers)
        .await
        .map_err(|e| anyhow::anyhow!("connecting to NATS at {}: {e}", shown_nats_urls(urls)))
}

/// How often a node pings its NATS server (`connect_nats`).
pub const NATS_PING_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// A user and its password.
type Credentials = (String, String);

/// The servers `urls` name, and the one user and password they give, if any.
fn parse_nats_urls(
    urls: &str,
) -> anyhow::Result<(Vec<async_nats::ServerAddr>, Option<Credentials>)> {
    let mut servers = Vec::new();
    let mut credentials: Option<Credentials> = None;
    for u in urls.split(',').map(str::trim).filter(|u| !u.is_empty()) {
        let shown = shown_nats_urls(u);
        let server = u
            .parse::<async_nats::ServerAddr>()
            .map_err(|e| anyhow::anyhow!("the NATS URL {shown:?}: {e}"))?;
        if let Some(user) = server.username() {
            let given = (user.to_owned(), server.password().unwrap_or("").to_owned());
            anyhow::ensure!(
                !given.0.contains('%') && !given.1.contains('%'),
                "the NATS URL {shown:?}: a user or password with a percent-escape is not \
                 taken (use letters, digits, '-', '_' and '.')"
            );
            anyhow::ensure!(
                credentials.as_ref().is_none_or(|held| *held == given),
                "the NATS URLs name two users: one connection has one identity"
            );
            credentials = Some(given);
        }
        servers.push(server);
    }
    anyhow::ensure!(!servers.is_empty(), "no NATS URL given");
    Ok((servers, credentials))
}

/// `urls` as messages and logs show them: every password replaced by `***`.
#[must_use]
pub fn shown_nats_urls(urls: &str) -> String {
    urls.split(',')
        .map(|u| match (u.find("://"), u.rfind('@')) {
            (Some(scheme), Some(at)) if at > scheme => {
                let userinfo = &u[scheme + 3..at];
                let user = userinfo.split(':').next().unwrap_or("");
                format!("{}{user}:***{}", &u[..scheme + 3], &u[at..])
            }
            _ => u.to_owned(),
        })
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_come_from_the_urls_and_no_password_is_shown() {
        let (servers, credentials) =
            parse_nats_urls("nats://node0:s3cret@127.0.0.1:4222, nats://127.0.0.1:4223").unwrap();
        assert_eq!(servers.len(), 2);
        assert_eq!(credentials, Some(("node0".into(), "s3cret".into())));
        assert_eq!(parse_nats_urls("nats://127.0.0.1:4222").unwrap().1, None);
        let shown = shown_nats_urls("nats://node0:s3cret@127.0.0.1:4222,nats://h:1");
        assert_eq!(shown, "nats://node0:***@127.0.0.1:4222,nats://h:1");
        let two = parse_nats_urls("nats://a:x@h:1,nats://b:y@h:2").unwrap_err();
        assert!(two.to_string().contains("two users"), "{two}");
        let bad = parse_nats_urls("nats://a:s3cret@h:notaport").unwrap_err();
        assert!(!bad.to_string().contains("s3cret"), "{bad}");
        let escaped = parse_nats_urls("nats://a:s%40cret@h:1").unwrap_err();
        assert!(!escaped.to_string().contains("s%40cret"), "{escaped}");
        assert!(parse_nats_urls(" , ").is_err());
    }
}
