//! [`Checkpointer`]: one workspace's checkpoints — taking them ([`Checkpointer::checkpoint`]),
//! restoring them (`restore.rs`) and collecting them (`collect.rs`).
//!
//! A checkpoint walks the workspace with the standard ignore rules, consults the metadata
//! index (`index.rs`) so that only files whose metadata changed are read, stores new contents
//! in the object store and builds one tree object per directory (`tree.rs`). An unchanged
//! workspace gives the same root hash and writes nothing.

use std::path::{Path, PathBuf};

use crate::Hash;
use crate::error::CheckpointError;
use crate::objects::ObjectStore;

/// The default cap on a tracked file's size: larger files are listed as too large, not stored.
pub const DEFAULT_MAX_FILE_SIZE: u64 = 8 * 1024 * 1024;

/// How checkpoints are taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointConfig {
    /// Files larger than this (bytes) are recorded as too large: listed, not stored, not
    /// restorable. Default [`DEFAULT_MAX_FILE_SIZE`].
    pub max_file_size: u64,
}

impl Default for CheckpointConfig {
    fn default() -> CheckpointConfig {
        CheckpointConfig { max_file_size: DEFAULT_MAX_FILE_SIZE }
    }
}

/// One checkpoint taken: the workspace's tracked state at that moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// The root tree's hash: the checkpoint's identity. Equal roots are equal states.
    pub root: Hash,
    /// Tracked paths (files, symbolic links, too-large files) in the checkpoint.
    pub files: usize,
    /// Paths created, removed or changed (content, mode, link target, kind) since the previous
    /// checkpoint of this workspace, sorted. Every path if there was none (or its index was
    /// lost).
    pub changed: Vec<PathBuf>,
    /// Files over the size cap, with their sizes, sorted: listed, not stored, not restorable.
    pub too_large: Vec<(PathBuf, u64)>,
    /// Why the checkpoint is incomplete (disk full, files that could not be read), if it is. An
    /// incomplete checkpoint still has a root; restoring it reports what is missing.
    pub incomplete: Option<String>,
}

/// The checkpoints of one workspace: its root, its state directory (object store, metadata
/// index, rewind journal) and the size cap.
///
/// One `Checkpointer` per workspace at a time: the caller serializes its use (the methods take
/// `&mut self`; two processes must not open the same state directory at once). Every method
/// blocks on the filesystem; call it from a blocking thread.
#[derive(Debug)]
pub struct Checkpointer {
    pub(crate) root: PathBuf,
    #[allow(dead_code)] // API-first commit: read by the implementation
    pub(crate) state_dir: PathBuf,
    pub(crate) objects: ObjectStore,
    #[allow(dead_code)] // API-first commit: read by the implementation
    pub(crate) config: CheckpointConfig,
}

impl Checkpointer {
    /// Opens the checkpoints of the workspace at `workspace_root`, kept in `state_dir` (the
    /// workspace's state directory: `objects/`, `checkpoint-index` and `rewind-journal` go in
    /// it; created 0700 if missing). Nothing under `state_dir` is ever tracked, even if it lies
    /// inside the workspace. Does not recover a crashed restore: call
    /// [`Checkpointer::recover`] before the first checkpoint, restore or collection.
    pub fn open(
        workspace_root: &Path,
        state_dir: &Path,
        config: CheckpointConfig,
    ) -> Result<Checkpointer, CheckpointError> {
        let root = workspace_root.canonicalize().map_err(|cause| CheckpointError::Io {
            action: "opening the workspace",
            path: workspace_root.to_path_buf(),
            cause,
        })?;
        crate::objects::create_private_dir(state_dir).map_err(|cause| CheckpointError::Io {
            action: "creating",
            path: state_dir.to_path_buf(),
            cause,
        })?;
        let state_dir = state_dir.canonicalize().map_err(|cause| CheckpointError::Io {
            action: "opening",
            path: state_dir.to_path_buf(),
            cause,
        })?;
        let objects = ObjectStore::open(&state_dir.join("objects"))?;
        Ok(Checkpointer { root, state_dir, objects, config })
    }

    /// The workspace root (canonicalized).
    pub fn workspace_root(&self) -> &Path {
        &self.root
    }

    /// The object store (e.g. [`ObjectStore::contains`] on a checkpoint's root tells whether
    /// it is still available: collection removes dropped checkpoints' roots).
    pub fn objects(&self) -> &ObjectStore {
        &self.objects
    }

    /// Takes a checkpoint of the workspace now. Reads only files whose metadata (size, mtime,
    /// ctime, inode, mode) changed since the last checkpoint, or whose mtime is too recent to
    /// vouch for them. Disk full or unreadable files do not fail it: the checkpoint is
    /// returned with [`Checkpoint::incomplete`] saying what.
    pub fn checkpoint(&mut self) -> Result<Checkpoint, CheckpointError> {
        unimplemented!("API first: implemented in the next commit")
    }
}
