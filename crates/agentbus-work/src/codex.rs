//! Codex through its app-server protocol.
//!
//! Written from OpenAI's documentation of the app server
//! (<https://developers.openai.com/codex/app-server>, and `codex-rs/app-server/README.md` in
//! github.com/openai/codex): JSON-RPC 2.0 without the `"jsonrpc"` member, one message per line on
//! `codex app-server`'s stdin and stdout.
//!
//! - `initialize` (`clientInfo`), then the `initialized` notification;
//! - `thread/start` (`cwd`: the task's folder) → `{thread: {id}}`;
//! - `turn/start` (`threadId`, `input: [{type: "text", text}]`) → `{turn: {id}}`;
//! - notifications: `turn/started`, `item/started` and `item/completed` (an `agentMessage`'s
//!   `text`; `commandExecution`, `fileChange`, … are activity), `thread/tokenUsage/updated`
//!   (`tokenUsage.total`: `inputTokens`, `cachedInputTokens`, `outputTokens`,
//!   `reasoningOutputTokens`), and `turn/completed` whose `turn.status` is `completed`,
//!   `interrupted` or `failed` (`turn.error.message`);
//! - server requests: `item/tool/requestUserInput` (`questions: [{id, question, options:
//!   [{label}]}]`, answered `{answers: {<id>: {answers: [...]}}}` with the requester's `task.input`
//!   framed as data); approval requests
//!   (`item/commandExecution/requestApproval`, `item/fileChange/requestApproval`) are declined,
//!   since nobody can grant them: set the approval policy and sandbox in Codex's configuration;
//! - the interrupt: `turn/interrupt` (`threadId`, `turnId`), after which the turn completes
//!   `interrupted`.
//!
//! The answer is the turn's last agent message. Minimum version: an app server with the v2
//! thread/turn API and `item/tool/requestUserInput` (Codex CLI 0.5x or later).

use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::adapter::{
    Adapter, Control, Event, Finish, Group, Pipes, Program, Running, json_in, launch, next_line,
    one_line, write_line,
};
use crate::error::WorkError;
use crate::job::{Job, Usage};

/// The Codex adapter.
#[derive(Debug, Clone)]
pub struct Codex {
    /// `codex` (or a stand-in) and arguments before `app-server`.
    pub program: Program,
}

impl Adapter for Codex {
    fn name(&self) -> &'static str {
        "codex"
    }

    fn start(&self, job: &Job) -> Result<Running, WorkError> {
        // Codex offers its ask-the-user tool only in Plan mode unless this feature is on; the
        // worker relays questions as `task.needs_input`, so the model may ask.
        let args = ["-c", ASK_IN_DEFAULT_MODE, "app-server"].map(str::to_owned);
        let child = self.program.spawn(job, &args)?;
        let job = job.clone();
        Ok(launch(Group::of(&child), move |tx, rx| {
            drive(child, job, tx, rx)
        }))
    }
}

/// The setting that offers `request_user_input` outside Plan mode (Codex 0.169: "unavailable in
/// Default mode" without it).
pub const ASK_IN_DEFAULT_MODE: &str = "features.default_mode_request_user_input=true";

/// Request ids of the client's requests.
const INITIALIZE: u64 = 1;
const THREAD_START: u64 = 2;
const TURN_START: u64 = 3;
const INTERRUPT: u64 = 4;
const STEER: u64 = 5;

async fn drive(
    mut child: tokio::process::Child,
    job: Job,
    tx: mpsc::UnboundedSender<Event>,
    mut rx: mpsc::UnboundedReceiver<Control>,
) {
    let Some(mut pipes) = Pipes::take(&mut child) else {
        return;
    };
    let init = json!({"method": "initialize", "id": INITIALIZE, "params": {"clientInfo":
        {"name": "agentbus_work", "title": "AgentBus worker", "version": env!("CARGO_PKG_VERSION")}}});
    let _ = write_line(&mut pipes.stdin, &init).await;
    let mut thread: Option<String> = None;
    let mut turn: Option<String> = None;
    let mut model: Option<String> = None;
    let mut last_text: Option<String> = None;
    // The open question: the server request's id and the question's id.
    let mut asked: Option<(Value, String)> = None;
    let mut interrupting = false;
    let mut usage = Usage::default();
    // Once the app server has exited, only what it left in the pipe is read: a command it
    // started may hold stdout for as long as it lives.
    let mut exited = false;
    loop {
        tokio::select! {
            _ = child.wait(), if !exited => exited = true,
            line = next_line(&mut pipes.lines, exited) => {
                let Ok(Some(line)) = line else { break };
                let Ok(msg) = serde_json::from_str::<Value>(&line) else { continue };
                let method = msg["method"].as_str().unwrap_or_default();
                let params = &msg["params"];
                match (method, msg.get("id")) {
                    // Answers to the client's requests.
                    ("", Some(id)) => {
                        if let Some(e) = msg.get("error") {
                            let message = e["message"].as_str().unwrap_or("the app server refused a request").to_owned();
                            // Without its thread or turn the task cannot go on; a refused steer or
                            // interrupt is only noted.
                            if matches!(id.as_u64(), Some(INITIALIZE | THREAD_START | TURN_START)) {
                                let _ = tx.send(Event::Failed { code: "codex_error".into(), message });
                                return;
                            }
                            let _ = tx.send(Event::Activity { note: format!("Codex refused a request: {}", one_line(&message, 200)) });
                            continue;
                        }
                        let r = &msg["result"];
                        match id.as_u64() {
                            Some(INITIALIZE) => {
                                let _ = write_line(&mut pipes.stdin, &json!({"method": "initialized"})).await;
                                let start = json!({"method": "thread/start", "id": THREAD_START,
                                    "params": {"cwd": job.dir}});
                                let _ = write_line(&mut pipes.stdin, &start).await;
                            }
                            Some(THREAD_START) => {
                                thread = r["thread"]["id"].as_str().map(str::to_owned);
                                model = r["model"].as_str().map(str::to_owned);
                                let start = json!({"method": "turn/start", "id": TURN_START, "params": {
                                    "threadId": thread, "input": [{"type": "text", "text": job.prompt}]}});
                                let _ = write_line(&mut pipes.stdin, &start).await;
                                let _ = tx.send(Event::Started { session: thread.clone() });
                            }
                            Some(TURN_START) => {
                                turn = r["turn"]["id"].as_str().map(str::to_owned);
                            }
                            _ => {}
                        }
                    }
                    ("item/tool/requestUserInput" | "tool/requestUserInput", Some(id)) => {
                        let q = &params["questions"][0];
                        let question = q["question"].as_str().unwrap_or_default().to_owned();
                        let options = q["options"].as_array().into_iter().flatten()
                            .filter_map(|o| o["label"].as_str().or(o.as_str()).map(str::to_owned)).collect();
                        asked = Some((id.clone(), q["id"].as_str().unwrap_or_default().to_owned()));
                        let _ = tx.send(Event::Question { question, options });
                    }
                    (m, Some(id)) => {
                        // Approvals and anything else the server asks: declined, nobody can grant them.
                        let answer = if m.ends_with("requestApproval") {
                            json!({"id": id, "result": {"decision": "decline"}})
                        } else {
                            json!({"id": id, "error": {"code": -32601, "message": "not supported by a headless AgentBus worker"}})
                        };
                        let _ = write_line(&mut pipes.stdin, &answer).await;
                        let _ = tx.send(Event::Activity { note: format!("{m} declined") });
                    }
                    ("turn/started", None) => {
                        turn = params["turn"]["id"].as_str().map(str::to_owned).or(turn.take());
                    }
                    ("item/completed", None) => {
                        let item = &params["item"];
                        let note = match item["type"].as_str().unwrap_or_default() {
                            "agentMessage" => {
                                let text = item["text"].as_str().unwrap_or_default().to_owned();
                                let note = one_line(&text, 200);
                                last_text = Some(text);
                                note
                            }
                            "commandExecution" => format!("ran {}", one_line(item["command"].as_str().unwrap_or("a command"), 200)),
                            "userMessage" => continue,
                            other => other.to_owned(),
                        };
                        let _ = tx.send(Event::Activity { note });
                    }
                    ("thread/tokenUsage/updated", None) => {
                        // `total` is the thread's running sum: keep the latest.
                        let t = &params["tokenUsage"]["total"];
                        let n = |k: &str| t[k].as_u64().unwrap_or(0);
                        usage = Usage {
                            provider: Some("openai".into()),
                            model: model.clone(),
                            input_tokens: n("inputTokens"),
                            output_tokens: n("outputTokens"),
                            cache_read_tokens: n("cachedInputTokens"),
                            reasoning_tokens: n("reasoningOutputTokens"),
                            ..Usage::default()
                        };
                    }
                    ("turn/completed", None) => {
                        let _ = tx.send(Event::Usage(usage.clone()));
                        let t = &params["turn"];
                        let ev = match t["status"].as_str().unwrap_or_default() {
                            _ if interrupting => Event::Interrupted,
                            "interrupted" => Event::Interrupted,
                            "completed" => Event::Finished(Finish {
                                output: last_text.as_deref().and_then(json_in),
                                summary: last_text.take(),
                                files: Vec::new(),
                            }),
                            _ => Event::Failed {
                                code: "codex_turn_failed".into(),
                                message: t["error"]["message"].as_str().unwrap_or("the Codex turn failed").to_owned(),
                            },
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
                Some(Control::Answer(a)) => {
                    if let Some((id, qid)) = asked.take() {
                        let answer = json!({"id": id, "result": {"answers": {qid: {"answers": [a.framed]}}}});
                        let _ = write_line(&mut pipes.stdin, &answer).await;
                    }
                }
                Some(Control::Message(text)) => {
                    // Added to the running turn (`turn/steer`).
                    let req = json!({"method": "turn/steer", "id": STEER, "params": {"threadId": thread,
                        "expectedTurnId": turn, "input": [{"type": "text", "text": text}]}});
                    let _ = write_line(&mut pipes.stdin, &req).await;
                }
                Some(Control::Interrupt) => {
                    interrupting = true;
                    let req = json!({"method": "turn/interrupt", "id": INTERRUPT,
                        "params": {"threadId": thread, "turnId": turn}});
                    let _ = write_line(&mut pipes.stdin, &req).await;
                }
                None => return,
            }
        }
    }
    let ended = pipes
        .ended(&mut child, interrupting, "the Codex app server")
        .await;
    let _ = tx.send(ended);
}
