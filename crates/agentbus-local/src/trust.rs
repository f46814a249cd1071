//! Codex's trust of our hook entries: reading it, and recording it when the user asks.
//!
//! Codex runs a hook from `hooks.json` only once it is trusted. Its `/hooks` review records, in
//! the user's `config.toml`, one table per hook entry:
//!
//! ```toml
//! [hooks.state."/home/u/.codex/hooks.json:pre_tool_use:0:1"]
//! trusted_hash = "sha256:…"
//! ```
//!
//! The key is the hooks file's path (its folder with symbolic links resolved), the event's
//! snake-case name, the group's index and the handler's index in that group. The hash is
//! Codex's `command_hook_hash` (codex-rs/hooks/src/engine/discovery.rs): the entry normalised
//! (no Windows command, the timeout defaulted to 600 and at least 1, the matcher dropped for
//! events that take none), passed through TOML (absent fields vanish), then JSON with every
//! object's keys sorted and no spaces, SHA-256 in hex. A changed entry (another program path, a
//! new timeout) has another hash, so Codex shows it as modified until it is trusted again.
//!
//! Only Codex's own user layer holds this state (project layers cannot trust their own hooks),
//! so trust is always written to `<CODEX_HOME>/config.toml`, also for a project's hooks file.
//! Nothing here runs unless the user asks (`agentbus hooks trust codex`, `hooks install codex
//! --trust`); `status` only reads.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::hook::Harness;
use crate::install::{Change, InstallError, is_ours};
use crate::store::StoreError;

/// Events whose entries keep their matcher in the hash; Codex drops it for the others
/// (`matcher_pattern_for_event`).
const MATCHER_EVENTS: [&str; 4] = [
    "PreToolUse",
    "PermissionRequest",
    "PostToolUse",
    "SessionStart",
];

/// The timeout Codex gives an entry without one, in seconds.
const DEFAULT_TIMEOUT_S: u64 = 600;

/// Why trust could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    /// The hooks file could not be read.
    #[error(transparent)]
    Install(#[from] InstallError),
    /// Codex's `config.toml` is not TOML, or its `hooks` or `hooks.state` is not a table; it is
    /// left alone.
    #[error("{}: {why}; fix it (Codex reads it too), then run this again", path.display())]
    Config {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
}

impl agentbus_protocol::errors::Catalogued for TrustError {
    fn code(&self) -> agentbus_protocol::Code {
        match self {
            TrustError::Install(e) => e.code(),
            TrustError::Config { .. } => agentbus_protocol::Code::CodexConfigUnreadable,
        }
    }
}

/// What Codex makes of one of our hook entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TrustStatus {
    /// Its recorded hash is its current one: Codex runs it.
    Trusted,
    /// No hash is recorded: Codex skips it.
    Untrusted,
    /// A hash of another version is recorded: Codex skips it until it is trusted again.
    Modified,
}

/// One of our entries in a Codex hooks file.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct HookTrust {
    /// Codex's key for it (`<hooks.json>:<event>:<group>:<handler>`).
    pub key: String,
    /// The event, as the hooks file names it.
    pub event: String,
    /// The hash Codex computes for it now.
    pub hash: String,
    /// Whether `config.toml` trusts that hash.
    pub status: TrustStatus,
    /// `false` when the user disabled the entry in Codex (`enabled = false`).
    pub enabled: bool,
}

/// Codex's user configuration file in its home folder (`$CODEX_HOME`, else `~/.codex`).
pub fn config_path(codex_home: &Path) -> PathBuf {
    codex_home.join("config.toml")
}

/// `PreToolUse` → `pre_tool_use`: the event label of Codex's keys and hashes.
fn snake(event: &str) -> String {
    let mut out = String::with_capacity(event.len() + 4);
    for (i, c) in event.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// The hash Codex computes for `handler` (a command entry) of `group` under `event`; `None`
/// when it is not a command entry Codex would run (no command, or a blank one).
pub fn entry_hash(event: &str, group: &Value, handler: &Value) -> Option<String> {
    if handler.get("type").and_then(Value::as_str) != Some("command") {
        return None;
    }
    let command = handler.get("command").and_then(Value::as_str)?;
    if command.trim().is_empty() {
        return None;
    }
    let mut h = Map::new();
    h.insert("type".into(), "command".into());
    h.insert("command".into(), command.into());
    let timeout = handler
        .get("timeout")
        .and_then(Value::as_u64)
        .unwrap_or(DEFAULT_TIMEOUT_S)
        .max(1);
    h.insert("timeout".into(), timeout.into());
    let asynchronous = handler
        .get("async")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    h.insert("async".into(), asynchronous.into());
    // Optional fields are kept only when set: TOML has no null, so Codex's identity drops them.
    for field in ["statusMessage", "additionalContextLimit"] {
        if let Some(v) = handler.get(field).filter(|v| !v.is_null()) {
            h.insert(field.into(), v.clone());
        }
    }
    let mut identity = Map::new();
    identity.insert("event_name".into(), snake(event).into());
    if MATCHER_EVENTS.contains(&event)
        && let Some(m) = group.get("matcher").and_then(Value::as_str)
    {
        identity.insert("matcher".into(), m.into());
    }
    identity.insert("hooks".into(), Value::Array(vec![Value::Object(h)]));
    let text = serde_json::to_string(&sorted(Value::Object(identity))).ok()?;
    Some(format!(
        "sha256:{}",
        hex::encode(Sha256::digest(text.as_bytes()))
    ))
}

/// `value` with every object's keys in byte order (the workspace's serde_json keeps insertion
/// order, and Codex hashes sorted keys).
fn sorted(value: Value) -> Value {
    match value {
        Value::Object(m) => {
            let mut entries: Vec<(String, Value)> = m.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(entries.into_iter().map(|(k, v)| (k, sorted(v))).collect())
        }
        Value::Array(a) => Value::Array(a.into_iter().map(sorted).collect()),
        v => v,
    }
}

/// The path Codex puts in its keys for `hooks_json`: the folder with symbolic links resolved,
/// as Codex resolves `CODEX_HOME`. A folder that does not exist is taken as written.
fn key_path(hooks_json: &Path) -> PathBuf {
    let (dir, name) = match (hooks_json.parent(), hooks_json.file_name()) {
        (Some(d), Some(n)) => (d, n),
        _ => return hooks_json.to_owned(),
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    fs::canonicalize(dir)
        .map(|d| d.join(name))
        .unwrap_or_else(|_| hooks_json.to_owned())
}

/// Our entries in the Codex hooks file `hooks_json`, each with its key and current hash (status
/// untrusted until [`status`] reads the config). None when the file is missing.
fn our_entries(hooks_json: &Path) -> Result<Vec<HookTrust>, TrustError> {
    let text = match fs::read_to_string(hooks_json) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(InstallError::from(StoreError::from_io(hooks_json, e)).into()),
    };
    let root: Value = serde_json::from_str(&text).map_err(|e| InstallError::NotJson {
        path: hooks_json.to_owned(),
        why: e.to_string(),
    })?;
    let source = key_path(hooks_json);
    let mut out = Vec::new();
    let Some(events) = root.get("hooks").and_then(Value::as_object) else {
        return Ok(out);
    };
    for (event, groups) in events {
        for (gi, group) in groups.as_array().into_iter().flatten().enumerate() {
            let handlers = group.get("hooks").and_then(Value::as_array);
            for (hi, handler) in handlers.into_iter().flatten().enumerate() {
                let ours = handler
                    .get("command")
                    .and_then(Value::as_str)
                    .is_some_and(|c| is_ours(c, Harness::Codex));
                let Some(hash) = entry_hash(event, group, handler).filter(|_| ours) else {
                    continue;
                };
                out.push(HookTrust {
                    key: format!("{}:{}:{gi}:{hi}", source.display(), snake(event)),
                    event: event.clone(),
                    hash,
                    status: TrustStatus::Untrusted,
                    enabled: true,
                });
            }
        }
    }
    Ok(out)
}

fn read_config(config: &Path) -> Result<toml_edit::DocumentMut, TrustError> {
    let text = match fs::read_to_string(config) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(InstallError::from(StoreError::from_io(config, e)).into()),
    };
    text.parse()
        .map_err(|e: toml_edit::TomlError| TrustError::Config {
            path: config.to_owned(),
            why: format!("not TOML ({})", e.message()),
        })
}

/// Our entries in `hooks_json` and whether Codex's `config` trusts each. Changes nothing.
pub fn status(hooks_json: &Path, config: &Path) -> Result<Vec<HookTrust>, TrustError> {
    let mut entries = our_entries(hooks_json)?;
    if entries.is_empty() {
        return Ok(entries);
    }
    let doc = read_config(config)?;
    let state = doc.get("hooks").and_then(|h| h.get("state"));
    for e in &mut entries {
        let recorded = state.and_then(|s| s.get(&e.key));
        e.enabled = recorded
            .and_then(|r| r.get("enabled"))
            .and_then(toml_edit::Item::as_bool)
            != Some(false);
        e.status = match recorded
            .and_then(|r| r.get("trusted_hash"))
            .and_then(toml_edit::Item::as_str)
        {
            Some(h) if h == e.hash => TrustStatus::Trusted,
            Some(_) => TrustStatus::Modified,
            None => TrustStatus::Untrusted,
        };
    }
    Ok(entries)
}

/// Records in `config` that Codex may run our entries of `hooks_json` as they are now, the way
/// its `/hooks` review does; other hooks, their state, comments and layout stay. Says whether
/// the file changed, with the entries (now trusted).
pub fn trust(hooks_json: &Path, config: &Path) -> Result<(Change, Vec<HookTrust>), TrustError> {
    use toml_edit::{Item, Table, value};

    let mut entries = status(hooks_json, config)?;
    if entries.iter().all(|e| e.status == TrustStatus::Trusted) {
        return Ok((Change::Unchanged, entries));
    }
    let mut doc = read_config(config)?;
    let not_table = |what: &str| TrustError::Config {
        path: config.to_owned(),
        why: format!("`{what}` is not a table"),
    };
    let implicit = || {
        let mut t = Table::new();
        // `[hooks.state."…"]` alone, without empty `[hooks]` and `[hooks.state]` headers.
        t.set_implicit(true);
        Item::Table(t)
    };
    let hooks = doc
        .entry("hooks")
        .or_insert_with(implicit)
        .as_table_like_mut()
        .ok_or_else(|| not_table("hooks"))?;
    let state = hooks
        .entry("state")
        .or_insert_with(implicit)
        .as_table_like_mut()
        .ok_or_else(|| not_table("hooks.state"))?;
    for e in &mut entries {
        if e.status == TrustStatus::Trusted {
            continue;
        }
        let slot = state
            .entry(&e.key)
            .or_insert_with(|| Item::Table(Table::new()));
        let Some(t) = slot.as_table_like_mut() else {
            return Err(not_table(&format!("hooks.state.\"{}\"", e.key)));
        };
        t.insert("trusted_hash", value(e.hash.as_str()));
        e.status = TrustStatus::Trusted;
    }
    write_atomic(config, &doc.to_string())?;
    Ok((Change::Changed, entries))
}

/// Writes through a temporary file and a rename, keeping the file's mode, so Codex never reads
/// half a file.
fn write_atomic(path: &Path, text: &str) -> Result<(), TrustError> {
    let io = |p: &Path| {
        let p = p.to_owned();
        move |e: io::Error| TrustError::from(InstallError::from(StoreError::from_io(&p, e)))
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        fs::create_dir_all(dir).map_err(io(dir))?;
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".agentbus-tmp");
    let tmp = PathBuf::from(tmp);
    fs::write(&tmp, text).map_err(io(&tmp))?;
    if let Ok(meta) = fs::metadata(path) {
        let _ = fs::set_permissions(&tmp, meta.permissions());
    }
    fs::rename(&tmp, path).map_err(io(path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    // Hashes reported by the app-server of Codex 0.169.0 (`hooks/list`, `currentHash`) for these
    // entries.
    #[test]
    fn hashes_are_codexs() {
        let cases = [
            (
                "PreToolUse",
                json!({}),
                json!({"type": "command", "command": "/usr/bin/agentbus hook codex", "timeout": 10}),
                "sha256:619c58e10c21b46899c3d079dd20f44f55c3da55bd946e8391952d7876076dd7",
            ),
            (
                "PreToolUse",
                json!({}),
                json!({"type": "command", "command": "echo hi"}),
                "sha256:c2ab198fe0750494126041254c4d031ad06f4b267edca02168d8a6745e4141c5",
            ),
            (
                "PostToolUse",
                json!({"matcher": "Bash"}),
                json!({"type": "command", "command": "/usr/bin/agentbus hook codex", "timeout": 10, "statusMessage": "x"}),
                "sha256:56b9abb3636ea1a242e926beafb0b0d424a6df279f4e4128f0bf3203cb31418b",
            ),
            (
                "SessionStart",
                json!({}),
                json!({"type": "command", "command": "/usr/bin/agentbus hook codex", "timeout": 10}),
                "sha256:feec82f6e2ff815c9190a9465ae553880bfd07c9237b50b588471a13477f96e6",
            ),
            (
                // The matcher of an event that takes none, the Windows command, a zero timeout
                // and a non-ASCII control-bearing command.
                "UserPromptSubmit",
                json!({"matcher": "zzz"}),
                json!({"type": "command", "command": "a'b \"c\" é\u{1}", "timeout": 0, "async": true,
                       "additionalContextLimit": 5, "commandWindows": "x.exe"}),
                "sha256:8a0bccf55437762a45ed473a5efc43deb97d020c67e723eccff5848769700ddd",
            ),
            (
                "Stop",
                json!({}),
                json!({"type": "command", "command": "s"}),
                "sha256:63fc69fb542a5d0940df0225d94ba51909d938cce7ef975e7e03666fdf14415f",
            ),
        ];
        for (event, group, handler, want) in cases {
            assert_eq!(
                entry_hash(event, &group, &handler).as_deref(),
                Some(want),
                "{event} {handler}"
            );
        }
        assert_eq!(
            entry_hash("Stop", &json!({}), &json!({"type": "prompt"})),
            None
        );
    }

    #[test]
    fn trust_is_recorded_only_for_our_entries_and_keeps_the_file() {
        let home = tempfile::tempdir().unwrap();
        let hooks = home.path().join("hooks.json");
        fs::write(
            &hooks,
            r#"{"hooks": {"PreToolUse": [{"hooks": [
                {"type": "command", "command": "lint.sh"},
                {"type": "command", "command": "/opt/agentbus hook codex", "timeout": 10}]}]}}"#,
        )
        .unwrap();
        let config = config_path(home.path());
        let before =
            "# mine\nmodel = \"m\" # a model\n\n[hooks.state.\"other\"]\nenabled = false\n";
        fs::write(&config, before).unwrap();
        let found = status(&hooks, &config).unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].status, TrustStatus::Untrusted);
        let dir = fs::canonicalize(home.path()).unwrap();
        assert_eq!(
            found[0].key,
            format!("{}:pre_tool_use:0:1", dir.join("hooks.json").display())
        );

        let (change, entries) = trust(&hooks, &config).unwrap();
        assert_eq!(change, Change::Changed);
        assert!(entries.iter().all(|e| e.status == TrustStatus::Trusted));
        let after = fs::read_to_string(&config).unwrap();
        assert!(after.starts_with(before), "{after}");
        assert!(
            after.contains(&format!(
                "[hooks.state.\"{}\"]\ntrusted_hash = \"{}\"",
                found[0].key, found[0].hash
            )),
            "{after}"
        );
        assert!(!after.contains("lint.sh"));
        assert_eq!(
            status(&hooks, &config).unwrap()[0].status,
            TrustStatus::Trusted
        );
        assert_eq!(trust(&hooks, &config).unwrap().0, Change::Unchanged);

        // Another program path is another hash: modified until trusted again.
        let text = fs::read_to_string(&hooks).unwrap();
        fs::write(&hooks, text.replace("/opt/agentbus", "/usr/bin/agentbus")).unwrap();
        assert_eq!(
            status(&hooks, &config).unwrap()[0].status,
            TrustStatus::Modified
        );
    }

    #[test]
    fn a_config_that_is_not_toml_is_left_alone() {
        let home = tempfile::tempdir().unwrap();
        let hooks = home.path().join("hooks.json");
        fs::write(
            &hooks,
            r#"{"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "agentbus hook codex"}]}]}}"#,
        )
        .unwrap();
        let config = config_path(home.path());
        for bad in ["model = ", "hooks = 3\n"] {
            fs::write(&config, bad).unwrap();
            assert!(matches!(
                trust(&hooks, &config),
                Err(TrustError::Config { .. })
            ));
            assert_eq!(fs::read_to_string(&config).unwrap(), bad);
        }
    }
}
