//! The payload types of the log's event kinds, one per kind (the table is in `event.rs`), and
//! the types they are made of. Each is a plain serde struct; unknown fields are refused where
//! the log's schema says so.

use serde::{Deserialize, Serialize};

use crate::header::{EpochHeader, WireFormat};
use crate::image::ImageRef;
use crate::message::AssistantMessage;

/// `session/meta`.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS), ts(optional_fields))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SessionMeta {
    /// Must equal [`FORMAT_VERSION`].
    pub format_version: u32,
    /// The session's id.
    pub session_id: String,
    /// The canonical workspace path.
    pub workspace: String,
    /// Where this session was forked from, if it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<ForkOrigin>,
    /// What the session was pinned to when it was created (or forked): the call options its
    /// requests start from until a header is logged, and on top of the logged header at the
    /// first request of each loop. Absent in logs from before pins were logged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pin: Option<SessionPin>,
    /// The parent of a child session a `task` call runs: the parent session, the call and the
    /// child's depth. Absent for every other session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<crate::task::ParentLink>,
}

/// The call options a session is pinned to (`session/meta.pin`): the profile and model asked for
/// or configured at creation, and the options given explicitly. Each absent field leaves the
/// configuration's value.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS), ts(optional_fields))]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SessionPin {
    /// The provider profile (its name in the configuration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// The model id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The output limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Thinking on or off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking: Option<bool>,
    /// The reasoning effort.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<String>,
    /// The sampling temperature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Steps per turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_steps: Option<u32>,
}

/// The origin of a fork: the parent session and the seq the fork was cut at (exclusive).
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS), ts(optional_fields))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ForkOrigin {
    /// The parent session.
    pub session_id: String,
    /// The fork holds the parent's events with `seq < self.seq`.
    pub seq: u64,
}

/// `turn/start`.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS), ts(optional_fields))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnStart {
    /// 1-based turn number.
    pub turn: u64,
}

/// Why a turn ended.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS), ts(optional_fields))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum StopReason {
    /// The model stopped on its own.
    Completed,
    /// A client cancelled, the daemon shut down, or a fork cut the turn.
    Cancelled,
    /// A step failed.
    Error,
    /// The session's step limit (`maxSteps` of its configuration) was hit.
    MaxSteps,
    /// A budget the prompt set (`limits` of `session/prompt`) was reached: the `turn/limit`
    /// before the `turn/end` names it.
    Limit,
    /// The prompt asked for an answer matching a JSON Schema (`session/prompt`'s
    /// `outputSchema`), and the model's last answer, after one correction, did not: the
    /// `turn/end`'s `error` names what is wrong.
    OutputInvalid,
}

impl StopReason {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::Cancelled => "cancelled",
            Self::Error => "error",
            Self::MaxSteps => "maxSteps",
            Self::Limit => "limit",
            Self::OutputInvalid => "outputInvalid",
        }
    }
}

/// `turn/end`.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS), ts(optional_fields))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnEnd {
    /// The turn that ends.
    pub turn: u64,
    /// Why.
    pub reason: StopReason,
    /// A human-readable error, when `reason` is `error` or `cancelled` says more.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A budget of one turn (`session/prompt`'s `limits`).
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum LimitKind {
    /// Steps run by the turn.
    MaxSteps,
    /// Tokens of the turn: every finished step's prompt and output tokens, summed.
    MaxTokens,
    /// What the turn's finished steps cost, in USD, at the configured prices (as
    /// `session/usage` prices them).
    MaxCost,
    /// Seconds since the turn started.
    Timeout,
}

impl LimitKind {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::MaxSteps => "maxSteps",
            Self::MaxTokens => "maxTokens",
            Self::MaxCost => "maxCost",
            Self::Timeout => "timeout",
        }
    }
}

/// `turn/limit`: a budget of the turn was reached, and the turn stops — between steps, never in
/// the middle of one; a timeout cancels the turn as `session/cancel` does (the step or tool it
/// interrupts is logged cancelled). Followed by the turn's `turn/end` with reason `limit`. Not
/// model-visible.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS), ts(optional_fields))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnLimit {
    /// Which budget.
    pub limit: LimitKind,
    /// The budget, as given: steps, tokens, USD or seconds.
    #[cfg_attr(feature = "schema", ts(type = "number"))]
    pub value: serde_json::Number,
    /// What the turn had spent when it stopped, in the same unit: a step ends whole, so
    /// tokens and cost may pass the budget by the last step's.
    #[cfg_attr(feature = "schema", ts(type = "number"))]
    pub spent: serde_json::Number,
}

/// `user/message`.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS), ts(optional_fields))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserMessage {
    /// The prompt text (a prompt command's expansion, when `command` is set).
    pub text: String,
    /// The prompt command this text is the expansion of (`/name args`: `docs/skills.md`);
    /// absent for a prompt sent as typed. Not model-visible: the model sees `text`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<PromptCommand>,
    /// Images given with the prompt, after its text, by reference (their bytes are in the
    /// workspace's object store; docs/log.md, "Images").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "schema", ts(as = "Option<Vec<ImageRef>>", optional))]
    pub images: Vec<ImageRef>,
}

/// The prompt command a `user/message` was expanded from.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS), ts(optional_fields))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PromptCommand {
    /// Its name (`review` for `/review`).
    pub name: String,
    /// Its file: absolute for the user's, relative to the workspace root for the workspace's.
    pub source: String,
}

/// `steering/message`.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS), ts(optional_fields))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SteeringMessage {
    /// The injected text.
    pub text: String,
}

/// `context/message`.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS), ts(optional_fields))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContextMessage {
    /// The model-visible text.
    pub text: String,
    /// What added it (e.g. `date`, `instructions`), for people reading the log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// On an `instructions` note: every instruction file as the model knows it once this note
    /// is read (name and text, in order; an absent file is not listed). Not model-visible — the
    /// note's `text` is — but what the next step compares the workspace's files with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<Vec<InstructionFile>>,
    /// On an `instructions` or `workspace` note: the files it is about and what happened to
    /// each (for clients; not model-visible). A `workspace` note's hashes are what the agent
    /// knows of each file from then on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<Vec<FileChange>>,
}

/// A file a note is about.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS), ts(optional_fields))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileChange {
    /// Its path relative to the workspace root.
    pub path: String,
    /// What happened to it.
    pub change: ChangeKind,
    /// SHA-256 (hex) of its content now, when it is a readable regular file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

/// What happened to a file.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ChangeKind {
    /// Its content changed.
    Edited,
    /// It appeared.
    Added,
    /// It is gone.
    Deleted,
    /// Something other than a regular file stands at its path now (a directory, a symlink out
    /// of the workspace), or it cannot be read.
    Replaced,
}

/// One instruction file's text as rendered into the system prompt (trailing whitespace trimmed,
/// long files cut with a note).
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS), ts(optional_fields))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstructionFile {
    /// Its path relative to the workspace root (`AGENTS.md`).
    pub name: String,
    /// Its text.
    pub text: String,
}

/// `step/start`.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS), ts(optional_fields))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepStart {
    /// Step number, 1-based across the whole session.
    pub step: u64,
    /// The turn this step belongs to.
    pub turn: u64,
}

/// Why a header snapshot was logged.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS), ts(optional_fields))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum SnapshotReason {
    /// The first request of a log that had no header.
    Initial,
    /// The first request of a loop instance over a log that had one.
    Resume,
    /// A change the delta encoding cannot express.
    Fallback,
}

/// `request/header`.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS), ts(optional_fields))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RequestHeader {
    /// Why the snapshot was taken.
    pub reason: SnapshotReason,
    /// The full header.
    pub header: EpochHeader,
}

/// `request/sent`.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS), ts(optional_fields))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestSent {
    /// The adapter that serialized the body (e.g. `deepseek-chat/v1`).
    pub adapter: String,
    /// Lowercase hex sha256 of the exact body bytes.
    pub sha256: String,
    /// Length of the body in bytes.
    pub bytes: u64,
}

/// One streamed delta, normalized across providers but otherwise as received.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS), ts(optional_fields))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum ChunkDelta {
    /// Visible text.
    Text {
        /// The piece.
        text: String,
    },
    /// Reasoning text.
    Reasoning {
        /// The piece.
        text: String,
    },
    /// A thinking block ended (Anthropic Messages): its signature, verbatim (the block's
    /// `signature_delta`s joined; empty when the server sent none). The reasoning since the
    /// previous block's end is that block's.
    ReasoningSignature {
        /// The signature.
        signature: String,
    },
    /// One block of encrypted reasoning (Anthropic's `redacted_thinking`), opaque.
    RedactedReasoning {
        /// The block's `data`, verbatim.
        data: String,
    },
    /// A tool call begins.
    ToolCall {
        /// Position of the call in the message.
        index: u32,
        /// Provider-assigned call id.
        id: String,
        /// Tool name.
        name: String,
    },
    /// A fragment of a tool call's argument string.
    ToolArgs {
        /// Position of the call in the message.
        index: u32,
        /// The fragment, verbatim.
        fragment: String,
    },
}

/// `assistant/chunk`.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS), ts(optional_fields))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AssistantChunk {
    /// The step streaming.
    pub step: u64,
    /// The delta.
    pub delta: ChunkDelta,
}

/// `assistant/message`.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS), ts(optional_fields))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AssistantTurn {
    /// The step that produced it.
    pub step: u64,
    /// The message exactly as assembled from the stream.
    pub message: AssistantMessage,
}

/// `tool/call`.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS), ts(optional_fields))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallStarted {
    /// The step whose message asked for it.
    pub step: u64,
    /// The call id.
    pub call_id: String,
    /// The tool.
    pub name: String,
    /// True when a command runs without the sandbox: approved as such
    /// (`allowUnconfined`), policy `full`, or no sandbox available. Absent (false) for every
    /// other call and in logs written before the sandbox existed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    #[cfg_attr(feature = "schema", ts(as = "Option<bool>", optional))]
    pub unconfined: bool,
}

/// `tool/progress`.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS), ts(optional_fields))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolProgress {
    /// The call id.
    pub call_id: String,
    /// The note.
    pub text: String,
}

/// `tool/result`; also the payload of a trimmed result in a `surface/replace`.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS), ts(optional_fields))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolResult {
    /// The call this answers.
    pub call_id: String,
    /// The tool's name, for people reading the log.
    pub name: String,
    /// What the model sees.
    pub content: String,
    /// Whether the call failed (refused, errored, denied, cancelled).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    #[cfg_attr(feature = "schema", ts(as = "Option<bool>", optional))]
    pub is_error: bool,
    /// Images the model sees after `content` (a `read_file` of an image), by reference.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "schema", ts(as = "Option<Vec<ImageRef>>", optional))]
    pub images: Vec<ImageRef>,
    /// The workspace files the call read or wrote, as the agent knows them after it (not
    /// model-visible): what a later change on disk is compared with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seen: Option<Vec<FileSeen>>,
}

/// A workspace file as the agent last saw it.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS), ts(optional_fields))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSeen {
    /// Its path relative to the workspace root.
    pub path: String,
    /// SHA-256 (hex) of its content; absent when no readable regular file stands there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

/// Token usage of one model call, as disjoint-safe counts.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS), ts(optional_fields))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    /// All prompt tokens (`cache_hit + cache_miss`).
    pub prompt_tokens: u64,
    /// Prompt tokens served from the provider's prefix cache.
    pub cache_hit_tokens: u64,
    /// Prompt tokens not served from the cache.
    pub cache_miss_tokens: u64,
    /// Output tokens, reasoning included.
    pub completion_tokens: u64,
    /// The reasoning part of `completion_tokens`.
    pub reasoning_tokens: u64,
    /// The part of `cache_miss_tokens` the provider wrote to its cache (Anthropic's
    /// `cache_creation_input_tokens`, billed apart); 0 where providers cache by themselves.
    #[serde(default, skip_serializing_if = "is_zero")]
    #[cfg_attr(feature = "schema", ts(as = "Option<u64>", optional))]
    pub cache_write_tokens: u64,
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

impl Usage {
    /// `cache_hit / prompt`, or 0 for an empty prompt.
    pub fn hit_ratio(&self) -> f64 {
        if self.prompt_tokens == 0 {
            0.0
        } else {
            self.cache_hit_tokens as f64 / self.prompt_tokens as f64
        }
    }

    /// Field-wise sum.
    pub fn add(&self, other: &Usage) -> Usage {
        Usage {
            prompt_tokens: self.prompt_tokens.saturating_add(other.prompt_tokens),
            cache_hit_tokens: self.cache_hit_tokens.saturating_add(other.cache_hit_tokens),
            cache_miss_tokens: self.cache_miss_tokens.saturating_add(other.cache_miss_tokens),
            completion_tokens: self.completion_tokens.saturating_add(other.completion_tokens),
            reasoning_tokens: self.reasoning_tokens.saturating_add(other.reasoning_tokens),
            cache_write_tokens: self.cache_write_tokens.saturating_add(other.cache_write_tokens),
        }
    }
}

/// `step/end`.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS), ts(optional_fields))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StepEnd {
    /// The step that ends.
    pub step: u64,
    /// The provider's finish reason (`stop`, `tool_calls`, `length`, ...).
    pub finish_reason: String,
    /// Usage of the step's model call.
    pub usage: Usage,
}

/// `step/error`.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS), ts(optional_fields))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StepError {
    /// The step that failed.
    pub step: u64,
    /// What went wrong, for people.
    pub error: String,
    /// True when the step was cancelled rather than failed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    #[cfg_attr(feature = "schema", ts(as = "Option<bool>", optional))]
    pub cancelled: bool,
}

/// `llm/retry`.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS), ts(optional_fields))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LlmRetry {
    /// The step being retried.
    pub step: u64,
    /// 1-based number of the attempt that failed.
    pub attempt: u32,
    /// Backoff before the next attempt.
    pub delay_ms: u64,
    /// What failed.
    pub error: String,
}

/// `mcp/wait`: before its request, a step waits (bounded by their startup timeouts) for MCP
/// servers, so their tools join the request instead of flapping in at a later step. Not
/// model-visible: what the wait produced is in the header that follows.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS), ts(optional_fields))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct McpWait {
    /// The servers waited for, by name, sorted.
    pub servers: Vec<String>,
    /// Why they are waited for.
    pub reason: McpWaitReason,
}

/// Why a step waits for MCP servers.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum McpWaitReason {
    /// On their first start: spawned or dialled, `initialize` and `tools/list` under way.
    Starting,
    /// They said their tool list changed; the new list is being fetched.
    ToolsChanged,
}

/// `approval/request`.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS), ts(optional_fields))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalRequest {
    /// Id a client answers with.
    pub approval_id: String,
    /// The tool call waiting.
    pub call_id: String,
    /// The tool.
    pub tool: String,
    /// What the call would do, for people.
    pub summary: String,
    /// How the call would run, for a command: its sandbox policy, and whether the sandbox is
    /// degraded or absent (`workspace-write`, `workspace-write (degraded: no landlock)`,
    /// `full (unconfined)`). Absent for tools that do not run commands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
}

/// What was decided about an approval.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS), ts(optional_fields))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ApprovalVerdict {
    /// Run this call.
    Allow,
    /// Refuse this call.
    Deny,
    /// Run this call and every later call of this tool in the session.
    AllowAlways,
    /// Nobody answered in time; treated as a denial.
    Timeout,
    /// Run this call once without the sandbox (for a command).
    AllowUnconfined,
}

/// `approval/decision`.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS), ts(optional_fields))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalDecision {
    /// The request answered.
    pub approval_id: String,
    /// The verdict.
    pub decision: ApprovalVerdict,
}

/// `compact/start`.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS), ts(optional_fields))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CompactStart {
    /// Why (`pressure`, `manual`).
    pub reason: String,
    /// Prompt tokens of the last request before compaction.
    pub tokens_before: u64,
}

/// `compact/summary`.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS), ts(optional_fields))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CompactSummary {
    /// Model of the summarize one-shot.
    pub model: String,
    /// Its provider profile (absent in logs from before profiles).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// Its wire format (absent: DeepSeek's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wire: Option<WireFormat>,
    /// Its output limit.
    pub max_tokens: u32,
    /// The summary text.
    pub summary: String,
}

/// The node a `surface/replace` puts in place of the replaced range.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS), ts(optional_fields))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum SurfaceNode {
    /// A compaction summary, seen by the model as a user message.
    #[serde(rename = "summary")]
    Summary {
        /// The text.
        text: String,
    },
    /// A trimmed tool result under the same call id.
    #[serde(rename = "tool/result")]
    ToolResult(ToolResult),
}

/// `surface/replace`.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS), ts(optional_fields))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SurfaceReplace {
    /// Id (seq) of the first surface node replaced.
    pub start: u64,
    /// Id (seq) of the last surface node replaced (inclusive).
    pub end: u64,
    /// The node that takes their place; its id is this event's seq.
    pub node: SurfaceNode,
}

/// `workspace/checkpoint`: the state of the workspace's files was recorded (not model-visible).
/// The tree itself — names as bytes, contents, modes, link targets — is in the workspace's
/// object store under `root`; the event names it and says what changed, for people.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS), ts(optional_fields))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkspaceCheckpoint {
    /// The step about to run tools that can change files (the checkpoint is the workspace as
    /// that step found it); absent at a turn's end and before a rewind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<u64>,
    /// Why the checkpoint was taken.
    pub reason: CheckpointReason,
    /// The hash (SHA-256, lowercase hex) of the checkpoint's root tree.
    pub root: String,
    /// Files and symlinks recorded.
    pub files: u64,
    /// Paths that differ from the workspace's previous checkpoint (added, changed or removed),
    /// relative to the workspace root; a name that is not UTF-8 is written lossily here (the
    /// tree keeps its bytes).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "schema", ts(as = "Option<Vec<String>>", optional))]
    pub changed: Vec<String>,
    /// Files over the size cap: recorded by size only, not restorable.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "schema", ts(as = "Option<Vec<TooLargeFile>>", optional))]
    pub too_large: Vec<TooLargeFile>,
    /// Set when the checkpoint could not record everything (the disk filled, a file could not
    /// be read): what is missing. A rewind to it says so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incomplete: Option<String>,
}

/// Why a workspace checkpoint was taken.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum CheckpointReason {
    /// Before a step runs a tool that can change files.
    Step,
    /// When a turn ended.
    TurnEnd,
    /// The state of the workspace just before a rewind restored files: undoing the rewind.
    Rewind,
}

/// A file a checkpoint did not record because it is over the size cap.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS), ts(optional_fields))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TooLargeFile {
    /// Its path relative to the workspace root.
    pub path: String,
    /// Its size in bytes.
    pub size: u64,
}

/// `workspace/rewind`: the workspace's files and/or the conversation were returned to a
/// checkpoint (not model-visible). A conversation rewind logs it first in the fork that
/// continues (`fromSession` is the rewound session); a files-only rewind logs it in the session
/// itself.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS), ts(optional_fields))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkspaceRewind {
    /// The session that was rewound.
    pub from_session: String,
    /// The step the rewind returned to (just before it ran); absent for a rewind to a
    /// checkpoint named by its seq.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_step: Option<u64>,
    /// The root of the checkpoint the files were restored to (for a conversation-only rewind,
    /// the step's checkpoint, when it has one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<String>,
    /// The root of the checkpoint of the state just before the rewind (absent when no file was
    /// restored): a rewind to it undoes this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<String>,
    /// Files rewritten to their checkpoint content.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "schema", ts(as = "Option<Vec<String>>", optional))]
    pub restored: Vec<String>,
    /// Files (and symlinks) recreated: absent before the rewind, present at the checkpoint.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "schema", ts(as = "Option<Vec<String>>", optional))]
    pub created: Vec<String>,
    /// Files removed: present before the rewind, absent at the checkpoint.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "schema", ts(as = "Option<Vec<String>>", optional))]
    pub deleted: Vec<String>,
    /// Whether files changed by someone other than the agent were overwritten (`force`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    #[cfg_attr(feature = "schema", ts(as = "Option<bool>", optional))]
    pub forced: bool,
    /// Whether the conversation was rewound (this session is a fork at `toStep`).
    pub conversation: bool,
    /// Whether the files were restored.
    pub files: bool,
}

/// `hook/run`: one run of a hook the user's configuration defines (docs/hooks.md), with how it
/// ended (not model-visible). What a run adds for the model is logged on its own — a
/// `context/message` of source `hook`, or the tool result a blocked call gets.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS), ts(optional_fields))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HookRun {
    /// The hook's name (its `name`, else `EVENT.N`, the Nth of its event in the user's file).
    pub hook: String,
    /// Where it is defined (`FILE:LINE`).
    pub source: String,
    /// The event it ran for.
    pub event: HookEvent,
    /// The tool call it ran for (`PreToolUse`, `PostToolUse`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// The tool of that call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// What the run decided.
    pub outcome: HookOutcome,
    /// The exit code, when the hook exited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Why the run failed, when it did: it could not start, it timed out (killed with its
    /// process group), a signal ended it, or it exited with a code that means neither go on
    /// nor block.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Wall-clock time from start to the end of its output.
    pub duration_ms: u64,
    /// Its standard error, within the output cap (lossy UTF-8): the reason of a block, what a
    /// failed hook said.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[cfg_attr(feature = "schema", ts(as = "Option<String>", optional))]
    pub stderr: String,
    /// Bytes it wrote to standard output (all of them, kept or not).
    pub stdout_bytes: u64,
    /// Standard output was longer than the cap: its middle was cut.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    #[cfg_attr(feature = "schema", ts(as = "Option<bool>", optional))]
    pub stdout_truncated: bool,
    /// Standard error was longer than the cap: its middle was cut.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    #[cfg_attr(feature = "schema", ts(as = "Option<bool>", optional))]
    pub stderr_truncated: bool,
    /// Its output was not valid UTF-8: invalid bytes were replaced by U+FFFD.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    #[cfg_attr(feature = "schema", ts(as = "Option<bool>", optional))]
    pub invalid_utf8: bool,
}

/// When a hook runs (Claude Code's names, so existing hook scripts fit).
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum HookEvent {
    /// Before the first turn a loaded session runs.
    SessionStart,
    /// Before a prompt is logged: exit 2 refuses it.
    UserPromptSubmit,
    /// Before a tool call runs: exit 2 blocks it.
    PreToolUse,
    /// After a tool call's result is logged.
    PostToolUse,
    /// When the model stops: exit 2 makes the turn go on.
    Stop,
    /// Before a compaction.
    PreCompact,
}

impl HookEvent {
    /// Every event, in the order above.
    pub const ALL: [HookEvent; 6] = [
        HookEvent::SessionStart,
        HookEvent::UserPromptSubmit,
        HookEvent::PreToolUse,
        HookEvent::PostToolUse,
        HookEvent::Stop,
        HookEvent::PreCompact,
    ];

    /// Its name, as written in the configuration and the log.
    pub fn name(self) -> &'static str {
        match self {
            HookEvent::SessionStart => "SessionStart",
            HookEvent::UserPromptSubmit => "UserPromptSubmit",
            HookEvent::PreToolUse => "PreToolUse",
            HookEvent::PostToolUse => "PostToolUse",
            HookEvent::Stop => "Stop",
            HookEvent::PreCompact => "PreCompact",
        }
    }

    /// Whether it is about one tool call (and a `matcher` applies).
    pub fn is_tool_event(self) -> bool {
        matches!(self, HookEvent::PreToolUse | HookEvent::PostToolUse)
    }
}

/// What a hook's run decided.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum HookOutcome {
    /// Exit 0: go on.
    Ok,
    /// Exit 2: the call, the prompt or the stop is blocked (`PostToolUse`: its standard error
    /// goes to the model).
    Blocked,
    /// Anything else: another exit code, a signal, a timeout, a start that failed. A failed
    /// `PreToolUse` or `UserPromptSubmit` hook blocks (fail closed); the others go on.
    Failed,
}
