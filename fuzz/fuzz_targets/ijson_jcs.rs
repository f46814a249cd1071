//! The strict I-JSON reader and RFC 8785: whatever parses canonicalises, and the canonical bytes
//! parse back to a value with the same canonical bytes (JCS is idempotent).
//!
//! One exception is by design (`docs/protocol.md`, "I-JSON input"): a non-integral literal such as
//! `33333338888888888833.3` is a double whose canonical form is bare integer digits
//! beyond 2^53, which the reader refuses as an integer literal; the signature covers those canonical
//! bytes, and nothing ever re-reads them as JSON.
#![no_main]

use agentbus_protocol::jcs;
use agentbus_protocol::json::{self, JsonError};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(value) = json::parse(data) else { return };
    let canonical = jcs::canonicalize(&value).expect("a parsed I-JSON value canonicalises");
    match json::parse(&canonical) {
        Ok(again) => assert_eq!(
            jcs::canonicalize(&again).expect("canonicalises"),
            canonical,
            "JCS is idempotent"
        ),
        Err(JsonError::IntegerOutOfRange { .. }) => {}
        Err(e) => panic!("canonical bytes are not I-JSON: {e}"),
    }
});
