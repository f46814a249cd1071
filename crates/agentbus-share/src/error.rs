//! Why a share operation failed. One enum for the crate, each variant documented and given its
//! `AB-` code, so front ends answer from the catalogue without parsing text.

use std::path::PathBuf;

use agentbus_protocol::Code;
use agentbus_protocol::errors::Catalogued;
use agentbus_protocol::text::shell_quote;

/// A failure of a share operation.
#[derive(Debug, thiserror::Error)]
pub enum ShareError {
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The failure.
        source: std::io::Error,
    },
    /// The `git` binary could not be started at all.
    #[error("cannot run git: {0}")]
    GitMissing(std::io::Error),
    /// A git command failed; `stderr` is its own explanation.
    #[error("git {args} failed: {stderr}")]
    Git {
        /// The arguments, space-separated.
        args: String,
        /// What git printed on standard error (trimmed).
        stderr: String,
    },
    /// The remote could not be reached (network, permissions, a missing path).
    #[error("the share's remote could not be reached: {0}")]
    RemoteUnavailable(String),
    /// The remote refused a push for a reason other than a lost race (a hook, a protected branch).
    #[error("the remote refused the push: {0}")]
    PushRefused(String),
    /// Every retry of a push lost the race to another writer (§1, G-AS-3).
    #[error("gave up after {0} attempts: other writers kept pushing first")]
    RetriesExhausted(u32),
    /// Local unpushed changes conflict with the remote in a way `sync` cannot resolve without
    /// editing somebody's file (it never does).
    #[error("local changes to {0} conflict with the remote; resolve them by hand")]
    Conflict(String),
    /// The folder is not a git checkout of a share.
    #[error("{0} is not a share checkout (no git repository there)")]
    NotAShare(PathBuf),
    /// This checkout has no operator identity yet.
    #[error("this checkout has not joined the share yet (no operator identity in its git config)")]
    NotJoined,
    /// An identifier (operator, instance, agent, topic, thread, slug) has the wrong form (§2).
    #[error("{what} {value:?} is not valid: {why}")]
    BadIdent {
        /// Which identifier.
        what: &'static str,
        /// The value given.
        value: String,
        /// The rule it breaks.
        why: &'static str,
    },
    /// A share address is not `share:<operator>/<agent>`.
    #[error("{0:?} is not a share address (share:<operator>/<agent>, agent may be any)")]
    BadAddress(String),
    /// A command's arguments break a rule of the protocol (type, `re:`, status, keys).
    #[error("{0}")]
    Invalid(String),
    /// The sending participant is not declared in `operators.yaml` (§2).
    #[error("{0} is not declared in operators.yaml (§2); run `agentbus share join` first")]
    Undeclared(String),
    /// A message or publication id was not found in the share.
    #[error("no message or publication with id {0:?} in this share")]
    UnknownId(String),
    /// `operators.yaml` could not be read.
    #[error("operators.yaml: {0}")]
    Registry(String),
    /// `init` was pointed at a folder that already holds other files.
    #[error(
        "{0} already holds files that are not a share; `init` makes a share only in an empty folder"
    )]
    NotEmpty(PathBuf),
    /// The folder given as the share does not exist.
    #[error("{0} does not exist")]
    NoSuchDir(PathBuf),
    /// Tracked files have uncommitted changes, which a rebase or reset would have to touch; agentbus
    /// never commits or discards somebody's uncommitted work.
    #[error("uncommitted changes to {} stop the sync; agentbus never commits or discards them for you", .0.join(", "))]
    Dirty(Vec<String>),
    /// This clone's unpushed commits modify or delete an artifact that was already pushed (§1).
    #[error(
        "your unpushed commits modify or delete {0}, which is already in the share; agentshare never edits or deletes a pushed file (§1), so sync will not push them"
    )]
    LocalEdit(String),
    /// This clone's unpushed edit of a registry block conflicts with the remote's edit of it (§8).
    #[error(
        "your unpushed change to {0} conflicts with another change to it on the remote; sync keeps both commits and pushes neither version"
    )]
    RegistryConflict(String),
    /// The remote has branches, but not the one this checkout writes to.
    #[error("the remote has no branch {branch} (it has {}); writing would start a second, unrelated history", .others.join(", "))]
    NoShareBranch {
        /// The branch this checkout is on.
        branch: String,
        /// The branches the remote has.
        others: Vec<String>,
    },
    /// This checkout's history and the remote's branch have no commit in common.
    #[error(
        "this checkout's {0} and the remote's share no commit (two unrelated histories); pushing would need a force-push"
    )]
    Unrelated(String),
    /// `init` found a remote that already holds a different history.
    #[error("{url} already holds a share on {branch}, with a history this checkout does not have")]
    AlreadyAShare {
        /// The remote.
        url: String,
        /// Its branch.
        branch: String,
    },
    /// The share was pushed, but the remote's HEAD names another branch (or none), so clones would
    /// check out nothing.
    #[error("pushed the share to {branch} on {url}, but the remote's HEAD {}, so clones check out nothing", .head.as_deref().map_or("names no branch".to_owned(), |h| format!("names {h}")))]
    RemoteHead {
        /// The remote.
        url: String,
        /// The branch pushed.
        branch: String,
        /// The branch the remote's HEAD names, when it names one.
        head: Option<String>,
    },
    /// The remote holds no share yet: no commit, so no `operators.yaml`, README or
    /// `.gitattributes` to join.
    #[error("the share's remote holds no share yet (no commit at all)")]
    Uninitialised,
    /// A recipient is not declared in `operators.yaml`, and the send was strict.
    #[error("{0}; --strict refuses to write it into the share, where it would stay for good")]
    UnknownRecipient(String),
}

impl Catalogued for ShareError {
    fn code(&self) -> Code {
        match self {
            ShareError::Io { .. } => Code::ShareIo,
            ShareError::Registry(_) => Code::RegistryUnreadable,
            ShareError::GitMissing(_) => Code::GitMissing,
            ShareError::Git { .. } => Code::GitFailed,
            ShareError::RemoteUnavailable(_) => Code::RemoteUnreachable,
            ShareError::RetriesExhausted(_) => Code::PushRetriesExhausted,
            ShareError::PushRefused(_) => Code::PushRefused,
            ShareError::Conflict(_) => Code::RebaseConflict,
            ShareError::NotAShare(_) => Code::NotAShare,
            ShareError::NoSuchDir(_) => Code::NoSuchShareFolder,
            ShareError::NotJoined | ShareError::Undeclared(_) => Code::NotJoined,
            ShareError::BadIdent { .. } | ShareError::BadAddress(_) | ShareError::Invalid(_) => {
                Code::ShareArgument
            }
            ShareError::UnknownRecipient(_) => Code::UndeclaredRecipient,
            ShareError::UnknownId(_) => Code::UnknownShareId,
            ShareError::NotEmpty(_) => Code::FolderNotEmpty,
            ShareError::Dirty(_) => Code::UncommittedChanges,
            ShareError::LocalEdit(_) => Code::PushedFileEdited,
            ShareError::RegistryConflict(_) => Code::RegistryConflict,
            ShareError::NoShareBranch { .. } => Code::NoShareBranch,
            ShareError::Unrelated(_) => Code::UnrelatedHistories,
            ShareError::Uninitialised => Code::ShareUninitialised,
            ShareError::AlreadyAShare { .. } => Code::AlreadyAShare,
            ShareError::RemoteHead { .. } => Code::RemoteHeadElsewhere,
        }
    }

    /// The files, paths and branches the fixes name, quoted for a shell.
    fn fix_values(&self) -> Vec<(&'static str, String)> {
        match self {
            ShareError::Dirty(files) => vec![(
                "files",
                files
                    .iter()
                    .map(|f| shell_quote(f))
                    .collect::<Vec<_>>()
                    .join(" "),
            )],
            ShareError::LocalEdit(path) => vec![("path", shell_quote(path).into_owned())],
            ShareError::NoShareBranch { others, .. } => vec![(
                "branch",
                shell_quote(others.first().map_or("<branch>", String::as_str)).into_owned(),
            )],
            ShareError::AlreadyAShare { url, .. } => vec![("url", shell_quote(url).into_owned())],
            ShareError::RemoteHead { url, branch, .. } => vec![
                ("branch", branch.clone()),
                ("url", shell_quote(url).into_owned()),
                (
                    "ref",
                    shell_quote(&format!("refs/heads/{branch}")).into_owned(),
                ),
            ],
            _ => Vec::new(),
        }
    }
}

impl ShareError {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> ShareError {
        let path = path.into();
        move |source| ShareError::Io { path, source }
    }
}

/// The result of a share operation.
pub type Result<T, E = ShareError> = std::result::Result<T, E>;
