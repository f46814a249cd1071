//! Addresses, redaction and the checks every line passes on read (LM-3..LM-5, LM-12, LM-16..LM-21,
//! LM-79).

use serde_json::Value;

use agentbus_local::Address;
use agentbus_local::consts::{NAME, SKEW_MS, TTL_MS, WIRE_TEXT};
use agentbus_local::line::{Line, is_id};
use agentbus_local::redact::redact;

use crate::{Fixture, T0, data, engineer};

fn json(rel: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(data(rel)).unwrap()).unwrap()
}

#[test]
fn lm_5_addresses_round_trip_and_bad_forms_are_refused() {
    let cases = json("addresses.json");
    for s in cases["round_trip"].as_array().unwrap() {
        let s = s.as_str().unwrap();
        let a = Address::parse_line(s).unwrap_or_else(|e| panic!("{s}: {e}"));
        assert_eq!(a.to_string(), s);
    }
    for s in cases["refused"].as_array().unwrap() {
        let s = s.as_str().unwrap();
        assert!(Address::parse_line(s).is_err(), "{s:?} parsed");
    }
    for pair in cases["commands"].as_array().unwrap() {
        let (typed, line) = (pair[0].as_str().unwrap(), pair[1].as_str().unwrap());
        let a = Address::parse_command(typed, "thisnode").unwrap().unwrap();
        assert_eq!(a.to_string(), line, "{typed}");
    }
    // A bare word may be a session: only the store resolves it.
    assert_eq!(Address::parse_command("3f2a", "n"), Ok(None));
}

#[test]
fn lm_18_credentials_are_redacted_by_documented_rules() {
    let cases = json("redaction.json");
    let mut covered = std::collections::HashSet::new();
    for case in cases["positive"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let rule = case["rule"].as_str().unwrap();
        let out = redact(case["text"].as_str().unwrap());
        assert!(
            !out.contains(case["secret"].as_str().unwrap()),
            "{name}: the secret survived: {out}"
        );
        assert!(
            out.contains(&format!("[REDACTED:{rule}]")),
            "{name}: not redacted by {rule}: {out}"
        );
        if let Some(kept) = case["keeps"].as_str() {
            assert!(out.contains(kept), "{name}: lost {kept:?}: {out}");
        }
        covered.insert(rule.to_owned());
    }
    for case in cases["negative"].as_array().unwrap() {
        let text = case["text"].as_str().unwrap();
        assert_eq!(redact(text), text, "{}", case["name"]);
    }
    // Every rule compiled, and every rule has a positive case.
    let rules = agentbus_local::redact::rules();
    assert_eq!(rules.len(), agentbus_local::redact::declared_rules());
    for r in rules {
        assert!(r.regex().is_some(), "rule {} does not compile", r.id);
        assert!(
            covered.contains(&r.id),
            "rule {} has no positive case",
            r.id
        );
    }
}

#[test]
fn lm_18_the_stored_text_and_its_id_are_the_redacted_ones() {
    let f = Fixture::new();
    let id = f.tell(
        &engineer(),
        &Address::Local(f.node()),
        "token=ghp_abcdefghijklmnopqrstuvwxyz0123456789",
    );
    assert!(!f.log().contains("ghp_abcdef"));
    let m = f.store.show(&id).unwrap().unwrap();
    assert_eq!(
        m.id,
        agentbus_local::line::message_id(&m),
        "the id hashes the redacted text"
    );
}

#[test]
fn lm_19_text_is_kept_whole_to_wire_text_then_cut_with_an_ellipsis() {
    let f = Fixture::new();
    let to = Address::Local(f.node());
    let whole = "a".repeat(WIRE_TEXT);
    let id = f.tell(&engineer(), &to, &whole);
    assert_eq!(f.store.show(&id).unwrap().unwrap().text, whole);
    f.clock.advance_ms(agentbus_local::consts::V1_RATE_MS);
    let id = f.tell(&engineer(), &to, &format!("{whole}b"));
    let text = f.store.show(&id).unwrap().unwrap().text;
    assert_eq!(text.chars().count(), WIRE_TEXT + 1);
    assert!(text.ends_with('…'));
}

/// A crafted line with a valid id, for read checks.
fn crafted(f: &Fixture, ms: i64, by: &str, name: Option<&str>, text: &str) -> String {
    let mut m = crate::crafted(
        agentbus_local::Kind::Tell,
        &f.node(),
        by,
        &format!("local@{}", f.node()),
        ms,
        text,
    );
    m.name = name.map(str::to_owned);
    m.id = agentbus_local::line::message_id(&m);
    serde_json::to_string(&m).unwrap()
}

#[test]
fn lm_16_bad_newer_and_oversize_lines_are_skipped_never_fatal() {
    let f = Fixture::new();
    let good = crafted(&f, T0, "s1", None, "good");
    let long_name = crafted(&f, T0, "s1", Some(&"n".repeat(NAME + 1)), "long name");
    let long_text = crafted(&f, T0, "s1", None, &"x".repeat(WIRE_TEXT + 2));
    let newer = good.replace("\"v\":1", "\"v\":99");
    let shout = good.replace("\"kind\":\"tell\"", "\"kind\":\"shout\"");
    let wrong_id = good.replace("\"good\"", "\"tampered\"");
    let body = [
        "garbage {",
        &good,
        &long_name,
        &long_text,
        &newer,
        &shout,
        &wrong_id,
        "{\"v\":1,\"kind\":\"seen\",\"node\":\"n0de1\",\"by\":\"s1\",\"ms\":1,\"ids\":[]}",
        "{\"torn\":",
    ]
    .join("\n");
    std::fs::write(f.store.log_path(), body).unwrap();
    let msgs = f.store.read().unwrap();
    assert_eq!(msgs.len(), 1);
    assert_eq!(msgs[0].text, "good");
}

#[test]
fn lm_17_only_fresh_lines_count() {
    let f = Fixture::new();
    f.start("s9");
    f.clock.set(agentbus_protocol::timestamp::Timestamp(T0 + 1));
    let lines = [
        crafted(&f, T0 - TTL_MS - 1, "s1", None, "too old"),
        crafted(&f, T0 + SKEW_MS + 2, "s1", None, "too far ahead"),
        crafted(&f, T0 + SKEW_MS - 1, "s1", None, "just within the skew"),
    ];
    std::fs::write(f.store.log_path(), lines.join("\n") + "\n").unwrap();
    let (_, a) = f.hook(agentbus_local::Harness::Claude, "claude-prompt.json", "s9");
    let ctx = a.context.unwrap();
    assert!(ctx.contains("just within the skew"));
    assert!(!ctx.contains("too old") && !ctx.contains("too far ahead"));
}

#[test]
fn lm_21_ids_are_recognised_exactly() {
    let f = Fixture::new();
    let id = f.tell(&engineer(), &Address::All, "x");
    assert!(is_id(&id));
    for bad in [
        "lm_",
        "lm_0123",
        "LM_0123456789abcdef0123",
        "lm_0123456789ABCDEF0123",
        "x_0123456789abcdef0123",
    ] {
        assert!(!is_id(bad), "{bad}");
    }
}

#[test]
fn lm_79_lines_keeps_seen_lines_and_read_skips_them() {
    let f = Fixture::new();
    f.start("s1");
    f.tell(&engineer(), &f.session("s1"), "one");
    f.hook(agentbus_local::Harness::Claude, "claude-prompt.json", "s1");
    let lines = f.store.lines().unwrap();
    assert!(matches!(lines[0], Line::Message(_)));
    assert!(matches!(lines[1], Line::Seen(_)));
    assert_eq!(f.store.read().unwrap().len(), 1);
}

#[test]
fn lm_2_every_line_names_its_node_and_two_stores_union() {
    let a = Fixture::new();
    let b = Fixture::new();
    std::fs::write(b.dir.path().join("node"), "othernode\n").unwrap();
    a.tell(&engineer(), &Address::All, "from a");
    b.tell(&engineer(), &Address::All, "from b");
    for line in a.log().lines().chain(b.log().lines()) {
        let v: Value = serde_json::from_str(line).unwrap();
        assert!(v["node"].is_string());
    }
    std::fs::write(a.store.log_path(), a.log() + &b.log()).unwrap();
    let texts: Vec<String> = a
        .store
        .read()
        .unwrap()
        .into_iter()
        .map(|m| m.text)
        .collect();
    assert_eq!(texts, ["from a", "from b"]);
}

#[test]
fn lm_86_derived_constants_move_with_what_they_derive_from() {
    use agentbus_local::consts::{MEMBER_BYTES, SLACK_MS, WINDOW_CAP};
    assert_eq!(SLACK_MS, SKEW_MS);
    assert_eq!(WINDOW_CAP as usize, MEMBER_BYTES / WIRE_TEXT);
}

#[test]
fn lm_77_a_week_of_ordinary_traffic_from_one_machine_fits() {
    let f = Fixture::new();
    let mut lines = Vec::new();
    for i in 0..700 {
        let text = "w".repeat(300 + (i * 37) % 1200);
        lines.push(crafted(
            &f,
            T0 - TTL_MS + 1 + i as i64 * 800_000,
            "s1",
            None,
            &text,
        ));
    }
    let raw: Vec<&[u8]> = lines.iter().map(|l| l.as_bytes()).collect();
    let b = agentbus_local::bound::bound(&raw, T0);
    assert_eq!((b.cut, b.expired), (0, 0));
}
