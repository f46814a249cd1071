//! `agentbus explain`: the error catalogue, offline.

use clap::Args;
use serde_json::json;

use agentbus_protocol::errors::{self, Code};

use crate::error::{CliError, CliResult};
use crate::printer::Printer;

/// Arguments of `agentbus explain`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  agentbus explain AB-1011\n  agentbus explain --all --markdown > docs/errors.md"
)]
pub struct ExplainArgs {
    /// The code, such as AB-1011 (or 1011).
    #[arg(required_unless_present = "all")]
    code: Option<String>,
    /// Every code.
    #[arg(long)]
    all: bool,
    /// With --all: print the Markdown of docs/errors.md.
    #[arg(long, requires = "all")]
    markdown: bool,
}

/// Runs `agentbus explain`.
pub fn run(args: ExplainArgs, printer: &Printer) -> CliResult {
    if args.all {
        if args.markdown {
            printer.raw(errors::render_markdown().as_bytes())?;
        } else if printer.is_json() {
            let all: Vec<_> = Code::ALL.iter().map(|c| entry_json(*c)).collect();
            printer.json(&json!(all))?;
        } else {
            for code in Code::ALL {
                printer.line(&format!("{code}  {}", code.entry().title))?;
            }
        }
        return Ok(std::process::ExitCode::SUCCESS);
    }
    let raw = args.code.unwrap_or_default();
    let code: Code = raw.parse().map_err(|_| {
        CliError::input(format!("{raw} is not a known AB- code"))
            .fix("run `agentbus explain --all` to list every code")
    })?;
    printer.either(
        &entry_json(code),
        &errors::render_entry_markdown(code.entry()),
    )?;
    Ok(std::process::ExitCode::SUCCESS)
}

fn entry_json(code: Code) -> serde_json::Value {
    let e = code.entry();
    json!({
        "code": code.to_string(),
        "http_status": e.http_status,
        "title": e.title,
        "cause": e.cause,
        "fix": e.fix,
        "doc_path": code.doc_path(),
    })
}
