//! A step's `task` calls: each child starts before the step's other calls run (its `tool/call`
//! logged first), runs while they run, and is awaited in the calls' order; its report is the
//! call's `tool/result`, and its spend counts against the turn's budgets. A call the seam
//! refuses (the depth rule) or whose arguments are wrong is answered with the rule, as any
//! tool's bad call is.

use std::collections::HashMap;

use dsh_session::{EventData, TASK_TOOL, ToolCall, ToolCallStarted, ToolResult};
use tokio_util::sync::{CancellationToken, DropGuard};

use super::Agent;
use crate::approval::BoxFuture;
use crate::error::AgentError;
use crate::owner::SessionHandle;
use crate::subagents::{TaskReport, TaskRequest, parse_task};

/// A `task` call of the step, started.
pub(super) enum Child {
    /// Its child runs; the report comes. Dropped unawaited (the step failed), the guard
    /// cancels the child: no child outlives the step that started it.
    Running(BoxFuture<'static, TaskReport>, DropGuard),
    /// Answered without a child: the error the model sees.
    Refused(String),
    /// Blocked by a `PreToolUse` hook of the user's: the result it gave.
    Blocked(ToolResult),
}

impl Agent {
    /// Starts the children of the step's `task` calls (none without a seam: a `task` call is
    /// then an unknown tool's), by call id.
    pub(super) async fn start_children(
        &mut self,
        session: &SessionHandle,
        step: u64,
        boundary_seq: u64,
        calls: &[ToolCall],
        cancel: &CancellationToken,
    ) -> Result<HashMap<String, Child>, AgentError> {
        let mut children = HashMap::new();
        let Some(subagents) = self.subagents.clone() else { return Ok(children) };
        for call in calls.iter().filter(|call| call.name == TASK_TOOL) {
            if cancel.is_cancelled() {
                let refused = Child::Refused("not run: the turn was cancelled".to_owned());
                children.insert(call.id.clone(), refused);
                continue;
            }
            // The user's `PreToolUse` hooks see a `task` call as any other: a blocked one starts
            // no child (and, as for any blocked call, no `tool/call` is logged).
            if let Some(blocked) = self.pre_tool_hooks(session, call, cancel).await? {
                children.insert(call.id.clone(), Child::Blocked(blocked));
                continue;
            }
            let started = ToolCallStarted {
                step,
                call_id: call.id.clone(),
                name: call.name.clone(),
                unconfined: false,
            };
            session.append(EventData::ToolCall(started)).await?;
            let child = match (subagents.refusal(), parse_task(&call.arguments)) {
                (Some(rule), _) | (None, Err(rule)) => Child::Refused(rule),
                (None, Ok(arguments)) => {
                    let request = TaskRequest {
                        parent: session.session_id().to_owned(),
                        call_id: call.id.clone(),
                        description: arguments.description,
                        prompt: arguments.prompt,
                        context: arguments.context,
                        boundary_seq,
                        budgets: arguments.budgets,
                        parent_left: self.turn_left.clone(),
                    };
                    let token = cancel.child_token();
                    let guard = token.clone().drop_guard();
                    Child::Running(subagents.spawn(request, session.clone(), token), guard)
                }
            };
            children.insert(call.id.clone(), child);
        }
        Ok(children)
    }

    /// The result of a started `task` call: its child's report (its spend added to the
    /// turn's children's), or the refusal.
    pub(super) async fn await_child(&mut self, call: &ToolCall, child: Child) -> ToolResult {
        let (content, is_error) = match child {
            Child::Blocked(result) => return result,
            Child::Refused(content) => (content, true),
            Child::Running(report, _guard) => {
                let report = report.await;
                let (usage, usd) = &mut self.children_spent;
                *usage = usage.add(&report.usage);
                *usd += report.usd;
                (report.content, report.is_error)
            }
        };
        ToolResult {
            call_id: call.id.clone(),
            name: call.name.clone(),
            content,
            is_error,
            seen: None,
            images: Vec::new(),
        }
    }
}
