//! One `--json` document per command, whatever its flags: each command's document is a snapshot
//! with the values that change from run to run redacted (ids, times, signatures, the gateway's
//! URL, this machine's paths), and a command's variants (`send` and `delegate` with and without
//! `--wait`, every line a wait prints, `trace` of a task and of a message) print the same fields.
//! Also short addresses (`reviewer` for the agent of the profile's workspace) and the warning for
//! a secret in a subject, capability or idempotency key (§13.4). A real gateway on loopback.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::gateway_cli::{Gw, Machine, eventually, finish, pair, redact};

/// Fields whose value differs from run to run though it is no id or time.
const VOLATILE: [&str; 19] = [
    "sig",
    "signature",
    "presence",
    "queue_depth",
    "next",
    "sha256",
    "trace_id",
    "traceparent",
    "public_key",
    "token",
    "ms",
    "sequence",
    "seq",
    "stored_at_ms",
    "elapsed_ms",
    "skew_s",
    "node",
    "digest",
    "size",
];

/// `v` with volatile values replaced: strings through [`redact`] after the gateway's URL and the
/// machines' homes, and the [`VOLATILE`] fields whatever their value.
fn scrub(v: &Value, gw: &Gw, homes: &[&Machine]) -> Value {
    match v {
        Value::String(s) => {
            let mut s = s.replace(&gw.url, "[gateway]");
            for m in homes {
                s = s.replace(m.home().to_str().unwrap(), &format!("[home of {}]", m.name));
            }
            Value::String(redact(&more_ids(&s)))
        }
        Value::Array(a) => Value::Array(a.iter().map(|x| scrub(x, gw, homes)).collect()),
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, x)| {
                    let x = if VOLATILE.contains(&k.as_str()) && !x.is_null() {
                        Value::String("[volatile]".into())
                    } else {
                        scrub(x, gw, homes)
                    };
                    (k.clone(), x)
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

/// `s` with the ids [`redact`] leaves (tenants, workspaces, users, tokens) redacted.
fn more_ids(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(at) = ["usr_", "tok_", "ten_", "ws_"]
        .iter()
        .filter_map(|p| rest.find(p).map(|i| (i, p.len())))
        .min()
    {
        let (i, len) = at;
        let end = rest[i + len..]
            .find(|c: char| !c.is_ascii_alphanumeric())
            .map_or(rest.len(), |j| i + len + j);
        out.push_str(&rest[..i + len]);
        out.push_str("[id]");
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// Every JSON document a command printed, in order.
fn documents(out: &[u8]) -> Vec<Value> {
    serde_json::Deserializer::from_slice(out)
        .into_iter::<Value>()
        .map(Result::unwrap)
        .collect()
}

fn fields(v: &Value) -> BTreeSet<String> {
    v.as_object().unwrap().keys().cloned().collect()
}

/// The id of the first message in `m`'s inbox for which `pick` holds, receiving until one is.
fn received(m: &Machine, pick: impl Fn(&Value) -> bool) -> Value {
    eventually(20, "a message in the inbox", || {
        m.ok(&["--json", "sidecar", "--once"]);
        m.stored().into_iter().find(|r| pick(&r["envelope"]))
    })["envelope"]
        .clone()
}

#[test]
fn every_command_prints_one_json_shape_whatever_its_flags() {
    // A reviewer that read its inbox within the minute is online: no offline warning.
    let gw = Gw::start_with(|c| c.visibility_timeout_s = 60);
    let (bot, reviewer) = pair(&gw, "release-bot", "reviewer");
    let admin = Machine::new("admin");
    // The commands in the order they run; one snapshot each (`json_<name>`).
    let mut docs: Vec<(&str, Value)> = vec![
        ("connect", reviewer.connect(&gw)),
        (
            "card",
            reviewer.ok(&["--json", "card", "edit", "--capability", "code.review@1"]),
        ),
        ("agents", bot.ok(&["--json", "agents"])),
        (
            "agents_show",
            bot.ok(&["--json", "agents", "show", "reviewer"]),
        ),
    ];

    // send, without and with --wait (every line of the wait is the same document).
    let sent = bot.ok(&[
        "--json",
        "send",
        "reviewer",
        "hello",
        "--subject",
        "greeting",
    ]);
    let waiting = bot.spawn(&["--json", "send", "reviewer", "ping?", "--wait", "30s"]);
    let ping = received(&reviewer, |e| e["data"]["text"] == "ping?");
    docs.push((
        "reply",
        reviewer.ok(&["--json", "reply", ping["id"].as_str().unwrap(), "pong"]),
    ));
    let lines = documents(&finish(waiting).stdout);
    assert_eq!(lines.len(), 2, "{lines:?}");
    for line in &lines {
        assert_eq!(fields(line), fields(&sent), "send --wait: {line}");
    }
    assert_eq!(lines[1]["reply"]["envelope"]["data"]["text"], "pong");
    docs.push(("send", sent.clone()));
    docs.push(("send_wait", lines[1].clone()));
    let hello = received(&reviewer, |e| e["data"]["text"] == "hello");
    docs.push((
        "ack",
        reviewer.ok(&["--json", "ack", hello["id"].as_str().unwrap()]),
    ));

    // delegate, without and with --wait; the worker's verbs.
    let delegated = bot.ok(&[
        "--json",
        "delegate",
        "reviewer",
        "--capability",
        "code.review",
        "--idempotency-key",
        "review-482",
        "Review change 482.",
    ]);
    let task = delegated["task_id"].as_str().unwrap().to_owned();
    received(&reviewer, |e| e["type"] == "agentbus.task.request.v1");
    docs.push(("accept", reviewer.ok(&["--json", "accept", &task])));
    docs.push((
        "progress",
        reviewer.ok(&["--json", "progress", &task, "--percent", "50"]),
    ));
    docs.push((
        "complete",
        reviewer.ok(&["--json", "complete", &task, "--summary", "fine"]),
    ));
    let waiting = bot.spawn(&[
        "--json",
        "delegate",
        "reviewer",
        "--capability",
        "code.review",
        "--idempotency-key",
        "review-483",
        "--wait",
        "30s",
        "Review change 483.",
    ]);
    let request = received(&reviewer, |e| {
        e["type"] == "agentbus.task.request.v1" && e["data"]["instructions"] == "Review change 483."
    });
    let second = request["id"].as_str().unwrap();
    reviewer.ok(&["--json", "accept", second]);
    reviewer.ok(&["--json", "complete", second, "--summary", "also fine"]);
    let lines = documents(&finish(waiting).stdout);
    assert_eq!(lines.len(), 2, "{lines:?}");
    for line in &lines {
        assert_eq!(fields(line), fields(&delegated), "delegate --wait: {line}");
    }
    assert_eq!(lines[1]["task"]["state"], "succeeded");
    docs.push(("delegate", delegated));
    docs.push(("delegate_wait", lines[1].clone()));

    // trace of a task and of a message: the same fields.
    let traced_task = bot.ok(&["--json", "trace", &task]);
    let traced_message = bot.ok(&["--json", "trace", sent["id"].as_str().unwrap()]);
    assert_eq!(fields(&traced_task), fields(&traced_message));
    docs.push(("trace_task", traced_task));
    docs.push(("trace_message", traced_message));
    docs.push(("tasks", bot.ok(&["--json", "tasks", "--limit", "1"])));
    docs.push(("sent", bot.ok(&["--json", "sent", "--limit", "1"])));
    // The first item: how many arrived by now is not this test's business.
    let mut inbox = bot.ok(&["--json", "inbox"]);
    inbox["items"] = Value::Array(inbox["items"].as_array().unwrap()[..1].to_vec());
    docs.push(("inbox", inbox));
    // The clock's skew and the sidecar's counts are this run's.
    let mut doctor = bot.ok(&["--json", "doctor"]);
    for f in doctor["profiles"][0]["findings"].as_array_mut().unwrap() {
        if f["check"] == "clock" || f["check"] == "sidecar" {
            f["detail"] = Value::String("[volatile]".into());
        }
    }
    docs.push(("doctor", doctor));
    let as_admin = |args: &[&str]| {
        let out = admin
            .cmd(args)
            .env("AGENTBUS_GATEWAY", &gw.url)
            .env("AGENTBUS_TOKEN", &gw.admin)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        crate::gateway_cli::last_json(&out.stdout)
    };
    docs.push(("users", as_admin(&["--json", "users", "list"])));
    docs.push(("tokens", as_admin(&["--json", "tokens", "list"])));

    for (name, doc) in docs {
        let doc = scrub(&doc, &gw, &[&bot, &reviewer, &admin]);
        insta::assert_snapshot!(
            format!("json_{name}"),
            serde_json::to_string_pretty(&doc).unwrap()
        );
    }
}

#[test]
fn wp_13_4_1_a_subject_capability_or_idempotency_key_that_looks_like_a_secret_is_warned_of() {
    let gw = Gw::start();
    let (bot, reviewer) = pair(&gw, "release-bot", "reviewer");
    reviewer.ok(&["--json", "card", "edit", "--capability", "code.review@1"]);
    let warning = |field: &str, rule: &str| {
        format!(
            "the {field} looks like it holds a secret ({rule}): gateways, logs and traces read it in the clear (§13.4); keep secrets out of subjects, capabilities and idempotency keys, and rotate this one if it is real"
        )
    };
    // send: one line on stderr, the same in `warnings`; the message is sent all the same.
    let args = [
        "send",
        "reviewer",
        "the deploy",
        "--subject",
        "use AKIAIOSFODNN7EXAMPLE",
    ];
    let out = bot.run(&args);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!("warning: {}\n", warning("subject", "aws-access-key-id"))
    );
    let mut json = vec!["--json"];
    json.extend(args);
    let doc = bot.ok(&json);
    assert_eq!(
        doc["warnings"],
        serde_json::json!([warning("subject", "aws-access-key-id")])
    );
    // delegate: the subject and the idempotency key, each named.
    let doc = bot.ok(&[
        "--json",
        "delegate",
        "reviewer",
        "--capability",
        "code.review",
        "--subject",
        "token=ghp_abcdefghijklmnopqrstuvwxyz0123456789",
        "--idempotency-key",
        "sk-abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJ",
        "Review.",
    ]);
    // (The reviewer runs no worker: the offline warning follows these.)
    assert_eq!(
        doc["warnings"].as_array().unwrap()[..2],
        [
            warning("subject", "github"),
            warning("idempotency key", "openai")
        ]
    );
    assert!(doc["task_id"].is_string(), "{doc}");
    // A capability is warned of before the gateway answers (this one it refuses: the worker
    // declares no such capability).
    let out = bot.run(&[
        "delegate",
        "reviewer",
        "--capability",
        "AKIAIOSFODNN7EXAMPLE",
        "Review.",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with(&format!(
            "warning: {}\n",
            warning("capability", "aws-access-key-id")
        )),
        "{err}"
    );
    // Two keys of one family with another between them: each rule is named once.
    let doc = bot.ok(&[
        "--json",
        "send",
        "reviewer",
        "three keys",
        "--subject",
        "AKIAIOSFODNN7EXAMPLE ghp_abcdefghijklmnopqrstuvwxyz0123456789 ASIAY34FZKBOKMUTVV7A",
    ]);
    assert_eq!(
        doc["warnings"],
        serde_json::json!([warning("subject", "aws-access-key-id, github")])
    );
    // Nothing secret-looking, no warning.
    let doc = bot.ok(&["--json", "send", "reviewer", "hi", "--subject", "CI run 42"]);
    assert_eq!(doc["warnings"], serde_json::json!([]));
}

#[test]
fn a_short_name_is_the_agent_of_the_workspace_for_gateway_verbs_and_a_session_for_local_ones() {
    let gw = Gw::start();
    let (bot, reviewer) = pair(&gw, "release-bot", "reviewer");
    // send and delegate: `reviewer` is agent://default/default/reviewer.
    let sent = bot.ok(&["--json", "send", "reviewer", "hello"]);
    assert_eq!(sent["to"], reviewer.address());
    let out = bot.run(&["send", "reviewer", "hello again"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).ends_with(&format!(" to {}\n", reviewer.address())),
        "{out:?}"
    );
    // An alias is a name too.
    reviewer.ok(&["--json", "card", "edit", "--set", r#"{"aliases": ["rev"]}"#]);
    assert_eq!(
        bot.ok(&["--json", "send", "rev", "by alias"])["to"],
        reviewer.address()
    );
    // No agent of that name: one line of cause, one fix naming a command, AB-3065, exit 3.
    let out = bot.run(&["send", "nobody", "hello"]);
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "error: AB-3065: no agent named \"nobody\" in agent://default/default\n  fix: run `agentbus agents` to list the directory; write an agent outside the workspace by its whole address (agent://<tenant>/<workspace>/<name>)\n"
    );
    let doc = crate::gateway_cli::last_json(&bot.run(&["--json", "send", "nobody", "x"]).stdout);
    assert_eq!(doc["error"]["code"], "AB-3065");
    // tell and ask keep reading a bare word as a session of this machine.
    let out = bot.run(&["tell", "reviewer", "hello"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.starts_with("error: no session on this machine matches \"reviewer\""),
        "{err}"
    );
    // ... and reach the agent by its whole address.
    let told = bot.ok(&["--json", "tell", &reviewer.address(), "hello"]);
    assert_eq!(told["to"], reviewer.address());
}
