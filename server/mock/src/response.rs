//! The bytes of a completion: streamed chunks or one `chat.completion` body (docs/mock.md,
//! "Responses").
//!
//! Everything here is pure: the server decides ids, usage and the plan, and this module turns
//! them into JSON texts. Pacing, faults and framing on the wire belong to the server.

use serde::Serialize;
use serde_json::{Value, json};

use crate::knobs::{StreamConfig, UsagePlacement};
use crate::tokenizer;

/// One generated tool call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OutCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// The generated answer with its accounting.
#[derive(Debug, Clone)]
pub(crate) struct Output {
    pub id: String,
    pub created: u64,
    pub model: String,
    pub thinking: bool,
    pub reasoning: String,
    pub content: String,
    pub tool_calls: Vec<OutCall>,
    pub finish_reason: String,
    pub usage: Value,
}

/// The usage object, in DeepSeek's field order.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
    pub prompt_tokens_details: CachedTokens,
    pub completion_tokens_details: ReasoningTokens,
    pub prompt_cache_hit_tokens: u64,
    pub prompt_cache_miss_tokens: u64,
}

#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct CachedTokens {
    pub cached_tokens: u64,
}

#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct ReasoningTokens {
    pub reasoning_tokens: u64,
}

impl Usage {
    pub fn new(hit: u64, miss: u64, completion: u64, reasoning: u64) -> Usage {
        Usage {
            prompt_tokens: hit + miss,
            completion_tokens: completion,
            total_tokens: hit + miss + completion,
            prompt_tokens_details: CachedTokens { cached_tokens: hit },
            completion_tokens_details: ReasoningTokens { reasoning_tokens: reasoning },
            prompt_cache_hit_tokens: hit,
            prompt_cache_miss_tokens: miss,
        }
    }

    /// The usage as JSON with `override_fields` merged over it (shallow merge).
    pub fn to_value(self, override_fields: Option<&Value>) -> Value {
        let mut value = serde_json::to_value(self).unwrap_or(Value::Null);
        if let (Value::Object(target), Some(Value::Object(fields))) = (&mut value, override_fields)
        {
            for (key, field) in fields {
                target.insert(key.clone(), field.clone());
            }
        }
        value
    }
}

#[derive(Serialize)]
struct Chunk<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    system_fingerprint: &'static str,
    choices: Vec<ChunkChoice>,
    usage: &'a Value,
}

#[derive(Serialize)]
struct ChunkChoice {
    index: u32,
    delta: Value,
    logprobs: Value,
    finish_reason: Option<String>,
}

impl Output {
    fn chunk(&self, delta: Option<Value>, finish: Option<&str>, usage: &Value) -> String {
        let choices = match delta {
            Some(delta) => vec![ChunkChoice {
                index: 0,
                delta,
                logprobs: Value::Null,
                finish_reason: finish.map(str::to_owned),
            }],
            None => Vec::new(),
        };
        let chunk = Chunk {
            id: &self.id,
            object: "chat.completion.chunk",
            created: self.created,
            model: &self.model,
            system_fingerprint: "fp_fake",
            choices,
            usage,
        };
        serde_json::to_string(&chunk).unwrap_or_default()
    }

    /// The JSON texts of every data frame except `[DONE]`, in order.
    pub fn stream_frames(&self, config: &StreamConfig, include_usage: bool) -> Vec<String> {
        let null = Value::Null;
        let mut frames = Vec::new();
        let role = if self.thinking {
            json!({"role": "assistant", "content": null, "reasoning_content": ""})
        } else {
            json!({"role": "assistant", "content": ""})
        };
        frames.push(self.chunk(Some(role), None, &null));
        for piece in grouped_pieces(&self.reasoning, config.piece_per_delta) {
            let delta = json!({"content": null, "reasoning_content": piece});
            frames.push(self.chunk(Some(delta), None, &null));
        }
        for piece in grouped_pieces(&self.content, config.piece_per_delta) {
            let delta = json!({"content": piece, "reasoning_content": null});
            frames.push(self.chunk(Some(delta), None, &null));
        }
        for (index, call) in self.tool_calls.iter().enumerate() {
            let header = json!({"tool_calls": [{
                "index": index,
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": ""},
            }]});
            frames.push(self.chunk(Some(header), None, &null));
            for fragment in fragments(&call.arguments, config.arg_fragment_bytes) {
                let delta =
                    json!({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]});
                frames.push(self.chunk(Some(delta), None, &null));
            }
        }
        let send_usage = include_usage || config.usage_without_include_usage;
        let final_delta = json!({"content": "", "reasoning_content": null});
        match config.usage_placement {
            UsagePlacement::FinishChunk => {
                let usage = if send_usage { &self.usage } else { &null };
                frames.push(self.chunk(Some(final_delta), Some(&self.finish_reason), usage));
            }
            UsagePlacement::SeparateChunk => {
                frames.push(self.chunk(Some(final_delta), Some(&self.finish_reason), &null));
                if send_usage {
                    frames.push(self.chunk(None, None, &self.usage));
                }
            }
        }
        frames
    }

    /// The non-streaming `chat.completion` body.
    pub fn completion_body(&self) -> String {
        let mut message = serde_json::Map::new();
        message.insert("role".to_owned(), json!("assistant"));
        message.insert("content".to_owned(), json!(self.content));
        if self.thinking {
            message.insert("reasoning_content".to_owned(), json!(self.reasoning));
        }
        if !self.tool_calls.is_empty() {
            let calls: Vec<Value> = self
                .tool_calls
                .iter()
                .map(|call| {
                    json!({
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments},
                    })
                })
                .collect();
            message.insert("tool_calls".to_owned(), Value::Array(calls));
        }
        #[derive(Serialize)]
        struct Completion<'a> {
            id: &'a str,
            object: &'static str,
            created: u64,
            model: &'a str,
            system_fingerprint: &'static str,
            choices: Vec<Value>,
            usage: &'a Value,
        }
        let body = Completion {
            id: &self.id,
            object: "chat.completion",
            created: self.created,
            model: &self.model,
            system_fingerprint: "fp_fake",
            choices: vec![json!({
                "index": 0,
                "message": Value::Object(message),
                "finish_reason": self.finish_reason,
                "logprobs": null,
            })],
            usage: &self.usage,
        };
        serde_json::to_string(&body).unwrap_or_default()
    }
}

/// Tokenizer pieces of `text`, `per_delta` at a time.
fn grouped_pieces(text: &str, per_delta: usize) -> Vec<String> {
    tokenizer::pieces(text).chunks(per_delta.max(1)).map(|group| group.concat()).collect()
}

/// Cuts `text` into fragments of at most `max_bytes` bytes on character boundaries (a single
/// wider character makes its own fragment).
pub(crate) fn fragments(text: &str, max_bytes: usize) -> Vec<&str> {
    let max_bytes = max_bytes.max(1);
    let mut out = Vec::new();
    let mut start = 0;
    for (offset, character) in text.char_indices() {
        if offset > start && offset + character.len_utf8() - start > max_bytes {
            out.push(&text[start..offset]);
            start = offset;
        }
    }
    if start < text.len() {
        out.push(&text[start..]);
    }
    out
}

/// Keeps at most `budget` tokenizer pieces of `text`; returns the kept text and pieces used.
pub(crate) fn truncate_pieces(text: &str, budget: u64) -> (String, u64) {
    let pieces = tokenizer::pieces(text);
    let kept = pieces.len().min(usize::try_from(budget).unwrap_or(usize::MAX));
    (pieces[..kept].concat(), kept as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fragments_respect_the_byte_limit_and_character_boundaries() {
        let text = "{\"k\":\"héllo wörld ✓✓\"}";
        let cut = fragments(text, 4);
        assert_eq!(cut.concat(), text);
        for fragment in &cut {
            assert!(fragment.len() <= 4, "{fragment:?}");
        }
        assert_eq!(fragments("", 8), Vec::<&str>::new());
        assert_eq!(fragments("😀a", 2), ["😀", "a"]);
    }
}
