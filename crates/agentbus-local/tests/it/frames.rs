//! Snapshots of delivered frames (LM-27, LM-38, LM-84, G-LM-21), adversarial bodies included:
//! whatever a body holds, the context stays one frame per message, ended by our own tag.

use serde::Deserialize;

use agentbus_local::deliver::{Recipient, for_session, render_block, select};
use agentbus_local::{Kind, Sender};

use crate::{Fixture, data};

#[derive(Deserialize)]
struct Case {
    name: String,
    kind: String,
    #[serde(default)]
    sender_name: Option<String>,
    text: String,
}

/// Opening and closing tags as a lenient reader would count them.
fn tags(text: &str) -> (usize, usize) {
    (
        text.matches("<agentbus-message ").count(),
        text.matches("</agentbus-message>").count(),
    )
}

#[test]
fn lm_27_lm_38_frames_render_as_snapshotted_and_stay_one_frame() {
    let raw = std::fs::read_to_string(data("frames.json")).unwrap();
    let cases: Vec<Case> = serde_json::from_str(&raw).unwrap();
    for case in cases {
        let f = Fixture::new();
        f.start("s1");
        let kind = if case.kind == "ask" {
            Kind::Ask
        } else {
            Kind::Tell
        };
        let from = Sender {
            by: "3f2a9c1e-7b6d-4e1f-9a8b-0c1d2e3f4a5b".into(),
            name: case.sender_name.clone(),
            harness: Some("codex".into()),
        };
        f.send(&from, &f.session("s1"), kind, &case.text).unwrap();
        let msgs = f.store.read().unwrap();
        let r = Recipient {
            session: "s1".into(),
            node: f.node(),
            started_ms: Some(0),
            agent: None,
        };
        let shown = for_session(&msgs, &r, f.store.now());
        let block = render_block(&select(&shown, Some("s1"), 9_000, f.store.now()));
        assert_eq!(tags(&block), (1, 1), "{}: one frame", case.name);
        assert!(
            block.contains("agentbus reply lm_"),
            "{}: the answering command",
            case.name
        );
        insta::assert_snapshot!(case.name.clone(), block);
    }
}
