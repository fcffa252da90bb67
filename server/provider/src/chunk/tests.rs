//! Tests of chunk decoding: the captured V4 sequence, usage mapping in both placements, finish reasons.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use dsh_session::{ChunkDelta, Usage};

use super::ChunkDecoder;
use crate::ProviderError;
use crate::decoded::{Decoded, Finish};

const ENVELOPE_START: &str = r#"{"id":"x","object":"chat.completion.chunk","created":1,"model":"deepseek-v4-flash","system_fingerprint":"fp","choices":["#;

fn chunk(choice: &str, usage: &str) -> String {
    format!(r#"{ENVELOPE_START}{choice}],"usage":{usage}}}"#)
}

fn delta(delta: &str) -> String {
    chunk(&format!(r#"{{"index":0,"delta":{delta},"logprobs":null,"finish_reason":null}}"#), "null")
}

fn finish(reason: &str, usage: &str) -> String {
    chunk(
        &format!(
            r#"{{"index":0,"delta":{{"content":"","reasoning_content":null}},"logprobs":null,"finish_reason":"{reason}"}}"#
        ),
        usage,
    )
}

/// The real V4 flash example (docs/providers.md, "Usage").
const USAGE: &str = r#"{"prompt_tokens":306,"completion_tokens":85,"total_tokens":391,"prompt_tokens_details":{"cached_tokens":256},"completion_tokens_details":{"reasoning_tokens":31},"prompt_cache_hit_tokens":256,"prompt_cache_miss_tokens":50}"#;

const EXPECTED_USAGE: Usage = Usage {
    prompt_tokens: 306,
    cache_hit_tokens: 256,
    cache_miss_tokens: 50,
    completion_tokens: 85,
    reasoning_tokens: 31,
    cache_write_tokens: 0,
};

fn deltas(decoder: &mut ChunkDecoder, data: &str) -> Vec<ChunkDelta> {
    match decoder.decode(data).unwrap() {
        Decoded::Deltas(deltas) => deltas,
        other => panic!("unexpected {other:?}"),
    }
}

fn done(decoder: &mut ChunkDecoder) -> Finish {
    match decoder.decode("[DONE]").unwrap() {
        Decoded::Done(finish) => finish,
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn the_captured_v4_thinking_tool_sequence_maps_to_deltas_in_order() {
    let mut decoder = ChunkDecoder::new();
    let mut all = Vec::new();
    for data in [
        delta(r#"{"role":"assistant","content":null,"reasoning_content":""}"#),
        delta(r#"{"content":null,"reasoning_content":"Let me"}"#),
        delta(r#"{"content":"Checking.","reasoning_content":null}"#),
        delta(
            r#"{"tool_calls":[{"index":0,"id":"call_00_abc","type":"function","function":{"name":"get_user_balance","arguments":""}}]}"#,
        ),
        delta(r#"{"tool_calls":[{"index":0,"function":{"arguments":"{\"us"}}]}"#),
        delta(r#"{"tool_calls":[{"index":0,"function":{"arguments":"er\":1}"}}]}"#),
        delta(
            r#"{"tool_calls":[{"index":1,"id":"call_01_def","type":"function","function":{"name":"ls","arguments":"{}"}}]}"#,
        ),
    ] {
        all.extend(deltas(&mut decoder, &data));
    }
    assert_eq!(deltas(&mut decoder, &finish("tool_calls", USAGE)), vec![]);
    let expected = vec![
        ChunkDelta::Reasoning { text: String::new() },
        ChunkDelta::Reasoning { text: "Let me".to_owned() },
        ChunkDelta::Text { text: "Checking.".to_owned() },
        ChunkDelta::ToolCall {
            index: 0,
            id: "call_00_abc".to_owned(),
            name: "get_user_balance".to_owned(),
        },
        ChunkDelta::ToolArgs { index: 0, fragment: "{\"us".to_owned() },
        ChunkDelta::ToolArgs { index: 0, fragment: "er\":1}".to_owned() },
        ChunkDelta::ToolCall { index: 1, id: "call_01_def".to_owned(), name: "ls".to_owned() },
        ChunkDelta::ToolArgs { index: 1, fragment: "{}".to_owned() },
    ];
    assert_eq!(all, expected);
    assert_eq!(
        done(&mut decoder),
        Finish { finish_reason: "tool_calls".to_owned(), usage: EXPECTED_USAGE }
    );
}

#[test]
fn usage_on_the_finish_chunk_and_on_a_separate_chunk_map_identically() {
    let mut on_finish = ChunkDecoder::new();
    deltas(&mut on_finish, &finish("stop", USAGE));
    let mut separate = ChunkDecoder::new();
    deltas(&mut separate, &finish("stop", "null"));
    deltas(&mut separate, &format!(r#"{{"id":"x","choices":[],"usage":{USAGE}}}"#));
    let expected = Finish { finish_reason: "stop".to_owned(), usage: EXPECTED_USAGE };
    assert_eq!(done(&mut on_finish), expected);
    assert_eq!(done(&mut separate), expected);
}

#[test]
fn usage_falls_back_to_cached_tokens_and_prompt_minus_hit() {
    let mut decoder = ChunkDecoder::new();
    let usage = r#"{"prompt_tokens":300,"completion_tokens":10,"prompt_tokens_details":{"cached_tokens":128}}"#;
    deltas(&mut decoder, &finish("stop", usage));
    let expected = Usage {
        prompt_tokens: 300,
        cache_hit_tokens: 128,
        cache_miss_tokens: 172,
        completion_tokens: 10,
        reasoning_tokens: 0,
        cache_write_tokens: 0,
    };
    assert_eq!(done(&mut decoder).usage, expected);
}

#[test]
fn the_latest_usage_seen_wins() {
    let mut decoder = ChunkDecoder::new();
    let early = r#"{"prompt_tokens":1,"completion_tokens":1}"#;
    deltas(
        &mut decoder,
        &chunk(r#"{"index":0,"delta":{"content":"a"},"finish_reason":null}"#, early),
    );
    deltas(&mut decoder, &finish("stop", USAGE));
    assert_eq!(done(&mut decoder).usage, EXPECTED_USAGE);
}

#[test]
fn length_is_a_normal_finish() {
    let mut decoder = ChunkDecoder::new();
    deltas(&mut decoder, &finish("length", USAGE));
    assert_eq!(done(&mut decoder).finish_reason, "length");
}

#[test]
fn error_class_finish_reasons_are_errors() {
    for reason in ["insufficient_system_resource", "content_filter"] {
        let error = ChunkDecoder::new().decode(&finish(reason, "null")).unwrap_err();
        assert_eq!(error, ProviderError::FinishError { reason: reason.to_owned() });
    }
}

#[test]
fn a_malformed_frame_is_a_decode_error() {
    let error = ChunkDecoder::new().decode(r#"{"id":"x","choices":[{"index":0,"del"#).unwrap_err();
    assert!(matches!(error, ProviderError::Decode(_)), "{error:?}");
}

#[test]
fn done_without_a_finish_reason_is_a_decode_error() {
    let mut decoder = ChunkDecoder::new();
    deltas(&mut decoder, &delta(r#"{"content":"hi"}"#));
    assert!(matches!(decoder.decode("[DONE]"), Err(ProviderError::Decode(_))));
}

#[test]
fn an_error_object_mid_stream_is_an_error() {
    let error = ChunkDecoder::new().decode(r#"{"error":{"message":"overloaded"}}"#).unwrap_err();
    assert!(error.to_string().contains("overloaded"), "{error}");
}

#[test]
fn empty_text_is_not_a_delta_but_empty_reasoning_is() {
    let mut decoder = ChunkDecoder::new();
    assert_eq!(deltas(&mut decoder, &delta(r#"{"role":"assistant","content":""}"#)), vec![]);
    assert_eq!(
        deltas(&mut decoder, &delta(r#"{"content":null,"reasoning_content":""}"#)),
        vec![ChunkDelta::Reasoning { text: String::new() }]
    );
}
