//! What every gateway command shares: the selected profile, a client under its credential, the
//! agent's key and inbox, durations and JSON flags.

use std::time::Duration;

use serde_json::Value;

use agentbus_client::agent::Downloads;
use agentbus_client::profile::Profiles;
use agentbus_client::receive::Receiver;
use agentbus_client::{Agent, AgentInbox, ClientError, Gateway, KeyStore, Profile};
use agentbus_protocol::Code;

use crate::cli::Globals;
use crate::error::{CliError, ErrorKind};
use crate::printer::{Printer, Verbosity};

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
    /// Whether transfers show a progress bar (not with `-q`).
    verbosity: Verbosity,
}

impl Ctx {
    /// Opens the profile chosen by `--profile`, `AGENTBUS_PROFILE`, or the only one; with `-v`,
    /// says which on stderr.
    pub fn open(globals: &Globals, printer: &Printer) -> Result<Ctx, CliError> {
        let profiles = Profiles::open_default().map_err(CliError::of)?;
        let profile = profiles
            .select(globals.profile.as_deref())
            .map_err(|e| profile_hint(&profiles, e))?;
        let gw = Gateway::new(&profile.gateway, &profile.token).map_err(CliError::of)?;
        printer.detail(&format!(
            "profile {}: {} ({}) at {}",
            profile.name, profile.address, profile.agent_id, profile.gateway
        ));
        Ok(Ctx {
            profiles,
            profile,
            gw,
            rt: runtime()?,
            verbosity: printer.verbosity(),
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
        agentbus_client::agent::resolve_id(&local, id, wants).map_err(CliError::of)
    }

    /// The address `to` stands for: a bare name is the agent of the profile's workspace that
    /// answers to it in the directory (one more request, only for a bare name); anything else
    /// is passed on as written.
    pub fn address(&self, to: &str) -> Result<String, CliError> {
        if !agentbus_client::short::is_bare_name(to) {
            return Ok(to.to_owned());
        }
        let cards = self.block(self.gw.agents())?;
        // The code leads the line, as a refusal's does: the name was refused before sending.
        agentbus_client::short::expand(to, &self.profile.address, &cards).map_err(|e| {
            let code = agentbus_protocol::errors::Catalogued::code(&e);
            CliError::of(e).code(code)
        })
    }

    /// Runs a client call to completion.
    pub fn block<T>(
        &self,
        f: impl std::future::Future<Output = Result<T, ClientError>>,
    ) -> Result<T, CliError> {
        self.rt.block_on(f).map_err(CliError::of)
    }

    /// Where the agent's private keys live.
    pub fn key_store(&self) -> Result<KeyStore, CliError> {
        self.profiles.key_store(&self.profile).map_err(CliError::of)
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
            downloads: {
                let verbosity = self.verbosity;
                Downloads::new(move |n| {
                    Box::new(super::progress_bar::Transfer::downloads(n, verbosity))
                })
            },
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
        _ => return CliError::of(e),
    };
    let names = profiles.names().unwrap_or_default();
    let near = agentbus_client::suggest::closest(&name, names.iter().map(String::as_str));
    match near {
        Some(near) => CliError::of(e).fix(format!("did you mean --profile {near}?")),
        None if !name.is_empty() && !names.is_empty() => CliError::of(e).fix(format!(
            "saved profiles: {}; pick one with --profile, or run `agentbus connect` for this one",
            names.join(", ")
        )),
        None => CliError::of(e),
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
