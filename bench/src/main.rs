//! AgentBus and NATS JetStream side by side on one machine, interleaved in rounds (`scripts/bench`).
//!
//! Both brokers run as their own processes, durable before they acknowledge a publish:
//! - AgentBus: the release `agentbus gateway` binary on a fresh data directory (SQLite WAL,
//!   `synchronous=FULL`, group commit), signed 1 KiB `message.v1` envelopes over HTTP/1.1, one
//!   WebSocket subscriber acking in bursts: the load generator of the gateway's own bench.
//! - JetStream: `nats-server` from the pinned PyPI wheel with `sync_interval: always` (fsync before
//!   each ack), 1 KiB messages with a unique `Nats-Msg-Id` (JetStream's dedupe, as AgentBus dedupes
//!   by id), a durable pull consumer with explicit acks, through `async-nats`.
//!
//! Each round measures, for each broker in turn: throughput (N publishes over C in flight, the clock
//! stopping when the consumer has all N) and publish→delivery latency at each paced rate. The summary
//! gives medians over rounds and the ratios. Environment: `BENCH_ROUNDS` (3), `BENCH_N` (40,000),
//! `BENCH_CONCURRENCY` (256), `BENCH_RATES` (1000,5000), `BENCH_SECONDS` per rate (5), `BENCH_SIZE`
//! (1,024 bytes), `AGENTBUS_BIN`, `NATS_SERVER`, `BENCH_ONLY` (`agentbus` or `nats`).

#![allow(missing_docs)]

#[path = "../../crates/agentbus-gateway/benches/loadgen/mod.rs"]
mod loadgen;
mod nats;

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncBufReadExt as _;

fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// One measurement of one broker.
#[derive(Default, Clone)]
struct Figures {
    throughput: Vec<f64>,
    /// Per rate: (p50, p99, p99.9) per round.
    latency: Vec<Vec<(f64, f64, f64)>>,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    v[v.len() / 2]
}

/// Starts the `agentbus` gateway binary and returns it with its address and first admin token.
async fn start_agentbus(dir: &std::path::Path) -> (tokio::process::Child, SocketAddr, String) {
    let bin = std::env::var("AGENTBUS_BIN").unwrap_or_else(|_| "target/release/agentbus".into());
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port())
        .parse()
        .expect("address");
    let mut child = tokio::process::Command::new(&bin)
        .args(["gateway", "--data"])
        .arg(dir)
        .args(["--listen", &addr.to_string()])
        .args(agentbus_settings())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("{bin}: {e} (build it: cargo build --release -p agentbus)"));
    let mut lines = tokio::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut token = None;
    while let Ok(Some(line)) = lines.next_line().await {
        if let Some(at) = line.find("abu_") {
            // base64url: a token cut at its first '-' would be refused (401).
            let t: String = line[at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
                .collect();
            token.get_or_insert(t);
        }
        if token.is_some() && line.contains("listening") {
            break;
        }
    }
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    let token = token.expect("the gateway printed its first admin token");
    (child, addr, token)
}

/// Limits lifted so the load generator measures the store, not the quotas.
fn agentbus_settings() -> Vec<String> {
    [
        "--inbox-max-depth",
        "1000000",
        "--rate-per-agent",
        "1000000000",
        "--rate-burst",
        "1000000000",
    ]
    .map(String::from)
    .to_vec()
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(run());
    // Exit without tearing down live connections.
    std::process::exit(0);
}

async fn run() {
    let rounds = env("BENCH_ROUNDS", 3usize);
    let n = env("BENCH_N", 40_000usize);
    let concurrency = env("BENCH_CONCURRENCY", 256usize);
    let seconds = env("BENCH_SECONDS", 5u64);
    let size = env("BENCH_SIZE", 1024usize);
    let only = std::env::var("BENCH_ONLY").unwrap_or_default();
    let rates: Vec<u64> = std::env::var("BENCH_RATES")
        .map(|v| v.split(',').filter_map(|r| r.parse().ok()).collect())
        .unwrap_or_else(|_| vec![1000, 5000]);
    let tmp = tempfile::tempdir().expect("temp dir");

    let ab = if only != "nats" {
        let (child, addr, admin) = start_agentbus(&tmp.path().join("agentbus")).await;
        Some((child, loadgen::Setup::new(addr, &admin, "side").await))
    } else {
        None
    };
    let js = if only != "agentbus" {
        Some(nats::Broker::start(&tmp.path().join("nats"), free_port()).await)
    } else {
        None
    };
    println!(
        "rounds {rounds}, {n} messages of {size} bytes, {concurrency} in flight, rates {rates:?} for {seconds} s each"
    );
    let mut figs = [Figures::default(), Figures::default()];
    for f in &mut figs {
        f.latency = vec![Vec::new(); rates.len()];
    }
    for round in 1..=rounds {
        if let Some((_, setup)) = &ab {
            let (published, delivered) = setup
                .throughput(n, size, concurrency)
                .await
                .expect("AgentBus delivered every message");
            let rate = n as f64 / delivered.as_secs_f64();
            println!(
                "round {round} agentbus  throughput {rate:>8.0} msg/s (published in {:.2} s)",
                published.as_secs_f64()
            );
            figs[0].throughput.push(rate);
        }
        if let Some(js) = &js {
            let delivered = js.throughput(n, size, concurrency).await;
            let rate = n as f64 / delivered.as_secs_f64();
            println!("round {round} jetstream throughput {rate:>8.0} msg/s");
            figs[1].throughput.push(rate);
        }
        for (i, &rate) in rates.iter().enumerate() {
            if let Some((_, setup)) = &ab {
                let (lat, accepted) = setup.latency_parts(rate, seconds, size).await;
                let q = |p| loadgen::quantile(&lat, p);
                let f = (q(0.5), q(0.99), q(0.999));
                println!(
                    "round {round} agentbus  at {rate:>5}/s p50 {:.2} ms p99 {:.2} ms p99.9 {:.2} ms max {:.2} ms (202: p50 {:.2} ms p99 {:.2} ms)",
                    f.0,
                    f.1,
                    f.2,
                    lat[lat.len() - 1],
                    loadgen::quantile(&accepted, 0.5),
                    loadgen::quantile(&accepted, 0.99),
                );
                figs[0].latency[i].push(f);
            }
            if let Some(js) = &js {
                let lat = js.latency(rate, seconds, size).await;
                let q = |p| loadgen::quantile(&lat, p);
                let f = (q(0.5), q(0.99), q(0.999));
                println!(
                    "round {round} jetstream at {rate:>5}/s p50 {:.2} ms p99 {:.2} ms p99.9 {:.2} ms max {:.2} ms",
                    f.0,
                    f.1,
                    f.2,
                    lat[lat.len() - 1]
                );
                figs[1].latency[i].push(f);
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    summary(&figs, &rates, ab.is_some() && js.is_some());
    drop(ab);
    drop(js);
}

fn summary(figs: &[Figures; 2], rates: &[u64], both: bool) {
    println!("\nmedians over rounds:");
    println!("| measure | AgentBus | JetStream | ratio (AgentBus / JetStream) |");
    println!("| --- | --- | --- | --- |");
    let cell = |v: &Vec<f64>| {
        if v.is_empty() {
            None
        } else {
            Some(median(v.clone()))
        }
    };
    let row = |name: &str, a: Option<f64>, j: Option<f64>, unit: &str, digits: usize| {
        let fmt = |x: Option<f64>| x.map_or("-".into(), |x| format!("{x:.digits$} {unit}"));
        let ratio = match (a, j, both) {
            (Some(a), Some(j), true) if j > 0.0 => format!("{:.2}×", a / j),
            _ => "-".into(),
        };
        println!("| {name} | {} | {} | {ratio} |", fmt(a), fmt(j));
    };
    row(
        "durable publish throughput",
        cell(&figs[0].throughput),
        cell(&figs[1].throughput),
        "msg/s",
        0,
    );
    for (i, rate) in rates.iter().enumerate() {
        for (k, name) in ["p50", "p99", "p99.9"].iter().enumerate() {
            let pick = |f: &Figures| {
                let v: Vec<f64> = f.latency[i].iter().map(|t| [t.0, t.1, t.2][k]).collect();
                cell(&v)
            };
            row(
                &format!("publish→delivery {name} at {rate}/s"),
                pick(&figs[0]),
                pick(&figs[1]),
                "ms",
                2,
            );
        }
    }
}
