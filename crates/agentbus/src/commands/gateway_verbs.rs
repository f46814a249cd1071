//! The gateway verbs of an agent: `send`, `ack`, `delegate`, the worker's `accept`, `progress`,
//! `needs-input`, `complete`, `fail`, `reject`, the requester's `answer` and `cancel`, and the
//! gateway half of `tell`, `ask` and `reply` (`connect` is listed with them and runs in
//! [`super::connect`]). The work is in `agentbus-client`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde_json::{Value, json};

use agentbus_client::ClientError;
use agentbus_client::agent::{
    Budget, Delegation, Failure, Message, TaskAction, Wants, received_json,
};
use agentbus_client::inbox::Received;

use super::connect::ConnectArgs;
use super::profile::{Ctx, json_object, parse_duration, recipient_hint};
use super::progress_bar::Transfer;
use crate::cli::Globals;
use crate::error::{CliError, CliResult, ErrorKind};
use crate::printer::Printer;

/// The gateway verbs, flattened into the top level (`agentbus send …`).
#[derive(Debug, Subcommand)]
pub enum AgentCommand {
    /// Connect this machine to a gateway as an agent: register it (or resume it), generate its key
    /// on first connect, register the public key, save a profile.
    #[command(
        after_help = "Examples:\n  agentbus connect --gateway http://127.0.0.1:7700 --token abu_… --name release-bot\n  agentbus connect --gateway https://bus.example --token aba_… --agent agt_01J… --name reviewer\n\n\
The private key goes to the OS keychain where one works (service agentbus, account <agent_id>), \
else to $AGENTBUS_HOME/keys/<agent_id>.key (mode 0600); AGENTBUS_KEYSTORE=auto|keychain|file \
chooses (default auto). The profile (with the agent credential) goes to \
$AGENTBUS_HOME/profiles/<name>.json. Several agents are several profiles: pick one with --profile \
or AGENTBUS_PROFILE."
    )]
    Connect(ConnectArgs),
    /// Send a message (`agentbus.message.v1`) to an agent or topic through the gateway.
    #[command(
        after_help = "Examples:\n  agentbus send agent://acme/backend/reviewer \"Is change 482 clear for the 14:30 deploy?\" --wait 120s\n  agentbus send agent://acme/backend/reviewer \"logs attached\" --attach build.log --subject \"CI run 42\""
    )]
    Send(SendArgs),
    /// Acknowledge a message you received (`agentbus.ack.v1`: read or processed).
    #[command(
        after_help = "Example:\n  agentbus ack msg_01J9ZK7A0000000000000000A1 --level processed"
    )]
    Ack(AckArgs),
    /// Hand a task to an agent (`agentbus.task.request.v1`) and, with --wait, wait for its result.
    #[command(
        after_help = "Example:\n  agentbus delegate agent://acme/backend/reviewer --capability code.review \\\n    --input '{\"artifact_id\": \"change-482\"}' --attach change.diff --wait 10m \\\n    \"Review this change for concurrency bugs.\""
    )]
    Delegate(DelegateArgs),
    /// As a task's worker: accept it.
    #[command(
        after_help = "Example:\n  agentbus accept tsk_01J9ZK8A0000000000000000T1 --estimate 240"
    )]
    Accept(AcceptArgs),
    /// As a task's worker: report progress (and reset its progress timer).
    #[command(
        after_help = "Example:\n  agentbus progress tsk_01J… --percent 40 --stage static-analysis --note \"one suspicious unlock\""
    )]
    Progress(ProgressArgs),
    /// As a task's worker: ask the requester a question the work cannot go on without.
    #[command(
        name = "needs-input",
        after_help = "Example:\n  agentbus needs-input tsk_01J… \"Which repository?\" --option muxr --option agentbus"
    )]
    NeedsInput(NeedsInputArgs),
    /// As a task's worker: finish it successfully, with a summary, output and attachments.
    #[command(
        after_help = "Example:\n  agentbus complete tsk_01J… --summary \"one high-severity bug\" --output '{\"findings\": []}' --attach report.md"
    )]
    Complete(CompleteArgs),
    /// As a task's worker: finish it as failed.
    #[command(
        after_help = "Example:\n  agentbus fail tsk_01J… --message \"the repository is gone\" --code repo_missing"
    )]
    Fail(FailArgs),
    /// As a task's worker: refuse it.
    #[command(after_help = "Example:\n  agentbus reject tsk_01J… --reason busy")]
    Reject(RejectArgs),
    /// As a task's requester: answer the worker's question (`task.input`).
    #[command(after_help = "Example:\n  agentbus answer tsk_01J… \"muxr\" --attach notes.md")]
    Answer(AnswerArgs),
    /// As a task's requester: cancel it.
    #[command(after_help = "Example:\n  agentbus cancel tsk_01J… --reason \"no longer needed\"")]
    Cancel(CancelArgs),
}

/// Arguments of `send`.
#[derive(Debug, Args)]
pub struct SendArgs {
    /// agent://tenant/workspace/name, an agt_ id, topic://tenant/workspace/topic, or the name
    /// (or alias) of an agent of the profile's workspace.
    to: String,
    /// The text; several words are joined with spaces.
    #[arg(required = true, num_args = 1..)]
    text: Vec<String>,
    /// A one-line summary.
    #[arg(long)]
    subject: Option<String>,
    /// A file to upload and attach (repeatable).
    #[arg(long, value_name = "FILE")]
    attach: Vec<PathBuf>,
    /// Ask the recipient for a reply.
    #[arg(long)]
    expects_reply: bool,
    /// high keeps the recipient's session going at the end of its turn; low waits for its next
    /// prompt; normal does as the recipient's machine is set (docs/local.md, "End of turn").
    #[arg(long, default_value = "normal", value_parser = ["low", "normal", "high"])]
    priority: String,
    /// Wait this long (30s, 2m) for the first message whose correlation_id is the sent id, and
    /// print it (implies --expects-reply).
    #[arg(long, value_name = "DURATION")]
    wait: Option<String>,
}

/// Arguments of `ack`.
#[derive(Debug, Args)]
pub struct AckArgs {
    /// The msg_ id of the message acknowledged.
    id: String,
    /// read or processed.
    #[arg(long, default_value = "read", value_parser = ["read", "processed"])]
    level: String,
    /// A note.
    #[arg(long)]
    note: Option<String>,
}

/// Arguments of `delegate`.
#[derive(Debug, Args)]
pub struct DelegateArgs {
    /// The worker: agent://…, an agt_ id, or the name (or alias) of an agent of the profile's
    /// workspace.
    to: String,
    /// The instructions; several words are joined with spaces.
    #[arg(required = true, num_args = 1..)]
    instructions: Vec<String>,
    /// The capability asked for (e.g. code.review).
    #[arg(long)]
    capability: String,
    /// The capability's major version.
    #[arg(long, default_value = "1")]
    capability_version: String,
    /// Structured input, a JSON object.
    #[arg(long, value_name = "JSON")]
    input: Option<String>,
    /// A file to upload and attach (repeatable).
    #[arg(long, value_name = "FILE")]
    attach: Vec<PathBuf>,
    /// A one-line summary.
    #[arg(long)]
    subject: Option<String>,
    /// Wait this long for the task to finish and print its result [default: no wait].
    #[arg(long, value_name = "DURATION")]
    wait: Option<String>,
    /// Seconds the worker has to accept (5-3600) [default: 120].
    #[arg(long, value_name = "S")]
    accept_timeout: Option<u64>,
    /// Seconds allowed between progress reports (30-86400) [default: 900].
    #[arg(long, value_name = "S")]
    progress_timeout: Option<u64>,
    /// Seconds the whole task may take once accepted (30-604800) [default: no limit].
    #[arg(long, value_name = "S")]
    max_duration: Option<u64>,
    /// The request expires after this long unless a worker takes it (sets expires_at)
    /// [default: 24h].
    #[arg(long, visible_alias = "expires-in", value_name = "DURATION")]
    expires: Option<String>,
    /// A key that makes retries safe: the same key returns the original task (§8). Default: one
    /// derived from this command line, so running the same command again within the gateway's
    /// idempotency window (7 days) returns the same task.
    #[arg(long, conflicts_with = "new_task")]
    idempotency_key: Option<String>,
    /// Make a new task even if this same command ran within the idempotency window (sends no
    /// idempotency key).
    #[arg(long)]
    new_task: bool,
    /// The most the task may cost, like 2.00 USD (the budget attribute; advisory in v1).
    #[arg(long, value_name = "AMOUNT")]
    budget: Option<String>,
}

/// Arguments of `accept`.
#[derive(Debug, Args)]
pub struct AcceptArgs {
    /// The task: its tsk_ id, or the msg_ id of its request.
    task: String,
    /// Estimated duration in seconds.
    #[arg(long, value_name = "S")]
    estimate: Option<u64>,
    /// A note.
    #[arg(long)]
    note: Option<String>,
}

/// Arguments of `progress`.
#[derive(Debug, Args)]
pub struct ProgressArgs {
    /// The task: its tsk_ id, or the msg_ id of its request.
    task: String,
    /// Percent done (0-100).
    #[arg(long)]
    percent: Option<f64>,
    /// The stage (a short name).
    #[arg(long)]
    stage: Option<String>,
    /// A note.
    #[arg(long)]
    note: Option<String>,
}

/// Arguments of `needs-input`.
#[derive(Debug, Args)]
pub struct NeedsInputArgs {
    /// The task: its tsk_ id, or the msg_ id of its request.
    task: String,
    /// The question.
    #[arg(required = true, num_args = 1..)]
    question: Vec<String>,
    /// A fixed choice (repeatable); free text is still accepted.
    #[arg(long = "option")]
    options: Vec<String>,
}

/// Arguments of `complete`.
#[derive(Debug, Args)]
pub struct CompleteArgs {
    /// The task: its tsk_ id, or the msg_ id of its request.
    task: String,
    /// What was done, for people.
    #[arg(long)]
    summary: Option<String>,
    /// The output, a JSON object.
    #[arg(long, value_name = "JSON")]
    output: Option<String>,
    /// A file to upload and attach (repeatable).
    #[arg(long, value_name = "FILE")]
    attach: Vec<PathBuf>,
}

/// Arguments of `fail`.
#[derive(Debug, Args)]
pub struct FailArgs {
    /// The task: its tsk_ id, or the msg_ id of its request.
    task: String,
    /// What went wrong.
    #[arg(long)]
    message: String,
    /// A failure code (capability-specific or AB-NNNN).
    #[arg(long, default_value = "failed")]
    code: String,
    /// Whether retrying could succeed.
    #[arg(long)]
    retryable: bool,
}

/// Arguments of `reject`.
#[derive(Debug, Args)]
pub struct RejectArgs {
    /// The task: its tsk_ id, or the msg_ id of its request.
    task: String,
    /// Why (§5.5's rejection reasons).
    #[arg(long, value_parser = ["capability_unsupported", "input_invalid", "busy", "policy", "budget", "other"])]
    reason: String,
    /// A summary for people.
    #[arg(long)]
    summary: Option<String>,
}

/// Arguments of `answer`.
#[derive(Debug, Args)]
pub struct AnswerArgs {
    /// The task: its tsk_ id, or the msg_ id of its request.
    task: String,
    /// The answer.
    #[arg(required = true, num_args = 1..)]
    answer: Vec<String>,
    /// A file to upload and attach (repeatable).
    #[arg(long, value_name = "FILE")]
    attach: Vec<PathBuf>,
}

/// Arguments of `cancel`.
#[derive(Debug, Args)]
pub struct CancelArgs {
    /// The task: its tsk_ id, or the msg_ id of its request.
    task: String,
    /// Why.
    #[arg(long)]
    reason: Option<String>,
}

/// Runs one gateway verb.
pub fn run(command: AgentCommand, globals: &Globals, printer: &Printer) -> CliResult {
    let (task, action, attach) = match command {
        AgentCommand::Connect(a) => return super::connect::run(a, globals, printer),
        AgentCommand::Send(a) => return send(a, globals, printer),
        AgentCommand::Ack(a) => return ack(a, globals, printer),
        AgentCommand::Delegate(a) => return delegate(a, globals, printer),
        AgentCommand::Accept(a) => (
            a.task,
            TaskAction::Accept {
                estimate_s: a.estimate,
                note: a.note,
            },
            Vec::new(),
        ),
        AgentCommand::Progress(a) => (
            a.task,
            TaskAction::Progress {
                percent: a.percent,
                stage: a.stage,
                note: a.note,
            },
            Vec::new(),
        ),
        AgentCommand::NeedsInput(a) => (
            a.task,
            TaskAction::NeedsInput {
                question: a.question.join(" "),
                options: a.options,
            },
            Vec::new(),
        ),
        AgentCommand::Complete(a) => {
            let output = a.output.map(|o| json_object("--output", &o)).transpose()?;
            (
                a.task,
                TaskAction::Complete {
                    summary: a.summary,
                    output,
                },
                a.attach,
            )
        }
        AgentCommand::Fail(a) => (
            a.task,
            TaskAction::Fail {
                message: a.message,
                code: a.code,
                retryable: a.retryable,
            },
            Vec::new(),
        ),
        AgentCommand::Reject(a) => (
            a.task,
            TaskAction::Reject {
                reason: a.reason,
                summary: a.summary,
            },
            Vec::new(),
        ),
        AgentCommand::Answer(a) => (
            a.task,
            TaskAction::Answer {
                answer: a.answer.join(" "),
            },
            a.attach,
        ),
        AgentCommand::Cancel(a) => (a.task, TaskAction::Cancel { reason: a.reason }, Vec::new()),
    };
    lifecycle(&task, action, &attach, globals, printer)
}

/// `tell`/`ask` to a gateway address.
pub fn tell(
    to: &str,
    text: &str,
    expects_reply: bool,
    globals: &Globals,
    printer: &Printer,
) -> CliResult {
    send(
        SendArgs {
            to: to.to_owned(),
            text: vec![text.to_owned()],
            subject: None,
            attach: Vec::new(),
            expects_reply,
            priority: "normal".to_owned(),
            wait: None,
        },
        globals,
        printer,
    )
}

fn send(args: SendArgs, globals: &Globals, printer: &Printer) -> CliResult {
    let wait = args
        .wait
        .as_deref()
        .map(parse_duration)
        .transpose()
        .map_err(|e| {
            CliError::new(ErrorKind::Usage, e).fix("write the duration like 30s, 2m or 500ms")
        })?;
    let ctx = Ctx::open(globals, printer)?;
    let to = ctx.address(&args.to)?;
    let warnings = secret_warnings(&[("subject", args.subject.as_deref())]);
    for w in &warnings {
        printer.warning(w);
    }
    let agent = ctx.agent();
    let message = Message {
        to: to.clone(),
        text: args.text.join(" "),
        subject: args.subject,
        attach: args.attach,
        expects_reply: args.expects_reply || wait.is_some(),
        priority: Some(args.priority),
    };
    let progress = Transfer::uploads(message.attach.len(), printer.verbosity());
    let sent = ctx
        .block(agent.send(message, &progress))
        .map_err(|e| recipient_hint(&ctx, &to, e))?;
    drop(progress);
    let doc = send_doc(&sent, &warnings);
    let id = sent.id().to_owned();
    let Some(wait) = wait else {
        printer.either(&doc, &format!("sent {id} to {to}"))?;
        return Ok(ExitCode::SUCCESS);
    };
    let local = super::local::open_store()?;
    // The id at once: on stderr for people, as the first JSON line for scripts, so
    // another shell can trace the message while this one waits.
    let interrupt = Interrupt::catch(&ctx);
    announce(printer, &doc);
    // While it waits, it says how far the message got with each recipient (§5.8 receipts).
    let mut watch = super::trace::Watch::new();
    printer.commentary(&format!("sent {id} to {to}; waiting for a reply"));
    let waited = until_interrupted(
        &ctx,
        interrupt,
        agent.wait_reply(&local, &id, wait, &mut |d| {
            for line in watch.take(d) {
                printer.commentary(&line);
            }
        }),
    )?;
    let Some(reply) = waited else {
        return Err(CliError::new(
            ErrorKind::Failed,
            format!("stopped waiting (interrupted); {id} was sent and stays sent"),
        )
        .fix(format!("see what became of it: agentbus trace {id}")));
    };
    match reply {
        Some(r) => {
            let mut doc = doc;
            doc["reply"] = received_json(&r);
            doc["delivery"] = json!(watch.last());
            printer.either(&doc, &reply_text(&r))?;
            // The gateway answering instead of the recipient (undeliverable, expired) is a "no".
            let system = r
                .attr("type")
                .is_some_and(|t| t.starts_with("agentbus.system."));
            Ok(if system {
                ErrorKind::Failed.exit_code()
            } else {
                ExitCode::SUCCESS
            })
        }
        None => Err(CliError::new(
            ErrorKind::Failed,
            format!(
                "{id} was sent, but no reply arrived within {}",
                args.wait.unwrap_or_default()
            ),
        )
        .fix(format!("wait longer, or look later: agentbus trace {id}"))),
    }
}

fn reply_text(r: &Received) -> String {
    let data = r.envelope.get("data").cloned().unwrap_or(Value::Null);
    let body = data["text"]
        .as_str()
        .or_else(|| data["summary"].as_str())
        .unwrap_or("");
    let mark = if r.verified == "true" {
        ""
    } else {
        " (UNVERIFIED)"
    };
    format!(
        "reply {} from {}{mark}:\n{body}",
        r.id(),
        r.attr("source").unwrap_or("?")
    )
}

/// `reply <msg_…> <text>` over the gateway: to the message's reply_to or source, same
/// conversation, correlation_id = its id.
pub fn reply(id: &str, text: &str, globals: &Globals, printer: &Printer) -> CliResult {
    let ctx = Ctx::open(globals, printer)?;
    let id = ctx.resolve(id, Wants::Message)?;
    let sent = ctx.block(ctx.agent().reply(&id, text))?;
    printer.either(
        &send_doc(&sent, &[]),
        &format!("sent reply {} to {}", sent.id(), sent.to()),
    )?;
    Ok(ExitCode::SUCCESS)
}

fn ack(mut args: AckArgs, globals: &Globals, printer: &Printer) -> CliResult {
    let ctx = Ctx::open(globals, printer)?;
    args.id = ctx.resolve(&args.id, Wants::Message)?;
    let agent = ctx.agent();
    // §5.8: an ack.v1 is owed when the sender asked for a reply (or policy asks for read
    // receipts, which the sidecar sends by itself at the first showing); sending one to a
    // message that did not ask is allowed, and the sender is told what it means.
    let asked = agent
        .received(&args.id)
        .map_err(CliError::of)?
        .envelope
        .get("data")
        .and_then(|d| d.get("expects_reply"))
        == Some(&Value::Bool(true));
    let sent = ctx.block(agent.ack(&args.id, &args.level, args.note.as_deref()))?;
    let to = sent.to().to_owned();
    let mut doc = sent_doc(&sent, &[]);
    doc["expects_reply"] = json!(asked);
    let mut human = format!("acknowledged {} ({}) to {to}", args.id, args.level);
    if !asked {
        let note = format!(
            "{} did not ask for a reply (expects_reply is not set): this ack.v1 still reaches {to}, as an application-level acknowledgement (§5.8); nothing else changes",
            args.id
        );
        human.push_str(&format!("\nnote: {note}"));
        doc["note"] = json!(note);
    } else {
        doc["note"] = Value::Null;
    }
    printer.either(&doc, &human)?;
    Ok(ExitCode::SUCCESS)
}

fn delegate(args: DelegateArgs, globals: &Globals, printer: &Printer) -> CliResult {
    let usage =
        |e: String| CliError::new(ErrorKind::Usage, e).fix("write durations like 30s, 2m or 1h");
    let wait = args
        .wait
        .as_deref()
        .map(parse_duration)
        .transpose()
        .map_err(usage)?;
    let expires_in = args
        .expires
        .as_deref()
        .map(parse_duration)
        .transpose()
        .map_err(usage)?;
    let input = args
        .input
        .as_deref()
        .map(|i| json_object("--input", i))
        .transpose()?;
    let budget = args
        .budget
        .as_deref()
        .map(Budget::parse)
        .transpose()
        .map_err(|e| {
            CliError::new(ErrorKind::Usage, e.to_string())
                .fix("write it like --budget \"2.00 USD\"")
        })?;
    let accept_timeout = args
        .accept_timeout
        .unwrap_or(agentbus_protocol::task::DEFAULT_ACCEPT_TIMEOUT_S as u64);
    let ctx = Ctx::open(globals, printer)?;
    let to = ctx.address(&args.to)?;
    let mut warnings = secret_warnings(&[
        ("subject", args.subject.as_deref()),
        ("capability", Some(args.capability.as_str())),
        ("idempotency key", args.idempotency_key.as_deref()),
    ]);
    for w in &warnings {
        printer.warning(w);
    }
    let agent = ctx.agent();
    let delegation = Delegation {
        to: to.clone(),
        instructions: args.instructions.join(" "),
        capability: args.capability,
        capability_version: Some(args.capability_version),
        input,
        attach: args.attach,
        subject: args.subject,
        accept_timeout_s: args.accept_timeout,
        progress_timeout_s: args.progress_timeout,
        max_duration_s: args.max_duration,
        expires_in,
        idempotency_key: args.idempotency_key,
        new_task: args.new_task,
        budget,
    };
    let progress = Transfer::uploads(delegation.attach.len(), printer.verbosity());
    let d = ctx
        .block(agent.delegate(delegation, &progress))
        .map_err(|e| recipient_hint(&ctx, &to, e))?;
    drop(progress);
    if let Some(w) = offline_warning(&ctx, &to, accept_timeout) {
        printer.warning(&w);
        warnings.push(w);
    }
    let mut doc = sent_doc(&d.sent, &warnings);
    for k in ["task", "result", "failure"] {
        doc[k] = Value::Null;
    }
    // A derived idempotency key makes a repeated command the same task (§8): say so.
    let verb = if d.sent.receipt.replay {
        "already delegated (the same command ran before; pass --new-task for another)"
    } else {
        "delegated"
    };
    let Some(wait) = wait else {
        printer.either(
            &doc,
            &format!("{verb} {} (request {}) to {to}", d.task_id, d.request_id),
        )?;
        return Ok(ExitCode::SUCCESS);
    };
    let local = super::local::open_store()?;
    // The ids at once: on stderr for people, as the first JSON line for scripts, so
    // another shell can trace or cancel the task while this one waits.
    let interrupt = Interrupt::catch(&ctx);
    announce(printer, &doc);
    printer.commentary(&format!(
        "{verb} {} (request {}) to {to}; waiting for it to finish (follow it elsewhere: agentbus trace {})",
        d.task_id, d.request_id, d.task_id
    ));
    let mut line = super::progress_bar::TaskLine::new(&d.task_id, printer);
    let waited = until_interrupted(
        &ctx,
        interrupt,
        agent.wait_task(&local, &d.task_id, &d.request_id, wait, &mut |n| {
            line.news(n)
        }),
    )?;
    let state_now = line.state().to_owned();
    drop(line);
    // Ctrl-C ends the wait, not the task: it goes on at the worker.
    let Some(done) = waited else {
        return Err(CliError::new(
            ErrorKind::Failed,
            format!(
                "stopped waiting (interrupted); task {} goes on ({state_now})",
                d.task_id
            ),
        )
        .fix(format!(
            "follow it: agentbus trace {id}; stop it: agentbus cancel {id}",
            id = d.task_id
        )));
    };
    let Some((task, result)) = done else {
        return Err(CliError::new(
            ErrorKind::Failed,
            format!(
                "task {} did not finish within {}",
                d.task_id,
                args.wait.unwrap_or_default()
            ),
        )
        .fix(format!(
            "wait longer, or follow it: agentbus trace {}",
            d.task_id
        )));
    };
    let state = task.state.clone();
    let mut human = format!("task {}: {state}", d.task_id);
    let failure = result.as_ref().and_then(|r| {
        let data = r.envelope.get("data").cloned().unwrap_or(Value::Null);
        Failure::of(r.attr("type").unwrap_or_default(), &data)
    });
    if let Some(f) = &failure {
        human.push_str(&format!("\nfailure: {}", f.line()));
    }
    if let Some(r) = &result {
        let data = r.envelope.get("data").cloned().unwrap_or(Value::Null);
        // A summary the failure line already says is not said twice.
        let said = failure.as_ref().and_then(|f| f.message.as_deref());
        if let Some(s) = data["summary"].as_str().filter(|s| Some(*s) != said) {
            human.push_str(&format!("\n{s}"));
        }
        if let Some(o) = data.get("output") {
            human.push_str(&format!("\noutput: {o}"));
        }
        for a in &r.attachments {
            if let Some(p) = &a.path {
                human.push_str(&format!("\nattachment: {}", p.display()));
            }
        }
    }
    doc["task"] = json!(task);
    doc["result"] = json!(result.as_ref().map(received_json));
    doc["failure"] = json!(failure);
    printer.either(&doc, &human)?;
    Ok(if state == "succeeded" {
        ExitCode::SUCCESS
    } else {
        ErrorKind::Failed.exit_code()
    })
}

/// A warning when no worker or sidecar receives for the recipient `to`: the gateway lists it
/// offline (its inbox not read within the gateway's visibility timeout). The request stands, so
/// this only warns; a card the directory does not show, or without presence, says nothing.
fn offline_warning(ctx: &Ctx, to: &str, accept_timeout_s: u64) -> Option<String> {
    let card = if to.starts_with("agt_") {
        ctx.rt.block_on(ctx.gw.agent(to)).ok()?
    } else {
        ctx.rt
            .block_on(ctx.gw.agents())
            .ok()?
            .into_iter()
            .find(|c| c.address == to)?
    };
    if card.presence()? == "online" {
        return None;
    }
    let seen = match card.status.get("last_heartbeat_at").and_then(Value::as_str) {
        // The heartbeat is the agent's last request of any kind, not its last read.
        Some(at) => format!("last heard from {at}"),
        None => "not heard from since the gateway started".to_owned(),
    };
    Some(format!(
        "no worker or sidecar of {} is receiving ({seen}); the task waits for one and expires unless accepted within {accept_timeout_s} s: on its machine, run `agentbus work` or `agentbus sidecar`",
        card.address
    ))
}

/// What every verb that publishes prints with `--json`: the gateway's receipt with what was sent
/// where, the same receipt again as `sent` (the field a wait's document has always had), and the
/// warnings. Each verb adds its own fields, present (null) whatever its flags.
fn sent_doc(sent: &agentbus_client::agent::Sent, warnings: &[String]) -> Value {
    let mut doc = sent.summary();
    doc["sent"] = sent.summary();
    doc["warnings"] = json!(warnings);
    doc
}

/// `send`'s document (also `tell`, `ask` and `reply` to the gateway): a reply and the delivery
/// states only after a `--wait` that got one.
fn send_doc(sent: &agentbus_client::agent::Sent, warnings: &[String]) -> Value {
    let mut doc = sent_doc(sent, warnings);
    doc["reply"] = Value::Null;
    doc["delivery"] = Value::Null;
    doc
}

/// Warnings for `fields` (name, value) that match a redaction rule: an envelope's subject,
/// capability and idempotency key are read by every hop, log and trace, so §13.4 keeps secrets
/// out of them. The command still sends: the rules also match things that are not secrets.
fn secret_warnings(fields: &[(&str, Option<&str>)]) -> Vec<String> {
    fields
        .iter()
        .filter_map(|(what, value)| {
            let value = (*value)?;
            let redacted = agentbus_local::redact::redact(value);
            if redacted == value {
                return None;
            }
            let mut rules: Vec<&str> = Vec::new();
            for rule in redacted
                .split(agentbus_local::redact::MARK)
                .skip(1)
                .filter_map(|rest| rest.strip_prefix(':')?.split(']').next())
            {
                if !rules.contains(&rule) {
                    rules.push(rule);
                }
            }
            Some(format!(
                "the {what} looks like it holds a secret ({}): gateways, logs and traces read it in the clear (§13.4); keep secrets out of subjects, capabilities and idempotency keys, and rotate this one if it is real",
                rules.join(", ")
            ))
        })
        .collect()
}

/// The first line of a wait: with `--json` the command's document as it stands before the wait,
/// on one line (the whole document follows when the wait ends), else nothing here (the
/// commentary says it on stderr).
fn announce(printer: &Printer, doc: &Value) {
    if printer.is_json() {
        let _ = printer.data_line(&doc.to_string());
    }
}

/// Ctrl-C (SIGINT) caught from now on: made before a wait says its ids, so an interrupt that
/// follows them at once still ends only the wait.
#[cfg(unix)]
struct Interrupt(Option<tokio::signal::unix::Signal>);

#[cfg(unix)]
impl Interrupt {
    fn catch(ctx: &Ctx) -> Interrupt {
        let _in = ctx.rt.enter();
        Interrupt(tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()).ok())
    }

    async fn wait(&mut self) {
        match self.0.as_mut() {
            Some(s) => {
                s.recv().await;
            }
            None => std::future::pending().await,
        }
    }
}

/// Ctrl-C caught while a wait runs (elsewhere than Unix, from its first moment).
#[cfg(not(unix))]
struct Interrupt;

#[cfg(not(unix))]
impl Interrupt {
    fn catch(_: &Ctx) -> Interrupt {
        Interrupt
    }

    async fn wait(&mut self) {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Runs a wait until it ends or the user interrupts it (Ctrl-C, SIGINT): `None` when
/// interrupted. Only the wait stops; whatever it waits for goes on elsewhere.
fn until_interrupted<T>(
    ctx: &Ctx,
    mut interrupt: Interrupt,
    wait: impl std::future::Future<Output = Result<T, ClientError>>,
) -> Result<Option<T>, CliError> {
    ctx.rt.block_on(async {
        tokio::select! {
            r = wait => r.map(Some).map_err(CliError::of),
            _ = interrupt.wait() => Ok(None),
        }
    })
}

/// Sends a task lifecycle message (§6.2) and prints its receipt.
fn lifecycle(
    task: &str,
    action: TaskAction,
    attach: &[PathBuf],
    globals: &Globals,
    printer: &Printer,
) -> CliResult {
    let ctx = Ctx::open(globals, printer)?;
    let task = &ctx.resolve(task, Wants::Task)?;
    let progress = Transfer::uploads(attach.len(), printer.verbosity());
    let acted = ctx
        .block(ctx.agent().act(task, action, attach, &progress))
        .map_err(|e| {
            if e.kind == ErrorKind::Refused && task.starts_with("tsk_") {
                e.fix("check the task id: `agentbus trace <id>` shows the tasks you are a party of")
            } else {
                e
            }
        })?;
    // The gateway stores a late or ignored lifecycle message but applies nothing (§6.3): that
    // is not success, and the receipt says which it was and the task's state.
    let receipt = &acted.sent.receipt.body;
    let state = receipt.task_state.as_deref().unwrap_or("?");
    let refused = if receipt.late == Some(true) {
        Some(format!("it arrived after the task had ended ({state})"))
    } else if receipt.ignored == Some(true) {
        Some(format!("a {state} task takes no {}", acted.verb))
    } else {
        None
    };
    if let Some(why) = refused {
        let e = CliError::new(
            ErrorKind::Failed,
            format!(
                "{} for {} was recorded but changed nothing: {why}",
                acted.verb, acted.task_id
            ),
        )
        .fix(format!(
            "see what happened to the task: agentbus trace {}",
            acted.task_id
        ));
        if printer.is_json() {
            // The receipt is still printed: the envelope was stored.
            let mut doc = sent_doc(&acted.sent, &[]);
            doc["error"] = json!({"kind": "failed", "message": e.message, "fix": e.fix});
            printer.json(&doc)?;
            return Ok(ErrorKind::Failed.exit_code());
        }
        return Err(e);
    }
    let mut doc = sent_doc(&acted.sent, &[]);
    doc["error"] = Value::Null;
    printer.either(
        &doc,
        &format!(
            "sent {} for {} to {} (task {state})",
            acted.verb,
            acted.task_id,
            acted.sent.to()
        ),
    )?;
    Ok(ExitCode::SUCCESS)
}

/// `inbox --show <msg_…>`: one received envelope with what the receiver found.
pub fn show(id: &str, globals: &Globals, printer: &Printer) -> CliResult {
    let ctx = Ctx::open(globals, printer)?;
    let id = ctx.resolve(id, Wants::Message)?;
    let r = ctx.agent().received(&id).map_err(CliError::of)?;
    let answer = agentbus_client::agent::answer_of(&r, &ctx.profile.name);
    let expired = agentbus_client::agent::expired_at(&r);
    if printer.is_json() {
        let mut doc = received_json(&r);
        doc["answer"] = json!(answer);
        doc["expired_at"] = json!(expired.map(|t| t.to_string()));
        // `inbox --show` prints `inbox`'s document: the one item, with its envelope and
        // diagnostics beside the list's fields.
        let engineer = agentbus_local::view::engineer_by(super::local::engineer_email().as_deref());
        printer.json(&json!({"engineer": engineer, "items": [doc]}))?;
        return Ok(ExitCode::SUCCESS);
    }
    let env = agentbus_protocol::envelope::Envelope::from_map(r.envelope.clone());
    let mut text = format!(
        "id:           {}\nfrom:         {}\nto:           {}\ntype:         {}\nconversation: {}\n",
        r.id(),
        r.attr("source").unwrap_or("?"),
        r.attr("to").unwrap_or("?"),
        r.attr("type").unwrap_or("?"),
        r.attr("conversation_id").unwrap_or("?"),
    );
    if let Some(c) = r.attr("correlation_id") {
        text.push_str(&format!("answers:      {c}\n"));
    }
    if let Some(s) = r.attr("subject") {
        text.push_str(&format!("subject:      {s}\n"));
    }
    text.push_str(&format!(
        "sent:         {}\n",
        r.attr("time").unwrap_or("?")
    ));
    text.push_str(&format!("verified:     {}\n", r.verified));
    if let Some(t) = &r.task {
        text.push_str(&format!(
            "task:         {t}{}\n",
            if r.late {
                " (late: after the task ended)"
            } else {
                ""
            }
        ));
    }
    if let Some(at) = expired {
        text.push_str(&format!(
            "expired:      {at}: the request was not accepted in time; no verb changes the task\n"
        ));
    }
    if let Some(cmd) = &answer {
        text.push_str(&format!(
            "to answer:    {}\n",
            agentbus_protocol::text::for_terminal_line(cmd)
        ));
    }
    if let Some(h) = &r.held {
        text.push_str(&format!(
            "held:         {h}: kept from the agent's sessions\n"
        ));
    }
    for d in &r.diagnostics {
        text.push_str(&format!("diagnostic:   {} {}\n", d.code, d.message));
    }
    for a in &r.attachments {
        match &a.path {
            Some(p) => text.push_str(&format!("attachment:   {}\n", p.display())),
            None => text.push_str(&format!("attachment:   {} (not downloaded)\n", a.name)),
        }
    }
    text.push('\n');
    text.push_str(&agentbus_protocol::frame::envelope_body(&env));
    printer.line(&text)?;
    Ok(ExitCode::SUCCESS)
}
