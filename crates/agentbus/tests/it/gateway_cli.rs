//! The gateway verbs and the sidecar end to end: the real `agentbus` binary, as two agents on two
//! "machines" (two AGENTBUS_HOME folders), against a real gateway on loopback.
//!
//! The gateway runs in this process (as the gateway crate's own tests run it) so that its lease
//! can be short: a copy leased to a sidecar killed before its ack comes back within a second, and
//! the restart test needs no 60 s wait. Every wait polls with a deadline; nothing sleeps on a timer.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use agentbus_gateway::{Config, Gateway};
use agentbus_runtime::{Clock, SystemClock};

/// A gateway on a free loopback port, stopped on drop.
pub struct Gw {
    pub url: String,
    pub admin: String,
    pub dir: PathBuf,
    _tmp: tempfile::TempDir,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    clock: Arc<dyn Clock>,
}

impl Gw {
    pub fn start() -> Gw {
        Gw::start_with(|_| {})
    }

    /// A gateway with changed settings.
    pub fn start_with(change: impl FnOnce(&mut Config) + Send + 'static) -> Gw {
        Gw::start_clocked(Arc::new(SystemClock), change)
    }

    /// A gateway on `clock` (a `ManualClock` moves its timers) with changed settings.
    pub fn start_clocked(
        clock: Arc<dyn Clock>,
        change: impl FnOnce(&mut Config) + Send + 'static,
    ) -> Gw {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("gw");
        let (url, admin, stop, thread) = Gw::launch(dir.clone(), None, clock.clone(), change);
        Gw {
            url,
            admin,
            dir,
            _tmp: tmp,
            stop: Some(stop),
            thread: Some(thread),
            clock,
        }
    }

    /// Stops the gateway and starts it again on the same address and data.
    pub fn restart(&mut self) {
        self.shut_down();
        let addr = self.url.trim_start_matches("http://").parse().unwrap();
        let (_, _, stop, thread) =
            Gw::launch(self.dir.clone(), Some(addr), self.clock.clone(), |_| {});
        self.stop = Some(stop);
        self.thread = Some(thread);
    }

    fn shut_down(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    #[allow(clippy::type_complexity)]
    fn launch(
        data: PathBuf,
        addr: Option<std::net::SocketAddr>,
        clock: Arc<dyn Clock>,
        change: impl FnOnce(&mut Config) + Send + 'static,
    ) -> (
        String,
        String,
        tokio::sync::oneshot::Sender<()>,
        std::thread::JoinHandle<()>,
    ) {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener =
                    tokio::net::TcpListener::bind(addr.unwrap_or(([127, 0, 0, 1], 0).into()))
                        .await
                        .unwrap();
                let addr = listener.local_addr().unwrap();
                let mut config = Config::new(addr, data);
                config.visibility_timeout_s = 1;
                change(&mut config);
                let gw = Gateway::open(config, clock).await.unwrap();
                let admin = gw
                    .bootstrap
                    .as_ref()
                    .map(|b| b.admin_token.clone())
                    .unwrap_or_default();
                ready_tx.send((addr, admin)).unwrap();
                gw.serve_on(listener, async move {
                    let _ = stop_rx.await;
                })
                .await
                .unwrap();
            });
        });
        let (addr, admin) = ready_rx.recv().unwrap();
        (format!("http://{addr}"), admin, stop_tx, thread)
    }
}

impl Drop for Gw {
    fn drop(&mut self) {
        self.shut_down();
    }
}

/// One agent's machine: its own AGENTBUS_HOME.
pub struct Machine {
    pub home: tempfile::TempDir,
    pub name: String,
}

impl Machine {
    pub fn new(name: &str) -> Machine {
        Machine {
            home: tempfile::tempdir().unwrap(),
            name: name.to_owned(),
        }
    }

    pub fn home(&self) -> &Path {
        self.home.path()
    }

    pub fn address(&self) -> String {
        format!("agent://default/default/{}", self.name)
    }

    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_agentbus"));
        c.args(args)
            .env("AGENTBUS_HOME", self.home())
            .env("AGENTBUS_ENGINEER_EMAIL", "ada@example.com")
            .env_remove("AGENTBUS_PROFILE")
            // Keys in files: a test never writes to the keychain of the machine it runs on (the
            // keychain choice has its own test).
            .env("AGENTBUS_KEYSTORE", "file")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for v in crate::harness_vars() {
            c.env_remove(v);
        }
        c
    }

    pub fn run(&self, args: &[&str]) -> Output {
        let mut child = self.cmd(args).spawn().unwrap();
        child.stdin.take().unwrap().write_all(b"").unwrap();
        child.wait_with_output().unwrap()
    }

    /// Runs and expects success; returns the `--json` document.
    pub fn ok(&self, args: &[&str]) -> Value {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "agentbus {args:?} failed ({:?}):\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        last_json(&out.stdout)
    }

    pub fn connect(&self, gw: &Gw) -> Value {
        self.ok(&[
            "--json",
            "connect",
            "--gateway",
            &gw.url,
            "--token",
            &gw.admin,
            "--name",
            &self.name,
        ])
    }

    pub fn spawn(&self, args: &[&str]) -> Child {
        self.cmd(args).spawn().unwrap()
    }

    pub fn agent_dir(&self) -> PathBuf {
        let p: Value = serde_json::from_slice(
            &std::fs::read(
                self.home()
                    .join("profiles")
                    .join(format!("{}.json", self.name)),
            )
            .unwrap(),
        )
        .unwrap();
        self.home()
            .join("agents")
            .join(p["agent_id"].as_str().unwrap())
    }

    /// The envelopes in this agent's local inbox.
    pub fn stored(&self) -> Vec<Value> {
        let dir = self.agent_dir().join("inbox");
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return Vec::new();
        };
        let mut out: Vec<Value> = entries
            .filter_map(|e| e.ok())
            .filter(|e| {
                let n = e.file_name();
                let n = n.to_string_lossy();
                !n.starts_with('.') && n.ends_with(".json")
            })
            .filter_map(|e| serde_json::from_slice(&std::fs::read(e.path()).ok()?).ok())
            .collect();
        out.sort_by_key(|r: &Value| r["sequence"].as_u64());
        out
    }
}

/// The last JSON document a command printed (`Null` if none): a wait prints its receipt as a
/// first line, then the usual document.
pub fn last_json(out: &[u8]) -> Value {
    serde_json::Deserializer::from_slice(out)
        .into_iter::<Value>()
        .map_while(Result::ok)
        .last()
        .unwrap_or(Value::Null)
}

/// Two agents, each on its own machine, connected to `gw`.
pub fn pair(gw: &Gw, a: &str, b: &str) -> (Machine, Machine) {
    let (a, b) = (Machine::new(a), Machine::new(b));
    a.connect(gw);
    b.connect(gw);
    (a, b)
}

/// Polls `f` until it returns something, failing after `secs`.
pub fn eventually<T>(secs: u64, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(x) = f() {
            return x;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub fn finish(child: Child) -> Output {
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{:?}\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

pub struct Killer(pub Child);

impl Drop for Killer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn wp_12_1_wp_7_1_wp_7_2_request_reply_with_send_wait() {
    let gw = Gw::start();
    let bot = Machine::new("release-bot");
    let reviewer = Machine::new("reviewer");
    let c = bot.connect(&gw);
    assert_eq!(c["address"], bot.address());
    assert_eq!(c["status"], "connected");
    reviewer.connect(&gw);
    // WP-3.3-1: a second connect resumes the same agent and key; no new key is registered.
    let again = reviewer.connect(&gw);
    assert_eq!(again["status"], "resumed");
    let keys = reviewer.ok(&["--json", "keys", "list"]);
    assert_eq!(keys["keys"].as_array().unwrap().len(), 1);

    let _sidecar = Killer(reviewer.spawn(&["--json", "sidecar", "--poll-wait", "5"]));
    // release-bot runs no sidecar: `send --wait` receives for itself.
    let waiting = bot.spawn(&[
        "--json",
        "send",
        &reviewer.address(),
        "Is change 482 clear for the 14:30 deploy?",
        "--subject",
        "Deploy readiness check",
        "--wait",
        "30s",
    ]);
    let question = eventually(20, "the question in the reviewer's inbox", || {
        reviewer.stored().into_iter().next()
    });
    let env = &question["envelope"];
    assert_eq!(question["verified"], "true");
    assert_eq!(env["subject"], "Deploy readiness check");
    assert_eq!(env["data"]["expects_reply"], true);
    let qid = env["id"].as_str().unwrap().to_owned();
    // WP-7-2: an unrelated message in between is not taken for the reply.
    reviewer.ok(&[
        "--json",
        "send",
        &bot.address(),
        "unrelated: lunch at noon?",
    ]);
    reviewer.ok(&[
        "--json",
        "reply",
        &qid,
        "Yes. Two nits already fixed in revision 7. Clear to deploy.",
    ]);
    let out = finish(waiting);
    let doc: Value = last_json(&out.stdout);
    let reply = &doc["reply"]["envelope"];
    assert_eq!(doc["sent"]["id"], qid);
    assert_eq!(
        reply["correlation_id"], qid,
        "§7: the reply answers the sent id"
    );
    assert_eq!(reply["conversation_id"], env["conversation_id"]);
    assert_eq!(reply["source"], reviewer.address());
    assert_eq!(doc["reply"]["verified"], "true");
    assert!(
        reply["data"]["text"].as_str().unwrap().starts_with("Yes."),
        "{reply}"
    );
    // The reviewer acknowledges having read the question (ack.v1 to the sender).
    let ack = reviewer.ok(&["--json", "ack", &qid, "--level", "processed"]);
    assert_eq!(ack["type"], "agentbus.ack.v1");
    // WP-7-6: the sender traces its own message: the conversation in received_at order.
    let trace = bot.ok(&["--json", "trace", &qid]);
    let kinds: Vec<&str> = trace["conversation"]["envelopes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    assert_eq!(kinds.first().copied(), Some(qid.as_str()));
    assert_eq!(kinds.len(), 3, "question, reply, ack: {kinds:?}");
    // A wait that nothing answers exits 1 and says what to do.
    let out = bot.run(&["send", &reviewer.address(), "anyone?", "--wait", "1s"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("fix: wait longer"));
}

#[test]
fn wp_12_2_wp_7_3_wp_9_14_full_task_lifecycle_with_attachments() {
    let gw = Gw::start();
    let (bot, reviewer) = pair(&gw, "release-bot", "reviewer");
    // Task requests name a capability the worker declares (§5.2).
    reviewer.ok(&["--json", "card", "edit", "--capability", "code.review@1"]);
    let diff = bot.home().join("change-482-r7.diff");
    std::fs::write(
        &diff,
        "--- a/worker.go\n+++ b/worker.go\n@@ -140 +140 @@\n-mu.Unlock()\n",
    )
    .unwrap();
    let report = reviewer.home().join("report.md");
    std::fs::write(&report, "# Findings\n\n- worker.go:142 double unlock\n").unwrap();

    // Long-poll here; the other tests use the WebSocket.
    let _sidecar =
        Killer(reviewer.spawn(&["--json", "sidecar", "--poll-wait", "5", "--no-websocket"]));
    let delegating = bot.spawn(&[
        "--json",
        "delegate",
        &reviewer.address(),
        "--capability",
        "code.review",
        "--input",
        r#"{"artifact_id": "change-482", "revision": 7}"#,
        "--attach",
        diff.to_str().unwrap(),
        "--idempotency-key",
        "review-change-482-revision-7",
        "--accept-timeout",
        "120",
        "--progress-timeout",
        "600",
        "--subject",
        "Review change 482 revision 7",
        "--wait",
        "60s",
        "Review this change for concurrency bugs. Return findings with file, line, severity.",
    ]);
    let request = eventually(20, "the task request at the reviewer", || {
        reviewer
            .stored()
            .into_iter()
            .find(|r| r["envelope"]["type"] == "agentbus.task.request.v1")
    });
    let env = &request["envelope"];
    assert_eq!(request["verified"], "true");
    assert_eq!(env["capability"], "code.review");
    assert_eq!(env["idempotency_key"], "review-change-482-revision-7");
    // The attachment was downloaded into the message's folder, byte for byte.
    let rid = env["id"].as_str().unwrap().to_owned();
    let saved = reviewer
        .agent_dir()
        .join("attachments")
        .join(&rid)
        .join("change-482-r7.diff");
    assert_eq!(
        std::fs::read(&saved).unwrap(),
        std::fs::read(&diff).unwrap()
    );
    assert_eq!(
        request["attachments"][0]["path"]
            .as_str()
            .map(PathBuf::from),
        Some(saved)
    );

    // The worker addresses the task by its request id first, then by its task id.
    let accepted = reviewer.ok(&["--json", "accept", &rid, "--estimate", "240"]);
    assert_eq!(accepted["type"], "agentbus.task.accept.v1");
    let tasks = reviewer.ok(&["--json", "trace", &rid]);
    let task_id = tasks["conversation"]["envelopes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["type"] == "agentbus.task.accept.v1")
        .map(|e| e["data"]["task_id"].as_str().unwrap().to_owned())
        .unwrap();
    reviewer.ok(&[
        "--json",
        "progress",
        &task_id,
        "--percent",
        "40",
        "--stage",
        "static-analysis",
        "--note",
        "Found one suspicious unlock ordering in worker.go",
    ]);
    reviewer.ok(&[
        "--json",
        "complete",
        &task_id,
        "--summary",
        "One high-severity double-unlock in worker.go:142. Two low-severity nits.",
        "--output",
        r#"{"findings": [{"file": "worker.go", "line": 142, "severity": "high", "title": "mutex unlocked twice on error path"}]}"#,
        "--attach",
        report.to_str().unwrap(),
    ]);
    let out = finish(delegating);
    // The upload's progress is for terminals: piped, stderr stays empty.
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = last_json(&out.stdout);
    assert_eq!(doc["task"]["state"], "succeeded");
    assert_eq!(doc["sent"]["task_id"], task_id);
    let result = &doc["result"];
    assert_eq!(result["verified"], "true");
    assert_eq!(result["envelope"]["correlation_id"], rid);
    assert_eq!(
        result["envelope"]["data"]["output"]["findings"][0]["line"],
        142
    );
    let got = PathBuf::from(result["attachments"][0]["path"].as_str().unwrap());
    assert_eq!(std::fs::read(got).unwrap(), std::fs::read(&report).unwrap());
    // Every transition is on the timeline, in order.
    let trace = bot.ok(&["--json", "trace", &task_id]);
    let states: Vec<&str> = trace["task"]["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["to"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        states,
        ["submitted", "accepted", "in_progress", "succeeded"]
    );
    // The human timeline, with ids and times redacted.
    let human = bot.run(&["trace", &task_id]);
    assert!(human.status.success());
    insta::assert_snapshot!(
        "trace_task_12_2",
        redact(&String::from_utf8_lossy(&human.stdout))
    );
    // A retried request with the same idempotency key returns the original task (§8).
    let again = bot.ok(&[
        "--json",
        "delegate",
        &reviewer.address(),
        "--capability",
        "code.review",
        "--idempotency-key",
        "review-change-482-revision-7",
        "again",
    ]);
    assert_eq!(again["task_id"], task_id);
    assert_eq!(again["replay"], true);
}

/// Ids, times and temporary paths replaced by stable placeholders.
pub fn redact(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let bytes: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < bytes.len() {
        let rest: String = bytes[i..bytes.len().min(i + 5)].iter().collect();
        let prefix = [
            "msg_", "cnv_", "tsk_", "agt_", "key_", "rcp_", "blb_", "lm_",
        ]
        .into_iter()
        .find(|p| rest.starts_with(p));
        if let Some(p) = prefix {
            let mut j = i + p.len();
            while j < bytes.len() && bytes[j].is_ascii_alphanumeric() {
                j += 1;
            }
            out.push_str(&format!("{}[id]", p));
            i = j;
            continue;
        }
        // W3C trace ids: 32 lowercase hex digits standing alone (`trace: …`).
        if i + 32 <= bytes.len()
            && (i == 0 || !bytes[i - 1].is_ascii_alphanumeric())
            && bytes.get(i + 32).is_none_or(|c| !c.is_ascii_alphanumeric())
            && bytes[i..i + 32]
                .iter()
                .all(|c| c.is_ascii_digit() || ('a'..='f').contains(c))
        {
            out.push_str("[trace]");
            i += 32;
            continue;
        }
        // RFC 3339 instants: 2026-11-30T21:19:34.123Z
        if i + 24 <= bytes.len() {
            let cand: String = bytes[i..i + 24].iter().collect();
            let b = cand.as_bytes();
            if b[4] == b'-'
                && b[10] == b'T'
                && b[23] == b'Z'
                && b[..4].iter().all(u8::is_ascii_digit)
            {
                out.push_str("[time]");
                i += 24;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    out
}

#[test]
fn wp_8_7_a_sidecar_killed_mid_stream_and_restarted_loses_and_duplicates_nothing() {
    let gw = Gw::start();
    let (bot, reviewer) = pair(&gw, "sender", "receiver");
    const N: usize = 24;
    let sidecar = reviewer.spawn(&["--json", "sidecar", "--poll-wait", "1"]);
    let mut sidecar = Killer(sidecar);
    for i in 0..N {
        if i == N / 3 {
            // Kill it hard once some have arrived, while more are on their way.
            eventually(20, "the first messages", || {
                (reviewer.stored().len() >= 2).then_some(())
            });
            sidecar.0.kill().unwrap();
            sidecar.0.wait().unwrap();
        }
        if i == 2 * N / 3 {
            sidecar = Killer(reviewer.spawn(&["--json", "sidecar", "--poll-wait", "1"]));
        }
        bot.ok(&[
            "--json",
            "send",
            &reviewer.address(),
            &format!("message {i}"),
        ]);
    }
    let cursor = || -> u64 {
        std::fs::read_to_string(reviewer.agent_dir().join("cursor"))
            .ok()
            .and_then(|c| c.trim().parse().ok())
            .unwrap_or(0)
    };
    let delivered_locally = || -> usize {
        let inbox = reviewer.ok(&["--json", "inbox", "--all"]);
        inbox["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|i| i["transport"] == "gateway")
            .count()
    };
    // A copy leased to the killed sidecar comes back when its lease runs out (1 s here), after
    // later ones: wait until all N are in the agent's inbox and in local delivery.
    eventually(30, "every message", || {
        (reviewer.stored().len() >= N && delivered_locally() >= N).then_some(())
    });
    drop(sidecar);
    let stored = reviewer.stored();
    let mut texts: Vec<String> = stored
        .iter()
        .map(|r| r["envelope"]["data"]["text"].as_str().unwrap().to_owned())
        .collect();
    texts.sort();
    texts.dedup();
    assert_eq!(texts.len(), N, "no message lost or stored twice");
    assert_eq!(stored.len(), N);
    // Local delivery got each exactly once too.
    assert_eq!(delivered_locally(), N);
    let status: Value =
        serde_json::from_slice(&std::fs::read(reviewer.agent_dir().join("sidecar.json")).unwrap())
            .unwrap();
    assert_eq!(status["mode"], "websocket");
    assert_eq!(cursor(), N as u64);
}

/// Sends two messages from `bot` to `reviewer`; then someone with access to the gateway's disk
/// changes the first stored envelope (subject `honest` to `tampered`) after it was verified.
fn send_one_tampered(gw: &Gw, bot: &Machine, reviewer: &Machine) {
    bot.ok(&[
        "--json",
        "send",
        &reviewer.address(),
        "the original text",
        "--subject",
        "honest",
    ]);
    bot.ok(&[
        "--json",
        "send",
        &reviewer.address(),
        "an untouched message",
    ]);
    tamper_honest(gw);
}

/// As someone with the gateway's disk would: the stored envelope whose subject is `honest` gets
/// the subject `tampered`, so its signature no longer verifies.
pub fn tamper_honest(gw: &Gw) {
    let db = rusqlite::Connection::open(gw.dir.join("agentbus.db")).unwrap();
    db.busy_timeout(Duration::from_secs(5)).unwrap();
    let changed = db
        .execute(
            "UPDATE messages SET attrs = json_set(attrs, '$.subject', 'tampered') \
             WHERE json_extract(attrs, '$.subject') = 'honest'",
            [],
        )
        .unwrap();
    assert_eq!(changed, 1);
}

#[test]
fn wp_3_2_11_wp_13_1_5_a_tampered_envelope_is_stored_unverified_never_dropped() {
    let gw = Gw::start();
    let (bot, reviewer) = pair(&gw, "sender", "receiver");
    send_one_tampered(&gw, &bot, &reviewer);
    let out = reviewer.run(&["sidecar", "--once"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stored = reviewer.stored();
    assert_eq!(stored.len(), 2, "the tampered envelope is kept");
    let bad = stored
        .iter()
        .find(|r| r["envelope"]["subject"] == "tampered")
        .unwrap();
    assert_eq!(bad["verified"], "false");
    assert_eq!(bad["diagnostics"][0]["code"], "AB-1303");
    let good = stored
        .iter()
        .find(|r| r["envelope"]["subject"] != "tampered")
        .unwrap();
    assert_eq!(good["verified"], "true");
    // The sidecar said so, and the message reaches local delivery marked unverified.
    assert!(String::from_utf8_lossy(&out.stdout).contains("UNVERIFIED (AB-1303)"));
    let human = reviewer.run(&["inbox"]);
    insta::assert_snapshot!(
        "inbox_gateway_unverified",
        redact(&String::from_utf8_lossy(&human.stdout))
    );
    let show = reviewer.ok(&[
        "--json",
        "inbox",
        "--show",
        bad["envelope"]["id"].as_str().unwrap(),
    ]);
    assert_eq!(show["items"][0]["verified"], "false");
    // WP-13.1-5: a session bound to the agent is shown the message framed verified="false".
    let prompt = br#"{"session_id":"s1","hook_event_name":"UserPromptSubmit","prompt":"go"}"#;
    let hook = |m: &Machine| {
        let mut child = m.cmd(&["hook", "claude"]).spawn().unwrap();
        child.stdin.take().unwrap().write_all(prompt).unwrap();
        child.wait_with_output().unwrap()
    };
    hook(&reviewer);
    reviewer.ok(&["--json", "sessions", "bind", "s1", &reviewer.address()]);
    let out = hook(&reviewer);
    let framed = String::from_utf8_lossy(&out.stdout);
    assert!(framed.contains("verified=\\\"false\\\""), "{framed}");
    assert!(framed.contains("verified=\\\"true\\\""), "{framed}");
}

#[test]
fn wp_3_3_5_wp_3_3_6_key_rotation_keeps_verifying_and_the_directory_cards_topics() {
    let gw = Gw::start();
    let a = Machine::new("reviewer");
    let b = Machine::new("release-bot");
    a.connect(&gw);
    b.connect(&gw);
    let card = a.ok(&[
        "--json",
        "card",
        "edit",
        "--display-name",
        "Backend Code Reviewer",
        "--capability",
        "code.review@1",
        "--tag",
        "go",
    ]);
    assert_eq!(card["capabilities"][0]["name"], "code.review");
    let list = b.ok(&["--json", "agents"]);
    assert_eq!(list["agents"].as_array().unwrap().len(), 2);
    let shown = b.ok(&["--json", "agents", "show", "reviewer"]);
    assert_eq!(shown["display_name"], "Backend Code Reviewer");
    let missing = b.run(&["agents", "show", "nobody"]);
    assert_eq!(missing.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("fix: run `agentbus agents`"));

    // Topics: a subscribes, b publishes to the topic, a receives.
    a.ok(&["--json", "topic", "subscribe", "builds"]);
    let topics = a.ok(&["--json", "topic", "list"]);
    assert_eq!(topics["topics"][0]["name"], "builds");
    b.ok(&[
        "--json",
        "send",
        "topic://default/default/builds",
        "build 42 is green",
    ]);
    a.ok(&["--json", "topic", "unsubscribe", "builds"]);
    let topics = a.ok(&["--json", "topic", "list"]);
    assert_eq!(topics["topics"][0]["subscribers"], 0);
    b.ok(&[
        "--json",
        "send",
        "topic://default/default/builds",
        "nobody hears this",
    ]);

    // §3.3 rotation: a message signed with the old key, a rotation, one signed with the new key,
    // the old key revoked; both verify at the receiver, which fetches keys only now.
    let old_key = b.ok(&["--json", "keys", "list"])["keys"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    b.ok(&["--json", "send", &a.address(), "signed with the old key"]);
    let rotated = b.ok(&["--json", "keys", "rotate"]);
    assert_eq!(rotated["previous_key_id"], old_key);
    b.ok(&["--json", "send", &a.address(), "signed with the new key"]);
    let refused = b.run(&["keys", "revoke", rotated["key_id"].as_str().unwrap()]);
    assert_eq!(
        refused.status.code(),
        Some(2),
        "the signing key is not revoked by accident"
    );
    b.ok(&["--json", "keys", "revoke", &old_key]);
    let keys = b.ok(&["--json", "keys", "list"]);
    let revoked: Vec<bool> = keys["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| !k["revoked_at"].is_null())
        .collect();
    assert_eq!(revoked, [true, false]);
    a.ok(&["sidecar", "--once"]);
    let stored = a.stored();
    assert_eq!(stored.len(), 3);
    for r in &stored {
        assert_eq!(r["verified"], "true", "{}", r["envelope"]["data"]["text"]);
    }
    let sigs: std::collections::HashSet<String> = stored[1..]
        .iter()
        .map(|r| {
            r["envelope"]["sig"]
                .as_str()
                .unwrap()
                .split(':')
                .nth(1)
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(sigs.len(), 2, "two different keys signed");
    // After revocation, the old key publishes nothing new (the profile now signs with the new one).
    b.ok(&["--json", "send", &a.address(), "still fine"]);
}

/// The `doctor --json` finding of `check`.
fn finding(out: &Output, check: &str) -> Value {
    let doc: Value = last_json(&out.stdout);
    doc["profiles"][0]["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["check"] == check)
        .unwrap()
        .clone()
}

/// Doctor output with the port, home, skew and ids made stable.
fn redact_doctor(text: &str, m: &Machine, gw: &Gw) -> String {
    let mut t = text.replace(&gw.url, "[gateway]");
    t = t.replace(m.home().to_str().unwrap(), "[home]");
    let mut out = String::new();
    for line in t.lines() {
        let line = match line.find(" s against the gateway") {
            Some(i) => {
                let start = line[..i].rfind(' ').map_or(0, |j| j + 1);
                format!("{}[skew]{}", &line[..start], &line[i..])
            }
            None => line.to_owned(),
        };
        out.push_str(&line);
        out.push('\n');
    }
    redact(&out)
}

#[test]
fn wp_3_3_2_doctor_reports_each_check_with_its_fix_and_key_files_stay_0600() {
    let gw = Gw::start();
    let m = Machine::new("reviewer");
    m.connect(&gw);
    let out = m.run(&["doctor"]);
    assert_eq!(out.status.code(), Some(0), "only warnings");
    insta::assert_snapshot!(
        "doctor_healthy_without_sidecar",
        redact_doctor(&String::from_utf8_lossy(&out.stdout), &m, &gw)
    );
    // A key file others can read is refused, by doctor and by every command that signs.
    let key = m.home().join("keys").join(format!(
        "{}.key",
        m.agent_dir().file_name().unwrap().to_str().unwrap()
    ));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&key).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "WP-3.3-2: the key file is 0600");
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
        let out = m.run(&["--json", "doctor"]);
        assert_eq!(out.status.code(), Some(1));
        let f = finding(&out, "key file");
        assert_eq!(f["status"], "fail");
        assert!(f["fix"].as_str().unwrap().starts_with("chmod 600"));
        let send = m.run(&["send", &m.address(), "hi"]);
        assert_eq!(send.status.code(), Some(4));
        assert!(String::from_utf8_lossy(&send.stderr).contains("fix: chmod 600"));
    }
}

#[test]
fn wp_3_3_2_without_a_keychain_connect_keeps_the_key_in_a_0600_file_unless_the_keychain_is_required()
 {
    let gw = Gw::start();
    let m = Machine::new("reviewer");
    // No session bus, wherever the test runs: no address, and a runtime folder without a socket.
    let no_bus = tempfile::tempdir().unwrap();
    let connect = |keystore: Option<&str>, json: bool| {
        let mut args = vec!["connect", "--gateway", &gw.url, "--token", &gw.admin];
        args.extend(["--name", &m.name]);
        if json {
            args.insert(0, "--json");
        }
        let mut c = m.cmd(&args);
        c.env_remove("DBUS_SESSION_BUS_ADDRESS")
            .env("XDG_RUNTIME_DIR", no_bus.path());
        match keystore {
            Some(k) => c.env("AGENTBUS_KEYSTORE", k),
            None => c.env_remove("AGENTBUS_KEYSTORE"),
        };
        c.output().unwrap()
    };
    let nothing_saved = || {
        assert!(!m.home().join("profiles").exists(), "no profile");
        assert!(!m.home().join("keys").exists(), "no key file");
    };
    // The keychain required: refused as bad input, before anything is made, with the way out.
    let out = connect(Some("keychain"), true);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let err: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(err["error"]["kind"], "input");
    let message = err["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("AGENTBUS_KEYSTORE=keychain, but the OS keychain cannot be used: "),
        "{message}"
    );
    assert!(
        err["error"]["fix"]
            .as_str()
            .unwrap()
            .contains("unset AGENTBUS_KEYSTORE"),
        "{err}"
    );
    nothing_saved();
    let out = connect(Some("keychain"), false);
    assert_eq!(out.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.lines().count(),
        2,
        "one line of cause, one of fix: {stderr}"
    );
    assert!(
        stderr.starts_with("error: AGENTBUS_KEYSTORE=keychain"),
        "{stderr}"
    );
    nothing_saved();
    let out = connect(Some("vault"), true);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    nothing_saved();
    // By default (auto) the missing keychain means a key file of mode 0600; the agent's name was
    // not taken by the refused attempts.
    let out = connect(None, true);
    assert!(out.status.success(), "{out:?}");
    let c: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(c["key_storage"], "file");
    let agent_id = c["agent_id"].as_str().unwrap();
    let key = m.home().join("keys").join(format!("{agent_id}.key"));
    assert_eq!(c["key_file"], key.to_str().unwrap());
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&key).unwrap().permissions().mode() & 0o777;
        assert_eq!(
            mode, 0o600,
            "WP-3.3-2: with the keychain unavailable, stat shows 0600"
        );
    }
    let p: Value = serde_json::from_slice(
        &std::fs::read(m.home().join("profiles").join("reviewer.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(p["key_store"], "file");
    // The profile's store is used from then on, whatever the environment says.
    let mut send = m.cmd(&["--json", "send", &m.address(), "signed from the file"]);
    send.env("AGENTBUS_KEYSTORE", "keychain");
    let out = send.output().unwrap();
    assert!(out.status.success(), "{out:?}");
}

#[test]
fn wp_11_4_2_ab_6002_doctor_names_a_gateway_that_needs_a_newer_agentbus() {
    let gw = Gw::start();
    let m = Machine::new("reviewer");
    m.connect(&gw);
    drop(gw);
    // The same data directory is not reused; a new gateway with a high minimum is enough to see
    // what doctor says about the version and the refused credential.
    let gw = Gw::start_with(|c| c.min_sidecar_version = "99.0.0".into());
    let profile = m.home().join("profiles").join("reviewer.json");
    let mut p: Value = serde_json::from_slice(&std::fs::read(&profile).unwrap()).unwrap();
    p["gateway"] = Value::String(gw.url.clone());
    std::fs::write(&profile, serde_json::to_vec(&p).unwrap()).unwrap();
    let out = m.run(&["--json", "doctor"]);
    assert_eq!(out.status.code(), Some(1));
    let version = finding(&out, "version");
    assert_eq!(version["status"], "fail");
    assert!(
        version["detail"].as_str().unwrap().contains("AB-6002"),
        "{version}"
    );
    // Every other command is refused with the code and its fix.
    let send = m.run(&["--json", "send", &m.address(), "hi"]);
    assert_eq!(send.status.code(), Some(6));
    let err: Value = serde_json::from_slice(&send.stdout).unwrap();
    assert_eq!(err["error"]["code"], "AB-6002");
}

#[test]
fn wp_8_5_wp_8_6_a_redelivery_after_a_crash_between_write_and_ack_is_acked_silently() {
    let gw = Gw::start();
    let (bot, reviewer) = pair(&gw, "sender", "receiver");
    bot.ok(&["--json", "send", &reviewer.address(), "exactly once"]);
    // The sidecar stops after the local write, before its ack.
    let mut crash = reviewer.cmd(&["--json", "sidecar", "--once"]);
    crash.env("AGENTBUS_FAULT", "after-persist");
    let out = crash.output().unwrap();
    assert!(!out.status.success());
    assert_eq!(reviewer.stored().len(), 1);
    // The gateway delivers the copy again once its lease runs out (1 s here): it is recognised
    // by its id and acked without a second copy.
    let dup = eventually(20, "the redelivery", || {
        let out = reviewer.run(&["--json", "sidecar", "--once"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.contains("\"duplicates\"").then_some(text)
    });
    assert!(!dup.contains("\"stored\""), "{dup}");
    assert_eq!(reviewer.stored().len(), 1);
    let inbox = reviewer.ok(&["--json", "inbox", "--all"]);
    assert_eq!(inbox["items"].as_array().unwrap().len(), 1);
    // It was acked: nothing comes back after another lease period. (What the sidecar may print
    // now is the receipt of the inbox having shown it to the engineer, not a delivery.)
    let deadline = Instant::now() + Duration::from_millis(1500);
    while Instant::now() < deadline {
        let out = reviewer.run(&["--json", "sidecar", "--once"]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            !text.contains("\"stored\"") && !text.contains("\"duplicates\""),
            "{text}"
        );
    }
}

#[test]
fn two_agents_on_one_machine_are_two_profiles_chosen_by_flag_or_environment() {
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
    // Two profiles and no choice: the error says how to choose.
    let out = m.run(&["send", "agent://default/default/beta", "hi"]);
    assert_eq!(out.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--profile"));
    // doctor, unlike the verbs, checks every profile when none is chosen, in one JSON shape.
    let doctor = |args: &[&str]| {
        let out = m.run(args);
        assert_eq!(out.status.code(), Some(0), "only warnings: {out:?}");
        out
    };
    let all = last_json(&doctor(&["--json", "doctor"]).stdout);
    let names: Vec<&str> = all["profiles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["profile"].as_str().unwrap())
        .collect();
    assert_eq!(
        (names, &all["ok"]),
        (vec!["alpha", "beta"], &Value::Bool(true))
    );
    let text = String::from_utf8(doctor(&["doctor"]).stdout).unwrap();
    let heads: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("doctor for"))
        .collect();
    assert_eq!(
        heads,
        [
            "doctor for agent://default/default/alpha (profile alpha)",
            "doctor for agent://default/default/beta (profile beta)"
        ],
        "{text}"
    );
    let one = last_json(&doctor(&["--profile", "beta", "--json", "doctor"]).stdout);
    assert_eq!(one["profiles"].as_array().unwrap().len(), 1);
    assert_eq!(one["profiles"][0]["profile"], "beta");
    // Both agents run a sidecar; alpha's send --wait then watches the inbox its sidecar writes.
    let _alpha = Killer(m.spawn(&["--profile", "alpha", "sidecar"]));
    let mut beta_cmd = m.cmd(&["sidecar"]);
    beta_cmd.env("AGENTBUS_PROFILE", "beta");
    let _beta = Killer(beta_cmd.spawn().unwrap());
    let waiting = m.spawn(&[
        "--profile",
        "alpha",
        "--json",
        "send",
        "agent://default/default/beta",
        "ping",
        "--wait",
        "30s",
    ]);
    let beta_dir = {
        let p: Value = serde_json::from_slice(
            &std::fs::read(m.home().join("profiles").join("beta.json")).unwrap(),
        )
        .unwrap();
        m.home()
            .join("agents")
            .join(p["agent_id"].as_str().unwrap())
    };
    let ping_id = eventually(20, "the ping at beta", || {
        let dir = beta_dir.join("inbox");
        let entry = std::fs::read_dir(dir)
            .ok()?
            .filter_map(|e| e.ok())
            .find(|e| {
                let n = e.file_name();
                let n = n.to_string_lossy();
                n.starts_with("msg_") && n.ends_with(".json")
            })?;
        let name = entry.file_name().to_string_lossy().into_owned();
        Some(name.trim_end_matches(".json").to_owned())
    });
    let mut reply = m.cmd(&["--json", "reply", &ping_id, "pong"]);
    reply.env("AGENTBUS_PROFILE", "beta");
    let out = reply.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = finish(waiting);
    let doc: Value = last_json(&out.stdout);
    assert_eq!(doc["reply"]["envelope"]["data"]["text"], "pong");
    assert_eq!(doc["reply"]["envelope"]["correlation_id"], ping_id.as_str());
}

#[test]
fn listen_streams_gateway_messages_without_a_sidecar() {
    let gw = Gw::start();
    let (bot, reviewer) = pair(&gw, "sender", "receiver");
    let listening = reviewer.spawn(&["--json", "listen", "--count", "1"]);
    bot.ok(&["--json", "send", &reviewer.address(), "live news"]);
    let out = finish(listening);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.lines().count(), 1, "one JSON object a line: {text}");
    let item: Value = serde_json::from_str(text.trim()).unwrap();
    assert_eq!(item["transport"], "gateway");
    assert!(item["text"].as_str().unwrap().contains("live news"));
}

/// The subcommand names a `--help` text lists.
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter(|l| !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .filter(|c| c != "help")
        .collect()
}

#[test]
fn every_command_s_help_has_an_example() {
    let help = |args: &[&str]| {
        let out = Machine::new("x").run(args);
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let commands = subcommands(&help(&["--help"]));
    assert!(commands.len() > 20, "{commands:?}");
    let mut missing = Vec::new();
    for c in &commands {
        let text = help(&[c, "--help"]);
        let subs = subcommands(&text);
        if subs.is_empty() && !text.contains("Example") {
            missing.push(c.clone());
        }
        for s in subs {
            if !help(&[c, &s, "--help"]).contains("Example") {
                missing.push(format!("{c} {s}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "commands without an example: {missing:?}"
    );
}

#[test]
fn the_sidecar_reconnects_after_the_gateway_restarts_falling_back_to_long_poll() {
    let mut gw = Gw::start();
    let (bot, reviewer) = pair(&gw, "sender", "receiver");
    let mut sidecar = Killer(reviewer.spawn(&["--json", "sidecar", "--poll-wait", "1"]));
    // Its lines, as they come: how each envelope arrived.
    let (tx, via) = std::sync::mpsc::channel::<String>();
    let stdout = sidecar.0.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(stdout)).map_while(Result::ok) {
            if let Ok(v) = serde_json::from_str::<Value>(&line)
                && v["stored"].is_string()
            {
                let _ = tx.send(v["via"].as_str().unwrap_or("").to_owned());
            }
        }
    });
    let next_via = || via.recv_timeout(Duration::from_secs(30)).unwrap();
    bot.ok(&["--json", "send", &reviewer.address(), "before the restart"]);
    eventually(20, "the first message", || {
        (reviewer.stored().len() == 1).then_some(())
    });
    // The first comes over the WebSocket.
    assert_eq!(next_via(), "websocket");
    gw.restart();
    bot.ok(&["--json", "send", &reviewer.address(), "after the restart"]);
    // The socket broke with the restart: the sidecar long-polls (for 30 s before trying the
    // socket again) and gets the second that way.
    assert_eq!(next_via(), "long-poll");
    let stored = reviewer.stored();
    assert_eq!(stored.len(), 2);
    assert_eq!(stored[1]["envelope"]["data"]["text"], "after the restart");
}

#[test]
fn send_wait_takes_over_receiving_when_the_sidecar_stops() {
    let gw = Gw::start();
    let (bot, reviewer) = pair(&gw, "sender", "receiver");
    let mut bot_sidecar = Killer(bot.spawn(&["sidecar", "--poll-wait", "1"]));
    // Its first line is printed once it holds the receive lock.
    let mut banner = std::io::BufReader::new(bot_sidecar.0.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut banner, &mut line).unwrap();
    assert!(line.starts_with("sidecar for"), "{line}");
    let waiting = bot.spawn(&[
        "--json",
        "send",
        &reviewer.address(),
        "ping",
        "--wait",
        "30s",
    ]);
    reviewer.ok(&["sidecar", "--once"]);
    let ping = eventually(20, "the ping", || {
        reviewer.ok(&["sidecar", "--once"]);
        reviewer.stored().into_iter().next()
    });
    // The bot's sidecar stops before the reply comes: the waiting send receives it itself.
    drop(bot_sidecar);
    reviewer.ok(&["reply", ping["envelope"]["id"].as_str().unwrap(), "pong"]);
    let out = finish(waiting);
    let doc: Value = last_json(&out.stdout);
    assert_eq!(doc["reply"]["envelope"]["data"]["text"], "pong");
}

#[test]
fn a_second_machine_joins_an_existing_agent_with_its_credential() {
    let gw = Gw::start();
    let first = Machine::new("reviewer");
    let c = first.connect(&gw);
    // The name is taken: the fix names the way in.
    let second = Machine::new("reviewer");
    let out = second.run(&[
        "connect",
        "--gateway",
        &gw.url,
        "--token",
        &gw.admin,
        "--name",
        "reviewer",
    ]);
    assert_eq!(out.status.code(), Some(6));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("AB-4005") && err.contains("--agent agt_"),
        "{err}"
    );
    let p: Value = serde_json::from_slice(
        &std::fs::read(first.home().join("profiles").join("reviewer.json")).unwrap(),
    )
    .unwrap();
    let joined = second.ok(&[
        "--json",
        "connect",
        "--gateway",
        &gw.url,
        "--token",
        p["token"].as_str().unwrap(),
        "--agent",
        c["agent_id"].as_str().unwrap(),
        "--name",
        "reviewer",
    ]);
    assert_eq!(joined["agent_id"], c["agent_id"]);
    assert_ne!(
        joined["key_id"], c["key_id"],
        "each machine has its own key"
    );
    // Both machines' keys are registered; either can send.
    let keys = second.ok(&["--json", "keys", "list"]);
    assert_eq!(keys["keys"].as_array().unwrap().len(), 2);
    second.ok(&[
        "--json",
        "send",
        &first.address(),
        "from the second machine",
    ]);
    // Connecting the profile to another gateway is refused, not silently resumed.
    let out = second.run(&[
        "connect",
        "--gateway",
        "http://127.0.0.1:9",
        "--token",
        &gw.admin,
        "--name",
        "reviewer",
    ]);
    assert_eq!(out.status.code(), Some(4));
}

/// The state of `task` as `trace --json` reports it to `m`.
pub fn task_state(m: &Machine, task: &str) -> String {
    m.ok(&["--json", "trace", task])["task"]["state"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[test]
fn wp_6_2_questions_answers_failures_rejections_and_cancels() {
    let gw = Gw::start();
    let (bot, reviewer) = pair(&gw, "release-bot", "reviewer");
    // Task requests name a capability the worker declares (§5.2).
    reviewer.ok(&["--json", "card", "edit", "--capability", "code.review@1"]);
    let delegate = |text: &str| {
        let r = bot.ok(&[
            "--json",
            "delegate",
            &reviewer.address(),
            "--capability",
            "code.review",
            text,
        ]);
        r["task_id"].as_str().unwrap().to_owned()
    };
    // A question and its answer, then a failure.
    let t1 = delegate("review something");
    reviewer.ok(&["--json", "accept", &t1]);
    reviewer.ok(&[
        "--json",
        "needs-input",
        &t1,
        "Which repository?",
        "--option",
        "muxr",
        "--option",
        "agentbus",
    ]);
    assert_eq!(task_state(&bot, &t1), "needs_input");
    // The requester receives the question, then answers it.
    bot.ok(&["sidecar", "--once"]);
    let question = bot
        .stored()
        .into_iter()
        .find(|r| r["envelope"]["type"] == "agentbus.task.needs_input.v1")
        .unwrap();
    assert_eq!(question["envelope"]["data"]["options"][1], "agentbus");
    let notes = bot.home().join("notes.md");
    std::fs::write(&notes, "use the main branch").unwrap();
    let answer = bot.ok(&[
        "--json",
        "answer",
        &t1,
        "muxr",
        "--attach",
        notes.to_str().unwrap(),
    ]);
    assert_eq!(answer["type"], "agentbus.task.input.v1");
    assert_eq!(task_state(&bot, &t1), "in_progress");
    reviewer.ok(&["sidecar", "--once"]);
    let input = reviewer
        .stored()
        .into_iter()
        .find(|r| r["envelope"]["type"] == "agentbus.task.input.v1")
        .unwrap();
    assert_eq!(input["envelope"]["data"]["answer"], "muxr");
    let saved = PathBuf::from(input["attachments"][0]["path"].as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(saved).unwrap(),
        "use the main branch"
    );
    assert_eq!(
        input["envelope"]["data"]["in_reply_to"],
        question["envelope"]["id"]
    );
    reviewer.ok(&["--json", "fail", &t1, "--message", "the repository is gone"]);
    assert_eq!(task_state(&bot, &t1), "failed");
    // A rejection.
    let t2 = delegate("review more");
    reviewer.ok(&["--json", "reject", &t2, "--reason", "busy"]);
    assert_eq!(task_state(&reviewer, &t2), "rejected");
    // The requester cancels; the worker may not cancel.
    let t3 = delegate("review even more");
    let refused = reviewer.run(&["--json", "cancel", &t3]);
    assert_eq!(refused.status.code(), Some(6));
    let err: Value = serde_json::from_slice(&refused.stdout).unwrap();
    assert_eq!(err["error"]["code"], "AB-2004");
    bot.ok(&["--json", "cancel", &t3, "--reason", "not needed"]);
    assert_eq!(task_state(&bot, &t3), "cancelled");
    // --wait on a task that ends badly exits 1 with the state.
    let t4 = bot.spawn(&[
        "--json",
        "delegate",
        &reviewer.address(),
        "--capability",
        "code.review",
        "--wait",
        "30s",
        "doomed",
    ]);
    let t4_id = eventually(20, "the fourth task", || {
        reviewer.ok(&["--json", "sidecar", "--once"]);
        reviewer
            .stored()
            .into_iter()
            .find(|r| r["envelope"]["data"]["instructions"] == "doomed")
            .map(|r| r["envelope"]["id"].as_str().unwrap().to_owned())
    });
    reviewer.ok(&[
        "--json",
        "reject",
        &t4_id,
        "--reason",
        "capability_unsupported",
    ]);
    let out = t4.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let doc: Value = last_json(&out.stdout);
    assert_eq!(doc["task"]["state"], "rejected");
}

/// A bare HTTP/1.1 POST with a bearer token; returns the status code.
fn post(gw: &Gw, path: &str, token: &str, body: &str) -> u16 {
    use std::io::Read as _;
    let addr = gw.url.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap()
}

#[test]
fn system_notices_verify_against_the_gateway_key() {
    let gw = Gw::start();
    let (bot, reviewer) = pair(&gw, "release-bot", "reviewer");
    // Task requests name a capability the worker declares (§5.2).
    reviewer.ok(&["--json", "card", "edit", "--capability", "code.review@1"]);
    let r = bot.ok(&[
        "--json",
        "delegate",
        &reviewer.address(),
        "--capability",
        "code.review",
        "work",
    ]);
    let task = r["task_id"].as_str().unwrap();
    // The console's cancel: both parties get a task.cancel notice signed by the gateway.
    let status = post(
        &gw,
        &format!("/v1/tasks/{task}/cancel"),
        &gw.admin,
        r#"{"reason": "maintenance"}"#,
    );
    assert_eq!(status, 200);
    reviewer.ok(&["sidecar", "--once"]);
    let notice = reviewer
        .stored()
        .into_iter()
        .find(|r| {
            r["envelope"]["source"]
                .as_str()
                .unwrap()
                .starts_with("agent://system/")
        })
        .unwrap();
    assert_eq!(notice["envelope"]["type"], "agentbus.task.cancel.v1");
    assert_eq!(notice["verified"], "true", "{notice}");
}

/// A bare HTTP/1.1 request with a bearer token; returns the status and the JSON body.
fn http(gw: &Gw, method: &str, path: &str, token: &str, body: &str) -> (u16, Value) {
    use std::io::Read as _;
    let addr = gw.url.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap();
    let json = answer
        .split_once("\r\n\r\n")
        .and_then(|(_, b)| serde_json::from_str(b).ok())
        .unwrap_or(Value::Null);
    (status, json)
}

impl Machine {
    /// The agent credential of this machine's profile.
    fn token(&self) -> String {
        let p: Value = serde_json::from_slice(
            &std::fs::read(
                self.home()
                    .join("profiles")
                    .join(format!("{}.json", self.name)),
            )
            .unwrap(),
        )
        .unwrap();
        p["token"].as_str().unwrap().to_owned()
    }

    /// Runs this machine's Claude Code hook for `session` (bound to this agent at its first
    /// event) and returns what it answered.
    pub fn prompt(&self, session: &str) -> String {
        let event = format!(
            r#"{{"session_id":"{session}","hook_event_name":"UserPromptSubmit","prompt":"go"}}"#
        );
        let mut child = self
            .cmd(&["hook", "claude"])
            .env("AGENTBUS_AGENT", self.address())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(event.as_bytes())
            .unwrap();
        String::from_utf8_lossy(&child.wait_with_output().unwrap().stdout).into_owned()
    }

    /// What Claude Code puts in front of the model after this machine's hook ran for `session` on a
    /// `UserPromptSubmit`: the hook's `hookSpecificOutput.additionalContext` (Claude Code's hooks
    /// reference); empty when the hook answered nothing.
    pub fn model_context(&self, session: &str) -> String {
        let out = self.prompt(session);
        if out.trim().is_empty() {
            return String::new();
        }
        let doc: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
        assert_eq!(
            doc["hookSpecificOutput"]["hookEventName"], "UserPromptSubmit",
            "{doc}"
        );
        doc["hookSpecificOutput"]["additionalContext"]
            .as_str()
            .unwrap_or_else(|| panic!("no additionalContext: {doc}"))
            .to_owned()
    }

    /// The delivery state of `id` to its one recipient, as `trace --json` reports it.
    fn delivery(&self, id: &str) -> Value {
        self.ok(&["--json", "trace", id])["delivery"]["recipients"][0].clone()
    }
}

/// Sets the workspace policy of `m`'s workspace (as the admin).
pub fn set_policy(gw: &Gw, m: &Machine, policy: &str) {
    let (_, p) = http(gw, "GET", "/v1/inbox/policy", &m.token(), "");
    let ws = p["workspace"].as_str().unwrap();
    let (s, v) = http(
        gw,
        "PUT",
        &format!("/v1/workspaces/{ws}/policy"),
        &gw.admin,
        policy,
    );
    assert_eq!(s, 200, "{v}");
}

fn acks_in(m: &Machine, id: &str) -> Vec<Value> {
    m.ok(&["--json", "trace", id])["conversation"]["envelopes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "agentbus.ack.v1")
        .cloned()
        .collect()
}

#[test]
fn wp_5_8_2_wp_5_8_3_a_message_shown_in_a_session_gets_one_read_receipt_and_its_sender_sees_each_state()
 {
    let gw = Gw::start();
    let (bot, reviewer) = pair(&gw, "release-bot", "reviewer");
    // The reviewer's session is bound to its agent from its first event.
    assert_eq!(reviewer.prompt("rev-1"), "");
    let _sidecar = Killer(reviewer.spawn(&["--json", "sidecar", "--poll-wait", "5"]));
    let waiting = bot.spawn(&[
        "--json",
        "send",
        &reviewer.address(),
        "Is change 482 clear for the 14:30 deploy?",
        "--wait",
        "60s",
    ]);
    let stored = eventually(20, "the question stored by the reviewer's sidecar", || {
        reviewer.stored().into_iter().next()
    });
    let qid = stored["envelope"]["id"].as_str().unwrap().to_owned();
    let state = eventually(20, "acknowledged", || {
        let d = bot.delivery(&qid);
        (d["state"] == "acknowledged").then_some(d)
    });
    assert!(
        state["shown"].is_null() && state["read_receipt"].is_null(),
        "{state}"
    );
    // The hook shows it, named by its envelope id, and the sidecar reports it.
    let shown = reviewer.prompt("rev-1");
    assert!(shown.contains(&format!("id=\\\"{qid}\\\"")), "{shown}");
    let state = eventually(20, "shown, with its read receipt", || {
        let d = bot.delivery(&qid);
        (d["state"] == "shown" && !d["read_receipt"].is_null()).then_some(d)
    });
    assert_eq!(state["shown"]["harness"], "claude");
    assert_eq!(state["shown"]["event"], "UserPromptSubmit");
    assert_eq!(state["agent"]["address"], reviewer.address());
    // The human trace says the same.
    let out = bot.run(&["trace", &qid]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("shown") && text.contains("in claude (UserPromptSubmit)"),
        "{text}"
    );
    // A second session bound to the same agent is not shown it again (one showing per
    // identity); still one read receipt.
    assert!(!reviewer.prompt("rev-2").contains(&qid));
    // The answer ends the wait; the read receipt was never taken for it.
    reviewer.ok(&["--json", "reply", &qid, "Yes, clear to deploy."]);
    let out = finish(waiting);
    let doc: Value = last_json(&out.stdout);
    assert_eq!(
        doc["reply"]["envelope"]["type"], "agentbus.message.v1",
        "{doc}"
    );
    assert_eq!(
        doc["reply"]["envelope"]["data"]["text"],
        "Yes, clear to deploy."
    );
    let d = eventually(20, "answered", || {
        let d = bot.delivery(&qid);
        (d["state"] == "answered").then_some(d)
    });
    assert_eq!(d["answered"]["type"], "agentbus.message.v1");
    let acks = acks_in(&bot, &qid);
    assert_eq!(acks.len(), 1, "one read receipt: {acks:?}");
    assert_eq!(acks[0]["data"]["level"], "read");
    assert_eq!(acks[0]["correlation_id"], qid.as_str());
    assert_eq!(acks[0]["source"], reviewer.address());

    // WP-5.8-3: without expects_reply, a message shown gets no ack.v1; WP-5.8-2: the transport
    // acks of its delivery never appear as envelopes.
    let plain = bot.ok(&["--json", "send", &reviewer.address(), "fyi: lunch at noon"]);
    let pid = plain["id"].as_str().unwrap().to_owned();
    eventually(20, "the fyi acknowledged", || {
        (bot.delivery(&pid)["state"] == "acknowledged").then_some(())
    });
    assert!(reviewer.prompt("rev-1").contains(&pid));
    eventually(20, "the fyi shown", || {
        (bot.delivery(&pid)["state"] == "shown").then_some(())
    });
    assert!(
        acks_in(&bot, &pid).is_empty(),
        "no read receipt was asked for"
    );
    let envelopes = bot.ok(&["--json", "trace", &pid])["conversation"]["envelopes"].clone();
    assert_eq!(envelopes.as_array().unwrap().len(), 1, "{envelopes}");

    // With the workspace policy `read_receipts`, every message shown gets one.
    set_policy(
        &gw,
        &reviewer,
        r#"{"default": "allow", "read_receipts": true}"#,
    );
    // The sidecar reads the policy at most once a minute: a new receiver starts with it.
    drop(_sidecar);
    let _sidecar = Killer(reviewer.spawn(&["--json", "sidecar", "--poll-wait", "5"]));
    let p2 = bot.ok(&[
        "--json",
        "send",
        &reviewer.address(),
        "fyi: the deploy moved",
    ]);
    let p2 = p2["id"].as_str().unwrap().to_owned();
    // Stored, then handed to local delivery: a prompt shows it once it is there.
    eventually(20, "shown in rev-1", || {
        reviewer.prompt("rev-1").contains(&p2).then_some(())
    });
    eventually(20, "the policy's read receipt", || {
        (acks_in(&bot, &p2).len() == 1).then_some(())
    });
}

#[test]
fn an_engineers_inbox_view_is_not_a_showing_and_lists_the_chosen_profiles_mail() {
    let gw = Gw::start();
    let (bot, reviewer) = pair(&gw, "release-bot", "reviewer");
    // A second agent on the reviewer's machine: two profiles saved there.
    reviewer.ok(&[
        "--json",
        "connect",
        "--gateway",
        &gw.url,
        "--token",
        &gw.admin,
        "--name",
        "other",
    ]);
    let other = "agent://default/default/other";
    let _sidecar = Killer(reviewer.spawn(&[
        "--json",
        "--profile",
        "reviewer",
        "sidecar",
        "--poll-wait",
        "5",
    ]));
    let _other_sidecar = Killer(reviewer.spawn(&[
        "--json",
        "--profile",
        "other",
        "sidecar",
        "--poll-wait",
        "5",
    ]));
    let sent = bot.ok(&[
        "--json",
        "send",
        &reviewer.address(),
        "please review change 482",
    ]);
    let qid = sent["id"].as_str().unwrap().to_owned();
    let sent = bot.ok(&["--json", "send", other, "a note for the other agent"]);
    let oid = sent["id"].as_str().unwrap().to_owned();
    for id in [&qid, &oid] {
        eventually(20, "acknowledged by the receiving sidecar", || {
            (bot.delivery(id)["state"] == "acknowledged").then_some(())
        });
    }
    let listed = |args: &[&str]| -> Vec<String> {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let doc = reviewer.ok(&all);
        doc["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["to"].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    // Several profiles, none chosen: no agent's mail, and a word on why.
    let out = reviewer.run(&["inbox"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("--all-agents"));
    assert_eq!(listed(&["inbox"]), Vec::<String>::new());
    // The chosen profile's mail only.
    assert_eq!(
        listed(&["--profile", "reviewer", "inbox"]),
        [reviewer.address()]
    );
    assert_eq!(listed(&["inbox", "--all", "--all-agents"]).len(), 2);
    // Nothing of the engineer's views is a showing: no shown record is written, so no sidecar
    // reports one.
    let shown_dir = reviewer.home().join("messages").join("shown");
    assert!(
        std::fs::read_dir(&shown_dir).map_or(true, |d| d.count() == 0),
        "a view wrote a shown record"
    );
    // The first showing is a session's, and the gateway's state says so.
    assert!(reviewer.prompt("rev-1").contains(&qid));
    let d = eventually(20, "shown", || {
        let d = bot.delivery(&qid);
        (d["state"] == "shown").then_some(d)
    });
    assert_eq!(d["shown"]["harness"], "claude", "{d}");
    // The other agent's message, read by the engineer only, never reached `shown`.
    assert_eq!(bot.delivery(&oid)["state"], "acknowledged");
}

#[test]
fn wp_13_1_5_with_require_verified_inbound_a_tampered_message_is_held_from_sessions() {
    let gw = Gw::start();
    let (bot, reviewer) = pair(&gw, "sender", "receiver");
    set_policy(
        &gw,
        &reviewer,
        r#"{"default": "allow", "require_verified_inbound": true}"#,
    );
    reviewer.prompt("s1");
    send_one_tampered(&gw, &bot, &reviewer);
    reviewer.ok(&["sidecar", "--once"]);
    let bad = reviewer
        .stored()
        .into_iter()
        .find(|r| r["envelope"]["subject"] == "tampered")
        .unwrap();
    assert_eq!(
        (bad["verified"].as_str(), bad["held"].as_str()),
        (Some("false"), Some("require_verified_inbound"))
    );
    let bad_id = bad["envelope"]["id"].as_str().unwrap().to_owned();
    // The bound session is shown the verified message only, now and at every later event.
    let framed = reviewer.prompt("s1");
    assert!(framed.contains("an untouched message"), "{framed}");
    assert!(
        !framed.contains(&bad_id) && !framed.contains("the original text"),
        "{framed}"
    );
    assert!(!reviewer.prompt("s1").contains(&bad_id));
    // The message stays in the inbox, marked; diagnostics name it.
    let out = reviewer.run(&["inbox", "--all"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.contains(&bad_id))
        .unwrap_or_default();
    assert!(
        line.contains("UNVERIFIED (AB-1303)") && line.contains("HELD"),
        "{text}"
    );
    let show = reviewer.ok(&["--json", "inbox", "--show", &bad_id]);
    let show = &show["items"][0];
    assert_eq!(
        (show["verified"].as_str(), show["held"].as_str()),
        (Some("false"), Some("require_verified_inbound"))
    );
    assert_eq!(show["diagnostics"][0]["code"], "AB-1303");
}

#[test]
fn wp_6_3_3_a_late_result_reaches_the_requester_flagged_with_a_warning() {
    let gw = Gw::start();
    let (bot, reviewer) = pair(&gw, "release-bot", "reviewer");
    bot.prompt("bot-1");
    // Task requests name a capability the worker declares (§5.2).
    reviewer.ok(&["--json", "card", "edit", "--capability", "code.review@1"]);
    let r = bot.ok(&[
        "--json",
        "delegate",
        &reviewer.address(),
        "--capability",
        "code.review",
        "review it",
    ]);
    let task = r["task_id"].as_str().unwrap().to_owned();
    reviewer.ok(&["sidecar", "--once"]);
    reviewer.ok(&["--json", "accept", &task]);
    reviewer.ok(&["--json", "fail", &task, "--message", "stopped"]);
    // The worker's result after the terminal state is persisted, delivered and flagged late,
    // and its sender is told so: exit 1, with the task's state.
    let out = reviewer.run(&["--json", "complete", &task, "--summary", "done anyway"]);
    assert_eq!(out.status.code(), Some(1));
    let doc: Value = last_json(&out.stdout);
    assert_eq!(doc["sent"]["late"], true, "{doc}");
    assert_eq!(doc["sent"]["task_state"], "failed", "{doc}");
    let out = reviewer.run(&["progress", &task, "--percent", "90"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&format!(
            "task.progress for {task} was recorded but changed nothing: it arrived after the task had ended (failed)"
        )),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let timeline = bot.ok(&["--json", "trace", &task])["task"]["timeline"].clone();
    let late: Vec<&Value> = timeline
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["late"] == true)
        .collect();
    assert!(!late.is_empty(), "the gateway flags it late: {timeline}");
    bot.ok(&["sidecar", "--once"]);
    let framed = bot.prompt("bot-1");
    let frame = framed
        .split("<agentbus-message")
        .find(|f| f.contains("done anyway"))
        .unwrap_or_else(|| panic!("{framed}"));
    assert!(frame.contains("late=\\\"true\\\""), "{frame}");
    assert!(frame.contains(&format!("task=\\\"{task}\\\"")), "{frame}");
    assert!(
        frame.contains("Warning: this arrived after the task had ended"),
        "{frame}"
    );
    // And `agentbus inbox --show` says so too.
    let result = bot
        .stored()
        .into_iter()
        .find(|r| r["envelope"]["data"]["summary"] == "done anyway")
        .unwrap();
    assert_eq!(result["late"], true);
    let out = bot.run(&[
        "inbox",
        "--show",
        result["envelope"]["id"].as_str().unwrap(),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("(late: after the task ended)"), "{text}");
}

/// Text a peer could write to reach the engineer's terminal: a window title (OSC ended by BEL), a
/// colour, a carriage return that overwrites the line, a backspace, a C1 control sequence
/// introducer. (NUL cannot pass through a command line; `for_terminal`'s own tests cover it.)
const HOSTILE: &str = "\u{1b}]0;owned\u{7}\u{1b}[31mred\u{1b}[0m\rover\u{8}bs \u{9b}31mc1";

/// Whether `bytes` hold an escape sequence or a raw control character other than newline and tab.
fn raw_controls(bytes: &[u8]) -> Vec<char> {
    String::from_utf8_lossy(bytes)
        .chars()
        .filter(|c| c.is_control() && *c != '\n' && *c != '\t')
        .collect()
}

#[test]
fn terminal_escapes_never_reach_the_engineer_from_any_command_that_prints_foreign_text() {
    let gw = Gw::start();
    let (bot, reviewer) = pair(&gw, "release-bot", "reviewer");
    // Hostile text everywhere a peer writes: a local tell, a session's name and a pause reason,
    // a gateway message, a reply, an agent card.
    let tell = reviewer.ok(&["--json", "tell", "engineer", &format!("local {HOSTILE}")]);
    let lm = tell["id"].as_str().unwrap().to_owned();
    let mut hook = reviewer
        .cmd(&["hook", "claude"])
        .env("AGENTBUS_NAME", format!("n{HOSTILE}"))
        .spawn()
        .unwrap();
    hook.stdin
        .take()
        .unwrap()
        .write_all(br#"{"session_id":"s1","hook_event_name":"SessionStart"}"#)
        .unwrap();
    hook.wait().unwrap();
    reviewer.ok(&["--json", "pause", "s1", &format!("reason {HOSTILE}")]);
    let sent = bot.ok(&[
        "--json",
        "send",
        &reviewer.address(),
        &format!("gateway {HOSTILE}"),
    ]);
    let msg = sent["id"].as_str().unwrap().to_owned();
    bot.run(&[
        "card",
        "edit",
        "--display-name",
        &format!("d{HOSTILE}"),
        "--description",
        &format!("desc {HOSTILE}"),
    ]);
    reviewer.ok(&["sidecar", "--once"]);

    let cases: Value = serde_json::from_slice(
        &std::fs::read(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/terminal-commands.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let mut printed_hostile = 0;
    for case in cases["commands"].as_array().unwrap() {
        let args: Vec<String> = case["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| {
                a.as_str()
                    .unwrap()
                    .replace("{lm}", &lm)
                    .replace("{msg}", &msg)
                    .replace("{bot}", &bot.address())
                    .replace("{hostile}", HOSTILE)
            })
            .collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let m = if case["on"] == "bot" { &bot } else { &reviewer };
        let out = m.run(&args);
        for (what, bytes) in [("stdout", &out.stdout), ("stderr", &out.stderr)] {
            let bad = raw_controls(bytes);
            assert!(
                bad.is_empty(),
                "{args:?} {what}: {bad:?}\n{}",
                String::from_utf8_lossy(bytes)
            );
        }
        let text = String::from_utf8_lossy(&out.stdout);
        printed_hostile += usize::from(text.contains("red") || text.contains("over"));
    }
    assert!(
        printed_hostile >= 6,
        "most commands printed the (cleaned) text: {printed_hostile}"
    );

    // `send --wait` prints the reply it waited for.
    let waiting = bot.spawn(&["send", &reviewer.address(), "a question", "--wait", "30s"]);
    let q = eventually(20, "the question", || {
        reviewer.run(&["sidecar", "--once"]);
        reviewer
            .stored()
            .into_iter()
            .find(|r| r["envelope"]["data"]["text"] == "a question")
    });
    reviewer.ok(&[
        "reply",
        q["envelope"]["id"].as_str().unwrap(),
        &format!("answer {HOSTILE}"),
    ]);
    let out = finish(waiting);
    assert!(
        raw_controls(&out.stdout).is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("answer"),
        "the reply is printed"
    );

    // `listen` streams them cleaned too (and as JSON, escaped by JSON itself).
    let mut listen = reviewer.spawn(&["listen", "--count", "1", "--poll-ms", "20"]);
    // A tell written before the listener looked is not news: tell (each from a new sender, so
    // none is paced) until it has printed one.
    for n in 0..2000 {
        if listen.try_wait().unwrap().is_some() {
            break;
        }
        reviewer.run(&[
            "tell",
            "--from",
            &format!("w{n}"),
            "engineer",
            &format!("listen {HOSTILE}"),
        ]);
    }
    let out = finish(listen);
    assert!(
        raw_controls(&out.stdout).is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("listen"));
}

#[test]
fn lm_gateway_mail_local_delivery_has_no_room_for_waits_in_the_agent_inbox_and_none_is_cut_unseen()
{
    let gw = Gw::start();
    let (bot, reviewer) = pair(&gw, "release-bot", "reviewer");
    // The reviewer's session is bound to its agent from its first event.
    assert_eq!(reviewer.prompt("rev-1"), "");
    // More than the local log keeps of one identity's mail at once (1 MiB): ~70 of these fit.
    let n = 80;
    let text = |i: usize| format!("note {i:03} {}", "x".repeat(15_000));
    for i in 0..n {
        bot.ok(&["send", &reviewer.address(), &text(i)]);
    }
    let _sidecar = Killer(reviewer.spawn(&["--json", "sidecar", "--poll-wait", "5"]));
    eventually(60, "every message stored by the sidecar", || {
        (reviewer.stored().len() == n).then_some(())
    });
    // The session is shown each of them once, however many prompts it takes; the sidecar hands
    // the rest to local delivery as the earlier ones are shown.
    let mut shown = std::collections::BTreeSet::new();
    eventually(180, "every message shown", || {
        let out = reviewer.prompt("rev-1");
        for i in 0..n {
            if out.contains(&format!("note {i:03} x")) {
                assert!(shown.insert(i), "note {i} shown twice");
            }
        }
        (shown.len() == n).then_some(())
    });
}
