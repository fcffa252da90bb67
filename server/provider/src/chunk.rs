//! DeepSeek's streamed `chat.completion.chunk` JSON, turned into provider-neutral deltas.
//!
//! The vendor JSON types here are private: only [`ChunkDelta`], [`Usage`] and [`Finish`] leave
//! the module, as a [`Decoded`]. The decoder keeps the two pieces of state the stream spreads
//! over several frames — the finish reason and the latest usage (DeepSeek V4 puts usage on the
//! finish chunk, the documented form is a separate `choices: []` chunk; both are accepted) — and
//! releases them together only at `data: [DONE]`.

use dsh_session::{ChunkDelta, Usage};
use serde::Deserialize;

use crate::ProviderError;
use crate::decoded::{Decoded, Finish};

/// Finish reasons that mean the response failed even though the stream ended normally.
const ERROR_FINISH_REASONS: &[&str] = &["insufficient_system_resource", "content_filter"];

/// Decodes the data events of one streamed response.
#[derive(Debug, Default)]
pub struct ChunkDecoder {
    finish_reason: Option<String>,
    usage: Option<Usage>,
}

impl ChunkDecoder {
    /// A decoder for a fresh response.
    pub fn new() -> Self {
        ChunkDecoder::default()
    }

    /// Decodes one SSE data payload.
    ///
    /// Errors: malformed JSON is [`ProviderError::Decode`]; an error-class finish reason is
    /// [`ProviderError::FinishError`]; an `{"error": …}` object sent mid-stream is
    /// [`ProviderError::StreamCut`]; `[DONE]` before any finish reason is a `Decode` error.
    pub fn decode(&mut self, data: &str) -> Result<Decoded, ProviderError> {
        if data.trim() == "[DONE]" {
            let Some(finish_reason) = self.finish_reason.take() else {
                return Err(ProviderError::Decode(
                    "the stream ended ([DONE]) without a finish reason".to_owned(),
                ));
            };
            if self.usage.is_none() {
                tracing::warn!("the provider's stream carried no usage; recording zeros");
            }
            return Ok(Decoded::Done(Finish {
                finish_reason,
                usage: self.usage.unwrap_or_default(),
            }));
        }
        let chunk: WireChunk = serde_json::from_str(data).map_err(|error| {
            ProviderError::Decode(format!("a stream chunk is not valid JSON ({error})"))
        })?;
        if let Some(error) = chunk.error {
            return Err(ProviderError::StreamCut(format!(
                "the provider reported an error mid-stream: {}",
                error.message.unwrap_or_else(|| "no message".to_owned())
            )));
        }
        if let Some(usage) = chunk.usage {
            self.usage = Some(usage.normalize());
        }
        let mut deltas = Vec::new();
        for choice in chunk.choices {
            if let Some(delta) = choice.delta {
                delta.push_into(&mut deltas);
            }
            if let Some(reason) = choice.finish_reason {
                if ERROR_FINISH_REASONS.contains(&reason.as_str()) {
                    return Err(ProviderError::FinishError { reason });
                }
                self.finish_reason = Some(reason);
            }
        }
        Ok(Decoded::Deltas(deltas))
    }
}

#[derive(Deserialize)]
struct WireChunk {
    #[serde(default)]
    choices: Vec<WireChoice>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<WireError>,
}

#[derive(Deserialize)]
struct WireError {
    #[serde(default)]
    message: Option<String>,
}

#[derive(Deserialize)]
struct WireChoice {
    #[serde(default)]
    delta: Option<WireDelta>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct WireDelta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    reasoning_content: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<WireToolCallDelta>>,
}

impl WireDelta {
    /// Appends this delta's pieces in a fixed order: reasoning, text, tool calls.
    ///
    /// An empty `reasoning_content` *is* emitted (DeepSeek's thinking mode opens with `""`, and
    /// that distinguishes "thinking, nothing said yet" from "no reasoning at all" for the
    /// passback rule); empty text and empty argument fragments are not, since they change nothing.
    fn push_into(self, deltas: &mut Vec<ChunkDelta>) {
        if let Some(text) = self.reasoning_content {
            deltas.push(ChunkDelta::Reasoning { text });
        }
        if let Some(text) = self.content.filter(|text| !text.is_empty()) {
            deltas.push(ChunkDelta::Text { text });
        }
        for call in self.tool_calls.unwrap_or_default() {
            let (name, arguments) = match call.function {
                Some(function) => (function.name, function.arguments),
                None => (None, None),
            };
            if call.id.is_some() || name.is_some() {
                deltas.push(ChunkDelta::ToolCall {
                    index: call.index,
                    id: call.id.unwrap_or_default(),
                    name: name.unwrap_or_default(),
                });
            }
            if let Some(fragment) = arguments.filter(|fragment| !fragment.is_empty()) {
                deltas.push(ChunkDelta::ToolArgs { index: call.index, fragment });
            }
        }
    }
}

#[derive(Deserialize)]
struct WireToolCallDelta {
    index: u32,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<WireFunctionDelta>,
}

#[derive(Deserialize)]
struct WireFunctionDelta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    #[serde(default)]
    prompt_cache_hit_tokens: Option<u64>,
    #[serde(default)]
    prompt_cache_miss_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<WirePromptDetails>,
    #[serde(default)]
    completion_tokens_details: Option<WireCompletionDetails>,
}

#[derive(Deserialize)]
struct WirePromptDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct WireCompletionDetails {
    #[serde(default)]
    reasoning_tokens: Option<u64>,
}

impl WireUsage {
    /// Maps DeepSeek usage onto disjoint-safe counts.
    ///
    /// `prompt_tokens` already includes the hit tokens, and `cached_tokens` is the same number
    /// as `prompt_cache_hit_tokens` (a fallback, never added): nothing is counted twice.
    fn normalize(self) -> Usage {
        let prompt_tokens = self.prompt_tokens;
        let cache_hit_tokens = self
            .prompt_cache_hit_tokens
            .or_else(|| self.prompt_tokens_details.and_then(|details| details.cached_tokens))
            .unwrap_or(0);
        let cache_miss_tokens = self
            .prompt_cache_miss_tokens
            .unwrap_or_else(|| prompt_tokens.saturating_sub(cache_hit_tokens));
        let reasoning_tokens = self
            .completion_tokens_details
            .and_then(|details| details.reasoning_tokens)
            .unwrap_or(0);
        Usage {
            prompt_tokens,
            cache_hit_tokens,
            cache_miss_tokens,
            completion_tokens: self.completion_tokens,
            reasoning_tokens,
            cache_write_tokens: 0,
        }
    }
}

#[cfg(test)]
mod tests;
