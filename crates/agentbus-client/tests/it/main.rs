//! Client integration tests: the client against a real gateway in the test process
//! (`agentbus_testkit::gateway`), on a `ManualClock`, with the agent's inbox and local delivery in
//! a temporary folder.

// Tests fail by panicking.
#![allow(clippy::unwrap_used, missing_docs)]

mod receive;
