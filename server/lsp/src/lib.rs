//! The LSP front: `dsh lsp`, a language server on stdio for any editor with an LSP client
//! (Neovim's built-in client, Helix, Kate, Sublime, Emacs eglot, VS Code). It is a **client of
//! dsh's own protocol** through the typed client (`dsh_daemon::Client`), like `dsh acp`.
//!
//! On the documents the editor opens it shows which agent step wrote each line that still
//! stands (`workspace/provenance`, aligned with the editor's unsaved text): a hover with the
//! session, turn prompt, step, model, usage and cost, and a code lens above each agent hunk that
//! opens what the model saw at that step. Commands (`workspace/executeCommand`) prompt, steer,
//! cancel, fork and rewind sessions of the workspace (a rewind asks first, with
//! `window/showMessageRequest`) and open "what the model saw" (a read-only file under the
//! daemon's state directory, shown with `window/showDocument`); a turn of the workspace reports
//! through `$/progress` and ends with `window/showMessage`.
//!
//! It holds no session state: attribution is asked of the daemon (and re-asked when a log or
//! the text changes); closing the front ends nothing but the front. It listens rather than
//! polls: turns are heard of through the daemon's notifications, so an idle front asks the
//! daemon nothing. It does not edit documents, run the agent or read logs itself. LSP framing
//! and dispatch are `tower-lsp-server`'s; stdout carries LSP only, logs go to stderr.
//! Documented in `docs/lsp.md`.
//!
//! Modules: `server` (the LSP surface and the shared state), `provenance` (documents, hovers,
//! code lenses), `commands`, `rewind` (the rewind command's question and call), `saw` (what the
//! model saw, as a file), `follow` (a followed turn's progress, approvals and end), `listen`
//! (the daemon's notifications), `text` (what people read).

mod commands;
mod follow;
mod listen;
mod provenance;
mod rewind;
mod saw;
mod server;
pub mod text;

pub use commands::COMMANDS;
pub use server::serve;
