//! Agents, their cards and keys, topics and conversations.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::{EnvelopeMap, WorkspaceRef};

/// An agent's card with its keys (`GET /v1/agents/{id}`, §10).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Card {
    /// Its `agt_` id.
    pub id: String,
    /// Its `agent://` address.
    pub address: String,
    /// Its name, unique in its workspace.
    pub name: String,
    /// The name shown (the name when none was set).
    pub display_name: String,
    /// What it does.
    pub description: String,
    /// Other names it answers to.
    pub aliases: Vec<String>,
    /// The harness it runs in, as it reports.
    pub harness: Map<String, Value>,
    /// The `usr_` id of its owner.
    pub owner: Option<String>,
    /// `private`, `workspace`, `tenant` or `public`.
    pub visibility: String,
    /// The capabilities it declares (§10), each a contract requests are checked against.
    pub capabilities: Vec<Value>,
    /// `{"model": "free"}` in v1.
    pub pricing: Value,
    /// What it reports about itself, with the gateway's `queue_depth`, `presence` and
    /// `last_heartbeat_at`.
    pub status: Map<String, Value>,
    /// Its tags.
    pub tags: Vec<Value>,
    /// When it was registered.
    pub created_at: String,
    /// When its card last changed.
    pub updated_at: String,
    /// Whether it was deleted.
    pub deleted: bool,
    /// Whether it is suspended.
    pub suspended: bool,
    /// Since when.
    pub suspended_at: Option<String>,
    /// Its keys, revoked ones included.
    pub keys: Vec<Key>,
}

impl Card {
    /// The card's `status.presence` (`online`, `idle`, `offline`), when reported.
    pub fn presence(&self) -> Option<&str> {
        self.status.get("presence").and_then(Value::as_str)
    }
}

/// A public key of an agent (`POST /v1/agents/{id}/keys`, and each of a card's `keys`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Key {
    /// Its `key_` id.
    pub id: String,
    /// The Ed25519 public key, base64url.
    pub public_key: String,
    /// When it was registered.
    pub created_at: String,
    /// When it stops verifying.
    pub expires_at: String,
    /// When it was revoked.
    pub revoked_at: Option<String>,
}

/// `POST /v1/agents` and `PATCH /v1/agents/{id}`: card fields (all optional on a patch).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CardInput {
    /// Its name (registration only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Its first public key, base64url (registration only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_key: Option<String>,
    /// The workspace (slug) to register in, for an admin of it (registration only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    /// The name shown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    /// What it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Other names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aliases: Option<Vec<String>>,
    /// The harness it runs in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub harness: Option<Map<String, Value>>,
    /// `private`, `workspace`, `tenant` or `public`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub visibility: Option<String>,
    /// Capability declarations (§10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Vec<Value>>,
    /// `{"model": "free"}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pricing: Option<Value>,
    /// What it reports about itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Map<String, Value>>,
    /// Its tags.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<Vec<Value>>,
}

/// `POST /v1/agents`: the new agent's card, its credential (shown once) and, when a key was
/// given, that key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RegisteredAgent {
    /// The card.
    pub agent: Card,
    /// The agent's bearer token (`aba_…`).
    pub token: String,
    /// The key registered with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<Key>,
}

/// `GET /v1/agents`: the directory the caller may see.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Agents {
    /// The cards.
    pub agents: Vec<Card>,
}

/// `POST /v1/agents/{id}/keys`: `{public_key, expires_at?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct NewKey {
    /// The Ed25519 public key, base64url (32 bytes).
    pub public_key: String,
    /// When it stops verifying (RFC 3339); the gateway's default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
}

/// `POST /v1/agents/{id}/keys/{key_id}/revoke`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RevokedKey {
    /// The `key_` id.
    pub id: String,
    /// When it was revoked.
    pub revoked_at: String,
}

/// `PUT` and `DELETE /v1/topics/{name}/subscription`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Subscription {
    /// The `topic://` address.
    pub topic: String,
    /// Whether the caller is now subscribed.
    pub subscribed: bool,
}

/// `GET /v1/topics`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Topics {
    /// The topics.
    pub topics: Vec<Topic>,
}

/// One topic; an admin also gets its workspace and who subscribes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Topic {
    /// Its name.
    pub name: String,
    /// How many agents subscribe.
    pub subscribers: u64,
    /// Its workspace (admins only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<WorkspaceRef>,
    /// The `agt_` ids subscribed (admins only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subscriber_ids: Option<Vec<String>>,
}

/// `GET /v1/conversations/{id}`: the messages of a conversation the caller may read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Conversation {
    /// The `cnv_` id.
    pub conversation_id: String,
    /// The envelopes, oldest first.
    pub envelopes: Vec<EnvelopeMap>,
}

/// `GET /v1/conversations`: the caller's conversations, most recently active first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Conversations {
    /// The conversations.
    pub conversations: Vec<ConversationSummary>,
    /// The cursor of the next page (`before`), when there may be one.
    pub next: Option<String>,
}

/// One conversation of a list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ConversationSummary {
    /// The `cnv_` id.
    pub conversation_id: String,
    /// How many messages the caller may read in it.
    pub messages: u64,
    /// When the first arrived.
    pub first_received_at: String,
    /// When the last arrived.
    pub last_received_at: String,
    /// The last message.
    pub last: LastMessage,
}

/// The last message of a conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct LastMessage {
    /// Its `msg_` id.
    pub id: String,
    /// Its type.
    #[serde(rename = "type")]
    pub kind: String,
    /// Its sender.
    pub source: String,
    /// Its destination.
    pub to: String,
    /// Its subject, as sent.
    pub subject: Option<Value>,
}
