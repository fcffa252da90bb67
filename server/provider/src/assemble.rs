//! Builds the assistant message from the streamed deltas.

use std::collections::BTreeMap;

use dsh_session::{AssistantMessage, ChunkDelta, ToolCall};

/// Accumulates [`ChunkDelta`]s into the [`AssistantMessage`] the loop logs.
///
/// Text, reasoning and argument fragments are concatenated exactly as received. Tool calls are
/// keyed by their stream `index` and come out in index order; a fragment for an index whose
/// header has not arrived still lands in that call.
///
/// A signature (Anthropic's `signature_delta`) is concatenated like text; redacted reasoning
/// blocks are kept whole, in order.
///
/// `reasoning_content` is `Some` iff at least one reasoning delta was seen, **including an empty
/// one**: DeepSeek's thinking mode opens with `reasoning_content: ""`, so a thinking turn that
/// said nothing stores `Some("")`, while a non-thinking turn stores `None`. The wire serializer
/// sends `""` for `None` anyway when the passback rule needs the key, so both replay the same.
#[derive(Debug, Default)]
pub struct MessageAssembler {
    content: String,
    reasoning: Option<String>,
    signature: Option<String>,
    redacted: Vec<String>,
    calls: BTreeMap<u32, ToolCall>,
}

impl MessageAssembler {
    /// An empty assembler.
    pub fn new() -> Self {
        MessageAssembler::default()
    }

    /// Adds one delta.
    pub fn push(&mut self, delta: &ChunkDelta) {
        match delta {
            ChunkDelta::Text { text } => self.content.push_str(text),
            ChunkDelta::Reasoning { text } => {
                self.reasoning.get_or_insert_with(String::new).push_str(text);
            }
            ChunkDelta::ReasoningSignature { signature } => {
                self.signature.get_or_insert_with(String::new).push_str(signature);
            }
            ChunkDelta::RedactedReasoning { data } => self.redacted.push(data.clone()),
            ChunkDelta::ToolCall { index, id, name } => {
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
            reasoning_signature: self.signature,
            redacted_reasoning: self.redacted,
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
