//! The agent's verbs over the gateway, one implementation for every front end (the CLI and the
//! MCP server): send, reply, ack, delegate, act on a task (§6.2), trace, and waiting for what
//! arrives (§7). Front ends parse arguments and print; this module composes, uploads, signs,
//! publishes and waits, and returns [`ClientError`] values.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

use agentbus_api as api;

use agentbus_local::Store;
use agentbus_protocol::frame::Transport;
use agentbus_protocol::schema::KnownType;
use agentbus_protocol::signing::SigningKey;
use agentbus_runtime::{Clock, SystemClock};

use crate::compose::{Draft, seal};
use crate::error::{ClientError, Result};
use crate::http::{Gateway, Progress, Receipt};
use crate::inbox::{AgentInbox, Received};
use crate::profile::{Profile, Profiles};
use crate::receive::Receiver;

/// The task states after which nothing changes (§6.1).
pub const TERMINAL: [&str; 5] = ["succeeded", "failed", "rejected", "expired", "cancelled"];

/// One connected agent: its saved profile and a client under its credential.
#[derive(Debug, Clone)]
pub struct Agent {
    /// Saved profiles (where the key and inbox live).
    pub profiles: Profiles,
    /// The agent's profile.
    pub profile: Profile,
    /// A client under its credential.
    pub gw: Gateway,
    /// How the attachments its receivers download are shown (nothing unless a front end says).
    pub downloads: Downloads,
}

/// What was published: the signed envelope and the gateway's receipt.
#[derive(Debug, Clone)]
pub struct Sent {
    /// The envelope as sent.
    pub envelope: Map<String, Value>,
    /// The receipt.
    pub receipt: Receipt,
}

impl Sent {
    /// The sent envelope's `msg_` id.
    pub fn id(&self) -> &str {
        self.envelope
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }

    /// The recipient the envelope names.
    pub fn to(&self) -> &str {
        self.envelope
            .get("to")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }

    /// The receipt with what was sent where: `to`, `type`, `conversation_id`, `replay`.
    pub fn summary(&self) -> Value {
        let mut r = serde_json::to_value(&self.receipt.body).unwrap_or(Value::Null);
        for k in ["to", "type", "conversation_id"] {
            r[k] = self.envelope.get(k).cloned().unwrap_or(Value::Null);
        }
        r["replay"] = json!(self.receipt.replay);
        r
    }
}

/// A `message.v1` to send.
#[derive(Debug, Clone, Default)]
pub struct Message {
    /// An `agent://` address, `agt_` id or `topic://` address.
    pub to: String,
    /// The text.
    pub text: String,
    /// A one-line summary.
    pub subject: Option<String>,
    /// Files to upload and attach (§9).
    pub attach: Vec<PathBuf>,
    /// Ask the recipient for a reply.
    pub expects_reply: bool,
    /// `low`, `normal` or `high` (§2.1): whether it keeps a recipient's session going at the
    /// end of its turn (docs/local.md, "End of turn"); `None` is `normal`.
    pub priority: Option<String>,
}

/// A `task.request.v1` to send.
#[derive(Debug, Clone, Default)]
pub struct Delegation {
    /// The worker.
    pub to: String,
    /// The instructions.
    pub instructions: String,
    /// The capability asked for.
    pub capability: String,
    /// Its major version (default `1`).
    pub capability_version: Option<String>,
    /// Structured input, a JSON object.
    pub input: Option<Value>,
    /// Files to upload and attach.
    pub attach: Vec<PathBuf>,
    /// A one-line summary.
    pub subject: Option<String>,
    /// `constraints.accept_timeout_s`.
    pub accept_timeout_s: Option<u64>,
    /// `constraints.progress_timeout_s`.
    pub progress_timeout_s: Option<u64>,
    /// `constraints.max_duration_s`.
    pub max_duration_s: Option<u64>,
    /// The request expires this long after sending.
    pub expires_in: Option<Duration>,
    /// Makes retries safe: the same key returns the original task (§8). When absent, one is
    /// derived from the delegation itself ([`Delegation::derived_key`]).
    pub idempotency_key: Option<String>,
    /// Send no idempotency key at all: a new task even for a delegation repeated within the
    /// idempotency window.
    pub new_task: bool,
    /// `budget` (§2.1), advisory in v1.
    pub budget: Option<Budget>,
}

/// How long a request stays deliverable when the caller names no expiry: the wire protocol's
/// default message expiry (§6.3, 24 h), sent explicitly so the worker sees it (§5.2).
pub const DEFAULT_TASK_EXPIRY: Duration = Duration::from_secs(24 * 3600);

/// A task's `budget` (§2.1): a maximum amount in a currency.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Budget {
    /// Three upper-case letters (ISO 4217), such as `USD`.
    pub currency: String,
    /// A non-negative decimal string, such as `2.00`.
    pub max: String,
}

impl Budget {
    /// Parses `2.00`, `2.00 USD`, `2.00USD` or `USD 2.00` (the currency defaults to USD).
    pub fn parse(text: &str) -> Result<Budget> {
        let t = text.trim();
        let split = |s: &str| {
            let letters: String = s.chars().filter(char::is_ascii_alphabetic).collect();
            let amount: String = s
                .chars()
                .filter(|c| !c.is_ascii_alphabetic() && !c.is_whitespace())
                .collect();
            (letters, amount)
        };
        let (currency, max) = split(t);
        let currency = if currency.is_empty() {
            "USD".to_owned()
        } else {
            currency
        };
        let ok_currency = currency.len() == 3 && currency.bytes().all(|b| b.is_ascii_uppercase());
        let ok_max = {
            let (whole, frac) = max.split_once('.').unwrap_or((&max, "0"));
            !whole.is_empty()
                && !frac.is_empty()
                && whole.bytes().all(|b| b.is_ascii_digit())
                && frac.bytes().all(|b| b.is_ascii_digit())
        };
        if !ok_currency || !ok_max {
            return Err(ClientError::Invalid(format!(
                "{text:?} is not a budget: write an amount and a currency of three upper-case letters, like 2.00 USD"
            )));
        }
        Ok(Budget { currency, max })
    }

    /// The attribute's value.
    pub fn to_json(&self) -> Value {
        json!({"currency": self.currency, "max": self.max})
    }
}

impl Delegation {
    /// The idempotency key a delegation gets by default: a hash of everything the caller said
    /// (sender, worker, capability, instructions, input, files named, constraints, budget), so
    /// that repeating the same delegation (a retry after a timeout) within the gateway's
    /// idempotency window (§8: 7 days) returns the original task instead of making a second.
    pub fn derived_key(&self, sender: &str) -> String {
        use sha2::Digest as _;
        let said = json!({
            "from": sender,
            "to": self.to,
            "capability": self.capability,
            "capability_version": self.capability_version.as_deref().unwrap_or("1"),
            "instructions": self.instructions,
            "input": self.input,
            "attach": self.attach.iter().map(|p| p.to_string_lossy()).collect::<Vec<_>>(),
            "subject": self.subject,
            "constraints": [self.accept_timeout_s, self.progress_timeout_s, self.max_duration_s],
            "expires_in_ms": self.expires_in.map(|d| d.as_millis() as u64),
            "budget": self.budget.as_ref().map(Budget::to_json),
        });
        let digest = sha2::Sha256::digest(said.to_string().as_bytes());
        format!("cmd-{}", hex::encode(&digest[..16]))
    }
}

/// A delegated task.
#[derive(Debug, Clone)]
pub struct Delegated {
    /// The request as sent.
    pub sent: Sent,
    /// The task's `tsk_` id.
    pub task_id: String,
    /// The request's `msg_` id.
    pub request_id: String,
}

/// What a party does to a task (§6.2): the worker's accept, progress, needs-input, complete,
/// fail and reject; the requester's answer and cancel.
#[derive(Debug, Clone, PartialEq)]
pub enum TaskAction {
    /// The worker accepts.
    Accept {
        /// Estimated duration in seconds.
        estimate_s: Option<u64>,
        /// A note.
        note: Option<String>,
    },
    /// The worker reports progress.
    Progress {
        /// Percent done.
        percent: Option<f64>,
        /// The stage.
        stage: Option<String>,
        /// A note.
        note: Option<String>,
    },
    /// The worker asks the requester a question.
    NeedsInput {
        /// The question.
        question: String,
        /// Fixed choices.
        options: Vec<String>,
    },
    /// The worker finishes successfully.
    Complete {
        /// What was done.
        summary: Option<String>,
        /// The output, a JSON object.
        output: Option<Value>,
    },
    /// The worker finishes as failed.
    Fail {
        /// What went wrong.
        message: String,
        /// A failure code.
        code: String,
        /// Whether retrying could succeed.
        retryable: bool,
    },
    /// The worker refuses.
    Reject {
        /// One of §5.5's rejection reasons.
        reason: String,
        /// A summary.
        summary: Option<String>,
    },
    /// The requester answers the worker's question.
    Answer {
        /// The answer.
        answer: String,
    },
    /// The requester cancels.
    Cancel {
        /// Why.
        reason: Option<String>,
    },
    /// The worker asks the requester something without blocking the task: a `message.v1` in the
    /// task's conversation with `expects_reply` (§7); the task stays in progress.
    Clarify {
        /// The question.
        text: String,
    },
}

/// The sender's span of one message (docs/observability.md), child of the span it continues
/// (the answered message's, or a worker's turn); the envelope's `traceparent` becomes this span,
/// so the gateway's and the receiver's spans are its children. Empty when telemetry is off, and
/// the draft is then left as it was.
fn send_span(draft: &mut Draft, address: &str) -> agentbus_telemetry::Span {
    use agentbus_telemetry::{KeyValue, Parent, SpanKind, semconv as sc};
    let tracer = agentbus_telemetry::global();
    if !tracer.is_on() {
        return agentbus_telemetry::Span::none();
    }
    let parent = draft.answers.clone().or_else(|| draft.traceparent.clone());
    let mut attrs = vec![
        KeyValue::new(sc::MESSAGING_SYSTEM, sc::SYSTEM),
        KeyValue::new(sc::MESSAGING_OPERATION_TYPE, "send"),
        KeyValue::new(sc::MESSAGING_OPERATION_NAME, "send"),
        KeyValue::new(sc::MESSAGING_DESTINATION_NAME, draft.to.clone()),
        KeyValue::new(sc::MESSAGING_CLIENT_ID, address.to_owned()),
        KeyValue::new(sc::MESSAGE_TYPE, draft.kind.as_str().to_owned()),
    ];
    if let Some(c) = &draft.conversation_id {
        attrs.push(KeyValue::new(sc::MESSAGING_CONVERSATION_ID, c.clone()));
        attrs.push(KeyValue::new(sc::GEN_AI_CONVERSATION_ID, c.clone()));
    }
    if tracer.with_subject()
        && let Some(s) = &draft.subject
    {
        attrs.push(KeyValue::new(sc::MESSAGE_SUBJECT, s.clone()));
    }
    let span = tracer.start(
        "send",
        SpanKind::Producer,
        parent.as_deref().map_or(Parent::Root, Parent::Traceparent),
        attrs,
    );
    if let Some(t) = span.traceparent() {
        draft.traceparent = Some(t);
    }
    span
}

/// What a worker measured, sent along with a task action: the envelope's `usage` extension and
/// extra `data` fields (§5.5: `usage`, `cost`, `duration_ms`; §5.4: `usage_delta`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Extra {
    /// The `usage` extension.
    pub usage: Option<Value>,
    /// Fields added to `data`.
    pub data: Map<String, Value>,
    /// The `traceparent` to send under: the caller's span of the work (a worker's harness turn),
    /// so the message is its child in the trace; else the request's is continued.
    pub traceparent: Option<String>,
}

impl TaskAction {
    /// The message type it sends.
    pub fn kind(&self) -> KnownType {
        match self {
            TaskAction::Accept { .. } => KnownType::TaskAccept,
            TaskAction::Progress { .. } => KnownType::TaskProgress,
            TaskAction::NeedsInput { .. } => KnownType::TaskNeedsInput,
            TaskAction::Complete { .. } | TaskAction::Fail { .. } | TaskAction::Reject { .. } => {
                KnownType::TaskResult
            }
            TaskAction::Answer { .. } => KnownType::TaskInput,
            TaskAction::Cancel { .. } => KnownType::TaskCancel,
            TaskAction::Clarify { .. } => KnownType::Message,
        }
    }

    /// Whether the requester sends it (to the worker); the others go to the requester.
    pub fn from_requester(&self) -> bool {
        matches!(self, TaskAction::Answer { .. } | TaskAction::Cancel { .. })
    }

    /// The `data` payload, without `task_id` (added when the task is known).
    fn data(&self) -> Value {
        let mut d = Map::new();
        let mut put = |k: &str, v: Option<Value>| {
            if let Some(v) = v {
                d.insert(k.to_owned(), v);
            }
        };
        match self {
            TaskAction::Accept { estimate_s, note } => {
                put("estimated_duration_s", estimate_s.map(|e| json!(e)));
                put("note", note.as_ref().map(|n| json!(n)));
            }
            TaskAction::Progress {
                percent,
                stage,
                note,
            } => {
                put("percent", percent.map(|p| json!(p)));
                put("stage", stage.as_ref().map(|s| json!(s)));
                put("note", note.as_ref().map(|n| json!(n)));
            }
            TaskAction::NeedsInput { question, options } => {
                put("question", Some(json!(question)));
                put("options", (!options.is_empty()).then(|| json!(options)));
            }
            TaskAction::Complete { summary, output } => {
                put("status", Some(json!("succeeded")));
                put("summary", summary.as_ref().map(|s| json!(s)));
                put("output", output.clone());
            }
            TaskAction::Fail {
                message,
                code,
                retryable,
            } => {
                put("status", Some(json!("failed")));
                put(
                    "failure",
                    Some(json!({"code": code, "message": message, "retryable": retryable})),
                );
            }
            TaskAction::Reject { reason, summary } => {
                put("status", Some(json!("rejected")));
                put("rejection_reason", Some(json!(reason)));
                put("summary", summary.as_ref().map(|s| json!(s)));
            }
            TaskAction::Answer { answer } => put("answer", Some(json!(answer))),
            TaskAction::Cancel { reason } => put("reason", reason.as_ref().map(|r| json!(r))),
            TaskAction::Clarify { text } => {
                put("text", Some(json!(text)));
                put("expects_reply", Some(json!(true)));
            }
        }
        Value::Object(d)
    }
}

/// What a task wait learns as it waits ([`Agent::wait_task`]).
#[derive(Debug, Clone, Copy)]
pub enum TaskNews<'a> {
    /// A lifecycle message of the task arrived (accept, progress, needs-input, …).
    Message(&'a Received),
    /// The task's record, as the gateway has it now.
    Record(&'a api::TaskView),
}

/// A task action that was sent.
#[derive(Debug, Clone)]
pub struct Acted {
    /// The lifecycle message as sent.
    pub sent: Sent,
    /// The task's `tsk_` id.
    pub task_id: String,
    /// The short verb of the message type (`task.accept`, `task.result`, …).
    pub verb: String,
}

/// One of this agent's tasks as `tasks` lists it: the record, the agent's `role` in it and the
/// `verbs` that apply now ([`verbs_now`]).
#[derive(Debug, Clone, serde::Serialize)]
pub struct MyTask {
    /// The task record.
    #[serde(flatten)]
    pub task: api::TaskView,
    /// `requester` or `worker`.
    pub role: &'static str,
    /// The verbs that apply now.
    pub verbs: &'static [&'static str],
    /// Why it failed, for a task that did ([`Failure`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<Failure>,
}

/// Why a task failed or was rejected, or what went wrong in it: the `failure` of a failed
/// `task.result`, the reason of a rejected one, the `code` and `message` of a `task.error`
/// (§5.5, §5.6). Every front end shows it beside the task, since the state alone says no why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Failure {
    /// The failure's code (capability-specific, a rejection reason, or `AB-NNNN`).
    pub code: Option<String>,
    /// What went wrong, in the worker's words.
    pub message: Option<String>,
}

impl Failure {
    /// The failure a message of type `kind` with `data` reports, if it reports one.
    pub fn of(kind: &str, data: &Value) -> Option<Failure> {
        let text = |v: &Value| v.as_str().map(str::to_owned);
        let (code, message) = if kind == KnownType::TaskError.as_str() {
            (text(&data["code"]), text(&data["message"]))
        } else if kind == KnownType::TaskResult.as_str() {
            match data["status"].as_str() {
                Some("failed") => {
                    let f = &data["failure"];
                    (
                        text(&f["code"]),
                        text(&f["message"]).or(text(&data["summary"])),
                    )
                }
                Some("rejected") => (text(&data["rejection_reason"]), text(&data["summary"])),
                _ => return None,
            }
        } else {
            return None;
        };
        (code.is_some() || message.is_some()).then_some(Failure { code, message })
    }

    /// The last failure reported in the conversation of task `task_id`.
    pub fn in_conversation(conversation: &api::Conversation, task_id: &str) -> Option<Failure> {
        conversation.envelopes.iter().rev().find_map(|e| {
            let data = e.get("data")?;
            if data["task_id"].as_str() != Some(task_id) {
                return None;
            }
            Failure::of(e.get("type")?.as_str()?, data)
        })
    }

    /// `code: message` (or whichever of the two it has), on one line.
    pub fn line(&self) -> String {
        let one = |s: &str| agentbus_protocol::text::for_terminal_line(s).into_owned();
        match (&self.code, &self.message) {
            (Some(c), Some(m)) => format!("{}: {}", one(c), one(m)),
            (Some(c), None) => one(c),
            (None, Some(m)) => one(m),
            (None, None) => String::new(),
        }
    }
}

/// The timeline `trace` shows.
#[derive(Debug, Clone)]
pub enum Trace {
    /// A task's record and its conversation (`Null` when it has none).
    Task {
        /// The task record.
        task: api::TaskView,
        /// Its conversation (`None` when it has none).
        conversation: Option<api::Conversation>,
    },
    /// A conversation; for a message sent here, how far it got with each recipient (§5.8
    /// receipts); for one received here, its stored record.
    Conversation {
        /// The conversation.
        conversation: api::Conversation,
        /// `GET /v1/messages/{id}/delivery` of a message this agent sent.
        delivery: Option<api::DeliveryStates>,
        /// The record of a message this agent received.
        received: Option<Box<Received>>,
    },
}

/// Shows the progress of attachment transfers, uploads and downloads alike (the CLI draws a
/// bar; others show nothing).
pub trait TransferProgress: Send + Sync {
    /// Transfer `i` of `name` (`bytes` long) starts.
    fn start(&self, _i: usize, _name: &str, _bytes: u64) {}
    /// A callback that counts the bytes moved, if anything is drawn.
    fn counter(&self) -> Option<Progress> {
        None
    }
    /// The current transfer is done.
    fn done(&self) {}
}

/// Transfers that show nothing.
pub struct Quiet;

impl TransferProgress for Quiet {}

/// What makes the display for the attachments of one received message, given how many there
/// are: the receive path asks for one per message that has any, and drops it when they are in.
#[derive(Clone, Default)]
pub struct Downloads(Option<Arc<MakeDisplay>>);

/// What [`Downloads`] holds: a display for so many files.
type MakeDisplay = dyn Fn(usize) -> Box<dyn TransferProgress> + Send + Sync;

impl Downloads {
    /// Downloads shown by what `make` returns for a message's attachment count.
    pub fn new(make: impl Fn(usize) -> Box<dyn TransferProgress> + Send + Sync + 'static) -> Self {
        Downloads(Some(Arc::new(make)))
    }

    /// The display for `files` downloads ([`Quiet`] unless one was given).
    pub fn open(&self, files: usize) -> Box<dyn TransferProgress> {
        match &self.0 {
            Some(make) => make(files),
            None => Box::new(Quiet),
        }
    }
}

impl std::fmt::Debug for Downloads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Downloads(shown)"
        } else {
            "Downloads(quiet)"
        })
    }
}

/// A media type guessed from a file name's extension.
pub fn media_type(name: &str) -> &'static str {
    let ext = name.rsplit('.').next().unwrap_or("").to_ascii_lowercase();
    match ext.as_str() {
        "txt" | "log" => "text/plain",
        "md" => "text/markdown",
        "json" => "application/json",
        "diff" | "patch" => "text/x-diff",
        "html" => "text/html",
        "csv" => "text/csv",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "pdf" => "application/pdf",
        "gz" | "tgz" => "application/gzip",
        "zip" => "application/zip",
        _ => "application/octet-stream",
    }
}

impl Agent {
    /// The agent of the profile `chosen` (else the only one saved), under its credential.
    pub fn open(chosen: Option<&str>) -> Result<Agent> {
        let profiles = Profiles::open_default()?;
        let profile = profiles.select(chosen)?;
        let gw = Gateway::new(&profile.gateway, &profile.token)?;
        Ok(Agent {
            profiles,
            profile,
            gw,
            downloads: Downloads::default(),
        })
    }

    /// The agent's private key.
    pub fn key(&self) -> Result<SigningKey> {
        self.profiles.read_key(&self.profile)
    }

    /// The agent's local inbox.
    pub fn inbox(&self) -> AgentInbox {
        AgentInbox::new(self.profiles.agent_dir(&self.profile.agent_id))
    }

    /// A receiver for this agent, importing into the local store `local`; it signs the read
    /// receipts it owes (§5.8) with the agent's key.
    pub fn receiver(&self, local: Store) -> Receiver {
        let (profiles, profile) = (self.profiles.clone(), self.profile.clone());
        Receiver::new(
            self.gw.clone(),
            self.profile.clone(),
            self.inbox(),
            local,
            Arc::new(SystemClock),
        )
        .with_signer(Box::new(move || profiles.read_key(&profile)))
        .with_downloads(self.downloads.clone())
    }

    /// Signs and publishes `draft`.
    pub async fn publish(&self, mut draft: Draft) -> Result<Sent> {
        let mut span = send_span(&mut draft, &self.profile.address);
        let key = self.key()?;
        let envelope = seal(draft, &self.profile, &key, SystemClock.now())?;
        if let Some(id) = envelope.get("id").and_then(Value::as_str) {
            span.set(agentbus_telemetry::KeyValue::new(
                agentbus_telemetry::semconv::MESSAGING_MESSAGE_ID,
                id.to_owned(),
            ));
        }
        let receipt = match self.gw.publish(&envelope).await {
            Ok(r) => r,
            Err(e) => {
                use agentbus_protocol::errors::Catalogued as _;
                span.fail(&e.code().to_string(), &e.to_string());
                return Err(e);
            }
        };
        span.event("accepted", Vec::new());
        span.end();
        // Only for `trace <msg id>` of one's own messages: losing it loses nothing else.
        let _ = self.inbox().record_sent(&envelope);
        Ok(Sent { envelope, receipt })
    }

    /// Uploads `files` as blobs and returns their `data.attachments` entries (§9).
    pub async fn upload(
        &self,
        files: &[PathBuf],
        progress: &dyn TransferProgress,
    ) -> Result<Vec<api::Attachment>> {
        let mut out = Vec::new();
        for (i, f) in files.iter().enumerate() {
            let bytes = std::fs::read(f).map_err(|e| ClientError::Attachment {
                path: f.clone(),
                why: e.to_string(),
            })?;
            let name = file_name(f)?;
            progress.start(i, &name, bytes.len() as u64);
            let entry = self
                .gw
                .upload_blob(&name, media_type(&name), bytes, progress.counter())
                .await?;
            progress.done();
            out.push(entry);
        }
        Ok(out)
    }

    /// Sends a `message.v1`.
    pub async fn send(&self, m: Message, progress: &dyn TransferProgress) -> Result<Sent> {
        destination(&m.to)?;
        let mut data = json!({"text": m.text});
        if m.expects_reply {
            data["expects_reply"] = json!(true);
        }
        if !m.attach.is_empty() {
            data["attachments"] = json!(self.upload(&m.attach, progress).await?);
        }
        let mut draft = Draft::new(KnownType::Message, &m.to, data);
        draft.subject = m.subject;
        draft.priority = m.priority;
        self.publish(draft).await
    }

    /// A message received by this agent, by its `msg_` id.
    pub fn received(&self, id: &str) -> Result<Received> {
        self.inbox()
            .get(id)?
            .ok_or_else(|| ClientError::UnknownMessage {
                id: id.to_owned(),
                agent: self.profile.address.clone(),
            })
    }

    /// Replies to a received message: to its `reply_to` (else its `source`), in its
    /// conversation, `correlation_id` = its id (§7).
    pub async fn reply(&self, id: &str, text: &str) -> Result<Sent> {
        let original = self.received(id)?;
        let draft = Draft::new(
            KnownType::Message,
            answerer(&original),
            json!({"text": text}),
        )
        .answering(&original.envelope);
        self.publish(draft).await
    }

    /// Acknowledges a received message (`ack.v1`, §5.8) at `level` (`read` or `processed`).
    pub async fn ack(&self, id: &str, level: &str, note: Option<&str>) -> Result<Sent> {
        let original = self.received(id)?;
        let mut data = json!({"level": level});
        if let Some(n) = note {
            data["note"] = json!(n);
        }
        let draft =
            Draft::new(KnownType::Ack, answerer(&original), data).answering(&original.envelope);
        self.publish(draft).await
    }

    /// Hands a task to a worker (`task.request.v1`).
    pub async fn delegate(
        &self,
        d: Delegation,
        progress: &dyn TransferProgress,
    ) -> Result<Delegated> {
        destination(&d.to)?;
        // §5.2 strongly recommends idempotency_key, expires_at and budget on a request.
        let key = match (&d.idempotency_key, d.new_task) {
            (Some(k), _) => Some(k.clone()),
            (None, false) => Some(d.derived_key(&self.profile.agent_id)),
            (None, true) => None,
        };
        let mut data = json!({"instructions": d.instructions});
        if let Some(i) = d.input {
            if !i.is_object() {
                return Err(ClientError::Invalid(
                    "the task input must be a JSON object".into(),
                ));
            }
            data["input"] = i;
        }
        let mut constraints = Map::new();
        for (k, v) in [
            ("accept_timeout_s", d.accept_timeout_s),
            ("progress_timeout_s", d.progress_timeout_s),
            ("max_duration_s", d.max_duration_s),
        ] {
            if let Some(v) = v {
                constraints.insert(k.into(), json!(v));
            }
        }
        if !constraints.is_empty() {
            data["constraints"] = Value::Object(constraints);
        }
        if !d.attach.is_empty() {
            data["attachments"] = json!(self.upload(&d.attach, progress).await?);
        }
        let mut draft = Draft::new(KnownType::TaskRequest, &d.to, data);
        draft.subject = d.subject;
        draft.capability = Some((
            d.capability,
            d.capability_version.unwrap_or_else(|| "1".into()),
        ));
        draft.idempotency_key = key;
        let expires_in = d.expires_in.unwrap_or(DEFAULT_TASK_EXPIRY);
        draft.expires_at = Some(SystemClock.now().plus_ms(expires_in.as_millis() as i64));
        draft.budget = d.budget.as_ref().map(Budget::to_json);
        let sent = self.publish(draft).await?;
        let receipt = &sent.receipt.body;
        let (task_id, request_id) = (
            receipt.task_id.clone().unwrap_or_default(),
            receipt.id.clone(),
        );
        Ok(Delegated {
            sent,
            task_id,
            request_id,
        })
    }

    /// One page of this agent's tasks, newest first: as `side`, in `state` when given, at most
    /// `limit`, after the cursor `before`. Each task gets `role` (requester or worker) and the
    /// `verbs` that apply now ([`verbs_now`]); the page's `next` cursor comes with it.
    pub async fn tasks(
        &self,
        side: Side,
        state: Option<&str>,
        limit: u32,
        before: Option<&str>,
    ) -> Result<(Vec<MyTask>, Option<String>)> {
        let me = self.profile.agent_id.clone();
        let mut q = vec![("limit", limit.to_string())];
        match side {
            Side::Requester => q.push(("requester", me.clone())),
            Side::Worker => q.push(("recipient", me.clone())),
            Side::Any => {}
        }
        if let Some(s) = state {
            q.push(("state", s.to_owned()));
        }
        if let Some(b) = before {
            q.push(("before", b.to_owned()));
        }
        let page = self.gw.tasks_page(&q).await?;
        let mut tasks = Vec::with_capacity(page.tasks.len());
        for task in page.tasks {
            let role = if task.requester.id == me {
                Side::Requester
            } else {
                Side::Worker
            };
            // The record says that a task failed, its conversation why: read only for those.
            let failure = match task.state.as_str() {
                "failed" | "rejected" if !task.conversation_id.is_empty() => {
                    let c = self.gw.conversation(&task.conversation_id).await?;
                    Failure::in_conversation(&c, &task.id)
                }
                _ => None,
            };
            tasks.push(MyTask {
                verbs: verbs_now(&task.state, role),
                role: if role == Side::Requester {
                    "requester"
                } else {
                    "worker"
                },
                task,
                failure,
            });
        }
        Ok((tasks, page.next))
    }

    /// A task of this agent by its `tsk_` id, its request's `msg_` id, or the `msg_` id of a
    /// message of it received here (a question, a progress report).
    pub async fn find_task(&self, id: &str) -> Result<api::TaskView> {
        if id.starts_with("tsk_") {
            return self.gw.task(id).await;
        }
        if let Some(task) = self.inbox().get(id)?.and_then(|r| {
            r.task
                .clone()
                .or_else(|| Some(r.envelope.get("data")?.get("task_id")?.as_str()?.to_owned()))
        }) {
            return self.gw.task(&task).await;
        }
        self.gw
            .tasks()
            .await?
            .into_iter()
            .find(|t| t.request_id == id)
            .ok_or_else(|| ClientError::UnknownTask {
                id: id.to_owned(),
                agent: self.profile.address.clone(),
            })
    }

    /// Sends a task lifecycle message (§6.2): workers to the requester, requesters to the
    /// worker, always in the task's conversation with `correlation_id` = the request's id.
    pub async fn act(
        &self,
        task_ref: &str,
        action: TaskAction,
        attach: &[PathBuf],
        progress: &dyn TransferProgress,
    ) -> Result<Acted> {
        self.act_with(task_ref, action, attach, progress, Extra::default())
            .await
    }

    /// [`Self::act`] with what the worker measured: `extra.usage` becomes the envelope's `usage`
    /// extension and `extra.data` is merged into `data`.
    pub async fn act_with(
        &self,
        task_ref: &str,
        action: TaskAction,
        attach: &[PathBuf],
        progress: &dyn TransferProgress,
        extra: Extra,
    ) -> Result<Acted> {
        let task = self.find_task(task_ref).await?;
        let (task_id, request_id) = (task.id.clone(), task.request_id.clone());
        let party = if action.from_requester() {
            &task.recipient
        } else {
            &task.requester
        };
        let to = party.address.clone().unwrap_or_default();
        let kind = action.kind();
        let mut data = action.data();
        if kind == KnownType::Message {
            // A clarifying message is no lifecycle message: the task is named in its context.
            data["context"] = json!({"task_id": task_id});
        } else {
            data["task_id"] = json!(task_id);
        }
        for (k, v) in extra.data {
            data[k] = v;
        }
        if kind == KnownType::TaskInput {
            // The question being answered, when it is here.
            let inbox = self.inbox().list()?;
            if let Some(q) = inbox.iter().rev().find(|r| {
                r.attr("type") == Some(KnownType::TaskNeedsInput.as_str())
                    && r.envelope.get("data").and_then(|d| d.get("task_id"))
                        == Some(&json!(task_id))
            }) {
                data["in_reply_to"] = json!(q.id());
            }
        }
        if !attach.is_empty() {
            data["attachments"] = json!(self.upload(attach, progress).await?);
        }
        let mut draft = Draft::new(kind, &to, data);
        draft.conversation_id = Some(task.conversation_id.clone());
        draft.correlation_id = Some(request_id.clone());
        draft.usage = extra.usage;
        if extra.traceparent.is_some() {
            draft.traceparent = extra.traceparent;
        } else if let Some(req) = self.inbox().get(&request_id)? {
            draft.traceparent = req.attr("traceparent").map(str::to_owned);
        }
        let sent = self.publish(draft).await?;
        let verb = kind
            .as_str()
            .trim_start_matches("agentbus.")
            .trim_end_matches(".v1")
            .to_owned();
        Ok(Acted {
            sent,
            task_id,
            verb,
        })
    }

    /// The timeline of a task (`tsk_`), a conversation (`cnv_`), or the conversation of a
    /// message sent or received here (`msg_`).
    pub async fn trace(&self, id: &str) -> Result<Trace> {
        let id = id.trim();
        if id.starts_with("tsk_") {
            let task = self.gw.task(id).await?;
            let conversation = match task.conversation_id.as_str() {
                "" => None,
                c => Some(self.gw.conversation(c).await?),
            };
            return Ok(Trace::Task { task, conversation });
        }
        let (mut delivery, mut received) = (None, None);
        let cnv = if id.starts_with("cnv_") {
            id.to_owned()
        } else if id.starts_with("msg_") {
            let inbox = self.inbox();
            let envelope = match inbox.get(id)? {
                Some(r) => {
                    let envelope = r.envelope.clone();
                    received = Some(Box::new(r));
                    envelope
                }
                None => {
                    let envelope = inbox.sent(id).ok_or_else(|| ClientError::UnknownMessage {
                        id: id.to_owned(),
                        agent: self.profile.address.clone(),
                    })?;
                    delivery = Some(self.gw.delivery(id).await?);
                    envelope
                }
            };
            envelope
                .get("conversation_id")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        } else {
            return Err(ClientError::Invalid(format!(
                "{id:?} is not a tsk_, cnv_ or msg_ id"
            )));
        };
        Ok(Trace::Conversation {
            conversation: self.gw.conversation(&cnv).await?,
            delivery,
            received,
        })
    }

    /// Waits up to `timeout` for the first message whose `correlation_id` is `id` (§7), other
    /// than a read receipt (an `ack.v1` says the message was seen; it is not the reply).
    /// Meanwhile `watch` gets the message's delivery states (§5.8) at most twice a second and
    /// once more at the end; a gateway that cannot tell them stops the watching, not the wait.
    pub async fn wait_reply(
        &self,
        local: &Store,
        id: &str,
        timeout: Duration,
        watch: &mut (dyn FnMut(api::DeliveryStates) + Send),
    ) -> Result<Option<Received>> {
        let mut seen = HashSet::new();
        let mut wait = Wait::new(self, local, timeout);
        let mut look = Some(Instant::now());
        let reply = loop {
            wait.take_over()?;
            if look.is_some_and(|at| Instant::now() >= at) {
                look = self.look_at_delivery(id, watch).await;
            }
            if let Some(r) = self.correlated(id, &mut seen, |r| {
                r.attr("type") != Some(KnownType::Ack.as_str())
            })? {
                break Some(r);
            }
            if !wait.step().await? {
                break None;
            }
        };
        if look.is_some() {
            self.look_at_delivery(id, watch).await;
        }
        Ok(reply)
    }

    /// Hands `id`'s delivery states to `watch`; when to look next, or never again.
    async fn look_at_delivery(
        &self,
        id: &str,
        watch: &mut (dyn FnMut(api::DeliveryStates) + Send),
    ) -> Option<Instant> {
        let d = self.gw.delivery(id).await.ok()?;
        watch(d);
        Some(Instant::now() + Duration::from_millis(500))
    }

    /// Waits up to `timeout` for the task to be terminal; returns its record and the result
    /// message, when the worker sent one (timers and cancels end a task without one). Meanwhile
    /// `watch` gets the news as it comes: each lifecycle message of the task received here
    /// (accept, progress, a question) and the task's record each time it is looked up (about
    /// once a second), so a front end can show the state, percent and last note.
    pub async fn wait_task(
        &self,
        local: &Store,
        task_id: &str,
        request_id: &str,
        timeout: Duration,
        watch: &mut (dyn FnMut(TaskNews<'_>) + Send),
    ) -> Result<Option<(api::TaskView, Option<Received>)>> {
        let mut last_check = Instant::now() - Duration::from_secs(2);
        let mut seen = HashSet::new();
        let mut wait = Wait::new(self, local, timeout);
        let mut result = None;
        loop {
            wait.take_over()?;
            for r in self.fresh_correlated(request_id, &mut seen)? {
                if r.attr("type") == Some(KnownType::TaskResult.as_str()) {
                    result.get_or_insert(r);
                } else {
                    watch(TaskNews::Message(&r));
                }
            }
            // The gateway ends tasks on its own (timers, console cancels): ask it now and then.
            if result.is_some() || last_check.elapsed() >= Duration::from_secs(1) {
                last_check = Instant::now();
                let task = self.gw.task(task_id).await?;
                watch(TaskNews::Record(&task));
                if TERMINAL.contains(&task.state.as_str()) {
                    return Ok(Some((task, result)));
                }
            }
            if !wait.step().await? {
                return Ok(None);
            }
        }
    }

    /// The stored envelopes not looked at before whose `correlation_id` is `id`, oldest first
    /// by inbox sequence; each is looked at once ([`Self::correlated`]).
    fn fresh_correlated(&self, id: &str, seen: &mut HashSet<String>) -> Result<Vec<Received>> {
        let inbox = self.inbox();
        let mut out = Vec::new();
        for key in inbox.keys()? {
            if !seen.insert(key.clone()) {
                continue;
            }
            if let Some(r) = inbox.get(&key)?
                && r.attr("correlation_id") == Some(id)
            {
                out.push(r);
            }
        }
        out.sort_by_key(|r| r.sequence);
        Ok(out)
    }

    /// Finds, among stored envelopes not looked at before, the first whose `correlation_id` is
    /// `id` and that `accept` takes. `seen` remembers what was looked at, so a long wait reads
    /// each file once however large the inbox.
    fn correlated(
        &self,
        id: &str,
        seen: &mut HashSet<String>,
        accept: impl Fn(&Received) -> bool,
    ) -> Result<Option<Received>> {
        let inbox = self.inbox();
        for key in inbox.keys()? {
            if seen.contains(&key) {
                continue;
            }
            let Some(r) = inbox.get(&key)? else {
                seen.insert(key);
                continue;
            };
            if r.attr("correlation_id") == Some(id) && accept(&r) {
                return Ok(Some(r));
            }
            seen.insert(key);
        }
        Ok(None)
    }
}

/// What arrives for an agent, taken the one safe way at each moment. While no other process
/// receives for the agent (a sidecar, a waiting command), this one does, through the one receive
/// path (persist, import, ack), so nothing is lost to either; while one does, this one leaves it
/// to that process and watches the inbox it writes. The worker and every wait use it.
pub struct Feed {
    agent: Agent,
    local: Store,
    lock: Option<std::fs::File>,
    receiver: Option<Receiver>,
}

impl Feed {
    /// A feed for `agent`, importing into the local store `local` when it receives.
    pub fn new(agent: &Agent, local: Store) -> Feed {
        Feed {
            agent: agent.clone(),
            local,
            lock: None,
            receiver: None,
        }
    }

    /// Takes the receive lock if nobody holds it: whoever held it (a sidecar, another waiting
    /// command) may be gone, and what waits must not depend on a process that ended.
    pub fn take_over(&mut self) -> Result<()> {
        if self.lock.is_none() {
            self.lock = self.agent.inbox().try_lock()?;
            if self.lock.is_some() {
                self.receiver = Some(self.agent.receiver(self.local.clone()));
            }
        }
        Ok(())
    }

    /// Whether this process receives for the agent (it holds the receive lock).
    pub fn receives(&self) -> bool {
        self.receiver.is_some()
    }

    /// Receives for up to `wait` (a long-poll, whole seconds) while this process receives;
    /// otherwise, or for less than a second, naps for at most 100 ms.
    pub async fn step(&mut self, wait: Duration) -> Result<()> {
        let nap = wait.min(Duration::from_millis(100));
        match self.receiver.as_mut() {
            Some(r) if wait >= Duration::from_secs(1) => {
                r.pull(wait.as_secs()).await?;
            }
            Some(r) => {
                r.pull(0).await?;
                tokio::time::sleep(nap).await;
            }
            None => tokio::time::sleep(nap).await,
        }
        Ok(())
    }
}

/// A wait for what arrives, until a deadline: a [`Feed`] stepped a second at a time, so a waiting
/// command also sees delivery states change.
struct Wait {
    feed: Feed,
    deadline: Instant,
}

impl Wait {
    fn new(agent: &Agent, local: &Store, timeout: Duration) -> Wait {
        Wait {
            feed: Feed::new(agent, local.clone()),
            deadline: Instant::now() + timeout,
        }
    }

    fn take_over(&mut self) -> Result<()> {
        self.feed.take_over()
    }

    /// Receives or naps for a moment; `false` once the deadline has passed.
    async fn step(&mut self) -> Result<bool> {
        let now = Instant::now();
        if now >= self.deadline {
            return Ok(false);
        }
        let left = self.deadline - now;
        self.feed.step(left.min(Duration::from_secs(1))).await?;
        Ok(true)
    }
}

/// Which side of its tasks an agent lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// Both: every task it is a party of.
    Any,
    /// Those it requested (delegated).
    Requester,
    /// Those it works (received).
    Worker,
}

/// The verbs that apply now to a task in `state` for the party `side` (§6.1, §6.2): what
/// `agentbus tasks` lists beside each task.
pub fn verbs_now(state: &str, side: Side) -> &'static [&'static str] {
    match (side, state) {
        (Side::Worker, "submitted") => &["accept", "reject"],
        (Side::Worker, "accepted" | "in_progress") => {
            &["progress", "needs-input", "complete", "fail"]
        }
        (Side::Worker, "needs_input") => &["complete", "fail"],
        (Side::Requester, "needs_input") => &["answer", "cancel"],
        (Side::Requester, "submitted" | "accepted" | "in_progress") => &["cancel"],
        _ => &[],
    }
}

/// A lifecycle message's outcome for party `side`, as the MCP `task` tool answers it: the
/// receipt, the task's state, whether the gateway recorded it late or ignored it (§6.3: stored,
/// nothing changed, with `changed_nothing` saying so), and the actions that apply now, named as
/// the tool names them ([`verbs_now`], as `agentbus tasks --json` lists them).
pub fn acted_json(acted: &Acted, side: Side) -> Value {
    let receipt = &acted.sent.receipt.body;
    let state = receipt.task_state.as_deref().unwrap_or_default();
    let late = receipt.late == Some(true);
    let ignored = receipt.ignored == Some(true);
    let verbs: Vec<String> = verbs_now(state, side)
        .iter()
        .map(|v| v.replace('-', "_"))
        .collect();
    let mut doc = json!({
        "sent": acted.sent.summary(),
        "task_id": acted.task_id,
        "verb": acted.verb,
        "task_state": receipt.task_state,
        "late": late,
        "ignored": ignored,
        "verbs": verbs,
    });
    if late || ignored {
        doc["changed_nothing"] = json!(format!(
            "{} was recorded but changed nothing: the task is {state}",
            acted.verb
        ));
    }
    doc
}

/// What a verb needs an id to name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wants {
    /// A gateway message (`reply`, `ack`, `trace`, `inbox --show`): its `msg_` id.
    Message,
    /// A task (the task verbs): its `tsk_` id, or the `msg_` id of one of its messages.
    Task,
}

/// The id a gateway verb takes for `id`, whichever of its ids a person was shown (the
/// frame's `id`, `local_id` and `task`, `inbox`, `--json`): a `lm_` id of local delivery becomes
/// the gateway message it holds (for a task verb, that message's task when known); `msg_` and
/// `tsk_` ids are taken as they are where the verb takes them, and refused with what it needs
/// where it does not. One function, so every verb and front end resolves alike.
pub fn resolve_id(local: &Store, id: &str, wants: Wants) -> Result<String> {
    let id = id.trim();
    if id.starts_with("lm_") {
        let found = local
            .show(id)
            .map_err(|e| ClientError::Invalid(format!("the local message store: {e}")))?;
        let Some(m) = found else {
            return Err(ClientError::UnknownMessage {
                id: id.to_owned(),
                agent: "local delivery on this machine".into(),
            });
        };
        let Some(via) = m.via.as_ref().filter(|v| v.transport == Transport::Gateway) else {
            return Err(ClientError::WrongId {
                id: id.to_owned(),
                what: "a message of local delivery, not of the gateway".into(),
                needs: format!(
                    "answer it with `agentbus reply {id} \"…\"`; gateway verbs take a msg_ or tsk_ id"
                ),
            });
        };
        return Ok(match (wants, &via.task) {
            (Wants::Task, Some(t)) => t.clone(),
            _ => via.shown_id().to_owned(),
        });
    }
    if wants == Wants::Message && id.starts_with("tsk_") {
        return Err(ClientError::WrongId {
            id: id.to_owned(),
            what: "a task, not a message".into(),
            needs: format!(
                "this command takes a message id (msg_ or lm_); follow the task with `agentbus trace {id}` and act on it with its verbs (accept, progress, complete, fail, reject; answer, cancel)"
            ),
        });
    }
    Ok(id.to_owned())
}

/// Checks a destination's form (§4.1) here, before anything is uploaded or sent: a malformed
/// address is the caller's mistake, not the gateway's refusal.
fn destination(to: &str) -> Result<()> {
    to.parse::<agentbus_protocol::address::Address>()
        .map(drop)
        .map_err(|e| ClientError::Address(e.to_string()))
}

/// Whom an answer to `original` goes to: its `reply_to`, else its `source` (§7).
fn answerer(original: &Received) -> String {
    original
        .attr("reply_to")
        .or(original.attr("source"))
        .unwrap_or_default()
        .to_owned()
}

/// The file name an attachment is published under.
fn file_name(f: &Path) -> Result<String> {
    f.file_name()
        .and_then(|n| n.to_str())
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
        .ok_or_else(|| ClientError::Attachment {
            path: f.to_owned(),
            why: "it has no file name (attach a file, not a folder or `..`)".into(),
        })
}

/// When a received task request stopped being open to this worker (§6.1), if it has.
pub fn expired_at(r: &Received) -> Option<agentbus_protocol::timestamp::Timestamp> {
    r.expires_ms
        .filter(|at| *at <= SystemClock.now().millis())
        .map(agentbus_protocol::timestamp::Timestamp)
}

/// The command that answers a received envelope now, as its frame says it (the one
/// [`agentbus_protocol::frame::describe`]): none once it is late or expired.
pub fn answer_of(r: &Received, profile: &str) -> Option<String> {
    if r.late || expired_at(r).is_some() {
        return None;
    }
    let env = agentbus_protocol::envelope::Envelope::from_map(r.envelope.clone());
    agentbus_protocol::frame::describe(&env, r.task.as_deref(), Some(profile)).answer
}

/// A received envelope as `--json` and the MCP tools show it: with its `msg_` id and task id
/// at the top, so a script goes on to the verbs without reading the envelope.
pub fn received_json(r: &Received) -> Value {
    json!({
        "id": r.id(),
        "task_id": r.task,
        "sequence": r.sequence,
        "verified": r.verified,
        "diagnostics": r.diagnostics,
        "attachments": r.attachments,
        "task": r.task,
        "late": r.late,
        "held": r.held,
        "envelope": r.envelope,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_acted_task_says_its_state_late_or_ignored_and_the_verbs_that_apply_now() {
        let acted = |receipt: Value| Acted {
            sent: Sent {
                envelope: Map::new(),
                receipt: crate::http::Receipt {
                    body: serde_json::from_value(receipt).unwrap(),
                    replay: false,
                },
            },
            task_id: "tsk_1".into(),
            verb: "task.progress".into(),
        };
        let receipt = |more: Value| {
            let mut r =
                json!({"receipt": "rcp_1", "id": "msg_1", "state": "persisted", "trace_id": "t"});
            for (k, v) in more.as_object().unwrap() {
                r[k] = v.clone();
            }
            r
        };
        let doc = acted_json(
            &acted(receipt(json!({"task_state": "in_progress"}))),
            Side::Worker,
        );
        assert_eq!(doc["task_state"], "in_progress");
        assert_eq!(doc["late"], false);
        assert_eq!(
            doc["verbs"],
            json!(["progress", "needs_input", "complete", "fail"])
        );
        assert!(doc.get("changed_nothing").is_none(), "{doc}");
        let doc = acted_json(
            &acted(receipt(json!({"task_state": "succeeded", "late": true}))),
            Side::Worker,
        );
        assert_eq!(doc["late"], true);
        assert_eq!(doc["verbs"], json!([]));
        assert_eq!(
            doc["changed_nothing"],
            "task.progress was recorded but changed nothing: the task is succeeded"
        );
        let doc = acted_json(
            &acted(receipt(
                json!({"task_state": "needs_input", "ignored": true}),
            )),
            Side::Requester,
        );
        assert_eq!(doc["ignored"], true);
        assert_eq!(doc["verbs"], json!(["answer", "cancel"]));
    }

    /// A failed result, a rejection and an error report each say why; a success says nothing,
    /// and a conversation's last failure of the task is the one shown.
    #[test]
    fn failures_are_read_from_results_rejections_and_error_reports() {
        let result = "agentbus.task.result.v1";
        let failed = json!({"task_id": "tsk_1", "status": "failed",
            "failure": {"code": "harness_crashed", "message": "exit status: 3"}});
        assert_eq!(
            Failure::of(result, &failed).unwrap().line(),
            "harness_crashed: exit status: 3"
        );
        let rejected = json!({"task_id": "tsk_1", "status": "rejected",
            "rejection_reason": "busy", "summary": "queue full"});
        assert_eq!(
            Failure::of(result, &rejected).unwrap().line(),
            "busy: queue full"
        );
        let error = json!({"task_id": "tsk_1", "code": "rate_limited", "message": "retrying"});
        assert_eq!(
            Failure::of("agentbus.task.error.v1", &error)
                .unwrap()
                .line(),
            "rate_limited: retrying"
        );
        let ok = json!({"task_id": "tsk_1", "status": "succeeded", "summary": "fine"});
        assert_eq!(Failure::of(result, &ok), None);
        let envelope = |ty: &str, data: &Value| {
            json!({"type": ty, "data": data})
                .as_object()
                .unwrap()
                .clone()
        };
        let other = json!({"task_id": "tsk_2", "status": "failed", "failure": {"code": "other"}});
        let c = api::Conversation {
            conversation_id: "cnv_1".into(),
            envelopes: vec![
                envelope("agentbus.task.error.v1", &error),
                envelope(result, &failed),
                envelope(result, &other),
            ],
        };
        let f = Failure::in_conversation(&c, "tsk_1").unwrap();
        assert_eq!(f.code.as_deref(), Some("harness_crashed"));
    }

    #[test]
    fn task_actions_build_their_payloads() {
        let cases = [
            (
                TaskAction::Accept {
                    estimate_s: Some(240),
                    note: None,
                },
                json!({"estimated_duration_s": 240}),
            ),
            (
                TaskAction::NeedsInput {
                    question: "Which?".into(),
                    options: vec![],
                },
                json!({"question": "Which?"}),
            ),
            (
                TaskAction::Fail {
                    message: "gone".into(),
                    code: "repo_missing".into(),
                    retryable: false,
                },
                json!({"status": "failed", "failure": {"code": "repo_missing", "message": "gone", "retryable": false}}),
            ),
            (
                TaskAction::Reject {
                    reason: "busy".into(),
                    summary: None,
                },
                json!({"status": "rejected", "rejection_reason": "busy"}),
            ),
            (TaskAction::Cancel { reason: None }, json!({})),
            (
                TaskAction::Clarify {
                    text: "Is 1.22 fine?".into(),
                },
                json!({"text": "Is 1.22 fine?", "expects_reply": true}),
            ),
        ];
        for (action, data) in cases {
            assert_eq!(action.data(), data, "{action:?}");
        }
        assert!(TaskAction::Answer { answer: "x".into() }.from_requester());
        assert!(
            !TaskAction::Complete {
                summary: None,
                output: None
            }
            .from_requester()
        );
    }
}
