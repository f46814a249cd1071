//! A tool call that waits (`send` with `wait_s`) returns what it waited for as structured
//! fields and shows that message alone: the session's other mail stays unread for `read_inbox`.

use serde_json::json;

use agentbus_local::{Address, Kind, Outgoing, Sender};

use crate::{Fixture, SID, rt};

#[test]
fn a_wait_returns_the_reply_as_structured_fields_and_leaves_other_mail_unread() {
    let f = Fixture::new();
    f.store
        .register("s2", "claude", Some("peer"), None)
        .unwrap();
    f.from_engineer(Kind::Tell, "unrelated one");
    // Another sender (the engineer's window to the session holds one unanswered message).
    f.store.register("s3", "codex", None, None).unwrap();
    f.clock.advance_ms(1);
    let other = Outgoing {
        from: Sender {
            by: "s3".into(),
            name: None,
            harness: Some("codex".into()),
        },
        to: Address::Session {
            session: SID.into(),
            node: f.store.node().unwrap(),
        },
        kind: Kind::Tell,
        text: "unrelated two".into(),
        re: None,
    };
    f.store.send(&other, false).unwrap();
    // The peer answers the ask once it is in the log (no timer: it looks until it is there).
    let store = f.store.clone();
    let peer = std::thread::spawn(move || {
        let ask = loop {
            if let Some(m) = store
                .read()
                .unwrap()
                .into_iter()
                .find(|m| m.text == "is the build green?")
            {
                break m;
            }
            std::thread::yield_now();
        };
        let out = Outgoing {
            from: Sender {
                by: "s2".into(),
                name: Some("peer".into()),
                harness: Some("claude".into()),
            },
            to: Address::Session {
                session: SID.into(),
                node: store.node().unwrap(),
            },
            kind: Kind::Tell,
            text: "yes, green".into(),
            re: Some(ask.id),
        };
        store.send(&out, false).unwrap();
    });
    let session = f.session();
    let out = rt()
        .block_on(session.call(
            "send",
            json!({"to": "s2", "text": "is the build green?", "wait_s": 30}),
        ))
        .unwrap();
    peer.join().unwrap();
    let reply = &out.structured["reply"];
    assert!(reply["id"].as_str().unwrap().starts_with("lm_"), "{reply}");
    assert!(reply["from"].as_str().unwrap().contains("peer"), "{reply}");
    let frame = reply["frame"].as_str().unwrap();
    assert!(
        frame.contains("<agentbus-message") && frame.contains("yes, green"),
        "{frame}"
    );
    assert_eq!(out.structured["shown"].as_array().unwrap().len(), 1);
    assert_eq!(out.structured["waiting"], 2);
    // What the model reads either way (the text, or every string of the structured content, as
    // Claude Code and Codex hand it over) holds the reply once, and nothing else of the inbox.
    let mut structured = String::new();
    crate::calls::strings_of(&out.structured, &mut structured);
    for text in [&out.text, &structured] {
        assert_eq!(text.matches("yes, green").count(), 1, "{text}");
        assert!(!text.contains("unrelated"), "{text}");
    }
    let (left, _) = f.store.waiting_for(SID).unwrap();
    let texts: Vec<&str> = left.iter().map(|m| m.text.as_str()).collect();
    assert_eq!(texts, ["unrelated one", "unrelated two"]);
}
