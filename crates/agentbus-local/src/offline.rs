//! OpenCode's start-up without the npm registry.
//!
//! OpenCode treats a configuration folder holding a plugin (`plugins/*.js`) as one whose
//! dependencies it must install: at start-up it runs npm (Arborist) there, adding
//! `@opencode-ai/plugin` at its own version, and loads the folder's plugins only once that
//! install ends (packages/opencode/src/config, `Npm.install`). With the registry unreachable the
//! install fails after its retries (about 70 s for a refused connection) and hangs for as long as
//! a connection does (a firewall that drops packets): the session starts late or never.
//!
//! The install is skipped when the folder already has `node_modules/` and a `package-lock.json`
//! whose root lists every declared dependency (`@opencode-ai/plugin` among them). Our plugin
//! imports only Node's own modules, so [`prepare`] writes exactly that: an empty `node_modules/`
//! and a lock naming the package, in a folder that has none of these yet and no other plugin or
//! tool (which might import the package at run time). A folder the user set up is left alone;
//! [`needs_registry`] says whether OpenCode would then go to the registry.

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::install::Change;
use crate::store::{StoreError, io_at, write_file};

/// The package OpenCode adds to every configuration folder with plugins.
pub const PLUGIN_PACKAGE: &str = "@opencode-ai/plugin";

/// The lock [`prepare`] writes (its `name` tells [`unprepare`] it is ours).
fn our_lock() -> Value {
    json!({
        "name": "agentbus-opencode-offline",
        "lockfileVersion": 3,
        "requires": true,
        "packages": {"": {"dependencies": {PLUGIN_PACKAGE: "*"}}}
    })
}

/// The OpenCode configuration folder a plugin file at `plugin` belongs to: the folder above its
/// `plugins/` (or `plugin/`) folder; `None` for a file elsewhere.
pub fn config_folder(plugin: &Path) -> Option<PathBuf> {
    let dir = plugin.parent()?;
    let name = dir.file_name()?.to_str()?;
    (name == "plugins" || name == "plugin").then(|| dir.parent().map(Path::to_owned))?
}

fn read_json(path: &Path) -> Option<Value> {
    fs::read_to_string(path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
}

/// The dependency names a manifest's (or a lock root's) dependency tables declare.
fn names_in(v: Option<&Value>) -> Vec<String> {
    [
        "dependencies",
        "devDependencies",
        "peerDependencies",
        "optionalDependencies",
    ]
    .iter()
    .filter_map(|t| v.and_then(|v| v.get(t)).and_then(Value::as_object))
    .flat_map(|m| m.keys().cloned())
    .collect()
}

/// Whether OpenCode, starting with `folder` as a configuration folder that has plugins, would
/// run npm there (the check of `Npm.install`): no `node_modules/`, or a declared dependency (its
/// own package included) that the lock's root does not list.
pub fn needs_registry(folder: &Path) -> bool {
    if !folder.join("node_modules").is_dir() {
        return true;
    }
    let mut declared = names_in(read_json(&folder.join("package.json")).as_ref());
    declared.push(PLUGIN_PACKAGE.to_owned());
    let lock = read_json(&folder.join("package-lock.json"));
    let locked = names_in(lock.as_ref().and_then(|l| l.pointer("/packages/")));
    match lock {
        Some(_) => declared.iter().any(|d| !locked.contains(d)),
        // Newer versions accept a folder without a lock whose packages are all installed.
        None => declared
            .iter()
            .any(|d| !folder.join("node_modules").join(d).exists()),
    }
}

/// The files of `folder/<sub>` other than `ours`.
fn others_in(folder: &Path, subs: &[&str], ours: &Path) -> Vec<PathBuf> {
    subs.iter()
        .filter_map(|s| fs::read_dir(folder.join(s)).ok())
        .flatten()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p != ours)
        .collect()
}

/// What [`prepare`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prepared {
    /// The folder now starts without the registry (`Changed` when this call wrote it).
    Offline(Change),
    /// The folder is the user's setup (a manifest, a lock, installed packages, another plugin):
    /// left alone; OpenCode goes to the registry at start-up, for the reason given.
    LeftAlone(String),
}

/// Makes OpenCode's start-up with our plugin at `plugin` need no registry, when the folder holds
/// nothing of the user's that this would change (see the module's text).
pub fn prepare(plugin: &Path) -> Result<Prepared, StoreError> {
    let Some(folder) = config_folder(plugin) else {
        return Ok(Prepared::LeftAlone(format!(
            "{} is not in an OpenCode plugins folder",
            plugin.display()
        )));
    };
    if !needs_registry(&folder) {
        return Ok(Prepared::Offline(Change::Unchanged));
    }
    let user_files: Vec<&str> = ["node_modules", "package.json", "package-lock.json"]
        .into_iter()
        .filter(|f| folder.join(f).exists())
        .collect();
    if !user_files.is_empty() {
        return Ok(Prepared::LeftAlone(format!(
            "{} has its own {}",
            folder.display(),
            user_files.join(", ")
        )));
    }
    let others = others_in(&folder, &["plugin", "plugins", "tool", "tools"], plugin);
    if let Some(other) = others.first() {
        return Ok(Prepared::LeftAlone(format!(
            "{} may need {PLUGIN_PACKAGE} installed",
            other.display()
        )));
    }
    let modules = folder.join("node_modules");
    fs::create_dir_all(&modules).map_err(io_at(&modules))?;
    let lock = folder.join("package-lock.json");
    let mut text = serde_json::to_string_pretty(&our_lock()).unwrap_or_default();
    text.push('\n');
    write_file(&lock, text.as_bytes())?;
    Ok(Prepared::Offline(Change::Changed))
}

/// Removes what [`prepare`] wrote for the plugin at `plugin`: the lock if it is still ours, and
/// `node_modules/` if it is still empty.
pub fn unprepare(plugin: &Path) -> Result<Change, StoreError> {
    let Some(folder) = config_folder(plugin) else {
        return Ok(Change::Unchanged);
    };
    let lock = folder.join("package-lock.json");
    if read_json(&lock).as_ref() != Some(&our_lock()) {
        return Ok(Change::Unchanged);
    }
    fs::remove_file(&lock).map_err(io_at(&lock))?;
    let modules = folder.join("node_modules");
    // It fails when not empty (something was installed since) or gone: then it is not ours.
    let _ = fs::remove_dir(&modules);
    Ok(Change::Changed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folder_with_plugin() -> (tempfile::TempDir, PathBuf) {
        let t = tempfile::tempdir().unwrap();
        let plugin = t.path().join("plugins").join("agentbus.js");
        fs::create_dir_all(plugin.parent().unwrap()).unwrap();
        fs::write(&plugin, "// ours").unwrap();
        (t, plugin)
    }

    #[test]
    fn a_fresh_folder_is_made_to_start_offline_and_restored() {
        let (t, plugin) = folder_with_plugin();
        assert!(needs_registry(t.path()));
        assert_eq!(
            prepare(&plugin).unwrap(),
            Prepared::Offline(Change::Changed)
        );
        assert!(!needs_registry(t.path()));
        assert!(t.path().join("node_modules").is_dir());
        assert_eq!(
            prepare(&plugin).unwrap(),
            Prepared::Offline(Change::Unchanged)
        );
        assert_eq!(unprepare(&plugin).unwrap(), Change::Changed);
        assert!(!t.path().join("package-lock.json").exists());
        assert!(!t.path().join("node_modules").exists());
        assert_eq!(unprepare(&plugin).unwrap(), Change::Unchanged);
    }

    #[test]
    fn a_users_setup_is_left_alone() {
        // Their manifest, with a dependency the registry must bring.
        let (t, plugin) = folder_with_plugin();
        fs::write(
            t.path().join("package.json"),
            r#"{"dependencies": {"left-pad": "1"}}"#,
        )
        .unwrap();
        assert!(matches!(prepare(&plugin).unwrap(), Prepared::LeftAlone(_)));
        assert!(!t.path().join("package-lock.json").exists());
        // Another plugin, which may import the package at run time.
        let (t, plugin) = folder_with_plugin();
        fs::write(t.path().join("plugins").join("theirs.ts"), "").unwrap();
        assert!(matches!(prepare(&plugin).unwrap(), Prepared::LeftAlone(_)));
        assert!(!t.path().join("node_modules").exists());
        // A lock of theirs is not removed.
        let (t, plugin) = folder_with_plugin();
        fs::write(t.path().join("package-lock.json"), "{}").unwrap();
        assert_eq!(unprepare(&plugin).unwrap(), Change::Unchanged);
        assert!(t.path().join("package-lock.json").exists());
    }

    #[test]
    fn an_installed_folder_needs_no_registry() {
        let t = tempfile::tempdir().unwrap();
        fs::create_dir_all(t.path().join("node_modules/@opencode-ai/plugin")).unwrap();
        fs::write(
            t.path().join("package.json"),
            r#"{"dependencies": {"@opencode-ai/plugin": "1.18.33"}}"#,
        )
        .unwrap();
        assert!(!needs_registry(t.path()));
        fs::write(
            t.path().join("package-lock.json"),
            r#"{"packages": {"": {"dependencies": {}}}}"#,
        )
        .unwrap();
        assert!(needs_registry(t.path()), "the lock does not list it");
    }

    #[test]
    fn only_a_plugins_folder_has_a_config_folder() {
        assert_eq!(
            config_folder(Path::new("/c/opencode/plugins/agentbus.js")),
            Some(PathBuf::from("/c/opencode"))
        );
        assert_eq!(config_folder(Path::new("/c/agentbus.js")), None);
    }
}
