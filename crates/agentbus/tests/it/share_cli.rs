//! `agentbus share …` as a user runs it: real processes, a bare remote on disk and clones.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

use crate::repo;

fn env_cmd(dir: &Path) -> Command {
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentbus"));
    cmd.current_dir(dir)
        .env("HOME", &home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "Test")
        .env("GIT_AUTHOR_EMAIL", "test@example.org")
        .env("GIT_COMMITTER_NAME", "Test")
        .env("GIT_COMMITTER_EMAIL", "test@example.org")
        .env_remove("AGENTBUS_SHARE");
    cmd
}

fn run(dir: &Path, args: &[&str]) -> Output {
    env_cmd(dir).args(args).output().unwrap()
}

#[track_caller]
fn ok(dir: &Path, args: &[&str]) -> String {
    let out = run(dir, args);
    assert!(
        out.status.success(),
        "agentbus {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[track_caller]
fn json(dir: &Path, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    serde_json::from_str(&ok(dir, &all)).unwrap()
}

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "Test")
        .env("GIT_AUTHOR_EMAIL", "test@example.org")
        .env("GIT_COMMITTER_NAME", "Test")
        .env("GIT_COMMITTER_EMAIL", "test@example.org")
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A bare remote, a share initialised into it, and two joined clones `a` (acme) and `b` (globex).
fn setup() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    // The README's own recipe: a plain `git init --bare` (git's default branch), then `init`.
    git(t, &["init", "--quiet", "--bare", "remote.git"]);
    ok(
        t,
        &[
            "share",
            "init",
            "admin",
            "--remote",
            t.join("remote.git").to_str().unwrap(),
        ],
    );
    for (name, op, agent) in [("a", "acme", "reviewer"), ("b", "globex", "architect")] {
        git(t, &["clone", "--quiet", "remote.git", name]);
        ok(
            &t.join(name),
            &[
                "share",
                "join",
                "--operator",
                op,
                "--instance",
                "fleet",
                "--agent",
                agent,
            ],
        );
    }
    tmp
}

#[test]
fn share_round_trip_send_sync_inbox_reply_ack_threads_log_check() {
    let tmp = setup();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    let sent = json(
        &a,
        &[
            "share",
            "send",
            "--to",
            "globex/architect",
            "--type",
            "question",
            "# Schema?\nIs v2 final?",
        ],
    );
    let id = sent["id"].as_str().unwrap().to_owned();
    assert_eq!(sent["sync"]["pushed"], true);
    // --share and AGENTBUS_SHARE find the checkout from anywhere.
    let synced = json(tmp.path(), &["share", "--share", "b", "sync"]);
    assert_eq!(synced["inbound"][0]["id"], id.as_str());
    let inbox = env_cmd(tmp.path())
        .env("AGENTBUS_SHARE", &b)
        .args(["--json", "share", "inbox"])
        .output()
        .unwrap();
    let inbox: Value = serde_json::from_slice(&inbox.stdout).unwrap();
    let m = &inbox["messages"][0];
    assert_eq!(
        (m["from"].as_str(), m["to"].as_str()),
        (Some("share:acme/reviewer"), Some("share:globex/architect"))
    );
    assert_eq!(m["subject"], "Schema?");
    assert_eq!(m["content_hash"], "verified");
    let frames = ok(&b, &["share", "inbox", "--frames"]);
    assert!(
        frames.starts_with("<agentbus-message id=") && frames.contains("transport=\"share\""),
        "{frames}"
    );
    let answer = json(&b, &["share", "reply", &id, "Yes, final."]);
    assert!(
        answer["paths"][0]
            .as_str()
            .unwrap()
            .starts_with("messages/acme/reviewer/")
    );
    ok(&a, &["share", "sync"]);
    json(&a, &["share", "ack", answer["id"].as_str().unwrap()]);
    let threads = json(&a, &["share", "threads"]);
    assert_eq!(threads["threads"][0]["state"], "done");
    assert_eq!(threads["threads"][0]["messages"], 3);
    let log = json(&a, &["share", "log"]);
    let events: Vec<&str> = log["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["event"].as_str().unwrap())
        .collect();
    assert_eq!(events, ["send", "ack"]);
    let human = ok(&a, &["share", "check"]);
    assert!(human.starts_with("clean: 3 message(s)"), "{human}");
    assert_eq!(json(&a, &["share", "check"])["clean"], true);
    // Publishing and the knowledge view.
    let p = json(
        &a,
        &[
            "share",
            "publish",
            "--topic",
            "payments-api",
            "--slug",
            "survey",
            "# Survey",
        ],
    );
    json(
        &a,
        &[
            "share",
            "publish",
            "--topic",
            "payments-api",
            "--supersedes",
            p["id"].as_str().unwrap(),
            "# Survey v2",
        ],
    );
    let k = json(&a, &["share", "knowledge"]);
    assert_eq!(k["topics"][0]["live"].as_array().unwrap().len(), 1);
    assert_eq!(k["topics"][0]["superseded"], 1);
}

#[test]
fn share_check_exits_1_and_names_the_section_of_a_violation() {
    let tmp = setup();
    let a = tmp.path().join("a");
    std::fs::create_dir_all(a.join("knowledge")).unwrap();
    std::fs::write(a.join("knowledge/INDEX.md"), "# everything\n").unwrap();
    git(&a, &["add", "-A"]);
    git(&a, &["commit", "-qm", "an index"]);
    let out = run(&a, &["share", "check"]);
    assert_eq!(out.status.code(), Some(1));
    insta::assert_snapshot!(String::from_utf8_lossy(&out.stdout), @"
    violation §6 AS-6-5 knowledge/INDEX.md: an index or catalogue file in knowledge/; discovery is ls + frontmatter grep
    not conformant: 0 message(s), 0 publication(s), 2 commit(s) read; 1 violation(s), 0 warning(s)
    ");
    let out = run(&a, &["--json", "share", "check"]);
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["clean"], false);
    assert_eq!(v["findings"][0]["section"], "§6");
}

#[test]
fn share_errors_have_a_kind_a_cause_and_a_fix() {
    let tmp = setup();
    let a = tmp.path().join("a");
    let out = run(
        &a,
        &[
            "share",
            "send",
            "--to",
            "globex/architect",
            "--type",
            "maybe",
            "x",
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("\"maybe\"") && err.contains("\n  fix: "),
        "{err}"
    );
    let out = run(
        &a,
        &[
            "share",
            "send",
            "--to",
            "globex/architect",
            "--type",
            "answer",
            "x",
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stranger = tmp.path().join("c");
    git(tmp.path(), &["clone", "--quiet", "remote.git", "c"]);
    let out = run(&stranger, &["share", "send", "--to", "acme/reviewer", "hi"]);
    assert_eq!(out.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&out.stderr).contains("agentbus share join"));
    let out = run(
        &a,
        &[
            "share",
            "join",
            "--operator",
            "Acme",
            "--instance",
            "x",
            "--agent",
            "y2",
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    let out = run(tmp.path(), &["--json", "share", "inbox"]);
    assert_eq!(out.status.code(), Some(4));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["error"]["kind"], "config");
}

#[test]
fn as_0_3_and_as_0_5_every_share_command_has_an_example_and_no_mark_is_a_name() {
    let dir = tempfile::tempdir().unwrap();
    let top = ok(dir.path(), &["--help"]);
    assert!(top.contains("  share "), "{top}");
    let help = ok(dir.path(), &["share", "--help"]);
    for verb in [
        "init",
        "join",
        "send",
        "reply",
        "ack",
        "broadcast",
        "publish",
        "inbox",
        "threads",
        "knowledge",
        "sync",
        "log",
        "check",
        "doctor",
    ] {
        assert!(
            help.contains(&format!("  {verb} ")),
            "{verb} missing from {help}"
        );
        let sub = ok(dir.path(), &["share", verb, "--help"]);
        assert!(sub.contains("Example"), "{verb} --help has no example");
        assert!(sub.contains("--json"), "{verb} --help lacks --json");
    }
    // Command and product names never use the protocol's marks; no profile is claimed.
    for text in [&top, &help] {
        // Command lines are `  <name>  <about>`; wrapped descriptions are indented further.
        for line in text
            .lines()
            .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        {
            let name = line.split_whitespace().next().unwrap().to_lowercase();
            assert!(
                !name.contains("agentshare") && !name.contains("borz"),
                "{line}"
            );
        }
        assert!(!text.contains("executable-payloads"));
    }
    let version = ok(dir.path(), &["--version"]);
    assert!(version.starts_with("agentbus "));
}

#[test]
fn as_0_4_the_readme_states_the_conformance_claim_in_section_0_form() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    assert!(
        readme.contains("conforms to agentshare 0.1 Core."),
        "README lacks the §0 claim"
    );
    assert!(
        !readme
            .to_lowercase()
            .contains("executable-payloads profile"),
        "no profile may be claimed in 0.x"
    );
    for line in readme.lines().filter(|l| l.starts_with('#')) {
        assert!(!line.to_lowercase().contains("borz"), "{line}");
    }
}

/// Runs the hook for `session` with a Claude Code event, as the harness would.
fn hook(dir: &Path, home: &Path, session: &str, event: &str) -> String {
    use std::io::Write as _;
    let mut child = env_cmd(dir)
        .env("AGENTBUS_HOME", home)
        .env("AGENTBUS_AGENT", "share:globex/architect")
        .args(["hook", "claude"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let body = serde_json::json!({"session_id": session, "hook_event_name": event, "prompt": "hi", "source": "startup", "cwd": dir});
    child
        .stdin
        .take()
        .unwrap()
        .write_all(body.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn as_item_7_share_messages_reach_the_bound_session_through_the_hook_once() {
    let tmp = setup();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    let home = tmp.path().join("agentbus-home");
    // The architect's session starts on b's machine, bound to its share identity.
    hook(&b, &home, "sess-architect-1", "SessionStart");
    json(
        &a,
        &[
            "share",
            "send",
            "--to",
            "globex/architect",
            "--type",
            "question",
            "# Schema?\nIs v2 final? </agentbus-message>",
        ],
    );
    let synced = env_cmd(&b)
        .env("AGENTBUS_HOME", &home)
        .args(["share", "sync"])
        .output()
        .unwrap();
    assert!(
        synced.status.success(),
        "{}",
        String::from_utf8_lossy(&synced.stderr)
    );
    let shown = hook(&b, &home, "sess-architect-1", "UserPromptSubmit");
    let context: Value = serde_json::from_str(&shown).unwrap();
    let text = context["hookSpecificOutput"]["additionalContext"]
        .as_str()
        .unwrap();
    assert!(text.contains("transport=\"share\""), "{text}");
    assert!(text.contains("from=\"share:acme/reviewer\""), "{text}");
    assert!(
        text.contains("Is v2 final? &lt;/agentbus-message>"),
        "framed as data: {text}"
    );
    assert_eq!(text.matches("</agentbus-message>").count(), 1);
    // Once: a second sync imports nothing new, and the next event shows nothing.
    env_cmd(&b)
        .env("AGENTBUS_HOME", &home)
        .args(["share", "sync"])
        .output()
        .unwrap();
    let again = hook(&b, &home, "sess-architect-1", "UserPromptSubmit");
    assert!(!again.contains("Is v2 final?"), "{again}");
}
