//! The API's types of a workspace: files changed under it, and which agent step wrote each
//! line of a file (provenance).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use ts_rs::TS;

use crate::*;

api_type! {
    /// A `workspace/changed`: files a loaded session of the workspace depends on changed on disk
    /// (its instruction files, its configuration file, files an agent read or wrote) — not by an
    /// agent's own write. What the model is told is logged separately, as a note in the next
    /// request.
    pub struct WorkspaceChanged {
        /// The workspace root.
        pub workspace: String,
        /// The files, relative to the root, with what happened to each.
        pub files: Vec<dsh_session::FileChange>,
    }
}

api_type! {
    /// A `workspace/turnStarted`: a turn of a session of the workspace starts, whoever asked
    /// for it. Nothing of the turn is logged yet: `session/subscribe` from `fromSeq` delivers
    /// all of it, its `turn/end` included.
    pub struct WorkspaceTurnStarted {
        /// The workspace root.
        pub workspace: String,
        /// The session.
        pub session_id: String,
        /// The log's length as the turn starts: its events (`turn/start` first) come at or
        /// after this seq.
        pub from_seq: u64,
    }
}

api_type! {
    /// `workspace/provenance` params.
    pub struct WorkspaceProvenanceParams {
        /// The workspace (absolute).
        pub workspace: String,
        /// The file: absolute, or relative to the workspace.
        pub path: String,
        /// The file's text as the editor has it (unsaved changes included); default: the file
        /// on disk.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub text: Option<String>,
    }
}

api_type! {
    /// Lines of a file that one agent tool call wrote and that still stand.
    pub struct ProvenanceRange {
        /// First line, 0-based.
        pub start_line: u64,
        /// One past the last line.
        pub end_line: u64,
        /// The session.
        pub session_id: String,
        /// Its title (first prompt, on one line).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub title: Option<String>,
        /// The turn.
        pub turn: u64,
        /// The first line of the turn's prompt.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub prompt: Option<String>,
        /// The step whose message asked for the call.
        pub step: u64,
        /// The seq of that step's `step/start` (a fork point: `session/fork {atSeq}`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub step_seq: Option<u64>,
        /// `write_file` or `edit_file`.
        pub tool: String,
        /// The call id.
        pub call_id: String,
        /// The seq of the call's `tool/result`.
        pub seq: u64,
        /// Unix ms of that result.
        pub time_ms: u64,
        /// The step's profile.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub profile: Option<String>,
        /// The step's model.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub model: Option<String>,
        /// The step's usage (absent when it never finished).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub usage: Option<Usage>,
        /// The step's cache hit in percent.
        pub hit_percent: f64,
        /// What the step cost at the configured prices.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub cost: Option<Cost>,
    }
}

api_type! {
    /// `workspace/provenance` result.
    pub struct WorkspaceProvenanceResult {
        /// The file, relative to the workspace (`/`-separated).
        pub path: String,
        /// Its lines (`text.split('\n')`, without the empty piece after a final newline).
        pub lines: u64,
        /// The attributed ranges, in line order; across the workspace's sessions the newest
        /// write of a line wins.
        pub ranges: Vec<ProvenanceRange>,
        /// Why nothing was attributed, when the file was not looked at: outside the workspace,
        /// binary, too large.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub skipped: Option<String>,
        /// Session logs of the workspace that could not be read (each says which and why); the
        /// others still count.
        pub errors: Vec<String>,
    }
}
