//! What every modern command line offers: shell completions generated from the
//! parser (LM-80), `--profile` only where a profile is used, and the global `-q`/`-v`.

use std::process::Command;

use crate::agentbus;
use crate::gateway_cli::{Gw, Machine};

const SHELLS: &[&str] = &["bash", "zsh", "fish", "elvish", "powershell"];

/// What bash's completion offers for `words` (the last one being completed), with the script
/// `agentbus completions bash` printed, sourced into a real bash; the script asks the binary,
/// which sees the store at `home` when given.
fn bash_completes(script: &str, words: &[&str]) -> Vec<String> {
    bash_completes_in(None, script, words)
}

fn bash_completes_in(home: Option<&std::path::Path>, script: &str, words: &[&str]) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("agentbus.bash");
    std::fs::write(&file, script).unwrap();
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let program = format!(
        "source {file}; COMP_WORDS=({words}); COMP_CWORD={cword}; COMP_LINE='{line}'; COMP_POINT=${{#COMP_LINE}}; COMP_TYPE=9; \
         _clap_complete_agentbus agentbus '{cur}' '{prev}'; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        file = file.display(),
        words = quoted.join(" "),
        cword = words.len() - 1,
        line = words.join(" "),
        cur = words[words.len() - 1],
        prev = words[words.len() - 2],
    );
    let mut bash = Command::new("bash");
    bash.args(["--norc", "-c", &program])
        .env_remove("AGENTBUS_PROFILE")
        .env("AGENTBUS_KEYSTORE", "file");
    match home {
        Some(h) => bash.env("AGENTBUS_HOME", h),
        None => bash.env("AGENTBUS_HOME", dir.path().join("home")),
    };
    let out = bash.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim_end().to_owned())
        .filter(|l| !l.is_empty())
        .collect()
}

fn completions(shell: &str) -> String {
    let out = agentbus(&["completions", shell], b"");
    assert!(out.status.success(), "{shell}: {:?}", out.status);
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn lm_80_completions_for_every_shell_name_the_commands_and_their_flags() {
    // Each shell's script registers the engine: the shell asks this binary at each Tab.
    for shell in SHELLS {
        let script = completions(shell);
        for word in ["AGENTBUS_COMPLETE", env!("CARGO_BIN_EXE_agentbus")] {
            assert!(script.contains(word), "{shell} completions lack {word}");
        }
    }
    let bash = completions("bash");
    assert!(bash_completes(&bash, &["agentbus", "dele"]).contains(&"delegate".to_owned()));
    let tell = bash_completes(&bash, &["agentbus", "tell", "--"]);
    for flag in ["--from", "--dry-run", "--json", "--quiet", "--profile"] {
        assert!(
            tell.contains(&flag.to_owned()),
            "tell lacks {flag}: {tell:?}"
        );
    }
    // The option is offered where it means something, and only there.
    let explain = bash_completes(&bash, &["agentbus", "explain", "--"]);
    assert!(explain.contains(&"--json".to_owned()), "{explain:?}");
    assert!(!explain.contains(&"--profile".to_owned()), "{explain:?}");
    let out = agentbus(&["completions", "tcsh"], b"");
    assert_eq!(out.status.code(), Some(2));
}

/// `--profile` completes to the saved profiles' names (it offered file names), and a recipient to
/// the addresses this machine knows.
#[test]
fn completion_offers_profile_names_and_known_addresses() {
    let gw = Gw::start();
    let m = Machine::new("alpha");
    m.connect(&gw);
    m.ok(&[
        "--json",
        "connect",
        "--gateway",
        &gw.url,
        "--token",
        &gw.admin,
        "--name",
        "beta",
    ]);
    let bash = completions("bash");
    let offered = |words: &[&str]| bash_completes_in(Some(m.home()), &bash, words);
    assert_eq!(
        offered(&["agentbus", "send", "--profile", ""]),
        ["alpha", "beta"]
    );
    assert_eq!(offered(&["agentbus", "--profile", "b"]), ["beta"]);
    let to = offered(&["agentbus", "--profile", "alpha", "send", ""]);
    assert!(
        to.contains(&"agent://default/default/beta".to_owned()),
        "{to:?}"
    );
    let tell = offered(&["agentbus", "tell", "eng"]);
    assert_eq!(tell, ["engineer"]);
}

fn help(args: &[&str]) -> String {
    let mut all = args.to_vec();
    all.push("--help");
    let out = agentbus(&all, b"");
    assert!(out.status.success(), "{args:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn profile_is_an_option_only_of_commands_that_act_as_a_profile() {
    for args in [
        &["send"][..],
        &["delegate"],
        &["inbox"],
        &["trace"],
        &["card", "edit"],
        &["keys", "rotate"],
        &["mcp", "install"],
        &["doctor"],
    ] {
        assert!(help(args).contains("--profile"), "{args:?} lacks --profile");
    }
    for args in [
        &["explain"][..],
        &["envelope", "validate"],
        &["keys", "generate"],
        &["gateway"],
        &["sessions"],
        &["hook"],
        &["completions"],
    ] {
        assert!(
            !help(args).contains("--profile"),
            "{args:?} shows --profile"
        );
    }
    let out = agentbus(&["explain", "--profile", "x", "AB-1011"], b"");
    assert_eq!(out.status.code(), Some(2));
    assert!(!help(&[]).contains("--profile"));
}

#[test]
fn verbose_names_the_profile_and_quiet_drops_the_commentary_of_a_wait() {
    let gw = Gw::start();
    let bot = Machine::new("release-bot");
    bot.connect(&gw);
    let out = bot.run(&["-v", "agents"]);
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let agent = bot.agent_dir();
    let agent = agent.file_name().unwrap().to_string_lossy();
    assert!(
        stderr.contains(&format!(
            "profile release-bot: agent://default/default/release-bot ({agent}) at {}",
            gw.url
        )),
        "{stderr}"
    );
    assert!(!String::from_utf8_lossy(&bot.run(&["agents"]).stderr).contains("profile"));
    // Before the subcommand too, as the frames of received messages write it.
    let before = bot.run(&["--profile", "nobody", "agents"]);
    assert_eq!(
        before.status.code(),
        Some(4),
        "a profile given first is used"
    );

    let to = bot.address();
    let normal = bot.run(&["send", &to, "anyone?", "--wait", "1s"]);
    assert_eq!(normal.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&normal.stderr).contains("waiting for a reply"));
    let quiet = bot.run(&["-q", "send", &to, "anyone?", "--wait", "1s"]);
    assert_eq!(quiet.status.code(), Some(1));
    assert!(
        !String::from_utf8_lossy(&quiet.stderr).contains("waiting"),
        "{}",
        String::from_utf8_lossy(&quiet.stderr)
    );
    // The result (here the error) is still said.
    assert!(String::from_utf8_lossy(&quiet.stderr).contains("no reply arrived"));
    assert_eq!(bot.run(&["-q", "-v", "agents"]).status.code(), Some(2));
}

/// The table of mistakes: each case's exit code, and its message snapshotted.
#[test]
fn every_mistake_in_the_table_gets_its_cause_and_a_fix_for_a_person() {
    let gw = Gw::start();
    let bot = Machine::new("release-bot");
    bot.connect(&gw);
    let reviewer = Machine::new("reviewer");
    reviewer.connect(&gw);
    let fresh = Machine::new("fresh");
    // A port nobody listens on: bound, then closed.
    let down_url = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let down = Machine::new("down");
    down.connect(&gw);
    edit_profile(&down, "gateway", &down_url);
    let stale = Machine::new("stale");
    stale.connect(&gw);
    edit_profile(
        &stale,
        "token",
        "aba_0000000000000000000000000000000000000000",
    );

    let table: serde_json::Value = serde_json::from_slice(
        &std::fs::read(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/cli-mistakes.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let fill = |a: &serde_json::Value| {
        a.as_str()
            .unwrap()
            .replace("{gw}", &gw.url)
            .replace("{reviewer}", &reviewer.address())
    };
    for case in table["cases"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let on = match case["on"].as_str().unwrap() {
            "bot" => &bot,
            "reviewer" => &reviewer,
            "fresh" => &fresh,
            "down" => &down,
            "stale" => &stale,
            other => panic!("{name}: no machine {other}"),
        };
        for before in case["before"].as_array().into_iter().flatten() {
            let args: Vec<String> = before.as_array().unwrap().iter().map(fill).collect();
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            assert!(on.run(&refs).status.success(), "{name}: before {args:?}");
        }
        let args: Vec<String> = case["args"].as_array().unwrap().iter().map(fill).collect();
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = on.run(&refs);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            case["exit"].as_i64().map(|c| c as i32),
            "{name}: {stderr}"
        );
        let mut text = stderr.replace(&gw.url, "{gw}").replace(&down_url, "{down}");
        if let Some(node) = node_of(on) {
            text = text.replace(&node, "[node]");
        }
        let text = crate::gateway_cli::redact(&text);
        insta::assert_snapshot!(format!("mistake_{name}"), seconds(&text));
    }
}

/// A wait in whole seconds ("in 9 s") depends on how fast the machine ran the case.
fn seconds(text: &str) -> String {
    let mut out = text.to_owned();
    for n in 1..=10 {
        out = out.replace(&format!(" in {n} s"), " in [n] s");
    }
    out
}

/// Changes one field of a machine's saved profile, as a stale or hand-edited one would be.
fn edit_profile(m: &Machine, field: &str, value: &str) {
    let path = m.home().join("profiles").join(format!("{}.json", m.name));
    let mut p: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    p[field] = serde_json::json!(value);
    std::fs::write(&path, serde_json::to_vec(&p).unwrap()).unwrap();
}

/// The request a `delegate --json` sent, as the sender keeps it.
fn sent_request(m: &Machine, receipt: &serde_json::Value) -> serde_json::Value {
    let id = receipt["id"].as_str().unwrap();
    let path = m.agent_dir().join("sent").join(format!("{id}.json"));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    if v.get("envelope").is_some() {
        v["envelope"].clone()
    } else {
        v
    }
}

#[test]
fn wp_5_2_delegate_sends_a_derived_idempotency_key_an_expiry_and_a_budget() {
    let gw = Gw::start();
    let bot = Machine::new("release-bot");
    bot.connect(&gw);
    let reviewer = Machine::new("reviewer");
    reviewer.connect(&gw);
    reviewer.ok(&["card", "edit", "--capability", "code.review@1"]);
    let to = reviewer.address();
    let args = [
        "--json",
        "delegate",
        &to,
        "--capability",
        "code.review",
        "--budget",
        "2.00 USD",
        "review change 482",
    ];
    let first = bot.ok(&args);
    let request = sent_request(&bot, &first);
    let key = request["idempotency_key"].as_str().unwrap();
    assert!(key.starts_with("cmd-") && key.len() == 36, "{key}");
    assert_eq!(
        request["budget"],
        serde_json::json!({"currency": "USD", "max": "2.00"})
    );
    // Counted from when the command ran, a moment before the envelope's own time.
    let lifetime = lifetime_s(&request);
    assert!(
        (24 * 3600 - 60..=24 * 3600).contains(&lifetime),
        "{lifetime} s"
    );

    // The same command line again (a retry) is the same task.
    let again = bot.ok(&args);
    assert_eq!(again["task_id"], first["task_id"]);
    assert_eq!(again["replay"], true);
    let human = bot.run(&args[1..]);
    assert!(
        String::from_utf8_lossy(&human.stdout).starts_with("already delegated"),
        "{}",
        String::from_utf8_lossy(&human.stdout)
    );
    // Other words are another task; so is --new-task, which sends no key.
    let other = bot.ok(&[
        "--json",
        "delegate",
        &to,
        "--capability",
        "code.review",
        "review change 483",
    ]);
    assert_ne!(other["task_id"], first["task_id"]);
    let mut fresh = args.to_vec();
    fresh.push("--new-task");
    let fresh = bot.ok(&fresh);
    assert_ne!(fresh["task_id"], first["task_id"]);
    assert!(sent_request(&bot, &fresh).get("idempotency_key").is_none());
    // --expires sets the expiry.
    let short = bot.ok(&[
        "--json",
        "delegate",
        &to,
        "--capability",
        "code.review",
        "--expires",
        "30m",
        "quick look",
    ]);
    let lifetime = lifetime_s(&sent_request(&bot, &short));
    assert!((29 * 60..=30 * 60).contains(&lifetime), "{lifetime} s");
}

/// Seconds from an envelope's `time` to its `expires_at`.
fn lifetime_s(envelope: &serde_json::Value) -> i64 {
    let at = |k: &str| {
        time::OffsetDateTime::parse(
            envelope[k].as_str().unwrap(),
            &time::format_description::well_known::Rfc3339,
        )
        .unwrap()
    };
    (at("expires_at") - at("time")).whole_seconds()
}

/// The local node id of a machine, once it has written a local message.
fn node_of(m: &Machine) -> Option<String> {
    let log = std::fs::read_to_string(m.home().join("messages.jsonl")).ok()?;
    let line: serde_json::Value = serde_json::from_str(log.lines().next()?).ok()?;
    line["node"].as_str().map(str::to_owned)
}
