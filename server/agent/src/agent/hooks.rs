//! Hooks in the turn (docs/hooks.md): when each event's hooks run, what their input is, and
//! what an outcome does. Every run is logged `hook/run` (not model-visible); what a run gives
//! the model is logged on its own — a `context/message` of source `hook` (appended, so it
//! costs the cache only its text), or the tool result of a blocked call.
//!
//! - `SessionStart`: before the first turn a loop instance runs (a session created or loaded);
//!   its output joins that turn after `turn/start`.
//! - `UserPromptSubmit`: before the prompt is logged; exit 2 — or a failure (fail closed) —
//!   refuses it ([`AgentError::PromptRefused`]): nothing model-visible is logged, the runs are.
//!   Its output joins after the prompt.
//! - `PreToolUse`: before a call is decided; exit 2 or a failure blocks it (fail closed): the
//!   call does not run, and the hook's standard error (or the failure) is its result.
//! - `PostToolUse`: after a call's result is logged; its output (exit 0) or its standard error
//!   (exit 2) joins the next request.
//! - `Stop`: when the model stops; exit 2 makes the turn go on, the hook's standard error a
//!   logged note (the next run's input says `stop_hook_active`).
//! - `PreCompact`: before a compaction the loop starts; it cannot block it.
//!
//! A failed run of any other event is logged and goes on; the user sees it in every front.

use std::path::Path;
use std::sync::Arc;

use dsh_session::{ContextMessage, EventData, HookEvent, HookOutcome, ToolCall, ToolResult};
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use super::Agent;
use crate::compact::{ContextConfig, Decision, decide};
use crate::error::AgentError;
use crate::hooks::{HookReport, HookSource, run_hook};
use crate::owner::SessionHandle;

/// The source of the notes hooks add.
pub const HOOK_SOURCE: &str = "hook";

impl Agent {
    /// Runs the hooks `source` gives at each point of a turn.
    pub fn set_hooks(&mut self, source: Arc<dyn HookSource>) {
        self.user_hooks = Some(source);
    }

    /// Runs the hooks of `event` ([`run_hooks`]) with this loop's source and workspace.
    async fn run_hooks(
        &self,
        session: &SessionHandle,
        event: HookEvent,
        fields: Map<String, Value>,
        call: Option<&ToolCall>,
        cancel: &CancellationToken,
    ) -> Result<Vec<HookReport>, AgentError> {
        let Some(source) = &self.user_hooks else { return Ok(Vec::new()) };
        run_hooks(source.as_ref(), session, &self.workspace, event, fields, call, cancel).await
    }

    /// `PreCompact` (`auto`), when the pre-step relief is about to compact under `context`.
    pub(super) async fn pre_compact(
        &self,
        session: &SessionHandle,
        context: &ContextConfig,
        cancel: &CancellationToken,
    ) -> Result<(), AgentError> {
        let Some(source) = &self.user_hooks else { return Ok(()) };
        if !source.hooks().hooks.iter().any(|hook| hook.event == HookEvent::PreCompact) {
            return Ok(());
        }
        let context = context.clone();
        let decision = session.query(move |s| decide(s, &context)).await?;
        if !matches!(decision, Decision::Compact { .. }) {
            return Ok(());
        }
        pre_compact_hooks(source.as_ref(), session, &self.workspace, "auto", cancel).await
    }

    /// `SessionStart`, once per loop instance: the notes its hooks give (logged by the caller
    /// after `turn/start`). `resumed`: the log already holds a turn.
    pub(super) async fn session_start_hooks(
        &mut self,
        session: &SessionHandle,
        resumed: bool,
        cancel: &CancellationToken,
    ) -> Result<Vec<ContextMessage>, AgentError> {
        if self.session_started {
            return Ok(Vec::new());
        }
        let mut fields = Map::new();
        fields.insert("source".to_owned(), json!(if resumed { "resume" } else { "startup" }));
        let reports =
            self.run_hooks(session, HookEvent::SessionStart, fields, None, cancel).await?;
        self.session_started = true;
        Ok(reports.iter().filter_map(|report| note(report, &report.stdout)).collect())
    }

    /// `UserPromptSubmit`: the notes its hooks give (logged by the caller after the prompt), or
    /// the refusal.
    pub(super) async fn prompt_hooks(
        &self,
        session: &SessionHandle,
        prompt: &str,
        cancel: &CancellationToken,
    ) -> Result<Vec<ContextMessage>, AgentError> {
        let mut fields = Map::new();
        fields.insert("prompt".to_owned(), json!(prompt));
        let reports =
            self.run_hooks(session, HookEvent::UserPromptSubmit, fields, None, cancel).await?;
        if let Some(report) = reports.iter().find(|r| r.run.outcome != HookOutcome::Ok) {
            return Err(AgentError::PromptRefused {
                hook: report.run.hook.clone(),
                reason: refusal(report),
            });
        }
        Ok(reports.iter().filter_map(|report| note(report, &report.stdout)).collect())
    }

    /// `PreToolUse`: the result of a call a hook blocked, if one did (fail closed).
    pub(super) async fn pre_tool_hooks(
        &self,
        session: &SessionHandle,
        call: &ToolCall,
        cancel: &CancellationToken,
    ) -> Result<Option<ToolResult>, AgentError> {
        let reports =
            self.run_hooks(session, HookEvent::PreToolUse, Map::new(), Some(call), cancel).await?;
        Ok(reports.iter().find(|r| r.run.outcome != HookOutcome::Ok).map(|report| ToolResult {
            call_id: call.id.clone(),
            name: call.name.clone(),
            content: format!("not run: {}", refusal(report)),
            is_error: true,
            seen: None,
            images: Vec::new(),
        }))
    }

    /// `PostToolUse`: logs the notes its hooks give about `result`.
    pub(super) async fn post_tool_hooks(
        &self,
        session: &SessionHandle,
        call: &ToolCall,
        result: &ToolResult,
        cancel: &CancellationToken,
    ) -> Result<(), AgentError> {
        let mut fields = Map::new();
        fields.insert(
            "tool_response".to_owned(),
            json!({ "content": result.content, "is_error": result.is_error }),
        );
        let reports =
            self.run_hooks(session, HookEvent::PostToolUse, fields, Some(call), cancel).await?;
        for report in &reports {
            let text = match report.run.outcome {
                HookOutcome::Ok => &report.stdout,
                HookOutcome::Blocked => &report.stderr,
                HookOutcome::Failed => continue,
            };
            if let Some(note) = note(report, text) {
                session.append(EventData::ContextMessage(note)).await?;
            }
        }
        Ok(())
    }

    /// `Stop`: the note that makes the turn go on, when a hook blocks the stop. `active`: the
    /// turn already went on for a Stop hook.
    pub(super) async fn stop_hooks(
        &self,
        session: &SessionHandle,
        answer: &str,
        active: bool,
        cancel: &CancellationToken,
    ) -> Result<Option<ContextMessage>, AgentError> {
        let mut fields = Map::new();
        fields.insert("stop_hook_active".to_owned(), json!(active));
        fields.insert("last_assistant_message".to_owned(), json!(answer));
        let reports = self.run_hooks(session, HookEvent::Stop, fields, None, cancel).await?;
        Ok(reports.iter().find(|r| r.run.outcome == HookOutcome::Blocked).map(|report| {
            let reason = report.stderr.trim_end();
            let reason = if reason.is_empty() { "(it gave no reason)" } else { reason };
            ContextMessage {
                text: format!(
                    "[hook `{}`, Stop] The turn is not finished: {reason}",
                    report.run.hook
                ),
                source: Some(HOOK_SOURCE.to_owned()),
                instructions: None,
                files: None,
            }
        }))
    }
}

/// Whether a hook that blocks or fails stops the event's later hooks (the gates: their first
/// "no" is the answer).
fn gates(event: HookEvent) -> bool {
    matches!(event, HookEvent::PreToolUse | HookEvent::UserPromptSubmit | HookEvent::Stop)
}

/// The note a run's `text` makes, naming the hook; none for blank text.
fn note(report: &HookReport, text: &str) -> Option<ContextMessage> {
    let text = text.trim_end();
    if text.trim().is_empty() {
        return None;
    }
    let run = &report.run;
    let about = run.tool.as_ref().map(|tool| format!(", {tool}")).unwrap_or_default();
    Some(ContextMessage {
        text: format!("[hook `{}`, {}{about}]\n{text}", run.hook, run.event.name()),
        source: Some(HOOK_SOURCE.to_owned()),
        instructions: None,
        files: None,
    })
}

/// Why a gate said no, in words: the hook's standard error when it blocked; the failure when
/// it failed (a gate fails closed).
fn refusal(report: &HookReport) -> String {
    let run = &report.run;
    let stderr = report.stderr.trim_end();
    match run.outcome {
        HookOutcome::Blocked if stderr.is_empty() => {
            format!("blocked by hook `{}` ({}), which gave no reason", run.hook, run.event.name())
        }
        HookOutcome::Blocked => {
            format!("blocked by hook `{}` ({}): {stderr}", run.hook, run.event.name())
        }
        _ => {
            let error = run.error.as_deref().unwrap_or("it failed");
            let said =
                if stderr.is_empty() { String::new() } else { format!("; it said: {stderr}") };
            format!(
                "blocked: hook `{}` ({}) failed: {error}{said} (a {} hook that fails blocks)",
                run.hook,
                run.event.name(),
                run.event.name()
            )
        }
    }
}

/// Runs every hook of `event` that `source` enables (for a call: those whose matcher takes its
/// tool) in order, in `workspace`, logging each run; a gate's first "no" ends the runs.
pub async fn run_hooks(
    source: &dyn HookSource,
    session: &SessionHandle,
    workspace: &Path,
    event: HookEvent,
    fields: Map<String, Value>,
    call: Option<&ToolCall>,
    cancel: &CancellationToken,
) -> Result<Vec<HookReport>, AgentError> {
    let set = source.hooks();
    let chosen: Vec<_> = set
        .hooks
        .iter()
        .filter(|hook| hook.event == event && call.is_none_or(|c| hook.matches(&c.name)))
        .collect();
    if chosen.is_empty() {
        return Ok(Vec::new());
    }
    let mut input = Map::new();
    input.insert("session_id".to_owned(), json!(session.session_id()));
    let workspace_text = workspace.display().to_string();
    input.insert("cwd".to_owned(), json!(workspace_text));
    input.insert("workspace".to_owned(), json!(workspace_text));
    input.insert("hook_event_name".to_owned(), json!(event.name()));
    if let Some(call) = call {
        input.insert("tool_name".to_owned(), json!(call.name));
        input.insert("tool_call_id".to_owned(), json!(call.id));
        // Verbatim, as the model wrote them; parsed too, for scripts written for Claude
        // Code (`.tool_input.command`), when they are JSON.
        input.insert("tool_arguments".to_owned(), json!(call.arguments));
        let parsed = serde_json::from_str::<Value>(&call.arguments).unwrap_or(Value::Null);
        input.insert("tool_input".to_owned(), parsed);
    }
    input.extend(fields);
    let input = Value::Object(input);
    let mut reports = Vec::new();
    for hook in chosen {
        let call = call.map(|c| (c.id.as_str(), c.name.as_str()));
        let report = run_hook(hook, &set, &input, workspace, call, cancel).await;
        session.append(EventData::HookRun(report.run.clone())).await?;
        let stop = report.run.outcome != HookOutcome::Ok && gates(event);
        reports.push(report);
        if stop {
            break;
        }
    }
    Ok(reports)
}

/// `PreCompact`: runs its hooks before a compaction (`trigger`: `auto` for the loop's, `manual`
/// for `session/compact`). They cannot block it; each run is logged.
pub async fn pre_compact_hooks(
    source: &dyn HookSource,
    session: &SessionHandle,
    workspace: &Path,
    trigger: &str,
    cancel: &CancellationToken,
) -> Result<(), AgentError> {
    let mut fields = Map::new();
    fields.insert("trigger".to_owned(), json!(trigger));
    run_hooks(source, session, workspace, HookEvent::PreCompact, fields, None, cancel).await?;
    Ok(())
}
