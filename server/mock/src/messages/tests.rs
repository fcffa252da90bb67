//! Tests of the Messages surface: translation (raw tool input, merged text), breakpoint
//! positions, and the event frames.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};

use super::{Flavor, MessagesUsage, frames, parse, signature};
use crate::knobs::{MockConfig, StreamConfig};
use crate::request::Role;
use crate::response::{OutCall, Output};

fn body(messages: Value, marked: bool) -> Vec<u8> {
    let cache = if marked { json!({"type": "ephemeral"}) } else { Value::Null };
    let mut tool =
        json!({"name": "read", "description": "Read.", "input_schema": {"type": "object"}});
    if marked {
        tool["cache_control"] = cache.clone();
    }
    json!({"model": "deepseek-v4-flash", "max_tokens": 100,
        "system": [{"type": "text", "text": "You are a test.", "cache_control": cache}],
        "messages": messages, "tools": [tool]})
    .to_string()
    .into_bytes()
}

#[test]
fn tool_input_is_kept_as_sent_and_turns_become_chat_messages() {
    // Whitespace inside the input survives: the mock renders what the client sent.
    let text = r#"{"model":"deepseek-v4-flash","max_tokens":100,"messages":[
        {"role":"user","content":"q"},
        {"role":"assistant","content":[{"type":"text","text":"ok"},{"type":"tool_use","id":"t1","name":"read","input":{"path" : "a.rs"}}]},
        {"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"body"}]},{"type":"text","text":"more"}]}]}"#;
    let parsed = parse(text.as_bytes(), &MockConfig::default(), Flavor::Anthropic).unwrap();
    let roles: Vec<Role> = parsed.chat.messages.iter().map(|message| message.role).collect();
    assert_eq!(roles, [Role::User, Role::Assistant, Role::Tool, Role::User]);
    assert_eq!(parsed.chat.messages[1].tool_calls[0].arguments, r#"{"path" : "a.rs"}"#);
    assert_eq!(parsed.chat.messages[2].text(), "body");
    assert!(parsed.breakpoints.is_empty());
}

#[test]
fn breakpoints_are_token_positions_in_order_and_deepseek_ignores_them() {
    let messages = json!([
        {"role": "user", "content": [{"type": "text", "text": "first question", "cache_control": {"type": "ephemeral"}}]},
        {"role": "assistant", "content": "an answer"},
        {"role": "user", "content": [{"type": "text", "text": "second", "cache_control": {"type": "ephemeral"}}]},
    ]);
    let config = MockConfig::default();
    let parsed = parse(&body(messages.clone(), true), &config, Flavor::Anthropic).unwrap();
    assert_eq!(parsed.breakpoints.len(), 3, "{:?}", parsed.breakpoints);
    assert!(parsed.breakpoints.windows(2).all(|pair| pair[0] < pair[1]));
    let whole = crate::tokenizer::tokenize(&crate::render::render(&parsed.chat)).len() as u64;
    assert!(*parsed.breakpoints.last().unwrap() < whole, "the answer markers are not cached");
    let deepseek = parse(&body(messages, true), &config, Flavor::DeepSeek).unwrap();
    assert!(deepseek.breakpoints.is_empty());

    let five = json!([{"role": "user", "content": [
        {"type": "text", "text": "a", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "b", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "c", "cache_control": {"type": "ephemeral"}}]}]);
    let error = parse(&body(five, true), &config, Flavor::Anthropic).unwrap_err();
    assert_eq!(error.message, "A maximum of 4 blocks with cache_control may be provided. Found 5.");
}

#[test]
fn frames_stream_signed_thinking_then_text_then_input_split_mid_token() {
    let output = Output {
        id: "abc".to_owned(),
        created: 0,
        model: "m".to_owned(),
        thinking: true,
        reasoning: "Hmm.".to_owned(),
        content: "Hi".to_owned(),
        tool_calls: vec![OutCall {
            id: "toolu_00_x".to_owned(),
            name: "read".to_owned(),
            arguments: r#"{"path":"src/a.rs"}"#.to_owned(),
        }],
        finish_reason: "tool_calls".to_owned(),
        usage: Value::Null,
    };
    let usage = MessagesUsage { input: 5, cache_creation: 7, cache_read: 11, output: 13 };
    let config = StreamConfig { arg_fragment_bytes: 8, ..StreamConfig::default() };
    let frames = frames(&output, usage, Flavor::Anthropic, &config);
    let names: Vec<&str> = frames.iter().map(|(name, _)| *name).collect();
    assert_eq!(&names[..3], ["message_start", "ping", "content_block_start"]);
    assert_eq!(&names[names.len() - 2..], ["message_delta", "message_stop"]);
    let deltas: Vec<Value> = frames
        .iter()
        .filter(|(name, _)| *name == "content_block_delta")
        .map(|(_, json)| serde_json::from_str::<Value>(json).unwrap()["delta"].clone())
        .collect();
    let signed = deltas.iter().find(|delta| delta["type"] == "signature_delta").unwrap();
    assert_eq!(signed["signature"], signature("Hmm."));
    let pieces: Vec<&str> = deltas
        .iter()
        .filter(|delta| delta["type"] == "input_json_delta")
        .map(|delta| delta["partial_json"].as_str().unwrap())
        .collect();
    assert_eq!(pieces, ["", "{\"path\":", "\"src/a.r", "s\"}"]);
    let end: Value = serde_json::from_str(&frames[frames.len() - 2].1).unwrap();
    assert_eq!(end["delta"]["stop_reason"], "tool_use");
    assert_eq!(
        end["usage"],
        json!({"input_tokens": 5, "cache_creation_input_tokens": 7, "cache_read_input_tokens": 11, "output_tokens": 13})
    );
}
