//! Gateway integration tests: a real gateway on a loopback port, a real SQLite file, real HTTP.
//! Time is a `ManualClock`; the reaper is driven by hand, so no test sleeps for a timer.

#![allow(clippy::unwrap_used)]

mod blobs;
mod delivery;
mod identity;
mod meta;
mod publish;
mod service;
mod settings;
mod support;
mod tasks;
