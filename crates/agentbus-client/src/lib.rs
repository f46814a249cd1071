//! The typed client of an AgentBus gateway, and the agent's state on this machine.
//!
//! - [`agent`]: the agent's verbs (send, reply, ack, delegate, task actions, trace, waiting),
//!   shared by the CLI and the MCP server;
//! - [`connect`]: connecting this machine to a gateway as an agent (a profile and its key);
//! - [`doctor`]: the checks of an agent's connection, as findings;
//! - [`bridge`]: the git share's messages imported into local delivery;
//! - [`profile`]: saved connections (one per agent), the state directory;
//! - [`keystore`]: where each profile's private keys live: the OS keychain, or 0600 files;
//! - [`http`]: the gateway's HTTP API as typed calls ([`http::Gateway`]);
//! - [`compose`]: building and signing the envelopes the CLI sends;
//! - [`inbox`]: the agent's local inbox of received envelopes (unique on `id`), its cursor and
//!   attachments folder;
//! - [`receive`]: the one receive path (long-poll, verify, download, persist, import into local
//!   delivery, then ack) that the sidecar and `send --wait` share.
//!
//! The binary does the talking to people; this crate returns [`ClientError`] values.

pub mod agent;
pub mod bridge;
pub mod compose;
pub mod connect;
pub mod doctor;
pub mod error;
pub mod http;
pub mod inbox;
pub mod keystore;
pub mod profile;
pub mod receive;
pub mod short;
pub mod suggest;

pub use agent::Agent;
pub use error::{ClientError, Result};
pub use http::Gateway;
pub use inbox::AgentInbox;
pub use keystore::{KeyStore, KeyStoreKind};
pub use profile::Profile;

/// This client's version, sent as `agentbus-sidecar-version` on every request (§11.4).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
