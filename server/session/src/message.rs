//! Messages as the model sees them, the per-event projection, and the provider-neutral request.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::event::{Event, EventData, SurfaceNode, ToolResult};
use crate::header::EpochHeader;
use crate::image::{ImageData, ImageRef, image_refs};

/// One tool call of an assistant message, argument string verbatim.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS), ts(optional_fields))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolCall {
    /// Provider-assigned id.
    pub id: String,
    /// Tool name.
    pub name: String,
    /// The argument string exactly as the model produced it; never re-serialized.
    pub arguments: String,
}

/// An assistant message exactly as assembled from the stream.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS), ts(optional_fields))]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AssistantMessage {
    /// Visible text (possibly empty).
    pub content: String,
    /// Reasoning text; `None` when the provider sent none at all, `Some("")` when it sent an
    /// empty one. Kept as received so it can be passed back unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// The message's blocks in the order the model produced them, when it produced thinking
    /// blocks (Anthropic Messages): each thinking block's share of `reasoning_content` and its
    /// signature, encrypted blocks, each text block's share of `content`, each tool call.
    /// Model-visible: the format requires thinking blocks back, signed and unchanged. Empty
    /// for every other message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "schema", ts(as = "Option<Vec<ContentBlock>>", optional))]
    pub blocks: Vec<ContentBlock>,
    /// Tool calls, in the order the model emitted them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "schema", ts(as = "Option<Vec<ToolCall>>", optional))]
    pub tool_calls: Vec<ToolCall>,
}

/// One block of an assistant message, in the order the model produced it (Anthropic Messages).
/// Texts are not repeated here: a block names how many bytes of the message's
/// `reasoningContent` or `content` it holds, in order.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS), ts(optional_fields))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase", deny_unknown_fields)]
pub enum ContentBlock {
    /// A thinking block: the next `bytes` bytes of `reasoningContent`, and its signature as
    /// streamed (empty when the server sent none).
    Thinking {
        /// Its length in UTF-8 bytes.
        bytes: u64,
        /// Its signature.
        signature: String,
    },
    /// An encrypted thinking block, opaque.
    RedactedThinking {
        /// The block's `data`.
        data: String,
    },
    /// A text block: the next `bytes` bytes of `content`.
    Text {
        /// Its length in UTF-8 bytes.
        bytes: u64,
    },
    /// The next tool call of `toolCalls`.
    ToolUse,
}

/// A model-visible message.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS), ts(optional_fields))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "camelCase")]
pub enum Message {
    /// A system message. The loop's system prompt lives in the header, not on the surface; this
    /// variant exists for one-shot requests built outside the loop.
    System {
        /// The text.
        content: String,
    },
    /// A user-role message: a prompt, steering, context, or a compaction summary.
    User {
        /// The text.
        content: String,
        /// Images after the text (by reference; the bytes are the request's [`ImageData`]).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        #[cfg_attr(feature = "schema", ts(as = "Option<Vec<ImageRef>>", optional))]
        images: Vec<ImageRef>,
    },
    /// An assistant message.
    Assistant(AssistantMessage),
    /// A tool result.
    #[serde(rename_all = "camelCase")]
    Tool {
        /// The call answered.
        call_id: String,
        /// What the model sees.
        content: String,
        /// Images the result carries after its text (a `read_file` of an image).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        #[cfg_attr(feature = "schema", ts(as = "Option<Vec<ImageRef>>", optional))]
        images: Vec<ImageRef>,
    },
}

/// The prefix a compaction summary carries so the model knows what it is reading.
pub const SUMMARY_PREAMBLE: &str =
    "Summary of the earlier conversation (older messages were compacted):\n\n";

/// Projects one event onto the message the model sees, or `None` for log-only events.
///
/// This is *the* projection: the live session, reconstruction and any external reader all call
/// it, so no two paths can disagree. It is pure and total.
pub fn derive_event_message(event: &Event) -> Option<Message> {
    match &event.data {
        EventData::UserMessage(m) => {
            Some(Message::User { content: m.text.clone(), images: m.images.clone() })
        }
        EventData::SteeringMessage(m) => Some(Message::user(m.text.clone())),
        EventData::ContextMessage(m) => Some(Message::user(m.text.clone())),
        EventData::AssistantMessage(turn) => Some(Message::Assistant(turn.message.clone())),
        EventData::ToolResult(result) => Some(tool_message(result)),
        EventData::SurfaceReplace(replace) => Some(match &replace.node {
            SurfaceNode::Summary { text } => Message::user(format!("{SUMMARY_PREAMBLE}{text}")),
            SurfaceNode::ToolResult(result) => tool_message(result),
        }),
        _ => None,
    }
}

fn tool_message(result: &ToolResult) -> Message {
    Message::Tool {
        call_id: result.call_id.clone(),
        content: result.content.clone(),
        images: result.images.clone(),
    }
}

impl Message {
    /// A user message of text alone.
    pub fn user(content: impl Into<String>) -> Message {
        Message::User { content: content.into(), images: Vec::new() }
    }

    /// A tool result of text alone.
    pub fn tool(call_id: impl Into<String>, content: impl Into<String>) -> Message {
        Message::Tool { call_id: call_id.into(), content: content.into(), images: Vec::new() }
    }
}

/// A provider-neutral model request: the header plus the conversation.
///
/// Built by the loop from a message snapshot and the folded header, and rebuilt by
/// [`crate::reconstruct`] from the log; the two must be equal.
#[derive(Clone, Debug, PartialEq)]
pub struct GenerateRequest {
    /// Call config, system prompt, tool schemas.
    pub header: EpochHeader,
    /// The conversation, oldest first. Shared, immutable projections.
    pub messages: Vec<Arc<Message>>,
    /// The bytes of the images the messages name, loaded before the request was built: the
    /// serializers write them from here (empty when no message has an image).
    pub images: ImageData,
}

impl GenerateRequest {
    /// A request without images.
    pub fn new(header: EpochHeader, messages: Vec<Arc<Message>>) -> GenerateRequest {
        GenerateRequest { header, messages, images: ImageData::default() }
    }

    /// The first image a message names whose bytes are not in `images`: such a request must
    /// not be sent (it would silently lack the image).
    pub fn missing_image(&self) -> Option<&ImageRef> {
        image_refs(&self.messages)
            .into_iter()
            .find(|image| self.images.get(&image.sha256).is_none())
    }
}
