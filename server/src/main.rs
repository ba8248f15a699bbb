//! The `mnemo` command line.

#![expect(
    clippy::print_stdout,
    reason = "a command-line tool prints its results"
)]

use clap::{Parser, Subcommand};
use mnemo_server::{EmbedderChoice, open_options};
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "mnemo",
    version,
    about = "Persistent semantic memory for AI agents"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Store sample memories, reopen the store, and search it.
    Demo {
        /// Store directory.
        #[arg(long, env = "MNEMO_DATA_DIR", default_value = "mnemo-data")]
        dir: PathBuf,
        #[command(flatten)]
        embedder: EmbedderArgs,
    },
    /// Print a store's counters.
    Stats {
        /// Store directory.
        #[arg(long, env = "MNEMO_DATA_DIR", default_value = "mnemo-data")]
        dir: PathBuf,
        #[command(flatten)]
        embedder: EmbedderArgs,
    },
}

/// How text becomes vectors. A store keeps the embedder it was created with.
#[derive(clap::Args)]
struct EmbedderArgs {
    /// `minilm` (all-MiniLM-L6-v2, fetched by scripts/fetch-model) or `hashing` (no model).
    #[arg(long, env = "MNEMO_EMBEDDER", value_enum, default_value = "minilm")]
    embedder: EmbedderChoice,
    /// MiniLM's files [default: ~/.cache/mnemo/all-MiniLM-L6-v2].
    #[arg(long, env = "MNEMO_MODEL_DIR")]
    model_dir: Option<PathBuf>,
}

impl EmbedderArgs {
    fn options(&self) -> anyhow::Result<mnemo_engine::StoreOptions> {
        Ok(open_options(self.embedder, self.model_dir.as_deref())?)
    }
}

fn main() -> std::process::ExitCode {
    match run(Cli::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mnemo: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let report = match cli.command {
        Command::Demo { dir, embedder } => mnemo_server::demo(&dir, embedder.options()?)?,
        Command::Stats { dir, embedder } => mnemo_server::stats(&dir, embedder.options()?)?,
    };
    print!("{report}");
    Ok(())
}
