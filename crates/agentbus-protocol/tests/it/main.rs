//! Integration tests of the protocol crate: one binary, one module per area, cases as files under
//! the repository's `tests/data/` (shared with the Python and TypeScript libraries, which must agree
//! byte for byte) and, for the task tables only this crate reads, the crate's own `tests/data/`.

#![allow(clippy::unwrap_used)]

mod cloudevents;
mod ed25519_vectors;
mod envelopes;
mod errors_doc;
mod es6_numbers;
mod frames;
mod jcs_vectors;
mod properties;
mod signing_inputs;
mod task_model;
mod task_table;

use std::path::PathBuf;

/// The repository's `tests/data` folder: the conformance data every implementation reads.
pub fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/data")
}

/// The crate's own `tests/data` folder (the task tables).
pub fn crate_data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data")
}

/// Reads a file under the repository's `tests/data`.
#[track_caller]
pub fn read(rel: &str) -> Vec<u8> {
    let path = data_dir().join(rel);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Reads a file under the crate's `tests/data`.
#[track_caller]
pub fn read_crate(rel: &str) -> Vec<u8> {
    let path = crate_data_dir().join(rel);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Whether to rewrite expected-output files under `tests/data` instead of comparing with them.
pub fn bless() -> bool {
    std::env::var_os("AGENTBUS_BLESS").is_some()
}

/// Compares `got` with the expected-output file `rel` under `tests/data`, or writes it when
/// blessing: the file, not a snapshot inside this crate, is what the other libraries compare with.
#[track_caller]
pub fn expect_file(rel: &str, got: &str) {
    let path = data_dir().join(rel);
    if bless() {
        std::fs::write(&path, got).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (AGENTBUS_BLESS=1 cargo test -p agentbus-protocol writes it)",
            path.display()
        )
    });
    assert_eq!(got, want, "{}", path.display());
}
