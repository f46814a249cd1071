//! Signed `message.v1` publishes over HTTP on loopback to one WebSocket subscriber, against a
//! gateway in this process.
//!
//! `cargo bench -p agentbus-gateway --bench throughput` (env: `BENCH_N` messages, default 40,000;
//! `BENCH_CONCURRENCY` publishes in flight, default 256; `BENCH_RATES` paced rates, default
//! `1000,5000`, empty for none; `BENCH_SIZE` envelope bytes, default 1,024). Two phases:
//! 1. throughput: N pre-signed messages published over C concurrent HTTP/1.1 connections (plain
//!    hyper, lighter on the shared cores than reqwest's pool) as fast as they go;
//!    the clock stops when the subscriber has received all N.
//! 2. latency: messages paced at a fixed rate; each message's publish→delivery time is measured
//!    (sent instant to the instant its WebSocket frame is read), reported as p50/p99/p99.9.
//!
//! The load generator is `loadgen`, shared with the side-by-side bench against NATS JetStream
//! (`scripts/bench`) and the SQLite/PostgreSQL bench (`benches/stores.rs`). Figures go in
//! docs/benchmarks.md. Not a test: nothing here asserts a time.

#![allow(clippy::unwrap_used, clippy::print_stdout, missing_docs)]

mod gateway;
mod loadgen;

use agentbus_gateway::config::StoreSetting;
use gateway::env;

/// The allocator the `agentbus` binary uses, so the figures are the binary's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let rt = gateway::runtime();
    rt.block_on(async {
        let tmp = tempfile::tempdir().unwrap();
        let (addr, admin) = gateway::start(tmp.path().join("gw"), StoreSetting::Sqlite).await;
        let admin = admin.unwrap();
        let setup = loadgen::Setup::new(addr, &admin, "bench").await;

        let n = env("BENCH_N", 40_000usize);
        // Publishes in flight: each waits for its group's fsync, so throughput is bounded by
        // concurrency / commit latency; a fleet offers many concurrent publishers.
        let concurrency = env("BENCH_CONCURRENCY", 256usize);
        let size = env("BENCH_SIZE", 1024usize);
        let Some((published, delivered)) = setup.throughput(n, size, concurrency).await else {
            std::process::exit(1);
        };
        println!(
            "throughput: {n} signed messages of {size} bytes, {concurrency} connections: published in {:.2} s ({:.0}/s), all delivered in {:.2} s ({:.0}/s)",
            published.as_secs_f64(),
            n as f64 / published.as_secs_f64(),
            delivered.as_secs_f64(),
            n as f64 / delivered.as_secs_f64()
        );

        let rates: Vec<u64> = std::env::var("BENCH_RATES")
            .map(|v| v.split(',').filter_map(|r| r.parse().ok()).collect())
            .unwrap_or_else(|_| vec![1000, 5000]);
        for rate in rates {
            let seconds = 5u64;
            let lat = setup.latency(rate, seconds, size).await;
            let q = |p| loadgen::quantile(&lat, p);
            println!(
                "latency at {rate}/s for {seconds} s: publish→delivery p50 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms, max {:.2} ms",
                q(0.50),
                q(0.99),
                q(0.999),
                lat[lat.len() - 1]
            );
        }
    });
    // Done: exit without tearing the runtime down under the gateway's live connections.
    std::process::exit(0);
}
