//! Anthropic's streamed Messages events, turned into provider-neutral deltas.
//!
//! Each SSE event's `data` is a JSON object whose `type` names the event (the `event:` line
//! says the same and is not needed): `message_start`, then per content block
//! `content_block_start`, `content_block_delta`…, `content_block_stop`, then `message_delta`
//! (the stop reason and *cumulative* usage) and `message_stop`. `ping` may come anywhere and is
//! not progress; an `error` event ends the stream (`overloaded_error` is what a 529 would have
//! been before streaming began). Unknown event types are skipped, as the format asks.
//!
//! Blocks map onto [`ChunkDelta`]s: `text` → `Text`; `thinking` → `Reasoning` (an empty one at
//! its start, so a thinking turn that said nothing still stores `Some("")`), and at its end one
//! `ReasoningSignature` with its `signature_delta`s joined (empty when none came), which closes
//! the block for the assembler; `redacted_thinking` → `RedactedReasoning`;
//! `tool_use` → `ToolCall` (numbered in order of the tool blocks) and its `input_json_delta`
//! pieces → `ToolArgs`, verbatim. A `tool_use` whose input came whole in its start event and
//! never in pieces gets that input as one fragment, written compactly. A block of another type
//! (a server tool's) cannot be sent back faithfully and is a decode error.
//!
//! Usage: `input_tokens` counts only the uncached input, so the prompt is `input +
//! cache_creation + cache_read`; the hit is `cache_read`; the miss is `input + cache_creation`,
//! of which `cache_creation` is also reported on its own (`cacheWriteTokens`). Each usage
//! object overrides the figures it carries (`message_delta`'s are cumulative).

use std::collections::BTreeMap;

use dsh_session::{ChunkDelta, Usage};
use serde::Deserialize;
use serde_json::Value;

use crate::ProviderError;
use crate::decoded::{Decoded, Finish};

/// What kind of block a stream index holds.
#[derive(Clone, Debug)]
enum Open {
    Text,
    /// A thinking block and its signature so far.
    Thinking {
        signature: String,
    },
    Redacted,
    /// A thinking block that stopped (its signature went out).
    Closed,
    /// A tool call: its position among the message's calls, and the input its start event
    /// carried until a piece arrives (then `None`).
    ToolUse {
        call: u32,
        start_input: Option<String>,
    },
}

/// Decodes the data events of one streamed Messages response.
#[derive(Debug, Default)]
pub struct MessagesDecoder {
    blocks: BTreeMap<u64, Open>,
    calls: u32,
    stop_reason: Option<String>,
    input: u64,
    cache_creation: u64,
    cache_read: u64,
    output: u64,
    saw_usage: bool,
}

impl MessagesDecoder {
    /// A decoder for a fresh response.
    pub fn new() -> Self {
        MessagesDecoder::default()
    }

    /// Decodes one SSE data payload.
    ///
    /// Errors: malformed JSON or an event out of place is [`ProviderError::Decode`]; an `error`
    /// event is [`ProviderError::StreamError`]; a `refusal` stop is
    /// [`ProviderError::FinishError`].
    pub fn decode(&mut self, data: &str) -> Result<Decoded, ProviderError> {
        let event: Event = serde_json::from_str(data).map_err(|error| {
            ProviderError::Decode(format!("a stream event is not valid JSON ({error})"))
        })?;
        let mut deltas = Vec::new();
        match event {
            Event::Ping => return Ok(Decoded::Ping),
            Event::Error { error } => {
                return Err(ProviderError::StreamError {
                    error_type: error.kind.unwrap_or_else(|| "error".to_owned()),
                    message: error.message.unwrap_or_else(|| "no message".to_owned()),
                });
            }
            Event::MessageStart { message } => {
                if let Some(usage) = message.usage {
                    self.take_usage(usage);
                }
            }
            Event::ContentBlockStart { index, content_block } => {
                let open = self.start(content_block, &mut deltas)?;
                if self.blocks.insert(index, open).is_some() {
                    return Err(decode(format!("content block {index} started twice")));
                }
            }
            Event::ContentBlockDelta { index, delta } => {
                let Some(open) = self.blocks.get_mut(&index) else {
                    return Err(decode(format!(
                        "a delta for content block {index}, never started"
                    )));
                };
                push_delta(open, delta, &mut deltas)?;
            }
            Event::ContentBlockStop { index } => match self.blocks.get_mut(&index) {
                Some(Open::ToolUse { call, start_input }) => {
                    if let Some(fragment) = start_input.take() {
                        deltas.push(ChunkDelta::ToolArgs { index: *call, fragment });
                    }
                }
                Some(Open::Thinking { signature }) => {
                    let signature = std::mem::take(signature);
                    deltas.push(ChunkDelta::ReasoningSignature { signature });
                    // Stopped: a second stop must not close it again.
                    self.blocks.insert(index, Open::Closed);
                }
                _ => {}
            },
            Event::MessageDelta { delta, usage } => {
                if let Some(reason) = delta.stop_reason {
                    self.stop_reason = Some(reason);
                }
                if let Some(usage) = usage {
                    self.take_usage(usage);
                }
            }
            Event::MessageStop => {
                // A thinking block that never stopped never sent its signature: the message
                // could not be replayed.
                if self.blocks.values().any(|open| matches!(open, Open::Thinking { .. })) {
                    return Err(decode(
                        "the message stopped with a thinking block still open".to_owned(),
                    ));
                }
                let Some(finish_reason) = self.stop_reason.take() else {
                    return Err(decode("the message stopped without a stop reason".to_owned()));
                };
                if finish_reason == "refusal" {
                    return Err(ProviderError::FinishError { reason: finish_reason });
                }
                if !self.saw_usage {
                    tracing::warn!("the provider's stream carried no usage; recording zeros");
                }
                return Ok(Decoded::Done(Finish { finish_reason, usage: self.usage() }));
            }
            Event::Unknown => {}
        }
        Ok(Decoded::Deltas(deltas))
    }

    fn start(
        &mut self,
        block: StartBlock,
        deltas: &mut Vec<ChunkDelta>,
    ) -> Result<Open, ProviderError> {
        Ok(match block {
            StartBlock::Text { text } => {
                if !text.is_empty() {
                    deltas.push(ChunkDelta::Text { text });
                }
                Open::Text
            }
            StartBlock::Thinking { thinking, signature } => {
                deltas.push(ChunkDelta::Reasoning { text: thinking });
                Open::Thinking { signature: signature.unwrap_or_default() }
            }
            StartBlock::RedactedThinking { data } => {
                deltas.push(ChunkDelta::RedactedReasoning { data });
                Open::Redacted
            }
            StartBlock::ToolUse { id, name, input } => {
                let call = self.calls;
                self.calls += 1;
                deltas.push(ChunkDelta::ToolCall { index: call, id, name });
                let start_input = match input {
                    Some(Value::Object(map)) if !map.is_empty() => {
                        Some(Value::Object(map).to_string())
                    }
                    _ => None,
                };
                Open::ToolUse { call, start_input }
            }
            StartBlock::Other { kind } => {
                return Err(decode(format!(
                    "a `{kind}` content block, which this adapter cannot send back"
                )));
            }
        })
    }

    fn take_usage(&mut self, usage: WireUsage) {
        self.saw_usage = true;
        let fields = [
            (usage.input_tokens, &mut self.input),
            (usage.cache_creation_input_tokens, &mut self.cache_creation),
            (usage.cache_read_input_tokens, &mut self.cache_read),
            (usage.output_tokens, &mut self.output),
        ];
        for (given, slot) in fields {
            if let Some(value) = given {
                *slot = value;
            }
        }
    }

    fn usage(&self) -> Usage {
        let miss = self.input.saturating_add(self.cache_creation);
        Usage {
            prompt_tokens: miss.saturating_add(self.cache_read),
            cache_hit_tokens: self.cache_read,
            cache_miss_tokens: miss,
            completion_tokens: self.output,
            reasoning_tokens: 0,
            cache_write_tokens: self.cache_creation,
        }
    }
}

fn decode(message: String) -> ProviderError {
    ProviderError::Decode(message)
}

fn push_delta(
    open: &mut Open,
    delta: WireDelta,
    deltas: &mut Vec<ChunkDelta>,
) -> Result<(), ProviderError> {
    let mismatch = |what: &str| decode(format!("a `{what}` delta inside a block of another type"));
    match delta {
        WireDelta::TextDelta { text } => {
            if !matches!(open, Open::Text) {
                return Err(mismatch("text_delta"));
            }
            if !text.is_empty() {
                deltas.push(ChunkDelta::Text { text });
            }
        }
        WireDelta::ThinkingDelta { thinking } => {
            if !matches!(open, Open::Thinking { .. }) {
                return Err(mismatch("thinking_delta"));
            }
            if !thinking.is_empty() {
                deltas.push(ChunkDelta::Reasoning { text: thinking });
            }
        }
        WireDelta::SignatureDelta { signature: piece } => {
            let Open::Thinking { signature } = open else {
                return Err(mismatch("signature_delta"));
            };
            signature.push_str(&piece);
        }
        WireDelta::InputJsonDelta { partial_json } => {
            let Open::ToolUse { call, start_input } = open else {
                return Err(mismatch("input_json_delta"));
            };
            // The pieces are the input: what the start event carried is superseded.
            *start_input = None;
            if !partial_json.is_empty() {
                deltas.push(ChunkDelta::ToolArgs { index: *call, fragment: partial_json });
            }
        }
        WireDelta::Other => {}
    }
    Ok(())
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Event {
    Ping,
    Error {
        error: WireError,
    },
    MessageStart {
        message: WireMessage,
    },
    ContentBlockStart {
        index: u64,
        content_block: StartBlock,
    },
    ContentBlockDelta {
        index: u64,
        delta: WireDelta,
    },
    ContentBlockStop {
        index: u64,
    },
    MessageDelta {
        delta: WireMessageDelta,
        #[serde(default)]
        usage: Option<WireUsage>,
    },
    MessageStop,
    #[serde(other)]
    Unknown,
}

#[derive(Deserialize)]
struct WireError {
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    message: Option<String>,
}

#[derive(Deserialize)]
struct WireMessage {
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum StartBlock {
    Text {
        #[serde(default)]
        text: String,
    },
    Thinking {
        #[serde(default)]
        thinking: String,
        #[serde(default)]
        signature: Option<String>,
    },
    RedactedThinking {
        data: String,
    },
    ToolUse {
        id: String,
        name: String,
        #[serde(default)]
        input: Option<Value>,
    },
    #[serde(untagged)]
    Other {
        #[serde(rename = "type")]
        kind: String,
    },
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireDelta {
    TextDelta {
        text: String,
    },
    ThinkingDelta {
        thinking: String,
    },
    SignatureDelta {
        signature: String,
    },
    InputJsonDelta {
        partial_json: String,
    },
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct WireMessageDelta {
    #[serde(default)]
    stop_reason: Option<String>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
}

#[cfg(test)]
mod tests;
