//! The gateway's HTTP API bodies (`docs/api.md`, `openapi.json`) as serde types: the gateway
//! serialises them, its clients (the client crate, the CLI, the MCP server, the worker) read them.
//!
//! Field names, their order and which absent fields are written as `null` or left out are exactly
//! what the gateway has always answered: an `Option` written as `null` has no
//! `skip_serializing_if`; one left out has. With the `schema` feature every type also derives its
//! JSON Schema, which the gateway's tests compare with `openapi.json`.
//!
//! Open documents (a card's `harness` and `status`, policy documents, envelopes, A2A cards) stay
//! [`serde_json::Value`]s or maps: their shapes belong to the protocol or to the agents writing
//! them, not to this API.

pub mod admin;
pub mod blobs;
pub mod identity;
pub mod inbox;
pub mod messages;
pub mod meta;
pub mod people;
pub mod search;
pub mod tasks;
pub mod usage;

pub use admin::*;
pub use blobs::*;
pub use identity::*;
pub use inbox::*;
pub use messages::*;
pub use meta::*;
pub use people::*;
pub use search::*;
pub use tasks::*;
pub use usage::*;

/// An envelope as a JSON object, its attributes in the order they were written.
pub type EnvelopeMap = serde_json::Map<String, serde_json::Value>;

/// An agent named by id and address (`null` once the agent is gone).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct AgentRef {
    /// Its `agt_` id.
    pub id: String,
    /// Its `agent://` address; `null` for an agent deleted since.
    pub address: Option<String>,
}

/// A workspace named by id and slug.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct WorkspaceRef {
    /// Its `ws_` id.
    pub id: String,
    /// Its slug.
    pub slug: String,
}

/// The JSON Schema (2020-12) of `T`, definitions under `$defs`: what the OpenAPI document's
/// schema of the body must describe.
#[cfg(feature = "schema")]
pub fn schema<T: schemars::JsonSchema>() -> serde_json::Value {
    serde_json::Value::from(schemars::schema_for!(T))
}
