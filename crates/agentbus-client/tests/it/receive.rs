//! The receiver never acks before durable (§8): a delivery is acked only once its copy is in the
//! agent's inbox and handed to local delivery; a failure between that write and the ack, or a
//! crash before the write, costs a redelivery, never a message, and a redelivery is stored once.
//! Failures are injected through the receiver's fault seam (`receive::Step`, which exists only
//! in builds with the test kit).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use agentbus_client::receive::{Receiver, Seam, Step};
use agentbus_client::{AgentInbox, ClientError, Profile};
use agentbus_testkit::Agent;
use agentbus_testkit::gateway::{Harness, signed};

/// Past the test gateway's visibility timeout (30 s): an unacked lease runs out.
const PAST_LEASE_S: i64 = 31;

/// A gateway, a sender, the receiving agent and the folder its client state lives in.
struct Rig {
    h: Harness,
    sender: Agent,
    agent: Agent,
    dir: tempfile::TempDir,
}

impl Rig {
    async fn start() -> Rig {
        let h = Harness::start().await;
        let sender = h.agent("sender").await;
        let agent = h.agent("receiver").await;
        Rig {
            h,
            sender,
            agent,
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn agent_dir(&self) -> PathBuf {
        self.dir.path().join("agent")
    }

    fn local_home(&self) -> PathBuf {
        self.dir.path().join("local")
    }

    /// A receiver for the agent on its folder, as a sidecar process starting would make it.
    fn receiver(&self) -> Receiver {
        let profile = Profile {
            name: "receiver".into(),
            gateway: self.h.url.clone(),
            agent_id: self.agent.id.clone(),
            address: self.agent.address.clone(),
            token: self.agent.token.clone(),
            key_id: self.agent.key_id.clone(),
            key_store: Default::default(),
        };
        let gw = agentbus_client::Gateway::new(&self.h.url, &self.agent.token).unwrap();
        let clock = Arc::new(self.h.clock.clone());
        let local = agentbus_local::Store::open(self.local_home(), clock.clone());
        Receiver::new(gw, profile, AgentInbox::new(self.agent_dir()), local, clock)
    }

    /// Sends one signed message to the agent; answers its id.
    async fn send(&self, text: &str) -> String {
        let env = signed(&self.h, &self.sender, &self.agent.address, text);
        let (status, receipt, _) = self.h.publish(&self.sender, &env).await;
        assert_eq!(status, 202, "{receipt}");
        env["id"].as_str().unwrap().to_owned()
    }
}

/// How many copies of `id` the agent's inbox holds.
fn in_inbox(agent_dir: &Path, id: &str) -> usize {
    if !agent_dir.exists() {
        return 0;
    }
    AgentInbox::new(agent_dir)
        .list()
        .unwrap()
        .iter()
        .filter(|r| r.id() == id)
        .count()
}

/// How many times `id` was handed to local delivery.
fn imported(local_home: &Path, id: &str) -> usize {
    if !local_home.exists() {
        return 0;
    }
    let clock = Arc::new(agentbus_runtime::SystemClock);
    agentbus_local::Store::open(local_home, clock)
        .read()
        .unwrap()
        .iter()
        .filter(|m| m.via.as_ref().is_some_and(|v| v.ext_id == id))
        .count()
}

/// What a recording seam saw: each step, with the copies in the inbox and imported then.
type Seen = Arc<Mutex<Vec<(Step, usize, usize)>>>;

/// A seam that records each step it is called at, with what was on disk then, and fails once at
/// `fail_at`.
fn recording(agent_dir: PathBuf, local_home: PathBuf, fail_at: Option<Step>) -> (Seam, Seen) {
    let seen: Seen = Arc::new(Mutex::new(Vec::new()));
    let failed = Mutex::new(false);
    let log = seen.clone();
    let seam: Seam = Arc::new(move |step, id: &str| {
        log.lock()
            .unwrap()
            .push((step, in_inbox(&agent_dir, id), imported(&local_home, id)));
        let mut failed = failed.lock().unwrap();
        if Some(step) == fail_at && !*failed {
            *failed = true;
            return Err(ClientError::Invalid(format!("injected at {step:?}")));
        }
        Ok(())
    });
    (seam, seen)
}

/// WP-8-5: the ack of a delivery is sent only after its copy is durably in the agent's inbox and
/// handed to local delivery; once acked, it never comes again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wp_8_5_a_delivery_is_acked_only_after_it_is_stored_and_imported() {
    let rig = Rig::start().await;
    let id = rig.send("exactly once").await;
    let (seam, seen) = recording(rig.agent_dir(), rig.local_home(), None);
    let mut receiver = rig.receiver().with_seam(seam);

    let report = receiver.pull(0).await.unwrap();
    assert_eq!(report.stored, vec![id.clone()]);
    assert_eq!(
        *seen.lock().unwrap(),
        vec![
            (Step::BeforePersist, 0, 0),
            (Step::AfterPersist, 1, 1),
            (Step::BeforeAck, 1, 1),
        ],
        "(step, copies in the inbox, copies imported) as the receiver went"
    );
    // Acked: past the lease the gateway has nothing to deliver again.
    rig.h.clock.advance_secs(PAST_LEASE_S);
    assert!(rig.h.poll(&rig.agent, 0, 0).await.is_empty());
    assert_eq!(in_inbox(&rig.agent_dir(), &id), 1);
    assert_eq!(imported(&rig.local_home(), &id), 1);
}

/// WP-8-5, WP-8-6: a failure after the local write and before the ack leaves the copy unacked;
/// the gateway delivers it again after its lease, and the receiver recognises it by its id, acks
/// it and stores (and imports) nothing twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wp_8_6_a_failure_between_persist_and_ack_redelivers_and_stores_once() {
    let rig = Rig::start().await;
    let id = rig.send("between write and ack").await;
    let (seam, _) = recording(rig.agent_dir(), rig.local_home(), Some(Step::AfterPersist));
    let mut receiver = rig.receiver().with_seam(seam);

    let err = receiver.pull(0).await.unwrap_err();
    assert!(err.to_string().contains("AfterPersist"), "{err}");
    assert_eq!(in_inbox(&rig.agent_dir(), &id), 1);
    assert_eq!(imported(&rig.local_home(), &id), 1);
    // Not acked: within the lease nothing comes; past it, the same copy again.
    assert_eq!(receiver.pull(0).await.unwrap().duplicates, 0);
    rig.h.clock.advance_secs(PAST_LEASE_S);
    let again = receiver.pull(0).await.unwrap();
    assert!(again.stored.is_empty(), "{again:?}");
    assert_eq!(again.duplicates, 1);
    assert_eq!(in_inbox(&rig.agent_dir(), &id), 1);
    assert_eq!(imported(&rig.local_home(), &id), 1);
    // The redelivery was acked.
    rig.h.clock.advance_secs(PAST_LEASE_S);
    assert!(rig.h.poll(&rig.agent, 0, 0).await.is_empty());
}

/// WP-8-5: a crash after the lease and before the local write loses nothing: a receiver started
/// again on the same folder gets the copy once its lease runs out, and stores it once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wp_8_5_a_crash_before_persist_loses_nothing() {
    let rig = Rig::start().await;
    let id = rig.send("before the write").await;
    let (seam, _) = recording(rig.agent_dir(), rig.local_home(), Some(Step::BeforePersist));
    let mut crashed = rig.receiver().with_seam(seam);
    let err = crashed.pull(0).await.unwrap_err();
    assert!(err.to_string().contains("BeforePersist"), "{err}");
    drop(crashed);
    assert_eq!(in_inbox(&rig.agent_dir(), &id), 0);
    assert_eq!(imported(&rig.local_home(), &id), 0);

    let mut receiver = rig.receiver();
    assert!(receiver.pull(0).await.unwrap().stored.is_empty(), "leased");
    rig.h.clock.advance_secs(PAST_LEASE_S);
    let report = receiver.pull(0).await.unwrap();
    assert_eq!(report.stored, vec![id.clone()]);
    assert_eq!(in_inbox(&rig.agent_dir(), &id), 1);
    assert_eq!(imported(&rig.local_home(), &id), 1);
    rig.h.clock.advance_secs(PAST_LEASE_S);
    assert!(rig.h.poll(&rig.agent, 0, 0).await.is_empty());
}
