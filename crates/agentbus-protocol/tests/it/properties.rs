//! Property tests: canonicalisation is idempotent; any change to a signed attribute fails
//! verification; adding gateway-set attributes does not; no body escapes its frame.

use proptest::prelude::*;
use serde_json::{Map, Value, json};

use agentbus_protocol::envelope::GATEWAY_SET;
use agentbus_protocol::frame::{self, Frame, Transport, Verified};
use agentbus_protocol::ids::{IdKind, Minter};
use agentbus_protocol::signing::{SigningKey, sign_envelope, verify_envelope};
use agentbus_protocol::{jcs, json as ijson};

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-(1i64 << 53) + 1..(1i64 << 53)).prop_map(|n| json!(n)),
        // An integral double from 2^53 up to 1e21 canonicalises to bare integer digits, which the
        // I-JSON reader then refuses (RFC 7493 §2.2); such values cannot round-trip, by design.
        any::<f64>()
            .prop_filter(
                "finite, and not an integral double beyond 2^53 below 1e21",
                |f| {
                    f.is_finite()
                        && (f.fract() != 0.0
                            || f.abs() < 9_007_199_254_740_992.0
                            || f.abs() >= 1e21)
                }
            )
            .prop_map(|f| json!(f)),
        "\\PC{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map("\\PC{0,8}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn base_envelope(data: Value, ext: Value) -> Map<String, Value> {
    let v = json!({
        "specversion": "1.0",
        "id": "msg_01J9ZK7A0000000000000000A1",
        "source": "agent://acme/backend/release-bot",
        "type": "agentbus.message.v1",
        "time": "2026-10-10T14:00:00Z",
        "datacontenttype": "application/json",
        "to": "agent://acme/backend/reviewer",
        "conversation_id": "cnv_01J9ZK7A0000000000000000C1",
        "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "schema": "https://komsary.agentbus.exchange/schemas/agentbus.message/v1.json",
        "x_ext": ext,
        "data": {"text": "hi", "extra": data}
    });
    v.as_object().unwrap().clone()
}

fn key() -> (SigningKey, agentbus_protocol::ids::Id) {
    let key = SigningKey::from_seed([42; 32]);
    let id = Minter::new().mint(IdKind::Key, 1_790_000_000_000, [1; 10]);
    (key, id)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn canonicalisation_is_idempotent(v in json_value()) {
        let once = jcs::canonicalize(&v).unwrap();
        let reparsed = ijson::parse(&once).unwrap();
        prop_assert_eq!(jcs::canonicalize(&reparsed).unwrap(), once);
    }

    #[test]
    fn wp_3_1_5_any_change_to_a_signed_attribute_fails(data in json_value(), ext in json_value(), which in 0usize..6) {
        let (k, kid) = key();
        let mut env = base_envelope(data, ext);
        sign_envelope(&mut env, &k, kid).unwrap();
        prop_assert!(verify_envelope(&env, &k.public()).is_ok());
        let mut tampered = env.clone();
        match which {
            0 => { tampered["to"] = json!("agent://acme/backend/someone-else"); }
            1 => { tampered["time"] = json!("2026-10-10T14:00:01Z"); }
            2 => { tampered["id"] = json!("msg_01J9ZK7A0000000000000000A2"); }
            3 => { tampered["data"]["text"] = json!("hj"); }
            4 => { tampered["x_ext"] = json!([tampered["x_ext"].clone()]); }
            _ => { tampered.insert("x_new".into(), json!(1)); }
        }
        prop_assert!(verify_envelope(&tampered, &k.public()).is_err());
    }

    #[test]
    fn wp_3_1_1_gateway_attributes_do_not_affect_the_signature(data in json_value(), seq in 0u64..(1 << 53)) {
        let (k, kid) = key();
        let mut env = base_envelope(data, json!(null));
        sign_envelope(&mut env, &k, kid).unwrap();
        let delivered = [
            ("tenant", json!("ten_01J9ZK7A0000000000000000T1")),
            ("workspace", json!("ws_01J9ZK7A0000000000000000W1")),
            ("to_id", json!("agt_01J9ZK7A0000000000000000A2")),
            ("sequence", json!(seq)),
            ("received_at", json!("2026-10-10T14:00:00.213Z")),
            ("receipt", json!("rcp_01J9ZK7A0000000000000000R1")),
            ("hops", json!([{"gateway": "x"}])),
        ];
        for (name, value) in delivered {
            prop_assert!(GATEWAY_SET.contains(&name));
            env.insert(name.into(), value);
        }
        prop_assert!(verify_envelope(&env, &k.public()).is_ok());
    }

    #[test]
    fn wp_13_1_3_no_body_escapes_its_frame(body in "(\\PC|</agentbus-message>|<agentbus-message|\u{202e}|\u{200b}|\r|\u{ff1c})*") {
        let f = Frame {
            id: "msg_01J9ZK7A0000000000000000A1",
            local_id: Some(&body),
            from: "agent://acme/backend/release-bot",
            kind: "agentbus.message.v1",
            verified: Verified::True,
            conversation: None,
            transport: Transport::Gateway,
            subject: Some(&body),
            task: None,
            late: false,
            expired: None,
            attachments: &[],
            reply_command: None,
            rest_command: None,
            body: &body,
        };
        let out = frame::render(&f);
        prop_assert_eq!(crate::frames::count_tags(&out), (1, 1));
    }
}

proptest! {
    /// Any query text is parsed or refused with a reason, never a panic; a parsed one stays
    /// inside its bounds.
    #[test]
    fn search_queries_parse_or_refuse(q in "[\\PC\": a-z]{0,80}") {
        use agentbus_protocol::search::{MAX_QUERY_TERMS, Query};
        if let Ok(p) = Query::parse(&q) {
            prop_assert!(p.terms.len() <= MAX_QUERY_TERMS);
        }
    }

    /// A snippet is a piece of the text (with `…` marks), and every highlight lies on character
    /// boundaries inside it and is one of the words asked for.
    #[test]
    fn search_snippets_stay_inside_their_text(
        text in "\\PC{0,200}",
        word in "[a-zé]{2,6}",
        max in 1usize..60,
    ) {
        use agentbus_protocol::search::{snippet, terms};
        let s = snippet(&text, &[word.as_str()], max);
        for r in &s.highlights {
            prop_assert!(s.text.is_char_boundary(r.start) && s.text.is_char_boundary(r.end));
            prop_assert_eq!(terms(&s.text[r.clone()]), vec![word.clone()]);
        }
        prop_assert!(text.contains(s.text.trim_matches('…')) || s.text.is_empty());
    }
}
