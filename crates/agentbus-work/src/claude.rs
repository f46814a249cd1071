//! Claude Code in headless stream-json mode.
//!
//! Written from Anthropic's documentation of headless mode and the CLI
//! (<https://code.claude.com/docs/en/headless>, <https://code.claude.com/docs/en/cli-reference>)
//! and the message shapes of the official Agent SDK, whose clients drive this same protocol
//! (claude-agent-sdk-python: `_internal/query.py`, `_internal/message_parser.py`):
//!
//! - the command line: `claude -p --input-format stream-json --output-format stream-json --verbose
//!   --permission-prompt-tool stdio` (stream-json output requires `--verbose` under `-p`);
//! - stdin: the prompt as `{"type":"user","message":{"role":"user","content":…}}`; the interrupt
//!   as `{"type":"control_request","request_id":…,"request":{"subtype":"interrupt"}}`; answers to
//!   the CLI's `can_use_tool` requests as `control_response`s (`behavior: allow` with
//!   `updatedInput`, or `deny` with a message);
//! - stdout: `system`/`init` (the session id), `assistant` messages (text and `tool_use` blocks),
//!   `user` tool results, `control_request`s of subtype `can_use_tool` (the `AskUserQuestion` tool
//!   asks the user, answered with `updatedInput.answers` mapping each question to its answer: the
//!   requester's `task.input` framed as data, so it never reads as the user's words), and
//!   one final `result` (`subtype`, `is_error`, `result`, `usage`, `total_cost_usd`,
//!   `duration_ms`, `num_turns`, `structured_output` when asked for).
//!
//! Tool permissions are the operator's choice (`--permission-mode`, `--allowedTools` in the
//! extra arguments); a permission prompt that still reaches the worker is denied, since nobody is
//! at a terminal to grant it. Minimum version: the stdio permission prompt tool and
//! `AskUserQuestion` (Claude Code 2.0).

use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::adapter::{
    Adapter, Control, Event, Finish, Group, Pipes, Program, Running, json_in, launch, next_line,
    one_line, write_line,
};
use crate::error::WorkError;
use crate::job::{Job, Usage};

/// The Claude Code adapter.
#[derive(Debug, Clone)]
pub struct ClaudeCode {
    /// `claude` (or a stand-in) and arguments before the adapter's own.
    pub program: Program,
}

/// The arguments that select headless stream-json mode.
pub const HEADLESS_ARGS: [&str; 8] = [
    "-p",
    "--input-format",
    "stream-json",
    "--output-format",
    "stream-json",
    "--verbose",
    "--permission-prompt-tool",
    "stdio",
];

impl Adapter for ClaudeCode {
    fn name(&self) -> &'static str {
        "claude"
    }

    fn start(&self, job: &Job) -> Result<Running, WorkError> {
        let args: Vec<String> = HEADLESS_ARGS.iter().map(|s| s.to_string()).collect();
        let child = self.program.spawn(job, &args)?;
        let job = job.prompt.clone();
        Ok(launch(Group::of(&child), move |tx, rx| {
            drive(child, job, tx, rx)
        }))
    }
}

/// The open `AskUserQuestion` permission request.
struct Asked {
    request_id: String,
    input: Value,
    question: String,
}

async fn drive(
    mut child: tokio::process::Child,
    prompt: String,
    tx: mpsc::UnboundedSender<Event>,
    mut rx: mpsc::UnboundedReceiver<Control>,
) {
    let Some(mut pipes) = Pipes::take(&mut child) else {
        return;
    };
    let user = json!({"type": "user", "message": {"role": "user", "content": [{"type": "text", "text": prompt}]},
        "parent_tool_use_id": null, "session_id": ""});
    let _ = write_line(&mut pipes.stdin, &user).await;
    let mut asked: Option<Asked> = None;
    let mut interrupting = false;
    let mut model: Option<String> = None;
    let mut requests = 0u64;
    // Once the CLI has exited, only what it left in the pipe is read: a tool it started may
    // hold stdout for as long as it lives.
    let mut exited = false;
    loop {
        tokio::select! {
            _ = child.wait(), if !exited => exited = true,
            line = next_line(&mut pipes.lines, exited) => {
                let Ok(Some(line)) = line else { break };
                let Ok(msg) = serde_json::from_str::<Value>(&line) else {
                    continue; // not a protocol line (the CLI prints nothing else on stdout)
                };
                match msg["type"].as_str().unwrap_or_default() {
                    "system" if msg["subtype"] == "init" => {
                        model = msg["model"].as_str().map(str::to_owned);
                        let session = msg["session_id"].as_str().map(str::to_owned);
                        let _ = tx.send(Event::Started { session });
                    }
                    "assistant" => {
                        requests += 1;
                        for block in msg["message"]["content"].as_array().into_iter().flatten() {
                            let note = match block["type"].as_str() {
                                Some("text") => one_line(block["text"].as_str().unwrap_or_default(), 200),
                                Some("tool_use") if block["name"] != "AskUserQuestion" => {
                                    format!("using {}", block["name"].as_str().unwrap_or("a tool"))
                                }
                                _ => continue,
                            };
                            let _ = tx.send(Event::Activity { note });
                        }
                    }
                    "control_request" if msg["request"]["subtype"] == "can_use_tool" => {
                        let rid = msg["request_id"].as_str().unwrap_or_default().to_owned();
                        let req = &msg["request"];
                        if req["tool_name"] == "AskUserQuestion" {
                            let q = &req["input"]["questions"][0];
                            let question = q["question"].as_str().unwrap_or_default().to_owned();
                            let options = q["options"].as_array().into_iter().flatten()
                                .filter_map(|o| o["label"].as_str().map(str::to_owned)).collect();
                            asked = Some(Asked { request_id: rid, input: req["input"].clone(), question: question.clone() });
                            let _ = tx.send(Event::Question { question, options });
                        } else {
                            let tool = req["tool_name"].as_str().unwrap_or("a tool").to_owned();
                            let deny = json!({"type": "control_response", "response": {"subtype": "success",
                                "request_id": rid, "response": {"behavior": "deny",
                                "message": "No one can grant permissions to a headless AgentBus worker; its operator pre-approves tools."}}});
                            let _ = write_line(&mut pipes.stdin, &deny).await;
                            let _ = tx.send(Event::Activity { note: format!("{tool} was not permitted") });
                        }
                    }
                    "result" => {
                        let _ = tx.send(Event::Usage(usage(&msg, model.clone(), requests)));
                        let text = msg["result"].as_str().map(str::to_owned);
                        let ev = if interrupting {
                            Event::Interrupted
                        } else if msg["is_error"] == true || msg["subtype"] != "success" {
                            Event::Failed {
                                code: format!("claude_{}", msg["subtype"].as_str().unwrap_or("error")),
                                message: text.unwrap_or_else(|| "Claude Code reported an error".into()),
                            }
                        } else {
                            let output = msg.get("structured_output").filter(|v| v.is_object()).cloned()
                                .or_else(|| text.as_deref().and_then(json_in));
                            Event::Finished(Finish { summary: text, output, files: Vec::new() })
                        };
                        let _ = tx.send(ev);
                        drop(pipes);
                        let _ = child.wait().await;
                        return;
                    }
                    _ => {}
                }
            }
            c = rx.recv() => match c {
                Some(Control::Answer(answer)) => {
                    if let Some(a) = asked.take() {
                        let mut input = a.input;
                        input["answers"] = json!({ a.question: answer.framed });
                        let allow = json!({"type": "control_response", "response": {"subtype": "success",
                            "request_id": a.request_id, "response": {"behavior": "allow", "updatedInput": input}}});
                        let _ = write_line(&mut pipes.stdin, &allow).await;
                    }
                }
                Some(Control::Message(text)) => {
                    // Queued as the session's next user input.
                    let user = json!({"type": "user", "message": {"role": "user", "content": [{"type": "text", "text": text}]},
                        "parent_tool_use_id": null, "session_id": ""});
                    let _ = write_line(&mut pipes.stdin, &user).await;
                }
                Some(Control::Interrupt) => {
                    interrupting = true;
                    let req = json!({"type": "control_request", "request_id": "agentbus_interrupt",
                        "request": {"subtype": "interrupt"}});
                    let _ = write_line(&mut pipes.stdin, &req).await;
                }
                None => return, // the worker is gone: dropping the child kills it
            }
        }
    }
    // Stdout closed before a result: the CLI ended (crashed, or was killed).
    let ended = pipes.ended(&mut child, interrupting, "Claude Code").await;
    let _ = tx.send(ended);
}

/// The usage of a `result` message.
fn usage(msg: &Value, model: Option<String>, requests: u64) -> Usage {
    let u = &msg["usage"];
    let n = |k: &str| u[k].as_u64().unwrap_or(0);
    Usage {
        provider: Some("anthropic".into()),
        model,
        input_tokens: n("input_tokens"),
        output_tokens: n("output_tokens"),
        cache_read_tokens: n("cache_read_input_tokens"),
        cache_write_tokens: n("cache_creation_input_tokens"),
        reasoning_tokens: 0,
        requests,
        wall_ms: msg["duration_ms"].as_u64(),
        cost_usd: msg["total_cost_usd"].as_f64(),
    }
}
