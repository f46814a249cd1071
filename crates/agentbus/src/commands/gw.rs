//! What every gateway command shares: the selected profile, a client under its credential, the
//! agent's key and inbox, the mapping of client errors to exit codes, durations and JSON flags.

use std::sync::OnceLock;
use std::time::Duration;

use serde_json::Value;

use agentbus_client::profile::Profiles;
use agentbus_client::receive::Receiver;
use agentbus_client::{Agent, AgentInbox, ClientError, Gateway, KeyStore, Profile};

use crate::error::{CliError, ErrorKind};

/// The `--profile` flag, set once by `main`.
pub static PROFILE: OnceLock<Option<String>> = OnceLock::new();

/// A single-threaded runtime for one command.
pub fn runtime() -> Result<tokio::runtime::Runtime, CliError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            CliError::new(ErrorKind::Internal, e.to_string()).fix(
                "this is a bug in agentbus (or the machine is out of threads); please report it",
            )
        })
}

/// A client failure as the user sees it: one line of cause, one of fix, and the exit code.
pub fn client_error(e: ClientError) -> CliError {
    let msg = e.to_string();
    match e {
        ClientError::Unreachable { .. } => CliError::new(ErrorKind::Unavailable, msg)
            .fix("check that the gateway is running and its URL in the profile (agentbus doctor)"),
        ClientError::Api { code, .. } => {
            let err = CliError::new(ErrorKind::Refused, msg);
            match code {
                Some(c) => {
                    let mut err = err.code(c);
                    // The code is already in the message the gateway wrote.
                    err.message = e_message(&err.message, c);
                    err
                }
                None => err.fix("see the gateway's documentation for this error"),
            }
        }
        ClientError::Protocol(_) => CliError::new(ErrorKind::Unavailable, msg)
            .fix("check that the URL is an AgentBus gateway of a compatible version"),
        ClientError::NoProfile(ref name) if name.is_empty() => {
            CliError::new(ErrorKind::Config, "no agent is connected on this machine")
                .fix("run: agentbus connect --gateway <url> --token <token> --name <agent>")
        }
        ClientError::NoProfile(_) => CliError::new(ErrorKind::Config, msg)
            .fix("run `agentbus connect` for it, or pick a saved one with --profile"),
        ClientError::AmbiguousProfile(_) => CliError::new(ErrorKind::Config, msg)
            .fix("pass --profile <name> or set AGENTBUS_PROFILE"),
        ClientError::NoHome => {
            CliError::new(ErrorKind::Config, msg).fix("export AGENTBUS_HOME=/path/to/state")
        }
        ClientError::Io { .. } => CliError::new(ErrorKind::Config, msg)
            .fix("check that the agentbus state directory (AGENTBUS_HOME) is writable"),
        ClientError::Key(_) => CliError::new(ErrorKind::Config, msg)
            .fix("chmod 600 the key file, or reconnect to register a new key"),
        ClientError::KeychainUnavailable(_) => CliError::input(msg).fix(
            "unlock or start the OS keychain (on Linux a Secret Service on the session D-Bus), or unset AGENTBUS_KEYSTORE to keep the key in a 0600 file",
        ),
        ClientError::Keychain(_) => CliError::new(ErrorKind::Config, msg).fix(
            "run where the OS keychain is reachable and unlocked (on Linux: the session D-Bus and its Secret Service), then again",
        ),
        ClientError::KeychainKey(_) => CliError::new(ErrorKind::Config, msg)
            .fix("reconnect to register a new key (a lost private key cannot be recovered)"),
        ClientError::KeychainKeyExists(_) => CliError::new(ErrorKind::Config, msg).fix(
            "delete that keychain entry only if no profile uses it, then connect again",
        ),
        ClientError::Invalid(_) => CliError::input(msg)
            .fix("check the value; `agentbus <command> --help` shows the expected form"),
        ClientError::Import(_) => CliError::new(ErrorKind::Config, msg)
            .fix("check that the local store (AGENTBUS_HOME) is writable"),
        ClientError::Attachment { .. } => {
            CliError::input(msg).fix("check the path given to --attach")
        }
        ClientError::UnknownMessage { .. } => CliError::input(msg)
            .fix("check the id; `agentbus sidecar --once` receives what is waiting"),
        ClientError::UnknownTask { .. } => CliError::input(msg).fix("pass the task's tsk_ id"),
    }
}

fn e_message(message: &str, code: agentbus_protocol::Code) -> String {
    message
        .strip_prefix(&format!("{code}: "))
        .unwrap_or(message)
        .to_owned()
}

/// The selected profile, its client, key and inbox.
pub struct Ctx {
    /// Saved profiles.
    pub profiles: Profiles,
    /// The selected one.
    pub profile: Profile,
    /// A client under its credential.
    pub gw: Gateway,
    /// The runtime the command's calls run on.
    pub rt: tokio::runtime::Runtime,
}

impl Ctx {
    /// Opens the profile chosen by `--profile`, `AGENTBUS_PROFILE`, or the only one.
    pub fn open() -> Result<Ctx, CliError> {
        let profiles = Profiles::open_default().map_err(client_error)?;
        let chosen = PROFILE.get().cloned().flatten();
        let profile = profiles.select(chosen.as_deref()).map_err(client_error)?;
        let gw = Gateway::new(&profile.gateway, &profile.token).map_err(client_error)?;
        Ok(Ctx {
            profiles,
            profile,
            gw,
            rt: runtime()?,
        })
    }

    /// Runs a client call to completion.
    pub fn block<T>(
        &self,
        f: impl std::future::Future<Output = Result<T, ClientError>>,
    ) -> Result<T, CliError> {
        self.rt.block_on(f).map_err(client_error)
    }

    /// Where the agent's private keys live.
    pub fn key_store(&self) -> Result<KeyStore, CliError> {
        self.profiles.key_store(&self.profile).map_err(client_error)
    }

    /// The agent's local inbox.
    pub fn inbox(&self) -> AgentInbox {
        self.agent().inbox()
    }

    /// The agent's verbs (`agentbus_client::agent`) under this profile.
    pub fn agent(&self) -> Agent {
        Agent {
            profiles: self.profiles.clone(),
            profile: self.profile.clone(),
            gw: self.gw.clone(),
        }
    }

    /// A receiver for this agent, importing into this machine's local store. It reads the key
    /// only to sign the read receipts it sends (§5.8).
    pub fn receiver(&self) -> Result<Receiver, CliError> {
        Ok(self.agent().receiver(super::local::open_store()?))
    }
}

/// Parses `90`, `90s`, `500ms`, `2m`, `1h`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration (like 30s, 2m, 500ms)"))?;
    let ms = match unit {
        "ms" => n,
        "s" => n * 1000,
        "m" => n * 60_000,
        "h" => n * 3_600_000,
        _ => return Err(format!("{s:?} is not a duration (like 30s, 2m, 500ms)")),
    };
    Ok(Duration::from_millis(ms))
}

/// Parses a `--input`/`--output` JSON object.
pub fn json_object(flag: &str, text: &str) -> Result<Value, CliError> {
    let v: Value = serde_json::from_str(text).map_err(|e| {
        CliError::input(format!("{flag} is not JSON: {e}")).fix(format!(
            "pass an object, e.g. {flag} '{{\"key\": \"value\"}}'"
        ))
    })?;
    if !v.is_object() {
        return Err(CliError::input(format!("{flag} must be a JSON object"))
            .fix(format!("wrap it: {flag} '{{\"value\": …}}'")));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("1h").unwrap(), Duration::from_secs(3600));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("5d").is_err());
    }
}
