//! The workspace's integration test binary: tidy rules, golden reconstructions, and the
//! end-to-end tests by subject — `cli` (the `dsh` commands against the mock) and `api` (the
//! daemon's JSON-RPC API: methods, clients, lifecycle, bad input, security) — over one fixture
//! (`support`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod api;
mod cli;
mod golden;
mod support;
mod tidy;
