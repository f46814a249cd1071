//! `agentbus gateway`: the main job.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;

use agentbus_gateway::{Config, Gateway};
use agentbus_runtime::SystemClock;

use crate::error::{CliError, CliResult, ErrorKind};
use crate::printer::Printer;

/// Arguments of `agentbus gateway`.
#[derive(Debug, Args)]
#[command(
    after_help = "Example:\n  agentbus gateway --listen 127.0.0.1:7700 --data ~/.local/share/agentbus/gateway\n\n\
The first start creates a tenant `default`, a workspace `default` and an admin integration token, \
and prints the token once. Logs are JSON lines on stderr (RUST_LOG sets the level)."
)]
pub struct GatewayArgs {
    /// The address to listen on.
    #[arg(long, env = "AGENTBUS_LISTEN", default_value = "127.0.0.1:7700")]
    listen: SocketAddr,
    /// The data directory [default: $XDG_DATA_HOME/agentbus/gateway, or ~/.local/share/agentbus/gateway].
    #[arg(long, env = "AGENTBUS_DATA")]
    data: Option<PathBuf>,
    /// The URL clients use to reach this gateway, for links in error bodies [default: http://<listen>].
    #[arg(long, env = "AGENTBUS_PUBLIC_URL")]
    public_url: Option<String>,
}

fn default_data_dir() -> PathBuf {
    if let Some(x) = std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(x).join("agentbus/gateway");
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    home.join(".local/share/agentbus/gateway")
}

/// Runs the gateway until SIGINT or SIGTERM.
pub fn run(args: GatewayArgs, printer: &Printer) -> CliResult {
    let _ = tracing_subscriber::fmt()
        .json()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .try_init();
    let data = args.data.unwrap_or_else(default_data_dir);
    let mut config = Config::new(args.listen, data.clone());
    if let Some(url) = args.public_url {
        config.public_url = url;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::new(ErrorKind::Internal, e.to_string()))?;
    runtime.block_on(async move {
        let mut gateway = Gateway::open(config, Arc::new(SystemClock))
            .await
            .map_err(|e| CliError::new(ErrorKind::Config, e.to_string()).fix("check that the data directory is writable and not used by another gateway"))?;
        // The web console, beside the API (`docs/console.md`).
        gateway.mount(agentbus_console::router(gateway.app.clone(), Default::default()));
        if let Some(b) = &gateway.bootstrap {
            let url = format!("http://{}", args.listen);
            printer.line(&format!(
                "AgentBus gateway initialised in {dir}\n\
                 tenant: {t}  workspace: {w}\n\
                 admin token (shown once, stored only hashed): {token}\n\
                 gateway operator token (tenants; shown once): {operator}\n\
                 register an agent:\n  curl -s -X POST {url}/v1/agents -H 'Authorization: Bearer {token}' -H 'content-type: application/json' -d '{{\"name\":\"release-bot\"}}'",
                dir = data.display(), t = b.tenant, w = b.workspace, token = b.admin_token, operator = b.operator_token,
            ))?;
        }
        printer.line(&format!("listening on http://{} (data: {}); console at http://{}/console", args.listen, data.display(), args.listen))?;
        gateway
            .serve(shutdown_signal())
            .await
            .map_err(|e| CliError::new(ErrorKind::Unavailable, e.to_string()).fix("choose a free address with --listen or AGENTBUS_LISTEN"))?;
        Ok(ExitCode::SUCCESS)
    })
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        if let Ok(mut s) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            s.recv().await;
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}
