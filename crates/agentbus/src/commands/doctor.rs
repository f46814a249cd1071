//! `agentbus doctor`: is this agent's connection healthy? Each check answers ok, warn or fail,
//! and every finding that is not ok says what to do. Exit 1 when any check fails. The checks are
//! [`agentbus_client::doctor`]; this module prints their report.

use std::process::ExitCode;

use clap::Args;

use agentbus_client::doctor::diagnose;
use agentbus_client::profile::Profiles;
use agentbus_runtime::{Clock, SystemClock};

use super::profile::Ctx;
use crate::cli::Globals;
use crate::error::{CliError, CliResult, ErrorKind};
use crate::printer::Printer;

/// Arguments of `doctor`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  agentbus doctor\n  agentbus --profile reviewer --json doctor\n\n\
With several profiles saved and none chosen, every profile is checked in turn. \
Checks: the gateway is reachable and speaks protocol v1, this agentbus is not older than the \
gateway's min_sidecar_version (AB-6002), the clock agrees with the gateway's, the credential works, \
the signing key is registered and not expiring within 30 days, the key file is mode 0600 (or, for \
a key in the OS keychain, the key is readable there), and the sidecar runs and is not behind."
)]
pub struct DoctorArgs {}

/// Runs `doctor` for the chosen profile, or for every saved profile when several exist and
/// none is chosen: the checks are [`agentbus_client::doctor::diagnose`]; this prints them.
pub fn run(_args: DoctorArgs, globals: &Globals, printer: &Printer) -> CliResult {
    let chosen: Vec<Option<String>> = match &globals.profile {
        Some(p) => vec![Some(p.clone())],
        None => {
            let names = Profiles::open_default()
                .and_then(|p| p.names())
                .map_err(CliError::of)?;
            if names.len() > 1 {
                names.into_iter().map(Some).collect()
            } else {
                // One profile or none: `Ctx::open` picks it, or says how to make one.
                vec![None]
            }
        }
    };
    let mut reports = Vec::new();
    for profile in chosen {
        let ctx = Ctx::open(&Globals { profile }, printer)?;
        let mut report = ctx.rt.block_on(diagnose(&ctx.agent(), SystemClock.now()));
        // A check failed by a client error gets that error's fix, as any command words it.
        for finding in &mut report.findings {
            if let Some(e) = finding.cause.take() {
                finding.fix = Some(CliError::of(e).fix.unwrap_or_default());
            }
        }
        reports.push(report);
    }
    let ok = reports.iter().all(|r| r.ok);
    if printer.is_json() {
        // One shape however many profiles: a list, even of one.
        printer.json(&serde_json::json!({"ok": ok, "profiles": reports}))?;
    } else {
        let mut text = String::new();
        for report in &reports {
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str(&format!(
                "doctor for {} (profile {})\n",
                report.agent, report.profile
            ));
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
        }
        printer.line(text.trim_end())?;
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ErrorKind::Failed.exit_code()
    })
}
