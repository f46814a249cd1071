//! The PostgreSQL schema, as numbered migrations applied in order; `schema_version` records the
//! last one applied. Every replica migrates at start under one advisory lock, so two starting at
//! once apply each migration once.

use deadpool_postgres::GenericClient;

use crate::{StoreError, StoreResult};

/// The advisory lock key migrations run under (any constant no other lock of ours uses).
const MIGRATION_LOCK: i64 = 0x6167_656e_7462_7573; // "agentbus"

const MIGRATIONS: &[&str] = &[
    // The schema of SQLite's migrations 1 to 6 at once. Times are Unix milliseconds; entry states
    // are the codes of `EntryState`. `messages.seq` is an identity column: it only names a row
    // and orders a conversation, nobody polls "above the last seen" on it (it commits out of
    // order); inbox sequences come from `inbox_counters`. Text compares byte-wise (`COLLATE "C"`),
    // as in SQLite, so lists sort alike on both backends whatever the database's locale.
    r#"
CREATE TABLE tenants (
    id TEXT COLLATE "C" PRIMARY KEY, slug TEXT COLLATE "C" NOT NULL UNIQUE, data_key BYTEA NOT NULL, created_at BIGINT NOT NULL,
    suspended_at BIGINT
);
CREATE TABLE workspaces (
    id TEXT COLLATE "C" PRIMARY KEY, tenant_id TEXT COLLATE "C" NOT NULL REFERENCES tenants(id), slug TEXT COLLATE "C" NOT NULL,
    policy TEXT COLLATE "C" NOT NULL, created_at BIGINT NOT NULL, UNIQUE (tenant_id, slug)
);
CREATE TABLE users (
    n BIGINT GENERATED ALWAYS AS IDENTITY, id TEXT COLLATE "C" PRIMARY KEY, tenant_id TEXT COLLATE "C" NOT NULL,
    workspace_id TEXT COLLATE "C" NOT NULL, name TEXT COLLATE "C" NOT NULL, role TEXT COLLATE "C" NOT NULL, created_at BIGINT NOT NULL
);
CREATE INDEX users_role ON users (role);
CREATE TABLE tokens (
    hash BYTEA PRIMARY KEY, kind TEXT COLLATE "C" NOT NULL, subject_id TEXT COLLATE "C" NOT NULL, created_at BIGINT NOT NULL
);
CREATE INDEX tokens_subject ON tokens (kind, subject_id);
CREATE TABLE agents (
    id TEXT COLLATE "C" PRIMARY KEY, tenant_id TEXT COLLATE "C" NOT NULL, workspace_id TEXT COLLATE "C" NOT NULL, name TEXT COLLATE "C" NOT NULL,
    owner_id TEXT COLLATE "C", card TEXT COLLATE "C" NOT NULL, visibility TEXT COLLATE "C" NOT NULL, created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL, deleted_at BIGINT, suspended_at BIGINT
);
CREATE UNIQUE INDEX agents_live_name ON agents (workspace_id, name) WHERE deleted_at IS NULL;
CREATE INDEX agents_name ON agents (workspace_id, name, deleted_at);
CREATE INDEX agents_tenant ON agents (tenant_id) WHERE deleted_at IS NULL;
CREATE TABLE aliases (
    workspace_id TEXT COLLATE "C" NOT NULL, alias TEXT COLLATE "C" NOT NULL, agent_id TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (workspace_id, alias)
);
CREATE INDEX aliases_agent ON aliases (agent_id);
CREATE TABLE keys (
    id TEXT COLLATE "C" PRIMARY KEY, agent_id TEXT COLLATE "C" NOT NULL, public_key BYTEA NOT NULL,
    created_at BIGINT NOT NULL, expires_at BIGINT NOT NULL, revoked_at BIGINT
);
CREATE INDEX keys_agent ON keys (agent_id);
CREATE TABLE topics (
    id TEXT COLLATE "C" PRIMARY KEY, workspace_id TEXT COLLATE "C" NOT NULL, name TEXT COLLATE "C" NOT NULL, created_at BIGINT NOT NULL,
    UNIQUE (workspace_id, name)
);
CREATE TABLE subscriptions (
    topic_id TEXT COLLATE "C" NOT NULL, agent_id TEXT COLLATE "C" NOT NULL, created_at BIGINT NOT NULL,
    PRIMARY KEY (topic_id, agent_id)
);
CREATE INDEX subscriptions_agent ON subscriptions (agent_id);
CREATE TABLE messages (
    seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, tenant_id TEXT COLLATE "C" NOT NULL, id TEXT COLLATE "C" NOT NULL,
    source TEXT COLLATE "C" NOT NULL, source_agent_id TEXT COLLATE "C", kind TEXT COLLATE "C" NOT NULL, conversation_id TEXT COLLATE "C" NOT NULL,
    correlation_id TEXT COLLATE "C", to_text TEXT COLLATE "C" NOT NULL, to_id TEXT COLLATE "C" NOT NULL, attrs TEXT COLLATE "C" NOT NULL,
    data BYTEA NOT NULL, signed_hash BYTEA NOT NULL, idempotency_key TEXT COLLATE "C",
    receipt TEXT COLLATE "C" NOT NULL UNIQUE, received_at BIGINT NOT NULL, expires_at BIGINT NOT NULL, task_id TEXT COLLATE "C"
);
CREATE INDEX messages_conversation ON messages (tenant_id, conversation_id, received_at, seq);
CREATE INDEX messages_task ON messages (task_id) WHERE task_id IS NOT NULL;
CREATE TABLE recent_ids (
    tenant_id TEXT COLLATE "C" NOT NULL, source TEXT COLLATE "C" NOT NULL, id TEXT COLLATE "C" NOT NULL, message_seq BIGINT NOT NULL,
    received_at BIGINT NOT NULL, PRIMARY KEY (tenant_id, source, id)
);
CREATE TABLE idempotency (
    tenant_id TEXT COLLATE "C" NOT NULL, source TEXT COLLATE "C" NOT NULL, to_id TEXT COLLATE "C" NOT NULL, key TEXT COLLATE "C" NOT NULL,
    message_seq BIGINT NOT NULL, created_at BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, source, to_id, key)
);
CREATE TABLE inbox_counters (
    agent_id TEXT COLLATE "C" PRIMARY KEY, last_seq BIGINT NOT NULL, pending BIGINT NOT NULL
);
CREATE TABLE inbox (
    agent_id TEXT COLLATE "C" NOT NULL, sequence BIGINT NOT NULL, message_seq BIGINT NOT NULL,
    state BIGINT NOT NULL, attempts BIGINT NOT NULL, visible_at BIGINT NOT NULL, lease TEXT COLLATE "C",
    expires_at BIGINT NOT NULL, last_attempt_at BIGINT, acked_at BIGINT,
    PRIMARY KEY (agent_id, sequence)
);
CREATE INDEX inbox_new ON inbox (agent_id, sequence) WHERE state = 0;
CREATE INDEX inbox_due ON inbox (agent_id, visible_at) WHERE state = 1;
CREATE INDEX inbox_leases ON inbox (visible_at) WHERE state = 1;
CREATE INDEX inbox_expiry ON inbox (expires_at) WHERE state IN (0, 1);
CREATE INDEX inbox_message ON inbox (message_seq);
CREATE TABLE blobs (
    id TEXT COLLATE "C" PRIMARY KEY, tenant_id TEXT COLLATE "C" NOT NULL, uploader_id TEXT COLLATE "C" NOT NULL, name TEXT COLLATE "C" NOT NULL,
    media_type TEXT COLLATE "C", size BIGINT NOT NULL, sha256 TEXT COLLATE "C" NOT NULL, complete BOOLEAN NOT NULL,
    created_at BIGINT NOT NULL, expires_at BIGINT NOT NULL
);
CREATE INDEX blobs_tenant ON blobs (tenant_id, expires_at);
CREATE TABLE blob_refs (
    blob_id TEXT COLLATE "C" NOT NULL, message_seq BIGINT NOT NULL, PRIMARY KEY (blob_id, message_seq)
);
CREATE TABLE tasks (
    id TEXT COLLATE "C" PRIMARY KEY, tenant_id TEXT COLLATE "C" NOT NULL, workspace_id TEXT COLLATE "C" NOT NULL,
    requester_id TEXT COLLATE "C" NOT NULL, recipient_id TEXT COLLATE "C" NOT NULL, request_id TEXT COLLATE "C" NOT NULL,
    conversation_id TEXT COLLATE "C" NOT NULL, capability TEXT COLLATE "C" NOT NULL, state TEXT COLLATE "C" NOT NULL,
    terminal BOOLEAN NOT NULL, machine TEXT COLLATE "C" NOT NULL, next_deadline BIGINT,
    created_at BIGINT NOT NULL, updated_at BIGINT NOT NULL, version BIGINT NOT NULL
);
CREATE INDEX tasks_due ON tasks (next_deadline) WHERE NOT terminal;
CREATE INDEX tasks_requester ON tasks (tenant_id, requester_id, state);
CREATE INDEX tasks_recipient ON tasks (tenant_id, recipient_id, state);
CREATE INDEX tasks_recent ON tasks (tenant_id, created_at, id);
CREATE TABLE task_events (
    task_id TEXT COLLATE "C" NOT NULL, n BIGINT NOT NULL, at BIGINT NOT NULL, actor TEXT COLLATE "C" NOT NULL,
    envelope_id TEXT COLLATE "C", kind TEXT COLLATE "C" NOT NULL, from_state TEXT COLLATE "C" NOT NULL, to_state TEXT COLLATE "C" NOT NULL,
    flag TEXT COLLATE "C", timer TEXT COLLATE "C", warnings TEXT COLLATE "C", PRIMARY KEY (task_id, n)
);
CREATE TABLE receipts (
    agent_id TEXT COLLATE "C" NOT NULL, sequence BIGINT NOT NULL, message_seq BIGINT NOT NULL,
    shown_at BIGINT NOT NULL, harness TEXT COLLATE "C" NOT NULL, event TEXT COLLATE "C" NOT NULL, reported_at BIGINT NOT NULL,
    PRIMARY KEY (agent_id, sequence)
);
CREATE INDEX receipts_message ON receipts (message_seq);
CREATE TABLE console_sessions (
    id_hash BYTEA PRIMARY KEY, user_id TEXT COLLATE "C" NOT NULL, token_hash BYTEA NOT NULL, csrf TEXT COLLATE "C" NOT NULL,
    created_at BIGINT NOT NULL, expires_at BIGINT NOT NULL
);
CREATE INDEX console_sessions_expiry ON console_sessions (expires_at);
CREATE TABLE usage (
    message_seq BIGINT PRIMARY KEY, tenant_id TEXT COLLATE "C" NOT NULL, workspace_id TEXT COLLATE "C" NOT NULL,
    agent_id TEXT COLLATE "C" NOT NULL, task_id TEXT COLLATE "C", capability TEXT COLLATE "C", day TEXT COLLATE "C" NOT NULL, field TEXT COLLATE "C" NOT NULL,
    reported_by TEXT COLLATE "C", provider TEXT COLLATE "C", model TEXT COLLATE "C", input_tokens BIGINT NOT NULL,
    output_tokens BIGINT NOT NULL, cache_read_tokens BIGINT NOT NULL,
    cache_write_tokens BIGINT NOT NULL, reasoning_tokens BIGINT NOT NULL,
    requests BIGINT NOT NULL, wall_ms BIGINT NOT NULL, currency TEXT COLLATE "C", cost_micros BIGINT,
    cost_source TEXT COLLATE "C"
);
CREATE INDEX usage_day ON usage (tenant_id, day);
"#,
    // `GET /v1/messages/sent`: an agent's sent messages, newest first, a page at a time (SQLite's
    // migration 7).
    r#"
CREATE INDEX messages_sent ON messages (tenant_id, source_agent_id, seq) WHERE source_agent_id IS NOT NULL;
"#,
    // Blob lifecycle (SQLite's migration 8): `purged` marks a blob whose content the
    // reaper deleted; the row stays so reads answer "expired".
    r#"
ALTER TABLE blobs ADD COLUMN purged BOOLEAN NOT NULL DEFAULT false;
CREATE INDEX blobs_live ON blobs (created_at) WHERE NOT purged;
"#,
    // Replicas (SQLite's migration 9 has the content table alone): inline blob content
    // in the database, where every replica reads it, and the reaper's claim, one row, so task
    // timers and inbox expiries are swept by one replica at a time.
    r#"
CREATE TABLE blob_contents (blob_id TEXT COLLATE "C" PRIMARY KEY, sealed BYTEA NOT NULL);
CREATE TABLE reaper_claim (id INT PRIMARY KEY CHECK (id = 1), holder TEXT COLLATE "C" NOT NULL, until_ms BIGINT NOT NULL);
"#,
    // An inbox's settled entries counted in a row of their own, so acks and the reaper never wait
    // on the counter row a publish holds until its commit's flush (nor a publish on theirs): the
    // unacknowledged depth is `added - settled`. Entries settled before this migration were taken
    // off `pending`, so it becomes `added` with nothing settled yet.
    r#"
ALTER TABLE inbox_counters RENAME COLUMN pending TO added;
CREATE TABLE inbox_settled (agent_id TEXT COLLATE "C" PRIMARY KEY, settled BIGINT NOT NULL);
"#,
    // The reaper's indexes across inboxes, keyed by expressions only the reaper's queries name:
    // keyed by `visible_at` and `expires_at` themselves, they were the generic plans of a lease
    // and of `next_visible` (one inbox each) too, which then read every inbox's entries through
    // them (`postgres/plans.rs`).
    r#"
DROP INDEX inbox_leases;
CREATE INDEX inbox_leases ON inbox ((visible_at + 0)) WHERE state = 1;
DROP INDEX inbox_expiry;
CREATE INDEX inbox_expiry ON inbox ((expires_at + 0)) WHERE state IN (0, 1);
"#,
    // A publish batch plans its depth checks before it locks the inboxes' counter rows, and
    // checks that plan under the lock with this (`postgres/batch.rs`): the depth an inbox may have
    // for every decision of the plan to stand, or an error that rolls the batch back to be run
    // again with the rows locked first.
    r#"
CREATE FUNCTION agentbus_depth_within(depth BIGINT, ceiling BIGINT) RETURNS BOOLEAN
LANGUAGE plpgsql AS $$
BEGIN
    IF depth > ceiling THEN
        RAISE EXCEPTION 'an inbox filled while its publish batch was planned'
            USING ERRCODE = 'AB001';
    END IF;
    RETURN true;
END
$$;
"#,
    // Owed notices made durable (`model::Owed`): `inbox.notice` marks a settled entry whose
    // sender is owed the reaper's notice, `tasks.notices` the parties owed a timer's notice (bits),
    // each set in the transaction that made it due and cleared by the one that stores it, so a
    // replica that dies between the two leaves it to the next pass of any replica.
    r#"
ALTER TABLE inbox ADD COLUMN notice SMALLINT;
CREATE INDEX inbox_notices ON inbox (agent_id, sequence) WHERE notice IS NOT NULL;
ALTER TABLE tasks ADD COLUMN notices INTEGER NOT NULL DEFAULT 0;
CREATE INDEX tasks_notices ON tasks (id) WHERE notices <> 0;
"#,
    // Every notice owed in the store. An admin's cancel owes its notices like a timer
    // (`tasks.notices`), its reason, which no envelope carries, kept on its timeline entry so they
    // can be sent again; `inbox.hold` marks a copy held for a suspended recipient, whose sender is
    // owed AB-4013 (a column of its own: `notice` marks are read by earlier releases as settled
    // entries', see `model::NoticeKind`).
    r#"
ALTER TABLE task_events ADD COLUMN reason TEXT COLLATE "C";
ALTER TABLE inbox ADD COLUMN hold SMALLINT;
CREATE INDEX inbox_holds ON inbox (agent_id, sequence) WHERE hold IS NOT NULL;
"#,
    // Pushes: a message sent to a client that may drop it (an MCP channel notification) is its
    // own delivery state, recorded apart from the showing, which may come later.
    r#"
CREATE TABLE pushes (
    agent_id TEXT COLLATE "C" NOT NULL, sequence BIGINT NOT NULL, message_seq BIGINT NOT NULL,
    pushed_at BIGINT NOT NULL, harness TEXT COLLATE "C" NOT NULL, event TEXT COLLATE "C" NOT NULL, reported_at BIGINT NOT NULL,
    PRIMARY KEY (agent_id, sequence)
);
CREATE INDEX pushes_message ON pushes (message_seq);
"#,
    // People administer tokens by command: a label given at issue, and a revocation that keeps
    // the row, so a list shows what was revoked and when.
    r#"
ALTER TABLE tokens ADD COLUMN label TEXT COLLATE "C";
ALTER TABLE tokens ADD COLUMN revoked_at BIGINT;
"#,
    // Search: each message's index words (keyed hashes of its terms, never the terms) as a
    // tsvector of exactly those words, deleted with the message. Written on every publish, so
    // kept cheap: no foreign key (a trigger deletes instead of a per-row key check), and the
    // words stay in the row uncompressed (random hashes do not compress; TOAST only cost time).
    r#"
CREATE TABLE search_terms (
    message_seq BIGINT PRIMARY KEY,
    tags TSVECTOR NOT NULL
) WITH (toast_tuple_target = 8160);
ALTER TABLE search_terms ALTER COLUMN tags SET STORAGE EXTERNAL;
CREATE INDEX search_terms_tags ON search_terms USING GIN (tags);
CREATE FUNCTION agentbus_search_forget() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM search_terms s USING gone WHERE s.message_seq = gone.seq;
    RETURN NULL;
END
$$;
CREATE TRIGGER messages_search_delete AFTER DELETE ON messages
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION agentbus_search_forget();
"#,
];

/// The `schema_version` of a database with every migration applied.
pub fn current_version() -> i64 {
    MIGRATIONS.len() as i64
}

/// Applies every migration newer than the database's `schema_version`, each in its own
/// transaction; refuses a database migrated by a newer build. `bounded` is the pooled
/// connection's lock bound, set again after: a replica starting while another migrates waits
/// for it however long it takes, and so do the migrations' own locks.
pub(super) async fn migrate(
    client: &mut deadpool_postgres::Client,
    bounded: &str,
) -> StoreResult<()> {
    client.batch_execute("SET lock_timeout = 0").await?;
    client
        .execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK])
        .await?;
    let result = apply(client).await;
    // Released whatever happened; a failed unlock ends with the session anyway.
    let _ = client
        .execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK])
        .await;
    result?;
    client.batch_execute(bounded).await?;
    Ok(())
}

async fn apply(client: &mut deadpool_postgres::Client) -> StoreResult<()> {
    client
        .batch_execute("CREATE TABLE IF NOT EXISTS schema_version (version BIGINT NOT NULL)")
        .await?;
    let found = version(&*client).await?;
    let known = current_version();
    if found > known {
        return Err(newer(found, known));
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        let t = client.transaction().await?;
        t.batch_execute(sql).await?;
        t.execute("DELETE FROM schema_version", &[]).await?;
        t.execute(
            "INSERT INTO schema_version (version) VALUES ($1)",
            &[&(i as i64 + 1)],
        )
        .await?;
        t.commit().await?;
    }
    Ok(())
}

/// The schema version recorded in the database (0 before any migration).
pub(super) async fn version(c: &impl GenericClient) -> StoreResult<i64> {
    let row = c
        .query_opt("SELECT max(version) FROM schema_version", &[])
        .await?;
    Ok(row
        .map(|r| r.try_get::<_, Option<i64>>(0))
        .transpose()?
        .flatten()
        .unwrap_or(0))
}

/// The refusal of a schema this build does not know.
pub(super) fn newer(found: i64, known: i64) -> StoreError {
    StoreError::Backend(format!(
        "the database schema is version {found}, newer than this build knows ({known}): \
         run the agentbus release that migrated it, or a newer one"
    ))
}
