//! `agentbus trace <tsk_|cnv_|msg_>`: the readable timeline of a task (its transitions from the
//! gateway's record) or of a conversation (every envelope in `received_at` order). For a message
//! this agent sent, also how far it got with each recipient (persisted, leased, acknowledged,
//! shown in a session's context, answered: `GET /v1/messages/{id}/delivery`); for one it
//! received, where it was stored and shown on this machine.

use std::borrow::Cow;
use std::process::ExitCode;

use clap::Args;
use serde_json::{Value, json};

use agentbus_api::{Conversation, DeliveryStates, RecipientState, TaskView};
use agentbus_client::ClientError;
use agentbus_client::agent::{Failure, Side, Trace, verbs_now};
use agentbus_protocol::text::for_terminal_line;

use super::profile::Ctx;
use crate::cli::Globals;
use crate::error::{CliError, CliResult, ErrorKind};
use crate::printer::Printer;

/// Arguments of `trace`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  agentbus trace tsk_01J9ZK8A0000000000000000T1\n  agentbus trace cnv_01J9ZK7A0000000000000000C1\n  agentbus trace msg_01J9ZK7A0000000000000000A1   # the conversation of a message sent or received here"
)]
pub struct TraceArgs {
    /// A task (tsk_), a conversation (cnv_) or a message sent or received here (msg_).
    id: String,
}

/// Runs `trace`.
pub fn run(args: TraceArgs, globals: &Globals, printer: &Printer) -> CliResult {
    let ctx = Ctx::open(globals, printer)?;
    // A local delivery id (the frame's local_id) names the gateway message it holds.
    let id = if args.id.trim().starts_with("lm_") {
        ctx.resolve(&args.id, agentbus_client::agent::Wants::Message)?
    } else {
        args.id.clone()
    };
    let trace = ctx
        .rt
        .block_on(ctx.agent().trace(&id))
        .map_err(|e| match e {
            ClientError::UnknownMessage { id, .. } => {
                CliError::input(format!("no message {id} was sent or received here"))
                    .fix("trace its conversation (cnv_…) or task (tsk_…) instead")
            }
            ClientError::Invalid(m) => CliError::new(ErrorKind::Usage, m)
                .fix("pass a task id (tsk_…), a conversation id (cnv_…) or a message id (msg_…)"),
            e => CliError::of(e),
        })?;
    let template = trace_url_template(printer);
    match trace {
        Trace::Task { task, conversation } => {
            // A task's trace is its request's: every message in answer continues it.
            let request = conversation.as_ref().and_then(|c| {
                c.envelopes
                    .iter()
                    .find(|e| e.get("id").and_then(Value::as_str) == Some(task.request_id.as_str()))
            });
            let traces = traces_of(request.into_iter(), template.as_deref());
            if printer.is_json() {
                let failure = conversation
                    .as_ref()
                    .and_then(|c| Failure::in_conversation(c, &task.id));
                // One document for every id: what a task's trace lacks is null.
                printer.json(&json!({"task": task, "conversation": conversation, "failure": failure, "delivery": null, "received": null, "traces": traces}))?;
            } else {
                let side = if task.requester.id == ctx.profile.agent_id {
                    Side::Requester
                } else {
                    Side::Worker
                };
                // The trace beside the task's other facts, before its timeline.
                let text = task_text(&task, conversation.as_ref(), side);
                let text = match text.split_once("\ntimeline:\n") {
                    Some((head, rest)) => {
                        format!(
                            "{head}{}\ntimeline:\n{rest}",
                            traces_text(&traces, "  trace:     ")
                        )
                    }
                    None => text,
                };
                printer.line(&text)?;
            }
        }
        Trace::Conversation {
            conversation,
            delivery,
            received,
        } => {
            let received = received.map(|r| received_here(&ctx, &r)).transpose()?;
            let traces = traces_of(conversation.envelopes.iter(), template.as_deref());
            if printer.is_json() {
                printer.json(&json!({"task": null, "conversation": conversation, "failure": null, "delivery": delivery, "received": received, "traces": traces}))?;
            } else {
                let mut text = conversation_text(&conversation);
                if !traces.is_empty() {
                    text.push_str("\n\n");
                    text.push_str(traces_text(&traces, "trace: ").trim_end());
                }
                if let Some(d) = &delivery {
                    text.push_str("\n\n");
                    text.push_str(&delivery_text(d));
                }
                if let Some(r) = &received {
                    text.push_str("\n\n");
                    text.push_str(&received_text(r));
                }
                printer.line(&text)?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The environment variable with the operator's trace viewer, `{trace_id}` in it.
pub const TRACE_URL_ENV: &str = "AGENTBUS_TRACE_URL";

/// `AGENTBUS_TRACE_URL` when it is a usable template; one that is not is said once on stderr and
/// no link is made.
fn trace_url_template(printer: &Printer) -> Option<String> {
    let t = std::env::var(TRACE_URL_ENV)
        .ok()
        .filter(|t| !t.trim().is_empty())?;
    match agentbus_protocol::tracelink::check(&t) {
        Ok(()) => Some(t),
        Err(e) => {
            printer.warning(&format!(
                "{TRACE_URL_ENV} is ignored: {e}; set it like https://jaeger.example/trace/{{trace_id}}"
            ));
            None
        }
    }
}

/// The distinct W3C trace ids of `envelopes` (§2.1 `traceparent`), in order, each with its link
/// under `template`.
fn traces_of<'a>(
    envelopes: impl Iterator<Item = &'a agentbus_api::EnvelopeMap>,
    template: Option<&str>,
) -> Vec<Value> {
    let parents = envelopes.filter_map(|e| e.get("traceparent").and_then(Value::as_str));
    agentbus_protocol::tracelink::trace_ids(parents)
        .into_iter()
        .map(|id| {
            let link = template.and_then(|t| agentbus_protocol::tracelink::link(t, &id));
            json!({"trace_id": id, "link": link})
        })
        .collect()
}

/// A line per trace (`<label><id>  <link>`), each value escaped for the terminal.
fn traces_text(traces: &[Value], label: &str) -> String {
    let mut out = String::new();
    for t in traces {
        out.push_str(&format!("{label}{}", one(&t["trace_id"])));
        if let Some(link) = t["link"].as_str() {
            out.push_str(&format!("  {}", for_terminal_line(link)));
        }
        out.push('\n');
    }
    out
}

/// Where a message this agent received was stored and shown on this machine.
fn received_here(ctx: &Ctx, r: &agentbus_client::inbox::Received) -> Result<Value, CliError> {
    let store = super::local::open_store()?;
    let lm = agentbus_local::line::import_id(agentbus_protocol::frame::Transport::Gateway, r.id());
    let shown = store.shown_record(&ctx.profile.address, &lm).map(|s| {
        json!({
            "at": agentbus_protocol::timestamp::Timestamp(s.ms).to_string(),
            "harness": s.harness,
            "event": s.event,
            "by": s.by,
        })
    });
    Ok(json!({
        "sequence": r.sequence,
        "stored_at": r.stored_at,
        "verified": r.verified,
        "held": r.held,
        "late": r.late,
        "local_id": lm,
        "shown": shown,
    }))
}

fn received_text(r: &Value) -> String {
    let mut out = format!(
        "received here: sequence {}, stored {}",
        r["sequence"],
        one(&r["stored_at"])
    );
    if let Some(h) = r["held"].as_str() {
        out.push_str(&format!(", held from sessions ({})", for_terminal_line(h)));
    }
    match &r["shown"] {
        Value::Null => out.push_str(", not shown in any session yet"),
        sh => out.push_str(&format!(
            ", shown {} in {} ({}) to {}",
            one(&sh["at"]),
            one(&sh["harness"]),
            one(&sh["event"]),
            one(&sh["by"])
        )),
    }
    out
}

/// One recipient's delivery state in a line: the furthest state, with its time and where.
pub fn state_line(r: &RecipientState) -> String {
    let who = for_terminal_line(r.agent.address.as_deref().unwrap_or(&r.agent.id));
    let state = r.state.as_str();
    // Where a message was shown is what the recipient's sidecar reported: each field stays on
    // this recipient's line.
    let detail = match state {
        "answered" => {
            let a = r.answered.as_ref();
            format!(
                "{} by {} ({})",
                opt(a.map(|a| a.at.as_str())),
                opt(a.map(|a| a.id.as_str())),
                for_terminal_line(
                    a.map_or("", |a| a.kind.as_str())
                        .trim_start_matches("agentbus.")
                )
            )
        }
        "shown" => {
            let (at, harness, event) = shown(&r.shown);
            format!("{at} in {harness} ({event})")
        }
        "pushed" => {
            let (at, harness, event) = shown(&r.pushed);
            format!("{at} to {harness} ({event}), which may drop it; not shown yet")
        }
        "acknowledged" => format!("{} by its sidecar", opt(r.acknowledged_at.as_deref())),
        "leased" => format!("{} (attempt {})", opt(r.leased_at.as_deref()), r.attempts),
        _ => for_terminal_line(&r.persisted_at).into_owned(),
    };
    let state = for_terminal_line(state);
    let mut line = format!("  {who}: {state} {detail}");
    if let Some(rr) = &r.read_receipt {
        line.push_str(&format!("; read receipt {}", for_terminal_line(&rr.id)));
    }
    line
}

/// The time, harness and event of a showing (or push), each made safe for one line.
fn shown(s: &Option<agentbus_api::Shown>) -> (Cow<'_, str>, Cow<'_, str>, Cow<'_, str>) {
    let s = s.as_ref();
    (
        opt(s.map(|s| s.at.as_str())),
        opt(s.map(|s| s.harness.as_str())),
        opt(s.map(|s| s.event.as_str())),
    )
}

/// The delivery states of a message, for people.
pub fn delivery_text(d: &DeliveryStates) -> String {
    format!(
        "delivery of {}:{}",
        for_terminal_line(&d.id),
        recipients_text(d)
    )
}

/// Each recipient's state line of a delivery document (`GET /v1/messages/{id}/delivery`, an
/// entry of `GET /v1/messages/sent`), each on a line of its own after a line break.
pub fn recipients_text(d: &DeliveryStates) -> String {
    if d.recipients.is_empty() {
        return "\n  no recipient (a topic without subscribers)".to_owned();
    }
    d.recipients
        .iter()
        .map(|r| format!("\n{}", state_line(r)))
        .collect()
}

/// Says each change of a sent message's delivery states once, while a command waits (`send
/// --wait`); the client's wait hands it the states it looks up.
#[derive(Default)]
pub struct Watch {
    last: Option<DeliveryStates>,
    said: std::collections::HashMap<String, String>,
}

impl Watch {
    /// A watch that has said nothing yet.
    pub fn new() -> Watch {
        Watch::default()
    }

    /// The lines of recipients whose state changed since the last `d`.
    pub fn take(&mut self, d: DeliveryStates) -> Vec<String> {
        let mut out = Vec::new();
        for r in &d.recipients {
            let key = r.agent.id.clone();
            let state = format!("{}/{}", r.state, r.read_receipt.is_none());
            if self.said.get(&key) != Some(&state) {
                self.said.insert(key, state);
                out.push(state_line(r));
            }
        }
        self.last = Some(d);
        out
    }

    /// The last states seen (`None`, written `null`, before any).
    pub fn last(&self) -> Option<&DeliveryStates> {
        self.last.as_ref()
    }
}

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or("")
}

/// A string field for a line of the timeline: a peer's words (a stage, a status, an address)
/// must not start a line that would pass for the timeline's own.
fn one(v: &Value) -> Cow<'_, str> {
    for_terminal_line(s(v))
}

/// [`one`] of a field that may be absent (written as nothing).
fn opt(v: Option<&str>) -> Cow<'_, str> {
    for_terminal_line(v.unwrap_or(""))
}

/// The human timeline of a task and its conversation, as its party `side` reads it.
pub fn task_text(task: &TaskView, conversation: Option<&Conversation>, side: Side) -> String {
    let mut out = format!(
        "task {}  {}  state: {}\n  requester: {}\n  recipient: {}\n",
        for_terminal_line(&task.id),
        for_terminal_line(&task.capability),
        for_terminal_line(&task.state),
        opt(task.requester.address.as_deref()),
        opt(task.recipient.address.as_deref()),
    );
    if let Some(f) = conversation.and_then(|c| Failure::in_conversation(c, &task.id)) {
        out.push_str(&format!("  failure:   {}\n", f.line()));
    }
    if let Some(now) = crate::commands::lists::now_line(&task.id, verbs_now(&task.state, side)) {
        out.push_str(&format!("  now:       {now}\n"));
    }
    out.push_str("\ntimeline:\n");
    for e in &task.timeline {
        let kind = for_terminal_line(
            e.kind
                .trim_start_matches("agentbus.")
                .trim_end_matches(".v1"),
        );
        let from = Some(e.from.as_str())
            .filter(|f| !f.is_empty())
            .unwrap_or("(new)");
        let actor = e.actor.as_str();
        let actor = if actor == format!("agent:{}", task.requester.id) {
            Cow::Borrowed("requester")
        } else if actor == format!("agent:{}", task.recipient.id) {
            Cow::Borrowed("recipient")
        } else if let Some(user) = actor.strip_prefix("user:") {
            // An admin's cancel through the console or the API (§6.2): never the requester's.
            Cow::Owned(format!("admin {}", for_terminal_line(user)))
        } else {
            for_terminal_line(actor)
        };
        let mut flags = String::new();
        if let Some(r) = &e.reason {
            flags.push_str(&format!(" (reason: {})", for_terminal_line(r)));
        }
        if e.late {
            flags.push_str(" (late)");
        }
        if e.ignored {
            flags.push_str(" (ignored)");
        }
        if let Some(t) = &e.timer {
            flags.push_str(&format!(" (timer: {})", for_terminal_line(t)));
        }
        out.push_str(&format!(
            "  {}  {:<9} {:<14} {} -> {}{flags}\n",
            for_terminal_line(&e.at),
            actor,
            kind,
            for_terminal_line(from),
            for_terminal_line(&e.to),
        ));
    }
    if let Some(conversation) = conversation {
        out.push('\n');
        out.push_str(&conversation_text(conversation));
    }
    out.trim_end().to_owned()
}

/// The human view of a conversation: one block per envelope.
pub fn conversation_text(conversation: &Conversation) -> String {
    let mut out = format!(
        "conversation {}:\n",
        for_terminal_line(&conversation.conversation_id)
    );
    // Every field of an envelope is its sender's: one line each, so no stage, status or text can
    // add a line that passes for another envelope's or a task's transition.
    for e in &conversation.envelopes {
        let kind = for_terminal_line(
            s(&e["type"])
                .trim_start_matches("agentbus.")
                .trim_end_matches(".v1"),
        );
        out.push_str(&format!(
            "  {}  {:<14} {} -> {}  {}\n",
            one(&e["received_at"]),
            kind,
            one(&e["source"]),
            one(&e["to"]),
            one(&e["id"]),
        ));
        let d = &e["data"];
        // A failed result or an error report says why on its line (its summary may be empty).
        let failure = Failure::of(s(&e["type"]), d).map(|f| f.line());
        let line = failure
            .as_deref()
            .or(d["text"].as_str())
            .or(d["instructions"].as_str())
            .or(d["summary"].as_str())
            .or(d["note"].as_str())
            .or(d["question"].as_str())
            .or(d["answer"].as_str())
            .unwrap_or("");
        let mut detail = String::new();
        if let Some(p) = d["percent"].as_f64() {
            detail.push_str(&format!("{p}% "));
        }
        if let Some(st) = d["stage"].as_str() {
            detail.push_str(&format!("[{}] ", for_terminal_line(st)));
        }
        if let Some(st) = d["status"].as_str() {
            detail.push_str(&format!("{}: ", for_terminal_line(st)));
        }
        let first: String = line
            .lines()
            .next()
            .unwrap_or("")
            .chars()
            .take(100)
            .collect();
        if !(detail.is_empty() && first.is_empty()) {
            out.push_str(&format!("      {detail}{}\n", for_terminal_line(&first)));
        }
        for a in d["attachments"].as_array().into_iter().flatten() {
            out.push_str(&format!(
                "      attachment {} ({} bytes)\n",
                one(&a["name"]),
                a["size"].as_u64().unwrap_or(0)
            ));
        }
    }
    out.trim_end().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// §6.2: an admin's cancel is the admin's on the timeline, with the reason it gave; the
    /// reason is one line however many it had.
    #[test]
    fn an_admins_cancel_is_named_with_its_reason() {
        let task: TaskView = serde_json::from_value(serde_json::json!({
            "id": "tsk_1", "state": "cancelled", "capability": "code.review",
            "request_id": "msg_1", "conversation_id": "cnv_1",
            "requester": {"id": "agt_r", "address": "agent://acme/backend/bot"},
            "recipient": {"id": "agt_w", "address": "agent://acme/backend/reviewer"},
            "constraints": {"accept_timeout_s": 120, "progress_timeout_s": 300,
                            "max_duration_s": null, "expires_at": "2026-12-07T19:00:00Z"},
            "next_deadline": null, "created_at": "2026-12-07T18:00:00Z",
            "updated_at": "2026-12-07T18:01:00Z",
            "timeline": [{"at": "2026-12-07T18:01:00Z", "actor": "user:usr_9",
                          "envelope_id": null, "type": "agentbus.task.cancel.v1",
                          "from": "submitted", "to": "cancelled", "late": false,
                          "ignored": false, "timer": null, "reason": "freeze\nnow",
                          "warnings": []}]
        }))
        .unwrap();
        let text = task_text(&task, None, Side::Requester);
        let line = text
            .lines()
            .find(|l| l.contains("task.cancel"))
            .unwrap_or_else(|| panic!("{text}"));
        assert!(line.contains("admin usr_9"), "{line}");
        assert!(
            line.contains("submitted -> cancelled (reason: freeze"),
            "{line}"
        );
        assert!(!text.contains("\nnow"), "one line: {text}");
    }
}
