//! Tests of the local store and delivery, named after the checklist ids they prove (`lm_…`).

#![allow(clippy::unwrap_used)]
