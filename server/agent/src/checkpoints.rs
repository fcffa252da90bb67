//! The checkpoints seam: the loop asks it to record the workspace's files before a step runs a
//! tool that can change them and when a turn ends (before its `turn/end`), and logs what it answers as
//! `workspace/checkpoint` (not model-visible). The daemon implements it over the workspace's
//! object store (`dsh-checkpoint`); the loop knows nothing of how.

use dsh_session::{CheckpointReason, WorkspaceCheckpoint};

use crate::approval::BoxFuture;

/// Records the workspace's files on request.
pub trait Checkpoints: Send + Sync {
    /// Records the workspace now, for `step` (the step about to run tools that can change files)
    /// or, with `None`, at a turn's end. Answers the event to log, or `None` when checkpoints
    /// are off or none could be taken (the implementation says why in its own log; the step
    /// runs either way).
    fn checkpoint(
        &self,
        step: Option<u64>,
        reason: CheckpointReason,
    ) -> BoxFuture<'static, Option<WorkspaceCheckpoint>>;
}
