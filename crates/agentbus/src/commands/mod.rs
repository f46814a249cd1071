//! One module per area of subcommands.

pub mod completions;
pub mod connect;
pub mod directory;
pub mod doctor;
pub mod envelope;
pub mod explain;
pub mod gateway;
pub mod gateway_verbs;
pub mod hook;
pub mod keys;
pub mod lists;
pub mod local;
pub mod mcp;
pub mod profile;
pub mod progress_bar;
pub mod registered_keys;
pub mod search;
pub mod share;
pub mod sidecar;
pub mod tokens;
pub mod trace;
pub mod users;
pub mod work;

use std::io::Read as _;
use std::path::{Path, PathBuf};

use crate::cli::{Command, Globals};
use crate::error::{CliError, CliResult};
use crate::printer::Printer;

/// Runs one subcommand. The commands that act as an agent profile get `globals` (which
/// profile); every command prints through `printer`.
pub fn run(command: Command, globals: &Globals, printer: &Printer) -> CliResult {
    match command {
        Command::Envelope(args) => envelope::run(args, printer),
        Command::Keys(args) => keys::run(args, globals, printer),
        Command::Explain(args) => explain::run(args, printer),
        Command::Gateway(args) => gateway::run(args, printer),
        Command::Local(command) => local::run(command, globals, printer),
        Command::Share(args) => share::run(args, printer),
        Command::Agent(command) => {
            traced("agentbus", || gateway_verbs::run(command, globals, printer))
        }
        Command::Sidecar(args) => {
            traced("agentbus-sidecar", || sidecar::run(args, globals, printer))
        }
        Command::Trace(args) => trace::run(args, globals, printer),
        Command::Agents(args) => directory::agents(args, globals, printer),
        Command::Card(args) => directory::card(args, globals, printer),
        Command::Topic(args) => directory::topic(args, globals, printer),
        Command::Doctor(args) => doctor::run(args, globals, printer),
        Command::Mcp(args) => traced("agentbus-mcp", || mcp::run(args, globals, printer)),
        Command::Work(args) => traced("agentbus-worker", || work::run(args, globals, printer)),
        Command::Completions(args) => completions::run(args, printer),
        Command::Tasks(args) => lists::tasks(args, globals, printer),
        Command::Sent(args) => lists::sent(args, globals, printer),
        Command::Users(args) => users::run(args, printer),
        Command::Tokens(args) => tokens::run(args, printer),
        Command::Search(args) => search::run(args, globals, printer),
    }
}

/// Runs a command that talks to a gateway as an agent with OpenTelemetry on when the `OTEL_*`
/// variables ask for it (docs/observability.md), as `service`, flushing its spans at the end.
/// Local commands and the hook never start it: they stay off the network.
fn traced(service: &str, command: impl FnOnce() -> CliResult) -> CliResult {
    let telemetry = agentbus_telemetry::start_process(service).map_err(|e| {
        CliError::new(crate::error::ErrorKind::Config, e)
            .fix("correct the OTEL_* variable named (docs/observability.md)")
            .code(agentbus_protocol::Code::SettingUnusable)
    })?;
    let ran = command();
    telemetry.shutdown();
    ran
}

/// Reads a file argument, where `-` (the default) is standard input.
pub fn read_input(path: &Path) -> Result<Vec<u8>, CliError> {
    if path == Path::new("-") {
        let mut buf = Vec::new();
        std::io::stdin()
            .read_to_end(&mut buf)
            .map_err(|e| CliError::input(format!("reading standard input: {e}")))?;
        return Ok(buf);
    }
    std::fs::read(path).map_err(|e| {
        CliError::input(format!("{}: {e}", path.display()))
            .fix("check the path; use - for standard input")
    })
}

/// The default input: standard input.
pub fn stdin_path() -> PathBuf {
    PathBuf::from("-")
}

/// The user's home directory, for a harness's user-level settings; `flag` is the option that
/// names a file instead.
pub fn home_dir(flag: &str) -> Result<PathBuf, CliError> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .ok_or_else(|| {
            CliError::new(crate::error::ErrorKind::Config, "HOME is not set")
                .fix(format!("pass {flag} <file> or --project <dir>"))
        })
}

/// The program a harness runs: `--program`, else this agentbus binary.
pub fn program(given: Option<String>) -> Result<String, CliError> {
    match given {
        Some(p) => Ok(p),
        None => std::env::current_exe()
            .map(|p| p.to_string_lossy().into_owned())
            .map_err(|e| {
                CliError::new(
                    crate::error::ErrorKind::Internal,
                    format!("locating agentbus: {e}"),
                )
            }),
    }
}
