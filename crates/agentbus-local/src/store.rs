//! The store on disk: one directory per machine (G-LM-11).
//!
//! ```text
//! <home>/                       AGENTBUS_HOME, else ~/.agentbus
//!   node                        this node's id (random, made at first use), unless
//!   mesh/node.pub               a transport published a member key (LM: node, LM-24)
//!   messages.jsonl              the log: one JSON line per message or Seen (LM-1)
//!   messages/lock               the write lock (std File::lock); the log is replaced by rename
//!   messages/generation         the talk record: `<generation> <log mark>` (LM-53)
//!   messages/scanned/<session>  what the session's last full look found (LM-55)
//!   messages/continued/<session> ends of turns kept going since its user's last prompt
//!   messages/seen/<session>/<id> delivery claims, created exclusively (LM-39)
//!   messages/claimed/<key>/<id>  an agent identity's claims: one session of it shows each
//!   messages/imported/<id>       every message another transport imported, imported once
//!   messages/sessions/<session>.json  presence: harness, start, name, bound agent (G-LM-18)
//!   messages/stats.json         cut counts (LM-76)
//! ```
//!
//! Every writer takes the lock, reads the log, bounds it ([`crate::bound`]), and then either
//! appends its lines with one `write_all` or, when the bound cut something, writes the kept lines
//! to a temporary file and renames it over the log. Readers take no lock: a rename is atomic, and
//! a torn last line (a writer that died mid-append) is skipped, and terminated by the next writer.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use agentbus_protocol::Code;
use agentbus_protocol::errors::Catalogued;
use agentbus_runtime::Clock;

use crate::bound::{Bounded, bound};
use crate::line::{Line, Message};

/// The environment variable that overrides the store's home.
pub const HOME_ENV: &str = "AGENTBUS_HOME";

/// A failure of the store's own files.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A file or directory of the store could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// No home directory: neither `AGENTBUS_HOME` nor `HOME` is set.
    #[error("no store: set AGENTBUS_HOME (or HOME, for the default ~/.agentbus)")]
    NoHome,
    /// A session id that cannot be used (it would become a path).
    #[error("{0:?} is not a session id: use letters, digits, '.', '_' and '-' (at most 128)")]
    BadSession(String),
}

impl Catalogued for StoreError {
    fn code(&self) -> Code {
        match self {
            StoreError::Io { .. } => Code::LocalStateFailed,
            StoreError::NoHome => Code::NoStateHome,
            StoreError::BadSession(_) => Code::BadSessionId,
        }
    }
}

impl StoreError {
    /// An IO error at `path`.
    pub fn from_io(path: &Path, source: io::Error) -> StoreError {
        StoreError::Io {
            path: path.to_owned(),
            source,
        }
    }
}

/// `map_err` helper naming the path.
pub(crate) fn io_at(path: &Path) -> impl FnOnce(io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_owned(),
        source,
    }
}

/// The local store of one machine.
#[derive(Clone)]
pub struct Store {
    home: PathBuf,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("home", &self.home).finish()
    }
}

/// The cut counts of `stats.json` (LM-76).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    /// Lines cut by the byte bound (MSG_DROPPED).
    pub dropped: u64,
    /// Lines cut for being past the TTL.
    pub expired: u64,
}

/// What a locked write did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Wrote {
    /// The bound's outcome over the old lines plus the new.
    pub bounded: Bounded,
    /// Whether the talk generation moved.
    pub moved: bool,
}

/// The log as a writer found it under the lock.
pub struct Snapshot {
    /// Every complete line as written, in file order.
    pub raw: Vec<Vec<u8>>,
    /// Every well-formed line, in file order.
    pub lines: Vec<Line>,
    /// This node.
    pub node: String,
    /// The time of the write.
    pub now: i64,
}

impl Store {
    /// The store at `home`, reading time from `clock`.
    pub fn open(home: impl Into<PathBuf>, clock: Arc<dyn Clock>) -> Store {
        Store {
            home: home.into(),
            clock,
        }
    }

    /// The documented default home: `AGENTBUS_HOME`, else `$HOME/.agentbus`.
    pub fn default_home() -> Result<PathBuf, StoreError> {
        if let Some(h) = std::env::var_os(HOME_ENV).filter(|h| !h.is_empty()) {
            return Ok(PathBuf::from(h));
        }
        std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(|h| PathBuf::from(h).join(".agentbus"))
            .ok_or(StoreError::NoHome)
    }

    /// The home directory.
    pub fn home(&self) -> &Path {
        &self.home
    }

    /// The current time in Unix milliseconds, from the store's clock.
    pub fn now(&self) -> i64 {
        self.clock.now().millis()
    }

    /// `<home>/messages.jsonl` (LM: FILE).
    pub fn log_path(&self) -> PathBuf {
        self.home.join("messages.jsonl")
    }

    /// `<home>/messages`, where the log's companions live.
    pub fn dir(&self) -> PathBuf {
        self.home.join("messages")
    }

    /// `<home>/messages/seen`: one folder of claims per session (LM: seen_path, LM-83).
    pub fn seen_path(&self) -> PathBuf {
        self.dir().join("seen")
    }

    /// `<home>/mesh/node.pub`: a transport's published member key (LM: node_pub_path).
    pub fn node_pub_path(&self) -> PathBuf {
        self.home.join("mesh").join("node.pub")
    }

    pub(crate) fn generation_path(&self) -> PathBuf {
        self.dir().join("generation")
    }

    pub(crate) fn stats_path(&self) -> PathBuf {
        self.dir().join("stats.json")
    }

    /// This node's id (LM: node, LM-24): the member key a transport published, else a random id
    /// made once and kept in `<home>/node`.
    pub fn node(&self) -> Result<String, StoreError> {
        let published = self.node_pub_path();
        if let Ok(text) = fs::read_to_string(&published) {
            let key = text.trim();
            if crate::address::is_node_id(key) {
                return Ok(key.to_owned());
            }
        }
        let path = self.home.join("node");
        if let Ok(text) = fs::read_to_string(&path) {
            let id = text.trim();
            if crate::address::is_node_id(id) {
                return Ok(id.to_owned());
            }
        }
        fs::create_dir_all(&self.home).map_err(io_at(&self.home))?;
        let fresh = hex::encode(agentbus_runtime::random_bytes::<8>());
        // Created exclusively, so two processes making it at once agree on the first.
        match OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(mut f) => {
                f.write_all(format!("{fresh}\n").as_bytes())
                    .map_err(io_at(&path))?;
                Ok(fresh)
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                let text = fs::read_to_string(&path).map_err(io_at(&path))?;
                Ok(text.trim().to_owned())
            }
            Err(e) => Err(io_at(&path)(e)),
        }
    }

    /// The log's bytes; empty when there is no log.
    pub(crate) fn read_log(&self) -> Result<Vec<u8>, StoreError> {
        let path = self.log_path();
        match fs::read(&path) {
            Ok(b) => Ok(b),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(io_at(&path)(e)),
        }
    }

    /// Every well-formed line, messages and Seen lines, in file order (LM: lines, LM-79).
    pub fn lines(&self) -> Result<Vec<Line>, StoreError> {
        Ok(parse_lines(&self.read_log()?))
    }

    /// Every well-formed message, in file order (LM: read, LM-79): Seen lines, bad lines and
    /// lines of newer versions are skipped.
    pub fn read(&self) -> Result<Vec<Message>, StoreError> {
        Ok(messages(self.lines()?))
    }

    /// The cut counts so far.
    pub fn stats(&self) -> Stats {
        fs::read(self.stats_path())
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }

    /// The talk mark of the log (LM: talk_mark, LM-56): `None` while there is no log. It changes
    /// when a tell, ask or steer is written, when the byte bound cuts, and when anything but this
    /// module's writers changes the file; acknowledgements and TTL cuts leave it (LM-50, LM-51).
    pub fn talk(&self) -> Option<String> {
        let meta = fs::metadata(self.log_path()).ok()?;
        let mark = mark_of(&meta);
        let record = fs::read_to_string(self.generation_path()).unwrap_or_default();
        match record.split_once(' ') {
            Some((generation, recorded)) if recorded.trim_end() == mark => {
                Some(format!("g{generation}"))
            }
            _ => Some(format!("m{mark}")),
        }
    }

    /// The current generation number (0 when there is none): for status output and tests.
    pub fn generation(&self) -> u64 {
        read_generation(&self.generation_path()).0
    }

    /// Writes under the log's lock (LM: wrote). `decide` sees the log as it is and returns the
    /// lines to append, whether they are talk (a tell, ask or steer), and its own result; an
    /// error leaves the log untouched. The log is then bounded; the generation moves for talk, a
    /// byte cut, or a log some other writer changed.
    pub fn write_locked<T, E: From<StoreError>>(
        &self,
        decide: impl FnOnce(&Snapshot) -> Result<(Vec<String>, bool, T), E>,
    ) -> Result<(T, Wrote), E> {
        match self.write_locked_if(true, decide)? {
            Some(done) => Ok(done),
            // A writer that waits always gets the lock; answered as the lock it waited for.
            None => Err(StoreError::from_io(
                &self.dir().join("lock"),
                io::Error::from(io::ErrorKind::WouldBlock),
            )
            .into()),
        }
    }

    /// [`Store::write_locked`], or `None` without writing when `wait` is false and another writer
    /// holds the lock: for a caller that must not wait (a hook the harness kills at its timeout).
    pub fn write_locked_if<T, E: From<StoreError>>(
        &self,
        wait: bool,
        decide: impl FnOnce(&Snapshot) -> Result<(Vec<String>, bool, T), E>,
    ) -> Result<Option<(T, Wrote)>, E> {
        let dir = self.dir();
        fs::create_dir_all(&dir).map_err(io_at(&dir))?;
        let node = self.node()?;
        let lock_path = dir.join("lock");
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(io_at(&lock_path))?;
        if wait {
            lock.lock().map_err(io_at(&lock_path))?;
        } else {
            match lock.try_lock() {
                Ok(()) => {}
                Err(fs::TryLockError::WouldBlock) => return Ok(None),
                Err(fs::TryLockError::Error(e)) => return Err(io_at(&lock_path)(e).into()),
            }
        }

        let log_path = self.log_path();
        let bytes = self.read_log()?;
        let before = fs::metadata(&log_path).ok().map(|m| mark_of(&m));
        let (generation, recorded) = read_generation(&self.generation_path());
        let foreign = before.is_some() && before != recorded;
        let (complete, torn) = split_lines(&bytes);
        let now = self.now();
        let snapshot = Snapshot {
            raw: complete.iter().map(|r| r.to_vec()).collect(),
            lines: complete.iter().filter_map(|r| Line::parse(r)).collect(),
            node,
            now,
        };
        let (new_lines, talk, result) = decide(&snapshot)?;

        let mut all: Vec<&[u8]> = complete.clone();
        all.extend(new_lines.iter().map(String::as_bytes));
        let bounded = bound(&all, now);
        let cut_any = bounded.expired > 0 || bounded.cut > 0;
        if cut_any {
            let mut out = Vec::with_capacity(bytes.len());
            for &i in &bounded.kept {
                out.extend_from_slice(all[i]);
                out.push(b'\n');
            }
            let tmp = dir.join("messages.jsonl.tmp");
            write_file(&tmp, &out)?;
            fs::rename(&tmp, &log_path).map_err(io_at(&log_path))?;
        } else if !new_lines.is_empty() {
            let mut out = Vec::new();
            if torn {
                out.push(b'\n');
            }
            for l in &new_lines {
                out.extend_from_slice(l.as_bytes());
                out.push(b'\n');
            }
            let mut f = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log_path)
                .map_err(io_at(&log_path))?;
            // One write_all per write under the lock, so readers see whole lines or a torn tail.
            f.write_all(&out).map_err(io_at(&log_path))?;
        }

        let moved = talk || bounded.cut > 0 || foreign || recorded.is_none();
        let after = fs::metadata(&log_path).ok().map(|m| mark_of(&m));
        if let Some(after) = after {
            let next = if moved {
                let now_ns = u64::try_from(now).unwrap_or(0).saturating_mul(1_000_000);
                (generation + 1).max(now_ns)
            } else {
                generation
            };
            let gen_path = self.generation_path();
            let tmp = dir.join("generation.tmp");
            write_file(&tmp, format!("{next} {after}\n").as_bytes())?;
            fs::rename(&tmp, &gen_path).map_err(io_at(&gen_path))?;
        }
        if cut_any {
            let mut stats = self.stats();
            stats.dropped += bounded.cut as u64;
            stats.expired += bounded.expired as u64;
            let path = self.stats_path();
            let tmp = dir.join("stats.json.tmp");
            write_file(
                &tmp,
                serde_json::to_string(&stats).unwrap_or_default().as_bytes(),
            )?;
            fs::rename(&tmp, &path).map_err(io_at(&path))?;
        }
        drop(lock);
        Ok(Some((result, Wrote { bounded, moved })))
    }
}

/// Splits the log into complete lines (ending in a newline, which is not included) and says
/// whether a torn tail follows them.
pub(crate) fn split_lines(bytes: &[u8]) -> (Vec<&[u8]>, bool) {
    let mut out = Vec::new();
    let mut rest = bytes;
    while let Some(p) = rest.iter().position(|&b| b == b'\n') {
        if p > 0 {
            out.push(&rest[..p]);
        }
        rest = &rest[p + 1..];
    }
    (out, !rest.is_empty())
}

/// Every well-formed line of `bytes`, in order; a torn tail is skipped.
pub fn parse_lines(bytes: &[u8]) -> Vec<Line> {
    split_lines(bytes)
        .0
        .into_iter()
        .filter_map(Line::parse)
        .collect()
}

/// The messages among `lines`.
pub fn messages(lines: Vec<Line>) -> Vec<Message> {
    lines
        .into_iter()
        .filter_map(|l| match l {
            Line::Message(m) => Some(m),
            Line::Seen(_) => None,
        })
        .collect()
}

/// The mark of a file (LM: mark_of, G-LM-11): its length, modification time in nanoseconds and
/// inode, which every append and every rename changes.
pub fn mark_of(meta: &fs::Metadata) -> String {
    let mtime = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    #[cfg(unix)]
    let ino = std::os::unix::fs::MetadataExt::ino(meta);
    #[cfg(not(unix))]
    let ino = 0u64;
    format!("{}.{mtime}.{ino}", meta.len())
}

/// The generation record: its number and the mark it was written for.
fn read_generation(path: &Path) -> (u64, Option<String>) {
    let text = fs::read_to_string(path).unwrap_or_default();
    match text.trim_end().split_once(' ') {
        Some((g, mark)) => (g.parse().unwrap_or(0), Some(mark.to_owned())),
        None => (0, None),
    }
}

/// Writes a whole small file.
pub(crate) fn write_file(path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    let mut f = File::create(path).map_err(io_at(path))?;
    f.write_all(bytes).map_err(io_at(path))
}

/// Writes `path` whole in one step, for writers that may race: the bytes go to a temporary name
/// of this call's own beside it, which is renamed over it.
pub(crate) fn replace_file(path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    let tmp = temporary_beside(path);
    write_file(&tmp, bytes)?;
    fs::rename(&tmp, path).map_err(io_at(path))
}

/// Creates `path` holding `bytes`, exclusively: `true` when this call made it, `false` when it
/// existed. The bytes are in place before the name exists (written under a temporary name and
/// hard-linked), so no reader sees the file without them; on a file system without hard links it
/// is created exclusively all the same, its bytes a moment later.
pub(crate) fn create_exclusive(path: &Path, bytes: &[u8]) -> Result<bool, StoreError> {
    let create_new = || {
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .and_then(|mut f| f.write_all(bytes))
    };
    let made = if bytes.is_empty() {
        create_new()
    } else {
        let tmp = temporary_beside(path);
        write_file(&tmp, bytes)?;
        let linked = fs::hard_link(&tmp, path);
        let _ = fs::remove_file(&tmp);
        match linked {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => create_new(),
            done => done,
        }
    };
    match made {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(io_at(path)(e)),
    }
}

/// A fresh temporary name in `path`'s folder, starting with a dot and ending in `.tmp`, which no
/// listing of the store reads.
fn temporary_beside(path: &Path) -> PathBuf {
    let nonce = hex::encode(agentbus_runtime::random_bytes::<6>());
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    path.with_file_name(format!(".{name}.{nonce}.tmp"))
}

/// The entries of `dir`, none when it does not exist.
pub(crate) fn entries(dir: &Path) -> Result<Vec<fs::DirEntry>, StoreError> {
    match fs::read_dir(dir) {
        Ok(e) => Ok(e.filter_map(Result::ok).collect()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(io_at(dir)(e)),
    }
}

/// Reads a small file, `None` when it does not exist.
pub(crate) fn read_small(path: &Path) -> Result<Option<String>, StoreError> {
    let mut f = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_at(path)(e)),
    };
    let mut s = String::new();
    f.read_to_string(&mut s).map_err(io_at(path))?;
    Ok(Some(s))
}
