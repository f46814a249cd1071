//! Gateway integration tests: a real gateway on a loopback port, a real SQLite file, real HTTP.
//! Time is a `ManualClock`; the reaper is driven by hand, so no test sleeps for a timer.
//!
//! With `AGENTBUS_TEST_STORE=postgres` the same tests run on PostgreSQL instead: each gateway
//! gets its own database on a throwaway cluster (`agentbus_testkit::gateway::store_for`);
//! `./scripts/test` runs the suite both ways.

#![allow(clippy::unwrap_used)]

mod a2a;
mod bad_input;
mod bad_requests;
mod blobs;
mod bodies;
mod conversations;
mod delivery;
mod identity;
mod isolation;
mod meta;
mod openapi;
mod people;
mod policy;
mod publish;
mod receipts;
mod roles;
mod s3;
mod search;
mod service;
mod settings;
mod support;
mod tasks;
mod telemetry;
