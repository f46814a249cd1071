//! The OpenCode plugin `agentbus hooks install opencode` writes, run under Node by a host that
//! implements OpenCode's documented plugin API (`tests/opencode/host.mjs`), spawning the real
//! binary on a real store: a message is claimed only where the plugin puts it in front of the
//! model (a prompt's parts, a tool's result), never at `tool.execute.before`, which can only block
//! (LM-25, LM-26).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};

struct Host {
    home: tempfile::TempDir,
    plugin: PathBuf,
}

impl Host {
    fn install() -> Host {
        let home = tempfile::tempdir().unwrap();
        let dir = home.path().join("opencode");
        let plugin = dir.join("plugins").join("agentbus.js");
        let out = agentbus(
            home.path(),
            &[
                "hooks",
                "install",
                "opencode",
                "--settings",
                plugin.to_str().unwrap(),
            ],
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // OpenCode (Bun) loads the plugin as an ES module; Node does so when its folder says so.
        std::fs::write(dir.join("package.json"), r#"{"type": "module"}"#).unwrap();
        Host { home, plugin }
    }

    fn run(&self, step: Value) -> Value {
        let mut step = step;
        step["directory"] = json!(self.home.path());
        step["sessions"] = json!({"ses_main": {}, "ses_child": {"parentID": "ses_main"}});
        let file = self.home.path().join("step.json");
        std::fs::write(&file, step.to_string()).unwrap();
        let host = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/opencode/host.mjs");
        let mut cmd = Command::new("node");
        cmd.arg(host)
            .arg(&self.plugin)
            .arg(&file)
            .env("AGENTBUS_HOME", self.home.path());
        for m in crate::harness_vars() {
            cmd.env_remove(m);
        }
        let out = cmd
            .output()
            .expect("node runs (./scripts/test installs it)");
        assert!(
            out.status.success(),
            "host failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }

    fn prompt(&self, session: &str) -> Value {
        self.run(json!({"type": "prompt", "session": session, "text": "carry on"}))
    }

    fn tool(&self, session: &str) -> Value {
        self.run(json!({"type": "tool", "session": session, "tool": "bash"}))
    }

    fn tell(&self, to: &str, text: &str) -> String {
        let out = agentbus(self.home.path(), &["--json", "tell", to, text]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v["id"].as_str().unwrap().to_owned()
    }

    fn claimed(&self, session: &str) -> BTreeSet<String> {
        std::fs::read_dir(self.home.path().join("messages/seen").join(session))
            .map(|d| {
                d.filter_map(Result::ok)
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }
}

fn agentbus(home: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentbus"));
    cmd.args(args)
        .env("AGENTBUS_HOME", home)
        .env("AGENTBUS_ENGINEER_EMAIL", "ada@example.com");
    for m in crate::harness_vars() {
        cmd.env_remove(m);
    }
    cmd.output().unwrap()
}

/// The frame ids in what the model saw.
fn frames(seen: &str) -> BTreeSet<String> {
    seen.split("<agentbus-message id=\"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .map(str::to_owned)
        .collect()
}

#[test]
fn lm_25_lm_26_the_installed_opencode_plugin_claims_only_what_the_model_sees() {
    let h = Host::install();
    let mut shown = BTreeSet::new();
    // The first prompt makes the session known; nothing waits yet.
    let first = h.prompt("ses_main");
    assert_eq!(first["model_sees"], "carry on");
    assert_eq!(first["parts"], 1);
    h.prompt("ses_child");

    // A message reaches a session busy with tools in the next tool's result, not before it.
    let one = h.tell("ses_main", "the build is green again");
    let tool = h.tool("ses_main");
    assert_eq!(tool["blocked"], false);
    let seen = tool["model_sees"].as_str().unwrap();
    assert!(
        seen.starts_with("file-a\nfile-b"),
        "the tool's own output stays first: {seen}"
    );
    assert!(seen.contains("the build is green again"), "{seen}");
    shown.extend(frames(seen));
    assert!(shown.contains(&one));
    assert!(
        h.tool("ses_main")["model_sees"] == "file-a\nfile-b",
        "shown once (LM-26)"
    );

    // At a prompt, as a synthetic text part of the user's message.
    let two = h.tell("ses_main", "second: review #42 when you can");
    let child = h.prompt("ses_child");
    assert_eq!(
        child["model_sees"], "carry on",
        "a subagent is shown nothing"
    );
    let p = h.prompt("ses_main");
    assert_eq!(p["parts"], 2);
    assert_eq!(
        p["well_formed"], true,
        "the added part belongs to the message"
    );
    let seen = p["model_sees"].as_str().unwrap();
    assert!(seen.contains("review #42"), "{seen}");
    shown.extend(frames(seen));
    assert!(shown.contains(&two));

    // A paused session's tool calls are refused with the engineer's reason, and nothing is
    // claimed there: the message waits for the next event that shows it.
    let out = agentbus(
        h.home.path(),
        &["pause", "ses_main", "hold on, I am reviewing"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let three = h.tell("ses_main", "third: the deploy moved to 15:00");
    let blocked = h.tool("ses_main");
    assert_eq!(blocked["blocked"], true);
    let why = blocked["model_sees"].as_str().unwrap();
    assert!(
        why.contains("hold on, I am reviewing") && !why.contains("15:00"),
        "{why}"
    );
    assert!(
        !h.claimed("ses_main").contains(&three),
        "claimed at a blocked tool call"
    );
    let p = h.prompt("ses_main");
    let seen = p["model_sees"].as_str().unwrap();
    assert!(seen.contains("15:00") && seen.contains("paused"), "{seen}");
    shown.extend(frames(seen));

    // Whatever the store says was claimed is exactly what the model was shown.
    assert_eq!(h.claimed("ses_main"), shown);
    assert!(h.claimed("ses_child").is_empty());

    // The session's shell commands know who they are.
    let shell = h.run(json!({"type": "shell", "session": "ses_main"}));
    assert_eq!(shell["env"]["AGENTBUS_SESSION"], "ses_main");
}

#[test]
fn the_opencode_plugin_keeps_a_session_going_at_idle_with_the_message_shown_once_and_bounded() {
    let h = Host::install();
    h.prompt("ses_main");
    h.prompt("ses_child");
    let idle = |session: &str, between: Vec<Vec<String>>| {
        let v = h.run(json!({"type": "idle", "session": session, "between": between}));
        v["prompts"].as_array().unwrap().clone()
    };

    // Nothing waiting: the turn just ends.
    assert!(idle("ses_main", Vec::new()).is_empty());

    // A message waiting at idle: the plugin's prompt shows it, claimed there, and the turn that
    // prompt started ends without another.
    let one = h.tell("ses_main", "arrived while you finished");
    let prompts = idle("ses_main", Vec::new());
    assert_eq!(prompts.len(), 1, "{prompts:?}");
    let seen = prompts[0]["model_sees"].as_str().unwrap();
    assert!(seen.contains("arrived while you finished"), "{seen}");
    assert_eq!(frames(seen), BTreeSet::from([one.clone()]));
    assert_eq!(h.claimed("ses_main"), BTreeSet::from([one]));

    // A subagent's idle prompts nothing; its message waits.
    h.tell("ses_child", "for the child");
    assert!(idle("ses_child", Vec::new()).is_empty());
    assert!(h.claimed("ses_child").is_empty());

    // Peers that answer at every turn's end: the continuations stop at the bound.
    let bin = env!("CARGO_BIN_EXE_agentbus");
    let between = (0..6)
        .map(|i| {
            [
                bin,
                "tell",
                "--from",
                &format!("peer{i}"),
                "ses_main",
                "again",
            ]
            .map(str::to_owned)
            .to_vec()
        })
        .collect();
    let prompts = idle("ses_main", between);
    assert_eq!(
        prompts.len(),
        agentbus_local::consts::STOP_CONTINUES as usize,
        "{prompts:?}"
    );
}
