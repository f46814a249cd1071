//! Headless workers: `agentbus work` takes the task requests an agent's card admits
//! and works each one by driving a harness without a terminal.
//!
//! - [`worker`]: the loop. It receives through the client's one receive path
//!   ([`agentbus_client::agent::Feed`]), sends every lifecycle message through
//!   [`agentbus_client::Agent::act_with`] (accept, progress heartbeats, needs-input, result), routes
//!   the requester's answers and cancels to the running turn, and fails what a previous run left in
//!   flight (§6, §5.7a, §6.2).
//! - [`adapter`]: what a harness adapter is (events out, controls in) and the task as it reaches
//!   the harness ([`job::Job`], framed as data per §13.1).
//! - [`claude`]: Claude Code's headless stream-json mode; [`command`]: any command (task JSON on
//!   stdin, result JSON on stdout, progress lines on stderr).

pub mod adapter;
pub mod claude;
pub mod codex;
pub mod command;
pub mod error;
pub mod job;
pub mod opencode;
pub mod worker;

pub use adapter::{Adapter, Answer, Control, Event, Finish, Running};
pub use error::WorkError;
pub use job::{Job, Usage};
pub use worker::{Settings, Worker};
