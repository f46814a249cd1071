//! Saved connections. Each agent on this machine is a profile: its gateway, identity, credential
//! and current key. Profiles live in `<home>/profiles/<name>.json` (mode 0600: they hold the
//! agent's credential); private keys in the OS keychain or in `<home>/keys/<agent_id>.key` (mode
//! 0600, refused when wider, §3.3), as the profile's `key_store` says (see [`crate::keystore`]).
//! `<home>` is `$AGENTBUS_HOME`, else `~/.agentbus`, the local store's home.

use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use agentbus_protocol::signing::SigningKey;

use crate::error::{ClientError, Result, io};
use crate::keystore::{Choice, KeyStore, KeyStoreKind, os_store};

/// The environment variable that picks a profile when `--profile` is not given.
pub const PROFILE_ENV: &str = "AGENTBUS_PROFILE";

/// One agent's saved connection.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Profile {
    /// The profile's name (by default the agent's name).
    pub name: String,
    /// The gateway's base URL, without a trailing slash.
    pub gateway: String,
    /// The agent's `agt_` id.
    pub agent_id: String,
    /// The agent's address, `agent://tenant/workspace/name`.
    pub address: String,
    /// The agent credential (`aba_…`).
    pub token: String,
    /// The id of the key this agent signs with.
    pub key_id: String,
    /// Where its private keys live (`file` in profiles saved before there was a choice).
    #[serde(default)]
    pub key_store: KeyStoreKind,
}

/// The state directory: `$AGENTBUS_HOME`, else `~/.agentbus`.
pub fn home() -> Result<PathBuf> {
    agentbus_local::Store::default_home().map_err(|_| ClientError::NoHome)
}

/// Profiles, keys and agent folders under one home.
#[derive(Debug, Clone)]
pub struct Profiles {
    home: PathBuf,
}

fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && !s.starts_with('.')
}

impl Profiles {
    /// Profiles under `home`.
    pub fn new(home: impl Into<PathBuf>) -> Profiles {
        Profiles { home: home.into() }
    }

    /// Profiles under the default home.
    pub fn open_default() -> Result<Profiles> {
        Ok(Profiles::new(home()?))
    }

    /// The home directory.
    pub fn home(&self) -> &Path {
        &self.home
    }

    fn dir(&self) -> PathBuf {
        self.home.join("profiles")
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir().join(format!("{name}.json"))
    }

    /// The folder of key files.
    fn keys_dir(&self) -> PathBuf {
        self.home.join("keys")
    }

    /// Where `profile`'s keys live. A keychain profile needs the OS keychain reachable.
    pub fn key_store(&self, profile: &Profile) -> Result<KeyStore> {
        match profile.key_store {
            KeyStoreKind::File => Ok(KeyStore::file(self.keys_dir())),
            KeyStoreKind::Keychain => os_store().map(KeyStore::keychain).map_err(|e| {
                ClientError::Keychain(format!(
                    "profile {} keeps its key in the OS keychain, which cannot be opened: {e}",
                    profile.name
                ))
            }),
        }
    }

    /// Where a new agent's key goes, as `$AGENTBUS_KEYSTORE` asks (see [`Choice`]).
    pub fn new_key_store(&self) -> Result<KeyStore> {
        self.key_store_for(Choice::from_env()?)
    }

    /// Where a new agent's key goes, as `choice` asks.
    pub fn key_store_for(&self, choice: Choice) -> Result<KeyStore> {
        KeyStore::choose(choice, &self.keys_dir(), os_store)
    }

    /// An agent's state folder: its inbox, cursor and attachments.
    pub fn agent_dir(&self, agent_id: &str) -> PathBuf {
        self.home.join("agents").join(agent_id)
    }

    /// Every saved profile's name, sorted.
    pub fn names(&self) -> Result<Vec<String>> {
        let dir = self.dir();
        let mut names: Vec<String> = entries_of(&dir)?
            .into_iter()
            .filter_map(|e| {
                e.file_name()
                    .to_str()
                    .and_then(|n| n.strip_suffix(".json"))
                    .map(str::to_owned)
            })
            .filter(|n| is_name(n))
            .collect();
        names.sort();
        Ok(names)
    }

    /// Loads profile `name`.
    pub fn load(&self, name: &str) -> Result<Profile> {
        if !is_name(name) {
            return Err(ClientError::NoProfile(name.to_owned()));
        }
        let path = self.path(name);
        let text = match fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(ClientError::NoProfile(name.to_owned()));
            }
            Err(e) => return Err(io(&path)(e)),
        };
        serde_json::from_str(&text)
            .map_err(|e| ClientError::Invalid(format!("{}: {e}", path.display())))
    }

    /// The profile chosen by `explicit` (a flag), else `$AGENTBUS_PROFILE`, else the only one.
    pub fn select(&self, explicit: Option<&str>) -> Result<Profile> {
        let env = std::env::var(PROFILE_ENV).ok().filter(|s| !s.is_empty());
        if let Some(name) = explicit.map(str::to_owned).or(env) {
            return self.load(&name);
        }
        let names = self.names()?;
        match names.as_slice() {
            [] => Err(ClientError::NoProfile(String::new())),
            [one] => self.load(one),
            many => Err(ClientError::AmbiguousProfile(many.join(", "))),
        }
    }

    /// Saves `profile` (mode 0600, replaced atomically).
    pub fn save(&self, profile: &Profile) -> Result<PathBuf> {
        if !is_name(&profile.name) {
            return Err(ClientError::Invalid(format!(
                "{:?} is not a profile name (letters, digits, '-', '_', '.')",
                profile.name
            )));
        }
        let dir = self.dir();
        create_private_dir(&dir)?;
        let path = self.path(&profile.name);
        let text = serde_json::to_string_pretty(profile).unwrap_or_default();
        write_private_atomic(&path, text.as_bytes())?;
        Ok(path)
    }

    /// Reads `profile`'s current private key from its store (a file's mode 0600 enforced).
    pub fn read_key(&self, profile: &Profile) -> Result<SigningKey> {
        self.key_store(profile)?.read_current(&profile.agent_id)
    }
}

/// Creates `dir` (and parents) with mode 0700 where it is new.
pub fn create_private_dir(dir: &Path) -> Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt as _;
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(io(dir))
    }
    #[cfg(not(unix))]
    {
        fs::create_dir_all(dir).map_err(io(dir))
    }
}

/// The entries of `dir` (unreadable ones skipped), none when it does not exist.
pub(crate) fn entries_of(dir: &Path) -> Result<Vec<fs::DirEntry>> {
    match fs::read_dir(dir) {
        Ok(e) => Ok(e.filter_map(|e| e.ok()).collect()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(io(dir)(e)),
    }
}

/// Writes `bytes` to `path` through a temporary file, fsynced and renamed, with mode 0600.
pub fn write_private_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    {
        let mut opts = fs::OpenOptions::new();
        opts.write(true).create(true).truncate(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt as _;
            opts.mode(0o600);
        }
        let mut f = opts.open(&tmp).map_err(io(&tmp))?;
        f.write_all(bytes).map_err(io(&tmp))?;
        f.sync_all().map_err(io(&tmp))?;
    }
    fs::rename(&tmp, path).map_err(io(path))?;
    sync_dir(path);
    Ok(())
}

/// Fsyncs the folder holding `path`, so a rename or link in it is durable.
pub fn sync_dir(path: &Path) {
    if let Some(parent) = path.parent()
        && let Ok(d) = fs::File::open(parent)
    {
        let _ = d.sync_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(name: &str) -> Profile {
        Profile {
            name: name.to_owned(),
            gateway: "http://127.0.0.1:7700".to_owned(),
            agent_id: "agt_01J9ZK6Q8R2M3N4P5Q6R7S8T9V".to_owned(),
            address: "agent://default/default/bot".to_owned(),
            token: "aba_x".to_owned(),
            key_id: "key_01J9ZK6Q8R2M3N4P5Q6R7S8T9V".to_owned(),
            key_store: KeyStoreKind::File,
        }
    }

    #[test]
    fn profiles_are_selected_by_name_or_when_alone() {
        let tmp = tempfile::tempdir().unwrap();
        let p = Profiles::new(tmp.path());
        assert!(matches!(
            p.select(Some("x")),
            Err(ClientError::NoProfile(_))
        ));
        p.save(&profile("one")).unwrap();
        assert_eq!(p.select(None).unwrap().name, "one");
        p.save(&profile("two")).unwrap();
        assert!(matches!(
            p.select(None),
            Err(ClientError::AmbiguousProfile(_))
        ));
        assert_eq!(p.select(Some("two")).unwrap().name, "two");
        assert!(p.load("../etc").is_err());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = fs::metadata(p.path("one")).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "a profile holds a credential");
        }
    }

    #[test]
    fn a_profile_saved_before_the_keychain_keeps_its_keys_in_files() {
        let tmp = tempfile::tempdir().unwrap();
        let p = Profiles::new(tmp.path());
        let mut old = serde_json::to_value(profile("old")).unwrap();
        old.as_object_mut().unwrap().remove("key_store");
        create_private_dir(&p.dir()).unwrap();
        fs::write(p.path("old"), old.to_string()).unwrap();
        let loaded = p.load("old").unwrap();
        assert_eq!(loaded.key_store, KeyStoreKind::File);
        assert_eq!(
            p.key_store(&loaded).unwrap().key_file(&loaded.agent_id),
            Some(
                tmp.path()
                    .join("keys")
                    .join(format!("{}.key", loaded.agent_id))
            )
        );
        let mut chain = profile("chain");
        chain.key_store = KeyStoreKind::Keychain;
        let text = serde_json::to_value(&chain).unwrap();
        assert_eq!(text["key_store"], "keychain");
    }
}
