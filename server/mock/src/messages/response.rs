//! The answer in the Messages shape: the usage of each flavor, the stop reason, the events of a
//! streamed answer, the non-streaming `message` body, and error bodies.

use serde_json::{Value, json};

use super::{Flavor, signature};
use crate::error::ApiError;
use crate::knobs::StreamConfig;
use crate::response::{Output, fragments};
use crate::tokenizer;

/// The Messages usage of one answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct MessagesUsage {
    pub input: u64,
    pub cache_creation: u64,
    pub cache_read: u64,
    pub output: u64,
}

impl MessagesUsage {
    fn to_value(self, flavor: Flavor) -> Value {
        match flavor {
            Flavor::Anthropic => json!({
                "input_tokens": self.input,
                "cache_creation_input_tokens": self.cache_creation,
                "cache_read_input_tokens": self.cache_read,
                "output_tokens": self.output,
            }),
            // DeepSeek reports what it reads; it never writes on request.
            Flavor::DeepSeek => json!({
                "input_tokens": self.input,
                "cache_read_input_tokens": self.cache_read,
                "output_tokens": self.output,
            }),
        }
    }
}

/// The Messages stop reason of a chat finish reason.
fn stop_reason(finish: &str) -> &str {
    match finish {
        "tool_calls" => "tool_use",
        "length" => "max_tokens",
        "content_filter" => "refusal",
        "stop" => "end_turn",
        other => other,
    }
}

/// The events of a streamed answer, `(name, json)`, `message_stop` last. An
/// `insufficient_system_resource` finish becomes an `overloaded_error` event instead of the
/// message's end.
pub(crate) fn frames(
    output: &Output,
    usage: MessagesUsage,
    flavor: Flavor,
    config: &StreamConfig,
) -> Vec<(&'static str, String)> {
    let mut frames = Vec::new();
    let mut start_usage = usage;
    start_usage.output = 1;
    frames.push((
        "message_start",
        json!({"type": "message_start", "message": {
            "id": format!("msg_{}", output.id),
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": output.model,
            "stop_reason": null,
            "stop_sequence": null,
            "usage": start_usage.to_value(flavor),
        }})
        .to_string(),
    ));
    frames.push(("ping", json!({"type": "ping"}).to_string()));
    let mut index = 0;
    let mut block = |frames: &mut Vec<(&'static str, String)>, start: Value, deltas: Vec<Value>| {
        frames.push((
            "content_block_start",
            json!({"type": "content_block_start", "index": index, "content_block": start})
                .to_string(),
        ));
        for delta in deltas {
            frames.push((
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index, "delta": delta}).to_string(),
            ));
        }
        frames.push((
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}).to_string(),
        ));
        index += 1;
    };
    let pieces = |text: &str| -> Vec<String> {
        tokenizer::pieces(text)
            .chunks(config.piece_per_delta.max(1))
            .map(|group| group.concat())
            .collect()
    };
    if output.thinking {
        let mut deltas: Vec<Value> = pieces(&output.reasoning)
            .into_iter()
            .map(|piece| json!({"type": "thinking_delta", "thinking": piece}))
            .collect();
        deltas.push(json!({"type": "signature_delta", "signature": signature(&output.reasoning)}));
        block(&mut frames, json!({"type": "thinking", "thinking": "", "signature": ""}), deltas);
    }
    if !output.content.is_empty() {
        let deltas = pieces(&output.content)
            .into_iter()
            .map(|piece| json!({"type": "text_delta", "text": piece}))
            .collect();
        block(&mut frames, json!({"type": "text", "text": ""}), deltas);
    }
    for call in &output.tool_calls {
        let mut deltas = vec![json!({"type": "input_json_delta", "partial_json": ""})];
        deltas.extend(
            fragments(&call.arguments, config.arg_fragment_bytes)
                .into_iter()
                .map(|fragment| json!({"type": "input_json_delta", "partial_json": fragment})),
        );
        let start = json!({"type": "tool_use", "id": call.id, "name": call.name, "input": {}});
        block(&mut frames, start, deltas);
    }
    if output.finish_reason == "insufficient_system_resource" {
        frames.push((
            "error",
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
                .to_string(),
        ));
        return frames;
    }
    frames.push((
        "message_delta",
        json!({"type": "message_delta",
            "delta": {"stop_reason": stop_reason(&output.finish_reason), "stop_sequence": null},
            "usage": usage.to_value(flavor)})
        .to_string(),
    ));
    frames.push(("message_stop", json!({"type": "message_stop"}).to_string()));
    frames
}

/// The non-streaming `message` body.
pub(crate) fn message_body(output: &Output, usage: MessagesUsage, flavor: Flavor) -> String {
    let mut content = Vec::new();
    if output.thinking {
        content.push(json!({"type": "thinking", "thinking": output.reasoning, "signature": signature(&output.reasoning)}));
    }
    if !output.content.is_empty() {
        content.push(json!({"type": "text", "text": output.content}));
    }
    for call in &output.tool_calls {
        let input: Value = serde_json::from_str(&call.arguments).unwrap_or_else(|_| json!({}));
        content.push(json!({"type": "tool_use", "id": call.id, "name": call.name, "input": input}));
    }
    json!({
        "id": format!("msg_{}", output.id),
        "type": "message",
        "role": "assistant",
        "model": output.model,
        "content": content,
        "stop_reason": stop_reason(&output.finish_reason),
        "stop_sequence": null,
        "usage": usage.to_value(flavor),
    })
    .to_string()
}

/// An error as the Messages API answers it: `{"type":"error","error":{"type","message"}}`.
pub(crate) fn error_body(error: &ApiError) -> Value {
    let kind = match (error.status, error.kind.as_str()) {
        (
            _,
            kind @ ("invalid_request_error"
            | "authentication_error"
            | "permission_error"
            | "not_found_error"
            | "request_too_large"
            | "rate_limit_error"
            | "api_error"
            | "overloaded_error"
            | "billing_error"),
        ) => kind.to_owned(),
        (400 | 422, _) => "invalid_request_error".to_owned(),
        (401, _) => "authentication_error".to_owned(),
        (402, _) => "billing_error".to_owned(),
        (403, _) => "permission_error".to_owned(),
        (404, _) => "not_found_error".to_owned(),
        (413, _) => "request_too_large".to_owned(),
        (429, _) => "rate_limit_error".to_owned(),
        (529, _) => "overloaded_error".to_owned(),
        _ => "api_error".to_owned(),
    };
    json!({"type": "error", "error": {"type": kind, "message": error.message}})
}
