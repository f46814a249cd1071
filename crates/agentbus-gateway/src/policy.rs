//! Workspace routing policy (§4.2): the document, its published JSON Schema, and how a publish is
//! decided.
//!
//! A policy is validated against [`SCHEMA_TEXT`] (served at `/schemas/gateway/policy/v1.json`)
//! before it is stored, so nothing it says is ignored. Evaluation: the first rule whose `from`
//! matches the sender's canonical address and whose `to` matches the recipient's canonical address
//! decides; otherwise `default` does, and when the document states no `default` the schema's
//! `default` keyword does (read from the schema itself, so it is written in one place).

use std::sync::OnceLock;

use serde::Deserialize;
use serde_json::Value;

use agentbus_protocol::Code;
use agentbus_protocol::envelope::Violation;

/// The schema's path under `/schemas/`.
pub const SCHEMA_PATH: &str = "gateway/policy/v1.json";

/// The policy document's JSON Schema (draft 2020-12).
pub const SCHEMA_TEXT: &str = include_str!("../schemas/gateway/policy/v1.json");

/// The policy a new workspace starts with: messages flow until an admin says otherwise.
pub const NEW_WORKSPACE_POLICY: &str = "{\"default\":\"allow\"}";

/// What a rule, or the default, does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Effect {
    /// The message is routed.
    Allow,
    /// The message is refused with AB-2001.
    Deny,
}

/// An address pattern: `*` alone matches everything; elsewhere `*` matches any run of characters
/// other than `/`, so it never reaches across a tenant, workspace or name.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Pattern(String);

impl Pattern {
    /// Whether the canonical `address` matches.
    pub fn matches(&self, address: &str) -> bool {
        self.0 == "*" || glob_matches(&self.0, address)
    }
}

/// Whether `address` matches `pattern`, where `*` matches any run (also empty) of characters other
/// than `/` and every other character matches itself.
pub fn glob_matches(pattern: &str, address: &str) -> bool {
    let (p, a) = (pattern.as_bytes(), address.as_bytes());
    let (mut i, mut j) = (0, 0);
    // The latest `*` seen and where in the address its run started: on a mismatch the run
    // grows by one character, unless that character is `/`, which no `*` covers.
    let mut star: Option<(usize, usize)> = None;
    while j < a.len() {
        if i < p.len() && p[i] == b'*' {
            star = Some((i, j));
            i += 1;
        } else if i < p.len() && p[i] == a[j] {
            i += 1;
            j += 1;
        } else if let Some((si, sj)) = star
            && a[sj] != b'/'
        {
            star = Some((si, sj + 1));
            i = si + 1;
            j = sj + 1;
        } else {
            return false;
        }
    }
    p[i..].iter().all(|&c| c == b'*')
}

/// One rule.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// The sender's canonical address.
    pub from: Pattern,
    /// The recipient's canonical address.
    pub to: Pattern,
    /// What a match does.
    pub effect: Effect,
    /// A note for people.
    #[serde(default)]
    pub description: Option<String>,
}

/// A validated policy.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// What happens when no rule matches.
    #[serde(default = "unstated_default")]
    pub default: Effect,
    /// Rules, first match wins.
    #[serde(default)]
    pub rules: Vec<Rule>,
    /// §13.1: sidecars of this workspace's agents refuse to inject what does not re-verify.
    #[serde(default)]
    pub require_verified_inbound: bool,
    /// §5.8: messages shown to this workspace's agents are acknowledged with a read receipt.
    #[serde(default)]
    pub read_receipts: bool,
}

impl Policy {
    /// The effect for a publish from `from` to `to`, both canonical addresses.
    pub fn decide(&self, from: &str, to: &str) -> Effect {
        self.rules
            .iter()
            .find(|r| r.from.matches(from) && r.to.matches(to))
            .map_or(self.default, |r| r.effect)
    }

    /// A stored policy. One that does not read (stored before documents were validated, or
    /// damaged) denies everything: a policy never fails open.
    pub fn from_stored(text: &str) -> Policy {
        match serde_json::from_str::<Value>(text)
            .ok()
            .and_then(|v| check(&v).ok())
        {
            Some(p) => p,
            None => {
                tracing::warn!(policy = %text, "a stored workspace policy does not validate; denying every publish to it");
                Policy {
                    default: Effect::Deny,
                    rules: Vec::new(),
                    require_verified_inbound: true,
                    read_receipts: false,
                }
            }
        }
    }
}

fn schema_value() -> &'static Value {
    static SCHEMA: OnceLock<Value> = OnceLock::new();
    // The file is part of this crate and a test compiles it, so a failure is a build defect.
    SCHEMA.get_or_init(|| serde_json::from_str(SCHEMA_TEXT).unwrap_or(Value::Bool(false)))
}

fn validator() -> Option<&'static jsonschema::Validator> {
    static VALIDATOR: OnceLock<Option<jsonschema::Validator>> = OnceLock::new();
    VALIDATOR
        .get_or_init(|| {
            jsonschema::draft202012::options()
                .build(schema_value())
                .ok()
        })
        .as_ref()
}

/// The effect when a document states no `default`: the schema's `default` keyword for it.
pub fn unstated_default() -> Effect {
    match schema_value()["properties"]["default"]["default"].as_str() {
        Some("allow") => Effect::Allow,
        _ => Effect::Deny,
    }
}

/// Checks a policy document against the schema: the policy, or every violation (AB-3026) with its
/// JSON Pointer.
pub fn check(doc: &Value) -> Result<Policy, Vec<Violation>> {
    let Some(v) = validator() else {
        return Err(vec![violation("", "the policy schema did not compile")]);
    };
    let violations: Vec<Violation> = v
        .iter_errors(doc)
        .map(|e| violation(&e.instance_path().to_string(), &e.to_string()))
        .collect();
    if !violations.is_empty() {
        return Err(violations);
    }
    Policy::deserialize(doc).map_err(|e| vec![violation("", &e.to_string())])
}

fn violation(path: &str, message: &str) -> Violation {
    Violation {
        code: Code::InvalidPolicy,
        path: path.to_owned(),
        message: message.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_schema_compiles_and_names_its_path() {
        assert!(validator().is_some());
        assert_eq!(
            schema_value()["$id"],
            json!(format!(
                "{}{SCHEMA_PATH}",
                agentbus_protocol::schema::REGISTRY_BASE
            ))
        );
    }

    #[test]
    fn a_new_workspace_policy_validates() {
        let p = check(&serde_json::from_str(NEW_WORKSPACE_POLICY).unwrap()).unwrap();
        assert_eq!(p.decide("agent://a/b/c", "agent://a/b/d"), Effect::Allow);
    }

    #[test]
    fn an_unreadable_stored_policy_denies() {
        for stored in ["{\"rules\": [{\"from\": 5}]}", "not json", "[]"] {
            let p = Policy::from_stored(stored);
            assert_eq!(p.decide("agent://a/b/c", "agent://a/b/d"), Effect::Deny);
        }
    }
}
