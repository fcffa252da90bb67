//! V4-like rendering of a request into segments (docs/mock.md, "Rendering").
//!
//! The rendering is what the tokenizer, the context-length check and the prefix cache see. With
//! tools (or with thinking off) it is append-only: the rendering of a request followed by the
//! rendering of its output is a prefix of the next request's rendering when the client replays
//! the assistant turn faithfully.

use crate::request::{ChatRequest, Message, Role};
use crate::tokenizer::{Marker, Segment};

/// The fixed text inserted after `⟦BOS⟧` when thinking is on with effort `max`.
const EFFORT_PREAMBLE: &str =
    "Reasoning effort: max. Think as long and as carefully as the task needs before answering.\n\n";

/// The header of the tools block after the first system message.
const TOOLS_HEADER: &str =
    "\n\n## Tools\n\nYou may call the following functions. Each line is one function schema:\n";

/// Renders a validated request.
pub(crate) fn render(request: &ChatRequest) -> Vec<Segment> {
    let mut out = vec![Segment::Marker(Marker::Bos)];
    if request.thinking && request.effort_max {
        out.push(Segment::Text(EFFORT_PREAMBLE.to_owned()));
    }
    let has_tools = request.has_tools();
    let messages = &request.messages;
    let has_system = messages.iter().any(|message| message.role == Role::System);
    let mut tools_rendered = false;
    if has_tools && !has_system {
        out.push(Segment::Text(String::new()));
        push_tools(request, &mut out);
        tools_rendered = true;
    }

    // Index of the first message of the last user turn; reasoning before it is dropped in a
    // tool-less thinking chat.
    let turns = user_turns(messages);
    let last_turn_start = turns.last().map(|(start, _)| *start);

    let mut index = 0;
    while index < messages.len() {
        let message = &messages[index];
        match message.role {
            Role::System => {
                out.push(Segment::Text(message.text().to_owned()));
                if has_tools && !tools_rendered {
                    push_tools(request, &mut out);
                    tools_rendered = true;
                }
                index += 1;
            }
            Role::Assistant => {
                let after_last_user = last_turn_start.is_none_or(|start| index > start);
                let keep_reasoning = request.thinking && (has_tools || after_last_user);
                push_assistant(message, request.thinking, keep_reasoning, &mut out);
                index += 1;
            }
            Role::User | Role::Tool => {
                let end = turns
                    .iter()
                    .find(|(start, _)| *start == index)
                    .map_or(index + 1, |(_, end)| *end);
                push_user_turn(&messages[index..end], &mut out);
                let followed_by_assistant =
                    messages.get(end).is_some_and(|next| next.role == Role::Assistant);
                if followed_by_assistant || end == messages.len() {
                    out.push(Segment::Marker(Marker::Assistant));
                    let is_last_turn = Some(index) == last_turn_start;
                    let think = request.thinking && (has_tools || is_last_turn);
                    out.push(Segment::Marker(if think { Marker::Think } else { Marker::EndThink }));
                }
                index = end;
            }
        }
    }
    out
}

/// The `[start, end)` ranges of user turns: a run of tool messages plus at most one user message
/// directly after them, or a single user message.
fn user_turns(messages: &[Message]) -> Vec<(usize, usize)> {
    let mut turns = Vec::new();
    let mut index = 0;
    while index < messages.len() {
        match messages[index].role {
            Role::Tool => {
                let start = index;
                while index < messages.len() && messages[index].role == Role::Tool {
                    index += 1;
                }
                if index < messages.len() && messages[index].role == Role::User {
                    index += 1;
                }
                turns.push((start, index));
            }
            Role::User => {
                turns.push((index, index + 1));
                index += 1;
            }
            Role::System | Role::Assistant => index += 1,
        }
    }
    turns
}

fn push_tools(request: &ChatRequest, out: &mut Vec<Segment>) {
    out.push(Segment::Text(TOOLS_HEADER.to_owned()));
    for tool in &request.tools {
        out.push(Segment::Text(format!("{}\n", tool.function_json)));
    }
}

fn push_user_turn(turn: &[Message], out: &mut Vec<Segment>) {
    out.push(Segment::Marker(Marker::User));
    for (position, message) in turn.iter().enumerate() {
        if position > 0 {
            out.push(Segment::Text("\n\n".to_owned()));
        }
        match message.role {
            Role::Tool => {
                out.push(Segment::Text(format!("<tool_result>{}</tool_result>", message.text())));
            }
            _ => out.push(Segment::Text(message.text().to_owned())),
        }
        out.extend(
            message
                .images
                .iter()
                .map(|image| Segment::Image { digest: image.digest, tokens: image.tokens }),
        );
    }
}

/// Renders one assistant message, ending in `⟦EOS⟧`.
pub(crate) fn push_assistant(
    message: &Message,
    thinking: bool,
    keep_reasoning: bool,
    out: &mut Vec<Segment>,
) {
    if thinking {
        if keep_reasoning {
            out.push(Segment::Text(message.reasoning_content.clone().unwrap_or_default()));
        }
        out.push(Segment::Marker(Marker::EndThink));
    }
    out.push(Segment::Text(message.text().to_owned()));
    for call in &message.tool_calls {
        out.push(Segment::Marker(Marker::ToolCall));
        out.push(Segment::Text(format!("{}\n{}", call.name, call.arguments)));
    }
    out.push(Segment::Marker(Marker::Eos));
}

#[cfg(test)]
mod tests;
