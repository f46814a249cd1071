//! [`Store`] for [`SqliteStore`]: each operation is one SQL unit on the writer or a reader.

use rusqlite::{Connection, OptionalExtension, Row, Transaction, params};

use super::SqliteStore;
use crate::model::{FORGET_SENT, notice_due, role_from, state_code, state_from};
use crate::*;

pub(super) const MESSAGE_COLS: &str = "m.seq, m.tenant_id, m.id, m.source, m.source_agent_id, m.kind, m.conversation_id, \
     m.to_text, m.to_id, m.attrs, m.data, m.signed_hash, m.idempotency_key, m.receipt, m.received_at, \
     m.expires_at, m.task_id";

pub(super) fn message_row(r: &Row<'_>, o: usize) -> rusqlite::Result<MessageRow> {
    Ok(MessageRow {
        seq: r.get(o)?,
        tenant_id: r.get(o + 1)?,
        id: r.get(o + 2)?,
        source: r.get(o + 3)?,
        source_agent_id: r.get(o + 4)?,
        kind: r.get(o + 5)?,
        conversation_id: r.get(o + 6)?,
        to_text: r.get(o + 7)?,
        to_id: r.get(o + 8)?,
        attrs: r.get(o + 9)?,
        data: r.get(o + 10)?,
        signed_hash: r.get(o + 11)?,
        idempotency_key: r.get(o + 12)?,
        receipt: r.get(o + 13)?,
        received_at: r.get(o + 14)?,
        expires_at: r.get(o + 15)?,
        task_id: r.get(o + 16)?,
    })
}

fn tenant_row(r: &Row<'_>) -> rusqlite::Result<TenantRow> {
    Ok(TenantRow {
        id: r.get(0)?,
        slug: r.get(1)?,
        data_key: r.get(2)?,
        created_at: r.get(3)?,
        suspended_at: r.get(4)?,
    })
}

const TENANT_COLS: &str = "id, slug, data_key, created_at, suspended_at";

fn workspace_row(r: &Row<'_>) -> rusqlite::Result<WorkspaceRow> {
    Ok(WorkspaceRow {
        id: r.get(0)?,
        tenant_id: r.get(1)?,
        slug: r.get(2)?,
        policy: r.get(3)?,
        created_at: r.get(4)?,
    })
}

const AGENT_COLS: &str = "id, tenant_id, workspace_id, name, owner_id, card, visibility, created_at, updated_at, deleted_at, suspended_at";

fn agent_row(r: &Row<'_>) -> rusqlite::Result<AgentRow> {
    Ok(AgentRow {
        id: r.get(0)?,
        tenant_id: r.get(1)?,
        workspace_id: r.get(2)?,
        name: r.get(3)?,
        owner_id: r.get(4)?,
        card: r.get(5)?,
        visibility: r.get(6)?,
        created_at: r.get(7)?,
        updated_at: r.get(8)?,
        deleted_at: r.get(9)?,
        suspended_at: r.get(10)?,
    })
}

fn key_row(r: &Row<'_>) -> rusqlite::Result<KeyRow> {
    Ok(KeyRow {
        id: r.get(0)?,
        agent_id: r.get(1)?,
        public_key: r.get(2)?,
        created_at: r.get(3)?,
        expires_at: r.get(4)?,
        revoked_at: r.get(5)?,
    })
}

/// A blob whose content is due for deletion, with `?1` the time and `?2` the start of the upload
/// window: complete and expired, or pending and registered before the window (§9).
const BLOB_DUE: &str = "(complete = 1 AND expires_at <= ?1) OR (complete = 0 AND created_at <= ?2)";

fn blob_row(r: &Row<'_>) -> rusqlite::Result<BlobRow> {
    Ok(BlobRow {
        id: r.get(0)?,
        tenant_id: r.get(1)?,
        uploader_id: r.get(2)?,
        name: r.get(3)?,
        media_type: r.get(4)?,
        size: r.get::<_, i64>(5)? as u64,
        sha256: r.get(6)?,
        complete: r.get::<_, i64>(7)? != 0,
        created_at: r.get(8)?,
        expires_at: r.get(9)?,
    })
}

fn is_unique_violation(e: &rusqlite::Error) -> bool {
    matches!(e, rusqlite::Error::SqliteFailure(f, _) if f.code == rusqlite::ErrorCode::ConstraintViolation)
}

fn conflict(what: &str) -> impl FnOnce(rusqlite::Error) -> StoreError + '_ {
    move |e| {
        if is_unique_violation(&e) {
            StoreError::Conflict(what.to_owned())
        } else {
            StoreError::from(e)
        }
    }
}

pub(super) fn message_by_seq(c: &Connection, seq: i64) -> rusqlite::Result<Option<MessageRow>> {
    c.prepare_cached(&format!(
        "SELECT {MESSAGE_COLS} FROM messages m WHERE m.seq = ?1"
    ))?
    .query_row([seq], |r| message_row(r, 0))
    .optional()
}

fn recent_in(
    c: &Connection,
    tenant: &str,
    source: &str,
    id: &str,
    since: i64,
) -> rusqlite::Result<Option<MessageRow>> {
    c.prepare_cached(&format!(
        "SELECT {MESSAGE_COLS} FROM recent_ids r JOIN messages m ON m.seq = r.message_seq \
         WHERE r.tenant_id = ?1 AND r.source = ?2 AND r.id = ?3 AND r.received_at >= ?4"
    ))?
    .query_row(params![tenant, source, id, since], |r| message_row(r, 0))
    .optional()
}

fn idempotent_in(
    c: &Connection,
    k: &IdempotencyKey,
    since: i64,
) -> rusqlite::Result<Option<MessageRow>> {
    c.prepare_cached(&format!(
        "SELECT {MESSAGE_COLS} FROM idempotency i JOIN messages m ON m.seq = i.message_seq \
         WHERE i.tenant_id = ?1 AND i.source = ?2 AND i.to_id = ?3 AND i.key = ?4 AND i.created_at >= ?5"
    ))?
    .query_row(params![k.tenant_id, k.source, k.to_id, k.key, since], |r| message_row(r, 0))
    .optional()
}

/// Marks the settled entries `owing` (those whose sender is owed a notice,
/// [`crate::model::notice_due`]) as owing the notice `kind` in `inbox.notice`, replacing a
/// hold's (see [`NoticeKind`]), those whose sender still exists.
fn flag_owed<'e>(
    t: &Transaction<'_>,
    owing: impl Iterator<Item = &'e InboxEntry>,
    kind: NoticeKind,
) -> rusqlite::Result<()> {
    debug_assert_ne!(kind, NoticeKind::Held, "holds are marked by mark_holds");
    for e in owing {
        t.prepare_cached(
            "UPDATE inbox SET notice = ?4, hold = NULL WHERE agent_id = ?1 AND sequence = ?2 \
             AND EXISTS (SELECT 1 FROM agents a WHERE a.id = ?3 AND a.deleted_at IS NULL)",
        )?
        .execute(params![
            e.agent_id,
            e.sequence as i64,
            e.message.source_agent_id,
            kind.code()
        ])?;
    }
    Ok(())
}

/// Marks the entries of `pending` as held in `inbox.hold`, those still pending and owing no
/// other notice whose sender is owed one and still exists; returns those marked (the
/// PostgreSQL backend's rule, where an ack or the reaper may settle one after the read; here the
/// writer's transaction sees none).
fn mark_holds(t: &Transaction<'_>, pending: Vec<InboxEntry>) -> rusqlite::Result<Vec<InboxEntry>> {
    let mut held = Vec::new();
    for e in pending.into_iter().filter(|e| notice_due(e, true)) {
        let marked = t
            .prepare_cached(
                "UPDATE inbox SET hold = ?4 WHERE agent_id = ?1 AND sequence = ?2 \
                 AND state IN (0, 1) AND notice IS NULL \
                 AND EXISTS (SELECT 1 FROM agents a WHERE a.id = ?3 AND a.deleted_at IS NULL)",
            )?
            .execute(params![
                e.agent_id,
                e.sequence as i64,
                e.message.source_agent_id,
                NoticeKind::Held.code()
            ])?;
        if marked == 1 {
            held.push(e);
        }
    }
    Ok(held)
}

/// Clears the mark of `owed`; `Conflict` when it was not set (the notice is stored already).
fn clear_owed(t: &Transaction<'_>, owed: &Owed) -> StoreResult<()> {
    let cleared = match owed {
        Owed::Entry(agent, sequence, NoticeKind::Held) => t
            .prepare_cached(
                "UPDATE inbox SET hold = NULL WHERE agent_id = ?1 AND sequence = ?2 AND hold IS NOT NULL",
            )?
            .execute(params![agent, *sequence as i64])?,
        Owed::Entry(agent, sequence, kind) => t
            .prepare_cached(
                "UPDATE inbox SET notice = NULL WHERE agent_id = ?1 AND sequence = ?2 AND notice = ?3",
            )?
            .execute(params![agent, *sequence as i64, kind.code()])?,
        Owed::Task(task, bit) => t
            .prepare_cached(
                "UPDATE tasks SET notices = notices & ~?2 WHERE id = ?1 AND notices & ?2 != 0",
            )?
            .execute(params![task, bit])?,
    };
    if cleared == 0 {
        return Err(StoreError::Conflict(format!("{owed:?}, sent already,")));
    }
    Ok(())
}

/// A publish's inbox entry (`?1` agent, `?2` sequence, `?3` message, `?4` visible at, `?5` expires
/// at), held when `?1` is suspended and the message has a sending agent (`?6`).
static INSERT_ENTRY: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "INSERT INTO inbox (agent_id, sequence, message_seq, state, attempts, visible_at, expires_at, hold) \
         VALUES (?1, ?2, ?3, 0, 0, ?4, ?5, {})",
        crate::model::hold_if_suspended("?1", "?6")
    )
});

fn insert_message(t: &Transaction<'_>, m: &NewMessage) -> StoreResult<PublishOutcome> {
    if let Some(owed) = &m.notice_of {
        clear_owed(t, owed)?;
    }
    // The authoritative dedupe: checked again here, inside the writer, so concurrent publishes of
    // one id cannot both pass.
    if let Some(existing) = recent_in(t, &m.tenant_id, &m.source, &m.id, m.replay_since)? {
        return Ok(PublishOutcome::DuplicateId(existing));
    }
    if let Some(k) = &m.idempotency
        && let Some(existing) = idempotent_in(t, k, m.idempotency_since)?
    {
        return Ok(PublishOutcome::IdempotentReplay(existing));
    }
    if let Some(max) = m.max_depth {
        for agent in &m.recipients {
            let depth = pending_in(t, agent)?;
            if depth >= max {
                return Ok(PublishOutcome::InboxFull {
                    agent_id: agent.clone(),
                    depth,
                });
            }
        }
    }
    t.prepare_cached(
        "INSERT INTO messages (tenant_id, id, source, source_agent_id, kind, conversation_id, correlation_id, \
         to_text, to_id, attrs, data, signed_hash, idempotency_key, receipt, received_at, expires_at, task_id) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)",
    )?
    .execute(params![
        m.tenant_id,
        m.id,
        m.source,
        m.source_agent_id,
        m.kind,
        m.conversation_id,
        m.correlation_id,
        m.to_text,
        m.to_id,
        m.attrs,
        m.data,
        m.signed_hash,
        m.idempotency.as_ref().map(|k| k.key.clone()),
        m.receipt,
        m.received_at,
        m.expires_at,
        m.task_id,
    ])?;
    let seq = t.last_insert_rowid();
    if !m.search_tags.is_empty() {
        // To the index's pending list (`super::merge_search_pending` says why).
        t.prepare_cached("INSERT INTO search_pending (seq, tags) VALUES (?1, ?2)")?
            .execute(rusqlite::params![seq, m.search_tags])?;
        super::search_row_pending();
    }
    t.prepare_cached(
        "INSERT INTO recent_ids (tenant_id, source, id, message_seq, received_at) VALUES (?1, ?2, ?3, ?4, ?5) \
         ON CONFLICT (tenant_id, source, id) DO UPDATE SET message_seq = excluded.message_seq, received_at = excluded.received_at",
    )?
    .execute(params![m.tenant_id, m.source, m.id, seq, m.received_at])?;
    if let Some(k) = &m.idempotency {
        t.prepare_cached(
            "INSERT INTO idempotency (tenant_id, source, to_id, key, message_seq, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6) \
             ON CONFLICT (tenant_id, source, to_id, key) DO UPDATE SET message_seq = excluded.message_seq, created_at = excluded.created_at",
        )?
        .execute(params![k.tenant_id, k.source, k.to_id, k.key, seq, m.received_at])?;
    }
    let mut sequences = Vec::with_capacity(m.recipients.len());
    let mut depths = Vec::with_capacity(m.recipients.len());
    for agent in &m.recipients {
        // The per-inbox counter, bumped in this transaction: gap-free and never reused.
        let (next, pending): (i64, i64) = t
            .prepare_cached(
                "INSERT INTO inbox_counters (agent_id, last_seq, pending) VALUES (?1, 1, 1) \
                 ON CONFLICT (agent_id) DO UPDATE SET last_seq = last_seq + 1, pending = pending + 1 \
                 RETURNING last_seq, pending",
            )?
            .query_row([agent], |r| Ok((r.get(0)?, r.get(1)?)))?;
        depths.push(pending.max(0) as u64);
        // A copy for a suspended recipient is held, owing its sender AB-4013 from this commit on
        // (see `NewMessage::recipients`): decided here, where the writer has every suspension.
        t.prepare_cached(&INSERT_ENTRY)?.execute(params![
            agent,
            next,
            seq,
            m.received_at,
            m.expires_at,
            m.source_agent_id
        ])?;
        sequences.push((agent.clone(), next as u64));
    }
    if let Some(w) = &m.task {
        write_task(t, w)?;
    }
    for blob in &m.blob_refs {
        t.prepare_cached("INSERT OR IGNORE INTO blob_refs (blob_id, message_seq) VALUES (?1, ?2)")?
            .execute(params![blob, seq])?;
    }
    if let Some(u) = &m.usage {
        super::console::insert_usage(t, seq, u)?;
    }
    let message = m.stored_row(seq);
    Ok(PublishOutcome::Stored {
        message,
        sequences,
        depths,
    })
}

const TASK_COLS: &str = "id, tenant_id, workspace_id, requester_id, recipient_id, request_id, conversation_id, \
     capability, state, terminal, machine, next_deadline, created_at, updated_at, version";

fn task_row(r: &Row<'_>) -> rusqlite::Result<TaskRow> {
    Ok(TaskRow {
        id: r.get(0)?,
        tenant_id: r.get(1)?,
        workspace_id: r.get(2)?,
        requester_id: r.get(3)?,
        recipient_id: r.get(4)?,
        request_id: r.get(5)?,
        conversation_id: r.get(6)?,
        capability: r.get(7)?,
        state: r.get(8)?,
        terminal: r.get::<_, i64>(9)? != 0,
        machine: r.get(10)?,
        next_deadline: r.get(11)?,
        created_at: r.get(12)?,
        updated_at: r.get(13)?,
        version: r.get(14)?,
    })
}

fn insert_event(t: &Transaction<'_>, task_id: &str, e: &TaskEventRow) -> rusqlite::Result<()> {
    t.prepare_cached(
        "INSERT INTO task_events (task_id, n, at, actor, envelope_id, kind, from_state, to_state, flag, timer, warnings, reason) \
         VALUES (?1, (SELECT coalesce(max(n), 0) + 1 FROM task_events WHERE task_id = ?1), ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
    )?
    .execute(params![task_id, e.at, e.actor, e.envelope_id, e.kind, e.from_state, e.to_state, e.flag, e.timer, e.warnings, e.reason])?;
    Ok(())
}

fn write_task(t: &Transaction<'_>, w: &TaskWrite) -> StoreResult<()> {
    match w {
        TaskWrite::Create(k, e) => {
            t.prepare_cached(&format!("INSERT INTO tasks ({TASK_COLS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)"))?
                .execute(params![
                    k.id, k.tenant_id, k.workspace_id, k.requester_id, k.recipient_id, k.request_id, k.conversation_id,
                    k.capability, k.state, k.terminal as i64, k.machine, k.next_deadline, k.created_at, k.updated_at, k.version
                ])?;
            insert_event(t, &k.id, e)?;
        }
        TaskWrite::Update(k, expected, e) => {
            let n = t
                .prepare_cached(
                    "UPDATE tasks SET state = ?2, terminal = ?3, machine = ?4, next_deadline = ?5, updated_at = ?6, version = version + 1 \
                     WHERE id = ?1 AND version = ?7",
                )?
                .execute(params![k.id, k.state, k.terminal as i64, k.machine, k.next_deadline, k.updated_at, expected])?;
            if n == 0 {
                return Err(StoreError::Conflict(format!(
                    "task {} changed concurrently",
                    k.id
                )));
            }
            insert_event(t, &k.id, e)?;
        }
    }
    Ok(())
}

fn entries_where(
    c: &Connection,
    filter: &str,
    args: impl rusqlite::Params,
) -> rusqlite::Result<Vec<InboxEntry>> {
    let sql = format!(
        "SELECT i.agent_id, i.sequence, i.state, i.attempts, i.last_attempt_at, {MESSAGE_COLS} \
         FROM inbox i JOIN messages m ON m.seq = i.message_seq WHERE {filter}"
    );
    let mut stmt = c.prepare_cached(&sql)?;
    let rows = stmt.query_map(args, entry_row)?;
    rows.collect()
}

/// An inbox entry read as `agent_id, sequence, state, attempts, last_attempt_at`, then
/// [`MESSAGE_COLS`].
fn entry_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<InboxEntry> {
    Ok(InboxEntry {
        agent_id: r.get(0)?,
        sequence: r.get::<_, i64>(1)? as u64,
        state: state_from(r.get(2)?),
        attempts: r.get::<_, i64>(3)? as u32,
        last_attempt_at: r.get(4)?,
        message: message_row(r, 5)?,
    })
}

/// An inbox's unacknowledged entries, from its counter (0 for an inbox never written to).
fn pending_in(c: &Connection, agent_id: &str) -> rusqlite::Result<u64> {
    let n: Option<i64> = c
        .prepare_cached("SELECT pending FROM inbox_counters WHERE agent_id = ?1")?
        .query_row([agent_id], |r| r.get(0))
        .optional()?;
    Ok(n.unwrap_or(0).max(0) as u64)
}

/// Deliverable inbox entries of one agent (for a lease) by `sql` ([`LEASE_DUE`], [`LEASE_NEW`]
/// or [`LEASE_LOST`]): (sequence, attempts so far, the message columns a delivery needs).
fn lease_candidates(
    c: &Connection,
    sql: &str,
    args: impl rusqlite::Params,
) -> rusqlite::Result<Vec<(u64, u32, DeliveredMessage)>> {
    let mut stmt = c.prepare_cached(sql)?;
    let rows = stmt.query_map(args, |r| {
        Ok((
            r.get::<_, i64>(0)? as u64,
            r.get::<_, i64>(1)? as u32,
            DeliveredMessage {
                tenant_id: r.get(2)?,
                attrs: r.get(3)?,
                data: r.get(4)?,
                received_at: r.get(5)?,
            },
        ))
    })?;
    rows.collect()
}

/// Leases that ran out (`?2` = now, `?3` = max attempts, `?4` = limit).
const LEASE_DUE: &str = "SELECT i.sequence, i.attempts, m.tenant_id, m.attrs, m.data, m.received_at \
     FROM inbox i INDEXED BY inbox_due JOIN messages m ON m.seq = i.message_seq \
     WHERE i.agent_id = ?1 AND i.state = 1 AND i.visible_at <= ?2 AND i.expires_at > ?2 \
     AND i.attempts < ?3 ORDER BY i.sequence LIMIT ?4";

/// Never-delivered entries above `?3` (`?2` = now, `?4` = limit). Deliverable once committed,
/// whatever their `received_at`: publishers read the clock before their commit, so an entry can
/// carry a later time than the lease's `now`, and skipping it below a receiver's cursor would
/// strand it.
const LEASE_NEW: &str = "SELECT i.sequence, i.attempts, m.tenant_id, m.attrs, m.data, m.received_at \
     FROM inbox i INDEXED BY inbox_new JOIN messages m ON m.seq = i.message_seq \
     WHERE i.agent_id = ?1 AND i.state = 0 AND i.sequence > ?3 AND i.expires_at > ?2 \
     ORDER BY i.sequence LIMIT ?4";

/// Never-delivered entries at or below `?3` visible since `?5` or before (`?2` = now, `?4` =
/// limit): a lease whose write was lost (a crash after the frame left), or one given back after
/// the receiver's cursor passed it. Normally none, so the partial index's range is empty.
const LEASE_LOST: &str = "SELECT i.sequence, i.attempts, m.tenant_id, m.attrs, m.data, m.received_at \
     FROM inbox i INDEXED BY inbox_new JOIN messages m ON m.seq = i.message_seq \
     WHERE i.agent_id = ?1 AND i.state = 0 AND i.sequence <= ?3 AND i.visible_at <= ?5 \
     AND i.expires_at > ?2 ORDER BY i.sequence LIMIT ?4";

fn settle(t: &Transaction<'_>, entries: &[InboxEntry], state: EntryState) -> rusqlite::Result<()> {
    for e in entries {
        t.prepare_cached(
            "UPDATE inbox SET state = ?3, lease = NULL WHERE agent_id = ?1 AND sequence = ?2",
        )?
        .execute(params![e.agent_id, e.sequence as i64, state_code(state)])?;
        t.prepare_cached("UPDATE inbox_counters SET pending = pending - 1 WHERE agent_id = ?1")?
            .execute([&e.agent_id])?;
    }
    Ok(())
}

/// A read transaction from cached `BEGIN` and `ROLLBACK` statements, ended when dropped: a
/// lease takes one per read, and rusqlite's `Transaction` parses both statements each time,
/// which showed in profiles of the lease (SQLite's parser).
struct Snapshot<'c>(&'c Connection);

impl<'c> Snapshot<'c> {
    fn begin(c: &'c Connection) -> rusqlite::Result<Snapshot<'c>> {
        if !c.is_autocommit() {
            // A snapshot whose `ROLLBACK` failed at its drop: ended here.
            c.prepare_cached("ROLLBACK")?.execute([])?;
        }
        c.prepare_cached("BEGIN")?.execute([])?;
        Ok(Snapshot(c))
    }
}

impl Drop for Snapshot<'_> {
    fn drop(&mut self) {
        // Nothing was written; a failure here is ended by the connection's next `begin`.
        if let Ok(mut end) = self.0.prepare_cached("ROLLBACK") {
            let _ = end.execute([]);
        }
    }
}

fn lease_token(agent: &str, sequence: u64, attempt: u32, now: i64) -> String {
    // Unique per (entry, attempt); only its equality matters, never its secrecy: acks are
    // authenticated by the agent's bearer credential.
    let _ = agent;
    format!("d{sequence}.{attempt}.{now}")
}

/// An update of one row by its id: `NotFound` when it changed none.
fn one_changed(rows: usize) -> StoreResult<()> {
    if rows == 0 {
        Err(StoreError::NotFound)
    } else {
        Ok(())
    }
}

fn insert_tenant(tx: &Transaction<'_>, t: &TenantRow) -> StoreResult<()> {
    tx.execute(
        &format!("INSERT INTO tenants ({TENANT_COLS}) VALUES (?1, ?2, ?3, ?4, ?5)"),
        params![t.id, t.slug, t.data_key, t.created_at, t.suspended_at],
    )
    .map_err(conflict("tenant"))?;
    Ok(())
}

fn insert_workspace(tx: &Transaction<'_>, w: &WorkspaceRow) -> StoreResult<()> {
    tx.execute(
        "INSERT INTO workspaces (id, tenant_id, slug, policy, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![w.id, w.tenant_id, w.slug, w.policy, w.created_at],
    )
    .map_err(conflict("workspace"))?;
    Ok(())
}

const USER_COLS: &str = "id, tenant_id, workspace_id, name, role, created_at";

fn user_row(r: &Row<'_>) -> rusqlite::Result<UserRow> {
    Ok(UserRow {
        id: r.get(0)?,
        tenant_id: r.get(1)?,
        workspace_id: r.get(2)?,
        name: r.get(3)?,
        role: role_from(&r.get::<_, String>(4)?),
        created_at: r.get(5)?,
    })
}

fn insert_user(tx: &Transaction<'_>, u: &UserRow) -> StoreResult<()> {
    tx.execute(
        &format!("INSERT INTO users ({USER_COLS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6)"),
        params![
            u.id,
            u.tenant_id,
            u.workspace_id,
            u.name,
            u.role.as_str(),
            u.created_at
        ],
    )?;
    Ok(())
}

fn insert_token(tx: &Transaction<'_>, t: &TokenRow) -> StoreResult<()> {
    let (kind, subject) = t.subject.stored();
    tx.execute(
        "INSERT INTO tokens (hash, kind, subject_id, created_at, label, revoked_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![
            t.hash.to_vec(),
            kind,
            subject,
            t.created_at,
            t.label,
            t.revoked_at
        ],
    )?;
    Ok(())
}

const TOKEN_COLS: &str = "hash, kind, subject_id, created_at, label, revoked_at";

fn token_row(r: &Row<'_>) -> rusqlite::Result<TokenRow> {
    let hash: Vec<u8> = r.get(0)?;
    let kind: String = r.get(1)?;
    Ok(TokenRow {
        hash: <[u8; 32]>::try_from(hash.as_slice()).unwrap_or_default(),
        subject: TokenSubject::from_stored(&kind, r.get(2)?),
        created_at: r.get(3)?,
        label: r.get(4)?,
        revoked_at: r.get(5)?,
    })
}

/// The words of a query as `agentbus_search_match` reads them (`super::search_match`).
fn pending_query(groups: &[Vec<String>]) -> String {
    groups
        .iter()
        .map(|g| g.join("\t"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// An FTS5 query for search word groups: every group, each one of its words. Each word is a
/// quoted string (the index words are base-32 digits, quoted anyway so nothing is read as
/// syntax).
fn fts_query(groups: &[Vec<String>]) -> String {
    let quote = |w: &String| format!("\"{}\"", w.replace('"', "\"\""));
    groups
        .iter()
        .map(|g| format!("({})", g.iter().map(quote).collect::<Vec<_>>().join(" OR ")))
        .collect::<Vec<_>>()
        .join(" AND ")
}

/// The SQL condition on `m` (a `messages` row) for what `viewer` may read (§7, per message), with
/// its `?3` argument: an agent reads what it sent or holds a copy of; a workspace admin what an
/// agent of its workspace sent or holds; a tenant admin all of its tenant's.
pub(super) fn viewer_filter(viewer: &ConversationViewer) -> (&'static str, String) {
    match viewer {
        ConversationViewer::Agent(id) => (
            "AND (m.source_agent_id = ?3 OR EXISTS (SELECT 1 FROM inbox i \
             WHERE i.message_seq = m.seq AND i.agent_id = ?3))",
            id.clone(),
        ),
        ConversationViewer::Workspace(ws) => (
            "AND (EXISTS (SELECT 1 FROM agents a WHERE a.id = m.source_agent_id AND a.workspace_id = ?3) \
             OR EXISTS (SELECT 1 FROM inbox i JOIN agents a ON a.id = i.agent_id \
             WHERE i.message_seq = m.seq AND a.workspace_id = ?3))",
            ws.clone(),
        ),
        ConversationViewer::Tenant => ("AND ?3 IS NOT NULL", String::new()),
    }
}

impl Store for SqliteStore {
    async fn create_tenant(&self, t: TenantRow) -> StoreResult<()> {
        self.write(move |tx| insert_tenant(tx, &t)).await
    }

    async fn tenant(&self, id: &str) -> StoreResult<Option<TenantRow>> {
        let id = id.to_owned();
        self.read(move |c| {
            Ok(
                c.prepare_cached(&format!("SELECT {TENANT_COLS} FROM tenants WHERE id = ?1"))?
                    .query_row([id], tenant_row)
                    .optional()?,
            )
        })
        .await
    }

    async fn tenant_by_slug(&self, slug: &str) -> StoreResult<Option<TenantRow>> {
        let slug = slug.to_owned();
        self.read(move |c| {
            Ok(c.prepare_cached(&format!(
                "SELECT {TENANT_COLS} FROM tenants WHERE slug = ?1"
            ))?
            .query_row([slug], tenant_row)
            .optional()?)
        })
        .await
    }

    async fn tenants(&self) -> StoreResult<Vec<TenantRow>> {
        self.read(|c| {
            let mut s = c.prepare_cached(&format!(
                "SELECT {TENANT_COLS} FROM tenants ORDER BY created_at"
            ))?;
            let rows = s.query_map([], tenant_row)?.collect::<Result<_, _>>()?;
            Ok(rows)
        })
        .await
    }

    async fn create_workspace(&self, w: WorkspaceRow) -> StoreResult<()> {
        self.write(move |tx| insert_workspace(tx, &w)).await
    }

    async fn workspace(&self, id: &str) -> StoreResult<Option<WorkspaceRow>> {
        let id = id.to_owned();
        self.read(move |c| {
            Ok(c.prepare_cached(
                "SELECT id, tenant_id, slug, policy, created_at FROM workspaces WHERE id = ?1",
            )?
            .query_row([id], workspace_row)
            .optional()?)
        })
        .await
    }

    async fn workspace_by_slug(
        &self,
        tenant_id: &str,
        slug: &str,
    ) -> StoreResult<Option<WorkspaceRow>> {
        let (tenant_id, slug) = (tenant_id.to_owned(), slug.to_owned());
        self.read(move |c| {
            Ok(c.prepare_cached(
                "SELECT id, tenant_id, slug, policy, created_at FROM workspaces WHERE tenant_id = ?1 AND slug = ?2",
            )?
            .query_row([tenant_id, slug], workspace_row)
            .optional()?)
        })
        .await
    }

    async fn set_workspace_policy(&self, id: &str, policy: String) -> StoreResult<()> {
        let id = id.to_owned();
        self.write(move |tx| {
            let n = tx.execute(
                "UPDATE workspaces SET policy = ?2 WHERE id = ?1",
                params![id, policy],
            )?;
            one_changed(n)
        })
        .await
    }

    async fn create_user(&self, u: UserRow) -> StoreResult<()> {
        self.write(move |tx| insert_user(tx, &u)).await
    }

    async fn user(&self, id: &str) -> StoreResult<Option<UserRow>> {
        let id = id.to_owned();
        self.read(move |c| {
            Ok(
                c.prepare_cached(&format!("SELECT {USER_COLS} FROM users WHERE id = ?1"))?
                    .query_row([id], user_row)
                    .optional()?,
            )
        })
        .await
    }

    async fn create_token(&self, t: TokenRow) -> StoreResult<()> {
        self.write(move |tx| insert_token(tx, &t)).await
    }

    async fn token(&self, hash: [u8; 32]) -> StoreResult<Option<TokenRow>> {
        self.read(move |c| {
            Ok(c.prepare_cached(&format!(
                "SELECT {TOKEN_COLS} FROM tokens WHERE hash = ?1 AND revoked_at IS NULL"
            ))?
            .query_row([hash.to_vec()], token_row)
            .optional()?)
        })
        .await
    }

    async fn set_tenant_suspended(&self, id: &str, at: Option<i64>) -> StoreResult<()> {
        let id = id.to_owned();
        self.write(move |tx| {
            let n = tx.execute(
                "UPDATE tenants SET suspended_at = ?2 WHERE id = ?1",
                params![id, at],
            )?;
            one_changed(n)
        })
        .await
    }

    async fn workspaces(&self, tenant_id: &str) -> StoreResult<Vec<WorkspaceRow>> {
        let tenant_id = tenant_id.to_owned();
        self.read(move |c| {
            let mut s = c.prepare_cached(
                "SELECT id, tenant_id, slug, policy, created_at FROM workspaces WHERE tenant_id = ?1 ORDER BY slug",
            )?;
            let rows = s
                .query_map([tenant_id], workspace_row)?
                .collect::<Result<_, _>>()?;
            Ok(rows)
        })
        .await
    }

    async fn users_with_role(&self, role: Role) -> StoreResult<Vec<UserRow>> {
        self.read(move |c| {
            let mut s = c.prepare_cached(&format!(
                "SELECT {USER_COLS} FROM users WHERE role = ?1 ORDER BY created_at, id"
            ))?;
            let rows = s
                .query_map([role.as_str()], user_row)?
                .collect::<Result<_, _>>()?;
            Ok(rows)
        })
        .await
    }

    async fn users(&self, tenant_id: Option<&str>) -> StoreResult<Vec<UserRow>> {
        let tenant_id = tenant_id.map(str::to_owned);
        self.read(move |c| {
            let mut s = c.prepare_cached(&format!(
                "SELECT {USER_COLS} FROM users WHERE ?1 IS NULL OR tenant_id = ?1 \
                 ORDER BY created_at, rowid"
            ))?;
            let rows = s
                .query_map([tenant_id], user_row)?
                .collect::<Result<_, _>>()?;
            Ok(rows)
        })
        .await
    }

    async fn delete_user(&self, id: &str) -> StoreResult<bool> {
        let id = id.to_owned();
        self.write(move |tx| {
            tx.execute(
                "DELETE FROM tokens WHERE kind = 'user' AND subject_id = ?1",
                [&id],
            )?;
            tx.execute("DELETE FROM console_sessions WHERE user_id = ?1", [&id])?;
            Ok(tx.execute("DELETE FROM users WHERE id = ?1", [&id])? > 0)
        })
        .await
    }

    async fn user_tokens(&self, tenant_id: Option<&str>) -> StoreResult<Vec<TokenRow>> {
        let tenant_id = tenant_id.map(str::to_owned);
        self.read(move |c| {
            let mut s = c.prepare_cached(
                "SELECT t.hash, t.kind, t.subject_id, t.created_at, t.label, t.revoked_at \
                 FROM tokens t JOIN users u ON u.id = t.subject_id \
                 WHERE t.kind = 'user' AND (?1 IS NULL OR u.tenant_id = ?1) \
                 ORDER BY t.created_at, t.hash",
            )?;
            let rows = s
                .query_map([tenant_id], token_row)?
                .collect::<Result<_, _>>()?;
            Ok(rows)
        })
        .await
    }

    async fn revoke_token(&self, hash: [u8; 32], at: i64) -> StoreResult<bool> {
        self.write(move |tx| {
            Ok(tx.execute(
                "UPDATE tokens SET revoked_at = ?2 WHERE hash = ?1 AND revoked_at IS NULL",
                params![hash.to_vec(), at],
            )? > 0)
        })
        .await
    }

    async fn provision_tenant(
        &self,
        t: TenantRow,
        w: WorkspaceRow,
        u: UserRow,
        token: TokenRow,
    ) -> StoreResult<()> {
        self.write(move |tx| {
            insert_tenant(tx, &t)?;
            insert_workspace(tx, &w)?;
            insert_user(tx, &u)?;
            insert_token(tx, &token)
        })
        .await
    }

    async fn create_agent(&self, a: AgentRow, aliases: Vec<String>) -> StoreResult<()> {
        self.write(move |tx| {
            // A name may not equal a live agent's name or alias in the workspace (§4.1, §4.3).
            let alias_clash: bool = tx
                .prepare_cached("SELECT EXISTS (SELECT 1 FROM aliases WHERE workspace_id = ?1 AND alias = ?2)")?
                .query_row(params![a.workspace_id, a.name], |r| r.get(0))?;
            if alias_clash {
                return Err(StoreError::Conflict(format!("name {}", a.name)));
            }
            tx.execute(
                &format!("INSERT INTO agents ({AGENT_COLS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)"),
                params![a.id, a.tenant_id, a.workspace_id, a.name, a.owner_id, a.card, a.visibility, a.created_at, a.updated_at, a.deleted_at, a.suspended_at],
            )
            .map_err(conflict(&format!("name {}", a.name)))?;
            set_aliases(tx, &a.workspace_id, &a.id, &aliases)
        })
        .await
    }

    async fn agent(&self, id: &str) -> StoreResult<Option<AgentRow>> {
        let id = id.to_owned();
        self.read(move |c| {
            Ok(
                c.prepare_cached(&format!("SELECT {AGENT_COLS} FROM agents WHERE id = ?1"))?
                    .query_row([id], agent_row)
                    .optional()?,
            )
        })
        .await
    }

    async fn agent_by_name(&self, workspace_id: &str, name: &str) -> StoreResult<Option<AgentRow>> {
        let (ws, name) = (workspace_id.to_owned(), name.to_owned());
        self.read(move |c| {
            let by_alias: Option<String> = c
                .prepare_cached(
                    "SELECT agent_id FROM aliases WHERE workspace_id = ?1 AND alias = ?2",
                )?
                .query_row(params![ws, name], |r| r.get(0))
                .optional()?;
            if let Some(id) = by_alias {
                return Ok(c
                    .prepare_cached(&format!("SELECT {AGENT_COLS} FROM agents WHERE id = ?1"))?
                    .query_row([id], agent_row)
                    .optional()?);
            }
            // The live agent first, else the latest deleted one (AB-4003 rather than AB-4001).
            Ok(c.prepare_cached(&format!(
                "SELECT {AGENT_COLS} FROM agents WHERE workspace_id = ?1 AND name = ?2 \
                 ORDER BY deleted_at IS NOT NULL, deleted_at DESC LIMIT 1"
            ))?
            .query_row(params![ws, name], agent_row)
            .optional()?)
        })
        .await
    }

    async fn agents(&self, tenant_id: &str) -> StoreResult<Vec<AgentRow>> {
        let tenant_id = tenant_id.to_owned();
        self.read(move |c| {
            let mut s = c.prepare_cached(&format!(
                "SELECT {AGENT_COLS} FROM agents WHERE tenant_id = ?1 AND deleted_at IS NULL ORDER BY workspace_id, name"
            ))?;
            let rows = s.query_map([tenant_id], agent_row)?.collect::<Result<_, _>>()?;
            Ok(rows)
        })
        .await
    }

    async fn aliases(&self, agent_id: &str) -> StoreResult<Vec<String>> {
        let agent_id = agent_id.to_owned();
        self.read(move |c| {
            let mut s =
                c.prepare_cached("SELECT alias FROM aliases WHERE agent_id = ?1 ORDER BY alias")?;
            let rows = s
                .query_map([agent_id], |r| r.get(0))?
                .collect::<Result<_, _>>()?;
            Ok(rows)
        })
        .await
    }

    async fn update_agent(&self, a: AgentRow, aliases: Option<Vec<String>>) -> StoreResult<()> {
        self.write(move |tx| {
            let n = tx.execute(
                "UPDATE agents SET card = ?2, visibility = ?3, updated_at = ?4 WHERE id = ?1 AND deleted_at IS NULL",
                params![a.id, a.card, a.visibility, a.updated_at],
            )?;
            one_changed(n)?;
            if let Some(aliases) = aliases {
                tx.execute("DELETE FROM aliases WHERE agent_id = ?1", [&a.id])?;
                set_aliases(tx, &a.workspace_id, &a.id, &aliases)?;
            }
            Ok(())
        })
        .await
    }

    async fn delete_agent(&self, id: &str, at: i64) -> StoreResult<Vec<InboxEntry>> {
        let id = id.to_owned();
        self.write(move |tx| {
            let n = tx.execute(
                "UPDATE agents SET deleted_at = ?2 WHERE id = ?1 AND deleted_at IS NULL",
                params![id, at],
            )?;
            one_changed(n)?;
            tx.execute("DELETE FROM aliases WHERE agent_id = ?1", [&id])?;
            tx.execute("DELETE FROM subscriptions WHERE agent_id = ?1", [&id])?;
            for forget in FORGET_SENT {
                // SQLite reads `$1` as a named parameter, bound here by position like `?1`.
                tx.execute(forget, [&id])?;
            }
            let pending = entries_where(tx, "i.agent_id = ?1 AND i.state IN (0, 1)", [&id])?;
            settle(tx, &pending, EntryState::Dead)?;
            let owing = pending.iter().filter(|e| notice_due(e, true));
            flag_owed(tx, owing, NoticeKind::Deleted)?;
            Ok(pending)
        })
        .await
    }

    async fn add_key(&self, k: KeyRow, max_active: usize, now: i64) -> StoreResult<()> {
        self.write(move |tx| {
            let active: i64 = tx
                .prepare_cached("SELECT count(*) FROM keys WHERE agent_id = ?1 AND revoked_at IS NULL AND expires_at > ?2")?
                .query_row(params![k.agent_id, now], |r| r.get(0))?;
            if active as usize >= max_active {
                return Err(StoreError::Limit(format!("{active} active keys")));
            }
            tx.execute(
                "INSERT INTO keys (id, agent_id, public_key, created_at, expires_at, revoked_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![k.id, k.agent_id, k.public_key, k.created_at, k.expires_at, k.revoked_at],
            )
            .map_err(conflict("key"))?;
            Ok(())
        })
        .await
    }

    async fn revoke_key(&self, agent_id: &str, key_id: &str, at: i64) -> StoreResult<()> {
        let (agent_id, key_id) = (agent_id.to_owned(), key_id.to_owned());
        self.write(move |tx| {
            let n = tx.execute(
                "UPDATE keys SET revoked_at = coalesce(revoked_at, ?3) WHERE id = ?1 AND agent_id = ?2",
                params![key_id, agent_id, at],
            )?;
            one_changed(n)
        })
        .await
    }

    async fn keys(&self, agent_id: &str) -> StoreResult<Vec<KeyRow>> {
        let agent_id = agent_id.to_owned();
        self.read(move |c| {
            let mut s = c.prepare_cached(
                "SELECT id, agent_id, public_key, created_at, expires_at, revoked_at FROM keys WHERE agent_id = ?1 ORDER BY created_at, id",
            )?;
            let rows = s.query_map([agent_id], key_row)?.collect::<Result<_, _>>()?;
            Ok(rows)
        })
        .await
    }

    async fn key(&self, key_id: &str) -> StoreResult<Option<KeyRow>> {
        let key_id = key_id.to_owned();
        self.read(move |c| {
            Ok(c.prepare_cached("SELECT id, agent_id, public_key, created_at, expires_at, revoked_at FROM keys WHERE id = ?1")?
                .query_row([key_id], key_row)
                .optional()?)
        })
        .await
    }

    async fn suspend_agent(&self, id: &str, at: i64) -> StoreResult<Vec<InboxEntry>> {
        let id = id.to_owned();
        self.write(move |tx| {
            let n = tx.execute(
                "UPDATE agents SET suspended_at = ?2 WHERE id = ?1 AND deleted_at IS NULL AND suspended_at IS NULL",
                params![id, at],
            )?;
            if n == 0 {
                // Suspended already, or not a live agent (NotFound).
                let live = tx
                    .prepare_cached("SELECT 1 FROM agents WHERE id = ?1 AND deleted_at IS NULL")?
                    .exists([&id])?;
                one_changed(usize::from(live))?;
                return Ok(Vec::new());
            }
            let pending = entries_where(tx, "i.agent_id = ?1 AND i.state IN (0, 1)", [&id])?;
            Ok(mark_holds(tx, pending)?)
        })
        .await
    }

    async fn resume_agent(&self, id: &str) -> StoreResult<()> {
        let id = id.to_owned();
        self.write(move |tx| {
            let n = tx.execute(
                "UPDATE agents SET suspended_at = NULL WHERE id = ?1 AND deleted_at IS NULL",
                [id],
            )?;
            one_changed(n)
        })
        .await
    }

    async fn subscribe(
        &self,
        workspace_id: &str,
        topic: &str,
        agent_id: &str,
        at: i64,
    ) -> StoreResult<TopicRow> {
        let (ws, name, agent) = (
            workspace_id.to_owned(),
            topic.to_owned(),
            agent_id.to_owned(),
        );
        self.write(move |tx| {
            tx.execute(
                "INSERT OR IGNORE INTO topics (id, workspace_id, name, created_at) VALUES (?1 || ':' || ?2, ?1, ?2, ?3)",
                params![ws, name, at],
            )?;
            let row = tx.query_row(
                "SELECT id, workspace_id, name, created_at FROM topics WHERE workspace_id = ?1 AND name = ?2",
                params![ws, name],
                |r| Ok(TopicRow { id: r.get(0)?, workspace_id: r.get(1)?, name: r.get(2)?, created_at: r.get(3)? }),
            )?;
            tx.execute(
                "INSERT OR IGNORE INTO subscriptions (topic_id, agent_id, created_at) VALUES (?1, ?2, ?3)",
                params![row.id, agent, at],
            )?;
            Ok(row)
        })
        .await
    }

    async fn unsubscribe(
        &self,
        workspace_id: &str,
        topic: &str,
        agent_id: &str,
    ) -> StoreResult<()> {
        let (ws, name, agent) = (
            workspace_id.to_owned(),
            topic.to_owned(),
            agent_id.to_owned(),
        );
        self.write(move |tx| {
            tx.execute(
                "DELETE FROM subscriptions WHERE agent_id = ?3 AND topic_id = (SELECT id FROM topics WHERE workspace_id = ?1 AND name = ?2)",
                params![ws, name, agent],
            )?;
            Ok(())
        })
        .await
    }

    async fn topic(
        &self,
        workspace_id: &str,
        topic: &str,
    ) -> StoreResult<Option<(TopicRow, Vec<String>)>> {
        let (ws, name) = (workspace_id.to_owned(), topic.to_owned());
        self.read(move |c| {
            let row = c
                .prepare_cached("SELECT id, workspace_id, name, created_at FROM topics WHERE workspace_id = ?1 AND name = ?2")?
                .query_row(params![ws, name], |r| {
                    Ok(TopicRow { id: r.get(0)?, workspace_id: r.get(1)?, name: r.get(2)?, created_at: r.get(3)? })
                })
                .optional()?;
            let Some(row) = row else { return Ok(None) };
            let mut s = c.prepare_cached("SELECT agent_id FROM subscriptions WHERE topic_id = ?1 ORDER BY agent_id")?;
            let subs = s.query_map([&row.id], |r| r.get(0))?.collect::<Result<_, _>>()?;
            Ok(Some((row, subs)))
        })
        .await
    }

    async fn topics(&self, workspace_id: &str) -> StoreResult<Vec<(TopicRow, u64)>> {
        let ws = workspace_id.to_owned();
        self.read(move |c| {
            let mut s = c.prepare_cached(
                "SELECT t.id, t.workspace_id, t.name, t.created_at, (SELECT count(*) FROM subscriptions s WHERE s.topic_id = t.id) \
                 FROM topics t WHERE t.workspace_id = ?1 ORDER BY t.name",
            )?;
            let rows = s
                .query_map([ws], |r| {
                    Ok((
                        TopicRow { id: r.get(0)?, workspace_id: r.get(1)?, name: r.get(2)?, created_at: r.get(3)? },
                        r.get::<_, i64>(4)? as u64,
                    ))
                })?
                .collect::<Result<_, _>>()?;
            Ok(rows)
        })
        .await
    }

    async fn recent_message(
        &self,
        tenant_id: &str,
        source: &str,
        id: &str,
        since: i64,
    ) -> StoreResult<Option<MessageRow>> {
        let (t, s, i) = (tenant_id.to_owned(), source.to_owned(), id.to_owned());
        self.read(move |c| Ok(recent_in(c, &t, &s, &i, since)?))
            .await
    }

    async fn idempotent_message(
        &self,
        key: &IdempotencyKey,
        since: i64,
    ) -> StoreResult<Option<MessageRow>> {
        let key = key.clone();
        self.read(move |c| Ok(idempotent_in(c, &key, since)?)).await
    }

    async fn publish(&self, m: NewMessage) -> StoreResult<PublishOutcome> {
        // A task write or a notice can be refused (a lost race on the task's version, a notice
        // sent already), so it gets a savepoint of its own; a plain message's inserts fail only on I/O errors.
        if m.task.is_some() || m.notice_of.is_some() {
            self.write(move |tx| insert_message(tx, &m)).await
        } else {
            self.write_shared(true, move |tx| insert_message(tx, &m))
                .await
        }
    }

    async fn search_messages(&self, q: MessageSearch) -> StoreResult<Vec<MessageRow>> {
        self.read(move |c| {
            let (filter, who) = viewer_filter(&q.viewer);
            // With words, the rows come from the index's matches (`+` keeps the planner off the
            // tenant's index, whose walk over every message of the tenant cost a rare word as much
            // as a common one).
            let tenant = match q.words.is_empty() {
                true => "m.tenant_id",
                false => "+m.tenant_id",
            };
            let mut sql = format!(
                "SELECT {MESSAGE_COLS} FROM messages m WHERE {tenant} = ?1 AND ?2 IS NOT NULL {filter}"
            );
            let mut args: Vec<rusqlite::types::Value> =
                vec![q.tenant_id.into(), 1i64.into(), who.into()];
            let mut arg = |sql: &mut String, cond: &str, v: rusqlite::types::Value| {
                args.push(v);
                sql.push_str(&cond.replace('?', &format!("?{}", args.len())));
            };
            if !q.words.is_empty() {
                // The merged rows and those still pending (`super::merge_search_pending`).
                arg(
                    &mut sql,
                    " AND m.seq IN (SELECT rowid FROM search_terms WHERE search_terms MATCH ?",
                    fts_query(&q.words).into(),
                );
                arg(
                    &mut sql,
                    " UNION ALL SELECT seq FROM search_pending WHERE agentbus_search_match(tags, ?))",
                    pending_query(&q.words).into(),
                );
            }
            match q.kind {
                Some(k) if k.ends_with('*') => {
                    let prefix = k.trim_end_matches('*').to_owned();
                    arg(&mut sql, " AND substr(m.kind, 1, length(?)) = ", prefix.clone().into());
                    arg(&mut sql, "?", prefix.into());
                }
                Some(k) => arg(&mut sql, " AND m.kind = ?", k.into()),
                None => {}
            }
            if let Some(c) = q.conversation_id {
                arg(&mut sql, " AND m.conversation_id = ?", c.into());
            }
            if let Some(s) = q.source {
                arg(&mut sql, " AND m.source = ?", s.into());
            }
            if let Some(t) = q.to_text {
                arg(&mut sql, " AND m.to_text = ?", t.into());
            }
            if q.in_task {
                sql.push_str(" AND m.task_id IS NOT NULL");
            }
            if let Some(t) = q.since {
                arg(&mut sql, " AND m.received_at >= ?", t.into());
            }
            if let Some(t) = q.until {
                arg(&mut sql, " AND m.received_at < ?", t.into());
            }
            if let Some((at, seq)) = q.before {
                arg(&mut sql, " AND (m.received_at < ?", at.into());
                arg(&mut sql, " OR (m.received_at = ?", at.into());
                arg(&mut sql, " AND m.seq < ?))", seq.into());
            }
            arg(
                &mut sql,
                " ORDER BY m.received_at DESC, m.seq DESC LIMIT ?",
                i64::from(q.limit).into(),
            );
            let mut s = c.prepare(&sql)?;
            let rows = s
                .query_map(rusqlite::params_from_iter(args), |r| message_row(r, 0))?
                .collect::<Result<_, _>>()?;
            Ok(rows)
        })
        .await
    }

    async fn pending_count(&self, agent_id: &str) -> StoreResult<u64> {
        let agent = agent_id.to_owned();
        self.read(move |c| Ok(pending_in(c, &agent)?)).await
    }

    async fn lease(&self, req: LeaseRequest) -> StoreResult<Vec<Delivery>> {
        // What is deliverable is read on a read connection and the lease is queued for the writer
        // without waiting for it: the writer applies jobs in order, so the lease is recorded before
        // any ack of it, and a delivery never waits behind a group commit's fsync. No entry is
        // handed out twice: one whose lease write is still queued is `busy`, and one whose write
        // landed while this read ran may have been read as unleased, so either sends the read
        // round again (after the write lands). A WebSocket's own cursor keeps it from meeting any but
        // entries below it whose lease was lost (`LEASE_LOST`).
        let candidates = loop {
            let started = {
                let mut leasing = self.inner.leasing.lock().map_err(|_| super::closed())?;
                let a = leasing.entry(req.agent_id.clone()).or_default();
                if a.reading == 0 {
                    a.landed.clear();
                }
                a.reading += 1;
                a.generation
            };
            let read = self.read_inline(|c| {
                // Both reads in one snapshot: apart, a lease write landing between them hid an
                // entry from both (not yet due in the first, no longer new in the second).
                let _snapshot = Snapshot::begin(c)?;
                // Leases that ran out, never-delivered entries above `after`, and those below it
                // whose lease was lost; each query walks its own partial index (see migration 3),
                // so settled entries cost nothing.
                let mut due = lease_candidates(
                    c,
                    LEASE_DUE,
                    params![req.agent_id, req.now, req.max_attempts, req.limit],
                )?;
                due.extend(lease_candidates(
                    c,
                    LEASE_NEW,
                    params![req.agent_id, req.now, req.after as i64, req.limit],
                )?);
                if req.after > 0 {
                    due.extend(lease_candidates(
                        c,
                        LEASE_LOST,
                        params![
                            req.agent_id,
                            req.now,
                            req.after as i64,
                            req.limit,
                            req.now - req.visibility_ms
                        ],
                    )?);
                }
                Ok(due)
            });
            let wait = {
                let mut leasing = self.inner.leasing.lock().map_err(|_| super::closed())?;
                let a = leasing.entry(req.agent_id.clone()).or_default();
                a.reading -= 1;
                let mut candidates = read?;
                candidates.sort_by_key(|e| e.0);
                candidates.truncate(req.limit as usize);
                let stale = candidates
                    .iter()
                    .any(|e| a.landed.get(&e.0).is_some_and(|g| *g > started));
                let busy = candidates.iter().any(|e| a.busy.contains(&e.0));
                if !stale && !busy {
                    a.busy.extend(candidates.iter().map(|e| e.0));
                    break candidates;
                }
                busy.then(|| a.notify.clone())
            };
            if let Some(notify) = wait {
                // Enabled before looking again, so a landing between the look and the wait still
                // wakes it.
                let notified = notify.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                let still_busy = self
                    .inner
                    .leasing
                    .lock()
                    .map_err(|_| super::closed())?
                    .get(&req.agent_id)
                    .is_some_and(|a| !a.busy.is_empty());
                if still_busy {
                    notified.await;
                }
            }
        };
        if candidates.is_empty() {
            return Ok(Vec::new());
        }
        let mut out = Vec::with_capacity(candidates.len());
        let mut rows = Vec::with_capacity(candidates.len());
        for (sequence, attempts, message) in candidates {
            let attempt = attempts + 1;
            let token = lease_token(&req.agent_id, sequence, attempt, req.now);
            rows.push((sequence, attempts, attempt, token.clone()));
            out.push(Delivery {
                sequence,
                token,
                attempt,
                message,
            });
        }
        let seqs: Vec<u64> = rows.iter().map(|r| r.0).collect();
        let (agent, now, visible_at) = (req.agent_id.clone(), req.now, req.now + req.visibility_ms);
        let store = self.clone();
        let release = move |_: StoreResult<()>| {
            if let Ok(mut leasing) = store.inner.leasing.lock()
                && let Some(a) = leasing.get_mut(&req.agent_id)
            {
                a.generation += 1;
                for s in &seqs {
                    a.busy.remove(s);
                    a.landed.insert(*s, a.generation);
                }
                a.notify.notify_waiters();
            }
        };
        self.queue(
            false,
            false,
            move |tx| {
                // Conditional on the attempt count read above: a lease, ack or dead-letter that got
                // there first wins, and this delivery's token is then simply never current.
                for (sequence, old, attempt, token) in rows {
                    tx.prepare_cached(
                        "UPDATE inbox SET state = 1, attempts = ?3, visible_at = ?4, lease = ?5, last_attempt_at = ?6 \
                         WHERE agent_id = ?1 AND sequence = ?2 AND attempts = ?7 AND state IN (0, 1)",
                    )?
                    .execute(params![agent, sequence as i64, attempt, visible_at, token, now, old])?;
                }
                Ok(())
            },
            release,
        )?;
        Ok(out)
    }

    async fn ack(
        &self,
        agent_id: &str,
        acks: Vec<(u64, String)>,
        at: i64,
    ) -> StoreResult<Vec<AckOutcome>> {
        let agent = agent_id.to_owned();
        self.write_shared(false, move |tx| {
            let mut out = Vec::with_capacity(acks.len());
            let mut settled = 0i64;
            for (sequence, token) in acks {
                let row: Option<(i64, Option<String>)> = tx
                    .prepare_cached("SELECT state, lease FROM inbox WHERE agent_id = ?1 AND sequence = ?2")?
                    .query_row(params![agent, sequence as i64], |r| Ok((r.get(0)?, r.get(1)?)))
                    .optional()?;
                let outcome = match row {
                    Some((state, Some(lease))) if lease == token => match state_from(state) {
                        EntryState::Leased => {
                            tx.prepare_cached("UPDATE inbox SET state = 2, acked_at = ?3 WHERE agent_id = ?1 AND sequence = ?2")?
                                .execute(params![agent, sequence as i64, at])?;
                            settled += 1;
                            AckOutcome::Acked
                        }
                        EntryState::Acked => AckOutcome::AlreadyAcked,
                        _ => AckOutcome::Stale,
                    },
                    _ => AckOutcome::Stale,
                };
                out.push(outcome);
            }
            // One counter update for the batch.
            if settled > 0 {
                tx.prepare_cached("UPDATE inbox_counters SET pending = pending - ?2 WHERE agent_id = ?1")?
                    .execute(params![agent, settled])?;
            }
            Ok(out)
        })
        .await
    }

    async fn reap_inboxes(&self, now: i64, max_attempts: u32) -> StoreResult<ReapReport> {
        self.write(move |tx| {
            let dead = entries_where(
                tx,
                "i.state = 1 AND i.visible_at <= ?1 AND i.attempts >= ?2",
                params![now, max_attempts],
            )?;
            settle(tx, &dead, EntryState::Dead)?;
            let expired = entries_where(tx, "i.state IN (0, 1) AND i.expires_at <= ?1", [now])?;
            settle(tx, &expired, EntryState::Expired)?;
            let report = ReapReport { dead, expired };
            flag_owed(tx, report.owing(), NoticeKind::Settled)?;
            Ok(report)
        })
        .await
    }

    async fn pending_notices(
        &self,
        after: (String, u64),
        limit: u32,
    ) -> StoreResult<Vec<(InboxEntry, NoticeKind)>> {
        self.read(move |c| {
            // The settled entries' marks and the holds, each over its own partial index.
            let args = params![after.0, after.1 as i64, limit];
            let sql = format!(
                "SELECT i.agent_id, i.sequence, i.state, i.attempts, i.last_attempt_at, {MESSAGE_COLS}, i.notice \
                 FROM inbox i JOIN messages m ON m.seq = i.message_seq \
                 WHERE i.notice IS NOT NULL AND (i.agent_id, i.sequence) > (?1, ?2) \
                 ORDER BY i.agent_id, i.sequence LIMIT ?3"
            );
            let mut stmt = c.prepare_cached(&sql)?;
            let last = stmt.column_count() - 1;
            let settled = stmt
                .query_map(args, |r| {
                    Ok((entry_row(r)?, NoticeKind::from_code(r.get(last)?)))
                })?
                .collect::<Result<_, _>>()?;
            let holds = entries_where(
                c,
                "i.hold IS NOT NULL AND (i.agent_id, i.sequence) > (?1, ?2) \
                 ORDER BY i.agent_id, i.sequence LIMIT ?3",
                args,
            )?;
            Ok(crate::model::owed_page(settled, holds, limit))
        })
        .await
    }

    async fn pending_task_notices(
        &self,
        after: &str,
        limit: u32,
    ) -> StoreResult<Vec<(TaskRow, u8)>> {
        let after = after.to_owned();
        self.read(move |c| {
            let mut s = c.prepare_cached(&format!(
                "SELECT {TASK_COLS}, notices FROM tasks WHERE notices != 0 AND id > ?1 ORDER BY id LIMIT ?2"
            ))?;
            let rows = s.query_map(params![after, limit], |r| Ok((task_row(r)?, r.get(15)?)))?;
            Ok(rows.collect::<Result<_, _>>()?)
        })
        .await
    }

    async fn forgo_notice(&self, owed: Owed) -> StoreResult<()> {
        self.write(move |tx| match clear_owed(tx, &owed) {
            Err(StoreError::Conflict(_)) => Ok(()),
            done => done,
        })
        .await
    }

    async fn next_visible(&self, agent_id: &str) -> StoreResult<Option<i64>> {
        let agent = agent_id.to_owned();
        self.read(move |c| {
            Ok(c.prepare_cached(
                "SELECT min(visible_at) FROM inbox WHERE agent_id = ?1 AND state = 1",
            )?
            .query_row([agent], |r| r.get(0))?)
        })
        .await
    }

    async fn conversation(
        &self,
        tenant_id: &str,
        conversation_id: &str,
        viewer: &ConversationViewer,
    ) -> StoreResult<Option<Vec<MessageRow>>> {
        let (t, cnv) = (tenant_id.to_owned(), conversation_id.to_owned());
        let viewer = viewer.clone();
        self.read(move |c| {
            let (filter, who) = viewer_filter(&viewer);
            let mut s = c.prepare_cached(&format!(
                "SELECT {MESSAGE_COLS} FROM messages m WHERE m.tenant_id = ?1 AND m.conversation_id = ?2 {filter} \
                 ORDER BY m.received_at, m.seq"
            ))?;
            let rows: Vec<MessageRow> = s
                .query_map(params![t, cnv, who], |r| message_row(r, 0))?
                .collect::<Result<_, _>>()?;
            Ok(if rows.is_empty() { None } else { Some(rows) })
        })
        .await
    }

    async fn message(&self, seq: i64) -> StoreResult<Option<MessageRow>> {
        self.read(move |c| Ok(message_by_seq(c, seq)?)).await
    }

    async fn task(&self, id: &str) -> StoreResult<Option<TaskRow>> {
        let id = id.to_owned();
        self.read(move |c| {
            Ok(
                c.prepare_cached(&format!("SELECT {TASK_COLS} FROM tasks WHERE id = ?1"))?
                    .query_row([id], task_row)
                    .optional()?,
            )
        })
        .await
    }

    async fn task_events(&self, id: &str) -> StoreResult<Vec<TaskEventRow>> {
        let id = id.to_owned();
        self.read(move |c| {
            let mut s = c.prepare_cached(
                "SELECT at, actor, envelope_id, kind, from_state, to_state, flag, timer, warnings, reason FROM task_events WHERE task_id = ?1 ORDER BY n",
            )?;
            let rows = s
                .query_map([id], |r| {
                    Ok(TaskEventRow {
                        at: r.get(0)?,
                        actor: r.get(1)?,
                        envelope_id: r.get(2)?,
                        kind: r.get(3)?,
                        from_state: r.get(4)?,
                        to_state: r.get(5)?,
                        flag: r.get(6)?,
                        timer: r.get(7)?,
                        warnings: r.get(8)?,
                        reason: r.get(9)?,
                    })
                })?
                .collect::<Result<_, _>>()?;
            Ok(rows)
        })
        .await
    }

    async fn tasks(&self, f: TaskFilter) -> StoreResult<Vec<TaskRow>> {
        self.read(move |c| {
            let mut s = c.prepare_cached(&format!(
                "SELECT {TASK_COLS} FROM tasks WHERE tenant_id = ?1 AND (?2 IS NULL OR state = ?2) \
                 AND (?3 IS NULL OR requester_id = ?3) AND (?4 IS NULL OR recipient_id = ?4) \
                 AND (?5 IS NULL OR requester_id = ?5 OR recipient_id = ?5) AND (?7 IS NULL OR capability = ?7) \
                 AND (?8 IS NULL OR workspace_id = ?8 OR recipient_id IN (SELECT id FROM agents WHERE workspace_id = ?8)) \
                 AND (?9 IS NULL OR created_at < ?9 OR (created_at = ?9 AND id < ?10)) \
                 ORDER BY created_at DESC, id DESC LIMIT ?6"
            ))?;
            let (before_at, before_id) = f.before.clone().unzip();
            let rows = s
                .query_map(params![f.tenant_id, f.state, f.requester_id, f.recipient_id, f.party_id, f.limit.max(1), f.capability, f.workspace_id, before_at, before_id], task_row)?
                .collect::<Result<_, _>>()?;
            Ok(rows)
        })
        .await
    }

    async fn due_tasks(&self, now: i64, limit: u32) -> StoreResult<Vec<TaskRow>> {
        self.read(move |c| {
            let mut s = c.prepare_cached(&format!(
                "SELECT {TASK_COLS} FROM tasks WHERE terminal = 0 AND next_deadline <= ?1 ORDER BY next_deadline LIMIT ?2"
            ))?;
            let rows = s.query_map(params![now, limit], task_row)?.collect::<Result<_, _>>()?;
            Ok(rows)
        })
        .await
    }

    async fn update_task(
        &self,
        t: TaskRow,
        expected_version: i64,
        e: TaskEventRow,
        owed: u8,
    ) -> StoreResult<()> {
        self.write(move |tx| {
            let id = t.id.clone();
            write_task(tx, &TaskWrite::Update(t, expected_version, e))?;
            if owed != 0 {
                tx.prepare_cached("UPDATE tasks SET notices = notices | ?2 WHERE id = ?1")?
                    .execute(params![id, owed])?;
            }
            Ok(())
        })
        .await
    }

    async fn create_blob(&self, b: BlobRow) -> StoreResult<()> {
        self.write(move |tx| {
            tx.execute(
                "INSERT INTO blobs (id, tenant_id, uploader_id, name, media_type, size, sha256, complete, created_at, expires_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                params![b.id, b.tenant_id, b.uploader_id, b.name, b.media_type, b.size as i64, b.sha256, b.complete as i64, b.created_at, b.expires_at],
            )?;
            Ok(())
        })
        .await
    }

    async fn blob(&self, id: &str) -> StoreResult<Option<BlobRow>> {
        let id = id.to_owned();
        self.read(move |c| {
            Ok(c.prepare_cached(
                "SELECT id, tenant_id, uploader_id, name, media_type, size, sha256, complete, created_at, expires_at FROM blobs WHERE id = ?1",
            )?
            .query_row([id], blob_row)
            .optional()?)
        })
        .await
    }

    async fn complete_blob(&self, id: &str) -> StoreResult<()> {
        let id = id.to_owned();
        self.write(move |tx| {
            let n = tx.execute(
                "UPDATE blobs SET complete = 1 WHERE id = ?1 AND purged = 0",
                [id],
            )?;
            one_changed(n)
        })
        .await
    }

    async fn blob_party(&self, blob_id: &str, agent_id: &str) -> StoreResult<bool> {
        let (b, a) = (blob_id.to_owned(), agent_id.to_owned());
        self.read(move |c| {
            Ok(c.prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM blob_refs r JOIN messages m ON m.seq = r.message_seq \
                 WHERE r.blob_id = ?1 AND (m.source_agent_id = ?2 OR EXISTS \
                 (SELECT 1 FROM inbox i WHERE i.message_seq = m.seq AND i.agent_id = ?2)))",
            )?
            .query_row(params![b, a], |r| r.get(0))?)
        })
        .await
    }

    async fn blob_bytes(&self, tenant_id: &str, now: i64, pending_since: i64) -> StoreResult<u64> {
        let t = tenant_id.to_owned();
        self.read(move |c| {
            let n: i64 = c
                .prepare_cached(&format!(
                    "SELECT coalesce(sum(size), 0) FROM blobs WHERE tenant_id = ?3 AND NOT ({BLOB_DUE})"
                ))?
                .query_row(params![now, pending_since, t], |r| r.get(0))?;
            Ok(n.max(0) as u64)
        })
        .await
    }

    async fn due_blobs(
        &self,
        now: i64,
        pending_since: i64,
        limit: usize,
    ) -> StoreResult<Vec<BlobRow>> {
        self.read(move |c| {
            let rows = c
                .prepare_cached(&format!(
                    "SELECT id, tenant_id, uploader_id, name, media_type, size, sha256, complete, created_at, expires_at \
                     FROM blobs WHERE purged = 0 AND ({BLOB_DUE}) ORDER BY created_at LIMIT ?3"
                ))?
                .query_map(params![now, pending_since, limit as i64], blob_row)?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(rows)
        })
        .await
    }

    async fn purge_blob(&self, id: &str, now: i64, pending_since: i64) -> StoreResult<bool> {
        let id = id.to_owned();
        self.write(move |tx| {
            let n = tx.execute(
                &format!(
                    "UPDATE blobs SET purged = 1 WHERE id = ?3 AND purged = 0 AND ({BLOB_DUE})"
                ),
                params![now, pending_since, id],
            )?;
            if n > 0 {
                tx.execute("DELETE FROM blob_contents WHERE blob_id = ?1", [&id])?;
            }
            Ok(n > 0)
        })
        .await
    }

    async fn first_user(&self) -> StoreResult<Option<UserRow>> {
        self.read(|c| {
            Ok(c.prepare_cached(&format!(
                "SELECT {USER_COLS} FROM users ORDER BY created_at, rowid LIMIT 1"
            ))?
            .query_row([], user_row)
            .optional()?)
        })
        .await
    }

    async fn replace_tokens(&self, t: TokenRow) -> StoreResult<u64> {
        self.write(move |tx| {
            let (kind, subject) = t.subject.stored();
            // Revoked, not deleted: `agentbus tokens list` still shows what was replaced.
            let revoked = tx.execute(
                "UPDATE tokens SET revoked_at = ?3 \
                 WHERE kind = ?1 AND subject_id = ?2 AND revoked_at IS NULL",
                params![kind, subject, t.created_at],
            )?;
            insert_token(tx, &t)?;
            Ok(revoked as u64)
        })
        .await
    }

    async fn release(
        &self,
        agent_id: &str,
        leases: Vec<(u64, String)>,
        now: i64,
        uncount: bool,
    ) -> StoreResult<()> {
        let agent = agent_id.to_owned();
        // Queued behind the leases it undoes (the writer is one FIFO queue), and conditional on
        // the token, so an ack or a newer lease that got there first wins.
        self.write_shared(false, move |tx| {
            for (sequence, token) in leases {
                if uncount {
                    tx.prepare_cached(
                        "UPDATE inbox SET attempts = attempts - 1, lease = NULL, visible_at = ?3, \
                         state = CASE WHEN attempts <= 1 THEN 0 ELSE 1 END \
                         WHERE agent_id = ?1 AND sequence = ?2 AND state = 1 AND lease = ?4",
                    )?
                    .execute(params![agent, sequence as i64, now, token])?;
                } else {
                    tx.prepare_cached(
                        "UPDATE inbox SET lease = NULL, visible_at = ?3 \
                         WHERE agent_id = ?1 AND sequence = ?2 AND state = 1 AND lease = ?4",
                    )?
                    .execute(params![agent, sequence as i64, now, token])?;
                }
            }
            Ok(())
        })
        .await
    }

    async fn check_ready(&self) -> StoreResult<()> {
        self.read(|c| {
            let version: usize = c.pragma_query_value(None, "user_version", |r| r.get(0))?;
            let want = super::schema::current_version();
            if version == want {
                Ok(())
            } else {
                Err(StoreError::Backend(format!(
                    "the database schema is version {version}; this gateway needs {want}"
                )))
            }
        })
        .await
    }

    async fn record_receipts(
        &self,
        agent_id: &str,
        receipts: Vec<ShownReceipt>,
        now: i64,
    ) -> StoreResult<Vec<ReceiptOutcome>> {
        let agent = agent_id.to_owned();
        self.write(move |tx| super::receipts::record(tx, &agent, &receipts, now))
            .await
    }

    async fn delivery_states(
        &self,
        tenant_id: &str,
        source: &str,
        message_id: &str,
    ) -> StoreResult<Option<(MessageRow, Vec<DeliveryStateRow>)>> {
        let (t, s, id) = (
            tenant_id.to_owned(),
            source.to_owned(),
            message_id.to_owned(),
        );
        self.read_after_writes(move |c| super::receipts::states(c, &t, &s, &id))
            .await
    }

    async fn sent_messages(
        &self,
        tenant_id: &str,
        agent_id: &str,
        before_seq: Option<i64>,
        limit: u32,
    ) -> StoreResult<Vec<MessageRow>> {
        let (t, a) = (tenant_id.to_owned(), agent_id.to_owned());
        self.read(move |c| {
            let mut stmt = c.prepare_cached(&format!(
                "SELECT {MESSAGE_COLS} FROM messages m \
                 WHERE m.tenant_id = ?1 AND m.source_agent_id = ?2 AND m.seq < ?3 \
                 ORDER BY m.seq DESC LIMIT ?4"
            ))?;
            let rows = stmt.query_map(
                params![t, a, before_seq.unwrap_or(i64::MAX), i64::from(limit)],
                |r| message_row(r, 0),
            )?;
            Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
        })
        .await
    }

    async fn conversations(
        &self,
        tenant_id: &str,
        viewer: &ConversationViewer,
        before: Option<(i64, i64)>,
        limit: u32,
    ) -> StoreResult<Vec<ConversationSummary>> {
        let (t, viewer) = (tenant_id.to_owned(), viewer.clone());
        self.read(move |c| {
            Ok(super::console::conversations(
                c, &t, &viewer, before, limit,
            )?)
        })
        .await
    }

    async fn copies(&self, message_seqs: Vec<i64>) -> StoreResult<Vec<CopyState>> {
        self.read_after_writes(move |c| Ok(super::console::copies(c, &message_seqs)?))
            .await
    }

    async fn task_messages(&self, tenant_id: &str, task_id: &str) -> StoreResult<Vec<MessageRow>> {
        let (t, id) = (tenant_id.to_owned(), task_id.to_owned());
        self.read(move |c| Ok(super::console::task_messages(c, &t, &id)?))
            .await
    }

    async fn blob_workspaces(&self, blob_id: &str) -> StoreResult<Vec<String>> {
        let id = blob_id.to_owned();
        self.read(move |c| Ok(super::console::blob_workspaces(c, &id)?))
            .await
    }

    async fn usage(&self, f: UsageFilter) -> StoreResult<Vec<UsageTotal>> {
        self.read(move |c| Ok(super::console::usage(c, &f)?)).await
    }

    async fn create_console_session(&self, s: ConsoleSessionRow) -> StoreResult<()> {
        self.write(move |tx| Ok(super::console::create_session(tx, &s)?))
            .await
    }

    async fn console_session(&self, id_hash: [u8; 32]) -> StoreResult<Option<ConsoleSessionRow>> {
        self.read(move |c| Ok(super::console::session(c, &id_hash)?))
            .await
    }

    async fn delete_console_session(&self, id_hash: [u8; 32]) -> StoreResult<()> {
        self.write(move |tx| {
            tx.execute(
                "DELETE FROM console_sessions WHERE id_hash = ?1",
                [id_hash.to_vec()],
            )?;
            Ok(())
        })
        .await
    }

    async fn purge_console_sessions(&self, now: i64) -> StoreResult<u64> {
        self.write(move |tx| {
            let n = tx.execute("DELETE FROM console_sessions WHERE expires_at <= ?1", [now])?;
            Ok(n as u64)
        })
        .await
    }

    async fn signal(&self, _s: Signal) -> StoreResult<()> {
        // One process holds the file (the data directory's lock): nobody else to tell.
        Ok(())
    }

    async fn claim_reaper(&self, _holder: &str, _now: i64, _ttl_ms: i64) -> StoreResult<bool> {
        Ok(true)
    }

    async fn put_blob_content(&self, id: &str, sealed: Vec<u8>) -> StoreResult<()> {
        let id = id.to_owned();
        self.write(move |tx| {
            tx.execute(
                "INSERT INTO blob_contents (blob_id, sealed) VALUES (?1, ?2) \
                 ON CONFLICT (blob_id) DO UPDATE SET sealed = excluded.sealed",
                params![id, sealed],
            )?;
            Ok(())
        })
        .await
    }

    async fn blob_content(&self, id: &str) -> StoreResult<Option<Vec<u8>>> {
        let id = id.to_owned();
        self.read(move |c| {
            Ok(
                c.prepare_cached("SELECT sealed FROM blob_contents WHERE blob_id = ?1")?
                    .query_row([id], |r| r.get(0))
                    .optional()?,
            )
        })
        .await
    }
}

fn set_aliases(
    tx: &Transaction<'_>,
    workspace_id: &str,
    agent_id: &str,
    aliases: &[String],
) -> StoreResult<()> {
    for alias in aliases {
        let name_clash: bool = tx
            .prepare_cached("SELECT EXISTS (SELECT 1 FROM agents WHERE workspace_id = ?1 AND name = ?2 AND deleted_at IS NULL AND id != ?3)")?
            .query_row(params![workspace_id, alias, agent_id], |r| r.get(0))?;
        if name_clash {
            return Err(StoreError::Conflict(format!("alias {alias}")));
        }
        tx.prepare_cached(
            "INSERT INTO aliases (workspace_id, alias, agent_id) VALUES (?1, ?2, ?3)",
        )?
        .execute(params![workspace_id, alias, agent_id])
        .map_err(conflict(&format!("alias {alias}")))?;
    }
    Ok(())
}
