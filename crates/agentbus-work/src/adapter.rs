//! What a harness adapter is: it starts a harness on a [`Job`] and reports what the harness does
//! as [`Event`]s, and takes [`Control`]s (an answer to its question, an interrupt) back.
//! Adapters speak the harness's own protocol; the worker speaks AgentBus.

use std::path::PathBuf;
use std::process::Stdio;

use serde_json::Value;
use std::future::Future;

use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::error::WorkError;
use crate::job::{Job, Usage};

/// What the harness did.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// The harness started working (its session, when it names one).
    Started {
        /// The harness's session id.
        session: Option<String>,
    },
    /// The harness did something (a message, a tool call): grounds for a heartbeat.
    Activity {
        /// One line about it.
        note: String,
    },
    /// The harness asks the requester and waits for the answer.
    Question {
        /// The question.
        question: String,
        /// Fixed choices, if any.
        options: Vec<String>,
    },
    /// The harness asks the requester without waiting (§7: a clarifying `message.v1`).
    Clarify {
        /// The question.
        text: String,
    },
    /// The harness's own usage event.
    Usage(Usage),
    /// The harness's final answer.
    Finished(Finish),
    /// The harness reported that it failed.
    Failed {
        /// A failure code.
        code: String,
        /// What it said.
        message: String,
    },
    /// The turn stopped on the worker's interrupt.
    Interrupted,
    /// The harness ended without a final answer (it crashed or was killed).
    Exited {
        /// How it ended, and the tail of what it wrote to stderr.
        why: String,
    },
}

/// A final answer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Finish {
    /// What was done.
    pub summary: Option<String>,
    /// The structured output.
    pub output: Option<Value>,
    /// Files the harness named for the result.
    pub files: Vec<PathBuf>,
}

/// The requester's answer to the harness's open question (a `task.input`), as a harness is given
/// it.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// The answer as the requester sent it: data for a program (the generic command's `answer`),
    /// never put in a model's context as it is.
    pub text: String,
    /// The `task.input` framed as data (§13.1, [`crate::job::framed`]): what a model is given, so
    /// the requester's words never read as its user's.
    pub framed: String,
}

/// What the worker tells a running harness.
#[derive(Debug, Clone, PartialEq)]
pub enum Control {
    /// The requester's answer to the open question.
    Answer(Answer),
    /// Stop the running turn (a `task.cancel`, §6.2).
    Interrupt,
    /// A reply to the harness's clarifying question, framed as data (§13.1).
    Message(String),
}

/// A running harness: its events, and where to send controls. Dropping it kills the harness.
#[derive(Debug)]
pub struct Running {
    /// What the harness does; closed when its driver ends.
    pub events: mpsc::UnboundedReceiver<Event>,
    /// Controls for it.
    pub control: mpsc::UnboundedSender<Control>,
}

/// A harness adapter.
pub trait Adapter: Send + Sync {
    /// Its name (`claude`, `command`).
    fn name(&self) -> &'static str;
    /// Starts the harness on `job` (inside a tokio runtime); `Err` when it cannot start.
    fn start(&self, job: &Job) -> Result<Running, WorkError>;
}

/// A program to run and the arguments that come before the adapter's own.
#[derive(Debug, Clone)]
pub struct Program {
    /// The executable.
    pub program: String,
    /// Arguments first on its command line.
    pub args: Vec<String>,
}

impl Program {
    /// Spawns it in the job's folder with all three pipes, killed when its handle drops.
    pub(crate) fn spawn(&self, job: &Job, more: &[String]) -> Result<Child, WorkError> {
        let fail = |why: String| WorkError::Spawn {
            program: self.program.clone(),
            why,
        };
        std::fs::create_dir_all(&job.out_dir).map_err(|e| fail(e.to_string()))?;
        Command::new(&self.program)
            .args(&self.args)
            .args(more)
            .current_dir(&job.dir)
            .env("AGENTBUS_TASK_ID", &job.task_id)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| fail(e.to_string()))
    }
}

/// Runs an adapter's driver on fresh channels: it sends [`Event`]s and takes [`Control`]s.
pub(crate) fn launch<F, Fut>(drive: F) -> Running
where
    F: FnOnce(mpsc::UnboundedSender<Event>, mpsc::UnboundedReceiver<Control>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let (tx, events) = mpsc::unbounded_channel();
    let (control, rx) = mpsc::unbounded_channel();
    tokio::spawn(drive(tx, rx));
    Running { events, control }
}

/// A line-protocol harness's pipes: stdin to write, stdout's lines, stderr kept for the reason
/// of a crash.
pub(crate) struct Pipes {
    /// The harness's stdin.
    pub stdin: ChildStdin,
    /// Its stdout, line by line.
    pub lines: Lines<BufReader<ChildStdout>>,
    errors: JoinHandle<String>,
}

impl Pipes {
    /// Takes the pipes of a child spawned by [`Program::spawn`].
    pub(crate) fn take(child: &mut Child) -> Option<Pipes> {
        let (stdin, stdout, mut stderr) = (
            child.stdin.take()?,
            child.stdout.take()?,
            child.stderr.take()?,
        );
        let errors = tokio::spawn(async move {
            let mut s = String::new();
            let _ = stderr.read_to_string(&mut s).await;
            s
        });
        Some(Pipes {
            stdin,
            lines: BufReader::new(stdout).lines(),
            errors,
        })
    }

    /// How `what` ended when its stdout closed before its last word: interrupted, or exited
    /// with its status and the tail of its stderr.
    pub(crate) async fn ended(self, child: &mut Child, interrupting: bool, what: &str) -> Event {
        drop(self.stdin);
        let status = child
            .wait()
            .await
            .map(|s| s.to_string())
            .unwrap_or_default();
        let err = self.errors.await.unwrap_or_default();
        if interrupting {
            Event::Interrupted
        } else {
            Event::Exited {
                why: format!(
                    "{what} exited ({status}) before its result: {}",
                    tail(&err, 5)
                ),
            }
        }
    }
}

/// Writes one JSON line.
pub(crate) async fn write_line(stdin: &mut ChildStdin, v: &Value) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(v).unwrap_or_default();
    line.push(b'\n');
    stdin.write_all(&line).await?;
    stdin.flush().await
}

/// At most `max` characters of the first non-empty line of `s`.
pub(crate) fn one_line(s: &str, max: usize) -> String {
    let line = s
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    line.chars().take(max).collect()
}

/// The last `n` lines of `s`, for a failure message.
pub(crate) fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Files the harness wrote into the job's `out` folder, sorted by name.
pub fn out_files(job: &Job) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(&job.out_dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

/// A JSON object in a final answer: the whole text, else its last fenced `json` block.
pub(crate) fn json_in(text: &str) -> Option<Value> {
    if let Ok(v @ Value::Object(_)) = serde_json::from_str::<Value>(text.trim()) {
        return Some(v);
    }
    let start = text.rfind("```json")? + "```json".len();
    let end = text[start..].find("```")? + start;
    serde_json::from_str::<Value>(text[start..end].trim())
        .ok()
        .filter(Value::is_object)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_output_is_the_answer_or_its_last_json_block() {
        assert_eq!(json_in(r#" {"a": 1} "#), Some(json!({"a": 1})));
        assert_eq!(
            json_in("Done.\n```json\n{\"a\": 1}\n```\nthen\n```json\n{\"b\": 2}\n```"),
            Some(json!({"b": 2}))
        );
        assert_eq!(json_in("no json here"), None);
        assert_eq!(json_in("```json\n[1]\n```"), None);
    }
}
