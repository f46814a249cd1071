//! The end of a turn (`Stop`, OpenCode's `session.idle`): a waiting message whose priority asks
//! for it keeps the session going, shown once, within the bound on continuations; and the frames
//! and notes a turn shows (one pause note per turn, the engineer's messages framed as theirs).

use agentbus_local::consts::STOP_CONTINUES;
use agentbus_local::hook::{HookAnswer, HookEvent, STOP_REASON, render_answer};
use agentbus_local::{Harness, HookEnv, InboundMessage, Kind, Line, Priority};
use agentbus_protocol::frame::{ENGINEER_PREAMBLE, PREAMBLE, Transport, Verified};
use agentbus_protocol::timestamp::Timestamp;

use crate::{Fixture, T0, engineer, event, session};

const AGENT: &str = "agent://acme/backend/reviewer";

fn gateway(id: &str, priority: Priority) -> InboundMessage {
    InboundMessage {
        transport: Transport::Gateway,
        transport_id: id.into(),
        from: "agent://acme/frontend/builder".into(),
        kind: "agentbus.message.v1".into(),
        conversation: None,
        subject: None,
        body: format!("{} priority news", priority.as_str()),
        verified: Verified::True,
        attachments: Vec::new(),
        reply_command: None,
        sent: Timestamp(T0 - 5_000),
        recipient: AGENT.into(),
        message_id: None,
        task: None,
        late: false,
        expires_ms: None,
        held: None,
        priority,
    }
}

fn bound() -> HookEnv {
    HookEnv {
        agent: Some(AGENT.into()),
        ..HookEnv::default()
    }
}

/// A `Stop` of `sid`: `continued` as `stop_hook_active` says, `normal` as the setting says.
fn stop(harness: Harness, sid: &str, continued: bool, normal: bool) -> HookEvent {
    let file = match harness {
        Harness::Claude => "claude-stop.json",
        Harness::Codex => "codex-stop.json",
        Harness::OpenCode => "opencode-idle.json",
    };
    let mut ev = event(harness, file, sid);
    ev.continued = continued;
    ev.normal_continues = normal;
    ev
}

fn run(f: &Fixture, ev: &HookEvent, env: &HookEnv) -> HookAnswer {
    f.store.hook(ev, env).unwrap()
}

#[test]
fn a_message_waiting_at_stop_keeps_claude_code_and_codex_going_shown_once() {
    for harness in [Harness::Claude, Harness::Codex] {
        let f = Fixture::new();
        f.start("s1");
        let id = f.tell(&session("s2"), &f.session("s1"), "one more thing");
        let ev = stop(harness, "s1", false, true);
        let a = run(&f, &ev, &HookEnv::default());
        assert!(a.continue_turn, "{harness:?}");
        assert_eq!(a.shown_ids, std::slice::from_ref(&id));
        let doc = render_answer(&ev, &a).unwrap();
        assert_eq!(doc["decision"], "block");
        let shown = match harness {
            // The content goes where Claude Code puts it once; the reason stays short.
            Harness::Claude => {
                assert_eq!(doc["reason"], STOP_REASON);
                doc["hookSpecificOutput"]["additionalContext"]
                    .as_str()
                    .unwrap()
            }
            _ => doc["reason"].as_str().unwrap(),
        };
        assert!(shown.contains(&format!("id=\"{id}\"")) && shown.contains("one more thing"));
        // The continued turn stops again: nothing new, so nothing keeps it going.
        let again = run(&f, &stop(harness, "s1", true, true), &HookEnv::default());
        assert!(again.idle && !again.continue_turn && again.shown_ids.is_empty());
        assert!(render_answer(&stop(harness, "s1", true, true), &again).is_none());
    }
}

#[test]
fn priority_decides_high_always_normal_by_the_setting_low_waits_for_the_prompt() {
    // Normal (a local tell counts as normal) with the setting at `wait`: nothing claimed.
    let f = Fixture::new();
    f.start("s1");
    let local = f.tell(&engineer(), &f.session("s1"), "normal news");
    let a = run(
        &f,
        &stop(Harness::Claude, "s1", false, false),
        &HookEnv::default(),
    );
    assert!(!a.continue_turn && a.shown_ids.is_empty());
    assert!(f.store.claims("s1").unwrap().is_empty());
    let (_, p) = f.hook(Harness::Claude, "claude-prompt.json", "s1");
    assert_eq!(p.shown_ids, [local]);

    // Low never keeps it going, whatever the setting; the next prompt shows it.
    let f = Fixture::new();
    f.store.import(&gateway("msg_low", Priority::Low)).unwrap();
    let a = run(&f, &stop(Harness::Codex, "s1", false, true), &bound());
    assert!(!a.continue_turn && a.shown_ids.is_empty());
    assert!(f.store.claims("s1").unwrap().is_empty());
    let p = run(
        &f,
        &event(Harness::Codex, "codex-prompt.json", "s1"),
        &bound(),
    );
    assert!(p.context.unwrap().contains("low priority news"));

    // High keeps it going even with normal set to wait, and what else waits comes with it.
    let f = Fixture::new();
    f.store.import(&gateway("msg_low", Priority::Low)).unwrap();
    f.store
        .import(&gateway("msg_high", Priority::High))
        .unwrap();
    let a = run(&f, &stop(Harness::Codex, "s1", false, false), &bound());
    assert!(a.continue_turn);
    let ctx = a.context.unwrap();
    assert!(ctx.contains("high priority news") && ctx.contains("low priority news"));
}

#[test]
fn an_imported_message_keeps_its_priority_on_its_line() {
    let f = Fixture::new();
    f.store
        .import(&gateway("msg_high", Priority::High))
        .unwrap();
    f.store
        .import(&gateway("msg_norm", Priority::Normal))
        .unwrap();
    let log = f.log();
    let line = |ext: &str| {
        log.lines()
            .find(|l| l.contains(&format!("\"ext_id\":\"{ext}\"")))
            .unwrap()
            .to_owned()
    };
    let high = line("msg_high");
    assert!(high.contains("\"priority\":\"high\""), "{high}");
    // Normal is the default and is not written.
    assert!(!line("msg_norm").contains("\"priority\":"));
    let mut read: Vec<Priority> = f
        .store
        .lines()
        .unwrap()
        .into_iter()
        .filter_map(|l| match l {
            Line::Message(m) => m.via.map(|v| v.priority),
            Line::Seen(_) => None,
        })
        .collect();
    read.sort_by_key(|p| p.as_str());
    assert_eq!(read, [Priority::High, Priority::Normal]);
    // A value this version does not know reads as normal (G-WP-32), the line is kept.
    let odd = high.replace("\"high\"", "\"urgent\"");
    assert!(matches!(
        Line::parse(odd.as_bytes()),
        Some(Line::Message(m)) if m.via.as_ref().unwrap().priority == Priority::Normal
    ));
}

#[test]
fn continuations_without_a_prompt_are_bounded_and_a_prompt_starts_the_count_again() {
    let f = Fixture::new();
    f.start("s1");
    // Two sessions answering each other: a new message at every stop.
    for i in 0..STOP_CONTINUES {
        f.clock.advance_ms(20_000);
        f.tell(&session("s2"), &f.session("s1"), &format!("round {i}"));
        let a = run(
            &f,
            &stop(Harness::Claude, "s1", i > 0, true),
            &HookEnv::default(),
        );
        assert!(a.continue_turn, "continuation {i}");
    }
    f.clock.advance_ms(20_000);
    let last = f.tell(&session("s2"), &f.session("s1"), "one round too many");
    let a = run(
        &f,
        &stop(Harness::Claude, "s1", true, true),
        &HookEnv::default(),
    );
    assert!(!a.continue_turn && a.shown_ids.is_empty(), "over the bound");
    assert!(!f.store.claims("s1").unwrap().contains(&last));
    // The user prompted (stop_hook_active false): it may keep going again.
    let a = run(
        &f,
        &stop(Harness::Claude, "s1", false, true),
        &HookEnv::default(),
    );
    assert!(a.continue_turn);
    assert_eq!(a.shown_ids, [last]);
}

#[test]
fn a_paused_session_is_not_kept_going() {
    let f = Fixture::new();
    f.start("s1");
    f.send(&engineer(), &f.session("s1"), Kind::Pause, "hold on")
        .unwrap();
    f.store
        .import(&gateway("msg_high", Priority::High))
        .unwrap();
    let a = run(&f, &stop(Harness::Claude, "s1", false, true), &bound());
    assert!(!a.continue_turn && a.shown_ids.is_empty() && a.context.is_none());
}

#[test]
fn a_stop_with_nothing_new_answers_from_the_stamp_alone() {
    let f = Fixture::new();
    f.start("s1");
    f.tell(&session("s2"), &f.session("s1"), "hi");
    f.hook(Harness::Claude, "claude-prompt.json", "s1");
    for harness in [Harness::Claude, Harness::Codex, Harness::OpenCode] {
        let a = run(&f, &stop(harness, "s1", false, true), &HookEnv::default());
        assert!(a.idle && !a.continue_turn, "{harness:?}");
    }
}

#[test]
fn opencode_idle_asks_for_a_prompt_and_claims_nothing_that_prompt_shows_it() {
    let f = Fixture::new();
    let id = f.tell(&session("s2"), &f.session("s1"), "while you finished");
    let ev = stop(Harness::OpenCode, "s1", false, true);
    let a = run(&f, &ev, &HookEnv::default());
    assert!(a.continue_turn && a.context.is_none() && a.shown_ids.is_empty());
    assert!(f.store.claims("s1").unwrap().is_empty());
    let doc = render_answer(&ev, &a).unwrap();
    assert_eq!(doc["continue"], true);
    // The plugin's prompt: its chat.message shows the message, once.
    let (_, p) = f.hook(Harness::OpenCode, "opencode-prompt.json", "s1");
    assert_eq!(p.shown_ids, [id]);
    let again = run(
        &f,
        &stop(Harness::OpenCode, "s1", true, true),
        &HookEnv::default(),
    );
    assert!(!again.continue_turn);
}

#[test]
fn a_resumed_paused_turn_shows_the_pause_note_once() {
    let f = Fixture::new();
    f.start("s1");
    f.hook(Harness::Claude, "claude-prompt.json", "s1");
    f.send(&engineer(), &f.session("s1"), Kind::Pause, "hold on")
        .unwrap();
    // `claude --resume`: SessionStart, then the prompt, both in the turn's first request.
    let notes = |answers: &[HookAnswer]| {
        answers
            .iter()
            .filter_map(|a| a.context.as_deref())
            .map(|c| c.matches("the engineer paused this session").count())
            .sum::<usize>()
    };
    let (_, start) = f.hook(Harness::Claude, "claude-start.json", "s1");
    let (_, prompt) = f.hook(Harness::Claude, "claude-prompt.json", "s1");
    assert_eq!(notes(&[start, prompt]), 1);
    // Mid-turn: messages after tool calls come without the note the turn already has.
    f.tell(&session("s2"), &f.session("s1"), "news");
    let (_, after) = f.hook(Harness::Claude, "claude-posttool.json", "s1");
    assert!(after.context.as_deref().unwrap().contains("news"));
    assert_eq!(notes(&[after]), 0);
    // Paused mid-turn, the first look after says so, once.
    let f = Fixture::new();
    f.start("s1");
    f.hook(Harness::Claude, "claude-prompt.json", "s1");
    f.send(&engineer(), &f.session("s1"), Kind::Pause, "stop there")
        .unwrap();
    let (_, first) = f.hook(Harness::Claude, "claude-posttool.json", "s1");
    f.tell(&session("s2"), &f.session("s1"), "more news");
    let (_, second) = f.hook(Harness::Claude, "claude-posttool.json", "s1");
    assert_eq!(notes(&[first, second]), 1);
}

#[test]
fn the_engineer_s_tell_is_framed_as_the_engineer_s_and_a_session_s_as_another_agent_s() {
    let f = Fixture::new();
    f.start("s1");
    f.tell(&engineer(), &f.session("s1"), "from the terminal");
    let (_, a) = f.hook(Harness::Claude, "claude-prompt.json", "s1");
    let ctx = a.context.unwrap();
    assert!(
        ctx.contains(ENGINEER_PREAMBLE) && !ctx.contains(PREAMBLE),
        "{ctx}"
    );
    f.tell(&session("s2"), &f.session("s1"), "from a peer");
    let (_, a) = f.hook(Harness::Claude, "claude-prompt.json", "s1");
    let ctx = a.context.unwrap();
    assert!(
        ctx.contains(PREAMBLE) && !ctx.contains(ENGINEER_PREAMBLE),
        "{ctx}"
    );
}
