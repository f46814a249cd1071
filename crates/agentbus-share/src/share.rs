//! A share checkout: where it is, who this clone writes as, and a snapshot of everything in it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentbus_runtime::{Clock, SystemClock};

use crate::error::ShareError;
use crate::frontmatter::{self, FormatError, Message, Publication};
use crate::git::Git;
use crate::naming::{self, BROADCAST, KNOWLEDGE, MESSAGES, Place};

/// The git config section of this clone's identity (in `.git/config`, never committed).
pub const CONFIG_SECTION: &str = "agentbus-share";

/// Who this clone writes as: written by `join` into the checkout's own git config, so two clones
/// on one machine can be two instances, and nothing is stored outside the checkout.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Identity {
    /// The operator (`agentbus-share.operator`).
    pub operator: String,
    /// This clone's instance (`agentbus-share.instance`).
    pub instance: String,
    /// This instance's agents (`agentbus-share.agent`, one value per agent); the first is the
    /// default sender.
    pub agents: Vec<String>,
    /// Whether commits are signed with the user's git signing setup (`agentbus-share.sign`).
    pub sign: bool,
}

impl Identity {
    /// Reads the identity from a checkout's git config.
    pub fn load(git: &Git) -> Result<Identity, ShareError> {
        let entries = git.config_section(CONFIG_SECTION);
        let one = |k: &str| {
            entries
                .iter()
                .rev()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.clone())
                .filter(|v| !v.is_empty())
        };
        let operator = one("operator").ok_or(ShareError::NotJoined)?;
        let instance = one("instance").ok_or(ShareError::NotJoined)?;
        let agents: Vec<String> = entries
            .iter()
            .filter(|(k, _)| k == "agent")
            .map(|(_, v)| v.clone())
            .collect();
        if agents.is_empty() {
            return Err(ShareError::NotJoined);
        }
        let sign = one("sign").is_some_and(|v| v == "true");
        Ok(Identity {
            operator,
            instance,
            agents,
            sign,
        })
    }

    /// Writes the identity into a checkout's git config.
    pub fn save(&self, git: &Git) -> Result<(), ShareError> {
        let key = |k: &str| format!("{CONFIG_SECTION}.{k}");
        git.ok(&["config", &key("operator"), &self.operator])?;
        git.ok(&["config", &key("instance"), &self.instance])?;
        let _ = git.run(&["config", "--unset-all", &key("agent")]);
        for a in &self.agents {
            git.ok(&["config", "--add", &key("agent"), a])?;
        }
        git.ok(&[
            "config",
            &key("sign"),
            if self.sign { "true" } else { "false" },
        ])?;
        Ok(())
    }

    /// The agent a command sends as: `requested` when it is one of ours, else the first.
    pub fn sender(&self, requested: Option<&str>) -> Result<String, ShareError> {
        match requested {
            Some(a) if self.agents.iter().any(|x| x == a) => Ok(a.to_owned()),
            Some(a) => Err(ShareError::Undeclared(format!(
                "{}/{}/{a} (this clone's agents: {})",
                self.operator,
                self.instance,
                self.agents.join(", ")
            ))),
            None => Ok(self.agents[0].clone()),
        }
    }
}

/// A file read from the share, with where it lies.
#[derive(Debug, Clone)]
pub struct Located<T> {
    /// The share-relative path, `/`-separated.
    pub path: String,
    /// The artifact.
    pub doc: T,
}

/// A file that could not be read; reported with its path and skipped, never fatal (§3 reading).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Malformed {
    /// The share-relative path.
    pub path: String,
    /// Why.
    pub error: String,
}

/// Every artifact in a checkout's working tree, read leniently.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Direct messages (`messages/…`).
    pub messages: Vec<Located<Message>>,
    /// Broadcasts (`broadcast/…`).
    pub broadcasts: Vec<Located<Message>>,
    /// Publications (`knowledge/…`).
    pub publications: Vec<Located<Publication>>,
    /// Files that could not be read.
    pub malformed: Vec<Malformed>,
    /// Files under a protocol folder at a place the layout has none (wrong depth, not `.md`).
    pub strays: Vec<String>,
}

impl Snapshot {
    /// Every message and broadcast.
    pub fn all_messages(&self) -> impl Iterator<Item = &Located<Message>> {
        self.messages.iter().chain(self.broadcasts.iter())
    }

    /// The copies of the message with `id` (several for a multicast).
    pub fn message_copies(&self, id: &str) -> Vec<&Located<Message>> {
        self.all_messages().filter(|m| m.doc.id == id).collect()
    }

    /// The publication with `id`.
    pub fn publication(&self, id: &str) -> Option<&Located<Publication>> {
        self.publications.iter().find(|p| p.doc.id == id)
    }
}

/// A share checkout.
#[derive(Clone)]
pub struct Share {
    git: Git,
    clock: Arc<dyn Clock>,
    /// How contended pushes have lately been from this handle (0 = not at all); it sizes the
    /// random pause before retrying, and before a first push while it is high (see `ops`).
    pub(crate) contention: Arc<std::sync::atomic::AtomicU32>,
}

impl std::fmt::Debug for Share {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Share")
            .field("root", &self.git.root())
            .finish()
    }
}

impl Share {
    /// The share checkout containing `dir`, reading time from the system clock.
    pub fn open(dir: &Path) -> Result<Share, ShareError> {
        Share::open_with_clock(dir, Arc::new(SystemClock))
    }

    /// The share checkout containing `dir`, reading time only through `clock` (tests fix it).
    pub fn open_with_clock(dir: &Path, clock: Arc<dyn Clock>) -> Result<Share, ShareError> {
        Ok(Share {
            git: Git::open(dir)?,
            clock,
            contention: Arc::default(),
        })
    }

    /// The checkout's top folder.
    pub fn root(&self) -> &Path {
        self.git.root()
    }

    /// The git wrapper.
    pub fn git(&self) -> &Git {
        &self.git
    }

    /// The clock.
    pub fn clock(&self) -> &dyn Clock {
        &*self.clock
    }

    /// This clone's identity.
    pub fn identity(&self) -> Result<Identity, ShareError> {
        Identity::load(&self.git)
    }

    /// Reads every artifact in the working tree.
    pub fn snapshot(&self) -> Result<Snapshot, ShareError> {
        snapshot(self.root())
    }
}

fn list(dir: &Path) -> Vec<(String, bool)> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<(String, bool)> = rd
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let is_dir = e.file_type().ok()?.is_dir();
            Some((name, is_dir))
        })
        .collect();
    v.sort();
    v
}

/// Every artifact path under the protocol folders, and the strays.
pub(crate) fn artifact_paths(root: &Path) -> (Vec<String>, Vec<String>) {
    let mut files = Vec::new();
    let mut strays = Vec::new();
    let file = |rel: String, files: &mut Vec<String>, strays: &mut Vec<String>| {
        if rel.ends_with(".md") {
            files.push(rel);
        } else {
            strays.push(rel);
        }
    };
    for (op, is_dir) in list(&root.join(MESSAGES)) {
        if !is_dir {
            strays.push(format!("{MESSAGES}/{op}"));
            continue;
        }
        for (agent, is_dir) in list(&root.join(MESSAGES).join(&op)) {
            if !is_dir {
                strays.push(format!("{MESSAGES}/{op}/{agent}"));
                continue;
            }
            for (name, is_dir) in list(&root.join(naming::message_dir(&op, &agent))) {
                let rel = format!("{MESSAGES}/{op}/{agent}/{name}");
                if is_dir {
                    strays.push(rel);
                } else {
                    file(rel, &mut files, &mut strays);
                }
            }
        }
    }
    for (name, is_dir) in list(&root.join(BROADCAST)) {
        let rel = format!("{BROADCAST}/{name}");
        if is_dir {
            strays.push(rel);
        } else {
            file(rel, &mut files, &mut strays);
        }
    }
    for (topic, is_dir) in list(&root.join(KNOWLEDGE)) {
        if !is_dir {
            strays.push(format!("{KNOWLEDGE}/{topic}"));
            continue;
        }
        for (name, is_dir) in list(&root.join(KNOWLEDGE).join(&topic)) {
            let rel = format!("{KNOWLEDGE}/{topic}/{name}");
            if is_dir {
                strays.push(rel);
            } else {
                file(rel, &mut files, &mut strays);
            }
        }
    }
    (files, strays)
}

enum Read {
    Message(Message),
    Publication(Publication),
    Bad(String),
}

/// The largest artifact a reader opens; a bigger file is reported and skipped, so one foreign file
/// cannot make every reader hold gigabytes.
pub const MAX_ARTIFACT_BYTES: u64 = 4 << 20;

fn read_one(root: &Path, rel: &str) -> Read {
    let path = root.join(rel);
    // A symbolic link in somebody's commit could point at any file of this machine (a key, a
    // config); only regular files are artifacts, and nothing follows a link.
    match std::fs::symlink_metadata(&path) {
        Ok(m) if m.file_type().is_symlink() => {
            return Read::Bad("unsafe: a symbolic link, not a file; it is not followed".into());
        }
        Ok(m) if !m.is_file() => return Read::Bad("not a regular file".into()),
        Ok(m) if m.len() > MAX_ARTIFACT_BYTES => {
            return Read::Bad(format!(
                "unsafe: {} bytes, larger than the {MAX_ARTIFACT_BYTES} an artifact may have",
                m.len()
            ));
        }
        Ok(_) => {}
        Err(e) => return Read::Bad(e.to_string()),
    }
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) => return Read::Bad(e.to_string()),
    };
    let Ok(text) = String::from_utf8(bytes) else {
        return Read::Bad(FormatError::NotUtf8.to_string());
    };
    let result = match naming::place(rel) {
        Place::Knowledge { .. } => frontmatter::read_publication(&text).map(Read::Publication),
        _ => frontmatter::read_message(&text).map(Read::Message),
    };
    result.unwrap_or_else(|e| Read::Bad(e.to_string()))
}

/// Reads every artifact under `root`, on every core: a share of 10,000 messages is read in a
/// fraction of a second.
pub fn snapshot(root: &Path) -> Result<Snapshot, ShareError> {
    let (files, strays) = artifact_paths(root);
    let threads = std::thread::available_parallelism()
        .map_or(1, usize::from)
        .clamp(1, 8);
    let chunk = files.len().div_ceil(threads).max(1);
    // Each reader returns its paths with what it read, so a reader that failed loses only its
    // own part, never shifts another file's content onto the wrong path.
    let read: Vec<(String, Read)> = std::thread::scope(|s| {
        let handles: Vec<_> = files
            .chunks(chunk)
            .map(|part| {
                s.spawn(move || {
                    part.iter()
                        .map(|rel| (rel.clone(), read_one(root, rel)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_default())
            .collect()
    });
    let mut snap = Snapshot {
        strays,
        ..Snapshot::default()
    };
    for (rel, r) in read {
        match r {
            Read::Message(doc) if rel.starts_with(BROADCAST) => {
                snap.broadcasts.push(Located { path: rel, doc })
            }
            Read::Message(doc) => snap.messages.push(Located { path: rel, doc }),
            Read::Publication(doc) => snap.publications.push(Located { path: rel, doc }),
            Read::Bad(error) => snap.malformed.push(Malformed { path: rel, error }),
        }
    }
    Ok(snap)
}

/// The absolute path of a share-relative one.
pub fn absolute(root: &Path, rel: &str) -> PathBuf {
    root.join(rel)
}
