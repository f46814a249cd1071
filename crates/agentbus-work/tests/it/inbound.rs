//! Inbound content is data (§13.1, WP-13.1-1): what a worker's harness gets from the requester (its
//! request with its output schema, its answers) is framed and escaped, and the operator's preamble
//! holds only what this machine decided. Each case under `tests/data/inbound/<case>.json` sits
//! beside the text the harness gets (`<case>.txt`); `UPDATE_EXPECT=1` rewrites those.

use std::path::{Path, PathBuf};

use serde_json::Value;

use agentbus_client::inbox::Received;
use agentbus_protocol::frame::{PREAMBLE, TAG};
use agentbus_work::{Answer, Job, job};

fn case_path(case: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/inbound")
        .join(format!("{case}.json"))
}

/// The received envelope of `case` and the task it belongs to.
pub fn load(case: &str) -> (Value, Received, String) {
    let path = case_path(case);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let case: Value = serde_json::from_str(&text).unwrap();
    let r: Received = serde_json::from_value(case["received"].clone()).unwrap();
    let task_id = case["task_id"].as_str().unwrap().to_owned();
    (case, r, task_id)
}

/// The requester's answer of `case` as the worker hands it to a harness.
pub fn requester_answer(case: &str) -> Answer {
    let (_, r, task_id) = load(case);
    job::answer(&r, &task_id)
}

/// Checks that `framed` is one frame holding `answer` in its body, nothing before it.
#[track_caller]
pub fn assert_framed_answer(framed: &str, answer: &str) {
    assert!(framed.starts_with(&format!("<{TAG} ")), "{framed}");
    assert!(framed.contains(PREAMBLE), "{framed}");
    let (_, body) = framed.split_once("\n---\n").unwrap();
    assert!(body.contains(answer), "{framed}");
    assert_eq!(framed.matches(&format!("</{TAG}>")).count(), 1, "{framed}");
}

/// What the harness gets for `case`: the prompt of a request, the framed answer of an input.
#[track_caller]
fn check(case: &str) {
    let (c, r, task_id) = load(case);
    let got = if r.attr("type") == Some("agentbus.task.request.v1") {
        let card = c.get("card_output_schema").cloned();
        Job::from_request(&r, &task_id, card, Path::new("/srv/agentbus/work")).prompt
    } else {
        let a = job::answer(&r, &task_id);
        assert_eq!(a.text, r.envelope["data"]["answer"].as_str().unwrap());
        a.framed
    };
    // One frame; the operator's preamble is what comes before it.
    assert_eq!(got.matches(&format!("<{TAG} ")).count(), 1, "{got}");
    assert_eq!(got.matches(&format!("</{TAG}>")).count(), 1, "{got}");
    let (preamble, frame) = got.split_once(&format!("<{TAG} ")).unwrap();
    let (_, body) = frame.split_once("\n---\n").unwrap();
    let mut leaves = Vec::new();
    strings(&r.envelope["data"], &mut leaves);
    for s in leaves.iter().filter(|s| s.len() >= 12) {
        assert!(
            !preamble.contains(s.as_str()),
            "the requester's {s:?} is in the operator's preamble:\n{got}"
        );
        // Prose that needs no escaping is shown as sent, inside the frame's body.
        let prose = s.contains(' ') && s.chars().all(|c| c.is_ascii() && !c.is_ascii_control());
        if prose && !s.contains('<') {
            assert!(
                body.contains(s.as_str()),
                "{s:?} is not in the body:\n{got}"
            );
        }
    }
    let expected = case_path(case).with_extension("txt");
    if std::env::var_os("UPDATE_EXPECT").is_some() {
        std::fs::write(&expected, &got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&expected).unwrap_or_default();
    assert!(
        want == got,
        "{} differs (UPDATE_EXPECT=1 rewrites it); got:\n{got}",
        expected.display()
    );
}

/// Every string in `v`, object keys aside.
fn strings(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Array(a) => a.iter().for_each(|v| strings(v, out)),
        Value::Object(m) => m.values().for_each(|v| strings(v, out)),
        _ => {}
    }
}

#[test]
fn wp_13_1_1_a_requesters_output_schema_is_framed_not_the_operators_word() {
    check("requester-output-schema");
}

#[test]
fn wp_13_1_1_the_cards_output_schema_stays_in_the_operators_preamble() {
    check("card-output-schema");
}

#[test]
fn wp_13_1_1_the_requesters_answer_reaches_the_harness_framed() {
    check("task-input-answer");
}
