//! A throwaway PostgreSQL cluster for tests: `initdb` in a temporary directory (as the `postgres`
//! user when running as root, since `initdb` refuses root), `postgres` on a free loopback port
//! with `fsync` on, one fresh database per test. Never a server someone left running.
//! `AGENTBUS_PG_OPTIONS` adds server settings (`-c name=value …`), for diagnosing a run.
//!
//! The server runs under a small shell that stops it (and removes its directory) when its
//! standard input closes: when the cluster is dropped, or when the test process ends in any way,
//! a panic or an abort included.
//!
//! A PostgreSQL case starts with `if pg::skip() { return; }` (or takes [`cluster`]), so it runs
//! only when the run asked for PostgreSQL ([`wanted`]; the rule is in the crate's documentation)
//! and `cargo test` passes on a machine without it. Benches, which are run on purpose, call
//! [`Cluster::start`] directly.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

/// The variable that asks for the PostgreSQL cases.
pub const ASK: &str = "AGENTBUS_TEST_PG";

/// Whether this run asked for the PostgreSQL cases: `AGENTBUS_TEST_PG=1`, or
/// `AGENTBUS_TEST_STORE=postgres` (the gateway suite on PostgreSQL), or `CI` set to anything but
/// empty, `0` or `false` (CI services set `CI=true`), so CI never skips them.
pub fn wanted() -> bool {
    let set =
        |name: &str| std::env::var(name).is_ok_and(|v| !matches!(v.trim(), "" | "0" | "false"));
    std::env::var(ASK).is_ok_and(|v| v.trim() == "1")
        || std::env::var("AGENTBUS_TEST_STORE").as_deref() == Ok("postgres")
        || set("CI")
}

/// Whether a PostgreSQL case should return now: this run did not ask for PostgreSQL
/// ([`wanted`]). The first skip in a process says once how to run them, on the terminal (past the
/// test harness's capture, which would hide it in a passing test).
pub fn skip() -> bool {
    if wanted() {
        return false;
    }
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(|| {
        let _ = writeln!(
            std::io::stderr(),
            "note: PostgreSQL cases skipped; run them with {ASK}=1 \
             (needs PostgreSQL's server programs: initdb on PATH or AGENTBUS_PG_BIN)"
        );
    });
    true
}

/// The cluster this test process shares, started on first use, when this run asked for
/// PostgreSQL; otherwise `None` (see [`skip`]).
pub fn cluster() -> Option<&'static Cluster> {
    (!skip()).then(Cluster::shared)
}

/// A running cluster.
pub struct Cluster {
    port: u16,
    child: Mutex<Option<(Child, ChildStdin, BufReader<ChildStdout>)>>,
    next_db: AtomicUsize,
}

/// Where PostgreSQL's server programs are: `AGENTBUS_PG_BIN`, else the directory `initdb` on
/// `PATH` really lives in (Debian links it from elsewhere), else the newest
/// `/usr/lib/postgresql/*/bin`.
fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("AGENTBUS_PG_BIN") {
        return PathBuf::from(dir);
    }
    let on_path = std::env::var_os("PATH").into_iter().flat_map(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join("initdb"))
            .collect::<Vec<_>>()
    });
    for candidate in on_path {
        if let Ok(real) = std::fs::canonicalize(&candidate)
            && let Some(dir) = real.parent()
            && dir.join("postgres").exists()
        {
            return dir.to_owned();
        }
    }
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|d| d.join("initdb").exists())
        .collect();
    versions.sort();
    versions.pop().unwrap_or_else(|| {
        panic!(
            "PostgreSQL's initdb was not found: install Debian's `postgresql` package \
             (./scripts/test does) or set AGENTBUS_PG_BIN to its bin directory"
        )
    })
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// `cmd`, run as the `postgres` user when we are root.
fn as_server_user(root: bool, program: &Path) -> Command {
    if root {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    }
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free loopback port");
    l.local_addr().expect("its address").port()
}

/// Starts the server and waits for it to accept connections; then takes commands on its input,
/// one per line: `stop` (a fast shutdown, the data kept) and `start` (on the same port and
/// data), each answered `stopped` or `ready`. Anything else, or the input closing, stops the
/// server for good and removes its directory (see the module documentation).
const SUPERVISOR: &str = r#"
start() {
    "$BIN/postgres" -D "$DIR/data" -p "$PORT" -k "$DIR" -h 127.0.0.1 -c fsync=on \
        -c synchronous_commit=on -c max_connections=300 -c shared_buffers=32MB $EXTRA \
        >>"$DIR/server.log" 2>&1 &
    pid=$!
    until "$BIN/pg_isready" -q -h 127.0.0.1 -p "$PORT"; do
        if ! kill -0 "$pid" 2>/dev/null; then echo failed; cat "$DIR/server.log" >&2; exit 1; fi
        sleep 0.05
    done
    echo ready
}
start
while read -r cmd; do
    case "$cmd" in
        stop) kill -INT "$pid"; wait "$pid"; echo stopped ;;
        start) start ;;
        *) break ;;
    esac
done
kill -INT "$pid" 2>/dev/null
wait "$pid"
rm -rf "$DIR"
"#;

impl Cluster {
    /// Initialises and starts a new cluster.
    pub fn start() -> Cluster {
        let bin = bin_dir();
        let root = is_root();
        let dir = tempfile::Builder::new()
            .prefix("agentbus-pg-")
            .tempdir()
            .expect("a temporary directory")
            .keep();
        if root {
            // The server user must own its directory (and, through it, the data directory).
            let status = Command::new("chown")
                .args(["postgres:postgres"])
                .arg(&dir)
                .status()
                .expect("chown");
            assert!(status.success(), "chown of {} failed", dir.display());
        }
        let init = as_server_user(root, &bin.join("initdb"))
            .arg("-D")
            .arg(dir.join("data"))
            // Trust on loopback only (this cluster lives for one test run); C locale so text
            // sorts byte-wise; --no-sync skips only initdb's own final flush, the server runs
            // with fsync on.
            .args([
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ])
            .output()
            .expect("initdb runs");
        assert!(
            init.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&init.stderr)
        );
        // A port found free can be taken before the server binds it: try a few.
        for _ in 0..5 {
            let port = free_port();
            let mut child = as_server_user(root, Path::new("/bin/sh"))
                .args(["-c", SUPERVISOR])
                .env("BIN", &bin)
                .env("DIR", &dir)
                .env("PORT", port.to_string())
                .env(
                    "EXTRA",
                    std::env::var("AGENTBUS_PG_OPTIONS").unwrap_or_default(),
                )
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("the server's supervisor starts");
            let stdin = child.stdin.take().expect("its stdin");
            let mut line = String::new();
            let mut stdout = BufReader::new(child.stdout.take().expect("its stdout"));
            let _ = stdout.read_line(&mut line);
            if line.trim() == "ready" {
                return Cluster {
                    port,
                    child: Mutex::new(Some((child, stdin, stdout))),
                    next_db: AtomicUsize::new(0),
                };
            }
            let _ = child.wait();
        }
        panic!("the test PostgreSQL server did not start (see its log above)");
    }

    /// The cluster this test process shares, started on first use, whether or not this run
    /// asked for PostgreSQL: tests call [`cluster`] instead.
    pub fn shared() -> &'static Cluster {
        static SHARED: OnceLock<Cluster> = OnceLock::new();
        SHARED.get_or_init(Cluster::start)
    }

    /// The URL of database `name` as the superuser.
    pub fn url(&self, name: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{name}", self.port)
    }

    /// Creates a new, empty database and answers its URL.
    pub async fn database(&self) -> String {
        let name = format!(
            "t{}_{}",
            std::process::id(),
            self.next_db.fetch_add(1, Ordering::Relaxed)
        );
        let (client, conn) = tokio_postgres::connect(&self.url("postgres"), tokio_postgres::NoTls)
            .await
            .expect("connect to the test cluster");
        let task = tokio::spawn(conn);
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .expect("create a test database");
        drop(client);
        let _ = task.await;
        self.url(&name)
    }

    /// Stops the server now, for good (dropping the cluster does the same).
    pub fn stop(&self) {
        if let Ok(mut child) = self.child.lock()
            && let Some((mut child, mut stdin, _)) = child.take()
        {
            let _ = stdin.write_all(b"\n");
            drop(stdin);
            let _ = child.wait();
        }
    }

    /// Shuts the server down with its data kept (`true`), or starts it again on the same port
    /// (`false`); returns once it has.
    pub fn set_down(&self, down: bool) {
        let mut guard = self.child.lock().expect("the cluster's lock");
        let (_, stdin, stdout) = guard.as_mut().expect("a running cluster");
        stdin
            .write_all(if down { b"stop\n" } else { b"start\n" })
            .expect("the supervisor takes commands");
        let mut line = String::new();
        stdout.read_line(&mut line).expect("the supervisor answers");
        let want = if down { "stopped" } else { "ready" };
        assert_eq!(line.trim(), want, "the test cluster did not {want}");
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop();
    }
}
