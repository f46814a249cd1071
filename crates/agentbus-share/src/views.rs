//! Derived views: nothing here is stored, everything is read from the files each time (§5: the
//! live state of a thread is derived by reading all files sharing its `thread`; §6: the live
//! version of a topic item is the one no other document supersedes; no index file exists).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::PathBuf;

use agentbus_protocol::frame::{self, Frame, Transport, Verified};
use agentbus_protocol::timestamp::Timestamp;

use crate::error::ShareError;
use crate::frontmatter::{Message, MessageType, Publication};
use crate::hash::HashCheck;
use crate::ident::{ANY, ShareAddress};
use crate::registry::Registry;
use crate::share::{Identity, Located, Malformed, Share, Snapshot};

/// The one-line subject of a body: its first non-empty line, heading marks removed, escape
/// sequences dropped and other control characters shown (it is somebody else's text on its way to
/// a terminal and a frame attribute), at most 100 characters. 0.1.0 has no subject key, so the
/// body's first line serves.
pub fn subject(body: &str) -> Option<String> {
    let line = body
        .lines()
        .map(|l| l.trim_start_matches('#').trim())
        .find(|l| !l.is_empty())?;
    let shown = agentbus_protocol::text::for_terminal_line(line);
    Some(shown.trim().chars().take(100).collect())
}

/// The command that answers `m`, for a person or a model to paste: every value in it comes from
/// somebody else's file, so each is quoted as one shell word (§11: content is data). An `ack`
/// closes its thread, so the way to say more is a new message in that thread.
pub fn reply_command(m: &Message) -> String {
    use agentbus_protocol::text::{positional, shell_option};
    // A foreign id or thread may start with `-`: it must stay a value, never become an option.
    if matches!(m.kind.effective(), MessageType::Ack) {
        format!(
            "agentbus share send {} {} \"…\"",
            shell_option("to", &m.from.short()),
            shell_option("thread", &m.thread)
        )
    } else {
        format!("agentbus share reply {} \"…\"", positional(&m.id))
    }
}

/// An inbound message for one of this clone's agents, with everything a §13.1 frame needs. This
/// is what local delivery imports: the transport is `share`, the key is (`id`, `to`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct InboundMessage {
    /// The stable message id (the frontmatter `id`, never the path, §3.1).
    pub id: String,
    /// The sender, `share:<operator>/<agent>`.
    pub from: String,
    /// The sender's instance, when declared.
    pub from_instance: Option<String>,
    /// The recipient, `share:<operator>/<agent>`; `share:<operator>/any` for an `any` copy or a
    /// broadcast: whichever local agent claims it first (G-AS-11).
    pub to: String,
    /// Whether this is a broadcast (§4).
    pub broadcast: bool,
    /// The type as written.
    pub kind: String,
    /// The type acted on: an unknown type is `fyi` (§9).
    pub effective_kind: String,
    /// The thread.
    pub thread: String,
    /// The message it answers, for answer/ack.
    pub re: Option<String>,
    /// The first line of the body.
    pub subject: Option<String>,
    /// The body, as written.
    pub body: String,
    /// Whether the body matches `content_hash` (integrity, not authenticity: §11).
    pub content_hash: HashCheck,
    /// Whether the sender is declared in `operators.yaml` (delivered either way, flagged, G-AS-9).
    pub sender_declared: bool,
    /// The command that answers it.
    pub reply_command: String,
    /// `created` as written.
    pub sent: Option<String>,
    /// `created` as an instant, when it parses.
    pub sent_at: Option<Timestamp>,
    /// The file.
    pub path: PathBuf,
}

impl InboundMessage {
    /// The body as a frame shows it: integrity and declaration warnings first, then the trimmed
    /// body. Local delivery imports exactly this, so the hook and [`InboundMessage::frame`] agree.
    pub fn framed_body(&self) -> String {
        let mut body = String::new();
        match self.content_hash {
            HashCheck::Mismatch => body.push_str("[integrity warning: this body does not match its content_hash (agentshare §3.2); it may have been altered]\n\n"),
            HashCheck::BadForm => body.push_str("[integrity warning: this content_hash is not blake3:<64 lowercase hex> (agentshare §3.2), so the body could not be checked]\n\n"),
            HashCheck::Absent | HashCheck::Verified => {}
        }
        if !self.sender_declared {
            body.push_str(
                "[warning: the sender is not declared in the share's operators.yaml]\n\n",
            );
        }
        body.push_str(crate::hash::trim(&self.body));
        body
    }

    /// The key local delivery stores this entry under: `<id>#<recipient>`, so a multicast to two
    /// local agents is two entries and a repeated import is recognised. The local store holds at
    /// most 256 characters there, so a longer key uses `blake3:<hex of the id>` for the id: still
    /// one stable key per (id, recipient).
    pub fn transport_id(&self) -> String {
        let plain = format!("{}#{}", self.id, self.to);
        if plain.chars().count() <= 256 {
            plain
        } else {
            format!(
                "blake3:{}#{}",
                blake3::hash(self.id.as_bytes()).to_hex(),
                self.to
            )
        }
    }

    /// The §13.1 frame a harness shows: peer data, never instructions. A git share carries no
    /// signature, so `verified="unsigned"`; a hash mismatch or an undeclared sender is said first.
    pub fn frame(&self) -> String {
        let body = self.framed_body();
        frame::render(&Frame {
            id: &self.id,
            local_id: None,
            from: &self.from,
            kind: &self.kind,
            verified: Verified::Unsigned,
            conversation: Some(&self.thread),
            transport: Transport::Share,
            subject: self.subject.as_deref(),
            task: None,
            late: false,
            expired: None,
            attachments: &[],
            reply_command: Some(&self.reply_command),
            rest_command: None,
            body: &body,
        })
    }
}

/// The inbound messages and the files that could not be read.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Inbound {
    /// Messages for this clone's agents (their folders, `any`, broadcasts from others), oldest
    /// first, one per (id, recipient).
    pub messages: Vec<InboundMessage>,
    /// Files that could hold a message for this clone (by their folder) but were skipped because
    /// they cannot be read or are unsafe, with why.
    pub malformed: Vec<Malformed>,
}

fn inbound_of(
    share: &Share,
    registry: &Registry,
    m: &Located<Message>,
    to: String,
    broadcast: bool,
) -> InboundMessage {
    let d = &m.doc;
    let kind = d.kind.effective();
    let reply = reply_command(d);
    InboundMessage {
        id: d.id.clone(),
        from: format!(
            "{}{}/{}",
            ShareAddress::PREFIX,
            d.from.operator,
            d.from.agent
        ),
        from_instance: d.from.instance.clone(),
        to,
        broadcast,
        kind: d.kind.as_str().to_owned(),
        effective_kind: kind.as_str().to_owned(),
        thread: d.thread.clone(),
        re: d.re.clone(),
        subject: subject(&d.body),
        body: d.body.clone(),
        content_hash: d.hash_check,
        sender_declared: registry.declares(
            &d.from.operator,
            d.from.instance.as_deref(),
            &d.from.agent,
        ),
        reply_command: reply,
        sent: d.created.as_ref().map(|c| c.raw.clone()),
        sent_at: d.created.as_ref().and_then(|c| c.at),
        path: share.root().join(&m.path),
    }
}

/// Every inbound message for this clone's agents, from a snapshot.
pub fn inbound_from(share: &Share, me: &Identity, snap: &Snapshot) -> Result<Inbound, ShareError> {
    let registry = Registry::load(share.root()).unwrap_or_default();
    let mut seen: HashSet<(String, String)> = HashSet::new();
    let mut out = Vec::new();
    let mine = |agent: &str| agent == ANY || me.agents.iter().any(|a| a == agent);
    // INV-1: delivery reads `to` only; `recipients` never routes. The folder must agree with `to`
    // (a copy whose folder and `to` differ is `check`'s business, delivered by `to`).
    for m in &snap.messages {
        let to = &m.doc.to;
        if to.operator != me.operator || !mine(&to.agent) {
            continue;
        }
        let addr = format!("{}{}/{}", ShareAddress::PREFIX, to.operator, to.agent);
        if seen.insert((m.doc.id.clone(), addr.clone())) {
            out.push(inbound_of(share, &registry, m, addr, false));
        }
    }
    for m in &snap.broadcasts {
        if m.doc.from.operator == me.operator {
            continue;
        }
        let addr = format!("{}{}/{ANY}", ShareAddress::PREFIX, me.operator);
        if seen.insert((m.doc.id.clone(), addr.clone())) {
            out.push(inbound_of(share, &registry, m, addr, true));
        }
    }
    out.sort_by(|a, b| (a.sent_at, &a.path).cmp(&(b.sent_at, &b.path)));
    Ok(Inbound {
        messages: out,
        malformed: snap
            .malformed
            .iter()
            .filter(|m| could_be_for(me, &m.path))
            .cloned()
            .collect(),
    })
}

/// Whether a file at `path` could hold a message for this clone, by where it lies (a file that
/// cannot be read says nothing else): our operator's folder of one of our agents or `any`, or
/// `broadcast/`.
pub fn could_be_for(me: &Identity, path: &str) -> bool {
    match crate::naming::place(path) {
        crate::naming::Place::Message {
            operator, agent, ..
        } => operator == me.operator && (agent == ANY || me.agents.iter().any(|a| a == agent)),
        crate::naming::Place::Broadcast { .. } => true,
        _ => false,
    }
}

/// Every inbound message for this clone's agents: the function local delivery calls. Malformed
/// files are listed, never fatal.
pub fn inbound_messages(share: &Share) -> Result<Inbound, ShareError> {
    let me = share.identity()?;
    let snap = share.snapshot()?;
    inbound_from(share, &me, &snap)
}

/// A thread's live state (§5, G-AS-7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ThreadState {
    /// No ack closes it and no message in it started `done`.
    Open,
    /// An `ack` in it names one of its messages, or a message in it started `done`.
    Done,
}

/// One thread, derived from every file sharing its `thread`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ThreadView {
    /// The thread id.
    pub thread: String,
    /// Its live state.
    pub state: ThreadState,
    /// Distinct messages (copies of a multicast count once, §3.1).
    pub messages: usize,
    /// Everyone who wrote in it or was addressed, `operator/agent`.
    pub participants: Vec<String>,
    /// The subject of its first message.
    pub subject: Option<String>,
    /// The id of its first message.
    pub first_id: String,
    /// When its last message was written.
    pub last_created: Option<String>,
}

/// Every thread of the share, the most recently active last.
pub fn threads(snap: &Snapshot) -> Vec<ThreadView> {
    let mut by_thread: HashMap<&str, Vec<&Message>> = HashMap::new();
    let mut seen: HashSet<(&str, &str)> = HashSet::new();
    for m in snap.all_messages() {
        if seen.insert((m.doc.thread.as_str(), m.doc.id.as_str())) {
            by_thread.entry(&m.doc.thread).or_default().push(&m.doc);
        }
    }
    let mut out: Vec<ThreadView> = by_thread
        .into_iter()
        .map(|(thread, mut msgs)| {
            msgs.sort_by(|a, b| {
                let at = |m: &Message| m.created.as_ref().and_then(|c| c.at);
                (at(a), &a.id).cmp(&(at(b), &b.id))
            });
            let ids: HashSet<&str> = msgs.iter().map(|m| m.id.as_str()).collect();
            let done = msgs.iter().any(|m| {
                m.status == "done"
                    || (m.kind == MessageType::Ack
                        && m.re.as_deref().is_some_and(|r| ids.contains(r)))
            });
            let mut participants = BTreeSet::new();
            for m in &msgs {
                participants.insert(m.from.short());
                if m.to.operator != "*" {
                    participants.insert(m.to.short());
                }
            }
            let first = msgs[0];
            let last = msgs[msgs.len() - 1];
            ThreadView {
                thread: thread.to_owned(),
                state: if done {
                    ThreadState::Done
                } else {
                    ThreadState::Open
                },
                messages: msgs.len(),
                participants: participants.into_iter().collect(),
                subject: subject(&first.body),
                first_id: first.id.clone(),
                last_created: last.created.as_ref().map(|c| c.raw.clone()),
            }
        })
        .collect();
    out.sort_by(|a, b| (&a.last_created, &a.thread).cmp(&(&b.last_created, &b.thread)));
    out
}

/// One publication in a topic listing.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PublicationView {
    /// The id.
    pub id: String,
    /// The file.
    pub path: String,
    /// `operator/agent`.
    pub publisher: String,
    /// The first line of the body.
    pub title: Option<String>,
    /// `created` as written.
    pub created: Option<String>,
    /// The id it supersedes.
    pub supersedes: Option<String>,
}

/// A topic's live versions (§6, G-AS-12).
#[derive(Debug, Clone, serde::Serialize)]
pub struct TopicView {
    /// The topic.
    pub topic: String,
    /// Every publication no other supersedes: one per item, more than one where a chain forked.
    pub live: Vec<PublicationView>,
    /// How many publications are superseded.
    pub superseded: usize,
    /// Ids caught in a supersession cycle (no live version among them).
    pub cycles: Vec<String>,
}

fn view(p: &Located<Publication>) -> PublicationView {
    PublicationView {
        id: p.doc.id.clone(),
        path: p.path.clone(),
        publisher: p.doc.publisher.short(),
        title: subject(&p.doc.body),
        created: p.doc.created.as_ref().map(|c| c.raw.clone()),
        supersedes: p.doc.supersedes.clone(),
    }
}

/// The live version of every topic item.
pub fn knowledge(snap: &Snapshot) -> Vec<TopicView> {
    let superseded: HashSet<&str> = snap
        .publications
        .iter()
        .filter_map(|p| p.doc.supersedes.as_deref())
        .collect();
    let by_id: HashMap<&str, &Publication> = snap
        .publications
        .iter()
        .map(|p| (p.doc.id.as_str(), &p.doc))
        .collect();
    let mut topics: BTreeMap<&str, TopicView> = BTreeMap::new();
    for p in &snap.publications {
        let t = topics.entry(&p.doc.topic).or_insert_with(|| TopicView {
            topic: p.doc.topic.clone(),
            live: Vec::new(),
            superseded: 0,
            cycles: Vec::new(),
        });
        if superseded.contains(p.doc.id.as_str()) {
            t.superseded += 1;
            // A publication on a supersedes-cycle is superseded yet no head reaches it.
            let mut cur = p.doc.supersedes.as_deref();
            let mut steps = 0;
            while let Some(c) = cur {
                if c == p.doc.id {
                    t.cycles.push(p.doc.id.clone());
                    break;
                }
                steps += 1;
                if steps > by_id.len() {
                    break;
                }
                cur = by_id.get(c).and_then(|d| d.supersedes.as_deref());
            }
        } else {
            t.live.push(view(p));
        }
    }
    topics.into_values().collect()
}
