//! The `amberdb` binary: the command line of [`amberdb_server::cli`].

fn main() -> std::process::ExitCode {
    std::process::ExitCode::from(amberdb_server::cli::main(
        std::env::args_os(),
        amberdb_server::cli::ModelPolicy::Refuse,
    ))
}
