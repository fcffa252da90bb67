//! Unit tests of the V4-like rendering.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;
use crate::knobs::MockConfig;
use crate::request::{ToolCall, parse};
use crate::tokenizer::tokenize;

fn rendered(body: &Value) -> String {
    let request =
        parse(body.to_string().as_bytes(), &MockConfig::default()).expect("valid request");
    render(&request).iter().map(ToString::to_string).collect::<Vec<_>>().join("|")
}

#[test]
fn tools_follow_the_system_text_and_assistant_turns_render_verbatim() {
    let body = json!({
        "model": "deepseek-v4-flash",
        "tools": [{"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}}],
        "messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "", "reasoning_content": "r",
             "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{\"p\": 1}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "out"},
            {"role": "user", "content": "more"},
        ],
    });
    assert_eq!(
        rendered(&body),
        format!(
            "⟦BOS⟧|sys|{TOOLS_HEADER}|{{\"name\":\"read\",\"parameters\":{{\"type\":\"object\"}}}}\n\
             |⟦USER⟧|hi|⟦ASSISTANT⟧|⟦THINK⟧|r|⟦/THINK⟧||⟦TOOL_CALL⟧|read\n{{\"p\": 1}}|⟦EOS⟧\
             |⟦USER⟧|<tool_result>out</tool_result>|\n\n|more|⟦ASSISTANT⟧|⟦THINK⟧"
        )
    );
}

#[test]
fn tool_schemas_keep_received_key_order_and_lose_whitespace() {
    let body = br#"{"model":"deepseek-v4-flash","thinking":{"type":"disabled"},
        "tools":[{"type":"function","function":{ "name" : "z_tool", "parameters" : {"zeta": 1, "alpha": "a b"}, "description": "d"}}],
        "messages":[{"role":"user","content":"x"}]}"#;
    let request = parse(body, &MockConfig::default()).expect("valid request");
    assert_eq!(
        request.tools[0].function_json,
        r#"{"name":"z_tool","parameters":{"zeta":1,"alpha":"a b"},"description":"d"}"#
    );
    let segments = render(&request);
    assert_eq!(segments[1], Segment::Text(String::new()), "synthetic empty system segment");
}

#[test]
fn toolless_thinking_drops_reasoning_before_the_last_user_turn() {
    let body = json!({
        "model": "deepseek-v4-flash",
        "messages": [
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": "b", "reasoning_content": "secret"},
            {"role": "user", "content": "c"},
        ],
    });
    assert_eq!(
        rendered(&body),
        "⟦BOS⟧|⟦USER⟧|a|⟦ASSISTANT⟧|⟦/THINK⟧|⟦/THINK⟧|b|⟦EOS⟧|⟦USER⟧|c|⟦ASSISTANT⟧|⟦THINK⟧"
    );
}

#[test]
fn max_effort_adds_a_preamble_at_token_zero() {
    let body = json!({"model": "deepseek-v4-flash", "reasoning_effort": "xhigh",
        "messages": [{"role": "user", "content": "a"}]});
    assert!(rendered(&body).starts_with(&format!("⟦BOS⟧|{EFFORT_PREAMBLE}|")));
}

/// One generated step: the input messages, then the assistant's answer.
#[derive(Debug, Clone)]
struct Step {
    user: String,
    reasoning: String,
    content: String,
    calls: Vec<String>,
}

fn step() -> impl Strategy<Value = Step> {
    let text = "[a-z 你好,.!\\n{}\"]{0,16}";
    (text, text, text, proptest::collection::vec(text, 0..3))
        .prop_map(|(user, reasoning, content, calls)| Step { user, reasoning, content, calls })
}

proptest! {
    /// Replaying each answer faithfully makes every rendering an append-extension of the previous
    /// rendering followed by the previous answer's `render_output`.
    #[test]
    fn appending_messages_never_changes_the_earlier_token_prefix(
        steps in proptest::collection::vec(step(), 1..5),
        thinking_with_tools in any::<bool>(),
    ) {
        let mut messages = vec![json!({"role": "system", "content": "be brief"})];
        let mut pending_calls: Vec<String> = Vec::new();
        let mut previous: Option<Vec<crate::tokenizer::Token>> = None;
        for (number, step) in steps.iter().enumerate() {
            for id in pending_calls.drain(..) {
                messages.push(json!({"role": "tool", "tool_call_id": id, "content": step.user}));
            }
            messages.push(json!({"role": "user", "content": step.user}));
            let mut body = json!({"model": "deepseek-v4-flash", "messages": messages});
            if thinking_with_tools {
                body["tools"] = json!([{"type": "function", "function": {"name": "t", "parameters": {}}}]);
            } else {
                body["thinking"] = json!({"type": "disabled"});
            }
            let request = parse(body.to_string().as_bytes(), &MockConfig::default()).expect("valid");
            let prompt = tokenize(&render(&request));
            if let Some(previous) = &previous {
                prop_assert!(prompt.starts_with(previous), "step {number} broke the prefix");
            }
            let calls: Vec<ToolCall> = step.calls.iter().enumerate().map(|(index, arguments)| ToolCall {
                id: format!("call_{number}_{index}"),
                name: "t".to_owned(),
                arguments: arguments.clone(),
            }).collect();
            let answer = Message {
                role: Role::Assistant,
                content: Some(step.content.clone()),
                reasoning_content: Some(step.reasoning.clone()),
                tool_calls: calls.clone(),
                tool_call_id: None,
                images: Vec::new(),
            };
            let mut output = Vec::new();
            push_assistant(&answer, request.thinking, request.thinking && request.has_tools(), &mut output);
            let mut completed = prompt.clone();
            completed.extend(tokenize(&output));
            previous = Some(completed);
            let wire_calls: Vec<Value> = calls.iter().map(|call| json!({
                "id": call.id, "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            })).collect();
            let mut assistant = json!({"role": "assistant", "content": step.content,
                "reasoning_content": step.reasoning});
            if !wire_calls.is_empty() {
                assistant["tool_calls"] = Value::Array(wire_calls);
            }
            messages.push(assistant);
            pending_calls = calls.into_iter().map(|call| call.id).collect();
        }
    }
}
