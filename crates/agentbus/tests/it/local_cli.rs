//! Local messaging as a user and a harness run it: real processes on a real store (LM-39, LM-65,
//! LM-68, LM-81, issue items 4, 5 and 8).

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

/// Runs agentbus with the store at `home`, feeding `stdin`.
fn run(home: &Path, args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_agentbus"))
        .args(args)
        .env("AGENTBUS_HOME", home)
        .env("AGENTBUS_ENGINEER_EMAIL", "ada@example.com")
        .env_remove("AGENTBUS_SESSION")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

fn prompt(sid: &str) -> Vec<u8> {
    format!(r#"{{"session_id":"{sid}","hook_event_name":"UserPromptSubmit","prompt":"go"}}"#)
        .into_bytes()
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

#[test]
fn lm_1_lm_3_tell_local_from_a_terminal_appends_one_line_by_the_engineer() {
    let home = tempfile::tempdir().unwrap();
    let out = run(home.path(), &["--json", "tell", "local", "hi"], b"");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = std::fs::read_to_string(home.path().join("messages.jsonl")).unwrap();
    assert_eq!(log.lines().count(), 1);
    let line: Value = serde_json::from_str(log.trim()).unwrap();
    assert_eq!(line["by"], "engineer:ada@example.com");
    assert_eq!(
        line["to"],
        format!("local@{}", line["node"].as_str().unwrap())
    );
}

#[test]
fn lm_39_fifty_racing_hook_processes_show_every_message_exactly_once() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    assert!(
        run(h, &["hook", "claude"], &prompt("racer"))
            .status
            .success()
    );
    let mut ids = Vec::new();
    for i in 0..30 {
        let out = run(
            h,
            &[
                "--json",
                "tell",
                "--from",
                &format!("peer{i}"),
                "racer",
                &format!("message {i}"),
            ],
            b"",
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        ids.push(json(&out)["id"].as_str().unwrap().to_owned());
    }
    let children: Vec<_> = (0..50)
        .map(|_| {
            let mut c = Command::new(env!("CARGO_BIN_EXE_agentbus"))
                .args(["hook", "claude"])
                .env("AGENTBUS_HOME", h)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            c.stdin.take().unwrap().write_all(&prompt("racer")).unwrap();
            c
        })
        .collect();
    let mut shown: Vec<String> = Vec::new();
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(out.status.success());
        if out.stdout.is_empty() {
            continue;
        }
        let doc = json(&out);
        let ctx = doc["hookSpecificOutput"]["additionalContext"]
            .as_str()
            .unwrap();
        for id in &ids {
            shown.extend(std::iter::repeat_n(
                id.clone(),
                ctx.matches(&format!("id=\"{id}\"")).count(),
            ));
        }
    }
    // Whatever the race left waiting shows at the next events, still once.
    for _ in 0..5 {
        let out = run(h, &["hook", "claude"], &prompt("racer"));
        if !out.stdout.is_empty() {
            let ctx = json(&out)["hookSpecificOutput"]["additionalContext"]
                .as_str()
                .unwrap()
                .to_owned();
            for id in &ids {
                shown.extend(std::iter::repeat_n(
                    id.clone(),
                    ctx.matches(&format!("id=\"{id}\"")).count(),
                ));
            }
        }
    }
    shown.sort();
    let mut want = ids.clone();
    want.sort();
    assert_eq!(shown, want, "every message exactly once");
    let claims = std::fs::read_dir(h.join("messages/seen/racer"))
        .unwrap()
        .count();
    assert_eq!(claims, ids.len(), "one claim file per id");
}

#[test]
fn lm_65_twenty_concurrent_tells_to_a_fresh_recipient_admit_exactly_one() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    run(h, &["hook", "claude"], &prompt("target"));
    let children: Vec<_> = (0..20)
        .map(|i| {
            Command::new(env!("CARGO_BIN_EXE_agentbus"))
                .args(["tell", "--from", "sender", "target", &format!("t{i}")])
                .env("AGENTBUS_HOME", h)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let ok = children
        .into_iter()
        .filter(|_| true)
        .map(|mut c| c.wait().unwrap().success())
        .filter(|s| *s)
        .count();
    assert_eq!(ok, 1);
}

#[test]
fn lm_68_a_refused_send_names_its_reason() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    run(h, &["hook", "claude"], &prompt("target"));
    assert!(run(h, &["tell", "target", "one"], b"").status.success());
    let out = run(h, &["--json", "tell", "target", "two"], b"");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        json(&out)["error"]["message"]
            .as_str()
            .unwrap()
            .contains("window_full")
    );
    let out = run(h, &["--json", "tell", "nobody-here", "x"], b"");
    assert_eq!(out.status.code(), Some(3));
}

#[test]
fn other_transports_are_refused_clearly_until_they_are_set_up() {
    let home = tempfile::tempdir().unwrap();
    // Gateway addresses need a connected agent: the fix says how to connect.
    for address in ["agent://acme/backend/reviewer", "topic://acme/builds"] {
        let out = run(home.path(), &["--json", "tell", address, "hi"], b"");
        assert_eq!(out.status.code(), Some(4), "{address}");
        let err = &json(&out)["error"];
        assert!(
            err["message"]
                .as_str()
                .unwrap()
                .contains("no agent is connected"),
            "{err}"
        );
        assert!(
            err["fix"].as_str().unwrap().contains("agentbus connect"),
            "{err}"
        );
    }
    let out = run(
        home.path(),
        &["--json", "tell", "share:acme/reviewer", "hi"],
        b"",
    );
    assert_eq!(out.status.code(), Some(4));
    let msg = json(&out)["error"]["message"].as_str().unwrap().to_owned();
    assert!(
        msg.contains("transport is not available in this build yet"),
        "{msg}"
    );
}

#[test]
fn lm_81_lm_45_inbox_shows_the_engineer_s_messages_once_and_show_prints_them_whole() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    let long = "word ".repeat(50);
    let out = run(
        h,
        &["--json", "tell", "--from", "s1", "engineer", &long],
        b"",
    );
    let id = json(&out)["id"].as_str().unwrap().to_owned();
    let out = run(h, &["--json", "inbox"], b"");
    assert_eq!(json(&out)["items"].as_array().unwrap().len(), 1);
    let out = run(h, &["--json", "inbox"], b"");
    assert!(
        json(&out)["items"].as_array().unwrap().is_empty(),
        "acknowledged by the first look"
    );
    let out = run(h, &["inbox", "--show", &id], b"");
    assert!(String::from_utf8_lossy(&out.stdout).contains(long.trim_end()));
}

#[test]
fn lm_56_listen_waits_on_an_empty_store_and_wakes_on_the_first_tell() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    let listener = Command::new(env!("CARGO_BIN_EXE_agentbus"))
        .args(["--json", "listen", "--count", "1", "--poll-ms", "20"])
        .env("AGENTBUS_HOME", h)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // The listener records what exists when it starts, so a tell written before that is not
    // news: keep telling (each from a new sender, so none is paced) until it has printed one.
    let mut listener = listener;
    for n in 0..2000 {
        if listener.try_wait().unwrap().is_some() {
            break;
        }
        run(h, &["tell", "--from", &format!("w{n}"), "all", "wake"], b"");
    }
    let out = listener.wait_with_output().unwrap();
    let first: Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().next().unwrap()).unwrap();
    assert_eq!(first["transport"], "local");
}

#[test]
fn hooks_install_is_idempotent_and_uninstall_leaves_other_hooks() {
    let dir = tempfile::tempdir().unwrap();
    let settings = dir.path().join("settings.json");
    std::fs::write(&settings, r#"{"model":"x","hooks":{"PreToolUse":[{"matcher":"Bash","hooks":[{"type":"command","command":"lint.sh"}]}]}}"#).unwrap();
    let s = settings.to_str().unwrap();
    for harness in ["claude", "codex"] {
        let install = || {
            let args = [
                "--json",
                "hooks",
                "install",
                harness,
                "--settings",
                s,
                "--program",
                "/opt/agentbus",
            ];
            run(dir.path(), &args, b"")
        };
        let first = install();
        assert!(
            first.status.success(),
            "{}",
            String::from_utf8_lossy(&first.stderr)
        );
        let once = std::fs::read_to_string(&settings).unwrap();
        let again = install();
        assert_eq!(json(&again)["change"], "unchanged");
        assert_eq!(std::fs::read_to_string(&settings).unwrap(), once);
        let v: Value = serde_json::from_str(&once).unwrap();
        assert!(once.contains(&format!("/opt/agentbus hook {harness}")));
        assert_eq!(v["model"], "x");
        run(
            dir.path(),
            &["hooks", "uninstall", harness, "--settings", s],
            b"",
        );
        let after = std::fs::read_to_string(&settings).unwrap();
        assert!(
            !after.contains("/opt/agentbus") && after.contains("lint.sh"),
            "{after}"
        );
    }
    let plugin = dir.path().join("agentbus.js");
    let p = plugin.to_str().unwrap();
    assert!(
        run(
            dir.path(),
            &[
                "hooks",
                "install",
                "opencode",
                "--settings",
                p,
                "--program",
                "/opt/agentbus"
            ],
            b""
        )
        .status
        .success()
    );
    assert!(
        std::fs::read_to_string(&plugin)
            .unwrap()
            .contains("\"/opt/agentbus\"")
    );
    assert!(
        run(
            dir.path(),
            &["hooks", "uninstall", "opencode", "--settings", p],
            b""
        )
        .status
        .success()
    );
    assert!(!plugin.exists());
}

#[test]
fn every_local_verb_has_help_with_an_example() {
    let home = tempfile::tempdir().unwrap();
    for verb in [
        "tell", "ask", "reply", "pause", "resume", "inbox", "listen", "sessions", "hook",
    ] {
        let out = run(home.path(), &[verb, "--help"], b"");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("Example"), "{verb}: {text}");
    }
}

#[test]
fn a_bad_hook_event_never_fails_the_harness() {
    let home = tempfile::tempdir().unwrap();
    let out = run(home.path(), &["hook", "claude"], b"not json");
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stdout.is_empty());
    let out = run(
        home.path(),
        &["hook", "claude"],
        br#"{"session_id":"../../etc","hook_event_name":"UserPromptSubmit"}"#,
    );
    assert_eq!(out.status.code(), Some(0));
    assert!(!home.path().join("etc").exists());
}
