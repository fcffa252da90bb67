//! Integration tests of the agent loop against the mock provider over real HTTP.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod compaction;
mod date;
mod instructions;
mod limits;
mod plan;
mod steering;
mod support;
mod web_convert;

/// The `web_convert` fuzz target's checks (`fuzz/src/web_convert.rs`), run on its seeds.
#[path = "../../../../fuzz/src/web_convert.rs"]
mod web_convert_check;
