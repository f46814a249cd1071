//! The `agentbus` command. Argument parsing and wiring only: each subcommand lives in
//! `commands/<area>.rs` and the work itself in the library crates.

mod cli;
mod commands;
mod error;
mod printer;
mod route;

use std::process::ExitCode;

use crate::error::ErrorKind;
use crate::printer::Printer;

/// mimalloc rather than glibc malloc: the gateway allocates per request on every worker thread,
/// where glibc's arenas cost it a tenth of its CPU (docs/benchmarks.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let (cli, profile) = cli::parse();
    printer::set_verbosity(printer::Verbosity::from_flags(cli.quiet, cli.verbose));
    let printer = Printer::new(cli.json);
    let _ = commands::profile::PROFILE.set(profile);
    match commands::run(cli.command, &printer) {
        Ok(code) => code,
        Err(e) => {
            if e.kind == ErrorKind::BrokenPipe {
                return ExitCode::SUCCESS;
            }
            printer.error(&e);
            e.kind.exit_code()
        }
    }
}
