//! What an operator's view shows about messages it may already read: how far each copy's
//! delivery got, and whether a stored envelope still verifies. These take rows a scoped read
//! returned (`identity::conversation_rows`, `tasks::messages_of`); they look nothing up by an id a
//! caller chose.

use std::collections::HashMap;

use serde_json::{Map, Value};

use agentbus_protocol::signing::{PublicKey, envelope_sig, verify_envelope};
use agentbus_store::*;

use crate::error::ApiResult;
use crate::state::App;

/// How far one copy of a message got (§5.8's states as the gateway knows them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyProgress {
    /// Stored in the recipient's inbox, not yet handed out.
    Persisted,
    /// Handed to the recipient's sidecar, not yet acknowledged.
    Leased,
    /// Acknowledged by the recipient's sidecar: durably in its local inbox.
    Delivered,
    /// Given up after the maximum attempts.
    DeadLettered,
    /// Not delivered before the message expired.
    Expired,
}

impl CopyProgress {
    /// The state's name.
    pub fn as_str(self) -> &'static str {
        match self {
            CopyProgress::Persisted => "persisted",
            CopyProgress::Leased => "leased",
            CopyProgress::Delivered => "delivered",
            CopyProgress::DeadLettered => "dead_lettered",
            CopyProgress::Expired => "expired",
        }
    }
}

/// One recipient's copy of a message and its delivery states.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecipientState {
    /// The recipient.
    pub agent_id: String,
    /// Its inbox sequence.
    pub sequence: u64,
    /// How far the copy got.
    pub progress: CopyProgress,
    /// Deliveries so far.
    pub attempts: u32,
    /// The last delivery.
    pub last_attempt_at: Option<i64>,
    /// When a session of the recipient showed it in the model's context: the shown receipt its
    /// sidecar reported (`POST /v1/inbox/receipts`, `receipts.rs`).
    pub shown_at: Option<i64>,
    /// The first reply from this recipient the viewer may read (a message whose
    /// `correlation_id` is this one's id, a read receipt `ack.v1` aside): its `msg_` id.
    pub answered_by: Option<String>,
}

/// The type of a read receipt (§5.8).
const ACK: &str = "agentbus.ack.v1";

/// The delivery states of every copy of each message in `messages` (in the same order), the
/// one function the conversation view calls for them. "Answered" is read from `messages`
/// themselves, so it shows only replies the viewer may read.
pub async fn delivery_states(
    app: &App,
    messages: &[MessageRow],
) -> ApiResult<Vec<Vec<RecipientState>>> {
    let seqs: Vec<i64> = messages.iter().map(|m| m.seq).collect();
    let mut by_message: HashMap<i64, Vec<CopyState>> = HashMap::new();
    for c in app.store.copies(seqs).await? {
        by_message.entry(c.message_seq).or_default().push(c);
    }
    // (original message id, replying agent) -> the first reply's id.
    let mut replies: HashMap<(String, String), String> = HashMap::new();
    for m in messages {
        // A read receipt (§5.8) says the message was read, not answered.
        let Some(from) = m.source_agent_id.as_ref().filter(|_| m.kind != ACK) else {
            continue;
        };
        let attrs: Map<String, Value> = serde_json::from_str(&m.attrs).unwrap_or_default();
        if let Some(original) = attrs.get("correlation_id").and_then(Value::as_str) {
            replies
                .entry((original.to_owned(), from.clone()))
                .or_insert_with(|| m.id.clone());
        }
    }
    Ok(messages
        .iter()
        .map(|m| {
            by_message
                .remove(&m.seq)
                .unwrap_or_default()
                .into_iter()
                .map(|c| RecipientState {
                    answered_by: replies.get(&(m.id.clone(), c.agent_id.clone())).cloned(),
                    progress: match c.state {
                        EntryState::Ready => CopyProgress::Persisted,
                        EntryState::Leased => CopyProgress::Leased,
                        EntryState::Acked => CopyProgress::Delivered,
                        EntryState::Dead => CopyProgress::DeadLettered,
                        EntryState::Expired => CopyProgress::Expired,
                    },
                    agent_id: c.agent_id,
                    sequence: c.sequence,
                    attempts: c.attempts,
                    last_attempt_at: c.last_attempt_at,
                    shown_at: c.shown_at,
                })
                .collect()
        })
        .collect())
}

/// Whether a stored envelope's signature verifies now, against the keys registered to its sender
/// (revoked and expired ones included: they still verify history, decision 7) or, for a
/// gateway notice, the gateway key (decision 8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verification {
    /// The signature verifies.
    Verified {
        /// The key that signed.
        key_id: String,
        /// Signed by the gateway's own key (a system notice).
        by_gateway: bool,
        /// When the key was revoked, if it was since.
        revoked_at: Option<i64>,
        /// When the key expires or expired.
        expires_at: Option<i64>,
    },
    /// It does not (AB-1303 for a receiver): why.
    Failed(String),
}

/// Verifies `envelope` (a stored message's delivered copy, as [`crate::identity::envelope`]
/// builds it) as sent by `m`'s sender.
pub async fn verification(app: &App, m: &MessageRow, envelope: &Value) -> ApiResult<Verification> {
    let Some(env) = envelope.as_object() else {
        return Ok(Verification::Failed(
            "the stored envelope does not read".into(),
        ));
    };
    let sig = match envelope_sig(env) {
        Ok(s) => s,
        Err(e) => return Ok(Verification::Failed(format!("its sig does not read: {e}"))),
    };
    let key_id = sig.key_id.to_string();
    let Some(sender) = &m.source_agent_id else {
        let verified =
            key_id == app.gateway_key_id && verify_envelope(env, &app.gateway_key.public()).is_ok();
        return Ok(if verified {
            Verification::Verified {
                key_id,
                by_gateway: true,
                revoked_at: None,
                expires_at: None,
            }
        } else {
            Verification::Failed("not signed by this gateway's key".into())
        });
    };
    let keys = app.agent_keys(sender).await?;
    let Some(key) = keys.iter().find(|k| k.id == key_id) else {
        return Ok(Verification::Failed(format!(
            "{key_id} is not a key of the sender"
        )));
    };
    let public: Option<PublicKey> = app.public_key(key);
    Ok(match public.map(|p| verify_envelope(env, &p)) {
        Some(Ok(())) => Verification::Verified {
            key_id,
            by_gateway: false,
            revoked_at: key.revoked_at,
            expires_at: Some(key.expires_at),
        },
        Some(Err(e)) => Verification::Failed(format!("the signature does not verify: {e}")),
        None => Verification::Failed(format!("{key_id} is not a usable Ed25519 key")),
    })
}
