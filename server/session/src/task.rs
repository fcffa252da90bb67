//! Sub-agents: a `task` call runs a child session — a session like any other, with its own log —
//! whose final answer is the call's result (docs/subagents.md).
//!
//! Two places in the logs tie a child to its parent: the child's `session/meta` names its
//! [`ParentLink`] (the parent session, the `task` call and its depth), and the parent logs
//! `task/spawn` ([`TaskSpawn`]) inside the step, after the call's `tool/call`, naming the child
//! session the moment it exists. Neither is model-visible; the model sees its call and the
//! result. [`task_children`] folds a log's children; [`interrupted_task_result`] is the result a
//! call cut by a crash is closed with.

use serde::{Deserialize, Serialize};

use crate::event::{Event, EventData};

/// The name of the sub-agent tool, as the model calls it.
pub const TASK_TOOL: &str = "task";

/// How a child session starts.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskContext {
    /// From the system prompt and the task's prompt alone.
    Fresh,
    /// As a fork of the parent at the boundary of the step that called `task`: the parent's
    /// conversation so far, then the task's prompt (its first request reuses the parent's
    /// cached prefix).
    Fork,
}

impl TaskContext {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskContext::Fresh => "fresh",
            TaskContext::Fork => "fork",
        }
    }
}

/// A child session's parent (`session/meta.parent`).
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS), ts(optional_fields))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ParentLink {
    /// The parent session.
    pub session_id: String,
    /// The parent's `task` call this child answers.
    pub tool_call_id: String,
    /// How deep the child is: 1 for a child of a top-level session.
    pub depth: u32,
}

/// `task/spawn`: the child session of a `task` call was created (not model-visible). Logged in
/// the parent inside the step, after the call's `tool/call`, before its `tool/result`.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS), ts(optional_fields))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TaskSpawn {
    /// The `task` call.
    pub call_id: String,
    /// The child session.
    pub session_id: String,
    /// How it started.
    pub context: TaskContext,
    /// The call's short description.
    pub description: String,
    /// The child's depth.
    pub depth: u32,
}

/// The children a log's `task` calls spawned, in order.
pub fn task_children(events: &[Event]) -> Vec<&TaskSpawn> {
    events
        .iter()
        .filter_map(|event| match &event.data {
            EventData::TaskSpawn(spawn) => Some(spawn),
            _ => None,
        })
        .collect()
}

/// The result a `task` call left unanswered by a crash is closed with: it names the child that
/// was interrupted, when the log says which (`None` when the call is no `task` call with a
/// logged child).
pub fn interrupted_task_result(events: &[Event], call_id: &str, message: &str) -> Option<String> {
    let spawn = task_children(events).into_iter().rev().find(|spawn| spawn.call_id == call_id)?;
    Some(format!(
        "not run to its end: child session {} ({}) was interrupted: {message}",
        spawn.session_id, spawn.description
    ))
}
