//! Delivered means shown, per harness and per event (LM-25, LM-26): one table of every event each
//! adapter handles (`tests/data/delivery-table.json`), saying which field of the hook's answer the
//! harness puts in the model's context there. A message is claimed exactly where that field
//! carries it; everywhere else nothing is claimed or acknowledged and the next prompt shows it.

use serde::Deserialize;

use agentbus_local::hook::render_answer;
use agentbus_local::line::Line;
use agentbus_local::{Harness, HookEnv};

use crate::{Fixture, data, engineer, event};

#[derive(Deserialize)]
struct Table {
    rows: Vec<Row>,
}

#[derive(Deserialize)]
struct Row {
    harness: String,
    event: String,
    #[serde(default)]
    pre_tool_context: Option<bool>,
    reads: Option<String>,
    expect: String,
    /// Whether the answer keeps the session going (end-of-turn rows); absent: it does not.
    #[serde(default)]
    continues: bool,
}

fn seen_by(f: &Fixture, sid: &str) -> Vec<String> {
    f.store
        .lines()
        .unwrap()
        .into_iter()
        .filter_map(|l| match l {
            Line::Seen(s) if s.by == sid => Some(s.ids),
            _ => None,
        })
        .flatten()
        .collect()
}

#[track_caller]
fn check_table(harness: Harness) {
    let table: Table =
        serde_json::from_slice(&std::fs::read(data("delivery-table.json")).unwrap()).unwrap();
    let prompt = match harness {
        Harness::Claude => "claude-prompt.json",
        Harness::Codex => "codex-prompt.json",
        Harness::OpenCode => "opencode-prompt.json",
    };
    let mut rows = 0;
    for row in table.rows.iter().filter(|r| r.harness == harness.as_str()) {
        rows += 1;
        let what = format!(
            "{} {} pre_tool_context={:?}",
            row.harness, row.event, row.pre_tool_context
        );
        let f = Fixture::new();
        f.start("s1");
        let id = f.tell(
            &engineer(),
            &f.session("s1"),
            "a message for the delivery table",
        );
        let mut ev = event(harness, &row.event, "s1");
        ev.pre_tool_context = row.pre_tool_context.unwrap_or(true);
        let answer = f.store.hook(&ev, &HookEnv::default()).unwrap();
        let doc = render_answer(&ev, &answer);
        // What the harness puts in front of the model, read the way it reads its answer.
        let in_context = match (&row.reads, &doc) {
            (Some(path), Some(doc)) => {
                let pointer = format!("/{}", path.replace('.', "/"));
                doc.pointer(&pointer)
                    .and_then(|v| v.as_str())
                    .unwrap_or("")
                    .to_owned()
            }
            _ => String::new(),
        };
        assert_eq!(
            answer.continue_turn, row.continues,
            "{what}: keeps the session going"
        );
        let claimed = f.store.claims("s1").unwrap();
        match row.expect.as_str() {
            "shown" => {
                assert!(
                    in_context.contains(&format!("id=\"{id}\"")),
                    "{what}: the harness's context lacks the frame: {doc:?}"
                );
                assert!(claimed.contains(&id), "{what}: shown but not claimed");
                assert_eq!(
                    seen_by(&f, "s1"),
                    std::slice::from_ref(&id),
                    "{what}: one Seen line"
                );
                // LM-26: once.
                let again = f
                    .store
                    .hook(&event(harness, prompt, "s1"), &HookEnv::default());
                assert!(again.unwrap().shown_ids.is_empty(), "{what}: shown twice");
            }
            "not_claimed" => {
                assert!(!in_context.contains(&id), "{what}: {doc:?}");
                assert!(claimed.is_empty(), "{what}: claimed where not shown");
                assert!(
                    seen_by(&f, "s1").is_empty(),
                    "{what}: acknowledged where not shown"
                );
                let next = f
                    .store
                    .hook(&event(harness, prompt, "s1"), &HookEnv::default())
                    .unwrap();
                assert_eq!(
                    next.shown_ids,
                    std::slice::from_ref(&id),
                    "{what}: the next prompt shows it"
                );
            }
            other => panic!("{what}: unknown expectation {other}"),
        }
    }
    assert!(
        rows >= 5,
        "{harness:?} has a row for every event it handles"
    );
}

#[test]
fn lm_25_lm_26_claude_code_shows_what_it_claims_at_every_event() {
    check_table(Harness::Claude);
}

#[test]
fn lm_25_lm_26_codex_shows_what_it_claims_at_every_event() {
    check_table(Harness::Codex);
}

#[test]
fn lm_25_lm_26_opencode_shows_what_it_claims_at_every_event() {
    check_table(Harness::OpenCode);
}
