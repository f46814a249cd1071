//! `agentbus hook <harness>` (what a harness runs on each event) and `agentbus hooks
//! install|uninstall <harness>`. The hook never fails its harness: a problem is reported on
//! stderr and the process exits 0, so the session goes on without messages rather than stopping.

use std::io::Read as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand, ValueEnum};
use serde_json::json;

use agentbus_local::hook::{Harness, HookEnv, parse_event, render_answer};
use agentbus_local::install::{self, InstallError};

use super::local::{open_store, store_error};
use crate::error::{CliError, CliResult, ErrorKind};
use crate::printer::Printer;

/// The harnesses, as the command line names them.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum HarnessArg {
    /// Claude Code.
    Claude,
    /// OpenAI Codex CLI.
    Codex,
    /// OpenCode.
    Opencode,
}

impl HarnessArg {
    pub fn harness(self) -> Harness {
        match self {
            HarnessArg::Claude => Harness::Claude,
            HarnessArg::Codex => Harness::Codex,
            HarnessArg::Opencode => Harness::OpenCode,
        }
    }
}

/// Arguments of `hook`.
#[derive(Debug, Args)]
pub struct HookArgs {
    /// The harness whose event arrives on stdin.
    harness: HarnessArg,
}

/// `hooks install|uninstall`.
#[derive(Debug, Subcommand)]
pub enum HooksArgs {
    /// Add the hook to a harness's settings (idempotent).
    #[command(
        after_help = "Examples:\n  agentbus hooks install claude\n  agentbus hooks install codex --project .\n  agentbus hooks install opencode"
    )]
    Install(InstallArgs),
    /// Remove the hook from a harness's settings; other hooks stay.
    #[command(after_help = "Example:\n  agentbus hooks uninstall claude")]
    Uninstall(InstallArgs),
}

/// Where to install.
#[derive(Debug, Args)]
pub struct InstallArgs {
    /// The harness.
    harness: HarnessArg,
    /// Install into this project's settings instead of the user's.
    #[arg(long, conflicts_with = "settings")]
    project: Option<PathBuf>,
    /// Install into this exact settings file (or OpenCode plugin file).
    #[arg(long)]
    settings: Option<PathBuf>,
    /// The program the hook runs (default: this agentbus binary).
    #[arg(long)]
    program: Option<String>,
}

/// Runs `agentbus hook <harness>`.
pub fn hook(args: HookArgs, printer: &Printer) -> CliResult {
    if let Err(e) = answer(args.harness.harness(), printer) {
        if e.kind == ErrorKind::BrokenPipe {
            return Err(e);
        }
        printer.error(&e);
    }
    Ok(ExitCode::SUCCESS)
}

fn answer(harness: Harness, printer: &Printer) -> Result<(), CliError> {
    let mut input = Vec::new();
    std::io::stdin()
        .read_to_end(&mut input)
        .map_err(|e| CliError::input(format!("reading the hook event: {e}")))?;
    let event = parse_event(harness, &input).map_err(|e| {
        CliError::input(e.to_string())
            .fix("run this from the harness's hook settings (agentbus hooks install)")
    })?;
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let env = HookEnv {
        agent: var("AGENTBUS_AGENT"),
        name: var("AGENTBUS_NAME"),
        env_file: var("CLAUDE_ENV_FILE").map(PathBuf::from),
    };
    let store = open_store()?;
    let answer = store.hook(&event, &env).map_err(store_error)?;
    if let Some(doc) = render_answer(&event, &answer) {
        printer.line(&doc.to_string())?;
    }
    Ok(())
}

/// Runs `agentbus hooks install|uninstall`.
pub fn hooks(args: HooksArgs, printer: &Printer) -> CliResult {
    let (installing, a) = match args {
        HooksArgs::Install(a) => (true, a),
        HooksArgs::Uninstall(a) => (false, a),
    };
    let harness = a.harness.harness();
    let path = match (a.settings, a.project) {
        (Some(p), _) => p,
        (None, Some(dir)) => install::project_path(harness, &dir),
        (None, None) => install::default_path(harness, &super::home_dir("--settings")?, |v| {
            std::env::var_os(v)
        }),
    };
    let change = if installing {
        install::install(harness, &path, &super::program(a.program)?)
    } else {
        install::uninstall(harness, &path)
    }
    .map_err(|e| match e {
        InstallError::Store(e) => store_error(e),
        e => CliError::new(ErrorKind::Config, e.to_string()),
    })?;
    let what = match (installing, change) {
        (true, install::Change::Changed) => "installed the hook in",
        (true, install::Change::Unchanged) => "the hook was already installed in",
        (false, install::Change::Changed) => "removed the hook from",
        (false, install::Change::Unchanged) => "no hook to remove in",
    };
    printer.either(
        &json!({"harness": harness.as_str(), "path": path, "change": change, "installed": installing}),
        &format!("{what} {}", path.display()),
    )?;
    Ok(ExitCode::SUCCESS)
}
