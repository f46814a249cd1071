//! Local messaging as a user and a harness run it: real processes on a real store (LM-39, LM-65,
//! LM-68, LM-81, issue items 4, 5 and 8).

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

/// Runs agentbus with the store at `home`, feeding `stdin`, as the engineer's terminal (no
/// harness marks the environment).
fn run(home: &Path, args: &[&str], stdin: &[u8]) -> Output {
    run_with(home, &[], args, stdin)
}

/// Runs agentbus with the store at `home` and the variables `vars` set (a harness session's
/// environment, a harness config directory), feeding `stdin`.
fn run_with(home: &Path, vars: &[(&str, &str)], args: &[&str], stdin: &[u8]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentbus"));
    cmd.args(args)
        .env("AGENTBUS_HOME", home)
        .env("AGENTBUS_ENGINEER_EMAIL", "ada@example.com")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let config_dirs = ["CLAUDE_CONFIG_DIR", "CODEX_HOME", "XDG_CONFIG_HOME"];
    for m in crate::harness_vars().chain(config_dirs) {
        cmd.env_remove(m);
    }
    for (k, v) in vars {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
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
    // The email is the repo's `user.email`, so the same person's next repo acks as another
    // address: what the first view showed stays shown, what is new is listed once.
    let other = [("AGENTBUS_ENGINEER_EMAIL", "ada@work.example")];
    let out = run_with(h, &other, &["--json", "inbox"], b"");
    assert!(
        json(&out)["items"].as_array().unwrap().is_empty(),
        "already shown"
    );
    run(
        h,
        &["--json", "tell", "--from", "s1", "engineer", "new"],
        b"",
    );
    let out = run_with(h, &other, &["--json", "inbox"], b"");
    assert_eq!(json(&out)["items"][0]["text"], "new");
    let out = run(h, &["--json", "inbox"], b"");
    assert!(
        json(&out)["items"].as_array().unwrap().is_empty(),
        "{}",
        json(&out)
    );
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
fn hooks_install_adds_the_end_of_turn_to_an_older_install_and_status_says_when_it_lacks_it() {
    let dir = tempfile::tempdir().unwrap();
    // `--project` looks in <dir>/.claude/settings.json: an install from before the end of turn.
    let project = dir.path().join(".claude");
    std::fs::create_dir_all(&project).unwrap();
    let p = project.join("settings.json");
    let hook = |event: &str| {
        format!(
            r#""{event}":[{{"hooks":[{{"type":"command","command":"/opt/agentbus hook claude","timeout":10}}]}}]"#
        )
    };
    let old: Vec<String> = [
        "SessionStart",
        "UserPromptSubmit",
        "PreToolUse",
        "PostToolUse",
    ]
    .iter()
    .map(|e| hook(e))
    .collect();
    std::fs::write(&p, format!(r#"{{"hooks":{{{}}}}}"#, old.join(","))).unwrap();
    let status = || {
        let out = run(
            dir.path(),
            &[
                "hooks",
                "status",
                "claude",
                "--project",
                dir.path().to_str().unwrap(),
            ],
            b"",
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(status().contains("no end of turn"), "{}", status());
    let install = |path: &str| {
        let args = [
            "--json",
            "hooks",
            "install",
            "claude",
            "--settings",
            path,
            "--program",
            "/opt/agentbus",
        ];
        json(&run(dir.path(), &args, b""))
    };
    assert_eq!(install(p.to_str().unwrap())["change"], "changed");
    assert!(!status().contains("no end of turn"), "{}", status());
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    let stop = v["hooks"]["Stop"][0]["hooks"][0]["command"]
        .as_str()
        .unwrap();
    assert!(stop.starts_with("/opt/agentbus hook claude"), "{stop}");
    // Once there, installing again changes nothing.
    assert_eq!(install(p.to_str().unwrap())["change"], "unchanged");
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

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn log_lines(home: &Path) -> Vec<Value> {
    std::fs::read_to_string(home.join("messages.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn lm_13_lm_14_sessions_act_as_themselves_and_never_as_the_engineer() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    let codex = |sid: &str| {
        format!(r#"{{"session_id":"{sid}","hook_event_name":"UserPromptSubmit","prompt":"go"}}"#)
    };
    for sid in ["cdx-1", "cdx-2"] {
        assert!(
            run(h, &["hook", "codex"], codex(sid).as_bytes())
                .status
                .success()
        );
    }
    // A Codex session's tell, without --from, is sent as that session (CODEX_THREAD_ID).
    let inside = [("CODEX_THREAD_ID", "cdx-1")];
    let out = run_with(
        h,
        &inside,
        &["--json", "tell", "engineer", "done with the migration"],
        b"",
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(json(&out)["by"], "cdx-1");
    // Its pause is refused before anything is written: only the engineer steers.
    let before = log_lines(h).len();
    let out = run_with(h, &inside, &["pause", "cdx-2", "stop now"], b"");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("only the engineer of this machine steers"),
        "{}",
        stderr(&out)
    );
    // --from cannot borrow another identity from inside a session.
    for from in ["cdx-2", "engineer", "engineer:ada@example.com"] {
        let out = run_with(h, &inside, &["tell", "--from", from, "local", "hi"], b"");
        assert_eq!(
            out.status.code(),
            Some(3),
            "--from {from}: {}",
            stderr(&out)
        );
        assert!(
            stderr(&out).contains("a session sends only as itself"),
            "{}",
            stderr(&out)
        );
    }
    // A harness marks its session without naming it: nothing is sent as the engineer.
    for (marker, to) in [
        (("CLAUDECODE", "1"), "engineer"),
        (("OPENCODE", "1"), "engineer:bob@example.com"),
    ] {
        let out = run_with(h, &[marker], &["--json", "tell", "local", "hello"], b"");
        assert_eq!(out.status.code(), Some(3), "{marker:?}");
        assert!(
            json(&out)["error"]["code"] == "AB-1304",
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        let out = run_with(h, &[marker], &["pause", "cdx-2"], b"");
        assert_eq!(out.status.code(), Some(3), "{marker:?}: {}", stderr(&out));
        // The frames' answering command, `--from <session>`, still works there.
        let out = run_with(
            h,
            &[marker],
            &["--json", "tell", "--from", "cdx-2", to, "hi"],
            b"",
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert_eq!(json(&out)["by"], "cdx-2");
    }
    assert!(
        log_lines(h)[before..].iter().all(|l| l["kind"] != "pause"),
        "no pause was written"
    );
    // The engineer's own terminal steers.
    let out = run(h, &["--json", "pause", "cdx-2", "stop now"], b"");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(json(&out)["by"], "engineer:ada@example.com");
}

#[test]
fn hooks_install_writes_where_each_harness_looks_and_says_what_would_fail() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (claude, codex, xdg) = (d.join("claude-cfg"), d.join("codex-home"), d.join("xdg"));
    // A workspace's build directory, as `cargo build` leaves it.
    std::fs::create_dir_all(d.join("ws/target/release")).unwrap();
    std::fs::write(d.join("ws/Cargo.toml"), "[workspace]\n").unwrap();
    let built = d.join("ws/target/release/agentbus");
    std::fs::copy(env!("CARGO_BIN_EXE_agentbus"), &built).unwrap();
    // A Codex that answers --version as Codex does, old and current.
    let fake = |name: &str, version: &str| {
        let p = d.join(name);
        std::fs::write(&p, format!("#!/bin/sh\necho 'codex-cli {version}'\n")).unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    };
    let (old, new) = (fake("codex-old", "0.128.0"), fake("codex-new", "0.130.0"));
    let vars = |codex_bin: &Path| {
        vec![
            ("HOME".to_owned(), d.join("home").display().to_string()),
            ("CLAUDE_CONFIG_DIR".to_owned(), claude.display().to_string()),
            ("CODEX_HOME".to_owned(), codex.display().to_string()),
            ("XDG_CONFIG_HOME".to_owned(), xdg.display().to_string()),
            ("AGENTBUS_CODEX".to_owned(), codex_bin.display().to_string()),
        ]
    };
    let with = |codex_bin: &Path, args: &[&str]| {
        let v = vars(codex_bin);
        let pairs: Vec<(&str, &str)> = v.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
        run_with(d, &pairs, args, b"")
    };
    let program = built.to_str().unwrap();
    let out = with(
        &old,
        &["--json", "hooks", "install", "codex", "--program", program],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let doc = json(&out);
    assert_eq!(doc["path"], codex.join("hooks.json").display().to_string());
    assert_eq!(
        (
            doc["harness_version"].as_str(),
            doc["pre_tool_context"].as_bool()
        ),
        (Some("0.128.0"), Some(false))
    );
    let notes = doc["notes"].to_string();
    assert!(
        notes.contains("cargo install --path crates/agentbus"),
        "{notes}"
    );
    assert!(notes.contains("older than 0.129.0"), "{notes}");
    assert!(
        notes.contains("/hooks"),
        "Codex's trust review is named: {notes}"
    );
    let hooks = std::fs::read_to_string(codex.join("hooks.json")).unwrap();
    assert!(
        hooks.contains("hook codex --no-pre-tool-context"),
        "{hooks}"
    );
    // A current Codex gets context before tool calls; the install replaces the old command.
    let out = with(&new, &["--json", "hooks", "install", "codex"]);
    assert_eq!(json(&out)["pre_tool_context"], true, "{}", stderr(&out));
    let hooks = std::fs::read_to_string(codex.join("hooks.json")).unwrap();
    assert!(!hooks.contains("--no-pre-tool-context"), "{hooks}");
    assert_eq!(
        hooks.matches("hook codex").count(),
        agentbus_local::install::EVENTS.len(),
        "one command per event: {hooks}"
    );
    // Claude Code and OpenCode land in their own configuration directories.
    for (harness, file) in [
        ("claude", claude.join("settings.json")),
        ("opencode", xdg.join("opencode/plugins/agentbus.js")),
    ] {
        let out = with(&new, &["--json", "hooks", "install", harness]);
        assert!(out.status.success(), "{}", stderr(&out));
        assert_eq!(json(&out)["path"], file.display().to_string());
        assert!(file.exists(), "{}", file.display());
    }
    // `hooks status` says, per harness, where it is, what it runs, and whether that is us.
    let out = with(&new, &["--json", "hooks", "status"]);
    let status = json(&out);
    let by = |h: &str| {
        status["hooks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["harness"] == h)
            .unwrap()
            .clone()
    };
    for h in ["claude", "codex", "opencode"] {
        let s = by(h);
        assert_eq!(
            (s["installed"].as_bool(), s["is_running_binary"].as_bool()),
            (Some(true), Some(true)),
            "{s}"
        );
    }
    assert_eq!(by("codex")["events"].as_array().unwrap().len(), 5);
    for h in ["claude", "codex", "opencode"] {
        assert_eq!(by(h)["end_of_turn"], true, "{h}");
    }
    // A hook left pointing into a build directory, then removed by `cargo clean`, is flagged.
    with(&new, &["hooks", "install", "claude", "--program", program]);
    std::fs::remove_file(&built).unwrap();
    let out = with(&new, &["hooks", "status", "claude"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("MISSING") && text.contains("build directory"),
        "{text}"
    );
    let out = with(&new, &["hooks", "uninstall", "claude"]);
    assert!(out.status.success());
    let out = with(&new, &["--json", "hooks", "status", "claude"]);
    assert_eq!(json(&out)["hooks"][0]["installed"], false);
}
