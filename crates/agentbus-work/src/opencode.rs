//! OpenCode through its server API.
//!
//! Written from OpenCode's server documentation (<https://opencode.ai/docs/server/>, and the
//! OpenAPI document the server publishes at `/doc`) and its SDK
//! (<https://opencode.ai/docs/sdk/>):
//!
//! - the server: `opencode serve --hostname 127.0.0.1 --port <port>`, started in the task's
//!   folder; it prints the URL it listens on (`… listening on http://127.0.0.1:<port>`);
//! - `GET /event`: server-sent events, each `data:` a `{type, properties}` object, subscribed to
//!   before prompting;
//! - `POST /session` (`{title}`) → the session (`id`); `POST /session/{id}/prompt_async`
//!   (`{parts: [{type: "text", text}]}`) starts the turn and answers at once;
//! - events: `message.part.updated` (text and tool parts: activity), `message.updated` (an
//!   assistant message's `tokens` `{input, output, reasoning, cache: {read, write}}`, `cost`,
//!   `modelID`, `providerID`), `question.asked` (`{id, questions: [{question, options:
//!   [{label}]}]}`, answered by `POST /question/{id}/reply` with `{answers: [[answer]]}`, the
//!   requester's `task.input` framed as data),
//!   `permission.updated`/`permission.asked` (declined: `POST /session/{id}/permissions/{pid}`
//!   with `{response: "reject"}`; grant tools in OpenCode's configuration), `session.error`, and
//!   `session.idle` when the turn is over;
//! - the answer: the last assistant message of `GET /session/{id}/message`;
//! - the interrupt: `POST /session/{id}/abort` (the session aborts, its message carries
//!   `MessageAbortedError`).
//!
//! Minimum version: a server with `prompt_async` and the question tool (OpenCode 1.0).

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::sync::mpsc;

use crate::adapter::{
    Adapter, Control, DRAIN, Event, Finish, Group, Program, Running, json_in, launch, one_line,
};
use crate::error::WorkError;
use crate::job::{Job, Usage};

/// The OpenCode adapter.
#[derive(Debug, Clone)]
pub struct OpenCode {
    /// `opencode` (or a stand-in) and arguments before `serve`.
    pub program: Program,
}

impl Adapter for OpenCode {
    fn name(&self) -> &'static str {
        "opencode"
    }

    fn start(&self, job: &Job) -> Result<Running, WorkError> {
        let fail = |why: String| WorkError::Spawn {
            program: self.program.program.clone(),
            why,
        };
        // A free loopback port for the server (asked of the OS, then handed over).
        let port = std::net::TcpListener::bind(("127.0.0.1", 0))
            .and_then(|l| l.local_addr())
            .map_err(|e| fail(e.to_string()))?
            .port();
        let args = [
            "serve",
            "--hostname",
            "127.0.0.1",
            "--port",
            &port.to_string(),
        ]
        .map(str::to_owned);
        let child = self.program.spawn(job, &args)?;
        agentbus_client::http::install_crypto_provider();
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| fail(e.to_string()))?;
        let job = job.clone();
        Ok(launch(Group::of(&child), move |tx, rx| async move {
            let mut child = child;
            let why = match drive(&mut child, &http, job, &tx, rx).await {
                Ok(()) => return,
                Err(why) => why,
            };
            // A server that crashed is seen by its connections first: its exit status follows.
            let status = match tokio::time::timeout(DRAIN, child.wait()).await {
                Ok(Ok(s)) => format!(" (it exited: {s})"),
                _ => String::new(),
            };
            let _ = tx.send(Event::Exited {
                why: format!("the OpenCode server failed{status}: {why}"),
            });
        }))
    }
}

/// One OpenCode session on one server.
struct Server<'a> {
    http: &'a reqwest::Client,
    base: String,
}

impl Server<'_> {
    async fn post(&self, path: &str, body: Value) -> Result<Value, String> {
        let r = self
            .http
            .post(format!("{}{path}", self.base))
            .json(&body)
            .send()
            .await
            .map_err(|e| format!("POST {path}: {e}"))?;
        if !r.status().is_success() {
            return Err(format!("POST {path}: HTTP {}", r.status()));
        }
        Ok(r.json().await.unwrap_or(Value::Null))
    }

    async fn get(&self, path: &str) -> Result<Value, String> {
        let r = self
            .http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .map_err(|e| format!("GET {path}: {e}"))?;
        r.json().await.map_err(|e| format!("GET {path}: {e}"))
    }
}

/// Drives the server until the turn ends; `Err` when the server cannot be talked to.
async fn drive(
    child: &mut tokio::process::Child,
    http: &reqwest::Client,
    job: Job,
    tx: &mpsc::UnboundedSender<Event>,
    mut rx: mpsc::UnboundedReceiver<Control>,
) -> Result<(), String> {
    // The URL the server prints when it listens.
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let base = loop {
        let line = lines
            .next_line()
            .await
            .map_err(|e| e.to_string())?
            .ok_or("it ended before it listened")?;
        if let Some(i) = line.find("http://") {
            break line[i..]
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .trim_end_matches('/')
                .to_owned();
        }
    };
    // Keep reading stdout, so that a chatty server never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    let server = Server { http, base };
    let mut events = http
        .get(format!("{}/event", server.base))
        .send()
        .await
        .map_err(|e| format!("GET /event: {e}"))?;
    let session = server
        .post(
            "/session",
            json!({"title": format!("AgentBus task {}", job.task_id)}),
        )
        .await?;
    let sid = session["id"]
        .as_str()
        .ok_or("POST /session gave no id")?
        .to_owned();
    server
        .post(
            &format!("/session/{sid}/prompt_async"),
            json!({"parts": [{"type": "text", "text": job.prompt}]}),
        )
        .await?;
    let _ = tx.send(Event::Started {
        session: Some(sid.clone()),
    });
    let mut buf = String::new();
    let mut asked: Option<String> = None;
    let mut interrupting = false;
    let mut messages: HashMap<String, Value> = HashMap::new();
    loop {
        tokio::select! {
            chunk = events.chunk() => {
                let chunk = chunk.map_err(|e| format!("GET /event: {e}"))?.ok_or("the event stream ended")?;
                buf.push_str(&String::from_utf8_lossy(&chunk));
                while let Some(end) = buf.find("\n\n") {
                    let block: String = buf.drain(..end + 2).collect();
                    let data: String = block.lines().filter_map(|l| l.strip_prefix("data:")).map(str::trim).collect();
                    let Ok(ev) = serde_json::from_str::<Value>(&data) else { continue };
                    let p = &ev["properties"];
                    let of_session = |v: &Value| v.as_str() == Some(sid.as_str());
                    match ev["type"].as_str().unwrap_or_default() {
                        "message.part.updated" if of_session(&p["part"]["sessionID"]) => {
                            let part = &p["part"];
                            let note = match part["type"].as_str() {
                                Some("tool") if part["state"]["status"] == "completed" => {
                                    format!("used {}", part["tool"].as_str().unwrap_or("a tool"))
                                }
                                Some("text") if part["time"]["end"].is_number() => {
                                    one_line(part["text"].as_str().unwrap_or_default(), 200)
                                }
                                _ => continue,
                            };
                            let _ = tx.send(Event::Activity { note });
                        }
                        "message.updated" if of_session(&p["info"]["sessionID"]) && p["info"]["role"] == "assistant" => {
                            let id = p["info"]["id"].as_str().unwrap_or_default().to_owned();
                            messages.insert(id, p["info"].clone());
                        }
                        "question.asked" if of_session(&p["sessionID"]) => {
                            let q = &p["questions"][0];
                            let question = q["question"].as_str().unwrap_or_default().to_owned();
                            let options = q["options"].as_array().into_iter().flatten()
                                .filter_map(|o| o["label"].as_str().map(str::to_owned)).collect();
                            asked = p["id"].as_str().map(str::to_owned);
                            let _ = tx.send(Event::Question { question, options });
                        }
                        "permission.updated" | "permission.asked" if of_session(&p["sessionID"]) => {
                            let pid = p["id"].as_str().unwrap_or_default();
                            server.post(&format!("/session/{sid}/permissions/{pid}"), json!({"response": "reject"})).await?;
                            let _ = tx.send(Event::Activity { note: "a permission was declined".into() });
                        }
                        "session.error" if of_session(&p["sessionID"]) && !interrupting
                            && p["error"]["name"] != "MessageAbortedError" => {
                            let message = p["error"]["data"]["message"].as_str()
                                .or(p["error"]["name"].as_str()).unwrap_or("OpenCode reported an error").to_owned();
                            let _ = tx.send(Event::Usage(usage(&messages)));
                            let _ = tx.send(Event::Failed { code: "opencode_error".into(), message });
                            return Ok(());
                        }
                        "session.idle" if of_session(&p["sessionID"]) => {
                            let _ = tx.send(Event::Usage(usage(&messages)));
                            let end = if interrupting {
                                Event::Interrupted
                            } else {
                                finish(&server.get(&format!("/session/{sid}/message")).await?)
                            };
                            let _ = tx.send(end);
                            return Ok(());
                        }
                        _ => {}
                    }
                }
            }
            c = rx.recv() => match c {
                Some(Control::Answer(a)) => {
                    if let Some(qid) = asked.take() {
                        server.post(&format!("/question/{qid}/reply"), json!({"answers": [[a.framed]]})).await?;
                    }
                }
                Some(Control::Message(text)) => {
                    // Queued on the session as its next prompt.
                    server.post(&format!("/session/{sid}/prompt_async"), json!({"parts": [{"type": "text", "text": text}]})).await?;
                }
                Some(Control::Interrupt) => {
                    interrupting = true;
                    server.post(&format!("/session/{sid}/abort"), json!({})).await?;
                }
                None => return Ok(()),
            }
        }
    }
}

/// The usage of a session's assistant messages, summed.
fn usage(messages: &HashMap<String, Value>) -> Usage {
    let mut total = Usage::default();
    for m in messages.values() {
        let t = &m["tokens"];
        let n = |v: &Value| v.as_u64().unwrap_or(0);
        total.add(&Usage {
            provider: m["providerID"].as_str().map(str::to_owned),
            model: m["modelID"].as_str().map(str::to_owned),
            input_tokens: n(&t["input"]),
            output_tokens: n(&t["output"]),
            cache_read_tokens: n(&t["cache"]["read"]),
            cache_write_tokens: n(&t["cache"]["write"]),
            reasoning_tokens: n(&t["reasoning"]),
            requests: 1,
            wall_ms: None,
            cost_usd: m["cost"].as_f64(),
        });
    }
    total
}

/// The final answer: the last assistant message's text.
fn finish(messages: &Value) -> Event {
    let last = messages
        .as_array()
        .into_iter()
        .flatten()
        .rev()
        .find(|m| m["info"]["role"] == "assistant");
    let Some(m) = last else {
        return Event::Failed {
            code: "opencode_no_answer".into(),
            message: "the OpenCode session went idle without an assistant message".into(),
        };
    };
    if let Some(e) = m["info"].get("error").filter(|e| !e.is_null()) {
        return Event::Failed {
            code: "opencode_error".into(),
            message: e["data"]["message"]
                .as_str()
                .or(e["name"].as_str())
                .unwrap_or("OpenCode reported an error")
                .to_owned(),
        };
    }
    let text: Vec<&str> = m["parts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["type"] == "text")
        .filter_map(|p| p["text"].as_str())
        .collect();
    let text = text.join("\n");
    Event::Finished(Finish {
        output: json_in(&text),
        summary: Some(text),
        files: Vec::new(),
    })
}
