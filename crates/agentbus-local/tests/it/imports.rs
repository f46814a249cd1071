//! The one delivery path (issue item 9): messages another transport imports are claimed,
//! budgeted and framed like local ones, named by their transport, and shown once.

use agentbus_local::{Harness, ImportError, ImportOutcome, InboundMessage};
use agentbus_protocol::frame::{Transport, Verified};
use agentbus_protocol::timestamp::Timestamp;

use crate::{Fixture, T0};

fn inbound(transport: Transport, id: &str, recipient: &str) -> InboundMessage {
    InboundMessage {
        transport,
        transport_id: id.into(),
        from: match transport {
            Transport::Share => "share:globex/planner".into(),
            _ => "agent://acme/frontend/builder".into(),
        },
        kind: "agentbus.message.v1".into(),
        conversation: Some("cnv_01J9ZK6Q8R2M3N4P5Q6R7S8T9V".into()),
        subject: Some("build status".into()),
        body: "the frontend build is green; api_key=abcdefgh12345678".into(),
        verified: Verified::True,
        attachments: vec!["/tmp/agentbus/att/report.txt".into()],
        reply_command: Some(format!("agentbus reply {id} \"<your answer>\"")),
        sent: Timestamp(T0 - 5_000),
        recipient: recipient.into(),
    }
}

#[test]
fn an_imported_gateway_message_reaches_the_bound_session_once_framed_as_gateway() {
    let f = Fixture::new();
    f.start("s1");
    f.store
        .bind("s1", Some("agent://acme/backend/reviewer"))
        .unwrap();
    let msg = inbound(
        Transport::Gateway,
        "msg_01J9ZK6Q8R2M3N4P5Q6R7S8T9V",
        "agent://acme/backend/reviewer",
    );
    let ImportOutcome::Stored { id } = f.store.import(&msg).unwrap() else {
        panic!("not stored")
    };
    assert_eq!(
        f.store.import(&msg).unwrap(),
        ImportOutcome::Duplicate { id: id.clone() }
    );
    assert_eq!(
        f.store.read().unwrap().len(),
        1,
        "importing twice stores once"
    );
    let (_, a) = f.hook(Harness::Claude, "claude-prompt.json", "s1");
    let ctx = a.context.unwrap();
    assert_eq!(a.shown_ids, [id]);
    assert!(
        ctx.contains("transport=\"gateway\"") && ctx.contains("verified=\"true\""),
        "{ctx}"
    );
    assert!(ctx.contains("agentbus reply msg_01J9ZK6Q8R2M3N4P5Q6R7S8T9V"));
    assert!(!ctx.contains("abcdefgh12345678"), "redacted on import");
    let (_, again) = f.hook(Harness::Claude, "claude-prompt.json", "s1");
    assert!(again.context.is_none());
}

#[test]
fn an_imported_share_message_with_no_bound_session_goes_to_the_engineer() {
    let f = Fixture::new();
    f.start("s1");
    let msg = inbound(
        Transport::Share,
        "messages/acme/reviewer/20261130-globex-planner-x.md",
        "share:acme/reviewer",
    );
    f.store.import(&msg).unwrap();
    let (_, a) = f.hook(Harness::Claude, "claude-prompt.json", "s1");
    assert!(
        a.context.is_none(),
        "no session is bound to share:acme/reviewer"
    );
    let items = f.store.inbox(Some("ada@example.com"), false).unwrap();
    assert_eq!(items.len(), 1);
    assert_eq!(
        items[0].message.via.as_ref().unwrap().transport,
        Transport::Share
    );
    f.store
        .ack_engineer(Some("ada@example.com"), &items)
        .unwrap();
    assert!(
        f.store
            .inbox(Some("ada@example.com"), false)
            .unwrap()
            .is_empty()
    );
}

#[test]
fn an_import_moves_the_generation_and_a_bound_session_sees_it_from_its_first_event() {
    let f = Fixture::new();
    let before = f.store.generation();
    f.store
        .import(&inbound(
            Transport::Gateway,
            "msg_1",
            "agent://acme/backend/reviewer",
        ))
        .unwrap();
    assert!(f.store.generation() > before);
    let env = agentbus_local::HookEnv {
        agent: Some("agent://acme/backend/reviewer".into()),
        ..Default::default()
    };
    let ev = crate::event(Harness::Codex, "codex-prompt.json", "s9");
    let a = f.store.hook(&ev, &env).unwrap();
    assert!(a.context.unwrap().contains("the frontend build is green"));
}

#[test]
fn imports_refuse_the_local_transport_and_non_identities() {
    let f = Fixture::new();
    let mut m = inbound(Transport::Local, "x", "agent://a/b/c");
    assert!(matches!(
        f.store.import(&m),
        Err(ImportError::LocalTransport)
    ));
    m.transport = Transport::Gateway;
    m.recipient = "s1@n0de1".into();
    assert!(matches!(
        f.store.import(&m),
        Err(ImportError::BadRecipient(_))
    ));
}
