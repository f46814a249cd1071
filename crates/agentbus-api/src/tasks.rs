//! Task records (§6).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::AgentRef;

/// A task as `GET /v1/tasks/{id}` answers it: state, parties, constraints, timeline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TaskView {
    /// Its `tsk_` id.
    pub id: String,
    /// Its §6 state.
    pub state: String,
    /// The capability requested.
    pub capability: String,
    /// The id of the request that opened it.
    pub request_id: String,
    /// Its conversation.
    pub conversation_id: String,
    /// Who asked.
    pub requester: AgentRef,
    /// Who works it.
    pub recipient: AgentRef,
    /// Its limits.
    pub constraints: Constraints,
    /// When its next timer fires.
    pub next_deadline: Option<String>,
    /// When it was opened.
    pub created_at: String,
    /// When it last changed.
    pub updated_at: String,
    /// What happened to it, oldest first.
    pub timeline: Vec<TimelineEvent>,
    /// Whether this call asked for the cancel (`POST /v1/tasks/{id}/cancel` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel_requested: Option<bool>,
}

/// A task's limits (§6.1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Constraints {
    /// Seconds the recipient has to accept.
    pub accept_timeout_s: i64,
    /// Seconds between progress reports.
    pub progress_timeout_s: i64,
    /// Seconds the work may take.
    pub max_duration_s: Option<i64>,
    /// When the task expires.
    pub expires_at: String,
}

/// One event of a task's timeline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TimelineEvent {
    /// When.
    pub at: String,
    /// Who: an address, or the gateway's timer.
    pub actor: String,
    /// The message that made it.
    pub envelope_id: Option<String>,
    /// That message's type.
    #[serde(rename = "type")]
    pub kind: String,
    /// The state before.
    pub from: String,
    /// The state after.
    pub to: String,
    /// Whether it arrived after the task ended.
    pub late: bool,
    /// Whether the state machine ignored it.
    pub ignored: bool,
    /// The timer that fired.
    pub timer: Option<String>,
    /// The reason given.
    pub reason: Option<String>,
    /// Warnings the message raised.
    pub warnings: Value,
}

/// `GET /v1/tasks`: a page of tasks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Tasks {
    /// The tasks, newest first.
    pub tasks: Vec<TaskView>,
    /// The cursor of the next page (`before`), when there may be one.
    pub next: Option<String>,
}

/// `POST /v1/tasks/{id}/cancel` `{reason?}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct CancelTask {
    /// Why (at most 2000 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}
