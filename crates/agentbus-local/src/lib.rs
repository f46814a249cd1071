//! Local session messaging: sessions of Claude Code, Codex or OpenCode on one machine tell and ask
//! each other, and are paused or resumed by the engineer, through a file store that needs no
//! server; and every message that reaches the machine, from any transport, reaches the right
//! session through one path: its harness's hook, once, framed as data from a peer.
//!
//! The behaviour follows `shared/specs/local-messages-module.txt` (cited as "LM: <item>") and the
//! checklist's LM- items and G-LM- resolutions; `docs/local.md` is the user-facing description.
//!
//! Module map:
//! - [`consts`]: every number (G-LM-1), with its reason.
//! - [`address`]: addresses, parsed in one place; [`line`]: the versioned JSONL line format and
//!   the checks every line passes on read; [`redact`]: credentials out before storing.
//! - [`store`]: the directory, the locked writer, the talk mark; [`bound`]: TTL and byte bounds;
//!   [`pace`]: pacing windows; [`send`]: send, ack, import, resolve; [`session`]: presence and
//!   agent bindings.
//! - [`deliver`]: what a session or the engineer is shown and its framing; [`hook`]: the hook's
//!   flow (claims, Seen, stamps), the per-harness adapters, and [`Store::deliver`], the same
//!   delivery for callers outside a hook (an MCP server); [`shown`]: records of gateway messages
//!   shown, which the sidecar turns into receipts; [`view`]: inbox and sessions; [`install`]:
//!   adding the hook to each harness's settings; [`trust`]: Codex's trust of our hook entries;
//!   [`offline`]: OpenCode's start-up with our plugin and no npm registry.

pub mod address;
pub mod bound;
pub mod consts;
pub mod deliver;
pub mod hook;
pub mod install;
pub mod line;
pub mod offline;
pub mod pace;
pub mod redact;
pub mod search;
pub mod send;
pub mod session;
pub mod shown;
pub mod store;
pub mod trust;
pub mod view;

pub use address::Address;
pub use hook::{Delivery, Harness, HookAnswer, HookEnv, HookEvent, Offer, Surface};
pub use line::{Kind, Line, Message, Priority, Seen};
pub use send::{ImportError, ImportOutcome, InboundMessage, Outgoing, SendError, Sender};
pub use store::{Store, StoreError};
