//! The reaper: task timers, blob and inbox expiries and dead letters, then the notices still
//! owed. Above the features whose sweeps it runs; with replicas, one of them holds the claim.

use std::sync::Arc;

use agentbus_protocol::ids::IdKind;
use agentbus_store::{ReapReport, Store};

use crate::notice::{BackgroundResult, OWED_PAGE};
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
        for (entries, dead) in [(&report.dead, true), (&report.expired, false)] {
            for e in entries {
                if let Some(a) = self.agent_row(&e.agent_id).await? {
                    crate::metrics::count_reaped_in(&a.workspace_id, dead);
                }
            }
        }
        // Last: settling never waits on a notice.
        crate::tasks::send_owed_notices(self).await?;
        self.send_owed_notices().await?;
        Ok(report)
    }

    /// Sends the notices owed about inbox entries (§5.9, §5.10; marked in the transaction that
    /// made each due: the reaper's, an agent's deletion, a suspension or a publish to a suspended
    /// agent), each stored with the clearing of its mark: notices a pass or a route could not send
    /// (the gateway stopped, the store failed after the marking commit) go with a later pass of
    /// any replica, and none goes twice.
    async fn send_owed_notices(&self) -> BackgroundResult<()> {
        // A page at a time past the last one: a notice left owed (it failed) is met once a
        // pass, never in front of the others.
        let mut after = (String::new(), 0);
        loop {
            let owed = self.store.pending_notices(after.clone(), OWED_PAGE).await?;
            let Some((last, _)) = owed.last() else {
                return Ok(());
            };
            after = (last.agent_id.clone(), last.sequence);
            for (e, kind) in &owed {
                let sent = self.owed_entry_notice(e, *kind).await;
                self.owed_failed(sent)?;
            }
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
