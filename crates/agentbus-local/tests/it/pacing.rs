//! Pacing windows (LM-15, LM-57..LM-63, LM-66, LM-67, G-LM-2), on a manual clock.

use agentbus_local::consts::{TTL_MS, V1_RATE_MS, WINDOW_CAP};
use agentbus_local::pace::{Pace, window_for};
use agentbus_local::{Address, Harness, Kind, SendError};

use crate::{Fixture, engineer, session};

/// How many tells from `from` to `to` are accepted in a row now.
fn accepted(f: &Fixture, from: &str, to: &Address, tries: usize) -> usize {
    (0..tries)
        .filter(|i| {
            f.clock.advance_ms(1);
            f.send(&session(from), to, Kind::Tell, &format!("m{i}"))
                .is_ok()
        })
        .count()
}

#[test]
fn lm_57_lm_58_lm_59_the_window_starts_at_one_and_doubles_per_acknowledged_message() {
    let f = Fixture::new();
    f.start("r");
    let r = f.session("r");
    assert_eq!(accepted(&f, "s", &r, 3), 1, "window 1");
    let err = f.send(&session("s"), &r, Kind::Tell, "more").unwrap_err();
    assert!(matches!(err, SendError::WindowFull { .. }), "{err}");
    f.hook(Harness::Claude, "claude-prompt.json", "r"); // shows and acknowledges it
    assert_eq!(accepted(&f, "s", &r, 5), 2, "window 2");
    f.hook(Harness::Claude, "claude-prompt.json", "r");
    assert_eq!(accepted(&f, "s", &r, 9), 8, "three acknowledged: 2, 4, 8");
}

#[test]
fn lm_60_the_window_halves_per_message_that_expired_unacknowledged() {
    let f = Fixture::new();
    f.start("r");
    let r = f.session("r");
    // Three acknowledged messages: 1 → 2 → 4 → 8.
    for _ in 0..2 {
        accepted(&f, "s", &r, 10);
        f.hook(Harness::Claude, "claude-prompt.json", "r");
    }
    let lines = f.store.lines().unwrap();
    let node = f.node();
    let w = window_for("s", &node, &r, &lines, &node, f.store.now());
    assert_eq!((w.size, w.outstanding), (8, 0));
    // One more, never acknowledged, then a week passes.
    f.send(&session("s"), &r, Kind::Tell, "unread").unwrap();
    f.clock.advance_ms(TTL_MS + 1);
    let lines = f.store.lines().unwrap();
    let w = window_for("s", &node, &r, &lines, &node, f.store.now());
    assert_eq!((w.size, w.outstanding, w.pace), (4, 0, Pace::Window));
}

#[test]
fn lm_61_the_window_stops_growing_at_the_cap() {
    let f = Fixture::new();
    f.start("r");
    let r = f.session("r");
    for _ in 0..8 {
        accepted(&f, "s", &r, 70);
        f.hook(Harness::Claude, "claude-prompt.json", "r");
        f.hook(Harness::Claude, "claude-prompt.json", "r");
        f.hook(Harness::Claude, "claude-prompt.json", "r");
    }
    let node = f.node();
    let w = window_for(
        "s",
        &node,
        &r,
        &f.store.lines().unwrap(),
        &node,
        f.store.now(),
    );
    assert_eq!(w.size, WINDOW_CAP);
}

#[test]
fn lm_63_broadcasts_and_the_engineer_are_floored_at_one_per_rate() {
    let f = Fixture::new();
    for to in [
        Address::All,
        Address::Local(f.node()),
        Address::Engineer(None),
    ] {
        assert!(f.send(&session("s"), &to, Kind::Tell, "one").is_ok());
        assert!(
            f.send(&session("s"), &to, Kind::Tell, "two").is_err(),
            "{to}"
        );
        f.clock.advance_ms(V1_RATE_MS);
        assert!(
            f.send(&session("s"), &to, Kind::Tell, "three").is_ok(),
            "{to}"
        );
    }
}

#[test]
fn lm_64_a_session_of_another_node_is_rate_paced_until_it_acknowledges() {
    let f = Fixture::new();
    let remote = Address::Session {
        session: "x".into(),
        node: "elsewhere".into(),
    };
    let sent = f.send(&session("s"), &remote, Kind::Tell, "hi").unwrap();
    assert_eq!(sent.window.unwrap().pace, Pace::Rate);
    assert!(f.send(&session("s"), &remote, Kind::Tell, "again").is_err());
    f.clock.advance_ms(V1_RATE_MS);
    assert!(f.send(&session("s"), &remote, Kind::Tell, "later").is_ok());
}

#[test]
fn lm_15_steers_are_never_paced() {
    let f = Fixture::new();
    f.start("r");
    let r = f.session("r");
    for i in 0..20 {
        let kind = if i % 2 == 0 {
            Kind::Pause
        } else {
            Kind::Resume
        };
        f.send(&engineer(), &r, kind, "steer").unwrap();
    }
}

#[test]
fn lm_13_lm_14_a_steer_from_a_session_is_refused_with_why() {
    let f = Fixture::new();
    f.start("r");
    let err = f
        .send(&session("s"), &f.session("r"), Kind::Pause, "stop")
        .unwrap_err();
    assert_eq!(err.reason(), "not_admitted");
    let remote = Address::Session {
        session: "x".into(),
        node: "elsewhere".into(),
    };
    let err = f
        .send(&engineer(), &remote, Kind::Pause, "stop")
        .unwrap_err();
    assert_eq!(err.reason(), "not_admitted");
}

#[test]
fn lm_66_a_clock_that_stepped_back_is_refused() {
    let f = Fixture::new();
    f.start("r");
    let r = f.session("r");
    f.clock.advance_ms(30_000);
    f.send(&session("s"), &Address::All, Kind::Tell, "late")
        .unwrap();
    f.send(&session("s"), &r, Kind::Tell, "first").unwrap();
    f.hook(Harness::Claude, "claude-prompt.json", "r");
    f.clock.advance_ms(-20_000);
    let err = f
        .send(&session("s"), &r, Kind::Tell, "stepped back")
        .unwrap_err();
    assert_eq!(err.reason(), "clock_behind", "{err}");
}

#[test]
fn lm_62_the_verdict_is_a_function_of_the_lines_alone() {
    let a = Fixture::new();
    a.start("r");
    let r = a.session("r");
    accepted(&a, "s", &r, 2);
    let b = Fixture::new();
    std::fs::copy(a.store.log_path(), b.store.log_path()).unwrap();
    let node = a.node();
    let (la, lb) = (a.store.lines().unwrap(), b.store.lines().unwrap());
    assert_eq!(
        window_for("s", &node, &r, &la, &node, a.store.now()),
        window_for("s", &node, &r, &lb, &node, a.store.now())
    );
}

#[test]
fn lm_67_a_send_that_would_push_out_the_sender_s_own_unread_message_is_refused() {
    use agentbus_local::consts::MEMBER_BYTES;
    let f = Fixture::new();
    f.start("r");
    let r = f.session("r");
    f.send(&session("s"), &r, Kind::Tell, "first").unwrap();
    f.hook(Harness::Claude, "claude-prompt.json", "r"); // window 2
    f.clock.advance_ms(1);
    let unread = f
        .send(&session("s"), &r, Kind::Tell, "unread")
        .unwrap()
        .message
        .id;
    // Newer lines of the same member and class, filling it to just under the bound.
    let filler = |i: i64, text: &str| {
        format!(
            r#"{{"v":1,"id":"lm_{i:020x}","kind":"tell","node":"n0de1","by":"p{i}","to":"q@n0de1","ms":{},"text":"{text}"}}"#,
            f.store.now() + 10 + i
        )
    };
    let mut lines: Vec<String> = (0..9).map(|i| filler(i, &"x".repeat(100_000))).collect();
    let used: usize = lines.iter().map(|l| l.len() + 1).sum();
    let last_overhead = filler(9, "").len() + 1;
    lines.push(filler(
        9,
        &"x".repeat(MEMBER_BYTES - 150 - used - last_overhead),
    ));
    let log = f.log() + &lines.join("\n") + "\n";
    std::fs::write(f.store.log_path(), log).unwrap();
    f.clock.advance_ms(100);
    let err = f.send(&session("s"), &r, Kind::Tell, "more").unwrap_err();
    assert_eq!(err.reason(), "share", "{err}");
    // Another pair's newer line may still push it out, oldest first; the cut is counted.
    f.send(&session("p99"), &f.session("q"), Kind::Tell, "to q")
        .unwrap();
    assert!(!f.log().contains(&unread));
    assert!(f.store.stats().dropped >= 1);
}

#[test]
fn lm_10_a_reply_goes_to_the_node_and_sender_of_what_it_answers() {
    let f = Fixture::new();
    f.start("s1");
    // A line from node B whose sender has the same id as a local session.
    let m = crate::crafted(Kind::Ask, "nodeb", "s1", "all", f.store.now(), "from b");
    crate::write_log(&f, &[&m]);
    let (_, to) = f.store.reply_target(&m.id).unwrap().unwrap();
    assert_eq!(to.unwrap().to_string(), "s1@nodeb");
}
