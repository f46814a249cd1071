//! Short addresses: a bare name (`reviewer`) for `agent://<tenant>/<workspace>/reviewer` of the
//! profile's workspace, read against the directory the agent sees. Only the gateway verbs read
//! bare names this way; the local verbs (`tell`, `ask`) read them as session names first
//! (`docs/cli.md`, "Short addresses").

use agentbus_api::Card;
use agentbus_protocol::Code;
use agentbus_protocol::errors::Catalogued;

/// Why a bare name stands for no agent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShortNameError {
    /// No agent of the workspace has the name or alias; `elsewhere` are the addresses of the
    /// agents of that name in other workspaces of the directory.
    #[error("{}", unknown_line(.name, .workspace, .elsewhere))]
    Unknown {
        /// The name given.
        name: String,
        /// The profile's workspace, `agent://<tenant>/<workspace>`.
        workspace: String,
        /// Agents of that name outside the workspace.
        elsewhere: Vec<String>,
    },
    /// Several agents answer to the name.
    #[error("{name:?} names several agents: {}", .addresses.join(", "))]
    Ambiguous {
        /// The name given.
        name: String,
        /// Their addresses.
        addresses: Vec<String>,
    },
}

fn unknown_line(name: &str, workspace: &str, elsewhere: &[String]) -> String {
    let mut line = format!("no agent named {name:?} in {workspace}");
    if !elsewhere.is_empty() {
        line.push_str(&format!(
            " (outside it: {}; a short name stays in its workspace)",
            elsewhere.join(", ")
        ));
    }
    line
}

impl Catalogued for ShortNameError {
    fn code(&self) -> Code {
        match self {
            ShortNameError::Unknown { .. } => Code::UnknownShortName,
            ShortNameError::Ambiguous { .. } => Code::AmbiguousShortName,
        }
    }
}

/// Whether `to` is a bare name: no scheme, not an `agt_` id, only the characters of an agent
/// name. Anything else is passed on as written (and refused there if it is no address).
pub fn is_bare_name(to: &str) -> bool {
    !to.is_empty()
        && !to.starts_with("agt_")
        && to.len() <= 128
        && to
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// The workspace part of an agent address: `agent://acme/backend` of `agent://acme/backend/x`.
pub fn workspace_of(address: &str) -> &str {
    address.rsplit_once('/').map_or(address, |(ws, _)| ws)
}

/// The address a bare `name` stands for, seen from the agent at `own` (its address) with
/// `cards` the directory it sees: the one card whose name or alias is `name`, when it is in
/// `own`'s workspace.
pub fn expand(name: &str, own: &str, cards: &[Card]) -> Result<String, ShortNameError> {
    let workspace = workspace_of(own);
    let answering: Vec<&Card> = cards
        .iter()
        .filter(|c| c.name == name || c.aliases.iter().any(|a| a == name))
        .collect();
    match answering.as_slice() {
        [one] if workspace_of(&one.address) == workspace => Ok(one.address.clone()),
        [] | [_] => Err(ShortNameError::Unknown {
            name: name.to_owned(),
            workspace: workspace.to_owned(),
            elsewhere: answering.iter().map(|c| c.address.clone()).collect(),
        }),
        many => Err(ShortNameError::Ambiguous {
            name: name.to_owned(),
            addresses: many.iter().map(|c| c.address.clone()).collect(),
        }),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn card(address: &str, aliases: &[&str]) -> Card {
        let name = address.rsplit('/').next().unwrap();
        serde_json::from_value(serde_json::json!({
            "id": "agt_1", "address": address, "name": name, "display_name": name,
            "description": "", "aliases": aliases, "harness": {}, "owner": null,
            "visibility": "workspace", "capabilities": [], "pricing": {}, "status": {},
            "tags": [], "created_at": "2026-01-01T00:00:00Z",
            "updated_at": "2026-01-01T00:00:00Z", "deleted": false, "suspended": false,
            "suspended_at": null, "keys": []
        }))
        .unwrap()
    }

    const OWN: &str = "agent://acme/backend/bot";

    #[test]
    fn a_bare_name_is_the_one_agent_of_the_workspace_that_answers_to_it() {
        let cards = [
            card("agent://acme/backend/reviewer", &[]),
            card("agent://acme/backend/lint", &["linter"]),
        ];
        assert_eq!(
            expand("reviewer", OWN, &cards).unwrap(),
            "agent://acme/backend/reviewer"
        );
        assert_eq!(
            expand("linter", OWN, &cards).unwrap(),
            "agent://acme/backend/lint"
        );
    }

    #[test]
    fn an_unknown_ambiguous_or_foreign_name_is_refused_with_its_code() {
        let cards = [
            card("agent://acme/backend/reviewer", &[]),
            card("agent://acme/frontend/reviewer", &[]),
            card("agent://acme/frontend/designer", &[]),
        ];
        let e = expand("reviewer", OWN, &cards).unwrap_err();
        assert_eq!(e.code(), Code::AmbiguousShortName);
        assert_eq!(
            e.to_string(),
            "\"reviewer\" names several agents: agent://acme/backend/reviewer, agent://acme/frontend/reviewer"
        );
        let e = expand("nobody", OWN, &cards).unwrap_err();
        assert_eq!(e.code(), Code::UnknownShortName);
        assert_eq!(
            e.to_string(),
            "no agent named \"nobody\" in agent://acme/backend"
        );
        let e = expand("designer", OWN, &cards).unwrap_err();
        assert_eq!(e.code(), Code::UnknownShortName);
        assert_eq!(
            e.to_string(),
            "no agent named \"designer\" in agent://acme/backend (outside it: agent://acme/frontend/designer; a short name stays in its workspace)"
        );
    }

    #[test]
    fn only_a_bare_name_is_expanded() {
        for bare in ["reviewer", "code-bot", "a.b_c"] {
            assert!(is_bare_name(bare), "{bare}");
        }
        for full in [
            "agent://acme/backend/reviewer",
            "topic://acme/backend/builds",
            "agt_01J9",
            "",
            "two words",
        ] {
            assert!(!is_bare_name(full), "{full}");
        }
    }
}
