//! Integration tests of the mock server over real HTTP, one binary for the crate.
//!
//! Each test starts its own server on an ephemeral port, talks to it with reqwest, and checks a
//! behaviour docs/mock.md describes. Nothing sleeps to synchronise: a request's effects (cache
//! units, balance, records) are in place before the last byte of its response is handed over.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cache;
mod faults;
mod fuzz;
mod images;
mod streaming;
mod support;
mod validation;
