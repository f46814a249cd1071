//! What the log keeps (LM: bound, LM-70..LM-75): no line past the TTL (plus the slack) or without
//! a stamp, and of each member's lines of each class the newest while they fit
//! [`MEMBER_BYTES`]. Kept lines stay byte for byte and in their order; only cut lines go.
//! Lines another transport imported count in a group of their own per recipient identity: they
//! never travel, so no other node bounds them, and neither this node's talk nor another
//! identity's mail can push them out.
//!
//! This is a pure function of the raw lines and the time, so every writer (send, ack, import)
//! bounds the log by it alone (LM-78), and two stores holding the same lines in any order keep the
//! same ones (LM-74: newest means by stamp, then by the line's bytes).

use std::collections::HashMap;

use crate::consts::{MEMBER_BYTES, SLACK_MS, TTL_MS};
use crate::line::SEEN;

/// The class a line's bytes count against (LM: Class).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Class {
    /// Tells and asks, and lines of kinds this version does not know.
    Conversation,
    /// Pause, resume, veto.
    Steer,
    /// Acknowledgements.
    Seen,
}

/// What one line tells the bound: its stamp, member, class, and whether it stays on its node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineFacts {
    /// The stamp, if the line has one.
    pub ms: Option<i64>,
    /// The node the line names ("" when it names none).
    pub node: String,
    /// Its class.
    pub class: Class,
    /// Whether it is addressed to its own node's sessions (`local@N`, `<session>@N` written by
    /// N): such lines have classes of their own, so the lines that travel are bounded alike on
    /// every node (LM-72).
    pub own_node: bool,
    /// The recipient identity of a line another transport imported (it has `via`).
    pub import_for: Option<String>,
}

/// Reads what the bound needs from a raw line, leniently: a line of a newer version is bounded by
/// its stamp and node like any other, and kept byte for byte.
pub fn facts(raw: &[u8]) -> LineFacts {
    let value: Option<serde_json::Value> = serde_json::from_slice(raw).ok();
    let get = |k: &str| value.as_ref().and_then(|v| v.get(k));
    let ms = get("ms").and_then(serde_json::Value::as_i64);
    let node = get("node")
        .and_then(serde_json::Value::as_str)
        .unwrap_or("")
        .to_owned();
    let class = match get("kind").and_then(serde_json::Value::as_str) {
        Some(SEEN) => Class::Seen,
        Some("pause" | "resume" | "veto") => Class::Steer,
        _ => Class::Conversation,
    };
    let to = get("to").and_then(serde_json::Value::as_str).unwrap_or("");
    let own_node = !node.is_empty() && to.rsplit_once('@').is_some_and(|(_, n)| n == node);
    let import_for = get("via").filter(|v| v.is_object()).map(|_| to.to_owned());
    LineFacts {
        ms,
        node,
        class,
        own_node,
        import_for,
    }
}

/// The outcome of bounding.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Bounded {
    /// Indices of the kept lines, ascending (their original order).
    pub kept: Vec<usize>,
    /// Lines cut for being past the TTL or unstamped (LM: Change::Expired; not a talk change).
    pub expired: usize,
    /// Lines cut by the byte bound (LM: Change::Cut; counted, and a talk change).
    pub cut: usize,
}

/// Whether a line stamped `ms` is still kept at `now` (the TTL plus the slack, G-LM-12).
pub fn kept_at(ms: i64, now: i64) -> bool {
    ms >= now.saturating_sub(TTL_MS + SLACK_MS)
}

/// Bounds `lines` at `now` with the default [`MEMBER_BYTES`].
pub fn bound(lines: &[&[u8]], now: i64) -> Bounded {
    bound_with(lines, now, MEMBER_BYTES)
}

/// Bounds `lines` at `now` with `member_bytes` per member and class.
pub fn bound_with(lines: &[&[u8]], now: i64, member_bytes: usize) -> Bounded {
    let mut out = Bounded::default();
    // Lines grouped by (member, class, own node, import recipient), each as (stamp, bytes,
    // index).
    type Group<'a> = Vec<(i64, &'a [u8], usize)>;
    type Key = (String, Class, bool, Option<String>);
    let mut groups: HashMap<Key, Group<'_>> = HashMap::new();
    for (i, raw) in lines.iter().enumerate() {
        let f = facts(raw);
        match f.ms {
            Some(ms) if kept_at(ms, now) => groups
                .entry((f.node, f.class, f.own_node, f.import_for))
                .or_default()
                .push((ms, raw, i)),
            _ => out.expired += 1,
        }
    }
    let mut kept = Vec::with_capacity(lines.len());
    for (_, mut members) in groups {
        // Newest first: by stamp, then by the bytes, so arrival order never matters.
        members.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| b.1.cmp(a.1)));
        // The newest while they fit: once one does not, every older one goes too.
        let mut used = 0usize;
        let mut full = false;
        for (_, raw, i) in members {
            let size = raw.len() + 1;
            if !full && used + size <= member_bytes {
                used += size;
                kept.push(i);
            } else {
                full = true;
                out.cut += 1;
            }
        }
    }
    kept.sort_unstable();
    out.kept = kept;
    out
}
