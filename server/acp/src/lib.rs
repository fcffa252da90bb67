//! The ACP front: `dsh acp`, an Agent Client Protocol (v1) agent on stdio for Zed, JetBrains,
//! Neovim's and Emacs's ACP clients. It is a **client of dsh's own protocol** through the typed
//! client (`dsh_daemon::Client`): every ACP request becomes calls to the user's daemon, and the
//! session's log events, received through a subscription, become `session/update`s.
//!
//! It holds no session state of its own: what it keeps per session (the [`translate`] fold,
//! the subscription) is rebuilt from the log whenever a session is opened, so closing the
//! front (stdin's end) ends the front, never a turn. It does not run the agent, touch a log or
//! a provider, or start MCP servers: the editor's become the session's own through the daemon
//! (`session/mcpServers`). ACP framing, dispatch and the message types — requests, responses,
//! updates, error codes — are the `agent-client-protocol` SDK's; stdout carries ACP only, logs
//! go to stderr.
//!
//! `--provider` and `--model` (from [`FrontOptions`]) pin the sessions `session/new` creates,
//! whose model the answer's `configOptions` shows; flags the running daemon cannot honour fail
//! `initialize`. A prompt is never echoed to the connection that sent it.
//!
//! Extensions (documented in `protocol/acp.md`, built in `ext.rs` only): `_session/steering`
//! (the shape the Claude Code and Codex adapters use), `_dsh/fork`, `_dsh/request`, and the
//! per-step usage under `_meta["dsh/usage"]` of each `usage_update`.

mod backlog;
mod convert;
mod error;
mod ext;
#[doc(hidden)]
pub mod frame;
mod front;
pub mod translate;

pub use front::{FrontOptions, serve};
