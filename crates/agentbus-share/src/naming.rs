//! Names and paths (§1, §3, §4, §6, §7), in the README's reconstruction of the stripped
//! placeholders:
//!
//! - direct message: `messages/<to-operator>/<to-agent>/<timestamp>-<from-operator>-<from-agent>-<slug>.md`
//! - broadcast: `broadcast/<timestamp>-<operator>-<slug>.md`
//! - knowledge: `knowledge/<topic>/<date>-<operator>-<slug>.md`
//! - audit log: `log/<operator>-<date>.jsonl`
//!
//! `<timestamp>` is UTC `YYYYMMDDTHHMMSSZ` (AS-3-2), `<date>` UTC `YYYY-MM-DD` (G-AS-10). A
//! same-second (or, for knowledge, same-day) collision gains `-2`, `-3`… (AS-3-4). Nothing here
//! extracts identity from a name: names are built, and checked for form, never parsed for meaning
//! (§3.1).

use agentbus_protocol::timestamp::Timestamp;
use time::OffsetDateTime;

/// The top-level folder of direct messages.
pub const MESSAGES: &str = "messages";
/// The top-level folder of broadcasts.
pub const BROADCAST: &str = "broadcast";
/// The top-level folder of publications.
pub const KNOWLEDGE: &str = "knowledge";
/// The top-level folder of audit logs.
pub const LOG: &str = "log";
/// The registry file (§8).
pub const REGISTRY: &str = "operators.yaml";
/// The split form of the registry (§8): `operators/<operator>.yaml`.
pub const REGISTRY_DIR: &str = "operators";

fn utc(t: Timestamp) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(t.millis().div_euclid(1000))
        .unwrap_or(OffsetDateTime::UNIX_EPOCH)
}

/// `YYYYMMDDTHHMMSSZ`, the filename timestamp (§3), always UTC whatever the machine's zone.
pub fn compact(t: Timestamp) -> String {
    let d = utc(t);
    format!(
        "{:04}{:02}{:02}T{:02}{:02}{:02}Z",
        d.year(),
        u8::from(d.month()),
        d.day(),
        d.hour(),
        d.minute(),
        d.second()
    )
}

/// `YYYY-MM-DDTHH:MM:SSZ`, the `created:` value; the writer uses the filename's instant (G-AS-15).
pub fn rfc3339_seconds(t: Timestamp) -> String {
    let d = utc(t);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        d.year(),
        u8::from(d.month()),
        d.day(),
        d.hour(),
        d.minute(),
        d.second()
    )
}

/// `YYYY-MM-DD` in UTC, for knowledge names and log files.
pub fn date(t: Timestamp) -> String {
    let d = utc(t);
    format!("{:04}-{:02}-{:02}", d.year(), u8::from(d.month()), d.day())
}

/// Whether `s` is a compact timestamp `YYYYMMDDTHHMMSSZ`.
pub fn is_compact_timestamp(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 16
        && b[..8].iter().all(u8::is_ascii_digit)
        && b[8] == b'T'
        && b[9..15].iter().all(u8::is_ascii_digit)
        && b[15] == b'Z'
}

/// Whether `s` is a date `YYYY-MM-DD`.
pub fn is_date(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 10
        && b.iter().enumerate().all(|(i, c)| {
            if i == 4 || i == 7 {
                *c == b'-'
            } else {
                c.is_ascii_digit()
            }
        })
}

/// The stem of a direct message's file name before any collision suffix.
pub fn message_stem(t: Timestamp, from_operator: &str, from_agent: &str, slug: &str) -> String {
    format!("{}-{from_operator}-{from_agent}-{slug}", compact(t))
}

/// The stem of a broadcast's file name before any collision suffix.
pub fn broadcast_stem(t: Timestamp, operator: &str, slug: &str) -> String {
    format!("{}-{operator}-{slug}", compact(t))
}

/// The stem of a publication's file name before any collision suffix.
pub fn knowledge_stem(t: Timestamp, operator: &str, slug: &str) -> String {
    format!("{}-{operator}-{slug}", date(t))
}

/// `stem` with the §3 collision suffix: `n` ≤ 1 is the bare stem, then `-2`, `-3`…
pub fn suffixed(stem: &str, n: u32) -> String {
    if n <= 1 {
        stem.to_owned()
    } else {
        format!("{stem}-{n}")
    }
}

/// The recipient folder of a direct message, `messages/<operator>/<agent>`.
pub fn message_dir(operator: &str, agent: &str) -> String {
    format!("{MESSAGES}/{operator}/{agent}")
}

/// The topic folder of a publication, `knowledge/<topic>`.
pub fn knowledge_dir(topic: &str) -> String {
    format!("{KNOWLEDGE}/{topic}")
}

/// The audit log file of `operator` on `date` (§7): one file per operator, so no two operators
/// ever write the same path.
pub fn log_path(operator: &str, date: &str) -> String {
    format!("{LOG}/{operator}-{date}.jsonl")
}

/// Where a share-relative path sits in the layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place<'a> {
    /// `messages/<operator>/<agent>/<name>`.
    Message {
        /// The recipient operator folder.
        operator: &'a str,
        /// The recipient agent folder (may be `any`).
        agent: &'a str,
        /// The file name.
        name: &'a str,
    },
    /// `broadcast/<name>`.
    Broadcast {
        /// The file name.
        name: &'a str,
    },
    /// `knowledge/<topic>/<name>`.
    Knowledge {
        /// The topic folder.
        topic: &'a str,
        /// The file name.
        name: &'a str,
    },
    /// `log/<name>`.
    Log {
        /// The file name.
        name: &'a str,
    },
    /// Anything else under one of the four protocol folders (wrong depth, a stray file).
    Stray {
        /// Which protocol folder it sits in.
        folder: &'a str,
    },
    /// Outside the protocol folders (`operators.yaml`, `README.md`, `.gitattributes`…).
    Outside,
}

/// Classifies a share-relative path (with `/` separators).
pub fn place(rel: &str) -> Place<'_> {
    let parts: Vec<&str> = rel.split('/').collect();
    match parts.as_slice() {
        [MESSAGES, operator, agent, name] => Place::Message {
            operator,
            agent,
            name,
        },
        [BROADCAST, name] => Place::Broadcast { name },
        [KNOWLEDGE, topic, name] => Place::Knowledge { topic, name },
        [LOG, name] => Place::Log { name },
        [folder, _, ..] if [MESSAGES, BROADCAST, KNOWLEDGE, LOG].contains(folder) => {
            Place::Stray { folder }
        }
        _ => Place::Outside,
    }
}

/// Why a file name in `place` breaks the naming rules, given the writer's identity from its
/// frontmatter (`who` = the `<from-operator>-<from-agent>` or `<operator>` part the name must carry
/// after its time). `None` when the name is well formed.
///
/// Accepted: `<timestamp>-<who>-<slug>.md` for messages and broadcasts, and `<date>-<who>-<slug>.md`
/// or `<timestamp>-<who>-<slug>.md` for knowledge (G-AS-1: readers accept both forms).
pub fn name_problem(name: &str, knowledge: bool, who: &str) -> Option<String> {
    let Some(stem) = name.strip_suffix(".md") else {
        return Some("the file name must end in .md".to_owned());
    };
    let (time, rest) = if stem.len() > 11 && is_date(&stem[..10]) {
        (&stem[..10], &stem[10..])
    } else if stem.len() > 17 && is_compact_timestamp(&stem[..16]) {
        (&stem[..16], &stem[16..])
    } else {
        return Some(if knowledge {
            "the name must start with a UTC date YYYY-MM-DD (or YYYYMMDDTHHMMSSZ)".to_owned()
        } else {
            "the name must start with a UTC timestamp YYYYMMDDTHHMMSSZ".to_owned()
        });
    };
    if !knowledge && is_date(time) {
        return Some("a message name starts with YYYYMMDDTHHMMSSZ, not a date".to_owned());
    }
    let Some(rest) = rest.strip_prefix('-') else {
        return Some("a '-' must follow the time".to_owned());
    };
    if let Some(why) = crate::ident::ident_problem(rest) {
        return Some(format!("the part after the time is not kebab-case: {why}"));
    }
    let Some(slug) = rest.strip_prefix(who).and_then(|s| s.strip_prefix('-')) else {
        return Some(format!(
            "the name must encode its writer {who:?} after the time"
        ));
    };
    if slug.is_empty() {
        return Some("the name has no slug".to_owned());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        let t: Timestamp = "2026-08-08T10:15:00.999Z".parse().unwrap();
        assert_eq!(compact(t), "20260808T101500Z");
        assert_eq!(rfc3339_seconds(t), "2026-08-08T10:15:00Z");
        assert_eq!(date(t), "2026-08-08");
        assert!(is_compact_timestamp("20260808T101500Z"));
        assert!(!is_compact_timestamp("2026-08-08T10:15:00Z"));
    }

    #[test]
    fn names() {
        assert_eq!(
            name_problem(
                "20260808T101500Z-balazs-research-agent-x.md",
                false,
                "balazs-research-agent"
            ),
            None
        );
        assert_eq!(
            name_problem("2026-08-08-balazs-x-2.md", true, "balazs"),
            None
        );
        assert!(name_problem("2026-08-08-balazs-x.md", false, "balazs").is_some());
        assert!(name_problem("20260808T101500Z-patrik-x.md", false, "balazs").is_some());
        assert!(name_problem("20260808T10:15:00Z-balazs-x.md", false, "balazs").is_some());
        assert!(name_problem("INDEX.md", true, "balazs").is_some());
    }
}
