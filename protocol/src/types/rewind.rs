//! The API's types of workspace checkpoints and rewinds: listing a session's checkpoints,
//! returning the workspace's files and the conversation to one, the error data a refused or
//! failed rewind carries, and the checkpoint stores in `daemon/status`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use ts_rs::TS;

use crate::*;

api_type! {
    /// One checkpoint of a session (`session/checkpoints`): a `workspace/checkpoint` event of
    /// its log, or the state before a rewind named by its `workspace/rewind` event.
    pub struct CheckpointEntry {
        /// The seq of the event that names it: what `session/rewind`'s `checkpoint` takes.
        pub seq: u64,
        /// The step about to run tools when it was taken (absent at a turn's end and before a
        /// rewind).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub step: Option<u64>,
        /// Why it was taken.
        pub reason: CheckpointReason,
        /// Unix ms of its event.
        pub time: u64,
        /// The hash of its root tree.
        pub root: String,
        /// Files and symlinks recorded (0 for the state before a rewind, whose count the
        /// rewind's event does not carry).
        pub files: u64,
        /// Paths that differ from the workspace's previous checkpoint.
        #[serde(default)]
        pub changed: Vec<String>,
        /// Files over the size cap: not restorable.
        #[serde(default)]
        pub too_large: Vec<TooLargeFile>,
        /// What it could not record, when it is incomplete.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub incomplete: Option<String>,
        /// Whether every object it needs is still in the workspace's store (false once
        /// collection dropped it: a rewind to it is refused).
        pub available: bool,
    }
}

api_type! {
    /// `session/checkpoints` result.
    pub struct SessionCheckpointsResult {
        /// The session's checkpoints, oldest first.
        pub checkpoints: Vec<CheckpointEntry>,
    }
}

api_type! {
    /// `session/rewind` params: return the workspace's files and/or the conversation to just
    /// before step `step` ran, or the files to the checkpoint logged at seq `checkpoint`.
    /// Exactly one of `step` and `checkpoint`.
    pub struct SessionRewindParams {
        /// The session.
        pub session_id: String,
        /// Rewind to just before this step ran (1-based, across the session).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub step: Option<u64>,
        /// Restore the files to the checkpoint with this seq (`session/checkpoints`): files
        /// only, so `conversation` must not be true.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub checkpoint: Option<u64>,
        /// Restore the files (default true).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub files: Option<bool>,
        /// Rewind the conversation: a fork at the step's boundary continues (default true with
        /// `step`, false with `checkpoint`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub conversation: Option<bool>,
        /// Overwrite files changed since the last checkpoint by someone other than the agent
        /// (default false: such files refuse the rewind, `rewindConflict`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub force: Option<bool>,
        /// Say what the rewind would do, and do nothing (default false).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub dry_run: Option<bool>,
    }
}

api_type! {
    /// `session/rewind` result: what was done (or, with `dryRun`, what would be).
    pub struct SessionRewindResult {
        /// The session that continues: the fork when the conversation was rewound, else the
        /// session itself (with `dryRun`, the session itself).
        pub session_id: String,
        /// Files rewritten to their checkpoint content.
        pub restored: Vec<String>,
        /// Files (and symlinks) recreated: absent now, present at the checkpoint.
        pub created: Vec<String>,
        /// Files removed: present now, absent at the checkpoint.
        pub deleted: Vec<String>,
        /// Files changed since the last checkpoint by someone other than the agent that the
        /// rewind overwrote (with `force`) or would refuse to (with `dryRun`).
        pub conflicts: Vec<String>,
        /// Files over the size cap at the checkpoint: not restored.
        pub not_restorable: Vec<String>,
        /// What the checkpoint could not record, when it is incomplete: those files are not
        /// restored.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub incomplete: Option<String>,
        /// The root of the checkpoint restored to (for a conversation-only rewind, the step's
        /// checkpoint, when it has one).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub checkpoint: Option<String>,
        /// The seq, in the rewound session, of the checkpoint of the state just before the
        /// rewind (a rewind to it undoes this one); absent when no file was touched.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub before_seq: Option<u64>,
        /// Whether this was a dry run.
        pub dry_run: bool,
    }
}

api_type! {
    /// The error data of a rewind refused for conflicts (`rewindConflict`).
    pub struct RewindConflictData {
        /// Files changed since the last checkpoint by someone other than the agent, which the
        /// rewind would overwrite.
        pub conflicts: Vec<String>,
    }
}

api_type! {
    /// The error data of a rewind refused because the checkpoint cannot be restored
    /// (`checkpointUnavailable`).
    pub struct CheckpointUnavailableData {
        /// The objects (SHA-256, hex) the workspace's store no longer has.
        #[serde(default)]
        pub missing_objects: Vec<String>,
    }
}

api_type! {
    /// One file a rewind that failed part-way could not restore.
    pub struct RewindFailure {
        /// Its path.
        pub path: String,
        /// The error, for people.
        pub error: String,
    }
}

api_type! {
    /// The error data of a rewind that failed part-way (`rewindFailed`): exactly which files
    /// are in which state. Files not listed were not touched.
    pub struct RewindFailedData {
        /// Files already at their checkpoint state.
        pub done: Vec<String>,
        /// Files that failed, with why (each left as it was before the rewind).
        pub failed: Vec<RewindFailure>,
        /// Files the rewind did not reach (left as they were).
        pub not_reached: Vec<String>,
    }
}

api_type! {
    /// A workspace's checkpoint store in `daemon/status`.
    pub struct CheckpointStoreStatus {
        /// The workspace.
        pub workspace: String,
        /// Bytes its objects take on disk.
        pub bytes: u64,
        /// The budget (`[checkpoints] budget`).
        pub budget: u64,
        /// Checkpoints dropped by the last collection to keep within the budget, oldest first
        /// (their roots); a rewind to them is refused.
        #[serde(default)]
        pub dropped: Vec<String>,
        /// Bytes the last collection freed.
        pub freed: u64,
        /// What crash recovery did at start (a rewind's journal completed), when it did
        /// anything.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub recovered: Option<String>,
        /// Why the store's inotify watch could not be kept (its limit reached), when it could
        /// not: every checkpoint then walks the whole tree.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub watch: Option<String>,
    }
}
