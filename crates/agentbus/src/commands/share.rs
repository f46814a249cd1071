//! `agentbus share …`: the git share transport (agentshare 0.1 Core) from the command line.
//!
//! The share checkout is `--share <path>`, else `$AGENTBUS_SHARE`, else the current directory (any
//! folder inside a checkout works). This clone's identity lives in the checkout's own git config
//! (section `agentbus-share`), written by `join`. The work is in `agentbus_share`; this module
//! parses, calls and prints.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde_json::json;

use agentbus_share::check::Severity;
use agentbus_share::doctor::Level;
use agentbus_share::frontmatter::{MessageType, Source};
use agentbus_share::init::InitOutcome;
use agentbus_share::{
    JoinRequest, PublishRequest, SendRequest, Share, ShareAddress, ShareError, SyncReport,
    WriteOptions, Written,
};

use super::read_input;
use crate::error::{CliError, CliResult, ErrorKind};
use crate::printer::Printer;

/// `agentbus share …`.
#[derive(Debug, Args)]
pub struct ShareArgs {
    /// The share checkout; default: $AGENTBUS_SHARE, else the current directory.
    #[arg(long, global = true, env = "AGENTBUS_SHARE", value_name = "PATH")]
    share: Option<PathBuf>,

    #[command(subcommand)]
    command: ShareCommand,
}

/// Options of every command that writes.
#[derive(Debug, Args)]
struct WriteArgs {
    /// Commit locally only; `agentbus share sync` pushes later (offline or air-gapped clones).
    #[arg(long)]
    offline: bool,
    /// Sign the commit with your git signing setup (§11).
    #[arg(long)]
    sign: bool,
}

impl WriteArgs {
    fn options(&self) -> WriteOptions {
        WriteOptions {
            offline: self.offline,
            sign: self.sign,
        }
    }
}

/// The body of a message: inline text or a file.
#[derive(Debug, Args)]
struct BodyArgs {
    /// The markdown text.
    text: Option<String>,
    /// Read the markdown body from a file; - for standard input.
    #[arg(long, value_name = "PATH", conflicts_with = "text")]
    body_file: Option<PathBuf>,
}

impl BodyArgs {
    fn read(&self) -> Result<String, CliError> {
        match (&self.text, &self.body_file) {
            (Some(t), _) => Ok(t.clone()),
            (None, Some(p)) => String::from_utf8(read_input(p)?)
                .map_err(|_| CliError::input(format!("{}: not UTF-8 text", p.display()))),
            (None, None) => Err(CliError::new(ErrorKind::Usage, "no message text")
                .fix("give the text as an argument, or --body-file <path> (- for standard input)")),
        }
    }
}

#[derive(Debug, Subcommand)]
enum ShareCommand {
    /// Create a new share: the layout, `.gitattributes` and an empty `operators.yaml`.
    #[command(
        after_help = "Examples:\n  git init --bare /srv/share.git\n  agentbus share init ~/share --remote /srv/share.git"
    )]
    Init {
        /// The folder for the new checkout (created if missing; default: the current directory).
        path: Option<PathBuf>,
        /// The remote every participant pulls from and pushes to.
        #[arg(long, value_name = "URL")]
        remote: Option<String>,
    },
    /// Join the share: record this clone's identity and add your block to `operators.yaml`.
    #[command(
        after_help = "Example:\n  git clone /srv/share.git ~/share && cd ~/share\n  agentbus share join --operator acme --instance claude-fleet --agent reviewer --agent writer --email ops@acme.example"
    )]
    Join {
        /// Your operator name (a person or organisation; lowercase).
        #[arg(long)]
        operator: String,
        /// This clone's instance (one fleet deployment).
        #[arg(long)]
        instance: String,
        /// An agent of this instance (repeat for several; the first is the default sender).
        #[arg(long = "agent", required = true)]
        agents: Vec<String>,
        /// A git author e-mail of yours, for `doctor`'s registry check (repeatable).
        #[arg(long = "email")]
        emails: Vec<String>,
        #[command(flatten)]
        write: WriteArgs,
    },
    /// Send a direct message; several --to write one copy per recipient folder.
    #[command(
        after_help = "Examples:\n  agentbus share send --to patrik/architect \"Please review the schema change\"\n  agentbus share send --to share:patrik/any --to balazs/research --type question --body-file q.md"
    )]
    Send {
        /// A recipient, `operator/agent` or `share:operator/agent` (agent may be `any`).
        #[arg(long = "to", required = true)]
        to: Vec<String>,
        /// handoff, question, answer, fyi or ack.
        #[arg(long = "type", default_value = "fyi")]
        kind: String,
        /// The thread to continue (default: a new thread, or the original's with --re).
        #[arg(long)]
        thread: Option<String>,
        /// The id this answers or acknowledges (required for answer and ack).
        #[arg(long)]
        re: Option<String>,
        /// The informative file-name slug (default: from the first line).
        #[arg(long)]
        slug: Option<String>,
        /// The initial status: open or done.
        #[arg(long, default_value = "open")]
        status: String,
        /// Send as this agent of yours (default: your first).
        #[arg(long = "from")]
        from_agent: Option<String>,
        /// Append the `_Dispatched by agentbus …_` line (after hashing, §3.2).
        #[arg(long)]
        footer: bool,
        /// Refuse a recipient operators.yaml does not declare (default: send, with a warning).
        #[arg(long)]
        strict: bool,
        #[command(flatten)]
        body: BodyArgs,
        #[command(flatten)]
        write: WriteArgs,
    },
    /// Answer a message: an `answer` with re: set, written in the asker's folder.
    #[command(
        after_help = "Example:\n  agentbus share reply 20261130T120000Z-patrik-architect-review \"Looks good; one nit inline.\""
    )]
    Reply {
        /// The id of the message to answer.
        id: String,
        /// Answer as this agent of yours (default: the one it reached).
        #[arg(long = "from")]
        from_agent: Option<String>,
        /// Refuse when the asker is not declared in operators.yaml.
        #[arg(long)]
        strict: bool,
        #[command(flatten)]
        body: BodyArgs,
        #[command(flatten)]
        write: WriteArgs,
    },
    /// Close a thread: an `ack` with re: set, written in the asker's folder.
    #[command(
        after_help = "Example:\n  agentbus share ack 20261130T120000Z-patrik-architect-review \"Done.\""
    )]
    Ack {
        /// The id of the message to acknowledge.
        id: String,
        /// Acknowledge as this agent of yours.
        #[arg(long = "from")]
        from_agent: Option<String>,
        /// Refuse when the asker is not declared in operators.yaml.
        #[arg(long)]
        strict: bool,
        /// The text (default: "Received.").
        text: Option<String>,
        #[command(flatten)]
        write: WriteArgs,
    },
    /// Announce something to everyone in the share.
    #[command(
        after_help = "Example:\n  agentbus share broadcast \"Maintenance window Friday 18:00 UTC\""
    )]
    Broadcast {
        /// handoff, question or fyi.
        #[arg(long = "type", default_value = "fyi")]
        kind: String,
        /// The thread (default: a new one).
        #[arg(long)]
        thread: Option<String>,
        /// The informative file-name slug.
        #[arg(long)]
        slug: Option<String>,
        /// Send as this agent of yours.
        #[arg(long = "from")]
        from_agent: Option<String>,
        #[command(flatten)]
        body: BodyArgs,
        #[command(flatten)]
        write: WriteArgs,
    },
    /// Publish to knowledge/<topic>/; --supersedes replaces an older publication.
    #[command(
        after_help = "Examples:\n  agentbus share publish --topic payments-api --body-file survey.md\n  agentbus share publish --topic payments-api --supersedes 2026-11-30-acme-survey --body-file survey-v2.md"
    )]
    Publish {
        /// The topic folder (domain-named, never an operator's name).
        #[arg(long)]
        topic: String,
        /// The id of the publication this one replaces.
        #[arg(long)]
        supersedes: Option<String>,
        /// The informative file-name slug.
        #[arg(long)]
        slug: Option<String>,
        /// Provenance: the repository the text comes from.
        #[arg(long)]
        source_repo: Option<String>,
        /// Provenance: the commit.
        #[arg(long)]
        source_commit: Option<String>,
        /// Provenance: the path.
        #[arg(long)]
        source_path: Option<String>,
        /// The date (YYYY-MM-DD) the content was last verified.
        #[arg(long)]
        last_verified: Option<String>,
        /// Publish as this agent of yours.
        #[arg(long = "from")]
        from_agent: Option<String>,
        #[command(flatten)]
        body: BodyArgs,
        #[command(flatten)]
        write: WriteArgs,
    },
    /// Messages for your agents (`any` and broadcasts included), oldest first.
    #[command(
        after_help = "Examples:\n  agentbus share inbox\n  agentbus share inbox --agent reviewer --frames"
    )]
    Inbox {
        /// Only this agent's messages (and `any`).
        #[arg(long)]
        agent: Option<String>,
        /// Print each message as the framed block a session receives.
        #[arg(long)]
        frames: bool,
    },
    /// The live state of every thread, derived from all its files.
    #[command(after_help = "Example:\n  agentbus share threads --open")]
    Threads {
        /// Only open threads.
        #[arg(long)]
        open: bool,
    },
    /// The live version of every topic item.
    #[command(after_help = "Example:\n  agentbus share knowledge --topic payments-api")]
    Knowledge {
        /// Only this topic.
        #[arg(long)]
        topic: Option<String>,
    },
    /// Pull with rebase and push, retrying a lost race; never force-pushes.
    #[command(after_help = "Example:\n  agentbus share sync")]
    Sync {
        /// Sign commits sync has to make (a replay after a lost race).
        #[arg(long)]
        sign: bool,
    },
    /// Your operator's audit lines (log/<operator>-<date>.jsonl).
    #[command(after_help = "Example:\n  agentbus share log --date 2026-11-30")]
    Log {
        /// Only this UTC date (YYYY-MM-DD).
        #[arg(long)]
        date: Option<String>,
    },
    /// Check a share and its history for conformance; exit 0 only when it is clean.
    #[command(
        after_help = "Examples:\n  agentbus share check\n  agentbus share check /srv/share.git --json"
    )]
    Check {
        /// The share checkout or bare repository (default: the share).
        path: Option<PathBuf>,
    },
    /// Warn about §11 risks: force-push allowed, unsigned commits, unregistered authors.
    #[command(after_help = "Example:\n  agentbus share doctor")]
    Doctor,
}

fn open(share: &Option<PathBuf>) -> Result<Share, CliError> {
    let dir = share.clone().unwrap_or_else(|| PathBuf::from("."));
    Share::open(&dir).map_err(CliError::of)
}

fn kind(s: &str) -> Result<MessageType, CliError> {
    MessageType::parse_known(s).ok_or_else(|| {
        CliError::new(
            ErrorKind::Usage,
            format!("type {s:?} is not one of handoff, question, answer, fyi, ack"),
        )
        .fix("agentshare 0.1 defines exactly these five types (§3)")
    })
}

/// The exit code of a command that did its work but skipped something on the way: `sync` that
/// delivered what it could while a file that arrived could not be read, was unsafe, or could not
/// be handed to local delivery (each is named in the output). Documented in `docs/cli.md`.
pub const EXIT_WARNINGS: u8 = 7;

/// Hands the share's messages for this operator's agents to local delivery, so each reaches a
/// session through the harness hook ([`agentbus_client::bridge::import_share`]); what of this
/// sync was skipped or refused comes back as warning lines.
pub fn deliver_locally(
    share: &agentbus_share::Share,
    report: &SyncReport,
) -> Result<LocalDelivery, CliError> {
    let store = super::local::open_store()?;
    let now = agentbus_runtime::Clock::now(&agentbus_runtime::SystemClock);
    let import = agentbus_client::bridge::import_share(share, &store, &report.arrived, now)
        .map_err(CliError::of)?;
    Ok(LocalDelivery {
        warnings: import.warnings.iter().map(ToString::to_string).collect(),
        waiting: import.waiting,
    })
}

/// What [`deliver_locally`] did.
#[derive(Debug, Default)]
pub struct LocalDelivery {
    /// One line per message of this sync that was skipped or refused.
    pub warnings: Vec<String>,
    /// Per recipient, the messages that wait for room: its sessions have not been shown earlier
    /// ones yet.
    pub waiting: std::collections::BTreeMap<String, usize>,
}

/// The absolute paths of the files a sync brought in.
fn arrived_paths(share: &Share, report: &SyncReport) -> std::collections::BTreeSet<PathBuf> {
    report
        .arrived
        .iter()
        .map(|a| share.root().join(a))
        .collect()
}

/// Prints a line of human output made of text from the share (ids, paths, subjects, names written
/// by others): escape sequences are dropped and control characters shown, so a file cannot
/// restyle or rewrite the terminal.
fn say(printer: &Printer, text: &str) -> Result<(), CliError> {
    printer.line(&agentbus_protocol::text::for_terminal(text))
}

fn sync_line(s: &SyncReport) -> String {
    match (&s.offline, s.pushed) {
        (Some(why), _) => format!(
            "committed locally, not pushed ({why}); run `agentbus share sync` when the remote is reachable"
        ),
        (None, true) if s.attempts > 1 => format!(
            "pushed (after {} attempts: other writers pushed first)",
            s.attempts
        ),
        (None, true) => "pushed".to_owned(),
        (None, false) => "not pushed".to_owned(),
    }
}

fn print_written(printer: &Printer, verb: &str, w: &Written) -> CliResult {
    if printer.is_json() {
        printer.json(&serde_json::to_value(w).unwrap_or_default())?;
    } else {
        let mut text = format!("{verb} {}\n", w.id);
        for p in &w.paths {
            text.push_str(&format!("  {p}\n"));
        }
        for r in &w.sync.renamed_ids {
            text.push_str(&format!(
                "  renamed {} -> {} (another clone took the name first)\n",
                r.from, r.to
            ));
        }
        text.push_str(&sync_line(&w.sync));
        for warning in &w.warnings {
            text.push_str(&format!("\nwarning: {warning}"));
        }
        say(printer, &text)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs `agentbus share`.
pub fn run(args: ShareArgs, printer: &Printer) -> CliResult {
    let at = &args.share;
    match args.command {
        ShareCommand::Init { path, remote } => {
            let dir = path
                .or_else(|| at.clone())
                .unwrap_or_else(|| PathBuf::from("."));
            let r = agentbus_share::init::init(&dir, remote.as_deref()).map_err(CliError::of)?;
            let place = match &r.remote {
                Some(url) => format!("{url}, branch {}", r.branch),
                None => format!("no remote yet, branch {}", r.branch),
            };
            let what = match r.outcome {
                InitOutcome::Created => format!("a new share in {} ({place})", r.path.display()),
                InitOutcome::Resumed => format!(
                    "the share in {} made by an earlier run is now pushed ({place})",
                    r.path.display()
                ),
                InitOutcome::Existing => format!(
                    "{} is already a share ({place}); nothing changed",
                    r.path.display()
                ),
            };
            printer.either(
                &serde_json::to_value(&r).unwrap_or_default(),
                &format!(
                    "{what}\nnext: clone it (git clone <remote> <folder>) and, in the clone, agentbus share join --operator <you> --instance <fleet> --agent <name>"
                ),
            )?;
            Ok(ExitCode::SUCCESS)
        }
        ShareCommand::Join {
            operator,
            instance,
            agents,
            emails,
            write,
        } => {
            let share = open(at)?;
            let w = share
                .join(
                    &JoinRequest {
                        operator,
                        instance,
                        agents,
                        emails,
                        sign: write.sign,
                    },
                    &write.options(),
                )
                .map_err(CliError::of)?;
            print_written(printer, "joined as", &w)
        }
        ShareCommand::Send {
            to,
            kind: k,
            thread,
            re,
            slug,
            status,
            from_agent,
            footer,
            strict,
            body,
            write,
        } => {
            let share = open(at)?;
            let to = to
                .iter()
                .map(|t| ShareAddress::parse_with(t, true))
                .collect::<Result<Vec<_>, _>>()
                .map_err(CliError::of)?;
            let mut req = SendRequest::new(to, kind(&k)?, body.read()?);
            req.thread = thread;
            req.re = re;
            req.slug = slug;
            req.status = status;
            req.from_agent = from_agent;
            req.footer = footer;
            req.strict = strict;
            let w = share.send(&req, &write.options()).map_err(CliError::of)?;
            print_written(printer, "sent", &w)
        }
        ShareCommand::Reply {
            id,
            from_agent,
            strict,
            body,
            write,
        } => {
            let share = open(at)?;
            let w = share
                .reply_as(
                    &id,
                    MessageType::Answer,
                    from_agent.as_deref(),
                    &body.read()?,
                    strict,
                    &write.options(),
                )
                .map_err(CliError::of)?;
            print_written(printer, "answered with", &w)
        }
        ShareCommand::Ack {
            id,
            from_agent,
            strict,
            text,
            write,
        } => {
            let share = open(at)?;
            let body = text.unwrap_or_else(|| "Received.".to_owned());
            let w = share
                .reply_as(
                    &id,
                    MessageType::Ack,
                    from_agent.as_deref(),
                    &body,
                    strict,
                    &write.options(),
                )
                .map_err(CliError::of)?;
            print_written(printer, "acknowledged with", &w)
        }
        ShareCommand::Broadcast {
            kind: k,
            thread,
            slug,
            from_agent,
            body,
            write,
        } => {
            let share = open(at)?;
            let w = share
                .broadcast(
                    kind(&k)?,
                    thread.as_deref(),
                    slug.as_deref(),
                    from_agent.as_deref(),
                    &body.read()?,
                    &write.options(),
                )
                .map_err(CliError::of)?;
            print_written(printer, "broadcast", &w)
        }
        ShareCommand::Publish {
            topic,
            supersedes,
            slug,
            source_repo,
            source_commit,
            source_path,
            last_verified,
            from_agent,
            body,
            write,
        } => {
            let share = open(at)?;
            let source =
                (source_repo.is_some() || source_commit.is_some() || source_path.is_some())
                    .then_some(Source {
                        repo: source_repo,
                        commit: source_commit,
                        path: source_path,
                    });
            let req = PublishRequest {
                from_agent,
                topic,
                slug,
                supersedes,
                source,
                last_verified,
                body: body.read()?,
            };
            let w = share
                .publish(&req, &write.options())
                .map_err(CliError::of)?;
            print_written(printer, "published", &w)
        }
        ShareCommand::Inbox { agent, frames } => {
            inbox(&open(at)?, agent.as_deref(), frames, None, printer)
        }
        ShareCommand::Threads { open: only_open } => {
            let share = open(at)?;
            let snap = share.snapshot().map_err(CliError::of)?;
            let threads: Vec<_> = agentbus_share::views::threads(&snap)
                .into_iter()
                .filter(|t| !only_open || t.state == agentbus_share::views::ThreadState::Open)
                .collect();
            if printer.is_json() {
                printer.json(&json!({"threads": threads, "malformed": snap.malformed}))?;
            } else {
                for t in &threads {
                    say(
                        printer,
                        &format!(
                            "{:<4}  {}  {} message(s)  {}  {}",
                            if t.state == agentbus_share::views::ThreadState::Open {
                                "open"
                            } else {
                                "done"
                            },
                            t.thread,
                            t.messages,
                            t.participants.join(", "),
                            t.subject.as_deref().unwrap_or("")
                        ),
                    )?;
                }
                skipped(printer, &snap.malformed)?;
            }
            Ok(ExitCode::SUCCESS)
        }
        ShareCommand::Knowledge { topic } => {
            let share = open(at)?;
            let snap = share.snapshot().map_err(CliError::of)?;
            let topics: Vec<_> = agentbus_share::views::knowledge(&snap)
                .into_iter()
                .filter(|t| topic.as_deref().is_none_or(|x| x == t.topic))
                .collect();
            if printer.is_json() {
                printer.json(&json!({"topics": topics, "malformed": snap.malformed}))?;
            } else {
                for t in &topics {
                    say(
                        printer,
                        &format!(
                            "{} ({} live, {} superseded)",
                            t.topic,
                            t.live.len(),
                            t.superseded
                        ),
                    )?;
                    for p in &t.live {
                        say(
                            printer,
                            &format!(
                                "  {}  {}  {}",
                                p.id,
                                p.publisher,
                                p.title.as_deref().unwrap_or("")
                            ),
                        )?;
                    }
                    for c in &t.cycles {
                        say(printer, &format!("  warning: {c} is on a supersedes cycle"))?;
                    }
                }
                skipped(printer, &snap.malformed)?;
            }
            Ok(ExitCode::SUCCESS)
        }
        ShareCommand::Sync { sign } => {
            let share = open(at)?;
            let report = share
                .sync(&WriteOptions {
                    offline: false,
                    sign,
                })
                .map_err(CliError::of)?;
            let LocalDelivery { warnings, waiting } = deliver_locally(&share, &report)?;
            let code = if warnings.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(EXIT_WARNINGS)
            };
            if printer.is_json() {
                let inbound = arrived_inbound(&share, &report)?;
                printer.json(&json!({"sync": report, "inbound": inbound, "warnings": warnings, "waiting": waiting}))?;
            } else {
                say(
                    printer,
                    &format!(
                        "{}; {} file(s) arrived",
                        sync_line(&report),
                        report.arrived.len()
                    ),
                )?;
                inbox(&share, None, false, Some(&report), printer)?;
                for w in &warnings {
                    say(printer, &format!("warning: {w}"))?;
                }
                for (to, n) in &waiting {
                    say(
                        printer,
                        &format!(
                            "{n} message(s) for {to} wait for room in local delivery: its \
                             sessions have not been shown earlier ones yet; a later sync hands \
                             them over"
                        ),
                    )?;
                }
            }
            Ok(code)
        }
        ShareCommand::Log { date } => {
            let share = open(at)?;
            let me = share.identity().map_err(CliError::of)?;
            let mut lines = Vec::new();
            for rel in agentbus_share::audit::files_of(share.root(), &me.operator) {
                if date
                    .as_deref()
                    .is_some_and(|d| !rel.ends_with(&format!("-{d}.jsonl")))
                {
                    continue;
                }
                let text = std::fs::read_to_string(share.root().join(&rel))?;
                lines.extend(
                    text.lines()
                        .filter(|l| !l.trim().is_empty())
                        .map(str::to_owned),
                );
            }
            if printer.is_json() {
                let values: Vec<serde_json::Value> = lines
                    .iter()
                    .filter_map(|l| serde_json::from_str(l).ok())
                    .collect();
                printer.json(&json!({"operator": me.operator, "lines": values}))?;
            } else {
                for l in &lines {
                    say(printer, l)?;
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        ShareCommand::Check { path } => {
            let dir = path
                .or_else(|| at.clone())
                .unwrap_or_else(|| PathBuf::from("."));
            let report = agentbus_share::check::check(&dir).map_err(CliError::of)?;
            if printer.is_json() {
                let mut v = serde_json::to_value(&report).unwrap_or_default();
                v["clean"] = json!(report.is_clean());
                printer.json(&v)?;
            } else {
                for f in &report.findings {
                    let level = if f.severity == Severity::Violation {
                        "violation"
                    } else {
                        "warning"
                    };
                    let place = f
                        .path
                        .clone()
                        .or_else(|| f.commit.clone())
                        .unwrap_or_default();
                    say(
                        printer,
                        &format!("{level} {} {} {place}: {}", f.section, f.rule, f.message),
                    )?;
                }
                say(
                    printer,
                    &format!(
                        "{}: {} message(s), {} publication(s), {} commit(s) read; {} violation(s), {} warning(s){}",
                        if report.is_clean() {
                            "clean"
                        } else {
                            "not conformant"
                        },
                        report.messages,
                        report.publications,
                        report.commits,
                        report.violations(),
                        report.findings.len() - report.violations(),
                        if report.reflog_seen {
                            ""
                        } else {
                            "; no remote-tracking reflog, so force-pushes before this clone cannot be seen"
                        }
                    ),
                )?;
            }
            Ok(if report.is_clean() {
                ExitCode::SUCCESS
            } else {
                ErrorKind::Failed.exit_code()
            })
        }
        ShareCommand::Doctor => {
            let share = open(at)?;
            let notes = agentbus_share::doctor::doctor(&share).map_err(CliError::of)?;
            if printer.is_json() {
                printer.json(&json!({"notes": notes}))?;
            } else {
                for n in &notes {
                    let level = match n.level {
                        Level::Ok => "ok",
                        Level::Warn => "warning",
                        Level::Unknown => "unknown",
                    };
                    say(printer, &format!("{level:<7} {} {}", n.rule, n.message))?;
                    if let Some(fix) = &n.fix {
                        say(printer, &format!("        fix: {fix}"))?;
                    }
                }
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn skipped(
    printer: &Printer,
    malformed: &[agentbus_share::share::Malformed],
) -> Result<(), CliError> {
    for m in malformed {
        say(printer, &format!("skipped {}: {}", m.path, m.error))?;
    }
    Ok(())
}

fn arrived_inbound(
    share: &Share,
    report: &SyncReport,
) -> Result<Vec<agentbus_share::InboundMessage>, CliError> {
    let inbound = match agentbus_share::inbound_messages(share) {
        Ok(i) => i,
        Err(ShareError::NotJoined) => return Ok(Vec::new()),
        Err(e) => return Err(CliError::of(e)),
    };
    let arrived = arrived_paths(share, report);
    Ok(inbound
        .messages
        .into_iter()
        .filter(|m| arrived.contains(&m.path))
        .collect())
}

fn inbox(
    share: &Share,
    agent: Option<&str>,
    frames: bool,
    after: Option<&SyncReport>,
    printer: &Printer,
) -> CliResult {
    let inbound = match after {
        Some(report) => agentbus_share::views::Inbound {
            messages: arrived_inbound(share, report)?,
            malformed: Vec::new(),
        },
        None => agentbus_share::inbound_messages(share).map_err(CliError::of)?,
    };
    let msgs: Vec<_> = inbound
        .messages
        .iter()
        .filter(|m| {
            agent.is_none_or(|a| m.to.ends_with(&format!("/{a}")) || m.to.ends_with("/any"))
        })
        .collect();
    if printer.is_json() {
        printer.json(&json!({"messages": msgs, "malformed": inbound.malformed}))?;
        return Ok(ExitCode::SUCCESS);
    }
    // An empty answer must still read as one, not as a command that did nothing.
    if msgs.is_empty() && after.is_none() {
        let whom = agent.map_or_else(|| "this checkout".to_owned(), |a| format!("agent {a}"));
        say(
            printer,
            &format!("no messages for {whom}; `agentbus share sync` fetches new ones"),
        )?;
    }
    for m in &msgs {
        if frames {
            say(printer, m.frame().trim_end())?;
        } else {
            let flags = match (m.content_hash, m.sender_declared) {
                (agentbus_share::hash::HashCheck::Mismatch, _) => "  [content_hash mismatch]",
                (_, false) => "  [sender not in operators.yaml]",
                _ => "",
            };
            say(
                printer,
                &format!(
                    "{}  {} -> {}  [{}] {}  ({}){flags}",
                    m.sent.as_deref().unwrap_or("?"),
                    m.from,
                    m.to,
                    m.kind,
                    m.subject.as_deref().unwrap_or(""),
                    m.id
                ),
            )?;
        }
    }
    skipped(printer, &inbound.malformed)?;
    Ok(ExitCode::SUCCESS)
}
