//! The fuzz target for `agentbus_fuzz::local_line` (`src/lib.rs` says what it checks; the workspace's
//! tests replay the same function over the committed corpus).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| agentbus_fuzz::local_line(data));
