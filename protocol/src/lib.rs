//! The dsh JSON-RPC API: every method's name, params and result, the `session/event`
//! notification, and the application error codes. `README.md` beside this crate documents each
//! method with an example exchange.
//!
//! These are the API's own types: the log vocabulary (`dsh-session`) appears in them only where
//! the API hands out log content as is (events, headers, messages, usage). A JSON Schema
//! (`protocol/schema/`) and TypeScript declarations (`editors/vscode/src/protocol.generated.ts`)
//! are generated from this crate ([`generate`]); a test fails when the committed files are
//! stale. This crate holds no logic: no transport, no session state.
#![warn(missing_docs)]

mod event;
pub mod generate;
pub mod jsonrpc;

pub use event::SessionEvent;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use ts_rs::TS;

/// The log vocabulary, typed, for clients that fold the events they receive (the fronts): an
/// event as delivered decodes with [`decode_event`] like a log line.
pub use dsh_session::{ApprovalRequest, ChunkDelta, Event, EventData, decode_event};
pub use dsh_session::{
    Cost, EpochHeader, ForkOrigin, Message, PrefixCause, Price, ProviderKind, RequestSent,
    StopReason, Usage, UsageRow,
};

/// The protocol version this build speaks; `initialize` refuses another.
pub const PROTOCOL_VERSION: u32 = 1;

/// Method names. The names are part of the contract.
pub mod method {
    /// Handshake.
    pub const INITIALIZE: &str = "initialize";
    /// Create a session.
    pub const SESSION_CREATE: &str = "session/create";
    /// List sessions.
    pub const SESSION_LIST: &str = "session/list";
    /// Subscribe to a session's events.
    pub const SESSION_SUBSCRIBE: &str = "session/subscribe";
    /// The notification a subscription delivers.
    pub const SESSION_EVENT: &str = "session/event";
    /// End a subscription.
    pub const SESSION_UNSUBSCRIBE: &str = "session/unsubscribe";
    /// Run a turn.
    pub const SESSION_PROMPT: &str = "session/prompt";
    /// Steer: a message that joins the next request.
    pub const SESSION_INJECT: &str = "session/inject";
    /// Cancel the running turn.
    pub const SESSION_CANCEL: &str = "session/cancel";
    /// Fork a session.
    pub const SESSION_FORK: &str = "session/fork";
    /// "What the model saw" at a step.
    pub const SESSION_REQUEST: &str = "session/request";
    /// Per-step usage.
    pub const SESSION_USAGE: &str = "session/usage";
    /// A page of raw events.
    pub const SESSION_EVENTS: &str = "session/events";
    /// Compact a session now.
    pub const SESSION_COMPACT: &str = "session/compact";
    /// Answer an approval request.
    pub const APPROVAL_RESPOND: &str = "approval/respond";
    /// Daemon status.
    pub const DAEMON_STATUS: &str = "daemon/status";
    /// Stop the daemon.
    pub const DAEMON_SHUTDOWN: &str = "daemon/shutdown";
    /// Rebuild every step of a session and compare with what was sent.
    pub const SESSION_AUDIT: &str = "session/audit";
    /// Subscribe to the daemon's notices (a configuration edit that cannot be used, …).
    pub const DAEMON_SUBSCRIBE: &str = "daemon/subscribe";
    /// The notification a daemon subscription delivers.
    pub const DAEMON_NOTICE: &str = "daemon/notice";
    /// The notification a daemon subscription delivers when a watched file changes.
    pub const WORKSPACE_CHANGED: &str = "workspace/changed";
    /// End a daemon subscription.
    pub const DAEMON_UNSUBSCRIBE: &str = "daemon/unsubscribe";
    /// Which agent step wrote each line of a workspace file.
    pub const WORKSPACE_PROVENANCE: &str = "workspace/provenance";
    /// The MCP tool servers of a workspace: state, tools, last error.
    pub const MCP_LIST: &str = "mcp/list";
    /// A session's own MCP servers (what an ACP editor passes), replacing the ones it had.
    pub const SESSION_MCP_SERVERS: &str = "session/mcpServers";

    /// The methods that open a subscription.
    pub const SUBSCRIBE: &[&str] = &[SESSION_SUBSCRIBE, DAEMON_SUBSCRIBE];
    /// The methods that end one.
    pub const UNSUBSCRIBE: &[&str] = &[SESSION_UNSUBSCRIBE, DAEMON_UNSUBSCRIBE];

    /// Every method, in documentation order.
    pub const ALL: &[&str] = &[
        INITIALIZE,
        SESSION_CREATE,
        SESSION_LIST,
        SESSION_SUBSCRIBE,
        SESSION_UNSUBSCRIBE,
        SESSION_PROMPT,
        SESSION_INJECT,
        SESSION_CANCEL,
        SESSION_FORK,
        SESSION_REQUEST,
        SESSION_USAGE,
        SESSION_EVENTS,
        SESSION_COMPACT,
        SESSION_AUDIT,
        WORKSPACE_PROVENANCE,
        APPROVAL_RESPOND,
        MCP_LIST,
        SESSION_MCP_SERVERS,
        DAEMON_STATUS,
        DAEMON_SHUTDOWN,
        DAEMON_SUBSCRIBE,
        DAEMON_UNSUBSCRIBE,
    ];

    use serde::Serialize;
    use serde::de::DeserializeOwned;

    /// A method of the API: its name and the types of its params and result. Clients call
    /// through it (`client.call::<method::SessionPrompt>(params)`) and the daemon registers its
    /// handlers by it, so both sides agree on the types by construction.
    pub trait Method {
        /// The method's name on the wire.
        const NAME: &'static str;
        /// Its params.
        type Params: Serialize + DeserializeOwned + Send + 'static;
        /// Its result.
        type Result: Serialize + DeserializeOwned + Clone + Send + 'static;
    }

    macro_rules! methods {
        ($($(#[$meta:meta])* $name:ident = $wire:ident ($params:ty) -> $result:ty;)*) => {$(
            $(#[$meta])*
            #[derive(Clone, Copy, Debug)]
            pub struct $name;
            impl Method for $name {
                const NAME: &'static str = $wire;
                type Params = $params;
                type Result = $result;
            }
        )*};
    }

    use super::*;

    methods! {
        /// `initialize`.
        Initialize = INITIALIZE (InitializeParams) -> InitializeResult;
        /// `session/create`.
        SessionCreate = SESSION_CREATE (SessionCreateParams) -> SessionIdResult;
        /// `session/list`.
        SessionList = SESSION_LIST (SessionListParams) -> SessionListResult;
        /// `session/subscribe`: the result is the subscription id.
        SessionSubscribe = SESSION_SUBSCRIBE (SessionSubscribeParams) -> serde_json::Value;
        /// `daemon/subscribe`: the result is the subscription id; notices arrive as
        /// `daemon/notice`.
        DaemonSubscribe = DAEMON_SUBSCRIBE (NoParams) -> serde_json::Value;
        /// `session/unsubscribe`: params are `[subscription id]`; true when it was this
        /// connection's subscription.
        SessionUnsubscribe = SESSION_UNSUBSCRIBE ([serde_json::Value; 1]) -> bool;
        /// `session/prompt`.
        SessionPrompt = SESSION_PROMPT (SessionPromptParams) -> SessionPromptResult;
        /// `session/inject`.
        SessionInject = SESSION_INJECT (SessionInjectParams) -> SessionInjectResult;
        /// `session/cancel`.
        SessionCancel = SESSION_CANCEL (SessionParams) -> SessionCancelResult;
        /// `session/fork`.
        SessionFork = SESSION_FORK (SessionForkParams) -> SessionIdResult;
        /// `session/request`.
        SessionRequest = SESSION_REQUEST (SessionRequestParams) -> SessionRequestResult;
        /// `session/usage`.
        SessionUsage = SESSION_USAGE (SessionParams) -> SessionUsageResult;
        /// `session/events`.
        SessionEvents = SESSION_EVENTS (SessionEventsParams) -> SessionEventsResult;
        /// `session/compact`.
        SessionCompact = SESSION_COMPACT (SessionParams) -> SessionCompactResult;
        /// `session/audit`.
        SessionAudit = SESSION_AUDIT (SessionParams) -> SessionAuditResult;
        /// `workspace/provenance`.
        WorkspaceProvenance = WORKSPACE_PROVENANCE (WorkspaceProvenanceParams)
            -> WorkspaceProvenanceResult;
        /// `approval/respond`.
        ApprovalRespond = APPROVAL_RESPOND (ApprovalRespondParams) -> ApprovalRespondResult;
        /// `mcp/list`.
        McpList = MCP_LIST (McpListParams) -> McpListResult;
        /// `session/mcpServers`.
        SessionMcpServers = SESSION_MCP_SERVERS (SessionMcpServersParams)
            -> SessionMcpServersResult;
        /// `daemon/status`.
        DaemonStatus = DAEMON_STATUS (NoParams) -> DaemonStatusResult;
        /// `daemon/shutdown`.
        DaemonShutdown = DAEMON_SHUTDOWN (NoParams) -> DaemonShutdownResult;
    }
}

/// Application error codes (JSON-RPC reserves -32768..-32000 for itself; the standard codes
/// -32700 parse error, -32600 invalid request, -32601 method not found and -32602 invalid params
/// are used as the spec defines them).
pub mod code {
    /// No session with that id in this daemon's home.
    pub const SESSION_NOT_FOUND: i32 = 1001;
    /// A turn is running and the prompt asked not to queue.
    pub const SESSION_BUSY: i32 = 1002;
    /// The step (or seq) is outside the log.
    pub const OUT_OF_RANGE: i32 = 1003;
    /// Too many requests in flight; retry later.
    pub const OVERLOADED: i32 = 1004;
    /// The workspace does not exist or is not a directory.
    pub const INVALID_WORKSPACE: i32 = 1005;
    /// The session cannot be used: another process holds its log, or its task failed.
    pub const SESSION_UNAVAILABLE: i32 = 1006;
    /// The provider is not configured (no API key) or refused the request.
    pub const PROVIDER: i32 = 1007;
    /// No pending approval with that id.
    pub const APPROVAL_NOT_FOUND: i32 = 1008;
    /// `initialize` with a protocol version this daemon does not speak.
    pub const UNSUPPORTED_PROTOCOL: i32 = 1009;
    /// The daemon is shutting down.
    pub const SHUTTING_DOWN: i32 = 1010;
    /// Reading or writing a log failed.
    pub const STORE: i32 = 1011;
    /// The configuration cannot be used for this: a file that does not parse, an unknown
    /// provider profile or model.
    pub const CONFIG: i32 = 1012;
    /// The workspace is `/`, the user's home or holds dsh's state or configuration: the
    /// user must confirm it once (`dsh allow-workspace DIR`, `allow_workspaces` in the user's
    /// configuration file) before sessions run there.
    pub const WORKSPACE_NOT_CONFIRMED: i32 = 1013;
}

macro_rules! api_type {
    ($(#[$meta:meta])* pub struct $name:ident { $($body:tt)* }) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema, TS)]
        #[serde(rename_all = "camelCase")]
        pub struct $name { $($body)* }
    };
}

api_type! {
    /// Who is calling.
    pub struct ClientInfo {
        /// Client name, e.g. `dsh-vscode`.
        pub name: String,
        /// Client version.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub version: Option<String>,
    }
}

api_type! {
    /// `initialize` params.
    pub struct InitializeParams {
        /// The client.
        pub client_info: ClientInfo,
        /// Must be [`PROTOCOL_VERSION`].
        pub protocol_version: u32,
    }
}

api_type! {
    /// Who answers.
    pub struct ServerInfo {
        /// `dsh`.
        pub name: String,
        /// The daemon's version.
        pub version: String,
    }
}

api_type! {
    /// What the daemon supports.
    pub struct Capabilities {
        /// Every method it serves.
        pub methods: Vec<String>,
        /// Every log event kind it may push in `session/event`.
        pub event_kinds: Vec<String>,
    }
}

api_type! {
    /// `initialize` result.
    pub struct InitializeResult {
        /// The daemon.
        pub server_info: ServerInfo,
        /// The protocol version spoken.
        pub protocol_version: u32,
        /// Supported methods and events.
        pub capabilities: Capabilities,
    }
}

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
    /// A session held in the daemon's memory.
    pub struct LoadedSession {
        /// The id.
        pub session_id: String,
        /// Whether a turn is running.
        pub running: bool,
        /// Set when the session's task failed; it accepts no more turns.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub failed: Option<String>,
    }
}

api_type! {
    /// One kernel feature the command sandbox is built from.
    pub struct SandboxFeature {
        /// `landlock` or `userns`.
        pub name: String,
        /// The kernel offers it.
        pub available: bool,
        /// The sandbox uses it (available, and not turned off by the configuration).
        pub used: bool,
        /// The configuration turned it off (`--sandbox-without`).
        pub turned_off: bool,
        /// What it offers (`Landlock ABI 7`), or why it is missing.
        pub detail: String,
    }
}

api_type! {
    /// What confines the commands the model runs.
    pub struct SandboxStatus {
        /// The policy: `workspace-write`, `read-only` or `full` (no confinement).
        pub policy: String,
        /// Whether commands may use the network.
        pub network: bool,
        /// Each kernel feature: offered, used, turned off.
        pub features: Vec<SandboxFeature>,
        /// The layers applied to every command, in words.
        pub in_force: Vec<String>,
        /// Every command asks for approval, because the sandbox is weaker than its policy.
        pub approval_required: bool,
        /// What is missing and what that means, for people (empty when all is in force).
        pub warnings: Vec<String>,
        /// What one command may use (processes, memory, file size, CPU time), in words; empty
        /// when commands are not confined.
        #[serde(default)]
        pub limits: String,
    }
}

api_type! {
    /// `daemon/status` result.
    pub struct DaemonStatusResult {
        /// The daemon's version.
        pub version: String,
        /// Its process id.
        pub pid: u32,
        /// Protocol version.
        pub protocol_version: u32,
        /// Its state directory.
        pub home: String,
        /// The base URL of the default provider profile.
        pub base_url: String,
        /// The provider profiles of the daemon's configuration (built in, the user's file and
        /// the daemon's flags; a workspace's file may add models or change defaults for its
        /// sessions). A base URL edited in the configuration shows here: it is not part of
        /// any log.
        #[serde(default)]
        pub profiles: Vec<ProfileStatus>,
        /// The configuration files in use.
        #[serde(default)]
        pub config_files: Vec<String>,
        /// Configuration files that cannot be used now, with where and why: their last good
        /// version stays in use.
        #[serde(default)]
        pub config_errors: Vec<String>,
        /// Sessions loaded in memory.
        pub sessions: Vec<LoadedSession>,
        /// Connected clients.
        pub clients: u64,
        /// Milliseconds since it started.
        pub uptime_ms: u64,
        /// What the user should know about this daemon's setup (a state directory others can
        /// read, descriptors running out, …); empty when all is well.
        #[serde(default)]
        pub warnings: Vec<String>,
        /// The command sandbox.
        pub sandbox: SandboxStatus,
        /// The MCP tool servers running or started for the loaded sessions' workspaces.
        #[serde(default)]
        pub mcp_servers: Vec<McpServerStatus>,
    }
}

api_type! {
    /// `mcp/list` params.
    pub struct McpListParams {
        /// The workspace whose configured servers to list as well (those not started show as
        /// `notStarted`); absent: only the servers running or started.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub workspace: Option<String>,
        /// Start the workspace's servers now and wait (bounded by their startup timeouts) to
        /// list their tools. They stop again unless a loaded session of the workspace uses them.
        #[serde(default)]
        pub start: bool,
    }
}

api_type! {
    /// `mcp/list` result.
    pub struct McpListResult {
        /// The servers, by workspace and name.
        pub servers: Vec<McpServerStatus>,
    }
}

api_type! {
    /// One MCP server of one workspace.
    pub struct McpServerStatus {
        /// The workspace it serves.
        pub workspace: String,
        /// The session whose own server it is (`session/mcpServers`); absent for a server
        /// configured for the workspace, shared by its sessions.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub session: Option<String>,
        /// Its name (its tools are `NAME__TOOL` in requests).
        pub name: String,
        /// `stdio` or `http`.
        pub transport: String,
        /// `notStarted`, `starting`, `running`, `failed` (a restart follows, with backoff),
        /// `stopped`, or `disabled` (`enabled = false`).
        pub state: String,
        /// Its tools as the model sees them (names and descriptions), sorted.
        pub tools: Vec<McpToolStatus>,
        /// Tools it listed that are not offered to the model, each with why.
        #[serde(default)]
        pub refused: Vec<String>,
        /// The last thing that went wrong with it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub last_error: Option<String>,
        /// How many times it was started.
        pub starts: u32,
    }
}

api_type! {
    /// `session/mcpServers` params: the session's own MCP servers, replacing the ones it had.
    pub struct SessionMcpServersParams {
        /// The session (loaded if it is not).
        pub session_id: String,
        /// Its servers; empty: none of its own.
        pub servers: Vec<McpServerSpec>,
    }
}

/// One MCP server a session brings: `command` (stdio: `args`, `env`, `cwd`) or `url` (streamable
/// HTTP: `headers`), not both. `env` values and `headers` are secrets: never logged, listed or
/// shown in an error (this type's `Debug` hides them).
#[derive(Clone, PartialEq, Serialize, Deserialize, JsonSchema, TS)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct McpServerSpec {
    /// Its name: 1 to 32 letters, digits or `-` (its tools are `NAME__TOOL` in requests).
    pub name: String,
    /// A stdio server: the program.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub command: Option<String>,
    /// A stdio server's arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[ts(as = "Option<Vec<String>>", optional)]
    pub args: Vec<String>,
    /// A stdio server's environment besides `PATH`, `HOME` and `LANG` (nothing else of the
    /// daemon's is inherited).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    #[ts(as = "Option<std::collections::BTreeMap<String, String>>", optional)]
    pub env: std::collections::BTreeMap<String, String>,
    /// A stdio server's working directory, absolute (default: the user's home).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub cwd: Option<String>,
    /// A streamable-HTTP server: its URL (`http` or `https`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub url: Option<String>,
    /// An HTTP server's extra request headers.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    #[ts(as = "Option<std::collections::BTreeMap<String, String>>", optional)]
    pub headers: std::collections::BTreeMap<String, String>,
}

impl std::fmt::Debug for McpServerSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hidden = |map: &std::collections::BTreeMap<String, String>| {
            map.keys().map(|key| format!("{key}=…")).collect::<Vec<_>>()
        };
        f.debug_struct("McpServerSpec")
            .field("name", &self.name)
            .field("command", &self.command)
            .field("args", &self.args)
            .field("env", &hidden(&self.env))
            .field("cwd", &self.cwd)
            .field("url", &self.url)
            .field("headers", &hidden(&self.headers))
            .finish()
    }
}

api_type! {
    /// `session/mcpServers` result.
    pub struct SessionMcpServersResult {
        /// The session's own servers now, by name (started in the background: a step waits
        /// for them).
        pub servers: Vec<McpServerStatus>,
    }
}

api_type! {
    /// One tool of an MCP server.
    pub struct McpToolStatus {
        /// Its name in requests (`SERVER__TOOL`).
        pub name: String,
        /// Its description, as the server gave it.
        pub description: String,
    }
}

api_type! {
    /// A `daemon/notice`: something the user should know now.
    pub struct DaemonNotice {
        /// `configError`: a configuration file was edited into one that cannot be used (the
        /// last good version stays in use).
        pub kind: String,
        /// For people: the file, the line and what is wrong.
        pub message: String,
    }
}

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
    /// One provider profile in `daemon/status`.
    pub struct ProfileStatus {
        /// Its name.
        pub name: String,
        /// The endpoint kind.
        pub kind: ProviderKind,
        /// Where its requests go.
        pub base_url: String,
        /// Whether new sessions use it by default.
        pub default: bool,
        /// The models it lists (with prices where configured).
        pub models: Vec<ModelStatus>,
    }
}

api_type! {
    /// One model of a profile in `daemon/status`.
    pub struct ModelStatus {
        /// The model id.
        pub id: String,
        /// Its context window, when configured.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub context_window: Option<u64>,
        /// Its prices, when configured.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub price: Option<Price>,
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
    /// `daemon/shutdown` result.
    pub struct DaemonShutdownResult {
        /// Always true: the daemon cancels running turns, flushes logs, removes its socket and
        /// exits after answering.
        pub stopping: bool,
    }
}

api_type! {
    /// The params of a method that takes none: `{}` (absent params are accepted too).
    #[derive(Default)]
    pub struct NoParams {}
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
