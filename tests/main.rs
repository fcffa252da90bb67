//! The workspace's integration test binary: tidy rules, golden reconstructions, and the
//! end-to-end tests by subject — `cli` (the `dsh` commands against the mock) and `api` (the
//! daemon's JSON-RPC API: methods, clients, lifecycle, bad input, security) — over one fixture
//! (`support`); `lsp`, the LSP front seen from its stdio and from the daemon's socket.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod api;
mod cli;
mod golden;
mod lsp;
mod support;
mod tidy;
