//! The one delivery path (issue item 9): messages another transport imports are claimed,
//! budgeted and framed like local ones, named by their transport, and shown once.

use agentbus_local::view::Agents;
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
        message_id: None,
        task: None,
        late: false,
        expires_ms: None,
        held: None,
        priority: agentbus_local::Priority::Normal,
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
    let items = f
        .store
        .inbox(Some("ada@example.com"), false, &Agents::All)
        .unwrap();
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
            .inbox(Some("ada@example.com"), false, &Agents::All)
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

/// Imports `msg` and returns its local id.
fn stored(f: &Fixture, msg: &InboundMessage) -> String {
    match f.store.import(msg).unwrap() {
        ImportOutcome::Stored { id } => id,
        other => panic!("not stored: {other:?}"),
    }
}

fn bound_fixture() -> Fixture {
    let f = Fixture::new();
    f.start("s1");
    f.store
        .bind("s1", Some("agent://acme/backend/reviewer"))
        .unwrap();
    f
}

const MSG: &str = "msg_01J9ZK6Q8R2M3N4P5Q6R7S8T9V";

/// An MCP server's delivery surface at `event`.
fn mcp_surface(event: &'static str, budget: usize) -> agentbus_local::Surface<'static> {
    agentbus_local::Surface {
        name: "mcp",
        event,
        budget,
        answer: agentbus_local::deliver::AnswerWith::Tools,
    }
}

#[test]
fn an_mcp_surface_names_the_tool_and_id_to_answer_with() {
    let f = bound_fixture();
    let mut task = inbound(
        Transport::Gateway,
        "msg_01J9ZK6Q8R2M3N4P5Q6R7S8T1A",
        REVIEWER,
    );
    task.kind = "agentbus.task.request.v1".into();
    task.task = Some("tsk_01J9ZK8A0000000000000000T1".into());
    task.reply_command = Some("agentbus accept tsk_01J9ZK8A0000000000000000T1".into());
    f.store.import(&task).unwrap();
    f.store
        .import(&inbound(Transport::Gateway, MSG, REVIEWER))
        .unwrap();
    let d = f
        .store
        .deliver("s1", &mcp_surface("tools/call", 8_000))
        .unwrap();
    let ctx = d.context.unwrap();
    assert!(
        ctx.contains(&format!(
            "To answer: the reply tool with {{\"id\": \"{MSG}\""
        )),
        "{ctx}"
    );
    assert!(
        ctx.contains(
            "To answer: the task tool with {\"task\": \"tsk_01J9ZK8A0000000000000000T1\", \"action\": \"accept\"}"
        ),
        "{ctx}"
    );
    assert!(
        !ctx.contains("agentbus "),
        "no shell command on an MCP surface: {ctx}"
    );
}

#[test]
fn deliver_only_shows_the_awaited_message_and_leaves_the_rest_unread() {
    let f = bound_fixture();
    let ImportOutcome::Stored { id: first } = f
        .store
        .import(&inbound(Transport::Gateway, MSG, REVIEWER))
        .unwrap()
    else {
        panic!("not stored")
    };
    let ImportOutcome::Stored { id: awaited } = f
        .store
        .import(&inbound(
            Transport::Gateway,
            "msg_01J9ZK6Q8R2M3N4P5Q6R7S8T1B",
            REVIEWER,
        ))
        .unwrap()
    else {
        panic!("not stored")
    };
    let d = f
        .store
        .deliver_only(
            "s1",
            &mcp_surface("tools/call", 8_000),
            std::slice::from_ref(&awaited),
        )
        .unwrap();
    assert_eq!(d.shown_ids, std::slice::from_ref(&awaited));
    let (left, _) = f.store.waiting_for("s1").unwrap();
    assert_eq!(
        left.iter().map(|m| m.id.clone()).collect::<Vec<_>>(),
        [first]
    );
    assert!(f.store.shown_record(REVIEWER, &awaited).is_some());
}

#[test]
fn a_push_is_recorded_pushed_and_a_later_showing_shown_both_reported() {
    use agentbus_local::shown::SeenState;
    let f = bound_fixture();
    f.store
        .import(&inbound(Transport::Gateway, MSG, REVIEWER))
        .unwrap();
    let (waiting, _) = f.store.waiting_for("s1").unwrap();
    let m = &waiting[0];
    assert!(
        f.store
            .record_pushed(m, "s1", "mcp", "notifications/claude/channel")
            .unwrap()
    );
    assert!(
        !f.store
            .record_pushed(m, "s1", "mcp", "notifications/claude/channel")
            .unwrap()
    );
    // The push claimed nothing: the hook still shows it, and that is recorded shown.
    let (_, a) = f.hook(Harness::Claude, "claude-prompt.json", "s1");
    assert!(a.context.unwrap().contains(MSG));
    let pending = f.store.shown_pending(REVIEWER).unwrap();
    let states: Vec<SeenState> = pending.iter().map(|r| r.state).collect();
    assert_eq!(states, [SeenState::Pushed, SeenState::Shown]);
    for r in &pending {
        f.store.shown_reported(r).unwrap();
    }
    assert!(f.store.shown_pending(REVIEWER).unwrap().is_empty());
    // Once shown, a push is no news.
    assert!(
        !f.store
            .record_pushed(m, "s1", "mcp", "notifications/claude/channel")
            .unwrap()
    );
}
const REVIEWER: &str = "agent://acme/backend/reviewer";

#[test]
fn wp_13_1_2_a_gateway_frame_is_named_by_its_envelope_id_with_task_and_late() {
    let f = bound_fixture();
    let mut msg = inbound(Transport::Gateway, MSG, REVIEWER);
    msg.kind = "agentbus.task.result.v1".into();
    msg.task = Some("tsk_01J9ZK8A0000000000000000T1".into());
    msg.late = true;
    msg.reply_command = None;
    let ImportOutcome::Stored { id } = f.store.import(&msg).unwrap() else {
        panic!("not stored")
    };
    let (_, a) = f.hook(Harness::Claude, "claude-prompt.json", "s1");
    let ctx = a.context.unwrap();
    let header = ctx
        .lines()
        .find(|l| l.starts_with("<agentbus-message"))
        .unwrap();
    assert!(
        header.starts_with(&format!("<agentbus-message id=\"{MSG}\"")),
        "{header}"
    );
    assert!(header.contains(&format!("local_id=\"{id}\"")), "{header}");
    assert!(
        header.contains("task=\"tsk_01J9ZK8A0000000000000000T1\""),
        "{header}"
    );
    assert!(header.contains("late=\"true\""), "{header}");
    assert!(ctx.contains("Warning: this arrived after the task had ended"));
    assert!(
        !ctx.contains("To answer:"),
        "a result calls for no answer: {ctx}"
    );
}

#[test]
fn wp_5_8_a_gateway_message_shown_is_recorded_once_with_where_it_was_shown() {
    let f = bound_fixture();
    f.start("s2");
    f.store.bind("s2", Some(REVIEWER)).unwrap();
    let id = stored(&f, &inbound(Transport::Gateway, MSG, REVIEWER));
    // An event whose answer the model does not see records nothing.
    let (_, a) = f.hook(Harness::OpenCode, "opencode-pretool.json", "s1");
    assert!(a.shown_ids.is_empty());
    assert!(f.store.shown_pending(REVIEWER).unwrap().is_empty());
    f.clock.advance_ms(1_500);
    let (_, a) = f.hook(Harness::Claude, "claude-prompt.json", "s1");
    assert_eq!(a.shown_ids, std::slice::from_ref(&id));
    // A second session bound to the same agent is not shown it again; the first showing stands.
    f.clock.advance_ms(1_500);
    let (_, b) = f.hook(Harness::Codex, "codex-prompt.json", "s2");
    assert!(b.shown_ids.is_empty());
    let pending = f.store.shown_pending(REVIEWER).unwrap();
    assert_eq!(pending.len(), 1, "{pending:?}");
    let r = &pending[0];
    assert_eq!((r.id.as_str(), r.message_id.as_str()), (id.as_str(), MSG));
    assert_eq!((r.by.as_str(), r.harness.as_str()), ("s1", "claude"));
    assert_eq!(r.event, "UserPromptSubmit");
    assert_eq!(r.ms, crate::T0 + 1_500);
    assert!(
        f.store
            .shown_pending("agent://acme/backend/other")
            .unwrap()
            .is_empty()
    );
    // Once reported, it is not pending, and no later showing records it again.
    f.store.shown_reported(r).unwrap();
    assert!(f.store.shown_pending(REVIEWER).unwrap().is_empty());
    let msg = f
        .store
        .read()
        .unwrap()
        .into_iter()
        .find(|m| m.id == id)
        .unwrap();
    assert!(
        !f.store
            .record_shown(&msg, "engineer", "inbox", "show")
            .unwrap()
    );
    assert!(f.store.shown_pending(REVIEWER).unwrap().is_empty());
}

#[test]
fn an_identitys_message_is_shown_once_to_whichever_bound_session_looks_first() {
    let f = bound_fixture();
    f.start("s2");
    f.store.bind("s2", Some(REVIEWER)).unwrap();
    let id = stored(&f, &inbound(Transport::Gateway, MSG, REVIEWER));
    let unread = |f: &Fixture, sid: &str| {
        let views = f.store.session_views().unwrap();
        views
            .iter()
            .find(|v| v.presence.session == sid)
            .unwrap()
            .unread
    };
    assert_eq!((unread(&f, "s1"), unread(&f, "s2")), (1, 1));
    let (_, b) = f.hook(Harness::Codex, "codex-prompt.json", "s2");
    assert_eq!(b.shown_ids, std::slice::from_ref(&id));
    // The other session bound to it neither shows it nor counts it as waiting.
    assert_eq!((unread(&f, "s1"), unread(&f, "s2")), (0, 0));
    let (_, a) = f.hook(Harness::Claude, "claude-prompt.json", "s1");
    assert!(a.shown_ids.is_empty() && a.context.is_none(), "{a:?}");
    assert!(f.store.waiting_for("s1").unwrap().0.is_empty());
    // Nor does a session started since (a harness restarted with a new session id).
    f.clock.advance_ms(60_000);
    let env = agentbus_local::HookEnv {
        agent: Some(REVIEWER.into()),
        ..Default::default()
    };
    let ev = crate::event(Harness::Claude, "claude-prompt.json", "s3");
    assert!(f.store.hook(&ev, &env).unwrap().shown_ids.is_empty());
    // A session bound to another identity was never its recipient.
    assert!(!f.store.claims("s1").unwrap().contains(&id));
    assert!(f.store.claims("s2").unwrap().contains(&id));
}

#[test]
fn racing_sessions_of_one_identity_show_each_of_its_messages_once() {
    let f = Fixture::new();
    let sessions: Vec<String> = (0..12).map(|i| format!("race{i}")).collect();
    for s in &sessions {
        f.start(s);
        f.store.bind(s, Some(REVIEWER)).unwrap();
    }
    let ids: Vec<String> = (0..5)
        .map(|i| {
            stored(
                &f,
                &inbound(Transport::Gateway, &format!("msg_{i}"), REVIEWER),
            )
        })
        .collect();
    let shown: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = sessions
            .iter()
            .map(|s| {
                let f = &f;
                scope.spawn(move || f.hook(Harness::Claude, "claude-prompt.json", s).1.shown_ids)
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    let mut sorted = shown.clone();
    sorted.sort();
    let mut want = ids.clone();
    want.sort();
    assert_eq!(
        sorted, want,
        "each message shown exactly once across the sessions"
    );
}

#[test]
fn an_offer_withdrawn_is_shown_at_the_next_look_and_one_confirmed_is_recorded() {
    let f = bound_fixture();
    let id = stored(&f, &inbound(Transport::Gateway, MSG, REVIEWER));
    let surface = mcp_surface("notifications/claude/channel", 8_000);
    let offer = f.store.offer("s1", &surface).unwrap();
    assert_eq!(offer.delivery.shown_ids, std::slice::from_ref(&id));
    // Claimed while it is offered: no racing look shows it meanwhile, and no view lists it as
    // shown yet.
    assert!(f.store.waiting_for("s1").unwrap().0.is_empty());
    assert!(f.store.session_views().unwrap()[0].shown.is_empty());
    assert!(f.store.seen_by().unwrap().is_empty());
    // The notification could not be sent: nothing counts it shown.
    f.store.withdraw(offer);
    assert!(f.store.claims("s1").unwrap().is_empty());
    assert!(f.store.shown_pending(REVIEWER).unwrap().is_empty());
    assert!(!f.log().contains("\"seen\""), "no Seen line: {}", f.log());
    assert_eq!(f.store.waiting_for("s1").unwrap().0.len(), 1);
    // Offered again and sent: recorded and acknowledged.
    let offer = f.store.offer("s1", &surface).unwrap();
    let d = f.store.confirm(offer).unwrap();
    assert_eq!(d.shown_ids, std::slice::from_ref(&id));
    let pending = f.store.shown_pending(REVIEWER).unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].event, "notifications/claude/channel");
    let (_, a) = f.hook(Harness::Claude, "claude-prompt.json", "s1");
    assert!(a.shown_ids.is_empty());
}

#[test]
fn wp_13_1_5_a_held_message_is_never_injected_and_stays_in_the_inbox_marked() {
    let f = bound_fixture();
    let mut msg = inbound(Transport::Gateway, MSG, REVIEWER);
    msg.verified = Verified::False;
    msg.held = Some("require_verified_inbound".into());
    f.store.import(&msg).unwrap();
    for file in [
        "claude-prompt.json",
        "claude-pretool.json",
        "claude-posttool.json",
    ] {
        let (_, a) = f.hook(Harness::Claude, file, "s1");
        assert!(a.context.is_none() && a.shown_ids.is_empty(), "{file}");
    }
    assert!(f.store.claims("s1").unwrap().is_empty());
    // The session is bound, yet the engineer's inbox lists it: held messages are the engineer's.
    let items = f.store.inbox(None, false, &Agents::All).unwrap();
    assert_eq!(items.len(), 1);
    let via = items[0].message.via.as_ref().unwrap();
    assert_eq!(via.held.as_deref(), Some("require_verified_inbound"));
    assert_eq!(via.verified, Verified::False);
    let views = f.store.session_views().unwrap();
    assert_eq!(
        views[0].unread, 0,
        "a held message is not the session's to read"
    );
}

#[test]
fn deliver_claims_frames_acknowledges_and_records_like_the_hook() {
    let f = bound_fixture();
    let id = stored(&f, &inbound(Transport::Gateway, MSG, REVIEWER));
    let surface = mcp_surface("tools/call", 8_000);
    let d = f.store.deliver("s1", &surface).unwrap();
    assert_eq!(d.shown_ids, std::slice::from_ref(&id));
    assert!(d.context.unwrap().contains(&format!("id=\"{MSG}\"")));
    assert!(f.store.claims("s1").unwrap().contains(&id));
    let pending = f.store.shown_pending(REVIEWER).unwrap();
    assert_eq!(
        (pending[0].harness.as_str(), pending[0].event.as_str()),
        ("mcp", "tools/call")
    );
    // Shown once: neither a second delivery nor the session's hook shows it again.
    assert!(
        f.store
            .deliver("s1", &surface)
            .unwrap()
            .shown_ids
            .is_empty()
    );
    let (_, a) = f.hook(Harness::Claude, "claude-prompt.json", "s1");
    assert!(a.shown_ids.is_empty());
}

#[test]
fn an_import_waits_for_room_rather_than_push_out_a_message_no_session_was_shown() {
    let f = bound_fixture();
    // Fill this identity's share of the log; a local broadcast beside it takes none of it.
    let mut stored_ids = Vec::new();
    let full = loop {
        f.clock.advance_ms(10);
        match f.store.import(&big(stored_ids.len())).unwrap() {
            ImportOutcome::Stored { id } => stored_ids.push(id),
            other => break other,
        }
        assert!(stored_ids.len() < 200, "never full");
    };
    let ImportOutcome::Full { pushed, .. } = full else {
        panic!("{full:?}")
    };
    assert_eq!(
        pushed, stored_ids[0],
        "the oldest unshown one would have gone"
    );
    assert_eq!(f.store.stats().dropped, 0, "nothing was cut");
    let held: Vec<String> = f.store.read().unwrap().into_iter().map(|m| m.id).collect();
    assert!(stored_ids.iter().all(|id| held.contains(id)));
    // Another identity's mail has its own share.
    let other = inbound(
        Transport::Gateway,
        "msg_other",
        "agent://acme/backend/other",
    );
    assert!(matches!(
        f.store.import(&other).unwrap(),
        ImportOutcome::Stored { .. }
    ));
    // The session is shown them, newest first, one head per prompt; until the oldest is shown,
    // there is still no room.
    let mut shown = Vec::new();
    while shown.len() < stored_ids.len() {
        assert!(matches!(
            f.store.import(&big(999)).unwrap(),
            ImportOutcome::Full { .. }
        ));
        f.clock.advance_ms(10);
        let (_, a) = f.hook(Harness::Claude, "claude-prompt.json", "s1");
        assert!(!a.shown_ids.is_empty(), "a prompt shows one");
        shown.extend(a.shown_ids);
    }
    // Every one was shown once, none cut unseen; now the next import pushes out a shown one.
    shown.sort();
    let mut want = stored_ids.clone();
    want.sort();
    assert_eq!(shown, want);
    assert!(matches!(
        f.store.import(&big(999)).unwrap(),
        ImportOutcome::Stored { .. }
    ));
    assert_eq!(f.store.stats().dropped, 1);
}

#[test]
fn an_import_for_an_identity_no_session_is_bound_to_has_room_once_the_engineer_read_its_mail() {
    let f = Fixture::new();
    let unbound = "share:acme/nobody";
    let big = |i: usize| {
        let mut m = inbound(
            Transport::Share,
            &format!("messages/acme/nobody/{i}.md"),
            unbound,
        );
        m.body = format!("{i} {}", "x".repeat(15_000));
        m
    };
    let mut n = 0;
    while let ImportOutcome::Stored { .. } = f.store.import(&big(n)).unwrap() {
        n += 1;
        f.clock.advance_ms(10);
        assert!(n < 200, "never full");
    }
    let items = f.store.inbox(None, false, &Agents::All).unwrap();
    assert_eq!(items.len(), n);
    f.store.ack_engineer(None, &items).unwrap();
    assert!(matches!(
        f.store.import(&big(n)).unwrap(),
        ImportOutcome::Stored { .. }
    ));
}

#[test]
fn a_share_message_offered_again_after_its_line_left_the_log_is_not_shown_again() {
    let f = Fixture::new();
    f.start("s1");
    f.store.bind("s1", Some("share:acme/reviewer")).unwrap();
    let msg = inbound(
        Transport::Share,
        "messages/acme/reviewer/20261130-globex-planner-x.md#share:acme/reviewer",
        "share:acme/reviewer",
    );
    let id = stored(&f, &msg);
    let (_, a) = f.hook(Harness::Claude, "claude-prompt.json", "s1");
    assert_eq!(a.shown_ids, std::slice::from_ref(&id));
    // A week and the slack later, any write drops the line from the log.
    f.clock
        .advance_ms(agentbus_local::consts::TTL_MS + agentbus_local::consts::SLACK_MS + 1);
    f.store
        .import(&inbound(Transport::Gateway, MSG, REVIEWER))
        .unwrap();
    assert!(f.store.read().unwrap().iter().all(|m| m.id != id));
    // The share still holds the file, and the next sync offers it again.
    assert_eq!(
        f.store.import(&msg).unwrap(),
        ImportOutcome::Duplicate { id: id.clone() }
    );
    assert!(f.store.read().unwrap().iter().all(|m| m.id != id));
    let (_, again) = f.hook(Harness::Claude, "claude-prompt.json", "s1");
    assert!(again.shown_ids.is_empty(), "{again:?}");
}

/// A 15,000-character gateway message for `REVIEWER`, numbered `i`.
fn big(i: usize) -> InboundMessage {
    let mut m = inbound(Transport::Gateway, &format!("msg_big{i}"), REVIEWER);
    m.body = format!("{i} {}", "x".repeat(15_000));
    m
}

#[test]
fn held_messages_never_hold_an_identitys_mail_back() {
    let f = bound_fixture();
    // Far more unverifiable mail than the identity's share holds: never refused as full.
    for i in 0..90 {
        let mut m = big(i);
        m.verified = Verified::False;
        m.held = Some("require_verified_inbound".into());
        f.clock.advance_ms(10);
        assert!(
            matches!(f.store.import(&m).unwrap(), ImportOutcome::Stored { .. }),
            "held message {i}"
        );
    }
    assert!(f.store.stats().dropped > 0);
    // And the mail after it still comes in.
    assert!(matches!(
        f.store.import(&big(1000)).unwrap(),
        ImportOutcome::Stored { .. }
    ));
}

#[test]
fn claims_made_before_identities_had_their_own_still_count_for_the_identity() {
    let f = bound_fixture();
    let id = stored(&f, &inbound(Transport::Gateway, MSG, REVIEWER));
    // As an earlier version claimed it: in the session's folder only.
    assert!(f.store.claim("s1", &id).unwrap());
    std::fs::remove_dir_all(f.dir.path().join("messages/claimed")).ok();
    // A new session of the identity (a harness restarted) is not shown it again.
    let env = agentbus_local::HookEnv {
        agent: Some(REVIEWER.into()),
        ..Default::default()
    };
    let ev = crate::event(Harness::Claude, "claude-prompt.json", "s2");
    assert!(f.store.hook(&ev, &env).unwrap().shown_ids.is_empty());
    assert!(f.store.identity_claims(REVIEWER).unwrap().contains(&id));
}

#[test]
fn an_offer_out_is_not_shown_so_it_is_neither_pushed_out_nor_acknowledged_and_dropping_it_gives_it_back()
 {
    let f = bound_fixture();
    let surface = mcp_surface("notifications/claude/channel", 100_000);
    let first = stored(&f, &big(0));
    let offer = f.store.offer("s1", &surface).unwrap();
    assert_eq!(offer.delivery.shown_ids, std::slice::from_ref(&first));
    // A look of the same session meanwhile (the hook beside an MCP server given its --session)
    // acknowledges nothing it holds.
    f.clock.advance_ms(10);
    stored(&f, &inbound(Transport::Gateway, "msg_small", REVIEWER));
    f.hook(Harness::Claude, "claude-prompt.json", "s1");
    let seen_lines: Vec<String> = f
        .log()
        .lines()
        .filter(|l| l.contains("\"seen\"") && l.contains(&first))
        .map(str::to_owned)
        .collect();
    assert!(seen_lines.is_empty(), "{seen_lines:?}");
    // Imports may not push it out while it is only offered.
    let mut n = 1;
    loop {
        f.clock.advance_ms(10);
        match f.store.import(&big(n)).unwrap() {
            ImportOutcome::Stored { .. } => n += 1,
            ImportOutcome::Full { pushed, .. } => {
                assert_eq!(pushed, first);
                break;
            }
            other => panic!("{other:?}"),
        }
        assert!(n < 200, "never full");
    }
    // Dropped unconfirmed (its task cancelled mid-send), it gives its claims back.
    drop(offer);
    assert!(!f.store.claims("s1").unwrap().contains(&first));
    assert!(!f.store.identity_claims(REVIEWER).unwrap().contains(&first));
}

#[test]
fn a_withdrawn_offer_wakes_the_idle_sessions_of_its_identity() {
    let f = bound_fixture();
    f.start("s2");
    f.store.bind("s2", Some(REVIEWER)).unwrap();
    let id = stored(&f, &inbound(Transport::Gateway, MSG, REVIEWER));
    let surface = mcp_surface("notifications/claude/channel", 8_000);
    let offer = f.store.offer("s1", &surface).unwrap();
    // While s1's offer is out, s2 has nothing to show, and its next event answers idle.
    let (_, a) = f.hook(Harness::Claude, "claude-prompt.json", "s2");
    assert!(a.shown_ids.is_empty());
    let (_, idle) = f.hook(Harness::Claude, "claude-prompt.json", "s2");
    assert!(idle.idle);
    f.store.withdraw(offer);
    let (_, b) = f.hook(Harness::Claude, "claude-prompt.json", "s2");
    assert_eq!(b.shown_ids, [id]);
}

#[test]
fn an_offer_its_process_never_settled_is_given_back_once_its_lease_ran_out() {
    let f = bound_fixture();
    f.start("s2");
    f.store.bind("s2", Some(REVIEWER)).unwrap();
    let id = stored(&f, &inbound(Transport::Gateway, MSG, REVIEWER));
    let surface = mcp_surface("notifications/claude/channel", 8_000);
    // The MCP server dies while it sends: no confirm, no withdraw, no drop.
    std::mem::forget(f.store.offer("s1", &surface).unwrap());
    let (_, a) = f.hook(Harness::Claude, "claude-prompt.json", "s2");
    assert!(a.shown_ids.is_empty(), "still out: {a:?}");
    f.clock.advance_ms(agentbus_local::hook::OFFER_LEASE_MS + 1);
    stored(&f, &inbound(Transport::Gateway, "msg_later", REVIEWER));
    let (_, b) = f.hook(Harness::Claude, "claude-prompt.json", "s2");
    assert!(b.shown_ids.contains(&id), "{b:?}");
}

#[test]
fn claims_an_earlier_version_made_of_a_broadcast_stay_that_sessions_alone() {
    let f = bound_fixture();
    f.start("s2");
    f.store.bind("s2", Some(REVIEWER)).unwrap();
    f.clock.advance_ms(1_000);
    let all = f.tell(
        &crate::engineer(),
        &agentbus_local::Address::All,
        "all hands at 3",
    );
    assert!(f.store.claim("s1", &all).unwrap());
    std::fs::remove_dir_all(f.dir.path().join("messages/claimed")).ok();
    let (_, a) = f.hook(Harness::Claude, "claude-prompt.json", "s2");
    assert_eq!(a.shown_ids, [all]);
}

#[test]
fn an_abandoned_offer_is_given_back_after_a_clock_stepped_back_and_when_its_session_is_forgotten() {
    let f = bound_fixture();
    f.start("s2");
    f.store.bind("s2", Some(REVIEWER)).unwrap();
    let surface = mcp_surface("notifications/claude/channel", 8_000);
    let id = stored(&f, &inbound(Transport::Gateway, MSG, REVIEWER));
    f.clock.advance_ms(600_000);
    std::mem::forget(f.store.offer("s1", &surface).unwrap());
    // The clock steps back past the lease: the offer's stamp is ahead of any live one.
    let back = crate::T0 + 600_000 - agentbus_local::hook::OFFER_LEASE_MS - 1_000;
    f.clock.set(agentbus_protocol::timestamp::Timestamp(back));
    stored(&f, &inbound(Transport::Gateway, "msg_later", REVIEWER));
    let (_, a) = f.hook(Harness::Claude, "claude-prompt.json", "s2");
    assert!(a.shown_ids.contains(&id), "{a:?}");
    // An offer out when its session is forgotten gives its identity claim back too.
    let id2 = stored(&f, &inbound(Transport::Gateway, "msg_third", REVIEWER));
    std::mem::forget(f.store.offer("s1", &surface).unwrap());
    assert!(f.store.identity_claims(REVIEWER).unwrap().contains(&id2));
    f.store.forget("s1").unwrap();
    assert!(!f.store.identity_claims(REVIEWER).unwrap().contains(&id2));
    assert!(!f.dir.path().join("messages/offers/s1").exists());
}

#[test]
fn an_engineers_view_records_no_showing_of_an_agents_message() {
    // No session is bound to the reviewer: its message is the engineer's to look at, and a
    // look puts it in front of no model, so no "shown" record (the sidecar's receipt) is made.
    let f = Fixture::new();
    let id = stored(&f, &inbound(Transport::Gateway, MSG, REVIEWER));
    let items = f.store.inbox(None, false, &Agents::All).unwrap();
    assert_eq!(items.len(), 1);
    assert_eq!(f.store.ack_engineer(None, &items).unwrap(), 1);
    assert!(f.store.shown_pending(REVIEWER).unwrap().is_empty());
    assert!(f.store.shown_record(REVIEWER, &id).is_none());
    // The engineer's own Seen stands: the next look lists nothing new.
    assert!(f.store.inbox(None, false, &Agents::All).unwrap().is_empty());
    // And a session bound later is still shown it, and that showing is recorded.
    f.start("s1");
    f.store.bind("s1", Some(REVIEWER)).unwrap();
    let (_, a) = f.hook(Harness::Claude, "claude-prompt.json", "s1");
    assert_eq!(a.shown_ids, std::slice::from_ref(&id));
    assert_eq!(f.store.shown_record(REVIEWER, &id).unwrap().by, "s1");
}

#[test]
fn an_inbox_lists_the_chosen_agents_mail_and_every_agents_only_when_asked() {
    let f = Fixture::new();
    const OTHER: &str = "agent://acme/backend/other";
    stored(&f, &inbound(Transport::Gateway, MSG, REVIEWER));
    stored(
        &f,
        &inbound(Transport::Gateway, "msg_01J9ZK6Q8R2M3N4P5Q6R7S8T9W", OTHER),
    );
    stored(
        &f,
        &inbound(
            Transport::Share,
            "messages/acme/reviewer/20261130-globex-planner-x.md",
            "share:acme/reviewer",
        ),
    );
    let to = |agents: &Agents| -> Vec<String> {
        let mut v: Vec<String> = f
            .store
            .inbox(None, false, agents)
            .unwrap()
            .into_iter()
            .map(|i| i.message.to)
            .collect();
        v.sort();
        v
    };
    assert_eq!(
        to(&Agents::Only(vec![REVIEWER.into()])),
        [REVIEWER, "share:acme/reviewer"]
    );
    assert_eq!(to(&Agents::Only(Vec::new())), ["share:acme/reviewer"]);
    assert_eq!(to(&Agents::All), [OTHER, REVIEWER, "share:acme/reviewer"]);
    // A view of the reviewer's mail acknowledges nothing of the other agent's.
    let mine = f
        .store
        .inbox(None, false, &Agents::Only(vec![REVIEWER.into()]))
        .unwrap();
    f.store.ack_engineer(None, &mine).unwrap();
    assert_eq!(to(&Agents::All), [OTHER]);
}
