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
//! - The watch (`watch.rs`, [`CheckpointConfig::watch`], on by default): an inotify instance
//!   over every tracked directory, owned by the `Checkpointer` and drained synchronously at the
//!   start of each checkpoint, so that a checkpoint taken by a `Checkpointer` kept open examines
//!   only the paths reported changed instead of walking the tree; the result is the same as a
//!   full walk's. It walks the whole tree anyway whenever the watch cannot vouch (the first
//!   checkpoint, an overflowed queue, an ignore file changed, the root moved, the inotify limit
//!   reached — [`Checkpointer::watch_status`]), when asked ([`Checkpointer::checkpoint_full`];
//!   a restore's plan always does), and periodically ([`CheckpointConfig::full_scan_every`],
//!   [`CheckpointConfig::full_scan_interval`]): writes through a shared `mmap`, through a hard
//!   link made from outside the workspace since the last full walk, or by another machine to
//!   a network filesystem raise no event in the watched directories, and only a full walk sees
//!   them. [`Checkpoint::walk`] says which it was.
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
