//! Publishing, and what a sender reads about its messages: delivery states, sent messages.

use serde::{Deserialize, Serialize};

use crate::AgentRef;

/// `POST /v1/messages`: the receipt of a stored message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Receipt {
    /// The `rcp_` receipt id.
    pub receipt: String,
    /// The message's id.
    pub id: String,
    /// `persisted`.
    pub state: String,
    /// The W3C trace id of its `traceparent`.
    pub trace_id: String,
    /// The task the message opened or belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// The task's state after a lifecycle message (not on a replay).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_state: Option<String>,
    /// Whether the lifecycle message came after the task ended (§6.3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub late: Option<bool>,
    /// Whether the state machine ignored it (§6.3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignored: Option<bool>,
}

/// `GET /v1/messages/{id}/delivery`: how far a sent message got with each recipient.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct DeliveryStates {
    /// The message's id.
    pub id: String,
    /// Its type.
    #[serde(rename = "type")]
    pub kind: String,
    /// Its conversation.
    pub conversation_id: String,
    /// Its destination, as sent.
    pub to: String,
    /// The task it belongs to.
    pub task_id: Option<String>,
    /// When the gateway stored it.
    pub persisted_at: String,
    /// The recipients the sender may see.
    pub recipients: Vec<RecipientState>,
    /// How many recipients are only counted (a topic's subscribers the sender may not see).
    pub hidden_recipients: u64,
}

/// One recipient's copy of a sent message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RecipientState {
    /// The recipient.
    pub agent: AgentRef,
    /// The copy's inbox sequence.
    pub sequence: u64,
    /// The furthest state reached: `persisted`, `leased`, `acknowledged`, `pushed`, `shown`,
    /// `answered`, `dead_lettered` or `expired`.
    pub state: String,
    /// When it was stored.
    pub persisted_at: String,
    /// When it was last leased.
    pub leased_at: Option<String>,
    /// Deliveries so far.
    pub attempts: u64,
    /// When the recipient's sidecar acknowledged it.
    pub acknowledged_at: Option<String>,
    /// When a session was shown it.
    pub shown: Option<Shown>,
    /// When it was pushed to a client that may drop it.
    pub pushed: Option<Shown>,
    /// The recipient's read receipt.
    pub read_receipt: Option<Answer>,
    /// The recipient's answer.
    pub answered: Option<Answer>,
}

/// Where and when a copy was shown (or pushed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Shown {
    /// When.
    pub at: String,
    /// The harness.
    pub harness: String,
    /// The harness event.
    pub event: String,
}

/// A message that answered (or acknowledged) a sent one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Answer {
    /// Its id.
    pub id: String,
    /// Its type.
    #[serde(rename = "type")]
    pub kind: String,
    /// When it arrived.
    pub at: String,
}

/// `GET /v1/messages/sent`: the caller's sent messages, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SentMessages {
    /// The messages with their delivery states.
    pub messages: Vec<DeliveryStates>,
    /// The cursor of the next page (`before`), when there may be one.
    pub next: Option<String>,
}
