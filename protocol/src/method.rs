//! Method names and the method table: each method's name with its params and result types,
//! the one place clients and the daemon agree on them.

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
/// The bytes of an object (an image) the session's log names.
pub const SESSION_OBJECT: &str = "session/object";
/// Per-step usage.
pub const SESSION_USAGE: &str = "session/usage";
/// The session's current plan (the model's `update_plan`).
pub const SESSION_PLAN: &str = "session/plan";
/// The prompt commands and skills of a session's workspace.
pub const SESSION_COMMANDS: &str = "session/commands";
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
/// Hand provider keys to a daemon that has none for them.
pub const DAEMON_KEYS: &str = "daemon/keys";
/// Serve the browser viewer: start (or reuse) the loopback network front and mint a one-time
/// login code.
pub const DAEMON_WEB: &str = "daemon/web";
/// Rebuild every step of a session and compare with what was sent.
pub const SESSION_AUDIT: &str = "session/audit";
/// Subscribe to the daemon's notices (a configuration edit that cannot be used, …).
pub const DAEMON_SUBSCRIBE: &str = "daemon/subscribe";
/// The notification a daemon subscription delivers.
pub const DAEMON_NOTICE: &str = "daemon/notice";
/// The notification a daemon subscription delivers when a watched file changes.
pub const WORKSPACE_CHANGED: &str = "workspace/changed";
/// The notification a daemon subscription delivers when a turn starts.
pub const WORKSPACE_TURN_STARTED: &str = "workspace/turnStarted";
/// End a daemon subscription.
pub const DAEMON_UNSUBSCRIBE: &str = "daemon/unsubscribe";
/// Which agent step wrote each line of a workspace file.
pub const WORKSPACE_PROVENANCE: &str = "workspace/provenance";
/// The MCP tool servers of a workspace: state, tools, last error.
pub const MCP_LIST: &str = "mcp/list";
/// A session's own MCP servers (what an ACP editor passes), replacing the ones it had.
pub const SESSION_MCP_SERVERS: &str = "session/mcpServers";

/// A session's workspace checkpoints.
pub const SESSION_CHECKPOINTS: &str = "session/checkpoints";
/// Return the workspace's files and/or the conversation to a checkpoint.
pub const SESSION_REWIND: &str = "session/rewind";

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
    SESSION_OBJECT,
    SESSION_USAGE,
    SESSION_PLAN,
    SESSION_COMMANDS,
    SESSION_EVENTS,
    SESSION_COMPACT,
    SESSION_AUDIT,
    SESSION_CHECKPOINTS,
    SESSION_REWIND,
    WORKSPACE_PROVENANCE,
    APPROVAL_RESPOND,
    MCP_LIST,
    SESSION_MCP_SERVERS,
    DAEMON_STATUS,
    DAEMON_SHUTDOWN,
    DAEMON_KEYS,
    DAEMON_WEB,
    DAEMON_SUBSCRIBE,
    DAEMON_UNSUBSCRIBE,
];

use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// How a method's answer is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Like any JSON-RPC answer: computed where the call arrived, queued behind the others.
    Small,
    /// Possibly very large ("what the model saw" of a long conversation is a hundred megabytes
    /// of JSON): computed and serialized on the blocking pool, a bounded number at once in the
    /// process and one per connection until written (the daemon's `connection.rs` says how).
    Large,
}

/// A method of the API: its name and the types of its params and result. Clients call
/// through it (`client.call::<method::SessionPrompt>(params)`) and the daemon registers its
/// handlers by it, so both sides agree on the types by construction.
pub trait Method {
    /// The method's name on the wire.
    const NAME: &'static str;
    /// How its answer is written.
    const ANSWER: Answer;
    /// Its params.
    type Params: Serialize + DeserializeOwned + JsonSchema + Send + 'static;
    /// Its result.
    type Result: Serialize + DeserializeOwned + JsonSchema + Clone + Send + 'static;
}

/// Something done for every method of the table (the generated schemas, a registry).
pub trait Visit {
    /// Called once per method, in table order.
    fn method<M: Method>(&mut self);
}

macro_rules! methods {
    ($($(#[$meta:meta])* $name:ident = $wire:ident ($params:ty) -> $result:ty $(, $answer:ident)?;)*) => {
        $(
            $(#[$meta])*
            #[derive(Clone, Copy, Debug)]
            pub struct $name;
            impl Method for $name {
                const NAME: &'static str = $wire;
                const ANSWER: Answer = methods!(@answer $($answer)?);
                type Params = $params;
                type Result = $result;
            }
        )*

        /// Visits every method of the table, in order.
        pub fn visit(visitor: &mut impl Visit) {
            $(visitor.method::<$name>();)*
        }

        /// How the answer of the method named `name` is written (`Small` for a name not in
        /// the table).
        pub fn answer_of(name: &str) -> Answer {
            match name {
                $($wire => <$name as Method>::ANSWER,)*
                _ => Answer::Small,
            }
        }
    };
    (@answer) => { Answer::Small };
    (@answer large) => { Answer::Large };
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
    SessionRequest = SESSION_REQUEST (SessionRequestParams) -> SessionRequestResult, large;
    /// `session/object`.
    SessionObject = SESSION_OBJECT (SessionObjectParams) -> SessionObjectResult, large;
    /// `session/usage`.
    SessionUsage = SESSION_USAGE (SessionParams) -> SessionUsageResult;
    /// `session/plan`.
    SessionPlan = SESSION_PLAN (SessionParams) -> SessionPlanResult;
    /// `session/commands`.
    SessionCommands = SESSION_COMMANDS (SessionParams) -> SessionCommandsResult;
    /// `session/events`.
    SessionEvents = SESSION_EVENTS (SessionEventsParams) -> SessionEventsResult;
    /// `session/compact`.
    SessionCompact = SESSION_COMPACT (SessionParams) -> SessionCompactResult;
    /// `session/audit`.
    SessionAudit = SESSION_AUDIT (SessionParams) -> SessionAuditResult;
    /// `session/checkpoints`.
    SessionCheckpoints = SESSION_CHECKPOINTS (SessionParams) -> SessionCheckpointsResult;
    /// `session/rewind`.
    SessionRewind = SESSION_REWIND (SessionRewindParams) -> SessionRewindResult;
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
    /// `daemon/keys`.
    DaemonKeys = DAEMON_KEYS (DaemonKeysParams) -> DaemonKeysResult;
    /// `daemon/web`.
    DaemonWeb = DAEMON_WEB (DaemonWebParams) -> DaemonWebResult;
}
