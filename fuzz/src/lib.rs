//! The checks of dsh's fuzz targets, one module per target, each a `check` function over one
//! input. The targets in `fuzz_targets/` are thin wrappers around them, and each owning crate's
//! regression test runs its committed inputs (`tests/data/fuzz/<target>/`) through the same
//! module on stable, included by path where the crate has an integration-test binary
//! (`sse`, `mock_request`, `log_load` with `folds`). The modules use only public APIs and refer
//! to one another only through `super::`, so that they compile in either place.
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod acp_frame;
pub mod admission;
pub mod config;
pub mod events;
pub mod folds;
pub mod log_events;
pub mod log_line;
pub mod log_load;
pub mod mock_request;
pub mod prompt_file;
pub mod sse;
pub mod web_convert;
