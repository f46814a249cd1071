//! The CloudEvents projection reverses exactly, and a signature verifies after a round trip.

use serde_json::json;

use agentbus_protocol::cloudevents::{from_cloudevent, is_ce_name, to_cloudevent};
use agentbus_protocol::ids::{IdKind, Minter};
use agentbus_protocol::signing::{SigningKey, sign_envelope, verify_envelope};

#[test]
fn wp_1_1_projection_round_trips_with_a_valid_signature() {
    let mut env = json!({
        "specversion": "1.0",
        "id": "msg_01J9ZK7A0000000000000000A1",
        "source": "agent://acme/backend/release-bot",
        "type": "agentbus.task.request.v1",
        "time": "2026-10-10T14:00:00Z",
        "datacontenttype": "application/json",
        "to": "agent://acme/backend/reviewer",
        "conversation_id": "cnv_01J9ZK7A0000000000000000C1",
        "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "schema": "https://komsary.agentbus.exchange/schemas/agentbus.task.request/v1.json",
        "capability": "code.review",
        "capability_version": "1",
        "budget": {"currency": "USD", "max": "2.00"},
        "x_trace_tag": true,
        "data": {"instructions": "review"}
    })
    .as_object()
    .unwrap()
    .clone();
    let key = SigningKey::from_seed([3; 32]);
    sign_envelope(&mut env, &key, Minter::new().mint(IdKind::Key, 1, [0; 10])).unwrap();
    env.insert("sequence".into(), json!(4_294_967_296u64));
    env.insert("to_id".into(), json!("agt_01J9ZK7A0000000000000000A2"));
    let ce = to_cloudevent(&env);
    assert!(ce.keys().all(|k| is_ce_name(k)));
    assert_eq!(
        ce["conversationid"],
        json!("cnv_01J9ZK7A0000000000000000C1")
    );
    assert_eq!(
        ce["budget"],
        json!("{\"currency\":\"USD\",\"max\":\"2.00\"}")
    );
    let back = from_cloudevent(&ce).unwrap();
    assert_eq!(back, env);
    verify_envelope(&back, &key.public()).unwrap();
}
