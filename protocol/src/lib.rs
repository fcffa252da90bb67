//! The dsh JSON-RPC API: every method's name, params and result, the `session/event`
//! notification, and the application error codes. `README.md` beside this crate documents each
//! method with an example exchange.
//!
//! These are the API's own types: the log vocabulary (`dsh-session`) appears in them only where
//! the API hands out log content as is (events, headers, messages, usage). A JSON Schema
//! (`protocol/schema/`) and TypeScript declarations (`editors/vscode/src/protocol.generated.ts`)
//! are generated from this crate ([`generate`]), and so is the schema of the lines `dsh prompt
//! --json` writes ([`script`]); a test fails when the committed files are
//! stale. This crate holds no logic: no transport, no session state.
#![warn(missing_docs)]

#[macro_use]
mod macros {
    macro_rules! api_type {
        ($(#[$meta:meta])* pub struct $name:ident { $($body:tt)* }) => {
            $(#[$meta])*
            #[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema, TS)]
            #[serde(rename_all = "camelCase")]
            pub struct $name { $($body)* }
        };
    }
}

pub mod code;
mod event;
pub mod generate;
pub mod jsonrpc;
pub mod method;
pub mod script;
mod types;

pub use event::SessionEvent;

/// The log vocabulary, typed, for clients that fold the events they receive (the fronts): an
/// event as delivered decodes with [`decode_event`] like a log line.
pub use dsh_session::{ApprovalRequest, ChunkDelta, Event, EventData, decode_event};
pub use dsh_session::{CheckpointReason, TooLargeFile, WorkspaceCheckpoint, WorkspaceRewind};
pub use dsh_session::{
    Cost, EpochHeader, ForkOrigin, LimitKind, Message, PrefixCause, Price, ProviderKind,
    RequestSent, StopReason, TurnLimit, Usage, UsageRow,
};
pub use dsh_session::{CurrentPlan, PlanEntry, PlanStatus, PlanUpdate, UPDATE_PLAN_TOOL};
pub use dsh_session::{ParentLink, TASK_TOOL, TaskContext, TaskSpawn};

/// The protocol version this build speaks; `initialize` refuses another.
pub const PROTOCOL_VERSION: u32 = 1;

pub use types::daemon::*;
pub use types::mcp::*;
pub use types::rewind::*;
pub use types::session::*;
pub use types::workspace::*;
