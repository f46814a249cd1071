//! `agentbus tell|ask|reply|pause|resume|inbox|listen|sessions|hook|hooks`: messaging between the
//! sessions of this machine and delivery into harnesses. The verbs are transport-neutral where it
//! is cheap: the address picks the transport ([`crate::route`]), and every message shown is
//! labelled with the transport it came over. The work is in the `agentbus-local` crate.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::{Value, json};

use agentbus_local::address::short_node;
use agentbus_local::deliver::{sender_label, transport_of};
use agentbus_local::send::Sent;
use agentbus_local::view::{Agents, InboxItem};
use agentbus_local::{Address, Kind, Message, Outgoing, Sender, Store};
use agentbus_protocol::frame::Transport;
use agentbus_runtime::SystemClock;

use super::hook::{HookArgs, HooksArgs};
use crate::cli::Globals;
use crate::error::{CliError, CliResult, ErrorKind};
use crate::printer::Printer;
use crate::route::{Route, route, unavailable};

/// The local-messaging verbs, flattened into the top level (`agentbus tell …`).
#[derive(Debug, Subcommand)]
pub enum LocalCommand {
    /// Tell a session, every session, or the engineer something.
    #[command(
        after_help = "Examples:\n  agentbus tell local \"the build is green again\"\n  agentbus tell 3f2a \"I am editing src/lib.rs; stay out for ten minutes\"\n  agentbus tell engineer \"done: the migration is written, not run\"\n  agentbus --json tell --dry-run all \"hello\""
    )]
    Tell(SendArgs),
    /// Ask a question that expects a reply (`agentbus reply <id>`).
    #[command(
        after_help = "Example:\n  agentbus ask reviewer \"is the API change in #42 safe to merge?\""
    )]
    Ask(SendArgs),
    /// Answer a message: the reply goes to whoever sent it, on the node it came from.
    #[command(after_help = "Example:\n  agentbus reply lm_0a1b2c3d4e5f60718293 \"yes, merge it\"")]
    Reply(ReplyArgs),
    /// Pause a session of this machine: its tool calls are refused with your reason until a resume.
    #[command(
        after_help = "Example:\n  agentbus pause 3f2a \"stop touching the database until I look\""
    )]
    Pause(SteerArgs),
    /// Resume a paused session.
    #[command(after_help = "Example:\n  agentbus resume 3f2a")]
    Resume(SteerArgs),
    /// The engineer's inbox: messages to you, from every transport, labelled with where they came from.
    #[command(
        after_help = "Examples:\n  agentbus inbox\n  agentbus inbox --all\n  agentbus inbox --show lm_0a1b2c3d4e5f60718293"
    )]
    Inbox(InboxArgs),
    /// Stream messages as they arrive, from every transport (one line each; one JSON object a line
    /// with --json). With a connected agent and no sidecar, it receives from the gateway itself.
    #[command(after_help = "Examples:\n  agentbus listen\n  agentbus --json listen --count 1")]
    Listen(ListenArgs),
    /// The sessions known on this machine: harness, unread counts, pauses, bound agents.
    #[command(
        after_help = "Examples:\n  agentbus sessions\n  agentbus sessions bind 3f2a agent://acme/backend/reviewer\n  agentbus sessions forget 3f2a"
    )]
    Sessions(SessionsArgs),
    /// What a harness runs on a prompt or tool call: reads its event JSON on stdin, answers in its hook format.
    #[command(
        after_help = "Example:\n  echo '{\"session_id\":\"s1\",\"hook_event_name\":\"UserPromptSubmit\",\"prompt\":\"hi\"}' | agentbus hook claude"
    )]
    Hook(HookArgs),
    /// Add the hook to a harness's settings, or remove it.
    #[command(subcommand)]
    Hooks(HooksArgs),
}

/// Arguments of `tell` and `ask`.
#[derive(Debug, Args)]
pub struct SendArgs {
    /// local, all (or collective), engineer[:<email>], <session>@<node>, a session id prefix or
    /// name; agent://… and share:<operator>/<agent> go to their transports.
    address: String,
    /// The text; several words are joined with spaces.
    #[arg(required = true, num_args = 1..)]
    text: Vec<String>,
    /// Send as this session (default: $AGENTBUS_SESSION, else the engineer).
    #[arg(long)]
    from: Option<String>,
    /// Decide and report, write nothing.
    #[arg(long)]
    dry_run: bool,
}

/// Arguments of `reply`.
#[derive(Debug, Args)]
pub struct ReplyArgs {
    /// The id of the message to answer.
    id: String,
    /// The text.
    #[arg(required = true, num_args = 1..)]
    text: Vec<String>,
    /// Reply as this session (default: $AGENTBUS_SESSION, else the engineer).
    #[arg(long)]
    from: Option<String>,
}

/// Arguments of `pause` and `resume`.
#[derive(Debug, Args)]
pub struct SteerArgs {
    /// The session: an id, id prefix, name, or <session>@<node>.
    session: String,
    /// The reason the session is shown.
    reason: Vec<String>,
}

/// Arguments of `inbox`.
#[derive(Debug, Args)]
pub struct InboxArgs {
    /// Print one whole message.
    #[arg(long, value_name = "ID")]
    show: Option<String>,
    /// Include messages you have already seen.
    #[arg(long)]
    all: bool,
    /// List every agent's mail held on this machine, not only the profile's (`--profile`).
    #[arg(long)]
    all_agents: bool,
}

/// Arguments of `listen`.
#[derive(Debug, Args)]
pub struct ListenArgs {
    /// Stop after this many messages.
    #[arg(long)]
    count: Option<usize>,
    /// How often to look, in milliseconds.
    #[arg(long, default_value_t = 200)]
    poll_ms: u64,
}

/// Arguments of `sessions`.
#[derive(Debug, Args)]
pub struct SessionsArgs {
    #[command(subcommand)]
    action: Option<SessionsAction>,
}

/// `sessions bind|unbind|forget`.
#[derive(Debug, Subcommand)]
enum SessionsAction {
    /// Bind a session to an agent identity: messages imported for it are delivered to the session.
    #[command(after_help = "Example:\n  agentbus sessions bind 3f2a agent://acme/backend/reviewer")]
    Bind {
        /// The session.
        session: String,
        /// agent://<tenant>/<workspace>/<name> or share:<operator>/<agent>.
        agent: String,
    },
    /// Remove a session's binding.
    #[command(after_help = "Example:\n  agentbus sessions unbind 3f2a")]
    Unbind {
        /// The session.
        session: String,
    },
    /// Forget a session: its presence, stamp and delivery claims.
    #[command(after_help = "Example:\n  agentbus sessions forget 3f2a")]
    Forget {
        /// The session.
        session: String,
    },
}

/// Runs one local verb.
pub fn run(command: LocalCommand, globals: &Globals, printer: &Printer) -> CliResult {
    match command {
        LocalCommand::Tell(args) => send(args, Kind::Tell, globals, printer),
        LocalCommand::Ask(args) => send(args, Kind::Ask, globals, printer),
        LocalCommand::Reply(args) => reply(args, globals, printer),
        LocalCommand::Pause(args) => steer(args, Kind::Pause, printer),
        LocalCommand::Resume(args) => steer(args, Kind::Resume, printer),
        LocalCommand::Inbox(args) => inbox(args, globals, printer),
        LocalCommand::Listen(args) => listen(args, globals, printer),
        LocalCommand::Sessions(args) => sessions(args, printer),
        LocalCommand::Hook(args) => super::hook::hook(args, printer),
        LocalCommand::Hooks(args) => super::hook::hooks(args, printer),
    }
}

/// The store of this machine (`AGENTBUS_HOME`, else `~/.agentbus`), on the system clock.
pub fn open_store() -> Result<Store, CliError> {
    let home = Store::default_home().map_err(CliError::of)?;
    Ok(Store::open(home, Arc::new(SystemClock)))
}

/// The engineer's email: `AGENTBUS_ENGINEER_EMAIL`, else `git config user.email` of the repo at
/// the current directory (LM-45, G-LM-9); `None` when neither says.
pub fn engineer_email() -> Option<String> {
    if let Some(e) = std::env::var_os("AGENTBUS_ENGINEER_EMAIL") {
        let e = e.to_string_lossy().trim().to_owned();
        return (!e.is_empty()).then_some(e);
    }
    let out = std::process::Command::new("git")
        .args(["config", "user.email"])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    let e = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    (out.status.success()
        && !e.is_empty()
        && agentbus_local::address::is_engineer(&format!("engineer:{e}")))
    .then_some(e)
}

/// The sender (LM: sender): a session acts as itself. Inside a harness session
/// (its environment names or marks it, [`caller`]) a message is sent as that session, and
/// `--from` may name only that session; a session that cannot be identified sends nothing rather
/// than send as the engineer. From the engineer's own terminal, `--from` is taken as given and
/// the default is the engineer.
fn sender(store: &Store, from: Option<String>) -> Result<Sender, CliError> {
    use agentbus_local::address::is_engineer;
    use agentbus_local::session::{Caller, caller};
    let who = caller(|k| std::env::var(k).ok());
    let session = match (from, who) {
        (Some(f), Caller::Session { id, .. }) if f != id => {
            return Err(not_yourself(&f, &format!("session {id}")));
        }
        (Some(f), Caller::UnknownSession { harness }) if is_engineer(&f) => {
            return Err(not_yourself(&f, &format!("a {harness} session")));
        }
        (Some(f), _) => Some(f),
        (None, Caller::Session { id, .. }) => Some(id),
        (None, Caller::UnknownSession { harness }) => {
            return Err(CliError::input(format!(
                "this runs inside a {harness} session that could not be identified, so it is not sent as the engineer"
            ))
            .code(agentbus_protocol::Code::SessionUnknown)
            .fix("pass --from <session id> (the frame of the message you answer gives it), or run it from the engineer's terminal"));
        }
        (None, Caller::Engineer) => None,
    };
    match session {
        // From the engineer's terminal, `--from engineer:<email>` names which engineer.
        Some(e) if is_engineer(&e) => Ok(Sender {
            by: e,
            name: None,
            harness: None,
        }),
        Some(s) => {
            let presence = store.presence(&s).map_err(CliError::of)?;
            Ok(Sender {
                by: s,
                name: presence.as_ref().and_then(|p| p.name.clone()),
                harness: presence.map(|p| p.harness),
            })
        }
        None => Ok(Sender {
            by: agentbus_local::view::engineer_by(engineer_email().as_deref()),
            name: None,
            harness: None,
        }),
    }
}

fn not_yourself(from: &str, caller: &str) -> CliError {
    CliError::input(format!(
        "--from {from} is refused: this runs inside {caller}, and a session sends only as itself"
    ))
    .code(agentbus_protocol::Code::NotYourself)
    .fix("drop --from (or pass the session's own id); the engineer sends from a terminal outside any harness session")
}

fn send(args: SendArgs, kind: Kind, globals: &Globals, printer: &Printer) -> CliResult {
    let r = route(&args.address)?;
    if let Route::Gateway(to) = &r {
        return super::gateway_verbs::tell(
            to,
            &args.text.join(" "),
            kind == Kind::Ask,
            globals,
            printer,
        );
    }
    let Route::Local(word) = &r else {
        return Err(unavailable(r.transport()));
    };
    let store = open_store()?;
    let to = store.resolve(word).map_err(CliError::of)?;
    let out = Outgoing {
        from: sender(&store, args.from)?,
        to,
        kind,
        text: args.text.join(" "),
        re: None,
    };
    let sent = store.send(&out, args.dry_run).map_err(CliError::of)?;
    print_sent(&sent, printer)
}

fn print_sent(sent: &Sent, printer: &Printer) -> CliResult {
    let m = &sent.message;
    let verb = if sent.dry_run { "would send" } else { "sent" };
    let doc = json!({
        "id": m.id,
        "kind": m.kind.as_str(),
        "to": m.to,
        "by": m.by,
        "node": m.node,
        "transport": "local",
        "dry_run": sent.dry_run,
        "window": sent.window,
    });
    printer.either(
        &doc,
        &format!("{verb} {} {} to {}", m.kind.as_str(), m.id, m.to),
    )?;
    Ok(ExitCode::SUCCESS)
}

fn reply(args: ReplyArgs, globals: &Globals, printer: &Printer) -> CliResult {
    // A gateway id, or a task's (which the gateway half refuses with what it needs).
    if args.id.starts_with("msg_") || args.id.starts_with("tsk_") {
        return super::gateway_verbs::reply(&args.id, &args.text.join(" "), globals, printer);
    }
    let store = open_store()?;
    let Some((original, to)) = store.reply_target(&args.id).map_err(CliError::of)? else {
        return Err(
            CliError::input(format!("no message {} is held here", args.id))
                .fix("run `agentbus inbox --all` for the ids you can answer"),
        );
    };
    let Some(to) = to else {
        // An imported message is answered over the transport it came by.
        if let Some(via) = original
            .via
            .as_ref()
            .filter(|v| v.transport == Transport::Gateway)
        {
            return super::gateway_verbs::reply(
                &via.ext_id,
                &args.text.join(" "),
                globals,
                printer,
            );
        }
        return Err(unavailable(transport_of(&original).as_str()));
    };
    let out = Outgoing {
        from: sender(&store, args.from)?,
        to,
        kind: Kind::Tell,
        text: args.text.join(" "),
        re: Some(original.id),
    };
    let sent = store.send(&out, false).map_err(CliError::of)?;
    print_sent(&sent, printer)
}

fn steer(args: SteerArgs, kind: Kind, printer: &Printer) -> CliResult {
    let store = open_store()?;
    let to = store.resolve(&args.session).map_err(CliError::of)?;
    if !matches!(to, Address::Session { .. }) {
        return Err(
            CliError::new(ErrorKind::Usage, format!("{to} is not one session"))
                .fix("name one session: its id, an id prefix, or its name"),
        );
    }
    let out = Outgoing {
        from: sender(&store, None)?,
        to,
        kind,
        text: args.reason.join(" "),
        re: None,
    };
    let sent = store.send(&out, false).map_err(CliError::of)?;
    print_sent(&sent, printer)
}

/// One message as `inbox --json` and `listen --json` show it: every id it is known by (`id` and
/// `local_id` are the store's `lm_`, `message_id` the transport's, the gateway's `msg_`), its
/// task, and the command that answers it now, so a script can go on to the task verbs.
fn item_json(m: &Message, now: i64) -> Value {
    let mut doc = json!({"id": m.id, "local_id": m.id});
    if let (Some(d), Value::Object(ids)) = (
        doc.as_object_mut(),
        agentbus_local::deliver::standing(m, None, now),
    ) {
        d.extend(ids);
    }
    let rest = json!({
        "transport": transport_of(m).as_str(),
        "kind": m.via.as_ref().map_or(m.kind.as_str(), |v| v.kind.as_str()),
        "from": sender_label(m),
        "by": m.by,
        "node": m.node,
        "to": m.to,
        "ms": m.ms,
        "subject": m.via.as_ref().and_then(|v| v.subject.clone()),
        "re": m.re,
        "text": m.text,
    });
    if let (Some(d), Value::Object(rest)) = (doc.as_object_mut(), rest) {
        d.extend(rest);
    }
    doc
}

/// The first line of a foreign text, made safe for a terminal and cut to `max` characters.
fn first_line(text: &str, max: usize) -> String {
    let line = agentbus_protocol::text::for_terminal_line(text.lines().next().unwrap_or(""));
    let mut out: String = line.chars().take(max).collect();
    if line.chars().count() > max || text.lines().nth(1).is_some() {
        out.push('…');
    }
    out
}

fn inbox(args: InboxArgs, globals: &Globals, printer: &Printer) -> CliResult {
    if let Some(id) = args
        .show
        .as_deref()
        .filter(|id| id.starts_with("msg_") || id.starts_with("tsk_"))
    {
        return super::gateway_verbs::show(id, globals, printer);
    }
    let store = open_store()?;
    if let Some(id) = args.show {
        let Some(m) = store.show(&id).map_err(CliError::of)? else {
            return Err(CliError::input(format!("no message {id} is held here"))
                .fix("run `agentbus inbox --all` to list the ids"));
        };
        // A gateway message held here shows as the gateway's record: its msg_ id, its task.
        if m.via
            .as_ref()
            .is_some_and(|v| v.transport == Transport::Gateway)
        {
            return super::gateway_verbs::show(&id, globals, printer);
        }
        let human = format!(
            "id:        {}\nfrom:      {}\nto:        {}\nkind:      {}\ntransport: {}\nnode:      {}\n\n{}",
            m.id,
            sender_label(&m),
            m.to,
            m.kind.as_str(),
            transport_of(&m).as_str(),
            short_node(&m.node),
            m.text
        );
        // The list's document, with the one item.
        let doc = json!({
            "engineer": agentbus_local::view::engineer_by(engineer_email().as_deref()),
            "items": [item_json(&m, store.now())],
        });
        printer.either(&doc, &human)?;
        return Ok(ExitCode::SUCCESS);
    }
    let email = engineer_email();
    let agents = inbox_agents(args.all_agents, globals, printer)?;
    let mut items = store
        .inbox(email.as_deref(), args.all, &agents)
        .map_err(CliError::of)?;
    // Unread first, each group in arrival order.
    items.sort_by_key(|i| i.seen);
    if printer.is_json() {
        let now = store.now();
        let list: Vec<Value> = items.iter().map(|i| inbox_item_json(i, now)).collect();
        printer.json(&json!({"engineer": agentbus_local::view::engineer_by(email.as_deref()), "items": list}))?;
    } else if items.is_empty() {
        printer.line("no new messages")?;
    } else {
        for i in &items {
            let m = &i.message;
            let ask = if i.unanswered {
                " (unanswered ask)"
            } else {
                ""
            };
            // A gateway message is named by its envelope id, which `reply`, `ack` and `trace`
            // take, and marked when its signature did not re-verify (AB-1303); its task and the
            // command that answers it now follow its preview.
            let now = store.now();
            let (id, mark, more) = match &m.via {
                Some(v) if v.transport == Transport::Gateway => {
                    let mut mark = String::new();
                    if v.verified == agentbus_protocol::frame::Verified::False {
                        mark.push_str(" UNVERIFIED (AB-1303)");
                    }
                    if let Some(h) = &v.held {
                        mark.push_str(&format!(" HELD ({h}: not shown to sessions)"));
                    }
                    if v.late {
                        mark.push_str(" LATE (after its task ended)");
                    }
                    if let Some(at) = v.expired_at(now) {
                        mark.push_str(&format!(" EXPIRED (at {at}, not accepted)"));
                    }
                    let mut more = String::new();
                    if let Some(t) = &v.task {
                        more.push_str(&format!("\n    task: {t}"));
                    }
                    if let Some(cmd) = agentbus_local::deliver::answer_at(m, None, now) {
                        more.push_str(&format!(
                            "\n    to answer: {}",
                            agentbus_protocol::text::for_terminal_line(&cmd)
                        ));
                    }
                    (v.shown_id(), mark, more)
                }
                _ => (m.id.as_str(), String::new(), String::new()),
            };
            let seen = if i.seen { " (seen)" } else { "" };
            printer.line(&format!(
                "[{}] {id}  from {}{ask}{mark}{seen}\n    {}{more}",
                transport_of(m).as_str(),
                sender_label(m),
                first_line(&m.text, 100)
            ))?;
        }
    }
    store
        .ack_engineer(email.as_deref(), &items)
        .map_err(CliError::of)?;
    Ok(ExitCode::SUCCESS)
}

/// Whose gateway mail `inbox` lists: the profile's (`--profile`, `AGENTBUS_PROFILE`, or the only
/// one saved), every agent's with `--all-agents`, and none but a note when several profiles are
/// saved and none is chosen.
fn inbox_agents(
    all_agents: bool,
    globals: &Globals,
    printer: &Printer,
) -> Result<Agents, CliError> {
    if all_agents {
        return Ok(Agents::All);
    }
    let profiles = agentbus_client::profile::Profiles::open_default().map_err(CliError::of)?;
    match profiles.select(globals.profile.as_deref()) {
        Ok(p) => Ok(Agents::Only(vec![p.address])),
        Err(agentbus_client::ClientError::NoProfile(n)) if n.is_empty() => {
            Ok(Agents::Only(Vec::new()))
        }
        Err(agentbus_client::ClientError::AmbiguousProfile(names)) => {
            printer.commentary(&format!(
                "agents' mail not listed: several profiles are saved ({names}); pass --profile <name> or --all-agents"
            ));
            Ok(Agents::Only(Vec::new()))
        }
        Err(e) => Err(CliError::of(e)),
    }
}

fn inbox_item_json(i: &InboxItem, now: i64) -> Value {
    let mut v = item_json(&i.message, now);
    v["seen"] = json!(i.seen);
    v["unanswered"] = json!(i.unanswered);
    v
}

fn listen(args: ListenArgs, globals: &Globals, printer: &Printer) -> CliResult {
    let store = open_store()?;
    // What is there when listening starts is not news.
    let mut known: std::collections::HashSet<String> = store
        .read()
        .map_err(CliError::of)?
        .into_iter()
        .map(|m| m.id)
        .collect();
    let mut last = store.talk();
    let mut printed = 0usize;
    // With a connected agent and no sidecar running for it, listen receives from the gateway
    // itself (the sidecar's path: persist, import, ack); otherwise it watches what arrives.
    // The lock is tried again on every turn: when the sidecar stops, listen takes over.
    let ctx = super::profile::Ctx::open(globals, printer).ok();
    let mut gateway = None;
    loop {
        if args.count.is_some_and(|c| printed >= c) {
            return Ok(ExitCode::SUCCESS);
        }
        if gateway.is_none()
            && let Some(ctx) = &ctx
            && let Ok(Some(lock)) = ctx.inbox().try_lock()
        {
            gateway = Some((lock, ctx.receiver()?));
        }
        match (ctx.as_ref(), gateway.as_mut()) {
            (Some(ctx), Some((_lock, receiver))) => match ctx.rt.block_on(receiver.pull(1)) {
                Ok(_) => {}
                // A gateway that is away for a moment is waited for, like local news.
                Err(agentbus_client::ClientError::Unreachable { .. }) => {
                    std::thread::sleep(Duration::from_millis(args.poll_ms.max(10)));
                }
                Err(e) => return Err(CliError::of(e)),
            },
            _ => std::thread::sleep(Duration::from_millis(args.poll_ms.max(10))),
        }
        let talk = store.talk();
        if talk == last {
            continue;
        }
        last = talk;
        for m in store.read().map_err(CliError::of)? {
            if !known.insert(m.id.clone()) {
                continue;
            }
            if printer.is_json() {
                printer.data_line(&item_json(&m, store.now()).to_string())?;
            } else {
                printer.line(&format!(
                    "[{}] {} {} from {} to {}: {}",
                    transport_of(&m).as_str(),
                    m.kind.as_str(),
                    m.id,
                    sender_label(&m),
                    m.to,
                    first_line(&m.text, 100)
                ))?;
            }
            printed += 1;
            if args.count.is_some_and(|c| printed >= c) {
                return Ok(ExitCode::SUCCESS);
            }
        }
    }
}

fn sessions(args: SessionsArgs, printer: &Printer) -> CliResult {
    let store = open_store()?;
    match args.action {
        Some(SessionsAction::Bind { session, agent }) => {
            let p = store.bind(&session, Some(&agent)).map_err(CliError::of)?;
            printer.either(
                &json!({"session": p.session, "agent": p.agent}),
                &format!("{} is bound to {agent}", p.session),
            )?;
        }
        Some(SessionsAction::Unbind { session }) => {
            let p = store.bind(&session, None).map_err(CliError::of)?;
            printer.either(
                &json!({"session": p.session, "agent": null}),
                &format!("{} is bound to no agent", p.session),
            )?;
        }
        Some(SessionsAction::Forget { session }) => {
            let existed = store.forget(&session).map_err(CliError::of)?;
            printer.either(
                &json!({"session": session, "forgotten": existed}),
                &if existed {
                    format!("forgot {session}")
                } else {
                    format!("{session} was not known")
                },
            )?;
        }
        None => {
            let views = store.session_views().map_err(CliError::of)?;
            let node = store.node().map_err(CliError::of)?;
            if printer.is_json() {
                printer.json(&json!({
                    "node": node,
                    "generation": store.generation(),
                    "stats": store.stats(),
                    "sessions": views,
                }))?;
            } else if views.is_empty() {
                printer.line(&format!("no sessions known on node {}", short_node(&node)))?;
            } else {
                for v in &views {
                    let p = &v.presence;
                    let mut line =
                        format!("{}  {:<8} unread {:<3}", p.session, p.harness, v.unread);
                    if let Some(n) = &p.name {
                        line.push_str(&format!(" name {n}"));
                    }
                    if let Some(a) = &p.agent {
                        line.push_str(&format!(" agent {a}"));
                    }
                    if let Some(r) = &v.paused {
                        line.push_str(&format!(" PAUSED: {}", first_line(r, 60)));
                    }
                    printer.line(&line)?;
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
