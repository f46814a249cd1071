//! Addresses (§4.1): `agent://tenant/workspace/name`, `topic://tenant/workspace/topic` and `agt_` ids.
//!
//! Slugs and names are 3–40 characters of lowercase ASCII letters, digits and `-`; topic names may
//! also contain `.`. The grammar leaves open whether a separator may lead or trail; we require a
//! letter or digit at both ends (checklist G-WP-34), so `---` and `-api` are refused.

use std::fmt;
use std::str::FromStr;

use crate::ids::{Id, IdKind};

/// The shortest slug or name.
pub const MIN_SLUG: usize = 3;
/// The longest slug or name.
pub const MAX_SLUG: usize = 40;

/// Where a message goes, or who sent it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Address {
    /// `agent://<tenant>/<workspace>/<name>`.
    Agent(AgentAddress),
    /// `topic://<tenant>/<workspace>/<topic>`.
    Topic(TopicAddress),
    /// An `agt_` id.
    AgentId(Id),
}

/// `agent://<tenant>/<workspace>/<name>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AgentAddress {
    /// The tenant's slug.
    pub tenant: String,
    /// The workspace's slug.
    pub workspace: String,
    /// The agent's name (or one of its aliases, when used as a destination).
    pub name: String,
}

/// `topic://<tenant>/<workspace>/<topic>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicAddress {
    /// The tenant's slug.
    pub tenant: String,
    /// The workspace's slug.
    pub workspace: String,
    /// The topic's name.
    pub topic: String,
}

/// Why a string is not an address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    /// Not one of the three forms.
    #[error(
        "{0:?} is not an address: use agent://<tenant>/<workspace>/<name>, topic://<tenant>/<workspace>/<topic> or an agt_ id"
    )]
    UnknownForm(String),
    /// The wrong number of path segments.
    #[error("{0:?} must have exactly three segments after the scheme: <tenant>/<workspace>/<name>")]
    Segments(String),
    /// A segment breaks the slug grammar.
    #[error(
        "{part} {value:?} must be 3-40 characters of a-z, 0-9 and '-'{dot}, starting and ending with a letter or digit"
    )]
    Slug {
        /// Which segment: tenant, workspace, name or topic.
        part: &'static str,
        /// The segment.
        value: String,
        /// Mentions '.' for topic names.
        dot: &'static str,
    },
    /// An `agt_…` string that is not a valid id.
    #[error("{0:?} is not a valid agt_ id")]
    BadAgentId(String),
}

impl AddressError {
    /// The catalogue code for address errors.
    pub fn code(&self) -> crate::Code {
        crate::Code::InvalidAddress
    }
}

/// Whether `s` is a tenant slug, workspace slug or agent name (§4.1).
pub fn is_slug(s: &str) -> bool {
    slug_ok(s, false)
}

/// Whether `s` is a topic name (§4.1).
pub fn is_topic_name(s: &str) -> bool {
    slug_ok(s, true)
}

fn slug_ok(s: &str, dots: bool) -> bool {
    let b = s.as_bytes();
    let inner_ok =
        |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-' || (dots && c == b'.');
    let end_ok = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    (MIN_SLUG..=MAX_SLUG).contains(&b.len())
        && b.iter().all(|&c| inner_ok(c))
        && end_ok(b[0])
        && end_ok(b[b.len() - 1])
}

fn three_segments(rest: &str, whole: &str) -> Result<[String; 3], AddressError> {
    let parts: Vec<&str> = rest.split('/').collect();
    match parts.as_slice() {
        [a, b, c] => Ok([(*a).to_owned(), (*b).to_owned(), (*c).to_owned()]),
        _ => Err(AddressError::Segments(whole.to_owned())),
    }
}

fn check(part: &'static str, value: &str, dots: bool) -> Result<(), AddressError> {
    if slug_ok(value, dots) {
        Ok(())
    } else {
        Err(AddressError::Slug {
            part,
            value: value.to_owned(),
            dot: if dots { ", '.'" } else { "" },
        })
    }
}

impl FromStr for AgentAddress {
    type Err = AddressError;

    fn from_str(s: &str) -> Result<Self, AddressError> {
        let rest = s
            .strip_prefix("agent://")
            .ok_or_else(|| AddressError::UnknownForm(s.to_owned()))?;
        let [tenant, workspace, name] = three_segments(rest, s)?;
        check("tenant", &tenant, false)?;
        check("workspace", &workspace, false)?;
        check("name", &name, false)?;
        Ok(AgentAddress {
            tenant,
            workspace,
            name,
        })
    }
}

impl FromStr for TopicAddress {
    type Err = AddressError;

    fn from_str(s: &str) -> Result<Self, AddressError> {
        let rest = s
            .strip_prefix("topic://")
            .ok_or_else(|| AddressError::UnknownForm(s.to_owned()))?;
        let [tenant, workspace, topic] = three_segments(rest, s)?;
        check("tenant", &tenant, false)?;
        check("workspace", &workspace, false)?;
        check("topic", &topic, true)?;
        Ok(TopicAddress {
            tenant,
            workspace,
            topic,
        })
    }
}

impl FromStr for Address {
    type Err = AddressError;

    fn from_str(s: &str) -> Result<Self, AddressError> {
        if s.starts_with("agent://") {
            s.parse().map(Address::Agent)
        } else if s.starts_with("topic://") {
            s.parse().map(Address::Topic)
        } else if s.starts_with("agt_") {
            Id::parse_kind(s, IdKind::Agent)
                .map(Address::AgentId)
                .map_err(|_| AddressError::BadAgentId(s.to_owned()))
        } else {
            Err(AddressError::UnknownForm(s.to_owned()))
        }
    }
}

impl fmt::Display for AgentAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "agent://{}/{}/{}",
            self.tenant, self.workspace, self.name
        )
    }
}

impl fmt::Display for TopicAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "topic://{}/{}/{}",
            self.tenant, self.workspace, self.topic
        )
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Address::Agent(a) => a.fmt(f),
            Address::Topic(t) => t.fmt(f),
            Address::AgentId(id) => id.fmt(f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        for s in [
            "agent://acme/backend/release-bot",
            "topic://acme/backend/deploys.prod",
            "agt_01J9ZK6Q8R2M3N4P5Q6R7S8T9V",
            "agent://system/gateway/router",
        ] {
            let a: Address = s.parse().expect(s);
            assert_eq!(a.to_string(), s);
        }
    }

    #[test]
    fn enforces_the_grammar_limits() {
        let forty = "a".repeat(40);
        let forty_one = "a".repeat(41);
        assert!(
            format!("agent://{forty}/abc/abc")
                .parse::<Address>()
                .is_ok()
        );
        assert!(
            format!("agent://{forty_one}/abc/abc")
                .parse::<Address>()
                .is_err()
        );
        for bad in [
            "agent://ab/backend/reviewer",
            "agent://acme/backend/re_viewer",
            "agent://acme/backend/Reviewer",
            "agent://acme/backend/rev.iewer",
            "agent://acme/backend",
            "agent://acme/backend/reviewer/extra",
            "agent://acme/backend/-reviewer",
            "agent://acme/backend/---",
            "topic://acme/backend/deploys_prod",
            "topic://acme/backend/.deploys",
            "mailto:x",
            "agt_nope",
            "agent://acme/backend/réviewer",
        ] {
            assert!(bad.parse::<Address>().is_err(), "{bad}");
        }
    }
}
