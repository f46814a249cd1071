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
            // The one-code document with no code: its fields null, every entry in `entries`.
            let all: Vec<_> = Code::ALL.iter().map(|c| entry_json(*c)).collect();
            let mut doc = entry_json(Code::ALL[0]);
            if let Some(fields) = doc.as_object_mut() {
                fields
                    .values_mut()
                    .for_each(|v| *v = serde_json::Value::Null);
            }
            doc["entries"] = json!(all);
            printer.json(&doc)?;
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
    let mut doc = entry_json(code);
    doc["entries"] = json!([entry_json(code)]);
    printer.either(&doc, &errors::render_entry_markdown(code.entry()))?;
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
