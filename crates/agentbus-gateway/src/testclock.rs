//! The black-box test clock (`--unsafe-test-clock`, docs/settings.md): the system time plus an
//! offset that the gateway operator moves forward over HTTP, so a test outside the process can cross the
//! replay window, the idempotency window, expiries, TTLs and lease timeouts without waiting.
//!
//! It cannot be switched on by accident: only a flag turns it on; a data directory records at
//! its first start whether it was made with it ([`MARKER`]), and the gateway refuses to start when
//! the flag and the directory disagree; every move is logged as a warning; every response carries
//! the `agentbus-test-clock` header; and its routes ([`crate::TEST_CLOCK_ROUTES`], in `clockapi`) exist only then.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use serde_json::{Value, json};

use agentbus_protocol::timestamp::Timestamp;
use agentbus_runtime::{Clock, SystemClock};

/// The file in a data directory that marks it as made for the test clock, and keeps its offset.
pub const MARKER: &str = "unsafe-test-clock.json";

/// The response header that names the test clock's time on every answer.
pub const HEADER: &str = "agentbus-test-clock";

/// The system clock moved forward by an offset that is kept in the data directory.
#[derive(Debug)]
pub struct TestClock {
    offset_ms: AtomicI64,
    file: PathBuf,
}

impl Clock for TestClock {
    fn now(&self) -> Timestamp {
        Timestamp(SystemClock.now().millis() + self.offset_ms.load(Ordering::SeqCst))
    }
}

/// Why the data directory and the flag disagree.
#[derive(Debug, thiserror::Error)]
pub enum Mismatch {
    /// The flag is on, and the directory was made without it.
    #[error(
        "{0} was created without --unsafe-test-clock; the test clock runs only on a data directory made for it"
    )]
    NotATestDirectory(String),
    /// The flag is off, and the directory was made with it.
    #[error(
        "{0} was created with --unsafe-test-clock: its records carry test time, so it only runs with that flag"
    )]
    TestDirectory(String),
    /// The marker cannot be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The marker file.
        path: String,
        /// The failure.
        source: std::io::Error,
    },
}

impl TestClock {
    /// Moves the clock forward by `ms` and records the new offset; answers the new time.
    pub fn advance(&self, ms: i64) -> std::io::Result<Timestamp> {
        let offset = self.offset_ms.fetch_add(ms, Ordering::SeqCst) + ms;
        write_marker(&self.file, offset)?;
        Ok(self.now())
    }

    /// How far ahead of the system clock this clock is, in milliseconds.
    pub fn offset_ms(&self) -> i64 {
        self.offset_ms.load(Ordering::SeqCst)
    }
}

fn write_marker(path: &Path, offset_ms: i64) -> std::io::Result<()> {
    let text = json!({
        "warning": "this data directory belongs to a gateway run with --unsafe-test-clock, for tests only",
        "offset_ms": offset_ms,
    })
    .to_string();
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

/// Checks the data directory against the flag, before anything in it is created or opened:
/// answers the test clock when it is on (making the marker on a new directory), `None` when it is
/// off, and the mismatch otherwise. A directory without a database is new.
pub fn check(dir: &Path, flag: bool) -> Result<Option<Arc<TestClock>>, Mismatch> {
    let marker = dir.join(MARKER);
    let io = |source| Mismatch::Io {
        path: marker.display().to_string(),
        source,
    };
    let shown = dir.display().to_string();
    let exists = dir.join("agentbus.db").exists();
    match (flag, marker.exists()) {
        (false, false) => Ok(None),
        (false, true) => Err(Mismatch::TestDirectory(shown)),
        (true, false) if exists => Err(Mismatch::NotATestDirectory(shown)),
        (true, false) => {
            std::fs::create_dir_all(dir).map_err(io)?;
            write_marker(&marker, 0).map_err(io)?;
            Ok(Some(Arc::new(TestClock {
                offset_ms: AtomicI64::new(0),
                file: marker,
            })))
        }
        (true, true) => {
            let text = std::fs::read_to_string(&marker).map_err(io)?;
            let offset = serde_json::from_str::<Value>(&text)
                .ok()
                .and_then(|v| v["offset_ms"].as_i64())
                .ok_or_else(|| {
                    io(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        "no offset_ms in the marker",
                    ))
                })?;
            Ok(Some(Arc::new(TestClock {
                offset_ms: AtomicI64::new(offset),
                file: marker,
            })))
        }
    }
}
