//! Delivery: long-poll (`GET /v1/inbox`), WebSocket (`GET /v1/inbox/ws`) and transport acks
//! (`POST /v1/inbox/acks`). At-least-once: a delivery is a lease; without an ack before the
//! visibility timeout the entry is leased again, and after the maximum attempts it is
//! dead-lettered (see `docs/delivery.md`).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use futures_util::stream::{SplitSink, SplitStream};
use serde::{Deserialize, Serialize};
use serde_json::json;

use agentbus_api as api;

use agentbus_protocol::Code;
use agentbus_store::*;

use crate::access;
use crate::error::{ApiError, ApiResult};
use crate::extract::Body;
use crate::extract::{Json, Path, Query};
use crate::state::{App, SocketSlot};

/// Query of a long-poll or WebSocket.
#[derive(Debug, Deserialize)]
pub struct PollQuery {
    /// Never-delivered messages are taken above this sequence (the receiver's last persisted) at
    /// once, and at or below it only once visible for the visibility timeout (a lost lease).
    #[serde(default)]
    pub after: u64,
    /// Seconds to wait when nothing is deliverable.
    #[serde(default)]
    pub wait: u64,
    /// The most deliveries per answer.
    pub limit: Option<u32>,
}

impl PollQuery {
    /// `after` as the store reads it: inbox sequences are at most `i64::MAX`, and a larger value
    /// would be read as a negative one (every copy then new again), so it is refused.
    fn checked_after(&self) -> ApiResult<u64> {
        if i64::try_from(self.after).is_err() {
            return Err(ApiError::new(
                Code::InvalidRequest,
                format!(
                    "`after` is {}; at most {} (an inbox sequence)",
                    self.after,
                    i64::MAX
                ),
            ));
        }
        Ok(self.after)
    }
}

/// One delivery as sent on the wire (long-poll item, WebSocket `delivery` frame), the delivered
/// copy as text (see [`App::delivered_copy_raw`]): the gateway never parses a copy it hands out.
pub type DeliveryOut = api::Delivery<Box<serde_json::value::RawValue>>;

async fn lease(app: &App, agent: &AgentRow, after: u64, limit: u32) -> ApiResult<Vec<DeliveryOut>> {
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
    let address = if app.tracer.is_on() && !leased.is_empty() {
        Some(app.address_of(agent).await?)
    } else {
        None
    };
    for d in leased {
        if let Some(address) = &address {
            trace_delivery(app, address, &d);
        }
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

/// The span of one delivery to `address`'s inbox, child of the message's `traceparent`, with the
/// lease as an event (a redelivery after the first attempt); remembered for its ack's span.
fn trace_delivery(app: &App, address: &str, d: &agentbus_store::Delivery) {
    use agentbus_telemetry::{KeyValue, Parent, SpanKind, semconv as sc};
    let Ok(attrs) =
        serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(&d.message.attrs)
    else {
        return;
    };
    let s = |n: &str| {
        attrs
            .get(n)
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_owned()
    };
    let traceparent = s("traceparent");
    let common = vec![
        KeyValue::new(sc::MESSAGING_SYSTEM, sc::SYSTEM),
        KeyValue::new(sc::MESSAGING_DESTINATION_NAME, address.to_owned()),
        KeyValue::new(sc::MESSAGING_MESSAGE_ID, s("id")),
        KeyValue::new(sc::MESSAGING_CONVERSATION_ID, s("conversation_id")),
        KeyValue::new(sc::MESSAGE_TYPE, s("type")),
    ];
    let mut attrs = common.clone();
    attrs.extend([
        KeyValue::new(sc::MESSAGING_OPERATION_TYPE, "receive"),
        KeyValue::new(sc::MESSAGING_OPERATION_NAME, "deliver"),
        KeyValue::new(sc::DELIVERY_ATTEMPT, i64::from(d.attempt)),
    ]);
    let mut span = app.tracer.start(
        "deliver",
        SpanKind::Server,
        Parent::Traceparent(&traceparent),
        attrs,
    );
    span.event(
        if d.attempt > 1 { "redelivery" } else { "lease" },
        vec![KeyValue::new(sc::DELIVERY_ATTEMPT, i64::from(d.attempt))],
    );
    span.end();
    let mut leases = app.traced_leases.lock().unwrap_or_else(|e| e.into_inner());
    if leases.len() >= crate::state::TRACED_LEASES {
        leases.clear();
    }
    leases.insert(
        d.token.clone(),
        crate::state::TracedLease {
            traceparent,
            attrs: common,
        },
    );
}

/// The span of an ack, child of the acked message's `traceparent`, when its lease was traced.
fn trace_acks<'a>(app: &App, acks: impl IntoIterator<Item = (&'a str, AckOutcome)>) {
    use agentbus_telemetry::{KeyValue, Parent, SpanKind, semconv as sc};
    if !app.tracer.is_on() {
        return;
    }
    for (token, outcome) in acks {
        let lease = app
            .traced_leases
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(token);
        let Some(lease) = lease else { continue };
        let mut attrs = lease.attrs;
        attrs.extend([
            KeyValue::new(sc::MESSAGING_OPERATION_TYPE, "settle"),
            KeyValue::new(sc::MESSAGING_OPERATION_NAME, "ack"),
        ]);
        let mut span = app.tracer.start(
            "ack",
            SpanKind::Server,
            Parent::Traceparent(&lease.traceparent),
            attrs,
        );
        match outcome {
            AckOutcome::Acked => span.event("acked", Vec::new()),
            AckOutcome::AlreadyAcked => span.event("already_acked", Vec::new()),
            AckOutcome::Stale => span.fail(
                &Code::StaleAck.to_string(),
                "the delivery was no longer current",
            ),
        }
        span.end();
    }
}

/// Leases deliverable messages, waiting up to `wait` for some to arrive.
///
/// `drained` is the inbox's wake-up count (`InboxWaker::wakes`) when the caller's last lease came
/// back with fewer than it asked for, so took everything then deliverable: while no wake-up has
/// come since, this waits first instead of leasing again at once (a WebSocket fed one publish at a
/// time then leases once per publish, not twice). Only the first wait is taken that way: a wait
/// that ends on its timer always leases again, so a message whose wake-up was lost (another
/// replica's `NOTIFY`) or a lease that ran out (the visibility timeout) is found within a second.
async fn wait_for(
    app: &App,
    agent: &AgentRow,
    after: u64,
    limit: u32,
    wait: Duration,
    drained: &mut Option<u64>,
) -> ApiResult<Vec<DeliveryOut>> {
    let deadline = tokio::time::Instant::now() + wait;
    let waker = app.waker(&agent.id);
    loop {
        let notified = waker.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let wakes = waker.wakes();
        // Leases run on the gateway clock, so poll at least every second for a clock tests move
        // by hand.
        let mut until = deadline.min(tokio::time::Instant::now() + Duration::from_secs(1));
        if drained.take() != Some(wakes) {
            let got = lease(app, agent, after, limit).await?;
            if got.len() < limit as usize {
                *drained = Some(wakes);
            }
            if !got.is_empty() || tokio::time::Instant::now() >= deadline {
                return Ok(got);
            }
            // Wake for a publish, for the earliest lease to run out, or at the deadline.
            if let Some(at) = app.store.next_visible(&agent.id).await? {
                let ms = (at - app.now()).max(0) as u64;
                until = until.min(tokio::time::Instant::now() + Duration::from_millis(ms));
            }
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
            _ = tokio::time::sleep_until(until) => {
                // No wake-up came: what is deliverable now came without one, so read it.
                *drained = None;
            }
            _ = stop.changed() => return Ok(Vec::new()),
        }
    }
}

/// `GET /v1/inbox?after=&wait=&limit=`.
pub async fn poll(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Query(q): Query<PollQuery>,
) -> ApiResult<Response> {
    let agent = access::agent(&app, &headers).await?;
    let after = q.checked_after()?;
    let limit = q.limit.unwrap_or(100).clamp(1, 1000);
    let wait = Duration::from_secs(q.wait.min(app.config.max_wait_s));
    let deliveries = wait_for(&app, &agent, after, limit, wait, &mut None).await?;
    let next_after = deliveries
        .iter()
        .map(|d| d.sequence)
        .max()
        .unwrap_or(q.after)
        .max(q.after);
    Ok(Json(api::Deliveries {
        deliveries,
        next_after,
    })
    .into_response())
}

/// The most acks one batch may carry (`POST /v1/inbox/acks`, a WebSocket `acks` frame).
const MAX_ACKS: usize = 1000;

fn item(sequence: u64, status: &str, code: Option<Code>) -> api::ItemResult {
    api::ItemResult {
        sequence,
        status: status.to_owned(),
        code: code.map(|c| c.to_string()),
    }
}

fn ack_result(sequence: u64, o: AckOutcome) -> api::ItemResult {
    match o {
        AckOutcome::Acked => item(sequence, "acked", None),
        AckOutcome::AlreadyAcked => item(sequence, "already_acked", None),
        AckOutcome::Stale => item(sequence, "refused", Some(Code::StaleAck)),
    }
}

/// `POST /v1/inbox/acks`: acks in a batch; per-item answers; AB-4010 when none was current.
pub async fn ack_batch(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Body(body): Body,
) -> ApiResult<Json<api::ItemResults>> {
    let agent = access::agent(&app, &headers).await?;
    // Strict I-JSON like every other body: AB-3001 when it does not parse, AB-3016 for its shape.
    let body: api::Acks = crate::extract::parse_json(&body)?;
    if body.acks.is_empty() || body.acks.len() > MAX_ACKS {
        return Err(ApiError::new(
            Code::InvalidRequest,
            format!("send 1 to {MAX_ACKS} acks"),
        ));
    }
    let seqs: Vec<u64> = body.acks.iter().map(|a| a.sequence).collect();
    let tokens: Vec<String> = if app.tracer.is_on() {
        body.acks.iter().map(|a| a.delivery.clone()).collect()
    } else {
        Vec::new()
    };
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
    trace_acks(
        &app,
        tokens
            .iter()
            .map(String::as_str)
            .zip(outcomes.iter().copied()),
    );
    if outcomes.iter().all(|o| *o == AckOutcome::Stale) {
        return Err(ApiError::new(
            Code::StaleAck,
            "no ack named a current delivery: the message was redelivered or already settled",
        ));
    }
    let results = seqs
        .into_iter()
        .zip(outcomes)
        .map(|(s, o)| ack_result(s, o))
        .collect();
    Ok(Json(api::ItemResults { results }))
}

/// `POST /v1/inbox/{sequence}/ack` with `{"delivery": token}`.
pub async fn ack_one(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(sequence): Path<u64>,
    Body(body): Body,
) -> ApiResult<Json<api::ItemResult>> {
    let agent = access::agent(&app, &headers).await?;
    let one: api::AckOne = crate::extract::parse_json(&body)?;
    let token = one.delivery.clone();
    let outcome = app
        .store
        .ack(&agent.id, vec![(sequence, one.delivery)], app.now())
        .await?;
    trace_acks(
        &app,
        [token.as_str()].into_iter().zip(outcome.iter().copied()),
    );
    match outcome.first() {
        Some(AckOutcome::Stale) | None => Err(ApiError::new(
            Code::StaleAck,
            "this delivery is no longer current: the message was redelivered or already settled",
        )),
        Some(o) => Ok(Json(ack_result(sequence, *o))),
    }
}

/// The largest frame a client may send on the WebSocket (an `acks` frame of 1,000 acks fits).
pub const MAX_CLIENT_FRAME: usize = 64 * 1024;

/// The most deliveries leased for one push.
const BATCH: u32 = 256;

/// Room in the socket's write buffer beyond `ws_send_buffer`: tungstenite's own flush threshold
/// (128 KiB) plus one delivery of the largest envelope, and the error and close frames after it.
const WRITE_HEADROOM: usize = 128 * 1024 + 2 * agentbus_protocol::envelope::MAX_ENVELOPE_BYTES;

/// How many pushed deliveries a socket remembers, to return them to the inbox when it is closed
/// as slow; older ones come back after their visibility timeout as usual.
const REMEMBERED: usize = 4096;

/// `GET /v1/inbox/ws?after=N`: pushes deliveries as they become deliverable, resuming after `N`;
/// the client may ack over the socket (`{"type":"ack","sequence","delivery"}`) or over HTTP.
/// A frame the gateway cannot take gets an `error` frame, then a close frame with a code.
pub async fn websocket(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Query(q): Query<PollQuery>,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    let agent = match access::agent(&app, &headers).await {
        Ok(a) => a,
        Err(e) => return e.into_response(),
    };
    if let Err(e) = q.checked_after() {
        return e.into_response();
    }
    let ws = match ws {
        Ok(ws) => ws,
        Err(e) => {
            return ApiError::new(
                Code::InvalidRequest,
                format!("this endpoint is a WebSocket: {}", e.body_text()),
            )
            .into_response();
        }
    };
    let Some(slot) = app.sockets.open(&agent.id, app.config.ws_per_agent) else {
        let mut e = ApiError::new(
            Code::TooManySockets,
            format!(
                "this agent already holds {} WebSockets, the most this gateway allows",
                app.config.ws_per_agent
            ),
        );
        e.retry_after = Some(5);
        return e.into_response();
    };
    ws.max_message_size(MAX_CLIENT_FRAME)
        .max_frame_size(MAX_CLIENT_FRAME)
        .max_write_buffer_size(app.config.ws_send_buffer + WRITE_HEADROOM)
        .on_upgrade(move |socket| serve_socket(app, agent, q.after, socket, slot))
}

/// What the reading half tells the writing half.
enum FromReader {
    /// An answer to send (the result of acks).
    Answer(String),
    /// A frame the gateway refuses: send an `error` frame with the code, then close.
    Refuse(Refusal),
}

/// Why a socket is being closed, with what it is told.
struct Refusal {
    code: Code,
    close: u16,
    message: String,
}

/// How a push of frames ended badly.
enum Stalled {
    /// Not written within `ws_send_timeout`: the reader is not reading.
    Slow,
    /// The connection is gone.
    Gone,
}

type Sink = SplitSink<WebSocket, Message>;

/// Feeds `frames` and flushes them, within `within`.
async fn push(sink: &mut Sink, frames: Vec<String>, within: Duration) -> Result<(), Stalled> {
    use futures_util::SinkExt as _;
    let sent = tokio::time::timeout(within, async {
        for f in frames {
            sink.feed(Message::Text(f.into())).await?;
        }
        sink.flush().await
    })
    .await;
    match sent {
        Ok(Ok(())) => Ok(()),
        Ok(Err(_)) => Err(Stalled::Gone),
        Err(_) => Err(Stalled::Slow),
    }
}

/// The `error` frame: the HTTP error body's shape, under `"type": "error"`.
fn error_frame(app: &App, code: Code, message: &str) -> String {
    json!({
        "type": "error",
        "error": {
            "code": code.to_string(),
            "message": message,
            "doc_url": format!("{}{}", app.config.public_url, code.doc_path()),
        }
    })
    .to_string()
}

/// Sends the `error` frame and the close frame (reason: the code and a few words, at most the
/// 123 bytes a close frame carries), within `within`.
async fn refuse(app: &App, sink: &mut Sink, r: Refusal, within: Duration) {
    use futures_util::SinkExt as _;
    let mut reason = format!("{} {}", r.code, r.message);
    if reason.len() > 123 {
        let mut cut = 123;
        while !reason.is_char_boundary(cut) {
            cut -= 1;
        }
        reason.truncate(cut);
    }
    let _ = tokio::time::timeout(within, async {
        if r.code != Code::ShuttingDown {
            sink.feed(Message::Text(error_frame(app, r.code, &r.message).into()))
                .await?;
        }
        sink.send(Message::Close(Some(CloseFrame {
            code: r.close,
            reason: reason.into(),
        })))
        .await
    })
    .await;
}

async fn serve_socket(
    app: Arc<App>,
    agent: AgentRow,
    mut after: u64,
    socket: WebSocket,
    _slot: SocketSlot,
) {
    use futures_util::{SinkExt as _, StreamExt as _};
    let (mut sink, stream) = socket.split();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<FromReader>();
    // Acks arrive on their own task, so a slow push never delays them.
    let reader = tokio::spawn(read_frames(app.clone(), agent.clone(), stream, tx));
    let within = app.config.ws_send_timeout;
    let budget = app.config.ws_send_buffer;
    // Pushed and not known to be acked: what goes back to the inbox if the socket is slow.
    let mut pushed: VecDeque<(u64, String)> = VecDeque::new();
    let mut limit = BATCH;
    // The wake-up count when the last lease took everything deliverable (see `wait_for`).
    let mut drained = None;
    let ended = loop {
        if *app.shutting_down.borrow() {
            break Err(Some(Refusal {
                code: Code::ShuttingDown,
                close: 1001,
                message: "the gateway is shutting down; reconnect and resume".into(),
            }));
        }
        let mut answers = Vec::new();
        let mut refusal = None;
        while let Ok(m) = rx.try_recv() {
            match m {
                FromReader::Answer(a) => answers.push(a),
                FromReader::Refuse(r) => {
                    refusal = Some(r);
                    break;
                }
            }
        }
        if !answers.is_empty()
            && let Err(e) = push(&mut sink, answers, within).await
        {
            break Ok(e);
        }
        if refusal.is_some() {
            break Err(refusal);
        }
        if reader.is_finished() && rx.is_empty() {
            break Ok(Stalled::Gone);
        }
        let batch = match wait_for(
            &app,
            &agent,
            after,
            limit,
            Duration::from_millis(250),
            &mut drained,
        )
        .await
        {
            Ok(b) => b,
            Err(e) => {
                // The receiver reconnects and resumes from its cursor; say why it had to.
                tracing::warn!(agent = %agent.id, code = %e.code, error = %e.message, "WebSocket delivery stopped");
                break Err(Some(Refusal {
                    code: e.code,
                    close: 1011,
                    message: e.message,
                }));
            }
        };
        #[derive(Serialize)]
        struct Frame<'a> {
            r#type: &'static str,
            delivery: &'a DeliveryOut,
        }
        // Frames are built only up to the send buffer; what does not fit goes back to the inbox
        // uncounted, and the next lease asks for about as many as fitted.
        let (mut frames, mut bytes, mut unsent) = (Vec::new(), 0usize, Vec::new());
        for d in &batch {
            if bytes >= budget {
                unsent.push((d.sequence, d.delivery.clone()));
                continue;
            }
            let frame = serde_json::to_string(&Frame {
                r#type: "delivery",
                delivery: d,
            })
            .unwrap_or_default();
            bytes += frame.len();
            after = after.max(d.sequence);
            pushed.push_back((d.sequence, d.delivery.clone()));
            frames.push(frame);
        }
        drop(batch);
        while pushed.len() > REMEMBERED {
            pushed.pop_front();
        }
        if !frames.is_empty() {
            let each = (bytes / frames.len()).max(1);
            limit = u32::try_from(budget / each)
                .unwrap_or(BATCH)
                .clamp(1, BATCH);
        }
        if !unsent.is_empty() {
            // What went back is deliverable at once: the next lease must not wait for a wake-up.
            drained = None;
        }
        if !unsent.is_empty()
            && let Err(e) = app.store.release(&agent.id, unsent, app.now(), true).await
        {
            tracing::warn!(agent = %agent.id, error = %e, "unsent deliveries not released; they return after the visibility timeout");
        }
        if !frames.is_empty()
            && let Err(e) = push(&mut sink, frames, within).await
        {
            break Ok(e);
        }
    };
    match ended {
        Ok(Stalled::Gone) | Err(None) => {
            // Flushes the close reply to a peer that closed.
            let _ = tokio::time::timeout(Duration::from_secs(1), sink.close()).await;
        }
        Ok(Stalled::Slow) => {
            crate::metrics::count_slow_consumer();
            let leases: Vec<(u64, String)> = pushed.into_iter().collect();
            tracing::warn!(agent = %agent.id, deliveries = leases.len(), "WebSocket reader too slow; closing it and returning its deliveries");
            if let Err(e) = app.store.release(&agent.id, leases, app.now(), false).await {
                tracing::warn!(agent = %agent.id, error = %e, "deliveries not released; they return after the visibility timeout");
            }
            let r = Refusal {
                code: Code::SlowConsumer,
                close: 1008,
                message: format!(
                    "slow consumer: deliveries waited over {} for the reader; they are back in the inbox",
                    crate::config::show_duration(within)
                ),
            };
            refuse(&app, &mut sink, r, within).await;
        }
        Err(Some(r)) => refuse(&app, &mut sink, r, within).await,
    }
    reader.abort();
}

/// Why a read failed, as the client is told; `None` when the connection is simply gone.
fn refusal_of(e: axum::Error) -> Option<Refusal> {
    use tungstenite::error::{CapacityError, Error as WsError};
    let e = e.into_inner().downcast::<WsError>().ok()?;
    match *e {
        WsError::Capacity(CapacityError::MessageTooLong { size, max_size }) => Some(Refusal {
            code: Code::FrameTooLarge,
            close: 1009,
            message: format!("a frame of {size} bytes; at most {max_size}"),
        }),
        WsError::Utf8(_) => Some(Refusal {
            code: Code::MalformedJson,
            close: 1007,
            message: "a text frame that is not UTF-8".into(),
        }),
        WsError::Protocol(p) => Some(Refusal {
            code: Code::InvalidRequest,
            close: 1002,
            message: format!("a WebSocket protocol error: {p}"),
        }),
        _ => None,
    }
}

/// Reads the client's frames until it closes, answering acks in batches (every frame already
/// received is taken at once and their acks settled in one store call), and hands the writer
/// any refusal.
async fn read_frames(
    app: Arc<App>,
    agent: AgentRow,
    mut stream: SplitStream<WebSocket>,
    tx: tokio::sync::mpsc::UnboundedSender<FromReader>,
) {
    use futures_util::{FutureExt as _, StreamExt as _};
    let mut frames = Vec::new();
    loop {
        let mut stop: Option<Option<Refusal>> = None;
        let mut next = match stream.next().await {
            Some(Ok(m)) => Some(m),
            Some(Err(e)) => {
                stop = Some(refusal_of(e));
                None
            }
            None => {
                stop = Some(None);
                None
            }
        };
        while let Some(msg) = next.take() {
            match msg {
                Message::Text(t) => frames.push(t),
                Message::Binary(_) => {
                    stop = Some(Some(Refusal {
                        code: Code::UnsupportedMediaType,
                        close: 1003,
                        message: "a binary frame; the socket takes JSON text frames".into(),
                    }));
                    break;
                }
                Message::Close(_) => {
                    stop = Some(None);
                    break;
                }
                _ => {}
            }
            if frames.len() < 256 {
                next = match stream.next().now_or_never() {
                    Some(Some(Ok(m))) => Some(m),
                    Some(Some(Err(e))) => {
                        stop = Some(refusal_of(e));
                        None
                    }
                    Some(None) => {
                        stop = Some(None);
                        None
                    }
                    None => None,
                };
            }
        }
        let (answers, bad) = handle_client_frames(&app, &agent, &frames).await;
        frames.clear();
        for a in answers {
            let _ = tx.send(FromReader::Answer(a));
        }
        if let Some((code, message)) = bad {
            stop = Some(Some(Refusal {
                code,
                close: 1008,
                message,
            }));
        }
        if let Some(stop) = stop {
            if let Some(r) = stop {
                let _ = tx.send(FromReader::Refuse(r));
            }
            return;
        }
    }
}

/// Answers the acks among `frames`, settled in one store call: `{"type":"ack","sequence",
/// "delivery"}` gets one `{"type":"ack","result"}` answer; `{"type":"acks","acks":[{sequence,
/// delivery}, …]}` (for a receiver acking a burst) gets one `{"type":"acks","results":[…]}`.
/// The first frame that is not one of these stops the batch: it is answered with its code and
/// message (AB-3001 when it is not JSON, AB-3016 otherwise), and the frames after it are dropped.
async fn handle_client_frames(
    app: &App,
    agent: &AgentRow,
    frames: &[axum::extract::ws::Utf8Bytes],
) -> (Vec<String>, Option<(Code, String)>) {
    #[derive(Deserialize)]
    struct Frame {
        r#type: String,
        sequence: Option<u64>,
        delivery: Option<String>,
        #[serde(default)]
        acks: Vec<api::Ack>,
    }
    // Per frame answered: true for a batch frame, and how many acks it carried.
    let mut shapes: Vec<(bool, usize)> = Vec::new();
    let mut acks: Vec<(u64, String)> = Vec::new();
    let mut bad = None;
    for text in frames {
        // The one I-JSON reading every body gets (duplicate keys, integers past 2^53 refused).
        let f = match agentbus_protocol::json::parse(text.as_bytes()) {
            Err(e) => Err((
                Code::MalformedJson,
                format!("a frame that is not I-JSON: {e}"),
            )),
            Ok(v) => serde_json::from_value::<Frame>(v).map_err(|e| {
                (
                    Code::InvalidRequest,
                    format!("a frame of an unknown shape: {e}"),
                )
            }),
        };
        let f = match f {
            Ok(f) => f,
            Err(b) => {
                bad = Some(b);
                break;
            }
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
            (kind, _, _) => {
                bad = Some((
                    Code::InvalidRequest,
                    format!(
                        "a `{kind}` frame; send {{\"type\":\"ack\",\"sequence\",\"delivery\"}} or {{\"type\":\"acks\",\"acks\":[…]}} with 1 to {MAX_ACKS} acks"
                    ),
                ));
                break;
            }
        }
    }
    if acks.is_empty() {
        return (Vec::new(), bad);
    }
    let seqs: Vec<u64> = acks.iter().map(|a| a.0).collect();
    let tokens: Vec<String> = if app.tracer.is_on() {
        acks.iter().map(|a| a.1.clone()).collect()
    } else {
        Vec::new()
    };
    let outcomes = app.store.ack(&agent.id, acks, app.now()).await;
    if let Ok(o) = &outcomes {
        trace_acks(
            app,
            tokens.iter().map(String::as_str).zip(o.iter().copied()),
        );
    }
    let mut results = seqs
        .into_iter()
        .enumerate()
        .map(|(i, sequence)| match &outcomes {
            Ok(o) => ack_result(sequence, o.get(i).copied().unwrap_or(AckOutcome::Stale)),
            Err(_) => item(sequence, "error", None),
        });
    let answers = shapes
        .into_iter()
        .map(|(batch, n)| {
            let answers: Vec<api::ItemResult> = results.by_ref().take(n).collect();
            if batch {
                json!({"type": "acks", "results": answers}).to_string()
            } else {
                let one = answers.into_iter().next();
                json!({"type": "ack", "result": one}).to_string()
            }
        })
        .collect();
    (answers, bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A long-poll whose wait ended on its timer reads its inbox again at once: a message stored
    /// without a wake-up (its replica's `NOTIFY` lost) is delivered at the first re-read, one
    /// second into the wait, not at every other (docs/deploy.md states the bound).
    #[tokio::test]
    async fn a_wait_that_ends_on_its_timer_reads_the_inbox_again() {
        let (_tmp, gw) = crate::test_gateway().await;
        let app = gw.app.clone();
        let tenant = app.store.tenants().await.unwrap().remove(0);
        let ws = app
            .store
            .workspace_by_slug(&tenant.id, "default")
            .await
            .unwrap()
            .expect("the default workspace");
        let now = app.now();
        let bob = AgentRow {
            id: "agt_bob".into(),
            tenant_id: tenant.id.clone(),
            workspace_id: ws.id.clone(),
            name: "bob".into(),
            owner_id: None,
            card: "{}".into(),
            visibility: "workspace".into(),
            created_at: now,
            updated_at: now,
            deleted_at: None,
            suspended_at: None,
        };
        app.store.create_agent(bob.clone(), vec![]).await.unwrap();
        let key = app.tenant_key(&tenant.id).await.unwrap();

        tokio::time::pause();
        let started = tokio::time::Instant::now();
        let waiting = {
            let (app, bob) = (app.clone(), bob.clone());
            tokio::spawn(async move {
                let got = wait_for(&app, &bob, 0, 10, Duration::from_secs(20), &mut None).await;
                (got.unwrap(), tokio::time::Instant::now())
            })
        };
        // The first read finds nothing (the paused clock moves only once the waiter sleeps).
        tokio::time::sleep(Duration::from_millis(10)).await;
        // Then the message is stored and nobody is woken. Stored from a thread of its own, which
        // this runtime waits for: awaited here, the paused clock would move on meanwhile.
        let message = NewMessage {
            tenant_id: tenant.id.clone(),
            id: "msg_lost_wake".into(),
            source: "agent://default/default/alice".into(),
            source_agent_id: None,
            kind: "agentbus.message.v1".into(),
            conversation_id: "cnv".into(),
            correlation_id: None,
            to_text: "agt_bob".into(),
            to_id: bob.id.clone(),
            attrs: r#"{"id":"msg_lost_wake"}"#.into(),
            data: key.seal(b"{}"),
            signed_hash: vec![],
            idempotency: None,
            receipt: "rcp_lost_wake".into(),
            received_at: now,
            expires_at: now + 3_600_000,
            task_id: None,
            task: None,
            recipients: vec![bob.id.clone()],
            blob_refs: vec![],
            replay_since: now,
            idempotency_since: now,
            max_depth: None,
            usage: None,
            notice_of: None,
            search_tags: String::new(),
        };
        let store = app.store.clone();
        let stored = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            rt.block_on(store.publish(message)).unwrap()
        })
        .join()
        .unwrap();
        assert!(matches!(stored, PublishOutcome::Stored { .. }));
        let (got, at) = waiting.await.unwrap();
        assert_eq!(got.len(), 1, "delivered");
        // The first timer is a second in (give or take the clock's millisecond); the one after
        // it, two.
        assert!(
            at - started < Duration::from_millis(1500),
            "read again {:?} into the wait, not at its first timer",
            at - started
        );
    }
}
