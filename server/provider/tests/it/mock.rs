//! The adapter against the project's DeepSeek-compatible mock server (`dsh-mock`), over real
//! HTTP: events, usage, the exact recorded bytes, and every fault of docs/mock.md ("Faults").

use std::sync::Arc;
use std::time::Duration;

use dsh_mock::{MockConfig, MockServer, UsagePlacement};
use dsh_provider::{ProviderError, StreamEvent, TimeoutKind, wire_body};
use dsh_session::{ChunkDelta, GenerateRequest, Message};
use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::support::{body, call_config, client, collect, request, test_config, tool, user};

const MODEL: &str = "deepseek-v4-flash";

struct Mock {
    server: MockServer,
    http: reqwest::Client,
}

impl Mock {
    async fn start() -> Mock {
        Mock::with_config(MockConfig::default()).await
    }

    async fn with_config(config: MockConfig) -> Mock {
        // reqwest is built without a default TLS provider; building any client needs one.
        let _ = rustls::crypto::ring::default_provider().install_default();
        Mock { server: MockServer::start(config).await.unwrap(), http: reqwest::Client::new() }
    }

    async fn control(&self, path: &str, json: Value) {
        let response = self
            .http
            .post(format!("{}{path}", self.server.base_url()))
            .body(json.to_string())
            .header("content-type", "application/json")
            .send()
            .await
            .unwrap();
        assert!(response.status().is_success(), "{path}: {}", response.text().await.unwrap());
    }

    async fn script(&self, json: Value) {
        self.control("/_fake/script", json).await;
    }

    async fn fault(&self, json: Value) {
        self.control("/_fake/fault", json).await;
    }

    fn deepseek(&self) -> dsh_provider::DeepSeek {
        client(test_config(&self.server.base_url(), "sk-test"))
    }

    fn bodies(&self) -> Vec<Vec<u8>> {
        self.server.requests().into_iter().map(|record| record.body).collect()
    }
}

fn plain(text: &str) -> GenerateRequest {
    request(call_config(MODEL, false), vec![], vec![user(text)])
}

#[tokio::test]
async fn text_streams_into_text_deltas_and_the_recorded_body_is_byte_identical() {
    let mock = Mock::start().await;
    mock.script(json!([{"content": "Hello, wörld. 你好 🙂"}])).await;
    let request = plain("hi");
    let outcome = collect(&mock.deepseek(), body(&request)).await;
    let (reason, usage) = outcome.expect_success();
    assert_eq!(reason, "stop");
    let message = outcome.message();
    assert_eq!(message.content, "Hello, wörld. 你好 🙂");
    assert_eq!(message.reasoning_content, None);
    assert!(outcome.deltas() > 1, "content should arrive in several deltas");

    let records = mock.server.requests();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].body, wire_body(&request));
    assert_eq!(usage.prompt_tokens, records[0].prompt_tokens);
    assert_eq!(usage.cache_hit_tokens, records[0].hit);
    assert_eq!(usage.cache_miss_tokens, records[0].miss);
    assert_eq!(usage.completion_tokens, records[0].completion_tokens);
    mock.server.shutdown().await;
}

#[tokio::test]
async fn reasoning_streams_before_text_and_opens_with_an_empty_delta() {
    let mock = Mock::start().await;
    mock.script(json!([{"reasoning": "Let me think.", "content": "Answer."}])).await;
    let request = request(call_config(MODEL, true), vec![], vec![user("why?")]);
    let outcome = collect(&mock.deepseek(), body(&request)).await;
    let (_, usage) = outcome.expect_success();
    let first = outcome.events.first().unwrap();
    assert_eq!(first, &StreamEvent::Delta(ChunkDelta::Reasoning { text: String::new() }));
    let message = outcome.message();
    assert_eq!(message.reasoning_content.as_deref(), Some("Let me think."));
    assert_eq!(message.content, "Answer.");
    assert!(usage.reasoning_tokens > 0 && usage.reasoning_tokens < usage.completion_tokens);
    mock.server.shutdown().await;
}

#[tokio::test]
async fn parallel_tool_calls_assemble_verbatim_and_replay_hits_the_cache() {
    let mock = Mock::start().await;
    let first_args = r#"{"path": "src/ä.rs",  "line":1}"#;
    let second_args = r#"{"path":"b.rs"}"#;
    mock.script(json!([{
        "reasoning": "Two files.",
        "content": "Reading both.",
        "tool_calls": [
            {"name": "read_file", "arguments": first_args},
            {"name": "list_dir", "arguments": second_args},
        ],
    }]))
    .await;
    let tools = vec![tool("read_file"), tool("list_dir")];
    let first = request(call_config(MODEL, true), tools.clone(), vec![user("read two files")]);
    let deepseek = mock.deepseek();
    let outcome = collect(&deepseek, body(&first)).await;
    let (reason, _) = outcome.expect_success();
    assert_eq!(reason, "tool_calls");
    let message = outcome.message();
    let calls: Vec<(&str, &str)> = message
        .tool_calls
        .iter()
        .map(|call| (call.name.as_str(), call.arguments.as_str()))
        .collect();
    assert_eq!(calls, [("read_file", first_args), ("list_dir", second_args)]);
    assert!(message.tool_calls[0].id.starts_with("call_00_"), "{}", message.tool_calls[0].id);
    assert!(message.tool_calls[1].id.starts_with("call_01_"), "{}", message.tool_calls[1].id);

    // The next step replays the assistant turn as received plus the tool results: the mock's
    // strict passback and pairing checks accept it, and the prefix cache hits.
    let mut messages = first.messages.clone();
    messages.push(Arc::new(Message::Assistant(message.clone())));
    for call in &message.tool_calls {
        messages.push(Arc::new(Message::tool(call.id.clone(), String::new())));
    }
    let second =
        GenerateRequest { images: Default::default(), header: first.header.clone(), messages };
    let (_, usage) = collect(&deepseek, body(&second)).await.expect_success();
    assert!(usage.cache_hit_tokens > 0, "{usage:?}");
    assert_eq!(mock.bodies(), vec![wire_body(&first), wire_body(&second)]);
    mock.server.shutdown().await;
}

#[tokio::test]
async fn both_usage_placements_give_identical_usage() {
    let mut usages = Vec::new();
    for placement in [UsagePlacement::FinishChunk, UsagePlacement::SeparateChunk] {
        let mut config = MockConfig::default();
        config.stream.usage_placement = placement;
        let mock = Mock::with_config(config).await;
        mock.script(json!([{"reasoning": "hmm", "content": "same answer"}])).await;
        let request = request(call_config(MODEL, true), vec![], vec![user("same question")]);
        let (_, usage) = collect(&mock.deepseek(), body(&request)).await.expect_success();
        assert!(usage.prompt_tokens > 0 && usage.completion_tokens > 0, "{usage:?}");
        usages.push(usage);
        mock.server.shutdown().await;
    }
    assert_eq!(usages[0], usages[1]);
}

#[tokio::test]
async fn rate_limits_and_server_errors_are_retried_with_byte_identical_bodies() {
    for status in [429, 500, 503] {
        let mock = Mock::start().await;
        mock.fault(json!({"http": {"status": status}})).await;
        mock.script(json!([{"content": "after the retry"}])).await;
        let request = plain("retry me");
        let outcome = collect(&mock.deepseek(), body(&request)).await;
        outcome.expect_success();
        assert_eq!(outcome.retries(), vec![1], "status {status}");
        assert_eq!(outcome.message().content, "after the retry");
        let bodies = mock.bodies();
        assert_eq!(bodies, vec![wire_body(&request), wire_body(&request)], "status {status}");
        mock.server.shutdown().await;
    }
}

#[tokio::test]
async fn client_errors_are_surfaced_once_with_a_clear_key_free_message() {
    for status in [400, 401, 402, 422] {
        let mock = Mock::start().await;
        mock.fault(json!({"http": {"status": status}})).await;
        let outcome = collect(&mock.deepseek(), body(&plain("fail me"))).await;
        let error = outcome.expect_error();
        assert!(
            matches!(error, ProviderError::Http { status: got, .. } if *got == status),
            "{error:?}"
        );
        assert!(!error.is_retryable());
        assert!(outcome.retries().is_empty());
        let shown = error.to_string();
        assert!(shown.starts_with(&format!("the provider answered HTTP {status}: ")), "{shown}");
        assert!(
            shown.len() > "the provider answered HTTP 400: ".len() + 3,
            "empty message: {shown}"
        );
        assert!(!shown.contains("sk-test"), "{shown}");
        assert_eq!(mock.bodies().len(), 1, "status {status} was retried");
        mock.server.shutdown().await;
    }
}

#[tokio::test]
async fn a_wrong_key_gives_the_servers_masked_401_and_never_the_key() {
    let mock = Mock::start().await;
    let key = "sk-wrong-secret-abcd";
    let deepseek = client(test_config(&mock.server.base_url(), key));
    let outcome = collect(&deepseek, body(&plain("hi"))).await;
    let error = outcome.expect_error();
    let shown = format!("{error} | {error:?} | {deepseek:?}");
    assert!(shown.contains("****abcd"), "{shown}");
    assert!(!shown.contains("wrong-secret"), "{shown}");
    assert_eq!(mock.bodies().len(), 1);
    mock.server.shutdown().await;
}

#[tokio::test]
async fn an_unknown_model_is_a_400_naming_the_problem() {
    let mock = Mock::start().await;
    let request = request(call_config("no-such-model", false), vec![], vec![user("hi")]);
    let error = collect(&mock.deepseek(), body(&request)).await.expect_error().clone();
    assert_eq!(error, ProviderError::Http { status: 400, message: "Model Not Exist".to_owned() });
    mock.server.shutdown().await;
}

#[tokio::test]
async fn a_dropped_connection_after_deltas_is_stream_cut_and_not_retried() {
    // Paced frames: hyper discards bytes it has not flushed when the mock aborts the
    // connection, so without a pause the client might see the cut before any frame.
    let mut config = MockConfig::default();
    config.stream.inter_chunk_delay_ms = 20;
    let mock = Mock::with_config(config).await;
    mock.fault(json!({"drop_after_frames": 3})).await;
    mock.script(json!([{"content": "a fairly long answer that needs many frames"}])).await;
    let outcome = collect(&mock.deepseek(), body(&plain("hi"))).await;
    assert!(matches!(outcome.expect_error(), ProviderError::StreamCut(_)), "{:?}", outcome.error);
    assert!(outcome.deltas() > 0);
    assert!(outcome.retries().is_empty());
    assert_eq!(mock.bodies().len(), 1);
    mock.server.shutdown().await;
}

#[tokio::test]
async fn a_malformed_frame_is_a_decode_error() {
    let mock = Mock::start().await;
    mock.fault(json!({"malformed_frame_at": 3})).await;
    mock.script(json!([{"content": "a fairly long answer that needs many frames"}])).await;
    let outcome = collect(&mock.deepseek(), body(&plain("hi"))).await;
    assert!(matches!(outcome.expect_error(), ProviderError::Decode(_)), "{:?}", outcome.error);
    mock.server.shutdown().await;
}

#[tokio::test]
async fn a_stall_with_keep_alives_trips_the_data_timer() {
    let mock = Mock::start().await;
    mock.fault(json!({"stall_after_frames": 3, "keepalive_every_ms": 50, "for_ms": 5000})).await;
    mock.script(json!([{"content": "a fairly long answer that needs many frames"}])).await;
    let mut config = test_config(&mock.server.base_url(), "sk-test");
    config.data_timeout = Duration::from_millis(400);
    let started = Instant::now();
    let outcome = collect(&client(config), body(&plain("hi"))).await;
    let elapsed = started.elapsed();
    assert_eq!(
        outcome.expect_error(),
        &ProviderError::Timeout { kind: TimeoutKind::NoData, after: Duration::from_millis(400) }
    );
    assert!(elapsed < Duration::from_millis(2000), "took {elapsed:?}");
    mock.server.shutdown().await;
}

#[tokio::test]
async fn queue_keep_alives_past_the_data_timer_fail_the_attempt_and_it_is_retried() {
    let mock = Mock::start().await;
    mock.fault(json!({"queue_keepalive_ms": 3000})).await;
    // The first attempt consumes a script too.
    mock.script(json!([{"content": "eventually"}, {"content": "eventually"}])).await;
    let mut config = test_config(&mock.server.base_url(), "sk-test");
    config.data_timeout = Duration::from_millis(400);
    let outcome = collect(&client(config), body(&plain("hi"))).await;
    outcome.expect_success();
    assert_eq!(outcome.retries(), vec![1]);
    assert_eq!(outcome.message().content, "eventually");
    mock.server.shutdown().await;
}

#[tokio::test]
async fn short_queue_keep_alives_are_ignored() {
    let mock = Mock::start().await;
    mock.fault(json!({"queue_keepalive_ms": 300})).await;
    mock.script(json!([{"content": "after the queue"}])).await;
    let outcome = collect(&mock.deepseek(), body(&plain("hi"))).await;
    outcome.expect_success();
    assert!(outcome.retries().is_empty());
    assert_eq!(outcome.message().content, "after the queue");
    mock.server.shutdown().await;
}

#[tokio::test]
async fn error_class_finish_reasons_are_errors() {
    let mock = Mock::start().await;
    mock.fault(json!({"finish_reason": "insufficient_system_resource"})).await;
    mock.script(
        json!([{"content": "partial"}, {"content": "filtered", "finish_reason": "content_filter"}]),
    )
    .await;
    let deepseek = mock.deepseek();
    for reason in ["insufficient_system_resource", "content_filter"] {
        let outcome = collect(&deepseek, body(&plain("hi"))).await;
        assert_eq!(
            outcome.expect_error(),
            &ProviderError::FinishError { reason: reason.to_owned() }
        );
    }
    mock.server.shutdown().await;
}

#[tokio::test]
async fn length_is_a_normal_finish() {
    let mock = Mock::start().await;
    mock.script(json!([{"content": "cut short", "finish_reason": "length"}])).await;
    let (reason, _) = collect(&mock.deepseek(), body(&plain("hi"))).await.expect_success();
    assert_eq!(reason, "length");
    mock.server.shutdown().await;
}

#[tokio::test]
async fn split_utf8_and_crlf_streams_decode_like_a_plain_stream() {
    let content = "héllo 你好 🙂 — done";
    let reasoning = "ïnner 思考";
    let mut messages = Vec::new();
    for fault in [
        json!(null),
        json!({"split_utf8": true}),
        json!({"crlf": true}),
        json!({"split_utf8": true, "crlf": true}),
    ] {
        let mock = Mock::start().await;
        if !fault.is_null() {
            mock.fault(fault.clone()).await;
        }
        mock.script(json!([{"reasoning": reasoning, "content": content}])).await;
        let request = request(call_config(MODEL, true), vec![], vec![user("unicode please")]);
        let outcome = collect(&mock.deepseek(), body(&request)).await;
        let (_, usage) = outcome.expect_success();
        messages.push((outcome.message(), usage));
        mock.server.shutdown().await;
    }
    assert_eq!(messages[0].0.content, content);
    assert_eq!(messages[0].0.reasoning_content.as_deref(), Some(reasoning));
    for other in &messages[1..] {
        assert_eq!(other, &messages[0]);
    }
}

#[tokio::test]
async fn cancelling_mid_stream_returns_promptly_and_the_server_sees_the_client_leave() {
    let mut config = MockConfig::default();
    config.stream.inter_chunk_delay_ms = 50;
    let mock = Mock::with_config(config).await;
    mock.script(
        json!([{"content": "one two three four five six seven eight nine ten eleven twelve"}]),
    )
    .await;
    let cancel = CancellationToken::new();
    let deepseek = mock.deepseek();
    let mut stream = deepseek.stream(body(&plain("count")), cancel.clone());
    let first = stream.next().await.unwrap().unwrap();
    assert!(matches!(first, StreamEvent::Delta(ChunkDelta::Text { .. })), "{first:?}");

    cancel.cancel();
    let next = tokio::time::timeout(Duration::from_millis(200), stream.next()).await.unwrap();
    assert_eq!(next, Some(Err(ProviderError::Cancelled)));
    assert_eq!(stream.next().await, None);

    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let outcome = mock.server.requests()[0].outcome.clone();
        if outcome == "aborted" {
            break;
        }
        assert!(Instant::now() < deadline, "the mock still sees the request as {outcome}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    mock.server.shutdown().await;
}

#[tokio::test]
async fn a_turn_stored_without_reasoning_still_passes_the_strict_passback_check() {
    let mock = Mock::start().await;
    let earlier = dsh_session::AssistantMessage {
        content: "Earlier answer.".to_owned(),
        reasoning_content: None,
        blocks: Vec::new(),
        tool_calls: vec![],
    };
    let request = request(
        call_config(MODEL, true),
        vec![tool("read_file")],
        vec![user("first"), Arc::new(Message::Assistant(earlier)), user("second")],
    );
    collect(&mock.deepseek(), body(&request)).await.expect_success();
    mock.server.shutdown().await;
}

/// A long conversation's body leaves the memo in pieces (its sealed prefix is shared, never
/// copied): the server receives exactly the bytes of `wire_body`, with a `Content-Length` and
/// no chunked encoding, on every step.
#[tokio::test]
async fn a_body_sent_in_pieces_arrives_whole_with_its_length() {
    let mock = Mock::start().await;
    let deepseek = mock.deepseek();
    let mut cache = dsh_provider::WireCache::new();
    let mut messages = Vec::new();
    for step in 0..3 {
        // Each step adds ~100 KB: the memo seals segments as it grows.
        messages.push(user(&format!("{step} {}", "a long line of text. ".repeat(5000))));
        let request = request(call_config(MODEL, false), vec![tool("read_file")], messages.clone());
        let (body, _) = cache.body(&request);
        assert!(step == 0 || body.parts().len() > 1, "step {step}: {} pieces", body.parts().len());
        collect(&deepseek, body.clone()).await.expect_success();
        let recorded = mock.server.requests().pop().unwrap();
        assert_eq!(recorded.body, wire_body(&request), "step {step}");
        let header = |name: &str| {
            recorded
                .headers
                .iter()
                .find(|(key, _)| key.eq_ignore_ascii_case(name))
                .map(|(_, value)| value.clone())
        };
        assert_eq!(header("content-length"), Some(body.len().to_string()));
        assert_eq!(header("transfer-encoding"), None);
    }
}
