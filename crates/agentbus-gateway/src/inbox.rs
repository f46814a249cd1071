//! Delivery: long-poll (`GET /v1/inbox`), WebSocket (`GET /v1/inbox/ws`) and transport acks
//! (`POST /v1/inbox/acks`). At-least-once: a delivery is a lease; without an ack before the
//! visibility timeout the entry is leased again, and after the maximum attempts it is
//! dead-lettered (see `docs/delivery.md`).

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use agentbus_protocol::Code;
use agentbus_store::*;

use crate::app::App;
use crate::auth;
use crate::error::{ApiError, ApiResult, Body};

/// Query of a long-poll or WebSocket.
#[derive(Debug, Deserialize)]
pub struct PollQuery {
    /// Never-delivered messages are taken only above this sequence (the receiver's last persisted).
    #[serde(default)]
    pub after: u64,
    /// Seconds to wait when nothing is deliverable.
    #[serde(default)]
    pub wait: u64,
    /// The most deliveries per answer.
    pub limit: Option<u32>,
}

/// One delivery as sent on the wire (long-poll item, WebSocket `delivery` frame).
#[derive(Debug, Serialize)]
pub struct DeliveryOut {
    /// The inbox sequence.
    pub sequence: u64,
    /// The lease token an ack names.
    pub delivery: String,
    /// 1 for the first delivery, then one more per redelivery.
    pub attempt: u32,
    /// The delivered copy, as text (see [`App::delivered_copy_raw`]).
    pub envelope: Box<serde_json::value::RawValue>,
}

async fn lease<S: Store>(
    app: &App<S>,
    agent: &AgentRow,
    after: u64,
    limit: u32,
) -> ApiResult<Vec<DeliveryOut>> {
    // A connection outlives the credential check at its start: a suspension since then stops it.
    crate::roles::still_receives(app, agent).await?;
    app.mark_seen(&agent.id);
    let now = app.now();
    let leased = app
        .store
        .lease(LeaseRequest {
            agent_id: agent.id.clone(),
            after,
            limit,
            now,
            visibility_ms: app.config.visibility_timeout_s * 1000,
            max_attempts: app.config.max_attempts,
        })
        .await?;
    let mut out = Vec::with_capacity(leased.len());
    for d in leased {
        crate::metrics::count_delivery(
            d.attempt,
            (now - d.message.received_at).max(0) as f64 / 1000.0,
        );
        crate::metrics::count_delivery_in(&agent.workspace_id, d.attempt);
        let envelope = app
            .delivered_copy_raw(
                &d.message.tenant_id,
                &d.message.attrs,
                &d.message.data,
                &agent.id,
                d.sequence,
            )
            .await?;
        out.push(DeliveryOut {
            sequence: d.sequence,
            delivery: d.token,
            attempt: d.attempt,
            envelope,
        });
    }
    Ok(out)
}

/// Leases deliverable messages, waiting up to `wait` seconds for some to arrive.
async fn wait_for<S: Store>(
    app: &App<S>,
    agent: &AgentRow,
    after: u64,
    limit: u32,
    wait: Duration,
) -> ApiResult<Vec<DeliveryOut>> {
    let deadline = tokio::time::Instant::now() + wait;
    let waker = app.waker(&agent.id);
    loop {
        let notified = waker.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let got = lease(app, agent, after, limit).await?;
        if !got.is_empty() || tokio::time::Instant::now() >= deadline {
            return Ok(got);
        }
        // Wake for a publish, for the earliest lease to run out, or at the deadline; leases run on
        // the gateway clock, so poll at least every second for a clock tests move by hand.
        let mut until = deadline.min(tokio::time::Instant::now() + Duration::from_secs(1));
        if let Some(at) = app.store.next_visible(&agent.id).await? {
            let ms = (at - app.now()).max(0) as u64;
            until = until.min(tokio::time::Instant::now() + Duration::from_millis(ms));
        }
        let mut stop = app.shutting_down.subscribe();
        if *stop.borrow() {
            return Ok(Vec::new());
        }
        tokio::select! {
            _ = &mut notified => {
                // Let the publishes committed with this one answer first: under load the next
                // lease then takes them all in one read instead of one read each.
                tokio::task::yield_now().await;
            }
            _ = tokio::time::sleep_until(until) => {}
            _ = stop.changed() => return Ok(Vec::new()),
        }
    }
}

/// `GET /v1/inbox?after=&wait=&limit=`.
pub async fn poll<S: Store>(
    State(app): State<Arc<App<S>>>,
    headers: HeaderMap,
    Query(q): Query<PollQuery>,
) -> ApiResult<Response> {
    let agent = auth::agent(&app, &headers).await?;
    let limit = q.limit.unwrap_or(100).clamp(1, 1000);
    let wait = Duration::from_secs(q.wait.min(app.config.max_wait_s));
    let deliveries = wait_for(&app, &agent, q.after, limit, wait).await?;
    let next_after = deliveries
        .iter()
        .map(|d| d.sequence)
        .max()
        .unwrap_or(q.after)
        .max(q.after);
    #[derive(Serialize)]
    struct Answer {
        deliveries: Vec<DeliveryOut>,
        next_after: u64,
    }
    Ok(Json(Answer {
        deliveries,
        next_after,
    })
    .into_response())
}

/// The most acks one batch may carry (`POST /v1/inbox/acks`, a WebSocket `acks` frame).
const MAX_ACKS: usize = 1000;

/// One ack.
#[derive(Debug, Deserialize)]
pub struct Ack {
    /// The inbox sequence.
    pub sequence: u64,
    /// The delivery token it was leased under.
    pub delivery: String,
}

/// Body of `POST /v1/inbox/acks`.
#[derive(Debug, Deserialize)]
pub struct AckBody {
    /// The acks.
    pub acks: Vec<Ack>,
}

fn outcome_json(sequence: u64, o: AckOutcome) -> Value {
    match o {
        AckOutcome::Acked => json!({"sequence": sequence, "status": "acked"}),
        AckOutcome::AlreadyAcked => json!({"sequence": sequence, "status": "already_acked"}),
        AckOutcome::Stale => {
            json!({"sequence": sequence, "status": "refused", "code": Code::StaleAck.to_string()})
        }
    }
}

/// `POST /v1/inbox/acks`: acks in a batch; per-item answers; AB-4010 when none was current.
pub async fn ack_batch<S: Store>(
    State(app): State<Arc<App<S>>>,
    headers: HeaderMap,
    Body(body): Body,
) -> ApiResult<Json<Value>> {
    let agent = auth::agent(&app, &headers).await?;
    let body: AckBody = serde_json::from_slice(&body)
        .map_err(|e| ApiError::new(Code::InvalidRequest, format!("ack body: {e}")))?;
    if body.acks.is_empty() || body.acks.len() > MAX_ACKS {
        return Err(ApiError::new(
            Code::InvalidRequest,
            format!("send 1 to {MAX_ACKS} acks"),
        ));
    }
    let seqs: Vec<u64> = body.acks.iter().map(|a| a.sequence).collect();
    let outcomes = app
        .store
        .ack(
            &agent.id,
            body.acks
                .into_iter()
                .map(|a| (a.sequence, a.delivery))
                .collect(),
            app.now(),
        )
        .await?;
    if outcomes.iter().all(|o| *o == AckOutcome::Stale) {
        return Err(ApiError::new(
            Code::StaleAck,
            "no ack named a current delivery: the message was redelivered or already settled",
        ));
    }
    let results: Vec<Value> = seqs
        .into_iter()
        .zip(outcomes)
        .map(|(s, o)| outcome_json(s, o))
        .collect();
    Ok(Json(json!({"results": results})))
}

/// `POST /v1/inbox/{sequence}/ack` with `{"delivery": token}`.
pub async fn ack_one<S: Store>(
    State(app): State<Arc<App<S>>>,
    headers: HeaderMap,
    Path(sequence): Path<u64>,
    Body(body): Body,
) -> ApiResult<Json<Value>> {
    let agent = auth::agent(&app, &headers).await?;
    #[derive(Deserialize)]
    struct One {
        delivery: String,
    }
    let one: One = serde_json::from_slice(&body)
        .map_err(|e| ApiError::new(Code::InvalidRequest, format!("ack body: {e}")))?;
    let outcome = app
        .store
        .ack(&agent.id, vec![(sequence, one.delivery)], app.now())
        .await?;
    match outcome.first() {
        Some(AckOutcome::Stale) | None => Err(ApiError::new(
            Code::StaleAck,
            "this delivery is no longer current: the message was redelivered or already settled",
        )),
        Some(o) => Ok(Json(outcome_json(sequence, *o))),
    }
}

/// `GET /v1/inbox/ws?after=N`: pushes deliveries as they become deliverable, resuming after `N`;
/// the client may ack over the socket (`{"type":"ack","sequence","delivery"}`) or over HTTP.
pub async fn websocket<S: Store>(
    State(app): State<Arc<App<S>>>,
    headers: HeaderMap,
    Query(q): Query<PollQuery>,
    ws: WebSocketUpgrade,
) -> Response {
    let agent = match auth::agent(&app, &headers).await {
        Ok(a) => a,
        Err(e) => return e.into_response(),
    };
    ws.max_message_size(64 * 1024)
        .on_upgrade(move |socket| serve_socket(app, agent, q.after, socket))
}

async fn serve_socket<S: Store>(
    app: Arc<App<S>>,
    agent: AgentRow,
    mut after: u64,
    socket: WebSocket,
) {
    use futures_util::{SinkExt as _, StreamExt as _};
    let (mut sink, mut stream) = socket.split();
    let (reply_tx, mut reply_rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    // Acks arrive on their own task, so a slow push never delays them. Every frame already
    // received is taken at once and their acks settled in one store call.
    let reader = {
        let app = app.clone();
        let agent = agent.clone();
        tokio::spawn(async move {
            use futures_util::FutureExt as _;
            let mut frames = Vec::new();
            'read: while let Some(Ok(first)) = stream.next().await {
                let mut next = Some(first);
                while let Some(msg) = next.take() {
                    match msg {
                        Message::Text(t) => frames.push(t),
                        Message::Close(_) => break 'read,
                        _ => {}
                    }
                    if frames.len() < 256 {
                        next = stream.next().now_or_never().flatten().and_then(Result::ok);
                    }
                }
                for answer in handle_client_frames(&app, &agent, &frames).await {
                    let _ = reply_tx.send(answer);
                }
                frames.clear();
            }
            for answer in handle_client_frames(&app, &agent, &frames).await {
                let _ = reply_tx.send(answer);
            }
        })
    };
    loop {
        if reader.is_finished() || *app.shutting_down.borrow() {
            break;
        }
        // Frames are fed and then flushed together: one write for a whole batch, not one each.
        let mut fed = false;
        while let Ok(answer) = reply_rx.try_recv() {
            if sink.feed(Message::Text(answer.into())).await.is_err() {
                reader.abort();
                return;
            }
            fed = true;
        }
        if fed && sink.flush().await.is_err() {
            break;
        }
        let batch = match wait_for(&app, &agent, after, 256, Duration::from_millis(250)).await {
            Ok(b) => b,
            Err(e) => {
                // The receiver reconnects and resumes from its cursor; say why it had to.
                tracing::warn!(agent = %agent.id, code = %e.code, error = %e.message, "WebSocket delivery stopped");
                break;
            }
        };
        #[derive(Serialize)]
        struct Frame<'a> {
            r#type: &'static str,
            delivery: &'a DeliveryOut,
        }
        for d in &batch {
            after = after.max(d.sequence);
            let frame = serde_json::to_string(&Frame {
                r#type: "delivery",
                delivery: d,
            })
            .unwrap_or_default();
            if sink.feed(Message::Text(frame.into())).await.is_err() {
                reader.abort();
                return;
            }
        }
        if !batch.is_empty() && sink.flush().await.is_err() {
            break;
        }
    }
    reader.abort();
}

/// Answers the acks among `frames`, settled in one store call: `{"type":"ack","sequence",
/// "delivery"}` gets one `{"type":"ack","result"}` answer; `{"type":"acks","acks":[{sequence,
/// delivery}, …]}` (for a receiver acking a burst) gets one `{"type":"acks","results":[…]}`.
/// Other frames are ignored.
async fn handle_client_frames<S: Store>(
    app: &App<S>,
    agent: &AgentRow,
    frames: &[axum::extract::ws::Utf8Bytes],
) -> Vec<String> {
    #[derive(Deserialize)]
    struct Frame {
        r#type: String,
        sequence: Option<u64>,
        delivery: Option<String>,
        #[serde(default)]
        acks: Vec<Ack>,
    }
    // Per frame answered: true for a batch frame, and how many acks it carried.
    let mut shapes: Vec<(bool, usize)> = Vec::new();
    let mut acks: Vec<(u64, String)> = Vec::new();
    for text in frames {
        let Ok(f) = serde_json::from_str::<Frame>(text) else {
            continue;
        };
        match (f.r#type.as_str(), f.sequence, f.delivery) {
            ("ack", Some(sequence), Some(token)) => {
                acks.push((sequence, token));
                shapes.push((false, 1));
            }
            ("acks", _, _) if !f.acks.is_empty() && f.acks.len() <= MAX_ACKS => {
                shapes.push((true, f.acks.len()));
                acks.extend(f.acks.into_iter().map(|a| (a.sequence, a.delivery)));
            }
            _ => {}
        }
    }
    if acks.is_empty() {
        return Vec::new();
    }
    let seqs: Vec<u64> = acks.iter().map(|a| a.0).collect();
    let outcomes = app.store.ack(&agent.id, acks, app.now()).await;
    let mut results = seqs
        .into_iter()
        .enumerate()
        .map(|(i, sequence)| match &outcomes {
            Ok(o) => outcome_json(sequence, o.get(i).copied().unwrap_or(AckOutcome::Stale)),
            Err(_) => json!({"sequence": sequence, "status": "error"}),
        });
    shapes
        .into_iter()
        .map(|(batch, n)| {
            let answers: Vec<Value> = results.by_ref().take(n).collect();
            if batch {
                json!({"type": "acks", "results": answers}).to_string()
            } else {
                let one = answers.into_iter().next().unwrap_or(Value::Null);
                json!({"type": "ack", "result": one}).to_string()
            }
        })
        .collect()
}
