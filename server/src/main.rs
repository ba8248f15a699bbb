//! The `amberdb` binary: the command line of [`amberdb_server::cli`].

/// mimalloc, not the system's malloc: opening a store allocates a record, its strings and
/// its index entries per memory, and at 1M memories glibc's malloc made the open ~25 %
/// slower (docs/benchmarks.md, "Opening 1M memories"). The libraries leave the choice to the
/// application that links them.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    std::process::ExitCode::from(amberdb_server::cli::main(
        std::env::args_os(),
        amberdb_server::cli::ModelPolicy::Refuse,
    ))
}
