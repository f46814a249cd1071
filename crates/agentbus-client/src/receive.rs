//! The one receive path: lease from the gateway, re-verify, download attachments, persist into
//! the agent's local inbox, hand to local delivery (`agentbus_local::Store::import`), and only
//! then ack. The sidecar runs it in a loop; `send --wait` runs it while no sidecar does.
//!
//! A crash anywhere before the ack loses nothing: the gateway redelivers the copy after its lease,
//! and a copy already persisted is recognised by its `id`, imported again (import is idempotent)
//! and acked silently (§8).
//!
//! Before it is persisted, a copy is described for its frame (§13.1): the task it belongs to (a
//! `task.request`'s task from the gateway's task list), whether it is late (the task's timeline,
//! §6.3), and whether the workspace policy `require_verified_inbound` keeps it from the agent's
//! sessions because its signature did not re-verify. After every pass, the messages a session was
//! shown ([`agentbus_local::shown`]) are reported to the gateway (`POST /v1/inbox/receipts`), and
//! a `message.v1` that asked for a reply (or every one, when the policy asks for read receipts)
//! gets the `ack.v1` with `level: read` of §5.8, once, at its first showing.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Map, Value, json};

use agentbus_local::shown::{SeenState, ShownRecord};
use agentbus_local::{ImportError, ImportOutcome, InboundMessage, Priority, Store};
use agentbus_protocol::envelope::Envelope;
use agentbus_protocol::frame::{self, Transport, Verified};
use agentbus_protocol::schema::KnownType;
use agentbus_protocol::signing::{PublicKey, SigningKey, envelope_sig, verify_envelope};
use agentbus_protocol::timestamp::Timestamp;
use agentbus_runtime::Clock;

use crate::agent::{Downloads, Quiet};
use crate::error::{ClientError, Result};
use crate::http::{Delivery, Gateway};
use crate::inbox::{AgentInbox, Diagnostic, Received, SavedAttachment};
use crate::profile::{Profile, create_private_dir};

/// The `id` of a delivered envelope (empty when it has none).
fn envelope_id(env: &Map<String, Value>) -> String {
    env.get("id")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// A sender key as the directory lists it.
#[derive(Debug, Clone)]
struct KnownKey {
    /// The address the key belongs to (`agent://system/gateway/*` for the gateway's key).
    owner: String,
    public: PublicKey,
}

/// Sender keys, fetched from the gateway and cached. Revoked keys stay: they still verify the
/// envelopes they signed before revocation (§3.3).
#[derive(Debug, Default)]
pub struct KeyCache {
    keys: HashMap<String, KnownKey>,
}

impl KeyCache {
    async fn refresh(&mut self, gw: &Gateway) -> Result<()> {
        for card in gw.agents().await? {
            for k in &card.keys {
                self.insert(&card.address, &k.id, &k.public_key);
            }
        }
        let wk = gw.well_known().await?.body;
        for k in wk["gateway_keys"].as_array().into_iter().flatten() {
            if let (Some(id), Some(pk)) = (k["id"].as_str(), k["public_key"].as_str()) {
                self.insert("agent://system/gateway/*", id, pk);
            }
        }
        Ok(())
    }

    /// Caches key `id` (`pk`, base64url) as `owner`'s.
    fn insert(&mut self, owner: &str, id: &str, pk: &str) {
        if let Ok(public) = PublicKey::from_base64url(pk) {
            let owner = owner.to_owned();
            self.keys.insert(id.to_owned(), KnownKey { owner, public });
        }
    }

    /// Re-verifies `env` against its sender's registered keys (refreshing once on an unknown key).
    /// `Ok(None)` means verified; `Ok(Some(why))` is a failure to record as AB-1303.
    pub async fn verify(
        &mut self,
        gw: &Gateway,
        env: &Map<String, Value>,
    ) -> Result<Option<String>> {
        let sig = match envelope_sig(env) {
            Ok(s) => s,
            Err(e) => return Ok(Some(format!("the signature cannot be read: {e}"))),
        };
        let key_id = sig.key_id.to_string();
        if !self.keys.contains_key(&key_id) {
            self.refresh(gw).await?;
        }
        let Some(known) = self.keys.get(&key_id) else {
            return Ok(Some(format!("key {key_id} is not registered to any agent")));
        };
        let source = env.get("source").and_then(Value::as_str).unwrap_or("");
        let owner_matches = match known.owner.strip_suffix('*') {
            Some(prefix) => source.starts_with(prefix),
            None => known.owner == source,
        };
        if !owner_matches {
            return Ok(Some(format!(
                "key {key_id} belongs to {}, not to the source {source}",
                known.owner
            )));
        }
        Ok(match verify_envelope(env, &known.public) {
            Ok(()) => None,
            Err(e) => Some(format!("the signature does not verify: {e}")),
        })
    }
}

/// What one pass of [`Receiver::pull`] did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct PullReport {
    /// Envelopes stored for the first time (ids).
    pub stored: Vec<String>,
    /// Redeliveries of envelopes already stored, acked silently.
    pub duplicates: usize,
    /// The cursor after the pass.
    pub cursor: u64,
    /// The receipts the pass reported.
    pub receipts: ReceiptReport,
    /// Stored envelopes local delivery has no room for yet: its bound for this agent's messages
    /// holds only ones no session was shown. They are handed over as sessions are shown those.
    pub unimported: usize,
}

/// The workspace policy flags a receiver acts on (`GET /v1/inbox/policy`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct InboundPolicy {
    /// §13.1: a message whose signature does not re-verify is not injected into a session.
    pub require_verified_inbound: bool,
    /// §5.8: every `message.v1` shown gets a read receipt, not only those that asked for a reply.
    pub read_receipts: bool,
}

/// How long a refusal for want of room stands while nothing local changed (see
/// [`Receiver::import_waiting`]).
const ROOM_RETRY_MS: i64 = 60_000;

/// How long a fetched policy is used before it is fetched again.
const POLICY_TTL_MS: i64 = 60_000;
/// How long a receipt that could not be sent waits before it is tried again.
const RECEIPT_RETRY_MS: i64 = 30_000;

/// Reads the agent's private key when a read receipt must be signed (only then: a sidecar whose
/// key sits in a locked keychain still receives).
pub type Signer = Box<dyn Fn() -> Result<SigningKey> + Send + Sync>;

/// What one report of shown messages did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ReceiptReport {
    /// Messages reported to the gateway as shown (ids).
    pub reported: Vec<String>,
    /// Messages reported as pushed to a client that may drop them (ids).
    pub pushed: Vec<String>,
    /// Read receipts (`ack.v1`, `level: read`) sent, by the id they acknowledge.
    pub read_receipts: Vec<String>,
    /// Receipts that could not be sent now and will be tried again, with why.
    pub deferred: Vec<(String, String)>,
}

/// How often a receiver holding the WebSocket looks for messages shown since its last report.
const RECEIPT_TICK_MS: u64 = 200;

/// The steps of receiving one delivery at which a receiver built for crash tests (the
/// `fault-injection` feature, which only the test kit turns on) calls its seam; an error there
/// stops the pass as a crash at that step would.
#[cfg(any(test, feature = "fault-injection"))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Leased and re-verified, nothing written locally yet.
    BeforePersist,
    /// Persisted into the inbox and handed to local delivery, not acked.
    AfterPersist,
    /// About to ack the delivery.
    BeforeAck,
}

/// What a crash test runs at each [`Step`], with the envelope's id.
#[cfg(any(test, feature = "fault-injection"))]
pub type Seam = Arc<dyn Fn(Step, &str) -> Result<()> + Send + Sync>;

/// The seam `AGENTBUS_FAULT` asks for: `before-persist` or `after-persist` fail at that step (so
/// the binary's crash tests can stop a sidecar there).
#[cfg(any(test, feature = "fault-injection"))]
fn seam_from_env() -> Option<Seam> {
    let at = match std::env::var("AGENTBUS_FAULT").ok()?.as_str() {
        "before-persist" => Step::BeforePersist,
        "after-persist" => Step::AfterPersist,
        _ => return None,
    };
    Some(Arc::new(move |step, _id: &str| {
        if step == at {
            Err(ClientError::Invalid(format!(
                "fault injected at {step:?}, before the ack"
            )))
        } else {
            Ok(())
        }
    }))
}

/// Receives for one agent.
pub struct Receiver {
    gw: Gateway,
    profile: Profile,
    inbox: AgentInbox,
    keys: KeyCache,
    local: Store,
    clock: Arc<dyn Clock>,
    /// Crash tests only: never part of a release build (see [`Step`]).
    #[cfg(any(test, feature = "fault-injection"))]
    seam: Option<Seam>,
    /// [`Store::room_mark`] when local delivery last had no room for a waiting envelope, and
    /// when (ms).
    room_mark: Option<(String, i64)>,
    signer: Option<Signer>,
    /// The policy and when it was fetched.
    policy: Option<(InboundPolicy, i64)>,
    /// The shown records' mark at the last report, so an unchanged folder is not listed again.
    shown_mark: Option<std::time::SystemTime>,
    /// A receipt failed: report again after this instant even if nothing new was shown.
    retry_at: Option<i64>,
    /// How attachment downloads are shown.
    downloads: Downloads,
}

impl Receiver {
    /// A receiver for `profile`, storing into `inbox` and importing into `local`.
    pub fn new(
        gw: Gateway,
        profile: Profile,
        inbox: AgentInbox,
        local: Store,
        clock: Arc<dyn Clock>,
    ) -> Receiver {
        Receiver {
            gw,
            profile,
            inbox,
            keys: KeyCache::default(),
            local,
            clock,
            #[cfg(any(test, feature = "fault-injection"))]
            seam: seam_from_env(),
            room_mark: None,
            signer: None,
            policy: None,
            shown_mark: None,
            retry_at: None,
            downloads: Downloads::default(),
        }
    }

    /// Shows the attachments this receiver downloads through `downloads` (a bar on a terminal).
    pub fn with_downloads(mut self, downloads: Downloads) -> Receiver {
        self.downloads = downloads;
        self
    }

    /// Lets this receiver sign the read receipts it sends (§5.8).
    pub fn with_signer(mut self, signer: Signer) -> Receiver {
        self.signer = Some(signer);
        self
    }

    /// Crash tests: runs `seam` at each [`Step`] of every delivery.
    #[cfg(any(test, feature = "fault-injection"))]
    pub fn with_seam(mut self, seam: Seam) -> Receiver {
        self.seam = Some(seam);
        self
    }

    /// Calls the seam, when there is one, at `step` of envelope `id`.
    #[cfg(any(test, feature = "fault-injection"))]
    fn at(&self, step: Step, id: &str) -> Result<()> {
        self.seam.as_ref().map_or(Ok(()), |seam| seam(step, id))
    }

    /// The inbox this receiver writes.
    pub fn inbox(&self) -> &AgentInbox {
        &self.inbox
    }

    /// One long-poll of up to `wait_s` seconds, and everything it delivered processed and acked.
    pub async fn pull(&mut self, wait_s: u64) -> Result<PullReport> {
        let after = self.inbox.cursor();
        let deliveries = self.gw.poll(after, wait_s, 100).await?;
        let mut report = PullReport::default();
        let mut acks = Vec::with_capacity(deliveries.len());
        for d in deliveries {
            let (sequence, token) = (d.sequence, d.delivery.clone());
            #[cfg(any(test, feature = "fault-injection"))]
            let id = envelope_id(&d.envelope);
            match self.process(d).await? {
                Some(id) => report.stored.push(id),
                None => report.duplicates += 1,
            }
            // The cursor moves only over what is on disk, so a restart resumes after it.
            self.inbox.advance_cursor(sequence)?;
            #[cfg(any(test, feature = "fault-injection"))]
            self.at(Step::BeforeAck, &id)?;
            acks.push((sequence, token));
        }
        if !acks.is_empty() {
            // A stale token (the copy was leased again meanwhile) is refused by the gateway; the
            // newer lease will be acked as a duplicate, so a refusal here is not an error.
            match self.gw.ack(&acks).await {
                Ok(_) | Err(ClientError::Api { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        report.cursor = self.inbox.cursor();
        report.unimported = self.import_waiting()?;
        report.receipts = self.report_shown().await?;
        Ok(report)
    }

    /// Holds the WebSocket (`/v1/inbox/ws?after=<cursor>`) and processes every pushed delivery
    /// like [`Self::pull`] does, acking each over the socket after the local write. Returns when
    /// the socket closes or fails (always an error: the caller reconnects or falls back to
    /// long-poll). `on_pass` is called after every delivery.
    pub async fn stream(&mut self, mut on_pass: impl FnMut(&PullReport)) -> Result<()> {
        use futures_util::{SinkExt as _, StreamExt as _};
        use tokio_tungstenite::tungstenite::Message;
        use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;

        let base = self.gw.base();
        let ws_base = if let Some(rest) = base.strip_prefix("https://") {
            format!("wss://{rest}")
        } else if let Some(rest) = base.strip_prefix("http://") {
            format!("ws://{rest}")
        } else {
            return Err(ClientError::Invalid(format!(
                "{base} is not an http(s) URL"
            )));
        };
        let url = format!("{ws_base}/v1/inbox/ws?after={}", self.inbox.cursor());
        let unreachable = |detail: String| ClientError::Unreachable {
            url: url.clone(),
            detail,
        };
        let mut req = url
            .as_str()
            .into_client_request()
            .map_err(|e| unreachable(e.to_string()))?;
        let headers = req.headers_mut();
        for (name, value) in [
            ("authorization", format!("Bearer {}", self.gw.token())),
            (
                crate::http::SIDECAR_VERSION_HEADER,
                crate::VERSION.to_owned(),
            ),
        ] {
            if let Ok(v) = value.parse() {
                headers.insert(name, v);
            }
        }
        let (socket, _) = match tokio_tungstenite::connect_async(req).await {
            Ok(s) => s,
            Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
                let status = reqwest::StatusCode::from_u16(resp.status().as_u16())
                    .unwrap_or(reqwest::StatusCode::BAD_GATEWAY);
                let body = resp
                    .body()
                    .as_deref()
                    .and_then(|b| serde_json::from_slice(b).ok())
                    .unwrap_or(Value::Null);
                return Err(crate::http::api_error(status, &body));
            }
            Err(e) => return Err(unreachable(e.to_string())),
        };
        let (mut sink, mut frames) = socket.split();
        // Sessions are shown messages between deliveries: look for new "shown" records often,
        // at the cost of a stat when there are none.
        let mut tick = tokio::time::interval(std::time::Duration::from_millis(RECEIPT_TICK_MS));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let frame = tokio::select! {
                f = frames.next() => f,
                _ = tick.tick() => {
                    let unimported = self.import_waiting()?;
                    let receipts = self.report_shown().await?;
                    if !receipts.reported.is_empty() || !receipts.deferred.is_empty() {
                        on_pass(&PullReport {
                            cursor: self.inbox.cursor(),
                            receipts,
                            unimported,
                            ..PullReport::default()
                        });
                    }
                    continue;
                }
            };
            let Some(frame) = frame else { break };
            let text = match frame.map_err(|e| unreachable(e.to_string()))? {
                Message::Text(t) => t,
                Message::Close(_) => break,
                _ => continue,
            };
            let v: Value = serde_json::from_str(text.as_str()).unwrap_or(Value::Null);
            if v["type"] != "delivery" {
                continue;
            }
            let d = crate::http::delivery_from_json(&v["delivery"])?;
            let (sequence, token) = (d.sequence, d.delivery.clone());
            #[cfg(any(test, feature = "fault-injection"))]
            let id = envelope_id(&d.envelope);
            let mut report = PullReport::default();
            match self.process(d).await? {
                Some(id) => report.stored.push(id),
                None => report.duplicates += 1,
            }
            self.inbox.advance_cursor(sequence)?;
            #[cfg(any(test, feature = "fault-injection"))]
            self.at(Step::BeforeAck, &id)?;
            let ack = json!({"type": "ack", "sequence": sequence, "delivery": token});
            sink.send(Message::Text(ack.to_string().into()))
                .await
                .map_err(|e| unreachable(e.to_string()))?;
            report.cursor = self.inbox.cursor();
            on_pass(&report);
        }
        Err(unreachable("the gateway closed the WebSocket".into()))
    }

    /// Persists and imports one delivery. `Some(id)` when it was new, `None` for a duplicate.
    async fn process(&mut self, d: Delivery) -> Result<Option<String>> {
        let id = envelope_id(&d.envelope);
        if let Some(existing) = self.inbox.get(&id)? {
            // Persisted before a crash that came before the ack: import again (idempotent), ack.
            self.import(&existing)?;
            return Ok(None);
        }
        let mut diagnostics = Vec::new();
        let verified = match self.keys.verify(&self.gw, &d.envelope).await? {
            None => "true",
            Some(why) => {
                diagnostics.push(Diagnostic {
                    code: "AB-1303".into(),
                    message: why,
                });
                "false"
            }
        };
        let attachments = self.download(&id, &d.envelope, &mut diagnostics).await?;
        let (task, late, expires_ms) = self.task_facts(&d.envelope).await;
        let held = if verified == "false" && self.policy().await.require_verified_inbound {
            Some("require_verified_inbound".to_owned())
        } else {
            None
        };
        let r = Received {
            sequence: d.sequence,
            verified: verified.to_owned(),
            diagnostics,
            attachments,
            stored_at: self.clock.now().to_string(),
            task,
            late,
            expires_ms,
            held,
            envelope: d.envelope,
        };
        #[cfg(any(test, feature = "fault-injection"))]
        self.at(Step::BeforePersist, &id)?;
        let fresh = self.inbox.persist(&r)?;
        self.import(&r)?;
        #[cfg(any(test, feature = "fault-injection"))]
        self.at(Step::AfterPersist, &id)?;
        if fresh {
            trace_received(&self.profile.address, &r, d.attempt);
        }
        Ok(fresh.then_some(id))
    }

    async fn download(
        &self,
        id: &str,
        env: &Map<String, Value>,
        diagnostics: &mut Vec<Diagnostic>,
    ) -> Result<Vec<SavedAttachment>> {
        let list = env
            .get("data")
            .and_then(|d| d.get("attachments"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let mut out = Vec::new();
        let mut used = std::collections::HashSet::new();
        let display = (!list.is_empty()).then(|| self.downloads.open(list.len()));
        for (i, a) in list.into_iter().enumerate() {
            let name = a["name"].as_str().unwrap_or("attachment").to_owned();
            let blob_ref = a["ref"].as_str().unwrap_or_default().to_owned();
            let blob_id = blob_ref.rsplit('/').next().unwrap_or_default().to_owned();
            let mut path = self.inbox.attachment_path(id, &name);
            let mut n = 2;
            while !used.insert(path.clone()) {
                path = self.inbox.attachment_path(id, &format!("{n}-{name}"));
                n += 1;
            }
            let dir = self.inbox.attachments_dir(id);
            create_private_dir(&dir)?;
            // Through whichever target the gateway names; resumed from a `.part` file left by an
            // interrupted run, and in place only once its sha256 matches the blob's.
            let shown = display.as_deref().unwrap_or(&Quiet);
            shown.start(i, &name, a["size"].as_u64().unwrap_or(0));
            let fetched = self
                .gw
                .download_blob_to(&blob_id, &path, shown.counter())
                .await;
            shown.done();
            let saved = match fetched {
                Ok(meta) => {
                    if a["sha256"].as_str() != Some(meta.blob.sha256.as_str()) {
                        diagnostics.push(Diagnostic {
                            code: "AB-1303".into(),
                            message: format!("attachment {name:?} does not match its sha256"),
                        });
                    }
                    Some(path)
                }
                Err(ClientError::Api {
                    code_str, message, ..
                }) => {
                    diagnostics.push(Diagnostic {
                        code: code_str,
                        message: format!("attachment {name:?} could not be fetched: {message}"),
                    });
                    None
                }
                Err(ClientError::Protocol(message)) => {
                    diagnostics.push(Diagnostic {
                        code: "AB-1303".into(),
                        message: format!("attachment {name:?} could not be fetched: {message}"),
                    });
                    None
                }
                Err(e) => return Err(e),
            };
            out.push(SavedAttachment {
                name,
                path: saved,
                blob_ref,
            });
        }
        Ok(out)
    }

    /// Hands `r` to local delivery, behind any stored envelope still waiting for room there, so
    /// sessions see the agent's messages in the order they came. One it has no room for is
    /// marked and handed over again by [`Self::import_waiting`]: it is on disk, so the gateway's
    /// copy is acked all the same.
    fn import(&mut self, r: &Received) -> Result<()> {
        if self.inbox.unimported()?.is_empty() && self.import_one(r)? {
            return Ok(());
        }
        self.inbox.mark_unimported(r)?;
        // Something changed (this envelope is new): try the waiting ones now.
        self.room_mark = None;
        self.import_waiting()?;
        Ok(())
    }

    /// Hands the stored envelopes marked unimported to local delivery, oldest first, until one
    /// still finds no room. Returns how many still wait. Nothing is tried while neither the log
    /// nor the identity's claims changed since the last refusal, for up to a minute (what blocks
    /// may also pass its TTL, which changes neither).
    pub fn import_waiting(&mut self) -> Result<usize> {
        let waiting = self.inbox.unimported()?;
        if waiting.is_empty() {
            return Ok(0);
        }
        let mark = self.local.room_mark(&self.profile.address);
        let now = self.clock.now().millis();
        if self
            .room_mark
            .as_ref()
            .is_some_and(|(m, at)| *m == mark && now - at < ROOM_RETRY_MS)
        {
            return Ok(waiting.len());
        }
        for (i, (path, id)) in waiting.iter().enumerate() {
            // A mark whose envelope is gone has nothing left to hand over.
            if let Some(r) = self.inbox.get(id)?
                && !self.import_one(&r)?
            {
                self.room_mark = Some((mark, now));
                return Ok(waiting.len() - i);
            }
            self.inbox.clear_unimported(path)?;
        }
        self.room_mark = None;
        Ok(0)
    }

    /// One envelope to local delivery: `false` when its bound has no room yet.
    fn import_one(&self, r: &Received) -> Result<bool> {
        let env = Envelope::from_map(r.envelope.clone());
        let d = frame::describe(&env, r.task.as_deref(), Some(&self.profile.name));
        let mut body = d.body;
        for diag in &r.diagnostics {
            body.push_str(&format!("\n[{}] {}", diag.code, diag.message));
        }
        let msg = InboundMessage {
            transport: Transport::Gateway,
            transport_id: r.id().to_owned(),
            from: d.from,
            kind: d.kind,
            conversation: d.conversation,
            subject: d.subject,
            body,
            verified: if r.verified == "true" {
                Verified::True
            } else {
                Verified::False
            },
            attachments: r
                .attachments
                .iter()
                .filter_map(|a| a.path.as_ref().map(|p| p.display().to_string()))
                .collect(),
            // A late message (a request whose task already ended) takes no verb.
            reply_command: d.answer.filter(|_| !r.late),
            sent: r
                .attr("time")
                .and_then(|t| t.parse::<Timestamp>().ok())
                .unwrap_or_else(|| self.clock.now()),
            recipient: self.profile.address.clone(),
            message_id: Some(d.id),
            task: d.task,
            late: r.late,
            expires_ms: r.expires_ms,
            held: r.held.clone(),
            priority: Priority::parse(env.priority()),
        };
        match self.local.import(&msg) {
            Ok(ImportOutcome::Stored { .. } | ImportOutcome::Duplicate { .. }) => Ok(true),
            Ok(ImportOutcome::Full { .. }) => Ok(false),
            // The local store failing is retried (no ack); a message local delivery cannot hold
            // stays in the agent's inbox, where `inbox --show` reads it.
            Err(ImportError::Store(e)) => Err(ClientError::Import(e.to_string())),
            Err(_) => Ok(true),
        }
    }

    /// The task an envelope belongs to, whether it came after the task ended, and for a request
    /// still open when it came, when it stops being open (§6.1: the accept deadline or
    /// `expires_at`, the gateway's `next_deadline` of a submitted task), from the gateway's
    /// record. Best effort: a gateway that cannot say leaves the frame without them.
    async fn task_facts(&self, env: &Map<String, Value>) -> (Option<String>, bool, Option<i64>) {
        let e = Envelope::from_map(env.clone());
        let id = e.id().unwrap_or_default();
        match frame::receiver_type(&e) {
            Some(KnownType::TaskRequest) => {
                let tasks = self.gw.tasks().await.unwrap_or_default();
                let Some(t) = tasks.iter().find(|t| t.request_id == id) else {
                    return (None, false, None);
                };
                let task = Some(t.id.clone());
                let state = t.state.as_str();
                // An expired (or otherwise ended) task's request is not a fresh request.
                let late = crate::agent::TERMINAL.contains(&state);
                let expires_ms = (state == "submitted")
                    .then(|| t.next_deadline.as_deref()?.parse::<Timestamp>().ok())
                    .flatten()
                    .map(|t| t.millis());
                (task, late, expires_ms)
            }
            Some(k) if k.is_task_followup() => {
                let Some(task_id) = e.task_id().map(str::to_owned) else {
                    return (None, false, None);
                };
                let late = match self.gw.task(&task_id).await {
                    Ok(t) => t
                        .timeline
                        .iter()
                        .any(|ev| ev.envelope_id.as_deref() == Some(id) && ev.late),
                    Err(_) => false,
                };
                (Some(task_id), late, None)
            }
            _ => (None, false, None),
        }
    }

    /// The workspace's inbound policy, fetched at most once a minute. A gateway without the route
    /// has no such policy; one that cannot answer now keeps the last answer, and before any
    /// answer a failed re-verification is held back (the safe side of §13.1).
    async fn policy(&mut self) -> InboundPolicy {
        let now = self.clock.now().millis();
        if let Some((p, at)) = self.policy
            && now - at < POLICY_TTL_MS
        {
            return p;
        }
        let fetched = match self.gw.inbox_policy().await {
            Ok(v) => Some(InboundPolicy {
                require_verified_inbound: v.require_verified_inbound,
                read_receipts: v.read_receipts,
            }),
            Err(ClientError::Api { status: 404, .. }) => Some(InboundPolicy::default()),
            Err(_) => None,
        };
        match (fetched, self.policy) {
            (Some(p), _) => {
                self.policy = Some((p, now));
                p
            }
            (None, Some((p, _))) => p,
            (None, None) => InboundPolicy {
                require_verified_inbound: true,
                read_receipts: false,
            },
        }
    }

    /// Reports what sessions were shown since the last report, and sends the read receipts
    /// that are owed (see the module documentation). Cheap when nothing was shown: one stat.
    pub async fn report_shown(&mut self) -> Result<ReceiptReport> {
        let mut out = ReceiptReport::default();
        let agent = self.profile.address.clone();
        let mark = self.local.shown_mark(&agent);
        let now = self.clock.now().millis();
        let retry_due = self.retry_at.is_some_and(|t| now >= t);
        if mark.is_none() || (mark == self.shown_mark && !retry_due) {
            return Ok(out);
        }
        let records = self
            .local
            .shown_pending(&agent)
            .map_err(|e| ClientError::Import(e.to_string()))?;
        let mut items = Vec::new();
        let mut known = Vec::new();
        for rec in records {
            match self.inbox.get(&rec.message_id)? {
                Some(r) => {
                    items.push(agentbus_api::ShownReceipt {
                        sequence: r.sequence,
                        id: rec.message_id.clone(),
                        shown_at: Timestamp(rec.ms).to_string(),
                        harness: rec.harness.clone(),
                        event: rec.event.clone(),
                        // A push the client may drop is reported as such, never as a showing.
                        state: (rec.state == SeenState::Pushed)
                            .then(|| rec.state.as_str().to_owned()),
                    });
                    known.push((rec, r));
                }
                // Not a copy this agent received here: nothing to report.
                None => self.done(&rec)?,
            }
        }
        self.retry_at = None;
        if items.is_empty() {
            self.shown_mark = settled(mark);
            return Ok(out);
        }
        let results = match self.gw.report_receipts(items).await {
            Ok(v) => v.results,
            // None of them names a delivery the gateway knows: nothing to retry.
            Err(ClientError::Api { status: 404, .. }) => Vec::new(),
            Err(e) => {
                self.retry_at = Some(now + RECEIPT_RETRY_MS);
                out.deferred.push(("*".into(), e.to_string()));
                return Ok(out);
            }
        };
        let policy = self.policy().await;
        for (i, (rec, r)) in known.iter().enumerate() {
            let status = results
                .get(i)
                .map(|v| v.status.as_str())
                .unwrap_or("refused");
            if status != "refused" {
                trace_shown(&self.profile.address, rec, r);
            }
            if status != "refused" && rec.state == SeenState::Pushed {
                out.pushed.push(rec.message_id.clone());
            } else if status != "refused" {
                out.reported.push(rec.message_id.clone());
                if owes_read_receipt(&r.envelope, policy) {
                    match self.send_read_receipt(r).await {
                        Ok(()) => out.read_receipts.push(rec.message_id.clone()),
                        Err(e) => {
                            // Reported, not acknowledged: keep the record and try again later.
                            self.retry_at = Some(now + RECEIPT_RETRY_MS);
                            out.deferred.push((rec.message_id.clone(), e.to_string()));
                            continue;
                        }
                    }
                }
            }
            self.done(rec)?;
        }
        self.shown_mark = settled(self.local.shown_mark(&agent));
        Ok(out)
    }

    fn done(&self, rec: &ShownRecord) -> Result<()> {
        self.local
            .shown_reported(rec)
            .map_err(|e| ClientError::Import(e.to_string()))
    }

    /// Sends the `ack.v1` with `level: read` for `r` to its sender (§5.8). Its idempotency key is
    /// derived from the acknowledged id, so a repeat after a crash returns the first receipt and
    /// the sender gets one read receipt however often this runs.
    async fn send_read_receipt(&self, r: &Received) -> Result<()> {
        let signer = self.signer.as_ref().ok_or_else(|| {
            ClientError::Invalid(
                "this receiver cannot sign (no key), so it sends no read receipt".into(),
            )
        })?;
        let key = signer()?;
        let to = r
            .attr("reply_to")
            .or(r.attr("source"))
            .unwrap_or_default()
            .to_owned();
        let mut draft = crate::compose::Draft::new(KnownType::Ack, &to, json!({"level": "read"}))
            .answering(&r.envelope);
        draft.idempotency_key = Some(format!("read-receipt:{}", r.id()));
        let env = crate::compose::seal(draft, &self.profile, &key, self.clock.now())?;
        self.gw.publish(&env).await?;
        let _ = self.inbox.record_sent(&env);
        Ok(())
    }
}

/// The attributes every receiver span of `r` carries.
fn received_attrs(address: &str, r: &Received) -> Vec<agentbus_telemetry::KeyValue> {
    use agentbus_telemetry::{KeyValue, semconv as sc};
    let s = |n: &str| {
        r.envelope
            .get(n)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    vec![
        KeyValue::new(sc::MESSAGING_SYSTEM, sc::SYSTEM),
        KeyValue::new(sc::MESSAGING_DESTINATION_NAME, address.to_owned()),
        KeyValue::new(sc::MESSAGING_MESSAGE_ID, s("id")),
        KeyValue::new(sc::MESSAGING_CONVERSATION_ID, s("conversation_id")),
        KeyValue::new(sc::MESSAGE_TYPE, s("type")),
    ]
}

/// The receiver's span of a copy it persisted and handed to local delivery, child of the
/// envelope's `traceparent` (docs/observability.md).
fn trace_received(address: &str, r: &Received, attempt: u32) {
    use agentbus_telemetry::{KeyValue, Parent, SpanKind, semconv as sc};
    let tracer = agentbus_telemetry::global();
    if !tracer.is_on() {
        return;
    }
    let mut attrs = received_attrs(address, r);
    attrs.extend([
        KeyValue::new(sc::MESSAGING_OPERATION_TYPE, "receive"),
        KeyValue::new(sc::MESSAGING_OPERATION_NAME, "receive"),
        KeyValue::new(sc::DELIVERY_ATTEMPT, i64::from(attempt)),
        KeyValue::new(sc::TASK_LATE, r.late),
    ]);
    let traceparent = r
        .envelope
        .get("traceparent")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let mut span = tracer.start(
        "receive",
        SpanKind::Consumer,
        Parent::Traceparent(traceparent),
        attrs,
    );
    span.event(
        if r.verified == "true" {
            "verified"
        } else {
            "verification_failed"
        },
        Vec::new(),
    );
    if let Some(h) = &r.held {
        span.event(
            "held",
            vec![KeyValue::new("agentbus.held.reason", h.clone())],
        );
    }
    span.event("persisted", Vec::new());
    span.end();
}

/// The showing of a copy in a session's context, reported through this receipt at the time the
/// hook recorded (the hook itself touches no network): a span of that instant.
fn trace_shown(address: &str, rec: &ShownRecord, r: &Received) {
    use agentbus_telemetry::{KeyValue, Parent, SpanKind, semconv as sc};
    let tracer = agentbus_telemetry::global();
    if !tracer.is_on() {
        return;
    }
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(rec.ms.max(0) as u64);
    let mut attrs = received_attrs(address, r);
    attrs.extend([
        KeyValue::new(sc::MESSAGING_OPERATION_TYPE, "process"),
        KeyValue::new(sc::MESSAGING_OPERATION_NAME, "show"),
        KeyValue::new("agentbus.shown.harness", rec.harness.clone()),
        KeyValue::new("agentbus.shown.event", rec.event.clone()),
        KeyValue::new("agentbus.shown.state", rec.state.as_str().to_owned()),
    ]);
    let traceparent = r
        .envelope
        .get("traceparent")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let mut span = tracer.start_at(
        "show",
        SpanKind::Internal,
        Parent::Traceparent(traceparent),
        attrs,
        Some(at),
    );
    span.event_at(
        if rec.state == SeenState::Pushed {
            "pushed"
        } else {
            "shown"
        },
        at,
        Vec::new(),
    );
    span.end_at(at);
}

/// A folder mark that can be trusted to change on the next write: one from the last two seconds
/// is not, because a file system stamps modification times with a coarse clock and a record
/// written in the same tick would leave the mark as it was. (File times are the machine's, so this
/// compares them with the machine's clock, not the receiver's injected one.)
#[allow(clippy::disallowed_methods)] // file times are compared with the machine's own clock
fn settled(mark: Option<std::time::SystemTime>) -> Option<std::time::SystemTime> {
    let recent = mark.is_some_and(|m| {
        std::time::SystemTime::now()
            .duration_since(m)
            .map_or(true, |age| age < std::time::Duration::from_secs(2))
    });
    if recent { None } else { mark }
}

/// Whether a message shown calls for a read receipt (§5.8): a `message.v1` whose sender set
/// `expects_reply`, or any `message.v1` when the workspace policy asks for read receipts.
pub fn owes_read_receipt(env: &Map<String, Value>, policy: InboundPolicy) -> bool {
    let e = Envelope::from_map(env.clone());
    let asked = e.data().and_then(|d| d.get("expects_reply")) == Some(&Value::Bool(true));
    frame::receiver_type(&e) == Some(KnownType::Message) && (asked || policy.read_receipts)
}

/// The sidecar's status, written after every pass for `doctor` and `sidecar --status`.
pub fn status_json(profile: &Profile, report: &PullReport, now: Timestamp, mode: &str) -> Value {
    json!({
        "mode": mode,
        "pid": std::process::id(),
        "profile": profile.name,
        "agent_id": profile.agent_id,
        "gateway": profile.gateway,
        "cursor": report.cursor,
        "unimported": report.unimported,
        "last_pass_at": now.to_string(),
    })
}
