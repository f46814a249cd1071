//! Send → visible in the recipient's context: `cargo bench -p agentbus --bench
//! visible`. Whole processes, as people and harnesses run them, timed from the start of the
//! sending command to the end of the first hook run whose answer holds the message:
//!
//! - **local**: `agentbus tell <session> …`, then the session's Claude Code hook
//!   (`UserPromptSubmit`), run back to back until its answer frames the message;
//! - **gateway**: `agentbus send agent://…` from one machine (its own `AGENTBUS_HOME`) through a
//!   gateway on loopback (SQLite, `synchronous=FULL`) to an `agentbus sidecar` process of the
//!   recipient holding the WebSocket, which re-verifies, persists (fsync), imports into local
//!   delivery and acks; the recipient's session hook runs back to back until its answer frames the
//!   message.
//!
//! Prints p50, p90 and p99 of each. The hook runs as soon as the previous one exits, so the
//! figure is the machinery's latency, not a harness's: in a real session the message waits for
//! the session's next prompt or tool call. Figures go in `docs/benchmarks.md`.

#![allow(clippy::unwrap_used, clippy::print_stdout, missing_docs)]

use std::io::Write as _;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

const LOCAL_RUNS: usize = 200;
const GATEWAY_RUNS: usize = 150;

fn cmd(home: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_agentbus"));
    c.args(args)
        .env("AGENTBUS_HOME", home)
        .env("AGENTBUS_ENGINEER_EMAIL", "bench@example.com")
        .env("AGENTBUS_KEYSTORE", "file")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    // The bench's own commands are the engineer's, even when run inside a harness session.
    use agentbus_local::session::{HARNESS_MARKERS, SESSION_VARS};
    let vars = SESSION_VARS.iter().map(|(k, _)| *k);
    for m in vars.chain(HARNESS_MARKERS.iter().map(|(k, _)| *k)) {
        c.env_remove(m);
    }
    c
}

fn run(home: &Path, args: &[&str], stdin: &[u8], env: &[(&str, &str)]) -> Output {
    let mut c = cmd(home, args);
    for (k, v) in env {
        c.env(k, v);
    }
    let mut child = c.spawn().unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "agentbus {args:?}: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    out
}

fn prompt(sid: &str) -> Vec<u8> {
    format!(r#"{{"session_id":"{sid}","hook_event_name":"UserPromptSubmit","prompt":"go"}}"#)
        .into_bytes()
}

/// Runs the hook until its answer frames `id`; returns when it did.
fn until_visible(home: &Path, sid: &str, id: &str, env: &[(&str, &str)]) -> Instant {
    let needle = format!("id=\\\"{id}\\\"");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = run(home, &["hook", "claude"], &prompt(sid), env);
        if String::from_utf8_lossy(&out.stdout).contains(&needle) {
            return Instant::now();
        }
        assert!(Instant::now() < deadline, "{id} never became visible");
    }
}

fn report(name: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let at =
        |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize].as_secs_f64() * 1000.0;
    println!(
        "{name:<34} p50 {:>7.2} ms   p90 {:>7.2} ms   p99 {:>7.2} ms   (n={})",
        at(0.5),
        at(0.9),
        at(0.99),
        samples.len()
    );
}

fn local() -> Vec<Duration> {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    run(h, &["hook", "claude"], &prompt("bench"), &[]);
    let mut out = Vec::with_capacity(LOCAL_RUNS);
    for i in 0..LOCAL_RUNS {
        let start = Instant::now();
        // A new sender each time: the window to a recipient that acknowledges grows anyway, but
        // this keeps the pacing out of the figure.
        let sent = run(
            h,
            &[
                "--json",
                "tell",
                "--from",
                &format!("s{i}"),
                "bench",
                "visible?",
            ],
            b"",
            &[],
        );
        let id = serde_json::from_slice::<Value>(&sent.stdout).unwrap()["id"]
            .as_str()
            .unwrap()
            .to_owned();
        out.push(until_visible(h, "bench", &id, &[]) - start);
    }
    out
}

struct Killer(Child);

impl Drop for Killer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn gateway() -> Vec<Duration> {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("gw");
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
                .await
                .unwrap();
            let addr = listener.local_addr().unwrap();
            let config = agentbus_gateway::Config::new(addr, data);
            let gw =
                agentbus_gateway::Gateway::open(config, Arc::new(agentbus_runtime::SystemClock))
                    .await
                    .unwrap();
            let admin = gw.bootstrap.as_ref().unwrap().admin_token.clone();
            ready_tx.send((format!("http://{addr}"), admin)).unwrap();
            gw.serve_on(listener, async move {
                let _ = stop_rx.await;
            })
            .await
            .unwrap();
        });
    });
    let (url, admin) = ready_rx.recv().unwrap();
    let (bot, rev) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    for (home, name) in [(bot.path(), "bench-bot"), (rev.path(), "bench-reviewer")] {
        run(
            home,
            &[
                "connect",
                "--gateway",
                &url,
                "--token",
                &admin,
                "--name",
                name,
            ],
            b"",
            &[],
        );
    }
    let to = "agent://default/default/bench-reviewer";
    let bound = [("AGENTBUS_AGENT", to)];
    run(rev.path(), &["hook", "claude"], &prompt("rev"), &bound);
    let sidecar = Killer(
        cmd(rev.path(), &["sidecar"])
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    // Warm up: the sidecar's socket and key cache, the gateway's caches.
    let warm = run(bot.path(), &["--json", "send", to, "warm up"], b"", &[]);
    let id = serde_json::from_slice::<Value>(&warm.stdout).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    until_visible(rev.path(), "rev", &id, &bound);
    let mut out = Vec::with_capacity(GATEWAY_RUNS);
    for _ in 0..GATEWAY_RUNS {
        let start = Instant::now();
        let sent = run(bot.path(), &["--json", "send", to, "visible?"], b"", &[]);
        let id = serde_json::from_slice::<Value>(&sent.stdout).unwrap()["id"]
            .as_str()
            .unwrap()
            .to_owned();
        out.push(until_visible(rev.path(), "rev", &id, &bound) - start);
    }
    drop(sidecar);
    let _ = stop_tx.send(());
    let _ = server.join();
    out
}

fn main() {
    report("local tell -> hook answer", local());
    report("gateway send -> sidecar -> hook answer", gateway());
}
