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
    static MINTER: Mutex<(Minter, Entropy)> =
        Mutex::new((Minter::new_const(), Entropy::new_const()));
    let mut guard = MINTER.lock().unwrap_or_else(|p| p.into_inner());
    let (minter, entropy) = &mut *guard;
    minter.mint(kind, unix_ms.max(0) as u64, entropy.take())
}

/// OS entropy drawn 512 bytes at a time: ids are minted on every request, and one `getrandom`
/// call per id showed in the gateway's profile. The bytes are the OS's all the same; keys keep
/// drawing theirs directly ([`random_bytes`]).
struct Entropy {
    buf: [u8; 512],
    used: usize,
}

impl Entropy {
    const fn new_const() -> Entropy {
        Entropy {
            buf: [0; 512],
            used: 512,
        }
    }

    fn take<const N: usize>(&mut self) -> [u8; N] {
        if self.used + N > self.buf.len() {
            self.buf = random_bytes();
            self.used = 0;
        }
        let mut out = [0u8; N];
        out.copy_from_slice(&self.buf[self.used..self.used + N]);
        self.used += N;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Buffered entropy hands out fresh bytes on every draw, across refills of the buffer.
    #[test]
    fn buffered_entropy_never_repeats_a_draw() {
        let mut e = Entropy::new_const();
        let draws: std::collections::HashSet<[u8; 10]> = (0..500).map(|_| e.take()).collect();
        assert_eq!(draws.len(), 500);
        assert!(draws.iter().all(|d| d != &[0u8; 10]));
    }
}
