//! The `mnemo` command line.

#![expect(
    clippy::print_stdout,
    reason = "a command-line tool prints its results"
)]

use clap::{Parser, Subcommand};
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
    },
    /// Print a store's counters.
    Stats {
        /// Store directory.
        #[arg(long, env = "MNEMO_DATA_DIR", default_value = "mnemo-data")]
        dir: PathBuf,
    },
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let report = match cli.command {
        Command::Demo { dir } => mnemo_server::demo(&dir)?,
        Command::Stats { dir } => mnemo_server::stats(&dir)?,
    };
    print!("{report}");
    Ok(())
}
