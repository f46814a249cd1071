//! The line format of `messages.jsonl`, version 1 (G-LM-3), and the checks every line passes on
//! read (LM: Message::well_formed, Seen::well_formed, LM-16).
//!
//! A message line:
//!
//! ```json
//! {"v":1,"id":"lm_…","kind":"tell","node":"…","by":"…","name":"…","harness":"claude","to":"local@…","ms":1764500000000,"text":"…","re":"lm_…"}
//! ```
//!
//! `name`, `harness` and `re` are optional; an imported line adds `via` (see [`Via`]). A Seen line:
//!
//! ```json
//! {"v":1,"kind":"seen","node":"…","by":"…","ms":1764500000000,"ids":["lm_…"]}
//! ```
//!
//! Unknown fields are ignored, so a later version may add fields without a new `v`; a change that
//! older readers must not misread takes a new `v`, which this version skips (LM-16).

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use agentbus_protocol::frame::{Transport, Verified};

use crate::address::{Address, is_agent_identity, is_engineer, is_node_id, is_session_id};
use crate::consts::{BY_CHARS, LINE_VERSION, MAX_LINE_BYTES, NAME, SEEN_IDS, WIRE_TEXT};

/// What a message does (LM: Kind, LM-12). Tell and Ask are conversation; Pause, Resume and Veto
/// steer their recipient and count only under an admitted role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Informs.
    Tell,
    /// Asks for a reply.
    Ask,
    /// Stops the recipient's tool calls until a resume (G-LM-7).
    Pause,
    /// Lifts a pause.
    Resume,
    /// A remote "no": parsed and kept so it is never mistaken for conversation; it has no effect
    /// in this version (see `docs/local.md`).
    Veto,
}

impl Kind {
    /// The word a line writes.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Tell => "tell",
            Kind::Ask => "ask",
            Kind::Pause => "pause",
            Kind::Resume => "resume",
            Kind::Veto => "veto",
        }
    }

    /// Whether this is conversation (tell or ask), which is shown, paced and counted.
    pub fn is_conversation(self) -> bool {
        matches!(self, Kind::Tell | Kind::Ask)
    }

    /// Whether this is a steer.
    pub fn is_steer(self) -> bool {
        !self.is_conversation()
    }
}

/// The kind a Seen line names. Not a [`Kind`], so a Seen line never parses as a [`Message`]
/// (LM: SEEN, LM-43).
pub const SEEN: &str = "seen";

/// A message's `priority` (wire protocol §2.1: `low`, `normal` or `high`), which decides only
/// whether it keeps a session going at the end of its turn (see `Store::hook`); it never changes
/// delivery itself. A local line has none and counts as [`Priority::Normal`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    /// Waits for the session's next prompt.
    Low,
    /// Keeps the session going unless the engineer turned that off.
    #[default]
    Normal,
    /// Always keeps the session going (within the bound on continuations).
    High,
}

impl Priority {
    /// Parses the attribute; an unknown value falls back to `normal` (checklist G-WP-32).
    pub fn parse(s: &str) -> Priority {
        match s {
            "low" => Priority::Low,
            "high" => Priority::High,
            _ => Priority::Normal,
        }
    }

    /// The attribute value.
    pub fn as_str(self) -> &'static str {
        match self {
            Priority::Low => "low",
            Priority::Normal => "normal",
            Priority::High => "high",
        }
    }

    fn is_normal(&self) -> bool {
        *self == Priority::Normal
    }
}

impl<'de> Deserialize<'de> for Priority {
    // Leniently: a line whose priority this version does not know is still read, as `normal`.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Priority, D::Error> {
        Ok(Priority::parse(&String::deserialize(d)?))
    }
}

/// Where an imported message came from: the fields another transport hands to
/// [`crate::Store::import`], kept so the hook frames it as that transport would.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Via {
    /// The transport that carried it (`gateway` or `share`).
    pub transport: Transport,
    /// The transport's own id of the message; import is idempotent on (transport, this).
    pub ext_id: String,
    /// The message type (`agentbus.message.v1`, an agentshare kind, …).
    #[serde(rename = "type")]
    pub kind: String,
    /// The conversation or thread id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation: Option<String>,
    /// The subject line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// Whether the transport verified the sender.
    pub verified: Verified,
    /// Local paths of saved attachments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<String>,
    /// The command that answers it, as the transport gives it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply: Option<String>,
    /// When the sender sent it, in Unix milliseconds.
    pub sent_ms: i64,
    /// The message's id as its transport names it to people (a gateway envelope's `msg_` id),
    /// when it differs from `ext_id` (a share's id is `<message id>#<recipient>` there). Absent
    /// on lines written before it existed: `ext_id` is then the id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The task the message belongs to (§6), for the frame's `task` attribute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    /// It arrived after its task's terminal state (§6.3): framed `late`, with a warning.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub late: bool,
    /// For a task request: when it stops being open to its worker (Unix ms, §6.1); shown after
    /// it, its frame says it expired and suggests no verb.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_ms: Option<i64>,
    /// Why it must not be injected into a session (`require_verified_inbound`, §13.1): kept for
    /// the engineer's `inbox`, never shown by the hook.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<String>,
    /// The sender's `priority` (absent: `normal`).
    #[serde(default, skip_serializing_if = "Priority::is_normal")]
    pub priority: Priority,
}

impl Via {
    /// The message's id as people and its transport's commands name it.
    pub fn shown_id(&self) -> &str {
        self.id.as_deref().unwrap_or(&self.ext_id)
    }

    /// When, at `now_ms`, this is a task request no longer open to its worker: the time it
    /// expired (§6.1).
    pub fn expired_at(&self, now_ms: i64) -> Option<agentbus_protocol::timestamp::Timestamp> {
        self.expires_ms
            .filter(|at| *at <= now_ms)
            .map(agentbus_protocol::timestamp::Timestamp)
    }
}

/// One message of `messages.jsonl` (LM: Message).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// The line version.
    pub v: u64,
    /// The id, derived from the content (LM-21).
    pub id: String,
    /// What it does.
    pub kind: Kind,
    /// The node that wrote it, the one field a carrier checks (LM-2, LM-9).
    pub node: String,
    /// The sender: a session id, `engineer[:<email>]`, or an imported sender's address.
    pub by: String,
    /// The display name the sender gave.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The sender's harness.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub harness: Option<String>,
    /// The recipient, as [`Address`] writes it.
    pub to: String,
    /// When it was written, in Unix milliseconds.
    pub ms: i64,
    /// The redacted text (for a steer, the reason).
    pub text: String,
    /// The id of the message this one answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub re: Option<String>,
    /// Set on a message imported from another transport.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<Via>,
}

/// What a recipient was shown (LM: Seen): one line per delivery event, listing ids.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seen {
    /// The line version.
    pub v: u64,
    /// Always [`SEEN`].
    pub kind: String,
    /// The recipient's node.
    pub node: String,
    /// The recipient the line speaks for: a session id or `engineer[:<email>]`.
    pub by: String,
    /// When it was written.
    pub ms: i64,
    /// The ids shown, at most [`SEEN_IDS`].
    pub ids: Vec<String>,
}

/// One well-formed line as this version reads it (LM: Line).
#[allow(clippy::large_enum_variant)] // Lines are read once per look and never held in bulk twice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    /// A message.
    Message(Message),
    /// An acknowledgement.
    Seen(Seen),
}

impl Line {
    /// Parses and checks one line; `None` for anything this version does not read: garbage, a
    /// newer version, a bad field, an unknown kind (LM-16).
    pub fn parse(raw: &[u8]) -> Option<Line> {
        if raw.len() > MAX_LINE_BYTES {
            return None;
        }
        let value: serde_json::Value = serde_json::from_slice(raw).ok()?;
        if value.get("v").and_then(serde_json::Value::as_u64) != Some(LINE_VERSION) {
            return None;
        }
        if value.get("kind").and_then(serde_json::Value::as_str) == Some(SEEN) {
            let seen: Seen = serde_json::from_value(value).ok()?;
            return seen.well_formed().then_some(Line::Seen(seen));
        }
        let m: Message = serde_json::from_value(value).ok()?;
        m.well_formed().then_some(Line::Message(m))
    }

    /// The stamp.
    pub fn ms(&self) -> i64 {
        match self {
            Line::Message(m) => m.ms,
            Line::Seen(s) => s.ms,
        }
    }

    /// The node the line names.
    pub fn node(&self) -> &str {
        match self {
            Line::Message(m) => &m.node,
            Line::Seen(s) => &s.node,
        }
    }
}

/// The ids the Seen lines of `by` on `node` list: what that recipient has been shown.
pub fn seen_ids_of(lines: &[Line], by: &str, node: &str) -> std::collections::HashSet<String> {
    lines
        .iter()
        .filter_map(|l| match l {
            Line::Seen(s) if s.by == by && s.node == node => Some(s.ids.iter().cloned()),
            _ => None,
        })
        .flatten()
        .collect()
}

/// The ids any engineer view on `node` acknowledged, whichever email it acked as: the email comes
/// from the repo at the current directory (G-LM-9), so one person's views differ by repo, and
/// what one of them showed is not new to the next.
pub fn engineer_seen_ids(lines: &[Line], node: &str) -> std::collections::HashSet<String> {
    lines
        .iter()
        .filter_map(|l| match l {
            Line::Seen(s) if s.node == node && crate::address::is_engineer(&s.by) => {
                Some(s.ids.iter().cloned())
            }
            _ => None,
        })
        .flatten()
        .collect()
}

/// Whether `by` is a sender a line can carry: a session id, the engineer, or an agent identity.
pub fn is_sender(by: &str) -> bool {
    by.chars().count() <= BY_CHARS && (is_session_id(by) || is_engineer(by))
        || is_agent_identity(by) && by.chars().count() <= BY_CHARS
}

impl Message {
    /// The checks of LM-16: field forms and sizes; the id is the one the content hashes to.
    pub fn well_formed(&self) -> bool {
        let chars = self.text.chars().count();
        let text_ok = chars <= WIRE_TEXT || chars == WIRE_TEXT + 1 && self.text.ends_with('…');
        let name_ok = self
            .name
            .as_deref()
            .is_none_or(|n| n.chars().count() <= NAME && !n.chars().any(char::is_control));
        let harness_ok = self
            .harness
            .as_deref()
            .is_none_or(|h| h.len() <= 32 && h.bytes().all(|b| b.is_ascii_alphanumeric()));
        let re_ok = self.re.as_deref().is_none_or(is_id);
        let to_ok = Address::parse_line(&self.to).is_ok();
        let via_ok = self.via.as_ref().is_none_or(Via::well_formed);
        // Only imported lines may come from an agent identity, and only they may go to one.
        let agent_ok =
            self.via.is_some() || !is_agent_identity(&self.by) && !is_agent_identity(&self.to);
        let id_ok = match &self.via {
            Some(via) => self.id == import_id(via.transport, &via.ext_id),
            None => self.id == message_id(self),
        };
        self.v == LINE_VERSION
            && is_node_id(&self.node)
            && is_sender(&self.by)
            && text_ok
            && name_ok
            && harness_ok
            && re_ok
            && to_ok
            && via_ok
            && agent_ok
            && self.ms > 0
            && id_ok
    }

    /// The recipient, parsed.
    pub fn address(&self) -> Option<Address> {
        Address::parse_line(&self.to).ok()
    }

    /// The serialized line, without its newline.
    pub fn to_line(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

impl Via {
    fn well_formed(&self) -> bool {
        let short = |s: &str, n: usize| s.chars().count() <= n && !s.chars().any(char::is_control);
        self.transport != Transport::Local
            && !self.ext_id.is_empty()
            && short(&self.ext_id, 256)
            && short(&self.kind, 128)
            && self.conversation.as_deref().is_none_or(|c| short(c, 256))
            && self.subject.as_deref().is_none_or(|s| short(s, 512))
            && self.attachments.len() <= 64
            && self.attachments.iter().all(|a| short(a, 4096))
            && self.reply.as_deref().is_none_or(|r| short(r, 1024))
            && self
                .id
                .as_deref()
                .is_none_or(|i| !i.is_empty() && short(i, 256))
            && self.task.as_deref().is_none_or(|t| short(t, 256))
            && self.held.as_deref().is_none_or(|h| short(h, 256))
    }
}

impl Seen {
    /// The checks of LM-16 and LM-42 for a Seen line.
    pub fn well_formed(&self) -> bool {
        self.v == LINE_VERSION
            && self.kind == SEEN
            && is_node_id(&self.node)
            && (is_session_id(&self.by) || is_engineer(&self.by))
            && self.by.chars().count() <= BY_CHARS
            && self.ms > 0
            && !self.ids.is_empty()
            && self.ids.len() <= SEEN_IDS
            && self.ids.iter().all(|id| is_id(id))
    }

    /// The serialized line, without its newline.
    pub fn to_line(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// The id prefix.
pub const ID_PREFIX: &str = "lm_";
/// The hex digits after the prefix (80 bits).
const ID_HEX: usize = 20;

/// Whether `s` is a message id as [`message_id`] writes it (LM: is_id, LM-21).
pub fn is_id(s: &str) -> bool {
    s.strip_prefix(ID_PREFIX).is_some_and(|h| {
        h.len() == ID_HEX
            && h.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// The id of a local message: a hash over (node, by, to, kind, ms, re, redacted text), so the
/// same content gives the same id on every node (G-LM-3).
pub fn message_id(m: &Message) -> String {
    let mut h = Sha256::new();
    for part in [
        m.node.as_str(),
        m.by.as_str(),
        m.to.as_str(),
        m.kind.as_str(),
        &m.ms.to_string(),
        m.re.as_deref().unwrap_or(""),
        m.text.as_str(),
    ] {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part.as_bytes());
    }
    finish(h)
}

/// The id of an imported message: a hash over (transport, the transport's id), so importing the
/// same message twice yields the same id and stores it once.
pub fn import_id(transport: Transport, ext_id: &str) -> String {
    let mut h = Sha256::new();
    for part in ["import", transport.as_str(), ext_id] {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part.as_bytes());
    }
    finish(h)
}

fn finish(h: Sha256) -> String {
    let digest = h.finalize();
    let mut id = String::from(ID_PREFIX);
    id.push_str(&hex::encode(&digest[..ID_HEX / 2]));
    id
}

/// Cuts a text to [`WIRE_TEXT`] characters plus an ellipsis (LM-19).
pub fn bound_text(text: &str) -> String {
    match text.char_indices().nth(WIRE_TEXT) {
        Some((i, _)) => {
            let mut t = text[..i].to_owned();
            t.push('…');
            t
        }
        None => text.to_owned(),
    }
}
