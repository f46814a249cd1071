//! How the command fails: every error has a kind (which picks the exit code), a one-line cause and,
//! where there is one, a one-line fix.
//!
//! A library error becomes a [`CliError`] in one way, [`CliError::of`]: its `AB-` code's catalogue
//! entry gives the kind (so the exit code) and the fix, its `Display` the message. Nothing in the
//! binary sorts a library's errors by hand.
//!
//! Exit codes (documented in `agentbus --help` and `docs/cli.md`):
//!
//! | code | kind | meaning |
//! |---|---|---|
//! | 0 | — | success (also when stdout is closed early, as by `head`) |
//! | 1 | `Failed` | the command ran and the answer is "no": an envelope is invalid, a signature does not verify, a check found problems |
//! | 2 | `Usage` | the arguments are wrong (clap's own code) |
//! | 3 | `Input` | an input file, JSON document or key cannot be used |
//! | 4 | `Config` | configuration or local state is missing or wrong |
//! | 5 | `Unavailable` | a server or resource could not be reached; retrying may help |
//! | 6 | `Refused` | a server refused the request (the `AB-` code says why) |
//! | 7 | — | done, with warnings: `share sync` skipped a file (`commands::share::EXIT_WARNINGS`) |
//! | 70 | `Internal` | a bug in agentbus; please report it |

use std::fmt;
use std::process::ExitCode;

use agentbus_protocol::Code;
use agentbus_protocol::errors::{Catalogued, Kind};

/// The class of a failure, which decides the exit code.
#[allow(dead_code)] // Some kinds serve the gateway and sidecar commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The command ran and its answer is negative.
    Failed,
    /// Wrong arguments.
    Usage,
    /// Unusable input.
    Input,
    /// Missing or wrong configuration or local state.
    Config,
    /// Something could not be reached.
    Unavailable,
    /// A server refused the request.
    Refused,
    /// A bug.
    Internal,
    /// Stdout was closed by the reader; not an error.
    BrokenPipe,
}

impl ErrorKind {
    /// The process exit code for this kind.
    pub fn exit_code(self) -> ExitCode {
        ExitCode::from(match self {
            ErrorKind::Failed => 1,
            ErrorKind::Usage => 2,
            ErrorKind::Input => 3,
            ErrorKind::Config => 4,
            ErrorKind::Unavailable => 5,
            ErrorKind::Refused => 6,
            ErrorKind::Internal => 70,
            ErrorKind::BrokenPipe => 0,
        })
    }

    /// The kind's name in `--json` error documents.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Failed => "failed",
            ErrorKind::Usage => "usage",
            ErrorKind::Input => "input",
            ErrorKind::Config => "config",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Refused => "refused",
            ErrorKind::Internal => "internal",
            ErrorKind::BrokenPipe => "broken_pipe",
        }
    }
}

impl From<Kind> for ErrorKind {
    /// The catalogue's kind of a failure as the command line's; both give the same exit code.
    fn from(kind: Kind) -> ErrorKind {
        match kind {
            Kind::Usage => ErrorKind::Usage,
            Kind::Input => ErrorKind::Input,
            Kind::Declined => ErrorKind::Failed,
            Kind::Configuration => ErrorKind::Config,
            Kind::Unavailable => ErrorKind::Unavailable,
            Kind::Refused => ErrorKind::Refused,
            Kind::Internal => ErrorKind::Internal,
        }
    }
}

/// A failure of the command, as the user sees it.
#[derive(Debug)]
pub struct CliError {
    /// Its class.
    pub kind: ErrorKind,
    /// What went wrong, in one line.
    pub message: String,
    /// What to do about it, in one line.
    pub fix: Option<String>,
    /// The catalogue code, when one applies (`--json` documents always carry it).
    pub code: Option<Code>,
    /// Whether the `error:` line starts with the code.
    pub code_in_line: bool,
}

impl CliError {
    /// A new error of `kind`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> CliError {
        CliError {
            kind,
            message: message.into(),
            fix: None,
            code: None,
            code_in_line: false,
        }
    }

    /// Any library error, from the catalogue entry of its code: the entry's kind picks the exit
    /// code, its command-line fix (placeholders filled from the error) is the fix line, and the
    /// error's `Display` is the message. A refusal's line, and any answer of the gateway, starts
    /// with its code, as `docs/cli.md` promises; other failures carry it in `--json` only.
    pub fn of<E: Catalogued>(e: E) -> CliError {
        let code = e.code();
        let kind = code.entry().kind;
        let fix = e.cli_fix();
        let mut message = e.to_string();
        // The gateway's answer starts with its code already: it is named once, first. A code
        // this build does not know stays in the message as the gateway wrote it.
        let code_in_line = match message.strip_prefix(&format!("{code}: ")) {
            Some(rest) => {
                message = rest.to_owned();
                true
            }
            None => kind == Kind::Refused && !message.starts_with("AB-"),
        };
        CliError {
            kind: kind.into(),
            message,
            fix: Some(fix),
            code: Some(code),
            code_in_line,
        }
    }

    /// Adds the fix line.
    pub fn fix(mut self, fix: impl Into<String>) -> CliError {
        self.fix = Some(fix.into());
        self
    }

    /// Adds the catalogue code; its fix becomes the fix line unless one is set.
    pub fn code(mut self, code: Code) -> CliError {
        if self.fix.is_none() {
            self.fix = Some(code.entry().cli_fix().to_owned());
        }
        self.code = Some(code);
        self.code_in_line = true;
        self
    }

    /// An unusable input.
    pub fn input(message: impl Into<String>) -> CliError {
        CliError::new(ErrorKind::Input, message)
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(code) = self.code.filter(|_| self.code_in_line) {
            write!(f, "{code}: ")?;
        }
        f.write_str(&self.message)
    }
}

impl From<std::io::Error> for CliError {
    fn from(e: std::io::Error) -> CliError {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            return CliError::new(ErrorKind::BrokenPipe, "broken pipe");
        }
        CliError::new(ErrorKind::Input, e.to_string())
    }
}

impl From<anyhow::Error> for CliError {
    fn from(e: anyhow::Error) -> CliError {
        CliError::new(ErrorKind::Internal, format!("{e:#}"))
            .fix("this is a bug in agentbus; please report it with the command you ran")
    }
}

/// The result of a command.
pub type CliResult = Result<ExitCode, CliError>;

#[cfg(test)]
mod tests;
