//! A gateway in the bench's own process, configured for load (no inbox depth cap, no rate limit
//! in the way), shared by the benches that drive one through `loadgen`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use agentbus_gateway::config::StoreSetting;
use agentbus_gateway::{Config, Gateway};
use agentbus_runtime::SystemClock;

/// Opens a gateway on `dir` with `store`, serves it on a free loopback port until the process
/// ends, and answers its address and, on a first start, its admin token.
#[allow(dead_code)] // each bench uses one of the two
pub async fn start(dir: PathBuf, store: StoreSetting) -> (SocketAddr, Option<String>) {
    start_with(dir, store, |_| {}).await
}

/// [`start`] with the settings changed by `change` (telemetry, say).
#[allow(dead_code)] // each bench uses one of the two
pub async fn start_with(
    dir: PathBuf,
    store: StoreSetting,
    change: impl FnOnce(&mut Config),
) -> (SocketAddr, Option<String>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let mut config = Config::new(addr, dir);
    config.store = store;
    config.inbox_max_depth = 1_000_000;
    config.rate_per_agent = 1e9;
    config.rate_burst = 1e9;
    change(&mut config);
    let gw = Gateway::open(config, Arc::new(SystemClock)).await.unwrap();
    let admin = gw.bootstrap.as_ref().map(|b| b.admin_token.clone());
    tokio::spawn(gw.serve_on(listener, std::future::pending()));
    (addr, admin)
}

/// The setting `name` from the environment, or `default` when unset or unparsable.
pub fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The bench's runtime, with the gateway's warnings on stderr (a WebSocket that stopped, say,
/// explains a stalled run).
pub fn runtime() -> tokio::runtime::Runtime {
    tracing_subscriber::fmt()
        .with_env_filter("warn")
        .with_writer(std::io::stderr)
        .init();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
}
