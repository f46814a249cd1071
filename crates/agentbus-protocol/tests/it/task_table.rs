//! §6 state machine: the whole (state, event) table and the sender rules as data files, and each
//! timer of §6.1 driven by explicit instants.

use std::collections::HashSet;

use agentbus_protocol::task::{
    Flag, ResultStatus, Sender, Task, TaskEvent, TaskLimits, TaskState, Timer,
};
use agentbus_protocol::timestamp::Timestamp;

use crate::read_crate;

const T0: Timestamp = Timestamp(1_790_000_000_000);

fn limits() -> TaskLimits {
    TaskLimits {
        accept_timeout_s: 120,
        progress_timeout_s: 600,
        max_duration_s: None,
        expires_at: T0.plus_secs(3600),
    }
}

fn event(name: &str) -> TaskEvent {
    let result = |status, cancelled| TaskEvent::Result { status, cancelled };
    match name {
        "accept" => TaskEvent::Accept,
        "progress" => TaskEvent::Progress,
        "needs_input" => TaskEvent::NeedsInput,
        "input" => TaskEvent::Input,
        "result:succeeded" => result(ResultStatus::Succeeded, false),
        "result:failed" => result(ResultStatus::Failed, false),
        "result:failed+cancelled" => result(ResultStatus::Failed, true),
        "result:rejected" => result(ResultStatus::Rejected, false),
        "error" => TaskEvent::Error,
        "cancel" => TaskEvent::Cancel,
        other => panic!("unknown event {other}"),
    }
}

const EVENTS: [&str; 10] = [
    "accept",
    "progress",
    "needs_input",
    "input",
    "result:succeeded",
    "result:failed",
    "result:failed+cancelled",
    "result:rejected",
    "error",
    "cancel",
];

fn legit_sender(ev: &str) -> Sender {
    match ev {
        "input" | "cancel" => Sender::REQUESTER,
        _ => Sender::RECIPIENT,
    }
}

/// A task in `state`, reached through real transitions where the diagram allows.
fn task_in(state: TaskState, pending: bool) -> Task {
    let mut t = Task::new(limits(), T0);
    let at = T0.plus_secs(1);
    let step = |t: &mut Task, ev: TaskEvent, s: Sender| {
        t.apply(ev, s, at).expect("setup transition");
    };
    match state {
        TaskState::Submitted => {}
        TaskState::Accepted => step(&mut t, TaskEvent::Accept, Sender::RECIPIENT),
        TaskState::InProgress => {
            step(&mut t, TaskEvent::Accept, Sender::RECIPIENT);
            step(&mut t, TaskEvent::Progress, Sender::RECIPIENT);
        }
        TaskState::NeedsInput => {
            step(&mut t, TaskEvent::Accept, Sender::RECIPIENT);
            step(&mut t, TaskEvent::NeedsInput, Sender::RECIPIENT);
        }
        TaskState::Succeeded | TaskState::Failed | TaskState::Rejected => {
            if state != TaskState::Rejected {
                step(&mut t, TaskEvent::Accept, Sender::RECIPIENT);
            }
            let status = match state {
                TaskState::Succeeded => ResultStatus::Succeeded,
                TaskState::Failed => ResultStatus::Failed,
                _ => ResultStatus::Rejected,
            };
            step(
                &mut t,
                TaskEvent::Result {
                    status,
                    cancelled: false,
                },
                Sender::RECIPIENT,
            );
        }
        TaskState::Expired => {
            t.fire_due(T0.plus_secs(120)).expect("accept timeout");
        }
        TaskState::Cancelled => step(&mut t, TaskEvent::Cancel, Sender::REQUESTER),
    }
    if pending {
        step(&mut t, TaskEvent::Cancel, Sender::REQUESTER);
    }
    assert_eq!(t.state, state, "setup reached {state}");
    t
}

#[test]
fn wp_6_every_state_event_pair_follows_the_table() {
    let text = String::from_utf8(read_crate("task/transitions.table")).unwrap();
    let mut covered = HashSet::new();
    for line in text
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
    {
        let cols: Vec<&str> = line.split_whitespace().collect();
        let (state, ev, pending) = (cols[0], cols[1], cols[2] == "yes");
        let expected = &cols[3..];
        let state: TaskState = state.parse().unwrap();
        assert!(
            covered.insert((state.as_str(), ev, pending)),
            "duplicate row {line}"
        );
        let mut task = task_in(state, pending);
        let got = task.apply(event(ev), legit_sender(ev), T0.plus_secs(2));
        let rendered: Vec<String> = match got {
            Err(e) => vec![e.code().to_string()],
            Ok(o) => {
                assert_eq!(o.to, task.state);
                let mut r = vec![o.to.as_str().to_owned()];
                if let Some(f) = o.flag {
                    r.push(f.as_str().to_owned());
                }
                if o.cancel_requested {
                    r.push("cancel-requested".to_owned());
                }
                r
            }
        };
        assert_eq!(rendered, expected, "{line}");
    }
    // Every pair is in the table: 9 states × 10 events, plus the cancel-pending variants of the
    // three states where a cancel can wait.
    for state in TaskState::ALL {
        for ev in EVENTS {
            assert!(
                covered.contains(&(state.as_str(), ev, false)),
                "{state} {ev} missing"
            );
        }
    }
    assert_eq!(covered.len(), 9 * 10 + 3 * 10);
}

#[test]
fn wp_6_2_sender_rules_follow_the_table() {
    let text = String::from_utf8(read_crate("task/senders.table")).unwrap();
    let senders = [
        Sender::REQUESTER,
        Sender::RECIPIENT,
        Sender::ADMIN,
        Sender::OTHER,
    ];
    let mut rows = 0;
    for line in text
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
    {
        let cols: Vec<&str> = line.split_whitespace().collect();
        for (sender, want) in senders.iter().zip(&cols[1..]) {
            let mut task = task_in(TaskState::NeedsInput, false);
            let got = match task.apply(event(cols[0]), *sender, T0.plus_secs(2)) {
                Ok(_) => "ok".to_owned(),
                Err(e) => e.code().to_string(),
            };
            assert_eq!(&got, want, "{line} / {sender:?}");
        }
        rows += 1;
    }
    assert_eq!(rows, EVENTS.len());
}

#[test]
fn wp_6_2_one_agent_may_be_both_parties() {
    let both = Sender {
        requester: true,
        recipient: true,
        admin: false,
    };
    let mut t = Task::new(limits(), T0);
    assert_eq!(
        t.apply(TaskEvent::Accept, both, T0).unwrap().to,
        TaskState::Accepted
    );
}

#[test]
fn wp_6_1_1_accept_timeout_fires_at_its_deadline() {
    let mut t = Task::new(limits(), T0);
    assert_eq!(t.fire_due(T0.plus_secs(119)), None);
    let o = t.fire_due(T0.plus_secs(120)).unwrap();
    assert_eq!(
        (o.to, o.timer),
        (TaskState::Expired, Some(Timer::AcceptTimeout))
    );
}

#[test]
fn wp_6_1_2_progress_timeout_restarts_on_each_accept_and_progress() {
    let mut t = Task::new(limits(), T0);
    t.apply(TaskEvent::Accept, Sender::RECIPIENT, T0.plus_secs(10))
        .unwrap();
    t.apply(TaskEvent::Progress, Sender::RECIPIENT, T0.plus_secs(500))
        .unwrap();
    // 600 s after the accept, but only 100 s after the progress.
    assert_eq!(t.fire_due(T0.plus_secs(610)), None);
    assert_eq!(t.fire_due(T0.plus_secs(1099)), None);
    let o = t.fire_due(T0.plus_secs(1100)).unwrap();
    assert_eq!(
        (o.from, o.to, o.timer),
        (
            TaskState::InProgress,
            TaskState::Expired,
            Some(Timer::ProgressTimeout)
        )
    );
}

#[test]
fn g_wp_7_progress_timeout_pauses_in_needs_input_and_restarts_on_input() {
    let mut l = limits();
    l.expires_at = T0.plus_secs(86_400);
    let mut t = Task::new(l, T0);
    t.apply(TaskEvent::Accept, Sender::RECIPIENT, T0).unwrap();
    t.apply(TaskEvent::NeedsInput, Sender::RECIPIENT, T0.plus_secs(10))
        .unwrap();
    // Long past the progress timeout, still waiting for the requester.
    assert_eq!(t.fire_due(T0.plus_secs(3000)), None);
    // A progress while waiting is recorded but resumes nothing (§6.2) and restarts nothing.
    let o = t
        .apply(TaskEvent::Progress, Sender::RECIPIENT, T0.plus_secs(3000))
        .unwrap();
    assert_eq!((o.to, o.flag), (TaskState::NeedsInput, None));
    t.apply(TaskEvent::Input, Sender::REQUESTER, T0.plus_secs(3100))
        .unwrap();
    assert_eq!(t.state, TaskState::InProgress);
    assert_eq!(t.fire_due(T0.plus_secs(3100 + 599)), None);
    assert_eq!(
        t.fire_due(T0.plus_secs(3100 + 600)).unwrap().timer,
        Some(Timer::ProgressTimeout)
    );
}

#[test]
fn wp_6_1_3_max_duration_counts_from_accept_despite_steady_progress() {
    let mut l = limits();
    l.max_duration_s = Some(60);
    let mut t = Task::new(l, T0);
    t.apply(TaskEvent::Accept, Sender::RECIPIENT, T0.plus_secs(5))
        .unwrap();
    for s in [20, 40, 60] {
        t.apply(TaskEvent::Progress, Sender::RECIPIENT, T0.plus_secs(s))
            .unwrap();
        assert_eq!(t.fire_due(T0.plus_secs(s)), None);
    }
    let o = t.fire_due(T0.plus_secs(65)).unwrap();
    assert_eq!(
        (o.to, o.timer),
        (TaskState::Expired, Some(Timer::MaxDuration))
    );
}

#[test]
fn wp_6_1_4_expires_at_bounds_every_non_terminal_state() {
    for state in [
        TaskState::Submitted,
        TaskState::Accepted,
        TaskState::InProgress,
        TaskState::NeedsInput,
    ] {
        let mut l = limits();
        l.accept_timeout_s = 3600;
        l.progress_timeout_s = 86400;
        l.expires_at = T0.plus_secs(30);
        let mut t = Task::new(l, T0);
        match state {
            TaskState::Submitted => {}
            _ => {
                t.apply(TaskEvent::Accept, Sender::RECIPIENT, T0).unwrap();
                if state == TaskState::InProgress {
                    t.apply(TaskEvent::Progress, Sender::RECIPIENT, T0).unwrap();
                }
                if state == TaskState::NeedsInput {
                    t.apply(TaskEvent::NeedsInput, Sender::RECIPIENT, T0)
                        .unwrap();
                }
            }
        }
        assert_eq!(t.fire_due(T0.plus_secs(29)), None, "{state}");
        let o = t.fire_due(T0.plus_secs(30)).unwrap();
        assert_eq!(
            (o.from, o.to, o.timer),
            (state, TaskState::Expired, Some(Timer::Expiry))
        );
    }
}

#[test]
fn wp_6_1_5_cancel_grace_cancels_without_an_answer() {
    let mut t = Task::new(limits(), T0);
    t.apply(TaskEvent::Accept, Sender::RECIPIENT, T0).unwrap();
    let o = t
        .apply(TaskEvent::Cancel, Sender::REQUESTER, T0.plus_secs(10))
        .unwrap();
    assert!(o.cancel_requested);
    assert_eq!(t.fire_due(T0.plus_secs(69)), None);
    let o = t.fire_due(T0.plus_secs(70)).unwrap();
    assert_eq!(
        (o.to, o.timer),
        (TaskState::Cancelled, Some(Timer::CancelGrace))
    );
}

#[test]
fn g_wp_33_the_first_terminal_envelope_wins_during_the_grace() {
    let mut t = Task::new(limits(), T0);
    t.apply(TaskEvent::Accept, Sender::RECIPIENT, T0).unwrap();
    t.apply(TaskEvent::Cancel, Sender::REQUESTER, T0.plus_secs(10))
        .unwrap();
    let ok = TaskEvent::Result {
        status: ResultStatus::Succeeded,
        cancelled: false,
    };
    assert_eq!(
        t.apply(ok, Sender::RECIPIENT, T0.plus_secs(20)).unwrap().to,
        TaskState::Succeeded
    );
    assert_eq!(
        t.fire_due(T0.plus_secs(1000)),
        None,
        "terminal: no timer fires"
    );
    let late = t
        .apply(
            TaskEvent::Result {
                status: ResultStatus::Failed,
                cancelled: true,
            },
            Sender::RECIPIENT,
            T0.plus_secs(30),
        )
        .unwrap();
    assert_eq!(
        (late.to, late.flag),
        (TaskState::Succeeded, Some(Flag::Late))
    );
}

#[test]
fn wp_5_2_defaults_come_from_the_request() {
    let data = serde_json::json!({"instructions": "x", "constraints": {"progress_timeout_s": 600}});
    let l = TaskLimits::from_request(&data, T0);
    assert_eq!(
        (l.accept_timeout_s, l.progress_timeout_s, l.max_duration_s),
        (120, 600, None)
    );
}
