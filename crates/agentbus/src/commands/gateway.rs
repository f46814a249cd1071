//! `agentbus gateway`: the main job, and `agentbus gateway admin-token`.
//!
//! The flags are made from the gateway's settings table (`agentbus_gateway::config::SETTINGS`),
//! so every setting has its flag and a new setting needs nothing here.

use std::future::Future;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Arg, ArgAction, ArgMatches, Args, Subcommand};
use serde_json::{Value, json};

use agentbus_gateway::config::{
    LogFormat, Origin, Resolved, SETTINGS, SettingError, Sources, resolve,
};
use agentbus_gateway::{Gateway, StartError};
use agentbus_protocol::Code;
use agentbus_protocol::text::shell_quote;
use agentbus_runtime::SystemClock;

use crate::error::{CliError, CliResult, ErrorKind};
use crate::printer::Printer;

/// Arguments of `agentbus gateway`.
#[derive(Debug, Args)]
#[command(
    args_conflicts_with_subcommands = true,
    after_help = "Examples:\n  agentbus gateway\n  agentbus gateway --listen 0.0.0.0:7700 --data /var/lib/agentbus --public-url https://bus.example.com\n  AGENTBUS_VISIBILITY_TIMEOUT=2m agentbus gateway --config /etc/agentbus/gateway.toml --print-config\n\n\
Every setting is a flag, an AGENTBUS_* variable and a key of the --config TOML file, in that \
precedence; docs/settings.md lists them with their defaults and reasons. The listener is bound \
before anything is written. The first start creates a tenant `default`, a workspace `default` and \
an admin token, printed once with the `agentbus connect` command to run next. SIGTERM or SIGINT \
stops it gracefully. Logs go to stderr: text on a terminal, JSON lines otherwise (--log-format); \
--log sets what is logged (each request is a debug line)."
)]
pub struct GatewayArgs {
    #[command(subcommand)]
    command: Option<GatewayCommand>,
    /// A TOML file of settings (`name = value` per line; flags and AGENTBUS_* variables override it).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Print the effective settings and where each came from, then exit without starting.
    #[arg(long)]
    print_config: bool,
    #[command(flatten)]
    settings: SettingFlags,
}

/// Subcommands of `agentbus gateway`.
#[derive(Debug, Subcommand)]
enum GatewayCommand {
    /// Issue a new admin token offline (the gateway stopped), revoking the old one.
    #[command(
        after_help = "Example:\n  agentbus gateway admin-token --data ~/.local/share/agentbus/gateway\n\n\
For a lost first-start token: the new token belongs to the first admin, every older token of that \
admin stops working. On SQLite it is refused while a gateway runs on the directory (it would keep \
accepting the old token from its cache): stop it first. On PostgreSQL, --data finds the database \
the gateway on that directory uses (or name it with --store), and running replicas drop the old \
token at once."
    )]
    AdminToken(AdminTokenArgs),
    /// Apply the store's schema migrations and exit (each start applies them as well).
    #[command(
        after_help = "Examples:\n  agentbus gateway migrate --store postgres://agentbus@db.example.com/agentbus\n  agentbus gateway migrate --config /etc/agentbus/gateway.toml\n\n\
Run it once, from one machine, before starting replicas of a new release on a shared PostgreSQL \
database (docs/deploy.md). A database migrated by a newer release is refused, never changed."
    )]
    Migrate(MigrateArgs),
}

/// Arguments of `agentbus gateway migrate`.
#[derive(Debug, Args)]
struct MigrateArgs {
    /// The gateway's settings file (for its `store` and `data`).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The database: `sqlite` (in --data) or a postgres:// URL [env: AGENTBUS_STORE].
    #[arg(long, value_name = "URL")]
    store: Option<String>,
    /// The data directory of the SQLite store [env: AGENTBUS_DATA].
    #[arg(long, value_name = "DIR")]
    data: Option<PathBuf>,
}

/// Arguments of `agentbus gateway admin-token`.
#[derive(Debug, Args)]
struct AdminTokenArgs {
    /// The gateway's data directory [default: as `agentbus gateway` resolves it].
    #[arg(long, value_name = "DIR")]
    data: Option<PathBuf>,
    /// The gateway's settings file, to find its data directory and store.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The database: `sqlite` (in --data) or a postgres:// URL [env: AGENTBUS_STORE; default: the
    /// database a gateway on --data last used].
    #[arg(long, value_name = "URL")]
    store: Option<String>,
    /// Reissue the gateway operator's token (tenants) instead of the first tenant admin's.
    #[arg(long)]
    operator: bool,
}

/// Every setting's flag, built from the settings table.
#[derive(Debug, Default)]
struct SettingFlags(Vec<(String, String)>);

impl clap::FromArgMatches for SettingFlags {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        let mut given = Vec::new();
        for s in SETTINGS {
            if s.is_switch() {
                if m.get_flag(s.name) {
                    given.push((s.name.to_owned(), "true".to_owned()));
                }
            } else if let Some(v) = m.get_one::<String>(s.name) {
                given.push((s.name.to_owned(), v.clone()));
            }
        }
        Ok(SettingFlags(given))
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

impl Args for SettingFlags {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        SETTINGS.iter().fold(cmd, |cmd, s| {
            let env = s
                .env
                .map(|e| format!(" [env: {e}]"))
                .unwrap_or_else(|| " [flag only]".into());
            let help = format!(
                "{}{env} [default: {}]",
                s.help,
                s.default_text().replace('`', "")
            );
            let arg = Arg::new(s.name)
                .long(s.flag)
                .help(help)
                .help_heading("Settings");
            cmd.arg(if s.is_switch() {
                arg.action(ArgAction::SetTrue)
            } else {
                arg.value_name(s.value_name).action(ArgAction::Set)
            })
        })
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

/// Every bad setting, one per line, as one configuration error.
fn settings_error(errors: Vec<SettingError>) -> CliError {
    match <[SettingError; 1]>::try_from(errors) {
        // One value: its cause, and its own fix completed by the catalogue's (AB-9020).
        Ok([e]) => CliError::of(e),
        // Several: each with its own fix, then where to look for all of them.
        Err(errors) => {
            let mut message = format!("{} settings are not usable:", errors.len());
            for e in &errors {
                message.push_str(&format!("\n  {e}; fix: {}", e.fix));
            }
            CliError::new(ErrorKind::Config, message)
                .code(Code::SettingUnusable)
                .fix("docs/settings.md lists every setting; `agentbus gateway --print-config` shows where each value came from")
        }
    }
}

/// A start-up failure, from the catalogue; the data directory is named where the error does not
/// carry it.
fn start_error(e: StartError, data: &std::path::Path) -> CliError {
    let dir = shell_quote(&data.display().to_string()).into_owned();
    let mut c = CliError::of(e);
    c.fix = c.fix.map(|f| f.replace("{dir}", &dir));
    c
}

/// Registers SIGINT and SIGTERM now (a signal that arrives before the future is first polled
/// is not lost), and resolves when either arrives.
fn shutdown_signal() -> Result<impl Future<Output = ()> + Send + 'static, CliError> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let unable = |e: std::io::Error| {
            CliError::new(ErrorKind::Internal, format!("cannot handle signals: {e}"))
                .fix("this is a bug in agentbus; please report it")
        };
        let mut term = signal(SignalKind::terminate()).map_err(unable)?;
        let mut int = signal(SignalKind::interrupt()).map_err(unable)?;
        Ok(async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        })
    }
    #[cfg(not(unix))]
    {
        Ok(async {
            let _ = tokio::signal::ctrl_c().await;
        })
    }
}

fn print_config(resolved: &Resolved, printer: &Printer) -> CliResult {
    if printer.is_json() {
        let rows: Vec<Value> = resolved
            .rows()
            .map(|(s, value, origin)| {
                json!({
                    "name": s.name,
                    "value": value,
                    "from": origin.to_string(),
                    "flag": format!("--{}", s.flag),
                    "env": s.env,
                })
            })
            .collect();
        printer.json(&json!({"settings": rows}))?;
    } else {
        let width = SETTINGS.iter().map(|s| s.name.len()).max().unwrap_or(0);
        let values: Vec<(String, String, String)> = resolved
            .rows()
            .map(|(s, v, o)| (s.name.to_owned(), v, o.to_string()))
            .collect();
        let vwidth = values.iter().map(|r| r.1.len()).max().unwrap_or(0);
        printer.line(&format!("{:width$}  {:vwidth$}  from", "setting", "value"))?;
        for (name, value, from) in values {
            printer.line(&format!("{name:width$}  {value:vwidth$}  {from}"))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Starts the log: `filter` (the `log` setting, or `RUST_LOG` when that setting was left at its
/// default) on stderr, as text on a terminal and JSON lines otherwise unless `format` says.
fn init_logs(filter: &str, format: LogFormat) {
    use std::io::IsTerminal;
    // tokio-postgres logs each server NOTICE ("relation … already exists, skipping") at info,
    // with the build machine's source path: noise for an operator unless asked for by name.
    let filter = if filter.contains("tokio_postgres") {
        filter.to_owned()
    } else {
        format!("{filter},tokio_postgres=warn")
    };
    let filter = tracing_subscriber::EnvFilter::try_new(&filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,tokio_postgres=warn"));
    let terminal = std::io::stderr().is_terminal();
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter);
    let _ = match format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Auto if !terminal => builder.json().try_init(),
        _ => builder.with_ansi(terminal).try_init(),
    };
}

/// The log filter of `resolved`: its `log` setting, or `RUST_LOG` if that was left at its default.
fn log_filter(resolved: &Resolved) -> String {
    match (resolved.origin("log"), std::env::var("RUST_LOG")) {
        (Some(Origin::Default), Ok(rust_log)) if !rust_log.trim().is_empty() => rust_log,
        _ => resolved.config.log.clone(),
    }
}

/// Runs the gateway until SIGINT or SIGTERM, or `admin-token`.
pub fn run(args: GatewayArgs, printer: &Printer) -> CliResult {
    match args.command {
        Some(GatewayCommand::AdminToken(a)) => return admin_token(a, printer),
        Some(GatewayCommand::Migrate(m)) => return migrate(m, printer),
        None => {}
    }
    let sources = Sources::from_process(args.settings.0, args.config);
    let resolved = resolve(&sources).map_err(settings_error)?;
    if args.print_config {
        return print_config(&resolved, printer);
    }
    init_logs(&log_filter(&resolved), resolved.config.log_format);
    let mut config = resolved.config;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::new(ErrorKind::Internal, e.to_string()))?;
    runtime.block_on(async move {
        let data = config.data_dir.clone();
        // Bound first: with the address taken, nothing is created and nothing is printed.
        let listener = agentbus_gateway::bind(&mut config)
            .await
            .map_err(|e| start_error(e, &data))?;
        let shutdown = shutdown_signal()?;
        let (addr, url, test_clock) = (config.listen, config.public_url.clone(), config.unsafe_test_clock);
        let mut gateway = Gateway::open(config, Arc::new(SystemClock))
            .await
            .map_err(|e| start_error(e, &data))?;
        // The web console, beside the API (`docs/console.md`).
        gateway.mount(agentbus_console::router(gateway.app.clone(), Default::default()));
        let shown_dir = data.display().to_string();
        let connect = gateway.bootstrap.as_ref().map(|b| {
            format!(
                "agentbus connect --gateway {} --token {} --name release-bot",
                shell_quote(&url),
                shell_quote(&b.admin_token)
            )
        });
        if printer.is_json() {
            let mut doc = json!({
                "listening": addr.to_string(),
                "url": url,
                "data": shown_dir,
                "first_start": gateway.bootstrap.is_some(),
                "unsafe_test_clock": test_clock,
                "console": format!("{url}/console"),
            });
            if let (Some(b), Some(c)) = (&gateway.bootstrap, &connect) {
                doc["tenant"] = json!(b.tenant);
                doc["workspace"] = json!(b.workspace);
                doc["admin_token"] = json!(b.admin_token);
                doc["operator_token"] = json!(b.operator_token);
                doc["connect"] = json!(c);
            }
            // One line, so a supervisor reads the whole document with one read of a line.
            printer.line(&doc.to_string())?;
        } else {
            if let (Some(b), Some(c)) = (&gateway.bootstrap, &connect) {
                printer.line(&format!(
                    "AgentBus gateway initialised in {shown_dir} (tenant {t}, workspace {w}).\n\
                     Admin token, shown once (stored only hashed; `agentbus gateway admin-token --data {d}` issues a new one):\n  {token}\n\
                     Gateway operator token (tenants: create, list, suspend; shown once; `admin-token --operator` issues a new one):\n  {operator}\n\
                     Connect an agent from this machine (the name is yours to choose):\n  {c}",
                    t = b.tenant,
                    w = b.workspace,
                    d = shell_quote(&shown_dir),
                    token = b.admin_token,
                    operator = b.operator_token,
                ))?;
            }
            if test_clock {
                printer.line("UNSAFE TEST CLOCK: POST /v1/test/clock moves this gateway's time; for tests only")?;
            }
            printer.line(&format!(
                "listening on {url} ({addr}, data: {shown_dir}); console at {url}/console"
            ))?;
        }
        gateway
            .serve_on(listener, shutdown)
            .await
            .map_err(|e| start_error(e, &data))?;
        Ok(ExitCode::SUCCESS)
    })
}

fn migrate(args: MigrateArgs, printer: &Printer) -> CliResult {
    let mut flags = Vec::new();
    if let Some(s) = args.store {
        flags.push(("store".to_owned(), s));
    }
    if let Some(d) = args.data {
        flags.push(("data".to_owned(), d.display().to_string()));
    }
    let resolved = resolve(&Sources::from_process(flags, args.config)).map_err(settings_error)?;
    init_logs(&log_filter(&resolved), resolved.config.log_format);
    let data = resolved.config.data_dir.clone();
    let rt = super::profile::runtime()?;
    let (backend, version) = rt
        .block_on(agentbus_gateway::migrate(&resolved.config))
        .map_err(|e| start_error(e, &data))?;
    printer.either(
        &json!({"store": backend, "schema_version": version}),
        &format!("the {backend} store is at schema version {version} (this release's)"),
    )?;
    Ok(ExitCode::SUCCESS)
}

fn admin_token(args: AdminTokenArgs, printer: &Printer) -> CliResult {
    let mut flags = Vec::new();
    if let Some(s) = args.store {
        flags.push(("store".to_owned(), s));
    }
    if let Some(d) = args.data {
        flags.push(("data".to_owned(), d.display().to_string()));
    }
    let resolved = resolve(&Sources::from_process(flags, args.config)).map_err(settings_error)?;
    init_logs(&log_filter(&resolved), resolved.config.log_format);
    let data = resolved.config.data_dir.clone();
    let rt = super::profile::runtime()?;
    let t = rt
        .block_on(agentbus_gateway::reissue_admin_token(
            &resolved.config,
            args.operator,
        ))
        .map_err(|e| start_error(e, &data))?;
    let whom = if args.operator {
        "the gateway operator".to_owned()
    } else {
        format!("tenant {}, workspace {}", t.tenant, t.workspace)
    };
    printer.either(
        &json!({
            "admin_token": t.token,
            "role": if args.operator { "operator" } else { "tenant_admin" },
            "tenant": t.tenant,
            "workspace": t.workspace,
            "revoked": t.revoked,
        }),
        &format!(
            "New admin token for {whom} (shown once; {} older token{} revoked):\n  {}",
            t.revoked,
            if t.revoked == 1 { "" } else { "s" },
            t.token
        ),
    )?;
    Ok(ExitCode::SUCCESS)
}
