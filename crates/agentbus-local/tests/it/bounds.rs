//! TTL and byte bounds: what a write keeps, byte for byte (LM-51, LM-52, LM-70..LM-76).

use agentbus_local::bound::{bound, bound_with};
use agentbus_local::consts::{SLACK_MS, TTL_MS};
use agentbus_local::{Address, Harness};

use crate::{Fixture, T0, engineer, session};

fn line(node: &str, kind: &str, ms: i64, text: &str) -> String {
    format!(
        r#"{{"v":1,"id":"lm_00000000000000000000","kind":"{kind}","node":"{node}","by":"s1","to":"all","ms":{ms},"text":"{text}"}}"#
    )
}

#[test]
fn lm_70_lm_71_a_write_cuts_lines_past_the_ttl_and_unstamped_ones() {
    let f = Fixture::new();
    let old = line("n0de1", "tell", T0 - TTL_MS - SLACK_MS - 1, "old");
    let kept = line("n0de1", "tell", T0 - TTL_MS - SLACK_MS, "edge");
    let unstamped = r#"{"v":1,"kind":"tell","node":"n0de1","text":"no ms"}"#;
    std::fs::write(f.store.log_path(), format!("{old}\n{kept}\n{unstamped}\n")).unwrap();
    f.tell(&engineer(), &Address::All, "new");
    let log = f.log();
    assert!(!log.contains("\"old\"") && !log.contains("no ms"));
    assert!(
        log.starts_with(&format!("{kept}\n")),
        "kept byte for byte: {log}"
    );
    assert_eq!(f.store.stats().expired, 2);
}

#[test]
fn lm_72_lm_73_each_member_and_class_is_bounded_alone_newest_kept() {
    let mut lines = Vec::new();
    for i in 0..10 {
        lines.push(line("a", "tell", T0 + i, &format!("talk {i}")));
    }
    lines.push(line("a", "pause", T0 - 5, "pause"));
    lines.push(line("b", "tell", T0 - 5, "other member"));
    let raw: Vec<&[u8]> = lines.iter().map(|l| l.as_bytes()).collect();
    let one = lines[0].len() + 1;
    let b = bound_with(&raw, T0, one * 3);
    // Member a's conversation keeps its newest three; its pause and member b are untouched.
    assert_eq!(b.kept, vec![7, 8, 9, 10, 11]);
    assert_eq!(b.cut, 7);
}

#[test]
fn lm_74_the_kept_set_does_not_depend_on_arrival_order() {
    let lines: Vec<String> = (0..8)
        .map(|i| line("a", "tell", T0 + (i % 3), &format!("t{i}")))
        .collect();
    let size = lines[0].len() + 1;
    let forward: Vec<&[u8]> = lines.iter().map(|l| l.as_bytes()).collect();
    let backward: Vec<&[u8]> = forward.iter().rev().copied().collect();
    let keep = |raw: &[&[u8]]| {
        let mut kept: Vec<Vec<u8>> = bound_with(raw, T0, size * 4)
            .kept
            .iter()
            .map(|&i| raw[i].to_vec())
            .collect();
        kept.sort();
        kept
    };
    assert_eq!(keep(&forward), keep(&backward));
}

#[test]
fn lm_75_lm_76_a_bounding_write_only_deletes_and_counts_the_cut() {
    let f = Fixture::new();
    // A member's conversation just over the bound: one big crafted line per 100 KB.
    let big = "x".repeat(100_000);
    let mut body = String::new();
    for i in 0..11 {
        body.push_str(&line("n0de1", "tell", T0 - 1000 + i, &big));
        body.push('\n');
    }
    let pause = line("n0de1", "pause", T0 - 2000, "keep me");
    body.push_str(&pause);
    body.push('\n');
    std::fs::write(f.store.log_path(), &body).unwrap();
    f.tell(&engineer(), &Address::All, "one more");
    let after = f.log();
    let before_lines: Vec<&str> = body.lines().collect();
    let after_lines: Vec<&str> = after.lines().collect();
    // Every kept old line is byte for byte one of the old lines, in the old order.
    let mut j = 0;
    for l in &after_lines[..after_lines.len() - 1] {
        while before_lines[j] != *l {
            j += 1;
        }
    }
    assert!(after.contains("keep me"), "the steer class is apart");
    assert!(f.store.stats().dropped >= 1);
    assert!(
        bound(
            &after_lines.iter().map(|l| l.as_bytes()).collect::<Vec<_>>(),
            T0
        )
        .cut == 0
    );
}

#[test]
fn lm_50_lm_51_acks_and_ttl_cuts_leave_the_talk_mark_and_talk_moves_it() {
    let f = Fixture::new();
    f.start("a");
    f.start("b");
    f.tell(&engineer(), &Address::Local(f.node()), "to everyone");
    f.hook(Harness::Claude, "claude-prompt.json", "a");
    let talk = f.store.talk();
    // b's acknowledgement does not change the mark a holds.
    f.hook(Harness::Claude, "claude-prompt.json", "b");
    assert_eq!(f.store.talk(), talk);
    let (_, a) = f.hook(Harness::Claude, "claude-prompt.json", "a");
    assert!(a.idle, "a does not read the log again");
    // An ack whose write also cuts lines past the TTL leaves it too.
    f.clock.advance_ms(TTL_MS + SLACK_MS + 1000);
    let talk = f.store.talk();
    f.store
        .ack("b", &["lm_00000000000000000001".into()])
        .unwrap();
    assert!(!f.log().contains("to everyone"));
    assert_eq!(f.store.talk(), talk);
    // A tell moves it.
    f.send(
        &session("b"),
        &Address::Local(f.node()),
        agentbus_local::Kind::Tell,
        "hi",
    )
    .unwrap();
    assert_ne!(f.store.talk(), talk);
}

#[test]
fn lm_52_a_byte_cut_moves_the_talk_mark_even_when_an_ack_causes_it() {
    let f = Fixture::new();
    // Seen lines of this member filling their class to the bound.
    let ids: Vec<String> = (0..100).map(|i| format!("lm_{i:020x}")).collect();
    let one = format!(
        r#"{{"v":1,"kind":"seen","node":"n0de1","by":"s1","ms":{T0},"ids":{}}}"#,
        serde_json::to_string(&ids).unwrap()
    );
    let n = agentbus_local::consts::MEMBER_BYTES / (one.len() + 1);
    std::fs::write(f.store.log_path(), format!("{one}\n").repeat(n)).unwrap();
    f.store.ack("s1", &ids[..1]).unwrap(); // records the log as ours
    let talk = f.store.talk();
    f.clock.advance_ms(1);
    f.store.ack("s1", &ids).unwrap(); // this one cannot fit without a cut
    assert!(f.store.stats().dropped >= 1);
    assert_ne!(f.store.talk(), talk);
}
