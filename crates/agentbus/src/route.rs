//! The form of an address picks its transport: one function, [`route`], for every verb that takes
//! an address (`tell`, `ask`, and what `reply` answers).
//!
//! - `agent://…`, `topic://…` and an `agt_` id go to the gateway (wire protocol §4.1);
//! - `share:<operator>/<agent>` (the agent may be `any`) goes to a git share;
//! - everything else is this machine's local log: `local`, `all`, `collective`,
//!   `<session>@<node>`, `engineer`, `engineer:<email>`, or a session id prefix or display name,
//!   which the local store resolves.

use crate::error::{CliError, ErrorKind};

/// Where a message to an address goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// The gateway, with the address as given.
    Gateway(String),
    /// A git share: the recipient's operator and agent (`any` for whoever reads).
    Share {
        /// The operator (organisation).
        operator: String,
        /// The agent, or `any`.
        agent: String,
    },
    /// The local log, with the address as given (resolved by the store).
    Local(String),
}

impl Route {
    /// The transport's name.
    pub fn transport(&self) -> &'static str {
        match self {
            Route::Gateway(_) => "gateway",
            Route::Share { .. } => "share",
            Route::Local(_) => "local",
        }
    }
}

/// Parses any address a user gives and picks its transport.
pub fn route(address: &str) -> Result<Route, CliError> {
    let a = address.trim();
    if a.starts_with("agent://") || a.starts_with("topic://") || a.starts_with("agt_") {
        return Ok(Route::Gateway(a.to_owned()));
    }
    if let Some(rest) = a.strip_prefix("share:") {
        let ok = |s: &str| {
            !s.is_empty()
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        };
        return match rest.split_once('/') {
            Some((operator, agent)) if ok(operator) && ok(agent) => Ok(Route::Share {
                operator: operator.to_owned(),
                agent: agent.to_owned(),
            }),
            _ => Err(
                CliError::new(ErrorKind::Usage, format!("{a:?} is not a share address"))
                    .fix("write share:<operator>/<agent>, or share:<operator>/any"),
            ),
        };
    }
    if a.is_empty() {
        return Err(CliError::new(ErrorKind::Usage, "the address is empty")
            .fix("name a recipient: local, all, engineer, <session>, agent://…, share:<operator>/<agent>"));
    }
    Ok(Route::Local(a.to_owned()))
}

/// The error for a transport this build does not carry yet.
pub fn unavailable(transport: &str) -> CliError {
    CliError::new(
        ErrorKind::Config,
        format!("the {transport} transport is not available in this build yet"),
    )
    .fix("send to a local address (local, all, engineer, <session>) for now")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_picks_its_transport() {
        let cases = [
            ("agent://acme/backend/reviewer", "gateway"),
            ("topic://acme/builds", "gateway"),
            ("agt_01J9ZK6Q8R2M3N4P5Q6R7S8T9V", "gateway"),
            ("share:acme/reviewer", "share"),
            ("share:acme/any", "share"),
            ("local", "local"),
            ("all", "local"),
            ("collective", "local"),
            ("engineer", "local"),
            ("engineer:ada@example.com", "local"),
            ("3f2a@node1", "local"),
            ("3f2a", "local"),
            ("reviewer", "local"),
        ];
        for (address, transport) in cases {
            assert_eq!(
                route(address).map(|r| r.transport()).ok(),
                Some(transport),
                "{address}"
            );
        }
        assert!(route("share:acme").is_err());
        assert!(route("share:/x").is_err());
    }
}
