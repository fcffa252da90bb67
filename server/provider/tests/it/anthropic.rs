//! The Anthropic Messages adapter over real HTTP against the mock's two Messages endpoints
//! (`/v1/messages`, Anthropic's rules; `/anthropic/v1/messages`, DeepSeek's), and against the
//! real API when `ANTHROPIC_API_KEY` is set.

use std::sync::Arc;

use dsh_mock::{MockConfig, MockServer};
use dsh_provider::{ApiKey, DeepSeek, DeepSeekConfig, ProviderError, check_request, wire_body};
use dsh_session::{ContentBlock, LlmCallConfig, Message, ProviderKind, WireFormat};
use serde_json::{Value, json};

use crate::support::{body, collect, request, test_config, tool, user};

const MODEL: &str = "deepseek-v4-flash";

fn anthropic_config(thinking: bool, cache_control: bool) -> LlmCallConfig {
    LlmCallConfig {
        model: MODEL.to_owned(),
        profile: Some("claude".to_owned()),
        wire: Some(WireFormat {
            kind: ProviderKind::Anthropic,
            no_cache_control: !cache_control,
            ..WireFormat::default()
        }),
        max_tokens: 8192,
        thinking,
        reasoning_effort: None,
        temperature: None,
        top_p: None,
        response_format: None,
    }
}

async fn mock() -> MockServer {
    let _ = rustls::crypto::ring::default_provider().install_default();
    MockServer::start(MockConfig::default()).await.unwrap()
}

fn messages_client(base_url: &str) -> DeepSeek {
    let mut config = test_config(base_url, "sk-test");
    config.kind = ProviderKind::Anthropic;
    DeepSeek::new(config).unwrap()
}

async fn control(server: &MockServer, path: &str, value: Value) {
    let response = reqwest::Client::new()
        .post(format!("{}{path}", server.base_url()))
        .body(value.to_string())
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success());
}

#[tokio::test]
async fn a_thinking_tool_turn_round_trips_byte_exact_and_the_second_request_reads_the_cache() {
    let server = mock().await;
    control(
        &server,
        "/_fake/script",
        json!([{"reasoning": "I should read the file first.", "content": "Reading.",
                "tool_calls": [{"name": "read", "arguments": "{\"path\": \"src/main.rs\"}"}]},
               {"reasoning": "Done.", "content": "It prints hello."}]),
    )
    .await;
    let client = messages_client(&server.base_url());
    let first =
        request(anthropic_config(true, true), vec![tool("read")], vec![user("what does main do?")]);
    assert_eq!(check_request(&first), Ok(()));
    let outcome = collect(&client, body(&first)).await;
    let (reason, usage) = outcome.expect_success();
    assert_eq!(reason, "tool_use");
    let message = outcome.message();
    assert_eq!(message.reasoning_content.as_deref(), Some("I should read the file first."));
    let signed = match message.blocks.first() {
        Some(ContentBlock::Thinking { bytes, signature }) => {
            *bytes == 29 && signature.starts_with("mock-sig-")
        }
        _ => false,
    };
    assert!(signed, "{:?}", message.blocks);
    assert_eq!(message.tool_calls.len(), 1);
    assert_eq!(message.tool_calls[0].arguments, "{\"path\": \"src/main.rs\"}");
    assert!(message.tool_calls[0].id.starts_with("toolu_"));
    // Breakpoints on the tools, the system prompt and the user turn: all of it is written.
    assert_eq!(usage.cache_hit_tokens, 0);
    assert!(usage.cache_write_tokens > 0, "{usage:?}");
    assert_eq!(usage.prompt_tokens, usage.cache_hit_tokens + usage.cache_miss_tokens);

    let call_id = message.tool_calls[0].id.clone();
    let mut messages = first.messages.clone();
    messages.push(Arc::new(Message::Assistant(message)));
    messages.push(Arc::new(Message::tool(call_id, "fn main() { hello() }")));
    let second = request(anthropic_config(true, true), vec![tool("read")], messages);
    assert_eq!(check_request(&second), Ok(()));
    let outcome = collect(&client, body(&second)).await;
    let (reason, second_usage) = outcome.expect_success();
    assert_eq!(reason, "end_turn");
    assert_eq!(outcome.message().content, "It prints hello.");
    // The first request's last breakpoint is read back; the new tail is written.
    assert_eq!(second_usage.cache_hit_tokens, usage.cache_write_tokens, "{second_usage:?}");
    assert!(second_usage.cache_write_tokens > 0);

    let records = server.requests();
    assert_eq!(records.len(), 2);
    assert_eq!(records[0].body, wire_body(&first));
    assert_eq!(records[1].body, wire_body(&second));
    assert_eq!(records[1].path, "/v1/messages");
    let version = records[1].headers.iter().find(|(name, _)| name == "anthropic-version");
    assert_eq!(version.map(|(_, value)| value.as_str()), Some("2023-06-01"));
    let key = records[1].headers.iter().find(|(name, _)| name == "x-api-key");
    assert_eq!(key.map(|(_, value)| value.as_str()), Some("****test"), "the key is redacted");
    server.shutdown().await;
}

#[tokio::test]
async fn adaptive_thinking_streams_signed_thinking_from_the_mock() {
    let server = mock().await;
    control(&server, "/_fake/script", json!([{"reasoning": "Short.", "content": "Hi."}])).await;
    let mut config = anthropic_config(true, true);
    config.wire.as_mut().unwrap().adaptive_thinking = true;
    let request = request(config, vec![], vec![user("hello")]);
    let outcome = collect(&messages_client(&server.base_url()), body(&request)).await;
    outcome.expect_success();
    let message = outcome.message();
    assert_eq!(message.reasoning_content.as_deref(), Some("Short."));
    assert!(matches!(message.blocks.first(), Some(ContentBlock::Thinking { bytes: 6, .. })));
    let recorded = String::from_utf8(server.requests()[0].body.clone()).unwrap();
    assert!(recorded.contains(r#""thinking":{"type":"adaptive"}"#), "{recorded}");
    server.shutdown().await;
}

#[tokio::test]
async fn deepseek_s_endpoint_caches_by_prefix_without_markers() {
    let server = mock().await;
    let client = messages_client(&format!("{}/anthropic", server.base_url()));
    let long: String = (0..60).map(|i| format!("line {i} of a long prompt. ")).collect();
    let first = request(anthropic_config(false, false), vec![tool("read")], vec![user(&long)]);
    assert!(!String::from_utf8(wire_body(&first)).unwrap().contains("cache_control"));
    let outcome = collect(&client, body(&first)).await;
    let (_, usage) = outcome.expect_success();
    assert_eq!((usage.cache_hit_tokens, usage.cache_write_tokens), (0, 0));
    let mut messages = first.messages.clone();
    messages.push(Arc::new(Message::Assistant(outcome.message())));
    messages.push(user("and then?"));
    let second = request(anthropic_config(false, false), vec![tool("read")], messages);
    let (_, usage) = collect(&client, body(&second)).await.expect_success();
    assert!(usage.cache_hit_tokens > 0, "{usage:?}");
    assert_eq!(usage.cache_write_tokens, 0);
    assert_eq!(server.requests()[1].path, "/anthropic/v1/messages");
    server.shutdown().await;
}

#[tokio::test]
async fn errors_are_typed_and_retried_only_where_a_retry_can_help() {
    let server = mock().await;
    let request = request(anthropic_config(false, true), vec![], vec![user("hi")]);

    // A bad key: 401, Anthropic's message, never retried.
    let mut config = test_config(&server.base_url(), "sk-wrong");
    config.kind = ProviderKind::Anthropic;
    let outcome = collect(&DeepSeek::new(config).unwrap(), body(&request)).await;
    assert_eq!(
        outcome.expect_error(),
        &ProviderError::Http { status: 401, message: "invalid x-api-key".to_owned() }
    );
    assert!(outcome.retries().is_empty());

    // An overload before streaming: retried with the same bytes, then it answers.
    let client = messages_client(&server.base_url());
    control(&server, "/_fake/fault", json!({"http": {"status": 529, "message": "Overloaded"}}))
        .await;
    let outcome = collect(&client, body(&request)).await;
    outcome.expect_success();
    assert_eq!(outcome.retries(), vec![1]);
    let records = server.requests();
    let last_two = &records[records.len() - 2..];
    assert_eq!(last_two[0].status, 529);
    assert_eq!(last_two[0].body, last_two[1].body);

    // An overload mid-stream, after text went out: the call ends, typed, without a retry.
    control(&server, "/_fake/fault", json!({"finish_reason": "insufficient_system_resource"}))
        .await;
    let outcome = collect(&client, body(&request)).await;
    assert!(outcome.deltas() > 0);
    assert_eq!(
        outcome.expect_error(),
        &ProviderError::StreamError {
            error_type: "overloaded_error".to_owned(),
            message: "Overloaded".to_owned()
        }
    );
    assert!(outcome.retries().is_empty());

    // A connection cut before any delta is retried; after one, it ends the call.
    control(&server, "/_fake/fault", json!({"drop_after_frames": 3})).await;
    let outcome = collect(&client, body(&request)).await;
    outcome.expect_success();
    assert_eq!(outcome.retries(), vec![1]);
    control(&server, "/_fake/fault", json!({"drop_after_frames": 5})).await;
    let outcome = collect(&client, body(&request)).await;
    assert!(outcome.deltas() > 0);
    assert!(matches!(outcome.expect_error(), ProviderError::StreamCut(_)));
    assert!(outcome.retries().is_empty());
    server.shutdown().await;
}

#[tokio::test]
async fn the_mock_rejects_what_the_format_rejects_with_anthropic_errors() {
    let server = mock().await;
    let http = reqwest::Client::new();
    let post = |body: Value, version: bool| {
        let mut builder = http
            .post(format!("{}/v1/messages", server.base_url()))
            .header("x-api-key", "sk-test")
            .body(body.to_string());
        if version {
            builder = builder.header("anthropic-version", "2023-06-01");
        }
        builder.send()
    };
    let base = |messages: Value| json!({"model": MODEL, "max_tokens": 64, "messages": messages});
    let cases = [
        (
            base(json!([{"role": "user", "content": "hi"}])),
            false,
            "anthropic-version: header is required",
        ),
        (
            base(
                json!([{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "x"}]}]),
            ),
            true,
            "unexpected `tool_use_id` found in `tool_result` blocks: t1",
        ),
        (
            base(json!([{"role": "user", "content": [{"type": "text", "text": ""}]}])),
            true,
            "text content blocks must contain non-whitespace text",
        ),
        (
            base(json!([{"role": "user", "content": [{"type": "text", "text": "\n\n"}]}])),
            true,
            "text content blocks must contain non-whitespace text",
        ),
        (
            json!({"model": MODEL, "max_tokens": 4096, "thinking": {"type": "enabled", "budget_tokens": 1024}, "messages": [
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": "forged"},
                    {"type": "tool_use", "id": "t1", "name": "read", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "x"}]}]}),
            true,
            "Invalid `signature` in `thinking` block",
        ),
        (
            json!({"model": MODEL, "max_tokens": 4096, "thinking": {"type": "enabled", "budget_tokens": 1024}, "messages": [
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "read", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "x"}]}]}),
            true,
            "Expected `thinking` or `redacted_thinking`, but found `tool_use`",
        ),
        (
            base(json!([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])),
            true,
            "roles must alternate",
        ),
    ];
    for (body, version, want) in cases {
        let response = post(body, version).await.unwrap();
        assert_eq!(response.status(), 400);
        let error: Value = response.json().await.unwrap();
        assert_eq!(error["type"], "error");
        assert_eq!(error["error"]["type"], "invalid_request_error");
        let message = error["error"]["message"].as_str().unwrap();
        assert!(message.contains(want), "{message}\n  wanted {want}");
    }
    server.shutdown().await;
}

/// The real API; runs only when `ANTHROPIC_API_KEY` is set (`ANTHROPIC_MODEL`, default
/// `claude-haiku-4-5`; `ANTHROPIC_BASE_URL`, default `https://api.anthropic.com`).
#[tokio::test]
async fn the_real_api_answers_a_tool_turn_with_thinking_and_reads_its_cache() {
    let Some(key) = std::env::var("ANTHROPIC_API_KEY").ok().filter(|key| !key.trim().is_empty())
    else {
        println!("skipped: ANTHROPIC_API_KEY not set");
        return;
    };
    let base_url = std::env::var("ANTHROPIC_BASE_URL")
        .unwrap_or_else(|_| "https://api.anthropic.com".to_owned());
    let mut config = DeepSeekConfig::new(base_url, ApiKey::new(key).unwrap());
    config.kind = ProviderKind::Anthropic;
    let client = DeepSeek::new(config).unwrap();
    let mut call = anthropic_config(true, true);
    call.model = std::env::var("ANTHROPIC_MODEL").unwrap_or_else(|_| "claude-haiku-4-5".to_owned());
    call.max_tokens = 4096;
    call.wire.as_mut().unwrap().thinking_budget = Some(1024);
    // Over the smallest cacheable prefix of every model (4,096 tokens).
    let long: String = (0..900).map(|i| format!("Fact {i}: {i} squared is {}. ", i * i)).collect();
    let first = request(
        call.clone(),
        vec![tool("read")],
        vec![user(&format!("{long}\nCall the read tool once with path \"README.md\"."))],
    );
    let outcome = collect(&client, body(&first)).await;
    let (reason, usage) = outcome.expect_success();
    println!("first: {reason} {usage:?}");
    let message = outcome.message();
    let Some(call_id) = message.tool_calls.first().map(|call| call.id.clone()) else {
        println!("the model answered without a tool call: {message:?}");
        return;
    };
    let mut messages = first.messages.clone();
    messages.push(Arc::new(Message::Assistant(message)));
    messages.push(Arc::new(Message::tool(call_id, "# dsh\nA daemon.")));
    let second = request(call, vec![tool("read")], messages);
    assert_eq!(check_request(&second), Ok(()));
    let (_, usage) = collect(&client, body(&second)).await.expect_success();
    println!("second: {usage:?}");
    assert!(usage.cache_hit_tokens > 0, "the second request read nothing from the cache");
}
