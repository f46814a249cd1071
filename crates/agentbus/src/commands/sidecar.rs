//! `agentbus sidecar`: the long-running receiver of one agent on this machine. It holds the
//! agent's receive lock and the gateway's WebSocket (falling back to long-poll for 30 s at a time
//! when the socket fails), resuming from the last persisted sequence, and for every
//! envelope re-verifies, downloads attachments, persists (unique on `id`), imports into local
//! delivery and only then acks. On errors it backs off (0.5 s doubling to 30 s) and resumes.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;
use serde_json::json;

use agentbus_client::ClientError;
use agentbus_client::profile::write_private_atomic;
use agentbus_client::receive::{PullReport, status_json};
use agentbus_runtime::{Clock, SystemClock};

use super::profile::Ctx;
use crate::cli::Globals;
use crate::error::{CliError, CliResult, ErrorKind};
use crate::printer::Printer;

/// Arguments of `sidecar`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  agentbus sidecar                      # run until stopped (SIGINT/SIGTERM)\n  agentbus --profile reviewer sidecar --once\n  agentbus --json sidecar               # one JSON line per stored envelope\n\n\
One sidecar runs per agent (a lock in $AGENTBUS_HOME/agents/<agent_id>/sidecar.lock). Envelopes go to \
$AGENTBUS_HOME/agents/<agent_id>/inbox/<id>.json, attachments to …/attachments/<msg id>/<name>, and \
every message to local delivery, where `agentbus inbox` and the harness hooks read it. When a hook \
shows one in a session, the sidecar reports it to the gateway (its sender sees it in `agentbus trace`), \
and sends the read receipt (ack.v1, level read) a message that asked for a reply is owed."
)]
pub struct SidecarArgs {
    /// Receive what is waiting now, then exit.
    #[arg(long)]
    once: bool,
    /// Seconds each long-poll waits for news (at most 60).
    #[arg(long, default_value_t = 25, value_name = "S")]
    poll_wait: u64,
    /// Long-poll only, never the WebSocket.
    #[arg(long)]
    no_websocket: bool,
}

/// Runs the sidecar.
pub fn run(args: SidecarArgs, globals: &Globals, printer: &Printer) -> CliResult {
    let ctx = Ctx::open(globals, printer)?;
    let inbox = ctx.inbox();
    let Some(_lock) = inbox.try_lock().map_err(CliError::of)? else {
        return Err(CliError::new(
            ErrorKind::Config,
            format!("a sidecar already runs for {}", ctx.profile.address),
        )
        .fix("one sidecar per agent; `agentbus doctor` shows it"));
    };
    // Crash tests stop it between the local write and the ack through `AGENTBUS_FAULT`, which
    // only a test build's receiver reads (agentbus-client's `fault-injection` feature).
    let mut receiver = ctx.receiver()?;
    if !printer.is_json() {
        printer.line(&format!(
            "sidecar for {} ({}), resuming after sequence {}",
            ctx.profile.address,
            ctx.profile.gateway,
            inbox.cursor()
        ))?;
    }
    let mut backoff = Duration::from_millis(500);
    // When the WebSocket fails, long-poll until this instant, then try it again.
    let mut websocket_at = Instant::now();
    loop {
        if !args.once && !args.no_websocket && Instant::now() >= websocket_at {
            let mut printed: Result<(), CliError> = Ok(());
            let outcome = ctx.rt.block_on(receiver.stream(|report| {
                if printed.is_ok() {
                    printed = report_pass(&ctx, report, "websocket", printer);
                }
            }));
            printed?;
            match outcome {
                Err(e) if is_fatal(&e) => return Err(CliError::of(e)),
                Err(e) => {
                    say(&format!(
                        "sidecar: WebSocket: {e}; long-polling for {} s",
                        WS_RETRY.as_secs()
                    ));
                    websocket_at = Instant::now() + WS_RETRY;
                }
                Ok(()) => {}
            }
            continue;
        }
        let wait = if args.once { 0 } else { args.poll_wait.min(60) };
        match ctx.rt.block_on(receiver.pull(wait)) {
            Ok(report) => {
                backoff = Duration::from_millis(500);
                report_pass(&ctx, &report, "long-poll", printer)?;
                if args.once {
                    return Ok(ExitCode::SUCCESS);
                }
            }
            Err(e) => {
                if is_fatal(&e) || args.once {
                    return Err(CliError::of(e));
                }
                say(&format!(
                    "sidecar: {e}; retrying in {} ms",
                    backoff.as_millis()
                ));
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(Duration::from_secs(30));
            }
        }
    }
}

/// How long the sidecar long-polls after the WebSocket failed before trying it again.
const WS_RETRY: Duration = Duration::from_secs(30);

/// Failures no retry can fix: a refused credential, a gateway needing a newer agentbus.
fn is_fatal(e: &ClientError) -> bool {
    matches!(
        e,
        ClientError::Api {
            status: 401 | 403,
            ..
        } | ClientError::Api {
            code: Some(agentbus_protocol::Code::SidecarTooOld),
            ..
        }
    )
}

/// Writes the status file and prints what a pass stored.
fn report_pass(
    ctx: &Ctx,
    report: &PullReport,
    mode: &str,
    printer: &Printer,
) -> Result<(), CliError> {
    let inbox = ctx.inbox();
    let status = status_json(&ctx.profile, report, SystemClock.now(), mode);
    let _ = write_private_atomic(&inbox.status_path(), status.to_string().as_bytes());
    for id in &report.stored {
        let r = inbox.get(id).map_err(CliError::of)?;
        let (verified, kind, from) = r
            .as_ref()
            .map(|r| {
                (
                    r.verified.clone(),
                    r.attr("type").unwrap_or("?").to_owned(),
                    r.attr("source").unwrap_or("?").to_owned(),
                )
            })
            .unwrap_or_default();
        if printer.is_json() {
            printer.data_line(
                &json!({"stored": id, "type": kind, "from": from, "verified": verified, "via": mode})
                    .to_string(),
            )?;
        } else {
            let mark = if verified == "true" {
                ""
            } else {
                " UNVERIFIED (AB-1303)"
            };
            printer.line(&format!("stored {id} {kind} from {from}{mark}"))?;
        }
    }
    let receipts = &report.receipts;
    for id in &receipts.reported {
        let receipt = receipts.read_receipts.contains(id);
        if printer.is_json() {
            printer.data_line(
                &json!({"shown": id, "read_receipt": receipt, "via": mode}).to_string(),
            )?;
        } else if receipt {
            printer.line(&format!("reported {id} shown; sent its read receipt"))?;
        } else {
            printer.line(&format!("reported {id} shown"))?;
        }
    }
    for id in &receipts.pushed {
        if printer.is_json() {
            printer.data_line(&json!({"pushed": id, "via": mode}).to_string())?;
        } else {
            printer.line(&format!("reported {id} pushed (not shown yet)"))?;
        }
    }
    for (id, why) in &receipts.deferred {
        say(&format!("sidecar: receipt for {id} deferred: {why}"));
    }
    if report.duplicates > 0 && printer.is_json() {
        printer.data_line(&json!({"duplicates": report.duplicates, "via": mode}).to_string())?;
    }
    Ok(())
}

fn say(line: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "{line}");
}
