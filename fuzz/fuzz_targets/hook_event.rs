//! The event JSON a harness hands the hook, for every harness.
#![no_main]

use agentbus_local::hook::{Harness, parse_event};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for harness in [Harness::Claude, Harness::Codex, Harness::OpenCode] {
        let _ = parse_event(harness, data);
    }
});
