//! Checkpoint benchmark: filled in with the implementation.

fn main() {}
