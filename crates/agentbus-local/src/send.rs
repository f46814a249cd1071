//! Writing to the log: send (LM: send, LM-57..LM-68), acknowledge (LM: ack, LM-40..LM-44),
//! import from another transport (the one delivery path, issue item 9), and resolving a session
//! named on the command line (LM-7, LM-8).

use std::collections::HashSet;
use std::fs;

use serde::Serialize;

use agentbus_protocol::Code;
use agentbus_protocol::errors::Catalogued;
use agentbus_protocol::frame::{Transport, Verified};
use agentbus_protocol::timestamp::Timestamp;

use crate::address::{Address, is_agent_identity, is_engineer, is_session_id};
use crate::bound::{bound, kept_at};
use crate::consts::{LINE_VERSION, V1_RATE_MS};
use crate::consts::{MEMBER_BYTES, SEEN_IDS};
use crate::deliver::fresh_at;
use crate::line::{
    Kind, Line, Message, Priority, SEEN, Seen, Via, bound_text, import_id, message_id,
};
use crate::pace::{Pace, Window, window_for};
use crate::redact::redact;
use crate::store::{Snapshot, Store, StoreError, io_at, write_file};

/// Who sends a message (LM: Sender).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sender {
    /// A session id, or `engineer[:<email>]`.
    pub by: String,
    /// A display name.
    pub name: Option<String>,
    /// The sender's harness, when it is a session.
    pub harness: Option<String>,
}

/// A message to send.
#[derive(Debug, Clone)]
pub struct Outgoing {
    /// The sender.
    pub from: Sender,
    /// The recipient.
    pub to: Address,
    /// What it does.
    pub kind: Kind,
    /// The text (for a steer, the reason); redacted and bounded before it is stored.
    pub text: String,
    /// The id of the message it answers.
    pub re: Option<String>,
}

/// A message written, or one a dry run would write.
#[derive(Debug, Clone, Serialize)]
pub struct Sent {
    /// The line.
    pub message: Message,
    /// The sender's window to the recipient as it stood before this message (None for a steer).
    pub window: Option<Window>,
    /// Whether this was a dry run (nothing written).
    pub dry_run: bool,
}

/// Why a message was not sent (LM: SendError, LM-68). Each refusal's text starts with its
/// [`reason`](SendError::reason), as the command line and the MCP server show it.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The sender's window to this recipient is full (LM-57), or its fixed pace is (LM-63,
    /// LM-64); the message states the rule that refused it.
    #[error("refused (window_full): {}", refusal(to, *pace, *outstanding, *size, *next_in_ms))]
    WindowFull {
        /// The recipient.
        to: String,
        /// Outstanding messages.
        outstanding: u32,
        /// The window.
        size: u32,
        /// The rule pacing this pair.
        pace: Pace,
        /// For a fixed pace, how long until the next message is admitted.
        next_in_ms: Option<i64>,
    },
    /// The message would push one of the sender's own unread messages to the same recipient out
    /// of the log (LM-67).
    #[error(
        "refused (share): it would push your own unread message {pushed} to {to} out of the log; wait until it is read"
    )]
    Share {
        /// The recipient.
        to: String,
        /// The id that would be cut.
        pushed: String,
    },
    /// The clock is behind a message already admitted to this recipient (LM-66, G-LM-5).
    #[error(
        "refused (clock_behind): this clock is behind a message you already sent to {to} (stamped {latest_ms}); wait, or fix the clock"
    )]
    ClockBehind {
        /// The recipient.
        to: String,
        /// The later stamp.
        latest_ms: i64,
    },
    /// A steer from a sender whose steers would not count (LM-13, LM-14).
    #[error("refused (not_admitted): {0}")]
    NotAdmitted(String),
    /// Every reader would drop the line (LM-68).
    #[error("refused (malformed): every reader would drop this message: {0}")]
    Malformed(String),
}

impl Catalogued for SendError {
    fn code(&self) -> Code {
        match self {
            SendError::Store(e) => e.code(),
            SendError::WindowFull {
                pace: Pace::Floor | Pace::Rate,
                ..
            } => Code::Paced,
            SendError::WindowFull { .. } | SendError::Share { .. } => Code::LocalRefused,
            SendError::ClockBehind { .. } => Code::ClockBehind,
            SendError::NotAdmitted(_) => Code::SteerNotAdmitted,
            SendError::Malformed(_) => Code::LocalMalformed,
        }
    }

    fn fix_values(&self) -> Vec<(&'static str, String)> {
        match self {
            SendError::Store(e) => e.fix_values(),
            _ => Vec::new(),
        }
    }
}

impl SendError {
    /// A stable reason word for `--json` output.
    pub fn reason(&self) -> &'static str {
        match self {
            SendError::Store(_) => "store",
            SendError::WindowFull { .. } => "window_full",
            SendError::Share { .. } => "share",
            SendError::ClockBehind { .. } => "clock_behind",
            SendError::NotAdmitted(_) => "not_admitted",
            SendError::Malformed(_) => "malformed",
        }
    }
}

/// A message another transport hands to this store (see `docs/local.md`, "Import API").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboundMessage {
    /// The transport that carried it: [`Transport::Gateway`] or [`Transport::Share`].
    pub transport: Transport,
    /// The transport's id of the message; import is idempotent on (transport, this id).
    pub transport_id: String,
    /// The sender's address, as the transport names it (`agent://…`, `share:…`).
    pub from: String,
    /// The message type or kind (`agentbus.message.v1`, …).
    pub kind: String,
    /// The conversation or thread id.
    pub conversation: Option<String>,
    /// The subject line.
    pub subject: Option<String>,
    /// The body text, as it should be framed.
    pub body: String,
    /// Whether the transport verified the sender.
    pub verified: Verified,
    /// Local paths of attachments the transport saved.
    pub attachments: Vec<String>,
    /// The command that answers it (`agentbus reply …` over that transport).
    pub reply_command: Option<String>,
    /// When the sender sent it.
    pub sent: Timestamp,
    /// The recipient: an agent identity (`agent://acme/backend/reviewer`, `share:acme/reviewer`).
    pub recipient: String,
    /// The id people and the transport's commands use for it (`msg_…`), when `transport_id` is
    /// not that id.
    pub message_id: Option<String>,
    /// The task it belongs to, if any (the frame's `task` attribute).
    pub task: Option<String>,
    /// Whether it arrived after its task ended (§6.3).
    pub late: bool,
    /// For a task request: when it stops being open to its worker (the task's accept deadline
    /// or `expires_at`, §6.1), in Unix milliseconds. A frame shown later says it expired.
    pub expires_ms: Option<i64>,
    /// Set when it must not be injected (`require_verified_inbound`, §13.1): why. The message is
    /// kept, marked, for the engineer's `inbox`.
    pub held: Option<String>,
    /// The sender's `priority` (§2.1), kept on the line: it decides whether the message keeps a
    /// session going at the end of its turn.
    pub priority: Priority,
}

/// What an import did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "lowercase")]
pub enum ImportOutcome {
    /// Stored under this id.
    Stored {
        /// The local id.
        id: String,
    },
    /// Already in the store under this id; nothing written.
    Duplicate {
        /// The local id.
        id: String,
    },
    /// Not written: the log's bound for its recipient's imports would cut one that no session
    /// of the identity (nor the engineer) was shown yet. Import it again once they have been.
    Full {
        /// The local id it will have.
        id: String,
        /// The unshown message it would have pushed out.
        pushed: String,
    },
}

/// Why an import failed.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Local messages are written by `send`, not imported.
    #[error("the local transport is not imported; use send")]
    LocalTransport,
    /// The recipient is not an agent identity.
    #[error("{0:?} is not an agent identity (agent://… or share:…)")]
    BadRecipient(String),
    /// The sender is not an agent identity.
    #[error("{0:?} is not a sender address (agent://… or share:…)")]
    BadSender(String),
    /// A field is too long or holds control characters.
    #[error("the message would not be well-formed: {0}")]
    Malformed(&'static str),
}

impl Catalogued for ImportError {
    fn code(&self) -> Code {
        match self {
            ImportError::Store(e) => e.code(),
            ImportError::LocalTransport
            | ImportError::BadRecipient(_)
            | ImportError::BadSender(_)
            | ImportError::Malformed(_) => Code::ImportRefused,
        }
    }
}

/// Why a name on the command line names no one session (LM-8).
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Not an address at all.
    #[error(transparent)]
    Address(#[from] crate::address::AddressError),
    /// No session here matches.
    #[error("no session on this machine matches {0:?}; run `agentbus sessions` to list them")]
    Unknown(String),
    /// Several match.
    #[error("{word:?} matches several sessions: {}", candidates.join(", "))]
    Ambiguous {
        /// What was typed.
        word: String,
        /// The matching session ids.
        candidates: Vec<String>,
    },
}

impl Catalogued for ResolveError {
    fn code(&self) -> Code {
        match self {
            ResolveError::Store(e) => e.code(),
            ResolveError::Address(e) => e.code(),
            ResolveError::Unknown(_) | ResolveError::Ambiguous { .. } => Code::UnknownRecipient,
        }
    }
}

impl Store {
    /// Resolves what a user typed to an address (LM-7, LM-8): `local`, `all`/`collective`,
    /// `engineer[:<email>]` and `<session>@<node>` parse as written; any other word is a session
    /// of this machine, by exact id, id prefix or display name, resolved to its full id now.
    pub fn resolve(&self, word: &str) -> Result<Address, ResolveError> {
        let node = self.node()?;
        if let Some(a) = Address::parse_command(word, &node)? {
            return Ok(a);
        }
        let sessions = self.sessions()?;
        let exact: Vec<_> = sessions.iter().filter(|p| p.session == word).collect();
        let matching: Vec<String> = if exact.len() == 1 {
            vec![exact[0].session.clone()]
        } else {
            sessions
                .iter()
                .filter(|p| p.session.starts_with(word) || p.name.as_deref() == Some(word))
                .map(|p| p.session.clone())
                .collect()
        };
        match matching.as_slice() {
            [one] => Ok(Address::Session {
                session: one.clone(),
                node,
            }),
            [] => Err(ResolveError::Unknown(word.to_owned())),
            _ => Err(ResolveError::Ambiguous {
                word: word.to_owned(),
                candidates: matching,
            }),
        }
    }

    /// Sends `out` (LM: send): decided under the log's lock by the sender's window and the share
    /// rule, bounded on write. A steer is never paced (LM-15) but must come from an admitted role
    /// (the engineer of this machine, LM-13). With `dry_run`, decides and writes nothing.
    pub fn send(&self, out: &Outgoing, dry_run: bool) -> Result<Sent, SendError> {
        let text = bound_text(&redact(&out.text));
        if !(is_session_id(&out.from.by) || is_engineer(&out.from.by)) {
            return Err(SendError::Malformed(format!(
                "{:?} is not a sender: use a session id or engineer[:<email>]",
                out.from.by
            )));
        }
        if matches!(out.to, Address::Agent(_)) {
            return Err(SendError::Malformed(
                "agent identities are reached through their own transport".into(),
            ));
        }
        let (sent, _) = self.write_locked(|snap| {
            let mut m = Message {
                v: LINE_VERSION,
                id: String::new(),
                kind: out.kind,
                node: snap.node.clone(),
                by: out.from.by.clone(),
                name: out.from.name.clone(),
                harness: out.from.harness.clone(),
                to: out.to.to_string(),
                ms: snap.now,
                text: text.clone(),
                re: out.re.clone(),
                via: None,
            };
            m.id = message_id(&m);
            if !m.well_formed() {
                return Err(SendError::Malformed(
                    "a field is too long or holds characters a line cannot carry".into(),
                ));
            }
            let window = if out.kind.is_conversation() {
                let w = window_for(&m.by, &m.node, &out.to, &snap.lines, &snap.node, snap.now);
                check_pair(&m, &w, snap)?;
                Some(w)
            } else {
                check_steer(&m, &out.to, &snap.node)?;
                None
            };
            let sent = Sent {
                message: m.clone(),
                window,
                dry_run,
            };
            if dry_run {
                return Ok((Vec::new(), false, sent));
            }
            Ok((vec![m.to_line()], true, sent))
        })?;
        Ok(sent)
    }

    /// Acknowledges that `by` (a session of this node, or `engineer[:<email>]`) was shown `ids`
    /// (LM: ack): Seen lines of at most [`SEEN_IDS`] ids each, under the lock, bounded as send
    /// bounds. They leave the talk generation as it was. Nothing is written for a `by` a line
    /// cannot carry (LM-44). Returns how many lines were written.
    pub fn ack(&self, by: &str, ids: &[String]) -> Result<usize, StoreError> {
        Ok(self.ack_if(true, by, ids)?.unwrap_or(0))
    }

    /// [`Store::ack`], or `None` without writing when `wait` is false and another writer holds
    /// the log: a hook must not wait there between claiming and printing (its harness kills it at
    /// a timeout, and the claimed messages would count as shown), and the claims it leaves without
    /// their Seen line are acknowledged at the session's next look (LM-41).
    pub fn ack_if(
        &self,
        wait: bool,
        by: &str,
        ids: &[String],
    ) -> Result<Option<usize>, StoreError> {
        if ids.is_empty() || !(is_session_id(by) || is_engineer(by)) {
            return Ok(Some(0));
        }
        let Some((n, _)) = self.write_locked_if(wait, |snap| {
            let lines: Vec<String> = ids
                .chunks(SEEN_IDS)
                .map(|chunk| {
                    Seen {
                        v: LINE_VERSION,
                        kind: SEEN.to_owned(),
                        node: snap.node.clone(),
                        by: by.to_owned(),
                        ms: snap.now,
                        ids: chunk.to_vec(),
                    }
                    .to_line()
                })
                .collect();
            let n = lines.len();
            Ok::<_, StoreError>((lines, false, n))
        })?
        else {
            return Ok(None);
        };
        Ok(Some(n))
    }

    /// Imports a message another transport received, so the hook delivers it like a local one:
    /// claimed once, budgeted, framed naming its transport. Idempotent on (transport, id), also
    /// once its line has left the log.
    pub fn import(&self, msg: &InboundMessage) -> Result<ImportOutcome, ImportError> {
        if msg.transport == Transport::Local {
            return Err(ImportError::LocalTransport);
        }
        if !is_agent_identity(&msg.recipient) || msg.recipient.chars().count() > 256 {
            return Err(ImportError::BadRecipient(msg.recipient.clone()));
        }
        if !is_agent_identity(&msg.from) || msg.from.chars().count() > 256 {
            return Err(ImportError::BadSender(msg.from.clone()));
        }
        let id = import_id(msg.transport, &msg.transport_id);
        let via = Via {
            transport: msg.transport,
            ext_id: msg.transport_id.clone(),
            kind: msg.kind.clone(),
            conversation: msg.conversation.clone(),
            subject: msg.subject.as_deref().map(redact),
            verified: msg.verified,
            attachments: msg.attachments.clone(),
            reply: msg.reply_command.clone(),
            sent_ms: msg.sent.millis(),
            id: msg.message_id.clone().filter(|i| *i != msg.transport_id),
            task: msg.task.clone(),
            late: msg.late,
            expires_ms: msg.expires_ms,
            held: msg.held.clone(),
            priority: msg.priority,
        };
        let imported = self.dir().join("imported").join(&id);
        if imported.exists() {
            // Imported before, and its line may have left the log since (the TTL, the bound): a
            // transport that offers it again (a share file stays in its repository) shows nothing
            // twice.
            return Ok(ImportOutcome::Duplicate { id });
        }
        let text = bound_text(&redact(&msg.body));
        let (outcome, _) = self.write_locked(|snap| {
            let seen = snap.lines.iter().any(|l| match l {
                Line::Message(m) => m.id == id,
                Line::Seen(_) => false,
            });
            if seen {
                return Ok((
                    Vec::new(),
                    false,
                    ImportOutcome::Duplicate { id: id.clone() },
                ));
            }
            let m = Message {
                v: LINE_VERSION,
                id: id.clone(),
                kind: Kind::Tell,
                node: snap.node.clone(),
                by: msg.from.clone(),
                name: None,
                harness: None,
                to: msg.recipient.clone(),
                ms: snap.now,
                text: text.clone(),
                re: None,
                via: Some(via.clone()),
            };
            if !m.well_formed() {
                return Err(ImportError::Malformed(
                    "a field is too long or holds control characters",
                ));
            }
            let line = m.to_line();
            // What was put in front of an engineer view of this node counts as shown too. Read
            // only if a line would be cut.
            let read_here = std::cell::OnceCell::new();
            let read_here = || {
                read_here.get_or_init(|| {
                    snap.lines
                        .iter()
                        .filter_map(|l| match l {
                            Line::Seen(s) if s.node == snap.node && is_engineer(&s.by) => Some(s),
                            _ => None,
                        })
                        .flat_map(|s| s.ids.iter().map(String::as_str))
                        .collect::<HashSet<&str>>()
                })
            };
            // What may not be pushed out: the identity's mail that a session could still be shown
            // and none was. A held message (§13.1) is the engineer's to read, and one an attacker
            // can make at will: it never holds the identity's mail back.
            let unshown = |old: &Message| {
                old.via.as_ref().is_some_and(|v| v.held.is_none())
                    && old.to == m.to
                    && fresh_at(old.ms, snap.now)
                    && !read_here().contains(old.id.as_str())
                    && !self.shown_to_identity(&m.to, &old.id)
            };
            if let Some(pushed) = would_cut(snap, &line, unshown) {
                return Ok((
                    Vec::new(),
                    false,
                    ImportOutcome::Full {
                        id: id.clone(),
                        pushed,
                    },
                ));
            }
            Ok((vec![line], true, ImportOutcome::Stored { id: id.clone() }))
        })?;
        if let ImportOutcome::Stored { .. } | ImportOutcome::Duplicate { .. } = outcome {
            // After the line: a crash between the two leaves a line whose next import (a
            // duplicate) writes this record.
            let dir = self.dir().join("imported");
            fs::create_dir_all(&dir).map_err(io_at(&dir))?;
            write_file(&imported, b"")?;
        }
        Ok(outcome)
    }

    /// The message `id` and the address a reply to it goes to: the (node, by) of what it answers
    /// (LM-10). `None` when no such message is held.
    pub fn reply_target(&self, id: &str) -> Result<Option<(Message, Option<Address>)>, StoreError> {
        let Some(m) = self.read()?.into_iter().find(|m| m.id == id) else {
            return Ok(None);
        };
        let to = if m.via.is_some() {
            None
        } else if let Some(email) = m.by.strip_prefix("engineer:") {
            Some(Address::Engineer(Some(email.to_owned())))
        } else if is_engineer(&m.by) {
            Some(Address::Engineer(None))
        } else {
            Some(Address::Session {
                session: m.by.clone(),
                node: m.node.clone(),
            })
        };
        Ok(Some((m, to)))
    }
}

/// The window and share rules for a tell or ask (LM-57, LM-66, LM-67).
fn check_pair(m: &Message, w: &Window, snap: &crate::store::Snapshot) -> Result<(), SendError> {
    if !w.admits {
        return Err(SendError::WindowFull {
            to: m.to.clone(),
            outstanding: w.outstanding,
            size: w.size,
            pace: w.pace,
            next_in_ms: match w.pace {
                Pace::Window => None,
                Pace::Floor | Pace::Rate => w
                    .last_ms
                    .map(|l| (l + V1_RATE_MS - m.ms).clamp(1, V1_RATE_MS)),
            },
        });
    }
    if let Some(latest) = w.last_ms.filter(|&l| l > m.ms) {
        return Err(SendError::ClockBehind {
            to: m.to.clone(),
            latest_ms: latest,
        });
    }
    if w.unread.is_empty() {
        return Ok(());
    }
    // Would the byte bound, with this line added, cut one of the pair's unread messages?
    let unread: HashSet<&str> = w.unread.iter().map(String::as_str).collect();
    match would_cut(snap, &m.to_line(), |old| unread.contains(old.id.as_str())) {
        Some(pushed) => Err(SendError::Share {
            to: m.to.clone(),
            pushed,
        }),
        None => Ok(()),
    }
}

/// The id of a message `matters` picks that the byte bound would cut were `line` added to the
/// log as `snap` holds it (a line past the TTL goes either way and is not counted).
fn would_cut(snap: &Snapshot, line: &str, matters: impl Fn(&Message) -> bool) -> Option<String> {
    // No group holds more than the whole log: while it all fits one member's share, the byte
    // bound cuts nothing, and the log need not be bounded here (every import and send asks).
    let total: usize = snap.raw.iter().map(|r| r.len() + 1).sum::<usize>() + line.len() + 1;
    if total <= MEMBER_BYTES {
        return None;
    }
    let mut all: Vec<&[u8]> = snap.raw.iter().map(Vec::as_slice).collect();
    all.push(line.as_bytes());
    let kept: HashSet<usize> = bound(&all, snap.now).kept.into_iter().collect();
    snap.raw
        .iter()
        .enumerate()
        .filter(|(i, _)| !kept.contains(i))
        .filter_map(|(_, raw)| match Line::parse(raw) {
            Some(Line::Message(old)) if kept_at(old.ms, snap.now) && matters(&old) => Some(old.id),
            _ => None,
        })
        .next()
}

/// The sender-side check of a steer (LM-13, LM-14): only the engineer of this machine steers, and
/// only sessions of this machine.
fn check_steer(m: &Message, to: &Address, node: &str) -> Result<(), SendError> {
    if !is_engineer(&m.by) {
        return Err(SendError::NotAdmitted(format!(
            "a {} from {} would not count: only the engineer of this machine steers sessions",
            m.kind.as_str(),
            m.by
        )));
    }
    match to {
        Address::Session { node: n, .. } | Address::Local(n) if n == node => Ok(()),
        _ => Err(SendError::NotAdmitted(format!(
            "a {} to {to} would not count: steers count only for sessions of this machine",
            m.kind.as_str()
        ))),
    }
}

/// The words of a pacing refusal: which rule refused the message and when the next one goes.
fn refusal(to: &str, pace: Pace, outstanding: u32, size: u32, next_in_ms: Option<i64>) -> String {
    let per = V1_RATE_MS / 1000;
    let next = next_in_ms.map_or_else(String::new, |ms| {
        format!("; the next is admitted in {} s", (ms + 999) / 1000)
    });
    match pace {
        Pace::Window => format!(
            "window full: {to} has not acknowledged {outstanding} of your messages (window {size}); wait until it reads them"
        ),
        // LM-63: nobody is bound to acknowledge a broadcast or the engineer.
        Pace::Floor => format!(
            "paced: {to} takes one message per {per} s from you while {outstanding} of yours are unacknowledged (window {size}){next}"
        ),
        // LM-64: a session of another node, until that node acknowledges the pair.
        Pace::Rate => format!(
            "paced: {to} is on another node that has acknowledged none of your messages, so it takes one per {per} s{next}"
        ),
    }
}
