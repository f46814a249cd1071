//! What the operator views read and write: conversation lists, delivery states of
//! copies, a task's messages, usage totals, and console sessions.

use std::collections::BTreeMap;

use rusqlite::{Connection, OptionalExtension, Row, Transaction, params};

use super::ops::{MESSAGE_COLS, message_row, viewer_filter};
use crate::model::state_from;
use crate::*;

/// Storage sequences as the JSON array `json_each` reads, so one prepared statement serves any
/// count.
fn json_ints(items: &[i64]) -> String {
    let items: Vec<String> = items.iter().map(i64::to_string).collect();
    format!("[{}]", items.join(","))
}

/// Strings as a JSON array, for `json_each`.
fn json_strs(items: &[String]) -> String {
    let mut out = String::from("[");
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push('"');
        for c in item.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
                c => out.push(c),
            }
        }
        out.push('"');
    }
    out.push(']');
    out
}

pub(super) fn conversations(
    c: &Connection,
    tenant_id: &str,
    viewer: &ConversationViewer,
    before: Option<(i64, i64)>,
    limit: u32,
) -> rusqlite::Result<Vec<ConversationSummary>> {
    let (filter, who) = viewer_filter(viewer);
    let mut s = c.prepare_cached(&format!(
        "SELECT m.conversation_id, count(*), min(m.received_at), max(m.received_at), max(m.seq) \
         FROM messages m WHERE m.tenant_id = ?1 {filter} GROUP BY m.conversation_id \
         HAVING ?4 IS NULL OR max(m.received_at) < ?4 OR (max(m.received_at) = ?4 AND max(m.seq) < ?5) \
         ORDER BY max(m.received_at) DESC, max(m.seq) DESC LIMIT ?2"
    ))?;
    let (at, seq) = before.unzip();
    let groups: Vec<(String, i64, i64, i64, i64)> = s
        .query_map(params![tenant_id, limit.max(1), who, at, seq], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })?
        .collect::<Result<_, _>>()?;
    let seqs: Vec<i64> = groups.iter().map(|g| g.4).collect();
    let mut s = c.prepare_cached(&format!(
        "SELECT {MESSAGE_COLS} FROM messages m WHERE m.seq IN (SELECT value FROM json_each(?1))"
    ))?;
    let mut last: BTreeMap<i64, MessageRow> = s
        .query_map([json_ints(&seqs)], |r| message_row(r, 0))?
        .map(|m| m.map(|m| (m.seq, m)))
        .collect::<Result<_, _>>()?;
    Ok(groups
        .into_iter()
        .filter_map(|(id, n, first, last_at, seq)| {
            Some(ConversationSummary {
                conversation_id: id,
                messages: n.max(0) as u64,
                first_at: first,
                last_at,
                last: last.remove(&seq)?,
            })
        })
        .collect())
}

pub(super) fn copies(c: &Connection, seqs: &[i64]) -> rusqlite::Result<Vec<CopyState>> {
    let mut s = c.prepare_cached(
        "SELECT i.message_seq, i.agent_id, i.sequence, i.state, i.attempts, i.last_attempt_at, \
         r.shown_at FROM inbox i LEFT JOIN receipts r ON r.agent_id = i.agent_id AND r.sequence = i.sequence \
         WHERE i.message_seq IN (SELECT value FROM json_each(?1)) ORDER BY i.message_seq, i.agent_id",
    )?;
    let rows = s.query_map([json_ints(seqs)], |r| {
        Ok(CopyState {
            message_seq: r.get(0)?,
            agent_id: r.get(1)?,
            sequence: r.get::<_, i64>(2)? as u64,
            state: state_from(r.get(3)?),
            attempts: r.get::<_, i64>(4)? as u32,
            last_attempt_at: r.get(5)?,
            shown_at: r.get(6)?,
        })
    })?;
    rows.collect()
}

pub(super) fn task_messages(
    c: &Connection,
    tenant_id: &str,
    task_id: &str,
) -> rusqlite::Result<Vec<MessageRow>> {
    let mut s = c.prepare_cached(&format!(
        "SELECT {MESSAGE_COLS} FROM messages m WHERE m.task_id = ?2 AND m.tenant_id = ?1 \
         ORDER BY m.received_at, m.seq"
    ))?;
    let rows = s.query_map(params![tenant_id, task_id], |r| message_row(r, 0))?;
    rows.collect()
}

pub(super) fn blob_workspaces(c: &Connection, blob_id: &str) -> rusqlite::Result<Vec<String>> {
    let mut s = c.prepare_cached(
        "SELECT a.workspace_id FROM blobs b JOIN agents a ON a.id = b.uploader_id WHERE b.id = ?1 \
         UNION SELECT a.workspace_id FROM blob_refs r JOIN messages m ON m.seq = r.message_seq \
         JOIN agents a ON a.id = m.source_agent_id WHERE r.blob_id = ?1 \
         UNION SELECT a.workspace_id FROM blob_refs r JOIN inbox i ON i.message_seq = r.message_seq \
         JOIN agents a ON a.id = i.agent_id WHERE r.blob_id = ?1",
    )?;
    let rows = s.query_map([blob_id], |r| r.get(0))?;
    rows.collect()
}

/// Stores a message's usage row; called inside the publish transaction.
pub(super) fn insert_usage(t: &Transaction<'_>, seq: i64, u: &UsageRow) -> rusqlite::Result<()> {
    let tokens = u.usage.as_ref().map(|f| f.tokens).unwrap_or_default();
    t.prepare_cached(
        "INSERT INTO usage (message_seq, tenant_id, workspace_id, agent_id, task_id, capability, day, field, \
         reported_by, provider, model, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, \
         reasoning_tokens, requests, wall_ms, currency, cost_micros, cost_source) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21)",
    )?
    .execute(params![
        seq,
        u.tenant_id,
        u.workspace_id,
        u.agent_id,
        u.task_id,
        u.capability,
        u.day,
        u.field,
        u.usage.as_ref().map(|f| f.reported_by.as_str()),
        u.usage.as_ref().and_then(|f| f.provider.as_deref()),
        u.usage.as_ref().and_then(|f| f.model.as_deref()),
        tokens.input,
        tokens.output,
        tokens.cache_read,
        tokens.cache_write,
        tokens.reasoning,
        tokens.requests,
        tokens.wall_ms,
        u.cost.as_ref().map(|c| c.currency.as_str()),
        u.cost.as_ref().map(|c| c.micros),
        u.cost.as_ref().and_then(|c| c.source.as_deref()),
    ])?;
    Ok(())
}

/// Usage totals; summed by [`crate::model::sum_usage`].
pub(super) fn usage(c: &Connection, f: &UsageFilter) -> rusqlite::Result<Vec<UsageTotal>> {
    let mut s = c.prepare_cached(
        "SELECT agent_id, capability, day, reported_by, currency, cost_source, input_tokens, output_tokens, \
         cache_read_tokens, cache_write_tokens, reasoning_tokens, requests, wall_ms, cost_micros FROM usage \
         WHERE tenant_id = ?1 AND (?2 IS NULL OR workspace_id IN (SELECT value FROM json_each(?2))) \
         AND (?3 IS NULL OR agent_id = ?3) AND (?4 IS NULL OR capability = ?4) \
         AND (?5 IS NULL OR day >= ?5) AND (?6 IS NULL OR day <= ?6)",
    )?;
    let workspaces = f.workspace_ids.as_deref().map(json_strs);
    let mut figures = Vec::new();
    let mut rows = s.query(params![
        f.tenant_id,
        workspaces,
        f.agent_id,
        f.capability,
        f.since_day,
        f.until_day
    ])?;
    while let Some(r) = rows.next()? {
        figures.push(figures_of(r)?);
    }
    Ok(crate::model::sum_usage(figures))
}

fn figures_of(r: &Row<'_>) -> rusqlite::Result<crate::model::UsageFigures> {
    let mut n = [0i64; 7];
    for (i, v) in n.iter_mut().enumerate() {
        *v = r.get(6 + i)?;
    }
    Ok((
        (
            r.get(0)?,
            r.get(1)?,
            r.get(2)?,
            r.get(3)?,
            r.get(4)?,
            r.get(5)?,
        ),
        n,
        r.get(13)?,
    ))
}

fn session_row(r: &Row<'_>) -> rusqlite::Result<ConsoleSessionRow> {
    let hash = |i: usize| -> rusqlite::Result<[u8; 32]> {
        let v: Vec<u8> = r.get(i)?;
        <[u8; 32]>::try_from(v.as_slice()).map_err(|_| {
            rusqlite::Error::FromSqlConversionFailure(
                i,
                rusqlite::types::Type::Blob,
                "not a 32-byte hash".into(),
            )
        })
    };
    Ok(ConsoleSessionRow {
        id_hash: hash(0)?,
        user_id: r.get(1)?,
        token_hash: hash(2)?,
        csrf: r.get(3)?,
        created_at: r.get(4)?,
        expires_at: r.get(5)?,
    })
}

pub(super) fn create_session(t: &Transaction<'_>, s: &ConsoleSessionRow) -> rusqlite::Result<()> {
    t.prepare_cached(
        "INSERT INTO console_sessions (id_hash, user_id, token_hash, csrf, created_at, expires_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![
        s.id_hash.to_vec(),
        s.user_id,
        s.token_hash.to_vec(),
        s.csrf,
        s.created_at,
        s.expires_at
    ])?;
    Ok(())
}

pub(super) fn session(
    c: &Connection,
    id_hash: &[u8; 32],
) -> rusqlite::Result<Option<ConsoleSessionRow>> {
    c.prepare_cached(
        "SELECT id_hash, user_id, token_hash, csrf, created_at, expires_at FROM console_sessions \
         WHERE id_hash = ?1",
    )?
    .query_row([id_hash.to_vec()], session_row)
    .optional()
}
