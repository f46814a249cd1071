//! AgentBus Wire Protocol v1, as a library with no IO.
//!
//! Everything that builds, signs, verifies, validates or renders an envelope lives here, so the
//! gateway, the sidecar, local delivery and the git share all share one reading of the spec
//! (`shared/specs/agentbus-wire-protocol-v1.txt`). This crate reads no clock, no file, no network
//! and no entropy: callers pass time and randomness in, which keeps every function deterministic.
//!
//! Module map:
//! - [`json`]: the strict I-JSON parser for signed input; [`jcs`]: RFC 8785 canonicalisation.
//! - [`signing`]: Ed25519 keys, the `sig` attribute, envelope signing and strict verification.
//! - [`envelope`]: the attribute model and §2 validation; [`schema`]: §5's types and JSON Schemas.
//! - [`ids`], [`address`], [`timestamp`]: identifiers, §4.1 addresses, RFC 3339 instants.
//! - [`errors`]: the `AB-` catalogue every failure maps into.
//! - [`task`]: the §6 state machine and timers; [`frame`]: §13.1 framing for harnesses.
//! - [`cloudevents`]: the lossless projection to CloudEvents-valid attribute names.
//! - [`text`]: foreign text made safe for a terminal or a shell command line.
//! - [`blobseal`]: blob content sealed in chunks, as it rests on disk or in an object store (§9).

pub mod address;
pub mod blobseal;
pub mod cloudevents;
pub mod envelope;
pub mod errors;
pub mod frame;
pub mod ids;
pub mod jcs;
pub mod json;
pub mod schema;
pub mod seal;
pub mod search;
pub mod signing;
pub mod task;
pub mod text;
pub mod timestamp;
pub mod tracelink;

pub use errors::Code;
