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
    // A shell asking for completions (`agentbus completions`) is answered and the process exits.
    clap_complete::CompleteEnv::with_factory(cli::command)
        .var(commands::completions::VAR)
        .complete();
    let (cli, profile) = cli::parse();
    let printer = Printer::new(
        cli.json,
        printer::Verbosity::from_flags(cli.quiet, cli.verbose),
    );
    let globals = cli::Globals { profile };
    match commands::run(cli.command, &globals, &printer) {
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

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// Every `static` and `thread_local!` under `dir`, as `path:line: text`.
    fn statics(dir: &Path, found: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                statics(&path, found);
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            for (i, line) in text.lines().enumerate() {
                let code = line.trim_start();
                let code = code
                    .strip_prefix("pub(crate) ")
                    .or_else(|| code.strip_prefix("pub "))
                    .unwrap_or(code);
                if code.starts_with("static ") || code.starts_with("thread_local!") {
                    found.push(format!("{}:{}: {}", path.display(), i + 1, line.trim()));
                }
            }
        }
    }

    /// The global options are passed to commands (`cli::Globals`, the `Printer`), never set in a
    /// static that commands read; the allocator is the one static.
    #[test]
    fn no_static_settings() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut found = Vec::new();
        statics(&src, &mut found);
        found.retain(|s| !s.contains("static ALLOCATOR: mimalloc::MiMalloc"));
        assert!(found.is_empty(), "statics in the binary: {found:#?}");
    }
}
