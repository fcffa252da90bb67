//! The crate's error types, one per boundary: the object store ([`ObjectError`]), taking
//! checkpoints and collecting ([`CheckpointError`]), planning and applying a restore
//! ([`RestoreError`]). Messages are for users: they name the path or the object.

use std::io;
use std::path::PathBuf;

use crate::Hash;

/// What can go wrong in the object store.
#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    /// A filesystem operation failed.
    #[error("{action} {}: {cause}", path.display())]
    Io {
        /// What was being done (`reading`, `writing`, ...), lowercase.
        action: &'static str,
        /// The file or directory involved.
        path: PathBuf,
        /// The OS error.
        cause: io::Error,
    },
    /// The object is not in the store (never written, or collected).
    #[error("object {0} is not in the checkpoint store (collected, or never written)")]
    Missing(Hash),
    /// The object's bytes do not hash to its name, or cannot be decoded.
    #[error("object {hash} in the checkpoint store is corrupt: {reason}")]
    Corrupt {
        /// The object.
        hash: Hash,
        /// What is wrong with it.
        reason: String,
    },
}

impl ObjectError {
    /// Whether the error is the disk (or quota) being full.
    pub fn is_disk_full(&self) -> bool {
        matches!(self, ObjectError::Io { cause, .. } if is_disk_full(cause))
    }
}

pub(crate) fn is_disk_full(error: &io::Error) -> bool {
    matches!(error.kind(), io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded)
}

/// What can go wrong taking a checkpoint or collecting. Disk full and unreadable files are not
/// errors of a checkpoint: it is returned marked incomplete ([`crate::Checkpoint::incomplete`]).
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// A filesystem operation failed (the workspace root unreadable, the state directory not
    /// creatable, ...).
    #[error("{action} {}: {cause}", path.display())]
    Io {
        /// What was being done, lowercase.
        action: &'static str,
        /// The file or directory involved.
        path: PathBuf,
        /// The OS error.
        cause: io::Error,
    },
    /// The object store failed.
    #[error(transparent)]
    Objects(#[from] ObjectError),
}

/// What can go wrong planning, applying or recovering a restore.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    /// Taking the checkpoint of the current state (the state before the restore) failed.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// The object store failed (a tree of the target or of the latest checkpoint unreadable).
    #[error(transparent)]
    Objects(#[from] ObjectError),
    /// Files changed since the latest checkpoint by someone other than the agent would be
    /// overwritten or removed; refused unless forced.
    #[error(
        "{} file(s) changed since the last checkpoint would be overwritten: {} (use force to \
         overwrite them)",
        .0.len(), list_paths(.0)
    )]
    Conflicts(Vec<PathBuf>),
    /// Objects the restore needs were collected or never written (an incomplete checkpoint).
    #[error(
        "the checkpoint cannot be restored: {} object(s) are missing from the store \
         (collected, or never written): {}",
        .0.len(), list_hashes(.0)
    )]
    MissingObjects(Vec<Hash>),
    /// Paths that cannot be restored without writing through a symbolic link or removing
    /// untracked files in a directory in the way; refused before anything was touched.
    #[error("{} path(s) cannot be restored: {}", .0.len(), list_blocked(.0))]
    Blocked(Vec<Blocked>),
    /// The restore's journal could not be written or removed; nothing in the workspace was
    /// touched if it could not be written.
    #[error("{action} the rewind journal {}: {cause}", path.display())]
    Journal {
        /// What was being done, lowercase.
        action: &'static str,
        /// The journal file.
        path: PathBuf,
        /// The OS error.
        cause: io::Error,
    },
    /// Applying failed part-way: some paths are restored, one failed, the rest are untouched.
    #[error("{0}")]
    PartWay(PartWay),
}

/// A path a restore will not touch, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocked {
    /// The path, relative to the workspace root.
    pub path: PathBuf,
    /// Why, for users (e.g. "its parent src is a symbolic link").
    pub reason: String,
}

/// The state of a restore that failed part-way: exactly which paths are in which state.
#[derive(Debug)]
pub struct PartWay {
    /// Paths done (restored, created or deleted as planned), in the order they were done.
    pub done: Vec<PathBuf>,
    /// The path that failed.
    pub failed: PathBuf,
    /// Why it failed (the OS error, or a refusal such as a symbolic link found in its way).
    pub cause: io::Error,
    /// Paths not reached: still as they were before the restore.
    pub not_reached: Vec<PathBuf>,
}

impl std::fmt::Display for PartWay {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            formatter,
            "the restore failed at {}: {}; {} path(s) were restored before it ({}), {} were not \
             reached and are unchanged ({})",
            self.failed.display(),
            self.cause,
            self.done.len(),
            list_paths(&self.done),
            self.not_reached.len(),
            list_paths(&self.not_reached),
        )
    }
}

const LISTED: usize = 20;

fn list_paths(paths: &[PathBuf]) -> String {
    let mut text: Vec<String> =
        paths.iter().take(LISTED).map(|path| path.display().to_string()).collect();
    if paths.len() > LISTED {
        text.push(format!("and {} more", paths.len() - LISTED));
    }
    text.join(", ")
}

fn list_hashes(hashes: &[Hash]) -> String {
    let mut text: Vec<String> = hashes.iter().take(LISTED).map(Hash::to_string).collect();
    if hashes.len() > LISTED {
        text.push(format!("and {} more", hashes.len() - LISTED));
    }
    text.join(", ")
}

fn list_blocked(blocked: &[Blocked]) -> String {
    let mut text: Vec<String> = blocked
        .iter()
        .take(LISTED)
        .map(|blocked| format!("{} ({})", blocked.path.display(), blocked.reason))
        .collect();
    if blocked.len() > LISTED {
        text.push(format!("and {} more", blocked.len() - LISTED));
    }
    text.join(", ")
}
