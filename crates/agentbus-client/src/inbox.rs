//! An agent's local inbox: every envelope the gateway delivered, one file per `id`
//! (`<home>/agents/<agent_id>/inbox/<id>.json`), created with a hard link so a second copy of the
//! same id can never be written: the unique index on `id` that §8 asks of the sidecar. Beside it:
//! `cursor` (the last persisted inbox sequence, where a restart resumes), `attachments/<msg id>/`,
//! `unimported/<key>` (stored envelopes local delivery had no room for yet) and `sidecar.lock`,
//! held by the process that receives for this agent.

use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use agentbus_protocol::ids::{Id, IdKind};

use crate::error::{ClientError, Result, io};
use crate::profile::{create_private_dir, entries_of, sync_dir, write_private_atomic};

/// A problem found with a received envelope; it is stored all the same.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Diagnostic {
    /// The `AB-` code.
    pub code: String,
    /// What was found.
    pub message: String,
}

/// An attachment saved next to the inbox.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct SavedAttachment {
    /// The name the sender gave.
    pub name: String,
    /// Where it was saved (inside the message's attachments folder), when it was.
    pub path: Option<PathBuf>,
    /// The blob reference.
    #[serde(rename = "ref")]
    pub blob_ref: String,
}

/// One received envelope with what the receiver found.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Received {
    /// The inbox sequence it came with.
    pub sequence: u64,
    /// `"true"` when the signature verified against the sender's registered key, else `"false"`.
    pub verified: String,
    /// Problems (AB-1303 for a failed re-verification).
    #[serde(default)]
    pub diagnostics: Vec<Diagnostic>,
    /// Attachments saved.
    #[serde(default)]
    pub attachments: Vec<SavedAttachment>,
    /// When this machine stored it (RFC 3339).
    pub stored_at: String,
    /// The task it belongs to, as the receiver learned it (a `task.request`'s task comes from the
    /// gateway; lifecycle messages carry theirs in `data.task_id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    /// It arrived after its task's terminal state (the gateway's timeline flags it, §6.3).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub late: bool,
    /// For a task request still open when it arrived: when it stops being open to this worker
    /// (the task's accept deadline or `expires_at`, §6.1), in Unix milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_ms: Option<i64>,
    /// Why it is kept from the agent's sessions (`require_verified_inbound`, §13.1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<String>,
    /// The envelope as delivered.
    pub envelope: Map<String, Value>,
}

impl Received {
    /// The envelope's id.
    pub fn id(&self) -> &str {
        self.envelope
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or("")
    }

    /// A string attribute of the envelope.
    pub fn attr(&self, name: &str) -> Option<&str> {
        self.envelope.get(name).and_then(Value::as_str)
    }
}

/// The local inbox of one agent.
#[derive(Debug, Clone)]
pub struct AgentInbox {
    dir: PathBuf,
}

/// The file name an envelope id is stored under: the id itself when it is a well-formed `msg_`
/// id (so it cannot name a path), else a digest of it.
pub fn file_key(id: &str) -> String {
    if Id::parse_kind(id, IdKind::Message).is_ok() {
        id.to_owned()
    } else {
        use sha2::Digest as _;
        format!(
            "x_{}",
            &hex::encode(sha2::Sha256::digest(id.as_bytes()))[..32]
        )
    }
}

/// A file name for an attachment that cannot leave its folder nor show other than it is: path
/// separators, control characters, invisible and bidirectional ones (an RLO would show
/// `invoice<RLO>txt.exe` as `invoiceexe.txt` in a file manager) and leading dots are replaced,
/// `.`/`..`/empty become `attachment`, and the length is capped.
pub fn sanitize_name(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| {
            if c == '/'
                || c == '\\'
                || c == ':'
                || c.is_control()
                || agentbus_protocol::frame::is_hidden(c)
            {
                '_'
            } else {
                c
            }
        })
        .collect();
    while out.starts_with('.') {
        out.replace_range(..1, "_");
    }
    let trimmed = out.trim().to_owned();
    let mut out = if trimmed.is_empty() {
        "attachment".to_owned()
    } else {
        trimmed
    };
    while out.len() > 200 {
        out.pop();
    }
    out
}

impl AgentInbox {
    /// The inbox in `agent_dir` (created on first write).
    pub fn new(agent_dir: impl Into<PathBuf>) -> AgentInbox {
        AgentInbox {
            dir: agent_dir.into(),
        }
    }

    /// The agent's folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn inbox_dir(&self) -> PathBuf {
        self.dir.join("inbox")
    }

    fn path_of(&self, id: &str) -> PathBuf {
        self.inbox_dir().join(format!("{}.json", file_key(id)))
    }

    /// Whether an envelope with `id` is stored.
    pub fn has(&self, id: &str) -> bool {
        self.path_of(id).exists()
    }

    /// The stored envelope `id`.
    pub fn get(&self, id: &str) -> Result<Option<Received>> {
        let path = self.path_of(id);
        match fs::read(&path) {
            Ok(b) => serde_json::from_slice(&b)
                .map(Some)
                .map_err(|e| ClientError::Invalid(format!("{}: {e}", path.display()))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io(&path)(e)),
        }
    }

    /// Stores `r` durably unless an envelope with its id is already stored. Returns whether it
    /// was new. The file is written and fsynced under a temporary name, then hard-linked to its
    /// final name, which fails when the name exists: two writers of one id cannot both win.
    pub fn persist(&self, r: &Received) -> Result<bool> {
        let dir = self.inbox_dir();
        create_private_dir(&dir)?;
        let path = self.path_of(r.id());
        if path.exists() {
            return Ok(false);
        }
        let tmp = dir.join(format!(".{}.{}.tmp", file_key(r.id()), std::process::id()));
        {
            let mut f = fs::File::create(&tmp).map_err(io(&tmp))?;
            f.write_all(&serde_json::to_vec_pretty(r).unwrap_or_default())
                .map_err(io(&tmp))?;
            f.sync_all().map_err(io(&tmp))?;
        }
        let linked = fs::hard_link(&tmp, &path);
        let _ = fs::remove_file(&tmp);
        match linked {
            Ok(()) => {
                sync_dir(&path);
                Ok(true)
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(io(&path)(e)),
        }
    }

    /// The file keys of every stored envelope (cheap: no file is read).
    pub fn keys(&self) -> Result<Vec<String>> {
        let dir = self.inbox_dir();
        let entries = entries_of(&dir)?;
        Ok(entries
            .into_iter()
            .filter_map(|e| {
                let name = e.file_name().to_str()?.to_owned();
                let key = name.strip_suffix(".json")?;
                (!name.starts_with('.')).then(|| key.to_owned())
            })
            .collect())
    }

    /// Every stored envelope, in sequence order.
    pub fn list(&self) -> Result<Vec<Received>> {
        let dir = self.inbox_dir();
        let entries = entries_of(&dir)?;
        let mut out = Vec::new();
        for e in entries {
            let name = e.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.starts_with('.') || !name.ends_with(".json") {
                continue;
            }
            let path = e.path();
            let bytes = fs::read(&path).map_err(io(&path))?;
            if let Ok(r) = serde_json::from_slice::<Received>(&bytes) {
                out.push(r);
            }
        }
        out.sort_by_key(|r| r.sequence);
        Ok(out)
    }

    /// Records an envelope this agent sent (`sent/<id>.json`), so `trace <msg id>` finds its
    /// conversation. Not part of the inbox and its unique index.
    pub fn record_sent(&self, envelope: &Map<String, Value>) -> Result<()> {
        let dir = self.dir.join("sent");
        create_private_dir(&dir)?;
        let id = envelope
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let path = dir.join(format!("{}.json", file_key(id)));
        write_private_atomic(
            &path,
            &serde_json::to_vec_pretty(envelope).unwrap_or_default(),
        )
    }

    /// An envelope this agent sent, when recorded.
    pub fn sent(&self, id: &str) -> Option<Map<String, Value>> {
        let path = self.dir.join("sent").join(format!("{}.json", file_key(id)));
        serde_json::from_slice(&fs::read(path).ok()?).ok()
    }

    /// The last persisted sequence (0 when none).
    pub fn cursor(&self) -> u64 {
        fs::read_to_string(self.dir.join("cursor"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Moves the cursor forward to `sequence` (never back), durably.
    pub fn advance_cursor(&self, sequence: u64) -> Result<()> {
        if sequence <= self.cursor() {
            return Ok(());
        }
        create_private_dir(&self.dir)?;
        write_private_atomic(&self.dir.join("cursor"), sequence.to_string().as_bytes())
    }

    fn unimported_dir(&self) -> PathBuf {
        self.dir.join("unimported")
    }

    /// The mark's name: the sequence first, so names sort in the order the envelopes came.
    fn unimported_path(&self, r: &Received) -> PathBuf {
        self.unimported_dir()
            .join(format!("{:020}-{}", r.sequence, file_key(r.id())))
    }

    /// Marks the stored envelope `r` as not yet taken by local delivery (its bound for this
    /// agent's messages held only ones no session was shown), so it is handed over again later.
    pub fn mark_unimported(&self, r: &Received) -> Result<()> {
        create_private_dir(&self.unimported_dir())?;
        write_private_atomic(&self.unimported_path(r), r.id().as_bytes())
    }

    /// Clears a mark [`Self::unimported`] listed.
    pub fn clear_unimported(&self, mark: &Path) -> Result<()> {
        match fs::remove_file(mark) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io(mark)(e)),
        }
    }

    /// The marks of the stored envelopes marked unimported, with their ids, in the order the
    /// envelopes came; only the marks are read.
    pub fn unimported(&self) -> Result<Vec<(PathBuf, String)>> {
        let dir = self.unimported_dir();
        let entries = entries_of(&dir)?;
        let mut marks: Vec<PathBuf> = entries
            .into_iter()
            .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
            .map(|e| e.path())
            .collect();
        marks.sort();
        Ok(marks
            .into_iter()
            .filter_map(|p| Some((p.clone(), fs::read_to_string(&p).ok()?)))
            .collect())
    }

    /// The folder for `msg_id`'s attachments.
    pub fn attachments_dir(&self, msg_id: &str) -> PathBuf {
        self.dir.join("attachments").join(file_key(msg_id))
    }

    /// Where attachment `name` of `msg_id` is saved: always inside [`Self::attachments_dir`].
    pub fn attachment_path(&self, msg_id: &str, name: &str) -> PathBuf {
        self.attachments_dir(msg_id).join(sanitize_name(name))
    }

    /// The lock file a receiving process holds.
    pub fn lock_path(&self) -> PathBuf {
        self.dir.join("sidecar.lock")
    }

    /// Takes the receive lock without waiting; `None` when another process holds it.
    pub fn try_lock(&self) -> Result<Option<fs::File>> {
        create_private_dir(&self.dir)?;
        let path = self.lock_path();
        let f = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io(&path))?;
        match f.try_lock() {
            Ok(()) => Ok(Some(f)),
            Err(fs::TryLockError::WouldBlock) => Ok(None),
            Err(fs::TryLockError::Error(e)) => Err(io(&path)(e)),
        }
    }

    /// Whether a receiving process (the sidecar) holds the lock now.
    pub fn is_locked(&self) -> bool {
        matches!(self.try_lock(), Ok(None))
    }

    /// The sidecar's status file.
    pub fn status_path(&self) -> PathBuf {
        self.dir.join("sidecar.json")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn received(id: &str, seq: u64) -> Received {
        Received {
            sequence: seq,
            verified: "true".into(),
            diagnostics: vec![],
            attachments: vec![],
            stored_at: "2026-11-30T00:00:00.000Z".into(),
            task: None,
            late: false,
            expires_ms: None,
            held: None,
            envelope: json!({"id": id}).as_object().unwrap().clone(),
        }
    }

    #[test]
    fn wp_8_unique_index_on_id() {
        let tmp = tempfile::tempdir().unwrap();
        let inbox = AgentInbox::new(tmp.path());
        let id = "msg_01J9ZK6Q8R2M3N4P5Q6R7S8T9V";
        assert!(inbox.persist(&received(id, 1)).unwrap());
        assert!(
            !inbox.persist(&received(id, 1)).unwrap(),
            "a redelivery is a duplicate"
        );
        assert_eq!(inbox.list().unwrap().len(), 1);
        // An id that is not a msg_ id cannot name a path.
        assert!(inbox.persist(&received("../../x", 2)).unwrap());
        assert!(file_key("../../x").starts_with("x_"));
        assert_eq!(inbox.list().unwrap().len(), 2);
    }

    #[test]
    fn the_cursor_only_moves_forward() {
        let tmp = tempfile::tempdir().unwrap();
        let inbox = AgentInbox::new(tmp.path());
        assert_eq!(inbox.cursor(), 0);
        inbox.advance_cursor(5).unwrap();
        inbox.advance_cursor(3).unwrap();
        assert_eq!(inbox.cursor(), 5);
    }

    #[test]
    fn attachment_names_cannot_escape_their_folder() {
        let tmp = tempfile::tempdir().unwrap();
        let inbox = AgentInbox::new(tmp.path());
        let id = "msg_01J9ZK6Q8R2M3N4P5Q6R7S8T9V";
        let base = inbox.attachments_dir(id);
        for name in [
            "../../etc/passwd",
            "..",
            ".",
            "",
            "/abs/path",
            "a\\..\\b",
            "C:evil",
            "ok.txt",
            ".hidden",
            "x\u{0}y",
        ] {
            let p = inbox.attachment_path(id, name);
            assert_eq!(
                p.parent(),
                Some(base.as_path()),
                "{name:?} -> {}",
                p.display()
            );
            let file = p.file_name().unwrap().to_str().unwrap();
            assert!(!file.starts_with('.') && !file.is_empty(), "{name:?}");
        }
        assert_eq!(sanitize_name("ok.txt"), "ok.txt");
        // Nothing that shows other than it is reaches the disk: an RLO, a zero-width space.
        assert_eq!(sanitize_name("invoice\u{202E}txt.exe"), "invoice_txt.exe");
        assert_eq!(sanitize_name("notes\u{200B}.txt"), "notes_.txt");
        assert_eq!(sanitize_name("résumé 📄.pdf"), "résumé 📄.pdf");
    }

    #[test]
    fn only_one_process_holds_the_receive_lock() {
        let tmp = tempfile::tempdir().unwrap();
        let inbox = AgentInbox::new(tmp.path());
        let held = inbox.try_lock().unwrap();
        assert!(held.is_some());
        assert!(inbox.try_lock().unwrap().is_none());
        drop(held);
        assert!(inbox.try_lock().unwrap().is_some());
    }
}
