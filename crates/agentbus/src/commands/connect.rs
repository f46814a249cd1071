//! `agentbus connect`: this machine connected to a gateway as an agent. The flow is
//! [`agentbus_client::connect`]; this module parses, words its errors and prints.

use std::process::ExitCode;

use clap::Args;

use agentbus_client::connect::{ConnectOptions, Connected, connect};
use agentbus_client::profile::Profiles;

use super::profile::runtime;
use crate::cli::Globals;
use crate::error::{CliError, CliResult};
use crate::printer::Printer;

/// Arguments of `connect`.
#[derive(Debug, Args)]
pub struct ConnectArgs {
    /// The gateway's URL.
    #[arg(long, env = "AGENTBUS_GATEWAY")]
    gateway: String,
    /// A user integration token (abu_…) to register the agent, or the agent's credential (aba_…)
    /// with --agent to add this machine's key to an existing agent.
    #[arg(long, env = "AGENTBUS_TOKEN", hide_env_values = true)]
    token: String,
    /// The agent's name (3-40 of a-z, 0-9, '-'); also the profile's name unless --profile is given.
    #[arg(long)]
    name: String,
    /// The existing agent's agt_ id, when --token is its credential.
    #[arg(long)]
    agent: Option<String>,
}

/// Runs `connect`: the profile named by `--profile` (else the agent's name) is resumed or made.
pub fn run(args: ConnectArgs, globals: &Globals, printer: &Printer) -> CliResult {
    let profiles = Profiles::open_default().map_err(CliError::of)?;
    let options = ConnectOptions {
        gateway: args.gateway,
        token: args.token,
        name: args.name,
        profile: globals.profile.clone(),
        agent: args.agent,
        // As AGENTBUS_KEYSTORE asks.
        key_store: None,
    };
    let rt = runtime()?;
    let connected = rt
        .block_on(connect(&profiles, &options))
        .map_err(CliError::of)?;
    print(printer, &connected)?;
    Ok(ExitCode::SUCCESS)
}

fn print(printer: &Printer, c: &Connected) -> Result<(), CliError> {
    printer.either(
        &serde_json::to_value(c).unwrap_or_default(),
        &format!(
            "{} as {} ({})\nprofile: {}  gateway: {}\nkey: {} in {}",
            c.status.as_str(),
            c.address,
            c.agent_id,
            c.profile,
            c.gateway,
            c.key_id,
            c.key_location,
        ),
    )
}
