//! `agentbus keys generate|public|list|rotate|revoke`: Ed25519 key files and the connected agent's
//! registered keys (§3.3).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;
use serde_json::json;

use agentbus_protocol::signing::SigningKey;
use agentbus_runtime::{keyfile, random_bytes};

use crate::cli::Globals;
use crate::error::{CliError, CliResult};
use crate::printer::Printer;

/// `agentbus keys …`.
#[derive(Debug, Subcommand)]
pub enum KeysArgs {
    /// Generate a new Ed25519 key file (mode 0600) and print its public key.
    #[command(after_help = "Example:\n  agentbus keys generate --out ~/.agentbus/keys/bot.key")]
    Generate {
        /// Where to write the key; it is never overwritten.
        #[arg(long)]
        out: PathBuf,
    },
    /// Print the base64url public key of a key file (seed or PKCS#8 PEM).
    #[command(after_help = "Example:\n  agentbus keys public ~/.agentbus/keys/bot.key")]
    Public {
        /// The key file.
        file: PathBuf,
    },
    /// The connected agent's registered keys (current, active, revoked, expiry).
    #[command(after_help = "Example:\n  agentbus keys list")]
    List,
    /// Register a new key for the connected agent and sign with it from now on (§3.3); the old
    /// key stays active until you revoke it.
    #[command(
        after_help = "Example:\n  agentbus keys rotate && sleep 86400 && agentbus keys revoke key_01J…"
    )]
    Rotate,
    /// Revoke one of the connected agent's keys: it signs nothing new; history still verifies.
    #[command(after_help = "Example:\n  agentbus keys revoke key_01J9ZK6Q8R2M3N4P5Q6R7S8T9V")]
    Revoke {
        /// The key's id.
        key_id: String,
        /// Also when it is the key this agent signs with.
        #[arg(long)]
        force: bool,
    },
}

/// Runs `agentbus keys`.
pub fn run(args: KeysArgs, globals: &Globals, printer: &Printer) -> CliResult {
    match args {
        KeysArgs::Generate { out } => {
            let key = SigningKey::from_seed(random_bytes());
            keyfile::write_new(&out, &key).map_err(|e| {
                CliError::input(e.to_string())
                    .fix("choose a new path, or delete the old key only if you no longer need it")
            })?;
            let public = key.public().to_base64url();
            printer.either(
                &json!({"key_file": out, "public_key": public}),
                &format!("wrote {} (mode 0600)\npublic key: {public}", out.display()),
            )?;
        }
        KeysArgs::Public { file } => {
            let key = keyfile::read_any_mode(&file).map_err(|e| {
                CliError::input(e.to_string())
                    .fix("pass a key file written by `agentbus keys generate`")
            })?;
            let public = key.public().to_base64url();
            printer.either(&json!({"public_key": public}), &public)?;
        }
        KeysArgs::List => return super::registered_keys::list(globals, printer),
        KeysArgs::Rotate => return super::registered_keys::rotate(globals, printer),
        KeysArgs::Revoke { key_id, force } => {
            return super::registered_keys::revoke(&key_id, force, globals, printer);
        }
    }
    Ok(ExitCode::SUCCESS)
}
