//! The DeepSeek request body: a pure, deterministic serializer.
//!
//! [`wire_body`] is a function of the [`GenerateRequest`] alone (no clock, no randomness, no
//! configuration), so the body the loop dispatches can be rebuilt byte for byte from the session
//! log. It writes the JSON by hand, one piece at a time, in a fixed field order, and lets
//! `serde_json` escape every string and number. Each message is serialized on its own and
//! depends only on itself and the header, so a request that appends messages to an earlier one
//! serializes to an append-extension of its `messages` array: the provider's prefix cache keeps
//! hitting.
//!
//! Tool `parameters` (free-form JSON Schema) are written with object keys sorted by their UTF-8
//! bytes, whatever order the `serde_json::Value` holds them in, so the bytes never depend on
//! whether some other crate in the build enables `serde_json/preserve_order`.
//!
//! The rules it follows (docs/providers.md):
//! - field order `model`, `messages`, `tools`, `thinking`, `reasoning_effort`, `max_tokens`,
//!   `temperature`, `top_p`, `stream`, `stream_options`;
//! - `thinking` is always an object (a boolean gets a 422), `max_tokens` is always sent;
//! - the header's system prompt becomes the first message; tools are sorted by name in UTF-16
//!   code-unit order (what the TypeScript harness did), stable for equal names;
//! - assistant `content` is always a string (`""`, never `null`); tool-call arguments are the
//!   stored string, never re-serialized from parsed JSON;
//! - thinking on: every assistant message carries the `reasoning_content` it has; with tools
//!   present as well, *every* assistant message carries one, `""` when none was stored (the
//!   API rejects a missing one with 400). Thinking off: never sent;
//! - empty tool output is sent as `(no output)`, since an empty tool message is rejected.
//!
//! Other OpenAI-compatible servers (llama.cpp, vLLM, Ollama: a call config whose `wire` kind is
//! `openai-compatible`) get the same body with the differences their profile names, all logged
//! in the call config's `wire` so a rebuild writes the same bytes: no `thinking` object unless
//! `thinkingObject`; `reasoning_content` only when `reasoningPassback` (and thinking is on), and
//! only for messages that stored one (DeepSeek's empty-string rule is DeepSeek's);
//! `max_completion_tokens` instead of `max_tokens` when `maxCompletionTokens`.
//!
//! A call config of kind `anthropic` is written by `crate::anthropic` instead (Anthropic
//! Messages); [`wire_body`], [`WireCache`] and [`adapter_id`] dispatch on the kind.

use std::sync::Arc;

use dsh_session::{
    AssistantMessage, EpochHeader, GenerateRequest, LlmCallConfig, Message, ProviderKind,
    ToolSchema,
};
use serde::Serialize;

use crate::anthropic::ANTHROPIC_ADAPTER;
use crate::body::{Prefix, WireBytes};
use sha2::{Digest, Sha256};

/// The adapter id logged in `request/sent` for DeepSeek's format. Bump it whenever
/// [`wire_body`]'s bytes change for the same request.
pub const DEEPSEEK_ADAPTER: &str = "deepseek-chat/v1";

/// The adapter id logged in `request/sent` for other OpenAI-compatible servers.
pub const OPENAI_ADAPTER: &str = "openai-chat/v1";

/// The adapter that writes requests with this call config (logged in `request/sent`).
pub fn adapter_id(config: &LlmCallConfig) -> &'static str {
    match config.kind() {
        ProviderKind::Deepseek => DEEPSEEK_ADAPTER,
        ProviderKind::OpenaiCompatible => OPENAI_ADAPTER,
        ProviderKind::Anthropic => ANTHROPIC_ADAPTER,
    }
}

/// Refuses, before it is sent, a request its format would reject (the Anthropic Messages
/// checks: a tool result without its `tool_use`, an empty text block, unsigned reasoning in a
/// tool-use turn, …); the chat-completions formats have nothing to check here.
pub fn check_request(request: &GenerateRequest) -> Result<(), String> {
    match request.header.config.kind() {
        ProviderKind::Anthropic => crate::anthropic::check(request),
        ProviderKind::Deepseek | ProviderKind::OpenaiCompatible => Ok(()),
    }
}

/// Whether `arguments`, the streamed text of a tool call, can be sent back in the format of
/// `config` (Anthropic's `input` must be a JSON object; chat completions send any string).
pub fn check_tool_arguments(config: &LlmCallConfig, arguments: &str) -> Result<(), String> {
    match config.kind() {
        ProviderKind::Anthropic => crate::anthropic::tool_input(arguments).map(drop),
        ProviderKind::Deepseek | ProviderKind::OpenaiCompatible => Ok(()),
    }
}

/// The byte-changing options of the chat-completions family, from the call config.
#[derive(Clone, Copy, Debug)]
struct Chat {
    /// DeepSeek's rules for `reasoning_content` (every assistant message with tools).
    deepseek: bool,
    thinking_object: bool,
    reasoning_passback: bool,
    max_completion_tokens: bool,
}

impl Chat {
    fn of(config: &LlmCallConfig) -> Chat {
        match (&config.wire, config.kind()) {
            (Some(wire), ProviderKind::OpenaiCompatible) => Chat {
                deepseek: false,
                thinking_object: wire.thinking_object,
                reasoning_passback: wire.reasoning_passback,
                max_completion_tokens: wire.max_completion_tokens,
            },
            _ => Chat {
                deepseek: true,
                thinking_object: true,
                reasoning_passback: true,
                max_completion_tokens: false,
            },
        }
    }
}

/// What an empty tool result is sent as.
pub const EMPTY_TOOL_OUTPUT: &str = "(no output)";

/// Serializes a request into the exact body bytes sent to DeepSeek's `/chat/completions`.
///
/// Pure and deterministic: same request, same bytes.
pub fn wire_body(request: &GenerateRequest) -> Vec<u8> {
    let header = &request.header;
    if header.config.kind() == ProviderKind::Anthropic {
        return crate::anthropic::body(request);
    }
    let mut out = Vec::with_capacity(4096);
    put_head(&mut out, header);
    let mut any = header.system.is_some();
    for message in &request.messages {
        put_element(&mut out, header, message, any);
        any = true;
    }
    put_tail(&mut out, header);
    out
}

/// `{"model":…,"messages":[` and the system message, when there is one.
fn put_head(out: &mut Vec<u8>, header: &EpochHeader) {
    out.extend_from_slice(b"{\"model\":");
    put_str(out, &header.config.model);
    out.extend_from_slice(b",\"messages\":[");
    if let Some(system) = &header.system {
        put_text_message(out, "system", system);
    }
}

/// One element of the `messages` array, with its separator when it is not the first.
fn put_element(out: &mut Vec<u8>, header: &EpochHeader, message: &Message, after_another: bool) {
    if after_another {
        out.push(b',');
    }
    put_message(out, header, message);
}

/// Everything after the last message: `]`, tools, thinking, limits, streaming options, `}`.
fn put_tail(out: &mut Vec<u8>, header: &EpochHeader) {
    let config = &header.config;
    out.push(b']');
    if let Some(tools) = &header.tools {
        out.extend_from_slice(b",\"tools\":[");
        for (position, tool) in sorted_tools(tools).into_iter().enumerate() {
            if position > 0 {
                out.push(b',');
            }
            put_tool(out, tool);
        }
        out.push(b']');
    }
    let chat = Chat::of(config);
    if chat.thinking_object {
        out.extend_from_slice(if config.thinking {
            b",\"thinking\":{\"type\":\"enabled\"}"
        } else {
            b",\"thinking\":{\"type\":\"disabled\"}"
        });
    }
    if let Some(effort) = &config.reasoning_effort {
        out.extend_from_slice(b",\"reasoning_effort\":");
        put_str(out, effort);
    }
    out.extend_from_slice(if chat.max_completion_tokens {
        b",\"max_completion_tokens\":"
    } else {
        b",\"max_tokens\":"
    });
    put(out, &config.max_tokens);
    put_sampling(out, config);
    out.extend_from_slice(b",\"stream\":true,\"stream_options\":{\"include_usage\":true}}");
}

/// `temperature` and `top_p`, when set: the same fields, in this order, in both formats.
pub(crate) fn put_sampling(out: &mut Vec<u8>, config: &LlmCallConfig) {
    if let Some(temperature) = config.temperature {
        out.extend_from_slice(b",\"temperature\":");
        put(out, &temperature);
    }
    if let Some(top_p) = config.top_p {
        out.extend_from_slice(b",\"top_p\":");
        put(out, &top_p);
    }
}

/// Lowercase hex sha256 of a wire body, as `request/sent` records it.
pub fn sha256_hex(body: &[u8]) -> String {
    hex(&Sha256::digest(body))
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// [`wire_body`] memoized across the consecutive requests of one conversation, with the body's
/// sha256.
///
/// A request whose header equals the previous one and whose messages extend the previous ones
/// (the same shared `Arc`s, or equal messages, in order) serializes only its new messages and feeds only their bytes
/// to the running digest: the cost of a step is O(new messages), not O(conversation). Anything
/// else — a header change, a surface rewrite, another conversation — starts over. The result is
/// always byte-identical to [`wire_body`]; the loop's invariant check compares the two.
#[derive(Clone, Default)]
pub struct WireCache {
    header: Option<EpochHeader>,
    messages: Vec<Arc<Message>>,
    /// `put_head` and every cached message, without the tail, with its digest.
    prefix: Prefix,
    /// The same for Anthropic Messages bodies.
    messages_memo: crate::anthropic::Memo,
}

impl std::fmt::Debug for WireCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WireCache")
            .field("messages", &self.messages.len())
            .field("prefix_bytes", &self.prefix.len())
            .finish()
    }
}

impl WireCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether it holds no body yet.
    pub fn is_empty(&self) -> bool {
        self.header.is_none() && self.messages_memo.is_empty()
    }

    /// The bytes of body it holds (what it costs in memory, besides its shared messages).
    pub fn memoized_bytes(&self) -> usize {
        self.prefix.len() + self.messages_memo.memoized_bytes()
    }

    /// Whether the body of `request` extends the one memoized: then [`WireCache::body`]
    /// serializes only its new messages. The memoized messages become `request`'s own (equal)
    /// ones, so the next body of a request sharing them compares pointers, not contents.
    pub fn adopt(&mut self, request: &GenerateRequest) -> bool {
        if request.header.config.kind() == ProviderKind::Anthropic {
            return self.messages_memo.adopt(request);
        }
        let extends = extends(self.header.as_ref(), &self.messages, request);
        if extends {
            adopt_messages(&mut self.messages, request);
        }
        extends
    }

    /// The body of `request` (equal to `wire_body(request)`) and its lowercase hex sha256.
    pub fn body(&mut self, request: &GenerateRequest) -> (WireBytes, String) {
        let header = &request.header;
        if header.config.kind() == ProviderKind::Anthropic {
            return self.messages_memo.body(request);
        }
        if !extends(self.header.as_ref(), &self.messages, request) {
            self.header = Some(header.clone());
            self.messages.clear();
            self.prefix = Prefix::default();
            self.prefix.extend(|out| put_head(out, header));
        }
        let known = self.messages.len();
        let new = &request.messages[known..];
        // Held out while the prefix grows: a panic halfway leaves a memo that matches nothing
        // and starts over, not one whose bytes, digest and messages disagree.
        let memoized = self.header.take();
        self.prefix.extend_each(new.iter().enumerate(), |out, (index, message)| {
            put_element(out, header, message, header.system.is_some() || known + index > 0);
        });
        self.messages.extend(new.iter().cloned());
        self.header = memoized;
        let mut tail = Vec::with_capacity(1024);
        put_tail(&mut tail, header);
        self.prefix.finish(&tail)
    }
}

/// Whether a body memoized for `header` and `messages` is a prefix of `request`'s: the same
/// shared messages (the loop's steps) or equal ones (a request rebuilt by a fresh fold: a
/// memcmp, far cheaper than serializing and hashing them again).
pub(crate) fn extends(
    header: Option<&EpochHeader>,
    messages: &[Arc<Message>],
    request: &GenerateRequest,
) -> bool {
    header == Some(&request.header)
        && request.messages.len() >= messages.len()
        && messages.iter().zip(&request.messages).all(|(a, b)| Arc::ptr_eq(a, b) || a == b)
}

/// Replaces memoized messages by `request`'s equal ones, so the next compare with a request
/// sharing them is by pointer.
pub(crate) fn adopt_messages(memoized: &mut [Arc<Message>], request: &GenerateRequest) {
    let known = memoized.len();
    memoized.clone_from_slice(&request.messages[..known]);
}

/// Tools in UTF-16 code-unit order of their names; equal names keep their order.
pub(crate) fn sorted_tools(tools: &[ToolSchema]) -> Vec<&ToolSchema> {
    let mut sorted: Vec<&ToolSchema> = tools.iter().collect();
    sorted.sort_by(|a, b| a.name.encode_utf16().cmp(b.name.encode_utf16()));
    sorted
}

fn put_message(out: &mut Vec<u8>, header: &EpochHeader, message: &Message) {
    match message {
        Message::System { content } => put_text_message(out, "system", content),
        Message::User { content } => put_text_message(out, "user", content),
        Message::Assistant(assistant) => put_assistant(out, header, assistant),
        Message::Tool { call_id, content } => {
            out.extend_from_slice(b"{\"role\":\"tool\",\"tool_call_id\":");
            put_str(out, call_id);
            out.extend_from_slice(b",\"content\":");
            put_str(out, if content.is_empty() { EMPTY_TOOL_OUTPUT } else { content });
            out.push(b'}');
        }
    }
}

fn put_text_message(out: &mut Vec<u8>, role: &str, content: &str) {
    out.extend_from_slice(b"{\"role\":");
    put_str(out, role);
    out.extend_from_slice(b",\"content\":");
    put_str(out, content);
    out.push(b'}');
}

fn put_assistant(out: &mut Vec<u8>, header: &EpochHeader, message: &AssistantMessage) {
    out.extend_from_slice(b"{\"role\":\"assistant\",\"content\":");
    put_str(out, &message.content);
    let chat = Chat::of(&header.config);
    let thinking = header.config.thinking && chat.reasoning_passback;
    let has_tools = header.tools.as_ref().is_some_and(|tools| !tools.is_empty());
    let reasoning = match (&message.reasoning_content, thinking, has_tools) {
        (_, false, _) => None,
        (Some(reasoning), true, _) => Some(reasoning.as_str()),
        // DeepSeek rejects an assistant message without one when tools are present.
        (None, true, true) if chat.deepseek => Some(""),
        (None, true, _) => None,
    };
    if let Some(reasoning) = reasoning {
        out.extend_from_slice(b",\"reasoning_content\":");
        put_str(out, reasoning);
    }
    if !message.tool_calls.is_empty() {
        out.extend_from_slice(b",\"tool_calls\":[");
        for (position, call) in message.tool_calls.iter().enumerate() {
            if position > 0 {
                out.push(b',');
            }
            out.extend_from_slice(b"{\"id\":");
            put_str(out, &call.id);
            out.extend_from_slice(b",\"type\":\"function\",\"function\":{\"name\":");
            put_str(out, &call.name);
            out.extend_from_slice(b",\"arguments\":");
            put_str(out, &call.arguments);
            out.extend_from_slice(b"}}");
        }
        out.push(b']');
    }
    out.push(b'}');
}

fn put_tool(out: &mut Vec<u8>, tool: &ToolSchema) {
    out.extend_from_slice(b"{\"type\":\"function\",\"function\":{\"name\":");
    put_str(out, &tool.name);
    out.extend_from_slice(b",\"description\":");
    put_str(out, &tool.description);
    out.extend_from_slice(b",\"parameters\":");
    put_canonical(out, &tool.parameters);
    out.extend_from_slice(b"}}");
}

/// Writes a JSON value with object keys in byte order, at every depth.
pub(crate) fn put_canonical(out: &mut Vec<u8>, value: &serde_json::Value) {
    match value {
        serde_json::Value::Array(items) => {
            out.push(b'[');
            for (position, item) in items.iter().enumerate() {
                if position > 0 {
                    out.push(b',');
                }
                put_canonical(out, item);
            }
            out.push(b']');
        }
        serde_json::Value::Object(map) => {
            let mut entries: Vec<(&String, &serde_json::Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push(b'{');
            for (position, (key, item)) in entries.into_iter().enumerate() {
                if position > 0 {
                    out.push(b',');
                }
                put_str(out, key);
                out.push(b':');
                put_canonical(out, item);
            }
            out.push(b'}');
        }
        serde_json::Value::String(text) => put_str(out, text),
        scalar => put(out, scalar),
    }
}

/// Appends a string as JSON, byte for byte what `serde_json` writes (`"` and `\\` escaped, the
/// control characters as `\b \f \n \r \t` or `\u00xx` in lowercase hex, nothing else).
///
/// A long conversation's body is mostly long strings, so this is the hot loop of serializing
/// one from scratch. It goes sixteen bytes at a time: a block with nothing to escape (found
/// eight bytes at a time) is copied as it is; any other block is written byte by byte without
/// a branch on the byte — each byte's JSON form comes from [`FORM`], is stored whole and the
/// cursor moves by its length — into a staging buffer appended at once. Code and prose have an
/// escape every few dozen bytes (a newline, a quote), which made a copy per run and a write per
/// escape cost more than the bytes themselves.
pub(crate) fn put_str(out: &mut Vec<u8>, text: &str) {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    /// Whether any byte of `word` is a control character, `"` or `\\`: the high bit of such a
    /// byte is set in the mask (bits above a flagged byte may be spurious: a borrow carries
    /// upward only from a byte that is flagged itself, so the mask is zero exactly when no byte
    /// is).
    fn needs_escape(word: &[u8]) -> bool {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(word);
        let word = u64::from_le_bytes(bytes);
        let below_space = word.wrapping_sub(ONES * 0x20) & !word;
        let zero_byte = |v: u64| v.wrapping_sub(ONES) & !v;
        let quote = zero_byte(word ^ (ONES * u64::from(b'"')));
        let backslash = zero_byte(word ^ (ONES * u64::from(b'\\')));
        (below_space | quote | backslash) & HIGHS != 0
    }
    /// Writes each byte's form into `staged` and appends the result to `out`.
    fn put_escaped(out: &mut Vec<u8>, staged: &mut [u8; STAGED], bytes: &[u8]) {
        let mut len = 0;
        for &byte in bytes {
            let (form, form_len) = &FORM[usize::from(byte)];
            staged[len..len + 8].copy_from_slice(form);
            len += usize::from(*form_len);
        }
        out.extend_from_slice(&staged[..len]);
    }
    const BLOCK: usize = 16;
    /// The longest form of a block, and room to store the last byte's form whole.
    const STAGED: usize = BLOCK * 6 + 8;
    let bytes = text.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    let mut staged = [0u8; STAGED];
    let mut blocks = bytes.chunks_exact(BLOCK);
    for block in &mut blocks {
        if block.chunks_exact(8).any(needs_escape) {
            put_escaped(out, &mut staged, block);
        } else {
            out.extend_from_slice(block);
        }
    }
    put_escaped(out, &mut staged, blocks.remainder());
    out.push(b'"');
}

/// Each byte's form inside a JSON string, padded to eight bytes, and its length: the byte
/// itself; `\\` and a letter (`"`, `\\` and the five control characters with one); or
/// `\\u00xx` in lowercase hex (the other control characters) — `serde_json`'s escapes.
static FORM: [([u8; 8], u8); 256] = {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut table = [([0u8; 8], 1u8); 256];
    let mut byte = 0;
    while byte < 256 {
        let letter = match byte as u8 {
            0x08 => b'b',
            0x09 => b't',
            0x0a => b'n',
            0x0c => b'f',
            0x0d => b'r',
            b'"' => b'"',
            b'\\' => b'\\',
            0x00..0x20 => b'u',
            _ => 0,
        };
        table[byte] = match letter {
            0 => ([byte as u8, 0, 0, 0, 0, 0, 0, 0], 1),
            b'u' => ([b'\\', b'u', b'0', b'0', HEX[byte >> 4], HEX[byte & 0xf], 0, 0], 6),
            _ => ([b'\\', letter, 0, 0, 0, 0, 0, 0], 2),
        };
        byte += 1;
    }
    table
};

/// Appends the compact JSON of a number or scalar value.
pub(crate) fn put<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) {
    // Serializing strings, integers, floats and scalar `Value`s into a `Vec` cannot fail: there
    // is no I/O and there are no map keys. (Non-finite floats become `null`.)
    let result = serde_json::to_writer(out, value);
    debug_assert!(result.is_ok(), "serializing a scalar failed");
}

#[cfg(test)]
mod tests;
