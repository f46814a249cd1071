//! The routes people are administered by: users (list, remove) and their integration tokens
//! (issue, list, revoke). A token's secret is in the answer that issues it and nowhere else.

use serde::{Deserialize, Serialize};

/// A user (each of `GET /v1/users`, `DELETE /v1/users/{id}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct User {
    /// Its `usr_` id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// `operator`, `tenant_admin`, `admin` or `member`.
    pub role: String,
    /// Its tenant's slug; `null` for the gateway operator, who belongs to no tenant.
    pub tenant: Option<String>,
    /// Its workspace's slug; `null` for the gateway operator.
    pub workspace: Option<String>,
    /// When it was created.
    pub created_at: String,
}

/// `GET /v1/users`: the users the caller administers, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Users {
    /// The users.
    pub users: Vec<User>,
}

/// `POST /v1/tokens` `{user?, label?}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct NewToken {
    /// The `usr_` id of the user it authenticates (the caller when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// What the token is for (1-100 characters), shown in lists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

/// An integration token as listed: never its secret.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TokenInfo {
    /// Its `tok_` id (derived from its hash; it opens nothing).
    pub id: String,
    /// The `usr_` id of the user it authenticates.
    pub user: String,
    /// That user's name.
    pub user_name: String,
    /// That user's role.
    pub role: String,
    /// Its label, if it was given one.
    pub label: Option<String>,
    /// When it was issued.
    pub created_at: String,
    /// When it was revoked; `null` while it works.
    pub revoked_at: Option<String>,
}

/// `POST /v1/tokens`: the token just issued, with its secret (shown once).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct IssuedToken {
    /// The token.
    #[serde(flatten)]
    pub info: TokenInfo,
    /// Its bearer secret (`abu_…`), in this answer only.
    pub token: String,
}

/// `GET /v1/tokens`: the tokens of the users the caller administers, revoked ones included,
/// oldest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TokenList {
    /// The tokens.
    pub tokens: Vec<TokenInfo>,
}
