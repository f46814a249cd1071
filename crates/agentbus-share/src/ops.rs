//! Writing to a share: `init`, `join`, `send` (and `reply`, `ack`), `broadcast`, `publish`, `sync`.
//!
//! Every write follows one path, [`Share::write`]: take the checkout's lock, bring the checkout up
//! to date, pick names against what is there now, create the files (never overwriting: files are
//! opened `create_new`), append the audit lines, commit exactly those paths, then sync.
//!
//! `sync` is fetch + rebase + fast-forward push, retried when another writer pushed first (§1,
//! G-AS-19: never a force-push). When a rebase cannot apply (two clones wrote the same path in the
//! same second, G-AS-3, or joined at once), it is aborted and our unpushed files are *replayed* on
//! top of the remote: each takes the next free `-N` suffix, and its id with it, so distinct
//! messages keep distinct ids (G-AS-2) and nobody's file is overwritten. Nothing here edits or
//! deletes a pushed file; only files this clone never pushed are ever renamed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use crate::audit::{self, LogLine};
use crate::error::ShareError;
use crate::frontmatter::{self, MessageOut, MessageType, Party, PublicationOut, Source};
use crate::git::{Git, Push, REMOTE};
use crate::ident::{ShareAddress, check_ident, slugify};
use crate::naming::{self, BROADCAST, KNOWLEDGE, MESSAGES, Place, REGISTRY};
use crate::registry::{self, Registry};
use crate::share::{Identity, Share, Snapshot};

/// How many times `sync` fetches and retries a push that lost the race before giving up.
pub const MAX_ATTEMPTS: u32 = 200;

/// Options every write shares.
#[derive(Debug, Clone, Default)]
pub struct WriteOptions {
    /// Commit locally and do not touch the remote (an offline or air-gapped clone); `sync` later.
    pub offline: bool,
    /// Sign this commit (`git commit -S`) even if the identity does not say so (§11).
    pub sign: bool,
}

/// A collision rename `sync` applied to a file this clone had not pushed yet.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Renamed {
    /// The id (or path) before.
    pub from: String,
    /// The id (or path) after.
    pub to: String,
}

/// What a sync did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct SyncReport {
    /// Whether the remote now has every local commit.
    pub pushed: bool,
    /// How many fetch-and-push rounds it took (more than one: the race was lost and retried).
    pub attempts: u32,
    /// Why the remote was not used (no remote, unreachable, `--offline`).
    pub offline: Option<String>,
    /// Ids this clone had to re-suffix because another clone took the name first (G-AS-3).
    pub renamed_ids: Vec<Renamed>,
    /// Paths this clone had to move for the same reason.
    pub renamed_paths: Vec<Renamed>,
    /// Files the remote brought in (share-relative paths), for inbound delivery.
    pub arrived: Vec<String>,
    /// How many times local changes had to be replayed on top of the remote (G-AS-3).
    pub replays: u32,
}

impl SyncReport {
    fn absorb(&mut self, later: SyncReport) {
        self.pushed = later.pushed;
        // The push that counts is the later one; a catch-up pull before writing is not a race.
        self.attempts = later.attempts;
        self.offline = later.offline.or(self.offline.take());
        self.renamed_ids.extend(later.renamed_ids);
        self.renamed_paths.extend(later.renamed_paths);
        self.arrived.extend(later.arrived);
        self.replays += later.replays;
    }
}

/// A direct message to send (§3).
#[derive(Debug, Clone)]
pub struct SendRequest {
    /// The sending agent; the identity's first agent when `None`.
    pub from_agent: Option<String>,
    /// The recipients: one copy each, in its own folder (INV-1, INV-2).
    pub to: Vec<ShareAddress>,
    /// The type.
    pub kind: MessageType,
    /// The thread; a new message starts its own (its id), a reply continues the original's.
    pub thread: Option<String>,
    /// The id this message answers or acknowledges (required on answer/ack).
    pub re: Option<String>,
    /// The informative file-name slug (normalised); derived from the body when `None`.
    pub slug: Option<String>,
    /// The initial status, `open` or `done` (§5).
    pub status: String,
    /// The markdown body.
    pub body: String,
    /// Append the `_Dispatched by agentbus …_` attribution line after hashing (§3.2).
    pub footer: bool,
    /// Refuse a recipient `operators.yaml` does not declare, instead of sending with a warning.
    pub strict: bool,
}

impl SendRequest {
    /// A request with the defaults: from the first agent, `open`, no footer.
    pub fn new(to: Vec<ShareAddress>, kind: MessageType, body: impl Into<String>) -> SendRequest {
        SendRequest {
            from_agent: None,
            to,
            kind,
            thread: None,
            re: None,
            slug: None,
            status: "open".to_owned(),
            body: body.into(),
            footer: false,
            strict: false,
        }
    }
}

/// Why `to` is not a declared recipient (§2, §8), or `None` when it is one: its operator is in
/// `operators.yaml`, and its agent is one of that operator's agents (or `any`).
pub fn recipient_problem(registry: &Registry, to: &ShareAddress) -> Option<String> {
    let Some(entry) = registry.operators.get(&to.operator) else {
        let known: Vec<&str> = registry.operators.keys().map(String::as_str).collect();
        return Some(format!(
            "{} is not an operator of this share (operators.yaml declares {})",
            to.operator,
            if known.is_empty() {
                "nobody yet".to_owned()
            } else {
                known.join(", ")
            }
        ));
    };
    if to.is_any() || entry.instances.values().any(|a| a.contains(&to.agent)) {
        return None;
    }
    let mut agents: Vec<&str> = entry
        .instances
        .values()
        .flatten()
        .map(String::as_str)
        .collect();
    agents.sort_unstable();
    agents.dedup();
    Some(format!(
        "{} has no agent {} in operators.yaml (its agents: {})",
        to.operator,
        to.agent,
        agents.join(", ")
    ))
}

/// A publication to write (§6).
#[derive(Debug, Clone)]
pub struct PublishRequest {
    /// The publishing agent; the identity's first agent when `None`.
    pub from_agent: Option<String>,
    /// The topic folder (domain-named).
    pub topic: String,
    /// The informative slug; derived from the body when `None`.
    pub slug: Option<String>,
    /// The id of the publication this one replaces.
    pub supersedes: Option<String>,
    /// Provenance, when the text comes from a repository.
    pub source: Option<Source>,
    /// `YYYY-MM-DD` it was last verified, when known.
    pub last_verified: Option<String>,
    /// The markdown body.
    pub body: String,
}

/// A participant joining (§2, §8).
#[derive(Debug, Clone)]
pub struct JoinRequest {
    /// The operator (lowercase, stable).
    pub operator: String,
    /// This clone's instance.
    pub instance: String,
    /// This instance's agents.
    pub agents: Vec<String>,
    /// Git author e-mails of this operator, for `doctor`'s registry check.
    pub emails: Vec<String>,
    /// Sign every commit from this clone.
    pub sign: bool,
}

/// What a write produced.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Written {
    /// The id of the message or publication (after any collision rename).
    pub id: String,
    /// Every file written (one per recipient for a multicast).
    pub paths: Vec<String>,
    /// The thread or topic.
    pub thread: Option<String>,
    /// Warnings for the user (a topic named after an operator, a secret-looking body…).
    pub warnings: Vec<String>,
    /// What the sync did.
    pub sync: SyncReport,
}

/// What a replay has to re-apply, read from the unpushed commits before the branch moves.
#[derive(Debug, Default)]
struct ReplayPlan {
    /// The commits' subjects, newest first, for the replay commit's message.
    subjects: String,
    /// Artifacts our commits added: (path, bytes).
    artifacts: Vec<(String, String)>,
    /// Audit lines our commits appended, per log file.
    logs: Vec<(String, Vec<String>)>,
    /// Every other file our commits changed, merged with the remote's version (`None`: deleted).
    others: Vec<(String, Option<String>)>,
}

/// The files and log lines a write produces, decided against the current tree.
struct Plan {
    id: String,
    thread: Option<String>,
    files: Vec<(String, String)>,
    logs: Vec<LogLine>,
    message: String,
    warnings: Vec<String>,
}

/// The share-relative folders that hold artifacts: every `messages/<op>/<agent>`, `broadcast`,
/// every `knowledge/<topic>`.
fn artifact_dirs(root: &Path) -> Vec<PathBuf> {
    let sub = |p: PathBuf| -> Vec<PathBuf> {
        std::fs::read_dir(&p)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.path())
            .collect()
    };
    let mut dirs: Vec<PathBuf> = sub(root.join(MESSAGES)).into_iter().flat_map(sub).collect();
    dirs.push(root.join(BROADCAST));
    dirs.extend(sub(root.join(KNOWLEDGE)));
    dirs
}

/// The first of `stem`, `stem-2`, `stem-3`… that names no file in any artifact folder, so the
/// name is free in every recipient folder and, being the id, distinct from every id we wrote
/// (§3 "never overwrite", G-AS-2).
fn allocate(dirs: &[PathBuf], stem: &str) -> String {
    let base = stem;
    (1..)
        .map(|n| naming::suffixed(base, n))
        .find(|s| {
            let file = format!("{s}.md");
            !dirs.iter().any(|d| d.join(&file).exists())
        })
        .unwrap_or_else(|| base.to_owned())
}

/// Strips one collision suffix `-N` (N ≥ 2) for re-suffixing.
fn unsuffixed(stem: &str) -> &str {
    match stem.rsplit_once('-') {
        Some((head, n)) if n.parse::<u32>().is_ok_and(|n| n >= 2) && !head.is_empty() => head,
        _ => stem,
    }
}

fn write_new(root: &Path, rel: &str, content: &str) -> Result<(), ShareError> {
    use std::io::Write as _;
    let path = root.join(rel);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(ShareError::io(parent))?;
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(ShareError::io(&path))?;
    f.write_all(content.as_bytes())
        .map_err(ShareError::io(&path))
}

/// The attribution footer (§3.2).
pub fn footer() -> String {
    format!("_Dispatched by agentbus {}_", env!("CARGO_PKG_VERSION"))
}

/// Warnings for text that looks like a secret (§11: there is no confidentiality in a share).
pub fn secret_warnings(body: &str) -> Vec<String> {
    const MARKERS: &[(&str, &str)] = &[
        ("-----BEGIN", "a PEM private key or certificate"),
        ("AKIA", "an AWS access key id"),
        ("ghp_", "a GitHub token"),
        ("github_pat_", "a GitHub token"),
        ("xoxb-", "a Slack token"),
        ("sk-", "an API secret key"),
        ("password=", "a password"),
        ("password:", "a password"),
    ];
    MARKERS
        .iter()
        .filter(|(m, _)| body.contains(m))
        .map(|(_, what)| {
            format!("the body looks like it contains {what}; every participant reads everything in a share (§11)")
        })
        .collect()
}

fn party(op: &str, instance: Option<&str>, agent: &str) -> Party {
    Party {
        operator: op.to_owned(),
        instance: instance.map(str::to_owned),
        agent: agent.to_owned(),
    }
}

fn subject_slug(body: &str) -> String {
    slugify(
        body.lines()
            .map(|l| l.trim_start_matches('#').trim())
            .find(|l| !l.is_empty())
            .unwrap_or("msg"),
    )
}

impl Share {
    /// The one path every write takes (see the module documentation).
    fn write(
        &self,
        opts: &WriteOptions,
        make: impl FnOnce(&Share, &Registry, &Identity) -> Result<Plan, ShareError>,
    ) -> Result<Written, ShareError> {
        let _lock = self.git().lock()?;
        let identity = self.identity()?;
        let sign = opts.sign || identity.sign;
        let mut report = SyncReport::default();
        let online = !opts.offline && self.git().has_remote();
        if !online {
            report.offline = Some(if opts.offline {
                "--offline".to_owned()
            } else {
                "the checkout has no remote".to_owned()
            });
        } else {
            match self.sync_locked(sign, false) {
                Ok(r) => report.absorb(r),
                Err(ShareError::RemoteUnavailable(why)) => report.offline = Some(why),
                Err(e) => return Err(e),
            }
        }
        let registry = Registry::load(self.root())?;
        let plan = make(self, &registry, &identity)?;
        let root = self.root();
        let mut paths = Vec::new();
        for (rel, content) in &plan.files {
            write_new(root, rel, content)?;
            paths.push(rel.clone());
        }
        let log = naming::log_path(&identity.operator, &naming::date(self.clock().now()));
        if !plan.logs.is_empty() {
            audit::append(root, &log, &plan.logs)?;
            paths.push(log.clone());
        }
        self.git().commit(&paths, &plan.message, sign)?;
        let mut written = Written {
            id: plan.id,
            paths: plan.files.into_iter().map(|(p, _)| p).collect(),
            thread: plan.thread,
            warnings: plan.warnings,
            sync: SyncReport::default(),
        };
        if report.offline.is_none() {
            match self.sync_locked(sign, true) {
                Ok(r) => report.absorb(r),
                Err(ShareError::RemoteUnavailable(why)) => report.offline = Some(why),
                Err(e @ (ShareError::RetriesExhausted(_) | ShareError::PushRefused(_))) => {
                    // §7: the failure is an event of its own, recorded for the next sync to carry.
                    let line = LogLine {
                        ts: naming::rfc3339_seconds(self.clock().now()),
                        operator: identity.operator.clone(),
                        event: "error".to_owned(),
                        msg_id: Some(written.id.clone()),
                        from: None,
                        to: None,
                        thread: None,
                        kind: None,
                    };
                    if audit::append(root, &log, &[line]).is_ok() {
                        let _ = self.git().commit(
                            std::slice::from_ref(&log),
                            "agentbus share: record a failed push",
                            sign,
                        );
                    }
                    return Err(e);
                }
                Err(e) => return Err(e),
            }
        }
        for r in &report.renamed_ids {
            if written.id == r.from {
                written.id = r.to.clone();
            }
            // A new message's thread was its id, and follows it (§5).
            if written.thread.as_deref() == Some(r.from.as_str()) {
                written.thread = Some(r.to.clone());
            }
        }
        for r in &report.renamed_paths {
            for p in &mut written.paths {
                if *p == r.from {
                    *p = r.to.clone();
                }
            }
        }
        written.sync = report;
        Ok(written)
    }

    fn sender_party(
        &self,
        registry: &Registry,
        me: &Identity,
        requested: Option<&str>,
    ) -> Result<Party, ShareError> {
        let agent = me.sender(requested)?;
        if !registry.declares(&me.operator, Some(&me.instance), &agent) {
            return Err(ShareError::Undeclared(format!(
                "{}/{}/{agent}",
                me.operator, me.instance
            )));
        }
        Ok(party(&me.operator, Some(&me.instance), &agent))
    }

    /// Sends a direct message, one copy per recipient folder sharing one id (§3, §3.1).
    pub fn send(&self, req: &SendRequest, opts: &WriteOptions) -> Result<Written, ShareError> {
        if req.to.is_empty() {
            return Err(ShareError::Invalid(
                "a message needs at least one recipient".into(),
            ));
        }
        let unique: BTreeSet<&ShareAddress> = req.to.iter().collect();
        if unique.len() != req.to.len() {
            return Err(ShareError::Invalid("a recipient is named twice".into()));
        }
        validate_common(
            &req.kind,
            req.re.as_deref(),
            &req.status,
            req.thread.as_deref(),
        )?;
        self.write(opts, |share, registry, me| {
            let from = share.sender_party(registry, me, req.from_agent.as_deref())?;
            // A typo in an address would stay in the share for good (§1): say so, or refuse.
            let mut warnings = Vec::new();
            for to in &req.to {
                if let Some(problem) = recipient_problem(registry, to) {
                    if req.strict {
                        return Err(ShareError::UnknownRecipient(problem));
                    }
                    warnings.push(format!(
                        "{problem}; the message is in the share for good, check the address (--strict refuses such a send)"
                    ));
                }
            }
            warnings.extend(secret_warnings(&req.body));
            let original_thread = match &req.re {
                Some(re) => Some(original(&share.snapshot()?, re)?.thread),
                None => None,
            };
            let now = share.clock().now();
            let slug = req
                .slug
                .as_deref()
                .map_or_else(|| subject_slug(&req.body), slugify);
            let dirs = artifact_dirs(share.root());
            let id = allocate(
                &dirs,
                &naming::message_stem(now, &from.operator, &from.agent, &slug),
            );
            let thread = req
                .thread
                .clone()
                .or(original_thread)
                .unwrap_or_else(|| id.clone());
            let recipients: Vec<Party> = req
                .to
                .iter()
                .map(|a| party(&a.operator, None, &a.agent))
                .collect();
            let created = naming::rfc3339_seconds(now);
            let footer = req.footer.then(footer);
            let files = recipients
                .iter()
                .map(|to| {
                    let path = format!("{}/{id}.md", naming::message_dir(&to.operator, &to.agent));
                    let doc = frontmatter::write_message(&MessageOut {
                        id: &id,
                        from: &from,
                        to,
                        thread: &thread,
                        kind: &req.kind,
                        re: req.re.as_deref(),
                        created: &created,
                        status: &req.status,
                        recipients: &recipients,
                        body: &req.body,
                        footer: footer.as_deref(),
                    });
                    (path, doc)
                })
                .collect();
            // G-AS-18: one send (or ack) line per id, one route line per further copy.
            let logs = recipients
                .iter()
                .enumerate()
                .map(|(i, to)| LogLine {
                    ts: created.clone(),
                    operator: from.operator.clone(),
                    event: match (i, &req.kind) {
                        (0, MessageType::Ack) => "ack",
                        (0, _) => "send",
                        _ => "route",
                    }
                    .to_owned(),
                    msg_id: Some(id.clone()),
                    from: Some(from.long()),
                    to: Some(to.short()),
                    thread: Some(thread.clone()),
                    kind: Some(req.kind.as_str().to_owned()),
                })
                .collect();
            let to_list: Vec<String> = recipients.iter().map(Party::short).collect();
            Ok(Plan {
                message: format!(
                    "agentbus share {}: {} -> {}",
                    req.kind.as_str(),
                    from.short(),
                    to_list.join(", ")
                ),
                warnings,
                id,
                thread: Some(thread),
                files,
                logs,
            })
        })
    }

    /// Answers (or, with `kind` ack, closes) the message `id`: the new file goes in the asker's
    /// folder with `re:` set and the original's thread (§5).
    pub fn reply(
        &self,
        id: &str,
        kind: MessageType,
        from_agent: Option<&str>,
        body: &str,
        opts: &WriteOptions,
    ) -> Result<Written, ShareError> {
        self.reply_as(id, kind, from_agent, body, false, opts)
    }

    /// [`Share::reply`], refusing (with `strict`) an asker `operators.yaml` does not declare.
    pub fn reply_as(
        &self,
        id: &str,
        kind: MessageType,
        from_agent: Option<&str>,
        body: &str,
        strict: bool,
        opts: &WriteOptions,
    ) -> Result<Written, ShareError> {
        let me = self.identity()?;
        let mut snap = self.snapshot()?;
        if snap.message_copies(id).is_empty() && !opts.offline && self.git().has_remote() {
            // The message may have arrived since the last sync: fetch before giving up on the id.
            self.sync(opts)?;
            snap = self.snapshot()?;
        }
        let copies = snap.message_copies(id);
        let first = copies
            .first()
            .ok_or_else(|| ShareError::UnknownId(id.to_owned()))?;
        // Answer as the agent the message reached, when it is one of ours (an `any` copy or a
        // stranger's folder falls back to the default agent).
        let reached = copies
            .iter()
            .filter(|c| c.doc.to.operator == me.operator)
            .map(|c| c.doc.to.agent.clone())
            .find(|a| me.agents.contains(a));
        let asker = ShareAddress {
            operator: first.doc.from.operator.clone(),
            agent: first.doc.from.agent.clone(),
        };
        let mut req = SendRequest::new(vec![asker], kind, body);
        req.strict = strict;
        req.re = Some(id.to_owned());
        req.from_agent = from_agent.map(str::to_owned).or(reached);
        req.thread = Some(first.doc.thread.clone());
        self.send(&req, opts)
    }

    /// Writes a broadcast, `to: { operator: "*", agent: "*" }` (§4).
    pub fn broadcast(
        &self,
        kind: MessageType,
        thread: Option<&str>,
        slug: Option<&str>,
        from_agent: Option<&str>,
        body: &str,
        opts: &WriteOptions,
    ) -> Result<Written, ShareError> {
        validate_common(&kind, None, "open", thread)?;
        if kind.needs_re() {
            return Err(ShareError::Invalid(format!(
                "a broadcast cannot be an {}: it answers nothing (§3 needs re:)",
                kind.as_str()
            )));
        }
        self.write(opts, |share, registry, me| {
            let from = share.sender_party(registry, me, from_agent)?;
            let now = share.clock().now();
            let slug = slug.map_or_else(|| subject_slug(body), slugify);
            let id = allocate(
                &artifact_dirs(share.root()),
                &naming::broadcast_stem(now, &from.operator, &slug),
            );
            let thread = thread.map_or_else(|| id.clone(), str::to_owned);
            let created = naming::rfc3339_seconds(now);
            let to = party("*", None, "*");
            let doc = frontmatter::write_message(&MessageOut {
                id: &id,
                from: &from,
                to: &to,
                thread: &thread,
                kind: &kind,
                re: None,
                created: &created,
                status: "open",
                recipients: &[],
                body,
                footer: None,
            });
            Ok(Plan {
                files: vec![(format!("{BROADCAST}/{id}.md"), doc)],
                logs: vec![LogLine {
                    ts: created,
                    operator: from.operator.clone(),
                    event: "send".to_owned(),
                    msg_id: Some(id.clone()),
                    from: Some(from.long()),
                    to: Some("*/*".to_owned()),
                    thread: Some(thread.clone()),
                    kind: Some(kind.as_str().to_owned()),
                }],
                message: format!("agentbus share broadcast: {}", from.short()),
                warnings: secret_warnings(body),
                id,
                thread: Some(thread),
            })
        })
    }

    /// Publishes to `knowledge/<topic>/` (§6); `supersedes` names the id it replaces.
    pub fn publish(
        &self,
        req: &PublishRequest,
        opts: &WriteOptions,
    ) -> Result<Written, ShareError> {
        check_ident("topic", &req.topic)?;
        if let Some(d) = &req.last_verified
            && !naming::is_date(d)
        {
            return Err(ShareError::Invalid(format!(
                "last_verified {d:?} must be a date YYYY-MM-DD"
            )));
        }
        self.write(opts, |share, registry, me| {
            let publisher = share.sender_party(registry, me, req.from_agent.as_deref())?;
            if let Some(old) = &req.supersedes
                && share.snapshot()?.publication(old).is_none() {
                    return Err(ShareError::UnknownId(old.clone()));
                }
            let mut warnings = secret_warnings(&req.body);
            if registry.operators.contains_key(&req.topic) {
                warnings.push(format!(
                    "topic {:?} is an operator's name; topics are domain-named, never operator-named (§6)",
                    req.topic
                ));
            }
            let now = share.clock().now();
            let slug = req.slug.as_deref().map_or_else(|| subject_slug(&req.body), slugify);
            let id = allocate(
                &artifact_dirs(share.root()),
                &naming::knowledge_stem(now, &publisher.operator, &slug),
            );
            let created = naming::rfc3339_seconds(now);
            let doc = frontmatter::write_publication(&PublicationOut {
                id: &id,
                publisher: &publisher,
                topic: &req.topic,
                source: req.source.as_ref(),
                created: &created,
                supersedes: req.supersedes.as_deref(),
                last_verified: req.last_verified.as_deref(),
                body: &req.body,
            });
            Ok(Plan {
                files: vec![(format!("{}/{id}.md", naming::knowledge_dir(&req.topic)), doc)],
                logs: vec![LogLine {
                    ts: created,
                    operator: publisher.operator.clone(),
                    event: "publish".to_owned(),
                    msg_id: Some(id.clone()),
                    from: Some(publisher.long()),
                    to: None,
                    thread: None,
                    kind: None,
                }],
                message: format!("agentbus share publish: {} in {}", publisher.short(), req.topic),
                warnings,
                id,
                thread: Some(req.topic.clone()),
            })
        })
    }

    /// Pulls with rebase and pushes, retrying lost races; never force-pushes (§1, G-AS-19).
    pub fn sync(&self, opts: &WriteOptions) -> Result<SyncReport, ShareError> {
        let _lock = self.git().lock()?;
        if opts.offline {
            return Ok(SyncReport {
                offline: Some("--offline".into()),
                ..SyncReport::default()
            });
        }
        let sign = opts.sign || self.identity().is_ok_and(|i| i.sign);
        let report = self.sync_locked(sign, false)?;
        self.git().maintain();
        Ok(report)
    }

    /// `sync` for a caller that holds the lock; `push_first` tries the push before fetching (right
    /// after a write on a checkout that was just brought up to date).
    fn sync_locked(&self, sign: bool, push_first: bool) -> Result<SyncReport, ShareError> {
        let git = self.git();
        let mut report = SyncReport::default();
        if !git.has_remote() {
            report.offline = Some("the checkout has no remote".into());
            return Ok(report);
        }
        let git_dir = git.git_dir()?;
        if ["rebase-merge", "rebase-apply", "MERGE_HEAD"]
            .iter()
            .any(|p| git_dir.join(p).exists())
        {
            return Err(ShareError::Conflict(
                "the checkout (a rebase or merge is in progress)".into(),
            ));
        }
        let up_ref = format!("refs/remotes/{REMOTE}/{}", git.branch());
        let before = git.rev(&up_ref);
        if let Some(b) = &before {
            // §1: a commit made by hand that edits or deletes a pushed artifact is never pushed by
            // us, even when it would rebase cleanly. (No HEAD yet: nothing of ours to check.)
            let edits = git.ok(&[
                "diff",
                "--name-only",
                "--no-renames",
                "--diff-filter=MDT",
                &format!("{b}...HEAD"),
                "--",
                MESSAGES,
                BROADCAST,
                KNOWLEDGE,
            ]);
            if let Some(path) = edits.as_deref().unwrap_or_default().lines().next() {
                return Err(ShareError::LocalEdit(path.to_owned()));
            }
        }
        let mut done = false;
        for attempt in 1..=MAX_ATTEMPTS {
            report.attempts = attempt;
            if attempt == 1 {
                self.pause_if_contended();
            }
            // Right after a write on an up-to-date checkout, the push usually goes through as it
            // is; only a lost race needs the fetch.
            if !(push_first && attempt == 1) {
                git.fetch()?;
            }
            // One process for both tips and one for their relation: every process widens the
            // window in which another writer can push first.
            let (head, up) = tips(git, &up_ref);
            match (&up, &head) {
                (None, _) => {
                    // The remote lacks our branch. Creating it is right only on an empty remote:
                    // next to other branches it would start a second, unrelated history that
                    // clones of the remote's HEAD never see.
                    let others = git.remote_branches();
                    if !others.is_empty() {
                        return Err(ShareError::NoShareBranch {
                            branch: git.branch(),
                            others,
                        });
                    }
                    if head.is_none() {
                        done = true;
                        break;
                    }
                }
                (Some(up), None) => {
                    git.ok(&["checkout", "--quiet", "-B", &git.branch(), up])?;
                    done = true;
                    break;
                }
                (Some(up), Some(head)) => {
                    let base = git
                        .ok(&["merge-base", head, up])
                        .map_err(|_| ShareError::Unrelated(git.branch()))?;
                    if head == up || base == *head {
                        // Nothing of ours to push: catch up.
                        if head != up {
                            git.ok(&["merge", "--ff-only", "--quiet", up])
                                .map_err(|e| dirty_or(git, e))?;
                        }
                        done = true;
                        break;
                    }
                    if base != *up {
                        let rebased = git.run(&["rebase", "--quiet", up])?;
                        if !rebased.status.success() {
                            let _ = git.run(&["rebase", "--abort"]);
                            // A rebase refuses to start over uncommitted changes; that is the
                            // user's work to commit or discard, not a race to replay.
                            let dirty = git.dirty();
                            if !dirty.is_empty() {
                                return Err(ShareError::Dirty(dirty));
                            }
                            self.replay(up, sign, &mut report)?;
                        } else if self.collides_with(up)? {
                            self.replay(up, sign, &mut report)?;
                        }
                    }
                }
            }
            match git.push()? {
                Push::Pushed => {
                    self.contention
                        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| {
                            Some(c.saturating_sub(1))
                        })
                        .ok();
                    done = true;
                    break;
                }
                Push::LostRace => {
                    let c = self
                        .contention
                        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| {
                            Some((c + 1).min(MAX_CONTENTION))
                        })
                        .unwrap_or(0);
                    pause(c + 1);
                }
            }
        }
        if !done {
            return Err(ShareError::RetriesExhausted(MAX_ATTEMPTS));
        }
        report.pushed = true;
        if let Some(after) = git.rev(&up_ref) {
            let listing = match &before {
                Some(b) if *b != after => git.ok(&[
                    "diff",
                    "--name-only",
                    "--no-renames",
                    "--diff-filter=A",
                    b,
                    &after,
                ])?,
                Some(_) => String::new(),
                None => git.ok(&["ls-tree", "-r", "--name-only", &after])?,
            };
            report.arrived = listing.lines().map(str::to_owned).collect();
        }
        Ok(report)
    }

    /// Whether a file this clone added since `up` shares its name (its id) with a file someone
    /// else added in another folder: two clones of one agent, one second, one slug (G-AS-2).
    fn collides_with(&self, up: &str) -> Result<bool, ShareError> {
        let added = self.git().ok(&[
            "diff",
            "--name-only",
            "--no-renames",
            "--diff-filter=A",
            up,
            "HEAD",
        ])?;
        let ours: BTreeSet<&str> = added.lines().collect();
        let dirs = artifact_dirs(self.root());
        for rel in &ours {
            if matches!(
                naming::place(rel),
                Place::Outside | Place::Log { .. } | Place::Stray { .. }
            ) {
                continue;
            }
            let Some(name) = rel.rsplit('/').next() else {
                continue;
            };
            for d in &dirs {
                let other = d.join(name);
                let other_rel = other
                    .strip_prefix(self.root())
                    .map(|p| p.to_string_lossy().replace('\\', "/"))
                    .unwrap_or_default();
                if other.exists() && !ours.contains(other_rel.as_str()) {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    /// Re-applies this clone's unpushed changes on top of `up` after a rebase could not (G-AS-3):
    /// artifacts keep their bytes but take a free name (and id, and with it the thread of a new
    /// message) when theirs is taken; audit lines are appended again; every other file this clone
    /// changed is merged with the remote's version, `operators.yaml` block by block (§8).
    ///
    /// The first replay takes the first free suffix, as §3 asks. Each further replay within one
    /// sync skips that many more: a twin clone that keeps writing under the same name (the same
    /// agent of another instance, in the same second) takes the first free name for its next
    /// message, so racing it for that name again and again would lose every time.
    ///
    /// Everything that can refuse (an edited artifact, a conflicting registry edit) is decided
    /// before the branch moves; if writing the replay fails after that, the branch and files are
    /// put back, so an unpushed commit is never lost.
    fn replay(&self, up: &str, sign: bool, report: &mut SyncReport) -> Result<(), ShareError> {
        let skip = report.replays;
        let git = self.git();
        let old_head = git
            .rev("HEAD")
            .ok_or_else(|| ShareError::Unrelated(git.branch()))?;
        let base = git
            .ok(&["merge-base", "HEAD", up])
            .map_err(|_| ShareError::Unrelated(git.branch()))?;
        let plan = self.replay_plan(&base, up)?;
        git.ok(&["reset", "--quiet", "--keep", up])
            .map_err(|e| dirty_or(git, e))?;
        let mut created = Vec::new();
        let result = self.apply_replay(plan, skip, sign, report, &mut created);
        if result.is_err() {
            // Put back what was there: our files out, the branch at its old commit.
            for rel in &created {
                let _ = std::fs::remove_file(self.root().join(rel));
            }
            let _ = git.run(&["reset", "--quiet", "--hard", &old_head]);
        } else {
            report.replays += 1;
        }
        result
    }

    /// What a replay onto `up` has to do, read from the unpushed commits (`base..HEAD`) before
    /// anything moves.
    fn replay_plan(&self, base: &str, up: &str) -> Result<ReplayPlan, ShareError> {
        let git = self.git();
        let me = self.identity().ok().map(|m| m.operator).unwrap_or_default();
        let version = |rev: &str, path: &str| raw_show(git, rev, path).ok();
        let mut plan = ReplayPlan {
            subjects: git.ok(&["log", "--format=%s", &format!("{base}..HEAD")])?,
            ..ReplayPlan::default()
        };
        let changes = git.ok(&["diff", "--name-status", "--no-renames", base, "HEAD"])?;
        for line in changes.lines() {
            let Some((status, path)) = line.split_once('\t') else {
                continue;
            };
            let path = path.to_owned();
            match (naming::place(&path), status) {
                (
                    Place::Message { .. } | Place::Broadcast { .. } | Place::Knowledge { .. },
                    "A",
                ) => plan
                    .artifacts
                    .push((path.clone(), raw_show(git, "HEAD", &path)?)),
                (Place::Log { .. }, "A" | "M") => {
                    let theirs: BTreeSet<String> = version(base, &path)
                        .unwrap_or_default()
                        .lines()
                        .map(str::to_owned)
                        .collect();
                    let ours = raw_show(git, "HEAD", &path)?
                        .lines()
                        .filter(|l| !l.trim().is_empty() && !theirs.contains(*l))
                        .map(str::to_owned)
                        .collect();
                    plan.logs.push((path, ours));
                }
                (
                    Place::Message { .. }
                    | Place::Broadcast { .. }
                    | Place::Knowledge { .. }
                    | Place::Log { .. },
                    _,
                ) => return Err(ShareError::LocalEdit(path)),
                _ => {
                    let (b, o, t) = (
                        version(base, &path),
                        version("HEAD", &path),
                        version(up, &path),
                    );
                    let split = path
                        .strip_prefix(&format!("{}/", naming::REGISTRY_DIR))
                        .and_then(|n| n.strip_suffix(".yaml"))
                        .filter(|n| !n.contains('/'));
                    let merged = if path == REGISTRY {
                        registry::merge(
                            b.as_deref().unwrap_or_default(),
                            o.as_deref().unwrap_or_default(),
                            t.as_deref().unwrap_or_default(),
                            &me,
                        )
                        .map(Some)
                        .map_err(ShareError::RegistryConflict)?
                    } else if let Some(op) = split {
                        registry::merge_split(b.as_deref(), o.as_deref(), t.as_deref(), op, &me)
                            .map_err(ShareError::RegistryConflict)?
                    } else {
                        registry::agree(&b, &o, &t)
                            .ok_or_else(|| ShareError::Conflict(path.clone()))?
                    };
                    plan.others.push((path, merged));
                }
            }
        }
        Ok(plan)
    }

    /// Writes a replay onto the checkout (already at the remote's tip) and commits it; `created`
    /// collects the files it creates, for putting things back if it fails.
    fn apply_replay(
        &self,
        plan: ReplayPlan,
        skip: u32,
        sign: bool,
        report: &mut SyncReport,
        created: &mut Vec<String>,
    ) -> Result<(), ShareError> {
        let git = self.git();
        let root = self.root();
        // Group copies by id: a multicast's copies move together and keep one id (§3.1).
        let mut groups: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
        for (path, content) in plan.artifacts {
            let id = frontmatter::read_message(&content)
                .map(|m| m.id)
                .or_else(|_| frontmatter::read_publication(&content).map(|p| p.id))
                .unwrap_or_else(|_| path.clone());
            groups.entry(id).or_default().push((path, content));
        }
        let mut ids: BTreeMap<String, String> = BTreeMap::new();
        let mut moves: Vec<(String, String, String)> = Vec::new();
        for (id, copies) in groups {
            let dirs = artifact_dirs(root);
            let stem = copies[0]
                .0
                .rsplit('/')
                .next()
                .and_then(|n| n.strip_suffix(".md"))
                .unwrap_or_default()
                .to_owned();
            let taken = copies.iter().any(|(p, _)| root.join(p).exists())
                || dirs.iter().any(|d| d.join(format!("{stem}.md")).exists());
            let new_stem = if taken {
                let base = unsuffixed(&stem);
                let free = |s: &String| !dirs.iter().any(|d| d.join(format!("{s}.md")).exists());
                let first = (2..)
                    .find(|&n| free(&naming::suffixed(base, n)))
                    .unwrap_or(2);
                (first + skip..)
                    .map(|n| naming::suffixed(base, n))
                    .find(free)
                    .unwrap_or_else(|| stem.clone())
            } else {
                stem.clone()
            };
            if new_stem != stem && id == stem {
                ids.insert(id.clone(), new_stem.clone());
            }
            for (path, content) in copies {
                let dir = path.rsplit_once('/').map_or("", |(d, _)| d);
                let new_path = format!("{dir}/{new_stem}.md");
                // Reserve the name now so the next group sees it.
                write_new(root, &new_path, "")?;
                created.push(new_path.clone());
                moves.push((path, new_path, content));
            }
        }
        let rename = |v: &str| ids.get(v).cloned();
        let mut paths = Vec::new();
        for (old, new, content) in moves {
            let path = root.join(&new);
            std::fs::write(&path, frontmatter::rename_ids(&content, &rename))
                .map_err(ShareError::io(&path))?;
            if old != new {
                report.renamed_paths.push(Renamed {
                    from: old,
                    to: new.clone(),
                });
            }
            paths.push(new);
        }
        for (path, lines) in plan.logs {
            let lines: Vec<LogLine> = lines
                .iter()
                .filter_map(|l| serde_json::from_str::<LogLine>(l).ok())
                .map(|mut l| {
                    if let Some(new) = l.msg_id.as_deref().and_then(rename) {
                        l.msg_id = Some(new);
                    }
                    if let Some(new) = l.thread.as_deref().and_then(rename) {
                        l.thread = Some(new);
                    }
                    l
                })
                .collect();
            audit::append(root, &path, &lines)?;
            paths.push(path);
        }
        for (rel, merged) in plan.others {
            let path = root.join(&rel);
            match merged {
                Some(text) => {
                    if let Some(parent) = path.parent() {
                        std::fs::create_dir_all(parent).map_err(ShareError::io(parent))?;
                    }
                    if !path.exists() {
                        created.push(rel.clone());
                    }
                    std::fs::write(&path, text).map_err(ShareError::io(&path))?;
                }
                None => {
                    if path.exists() {
                        git.ok(&["rm", "--quiet", "--cached", "--", &rel])?;
                        std::fs::remove_file(&path).map_err(ShareError::io(&path))?;
                    }
                }
            }
            paths.push(rel);
        }
        report
            .renamed_ids
            .extend(ids.into_iter().map(|(from, to)| Renamed { from, to }));
        if !paths.is_empty() {
            let first = plan.subjects.lines().last().unwrap_or("agentbus share");
            let more = plan.subjects.lines().count().saturating_sub(1);
            let message = if more > 0 {
                format!("{first} (+{more} more; replayed after a lost race)")
            } else {
                format!("{first} (replayed after a lost race)")
            };
            // Our changes may already be the remote's (the same edit on both sides): nothing to
            // commit is then a replay that is done, not a failure.
            git.commit_changes(&paths, &message, sign)?;
        }
        Ok(())
    }

    /// Joins the share as `req`: records the identity in this checkout's git config and adds or
    /// extends this operator's own block in `operators.yaml`, touching no other block (§8).
    pub fn join(&self, req: &JoinRequest, opts: &WriteOptions) -> Result<Written, ShareError> {
        check_ident("operator", &req.operator)?;
        check_ident("instance", &req.instance)?;
        if req.agents.is_empty() {
            return Err(ShareError::Invalid(
                "name at least one agent (--agent)".into(),
            ));
        }
        for a in &req.agents {
            check_ident("agent", a)?;
            if a == crate::ident::ANY {
                return Err(ShareError::Invalid(
                    "`any` is the routing address (§3), not an agent name".into(),
                ));
            }
        }
        let identity = Identity {
            operator: req.operator.clone(),
            instance: req.instance.clone(),
            agents: req.agents.clone(),
            sign: req.sign,
        };
        identity.save(self.git())?;
        self.write_registry(req, opts)
    }

    fn write_registry(
        &self,
        req: &JoinRequest,
        opts: &WriteOptions,
    ) -> Result<Written, ShareError> {
        let _lock = self.git().lock()?;
        let mut report = SyncReport::default();
        let online = !opts.offline && self.git().has_remote();
        if online {
            match self.sync_locked(req.sign, false) {
                Ok(r) => report.absorb(r),
                Err(ShareError::RemoteUnavailable(why)) => report.offline = Some(why),
                Err(e) => return Err(e),
            }
        }
        let root = self.root();
        if self.git().rev("HEAD").is_none()
            && !root.join(REGISTRY).exists()
            && !root.join(naming::REGISTRY_DIR).exists()
        {
            // Joining an empty remote would make the share's first commit without its README and
            // .gitattributes (the union merge of the audit logs): `init` makes shares.
            return Err(ShareError::Uninitialised);
        }
        // Half-made edits of the registry are somebody's work: never commit them as part of a join.
        let dirty: Vec<String> = self
            .git()
            .dirty()
            .into_iter()
            .filter(|p| p == REGISTRY || p.starts_with(&format!("{}/", naming::REGISTRY_DIR)))
            .collect();
        if !dirty.is_empty() {
            return Err(ShareError::Dirty(dirty));
        }
        let split = root
            .join(naming::REGISTRY_DIR)
            .join(format!("{}.yaml", req.operator));
        let (rel, path) = if split.exists() {
            (
                format!("{}/{}.yaml", naming::REGISTRY_DIR, req.operator),
                split,
            )
        } else {
            (REGISTRY.to_owned(), root.join(REGISTRY))
        };
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let mut entry = Registry::load(root)?
            .operators
            .remove(&req.operator)
            .unwrap_or_default();
        let agents = entry.instances.entry(req.instance.clone()).or_default();
        for a in &req.agents {
            if !agents.contains(a) {
                agents.push(a.clone());
            }
        }
        for m in &req.emails {
            if !entry.emails.iter().any(|e| e.eq_ignore_ascii_case(m)) {
                entry.emails.push(m.clone());
            }
        }
        let block = registry::render_block(&req.operator, &entry);
        let new = if rel != REGISTRY && registry::block_of(&text, &req.operator).is_none() {
            // A split file holding the bare block: the whole file is the block.
            block
        } else {
            registry::splice_block(&text, &req.operator, &block)
        };
        let mut paths = Vec::new();
        if new != text {
            std::fs::write(&path, &new).map_err(ShareError::io(&path))?;
            self.git().commit(
                std::slice::from_ref(&rel),
                &format!("agentbus share join: {}/{}", req.operator, req.instance),
                req.sign,
            )?;
            paths.push(rel);
        }
        if online && report.offline.is_none() {
            match self.sync_locked(req.sign, true) {
                Ok(r) => report.absorb(r),
                Err(ShareError::RemoteUnavailable(why)) => report.offline = Some(why),
                Err(e) => return Err(e),
            }
        } else if report.offline.is_none() {
            report.offline = Some(if opts.offline {
                "--offline".into()
            } else {
                "the checkout has no remote".into()
            });
        }
        Ok(Written {
            id: format!("{}/{}", req.operator, req.instance),
            paths,
            thread: None,
            warnings: Vec::new(),
            sync: report,
        })
    }
}

fn raw_show(git: &Git, rev: &str, path: &str) -> Result<String, ShareError> {
    // `ok` trims trailing whitespace; an artifact's bytes must survive exactly.
    let out = git.run(&["show", &format!("{rev}:{path}")])?;
    if !out.status.success() {
        return Err(ShareError::Git {
            args: format!("show {rev}:{path}"),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `e`, or, when tracked files have uncommitted changes (which is why git refused), the error that
/// names them.
fn dirty_or(git: &Git, e: ShareError) -> ShareError {
    let dirty = git.dirty();
    if dirty.is_empty() {
        e
    } else {
        ShareError::Dirty(dirty)
    }
}

/// The ceiling of a handle's contention estimate: pauses stay under 10 ms × 2⁶ = 640 ms.
const MAX_CONTENTION: u32 = 6;

/// A random pause in [0, 10 ms × 2^level): writers that keep losing to each other spread out, so
/// one round has fewer contenders and most rounds end in a push instead of a wasted fetch.
fn pause(level: u32) {
    if level == 0 {
        return;
    }
    let r: [u8; 2] = agentbus_runtime::random_bytes();
    let bound = 10u64 << level.min(MAX_CONTENTION);
    let ms = u64::from(u16::from_le_bytes(r)) % bound;
    std::thread::sleep(std::time::Duration::from_millis(ms));
}

impl Share {
    /// Before a first push: a handle that has been losing races lately waits a random while too,
    /// or a writer fresh from a win (whose first round is as short as anyone's) would keep
    /// capturing the branch from those retrying.
    fn pause_if_contended(&self) {
        pause(self.contention.load(Ordering::Relaxed));
    }
}

/// The commits HEAD and `up_ref` name, each `None` when absent: one process in the common case
/// where both exist.
fn tips(git: &Git, up_ref: &str) -> (Option<String>, Option<String>) {
    if let Ok(out) = git.run(&[
        "rev-parse",
        "HEAD^{commit}",
        &format!("{up_ref}^{{commit}}"),
    ]) {
        let text = String::from_utf8_lossy(&out.stdout);
        let lines: Vec<&str> = text.lines().collect();
        if out.status.success() && lines.len() == 2 {
            return (Some(lines[0].to_owned()), Some(lines[1].to_owned()));
        }
    }
    (git.rev("HEAD"), git.rev(up_ref))
}

fn validate_common(
    kind: &MessageType,
    re: Option<&str>,
    status: &str,
    thread: Option<&str>,
) -> Result<(), ShareError> {
    if let MessageType::Unknown(t) = kind {
        return Err(ShareError::Invalid(format!(
            "type {t:?} is not one of handoff, question, answer, fyi, ack (§3, §9)"
        )));
    }
    if kind.needs_re() && re.is_none() {
        return Err(ShareError::Invalid(format!(
            "an {} needs re: <id> naming the message it answers (§3)",
            kind.as_str()
        )));
    }
    if !kind.needs_re() && re.is_some() {
        return Err(ShareError::Invalid(format!(
            "re: goes only on answer and ack (§3); a {} starts or continues a thread with --thread",
            kind.as_str()
        )));
    }
    if status != "open" && status != "done" {
        return Err(ShareError::Invalid(format!(
            "status {status:?} must be open or done (§3: the initial state only)"
        )));
    }
    if let Some(t) = thread
        && (t.is_empty() || t.len() > 200 || t.chars().any(|c| c.is_control()))
    {
        return Err(ShareError::Invalid(format!(
            "thread {t:?} must be a short one-line id"
        )));
    }
    Ok(())
}

fn original(snap: &Snapshot, id: &str) -> Result<frontmatter::Message, ShareError> {
    snap.message_copies(id)
        .first()
        .map(|m| m.doc.clone())
        .ok_or_else(|| ShareError::UnknownId(id.to_owned()))
}
