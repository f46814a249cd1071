//! Group commit for publishes: the publishes that arrive while a batch is being stored wait, and
//! are then stored together in one transaction, so one WAL flush and one hold of each inbox's
//! counter row carry all of them.
//!
//! Publishes into one inbox are serial on its counter row (it hands out the gap-free sequences),
//! and the row is held until the commit's flush; one publish per transaction let one inbox take
//! only a few hundred publishes a second (docs/benchmarks.md). SQLite's single writer groups its
//! commits the same way. A batch decides each publish's outcome exactly as a publish alone would
//! (the same dedupe locks and reads, the same depth check, in arrival order, with the publishes
//! earlier in the batch counted), and if the batch fails as a whole each of its publishes is run
//! again alone, so one publish's failure never fails another.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use deadpool_postgres::{GenericClient, Pool};
use futures_util::future::try_join_all;
use tokio::sync::{Mutex, mpsc, oneshot};

use tokio_postgres::types::ToSql;

use super::ops::{
    CREATE_COUNTERS, Counters, IDEMPOTENT_IN, LOCK_COUNTERS, LOCK_KEYS, READ_COUNTERS, has_extras,
    idempotent_params, inbox_full, inboxes_of, insert_message, key_of, read_counters,
    record_extras,
};
use super::rows::{MESSAGE_COLS, Params, get, message};
use crate::{MessageRow, NewMessage, PublishOutcome, StoreError, StoreResult};

/// Publishes stored in one transaction at most.
const MAX_BATCH: usize = 256;
/// Batches in flight at once per store: while one waits for its commit's flush, the next gathers
/// and runs (at once for other inboxes; for the same inbox it queues on the counter row).
const WRITERS: usize = 2;

/// A publish waiting for its batch.
struct Job {
    message: NewMessage,
    answer: oneshot::Sender<StoreResult<PublishOutcome>>,
}

/// Where publishes are queued for the store's writer tasks; they end when every handle is gone.
#[derive(Clone)]
pub(super) struct Batcher {
    jobs: mpsc::UnboundedSender<Job>,
}

impl Batcher {
    /// Starts the writer tasks on the current runtime.
    pub(super) fn start(pool: Pool, wait: Duration) -> Batcher {
        let (jobs, rx) = mpsc::unbounded_channel();
        let rx = Arc::new(Mutex::new(rx));
        for _ in 0..WRITERS {
            tokio::spawn(writer(pool.clone(), wait, rx.clone()));
        }
        Batcher { jobs }
    }

    /// Stores `message` in the next batch; `Err(message)` when the writers are gone (their
    /// runtime ended), for the caller to store it alone.
    pub(super) async fn publish(
        &self,
        message: NewMessage,
    ) -> Result<StoreResult<PublishOutcome>, NewMessage> {
        let (answer, rx) = oneshot::channel();
        self.jobs
            .send(Job { message, answer })
            .map_err(|e| e.0.message)?;
        // A writer drops a job unanswered only when its runtime ends, which the caller shares
        // unless the store moved between runtimes.
        Ok(rx.await.unwrap_or_else(|_| {
            Err(StoreError::Backend(
                "the publish writer stopped before it answered".into(),
            ))
        }))
    }
}

async fn writer(pool: Pool, wait: Duration, jobs: Arc<Mutex<mpsc::UnboundedReceiver<Job>>>) {
    loop {
        let batch = {
            let mut rx = jobs.lock().await;
            let Some(first) = rx.recv().await else {
                return;
            };
            let mut batch = vec![first];
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(job) => batch.push(job),
                    Err(_) => break,
                }
            }
            batch
        };
        run(&pool, wait, batch).await;
    }
}

/// Stores `batch` and answers each of its publishes.
async fn run(pool: &Pool, wait: Duration, batch: Vec<Job>) {
    // No connection: every publish of the batch fails the same way (a dry pool or a database
    // that is down), and alone each would have waited as long again.
    let fail_all = |batch: Vec<Job>, e: deadpool_postgres::PoolError| {
        let e = super::pool_error(e, wait);
        for job in batch {
            let _ = job.answer.send(Err(e.clone()));
        }
    };
    let mut client = match pool.get().await {
        Ok(c) => c,
        Err(e) => return fail_all(batch, e),
    };
    let messages: Vec<&NewMessage> = batch.iter().map(|j| &j.message).collect();
    let mut stored = store_batch(&client, &messages, false).await;
    if let Ok(None) = stored {
        stored = store_batch(&client, &messages, true).await;
    }
    match stored {
        Ok(Some(outcomes)) => {
            for (job, outcome) in batch.into_iter().zip(outcomes) {
                let _ = job.answer.send(Ok(outcome));
            }
            return;
        }
        // A lock waited out its bound: a row stayed held by another session. Alone, each
        // publish into that inbox would wait as long again, one after the other, while every
        // publish queued behind this batch waited too; they are answered busy at once.
        Err(e @ StoreError::Busy(_)) => {
            for job in batch {
                let _ = job.answer.send(Err(e.clone()));
            }
            return;
        }
        _ => {}
    }
    if client.is_closed() {
        match pool.get().await {
            Ok(c) => client = c,
            Err(e) => return fail_all(batch, e),
        }
    }
    // A batch that failed (a value the database refuses, a deadlock, a lost connection): each
    // alone, in order, as if no batch was tried. A publish whose batch did commit before a lost
    // answer meets its own row as a duplicate.
    for job in batch {
        let outcome = publish_alone(&mut client, &job.message).await;
        let _ = job.answer.send(outcome);
    }
}

/// One publish in a transaction of its own.
pub(super) async fn publish_alone(
    client: &mut deadpool_postgres::Client,
    m: &NewMessage,
) -> StoreResult<PublishOutcome> {
    let tx = client.transaction().await?;
    let outcome = insert_message(&tx, m).await?;
    // A refusal stores nothing: its transaction rolls back (the counter rows included).
    if matches!(outcome, PublishOutcome::Stored { .. }) {
        tx.commit().await?;
    } else {
        tx.rollback().await?;
    }
    Ok(outcome)
}

/// What a publish of the batch comes to, before its rows are written.
enum Plan {
    /// Refused or a replay: nothing to write.
    Answer(Box<PublishOutcome>),
    /// The same id as the stored publish at this index of the batch.
    DuplicateOf(usize),
    /// The same idempotency key as the stored publish at this index of the batch.
    ReplayOf(usize),
    /// Stored, one inbox entry per recipient: each the `k`-th of the batch's entries into its
    /// inbox (its sequence and depth after it are the inbox's, as locked, plus `k`).
    Store { entries: Vec<(String, u64)> },
}

/// The stored messages whose ids the batch repeats within their replay windows: `$1`…`$4` the
/// batch's tenants, sources, ids and window starts; answers each match's 1-based index in the
/// batch, then [`MESSAGE_COLS`]. Each lookup is a subquery of its own (`LIMIT 1` of a unique
/// key keeps it one), so every plan reads both tables by key: joined plainly, a plan made while
/// the tables were new and empty read them whole, which grew with every row.
pub(super) static RECENT_ALL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT u.i, {MESSAGE_COLS} \
         FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[]) WITH ORDINALITY AS u(t, s, d, since, i), \
         LATERAL (SELECT r.message_seq FROM recent_ids r \
          WHERE r.tenant_id = u.t AND r.source = u.s AND r.id = u.d AND r.received_at >= u.since LIMIT 1) r, \
         LATERAL (SELECT * FROM messages m WHERE m.seq = r.message_seq LIMIT 1) m"
    )
});

/// The batch's message rows, their inbox entries (joined to their message by its unique
/// receipt, each sequence counted back from its inbox's `last_seq` as [`BUMP_COUNTERS`] left it)
/// and their replay records, in one statement; answers each message's receipt and storage
/// sequence. An entry for a suspended agent is held (`model::hold_if_suspended`), read here,
/// after [`LOCK_COUNTERS`] took the inbox's row.
pub(super) static INSERT_ALL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH m AS (INSERT INTO messages (seq, tenant_id, id, source, source_agent_id, kind, \
     conversation_id, correlation_id, to_text, to_id, attrs, data, signed_hash, idempotency_key, receipt, \
     received_at, expires_at, task_id) OVERRIDING SYSTEM VALUE \
     SELECT * FROM unnest($23::bigint[], $1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], \
     $8::text[], $9::text[], $10::text[], $11::bytea[], $12::bytea[], $13::text[], $14::text[], $15::bigint[], \
     $16::bigint[], $17::text[]) \
     RETURNING seq, tenant_id, source, source_agent_id, id, receipt, received_at), \
     e AS (INSERT INTO inbox (agent_id, sequence, message_seq, state, attempts, visible_at, expires_at, hold) \
     SELECT u.a, (SELECT c.last_seq FROM inbox_counters c WHERE c.agent_id = u.a) - u.b, m.seq, 0, 0, u.v, u.x, {} \
     FROM unnest($18::text[], $19::text[], $20::bigint[], $21::bigint[], $22::bigint[]) AS u(r, a, b, v, x) \
     JOIN m ON m.receipt = u.r), \
     r AS (INSERT INTO recent_ids (tenant_id, source, id, message_seq, received_at) \
     SELECT tenant_id, source, id, seq, received_at FROM m \
     ON CONFLICT (tenant_id, source, id) DO UPDATE SET message_seq = excluded.message_seq, received_at = excluded.received_at) \
     SELECT receipt, seq FROM m",
        crate::model::hold_if_suspended("u.a", "m.source_agent_id")
    )
});

/// A storage sequence (`messages.seq`) for each of `$1` publishes, taken in the batch's first
/// round trip so that its search index rows can be written before its counter rows are locked
/// ([`SEARCH_ALL`]); a publish the batch does not store leaves a gap, as a rollback does.
pub(super) const TAKE_SEQS: &str =
    "SELECT nextval(pg_get_serial_sequence('messages', 'seq')) FROM generate_series(1, $1::int)";

/// The search index rows of the batch's stored messages: `$1` their storage sequences, `$2` their
/// words, space-separated, as a `tsvector` of exactly those words. Written first in the batch's
/// second round trip, before the counter rows are locked: publishes into one inbox are serial on
/// its counter row, held until the commit, and the index's GIN entries (now and then a whole
/// pending list's cleanup) cost a publish as much as its other writes, so inside the hold they
/// halved an inbox's throughput. Outside it one batch's index rows are written while another
/// batch holds the row.
pub(super) const SEARCH_ALL: &str = "INSERT INTO search_terms (message_seq, tags) \
     SELECT u.s, array_to_tsvector(string_to_array(u.t, ' ')) FROM unnest($1::bigint[], $2::text[]) AS u(s, t)";

/// Adds `$2` stored entries to the counters of the inboxes `$1` (locked already, by
/// [`LOCK_COUNTERS`]), each checked first against the depth `$3` its batch's plan holds under
/// (`agentbus_depth_within` fails the batch otherwise); answers each inbox's `last_seq` and
/// depth before the batch.
pub(super) const BUMP_COUNTERS: &str = "UPDATE inbox_counters c SET last_seq = c.last_seq + u.n, added = c.added + u.n \
     FROM unnest($1::text[], $2::bigint[], $3::bigint[]) AS u(a, n, ceiling), \
     LATERAL (SELECT coalesce((SELECT s.settled FROM inbox_settled s WHERE s.agent_id = u.a), 0) AS settled) s \
     WHERE c.agent_id = ANY($1) AND c.agent_id = u.a AND agentbus_depth_within(c.added - s.settled, u.ceiling) \
     RETURNING c.agent_id, c.last_seq - u.n, c.added - u.n - s.settled";

/// The rest of a batch's transaction runs cached generic plans: the counters' statements
/// (`= ANY` of an array, which PostgreSQL prices at ten elements in a generic plan and so plans
/// for each call otherwise, a large share of its CPU in the benches) and the writes, each
/// checked to read by index (`postgres/plans.rs`). Not the dedupe reads before it: any plan of
/// those depends on how PostgreSQL prices a table it has no statistics for yet.
const GENERIC_FROM_HERE: &str = "SET LOCAL plan_cache_mode = force_generic_plan";

/// Stores `batch` in one transaction on `c`, begun and committed here: the outcome of each
/// publish, in order. Statements go out pipelined (tokio-postgres sends a connection's queries in
/// the order they are first polled, and the server runs them in that order), so a batch is two
/// round trips: `BEGIN`, the dedupe locks and reads, the counter rows' creation (where missing),
/// an unlocked read of them, on which the batch is planned, and the storage sequences; then the
/// search index rows ([`SEARCH_ALL`]), the counter rows' locks, their update (checking the plan's
/// depths still hold), every other write and `COMMIT`. The counter
/// rows, which serialise the publishes into an inbox, are held only through the second, not
/// across a round trip to this process (except by a batch with records that need a message's
/// sequence, [`has_extras`], which commits one round trip later; and a new inbox's row, created
/// in the first). A statement that fails makes the server turn that
/// `COMMIT` into a rollback; a failure before it is rolled back here, so the connection goes back
/// clean.
///
/// With `lock_first` the counter rows are locked in the first round trip instead, and read
/// once held (the batch then waits out other writers of its inboxes across both); without it
/// the answer is `None` when the read moved under the plan: a depth the plan relied on was
/// exceeded by the time of the lock, or the plan refuses a publish for a full inbox (a refusal
/// is decided on the locked depth, as alone). The caller runs the batch again with
/// `lock_first`.
async fn store_batch(
    c: &deadpool_postgres::Client,
    batch: &[&NewMessage],
    lock_first: bool,
) -> StoreResult<Option<Vec<PublishOutcome>>> {
    let stored = async {
        let (lock, recent, idem, create, read, counters_lock, insert_all, bump, take, search) = tokio::try_join!(
            c.prepare_cached(LOCK_KEYS),
            c.prepare_cached(&RECENT_ALL),
            c.prepare_cached(&IDEMPOTENT_IN),
            c.prepare_cached(CREATE_COUNTERS),
            c.prepare_cached(READ_COUNTERS),
            c.prepare_cached(LOCK_COUNTERS),
            c.prepare_cached(&INSERT_ALL),
            c.prepare_cached(BUMP_COUNTERS),
            c.prepare_cached(TAKE_SEQS),
            c.prepare_cached(SEARCH_ALL),
        )?;
        // The dedupe locks of every publish at once (sorted there, as a publish alone takes its
        // own): each read below runs once they are held, so a concurrent publisher of the same
        // id or key has committed and its row is found.
        let mut keys = Vec::with_capacity(batch.len() * 2);
        for m in batch {
            keys.push(key_of("id", &[&m.tenant_id, &m.source, &m.id]));
            if let Some(k) = &m.idempotency {
                keys.push(key_of("idem", &[&k.tenant_id, &k.source, &k.to_id, &k.key]));
            }
        }
        let tenants: Vec<&str> = batch.iter().map(|m| m.tenant_id.as_str()).collect();
        let sources: Vec<&str> = batch.iter().map(|m| m.source.as_str()).collect();
        let ids: Vec<&str> = batch.iter().map(|m| m.id.as_str()).collect();
        let since: Vec<i64> = batch.iter().map(|m| m.replay_since).collect();
        let inboxes = inboxes_of(batch.iter().flat_map(|m| &m.recipients));
        let idem = &idem;
        let replays = batch.iter().filter_map(|m| {
            let k = m.idempotency.as_ref()?;
            Some(async move {
                c.query_opt(idem, &idempotent_params(k, &m.idempotency_since))
                    .await
            })
        });
        let (lock_p, recent_p, inboxes_p): (Params<'_>, Params<'_>, Params<'_>) =
            (&[&keys], &[&tenants, &sources, &ids, &since], &[&inboxes]);
        let wanted = i32::try_from(batch.len()).unwrap_or(i32::MAX);
        let take_p: Params<'_> = &[&wanted];
        let (begun, locked, found, replayed, generic, created, held, counted, taken) = tokio::join!(
            biased;
            c.batch_execute("BEGIN"),
            c.execute(&lock, lock_p),
            c.query(&recent, recent_p),
            try_join_all(replays),
            c.batch_execute(GENERIC_FROM_HERE),
            c.execute(&create, inboxes_p),
            // Sent before the read, which then runs once the rows are held.
            async {
                if lock_first { c.execute(&counters_lock, inboxes_p).await } else { Ok(0) }
            },
            c.query(&read, inboxes_p),
            c.query(&take, take_p),
        );
        let (found, replayed, counted, taken) = (begun
            .and(locked)
            .and(generic)
            .and(created)
            .and(held)
            .and(found)
            .and_then(|f| {
                let r = replayed?;
                Ok((f, r, counted?, taken?))
            }))?;
        let seqs = taken
            .iter()
            .map(|r| get::<i64>(r, 0))
            .collect::<StoreResult<Vec<i64>>>()?;
        if seqs.len() != batch.len() {
            return Err(StoreError::Backend(
                "fewer storage sequences than publishes".into(),
            ));
        }
        let mut recent: Vec<Option<MessageRow>> = vec![None; batch.len()];
        for r in &found {
            let i = get::<i64>(r, 0)? as usize;
            if let Some(slot) = i.checked_sub(1).and_then(|i| recent.get_mut(i)) {
                *slot = Some(message(r, 1)?);
            }
        }
        let mut replay: Vec<Option<MessageRow>> = vec![None; batch.len()];
        let keyed = (0..batch.len()).filter(|&i| batch[i].idempotency.is_some());
        for (i, row) in keyed.zip(replayed) {
            replay[i] = row.map(|r| message(&r, 0)).transpose()?;
        }
        let mut counters = Counters::with_capacity(inboxes.len());
        read_counters(counted, &mut counters)?;

        let (plans, written) = plan(batch, recent, replay, &counters);
        let refused = |p: &Plan| {
            matches!(p, Plan::Answer(o) if matches!(**o, PublishOutcome::InboxFull { .. }))
        };
        if !lock_first && plans.iter().any(refused) {
            return Ok(None);
        }
        let stored: Vec<usize> = (0..batch.len())
            .filter(|&i| matches!(plans[i], Plan::Store { .. }))
            .collect();
        if stored.is_empty() {
            // Duplicates, replays and refusals only: nothing to write or lock.
            c.batch_execute("COMMIT").await?;
            return Ok(Some(outcomes(batch, plans, &[], &Counters::new())));
        }
        let rows = Rows::of(batch, &stored, &plans, &written, &seqs);
        let params: [&(dyn ToSql + Sync); 23] = [
            &rows.tenant_id,
            &rows.id,
            &rows.source,
            &rows.source_agent_id,
            &rows.kind,
            &rows.conversation_id,
            &rows.correlation_id,
            &rows.to_text,
            &rows.to_id,
            &rows.attrs,
            &rows.data,
            &rows.signed_hash,
            &rows.idempotency_key,
            &rows.receipt,
            &rows.received_at,
            &rows.expires_at,
            &rows.task_id,
            &rows.entry_receipt,
            &rows.entry_agent,
            &rows.entry_from_end,
            &rows.entry_visible,
            &rows.entry_expires,
            &rows.seq,
        ];
        let search_p: Params<'_> = &[&rows.search_seq, &rows.search_tags];
        let extras = stored.iter().any(|&i| has_extras(batch[i]));
        let lock_p: Params<'_> = &[&rows.bumped];
        let bump_p: Params<'_> = &[&rows.bumped, &rows.by, &rows.ceiling];
        let (indexed, held, bumped, inserted, ended) = tokio::join!(
            biased;
            async {
                if rows.search_seq.is_empty() { Ok(0) } else { c.execute(&search, search_p).await }
            },
            async {
                // Locked in the first round trip already when `lock_first`.
                if lock_first { Ok(0) } else { c.execute(&counters_lock, lock_p).await }
            },
            c.query(&bump, bump_p),
            c.query(&insert_all, &params),
            async {
                // Records that need each message's sequence take one more round trip first.
                if extras { Ok(()) } else { c.batch_execute("COMMIT").await }
            },
        );
        if !lock_first && bumped.as_ref().is_err_and(moved) {
            return Ok(None);
        }
        let (bumped, inserted) = indexed
            .and(held)
            .and(ended)
            .and(bumped)
            .and_then(|b| Ok((b, inserted?)))?;
        // Each inbox as it stood under the lock, before the batch.
        let mut before = Counters::with_capacity(bumped.len());
        read_counters(bumped, &mut before)?;
        let mut seq_of_receipt = HashMap::with_capacity(inserted.len());
        for r in &inserted {
            seq_of_receipt.insert(get::<String>(r, 0)?, get::<i64>(r, 1)?);
        }
        let mut seq_of = vec![0i64; batch.len()];
        for &i in &stored {
            seq_of[i] = *seq_of_receipt.get(&batch[i].receipt).ok_or_else(|| {
                StoreError::Backend("a stored message's row was not returned".into())
            })?;
        }
        if extras {
            try_join_all(
                stored
                    .iter()
                    .filter(|&&i| has_extras(batch[i]))
                    .map(|&i| record_extras(c, batch[i], seq_of[i])),
            )
            .await?;
            c.batch_execute("COMMIT").await?;
        }
        Ok::<_, StoreError>(Some(outcomes(batch, plans, &seq_of, &before)))
    }
    .await;
    if !matches!(stored, Ok(Some(_))) && !c.is_closed() {
        // Whatever failed, no transaction stays open on a connection going back to the pool.
        let _ = c.batch_execute("ROLLBACK").await;
    }
    stored
}

/// Whether `e` is `agentbus_depth_within`'s refusal: an inbox's depth moved past what the
/// batch's plan allowed between its read and its lock.
fn moved(e: &tokio_postgres::Error) -> bool {
    e.as_db_error()
        .is_some_and(|db| db.code().code() == "AB001")
}

/// Each publish's plan, decided in batch order exactly as alone, on the inboxes' `counters` as
/// read before any lock: a stored duplicate or replay, a duplicate or replay of an earlier
/// publish of the batch, a full inbox (counting the batch's earlier publishes), else stored.
/// Also answers the inboxes written ([`Written`]). A refusal here is only provisional: the
/// caller runs a batch that has one again with its counter rows locked first.
fn plan(
    batch: &[&NewMessage],
    recent: Vec<Option<MessageRow>>,
    replay: Vec<Option<MessageRow>>,
    counters: &Counters,
) -> (Vec<Plan>, Written) {
    let mut ids: HashMap<(&str, &str, &str), usize> = HashMap::new();
    let mut keys: HashMap<(&str, &str, &str, &str), usize> = HashMap::new();
    // The batch's entries planned so far into each inbox, and each inbox's ceiling.
    let mut added: HashMap<&str, u64> = HashMap::new();
    let mut ceilings: HashMap<String, i64> = HashMap::new();
    let mut plans = Vec::with_capacity(batch.len());
    for (i, (m, (recent, replay))) in batch.iter().zip(recent.into_iter().zip(replay)).enumerate() {
        let id = (m.tenant_id.as_str(), m.source.as_str(), m.id.as_str());
        let key = m.idempotency.as_ref().map(|k| {
            (
                k.tenant_id.as_str(),
                k.source.as_str(),
                k.to_id.as_str(),
                k.key.as_str(),
            )
        });
        let depth = |agent: &str| {
            counters.get(agent).map_or(0, |c| c.1) + added.get(agent).copied().unwrap_or(0)
        };
        let plan = if let Some(row) = recent {
            Plan::Answer(Box::new(PublishOutcome::DuplicateId(row)))
        } else if let Some(&j) = ids.get(&id) {
            Plan::DuplicateOf(j)
        } else if let Some(row) = replay {
            Plan::Answer(Box::new(PublishOutcome::IdempotentReplay(row)))
        } else if let Some(&j) = key.as_ref().and_then(|k| keys.get(k)) {
            Plan::ReplayOf(j)
        } else if let Some(full) = inbox_full(m, &depth) {
            Plan::Answer(Box::new(full))
        } else {
            for agent in &m.recipients {
                // Passed with the batch's earlier entries on top of the inbox's depth: it
                // passes under the lock while that depth is at most this.
                let before = added.get(agent.as_str()).copied().unwrap_or(0) as i64;
                let ceiling = m
                    .max_depth
                    .map_or(i64::MAX, |max| (max as i64).saturating_sub(1 + before));
                let c = ceilings.entry(agent.clone()).or_insert(i64::MAX);
                *c = (*c).min(ceiling);
            }
            let mut entries = Vec::with_capacity(m.recipients.len());
            for agent in &m.recipients {
                let k = added.entry(agent.as_str()).or_insert(0);
                *k += 1;
                entries.push((agent.clone(), *k));
            }
            ids.insert(id, i);
            if let Some(k) = key {
                keys.insert(k, i);
            }
            Plan::Store { entries }
        };
        plans.push(plan);
    }
    let written = added
        .into_iter()
        .map(|(agent, n)| {
            let ceiling = ceilings.get(agent).copied().unwrap_or(i64::MAX);
            (agent.to_owned(), (n as i64, ceiling))
        })
        .collect();
    (plans, written)
}

/// The inboxes a batch writes, in id order: how many entries it adds to each, and the highest
/// depth each may have when locked for every stored publish's depth check to pass still
/// (`i64::MAX` where none has a limit).
type Written = std::collections::BTreeMap<String, (i64, i64)>;

/// The outcome of each publish once its plan is carried out (`seq_of`: the storage sequence of
/// each stored one; `before`: each inbox's `last_seq` and depth under the lock, before the batch).
fn outcomes(
    batch: &[&NewMessage],
    plans: Vec<Plan>,
    seq_of: &[i64],
    before: &Counters,
) -> Vec<PublishOutcome> {
    plans
        .into_iter()
        .enumerate()
        .map(|(i, plan)| match plan {
            Plan::Answer(o) => *o,
            Plan::DuplicateOf(j) => PublishOutcome::DuplicateId(batch[j].stored_row(seq_of[j])),
            Plan::ReplayOf(j) => PublishOutcome::IdempotentReplay(batch[j].stored_row(seq_of[j])),
            Plan::Store { entries } => {
                let (mut sequences, mut depths) = (Vec::new(), Vec::new());
                for (agent, k) in entries {
                    let (last, depth) = before.get(&agent).copied().unwrap_or((0, 0));
                    sequences.push((agent, last as u64 + k));
                    depths.push(depth + k);
                }
                PublishOutcome::Stored {
                    message: batch[i].stored_row(seq_of[i]),
                    sequences,
                    depths,
                }
            }
        })
        .collect()
}

/// The columns [`INSERT_ALL`], [`LOCK_COUNTERS`] and [`BUMP_COUNTERS`] take, one array each.
#[derive(Default)]
struct Rows<'a> {
    tenant_id: Vec<&'a str>,
    id: Vec<&'a str>,
    source: Vec<&'a str>,
    source_agent_id: Vec<Option<&'a str>>,
    kind: Vec<&'a str>,
    conversation_id: Vec<&'a str>,
    correlation_id: Vec<Option<&'a str>>,
    to_text: Vec<&'a str>,
    to_id: Vec<&'a str>,
    attrs: Vec<&'a str>,
    data: Vec<&'a [u8]>,
    signed_hash: Vec<&'a [u8]>,
    idempotency_key: Vec<Option<&'a str>>,
    receipt: Vec<&'a str>,
    received_at: Vec<i64>,
    expires_at: Vec<i64>,
    task_id: Vec<Option<&'a str>>,
    entry_receipt: Vec<&'a str>,
    entry_agent: Vec<&'a str>,
    /// How many of the batch's entries into the same inbox come after this one.
    entry_from_end: Vec<i64>,
    entry_visible: Vec<i64>,
    entry_expires: Vec<i64>,
    /// Each message's storage sequence, taken before ([`TAKE_SEQS`]).
    seq: Vec<i64>,
    /// The storage sequence and search index words (space-separated) of each message that has
    /// some.
    search_seq: Vec<i64>,
    search_tags: Vec<&'a str>,
    /// The inboxes written, in id order, with their entries and ceilings.
    bumped: Vec<&'a str>,
    by: Vec<i64>,
    ceiling: Vec<i64>,
}

impl<'a> Rows<'a> {
    /// The rows of the publishes `stored` of `batch`, as `plans` placed them.
    fn of(
        batch: &[&'a NewMessage],
        stored: &[usize],
        plans: &'a [Plan],
        written: &'a Written,
        seqs: &[i64],
    ) -> Rows<'a> {
        let mut r = Rows::default();
        for &i in stored {
            let m = batch[i];
            r.tenant_id.push(&m.tenant_id);
            r.id.push(&m.id);
            r.source.push(&m.source);
            r.source_agent_id.push(m.source_agent_id.as_deref());
            r.kind.push(&m.kind);
            r.conversation_id.push(&m.conversation_id);
            r.correlation_id.push(m.correlation_id.as_deref());
            r.to_text.push(&m.to_text);
            r.to_id.push(&m.to_id);
            r.attrs.push(&m.attrs);
            r.data.push(&m.data);
            r.signed_hash.push(&m.signed_hash);
            r.idempotency_key
                .push(m.idempotency.as_ref().map(|k| k.key.as_str()));
            r.receipt.push(&m.receipt);
            r.received_at.push(m.received_at);
            r.expires_at.push(m.expires_at);
            r.task_id.push(m.task_id.as_deref());
            r.seq.push(seqs[i]);
            if !m.search_tags.is_empty() {
                r.search_seq.push(seqs[i]);
                r.search_tags.push(&m.search_tags);
            }
            if let Plan::Store { entries } = &plans[i] {
                for (agent, k) in entries {
                    r.entry_receipt.push(&m.receipt);
                    r.entry_agent.push(agent);
                    let n = written.get(agent).map_or(0, |w| w.0);
                    r.entry_from_end.push(n - *k as i64);
                    r.entry_visible.push(m.received_at);
                    r.entry_expires.push(m.expires_at);
                }
            }
        }
        for (agent, (n, ceiling)) in written {
            r.bumped.push(agent);
            r.by.push(*n);
            r.ceiling.push(*ceiling);
        }
        r
    }
}
