//! The AgentBus MCP server (`agentbus mcp`): for harnesses and frameworks that reach the world
//! only through MCP tools, a small tool set that covers the product, the session's inbox as a
//! resource with push notifications, and the server's entry in each harness's MCP configuration.
//! `docs/mcp.md` is the user-facing description.
//!
//! - [`tools`]: the definitions (`tools.json`, under 3,000 tokens) and what each tool does for
//!   the session, through the same library functions the CLI calls;
//! - [`error`]: refusals as tool results (`isError`, the `AB-` code, cause and fix);
//! - [`server`]: the rmcp server (both the `initialize` lifecycle and 2026-07-28's);
//! - [`push`]: arrival → `notifications/resources/updated` and Claude Code's channel;
//! - [`install`]: `agentbus mcp install|uninstall claude|codex|opencode`.
//!
//! stdout is the protocol: nothing here prints to it; diagnostics go to stderr.

pub mod error;
pub mod install;
pub mod push;
pub mod server;
pub mod tools;

pub use error::ToolError;
pub use server::{Options, ServeError, Server, serve_stdio};
pub use tools::{DEFINITIONS, Session};

/// The session's inbox as a resource: subscribed to for push, read for what waits.
pub const INBOX_URI: &str = "agentbus://inbox";
