//! The chat-completions request body — DeepSeek's, and other OpenAI-compatible servers' — a
//! pure, deterministic serializer, and its memo.
//!
//! [`body`] is a function of the [`GenerateRequest`] alone (no clock, no randomness, no
//! configuration), so the body the loop dispatches can be rebuilt byte for byte from the session
//! log. It writes the JSON by hand (`crate::json`), one piece at a time, in a fixed field order.
//! Each message is serialized on its own and depends only on itself and the header, so a
//! request that appends messages to an earlier one serializes to an append-extension of its
//! `messages` array: the provider's prefix cache keeps hitting, and [`Memo`] serializes only the
//! new messages.
//!
//! Tool `parameters` (free-form JSON Schema) are written with object keys sorted by their UTF-8
//! bytes, whatever order the `serde_json::Value` holds them in.
//!
//! The rules it follows (docs/providers.md):
//! - field order `model`, `messages`, `tools`, `thinking`, `reasoning_effort`, `max_tokens`,
//!   `temperature`, `top_p`, `response_format`, `stream`, `stream_options`;
//! - `response_format` only when the call config asks for a JSON mode
//!   (`{"type":"json_object"}`: a prompt with an output schema, docs/scripting.md);
//! - `thinking` is always an object (a boolean gets a 422), `max_tokens` is always sent;
//! - the header's system prompt becomes the first message; tools are sorted by name in UTF-16
//!   code-unit order (what the TypeScript harness did), stable for equal names;
//! - assistant `content` is always a string (`""`, never `null`); tool-call arguments are the
//!   stored string, never re-serialized from parsed JSON;
//! - thinking on: every assistant message carries the `reasoning_content` it has; with tools
//!   present as well, *every* assistant message carries one, `""` when none was stored (the
//!   API rejects a missing one with 400). Thinking off: never sent;
//! - empty tool output is sent as `(no output)`, since an empty tool message is rejected;
//! - a user message (or tool result) with images has a content *array*: a `text` part (when
//!   the text is not empty), then one `{"type":"image_url","image_url":{"url":"data:<media
//!   type>;base64,<data>"}}` part per image, in order; without images its content stays a string.
//!
//! Other OpenAI-compatible servers (llama.cpp, vLLM, Ollama: a call config whose `wire` kind is
//! `openai-compatible`) get the same body with the differences their profile names, all logged
//! in the call config's `wire` so a rebuild writes the same bytes: no `thinking` object unless
//! `thinkingObject`; `reasoning_content` only when `reasoningPassback` (and thinking is on), and
//! only for messages that stored one (DeepSeek's empty-string rule is DeepSeek's);
//! `max_completion_tokens` instead of `max_tokens` when `maxCompletionTokens`.
//!
//! The format has nothing to refuse before dispatch: any message sequence the loop logs is sent.

use std::sync::Arc;

use dsh_session::{
    AssistantMessage, EpochHeader, GenerateRequest, ImageData, ImageRef, LlmCallConfig, Message,
    ProviderKind, ResponseFormat, ToolSchema,
};

use crate::body::{Prefix, WireBytes, adopt_messages, extends};
use crate::json::{
    EMPTY_TOOL_OUTPUT, image_bytes, media_type, put, put_base64_unquoted, put_canonical,
    put_sampling, put_str, sorted_tools,
};

/// The adapter id logged in `request/sent` for DeepSeek's format. Bump it whenever the bytes
/// [`crate::wire_body`] writes for the same request change.
pub const DEEPSEEK_ADAPTER: &str = "deepseek-chat/v1";

/// The adapter id logged in `request/sent` for other OpenAI-compatible servers.
pub const OPENAI_ADAPTER: &str = "openai-chat/v1";

/// The adapter id of the dialect `config` names.
pub(crate) fn adapter_id(config: &LlmCallConfig) -> &'static str {
    if Dialect::of(config).deepseek { DEEPSEEK_ADAPTER } else { OPENAI_ADAPTER }
}

/// The byte-changing options of a chat-completions dialect, from the call config: DeepSeek's,
/// or those an OpenAI-compatible profile names.
#[derive(Clone, Copy, Debug)]
struct Dialect {
    /// DeepSeek's rules for `reasoning_content` (every assistant message with tools).
    deepseek: bool,
    thinking_object: bool,
    reasoning_passback: bool,
    max_completion_tokens: bool,
}

impl Dialect {
    fn of(config: &LlmCallConfig) -> Dialect {
        match (&config.wire, config.kind()) {
            (Some(wire), ProviderKind::OpenaiCompatible) => Dialect {
                deepseek: false,
                thinking_object: wire.thinking_object,
                reasoning_passback: wire.reasoning_passback,
                max_completion_tokens: wire.max_completion_tokens,
            },
            _ => Dialect {
                deepseek: true,
                thinking_object: true,
                reasoning_passback: true,
                max_completion_tokens: false,
            },
        }
    }
}

/// Serializes a request into the exact body bytes of `POST /chat/completions`.
///
/// Pure and deterministic: same request, same bytes.
pub(crate) fn body(request: &GenerateRequest) -> Vec<u8> {
    let header = &request.header;
    let mut out = Vec::with_capacity(4096);
    put_head(&mut out, header);
    let mut any = header.system.is_some();
    for (index, message) in request.messages.iter().enumerate() {
        put_element(&mut out, header, &request.images, &request.messages[..index], message, any);
        any = true;
    }
    put_tool_images(&mut out, &request.messages, &request.images);
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

/// One element of the `messages` array (after the messages `before` it), with its separator
/// when it is not the first; before anything but a tool result, the images of the tool results
/// just before it ([`put_tool_images`]).
fn put_element(
    out: &mut Vec<u8>,
    header: &EpochHeader,
    images: &ImageData,
    before: &[Arc<Message>],
    message: &Message,
    after_another: bool,
) {
    if !matches!(message, Message::Tool { .. }) {
        put_tool_images(out, before, images);
    }
    if after_another {
        out.push(b',');
    }
    put_message(out, header, images, message);
}

/// The images of the tool results that end `before`, as one user message after them (with its
/// leading separator), when any of them has images. Chat completions take images in user
/// messages only (a `tool` message's content is a string or text parts): each result's text
/// stays in its `tool` message, and this message follows the run of results — never between
/// two, which must follow their assistant message together — holding, for each result with
/// images, a text part naming it (`Images of tool result <call id>:`), then its `image_url`
/// parts. A function of the logged results alone, like every other byte.
fn put_tool_images(out: &mut Vec<u8>, before: &[Arc<Message>], images: &ImageData) {
    let run_start = before
        .iter()
        .rposition(|message| !matches!(**message, Message::Tool { .. }))
        .map_or(0, |last_other| last_other + 1);
    let with_images: Vec<(&str, &[ImageRef])> = before[run_start..]
        .iter()
        .filter_map(|message| match &**message {
            Message::Tool { call_id, images: refs, .. } if !refs.is_empty() => {
                Some((call_id.as_str(), refs.as_slice()))
            }
            _ => None,
        })
        .collect();
    if with_images.is_empty() {
        return;
    }
    out.extend_from_slice(b",{\"role\":\"user\",\"content\":[");
    for (position, (call_id, refs)) in with_images.into_iter().enumerate() {
        if position > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"type\":\"text\",\"text\":");
        put_str(out, &format!("Images of tool result {call_id}:"));
        out.push(b'}');
        for image in refs {
            out.push(b',');
            put_image_part(out, image, images);
        }
    }
    out.extend_from_slice(b"]}");
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
    let dialect = Dialect::of(config);
    if dialect.thinking_object {
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
    out.extend_from_slice(if dialect.max_completion_tokens {
        b",\"max_completion_tokens\":"
    } else {
        b",\"max_tokens\":"
    });
    put(out, &config.max_tokens);
    put_sampling(out, config);
    match config.response_format {
        None => {}
        Some(ResponseFormat::JsonObject) => {
            out.extend_from_slice(b",\"response_format\":{\"type\":\"json_object\"}");
        }
    }
    out.extend_from_slice(b",\"stream\":true,\"stream_options\":{\"include_usage\":true}}");
}

/// [`body`] memoized across the steps of one conversation (`crate::WireCache` for
/// chat-completions bodies): the head and every message serialized and hashed once. A message
/// depends only on itself and the header, so while the header stays the same and the messages
/// only grow, the new messages are all a step writes.
#[derive(Clone, Default)]
pub(crate) struct Memo {
    header: Option<EpochHeader>,
    messages: Vec<Arc<Message>>,
    /// `put_head` and every memoized message, without the tail, with its digest.
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

    /// [`crate::WireCache::adopt`] for chat-completions bodies.
    pub(crate) fn adopt(&mut self, request: &GenerateRequest) -> bool {
        let extends = extends(self.header.as_ref(), &self.messages, request);
        if extends {
            adopt_messages(&mut self.messages, request);
        }
        extends
    }

    /// The body of `request` (equal to `body(request)`) and its lowercase hex sha256.
    pub(crate) fn body(&mut self, request: &GenerateRequest) -> (WireBytes, String) {
        let header = &request.header;
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
            let after_another = header.system.is_some() || known + index > 0;
            let before = &request.messages[..known + index];
            put_element(out, header, &request.images, before, message, after_another);
        });
        self.messages.extend(new.iter().cloned());
        self.header = memoized;
        let mut tail = Vec::with_capacity(1024);
        put_tool_images(&mut tail, &request.messages, &request.images);
        put_tail(&mut tail, header);
        self.prefix.finish(&tail)
    }
}

fn put_message(out: &mut Vec<u8>, header: &EpochHeader, images: &ImageData, message: &Message) {
    match message {
        Message::System { content } => put_text_message(out, "system", content),
        Message::User { content, images: refs } if refs.is_empty() => {
            put_text_message(out, "user", content)
        }
        Message::User { content, images: refs } => {
            out.extend_from_slice(b"{\"role\":\"user\",\"content\":");
            put_parts(out, content, refs, images);
            out.push(b'}');
        }
        Message::Assistant(assistant) => put_assistant(out, header, assistant),
        // Its images follow the run of results it ends, in a user message (put_tool_images).
        Message::Tool { call_id, content, .. } => {
            out.extend_from_slice(b"{\"role\":\"tool\",\"tool_call_id\":");
            put_str(out, call_id);
            out.extend_from_slice(b",\"content\":");
            let content = if content.is_empty() { EMPTY_TOOL_OUTPUT } else { content };
            put_str(out, content);
            out.push(b'}');
        }
    }
}

/// A content array: the text part (when there is text), then one `image_url` part per image,
/// its URL a `data:` URL of the image's bytes.
fn put_parts(out: &mut Vec<u8>, text: &str, refs: &[ImageRef], images: &ImageData) {
    out.push(b'[');
    let mut first = true;
    if !text.is_empty() {
        out.extend_from_slice(b"{\"type\":\"text\",\"text\":");
        put_str(out, text);
        out.push(b'}');
        first = false;
    }
    for image in refs {
        if !first {
            out.push(b',');
        }
        first = false;
        put_image_part(out, image, images);
    }
    out.push(b']');
}

/// An `image_url` part whose URL is a `data:` URL of the image's bytes.
fn put_image_part(out: &mut Vec<u8>, image: &ImageRef, images: &ImageData) {
    out.extend_from_slice(b"{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:");
    out.extend_from_slice(media_type(image).as_bytes());
    out.extend_from_slice(b";base64,");
    put_base64_unquoted(out, image_bytes(images, image));
    out.extend_from_slice(b"\"}}");
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
    let dialect = Dialect::of(&header.config);
    let thinking = header.config.thinking && dialect.reasoning_passback;
    let has_tools = header.tools.as_ref().is_some_and(|tools| !tools.is_empty());
    let reasoning = match (&message.reasoning_content, thinking, has_tools) {
        (_, false, _) => None,
        (Some(reasoning), true, _) => Some(reasoning.as_str()),
        // DeepSeek rejects an assistant message without one when tools are present.
        (None, true, true) if dialect.deepseek => Some(""),
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

#[cfg(test)]
mod tests;
