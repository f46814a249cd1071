//! Reading rows into the plain data of [`crate::model`], and the small query helpers every
//! operation uses (each statement prepared once per connection and cached).

use deadpool_postgres::GenericClient;
use tokio_postgres::Row;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;

use crate::model::{role_from, state_from};
use crate::*;

/// Parameters of a statement.
pub(super) type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

/// Every row `sql` answers.
pub(super) async fn rows(
    c: &impl GenericClient,
    sql: &str,
    p: Params<'_>,
) -> StoreResult<Vec<Row>> {
    let s = c.prepare_cached(sql).await?;
    Ok(c.query(&s, p).await?)
}

/// The row `sql` answers, if any.
pub(super) async fn opt(
    c: &impl GenericClient,
    sql: &str,
    p: Params<'_>,
) -> StoreResult<Option<Row>> {
    let s = c.prepare_cached(sql).await?;
    Ok(c.query_opt(&s, p).await?)
}

/// The one row `sql` answers.
pub(super) async fn one(c: &impl GenericClient, sql: &str, p: Params<'_>) -> StoreResult<Row> {
    let s = c.prepare_cached(sql).await?;
    Ok(c.query_one(&s, p).await?)
}

/// Runs `sql`; answers how many rows it changed.
pub(super) async fn exec(c: &impl GenericClient, sql: &str, p: Params<'_>) -> StoreResult<u64> {
    let s = c.prepare_cached(sql).await?;
    Ok(c.execute(&s, p).await?)
}

/// [`exec`], with a unique violation reported as [`StoreError::Conflict`] on `what`.
pub(super) async fn exec_unique(
    c: &impl GenericClient,
    what: &str,
    sql: &str,
    p: Params<'_>,
) -> StoreResult<u64> {
    let s = c.prepare_cached(sql).await?;
    c.execute(&s, p).await.map_err(|e| {
        if e.code() == Some(&SqlState::UNIQUE_VIOLATION) {
            StoreError::Conflict(what.to_owned())
        } else {
            StoreError::from(e)
        }
    })
}

/// An update of one row by its id: `NotFound` when it changed none.
pub(super) fn one_changed(rows: u64) -> StoreResult<()> {
    if rows == 0 {
        Err(StoreError::NotFound)
    } else {
        Ok(())
    }
}

/// Column `i` of `r`.
pub(super) fn get<'a, T: tokio_postgres::types::FromSql<'a>>(
    r: &'a Row,
    i: usize,
) -> StoreResult<T> {
    Ok(r.try_get(i)?)
}

fn hash(r: &Row, i: usize) -> StoreResult<[u8; 32]> {
    let v: Vec<u8> = get(r, i)?;
    <[u8; 32]>::try_from(v.as_slice())
        .map_err(|_| StoreError::Backend(format!("column {i} is not a 32-byte hash")))
}

pub(super) const MESSAGE_COLS: &str = "m.seq, m.tenant_id, m.id, m.source, m.source_agent_id, m.kind, m.conversation_id, \
     m.to_text, m.to_id, m.attrs, m.data, m.signed_hash, m.idempotency_key, m.receipt, m.received_at, \
     m.expires_at, m.task_id";

/// A message from [`MESSAGE_COLS`] starting at column `o`.
pub(super) fn message(r: &Row, o: usize) -> StoreResult<MessageRow> {
    Ok(MessageRow {
        seq: get(r, o)?,
        tenant_id: get(r, o + 1)?,
        id: get(r, o + 2)?,
        source: get(r, o + 3)?,
        source_agent_id: get(r, o + 4)?,
        kind: get(r, o + 5)?,
        conversation_id: get(r, o + 6)?,
        to_text: get(r, o + 7)?,
        to_id: get(r, o + 8)?,
        attrs: get(r, o + 9)?,
        data: get(r, o + 10)?,
        signed_hash: get(r, o + 11)?,
        idempotency_key: get(r, o + 12)?,
        receipt: get(r, o + 13)?,
        received_at: get(r, o + 14)?,
        expires_at: get(r, o + 15)?,
        task_id: get(r, o + 16)?,
    })
}

pub(super) const TENANT_COLS: &str = "id, slug, data_key, created_at, suspended_at";

pub(super) fn tenant(r: &Row) -> StoreResult<TenantRow> {
    Ok(TenantRow {
        id: get(r, 0)?,
        slug: get(r, 1)?,
        data_key: get(r, 2)?,
        created_at: get(r, 3)?,
        suspended_at: get(r, 4)?,
    })
}

pub(super) const WORKSPACE_COLS: &str = "id, tenant_id, slug, policy, created_at";

pub(super) fn workspace(r: &Row) -> StoreResult<WorkspaceRow> {
    Ok(WorkspaceRow {
        id: get(r, 0)?,
        tenant_id: get(r, 1)?,
        slug: get(r, 2)?,
        policy: get(r, 3)?,
        created_at: get(r, 4)?,
    })
}

pub(super) const USER_COLS: &str = "id, tenant_id, workspace_id, name, role, created_at";

pub(super) fn user(r: &Row) -> StoreResult<UserRow> {
    Ok(UserRow {
        id: get(r, 0)?,
        tenant_id: get(r, 1)?,
        workspace_id: get(r, 2)?,
        name: get(r, 3)?,
        role: role_from(&get::<String>(r, 4)?),
        created_at: get(r, 5)?,
    })
}

pub(super) const AGENT_COLS: &str = "id, tenant_id, workspace_id, name, owner_id, card, visibility, created_at, updated_at, deleted_at, suspended_at";

pub(super) fn agent(r: &Row) -> StoreResult<AgentRow> {
    Ok(AgentRow {
        id: get(r, 0)?,
        tenant_id: get(r, 1)?,
        workspace_id: get(r, 2)?,
        name: get(r, 3)?,
        owner_id: get(r, 4)?,
        card: get(r, 5)?,
        visibility: get(r, 6)?,
        created_at: get(r, 7)?,
        updated_at: get(r, 8)?,
        deleted_at: get(r, 9)?,
        suspended_at: get(r, 10)?,
    })
}

pub(super) const KEY_COLS: &str = "id, agent_id, public_key, created_at, expires_at, revoked_at";

pub(super) fn key(r: &Row) -> StoreResult<KeyRow> {
    Ok(KeyRow {
        id: get(r, 0)?,
        agent_id: get(r, 1)?,
        public_key: get(r, 2)?,
        created_at: get(r, 3)?,
        expires_at: get(r, 4)?,
        revoked_at: get(r, 5)?,
    })
}

pub(super) const TOPIC_COLS: &str = "id, workspace_id, name, created_at";

pub(super) fn topic(r: &Row) -> StoreResult<TopicRow> {
    Ok(TopicRow {
        id: get(r, 0)?,
        workspace_id: get(r, 1)?,
        name: get(r, 2)?,
        created_at: get(r, 3)?,
    })
}

pub(super) const BLOB_COLS: &str =
    "id, tenant_id, uploader_id, name, media_type, size, sha256, complete, created_at, expires_at";

pub(super) fn blob(r: &Row) -> StoreResult<BlobRow> {
    Ok(BlobRow {
        id: get(r, 0)?,
        tenant_id: get(r, 1)?,
        uploader_id: get(r, 2)?,
        name: get(r, 3)?,
        media_type: get(r, 4)?,
        size: get::<i64>(r, 5)?.max(0) as u64,
        sha256: get(r, 6)?,
        complete: get(r, 7)?,
        created_at: get(r, 8)?,
        expires_at: get(r, 9)?,
    })
}

pub(super) const TASK_COLS: &str = "id, tenant_id, workspace_id, requester_id, recipient_id, request_id, conversation_id, \
     capability, state, terminal, machine, next_deadline, created_at, updated_at, version";

pub(super) fn task(r: &Row) -> StoreResult<TaskRow> {
    Ok(TaskRow {
        id: get(r, 0)?,
        tenant_id: get(r, 1)?,
        workspace_id: get(r, 2)?,
        requester_id: get(r, 3)?,
        recipient_id: get(r, 4)?,
        request_id: get(r, 5)?,
        conversation_id: get(r, 6)?,
        capability: get(r, 7)?,
        state: get(r, 8)?,
        terminal: get(r, 9)?,
        machine: get(r, 10)?,
        next_deadline: get(r, 11)?,
        created_at: get(r, 12)?,
        updated_at: get(r, 13)?,
        version: get(r, 14)?,
    })
}

pub(super) fn task_event(r: &Row) -> StoreResult<TaskEventRow> {
    Ok(TaskEventRow {
        at: get(r, 0)?,
        actor: get(r, 1)?,
        envelope_id: get(r, 2)?,
        kind: get(r, 3)?,
        from_state: get(r, 4)?,
        to_state: get(r, 5)?,
        flag: get(r, 6)?,
        timer: get(r, 7)?,
        warnings: get(r, 8)?,
        reason: get(r, 9)?,
    })
}

/// An inbox entry: `agent_id, sequence, state, attempts, last_attempt_at`, then [`MESSAGE_COLS`].
pub(super) fn entry(r: &Row) -> StoreResult<InboxEntry> {
    Ok(InboxEntry {
        agent_id: get(r, 0)?,
        sequence: get::<i64>(r, 1)? as u64,
        state: state_from(get(r, 2)?),
        attempts: get::<i64>(r, 3)? as u32,
        last_attempt_at: get(r, 4)?,
        message: message(r, 5)?,
    })
}

pub(super) const TOKEN_COLS: &str = "hash, kind, subject_id, created_at, label, revoked_at";

pub(super) fn token(r: &Row) -> StoreResult<TokenRow> {
    let kind: String = get(r, 1)?;
    Ok(TokenRow {
        hash: hash(r, 0)?,
        subject: TokenSubject::from_stored(&kind, get(r, 2)?),
        created_at: get(r, 3)?,
        label: get(r, 4)?,
        revoked_at: get(r, 5)?,
    })
}

pub(super) const SESSION_COLS: &str = "id_hash, user_id, token_hash, csrf, created_at, expires_at";

pub(super) fn session(r: &Row) -> StoreResult<ConsoleSessionRow> {
    Ok(ConsoleSessionRow {
        id_hash: hash(r, 0)?,
        user_id: get(r, 1)?,
        token_hash: hash(r, 2)?,
        csrf: get(r, 3)?,
        created_at: get(r, 4)?,
        expires_at: get(r, 5)?,
    })
}
