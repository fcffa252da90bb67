//! Log events → ACP `session/update` payloads: one fold per session, used alike for the live
//! stream and for `session/load`'s replay (both are the same subscription from a seq), so a
//! replayed conversation is the live one again.
//!
//! Pure: no I/O. The payloads are JSON in ACP's v1 shapes; the caller turns each into the SDK's
//! `SessionNotification` type.

use std::collections::HashMap;
use std::path::Path;

use dsh_protocol::{ApprovalRequest, ChunkDelta, Event, EventData, StopReason, Usage};
use serde_json::{Value, json};

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
}

/// The extension namespace of dsh's `_meta` keys and methods.
pub const META_USAGE: &str = "dsh/usage";

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

    /// The updates `event` makes, in order.
    pub fn updates(&mut self, event: &Event) -> Vec<Value> {
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
            EventData::UserMessage(message) => vec![chunk("user_message_chunk", &message.text)],
            EventData::SteeringMessage(message) => {
                let mut update = chunk("user_message_chunk", &message.text);
                update["_meta"] = json!({"dsh/steering": true});
                vec![update]
            }
            EventData::AssistantChunk(chunk_event) => match &chunk_event.delta {
                // An empty piece (a role frame's) shows nothing.
                ChunkDelta::Text { text } | ChunkDelta::Reasoning { text } if text.is_empty() => {
                    vec![]
                }
                ChunkDelta::Text { text } => vec![chunk("agent_message_chunk", text)],
                ChunkDelta::Reasoning { text } => vec![chunk("agent_thought_chunk", text)],
                ChunkDelta::ToolCall { id, name, .. } => {
                    vec![json!({
                        "sessionUpdate": "tool_call",
                        "toolCallId": id,
                        "title": name,
                        "kind": tool_kind(name),
                        "status": "pending",
                    })]
                }
                // Opaque to people: a signature or encrypted reasoning shows nothing.
                ChunkDelta::ToolArgs { .. }
                | ChunkDelta::ReasoningSignature { .. }
                | ChunkDelta::RedactedReasoning { .. } => vec![],
            },
            EventData::AssistantMessage(turn) => {
                let mut updates = Vec::new();
                for call in &turn.message.tool_calls {
                    let input: Value = serde_json::from_str(&call.arguments).unwrap_or(Value::Null);
                    let mut update =
                        json!({"sessionUpdate": "tool_call_update", "toolCallId": call.id});
                    if let (Some(update), Value::Object(fields)) =
                        (update.as_object_mut(), self.call_fields(&call.name, &input))
                    {
                        update.extend(fields);
                    }
                    self.calls.insert(call.id.clone(), (call.name.clone(), input));
                    updates.push(update);
                }
                updates
            }
            EventData::ToolCall(started) => vec![json!({
                "sessionUpdate": "tool_call_update",
                "toolCallId": started.call_id,
                "status": "in_progress",
            })],
            EventData::ToolResult(result) => {
                let mut content = Vec::new();
                if let Some((name, input)) = self.calls.remove(&result.call_id)
                    && !result.is_error
                    && let Some(diff) = self.diff(&name, &input)
                {
                    content.push(diff);
                }
                content.push(
                    json!({"type": "content", "content": {"type": "text", "text": result.content}}),
                );
                vec![json!({
                    "sessionUpdate": "tool_call_update",
                    "toolCallId": result.call_id,
                    "status": if result.is_error { "failed" } else { "completed" },
                    "content": content,
                    "rawOutput": {"content": result.content, "isError": result.is_error},
                })]
            }
            EventData::StepEnd(end) => {
                self.last_finish_reason = Some(end.finish_reason.clone());
                vec![self.usage_update(end.step, &end.usage)]
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

    /// What ACP says of tool call `call_id` besides its id, for a permission request's
    /// `toolCall` (as its `tool_call_update` after `assistant/message` said it): `kind`,
    /// `title`, `rawInput`, `locations`, and an edit's `diff` as `content`. Only `kind`
    /// (`other`) for a call the fold has not seen.
    pub fn tool_call_fields(&self, call_id: &str, tool: &str) -> Value {
        match self.calls.get(call_id) {
            Some((name, input)) => self.call_fields(name, input),
            None => json!({"kind": tool_kind(tool)}),
        }
    }

    /// What a call shows, the same in its `tool_call_update` and its permission request:
    /// `kind`, `title`, `rawInput`, an edit's `diff` as `content`, the file as `locations`.
    fn call_fields(&self, name: &str, input: &Value) -> Value {
        let mut fields = json!({
            "title": self.title(name, input),
            "kind": tool_kind(name),
            "rawInput": input,
        });
        if let Some(diff) = self.diff(name, input) {
            fields["content"] = json!([diff]);
        }
        if let Some(path) = self.path_of(input) {
            fields["locations"] = json!([{"path": path}]);
        }
        fields
    }

    /// `usage_update` closing step `step`: the context the step used against the window, and
    /// the step's own usage with ACP's unstable `Usage` names under `_meta`.
    fn usage_update(&self, step: u64, usage: &Usage) -> Value {
        json!({
            "sessionUpdate": "usage_update",
            "used": usage.prompt_tokens + usage.completion_tokens,
            "size": self.window,
            "_meta": {META_USAGE: {
                "step": step,
                "inputTokens": usage.prompt_tokens,
                "outputTokens": usage.completion_tokens,
                "cachedReadTokens": usage.cache_hit_tokens,
                "cachedWriteTokens": usage.cache_miss_tokens,
                "thoughtTokens": usage.reasoning_tokens,
                "totalTokens": usage.prompt_tokens + usage.completion_tokens,
            }},
        })
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
    fn path_of(&self, input: &Value) -> Option<String> {
        let path = input.get("path")?.as_str()?;
        let path = Path::new(path);
        Some(if path.is_absolute() {
            path.display().to_string()
        } else {
            Path::new(&self.workspace).join(path).display().to_string()
        })
    }

    /// The `diff` content item of an edit (the replaced and the new text) or of a write (the
    /// whole new text; the log does not hold what the file had before).
    fn diff(&self, name: &str, input: &Value) -> Option<Value> {
        let path = self.path_of(input)?;
        let text = |key: &str| input.get(key).and_then(Value::as_str).map(str::to_owned);
        match name {
            "edit_file" => Some(json!({
                "type": "diff",
                "path": path,
                "oldText": text("old_string")?,
                "newText": text("new_string")?,
            })),
            "write_file" => Some(json!({
                "type": "diff",
                "path": path,
                "oldText": null,
                "newText": text("content")?,
            })),
            _ => None,
        }
    }
}

fn chunk(kind: &str, text: &str) -> Value {
    json!({"sessionUpdate": kind, "content": {"type": "text", "text": text}})
}

/// ACP's tool kind for each built-in tool.
pub fn tool_kind(name: &str) -> &'static str {
    match name {
        "read_file" | "list_dir" => "read",
        "edit_file" | "write_file" => "edit",
        "grep" | "glob" => "search",
        "run_command" => "execute",
        _ => "other",
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
