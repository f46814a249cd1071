//! The registry, `operators.yaml` (§8), and its split form `operators/<operator>.yaml`.
//!
//! §8 gives the file's meaning but no schema (G-AS-9). Ours: one top-level key per operator, whose
//! block lists its instances, each with its agents, and optionally the git author e-mails its
//! commits carry (for `doctor`'s signer ↔ registry check, §11):
//!
//! ```yaml
//! balazs:
//!   instances:
//!     claude-fleet:
//!       agents: [research-agent, architect-agent]
//!   emails: ["balazs@example.org"]
//! ```
//!
//! One top-level key per operator makes "edit only your own block" a text operation: `join`
//! replaces the lines from `<operator>:` to the next top-level key and leaves every other byte of
//! the file as it was (AS-8-2). Readers accept the single file, the split form, or both.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use crate::error::ShareError;
use crate::frontmatter::scalar;
use crate::naming::{REGISTRY, REGISTRY_DIR};

/// One operator's block.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct OperatorEntry {
    /// Instance → its agents.
    pub instances: BTreeMap<String, Vec<String>>,
    /// Git author e-mails of this operator's commits.
    pub emails: Vec<String>,
}

/// Everyone declared in a share.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Registry {
    /// Operator → block.
    pub operators: BTreeMap<String, OperatorEntry>,
}

/// The comment `init` writes at the top of a new registry.
pub const HEADER: &str = "# The share's registry (agentshare §8): who may participate.\n\
# One top-level key per operator. Edit only your own block: pull --rebase, edit, push promptly.\n";

fn strings(v: Option<&Value>) -> Vec<String> {
    match v {
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(|x| x.as_str().map(str::to_owned))
            .collect(),
        Some(Value::String(s)) => vec![s.clone()],
        _ => Vec::new(),
    }
}

fn entry_of(v: &Value) -> OperatorEntry {
    let mut e = OperatorEntry::default();
    if let Some(insts) = v.get("instances").and_then(Value::as_object) {
        for (name, inst) in insts {
            e.instances
                .insert(name.clone(), strings(inst.get("agents")));
        }
    }
    e.emails = strings(v.get("emails"));
    e
}

fn parse(text: &str, what: &str) -> Result<BTreeMap<String, Value>, ShareError> {
    if text.trim().is_empty()
        || text
            .lines()
            .all(|l| l.trim().is_empty() || l.starts_with('#'))
    {
        return Ok(BTreeMap::new());
    }
    let v: Value = serde_saphyr::from_str(text).map_err(|e| {
        ShareError::Registry(format!(
            "{what}: {}",
            e.to_string().lines().next().unwrap_or_default()
        ))
    })?;
    match v {
        Value::Object(m) => Ok(m.into_iter().collect()),
        Value::Null => Ok(BTreeMap::new()),
        _ => Err(ShareError::Registry(format!(
            "{what}: not a mapping of operators"
        ))),
    }
}

impl Registry {
    /// Parses the single-file form.
    pub fn parse(text: &str) -> Result<Registry, ShareError> {
        let mut r = Registry::default();
        for (op, block) in parse(text, REGISTRY)? {
            r.operators.insert(op, entry_of(&block));
        }
        Ok(r)
    }

    /// Loads a share's registry from `operators.yaml` and `operators/*.yaml` (AS-8-3). A missing
    /// file is an empty registry.
    pub fn load(root: &Path) -> Result<Registry, ShareError> {
        let mut r = match std::fs::read_to_string(root.join(REGISTRY)) {
            Ok(text) => Registry::parse(&text)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Registry::default(),
            Err(e) => return Err(ShareError::io(root.join(REGISTRY))(e)),
        };
        let dir = root.join(REGISTRY_DIR);
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for entry in entries.flatten() {
                let path = entry.path();
                let Some(op) = path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .and_then(|n| n.strip_suffix(".yaml"))
                else {
                    continue;
                };
                let text = std::fs::read_to_string(&path).map_err(ShareError::io(&path))?;
                let map = parse(&text, &format!("{REGISTRY_DIR}/{op}.yaml"))?;
                // The split file holds either `<op>: {block}` or the block itself.
                let block = match map.get(op) {
                    Some(b) => b.clone(),
                    None => Value::Object(map.into_iter().collect()),
                };
                let e = entry_of(&block);
                let slot = r.operators.entry(op.to_owned()).or_default();
                for (inst, agents) in e.instances {
                    let have = slot.instances.entry(inst).or_default();
                    for a in agents {
                        if !have.contains(&a) {
                            have.push(a);
                        }
                    }
                }
                slot.emails.extend(e.emails);
            }
        }
        Ok(r)
    }

    /// Whether operator, instance and agent are all declared (§2).
    pub fn declares(&self, operator: &str, instance: Option<&str>, agent: &str) -> bool {
        let Some(e) = self.operators.get(operator) else {
            return false;
        };
        match instance {
            Some(i) => e
                .instances
                .get(i)
                .is_some_and(|a| a.iter().any(|x| x == agent)),
            None => e.instances.values().any(|a| a.iter().any(|x| x == agent)),
        }
    }

    /// The operator whose block lists `email`, if any.
    pub fn operator_of_email(&self, email: &str) -> Option<&str> {
        self.operators
            .iter()
            .find(|(_, e)| e.emails.iter().any(|m| m.eq_ignore_ascii_case(email)))
            .map(|(op, _)| op.as_str())
    }
}

/// Renders one operator's block in our schema.
pub fn render_block(operator: &str, e: &OperatorEntry) -> String {
    let mut out = format!("{operator}:\n  instances:\n");
    for (inst, agents) in &e.instances {
        let list: Vec<String> = agents.iter().map(|a| scalar(a)).collect();
        out.push_str(&format!(
            "    {inst}:\n      agents: [{}]\n",
            list.join(", ")
        ));
    }
    if !e.emails.is_empty() {
        let list: Vec<String> = e.emails.iter().map(|m| scalar(m)).collect();
        out.push_str(&format!("  emails: [{}]\n", list.join(", ")));
    }
    out
}

fn is_top_level_key(line: &str, key: &str) -> bool {
    line.strip_prefix(key)
        .and_then(|r| r.strip_prefix(':'))
        .is_some_and(|r| r.trim().is_empty() || r.trim_start().starts_with('#'))
}

fn starts_top_level(line: &str) -> bool {
    line.chars()
        .next()
        .is_some_and(|c| !c.is_whitespace() && c != '#')
}

/// Replaces `operator`'s block in a registry text with `block`, or appends it; every other byte of
/// the file stays as it was.
pub fn splice_block(text: &str, operator: &str, block: &str) -> String {
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let start = lines.iter().position(|l| is_top_level_key(l, operator));
    let mut out = String::with_capacity(text.len() + block.len());
    match start {
        Some(s) => {
            let end = lines[s + 1..]
                .iter()
                .position(|l| starts_top_level(l))
                .map_or(lines.len(), |i| s + 1 + i);
            lines[..s].iter().for_each(|l| out.push_str(l));
            out.push_str(block);
            lines[end..].iter().for_each(|l| out.push_str(l));
        }
        None => {
            out.push_str(text);
            if !out.is_empty() && !out.ends_with('\n') {
                out.push('\n');
            }
            out.push_str(block);
        }
    }
    out
}

/// The text of `operator`'s block in a registry text, if it has one.
pub fn block_of(text: &str, operator: &str) -> Option<String> {
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let s = lines.iter().position(|l| is_top_level_key(l, operator))?;
    let end = lines[s + 1..]
        .iter()
        .position(|l| starts_top_level(l))
        .map_or(lines.len(), |i| s + 1 + i);
    Some(lines[s..end].concat())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splice_keeps_other_blocks() {
        let text = format!(
            "{HEADER}alpha:\n  instances:\n    f:\n      agents: [a]\n# note\nbeta:\n  instances:\n    g:\n      agents: [b]\n"
        );
        let mut e = OperatorEntry::default();
        e.instances.insert("f".into(), vec!["a".into(), "c".into()]);
        let out = splice_block(&text, "alpha", &render_block("alpha", &e));
        assert!(out.contains("beta:\n  instances:\n    g:\n      agents: [b]\n"));
        assert!(out.contains("agents: [a, c]"));
        let r = Registry::parse(&out).unwrap();
        assert!(r.declares("alpha", Some("f"), "c"));
        assert!(r.declares("beta", None, "b"));
        assert!(!r.declares("beta", Some("f"), "b"));
        let out = splice_block(&out, "gamma", &render_block("gamma", &e));
        assert!(
            Registry::parse(&out)
                .unwrap()
                .declares("gamma", Some("f"), "a")
        );
    }
}
