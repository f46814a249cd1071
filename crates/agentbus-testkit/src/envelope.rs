//! Envelopes as the tests write them: unsigned drafts of each message type, and signing with an
//! agent's registered key. Every draft carries the same fixed `traceparent`, a fresh message and
//! conversation id, and the `time` the caller gives (a `ManualClock`'s, or a gateway's).

use serde_json::{Map, Value, json};

use agentbus_protocol::ids::{Id, IdKind};
use agentbus_protocol::signing::sign_envelope;
use agentbus_protocol::timestamp::Timestamp;
use agentbus_runtime::mint;

use crate::Agent;

/// The `traceparent` every draft carries.
pub const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// The capability test workers declare: `code.review` version 1, no schemas.
pub fn code_review() -> Value {
    json!({"name": "code.review", "version": "1", "description": "Review a diff."})
}

/// An unsigned envelope of `kind` (`message`, `task.request`, …) from the address `from` to
/// `to`, stamped `now`, carrying `data`.
pub fn draft(from: &str, to: &str, kind: &str, now: Timestamp, data: Value) -> Map<String, Value> {
    let v = json!({
        "specversion": "1.0",
        "id": mint(IdKind::Message).to_string(),
        "source": from,
        "type": format!("agentbus.{kind}.v1"),
        "time": now.to_string(),
        "datacontenttype": "application/json",
        "to": to,
        "conversation_id": mint(IdKind::Conversation).to_string(),
        "traceparent": TRACEPARENT,
        "schema": format!("https://komsary.agentbus.exchange/schemas/agentbus.{kind}/v1.json"),
        "data": data,
    });
    match v {
        Value::Object(m) => m,
        _ => unreachable!("json! of an object literal"),
    }
}

/// An unsigned `message.v1` from the address `from` to `to` saying `text`.
pub fn message(from: &str, to: &str, text: &str, now: Timestamp) -> Map<String, Value> {
    draft(from, to, "message", now, json!({"text": text}))
}

/// An unsigned `task.request` for `code.review` version 1 from `from` to `to`.
pub fn request(from: &str, to: &str, now: Timestamp, constraints: Value) -> Map<String, Value> {
    let mut m = draft(
        from,
        to,
        "task.request",
        now,
        json!({"instructions": "Review change 482 for concurrency bugs.", "constraints": constraints}),
    );
    m.insert("capability".into(), json!("code.review"));
    m.insert("capability_version".into(), json!("1"));
    m
}

/// An unsigned lifecycle message (`kind`: `accepted`, `progress`, `result`, …) of `task`, whose
/// request was `req`, from `from` to `to`.
pub fn followup(
    from: &str,
    to: &str,
    req: &Map<String, Value>,
    task: &str,
    kind: &str,
    now: Timestamp,
    data: Value,
) -> Map<String, Value> {
    let mut m = draft(from, to, &format!("task.{kind}"), now, data);
    m["conversation_id"] = req["conversation_id"].clone();
    m.insert("correlation_id".into(), req["id"].clone());
    m["data"]["task_id"] = json!(task);
    m
}

/// `env` signed with `a`'s registered key (any earlier signature dropped first).
pub fn sign(a: &Agent, mut env: Map<String, Value>) -> Map<String, Value> {
    env.shift_remove("sig");
    let key_id = a.key_id.parse::<Id>().expect("the agent's key id is an id");
    sign_envelope(&mut env, &a.key, key_id).expect("a draft signs");
    env
}
