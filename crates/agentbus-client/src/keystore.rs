//! Where an agent's private keys live (§3.3): the OS keychain where there is one, otherwise files
//! of mode 0600 under `<home>/keys`.
//!
//! A profile records its [`KeyStoreKind`] when `connect` makes its key, and every later command
//! opens that same store through [`KeyStore`]: the current key, and a rotated-out key kept until it
//! is revoked. Nothing outside this module branches on the kind.
//!
//! - files: `<home>/keys/<agent_id>.key` and `<home>/keys/<agent_id>.<key_id>.key`
//!   ([`agentbus_runtime::keyfile`]: 0600, refused when wider);
//! - keychain: service `agentbus`, account `<agent_id>` and `<agent_id>.<key_id>` (the same names).
//!   The secret is the 32-byte seed as unpadded base64url, the key file's one line: the Secret
//!   Service of KDE Wallet keeps only UTF-8 secrets, so raw bytes could come back changed.
//!
//! `AGENTBUS_KEYSTORE` picks the store for a new key: `auto` (the default) uses the keychain when a
//! probe entry can be written, read back and deleted, else a file; `keychain` insists on it;
//! `file` never tries it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use keyring_core::{CredentialStore, Entry};
use serde::{Deserialize, Serialize};

use agentbus_protocol::signing::SigningKey;
use agentbus_runtime::{keyfile, random_bytes};

use crate::error::{ClientError, Result, io};

/// The environment variable that picks where a new key is stored: `auto`, `keychain` or `file`.
pub const KEYSTORE_ENV: &str = "AGENTBUS_KEYSTORE";

/// The keychain service every agentbus entry is filed under.
pub const SERVICE: &str = "agentbus";

/// Where a profile's keys live, as its profile records it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyStoreKind {
    /// Files of mode 0600 under `<home>/keys` (profiles saved before the keychain are this).
    #[default]
    File,
    /// The OS keychain.
    Keychain,
}

impl KeyStoreKind {
    /// `file` or `keychain`, as in the profile.
    pub fn as_str(self) -> &'static str {
        match self {
            KeyStoreKind::File => "file",
            KeyStoreKind::Keychain => "keychain",
        }
    }
}

/// What `AGENTBUS_KEYSTORE` asks for when a new key is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    /// The keychain when it works, else a file.
    Auto,
    /// The keychain, or an error.
    Keychain,
    /// A file.
    File,
}

impl Choice {
    /// Parses a value of `AGENTBUS_KEYSTORE` (empty means `auto`).
    pub fn parse(value: &str) -> Result<Choice> {
        match value.trim() {
            "" | "auto" => Ok(Choice::Auto),
            "keychain" => Ok(Choice::Keychain),
            "file" => Ok(Choice::File),
            other => Err(ClientError::Invalid(format!(
                "{KEYSTORE_ENV}={other:?} is not a key store: use auto, keychain or file"
            ))),
        }
    }

    /// The choice in the environment (`auto` when unset).
    pub fn from_env() -> Result<Choice> {
        Choice::parse(&std::env::var(KEYSTORE_ENV).unwrap_or_default())
    }
}

/// This machine's OS credential store: the Secret Service on Linux (an error without a session
/// D-Bus), the login keychain on macOS, the Credential Manager on Windows.
pub fn os_store() -> keyring_core::Result<Arc<CredentialStore>> {
    #[cfg(target_os = "linux")]
    let store = zbus_secret_service_keyring_store::Store::new();
    #[cfg(target_os = "macos")]
    let store = apple_native_keyring_store::keychain::Store::new();
    #[cfg(target_os = "windows")]
    let store = windows_native_keyring_store::Store::new();
    #[cfg(not(any(target_os = "linux", target_os = "macos", target_os = "windows")))]
    let store: keyring_core::Result<Arc<CredentialStore>> = Err(
        keyring_core::Error::NotSupportedByStore("no OS keychain on this platform".into()),
    );
    store.map(|s| s as Arc<CredentialStore>)
}

/// Writes, reads back and deletes a throwaway entry: a store that is absent, locked or changes
/// what it keeps fails here, before any key depends on it.
fn probe(store: &Arc<CredentialStore>) -> keyring_core::Result<()> {
    let user = format!("probe-{}", hex::encode(random_bytes::<8>()));
    let entry = Entry::new_in_store(store, SERVICE, &user)?;
    let secret = URL_SAFE_NO_PAD.encode(random_bytes::<32>());
    entry.set_secret(secret.as_bytes())?;
    let back = entry.get_secret();
    let deleted = entry.delete_credential();
    if back? != secret.as_bytes() {
        return Err(keyring_core::Error::BadStoreFormat(
            "a probe secret read back changed".into(),
        ));
    }
    deleted
}

/// The store of one profile's keys.
#[derive(Debug, Clone)]
pub struct KeyStore {
    backend: Backend,
}

#[derive(Debug, Clone)]
enum Backend {
    /// The keys folder.
    File(PathBuf),
    Keychain(Arc<CredentialStore>),
}

impl KeyStore {
    /// Key files in the folder `keys_dir`.
    pub fn file(keys_dir: impl Into<PathBuf>) -> KeyStore {
        KeyStore {
            backend: Backend::File(keys_dir.into()),
        }
    }

    /// Keys in the credential store `store`.
    pub fn keychain(store: Arc<CredentialStore>) -> KeyStore {
        KeyStore {
            backend: Backend::Keychain(store),
        }
    }

    /// The store for a new key as `choice` asks: `open` gives the OS store, which must pass a
    /// probe to be used. With [`Choice::Keychain`] an unusable keychain is an error.
    pub fn choose(
        choice: Choice,
        keys_dir: &Path,
        open: impl FnOnce() -> keyring_core::Result<Arc<CredentialStore>>,
    ) -> Result<KeyStore> {
        if choice == Choice::File {
            return Ok(KeyStore::file(keys_dir));
        }
        match open().and_then(|s| probe(&s).map(|()| s)) {
            Ok(store) => Ok(KeyStore::keychain(store)),
            Err(_) if choice == Choice::Auto => Ok(KeyStore::file(keys_dir)),
            Err(e) => Err(ClientError::KeychainUnavailable(e.to_string())),
        }
    }

    /// Which kind of store this is.
    pub fn kind(&self) -> KeyStoreKind {
        match self.backend {
            Backend::File(_) => KeyStoreKind::File,
            Backend::Keychain(_) => KeyStoreKind::Keychain,
        }
    }

    /// The file of the agent's current key, when keys are files.
    pub fn key_file(&self, agent_id: &str) -> Option<PathBuf> {
        match &self.backend {
            Backend::File(dir) => Some(dir.join(format!("{agent_id}.key"))),
            Backend::Keychain(_) => None,
        }
    }

    /// Where the agent's current key is, for people: a path, or the keychain entry.
    pub fn location(&self, agent_id: &str) -> String {
        match &self.backend {
            Backend::File(dir) => dir.join(format!("{agent_id}.key")).display().to_string(),
            Backend::Keychain(_) => {
                format!("the OS keychain (service {SERVICE}, account {agent_id})")
            }
        }
    }

    /// Saves a new agent's first key; never replaces one already there.
    pub fn save_new(&self, agent_id: &str, key: &SigningKey) -> Result<()> {
        self.create(agent_id, key)
    }

    /// Reads the agent's current key.
    pub fn read_current(&self, agent_id: &str) -> Result<SigningKey> {
        self.read(agent_id)
    }

    /// Makes `key` the agent's current key, replacing the one there in one step.
    pub fn replace_current(&self, agent_id: &str, key: &SigningKey) -> Result<()> {
        match &self.backend {
            Backend::File(dir) => {
                let current = dir.join(format!("{agent_id}.key"));
                let staged = dir.join(format!("{agent_id}.key.new"));
                let _ = std::fs::remove_file(&staged);
                keyfile::write_new(&staged, key)?;
                std::fs::rename(&staged, &current).map_err(io(&current))?;
                crate::profile::sync_dir(&current);
                Ok(())
            }
            Backend::Keychain(store) => set(store, agent_id, key),
        }
    }

    /// Keeps a rotated-out key until it is revoked (a copy already kept stays as it is).
    pub fn keep_retired(&self, agent_id: &str, key_id: &str, key: &SigningKey) -> Result<()> {
        match self.create(&retired(agent_id, key_id), key) {
            Err(ClientError::Key(keyfile::KeyFileError::Exists(_)))
            | Err(ClientError::KeychainKeyExists(_)) => Ok(()),
            other => other,
        }
    }

    /// Reads a rotated-out key kept until its revocation.
    pub fn read_retired(&self, agent_id: &str, key_id: &str) -> Result<SigningKey> {
        self.read(&retired(agent_id, key_id))
    }

    /// Deletes a rotated-out key (it was revoked); deleting one that is not there succeeds.
    pub fn delete_retired(&self, agent_id: &str, key_id: &str) -> Result<()> {
        let name = retired(agent_id, key_id);
        match &self.backend {
            Backend::File(dir) => {
                let path = dir.join(format!("{name}.key"));
                match std::fs::remove_file(&path) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io(&path)(e)),
                    _ => Ok(()),
                }
            }
            Backend::Keychain(store) => match entry(store, &name)?.delete_credential() {
                Ok(()) | Err(keyring_core::Error::NoEntry) => Ok(()),
                Err(e) => Err(keychain_error(&name, "delete", e)),
            },
        }
    }

    fn create(&self, name: &str, key: &SigningKey) -> Result<()> {
        match &self.backend {
            Backend::File(dir) => Ok(keyfile::write_new(&dir.join(format!("{name}.key")), key)?),
            Backend::Keychain(store) => match entry(store, name)?.get_secret() {
                Ok(_) => Err(ClientError::KeychainKeyExists(name.to_owned())),
                Err(keyring_core::Error::NoEntry) => set(store, name, key),
                Err(e) => Err(keychain_error(name, "read", e)),
            },
        }
    }

    fn read(&self, name: &str) -> Result<SigningKey> {
        match &self.backend {
            Backend::File(dir) => Ok(keyfile::read(&dir.join(format!("{name}.key")))?),
            Backend::Keychain(store) => {
                let secret = entry(store, name)?.get_secret().map_err(|e| match e {
                    keyring_core::Error::NoEntry => {
                        ClientError::KeychainKey(format!("{} holds no key", account(name)))
                    }
                    e => keychain_error(name, "read", e),
                })?;
                seed_of(&secret)
                    .map(SigningKey::from_seed)
                    .map_err(|why| ClientError::KeychainKey(format!("{}: {why}", account(name))))
            }
        }
    }
}

/// The name of a rotated-out key: `<agent_id>.<key_id>`, as file stem or keychain account.
fn retired(agent_id: &str, key_id: &str) -> String {
    format!("{agent_id}.{key_id}")
}

fn account(name: &str) -> String {
    format!("the OS keychain entry {SERVICE}/{name}")
}

fn entry(store: &Arc<CredentialStore>, name: &str) -> Result<Entry> {
    Entry::new_in_store(store, SERVICE, name).map_err(|e| keychain_error(name, "open", e))
}

fn set(store: &Arc<CredentialStore>, name: &str, key: &SigningKey) -> Result<()> {
    entry(store, name)?
        .set_secret(URL_SAFE_NO_PAD.encode(key.seed()).as_bytes())
        .map_err(|e| keychain_error(name, "write", e))
}

fn keychain_error(name: &str, action: &str, e: keyring_core::Error) -> ClientError {
    ClientError::Keychain(format!("cannot {action} {}: {e}", account(name)))
}

/// The seed a keychain secret holds: exactly 32 bytes as unpadded base64url.
fn seed_of(secret: &[u8]) -> std::result::Result<[u8; 32], String> {
    const WHAT: &str = "a 32-byte Ed25519 seed as base64url";
    let text = std::str::from_utf8(secret).map_err(|_| format!("not {WHAT}"))?;
    let bytes = URL_SAFE_NO_PAD
        .decode(text.trim())
        .map_err(|_| format!("not {WHAT}"))?;
    <[u8; 32]>::try_from(bytes.as_slice())
        .map_err(|_| format!("holds {} bytes, not {WHAT}", bytes.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// keyring-core's sample store, kept in `file` (it saves there when the last handle drops and
    /// loads from it when opened again, as another process would see it).
    fn sample(file: &Path) -> Arc<CredentialStore> {
        keyring_core::sample::Store::new_with_backing(file.to_str().unwrap()).unwrap()
    }

    fn unavailable() -> keyring_core::Result<Arc<CredentialStore>> {
        Err(keyring_core::Error::NoStorageAccess(
            "no session bus".into(),
        ))
    }

    const AGENT: &str = "agt_01J9ZK6Q8R2M3N4P5Q6R7S8T9V";

    fn files_in(dir: &Path) -> Vec<PathBuf> {
        std::fs::read_dir(dir)
            .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect())
            .unwrap_or_default()
    }

    #[test]
    fn wp_3_3_2_connect_keeps_the_key_in_a_working_keychain_and_writes_no_file() {
        let tmp = tempfile::tempdir().unwrap();
        let keys = tmp.path().join("keys");
        let backing = tmp.path().join("sample.ron");
        let key = SigningKey::from_seed(random_bytes());
        {
            let ks = KeyStore::choose(Choice::Auto, &keys, || Ok(sample(&backing))).unwrap();
            assert_eq!(ks.kind(), KeyStoreKind::Keychain);
            assert_eq!(ks.key_file(AGENT), None);
            ks.save_new(AGENT, &key).unwrap();
            assert!(matches!(
                ks.save_new(AGENT, &key),
                Err(ClientError::KeychainKeyExists(_))
            ));
        }
        // A later command opens the store again and reads the same key.
        let store = sample(&backing);
        let ks = KeyStore::keychain(store.clone());
        assert_eq!(ks.read_current(AGENT).unwrap().seed(), key.seed());
        assert!(files_in(&keys).is_empty(), "{:?}", files_in(&keys));
        // The probe left nothing behind: the key is the only entry.
        let all =
            Entry::search_in_store(&store, &[("service", ".*")].into_iter().collect()).unwrap();
        assert_eq!(all.len(), 1);
    }

    #[test]
    fn wp_3_3_2_an_unavailable_keychain_falls_back_to_a_0600_file_unless_required() {
        let tmp = tempfile::tempdir().unwrap();
        let keys = tmp.path().join("keys");
        let key = SigningKey::from_seed([9; 32]);
        let ks = KeyStore::choose(Choice::Auto, &keys, unavailable).unwrap();
        assert_eq!(ks.kind(), KeyStoreKind::File);
        ks.save_new(AGENT, &key).unwrap();
        let path = ks.key_file(AGENT).unwrap();
        assert_eq!(keyfile::read(&path).unwrap().seed(), key.seed());
        let err = KeyStore::choose(Choice::Keychain, &keys, unavailable).unwrap_err();
        assert!(
            matches!(&err, ClientError::KeychainUnavailable(c) if c.contains("no session bus")),
            "{err}"
        );
        // `file` never asks the keychain, even a working one.
        let ks = KeyStore::choose(Choice::File, &keys, || {
            Ok(sample(&tmp.path().join("s.ron")))
        })
        .unwrap();
        assert_eq!(ks.kind(), KeyStoreKind::File);
        assert_eq!(Choice::parse("").unwrap(), Choice::Auto);
        assert!(matches!(
            Choice::parse("vault"),
            Err(ClientError::Invalid(_))
        ));
    }

    #[test]
    fn wp_3_3_rotation_keeps_the_retired_key_until_revoke_deletes_it() {
        let tmp = tempfile::tempdir().unwrap();
        for ks in [
            KeyStore::keychain(sample(&tmp.path().join("s.ron"))),
            KeyStore::file(tmp.path().join("keys")),
        ] {
            let old = SigningKey::from_seed([1; 32]);
            let new = SigningKey::from_seed([2; 32]);
            ks.save_new(AGENT, &old).unwrap();
            ks.keep_retired(AGENT, "key_OLD", &old).unwrap();
            ks.keep_retired(AGENT, "key_OLD", &old).unwrap();
            ks.replace_current(AGENT, &new).unwrap();
            assert_eq!(ks.read_current(AGENT).unwrap().seed(), new.seed());
            assert_eq!(
                ks.read_retired(AGENT, "key_OLD").unwrap().seed(),
                old.seed()
            );
            ks.delete_retired(AGENT, "key_OLD").unwrap();
            assert!(
                ks.read_retired(AGENT, "key_OLD").is_err(),
                "{:?}",
                ks.kind()
            );
            ks.delete_retired(AGENT, "key_OLD").unwrap();
            assert_eq!(ks.read_current(AGENT).unwrap().seed(), new.seed());
        }
        assert!(
            !tmp.path()
                .join("keys")
                .join(format!("{AGENT}.key.new"))
                .exists()
        );
    }

    #[test]
    fn a_keychain_secret_that_is_not_a_32_byte_seed_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let store = sample(&tmp.path().join("s.ron"));
        let ks = KeyStore::keychain(store.clone());
        let put = |s: &[u8]| {
            Entry::new_in_store(&store, SERVICE, AGENT)
                .unwrap()
                .set_secret(s)
                .unwrap()
        };
        put(URL_SAFE_NO_PAD.encode([7u8; 31]).as_bytes());
        let err = ks.read_current(AGENT).unwrap_err();
        assert!(
            matches!(&err, ClientError::KeychainKey(m) if m.contains("holds 31 bytes")),
            "{err}"
        );
        put(&[7u8; 32]);
        assert!(matches!(
            ks.read_current(AGENT),
            Err(ClientError::KeychainKey(_))
        ));
        put(URL_SAFE_NO_PAD.encode([7u8; 32]).as_bytes());
        assert_eq!(ks.read_current(AGENT).unwrap().seed(), [7u8; 32]);
        assert!(matches!(
            KeyStore::keychain(store).read_current("agt_OTHER"),
            Err(ClientError::KeychainKey(m)) if m.contains("holds no key")
        ));
    }
}
