//! The `dsh` commands end to end: the real binary against an in-process mock provider.
//!
//! Each test starts its own mock on loopback, a temporary state directory and workspace, and
//! spawns `dsh` with `--home`, `--base-url` and `DEEPSEEK_API_KEY=sk-test` (the first command
//! starts the daemon for that home; dropping the fixture shuts it down). Requests the mock
//! recorded are compared, byte for byte, with what `dsh` rebuilds from its log.

mod anthropic;
mod changed;
mod compact;
mod config;
mod confinement;
mod escapes;
mod faults;
mod first_use;
mod header;
mod hooks;
mod llama;
mod mcp;
mod plan;
mod resume;
mod rewind;
mod sandbox;
mod scripting;
mod structured;
mod subagents;
mod web_fetch;
mod wire;
