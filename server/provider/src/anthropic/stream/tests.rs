//! Tests of the Messages event decoder: a stream shaped like Anthropic's documented examples
//! (thinking with a signature, text, a tool call whose input is split mid-token, `ping`s
//! anywhere), usage mapping, errors, and the law that any chunking decodes the same.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use dsh_session::{AssistantMessage, ChunkDelta, ContentBlock, ToolCall, Usage};
use proptest::prelude::*;

use super::MessagesDecoder;
use crate::decoded::{Decoded, Finish};
use crate::sse::{SseDecoder, SseEvent};
use crate::{MessageAssembler, ProviderError};

/// A streamed tool-use turn with thinking, as Anthropic documents it (ids shortened); the
/// `input_json_delta` pieces cut `"path"` and the value mid-token, `ping`s come before,
/// between and inside blocks, and a second thinking block (interleaved thinking, its signature
/// in two pieces) comes between the two tool calls.
const STREAM: &str = r#"event: message_start
data: {"type":"message_start","message":{"id":"msg_01","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4-5","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":12,"cache_creation_input_tokens":300,"cache_read_input_tokens":2048,"output_tokens":1}}}

event: ping
data: {"type": "ping"}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"I need "}}

event: ping
data: {"type": "ping"}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"a.rs."}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQBCgIYAhIM1gbcDa9GJwZA2b3h"}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: content_block_start
data: {"type":"content_block_start","index":1,"content_block":{"type":"redacted_thinking","data":"EmwKAhgBEgy3va3pzix/LafPsn4a"}}

event: content_block_stop
data: {"type":"content_block_stop","index":1}

event: content_block_start
data: {"type":"content_block_start","index":2,"content_block":{"type":"text","text":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":2,"delta":{"type":"text_delta","text":"Reading it. ✓"}}

event: content_block_stop
data: {"type":"content_block_stop","index":2}

event: content_block_start
data: {"type":"content_block_start","index":3,"content_block":{"type":"tool_use","id":"toolu_01","name":"read_file","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":3,"delta":{"type":"input_json_delta","partial_json":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":3,"delta":{"type":"input_json_delta","partial_json":"{\"pa"}}

event: content_block_delta
data: {"type":"content_block_delta","index":3,"delta":{"type":"input_json_delta","partial_json":"th\": \"src/a"}}

event: content_block_delta
data: {"type":"content_block_delta","index":3,"delta":{"type":"input_json_delta","partial_json":".rs\"}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":3}

event: content_block_start
data: {"type":"content_block_start","index":4,"content_block":{"type":"thinking","thinking":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":4,"delta":{"type":"thinking_delta","thinking":"Also list."}}

event: content_block_delta
data: {"type":"content_block_delta","index":4,"delta":{"type":"signature_delta","signature":"Eq"}}

event: content_block_delta
data: {"type":"content_block_delta","index":4,"delta":{"type":"signature_delta","signature":"Zz=="}}

event: content_block_stop
data: {"type":"content_block_stop","index":4}

event: content_block_start
data: {"type":"content_block_start","index":5,"content_block":{"type":"tool_use","id":"toolu_02","name":"list","input":{}}}

event: content_block_stop
data: {"type":"content_block_stop","index":5}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":89}}

event: ping
data: {"type": "ping"}

event: message_stop
data: {"type":"message_stop"}

"#;

/// What the decoder yields for a whole stream, fed in the given pieces.
#[derive(Debug, PartialEq)]
struct Outcome {
    deltas: Vec<ChunkDelta>,
    pings: usize,
    end: Result<Finish, ProviderError>,
}

fn run(pieces: &[&[u8]]) -> Outcome {
    let mut sse = SseDecoder::new();
    let mut decoder = MessagesDecoder::new();
    let mut outcome = Outcome {
        deltas: Vec::new(),
        pings: 0,
        end: Err(ProviderError::StreamCut("no end".to_owned())),
    };
    for piece in pieces {
        for event in sse.feed(piece).unwrap() {
            let SseEvent::Data(data) = event else { continue };
            match decoder.decode(&data) {
                Ok(Decoded::Deltas(deltas)) => outcome.deltas.extend(deltas),
                Ok(Decoded::Ping) => outcome.pings += 1,
                Ok(Decoded::Done(finish)) => {
                    outcome.end = Ok(finish);
                    return outcome;
                }
                Err(error) => {
                    outcome.end = Err(error);
                    return outcome;
                }
            }
        }
    }
    outcome
}

#[test]
fn a_thinking_tool_turn_assembles_signature_redacted_block_and_verbatim_input() {
    let outcome = run(&[STREAM.as_bytes()]);
    assert_eq!(outcome.pings, 3);
    let finish = outcome.end.clone().unwrap();
    assert_eq!(finish.finish_reason, "tool_use");
    assert_eq!(
        finish.usage,
        Usage {
            prompt_tokens: 12 + 300 + 2048,
            cache_hit_tokens: 2048,
            cache_miss_tokens: 312,
            completion_tokens: 89,
            reasoning_tokens: 0,
            cache_write_tokens: 300,
        }
    );
    let mut assembler = MessageAssembler::new();
    outcome.deltas.iter().for_each(|delta| assembler.push(delta));
    assert_eq!(
        assembler.finish(),
        AssistantMessage {
            content: "Reading it. ✓".to_owned(),
            reasoning_content: Some("I need a.rs.Also list.".to_owned()),
            blocks: vec![
                ContentBlock::Thinking {
                    bytes: 12,
                    signature: "EqQBCgIYAhIM1gbcDa9GJwZA2b3h".to_owned()
                },
                ContentBlock::RedactedThinking { data: "EmwKAhgBEgy3va3pzix/LafPsn4a".to_owned() },
                ContentBlock::Text { bytes: "Reading it. ✓".len() as u64 },
                ContentBlock::ToolUse,
                ContentBlock::Thinking { bytes: 10, signature: "EqZz==".to_owned() },
                ContentBlock::ToolUse,
            ],
            tool_calls: vec![
                ToolCall {
                    id: "toolu_01".to_owned(),
                    name: "read_file".to_owned(),
                    arguments: "{\"path\": \"src/a.rs\"}".to_owned(),
                },
                ToolCall {
                    id: "toolu_02".to_owned(),
                    name: "list".to_owned(),
                    arguments: String::new()
                },
            ],
        }
    );
}

#[test]
fn llama_cpp_s_stream_without_pings_or_cache_writes_decodes() {
    // Measured from llama.cpp's `/v1/messages` (docs/providers.md): usage in message_start
    // without cache_creation, output only in message_delta.
    let stream = concat!(
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"chatcmpl-x\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"smollm2\",\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"cache_read_input_tokens\":24,\"input_tokens\":1,\"output_tokens\":0}}}\n\n",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n",
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
        "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"max_tokens\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":4}}\n\n",
        "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
    );
    let outcome = run(&[stream.as_bytes()]);
    assert_eq!(outcome.deltas, vec![ChunkDelta::Text { text: "Hi".to_owned() }]);
    let finish = outcome.end.unwrap();
    assert_eq!(finish.finish_reason, "max_tokens");
    assert_eq!(
        (finish.usage.prompt_tokens, finish.usage.cache_hit_tokens, finish.usage.cache_miss_tokens),
        (25, 24, 1)
    );
    assert_eq!((finish.usage.completion_tokens, finish.usage.cache_write_tokens), (4, 0));
}

#[test]
fn a_mid_stream_error_event_ends_the_stream_with_its_type() {
    let cut = STREAM
        .find("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":2")
        .unwrap();
    let stream = format!(
        "{}event: error\ndata: {{\"type\":\"error\",\"error\":{{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}}}\n\n",
        &STREAM[..cut]
    );
    let outcome = run(&[stream.as_bytes()]);
    let error = outcome.end.unwrap_err();
    assert_eq!(
        error,
        ProviderError::StreamError {
            error_type: "overloaded_error".to_owned(),
            message: "Overloaded".to_owned()
        }
    );
    assert!(error.is_retryable(), "an overload is retried (when nothing was yielded yet)");
    let invalid = ProviderError::StreamError {
        error_type: "invalid_request_error".to_owned(),
        message: "no".to_owned(),
    };
    assert!(!invalid.is_retryable());
    assert_eq!(
        error.to_string(),
        "the provider reported an error mid-stream: overloaded_error: Overloaded"
    );
}

#[test]
fn malformed_and_out_of_place_events_are_decode_errors() {
    let cases = [
        (
            "{\"type\":\"content_block_delta\",\"index\":7,\"delta\":{\"type\":\"text_delta\",\"text\":\"x\"}}",
            "a delta for content block 7, never started",
        ),
        ("{\"type\":\"message_stop\"}", "the message stopped without a stop reason"),
        (
            "{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"server_tool_use\",\"id\":\"s\",\"name\":\"web_search\",\"input\":{}}}",
            "a `server_tool_use` content block",
        ),
        ("{not json", "a stream event is not valid JSON"),
    ];
    for (data, want) in cases {
        let got = MessagesDecoder::new().decode(data).unwrap_err().to_string();
        assert!(got.contains(want), "{got}\n  wanted {want}");
    }
    let mut decoder = MessagesDecoder::new();
    decoder
        .decode("{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}")
        .unwrap();
    let got = decoder
        .decode("{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\"}}")
        .unwrap_err();
    assert!(got.to_string().contains("`input_json_delta` delta inside a block of another type"));
    // A refusal is an error-class finish; unknown events are skipped.
    let mut decoder = MessagesDecoder::new();
    assert_eq!(
        decoder.decode("{\"type\":\"future_event\",\"x\":1}").unwrap(),
        Decoded::Deltas(vec![])
    );
    decoder
        .decode("{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"refusal\"},\"usage\":{\"output_tokens\":1}}")
        .unwrap();
    let refusal = decoder.decode("{\"type\":\"message_stop\"}").unwrap_err();
    assert_eq!(refusal, ProviderError::FinishError { reason: "refusal".to_owned() });
    // A thinking block that never stopped never sent its signature: not a message to log.
    let mut decoder = MessagesDecoder::new();
    decoder
        .decode("{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}}")
        .unwrap();
    decoder
        .decode("{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":1}}")
        .unwrap();
    let open = decoder.decode("{\"type\":\"message_stop\"}").unwrap_err();
    assert!(open.to_string().contains("a thinking block still open"), "{open}");
}

#[test]
fn a_tool_input_given_whole_at_the_start_is_one_fragment() {
    let mut decoder = MessagesDecoder::new();
    let start = decoder
        .decode("{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"n\",\"input\":{\"a\":1}}}")
        .unwrap();
    assert_eq!(
        start,
        Decoded::Deltas(vec![ChunkDelta::ToolCall {
            index: 0,
            id: "t".to_owned(),
            name: "n".to_owned()
        }])
    );
    let stop = decoder.decode("{\"type\":\"content_block_stop\",\"index\":0}").unwrap();
    assert_eq!(
        stop,
        Decoded::Deltas(vec![ChunkDelta::ToolArgs { index: 0, fragment: "{\"a\":1}".to_owned() }])
    );
}

proptest! {
    #[test]
    fn any_chunking_of_a_valid_stream_decodes_the_same(
        cuts in proptest::collection::btree_set(0..STREAM.len(), 0..40),
        crlf in any::<bool>(),
    ) {
        let text = if crlf { STREAM.replace('\n', "\r\n") } else { STREAM.to_owned() };
        let bytes = text.as_bytes();
        let mut pieces = Vec::new();
        let mut start = 0;
        for cut in cuts.into_iter().filter(|&cut| cut < bytes.len()) {
            pieces.push(&bytes[start..cut]);
            start = cut;
        }
        pieces.push(&bytes[start..]);
        prop_assert_eq!(run(&pieces), run(&[STREAM.as_bytes()]));
    }
}
