//! Integration tests of dsh-checkpoint: filled in with the implementation.
