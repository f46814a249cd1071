//! The inbox: leases, acks, the receiver's policy flags, "shown" receipts.

use serde::{Deserialize, Serialize};

use crate::EnvelopeMap;

/// `GET /v1/inbox`: leased copies. `E` is the envelope: a map for a reader, pre-rendered JSON
/// text for the gateway, which never parses a copy it hands out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Deliveries<E = EnvelopeMap> {
    /// The copies, in sequence order.
    pub deliveries: Vec<Delivery<E>>,
    /// The `after` of the next poll.
    pub next_after: u64,
}

/// One leased copy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Delivery<E = EnvelopeMap> {
    /// The inbox sequence.
    pub sequence: u64,
    /// The lease token an ack names.
    pub delivery: String,
    /// 1 for the first delivery, then one more per redelivery.
    pub attempt: u32,
    /// The delivered copy.
    pub envelope: E,
}

/// One ack: the copy's sequence and the lease token it was delivered under.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Ack {
    /// The inbox sequence.
    pub sequence: u64,
    /// The delivery token it was leased under.
    pub delivery: String,
}

/// `POST /v1/inbox/acks`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Acks {
    /// The acks (1 to 1000).
    pub acks: Vec<Ack>,
}

/// `POST /v1/inbox/{sequence}/ack`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct AckOne {
    /// The delivery token.
    pub delivery: String,
}

/// The outcome of one item of a batch (an ack, a receipt), by sequence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ItemResult {
    /// The inbox sequence.
    pub sequence: u64,
    /// `acked`, `already_acked`, `recorded`, `already_recorded`, `refused` or `error`.
    pub status: String,
    /// The `AB-` code of a refusal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
}

/// `POST /v1/inbox/acks` and `POST /v1/inbox/receipts`: per-item outcomes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ItemResults {
    /// One per item, in order.
    pub results: Vec<ItemResult>,
}

/// `GET /v1/inbox/policy`: the flags of the agent's workspace policy a receiver acts on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct InboxPolicy {
    /// The workspace's `ws_` id.
    pub workspace: String,
    /// Hold what does not verify (§5.8).
    pub require_verified_inbound: bool,
    /// Send read receipts (§5.8).
    pub read_receipts: bool,
}

/// `POST /v1/inbox/receipts`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ShownReceipts {
    /// The receipts (1 to 1000).
    pub receipts: Vec<ShownReceipt>,
}

/// A message shown in a session's context, named as it was delivered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ShownReceipt {
    /// The inbox sequence.
    pub sequence: u64,
    /// The message id.
    pub id: String,
    /// When it was shown (RFC 3339).
    pub shown_at: String,
    /// The harness that showed it.
    pub harness: String,
    /// The harness event.
    #[serde(default)]
    pub event: String,
    /// `shown` (the default) or `pushed`: sent to a client that may drop it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
}
