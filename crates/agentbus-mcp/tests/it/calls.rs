//! Every tool's answers and refusals, one case a file under `tests/data/calls/`: the arguments,
//! what the session holds first (a tell or a pause from the engineer, another session of the
//! machine), and either the `AB-` code of the refusal or strings the answer contains and lacks.
//! A refusal is checked as the client sees it: a tool result with `isError`, the code, the cause
//! and the fix.

use serde_json::Value;

use agentbus_local::Kind;

use crate::{Fixture, data, rt};

#[test]
fn every_tool_answers_and_refuses_as_its_cases_say() {
    let mut tools_seen = std::collections::BTreeSet::new();
    let mut cases: Vec<_> = std::fs::read_dir(data("calls"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    cases.sort();
    let rt = rt();
    for path in &cases {
        let case: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
        let name = path.file_stem().unwrap().to_string_lossy();
        let f = Fixture::new();
        if let Some(t) = case["tell"].as_str() {
            f.from_engineer(Kind::Tell, t);
        }
        if let Some(reason) = case["pause"].as_str() {
            f.from_engineer(Kind::Pause, reason);
        }
        // Another session of this machine, named as its harness named it.
        if let Some(other) = case.get("session") {
            f.store
                .register(
                    other["id"].as_str().unwrap(),
                    "claude",
                    other["name"].as_str(),
                    None,
                )
                .unwrap();
        }
        let tool = case["tool"].as_str().unwrap();
        tools_seen.insert(tool.to_owned());
        let session = f.session();
        let outcome = rt.block_on(session.call(tool, case["arguments"].clone()));
        match (case["error"].as_str(), outcome) {
            (Some(code), Err(e)) => {
                assert_eq!(e.code.to_string(), code, "{name}: {e}");
                let r = e.into_result();
                assert_eq!(r.is_error, Some(true), "{name}");
                let v = serde_json::to_value(&r).unwrap();
                let text = v["content"][0]["text"].as_str().unwrap();
                assert!(text.starts_with(&format!("{code}: ")), "{name}: {text}");
                assert!(
                    text.contains("\ncause: ") && text.contains("\nfix: "),
                    "{name}: {text}"
                );
                assert_eq!(v["structuredContent"]["error"]["code"], code, "{name}");
            }
            (Some(code), Ok(out)) => panic!("{name}: expected {code}, got {}", out.text),
            (None, Err(e)) => panic!("{name}: refused: {e}"),
            (None, Ok(out)) => {
                // A client may hand the model the structured content instead of the text
                // (Claude Code does): whatever the text says is in its strings too.
                let mut strings = String::new();
                strings_of(&out.structured, &mut strings);
                for s in case["contains"].as_array().unwrap() {
                    let s = s.as_str().unwrap();
                    assert!(out.text.contains(s), "{name}: {s:?} not in {}", out.text);
                    assert!(
                        strings.contains(s) || out.structured.to_string().contains(s),
                        "{name}: {s:?} not in {}",
                        out.structured
                    );
                }
                // What must not reach the model, in the text or the structured content.
                let structured = out.structured.to_string();
                for s in case["lacks"].as_array().into_iter().flatten() {
                    let s = s.as_str().unwrap();
                    assert!(!out.text.contains(s), "{name}: {s:?} in {}", out.text);
                    assert!(!structured.contains(s), "{name}: {s:?} in {structured}");
                }
            }
        }
    }
    let defined: std::collections::BTreeSet<String> = agentbus_mcp::tools::definitions()
        .iter()
        .map(|t| t.name.to_string())
        .collect();
    assert_eq!(tools_seen, defined, "every tool has a case");
}

#[test]
fn read_inbox_shows_each_message_once_and_the_hook_shows_it_no_more() {
    let f = Fixture::new();
    f.from_engineer(Kind::Tell, "first");
    let session = f.session();
    let rt = rt();
    let first = rt
        .block_on(session.call("read_inbox", Value::Null))
        .unwrap();
    assert!(first.text.contains("first"), "{}", first.text);
    assert_eq!(first.structured["shown"].as_array().unwrap().len(), 1);
    let again = rt
        .block_on(session.call("read_inbox", Value::Null))
        .unwrap();
    assert!(!again.text.contains("first"), "{}", again.text);
    // The claim is the hook's: the session's next hook event shows nothing either.
    let (waiting, _) = f.store.waiting_for(crate::SID).unwrap();
    assert!(waiting.is_empty());
}

/// A task request from the gateway, imported for the agent [`SID`] is bound to, open until
/// `expires_ms`.
fn task_request(f: &Fixture, id: &str, expires_ms: i64) {
    use agentbus_protocol::frame::{Transport, Verified};
    let msg = agentbus_local::InboundMessage {
        transport: Transport::Gateway,
        transport_id: id.into(),
        from: "agent://acme/backend/release-bot".into(),
        kind: "agentbus.task.request.v1".into(),
        conversation: Some("cnv_01J9ZK6Q8R2M3N4P5Q6R7S8T9V".into()),
        subject: Some("review 482".into()),
        body: "Review change 482.".into(),
        verified: Verified::True,
        attachments: vec![],
        reply_command: Some("agentbus accept tsk_01J9ZK6Q8R2M3N4P5Q6R7S8T9A".into()),
        sent: agentbus_protocol::timestamp::Timestamp(crate::T0),
        recipient: "agent://acme/backend/reviewer".into(),
        message_id: None,
        task: Some("tsk_01J9ZK6Q8R2M3N4P5Q6R7S8T9A".into()),
        late: false,
        expires_ms: Some(expires_ms),
        held: None,
        priority: agentbus_local::Priority::Normal,
    };
    f.store.import(&msg).unwrap();
}

#[test]
fn read_inbox_says_each_messages_ids_answer_and_expiry_as_the_cli_json_does() {
    let f = Fixture::new();
    f.store
        .bind(crate::SID, Some("agent://acme/backend/reviewer"))
        .unwrap();
    let session = f.session();
    let rt = rt();
    let open = "msg_01J9ZK6Q8R2M3N4P5Q6R7S8T9V";
    task_request(&f, open, crate::T0 + 60_000);
    let out = rt
        .block_on(session.call("read_inbox", Value::Null))
        .unwrap();
    let m = &out.structured["messages"][0];
    assert_eq!(m["id"], out.structured["shown"][0], "{m}");
    assert_eq!(m["message_id"], open);
    assert_eq!(m["task_id"], "tsk_01J9ZK6Q8R2M3N4P5Q6R7S8T9A");
    // Answered with the task tool, as the frame says on an MCP surface.
    assert!(
        m["answer"].as_str().unwrap().starts_with(
            "the task tool with {\"task\": \"tsk_01J9ZK6Q8R2M3N4P5Q6R7S8T9A\", \"action\": \"accept\"}"
        ),
        "{m}"
    );
    assert_eq!(m["late"], false);
    assert_eq!(m["expired_at"], Value::Null);

    // Past its deadline: expired, and nothing answers it.
    let late = "msg_01J9ZK6Q8R2M3N4P5Q6R7S8T9W";
    task_request(&f, late, crate::T0 + 1);
    f.clock.advance_ms(10_000);
    let out = rt
        .block_on(session.call("read_inbox", Value::Null))
        .unwrap();
    let m = &out.structured["messages"][0];
    assert_eq!(m["message_id"], late, "{}", out.structured);
    assert_eq!(m["answer"], Value::Null);
    assert_eq!(m["expired_at"], "2025-11-30T12:00:00.001Z");
}

/// The gateway's refusals as a model reads them, one case a row of `tests/data/refusals.json`.
#[test]
fn a_gateway_refusal_reaches_the_model_on_one_labelled_line_it_cannot_break() {
    let table: Value =
        serde_json::from_slice(&std::fs::read(data("refusals.json")).unwrap()).unwrap();
    for case in table["cases"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let code_str = case["code_str"].as_str().unwrap();
        let e = agentbus_client::ClientError::Api {
            status: 422,
            code: code_str.parse().ok(),
            code_str: code_str.to_owned(),
            message: case["message"].as_str().unwrap().to_owned(),
        };
        let r = agentbus_mcp::ToolError::from(e).into_result();
        let v = serde_json::to_value(&r).unwrap();
        let text = v["content"][0]["text"].as_str().unwrap();
        let lines: Vec<&str> = text.split('\n').collect();
        assert_eq!(lines.len(), 3, "{name}: {text}");
        assert_eq!(lines[0], case["first_line"], "{name}");
        assert!(
            lines[1].starts_with("cause: ") && lines[2].starts_with("fix: "),
            "{name}: {text}"
        );
        let structured = v["structuredContent"].to_string();
        for s in case["lacks"].as_array().unwrap() {
            let s = s.as_str().unwrap();
            assert!(!text.contains(s), "{name}: {s:?} in {text}");
            assert!(!structured.contains(s), "{name}: {s:?} in {structured}");
        }
    }
}

/// Every string of a tool's JSON, keys included, shows what hides, and the JSON stays the same
/// shape.
#[test]
fn for_model_escapes_every_string_and_keeps_the_json_valid() {
    let hostile = "a\u{202E}b\u{E0041}\u{200B}\u{85}c";
    let v = serde_json::json!({
        hostile: [hostile, 1, true, null, {"deep": hostile}],
        "n": 2.5,
    });
    let out = agentbus_mcp::tools::for_model(v);
    let text = out.to_string();
    let escaped = "a\\u{202E}b\\u{E0041}\\u{200B}\\u{0085}c";
    assert_eq!(
        out,
        serde_json::json!({
            escaped: [escaped, 1, true, null, {"deep": escaped}],
            "n": 2.5,
        })
    );
    assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), out);
    assert!(
        !text.chars().any(agentbus_protocol::frame::is_hidden),
        "{text}"
    );
}

/// Every string of `v`, keys and values, unescaped, one a line.
pub(crate) fn strings_of(v: &Value, out: &mut String) {
    match v {
        Value::String(s) => {
            out.push_str(s);
            out.push('\n');
        }
        Value::Array(a) => a.iter().for_each(|x| strings_of(x, out)),
        Value::Object(m) => m.iter().for_each(|(k, x)| {
            out.push_str(k);
            out.push('\n');
            strings_of(x, out);
        }),
        _ => {}
    }
}
