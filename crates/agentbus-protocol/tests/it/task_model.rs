//! The §6 state machine against a small reference model, over 10,000 random sequences of lifecycle
//! messages, senders and clock advances.
//!
//! The model is written from the text, not from the implementation: the diagram of §6 as a list of
//! edges, §6.1's timers as deadlines, §6.2's sender table, §6.3's terminal rule, and decision 9
//! (G-WP-7, G-WP-33) as `docs/protocol.md` ("Task lifecycle") states it. A driver plays the reaper
//! perfectly: before a message at instant `t` is applied, every timer due by `t` has fired.
//! After every step the machine and the model must agree on the answer, the state and the next
//! deadline; the run also checks that a task leaves no terminal state and ends in at most one.

use std::sync::atomic::{AtomicU64, Ordering};

use proptest::prelude::*;

use agentbus_protocol::task::{
    CANCEL_GRACE_S, Flag, ResultStatus, Sender, Task, TaskError, TaskEvent, TaskLimits, TaskState,
    Timer,
};
use agentbus_protocol::timestamp::Timestamp;

const T0: i64 = 1_790_000_000_000;

/// The reference model's task.
#[derive(Debug, Clone)]
struct Model {
    state: TaskState,
    accept_by: i64,
    expires_at: i64,
    progress_timeout: i64,
    max_duration: Option<i64>,
    accepted_at: Option<i64>,
    last_activity: Option<i64>,
    cancel_at: Option<i64>,
}

/// What the model says a message does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Refused(TaskError),
    Applied {
        to: TaskState,
        flag: Option<Flag>,
        cancel_requested: bool,
    },
}

use TaskState as S;

/// §6's diagram, one edge per line: (from, message, to). Results carry their status.
fn diagram_edge(from: TaskState, ev: TaskEvent) -> Option<TaskState> {
    let working = [S::Accepted, S::InProgress, S::NeedsInput];
    let res = |s| TaskEvent::Result {
        status: s,
        cancelled: false,
    };
    let edges: &[(&[TaskState], TaskEvent, TaskState)] = &[
        (&[S::Submitted], TaskEvent::Accept, S::Accepted),
        (&[S::Submitted], res(ResultStatus::Rejected), S::Rejected),
        (
            &[S::Accepted, S::InProgress],
            TaskEvent::Progress,
            S::InProgress,
        ),
        (
            &[S::Accepted, S::InProgress],
            TaskEvent::NeedsInput,
            S::NeedsInput,
        ),
        (&[S::NeedsInput], TaskEvent::Input, S::InProgress),
        (&working, res(ResultStatus::Succeeded), S::Succeeded),
        (&working, res(ResultStatus::Failed), S::Failed),
    ];
    let key = match ev {
        TaskEvent::Result { status, .. } => res(status),
        other => other,
    };
    edges
        .iter()
        .find(|(froms, e, _)| froms.contains(&from) && *e == key)
        .map(|(_, _, to)| *to)
}

impl Model {
    fn new(limits: &TaskLimits) -> Model {
        Model {
            state: S::Submitted,
            accept_by: T0 + limits.accept_timeout_s * 1000,
            expires_at: limits.expires_at.0,
            progress_timeout: limits.progress_timeout_s * 1000,
            max_duration: limits.max_duration_s.map(|s| s * 1000),
            accepted_at: None,
            last_activity: None,
            cancel_at: None,
        }
    }

    fn terminal(&self) -> bool {
        matches!(
            self.state,
            S::Succeeded | S::Failed | S::Rejected | S::Expired | S::Cancelled
        )
    }

    /// §6.1 and decision 9: the deadlines running now, in the order that breaks a tie (a task
    /// whose expiry and cancel grace fall at one instant expires).
    fn timers(&self) -> Vec<(i64, Timer)> {
        if self.terminal() {
            return vec![];
        }
        let mut t = vec![(self.expires_at, Timer::Expiry)];
        if self.state == S::Submitted {
            t.push((self.accept_by, Timer::AcceptTimeout));
        }
        // The progress timeout pauses in needs_input.
        if matches!(self.state, S::Accepted | S::InProgress)
            && let Some(last) = self.last_activity
        {
            t.push((last + self.progress_timeout, Timer::ProgressTimeout));
        }
        if let (Some(acc), Some(max)) = (self.accepted_at, self.max_duration) {
            t.push((acc + max, Timer::MaxDuration));
        }
        if let Some(c) = self.cancel_at {
            t.push((c + CANCEL_GRACE_S * 1000, Timer::CancelGrace));
        }
        t
    }

    fn next_deadline(&self) -> Option<i64> {
        self.timers().iter().map(|(t, _)| *t).min()
    }

    /// The timer that fires at `now`, if one is due, and its effect.
    fn fire(&mut self, now: i64) -> Option<(Timer, TaskState)> {
        let mut timers = self.timers();
        timers.sort_by_key(|(t, _)| *t); // stable: ties keep the tie-break order
        let (at, timer) = *timers.first()?;
        if at > now {
            return None;
        }
        self.state = if timer == Timer::CancelGrace {
            S::Cancelled
        } else {
            S::Expired
        };
        Some((timer, self.state))
    }

    fn apply(&mut self, ev: TaskEvent, who: Sender, at: i64) -> Answer {
        // §6.2's table comes first, whatever the state.
        let allowed = match ev {
            TaskEvent::Input => who.requester,
            TaskEvent::Cancel => who.requester || who.admin,
            _ => who.recipient,
        };
        if !allowed {
            return Answer::Refused(TaskError::WrongSender);
        }
        let applied = |to, flag| Answer::Applied {
            to,
            flag,
            cancel_requested: false,
        };
        let here = self.state;
        let stay = |flag| applied(here, flag);
        // §6.3: recorded late, no change.
        if self.terminal() {
            return stay(Some(Flag::Late));
        }
        match ev {
            // §5.6: an error report never changes state.
            TaskEvent::Error => return stay(None),
            TaskEvent::Cancel if self.state == S::Submitted => {
                self.state = S::Cancelled;
                return applied(S::Cancelled, None);
            }
            TaskEvent::Cancel => {
                let first = self.cancel_at.is_none();
                self.cancel_at.get_or_insert(at);
                return Answer::Applied {
                    to: self.state,
                    flag: None,
                    cancel_requested: first,
                };
            }
            TaskEvent::Input if self.state != S::NeedsInput => {
                return Answer::Refused(TaskError::NoOpenQuestion);
            }
            // §6.2: a progress or a repeated question while waiting for input is recorded only.
            TaskEvent::Progress | TaskEvent::NeedsInput if self.state == S::NeedsInput => {
                return stay(None);
            }
            _ => {}
        }
        let Some(mut to) = diagram_edge(self.state, ev) else {
            return stay(Some(Flag::Ignored));
        };
        // A failed result answering a pending cancel acknowledges it.
        if let TaskEvent::Result {
            status: ResultStatus::Failed,
            cancelled: true,
        } = ev
            && self.cancel_at.is_some()
        {
            to = S::Cancelled;
        }
        if ev == TaskEvent::Accept {
            self.accepted_at = Some(at);
        }
        if matches!(
            ev,
            TaskEvent::Accept | TaskEvent::Progress | TaskEvent::Input
        ) {
            self.last_activity = Some(at);
        }
        self.state = to;
        applied(to, None)
    }
}

#[derive(Debug, Clone)]
enum Step {
    Message(TaskEvent, Sender, i64),
    Wait(i64),
}

fn event() -> impl Strategy<Value = TaskEvent> {
    let status = prop_oneof![
        Just(ResultStatus::Succeeded),
        Just(ResultStatus::Failed),
        Just(ResultStatus::Rejected),
    ];
    prop_oneof![
        3 => Just(TaskEvent::Accept),
        3 => Just(TaskEvent::Progress),
        2 => Just(TaskEvent::NeedsInput),
        2 => Just(TaskEvent::Input),
        3 => (status, any::<bool>()).prop_map(|(status, cancelled)| TaskEvent::Result { status, cancelled }),
        1 => Just(TaskEvent::Error),
        2 => Just(TaskEvent::Cancel),
    ]
}

fn sender() -> impl Strategy<Value = Sender> {
    prop_oneof![
        4 => Just(Sender::RECIPIENT),
        3 => Just(Sender::REQUESTER),
        1 => Just(Sender::ADMIN),
        1 => Just(Sender::OTHER),
        // One agent delegating to itself is both parties.
        1 => Just(Sender { requester: true, recipient: true, admin: false }),
    ]
}

/// Gaps in milliseconds: mostly short, sometimes past a timeout, sometimes exactly on one.
fn gap() -> impl Strategy<Value = i64> {
    prop_oneof![
        4 => 0i64..5_000,
        2 => 5_000i64..200_000,
        1 => 200_000i64..2_000_000,
        1 => prop::sample::select(vec![30_000i64, 60_000, 120_000, 600_000]),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        5 => (event(), sender(), gap()).prop_map(|(e, s, g)| Step::Message(e, s, g)),
        1 => gap().prop_map(Step::Wait),
    ]
}

fn limits() -> impl Strategy<Value = TaskLimits> {
    (
        5i64..300,
        30i64..1200,
        prop::option::of(30i64..2000),
        60i64..5000,
    )
        .prop_map(|(accept, progress, max, expiry)| TaskLimits {
            accept_timeout_s: accept,
            progress_timeout_s: progress,
            max_duration_s: max,
            expires_at: Timestamp(T0 + expiry * 1000),
        })
}

static SEQUENCES: AtomicU64 = AtomicU64::new(0);
static STEPS: AtomicU64 = AtomicU64::new(0);
static TERMINAL: AtomicU64 = AtomicU64::new(0);

/// Fires due timers on both sides, checking they agree.
fn reap(task: &mut Task, model: &mut Model, now: i64) -> Result<(), TestCaseError> {
    loop {
        let got = task.fire_due(Timestamp(now));
        let want = model.fire(now);
        match (got, want) {
            (None, None) => return Ok(()),
            (Some(o), Some((timer, to))) => {
                prop_assert_eq!(o.timer, Some(timer));
                prop_assert_eq!(o.to, to);
                prop_assert_eq!(task.state, to);
            }
            (got, want) => {
                return Err(TestCaseError::fail(format!(
                    "timers disagree at {now}: machine {got:?}, model {want:?}"
                )));
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10_000, ..ProptestConfig::default() })]

    #[test]
    fn wp_6_task_machine_agrees_with_the_reference_model(
        limits in limits(),
        steps in prop::collection::vec(step(), 1..24),
    ) {
        let mut task = Task::new(limits, Timestamp(T0));
        let mut model = Model::new(&limits);
        let mut now = T0;
        let mut terminal_entries = 0;
        for step in &steps {
            let was_terminal = task.state.is_terminal();
            match *step {
                Step::Wait(g) => {
                    now += g;
                    reap(&mut task, &mut model, now)?;
                }
                Step::Message(ev, who, g) => {
                    now += g;
                    reap(&mut task, &mut model, now)?;
                    let entered_terminal_before = task.state.is_terminal();
                    let got = task.apply(ev, who, Timestamp(now));
                    let want = model.apply(ev, who, now);
                    match (got, want) {
                        (Err(e), Answer::Refused(w)) => prop_assert_eq!(e, w),
                        (Ok(o), Answer::Applied { to, flag, cancel_requested }) => {
                            prop_assert_eq!(o.to, to, "{:?} by {:?}", ev, who);
                            prop_assert_eq!(o.flag, flag, "{:?} by {:?}", ev, who);
                            prop_assert_eq!(o.cancel_requested, cancel_requested);
                            prop_assert!(o.timer.is_none());
                            if entered_terminal_before {
                                prop_assert_eq!(o.from, o.to, "a terminal state was left");
                            }
                        }
                        (got, want) => {
                            return Err(TestCaseError::fail(format!(
                                "{ev:?} by {who:?} at {now}: machine {got:?}, model {want:?}"
                            )));
                        }
                    }
                }
            }
            prop_assert_eq!(task.state, model.state);
            prop_assert_eq!(task.next_deadline().map(|t| t.0), model.next_deadline());
            if was_terminal {
                prop_assert!(task.state.is_terminal(), "left a terminal state");
            } else if task.state.is_terminal() {
                terminal_entries += 1;
            }
            STEPS.fetch_add(1, Ordering::Relaxed);
        }
        prop_assert!(terminal_entries <= 1);
        if task.state.is_terminal() {
            TERMINAL.fetch_add(1, Ordering::Relaxed);
        }
        let n = SEQUENCES.fetch_add(1, Ordering::Relaxed) + 1;
        if n.is_multiple_of(10_000) {
            eprintln!(
                "task model: {n} sequences, {} steps, {} ended in a terminal state",
                STEPS.load(Ordering::Relaxed),
                TERMINAL.load(Ordering::Relaxed)
            );
        }
    }
}
