//! Streamed and whole responses, directives, scripts and usage (docs/mock.md, "Answers" and
//! "Responses").

use dsh_mock::{MockConfig, UsagePlacement};
use serde_json::{Value, json};

use crate::support::*;

fn streamed(messages: Value) -> Value {
    json!({"model": "deepseek-v4-flash", "stream": true,
        "stream_options": {"include_usage": true}, "messages": messages})
}

#[tokio::test]
async fn a_thinking_text_stream_has_role_reasoning_content_and_final_frames() {
    let server = start(MockConfig::default()).await;
    let reply = chat(
        &server,
        &streamed(json!([{"role": "user", "content": "Explain caching, briefly please."}])),
    )
    .await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.headers["content-type"], "text/event-stream; charset=utf-8");
    assert_eq!(reply.headers["cache-control"], "no-cache");
    assert!(reply.headers.contains_key("x-request-id"));
    let body = reply.text();
    assert!(body.ends_with("data: [DONE]\n\n"));
    let events = events(&body);
    assert_eq!(events.last(), Some(&Event::Done));
    let chunks = chunks(&body);

    let first = &chunks[0];
    assert_eq!(
        first["choices"][0]["delta"],
        json!({"role": "assistant", "content": null, "reasoning_content": ""})
    );
    for chunk in &chunks {
        assert_eq!(chunk["id"], first["id"]);
        assert_eq!(chunk["created"], first["created"]);
        assert_eq!(chunk["object"], "chat.completion.chunk");
        assert_eq!(chunk["model"], "deepseek-v4-flash");
        assert_eq!(chunk["system_fingerprint"], "fp_fake");
        assert_eq!(chunk["choices"][0]["logprobs"], Value::Null);
    }
    assert_eq!(first["id"].as_str().unwrap().len(), 32);

    // Reasoning frames come before content frames, each with the other field null.
    let kinds: Vec<&str> = chunks[1..chunks.len() - 1]
        .iter()
        .map(|chunk| {
            let delta = &chunk["choices"][0]["delta"];
            match (&delta["reasoning_content"], &delta["content"]) {
                (Value::String(_), Value::Null) => "reasoning",
                (Value::Null, Value::String(_)) => "content",
                other => panic!("unexpected delta {other:?}"),
            }
        })
        .collect();
    let first_content = kinds.iter().position(|kind| *kind == "content").unwrap();
    assert!(first_content > 0);
    assert!(kinds[first_content..].iter().all(|kind| *kind == "content"));

    let last = chunks.last().unwrap();
    assert_eq!(last["choices"][0]["delta"], json!({"content": "", "reasoning_content": null}));
    assert_eq!(last["choices"][0]["finish_reason"], "stop");
    let (reasoning, content, calls) = reassemble(&chunks);
    assert_eq!(reasoning, "thinking about: Explain caching, briefly please.");
    assert_eq!(content, "ok: Explain caching, briefly please.");
    assert!(calls.is_empty());

    let usage = &last["usage"];
    let prompt = usage["prompt_tokens"].as_u64().unwrap();
    assert_eq!(
        prompt,
        usage["prompt_cache_hit_tokens"].as_u64().unwrap()
            + usage["prompt_cache_miss_tokens"].as_u64().unwrap()
    );
    assert_eq!(
        usage["total_tokens"].as_u64().unwrap(),
        prompt + usage["completion_tokens"].as_u64().unwrap()
    );
    assert_eq!(usage["prompt_tokens_details"]["cached_tokens"], usage["prompt_cache_hit_tokens"]);
    let reasoning_tokens = dsh_mock::count_tokens(&reasoning);
    assert_eq!(
        usage["completion_tokens_details"]["reasoning_tokens"].as_u64().unwrap(),
        reasoning_tokens
    );
    assert_eq!(
        usage["completion_tokens"].as_u64().unwrap(),
        reasoning_tokens + dsh_mock::count_tokens(&content) + 1
    );
    // One piece per delta by default.
    assert_eq!(kinds.len() as u64, reasoning_tokens + dsh_mock::count_tokens(&content));
}

#[tokio::test]
async fn thinking_off_starts_with_an_empty_content_role_frame_and_no_reasoning() {
    let server = start(MockConfig::default()).await;
    let mut body = streamed(json!([{"role": "user", "content": "hi"}]));
    body["thinking"] = json!({"type": "disabled"});
    let chunks = chunks(&chat(&server, &body).await.text());
    assert_eq!(chunks[0]["choices"][0]["delta"], json!({"role": "assistant", "content": ""}));
    let (reasoning, content, _) = reassemble(&chunks);
    assert_eq!(reasoning, "");
    assert_eq!(content, "ok: hi");
    assert_eq!(stream_usage(&chunks)["completion_tokens_details"]["reasoning_tokens"], 0);
}

#[tokio::test]
async fn parallel_tool_call_directives_stream_headers_then_fragments_that_reassemble_exactly() {
    let server = start(MockConfig::default()).await;
    let first_args =
        r#"{"path": "src/lib.rs", "range": {"start": 1, "end": [2, 3]}, "note": "héllo ✓"}"#;
    let second_args = r#"{"pattern":"fn main"}"#;
    let text = format!(
        "do it [[fake:tool read_file {first_args}]] and [[fake:tool grep {second_args}]][[fake:say Reading.]]"
    );
    let mut body = streamed(json!([{"role": "user", "content": text}]));
    body["tools"] = json!([tool("read_file"), tool("grep")]);
    let chunks = chunks(&chat(&server, &body).await.text());
    let (_, content, calls) = reassemble(&chunks);
    assert_eq!(content, "Reading.");
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].1, "read_file");
    assert_eq!(calls[0].2, first_args);
    assert_eq!(calls[1].1, "grep");
    assert_eq!(calls[1].2, second_args);
    for (index, (id, _, _)) in calls.iter().enumerate() {
        let prefix = format!("call_{index:02}_");
        assert!(id.starts_with(&prefix), "{id}");
        let tail = &id[prefix.len()..];
        assert_eq!(tail.len(), 24);
        assert!(tail.chars().all(|c| c.is_ascii_alphanumeric()));
    }

    // Headers carry the id, name and empty arguments; calls come one after another; every
    // argument fragment is at most 8 bytes.
    let mut order = Vec::new();
    for chunk in &chunks {
        for call in chunk["choices"][0]["delta"]["tool_calls"].as_array().into_iter().flatten() {
            let index = call["index"].as_u64().unwrap();
            if call.get("id").is_some() {
                assert_eq!(call["type"], "function");
                assert_eq!(call["function"]["arguments"], "");
                order.push(("header", index));
            } else {
                assert!(call["function"]["arguments"].as_str().unwrap().len() <= 8);
                order.push(("fragment", index));
            }
        }
    }
    let first_second = order.iter().position(|entry| entry.1 == 1).unwrap();
    assert_eq!(order[0], ("header", 0));
    assert_eq!(order[first_second], ("header", 1));
    assert!(order[first_second..].iter().all(|entry| entry.1 == 1));
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"][0]["finish_reason"], "tool_calls");

    // The tool result turns the loop back to echo mode.
    let (reasoning, _, _) = reassemble(&chunks);
    let mut next = body.clone();
    let messages = next["messages"].as_array_mut().unwrap();
    messages.push(json!({"role": "assistant", "content": content, "reasoning_content": reasoning,
        "tool_calls": calls.iter().map(|(id, name, args)| json!({"id": id, "type": "function",
            "function": {"name": name, "arguments": args}})).collect::<Vec<_>>()}));
    for (id, _, _) in &calls {
        messages.push(json!({"role": "tool", "tool_call_id": id, "content": "file text"}));
    }
    let reply = chat(&server, &next).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let chunks = crate::support::chunks(&reply.text());
    let (_, content, calls) = reassemble(&chunks);
    assert!(calls.is_empty());
    assert!(content.starts_with("ok: do it"));
}

#[tokio::test]
async fn both_usage_placements_report_the_same_usage() {
    let body = streamed(json!([{"role": "user", "content": "Same question twice."}]));
    let finish = start(MockConfig::default()).await;
    let finish_chunks = chunks(&chat(&finish, &body).await.text());
    let mut config = MockConfig::default();
    config.stream.usage_placement = UsagePlacement::SeparateChunk;
    let separate = start(config).await;
    let separate_chunks = chunks(&chat(&separate, &body).await.text());

    let finish_last = finish_chunks.last().unwrap();
    assert!(!finish_last["usage"].is_null());
    assert_eq!(finish_last["choices"][0]["finish_reason"], "stop");

    let usage_chunk = separate_chunks.last().unwrap();
    assert_eq!(usage_chunk["choices"], json!([]));
    let finish_chunk = &separate_chunks[separate_chunks.len() - 2];
    assert_eq!(finish_chunk["choices"][0]["finish_reason"], "stop");
    assert!(finish_chunk["usage"].is_null());
    assert!(
        separate_chunks[..separate_chunks.len() - 1].iter().all(|chunk| chunk["usage"].is_null())
    );

    assert_eq!(stream_usage(&finish_chunks), stream_usage(&separate_chunks));
}

#[tokio::test]
async fn a_non_streaming_response_is_one_completion_with_the_same_usage() {
    let server = start(MockConfig::default()).await;
    let mut body = json!({"model": "deepseek-v4-flash", "tools": [tool("read")], "messages": [
        {"role": "user", "content": "[[fake:tool read {\"path\":\"a\"}]] [[fake:think need the file]]"}]});
    let reply = chat(&server, &body).await;
    assert_eq!(reply.headers["content-type"], "application/json");
    let completion = reply.json();
    assert_eq!(completion["object"], "chat.completion");
    let choice = &completion["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls");
    assert_eq!(choice["message"]["role"], "assistant");
    assert_eq!(choice["message"]["reasoning_content"], "need the file");
    let call = &choice["message"]["tool_calls"][0];
    assert!(call.get("index").is_none());
    assert_eq!(call["function"]["arguments"], "{\"path\":\"a\"}");
    assert!(call["id"].as_str().unwrap().starts_with("call_00_"));

    // The same request streamed on a fresh server reports the same usage.
    let other = start(MockConfig::default()).await;
    body["stream"] = json!(true);
    let chunks = chunks(&chat(&other, &body).await.text());
    assert_eq!(stream_usage(&chunks), completion["usage"]);
}

#[tokio::test]
async fn the_same_request_sequence_gives_the_same_bytes() {
    let requests = [
        streamed(json!([{"role": "user", "content": "one"}])),
        json!({"model": "deepseek-v4-pro", "messages": [{"role": "user", "content": "two"}]}),
    ];
    let mut transcripts = Vec::new();
    for _ in 0..2 {
        let server = start(MockConfig::default()).await;
        let mut bytes = Vec::new();
        for request in &requests {
            bytes.push(chat(&server, request).await.body);
        }
        transcripts.push(bytes);
    }
    assert_eq!(transcripts[0], transcripts[1]);
    assert_ne!(transcripts[0][0], transcripts[0][1]);
}

#[tokio::test]
async fn scripts_answer_the_first_matching_request_once() {
    let server = start(MockConfig::default()).await;
    control(&server, "/_fake/script", &json!([
        {"match": {"last_user_contains": "weather"}, "content": "Sunny.", "reasoning": "Look outside.",
         "keepalive": {"count": 2, "interval_ms": 1}},
        {"match": {"nth": 3}, "content": "third", "tool_calls": [{"name": "read", "arguments": {"path": "x"}}]},
    ])).await;
    let first = chunks(
        &chat(&server, &streamed(json!([{"role": "user", "content": "hello"}]))).await.text(),
    );
    assert_eq!(reassemble(&first).1, "ok: hello");
    let reply =
        chat(&server, &streamed(json!([{"role": "user", "content": "the weather?"}]))).await;
    let events = events(&reply.text());
    assert_eq!(events[0], Event::Comment("keep-alive".to_owned()));
    assert_eq!(events[1], Event::Comment("keep-alive".to_owned()));
    let second = chunks(&reply.text());
    assert_eq!(reassemble(&second), ("Look outside.".to_owned(), "Sunny.".to_owned(), vec![]));
    let mut third_body = streamed(json!([{"role": "user", "content": "weather again"}]));
    third_body["tools"] = json!([tool("read")]);
    let third = chunks(&chat(&server, &third_body).await.text());
    let (_, content, calls) = reassemble(&third);
    assert_eq!(content, "third");
    assert_eq!(calls[0].2, "{\"path\":\"x\"}");
}

#[tokio::test]
async fn output_over_max_tokens_is_cut_with_finish_reason_length() {
    let server = start(MockConfig::default()).await;
    control(
        &server,
        "/_fake/script",
        &json!({"content": "one two three four five six seven eight nine ten"}),
    )
    .await;
    let mut body = streamed(json!([{"role": "user", "content": "count"}]));
    body["thinking"] = json!({"type": "disabled"});
    body["max_tokens"] = json!(3);
    let chunks = chunks(&chat(&server, &body).await.text());
    let (_, content, _) = reassemble(&chunks);
    // Three tokenizer pieces: "one", " two", " thr".
    assert_eq!(content, "one two thr");
    assert_eq!(chunks.last().unwrap()["choices"][0]["finish_reason"], "length");
    assert_eq!(stream_usage(&chunks)["completion_tokens"], 4);
}

#[tokio::test]
async fn several_pieces_per_delta_group_tokenizer_pieces() {
    let mut config = MockConfig::default();
    config.stream.piece_per_delta = 3;
    let server = start(config).await;
    let mut body =
        streamed(json!([{"role": "user", "content": "a fairly long sentence to echo back"}]));
    body["thinking"] = json!({"type": "disabled"});
    let chunks = chunks(&chat(&server, &body).await.text());
    let content = reassemble(&chunks).1;
    let expected_frames = dsh_mock::token_pieces(&content).len().div_ceil(3);
    assert_eq!(chunks.len(), 1 + expected_frames + 1);
}

#[tokio::test]
async fn usage_override_forces_reported_numbers() {
    let server = start(MockConfig::default()).await;
    control(
        &server,
        "/_fake/script",
        &json!({"content": "x", "usage_override": {"prompt_cache_hit_tokens": 256}}),
    )
    .await;
    let chunks =
        chunks(&chat(&server, &streamed(json!([{"role": "user", "content": "hi"}]))).await.text());
    assert_eq!(stream_usage(&chunks)["prompt_cache_hit_tokens"], 256);
}
