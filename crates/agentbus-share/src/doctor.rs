//! `doctor`: §11's security considerations, checked where a clone can tell.
//!
//! - Force-push (AS-11-1): when the remote is a repository on this machine, its
//!   `receive.denyNonFastForwards` and `receive.denyDeletes` are read; for a hosted remote the
//!   branch protection cannot be seen from a clone, and doctor says so.
//! - Signing (AS-11-2): commits on the shared branch without a signature are counted; `--sign`
//!   (or `join --sign`) signs this clone's commits with the user's own git signing setup.
//! - Identity (AS-11-2): every commit author's e-mail should appear in some operator's `emails`
//!   in `operators.yaml`, so a commit can be tied to a registered participant.
//!
//! Doctor only warns; it never changes the share.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use agentbus_protocol::text::shell_quote;

use crate::error::ShareError;
use crate::git::Git;
use crate::registry::Registry;
use crate::share::Share;

/// How a doctor finding reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    /// All is well.
    Ok,
    /// Something §11 says a share should not allow or lack.
    Warn,
    /// Doctor cannot tell from here.
    Unknown,
}

/// One doctor finding.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Note {
    /// Its level.
    pub level: Level,
    /// The checklist id it serves.
    pub rule: &'static str,
    /// What doctor found.
    pub message: String,
    /// What to do about it (for warnings).
    pub fix: Option<String>,
}

fn note(level: Level, rule: &'static str, message: String, fix: Option<&str>) -> Note {
    Note {
        level,
        rule,
        message,
        fix: fix.map(str::to_owned),
    }
}

/// The local repository a remote URL names, when it is on this machine.
fn local_remote(url: &str, root: &Path) -> Option<PathBuf> {
    let path = url.strip_prefix("file://").unwrap_or(url);
    if path.contains("://") || (path.contains(':') && !path.starts_with('/')) {
        return None;
    }
    let p = root.join(path);
    p.exists().then_some(p)
}

/// One share is one history on the branch the remote's HEAD names: several root commits among
/// the remote's branches (a `join` on a clone that checked out nothing used to start one), or a
/// checkout on another branch than the remote's HEAD, means some participants never see the
/// others' files.
fn histories(git: &Git) -> Vec<Note> {
    let mut notes = Vec::new();
    let branches = git.remote_branches();
    if branches.is_empty() {
        return notes;
    }
    let mut roots: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for b in &branches {
        let list = git
            .ok(&[
                "rev-list",
                "--max-parents=0",
                &format!("refs/remotes/{}/{b}", crate::git::REMOTE),
            ])
            .unwrap_or_default();
        for r in list.lines() {
            roots.entry(r.to_owned()).or_default().push(b.clone());
        }
    }
    if roots.len() > 1 {
        let list: Vec<String> = roots
            .iter()
            .map(|(r, bs)| format!("{} on {}", &r[..r.len().min(12)], bs.join(", ")))
            .collect();
        notes.push(note(
            Level::Warn,
            "AS-2-1",
            format!(
                "the remote holds {} unrelated histories (root commits {}); each participant sees only one",
                roots.len(),
                list.join("; ")
            ),
            Some("keep the branch the remote's HEAD names; copy what was written on the others onto it by hand (git cherry-pick) and stop using them"),
        ));
    }
    let head = git.remote_head();
    let mine = git.branch();
    match head {
        Some(h) if h != mine => notes.push(note(
            Level::Warn,
            "AS-2-1",
            format!("this checkout writes to {mine}, but the remote's HEAD names {h}: fresh clones check out {h} and never see what is written here"),
            Some(&format!("git checkout {}", shell_quote(&h))),
        )),
        None if git.has_remote() => notes.push(note(
            Level::Warn,
            "AS-2-1",
            "the remote's HEAD names no branch it has (or the remote cannot be reached): fresh clones check out nothing".to_owned(),
            Some(&format!(
                "point the remote's HEAD at {mine}: on a host, make it the default branch; for a bare repository, git --git-dir <repository> symbolic-ref HEAD {}",
                shell_quote(&format!("refs/heads/{mine}"))
            )),
        )),
        _ => {}
    }
    if roots.len() <= 1 && notes.is_empty() {
        notes.push(note(
            Level::Ok,
            "AS-2-1",
            format!("one history, on {mine}, the branch the remote's HEAD names"),
            None,
        ));
    }
    notes
}

/// Runs every check.
pub fn doctor(share: &Share) -> Result<Vec<Note>, ShareError> {
    let git = share.git();
    let mut notes = Vec::new();

    match git.remote_url() {
        None => notes.push(note(
            Level::Unknown,
            "AS-11-1",
            "this checkout has no remote; nothing to protect yet".into(),
            None,
        )),
        Some(url) => match local_remote(&url, share.root()) {
            Some(path) => {
                let remote = Git::at(&path);
                let flag = |k: &str| remote.config(k).is_some_and(|v| v == "true");
                if flag("receive.denyNonFastForwards") {
                    notes.push(note(
                        Level::Ok,
                        "AS-11-1",
                        format!("{url} refuses non-fast-forward pushes"),
                        None,
                    ));
                } else {
                    notes.push(note(
                        Level::Warn,
                        "AS-11-1",
                        format!("{url} allows force-pushes (receive.denyNonFastForwards is not set); anyone can rewrite the share's history"),
                        Some(&format!("git --git-dir {} config receive.denyNonFastForwards true", shell_quote(&path.to_string_lossy()))),
                    ));
                }
                if !flag("receive.denyDeletes") {
                    notes.push(note(
                        Level::Warn,
                        "AS-11-1",
                        format!("{url} allows deleting branches (receive.denyDeletes is not set)"),
                        Some(&format!(
                            "git --git-dir {} config receive.denyDeletes true",
                            shell_quote(&path.to_string_lossy())
                        )),
                    ));
                }
            }
            None => notes.push(note(
                Level::Unknown,
                "AS-11-1",
                format!("cannot see whether {url} allows force-pushes from a clone"),
                Some("protect the share's branch on the host and disable force-push for everyone"),
            )),
        },
    }

    notes.extend(histories(git));

    let tip = git.upstream().unwrap_or_else(|| "HEAD".to_owned());
    let log = if git.rev(&tip).is_some() {
        git.ok(&["log", "--format=%G?%x09%ae", &tip])?
    } else {
        String::new()
    };
    let mut total = 0usize;
    let mut unsigned = 0usize;
    let mut authors: BTreeMap<String, usize> = BTreeMap::new();
    for line in log.lines() {
        let Some((sig, email)) = line.split_once('\t') else {
            continue;
        };
        total += 1;
        if sig == "N" {
            unsigned += 1;
        }
        *authors.entry(email.to_owned()).or_default() += 1;
    }
    if unsigned > 0 {
        notes.push(note(
            Level::Warn,
            "AS-11-2",
            format!("{unsigned} of {total} commits on the shared branch are unsigned; authorship is only git's self-declared identity"),
            Some("set up git commit signing and run `agentbus share join … --sign` (or pass --sign)"),
        ));
    } else if total > 0 {
        notes.push(note(
            Level::Ok,
            "AS-11-2",
            format!("all {total} commits are signed"),
            None,
        ));
    }

    let registry = Registry::load(share.root())?;
    let unknown: Vec<String> = authors
        .keys()
        .filter(|e| registry.operator_of_email(e).is_none())
        .cloned()
        .collect();
    if !unknown.is_empty() {
        notes.push(note(
            Level::Warn,
            "AS-11-2",
            format!("commit authors not in operators.yaml: {}", unknown.join(", ")),
            Some("each operator lists its git e-mails in its own block: agentbus share join … --email <address>"),
        ));
    } else if !authors.is_empty() {
        notes.push(note(
            Level::Ok,
            "AS-11-2",
            "every commit author is registered in operators.yaml".into(),
            None,
        ));
    }

    match share.identity() {
        Ok(me) if me.sign => notes.push(note(
            Level::Ok,
            "AS-11-2",
            "this clone signs its commits".into(),
            None,
        )),
        Ok(_) => notes.push(note(
            Level::Warn,
            "AS-11-2",
            "this clone does not sign its commits".into(),
            Some("agentbus share join … --sign, with git's user.signingkey set up"),
        )),
        Err(_) => {}
    }
    Ok(notes)
}
