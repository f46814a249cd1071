//! Integration tests of the git share transport, on real repositories: a bare remote on disk and
//! several clones, driven through the library with the `git` binary. One module per area; every
//! MUST of agentshare 0.1 §1–§9 has its own test named after its checklist id (`as_3_2_…`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::new_without_default)]

mod check;
mod concurrency;
mod doctor;
mod format;
mod inbound;
mod init;
mod replay;
mod search;
mod writes;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Once};

use agentbus_protocol::timestamp::Timestamp;
use agentbus_runtime::ManualClock;
use agentbus_share::frontmatter::MessageType;
use agentbus_share::{JoinRequest, SendRequest, Share, ShareAddress, WriteOptions, Written};

/// The crate's `tests/data` folder.
pub fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data")
}

/// The fixed git identity and home of every test, so no test depends on the machine's git config.
pub fn git_env() -> Vec<(String, String)> {
    let home = std::env::temp_dir().join("agentbus-share-test-home");
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

fn setup() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        agentbus_share::git::set_base_env(git_env());
    });
}

/// Runs git in `dir` with the test identity; panics on failure; returns stdout.
#[track_caller]
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .envs(git_env())
        .env("LC_ALL", "C")
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The instant every fixture clock starts at.
pub const START: &str = "2026-11-30T12:00:00Z";

/// A bare remote on disk that refuses non-fast-forward pushes, a share initialised into it with the
/// README's own recipe (`git init --bare`, so git's default branch, then `agentbus share init`), and
/// a manual clock every clone shares.
pub struct Fx {
    /// Holds every repository.
    pub tmp: tempfile::TempDir,
    /// The bare remote.
    pub remote: PathBuf,
    /// The time every write reads.
    pub clock: ManualClock,
}

impl Fx {
    /// A new share with a protected remote.
    pub fn new() -> Fx {
        Fx::with_protection(true)
    }

    /// A new share; `protect` sets `receive.denyNonFastForwards` on the remote.
    pub fn with_protection(protect: bool) -> Fx {
        setup();
        let tmp = tempfile::tempdir().unwrap();
        let remote = tmp.path().join("remote.git");
        git(tmp.path(), &["init", "--quiet", "--bare", "remote.git"]);
        if protect {
            git(&remote, &["config", "receive.denyNonFastForwards", "true"]);
            git(&remote, &["config", "receive.denyDeletes", "true"]);
        }
        agentbus_share::init::init(&tmp.path().join("admin"), Some(remote.to_str().unwrap()))
            .unwrap();
        Fx {
            tmp,
            remote,
            clock: ManualClock::new(START.parse::<Timestamp>().unwrap()),
        }
    }

    /// A fresh clone of the remote.
    pub fn clone(&self, name: &str) -> PathBuf {
        git(
            self.tmp.path(),
            &["clone", "--quiet", self.remote.to_str().unwrap(), name],
        );
        self.tmp.path().join(name)
    }

    /// The share at `dir`, on the fixture clock.
    pub fn share(&self, dir: &Path) -> Share {
        Share::open_with_clock(dir, Arc::new(self.clock.clone())).unwrap()
    }

    /// A new clone joined as `operator`/`instance` with `agents`.
    pub fn member(&self, name: &str, operator: &str, instance: &str, agents: &[&str]) -> Share {
        let dir = self.clone(name);
        let share = self.share(&dir);
        share
            .join(
                &join_request(operator, instance, agents),
                &WriteOptions::default(),
            )
            .unwrap();
        share
    }
}

/// A join as `operator`/`instance` with `agents`, under the test author's e-mail.
pub fn join_request(operator: &str, instance: &str, agents: &[&str]) -> JoinRequest {
    JoinRequest {
        operator: operator.into(),
        instance: instance.into(),
        agents: agents.iter().map(|a| a.to_string()).collect(),
        emails: vec!["author@example.org".into()],
        sign: false,
    }
}

/// `operator/agent` as an address.
pub fn addr(s: &str) -> ShareAddress {
    ShareAddress::parse_with(s, true).unwrap()
}

/// Sends `body` of `kind` to `to` with the defaults.
#[track_caller]
pub fn send(share: &Share, to: &[&str], kind: MessageType, body: &str) -> Written {
    let req = SendRequest::new(to.iter().map(|t| addr(t)).collect(), kind, body);
    share.send(&req, &WriteOptions::default()).unwrap()
}

/// Reads a share-relative file.
pub fn read(share: &Share, rel: &str) -> String {
    std::fs::read_to_string(share.root().join(rel)).unwrap()
}

/// `git log --name-status` lines of the given filter on the protocol folders.
pub fn changes(dir: &Path, filter: &str) -> String {
    git(
        dir,
        &[
            "log",
            "--format=",
            "--name-status",
            "--no-renames",
            &format!("--diff-filter={filter}"),
            "@{upstream}",
            "--",
            "messages",
            "broadcast",
            "knowledge",
        ],
    )
}
