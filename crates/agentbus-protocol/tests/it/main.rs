//! Integration tests of the protocol crate: one binary, one module per area, cases as files under
//! `tests/data/`.

#![allow(clippy::unwrap_used)]

mod cloudevents;
mod ed25519_vectors;
mod envelopes;
mod errors_doc;
mod es6_numbers;
mod frames;
mod jcs_vectors;
mod properties;
mod task_model;
mod task_table;

use std::path::PathBuf;

/// The crate's `tests/data` folder.
pub fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data")
}

/// Reads a file under `tests/data`.
#[track_caller]
pub fn read(rel: &str) -> Vec<u8> {
    let path = data_dir().join(rel);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}
