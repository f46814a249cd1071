//! `agentbus search`: one query syntax over the gateway (what this profile's agent may read),
//! this machine's log and a git share; one `--json` document whichever places were searched;
//! hits escaped for the terminal with the query's words marked; a bad query refused before any
//! request with its code and a fix. A real gateway on loopback.

use serde_json::Value;

use crate::gateway_cli::{Gw, Machine, pair};

fn ids(doc: &Value, place: &str) -> Vec<String> {
    doc["hits"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| h["in"] == place)
        .map(|h| h["id"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn search_finds_the_agents_messages_at_the_gateway_and_nothing_of_others() {
    let gw = Gw::start();
    let (bot, rev) = pair(&gw, "bot", "reviewer");
    let other = Machine::new("other");
    other.connect(&gw);
    let sent = bot.ok(&[
        "--json",
        "send",
        "reviewer",
        "the v2 schema needs a version field",
        "--subject",
        "schema review",
    ]);
    let id = sent["id"].as_str().unwrap().to_owned();
    other.ok(&["--json", "send", "other", "my own schema notes"]);
    // The recipient finds it by its words; the sender too; a third agent does not.
    let doc = rev.ok(&["--json", "search", "schema", "version", "--in", "gateway"]);
    assert_eq!(ids(&doc, "gateway"), vec![id.clone()], "{doc}");
    let hit = &doc["hits"][0];
    assert_eq!(hit["subject"], "schema review");
    assert_eq!(doc["warnings"], serde_json::json!([]));
    assert_eq!(
        ids(
            &bot.ok(&[
                "--json", "search", "schema", "--from", "bot", "--in", "gateway"
            ]),
            "gateway"
        ),
        vec![id.clone()]
    );
    assert!(
        !ids(
            &other.ok(&["--json", "search", "version", "--in", "gateway"]),
            "gateway"
        )
        .contains(&id)
    );
    // The text view: a header line and the snippet with the words marked.
    let out = rev.run(&["search", "version", "--in", "gateway"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains(&format!("gateway  {id}")), "{text}");
    assert!(text.contains("needs a [version] field"), "{text}");
    // Nothing matches: one line.
    let out = rev.run(&["search", "quokka", "--in", "gateway"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "no match");
}

#[test]
fn a_bad_query_is_refused_before_any_request_with_its_code() {
    let m = Machine::new("nobody");
    let out = m.run(&["search", "color:red"]);
    assert_eq!(
        out.status.code(),
        Some(6),
        "a refusal (docs/cli.md, exit codes): {out:?}"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown filter `color:`"), "{err}");
    assert!(err.contains("AB-3080"), "{err}");
}

#[test]
fn search_in_all_covers_this_machine_without_a_profile() {
    let m = Machine::new("solo");
    m.ok(&["tell", "engineer", "remember the rollback plan"]);
    let doc = m.ok(&["--json", "search", "rollback"]);
    assert_eq!(ids(&doc, "local").len(), 1, "{doc}");
    assert_eq!(
        doc["warnings"],
        serde_json::json!([]),
        "no profile: nothing to warn of"
    );
}

/// `agentbus trace` names the W3C trace every message of a task or conversation carries (§2.1),
/// with a link to the operator's viewer when `AGENTBUS_TRACE_URL` is a template; a template that
/// is not one is said once and makes no link.
#[test]
fn trace_prints_the_trace_id_and_the_viewer_link() {
    let gw = Gw::start();
    let (bot, _rev) = pair(&gw, "bot", "reviewer");
    let sent = bot.ok(&["--json", "send", "reviewer", "hello"]);
    let (id, trace_id) = (
        sent["id"].as_str().unwrap().to_owned(),
        sent["trace_id"].as_str().unwrap().to_owned(),
    );
    let run = |template: &str, json: bool| {
        let mut args = vec!["trace", id.as_str()];
        if json {
            args.insert(0, "--json");
        }
        bot.cmd(&args)
            .env("AGENTBUS_TRACE_URL", template)
            .output()
            .unwrap()
    };
    let out = run("https://jaeger.example/trace/{trace_id}", false);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!(
            "\n\ntrace: {trace_id}  https://jaeger.example/trace/{trace_id}\n"
        )),
        "{text}"
    );
    let out = run("https://jaeger.example/trace/{trace_id}", true);
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["traces"][0]["trace_id"], trace_id.as_str());
    assert_eq!(
        doc["traces"][0]["link"],
        format!("https://jaeger.example/trace/{trace_id}").as_str()
    );
    let out = run("javascript:alert({trace_id})", false);
    let (text, err) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(text.contains(&format!("\n\ntrace: {trace_id}\n")), "{text}");
    assert!(err.contains("AGENTBUS_TRACE_URL is ignored"), "{err}");
}
