//! The log vocabulary: the event envelope, one payload type per event kind, and the line codec.
//!
//! A log line is `{"seq":N,"time":MS,"type":"<kind>","data":{...}}`. Decoding rejects what this
//! build does not know — an unknown kind or an unknown format version — with an error that names
//! the line, the offending value and what is supported. Logs are never migrated.

mod codec;
mod payload;

pub use codec::{DecodeError, DecodeErrorKind, decode_event, decode_log, encode_event};
pub use payload::*;

use serde::ser::SerializeStruct;

use crate::header::HeaderDelta;
use crate::plan::PlanUpdate;
use crate::task::TaskSpawn;

/// The only session log format version this build reads and writes.
pub const FORMAT_VERSION: u32 = 0;

/// One line of a session log.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    /// 0-based, contiguous position in the log.
    pub seq: u64,
    /// Unix time in milliseconds, supplied by the writer (this crate has no clock).
    pub time: u64,
    /// The kind and its payload.
    pub data: EventData,
}

impl Event {
    /// The event's kind as it appears in the log's `type` field.
    pub fn kind(&self) -> &'static str {
        self.data.kind()
    }
}

macro_rules! event_kinds {
    ($($(#[$doc:meta])* $variant:ident($payload:ty) = $kind:literal,)*) => {
        /// The payload of an event, one variant per event kind.
        #[derive(Clone, Debug, PartialEq)]
        pub enum EventData {
            $($(#[$doc])* $variant($payload),)*
        }

        /// Every event kind this build knows, in the order of the table in docs/log.md
        /// ("Event kinds").
        pub const EVENT_KINDS: &[&str] = &[$($kind),*];

        /// Each event kind with the name of its payload type (for generated client types).
        pub const EVENT_PAYLOADS: &[(&str, &str)] = &[$(($kind, stringify!($payload))),*];

        impl EventData {
            /// The kind string written in the envelope's `type` field.
            pub fn kind(&self) -> &'static str {
                match self {
                    $(Self::$variant(_) => $kind,)*
                }
            }

            fn decode(kind: &str, data: &str) -> Result<Self, DecodeErrorKind> {
                let bad = |error: serde_json::Error| DecodeErrorKind::BadData {
                    kind: kind.to_owned(),
                    detail: error.to_string(),
                };
                match kind {
                    $($kind => serde_json::from_str(data).map(Self::$variant).map_err(bad),)*
                    _ => Err(DecodeErrorKind::UnknownKind { kind: kind.to_owned() }),
                }
            }

            fn decode_value(kind: &str, data: serde_json::Value) -> Result<Self, DecodeErrorKind> {
                let bad = |error: serde_json::Error| DecodeErrorKind::BadData {
                    kind: kind.to_owned(),
                    detail: error.to_string(),
                };
                match kind {
                    $($kind => serde_json::from_value(data).map(Self::$variant).map_err(bad),)*
                    _ => Err(DecodeErrorKind::UnknownKind { kind: kind.to_owned() }),
                }
            }

            fn serialize_into<S: SerializeStruct>(&self, state: &mut S) -> Result<(), S::Error> {
                match self {
                    $(Self::$variant(payload) => state.serialize_field("data", payload),)*
                }
            }
        }

        /// Each event kind with the JSON Schema of its payload (for the generated API schema).
        #[cfg(feature = "schema")]
        pub fn event_payload_schemas(
            generator: &mut schemars::SchemaGenerator,
        ) -> Vec<(&'static str, schemars::Schema)> {
            vec![$(($kind, generator.subschema_for::<$payload>())),*]
        }
    };
}

event_kinds! {
    /// `session/meta`: format version, ids, workspace, fork origin. Always seq 0.
    SessionMeta(SessionMeta) = "session/meta",
    /// `turn/start`: a turn opens.
    TurnStart(TurnStart) = "turn/start",
    /// `turn/end`: a turn closes, with its stop reason.
    TurnEnd(TurnEnd) = "turn/end",
    /// `turn/limit`: a budget of the turn was reached; the turn stops (not model-visible).
    TurnLimit(TurnLimit) = "turn/limit",
    /// `user/message`: the prompt that opened a turn (surface).
    UserMessage(UserMessage) = "user/message",
    /// `steering/message`: text injected by a client; joins the next request (surface).
    SteeringMessage(SteeringMessage) = "steering/message",
    /// `context/message`: other model-visible text the harness adds (surface).
    ContextMessage(ContextMessage) = "context/message",
    /// `step/start`: the reconstruction boundary of one model request.
    StepStart(StepStart) = "step/start",
    /// `request/header`: a full header snapshot.
    RequestHeader(RequestHeader) = "request/header",
    /// `request/header-delta`: an amendment of the folded header.
    RequestHeaderDelta(HeaderDelta) = "request/header-delta",
    /// `request/sent`: adapter, sha256 and length of the exact wire body dispatched.
    RequestSent(RequestSent) = "request/sent",
    /// `assistant/chunk`: one streamed delta, as received.
    AssistantChunk(AssistantChunk) = "assistant/chunk",
    /// `assistant/message`: the assembled assistant message (surface).
    AssistantMessage(AssistantTurn) = "assistant/message",
    /// `tool/call`: a tool call starts executing.
    ToolCall(ToolCallStarted) = "tool/call",
    /// `tool/progress`: a note from a running tool.
    ToolProgress(ToolProgress) = "tool/progress",
    /// `tool/result`: the result the model sees, paired by `callId` (surface).
    ToolResult(ToolResult) = "tool/result",
    /// `plan/update`: the plan an `update_plan` call set, after its result (not model-visible).
    PlanUpdate(PlanUpdate) = "plan/update",
    /// `step/end`: finish reason and usage.
    StepEnd(StepEnd) = "step/end",
    /// `step/error`: the step failed or was cancelled; it left no message on the surface.
    StepError(StepError) = "step/error",
    /// `llm/retry`: the provider call is retried after a retryable failure.
    LlmRetry(LlmRetry) = "llm/retry",
    /// `mcp/wait`: a step waits for MCP servers before its request (not model-visible).
    McpWait(McpWait) = "mcp/wait",
    /// `approval/request`: a tool asks for permission.
    ApprovalRequest(ApprovalRequest) = "approval/request",
    /// `approval/decision`: what was decided.
    ApprovalDecision(ApprovalDecision) = "approval/decision",
    /// `compact/start`: a compaction begins.
    CompactStart(CompactStart) = "compact/start",
    /// `compact/summary`: the summarize one-shot's envelope scalars and its summary text.
    CompactSummary(CompactSummary) = "compact/summary",
    /// `surface/replace`: surface nodes `start..=end` become one node (surface).
    SurfaceReplace(SurfaceReplace) = "surface/replace",
    /// `workspace/checkpoint`: the workspace's files were recorded (not model-visible).
    WorkspaceCheckpoint(WorkspaceCheckpoint) = "workspace/checkpoint",
    /// `workspace/rewind`: files and/or the conversation returned to a checkpoint (not
    /// model-visible).
    WorkspaceRewind(WorkspaceRewind) = "workspace/rewind",
    /// `hook/run`: a hook of the user's configuration ran, and how it ended (not model-visible).
    HookRun(HookRun) = "hook/run",
    /// `task/spawn`: a `task` call's child session was created (not model-visible).
    TaskSpawn(TaskSpawn) = "task/spawn",
}

/// The events of a seq-ordered log from `seq` on: what an incremental fold has not seen yet.
pub(crate) fn since(events: &[Event], seq: u64) -> &[Event] {
    &events[events.partition_point(|event| event.seq < seq)..]
}
