//! The command line, as clap sees it. Each area's arguments are defined next to its command module.

use clap::{Arg, ArgMatches, CommandFactory as _, FromArgMatches as _, Parser, Subcommand};

use crate::commands::{
    completions::CompletionsArgs, directory::AgentsArgs, directory::CardArgs, directory::TopicArgs,
    doctor::DoctorArgs, envelope::EnvelopeArgs, explain::ExplainArgs, gateway::GatewayArgs,
    gateway_verbs::AgentCommand, keys::KeysArgs, lists::SentArgs, lists::TasksArgs,
    local::LocalCommand, mcp::McpArgs, share::ShareArgs, sidecar::SidecarArgs, trace::TraceArgs,
    work::WorkArgs,
};
use crate::commands::{search::SearchArgs, tokens::TokensArgs, users::UsersArgs};

/// AgentBus: messaging for fleets of AI agents, on one machine, across a team through a gateway,
/// and across organisations through a git share.
#[derive(Debug, Parser)]
#[command(
    name = "agentbus",
    version,
    about,
    after_help = "Exit codes: 0 success, 1 a negative answer (invalid, unverified), 2 usage, 3 bad input, \
4 configuration, 5 unavailable, 6 refused by a server, 7 done with warnings (share sync skipped a file), \
70 internal error.\n\
Every error prints a cause and a fix; --json prints one JSON document instead."
)]
pub struct Cli {
    /// Print one machine-readable JSON document instead of human output.
    #[arg(long, global = true)]
    pub json: bool,

    /// Print only results and errors: no progress bars, no running commentary on stderr.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,

    /// Say more on stderr: which profile, agent and gateway a command acts through.
    #[arg(short, long, global = true)]
    pub verbose: bool,

    #[command(subcommand)]
    pub command: Command,
}

/// What the global options ask of a command besides its output (the [`Printer`](crate::printer::Printer)
/// holds `--json`, `-q` and `-v`): built once by `main` from the parsed arguments and passed
/// down to the commands that need it, never kept in a static.
#[derive(Debug, Clone, Default)]
pub struct Globals {
    /// The agent profile to act as: `--profile` (clap also reads `AGENTBUS_PROFILE` for the
    /// commands that take it); `None`: the only one saved.
    pub profile: Option<String>,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Canonicalise, sign, verify and validate envelopes (wire protocol §2–§3).
    #[command(subcommand)]
    Envelope(EnvelopeArgs),
    /// Ed25519 keys: generate key files; list, rotate and revoke the connected agent's keys.
    #[command(subcommand)]
    Keys(KeysArgs),
    /// Explain an AB- error code.
    Explain(ExplainArgs),
    /// Run the gateway: verify, persist and route signed envelopes over HTTP (an embedded SQLite store).
    Gateway(GatewayArgs),
    /// Local messaging and delivery: tell, ask, reply, pause, resume, inbox, listen, sessions,
    /// hook, hooks.
    #[command(flatten)]
    Local(LocalCommand),
    /// Gateway messaging and tasks: connect, send, ack, delegate, accept, progress, needs-input,
    /// complete, fail, reject, answer, cancel.
    #[command(flatten)]
    Agent(AgentCommand),
    /// Receive for an agent: hold the gateway connection, persist every envelope, import it into
    /// local delivery, ack (one sidecar per agent).
    Sidecar(SidecarArgs),
    /// The timeline of a task, conversation or message.
    Trace(TraceArgs),
    /// The gateway's directory: list agents, show a card.
    Agents(AgentsArgs),
    /// This agent's card: show it, edit it.
    #[command(subcommand)]
    Card(CardArgs),
    /// Topic subscriptions of this agent.
    #[command(subcommand)]
    Topic(TopicArgs),
    /// Check this agent's connection: gateway, versions, clock, credential, key, sidecar.
    Doctor(DoctorArgs),
    /// Exchange messages with other organisations through a git repository (conforms to agentshare 0.1 Core).
    Share(ShareArgs),
    /// The MCP server over stdio (send, read_inbox, reply, delegate, task, trace, directory,
    /// with push), and its install into a harness's MCP configuration.
    Mcp(McpArgs),
    /// Work this agent's delegated tasks headless: drive a harness (Claude Code, Codex, OpenCode, or any command)
    /// through accept, heartbeats, questions, cancels and results.
    Work(WorkArgs),
    /// Print a shell completion script.
    #[command(
        after_help = "Examples:\n  agentbus completions bash > ~/.local/share/bash-completion/completions/agentbus\n  agentbus completions zsh > \"${fpath[1]}/_agentbus\"\n  agentbus completions fish > ~/.config/fish/completions/agentbus.fish"
    )]
    Completions(CompletionsArgs),
    /// The tasks this agent is a party of, as requester or worker, with the verbs that apply now.
    #[command(
        after_help = "Examples:\n  agentbus tasks\n  agentbus tasks --as worker --state submitted\n  agentbus --json tasks --as requester --state in_progress"
    )]
    Tasks(TasksArgs),
    /// The messages this agent sent, newest first, with each recipient's delivery state
    /// (persisted, leased, acknowledged, shown, answered).
    #[command(after_help = "Examples:\n  agentbus sent\n  agentbus --json sent --limit 5")]
    Sent(SentArgs),
    /// People of the gateway: add, list and remove users (an admin's or the operator's token).
    #[command(subcommand)]
    Users(UsersArgs),
    /// Integration tokens of the users you administer: issue, list, revoke.
    #[command(subcommand)]
    Tokens(TokensArgs),
    /// Search what you may read: the gateway, this machine's messages and a git share, with one
    /// query syntax.
    Search(SearchArgs),
}

/// The commands that act as an agent profile, and so take `--profile` (a space separates a
/// subcommand; the option then holds for everything below it). Other commands do not show it.
const PROFILE_COMMANDS: &[&str] = &[
    "connect",
    "send",
    "ack",
    "delegate",
    "accept",
    "progress",
    "needs-input",
    "complete",
    "fail",
    "reject",
    "answer",
    "cancel",
    "tell",
    "ask",
    "reply",
    "inbox",
    "listen",
    "sidecar",
    "trace",
    "agents",
    "card",
    "topic",
    "doctor",
    "mcp",
    "work",
    "keys list",
    "keys rotate",
    "keys revoke",
    "tasks",
    "sent",
    "search",
];

/// The option's id in the parsed matches.
const PROFILE: &str = "profile";

fn profile_arg() -> Arg {
    Arg::new(PROFILE)
        .long(PROFILE)
        .env("AGENTBUS_PROFILE")
        .global(true)
        .value_name("NAME")
        .help("The agent profile to act as (see `agentbus connect`); default: the only one saved")
}

/// The whole command line: the derived parser with `--profile` on the commands that use it.
/// Completions are generated from this too, so they offer `--profile` exactly where it applies.
pub fn command() -> clap::Command {
    // Before the subcommand (`agentbus --profile x reply …`, as frames suggest) it stays
    // accepted, and hidden: help pages show it on the commands where it means something.
    let mut cmd = Cli::command().arg(
        Arg::new(PROFILE)
            .long(PROFILE)
            .value_name("NAME")
            .hide(true),
    );
    for path in PROFILE_COMMANDS {
        cmd = add_profile(cmd, &path.split(' ').collect::<Vec<_>>());
    }
    with_candidates(cmd)
}

/// Completion candidates known only at run time, on every command that takes them: profile names
/// for `--profile`, known addresses for a recipient (`send`/`delegate` `TO`, `tell`/`ask`).
fn with_candidates(cmd: clap::Command) -> clap::Command {
    use crate::commands::completions as c;
    use clap_complete::ArgValueCandidates;
    cmd.mut_args(|a| match a.get_id().as_str() {
        PROFILE => a.add(ArgValueCandidates::new(c::profile_names)),
        "to" if a.is_positional() => a.add(ArgValueCandidates::new(c::addresses)),
        "address" if a.is_positional() => a.add(ArgValueCandidates::new(c::local_addresses)),
        _ => a,
    })
    .mut_subcommands(with_candidates)
}

fn add_profile(cmd: clap::Command, path: &[&str]) -> clap::Command {
    match path {
        [] => cmd.arg(profile_arg()),
        [first, rest @ ..] => cmd.mut_subcommand(*first, |sub| add_profile(sub, rest)),
    }
}

/// Parses the process's arguments (exiting as clap does on a usage error): the command and the
/// `--profile` given to it, if any.
pub fn parse() -> (Cli, Option<String>) {
    let matches = command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    (cli, profile_of(&matches))
}

/// The deepest `--profile` value along the chosen subcommands.
fn profile_of(m: &ArgMatches) -> Option<String> {
    let here = m.try_get_one::<String>(PROFILE).ok().flatten().cloned();
    m.subcommand().and_then(|(_, sub)| profile_of(sub)).or(here)
}

#[cfg(test)]
mod tests {
    /// Help is for the person at the terminal: tracker and checklist ids (`LM-80`) mean nothing
    /// there, however useful they are in the code.
    #[test]
    fn no_help_names_a_checklist_id() {
        fn walk(cmd: &mut clap::Command, path: &str, found: &mut Vec<String>) {
            let help = cmd.render_long_help().to_string();
            for word in help.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-')) {
                let id = ["LM-", "WP-", "AS-"]
                    .iter()
                    .find_map(|p| word.strip_prefix(p))
                    .is_some_and(|n| n.starts_with(|c: char| c.is_ascii_digit()));
                if id {
                    found.push(format!("{path}: {word}"));
                }
            }
            for sub in cmd.get_subcommands_mut() {
                let name = format!("{path} {}", sub.get_name());
                walk(sub, &name, found);
            }
        }
        let mut found = Vec::new();
        walk(&mut super::command(), "agentbus", &mut found);
        assert!(found.is_empty(), "{found:?}");
    }
}
