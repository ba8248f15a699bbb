//! Cluster mode on NATS JetStream (`docs/cluster.md`), behind the `cluster` feature: a
//! partition's stream, the publisher an owner's store hands its frames to, the claim, and the
//! tail a replica applies (`stream`); the cluster's settings in its KV bucket and the
//! `amberdb cluster init|status|move` commands (`settings`, here); a partition's
//! lease and the claim procedure (`lease`); which node should own each partition
//! (`placement`); the node that runs them for every partition (`node`), which the dispatch
//! routes requests to (`crate::route`).

pub mod lease;
pub mod node;
pub mod placement;
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
    },
    /// Prints the cluster's settings and every partition's store and stream.
    Status {
        /// A NATS server of the cluster.
        #[arg(long, env = "AMBERDB_NATS", default_value = "nats://127.0.0.1:4222")]
        nats: String,
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
            } => {
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
                let js = connect(&nats).await?;
                let (held, created) = settings::init(&js, &wanted).await?;
                Ok(format!(
                    "{} cluster: {} partitions, embedder {} ({}-d), {} replicas\n",
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

async fn connect(urls: &str) -> anyhow::Result<async_nats::jetstream::Context> {
    Ok(async_nats::jetstream::new(connect_nats(urls).await?))
}

/// A connection to the cluster's NATS servers: `urls` is one `nats://host:port` or several,
/// comma-separated (the client fails over between them).
///
/// # Errors
/// A URL that does not parse (naming it), or no server reachable.
pub async fn connect_nats(urls: &str) -> anyhow::Result<async_nats::Client> {
    let servers = urls
        .split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .map(|u| {
            u.parse::<async_nats::ServerAddr>()
                .map_err(|e| anyhow::anyhow!("the NATS URL {u:?}: {e}"))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    anyhow::ensure!(!servers.is_empty(), "no NATS URL given");
    async_nats::connect(servers)
        .await
        .map_err(|e| anyhow::anyhow!("connecting to NATS at {urls}: {e}"))
}
