//! Halting a harness (a cancel, §6.2, or the worker stopping): its own interrupt, then its whole
//! process group, SIGTERM and SIGKILL after the graces, timed by the injectable clock; never
//! waiting on pipes that a process the harness started keeps open.

use std::path::Path;
use std::time::Duration;

use agentbus_protocol::timestamp::Timestamp;
use agentbus_runtime::ManualClock;
use agentbus_work::adapter::{INTERRUPT_GRACE_MS, KILL_GRACE_MS};
use agentbus_work::{Adapter, Event};

use crate::{job, log, next};

/// A runtime whose tasks go on while the test thread polls the processes.
fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Whether process `pid` is gone (a zombie no one has waited for yet counts as gone).
pub fn gone(pid: i64) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
    }
}

/// What /proc says of `pid`, for a failure message.
fn status(pid: i64) -> String {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .filter(|l| l.starts_with("State") || l.starts_with("Sig") || l.starts_with("Name"))
        .collect::<Vec<_>>()
        .join("; ")
}

/// The live processes of process group `pgid`.
pub fn members(pgid: i32) -> Vec<i64> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i64>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // After the command's name: state, ppid, pgrp.
        let rest: Vec<&str> = stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .split_whitespace()
            .collect();
        if rest.len() > 2 && rest[0] != "Z" && rest[2] == pgid.to_string() {
            found.push(pid);
        }
    }
    found
}

/// Polls `f` until it holds, failing after 20 s.
pub fn until(what: &str, f: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(
            std::time::Instant::now() < deadline,
            "not within 20 s: {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The pid of the process the harness left behind, from its log.
fn lingering(dir: &Path) -> i64 {
    until("the lingering process in the log", || {
        log(dir).iter().any(|e| e["linger"].is_i64())
    });
    log(dir).iter().find_map(|e| e["linger"].as_i64()).unwrap()
}

/// Starts `adapter` and waits for its first activity.
async fn started(adapter: &dyn Adapter, dir: &Path) -> agentbus_work::Running {
    let mut r = adapter.start(&job(dir)).unwrap();
    loop {
        if let Event::Activity { .. } = next(&mut r).await {
            return r;
        }
    }
}

/// A harness that ignores its interrupt, and a process it started that ignores SIGTERM and
/// holds its pipes: the group gets SIGTERM when the interrupt's grace has passed on the clock,
/// which ends the harness, and SIGKILL when the kill grace has, which ends the rest.
pub fn deaf_harness_and_a_child_that_ignores_sigterm(adapter: &dyn Adapter, dir: &Path) {
    rt().block_on(async {
        let clock = ManualClock::new(Timestamp(1_764_504_000_000));
        let mut r = started(adapter, dir).await;
        let group = r.group.unwrap();
        let linger = lingering(dir);
        let leader = i64::from(group.id());
        let c = clock.clone();
        let halting = tokio::spawn(async move {
            let h = r.halt(&c).await;
            (h, r)
        });
        // The grace counts from the interrupt, which the harness has once it logs it.
        until("the interrupt at the harness", || {
            log(dir).iter().any(|e| {
                e["in"]["request"]["subtype"] == "interrupt"
                    || e["in"]["method"] == "turn/interrupt"
                    || e["POST"].as_str().is_some_and(|p| p.ends_with("/abort"))
            })
        });
        clock.advance_ms(INTERRUPT_GRACE_MS);
        until(
            &format!("the harness ended by SIGTERM: {}", status(leader)),
            || gone(leader),
        );
        assert!(!gone(linger), "SIGKILL came before its grace");
        assert!(!halting.is_finished());
        clock.advance_ms(KILL_GRACE_MS);
        let (halted, _r) = tokio::time::timeout(Duration::from_secs(20), halting)
            .await
            .expect("the halt did not end after the graces")
            .unwrap();
        assert!(halted.killed && !halted.turn_ended, "{halted:?}");
        until("the lingering process killed", || gone(linger));
        assert_eq!(members(group.id()), Vec::<i64>::new());
    });
}

/// A harness that exits on its interrupt while a process it started holds its pipes: the halt
/// ends at once (no grace on the clock passes), the group's SIGTERM ends the process, and the
/// turn counts as ended.
pub fn harness_exits_and_its_child_holds_its_pipes(adapter: &dyn Adapter, dir: &Path) {
    rt().block_on(async {
        let clock = ManualClock::new(Timestamp(1_764_504_000_000));
        let mut r = started(adapter, dir).await;
        let group = r.group.unwrap();
        let linger = lingering(dir);
        let halted = tokio::time::timeout(Duration::from_secs(20), r.halt(&clock))
            .await
            .expect("the halt waited on the pipes");
        assert!(halted.turn_ended && !halted.killed, "{halted:?}");
        assert!(
            halted.events.last().is_some_and(Event::is_end),
            "{halted:?}"
        );
        until("the lingering process ended by SIGTERM", || gone(linger));
        assert_eq!(members(group.id()), Vec::<i64>::new());
    });
}
