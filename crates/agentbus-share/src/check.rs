//! `check`: conformance of a whole share and its git history to agentshare 0.1 Core.
//!
//! Each finding names the § it breaks and, where there is one, the checklist id. Findings are
//! violations (a MUST broken: `check` fails) or warnings (a SHOULD, or something our reading of a
//! gap asks to flag). What it reads:
//!
//! - the working tree: names (§1, §3, §4, §6), frontmatter (§3, §3.1, §6, §9), `content_hash`
//!   (§3.2), INV-2, `re:` on answer/ack, index files in `knowledge/` (§6), the registry (§2), the
//!   audit logs (§7);
//! - the history of the shared branch: any commit that modifies or deletes a file under
//!   `messages/`, `broadcast/` or `knowledge/` (§1, §5), and the reflog of the remote-tracking
//!   branch, where a fetch that was not a fast-forward shows a force-push (§1). A rewrite that
//!   happened before this clone first fetched is invisible to it; `check` says what it can see.
//!
//! The log is self-reported (§11): a missing line is never a finding.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use crate::audit::{self, EVENTS};
use crate::error::ShareError;
use crate::frontmatter::{ENVELOPE_KEYS, MESSAGE_KEYS, MessageType, PUBLICATION_KEYS, Version};
use crate::git::Git;
use crate::hash::HashCheck;
use crate::naming::{self, LOG, Place};
use crate::registry::Registry;
use crate::share::{self, Snapshot};

/// How serious a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// A MUST or MUST NOT is broken.
    Violation,
    /// A SHOULD, or a gap's resolution, asks to flag it.
    Warning,
}

/// One finding.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub struct Finding {
    /// Violation or warning.
    pub severity: Severity,
    /// The section it breaks, such as `§3.2`.
    pub section: &'static str,
    /// The checklist id (AS-…) or gap (G-AS-…).
    pub rule: &'static str,
    /// The share-relative file, when one is concerned.
    pub path: Option<String>,
    /// The commit, for history findings.
    pub commit: Option<String>,
    /// What is wrong.
    pub message: String,
}

/// What `check` found.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Report {
    /// Every finding, violations first.
    pub findings: Vec<Finding>,
    /// How many message and broadcast files were read.
    pub messages: usize,
    /// How many publications were read.
    pub publications: usize,
    /// How many commits of history were read.
    pub commits: usize,
    /// Whether a remote-tracking reflog was available for force-push detection.
    pub reflog_seen: bool,
}

impl Report {
    /// Whether the share is clean: no violation (warnings allowed).
    pub fn is_clean(&self) -> bool {
        !self
            .findings
            .iter()
            .any(|f| f.severity == Severity::Violation)
    }

    /// How many violations.
    pub fn violations(&self) -> usize {
        self.findings
            .iter()
            .filter(|f| f.severity == Severity::Violation)
            .count()
    }
}

struct Out(Vec<Finding>);

impl Out {
    fn v(&mut self, section: &'static str, rule: &'static str, path: &str, message: String) {
        self.push(
            Severity::Violation,
            section,
            rule,
            Some(path),
            None,
            message,
        );
    }

    fn w(&mut self, section: &'static str, rule: &'static str, path: &str, message: String) {
        self.push(Severity::Warning, section, rule, Some(path), None, message);
    }

    fn push(
        &mut self,
        severity: Severity,
        section: &'static str,
        rule: &'static str,
        path: Option<&str>,
        commit: Option<&str>,
        message: String,
    ) {
        self.0.push(Finding {
            severity,
            section,
            rule,
            path: path.map(str::to_owned),
            commit: commit.map(str::to_owned),
            message,
        });
    }
}

/// The day the `1.0.0` designation was withdrawn (§9): artifacts stamped `1.0.0` after it were
/// emitted by a producer that broke §9.
const WITHDRAWN: &str = "2026-08-11";

/// Checks the share checked out at `dir` (any folder inside it). A bare repository is cloned into a
/// temporary folder first, since the files must be read from a tree.
pub fn check(dir: &Path) -> Result<Report, ShareError> {
    let probe = Git::at(dir);
    if probe
        .ok(&["rev-parse", "--is-bare-repository"])
        .is_ok_and(|s| s == "true")
    {
        let tmp = std::env::temp_dir().join(format!(
            "agentbus-share-check-{}-{}",
            std::process::id(),
            u64::from_le_bytes(agentbus_runtime::random_bytes())
        ));
        let src = std::fs::canonicalize(dir)
            .map_err(ShareError::io(dir))?
            .to_string_lossy()
            .into_owned();
        let dst = tmp.to_string_lossy().into_owned();
        probe.ok(&["clone", "--quiet", &src, &dst])?;
        let report = check(&tmp);
        let _ = std::fs::remove_dir_all(&tmp);
        return report;
    }
    let git = Git::open(dir)?;
    let root = git.root().to_owned();
    // The history walk is git's work in another process; let it run while we read the files.
    let (history, files) = std::thread::scope(|s| {
        let history = s.spawn(|| {
            let mut out = Out(Vec::new());
            check_history(&git, &mut out).map(|r| (r, out))
        });
        let files = (|| {
            let snap = share::snapshot(&root)?;
            let mut out = Out(Vec::new());
            match Registry::load(&root) {
                Ok(registry) => {
                    check_files(&git, &snap, &registry, &mut out);
                    check_logs(&root, &mut out);
                    check_attributes(&root, &mut out);
                }
                Err(e) => out.v("§8", "AS-8-1", naming::REGISTRY, e.to_string()),
            }
            Ok::<_, ShareError>((snap, out))
        })();
        (history.join(), files)
    });
    let (snap, mut out) = files?;
    let ((commits, reflog_seen), mut found) =
        history.map_err(|_| ShareError::Invalid("the history check panicked".into()))??;
    out.0.append(&mut found.0);
    finish(out, &snap, commits, reflog_seen)
}

fn finish(
    out: Out,
    snap: &Snapshot,
    commits: usize,
    reflog_seen: bool,
) -> Result<Report, ShareError> {
    let mut findings = out.0;
    findings.sort();
    findings.dedup();
    Ok(Report {
        findings,
        messages: snap.messages.len() + snap.broadcasts.len(),
        publications: snap.publications.len(),
        commits,
        reflog_seen,
    })
}

fn is_index_name(name: &str) -> bool {
    let stem = name.split('.').next().unwrap_or(name).to_ascii_lowercase();
    matches!(
        stem.as_str(),
        "index" | "catalog" | "catalogue" | "contents" | "toc" | "readme" | "summary"
    )
}

fn check_keys(
    out: &mut Out,
    path: &str,
    keys: &[String],
    defined: &[&str],
    version: &Version,
    protocol: &str,
) {
    for k in keys {
        if !defined.contains(&k.as_str()) && !ENVELOPE_KEYS.contains(&k.as_str()) {
            out.v(
                "§9",
                "AS-9-2",
                path,
                format!(
                    "key `{k}` is not defined in protocol {protocol}; a producer must not emit it"
                ),
            );
        }
    }
    match version {
        Version::Unknown(v) => out.w(
            "§9",
            "G-AS-13",
            path,
            format!("protocol {v:?} is not a version this reader knows; read with 0.1.0's rules"),
        ),
        Version::Legacy(_) | Version::Current | Version::Withdrawn => {}
    }
}

fn check_withdrawn(git: &Git, out: &mut Out, path: &str, created: Option<&str>) {
    // §9: 1.0.0 artifacts from the window before the withdrawal are legitimate; later ones are a
    // producer emitting a burned number. The commit that added the file dates it; `created` is the
    // fallback for a file not yet committed.
    let added = git
        .ok(&["log", "--diff-filter=A", "--format=%cI", "-1", "--", path])
        .ok()
        .filter(|s| !s.is_empty());
    let when = added.as_deref().or(created).unwrap_or("9999");
    if when.get(..10).is_none_or(|d| d > WITHDRAWN) {
        out.v(
            "§9",
            "AS-9-8",
            path,
            format!("declares the withdrawn protocol 1.0.0 but was written {when}, after {WITHDRAWN}; producers must emit 0.1.0"),
        );
    }
}

/// The rules messages and publications share: §3.2's hash, §9's version and keys, §2's registry.
struct Common<'a> {
    hash_check: HashCheck,
    version: &'a Version,
    protocol: &'a str,
    created: Option<&'a str>,
    keys: &'a [String],
    defined: &'a [&'a str],
    writer: (&'static str, &'a crate::frontmatter::Party),
}

impl Common<'_> {
    fn check(&self, git: &Git, registry: &Registry, out: &mut Out, path: &str) {
        match self.hash_check {
            HashCheck::Mismatch => out.v(
                "§3.2",
                "AS-3.2-3",
                path,
                "content_hash does not verify against the body".into(),
            ),
            HashCheck::BadForm => out.v(
                "§3.2",
                "AS-3.2-1",
                path,
                "content_hash must be \"blake3:\" followed by 64 lowercase hex digits".into(),
            ),
            HashCheck::Absent | HashCheck::Verified => {}
        }
        if *self.version == Version::Withdrawn {
            check_withdrawn(git, out, path, self.created);
        }
        check_keys(
            out,
            path,
            self.keys,
            self.defined,
            self.version,
            self.protocol,
        );
        let (role, p) = self.writer;
        if !registry.declares(&p.operator, p.instance.as_deref(), &p.agent) {
            out.v(
                "§2",
                "AS-2-4",
                path,
                format!("{role} {} is not declared in operators.yaml", p.long()),
            );
        }
    }
}

fn check_files(git: &Git, snap: &Snapshot, registry: &Registry, out: &mut Out) {
    for m in &snap.malformed {
        let section = if m.path.starts_with(naming::KNOWLEDGE) {
            "§6"
        } else {
            "§3"
        };
        out.v(
            section,
            "AS-3-6",
            &m.path,
            format!("unreadable: {}", m.error),
        );
    }
    for s in &snap.strays {
        let name = s.rsplit('/').next().unwrap_or(s);
        if s.starts_with(naming::KNOWLEDGE) && (is_index_name(name) || s.matches('/').count() == 1)
        {
            out.v(
                "§6",
                "AS-6-5",
                s,
                "an index or catalogue file in knowledge/; discovery is ls + frontmatter grep"
                    .into(),
            );
        } else {
            out.v(
                "§1",
                "AS-1-1",
                s,
                "a file at a place the layout has none (wrong depth, or not a .md artifact)".into(),
            );
        }
    }

    let mut ids: HashMap<&str, Vec<(&str, String)>> = HashMap::new();
    for m in snap.all_messages() {
        let d = &m.doc;
        let path = m.path.as_str();
        match naming::place(path) {
            Place::Message {
                operator,
                agent,
                name,
            } => {
                let who = format!("{}-{}", d.from.operator, d.from.agent);
                if let Some(why) = naming::name_problem(name, false, &who) {
                    out.v("§3", "AS-3-1", path, format!("bad name: {why}"));
                }
                if d.to.operator != operator || d.to.agent != agent {
                    let (section, rule) = if d.recipients_emitted {
                        ("§3.1", "AS-3.1-7")
                    } else {
                        ("§3", "AS-3-1")
                    };
                    out.v(
                        section,
                        rule,
                        path,
                        format!(
                            "to is {} but the copy lies in {operator}/{agent}'s folder{}",
                            d.to.short(),
                            if d.recipients_emitted {
                                " (INV-2: each copy's to must be its own recipient)"
                            } else {
                                ""
                            }
                        ),
                    );
                }
                if d.recipients_emitted
                    && !d.recipients.contains(&crate::frontmatter::Party {
                        operator: d.to.operator.clone(),
                        instance: None,
                        agent: d.to.agent.clone(),
                    })
                {
                    out.v(
                        "§3.1",
                        "AS-3.1-7",
                        path,
                        format!("to {} is not among its recipients (INV-2)", d.to.short()),
                    );
                }
            }
            Place::Broadcast { name } => {
                if let Some(why) = naming::name_problem(name, false, &d.from.operator) {
                    out.v("§4", "AS-4-1", path, format!("bad name: {why}"));
                }
                if d.to.operator != "*" || d.to.agent != "*" {
                    out.v(
                        "§4",
                        "AS-4-1",
                        path,
                        format!("a broadcast's to must be */*, not {}", d.to.short()),
                    );
                }
            }
            _ => {}
        }
        match &d.kind {
            MessageType::Unknown(t) if !matches!(d.version, Version::Unknown(_)) => out.v(
                "§9",
                "AS-9-2",
                path,
                format!("type {t:?} is not defined in protocol {}", d.protocol),
            ),
            k if k.needs_re() && d.re.is_none() => out.v(
                "§3",
                "AS-3-8",
                path,
                format!(
                    "an {} must carry re: naming the message it answers",
                    k.as_str()
                ),
            ),
            _ => {}
        }
        if d.status != "open" && d.status != "done" {
            out.v(
                "§3",
                "AS-3-9",
                path,
                format!("status {:?} must be open or done", d.status),
            );
        }
        if !["ephemeral", "standard", "permanent"].contains(&d.retention_tier.as_str()) {
            out.v(
                "§3.1",
                "AS-3.1-5",
                path,
                format!(
                    "retention_tier {:?} must be ephemeral, standard or permanent",
                    d.retention_tier
                ),
            );
        }
        let common = Common {
            hash_check: d.hash_check,
            version: &d.version,
            protocol: &d.protocol,
            created: d.created.as_ref().map(|c| c.raw.as_str()),
            keys: &d.keys,
            defined: MESSAGE_KEYS,
            writer: ("sender", &d.from),
        };
        common.check(git, registry, out, path);
        ids.entry(&d.id)
            .or_default()
            .push((path, crate::hash::content_hash(&d.body)));
    }

    // §3.1 / G-AS-2: copies of one message share an id; distinct messages never do.
    for (id, copies) in &ids {
        let bodies: BTreeSet<&String> = copies.iter().map(|(_, h)| h).collect();
        let folders: BTreeSet<&str> = copies
            .iter()
            .map(|(p, _)| p.rsplit_once('/').map_or("", |(d, _)| d))
            .collect();
        if bodies.len() > 1 || folders.len() < copies.len() {
            for (p, _) in copies {
                out.v(
                    "§3.1",
                    "G-AS-2",
                    p,
                    format!("id {id:?} is shared by distinct messages; only copies of one message share an id"),
                );
            }
        }
    }

    check_replayed_threads(snap, out);

    // G-AS-7: a thread id used by unrelated conversations.
    let mut threads: BTreeMap<&str, Vec<(&str, &str, &str)>> = BTreeMap::new();
    for m in snap.all_messages() {
        threads.entry(&m.doc.thread).or_default().push((
            &m.doc.from.operator,
            &m.doc.to.operator,
            &m.path,
        ));
    }
    for (thread, edges) in threads {
        let mut groups: Vec<BTreeSet<&str>> = Vec::new();
        for (a, b, _) in &edges {
            let hit: Vec<usize> = (0..groups.len())
                .filter(|&i| groups[i].contains(a) || groups[i].contains(b) || *b == "*")
                .collect();
            let mut merged: BTreeSet<&str> = [*a, *b].into_iter().collect();
            for i in hit.iter().rev() {
                merged.extend(groups.remove(*i));
            }
            groups.push(merged);
        }
        if groups.len() > 1 {
            out.w(
                "§5",
                "G-AS-7",
                edges[0].2,
                format!("thread {thread:?} is used by unrelated conversations; its derived state mixes them"),
            );
        }
    }

    let mut pub_ids: HashMap<&str, &str> = HashMap::new();
    for p in &snap.publications {
        let d = &p.doc;
        let path = p.path.as_str();
        if let Place::Knowledge { topic, name } = naming::place(path) {
            if is_index_name(name) {
                out.v(
                    "§6",
                    "AS-6-5",
                    path,
                    "an index or catalogue file in knowledge/".into(),
                );
            } else if let Some(why) = naming::name_problem(name, true, &d.publisher.operator) {
                out.v("§6", "AS-6-1", path, format!("bad name: {why}"));
            }
            if d.topic != topic {
                out.v(
                    "§6",
                    "AS-6-1",
                    path,
                    format!("topic {:?} is not its folder {topic:?}", d.topic),
                );
            }
        }
        let common = Common {
            hash_check: d.hash_check,
            version: &d.version,
            protocol: &d.protocol,
            created: d.created.as_ref().map(|c| c.raw.as_str()),
            keys: &d.keys,
            defined: PUBLICATION_KEYS,
            writer: ("publisher", &d.publisher),
        };
        common.check(git, registry, out, path);
        if let Some(other) = pub_ids.insert(&d.id, path) {
            out.v(
                "§6",
                "G-AS-2",
                path,
                format!("id {:?} is also the id of {other}", d.id),
            );
        }
    }
    for t in crate::views::knowledge(snap) {
        for id in t.cycles {
            out.w(
                "§6",
                "G-AS-12",
                &format!("knowledge/{}", t.topic),
                format!("{id} is on a supersedes cycle: the item has no live version"),
            );
        }
    }
}

/// G-AS-3: a new message (no `re:`) whose thread is the id of another message its operator wrote
/// in the same second. That is what a replay after a lost race leaves when it renames a message
/// but not its thread: the message joins the other one's thread, and an ack of either closes both
/// (§5). A deliberate follow-up (`--thread` naming an earlier message) is seconds apart at least.
fn check_replayed_threads(snap: &Snapshot, out: &mut Out) {
    let second = |m: &crate::frontmatter::Message| {
        m.created
            .as_ref()
            .and_then(|c| c.at)
            .map(|t| t.millis().div_euclid(1000))
    };
    let by_id: HashMap<&str, &crate::frontmatter::Message> = snap
        .all_messages()
        .map(|m| (m.doc.id.as_str(), &m.doc))
        .collect();
    for m in snap.all_messages() {
        let d = &m.doc;
        if d.re.is_some() || d.thread == d.id {
            continue;
        }
        let Some(other) = by_id.get(d.thread.as_str()) else {
            continue;
        };
        if other.from.operator == d.from.operator
            && second(other).is_some()
            && second(other) == second(d)
        {
            out.w(
                "§5",
                "G-AS-3",
                &m.path,
                format!(
                    "new message {:?} is in the thread of {:?}, another message {} wrote the same second: a replay after a lost race that kept the old id as thread? An ack of either closes both",
                    d.id, other.id, d.from.operator
                ),
            );
        }
    }
}

/// G-AS-4 and the CRLF rule: the share's `.gitattributes` should carry the lines `init` writes,
/// or instances' audit logs conflict and Windows checkouts rewrite artifact bytes.
fn check_attributes(root: &Path, out: &mut Out) {
    let have = std::fs::read_to_string(root.join(".gitattributes")).unwrap_or_default();
    let lines: BTreeSet<String> = have
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    let missing: Vec<&str> = crate::init::GITATTRIBUTES_RULES
        .iter()
        .copied()
        .filter(|r| !lines.contains(*r))
        .collect();
    if !missing.is_empty() {
        out.w(
            "§1",
            "G-AS-4",
            ".gitattributes",
            format!(
                "lacks {}: without them two instances' audit lines conflict and a CRLF checkout changes artifact bytes",
                missing.join(", ")
            ),
        );
    }
}

fn check_logs(root: &Path, out: &mut Out) {
    let Ok(rd) = std::fs::read_dir(root.join(LOG)) else {
        return;
    };
    let mut names: Vec<String> = rd
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    for name in names {
        let rel = format!("{LOG}/{name}");
        let Some((operator, _)) = audit::split_name(&name) else {
            out.v(
                "§7",
                "AS-7-1",
                &rel,
                "a log file is named log/<operator>-<YYYY-MM-DD>.jsonl".into(),
            );
            continue;
        };
        let Ok(text) = std::fs::read_to_string(root.join(&rel)) else {
            out.v("§7", "AS-7-2", &rel, "not UTF-8 text".into());
            continue;
        };
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let n = i + 1;
            let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
                out.v(
                    "§7",
                    "AS-7-2",
                    &rel,
                    format!("line {n} is not one JSON object"),
                );
                continue;
            };
            let s = |k: &str| v.get(k).and_then(serde_json::Value::as_str);
            if s("ts").is_none() || s("operator").is_none() || s("event").is_none() {
                out.v(
                    "§7",
                    "AS-7-2",
                    &rel,
                    format!("line {n} lacks ts, operator or event"),
                );
                continue;
            }
            if let Some(e) = s("event").filter(|e| !EVENTS.contains(e)) {
                out.v(
                    "§7",
                    "AS-7-2",
                    &rel,
                    format!("line {n}: event {e:?} is not send, route, ack, publish or error"),
                );
            }
            if s("operator") != Some(operator) {
                out.v(
                    "§7",
                    "AS-7-1",
                    &rel,
                    format!(
                        "line {n} is operator {:?}'s, written in {operator}'s own file",
                        s("operator").unwrap_or_default()
                    ),
                );
            }
        }
    }
}

/// The history rules. Returns (commits read, whether a reflog was seen).
fn check_history(git: &Git, out: &mut Out) -> Result<(usize, bool), ShareError> {
    let Some(_) = git.rev("HEAD") else {
        return Ok((0, false));
    };
    let upstream = git.upstream();
    let tip = upstream.clone().unwrap_or_else(|| "HEAD".to_owned());
    let commits = git
        .ok(&["rev-list", "--count", &tip])?
        .trim()
        .parse()
        .unwrap_or(0);
    // §1 and §5: a committed artifact is never modified, deleted or renamed by a later commit.
    // No pathspec: git is twice as fast filtering nothing, and we keep the protocol folders below.
    // A merge is diffed against its first parent, so an edit made inside a merge is seen too; what
    // a merge only brings in from a commit already flagged is not reported twice.
    let log = git.ok(&[
        "log",
        "--format=%x00%H %P",
        "--name-status",
        "--no-renames",
        "--diff-merges=first-parent",
        "--diff-filter=MDT",
        &tip,
    ])?;
    let mut edits: Vec<(String, bool, String, String)> = Vec::new();
    let mut commit = String::new();
    let mut merge = false;
    for line in log.lines() {
        if let Some(h) = line.strip_prefix('\0') {
            let mut parts = h.split(' ');
            commit = parts.next().unwrap_or_default().to_owned();
            merge = parts.filter(|p| !p.is_empty()).count() > 1;
            continue;
        }
        let Some((status, path)) = line.split_once('\t') else {
            continue;
        };
        if !matches!(
            naming::place(path),
            Place::Message { .. }
                | Place::Broadcast { .. }
                | Place::Knowledge { .. }
                | Place::Stray { .. }
        ) || path.starts_with(naming::LOG)
        {
            continue;
        }
        edits.push((commit.clone(), merge, status.to_owned(), path.to_owned()));
    }
    let flagged: BTreeSet<&str> = edits
        .iter()
        .filter(|(_, merge, _, _)| !merge)
        .map(|(_, _, _, p)| p.as_str())
        .collect();
    for (commit, merge, status, path) in &edits {
        if *merge && flagged.contains(path.as_str()) {
            continue;
        }
        let (rule, what) = if status == "D" {
            ("AS-1-3", "deleted")
        } else {
            ("AS-1-2", "edited")
        };
        let by = if *merge { "merge commit" } else { "commit" };
        out.push(
            Severity::Violation,
            "§1",
            rule,
            Some(path),
            Some(commit),
            format!("a committed artifact was {what} by {by} {}; state changes only by new files (§1, §5)", &commit[..commit.len().min(12)]),
        );
    }
    // One share is one history: a second root commit is a history somebody started beside it.
    let roots = git.ok(&["rev-list", "--max-parents=0", &tip])?;
    let roots: Vec<&str> = roots.lines().collect();
    if roots.len() > 1 {
        out.push(
            Severity::Warning,
            "§2",
            "AS-2-1",
            None,
            Some(roots[0]),
            format!(
                "the shared branch joins {} unrelated histories (root commits {}); a share is one repository history",
                roots.len(),
                roots.iter().map(|r| &r[..r.len().min(12)]).collect::<Vec<_>>().join(", ")
            ),
        );
    }
    // §1: a force-push is visible as a remote-tracking update that was not a fast-forward.
    let mut reflog_seen = false;
    if let Some(up) = &upstream {
        let reflog = git
            .ok(&["reflog", "show", "--format=%H%x09%gs", up])
            .unwrap_or_default();
        let entries: Vec<(&str, &str)> =
            reflog.lines().filter_map(|l| l.split_once('\t')).collect();
        reflog_seen = !entries.is_empty();
        for (i, (new, subject)) in entries.iter().enumerate() {
            let old = entries.get(i + 1).map(|(h, _)| *h);
            let not_ancestor = old.is_some_and(|old| {
                git.rev(old).is_some() && !git.succeeds(&["merge-base", "--is-ancestor", old, new])
            });
            if subject.contains("forced-update") || not_ancestor {
                out.push(
                    Severity::Violation,
                    "§1",
                    "AS-1-4",
                    None,
                    Some(new),
                    format!(
                        "the shared branch was rewritten (force-pushed): a fetch moved {up} to {} without a fast-forward",
                        &new[..new.len().min(12)]
                    ),
                );
            }
        }
    }
    Ok((commits, reflog_seen))
}
