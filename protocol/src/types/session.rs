//! The API's types of sessions: creating, listing, prompting, steering, cancelling, forking
//! them, "what the model saw", usage and its prices, events pages, compaction, audit, approvals.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use ts_rs::TS;

use crate::*;

api_type! {
    /// Call options for a session (`session/create`, `session/fork`): explicit options beat the
    /// logged header on the session's first request.
    #[derive(Default)]
    pub struct SessionConfig {
        /// Provider profile (its name in the configuration); default: the configured one. On a
        /// fork, moves the fork to this profile (a logged, attributed header change).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub profile: Option<String>,
        /// Where this session's requests go instead of the profile's `base_url` (a client's
        /// `--base-url`): the session is pinned to the ad-hoc profile `PROFILE@URL`, logged
        /// like any profile (a plain `http(s)://host[:port][/path]`: no user, query or
        /// fragment; `http://` only to this machine). On a fork, `PROFILE` is the parent's
        /// unless `profile` names another, and the model and options stay the parent's.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub base_url: Option<String>,
        /// Model id.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub model: Option<String>,
        /// Output limit.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub max_tokens: Option<u32>,
        /// Thinking on/off.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub thinking: Option<bool>,
        /// Reasoning effort (`high`, `max`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub reasoning_effort: Option<String>,
        /// Sampling temperature.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub temperature: Option<f64>,
        /// Steps per turn.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub max_steps: Option<u32>,
    }
}

api_type! {
    /// `session/create` params.
    pub struct SessionCreateParams {
        /// Workspace directory (absolute, existing).
        pub workspace: String,
        /// Model id (shorthand for `config.model`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub model: Option<String>,
        /// Call options.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub config: Option<SessionConfig>,
        /// The session's own MCP servers, as `session/mcpServers` takes them; checked before
        /// the session is created (nothing is created when they are refused).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub mcp_servers: Option<Vec<McpServerSpec>>,
        /// The session is for a prompt with images: refused (`imagesUnsupported`) before
        /// anything is created when its model does not read images.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub images: Option<bool>,
    }
}

api_type! {
    /// A session id result (`session/create`, `session/fork`).
    pub struct SessionIdResult {
        /// The session.
        pub session_id: String,
    }
}

api_type! {
    /// `session/list` params.
    pub struct SessionListParams {
        /// Only this workspace's sessions (default: every workspace).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub workspace: Option<String>,
    }
}

api_type! {
    /// One session in a listing.
    pub struct SessionSummary {
        /// The id.
        pub session_id: String,
        /// Its workspace.
        pub workspace: String,
        /// The first prompt, on one line.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub title: Option<String>,
        /// Unix ms of creation.
        pub created_ms: u64,
        /// Unix ms of the last event.
        pub updated_ms: u64,
        /// Turns started.
        pub turns: u64,
        /// Steps started.
        pub steps: u64,
        /// Fork origin.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub forked_from: Option<ForkOrigin>,
        /// The parent of a sub-agent's session: the session and the `task` call it answers,
        /// and its depth (docs/subagents.md).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub parent: Option<ParentLink>,
        /// Usage of the last finished step.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub last_usage: Option<Usage>,
        /// The profile of its latest request (absent before the first request, and for logs
        /// from before profiles).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub profile: Option<String>,
        /// The model of its latest request.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub model: Option<String>,
        /// What all its finished steps cost, at the prices configured now; absent when a
        /// step ran on a model without prices.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub cost: Option<Cost>,
        /// Whether a turn is running now.
        pub running: bool,
        /// Set when the log cannot be read: why (the line and what is wrong with it). Such a
        /// session is still listed — with its id from the file name, its workspace when the
        /// listing names one, and zero counts — so no log disappears from a listing.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub error: Option<String>,
    }
}

api_type! {
    /// `session/list` result.
    pub struct SessionListResult {
        /// Sessions, oldest first.
        pub sessions: Vec<SessionSummary>,
    }
}

api_type! {
    /// `session/subscribe` params.
    pub struct SessionSubscribeParams {
        /// The session.
        pub session_id: String,
        /// First seq to deliver (default 0: the whole log, then live events).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub from_seq: Option<u64>,
    }
}

/// What to do with a prompt while a turn runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema, TS)]
#[serde(rename_all = "camelCase")]
pub enum WhenBusy {
    /// Answer with the "session busy" error.
    #[default]
    Reject,
    /// Wait for the running turn (and any queued before) to end, then run.
    Queue,
}

api_type! {
    /// Budgets of one turn (`session/prompt`'s `limits`); each is optional and must be
    /// positive. Steps, tokens and cost are checked between steps (a step and its tools always
    /// finish); the timeout cancels the turn as `session/cancel` does. A budget reached logs
    /// `turn/limit` and ends the turn with `stopReason` `limit`.
    #[derive(Default)]
    pub struct TurnLimits {
        /// Steps the turn may run (at least 1).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        #[schemars(range(min = 1))]
        pub max_steps: Option<i64>,
        /// Tokens the turn may spend: its finished steps' prompt and output tokens, summed (at
        /// least 1).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        #[schemars(range(min = 1))]
        pub max_tokens: Option<i64>,
        /// What the turn's finished steps may cost, in USD, at the prices `session/usage` uses
        /// (more than 0). A model without a price in USD is refused (`config`): its cost would
        /// be unknown.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        #[schemars(extend("exclusiveMinimum" = 0))]
        pub max_cost: Option<f64>,
        /// Seconds the turn may run, from its start (more than 0).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        #[schemars(extend("exclusiveMinimum" = 0))]
        pub timeout_secs: Option<f64>,
    }
}

api_type! {
    /// An image given with a prompt (`session/prompt`'s `attachments`), its bytes in base64.
    /// Its format is read from its magic bytes (PNG, JPEG, GIF, WebP), never from its name; it
    /// must be at most 3,000,000 bytes (its base64 fits in one request line). It is stored once in the workspace's object store and the
    /// `user/message` names it by hash (docs/log.md, "Images").
    pub struct Attachment {
        /// A name for people (a file name); not model-visible.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub name: Option<String>,
        /// The bytes, standard base64 (padded).
        pub data: String,
    }
}

api_type! {
    /// `session/prompt` params.
    pub struct SessionPromptParams {
        /// The session.
        pub session_id: String,
        /// The prompt.
        pub text: String,
        /// Default `reject`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub when_busy: Option<WhenBusy>,
        /// Budgets of this turn (default: none; the session's own `maxSteps` still holds).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub limits: Option<TurnLimits>,
        /// A JSON Schema the turn's final answer must validate against (docs/scripting.md,
        /// "Structured answers"): the model is told it in a logged note, asked once more with
        /// the problems when its answer does not validate, and the turn ends `outputInvalid`
        /// when the second answer does not either. The validated value is the result's
        /// `output`. A value that is not a valid JSON Schema (or has a `$ref` outside itself,
        /// or is over 64 KiB) is refused with invalid params before anything is logged.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional, type = "unknown")]
        pub output_schema: Option<serde_json::Value>,
        /// Images given with the prompt, after its text, in order. Refused (invalid params,
        /// before anything is logged) when the session's model does not read images (its
        /// `images` setting), or an attachment is not base64, not an image by its magic bytes,
        /// or over the size limit.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        #[ts(as = "Option<Vec<Attachment>>", optional)]
        pub attachments: Vec<Attachment>,
    }
}

api_type! {
    /// `session/prompt` result, sent when the turn ends.
    pub struct SessionPromptResult {
        /// The turn number.
        pub turn: u64,
        /// Why it ended.
        pub stop_reason: StopReason,
        /// Steps run.
        pub steps: u64,
        /// Usage summed over the turn.
        pub usage: Usage,
        /// The error, when it ended with one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub error: Option<String>,
        /// The budget that stopped the turn (as its `turn/limit` event), when `stopReason` is
        /// `limit`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub limit: Option<TurnLimit>,
        /// The final answer, validated against the prompt's `outputSchema`, when the turn had
        /// one and completed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional, type = "unknown")]
        pub output: Option<serde_json::Value>,
        /// What is wrong with the last answer, when `stopReason` is `outputInvalid` (at most
        /// ten problems, each cut to 300 characters, and a count of the rest).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        #[ts(as = "Option<Vec<String>>", optional)]
        pub output_errors: Vec<String>,
    }
}

api_type! {
    /// `session/inject` params.
    pub struct SessionInjectParams {
        /// The session.
        pub session_id: String,
        /// The steering text.
        pub text: String,
    }
}

api_type! {
    /// `session/inject` result.
    pub struct SessionInjectResult {
        /// Seq of the `steering/message` event.
        pub seq: u64,
    }
}

api_type! {
    /// Params naming just a session (`session/cancel`, `session/usage`, `session/compact`).
    pub struct SessionParams {
        /// The session.
        pub session_id: String,
    }
}

api_type! {
    /// `session/cancel` result.
    pub struct SessionCancelResult {
        /// Whether a running turn was cancelled.
        pub cancelled: bool,
    }
}

api_type! {
    /// `session/fork` params.
    pub struct SessionForkParams {
        /// The parent.
        pub session_id: String,
        /// Keep the parent's events with `seq < atSeq` (default: the whole log).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub at_seq: Option<u64>,
        /// Fork at the boundary of step `atStep`: keep what came before its `step/start` (the
        /// conversation as that step's request saw it, without it). Not with `atSeq`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub at_step: Option<u64>,
        /// Call options that beat the logged header on the fork's first request.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub config: Option<SessionConfig>,
    }
}

api_type! {
    /// `session/request` params.
    pub struct SessionRequestParams {
        /// The session.
        pub session_id: String,
        /// Step number (1-based, across the session).
        pub step: u64,
        /// Also return a unified diff against step − 1's request.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub diff: Option<bool>,
    }
}

api_type! {
    /// A message with the seq of the surface node it came from.
    pub struct SeqMessage {
        /// The node's seq.
        pub seq: u64,
        /// The message.
        // Shared with the session that holds it: "what the model saw" of a long conversation
        // does not copy its texts to answer.
        pub message: std::sync::Arc<Message>,
    }
}

api_type! {
    /// The exact wire body of a request.
    pub struct WireBody {
        /// The adapter that serializes it.
        pub adapter: String,
        /// The body as UTF-8 text.
        pub body: String,
        /// Lowercase hex sha256 of the body.
        pub sha256: String,
        /// Length in bytes.
        pub bytes: u64,
    }
}

api_type! {
    /// `session/object` params.
    pub struct SessionObjectParams {
        /// The session.
        pub session_id: String,
        /// The object's SHA-256 (lowercase hex), as an event of the session's log names it.
        pub sha256: String,
    }
}

api_type! {
    /// `session/object` result: an object the session's log names (an image), whole.
    pub struct SessionObjectResult {
        /// Its media type, as the log names it (`image/png`, …).
        pub media_type: String,
        /// Its length in bytes.
        pub size: u64,
        /// Its bytes, base64 (standard alphabet, padded).
        pub data: String,
    }
}

api_type! {
    /// `session/request` result: "what the model saw", rebuilt from the log.
    pub struct SessionRequestResult {
        /// The step.
        pub step: u64,
        /// Its turn.
        pub turn: u64,
        /// Seq of its `step/start`.
        pub boundary_seq: u64,
        /// The header (config, system prompt, tools).
        pub header: EpochHeader,
        /// Seqs of this step's own header events (empty: carried forward).
        pub header_events: Vec<u64>,
        /// The messages, each with its seq.
        pub messages: Vec<SeqMessage>,
        /// The rebuilt wire body.
        pub wire: WireBody,
        /// What the log recorded as sent, when the step got that far.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub sent: Option<RequestSent>,
        /// The step's usage, when it ended.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub usage: Option<Usage>,
        /// Unified diff against step − 1's request, when asked.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub diff: Option<String>,
    }
}

api_type! {
    /// One row of `session/usage`.
    pub struct UsageEntry {
        /// The row, as folded from the log.
        #[serde(flatten)]
        #[ts(flatten)]
        pub row: UsageRow,
        /// The causes in words ("system prompt changed at seq 812"), or why a drop has none.
        pub explanation: String,
    }
}

api_type! {
    /// `session/usage` result.
    pub struct SessionUsageResult {
        /// One row per step; a row's `cost` is at the prices of the profile and model it ran
        /// on, as configured now.
        pub rows: Vec<UsageEntry>,
        /// Sums over finished steps.
        pub totals: Usage,
        /// The cost of every finished step and what the cache saved; absent when a step ran on
        /// a model without prices or the currencies differ.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub cost: Option<Cost>,
        /// The prices used, one entry per profile and model the session ran on.
        #[serde(default)]
        pub prices: Vec<PriceUsed>,
        /// The context window, in tokens, of the model the session's next request uses (what
        /// a step's prompt and output are measured against).
        pub context_window: u64,
        /// The provider profile the session's next request uses: its last request's, else the
        /// one it was pinned to at creation (`session/meta.pin`), else the configured default.
        pub profile: String,
        /// The model the session's next request uses (as `profile`).
        pub model: String,
        /// The sub-agents its `task` calls ran (docs/subagents.md), in order; each one's own
        /// children are counted in its row.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        #[ts(as = "Option<Vec<ChildUsage>>", optional)]
        pub children: Vec<ChildUsage>,
        /// The session's own finished steps and its children's together; absent without
        /// children.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub with_children: Option<UsageWithChildren>,
    }
}

api_type! {
    /// One sub-agent of `session/usage`.
    pub struct ChildUsage {
        /// The child session.
        pub session_id: String,
        /// The parent's `task` call it answered.
        pub call_id: String,
        /// The call's description.
        pub description: String,
        /// How it started.
        pub context: TaskContext,
        /// Steps it ran.
        pub steps: u64,
        /// Its finished steps' usage, with its own children's.
        pub usage: Usage,
        /// Cache hits in percent of its prompt tokens.
        pub hit_percent: f64,
        /// What it cost (with its own children), at the prices configured now; absent when a
        /// step ran on a model without prices.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub cost: Option<Cost>,
        /// Set when its log cannot be read: why.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub error: Option<String>,
    }
}

api_type! {
    /// A session's spend with its sub-agents'.
    pub struct UsageWithChildren {
        /// Usage summed over its own finished steps and its children's.
        pub usage: Usage,
        /// What all of it cost; absent when a step ran on a model without prices.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub cost: Option<Cost>,
    }
}

api_type! {
    /// `session/events` params.
    pub struct SessionEventsParams {
        /// The session.
        pub session_id: String,
        /// First seq.
        pub from_seq: u64,
        /// At most this many events (capped at 1000).
        pub limit: u64,
    }
}

api_type! {
    /// `session/events` result.
    pub struct SessionEventsResult {
        /// The events.
        pub events: Vec<SessionEvent>,
        /// The seq after the last event returned.
        pub next_seq: u64,
        /// Whether the page reached the end of the log.
        pub end: bool,
        /// Events in the log (the seq the next appended event will get).
        pub length: u64,
    }
}

api_type! {
    /// `session/compact` result.
    pub struct SessionCompactResult {
        /// Whether the surface was rewritten.
        pub compacted: bool,
        /// Seq of the `surface/replace`, when it was.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub seq: Option<u64>,
        /// What happened, for people.
        pub message: String,
    }
}

/// A client's answer to an approval request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema, TS)]
#[serde(rename_all = "camelCase")]
pub enum ApprovalChoice {
    /// Run this call.
    Allow,
    /// Refuse this call.
    Deny,
    /// Run this and every later call of this tool in the session.
    AllowAlways,
    /// Run this call once without the sandbox (for a command; for other tools, as `allow`).
    AllowUnconfined,
}

api_type! {
    /// `approval/respond` params.
    pub struct ApprovalRespondParams {
        /// The session.
        pub session_id: String,
        /// From the `approval/request` event.
        pub approval_id: String,
        /// The answer.
        pub decision: ApprovalChoice,
    }
}

api_type! {
    /// `approval/respond` result.
    pub struct ApprovalRespondResult {
        /// Whether the answer reached a waiting tool call.
        pub accepted: bool,
    }
}

api_type! {
    /// The prices a usage view used for one profile and model.
    pub struct PriceUsed {
        /// The profile (`deepseek` for logs from before profiles).
        pub profile: String,
        /// The model.
        pub model: String,
        /// The prices, per million tokens.
        pub price: Price,
    }
}

api_type! {
    /// `session/audit` result: every step rebuilt from the log and compared with its
    /// `request/sent` record, and the log's well-formedness checks.
    pub struct SessionAuditResult {
        /// No mismatch and no log error.
        pub ok: bool,
        /// Steps rebuilt.
        pub steps: u64,
        /// Steps whose rebuilt wire body equals `request/sent` (sha256 and length).
        pub matched: u64,
        /// Steps whose rebuilt body differs (or could not be rebuilt), first first.
        pub mismatches: Vec<String>,
        /// Log check errors.
        pub errors: Vec<String>,
        /// Notes (the log ends inside a turn, a torn tail was set aside).
        pub notes: Vec<String>,
    }
}

api_type! {
    /// `session/plan` result: the session's current plan, the last `plan/update` of its log
    /// (the model's latest valid `update_plan` call). A fork starts with its parent's.
    pub struct SessionPlanResult {
        /// The steps in order, each with its status; empty when the model never set a plan or
        /// cleared it.
        pub plan: Vec<PlanEntry>,
        /// Why the plan is what it is, when the model said.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub explanation: Option<String>,
        /// The seq of the `plan/update` that set it; absent when there is none.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub seq: Option<u64>,
        /// The `update_plan` call that set it; absent when there is none.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub call_id: Option<String>,
    }
}

impl SessionPlanResult {
    /// The answer for a log whose current plan is `current`.
    pub fn from_current(current: Option<CurrentPlan>) -> SessionPlanResult {
        match current {
            Some(CurrentPlan { seq, update }) => SessionPlanResult {
                plan: update.plan,
                explanation: update.explanation,
                seq: Some(seq),
                call_id: Some(update.call_id),
            },
            None => {
                SessionPlanResult { plan: Vec::new(), explanation: None, seq: None, call_id: None }
            }
        }
    }
}

api_type! {
    /// A prompt command (`docs/skills.md`, "Prompt commands"): `/NAME args…` in a prompt.
    pub struct CommandInfo {
        /// Its name, without the slash.
        pub name: String,
        /// What it does, from its front matter.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub description: Option<String>,
        /// What its arguments are, from its front matter (`argument-hint`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub argument_hint: Option<String>,
        /// Its file: absolute for the user's, relative to the workspace root for the workspace's.
        pub source: String,
    }
}

api_type! {
    /// A skill (`docs/skills.md`, "Skills"), as the `skill` tool offers it.
    pub struct SkillInfo {
        /// Its name.
        pub name: String,
        /// Its description.
        pub description: String,
        /// Its folder.
        pub source: String,
    }
}

api_type! {
    /// `session/commands` result: the prompt commands and skills of the session's workspace,
    /// as found now, in the order their names are looked up (the first of a name wins).
    pub struct SessionCommandsResult {
        /// The prompt commands.
        pub commands: Vec<CommandInfo>,
        /// The skills.
        pub skills: Vec<SkillInfo>,
    }
}
