//! The daemon: one long-running process per user that holds the sessions and their loops, and
//! serves the JSON-RPC API to editors, scripts and the CLI.

pub mod api;
pub mod error;
pub mod lines;
pub mod network;
pub mod serve;
pub mod state;
