//! `agentbus completions <shell>`: the shell's registration of clap's completion engine. The
//! shell then asks this binary (`AGENTBUS_COMPLETE=<shell> agentbus -- <words>`) at each Tab, so
//! completions follow the parser exactly and can offer what exists only at run time: the saved
//! profiles' names and the addresses this machine knows.

use std::collections::BTreeSet;
use std::process::ExitCode;

use clap::Args;
use clap_complete::CompletionCandidate;
use clap_complete::Shell;
use clap_complete::env::Shells;

use agentbus_client::AgentInbox;
use agentbus_client::profile::Profiles;

use crate::error::{CliError, CliResult, ErrorKind};
use crate::printer::Printer;

/// The variable by which the shell asks for completions.
pub const VAR: &str = "AGENTBUS_COMPLETE";

/// Arguments of `completions`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    shell: Shell,
}

/// Writes the registration script to stdout.
pub fn run(args: CompletionsArgs, printer: &Printer) -> CliResult {
    let name = args.shell.to_string();
    let shells = Shells::builtins();
    let shell = shells.completer(&name).ok_or_else(|| {
        CliError::new(ErrorKind::Usage, format!("no completion engine for {name}"))
            .fix("use bash, zsh, fish, elvish or powershell")
    })?;
    // The script calls back the binary that wrote it, by the path it was run as (as clap's own
    // registration does), so a copy outside PATH completes too.
    let me = std::env::args_os()
        .next()
        .unwrap_or_else(|| "agentbus".into());
    let mut completer = std::path::PathBuf::from(me);
    if completer.components().count() > 1
        && let Ok(cwd) = std::env::current_dir()
    {
        completer = cwd.join(completer);
    }
    let mut script = Vec::new();
    shell
        .write_registration(
            VAR,
            "agentbus",
            "agentbus",
            &completer.to_string_lossy(),
            &mut script,
        )
        .map_err(|e| CliError::new(ErrorKind::Internal, e.to_string()))?;
    printer.raw(&script)?;
    Ok(ExitCode::SUCCESS)
}

/// The saved profiles' names, for `--profile`.
pub fn profile_names() -> Vec<CompletionCandidate> {
    Profiles::open_default()
        .and_then(|p| p.names())
        .unwrap_or_default()
        .into_iter()
        .map(CompletionCandidate::new)
        .collect()
}

/// The gateway addresses this machine knows, for a recipient: every saved profile's own, and
/// the senders of what their inboxes hold. Read from files only; a Tab never waits on a network.
pub fn addresses() -> Vec<CompletionCandidate> {
    let mut known = BTreeSet::new();
    let Ok(profiles) = Profiles::open_default() else {
        return Vec::new();
    };
    for name in profiles.names().unwrap_or_default() {
        let Ok(p) = profiles.load(&name) else {
            continue;
        };
        let inbox = AgentInbox::new(profiles.agent_dir(&p.agent_id));
        for r in inbox.list().unwrap_or_default() {
            if let Some(from) = r.envelope.get("source").and_then(|v| v.as_str())
                && from.starts_with("agent://")
            {
                known.insert(from.to_owned());
            }
        }
        known.insert(p.address);
    }
    known.into_iter().map(CompletionCandidate::new).collect()
}

/// [`addresses`], and the local ones every machine has, for `tell` and `ask`.
pub fn local_addresses() -> Vec<CompletionCandidate> {
    ["local", "all", "engineer"]
        .into_iter()
        .map(CompletionCandidate::new)
        .chain(addresses())
        .collect()
}
