//! Builds the assistant message from the streamed deltas.

use std::collections::BTreeMap;

use dsh_session::{AssistantMessage, ChunkDelta, ContentBlock, ToolCall};

/// Accumulates [`ChunkDelta`]s into the [`AssistantMessage`] the loop logs.
///
/// Text, reasoning and argument fragments are concatenated exactly as received. Tool calls are
/// keyed by their stream `index` and come out in index order; a fragment for an index whose
/// header has not arrived still lands in that call.
///
/// `reasoning_content` is `Some` iff at least one reasoning delta was seen, **including an empty
/// one**: DeepSeek's thinking mode opens with `reasoning_content: ""`, so a thinking turn that
/// said nothing stores `Some("")`, while a non-thinking turn stores `None`. The wire serializer
/// sends `""` for `None` anyway when the passback rule needs the key, so both replay the same.
///
/// The block layout (`blocks`) follows the deltas' order: text pieces in a row are one text
/// block (two adjacent text blocks of a stream therefore become one), a reasoning signature
/// closes a thinking block made of the reasoning since the previous one, encrypted reasoning is
/// a block of its own, a tool call's header is its block. It is kept only when the stream had
/// thinking blocks (a signature or encrypted reasoning: Anthropic Messages); chat-completions
/// messages keep none.
#[derive(Debug, Default)]
pub struct MessageAssembler {
    content: String,
    reasoning: Option<String>,
    calls: BTreeMap<u32, ToolCall>,
    blocks: Vec<ContentBlock>,
    /// How much of `reasoning` earlier thinking blocks hold.
    reasoning_closed: usize,
    /// Whether a signature or encrypted reasoning came: the layout is kept.
    thinking_blocks: bool,
}

impl MessageAssembler {
    /// An empty assembler.
    pub fn new() -> Self {
        MessageAssembler::default()
    }

    /// Adds one delta.
    pub fn push(&mut self, delta: &ChunkDelta) {
        match delta {
            ChunkDelta::Text { text } => {
                self.content.push_str(text);
                match self.blocks.last_mut() {
                    Some(ContentBlock::Text { bytes }) => *bytes += text.len() as u64,
                    _ => self.blocks.push(ContentBlock::Text { bytes: text.len() as u64 }),
                }
            }
            ChunkDelta::Reasoning { text } => {
                self.reasoning.get_or_insert_with(String::new).push_str(text);
            }
            ChunkDelta::ReasoningSignature { signature } => {
                let reasoning = self.reasoning.get_or_insert_with(String::new);
                let bytes = (reasoning.len() - self.reasoning_closed) as u64;
                self.reasoning_closed = reasoning.len();
                self.blocks.push(ContentBlock::Thinking { bytes, signature: signature.clone() });
                self.thinking_blocks = true;
            }
            ChunkDelta::RedactedReasoning { data } => {
                self.blocks.push(ContentBlock::RedactedThinking { data: data.clone() });
                self.thinking_blocks = true;
            }
            ChunkDelta::ToolCall { index, id, name } => {
                if !self.calls.contains_key(index) {
                    self.blocks.push(ContentBlock::ToolUse);
                }
                let call = self.call(*index);
                // A repeated header only fills what is still missing; it never renames a call.
                if call.id.is_empty() {
                    call.id.clone_from(id);
                }
                if call.name.is_empty() {
                    call.name.clone_from(name);
                }
            }
            ChunkDelta::ToolArgs { index, fragment } => {
                self.call(*index).arguments.push_str(fragment)
            }
        }
    }

    /// The assembled message.
    pub fn finish(self) -> AssistantMessage {
        AssistantMessage {
            content: self.content,
            reasoning_content: self.reasoning,
            blocks: if self.thinking_blocks { self.blocks } else { Vec::new() },
            tool_calls: self.calls.into_values().collect(),
        }
    }

    fn call(&mut self, index: u32) -> &mut ToolCall {
        self.calls.entry(index).or_insert_with(|| ToolCall {
            id: String::new(),
            name: String::new(),
            arguments: String::new(),
        })
    }
}

#[cfg(test)]
mod tests;
