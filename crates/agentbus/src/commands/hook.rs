//! `agentbus hook <harness>` (what a harness runs on each event) and `agentbus hooks
//! install|uninstall|status`. The hook never fails its harness: a problem is reported on stderr
//! and the process exits 0, so the session goes on without messages rather than stopping.
//!
//! Install writes the settings file where the harness itself looks (`CLAUDE_CONFIG_DIR`,
//! `CODEX_HOME`, `XDG_CONFIG_HOME`), and says what would otherwise fail silently: a hook program
//! inside a cargo build directory, a harness version whose `PreToolUse` takes no context (the hook
//! is then installed with `--no-pre-tool-context`), and Codex's trust review of new hooks.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand, ValueEnum};
use serde_json::json;

use agentbus_local::hook::{Harness, HookEnv, parse_event, render_answer};
use agentbus_local::install;
use agentbus_local::{offline, trust};

use super::local::open_store;
use crate::error::{CliError, CliResult, ErrorKind};
use crate::printer::Printer;

/// The harnesses, as the command line names them.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum HarnessArg {
    /// Claude Code.
    Claude,
    /// OpenAI Codex CLI.
    Codex,
    /// OpenCode.
    Opencode,
}

impl HarnessArg {
    pub fn harness(self) -> Harness {
        match self {
            HarnessArg::Claude => Harness::Claude,
            HarnessArg::Codex => Harness::Codex,
            HarnessArg::Opencode => Harness::OpenCode,
        }
    }
}

/// Arguments of `hook`.
#[derive(Debug, Args)]
pub struct HookArgs {
    /// The harness whose event arrives on stdin.
    harness: HarnessArg,
    /// The harness version takes no context before a tool call (Claude Code before 2.1.9, Codex
    /// before 0.129.0): PreToolUse only blocks a paused session and shows nothing, so nothing is
    /// claimed there. `hooks install` sets it when it finds such a version.
    #[arg(long)]
    no_pre_tool_context: bool,
}

/// `hooks install|uninstall`.
#[derive(Debug, Subcommand)]
pub enum HooksArgs {
    /// Add the hook to a harness's settings (idempotent).
    #[command(
        after_help = "Examples:\n  agentbus hooks install claude\n  agentbus hooks install codex --project .\n  agentbus hooks install opencode"
    )]
    Install(InstallArgs),
    /// Remove the hook from a harness's settings; other hooks stay.
    #[command(after_help = "Example:\n  agentbus hooks uninstall claude")]
    Uninstall(InstallArgs),
    /// Record that Codex may run the installed hook, as its /hooks review does (only Codex asks).
    #[command(
        after_help = "Examples:\n  agentbus hooks trust codex\n  agentbus hooks trust codex --project ."
    )]
    Trust(TrustArgs),
    /// Per harness: whether the hook is installed, where, what it runs, and whether that is this
    /// binary (for Codex, whether each entry is trusted).
    #[command(
        after_help = "Examples:\n  agentbus hooks status\n  agentbus --json hooks status codex"
    )]
    Status(StatusArgs),
}

/// Arguments of `hooks status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Only this harness (default: all three).
    harness: Option<HarnessArg>,
    /// Look in this project's settings instead of the user's.
    #[arg(long)]
    project: Option<PathBuf>,
}

/// Arguments of `hooks trust`.
#[derive(Debug, Args)]
pub struct TrustArgs {
    /// The harness (only `codex` reviews hooks).
    harness: HarnessArg,
    /// Trust the hook of this project's settings instead of the user's.
    #[arg(long, conflicts_with = "settings")]
    project: Option<PathBuf>,
    /// Trust the hook of this exact hooks file.
    #[arg(long)]
    settings: Option<PathBuf>,
}

/// Where to install.
#[derive(Debug, Args)]
pub struct InstallArgs {
    /// The harness.
    harness: HarnessArg,
    /// Install into this project's settings instead of the user's.
    #[arg(long, conflicts_with = "settings")]
    project: Option<PathBuf>,
    /// Install into this exact settings file (or OpenCode plugin file).
    #[arg(long)]
    settings: Option<PathBuf>,
    /// The program the hook runs (default: this agentbus binary).
    #[arg(long)]
    program: Option<String>,
    /// Codex: also record that Codex may run the hook, as its /hooks review does (until then
    /// Codex skips it). Ignored by `uninstall`.
    #[arg(long)]
    trust: bool,
}

/// Whether a `normal` message keeps a session going at the end of its turn: `continue` (the
/// default) or `wait` (docs/local.md, "End of turn").
const STOP_NORMAL: &str = "AGENTBUS_STOP_NORMAL";

/// Runs `agentbus hook <harness>`.
pub fn hook(args: HookArgs, printer: &Printer) -> CliResult {
    if let Err(e) = answer(args.harness.harness(), !args.no_pre_tool_context, printer) {
        if e.kind == ErrorKind::BrokenPipe {
            return Err(e);
        }
        printer.error(&e);
    }
    Ok(ExitCode::SUCCESS)
}

fn answer(harness: Harness, pre_tool_context: bool, printer: &Printer) -> Result<(), CliError> {
    let mut input = Vec::new();
    std::io::stdin()
        .read_to_end(&mut input)
        .map_err(|e| CliError::input(format!("reading the hook event: {e}")))?;
    let mut event = parse_event(harness, &input).map_err(|e| {
        CliError::input(e.to_string())
            .fix("run this from the harness's hook settings (agentbus hooks install)")
    })?;
    event.pre_tool_context = pre_tool_context;
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    event.normal_continues = match var(STOP_NORMAL).as_deref() {
        None | Some("continue") => true,
        Some("wait") => false,
        Some(other) => {
            // Reported, never fatal: the hook must not fail its harness.
            printer.error(
                &CliError::input(format!(
                    "{STOP_NORMAL}={other:?} is neither continue nor wait"
                ))
                .fix(format!(
                    "export {STOP_NORMAL}=wait (or continue, the default)"
                )),
            );
            true
        }
    };
    let env = HookEnv {
        agent: var("AGENTBUS_AGENT"),
        name: var("AGENTBUS_NAME"),
        env_file: var("CLAUDE_ENV_FILE").map(PathBuf::from),
    };
    let store = open_store()?;
    let answer = store.hook(&event, &env).map_err(CliError::of)?;
    if let Some(doc) = render_answer(&event, &answer) {
        printer.data_line(&doc.to_string())?;
    }
    Ok(())
}

/// Runs `agentbus hooks install|uninstall|status`.
pub fn hooks(args: HooksArgs, printer: &Printer) -> CliResult {
    let (installing, a) = match args {
        HooksArgs::Install(a) => (true, a),
        HooksArgs::Uninstall(a) => (false, a),
        HooksArgs::Status(a) => return status(a, printer),
        HooksArgs::Trust(a) => return trust(a, printer),
    };
    let harness = a.harness.harness();
    let path = match (a.settings, a.project) {
        (Some(p), _) => p,
        (None, project) => settings_path(harness, project.as_deref())?,
    };
    if !installing {
        let change = install::uninstall(harness, &path).map_err(CliError::of)?;
        if harness == Harness::OpenCode {
            offline::unprepare(&path).map_err(CliError::of)?;
        }
        let what = match change {
            install::Change::Changed => "removed the hook from",
            install::Change::Unchanged => "no hook to remove in",
        };
        printer.either(
            &json!({"harness": harness.as_str(), "path": path, "change": change, "installed": false}),
            &format!("{what} {}", path.display()),
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    let program = super::program(a.program)?;
    let version = harness_version(harness);
    let pre_tool_context = match harness.pre_tool_context_since() {
        Some(since) => version.is_some_and(|v| v >= since),
        None => true,
    };
    let change =
        install::install(harness, &path, &program, pre_tool_context).map_err(CliError::of)?;
    let mut notes = Vec::new();
    if install::in_build_dir(Path::new(&program)) {
        notes.push(format!(
            "warning: the hook runs {program}, inside a cargo build directory: `cargo clean` or the next build breaks delivery. Install a stable binary with `cargo install --path crates/agentbus`, then run `agentbus hooks install {}` again.",
            harness.as_str()
        ));
    }
    if let Some(since) = harness.pre_tool_context_since()
        && !pre_tool_context
    {
        let found = match version {
            Some(v) => format!("{} {v} is older than {since}", harness_name(harness)),
            None => format!(
                "`{} --version` did not answer, so its version is unknown",
                harness_command(harness)
            ),
        };
        notes.push(format!(
            "note: {found}: PreToolUse cannot carry messages, so they are shown at the next prompt or after the tool call instead (installed with --no-pre-tool-context). Once {} {since} or later is installed, run `agentbus hooks install {}` again.",
            harness_name(harness),
            harness.as_str()
        ));
    }
    let mut trusted = None;
    if harness == Harness::Codex && a.trust {
        let config = trust::config_path(&codex_home()?);
        let (_, entries) = trust::trust(&path, &config).map_err(CliError::of)?;
        notes.push(format!(
            "trusted {} hook entries in {}: Codex runs them",
            entries.len(),
            config.display()
        ));
        trusted = Some(entries);
    } else if harness == Harness::Codex {
        notes.push(
            "note: Codex runs a new or changed hook only after you trust it: run `agentbus hooks trust codex` (or open /hooks in Codex and trust the agentbus hook); until then it is skipped, and no message is delivered."
                .to_owned(),
        );
    }
    let mut offline = None;
    if harness == Harness::OpenCode {
        let prepared = offline::prepare(&path).map_err(CliError::of)?;
        if let offline::Prepared::LeftAlone(why) = &prepared {
            notes.push(format!(
                "note: OpenCode installs {} from the npm registry at start-up and loads the plugin only after ({why}): without the registry, sessions start late or not at all.",
                offline::PLUGIN_PACKAGE
            ));
        }
        offline = Some(matches!(prepared, offline::Prepared::Offline(_)));
    }
    if harness == Harness::Codex
        && path.components().any(|c| c.as_os_str() == ".codex")
        && !path.starts_with(codex_home()?)
    {
        notes.push("note: Codex loads a project's hooks only once the project is trusted (trust the folder when Codex asks).".to_owned());
    }
    let what = match change {
        install::Change::Changed => "installed the hook in",
        install::Change::Unchanged => "the hook was already installed in",
    };
    let mut human = format!("{what} {}", path.display());
    for n in &notes {
        human.push('\n');
        human.push_str(n);
    }
    printer.either(
        &json!({
            "harness": harness.as_str(),
            "path": path,
            "change": change,
            "installed": true,
            "program": program,
            "harness_version": version.map(|v| v.to_string()),
            "pre_tool_context": pre_tool_context,
            "trust": trusted,
            "offline": offline,
            "notes": notes,
        }),
        &human,
    )?;
    Ok(ExitCode::SUCCESS)
}

/// `hooks trust codex`: records Codex's trust of our installed entries.
fn trust(a: TrustArgs, printer: &Printer) -> CliResult {
    let harness = a.harness.harness();
    if harness != Harness::Codex {
        return Err(CliError::new(
            ErrorKind::Usage,
            format!(
                "{} runs its hooks without a trust review",
                harness_name(harness)
            ),
        )
        .fix("only `agentbus hooks trust codex` applies"));
    }
    let path = match (a.settings, a.project) {
        (Some(p), _) => p,
        (None, project) => settings_path(harness, project.as_deref())?,
    };
    let config = trust::config_path(&codex_home()?);
    let (change, entries) = trust::trust(&path, &config).map_err(CliError::of)?;
    if entries.is_empty() {
        return Err(CliError::new(
            ErrorKind::Config,
            format!("no agentbus hook is installed in {}", path.display()),
        )
        .fix("run `agentbus hooks install codex --trust`"));
    }
    let what = match change {
        install::Change::Changed => "trusted",
        install::Change::Unchanged => "already trusted:",
    };
    printer.either(
        &json!({"harness": harness.as_str(), "path": path, "config": config, "change": change, "trust": entries}),
        &format!(
            "{what} {} hook entries of {} in {}",
            entries.len(),
            path.display(),
            config.display()
        ),
    )?;
    Ok(ExitCode::SUCCESS)
}

/// Codex's home folder, where its `config.toml` (and so its hooks' trust) lives.
fn codex_home() -> Result<PathBuf, CliError> {
    Ok(install::config_dir(
        Harness::Codex,
        &super::home_dir("--settings")?,
        |v| std::env::var_os(v),
    ))
}

/// `hooks status`: for each harness, whether the hook is installed where the harness looks, what
/// it runs, and whether that is the running binary.
fn status(a: StatusArgs, printer: &Printer) -> CliResult {
    let harnesses: Vec<Harness> = match a.harness {
        Some(h) => vec![h.harness()],
        None => Harness::ALL.to_vec(),
    };
    let running = running_binary().ok();
    let same = |program: &str| {
        let p = std::fs::canonicalize(program).ok();
        p.is_some() && p == running.as_ref().and_then(|r| std::fs::canonicalize(r).ok())
    };
    let mut docs = Vec::new();
    let mut human = Vec::new();
    for harness in harnesses {
        let path = settings_path(harness, a.project.as_deref())?;
        let found = install::installed(harness, &path).map_err(CliError::of)?;
        let Some(found) = found else {
            docs.push(json!({"harness": harness.as_str(), "path": path, "installed": false}));
            human.push(format!(
                "{:<9} not installed ({}); run `agentbus hooks install {}`",
                harness.as_str(),
                path.display(),
                harness.as_str()
            ));
            continue;
        };
        let program = found.program.clone().unwrap_or_default();
        let exists = Path::new(&program).is_file();
        let is_running = same(&program);
        let build_dir = install::in_build_dir(Path::new(&program));
        let mut line = format!(
            "{:<9} installed in {} ({}), runs {program}",
            harness.as_str(),
            path.display(),
            found.events.join(", ")
        );
        if !exists {
            line.push_str(" — MISSING: reinstall with `agentbus hooks install`");
        } else if !is_running {
            line.push_str(" — not this agentbus binary");
        }
        if build_dir {
            line.push_str(" — in a build directory: `cargo install --path crates/agentbus`, then install again");
        }
        let end_of_turn = found
            .events
            .iter()
            .any(|e| e == "Stop" || e == "session.idle");
        if !end_of_turn {
            line.push_str(&format!(
                " — no end of turn (a message waiting when the session stops waits for the next prompt): run `agentbus hooks install {}` again",
                harness.as_str()
            ));
        }
        if harness.pre_tool_context_since().is_some() && !found.pre_tool_context {
            line.push_str(" — PreToolUse shows no messages (--no-pre-tool-context)");
        }
        let mut trust_doc = None;
        if harness == Harness::Codex {
            let config = trust::config_path(&codex_home()?);
            let entries = trust::status(&path, &config).map_err(CliError::of)?;
            for e in &entries {
                let state = match (e.status, e.enabled) {
                    (_, false) => "disabled in Codex",
                    (trust::TrustStatus::Trusted, true) => "trusted",
                    (trust::TrustStatus::Untrusted, true) => {
                        "NOT TRUSTED: Codex skips it; run `agentbus hooks trust codex`"
                    }
                    (trust::TrustStatus::Modified, true) => {
                        "CHANGED since trusted: Codex skips it; run `agentbus hooks trust codex`"
                    }
                };
                line.push_str(&format!("\n  {:<17} {state}", e.event));
            }
            trust_doc = Some(entries);
        }
        let mut offline_doc = None;
        if harness == Harness::OpenCode
            && let Some(folder) = offline::config_folder(&path)
        {
            let needs = offline::needs_registry(&folder);
            if needs {
                line.push_str(&format!(
                    " — OpenCode installs {} from the npm registry at start-up",
                    offline::PLUGIN_PACKAGE
                ));
            }
            offline_doc = Some(!needs);
        }
        human.push(line);
        docs.push(json!({
            "harness": harness.as_str(),
            "path": path,
            "installed": true,
            "events": found.events,
            "program": program,
            "program_exists": exists,
            "is_running_binary": is_running,
            "in_build_dir": build_dir,
            "pre_tool_context": found.pre_tool_context,
            "trust": trust_doc,
            "offline": offline_doc,
            "end_of_turn": end_of_turn,
        }));
    }
    printer.either(&json!({"hooks": docs}), &human.join("\n"))?;
    Ok(ExitCode::SUCCESS)
}

/// The settings file of `harness`: in `project`, or the user's, where the harness looks.
fn settings_path(harness: Harness, project: Option<&Path>) -> Result<PathBuf, CliError> {
    Ok(match project {
        Some(dir) => install::project_path(harness, dir),
        None => install::default_path(harness, &super::home_dir("--settings")?, |v| {
            std::env::var_os(v)
        }),
    })
}

fn running_binary() -> Result<PathBuf, CliError> {
    std::env::current_exe()
        .map_err(|e| CliError::new(ErrorKind::Internal, format!("locating agentbus: {e}")))
}

fn harness_name(harness: Harness) -> &'static str {
    match harness {
        Harness::Claude => "Claude Code",
        Harness::Codex => "Codex",
        Harness::OpenCode => "OpenCode",
    }
}

fn harness_command(harness: Harness) -> &'static str {
    match harness {
        Harness::Claude => "claude",
        Harness::Codex => "codex",
        Harness::OpenCode => "opencode",
    }
}

/// The installed harness's version, from `<harness> --version` (`AGENTBUS_CODEX` and
/// `AGENTBUS_CLAUDE` name another program), for the harnesses whose hook depends on it; `None`
/// when it cannot be run or says no version.
fn harness_version(harness: Harness) -> Option<agentbus_local::hook::Version> {
    harness.pre_tool_context_since()?;
    let var = match harness {
        Harness::Claude => "AGENTBUS_CLAUDE",
        _ => "AGENTBUS_CODEX",
    };
    let program = std::env::var_os(var)
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| harness_command(harness).into());
    let out = std::process::Command::new(program)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| agentbus_local::hook::Version::find(&String::from_utf8_lossy(&out.stdout)))
        .flatten()
}
