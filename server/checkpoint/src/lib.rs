//! Checkpoints of a workspace, for rewind: the state of every tracked file recorded in a
//! content-addressed store, restorable later, exactly and safely.
//!
//! - [`ObjectStore`] (`objects.rs`): objects named by the SHA-256 of their uncompressed bytes,
//!   zstd-compressed when it pays, written atomically and durably, verified on read.
//! - [`Checkpointer`] (`checkpoint.rs`): the checkpoints of one workspace. A checkpoint is a
//!   tree of per-directory objects (`tree.rs`), git-like; its root hash is its identity. The
//!   tracked set is what the `ignore` crate walks from the workspace root with the standard
//!   filters (`.gitignore`, `.ignore`, `.git/info/exclude`; hidden files included; `.git/`
//!   excluded; no git repository needed): regular files and symbolic links (recorded as links,
//!   never followed), files over a size cap listed as too large. A metadata index
//!   (`index.rs`) spares re-reading unchanged files.
//! - Restores (`restore.rs`): [`Checkpointer::plan`] (the dry run: restored, created, deleted,
//!   conflicts, not restorable, missing objects), [`Checkpointer::apply`] under a journal
//!   (`journal.rs`), [`Checkpointer::recover`] after a crash.
//! - Collection (`collect.rs`): [`Checkpointer::collect`] under a byte budget.
//!
//! This crate does **not** know sessions, steps, the log or the configuration files: the
//! caller says when to checkpoint, which roots are referenced and what the limits are. It runs
//! no async runtime (every call blocks) and depends on no crate of ours. Unix only: names are
//! bytes and modes are permission bits.

mod checkpoint;
mod collect;
mod error;
mod files;
mod hash;
mod index;
mod journal;
mod objects;
mod restore;
mod tree;
mod watch;

pub use checkpoint::{
    Checkpoint, CheckpointConfig, Checkpointer, DEFAULT_FULL_SCAN_EVERY,
    DEFAULT_FULL_SCAN_INTERVAL, DEFAULT_MAX_FILE_SIZE,
};
pub use collect::Collected;
pub use error::{Blocked, CheckpointError, ObjectError, PartWay, RestoreError};
pub use hash::{Hash, ParseHashError};
pub use objects::{ObjectStore, Swept};
pub use restore::{Applied, Recovered, RestorePlan};
pub use watch::{Walk, WatchStatus};

#[cfg(test)]
mod tests;
