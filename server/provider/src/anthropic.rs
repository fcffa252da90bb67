//! The Anthropic Messages request body (`POST /v1/messages`): a pure, deterministic serializer,
//! and the checks that refuse a request the format would reject, before it is sent.
//!
//! [`body`] is a function of the [`GenerateRequest`] alone, like the chat-completions
//! serializer: the same request gives the same bytes, so `dsh saw --wire` and the audit rebuild
//! it from the log. It writes the JSON by hand in a fixed field order (docs/providers.md,
//! "Anthropic Messages"):
//!
//! `model`, `max_tokens`, `system` (when the header has a non-empty one), `messages`, `tools`
//! (when the header has tools), `thinking`, `output_config` (when an effort is set),
//! `temperature`, `top_p` (when set), `stream`.
//!
//! **Turns.** The conversation becomes alternating `user`/`assistant` turns: consecutive
//! messages that map to the same role are merged into one turn, in order. User, tool and
//! (conversation) system messages are `user` turns: a tool result is a `tool_result` block bound
//! to its `tool_use` id, a user or system text a `text` block. Every `content` is an array of
//! blocks. An assistant message is, in this order: its `thinking` block (the stored reasoning
//! with its signature, verbatim) and its `redacted_thinking` blocks (opaque `data`) — both only
//! when thinking is on, and the thinking block only when a signature was stored, since the
//! format refuses an unsigned one — then a `text` block (when its text is not empty), then one
//! `tool_use` block per call in the order the model emitted them.
//!
//! **Tool input.** The format forces `input` to be a JSON object, where the log keeps the text
//! the model streamed (`input_json_delta` pieces, concatenated). The text is replayed
//! *verbatim* — never parsed and written again — with exactly one canonicalization: leading and
//! trailing JSON whitespace is removed, and an empty (or all-whitespace) text, which is what a
//! call without arguments streams, is written `{}`. Any other text that is not a JSON object is
//! refused by [`check`] (and never logged by the loop); the serializer writes `{}` for it so
//! that it stays total. A round trip — object text in, body out, `input` text streamed back —
//! gives the same text (property test in `anthropic/tests.rs`).
//!
//! **Cache breakpoints.** Unless the call config's wire format says `noCacheControl`, exactly
//! these blocks carry `"cache_control":{"type":"ephemeral"}` — at most four, the format's limit,
//! all placed by position alone, so the rule is a pure function of the log:
//! 1. the last tool (in the serialized, sorted order);
//! 2. the system block;
//! 3. the last cacheable block (text, `tool_use` or `tool_result`; thinking blocks cannot carry
//!    one) of the last turn;
//! 4. the last cacheable block of the turn two before the last (the previous request's last
//!    turn, when the conversation grew by an assistant turn and a user turn: its entry is read
//!    back even past the format's lookback of about twenty blocks).
//!
//! **Thinking.** On: `{"type":"enabled","budget_tokens":B}` with `B` the wire format's
//! `thinkingBudget`, else `max(1024, max_tokens / 2)`. Off: `{"type":"disabled"}` (sent, not
//! left out: DeepSeek's `/anthropic` thinks by default).

use dsh_session::{AssistantMessage, GenerateRequest, Message, ToolCall, ToolSchema};

use crate::wire::{EMPTY_TOOL_OUTPUT, put, put_canonical, put_str, sorted_tools};

/// The adapter id logged in `request/sent` for Anthropic Messages bodies. Bump it whenever
/// [`body`]'s bytes change for the same request.
pub const ANTHROPIC_ADAPTER: &str = "anthropic-messages/v1";

/// The smallest thinking budget the format accepts.
const MIN_THINKING_BUDGET: u32 = 1024;

const CACHE_CONTROL: &[u8] = b",\"cache_control\":{\"type\":\"ephemeral\"}";

/// One content block, borrowing from the request.
#[derive(Clone, Copy, Debug)]
enum Block<'a> {
    Text(&'a str),
    ToolResult { id: &'a str, content: &'a str },
    Thinking { thinking: &'a str, signature: &'a str },
    Redacted(&'a str),
    ToolUse(&'a ToolCall),
}

impl Block<'_> {
    /// Whether the format lets this block carry `cache_control`.
    fn cacheable(self) -> bool {
        !matches!(self, Block::Thinking { .. } | Block::Redacted(_))
    }
}

/// One merged turn.
#[derive(Debug)]
struct Turn<'a> {
    assistant: bool,
    blocks: Vec<Block<'a>>,
}

/// The merged turns of a request, thinking blocks included only when `thinking` is on.
fn turns(request: &GenerateRequest) -> Vec<Turn<'_>> {
    let thinking = request.header.config.thinking;
    let mut turns: Vec<Turn<'_>> = Vec::with_capacity(request.messages.len());
    for message in &request.messages {
        let assistant = matches!(**message, Message::Assistant(_));
        if turns.last().is_none_or(|turn| turn.assistant != assistant) {
            turns.push(Turn { assistant, blocks: Vec::new() });
        }
        let Some(turn) = turns.last_mut() else { continue };
        match &**message {
            Message::System { content } | Message::User { content } => {
                turn.blocks.push(Block::Text(content));
            }
            Message::Tool { call_id, content } => {
                let content = if content.is_empty() { EMPTY_TOOL_OUTPUT } else { content };
                turn.blocks.push(Block::ToolResult { id: call_id, content });
            }
            Message::Assistant(message) => assistant_blocks(message, thinking, &mut turn.blocks),
        }
    }
    turns
}

fn assistant_blocks<'a>(message: &'a AssistantMessage, thinking: bool, out: &mut Vec<Block<'a>>) {
    if thinking {
        if let (Some(text), Some(signature)) =
            (&message.reasoning_content, &message.reasoning_signature)
        {
            out.push(Block::Thinking { thinking: text, signature });
        }
        out.extend(message.redacted_reasoning.iter().map(|data| Block::Redacted(data)));
    }
    if !message.content.is_empty() {
        out.push(Block::Text(&message.content));
    }
    out.extend(message.tool_calls.iter().map(Block::ToolUse));
}

/// The index of the last cacheable block of a turn.
fn last_cacheable(turn: &Turn<'_>) -> Option<usize> {
    turn.blocks.iter().rposition(|block| block.cacheable())
}

/// Serializes a request into the exact body bytes of `POST /v1/messages`.
///
/// Pure and deterministic: same request, same bytes.
pub(crate) fn body(request: &GenerateRequest) -> Vec<u8> {
    let header = &request.header;
    let config = &header.config;
    let cache = config.wire.as_ref().is_none_or(|wire| !wire.no_cache_control);
    let turns = turns(request);
    let mut out = Vec::with_capacity(4096);
    out.extend_from_slice(b"{\"model\":");
    put_str(&mut out, &config.model);
    out.extend_from_slice(b",\"max_tokens\":");
    put(&mut out, &config.max_tokens);
    if let Some(system) = header.system.as_deref().filter(|system| !system.is_empty()) {
        out.extend_from_slice(b",\"system\":[{\"type\":\"text\",\"text\":");
        put_str(&mut out, system);
        if cache {
            out.extend_from_slice(CACHE_CONTROL);
        }
        out.extend_from_slice(b"}]");
    }
    // Breakpoints 3 and 4: (turn, block) positions.
    let marked: Vec<(usize, usize)> = if cache {
        [turns.len().checked_sub(1), turns.len().checked_sub(3)]
            .into_iter()
            .flatten()
            .filter_map(|turn| Some((turn, last_cacheable(&turns[turn])?)))
            .collect()
    } else {
        Vec::new()
    };
    out.extend_from_slice(b",\"messages\":[");
    for (turn_index, turn) in turns.iter().enumerate() {
        if turn_index > 0 {
            out.push(b',');
        }
        out.extend_from_slice(if turn.assistant {
            b"{\"role\":\"assistant\",\"content\":["
        } else {
            b"{\"role\":\"user\",\"content\":["
        });
        for (block_index, block) in turn.blocks.iter().enumerate() {
            if block_index > 0 {
                out.push(b',');
            }
            put_block(&mut out, *block, marked.contains(&(turn_index, block_index)));
        }
        out.extend_from_slice(b"]}");
    }
    out.push(b']');
    if let Some(tools) = &header.tools {
        out.extend_from_slice(b",\"tools\":[");
        let sorted = sorted_tools(tools);
        for (position, tool) in sorted.iter().enumerate() {
            if position > 0 {
                out.push(b',');
            }
            put_tool(&mut out, tool, cache && position + 1 == sorted.len());
        }
        out.push(b']');
    }
    if config.thinking {
        out.extend_from_slice(b",\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":");
        put(&mut out, &thinking_budget(request));
        out.push(b'}');
    } else {
        out.extend_from_slice(b",\"thinking\":{\"type\":\"disabled\"}");
    }
    if let Some(effort) = &config.reasoning_effort {
        out.extend_from_slice(b",\"output_config\":{\"effort\":");
        put_str(&mut out, effort);
        out.push(b'}');
    }
    if let Some(temperature) = config.temperature {
        out.extend_from_slice(b",\"temperature\":");
        put(&mut out, &temperature);
    }
    if let Some(top_p) = config.top_p {
        out.extend_from_slice(b",\"top_p\":");
        put(&mut out, &top_p);
    }
    out.extend_from_slice(b",\"stream\":true}");
    out
}

/// The thinking budget of a request with thinking on.
fn thinking_budget(request: &GenerateRequest) -> u32 {
    let config = &request.header.config;
    match config.wire.as_ref().and_then(|wire| wire.thinking_budget) {
        Some(budget) => budget,
        None => (config.max_tokens / 2).max(MIN_THINKING_BUDGET),
    }
}

fn put_block(out: &mut Vec<u8>, block: Block<'_>, cache: bool) {
    match block {
        Block::Text(text) => {
            out.extend_from_slice(b"{\"type\":\"text\",\"text\":");
            put_str(out, text);
        }
        Block::ToolResult { id, content } => {
            out.extend_from_slice(b"{\"type\":\"tool_result\",\"tool_use_id\":");
            put_str(out, id);
            out.extend_from_slice(b",\"content\":");
            put_str(out, content);
        }
        Block::Thinking { thinking, signature } => {
            out.extend_from_slice(b"{\"type\":\"thinking\",\"thinking\":");
            put_str(out, thinking);
            out.extend_from_slice(b",\"signature\":");
            put_str(out, signature);
        }
        Block::Redacted(data) => {
            out.extend_from_slice(b"{\"type\":\"redacted_thinking\",\"data\":");
            put_str(out, data);
        }
        Block::ToolUse(call) => {
            out.extend_from_slice(b"{\"type\":\"tool_use\",\"id\":");
            put_str(out, &call.id);
            out.extend_from_slice(b",\"name\":");
            put_str(out, &call.name);
            out.extend_from_slice(b",\"input\":");
            out.extend_from_slice(tool_input(&call.arguments).unwrap_or("{}").as_bytes());
        }
    }
    if cache {
        out.extend_from_slice(CACHE_CONTROL);
    }
    out.push(b'}');
}

fn put_tool(out: &mut Vec<u8>, tool: &ToolSchema, cache: bool) {
    out.extend_from_slice(b"{\"name\":");
    put_str(out, &tool.name);
    out.extend_from_slice(b",\"description\":");
    put_str(out, &tool.description);
    out.extend_from_slice(b",\"input_schema\":");
    put_canonical(out, &tool.parameters);
    if cache {
        out.extend_from_slice(CACHE_CONTROL);
    }
    out.push(b'}');
}

/// The `input` text of a tool call: the streamed text without surrounding JSON whitespace, `{}`
/// for an empty one; `Err` when it is not a JSON object.
pub(crate) fn tool_input(arguments: &str) -> Result<&str, String> {
    let trimmed = arguments.trim_matches([' ', '\t', '\n', '\r']);
    if trimmed.is_empty() {
        return Ok("{}");
    }
    match serde_json::from_str::<serde::de::IgnoredAny>(trimmed) {
        Ok(_) if trimmed.starts_with('{') => Ok(trimmed),
        Ok(_) => Err("its input is JSON but not an object".to_owned()),
        Err(error) => Err(format!("its input is not JSON ({error})")),
    }
}

/// Refuses a request the Messages format would reject, naming the first problem: a tool result
/// without its `tool_use` in the turn before, a `tool_use` left unanswered, tool results after
/// text in a turn, an empty text block, a tool input that is not a JSON object, an assistant
/// turn with nothing to send, reasoning without its signature in the last assistant turn of a
/// tool-use loop with thinking on, a thinking budget not below `max_tokens`.
pub(crate) fn check(request: &GenerateRequest) -> Result<(), String> {
    let config = &request.header.config;
    if config.thinking {
        let budget = thinking_budget(request);
        if budget >= config.max_tokens {
            return Err(format!(
                "the thinking budget ({budget} tokens) must be below max_tokens ({}); raise the \
                 model's max_output or set the profile's thinking_budget",
                config.max_tokens
            ));
        }
        let last_assistant = request.messages.iter().rev().find_map(|message| match &**message {
            Message::Assistant(assistant) => Some(assistant),
            _ => None,
        });
        if let Some(assistant) = last_assistant
            && !assistant.tool_calls.is_empty()
            && assistant.reasoning_content.as_deref().is_some_and(|text| !text.is_empty())
            && assistant.reasoning_signature.is_none()
        {
            return Err("the last assistant message calls tools after reasoning that has no \
                        signature; the format requires its thinking block signed (was the \
                        session moved from another provider mid-turn?)"
                .to_owned());
        }
    }
    let turns = turns(request);
    for (index, turn) in turns.iter().enumerate() {
        let number = index + 1;
        if turn.blocks.is_empty() {
            return Err(format!("turn {number} has nothing to send"));
        }
        let calls: Vec<&str> = match index.checked_sub(1).map(|previous| &turns[previous]) {
            Some(previous) if previous.assistant => previous
                .blocks
                .iter()
                .filter_map(|block| match block {
                    Block::ToolUse(call) => Some(call.id.as_str()),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        };
        let mut after_text = false;
        let mut answered = Vec::new();
        for block in &turn.blocks {
            match block {
                Block::Text("") => {
                    return Err(format!("turn {number} has an empty text block"));
                }
                Block::Text(_) => after_text = true,
                Block::ToolResult { id, .. } => {
                    if !calls.contains(id) {
                        return Err(format!(
                            "turn {number} has a tool result for `{id}`, which the assistant \
                             turn before it did not call"
                        ));
                    }
                    if after_text {
                        return Err(format!(
                            "turn {number} has the tool result for `{id}` after text; tool \
                             results come first"
                        ));
                    }
                    answered.push(*id);
                }
                Block::ToolUse(call) => {
                    if let Err(problem) = tool_input(&call.arguments) {
                        return Err(format!("tool call `{}` cannot be sent: {problem}", call.id));
                    }
                }
                Block::Thinking { .. } | Block::Redacted(_) => {}
            }
        }
        if !turn.assistant
            && let Some(missing) = calls.iter().find(|id| !answered.contains(id))
        {
            return Err(format!("turn {number} does not answer tool call `{missing}`"));
        }
    }
    if let Some(last) = turns.last()
        && last.assistant
        && last.blocks.iter().any(|block| matches!(block, Block::ToolUse(_)))
    {
        return Err("the request ends with tool calls that have no results".to_owned());
    }
    Ok(())
}

pub(crate) mod stream;

#[cfg(test)]
mod tests;
