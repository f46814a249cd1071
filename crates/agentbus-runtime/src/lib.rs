//! What every AgentBus process takes from its machine, in one place: the clock, entropy, ids
//! minted from both, and private key files.
//!
//! The protocol crate reads none of these; everything above it gets them here, so a test can swap
//! the clock ([`ManualClock`]) and no timer test ever sleeps.

pub mod clock;
pub mod keyfile;

use std::sync::Mutex;

use agentbus_protocol::ids::{Id, IdKind, Minter};

pub use clock::{Clock, ManualClock, SystemClock};

/// Fills `buf` from the operating system's entropy source.
///
/// # Panics
/// Only if the OS has no entropy source at all, which no supported platform lacks.
pub fn random_bytes<const N: usize>() -> [u8; N] {
    let mut buf = [0u8; N];
    #[allow(clippy::expect_used)]
    getrandom::fill(&mut buf).expect("the OS entropy source is available");
    buf
}

/// Mints a UUIDv7 id of `kind` from the system clock, monotonic within this process.
pub fn mint(kind: IdKind) -> Id {
    mint_at(kind, SystemClock.now().millis())
}

/// Mints an id as of `unix_ms` (a test clock's time), still monotonic within this process.
pub fn mint_at(kind: IdKind, unix_ms: i64) -> Id {
    static MINTER: Mutex<Minter> = Mutex::new(Minter::new_const());
    let mut m = MINTER.lock().unwrap_or_else(|p| p.into_inner());
    m.mint(kind, unix_ms.max(0) as u64, random_bytes())
}
