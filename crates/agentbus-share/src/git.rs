//! The `git` binary as a subprocess, the only way this crate touches history.
//!
//! Why the binary: it is what users already have, with their credential helpers, hooks, signing
//! setup and transports; libraries either cannot push or rebase, or ignore those. Every call runs
//! with `GIT_TERMINAL_PROMPT=0` (a missing credential fails instead of hanging an agent) and
//! `LC_ALL=C` (messages we parse stay in English).
//!
//! Two rules are enforced here rather than trusted to callers: no push ever carries `--force`,
//! `-f`, `--force-with-lease`, `--mirror`, `--delete` or a `+` refspec (§1, G-AS-19), and every
//! write to a checkout holds that checkout's one lock ([`Git::lock`]).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, OnceLock};

use crate::error::ShareError;

/// The remote every share checkout pulls from and pushes to.
pub const REMOTE: &str = "origin";

/// A git checkout.
#[derive(Debug, Clone)]
pub struct Git {
    root: PathBuf,
    /// The current branch, read once: every sync round needs it, and a process per read adds up
    /// when many writers race.
    branch: Arc<OnceLock<String>>,
    /// The git directory, read once (the lock lives there).
    git_dir: Arc<OnceLock<PathBuf>>,
}

/// The held lock of one checkout; released on drop.
#[derive(Debug)]
pub struct Lock(#[allow(dead_code)] File);

/// What a push did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Push {
    /// The remote took it.
    Pushed,
    /// Another writer pushed first (`fetch first`, `non-fast-forward`, a ref lock held): fetch,
    /// rebase and try again.
    LostRace,
}

static BASE_ENV: OnceLock<Vec<(String, String)>> = OnceLock::new();

/// Sets extra environment variables for every git child of this process, once. Tests use it to pin
/// `HOME`, `GIT_AUTHOR_*` and `GIT_COMMITTER_*` so they never depend on the machine's git config;
/// the binary never calls it. Returns false when it was already set.
pub fn set_base_env(vars: Vec<(String, String)>) -> bool {
    BASE_ENV.set(vars).is_ok()
}

fn command(dir: &Path) -> Command {
    let mut cmd = Command::new("git");
    if let Some(vars) = BASE_ENV.get() {
        cmd.envs(vars.iter().map(|(k, v)| (k, v)));
    }
    cmd.current_dir(dir)
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("LC_ALL", "C")
        .env("GIT_EDITOR", "true")
        .env("GIT_MERGE_AUTOEDIT", "no")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

fn is_forceful(args: &[&str]) -> bool {
    args.first() == Some(&"push")
        && args.iter().skip(1).any(|a| {
            a.starts_with("--force")
                || *a == "-f"
                || *a == "--mirror"
                || *a == "--delete"
                || *a == "-d"
                || a.starts_with('+')
                || a.contains(":+")
        })
}

impl Git {
    /// The checkout at `dir` (any folder inside it).
    pub fn open(dir: &Path) -> Result<Git, ShareError> {
        // A missing folder would otherwise fail to start git and read as "git is not installed".
        if !dir.is_dir() {
            return Err(ShareError::NoSuchDir(dir.to_owned()));
        }
        let out = command(dir)
            .args(["rev-parse", "--show-toplevel"])
            .output()
            .map_err(ShareError::GitMissing)?;
        if !out.status.success() {
            return Err(ShareError::NotAShare(dir.to_owned()));
        }
        let top = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        Ok(Git::at(Path::new(&top)))
    }

    /// A handle on `dir` without checking it is a checkout (for `init` and `clone`).
    pub fn at(dir: &Path) -> Git {
        Git {
            root: dir.to_owned(),
            branch: Arc::default(),
            git_dir: Arc::default(),
        }
    }

    /// The checkout's top folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Runs git and returns its output whatever the exit status.
    pub fn run(&self, args: &[&str]) -> Result<Output, ShareError> {
        if is_forceful(args) {
            return Err(ShareError::Invalid(format!(
                "refusing to run `git {}`: agentbus never force-pushes or deletes remote refs (§1)",
                args.join(" ")
            )));
        }
        let mut cmd = command(&self.root);
        if matches!(
            args.first(),
            Some(&("fetch" | "commit" | "merge" | "rebase" | "push"))
        ) {
            // These would each start `git maintenance run --auto`; many writes in a row pay for
            // it many times. `agentbus share sync` runs it once instead (see `maintain`).
            cmd.args(["-c", "maintenance.auto=false"]);
        }
        cmd.args(args).output().map_err(|e| {
            if self.root.is_dir() {
                ShareError::GitMissing(e)
            } else {
                ShareError::NoSuchDir(self.root.clone())
            }
        })
    }

    /// Runs git, failing unless it exits 0; returns stdout with trailing whitespace trimmed.
    pub fn ok(&self, args: &[&str]) -> Result<String, ShareError> {
        let out = self.run(args)?;
        if !out.status.success() {
            return Err(failure(args, &out));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim_end().to_owned())
    }

    /// Whether git exits 0.
    pub fn succeeds(&self, args: &[&str]) -> bool {
        self.run(args).is_ok_and(|o| o.status.success())
    }

    /// A config value of this checkout.
    pub fn config(&self, key: &str) -> Option<String> {
        self.ok(&["config", "--get", key])
            .ok()
            .filter(|v| !v.is_empty())
    }

    /// All values of a multi-valued config key.
    pub fn config_all(&self, key: &str) -> Vec<String> {
        self.ok(&["config", "--get-all", key])
            .map(|s| s.lines().map(str::to_owned).collect())
            .unwrap_or_default()
    }

    /// Takes this checkout's one lock, waiting for another agentbus process to finish. The lock
    /// file lives in the git directory, so it is never committed.
    pub fn lock(&self) -> Result<Lock, ShareError> {
        let path = self.git_dir()?.join("agentbus-share.lock");
        let f = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(ShareError::io(&path))?;
        f.lock().map_err(ShareError::io(&path))?;
        Ok(Lock(f))
    }

    /// The git directory (`.git` of a checkout).
    pub fn git_dir(&self) -> Result<PathBuf, ShareError> {
        if let Some(d) = self.git_dir.get() {
            return Ok(d.clone());
        }
        let d = PathBuf::from(self.ok(&["rev-parse", "--absolute-git-dir"])?);
        Ok(self.git_dir.get_or_init(|| d).clone())
    }

    /// The current branch (`main` when HEAD is unborn and unnamed).
    pub fn branch(&self) -> String {
        self.branch
            .get_or_init(|| {
                self.ok(&["symbolic-ref", "--short", "HEAD"])
                    .unwrap_or_else(|_| "main".to_owned())
            })
            .clone()
    }

    /// This checkout's config entries under `section.`, as (key, value) pairs in file order, read
    /// in one process.
    pub fn config_section(&self, section: &str) -> Vec<(String, String)> {
        let pattern = format!("^{}\\.", section.replace('.', "\\."));
        self.ok(&["config", "--get-regexp", &pattern])
            .map(|out| {
                out.lines()
                    .filter_map(|l| {
                        let (k, v) = l.split_once(' ').unwrap_or((l, ""));
                        let k = k.strip_prefix(section)?.strip_prefix('.')?;
                        Some((k.to_owned(), v.to_owned()))
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Whether the checkout has the share remote.
    pub fn has_remote(&self) -> bool {
        self.config(&format!("remote.{REMOTE}.url")).is_some()
    }

    /// The remote's URL.
    pub fn remote_url(&self) -> Option<String> {
        self.config(&format!("remote.{REMOTE}.url"))
    }

    /// The remote-tracking ref of the current branch, when it exists.
    pub fn upstream(&self) -> Option<String> {
        let r = format!("refs/remotes/{REMOTE}/{}", self.branch());
        self.succeeds(&["rev-parse", "--verify", "--quiet", &r])
            .then_some(r)
    }

    /// The commit a revision names.
    pub fn rev(&self, rev: &str) -> Option<String> {
        self.ok(&[
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("{rev}^{{commit}}"),
        ])
        .ok()
    }

    /// Lets git tidy the checkout if it has grown enough (`git maintenance run --auto`), which the
    /// write commands skip.
    pub fn maintain(&self) {
        let _ = self.run(&["maintenance", "run", "--auto", "--quiet"]);
    }

    /// Fetches the current branch from the remote.
    pub fn fetch(&self) -> Result<(), ShareError> {
        let out = self.run(&["fetch", "--quiet", REMOTE])?;
        if out.status.success() {
            Ok(())
        } else {
            Err(ShareError::RemoteUnavailable(
                String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            ))
        }
    }

    /// Stages and commits exactly `paths` (other staged changes stay staged, uncommitted),
    /// signing with the user's git signing setup when `sign` is set (§11).
    pub fn commit(&self, paths: &[String], message: &str, sign: bool) -> Result<(), ShareError> {
        let mut add = vec!["add", "--"];
        add.extend(paths.iter().map(String::as_str));
        self.ok(&add)?;
        self.commit_staged(paths, message, sign)
    }

    /// Like [`Git::commit`], but commits only when `paths` differ from HEAD; returns whether it
    /// committed. A commit with nothing in it would fail with git's "nothing to commit".
    pub fn commit_changes(
        &self,
        paths: &[String],
        message: &str,
        sign: bool,
    ) -> Result<bool, ShareError> {
        let mut add = vec!["add", "--"];
        add.extend(paths.iter().map(String::as_str));
        self.ok(&add)?;
        let mut diff = vec!["diff", "--cached", "--quiet", "--"];
        diff.extend(paths.iter().map(String::as_str));
        if self.succeeds(&diff) {
            return Ok(false);
        }
        self.commit_staged(paths, message, sign).map(|()| true)
    }

    fn commit_staged(&self, paths: &[String], message: &str, sign: bool) -> Result<(), ShareError> {
        let mut commit = vec!["commit", "--quiet", "--no-verify", "-m", message];
        if sign {
            commit.push("-S");
        }
        commit.push("--");
        commit.extend(paths.iter().map(String::as_str));
        self.ok(&commit).map(drop)
    }

    /// Tracked files whose working-tree or staged content differs from HEAD (share-relative).
    pub fn dirty(&self) -> Vec<String> {
        self.ok(&[
            "status",
            "--porcelain",
            "--untracked-files=no",
            "--no-renames",
        ])
        .map(|out| {
            out.lines()
                .filter_map(|l| l.get(3..))
                .map(|p| p.trim_matches('"').to_owned())
                .collect()
        })
        .unwrap_or_default()
    }

    /// The branch the remote's HEAD names, asked of the remote itself (`ls-remote --symref`);
    /// `None` when it cannot be reached or its HEAD names no existing branch.
    pub fn remote_head(&self) -> Option<String> {
        let out = self.ok(&["ls-remote", "--symref", REMOTE, "HEAD"]).ok()?;
        out.lines().find_map(|l| {
            l.strip_prefix("ref: refs/heads/")?
                .strip_suffix("\tHEAD")
                .map(str::to_owned)
        })
    }

    /// The remote's branches this checkout has fetched (`refs/remotes/origin/*`, without `HEAD`).
    pub fn remote_branches(&self) -> Vec<String> {
        let prefix = format!("refs/remotes/{REMOTE}/");
        self.ok(&["for-each-ref", "--format=%(refname)", &prefix])
            .map(|out| {
                out.lines()
                    .filter_map(|l| l.strip_prefix(&prefix))
                    .filter(|b| *b != "HEAD")
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Pushes HEAD to the current branch on the remote, fast-forward only, and reads the outcome
    /// from `--porcelain`.
    pub fn push(&self) -> Result<Push, ShareError> {
        let refspec = format!("HEAD:refs/heads/{}", self.branch());
        let out = self.run(&["push", "--porcelain", REMOTE, &refspec])?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        for line in stdout.lines() {
            if let Some(rest) = line.strip_prefix('!') {
                let lost = rest.contains("fetch first")
                    || rest.contains("non-fast-forward")
                    || rest.contains("stale info")
                    || (rest.contains("remote rejected")
                        && (rest.contains("lock") || rest.contains("failed to update ref")));
                return if lost {
                    Ok(Push::LostRace)
                } else {
                    Err(ShareError::PushRefused(format!(
                        "{} {}",
                        rest.trim(),
                        stderr.trim()
                    )))
                };
            }
        }
        if out.status.success() {
            Ok(Push::Pushed)
        } else if stderr.contains("cannot lock ref") || stderr.contains("failed to update ref") {
            Ok(Push::LostRace)
        } else {
            Err(ShareError::RemoteUnavailable(stderr.trim().to_owned()))
        }
    }
}

/// A failed git command as an error: git's own explanation is on stderr, or on stdout for a few
/// commands ("nothing to commit"), so an error never has an empty reason.
fn failure(args: &[&str], out: &Output) -> ShareError {
    let stderr = String::from_utf8_lossy(&out.stderr).trim().to_owned();
    let why = if stderr.is_empty() {
        let stdout = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        if stdout.is_empty() {
            format!("exit status {}", out.status.code().unwrap_or(-1))
        } else {
            stdout
        }
    } else {
        stderr
    };
    ShareError::Git {
        args: args.join(" "),
        stderr: why,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn as_1_force_push_is_refused_before_git_runs() {
        let g = Git::at(Path::new("."));
        for args in [
            &["push", "--force", "origin"][..],
            &["push", "-f"],
            &["push", "origin", "+HEAD:refs/heads/main"],
            &["push", "--force-with-lease"],
            &["push", "origin", "--delete", "main"],
        ] {
            assert!(
                matches!(g.run(args), Err(ShareError::Invalid(_))),
                "{args:?}"
            );
        }
    }
}
