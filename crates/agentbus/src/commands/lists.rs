//! `agentbus tasks` and `agentbus sent`: what this agent is a party of and what became of what it
//! sent, read from the gateway (`GET /v1/tasks`, `GET /v1/messages/sent`). The work is in
//! `agentbus-client`; this module parses and prints.

use std::process::ExitCode;

use clap::{Args, ValueEnum};
use serde_json::json;

use agentbus_client::agent::{MyTask, Side};

use super::profile::Ctx;
use super::trace::recipients_text;
use crate::cli::Globals;
use crate::error::{CliError, CliResult, ErrorKind};
use crate::printer::Printer;

/// Which of its tasks an agent lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Role {
    /// Every task this agent is a party of.
    Any,
    /// Tasks this agent delegated.
    Requester,
    /// Tasks this agent works.
    Worker,
}

/// Arguments of `tasks`.
#[derive(Debug, Args)]
pub struct TasksArgs {
    /// Only tasks this agent delegated (requester) or works (worker).
    #[arg(long = "as", value_enum, default_value = "any", value_name = "ROLE")]
    role: Role,
    /// Only tasks in this state: submitted, accepted, in_progress, needs_input, succeeded,
    /// failed, rejected, expired, cancelled (input_required is taken for needs_input).
    #[arg(long)]
    state: Option<String>,
    /// Most tasks to list (1-1000).
    #[arg(long, default_value = "50")]
    limit: u32,
    /// Continue after this cursor (the `next` of an earlier `--json` page).
    #[arg(long, value_name = "CURSOR")]
    before: Option<String>,
}

/// Arguments of `sent`.
#[derive(Debug, Args)]
pub struct SentArgs {
    /// Most messages to list (1-100).
    #[arg(long, default_value = "20")]
    limit: u32,
    /// Continue after this cursor (the `next` of an earlier `--json` page).
    #[arg(long, value_name = "CURSOR")]
    before: Option<String>,
}

/// The task states of §6, checked here so a typo stops before any request.
const STATES: [&str; 9] = [
    "submitted",
    "accepted",
    "in_progress",
    "needs_input",
    "succeeded",
    "failed",
    "rejected",
    "expired",
    "cancelled",
];

/// Names of states that shipped before the protocol's own, taken for it.
const STATE_ALIASES: [(&str, &str); 1] = [("input_required", "needs_input")];

/// `agentbus tasks`.
pub fn tasks(mut args: TasksArgs, globals: &Globals, printer: &Printer) -> CliResult {
    if let Some((_, state)) = STATE_ALIASES
        .iter()
        .find(|(alias, _)| args.state.as_deref() == Some(*alias))
    {
        args.state = Some((*state).to_owned());
    }
    if let Some(s) = &args.state
        && !STATES.contains(&s.as_str())
    {
        let near = agentbus_client::suggest::closest(s, STATES.iter().copied());
        return Err(
            CliError::new(ErrorKind::Usage, format!("{s:?} is not a task state")).fix(match near {
                Some(n) => format!(
                    "did you mean --state {n}? the states: {}",
                    STATES.join(", ")
                ),
                None => format!("pass one of: {}", STATES.join(", ")),
            }),
        );
    }
    let side = match args.role {
        Role::Any => Side::Any,
        Role::Requester => Side::Requester,
        Role::Worker => Side::Worker,
    };
    let ctx = Ctx::open(globals, printer)?;
    let (tasks, next) = ctx.block(ctx.agent().tasks(
        side,
        args.state.as_deref(),
        args.limit.clamp(1, 1000),
        args.before.as_deref(),
    ))?;
    if printer.is_json() {
        printer.json(&json!({"tasks": tasks, "next": next}))?;
        return Ok(ExitCode::SUCCESS);
    }
    if tasks.is_empty() {
        printer.line("no tasks")?;
        return Ok(ExitCode::SUCCESS);
    }
    let lines: Vec<String> = tasks.iter().map(task_line).collect();
    printer.line(&lines.join("\n"))?;
    if next.is_some() {
        printer.commentary("more tasks: raise --limit, or page with --json and --before <next>");
    }
    Ok(ExitCode::SUCCESS)
}

/// One task for people: id, state, capability, the other party, and the verbs that apply now.
pub fn task_line(mine: &MyTask) -> String {
    let t = &mine.task;
    let worker = mine.role == "worker";
    let (rel, other) = if worker {
        ("from", &t.requester)
    } else {
        ("to", &t.recipient)
    };
    let other = other.address.as_deref().unwrap_or(&other.id);
    let mut line = format!(
        "{}  {:<14} {}  {} {rel} {other}  updated {}",
        t.id,
        t.state,
        t.capability,
        if worker { "worker" } else { "requester" },
        t.updated_at,
    );
    if let Some(f) = &mine.failure {
        line.push_str(&format!("\n    failure: {}", f.line()));
    }
    if let Some(now) = now_line(&t.id, mine.verbs) {
        line.push_str(&format!("\n    now: {now}"));
    }
    line
}

/// The commands that apply now to task `id`, one per verb (`agentbus answer tsk_… "<your answer>"`
/// with the text a verb needs), or `None` when no verb applies.
pub fn now_line(id: &str, verbs: &[&str]) -> Option<String> {
    (!verbs.is_empty()).then(|| {
        verbs
            .iter()
            .map(|v| match *v {
                "answer" => format!("agentbus answer {id} \"<your answer>\""),
                "needs-input" => format!("agentbus needs-input {id} \"<question>\""),
                "fail" => format!("agentbus fail {id} --message \"<why>\""),
                v => format!("agentbus {v} {id}"),
            })
            .collect::<Vec<_>>()
            .join(" | ")
    })
}

/// `agentbus sent`.
pub fn sent(args: SentArgs, globals: &Globals, printer: &Printer) -> CliResult {
    let ctx = Ctx::open(globals, printer)?;
    let agentbus_api::SentMessages { messages, next } = ctx.block(
        ctx.gw
            .sent(args.limit.clamp(1, 100), args.before.as_deref()),
    )?;
    if printer.is_json() {
        printer.json(&json!({"messages": messages, "next": next}))?;
        return Ok(ExitCode::SUCCESS);
    }
    if messages.is_empty() {
        printer.line("nothing sent yet")?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut out = Vec::new();
    for m in &messages {
        let mut text = format!(
            "{}  {} to {}  at {}",
            m.id,
            m.kind.trim_start_matches("agentbus."),
            m.to,
            m.persisted_at,
        );
        if let Some(t) = &m.task_id {
            text.push_str(&format!("  task {t}"));
        }
        text.push_str(&recipients_text(m));
        out.push(text);
    }
    printer.line(&out.join("\n"))?;
    if next.is_some() {
        printer
            .commentary("older messages: raise --limit, or page with --json and --before <next>");
    }
    Ok(ExitCode::SUCCESS)
}
