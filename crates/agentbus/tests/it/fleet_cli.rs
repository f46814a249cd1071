//! Ids a person can act on (every surface shows the `msg_` and `tsk_` ids and
//! every verb takes any of them), expired requests shown as expired, `tasks` and `sent`, live
//! waits (ids at once, a line per change, Ctrl-C leaving the task running), and the README's
//! walk-through run as written. The real binary, a real gateway on loopback, real files.

use std::io::{BufRead as _, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use serde_json::Value;

use agentbus_runtime::{Clock as _, ManualClock, SystemClock};

use crate::gateway_cli::{Gw, Killer, Machine, eventually, pair, redact, task_state};

/// The engineer's inbox on `m`'s machine, as `inbox --json --all` lists it.
fn items(m: &Machine) -> Vec<Value> {
    m.ok(&["--json", "inbox", "--all"])["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The item whose gateway id is `id`.
fn item(m: &Machine, id: &str) -> Value {
    items(m)
        .into_iter()
        .find(|i| i["message_id"] == id)
        .unwrap_or_else(|| panic!("no inbox item {id}"))
}

fn text(out: &[u8]) -> String {
    String::from_utf8_lossy(out).into_owned()
}

fn delegate(bot: &Machine, to: &Machine, instructions: &str, extra: &[&str]) -> (String, String) {
    let addr = to.address();
    let mut args = vec![
        "--json",
        "delegate",
        addr.as_str(),
        "--capability",
        "code.review",
        "--new-task",
    ];
    args.extend_from_slice(extra);
    args.push(instructions);
    let d = bot.ok(&args);
    (
        d["task_id"].as_str().unwrap().to_owned(),
        d["id"].as_str().unwrap().to_owned(),
    )
}

#[test]
fn every_surface_shows_the_msg_and_tsk_ids_and_every_verb_takes_them() {
    let gw = Gw::start();
    let (bot, reviewer) = pair(&gw, "release-bot", "reviewer");
    reviewer.ok(&["--json", "card", "edit", "--capability", "code.review@1"]);
    let (task, request) = delegate(&bot, &reviewer, "Review change 482.", &[]);
    reviewer.ok(&["--json", "sidecar", "--once"]);

    // `inbox --json`: every id the request is known by, and the command that answers it now.
    let it = item(&reviewer, &request);
    assert_eq!(it["task_id"], task.as_str(), "{it}");
    let lm = it["local_id"].as_str().unwrap().to_owned();
    assert!(lm.starts_with("lm_"), "{it}");
    let answer = it["answer"].as_str().unwrap();
    for verb in ["accept", "complete", "fail", "needs-input", "reject"] {
        assert!(answer.contains(&format!(" {verb} {task}")), "{answer}");
    }
    assert!(
        !answer.contains(" reply "),
        "a request is not answered by reply: {answer}"
    );
    // `inbox`: the msg_ id, the task and the verbs.
    let human = text(&reviewer.run(&["inbox", "--all"]).stdout);
    assert!(human.contains(&request), "{human}");
    assert!(human.contains(&format!("task: {task}")), "{human}");
    assert!(
        human.contains(&format!(
            "to answer: agentbus --profile reviewer accept {task}"
        )),
        "{human}"
    );
    // `inbox --show` by the local id shows the gateway's record: its msg_ id and task.
    let shown = text(&reviewer.run(&["inbox", "--show", &lm]).stdout);
    assert!(
        shown.contains(&format!("id:           {request}")),
        "{shown}"
    );
    assert!(shown.contains(&format!("task:         {task}")), "{shown}");
    assert!(shown.contains("to answer:"), "{shown}");
    let doc = reviewer.ok(&["--json", "inbox", "--show", &lm]);
    // `inbox`'s document, with the one item.
    assert!(doc["engineer"].is_string(), "{doc}");
    let doc = &doc["items"][0];
    assert_eq!(
        (doc["id"].as_str(), doc["task_id"].as_str()),
        (Some(request.as_str()), Some(task.as_str()))
    );

    // A verb given an id of the wrong kind says which it needs (exit 2), before any request.
    for args in [
        vec!["reply", task.as_str(), "sure"],
        vec!["ack", task.as_str()],
        vec!["inbox", "--show", task.as_str()],
    ] {
        let out = reviewer.run(&args);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("is a task, not a message") && err.contains("msg_ or lm_"),
            "{args:?}: {err}"
        );
    }

    // What the model is shown: both ids, the worker's verbs, no `reply`.
    let frame = reviewer.model_context("rev-1");
    assert!(frame.contains(&format!("id=\"{request}\"")), "{frame}");
    assert!(frame.contains(&format!("task=\"{task}\"")), "{frame}");
    assert!(frame.contains(&format!("local_id=\"{lm}\"")), "{frame}");
    assert!(
        frame.contains(&format!("accept {task}")) && !frame.contains(" reply "),
        "{frame}"
    );

    // The task verbs and trace take the local id too.
    let accepted = reviewer.ok(&["--json", "accept", &lm]);
    assert_eq!(accepted["type"], "agentbus.task.accept.v1");
    let traced = reviewer.ok(&["--json", "trace", &lm]);
    assert!(traced["conversation"]["envelopes"].is_array(), "{traced}");
    reviewer.ok(&["--json", "needs-input", &request, "Which repository?"]);

    // The requester sees the task id and its verbs (cancel beside the accept; answer or cancel
    // a question), and answers the question by its local id.
    bot.ok(&["--json", "sidecar", "--once"]);
    let got = items(&bot);
    let of = |kind: &str| {
        got.iter()
            .find(|i| i["kind"] == kind)
            .unwrap_or_else(|| panic!("no {kind} in {got:?}"))
            .clone()
    };
    let acc = of("agentbus.task.accept.v1");
    assert_eq!(acc["task_id"], task.as_str());
    assert!(
        acc["answer"]
            .as_str()
            .unwrap()
            .contains(&format!("cancel {task}")),
        "{acc}"
    );
    let q = of("agentbus.task.needs_input.v1");
    let qa = q["answer"].as_str().unwrap();
    assert!(
        qa.contains(&format!("answer {task}")) && qa.contains(&format!("cancel {task}")),
        "{qa}"
    );
    bot.ok(&["--json", "answer", q["local_id"].as_str().unwrap(), "muxr"]);

    // The worker finishes by the msg_ id of the answer (any message of the task names it).
    reviewer.ok(&["--json", "sidecar", "--once"]);
    let input = reviewer
        .stored()
        .into_iter()
        .find(|r| r["envelope"]["type"] == "agentbus.task.input.v1")
        .unwrap();
    let input_id = input["envelope"]["id"].as_str().unwrap();
    assert_eq!(input["task"], task.as_str());
    reviewer.ok(&["--json", "complete", input_id, "--summary", "done"]);
    assert_eq!(task_state(&bot, &task), "succeeded");
}

#[test]
fn wp_6_1_an_expired_or_accept_timed_out_request_is_shown_expired_not_fresh() {
    // The gateway's clock runs 60 s behind this machine's (within the 5 min skew): a request
    // with a 5 s accept window is still open at the gateway when it arrives, and past its
    // deadline here. Its reaper looks every 50 ms.
    let clock = ManualClock::new(SystemClock.now().plus_ms(-60_000));
    let gw = Gw::start_clocked(Arc::new(clock.clone()), |c| c.reaper_interval_ms = 50);
    let (bot, reviewer) = pair(&gw, "release-bot", "reviewer");
    reviewer.ok(&["--json", "card", "edit", "--capability", "code.review@1"]);
    let (_, open) = delegate(&bot, &reviewer, "first", &["--accept-timeout", "5"]);
    reviewer.ok(&["--json", "sidecar", "--once"]);
    let it = item(&reviewer, &open);
    assert!(it["expired_at"].is_string(), "{it}");
    assert!(
        it["answer"].is_null(),
        "no verb for an expired request: {it}"
    );
    let human = text(&reviewer.run(&["inbox", "--all"]).stdout);
    assert!(human.contains("EXPIRED"), "{human}");

    // Past the deadline at the gateway too: the task expires there, and a request that arrives
    // after that is late, with no verb.
    let (task, late) = delegate(&bot, &reviewer, "second", &["--accept-timeout", "5"]);
    clock.advance_ms(70_000);
    eventually(20, "the task expired by the gateway", || {
        (task_state(&bot, &task) == "expired").then_some(())
    });
    reviewer.ok(&["--json", "sidecar", "--once"]);
    let it = item(&reviewer, &late);
    assert_eq!(it["late"], true, "{it}");
    assert!(it["answer"].is_null(), "{it}");
    let human = text(&reviewer.run(&["inbox", "--all"]).stdout);
    assert!(human.contains("LATE"), "{human}");

    // The session is shown both, marked, with no verb to act on either.
    let frame = reviewer.model_context("rev-1");
    assert!(
        frame.contains("expired=") && frame.contains("Warning: this request expired"),
        "{frame}"
    );
    assert!(
        frame.contains("Warning: this arrived after the task had ended"),
        "{frame}"
    );
    assert!(!frame.contains("To answer"), "{frame}");
    // Acting on it anyway is not success.
    let out = reviewer.run(&["accept", &late]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
}

#[test]
fn tasks_and_sent_list_what_an_agent_is_party_of_and_what_became_of_what_it_sent() {
    let gw = Gw::start();
    let (bot, reviewer) = pair(&gw, "release-bot", "reviewer");
    let stranger = Machine::new("stranger");
    stranger.connect(&gw);
    reviewer.ok(&["--json", "card", "edit", "--capability", "code.review@1"]);
    let (task, request) = delegate(&bot, &reviewer, "Review change 482.", &[]);
    reviewer.ok(&["--json", "sidecar", "--once"]);
    reviewer.ok(&["--json", "accept", &task]);

    let ids = |doc: &Value| -> Vec<String> {
        doc["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["id"].as_str().unwrap().to_owned())
            .collect()
    };
    let mine = bot.ok(&["--json", "tasks", "--as", "requester"]);
    assert_eq!(ids(&mine), std::slice::from_ref(&task));
    assert_eq!(mine["tasks"][0]["role"], "requester");
    assert_eq!(mine["tasks"][0]["verbs"], serde_json::json!(["cancel"]));
    let work = reviewer.ok(&["--json", "tasks", "--as", "worker", "--state", "accepted"]);
    assert_eq!(ids(&work), std::slice::from_ref(&task));
    assert_eq!(
        work["tasks"][0]["verbs"],
        serde_json::json!(["progress", "needs-input", "complete", "fail"])
    );
    assert!(ids(&reviewer.ok(&["--json", "tasks", "--as", "requester"])).is_empty());
    assert!(ids(&reviewer.ok(&["--json", "tasks", "--state", "succeeded"])).is_empty());
    // An agent that is no party sees nothing, as if there were nothing.
    assert!(ids(&stranger.ok(&["--json", "tasks"])).is_empty());
    let human = text(&bot.run(&["tasks"]).stdout);
    assert!(
        human.contains(&task) && human.contains(&format!("now: agentbus cancel {task}")),
        "{human}"
    );
    insta::assert_snapshot!("tasks_requester", redact(&human));
    insta::assert_snapshot!(
        "tasks_worker",
        redact(&text(&reviewer.run(&["tasks", "--as", "worker"]).stdout))
    );
    insta::assert_snapshot!("tasks_requester", redact(&human));
    insta::assert_snapshot!(
        "tasks_worker",
        redact(&text(&reviewer.run(&["tasks", "--as", "worker"]).stdout))
    );
    // A mistyped state stops here, with the nearest one.
    let out = bot.run(&["tasks", "--state", "acepted"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("did you mean --state accepted"),
        "{}",
        text(&out.stderr)
    );

    let sent = bot.ok(&["--json", "send", &reviewer.address(), "hello"]);
    let hello = sent["id"].as_str().unwrap().to_owned();
    reviewer.ok(&["--json", "sidecar", "--once"]);
    let list = bot.ok(&["--json", "sent"]);
    let msgs = list["messages"].as_array().unwrap();
    assert_eq!(msgs[0]["id"], hello.as_str(), "newest first: {list}");
    assert_eq!(msgs[0]["recipients"][0]["state"], "acknowledged", "{list}");
    assert_eq!(msgs[1]["id"], request.as_str());
    assert_eq!(msgs[1]["task_id"], task.as_str());
    assert_eq!(
        msgs[1]["recipients"][0]["state"], "answered",
        "the accept answers it: {list}"
    );
    // Pages: the cursor of the first goes on with the next.
    let first = bot.ok(&["--json", "sent", "--limit", "1"]);
    let next = first["next"].as_str().unwrap().to_owned();
    let second = bot.ok(&["--json", "sent", "--limit", "1", "--before", &next]);
    assert_eq!(second["messages"][0]["id"], request.as_str());
    let human = text(&bot.run(&["sent"]).stdout);
    assert!(
        human.contains(&hello) && human.contains("acknowledged"),
        "{human}"
    );
    insta::assert_snapshot!("sent", redact(&human));
    // Nobody else's: the stranger and the worker see only their own.
    assert!(
        stranger.ok(&["--json", "sent"])["messages"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    let theirs = reviewer.ok(&["--json", "sent"]);
    assert!(
        theirs["messages"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m["id"] != hello.as_str() && m["id"] != request.as_str()),
        "{theirs}"
    );
}

/// The lines a child writes to a pipe, as they come.
fn lines_of(pipe: impl std::io::Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Reads lines until one satisfies `want`, failing after `secs`; returns it and what came before.
fn line_until(rx: &Receiver<String>, secs: u64, what: &str, want: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) if want(&l) => return l,
            Ok(l) => seen.push(l),
            Err(_) => panic!("no line {what}; got {seen:?}"),
        }
    }
}

fn interrupt(child: &Child) {
    let ok = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
}

#[test]
fn delegate_wait_says_the_ids_at_once_then_each_change_and_ctrl_c_leaves_the_task_running() {
    let gw = Gw::start();
    let (bot, reviewer) = pair(&gw, "release-bot", "reviewer");
    reviewer.ok(&["--json", "card", "edit", "--capability", "code.review@1"]);
    // Without a terminal: the ids at once on stderr, then one line per change.
    let mut child = bot.spawn(&[
        "delegate",
        &reviewer.address(),
        "--capability",
        "code.review",
        "--wait",
        "2m",
        "Review it.",
    ]);
    let err = lines_of(child.stderr.take().unwrap());
    let first = line_until(&err, 20, "naming the task", |l| {
        l.contains("delegated tsk_")
    });
    let task = first
        .split_whitespace()
        .find(|w| w.starts_with("tsk_"))
        .unwrap()
        .to_owned();
    assert!(first.contains(&format!("agentbus trace {task}")), "{first}");
    reviewer.ok(&["--json", "sidecar", "--once"]);
    reviewer.ok(&["--json", "accept", &task]);
    line_until(&err, 20, "accepted", |l| {
        l == format!("task {task}: accepted")
    });
    reviewer.ok(&[
        "--json",
        "progress",
        &task,
        "--percent",
        "40",
        "--stage",
        "static-analysis",
        "--note",
        "one suspicious unlock",
    ]);
    line_until(&err, 20, "with the progress", |l| {
        l == format!("task {task}: in_progress 40% (static-analysis) - one suspicious unlock")
    });
    // Ctrl-C: the wait ends, says how to follow the task, and the task goes on.
    interrupt(&child);
    let rest: Vec<String> = err.iter().collect();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(1), "{rest:?}");
    let said = rest.join("\n");
    assert!(
        said.contains("stopped waiting") && said.contains(&format!("agentbus trace {task}")),
        "{said}"
    );
    assert_eq!(task_state(&bot, &task), "in_progress");

    // With --json: the receipt is the first line, the usual document follows.
    let mut child = bot.spawn(&[
        "--json",
        "delegate",
        &reviewer.address(),
        "--capability",
        "code.review",
        "--wait",
        "2m",
        "Review it again.",
    ]);
    let out = lines_of(child.stdout.take().unwrap());
    let first: Value =
        serde_json::from_str(&line_until(&out, 20, "the receipt", |_| true)).unwrap();
    let task = first["sent"]["task_id"].as_str().unwrap().to_owned();
    assert!(task.starts_with("tsk_"), "{first}");
    reviewer.ok(&["--json", "sidecar", "--once"]);
    reviewer.ok(&["--json", "accept", &task]);
    reviewer.ok(&["--json", "complete", &task, "--summary", "fine"]);
    let rest: String = out.iter().collect::<Vec<_>>().join("\n");
    let doc: Value = serde_json::from_str(&rest).unwrap();
    assert_eq!(doc["task"]["state"], "succeeded");
    assert!(child.wait().unwrap().success());
}

#[test]
fn send_wait_says_the_id_at_once_and_ctrl_c_says_how_to_follow_it() {
    let gw = Gw::start();
    let (bot, reviewer) = pair(&gw, "release-bot", "reviewer");
    let mut child = bot.spawn(&[
        "--json",
        "send",
        &reviewer.address(),
        "anyone?",
        "--wait",
        "2m",
    ]);
    let out = lines_of(child.stdout.take().unwrap());
    let first: Value =
        serde_json::from_str(&line_until(&out, 20, "the receipt", |_| true)).unwrap();
    let id = first["sent"]["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("msg_"), "{first}");
    interrupt(&child);
    let rest: String = out.iter().collect::<Vec<_>>().join("\n");
    assert_eq!(child.wait().unwrap().code(), Some(1));
    assert!(
        rest.contains("stopped waiting") && rest.contains(&format!("agentbus trace {id}")),
        "{rest}"
    );
}

/// The README's walk-through, between its markers, command by command.
fn walkthrough() -> Vec<String> {
    let readme = std::fs::read_to_string(crate::repo().join("README.md")).unwrap();
    let (_, rest) = readme.split_once("<!-- walkthrough:begin -->").unwrap();
    let (block, _) = rest.split_once("<!-- walkthrough:end -->").unwrap();
    block
        .lines()
        .filter(|l| l.starts_with("agentbus "))
        .map(|l| match l.split_once("  #") {
            Some((cmd, _)) => cmd.trim().to_owned(),
            None => l.trim().to_owned(),
        })
        .collect()
}

/// The profile a walk-through command acts as, if it names one.
fn profile_of(cmd: &str) -> Option<String> {
    if let Some(rest) = cmd.split_once("--profile ").map(|(_, r)| r) {
        return rest.split_whitespace().next().map(str::to_owned);
    }
    cmd.split_once("--name ")
        .and_then(|(_, r)| r.split_whitespace().next())
        .map(str::to_owned)
}

#[test]
fn the_readme_walk_through_runs_as_written_and_every_id_it_takes_was_shown() {
    let commands = walkthrough();
    assert!(commands.len() >= 10, "{commands:?}");
    let machine = Machine::new("walk");
    let data = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let bin_dir = std::path::Path::new(env!("CARGO_BIN_EXE_agentbus"))
        .parent()
        .unwrap()
        .to_owned();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // Each line runs in a shell as a user would type it, with this build's `agentbus` on PATH
    // and the environment every test machine has (its own AGENTBUS_HOME, file keys).
    let sh = |line: &str| {
        let env = machine.cmd(&[]);
        let mut c = Command::new("sh");
        c.args(["-c", line]);
        for (k, v) in env.get_envs() {
            match v {
                Some(v) => c.env(k, v),
                None => c.env_remove(k),
            };
        }
        c.env("PATH", &path)
            .env("XDG_DATA_HOME", data.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    };
    let local = |cmd: &str| cmd.replace("127.0.0.1:7700", &format!("127.0.0.1:{port}"));
    // The gateway, from the first line; it prints the admin token.
    assert!(commands[0].starts_with("agentbus gateway"), "{commands:?}");
    let mut gateway = sh(&format!("exec {}", local(&commands[0])))
        .spawn()
        .unwrap();
    let gw_out = lines_of(gateway.stdout.take().unwrap());
    let _gateway_guard = Killer(gateway);
    let mut shown: Vec<(Option<String>, String)> = Vec::new();
    let mut printed = String::new();
    loop {
        let l = gw_out
            .recv_timeout(Duration::from_secs(30))
            .expect("the gateway's start-up text");
        printed.push_str(&l);
        printed.push('\n');
        if l.starts_with("listening on") {
            break;
        }
    }
    shown.push((None, printed));
    for cmd in &commands[1..] {
        let profile = profile_of(cmd);
        // Each placeholder becomes an id this agent (or anyone, for the operator's output) was
        // shown by an earlier command: never one the test found elsewhere.
        let mut line = local(cmd);
        for prefix in ["abu_", "tsk_", "msg_"] {
            let placeholder = format!("{prefix}…");
            if !line.contains(&placeholder) {
                continue;
            }
            let seen = shown
                .iter()
                .rev()
                .filter(|(p, _)| p.is_none() || *p == profile)
                .find_map(|(_, out)| {
                    out.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
                        .find(|w| w.starts_with(prefix) && w.len() > prefix.len() + 8)
                        .map(str::to_owned)
                })
                .unwrap_or_else(|| panic!("`{cmd}` takes a {prefix} id nobody showed {profile:?}"));
            line = line.replace(&placeholder, &seen);
        }
        let out = sh(&line).output().unwrap();
        let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
        assert!(out.status.success(), "`{line}` failed:\n{said}");
        shown.push((profile.filter(|_| !cmd.contains(" inbox")), said));
    }
    // The task finished: the requester's list says so.
    let at = commands
        .iter()
        .position(|c| c.contains("release-bot tasks"))
        .unwrap();
    let last_tasks = &shown[at].1;
    assert!(last_tasks.contains("succeeded"), "{last_tasks}");
}

/// One name per state: a task waiting for its requester is `needs_input` in `tasks` and
/// `trace`, `--state needs_input` lists it (and `input_required`, the name the help once
/// gave), every state is accepted by `--state`, and each party is told what to run now: the
/// requester `agentbus answer`, the worker of a new task `agentbus accept`.
#[test]
fn a_task_waiting_for_its_requester_is_needs_input_everywhere_and_says_answer_now() {
    let gw = Gw::start();
    let (bot, reviewer) = pair(&gw, "release-bot", "reviewer");
    reviewer.ok(&["--json", "card", "edit", "--capability", "code.review@1"]);
    let (task, _) = delegate(&bot, &reviewer, "Review change 482.", &[]);
    insta::assert_snapshot!(
        redact(&text(&reviewer.run(&["tasks", "--as", "worker"]).stdout)),
        @r"
    tsk_[id]  submitted      code.review  worker from agent://default/default/release-bot  updated [time]
        now: agentbus accept tsk_[id] | agentbus reject tsk_[id]
    "
    );
    reviewer.ok(&["--json", "accept", &task]);
    reviewer.ok(&["--json", "needs-input", &task, "Which repository?"]);
    insta::assert_snapshot!(redact(&text(&bot.run(&["tasks"]).stdout)), @r#"
    tsk_[id]  needs_input    code.review  requester to agent://default/default/reviewer  updated [time]
        now: agentbus answer tsk_[id] "<your answer>" | agentbus cancel tsk_[id]
    "#);
    for name in ["needs_input", "input_required"] {
        let listed = bot.ok(&["--json", "tasks", "--state", name]);
        assert_eq!(listed["tasks"][0]["id"], task.as_str(), "{name}: {listed}");
        assert_eq!(
            listed["tasks"][0]["state"], "needs_input",
            "{name}: {listed}"
        );
    }
    for state in [
        "submitted",
        "accepted",
        "in_progress",
        "succeeded",
        "failed",
        "rejected",
        "expired",
        "cancelled",
    ] {
        let listed = bot.ok(&["--json", "tasks", "--state", state]);
        assert_eq!(listed["tasks"], serde_json::json!([]), "{state}: {listed}");
    }
    let trace = redact(&text(&bot.run(&["trace", &task]).stdout));
    assert!(
        trace.contains(
            "\n  now:       agentbus answer tsk_[id] \"<your answer>\" | agentbus cancel tsk_[id]\n"
        ),
        "{trace}"
    );
    bot.ok(&["--json", "answer", &task, "muxr"]);
    assert_eq!(task_state(&bot, &task), "in_progress");
}

/// `delegate` to an agent no worker or sidecar receives for warns (on stderr, and in `--json`
/// under `warnings`) without refusing; once one has read its inbox, it does not. `--help`
/// shows the defaults the gateway applies (§6.1's accept and progress timeouts).
#[test]
fn delegate_warns_when_no_worker_or_sidecar_receives_for_the_recipient() {
    // A visibility timeout as long as the default, so a receiver read a moment ago is online.
    let gw = Gw::start_with(|c| c.visibility_timeout_s = 60);
    let (bot, reviewer) = pair(&gw, "release-bot", "reviewer");
    reviewer.ok(&["--json", "card", "edit", "--capability", "code.review@1"]);
    let to = reviewer.address();
    let args = [
        "delegate",
        "--capability",
        "code.review",
        "--new-task",
        &to,
        "Review change 482.",
    ];
    let out = bot.run(&args);
    assert!(out.status.success(), "{out:?}");
    insta::assert_snapshot!(redact(&text(&out.stderr)), @"warning: no worker or sidecar of agent://default/default/reviewer is receiving (last heard from [time]); the task waits for one and expires unless accepted within 120 s: on its machine, run `agentbus work` or `agentbus sidecar`");
    let mut json_args = vec!["--json"];
    json_args.extend_from_slice(&args);
    json_args.extend(["--accept-timeout", "300"]);
    let doc = bot.ok(&json_args);
    let warnings = doc["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 1, "{doc}");
    assert!(
        warnings[0].as_str().unwrap().contains("within 300 s"),
        "{doc}"
    );
    // The receiver reads its inbox: the gateway lists it online, and nothing is said.
    reviewer.ok(&["--json", "sidecar", "--once"]);
    let out = bot.run(&args);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(text(&out.stderr), "");
    assert_eq!(bot.ok(&json_args)["warnings"], serde_json::json!([]));

    let help = text(&bot.run(&["delegate", "--help"]).stdout);
    for (flag, default) in [
        (
            "--accept-timeout",
            agentbus_protocol::task::DEFAULT_ACCEPT_TIMEOUT_S,
        ),
        (
            "--progress-timeout",
            agentbus_protocol::task::DEFAULT_PROGRESS_TIMEOUT_S,
        ),
    ] {
        let entry = help.split(flag).nth(1).unwrap_or_default();
        let entry = entry.split("\n      --").next().unwrap_or_default();
        assert!(
            entry.contains(&format!("[default: {default}]")),
            "{flag}: {entry}"
        );
    }
}
