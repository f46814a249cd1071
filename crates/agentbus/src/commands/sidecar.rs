//! `agentbus sidecar`: the long-running receiver of one agent on this machine. It holds the
//! agent's receive lock, long-polls the gateway from the last persisted sequence, and for every
//! envelope re-verifies, downloads attachments, persists (unique on `id`), imports into local
//! delivery and only then acks. On errors it backs off (0.5 s doubling to 30 s) and resumes.

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use serde_json::json;

use agentbus_client::ClientError;
use agentbus_client::profile::write_private_atomic;
use agentbus_client::receive::status_json;
use agentbus_runtime::{Clock, SystemClock};

use super::gw::{Ctx, client_error};
use crate::error::{CliError, CliResult, ErrorKind};
use crate::printer::Printer;

/// Arguments of `sidecar`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  agentbus sidecar                      # run until stopped (SIGINT/SIGTERM)\n  agentbus --profile reviewer sidecar --once\n  agentbus --json sidecar               # one JSON line per stored envelope\n\n\
One sidecar runs per agent (a lock in $AGENTBUS_HOME/agents/<agent_id>/sidecar.lock). Envelopes go to \
$AGENTBUS_HOME/agents/<agent_id>/inbox/<id>.json, attachments to …/attachments/<msg id>/<name>, and \
every message to local delivery, where `agentbus inbox` and the harness hooks read it."
)]
pub struct SidecarArgs {
    /// Receive what is waiting now, then exit.
    #[arg(long)]
    once: bool,
    /// Seconds each long-poll waits for news (at most 60).
    #[arg(long, default_value_t = 25, value_name = "S")]
    poll_wait: u64,
}

/// Runs the sidecar.
pub fn run(args: SidecarArgs, printer: &Printer) -> CliResult {
    let ctx = Ctx::open()?;
    let inbox = ctx.inbox();
    let Some(_lock) = inbox.try_lock().map_err(client_error)? else {
        return Err(CliError::new(
            ErrorKind::Config,
            format!("a sidecar already runs for {}", ctx.profile.address),
        )
        .fix("one sidecar per agent; `agentbus doctor` shows it"));
    };
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
    loop {
        let wait = if args.once { 0 } else { args.poll_wait.min(60) };
        match ctx.rt.block_on(receiver.pull(wait)) {
            Ok(report) => {
                backoff = Duration::from_millis(500);
                let status = status_json(&ctx.profile, &report, SystemClock.now());
                let _ = write_private_atomic(&inbox.status_path(), status.to_string().as_bytes());
                for id in &report.stored {
                    let r = inbox.get(id).map_err(client_error)?;
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
                        printer.line(
                            &json!({"stored": id, "type": kind, "from": from, "verified": verified})
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
                if args.once {
                    return Ok(ExitCode::SUCCESS);
                }
            }
            Err(e) => {
                let fatal = matches!(
                    &e,
                    ClientError::Api {
                        status: 401 | 403,
                        ..
                    } | ClientError::Api {
                        code: Some(agentbus_protocol::Code::SidecarTooOld),
                        ..
                    }
                );
                if fatal || args.once {
                    return Err(client_error(e));
                }
                eprintln_quiet(&format!(
                    "sidecar: {e}; retrying in {} ms",
                    backoff.as_millis()
                ));
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(Duration::from_secs(30));
            }
        }
    }
}

fn eprintln_quiet(line: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "{line}");
}
