//! The sweeps of owed notices: the notices the store holds as owed (`model::Owed`), marked by
//! the commit that made each due (a timer's firing, an admin's cancel, an entry settled, held or
//! its recipient deleted), sent by a reaper pass when the route or pass that marked them did not.
//! Above the features, with the reaper that drives it: it uses what the features and the
//! notices below them build (`tasks`' cancel notices, [`App::owed_entry_notice`]).

use serde_json::json;

use agentbus_protocol::task::{TaskState, Timer};
use agentbus_protocol::timestamp::Timestamp;
use agentbus_store::{
    AgentRow, OWED_CANCEL_RECIPIENT, OWED_CANCEL_REQUESTER, OWED_RECIPIENT, OWED_REQUESTER, Owed,
    Store, TaskEventRow, TaskRow,
};

use crate::error::{ApiError, ApiResult};
use crate::notice::{BackgroundError, BackgroundResult};
use crate::state::App;
use crate::tasks::{ADMIN_ACTOR, CANCEL_BITS, CANCEL_KIND, find_request, send_cancel_notices};

/// How many owed notices a reaper pass reads at a time.
const OWED_PAGE: u32 = 1000;

/// The outcome of sending one owed notice, as a pass takes it: the store's failure stops the
/// pass (every other notice would fail alike), any other failure is logged and leaves that
/// notice owed for the next pass, so one notice that cannot be built (say, unreadable stored
/// data) never holds back the others.
fn failed(sent: BackgroundResult<()>) -> BackgroundResult<()> {
    match sent {
        Err(e @ BackgroundError::Unavailable { .. }) => Err(e),
        Err(e) => {
            tracing::warn!(code = %e.code(), error = %e.message(), "an owed notice was not sent; the next pass tries again");
            Ok(())
        }
        Ok(()) => Ok(()),
    }
}

/// Sends the notices owed about inbox entries (§5.9, §5.10; marked in the transaction that
/// made each due: the reaper's, an agent's deletion, a suspension or a publish to a suspended
/// agent), each stored with the clearing of its mark: notices a pass or a route could not send
/// (the gateway stopped, the store failed after the marking commit) go with a later pass of
/// any replica, and none goes twice.
pub(crate) async fn send_entry_notices(app: &App) -> BackgroundResult<()> {
    // A page at a time past the last one: a notice left owed (it failed) is met once a
    // pass, never in front of the others.
    let mut after = (String::new(), 0);
    loop {
        let owed = app.store.pending_notices(after.clone(), OWED_PAGE).await?;
        let Some((last, _)) = owed.last() else {
            return Ok(());
        };
        after = (last.agent_id.clone(), last.sequence);
        for (e, kind) in &owed {
            failed(app.owed_entry_notice(e, *kind).await)?;
        }
    }
}

/// Sends the notices owed to tasks' parties (marked in the commit of a timer's firing,
/// `tasks::fire_due`, or of an admin's cancel), each stored with the clearing of its mark:
/// notices a pass could not send (the gateway stopped, the store failed after the marking commit)
/// go with a later pass of any replica, and none goes twice. One that fails on its own is left
/// for the next pass ([`failed`]).
pub(crate) async fn send_task_notices(app: &App) -> ApiResult<()> {
    let mut after = String::new();
    loop {
        let owed = app.store.pending_task_notices(&after, OWED_PAGE).await?;
        let Some((last, _)) = owed.last() else {
            return Ok(());
        };
        after = last.id.clone();
        // Like the timers, 128 tasks at a time, so their commits share the writer's group commits.
        for chunk in owed.chunks(128) {
            let sent = futures_util::future::join_all(
                chunk
                    .iter()
                    .map(|(row, bits)| send_owed_notice(app, row, *bits)),
            )
            .await;
            for r in sent {
                failed(r.map_err(Into::into))?;
            }
        }
    }
}

/// The bits of a task's owed notices that a timer's firing marks (`tasks::owed_by`).
const TIMER_BITS: u8 = OWED_REQUESTER | OWED_RECIPIENT;

/// The timer whose firing owes the notices of [`TIMER_BITS`], if `e` is one: a timer that ended
/// the task, not the cancel grace timer, which owes none (see `tasks::owed_by`).
fn timer_owing(e: &TaskEventRow) -> Option<(TaskState, Timer, i64)> {
    let timer = Timer::from_wire(e.timer.as_deref().filter(|_| e.kind == "timer")?)?;
    if timer == Timer::CancelGrace {
        return None;
    }
    Some((e.from_state.parse().ok()?, timer, e.at))
}

/// The actor and reason of the admin's cancel that owes the notices of [`CANCEL_BITS`], if `e`
/// is one.
fn admin_cancel(e: &TaskEventRow) -> Option<(&str, Option<&str>)> {
    (e.kind == CANCEL_KIND && e.actor.starts_with(ADMIN_ACTOR))
        .then_some((e.actor.as_str(), e.reason.as_deref()))
}

/// Sends the notices `owed` (bits) on `row`, each for the change that owes it, found on the
/// timeline: the last timer that fired (its bits, [`TIMER_BITS`]) and the last admin's cancel
/// (its own, [`CANCEL_BITS`]), so a task whose timer fired and which an admin cancelled owes
/// both. Bits with no such change (not expected) are forgone. Each cause is tried whatever the
/// other's outcome; the first failure is answered.
async fn send_owed_notice(app: &App, row: &TaskRow, owed: u8) -> ApiResult<()> {
    let events = app.store.task_events(&row.id).await?;
    let mut unfound = 0;
    let mut sent = Ok(());
    if owed & TIMER_BITS != 0 {
        match events.iter().rev().find_map(timer_owing) {
            Some(timer) => sent = notify_expiry(app, row, timer, owed & TIMER_BITS).await,
            None => unfound |= owed & TIMER_BITS,
        }
    }
    if owed & CANCEL_BITS != 0 {
        match events.iter().rev().find_map(admin_cancel) {
            Some((actor, reason)) => {
                let cancel = send_cancel_notices(app, row, actor, reason, owed & CANCEL_BITS);
                sent = sent.and(cancel.await);
            }
            None => unfound |= owed & CANCEL_BITS,
        }
    }
    for bit in [
        OWED_REQUESTER,
        OWED_RECIPIENT,
        OWED_CANCEL_REQUESTER,
        OWED_CANCEL_RECIPIENT,
    ] {
        if unfound & bit != 0 {
            app.store
                .forgo_notice(Owed::Task(row.id.clone(), bit))
                .await?;
        }
    }
    sent
}

/// Sends the notices `owed` (bits) to the parties of `row` about the timer that fired at `at`
/// in state `from` (§6.1); a party gone since is owed nothing.
async fn notify_expiry(
    app: &App,
    row: &TaskRow,
    (from, timer, at): (TaskState, Timer, i64),
    owed: u8,
) -> ApiResult<()> {
    let live = |a: Option<AgentRow>| a.filter(|a| a.deleted_at.is_none());
    let requester = live(app.store.agent(&row.requester_id).await?);
    let recipient = live(app.store.agent(&row.recipient_id).await?);
    let original = find_request(app, row).await?;
    let owed_to = |bit| Owed::Task(row.id.clone(), bit);
    if from == TaskState::Submitted {
        // §6.1: the sender gets system.expired (with G-WP-8's additive `reason` and `last_state: delivered`).
        if owed & OWED_REQUESTER == 0 {
            return Ok(());
        }
        let (Some(req), Some(orig)) = (requester, original.as_ref()) else {
            return Ok(app.store.forgo_notice(owed_to(OWED_REQUESTER)).await?);
        };
        // How far the request got with the worker (G-WP-8): usually delivered, its sidecar
        // having taken it, with nobody acting on it; routed while it waited in the inbox.
        let copy = app
            .store
            .delivery_states(&orig.tenant_id, &orig.source, &orig.id)
            .await?
            .and_then(|(_, rows)| rows.into_iter().find(|r| r.agent_id == row.recipient_id));
        let last_state = match &copy {
            Some(c) if c.acked_at.is_some() || c.shown.is_some() => "delivered",
            Some(_) => "routed",
            None => "persisted",
        };
        let data = json!({
            "original_message_id": row.request_id,
            "expired_at": Timestamp(at).to_string(),
            "last_state": last_state,
            "reason": if timer == Timer::AcceptTimeout { "accept_timeout" } else { "expires_at" },
            "task_id": row.id,
        });
        let kind = "agentbus.system.expired.v1";
        let owed = Some(owed_to(OWED_REQUESTER));
        return app
            .notify_owed(&req, "tasks", kind, data, Some(orig), owed)
            .await
            .map_err(ApiError::from);
    }
    // §6.1: both parties get a message.v1 from agent://system/gateway/tasks explaining the expiry.
    let text = format!(
        "Task {} expired in state {}: the {} passed without the worker's {}.",
        row.id,
        from,
        timer.as_str().replace('_', " "),
        if timer == Timer::ProgressTimeout {
            "progress"
        } else {
            "result"
        }
    );
    let data = json!({"text": text, "format": "text/plain", "context": {"task_id": row.id, "timer": timer.as_str(), "last_state": from.as_str()}});
    for (party, bit) in [(requester, OWED_REQUESTER), (recipient, OWED_RECIPIENT)] {
        if owed & bit == 0 {
            continue;
        }
        match party {
            Some(party) => {
                let (kind, owed) = ("agentbus.message.v1", Some(owed_to(bit)));
                app.notify_owed(&party, "tasks", kind, data.clone(), original.as_ref(), owed)
                    .await?
            }
            None => app.store.forgo_notice(owed_to(bit)).await?,
        }
    }
    Ok(())
}
