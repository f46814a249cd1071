//! The task lifecycle (§6): states, who may send what, and timers.
//!
//! [`Task::apply`] is the one transition function over the whole diagram. It takes the message, who
//! sent it relative to the task and when, and returns the outcome the gateway records in the task's
//! timeline. [`Task::due`] finds a timer that has fired at a given instant; the caller (the
//! gateway's reaper) passes the time, so tests move a clock instead of sleeping.
//!
//! Where the diagram and §6.1's table disagree, the rules are checklist G-WP-7's (decision 9):
//! - the request's `expires_at` and `max_duration` (counted from accept) bound every non-terminal
//!   state;
//! - the progress timeout runs in `accepted` and `in_progress`, pauses in `needs_input`, and
//!   restarts on `task.input`;
//! - a cancel is immediate while `submitted`; otherwise the task becomes `cancelled` when the worker
//!   answers `failed` with `failure.code: "cancelled"` or when the 60 s grace passes;
//! - an envelope from the legitimate sender that the diagram has no edge for is recorded with the
//!   flag `ignored` and changes nothing;
//! - the first terminal-causing envelope persisted wins (G-WP-33); later ones are flagged `late`
//!   (§6.3).

use std::fmt;
use std::str::FromStr;

use crate::errors::Code;
use crate::timestamp::Timestamp;

/// The default accept timeout (§5.2, §6.1).
pub const DEFAULT_ACCEPT_TIMEOUT_S: i64 = 120;
/// The default progress timeout (§5.2, §6.1).
pub const DEFAULT_PROGRESS_TIMEOUT_S: i64 = 900;
/// The fixed cancel grace (§5.7, §6.1).
pub const CANCEL_GRACE_S: i64 = 60;
/// How often the gateway's reaper evaluates timers (§6.1).
pub const REAPER_INTERVAL_S: i64 = 5;

/// A task's state (§6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TaskState {
    /// The request was persisted.
    Submitted,
    /// The recipient accepted.
    Accepted,
    /// The recipient reported progress.
    InProgress,
    /// The recipient asked the requester a question.
    NeedsInput,
    /// Terminal: the work succeeded.
    Succeeded,
    /// Terminal: the work failed.
    Failed,
    /// Terminal: the recipient declined.
    Rejected,
    /// Terminal: a timer ran out.
    Expired,
    /// Terminal: the requester cancelled.
    Cancelled,
}

impl TaskState {
    /// Every state.
    pub const ALL: [TaskState; 9] = [
        TaskState::Submitted,
        TaskState::Accepted,
        TaskState::InProgress,
        TaskState::NeedsInput,
        TaskState::Succeeded,
        TaskState::Failed,
        TaskState::Rejected,
        TaskState::Expired,
        TaskState::Cancelled,
    ];

    /// Whether no transition leaves this state (§6.3).
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskState::Succeeded
                | TaskState::Failed
                | TaskState::Rejected
                | TaskState::Expired
                | TaskState::Cancelled
        )
    }

    /// The wire name: `submitted`, `in_progress`, ….
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Submitted => "submitted",
            TaskState::Accepted => "accepted",
            TaskState::InProgress => "in_progress",
            TaskState::NeedsInput => "needs_input",
            TaskState::Succeeded => "succeeded",
            TaskState::Failed => "failed",
            TaskState::Rejected => "rejected",
            TaskState::Expired => "expired",
            TaskState::Cancelled => "cancelled",
        }
    }
}

impl fmt::Display for TaskState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A string that is not a task state.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a task state")]
pub struct UnknownState(pub String);

impl FromStr for TaskState {
    type Err = UnknownState;

    fn from_str(s: &str) -> Result<TaskState, UnknownState> {
        TaskState::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| UnknownState(s.to_owned()))
    }
}

/// The `status` of a task.result (§5.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ResultStatus {
    /// `succeeded`.
    Succeeded,
    /// `failed`.
    Failed,
    /// `rejected`.
    Rejected,
}

/// A lifecycle message, as far as the state machine cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TaskEvent {
    /// `task.accept`.
    Accept,
    /// `task.progress`.
    Progress,
    /// `task.needs_input`.
    NeedsInput,
    /// `task.input`.
    Input,
    /// `task.result`; `cancelled` is true when `failure.code` is `"cancelled"`.
    Result {
        /// The result's status.
        status: ResultStatus,
        /// Whether `failure.code` is `"cancelled"`.
        cancelled: bool,
    },
    /// `task.error`: recorded, never a transition (§5.6).
    Error,
    /// `task.cancel`.
    Cancel,
}

impl TaskEvent {
    /// The event a message type and its data stand for; `None` for `task.request` and non-task
    /// types.
    pub fn from_message(kind: crate::schema::KnownType, data: &serde_json::Value) -> Option<Self> {
        use crate::schema::KnownType as K;
        Some(match kind {
            K::TaskAccept => TaskEvent::Accept,
            K::TaskProgress => TaskEvent::Progress,
            K::TaskNeedsInput => TaskEvent::NeedsInput,
            K::TaskInput => TaskEvent::Input,
            K::TaskError => TaskEvent::Error,
            K::TaskCancel => TaskEvent::Cancel,
            K::TaskResult => {
                let status = match data.get("status").and_then(|s| s.as_str()) {
                    Some("succeeded") => ResultStatus::Succeeded,
                    Some("failed") => ResultStatus::Failed,
                    Some("rejected") => ResultStatus::Rejected,
                    _ => return None,
                };
                let cancelled =
                    data.pointer("/failure/code").and_then(|c| c.as_str()) == Some("cancelled");
                TaskEvent::Result { status, cancelled }
            }
            _ => return None,
        })
    }
}

/// Who sent a message, relative to the task. One agent may be both parties.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sender {
    /// The sender is the task's requester.
    pub requester: bool,
    /// The sender is the task's recipient.
    pub recipient: bool,
    /// The sender acts as a workspace admin (the console).
    pub admin: bool,
}

impl Sender {
    /// The requester.
    pub const REQUESTER: Sender = Sender {
        requester: true,
        recipient: false,
        admin: false,
    };
    /// The recipient.
    pub const RECIPIENT: Sender = Sender {
        requester: false,
        recipient: true,
        admin: false,
    };
    /// A workspace admin who is neither party.
    pub const ADMIN: Sender = Sender {
        requester: false,
        recipient: false,
        admin: true,
    };
    /// Anyone else.
    pub const OTHER: Sender = Sender {
        requester: false,
        recipient: false,
        admin: false,
    };
}

/// Why a message is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TaskError {
    /// §6.2 does not allow this sender this message.
    #[error("§6.2 does not allow this sender to send this task message")]
    WrongSender,
    /// A task.input while no question is open (§5.7b).
    #[error("task.input is accepted only while the task is needs_input")]
    NoOpenQuestion,
}

impl TaskError {
    /// The catalogue code.
    pub fn code(self) -> Code {
        match self {
            TaskError::WrongSender => Code::WrongTaskSender,
            TaskError::NoOpenQuestion => Code::NoOpenQuestion,
        }
    }
}

/// A timeline flag on a recorded message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Flag {
    /// Received after the terminal state (§6.3).
    Late,
    /// From the legitimate sender, but the diagram has no edge for it here (G-WP-7).
    Ignored,
}

impl Flag {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Flag::Late => "late",
            Flag::Ignored => "ignored",
        }
    }
}

/// The timers of §6.1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Timer {
    /// No accept within `accept_timeout_s` of the request's `received_at`.
    AcceptTimeout,
    /// No accept, progress or input within `progress_timeout_s`.
    ProgressTimeout,
    /// `max_duration_s` after the accept.
    MaxDuration,
    /// The request's `expires_at`.
    Expiry,
    /// 60 s after a cancel the worker did not acknowledge.
    CancelGrace,
}

impl Timer {
    /// Every timer.
    pub const ALL: [Timer; 5] = [
        Timer::AcceptTimeout,
        Timer::ProgressTimeout,
        Timer::MaxDuration,
        Timer::Expiry,
        Timer::CancelGrace,
    ];

    /// The timer whose wire name ([`Timer::as_str`]) is `s`.
    pub fn from_wire(s: &str) -> Option<Timer> {
        Timer::ALL.into_iter().find(|t| t.as_str() == s)
    }

    /// The wire name, used in timelines and notices.
    pub fn as_str(self) -> &'static str {
        match self {
            Timer::AcceptTimeout => "accept_timeout",
            Timer::ProgressTimeout => "progress_timeout",
            Timer::MaxDuration => "max_duration",
            Timer::Expiry => "expires_at",
            Timer::CancelGrace => "cancel_grace",
        }
    }
}

/// The limits a task.request set (§5.2 `constraints`, `expires_at`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskLimits {
    /// Seconds to wait for an accept.
    pub accept_timeout_s: i64,
    /// Seconds allowed between accept, progress and input.
    pub progress_timeout_s: i64,
    /// Seconds from accept to the end, if bounded.
    pub max_duration_s: Option<i64>,
    /// The request's expiry.
    pub expires_at: Timestamp,
}

impl TaskLimits {
    /// Reads the limits from a request's `data` and its effective `expires_at`, applying §5.2's
    /// defaults.
    pub fn from_request(data: &serde_json::Value, expires_at: Timestamp) -> TaskLimits {
        let c = |name: &str| {
            data.pointer(&format!("/constraints/{name}"))
                .and_then(|v| v.as_i64())
        };
        TaskLimits {
            accept_timeout_s: c("accept_timeout_s").unwrap_or(DEFAULT_ACCEPT_TIMEOUT_S),
            progress_timeout_s: c("progress_timeout_s").unwrap_or(DEFAULT_PROGRESS_TIMEOUT_S),
            max_duration_s: c("max_duration_s"),
            expires_at,
        }
    }
}

/// The state machine's view of a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Task {
    /// The current state.
    pub state: TaskState,
    /// The limits from the request.
    pub limits: TaskLimits,
    /// The request's `received_at`.
    pub received_at: Timestamp,
    /// When the recipient accepted.
    pub accepted_at: Option<Timestamp>,
    /// The last accept, progress or input, from which the progress timeout counts.
    pub last_activity: Option<Timestamp>,
    /// When a cancel was persisted, while waiting for the worker's answer or the grace.
    pub cancel_requested_at: Option<Timestamp>,
}

/// What a message or timer did to a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// The state before.
    pub from: TaskState,
    /// The state after (equal to `from` when nothing changed).
    pub to: TaskState,
    /// A timeline flag, when the message changed nothing for a reason worth recording.
    pub flag: Option<Flag>,
    /// The timer that fired, for timer outcomes (recorded with `actor: system`, §6.1).
    pub timer: Option<Timer>,
    /// Whether this message started a cancel that waits for the worker or the grace.
    pub cancel_requested: bool,
}

impl Task {
    /// A task whose request was persisted at `received_at`.
    pub fn new(limits: TaskLimits, received_at: Timestamp) -> Task {
        Task {
            state: TaskState::Submitted,
            limits,
            received_at,
            accepted_at: None,
            last_activity: None,
            cancel_requested_at: None,
        }
    }

    fn outcome(&self, to: TaskState, flag: Option<Flag>) -> Outcome {
        Outcome {
            from: self.state,
            to,
            flag,
            timer: None,
            cancel_requested: false,
        }
    }

    /// Applies a lifecycle message from `sender`, persisted at `at`.
    pub fn apply(
        &mut self,
        event: TaskEvent,
        sender: Sender,
        at: Timestamp,
    ) -> Result<Outcome, TaskError> {
        use TaskEvent as E;
        use TaskState as S;
        // §6.2 first: who may send what, whatever the state.
        let allowed = match event {
            E::Accept | E::Progress | E::NeedsInput | E::Result { .. } | E::Error => {
                sender.recipient
            }
            E::Input => sender.requester,
            E::Cancel => sender.requester || sender.admin,
        };
        if !allowed {
            return Err(TaskError::WrongSender);
        }
        // §6.3: after the terminal state, record and deliver, change nothing.
        if self.state.is_terminal() {
            return Ok(self.outcome(self.state, Some(Flag::Late)));
        }
        let current = self.state;
        let stay = |flag| (current, flag);
        let (to, flag) = match (self.state, event) {
            (S::Submitted, E::Accept) => {
                self.accepted_at = Some(at);
                self.last_activity = Some(at);
                (S::Accepted, None)
            }
            (_, E::Accept) => stay(Some(Flag::Ignored)),

            (S::Accepted | S::InProgress, E::Progress) => {
                self.last_activity = Some(at);
                (S::InProgress, None)
            }
            // §6.2: recorded, does not resume; the progress timer stays paused.
            (S::NeedsInput, E::Progress) => stay(None),
            (S::Submitted, E::Progress) => stay(Some(Flag::Ignored)),

            (S::Accepted | S::InProgress, E::NeedsInput) => (S::NeedsInput, None),
            (S::NeedsInput, E::NeedsInput) => stay(None),
            (S::Submitted, E::NeedsInput) => stay(Some(Flag::Ignored)),

            (S::NeedsInput, E::Input) => {
                self.last_activity = Some(at);
                (S::InProgress, None)
            }
            (_, E::Input) => return Err(TaskError::NoOpenQuestion),

            (
                S::Submitted,
                E::Result {
                    status: ResultStatus::Rejected,
                    ..
                },
            ) => (S::Rejected, None),
            (S::Submitted, E::Result { .. }) => stay(Some(Flag::Ignored)),
            (
                _,
                E::Result {
                    status: ResultStatus::Rejected,
                    ..
                },
            ) => stay(Some(Flag::Ignored)),
            (
                _,
                E::Result {
                    status: ResultStatus::Succeeded,
                    ..
                },
            ) => (S::Succeeded, None),
            (
                _,
                E::Result {
                    status: ResultStatus::Failed,
                    cancelled,
                },
            ) => {
                if cancelled && self.cancel_requested_at.is_some() {
                    (S::Cancelled, None)
                } else {
                    (S::Failed, None)
                }
            }

            (_, E::Error) => stay(None),

            (S::Submitted, E::Cancel) => (S::Cancelled, None),
            (_, E::Cancel) => {
                let first = self.cancel_requested_at.is_none();
                if first {
                    self.cancel_requested_at = Some(at);
                }
                let mut o = self.outcome(self.state, None);
                o.cancel_requested = first;
                return Ok(o);
            }

            // Terminal states returned above.
            (_, _) => stay(None),
        };
        let o = self.outcome(to, flag);
        self.state = to;
        Ok(o)
    }

    /// Every timer that applies in the current state, with its deadline.
    pub fn deadlines(&self) -> Vec<(Timestamp, Timer)> {
        let mut out = Vec::new();
        if self.state.is_terminal() {
            return out;
        }
        out.push((self.limits.expires_at, Timer::Expiry));
        match self.state {
            TaskState::Submitted => out.push((
                self.received_at.plus_secs(self.limits.accept_timeout_s),
                Timer::AcceptTimeout,
            )),
            TaskState::Accepted | TaskState::InProgress => {
                if let Some(last) = self.last_activity {
                    out.push((
                        last.plus_secs(self.limits.progress_timeout_s),
                        Timer::ProgressTimeout,
                    ));
                }
            }
            _ => {}
        }
        if let (Some(accepted), Some(max)) = (self.accepted_at, self.limits.max_duration_s) {
            out.push((accepted.plus_secs(max), Timer::MaxDuration));
        }
        if let Some(cancel) = self.cancel_requested_at {
            out.push((cancel.plus_secs(CANCEL_GRACE_S), Timer::CancelGrace));
        }
        out
    }

    /// The earliest pending deadline, which a store can index to find due tasks cheaply.
    pub fn next_deadline(&self) -> Option<Timestamp> {
        self.deadlines().into_iter().map(|(t, _)| t).min()
    }

    /// Fires the earliest timer due at `now`, if any: a timer fires once its deadline is reached.
    pub fn fire_due(&mut self, now: Timestamp) -> Option<Outcome> {
        let (deadline, timer) = self.deadlines().into_iter().min_by_key(|(t, _)| *t)?;
        if deadline > now {
            return None;
        }
        let to = match timer {
            Timer::CancelGrace => TaskState::Cancelled,
            _ => TaskState::Expired,
        };
        let mut o = self.outcome(to, None);
        o.timer = Some(timer);
        self.state = to;
        Some(o)
    }
}
