//! The server's entry in each harness's MCP configuration (issue item 4): added idempotently,
//! and removed without touching any other server. The directories are the ones
//! `agentbus hooks install` uses ([`agentbus_local::install::config_dir`]), so
//! `CLAUDE_CONFIG_DIR`, `CODEX_HOME` and `XDG_CONFIG_HOME` are honoured alike.
//!
//! - Claude Code keeps user-scoped MCP servers in `~/.claude.json` (`$CLAUDE_CONFIG_DIR/.claude.json`
//!   when that is set), key `mcpServers`; a project's in `<project>/.mcp.json`.
//! - Codex: `$CODEX_HOME/config.toml` (else `~/.codex/config.toml`), table
//!   `[mcp_servers.agentbus]`; a project's `.codex/config.toml`. Edited in place with
//!   `toml_edit`, so the user's comments and layout stay.
//! - OpenCode: `$XDG_CONFIG_HOME/opencode/opencode.json` (else `~/.config/opencode/`), key `mcp`,
//!   a `local` server; a project's `opencode.json`.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use agentbus_local::hook::Harness;
use agentbus_local::install::{Change, config_dir};

/// The name of our server in every configuration.
pub const SERVER_NAME: &str = "agentbus";

/// What the configuration runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The agentbus binary.
    pub program: String,
    /// Its arguments (`mcp --harness <h>` and any options).
    pub args: Vec<String>,
    /// Environment variables the server needs (`AGENTBUS_HOME`, `AGENTBUS_PROFILE`).
    pub env: BTreeMap<String, String>,
}

/// Why a configuration could not be changed.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// Reading or writing the file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The failure.
        source: io::Error,
    },
    /// The file does not parse; it is left alone.
    #[error("{}: cannot be read as {format} ({why}); fix or move it, then run this again", path.display())]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// JSON or TOML.
        format: &'static str,
        /// The parse error.
        why: String,
    },
    /// A server named `agentbus` is there and does not run agentbus; it is left alone.
    #[error("{}: its MCP server {SERVER_NAME:?} does not run `agentbus mcp`; rename or remove it first", .0.display())]
    NotOurs(PathBuf),
}

impl agentbus_protocol::errors::Catalogued for InstallError {
    fn code(&self) -> agentbus_protocol::Code {
        use agentbus_protocol::Code;
        match self {
            InstallError::Io { .. } => Code::ConfigFileUnwritable,
            InstallError::Unreadable { .. } => Code::SettingsUnreadable,
            InstallError::NotOurs(_) => Code::NotOurs,
        }
    }
}

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> InstallError + '_ {
    move |source| InstallError::Io {
        path: path.to_owned(),
        source,
    }
}

/// The user-level MCP configuration file of `harness`. `var` reads the environment.
pub fn user_path(
    harness: Harness,
    home: &Path,
    var: impl Fn(&str) -> Option<std::ffi::OsString>,
) -> PathBuf {
    let claude_dir_set = var("CLAUDE_CONFIG_DIR").is_some_and(|v| !v.is_empty());
    let dir = config_dir(harness, home, var);
    match harness {
        // Claude Code's own state file sits beside ~/.claude, not in it, unless the variable
        // moves the whole configuration.
        Harness::Claude if claude_dir_set => dir.join(".claude.json"),
        Harness::Claude => home.join(".claude.json"),
        Harness::Codex => dir.join("config.toml"),
        Harness::OpenCode => dir.join("opencode.json"),
    }
}

/// The project-level MCP configuration file of `harness` in `project`.
pub fn project_path(harness: Harness, project: &Path) -> PathBuf {
    match harness {
        Harness::Claude => project.join(".mcp.json"),
        Harness::Codex => project.join(".codex").join("config.toml"),
        Harness::OpenCode => project.join("opencode.json"),
    }
}

/// Whether a configured command runs `agentbus mcp`, whatever path it is at.
fn runs_us(program: &str, args: &[&str]) -> bool {
    let name = Path::new(program)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    name.starts_with("agentbus") && args.first() == Some(&"mcp")
}

/// Adds (or updates) our server in the file at `path`.
pub fn install(harness: Harness, path: &Path, entry: &Entry) -> Result<Change, InstallError> {
    match harness {
        Harness::Codex => edit_toml(path, Some(entry)),
        Harness::Claude | Harness::OpenCode => edit_json(harness, path, Some(entry)),
    }
}

/// Removes our server from the file at `path`; every other server and setting stays.
pub fn uninstall(harness: Harness, path: &Path) -> Result<Change, InstallError> {
    if !path.exists() {
        return Ok(Change::Unchanged);
    }
    match harness {
        Harness::Codex => edit_toml(path, None),
        Harness::Claude | Harness::OpenCode => edit_json(harness, path, None),
    }
}

/// Our entry in Claude Code's and OpenCode's JSON shapes.
fn json_entry(harness: Harness, e: &Entry) -> Value {
    match harness {
        Harness::OpenCode => {
            let mut command = vec![e.program.clone()];
            command.extend(e.args.iter().cloned());
            let mut v = json!({"type": "local", "command": command, "enabled": true});
            if !e.env.is_empty() {
                v["environment"] = json!(e.env);
            }
            v
        }
        _ => json!({"type": "stdio", "command": e.program, "args": e.args, "env": e.env}),
    }
}

/// Whether a JSON entry runs `agentbus mcp`.
fn json_is_ours(harness: Harness, v: &Value) -> bool {
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str().map(str::to_owned))
            .collect()
    };
    match harness {
        Harness::OpenCode => {
            let command = strings(&v["command"]);
            let args: Vec<&str> = command.iter().skip(1).map(String::as_str).collect();
            command.first().is_some_and(|p| runs_us(p, &args))
        }
        _ => {
            let args = strings(&v["args"]);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            v["command"].as_str().is_some_and(|p| runs_us(p, &args))
        }
    }
}

fn edit_json(harness: Harness, path: &Path, entry: Option<&Entry>) -> Result<Change, InstallError> {
    let key = match harness {
        Harness::OpenCode => "mcp",
        _ => "mcpServers",
    };
    let mut root = read_json(path)?;
    let servers = root.entry(key).or_insert_with(|| Value::Object(Map::new()));
    if !servers.is_object() {
        return Err(InstallError::Unreadable {
            path: path.to_owned(),
            format: "JSON",
            why: format!("`{key}` is not an object"),
        });
    }
    let Some(servers) = servers.as_object_mut() else {
        return Ok(Change::Unchanged);
    };
    let existing = servers.get(SERVER_NAME);
    if existing.is_some_and(|v| !json_is_ours(harness, v)) {
        return Err(InstallError::NotOurs(path.to_owned()));
    }
    match entry {
        Some(e) => {
            let new = json_entry(harness, e);
            if existing == Some(&new) {
                return Ok(Change::Unchanged);
            }
            servers.insert(SERVER_NAME.into(), new);
            if harness == Harness::OpenCode && !root.contains_key("$schema") {
                root.insert("$schema".into(), json!("https://opencode.ai/config.json"));
            }
        }
        None => {
            if servers.remove(SERVER_NAME).is_none() {
                return Ok(Change::Unchanged);
            }
        }
    }
    let mut text = serde_json::to_string_pretty(&Value::Object(root)).unwrap_or_default();
    text.push('\n');
    write_atomic(path, &text)?;
    Ok(Change::Changed)
}

fn read_json(path: &Path) -> Result<Map<String, Value>, InstallError> {
    let text = match fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Map::new()),
        Err(e) => return Err(io_at(path)(e)),
    };
    if text.trim().is_empty() {
        return Ok(Map::new());
    }
    match serde_json::from_str::<Value>(&text) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(InstallError::Unreadable {
            path: path.to_owned(),
            format: "JSON",
            why: "not an object".into(),
        }),
        Err(e) => Err(InstallError::Unreadable {
            path: path.to_owned(),
            format: "JSON",
            why: e.to_string(),
        }),
    }
}

fn edit_toml(path: &Path, entry: Option<&Entry>) -> Result<Change, InstallError> {
    use toml_edit::{Array, DocumentMut, InlineTable, Item, Table, value};

    let text = match fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(io_at(path)(e)),
    };
    let mut doc: DocumentMut =
        text.parse()
            .map_err(|e: toml_edit::TomlError| InstallError::Unreadable {
                path: path.to_owned(),
                format: "TOML",
                why: e.message().to_owned(),
            })?;
    if doc.get("mcp_servers").is_some_and(|s| !s.is_table_like()) {
        return Err(InstallError::Unreadable {
            path: path.to_owned(),
            format: "TOML",
            why: "`mcp_servers` is not a table".into(),
        });
    }
    let existing = doc
        .get("mcp_servers")
        .and_then(|s| s.get(SERVER_NAME))
        .map(|t| {
            let program = t.get("command").and_then(Item::as_str).unwrap_or_default();
            let args: Vec<&str> = t
                .get("args")
                .and_then(Item::as_array)
                .map(|a| a.iter().filter_map(|v| v.as_str()).collect())
                .unwrap_or_default();
            (runs_us(program, &args), t.to_string())
        });
    if existing.as_ref().is_some_and(|(ours, _)| !ours) {
        return Err(InstallError::NotOurs(path.to_owned()));
    }
    match entry {
        Some(e) => {
            let mut t = Table::new();
            t.insert("command", value(e.program.as_str()));
            let mut args = Array::new();
            for a in &e.args {
                args.push(a.as_str());
            }
            t.insert("args", value(args));
            if !e.env.is_empty() {
                let mut env = InlineTable::new();
                for (k, v) in &e.env {
                    env.insert(k, v.as_str().into());
                }
                t.insert("env", value(env));
            }
            if existing.as_ref().map(|(_, s)| s.as_str()) == Some(t.to_string().as_str()) {
                return Ok(Change::Unchanged);
            }
            let servers = doc
                .entry("mcp_servers")
                .or_insert_with(|| {
                    let mut s = Table::new();
                    // `[mcp_servers.agentbus]` alone, without an empty `[mcp_servers]` header.
                    s.set_implicit(true);
                    Item::Table(s)
                })
                .as_table_like_mut();
            if let Some(servers) = servers {
                servers.insert(SERVER_NAME, Item::Table(t));
            }
        }
        None => {
            let removed = doc
                .get_mut("mcp_servers")
                .and_then(Item::as_table_like_mut)
                .and_then(|s| s.remove(SERVER_NAME));
            if removed.is_none() {
                return Ok(Change::Unchanged);
            }
            if doc
                .get("mcp_servers")
                .and_then(Item::as_table_like)
                .is_some_and(|s| s.is_empty())
            {
                doc.remove("mcp_servers");
            }
        }
    }
    write_atomic(path, &doc.to_string())?;
    Ok(Change::Changed)
}

/// Writes through a temporary file and a rename, so a harness never reads half a file.
fn write_atomic(path: &Path, text: &str) -> Result<(), InstallError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        fs::create_dir_all(dir).map_err(io_at(dir))?;
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".agentbus-tmp");
    let tmp = PathBuf::from(tmp);
    fs::write(&tmp, text).map_err(io_at(&tmp))?;
    // Claude Code's file holds its OAuth session: keep the mode the user's file had.
    if let Ok(meta) = fs::metadata(path) {
        let _ = fs::set_permissions(&tmp, meta.permissions());
    }
    fs::rename(&tmp, path).map_err(io_at(path))
}
