//! Sessions known to this machine: presence records made at a session's first hook event
//! (G-LM-18, G-LM-20), their binding to an agent identity of another transport, and forgetting
//! them (LM: forget_session, LM-46).
//!
//! A session is bound to an agent identity (`agent://tenant/workspace/name` or
//! `share:<operator>/<agent>`) in one of two ways: the hook reads `AGENTBUS_AGENT` from its
//! environment at the session's first event, or `agentbus sessions bind <session> <agent>` sets
//! it later. An imported message goes to one of the sessions bound to its recipient (the first
//! to look, [`crate::deliver::identity_of`]), else to the engineer's inbox
//! ([`crate::deliver::for_engineer`]).

use std::fs::{self, OpenOptions};
use std::io::{self, Write as _};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::address::{is_agent_identity, is_session_id};
use crate::consts::NAME;
use crate::store::{Store, StoreError, entries, io_at, read_small, replace_file};

/// One session's presence record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Presence {
    /// The session id, from the harness's event.
    pub session: String,
    /// The harness (`claude`, `codex`, `opencode`).
    pub harness: String,
    /// When its first event reached the hook, in Unix milliseconds (LM-34: a broadcast reaches
    /// the sessions running when it was sent).
    pub started_ms: i64,
    /// A display name (`AGENTBUS_NAME` at the first event), used to address it by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The agent identity it is bound to, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
}

/// Why a session cannot be bound.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// No such session.
    #[error("no session {0} is known on this machine")]
    UnknownSession(String),
    /// Not an agent identity.
    #[error(
        "{0:?} is not an agent identity: use agent://<tenant>/<workspace>/<name> or share:<operator>/<agent>"
    )]
    BadAgent(String),
}

impl Store {
    fn sessions_dir(&self) -> PathBuf {
        self.dir().join("sessions")
    }

    fn presence_path(&self, session: &str) -> Result<PathBuf, StoreError> {
        if !is_session_id(session) {
            return Err(StoreError::BadSession(session.to_owned()));
        }
        Ok(self.sessions_dir().join(format!("{session}.json")))
    }

    /// The presence record of `session`, if it is known.
    pub fn presence(&self, session: &str) -> Result<Option<Presence>, StoreError> {
        let path = self.presence_path(session)?;
        Ok(read_small(&path)?.and_then(|t| serde_json::from_str(&t).ok()))
    }

    /// Records `session` at its first event, exclusively, so concurrent first events agree on one
    /// start. Returns the record that stands.
    pub fn register(
        &self,
        session: &str,
        harness: &str,
        name: Option<&str>,
        agent: Option<&str>,
    ) -> Result<Presence, StoreError> {
        let path = self.presence_path(session)?;
        let dir = self.sessions_dir();
        fs::create_dir_all(&dir).map_err(io_at(&dir))?;
        let record = Presence {
            session: session.to_owned(),
            harness: harness.to_owned(),
            started_ms: self.now(),
            name: name
                .filter(|n| n.chars().count() <= NAME && !n.chars().any(char::is_control))
                .map(str::to_owned),
            agent: agent.filter(|a| is_agent_identity(a)).map(str::to_owned),
        };
        match OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(mut f) => {
                let text = serde_json::to_string(&record).unwrap_or_default();
                f.write_all(text.as_bytes()).map_err(io_at(&path))?;
                Ok(record)
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                Ok(self.presence(session)?.unwrap_or(record))
            }
            Err(e) => Err(io_at(&path)(e)),
        }
    }

    /// Every session known on this machine, by start.
    pub fn sessions(&self) -> Result<Vec<Presence>, StoreError> {
        let mut out: Vec<Presence> = entries(&self.sessions_dir())?
            .into_iter()
            .map(|e| e.path())
            // Skip a binding's temporary file.
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .filter_map(|p| fs::read(p).ok())
            .filter_map(|b| serde_json::from_slice(&b).ok())
            .filter(|p: &Presence| is_session_id(&p.session))
            .collect();
        out.sort_by(|a, b| {
            a.started_ms
                .cmp(&b.started_ms)
                .then(a.session.cmp(&b.session))
        });
        Ok(out)
    }

    /// Binds `session` to the agent identity `agent` (or unbinds it with `None`), and moves the
    /// talk generation so the session's next hook looks at the log again.
    pub fn bind(&self, session: &str, agent: Option<&str>) -> Result<Presence, BindError> {
        if let Some(a) = agent.filter(|a| !is_agent_identity(a)) {
            return Err(BindError::BadAgent(a.to_owned()));
        }
        let mut record = self
            .presence(session)?
            .ok_or_else(|| BindError::UnknownSession(session.to_owned()))?;
        record.agent = agent.map(str::to_owned);
        let path = self.presence_path(session)?;
        replace_file(
            &path,
            serde_json::to_string(&record)
                .unwrap_or_default()
                .as_bytes(),
        )?;
        self.write_locked(|_| Ok::<_, StoreError>((Vec::new(), true, ())))?;
        Ok(record)
    }

    /// Forgets `session`: its presence, scanned stamp, count of continuations, delivery claims
    /// and offers out (LM-46, G-LM-10).
    pub fn forget(&self, session: &str) -> Result<bool, StoreError> {
        let path = self.presence_path(session)?;
        let existed = path.exists();
        let continued = self.dir().join("continued").join(session);
        for p in [path, self.scanned_path(session)?, continued] {
            match fs::remove_file(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_at(&p)(e)),
            }
        }
        // Its offers out first: an identity's claim they hold would otherwise stay taken.
        self.give_back_offers(session, None);
        for dir in [
            self.seen_path().join(session),
            self.dir().join("offers").join(session),
        ] {
            match fs::remove_dir_all(&dir) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_at(&dir)(e)),
            }
        }
        Ok(existed)
    }

    /// `<home>/messages/scanned/<session>`.
    pub(crate) fn scanned_path(&self, session: &str) -> Result<PathBuf, StoreError> {
        if !is_session_id(session) {
            return Err(StoreError::BadSession(session.to_owned()));
        }
        Ok(self.dir().join("scanned").join(session))
    }
}

/// Who a command runs as, as its environment says: inside a harness session it
/// is that session, never the engineer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// A harness session, by its id.
    Session {
        /// The session id.
        id: String,
        /// The harness, when the variable that named the session says which.
        harness: Option<&'static str>,
    },
    /// A harness marked the environment as its session's, without saying which session.
    UnknownSession {
        /// The harness.
        harness: &'static str,
    },
    /// No harness session: the engineer's own terminal.
    Engineer,
}

/// The variables that name the session a command runs in, in the order they are believed:
/// `AGENTBUS_SESSION` (what our hook exports through Claude Code's `CLAUDE_ENV_FILE` and
/// OpenCode's `shell.env`), then what each harness exports itself.
pub const SESSION_VARS: &[(&str, Option<&str>)] = &[
    ("AGENTBUS_SESSION", None),
    ("CLAUDE_CODE_SESSION_ID", Some("claude")),
    ("CODEX_THREAD_ID", Some("codex")),
    ("OPENCODE_SESSION_ID", Some("opencode")),
];

/// The variables by which a harness marks its sessions' commands without naming the session:
/// Claude Code's `CLAUDECODE=1`, OpenCode's `OPENCODE=1`, Codex's sandbox markers.
pub const HARNESS_MARKERS: &[(&str, &str)] = &[
    ("CLAUDECODE", "claude"),
    ("OPENCODE", "opencode"),
    ("CODEX_SANDBOX", "codex"),
    ("CODEX_SANDBOX_NETWORK_DISABLED", "codex"),
];

/// Who a command runs as, from its environment (`var` reads a variable; a parameter, so tests
/// pass their own). Empty values count as unset; a value that is not a session id marks a
/// session without naming it.
pub fn caller(var: impl Fn(&str) -> Option<String>) -> Caller {
    let set = |name: &str| var(name).filter(|v| !v.is_empty());
    for (name, harness) in SESSION_VARS {
        if let Some(v) = set(name) {
            if is_session_id(&v) {
                return Caller::Session {
                    id: v,
                    harness: *harness,
                };
            }
            return Caller::UnknownSession {
                harness: harness.unwrap_or("agentbus"),
            };
        }
    }
    HARNESS_MARKERS
        .iter()
        .find(|(name, _)| set(name).is_some())
        .map_or(Caller::Engineer, |(_, harness)| Caller::UnknownSession {
            harness,
        })
}

#[cfg(test)]
mod caller_tests {
    use super::*;

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn a_session_is_known_by_the_variable_that_names_it_and_never_taken_for_the_engineer() {
        let cases: &[(&[(&str, &str)], Caller)] = &[
            (&[], Caller::Engineer),
            (&[("AGENTBUS_SESSION", "")], Caller::Engineer),
            (
                &[("AGENTBUS_SESSION", "s1"), ("CODEX_THREAD_ID", "t9")],
                Caller::Session {
                    id: "s1".into(),
                    harness: None,
                },
            ),
            (
                &[("CODEX_THREAD_ID", "019d1afb-b2c7-72d3-b240-f3ee9d31b2c9")],
                Caller::Session {
                    id: "019d1afb-b2c7-72d3-b240-f3ee9d31b2c9".into(),
                    harness: Some("codex"),
                },
            ),
            (
                &[("CLAUDECODE", "1"), ("CLAUDE_CODE_SESSION_ID", "abc-123")],
                Caller::Session {
                    id: "abc-123".into(),
                    harness: Some("claude"),
                },
            ),
            (
                &[("CLAUDECODE", "1")],
                Caller::UnknownSession { harness: "claude" },
            ),
            (
                &[("OPENCODE", "1")],
                Caller::UnknownSession {
                    harness: "opencode",
                },
            ),
            (
                &[("CODEX_SANDBOX_NETWORK_DISABLED", "1")],
                Caller::UnknownSession { harness: "codex" },
            ),
            (
                &[("CODEX_THREAD_ID", "../../etc")],
                Caller::UnknownSession { harness: "codex" },
            ),
        ];
        for (vars, want) in cases {
            let vars: &'static [(&'static str, &'static str)] =
                Box::leak(vars.to_vec().into_boxed_slice());
            assert_eq!(&caller(env(vars)), want, "{vars:?}");
        }
    }
}
