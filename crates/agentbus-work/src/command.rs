//! The generic adapter: any command is a worker, so CI jobs and scripts can work tasks.
//!
//! The protocol (also in `docs/work.md`):
//! - stdin: the task as one JSON line ([`Job::to_json`]: `task_id`, `instructions`, `input`,
//!   `attachments` (local paths), `output_schema`, `out_dir`, and `prompt`, the request framed for
//!   a model). Stdin stays open: the requester's answer to a question arrives as
//!   `{"answer": "…", "framed": "…"}` on its own line (the answer as sent, and framed for a model),
//!   and a reply to a clarifying question as `{"message": "…"}`, framed.
//! - stderr: one line per event. A JSON object line is `{"question": "…", "options": […]}` (the
//!   command waits for the answer), `{"clarify": "…"}` (a question it does not wait for),
//!   `{"usage": {…}}` (`common/usage/v1` fields), or `{"note": "…"}`; any other line is a
//!   progress note. Every line counts as activity (a heartbeat).
//! - stdout: the result, one JSON object: `summary`, `output`, `attachments` (paths, relative to
//!   the working folder or absolute), or `{"status": "failed", "failure": {"code", "message"}}`.
//! - exit status: 0 with a result; anything else fails the task with the tail of stderr.
//! - interrupt (a `task.cancel`): SIGTERM; the turn counts as interrupted however it then ends.

use std::path::PathBuf;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::sync::mpsc;

use crate::adapter::{
    Adapter, Control, Event, Finish, Group, Program, Running, collect, collected, launch, one_line,
    tail, write_line,
};
use crate::error::WorkError;
use crate::job::{Job, Usage};

/// The generic command adapter.
#[derive(Debug, Clone)]
pub struct CommandAdapter {
    /// The command and its arguments.
    pub program: Program,
}

impl Adapter for CommandAdapter {
    fn name(&self) -> &'static str {
        "command"
    }

    fn start(&self, job: &Job) -> Result<Running, WorkError> {
        let child = self.program.spawn(job, &[])?;
        let job = job.clone();
        Ok(launch(Group::of(&child), move |tx, rx| {
            drive(child, job, tx, rx)
        }))
    }
}

async fn drive(
    mut child: tokio::process::Child,
    job: Job,
    tx: mpsc::UnboundedSender<Event>,
    mut rx: mpsc::UnboundedReceiver<Control>,
) {
    let (Some(mut stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return;
    };
    let _ = tx.send(Event::Started { session: None });
    let _ = write_line(&mut stdin, &job.to_json()).await;
    let (result, reading) = collect(stdout);
    let mut lines = BufReader::new(stderr).lines();
    let mut errors = String::new();
    let mut interrupting = false;
    // Once the command has exited, only what it left in its pipes is read: a process it
    // started in the background may hold them for as long as it lives.
    let mut status = None;
    loop {
        tokio::select! {
            s = child.wait(), if status.is_none() => status = Some(s),
            line = crate::adapter::next_line(&mut lines, status.is_some()) => {
                let Ok(Some(line)) = line else { break };
                errors.push_str(&line);
                errors.push('\n');
                let _ = tx.send(event_of(&line));
            }
            c = rx.recv() => match c {
                Some(Control::Answer(a)) => {
                    // Like the task line: the data for the program, and the frame for a model.
                    let _ = write_line(&mut stdin, &json!({"answer": a.text, "framed": a.framed})).await;
                }
                Some(Control::Message(m)) => {
                    let _ = write_line(&mut stdin, &json!({"message": m})).await;
                }
                Some(Control::Interrupt) => {
                    interrupting = true;
                    if let Some(pid) = child.id().and_then(|p| rustix::process::Pid::from_raw(p as i32)) {
                        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
                    }
                }
                None => return,
            }
        }
    }
    let status = match status {
        Some(s) => s,
        None => child.wait().await,
    };
    let ev = match status {
        _ if interrupting => Event::Interrupted,
        Ok(s) if s.success() => finish(&job, &collected(&result, reading).await),
        Ok(s) => Event::Exited {
            why: format!("the command exited ({s}): {}", tail(&errors, 5)),
        },
        Err(e) => Event::Exited {
            why: format!("the command could not be waited for: {e}"),
        },
    };
    let _ = tx.send(ev);
}

/// What one stderr line means.
fn event_of(line: &str) -> Event {
    let Ok(Value::Object(m)) = serde_json::from_str::<Value>(line) else {
        return Event::Activity {
            note: one_line(line, 2000),
        };
    };
    let s = |k: &str| m.get(k).and_then(Value::as_str).map(str::to_owned);
    if let Some(question) = s("question") {
        let options = m
            .get("options")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|o| o.as_str().map(str::to_owned))
            .collect();
        return Event::Question { question, options };
    }
    if let Some(text) = s("clarify") {
        return Event::Clarify { text };
    }
    if let Some(u) = m.get("usage").and_then(Value::as_object) {
        let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
        return Event::Usage(Usage {
            provider: u.get("provider").and_then(Value::as_str).map(str::to_owned),
            model: u.get("model").and_then(Value::as_str).map(str::to_owned),
            input_tokens: n("input_tokens"),
            output_tokens: n("output_tokens"),
            cache_read_tokens: n("cache_read_tokens"),
            cache_write_tokens: n("cache_write_tokens"),
            reasoning_tokens: n("reasoning_tokens"),
            requests: n("requests"),
            wall_ms: u.get("wall_ms").and_then(Value::as_u64),
            cost_usd: None,
        });
    }
    Event::Activity {
        note: one_line(&s("note").unwrap_or_else(|| line.to_owned()), 2000),
    }
}

/// The result the command printed.
fn finish(job: &Job, out: &str) -> Event {
    let v: Value = match serde_json::from_str(out.trim()) {
        Ok(v @ Value::Object(_)) => v,
        _ => {
            return Event::Failed {
                code: "worker_output_invalid".into(),
                message: format!(
                    "the command exited 0 but did not print one JSON object on stdout: {}",
                    one_line(out, 200)
                ),
            };
        }
    };
    if v["status"] == "failed" {
        let f = &v["failure"];
        return Event::Failed {
            code: f["code"].as_str().unwrap_or("command_failed").to_owned(),
            message: f["message"]
                .as_str()
                .unwrap_or("the command reported a failure")
                .to_owned(),
        };
    }
    let files = v["attachments"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(|p| job.dir.join(PathBuf::from(p)))
        .collect();
    Event::Finished(Finish {
        summary: v["summary"].as_str().map(str::to_owned),
        output: v.get("output").filter(|o| o.is_object()).cloned(),
        files,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stderr_lines_become_events() {
        assert_eq!(
            event_of("compiling"),
            Event::Activity {
                note: "compiling".into()
            }
        );
        assert_eq!(
            event_of(r#"{"question": "Which branch?", "options": ["main", "dev"]}"#),
            Event::Question {
                question: "Which branch?".into(),
                options: vec!["main".into(), "dev".into()]
            }
        );
        assert_eq!(
            event_of(r#"{"clarify": "Is 2.x fine?"}"#),
            Event::Clarify {
                text: "Is 2.x fine?".into()
            }
        );
        let Event::Usage(u) = event_of(r#"{"usage": {"input_tokens": 5, "model": "m"}}"#) else {
            panic!("not usage")
        };
        assert_eq!((u.input_tokens, u.model.as_deref()), (5, Some("m")));
    }
}
