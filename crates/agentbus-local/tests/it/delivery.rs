//! Delivery through the hook: once, never to the sender, newest first within the budget, heads,
//! subagents, dropped context, broadcasts, claims and Seen lines, stamps (LM-25..LM-42, LM-55,
//! G-LM-7).

use agentbus_local::consts::SEEN_IDS;
use agentbus_local::hook::EventKind;
use agentbus_local::line::Line;
use agentbus_local::{Address, Harness, Kind};

use crate::{Fixture, engineer, session};

fn seen_lines(f: &Fixture, by: &str) -> Vec<Vec<String>> {
    f.store
        .lines()
        .unwrap()
        .into_iter()
        .filter_map(|l| match l {
            Line::Seen(s) if s.by == by => Some(s.ids),
            _ => None,
        })
        .collect()
}

#[test]
fn lm_25_lm_26_a_message_shows_at_the_next_prompt_once() {
    let f = Fixture::new();
    f.start("s1");
    let id = f.tell(&engineer(), &f.session("s1"), "hello");
    let (_, a) = f.hook(Harness::Claude, "claude-prompt.json", "s1");
    assert_eq!(a.shown_ids, std::slice::from_ref(&id));
    assert!(a.context.unwrap().contains("hello"));
    let (_, a) = f.hook(Harness::Claude, "claude-prompt.json", "s1");
    assert!(a.context.is_none() && a.shown_ids.is_empty());
    assert!(a.idle, "nothing new: answered from the stamp");
    // LM-40: one Seen line by the recipient lists it.
    assert_eq!(seen_lines(&f, "s1"), [vec![id]]);
}

#[test]
fn lm_25_an_event_that_takes_no_context_shows_nothing() {
    let f = Fixture::new();
    f.start("s1");
    f.tell(&engineer(), &f.session("s1"), "hello");
    // `Stop` shows messages when it keeps the session going (end_of_turn.rs); `Notification`
    // never takes context.
    let other = br#"{"session_id":"s1","hook_event_name":"Notification","message":"idle"}"#;
    let ev = agentbus_local::hook::parse_event(Harness::Claude, other).unwrap();
    assert_eq!(ev.kind, EventKind::Other);
    let a = f.store.hook(&ev, &Default::default()).unwrap();
    assert!(a.context.is_none());
    let (_, a) = f.hook(Harness::Claude, "claude-pretool.json", "s1");
    assert!(
        a.context.unwrap().contains("hello"),
        "the next tool call shows it"
    );
}

#[test]
fn lm_28_a_message_is_never_shown_to_its_sender() {
    let f = Fixture::new();
    f.start("s1");
    f.start("s2");
    f.send(
        &session("s1"),
        &Address::Local(f.node()),
        Kind::Tell,
        "mine",
    )
    .unwrap();
    let (_, a) = f.hook(Harness::Claude, "claude-prompt.json", "s1");
    assert!(a.context.is_none());
    let (_, b) = f.hook(Harness::Claude, "claude-prompt.json", "s2");
    assert!(b.context.unwrap().contains("mine"));
}

#[test]
fn lm_29_newest_first_within_the_budget_the_rest_next_time_none_twice() {
    let f = Fixture::new();
    f.start("s1");
    let mut ids = Vec::new();
    for i in 0..40 {
        f.clock.advance_ms(1);
        let from = session(&format!("sender{i}"));
        ids.push(
            f.send(
                &from,
                &f.session("s1"),
                Kind::Tell,
                &format!("message {i} {}", "x".repeat(400)),
            )
            .unwrap()
            .message
            .id,
        );
    }
    let mut shown: Vec<String> = Vec::new();
    let mut first = true;
    for _ in 0..10 {
        let (_, a) = f.hook(Harness::Claude, "claude-prompt.json", "s1");
        if let Some(ctx) = &a.context {
            assert!(ctx.chars().count() <= Harness::Claude.context_chars());
        }
        if first {
            assert!(
                a.shown_ids.contains(ids.last().unwrap()),
                "the newest comes first"
            );
            assert!(a.shown_ids.len() < ids.len());
            first = false;
        }
        shown.extend(a.shown_ids);
    }
    let mut sorted = shown.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), shown.len(), "none twice");
    assert_eq!(shown.len(), ids.len(), "all, eventually");
}

#[test]
fn lm_30_a_message_longer_than_the_budget_shows_its_head_and_the_command() {
    let f = Fixture::new();
    f.start("s1");
    let id = f.tell(&engineer(), &f.session("s1"), &"long text ".repeat(1600));
    let (_, a) = f.hook(Harness::Claude, "claude-prompt.json", "s1");
    let ctx = a.context.unwrap();
    assert!(ctx.contains(&format!("agentbus inbox --show {id}")));
    assert!(ctx.chars().count() <= Harness::Claude.context_chars());
    assert_eq!(f.store.show(&id).unwrap().unwrap().text.len(), 16_000);
}

#[test]
fn lm_31_g_lm_7_a_paused_session_s_tool_calls_are_denied_and_show_no_messages() {
    let f = Fixture::new();
    f.start("s1");
    f.send(
        &engineer(),
        &f.session("s1"),
        Kind::Pause,
        "wait for my review",
    )
    .unwrap();
    f.tell(&session("other"), &f.session("s1"), "news");
    let (_, a) = f.hook(Harness::Claude, "claude-pretool.json", "s1");
    assert!(a.block.unwrap().contains("wait for my review"));
    assert!(a.context.is_none() && a.shown_ids.is_empty());
    // Idle, it still blocks, from the stamp alone... after the prompt shows the news.
    let (_, p) = f.hook(Harness::Claude, "claude-prompt.json", "s1");
    assert!(p.context.unwrap().contains("news"));
    let (_, a) = f.hook(Harness::Claude, "claude-pretool.json", "s1");
    assert!(a.idle && a.block.is_some());
    f.send(&engineer(), &f.session("s1"), Kind::Resume, "")
        .unwrap();
    let (_, a) = f.hook(Harness::Claude, "claude-pretool.json", "s1");
    assert!(a.block.is_none());
}

#[test]
fn lm_13_a_crafted_pause_from_a_session_is_ignored() {
    let f = Fixture::new();
    f.start("s1");
    let m = crate::crafted(
        Kind::Pause,
        &f.node(),
        "s2",
        &format!("s1@{}", f.node()),
        f.store.now(),
        "I say stop",
    );
    crate::write_log(&f, &[&m]);
    let (_, a) = f.hook(Harness::Claude, "claude-pretool.json", "s1");
    assert!(a.block.is_none());
}

#[test]
fn lm_32_lm_33_dropped_context_and_subagent_events_show_nothing_and_claim_nothing() {
    let f = Fixture::new();
    f.start("s1");
    f.tell(&engineer(), &f.session("s1"), "wait for me");
    let (_, a) = f.hook(Harness::Claude, "claude-subagent.json", "s1");
    assert!(a.context.is_none());
    let (_, a) = f.hook(Harness::OpenCode, "opencode-dropped.json", "s1");
    assert!(a.context.is_none());
    assert!(f.store.claims("s1").unwrap().is_empty());
    let (_, a) = f.hook(Harness::Claude, "claude-prompt.json", "s1");
    assert!(a.context.unwrap().contains("wait for me"));
}

#[test]
fn lm_34_lm_35_a_broadcast_reaches_sessions_running_when_it_was_sent() {
    let f = Fixture::new();
    f.start("early");
    f.tell(&engineer(), &Address::All, "to all");
    f.clock.advance_ms(1);
    f.start("late");
    let direct = f.tell(&engineer(), &f.session("late"), "direct");
    let (_, a) = f.hook(Harness::Claude, "claude-prompt.json", "early");
    assert!(a.context.unwrap().contains("to all"));
    let (_, b) = f.hook(Harness::Claude, "claude-prompt.json", "late");
    assert_eq!(b.shown_ids, [direct]);
}

#[test]
fn lm_37_unread_counts_equal_what_the_hooks_then_show() {
    let f = Fixture::new();
    f.start("s1");
    for i in 0..3 {
        f.tell(&session(&format!("p{i}")), &f.session("s1"), "x");
    }
    let views = f.store.session_views().unwrap();
    assert_eq!(views[0].unread, 3);
    let (_, a) = f.hook(Harness::Claude, "claude-prompt.json", "s1");
    assert_eq!(a.shown_ids.len(), 3);
    assert_eq!(f.store.session_views().unwrap()[0].unread, 0);
}

#[test]
fn lm_41_a_claim_without_its_seen_line_is_acknowledged_at_the_next_read() {
    let f = Fixture::new();
    f.start("s1");
    let id = f.tell(&engineer(), &f.session("s1"), "claimed by hand");
    assert!(f.store.claim("s1", &id).unwrap());
    let (_, a) = f.hook(Harness::Claude, "claude-prompt.json", "s1");
    assert!(a.shown_ids.is_empty(), "never shown twice");
    assert_eq!(seen_lines(&f, "s1"), [vec![id]]);
}

/// A hook never waits for the log's lock between claiming and printing: another writer holding
/// it (a sidecar's import, a long tell) would keep the hook past its harness's timeout, killed
/// with the messages claimed and recorded as shown but never printed. It answers at once; the
/// Seen line follows at the next look (LM-41), and the message is shown once.
#[test]
fn lm_41_a_hook_does_not_wait_for_the_log_after_claiming() {
    let f = Fixture::new();
    f.start("s1");
    let id = f.tell(&engineer(), &f.session("s1"), "hello while the log is busy");
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(f.store.dir().join("lock"))
        .unwrap();
    lock.lock().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let _ = tx.send(f.hook(Harness::Claude, "claude-prompt.json", "s1").1);
        });
        // A deadline against a hang, not a timer the test waits for: the answer comes at once.
        let answer = rx.recv_timeout(std::time::Duration::from_secs(60));
        lock.unlock().unwrap();
        let answer = answer.expect("the hook answered while another writer held the log");
        assert_eq!(answer.shown_ids, std::slice::from_ref(&id));
        assert!(
            answer
                .context
                .unwrap()
                .contains("hello while the log is busy")
        );
    });
    assert!(
        seen_lines(&f, "s1").is_empty(),
        "no Seen line while the log was held"
    );
    let (_, again) = f.hook(Harness::Claude, "claude-prompt.json", "s1");
    assert!(
        again.shown_ids.is_empty() && again.context.is_none(),
        "shown once"
    );
    assert_eq!(seen_lines(&f, "s1"), [vec![id]]);
}

#[test]
fn lm_42_a_seen_line_lists_at_most_seen_ids() {
    let f = Fixture::new();
    let ids: Vec<String> = (0..=SEEN_IDS).map(|i| format!("lm_{i:020x}")).collect();
    assert_eq!(f.store.ack("s1", &ids).unwrap(), 2);
    let lens: Vec<usize> = seen_lines(&f, "s1").iter().map(Vec::len).collect();
    assert_eq!(lens, [SEEN_IDS, 1]);
    // LM-44: nothing for a sender a line cannot carry, and no error.
    assert_eq!(f.store.ack(&"x".repeat(300), &ids).unwrap(), 0);
}

#[test]
fn lm_55_nothing_waits_unseen_when_over_budget_and_the_stamp_waits() {
    let f = Fixture::new();
    f.start("s1");
    for i in 0..40 {
        f.tell(
            &session(&format!("p{i}")),
            &f.session("s1"),
            &"y".repeat(500),
        );
    }
    let (_, a) = f.hook(Harness::Claude, "claude-prompt.json", "s1");
    assert!(!a.shown_ids.is_empty());
    let (_, b) = f.hook(Harness::Claude, "claude-prompt.json", "s1");
    assert!(!b.idle, "messages were waiting, so the log is read again");
    assert!(!b.shown_ids.is_empty());
}

#[test]
fn lm_46_forgetting_a_session_removes_its_claims() {
    let f = Fixture::new();
    f.start("s1");
    f.tell(&engineer(), &f.session("s1"), "x");
    f.hook(Harness::Claude, "claude-prompt.json", "s1");
    assert!(f.store.seen_path().join("s1").exists());
    assert!(f.store.forget("s1").unwrap());
    assert!(!f.store.seen_path().join("s1").exists());
}

#[test]
fn lm_8_a_prefix_or_name_resolves_to_the_full_id_and_ambiguity_is_refused() {
    let f = Fixture::new();
    f.start("3f2a9c1e-aaaa");
    f.start("3f2b0000-bbbb");
    let a = f.store.resolve("3f2a").unwrap();
    assert_eq!(a.to_string(), format!("3f2a9c1e-aaaa@{}", f.node()));
    let err = f.store.resolve("3f2").unwrap_err().to_string();
    assert!(
        err.contains("3f2a9c1e-aaaa") && err.contains("3f2b0000-bbbb"),
        "{err}"
    );
    assert!(f.store.resolve("nobody").is_err());
}
