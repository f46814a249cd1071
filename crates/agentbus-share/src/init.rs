//! `init`: a new share, pushed to the branch its remote's clones check out.
//!
//! A clone checks out the branch the remote's HEAD names. So `init` with a remote starts by
//! cloning it (while empty, the clone learns that branch from the remote: git's default, `master`,
//! for a plain `git init --bare`), makes the first commit there and pushes it, then asks the remote
//! which branch its HEAD names and refuses to call a share working that clones would not see.
//!
//! `init` is idempotent: run again after a failure it resumes (the files it wrote, the commit it
//! made, the push that did not happen), and run on a share that exists it changes nothing and says
//! so. It never writes over a file it did not write.

use std::path::{Path, PathBuf};

use crate::error::ShareError;
use crate::git::{Git, Push, REMOTE};
use crate::naming::{REGISTRY, REGISTRY_DIR};
use crate::registry;

/// What `init` found and did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum InitOutcome {
    /// This run made the share's first commit (and pushed it, when there is a remote).
    Created,
    /// An earlier run had made the first commit; this one pushed it.
    Resumed,
    /// The share was already there, in step with its remote: nothing was changed.
    Existing,
}

/// What `init` made.
#[derive(Debug, Clone, serde::Serialize)]
pub struct InitReport {
    /// The checkout.
    pub path: PathBuf,
    /// The remote, when one was given or found.
    pub remote: Option<String>,
    /// The branch the share lives on (the remote's HEAD branch when there is a remote).
    pub branch: String,
    /// Whether the remote now has the share.
    pub pushed: bool,
    /// What happened.
    pub outcome: InitOutcome,
}

/// The share's own README, written by `init`.
pub const SHARE_README: &str = "# A share\n\nA git repository of immutable markdown files exchanged \
between agent fleets, following the agentshare protocol, version 0.1 Core.\n\n\
- `messages/<to-operator>/<to-agent>/<timestamp>-<from-operator>-<from-agent>-<slug>.md`: direct messages\n\
- `broadcast/<timestamp>-<operator>-<slug>.md`: announcements to everyone\n\
- `knowledge/<topic>/<date>-<operator>-<slug>.md`: publications (no index files here)\n\
- `log/<operator>-<date>.jsonl`: each operator's own audit log\n\
- `operators.yaml`: who participates; edit only your own block\n\n\
Never edit or delete a pushed file and never force-push: change state by writing new files.\n";

/// The share's `.gitattributes`. Artifacts are `-text`, so no checkout converts their line ends
/// (Git for Windows' `core.autocrlf=true` would turn LF into CRLF, and every multi-line body would
/// then fail its `content_hash`, §3.2); concurrent appends to one operator's log from two instances
/// merge by concatenation (G-AS-4).
pub const GITATTRIBUTES: &str = "\
# Artifacts keep their exact bytes on every platform (no CRLF conversion): content_hash covers them.
messages/** -text
broadcast/** -text
knowledge/** -text
# Instances of one operator append to one audit log: merge those files by concatenation.
log/*.jsonl merge=union
";

/// The lines of [`GITATTRIBUTES`] that matter, for `check` to find in a share's own file.
pub const GITATTRIBUTES_RULES: [&str; 4] = [
    "messages/** -text",
    "broadcast/** -text",
    "knowledge/** -text",
    "log/*.jsonl merge=union",
];

/// The files `init` writes: path and content.
fn layout() -> [(&'static str, String); 3] {
    [
        ("README.md", SHARE_README.to_owned()),
        (".gitattributes", GITATTRIBUTES.to_owned()),
        (REGISTRY, registry::HEADER.to_owned()),
    ]
}

/// Whether two remote URLs name one repository (a local path may be written relative or absolute).
fn same_remote(a: &str, b: &str) -> bool {
    if a == b {
        return true;
    }
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => false,
    }
}

/// Creates a share in `dir`, or finishes one an earlier run started (see the module
/// documentation). With `remote`, the share is pushed to the branch the remote's HEAD names.
pub fn init(dir: &Path, remote: Option<&str>) -> Result<InitReport, ShareError> {
    let fresh = !dir.join(".git").exists();
    if fresh && std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_some()) {
        return Err(ShareError::NotEmpty(dir.to_owned()));
    }
    let existed = dir.exists();
    let result = init_in(dir, remote, fresh);
    if fresh && result.is_err() {
        // A folder this run made (or found empty) holds only what this run put there.
        if existed {
            if let Ok(entries) = std::fs::read_dir(dir) {
                for e in entries.flatten() {
                    let p = e.path();
                    let _ = if p.is_dir() {
                        std::fs::remove_dir_all(&p)
                    } else {
                        std::fs::remove_file(&p)
                    };
                }
            }
        } else {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
    result
}

fn init_in(dir: &Path, remote: Option<&str>, fresh: bool) -> Result<InitReport, ShareError> {
    if fresh {
        match remote {
            // Cloning the (empty) remote is how a client learns the branch its HEAD names: the
            // branch every later clone checks out.
            Some(url) => {
                let target = dir.to_string_lossy().into_owned();
                let out = Git::at(Path::new(".")).run(&["clone", "--quiet", url, &target])?;
                if !out.status.success() {
                    return Err(ShareError::RemoteUnavailable(
                        String::from_utf8_lossy(&out.stderr).trim().to_owned(),
                    ));
                }
            }
            None => {
                std::fs::create_dir_all(dir).map_err(ShareError::io(dir))?;
                Git::at(dir).ok(&["init", "--quiet", "--initial-branch=main"])?;
            }
        }
    }
    let git = Git::at(dir);
    if let Some(url) = remote {
        match git.remote_url() {
            None => {
                git.ok(&["remote", "add", REMOTE, url])?;
            }
            Some(have) if same_remote(&have, url) => {}
            Some(have) => {
                return Err(ShareError::Invalid(format!(
                    "{} already pushes to {have}, not {url}",
                    dir.display()
                )));
            }
        }
    }
    let branch = git.branch();
    if git.has_remote() {
        git.fetch()?;
    }
    let url = git.remote_url();
    let up = git.upstream();
    let head = git.rev("HEAD");
    let outcome = match (&head, &up) {
        (None, Some(_)) => {
            return Err(ShareError::AlreadyAShare {
                url: url.unwrap_or_default(),
                branch,
            });
        }
        (None, None) => {
            let others = git.remote_branches();
            if !others.is_empty() {
                return Err(ShareError::NoShareBranch { branch, others });
            }
            write_layout(dir)?;
            let paths: Vec<String> = layout().iter().map(|(p, _)| (*p).to_owned()).collect();
            git.commit(
                &paths,
                "agentbus share init: a new share (agentshare 0.1 Core layout)",
                false,
            )?;
            InitOutcome::Created
        }
        (Some(h), up) => {
            if !is_share(&git) {
                return Err(ShareError::NotEmpty(dir.to_owned()));
            }
            match up {
                Some(u) if u == h => InitOutcome::Existing,
                Some(u) if git.succeeds(&["merge-base", "--is-ancestor", h, u]) => {
                    git.ok(&["merge", "--ff-only", "--quiet", u])?;
                    InitOutcome::Existing
                }
                Some(u) if git.succeeds(&["merge-base", "--is-ancestor", u, h]) => {
                    InitOutcome::Resumed
                }
                Some(_) => {
                    return Err(ShareError::AlreadyAShare {
                        url: url.unwrap_or_default(),
                        branch,
                    });
                }
                None if url.is_some() => {
                    let others = git.remote_branches();
                    if !others.is_empty() {
                        return Err(ShareError::NoShareBranch { branch, others });
                    }
                    InitOutcome::Resumed
                }
                None => InitOutcome::Existing,
            }
        }
    };
    let Some(url) = url else {
        return Ok(InitReport {
            path: dir.to_owned(),
            remote: None,
            branch,
            pushed: false,
            outcome,
        });
    };
    if outcome != InitOutcome::Existing {
        match git.push()? {
            Push::Pushed => {}
            // Somebody pushed a first commit of their own in between.
            Push::LostRace => return Err(ShareError::AlreadyAShare { url, branch }),
        }
        git.fetch()?;
    }
    let _ = git.run(&[
        "branch",
        "--quiet",
        &format!("--set-upstream-to={REMOTE}/{branch}"),
    ]);
    // The remote's HEAD decides what every clone checks out; a share on another branch is a share
    // nobody sees.
    let head = git.remote_head();
    if head.as_deref() != Some(branch.as_str()) {
        return Err(ShareError::RemoteHead { url, branch, head });
    }
    Ok(InitReport {
        path: dir.to_owned(),
        remote: Some(url),
        branch,
        pushed: true,
        outcome,
    })
}

/// Whether the checkout's HEAD holds a share: its registry, in either form.
fn is_share(git: &Git) -> bool {
    [REGISTRY, REGISTRY_DIR]
        .iter()
        .any(|p| git.succeeds(&["cat-file", "-e", &format!("HEAD:{p}")]))
}

/// Writes the layout's files, taking over one an earlier run left behind with the same content and
/// refusing to write over anything else.
fn write_layout(dir: &Path) -> Result<(), ShareError> {
    for (rel, content) in layout() {
        let path = dir.join(rel);
        match std::fs::read(&path) {
            Ok(have) if have == content.as_bytes() => {}
            Ok(_) => return Err(ShareError::NotEmpty(dir.to_owned())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::write(&path, &content).map_err(ShareError::io(&path))?;
            }
            Err(e) => return Err(ShareError::io(&path)(e)),
        }
    }
    Ok(())
}
