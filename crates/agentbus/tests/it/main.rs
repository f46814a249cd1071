//! End-to-end tests of the `agentbus` binary: real processes, real files.

#![allow(clippy::unwrap_used)]

mod cli_ux;
mod envelope_cli;
mod fleet_cli;
mod forged_cli;
mod fuzz_seeds;
mod gateway_cli;
mod json_cli;
mod kill_loop;
mod local_cli;
mod logs_cli;
mod opencode_plugin;
mod people_cli;
mod pty;
mod replicas;
mod search_cli;
mod service_cli;
mod share_cli;
mod terminal_cli;
mod work_cli;

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// The gateway process harness (`agentbus_testkit::gwproc`) for the binary this crate builds.
pub mod gwproc {
    use std::path::Path;
    use std::process::Command;

    pub use agentbus_testkit::gwproc::*;

    /// [`gateway_command`] for this crate's binary, with `--json`.
    pub fn gateway_cmd(dir: &Path, extra: &[&str]) -> Command {
        gateway_command(env!("CARGO_BIN_EXE_agentbus"), true, dir, extra)
    }

    /// Starts this crate's gateway on `dir` and reads its start-up document.
    pub fn start(dir: &Path, extra: &[&str]) -> GwProc {
        GwProc::start_cmd(gateway_cmd(dir, extra))
    }
}

/// Every variable by which a harness names or marks its sessions' commands: tests clear them, so
/// their own commands are the engineer's wherever the tests run (even inside a harness session).
pub fn harness_vars() -> impl Iterator<Item = &'static str> {
    use agentbus_local::session::{HARNESS_MARKERS, SESSION_VARS};
    SESSION_VARS
        .iter()
        .map(|(k, _)| *k)
        .chain(HARNESS_MARKERS.iter().map(|(k, _)| *k))
}

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
