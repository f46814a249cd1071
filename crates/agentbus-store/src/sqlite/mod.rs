//! The embedded SQLite backend.
//!
//! Durability: WAL journal with `synchronous=FULL`, checked when the store opens (a 202 receipt
//! means the envelope is on disk). One writer thread owns the only write connection and commits in
//! groups: it takes every job waiting in its queue, runs each (inside its own savepoint, unless it
//! can only fail on I/O errors, when its failure fails the group), and commits them with one fsync,
//! so throughput does not pay one fsync per publish. Each job answers only after the commit
//! succeeded. Reads use a small pool of read-only connections, which WAL lets run
//! beside the writer. Checkpoints (copying the WAL into the database file) run on a thread and
//! connection of their own, a slice of the log at a time, each slice flushed as it is copied, so
//! no commit waits behind one, nor behind one large flush of the database file.

mod console;
mod ops;
mod receipts;
mod schema;

pub use schema::current_version;

use std::cell::Cell;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use rusqlite::hooks::Wal;
use rusqlite::{Connection, OpenFlags, Transaction, TransactionBehavior};
use tokio::sync::oneshot;

use crate::{StoreError, StoreResult};

/// The most jobs committed in one transaction.
const MAX_GROUP: usize = 1024;
/// Read connections.
const READERS: usize = 4;
/// WAL frames (pages) past which the writer sees to it that the log starts again, copying the
/// tail a pass left itself (its commits waiting meanwhile): ~32 MiB rather than SQLite's 4 MiB, so
/// once per 32 MiB of log. A pass that catches up in a lull starts it again sooner. Hot pages are
/// copied once per slice ([`SLICE_FRAMES`]) rather than once per interval; that cost measured as
/// no loss of throughput.
const CHECKPOINT_FRAMES: i32 = 8192;
/// WAL frames (~4 MiB) after which the checkpointing thread copies what is new and flushes it to
/// the disk, well before the log is due to start again. One flush of a whole interval's pages
/// (scattered 4 KiB writes) kept the disk busy for tens of milliseconds, and every WAL fsync of
/// the writer, so every publish waiting for its commit, queued behind it. A quarter of this
/// (flushing several times as often) cost throughput and gained nothing more.
const SLICE_FRAMES: i32 = 1024;

/// How the writer and the checkpointing thread share the work of keeping the WAL short.
///
/// A background pass cannot by itself let the log start again: SQLite restarts the WAL only when
/// every frame in it has been copied, and a writer that keeps committing appends frames while the
/// pass runs, so under steady load the log grew without end (327 MB in 10 s at 1,000 msg/s, every
/// commit an append). So the background pass copies the bulk, and the writer copies what the pass
/// left (a few hundred frames) itself, between two groups, after which its next commit restarts
/// the log.
#[derive(Debug)]
struct Checkpointing {
    /// WAL frames past which a checkpoint is due (see [`CHECKPOINT_FRAMES`]).
    every: i32,
    /// WAL frames between two background passes below that (see [`SLICE_FRAMES`]).
    slice: i32,
    /// How many of the WAL's frames were copied when the last background pass ended, or -1 when
    /// no pass ended since the writer last looked.
    copied: AtomicI64,
    /// Checkpoints completed, by either thread.
    done: AtomicU64,
    /// Background passes whose copy the checkpointing thread flushed to the disk itself.
    flushed: AtomicU64,
}

/// The writer's count of the log, for [`Checkpointing::after_commit`].
#[derive(Debug, Default)]
struct Seen {
    /// The log's length after the last commit.
    last: i32,
    /// The log's length when the writer last asked for a pass.
    asked: i32,
}

/// What the writer does about the WAL after a commit.
#[derive(Debug, PartialEq)]
enum Checkpoint {
    /// Nothing: the log is shorter than the interval, and grew by less than a slice since the
    /// writer last asked for a pass.
    NotDue,
    /// Ask the checkpointing thread for a pass.
    Pass,
    /// Copy what is left itself; `wait`: past the bound, so until a running pass lets it.
    Here { wait: bool },
}

impl Checkpointing {
    /// A checkpoint due every `every` frames, in slices of [`SLICE_FRAMES`] or fewer.
    fn new(every: i32) -> Checkpointing {
        Checkpointing {
            every,
            slice: SLICE_FRAMES.min(every),
            copied: AtomicI64::new(-1),
            done: AtomicU64::new(0),
            flushed: AtomicU64::new(0),
        }
    }

    /// After a commit that left `frames` in the WAL, what the writer should do; `seen` is the
    /// writer's own count of the log, updated here.
    fn after_commit(&self, frames: i32, seen: &mut Seen) -> Checkpoint {
        // Taken on every commit: a pass that ended before the log restarted counted frames of
        // the old log, and must not pass for a short tail of the new one.
        let copied = self.copied.swap(-1, Ordering::Relaxed);
        // Within one log its length only grows, so a shorter one started again. (A new log
        // whose first commit is longer than the whole old one goes unseen: its first slice is
        // then late by at most the old log's length when a pass was last asked for.) A pass
        // that copied the whole log is no sign: readers can keep the log from starting again,
        // and counting from zero then asked for a pass, and a sync, on every commit.
        if frames < seen.last {
            seen.asked = 0;
        }
        seen.last = frames;
        if frames < self.every {
            if frames - seen.asked < self.slice {
                return Checkpoint::NotDue;
            }
            seen.asked = frames;
            return Checkpoint::Pass;
        }
        // Past four intervals the writer copies whatever is left, so the log stays bounded however
        // fast frames arrive; before that, only a short tail a pass left.
        let past_bound = frames >= self.every.saturating_mul(4);
        if past_bound || (copied >= 0 && i64::from(frames) - copied <= i64::from(self.every / 32)) {
            Checkpoint::Here { wait: past_bound }
        } else {
            Checkpoint::Pass
        }
    }
}

thread_local! {
    /// The frames in the WAL after the last commit on this thread's connection, as SQLite's WAL
    /// hook reports them. Only the writer thread commits, so only its value is ever set.
    static WAL_FRAMES: Cell<i32> = const { Cell::new(0) };
}

/// The writer connection's WAL hook (a plain `fn`, so its state is the thread-local above).
fn note_wal_frames(_: &Wal, frames: std::ffi::c_int) -> rusqlite::Result<()> {
    WAL_FRAMES.set(frames);
    Ok(())
}

/// A job: run inside the group's transaction (or told, with `None`, that the group could not
/// start); answers whether it failed in a way that must fail the whole group, and what to call
/// with the group's outcome.
type JobFn =
    Box<dyn FnOnce(Option<&Transaction<'_>>) -> (bool, Box<dyn FnOnce(bool) + Send>) + Send>;

/// A unit of work for the writer, and whether its commit must reach the disk before it answers.
struct Job {
    run: JobFn,
    durable: bool,
}

/// The SQLite store; cheap to clone.
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore").finish_non_exhaustive()
    }
}

struct Inner {
    jobs: Mutex<Option<mpsc::Sender<Job>>>,
    readers: Vec<Mutex<Connection>>,
    next_reader: std::sync::atomic::AtomicUsize,
    writer: Mutex<Option<std::thread::JoinHandle<()>>>,
    checkpointer: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// The checkpoints' shared state.
    checkpointing: Arc<Checkpointing>,
    /// Per agent, inbox entries handed out by a lease whose write is still queued, so a read
    /// before that write lands does not hand them out again.
    pub(crate) leasing: Mutex<HashMap<String, Leasing>>,
    /// The database file, which the checkpointing thread flushes. Closing any descriptor of a
    /// file drops every POSIX lock this process holds on it, SQLite's included
    /// (sqlite.org/howtocorrupt.html, 2.2): so it is held here, the last field, and by the
    /// writer and checkpointing threads until their connections are closed, and closed only
    /// after every connection, whichever ends last.
    _db_file: Arc<std::fs::File>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Closing the queue lets the writer finish what it holds and exit.
        if let Ok(mut jobs) = self.jobs.lock() {
            jobs.take();
        }
        // The last handle can go on the writer thread itself (a job's answer that held one): it
        // cannot join itself, and the checkpointer ends only after it, so both end on their own.
        let here = std::thread::current().id();
        if let Ok(w) = self.writer.lock()
            && w.as_ref().is_some_and(|h| h.thread().id() == here)
        {
            return;
        }
        // The writer holds the checkpointer's queue: it ends once the writer has.
        for thread in [&self.writer, &self.checkpointer] {
            if let Ok(mut w) = thread.lock()
                && let Some(handle) = w.take()
            {
                let _ = handle.join();
            }
        }
    }
}

fn configure(conn: &Connection) -> rusqlite::Result<()> {
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    conn.set_prepared_statement_cache_capacity(128);
    // Plans that never depend on bound values. Without this SQLite reads a bound `LIMIT ?` while
    // planning and marks the statement stale whenever that parameter is bound again, so every
    // lease query was parsed and planned anew on each run (much of a lease read's time).
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
        true,
    )?;
    // A larger page cache: the writer's stays warm between its commits (a reader's is emptied
    // whenever the database changed since its last read).
    conn.pragma_update(None, "cache_size", -32_768)?;
    // No memory-mapped reads: a read transaction that finds the database changed since its last
    // one unmaps the whole file (SQLite's `pagerBeginReadTransaction`), and under steady publishes
    // that is almost every read. Each unmap stopped the other cores for a TLB shootdown, and a
    // lease's read was slower mapped than through read() (docs/benchmarks.md).
    conn.pragma_update(None, "mmap_size", 0)?;
    // Each job's savepoint journals the pages it changes; in memory that costs no write() calls.
    conn.pragma_update(None, "temp_store", "MEMORY")?;
    conn.create_scalar_function(
        "agentbus_search_match",
        2,
        rusqlite::functions::FunctionFlags::SQLITE_UTF8
            | rusqlite::functions::FunctionFlags::SQLITE_DETERMINISTIC
            | rusqlite::functions::FunctionFlags::SQLITE_INNOCUOUS,
        |ctx| {
            let text = |i| {
                ctx.get_raw(i)
                    .as_str()
                    .map_err(|e| rusqlite::Error::UserFunctionError(e.into()))
            };
            Ok(search_match(text(0)?, text(1)?))
        },
    )?;
    Ok(())
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path`, migrates it, and checks durability:
    /// the journal must be WAL and `synchronous` FULL, or opening fails.
    pub fn open(path: &Path) -> StoreResult<SqliteStore> {
        SqliteStore::open_checkpointing_every(path, CHECKPOINT_FRAMES)
    }

    /// [`SqliteStore::open`] with a checkpoint due every `every` WAL frames (tests use a small
    /// interval).
    fn open_checkpointing_every(path: &Path, every: i32) -> StoreResult<SqliteStore> {
        let mut writer = Connection::open(path)?;
        configure(&writer)?;
        let mode: String =
            writer.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))?;
        writer.pragma_update(None, "synchronous", "FULL")?;
        let sync: i64 = writer.pragma_query_value(None, "synchronous", |r| r.get(0))?;
        // synchronous: 0 OFF, 1 NORMAL, 2 FULL, 3 EXTRA.
        if !mode.eq_ignore_ascii_case("wal") || sync < 2 {
            return Err(StoreError::Backend(format!(
                "durability check failed: journal_mode={mode}, synchronous={sync}; need WAL and FULL"
            )));
        }
        writer.pragma_update(None, "journal_size_limit", 67_108_864)?;
        schema::migrate(&mut writer)?;
        // Replaces SQLite's automatic checkpoint, which ran on the committing connection: the
        // writer thread stalled for each one, and so did every publish
        // waiting for its group commit. The hook only counts; `checkpointer_loop` copies.
        writer.wal_hook(Some(note_wal_frames));
        let checkpointing = Connection::open(path)?;
        configure(&checkpointing)?;
        checkpointing.pragma_update(None, "synchronous", "FULL")?;
        checkpointing.pragma_update(None, "journal_size_limit", 67_108_864)?;
        let mut readers = Vec::new();
        for _ in 0..READERS {
            let r = Connection::open_with_flags(
                path,
                OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )?;
            configure(&r)?;
            readers.push(Mutex::new(r));
        }
        let shared = Arc::new(Checkpointing::new(every));
        // One pending request is enough: a checkpoint copies every frame committed before it.
        let (due, due_rx) = mpsc::sync_channel::<()>(1);
        let for_pass = shared.clone();
        let db_file = Arc::new(std::fs::File::open(path).map_err(|e| {
            StoreError::Backend(format!("opening {} to flush it: {e}", path.display()))
        })?);
        let to_flush = db_file.clone();
        let checkpointer = std::thread::Builder::new()
            .name("agentbus-sqlite-checkpoint".into())
            .spawn(move || checkpointer_loop(checkpointing, &to_flush, due_rx, &for_pass))
            .map_err(|e| StoreError::Backend(e.to_string()))?;
        let (tx, rx) = mpsc::channel::<Job>();
        let for_writer = shared.clone();
        let for_writer_file = db_file.clone();
        let handle = std::thread::Builder::new()
            .name("agentbus-sqlite-writer".into())
            .spawn(move || {
                writer_loop(writer, rx, due, &for_writer);
                // After the writer's connection: see `Inner::_db_file`.
                drop(for_writer_file);
            })
            .map_err(|e| StoreError::Backend(e.to_string()))?;
        Ok(SqliteStore {
            inner: Arc::new(Inner {
                jobs: Mutex::new(Some(tx)),
                readers,
                next_reader: Default::default(),
                writer: Mutex::new(Some(handle)),
                checkpointer: Mutex::new(Some(checkpointer)),
                checkpointing: shared,
                leasing: Mutex::default(),
                _db_file: db_file,
            }),
        })
    }

    /// Checkpoints completed since the store opened (background passes and the writer's tails).
    pub fn checkpoints(&self) -> u64 {
        self.inner.checkpointing.done.load(Ordering::Relaxed)
    }

    /// The durability settings in force: (journal mode, synchronous level).
    pub async fn durability(&self) -> StoreResult<(String, i64)> {
        self.read(|c| {
            let mode: String = c.pragma_query_value(None, "journal_mode", |r| r.get(0))?;
            let sync: i64 = c.pragma_query_value(None, "synchronous", |r| r.get(0))?;
            Ok((mode, sync))
        })
        .await
    }

    /// Every stored row of every table, one line each (`table: value | value …`), sorted: what
    /// tests compare to prove that a refused request changed nothing stored.
    pub async fn dump(&self) -> StoreResult<Vec<String>> {
        self.read(|c| {
            let tables: Vec<String> = c
                .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")?
                .query_map([], |r| r.get(0))?
                .collect::<Result<_, _>>()?;
            let mut lines = Vec::new();
            for t in tables {
                let mut stmt = c.prepare(&format!("SELECT * FROM \"{t}\""))?;
                let n = stmt.column_count();
                let mut rows = stmt.query([])?;
                while let Some(row) = rows.next()? {
                    let mut line = format!("{t}:");
                    for i in 0..n {
                        line.push_str(&format!(" {:?} |", row.get_ref(i)?));
                    }
                    lines.push(line);
                }
            }
            lines.sort();
            Ok(lines)
        })
        .await
    }

    /// Runs `f` on the writer thread inside a savepoint; answers after the group's durable commit.
    pub(crate) async fn write<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Transaction<'_>) -> StoreResult<T> + Send + 'static,
    {
        self.queue_and_wait(true, true, f).await
    }

    /// Queues `f` and waits for its answer (see [`SqliteStore::queue`]).
    async fn queue_and_wait<T, F>(&self, durable: bool, isolated: bool, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Transaction<'_>) -> StoreResult<T> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel::<StoreResult<T>>();
        self.queue(durable, isolated, f, move |answer| {
            let _ = tx.send(answer);
        })?;
        rx.await.map_err(|_| closed())?
    }

    /// Like [`SqliteStore::write`], without a savepoint of its own: an error fails the whole group
    /// it commits with. For hot jobs that cannot fail halfway except on I/O errors (a plain
    /// publish, acks, leases): each savepoint journals every page its job changes, which showed in
    /// profiles. Not `durable`: a group made only of such jobs commits without an fsync
    /// (`synchronous=NORMAL`), for acks and leases, whose loss in a power cut only causes a
    /// redelivery, which at-least-once delivery allows. Publishes always wait for the fsync.
    pub(crate) async fn write_shared<T, F>(&self, durable: bool, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Transaction<'_>) -> StoreResult<T> + Send + 'static,
    {
        self.queue_and_wait(durable, false, f).await
    }

    /// Queues `f` for the writer now, before the caller awaits anything, and calls `then` with its
    /// answer once its group committed (or failed). Jobs run in the order they were queued, so a
    /// write queued after this one sees its effect.
    /// `isolated` jobs run in their own savepoint, so their error undoes only them; others fail
    /// their whole group on error (see [`SqliteStore::write_shared`]).
    pub(crate) fn queue<T, F, A>(
        &self,
        durable: bool,
        isolated: bool,
        f: F,
        then: A,
    ) -> StoreResult<()>
    where
        T: Send + 'static,
        F: FnOnce(&Transaction<'_>) -> StoreResult<T> + Send + 'static,
        A: FnOnce(StoreResult<T>) + Send + 'static,
    {
        let run: JobFn = Box::new(move |t: Option<&Transaction<'_>>| {
            let result = match t {
                Some(t) if isolated => run_in_savepoint(t, f),
                Some(t) => f(t),
                None => Err(StoreError::Backend("the write could not start".into())),
            };
            let poison = !isolated && t.is_some() && result.is_err();
            let done = Box::new(move |committed: bool| {
                then(match (result, committed) {
                    (Ok(v), true) => Ok(v),
                    (Ok(_), false) => Err(StoreError::Backend("commit failed".into())),
                    (Err(e), _) => Err(e),
                });
            });
            (poison, done as Box<dyn FnOnce(bool) + Send>)
        });
        let jobs = self.inner.jobs.lock().map_err(|_| closed())?;
        jobs.as_ref()
            .ok_or_else(closed)?
            .send(Job { run, durable })
            .map_err(|_| closed())
    }

    /// Runs `f` on a read connection on the calling thread. Only for short indexed reads on a hot
    /// path (leases): it blocks the async worker for the read's duration, and saves the thread
    /// hand-off of [`SqliteStore::read`].
    pub(crate) fn read_inline<T>(
        &self,
        f: impl FnOnce(&Connection) -> StoreResult<T>,
    ) -> StoreResult<T> {
        let i = self
            .inner
            .next_reader
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            % self.inner.readers.len();
        let conn = self.inner.readers[i].lock().map_err(|_| closed())?;
        f(&conn)
    }

    /// [`SqliteStore::read`] once every write queued before this call has landed: a lease is
    /// queued without waiting (see `lease`), so a read of delivery states right after a poll
    /// answered would otherwise still see the entry unleased.
    pub(crate) async fn read_after_writes<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> StoreResult<T> + Send + 'static,
    {
        self.write_shared(false, |_| Ok(())).await?;
        self.read(f).await
    }

    /// Runs `f` on a read connection. Reads are short indexed lookups that WAL never blocks, so on
    /// a multi-threaded runtime they run in place (`block_in_place`), saving a thread hand-off per
    /// read; elsewhere they go to the blocking pool.
    pub(crate) async fn read<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> StoreResult<T> + Send + 'static,
    {
        let inner = self.inner.clone();
        let run = move || {
            let i = inner
                .next_reader
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                % inner.readers.len();
            let conn = inner.readers[i].lock().map_err(|_| closed())?;
            f(&conn)
        };
        let multi = tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        if multi {
            tokio::task::block_in_place(run)
        } else {
            tokio::task::spawn_blocking(run)
                .await
                .map_err(|e| StoreError::Backend(e.to_string()))?
        }
    }
}

/// One agent's leases in flight (see [`Inner::leasing`]).
#[derive(Default)]
pub(crate) struct Leasing {
    /// Sequences whose lease write has not landed yet.
    pub(crate) busy: HashSet<u64>,
    /// Sequences whose lease write landed, with the generation it landed in: a read that began
    /// before that generation may have seen them unleased. Cleared when no read is running.
    pub(crate) landed: HashMap<u64, u64>,
    /// Incremented each time a lease write lands.
    pub(crate) generation: u64,
    /// Lease reads of this inbox running now.
    pub(crate) reading: usize,
    /// Notified each time a lease write lands.
    pub(crate) notify: Arc<tokio::sync::Notify>,
}

/// Pending index rows at which the writer merges even with jobs waiting: a query reads them
/// without an index.
const MERGE_BUSY: usize = 4096;
/// Pending index rows below which an idle writer leaves them: queries scan them cheaply, and a
/// merge of a few makes a small FTS5 segment that only costs merges later.
const MERGE_IDLE: usize = 256;

thread_local! {
    /// Index rows written to `search_pending` since the writer's last merge (at most: a job that
    /// rolled back counted its row).
    static SEARCH_PENDING: Cell<usize> = const { Cell::new(0) };
}

/// Counts an index row written to `search_pending` by the writer's current job.
pub(crate) fn search_row_pending() {
    SEARCH_PENDING.with(|p| p.set(p.get() + 1));
}

/// Moves every pending index row into the FTS5 index, in one transaction, so a query finds each
/// row in exactly one of the two. A publish writes its row to the plain table: FTS5 costs per
/// insert what it costs to flush a segment and merge it, which on the writer's path cost a
/// publish several times what its other statements do, and a large batch costs FTS5 a fraction
/// of that per row. PostgreSQL's GIN index keeps such a pending list the same way. All at once
/// because a `DELETE` of a whole table frees its pages without rewriting each. Answers how many
/// rows moved.
fn merge_search_pending(conn: &mut Connection) -> rusqlite::Result<usize> {
    let t = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let moved = t
        .prepare_cached(
            "INSERT INTO search_terms (rowid, tags) SELECT seq, tags FROM search_pending ORDER BY seq",
        )?
        .execute([])?;
    t.prepare_cached("DELETE FROM search_pending")?
        .execute([])?;
    t.commit()?;
    Ok(moved)
}

/// Whether `tags` (a pending row's index words, space-separated) holds a word of every group of
/// `query` (groups separated by newlines, a group's words by tabs): the SQL function
/// `agentbus_search_match`, with which a query reads the rows not merged yet.
pub(crate) fn search_match(tags: &str, query: &str) -> bool {
    query
        .split('\n')
        .all(|group| group.split('\t').any(|w| tags.split(' ').any(|t| t == w)))
}

fn closed() -> StoreError {
    StoreError::Backend("the store is closed".into())
}

fn run_in_savepoint<T>(
    t: &Transaction<'_>,
    f: impl FnOnce(&Transaction<'_>) -> StoreResult<T>,
) -> StoreResult<T> {
    // Cached statements: every job runs these, and parsing them each time showed in profiles.
    t.prepare_cached("SAVEPOINT job")?.execute([])?;
    match f(t) {
        Ok(v) => {
            t.prepare_cached("RELEASE job")?.execute([])?;
            Ok(v)
        }
        Err(e) => {
            // Undo this job only; the rest of the group commits.
            t.prepare_cached("ROLLBACK TO job")?.execute([])?;
            t.prepare_cached("RELEASE job")?.execute([])?;
            Err(e)
        }
    }
}

/// Copies the WAL into the database each time the writer asks (every slice of log, and on each
/// commit past the interval), flushes what it copied, and tells the writer how far it got
/// ([`Checkpointing`]). PASSIVE: it never blocks the writer or a reader, and copies what no open
/// read still needs. Runs until the writer drops its end of `due`.
fn checkpointer_loop(
    conn: Connection,
    db: &std::fs::File,
    due: mpsc::Receiver<()>,
    shared: &Checkpointing,
) {
    // How much of the log the last flush covered: a pass that copied nothing more (a reader
    // holds the rest) has nothing to flush, and a sync per commit would hold the writer's.
    let mut flushed_at = -1;
    while due.recv().is_ok() {
        // A failed pass (say, a disk error) leaves the frames in the WAL, which stays the
        // durable copy; the next request tries again.
        if let Ok((log, copied)) = passive_checkpoint(&conn)
            && copied >= 0
        {
            // A pass that copied the whole log had SQLite sync the database file itself.
            if copied < log && copied != flushed_at && db.sync_data().is_ok() {
                flushed_at = copied;
                // What the pass wrote is only in the page cache; flushed now, slice by slice,
                // it never reaches the disk as one burst. (A failure here is reported to
                // SQLite's own descriptor too, at its next sync.)
                shared.flushed.fetch_add(1, Ordering::Relaxed);
            }
            shared.copied.store(copied, Ordering::Relaxed);
            shared.done.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A PASSIVE checkpoint on `conn`: the WAL's frames, and how many of them are copied into the
/// database (all of them, once the log is fully copied).
fn passive_checkpoint(conn: &Connection) -> rusqlite::Result<(i64, i64)> {
    conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
        Ok((r.get(1)?, r.get(2)?))
    })
}

fn writer_loop(
    mut conn: Connection,
    rx: mpsc::Receiver<Job>,
    checkpoint: mpsc::SyncSender<()>,
    shared: &Checkpointing,
) {
    let mut full = true;
    let mut seen = Seen::default();
    // Rows a previous process left pending are merged like any others.
    let left: i64 = conn
        .query_row("SELECT count(*) FROM search_pending", [], |r| r.get(0))
        .unwrap_or(0);
    SEARCH_PENDING.with(|p| p.set(usize::try_from(left).unwrap_or(0)));
    // A job taken while looking whether the queue was empty, run first.
    let mut next = None;
    loop {
        let first = match next.take() {
            Some(job) => job,
            None => match rx.recv() {
                Ok(job) => job,
                Err(_) => break,
            },
        };
        let mut group = vec![first];
        while group.len() < MAX_GROUP {
            match rx.try_recv() {
                Ok(job) => group.push(job),
                Err(_) => break,
            }
        }
        // FULL whenever the group holds a durable job; NORMAL (no fsync in WAL mode) otherwise.
        let want_full = group.iter().any(|j| j.durable);
        if want_full != full {
            let level = if want_full { "FULL" } else { "NORMAL" };
            if conn.pragma_update(None, "synchronous", level).is_ok() {
                full = want_full;
            }
        }
        if want_full && !full {
            // Could not switch back to FULL: refuse the group rather than answer without an fsync.
            for job in group {
                (job.run)(None).1(false);
            }
            continue;
        }
        let mut done: Vec<Box<dyn FnOnce(bool) + Send>> = Vec::with_capacity(group.len());
        let committed = match conn.transaction_with_behavior(TransactionBehavior::Immediate) {
            Ok(t) => {
                let mut poisoned = false;
                for job in group {
                    let (poison, d) = (job.run)(Some(&t));
                    poisoned |= poison;
                    done.push(d);
                }
                // A job without its own savepoint failed: nothing of the group may commit.
                !poisoned && t.commit().is_ok()
            }
            Err(_) => {
                for job in group {
                    done.push((job.run)(None).1);
                }
                false
            }
        };
        for d in done {
            d(committed);
        }
        // After the answers: a tail the writer copies delays only the groups behind it.
        match shared.after_commit(WAL_FRAMES.get(), &mut seen) {
            Checkpoint::NotDue => {}
            Checkpoint::Pass => {
                // Full means a pass is already asked for, which will copy these frames too.
                let _ = checkpoint.try_send(());
            }
            Checkpoint::Here { wait } => {
                // -1: a background pass holds the checkpoint lock. Below the bound the next
                // commit tries again; past it the writer waits for the pass (up to ~10 s, then
                // leaves it to the next commit), or a slow pass would let the log grow on.
                for _ in 0..if wait { 10_000 } else { 1 } {
                    if passive_checkpoint(&conn).is_ok_and(|(_, copied)| copied >= 0) {
                        shared.done.fetch_add(1, Ordering::Relaxed);
                        break;
                    }
                    if wait {
                        std::thread::sleep(std::time::Duration::from_millis(1));
                    }
                }
            }
        }
        // Merge the search index's pending rows when nothing waits, or when there are so many
        // that queries would scan too much.
        let pending = SEARCH_PENDING.with(Cell::get);
        let due = match pending {
            p if p >= MERGE_BUSY => true,
            p if p >= MERGE_IDLE => match rx.try_recv() {
                Ok(job) => {
                    next = Some(job);
                    false
                }
                Err(_) => true,
            },
            _ => false,
        };
        if due {
            // A failed merge (say, a disk error) leaves the rows pending, still found.
            if merge_search_pending(&mut conn).is_ok() {
                SEARCH_PENDING.with(|p| p.set(0));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type TestJob = Box<dyn FnOnce(&Transaction<'_>) -> StoreResult<()> + Send>;

    fn count(t: &Transaction<'_>) -> StoreResult<i64> {
        Ok(t.query_row("SELECT count(*) FROM tenants", [], |r| r.get(0))?)
    }

    fn insert(t: &Transaction<'_>, id: &str) -> StoreResult<()> {
        t.execute(
            "INSERT INTO tenants (id, slug, data_key, created_at) VALUES (?1, ?1, x'00', 0)",
            [id],
        )?;
        Ok(())
    }

    /// Queues a job that holds the writer until the returned sender sends (or is dropped): the
    /// jobs queued meanwhile run after it, in one group.
    fn hold_the_writer(store: &SqliteStore) -> mpsc::Sender<()> {
        let (go, wait) = mpsc::channel::<()>();
        store
            .queue(
                true,
                true,
                move |_| {
                    let _ = wait.recv();
                    Ok(())
                },
                |_| {},
            )
            .unwrap();
        go
    }

    /// Queues `jobs` so they commit in one group: a first job holds the writer until all are
    /// queued. Returns each job's answer.
    fn one_group(store: &SqliteStore, jobs: Vec<(bool, TestJob)>) -> Vec<StoreResult<()>> {
        let go = hold_the_writer(store);
        let (tx, rx) = mpsc::channel::<(usize, StoreResult<()>)>();
        let n = jobs.len();
        for (i, (isolated, f)) in jobs.into_iter().enumerate() {
            let tx = tx.clone();
            store
                .queue(true, isolated, f, move |r| {
                    let _ = tx.send((i, r));
                })
                .unwrap();
        }
        go.send(()).unwrap();
        let mut answers: Vec<(usize, StoreResult<()>)> =
            (0..n).map(|_| rx.recv().unwrap()).collect();
        answers.sort_by_key(|a| a.0);
        answers.into_iter().map(|a| a.1).collect()
    }

    /// A job with its own savepoint undoes only itself; a job without one fails its whole group,
    /// so nothing it half-wrote can commit beside the others.
    #[test]
    fn a_failing_job_undoes_itself_or_its_whole_group() {
        let tmp = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&tmp.path().join("db")).unwrap();
        let fail_after_write = |id: &'static str| {
            Box::new(move |t: &Transaction<'_>| {
                insert(t, id)?;
                Err(StoreError::Conflict("refused halfway".into()))
            }) as TestJob
        };
        let ok = |id: &'static str| Box::new(move |t: &Transaction<'_>| insert(t, id)) as TestJob;
        // Isolated failure: the others commit, the failed job's write does not.
        let answers = one_group(
            &store,
            vec![
                (true, ok("ten_a")),
                (true, fail_after_write("ten_b")),
                (false, ok("ten_c")),
            ],
        );
        assert!(answers[0].is_ok() && answers[1].is_err() && answers[2].is_ok());
        // Shared failure: nobody's write commits, and every job hears so.
        let answers = one_group(
            &store,
            vec![(true, ok("ten_d")), (false, fail_after_write("ten_e"))],
        );
        assert!(answers.iter().all(Result::is_err));
        let (tx, rx) = mpsc::channel();
        store
            .queue(true, true, count, move |r| {
                let _ = tx.send(r);
            })
            .unwrap();
        assert_eq!(rx.recv().unwrap().unwrap(), 2, "ten_a and ten_c only");
    }

    /// A job's search index row goes to the pending list in its own transaction, so it follows
    /// the job: one that rolls back (alone, or with its whole group) leaves none. A few rows stay
    /// pending; a merge moves them all into FTS5 in one transaction.
    #[test]
    fn search_rows_pend_with_their_job_and_merge_whole() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("db");
        let store = SqliteStore::open(&path).unwrap();
        let job = |seq: i64, tag: &'static str, fail: bool| {
            Box::new(move |t: &Transaction<'_>| {
                t.execute(
                    "INSERT INTO search_pending (seq, tags) VALUES (?1, ?2)",
                    rusqlite::params![seq, tag],
                )?;
                search_row_pending();
                match fail {
                    true => Err(StoreError::Conflict("refused halfway".into())),
                    false => Ok(()),
                }
            }) as TestJob
        };
        let answers = one_group(
            &store,
            vec![
                (true, job(1, "aaaa", false)),
                (true, job(2, "bbbb", true)),
                (false, job(3, "cccc", false)),
            ],
        );
        assert!(answers[0].is_ok() && answers[1].is_err() && answers[2].is_ok());
        let answers = one_group(
            &store,
            vec![(true, job(4, "dddd", false)), (false, job(5, "eeee", true))],
        );
        assert!(answers.iter().all(Result::is_err));
        let mut c = Connection::open(&path).unwrap();
        configure(&c).unwrap();
        let found = |c: &Connection, table: &str| -> Vec<i64> {
            let sql = match table {
                "pending" => "SELECT seq FROM search_pending ORDER BY seq",
                _ => {
                    "SELECT rowid FROM search_terms WHERE search_terms MATCH 'aaaa OR bbbb OR cccc OR dddd OR eeee' ORDER BY rowid"
                }
            };
            let mut s = c.prepare(sql).unwrap();
            s.query_map([], |r| r.get(0))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap()
        };
        assert_eq!(
            found(&c, "pending"),
            [1, 3],
            "fewer than a merge's worth wait"
        );
        assert_eq!(found(&c, "merged"), Vec::<i64>::new());
        assert_eq!(merge_search_pending(&mut c).unwrap(), 2);
        assert_eq!(found(&c, "pending"), Vec::<i64>::new());
        assert_eq!(found(&c, "merged"), [1, 3]);
    }

    /// Once enough rows are pending, a writer with nothing else to do merges them.
    #[test]
    fn an_idle_writer_merges_the_pending_search_rows() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("db");
        let store = SqliteStore::open(&path).unwrap();
        let n = i64::try_from(MERGE_IDLE).unwrap();
        let jobs = (1..=n)
            .map(|seq| {
                let f = move |t: &Transaction<'_>| {
                    t.execute(
                        "INSERT INTO search_pending (seq, tags) VALUES (?1, 'aaaa')",
                        [seq],
                    )?;
                    search_row_pending();
                    Ok(())
                };
                (true, Box::new(f) as TestJob)
            })
            .collect();
        assert!(one_group(&store, jobs).iter().all(Result::is_ok));
        let c = Connection::open(&path).unwrap();
        let count = |sql: &str| -> i64 { c.query_row(sql, [], |r| r.get(0)).unwrap() };
        wait_until("the merge", || {
            count("SELECT count(*) FROM search_pending") == 0
        });
        assert_eq!(
            count("SELECT count(*) FROM search_terms WHERE search_terms MATCH 'aaaa'"),
            n
        );
    }

    #[test]
    fn a_pending_row_matches_a_word_of_every_group() {
        let tags = "aa01 bb02 cc03";
        assert!(search_match(tags, "aa01"));
        assert!(search_match(tags, "zz99\tbb02\ncc03"));
        assert!(!search_match(tags, "aa01\nzz99"));
        assert!(!search_match(tags, "aa0"), "whole words only");
    }

    /// Polls `done` (what another thread does, so no clock to step) for up to a minute.
    fn wait_until(what: &str, done: impl Fn() -> bool) {
        let waited = std::time::Instant::now();
        while !done() {
            assert!(
                waited.elapsed() < std::time::Duration::from_secs(60),
                "waited a minute for {what}"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    /// Another process (python3's sqlite3) takes the database at `path` out of WAL mode, which
    /// needs the file to itself: refused ("locked") while any connection holds it.
    fn leave_wal(path: &Path) -> std::process::Output {
        std::process::Command::new("python3")
            .args([
                "-c",
                "import sqlite3, sys\n\
                 c = sqlite3.connect(sys.argv[1], timeout=0)\n\
                 print(c.execute('pragma journal_mode=delete').fetchone()[0])",
            ])
            .arg(path)
            .output()
            .expect("python3 runs")
    }

    /// A read of the `tenants` tenants committed so far, held open: while it is, the frames
    /// after it stay in the log (no pass copies them, and the log cannot start again).
    fn pin_the_log(path: &Path, tenants: i64) -> Connection {
        let reader = Connection::open(path).unwrap();
        reader.execute_batch("BEGIN").unwrap();
        let seen: i64 = reader
            .query_row("SELECT count(*) FROM tenants", [], |r| r.get(0))
            .unwrap();
        assert_eq!(seen, tenants);
        reader
    }

    /// Commits `rows` tenants of ~3 KB each (a page or more per row) in one job of its own, and
    /// waits for its answer; `durable` as in [`SqliteStore::queue`].
    fn insert_rows(store: &SqliteStore, prefix: String, rows: usize, durable: bool) {
        let (tx, rx) = mpsc::channel();
        let job = move |t: &Transaction<'_>| {
            let mut insert = t.prepare_cached(
                "INSERT INTO tenants (id, slug, data_key, created_at) VALUES (?1, ?1, ?2, 0)",
            )?;
            for i in 0..rows {
                let id = format!("{prefix}{i}");
                insert.execute(rusqlite::params![id, vec![7u8; 3000]])?;
            }
            Ok(())
        };
        store
            .queue(durable, true, job, move |r| {
                let _ = tx.send(r);
            })
            .unwrap();
        rx.recv().unwrap().unwrap();
    }

    /// Below the interval the writer asks for a pass each slice of new frames, and after the
    /// log starts again it counts from its beginning.
    #[test]
    fn passes_are_asked_for_each_slice_before_the_log_is_due() {
        let shared = Checkpointing::new(8192);
        assert_eq!(shared.slice, 1024);
        let mut seen = Seen::default();
        let mut decide = |frames| shared.after_commit(frames, &mut seen);
        assert_eq!(decide(500), Checkpoint::NotDue);
        assert_eq!(decide(1100), Checkpoint::Pass);
        assert_eq!(decide(1500), Checkpoint::NotDue);
        assert_eq!(decide(2200), Checkpoint::Pass);
        // The log started again: a short log is not due, a slice of it is.
        assert_eq!(decide(10), Checkpoint::NotDue);
        assert_eq!(decide(1040), Checkpoint::Pass);
        // Past the interval, a pass on each commit until one leaves a short tail.
        assert_eq!(decide(8200), Checkpoint::Pass);
        assert_eq!(decide(8210), Checkpoint::Pass);
    }

    /// The checkpointing thread copies a slice of the log long before the log is due to start
    /// again, and flushes what it copied itself (SQLite syncs the database file only after a
    /// pass that copied the whole log): otherwise the pages of a whole interval reach the disk
    /// in one burst, and the writer's fsyncs queue behind it.
    #[test]
    fn slices_of_the_log_are_copied_and_flushed_before_it_is_due() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("db");
        let store = SqliteStore::open(&path).unwrap();
        insert_rows(&store, "ten_a".to_owned(), 10, true);
        // The pass copies only part of the log: the part SQLite does not sync.
        let _reader = pin_the_log(&path, 10);
        // A page or more per row: past one slice, well short of the interval.
        insert_rows(
            &store,
            "ten_b".to_owned(),
            SLICE_FRAMES as usize + 200,
            true,
        );
        wait_until("a slice copied and flushed before the log was due", || {
            store.inner.checkpointing.flushed.load(Ordering::Relaxed) > 0 && store.checkpoints() > 0
        });
    }

    /// A pass that copies nothing more than the last one flushed (a reader holds the rest of
    /// the log) syncs nothing: past the interval a pass is asked for on every commit, and a sync
    /// with each would hold the writer's own.
    #[test]
    fn a_pass_that_copied_nothing_more_is_not_flushed_again() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("db");
        let store = SqliteStore::open_checkpointing_every(&path, 64).unwrap();
        insert_rows(&store, "ten_a".to_owned(), 10, true);
        let _reader = pin_the_log(&path, 10);
        let before = store.checkpoints();
        for c in 0..60 {
            insert_rows(&store, format!("ten_{c}_"), 1, true);
        }
        wait_until("passes past the interval", || {
            store.checkpoints() >= before + 5
        });
        let flushed = store.inner.checkpointing.flushed.load(Ordering::Relaxed);
        assert!(flushed <= 2, "{flushed} flushes of what one pass copied");
    }

    /// A log that started again is counted from its beginning, even when its first commit is
    /// longer than the log was when a pass was last asked for; and a pass that caught up does
    /// not make the next commits ask again before a slice more.
    #[test]
    fn a_log_started_again_is_counted_from_its_beginning() {
        let shared = Checkpointing::new(8192);
        assert_eq!(shared.slice, 1024);
        let mut seen = Seen::default();
        let mut decide = |frames| shared.after_commit(frames, &mut seen);
        assert_eq!(decide(1100), Checkpoint::Pass);
        // The pass copied all of it, but a reader kept the log from starting again.
        shared.copied.store(1100, Ordering::Relaxed);
        assert_eq!(decide(1110), Checkpoint::NotDue);
        assert_eq!(decide(1500), Checkpoint::NotDue);
        // Started again: 1,200 frames, all new.
        assert_eq!(decide(1200), Checkpoint::Pass);
    }

    /// Closing any descriptor of the database file drops this process's locks on it, SQLite's
    /// included. The store's own descriptor (for flushing) stays open as long as the store does,
    /// even when its checkpointing thread ended early (here: a job panicked and took the writer
    /// with it): another process still cannot take the file from under the open readers.
    #[test]
    fn the_file_stays_locked_while_the_store_is_open() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("db");
        let store = SqliteStore::open(&path).unwrap();
        insert_rows(&store, "ten_a".to_owned(), 3, true);
        let take_it = || leave_wal(&path);
        let refused = |out: std::process::Output| {
            !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("locked")
        };
        assert!(refused(take_it()), "the file was free with the store open");
        store
            .queue(
                true,
                true,
                |_| -> StoreResult<()> { panic!("a job that takes the writer down") },
                |_| {},
            )
            .unwrap();
        wait_until("the checkpointing thread ended", || {
            let thread = store.inner.checkpointer.lock().unwrap();
            thread.as_ref().is_some_and(|t| t.is_finished())
        });
        assert!(
            refused(take_it()),
            "another process took the database from the open store"
        );
        // The control: once the store is gone, the same command takes the file.
        drop(store);
        let taken = take_it();
        assert_eq!(String::from_utf8_lossy(&taken.stdout).trim(), "delete");
    }

    /// The last handle may go in a job's answer, on the writer thread itself: the store then
    /// closes without that thread joining itself (which panicked, the answer never finished).
    #[test]
    fn the_last_handle_dropped_by_a_writer_job_closes_the_store() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("db");
        let store = SqliteStore::open(&path).unwrap();
        // Holds the writer until the answer below owns the only other handle.
        let go = hold_the_writer(&store);
        let (answered, heard) = mpsc::channel::<std::thread::ThreadId>();
        let last = store.clone();
        store
            .queue(
                true,
                true,
                |t| insert(t, "ten_a"),
                move |r: StoreResult<()>| {
                    assert!(r.is_ok());
                    drop(last);
                    let _ = answered.send(std::thread::current().id());
                },
            )
            .unwrap();
        let writer = store
            .inner
            .writer
            .lock()
            .unwrap()
            .as_ref()
            .unwrap()
            .thread()
            .id();
        drop(store);
        go.send(()).unwrap();
        let on = heard
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("the answer that dropped the last handle finished");
        assert_eq!(on, writer, "the last handle went on the writer thread");
        // Closed: no connection holds the file any more, and the commit is in it.
        wait_until("every connection closed", || {
            String::from_utf8_lossy(&leave_wal(&path).stdout).trim() == "delete"
        });
        let n: i64 = Connection::open(&path)
            .unwrap()
            .query_row("SELECT count(*) FROM tenants", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 1);
    }

    /// Checkpoints run on their own thread, not in the writer's commit (where each one held
    /// every waiting publish), and the WAL starts again from its beginning once one has run.
    #[test]
    fn checkpoints_run_beside_the_writer_and_bound_the_log() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("db");
        let store = SqliteStore::open(&path).unwrap();
        let write = |prefix: &str, rows: usize| insert_rows(&store, prefix.to_owned(), rows, true);
        // A page or more per row: well past CHECKPOINT_FRAMES in one commit.
        write("ten_a", CHECKPOINT_FRAMES as usize + 2000);
        wait_until("a checkpoint on the checkpointing thread", || {
            store.checkpoints() > 0
        });
        // The next commit restarts the log: what is in it now is that commit's frames only.
        write("ten_b", 1);
        let probe = Connection::open(&path).unwrap();
        let (busy, frames): (i64, i64) = probe
            .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .unwrap();
        assert_eq!(busy, 0);
        assert!(
            frames < i64::from(CHECKPOINT_FRAMES),
            "the WAL holds {frames} frames after a checkpoint and a commit"
        );
    }

    /// Under a writer that never pauses, the log still starts again: a background pass alone
    /// never catches up with it (the log grew to hundreds of megabytes), so the writer copies the
    /// tail itself, and past four intervals copies whatever is left.
    #[test]
    fn the_log_stays_bounded_under_a_writer_that_never_pauses() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("db");
        let every = 64;
        let store = SqliteStore::open_checkpointing_every(&path, every).unwrap();
        for c in 0..400 {
            // Not durable: no fsync, so the writer commits as fast as it can; one at a time, so
            // each is a commit of its own.
            insert_rows(&store, format!("ten_{c}_"), 8, false);
        }
        // 400 commits of 8 rows (a page each, and their index pages) are ~50 intervals of frames.
        let frame = 4096 + 24;
        let wal = std::fs::metadata(tmp.path().join("db-wal")).unwrap().len();
        // Four intervals and the commit that crossed them (past them the writer waits for a
        // running pass, then copies), with room to spare; unbounded, the log holds all ~4,800.
        let bound = 32 + 16 * every as u64 * frame;
        assert!(
            wal <= bound,
            "the WAL reached {wal} bytes; bounded, it stays under {bound}"
        );
        assert!(store.checkpoints() > 0);
    }

    /// A lease runs the same queries several times a second with a new `now` and `LIMIT` each
    /// time. Planned from the statement alone (QPSG), they are parsed once per connection; SQLite
    /// otherwise plans with the bound `LIMIT` and parses the statement again at each new binding.
    #[test]
    fn a_statement_is_planned_once_whatever_its_bound_limit() {
        let tmp = tempfile::tempdir().unwrap();
        let c = Connection::open(tmp.path().join("db")).unwrap();
        configure(&c).unwrap();
        c.execute_batch(
            "CREATE TABLE t (a INTEGER PRIMARY KEY); INSERT INTO t VALUES (1), (2), (3);",
        )
        .unwrap();
        let sql = "SELECT a FROM t WHERE a > ?1 ORDER BY a LIMIT ?2";
        for limit in 1..=3usize {
            let mut s = c.prepare_cached(sql).unwrap();
            let rows = s
                .query_map(rusqlite::params![0, limit], |r| r.get::<_, i64>(0))
                .unwrap();
            assert_eq!(rows.count(), limit);
        }
        let s = c.prepare_cached(sql).unwrap();
        assert_eq!(s.get_status(rusqlite::StatementStatus::RePrepare), 0);
        let mapped: i64 = c
            .pragma_query_value(None, "mmap_size", |r| r.get(0))
            .unwrap();
        assert_eq!(mapped, 0, "reads go through read(), never a mapping");
    }
}
