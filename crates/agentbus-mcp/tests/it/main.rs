//! Tests of the MCP server: the tool definitions and their size, every tool's answers and
//! refusals (cases under `tests/data/calls/`), the harness configurations (cases under
//! `tests/data/install/`), and the wire: both lifecycles and both pushes, over an in-memory pipe.
//! Time moves only through a `ManualClock`.

#![allow(clippy::unwrap_used, clippy::new_without_default, missing_docs)]

mod calls;
mod install;
mod tools;
mod waits;
mod wire;

use std::path::PathBuf;
use std::sync::Arc;

use agentbus_local::hook::Harness;
use agentbus_local::{Address, Kind, Outgoing, Sender, Store};
use agentbus_mcp::Session;
use agentbus_protocol::timestamp::Timestamp;
use agentbus_runtime::ManualClock;

/// 2026-11-30T12:00:00Z.
pub const T0: i64 = 1_764_504_000_000;

/// The session every fixture's server acts as.
pub const SID: &str = "s1";

/// The agent a session is bound to for gateway messages.
pub const REVIEWER: &str = "agent://acme/backend/reviewer";

/// A local store in a temporary directory on a manual clock, with the session [`SID`] known.
pub struct Fixture {
    pub dir: tempfile::TempDir,
    pub store: Store,
    pub clock: ManualClock,
}

impl Fixture {
    pub fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(Timestamp(T0));
        let store = Store::open(dir.path(), Arc::new(clock.clone()));
        std::fs::write(dir.path().join("node"), "n0de1\n").unwrap();
        store.register(SID, "mcp", None, None).unwrap();
        Fixture { dir, store, clock }
    }

    /// The session as the tools see it: no agent connected, no share.
    pub fn session(&self) -> Session {
        Session {
            store: self.store.clone(),
            id: SID.into(),
            harness: Harness::Claude,
            name: None,
            agent: None,
            share: None,
        }
    }

    /// A gateway message for the agent `REVIEWER` the session is bound to (binding it first),
    /// imported as the receive path imports one; returns its local id. `kind` is its type
    /// (`agentbus.message.v1`, `agentbus.task.request.v1`, …).
    pub fn from_gateway(&self, msg_id: &str, kind: &str, task: Option<&str>, text: &str) -> String {
        use agentbus_local::{ImportOutcome, InboundMessage};
        use agentbus_protocol::frame::{Transport, Verified};
        self.store.bind(SID, Some(REVIEWER)).unwrap();
        self.clock.advance_ms(1);
        let msg = InboundMessage {
            transport: Transport::Gateway,
            transport_id: msg_id.into(),
            from: "agent://acme/frontend/builder".into(),
            kind: kind.into(),
            conversation: Some("cnv_01J9ZK6Q8R2M3N4P5Q6R7S8T9V".into()),
            subject: None,
            body: text.into(),
            verified: Verified::True,
            attachments: vec![],
            reply_command: Some(format!("agentbus reply {msg_id} \"<your answer>\"")),
            sent: Timestamp(T0),
            recipient: REVIEWER.into(),
            message_id: None,
            task: task.map(Into::into),
            late: false,
            expires_ms: None,
            held: None,
            priority: agentbus_local::Priority::Normal,
        };
        match self.store.import(&msg).unwrap() {
            ImportOutcome::Stored { id } => id,
            other => panic!("not stored: {other:?}"),
        }
    }

    /// The engineer sends `kind` with `text` to the session.
    pub fn from_engineer(&self, kind: Kind, text: &str) {
        self.clock.advance_ms(1);
        let out = Outgoing {
            from: Sender {
                by: "engineer".into(),
                name: None,
                harness: None,
            },
            to: Address::Session {
                session: SID.into(),
                node: self.store.node().unwrap(),
            },
            kind,
            text: text.into(),
            re: None,
        };
        self.store.send(&out, false).unwrap();
    }
}

/// `tests/data/<area>`.
pub fn data(area: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(area)
}

/// A runtime for one test.
pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}
