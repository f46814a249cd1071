//! Signed `message.v1` publishes over HTTP on loopback to one WebSocket subscriber.
//!
//! `cargo bench -p agentbus-gateway --bench throughput` (env: `BENCH_N` messages, default 40,000;
//! `BENCH_CONCURRENCY` publishes in flight, default 256; `BENCH_RATES` paced rates, default
//! `1000,5000`, empty for none). Two phases:
//! 1. throughput: N pre-signed messages published over C concurrent HTTP/1.1 connections (plain
//!    hyper, lighter on the shared cores than reqwest's pool) as fast as they go;
//!    the clock stops when the subscriber has received all N.
//! 2. latency: messages paced at a fixed rate; each message's publish→delivery time is measured
//!    (sent instant to the instant its WebSocket frame is read), reported as p50/p99.
//!
//! Figures go in docs/benchmarks.md. Not a test: nothing here asserts a time.

#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::{SinkExt as _, StreamExt as _};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::{Message, client::IntoClientRequest as _};

use agentbus_gateway::{Config, Gateway};
use agentbus_protocol::ids::{Id, IdKind};
use agentbus_protocol::signing::{SigningKey, sign_envelope};
use agentbus_runtime::{SystemClock, mint};

struct Agent {
    address: String,
    token: String,
    key: SigningKey,
    key_id: Id,
}

async fn register(http: &reqwest::Client, url: &str, admin: &str, name: &str) -> Agent {
    let key = SigningKey::from_seed(agentbus_runtime::random_bytes());
    let v: Value = http
        .post(format!("{url}/v1/agents"))
        .bearer_auth(admin)
        .json(&json!({"name": name, "public_key": key.public().to_base64url()}))
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

fn envelope(from: &Agent, to: &str, n: usize) -> (String, Vec<u8>) {
    let id = mint(IdKind::Message).to_string();
    let mut env = json!({
        "specversion": "1.0", "id": id, "source": from.address, "type": "agentbus.message.v1",
        "time": agentbus_protocol::timestamp::Timestamp(agentbus_runtime::Clock::now(&SystemClock).millis()).to_string(),
        "datacontenttype": "application/json", "to": to,
        "conversation_id": mint(IdKind::Conversation).to_string(),
        "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "schema": "https://komsary.agentbus.exchange/schemas/agentbus.message/v1.json",
        "data": {"text": format!("message {n}: is change 482 clear for the 14:30 deploy?")}
    })
    .as_object()
    .unwrap()
    .clone();
    sign_envelope(&mut env, &from.key, from.key_id).unwrap();
    (id, Value::Object(env).to_string().into_bytes())
}

/// The allocator the `agentbus` binary uses, so the figures are the binary's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

type Arrivals = Arc<Mutex<HashMap<String, Instant>>>;

async fn subscribe(url: &str, token: &str, arrivals: Arrivals) -> tokio::task::JoinHandle<()> {
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
            envelope: Id<'a>,
        }
        #[derive(serde::Deserialize)]
        struct Id<'a> {
            #[serde(borrow)]
            id: &'a str,
        }
        let mut acks: Vec<Value> = Vec::new();
        loop {
            // Acks are collected as deliveries arrive and sent as one `acks` frame when none is
            // waiting (or 1,000 are due): what a receiver under load does.
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
        println!("subscriber: the gateway closed the WebSocket");
    })
}

fn main() {
    // The gateway's warnings (a WebSocket that stopped, say) explain a stalled run.
    tracing_subscriber::fmt()
        .with_env_filter("warn")
        .with_writer(std::io::stderr)
        .init();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let tmp = tempfile::tempdir().unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut config = Config::new(addr, tmp.path().join("gw"));
        config.inbox_max_depth = 1_000_000;
        config.rate_per_agent = 1e9;
        config.rate_burst = 1e9;
        let gw = Gateway::open(config, Arc::new(SystemClock)).await.unwrap();
        let admin = gw.bootstrap.as_ref().unwrap().admin_token.clone();
        tokio::spawn(gw.serve_on(listener, std::future::pending()));
        let url = format!("http://{addr}");
        // reqwest is built without a rustls provider in this workspace (see the root Cargo.toml).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder().pool_max_idle_per_host(256).build().unwrap();
        let sub = register(&http, &url, &admin, "subscriber").await;
        let senders: Vec<Agent> = futures_util::future::join_all((0..8).map(|i| register(&http, &url, &admin, Box::leak(format!("sender-{i}").into_boxed_str())))).await;
        let arrivals: Arrivals = Arc::default();
        let _ws = subscribe(&url, &sub.token, arrivals.clone()).await;

        // Phase 1: throughput.
        let n: usize = std::env::var("BENCH_N").ok().and_then(|v| v.parse().ok()).unwrap_or(40_000);
        // Publishes in flight: each waits for its group's fsync, so throughput is bounded by
        // concurrency / commit latency; a fleet offers many concurrent publishers.
        let concurrency: usize = std::env::var("BENCH_CONCURRENCY").ok().and_then(|v| v.parse().ok()).unwrap_or(256);
        let mut work: Vec<(String, Vec<u8>, String)> = (0..n)
            .map(|i| {
                let s = &senders[i % senders.len()];
                let (id, body) = envelope(s, &sub.address, i);
                (id, body, s.token.clone())
            })
            .collect();
        let queue = Arc::new(Mutex::new(std::mem::take(&mut work)));
        let started = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..concurrency {
            let queue = queue.clone();
            tasks.push(tokio::spawn(async move {
                // One keep-alive HTTP/1.1 connection per publisher, as a fleet of agents would hold.
                let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
                tcp.set_nodelay(true).unwrap();
                let (mut send, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp)).await.unwrap();
                tokio::spawn(conn);
                loop {
                    let next = queue.lock().unwrap().pop();
                    let Some((_, body, token)) = next else { break };
                    let req = hyper::Request::post("/v1/messages")
                        .header("host", addr.to_string())
                        .header("authorization", format!("Bearer {token}"))
                        .header("content-type", "application/json")
                        .body(http_body_util::Full::new(bytes::Bytes::from(body)))
                        .unwrap();
                    let r = send.send_request(req).await.unwrap();
                    assert_eq!(r.status().as_u16(), 202);
                    // Read the receipt to the end so the connection is ready for the next request.
                    http_body_util::BodyExt::collect(r.into_body()).await.unwrap();
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        let published = started.elapsed();
        while arrivals.lock().unwrap().len() < n {
            // Delivery normally ends within a second of the last publish: report a stall rather
            // than hang.
            if started.elapsed() > published + Duration::from_secs(30) {
                println!("stalled: {} of {n} delivered 30 s after the last publish", arrivals.lock().unwrap().len());
                std::process::exit(1);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let delivered = started.elapsed();
        println!(
            "throughput: {n} signed messages, {concurrency} connections: published in {:.2} s ({:.0}/s), all delivered in {:.2} s ({:.0}/s)",
            published.as_secs_f64(),
            n as f64 / published.as_secs_f64(),
            delivered.as_secs_f64(),
            n as f64 / delivered.as_secs_f64()
        );

        // Phase 2: latency at a fixed rate.
        let rates: Vec<u64> = std::env::var("BENCH_RATES")
            .map(|v| v.split(',').filter_map(|r| r.parse().ok()).collect())
            .unwrap_or_else(|_| vec![1000, 5000]);
        for rate in rates {
            arrivals.lock().unwrap().clear();
            let seconds = 5u64;
            let total = (rate * seconds) as usize;
            let msgs: Vec<(String, Vec<u8>, String)> = (0..total)
                .map(|i| {
                    let s = &senders[i % senders.len()];
                    let (id, body) = envelope(s, &sub.address, i);
                    (id, body, s.token.clone())
                })
                .collect();
            let sent: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
            // Bounded in flight, so a slow moment cannot open thousands of sockets.
            let permits = Arc::new(tokio::sync::Semaphore::new(256));
            let start = Instant::now();
            let mut handles = Vec::with_capacity(total);
            for (i, (id, body, token)) in msgs.into_iter().enumerate() {
                let due = start + Duration::from_micros(i as u64 * 1_000_000 / rate);
                tokio::time::sleep_until(due.into()).await;
                let http = http.clone();
                let url = url.clone();
                let sent = sent.clone();
                let permit = permits.clone().acquire_owned().await.unwrap();
                handles.push(tokio::spawn(async move {
                    let _permit = permit;
                    sent.lock().unwrap().insert(id, Instant::now());
                    let r = http.post(format!("{url}/v1/messages")).bearer_auth(token).header("content-type", "application/json").body(body).send().await.unwrap();
                    assert_eq!(r.status().as_u16(), 202);
                }));
            }
            for h in handles {
                h.await.unwrap();
            }
            while arrivals.lock().unwrap().len() < total {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let sent = sent.lock().unwrap();
            let arrived = arrivals.lock().unwrap();
            let mut lat: Vec<f64> = sent.iter().map(|(id, t)| arrived[id].duration_since(*t).as_secs_f64() * 1000.0).collect();
            lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
            let pct = |p: f64| lat[((lat.len() as f64 * p) as usize).min(lat.len() - 1)];
            println!("latency at {rate}/s for {seconds} s: publish→delivery p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms", pct(0.50), pct(0.99), lat[lat.len() - 1]);
        }
    });
    // Done: exit without tearing the runtime down under the gateway's live connections.
    std::process::exit(0);
}
