//! Test support shared by the workspace's tests and benches, as a dev-dependency (never a
//! `#[path]` include):
//!
//! - [`pg`]: a throwaway PostgreSQL cluster, one fresh database per test;
//! - [`gateway`]: a real gateway in the test process on a loopback port, with a `ManualClock`,
//!   agents with keys, and calls over real HTTP;
//! - [`gwproc`]: the real `agentbus gateway` process, started, read and stopped;
//! - [`envelope`]: envelope drafts and signing with an agent's registered key;
//! - `console` (feature `console`): the gateway with its console mounted, and console sessions
//!   driven as a browser would, for the console's tests and benches.
//!
//! # PostgreSQL only when asked
//!
//! The PostgreSQL cases run when the run asks for them: `AGENTBUS_TEST_PG=1`, or
//! `AGENTBUS_TEST_STORE=postgres` (which also moves the gateway's suite onto PostgreSQL), or in CI
//! (`CI` set, as CI services do and `.ci/run` is run). Otherwise each returns early and the first
//! one in a test binary prints one line saying how to run them, so `cargo test` passes on a machine
//! without PostgreSQL. When asked for, a missing `initdb` fails the test with the package to
//! install. `./scripts/test` and `.ci/run` ask for them. See [`pg::wanted`].
//!
//! # The receiver's fault seam
//!
//! This crate turns on `agentbus-client`'s `fault-injection` feature, so any crate that has the
//! kit as a dev-dependency gets a receiver that can be made to fail at a chosen step
//! (`agentbus_client::receive::Fault`), and a binary built for its tests honours
//! `AGENTBUS_FAULT`. Builds without the kit (every release build) have neither.

// Test support fails by panicking, with the reason in the message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[cfg(feature = "console")]
pub mod console;
pub mod envelope;
pub mod gateway;
pub mod gwproc;
pub mod pg;

/// The strict in-memory store (`agentbus_store::memory`): orders the trait does not promise vary,
/// rows are copies, failures can be injected.
pub use agentbus_store::MemoryStore;

use agentbus_protocol::signing::SigningKey;

/// An agent registered on a test gateway, with its bearer token and signing key.
#[derive(Clone)]
pub struct Agent {
    /// Its `agt_` id.
    pub id: String,
    /// Its address.
    pub address: String,
    /// Its bearer token.
    pub token: String,
    /// Its signing key.
    pub key: SigningKey,
    /// The key's id.
    pub key_id: String,
}

impl Agent {
    /// The agent a `POST /v1/agents` answer (`201`) describes, with the key it registered.
    pub fn from_registration(v: &serde_json::Value, key: SigningKey) -> Agent {
        let text = |x: &serde_json::Value| x.as_str().expect("a registration field").to_owned();
        Agent {
            id: text(&v["agent"]["id"]),
            address: text(&v["agent"]["address"]),
            token: text(&v["token"]),
            key,
            key_id: text(&v["key"]["id"]),
        }
    }
}

/// A reqwest client; the workspace builds reqwest without a rustls provider, so `ring` is
/// installed first (a second install is a harmless error).
pub fn http_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}
