//! The schema, as numbered migrations applied in order (`PRAGMA user_version` records the last).

use rusqlite::Connection;

use crate::{StoreError, StoreResult};

const MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE tenants (
    id TEXT PRIMARY KEY, slug TEXT NOT NULL UNIQUE, data_key BLOB NOT NULL, created_at INTEGER NOT NULL
);
CREATE TABLE workspaces (
    id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL REFERENCES tenants(id), slug TEXT NOT NULL,
    policy TEXT NOT NULL, created_at INTEGER NOT NULL, UNIQUE (tenant_id, slug)
);
CREATE TABLE users (
    id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL, workspace_id TEXT NOT NULL, name TEXT NOT NULL,
    role TEXT NOT NULL, created_at INTEGER NOT NULL
);
CREATE TABLE tokens (
    hash BLOB PRIMARY KEY, kind TEXT NOT NULL, subject_id TEXT NOT NULL, created_at INTEGER NOT NULL
);
CREATE TABLE agents (
    id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL, workspace_id TEXT NOT NULL, name TEXT NOT NULL,
    owner_id TEXT, card TEXT NOT NULL, visibility TEXT NOT NULL, created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL, deleted_at INTEGER
);
CREATE UNIQUE INDEX agents_live_name ON agents (workspace_id, name) WHERE deleted_at IS NULL;
CREATE INDEX agents_name ON agents (workspace_id, name, deleted_at);
CREATE TABLE aliases (
    workspace_id TEXT NOT NULL, alias TEXT NOT NULL, agent_id TEXT NOT NULL,
    PRIMARY KEY (workspace_id, alias)
);
CREATE TABLE keys (
    id TEXT PRIMARY KEY, agent_id TEXT NOT NULL, public_key BLOB NOT NULL,
    created_at INTEGER NOT NULL, expires_at INTEGER NOT NULL, revoked_at INTEGER
);
CREATE INDEX keys_agent ON keys (agent_id);
CREATE TABLE topics (
    id TEXT PRIMARY KEY, workspace_id TEXT NOT NULL, name TEXT NOT NULL, created_at INTEGER NOT NULL,
    UNIQUE (workspace_id, name)
);
CREATE TABLE subscriptions (
    topic_id TEXT NOT NULL, agent_id TEXT NOT NULL, created_at INTEGER NOT NULL,
    PRIMARY KEY (topic_id, agent_id)
);
CREATE TABLE messages (
    seq INTEGER PRIMARY KEY, tenant_id TEXT NOT NULL, id TEXT NOT NULL, source TEXT NOT NULL,
    source_agent_id TEXT, kind TEXT NOT NULL, conversation_id TEXT NOT NULL, correlation_id TEXT,
    to_text TEXT NOT NULL, to_id TEXT NOT NULL, attrs TEXT NOT NULL, data BLOB NOT NULL,
    signed_hash BLOB NOT NULL, idempotency_key TEXT, receipt TEXT NOT NULL UNIQUE,
    received_at INTEGER NOT NULL, expires_at INTEGER NOT NULL, task_id TEXT
);
CREATE INDEX messages_conversation ON messages (tenant_id, conversation_id, received_at, seq);
CREATE TABLE recent_ids (
    tenant_id TEXT NOT NULL, source TEXT NOT NULL, id TEXT NOT NULL, message_seq INTEGER NOT NULL,
    received_at INTEGER NOT NULL, PRIMARY KEY (tenant_id, source, id)
) WITHOUT ROWID;
CREATE TABLE idempotency (
    tenant_id TEXT NOT NULL, source TEXT NOT NULL, to_id TEXT NOT NULL, key TEXT NOT NULL,
    message_seq INTEGER NOT NULL, created_at INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, source, to_id, key)
) WITHOUT ROWID;
CREATE TABLE inbox_counters (
    agent_id TEXT PRIMARY KEY, last_seq INTEGER NOT NULL, pending INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE inbox (
    agent_id TEXT NOT NULL, sequence INTEGER NOT NULL, message_seq INTEGER NOT NULL,
    state INTEGER NOT NULL, attempts INTEGER NOT NULL, visible_at INTEGER NOT NULL, lease TEXT,
    expires_at INTEGER NOT NULL, last_attempt_at INTEGER,
    PRIMARY KEY (agent_id, sequence)
) WITHOUT ROWID;
CREATE INDEX inbox_pending ON inbox (agent_id, sequence) WHERE state IN (0, 1);
CREATE INDEX inbox_leases ON inbox (visible_at) WHERE state = 1;
CREATE INDEX inbox_expiry ON inbox (expires_at) WHERE state IN (0, 1);
CREATE INDEX inbox_message ON inbox (message_seq);
CREATE TABLE blobs (
    id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL, uploader_id TEXT NOT NULL, name TEXT NOT NULL,
    media_type TEXT, size INTEGER NOT NULL, sha256 TEXT NOT NULL, complete INTEGER NOT NULL,
    created_at INTEGER NOT NULL, expires_at INTEGER NOT NULL
);
CREATE TABLE blob_refs (
    blob_id TEXT NOT NULL, message_seq INTEGER NOT NULL, PRIMARY KEY (blob_id, message_seq)
) WITHOUT ROWID;
"#,
    r#"
CREATE TABLE tasks (
    id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL, workspace_id TEXT NOT NULL,
    requester_id TEXT NOT NULL, recipient_id TEXT NOT NULL, request_id TEXT NOT NULL,
    conversation_id TEXT NOT NULL, capability TEXT NOT NULL, state TEXT NOT NULL, terminal INTEGER NOT NULL,
    machine TEXT NOT NULL, next_deadline INTEGER, created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL,
    version INTEGER NOT NULL
);
CREATE INDEX tasks_due ON tasks (next_deadline) WHERE terminal = 0;
CREATE INDEX tasks_requester ON tasks (tenant_id, requester_id, state);
CREATE INDEX tasks_recipient ON tasks (tenant_id, recipient_id, state);
CREATE TABLE task_events (
    task_id TEXT NOT NULL, n INTEGER NOT NULL, at INTEGER NOT NULL, actor TEXT NOT NULL,
    envelope_id TEXT, kind TEXT NOT NULL, from_state TEXT NOT NULL, to_state TEXT NOT NULL,
    flag TEXT, timer TEXT, PRIMARY KEY (task_id, n)
) WITHOUT ROWID;
"#,
    // Leasing reads one inbox's deliverable entries: never-delivered ones above a sequence, and
    // leases that ran out. One index for each keeps a lease's cost independent of how many
    // settled entries the inbox holds (the single index over both states was not chosen by the
    // planner, which then scanned the whole inbox on every lease).
    r#"
DROP INDEX inbox_pending;
CREATE INDEX inbox_new ON inbox (agent_id, sequence) WHERE state = 0;
CREATE INDEX inbox_due ON inbox (agent_id, visible_at) WHERE state = 1;
"#,
    // Trust boundaries: tenant and agent suspension, advisory warnings on timeline
    // entries, roles found by value (the operator). Before roles were scoped, a tenant's first
    // user (the bootstrap admin) administered the whole tenant; it keeps that as `tenant_admin`.
    r#"
ALTER TABLE tenants ADD COLUMN suspended_at INTEGER;
ALTER TABLE agents ADD COLUMN suspended_at INTEGER;
ALTER TABLE task_events ADD COLUMN warnings TEXT;
CREATE INDEX users_role ON users (role);
UPDATE users SET role = 'tenant_admin' WHERE role = 'admin' AND created_at =
    (SELECT min(u.created_at) FROM users u WHERE u.tenant_id = users.tenant_id AND u.role = 'admin');
"#,
    // Delivery states a sender can read: when the recipient's sidecar acked a copy,
    // and the recipient's report that it was shown in a session's context (one per delivery,
    // the first stands).
    r#"
ALTER TABLE inbox ADD COLUMN acked_at INTEGER;
CREATE TABLE receipts (
    agent_id TEXT NOT NULL, sequence INTEGER NOT NULL, message_seq INTEGER NOT NULL,
    shown_at INTEGER NOT NULL, harness TEXT NOT NULL, event TEXT NOT NULL, reported_at INTEGER NOT NULL,
    PRIMARY KEY (agent_id, sequence)
) WITHOUT ROWID;
CREATE INDEX receipts_message ON receipts (message_seq);
"#,
    // The console: sessions every replica reads; the usage and cost each message
    // reported, stored with it so totals never open sealed `data` (messages stored before this
    // migration have none); the indexes the console's lists read.
    r#"
CREATE TABLE console_sessions (
    id_hash BLOB PRIMARY KEY, user_id TEXT NOT NULL, token_hash BLOB NOT NULL, csrf TEXT NOT NULL,
    created_at INTEGER NOT NULL, expires_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX console_sessions_expiry ON console_sessions (expires_at);
CREATE TABLE usage (
    message_seq INTEGER PRIMARY KEY, tenant_id TEXT NOT NULL, workspace_id TEXT NOT NULL,
    agent_id TEXT NOT NULL, task_id TEXT, capability TEXT, day TEXT NOT NULL, field TEXT NOT NULL,
    reported_by TEXT, provider TEXT, model TEXT, input_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL, cache_read_tokens INTEGER NOT NULL,
    cache_write_tokens INTEGER NOT NULL, reasoning_tokens INTEGER NOT NULL,
    requests INTEGER NOT NULL, wall_ms INTEGER NOT NULL, currency TEXT, cost_micros INTEGER,
    cost_source TEXT
);
CREATE INDEX usage_day ON usage (tenant_id, day);
CREATE INDEX messages_task ON messages (task_id) WHERE task_id IS NOT NULL;
CREATE INDEX tasks_recent ON tasks (tenant_id, created_at, id);
"#,
    // `GET /v1/messages/sent`: an agent's sent messages, newest first, a page at a time.
    r#"
CREATE INDEX messages_sent ON messages (tenant_id, source_agent_id, seq) WHERE source_agent_id IS NOT NULL;
"#,
    // Blob lifecycle: `purged` marks a blob whose content the reaper deleted (expired,
    // or never completed within its upload window); the row stays so reads answer "expired".
    r#"
ALTER TABLE blobs ADD COLUMN purged INTEGER NOT NULL DEFAULT 0;
CREATE INDEX blobs_live ON blobs (created_at) WHERE purged = 0;
"#,
    // Sealed blob content kept in the database (what replicas on PostgreSQL share; the
    // SQLite gateway keeps its files, and the table stays empty unless a caller uses it).
    r#"
CREATE TABLE blob_contents (blob_id TEXT PRIMARY KEY, sealed BLOB NOT NULL);
"#,
    // Owed notices made durable (`model::Owed`): `inbox.notice` marks a settled entry whose
    // sender is owed the reaper's notice, `tasks.notices` the parties owed a timer's notice (bits),
    // each set in the transaction that made it due and cleared by the one that stores it.
    r#"
ALTER TABLE inbox ADD COLUMN notice INTEGER;
CREATE INDEX inbox_notices ON inbox (agent_id, sequence) WHERE notice IS NOT NULL;
ALTER TABLE tasks ADD COLUMN notices INTEGER NOT NULL DEFAULT 0;
CREATE INDEX tasks_notices ON tasks (id) WHERE notices != 0;
"#,
    // Every notice owed in the store. An admin's cancel owes its notices like a timer
    // (`tasks.notices`), its reason, which no envelope carries, kept on its timeline entry so they
    // can be sent again; `inbox.hold` marks a copy held for a suspended recipient, whose sender is
    // owed AB-4013 (a column of its own: `notice` marks are read by earlier releases as settled
    // entries', see `model::NoticeKind`).
    r#"
ALTER TABLE task_events ADD COLUMN reason TEXT;
ALTER TABLE inbox ADD COLUMN hold INTEGER;
CREATE INDEX inbox_holds ON inbox (agent_id, sequence) WHERE hold IS NOT NULL;
"#,
    // Pushes: a message sent to a client that may drop it (an MCP channel notification) is its
    // own delivery state, recorded apart from the showing, which may come later.
    r#"
CREATE TABLE pushes (
    agent_id TEXT NOT NULL, sequence INTEGER NOT NULL, message_seq INTEGER NOT NULL,
    pushed_at INTEGER NOT NULL, harness TEXT NOT NULL, event TEXT NOT NULL, reported_at INTEGER NOT NULL,
    PRIMARY KEY (agent_id, sequence)
) WITHOUT ROWID;
CREATE INDEX pushes_message ON pushes (message_seq);
"#,
    // People administer tokens by command: a label given at issue, and a revocation that keeps
    // the row, so a list shows what was revoked and when.
    r#"
ALTER TABLE tokens ADD COLUMN label TEXT;
ALTER TABLE tokens ADD COLUMN revoked_at INTEGER;
CREATE INDEX tokens_subject ON tokens (kind, subject_id);
"#,
    // Search: each message's index words (keyed hashes of its terms, never the terms) in a
    // contentless FTS5 table whose rowid is the message's storage sequence, deleted with it.
    // No positions (`detail=none`): queries are words, never phrases of hashes. A publish writes
    // its row to `search_pending`, which the writer merges into the FTS5 table in batches
    // (`sqlite::merge_search_pending`).
    r#"
CREATE VIRTUAL TABLE search_terms USING fts5(tags, content='', contentless_delete=1, tokenize='ascii', detail=none);
CREATE TABLE search_pending (seq INTEGER PRIMARY KEY, tags TEXT NOT NULL);
CREATE TRIGGER messages_search_delete AFTER DELETE ON messages BEGIN
    DELETE FROM search_terms WHERE rowid = old.seq;
    DELETE FROM search_pending WHERE seq = old.seq;
END;
"#,
];

/// The `user_version` of a database with every migration applied.
pub fn current_version() -> usize {
    MIGRATIONS.len()
}

/// Applies every migration newer than the database's `user_version`; refuses a database that a
/// newer build migrated past what this one knows, which it could only misread.
pub fn migrate(conn: &mut Connection) -> StoreResult<()> {
    let current: usize = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    if current > MIGRATIONS.len() {
        return Err(StoreError::Backend(format!(
            "the database schema is version {current}, newer than this build knows ({}); \
             run the agentbus release that wrote it, or a newer one",
            MIGRATIONS.len()
        )));
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(current) {
        let t = conn.transaction()?;
        t.execute_batch(sql)?;
        t.pragma_update(None, "user_version", i + 1)?;
        t.commit()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A database from a newer build is refused, and left as it was.
    #[test]
    fn a_schema_newer_than_this_build_is_refused() {
        let mut c = Connection::open_in_memory().expect("memory database");
        migrate(&mut c).expect("migrate");
        c.pragma_update(None, "user_version", current_version() + 1)
            .expect("version");
        let err = migrate(&mut c).expect_err("a newer schema");
        assert!(
            err.to_string().contains("newer than this build knows"),
            "{err}"
        );
        let v: usize = c
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .expect("version");
        assert_eq!(v, current_version() + 1);
    }

    /// A database from before roles were scoped: each tenant's first admin (the bootstrap admin)
    /// administers the tenant afterwards; other admins and members keep their roles.
    #[test]
    fn migration_4_makes_each_tenants_first_admin_its_tenant_admin() {
        let mut c = Connection::open_in_memory().expect("memory database");
        let scoped = MIGRATIONS
            .iter()
            .position(|m| m.contains("'tenant_admin'"))
            .expect("the roles migration");
        for (i, sql) in MIGRATIONS.iter().enumerate().take(scoped) {
            c.execute_batch(sql).expect("old migration");
            c.pragma_update(None, "user_version", i + 1)
                .expect("version");
        }
        c.execute_batch(
            "INSERT INTO users VALUES ('usr_a', 'ten_1', 'ws_1', 'admin', 'admin', 10), \
             ('usr_b', 'ten_1', 'ws_2', 'second', 'admin', 20), \
             ('usr_c', 'ten_1', 'ws_1', 'early member', 'member', 5), \
             ('usr_d', 'ten_2', 'ws_3', 'admin', 'admin', 30);",
        )
        .expect("old users");
        migrate(&mut c).expect("migrate");
        let mut s = c
            .prepare("SELECT id, role FROM users ORDER BY id")
            .expect("query");
        let roles: Vec<(String, String)> = s
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .expect("rows")
            .collect::<Result<_, _>>()
            .expect("rows");
        let want = [
            ("usr_a", "tenant_admin"),
            ("usr_b", "admin"),
            ("usr_c", "member"),
            ("usr_d", "tenant_admin"),
        ];
        assert_eq!(
            roles,
            want.map(|(a, b)| (a.to_owned(), b.to_owned())).to_vec()
        );
    }
}
