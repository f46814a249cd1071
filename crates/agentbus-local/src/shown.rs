//! "Shown" records: which message that arrived through the gateway was first put in front of a
//! model, when, and into which harness, so the receiving sidecar can report it
//! to the gateway and send the read receipt §5.8 describes. The hook stays network-free: it only
//! writes a record, and only when it shows such a message, never when idle.
//!
//! One file per message and recipient agent:
//!
//! ```text
//! <home>/messages/shown/<agent key>/<lm id>.json          written once, at the first showing
//! <home>/messages/shown/<agent key>/<lm id>.pushed.json   written once, at the first push
//! <home>/messages/shown/<agent key>/reported/<name>       moved there once the gateway has it
//! ```
//!
//! A push (an MCP channel notification) is sent to a client that may drop it, so it is its own
//! state, `pushed`, and never a showing: the message stays unclaimed for a surface that shows it.
//!
//! The first showing wins: the record is written under a temporary name and hard-linked into
//! place, which fails when the name exists, so of any number of hooks showing the message to
//! sessions bound to the same agent, one record stands. The agent key is a digest of the agent
//! identity, so a sidecar lists only its own agent's records.

use std::fs;
use std::io;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use agentbus_protocol::frame::Transport;

use crate::consts::{SLACK_MS, TTL_MS};
use crate::line::{Message, is_id};
use crate::store::{Store, StoreError, create_exclusive, entries, io_at};

/// Where and when a message was first shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShownRecord {
    /// The local id (`lm_…`).
    pub id: String,
    /// The transport's id (`msg_…`).
    pub message_id: String,
    /// The agent identity it was for.
    pub to: String,
    /// Who was shown it: a session id (records written before a person's view stopped counting
    /// as a showing may say `engineer[:<email>]`).
    pub by: String,
    /// What showed it: `claude`, `codex`, `opencode`, or the name another delivery surface gives
    /// (an MCP server's). A person's view (`agentbus inbox`) writes no record: it is no showing.
    pub harness: String,
    /// The harness event that put it in context (`UserPromptSubmit`, `tool.execute.after`, …).
    pub event: String,
    /// When, in Unix milliseconds.
    pub ms: i64,
    /// Shown, or only pushed to a client that may drop it.
    #[serde(default, skip_serializing_if = "SeenState::is_shown")]
    pub state: SeenState,
}

/// How far a record says a message got.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SeenState {
    /// Put in front of the model.
    #[default]
    Shown,
    /// Sent to a client that may drop it (`docs/delivery.md`: between acknowledged and shown).
    Pushed,
}

impl SeenState {
    /// Its name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            SeenState::Shown => "shown",
            SeenState::Pushed => "pushed",
        }
    }

    fn is_shown(&self) -> bool {
        *self == SeenState::Shown
    }

    /// The record's file name for message `id`.
    fn file_name(self, id: &str) -> String {
        match self {
            SeenState::Shown => format!("{id}.json"),
            SeenState::Pushed => format!("{id}.pushed.json"),
        }
    }
}

/// The directory name of `agent`'s records.
pub fn agent_key(agent: &str) -> String {
    hex::encode(&Sha256::digest(agent.as_bytes())[..12])
}

impl Store {
    fn shown_dir(&self, agent: &str) -> PathBuf {
        self.dir().join("shown").join(agent_key(agent))
    }

    /// Records that `m` was shown to `by` through `harness` at `event`, if `m` came through the
    /// gateway and no earlier showing was recorded. Returns whether this call wrote the record.
    /// Best effort for its caller: a record that cannot be written costs a receipt, never the
    /// message, which was claimed and shown already.
    pub fn record_shown(
        &self,
        m: &Message,
        by: &str,
        harness: &str,
        event: &str,
    ) -> Result<bool, StoreError> {
        self.record_seen(m, by, harness, event, SeenState::Shown)
    }

    /// Records that `m` was pushed to `by` through `harness` at `event` (a notification the
    /// client may drop), if `m` came through the gateway and neither a push nor a showing of it
    /// was recorded. Returns whether this call wrote the record; best effort like
    /// [`Store::record_shown`].
    pub fn record_pushed(
        &self,
        m: &Message,
        by: &str,
        harness: &str,
        event: &str,
    ) -> Result<bool, StoreError> {
        let dir = self.shown_dir(&m.to);
        let shown = SeenState::Shown.file_name(&m.id);
        if dir.join(&shown).exists() || dir.join("reported").join(&shown).exists() {
            return Ok(false);
        }
        self.record_seen(m, by, harness, event, SeenState::Pushed)
    }

    fn record_seen(
        &self,
        m: &Message,
        by: &str,
        harness: &str,
        event: &str,
        state: SeenState,
    ) -> Result<bool, StoreError> {
        let Some(via) = m.via.as_ref().filter(|v| v.transport == Transport::Gateway) else {
            return Ok(false);
        };
        let dir = self.shown_dir(&m.to);
        let name = state.file_name(&m.id);
        if dir.join("reported").join(&name).exists() {
            return Ok(false);
        }
        fs::create_dir_all(&dir).map_err(io_at(&dir))?;
        let record = ShownRecord {
            id: m.id.clone(),
            message_id: via.shown_id().to_owned(),
            to: m.to.clone(),
            by: by.to_owned(),
            harness: harness.to_owned(),
            event: event.to_owned(),
            ms: self.now(),
            state,
        };
        let record = serde_json::to_string(&record).unwrap_or_default();
        create_exclusive(&dir.join(&name), record.as_bytes())
    }

    /// The records of `agent`'s messages shown and not reported yet, oldest first.
    pub fn shown_pending(&self, agent: &str) -> Result<Vec<ShownRecord>, StoreError> {
        let mut out: Vec<ShownRecord> = entries(&self.shown_dir(agent))?
            .into_iter()
            .filter(|e| {
                e.file_name()
                    .to_str()
                    .and_then(|n| n.strip_suffix(".json"))
                    .map(|n| n.strip_suffix(".pushed").unwrap_or(n))
                    .is_some_and(is_id)
            })
            .filter_map(|e| fs::read(e.path()).ok())
            .filter_map(|b| serde_json::from_slice::<ShownRecord>(&b).ok())
            .filter(|r| r.to == agent)
            .collect();
        // A message's push before its showing, whatever the clock says.
        out.sort_by(|a, b| {
            a.ms.cmp(&b.ms)
                .then(a.id.cmp(&b.id))
                .then((a.state == SeenState::Shown).cmp(&(b.state == SeenState::Shown)))
        });
        Ok(out)
    }

    /// A cheap mark of `agent`'s pending records (the directory's modification time): it changes
    /// whenever a record is written or moved, so a sidecar lists the directory only then.
    pub fn shown_mark(&self, agent: &str) -> Option<std::time::SystemTime> {
        fs::metadata(self.shown_dir(agent))
            .and_then(|m| m.modified())
            .ok()
    }

    /// Moves a record to `reported/`, once the gateway has it, so it is not reported again and a
    /// later showing records nothing. Reported records older than the TTL and slack are removed.
    pub fn shown_reported(&self, record: &ShownRecord) -> Result<(), StoreError> {
        if !is_id(&record.id) {
            // Not a record this store wrote: nothing of ours to move.
            return Ok(());
        }
        let dir = self.shown_dir(&record.to);
        let done = dir.join("reported");
        fs::create_dir_all(&done).map_err(io_at(&done))?;
        let name = record.state.file_name(&record.id);
        let to = done.join(&name);
        match fs::rename(dir.join(&name), &to) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_at(&to)(e)),
        }
        self.prune_reported(&done);
        Ok(())
    }

    fn prune_reported(&self, done: &std::path::Path) {
        let cutoff = self.now() - TTL_MS - SLACK_MS;
        let Ok(entries) = fs::read_dir(done) else {
            return;
        };
        for e in entries.filter_map(Result::ok) {
            let old = e
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .is_some_and(|d| (d.as_millis() as i64) < cutoff);
            if old {
                let _ = fs::remove_file(e.path());
            }
        }
    }
}

impl Store {
    /// The record of `id` (a local `lm_` id) shown to `agent`'s sessions, reported or not.
    pub fn shown_record(&self, agent: &str, id: &str) -> Option<ShownRecord> {
        if !is_id(id) {
            return None;
        }
        let dir = self.shown_dir(agent);
        let name = format!("{id}.json");
        [dir.join(&name), dir.join("reported").join(&name)]
            .iter()
            .find_map(|p| fs::read(p).ok())
            .and_then(|b| serde_json::from_slice(&b).ok())
    }
}
