//! Pacing windows (LM: window_for, Window, Pace; LM-57..LM-64, G-LM-2).
//!
//! A sender may have `size` tells and asks to one recipient that the recipient has not
//! acknowledged, by a Seen line it wrote when shown them or by a reply. The window is a pure
//! function of the pair's own lines (LM-62): an integer in `[1, WINDOW_CAP]`, folded over the
//! pair's messages in stamp order, doubling per acknowledged message and halving per message that
//! expired unacknowledged.
//!
//! Recipients that may never acknowledge, a broadcast and the engineer, are floored at one message
//! per [`V1_RATE_MS`] (Pace::Floor, LM-63); a session of another node is paced by that rate alone
//! until its node acknowledges one of the pair's messages (Pace::Rate, LM-64).

use std::collections::HashSet;

use serde::Serialize;

use crate::address::Address;
use crate::consts::{TTL_MS, V1_RATE_MS, WINDOW_CAP};
use crate::line::{Line, Message};

/// How one sender's tells and asks to one recipient are paced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Pace {
    /// By acknowledgements (a session of this node, or of a node that has acknowledged the pair).
    Window,
    /// By the window, but never more strictly than one per [`V1_RATE_MS`] (broadcast, engineer).
    Floor,
    /// One per [`V1_RATE_MS`] alone (a session of a node that has acknowledged nothing yet).
    Rate,
}

/// One sender's window to one recipient at a moment (LM: Window).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Window {
    /// How the pair is paced.
    pub pace: Pace,
    /// The window: how many unacknowledged messages may be outstanding.
    pub size: u32,
    /// How many are outstanding now (unacknowledged and not expired).
    pub outstanding: u32,
    /// The stamp of the pair's latest message, if any.
    pub last_ms: Option<i64>,
    /// Whether one more message is admitted now.
    pub admits: bool,
    /// The ids of the outstanding messages, oldest first.
    #[serde(skip)]
    pub unread: Vec<String>,
}

/// The window of `by` (on `by_node`) to `to` over `lines` at `now`, as seen from `this_node`.
pub fn window_for(
    by: &str,
    by_node: &str,
    to: &Address,
    lines: &[Line],
    this_node: &str,
    now: i64,
) -> Window {
    let to_text = to.to_string();
    let mut pair: Vec<&Message> = lines
        .iter()
        .filter_map(|l| match l {
            Line::Message(m)
                if m.by == by
                    && m.node == by_node
                    && m.to == to_text
                    && m.kind.is_conversation()
                    && m.via.is_none() =>
            {
                Some(m)
            }
            _ => None,
        })
        .collect();
    pair.sort_by(|a, b| a.ms.cmp(&b.ms).then_with(|| a.id.cmp(&b.id)));
    let ids: HashSet<&str> = pair.iter().map(|m| m.id.as_str()).collect();
    let acked = acknowledged(to, lines, &ids);

    let mut size = 1u32;
    let mut unread = Vec::new();
    for m in &pair {
        if acked.contains(m.id.as_str()) {
            size = (size * 2).min(WINDOW_CAP);
        } else if m.ms < now.saturating_sub(TTL_MS) {
            size = (size / 2).max(1);
        } else {
            unread.push(m.id.clone());
        }
    }
    let outstanding = u32::try_from(unread.len()).unwrap_or(u32::MAX);
    let last_ms = pair.last().map(|m| m.ms);
    let rate_ok = last_ms.is_none_or(|ms| now.saturating_sub(ms) >= V1_RATE_MS);
    let pace = match to {
        Address::Session { node, .. } if node != this_node && acked.is_empty() => Pace::Rate,
        Address::Session { .. } | Address::Agent(_) => Pace::Window,
        Address::Local(_) | Address::All | Address::Engineer(_) => Pace::Floor,
    };
    let admits = match pace {
        Pace::Window => outstanding < size,
        Pace::Floor => outstanding < size || rate_ok,
        Pace::Rate => rate_ok,
    };
    Window {
        pace,
        size,
        outstanding,
        last_ms,
        admits,
        unread,
    }
}

/// The ids among `ids` that the recipient `to` acknowledged: by a Seen line it wrote, or by a
/// reply (G-LM-15). Anyone's Seen acknowledges a broadcast; an engineer's, one to the engineer.
fn acknowledged<'a>(to: &Address, lines: &'a [Line], ids: &HashSet<&str>) -> HashSet<&'a str> {
    let speaks_for = |by: &str, node: &str| match to {
        Address::Session { session, node: n } => by == session && node == n,
        Address::Engineer(None) => crate::address::is_engineer(by),
        Address::Engineer(Some(email)) => by.strip_prefix("engineer:") == Some(email.as_str()),
        Address::Local(n) => node == n,
        Address::All | Address::Agent(_) => true,
    };
    let mut out = HashSet::new();
    for line in lines {
        match line {
            Line::Seen(s) if speaks_for(&s.by, &s.node) => {
                out.extend(
                    s.ids
                        .iter()
                        .map(String::as_str)
                        .filter(|id| ids.contains(id)),
                );
            }
            Line::Message(m) if speaks_for(&m.by, &m.node) => {
                if let Some(re) = m.re.as_deref().filter(|re| ids.contains(re)) {
                    out.insert(re);
                }
            }
            _ => {}
        }
    }
    out
}
