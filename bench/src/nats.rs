//! The NATS JetStream side: a `nats-server` process, a file stream fsynced before each ack, and a
//! durable pull consumer with explicit acks.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer, stream};
use futures_util::StreamExt as _;

type Arrivals = Arc<Mutex<HashMap<String, Instant>>>;

/// A running server with its stream and consumer.
pub struct Broker {
    _server: tokio::process::Child,
    publishers: Vec<jetstream::Context>,
    arrivals: Arrivals,
    next: std::sync::atomic::AtomicU64,
}

impl Broker {
    /// Starts `nats-server` with JetStream in `dir` on `port`, creates the stream and consumer.
    pub async fn start(dir: &std::path::Path, port: u16) -> Broker {
        std::fs::create_dir_all(dir).expect("nats dir");
        let conf = dir.join("nats.conf");
        std::fs::write(
            &conf,
            format!(
                "listen: 127.0.0.1:{port}\njetstream {{\n  store_dir: \"{}\"\n  sync_interval: always\n}}\n",
                dir.join("js").display()
            ),
        )
        .expect("nats.conf");
        let bin = std::env::var("NATS_SERVER").unwrap_or_else(|_| ".venv/bin/nats-server".into());
        let server = tokio::process::Command::new(&bin)
            .arg("-c")
            .arg(&conf)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("{bin}: {e} (scripts/bench installs it)"));
        let url = format!("nats://127.0.0.1:{port}");
        let connect = || async {
            for _ in 0..200 {
                if let Ok(c) = async_nats::connect(&url).await {
                    return c;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            panic!("nats-server did not start on {url}");
        };
        // Eight publishing connections, as AgentBus has eight senders.
        let mut publishers = Vec::new();
        for _ in 0..8 {
            publishers.push(jetstream::new(connect().await));
        }
        let js = &publishers[0];
        let stream = js
            .create_stream(stream::Config {
                name: "BENCH".into(),
                subjects: vec!["bench.>".into()],
                storage: stream::StorageType::File,
                duplicate_window: Duration::from_secs(120),
                ..Default::default()
            })
            .await
            .expect("stream");
        let consumer = stream
            .create_consumer(consumer::pull::Config {
                durable_name: Some("bench".into()),
                ack_policy: consumer::AckPolicy::Explicit,
                max_ack_pending: 1_000_000,
                ..Default::default()
            })
            .await
            .expect("consumer");
        let arrivals: Arrivals = Arc::default();
        let seen = arrivals.clone();
        let mut messages = consumer.messages().await.expect("messages");
        tokio::spawn(async move {
            while let Some(Ok(m)) = messages.next().await {
                if let Some(id) = m.headers.as_ref().and_then(|h| h.get("Nats-Msg-Id")) {
                    seen.lock()
                        .expect("arrivals")
                        .insert(id.as_str().to_owned(), Instant::now());
                }
                let _ = m.ack().await;
            }
            eprintln!("jetstream: the consumer's stream ended");
        });
        Broker {
            _server: server,
            publishers,
            arrivals,
            next: Default::default(),
        }
    }

    fn message(&self, size: usize) -> (String, bytes::Bytes) {
        let n = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        (format!("m{n}"), bytes::Bytes::from(vec![b'x'; size]))
    }

    async fn publish(js: &jetstream::Context, id: &str, payload: bytes::Bytes) {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Nats-Msg-Id", id);
        js.publish_with_headers("bench.msg", headers, payload)
            .await
            .expect("publish")
            .await
            .expect("stored and acknowledged");
    }

    /// Publishes `n` messages with `concurrency` in flight; the time until the consumer has all.
    pub async fn throughput(&self, n: usize, size: usize, concurrency: usize) -> Duration {
        self.arrivals.lock().expect("arrivals").clear();
        let work: Vec<(String, bytes::Bytes)> = (0..n).map(|_| self.message(size)).collect();
        let queue = Arc::new(Mutex::new(work));
        let started = Instant::now();
        let mut tasks = Vec::new();
        for i in 0..concurrency {
            let queue = queue.clone();
            let js = self.publishers[i % self.publishers.len()].clone();
            tasks.push(tokio::spawn(async move {
                loop {
                    let next = queue.lock().expect("queue").pop();
                    let Some((id, payload)) = next else { break };
                    Broker::publish(&js, &id, payload).await;
                }
            }));
        }
        for t in tasks {
            t.await.expect("publisher");
        }
        self.wait_for(n).await;
        started.elapsed()
    }

    async fn wait_for(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.arrivals.lock().expect("arrivals").len() < n {
            assert!(Instant::now() < deadline, "jetstream stalled");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Publishes at `rate` per second for `seconds`; each message's publish→delivery time in
    /// milliseconds, sorted.
    pub async fn latency(&self, rate: u64, seconds: u64, size: usize) -> Vec<f64> {
        self.arrivals.lock().expect("arrivals").clear();
        let total = (rate * seconds) as usize;
        let sent: Arrivals = Arc::default();
        let permits = Arc::new(tokio::sync::Semaphore::new(256));
        let start = Instant::now();
        let mut handles = Vec::with_capacity(total);
        for i in 0..total {
            let due = start + Duration::from_micros(i as u64 * 1_000_000 / rate);
            tokio::time::sleep_until(due.into()).await;
            let (id, payload) = self.message(size);
            let js = self.publishers[i % self.publishers.len()].clone();
            let sent = sent.clone();
            let permit = permits.clone().acquire_owned().await.expect("permit");
            handles.push(tokio::spawn(async move {
                let _permit = permit;
                sent.lock()
                    .expect("sent")
                    .insert(id.clone(), Instant::now());
                Broker::publish(&js, &id, payload).await;
            }));
        }
        for h in handles {
            h.await.expect("publisher");
        }
        self.wait_for(total).await;
        let sent = sent.lock().expect("sent");
        let arrived = self.arrivals.lock().expect("arrivals");
        let mut lat: Vec<f64> = sent
            .iter()
            .map(|(id, t)| arrived[id].duration_since(*t).as_secs_f64() * 1000.0)
            .collect();
        lat.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
        lat
    }
}
