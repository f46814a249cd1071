//! What tracing costs a publish: three gateways in this process, telemetry off, on with every
//! trace kept, and on keeping one in a hundred, measured interleaved.
//!
//! `scripts/bench-telemetry` builds it in release and runs it (`cargo bench -p agentbus-gateway
//! --bench telemetry`). Each gateway exporting does so to an OTLP/HTTP sink in this process that
//! reads and answers every export (so the exporter's work is all paid, on the same cores). The
//! targets: `off` (no endpoint); `1.0` (`always_on`); `0.01` (`traceidratio` 0.01: a ratio of
//! the trace id whatever the envelope's sampled flag, since the default `parentbased_*` samplers
//! keep every trace a sender sampled and the load generator's envelopes are sampled).
//!
//! In each of `BENCH_ROUNDS` rounds (default 3) each target in turn (the order rotating per round)
//! measures signed durable publish throughput (`BENCH_N` messages of `BENCH_SIZE` bytes, default
//! 20,000 of 1,024, over `BENCH_CONCURRENCY` connections, default 256; the clock stops when the
//! WebSocket subscriber has all of them) and publish→delivery latency at `BENCH_RATE` msg/s
//! (default 1,000) for `BENCH_SECS` (default 10), through `loadgen`, the load generator of the
//! other gateway benches. Figures go in docs/benchmarks.md. Not a test: nothing asserts a time.

#![allow(clippy::unwrap_used, clippy::print_stdout, missing_docs)]

mod gateway;
mod loadgen;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use agentbus_gateway::config::StoreSetting;
use gateway::env;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

/// The allocator the `agentbus` binary uses, so the figures are the binary's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// An OTLP/HTTP sink on loopback: reads each export whole and answers 200; counts the bytes.
async fn sink(bytes: Arc<AtomicU64>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        loop {
            let Ok((conn, _)) = listener.accept().await else {
                return;
            };
            let bytes = bytes.clone();
            tokio::spawn(async move {
                let (r, mut w) = conn.into_split();
                let mut r = BufReader::new(r);
                loop {
                    let mut len = 0usize;
                    let mut line = String::new();
                    if r.read_line(&mut line).await.unwrap_or(0) == 0 {
                        return;
                    }
                    loop {
                        line.clear();
                        if r.read_line(&mut line).await.unwrap_or(0) == 0 {
                            return;
                        }
                        let h = line.trim_end();
                        if h.is_empty() {
                            break;
                        }
                        if let Some((k, v)) = h.split_once(':')
                            && k.eq_ignore_ascii_case("content-length")
                        {
                            len = v.trim().parse().unwrap_or(0);
                        }
                    }
                    let mut body = vec![0; len];
                    if r.read_exact(&mut body).await.is_err() {
                        return;
                    }
                    bytes.fetch_add(len as u64, Ordering::Relaxed);
                    let ok = b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
                    if w.write_all(ok).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    url
}

struct Target {
    name: &'static str,
    setup: loadgen::Setup,
    throughput: Vec<f64>,
    /// p50, p99 of publish→delivery, ms, per round.
    latency: Vec<[f64; 2]>,
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let rt = gateway::runtime();
    rt.block_on(async {
        let rounds = env("BENCH_ROUNDS", 3usize);
        let n = env("BENCH_N", 20_000usize);
        let concurrency = env("BENCH_CONCURRENCY", 256usize);
        let size = env("BENCH_SIZE", 1024usize);
        let rate = env("BENCH_RATE", 1000u64);
        let seconds = env("BENCH_SECS", 10u64);
        let tmp = tempfile::tempdir().unwrap();
        let exported = Arc::new(AtomicU64::new(0));
        let url = sink(exported.clone()).await;
        let mut targets = Vec::new();
        for (name, sampler, arg) in [
            ("off", "", ""),
            ("on, 1.0", "always_on", ""),
            ("on, 0.01", "traceidratio", "0.01"),
        ] {
            let url = url.clone();
            let (addr, admin) = gateway::start_with(
                tmp.path().join(name.replace([',', ' ', '.'], "")),
                StoreSetting::Sqlite,
                |c| {
                    if !sampler.is_empty() {
                        c.otel_endpoint = url;
                        c.otel_traces_sampler = sampler.to_owned();
                        c.otel_traces_sampler_arg = arg.to_owned();
                    }
                },
            )
            .await;
            let setup = loadgen::Setup::new(addr, &admin.unwrap(), "telemetry").await;
            targets.push(Target {
                name,
                setup,
                throughput: Vec::new(),
                latency: Vec::new(),
            });
        }
        println!(
            "interleaved: {rounds} rounds; throughput {n} signed messages of {size} bytes over {concurrency} connections; latency at {rate}/s for {seconds} s"
        );
        let count = targets.len();
        for round in 0..rounds {
            for k in 0..count {
                let t = &mut targets[(round + k) % count];
                let (published, delivered) = t
                    .setup
                    .throughput(n, size, concurrency)
                    .await
                    .unwrap_or((std::time::Duration::MAX, std::time::Duration::MAX));
                let per_s = n as f64 / delivered.as_secs_f64();
                let lat = t.setup.latency(rate, seconds, size).await;
                let q = |p| loadgen::quantile(&lat, p);
                println!(
                    "round {} {:<9} throughput {per_s:>6.0}/s (published in {:.2} s); at {rate}/s p50 {:.2} ms, p99 {:.2} ms; exported so far {} KiB",
                    round + 1,
                    t.name,
                    published.as_secs_f64(),
                    q(0.50),
                    q(0.99),
                    exported.load(Ordering::Relaxed) / 1024
                );
                t.throughput.push(per_s);
                t.latency.push([q(0.50), q(0.99)]);
            }
        }
        if rounds == 0 {
            std::process::exit(0);
        }
        let base = median(&targets[0].throughput);
        println!();
        println!("| telemetry | throughput, msg/s (median; each round) | vs off | p50 at {rate}/s | p99 |");
        println!("|---|---|---|---|---|");
        for t in &targets {
            let m = median(&t.throughput);
            let each: Vec<String> = t.throughput.iter().map(|x| format!("{x:.0}")).collect();
            let p50 = median(&t.latency.iter().map(|l| l[0]).collect::<Vec<_>>());
            let p99 = median(&t.latency.iter().map(|l| l[1]).collect::<Vec<_>>());
            println!(
                "| {} | {m:.0} ({}) | {:+.1}% | {p50:.2} ms | {p99:.2} ms |",
                t.name,
                each.join(", "),
                (m / base - 1.0) * 100.0
            );
        }
    });
    // Done: exit without tearing the runtime down under the gateway's live connections.
    std::process::exit(0);
}
