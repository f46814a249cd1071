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
    /// imported message, delivered to the sessions bound to it (see `docs/local.md`, import API).
    Agent(String),
}

/// An address that cannot be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0:?} is not an address: use local, all, engineer[:<email>], <session>@<node>, or a session id prefix"
)]
pub struct AddressError(pub String);

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
