//! End-to-end tests of the `agentbus` binary: real processes, real files.

#![allow(clippy::unwrap_used)]

mod envelope_cli;
mod gateway_cli;
mod local_cli;
mod service_cli;
mod share_cli;

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// Runs the binary with `args`, feeding `stdin`.
pub fn agentbus(args: &[&str], stdin: &[u8]) -> Output {
    agentbus_in(None, args, stdin)
}

/// Runs the binary in `dir` (when given) with `args`, feeding `stdin`.
pub fn agentbus_in(dir: Option<&Path>, args: &[&str], stdin: &[u8]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentbus"));
    cmd.args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(dir) = dir {
        cmd.current_dir(dir);
    }
    let mut child = cmd.spawn().unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

/// The repository's root.
pub fn repo() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}
