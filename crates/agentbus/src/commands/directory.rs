//! `agentbus agents`, `card edit`, `topic …`: the gateway's directory, this agent's card and its
//! topic subscriptions.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde_json::{Map, Value, json};

use agentbus_api::Card;
use agentbus_protocol::text::{for_terminal, for_terminal_line};

use super::profile::{Ctx, json_object};
use crate::cli::Globals;
use crate::error::{CliError, CliResult};
use crate::printer::Printer;

/// Arguments of `agents`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  agentbus agents\n  agentbus agents show reviewer\n  agentbus --json agents show agent://acme/backend/reviewer"
)]
pub struct AgentsArgs {
    #[command(subcommand)]
    action: Option<AgentsAction>,
}

/// `agents show`.
#[derive(Debug, Subcommand)]
enum AgentsAction {
    /// Print one agent's card: by agt_ id, address, name or alias.
    #[command(after_help = "Example:\n  agentbus agents show reviewer")]
    Show {
        /// agt_ id, agent://… address, or the name or alias of an agent of the profile's
        /// workspace.
        agent: String,
    },
}

/// `card …`.
#[derive(Debug, Subcommand)]
pub enum CardArgs {
    /// Change this agent's card (§10); fields not given stay as they are.
    #[command(
        after_help = "Examples:\n  agentbus card edit --display-name \"Backend Code Reviewer\" --capability code.review@1 --tag go\n  agentbus card edit --set '{\"harness\": {\"kind\": \"claude\"}}'"
    )]
    Edit(CardEditArgs),
    /// Print this agent's card.
    #[command(after_help = "Example:\n  agentbus card show")]
    Show,
}

/// Arguments of `card edit`.
#[derive(Debug, Args)]
pub struct CardEditArgs {
    /// The name people see.
    #[arg(long)]
    display_name: Option<String>,
    /// What the agent does.
    #[arg(long)]
    description: Option<String>,
    /// A capability as name[@major] (repeatable; replaces the list).
    #[arg(long = "capability", value_name = "NAME[@MAJOR]")]
    capabilities: Vec<String>,
    /// A tag (repeatable; replaces the list).
    #[arg(long = "tag")]
    tags: Vec<String>,
    /// Who may see it: private, workspace, tenant, public.
    #[arg(long, value_parser = ["private", "workspace", "tenant", "public"])]
    visibility: Option<String>,
    /// Any other card fields, as a JSON object (e.g. full capability objects).
    #[arg(long, value_name = "JSON")]
    set: Option<String>,
}

/// `topic …`.
#[derive(Debug, Subcommand)]
pub enum TopicArgs {
    /// Subscribe this agent to a topic of its workspace (created on first subscription).
    #[command(after_help = "Example:\n  agentbus topic subscribe builds")]
    Subscribe {
        /// The topic's name.
        name: String,
    },
    /// Unsubscribe.
    #[command(after_help = "Example:\n  agentbus topic unsubscribe builds")]
    Unsubscribe {
        /// The topic's name.
        name: String,
    },
    /// The topics of this agent's workspace.
    #[command(after_help = "Example:\n  agentbus topic list")]
    List,
}

/// Runs `agents`.
pub fn agents(args: AgentsArgs, globals: &Globals, printer: &Printer) -> CliResult {
    let ctx = Ctx::open(globals, printer)?;
    match args.action {
        None => {
            let list = ctx.block(ctx.gw.agents())?;
            if printer.is_json() {
                printer.json(&json!({"agents": list}))?;
            } else if list.is_empty() {
                printer.line("no agents are visible to you")?;
            } else {
                for a in &list {
                    // Every field is a card's (a peer's words): each stays on its row, so a
                    // display name cannot add a row of its own.
                    let caps: Vec<_> = a
                        .capabilities
                        .iter()
                        .filter_map(|c| c["name"].as_str().or(c.as_str()))
                        .map(for_terminal_line)
                        .collect();
                    printer.line(&format!(
                        "{:<44} {:<8} {}{}",
                        for_terminal_line(&a.address),
                        for_terminal_line(a.presence().unwrap_or("?")),
                        for_terminal_line(&a.display_name),
                        if caps.is_empty() {
                            String::new()
                        } else {
                            format!("  [{}]", caps.join(", "))
                        }
                    ))?;
                }
            }
        }
        Some(AgentsAction::Show { agent }) => {
            let card = if agent.starts_with("agt_") {
                ctx.block(ctx.gw.agent(&agent))?
            } else {
                let agent = ctx.address(&agent)?;
                let list = ctx.block(ctx.gw.agents())?;
                list.into_iter()
                    .find(|a| a.address == agent)
                    .ok_or_else(|| {
                        CliError::input(format!("no agent {agent:?} is visible to you"))
                            .fix("run `agentbus agents` to list the directory")
                    })?
            };
            if printer.is_json() {
                printer.json(&json!(card))?;
            } else {
                printer.line(&card_text(&card))?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A card for people. A card is its agent's own words: each one-line field stays on its line, and
/// the description, which may hold several lines, has each of them indented under its label, so
/// no field can pass for a line of its own (a key, a capability).
pub fn card_text(c: &Card) -> String {
    let s = |v: &str| for_terminal_line(v).into_owned();
    let mut out = format!(
        "{}  ({})\n  name:        {}\n  display:     {}\n  description: {}\n  visibility:  {}\n  presence:    {} (queue {})\n",
        s(&c.address),
        s(&c.id),
        s(&c.name),
        s(&c.display_name),
        under_label(&c.description),
        s(&c.visibility),
        s(c.presence().unwrap_or("")),
        c.status
            .get("queue_depth")
            .and_then(Value::as_u64)
            .unwrap_or(0),
    );
    for cap in &c.capabilities {
        out.push_str(&format!(
            "  capability:  {} v{}\n",
            for_terminal_line(cap["name"].as_str().unwrap_or("?")),
            for_terminal_line(cap["version"].as_str().unwrap_or("?"))
        ));
    }
    for k in &c.keys {
        let state = match &k.revoked_at {
            None => format!("expires {}", s(&k.expires_at)),
            Some(at) => format!("revoked {}", s(at)),
        };
        out.push_str(&format!("  key:         {} {state}\n", s(&k.id)));
    }
    out.trim_end().to_owned()
}

/// The width of a card line's label (`  description: `): a value's further lines start there.
const LABEL_WIDTH: usize = 15;

/// A multi-line value after its label: terminal controls shown, and every line after the first
/// indented to the value's column, deeper than any line the card itself writes.
fn under_label(text: &str) -> String {
    let clean = for_terminal(text);
    let mut lines = clean.split('\n');
    let mut out = lines.next().unwrap_or("").to_owned();
    for line in lines {
        out.push('\n');
        out.push_str(&" ".repeat(LABEL_WIDTH));
        out.push_str(line);
    }
    out
}

/// Runs `card`.
pub fn card(args: CardArgs, globals: &Globals, printer: &Printer) -> CliResult {
    let ctx = Ctx::open(globals, printer)?;
    let card = match args {
        CardArgs::Show => ctx.block(ctx.gw.agent(&ctx.profile.agent_id))?,
        CardArgs::Edit(e) => {
            let mut patch = match e.set.as_deref() {
                Some(j) => match json_object("--set", j)? {
                    Value::Object(m) => m,
                    _ => Map::new(),
                },
                None => Map::new(),
            };
            if let Some(d) = e.display_name {
                patch.insert("display_name".into(), json!(d));
            }
            if let Some(d) = e.description {
                patch.insert("description".into(), json!(d));
            }
            if !e.capabilities.is_empty() {
                let caps: Vec<Value> = e
                    .capabilities
                    .iter()
                    .map(|c| {
                        let (name, major) = c.split_once('@').unwrap_or((c, "1"));
                        json!({"name": name, "version": major})
                    })
                    .collect();
                patch.insert("capabilities".into(), json!(caps));
            }
            if !e.tags.is_empty() {
                patch.insert("tags".into(), json!(e.tags));
            }
            if let Some(v) = e.visibility {
                patch.insert("visibility".into(), json!(v));
            }
            if patch.is_empty() {
                return Err(CliError::new(crate::error::ErrorKind::Usage, "nothing to change")
                    .fix("pass at least one of --display-name, --description, --capability, --tag, --visibility, --set"));
            }
            ctx.block(
                ctx.gw
                    .patch_agent(&ctx.profile.agent_id, Value::Object(patch)),
            )?
        }
    };
    if printer.is_json() {
        printer.json(&json!(card))?;
    } else {
        printer.line(&card_text(&card))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs `topic`.
pub fn topic(args: TopicArgs, globals: &Globals, printer: &Printer) -> CliResult {
    let ctx = Ctx::open(globals, printer)?;
    match args {
        TopicArgs::Subscribe { name } => {
            let v = ctx.block(ctx.gw.subscribe(&name))?;
            printer.either(
                &json!(v),
                &format!("{} is subscribed to {name}", ctx.profile.address),
            )?;
        }
        TopicArgs::Unsubscribe { name } => {
            let v = ctx.block(ctx.gw.unsubscribe(&name))?;
            printer.either(
                &json!(v),
                &format!("{} is no longer subscribed to {name}", ctx.profile.address),
            )?;
        }
        TopicArgs::List => {
            let v = ctx.block(ctx.gw.topics())?;
            if printer.is_json() {
                printer.json(&json!(v))?;
            } else {
                if v.topics.is_empty() {
                    printer.line("no topics in this workspace")?;
                }
                for t in &v.topics {
                    printer.line(&format!("{}  ({} subscribers)", t.name, t.subscribers))?;
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
