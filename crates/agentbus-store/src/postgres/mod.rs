//! The PostgreSQL backend: several gateway replicas share one database.
//!
//! Each [`crate::Store`] operation is one transaction on a pooled connection (READ COMMITTED).
//! The guarantees SQLite gets from its single writer come from locks here: a publish locks the
//! recipients' counter rows (in id order, so publishers never deadlock) and takes each inbox's next
//! `sequence` from them, never from a database sequence, which commits out of order; an
//! advisory lock per `(tenant, source, id)` and per idempotency key makes the dedupe decided
//! inside the storing transaction; leases and the reaper claim rows with `FOR UPDATE SKIP
//! LOCKED`, so no entry is handed out twice. Durability: `fsync` and `synchronous_commit` are
//! checked when the store opens and `synchronous_commit` is set on every connection the pool
//! makes, so a publish answers only after its commit is flushed.

mod batch;
mod listen;
mod ops;
// The statements whose generic plans the integration tests check (`tests/it/plans.rs`).
#[doc(hidden)]
pub mod plans;
mod rows;
mod schema;

use std::str::FromStr;
use std::time::Duration;

use deadpool_postgres::{Hook, HookError, Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::NoTls;

use crate::{StoreError, StoreResult};

pub use schema::current_version;

/// What every pooled connection sets when it is made (see `open_with`): durable commits, a bound
/// on lock waits (`lock_wait`, appended), and the server's own keepalive on its end, so a
/// replica whose host vanished mid-transaction has its locks released within ~25 s rather than
/// when the server's two-hour default notices.
///
/// And `backend_flush_after = 256kB` when the server, database and role leave it at PostgreSQL's
/// default (0): the pages the session's backend writes out of shared buffers then go to the disk
/// every 256 kB, where with the default they wait in the kernel's page cache, which writes them
/// back much later in large bursts that every commit's WAL flush waits behind (the two-replica
/// p99's outliers in the stores bench; docs/benchmarks.md).
const SESSION: &str = "SET synchronous_commit = on; SET tcp_keepalives_idle = 10; \
     SET tcp_keepalives_interval = 5; SET tcp_keepalives_count = 3; \
     SELECT set_config('backend_flush_after', '256kB', false) \
     WHERE current_setting('backend_flush_after') = '0';";

/// The statement a pooled connection bounds its lock waits with.
fn lock_timeout(wait: Duration) -> String {
    format!("SET lock_timeout = {}", wait.as_millis().max(1))
}

/// How the pool behaves; [`PgOptions::default`] suits one gateway replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgOptions {
    /// Connections the pool holds at most.
    pub max_connections: usize,
    /// How long an operation waits for a free connection before it fails (a dry pool answers an
    /// error after this, never hangs).
    pub wait: Duration,
    /// How long opening one connection may take (unreachable servers fail after this).
    pub connect_timeout: Duration,
    /// How long a statement waits for a row or lock another session holds before the operation
    /// fails as busy ([`StoreError::Busy`], AB-9010), so a lock held without end (a replica's
    /// host gone mid-transaction) never holds publishes without end.
    pub lock_wait: Duration,
}

impl Default for PgOptions {
    fn default() -> PgOptions {
        PgOptions {
            max_connections: 16,
            wait: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
            lock_wait: Duration::from_secs(10),
        }
    }
}

/// The PostgreSQL store; cheap to clone.
#[derive(Clone)]
pub struct PgStore {
    pool: Pool,
    wait: Duration,
    /// How to open the connection signals are listened on (outside the pool: it is held).
    config: std::sync::Arc<tokio_postgres::Config>,
    /// This process's name in the signals it sends, so it skips its own.
    replica: String,
    /// Where publishes queue for the group commit (`batch`).
    batcher: batch::Batcher,
    /// Where signals queue for the task that sends them, merged (`listen`).
    signals: tokio::sync::mpsc::UnboundedSender<crate::Signal>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore").finish_non_exhaustive()
    }
}

/// How long a connection may stay silent before TCP asks whether the server is still there
/// (`keepalives_idle`), unless the URL says otherwise; then [`KEEPALIVE_PROBES`]. A dead server
/// is noticed on an idle connection within about 25 s.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(10);
/// The interval between keepalive probes, and the count of them (`keepalives_interval`,
/// `keepalives_retries`).
const KEEPALIVE_PROBES: (Duration, u32) = (Duration::from_secs(5), 3);
/// How long data sent may stay unacknowledged before the connection is given up
/// (`tcp_user_timeout`), unless the URL says otherwise.
const UNACKED: Duration = Duration::from_secs(30);

/// The settings every connection is opened with: `url`'s, and where it is silent, the timeouts
/// that notice a server gone without a word (a host down, a partition). Without them the
/// listening connection waited for notifications on a dead socket for the kernel's default two
/// hours, and a statement sent on one waited ~15 minutes of retransmissions.
fn connection_config(url: &str, opts: &PgOptions) -> StoreResult<tokio_postgres::Config> {
    let mut config = tokio_postgres::Config::from_str(url)
        .map_err(|e| StoreError::Backend(format!("the PostgreSQL URL is malformed: {e}")))?;
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(opts.connect_timeout);
    }
    if config.get_application_name().is_none() {
        config.application_name("agentbus");
    }
    // tokio-postgres reports no "unset" for these; its defaults are the kernel's (2 h idle).
    let defaults = tokio_postgres::Config::new();
    if config.get_keepalives_idle() == defaults.get_keepalives_idle() {
        config.keepalives_idle(KEEPALIVE_IDLE);
    }
    if config.get_keepalives_interval() == defaults.get_keepalives_interval() {
        config.keepalives_interval(KEEPALIVE_PROBES.0);
    }
    if config.get_keepalives_retries() == defaults.get_keepalives_retries() {
        config.keepalives_retries(KEEPALIVE_PROBES.1);
    }
    if config.get_tcp_user_timeout().is_none() {
        config.tcp_user_timeout(UNACKED);
    }
    Ok(config)
}

impl PgStore {
    /// Connects to the database at `url` (`postgres://user:password@host:port/db`), checks
    /// durability, and applies the migrations it lacks; refuses a schema newer than this build.
    pub async fn open(url: &str) -> StoreResult<PgStore> {
        PgStore::open_with(url, PgOptions::default()).await
    }

    /// [`PgStore::open`] with pool options.
    pub async fn open_with(url: &str, opts: PgOptions) -> StoreResult<PgStore> {
        let config = connection_config(url, &opts)?;
        let lock_wait = opts.lock_wait;
        let manager = Manager::from_config(
            config.clone(),
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(opts.max_connections.max(1))
            .wait_timeout(Some(opts.wait))
            .create_timeout(Some(opts.connect_timeout))
            .recycle_timeout(Some(opts.connect_timeout))
            .runtime(Runtime::Tokio1)
            // Whatever the role's or the server's default, every connection commits durably
            // unless an operation says otherwise for its own transaction (leases, acks). Prepared
            // statements may run on their cached generic plans: each statement on the publish
            // and delivery paths is written so that its generic plan reads by index
            // (`postgres/plans.rs`), so the lease is not planned again on every call.
            .post_create(Hook::async_fn(move |client, _| {
                Box::pin(async move {
                    client
                        .batch_execute(&format!("{SESSION} {}", lock_timeout(lock_wait)))
                        .await
                        .map_err(HookError::Backend)
                })
            }))
            .build()
            .map_err(|e| StoreError::Backend(format!("the PostgreSQL pool: {e}")))?;
        let replica = replica_name();
        let store = PgStore {
            batcher: batch::Batcher::start(pool.clone(), opts.wait),
            signals: listen::start_sender(pool.clone(), replica.clone()),
            pool,
            wait: opts.wait,
            config: std::sync::Arc::new(config),
            replica,
        };
        let mut client = store.client().await?;
        let fsync = show(&client, "fsync").await?;
        let sync = show(&client, "synchronous_commit").await?;
        if fsync != "on" || sync != "on" {
            return Err(StoreError::Backend(format!(
                "durability check failed: fsync={fsync}, synchronous_commit={sync}; need both on"
            )));
        }
        schema::migrate(&mut client, &lock_timeout(lock_wait)).await?;
        Ok(store)
    }

    /// A pooled connection, or an error once the pool's wait ran out.
    pub(crate) async fn client(&self) -> StoreResult<deadpool_postgres::Client> {
        self.pool.get().await.map_err(|e| pool_error(e, self.wait))
    }

    /// The durability settings in force on a pooled connection: (`fsync`, `synchronous_commit`).
    pub async fn durability(&self) -> StoreResult<(String, String)> {
        let client = self.client().await?;
        Ok((
            show(&client, "fsync").await?,
            show(&client, "synchronous_commit").await?,
        ))
    }

    /// A setting's value as a pooled connection sees it (`SHOW name`).
    pub async fn setting(&self, name: &str) -> StoreResult<String> {
        if !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
        {
            return Err(StoreError::NotFound);
        }
        show(&self.client().await?, name).await
    }

    /// Connections the pool holds now, and how many of them are idle.
    pub fn pool_status(&self) -> (usize, usize) {
        let s = self.pool.status();
        (s.size, s.available)
    }
}

/// A name for this store among the replicas: random (the standard library's per-process hash
/// keys come from the OS's entropy), so two processes never share one.
fn replica_name() -> String {
    use std::hash::{BuildHasher as _, Hasher as _};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    format!("{:016x}", h.finish())
}

async fn show(client: &deadpool_postgres::Client, setting: &str) -> StoreResult<String> {
    let row = client.query_one(&format!("SHOW {setting}"), &[]).await?;
    Ok(row.try_get(0)?)
}

pub(super) fn pool_error(e: deadpool_postgres::PoolError, wait: Duration) -> StoreError {
    use deadpool_postgres::PoolError;
    match e {
        PoolError::Timeout(deadpool_postgres::TimeoutType::Wait) => StoreError::Busy(format!(
            "no PostgreSQL connection became free within {} ms (every pooled connection is busy)",
            wait.as_millis()
        )),
        PoolError::Timeout(_) => {
            StoreError::Backend("PostgreSQL did not answer in time (connect or check)".into())
        }
        PoolError::Backend(e) => StoreError::from(e),
        other => StoreError::Backend(format!("the PostgreSQL pool: {other}")),
    }
}

impl From<tokio_postgres::Error> for StoreError {
    fn from(e: tokio_postgres::Error) -> StoreError {
        // The server's own message says more than the client's summary ("db error").
        match e.as_db_error() {
            // `lock_timeout` ran out: another session held a row this needs; the transaction
            // rolled back, and a retry may find the row free.
            Some(db) if db.code() == &tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE => {
                StoreError::Busy(format!(
                    "a row this needs stayed locked by another session: {} (55P03)",
                    db.message()
                ))
            }
            // Text with a NUL character, which PostgreSQL cannot hold: no stored row has it,
            // so a lookup by it finds nothing, as on SQLite (the gateway checks what it stores).
            Some(db)
                if db.code() == &tokio_postgres::error::SqlState::CHARACTER_NOT_IN_REPERTOIRE =>
            {
                StoreError::NotFound
            }
            Some(db) => StoreError::Backend(format!(
                "PostgreSQL: {} ({})",
                db.message(),
                db.code().code()
            )),
            None => StoreError::Backend(format!("PostgreSQL: {e}")),
        }
    }
}

impl PgStore {
    /// Every stored row of every table, one line each (`table: row`), sorted: the same use as
    /// [`crate::SqliteStore::dump`] (the line format differs between backends).
    pub async fn dump(&self) -> StoreResult<Vec<String>> {
        let client = self.client().await?;
        let tables = client
            .query(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() ORDER BY 1",
                &[],
            )
            .await?;
        let mut lines = Vec::new();
        for t in tables {
            let name: String = t.try_get(0)?;
            // Names come from the catalogue, quoted as identifiers.
            let sql = format!("SELECT t::text FROM \"{}\" t", name.replace('"', "\"\""));
            for row in client.query(&sql, &[]).await? {
                let text: String = row.try_get(0)?;
                lines.push(format!("{name}: {text}"));
            }
        }
        lines.sort();
        Ok(lines)
    }

    /// Checks that `url` is a PostgreSQL URL this store can use, without connecting: what a
    /// setting's parser calls so a malformed `--store` is refused before anything starts.
    pub fn check_url(url: &str) -> Result<(), String> {
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            return Err("expected a postgres:// URL".into());
        }
        tokio_postgres::Config::from_str(url)
            .map(|_| ())
            .map_err(|e| format!("malformed PostgreSQL URL: {e}"))
    }
}

/// Why [`PgStore::open`] failed, for a person starting a gateway: a line of cause, a fix, and
/// whether the server was unreachable (a start may succeed later) or refused us (it will not).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenFailure {
    /// What went wrong.
    pub cause: String,
    /// What to do about it.
    pub fix: String,
    /// The server could not be reached (refused, timed out, name unknown).
    pub unreachable: bool,
}

/// Explains an error of [`PgStore::open`] (the SQLSTATE codes PostgreSQL answers, and this
/// module's own refusals).
pub fn open_failure(e: &StoreError) -> OpenFailure {
    let cause = e.to_string().lines().next().unwrap_or_default().to_owned();
    let has = |s: &str| cause.contains(s);
    let (fix, unreachable) = if has("(28P01)") || has("(28000)") {
        (
            "check the user and password in --store (AGENTBUS_STORE), and pg_hba.conf's rule for this host",
            false,
        )
    } else if has("(3D000)") {
        (
            "create the database first (createdb -O USER NAME), or name an existing one in --store",
            false,
        )
    } else if has("newer than this build knows") {
        (
            "run the agentbus release that migrated this database, or a newer one",
            false,
        )
    } else if has("durability check failed") {
        (
            "set fsync = on and synchronous_commit = on for this database (postgresql.conf or ALTER DATABASE … SET)",
            false,
        )
    } else if has("malformed") {
        (
            "write a URL such as postgres://agentbus:PASSWORD@db.example.com:5432/agentbus",
            false,
        )
    } else if matches!(e, StoreError::Backend(_))
        && (has("connect") || has("did not answer") || has("timed out"))
    {
        (
            "check that PostgreSQL runs at the host and port of --store and accepts TCP connections from this machine",
            true,
        )
    } else {
        (
            "check the database named by --store (AGENTBUS_STORE) and the gateway log",
            false,
        )
    };
    OpenFailure {
        cause,
        fix: fix.to_owned(),
        unreachable,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each start-up failure is told apart by PostgreSQL's SQLSTATE or by this module's own
    /// refusal, and only an unreachable server is worth waiting for.
    #[test]
    fn open_failures_are_told_apart() {
        let f = |m: &str| open_failure(&StoreError::Backend(m.into()));
        let wrong = f("PostgreSQL: password authentication failed for user \"agentbus\" (28P01)");
        assert!(wrong.fix.contains("user and password") && !wrong.unreachable);
        let lax = f("durability check failed: fsync=off, synchronous_commit=on; need both on");
        assert!(lax.fix.contains("fsync = on") && !lax.unreachable);
        let gone = f("PostgreSQL: error connecting to server: Connection refused (os error 111)");
        assert!(gone.unreachable, "{gone:?}");
        let missing = f("PostgreSQL: database \"x\" does not exist (3D000)");
        assert!(missing.fix.contains("create the database") && !missing.unreachable);
    }

    /// A server that vanished without closing its connections (a host down, a partition) is
    /// noticed by TCP: the listening connection is made again and a pooled one fails, instead
    /// of both waiting for hours. A URL's own settings stand.
    #[test]
    fn connections_notice_a_silent_server() {
        let opts = PgOptions::default();
        let c = connection_config("postgres://u@localhost/db", &opts).unwrap();
        assert!(c.get_keepalives());
        assert_eq!(c.get_keepalives_idle(), KEEPALIVE_IDLE);
        assert_eq!(c.get_keepalives_interval(), Some(KEEPALIVE_PROBES.0));
        assert_eq!(c.get_keepalives_retries(), Some(KEEPALIVE_PROBES.1));
        assert_eq!(c.get_tcp_user_timeout(), Some(&UNACKED));
        let own = connection_config(
            "postgres://u@localhost/db?keepalives_idle=60&tcp_user_timeout=90",
            &opts,
        )
        .unwrap();
        assert_eq!(own.get_keepalives_idle(), Duration::from_secs(60));
        assert_eq!(own.get_tcp_user_timeout(), Some(&Duration::from_secs(90)));
    }
}
