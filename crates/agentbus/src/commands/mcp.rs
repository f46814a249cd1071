//! `agentbus mcp`: the MCP server over stdio, acting as the connected agent (`--profile`) and a
//! local session; `agentbus mcp install|uninstall <harness>`: its entry in a harness's MCP
//! configuration. The work is in `agentbus-mcp` (`docs/mcp.md`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::json;

use agentbus_client::{Agent, ClientError};
use agentbus_mcp::install::{self, Entry};

use super::hook::HarnessArg;
use super::local::open_store;
use crate::cli::Globals;
use crate::error::{CliError, CliResult, ErrorKind};
use crate::printer::Printer;

/// `agentbus mcp [serve options] | install | uninstall`.
#[derive(Debug, Args)]
#[command(
    args_conflicts_with_subcommands = true,
    after_help = "Examples:\n  agentbus mcp                       # what a harness runs: the server on stdin/stdout\n  agentbus mcp install claude        # add it to Claude Code's MCP servers\n  agentbus --profile reviewer mcp install codex --project .\n\n\
stdout is the MCP protocol; diagnostics go to stderr. Without a connected agent the gateway tools \
answer AB-4071 and local messaging still works."
)]
pub struct McpArgs {
    #[command(subcommand)]
    command: Option<McpCommand>,
    #[command(flatten)]
    serve: ServeArgs,
}

/// How the server runs.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Act as this local session (default: $AGENTBUS_SESSION, else a session registered for
    /// this server and forgotten when it stops).
    #[arg(long, env = "AGENTBUS_SESSION")]
    session: Option<String>,
    /// The session's display name, by which others can address it.
    #[arg(long, env = "AGENTBUS_NAME")]
    name: Option<String>,
    /// The harness the server serves: its context budget bounds each read.
    #[arg(long, value_enum, default_value = "claude")]
    harness: HarnessArg,
    /// A git share checkout, for share:<operator>/<agent> addresses.
    #[arg(long, env = "AGENTBUS_SHARE", value_name = "PATH")]
    share: Option<PathBuf>,
    /// Push arriving messages into Claude Code's context as channel notifications even when the
    /// client does not declare the channel (only for a Claude Code started with channels for
    /// this server: a dropped notification would count as shown).
    #[arg(long)]
    channel: bool,
    /// How often to look for local arrivals, in milliseconds.
    #[arg(long, default_value_t = 50, value_name = "MS")]
    poll_ms: u64,
}

#[derive(Debug, Subcommand)]
enum McpCommand {
    /// Add the server to a harness's MCP configuration (idempotent).
    #[command(
        after_help = "Examples:\n  agentbus mcp install claude\n  agentbus mcp install codex --project .\n  agentbus --profile reviewer mcp install opencode"
    )]
    Install(InstallArgs),
    /// Remove the server from a harness's MCP configuration; other servers stay.
    #[command(after_help = "Example:\n  agentbus mcp uninstall claude")]
    Uninstall(InstallArgs),
}

/// Where to install, and what the entry runs.
#[derive(Debug, Args)]
struct InstallArgs {
    /// The harness.
    harness: HarnessArg,
    /// Install into this project's configuration instead of the user's.
    #[arg(long, conflicts_with = "config")]
    project: Option<PathBuf>,
    /// Install into this exact configuration file.
    #[arg(long)]
    config: Option<PathBuf>,
    /// The program the harness runs (default: this agentbus binary).
    #[arg(long)]
    program: Option<String>,
    /// Have the server push Claude Code channel notifications (see `agentbus mcp --help`).
    #[arg(long)]
    channel: bool,
}

/// Runs `agentbus mcp …`.
pub fn run(args: McpArgs, globals: &Globals, printer: &Printer) -> CliResult {
    match args.command {
        Some(McpCommand::Install(a)) => configure(a, true, globals, printer),
        Some(McpCommand::Uninstall(a)) => configure(a, false, globals, printer),
        None => serve(args.serve, globals),
    }
}

fn serve(args: ServeArgs, globals: &Globals) -> CliResult {
    let store = open_store()?;
    let agent = match Agent::open(globals.profile.as_deref()) {
        Ok(a) => Some(a),
        // No agent connected here: local messaging works, gateway tools say how to connect.
        Err(ClientError::NoProfile(name)) if name.is_empty() => None,
        Err(e) => return Err(CliError::of(e)),
    };
    let opts = agentbus_mcp::Options {
        store,
        agent,
        share: args.share,
        session: args.session.filter(|s| !s.is_empty()),
        name: args.name.filter(|n| !n.is_empty()),
        harness: args.harness.harness(),
        channel: args.channel,
        poll: Duration::from_millis(args.poll_ms.max(5)),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| CliError::new(ErrorKind::Internal, e.to_string()))?;
    rt.block_on(agentbus_mcp::serve_stdio(opts))
        .map_err(|e| match e {
            agentbus_mcp::ServeError::Store(e) => CliError::of(e),
            agentbus_mcp::ServeError::Bind(_) => CliError::new(ErrorKind::Config, e.to_string())
                .fix("check the session with `agentbus sessions`, or start without --session"),
            agentbus_mcp::ServeError::BadSession(_) => {
                CliError::new(ErrorKind::Usage, e.to_string())
                    .fix("pass --session with letters, digits, '.', '_' and '-' only")
            }
            e => CliError::new(ErrorKind::Unavailable, e.to_string())
                .fix("run `agentbus mcp` from an MCP client that speaks over stdin and stdout"),
        })?;
    // The client closed the connection: a server's normal end.
    rt.shutdown_timeout(Duration::from_millis(200));
    Ok(ExitCode::SUCCESS)
}

fn configure(a: InstallArgs, installing: bool, globals: &Globals, printer: &Printer) -> CliResult {
    let harness = a.harness.harness();
    let path = match (a.config, a.project) {
        (Some(p), _) => p,
        (None, Some(dir)) => install::project_path(harness, &dir),
        (None, None) => install::user_path(harness, &super::home_dir("--config")?, |v| {
            std::env::var_os(v)
        }),
    };
    let change = if installing {
        let program = super::program(a.program)?;
        let mut args = vec![
            "mcp".to_owned(),
            "--harness".to_owned(),
            harness.as_str().to_owned(),
        ];
        if a.channel {
            args.push("--channel".into());
        }
        // The server finds the same state and agent as the command that installed it.
        let mut env = BTreeMap::new();
        if let Some(home) = std::env::var_os("AGENTBUS_HOME").filter(|h| !h.is_empty()) {
            env.insert(
                "AGENTBUS_HOME".to_owned(),
                home.to_string_lossy().into_owned(),
            );
        }
        if let Some(p) = &globals.profile {
            env.insert("AGENTBUS_PROFILE".to_owned(), p.clone());
        }
        install::install(harness, &path, &Entry { program, args, env })
    } else {
        install::uninstall(harness, &path)
    }
    .map_err(CliError::of)?;
    use agentbus_local::install::Change;
    let what = match (installing, change) {
        (true, Change::Changed) => "added the agentbus MCP server to",
        (true, Change::Unchanged) => "the agentbus MCP server was already in",
        (false, Change::Changed) => "removed the agentbus MCP server from",
        (false, Change::Unchanged) => "no agentbus MCP server to remove in",
    };
    printer.either(
        &json!({"harness": harness.as_str(), "path": path, "change": change, "installed": installing}),
        &format!("{what} {}", path.display()),
    )?;
    Ok(ExitCode::SUCCESS)
}
