//! [`Store`] for [`PgStore`]: each operation is one statement, or one transaction on one pooled
//! connection. Where SQLite's single writer serialises a check and the write it guards, a row
//! lock or a transaction-scoped advisory lock does here (see the module documentation).

use deadpool_postgres::GenericClient;

use super::PgStore;
use super::rows::*;
use crate::model::{UsageFigures, notice_due, state_code, state_from, sum_usage};
use crate::*;

/// Serialises the transactions that take the same keys `$1` until they commit, in a fixed order
/// (sorted hashes), so two transactions never wait on each other's locks.
pub(super) const LOCK_KEYS: &str = "SELECT pg_advisory_xact_lock(k) FROM \
     (SELECT DISTINCT hashtextextended(x, 0) AS k FROM unnest($1::text[]) x ORDER BY 1) s";

/// Takes the [`LOCK_KEYS`] locks of `keys`.
pub(super) async fn lock_keys(t: &impl GenericClient, keys: &[String]) -> StoreResult<()> {
    exec(t, LOCK_KEYS, &[&keys]).await?;
    Ok(())
}

/// An unambiguous lock key from parts: each part prefixed by its length.
pub(super) fn key_of(kind: &str, parts: &[&str]) -> String {
    let mut k = kind.to_owned();
    for p in parts {
        k.push_str(&format!("|{}:{p}", p.len()));
    }
    k
}

/// Lease and ack transactions commit without waiting for the flush: losing one in a crash only
/// redelivers, which at-least-once delivery allows (as SQLite's `synchronous=NORMAL` for them).
const ASYNC_COMMIT: &str = "SET LOCAL synchronous_commit = off";
/// A transaction begun as [`ASYNC_COMMIT`] says, in one message.
const BEGIN_ASYNC: &str = "BEGIN; SET LOCAL synchronous_commit = off";

/// Settles the acks whose lease token still holds (`$2` sequences, `$3` their tokens, all within
/// `$5`..=`$6`) and counts them settled in the inbox's `inbox_settled` row, in one statement: the
/// entries it settled. The bounds keep any plan to the acked stretch of the inbox: a generic plan
/// made on statistics from when the inbox was small may find the entries by agent alone and
/// filter the sequences, which then reads the whole inbox (the lease's did, in the benches: its
/// cached plan estimated a handful of rows and read every entry of the inbox).
pub(super) const ACK: &str = "WITH s AS (UPDATE inbox i SET state = 2, acked_at = $4 \
     FROM unnest($2::bigint[], $3::text[]) AS a(sequence, lease) \
     WHERE i.agent_id = $1 AND i.sequence BETWEEN $5 AND $6 AND i.sequence = a.sequence \
     AND i.state = 1 AND i.lease = a.lease \
     RETURNING i.sequence, i.lease), \
     n AS (INSERT INTO inbox_settled (agent_id, settled) SELECT $1, count(*) FROM s HAVING count(*) > 0 \
     ON CONFLICT (agent_id) DO UPDATE SET settled = inbox_settled.settled + excluded.settled) \
     SELECT sequence, lease FROM s";
/// How the acked entries `$2` stand after [`ACK`], each looked up by its key on its own (a
/// range would span the inbox when a redelivered entry is acked beside new ones).
pub(super) const ACK_HELD: &str = "SELECT i.sequence, i.state, i.lease FROM unnest($2::bigint[]) AS a(s), \
     LATERAL (SELECT sequence, state, lease FROM inbox WHERE agent_id = $1 AND sequence = a.s LIMIT 1) i";
/// Counts `$2` more settled entries of inbox `$1`, in its own row (`inbox_settled`): acks and the
/// reaper never wait on the counter row a publish holds until its commit's flush.
pub(super) const SETTLED: &str = "INSERT INTO inbox_settled (agent_id, settled) VALUES ($1, $2) \
     ON CONFLICT (agent_id) DO UPDATE SET settled = inbox_settled.settled + excluded.settled";
/// An inbox's unacknowledged entries (`$1` its agent): added by publishes, less those settled.
pub(super) const DEPTH: &str = "SELECT c.added - coalesce((SELECT s.settled FROM inbox_settled s WHERE s.agent_id = $1), 0) \
     FROM inbox_counters c WHERE c.agent_id = $1";

/// A blob whose content is due for deletion, with `$1` the time and `$2` the start of the upload
/// window: complete and expired, or pending and registered before the window (§9; SQLite's
/// `BLOB_DUE`).
const BLOB_DUE: &str = "(complete AND expires_at <= $1) OR (NOT complete AND created_at <= $2)";

pub(super) async fn recent_in(
    c: &impl GenericClient,
    tenant: &str,
    source: &str,
    id: &str,
    since: i64,
) -> StoreResult<Option<MessageRow>> {
    opt(
        c,
        &format!(
            "SELECT {MESSAGE_COLS} FROM recent_ids r JOIN messages m ON m.seq = r.message_seq \
             WHERE r.tenant_id = $1 AND r.source = $2 AND r.id = $3 AND r.received_at >= $4"
        ),
        &[&tenant, &source, &id, &since],
    )
    .await?
    .map(|r| message(&r, 0))
    .transpose()
}

/// The stored message an idempotency key names within its window: `$1`…`$5` as
/// [`idempotent_params`] gives them.
pub(super) static IDEMPOTENT_IN: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "SELECT {MESSAGE_COLS} FROM idempotency i JOIN messages m ON m.seq = i.message_seq \
         WHERE i.tenant_id = $1 AND i.source = $2 AND i.to_id = $3 AND i.key = $4 AND i.created_at >= $5"
    )
});

/// The parameters of [`IDEMPOTENT_IN`] for key `k` and a window starting at `since`.
pub(super) fn idempotent_params<'a>(
    k: &'a IdempotencyKey,
    since: &'a i64,
) -> [&'a (dyn tokio_postgres::types::ToSql + Sync); 5] {
    [&k.tenant_id, &k.source, &k.to_id, &k.key, since]
}

pub(super) async fn idempotent_in(
    c: &impl GenericClient,
    k: &IdempotencyKey,
    since: i64,
) -> StoreResult<Option<MessageRow>> {
    opt(c, &IDEMPOTENT_IN, &idempotent_params(k, &since))
        .await?
        .map(|r| message(&r, 0))
        .transpose()
}

async fn message_by_seq(c: &impl GenericClient, seq: i64) -> StoreResult<Option<MessageRow>> {
    opt(
        c,
        &format!("SELECT {MESSAGE_COLS} FROM messages m WHERE m.seq = $1"),
        &[&seq],
    )
    .await?
    .map(|r| message(&r, 0))
    .transpose()
}

/// Marks the settled entries `owing` (those whose sender is owed a notice,
/// [`crate::model::notice_due`]) as owing the notice `kind` in `inbox.notice`, replacing a
/// hold's (see [`NoticeKind`]), those whose sender still exists.
async fn flag_owed<'e>(
    t: &impl GenericClient,
    owing: impl Iterator<Item = &'e InboxEntry>,
    kind: NoticeKind,
) -> StoreResult<()> {
    debug_assert_ne!(kind, NoticeKind::Held, "holds are marked by mark_holds");
    let (agents, sequences): (Vec<&str>, Vec<i64>) = owing
        .map(|e| (e.agent_id.as_str(), e.sequence as i64))
        .unzip();
    if !agents.is_empty() {
        exec(t, FLAG_NOTICES, &[&agents, &sequences, &kind.code()]).await?;
    }
    Ok(())
}

/// Marks the entries of `pending` (read unlocked) as held in `inbox.hold`, those still pending
/// and owing no other notice when the update reaches them (an ack or the reaper may have
/// settled one since the read) whose sender is owed one and still exists; returns those marked.
async fn mark_holds(
    t: &impl GenericClient,
    pending: Vec<InboxEntry>,
) -> StoreResult<Vec<InboxEntry>> {
    let due: Vec<InboxEntry> = pending
        .into_iter()
        .filter(|e| notice_due(e, true))
        .collect();
    if due.is_empty() {
        return Ok(due);
    }
    let (agents, sequences): (Vec<&str>, Vec<i64>) = due
        .iter()
        .map(|e| (e.agent_id.as_str(), e.sequence as i64))
        .unzip();
    let marked = rows(
        t,
        FLAG_HOLDS,
        &[&agents, &sequences, &NoticeKind::Held.code()],
    )
    .await?;
    let marked: std::collections::HashSet<(String, i64)> = marked
        .iter()
        .map(|r| Ok((get::<String>(r, 0)?, get::<i64>(r, 1)?)))
        .collect::<StoreResult<_>>()?;
    Ok(due
        .into_iter()
        .filter(|e| marked.contains(&(e.agent_id.clone(), e.sequence as i64)))
        .collect())
}

/// Clears the mark of `owed`; `Conflict` when it was not set (the notice is stored already).
/// Another replica storing the same notice holds the row until its commit; this one then finds
/// the mark cleared.
async fn clear_owed(t: &impl GenericClient, owed: &Owed) -> StoreResult<()> {
    let cleared = match owed {
        Owed::Entry(agent, sequence, NoticeKind::Held) => {
            exec(
                t,
                "UPDATE inbox SET hold = NULL WHERE agent_id = $1 AND sequence = $2 AND hold IS NOT NULL",
                &[agent, &(*sequence as i64)],
            )
            .await?
        }
        Owed::Entry(agent, sequence, kind) => {
            exec(
                t,
                "UPDATE inbox SET notice = NULL WHERE agent_id = $1 AND sequence = $2 AND notice = $3",
                &[agent, &(*sequence as i64), &kind.code()],
            )
            .await?
        }
        Owed::Task(task, bit) => {
            exec(
                t,
                "UPDATE tasks SET notices = notices & ~$2::int WHERE id = $1 AND notices & $2::int <> 0",
                &[task, &i32::from(*bit)],
            )
            .await?
        }
    };
    if cleared == 0 {
        return Err(StoreError::Conflict(format!("{owed:?}, sent already,")));
    }
    Ok(())
}

/// A publish's inbox entry with its inbox's counter bumped, in one statement (`$1` agent, `$2`
/// message, `$3` visible at, `$4` expires at), held when `$1` is suspended and the message has a
/// sending agent (`$5`); answers the entry's sequence.
static INSERT_ENTRY: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "WITH c AS (UPDATE inbox_counters SET last_seq = last_seq + 1, added = added + 1 \
         WHERE agent_id = $1 RETURNING last_seq) \
         INSERT INTO inbox (agent_id, sequence, message_seq, state, attempts, visible_at, expires_at, hold) \
         SELECT $1, c.last_seq, $2, 0, 0, $3, $4, {} FROM c RETURNING sequence",
        crate::model::hold_if_suspended("$1", "$5::text")
    )
});

pub(super) async fn insert_message(
    t: &deadpool_postgres::Transaction<'_>,
    m: &NewMessage,
) -> StoreResult<PublishOutcome> {
    if let Some(owed) = &m.notice_of {
        clear_owed(t, owed).await?;
    }
    // The authoritative dedupe, inside the storing transaction: a publisher of the same id (or
    // idempotency key) waits here until the first one committed, then finds its row below.
    let mut keys = vec![key_of("id", &[&m.tenant_id, &m.source, &m.id])];
    if let Some(k) = &m.idempotency {
        keys.push(key_of("idem", &[&k.tenant_id, &k.source, &k.to_id, &k.key]));
    }
    lock_keys(t, &keys).await?;
    if let Some(existing) = recent_in(t, &m.tenant_id, &m.source, &m.id, m.replay_since).await? {
        return Ok(PublishOutcome::DuplicateId(existing));
    }
    if let Some(k) = &m.idempotency
        && let Some(existing) = idempotent_in(t, k, m.idempotency_since).await?
    {
        return Ok(PublishOutcome::IdempotentReplay(existing));
    }
    // The rows that lock nothing others wait for come first; the recipients' counter rows last,
    // so they are held over as few round trips as possible before the commit (publishes into one
    // inbox are serial on its row). A refusal below rolls all of it back.
    let seq = insert_row(t, m).await?;
    insert_search_terms(t, m, seq).await?;
    record_ids(t, m, seq).await?;
    if let Some(w) = &m.task {
        write_task(t, w).await?;
    }
    let mut counters = lock_counters(t, &m.recipients).await?;
    if let Some(full) = inbox_full(m, &|agent| counters.get(agent).map_or(0, |c| c.1)) {
        return Ok(full);
    }
    let mut sequences = Vec::with_capacity(m.recipients.len());
    let mut depths = Vec::with_capacity(m.recipients.len());
    for agent in &m.recipients {
        // The counter bumped and the entry stored in one statement, under the lock taken above.
        let r = one(
            t,
            &INSERT_ENTRY,
            &[
                agent,
                &seq,
                &m.received_at,
                &m.expires_at,
                &m.source_agent_id,
            ],
        )
        .await?;
        sequences.push((agent.clone(), get::<i64>(&r, 0)? as u64));
        // The depth read under the lock, with this entry (a recipient named twice counts twice).
        let depth = counters.get_mut(agent).map(|c| {
            c.1 += 1;
            c.1
        });
        depths.push(depth.unwrap_or(1));
    }
    let message = m.stored_row(seq);
    Ok(PublishOutcome::Stored {
        message,
        sequences,
        depths,
    })
}

/// The counter rows of the agent ids `$1` as they stand, in id order: agent id, `last_seq`,
/// unacknowledged depth. Read unlocked, a publish batch plans its depth checks on them before it
/// takes any lock (`postgres/batch.rs`); read right after [`LOCK_COUNTERS`], they are the values
/// under the lock. The settled count is looked up per row: joined, a plan made on empty tables
/// read `inbox_settled` whole (`postgres/plans.rs`).
pub(super) const READ_COUNTERS: &str = "SELECT c.agent_id, c.last_seq, c.added - coalesce(\
     (SELECT s.settled FROM inbox_settled s WHERE s.agent_id = c.agent_id), 0) \
     FROM inbox_counters c WHERE c.agent_id = ANY($1) ORDER BY c.agent_id";
/// Locks the existing counter rows of the agent ids `$1` in id order (publishers to overlapping
/// inboxes never deadlock) until the commit. It answers only their ids: under READ COMMITTED a
/// statement reads from a snapshot taken before it waits for the lock, so a depth it read would
/// miss the acks committed during the wait, beside the newest `added` of the row it locked (a
/// depth the inbox never had). The next statement, [`READ_COUNTERS`], reads after the wait.
pub(super) const LOCK_COUNTERS: &str = "SELECT c.agent_id FROM inbox_counters c \
     WHERE c.agent_id = ANY($1) ORDER BY c.agent_id FOR UPDATE";
/// Creates the counter rows of the agent ids `$1` that do not exist yet (an inbox's first
/// publish), in id order, before [`LOCK_COUNTERS`] locks them all: creating only those a lock
/// found missing could deadlock, since which rows exist depends on when each transaction looked
/// (two writers each holding a row the other waits to create). Rows that exist are left out
/// before the insert: its conflict check would wait for the transaction that last bumped the
/// row (the new row version is that transaction's until it commits), serialising a publish
/// batch's first round trip behind the previous batch's flush.
pub(super) const CREATE_COUNTERS: &str = "INSERT INTO inbox_counters (agent_id, last_seq, added) \
     SELECT x, 0, 0 FROM unnest($1::text[]) x \
     WHERE NOT EXISTS (SELECT 1 FROM inbox_counters c WHERE c.agent_id = x) \
     ORDER BY x ON CONFLICT (agent_id) DO NOTHING";

/// Inbox counters by agent id: (`last_seq`, unacknowledged depth).
pub(super) type Counters = std::collections::HashMap<String, (i64, u64)>;

/// The sorted, distinct inboxes of `recipients`.
pub(super) fn inboxes_of<'a>(recipients: impl IntoIterator<Item = &'a String>) -> Vec<&'a String> {
    let mut inboxes: Vec<&String> = recipients.into_iter().collect();
    inboxes.sort();
    inboxes.dedup();
    inboxes
}

/// Adds the rows [`READ_COUNTERS`] answered to `into`.
pub(super) fn read_counters(
    found: Vec<tokio_postgres::Row>,
    into: &mut Counters,
) -> StoreResult<()> {
    for r in found {
        into.insert(
            get::<String>(&r, 0)?,
            (get::<i64>(&r, 1)?, get::<i64>(&r, 2)?.max(0) as u64),
        );
    }
    Ok(())
}

/// The counter rows of every recipient in `recipients`, created if missing ([`CREATE_COUNTERS`])
/// and locked until the commit, so sequences are gap-free and committed in order per inbox and a depth check cannot
/// race another publisher.
pub(super) async fn lock_counters<'a>(
    t: &impl GenericClient,
    recipients: impl IntoIterator<Item = &'a String>,
) -> StoreResult<Counters> {
    let inboxes = inboxes_of(recipients);
    let mut counters = Counters::with_capacity(inboxes.len());
    if inboxes.is_empty() {
        return Ok(counters);
    }
    exec(t, CREATE_COUNTERS, &[&inboxes]).await?;
    exec(t, LOCK_COUNTERS, &[&inboxes]).await?;
    read_counters(rows(t, READ_COUNTERS, &[&inboxes]).await?, &mut counters)?;
    Ok(counters)
}

/// The refusal of `m` when a recipient's inbox already holds its `max_depth` (`pending` tells an
/// inbox's unacknowledged entries), or `None`.
pub(super) fn inbox_full(m: &NewMessage, pending: &dyn Fn(&str) -> u64) -> Option<PublishOutcome> {
    let max = m.max_depth?;
    m.recipients.iter().find_map(|agent| {
        let depth = pending(agent);
        (depth >= max).then(|| PublishOutcome::InboxFull {
            agent_id: agent.clone(),
            depth,
        })
    })
}

/// Stores the message row of `m`; answers its storage sequence.
pub(super) async fn insert_row(t: &impl GenericClient, m: &NewMessage) -> StoreResult<i64> {
    let idem_key = m.idempotency.as_ref().map(|k| k.key.clone());
    get(
        &one(
            t,
            "INSERT INTO messages (tenant_id, id, source, source_agent_id, kind, conversation_id, correlation_id, \
             to_text, to_id, attrs, data, signed_hash, idempotency_key, receipt, received_at, expires_at, task_id) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17) RETURNING seq",
            &[
                &m.tenant_id,
                &m.id,
                &m.source,
                &m.source_agent_id,
                &m.kind,
                &m.conversation_id,
                &m.correlation_id,
                &m.to_text,
                &m.to_id,
                &m.attrs,
                &m.data,
                &m.signed_hash,
                &idem_key,
                &m.receipt,
                &m.received_at,
                &m.expires_at,
                &m.task_id,
            ],
        )
        .await?,
        0,
    )
}

/// The message's search index words (`seq` its row), as a batch's are written.
async fn insert_search_terms(t: &impl GenericClient, m: &NewMessage, seq: i64) -> StoreResult<()> {
    if m.search_tags.is_empty() {
        return Ok(());
    }
    let (seqs, tags) = ([seq], [m.search_tags.as_str()]);
    exec(t, super::batch::SEARCH_ALL, &[&&seqs[..], &&tags[..]])
        .await
        .map(drop)
}

/// A `tsquery` for search word groups: every group, each one of its words, each word a quoted
/// lexeme (the words are base-32 digits; quoted anyway so nothing is read as syntax).
fn ts_query(groups: &[Vec<String>]) -> String {
    let quote = |w: &String| format!("'{}'", w.replace('\\', "").replace('\'', "''"));
    groups
        .iter()
        .map(|g| format!("({})", g.iter().map(quote).collect::<Vec<_>>().join(" | ")))
        .collect::<Vec<_>>()
        .join(" & ")
}

/// What a stored message leaves beside its row and inbox entries: its replay record, then
/// [`record_extras`].
pub(super) async fn record_ids(
    t: &impl GenericClient,
    m: &NewMessage,
    seq: i64,
) -> StoreResult<()> {
    exec(
        t,
        "INSERT INTO recent_ids (tenant_id, source, id, message_seq, received_at) VALUES ($1, $2, $3, $4, $5) \
         ON CONFLICT (tenant_id, source, id) DO UPDATE SET message_seq = excluded.message_seq, received_at = excluded.received_at",
        &[&m.tenant_id, &m.source, &m.id, &seq, &m.received_at],
    )
    .await?;
    record_extras(t, m, seq).await
}

/// Whether `m` leaves anything for [`record_extras`] to write.
pub(super) fn has_extras(m: &NewMessage) -> bool {
    m.idempotency.is_some() || !m.blob_refs.is_empty() || m.usage.is_some()
}

/// A stored message's idempotency record, its attachments' references and its usage report.
pub(super) async fn record_extras(
    t: &impl GenericClient,
    m: &NewMessage,
    seq: i64,
) -> StoreResult<()> {
    if let Some(k) = &m.idempotency {
        exec(
            t,
            "INSERT INTO idempotency (tenant_id, source, to_id, key, message_seq, created_at) VALUES ($1, $2, $3, $4, $5, $6) \
             ON CONFLICT (tenant_id, source, to_id, key) DO UPDATE SET message_seq = excluded.message_seq, created_at = excluded.created_at",
            &[&k.tenant_id, &k.source, &k.to_id, &k.key, &seq, &m.received_at],
        )
        .await?;
    }
    for blob in &m.blob_refs {
        exec(
            t,
            "INSERT INTO blob_refs (blob_id, message_seq) VALUES ($1, $2) ON CONFLICT DO NOTHING",
            &[blob, &seq],
        )
        .await?;
    }
    if let Some(u) = &m.usage {
        insert_usage(t, seq, u).await?;
    }
    Ok(())
}

pub(super) async fn insert_usage(
    t: &impl GenericClient,
    seq: i64,
    u: &UsageRow,
) -> StoreResult<()> {
    let tokens = u.usage.as_ref().map(|f| f.tokens).unwrap_or_default();
    let reported_by = u.usage.as_ref().map(|f| f.reported_by.as_str());
    let provider = u.usage.as_ref().and_then(|f| f.provider.as_deref());
    let model = u.usage.as_ref().and_then(|f| f.model.as_deref());
    let currency = u.cost.as_ref().map(|c| c.currency.as_str());
    let micros = u.cost.as_ref().map(|c| c.micros);
    let source = u.cost.as_ref().and_then(|c| c.source.as_deref());
    exec(
        t,
        "INSERT INTO usage (message_seq, tenant_id, workspace_id, agent_id, task_id, capability, day, field, \
         reported_by, provider, model, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, \
         reasoning_tokens, requests, wall_ms, currency, cost_micros, cost_source) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21)",
        &[
            &seq,
            &u.tenant_id,
            &u.workspace_id,
            &u.agent_id,
            &u.task_id,
            &u.capability,
            &u.day,
            &u.field,
            &reported_by,
            &provider,
            &model,
            &tokens.input,
            &tokens.output,
            &tokens.cache_read,
            &tokens.cache_write,
            &tokens.reasoning,
            &tokens.requests,
            &tokens.wall_ms,
            &currency,
            &micros,
            &source,
        ],
    )
    .await?;
    Ok(())
}

async fn insert_event(t: &impl GenericClient, task_id: &str, e: &TaskEventRow) -> StoreResult<()> {
    // Numbered under the task row's lock (its insert or its version-checked update).
    exec(
        t,
        "INSERT INTO task_events (task_id, n, at, actor, envelope_id, kind, from_state, to_state, flag, timer, warnings, reason) \
         VALUES ($1, (SELECT coalesce(max(n), 0) + 1 FROM task_events WHERE task_id = $1), $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
        &[&task_id, &e.at, &e.actor, &e.envelope_id, &e.kind, &e.from_state, &e.to_state, &e.flag, &e.timer, &e.warnings, &e.reason],
    )
    .await?;
    Ok(())
}

pub(super) async fn write_task(t: &impl GenericClient, w: &TaskWrite) -> StoreResult<()> {
    match w {
        TaskWrite::Create(k, e) => {
            exec(
                t,
                &format!("INSERT INTO tasks ({TASK_COLS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)"),
                &[
                    &k.id, &k.tenant_id, &k.workspace_id, &k.requester_id, &k.recipient_id, &k.request_id,
                    &k.conversation_id, &k.capability, &k.state, &k.terminal, &k.machine, &k.next_deadline,
                    &k.created_at, &k.updated_at, &k.version,
                ],
            )
            .await?;
            insert_event(t, &k.id, e).await?;
        }
        TaskWrite::Update(k, expected, e) => {
            let n = exec(
                t,
                "UPDATE tasks SET state = $2, terminal = $3, machine = $4, next_deadline = $5, updated_at = $6, \
                 version = version + 1 WHERE id = $1 AND version = $7",
                &[&k.id, &k.state, &k.terminal, &k.machine, &k.next_deadline, &k.updated_at, expected],
            )
            .await?;
            if n == 0 {
                return Err(StoreError::Conflict(format!(
                    "task {} changed concurrently",
                    k.id
                )));
            }
            insert_event(t, &k.id, e).await?;
        }
    }
    Ok(())
}

/// Inbox entries (with their messages) matching `filter` on `i`, in inbox order.
async fn entries_where(
    c: &impl GenericClient,
    filter: &str,
    p: Params<'_>,
) -> StoreResult<Vec<InboxEntry>> {
    rows(
        c,
        &format!(
            "SELECT i.agent_id, i.sequence, i.state, i.attempts, i.last_attempt_at, {MESSAGE_COLS} \
             FROM inbox i JOIN messages m ON m.seq = i.message_seq WHERE {filter} ORDER BY i.agent_id, i.sequence"
        ),
        p,
    )
    .await?
    .iter()
    .map(entry)
    .collect()
}

/// Moves the unsettled entries matching `filter` (on `inbox`) to `state` and answers them as they
/// were; `skip_locked` leaves entries another transaction holds (a lease or another reaper) for
/// a later pass, so concurrent reapers settle each entry once. The caller counts them settled
/// ([`count_settled`]).
async fn settle_where(
    t: &impl GenericClient,
    filter: &str,
    p: Params<'_>,
    state: EntryState,
    skip_locked: bool,
) -> StoreResult<Vec<InboxEntry>> {
    let skip = if skip_locked { " SKIP LOCKED" } else { "" };
    let sql = format!(
        "WITH d AS (SELECT agent_id, sequence, state FROM inbox WHERE state IN (0, 1) AND {filter} \
         ORDER BY agent_id, sequence FOR UPDATE{skip}), \
         u AS (UPDATE inbox i SET state = {code}, lease = NULL FROM d \
         WHERE i.agent_id = d.agent_id AND i.sequence = d.sequence \
         RETURNING i.agent_id, i.sequence, d.state, i.attempts, i.last_attempt_at, i.message_seq) \
         SELECT u.agent_id, u.sequence, u.state, u.attempts, u.last_attempt_at, {MESSAGE_COLS} \
         FROM u JOIN messages m ON m.seq = u.message_seq ORDER BY u.agent_id, u.sequence",
        code = state_code(state),
    );
    rows(t, &sql, p).await?.iter().map(entry).collect()
}

/// Counts `entries` (settled by [`settle_where`]) in their inboxes' `inbox_settled` rows, one
/// update per inbox in id order, once per transaction: two passes each counting its own would
/// lock those rows out of order across the transaction, and two reapers overlapping could then
/// deadlock.
async fn count_settled<'a>(
    t: &impl GenericClient,
    entries: impl IntoIterator<Item = &'a InboxEntry>,
) -> StoreResult<()> {
    let mut per_agent: std::collections::BTreeMap<&str, i64> = Default::default();
    for e in entries {
        *per_agent.entry(&e.agent_id).or_default() += 1;
    }
    for (agent, n) in per_agent {
        exec(t, SETTLED, &[&agent, &n]).await?;
    }
    Ok(())
}

/// The SQL condition on `m` for what `viewer` may read (§7, per message), with its `$3`
/// argument; the same rule as SQLite's.
fn viewer_filter(viewer: &ConversationViewer) -> (&'static str, String) {
    match viewer {
        ConversationViewer::Agent(id) => (
            "AND (m.source_agent_id = $3 OR EXISTS (SELECT 1 FROM inbox i \
             WHERE i.message_seq = m.seq AND i.agent_id = $3))",
            id.clone(),
        ),
        ConversationViewer::Workspace(ws) => (
            "AND (EXISTS (SELECT 1 FROM agents a WHERE a.id = m.source_agent_id AND a.workspace_id = $3) \
             OR EXISTS (SELECT 1 FROM inbox i JOIN agents a ON a.id = i.agent_id \
             WHERE i.message_seq = m.seq AND a.workspace_id = $3))",
            ws.clone(),
        ),
        ConversationViewer::Tenant => ("AND $3::text IS NOT NULL", String::new()),
    }
}

async fn insert_tenant(t: &impl GenericClient, r: &TenantRow) -> StoreResult<()> {
    exec_unique(
        t,
        "tenant",
        &format!("INSERT INTO tenants ({TENANT_COLS}) VALUES ($1, $2, $3, $4, $5)"),
        &[&r.id, &r.slug, &r.data_key, &r.created_at, &r.suspended_at],
    )
    .await?;
    Ok(())
}

async fn insert_workspace(t: &impl GenericClient, w: &WorkspaceRow) -> StoreResult<()> {
    exec_unique(
        t,
        "workspace",
        &format!("INSERT INTO workspaces ({WORKSPACE_COLS}) VALUES ($1, $2, $3, $4, $5)"),
        &[&w.id, &w.tenant_id, &w.slug, &w.policy, &w.created_at],
    )
    .await?;
    Ok(())
}

async fn insert_user(t: &impl GenericClient, u: &UserRow) -> StoreResult<()> {
    exec(
        t,
        &format!("INSERT INTO users ({USER_COLS}) VALUES ($1, $2, $3, $4, $5, $6)"),
        &[
            &u.id,
            &u.tenant_id,
            &u.workspace_id,
            &u.name,
            &u.role.as_str(),
            &u.created_at,
        ],
    )
    .await?;
    Ok(())
}

async fn insert_token(t: &impl GenericClient, r: &TokenRow) -> StoreResult<()> {
    let (kind, subject) = r.subject.stored();
    exec(
        t,
        &format!("INSERT INTO tokens ({TOKEN_COLS}) VALUES ($1, $2, $3, $4, $5, $6)"),
        &[
            &r.hash.as_slice(),
            &kind,
            &subject,
            &r.created_at,
            &r.label,
            &r.revoked_at,
        ],
    )
    .await?;
    Ok(())
}

/// Serialises name and alias changes in one workspace: uniqueness spans two tables (a name may
/// not equal a live alias, nor an alias a live name), which no single index can check.
async fn lock_names(t: &impl GenericClient, workspace_id: &str) -> StoreResult<()> {
    lock_keys(t, &[key_of("names", &[workspace_id])]).await
}

async fn set_aliases(
    t: &impl GenericClient,
    workspace_id: &str,
    agent_id: &str,
    aliases: &[String],
) -> StoreResult<()> {
    for alias in aliases {
        let clash: bool = get(
            &one(
                t,
                "SELECT EXISTS (SELECT 1 FROM agents WHERE workspace_id = $1 AND name = $2 AND deleted_at IS NULL AND id != $3)",
                &[&workspace_id, alias, &agent_id],
            )
            .await?,
            0,
        )?;
        if clash {
            return Err(StoreError::Conflict(format!("alias {alias}")));
        }
        exec_unique(
            t,
            &format!("alias {alias}"),
            "INSERT INTO aliases (workspace_id, alias, agent_id) VALUES ($1, $2, $3)",
            &[&workspace_id, alias, &agent_id],
        )
        .await?;
    }
    Ok(())
}

/// Marks the settled entries `$1`/`$2` (agents, sequences) as owing their sender the notice of
/// kind `$3` (`NoticeKind::code`), replacing a hold's, those whose sender still exists
/// (`Store::reap_inboxes`, `Store::delete_agent`).
const FLAG_NOTICES: &str = "UPDATE inbox i SET notice = $3, hold = NULL FROM unnest($1::text[], $2::bigint[]) AS u(a, s), messages m \
     WHERE i.agent_id = u.a AND i.sequence = u.s AND m.seq = i.message_seq \
     AND EXISTS (SELECT 1 FROM agents a WHERE a.id = m.source_agent_id AND a.deleted_at IS NULL)";

/// [`FLAG_NOTICES`] for holds, marked in their own column on entries still pending and owing no
/// settled entry's notice (checked again on the row an update waited for), answering each
/// entry it marked (`mark_holds`).
const FLAG_HOLDS: &str = "UPDATE inbox i SET hold = $3 FROM unnest($1::text[], $2::bigint[]) AS u(a, s), messages m \
     WHERE i.agent_id = u.a AND i.sequence = u.s AND m.seq = i.message_seq \
     AND i.state IN (0, 1) AND i.notice IS NULL \
     AND EXISTS (SELECT 1 FROM agents a WHERE a.id = m.source_agent_id AND a.deleted_at IS NULL) \
     RETURNING i.agent_id, i.sequence";

/// Up to `$3` settled entries owing their sender a notice past (`$1`, `$2`), in inbox order,
/// each with its mark.
static PENDING_NOTICES: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "SELECT i.agent_id, i.sequence, i.state, i.attempts, i.last_attempt_at, {MESSAGE_COLS}, i.notice \
         FROM inbox i JOIN messages m ON m.seq = i.message_seq WHERE i.notice IS NOT NULL \
         AND (i.agent_id, i.sequence) > ($1, $2) ORDER BY i.agent_id, i.sequence LIMIT $3"
    )
});

/// [`PENDING_NOTICES`] for the held entries (`inbox.hold`).
static PENDING_HOLDS: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "SELECT i.agent_id, i.sequence, i.state, i.attempts, i.last_attempt_at, {MESSAGE_COLS} \
         FROM inbox i JOIN messages m ON m.seq = i.message_seq WHERE i.hold IS NOT NULL \
         AND (i.agent_id, i.sequence) > ($1, $2) ORDER BY i.agent_id, i.sequence LIMIT $3"
    )
});

/// When the earliest lease of inbox `$1` runs out (over `inbox_due`).
pub(super) const NEXT_VISIBLE: &str =
    "SELECT min(visible_at) FROM inbox WHERE agent_id = $1 AND state = 1";

/// The deliverable entries of one inbox, claimed and leased in one statement: leases that ran
/// out, never-delivered entries above `after`, and those at or below it visible since `$7` (a
/// lease lost to an asynchronous commit the database crashed before flushing, see
/// [`crate::Store::lease`]; normally an empty range), each read over its own partial index and
/// locked there with `SKIP LOCKED` (a concurrent lease, ack or reaper that got there first wins;
/// a row changed meanwhile is checked again once locked), so no entry is handed out twice: the
/// leases that ran out longest ago (in `inbox_due`'s own order) and the lowest new sequences, the
/// lease as a whole in sequence order. The leased rows are found again by primary key (`= ANY`
/// of their sequences, within their range: without it, a generic plan made while the inbox was
/// small found them by agent alone, reading the whole inbox). Its generic plan reads each index
/// from its bounds only (`postgres/plans.rs`), so PostgreSQL may cache it: planning it for its
/// parameters cost a noticeable share of a core under steady load.
/// The token is the same shape SQLite writes (`d{sequence}.{attempt}.{now}`), unique per entry
/// and attempt.
pub(super) const LEASE: &str = "WITH due AS (SELECT sequence FROM inbox \
     WHERE agent_id = $1 AND state = 1 AND visible_at <= $2 AND expires_at > $2 \
     AND attempts < $3 LIMIT $5 FOR UPDATE SKIP LOCKED), \
     new AS (SELECT sequence FROM inbox WHERE agent_id = $1 AND state = 0 AND sequence > $4 AND expires_at > $2 \
     ORDER BY sequence LIMIT $5 FOR UPDATE SKIP LOCKED), \
     lost AS (SELECT sequence FROM inbox WHERE agent_id = $1 AND state = 0 AND sequence <= $4 \
     AND visible_at <= $7 AND expires_at > $2 ORDER BY sequence LIMIT $5 FOR UPDATE SKIP LOCKED), \
     l AS (SELECT sequence FROM due UNION ALL SELECT sequence FROM new \
      UNION ALL SELECT sequence FROM lost ORDER BY sequence LIMIT $5), \
     u AS (UPDATE inbox i SET state = 1, attempts = i.attempts + 1, visible_at = $6, \
      lease = 'd' || i.sequence || '.' || (i.attempts + 1) || '.' || $2::bigint, last_attempt_at = $2 \
      WHERE i.agent_id = $1 AND i.sequence = ANY (ARRAY(SELECT sequence FROM l)) \
      AND i.sequence BETWEEN (SELECT min(sequence) FROM l) AND (SELECT max(sequence) FROM l) \
      RETURNING i.sequence, i.attempts, i.lease, i.message_seq) \
     SELECT u.sequence, u.attempts, u.lease, m.tenant_id, m.attrs, m.data, m.received_at \
     FROM u JOIN messages m ON m.seq = u.message_seq ORDER BY u.sequence";

impl Store for PgStore {
    async fn create_tenant(&self, t: TenantRow) -> StoreResult<()> {
        insert_tenant(&self.client().await?, &t).await
    }

    async fn tenant(&self, id: &str) -> StoreResult<Option<TenantRow>> {
        let c = self.client().await?;
        opt(
            &c,
            &format!("SELECT {TENANT_COLS} FROM tenants WHERE id = $1"),
            &[&id],
        )
        .await?
        .map(|r| tenant(&r))
        .transpose()
    }

    async fn tenant_by_slug(&self, slug: &str) -> StoreResult<Option<TenantRow>> {
        let c = self.client().await?;
        opt(
            &c,
            &format!("SELECT {TENANT_COLS} FROM tenants WHERE slug = $1"),
            &[&slug],
        )
        .await?
        .map(|r| tenant(&r))
        .transpose()
    }

    async fn tenants(&self) -> StoreResult<Vec<TenantRow>> {
        let c = self.client().await?;
        rows(
            &c,
            &format!("SELECT {TENANT_COLS} FROM tenants ORDER BY created_at, id"),
            &[],
        )
        .await?
        .iter()
        .map(tenant)
        .collect()
    }

    async fn create_workspace(&self, w: WorkspaceRow) -> StoreResult<()> {
        insert_workspace(&self.client().await?, &w).await
    }

    async fn workspace(&self, id: &str) -> StoreResult<Option<WorkspaceRow>> {
        let c = self.client().await?;
        opt(
            &c,
            &format!("SELECT {WORKSPACE_COLS} FROM workspaces WHERE id = $1"),
            &[&id],
        )
        .await?
        .map(|r| workspace(&r))
        .transpose()
    }

    async fn workspace_by_slug(
        &self,
        tenant_id: &str,
        slug: &str,
    ) -> StoreResult<Option<WorkspaceRow>> {
        let c = self.client().await?;
        opt(
            &c,
            &format!("SELECT {WORKSPACE_COLS} FROM workspaces WHERE tenant_id = $1 AND slug = $2"),
            &[&tenant_id, &slug],
        )
        .await?
        .map(|r| workspace(&r))
        .transpose()
    }

    async fn set_workspace_policy(&self, id: &str, policy: String) -> StoreResult<()> {
        let c = self.client().await?;
        one_changed(
            exec(
                &c,
                "UPDATE workspaces SET policy = $2 WHERE id = $1",
                &[&id, &policy],
            )
            .await?,
        )
    }

    async fn create_user(&self, u: UserRow) -> StoreResult<()> {
        insert_user(&self.client().await?, &u).await
    }

    async fn user(&self, id: &str) -> StoreResult<Option<UserRow>> {
        let c = self.client().await?;
        opt(
            &c,
            &format!("SELECT {USER_COLS} FROM users WHERE id = $1"),
            &[&id],
        )
        .await?
        .map(|r| user(&r))
        .transpose()
    }

    async fn create_token(&self, t: TokenRow) -> StoreResult<()> {
        insert_token(&self.client().await?, &t).await
    }

    async fn token(&self, hash: [u8; 32]) -> StoreResult<Option<TokenRow>> {
        let c = self.client().await?;
        opt(
            &c,
            &format!("SELECT {TOKEN_COLS} FROM tokens WHERE hash = $1 AND revoked_at IS NULL"),
            &[&hash.as_slice()],
        )
        .await?
        .map(|r| token(&r))
        .transpose()
    }

    async fn set_tenant_suspended(&self, id: &str, at: Option<i64>) -> StoreResult<()> {
        let c = self.client().await?;
        one_changed(
            exec(
                &c,
                "UPDATE tenants SET suspended_at = $2 WHERE id = $1",
                &[&id, &at],
            )
            .await?,
        )
    }

    async fn workspaces(&self, tenant_id: &str) -> StoreResult<Vec<WorkspaceRow>> {
        let c = self.client().await?;
        rows(
            &c,
            &format!("SELECT {WORKSPACE_COLS} FROM workspaces WHERE tenant_id = $1 ORDER BY slug"),
            &[&tenant_id],
        )
        .await?
        .iter()
        .map(workspace)
        .collect()
    }

    async fn users_with_role(&self, role: Role) -> StoreResult<Vec<UserRow>> {
        let c = self.client().await?;
        rows(
            &c,
            &format!("SELECT {USER_COLS} FROM users WHERE role = $1 ORDER BY created_at, id"),
            &[&role.as_str()],
        )
        .await?
        .iter()
        .map(user)
        .collect()
    }

    async fn users(&self, tenant_id: Option<&str>) -> StoreResult<Vec<UserRow>> {
        let c = self.client().await?;
        rows(
            &c,
            &format!(
                "SELECT {USER_COLS} FROM users WHERE $1::text IS NULL OR tenant_id = $1 \
                 ORDER BY created_at, n"
            ),
            &[&tenant_id],
        )
        .await?
        .iter()
        .map(user)
        .collect()
    }

    async fn delete_user(&self, id: &str) -> StoreResult<bool> {
        let mut c = self.client().await?;
        let tx = c.transaction().await?;
        exec(
            &tx,
            "DELETE FROM tokens WHERE kind = 'user' AND subject_id = $1",
            &[&id],
        )
        .await?;
        exec(
            &tx,
            "DELETE FROM console_sessions WHERE user_id = $1",
            &[&id],
        )
        .await?;
        let n = exec(&tx, "DELETE FROM users WHERE id = $1", &[&id]).await?;
        tx.commit().await?;
        Ok(n > 0)
    }

    async fn user_tokens(&self, tenant_id: Option<&str>) -> StoreResult<Vec<TokenRow>> {
        let c = self.client().await?;
        rows(
            &c,
            "SELECT t.hash, t.kind, t.subject_id, t.created_at, t.label, t.revoked_at \
             FROM tokens t JOIN users u ON u.id = t.subject_id \
             WHERE t.kind = 'user' AND ($1::text IS NULL OR u.tenant_id = $1) \
             ORDER BY t.created_at, t.hash",
            &[&tenant_id],
        )
        .await?
        .iter()
        .map(token)
        .collect()
    }

    async fn revoke_token(&self, hash: [u8; 32], at: i64) -> StoreResult<bool> {
        let c = self.client().await?;
        Ok(exec(
            &c,
            "UPDATE tokens SET revoked_at = $2 WHERE hash = $1 AND revoked_at IS NULL",
            &[&hash.as_slice(), &at],
        )
        .await?
            > 0)
    }

    async fn provision_tenant(
        &self,
        t: TenantRow,
        w: WorkspaceRow,
        u: UserRow,
        token: TokenRow,
    ) -> StoreResult<()> {
        let mut c = self.client().await?;
        let tx = c.transaction().await?;
        insert_tenant(&tx, &t).await?;
        insert_workspace(&tx, &w).await?;
        insert_user(&tx, &u).await?;
        insert_token(&tx, &token).await?;
        Ok(tx.commit().await?)
    }

    async fn create_agent(&self, a: AgentRow, aliases: Vec<String>) -> StoreResult<()> {
        let mut c = self.client().await?;
        let tx = c.transaction().await?;
        lock_names(&tx, &a.workspace_id).await?;
        // A name may not equal a live agent's name or alias in the workspace (§4.1, §4.3).
        let alias_clash: bool = get(
            &one(
                &tx,
                "SELECT EXISTS (SELECT 1 FROM aliases WHERE workspace_id = $1 AND alias = $2)",
                &[&a.workspace_id, &a.name],
            )
            .await?,
            0,
        )?;
        if alias_clash {
            return Err(StoreError::Conflict(format!("name {}", a.name)));
        }
        exec_unique(
            &tx,
            &format!("name {}", a.name),
            &format!("INSERT INTO agents ({AGENT_COLS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)"),
            &[&a.id, &a.tenant_id, &a.workspace_id, &a.name, &a.owner_id, &a.card, &a.visibility, &a.created_at, &a.updated_at, &a.deleted_at, &a.suspended_at],
        )
        .await?;
        set_aliases(&tx, &a.workspace_id, &a.id, &aliases).await?;
        Ok(tx.commit().await?)
    }

    async fn agent(&self, id: &str) -> StoreResult<Option<AgentRow>> {
        let c = self.client().await?;
        opt(
            &c,
            &format!("SELECT {AGENT_COLS} FROM agents WHERE id = $1"),
            &[&id],
        )
        .await?
        .map(|r| agent(&r))
        .transpose()
    }

    async fn agent_by_name(&self, workspace_id: &str, name: &str) -> StoreResult<Option<AgentRow>> {
        let c = self.client().await?;
        let by_alias = opt(
            &c,
            "SELECT agent_id FROM aliases WHERE workspace_id = $1 AND alias = $2",
            &[&workspace_id, &name],
        )
        .await?;
        if let Some(r) = by_alias {
            let id: String = get(&r, 0)?;
            return opt(
                &c,
                &format!("SELECT {AGENT_COLS} FROM agents WHERE id = $1"),
                &[&id],
            )
            .await?
            .map(|r| agent(&r))
            .transpose();
        }
        // The live agent first, else the latest deleted one (AB-4003 rather than AB-4001).
        opt(
            &c,
            &format!(
                "SELECT {AGENT_COLS} FROM agents WHERE workspace_id = $1 AND name = $2 \
                 ORDER BY deleted_at IS NOT NULL, deleted_at DESC LIMIT 1"
            ),
            &[&workspace_id, &name],
        )
        .await?
        .map(|r| agent(&r))
        .transpose()
    }

    async fn agents(&self, tenant_id: &str) -> StoreResult<Vec<AgentRow>> {
        let c = self.client().await?;
        rows(
            &c,
            &format!("SELECT {AGENT_COLS} FROM agents WHERE tenant_id = $1 AND deleted_at IS NULL ORDER BY workspace_id, name"),
            &[&tenant_id],
        )
        .await?
        .iter()
        .map(agent)
        .collect()
    }

    async fn aliases(&self, agent_id: &str) -> StoreResult<Vec<String>> {
        let c = self.client().await?;
        rows(
            &c,
            "SELECT alias FROM aliases WHERE agent_id = $1 ORDER BY alias",
            &[&agent_id],
        )
        .await?
        .iter()
        .map(|r| get(r, 0))
        .collect()
    }

    async fn update_agent(&self, a: AgentRow, aliases: Option<Vec<String>>) -> StoreResult<()> {
        let mut c = self.client().await?;
        let tx = c.transaction().await?;
        if aliases.is_some() {
            lock_names(&tx, &a.workspace_id).await?;
        }
        one_changed(
            exec(
                &tx,
                "UPDATE agents SET card = $2, visibility = $3, updated_at = $4 WHERE id = $1 AND deleted_at IS NULL",
                &[&a.id, &a.card, &a.visibility, &a.updated_at],
            )
            .await?,
        )?;
        if let Some(aliases) = aliases {
            exec(&tx, "DELETE FROM aliases WHERE agent_id = $1", &[&a.id]).await?;
            set_aliases(&tx, &a.workspace_id, &a.id, &aliases).await?;
        }
        Ok(tx.commit().await?)
    }

    async fn delete_agent(&self, id: &str, at: i64) -> StoreResult<Vec<InboxEntry>> {
        let mut c = self.client().await?;
        let tx = c.transaction().await?;
        one_changed(
            exec(
                &tx,
                "UPDATE agents SET deleted_at = $2 WHERE id = $1 AND deleted_at IS NULL",
                &[&id, &at],
            )
            .await?,
        )?;
        exec(&tx, "DELETE FROM aliases WHERE agent_id = $1", &[&id]).await?;
        exec(&tx, "DELETE FROM subscriptions WHERE agent_id = $1", &[&id]).await?;
        for forget in crate::model::FORGET_SENT {
            exec(&tx, forget, &[&id]).await?;
        }
        let pending = settle_where(&tx, "agent_id = $1", &[&id], EntryState::Dead, false).await?;
        count_settled(&tx, &pending).await?;
        let owing = pending.iter().filter(|e| notice_due(e, true));
        flag_owed(&tx, owing, NoticeKind::Deleted).await?;
        tx.commit().await?;
        Ok(pending)
    }

    async fn add_key(&self, k: KeyRow, max_active: usize, now: i64) -> StoreResult<()> {
        let mut c = self.client().await?;
        let tx = c.transaction().await?;
        // Two registrations racing for the last free slot: one waits for the other's count.
        lock_keys(&tx, &[key_of("keys", &[&k.agent_id])]).await?;
        let active: i64 = get(
            &one(
                &tx,
                "SELECT count(*) FROM keys WHERE agent_id = $1 AND revoked_at IS NULL AND expires_at > $2",
                &[&k.agent_id, &now],
            )
            .await?,
            0,
        )?;
        if active as usize >= max_active {
            return Err(StoreError::Limit(format!("{active} active keys")));
        }
        exec_unique(
            &tx,
            "key",
            &format!("INSERT INTO keys ({KEY_COLS}) VALUES ($1, $2, $3, $4, $5, $6)"),
            &[
                &k.id,
                &k.agent_id,
                &k.public_key,
                &k.created_at,
                &k.expires_at,
                &k.revoked_at,
            ],
        )
        .await?;
        Ok(tx.commit().await?)
    }

    async fn revoke_key(&self, agent_id: &str, key_id: &str, at: i64) -> StoreResult<()> {
        let c = self.client().await?;
        one_changed(
            exec(
                &c,
                "UPDATE keys SET revoked_at = coalesce(revoked_at, $3) WHERE id = $1 AND agent_id = $2",
                &[&key_id, &agent_id, &at],
            )
            .await?,
        )
    }

    async fn keys(&self, agent_id: &str) -> StoreResult<Vec<KeyRow>> {
        let c = self.client().await?;
        rows(
            &c,
            &format!("SELECT {KEY_COLS} FROM keys WHERE agent_id = $1 ORDER BY created_at, id"),
            &[&agent_id],
        )
        .await?
        .iter()
        .map(key)
        .collect()
    }

    async fn key(&self, key_id: &str) -> StoreResult<Option<KeyRow>> {
        let c = self.client().await?;
        opt(
            &c,
            &format!("SELECT {KEY_COLS} FROM keys WHERE id = $1"),
            &[&key_id],
        )
        .await?
        .map(|r| key(&r))
        .transpose()
    }

    async fn suspend_agent(&self, id: &str, at: i64) -> StoreResult<Vec<InboxEntry>> {
        let mut c = self.client().await?;
        let tx = c.transaction().await?;
        let n = exec(
            &tx,
            "UPDATE agents SET suspended_at = $2 WHERE id = $1 AND deleted_at IS NULL AND suspended_at IS NULL",
            &[&id, &at],
        )
        .await?;
        if n == 0 {
            // Suspended already, or not a live agent (NotFound).
            let live = opt(
                &tx,
                "SELECT 1 FROM agents WHERE id = $1 AND deleted_at IS NULL",
                &[&id],
            )
            .await?;
            one_changed(u64::from(live.is_some()))?;
            return Ok(Vec::new());
        }
        // The inbox's counter row, which every publish into it holds from before it reads the
        // suspension to its commit: a publish that read the agent live has committed before the
        // read below, which sees its copy, and one still to come reads the agent suspended.
        lock_counters(&tx, [&id.to_owned()]).await?;
        let pending = entries_where(&tx, "i.agent_id = $1 AND i.state IN (0, 1)", &[&id]).await?;
        let held = mark_holds(&tx, pending).await?;
        tx.commit().await?;
        Ok(held)
    }

    async fn resume_agent(&self, id: &str) -> StoreResult<()> {
        let c = self.client().await?;
        one_changed(
            exec(
                &c,
                "UPDATE agents SET suspended_at = NULL WHERE id = $1 AND deleted_at IS NULL",
                &[&id],
            )
            .await?,
        )
    }

    async fn subscribe(
        &self,
        workspace_id: &str,
        topic_name: &str,
        agent_id: &str,
        at: i64,
    ) -> StoreResult<TopicRow> {
        let mut c = self.client().await?;
        let tx = c.transaction().await?;
        exec(
            &tx,
            "INSERT INTO topics (id, workspace_id, name, created_at) VALUES ($1 || ':' || $2, $1, $2, $3) \
             ON CONFLICT DO NOTHING",
            &[&workspace_id, &topic_name, &at],
        )
        .await?;
        let row = topic(
            &one(
                &tx,
                &format!("SELECT {TOPIC_COLS} FROM topics WHERE workspace_id = $1 AND name = $2"),
                &[&workspace_id, &topic_name],
            )
            .await?,
        )?;
        exec(
            &tx,
            "INSERT INTO subscriptions (topic_id, agent_id, created_at) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
            &[&row.id, &agent_id, &at],
        )
        .await?;
        tx.commit().await?;
        Ok(row)
    }

    async fn unsubscribe(
        &self,
        workspace_id: &str,
        topic_name: &str,
        agent_id: &str,
    ) -> StoreResult<()> {
        let c = self.client().await?;
        exec(
            &c,
            "DELETE FROM subscriptions WHERE agent_id = $3 AND topic_id = \
             (SELECT id FROM topics WHERE workspace_id = $1 AND name = $2)",
            &[&workspace_id, &topic_name, &agent_id],
        )
        .await?;
        Ok(())
    }

    async fn topic(
        &self,
        workspace_id: &str,
        topic_name: &str,
    ) -> StoreResult<Option<(TopicRow, Vec<String>)>> {
        let c = self.client().await?;
        let Some(r) = opt(
            &c,
            &format!("SELECT {TOPIC_COLS} FROM topics WHERE workspace_id = $1 AND name = $2"),
            &[&workspace_id, &topic_name],
        )
        .await?
        else {
            return Ok(None);
        };
        let row = topic(&r)?;
        let subs = rows(
            &c,
            "SELECT agent_id FROM subscriptions WHERE topic_id = $1 ORDER BY agent_id",
            &[&row.id],
        )
        .await?
        .iter()
        .map(|r| get(r, 0))
        .collect::<Result<_, _>>()?;
        Ok(Some((row, subs)))
    }

    async fn topics(&self, workspace_id: &str) -> StoreResult<Vec<(TopicRow, u64)>> {
        let c = self.client().await?;
        rows(
            &c,
            "SELECT t.id, t.workspace_id, t.name, t.created_at, \
             (SELECT count(*) FROM subscriptions s WHERE s.topic_id = t.id) \
             FROM topics t WHERE t.workspace_id = $1 ORDER BY t.name",
            &[&workspace_id],
        )
        .await?
        .iter()
        .map(|r| Ok((topic(r)?, get::<i64>(r, 4)?.max(0) as u64)))
        .collect()
    }

    async fn recent_message(
        &self,
        tenant_id: &str,
        source: &str,
        id: &str,
        since: i64,
    ) -> StoreResult<Option<MessageRow>> {
        recent_in(&self.client().await?, tenant_id, source, id, since).await
    }

    async fn idempotent_message(
        &self,
        key: &IdempotencyKey,
        since: i64,
    ) -> StoreResult<Option<MessageRow>> {
        idempotent_in(&self.client().await?, key, since).await
    }

    async fn publish(&self, m: NewMessage) -> StoreResult<PublishOutcome> {
        // Publishes are grouped into shared transactions (`batch`), but one that writes a task or
        // clears a notice is stored alone: its check may fail, which would send a whole batch one by one.
        let m = match (&m.task, &m.notice_of) {
            (None, None) => match self.batcher.publish(m).await {
                Ok(outcome) => return outcome,
                Err(m) => m,
            },
            _ => m,
        };
        super::batch::publish_alone(&mut self.client().await?, &m).await
    }

    async fn pending_count(&self, agent_id: &str) -> StoreResult<u64> {
        let c = self.client().await?;
        let n = opt(&c, DEPTH, &[&agent_id])
            .await?
            .map(|r| get::<i64>(&r, 0))
            .transpose()?;
        Ok(n.unwrap_or(0).max(0) as u64)
    }

    async fn lease(&self, req: LeaseRequest) -> StoreResult<Vec<Delivery>> {
        let c = self.client().await?;
        let lease = c.prepare_cached(LEASE).await?;
        // One statement in its own transaction, sent with its `BEGIN` and `COMMIT` in one round
        // trip (polled in order, each sends on its first poll, and the server runs them in the
        // order sent); on an error in it the server turns the `COMMIT` into a rollback.
        let (max, after, limit, until, lost_since) = (
            i64::from(req.max_attempts),
            req.after as i64,
            i64::from(req.limit),
            req.now + req.visibility_ms,
            req.now - req.visibility_ms,
        );
        let params: Params<'_> = &[
            &req.agent_id,
            &req.now,
            &max,
            &after,
            &limit,
            &until,
            &lost_since,
        ];
        let (begun, found, ended) = tokio::join!(
            biased;
            c.batch_execute(BEGIN_ASYNC),
            c.query(&lease, params),
            c.batch_execute("COMMIT"),
        );
        let found = (begun.and(found).and_then(|f| ended.map(|()| f)))?;
        found
            .iter()
            .map(|r| {
                Ok(Delivery {
                    sequence: get::<i64>(r, 0)? as u64,
                    attempt: get::<i64>(r, 1)? as u32,
                    token: get(r, 2)?,
                    message: DeliveredMessage {
                        tenant_id: get(r, 3)?,
                        attrs: get(r, 4)?,
                        data: get(r, 5)?,
                        received_at: get(r, 6)?,
                    },
                })
            })
            .collect()
    }

    async fn ack(
        &self,
        agent_id: &str,
        acks: Vec<(u64, String)>,
        at: i64,
    ) -> StoreResult<Vec<AckOutcome>> {
        let c = self.client().await?;
        // Every ack in one statement (a burst from a socket is hundreds), then one read for
        // those it did not settle (acked already under the same lease, or stale), sent with
        // `BEGIN` and `COMMIT` in one round trip: a caller dropped midway (a socket closing) never
        // leaves a transaction open on a pooled connection, as one spanning two round trips did.
        let settle = c.prepare_cached(ACK).await?;
        let held = c.prepare_cached(ACK_HELD).await?;
        let sequences: Vec<i64> = acks.iter().map(|a| a.0 as i64).collect();
        let tokens: Vec<&str> = acks.iter().map(|a| a.1.as_str()).collect();
        let (lo, hi) = (
            sequences.iter().copied().min().unwrap_or(0),
            sequences.iter().copied().max().unwrap_or(0),
        );
        let params: Params<'_> = &[&agent_id, &sequences, &tokens, &at, &lo, &hi];
        let read: Params<'_> = &[&agent_id, &sequences];
        let (begun, updated, read, ended) = tokio::join!(
            biased;
            c.batch_execute(BEGIN_ASYNC),
            c.query(&settle, params),
            c.query(&held, read),
            c.batch_execute("COMMIT"),
        );
        let (updated, read) = begun.and(ended).and(updated).and_then(|u| Ok((u, read?)))?;
        let mut settled_now = std::collections::HashMap::with_capacity(updated.len());
        for r in &updated {
            settled_now.insert(get::<i64>(r, 0)?, get::<String>(r, 1)?);
        }
        let mut now_held = std::collections::HashMap::with_capacity(read.len());
        for r in &read {
            now_held.insert(
                get::<i64>(r, 0)?,
                (get::<i64>(r, 1)?, get::<Option<String>>(r, 2)?),
            );
        }
        let mut out = Vec::with_capacity(acks.len());
        for (sequence, token) in &acks {
            let sequence = *sequence as i64;
            // The first ack of an entry this statement settled is the one that acked it; a
            // repeat of it in the same batch reads as acked already, as it would one by one.
            out.push(if settled_now.get(&sequence) == Some(token) {
                settled_now.remove(&sequence);
                AckOutcome::Acked
            } else {
                match now_held.get(&sequence) {
                    Some((state, Some(lease)))
                        if lease == token && state_from(*state) == EntryState::Acked =>
                    {
                        AckOutcome::AlreadyAcked
                    }
                    _ => AckOutcome::Stale,
                }
            });
        }
        Ok(out)
    }

    async fn reap_inboxes(&self, now: i64, max_attempts: u32) -> StoreResult<ReapReport> {
        let mut c = self.client().await?;
        let tx = c.transaction().await?;
        let max = i64::from(max_attempts);
        let dead = settle_where(
            &tx,
            // `visible_at + 0` and `expires_at + 0`: the keys of `inbox_leases` and
            // `inbox_expiry` (schema.rs), read across inboxes.
            "state = 1 AND visible_at + 0 <= $1 AND attempts >= $2",
            &[&now, &max],
            EntryState::Dead,
            true,
        )
        .await?;
        let expired = settle_where(
            &tx,
            "expires_at + 0 <= $1",
            &[&now],
            EntryState::Expired,
            true,
        )
        .await?;
        count_settled(&tx, dead.iter().chain(&expired)).await?;
        let report = ReapReport { dead, expired };
        flag_owed(&tx, report.owing(), NoticeKind::Settled).await?;
        tx.commit().await?;
        Ok(report)
    }

    async fn pending_task_notices(
        &self,
        after: &str,
        limit: u32,
    ) -> StoreResult<Vec<(TaskRow, u8)>> {
        let c = self.client().await?;
        rows(
            &c,
            &format!(
                "SELECT {TASK_COLS}, notices FROM tasks WHERE notices <> 0 AND id > $1 \
                 ORDER BY id LIMIT $2"
            ),
            &[&after, &i64::from(limit)],
        )
        .await?
        .iter()
        .map(|r| Ok((task(r)?, get::<i32>(r, 15)? as u8)))
        .collect()
    }

    async fn forgo_notice(&self, owed: Owed) -> StoreResult<()> {
        let c = self.client().await?;
        match clear_owed(&c, &owed).await {
            Err(StoreError::Conflict(_)) => Ok(()),
            done => done,
        }
    }

    async fn pending_notices(
        &self,
        after: (String, u64),
        limit: u32,
    ) -> StoreResult<Vec<(InboxEntry, NoticeKind)>> {
        let c = self.client().await?;
        let p: Params<'_> = &[&after.0, &(after.1 as i64), &i64::from(limit)];
        let settled = rows(&c, &PENDING_NOTICES, p)
            .await?
            .iter()
            .map(|r| {
                let kind = get::<i16>(r, r.len() - 1)?;
                Ok((entry(r)?, NoticeKind::from_code(kind.into())))
            })
            .collect::<StoreResult<_>>()?;
        let holds = rows(&c, &PENDING_HOLDS, p)
            .await?
            .iter()
            .map(entry)
            .collect::<StoreResult<_>>()?;
        Ok(crate::model::owed_page(settled, holds, limit))
    }

    async fn next_visible(&self, agent_id: &str) -> StoreResult<Option<i64>> {
        let c = self.client().await?;
        get(&one(&c, NEXT_VISIBLE, &[&agent_id]).await?, 0)
    }

    async fn conversation(
        &self,
        tenant_id: &str,
        conversation_id: &str,
        viewer: &ConversationViewer,
    ) -> StoreResult<Option<Vec<MessageRow>>> {
        let c = self.client().await?;
        let (filter, who) = viewer_filter(viewer);
        let found: Vec<MessageRow> = rows(
            &c,
            &format!(
                "SELECT {MESSAGE_COLS} FROM messages m WHERE m.tenant_id = $1 AND m.conversation_id = $2 {filter} \
                 ORDER BY m.received_at, m.seq"
            ),
            &[&tenant_id, &conversation_id, &who],
        )
        .await?
        .iter()
        .map(|r| message(r, 0))
        .collect::<Result<_, _>>()?;
        Ok(if found.is_empty() { None } else { Some(found) })
    }

    async fn message(&self, seq: i64) -> StoreResult<Option<MessageRow>> {
        message_by_seq(&self.client().await?, seq).await
    }

    async fn search_messages(&self, q: MessageSearch) -> StoreResult<Vec<MessageRow>> {
        let c = self.client().await?;
        let (filter, who) = viewer_filter(&q.viewer);
        let mut sql = format!(
            "SELECT {MESSAGE_COLS} FROM messages m WHERE m.tenant_id = $1 AND $2::bigint IS NOT NULL {filter}"
        );
        let mut args: Vec<Box<dyn tokio_postgres::types::ToSql + Sync + Send>> =
            vec![Box::new(q.tenant_id.clone()), Box::new(1i64), Box::new(who)];
        let mut arg =
            |sql: &mut String,
             cond: &str,
             v: Box<dyn tokio_postgres::types::ToSql + Sync + Send>| {
                args.push(v);
                sql.push_str(&cond.replace('?', &format!("${}", args.len())));
            };
        if !q.words.is_empty() {
            arg(
                &mut sql,
                // The matching rows come from the GIN index at once; a correlated EXISTS made the
                // planner walk the newest messages and test each, all of them for a rare word.
                " AND m.seq IN (SELECT s.message_seq FROM search_terms s WHERE s.tags @@ (?::text)::tsquery)",
                Box::new(ts_query(&q.words)),
            );
        }
        match &q.kind {
            Some(k) if k.ends_with('*') => {
                let prefix = k.trim_end_matches('*').to_owned();
                arg(
                    &mut sql,
                    " AND left(m.kind, length(?::text)) = ",
                    Box::new(prefix.clone()),
                );
                arg(&mut sql, "?::text", Box::new(prefix));
            }
            Some(k) => arg(&mut sql, " AND m.kind = ?::text", Box::new(k.clone())),
            None => {}
        }
        if let Some(v) = &q.conversation_id {
            arg(
                &mut sql,
                " AND m.conversation_id = ?::text",
                Box::new(v.clone()),
            );
        }
        if let Some(v) = &q.source {
            arg(&mut sql, " AND m.source = ?::text", Box::new(v.clone()));
        }
        if let Some(v) = &q.to_text {
            arg(&mut sql, " AND m.to_text = ?::text", Box::new(v.clone()));
        }
        if q.in_task {
            sql.push_str(" AND m.task_id IS NOT NULL");
        }
        if let Some(t) = q.since {
            arg(&mut sql, " AND m.received_at >= ?::bigint", Box::new(t));
        }
        if let Some(t) = q.until {
            arg(&mut sql, " AND m.received_at < ?::bigint", Box::new(t));
        }
        if let Some((at, seq)) = q.before {
            arg(
                &mut sql,
                " AND (m.received_at, m.seq) < (?::bigint",
                Box::new(at),
            );
            arg(&mut sql, ", ?::bigint)", Box::new(seq));
        }
        arg(
            &mut sql,
            " ORDER BY m.received_at DESC, m.seq DESC LIMIT ?::bigint",
            Box::new(i64::from(q.limit)),
        );
        let params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = args
            .iter()
            .map(|a| a.as_ref() as &(dyn tokio_postgres::types::ToSql + Sync))
            .collect();
        rows(&c, &sql, &params)
            .await?
            .iter()
            .map(|r| message(r, 0))
            .collect()
    }

    async fn conversations(
        &self,
        tenant_id: &str,
        viewer: &ConversationViewer,
        before: Option<(i64, i64)>,
        limit: u32,
    ) -> StoreResult<Vec<ConversationSummary>> {
        let c = self.client().await?;
        let (filter, who) = viewer_filter(viewer);
        let (at, seq) = before.unzip();
        let groups = rows(
            &c,
            &format!(
                "SELECT m.conversation_id, count(*), min(m.received_at), max(m.received_at), max(m.seq) \
                 FROM messages m WHERE m.tenant_id = $1 {filter} GROUP BY m.conversation_id \
                 HAVING $4::bigint IS NULL OR max(m.received_at) < $4 OR (max(m.received_at) = $4 AND max(m.seq) < $5::bigint) \
                 ORDER BY max(m.received_at) DESC, max(m.seq) DESC LIMIT $2"
            ),
            &[&tenant_id, &i64::from(limit.max(1)), &who, &at, &seq],
        )
        .await?;
        let seqs: Vec<i64> = groups.iter().map(|g| get(g, 4)).collect::<Result<_, _>>()?;
        let mut last: std::collections::BTreeMap<i64, MessageRow> = rows(
            &c,
            &format!("SELECT {MESSAGE_COLS} FROM messages m WHERE m.seq = ANY($1)"),
            &[&seqs],
        )
        .await?
        .iter()
        .map(|r| message(r, 0).map(|m| (m.seq, m)))
        .collect::<Result<_, _>>()?;
        let mut out = Vec::with_capacity(groups.len());
        for g in &groups {
            let seq: i64 = get(g, 4)?;
            if let Some(m) = last.remove(&seq) {
                out.push(ConversationSummary {
                    conversation_id: get(g, 0)?,
                    messages: get::<i64>(g, 1)?.max(0) as u64,
                    first_at: get(g, 2)?,
                    last_at: get(g, 3)?,
                    last: m,
                });
            }
        }
        Ok(out)
    }

    async fn copies(&self, message_seqs: Vec<i64>) -> StoreResult<Vec<CopyState>> {
        let c = self.client().await?;
        rows(
            &c,
            "SELECT i.message_seq, i.agent_id, i.sequence, i.state, i.attempts, i.last_attempt_at, r.shown_at \
             FROM inbox i LEFT JOIN receipts r ON r.agent_id = i.agent_id AND r.sequence = i.sequence \
             WHERE i.message_seq = ANY($1) ORDER BY i.message_seq, i.agent_id",
            &[&message_seqs],
        )
        .await?
        .iter()
        .map(|r| {
            Ok(CopyState {
                message_seq: get(r, 0)?,
                agent_id: get(r, 1)?,
                sequence: get::<i64>(r, 2)? as u64,
                state: state_from(get(r, 3)?),
                attempts: get::<i64>(r, 4)? as u32,
                last_attempt_at: get(r, 5)?,
                shown_at: get(r, 6)?,
            })
        })
        .collect()
    }

    async fn task_messages(&self, tenant_id: &str, task_id: &str) -> StoreResult<Vec<MessageRow>> {
        let c = self.client().await?;
        rows(
            &c,
            &format!(
                "SELECT {MESSAGE_COLS} FROM messages m WHERE m.task_id = $2 AND m.tenant_id = $1 \
                 ORDER BY m.received_at, m.seq"
            ),
            &[&tenant_id, &task_id],
        )
        .await?
        .iter()
        .map(|r| message(r, 0))
        .collect()
    }

    async fn sent_messages(
        &self,
        tenant_id: &str,
        agent_id: &str,
        before_seq: Option<i64>,
        limit: u32,
    ) -> StoreResult<Vec<MessageRow>> {
        let c = self.client().await?;
        rows(
            &c,
            &format!(
                "SELECT {MESSAGE_COLS} FROM messages m \
                 WHERE m.tenant_id = $1 AND m.source_agent_id = $2 AND m.seq < $3 \
                 ORDER BY m.seq DESC LIMIT $4"
            ),
            &[
                &tenant_id,
                &agent_id,
                &before_seq.unwrap_or(i64::MAX),
                &i64::from(limit),
            ],
        )
        .await?
        .iter()
        .map(|r| message(r, 0))
        .collect()
    }

    async fn task(&self, id: &str) -> StoreResult<Option<TaskRow>> {
        let c = self.client().await?;
        opt(
            &c,
            &format!("SELECT {TASK_COLS} FROM tasks WHERE id = $1"),
            &[&id],
        )
        .await?
        .map(|r| task(&r))
        .transpose()
    }

    async fn task_events(&self, id: &str) -> StoreResult<Vec<TaskEventRow>> {
        let c = self.client().await?;
        rows(
            &c,
            "SELECT at, actor, envelope_id, kind, from_state, to_state, flag, timer, warnings, reason \
             FROM task_events WHERE task_id = $1 ORDER BY n",
            &[&id],
        )
        .await?
        .iter()
        .map(task_event)
        .collect()
    }

    async fn tasks(&self, f: TaskFilter) -> StoreResult<Vec<TaskRow>> {
        let c = self.client().await?;
        let (before_at, before_id) = f.before.clone().unzip();
        rows(
            &c,
            &format!(
                "SELECT {TASK_COLS} FROM tasks WHERE tenant_id = $1 AND ($2::text IS NULL OR state = $2) \
                 AND ($3::text IS NULL OR requester_id = $3) AND ($4::text IS NULL OR recipient_id = $4) \
                 AND ($5::text IS NULL OR requester_id = $5 OR recipient_id = $5) \
                 AND ($7::text IS NULL OR capability = $7) \
                 AND ($8::text IS NULL OR workspace_id = $8 OR recipient_id IN (SELECT id FROM agents WHERE workspace_id = $8)) \
                 AND ($9::bigint IS NULL OR created_at < $9 OR (created_at = $9 AND id < $10::text)) \
                 ORDER BY created_at DESC, id DESC LIMIT $6"
            ),
            &[
                &f.tenant_id,
                &f.state,
                &f.requester_id,
                &f.recipient_id,
                &f.party_id,
                &i64::from(f.limit.max(1)),
                &f.capability,
                &f.workspace_id,
                &before_at,
                &before_id,
            ],
        )
        .await?
        .iter()
        .map(task)
        .collect()
    }

    async fn due_tasks(&self, now: i64, limit: u32) -> StoreResult<Vec<TaskRow>> {
        let c = self.client().await?;
        rows(
            &c,
            &format!(
                "SELECT {TASK_COLS} FROM tasks WHERE NOT terminal AND next_deadline <= $1 \
                 ORDER BY next_deadline, id LIMIT $2"
            ),
            &[&now, &i64::from(limit)],
        )
        .await?
        .iter()
        .map(task)
        .collect()
    }

    async fn update_task(
        &self,
        t: TaskRow,
        expected_version: i64,
        e: TaskEventRow,
        owed: u8,
    ) -> StoreResult<()> {
        let mut c = self.client().await?;
        let tx = c.transaction().await?;
        let id = t.id.clone();
        write_task(&tx, &TaskWrite::Update(t, expected_version, e)).await?;
        if owed != 0 {
            exec(
                &tx,
                "UPDATE tasks SET notices = notices | $2::int WHERE id = $1",
                &[&id, &i32::from(owed)],
            )
            .await?;
        }
        Ok(tx.commit().await?)
    }

    async fn create_blob(&self, b: BlobRow) -> StoreResult<()> {
        let c = self.client().await?;
        exec_unique(
            &c,
            "blob",
            &format!(
                "INSERT INTO blobs ({BLOB_COLS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
            ),
            &[
                &b.id,
                &b.tenant_id,
                &b.uploader_id,
                &b.name,
                &b.media_type,
                &(b.size as i64),
                &b.sha256,
                &b.complete,
                &b.created_at,
                &b.expires_at,
            ],
        )
        .await?;
        Ok(())
    }

    async fn blob(&self, id: &str) -> StoreResult<Option<BlobRow>> {
        let c = self.client().await?;
        opt(
            &c,
            &format!("SELECT {BLOB_COLS} FROM blobs WHERE id = $1"),
            &[&id],
        )
        .await?
        .map(|r| blob(&r))
        .transpose()
    }

    async fn complete_blob(&self, id: &str) -> StoreResult<()> {
        let c = self.client().await?;
        one_changed(
            exec(
                &c,
                "UPDATE blobs SET complete = true WHERE id = $1 AND NOT purged",
                &[&id],
            )
            .await?,
        )
    }

    async fn blob_party(&self, blob_id: &str, agent_id: &str) -> StoreResult<bool> {
        let c = self.client().await?;
        get(
            &one(
                &c,
                "SELECT EXISTS (SELECT 1 FROM blob_refs r JOIN messages m ON m.seq = r.message_seq \
                 WHERE r.blob_id = $1 AND (m.source_agent_id = $2 OR EXISTS \
                 (SELECT 1 FROM inbox i WHERE i.message_seq = m.seq AND i.agent_id = $2)))",
                &[&blob_id, &agent_id],
            )
            .await?,
            0,
        )
    }

    async fn blob_bytes(&self, tenant_id: &str, now: i64, pending_since: i64) -> StoreResult<u64> {
        let c = self.client().await?;
        // Summed as numeric (no overflow) and capped into a BIGINT.
        let n: i64 = get(
            &one(
                &c,
                &format!(
                    "SELECT least(coalesce(sum(size), 0), 9223372036854775807)::bigint FROM blobs \
                     WHERE tenant_id = $3 AND NOT ({BLOB_DUE})"
                ),
                &[&now, &pending_since, &tenant_id],
            )
            .await?,
            0,
        )?;
        Ok(n.max(0) as u64)
    }

    async fn due_blobs(
        &self,
        now: i64,
        pending_since: i64,
        limit: usize,
    ) -> StoreResult<Vec<BlobRow>> {
        let c = self.client().await?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        rows(
            &c,
            &format!(
                "SELECT {BLOB_COLS} FROM blobs WHERE NOT purged AND ({BLOB_DUE}) \
                 ORDER BY created_at LIMIT $3"
            ),
            &[&now, &pending_since, &limit],
        )
        .await?
        .iter()
        .map(blob)
        .collect()
    }

    async fn purge_blob(&self, id: &str, now: i64, pending_since: i64) -> StoreResult<bool> {
        let mut c = self.client().await?;
        let tx = c.transaction().await?;
        let n = exec(
            &tx,
            &format!(
                "UPDATE blobs SET purged = true WHERE id = $3 AND NOT purged AND ({BLOB_DUE})"
            ),
            &[&now, &pending_since, &id],
        )
        .await?;
        if n > 0 {
            exec(&tx, "DELETE FROM blob_contents WHERE blob_id = $1", &[&id]).await?;
        }
        tx.commit().await?;
        Ok(n > 0)
    }

    async fn blob_workspaces(&self, blob_id: &str) -> StoreResult<Vec<String>> {
        let c = self.client().await?;
        rows(
            &c,
            "SELECT a.workspace_id FROM blobs b JOIN agents a ON a.id = b.uploader_id WHERE b.id = $1 \
             UNION SELECT a.workspace_id FROM blob_refs r JOIN messages m ON m.seq = r.message_seq \
             JOIN agents a ON a.id = m.source_agent_id WHERE r.blob_id = $1 \
             UNION SELECT a.workspace_id FROM blob_refs r JOIN inbox i ON i.message_seq = r.message_seq \
             JOIN agents a ON a.id = i.agent_id WHERE r.blob_id = $1 ORDER BY 1",
            &[&blob_id],
        )
        .await?
        .iter()
        .map(|r| get(r, 0))
        .collect()
    }

    async fn usage(&self, f: UsageFilter) -> StoreResult<Vec<UsageTotal>> {
        let c = self.client().await?;
        let found = rows(
            &c,
            "SELECT agent_id, capability, day, reported_by, currency, cost_source, input_tokens, output_tokens, \
             cache_read_tokens, cache_write_tokens, reasoning_tokens, requests, wall_ms, cost_micros FROM usage \
             WHERE tenant_id = $1 AND ($2::text[] IS NULL OR workspace_id = ANY($2)) \
             AND ($3::text IS NULL OR agent_id = $3) AND ($4::text IS NULL OR capability = $4) \
             AND ($5::text IS NULL OR day >= $5) AND ($6::text IS NULL OR day <= $6)",
            &[&f.tenant_id, &f.workspace_ids, &f.agent_id, &f.capability, &f.since_day, &f.until_day],
        )
        .await?;
        let mut figures: Vec<UsageFigures> = Vec::with_capacity(found.len());
        for r in &found {
            let mut n = [0i64; 7];
            for (i, v) in n.iter_mut().enumerate() {
                *v = get(r, 6 + i)?;
            }
            figures.push((
                (
                    get(r, 0)?,
                    get(r, 1)?,
                    get(r, 2)?,
                    get(r, 3)?,
                    get(r, 4)?,
                    get(r, 5)?,
                ),
                n,
                get(r, 13)?,
            ));
        }
        Ok(sum_usage(figures))
    }

    async fn create_console_session(&self, s: ConsoleSessionRow) -> StoreResult<()> {
        let c = self.client().await?;
        exec(
            &c,
            &format!(
                "INSERT INTO console_sessions ({SESSION_COLS}) VALUES ($1, $2, $3, $4, $5, $6)"
            ),
            &[
                &s.id_hash.as_slice(),
                &s.user_id,
                &s.token_hash.as_slice(),
                &s.csrf,
                &s.created_at,
                &s.expires_at,
            ],
        )
        .await?;
        Ok(())
    }

    async fn console_session(&self, id_hash: [u8; 32]) -> StoreResult<Option<ConsoleSessionRow>> {
        let c = self.client().await?;
        opt(
            &c,
            &format!("SELECT {SESSION_COLS} FROM console_sessions WHERE id_hash = $1"),
            &[&id_hash.as_slice()],
        )
        .await?
        .map(|r| session(&r))
        .transpose()
    }

    async fn delete_console_session(&self, id_hash: [u8; 32]) -> StoreResult<()> {
        let c = self.client().await?;
        exec(
            &c,
            "DELETE FROM console_sessions WHERE id_hash = $1",
            &[&id_hash.as_slice()],
        )
        .await?;
        Ok(())
    }

    async fn purge_console_sessions(&self, now: i64) -> StoreResult<u64> {
        let c = self.client().await?;
        exec(
            &c,
            "DELETE FROM console_sessions WHERE expires_at <= $1",
            &[&now],
        )
        .await
    }

    async fn first_user(&self) -> StoreResult<Option<UserRow>> {
        let c = self.client().await?;
        opt(
            &c,
            &format!("SELECT {USER_COLS} FROM users ORDER BY created_at, n LIMIT 1"),
            &[],
        )
        .await?
        .map(|r| user(&r))
        .transpose()
    }

    async fn replace_tokens(&self, t: TokenRow) -> StoreResult<u64> {
        let mut c = self.client().await?;
        let tx = c.transaction().await?;
        let (kind, subject_id) = t.subject.stored();
        // Revoked, not deleted: `agentbus tokens list` still shows what was replaced.
        let revoked = exec(
            &tx,
            "UPDATE tokens SET revoked_at = $3 \
             WHERE kind = $1 AND subject_id = $2 AND revoked_at IS NULL",
            &[&kind, &subject_id, &t.created_at],
        )
        .await?;
        insert_token(&tx, &t).await?;
        tx.commit().await?;
        Ok(revoked)
    }

    async fn release(
        &self,
        agent_id: &str,
        leases: Vec<(u64, String)>,
        now: i64,
        uncount: bool,
    ) -> StoreResult<()> {
        let mut c = self.client().await?;
        let tx = c.transaction().await?;
        tx.batch_execute(ASYNC_COMMIT).await?;
        // Conditional on the token, so an ack or a newer lease that got there first wins.
        let sql = if uncount {
            "UPDATE inbox SET attempts = attempts - 1, lease = NULL, visible_at = $3, \
             state = CASE WHEN attempts <= 1 THEN 0 ELSE 1 END \
             WHERE agent_id = $1 AND sequence = $2 AND state = 1 AND lease = $4"
        } else {
            "UPDATE inbox SET lease = NULL, visible_at = $3 \
             WHERE agent_id = $1 AND sequence = $2 AND state = 1 AND lease = $4"
        };
        for (sequence, token) in leases {
            exec(&tx, sql, &[&agent_id, &(sequence as i64), &now, &token]).await?;
        }
        Ok(tx.commit().await?)
    }

    async fn check_ready(&self) -> StoreResult<()> {
        let c = self.client().await?;
        let found = super::schema::version(&c).await?;
        let want = super::schema::current_version();
        if found == want {
            Ok(())
        } else if found > want {
            Err(super::schema::newer(found, want))
        } else {
            Err(StoreError::Backend(format!(
                "the database schema is version {found}; this gateway needs {want}"
            )))
        }
    }

    async fn record_receipts(
        &self,
        agent_id: &str,
        receipts: Vec<ShownReceipt>,
        now: i64,
    ) -> StoreResult<Vec<ReceiptOutcome>> {
        let mut c = self.client().await?;
        let tx = c.transaction().await?;
        let mut out = Vec::with_capacity(receipts.len());
        for r in &receipts {
            let sequence = r.sequence as i64;
            let found = opt(
                &tx,
                "SELECT i.message_seq, m.id, m.received_at FROM inbox i JOIN messages m ON m.seq = i.message_seq \
                 WHERE i.agent_id = $1 AND i.sequence = $2",
                &[&agent_id, &sequence],
            )
            .await?;
            let found = match found {
                Some(row) => Some((
                    get::<i64>(&row, 0)?,
                    get::<String>(&row, 1)?,
                    get::<i64>(&row, 2)?,
                )),
                None => None,
            };
            let Some((message_seq, _, received_at)) = found.filter(|f| f.1 == r.message_id) else {
                out.push(ReceiptOutcome::Unknown);
                continue;
            };
            // Kept within the message's life, as SQLite does.
            let shown_at = r.shown_at.clamp(received_at, now.max(received_at));
            // A push and a showing are recorded apart: the first of each stands.
            let sql = if r.pushed {
                "INSERT INTO pushes (agent_id, sequence, message_seq, pushed_at, harness, event, reported_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (agent_id, sequence) DO NOTHING"
            } else {
                "INSERT INTO receipts (agent_id, sequence, message_seq, shown_at, harness, event, reported_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (agent_id, sequence) DO NOTHING"
            };
            let n = exec(
                &tx,
                sql,
                &[
                    &agent_id,
                    &sequence,
                    &message_seq,
                    &shown_at,
                    &r.harness,
                    &r.event,
                    &now,
                ],
            )
            .await?;
            out.push(if n == 1 {
                ReceiptOutcome::Recorded
            } else {
                ReceiptOutcome::AlreadyRecorded
            });
        }
        tx.commit().await?;
        Ok(out)
    }

    async fn delivery_states(
        &self,
        tenant_id: &str,
        source: &str,
        message_id: &str,
    ) -> StoreResult<Option<(MessageRow, Vec<DeliveryStateRow>)>> {
        let c = self.client().await?;
        let Some(r) = opt(
            &c,
            "SELECT message_seq FROM recent_ids WHERE tenant_id = $1 AND source = $2 AND id = $3",
            &[&tenant_id, &source, &message_id],
        )
        .await?
        else {
            return Ok(None);
        };
        let seq: i64 = get(&r, 0)?;
        let Some(message) = message_by_seq(&c, seq).await? else {
            return Ok(None);
        };
        let mut answers: Vec<(String, AnswerRow)> = Vec::new();
        for r in rows(
            &c,
            "SELECT m.source_agent_id, m.id, m.kind, m.received_at FROM messages m \
             WHERE m.tenant_id = $1 AND m.conversation_id = $2 AND m.correlation_id = $3 \
             ORDER BY m.received_at, m.seq",
            &[&tenant_id, &message.conversation_id, &message_id],
        )
        .await?
        {
            if let Some(agent) = get::<Option<String>>(&r, 0)? {
                answers.push((
                    agent,
                    AnswerRow {
                        id: get(&r, 1)?,
                        kind: get(&r, 2)?,
                        received_at: get(&r, 3)?,
                    },
                ));
            }
        }
        let mut out = Vec::new();
        for r in rows(
            &c,
            "SELECT i.agent_id, i.sequence, i.state, i.attempts, i.last_attempt_at, i.acked_at, \
             r.shown_at, r.harness, r.event, p.pushed_at, p.harness, p.event FROM inbox i \
             LEFT JOIN receipts r ON r.agent_id = i.agent_id AND r.sequence = i.sequence \
             LEFT JOIN pushes p ON p.agent_id = i.agent_id AND p.sequence = i.sequence \
             WHERE i.message_seq = $1 ORDER BY i.agent_id",
            &[&seq],
        )
        .await?
        {
            let sequence = get::<i64>(&r, 1)? as u64;
            let shown = match get::<Option<i64>>(&r, 6)? {
                Some(at) => Some(ShownReceipt {
                    sequence,
                    message_id: String::new(),
                    shown_at: at,
                    harness: get(&r, 7)?,
                    event: get(&r, 8)?,
                    pushed: false,
                }),
                None => None,
            };
            let pushed = match get::<Option<i64>>(&r, 9)? {
                Some(at) => Some(ShownReceipt {
                    sequence,
                    message_id: String::new(),
                    shown_at: at,
                    harness: get(&r, 10)?,
                    event: get(&r, 11)?,
                    pushed: true,
                }),
                None => None,
            };
            let mut d = DeliveryStateRow {
                agent_id: get(&r, 0)?,
                sequence,
                state: state_from(get(&r, 2)?),
                attempts: get::<i64>(&r, 3)? as u32,
                last_attempt_at: get(&r, 4)?,
                acked_at: get(&r, 5)?,
                shown,
                pushed,
                answer: None,
                ack: None,
            };
            crate::model::fill_answers(&mut d, &answers, message_id);
            out.push(d);
        }
        Ok(Some((message, out)))
    }

    async fn signal(&self, s: Signal) -> StoreResult<()> {
        self.notify(s).await
    }

    async fn claim_reaper(&self, holder: &str, now: i64, ttl_ms: i64) -> StoreResult<bool> {
        let c = self.client().await?;
        // Granted when the row is new, is this holder's, or its claim ran out; the row's lock
        // orders two replicas claiming at once, so one of them gets no row back.
        Ok(c.query_opt(
            "INSERT INTO reaper_claim (id, holder, until_ms) VALUES (1, $1, $2::bigint + $3::bigint) \
             ON CONFLICT (id) DO UPDATE SET holder = excluded.holder, until_ms = excluded.until_ms \
             WHERE reaper_claim.holder = excluded.holder OR reaper_claim.until_ms < $2 RETURNING 1",
            &[&holder, &now, &ttl_ms],
        )
        .await?
        .is_some())
    }

    async fn put_blob_content(&self, id: &str, sealed: Vec<u8>) -> StoreResult<()> {
        let c = self.client().await?;
        exec(
            &c,
            "INSERT INTO blob_contents (blob_id, sealed) VALUES ($1, $2) \
             ON CONFLICT (blob_id) DO UPDATE SET sealed = excluded.sealed",
            &[&id, &sealed],
        )
        .await?;
        Ok(())
    }

    async fn blob_content(&self, id: &str) -> StoreResult<Option<Vec<u8>>> {
        let c = self.client().await?;
        opt(
            &c,
            "SELECT sealed FROM blob_contents WHERE blob_id = $1",
            &[&id],
        )
        .await?
        .map(|r| get(&r, 0))
        .transpose()
    }
}
