//! Tests of the local store and delivery, named after the checklist ids they prove (`lm_…`).
//! Cases live under `tests/data/`; time moves only through a `ManualClock`.

#![allow(clippy::unwrap_used, clippy::new_without_default, missing_docs)]

mod bounds;
mod delivery;
mod end_of_turn;
mod frames;
mod harness_tables;
mod hook_formats;
mod imports;
mod lines;
mod pacing;
mod search;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentbus_local::hook::{Harness, HookAnswer, HookEnv, HookEvent, parse_event};
use agentbus_local::send::Sent;
use agentbus_local::{Address, Kind, Outgoing, SendError, Sender, Store};
use agentbus_protocol::timestamp::Timestamp;
use agentbus_runtime::ManualClock;

/// 2026-11-30T12:00:00Z.
pub const T0: i64 = 1_764_504_000_000;

/// A store in a temporary directory on a manual clock.
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
        // A fixed node keeps ids and snapshots stable.
        std::fs::write(dir.path().join("node"), "n0de1\n").unwrap();
        Fixture { dir, store, clock }
    }

    pub fn node(&self) -> String {
        self.store.node().unwrap()
    }

    pub fn session(&self, id: &str) -> Address {
        Address::Session {
            session: id.to_owned(),
            node: self.node(),
        }
    }

    /// Sends a tell (or another kind) and returns the outcome.
    pub fn send(
        &self,
        from: &Sender,
        to: &Address,
        kind: Kind,
        text: &str,
    ) -> Result<Sent, SendError> {
        self.store.send(
            &Outgoing {
                from: from.clone(),
                to: to.clone(),
                kind,
                text: text.to_owned(),
                re: None,
            },
            false,
        )
    }

    pub fn tell(&self, from: &Sender, to: &Address, text: &str) -> String {
        self.send(from, to, Kind::Tell, text).unwrap().message.id
    }

    /// Runs the hook for `sid` with the event file `name` of `tests/data/hook-events/`.
    pub fn hook(&self, harness: Harness, name: &str, sid: &str) -> (HookEvent, HookAnswer) {
        let ev = event(harness, name, sid);
        let answer = self.store.hook(&ev, &HookEnv::default()).unwrap();
        (ev, answer)
    }

    /// A session's first event: it becomes known now.
    pub fn start(&self, sid: &str) {
        self.hook(Harness::Claude, "claude-start.json", sid);
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.store.log_path()).unwrap_or_default()
    }
}

pub fn engineer() -> Sender {
    Sender {
        by: "engineer:ada@example.com".into(),
        name: None,
        harness: None,
    }
}

pub fn session(id: &str) -> Sender {
    Sender {
        by: id.into(),
        name: None,
        harness: Some("claude".into()),
    }
}

pub fn data(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(rel)
}

/// An event file with its session id set.
pub fn event(harness: Harness, name: &str, sid: &str) -> HookEvent {
    let text = std::fs::read_to_string(data(&format!("hook-events/{name}"))).unwrap();
    parse_event(harness, text.replace("SID", sid).as_bytes()).unwrap()
}

/// A message line written by hand, as another node or a forger would write it, with its id.
pub fn crafted(
    kind: Kind,
    node: &str,
    by: &str,
    to: &str,
    ms: i64,
    text: &str,
) -> agentbus_local::Message {
    let mut m = agentbus_local::Message {
        v: 1,
        id: String::new(),
        kind,
        node: node.into(),
        by: by.into(),
        name: None,
        harness: None,
        to: to.into(),
        ms,
        text: text.into(),
        re: None,
        via: None,
    };
    m.id = agentbus_local::line::message_id(&m);
    m
}

/// Replaces the log with `lines`.
pub fn write_log(f: &Fixture, lines: &[&agentbus_local::Message]) {
    let body: String = lines
        .iter()
        .map(|m| serde_json::to_string(m).unwrap() + "\n")
        .collect();
    std::fs::write(f.store.log_path(), body).unwrap();
}
