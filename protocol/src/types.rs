//! The API's params and results, by what they are about.

pub mod daemon;
pub mod mcp;
pub mod rewind;
pub mod session;
pub mod workspace;
