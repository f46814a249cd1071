//! The AgentBus load generator, shared by the gateway's own bench (`benches/throughput.rs`, a
//! gateway in the same process) and the side-by-side bench (`bench/`, the `agentbus` binary
//! against NATS JetStream): signed `message.v1` publishes over plain HTTP/1.1 connections to one
//! WebSocket subscriber that acks in bursts, as a receiver under load does.

#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::{SinkExt as _, StreamExt as _};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::{Message, client::IntoClientRequest as _};

use agentbus_protocol::ids::{Id, IdKind};
use agentbus_protocol::signing::{SigningKey, sign_envelope};
use agentbus_runtime::{SystemClock, mint};

/// A registered agent: its address, credential and key.
pub struct Agent {
    /// `agent://…`.
    pub address: String,
    /// Its `aba_` credential.
    pub token: String,
    key: SigningKey,
    key_id: Id,
}

/// Registers an agent named `name` with the admin token.
pub async fn register(http: &reqwest::Client, url: &str, admin: &str, name: &str) -> Agent {
    register_with(http, url, admin, name, json!({})).await
}

/// [`register`] with further card fields (`capabilities`, say).
pub async fn register_with(
    http: &reqwest::Client,
    url: &str,
    admin: &str,
    name: &str,
    extra: Value,
) -> Agent {
    let key = SigningKey::from_seed(agentbus_runtime::random_bytes());
    let mut body = json!({"name": name, "public_key": key.public().to_base64url()});
    for (k, v) in extra.as_object().into_iter().flatten() {
        body[k] = v.clone();
    }
    let v: Value = http
        .post(format!("{url}/v1/agents"))
        .bearer_auth(admin)
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    Agent {
        address: v["agent"]["address"].as_str().unwrap().to_owned(),
        token: v["token"].as_str().unwrap().to_owned(),
        key,
        key_id: v["key"]["id"].as_str().unwrap().parse().unwrap(),
    }
}

/// A signed envelope from `from` to `to` whose serialised form is `size` bytes (or its minimum, if
/// that is larger): its id and body. The text is padded so that both sides of a comparison carry
/// the same number of bytes.
pub fn envelope(from: &Agent, to: &str, n: usize, size: usize) -> (String, Vec<u8>) {
    let (id, conversation, time) = fresh();
    let build = |text: &str| {
        let data = json!({"text": text});
        sign(
            from,
            to,
            "message",
            [&id, &conversation, &time],
            data,
            json!({}),
        )
    };
    let text = format!("message {n}: is change 482 clear for the 14:30 deploy?");
    let body = build(&text);
    if body.len() >= size {
        return (id, body);
    }
    // The signature's length is fixed, so padding the text by the difference hits `size` exactly.
    let padded = format!("{text}{}", " ".repeat(size - body.len()));
    (id.clone(), build(&padded))
}

/// A signed envelope of `kind` (`message`, `task.request`, …) from `from` to `to` carrying
/// `data`, with further attributes `extra` (a subject, a capability): its id and body.
pub fn signed(from: &Agent, to: &str, kind: &str, data: Value, extra: Value) -> (String, Vec<u8>) {
    let (id, conversation, time) = fresh();
    let body = sign(from, to, kind, [&id, &conversation, &time], data, extra);
    (id, body)
}

/// A new message id, a new conversation id and the time now, for an envelope.
fn fresh() -> (String, String, String) {
    let time = agentbus_protocol::timestamp::Timestamp(
        agentbus_runtime::Clock::now(&SystemClock).millis(),
    );
    (
        mint(IdKind::Message).to_string(),
        mint(IdKind::Conversation).to_string(),
        time.to_string(),
    )
}

/// The envelope of `kind` with `[id, conversation, time]`, `data` and the attributes `extra`,
/// signed by `from`, serialised.
fn sign(
    from: &Agent,
    to: &str,
    kind: &str,
    [id, conversation, time]: [&str; 3],
    data: Value,
    extra: Value,
) -> Vec<u8> {
    let mut env = json!({
        "specversion": "1.0", "id": id, "source": from.address, "type": format!("agentbus.{kind}.v1"),
        "time": time, "datacontenttype": "application/json", "to": to,
        "conversation_id": conversation,
        "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "schema": format!("https://komsary.agentbus.exchange/schemas/agentbus.{kind}/v1.json"),
        "data": data
    })
    .as_object()
    .unwrap()
    .clone();
    for (k, v) in extra.as_object().into_iter().flatten() {
        env.insert(k.clone(), v.clone());
    }
    sign_envelope(&mut env, &from.key, from.key_id).unwrap();
    Value::Object(env).to_string().into_bytes()
}

/// When each message id reached the subscriber.
pub type Arrivals = Arc<Mutex<HashMap<String, Instant>>>;

/// Holds the subscriber's WebSocket, recording arrivals and acking in bursts.
pub async fn subscribe(url: &str, token: &str, arrivals: Arrivals) -> tokio::task::JoinHandle<()> {
    let mut req = format!("{}/v1/inbox/ws", url.replacen("http", "ws", 1))
        .into_client_request()
        .unwrap();
    req.headers_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    let (ws, _) = tokio_tungstenite::connect_async(req).await.unwrap();
    let (mut sink, mut stream) = ws.split();
    tokio::spawn(async move {
        use futures_util::FutureExt as _;
        // What a receiver needs of a delivery frame; the envelope is read no further than its id.
        #[derive(serde::Deserialize)]
        struct Frame<'a> {
            #[serde(borrow)]
            r#type: &'a str,
            delivery: Option<Delivery<'a>>,
        }
        #[derive(serde::Deserialize)]
        struct Delivery<'a> {
            sequence: u64,
            #[serde(borrow)]
            delivery: &'a str,
            envelope: EnvelopeId<'a>,
        }
        #[derive(serde::Deserialize)]
        struct EnvelopeId<'a> {
            #[serde(borrow)]
            id: &'a str,
        }
        let mut acks: Vec<Value> = Vec::new();
        loop {
            // Acks are collected as deliveries arrive and sent as one `acks` frame when none is
            // waiting (or 1,000 are due).
            let next = match stream.next().now_or_never() {
                Some(next) if acks.len() < 1000 => next,
                other => {
                    if !acks.is_empty() {
                        let frame = json!({"type": "acks", "acks": std::mem::take(&mut acks)});
                        let _ = sink.send(Message::Text(frame.to_string().into())).await;
                    }
                    match other {
                        Some(next) => next,
                        None => stream.next().await,
                    }
                }
            };
            let Some(Ok(msg)) = next else { break };
            let Message::Text(t) = msg else { continue };
            let f: Frame<'_> = serde_json::from_str(&t).unwrap();
            let (Some(d), "delivery") = (f.delivery, f.r#type) else {
                continue;
            };
            arrivals
                .lock()
                .unwrap()
                .insert(d.envelope.id.to_owned(), Instant::now());
            acks.push(json!({"sequence": d.sequence, "delivery": d.delivery}));
        }
        eprintln!("subscriber: the gateway closed the WebSocket");
    })
}

/// One paced message: when it was sent, when its 202 came back and when the subscriber read it,
/// in seconds since the run's start.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    /// The instant its request was started.
    pub sent: f64,
    /// The instant its 202 was read.
    pub accepted: f64,
    /// The instant its delivery frame was read, if it arrived.
    pub arrived: Option<f64>,
}

/// A gateway with a subscriber and eight senders, ready for load.
pub struct Setup {
    /// The address publishes go to.
    pub addr: SocketAddr,
    subscriber: Agent,
    senders: Vec<Agent>,
    arrivals: Arrivals,
    /// Idle keep-alive connections of the paced publishes.
    pool: Arc<Mutex<Vec<Connection>>>,
    _ws: tokio::task::JoinHandle<()>,
}

/// One HTTP/1.1 connection to the gateway, driven by a task of its own.
type Connection = hyper::client::conn::http1::SendRequest<http_body_util::Full<bytes::Bytes>>;

/// Opens a keep-alive HTTP/1.1 connection to `addr` (hyper's own client connection, without
/// reqwest's pool and connector on the way of each request: a lean client, as JetStream's side
/// of `bench/` uses its own).
async fn connect(addr: SocketAddr) -> Connection {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    let (send, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp))
        .await
        .unwrap();
    tokio::spawn(conn);
    send
}

/// Publishes one signed envelope over `send`; answers the status and the body, read to its end
/// so the connection is ready for the next request.
async fn publish(
    send: &mut Connection,
    addr: SocketAddr,
    token: &str,
    body: Vec<u8>,
) -> (u16, bytes::Bytes) {
    let req = hyper::Request::post("/v1/messages")
        .header("host", addr.to_string())
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(bytes::Bytes::from(body)))
        .unwrap();
    let r = send.send_request(req).await.unwrap();
    let status = r.status().as_u16();
    let body = http_body_util::BodyExt::collect(r.into_body())
        .await
        .unwrap()
        .to_bytes();
    (status, body)
}

impl Setup {
    /// Registers the agents (names made unique by `tag`) and opens the subscriber's socket.
    pub async fn new(addr: SocketAddr, admin: &str, tag: &str) -> Setup {
        Setup::split(addr, addr, admin, tag).await
    }

    /// [`Setup::new`] with publishes sent to `addr` and the subscriber's socket held on
    /// `deliver`: another replica of the same gateway, which the publish must wake.
    pub async fn split(addr: SocketAddr, deliver: SocketAddr, admin: &str, tag: &str) -> Setup {
        let url = format!("http://{addr}");
        // reqwest is built without a rustls provider in this workspace (see the root Cargo.toml).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(256)
            .build()
            .unwrap();
        // It declares `code.review`, so benches can send it task requests too.
        let card = json!({"capabilities": [
            {"name": "code.review", "version": "1", "description": "Review a diff."}
        ]});
        let subscriber = register_with(&http, &url, admin, &format!("sub-{tag}"), card).await;
        let mut senders = Vec::new();
        for i in 0..8 {
            senders.push(register(&http, &url, admin, &format!("send-{tag}-{i}")).await);
        }
        let arrivals: Arrivals = Arc::default();
        let ws = subscribe(
            &format!("http://{deliver}"),
            &subscriber.token,
            arrivals.clone(),
        )
        .await;
        Setup {
            addr,
            subscriber,
            senders,
            arrivals,
            pool: Arc::default(),
            _ws: ws,
        }
    }

    /// The subscriber: every message of the load is addressed to it.
    pub fn subscriber(&self) -> &Agent {
        &self.subscriber
    }

    /// The eight senders.
    pub fn senders(&self) -> &[Agent] {
        &self.senders
    }

    /// `n` signed messages of `size` bytes from the senders in turn to the subscriber: (id,
    /// body, sender's token).
    pub fn messages(&self, n: usize, size: usize) -> Vec<(String, Vec<u8>, String)> {
        (0..n)
            .map(|i| {
                let s = &self.senders[i % self.senders.len()];
                let (id, body) = envelope(s, &self.subscriber.address, i, size);
                (id, body, s.token.clone())
            })
            .collect()
    }

    /// Publishes `n` pre-signed messages over `concurrency` keep-alive connections as fast as
    /// they go; returns (publish time, time until all were delivered), or `None` on a stall.
    pub async fn throughput(
        &self,
        n: usize,
        size: usize,
        concurrency: usize,
    ) -> Option<(Duration, Duration)> {
        self.publish_all(self.messages(n, size), concurrency).await
    }

    /// Publishes `messages` (id, body, sender's token; each to the subscriber) over
    /// `concurrency` keep-alive connections as fast as they go; returns (publish time, time
    /// until all were delivered), or `None` on a stall.
    pub async fn publish_all(
        &self,
        messages: Vec<(String, Vec<u8>, String)>,
        concurrency: usize,
    ) -> Option<(Duration, Duration)> {
        self.arrivals.lock().unwrap().clear();
        let addr = self.addr;
        let n = messages.len();
        let queue = Arc::new(Mutex::new(messages));
        let started = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..concurrency {
            let queue = queue.clone();
            tasks.push(tokio::spawn(async move {
                // One keep-alive HTTP/1.1 connection per publisher, as a fleet of agents holds.
                let mut send = connect(addr).await;
                loop {
                    let next = queue.lock().unwrap().pop();
                    let Some((_, body, token)) = next else { break };
                    let (status, body) = publish(&mut send, addr, &token, body).await;
                    assert_eq!(status, 202, "{}", String::from_utf8_lossy(&body));
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        let published = started.elapsed();
        while self.arrivals.lock().unwrap().len() < n {
            // Delivery normally ends within a second of the last publish: report a stall.
            if started.elapsed() > published + Duration::from_secs(30) {
                eprintln!(
                    "stalled: {} of {n} delivered 30 s after the last publish",
                    self.arrivals.lock().unwrap().len()
                );
                return None;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Some((published, started.elapsed()))
    }

    /// Publishes at `rate` per second for `seconds`; returns each message's publish→delivery
    /// time in milliseconds, sorted (of those delivered: a shortfall is reported on stderr).
    pub async fn latency(&self, rate: u64, seconds: u64, size: usize) -> Vec<f64> {
        self.latency_parts(rate, seconds, size).await.0
    }

    /// [`Setup::latency`], and each message's publish→202 time in milliseconds, sorted: how
    /// much of the way to the subscriber is the storing publish.
    pub async fn latency_parts(
        &self,
        rate: u64,
        seconds: u64,
        size: usize,
    ) -> (Vec<f64>, Vec<f64>) {
        let messages = self.messages((rate * seconds) as usize, size);
        let samples = self.paced(messages, rate, Instant::now()).await;
        let sorted = |mut v: Vec<f64>| {
            v.sort_by(|a, b| a.partial_cmp(b).unwrap());
            v
        };
        let delivered = samples
            .iter()
            .filter_map(|s| s.arrived.map(|a| (a - s.sent) * 1000.0))
            .collect();
        let accepted = samples
            .iter()
            .map(|s| (s.accepted - s.sent) * 1000.0)
            .collect();
        (sorted(delivered), sorted(accepted))
    }

    /// Publishes `messages` at `rate` per second, the first at `start`, with at most 256 in
    /// flight (a gateway that slows down lowers the rate achieved) and none started after the
    /// planned end (`messages.len() / rate` seconds: the run lasts as long however far behind it
    /// falls); waits for them to be delivered (up to 60 s after the last 202) and answers each
    /// sent one's [`Sample`], in order.
    pub async fn paced(
        &self,
        messages: Vec<(String, Vec<u8>, String)>,
        rate: u64,
        start: Instant,
    ) -> Vec<Sample> {
        self.arrivals.lock().unwrap().clear();
        let end = start + Duration::from_micros(messages.len() as u64 * 1_000_000 / rate);
        // Bounded in flight, so a slow moment cannot open thousands of sockets.
        let permits = Arc::new(tokio::sync::Semaphore::new(256));
        let mut handles = Vec::with_capacity(messages.len());
        for (i, (id, body, token)) in messages.into_iter().enumerate() {
            let due = start + Duration::from_micros(i as u64 * 1_000_000 / rate);
            tokio::time::sleep_until(due.into()).await;
            let permit = permits.clone().acquire_owned().await.unwrap();
            if Instant::now() >= end {
                break;
            }
            let (pool, addr) = (self.pool.clone(), self.addr);
            handles.push(tokio::spawn(async move {
                let _permit = permit;
                let sent = Instant::now();
                // An idle connection the gateway closed (its idle timeout) is dropped.
                let idle = || pool.lock().unwrap().pop();
                let mut send = loop {
                    match idle() {
                        Some(send) if send.is_closed() => continue,
                        Some(send) => break send,
                        None => break connect(addr).await,
                    }
                };
                let (status, body) = publish(&mut send, addr, &token, body).await;
                let accepted = Instant::now();
                assert_eq!(status, 202, "{}", String::from_utf8_lossy(&body));
                pool.lock().unwrap().push(send);
                (id, sent, accepted)
            }));
        }
        let mut sent = Vec::with_capacity(handles.len());
        for h in handles {
            sent.push(h.await.unwrap());
        }
        let total = sent.len();
        let last = Instant::now();
        while self.arrivals.lock().unwrap().len() < total {
            if last.elapsed() > Duration::from_secs(60) {
                eprintln!(
                    "stalled: {} of {total} delivered 60 s after the last publish",
                    self.arrivals.lock().unwrap().len()
                );
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let arrived = self.arrivals.lock().unwrap();
        let at = |t: Instant| t.duration_since(start).as_secs_f64();
        sent.into_iter()
            .map(|(id, sent, accepted)| Sample {
                sent: at(sent),
                accepted: at(accepted),
                arrived: arrived.get(&id).map(|t| at(*t)),
            })
            .collect()
    }
}

/// The `p`-quantile of sorted values.
pub fn quantile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 * p) as usize).min(sorted.len() - 1)]
}
