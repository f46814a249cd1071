//! Whole-process timings of the delivery hook: `cargo bench -p agentbus --bench hook`. Times, as
//! separate processes, a bare start-and-exit of the binary (`agentbus --version`), an idle hook
//! (nothing new since the session's last look), an idle `Stop` (the end of a turn with nothing
//! new), and a hook that delivers one message; prints median and p90 of each. Figures go in
//! `docs/benchmarks.md`.

#![allow(clippy::unwrap_used, clippy::print_stdout, missing_docs)]

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const RUNS: usize = 300;

fn agentbus(home: &Path, args: &[&str], stdin: &[u8]) -> Duration {
    let start = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_agentbus"))
        .args(args)
        .env("AGENTBUS_HOME", home)
        .env("AGENTBUS_ENGINEER_EMAIL", "bench@example.com")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    assert!(child.wait().unwrap().success());
    start.elapsed()
}

fn report(name: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q) as usize].as_secs_f64() * 1000.0;
    println!(
        "{name:<28} median {:>6.3} ms   p90 {:>6.3} ms   (n={})",
        at(0.5),
        at(0.9),
        samples.len()
    );
}

fn main() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    let prompt = br#"{"session_id":"bench","hook_event_name":"UserPromptSubmit","prompt":"go"}"#;
    agentbus(h, &["hook", "claude"], prompt);
    // A realistic log: a few hundred lines from other sessions.
    for i in 0..200 {
        agentbus(
            h,
            &[
                "tell",
                "--from",
                &format!("peer{i}"),
                "engineer",
                "background traffic of an ordinary length, a sentence or two",
            ],
            b"",
        );
    }
    agentbus(h, &["hook", "claude"], prompt);
    agentbus(h, &["hook", "claude"], prompt);

    let bare: Vec<_> = (0..RUNS)
        .map(|_| agentbus(h, &["--version"], b""))
        .collect();
    let idle: Vec<_> = (0..RUNS)
        .map(|_| agentbus(h, &["hook", "claude"], prompt))
        .collect();
    // The end of a turn with nothing new: every turn of every session ends in one.
    let stop = br#"{"session_id":"bench","hook_event_name":"Stop","stop_hook_active":false}"#;
    let idle_stop: Vec<_> = (0..RUNS)
        .map(|_| agentbus(h, &["hook", "claude"], stop))
        .collect();
    let mut one = Vec::with_capacity(RUNS / 3);
    for i in 0..RUNS / 3 {
        agentbus(
            h,
            &[
                "tell",
                "--from",
                &format!("sender{i}"),
                "bench",
                "one message to deliver",
            ],
            b"",
        );
        one.push(agentbus(h, &["hook", "claude"], prompt));
    }
    report("bare start and exit", bare);
    report("idle hook (nothing new)", idle);
    report("idle Stop (nothing new)", idle_stop);
    report("hook delivering one message", one);
}
