//! Log events → ACP `session/update`s: one fold per session, used alike for the live stream
//! and for `session/load`'s replay (both are the same subscription from a seq), so a replayed
//! conversation is the live one again.
//!
//! Pure: no I/O. The updates are the SDK's typed `SessionUpdate`s; dsh's own data in them (a
//! step's usage and cost, a steering message's mark) is `_meta` built by `ext.rs`. A step's
//! cost is an input (`session/usage`'s per-step costs, given with [`Translator::price_steps`]), so the
//! fold also keeps the session's cumulative cost that each `usage_update` carries.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use agent_client_protocol::v1::schema::{
    ContentBlock, ContentChunk, Cost as AcpCost, Diff, Plan, PlanEntry, PlanEntryPriority,
    PlanEntryStatus, SessionUpdate, ToolCall, ToolCallContent, ToolCallLocation, ToolCallStatus,
    ToolCallUpdate, ToolCallUpdateFields, ToolKind, UsageUpdate,
};
use dsh_protocol::{
    ApprovalRequest, ChunkDelta, Cost, Event, EventData, PlanStatus, PlanUpdate, StopReason, Usage,
    UsageEntry,
};
use serde_json::{Value, json};

use crate::ext;

/// What the fold knows about a session's log so far.
#[derive(Debug, Default)]
pub struct Translator {
    /// The session's workspace (tool paths are relative to it; ACP wants absolute ones).
    workspace: String,
    /// The model's context window, for `usage_update.size`.
    window: u64,
    /// The running turn, if any.
    pub running_turn: Option<u64>,
    /// The last turn that ended, and why.
    pub last_ended: Option<(u64, StopReason)>,
    /// The finish reason of the last finished step.
    pub last_finish_reason: Option<String>,
    /// Tool names and arguments of the calls not answered yet, by call id, for the updates
    /// that follow the call (dropped at the result: a long session keeps none of them).
    calls: HashMap<String, (String, Value)>,
    /// Approvals asked and not yet decided, by approval id.
    pub pending_approvals: HashMap<String, ApprovalRequest>,
    /// Each finished step's cost at the configured prices (`None`: no price for its model), as
    /// `session/usage` said.
    costs: HashMap<u64, Option<Cost>>,
    /// The session's cost up to the last step folded: `None` before any step, `Some(None)`
    /// once a step had no price (or the currencies differ).
    spent: Option<Option<Cost>>,
}

impl Translator {
    /// A fold for a session in `workspace` whose model has `window` tokens of context.
    pub fn new(workspace: String, window: u64) -> Translator {
        Translator { workspace, window, ..Translator::default() }
    }

    /// The session's workspace.
    pub fn workspace(&self) -> &str {
        &self.workspace
    }

    /// The context window of `usage_update`s.
    pub fn window(&self) -> u64 {
        self.window
    }

    /// The costs of the finished steps among `rows` (`session/usage`'s), for their
    /// `usage_update`s; whether there was any. A step that has not finished has no usage, nor
    /// its final cost, yet.
    pub fn price_steps(&mut self, rows: Vec<UsageEntry>) -> bool {
        let mut finished = false;
        for entry in rows.into_iter().filter(|entry| entry.row.usage.is_some()) {
            self.costs.insert(entry.row.step, entry.row.cost);
            finished = true;
        }
        finished
    }

    /// Whether tool call `call_id` was seen and not answered yet.
    pub fn is_pending(&self, call_id: &str) -> bool {
        self.calls.contains_key(call_id)
    }

    /// Whether step `step`'s cost was given.
    pub fn is_priced(&self, step: u64) -> bool {
        self.costs.contains_key(&step)
    }

    /// The cost of the steps before the first event this fold sees (a subscription from the
    /// log's end), which the first `usage_update`'s cumulative cost starts from.
    pub fn spent_before(&mut self, spent: Option<Cost>) {
        self.spent = Some(spent);
    }

    /// The updates `event` makes, in order.
    pub fn updates(&mut self, event: &Event) -> Vec<SessionUpdate> {
        match &event.data {
            EventData::TurnStart(start) => {
                self.running_turn = Some(start.turn);
                vec![]
            }
            EventData::TurnEnd(end) => {
                self.running_turn = None;
                self.last_ended = Some((end.turn, end.reason));
                self.pending_approvals.clear();
                vec![]
            }
            EventData::UserMessage(message) => {
                vec![SessionUpdate::UserMessageChunk(text_chunk(&message.text))]
            }
            EventData::SteeringMessage(message) => {
                let chunk = text_chunk(&message.text).meta(ext::steering_message_meta());
                vec![SessionUpdate::UserMessageChunk(chunk)]
            }
            EventData::AssistantChunk(chunk) => chunk_update(&chunk.delta).into_iter().collect(),
            EventData::AssistantMessage(turn) => {
                let mut updates = Vec::new();
                for call in &turn.message.tool_calls {
                    let input: Value = serde_json::from_str(&call.arguments).unwrap_or(Value::Null);
                    let fields = self.call_fields(&call.name, &input);
                    self.calls.insert(call.id.clone(), (call.name.clone(), input));
                    updates.push(SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
                        call.id.clone(),
                        fields,
                    )));
                }
                updates
            }
            EventData::ToolCall(started) => {
                let fields = ToolCallUpdateFields::new().status(ToolCallStatus::InProgress);
                vec![SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
                    started.call_id.clone(),
                    fields,
                ))]
            }
            EventData::ToolResult(result) => {
                let update = self.result_update(&result.call_id, &result.content, result.is_error);
                vec![SessionUpdate::ToolCallUpdate(update)]
            }
            EventData::PlanUpdate(update) => vec![SessionUpdate::Plan(plan(event.seq, update))],
            // A sub-agent started: the call names it, and carries its session id.
            EventData::TaskSpawn(spawn) => {
                let fields = ToolCallUpdateFields::new()
                    .title(format!("sub-agent ({}): {}", spawn.context.as_str(), spawn.description))
                    .status(ToolCallStatus::InProgress);
                let update =
                    ToolCallUpdate::new(spawn.call_id.clone(), fields).meta(ext::task_meta(spawn));
                vec![SessionUpdate::ToolCallUpdate(update)]
            }
            EventData::StepEnd(end) => {
                self.last_finish_reason = Some(end.finish_reason.clone());
                vec![SessionUpdate::UsageUpdate(self.usage_update(end.step, &end.usage))]
            }
            EventData::ApprovalRequest(request) => {
                self.pending_approvals.insert(request.approval_id.clone(), request.clone());
                vec![]
            }
            EventData::ApprovalDecision(decision) => {
                self.pending_approvals.remove(&decision.approval_id);
                vec![]
            }
            _ => vec![],
        }
    }

    /// The `tool_call_update` of a call's result: its status, an edit's diff (its call's
    /// fields are dropped here) and the result text.
    fn result_update(&mut self, call_id: &str, text: &str, is_error: bool) -> ToolCallUpdate {
        let mut content = Vec::new();
        if let Some((name, input)) = self.calls.remove(call_id)
            && !is_error
            && let Some(diff) = self.diff(&name, &input)
        {
            content.push(ToolCallContent::Diff(diff));
        }
        content.push(ToolCallContent::from(text));
        let status = if is_error { ToolCallStatus::Failed } else { ToolCallStatus::Completed };
        let fields = ToolCallUpdateFields::new()
            .status(status)
            .content(content)
            .raw_output(json!({"content": text, "isError": is_error}));
        ToolCallUpdate::new(call_id.to_owned(), fields)
    }

    /// What ACP says of tool call `call_id` besides its id, for a permission request's
    /// `toolCall` (as its `tool_call_update` after `assistant/message` said it): `kind`,
    /// `title`, `rawInput`, `locations`, and an edit's `diff` as `content`. Only `kind`
    /// (`other`) for a call the fold has not seen.
    pub fn tool_call_fields(&self, call_id: &str, tool: &str) -> ToolCallUpdateFields {
        match self.calls.get(call_id) {
            Some((name, input)) => self.call_fields(name, input),
            None => ToolCallUpdateFields::new().kind(tool_kind(tool)),
        }
    }

    /// What a call shows, the same in its `tool_call_update` and its permission request:
    /// `kind`, `title`, `rawInput`, an edit's `diff` as `content`, the file as `locations`.
    fn call_fields(&self, name: &str, input: &Value) -> ToolCallUpdateFields {
        let diff = self.diff(name, input).map(|diff| vec![ToolCallContent::Diff(diff)]);
        let locations = self.path_of(input).map(|path| vec![ToolCallLocation::new(path)]);
        ToolCallUpdateFields::new()
            .title(self.title(name, input))
            .kind(tool_kind(name))
            .raw_input(input.clone())
            .content(diff)
            .locations(locations)
    }

    /// `usage_update` closing step `step`: the context the step used against the window, the
    /// session's cost so far, and the step's own usage and cost under `_meta`.
    fn usage_update(&mut self, step: u64, usage: &Usage) -> UsageUpdate {
        let cost = self.costs.get(&step).cloned().flatten();
        self.spent = Some(match (self.spent.take(), &cost) {
            (None, Some(cost)) => Some(cost.clone()),
            (Some(Some(sum)), Some(cost)) => sum.plus(cost),
            _ => None,
        });
        let spent = match &self.spent {
            Some(Some(spent)) => Some(AcpCost::new(spent.amount, spent.currency.clone())),
            _ => None,
        };
        UsageUpdate::new(usage.prompt_tokens + usage.completion_tokens, self.window)
            .cost(spent)
            .meta(ext::step_usage_meta(step, usage, cost.as_ref()))
    }

    /// A title people read: the tool and what it works on.
    fn title(&self, name: &str, input: &Value) -> String {
        let subject = ["command", "path", "pattern"]
            .iter()
            .find_map(|key| input.get(*key).and_then(Value::as_str));
        match subject {
            Some(subject) => format!("{name}: {}", one_line(subject)),
            None => name.to_owned(),
        }
    }

    /// The absolute path a file tool works on.
    fn path_of(&self, input: &Value) -> Option<PathBuf> {
        let path = Path::new(input.get("path")?.as_str()?);
        Some(if path.is_absolute() {
            path.to_owned()
        } else {
            Path::new(&self.workspace).join(path)
        })
    }

    /// The `diff` content item of an edit (the replaced and the new text) or of a write (the
    /// whole new text; the log does not hold what the file had before).
    fn diff(&self, name: &str, input: &Value) -> Option<Diff> {
        let path = self.path_of(input)?;
        let text = |key: &str| input.get(key).and_then(Value::as_str).map(str::to_owned);
        match name {
            "edit_file" => Some(Diff::new(path, text("new_string")?).old_text(text("old_string")?)),
            "write_file" => Some(Diff::new(path, text("content")?)),
            _ => None,
        }
    }
}

/// What a streamed piece shows: text and thoughts as they come, a tool call as it starts.
fn chunk_update(delta: &ChunkDelta) -> Option<SessionUpdate> {
    match delta {
        // An empty piece (a role frame's) shows nothing.
        ChunkDelta::Text { text } | ChunkDelta::Reasoning { text } if text.is_empty() => None,
        ChunkDelta::Text { text } => Some(SessionUpdate::AgentMessageChunk(text_chunk(text))),
        ChunkDelta::Reasoning { text } => Some(SessionUpdate::AgentThoughtChunk(text_chunk(text))),
        ChunkDelta::ToolCall { id, name, .. } => {
            let call = ToolCall::new(id.clone(), name.clone())
                .kind(tool_kind(name))
                .status(ToolCallStatus::Pending);
            Some(SessionUpdate::ToolCall(call))
        }
        // Opaque to people: a signature or encrypted reasoning shows nothing.
        ChunkDelta::ToolArgs { .. }
        | ChunkDelta::ReasoningSignature { .. }
        | ChunkDelta::RedactedReasoning { .. } => None,
    }
}

/// ACP's `plan` of a `plan/update`: the whole plan (a client replaces its plan with each), every
/// entry of medium priority (the model gives none), dsh's call, seq and explanation in `_meta`.
fn plan(seq: u64, update: &PlanUpdate) -> Plan {
    let entries = update
        .plan
        .iter()
        .map(|entry| {
            let status = match entry.status {
                PlanStatus::Pending => PlanEntryStatus::Pending,
                PlanStatus::InProgress => PlanEntryStatus::InProgress,
                PlanStatus::Completed => PlanEntryStatus::Completed,
            };
            PlanEntry::new(entry.step.clone(), PlanEntryPriority::Medium, status)
        })
        .collect();
    Plan::new(entries).meta(ext::plan_meta(seq, &update.call_id, update.explanation.as_deref()))
}

fn text_chunk(text: &str) -> ContentChunk {
    ContentChunk::new(ContentBlock::from(text))
}

/// ACP's tool kind for each built-in tool.
pub fn tool_kind(name: &str) -> ToolKind {
    match name {
        "read_file" | "list_dir" => ToolKind::Read,
        "edit_file" | "write_file" => ToolKind::Edit,
        "grep" | "glob" => ToolKind::Search,
        "run_command" => ToolKind::Execute,
        "web_fetch" => ToolKind::Fetch,
        dsh_protocol::UPDATE_PLAN_TOOL | dsh_protocol::TASK_TOOL => ToolKind::Think,
        _ => ToolKind::Other,
    }
}

fn one_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or_default();
    if line.chars().count() > 80 || text.contains('\n') {
        format!("{}…", line.chars().take(80).collect::<String>())
    } else {
        line.to_owned()
    }
}

#[cfg(test)]
mod tests;
