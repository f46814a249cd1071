//! The git share transport: AgentBus's implementation of agentshare 0.1 Core
//! (`shared/specs/agentshare-0.1.md`, paths read as in `shared/specs/README.md`).
//!
//! Fleets that share nothing but a git repository exchange immutable markdown files with YAML
//! frontmatter. This crate writes them exactly, reads them leniently, derives live state (threads,
//! knowledge) from the files, checks a share and its history for conformance, and moves it all
//! through the `git` binary without ever force-pushing, editing or deleting a pushed file.
//!
//! Module map:
//! - [`ident`]: identifiers and [`ShareAddress`] (`share:<operator>/<agent>`);
//! - [`naming`]: §1/§3/§4/§6/§7 names and paths; [`hash`]: §3.2 `content_hash`;
//! - [`frontmatter`]: the lenient reader and exact writer (§3, §3.1, §6, §9);
//! - [`registry`]: `operators.yaml` (§8); [`audit`]: the audit log (§7);
//! - [`git`]: the subprocess wrapper and checkout lock; [`share`]: a checkout, its identity, a
//!   snapshot of its files; [`ops`]: every write and `sync`;
//! - [`init`]: a new share, on the branch its remote's clones check out;
//! - [`views`]: inbox, threads, knowledge and the inbound messages for local delivery;
//! - [`check`]: the conformance checker; [`doctor`]: the §11 security warnings.

pub mod audit;
pub mod check;
pub mod doctor;
pub mod error;
pub mod frontmatter;
pub mod git;
pub mod hash;
pub mod ident;
pub mod init;
pub mod naming;
pub mod ops;
pub mod registry;
pub mod search;
pub mod share;
pub mod views;

pub use error::ShareError;
pub use ident::ShareAddress;
pub use ops::{JoinRequest, PublishRequest, SendRequest, SyncReport, WriteOptions, Written};
pub use share::{Identity, Share, Snapshot};
pub use views::{InboundMessage, inbound_messages};
