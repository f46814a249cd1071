//! The reaper: task timers, blob and inbox expiries and dead letters, then the notices still
//! owed (`owed`'s sweeps). Above the features whose sweeps it runs; with replicas, one of them
//! holds the claim.

use std::sync::Arc;

use agentbus_protocol::ids::IdKind;
use agentbus_store::{ReapReport, Store};

use crate::notice::BackgroundResult;
use crate::state::App;

impl App {
    /// One reaper pass: task timers (§6.1), then inbox dead letters and expiries, each with its
    /// notice (§5.9, §5.10).
    pub async fn reap(&self) -> BackgroundResult<ReapReport> {
        crate::tasks::fire_due(self).await?;
        crate::blobs::reap(self).await?;
        let now = self.now();
        let report = self
            .store
            .reap_inboxes(now, self.config.max_attempts)
            .await?;
        crate::metrics::count_reaped(report.dead.len(), report.expired.len());
        if self.tracer.is_on() {
            trace_reaped(self, &report);
        }
        for (entries, dead) in [(&report.dead, true), (&report.expired, false)] {
            for e in entries {
                if let Some(a) = self.agent_row(&e.agent_id).await? {
                    crate::metrics::count_reaped_in(&a.workspace_id, dead);
                }
            }
        }
        // Last: settling never waits on a notice.
        crate::owed::send_task_notices(self).await?;
        crate::owed::send_entry_notices(self).await?;
        Ok(report)
    }
}

/// A span per dead-lettered or expired copy, child of its message's `traceparent`.
fn trace_reaped(app: &App, report: &ReapReport) {
    use agentbus_telemetry::{KeyValue, Parent, SpanKind, semconv as sc};
    for (entries, name) in [(&report.dead, "dead_letter"), (&report.expired, "expire")] {
        for e in entries {
            let attrs: serde_json::Map<String, serde_json::Value> =
                serde_json::from_str(&e.message.attrs).unwrap_or_default();
            let s = |n: &str| attrs.get(n).and_then(|v| v.as_str()).unwrap_or_default();
            let mut span = app.tracer.start(
                name,
                SpanKind::Internal,
                Parent::Traceparent(s("traceparent")),
                vec![
                    KeyValue::new(sc::MESSAGING_SYSTEM, sc::SYSTEM),
                    KeyValue::new(sc::MESSAGING_OPERATION_TYPE, "settle"),
                    KeyValue::new(sc::MESSAGING_OPERATION_NAME, name),
                    KeyValue::new(sc::MESSAGING_MESSAGE_ID, e.message.id.clone()),
                    KeyValue::new(
                        sc::MESSAGING_CONVERSATION_ID,
                        s("conversation_id").to_owned(),
                    ),
                    KeyValue::new(sc::DELIVERY_ATTEMPT, i64::from(e.attempts)),
                ],
            );
            span.event(name, Vec::new());
            span.end();
        }
    }
}

/// How long a replica's claim on the reaper lasts past its last pass: when it dies, another
/// takes the sweeps over after this long at most.
const REAPER_CLAIM_MS: i64 = 5_000;

/// Runs the reaper every `reaper_interval_ms` (none when 0: tests call `App::reap`). With
/// replicas on one database, a pass runs only on the replica that holds the reaper's claim
/// ([`Store::claim_reaper`]), so timers and expiries fire once, not once per replica.
pub fn spawn_reaper(app: Arc<App>) -> Option<tokio::task::JoinHandle<()>> {
    let every = app.config.reaper_interval_ms;
    if every == 0 {
        return None;
    }
    let me = app.mint(IdKind::Receipt);
    let claim_ms = REAPER_CLAIM_MS.max(3 * every as i64);
    Some(tokio::spawn(async move {
        let mut tick = tokio::time::interval(std::time::Duration::from_millis(every));
        loop {
            tick.tick().await;
            match app.store.claim_reaper(&me, app.now(), claim_ms).await {
                Ok(true) => {}
                Ok(false) => continue,
                Err(e) => {
                    tracing::warn!(error = %e, "the reaper's claim could not be read");
                    continue;
                }
            }
            if let Err(e) = app.reap().await {
                tracing::warn!(code = %e.code(), error = %e.message(), "reaper pass failed");
            }
        }
    }))
}
