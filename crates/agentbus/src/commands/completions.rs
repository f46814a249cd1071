//! `agentbus completions <shell>`: a completion script generated from the parser itself (LM-80),
//! so it offers exactly the commands and options this binary accepts.

use std::process::ExitCode;

use clap::Args;
use clap_complete::Shell;

use crate::error::CliResult;
use crate::printer::Printer;

/// Arguments of `completions`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    shell: Shell,
}

/// Writes the script to stdout.
pub fn run(args: CompletionsArgs, printer: &Printer) -> CliResult {
    // Generated into memory first: clap_complete panics on a failed write, and a closed stdout
    // is no error here.
    let mut script = Vec::new();
    clap_complete::generate(
        args.shell,
        &mut crate::cli::command(),
        "agentbus",
        &mut script,
    );
    printer.raw(&script)?;
    Ok(ExitCode::SUCCESS)
}
