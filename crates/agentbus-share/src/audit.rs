//! The audit log (§7): one JSON line per send / route / ack / publish / error, appended to the
//! acting operator's own daily file `log/<operator>-<date>.jsonl`.
//!
//! Our reading of what §7 leaves open (G-AS-10, G-AS-18): `<date>` is the UTC `YYYY-MM-DD`; `from`
//! is `operator/instance/agent`; `to` is `operator/agent`; fields that do not apply are omitted; a
//! multicast writes one `send` line (the primary recipient) and one `route` line per further copy;
//! `error` records a write this clone committed but could not push. Instances of one operator
//! share the file, so the share's `.gitattributes` says `log/*.jsonl merge=union` (G-AS-4) and no
//! line is ever rewritten. The log is self-reported: an operational record, not evidence (§11).

use std::io::Write as _;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::ShareError;
use crate::naming;

/// The five events 0.1.0 defines.
pub const EVENTS: [&str; 5] = ["send", "route", "ack", "publish", "error"];

/// One audit line, fields in §7's order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogLine {
    /// When, RFC 3339 UTC.
    pub ts: String,
    /// The acting operator (whose file this is).
    pub operator: String,
    /// One of [`EVENTS`].
    pub event: String,
    /// The message or publication id.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub msg_id: Option<String>,
    /// `operator/instance/agent`.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub from: Option<String>,
    /// `operator/agent` (`*/*` for a broadcast).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub to: Option<String>,
    /// The thread.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub thread: Option<String>,
    /// The message type.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none", default)]
    pub kind: Option<String>,
}

impl LogLine {
    /// The line as JSON, without the newline.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// Appends lines to `root/rel` in one write (so a reader never sees half a line from us).
pub fn append(root: &Path, rel: &str, lines: &[LogLine]) -> Result<(), ShareError> {
    let path = root.join(rel);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(ShareError::io(parent))?;
    }
    let mut text = String::new();
    // A file that lacks its final newline (written by hand) must not glue our line onto its last.
    if let Ok(existing) = std::fs::read(&path)
        && existing.last().is_some_and(|b| *b != b'\n')
    {
        text.push('\n');
    }
    for l in lines {
        text.push_str(&l.to_json());
        text.push('\n');
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(ShareError::io(&path))?;
    f.write_all(text.as_bytes()).map_err(ShareError::io(&path))
}

/// This operator's log files, oldest first, as share-relative paths.
pub fn files_of(root: &Path, operator: &str) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(root.join(naming::LOG))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| {
            n.strip_suffix(".jsonl")
                .and_then(|s| s.strip_prefix(operator))
                .and_then(|s| s.strip_prefix('-'))
                .is_some_and(naming::is_date)
        })
        .map(|n| format!("{}/{n}", naming::LOG))
        .collect();
    out.sort();
    out
}

/// The operator and date a log file name encodes, when it has the `<operator>-<date>.jsonl` form.
pub fn split_name(name: &str) -> Option<(&str, &str)> {
    let stem = name.strip_suffix(".jsonl")?;
    if stem.len() < 12 {
        return None;
    }
    let (op, date) = stem.split_at(stem.len() - 11);
    let date = date.strip_prefix('-')?;
    (naming::is_date(date) && crate::ident::ident_problem(op).is_none()).then_some((op, date))
}
