//! What every gateway command shares: the selected profile, a client under its credential, the
//! agent's key and inbox, the mapping of client errors to exit codes, durations and JSON flags.

use std::sync::OnceLock;
use std::time::Duration;

use serde_json::Value;

use agentbus_client::agent::Downloads;
use agentbus_client::http::CONNECTION_REFUSED;
use agentbus_client::profile::Profiles;
use agentbus_client::receive::Receiver;
use agentbus_client::{Agent, AgentInbox, ClientError, Gateway, KeyStore, Profile};
use agentbus_protocol::Code;

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
        ClientError::Unreachable { url, detail } if detail == CONNECTION_REFUSED => {
            CliError::new(
                ErrorKind::Unavailable,
                format!("connection refused at {url}: no gateway is listening there"),
            )
            .fix("start the gateway (agentbus gateway), or connect again with its right URL: agentbus connect --gateway <url> …")
        }
        ClientError::Unreachable { .. } => CliError::new(ErrorKind::Unavailable, msg)
            .fix("check that the gateway is running and its URL in the profile (agentbus doctor)"),
        ClientError::GatewayUrl { .. } => CliError::new(ErrorKind::Usage, msg)
            .fix("write the whole URL, e.g. --gateway http://127.0.0.1:7700"),
        ClientError::Address(_) => CliError::new(ErrorKind::Usage, msg).fix(
            "write agent://<tenant>/<workspace>/<name>, topic://<tenant>/<workspace>/<topic> or an agt_ id; `agentbus agents` lists the addresses",
        ),
        ClientError::Api { code, .. } => {
            let err = CliError::new(ErrorKind::Refused, msg);
            match code {
                Some(c) => {
                    let mut err = match cli_fix(c) {
                        Some(fix) => err.fix(fix).code(c),
                        None => err.code(c),
                    };
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
        ClientError::WrongId { .. } => CliError::new(ErrorKind::Usage, msg)
            .fix("`agentbus inbox --json` and `agentbus tasks` show every id of a message and its task"),
    }
}

/// The fix of a gateway code in the words of this command line, where the catalogue's (written
/// for any client of the HTTP API) names headers and routes.
fn cli_fix(code: Code) -> Option<&'static str> {
    Some(match code {
        Code::MissingCredential => {
            "the profile's credential is not accepted: connect again (agentbus connect --gateway <url> --token <token> --name <agent>), or choose another profile with --profile"
        }
        Code::UnknownKey => {
            "register a new key with `agentbus keys rotate`, or connect again; `agentbus keys list` shows the registered keys"
        }
        Code::TenantSuspended | Code::AgentSuspended => {
            "ask the gateway's operator to resume it; nothing can be sent until then"
        }
        Code::CapabilityInputInvalid => {
            "correct --input at the paths given; `agentbus agents show <worker>` prints the capability's input_schema"
        }
        Code::UnknownAgent => "check the address; `agentbus agents` lists the directory",
        _ => return None,
    })
}

/// Adds "did you mean" to a refusal for an unknown recipient, from the directory this agent
/// sees (one more request, made only once the send has failed).
pub fn recipient_hint(ctx: &Ctx, to: &str, e: CliError) -> CliError {
    if e.code != Some(Code::UnknownAgent) {
        return e;
    }
    let cards = ctx.rt.block_on(ctx.gw.agents()).unwrap_or_default();
    match agentbus_client::suggest::recipient(to, cards.iter().map(|c| c.address.as_str())) {
        Some(near) => e.fix(format!(
            "did you mean {near}? `agentbus agents` lists the directory"
        )),
        None => e,
    }
}

fn e_message(message: &str, code: Code) -> String {
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
        let profile = profiles
            .select(chosen.as_deref())
            .map_err(|e| profile_hint(&profiles, e))?;
        let gw = Gateway::new(&profile.gateway, &profile.token).map_err(client_error)?;
        crate::printer::detail(&format!(
            "profile {}: {} ({}) at {}",
            profile.name, profile.address, profile.agent_id, profile.gateway
        ));
        Ok(Ctx {
            profiles,
            profile,
            gw,
            rt: runtime()?,
        })
    }

    /// The id a gateway verb takes for `id`, whichever id the user was shown (`lm_`, `msg_`,
    /// `tsk_`; [`agentbus_client::agent::resolve_id`]).
    pub fn resolve(
        &self,
        id: &str,
        wants: agentbus_client::agent::Wants,
    ) -> Result<String, CliError> {
        let local = super::local::open_store()?;
        agentbus_client::agent::resolve_id(&local, id, wants).map_err(client_error)
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
            // What its receivers download shows the same bar as uploads, on a terminal.
            downloads: Downloads::new(|n| Box::new(super::progress::Transfer::downloads(n))),
        }
    }

    /// A receiver for this agent, importing into this machine's local store. It reads the key
    /// only to sign the read receipts it sends (§5.8).
    pub fn receiver(&self) -> Result<Receiver, CliError> {
        Ok(self.agent().receiver(super::local::open_store()?))
    }
}

/// A missing profile's error, with the saved profile its name is a slip of, if any.
fn profile_hint(profiles: &Profiles, e: ClientError) -> CliError {
    let name = match &e {
        ClientError::NoProfile(name) => name.clone(),
        _ => return client_error(e),
    };
    let names = profiles.names().unwrap_or_default();
    let near = agentbus_client::suggest::closest(&name, names.iter().map(String::as_str));
    match near {
        Some(near) => client_error(e).fix(format!("did you mean --profile {near}?")),
        None if !name.is_empty() && !names.is_empty() => client_error(e).fix(format!(
            "saved profiles: {}; pick one with --profile, or run `agentbus connect` for this one",
            names.join(", ")
        )),
        None => client_error(e),
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
