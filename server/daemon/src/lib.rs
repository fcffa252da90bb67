//! The dsh daemon as a library: the live sessions and their turns, the API as one named handler
//! per method, the line transport (a pure admission step and the answering step), the socket
//! and network fronts, the lifecycle (`dsh serve`, shutdown, the in-process runner), the one
//! mapping of errors to JSON-RPC codes — and the one typed client every front uses.
//!
//! What it does not do: parse command lines or print for people (the `dsh` binary in
//! `server/cli` does), run the loop itself (`dsh-agent` does), or touch a log file except
//! through `dsh-store`.
//!
//! Map: `daemon.rs` (the sessions a daemon holds; turns and compaction), `live.rs` (one live
//! session: its tasks, its one lock of turn state, approvals), `api.rs` (the method table) and
//! `handlers.rs` (one handler per method), `views.rs` (what the handlers rebuild from a log),
//! `provenance.rs` (`workspace/provenance`, with its cache of folds),
//! `error.rs`, `admission.rs` and `connection.rs` (the line transport), `network.rs`
//! (WebSocket/HTTP with a token), `serve.rs` (lifecycle), `startup.rs` (what a daemon is started
//! with: `DaemonConfig`, the key handover), `settings.rs` (the configuration files, live),
//! `mcp.rs` and `mcp/` (MCP tool servers), `subagents.rs` (the children of `task` calls),
//! `client.rs`.

pub mod admission;
pub mod api;
mod checkpoints;
pub mod client;
mod commands;
pub mod connection;
pub mod daemon;
pub mod error;
mod handlers;
mod hooks;
mod images;
pub mod live;
pub mod mcp;
pub mod network;
pub mod provenance;
mod rewind;
pub mod serve;
pub mod settings;
pub mod startup;
mod subagents;
pub mod views;
mod watch;
pub mod web;

pub use client::{Client, ClientError, Unsolicited};
/// A prompt's output schema, checked as `session/prompt` checks it: a client (`dsh prompt
/// --output-schema`) refuses a bad one before it creates a session. And the `source` of the
/// context note that corrects an answer, which a transcript shows.
pub use dsh_agent::{OUTPUT_INVALID_SOURCE, OutputSchema};
pub use startup::DaemonConfig;
