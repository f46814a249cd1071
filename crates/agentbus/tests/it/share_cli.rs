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

/// An empty inbox says so (and how to fetch), rather than printing nothing; `--json` stays an
/// empty list.
#[test]
fn share_inbox_says_when_it_is_empty() {
    let tmp = setup();
    let b = tmp.path().join("b");
    assert_eq!(
        ok(&b, &["share", "inbox"]),
        "no messages for this checkout; `agentbus share sync` fetches new ones\n"
    );
    assert_eq!(
        ok(&b, &["share", "inbox", "--agent", "architect"]),
        "no messages for agent architect; `agentbus share sync` fetches new ones\n"
    );
    assert_eq!(
        json(&b, &["share", "inbox"])["messages"],
        serde_json::json!([])
    );
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
    hook_as(dir, home, "share:globex/architect", session, event)
}

/// [`hook`] for a session bound to `agent`.
fn hook_as(dir: &Path, home: &Path, agent: &str, session: &str, event: &str) -> String {
    use std::io::Write as _;
    let mut child = env_cmd(dir)
        .env("AGENTBUS_HOME", home)
        .env("AGENTBUS_AGENT", agent)
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

/// Commits the hostile files of `agentbus-share`'s test data into acme/reviewer's folder, as a
/// participant with plain git would.
fn commit_foreign_files(t: &Path) {
    git(t, &["clone", "--quiet", "remote.git", "mallory"]);
    let m = t.join("mallory");
    let dir = m.join("messages/acme/reviewer");
    std::fs::create_dir_all(&dir).unwrap();
    let data = repo().join("crates/agentbus-share/tests/data/foreign");
    for e in std::fs::read_dir(data).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dir.join(e.file_name())).unwrap();
    }
    // A file name can carry an escape sequence too; it is shown, never run by the terminal.
    std::fs::write(dir.join("\u{1b}]0;owned\u{7}title.md"), "no frontmatter\n").unwrap();
    git(&m, &["add", "-A"]);
    git(&m, &["commit", "-qm", "foreign files"]);
    git(&m, &["push", "-q", "origin", "HEAD"]);
}

#[test]
fn share_sync_skips_unsafe_foreign_files_delivers_the_rest_and_exits_7_once() {
    let tmp = setup();
    let a = tmp.path().join("a");
    let home = tmp.path().join("agentbus-home");
    hook_as(
        &a,
        &home,
        "share:acme/reviewer",
        "sess-reviewer-1",
        "SessionStart",
    );
    commit_foreign_files(tmp.path());
    let sync = |json: bool| {
        let mut cmd = env_cmd(&a);
        cmd.env("AGENTBUS_HOME", &home);
        if json {
            cmd.arg("--json");
        }
        cmd.args(["share", "sync"]).output().unwrap()
    };
    let out = sync(true);
    assert_eq!(
        out.status.code(),
        Some(7),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let warnings: Vec<&str> = v["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap())
        .collect();
    for name in [
        "skip-id-bell.md",
        "skip-not-utf8.md",
        "ok-from-non-ascii-operator.md",
    ] {
        assert!(
            warnings.iter().any(|w| w.contains(name)),
            "{name}: {warnings:#?}"
        );
    }
    // What could be delivered was: the session sees the plain message, once, framed.
    let shown = hook_as(
        &a,
        &home,
        "share:acme/reviewer",
        "sess-reviewer-1",
        "UserPromptSubmit",
    );
    assert!(shown.contains("An ordinary message."), "{shown}");
    // The reply hint quotes what the sender wrote; pasted, it passes the id as one word.
    assert!(
        shown.contains(r#"To answer: agentbus share reply 'x$(touch PWNED); echo'"#),
        "{shown}"
    );
    let inbox = json(&a, &["share", "inbox"]);
    let hostile = inbox["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"] == "x$(touch PWNED); echo")
        .unwrap();
    let command = hostile["reply_command"].as_str().unwrap();
    let pasted = Command::new("sh")
        .current_dir(tmp.path())
        .arg("-c")
        .arg(format!(
            "agentbus() {{ printf '%s\\n' \"$@\"; }}\n{command}"
        ))
        .output()
        .unwrap();
    let words = String::from_utf8(pasted.stdout).unwrap();
    assert_eq!(
        words.lines().nth(2),
        Some("x$(touch PWNED); echo"),
        "{words}"
    );
    assert!(!tmp.path().join("PWNED").exists() && !a.join("PWNED").exists());
    // Human output shows no raw escape sequence from a foreign subject.
    let human = ok(&a, &["share", "inbox"]);
    assert!(!human.contains('\u{1b}'), "{human:?}");
    assert!(
        human.contains("skipped messages/acme/reviewer/skip-id-bell.md"),
        "{human}"
    );
    // Reported once: the next sync brings nothing new and exits 0.
    let out = sync(false);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn share_init_follows_the_remote_head_resumes_and_refuses_a_broken_remote_with_the_fix() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    git(t, &["init", "--quiet", "--bare", "remote.git"]);
    let remote = t.join("remote.git");
    let remote = remote.to_str().unwrap();
    let first = ok(t, &["share", "init", "admin", "--remote", remote]);
    assert!(first.starts_with("a new share in admin ("), "{first}");
    assert!(first.contains("branch master"), "{first}");
    let again = ok(t, &["share", "init", "admin", "--remote", remote]);
    assert!(
        again.contains("is already a share") && again.contains("nothing changed"),
        "{again}"
    );
    let v = json(t, &["share", "init", "admin", "--remote", remote]);
    assert_eq!(
        (v["outcome"].as_str(), v["branch"].as_str()),
        (Some("existing"), Some("master"))
    );
    // A remote whose HEAD names a branch it does not have: refused, with what to do.
    git(t, &["init", "--quiet", "--bare", "broken.git"]);
    git(t, &["clone", "--quiet", "remote.git", "src"]);
    git(
        &t.join("src"),
        &[
            "push",
            "-q",
            t.join("broken.git").to_str().unwrap(),
            "HEAD:refs/heads/main",
        ],
    );
    let out = run(t, &["share", "init", "x", "--remote", "broken.git"]);
    assert_eq!(out.status.code(), Some(4));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no branch master (it has main)") && err.contains("fix: check out"),
        "{err}"
    );
    assert!(!t.join("x").exists());
}

#[test]
fn share_errors_name_a_missing_folder_a_dirty_registry_and_a_strict_refusal() {
    let tmp = setup();
    let a = tmp.path().join("a");
    let out = run(tmp.path(), &["share", "--share", "/no/such/dir", "inbox"]);
    assert_eq!(out.status.code(), Some(4));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("/no/such/dir does not exist") && !err.contains("install git"),
        "{err}"
    );
    let out = run(tmp.path(), &["share", "check", "/no/such/dir"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not exist"));
    // --strict refuses an address operators.yaml does not declare; without it, a warning.
    let out = run(
        &a,
        &[
            "share",
            "send",
            "--strict",
            "--to",
            "globex/architcet",
            "hi",
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("globex has no agent architcet"));
    let sent = ok(&a, &["share", "send", "--to", "globex/architcet", "hi"]);
    assert!(
        sent.contains("warning: globex has no agent architcet"),
        "{sent}"
    );
    // A half-edited operators.yaml is named, with the fix, and left as it is.
    let path = a.join("operators.yaml");
    let half = format!("{}# note\n", std::fs::read_to_string(&path).unwrap());
    std::fs::write(&path, &half).unwrap();
    let out = run(
        &a,
        &[
            "share",
            "join",
            "--operator",
            "acme",
            "--instance",
            "fleet",
            "--agent",
            "writer",
        ],
    );
    assert_eq!(out.status.code(), Some(4));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("uncommitted changes to operators.yaml")
            && err.contains("git checkout -- operators.yaml"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), half);
}

#[test]
fn as_0_2_every_share_command_works_with_only_git_on_path() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    // A PATH with nothing on it but git: no server, no daemon, no other tool.
    let bin = t.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let which = Command::new("sh")
        .args(["-c", "command -v git"])
        .output()
        .unwrap();
    let real_git = String::from_utf8(which.stdout).unwrap();
    std::os::unix::fs::symlink(real_git.trim(), bin.join("git")).unwrap();
    let run_only_git = |dir: &Path, args: &[&str]| {
        let out = env_cmd(dir)
            .env("PATH", &bin)
            .env("AGENTBUS_HOME", t.join("home"))
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "agentbus {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let git_only = |dir: &Path, args: &[&str]| {
        let out = Command::new(bin.join("git"))
            .current_dir(dir)
            .env("PATH", &bin)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}");
    };
    git_only(t, &["init", "--quiet", "--bare", "remote.git"]);
    run_only_git(t, &["share", "init", "admin", "--remote", "remote.git"]);
    for (name, op) in [("a", "acme"), ("b", "globex")] {
        git_only(t, &["clone", "--quiet", "remote.git", name]);
        run_only_git(
            &t.join(name),
            &[
                "share",
                "join",
                "--operator",
                op,
                "--instance",
                "fleet",
                "--agent",
                "bot",
            ],
        );
    }
    let (a, b) = (t.join("a"), t.join("b"));
    let sent = run_only_git(
        &a,
        &[
            "--json",
            "share",
            "send",
            "--to",
            "globex/bot",
            "--type",
            "question",
            "Q?",
        ],
    );
    let id = serde_json::from_str::<Value>(&sent).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    run_only_git(&b, &["share", "sync"]);
    run_only_git(&b, &["share", "inbox"]);
    run_only_git(&b, &["share", "reply", &id, "A."]);
    run_only_git(&a, &["share", "sync"]);
    run_only_git(&a, &["share", "ack", &id, "ok"]);
    run_only_git(&a, &["share", "broadcast", "news"]);
    run_only_git(&a, &["share", "publish", "--topic", "specs", "Spec"]);
    for view in [
        &["share", "threads"][..],
        &["share", "knowledge"],
        &["share", "log"],
        &["share", "doctor"],
    ] {
        run_only_git(&a, view);
    }
    let check = run_only_git(&a, &["share", "check"]);
    assert!(check.starts_with("clean:"), "{check}");
}

#[test]
fn as_0_6_and_as_9_1_the_docs_are_agentbus_notes_pinned_to_0_1_0() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let notes = std::fs::read_to_string(repo().join("docs/share.md")).unwrap();
    // §0: our own document calls itself notes on the protocol, never a version of it.
    assert!(notes.contains("These are AgentBus notes"), "docs/share.md");
    assert!(notes.contains("not a version of that specification"));
    // Every version the project's texts name next to the protocol is the one claimed.
    for (name, text) in [("README.md", &readme), ("docs/share.md", &notes)] {
        let mut rest = text.as_str();
        while let Some(i) = rest.find("agentshare ") {
            rest = &rest[i + "agentshare ".len()..];
            if rest.starts_with(|c: char| c.is_ascii_digit()) {
                let version: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_digit() || *c == '.')
                    .collect();
                let version = version.trim_end_matches('.');
                assert!(
                    version == "0.1" || version == "0.1.0",
                    "{name}: agentshare {version}"
                );
            }
        }
    }
    // §9: the pinned version is announced, and is the one every file declares.
    assert!(readme.contains("we pin 0.1.0"), "README");
    assert_eq!(agentbus_share::frontmatter::PROTOCOL, "0.1.0");
}

#[test]
fn as_3_2_4_a_matching_hash_is_never_called_a_verified_sender() {
    let tmp = setup();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    ok(&a, &["share", "send", "--to", "globex/architect", "hello"]);
    ok(&b, &["share", "sync"]);
    let json_inbox = ok(&b, &["--json", "share", "inbox"]);
    assert!(
        json_inbox.contains("\"content_hash\": \"verified\""),
        "{json_inbox}"
    );
    for out in [
        ok(&b, &["share", "inbox"]),
        ok(&b, &["share", "inbox", "--frames"]),
        json_inbox,
    ] {
        let lower = out.to_lowercase();
        for claim in [
            "verified sender",
            "authenticated",
            "signed by",
            "verified=\"true\"",
        ] {
            assert!(!lower.contains(claim), "{claim} in {out}");
        }
    }
    let frames = ok(&b, &["share", "inbox", "--frames"]);
    assert!(frames.contains("verified=\"unsigned\""), "{frames}");
    let notes = std::fs::read_to_string(repo().join("docs/share.md")).unwrap();
    assert!(notes.contains("integrity and deduplication, not authentication"));
}

#[test]
fn as_item_7_share_mail_local_delivery_has_no_room_for_is_handed_over_in_order_at_later_syncs() {
    let tmp = setup();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    let home = tmp.path().join("agentbus-home");
    hook(&b, &home, "sess-architect-1", "SessionStart");
    // More than local delivery keeps of one identity's mail at once (1 MiB): ~70 of these fit.
    let n = 80;
    for i in 0..n {
        let text = format!("# Note {i:03}\nnote {i:03} {}", "x".repeat(15_000));
        json(&a, &["share", "send", "--to", "globex/architect", &text]);
    }
    let sync = || {
        let out = env_cmd(&b)
            .env("AGENTBUS_HOME", &home)
            .args(["share", "sync"])
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{:?} {text}", out.status);
        text
    };
    let first = sync();
    assert!(
        first.contains("message(s) for share:globex/architect wait for room in local delivery"),
        "{first}"
    );
    // Each prompt shows one (newest first) until the oldest is shown; syncs in between hand over
    // the rest, so every note is shown, once.
    let mut shown = std::collections::BTreeSet::new();
    for _ in 0..3 * n {
        let out = hook(&b, &home, "sess-architect-1", "UserPromptSubmit");
        for i in 0..n {
            if out.contains(&format!("note {i:03} x")) {
                assert!(shown.insert(i), "note {i} shown twice");
            }
        }
        if shown.len() == n {
            break;
        }
        sync();
    }
    assert_eq!(shown.len(), n, "shown: {shown:?}");
}
