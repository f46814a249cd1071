//! Envelope parsing and §2 validation: never a panic; an envelope without violations has signing
//! bytes, and its violations are the same when validated twice.
#![no_main]

use agentbus_protocol::envelope::{Envelope, ValidateOptions};
use agentbus_protocol::signing;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(env) = Envelope::parse(data) else {
        return;
    };
    let opts = ValidateOptions {
        received_bytes: Some(data.len()),
        ..ValidateOptions::default()
    };
    let first = env.validate(opts);
    if first.is_empty() {
        signing::signing_bytes(env.attrs()).expect("a valid envelope has signing bytes");
    }
    assert_eq!(first.len(), env.validate(opts).len());
    let _ = (env.id(), env.source(), env.task_id(), env.sequence());
});
