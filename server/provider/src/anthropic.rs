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
//! `temperature`, `top_p` (when set), `stream`. The format has no JSON mode: a call config's
//! `response_format` is not written (the loop asks for one only in the chat formats).
//!
//! **Turns.** The conversation becomes alternating `user`/`assistant` turns: consecutive
//! messages that map to the same role are merged into one turn, in order. User, tool and
//! (conversation) system messages are `user` turns: a tool result is a `tool_result` block bound
//! to its `tool_use` id, a user or system text a `text` block. Every `content` is an array of
//! blocks. An assistant message that came from a Messages stream with thinking carries its
//! block layout (`AssistantMessage::blocks`): its `thinking` blocks (their share of the
//! reasoning and their signatures, verbatim), `redacted_thinking` blocks (opaque `data`), `text`
//! blocks and `tool_use` blocks are written in that order — thinking interleaved between tool
//! calls stays where the model put it — and the thinking ones only when thinking is on. Any other
//! assistant message is a `text` block (when its text is not empty), then one `tool_use` block
//! per call in the model's order; its reasoning (another format's, unsigned) is not sent.
//!
//! **Images.** A user message's images follow its text as `image` blocks,
//! `{"type":"image","source":{"type":"base64","media_type":…,"data":…}}` (a user message of
//! images alone has no text block); a tool result with images has a content array: its text
//! block, then the image blocks. Image blocks are cacheable.
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
//! `thinkingBudget`, else `max(1024, max_tokens / 2)`; or `{"type":"adaptive"}` when the wire
//! format says `adaptiveThinking`. Off: `{"type":"disabled"}` (sent, not left out: DeepSeek's
//! `/anthropic` thinks by default).

use std::ops::Range;
use std::sync::Arc;

use dsh_session::{
    AssistantMessage, ContentBlock, EpochHeader, GenerateRequest, ImageData, ImageRef,
    LlmCallConfig, Message, ToolCall, ToolSchema,
};

use crate::body::{Prefix, WireBytes, adopt_messages, extends};
use crate::json::{
    EMPTY_TOOL_OUTPUT, image_bytes, media_type, put, put_base64, put_canonical, put_sampling,
    put_str, sorted_tools,
};

/// The adapter id logged in `request/sent` for Anthropic Messages bodies. Bump it whenever the bytes
/// [`crate::wire_body`] writes for the same request change.
pub const ANTHROPIC_ADAPTER: &str = "anthropic-messages/v1";

/// The smallest thinking budget the format accepts.
const MIN_THINKING_BUDGET: u32 = 1024;

const CACHE_CONTROL: &[u8] = b",\"cache_control\":{\"type\":\"ephemeral\"}";

/// One content block, borrowing from the request.
#[derive(Clone, Copy, Debug)]
enum Block<'a> {
    Text(&'a str),
    /// An image: its media type and bytes.
    Image(&'a ImageRef, &'a [u8]),
    ToolResult {
        id: &'a str,
        content: &'a str,
        images: &'a [ImageRef],
        data: &'a ImageData,
    },
    Thinking {
        thinking: &'a str,
        signature: &'a str,
    },
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
    /// The index of its first message in the request.
    first_message: usize,
    blocks: Vec<Block<'a>>,
}

/// The merged turns of a request, thinking blocks included only when `thinking` is on.
fn turns(request: &GenerateRequest) -> Vec<Turn<'_>> {
    let thinking = request.header.config.thinking;
    let mut turns: Vec<Turn<'_>> = Vec::with_capacity(request.messages.len());
    for (index, message) in request.messages.iter().enumerate() {
        let assistant = matches!(**message, Message::Assistant(_));
        if turns.last().is_none_or(|turn| turn.assistant != assistant) {
            turns.push(Turn { assistant, first_message: index, blocks: Vec::new() });
        }
        let Some(turn) = turns.last_mut() else { continue };
        match &**message {
            Message::System { content } => turn.blocks.push(Block::Text(content)),
            Message::User { content, images } => {
                // Text-less with images: the images alone (an empty text block is refused).
                if !content.is_empty() || images.is_empty() {
                    turn.blocks.push(Block::Text(content));
                }
                turn.blocks.extend(
                    images
                        .iter()
                        .map(|image| Block::Image(image, image_bytes(&request.images, image))),
                );
            }
            Message::Tool { call_id, content, images } => {
                let content = if content.is_empty() { EMPTY_TOOL_OUTPUT } else { content };
                turn.blocks.push(Block::ToolResult {
                    id: call_id,
                    content,
                    images,
                    data: &request.images,
                });
            }
            Message::Assistant(message) => assistant_blocks(message, thinking, &mut turn.blocks),
        }
    }
    turns
}

fn assistant_blocks<'a>(message: &'a AssistantMessage, thinking: bool, out: &mut Vec<Block<'a>>) {
    if let Some(blocks) = layout(message) {
        let thinking_block =
            |block: &Block<'_>| matches!(block, Block::Thinking { .. } | Block::Redacted(_));
        out.extend(blocks.into_iter().filter(|block| thinking || !thinking_block(block)));
        return;
    }
    // No thinking blocks (or a layout that does not fit, which `check` refuses): text, then
    // the calls. Reasoning without a block is another format's, unsigned: never sent.
    // Whitespace-only text is refused by the format (models do stream a lone "\n\n" before a
    // tool call); it says nothing anyway.
    if !message.content.trim().is_empty() {
        out.push(Block::Text(&message.content));
    }
    out.extend(message.tool_calls.iter().map(Block::ToolUse));
}

/// The blocks of a message in the order the model produced them, from its logged layout;
/// `None` when it has none, or when the layout does not fit the message's texts and calls.
fn layout(message: &AssistantMessage) -> Option<Vec<Block<'_>>> {
    if message.blocks.is_empty() {
        return None;
    }
    let reasoning = message.reasoning_content.as_deref().unwrap_or("");
    let (mut in_reasoning, mut in_content) = (0usize, 0usize);
    let mut calls = message.tool_calls.iter();
    let mut out = Vec::with_capacity(message.blocks.len());
    let take = |text: &'_ str, at: &mut usize, bytes: u64| -> Option<usize> {
        let end = at.checked_add(usize::try_from(bytes).ok()?)?;
        text.get(*at..end)?;
        Some(std::mem::replace(at, end))
    };
    for block in &message.blocks {
        match block {
            ContentBlock::Thinking { bytes, signature } => {
                let start = take(reasoning, &mut in_reasoning, *bytes)?;
                out.push(Block::Thinking { thinking: &reasoning[start..in_reasoning], signature });
            }
            ContentBlock::RedactedThinking { data } => out.push(Block::Redacted(data)),
            ContentBlock::Text { bytes } => {
                let start = take(&message.content, &mut in_content, *bytes)?;
                // An empty or whitespace-only text block is refused by the format; it says
                // nothing anyway.
                if !message.content[start..in_content].trim().is_empty() {
                    out.push(Block::Text(&message.content[start..in_content]));
                }
            }
            ContentBlock::ToolUse => out.push(Block::ToolUse(calls.next()?)),
        }
    }
    let whole = in_reasoning == reasoning.len()
        && in_content == message.content.len()
        && calls.next().is_none();
    whole.then_some(out)
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
    let turns = turns(request);
    let mut out = Vec::with_capacity(4096);
    put_head(&mut out, header);
    put_turns(&mut out, &turns, 0..turns.len(), cache_on(header));
    put_tail(&mut out, header);
    out
}

/// Whether breakpoints are placed.
fn cache_on(header: &EpochHeader) -> bool {
    header.config.wire.as_ref().is_none_or(|wire| !wire.no_cache_control)
}

/// Everything before the first turn: model, limit, system, `"messages":[`.
fn put_head(out: &mut Vec<u8>, header: &EpochHeader) {
    let config = &header.config;
    out.extend_from_slice(b"{\"model\":");
    put_str(out, &config.model);
    out.extend_from_slice(b",\"max_tokens\":");
    put(out, &config.max_tokens);
    if let Some(system) = header.system.as_deref().filter(|system| !system.is_empty()) {
        out.extend_from_slice(b",\"system\":[{\"type\":\"text\",\"text\":");
        put_str(out, system);
        if cache_on(header) {
            out.extend_from_slice(CACHE_CONTROL);
        }
        out.extend_from_slice(b"}]");
    }
    out.extend_from_slice(b",\"messages\":[");
}

/// The turns in `range` of all `turns`, each with its separator; breakpoints 3 and 4 on the
/// last and the third-to-last turn.
fn put_turns(out: &mut Vec<u8>, turns: &[Turn<'_>], range: Range<usize>, cache: bool) {
    let count = turns.len();
    for turn_index in range {
        let turn = &turns[turn_index];
        if turn_index > 0 {
            out.push(b',');
        }
        let marked_turn = cache && (turn_index + 1 == count || turn_index + 3 == count);
        let marked = if marked_turn { last_cacheable(turn) } else { None };
        out.extend_from_slice(if turn.assistant {
            b"{\"role\":\"assistant\",\"content\":["
        } else {
            b"{\"role\":\"user\",\"content\":["
        });
        for (block_index, block) in turn.blocks.iter().enumerate() {
            if block_index > 0 {
                out.push(b',');
            }
            put_block(out, *block, marked == Some(block_index));
        }
        out.extend_from_slice(b"]}");
    }
}

/// Everything after the last turn: `]`, tools, thinking, effort, sampling, `stream`, `}`.
fn put_tail(out: &mut Vec<u8>, header: &EpochHeader) {
    let config = &header.config;
    out.push(b']');
    if let Some(tools) = &header.tools {
        out.extend_from_slice(b",\"tools\":[");
        let sorted = sorted_tools(tools);
        for (position, tool) in sorted.iter().enumerate() {
            if position > 0 {
                out.push(b',');
            }
            put_tool(out, tool, cache_on(header) && position + 1 == sorted.len());
        }
        out.push(b']');
    }
    if config.thinking && adaptive(config) {
        out.extend_from_slice(b",\"thinking\":{\"type\":\"adaptive\"}");
    } else if config.thinking {
        out.extend_from_slice(b",\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":");
        put(out, &thinking_budget(config));
        out.push(b'}');
    } else {
        out.extend_from_slice(b",\"thinking\":{\"type\":\"disabled\"}");
    }
    if let Some(effort) = &config.reasoning_effort {
        out.extend_from_slice(b",\"output_config\":{\"effort\":");
        put_str(out, effort);
        out.push(b'}');
    }
    put_sampling(out, config);
    out.extend_from_slice(b",\"stream\":true}");
}

/// [`body`] memoized across the steps of one conversation (`crate::WireCache` for Messages
/// bodies): the head and every turn before the third-to-last are serialized and hashed once.
/// Those turns can never change while the header stays the same and the messages only grow:
/// a turn is closed once a turn of the other role follows it, and breakpoints sit only on the
/// last turn and the third-to-last.
#[derive(Clone, Default)]
pub(crate) struct Memo {
    header: Option<EpochHeader>,
    /// The messages of the memoized turns, and the first message of the turn after them.
    messages: Vec<Arc<Message>>,
    /// How many turns `prefix` holds.
    turns: usize,
    /// The head and the memoized turns, with its digest.
    prefix: Prefix,
}

impl Memo {
    /// Whether it holds no body yet.
    pub(crate) fn is_empty(&self) -> bool {
        self.header.is_none()
    }

    /// The bytes of body it holds.
    pub(crate) fn memoized_bytes(&self) -> usize {
        self.prefix.len()
    }

    /// [`crate::WireCache::adopt`] for Anthropic Messages bodies.
    pub(crate) fn adopt(&mut self, request: &GenerateRequest) -> bool {
        let holds = self.holds_prefix_of(request, &turns(request));
        if holds {
            adopt_messages(&mut self.messages, request);
        }
        holds
    }

    /// The body of `request` (equal to `body(request)`) and its lowercase hex sha256.
    pub(crate) fn body(&mut self, request: &GenerateRequest) -> (WireBytes, String) {
        let header = &request.header;
        let turns = turns(request);
        if !self.holds_prefix_of(request, &turns) {
            *self = Memo { header: Some(header.clone()), ..Memo::default() };
            self.prefix.extend(|out| put_head(out, header));
        }
        let keep = memoizable(&turns);
        if keep > self.turns {
            let cache = cache_on(header);
            // Held out while the prefix grows: a panic halfway leaves a memo that matches
            // nothing and starts over, not one whose bytes, digest and messages disagree.
            let memoized = self.header.take();
            self.prefix.extend_each(self.turns..keep, |out, turn| {
                put_turns(out, &turns, turn..turn + 1, cache);
            });
            self.turns = keep;
            // `keep < turns.len()`: the turn after the memoized ones exists.
            let through = turns[keep].first_message;
            let known = self.messages.len();
            self.messages.extend(request.messages[known..=through].iter().cloned());
            self.header = memoized;
        }
        self.prefix.finish(&self.rest(header, &turns))
    }

    /// Whether the memoized turns start `request`'s body: the same header and messages, and
    /// no more turns than may be memoized for it.
    fn holds_prefix_of(&self, request: &GenerateRequest, turns: &[Turn<'_>]) -> bool {
        self.turns <= memoizable(turns) && extends(self.header.as_ref(), &self.messages, request)
    }

    /// What follows the memoized turns: the other turns and the tail.
    fn rest(&self, header: &EpochHeader, turns: &[Turn<'_>]) -> Vec<u8> {
        let mut rest = Vec::with_capacity(4096);
        put_turns(&mut rest, turns, self.turns..turns.len(), cache_on(header));
        put_tail(&mut rest, header);
        rest
    }
}

/// How many turns can be memoized: all but the last three (breakpoints sit only on the last
/// turn and the third-to-last, and a turn is closed once one of the other role follows).
fn memoizable(turns: &[Turn<'_>]) -> usize {
    turns.len().saturating_sub(3)
}

/// Whether thinking on is adaptive (no budget).
fn adaptive(config: &LlmCallConfig) -> bool {
    config.wire.as_ref().is_some_and(|wire| wire.adaptive_thinking)
}

/// The thinking budget of a request with thinking on.
fn thinking_budget(config: &LlmCallConfig) -> u32 {
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
        Block::Image(image, bytes) => put_image(out, image, bytes),
        Block::ToolResult { id, content, images, data } => {
            out.extend_from_slice(b"{\"type\":\"tool_result\",\"tool_use_id\":");
            put_str(out, id);
            out.extend_from_slice(b",\"content\":");
            if images.is_empty() {
                put_str(out, content);
            } else {
                // Text, then the images, as blocks of the result.
                out.extend_from_slice(b"[{\"type\":\"text\",\"text\":");
                put_str(out, content);
                out.push(b'}');
                for image in images {
                    out.push(b',');
                    put_image(out, image, image_bytes(data, image));
                    out.push(b'}');
                }
                out.push(b']');
            }
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

/// An `image` block, without its closing brace: `{"type":"image","source":{"type":"base64",
/// "media_type":…,"data":…}`.
fn put_image(out: &mut Vec<u8>, image: &ImageRef, bytes: &[u8]) {
    out.extend_from_slice(b"{\"type\":\"image\",\"source\":{\"type\":\"base64\",\"media_type\":");
    put_str(out, media_type(image));
    out.extend_from_slice(b",\"data\":");
    put_base64(out, bytes);
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
    if config.thinking && !adaptive(config) {
        let budget = thinking_budget(config);
        if budget >= config.max_tokens {
            return Err(format!(
                "the thinking budget ({budget} tokens) must be below max_tokens ({}); raise the \
                 model's max_output or set the profile's thinking_budget",
                config.max_tokens
            ));
        }
    }
    if config.thinking {
        let last_assistant = request.messages.iter().rev().find_map(|message| match &**message {
            Message::Assistant(assistant) => Some(assistant),
            _ => None,
        });
        let thinking_block = |block: &ContentBlock| {
            matches!(block, ContentBlock::Thinking { .. } | ContentBlock::RedactedThinking { .. })
        };
        if let Some(assistant) = last_assistant
            && !assistant.tool_calls.is_empty()
            && assistant.reasoning_content.as_deref().is_some_and(|text| !text.is_empty())
            && !assistant.blocks.iter().any(thinking_block)
        {
            return Err("the last assistant message calls tools after reasoning that has no \
                        signature; the format requires its thinking block signed (was the \
                        session moved from another provider mid-turn?)"
                .to_owned());
        }
    }
    for (index, message) in request.messages.iter().enumerate() {
        if let Message::Assistant(assistant) = &**message
            && !assistant.blocks.is_empty()
            && layout(assistant).is_none()
        {
            return Err(format!(
                "message {} has a block layout that does not fit its text, reasoning and tool \
                 calls (an edited log?)",
                index + 1
            ));
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
                Block::Text(text) if text.trim().is_empty() => {
                    return Err(format!(
                        "turn {number} has an empty or whitespace-only text block"
                    ));
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
                Block::Image(..) => after_text = true,
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

pub mod stream;

#[cfg(test)]
mod tests;
