//! Abuse figures for `docs/benchmarks.md`: the real `agentbus gateway` (release build)
//! under clients that never finish, never read or never stop, while a well-behaved publisher
//! measures its 202 latency. Run with `cargo bench -p agentbus --bench abuse`; nothing here is a
//! test, and nothing asserts a time.
//!
//! Phases, one after another on one gateway:
//! 1. 200 idle connections, 200 slowloris clients (a header line a second, never the blank line)
//!    and 50 slow bodies (a byte a second): when each is closed.
//! 2. 100 WebSockets that never read, one per agent, while 100 messages of 64 KiB go to each: the
//!    gateway's RSS (sampled every 100 ms), and when each socket is closed; before it, the same
//!    traffic to 100 agents without sockets, for the RSS the store's caches take anyway.
//! 3. `max_connections` + 50 connections held: how many are refused with AB-9002.
//! 4. 3,000 oversized publishes (2 MiB) on 8 connections: how many get their 413.
//!
//! `BENCH_BIN` runs another build of `agentbus` instead (for a before/after comparison; phases
//! that need settings it lacks are skipped).

#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::TcpStream;

use agentbus_protocol::ids::IdKind;
use agentbus_runtime::Clock as _;

use agentbus_testkit::gwproc::{self, Agent, GwProc, register};

const HEADER_TIMEOUT_S: u64 = 10;
const BODY_TIMEOUT_S: u64 = 10;
const WS_SEND_TIMEOUT_S: u64 = 10;
const MAX_CONNECTIONS: usize = 600;
/// Messages to each never-reading socket, and their size: well past what the kernel's socket
/// buffers and `ws_send_buffer` hold together (on loopback the gateway's send buffer grows to
/// `tcp_wmem`'s maximum, 4 MiB here, and the reader's holds 128 KiB), so the gateway has to stop
/// pushing.
const PER_AGENT: usize = 100;
const MESSAGE_BYTES: usize = 64 * 1024;

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

/// The gateway `bin` on `dir`, its logs to `BENCH_LOG` (or nowhere); the bounds under test only
/// for this build (`new_build`), which has their flags.
fn start(bin: &str, dir: &std::path::Path, new_build: bool) -> GwProc {
    let bounds = [
        format!("{HEADER_TIMEOUT_S}s"),
        format!("{BODY_TIMEOUT_S}s"),
        format!("{WS_SEND_TIMEOUT_S}s"),
        MAX_CONNECTIONS.to_string(),
    ];
    let mut extra = Vec::new();
    if new_build {
        extra = vec![
            "--header-timeout",
            &bounds[0],
            "--body-timeout",
            &bounds[1],
            "--ws-send-timeout",
            &bounds[2],
            "--max-connections",
            &bounds[3],
            "--rate-burst",
            "1000000",
        ];
    }
    let mut cmd = gwproc::gateway_command(bin, true, dir, &extra);
    cmd.env("RUST_LOG", "warn")
        .stderr(match std::env::var_os("BENCH_LOG") {
            Some(path) => std::fs::File::create(path).unwrap().into(),
            None => std::process::Stdio::null(),
        });
    let gw = GwProc::start_cmd(cmd);
    // `/metrics` is the gateway operator's (its series name every tenant's agents).
    let _ = OPERATOR.set(gw.operator.clone());
    gw
}

/// One keep-alive HTTP/1.1 connection.
struct Conn {
    s: BufReader<TcpStream>,
    addr: String,
}

impl Conn {
    async fn open(addr: &str) -> Conn {
        let s = TcpStream::connect(addr).await.unwrap();
        s.set_nodelay(true).unwrap();
        Conn {
            s: BufReader::new(s),
            addr: addr.to_owned(),
        }
    }

    async fn call(
        &mut self,
        method: &str,
        path: &str,
        token: &str,
        body: &[u8],
    ) -> std::io::Result<(u16, Vec<u8>)> {
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            self.addr,
            body.len()
        );
        self.s.get_mut().write_all(head.as_bytes()).await?;
        self.s.get_mut().write_all(body).await?;
        let mut status = 0;
        let mut length = 0usize;
        let mut line = String::new();
        loop {
            line.clear();
            if self.s.read_line(&mut line).await? == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            let l = line.trim_end().to_ascii_lowercase();
            if l.is_empty() {
                break;
            }
            if let Some(rest) = l.strip_prefix("http/1.1 ") {
                status = rest[..3].parse().unwrap_or(0);
            } else if let Some(n) = l.strip_prefix("content-length: ") {
                length = n.parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; length];
        self.s.read_exact(&mut body).await?;
        Ok((status, body))
    }
}

/// A signed message.v1 from `from` to `to`, stamped now.
fn signed(from: &Agent, to: &str, text: &str) -> Vec<u8> {
    let id = agentbus_runtime::mint(IdKind::Message).to_string();
    let now = agentbus_runtime::SystemClock.now().millis();
    let env = gwproc::envelope_at(from, to, &id, text, now, json!({}));
    Value::Object(env).to_string().into_bytes()
}

/// Publishes at `rate` per second until told to stop; answers each 202's latency.
fn well_behaved(
    gw: &GwProc,
    from: Agent,
    to: Agent,
    rate: u64,
) -> (
    tokio::sync::watch::Sender<bool>,
    tokio::task::JoinHandle<Vec<Duration>>,
) {
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let addr = gw.addr.clone();
    let task = tokio::spawn(async move {
        let mut c = Conn::open(&addr).await;
        let mut lat = Vec::new();
        let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / rate));
        // The receiver drains its inbox over long-polls so depth never builds.
        let drain = {
            let (addr, to, stop) = (addr.clone(), to.clone(), stop.clone());
            tokio::spawn(async move {
                let mut c = Conn::open(&addr).await;
                let mut after = 0u64;
                while !*stop.borrow() {
                    let Ok((_, b)) = c
                        .call(
                            "GET",
                            &format!("/v1/inbox?after={after}&wait=1"),
                            &to.token,
                            b"",
                        )
                        .await
                    else {
                        break;
                    };
                    let v: Value = serde_json::from_slice(&b).unwrap_or(Value::Null);
                    let acks: Vec<Value> = v["deliveries"]
                        .as_array()
                        .map(|d| d.iter().map(|d| json!({"sequence": d["sequence"], "delivery": d["delivery"]})).collect())
                        .unwrap_or_default();
                    after = v["next_after"].as_u64().unwrap_or(after);
                    if !acks.is_empty() {
                        let _ = c
                            .call(
                                "POST",
                                "/v1/inbox/acks",
                                &to.token,
                                json!({"acks": acks}).to_string().as_bytes(),
                            )
                            .await;
                    }
                }
            })
        };
        while !*stop.borrow() {
            tick.tick().await;
            let body = signed(&from, &to.address, "steady");
            let t = Instant::now();
            match c.call("POST", "/v1/messages", &from.token, &body).await {
                Ok((202, _)) => lat.push(t.elapsed()),
                Ok((s, b)) => println!("  publisher got {s}: {}", String::from_utf8_lossy(&b)),
                Err(e) => {
                    println!("  publisher connection failed: {e}");
                    c = Conn::open(&addr).await;
                }
            }
        }
        drain.abort();
        lat
    });
    (stop_tx, task)
}

/// The gateway operator's token, which `/metrics` takes.
static OPERATOR: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// A counter or gauge of the gateway's `/metrics`.
async fn metric(addr: &str, name: &str) -> u64 {
    let token = OPERATOR.get().map_or("", String::as_str);
    let Ok((_, body)) = Conn::open(addr)
        .await
        .call("GET", "/metrics", token, b"")
        .await
    else {
        return 0;
    };
    String::from_utf8_lossy(&body)
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Polls `/metrics` until `name` reaches `want` or `limit` passes; answers how long it took.
async fn until_metric(addr: &str, name: &str, want: u64, limit: Duration) -> Option<Duration> {
    let t = Instant::now();
    while t.elapsed() < limit {
        if metric(addr, name).await >= want {
            return Some(t.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

fn percentiles(mut v: Vec<Duration>) -> String {
    if v.is_empty() {
        return "none".into();
    }
    v.sort();
    let p = |q: f64| v[((v.len() as f64 - 1.0) * q) as usize].as_secs_f64() * 1000.0;
    format!(
        "{} publishes, p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        v.len(),
        p(0.5),
        p(0.99),
        p(1.0)
    )
}

fn summary(mut closed: Vec<Option<Duration>>) -> String {
    let open = closed.iter().filter(|c| c.is_none()).count();
    closed.retain(Option::is_some);
    let mut v: Vec<Duration> = closed.into_iter().flatten().collect();
    v.sort();
    if v.is_empty() {
        return format!("none closed, {open} still open");
    }
    format!(
        "{} closed after {:.1}-{:.1} s (median {:.1} s), {open} still open",
        v.len(),
        v[0].as_secs_f64(),
        v[v.len() - 1].as_secs_f64(),
        v[v.len() / 2].as_secs_f64()
    )
}

/// Waits for `s` to be closed by the gateway, feeding it `drip` bytes once a second meanwhile.
async fn closed_after(mut s: TcpStream, drip: &'static [u8], limit: Duration) -> Option<Duration> {
    let t = Instant::now();
    let mut buf = [0u8; 1024];
    loop {
        let left = limit.checked_sub(t.elapsed())?;
        tokio::select! {
            r = s.read(&mut buf) => match r {
                Ok(0) | Err(_) => return Some(t.elapsed()),
                Ok(_) => {}
            },
            _ = tokio::time::sleep(Duration::from_secs(1).min(left)) => {
                if !drip.is_empty() && s.write_all(drip).await.is_err() {
                    return Some(t.elapsed());
                }
            }
        }
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let new_build = std::env::var_os("BENCH_BIN").is_none();
    let bin =
        std::env::var("BENCH_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_agentbus").to_owned());
    let tmp = tempfile::tempdir().unwrap();
    let gw = start(&bin, &tmp.path().join("gw"), new_build);
    let pid = gw.pid();
    println!("gateway {bin} on {} (pid {pid})", gw.addr);
    println!("RSS at start: {} MiB", rss_kib(pid) / 1024);
    let sender = register(&gw, "steady-sender");
    let receiver = register(&gw, "steady-receiver");
    let observe = Duration::from_secs(if new_build { 40 } else { 60 });

    // 1. Idle, slowloris, slow bodies.
    let (stop, publisher) = well_behaved(&gw, sender.clone(), receiver.clone(), 200);
    let mut waits = Vec::new();
    for i in 0..450 {
        let s = TcpStream::connect(&gw.addr).await.unwrap();
        let (kind, drip): (usize, &'static [u8]) = match i % 9 {
            0..=3 => (0, b""),
            4..=7 => (1, b"X-Slow: 1\r\n"),
            _ => (2, b"x"),
        };
        let mut s = s;
        match kind {
            1 => s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n").await.unwrap(),
            2 => s
                .write_all(b"POST /v1/agents HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{")
                .await
                .unwrap(),
            _ => {}
        }
        waits.push((kind, tokio::spawn(closed_after(s, drip, observe))));
    }
    let mut by_kind: [Vec<Option<Duration>>; 3] = Default::default();
    for (kind, w) in waits {
        by_kind[kind].push(w.await.unwrap());
    }
    let _ = stop.send(true);
    let lat = publisher.await.unwrap();
    println!("phase 1 (observed up to {} s):", observe.as_secs());
    println!(
        "  200 idle connections: {}",
        summary(std::mem::take(&mut by_kind[0]))
    );
    println!(
        "  200 slowloris clients: {}",
        summary(std::mem::take(&mut by_kind[1]))
    );
    println!(
        "  50 slow bodies: {}",
        summary(std::mem::take(&mut by_kind[2]))
    );
    println!(
        "  well-behaved publisher at 200/s meanwhile: {}",
        percentiles(lat)
    );
    println!("  RSS after phase 1: {} MiB", rss_kib(pid) / 1024);

    // 2. WebSockets that never read. First the same traffic to agents without sockets, so the
    // store's page cache and the message tables have grown as they will, then with the sockets.
    let text = "w".repeat(MESSAGE_BYTES);
    let mut c = Conn::open(&gw.addr).await;
    let mut control = Vec::new();
    for i in 0..100 {
        control.push(register(&gw, &format!("no-socket-{i:03}")));
    }
    let before_control = rss_kib(pid);
    for _ in 0..PER_AGENT {
        for a in &control {
            let body = signed(&sender, &a.address, &text);
            let (s, b) = c
                .call("POST", "/v1/messages", &sender.token, &body)
                .await
                .unwrap();
            assert_eq!(s, 202, "{}", String::from_utf8_lossy(&b));
        }
    }
    let after_control = rss_kib(pid);
    let mut agents = Vec::new();
    for i in 0..100 {
        agents.push(register(&gw, &format!("never-reads-{i:03}")));
    }
    let before_sockets = rss_kib(pid);
    let mut sockets = Vec::new();
    for a in &agents {
        let mut s = TcpStream::connect(&gw.addr).await.unwrap();
        let req = format!(
            "GET /v1/inbox/ws HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
            gw.addr, a.token
        );
        s.write_all(req.as_bytes()).await.unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            s.read_exact(&mut byte).await.unwrap();
            head.push(byte[0]);
        }
        assert!(
            head.starts_with(b"HTTP/1.1 101"),
            "{}",
            String::from_utf8_lossy(&head)
        );
        sockets.push(s);
    }
    let base = rss_kib(pid);
    let peak = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(base));
    let sampler = {
        let peak = peak.clone();
        tokio::spawn(async move {
            loop {
                peak.fetch_max(rss_kib(pid), std::sync::atomic::Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let (stop, publisher) = well_behaved(&gw, sender.clone(), receiver.clone(), 200);
    let pushing = Instant::now();
    for _ in 0..PER_AGENT {
        for a in &agents {
            let body = signed(&sender, &a.address, &text);
            let (s, b) = c
                .call("POST", "/v1/messages", &sender.token, &body)
                .await
                .unwrap();
            assert_eq!(s, 202, "{}", String::from_utf8_lossy(&b));
        }
    }
    let published = pushing.elapsed();
    // The sockets are never read: the gateway says when it has closed them as slow consumers.
    let slow = if new_build {
        until_metric(&gw.addr, "agentbus_slow_consumers_total", 100, observe).await
    } else {
        tokio::time::sleep(observe).await;
        None
    };
    let at_close = rss_kib(pid);
    drop(sockets);
    let _ = stop.send(true);
    let lat = publisher.await.unwrap();
    sampler.abort();
    println!(
        "phase 2: {} messages of {} KiB to each of 100 agents (published in {:.1} s each time)",
        PER_AGENT,
        MESSAGE_BYTES / 1024,
        published.as_secs_f64()
    );
    println!(
        "  without sockets: RSS {} -> {} MiB",
        before_control / 1024,
        after_control / 1024
    );
    println!(
        "  100 never-reading WebSockets: RSS {} MiB before opening, {} MiB open, peak {} MiB, {} MiB when closed; {}",
        before_sockets / 1024,
        base / 1024,
        peak.load(std::sync::atomic::Ordering::Relaxed) / 1024,
        at_close / 1024,
        match slow {
            Some(t) => format!(
                "all 100 closed as slow consumers {:.1} s after the last publish",
                t.as_secs_f64()
            ),
            None => format!(
                "{} of 100 closed as slow consumers within {} s",
                metric(&gw.addr, "agentbus_slow_consumers_total").await,
                observe.as_secs()
            ),
        }
    );
    println!(
        "  well-behaved publisher at 200/s meanwhile: {}",
        percentiles(lat)
    );

    if new_build {
        // 3. The connection cap: hold connections until the gateway has max_connections open,
        // then try 50 more, one at a time.
        let mut held = Vec::new();
        // The gauge counts the connection that reads it, so one more is held after the loop.
        while metric(&gw.addr, "agentbus_open_connections").await < MAX_CONNECTIONS as u64 {
            held.push(TcpStream::connect(&gw.addr).await.unwrap());
        }
        held.push(TcpStream::connect(&gw.addr).await.unwrap());
        let mut refused = 0;
        for _ in 0..50 {
            let mut s = TcpStream::connect(&gw.addr).await.unwrap();
            let _ = s
                .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                .await;
            let mut answer = Vec::new();
            let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut answer)).await;
            if answer.starts_with(b"HTTP/1.1 503")
                && String::from_utf8_lossy(&answer).contains("AB-9002")
            {
                refused += 1;
            }
        }
        drop(held);
        println!(
            "phase 3: {MAX_CONNECTIONS} connections open; of 50 more, {refused} answered 503 AB-9002"
        );
    }

    // 4. Oversized bodies.
    let body = vec![b'x'; 2 * 1024 * 1024];
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let (addr, body) = (gw.addr.clone(), body.clone());
        tasks.spawn(async move {
            let (mut ok, mut other) = (0, 0);
            let mut c = Conn::open(&addr).await;
            for _ in 0..375 {
                match c.call("POST", "/v1/messages", "x", &body).await {
                    Ok((413, _)) => ok += 1,
                    _ => {
                        other += 1;
                        c = Conn::open(&addr).await;
                    }
                }
            }
            (ok, other)
        });
    }
    let (mut ok, mut other) = (0, 0);
    while let Some(r) = tasks.join_next().await {
        let (o, e) = r.unwrap();
        ok += o;
        other += e;
    }
    println!("phase 4: 3,000 publishes of 2 MiB: {ok} answered 413, {other} failed otherwise");
    gw.kill9();
}
