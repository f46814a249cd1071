//! All output goes through the [`Printer`]: people get lines, `--json` gets one JSON document.
//!
//! Human output carries foreign text (messages, names, ids from other implementations), so every
//! human line passes through [`for_terminal`], and every error and commentary line through
//! [`for_terminal_line`]: escape sequences are removed and other controls shown, whatever command
//! printed them. A command that places a peer's field on a line of its own output flattens that
//! field with [`for_terminal_line`] itself, so it cannot add a line. Machine output (JSON,
//! canonical bytes, a harness's hook answer) is written as it is, because JSON escapes controls
//! itself and a harness is not a terminal.

#![allow(clippy::print_stdout)]

use std::io::Write as _;

use serde_json::Value;

use agentbus_protocol::text::{for_terminal, for_terminal_line};

use crate::error::CliError;

/// How much a command says besides its result and its errors (`-q`, `-v`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verbosity {
    /// `-q`: results and errors only; no progress bars, no commentary.
    Quiet,
    /// The default: progress on a terminal, commentary while waiting.
    Normal,
    /// `-v`: also what the command acts through (profile, agent, gateway).
    Verbose,
}

impl Verbosity {
    /// The level the global flags ask for.
    pub fn from_flags(quiet: bool, verbose: bool) -> Verbosity {
        match (quiet, verbose) {
            (true, _) => Verbosity::Quiet,
            (false, true) => Verbosity::Verbose,
            (false, false) => Verbosity::Normal,
        }
    }
}

/// Writes the command's output to stdout and its errors to stderr, at the verbosity asked.
#[derive(Debug, Clone, Copy)]
pub struct Printer {
    json: bool,
    verbosity: Verbosity,
}

impl Printer {
    /// A printer for human output, or for one JSON document when `json` is set.
    pub fn new(json: bool, verbosity: Verbosity) -> Printer {
        Printer { json, verbosity }
    }

    /// Whether `--json` was given.
    pub fn is_json(&self) -> bool {
        self.json
    }

    /// How much the command says besides its result (`-q`, `-v`).
    pub fn verbosity(&self) -> Verbosity {
        self.verbosity
    }

    /// Writes a `-v` line to stderr, made safe for a terminal; nothing at the other levels.
    pub fn detail(&self, text: &str) {
        if self.verbosity >= Verbosity::Verbose {
            let _ = writeln!(std::io::stderr().lock(), "{}", for_terminal(text));
        }
    }

    /// Writes raw bytes to stdout (canonical forms must not gain a newline).
    pub fn raw(&self, bytes: &[u8]) -> Result<(), CliError> {
        let mut out = std::io::stdout().lock();
        out.write_all(bytes)?;
        out.flush()?;
        Ok(())
    }

    /// Writes one line of human output, made safe for a terminal.
    pub fn line(&self, text: &str) -> Result<(), CliError> {
        self.data_line(&for_terminal(text))
    }

    /// Writes a line of running commentary (what a wait is waiting for, how far it got) on
    /// stderr, flattened to one line, so stdout stays the result: human mode only, and not with
    /// `-q`. Losing it loses nothing the result does not say.
    pub fn commentary(&self, text: &str) {
        if !self.json && self.verbosity > Verbosity::Quiet {
            // One line: commentary quotes peers (a delivery's states, a worker's note).
            let mut err = std::io::stderr().lock();
            let _ = writeln!(err, "{}", for_terminal_line(text));
        }
    }

    /// Writes a `warning:` line on stderr, flattened to one line: something the user should know
    /// though the command did what it was asked. Human mode only (`--json` documents carry their
    /// warnings in a `warnings` field); `-q` keeps it, since it is not commentary.
    pub fn warning(&self, text: &str) {
        if !self.json {
            let mut err = std::io::stderr().lock();
            let _ = writeln!(err, "warning: {}", for_terminal_line(text));
        }
    }

    /// Writes one line of machine output (a JSON line, a harness's answer) exactly as given.
    pub fn data_line(&self, text: &str) -> Result<(), CliError> {
        let mut out = std::io::stdout().lock();
        out.write_all(text.as_bytes())?;
        out.write_all(b"\n")?;
        Ok(())
    }

    /// Writes the command's JSON document.
    pub fn json(&self, value: &Value) -> Result<(), CliError> {
        let text = serde_json::to_string_pretty(value).unwrap_or_default();
        self.data_line(&text)
    }

    /// Writes `value` with `--json`, else `human`.
    pub fn either(&self, value: &Value, human: &str) -> Result<(), CliError> {
        if self.json {
            self.json(value)
        } else {
            self.line(human)
        }
    }

    /// Reports an error: a JSON document on stdout with `--json`, else one `error:` line and one
    /// `fix:` line on stderr, each flattened to one line.
    pub fn error(&self, e: &CliError) {
        if self.json {
            let doc = serde_json::json!({
                "error": {
                    "kind": e.kind.as_str(),
                    "code": e.code.map(|c| c.to_string()),
                    "message": e.message,
                    "fix": e.fix,
                }
            });
            let _ = self.json(&doc);
            return;
        }
        // An error's cause and fix are one line each; a cause can quote a peer (the gateway
        // echoes a card's schema), which must not add lines that pass for a fix of ours.
        let mut err = std::io::stderr().lock();
        let _ = writeln!(err, "error: {}", for_terminal_line(&e.to_string()));
        if let Some(fix) = &e.fix {
            let _ = writeln!(err, "  fix: {}", for_terminal_line(fix));
        }
    }
}
