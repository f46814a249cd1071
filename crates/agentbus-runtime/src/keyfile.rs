//! Private key files: one line of base64url seed, mode 0600, refused when readable by others
//! (§3.3: `~/.agentbus/keys/<agent_id>.key`).

use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use agentbus_protocol::signing::{KeyError, SigningKey};

/// Why a key file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum KeyFileError {
    /// Reading or writing failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The failure.
        source: std::io::Error,
    },
    /// The file is readable or writable by group or others.
    #[error("{path} has mode {mode:o}; a private key file must be 0600 (run: chmod 600 {path})")]
    TooOpen {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The content is not a key.
    #[error("{path}: {source}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        source: KeyError,
    },
    /// Writing would replace an existing key.
    #[error("{0} already exists; refusing to overwrite a private key")]
    Exists(PathBuf),
}

impl agentbus_protocol::errors::Catalogued for KeyFileError {
    fn code(&self) -> agentbus_protocol::Code {
        agentbus_protocol::Code::KeyFileUnusable
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> KeyFileError + '_ {
    move |source| KeyFileError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Reads a key file, refusing one whose mode lets anyone but its owner read or write it.
pub fn read(path: &Path) -> Result<SigningKey, KeyFileError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = fs::metadata(path).map_err(io(path))?.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(KeyFileError::TooOpen {
                path: path.to_owned(),
                mode,
            });
        }
    }
    let text = fs::read_to_string(path).map_err(io(path))?;
    SigningKey::from_key_file(&text).map_err(|source| KeyFileError::Format {
        path: path.to_owned(),
        source,
    })
}

/// Reads a key file without the mode check, for keys passed explicitly on a command line.
pub fn read_any_mode(path: &Path) -> Result<SigningKey, KeyFileError> {
    let text = fs::read_to_string(path).map_err(io(path))?;
    SigningKey::from_key_file(&text).map_err(|source| KeyFileError::Format {
        path: path.to_owned(),
        source,
    })
}

/// Writes a new key file with mode 0600, creating parent folders (mode 0700); never overwrites.
pub fn write_new(path: &Path, key: &SigningKey) -> Result<(), KeyFileError> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::create_dir_all(parent).map_err(io(parent))?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let _ = fs::set_permissions(parent, fs::Permissions::from_mode(0o700));
        }
    }
    let mut opts = fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        opts.mode(0o600);
    }
    let mut f = opts.open(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            KeyFileError::Exists(path.to_owned())
        } else {
            io(path)(e)
        }
    })?;
    f.write_all(key.to_key_file().as_bytes())
        .map_err(io(path))?;
    f.sync_all().map_err(io(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wp_3_3_2_written_0600_and_refused_when_wider() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys/agt.key");
        let key = SigningKey::from_seed([5; 32]);
        write_new(&path, &key).unwrap();
        assert_eq!(read(&path).unwrap().seed(), key.seed());
        assert!(matches!(
            write_new(&path, &key),
            Err(KeyFileError::Exists(_))
        ));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600);
            fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
            assert!(matches!(
                read(&path),
                Err(KeyFileError::TooOpen { mode: 0o644, .. })
            ));
        }
    }
}
