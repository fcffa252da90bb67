//! The dsh agent loop: steps, tools, approvals, context pressure, and the reconstruction
//! invariant.
//!
//! [`Agent::run_turn`] (or [`Agent::run_turn_within`] its budgets, [`TurnLimits`]) runs one turn against a live session held by its owner task
//! ([`spawn_owner`], [`SessionHandle`]): every request it sends is built from the log — a message
//! snapshot taken atomically with `step/start`, and the folded header — and, when invariants are
//! on, checked against a fresh rebuild of the log before dispatch.
//!
//! This crate does not own processes, sockets or the CLI (that is the daemon), nor the log
//! format (the session crate) or the wire format (the provider crate).

mod agent;
pub mod approval;
mod checkpoints;
pub mod compact;
mod endpoint;
mod error;
mod external;
pub mod hooks;
mod images;
mod invariant;
mod owner;
pub mod prompt;
mod seen;
pub mod subagents;
pub mod tools;

pub use agent::{
    Agent, AgentConfig, CallOverrides, Clock, HOOK_SOURCE, HookContext, INTERRUPTED,
    MAX_SCHEMA_BYTES, OUTPUT_INVALID_SOURCE, OUTPUT_SCHEMA_SOURCE, OutputSchema, RequestHook,
    StepTiming, TurnLimits, TurnOutcome, close_interrupted, close_open_turn, pre_compact_hooks,
    run_hooks,
};
pub use checkpoints::Checkpoints;
pub use compact::{CompactOutcome, ContextConfig, ContextPolicy, Decision, compact_now};
pub use endpoint::{Endpoint, Endpoints, SharedEndpoints};
pub use error::AgentError;
pub use external::{ExternalTool, ExternalTools, Waits};
pub use images::ImageObjects;
pub use invariant::first_difference;
pub use owner::{SessionHandle, StepSnapshot, spawn_owner};
pub use subagents::{Subagents, TaskBudgets, TaskReport, TaskRequest};
