//! What a harness adapter is: it starts a harness on a [`Job`] and reports what the harness does
//! as [`Event`]s, and takes [`Control`]s (an answer to its question, an interrupt) back.
//! Adapters speak the harness's own protocol; the worker speaks AgentBus.

use std::future::Future;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustix::process::{Pid, Signal};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use agentbus_runtime::Clock;

use crate::error::WorkError;
use crate::job::{Job, Usage};

/// How long a harness has, after its own interrupt, to end its turn before its process group is
/// sent SIGTERM (a cancel is answered within seconds, whatever the harness does).
pub const INTERRUPT_GRACE_MS: i64 = 3_000;
/// How long a harness's process group has, after SIGTERM, before SIGKILL.
pub const KILL_GRACE_MS: i64 = 2_000;
/// How often a wait on a grace looks at the clock and the group.
const TICK: Duration = Duration::from_millis(50);
/// How long the output a harness left in its pipes is read once it has exited: a process it
/// started may hold the pipes open for as long as it lives, so their end is not waited for.
pub(crate) const DRAIN: Duration = Duration::from_millis(500);

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

impl Event {
    /// Whether this is the turn's last event.
    pub fn is_end(&self) -> bool {
        matches!(
            self,
            Event::Finished(_) | Event::Failed { .. } | Event::Interrupted | Event::Exited { .. }
        )
    }
}

/// A running harness: its events, where to send controls, and its process group. Dropping it
/// stops its driver, which kills the harness.
#[derive(Debug)]
pub struct Running {
    /// What the harness does; closed when its driver ends.
    pub events: mpsc::UnboundedReceiver<Event>,
    /// Controls for it.
    pub control: mpsc::UnboundedSender<Control>,
    /// The harness's process group, when it runs as a process of its own.
    pub group: Option<Group>,
    driver: JoinHandle<()>,
}

impl Drop for Running {
    fn drop(&mut self) {
        // A driver may wait on pipes that a leftover process holds; its child is killed on drop.
        self.driver.abort();
    }
}

/// How a halted harness ended.
#[derive(Debug, Default)]
pub struct Halted {
    /// The events it sent after the interrupt, its last one included when its turn ended in
    /// the grace.
    pub events: Vec<Event>,
    /// Whether its turn ended on the interrupt within the grace.
    pub turn_ended: bool,
    /// Whether a process of its group outlived SIGTERM and was killed.
    pub killed: bool,
}

impl Running {
    /// Stops the harness: its own interrupt first (a turn it can end cleanly), then, once the
    /// turn has ended or [`INTERRUPT_GRACE_MS`] has passed on `clock`, its whole process group
    /// ([`Running::end_group`]). Never waits on the harness's pipes, so it returns within the
    /// graces whatever the harness and its children do.
    pub async fn halt(&mut self, clock: &dyn Clock) -> Halted {
        // The harnesses run their tools in sessions of their own, and a tool's process that
        // outlives the harness's own stop is no longer theirs to find once its parent is gone:
        // the processes descended from the harness are noted before the interrupt.
        let strays = self.group.map(|g| descendants(g.id())).unwrap_or_default();
        let _ = self.control.send(Control::Interrupt);
        let since = clock.now().millis();
        let mut halted = Halted::default();
        while clock.now().millis() - since < INTERRUPT_GRACE_MS {
            tokio::select! {
                ev = self.events.recv() => match ev {
                    Some(ev) => {
                        let end = ev.is_end();
                        halted.events.push(ev);
                        if end {
                            halted.turn_ended = true;
                            break;
                        }
                    }
                    None => break,
                },
                _ = tokio::time::sleep(TICK) => {}
            }
        }
        halted.killed = self.end(&strays, clock).await;
        halted
    }

    /// Ends the harness's process group, and the processes it had started that are still
    /// descended from it: SIGTERM, then SIGKILL when one of them is still there after
    /// [`KILL_GRACE_MS`] on `clock`. True when SIGKILL was sent. A process that has already left
    /// both (a new session whose parent has exited) is out of reach.
    pub async fn end_group(&self, clock: &dyn Clock) -> bool {
        let strays = self.group.map(|g| descendants(g.id())).unwrap_or_default();
        self.end(&strays, clock).await
    }

    async fn end(&self, strays: &[Stray], clock: &dyn Clock) -> bool {
        let Some(group) = self.group else {
            return false;
        };
        let alive = || group.alive() || strays.iter().any(Stray::alive);
        let signal = |s: Signal| {
            group.signal(s);
            for stray in strays {
                stray.signal(s);
            }
        };
        if !alive() {
            return false;
        }
        signal(Signal::TERM);
        let since = clock.now().millis();
        loop {
            if !alive() {
                return false;
            }
            if clock.now().millis() - since >= KILL_GRACE_MS {
                signal(Signal::KILL);
                return true;
            }
            tokio::time::sleep(TICK).await;
        }
    }
}

/// A process descended from a harness, known by its id and start time (a reused id is never
/// signalled).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Stray {
    pid: i32,
    started: u64,
}

impl Stray {
    /// Whether it still runs (not reaped, not a zombie, not a new process with its id).
    fn alive(&self) -> bool {
        stat(self.pid).is_some_and(|s| s.started == self.started && s.state != 'Z')
    }

    fn signal(&self, signal: Signal) {
        if self.alive()
            && let Some(pid) = Pid::from_raw(self.pid)
        {
            let _ = rustix::process::kill_process(pid, signal);
        }
    }
}

/// What `/proc/<pid>/stat` says of a process.
struct Stat {
    state: char,
    ppid: i32,
    started: u64,
}

/// A process's `/proc` record (Linux; elsewhere none, and only the group is reached).
fn stat(pid: i32) -> Option<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command's name may hold spaces and parentheses: the fields follow the last ')'.
    let rest: Vec<&str> = text.rsplit_once(')')?.1.split_whitespace().collect();
    Some(Stat {
        state: rest.first()?.chars().next()?,
        ppid: rest.get(1)?.parse().ok()?,
        started: rest.get(19)?.parse().ok()?,
    })
}

/// The processes descended from `root`, now.
fn descendants(root: i32) -> Vec<Stray> {
    let mut children: std::collections::HashMap<i32, Vec<(i32, u64)>> = Default::default();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if let Some(s) = stat(pid) {
            children.entry(s.ppid).or_default().push((pid, s.started));
        }
    }
    let mut found = Vec::new();
    let mut next = vec![root];
    while let Some(parent) = next.pop() {
        for &(pid, started) in children.get(&parent).into_iter().flatten() {
            found.push(Stray { pid, started });
            next.push(pid);
        }
    }
    found
}

/// A harness's process group: the harness is its leader ([`Program::spawn`]), and the tools it
/// starts are in it unless they leave it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Group(Pid);

impl Group {
    /// The group a child spawned by [`Program::spawn`] leads.
    pub fn of(child: &Child) -> Option<Group> {
        child.id().and_then(|p| Pid::from_raw(p as i32)).map(Group)
    }

    /// The group's id (its leader's process id).
    pub fn id(&self) -> i32 {
        self.0.as_raw_nonzero().get()
    }

    /// Sends `signal` to every process of the group.
    pub fn signal(&self, signal: Signal) {
        let _ = rustix::process::kill_process_group(self.0, signal);
    }

    /// Whether a process of the group is still there (an exited leader not yet waited for
    /// counts, until its driver waits for it).
    pub fn alive(&self) -> bool {
        rustix::process::test_kill_process_group(self.0).is_ok()
    }
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
    /// Spawns it in the job's folder with all three pipes, killed when its handle drops, as the
    /// leader of a process group of its own: a cancel ends the group, so the tools it started
    /// end with it.
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
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| fail(e.to_string()))
    }
}

/// Runs an adapter's driver on fresh channels: it sends [`Event`]s and takes [`Control`]s.
/// `group` is the process group of the harness it drives.
pub(crate) fn launch<F, Fut>(group: Option<Group>, drive: F) -> Running
where
    F: FnOnce(mpsc::UnboundedSender<Event>, mpsc::UnboundedReceiver<Control>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let (tx, events) = mpsc::unbounded_channel();
    let (control, rx) = mpsc::unbounded_channel();
    let driver = tokio::spawn(drive(tx, rx));
    Running {
        events,
        control,
        group,
        driver,
    }
}

/// Reads a pipe to its end into a shared buffer, so that what was written is there to read even
/// while a process the harness started keeps the pipe open.
pub(crate) fn collect<R>(mut pipe: R) -> (Arc<Mutex<Vec<u8>>>, JoinHandle<()>)
where
    R: tokio::io::AsyncRead + Unpin + Send + 'static,
{
    let buf = Arc::new(Mutex::new(Vec::new()));
    let sink = buf.clone();
    let task = tokio::spawn(async move {
        let mut chunk = [0u8; 8192];
        while let Ok(n) = pipe.read(&mut chunk).await {
            if n == 0 {
                break;
            }
            if let Ok(mut b) = sink.lock() {
                b.extend_from_slice(&chunk[..n]);
            }
        }
    });
    (buf, task)
}

/// What a [`collect`]ed pipe holds, once it has ended or [`DRAIN`] has passed.
pub(crate) async fn collected(buf: &Arc<Mutex<Vec<u8>>>, task: JoinHandle<()>) -> String {
    let _ = tokio::time::timeout(DRAIN, task).await;
    buf.lock()
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

/// The next line of a harness's output pipe; once the harness has exited, only what it left in
/// the pipe (a process it started may hold the pipe open for as long as it lives).
pub(crate) async fn next_line<R: tokio::io::AsyncRead + Unpin>(
    lines: &mut Lines<BufReader<R>>,
    exited: bool,
) -> std::io::Result<Option<String>> {
    if exited {
        tokio::time::timeout(DRAIN, lines.next_line())
            .await
            .unwrap_or(Ok(None))
    } else {
        lines.next_line().await
    }
}

/// A line-protocol harness's pipes: stdin to write, stdout's lines, stderr kept for the reason
/// of a crash.
pub(crate) struct Pipes {
    /// The harness's stdin.
    pub stdin: ChildStdin,
    /// Its stdout, line by line.
    pub lines: Lines<BufReader<ChildStdout>>,
    errors: (Arc<Mutex<Vec<u8>>>, JoinHandle<()>),
}

impl Pipes {
    /// Takes the pipes of a child spawned by [`Program::spawn`].
    pub(crate) fn take(child: &mut Child) -> Option<Pipes> {
        let (stdin, stdout, stderr) = (
            child.stdin.take()?,
            child.stdout.take()?,
            child.stderr.take()?,
        );
        Some(Pipes {
            stdin,
            lines: BufReader::new(stdout).lines(),
            errors: collect(stderr),
        })
    }

    /// How `what` ended when its stdout closed, or it exited, before its last word:
    /// interrupted, or exited with its status and the tail of its stderr.
    pub(crate) async fn ended(self, child: &mut Child, interrupting: bool, what: &str) -> Event {
        drop(self.stdin);
        let status = child
            .wait()
            .await
            .map(|s| s.to_string())
            .unwrap_or_default();
        let (buf, task) = self.errors;
        let err = collected(&buf, task).await;
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

/// The files of a result: those the harness named, then those it wrote into the job's `out` folder
/// that it did not name. A file named and written (or named twice) is attached once: each copy
/// would otherwise reach the requester under a name of its own (`lint.txt`, `2-lint.txt`).
pub fn result_files(named: Vec<PathBuf>, job: &Job) -> Vec<PathBuf> {
    let mut seen = std::collections::HashSet::new();
    named
        .into_iter()
        .chain(out_files(job))
        .filter(|p| seen.insert(std::fs::canonicalize(p).unwrap_or_else(|_| p.clone())))
        .collect()
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
