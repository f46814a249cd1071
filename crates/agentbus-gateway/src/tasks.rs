//! Tasks (§6): records created by `task.request`, changed only by persisted lifecycle envelopes
//! and by the gateway's own timers, through the protocol crate's state machine.
//!
//! A lifecycle message is checked and applied while its task's lock is held, and the new task row
//! is written in the same transaction as the message, so the timeline and the stored envelopes
//! always agree.

use std::sync::Arc;

use axum::extract::State;
use axum::http::HeaderMap;
use serde::Deserialize;
use serde_json::{Value, json};

use agentbus_api as api;
use agentbus_protocol::Code;
use agentbus_protocol::envelope::Envelope;
use agentbus_protocol::ids::IdKind;
use agentbus_protocol::schema::KnownType;
use agentbus_protocol::task::{Outcome, Sender, Task, TaskEvent, TaskLimits, TaskState, Timer};
use agentbus_protocol::timestamp::Timestamp;
use agentbus_store::*;

use crate::access::bearer;
use crate::error::{ApiError, ApiResult};
use crate::extract::{Json, Path, Query};
use crate::roles::administers;
use crate::state::{App, Principal};

fn ts(t: Option<Timestamp>) -> Value {
    t.map_or(Value::Null, |t| json!(t.millis()))
}

fn machine_json(t: &Task) -> String {
    json!({
        "state": t.state.as_str(),
        "accept_timeout_s": t.limits.accept_timeout_s,
        "progress_timeout_s": t.limits.progress_timeout_s,
        "max_duration_s": t.limits.max_duration_s,
        "expires_at": t.limits.expires_at.millis(),
        "received_at": t.received_at.millis(),
        "accepted_at": ts(t.accepted_at),
        "last_activity": ts(t.last_activity),
        "cancel_requested_at": ts(t.cancel_requested_at),
    })
    .to_string()
}

/// The state machine's fields of a stored task (§6): its limits and timers.
pub fn machine_of(row: &TaskRow) -> Task {
    let v: Value = serde_json::from_str(&row.machine).unwrap_or(Value::Null);
    let t = |k: &str| v[k].as_i64().map(Timestamp);
    Task {
        state: row.state.parse().unwrap_or(TaskState::Submitted),
        limits: TaskLimits {
            accept_timeout_s: v["accept_timeout_s"].as_i64().unwrap_or(120),
            progress_timeout_s: v["progress_timeout_s"].as_i64().unwrap_or(900),
            max_duration_s: v["max_duration_s"].as_i64(),
            expires_at: t("expires_at").unwrap_or(Timestamp(i64::MAX)),
        },
        received_at: t("received_at").unwrap_or(Timestamp(row.created_at)),
        accepted_at: t("accepted_at"),
        last_activity: t("last_activity"),
        cancel_requested_at: t("cancel_requested_at"),
    }
}

fn with_machine(mut row: TaskRow, m: &Task, at: i64) -> TaskRow {
    row.state = m.state.as_str().to_owned();
    row.terminal = m.state.is_terminal();
    row.machine = machine_json(m);
    row.next_deadline = m.next_deadline().map(Timestamp::millis);
    row.updated_at = at;
    row
}

fn event(
    at: i64,
    actor: String,
    envelope_id: Option<String>,
    kind: &str,
    o: &Outcome,
) -> TaskEventRow {
    TaskEventRow {
        at,
        actor,
        envelope_id,
        kind: kind.to_owned(),
        from_state: o.from.as_str().to_owned(),
        to_state: o.to.as_str().to_owned(),
        flag: o.flag.map(|f| f.as_str().to_owned()),
        timer: o.timer.map(|t| t.as_str().to_owned()),
        warnings: None,
        reason: None,
    }
}

/// How many times a change to a task is decided again when another replica changed the task
/// between the read and the write, before the request answers AB-9010 ([`kept_changing`]). Each
/// try loses only to a change another replica committed during it; were each try an even chance
/// against a writer that never pauses, sixteen would refuse about 1 request in 65,000.
pub(crate) const DECIDE_TRIES: usize = 16;

/// The refusal of a change to `task_id` that found it changed by another replica on every try of
/// [`DECIDE_TRIES`]: busy, retry; nothing was stored.
pub(crate) fn kept_changing(task_id: &str) -> ApiError {
    let mut e = ApiError::new(
        Code::StoreBusy,
        format!(
            "task {task_id} changed on another gateway replica under each of {DECIDE_TRIES} tries; nothing was stored"
        ),
    );
    e.retry_after = Some(1);
    e
}

/// What a task message contributes to its publish: the task id for the receipt, the write for the
/// store, and the lock to hold until the publish commits.
pub struct TaskEffect {
    /// The task the message belongs to.
    pub task_id: String,
    /// The change to store with the message.
    pub write: TaskWrite,
    /// Held until the message is stored.
    pub _guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

/// Checks a task message against its task and computes its effect (§5.2, §6.2, §6.3, §7).
/// `recipient` is the message's one resolved agent recipient (`None` for a topic).
///
/// A request must name a capability the recipient declares, with an `input` that passes its
/// schema. A lifecycle message is checked in this order: its sender is a party §6.2 allows (AB-2004;
/// a task the sender is not a party of answers alike whether or not it exists), `correlation_id` is
/// the request (AB-3017), `conversation_id` is the task's (AB-3023), `to` is the counterpart
/// (AB-4014), and then the state machine (AB-4020).
pub async fn effect(
    app: &App,
    sender: &AgentRow,
    env: &Envelope,
    recipient: Option<&AgentRow>,
    now: i64,
) -> ApiResult<Option<TaskEffect>> {
    let Some(kind) = env.known_type() else {
        return Ok(None);
    };
    let id = env.id().unwrap_or_default().to_owned();
    let actor = format!("agent:{}", sender.id);
    if kind == KnownType::TaskRequest {
        let recipient = recipient.ok_or_else(|| {
            ApiError::new(Code::TaskToTopic, "a task.request has one agent recipient")
        })?;
        crate::capabilities::check_request(recipient, env)?;
        let data = env.data().cloned().unwrap_or(Value::Null);
        let expires_at = env
            .expires_at()
            .unwrap_or(Timestamp(now + app.config.default_expiry_s * 1000));
        let machine = Task::new(TaskLimits::from_request(&data, expires_at), Timestamp(now));
        let task_id = app.mint(IdKind::Task);
        let row = with_machine(
            TaskRow {
                id: task_id.clone(),
                tenant_id: sender.tenant_id.clone(),
                workspace_id: sender.workspace_id.clone(),
                requester_id: sender.id.clone(),
                recipient_id: recipient.id.clone(),
                request_id: id.clone(),
                conversation_id: env.conversation_id().unwrap_or_default().to_owned(),
                capability: env.capability().unwrap_or_default().to_owned(),
                state: String::new(),
                terminal: false,
                machine: String::new(),
                next_deadline: None,
                created_at: now,
                updated_at: now,
                version: 0,
            },
            &machine,
            now,
        );
        let ev = TaskEventRow {
            at: now,
            actor,
            envelope_id: Some(id),
            kind: kind.as_str().to_owned(),
            from_state: String::new(),
            to_state: TaskState::Submitted.as_str().to_owned(),
            flag: None,
            timer: None,
            warnings: None,
            reason: None,
        };
        return Ok(Some(TaskEffect {
            task_id,
            write: TaskWrite::Create(row, ev),
            _guard: None,
        }));
    }
    if !kind.is_task_followup() {
        return Ok(None);
    }
    let data = env.data().cloned().unwrap_or(Value::Null);
    let task_id = env.task_id().unwrap_or_default().to_owned();
    let not_a_party = || {
        ApiError::new(
            Code::WrongTaskSender,
            format!("§6.2: {task_id} is not a task you are a party of"),
        )
    };
    let guard = app.task_locks.lock(&task_id).await;
    let row = app
        .store
        .task(&task_id)
        .await?
        .filter(|t| t.tenant_id == sender.tenant_id)
        .filter(|t| t.requester_id == sender.id || t.recipient_id == sender.id)
        .ok_or_else(not_a_party)?;
    let party = Sender {
        requester: row.requester_id == sender.id,
        recipient: row.recipient_id == sender.id,
        admin: false,
    };
    let ev = TaskEvent::from_message(kind, &data)
        .ok_or_else(|| ApiError::new(Code::DataInvalid, "unreadable task message"))?;
    // The state machine runs on a copy first: its sender rule (§6.2) answers before the
    // addressing rules below, its state rule (AB-4020) after them.
    let mut machine = machine_of(&row);
    let applied = machine.apply(ev, party, Timestamp(now));
    if let Err(e @ agentbus_protocol::task::TaskError::WrongSender) = applied {
        return Err(ApiError::new(e.code(), e.to_string()));
    }
    if env.correlation_id() != Some(row.request_id.as_str()) {
        return Err(ApiError::new(
            Code::TaskMismatch,
            format!(
                "correlation_id must be the task.request's id {} (§7)",
                row.request_id
            ),
        ));
    }
    if env.conversation_id() != Some(row.conversation_id.as_str()) {
        return Err(ApiError::new(
            Code::TaskConversation,
            format!(
                "the lifecycle messages of {task_id} belong to its conversation {} (§7)",
                row.conversation_id
            ),
        ));
    }
    // §6.2, §7: between the parties only; the requester's input and cancel go to the worker, the
    // worker's messages to the requester. One agent that is both parties addresses itself.
    let counterpart = if matches!(kind, KnownType::TaskInput | KnownType::TaskCancel) {
        &row.recipient_id
    } else {
        &row.requester_id
    };
    if recipient.map(|r| r.id.as_str()) != Some(counterpart.as_str()) {
        return Err(ApiError::new(
            Code::TaskCounterpart,
            format!(
                "a {} of {task_id} goes to the task's {} (§6.2)",
                kind.as_str(),
                if counterpart == &row.requester_id {
                    "requester"
                } else {
                    "recipient"
                }
            ),
        ));
    }
    let outcome = applied.map_err(|e| ApiError::new(e.code(), e.to_string()))?;
    let mut ev = event(now, actor, Some(id), kind.as_str(), &outcome);
    if kind == KnownType::TaskResult && data["status"] == "succeeded" {
        let warnings = result_warnings(app, &row, &data).await?;
        if !warnings.is_empty() {
            ev.warnings = Some(Value::Array(warnings).to_string());
        }
    }
    let expected = row.version;
    let new_row = with_machine(row, &machine, now);
    Ok(Some(TaskEffect {
        task_id,
        write: TaskWrite::Update(new_row, expected, ev),
        _guard: Some(guard),
    }))
}

/// G-WP-37: a result's `output` against the capability's `output_schema` (from the worker's card)
/// and the request's `constraints.output_schema`. Advisory: the findings go on the timeline and
/// the result is applied all the same.
async fn result_warnings(app: &App, row: &TaskRow, data: &Value) -> ApiResult<Vec<Value>> {
    let Some(request) = find_request(app, row).await? else {
        return Ok(Vec::new());
    };
    let attrs: serde_json::Map<String, Value> =
        serde_json::from_str(&request.attrs).unwrap_or_default();
    let version = attrs
        .get("capability_version")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let card: serde_json::Map<String, Value> = match app.agent_row(&row.recipient_id).await? {
        Some(worker) => serde_json::from_str(&worker.card).unwrap_or_default(),
        None => serde_json::Map::new(),
    };
    let capability = crate::capabilities::declared(&card, &row.capability, version);
    let key = app.tenant_key(&row.tenant_id).await?;
    let request_data: Value = key
        .open(&request.data)
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or(Value::Null);
    Ok(crate::capabilities::output_warnings(
        capability,
        request_data.get("constraints"),
        data.get("output"),
    ))
}

/// A reaper pass's task timers (§6.1): fires each due timer, recorded with `actor: system`, each
/// commit marking the notices §6.1 names as owed; the pass sends them later
/// (`owed::send_task_notices`). Returns how many tasks changed.
pub async fn fire_due(app: &App) -> ApiResult<usize> {
    let now = app.now();
    let mut changed = 0;
    let due = app.store.due_tasks(now, 1000).await?;
    // Tasks are independent: handled together, their commits share the writer's group commits.
    for chunk in due.chunks(128) {
        let results =
            futures_util::future::join_all(chunk.iter().map(|t| fire(app, &t.id, now))).await;
        for r in results {
            changed += usize::from(r?);
        }
    }
    Ok(changed)
}

/// The parties a fired timer owes a notice (§6.1): the requester alone when the task expired
/// before an accept, both parties after one, none for the cancel grace (the cancel told them).
fn owed_by(o: &Outcome) -> u8 {
    match o.timer {
        None | Some(Timer::CancelGrace) => 0,
        Some(_) if o.from == TaskState::Submitted => OWED_REQUESTER,
        Some(_) => OWED_REQUESTER | OWED_RECIPIENT,
    }
}

/// The bits of a task's owed notices that an admin's cancel marks ([`apply_admin_cancel`]).
pub(crate) const CANCEL_BITS: u8 = OWED_CANCEL_REQUESTER | OWED_CANCEL_RECIPIENT;

/// Fires the due timer of one task, if it is still due; returns whether it changed.
async fn fire(app: &App, id: &str, now: i64) -> ApiResult<bool> {
    let _guard = app.task_locks.lock(id).await;
    let Some(row) = app.store.task(id).await? else {
        return Ok(false);
    };
    let mut machine = machine_of(&row);
    let Some(outcome) = machine.fire_due(Timestamp(now)) else {
        return Ok(false);
    };
    let expected = row.version;
    let new_row = with_machine(row.clone(), &machine, now);
    let ev = event(now, "system".into(), None, "timer", &outcome);
    match app
        .store
        .update_task(new_row, expected, ev, owed_by(&outcome))
        .await
    {
        Ok(()) => {
            if app.tracer.is_on() {
                trace_timer(app, &row, &outcome).await;
            }
            Ok(true)
        }
        Err(StoreError::Conflict(_)) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// A span for a timer that fired on task `row` (§6.1), in its request's trace: the change is
/// the task's, caused by no envelope. A request that cannot be read costs the span, not the
/// firing.
async fn trace_timer(app: &App, row: &TaskRow, outcome: &Outcome) {
    use agentbus_telemetry::{KeyValue, Parent, SpanKind, semconv as sc};
    let traceparent = match find_request(app, row).await {
        Ok(Some(m)) => serde_json::from_str::<Value>(&m.attrs).ok().and_then(|a| {
            a.get("traceparent")
                .and_then(Value::as_str)
                .map(str::to_owned)
        }),
        _ => None,
    };
    let Some(traceparent) = traceparent else {
        return;
    };
    let timer = outcome.timer.map(|t| t.as_str()).unwrap_or("timer");
    let mut span = app.tracer.start(
        "timer",
        SpanKind::Internal,
        Parent::Traceparent(&traceparent),
        vec![
            KeyValue::new(sc::MESSAGING_SYSTEM, sc::SYSTEM),
            KeyValue::new(sc::MESSAGING_OPERATION_NAME, "timer"),
            KeyValue::new(sc::TASK_ID, row.id.clone()),
            KeyValue::new(sc::TIMER, timer),
            KeyValue::new(sc::TASK_STATE, outcome.to.as_str()),
            KeyValue::new(sc::MESSAGING_CONVERSATION_ID, row.conversation_id.clone()),
        ],
    );
    span.event(
        "fired",
        vec![
            KeyValue::new("agentbus.task.from", outcome.from.as_str()),
            KeyValue::new(sc::TASK_STATE, outcome.to.as_str()),
        ],
    );
    span.end();
}

/// The type of a cancel on the timeline, the requester's or an admin's.
pub(crate) const CANCEL_KIND: &str = "agentbus.task.cancel.v1";

/// The timeline actor of a user (an admin cancelling through the console): `user:<usr_ id>`.
pub(crate) const ADMIN_ACTOR: &str = "user:";

/// Applies an admin's cancel to task `id` as it is now, the cancel route's first half: the
/// change, with the `task.cancel` notices it owes both parties marked in its commit and its
/// `reason` on its timeline entry. [`cancel`] then sends them; a reaper pass sends any it did
/// not (`owed::send_task_notices`). Decided again, as a lifecycle message is, when another
/// replica changed the task between the read and the write. It checks nothing of `user`: the route checks
/// the admin's scope, the task's visibility and the reason's bound first (public for the tests,
/// which stop the route here).
#[doc(hidden)]
pub async fn apply_admin_cancel(
    app: &App,
    user: &UserRow,
    id: &str,
    reason: Option<&str>,
) -> ApiResult<Outcome> {
    for _ in 0..DECIDE_TRIES {
        let _guard = app.task_locks.lock(id).await;
        let now = app.now();
        let row = app.store.task(id).await?.ok_or_else(ApiError::not_found)?;
        let mut machine = machine_of(&row);
        let outcome = machine
            .apply(TaskEvent::Cancel, Sender::ADMIN, Timestamp(now))
            .map_err(|e| ApiError::new(e.code(), e.to_string()))?;
        let expected = row.version;
        let mut ev = event(
            now,
            format!("{ADMIN_ACTOR}{}", user.id),
            None,
            CANCEL_KIND,
            &outcome,
        );
        ev.reason = reason.map(str::to_owned);
        match app
            .store
            .update_task(with_machine(row, &machine, now), expected, ev, CANCEL_BITS)
            .await
        {
            Err(StoreError::Conflict(_)) => {}
            done => return done.map(|()| outcome).map_err(ApiError::from),
        }
    }
    Err(kept_changing(id))
}

pub(crate) async fn find_request(app: &App, row: &TaskRow) -> ApiResult<Option<MessageRow>> {
    let Some(requester) = app.store.agent(&row.requester_id).await? else {
        return Ok(None);
    };
    let source = app.address_of(&requester).await?;
    Ok(app
        .store
        .recent_message(&row.tenant_id, &source, &row.request_id, 0)
        .await?)
}

/// A task as `GET /v1/tasks/{id}` answers it: state, parties, constraints, timeline.
pub async fn task_view(app: &App, row: &TaskRow) -> ApiResult<api::TaskView> {
    let m = machine_of(row);
    let party = |id: &str| {
        let id = id.to_owned();
        async move {
            let address = match app.store.agent(&id).await? {
                Some(a) => Some(app.address_of(&a).await?),
                None => None,
            };
            Ok::<_, ApiError>(api::AgentRef { id, address })
        }
    };
    let timeline = app
        .store
        .task_events(&row.id)
        .await?
        .into_iter()
        .map(|e| api::TimelineEvent {
            at: Timestamp(e.at).to_string(),
            late: e.flag.as_deref() == Some("late"),
            ignored: e.flag.as_deref() == Some("ignored"),
            warnings: e
                .warnings
                .as_deref()
                .and_then(|w| serde_json::from_str::<Value>(w).ok())
                .unwrap_or_else(|| json!([])),
            actor: e.actor,
            envelope_id: e.envelope_id,
            kind: e.kind,
            from: e.from_state,
            to: e.to_state,
            timer: e.timer,
            reason: e.reason,
        })
        .collect();
    Ok(api::TaskView {
        id: row.id.clone(),
        state: row.state.clone(),
        capability: row.capability.clone(),
        request_id: row.request_id.clone(),
        conversation_id: row.conversation_id.clone(),
        requester: party(&row.requester_id).await?,
        recipient: party(&row.recipient_id).await?,
        constraints: api::Constraints {
            accept_timeout_s: m.limits.accept_timeout_s,
            progress_timeout_s: m.limits.progress_timeout_s,
            max_duration_s: m.limits.max_duration_s,
            expires_at: m.limits.expires_at.to_string(),
        },
        next_deadline: row.next_deadline.map(|t| Timestamp(t).to_string()),
        created_at: Timestamp(row.created_at).to_string(),
        updated_at: Timestamp(row.updated_at).to_string(),
        timeline,
        cancel_requested: None,
    })
}

/// Whether `who` may read a task: its parties, and admins whose scope covers the workspace of
/// either party.
async fn may_read(app: &App, who: &Principal, row: &TaskRow) -> ApiResult<bool> {
    Ok(match who {
        Principal::Agent(a) => {
            a.tenant_id == row.tenant_id && (a.id == row.requester_id || a.id == row.recipient_id)
        }
        Principal::User(_) => {
            administers(who, &row.tenant_id, &row.workspace_id)
                || match app.agent_row(&row.recipient_id).await? {
                    Some(r) => administers(who, &r.tenant_id, &r.workspace_id),
                    None => false,
                }
        }
    })
}

/// Task routes take an agent's credential or an admin's token; a member's or the operator's is
/// refused whatever task it names.
fn reader(who: &Principal) -> ApiResult<()> {
    match who {
        Principal::Agent(_) => Ok(()),
        user => crate::roles::admin(user.clone()).map(drop),
    }
}

/// The task `id` if `who` may read it (its parties, and admins whose scope covers a party), else
/// exactly what an unknown id gets (AB-4012); a member or the operator is refused from its role
/// (AB-1002).
pub async fn readable(app: &App, who: &Principal, id: &str) -> ApiResult<TaskRow> {
    reader(who)?;
    let unknown = || ApiError::new(Code::UnknownTask, "no such task");
    let row = app.store.task(id).await?.ok_or_else(unknown)?;
    if may_read(app, who, &row).await? {
        Ok(row)
    } else {
        Err(unknown())
    }
}

/// `GET /v1/tasks/{id}`: state, parties, constraints and the timeline, to the task's parties and
/// the admins whose scope covers a party; anyone else gets what an unknown id gets.
pub async fn get(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<Json<api::TaskView>> {
    let who = bearer(&app, &headers).await?;
    let row = readable(&app, &who, &id).await?;
    Ok(Json(task_view(&app, &row).await?))
}

/// The most characters of a cancel's `reason`: what the `task.cancel` notice it becomes may carry
/// (§5, its schema's `maxLength`).
const MAX_CANCEL_REASON: usize = 2000;

/// The body of `POST /v1/tasks/{id}/cancel`: nothing, or `{"reason"?: string}`; anything else is
/// refused before the task is touched ([`cancel`] bounds the reason's length).
fn cancel_reason(body: &[u8]) -> ApiResult<Option<String>> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    let c: api::CancelTask = crate::extract::parse_json(body)?;
    Ok(c.reason)
}

/// `POST /v1/tasks/{id}/cancel` `{reason?}`: an admin whose scope covers a party cancels a task
/// through the console (§5.7, §6.2): see [`cancel`].
pub async fn admin_cancel(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    crate::extract::Body(body): crate::extract::Body,
) -> ApiResult<Json<api::TaskView>> {
    // The credential first, as every route decides (docs/security.md), then the body.
    let who = bearer(&app, &headers).await?;
    let reason = cancel_reason(&body)?;
    let (row, requested) = cancel(&app, &who, &id, reason).await?;
    let mut out = task_view(&app, &row).await?;
    out.cancel_requested = Some(requested);
    Ok(Json(out))
}

/// The console's cancel (§5.7, §6.2: "a workspace admin through the console"), for an admin whose
/// scope covers a party; the same function serves `POST /v1/tasks/{id}/cancel`. The gateway
/// records the cancel in the timeline (actor `user:<id>`) and tells both parties with a
/// `task.cancel` notice from `agent://system/gateway/tasks`; the transition follows the same rules
/// as the requester's cancel. Returns the task as it is now and whether the cancel is waiting for
/// the worker (or the grace timer) rather than done.
pub async fn cancel(
    app: &App,
    who: &Principal,
    id: &str,
    reason: Option<String>,
) -> ApiResult<(TaskRow, bool)> {
    let user = match who {
        Principal::Agent(_) => {
            return Err(ApiError::new(
                Code::NotPermitted,
                "agents cancel by sending task.cancel; this endpoint is the console's",
            ));
        }
        Principal::User(u) => u.clone(),
    };
    if crate::roles::admin_scope(who).is_none() {
        return Err(ApiError::new(
            Code::WrongTaskSender,
            "§6.2: only the requester or a workspace admin may cancel a task",
        ));
    }
    let row = readable(app, who, id).await?;
    // Every way in (this route's body, the console's form) meets the one bound here (§5).
    if let Some(n) = reason
        .as_deref()
        .map(|r| r.chars().count())
        .filter(|n| *n > MAX_CANCEL_REASON)
    {
        return Err(ApiError::new(
            Code::InvalidRequest,
            format!(
                "`reason` is {n} characters; at most {MAX_CANCEL_REASON} (the task.cancel schema, §5)"
            ),
        ));
    }
    let outcome = apply_admin_cancel(app, &user, id, reason.as_deref()).await?;
    // The cancel is made: a notice that fails now stays owed for the reaper's next pass, and
    // the admin is answered with the task as it is.
    if let Err(e) = send_cancel_notices(
        app,
        &row,
        &format!("{ADMIN_ACTOR}{}", user.id),
        reason.as_deref(),
        CANCEL_BITS,
    )
    .await
    {
        tracing::warn!(task = %id, code = %e.code, error = %e.message, "an admin cancel's notices were not all sent; the reaper's next pass sends the rest");
    }
    let now_row = app.store.task(id).await?.ok_or_else(ApiError::not_found)?;
    Ok((now_row, outcome.cancel_requested))
}

/// Sends the `task.cancel` notices of an admin's cancel of `row` with `reason` to the parties
/// `owed` names (bits), each stored with the clearing of its mark (none twice); a party deleted
/// since is owed nothing. `actor` is the timeline's `user:<usr_ id>`: the notice names that
/// admin, so neither party reads it as the requester's cancel.
pub(crate) async fn send_cancel_notices(
    app: &App,
    row: &TaskRow,
    actor: &str,
    reason: Option<&str>,
    owed: u8,
) -> ApiResult<()> {
    let original = find_request(app, row).await?;
    let mut data = json!({"task_id": row.id});
    if let Some(r) = reason {
        data["reason"] = json!(r);
    }
    let user_id = actor.strip_prefix(ADMIN_ACTOR).unwrap_or(actor);
    // A user removed since is still named by id: the cancel was theirs all the same.
    let name = match app.store.user(user_id).await? {
        Some(u) => u.name,
        None => user_id.to_owned(),
    };
    data["cancelled_by"] = json!({"role": "admin", "user_id": user_id, "name": name});
    for (party, bit) in [
        (&row.requester_id, OWED_CANCEL_REQUESTER),
        (&row.recipient_id, OWED_CANCEL_RECIPIENT),
    ] {
        if owed & bit == 0 {
            continue;
        }
        let mark = Owed::Task(row.id.clone(), bit);
        let live = app.store.agent(party).await?;
        match live.filter(|a| a.deleted_at.is_none()) {
            Some(a) => {
                let (kind, original) = (CANCEL_KIND, original.as_ref());
                app.notify_owed(&a, "tasks", kind, data.clone(), original, Some(mark))
                    .await?
            }
            None => app.store.forgo_notice(mark).await?,
        }
    }
    Ok(())
}

/// Filters of `GET /v1/tasks`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ListQuery {
    /// Only this state.
    pub state: Option<String>,
    /// Only tasks requested by this `agt_` id.
    pub requester: Option<String>,
    /// Only tasks received by this `agt_` id (the worker).
    pub recipient: Option<String>,
    /// Only tasks for this capability.
    pub capability: Option<String>,
    /// Only tasks after this one in the list: the `next` cursor of the page before.
    pub before: Option<String>,
    /// Most rows (default 100, at most 1000).
    pub limit: Option<u32>,
}

/// A position in a task list: the last task's `<created_at ms>.<id>`.
pub fn task_cursor(t: &TaskRow) -> String {
    format!("{}.{}", t.created_at, t.id)
}

/// The tasks `who` may read that match `q`, newest first: an agent's own, an admin's those of
/// the workspaces it administers (requested from one, or received by an agent of one).
pub async fn visible(app: &App, who: &Principal, q: &ListQuery) -> ApiResult<Vec<TaskRow>> {
    reader(who)?;
    // `input_required` shipped in the command line's help before the protocol's `needs_input`
    // was used everywhere: it is still taken for it.
    let state = match q.state.as_deref() {
        Some("input_required") => Some(TaskState::NeedsInput.as_str().to_owned()),
        s => s.map(str::to_owned),
    };
    if let Some(s) = &state
        && s.parse::<TaskState>().is_err()
    {
        let states: Vec<&str> = TaskState::ALL.iter().map(|s| s.as_str()).collect();
        return Err(ApiError::new(
            Code::InvalidRequest,
            format!("unknown state {s:?}; the states: {}", states.join(", ")),
        ));
    }
    let before = match &q.before {
        None => None,
        Some(c) => Some(
            c.split_once('.')
                .and_then(|(at, id)| Some((at.parse::<i64>().ok()?, id.to_owned())))
                .ok_or_else(|| {
                    ApiError::new(
                        Code::InvalidRequest,
                        "`before` is the `next` cursor of an earlier page",
                    )
                })?,
        ),
    };
    let filter = TaskFilter {
        tenant_id: who.tenant_id().to_owned(),
        state,
        requester_id: q.requester.clone(),
        recipient_id: q.recipient.clone(),
        party_id: match who {
            Principal::Agent(a) => Some(a.id.clone()),
            Principal::User(_) => None,
        },
        limit: q.limit.unwrap_or(100).clamp(1, 1000),
        capability: q.capability.clone(),
        workspace_id: match crate::roles::admin_scope(who) {
            Some(crate::roles::AdminScope::Workspace(w)) => Some(w.to_owned()),
            _ => None,
        },
        before,
    };
    let mut out = Vec::new();
    for row in app.store.tasks(filter).await? {
        if may_read(app, who, &row).await? {
            out.push(row);
        }
    }
    Ok(out)
}

/// `GET /v1/tasks?state=&capability=&requester=&recipient=&before=&limit=`: an agent sees its own
/// tasks, an admin those of the workspaces it administers; `next` continues the list.
pub async fn list(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Query(q): Query<ListQuery>,
) -> ApiResult<Json<api::Tasks>> {
    let who = bearer(&app, &headers).await?;
    let rows = visible(&app, &who, &q).await?;
    let mut tasks = Vec::with_capacity(rows.len());
    for row in &rows {
        tasks.push(task_view(&app, row).await?);
    }
    let full = rows.len() as u32 >= q.limit.unwrap_or(100).clamp(1, 1000);
    let next = full.then(|| rows.last().map(task_cursor)).flatten();
    Ok(Json(api::Tasks { tasks, next }))
}

/// The messages of a task `who` may read (its request, lifecycle messages and notices), in
/// `received_at` order, each with its delivered copy (`data` opened): the task's page draws its
/// progress, usage and cost from them.
pub async fn messages_of(
    app: &App,
    who: &Principal,
    id: &str,
) -> ApiResult<(TaskRow, Vec<(MessageRow, Value)>)> {
    let row = readable(app, who, id).await?;
    let mut out = Vec::new();
    for m in app.store.task_messages(&row.tenant_id, &row.id).await? {
        let env = crate::identity::envelope(app, &m).await?;
        out.push((m, env));
    }
    Ok((row, out))
}
