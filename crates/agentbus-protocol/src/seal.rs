//! Assembling and signing an envelope: the one builder the client's outgoing messages and the
//! gateway's system notices share, so both write the §2.1 attributes in the same order. Ids, the
//! time and the random bytes of a `traceparent` are parameters: this crate reads no clock and no
//! entropy source.

use serde_json::{Map, Value};

use crate::ids::Id;
use crate::jcs::JcsError;
use crate::signing::{SigningKey, sign_envelope};
use crate::timestamp::Timestamp;

/// Everything an envelope is made of before its signature. Attributes that are `None` are left
/// out of the envelope.
#[derive(Debug, Clone, PartialEq)]
pub struct Parts {
    /// `id` (a `msg_` id).
    pub id: String,
    /// `source`: the sender's address.
    pub source: String,
    /// `type`.
    pub kind: String,
    /// `time`.
    pub time: Timestamp,
    /// `subject`.
    pub subject: Option<String>,
    /// `to`.
    pub to: String,
    /// `conversation_id`.
    pub conversation_id: String,
    /// `correlation_id`: the message this one answers.
    pub correlation_id: Option<String>,
    /// `traceparent` (see [`traceparent`] and [`child_traceparent`]).
    pub traceparent: String,
    /// `schema`: the URL of the `data` schema.
    pub schema: String,
    /// `idempotency_key` (§8).
    pub idempotency_key: Option<String>,
    /// `expires_at`.
    pub expires_at: Option<Timestamp>,
    /// `capability` and `capability_version` (task requests).
    pub capability: Option<(String, String)>,
    /// `usage` (§5.5).
    pub usage: Option<Value>,
    /// `budget` (§2.1).
    pub budget: Option<Value>,
    /// `priority`.
    pub priority: Option<String>,
    /// `data`.
    pub data: Value,
}

/// The envelope of `parts`, signed with `key` (whose id is `key_id`): the attributes in §2.1's
/// order, then `sig`.
pub fn seal(parts: Parts, key: &SigningKey, key_id: Id) -> Result<Map<String, Value>, JcsError> {
    let s = Value::String;
    let mut env = Map::new();
    env.insert("specversion".into(), s("1.0".into()));
    env.insert("id".into(), s(parts.id));
    env.insert("source".into(), s(parts.source));
    env.insert("type".into(), s(parts.kind));
    env.insert("time".into(), s(parts.time.to_string()));
    env.insert("datacontenttype".into(), s("application/json".into()));
    if let Some(v) = parts.subject {
        env.insert("subject".into(), s(v));
    }
    env.insert("to".into(), s(parts.to));
    env.insert("conversation_id".into(), s(parts.conversation_id));
    if let Some(v) = parts.correlation_id {
        env.insert("correlation_id".into(), s(v));
    }
    env.insert("traceparent".into(), s(parts.traceparent));
    env.insert("schema".into(), s(parts.schema));
    if let Some(v) = parts.idempotency_key {
        env.insert("idempotency_key".into(), s(v));
    }
    if let Some(t) = parts.expires_at {
        env.insert("expires_at".into(), s(t.to_string()));
    }
    if let Some((cap, version)) = parts.capability {
        env.insert("capability".into(), s(cap));
        env.insert("capability_version".into(), s(version));
    }
    if let Some(v) = parts.usage {
        env.insert("usage".into(), v);
    }
    if let Some(v) = parts.budget {
        env.insert("budget".into(), v);
    }
    if let Some(v) = parts.priority {
        env.insert("priority".into(), s(v));
    }
    env.insert("data".into(), parts.data);
    sign_envelope(&mut env, key, key_id)?;
    Ok(env)
}

/// A new W3C `traceparent` (version 00, sampled) of trace `trace` and span `span`.
pub fn traceparent(trace: [u8; 16], span: [u8; 8]) -> String {
    format!("00-{}-{}-01", hex::encode(trace), hex::encode(span))
}

/// A child of `parent`: the same trace and flags under the new span `span`; a parent that is not
/// a `traceparent` starts the new trace `trace` instead.
pub fn child_traceparent(parent: &str, trace: [u8; 16], span: [u8; 8]) -> String {
    let parts: Vec<&str> = parent.split('-').collect();
    if parts.len() == 4 && parts[1].len() == 32 {
        format!("00-{}-{}-{}", parts[1], hex::encode(span), parts[3])
    } else {
        traceparent(trace, span)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::IdKind;

    fn parts() -> Parts {
        Parts {
            id: "msg_01J9ZK6Q8R2M3N4P5Q6R7S8T9V".into(),
            source: "agent://acme/backend/bot".into(),
            kind: "agentbus.message.v1".into(),
            time: Timestamp(1_795_000_000_000),
            subject: None,
            to: "agent://acme/backend/peer".into(),
            conversation_id: "cnv_01J9ZK6Q8R2M3N4P5Q6R7S8T9V".into(),
            correlation_id: None,
            traceparent: traceparent([1; 16], [2; 8]),
            schema: "https://example/schemas/agentbus.message/v1.json".into(),
            idempotency_key: None,
            expires_at: None,
            capability: None,
            usage: None,
            budget: None,
            priority: None,
            data: serde_json::json!({"text": "hi"}),
        }
    }

    #[test]
    fn a_sealed_envelope_verifies_and_keeps_the_attribute_order() {
        let key = SigningKey::from_seed([7; 32]);
        let key_id = Id::parse_kind("key_01J9ZK6Q8R2M3N4P5Q6R7S8T9V", IdKind::Key).unwrap();
        let mut p = parts();
        p.subject = Some("s".into());
        p.correlation_id = Some("msg_01J9ZK6Q8R2M3N4P5Q6R7S8T9W".into());
        let env = seal(p, &key, key_id).unwrap();
        let names: Vec<&str> = env.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            [
                "specversion",
                "id",
                "source",
                "type",
                "time",
                "datacontenttype",
                "subject",
                "to",
                "conversation_id",
                "correlation_id",
                "traceparent",
                "schema",
                "data",
                "sig"
            ]
        );
        crate::signing::verify_envelope(&env, &key.public()).unwrap();
    }

    #[test]
    fn a_child_span_keeps_the_trace_and_a_bad_parent_starts_a_new_one() {
        let parent = traceparent([1; 16], [2; 8]);
        let child = child_traceparent(&parent, [9; 16], [3; 8]);
        assert_eq!(child[..36], parent[..36]);
        assert_eq!(&child[36..52], "0303030303030303");
        assert_eq!(
            child_traceparent("junk", [9; 16], [3; 8]),
            traceparent([9; 16], [3; 8])
        );
    }
}
