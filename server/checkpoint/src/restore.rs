//! Restoring a checkpoint: [`Checkpointer::plan`] compares the workspace now with a target
//! checkpoint (and with the latest one, for conflicts); [`Checkpointer::apply`] carries the plan
//! out under a journal; [`Checkpointer::recover`] completes a journal a crash left behind.

use std::path::PathBuf;

use crate::error::{Blocked, PartWay, RestoreError};
use crate::{Checkpoint, Checkpointer, Hash};

/// What restoring a checkpoint would do, computed against the workspace as it is now. Every
/// path is relative to the workspace root; every list is sorted. The plan is its own dry run:
/// show it, then [`Checkpointer::apply`] it (at once: the workspace may change meanwhile).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestorePlan {
    /// The checkpoint restored.
    pub target: Hash,
    /// The checkpoint of the workspace as it was when planned: the state before the restore,
    /// so the restore can itself be undone by restoring `before.root`.
    pub before: Checkpoint,
    /// Paths present now that get the target's content, mode, link target or kind.
    pub restored: Vec<PathBuf>,
    /// Paths absent now that the target has (deleted or moved away since): created.
    pub created: Vec<PathBuf>,
    /// Paths present now that the target does not have (created since): removed.
    pub deleted: Vec<PathBuf>,
    /// Paths the restore would touch that changed since the latest checkpoint — by someone
    /// other than the agent, e.g. the user in an editor. [`Checkpointer::apply`] refuses while
    /// there are any, unless forced.
    pub conflicts: Vec<PathBuf>,
    /// Paths left as they are because a version is not stored: too large in the target (with
    /// its size there), or too large now and absent from the target (with its size now: dsh
    /// never removes content it could not bring back).
    pub not_restorable: Vec<(PathBuf, u64)>,
    /// Objects the restore needs that the store no longer has (collected, or never written by
    /// an incomplete checkpoint). [`Checkpointer::apply`] refuses while there are any.
    pub missing_objects: Vec<Hash>,
    /// Paths that cannot be restored safely (a symbolic link or a non-empty untracked
    /// directory in the way). [`Checkpointer::apply`] refuses while there are any.
    pub blocked: Vec<Blocked>,
}

/// What [`Checkpointer::apply`] did: the plan's lists, all done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// The checkpoint restored.
    pub target: Hash,
    /// Paths rewritten to the target's state.
    pub restored: Vec<PathBuf>,
    /// Paths created.
    pub created: Vec<PathBuf>,
    /// Paths removed.
    pub deleted: Vec<PathBuf>,
}

/// What [`Checkpointer::recover`] found and did with a journal a crash left behind.
#[derive(Debug)]
pub enum Recovered {
    /// The journal was complete: the restore was rolled forward to its end.
    Completed {
        /// The checkpoint the interrupted restore was restoring.
        target: Hash,
        /// Every path the journal listed, now in the target's state.
        paths: Vec<PathBuf>,
    },
    /// The journal was torn (the crash came while it was being written, before anything was
    /// touched): discarded, the workspace is as it was before the restore.
    Discarded,
    /// Rolling forward failed part-way; the journal is removed and the state is reported.
    PartWay {
        /// The checkpoint the interrupted restore was restoring.
        target: Hash,
        /// Exactly which paths are in which state.
        state: PartWay,
    },
}

impl Checkpointer {
    /// Plans restoring checkpoint `target`. Takes a checkpoint of the workspace as it is now
    /// (returned as [`RestorePlan::before`]: the state before the restore) and compares it with
    /// the target; conflicts are the paths the restore would touch whose state now differs
    /// from `latest` (the workspace's latest checkpoint before this call; `None`: no
    /// conflicts are looked for). Touches no file of the workspace.
    pub fn plan(
        &mut self,
        target: &Hash,
        latest: Option<&Hash>,
    ) -> Result<RestorePlan, RestoreError> {
        let _ = (target, latest);
        unimplemented!("API first: implemented in the next commit")
    }

    /// Carries out `plan`. Refuses, touching nothing, if it has missing objects or blocked
    /// paths, or conflicts unless `force`. Otherwise writes a journal (fsynced) of every
    /// action, then removes, creates and rewrites each path in turn (each file written to a
    /// temporary file in its directory and renamed over the path; modes restored; symbolic
    /// links recreated as links; no symbolic link is ever followed), then removes the journal.
    /// A failure part-way stops there and reports exactly which paths are in which state
    /// ([`RestoreError::PartWay`]).
    pub fn apply(&mut self, plan: &RestorePlan, force: bool) -> Result<Applied, RestoreError> {
        let _ = (plan, force);
        unimplemented!("API first: implemented in the next commit")
    }

    /// Completes a restore a crash interrupted: if a journal is left, rolls it forward (every
    /// content it writes is in the store) and removes it. `Ok(None)`: there was none. Call it
    /// when opening a workspace's checkpoints, before any checkpoint, restore or collection.
    pub fn recover(&mut self) -> Result<Option<Recovered>, RestoreError> {
        unimplemented!("API first: implemented in the next commit")
    }
}
