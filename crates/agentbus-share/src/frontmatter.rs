//! Frontmatter: a lenient reader and an exact writer (§3, §3.1, §6, §9).
//!
//! **Reading is lenient** (AS-9-3…AS-9-7): unknown keys are ignored (and listed, so `check` can
//! flag a producer that emitted them), an unknown `type` reads as `fyi`, `0.0.1`–`0.0.4` read with
//! §3.1's defaults, `1.0.0` reads as `0.1.0`, null reads as absent (G-AS-6), and timestamps are
//! normalised whether YAML typed them or not (G-AS-14). A reader requires `protocol id from to type`
//! of a message and `protocol id publisher topic` of a publication (G-AS-6); anything less is a
//! [`FormatError`], reported with its path and skipped by the caller, never fatal.
//!
//! **Writing is exact** (AS-3-6, AS-9-2, AS-9-6): `protocol: 0.1.0`, then the keys of §3 in the
//! spec's order (`re` only on answer/ack), then `recipients` only on a multicast copy and
//! `content_hash` always; nothing outside 0.1.0. Values are plain only when YAML cannot type them
//! (kebab identifiers); everything else, timestamps and `*` included, is double-quoted.

use std::fmt::Write as _;

use agentbus_protocol::timestamp::Timestamp;
use serde_json::{Map, Value};

use crate::hash::HashCheck;

/// The one version this implementation emits (§9, AS-9-6).
pub const PROTOCOL: &str = "0.1.0";

/// Keys §3 defines for a direct message or broadcast.
pub const MESSAGE_KEYS: &[&str] = &[
    "protocol", "id", "from", "to", "thread", "type", "re", "created", "status",
];
/// The optional envelope fields of §3.1.
pub const ENVELOPE_KEYS: &[&str] = &[
    "recipients",
    "sender_clan",
    "group",
    "retention_tier",
    "content_hash",
];
/// Keys §6 defines for a publication.
pub const PUBLICATION_KEYS: &[&str] = &[
    "protocol",
    "id",
    "publisher",
    "topic",
    "source",
    "created",
    "supersedes",
    "last_verified",
];

/// How a file's declared `protocol:` is read (§9).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", content = "declared", rename_all = "snake_case")]
pub enum Version {
    /// `0.1.0` (and any `0.1.x` patch, which only fixes and clarifies).
    Current,
    /// `0.0.1`–`0.0.4`: read with §3.1's defaults (AS-9-5).
    Legacy(String),
    /// The withdrawn `1.0.0`: read as `0.1.0`, never emitted (AS-9-7, AS-9-8).
    Withdrawn,
    /// Anything else (`0.2.0`, `2.0.0`): read with 0.1.0's rules and a warning (G-AS-13).
    Unknown(String),
}

impl Version {
    /// Reads a declared version.
    pub fn of(declared: &str) -> Version {
        match declared {
            "1.0.0" => Version::Withdrawn,
            "0.0.1" | "0.0.2" | "0.0.3" | "0.0.4" => Version::Legacy(declared.to_owned()),
            d if d.starts_with("0.1.")
                && d[4..].bytes().all(|b| b.is_ascii_digit())
                && d.len() > 4 =>
            {
                Version::Current
            }
            d => Version::Unknown(d.to_owned()),
        }
    }
}

/// A message `type` (§3). Unknown values are kept as written and act as `fyi` (AS-9-4).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum MessageType {
    /// "please pick up this task".
    Handoff,
    /// A request for information or a decision.
    Question,
    /// A reply carrying the requested content (`re:` required).
    Answer,
    /// Informational, no action expected.
    Fyi,
    /// "received / done", the conflict-free thread close (`re:` required).
    Ack,
    /// A type 0.1.0 does not define, as written.
    Unknown(String),
}

impl MessageType {
    /// The five types 0.1.0 defines.
    pub const KNOWN: [MessageType; 5] = [
        MessageType::Handoff,
        MessageType::Question,
        MessageType::Answer,
        MessageType::Fyi,
        MessageType::Ack,
    ];

    /// Reads a type as written.
    pub fn of(s: &str) -> MessageType {
        match s {
            "handoff" => MessageType::Handoff,
            "question" => MessageType::Question,
            "answer" => MessageType::Answer,
            "fyi" => MessageType::Fyi,
            "ack" => MessageType::Ack,
            other => MessageType::Unknown(other.to_owned()),
        }
    }

    /// Parses a type a writer may emit; unknown types are refused (AS-3-7, AS-9-2).
    pub fn parse_known(s: &str) -> Option<MessageType> {
        match MessageType::of(s) {
            MessageType::Unknown(_) => None,
            t => Some(t),
        }
    }

    /// The type as written.
    pub fn as_str(&self) -> &str {
        match self {
            MessageType::Handoff => "handoff",
            MessageType::Question => "question",
            MessageType::Answer => "answer",
            MessageType::Fyi => "fyi",
            MessageType::Ack => "ack",
            MessageType::Unknown(s) => s,
        }
    }

    /// The type a consumer acts on: unknown types are `fyi` (deliver, take no automated action).
    pub fn effective(&self) -> MessageType {
        match self {
            MessageType::Unknown(_) => MessageType::Fyi,
            t => t.clone(),
        }
    }

    /// Whether `re:` is required (§3: answer and ack).
    pub fn needs_re(&self) -> bool {
        matches!(self, MessageType::Answer | MessageType::Ack)
    }
}

/// A participant as frontmatter names it (`from`, `publisher`, a recipient).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct Party {
    /// The operator.
    pub operator: String,
    /// The instance, where the key carries one (`from`, `publisher`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    /// The agent (`*` on a broadcast's `to`, `any` for operator routing).
    pub agent: String,
}

impl Party {
    /// `<operator>/<agent>`.
    pub fn short(&self) -> String {
        format!("{}/{}", self.operator, self.agent)
    }

    /// `<operator>/<instance>/<agent>` (the audit log's `from`, G-AS-10).
    pub fn long(&self) -> String {
        match &self.instance {
            Some(i) => format!("{}/{i}/{}", self.operator, self.agent),
            None => self.short(),
        }
    }
}

/// `sender_clan` (§3.1): the sending fleet.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Clan {
    /// The operator.
    pub operator: String,
    /// The instance, when known.
    pub instance: Option<String>,
}

/// A message's or publication's `created`, as written and as an instant when it parses.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Created {
    /// The value as written (YAML-typed values are rendered back to text).
    pub raw: String,
    /// The instant, when it is an RFC 3339 date-time (or a bare date, read as midnight UTC).
    pub at: Option<Timestamp>,
}

/// A direct message or broadcast as read (§3, with §3.1's defaults applied).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Message {
    /// The declared `protocol`, as written.
    pub protocol: String,
    /// How that version is read.
    pub version: Version,
    /// The message identity (never derived from the path, §3.1).
    pub id: String,
    /// The sender.
    pub from: Party,
    /// The authoritative delivery field (INV-1).
    pub to: Party,
    /// The thread; a message without one is its own thread.
    pub thread: String,
    /// The type as written.
    #[serde(serialize_with = "ser_type")]
    pub kind: MessageType,
    /// The message this one answers or acknowledges.
    pub re: Option<String>,
    /// When it was written.
    pub created: Option<Created>,
    /// The initial status as written (`open` when absent).
    pub status: String,
    /// `recipients`, defaulted to `[to]` (§3.1).
    pub recipients: Vec<Party>,
    /// Whether the producer emitted `recipients` itself (INV-2 applies only then).
    pub recipients_emitted: bool,
    /// `sender_clan`, defaulted from `from`.
    pub sender_clan: Clan,
    /// `group`; `None` is a direct message.
    pub group: Option<String>,
    /// `retention_tier`, default `standard`. A hint only: nothing is ever deleted (G-AS-5).
    pub retention_tier: String,
    /// `content_hash`, default null.
    pub content_hash: Option<String>,
    /// Whether the body matches `content_hash`.
    pub hash_check: HashCheck,
    /// Every top-level key, in order, for `check`.
    #[serde(skip)]
    pub keys: Vec<String>,
    /// The body, bytes verbatim.
    #[serde(skip)]
    pub body: String,
}

fn ser_type<S: serde::Serializer>(t: &MessageType, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(t.as_str())
}

/// `source` of a publication (§6): provenance.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Source {
    /// The repository.
    pub repo: Option<String>,
    /// The commit.
    pub commit: Option<String>,
    /// The path in it.
    pub path: Option<String>,
}

/// A publication as read (§6).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Publication {
    /// The declared `protocol`, as written.
    pub protocol: String,
    /// How that version is read.
    pub version: Version,
    /// The publication's identity.
    pub id: String,
    /// Who published it.
    pub publisher: Party,
    /// The topic (= the folder name).
    pub topic: String,
    /// Provenance, when given.
    pub source: Option<Source>,
    /// When it was written.
    pub created: Option<Created>,
    /// The id it supersedes.
    pub supersedes: Option<String>,
    /// The freshness signal, as written.
    pub last_verified: Option<String>,
    /// `content_hash`, when given (an envelope field; our writer does not emit it here).
    pub content_hash: Option<String>,
    /// Whether the body matches `content_hash`.
    pub hash_check: HashCheck,
    /// Every top-level key, in order, for `check`.
    #[serde(skip)]
    pub keys: Vec<String>,
    /// The body, bytes verbatim.
    #[serde(skip)]
    pub body: String,
}

/// Why a file cannot be read as an artifact.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// The file does not start with a `---` line.
    #[error("no frontmatter: the file must start with a line '---'")]
    NoFrontmatter,
    /// The frontmatter is never closed.
    #[error("the frontmatter is not closed by a line '---'")]
    Unclosed,
    /// The file is not UTF-8.
    #[error("the file is not UTF-8 text")]
    NotUtf8,
    /// The frontmatter is not YAML (an unquoted `*` is a YAML alias error, G-AS-14).
    #[error("the frontmatter is not valid YAML: {0}")]
    Yaml(String),
    /// The frontmatter is not a mapping.
    #[error("the frontmatter is not a YAML mapping")]
    NotAMapping,
    /// A required key is missing or has the wrong shape (G-AS-6).
    #[error("{0}")]
    Key(String),
    /// An identifying field (id, thread, re, a party, the type) is unsafe to carry into file
    /// names, command lines, frames and the local store: it holds a control or invisible
    /// character, or is longer than [`MAX_FIELD`] characters.
    #[error("unsafe: {0}")]
    Unsafe(String),
}

impl agentbus_protocol::errors::Catalogued for FormatError {
    fn code(&self) -> agentbus_protocol::Code {
        agentbus_protocol::Code::NotAnArtifact
    }
}

/// The longest identifying field (id, thread, re, supersedes, operator, instance, agent, topic,
/// type) a reader accepts; anything longer is reported and skipped, like a file it cannot read.
pub const MAX_FIELD: usize = 256;

/// Why an identifying field read from somebody else's file cannot be used, if it cannot: such a
/// value ends up in command lines printed for a person, in frame attributes and in the local store,
/// so it must be one visible line of bounded length.
fn unsafe_field(key: &str, value: &str) -> Option<String> {
    if let Some(c) = value
        .chars()
        .find(|&c| c.is_control() || agentbus_protocol::frame::is_hidden(c))
    {
        return Some(format!(
            "`{key}` holds the control or invisible character U+{:04X}",
            u32::from(c)
        ));
    }
    let n = value.chars().count();
    (n > MAX_FIELD).then(|| format!("`{key}` is {n} characters long (at most {MAX_FIELD})"))
}

fn check_fields(fields: &[(&str, Option<&str>)]) -> Result<(), FormatError> {
    match fields
        .iter()
        .find_map(|(k, v)| v.and_then(|v| unsafe_field(k, v)))
    {
        Some(why) => Err(FormatError::Unsafe(why)),
        None => Ok(()),
    }
}

fn party_fields_of<'a>(key: &'a str, p: &'a Party) -> [(&'a str, Option<&'a str>); 3] {
    [
        (key, Some(p.operator.as_str())),
        (key, p.instance.as_deref()),
        (key, Some(p.agent.as_str())),
    ]
}

/// Splits a document into its frontmatter text and its body, body bytes verbatim.
pub fn split(text: &str) -> Result<(&str, &str), FormatError> {
    let text = text.strip_prefix('\u{FEFF}').unwrap_or(text);
    let first_end = text.find('\n').ok_or(FormatError::NoFrontmatter)?;
    if text[..first_end].trim_end() != "---" {
        return Err(FormatError::NoFrontmatter);
    }
    let header_start = first_end + 1;
    let mut pos = header_start;
    while pos < text.len() {
        let end = text[pos..].find('\n').map_or(text.len(), |i| pos + i);
        let line = text[pos..end].trim_end();
        if line == "---" || line == "..." {
            let body_start = (end + 1).min(text.len());
            return Ok((&text[header_start..pos], &text[body_start..]));
        }
        pos = end + 1;
    }
    Err(FormatError::Unclosed)
}

fn header_map(header: &str) -> Result<Map<String, Value>, FormatError> {
    if header.trim().is_empty() {
        return Err(FormatError::NotAMapping);
    }
    let value: Value = serde_saphyr::from_str(header)
        .map_err(|e| FormatError::Yaml(first_line(&e.to_string())))?;
    match value {
        Value::Object(map) => Ok(map),
        _ => Err(FormatError::NotAMapping),
    }
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or_default().to_owned()
}

/// A scalar as text; YAML-typed numbers and booleans are rendered back; null and empty are absent.
fn text(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) if s.trim().is_empty() => None,
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn required(map: &Map<String, Value>, key: &str) -> Result<String, FormatError> {
    text(map.get(key)).ok_or_else(|| FormatError::Key(format!("missing required key `{key}`")))
}

fn party(map: &Map<String, Value>, key: &str) -> Result<Party, FormatError> {
    let v = map
        .get(key)
        .ok_or_else(|| FormatError::Key(format!("missing required key `{key}`")))?;
    party_of(v).ok_or_else(|| {
        FormatError::Key(format!("`{key}` must be a mapping with operator and agent"))
    })
}

fn party_of(v: &Value) -> Option<Party> {
    let m = v.as_object()?;
    Some(Party {
        operator: text(m.get("operator"))?,
        instance: text(m.get("instance")),
        agent: text(m.get("agent"))?,
    })
}

fn created(v: Option<&Value>) -> Option<Created> {
    let raw = text(v)?;
    let at = raw.parse::<Timestamp>().ok().or_else(|| {
        // A bare date (or a YAML 1.1 loader's space-separated form) still orders.
        let fixed = if raw.len() == 10 {
            format!("{raw}T00:00:00Z")
        } else {
            raw.replacen(' ', "T", 1)
        };
        fixed.parse().ok()
    });
    Some(Created { raw, at })
}

/// Reads a direct message or broadcast leniently.
pub fn read_message(text_: &str) -> Result<Message, FormatError> {
    let (header, body) = split(text_)?;
    let map = header_map(header)?;
    let protocol = required(&map, "protocol")?;
    let id = required(&map, "id")?;
    let from = party(&map, "from")?;
    let to = party(&map, "to")?;
    let kind = MessageType::of(&required(&map, "type")?);
    let recipients_emitted = map.get("recipients").is_some_and(|v| !v.is_null());
    let recipients = match map.get("recipients").and_then(Value::as_array) {
        Some(list) => list.iter().filter_map(party_of).collect(),
        None => vec![to.clone()],
    };
    let sender_clan = map
        .get("sender_clan")
        .and_then(Value::as_object)
        .and_then(|m| {
            Some(Clan {
                operator: text(m.get("operator"))?,
                instance: text(m.get("instance")),
            })
        })
        .unwrap_or_else(|| Clan {
            operator: from.operator.clone(),
            instance: from.instance.clone(),
        });
    let content_hash = text(map.get("content_hash"));
    let thread = text(map.get("thread"));
    let re = text(map.get("re"));
    let mut fields = vec![
        ("id", Some(id.as_str())),
        ("thread", thread.as_deref()),
        ("re", re.as_deref()),
        ("type", Some(kind.as_str())),
    ];
    fields.extend(party_fields_of("from", &from));
    fields.extend(party_fields_of("to", &to));
    check_fields(&fields)?;
    Ok(Message {
        version: Version::of(&protocol),
        protocol,
        thread: thread.unwrap_or_else(|| id.clone()),
        id,
        from,
        to,
        kind,
        re,
        created: created(map.get("created")),
        status: text(map.get("status")).unwrap_or_else(|| "open".to_owned()),
        recipients,
        recipients_emitted,
        sender_clan,
        group: text(map.get("group")),
        retention_tier: text(map.get("retention_tier")).unwrap_or_else(|| "standard".to_owned()),
        hash_check: HashCheck::of(content_hash.as_deref(), body),
        content_hash,
        keys: map.keys().cloned().collect(),
        body: body.to_owned(),
    })
}

/// Reads a publication leniently.
pub fn read_publication(text_: &str) -> Result<Publication, FormatError> {
    let (header, body) = split(text_)?;
    let map = header_map(header)?;
    let protocol = required(&map, "protocol")?;
    let content_hash = text(map.get("content_hash"));
    let id = required(&map, "id")?;
    let publisher = party(&map, "publisher")?;
    let topic = required(&map, "topic")?;
    let supersedes = text(map.get("supersedes"));
    let mut fields = vec![
        ("id", Some(id.as_str())),
        ("topic", Some(topic.as_str())),
        ("supersedes", supersedes.as_deref()),
    ];
    fields.extend(party_fields_of("publisher", &publisher));
    check_fields(&fields)?;
    Ok(Publication {
        version: Version::of(&protocol),
        protocol,
        id,
        publisher,
        topic,
        source: map
            .get("source")
            .and_then(Value::as_object)
            .map(|m| Source {
                repo: text(m.get("repo")),
                commit: text(m.get("commit")),
                path: text(m.get("path")),
            }),
        created: created(map.get("created")),
        supersedes,
        last_verified: text(map.get("last_verified")),
        hash_check: HashCheck::of(content_hash.as_deref(), body),
        content_hash,
        keys: map.keys().cloned().collect(),
        body: body.to_owned(),
    })
}

/// Whether YAML (1.1 or 1.2) reads `s` written plain as the same string: letters, digits, `-` and
/// `_` only, at least one letter, and nothing a loader would type as a number, boolean, null,
/// infinity or date (G-AS-14).
pub fn plain_is_safe(s: &str) -> bool {
    const WORDS: &[&str] = &["y", "n", "yes", "no", "on", "off", "true", "false", "null"];
    let lower = s.to_ascii_lowercase();
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        && s.as_bytes()[0].is_ascii_alphanumeric()
        && s.bytes().any(|b| b.is_ascii_alphabetic())
        && !WORDS.contains(&lower.as_str())
        && lower.parse::<f64>().is_err()
        && !["0x", "0o", "0b"].iter().any(|p| lower.starts_with(p))
}

/// A YAML scalar: plain when YAML cannot type it ([`plain_is_safe`]), double-quoted otherwise
/// (JSON string syntax is valid YAML double-quoted syntax).
pub fn scalar(s: &str) -> String {
    if plain_is_safe(s) {
        s.to_owned()
    } else {
        serde_json::to_string(s).unwrap_or_default()
    }
}

fn flow(out: &mut String, key: &str, fields: &[(&str, &str)]) {
    let _ = write!(out, "{key}: {{ ");
    for (i, (k, v)) in fields.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let _ = write!(out, "{k}: {}", scalar(v));
    }
    out.push_str(" }\n");
}

fn party_fields(p: &Party) -> Vec<(&str, &str)> {
    let mut f = vec![("operator", p.operator.as_str())];
    if let Some(i) = &p.instance {
        f.push(("instance", i.as_str()));
    }
    f.push(("agent", p.agent.as_str()));
    f
}

/// Everything the writer needs for one copy of a message.
#[derive(Debug, Clone)]
pub struct MessageOut<'a> {
    /// The id, shared by every copy of one message.
    pub id: &'a str,
    /// The sender, with its instance.
    pub from: &'a Party,
    /// This copy's recipient (INV-2: the folder's recipient); `*`/`*` on a broadcast.
    pub to: &'a Party,
    /// The thread.
    pub thread: &'a str,
    /// One of the five 0.1.0 types.
    pub kind: &'a MessageType,
    /// The id answered or acknowledged (emitted on answer/ack only).
    pub re: Option<&'a str>,
    /// `created`, RFC 3339 UTC.
    pub created: &'a str,
    /// `open` or `done`.
    pub status: &'a str,
    /// The whole delivery set, emitted only on a multicast (more than one recipient).
    pub recipients: &'a [Party],
    /// The body.
    pub body: &'a str,
    /// An attribution line appended after hashing (§3.2), such as `_Dispatched by agentbus_`.
    pub footer: Option<&'a str>,
}

fn open_doc() -> String {
    format!("---\nprotocol: {PROTOCOL}\n")
}

fn close_doc(mut out: String, body: &str, footer: Option<&str>) -> String {
    out.push_str("---\n\n");
    out.push_str(body);
    if !body.ends_with('\n') {
        out.push('\n');
    }
    if let Some(f) = footer {
        out.push('\n');
        out.push_str(f);
        out.push('\n');
    }
    out
}

/// Writes one copy of a message exactly as §3 lays it out.
pub fn write_message(m: &MessageOut<'_>) -> String {
    let mut out = open_doc();
    let _ = writeln!(out, "id: {}", scalar(m.id));
    flow(&mut out, "from", &party_fields(m.from));
    flow(
        &mut out,
        "to",
        &[("operator", &m.to.operator), ("agent", &m.to.agent)],
    );
    let _ = writeln!(out, "thread: {}", scalar(m.thread));
    let _ = writeln!(out, "type: {}", scalar(m.kind.as_str()));
    if m.kind.needs_re()
        && let Some(re) = m.re
    {
        let _ = writeln!(out, "re: {}", scalar(re));
    }
    let _ = writeln!(out, "created: {}", scalar(m.created));
    let _ = writeln!(out, "status: {}", scalar(m.status));
    if m.recipients.len() > 1 {
        out.push_str("recipients:\n");
        for r in m.recipients {
            let _ = writeln!(
                out,
                "  - {{ operator: {}, agent: {} }}",
                scalar(&r.operator),
                scalar(&r.agent)
            );
        }
    }
    let _ = writeln!(
        out,
        "content_hash: {}",
        scalar(&crate::hash::content_hash(m.body))
    );
    close_doc(out, m.body, m.footer)
}

/// Everything the writer needs for a publication.
#[derive(Debug, Clone)]
pub struct PublicationOut<'a> {
    /// The id.
    pub id: &'a str,
    /// The publisher, with its instance.
    pub publisher: &'a Party,
    /// The topic (= the folder).
    pub topic: &'a str,
    /// Provenance; omitted when authored in place.
    pub source: Option<&'a Source>,
    /// `created`, RFC 3339 UTC.
    pub created: &'a str,
    /// The id this publication supersedes.
    pub supersedes: Option<&'a str>,
    /// The freshness date, omitted when unknown.
    pub last_verified: Option<&'a str>,
    /// The body.
    pub body: &'a str,
}

/// Writes a publication exactly as §6 lays it out.
pub fn write_publication(p: &PublicationOut<'_>) -> String {
    let mut out = open_doc();
    let _ = writeln!(out, "id: {}", scalar(p.id));
    flow(&mut out, "publisher", &party_fields(p.publisher));
    let _ = writeln!(out, "topic: {}", scalar(p.topic));
    if let Some(s) = p.source {
        let fields: Vec<(&str, &str)> =
            [("repo", &s.repo), ("commit", &s.commit), ("path", &s.path)]
                .into_iter()
                .filter_map(|(k, v)| v.as_deref().map(|v| (k, v)))
                .collect();
        if !fields.is_empty() {
            flow(&mut out, "source", &fields);
        }
    }
    let _ = writeln!(out, "created: {}", scalar(p.created));
    if let Some(s) = p.supersedes {
        let _ = writeln!(out, "supersedes: {}", scalar(s));
    }
    if let Some(d) = p.last_verified {
        let _ = writeln!(out, "last_verified: {}", scalar(d));
    }
    close_doc(out, p.body, None)
}

/// Rewrites the values of `id:`, `thread:`, `re:` and `supersedes:` in a document's frontmatter
/// through `rename`, leaving every other byte (the body above all) as it was. Used only on files
/// that were never pushed, when a lost race forces a new name (G-AS-3): a new message's thread is
/// its own id, so it must follow the id, or the message would join whichever message now holds
/// the old id (§5).
pub fn rename_ids(doc: &str, rename: &dyn Fn(&str) -> Option<String>) -> String {
    let Ok((header, _)) = split(doc) else {
        return doc.to_owned();
    };
    let start = header.as_ptr() as usize - doc.as_ptr() as usize;
    let end = start + header.len();
    let mut out = String::with_capacity(doc.len() + 16);
    out.push_str(&doc[..start]);
    for line in header.split_inclusive('\n') {
        let renamed = ["id", "thread", "re", "supersedes"].iter().find_map(|key| {
            let value = line.strip_prefix(key)?.strip_prefix(':')?.trim();
            let new = rename(&unquote(value))?;
            Some(format!("{key}: {}\n", scalar(&new)))
        });
        out.push_str(renamed.as_deref().unwrap_or(line));
    }
    out.push_str(&doc[end..]);
    out
}

/// A one-line YAML scalar as written (plain, `"double"` or `'single'` quoted) read back to its
/// text; what `scalar` writes, `unquote` reads.
fn unquote(value: &str) -> String {
    if value.starts_with('"') {
        if let Ok(s) = serde_json::from_str::<String>(value) {
            return s;
        }
    } else if let Some(inner) = value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')) {
        return inner.replace("''", "'");
    }
    value.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let from = Party {
            operator: "balazs".into(),
            instance: Some("claude-fleet".into()),
            agent: "research-agent".into(),
        };
        let to = Party {
            operator: "*".into(),
            instance: None,
            agent: "*".into(),
        };
        let doc = write_message(&MessageOut {
            id: "20260808T101500Z-balazs-x",
            from: &from,
            to: &to,
            thread: "x",
            kind: &MessageType::Fyi,
            re: None,
            created: "2026-08-08T10:15:00Z",
            status: "open",
            recipients: &[],
            body: "Hello *world*\n",
            footer: Some("_Dispatched by agentbus_"),
        });
        assert!(
            doc.contains("to: { operator: \"*\", agent: \"*\" }\n"),
            "{doc}"
        );
        let m = read_message(&doc).unwrap();
        assert_eq!(m.to.agent, "*");
        assert_eq!(m.hash_check, HashCheck::Verified);
        assert_eq!(
            m.created.unwrap().at.unwrap().to_string(),
            "2026-08-08T10:15:00.000Z"
        );
        let renamed = rename_ids(&doc, &|v| {
            (v == "20260808T101500Z-balazs-x").then(|| "new-id".into())
        });
        assert!(renamed.contains("\nid: new-id\n"));
        assert!(renamed.ends_with("Hello *world*\n\n_Dispatched by agentbus_\n"));
    }
}
