//! Adding the hook to a harness's settings, idempotently, and removing it (issue item 8).
//!
//! Each user-level file lies in the harness's own configuration directory ([`config_dir`]).
//!
//! - Claude Code: `~/.claude/settings.json` (or a project's `.claude/settings.json`), a command
//!   hook on `SessionStart`, `UserPromptSubmit`, `PreToolUse`, `PostToolUse` and `Stop`.
//! - Codex: `~/.codex/hooks.json` (or a project's `.codex/hooks.json`), the same five events in
//!   the same shape.
//! - OpenCode runs no command hooks; it loads plugins. We write a small plugin,
//!   `~/.config/opencode/plugins/agentbus.js`, that runs `agentbus hook opencode` on
//!   `chat.message` and `tool.execute.after` (context), `tool.execute.before` (a paused
//!   session's deny) and the `session.idle` event (the end of a turn); see [`plugin_source`].
//!
//! The session id always comes from the event, never from the settings.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use crate::hook::Harness;
use crate::store::{StoreError, io_at, write_file};

/// The events the hook runs on in Claude Code and Codex (`Stop`: the end of a turn, which a
/// waiting message may keep going).
pub const EVENTS: [&str; 5] = [
    "SessionStart",
    "UserPromptSubmit",
    "PreToolUse",
    "PostToolUse",
    "Stop",
];

/// What the OpenCode plugin handles: its hooks, and `session.idle` among the bus events.
pub const PLUGIN_EVENTS: [&str; 5] = [
    "chat.message",
    "tool.execute.before",
    "tool.execute.after",
    "shell.env",
    "session.idle",
];

/// The first line of the OpenCode plugin, by which uninstall knows the file is ours.
pub const PLUGIN_MARKER: &str = "// Installed by `agentbus hooks install opencode`; removed by `agentbus hooks uninstall opencode`.";

/// Why the settings could not be changed.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// A file could not be read or written.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The settings file is not a JSON object; it is left alone.
    #[error("{}: not a JSON object ({why}); fix or move it, then run this again", path.display())]
    NotJson {
        /// The file.
        path: PathBuf,
        /// The parse error.
        why: String,
    },
    /// A plugin file of that name exists and is not ours.
    #[error("{}: exists and was not written by agentbus; move it away first", .0.display())]
    NotOurs(PathBuf),
}

impl agentbus_protocol::errors::Catalogued for InstallError {
    fn code(&self) -> agentbus_protocol::Code {
        use agentbus_protocol::Code;
        match self {
            InstallError::Store(e) => e.code(),
            InstallError::NotJson { .. } => Code::SettingsUnreadable,
            InstallError::NotOurs(_) => Code::NotOurs,
        }
    }
}

/// What an install or uninstall changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Change {
    /// The file was written.
    Changed,
    /// It already said what it should.
    Unchanged,
}

/// The directory where `harness` keeps its user-level configuration, as the harness itself finds
/// it: Claude Code's `$CLAUDE_CONFIG_DIR` (else `~/.claude`), Codex's `$CODEX_HOME` (else
/// `~/.codex`), OpenCode's `$XDG_CONFIG_HOME/opencode` (else `~/.config/opencode`). `var` reads the
/// environment (a parameter, so tests pass their own); empty values count as unset, as the
/// harnesses treat them.
pub fn config_dir(
    harness: Harness,
    home: &Path,
    var: impl Fn(&str) -> Option<std::ffi::OsString>,
) -> PathBuf {
    let set = |name: &str| var(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    match harness {
        Harness::Claude => set("CLAUDE_CONFIG_DIR").unwrap_or_else(|| home.join(".claude")),
        Harness::Codex => set("CODEX_HOME").unwrap_or_else(|| home.join(".codex")),
        Harness::OpenCode => set("XDG_CONFIG_HOME")
            .unwrap_or_else(|| home.join(".config"))
            .join("opencode"),
    }
}

/// The user-level settings file of `harness`: its file under [`config_dir`].
pub fn default_path(
    harness: Harness,
    home: &Path,
    var: impl Fn(&str) -> Option<std::ffi::OsString>,
) -> PathBuf {
    let dir = config_dir(harness, home, var);
    match harness {
        Harness::Claude => dir.join("settings.json"),
        Harness::Codex => dir.join("hooks.json"),
        Harness::OpenCode => dir.join("plugins").join("agentbus.js"),
    }
}

/// The settings file of `harness` in a project directory.
pub fn project_path(harness: Harness, project: &Path) -> PathBuf {
    project.join(relative_path(harness, &[".opencode"]))
}

/// The settings file under its base: Claude Code and Codex keep the same path in a home and in a
/// project; OpenCode's plugin folder sits under `opencode_dir`, which differs between the two.
fn relative_path(harness: Harness, opencode_dir: &[&str]) -> PathBuf {
    match harness {
        Harness::Claude => [".claude", "settings.json"].iter().collect(),
        Harness::Codex => [".codex", "hooks.json"].iter().collect(),
        Harness::OpenCode => opencode_dir
            .iter()
            .chain(&["plugins", "agentbus.js"])
            .collect(),
    }
}

/// The flag of a hook installed for a harness version that takes no context before a tool call.
pub const NO_PRE_TOOL_CONTEXT: &str = "--no-pre-tool-context";

/// The hook command for `harness`, run by `program` (the agentbus binary's path); with
/// `pre_tool_context` false it carries [`NO_PRE_TOOL_CONTEXT`].
pub fn command(program: &str, harness: Harness, pre_tool_context: bool) -> String {
    let mut cmd = format!(
        "{} hook {}",
        agentbus_protocol::text::shell_quote(program),
        harness.as_str()
    );
    if !pre_tool_context {
        cmd.push(' ');
        cmd.push_str(NO_PRE_TOOL_CONTEXT);
    }
    cmd
}

/// Whether `cmd` is an agentbus hook command for `harness`, whatever path runs it.
pub(crate) fn is_ours(cmd: &str, harness: Harness) -> bool {
    let words: Vec<&str> = cmd.split_whitespace().collect();
    let hook_at = words
        .windows(2)
        .position(|w| w[0] == "hook" && w[1] == harness.as_str());
    hook_at.is_some_and(|i| words[i + 2..].iter().all(|w| w.starts_with("--")))
        && cmd.contains("agentbus")
}

/// The program a hook command runs: its first word, unquoted as a shell would.
fn program_of(cmd: &str) -> String {
    let cmd = cmd.trim_start();
    match cmd.strip_prefix('\'') {
        // `shell_quote` writes one single-quoted word, with `'` as `'\''`.
        Some(rest) => {
            let mut out = String::new();
            let mut rest = rest;
            loop {
                match rest.find('\'') {
                    Some(i) => {
                        out.push_str(&rest[..i]);
                        rest = &rest[i + 1..];
                        match rest.strip_prefix("\\''") {
                            Some(r) => {
                                out.push('\'');
                                rest = r;
                            }
                            None => break,
                        }
                    }
                    None => {
                        out.push_str(rest);
                        break;
                    }
                }
            }
            out
        }
        None => cmd.split_whitespace().next().unwrap_or("").to_owned(),
    }
}

/// What a settings file holds of our hook.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Installed {
    /// The events our hook runs on (for OpenCode, the plugin's hooks).
    pub events: Vec<String>,
    /// The program it runs, as written.
    pub program: Option<String>,
    /// Whether its `PreToolUse` answer carries messages (no [`NO_PRE_TOOL_CONTEXT`]).
    pub pre_tool_context: bool,
}

/// Reads what `path` holds of our hook for `harness`: `None` when the file or our hook is not
/// there. Never changes the file.
pub fn installed(harness: Harness, path: &Path) -> Result<Option<Installed>, InstallError> {
    let text = match fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(StoreError::from_io(path, e).into()),
    };
    if harness == Harness::OpenCode {
        if !text.starts_with(PLUGIN_MARKER) {
            return Ok(None);
        }
        let program = text
            .lines()
            .find_map(|l| l.strip_prefix("const AGENTBUS = "))
            .and_then(|v| serde_json::from_str::<String>(v.trim()).ok());
        // A hook is a key of the plugin's object; a bus event is a string its handler compares.
        let events = PLUGIN_EVENTS
            .iter()
            .filter(|e| {
                let quoted = format!("\"{e}\"");
                text.contains(&format!("{quoted}:"))
                    || (**e == "session.idle" && text.contains(&quoted))
            })
            .map(|e| (*e).to_owned())
            .collect();
        return Ok(Some(Installed {
            events,
            program,
            pre_tool_context: false,
        }));
    }
    let root = read_settings(path)?;
    let mut found = Installed::default();
    let mut any = false;
    for event in EVENTS {
        let cmds = root
            .get("hooks")
            .and_then(|h| h.get(event))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|g| g.get("hooks").and_then(Value::as_array))
            .flatten()
            .filter_map(|h| h.get("command").and_then(Value::as_str))
            .filter(|c| is_ours(c, harness));
        for cmd in cmds {
            if !found.events.iter().any(|e| e == event) {
                found.events.push(event.to_owned());
            }
            found.program = Some(program_of(cmd));
            found.pre_tool_context = !cmd.split_whitespace().any(|w| w == NO_PRE_TOOL_CONTEXT);
            any = true;
        }
    }
    Ok(any.then_some(found))
}

/// Whether `program` lies in a cargo build directory (`…/target/debug/agentbus` and the like),
/// which `cargo clean` or the next build replaces or removes: a hook pointing there stops
/// delivering without a word.
pub fn in_build_dir(program: &Path) -> bool {
    let parts: Vec<_> = program.components().collect();
    // `<workspace>/target/<profile or triple>/…/agentbus`, where the workspace has a Cargo.toml.
    (0..parts.len()).any(|i| {
        parts[i].as_os_str() == "target" && i + 2 < parts.len() && {
            let root: PathBuf = parts[..i].iter().collect();
            root.join("Cargo.toml").exists()
        }
    })
}

/// Adds the hook for `harness` to the file at `path`, running `program`; `pre_tool_context`
/// false installs it with [`NO_PRE_TOOL_CONTEXT`], for harness versions that take no context
/// before a tool call.
pub fn install(
    harness: Harness,
    path: &Path,
    program: &str,
    pre_tool_context: bool,
) -> Result<Change, InstallError> {
    match harness {
        Harness::OpenCode => install_plugin(path, program),
        Harness::Claude | Harness::Codex => {
            let mut root = read_settings(path)?;
            let cmd = command(program, harness, pre_tool_context);
            let hooks = object_at(&mut root, "hooks");
            let mut changed = false;
            for event in EVENTS {
                let groups = hooks
                    .entry(event)
                    .or_insert_with(|| Value::Array(Vec::new()));
                if !groups.is_array() {
                    *groups = Value::Array(Vec::new());
                }
                let list = groups
                    .as_array_mut()
                    .map(std::mem::take)
                    .unwrap_or_default();
                let (mut list, found) = replace_ours(list, harness, &cmd, &mut changed);
                if !found {
                    list.push(
                        json!({"hooks": [{"type": "command", "command": cmd, "timeout": 10}]}),
                    );
                    changed = true;
                }
                *groups = Value::Array(list);
            }
            save_if(changed, path, &root)
        }
    }
}

/// Removes the hook for `harness` from the file at `path`; other hooks stay.
pub fn uninstall(harness: Harness, path: &Path) -> Result<Change, InstallError> {
    match harness {
        Harness::OpenCode => match fs::read_to_string(path) {
            Ok(text) if text.starts_with(PLUGIN_MARKER) => {
                fs::remove_file(path).map_err(|e| StoreError::from_io(path, e))?;
                Ok(Change::Changed)
            }
            Ok(_) => Err(InstallError::NotOurs(path.to_owned())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Change::Unchanged),
            Err(e) => Err(StoreError::from_io(path, e).into()),
        },
        Harness::Claude | Harness::Codex => {
            if !path.exists() {
                return Ok(Change::Unchanged);
            }
            let mut root = read_settings(path)?;
            let mut changed = false;
            if let Some(hooks) = root.get_mut("hooks").and_then(Value::as_object_mut) {
                for event in EVENTS {
                    let Some(groups) = hooks.get_mut(event).and_then(Value::as_array_mut) else {
                        continue;
                    };
                    for group in groups.iter_mut() {
                        if let Some(list) = group.get_mut("hooks").and_then(Value::as_array_mut) {
                            let before = list.len();
                            list.retain(|h| {
                                !h.get("command")
                                    .and_then(Value::as_str)
                                    .is_some_and(|c| is_ours(c, harness))
                            });
                            changed |= list.len() != before;
                        }
                    }
                    groups.retain(|g| {
                        g.get("hooks")
                            .and_then(Value::as_array)
                            .is_none_or(|l| !l.is_empty())
                    });
                    if groups.is_empty() {
                        hooks.remove(event);
                    }
                }
            }
            save_if(changed, path, &root)
        }
    }
}

/// Replaces the command of our hook entries in `groups` with `cmd`; says whether one was found.
fn replace_ours(
    mut groups: Vec<Value>,
    harness: Harness,
    cmd: &str,
    changed: &mut bool,
) -> (Vec<Value>, bool) {
    let mut found = false;
    for group in &mut groups {
        let Some(list) = group.get_mut("hooks").and_then(Value::as_array_mut) else {
            continue;
        };
        for h in list {
            let ours = h
                .get("command")
                .and_then(Value::as_str)
                .is_some_and(|c| is_ours(c, harness));
            if ours {
                found = true;
                if h.get("command").and_then(Value::as_str) != Some(cmd) {
                    h["command"] = Value::String(cmd.to_owned());
                    *changed = true;
                }
            }
        }
    }
    (groups, found)
}

fn object_at<'a>(root: &'a mut Map<String, Value>, key: &str) -> &'a mut Map<String, Value> {
    let v = root.entry(key).or_insert_with(|| Value::Object(Map::new()));
    if !v.is_object() {
        *v = Value::Object(Map::new());
    }
    match v {
        Value::Object(m) => m,
        _ => unreachable!("just made an object"),
    }
}

fn read_settings(path: &Path) -> Result<Map<String, Value>, InstallError> {
    let text = match fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Map::new()),
        Err(e) => return Err(StoreError::from_io(path, e).into()),
    };
    if text.trim().is_empty() {
        return Ok(Map::new());
    }
    match serde_json::from_str::<Value>(&text) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(InstallError::NotJson {
            path: path.to_owned(),
            why: "not an object".into(),
        }),
        Err(e) => Err(InstallError::NotJson {
            path: path.to_owned(),
            why: e.to_string(),
        }),
    }
}

/// Writes the settings when they changed, and says which.
fn save_if(changed: bool, path: &Path, root: &Map<String, Value>) -> Result<Change, InstallError> {
    if !changed {
        return Ok(Change::Unchanged);
    }
    write_settings(path, root)?;
    Ok(Change::Changed)
}

fn write_settings(path: &Path, root: &Map<String, Value>) -> Result<(), InstallError> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).map_err(io_at(dir))?;
    }
    let mut text = serde_json::to_string_pretty(root).unwrap_or_default();
    text.push('\n');
    let tmp = path.with_extension("json.agentbus-tmp");
    write_file(&tmp, text.as_bytes())?;
    fs::rename(&tmp, path).map_err(io_at(path))?;
    Ok(())
}

fn install_plugin(path: &Path, program: &str) -> Result<Change, InstallError> {
    let text = plugin_source(program);
    match fs::read_to_string(path) {
        Ok(old) if old == text => return Ok(Change::Unchanged),
        Ok(old) if !old.starts_with(PLUGIN_MARKER) => {
            return Err(InstallError::NotOurs(path.to_owned()));
        }
        _ => {}
    }
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).map_err(io_at(dir))?;
    }
    write_file(path, text.as_bytes())?;
    Ok(Change::Changed)
}

/// The OpenCode plugin that runs `program hook opencode`, written against OpenCode's plugin API
/// (the `Hooks` type of `@opencode-ai/plugin`, packages/plugin/src/index.ts):
///
/// - `chat.message(input, output)`: `output.parts` is the user message's parts; a `text` part
///   pushed there (marked `synthetic`, so the UI does not echo it) is in the model's context for
///   this and every later turn. Messages are shown here.
/// - `tool.execute.after(input, output)`: `output.output` is the tool result the model reads;
///   messages are appended to it. So a session busy with tool calls gets its messages without
///   waiting for the next prompt.
/// - `tool.execute.before(input, output)`: its output carries only the tool's arguments, nothing
///   the model reads; throwing an `Error` stops the call and hands its message to the model. It
///   is used only to block a paused session, and shows (and claims) nothing.
/// - `shell.env(input, output)`: exports `AGENTBUS_SESSION` to the session's shell commands, so
///   `agentbus tell` from the session is sent as the session.
/// - `event({ event })` with `session.idle`, the end of a turn: when the hook answers
///   `continue`, the plugin prompts the session through the server (`client.session.prompt`),
///   and that prompt's `chat.message` shows the messages: nothing is claimed at idle, so a
///   prompt that never runs (`opencode run` exits at its first idle) loses nothing. The hook
///   is told whether the idle session is one the plugin's own prompt kept going
///   (`stop_hook_active`), which bounds the continuations; any other prompt starts over.
///
/// The plugin tells the hook whether it can show an answer at all (`context: false` when the
/// output it would write to is not there), so nothing is claimed that it then cannot show.
pub fn plugin_source(program: &str) -> String {
    let program_json = serde_json::to_string(program).unwrap_or_default();
    format!(
        r#"{PLUGIN_MARKER}
// It hands OpenCode events to the AgentBus hook, which answers {{"context", "block", "shown_ids"}}.
import {{ spawnSync }} from "node:child_process"

const AGENTBUS = {program_json}

function hook(event) {{
  const run = spawnSync(AGENTBUS, ["hook", "opencode"], {{ input: JSON.stringify(event), encoding: "utf8", timeout: 10000 }})
  if (run.status !== 0 || !run.stdout) return {{}}
  try {{ return JSON.parse(run.stdout) }} catch {{ return {{}} }}
}}

let parts = 0
function partID() {{
  parts += 1
  return "prt_agentbus" + Date.now().toString(36) + parts.toString(36) + Math.random().toString(36).slice(2, 8)
}}

// The end of a turn: sessions whose current run our prompt started, and prompts sent whose
// chat.message has not come yet (that one is ours, not the user's).
const continued = new Set()
const prompting = new Set()
const NUDGE = "AgentBus: messages for this session arrived as it finished its last answer; they are shown with this prompt. Read them before you stop."

export const AgentBus = async ({{ client }}) => {{
  // A child session (a subagent) has a parentID; its events show nothing, so messages wait.
  const subagent = async (id) => {{
    try {{ const s = await client.session.get({{ path: {{ id }} }}); return !!(s && s.data && s.data.parentID) }} catch {{ return false }}
  }}
  return {{
    "chat.message": async (input, output) => {{
      if (prompting.has(input.sessionID)) prompting.delete(input.sessionID)
      else continued.delete(input.sessionID)
      const canShow = !!(output && output.message && Array.isArray(output.parts))
      const answer = hook({{ event: "chat.message", session_id: input.sessionID, subagent: await subagent(input.sessionID), context: canShow }})
      if (canShow && answer.context) {{
        output.parts.push({{
          id: partID(),
          messageID: output.message.id,
          sessionID: output.message.sessionID || input.sessionID,
          type: "text",
          text: answer.context,
          synthetic: true,
        }})
      }}
    }},
    "tool.execute.before": async (input) => {{
      const answer = hook({{ event: "tool.execute.before", session_id: input.sessionID, tool: input.tool }})
      if (answer.block) throw new Error(answer.block)
    }},
    "tool.execute.after": async (input, output) => {{
      const canShow = !!(output && typeof output.output === "string")
      const answer = hook({{ event: "tool.execute.after", session_id: input.sessionID, tool: input.tool, subagent: await subagent(input.sessionID), context: canShow }})
      if (canShow && answer.context) output.output = output.output + "\n\n" + answer.context
    }},
    "shell.env": async (input, output) => {{
      if (input && input.sessionID && output && output.env) output.env.AGENTBUS_SESSION = input.sessionID
    }},
    event: async ({{ event }}) => {{
      if (!event || event.type !== "session.idle") return
      const id = event.properties && event.properties.sessionID
      if (!id) return
      const answer = hook({{ event: "session.idle", session_id: id, subagent: await subagent(id), stop_hook_active: continued.has(id) }})
      if (!answer.continue) return
      continued.add(id)
      prompting.add(id)
      // Not awaited: the prompt runs a whole turn, and this handler must not hold the bus.
      Promise.resolve()
        .then(() => client.session.prompt({{ path: {{ id }}, body: {{ parts: [{{ type: "text", text: NUDGE }}] }} }}))
        .catch(() => {{ prompting.delete(id) }})
    }},
  }}
}}
"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_commands_are_found_whatever_their_path_quoting_and_flags() {
        for program in ["/opt/agentbus", "/home/a b/it's/agentbus"] {
            for pre in [true, false] {
                let cmd = command(program, Harness::Codex, pre);
                assert!(is_ours(&cmd, Harness::Codex), "{cmd}");
                assert!(!is_ours(&cmd, Harness::Claude), "{cmd}");
                assert_eq!(program_of(&cmd), program, "{cmd}");
                assert_eq!(cmd.ends_with(NO_PRE_TOOL_CONTEXT), !pre);
            }
        }
        assert!(!is_ours("agentbus hook codex; rm -rf /", Harness::Codex));
        assert!(!is_ours("lint.sh hook codex", Harness::Codex));
    }

    #[test]
    fn a_binary_in_a_cargo_target_folder_is_a_build_directory() {
        let ws = tempfile::tempdir().unwrap();
        std::fs::write(ws.path().join("Cargo.toml"), "").unwrap();
        assert!(in_build_dir(&ws.path().join("target/debug/agentbus")));
        assert!(in_build_dir(
            &ws.path()
                .join("target/x86_64-unknown-linux-gnu/release/agentbus")
        ));
        assert!(!in_build_dir(&ws.path().join("bin/agentbus")));
        assert!(!in_build_dir(Path::new("/usr/local/target/agentbus")));
    }

    #[test]
    fn config_dirs_follow_the_harness_variables() {
        let home = Path::new("/home/u");
        let none = |_: &str| None;
        let set = |name: &str| {
            let v = match name {
                "CLAUDE_CONFIG_DIR" => "/cfg/claude",
                "CODEX_HOME" => "/cfg/codex",
                "XDG_CONFIG_HOME" => "/cfg/xdg",
                _ => return None,
            };
            Some(std::ffi::OsString::from(v))
        };
        let empty = |_: &str| Some(std::ffi::OsString::new());
        let cases = [
            (Harness::Claude, "/home/u/.claude", "/cfg/claude"),
            (Harness::Codex, "/home/u/.codex", "/cfg/codex"),
            (
                Harness::OpenCode,
                "/home/u/.config/opencode",
                "/cfg/xdg/opencode",
            ),
        ];
        for (harness, default, from_var) in cases {
            assert_eq!(config_dir(harness, home, none), Path::new(default));
            assert_eq!(config_dir(harness, home, empty), Path::new(default));
            assert_eq!(config_dir(harness, home, set), Path::new(from_var));
        }
        assert_eq!(
            default_path(Harness::Claude, home, set),
            Path::new("/cfg/claude/settings.json")
        );
    }
}
