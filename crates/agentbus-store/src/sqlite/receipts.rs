//! Receipts of messages shown in a session's context, and the delivery states a sender reads.

use rusqlite::{Connection, OptionalExtension as _, Transaction, params};

use crate::StoreResult;
use crate::model::*;

use super::ops::message_by_seq;

/// Records receipts for `agent`'s inbox; the first receipt of a delivery stands. A `shown_at`
/// outside the message's life (before it was received, after `now`) is clamped into it.
pub(crate) fn record(
    t: &Transaction<'_>,
    agent: &str,
    receipts: &[ShownReceipt],
    now: i64,
) -> StoreResult<Vec<ReceiptOutcome>> {
    let mut out = Vec::with_capacity(receipts.len());
    for r in receipts {
        let found: Option<(i64, String, i64)> = t
            .prepare_cached(
                "SELECT i.message_seq, m.id, m.received_at FROM inbox i JOIN messages m ON m.seq = i.message_seq \
                 WHERE i.agent_id = ?1 AND i.sequence = ?2",
            )?
            .query_row(params![agent, r.sequence as i64], |row| {
                Ok((row.get(0)?, row.get(1)?, row.get(2)?))
            })
            .optional()?;
        let Some((message_seq, _, received_at)) = found.filter(|f| f.1 == r.message_id) else {
            out.push(ReceiptOutcome::Unknown);
            continue;
        };
        let shown_at = r.shown_at.clamp(received_at, now.max(received_at));
        // A push and a showing are recorded apart: the first of each stands.
        let sql = if r.pushed {
            "INSERT INTO pushes (agent_id, sequence, message_seq, pushed_at, harness, event, reported_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (agent_id, sequence) DO NOTHING"
        } else {
            "INSERT INTO receipts (agent_id, sequence, message_seq, shown_at, harness, event, reported_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (agent_id, sequence) DO NOTHING"
        };
        let n = t.prepare_cached(sql)?.execute(params![
            agent,
            r.sequence as i64,
            message_seq,
            shown_at,
            r.harness,
            r.event,
            now
        ])?;
        out.push(if n == 1 {
            ReceiptOutcome::Recorded
        } else {
            ReceiptOutcome::AlreadyRecorded
        });
    }
    Ok(out)
}

/// The message `source` sent with `id` (the latest, should the id be reused after its replay
/// window) and the state of its delivery to every recipient.
pub(crate) fn states(
    c: &Connection,
    tenant: &str,
    source: &str,
    id: &str,
) -> StoreResult<Option<(MessageRow, Vec<DeliveryStateRow>)>> {
    let seq: Option<i64> = c
        .prepare_cached(
            "SELECT message_seq FROM recent_ids WHERE tenant_id = ?1 AND source = ?2 AND id = ?3",
        )?
        .query_row(params![tenant, source, id], |r| r.get(0))
        .optional()?;
    let Some(seq) = seq else { return Ok(None) };
    let Some(message) = message_by_seq(c, seq)? else {
        return Ok(None);
    };
    // The recipients' envelopes that answer it, in their conversation (an answer copies the
    // conversation, §7), oldest first.
    let mut answers: Vec<(String, AnswerRow)> = Vec::new();
    {
        let mut stmt = c.prepare_cached(
            "SELECT m.source_agent_id, m.id, m.kind, m.received_at FROM messages m \
             WHERE m.tenant_id = ?1 AND m.conversation_id = ?2 AND m.correlation_id = ?3 \
             ORDER BY m.received_at, m.seq",
        )?;
        let rows = stmt.query_map(params![tenant, message.conversation_id, id], |r| {
            Ok((
                r.get::<_, Option<String>>(0)?,
                AnswerRow {
                    id: r.get(1)?,
                    kind: r.get(2)?,
                    received_at: r.get(3)?,
                },
            ))
        })?;
        for row in rows {
            if let (Some(agent), a) = row? {
                answers.push((agent, a));
            }
        }
    }
    let mut out = Vec::new();
    let mut stmt = c.prepare_cached(
        "SELECT i.agent_id, i.sequence, i.state, i.attempts, i.last_attempt_at, i.acked_at, \
         r.shown_at, r.harness, r.event, p.pushed_at, p.harness, p.event FROM inbox i \
         LEFT JOIN receipts r ON r.agent_id = i.agent_id AND r.sequence = i.sequence \
         LEFT JOIN pushes p ON p.agent_id = i.agent_id AND p.sequence = i.sequence \
         WHERE i.message_seq = ?1 ORDER BY i.agent_id",
    )?;
    let rows = stmt.query_map([seq], |r| {
        let sequence = r.get::<_, i64>(1)? as u64;
        let shown = match r.get::<_, Option<i64>>(6)? {
            Some(at) => Some(ShownReceipt {
                sequence,
                message_id: String::new(),
                shown_at: at,
                harness: r.get(7)?,
                event: r.get(8)?,
                pushed: false,
            }),
            None => None,
        };
        let pushed = match r.get::<_, Option<i64>>(9)? {
            Some(at) => Some(ShownReceipt {
                sequence,
                message_id: String::new(),
                shown_at: at,
                harness: r.get(10)?,
                event: r.get(11)?,
                pushed: true,
            }),
            None => None,
        };
        Ok(DeliveryStateRow {
            agent_id: r.get(0)?,
            sequence,
            state: state_from(r.get(2)?),
            attempts: r.get::<_, i64>(3)? as u32,
            last_attempt_at: r.get(4)?,
            acked_at: r.get(5)?,
            shown,
            pushed,
            answer: None,
            ack: None,
        })
    })?;
    for row in rows {
        let mut d = row?;
        crate::model::fill_answers(&mut d, &answers, id);
        out.push(d);
    }
    Ok(Some((message, out)))
}
