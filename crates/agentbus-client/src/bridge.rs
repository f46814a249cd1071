//! The git share's bridge into local delivery: its messages imported into this machine's local
//! store, so each reaches a session through the harness hook like any peer message.
//!
//! It lives here because this crate already bridges a transport into `agentbus-local` (the
//! gateway's, in [`crate::receive`]) and may know both sides, where `agentbus-share` knows no
//! other transport and `agentbus-local` knows no git.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::PathBuf;

use agentbus_local::{ImportOutcome, InboundMessage as LocalInbound, Priority, Store};
use agentbus_protocol::frame::{Transport, Verified};
use agentbus_protocol::timestamp::Timestamp;
use agentbus_share::{Share, ShareError};

/// What [`import_share`] did.
#[derive(Debug, Default)]
pub struct ShareImport {
    /// One per file of this sync that was skipped or refused; the rest were imported.
    pub warnings: Vec<ImportWarning>,
    /// Per recipient, the messages that wait for room: its sessions have not been shown earlier
    /// ones yet (`ImportOutcome::Full`). A later import hands them over.
    pub waiting: BTreeMap<String, usize>,
}

/// A file that arrived and did not reach local delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImportWarning {
    /// It cannot be read or is unsafe (the share's reader said why).
    Skipped {
        /// The share-relative path.
        path: String,
        /// Why.
        error: String,
    },
    /// The local store refused it; the share still lists it.
    Refused {
        /// The file's path.
        path: PathBuf,
        /// Why.
        error: String,
    },
}

impl fmt::Display for ImportWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ImportWarning::Skipped { path, error } => write!(f, "skipped {path}: {error}"),
            ImportWarning::Refused { path, error } => write!(
                f,
                "not handed to local delivery {}: {error} (`agentbus share inbox` still lists it)",
                path.display()
            ),
        }
    }
}

/// Imports every message of `share` for this operator's agents into `store`, so each reaches a
/// session bound to its recipient (or the engineer's inbox) through the harness hook, once,
/// framed like any peer message. `arrived` are the share-relative paths a sync just brought
/// (`SyncReport::arrived`): a file among them that is skipped or refused is a warning (one that
/// arrived earlier was reported then). `now` stands for a message's missing `sent`.
///
/// The import is idempotent per (message id, recipient). A message the store refuses is skipped,
/// never the whole import; one it has no room for until the recipient's sessions are shown
/// earlier ones waits, with the recipient's later ones, for a later import. A clone that has not
/// joined has nothing to import.
pub fn import_share(
    share: &Share,
    store: &Store,
    arrived: &[String],
    now: Timestamp,
) -> Result<ShareImport, ShareError> {
    let inbound = match agentbus_share::inbound_messages(share) {
        Ok(i) => i,
        Err(ShareError::NotJoined) => return Ok(ShareImport::default()),
        Err(e) => return Err(e),
    };
    let arrived_paths: BTreeSet<PathBuf> = arrived.iter().map(|a| share.root().join(a)).collect();
    let mut waiting = BTreeMap::<String, usize>::new();
    let mut warnings: Vec<ImportWarning> = inbound
        .malformed
        .iter()
        .filter(|m| arrived.contains(&m.path))
        .map(|m| ImportWarning::Skipped {
            path: m.path.clone(),
            error: m.error.clone(),
        })
        .collect();
    for m in &inbound.messages {
        let local = LocalInbound {
            transport: Transport::Share,
            transport_id: m.transport_id(),
            from: m.from.clone(),
            kind: m.effective_kind.clone(),
            conversation: Some(m.thread.clone()),
            subject: m.subject.clone(),
            body: m.framed_body(),
            verified: Verified::Unsigned,
            attachments: Vec::new(),
            reply_command: Some(m.reply_command.clone()),
            sent: m.sent_at.unwrap_or(now),
            recipient: m.to.clone(),
            message_id: Some(m.id.clone()),
            task: None,
            late: false,
            expires_ms: None,
            held: None,
            // agentshare 0.1 has no priority: a share message counts as normal.
            priority: Priority::Normal,
        };
        // Behind one that found no room, a recipient's mail waits too: it goes in the order it
        // was sent.
        let outcome = (!waiting.contains_key(&m.to)).then(|| store.import(&local));
        match outcome {
            // The file stays in the share; a later import hands it over once there is room. Not
            // a warning: nothing is wrong, the sessions have mail to read first.
            None | Some(Ok(ImportOutcome::Full { .. })) => {
                *waiting.entry(m.to.clone()).or_default() += 1
            }
            Some(Ok(_)) => {}
            Some(Err(e)) if arrived_paths.contains(&m.path) => {
                warnings.push(ImportWarning::Refused {
                    path: m.path.clone(),
                    error: e.to_string(),
                })
            }
            Some(Err(_)) => {}
        }
    }
    Ok(ShareImport { warnings, waiting })
}

#[cfg(test)]
mod tests {
    //! On real repositories, as the share crate's own tests: a bare remote on disk, clones driven
    //! through `agentbus-share` with the `git` binary, and a local store in a temporary folder.

    use std::path::Path;
    use std::process::Command;
    use std::sync::{Arc, Once};

    use agentbus_local::Store;
    use agentbus_protocol::frame::Transport;
    use agentbus_runtime::{Clock, SystemClock};
    use agentbus_share::frontmatter::MessageType;
    use agentbus_share::{JoinRequest, SendRequest, Share, ShareAddress, WriteOptions};

    use super::*;

    /// A fixed git identity and home, so no test depends on the machine's git config.
    fn git_env() -> Vec<(String, String)> {
        let home = std::env::temp_dir().join("agentbus-client-test-home");
        std::fs::create_dir_all(&home).unwrap();
        [
            ("HOME", home.to_str().unwrap()),
            ("GIT_CONFIG_NOSYSTEM", "1"),
            ("GIT_CONFIG_GLOBAL", "/dev/null"),
            ("GIT_AUTHOR_NAME", "Test Author"),
            ("GIT_AUTHOR_EMAIL", "author@example.org"),
            ("GIT_COMMITTER_NAME", "Test Committer"),
            ("GIT_COMMITTER_EMAIL", "committer@example.org"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
    }

    #[track_caller]
    fn git(dir: &Path, args: &[&str]) {
        let out = Command::new("git")
            .current_dir(dir)
            .envs(git_env())
            .env("LC_ALL", "C")
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A share initialised into a bare remote under `tmp`, and a clone of it named `name`.
    fn clone(tmp: &Path, name: &str) -> Share {
        static ONCE: Once = Once::new();
        ONCE.call_once(|| {
            agentbus_share::git::set_base_env(git_env());
        });
        let remote = tmp.join("remote.git");
        if !remote.exists() {
            git(tmp, &["init", "--quiet", "--bare", "remote.git"]);
            agentbus_share::init::init(&tmp.join("admin"), Some(remote.to_str().unwrap())).unwrap();
        }
        git(tmp, &["clone", "--quiet", remote.to_str().unwrap(), name]);
        Share::open(&tmp.join(name)).unwrap()
    }

    fn member(tmp: &Path, name: &str, operator: &str, agents: &[&str]) -> Share {
        let share = clone(tmp, name);
        let join = JoinRequest {
            operator: operator.into(),
            instance: "fleet".into(),
            agents: agents.iter().map(|a| a.to_string()).collect(),
            emails: vec!["author@example.org".into()],
            sign: false,
        };
        share.join(&join, &WriteOptions::default()).unwrap();
        share
    }

    fn send(share: &Share, to: &str, body: &str) -> agentbus_share::Written {
        let to = ShareAddress::parse_with(to, true).unwrap();
        let req = SendRequest::new(vec![to], MessageType::Handoff, body);
        share.send(&req, &WriteOptions::default()).unwrap()
    }

    fn local_store(tmp: &Path) -> Store {
        Store::open(tmp.join("local"), Arc::new(SystemClock))
    }

    #[test]
    fn a_synced_share_message_reaches_the_local_store_once() {
        let tmp = tempfile::tempdir().unwrap();
        let a = member(tmp.path(), "a", "acme", &["reviewer"]);
        let b = member(tmp.path(), "b", "globex", &["architect"]);
        let w = send(
            &a,
            "globex/architect",
            "# Take over\n\nThe release branch is yours.\n",
        );
        let report = b.sync(&WriteOptions::default()).unwrap();
        assert!(report.arrived.contains(&w.paths[0]));
        let store = local_store(tmp.path());
        let now = SystemClock.now();

        let first = import_share(&b, &store, &report.arrived, now).unwrap();
        assert!(first.warnings.is_empty(), "{:?}", first.warnings);
        assert!(first.waiting.is_empty());
        let stored = store.read().unwrap();
        assert_eq!(stored.len(), 1);
        let via = stored[0].via.as_ref().unwrap();
        assert_eq!(via.transport, Transport::Share);
        assert_eq!(via.subject.as_deref(), Some("Take over"));
        assert!(stored[0].text.contains("The release branch is yours."));

        // Importing again (every sync does) stores nothing new.
        let again = import_share(&b, &store, &[], now).unwrap();
        assert!(again.warnings.is_empty());
        assert_eq!(store.read().unwrap().len(), 1);
    }

    #[test]
    fn an_unreadable_arrival_is_a_warning_and_the_rest_is_imported() {
        let tmp = tempfile::tempdir().unwrap();
        let a = member(tmp.path(), "a", "acme", &["reviewer"]);
        let w = send(&a, "acme/reviewer", "fine");
        let broken = "messages/acme/reviewer/20261130T120001Z-acme-reviewer-broken.md";
        std::fs::write(
            a.root().join(broken),
            "---\nto: { operator: *, agent: * }\n---\n",
        )
        .unwrap();
        git(a.root(), &["add", "-A"]);
        let store = local_store(tmp.path());
        let arrived = vec![w.paths[0].clone(), broken.to_owned()];

        let import = import_share(&a, &store, &arrived, SystemClock.now()).unwrap();
        assert_eq!(import.warnings.len(), 1, "{:?}", import.warnings);
        let ImportWarning::Skipped { path, .. } = &import.warnings[0] else {
            panic!("{:?}", import.warnings);
        };
        assert_eq!(path, broken);
        assert!(
            import.warnings[0]
                .to_string()
                .starts_with(&format!("skipped {broken}: "))
        );
        assert_eq!(store.read().unwrap().len(), 1);

        // A file that did not arrive now was reported when it did: no warning.
        let later = import_share(&a, &store, &[], SystemClock.now()).unwrap();
        assert!(later.warnings.is_empty());
    }

    #[test]
    fn a_clone_that_has_not_joined_imports_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let a = member(tmp.path(), "a", "acme", &["reviewer"]);
        send(&a, "acme/reviewer", "for a joined clone only");
        let outsider = clone(tmp.path(), "outsider");
        let store = local_store(tmp.path());
        let import = import_share(&outsider, &store, &[], SystemClock.now()).unwrap();
        assert!(import.warnings.is_empty() && import.waiting.is_empty());
        assert!(store.read().unwrap().is_empty());
    }
}
