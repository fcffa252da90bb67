//! Integration tests of the agent loop against the mock provider over real HTTP.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod compaction;
mod date;
mod instructions;
mod limits;
mod plan;
mod steering;
mod support;
