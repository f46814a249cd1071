//! The command line, as clap sees it. Each area's arguments are defined next to its command module.

use clap::{Parser, Subcommand};

use crate::commands::{
    agent::AgentCommand, directory::AgentsArgs, directory::CardArgs, directory::TopicArgs,
    doctor::DoctorArgs, envelope::EnvelopeArgs, explain::ExplainArgs, gateway::GatewayArgs,
    keys::KeysArgs, local::LocalCommand, mcp::McpArgs, share::ShareArgs, sidecar::SidecarArgs,
    trace::TraceArgs,
};

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

    /// The agent profile to act as (see `agentbus connect`); default: the only one saved.
    #[arg(long, global = true, env = "AGENTBUS_PROFILE")]
    pub profile: Option<String>,

    #[command(subcommand)]
    pub command: Command,
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
}
