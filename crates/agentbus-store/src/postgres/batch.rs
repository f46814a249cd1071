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
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{GenericClient, Pool};
use futures_util::future::try_join_all;
use tokio::sync::{Mutex, mpsc, oneshot};

use super::ops::{
    idempotent_in, inbox_full, insert_message, insert_row, key_of, lock_counters, lock_keys,
    recent_in, record_ids,
};
use super::rows::exec;
use crate::{NewMessage, PublishOutcome, StoreError, StoreResult};

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
    let mut client = match pool.get().await {
        Ok(c) => c,
        Err(e) => {
            // No connection: every publish of the batch fails the same way (a dry pool or a
            // database that is down), and alone each would have waited as long again.
            let e = super::pool_error(e, wait);
            for job in batch {
                let _ = job.answer.send(Err(e.clone()));
            }
            return;
        }
    };
    if batch.len() > 1 {
        let messages: Vec<&NewMessage> = batch.iter().map(|j| &j.message).collect();
        let stored = async {
            let tx = client.transaction().await?;
            let outcomes = store_batch(&tx, &messages).await?;
            tx.commit().await?;
            Ok::<_, StoreError>(outcomes)
        }
        .await;
        if let Ok(outcomes) = stored {
            for (job, outcome) in batch.into_iter().zip(outcomes) {
                let _ = job.answer.send(Ok(outcome));
            }
            return;
        }
        if client.is_closed() {
            match pool.get().await {
                Ok(c) => client = c,
                Err(e) => {
                    let e = super::pool_error(e, wait);
                    for job in batch {
                        let _ = job.answer.send(Err(e.clone()));
                    }
                    return;
                }
            }
        }
    }
    // One publish, or a batch that failed (a task that changed concurrently, a value the
    // database refuses, a lost connection): each alone, in order, as if no batch was tried. A
    // publish whose batch did commit before a lost answer meets its own row as a duplicate.
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
    /// Stored, with these (agent, sequence) copies and depths after each.
    Store {
        sequences: Vec<(String, u64)>,
        depths: Vec<u64>,
    },
}

/// Stores `batch` in `t`: the outcome of each publish, in order. Statements that do not depend on
/// each other are sent together (tokio-postgres pipelines the queries of one connection).
async fn store_batch(
    t: &deadpool_postgres::Transaction<'_>,
    batch: &[&NewMessage],
) -> StoreResult<Vec<PublishOutcome>> {
    // The dedupe locks of every publish at once (sorted there, as a publish alone takes its own).
    let mut keys = Vec::with_capacity(batch.len() * 2);
    for m in batch {
        keys.push(key_of("id", &[&m.tenant_id, &m.source, &m.id]));
        if let Some(k) = &m.idempotency {
            keys.push(key_of("idem", &[&k.tenant_id, &k.source, &k.to_id, &k.key]));
        }
    }
    lock_keys(t, &keys).await?;
    let found = try_join_all(batch.iter().map(|m| async move {
        let recent = recent_in(t, &m.tenant_id, &m.source, &m.id, m.replay_since).await?;
        let replay = match &m.idempotency {
            Some(k) if recent.is_none() => idempotent_in(t, k, m.idempotency_since).await?,
            _ => None,
        };
        Ok::<_, StoreError>((recent, replay))
    }))
    .await?;

    let mut counters = lock_counters(t, batch.iter().flat_map(|m| &m.recipients)).await?;
    let mut ids: HashMap<(&str, &str, &str), usize> = HashMap::new();
    let mut keys: HashMap<(&str, &str, &str, &str), usize> = HashMap::new();
    let mut plans = Vec::with_capacity(batch.len());
    for (i, (m, (recent, replay))) in batch.iter().zip(found).enumerate() {
        let id = (m.tenant_id.as_str(), m.source.as_str(), m.id.as_str());
        let key = m.idempotency.as_ref().map(|k| {
            (
                k.tenant_id.as_str(),
                k.source.as_str(),
                k.to_id.as_str(),
                k.key.as_str(),
            )
        });
        let plan = if let Some(row) = recent {
            Plan::Answer(Box::new(PublishOutcome::DuplicateId(row)))
        } else if let Some(&j) = ids.get(&id) {
            Plan::DuplicateOf(j)
        } else if let Some(row) = replay {
            Plan::Answer(Box::new(PublishOutcome::IdempotentReplay(row)))
        } else if let Some(&j) = key.as_ref().and_then(|k| keys.get(k)) {
            Plan::ReplayOf(j)
        } else if let Some(full) = inbox_full(m, &|agent| counters.get(agent).map_or(0, |c| c.1)) {
            Plan::Answer(Box::new(full))
        } else {
            let mut sequences = Vec::with_capacity(m.recipients.len());
            let mut depths = Vec::with_capacity(m.recipients.len());
            for agent in &m.recipients {
                let c = counters.entry(agent.clone()).or_insert((0, 0));
                c.0 += 1;
                c.1 += 1;
                sequences.push((agent.clone(), c.0 as u64));
                depths.push(c.1);
            }
            ids.insert(id, i);
            if let Some(k) = key {
                keys.insert(k, i);
            }
            Plan::Store { sequences, depths }
        };
        plans.push(plan);
    }

    let stored: Vec<usize> = (0..batch.len())
        .filter(|&i| matches!(plans[i], Plan::Store { .. }))
        .collect();
    let seqs = try_join_all(stored.iter().map(|&i| insert_row(t, batch[i]))).await?;
    let mut seq_of = vec![0i64; batch.len()];
    for (&i, &seq) in stored.iter().zip(&seqs) {
        seq_of[i] = seq;
    }

    // The inbox entries and the counters' new values in one statement each.
    let (mut agents, mut sequences, mut message_seqs, mut visible, mut expires) =
        (vec![], vec![], vec![], vec![], vec![]);
    let mut added: HashMap<&str, i64> = HashMap::new();
    for &i in &stored {
        if let Plan::Store { sequences: s, .. } = &plans[i] {
            for (agent, sequence) in s {
                agents.push(agent.as_str());
                sequences.push(*sequence as i64);
                message_seqs.push(seq_of[i]);
                visible.push(batch[i].received_at);
                expires.push(batch[i].expires_at);
                *added.entry(agent.as_str()).or_default() += 1;
            }
        }
    }
    let (bumped, by): (Vec<&str>, Vec<i64>) = added.into_iter().unzip();
    let entries = async {
        if !agents.is_empty() {
            exec(
                t,
                "INSERT INTO inbox (agent_id, sequence, message_seq, state, attempts, visible_at, expires_at) \
                 SELECT a, s, m, 0, 0, v, e \
                 FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[]) AS u(a, s, m, v, e)",
                &[&agents, &sequences, &message_seqs, &visible, &expires],
            )
            .await?;
            exec(
                t,
                "UPDATE inbox_counters c SET last_seq = c.last_seq + u.n, pending = c.pending + u.n \
                 FROM unnest($1::text[], $2::bigint[]) AS u(a, n) WHERE c.agent_id = u.a",
                &[&bumped, &by],
            )
            .await?;
        }
        Ok::<_, StoreError>(())
    };
    let records = try_join_all(stored.iter().map(|&i| record_ids(t, batch[i], seq_of[i])));
    futures_util::future::try_join(entries, records).await?;

    let mut outcomes = Vec::with_capacity(batch.len());
    for (i, plan) in plans.into_iter().enumerate() {
        outcomes.push(match plan {
            Plan::Answer(o) => *o,
            Plan::DuplicateOf(j) => PublishOutcome::DuplicateId(batch[j].stored_row(seq_of[j])),
            Plan::ReplayOf(j) => PublishOutcome::IdempotentReplay(batch[j].stored_row(seq_of[j])),
            Plan::Store { sequences, depths } => PublishOutcome::Stored {
                message: batch[i].stored_row(seq_of[i]),
                sequences,
                depths,
            },
        });
    }
    Ok(outcomes)
}
