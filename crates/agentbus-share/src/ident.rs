//! Identifiers and share addresses.
//!
//! §2: operator, instance and agent are lowercase and stable. We take the README's kebab-case
//! form for all of them, and for topics, threads and slugs (§3, §6): `[a-z0-9]` runs joined by
//! single `-`, at most 64 characters. The form keeps every path segment filesystem-safe and keeps
//! YAML from typing the value (G-AS-14), so the writer can emit them unquoted.

use std::fmt;
use std::str::FromStr;

use crate::error::ShareError;

/// The longest identifier we accept.
pub const MAX_IDENT: usize = 64;

/// Words YAML 1.1 loaders type as booleans or null; an identifier equal to one is refused so an
/// unquoted emission can never change type (G-AS-14).
const YAML_WORDS: &[&str] = &["y", "n", "yes", "no", "on", "off", "true", "false", "null"];

/// Why `s` is not a kebab-case identifier, or `None` when it is one.
pub fn ident_problem(s: &str) -> Option<&'static str> {
    if s.is_empty() {
        return Some("it is empty");
    }
    if s.len() > MAX_IDENT {
        return Some("it is longer than 64 characters");
    }
    if !s
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return Some("use lowercase letters, digits and '-' only");
    }
    if s.starts_with('-') || s.ends_with('-') || s.contains("--") {
        return Some("'-' must join two parts");
    }
    if !s.bytes().any(|b| b.is_ascii_lowercase()) {
        return Some("it needs at least one letter");
    }
    if YAML_WORDS.contains(&s) {
        return Some("YAML would read it as a boolean or null");
    }
    None
}

/// Checks an identifier, naming it `what` in the error.
pub fn check_ident(what: &'static str, s: &str) -> Result<(), ShareError> {
    match ident_problem(s) {
        None => Ok(()),
        Some(why) => Err(ShareError::BadIdent {
            what,
            value: s.to_owned(),
            why,
        }),
    }
}

/// Normalises free text into a short kebab-case slug (§3 `<slug>`): lower case, every run of other
/// characters becomes one `-`, at most 40 characters, `msg` when nothing is left. The slug is
/// informative only (§3.1): nothing ever parses it back.
pub fn slugify(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        if c.is_ascii_alphanumeric() {
            if out.len() >= 40 {
                break;
            }
            out.push(c.to_ascii_lowercase());
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
    }
    while out.ends_with('-') {
        out.pop();
    }
    if ident_problem(&out).is_some() {
        // Digits only, a YAML word or nothing at all: keep it readable and valid.
        if out.is_empty() {
            return "msg".to_owned();
        }
        out = format!("msg-{out}");
    }
    out
}

/// The agent name that addresses "whichever agent the receiving operator routes to" (§3).
pub const ANY: &str = "any";

/// A share address, `share:<operator>/<agent>` (the form the rest of AgentBus routes on; the
/// agent may be `any`, §3). The prefix is ours, not the protocol's: inside the share, folders and
/// frontmatter carry operator and agent separately.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ShareAddress {
    /// The operator (a person or organisation).
    pub operator: String,
    /// The agent, or `any`.
    pub agent: String,
}

impl ShareAddress {
    /// The scheme prefix.
    pub const PREFIX: &'static str = "share:";

    /// An address from its parts, checking both.
    pub fn new(operator: &str, agent: &str) -> Result<ShareAddress, ShareError> {
        check_ident("operator", operator)?;
        check_ident("agent", agent)?;
        Ok(ShareAddress {
            operator: operator.to_owned(),
            agent: agent.to_owned(),
        })
    }

    /// Parses `share:<operator>/<agent>`; with `lenient_prefix`, `<operator>/<agent>` alone is
    /// accepted too (what a user types after `--to`).
    pub fn parse_with(s: &str, lenient_prefix: bool) -> Result<ShareAddress, ShareError> {
        let rest = match s.strip_prefix(Self::PREFIX) {
            Some(rest) => rest,
            None if lenient_prefix => s,
            None => return Err(ShareError::BadAddress(s.to_owned())),
        };
        let (op, agent) = rest
            .split_once('/')
            .ok_or_else(|| ShareError::BadAddress(s.to_owned()))?;
        ShareAddress::new(op, agent).map_err(|_| ShareError::BadAddress(s.to_owned()))
    }

    /// Whether the agent part is `any`.
    pub fn is_any(&self) -> bool {
        self.agent == ANY
    }

    /// `<operator>/<agent>`, the audit log's `to` form (§7).
    pub fn short(&self) -> String {
        format!("{}/{}", self.operator, self.agent)
    }
}

impl FromStr for ShareAddress {
    type Err = ShareError;

    /// Parses the strict form, `share:<operator>/<agent>`.
    fn from_str(s: &str) -> Result<ShareAddress, ShareError> {
        ShareAddress::parse_with(s, false)
    }
}

impl fmt::Display for ShareAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}/{}", Self::PREFIX, self.operator, self.agent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idents() {
        for ok in ["balazs", "claude-fleet", "agent-2", "any"] {
            assert_eq!(ident_problem(ok), None, "{ok}");
        }
        for bad in [
            "", "Balazs", "a_b", "-a", "a-", "a--b", "123", "no", "a b", "á",
        ] {
            assert!(ident_problem(bad).is_some(), "{bad}");
        }
    }

    #[test]
    fn slugs() {
        assert_eq!(slugify("Hello World!"), "hello-world");
        assert_eq!(slugify("  "), "msg");
        assert_eq!(slugify("2026"), "msg-2026");
        assert_eq!(slugify("yes"), "msg-yes");
    }

    #[test]
    fn addresses() {
        let a: ShareAddress = "share:acme/reviewer".parse().unwrap();
        assert_eq!(a.to_string(), "share:acme/reviewer");
        assert!("acme/reviewer".parse::<ShareAddress>().is_err());
        assert!(ShareAddress::parse_with("acme/any", true).unwrap().is_any());
        assert!("share:Acme/x".parse::<ShareAddress>().is_err());
        assert!("share:acme".parse::<ShareAddress>().is_err());
    }
}
