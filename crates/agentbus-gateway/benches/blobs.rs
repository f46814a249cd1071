//! Upload and download throughput of one 100 MiB attachment through each blob target:
//! the inline store (the inline cap raised to fit) and an S3 bucket on moto, pre-signed and through
//! the gateway. The client is the sidecar's own (`agentbus_client::Gateway::upload_blob`,
//! `download_blob_to`), so sealing, `complete` and the sha256 check are all in the figures.
//!
//! `scripts/bench-blobs` starts moto and runs this (`AGENTBUS_TEST_S3_URL` names the server).

#![allow(clippy::unwrap_used, clippy::print_stdout)]

mod loadgen;

use std::sync::Arc;
use std::time::Instant;

use agentbus_gateway::config::S3Download;
use agentbus_gateway::{Config, Gateway};
use agentbus_runtime::{Clock as _, ManualClock};

const MIB: usize = 1 << 20;

fn main() {
    let s3 = std::env::var("AGENTBUS_TEST_S3_URL")
        .expect("AGENTBUS_TEST_S3_URL: run scripts/bench-blobs, which starts the S3 test server");
    let size = std::env::var("BLOB_BENCH_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100usize)
        * MIB;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let body: Vec<u8> = (0..size).map(|i| (i * 31 % 251) as u8).collect();
        println!(
            "| target | upload MiB/s | download MiB/s | ({} MiB, sealed, sha256 checked) |",
            size / MIB
        );
        println!("|---|---|---|---|");
        for (label, target) in [
            ("inline (files under the data directory)", None),
            (
                "S3 (moto), pre-signed PUT and GET",
                Some(S3Download::Presigned),
            ),
            (
                "S3 (moto), download through the gateway",
                Some(S3Download::Gateway),
            ),
        ] {
            let (up, down) = run(&s3, target, &body).await;
            let rate = |secs: f64| size as f64 / MIB as f64 / secs;
            println!("| {label} | {:.0} | {:.0} | |", rate(up), rate(down));
        }
    });
}

/// One upload and one download of `body` through a fresh gateway; their durations in seconds.
async fn run(s3: &str, target: Option<S3Download>, body: &[u8]) -> (f64, f64) {
    let tmp = tempfile::tempdir().unwrap();
    let mut config = Config::new("127.0.0.1:0".parse().unwrap(), tmp.path().join("gw"));
    config.reaper_interval_ms = 0;
    config.blob_inline_max = 2 * body.len() as u64;
    config.plan_blob_bytes = 2 * body.len() as u64;
    config.body_timeout = std::time::Duration::from_secs(600);
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::new();
    if let Some(mode) = target {
        let bucket = format!(
            "bench-{}",
            hex::encode(agentbus_runtime::random_bytes::<6>())
        );
        http.put(format!("{s3}/{bucket}")).send().await.unwrap();
        let secret = tmp.path().join("secret");
        std::fs::write(&secret, "bench-secret").unwrap();
        config.s3_endpoint = s3.to_owned();
        config.s3_bucket = bucket;
        config.s3_access_key_id = "bench".into();
        config.s3_secret_access_key_file = secret.display().to_string();
        config.s3_download = mode;
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let clock = ManualClock::new(agentbus_runtime::SystemClock.now());
    let gw = Gateway::open(config, Arc::new(clock)).await.unwrap();
    let admin = gw.bootstrap.as_ref().unwrap().admin_token.clone();
    tokio::spawn(async move { gw.serve_on(listener, std::future::pending()).await });
    let agent = loadgen::register(&http, &url, &admin, "bench").await;
    let client = agentbus_client::http::Gateway::new(&url, &agent.token).unwrap();
    let started = Instant::now();
    let entry = client
        .upload_blob("bench.bin", "application/octet-stream", body.to_vec(), None)
        .await
        .unwrap();
    let up = started.elapsed().as_secs_f64();
    let id = entry.reference.rsplit('/').next().unwrap().to_owned();
    let path = tmp.path().join("bench.bin");
    let started = Instant::now();
    client.download_blob_to(&id, &path, None).await.unwrap();
    let down = started.elapsed().as_secs_f64();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), body.len() as u64);
    (up, down)
}
