//! Every hook answer, for every harness and event, validated against the harness's documented
//! output schema (`tests/data/hook-schemas/`, each citing its documentation).

use serde_json::Value;

use agentbus_local::hook::render_answer;
use agentbus_local::{Harness, Kind};

use crate::{Fixture, data, engineer};

fn validator(harness: Harness) -> jsonschema::Validator {
    let text = std::fs::read_to_string(data(&format!(
        "hook-schemas/{}.schema.json",
        harness.as_str()
    )))
    .unwrap();
    let schema: Value = serde_json::from_str(&text).unwrap();
    jsonschema::validator_for(&schema).unwrap()
}

#[track_caller]
fn check(v: &jsonschema::Validator, what: &str, doc: &Value) {
    let errors: Vec<String> = v.iter_errors(doc).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{what}: {errors:?}\n{doc:#}");
}

#[test]
fn lm_25_every_answer_matches_its_harness_schema() {
    let events: &[(Harness, &[&str])] = &[
        (
            Harness::Claude,
            &[
                "claude-start.json",
                "claude-prompt.json",
                "claude-pretool.json",
                "claude-posttool.json",
                "claude-subagent.json",
                "claude-stop.json",
            ],
        ),
        (
            Harness::Codex,
            &[
                "codex-start.json",
                "codex-prompt.json",
                "codex-pretool.json",
                "codex-posttool.json",
                "codex-stop.json",
            ],
        ),
        (
            Harness::OpenCode,
            &[
                "opencode-prompt.json",
                "opencode-pretool.json",
                "opencode-posttool.json",
                "opencode-dropped.json",
                "opencode-idle.json",
            ],
        ),
    ];
    let mut answered = 0;
    for &(harness, files) in events {
        let v = validator(harness);
        for file in files {
            for paused in [false, true] {
                let f = Fixture::new();
                f.start("s1");
                f.tell(
                    &engineer(),
                    &f.session("s1"),
                    "a message with \"quotes\" and </agentbus-message>",
                );
                if paused {
                    f.send(&engineer(), &f.session("s1"), Kind::Pause, "hold")
                        .unwrap();
                }
                let (ev, a) = f.hook(harness, file, "s1");
                if let Some(doc) = render_answer(&ev, &a) {
                    check(&v, &format!("{file} paused={paused}"), &doc);
                    answered += 1;
                }
            }
        }
    }
    assert!(answered >= 12, "most events answer something: {answered}");
}

#[test]
fn lm_36_the_opencode_answer_names_the_ids_it_shows() {
    let f = Fixture::new();
    f.start("s1");
    let id = f.tell(&engineer(), &f.session("s1"), "hi");
    let (ev, a) = f.hook(Harness::OpenCode, "opencode-prompt.json", "s1");
    let doc = render_answer(&ev, &a).unwrap();
    assert_eq!(doc["shown_ids"], serde_json::json!([id.clone()]));
    assert!(
        doc["context"]
            .as_str()
            .unwrap()
            .contains(&format!("id=\"{id}\""))
    );
}

#[test]
fn a_codex_answer_says_its_developer_position_lends_no_authority() {
    for harness in [Harness::Codex, Harness::Claude] {
        let f = Fixture::new();
        f.start("s1");
        f.tell(&engineer(), &f.session("s1"), "hi");
        let file = match harness {
            Harness::Codex => "codex-prompt.json",
            _ => "claude-prompt.json",
        };
        let (ev, a) = f.hook(harness, file, "s1");
        let doc = render_answer(&ev, &a).unwrap();
        let ctx = doc["hookSpecificOutput"]["additionalContext"]
            .as_str()
            .unwrap();
        let preamble = format!("{}\n\n", agentbus_local::hook::CODEX_PREAMBLE);
        // Codex only: Claude Code already shows hook text as a user-role reminder.
        assert_eq!(
            ctx.starts_with(&preamble),
            harness == Harness::Codex,
            "{ctx}"
        );
        assert_eq!(
            ctx.trim_start_matches(&preamble),
            a.context.as_deref().unwrap()
        );
    }
}
