//! Building the envelopes the CLI sends: every §2.1 attribute a sender sets, then the signature.

use serde_json::{Map, Value};

use agentbus_protocol::ids::IdKind;
use agentbus_protocol::schema::KnownType;
use agentbus_protocol::seal;
use agentbus_protocol::signing::SigningKey;
use agentbus_protocol::timestamp::Timestamp;

use crate::error::{ClientError, Result};
use crate::profile::Profile;

/// What to send, before the sender's attributes and signature are added.
#[derive(Debug, Clone)]
pub struct Draft {
    /// The message type.
    pub kind: KnownType,
    /// The destination: an address, `agt_` id or topic.
    pub to: String,
    /// The `data` payload.
    pub data: Value,
    /// `subject`.
    pub subject: Option<String>,
    /// `conversation_id`; a new one is minted when absent (§7).
    pub conversation_id: Option<String>,
    /// `correlation_id`: the message this one answers.
    pub correlation_id: Option<String>,
    /// `traceparent`, to continue a trace; a new trace when absent.
    pub traceparent: Option<String>,
    /// `idempotency_key` (§8).
    pub idempotency_key: Option<String>,
    /// `expires_at`.
    pub expires_at: Option<Timestamp>,
    /// `capability` and `capability_version` (task requests).
    pub capability: Option<(String, String)>,
    /// The `usage` extension (§5.5's shared usage schema), when the sender measured it.
    pub usage: Option<Value>,
    /// `budget`: `{currency, max}` (§2.1; task requests).
    pub budget: Option<Value>,
    /// `priority` (§2.1: `low`, `normal`, `high`); absent reads as `normal`.
    pub priority: Option<String>,
    /// The `traceparent` of the message this one answers: the sender's span is its child.
    pub answers: Option<String>,
}

impl Draft {
    /// A draft of `kind` to `to` carrying `data`.
    pub fn new(kind: KnownType, to: impl Into<String>, data: Value) -> Draft {
        Draft {
            kind,
            to: to.into(),
            data,
            subject: None,
            conversation_id: None,
            correlation_id: None,
            traceparent: None,
            idempotency_key: None,
            expires_at: None,
            capability: None,
            usage: None,
            budget: None,
            priority: None,
            answers: None,
        }
    }

    /// Makes this draft answer `original` (a received envelope): same conversation and trace,
    /// `correlation_id` = its id (§7).
    pub fn answering(mut self, original: &Map<String, Value>) -> Draft {
        let s = |k: &str| original.get(k).and_then(Value::as_str).map(str::to_owned);
        self.conversation_id = s("conversation_id");
        self.correlation_id = s("id");
        self.answers = s("traceparent");
        self.traceparent = s("traceparent").map(|t| child_span(&t));
        self
    }
}

/// A traceparent with the same trace id and a new span id.
fn child_span(parent: &str) -> String {
    seal::child_traceparent(
        parent,
        agentbus_runtime::random_bytes(),
        agentbus_runtime::random_bytes(),
    )
}

/// A new W3C traceparent (sampled).
pub fn new_traceparent() -> String {
    seal::traceparent(
        agentbus_runtime::random_bytes(),
        agentbus_runtime::random_bytes(),
    )
}

/// Completes and signs `draft` as `profile`'s agent, at `now`.
pub fn seal(
    draft: Draft,
    profile: &Profile,
    key: &SigningKey,
    now: Timestamp,
) -> Result<Map<String, Value>> {
    let key_id = profile
        .key_id
        .parse()
        .map_err(|e| ClientError::Invalid(format!("the profile's key id: {e}")))?;
    let id = agentbus_runtime::mint_at(IdKind::Message, now.millis());
    let conversation = draft.conversation_id.unwrap_or_else(|| {
        agentbus_runtime::mint_at(IdKind::Conversation, now.millis()).to_string()
    });
    let parts = seal::Parts {
        id: id.to_string(),
        source: profile.address.clone(),
        kind: draft.kind.as_str().to_owned(),
        time: now,
        subject: draft.subject,
        to: draft.to,
        conversation_id: conversation,
        correlation_id: draft.correlation_id,
        traceparent: draft.traceparent.unwrap_or_else(new_traceparent),
        schema: draft.kind.schema_url(),
        idempotency_key: draft.idempotency_key,
        expires_at: draft.expires_at,
        capability: draft.capability,
        usage: draft.usage,
        budget: draft.budget,
        // Absent reads as `normal` (§2.1), so `normal` is not written.
        priority: draft.priority.filter(|p| p != "normal"),
        data: draft.data,
    };
    seal::seal(parts, key, key_id)
        .map_err(|e| ClientError::Invalid(format!("cannot sign the envelope: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentbus_protocol::envelope::{Envelope, ValidateOptions};
    use serde_json::json;

    #[test]
    fn a_sealed_reply_is_valid_and_correlated() {
        let key = SigningKey::from_seed([7; 32]);
        let profile = Profile {
            name: "bot".into(),
            gateway: "http://x".into(),
            agent_id: "agt_01J9ZK6Q8R2M3N4P5Q6R7S8T9V".into(),
            address: "agent://acme/backend/bot".into(),
            token: "aba_x".into(),
            key_id: "key_01J9ZK6Q8R2M3N4P5Q6R7S8T9V".into(),
            key_store: Default::default(),
        };
        let now = Timestamp(1_795_000_000_000);
        let first = seal(
            Draft::new(
                KnownType::Message,
                "agent://acme/backend/peer",
                json!({"text": "hi"}),
            ),
            &profile,
            &key,
            now,
        )
        .unwrap();
        let reply = seal(
            Draft::new(
                KnownType::Message,
                "agent://acme/backend/peer",
                json!({"text": "yo"}),
            )
            .answering(&first),
            &profile,
            &key,
            now,
        )
        .unwrap();
        assert_eq!(reply["correlation_id"], first["id"]);
        assert_eq!(reply["conversation_id"], first["conversation_id"]);
        assert_eq!(
            reply["traceparent"].as_str().unwrap()[3..35],
            first["traceparent"].as_str().unwrap()[3..35]
        );
        let env = Envelope::from_map(reply.clone());
        let problems = env.validate(ValidateOptions::default());
        assert!(problems.is_empty(), "{problems:?}");
        agentbus_protocol::signing::verify_envelope(&reply, &key.public()).unwrap();
    }
}
