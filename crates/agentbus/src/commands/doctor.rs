//! `agentbus doctor`: is this agent's connection healthy? Each check answers ok, warn or fail,
//! and every finding that is not ok says what to do. Exit 1 when any check fails. The checks are
//! [`agentbus_client::doctor`]; this module prints their report.

use std::process::ExitCode;

use clap::Args;

use agentbus_client::doctor::diagnose;
use agentbus_runtime::{Clock, SystemClock};

use super::profile::Ctx;
use crate::cli::Globals;
use crate::error::{CliError, CliResult, ErrorKind};
use crate::printer::Printer;

/// Arguments of `doctor`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  agentbus doctor\n  agentbus --profile reviewer --json doctor\n\n\
Checks: the gateway is reachable and speaks protocol v1, this agentbus is not older than the \
gateway's min_sidecar_version (AB-6002), the clock agrees with the gateway's, the credential works, \
the signing key is registered and not expiring within 30 days, the key file is mode 0600 (or, for \
a key in the OS keychain, the key is readable there), and the sidecar runs and is not behind."
)]
pub struct DoctorArgs {}

/// Runs `doctor`: the checks are [`agentbus_client::doctor::diagnose`]; this prints them.
pub fn run(_args: DoctorArgs, globals: &Globals, printer: &Printer) -> CliResult {
    let ctx = Ctx::open(globals, printer)?;
    let mut report = ctx.rt.block_on(diagnose(&ctx.agent(), SystemClock.now()));
    // A check failed by a client error gets that error's fix, as any command words it.
    for finding in &mut report.findings {
        if let Some(e) = finding.cause.take() {
            finding.fix = Some(CliError::of(e).fix.unwrap_or_default());
        }
    }
    if printer.is_json() {
        printer.json(&serde_json::to_value(&report).unwrap_or_default())?;
    } else {
        let mut text = format!("doctor for {} (profile {})\n", report.agent, report.profile);
        for x in &report.findings {
            text.push_str(&format!(
                "  {:<5} {:<10} {}\n",
                x.status.as_str(),
                x.check,
                x.detail
            ));
            if let Some(fix) = &x.fix {
                text.push_str(&format!("        fix: {fix}\n"));
            }
        }
        printer.line(text.trim_end())?;
    }
    Ok(if report.ok {
        ExitCode::SUCCESS
    } else {
        ErrorKind::Failed.exit_code()
    })
}
