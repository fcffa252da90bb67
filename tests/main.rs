//! The workspace's integration test binary: tidy rules, golden reconstructions, end to end.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod daemon;
mod e2e;
mod golden;
mod tidy;
