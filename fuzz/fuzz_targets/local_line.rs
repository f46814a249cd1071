//! A line of the per-machine log, as any process on the machine might have written it.
#![no_main]

use agentbus_local::line::Line;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = Line::parse(data);
});
