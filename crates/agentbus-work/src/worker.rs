//! The worker loop: one per agent. It takes the task requests the agent's card admits, starts the
//! harness on each (up to a concurrency), and turns what the harness does into the task's
//! lifecycle (§6): `task.accept` when the harness starts, `task.progress` heartbeats from its
//! activity (none while the task is `needs_input`, §5.7a), `task.needs_input` for its questions
//! and the requester's `task.input` back, then `task.result` with the harness's usage
//! (`reported_by: harness`, §5.5). A `task.cancel` interrupts the running turn through the
//! adapter (§6.2) and ends the task `failed` with `failure.code: "cancelled"`, which the gateway
//! records as `cancelled`.
//!
//! Nothing here is remembered between runs but what the gateway knows: on start, every task this
//! agent works that is still in flight was left by a run that ended, and is failed with a reason
//! (`worker_restarted`, retryable) rather than left silent.

use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

use agentbus_client::agent::{Extra, Feed, Quiet, TERMINAL, TaskAction};
use agentbus_client::inbox::Received;
use agentbus_client::{Agent, ClientError};
use agentbus_local::Store;
use agentbus_protocol::schema::KnownType;
use agentbus_protocol::timestamp::Timestamp;
use agentbus_runtime::Clock;

use crate::adapter::{Adapter, Answer, Control, Event, Finish, Running, result_files};
use crate::error::WorkError;
use crate::job::{Job, Usage};

/// The gateway's own agents (`agent://system/gateway/tasks` writes timer notices).
const GATEWAY: &str = "agent://system/gateway/";

/// The states of a task a worker is working (§6).
pub const IN_FLIGHT: [&str; 3] = ["accepted", "in_progress", "needs_input"];

/// `task.result.summary` is at most this long (§5.5).
const SUMMARY_MAX: usize = 10_000;
/// `task.progress.note` is at most this long (§5.4).
const NOTE_MAX: usize = 2_000;

/// How a worker works.
#[derive(Debug, Clone)]
pub struct Settings {
    /// How many tasks run at once; later requests wait (still `submitted`) for a free slot.
    pub concurrency: usize,
    /// The least time between two heartbeats of one task; activity in between sends none.
    pub heartbeat: Duration,
    /// The capabilities (`name`, major version) to serve; empty: every one on the card.
    pub capabilities: Vec<(String, String)>,
    /// Where each task's working folder is made (`<dir>/<tsk id>/`).
    pub work_dir: PathBuf,
}

/// What the worker reports as it goes: one JSON object per event (`event`, `task_id`, …).
pub type Notify = Arc<dyn Fn(Value) + Send + Sync>;

/// A worker for one agent.
pub struct Worker {
    shared: Arc<Shared>,
    local: Store,
    settings: Settings,
}

/// What every task of a worker uses.
struct Shared {
    agent: Agent,
    adapter: Arc<dyn Adapter>,
    clock: Arc<dyn Clock>,
    heartbeat_ms: i64,
    notify: Notify,
    /// The clarifying messages sent (`msg_` id → `tsk_` id), so that replies reach their task.
    clarifying: std::sync::Mutex<HashMap<String, String>>,
}

/// What reaches a running task from the requester (or the worker itself).
#[derive(Debug)]
enum Inbound {
    Gone(String),
    Answer(Answer),
    Message(String),
    Cancel,
    Stop,
}

/// Why a turn was interrupted.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Halt {
    Cancel,
    Stop,
    /// The gateway ended the task on its own (a timer): nothing more is sent for it.
    Gone,
}

impl Worker {
    /// A worker for `agent`, receiving into the local store `local`, driving `adapter`.
    pub fn new(
        agent: Agent,
        local: Store,
        adapter: Arc<dyn Adapter>,
        settings: Settings,
        clock: Arc<dyn Clock>,
        notify: Notify,
    ) -> Worker {
        let heartbeat_ms = settings.heartbeat.as_millis() as i64;
        Worker {
            shared: Arc::new(Shared {
                agent,
                adapter,
                clock,
                heartbeat_ms,
                notify,
                clarifying: std::sync::Mutex::new(HashMap::new()),
            }),
            local,
            settings,
        }
    }

    /// Works tasks until `stop` completes; then interrupts every running turn and fails its task
    /// as `worker_stopped` (retryable), so none is left silent.
    pub async fn run(&self, stop: impl Future<Output = ()>) -> Result<(), WorkError> {
        let agent = &self.shared.agent;
        let agent_dir = agent.profiles.agent_dir(&agent.profile.agent_id);
        let _lock = work_lock(&agent_dir, &agent.profile.address)?;
        let admitted = self.admitted().await?;
        self.recover().await?;
        let mut feed = Feed::new(agent, self.local.clone());
        let mut seen = HashSet::new();
        let mut jobs: HashMap<String, mpsc::UnboundedSender<Inbound>> = HashMap::new();
        let mut queue: VecDeque<Job> = VecDeque::new();
        let (done_tx, mut done_rx) = mpsc::unbounded_channel::<String>();
        tokio::pin!(stop);
        loop {
            feed.take_over()?;
            if let Err(e) = self.scan(&mut seen, &mut jobs, &mut queue, &admitted).await {
                self.note(json!({"event": "error", "message": e.to_string()}));
            }
            while let Ok(id) = done_rx.try_recv() {
                jobs.remove(&id);
            }
            while jobs.len() < self.settings.concurrency.max(1)
                && let Some(job) = queue.pop_front()
            {
                let (tx, rx) = mpsc::unbounded_channel();
                jobs.insert(job.task_id.clone(), tx);
                tokio::spawn(work(self.shared.clone(), job, rx, done_tx.clone()));
            }
            tokio::select! {
                _ = &mut stop => break,
                Some(id) = done_rx.recv() => { jobs.remove(&id); }
                r = feed.step(Duration::from_secs(1)) => if let Err(e) = r {
                    self.note(json!({"event": "error", "message": e.to_string()}));
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
        for tx in jobs.values() {
            let _ = tx.send(Inbound::Stop);
        }
        while !jobs.is_empty() {
            match done_rx.recv().await {
                Some(id) => {
                    jobs.remove(&id);
                }
                None => break,
            }
        }
        Ok(())
    }

    fn note(&self, v: Value) {
        (self.shared.notify)(v)
    }

    /// The capabilities served, each with its card's `output_schema`: the card's, narrowed to
    /// the settings' list.
    async fn admitted(&self) -> Result<HashMap<(String, String), Option<Value>>, WorkError> {
        let agent = &self.shared.agent;
        let card = agent.gw.agent(&agent.profile.agent_id).await?;
        let mut declared = HashMap::new();
        for c in &card.capabilities {
            let key = (
                c["name"].as_str().unwrap_or_default().to_owned(),
                c["version"].as_str().unwrap_or("1").to_owned(),
            );
            declared.insert(key, c.get("output_schema").cloned());
        }
        let list = |m: &HashMap<(String, String), Option<Value>>| {
            let mut v: Vec<String> = m.keys().map(|(n, v)| format!("{n}@{v}")).collect();
            v.sort();
            v.join(", ")
        };
        let nothing = |why: String| WorkError::NothingToServe {
            agent: agent.profile.address.clone(),
            why,
        };
        if declared.is_empty() {
            return Err(nothing(
                "its card declares none (agentbus card edit --capability name@major)".into(),
            ));
        }
        if self.settings.capabilities.is_empty() {
            return Ok(declared);
        }
        let mut chosen = HashMap::new();
        for key in &self.settings.capabilities {
            match declared.get(key) {
                Some(schema) => {
                    chosen.insert(key.clone(), schema.clone());
                }
                None => {
                    return Err(nothing(format!(
                        "{}@{} is not on its card, which declares {}",
                        key.0,
                        key.1,
                        list(&declared)
                    )));
                }
            }
        }
        Ok(chosen)
    }

    /// Fails every task this agent works that a previous run left in flight.
    async fn recover(&self) -> Result<(), WorkError> {
        let agent = &self.shared.agent;
        let mut stale = Vec::new();
        for state in IN_FLIGHT {
            stale.extend(
                agent
                    .gw
                    .tasks_received(&agent.profile.agent_id, state)
                    .await?,
            );
        }
        for t in stale {
            let id = t.id.as_str();
            let action = TaskAction::Fail {
                code: "worker_restarted".into(),
                message: "the worker working this task stopped before it finished (it was killed or crashed) and has restarted; the harness turn was lost, so the task can be sent again".into(),
                retryable: true,
            };
            let acted = agent
                .act_with(id, action, &[], &Quiet, Extra::default())
                .await?;
            self.note(json!({"event": "recovered", "task_id": acted.task_id, "sent": acted.verb}));
        }
        Ok(())
    }

    /// Looks at what arrived since the last scan: new requests are queued (or rejected), cancels
    /// and answers go to their running task.
    async fn scan(
        &self,
        seen: &mut HashSet<String>,
        jobs: &mut HashMap<String, mpsc::UnboundedSender<Inbound>>,
        queue: &mut VecDeque<Job>,
        admitted: &HashMap<(String, String), Option<Value>>,
    ) -> Result<(), WorkError> {
        let agent = &self.shared.agent;
        let inbox = agent.inbox();
        let mut fresh: Vec<(String, Received)> = Vec::new();
        for key in inbox.keys()? {
            if seen.contains(&key) {
                continue;
            }
            if let Some(r) = inbox.get(&key)? {
                fresh.push((key, r));
            } else {
                seen.insert(key);
            }
        }
        if fresh.is_empty() {
            return Ok(());
        }
        fresh.sort_by_key(|(_, r)| r.sequence);
        let request = KnownType::TaskRequest.as_str();
        let tasks: HashMap<String, agentbus_api::TaskView> =
            if fresh.iter().any(|(_, r)| r.attr("type") == Some(request)) {
                // Only requests still waiting for a worker are worked.
                agent
                    .gw
                    .tasks_received(&agent.profile.agent_id, "submitted")
                    .await?
                    .into_iter()
                    .map(|t| (t.request_id.clone(), t))
                    .collect()
            } else {
                HashMap::new()
            };
        let work_root = &self.settings.work_dir;
        for (key, r) in fresh {
            let task_of = |r: &Received| {
                r.envelope
                    .get("data")
                    .and_then(|d| d.get("task_id"))
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned()
            };
            let kind = r.attr("type").filter(|t| *t == request || r.held.is_none());
            match kind {
                Some(t) if t == request => {
                    let Some(task) = tasks.get(r.id()) else {
                        seen.insert(key);
                        continue; // worked before, or ended already
                    };
                    let task_id = task.id.clone();
                    if let Some(why) = &r.held {
                        // Held from the agent's sessions (§13.1), so from its harness too.
                        let action = TaskAction::Reject {
                            reason: "policy".into(),
                            summary: Some(format!("The request was not worked: {why}")),
                        };
                        agent
                            .act_with(&task_id, action, &[], &Quiet, Extra::default())
                            .await?;
                        self.note(json!({"event": "rejected", "task_id": task_id}));
                        seen.insert(key);
                        continue;
                    }
                    let cap = (
                        r.attr("capability").unwrap_or_default().to_owned(),
                        r.attr("capability_version").unwrap_or_default().to_owned(),
                    );
                    match admitted.get(&cap) {
                        Some(schema) => {
                            let job = Job::from_request(&r, &task_id, schema.clone(), work_root);
                            self.note(
                                json!({"event": "queued", "task_id": task_id, "capability": cap.0}),
                            );
                            queue.push_back(job);
                        }
                        None => {
                            let mut served: Vec<String> =
                                admitted.keys().map(|(n, v)| format!("{n}@{v}")).collect();
                            served.sort();
                            let action = TaskAction::Reject {
                                reason: "capability_unsupported".into(),
                                summary: Some(format!(
                                    "This worker serves {}; not {}@{}.",
                                    served.join(", "),
                                    cap.0,
                                    cap.1
                                )),
                            };
                            let acted = agent
                                .act_with(&task_id, action, &[], &Quiet, Extra::default())
                                .await?;
                            self.note(json!({"event": "rejected", "task_id": acted.task_id}));
                        }
                    }
                }
                Some(t) if t == KnownType::TaskCancel.as_str() => {
                    let task_id = task_of(&r);
                    if let Some(tx) = jobs.get(&task_id) {
                        let _ = tx.send(Inbound::Cancel);
                    }
                    // A task cancelled while it waits for a slot was cancelled at once (§6).
                    queue.retain(|j| j.task_id != task_id);
                }
                Some(t) if t == KnownType::Message.as_str() => {
                    // A reply to a clarifying question goes to the task that asked it (§7).
                    let task = r
                        .attr("correlation_id")
                        .and_then(|c| self.shared.clarifying.lock().ok()?.get(c).cloned());
                    if let Some(task_id) = task
                        && let Some(tx) = jobs.get(&task_id)
                    {
                        let _ = tx.send(Inbound::Message(crate::job::framed(&r, &task_id)));
                    }
                    // The gateway's notice that it ended a running task (§6.1: an expiry): its
                    // turn is stopped, since no result can change the task any more (§6.3).
                    let noticed = r
                        .envelope
                        .get("data")
                        .and_then(|d| d.pointer("/context/task_id"))
                        .and_then(Value::as_str)
                        .filter(|_| r.attr("source").is_some_and(|s| s.starts_with(GATEWAY)));
                    if let Some(task_id) = noticed
                        && let Some(tx) = jobs.get(task_id)
                    {
                        let task = agent.gw.task(task_id).await?;
                        if TERMINAL.contains(&task.state.as_str()) {
                            let _ = tx.send(Inbound::Gone(task.state));
                        }
                    }
                }
                Some(t) if t == KnownType::TaskInput.as_str() => {
                    let task_id = task_of(&r);
                    if let Some(tx) = jobs.get(&task_id) {
                        // The answer is the requester's data (§13.1): a model gets it framed, never
                        // as its user's words.
                        let _ = tx.send(Inbound::Answer(crate::job::answer(&r, &task_id)));
                    }
                }
                _ => {}
            }
            seen.insert(key);
        }
        Ok(())
    }
}

/// Holds `<agent dir>/work.lock`: one worker per agent.
fn work_lock(agent_dir: &Path, address: &str) -> Result<std::fs::File, WorkError> {
    let io = |e: std::io::Error| WorkError::Io {
        path: agent_dir.join("work.lock").display().to_string(),
        why: e.to_string(),
    };
    std::fs::create_dir_all(agent_dir).map_err(io)?;
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(agent_dir.join("work.lock"))
        .map_err(io)?;
    match f.try_lock() {
        Ok(()) => Ok(f),
        Err(std::fs::TryLockError::WouldBlock) => Err(WorkError::AlreadyRunning {
            agent: address.to_owned(),
        }),
        Err(std::fs::TryLockError::Error(e)) => Err(io(e)),
    }
}

/// Works one task and says when it is done.
async fn work(
    shared: Arc<Shared>,
    job: Job,
    inbound: mpsc::UnboundedReceiver<Inbound>,
    done: mpsc::UnboundedSender<String>,
) {
    let span = turn_span(&shared, &job);
    let mut task = Task {
        shared: shared.clone(),
        job,
        accepted: false,
        pace: Pace::new(shared.heartbeat_ms),
        usage: None,
        started: shared.clock.now(),
        span,
    };
    if let Err(e) = task.drive(inbound).await {
        use agentbus_protocol::errors::Catalogued as _;
        task.span.fail(&e.code().to_string(), &e.to_string());
        (shared.notify)(
            json!({"event": "error", "task_id": task.job.task_id, "message": e.to_string()}),
        );
    }
    if let Some(u) = &task.usage {
        use agentbus_telemetry::{KeyValue, semconv as sc};
        task.span.set(KeyValue::new(
            sc::GEN_AI_USAGE_INPUT_TOKENS,
            u.input_tokens as i64,
        ));
        task.span.set(KeyValue::new(
            sc::GEN_AI_USAGE_OUTPUT_TOKENS,
            u.output_tokens as i64,
        ));
        if let Some(m) = &u.model {
            task.span
                .set(KeyValue::new(sc::GEN_AI_REQUEST_MODEL, m.clone()));
        }
        if let Some(p) = &u.provider {
            task.span
                .set(KeyValue::new(sc::GEN_AI_PROVIDER_NAME, p.clone()));
        }
    }
    let task_id = std::mem::take(&mut task.job.task_id);
    std::mem::replace(&mut task.span, agentbus_telemetry::Span::none()).end();
    let _ = done.send(task_id);
}

/// The span of a harness turn (an agent invocation in the GenAI conventions), child of the
/// request's `traceparent`: the task's lifecycle messages are sent under it.
fn turn_span(shared: &Shared, job: &Job) -> agentbus_telemetry::Span {
    use agentbus_telemetry::{KeyValue, Parent, SpanKind, semconv as sc};
    let tracer = agentbus_telemetry::global();
    if !tracer.is_on() {
        return agentbus_telemetry::Span::none();
    }
    let request = shared.agent.inbox().get(&job.request_id).ok().flatten();
    let attr = |n: &str| request.as_ref().and_then(|r| r.attr(n)).map(str::to_owned);
    let traceparent = attr("traceparent").unwrap_or_default();
    let address = shared.agent.profile.address.clone();
    let mut attrs = vec![
        KeyValue::new(sc::GEN_AI_OPERATION_NAME, "invoke_agent"),
        KeyValue::new(sc::GEN_AI_AGENT_NAME, address.clone()),
        KeyValue::new(sc::GEN_AI_PROVIDER_NAME, shared.adapter.name().to_owned()),
        KeyValue::new(sc::TASK_ID, job.task_id.clone()),
        KeyValue::new(sc::MESSAGING_MESSAGE_ID, job.request_id.clone()),
    ];
    if let Some(c) = attr("conversation_id") {
        attrs.push(KeyValue::new(sc::GEN_AI_CONVERSATION_ID, c));
    }
    tracer.start(
        format!("invoke_agent {address}"),
        SpanKind::Internal,
        Parent::Traceparent(&traceparent),
        attrs,
    )
}

/// One task being worked.
struct Task {
    shared: Arc<Shared>,
    job: Job,
    accepted: bool,
    pace: Pace,
    usage: Option<Usage>,
    started: Timestamp,
    /// The turn's span (empty when telemetry is off).
    span: agentbus_telemetry::Span,
}

impl Task {
    async fn drive(
        &mut self,
        mut inbound: mpsc::UnboundedReceiver<Inbound>,
    ) -> Result<(), ClientError> {
        let mut running = match self.shared.adapter.start(&self.job) {
            Ok(r) => r,
            Err(e) => {
                return self.fail("harness_unavailable", &e.to_string(), true).await;
            }
        };
        loop {
            tokio::select! {
                ev = running.events.recv() => {
                    let Some(ev) = ev else {
                        return self.finish(&running, Event::Exited { why: "the adapter ended without a result".into() }).await;
                    };
                    match ev {
                        Event::Started { session } => {
                            let note = session.map(|s| format!("{} session {s}", self.shared.adapter.name()));
                            self.accept(note).await?;
                        }
                        Event::Activity { note } => self.heartbeat(note).await?,
                        Event::Question { question, options } => {
                            self.accept(None).await?;
                            self.pace.pause();
                            self.act(TaskAction::NeedsInput { question, options }, &[], Extra::default()).await?;
                        }
                        Event::Clarify { text } => {
                            // §7: the task stays in progress and heartbeats go on.
                            self.accept(None).await?;
                            let sent = self.act(TaskAction::Clarify { text }, &[], Extra::default()).await?;
                            if let Ok(mut c) = self.shared.clarifying.lock() {
                                c.insert(sent, self.job.task_id.clone());
                            }
                        }
                        Event::Usage(u) => self.usage.get_or_insert_with(Usage::default).add(&u),
                        end => return self.finish(&running, end).await,
                    }
                }
                m = inbound.recv() => match m {
                    Some(Inbound::Answer(a)) => {
                        if self.pace.paused() {
                            self.pace.resume(self.shared.clock.now());
                            let _ = running.control.send(Control::Answer(a));
                        }
                    }
                    Some(Inbound::Message(text)) => {
                        let _ = running.control.send(Control::Message(text));
                    }
                    Some(Inbound::Cancel) => {
                        (self.shared.notify)(json!({"event": "interrupting", "task_id": self.job.task_id}));
                        return self.halt(&mut running, Halt::Cancel).await;
                    }
                    Some(Inbound::Gone(state)) => {
                        (self.shared.notify)(json!({"event": "ended", "task_id": self.job.task_id, "state": state}));
                        return self.halt(&mut running, Halt::Gone).await;
                    }
                    Some(Inbound::Stop) | None => return self.halt(&mut running, Halt::Stop).await,
                }
            }
        }
    }

    /// Ends the task on the harness's last event, then ends what is left of the harness's
    /// process group (a background process of a finished turn does not outlive its task).
    async fn finish(&mut self, running: &Running, last: Event) -> Result<(), ClientError> {
        let sent = self.end(None, last).await;
        if running.end_group(&*self.shared.clock).await {
            self.killed();
        }
        sent
    }

    /// Stops the running turn (§6.2) and its process group, then ends the task for `halt`:
    /// within the graces of [`Running::halt`], whatever the harness's children do, since the
    /// requester waits for the answer to its cancel.
    async fn halt(&mut self, running: &mut Running, halt: Halt) -> Result<(), ClientError> {
        let halted = running.halt(&*self.shared.clock).await;
        if halted.killed {
            self.killed();
        }
        let mut last = Event::Interrupted;
        for ev in halted.events {
            match ev {
                Event::Usage(u) => self.usage.get_or_insert_with(Usage::default).add(&u),
                end if end.is_end() => last = end,
                _ => {}
            }
        }
        self.end(Some(halt), last).await
    }

    /// Says that a process of the harness's group outlived SIGTERM and was killed.
    fn killed(&self) {
        (self.shared.notify)(json!({"event": "killed", "task_id": self.job.task_id}));
    }

    /// Sends `task.accept` once.
    async fn accept(&mut self, note: Option<String>) -> Result<(), ClientError> {
        if self.accepted {
            return Ok(());
        }
        self.accepted = true;
        self.pace.resume(self.shared.clock.now());
        self.act(
            TaskAction::Accept {
                estimate_s: None,
                note,
            },
            &[],
            Extra::default(),
        )
        .await
        .map(drop)
    }

    /// A `task.progress` for the harness's activity, unless one went out less than the heartbeat
    /// setting ago or the task waits for its requester (§5.7a).
    async fn heartbeat(&mut self, note: String) -> Result<(), ClientError> {
        if !self.accepted || !self.pace.beat(self.shared.clock.now()) {
            return Ok(());
        }
        let note = (!note.is_empty()).then(|| note.chars().take(NOTE_MAX).collect());
        let mut extra = Extra::default();
        if let Some(u) = &self.usage {
            extra.data.insert("usage_delta".into(), u.to_json());
        }
        self.act(
            TaskAction::Progress {
                percent: None,
                stage: None,
                note,
            },
            &[],
            extra,
        )
        .await
        .map(drop)
    }

    /// Ends the task on the harness's last event.
    async fn end(&mut self, halt: Option<Halt>, last: Event) -> Result<(), ClientError> {
        match (halt, last) {
            (Some(Halt::Cancel), _) => {
                self.fail(
                    "cancelled",
                    "cancelled by the requester; the harness turn was interrupted",
                    false,
                )
                .await
            }
            (Some(Halt::Gone), _) => Ok(()),
            (Some(Halt::Stop), _) => {
                self.fail(
                    "worker_stopped",
                    "the worker was stopped while working this task; the harness turn was interrupted",
                    true,
                )
                .await
            }
            (None, Event::Finished(f)) => self.complete(f).await,
            (None, Event::Failed { code, message }) => self.fail(&code, &message, false).await,
            (None, Event::Interrupted) => {
                self.fail("harness_interrupted", "the harness turn was interrupted", true)
                    .await
            }
            (None, Event::Exited { why }) => self.fail("harness_crashed", &why, true).await,
            (None, other) => {
                self.fail("harness_protocol", &format!("unexpected {other:?}"), true)
                    .await
            }
        }
    }

    /// `task.result` `succeeded`, the output checked against the output schema first.
    async fn complete(&mut self, f: Finish) -> Result<(), ClientError> {
        self.accept(None).await?;
        if let Some(schema) = &self.job.output_schema
            && let Err(why) = check_output(schema, f.output.as_ref())
        {
            return self.fail("output_invalid", &why, true).await;
        }
        let files = result_files(f.files, &self.job);
        let summary = f.summary.map(|s| s.chars().take(SUMMARY_MAX).collect());
        let action = TaskAction::Complete {
            summary,
            output: f.output,
        };
        match self.act(action, &files, self.result_extra()).await {
            Err(ClientError::Attachment { path, why }) => {
                let m = format!(
                    "the harness named {} for the result, which cannot be read: {why}",
                    path.display()
                );
                self.fail("attachment_unreadable", &m, true).await
            }
            r => r.map(drop),
        }
    }

    /// `task.result` `failed`.
    async fn fail(
        &mut self,
        code: &str,
        message: &str,
        retryable: bool,
    ) -> Result<(), ClientError> {
        // A result before the accept has no edge and would be ignored (§6): the task was taken,
        // so it is accepted first, and its failure is on record.
        self.accept(None).await?;
        let action = TaskAction::Fail {
            code: code.to_owned(),
            message: message.chars().take(SUMMARY_MAX).collect(),
            retryable,
        };
        self.act(action, &[], self.result_extra()).await.map(drop)
    }

    /// A result's `usage` (the envelope's and `data`'s), `cost` and `duration_ms` (§5.5).
    fn result_extra(&self) -> Extra {
        let mut data = Map::new();
        let elapsed = self.shared.clock.now().millis() - self.started.millis();
        data.insert("duration_ms".into(), json!(elapsed.max(0)));
        let Some(u) = &self.usage else {
            return Extra {
                usage: None,
                data,
                traceparent: None,
            };
        };
        data.insert("usage".into(), u.to_json());
        if let Some(c) = u.cost() {
            data.insert("cost".into(), c);
        }
        Extra {
            usage: Some(u.to_json()),
            data,
            traceparent: None,
        }
    }

    async fn act(
        &mut self,
        action: TaskAction,
        files: &[PathBuf],
        mut extra: Extra,
    ) -> Result<String, ClientError> {
        extra.traceparent = self.span.traceparent();
        // A failed result's event names why, so that the worker's log says it.
        let failure = match &action {
            TaskAction::Fail { code, message, .. } => Some((code.clone(), message.clone())),
            _ => None,
        };
        let acted = self
            .shared
            .agent
            .act_with(&self.job.task_id, action, files, &Quiet, extra)
            .await?;
        let mut event = json!({"event": "sent", "task_id": acted.task_id, "type": acted.verb, "id": acted.sent.id()});
        if let Some((code, message)) = failure {
            event["status"] = json!("failed");
            event["code"] = json!(code);
            event["message"] = json!(message);
        }
        (self.shared.notify)(event);
        {
            use agentbus_telemetry::{KeyValue, semconv as sc};
            let r = &acted.sent.receipt.body;
            let mut attrs = vec![
                KeyValue::new(sc::TASK_ACTOR, self.shared.agent.profile.address.clone()),
                KeyValue::new(sc::TASK_LATE, r.late.unwrap_or(false)),
                KeyValue::new(sc::MESSAGING_MESSAGE_ID, acted.sent.id().to_owned()),
            ];
            if let Some(state) = &r.task_state {
                attrs.push(KeyValue::new(sc::TASK_STATE, state.clone()));
            }
            self.span.event("task.transition", attrs);
        }
        Ok(acted.sent.id().to_owned())
    }
}

/// When a task's heartbeats go out: at most one per interval, counted from the last one (or the
/// accept, or the answer that ended a pause), and none while the task waits for its requester
/// (§5.7a).
#[derive(Debug, Clone)]
pub struct Pace {
    every_ms: i64,
    last: Option<Timestamp>,
    paused: bool,
}

impl Pace {
    /// At most one heartbeat per `every_ms`.
    pub fn new(every_ms: i64) -> Pace {
        Pace {
            every_ms,
            last: None,
            paused: false,
        }
    }

    /// The task waits for its requester: no heartbeats until [`Pace::resume`].
    pub fn pause(&mut self) {
        self.paused = true;
    }

    /// Whether heartbeats are paused.
    pub fn paused(&self) -> bool {
        self.paused
    }

    /// The task goes on at `now` (accepted, or answered): the interval starts again.
    pub fn resume(&mut self, now: Timestamp) {
        self.paused = false;
        self.last = Some(now);
    }

    /// Whether activity at `now` sends a heartbeat; if so, it counts as the last one.
    pub fn beat(&mut self, now: Timestamp) -> bool {
        if self.paused {
            return false;
        }
        if let Some(last) = self.last
            && now.millis() - last.millis() < self.every_ms
        {
            return false;
        }
        self.last = Some(now);
        true
    }
}

/// Checks a result's output against the request's output schema (draft 2020-12, nothing fetched).
pub fn check_output(schema: &Value, output: Option<&Value>) -> Result<(), String> {
    let Some(out) = output else {
        return Err("the harness's answer holds no JSON object, and the request asks for an output that passes its output_schema".into());
    };
    let v = jsonschema::draft202012::options()
        .build(schema)
        .map_err(|e| format!("the request's output_schema does not compile: {e}"))?;
    let errors: Vec<String> = v.iter_errors(out).take(3).map(|e| e.to_string()).collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "the harness's output does not pass the request's output_schema: {}",
            errors.join("; ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentbus_runtime::ManualClock;

    #[test]
    fn wp_5_7a_2_heartbeats_are_paced_and_paused_in_needs_input() {
        let clock = ManualClock::new(Timestamp(1_764_504_000_000));
        let mut pace = Pace::new(30_000);
        pace.resume(clock.now()); // accepted
        assert!(!pace.beat(clock.now()), "the accept was the last heartbeat");
        clock.advance_ms(30_000);
        assert!(pace.beat(clock.now()));
        clock.advance_ms(10_000);
        assert!(
            !pace.beat(clock.now()),
            "less than the interval since the last one"
        );
        clock.advance_ms(60_000);
        pace.pause();
        assert!(
            !pace.beat(clock.now()),
            "none while the task is needs_input"
        );
        clock.advance_ms(600_000);
        assert!(!pace.beat(clock.now()));
        pace.resume(clock.now()); // the task.input
        clock.advance_ms(30_000);
        assert!(pace.beat(clock.now()));
    }

    #[test]
    fn outputs_are_checked_against_the_output_schema() {
        let schema = json!({"type": "object", "required": ["findings"], "properties": {"findings": {"type": "array"}}});
        assert!(check_output(&schema, Some(&json!({"findings": []}))).is_ok());
        let why = check_output(&schema, Some(&json!({"findings": 3}))).unwrap_err();
        assert!(why.contains("does not pass"), "{why}");
        assert!(
            check_output(&schema, None)
                .unwrap_err()
                .contains("no JSON object")
        );
        let bad = check_output(&json!({"type": 5}), Some(&json!({}))).unwrap_err();
        assert!(bad.contains("does not compile"), "{bad}");
    }
}
