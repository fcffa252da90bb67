//! The pure core of dsh: the session log's vocabulary and every fold over it.
//!
//! This crate defines what a session log *is* (the envelope `{seq, time, type, data}` and one
//! payload type per event kind), how a log prefix projects onto the messages a model sees
//! ([`Session`], [`derive_event_message`]), how the request header (call config, system prompt,
//! tool schemas) is folded from snapshots and deltas ([`fold_request_header`], [`diff_header`],
//! [`apply_header_delta`]), how any step's request is rebuilt from the log ([`reconstruct`]), and
//! which structural rules a well-formed log obeys ([`check_log`]).
//!
//! It deliberately does **no** I/O: no filesystem, no clock, no async runtime, no randomness.
//! Times and ids are inputs. Expected anomalies are values (diagnostics), never panics; every
//! fold is total. A tidy test in `tests/` enforces the absence of I/O names in this crate.
#![warn(missing_docs)]

mod approval;
mod check;
mod event;
mod header;
mod image;
mod instructions;
mod joined;
mod message;
mod money;
mod plan;
pub mod prompt_file;
mod provenance;
mod reconstruct;
mod seen;
mod surface;
mod task;
mod usage;

pub use approval::Approval;
pub use check::{Closing, Diagnostic, Severity, check_log, closing_events};
#[cfg(feature = "schema")]
pub use event::event_payload_schemas;
pub use event::{
    ApprovalDecision, ApprovalRequest, ApprovalVerdict, AssistantChunk, AssistantTurn, ChangeKind,
    CheckpointReason, ChunkDelta, CompactStart, CompactSummary, ContextMessage, DecodeError,
    DecodeErrorKind, EVENT_KINDS, EVENT_PAYLOADS, Event, EventData, FORMAT_VERSION, FileChange,
    FileSeen, ForkOrigin, HookEvent, HookOutcome, HookRun, InstructionFile, LimitKind, LlmRetry,
    McpWait, McpWaitReason, PromptCommand, RequestHeader, RequestSent, SessionMeta, SessionPin,
    SnapshotReason, SteeringMessage, StepEnd, StepError, StepStart, StopReason, SurfaceNode,
    SurfaceReplace, TooLargeFile, ToolCallStarted, ToolProgress, ToolResult, TurnEnd, TurnLimit,
    TurnStart, Usage, UserMessage, WorkspaceCheckpoint, WorkspaceRewind, decode_event, decode_log,
    encode_event,
};
pub use header::{
    EpochHeader, HeaderDelta, HeaderDeltaError, HeaderPlan, LlmCallConfig, ProviderKind,
    ResponseFormat, SystemDelta, ToolSchema, ToolsDelta, WireFormat, apply_header_delta,
    canonical_json, diff_header, fold_request_header, plan_header_event,
};
pub use image::{
    IMAGE_MEDIA_TYPES, ImageData, ImageError, ImageFormat, ImageRef, MAX_IMAGE_BYTES,
    MAX_REQUEST_IMAGE_BYTES, check_image, image_bytes, image_count, image_refs, pixel_size, sniff,
};
pub use instructions::{INSTRUCTIONS_SOURCE, InstructionFold, Noted};
pub use joined::joined_at;
pub use message::{
    AssistantMessage, ContentBlock, GenerateRequest, Message, SUMMARY_PREAMBLE, ToolCall,
    derive_event_message,
};
pub use money::{Cost, Price};
pub use plan::{
    CurrentPlan, MAX_PLAN_ENTRIES, MAX_PLAN_EXPLANATION_CHARS, MAX_PLAN_STEP_CHARS, PlanEntry,
    PlanStatus, PlanUpdate, UPDATE_PLAN_TOOL, check_plan, current_plan,
};
pub use provenance::{
    FileLines, Fit, Line as ProvenanceLine, Origin, Provenance, attribute, provenance,
};
pub use reconstruct::{
    ReconstructError, StepRequest, reconstruct, reconstruct_session_step,
    reconstruct_session_step_shared, reconstruct_step,
};
pub use seen::{SeenFiles, WORKSPACE_SOURCE};
pub use surface::{SeqError, Session, StepIndex, SurfaceEntry, SurfaceMark};
pub use task::{
    ParentLink, TASK_TOOL, TaskContext, TaskSpawn, interrupted_task_result, task_children,
};
pub use usage::{
    DROP_SLACK_TOKENS, PrefixCause, SKILL_TOOL, UsageFold, UsageRow, is_drop, usage_rows,
    usage_totals,
};

#[cfg(test)]
mod tests;
