//! Integration tests of the adapters over real HTTP: against a tiny scripted server
//! (`raw`), against the project's DeepSeek-compatible mock (`mock`), and against the real API
//! when `DEEPSEEK_API_KEY` is set (`live`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

mod anthropic;
mod fuzz;
mod live;
mod mock;
mod raw;
mod support;
