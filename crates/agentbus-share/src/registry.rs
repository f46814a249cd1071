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
                // A broken split file is an error like a broken operators.yaml, not an empty block.
                parse(&text, &format!("{REGISTRY_DIR}/{op}.yaml"))?;
                let e = split_entry(&text, op);
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

/// Renders one operator's block in our schema. Keys are quoted where YAML could read them as
/// anything but a string (`0x1f` is the integer 31 to a YAML 1.1 reader), like every value.
pub fn render_block(operator: &str, e: &OperatorEntry) -> String {
    let mut out = format!("{}:\n  instances:\n", scalar(operator));
    for (inst, agents) in &e.instances {
        let list: Vec<String> = agents.iter().map(|a| scalar(a)).collect();
        out.push_str(&format!(
            "    {}:\n      agents: [{}]\n",
            scalar(inst),
            list.join(", ")
        ));
    }
    if !e.emails.is_empty() {
        let list: Vec<String> = e.emails.iter().map(|m| scalar(m)).collect();
        out.push_str(&format!("  emails: [{}]\n", list.join(", ")));
    }
    out
}

/// The key a top-level mapping line opens (`acme:`, `"0x1f":`, `'x': {…}`), as YAML reads it;
/// `None` for indented lines, comments, blank lines and anything that is not `key:`.
fn top_level_key(line: &str) -> Option<String> {
    let line = line.trim_end_matches(['\n', '\r']);
    let (key, rest) = match line.chars().next()? {
        '"' => {
            let mut escaped = false;
            let end = line
                .char_indices()
                .skip(1)
                .find(|&(_, c)| {
                    let close = c == '"' && !escaped;
                    escaped = c == '\\' && !escaped;
                    close
                })?
                .0;
            let key: String = serde_json::from_str(&line[..=end]).ok()?;
            (key, &line[end + 1..])
        }
        '\'' => {
            let body = &line[1..];
            let mut key = String::new();
            let mut rest = None;
            let mut chars = body.char_indices().peekable();
            while let Some((i, c)) = chars.next() {
                if c == '\'' {
                    if chars.peek().is_some_and(|&(_, n)| n == '\'') {
                        chars.next();
                        key.push('\'');
                    } else {
                        rest = Some(&body[i + 1..]);
                        break;
                    }
                } else {
                    key.push(c);
                }
            }
            (key, rest?)
        }
        c if c.is_whitespace() || matches!(c, '#' | '-' | '{' | '[' | '?') => return None,
        _ => {
            let colon = line
                .char_indices()
                .find(|&(i, c)| {
                    c == ':' && line[i + 1..].chars().next().is_none_or(char::is_whitespace)
                })?
                .0;
            (line[..colon].trim_end().to_owned(), &line[colon..])
        }
    };
    let rest = rest.trim_start_matches(' ').strip_prefix(':')?;
    rest.chars()
        .next()
        .is_none_or(char::is_whitespace)
        .then_some(key)
}

fn is_top_level_key(line: &str, key: &str) -> bool {
    top_level_key(line).is_some_and(|k| k == key)
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
    cut(text)
        .blocks
        .into_iter()
        .find(|(k, _)| k == operator)
        .map(|(_, b)| b)
}

/// A registry text cut at its top-level keys: the lines before the first key (the header
/// comment), then each key's block with the lines that follow it up to the next key.
struct Cut {
    head: String,
    blocks: Vec<(String, String)>,
}

fn cut(text: &str) -> Cut {
    let mut c = Cut {
        head: String::new(),
        blocks: Vec::new(),
    };
    for line in text.split_inclusive('\n') {
        match top_level_key(line).filter(|_| starts_top_level(line)) {
            Some(key) => c.blocks.push((key, line.to_owned())),
            None => match c.blocks.last_mut() {
                Some((_, b)) => b.push_str(line),
                None => c.head.push_str(line),
            },
        }
    }
    c
}

/// The one version of a part that two sides' edits of a common base agree on: what changed on one
/// side only, or the same change on both; `None` when both changed it differently.
pub(crate) fn agree<T: PartialEq + Clone>(base: &T, ours: &T, theirs: &T) -> Option<T> {
    if ours == base || ours == theirs {
        Some(theirs.clone())
    } else if theirs == base {
        Some(ours.clone())
    } else {
        None
    }
}

fn entry_of_block(block: &str, operator: &str) -> OperatorEntry {
    Registry::parse(block)
        .ok()
        .and_then(|mut r| r.operators.remove(operator))
        .unwrap_or_default()
}

/// `theirs` with what `ours` added to `base`: instances, agents and e-mails (join only adds).
fn with_additions(
    theirs: &OperatorEntry,
    base: &OperatorEntry,
    ours: &OperatorEntry,
) -> OperatorEntry {
    let mut out = theirs.clone();
    for (inst, agents) in &ours.instances {
        let before = base.instances.get(inst);
        let slot = out.instances.entry(inst.clone()).or_default();
        for a in agents {
            if !before.is_some_and(|b| b.contains(a)) && !slot.contains(a) {
                slot.push(a.clone());
            }
        }
    }
    for m in &ours.emails {
        let known = |list: &[String]| list.iter().any(|e| e.eq_ignore_ascii_case(m));
        if !known(&base.emails) && !known(&out.emails) {
            out.emails.push(m.clone());
        }
    }
    out
}

/// Merges this clone's unpushed edit of a registry text (`base` → `ours`) into the remote's
/// version (`theirs`), block by block, so a replay after a lost race never drops anybody's edit
/// (§8). Each part (the header comment, each operator's block) takes the side that changed it;
/// where both changed `me`'s block (two instances of one operator joining at once), the remote's
/// block gains what ours added. Any other part both sides changed differently is a conflict: its
/// name is the error, and nothing is merged.
pub fn merge(base: &str, ours: &str, theirs: &str, me: &str) -> Result<String, String> {
    let (b, o, t) = (cut(base), cut(ours), cut(theirs));
    let get = |c: &Cut, k: &str| {
        c.blocks
            .iter()
            .find(|(x, _)| x == k)
            .map(|(_, v)| v.clone())
    };
    let mut out = agree(&b.head, &o.head, &t.head)
        .ok_or_else(|| "the comment lines at the top of operators.yaml".to_owned())?;
    let mut keys: Vec<&str> = t.blocks.iter().map(|(k, _)| k.as_str()).collect();
    for (k, _) in &o.blocks {
        if !keys.contains(&k.as_str()) {
            keys.push(k);
        }
    }
    for key in keys {
        let (bb, ob, tb) = (get(&b, key), get(&o, key), get(&t, key));
        let block = match agree(&bb, &ob, &tb) {
            Some(block) => block,
            None if key == me => {
                let entry = |x: &Option<String>| {
                    x.as_deref()
                        .map(|x| entry_of_block(x, me))
                        .unwrap_or_default()
                };
                let merged = with_additions(&entry(&tb), &entry(&bb), &entry(&ob));
                Some(render_block(me, &merged))
            }
            None => return Err(format!("{key}'s block of operators.yaml")),
        };
        if let Some(block) = block {
            if !out.is_empty() && !out.ends_with('\n') {
                out.push('\n');
            }
            out.push_str(&block);
        }
    }
    Ok(out)
}

/// Like [`merge`], for a split registry file `operators/<operator>.yaml` (either form): the
/// operator's own file gains our additions when both sides changed it; another operator's file
/// takes the side that changed it.
pub fn merge_split(
    base: Option<&str>,
    ours: Option<&str>,
    theirs: Option<&str>,
    operator: &str,
    me: &str,
) -> Result<Option<String>, String> {
    let own = |x: Option<&str>| x.map(str::to_owned);
    if let Some(agreed) = agree(&own(base), &own(ours), &own(theirs)) {
        return Ok(agreed);
    }
    if operator != me {
        return Err(format!("{REGISTRY_DIR}/{operator}.yaml"));
    }
    let entry = |x: Option<&str>| x.map(|t| split_entry(t, operator)).unwrap_or_default();
    let merged = with_additions(&entry(theirs), &entry(base), &entry(ours));
    Ok(Some(render_block(operator, &merged)))
}

/// The block a split file `operators/<operator>.yaml` holds: `<operator>: {block}` or the block
/// itself.
fn split_entry(text: &str, operator: &str) -> OperatorEntry {
    let Ok(map) = parse(text, "") else {
        return OperatorEntry::default();
    };
    match map.get(operator) {
        Some(b) => entry_of(b),
        None => entry_of(&Value::Object(map.into_iter().collect())),
    }
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
