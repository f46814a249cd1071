//! Addresses, parsed in one place (LM: Address, LM-3..LM-5, LM-82).
//!
//! Two parsers share this module: [`Address::parse_line`] reads the `to` a line writes, exactly;
//! [`Address::parse_command`] reads what a user types, where `local` means this node and
//! `collective` is a synonym of `all`. A session named by a prefix or a display name is resolved
//! by the store at send time ([`crate::Store::resolve`]), never here.

use std::fmt;

use crate::consts::{BY_CHARS, SESSION_ID_CHARS};

/// Whom a message is for, as its `to` says it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Address {
    /// The sessions on one machine, written `local@<node>` (LM-3).
    Local(String),
    /// Every session on every machine, written `all` (LM-4).
    All,
    /// One session on one node, written `<session>@<node>` (LM-5).
    Session {
        /// The session id.
        session: String,
        /// The node it runs on.
        node: String,
    },
    /// The engineer, written `engineer` (any engineer view on the node) or `engineer:<email>`
    /// (only that engineer, G-LM-9).
    Engineer(Option<String>),
    /// An agent identity of another transport (`agent://…` or `share:…`): the recipient of an
    /// imported message, shown once to one of the sessions bound to it (see `docs/local.md`).
    Agent(String),
}

/// An address that cannot be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0:?} is not an address: use local, all, engineer[:<email>], <session>@<node>, or a session id prefix"
)]
pub struct AddressError(pub String);

impl agentbus_protocol::errors::Catalogued for AddressError {
    fn code(&self) -> agentbus_protocol::Code {
        agentbus_protocol::Code::NotALocalAddress
    }
}

/// The command word for every session everywhere (a synonym of `all`).
pub const COLLECTIVE: &str = "collective";
/// Every session everywhere, as a line writes it.
pub const ALL: &str = "all";
/// The command word for the sessions of this machine.
pub const LOCAL: &str = "local";
/// The engineer as sender and address.
pub const ENGINEER: &str = "engineer";

impl Address {
    /// Parses a line's `to`, exactly as [`fmt::Display`] writes it (parse ∘ display = id, LM-5).
    pub fn parse_line(s: &str) -> Result<Address, AddressError> {
        let err = || AddressError(s.to_owned());
        if s.chars().count() > BY_CHARS || s.is_empty() {
            return Err(err());
        }
        if s == ALL {
            return Ok(Address::All);
        }
        if let Some(who) = engineer_of(s) {
            return who.map(Address::Engineer).map_err(|()| err());
        }
        if is_agent_identity(s) {
            return Ok(Address::Agent(s.to_owned()));
        }
        let (left, node) = s.rsplit_once('@').ok_or_else(err)?;
        if !is_node_id(node) {
            return Err(err());
        }
        if left == LOCAL {
            return Ok(Address::Local(node.to_owned()));
        }
        if !is_session_id(left) {
            return Err(err());
        }
        Ok(Address::Session {
            session: left.to_owned(),
            node: node.to_owned(),
        })
    }

    /// Parses what a user typed, where `local` is this node's sessions and `collective` means
    /// `all`. Returns `Ok(None)` for a bare word that may name a session (a prefix or a display
    /// name), which only the store can resolve.
    pub fn parse_command(s: &str, this_node: &str) -> Result<Option<Address>, AddressError> {
        match s {
            LOCAL => Ok(Some(Address::Local(this_node.to_owned()))),
            ALL | COLLECTIVE => Ok(Some(Address::All)),
            _ if engineer_of(s).is_some() || s.contains('@') || is_agent_identity(s) => {
                Address::parse_line(s).map(Some)
            }
            _ if s.is_empty() || s.chars().count() > BY_CHARS => Err(AddressError(s.to_owned())),
            _ => Ok(None),
        }
    }

    /// Whether this is the engineer, with or without an email (LM: is_engineer, LM-82).
    pub fn is_engineer(&self) -> bool {
        matches!(self, Address::Engineer(_))
    }

    /// Whether this reaches several sessions, so the "running when sent" rule applies (G-LM-6).
    pub fn is_broadcast(&self) -> bool {
        matches!(self, Address::Local(_) | Address::All)
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Address::Local(node) => write!(f, "{LOCAL}@{node}"),
            Address::All => f.write_str(ALL),
            Address::Session { session, node } => write!(f, "{session}@{node}"),
            Address::Engineer(None) => f.write_str(ENGINEER),
            Address::Engineer(Some(email)) => write!(f, "{ENGINEER}:{email}"),
            Address::Agent(id) => f.write_str(id),
        }
    }
}

/// Reads the engineer forms: `None` when `s` is not one, `Some(Ok(None))` for `engineer`,
/// `Some(Ok(Some(email)))` for `engineer:<email>`, and `Some(Err(()))` for an unusable email.
fn engineer_of(s: &str) -> Option<Result<Option<String>, ()>> {
    if s == ENGINEER {
        return Some(Ok(None));
    }
    let email = s.strip_prefix("engineer:")?;
    let ok = !email.is_empty()
        && email.chars().count() < BY_CHARS - ENGINEER.len()
        && email
            .chars()
            .all(|c| c.is_ascii_graphic() && !matches!(c, '"' | '\\' | '<' | '>'));
    Some(if ok {
        Ok(Some(email.to_owned()))
    } else {
        Err(())
    })
}

/// Whether `s` is the sender `engineer` or `engineer:<email>` (LM: is_engineer).
pub fn is_engineer(s: &str) -> bool {
    matches!(engineer_of(s), Some(Ok(_)))
}

/// Whether `s` names an agent identity of another transport: `agent://…` (the gateway, wire §4.1)
/// or `share:<operator>/<agent>` (the git share).
pub fn is_agent_identity(s: &str) -> bool {
    (s.starts_with("agent://") || s.starts_with("share:"))
        && s.len() > 8
        && s.chars().all(|c| c.is_ascii_graphic())
}

/// Whether `s` can be a session id: it becomes a directory name under the store, so only
/// `[A-Za-z0-9._-]`, not starting with a dot, at most [`SESSION_ID_CHARS`] characters.
pub fn is_session_id(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= SESSION_ID_CHARS
        && !s.starts_with('.')
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// Whether `s` can be a node id: ASCII letters, digits, `-` and `_`, 1 to 64 characters (a
/// random hex id, or a transport's base64url member key).
pub fn is_node_id(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_'))
}

/// A node id as a label shows it: its first [`crate::consts::NODE_CHARS`] characters (LM:
/// short_node, LM-23). Every label of a node goes through here.
pub fn short_node(node: &str) -> &str {
    prefix(node, crate::consts::NODE_CHARS)
}

/// A session id as a label shows it for a sender that gave no name (LM: short_session).
pub fn short_session(session: &str) -> &str {
    prefix(session, crate::consts::SESSION_CHARS)
}

fn prefix(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// Where a message to an address goes: the form of the address picks its transport, in one
/// place for every front end (the CLI's `tell`/`ask`/`reply`, the MCP server's `send`).
///
/// - `agent://…`, `topic://…` and an `agt_` id go to the gateway (wire protocol §4.1);
/// - `share:<operator>/<agent>` (the agent may be `any`) goes to a git share;
/// - everything else is this machine's local log: `local`, `all`, `collective`,
///   `<session>@<node>`, `engineer`, `engineer:<email>`, or a session id prefix or display name,
///   which the store resolves.
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

/// An address that names no transport.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    /// Nothing was given.
    #[error("the address is empty")]
    Empty,
    /// `share:` without `<operator>/<agent>`.
    #[error("{0:?} is not a share address")]
    BadShare(String),
}

impl agentbus_protocol::errors::Catalogued for RouteError {
    fn code(&self) -> agentbus_protocol::Code {
        match self {
            RouteError::Empty => agentbus_protocol::Code::NoRecipient,
            RouteError::BadShare(_) => agentbus_protocol::Code::NotAShareAddress,
        }
    }
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
pub fn route(address: &str) -> Result<Route, RouteError> {
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
            _ => Err(RouteError::BadShare(a.to_owned())),
        };
    }
    if a.is_empty() {
        return Err(RouteError::Empty);
    }
    Ok(Route::Local(a.to_owned()))
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
        assert_eq!(route("  "), Err(RouteError::Empty));
    }
}
