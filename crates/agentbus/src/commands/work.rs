//! `agentbus work`: a headless worker for the connected agent. The loop and the harness adapters
//! are `agentbus-work` (`docs/work.md`); this is argument parsing and wiring.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, ValueEnum};
use serde_json::Value;

use agentbus_protocol::Code;
use agentbus_runtime::SystemClock;
use agentbus_work::adapter::Program;
use agentbus_work::claude::ClaudeCode;
use agentbus_work::codex::Codex;
use agentbus_work::command::CommandAdapter;
use agentbus_work::opencode::OpenCode;
use agentbus_work::{Adapter, Settings, Worker};

use super::local::open_store;
use super::profile::{Ctx, parse_duration};
use crate::cli::Globals;
use crate::error::{CliError, CliResult, ErrorKind};
use crate::printer::Printer;

/// The harnesses a worker drives.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum HarnessKind {
    /// Claude Code in headless stream-json mode (`claude -p --input-format stream-json …`).
    Claude,
    /// Codex through its app server (`codex app-server`, JSON-RPC over stdio).
    Codex,
    /// OpenCode through its server (`opencode serve`, HTTP and server-sent events on loopback).
    Opencode,
    /// Any command: the task as JSON on stdin, the result as JSON on stdout, progress on stderr.
    Command,
}

/// Arguments of `work`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  agentbus work --harness claude --arg=--permission-mode --arg=acceptEdits\n  agentbus --profile ci-bot work --harness command --program ./review.sh --capability code.review@1 --concurrency 4\n\n\
One worker per agent; it receives for the agent itself unless a sidecar does. Stop it with SIGINT or \
SIGTERM: running turns are interrupted and their tasks failed as retryable. After a crash or kill -9, \
the next start fails the tasks left in flight (worker_restarted). See docs/work.md."
)]
pub struct WorkArgs {
    /// The harness to drive.
    #[arg(long, value_enum)]
    harness: HarnessKind,
    /// The program to run (default: `claude`, `codex` or `opencode` on PATH; required for command).
    #[arg(long, value_name = "PATH")]
    program: Option<String>,
    /// An argument put before the adapter's own (repeatable), e.g. --arg=--model --arg=opus.
    #[arg(long = "arg", value_name = "ARG", allow_hyphen_values = true)]
    args: Vec<String>,
    /// How many tasks run at once.
    #[arg(long, default_value_t = 1, value_name = "N")]
    concurrency: usize,
    /// The least time between two heartbeats of a task (its harness's activity sends them).
    #[arg(long, default_value = "30s", value_parser = parse_duration, value_name = "DURATION")]
    heartbeat: Duration,
    /// Serve only this capability of the card, as name[@major] (repeatable; default: all).
    #[arg(long = "capability", value_name = "NAME[@MAJOR]")]
    capabilities: Vec<String>,
    /// Where each task's working folder is made (default: <agent state>/work).
    #[arg(long, value_name = "DIR")]
    work_dir: Option<PathBuf>,
}

/// Runs the worker until SIGINT or SIGTERM.
pub fn run(args: WorkArgs, globals: &Globals, printer: &Printer) -> CliResult {
    let ctx = Ctx::open(globals, printer)?;
    let agent = ctx.agent();
    let local = open_store()?;
    if args.concurrency == 0 {
        return Err(
            CliError::input("--concurrency must be at least 1").fix("pass --concurrency 1 or more")
        );
    }
    let default = match args.harness {
        HarnessKind::Claude => "claude",
        HarnessKind::Codex => "codex",
        HarnessKind::Opencode => "opencode",
        HarnessKind::Command => {
            if args.program.is_none() {
                return Err(
                    CliError::new(ErrorKind::Usage, "--harness command needs --program")
                        .fix("pass --program <path> (and its arguments with --arg)"),
                );
            }
            ""
        }
    };
    // Each task's harness runs in the task's folder: a relative --program is read here, against
    // the folder the worker was started in, and checked once rather than failing every task.
    let named = args.program.as_deref().unwrap_or(default);
    let program = resolve_program(named, std::env::current_dir().ok().as_deref())
        .map_err(|why| harness_missing(args.harness, named, &why))?
        .display()
        .to_string();
    let program = Program {
        program,
        args: args.args,
    };
    let adapter: Arc<dyn Adapter> = match args.harness {
        HarnessKind::Claude => Arc::new(ClaudeCode { program }),
        HarnessKind::Codex => Arc::new(Codex { program }),
        HarnessKind::Opencode => Arc::new(OpenCode { program }),
        HarnessKind::Command => Arc::new(CommandAdapter { program }),
    };
    let capabilities = args
        .capabilities
        .iter()
        .map(|c| match c.split_once('@') {
            Some((n, v)) => (n.to_owned(), v.to_owned()),
            None => (c.clone(), "1".to_owned()),
        })
        .collect();
    let work_dir = args.work_dir.unwrap_or_else(|| {
        agent
            .profiles
            .agent_dir(&agent.profile.agent_id)
            .join("work")
    });
    let settings = Settings {
        concurrency: args.concurrency,
        heartbeat: args.heartbeat,
        capabilities,
        work_dir,
    };
    let json_out = printer.is_json();
    // One line per event: JSON lines with --json, else a short human line. Written as they come,
    // from the tasks' threads, so not through the printer.
    let notify = Arc::new(move |v: Value| {
        use std::io::Write as _;
        let line = if json_out { v.to_string() } else { human(&v) };
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    });
    if !json_out {
        printer.line(&format!(
            "worker for {} ({}), {} harness, concurrency {}",
            agent.profile.address,
            agent.profile.gateway,
            adapter.name(),
            settings.concurrency
        ))?;
    }
    let worker = Worker::new(
        agent,
        local,
        adapter,
        settings,
        Arc::new(SystemClock),
        notify,
    );
    ctx.rt
        .block_on(worker.run(stopped()))
        .map_err(CliError::of)?;
    Ok(ExitCode::SUCCESS)
}

/// The harness program as the worker runs it: a name with a `/` read against `cwd` (the folder
/// the worker was started in), a bare name looked up on `PATH`; an executable file, or why not.
fn resolve_program(named: &str, cwd: Option<&Path>) -> Result<PathBuf, String> {
    use std::os::unix::fs::PermissionsExt as _;
    let runnable = |p: &Path| {
        std::fs::metadata(p)
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    };
    if named.is_empty() {
        return Err("no program was named".into());
    }
    if named.contains('/') {
        let path = match cwd {
            Some(cwd) => cwd.join(named),
            None => PathBuf::from(named),
        };
        return match std::fs::metadata(&path) {
            Err(e) => Err(format!("{}: {e}", path.display())),
            Ok(_) if !runnable(&path) => {
                Err(format!("{} is not an executable file", path.display()))
            }
            Ok(_) => Ok(path),
        };
    }
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|dir| match cwd {
            Some(cwd) if dir.is_relative() => cwd.join(dir).join(named),
            _ => dir.join(named),
        })
        .find(|p| runnable(p))
        .ok_or_else(|| "it is not on PATH".into())
}

/// The refusal when the harness program cannot be run (AB-4102).
fn harness_missing(harness: HarnessKind, named: &str, why: &str) -> CliError {
    let name = match harness {
        HarnessKind::Claude => "claude",
        HarnessKind::Codex => "codex",
        HarnessKind::Opencode => "opencode",
        HarnessKind::Command => "command",
    };
    CliError::new(
        ErrorKind::Config,
        format!("cannot run the harness program {named}: {why}"),
    )
    .code(Code::HarnessMissing)
    .fix(format!(
        "install it, or pass its path: agentbus work --harness {name} --program /path/to/program"
    ))
}

/// Completes on SIGINT or SIGTERM.
async fn stopped() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}

/// An event as a human reads it.
fn human(v: &Value) -> String {
    let s = |k: &str| v[k].as_str().unwrap_or_default();
    match s("event") {
        "sent" if v.get("code").is_some() => format!(
            "{} {} failed: {}: {} ({})",
            s("task_id"),
            s("type"),
            s("code"),
            s("message"),
            s("id")
        ),
        "sent" => format!("{} {} ({})", s("task_id"), s("type"), s("id")),
        "killed" => format!(
            "{} killed: a process of the harness outlived SIGTERM",
            s("task_id")
        ),
        "error" => format!("error: {} {}", s("task_id"), s("message")).replace("  ", " "),
        e => format!("{} {e}", s("task_id")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn events_read_as_one_line() {
        let sent =
            json!({"event": "sent", "task_id": "tsk_1", "type": "task.accept", "id": "msg_1"});
        assert_eq!(human(&sent), "tsk_1 task.accept (msg_1)");
        assert_eq!(
            human(&json!({"event": "queued", "task_id": "tsk_1"})),
            "tsk_1 queued"
        );
        // A failed result names its failure, not only the message id.
        let failed = json!({"event": "sent", "task_id": "tsk_1", "type": "task.result", "id": "msg_2",
            "status": "failed", "code": "harness_crashed", "message": "Claude Code exited (exit status: 3)"});
        assert_eq!(
            human(&failed),
            "tsk_1 task.result failed: harness_crashed: Claude Code exited (exit status: 3) (msg_2)"
        );
    }

    #[test]
    fn programs_are_read_against_the_starting_folder_and_checked() {
        use std::os::unix::fs::PermissionsExt as _;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let script = dir.join("review.sh");
        std::fs::write(&script, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(
            resolve_program("./review.sh", Some(dir)).unwrap(),
            dir.join("./review.sh")
        );
        let abs = script.display().to_string();
        assert_eq!(resolve_program(&abs, Some(Path::new("/"))).unwrap(), script);
        let missing = resolve_program("./nope.sh", Some(dir)).unwrap_err();
        assert!(missing.contains("nope.sh"), "{missing}");
        std::fs::write(dir.join("plain.txt"), "").unwrap();
        let plain = resolve_program("./plain.txt", Some(dir)).unwrap_err();
        assert!(plain.contains("not an executable"), "{plain}");
        assert!(resolve_program("sh", Some(dir)).unwrap().is_absolute());
        assert_eq!(
            resolve_program("no-such-harness-anywhere", Some(dir)).unwrap_err(),
            "it is not on PATH"
        );
    }
}
