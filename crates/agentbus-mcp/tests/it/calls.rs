//! Every tool's answers and refusals, one case a file under `tests/data/calls/`: the arguments,
//! what the session holds first (a tell or a pause from the engineer), and either the `AB-`
//! code of the refusal or strings the answer contains. A refusal is checked as the client sees
//! it: a tool result with `isError`, the code, the cause and the fix.

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
                for s in case["contains"].as_array().unwrap() {
                    let s = s.as_str().unwrap();
                    assert!(out.text.contains(s), "{name}: {s:?} not in {}", out.text);
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
