//! Tests of the Anthropic Messages body: fixtures for the rules of docs/providers.md, the checks
//! before dispatch, and the laws (tool input round trip, append-extension of the blocks, at most
//! four breakpoints).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use dsh_session::{
    AssistantMessage, ContentBlock, EpochHeader, GenerateRequest, LlmCallConfig, Message,
    ProviderKind, ToolCall, WireFormat,
};
use expect_test::{Expect, expect};
use proptest::prelude::*;
use serde_json::{Value, json};

use super::{body, check, tool_input};
use crate::{WireCache, adapter_id, sha256_hex, wire_body};

use crate::test_support::{tool, tool_result, user};

fn config(thinking: bool) -> LlmCallConfig {
    LlmCallConfig {
        model: "claude-sonnet-4-5".to_owned(),
        profile: Some("claude".to_owned()),
        wire: Some(WireFormat { kind: ProviderKind::Anthropic, ..WireFormat::default() }),
        max_tokens: 8192,
        thinking,
        reasoning_effort: None,
        temperature: None,
        top_p: None,
        response_format: None,
    }
}

fn assistant(
    content: &str,
    reasoning: Option<(&str, Option<&str>)>,
    calls: &[(&str, &str, &str)],
) -> Arc<Message> {
    // Signed reasoning comes from a Messages stream: the layout the assembler records for one
    // thinking block, the text, then the calls.
    let mut blocks = Vec::new();
    if let Some((text, Some(signature))) = reasoning {
        blocks.push(ContentBlock::Thinking {
            bytes: text.len() as u64,
            signature: signature.to_owned(),
        });
        if !content.is_empty() {
            blocks.push(ContentBlock::Text { bytes: content.len() as u64 });
        }
        blocks.extend(calls.iter().map(|_| ContentBlock::ToolUse));
    }
    Arc::new(Message::Assistant(AssistantMessage {
        content: content.to_owned(),
        reasoning_content: reasoning.map(|(text, _)| text.to_owned()),
        blocks,
        tool_calls: calls
            .iter()
            .map(|(id, name, arguments)| ToolCall {
                id: (*id).to_owned(),
                name: (*name).to_owned(),
                arguments: (*arguments).to_owned(),
            })
            .collect(),
    }))
}

fn request(
    config: LlmCallConfig,
    system: Option<&str>,
    messages: Vec<Arc<Message>>,
) -> GenerateRequest {
    GenerateRequest {
        images: Default::default(),
        header: EpochHeader {
            config,
            system: system.map(str::to_owned),
            tools: Some(vec![tool("read"), tool("edit")]),
        },
        messages,
    }
}

/// The body's exact bytes, after checking that they are valid JSON and that the memoized path
/// writes the same. (Nothing parsed is printed: key order of a parsed value depends on whether
/// the build enables `serde_json/preserve_order`.)
fn golden(request: &GenerateRequest, expected: Expect) {
    let raw = wire_body(request);
    serde_json::from_slice::<Value>(&raw).unwrap();
    let (cached, sha256) = WireCache::new().body(request);
    assert_eq!(cached.to_vec(), raw);
    assert_eq!(sha256, sha256_hex(&raw));
    expected.assert_eq(&String::from_utf8(raw).unwrap());
}

#[test]
fn the_adapter_is_named_by_the_call_config() {
    assert_eq!(adapter_id(&config(false)), "anthropic-messages/v1");
}

#[test]
fn a_minimal_request_has_every_fixed_field_in_order() {
    let request = GenerateRequest {
        images: Default::default(),
        header: EpochHeader { config: config(false), system: None, tools: None },
        messages: vec![user("hi")],
    };
    golden(
        &request,
        expect![[
            r#"{"model":"claude-sonnet-4-5","max_tokens":8192,"messages":[{"role":"user","content":[{"type":"text","text":"hi","cache_control":{"type":"ephemeral"}}]}],"thinking":{"type":"disabled"},"stream":true}"#
        ]],
    );
}

#[test]
fn a_thinking_tool_turn_replays_signed_thinking_and_binds_results_to_their_calls() {
    let mut config = config(true);
    config.reasoning_effort = Some("high".to_owned());
    config.temperature = Some(1.0);
    let mut first = assistant(
        "Reading both.",
        Some(("I should read a.rs and b.rs.", Some("sig-1=="))),
        &[
            ("toolu_01", "read", "{\"path\": \"a.rs\"}"),
            ("toolu_02", "read", " {\"path\":\"b.rs\"}\n"),
        ],
    );
    if let Message::Assistant(message) = Arc::make_mut(&mut first) {
        let data = "EncryptedBlob+/=".to_owned();
        message.blocks.insert(1, ContentBlock::RedactedThinking { data });
    }
    let request = request(
        config,
        Some("You are dsh."),
        vec![
            user("look at a.rs and b.rs"),
            first,
            tool_result("toolu_01", "fn a() {}"),
            tool_result("toolu_02", ""),
            user("(steering) only a.rs matters"),
        ],
    );
    golden(
        &request,
        expect![[
            r#"{"model":"claude-sonnet-4-5","max_tokens":8192,"system":[{"type":"text","text":"You are dsh.","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":[{"type":"text","text":"look at a.rs and b.rs","cache_control":{"type":"ephemeral"}}]},{"role":"assistant","content":[{"type":"thinking","thinking":"I should read a.rs and b.rs.","signature":"sig-1=="},{"type":"redacted_thinking","data":"EncryptedBlob+/="},{"type":"text","text":"Reading both."},{"type":"tool_use","id":"toolu_01","name":"read","input":{"path": "a.rs"}},{"type":"tool_use","id":"toolu_02","name":"read","input":{"path":"b.rs"}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_01","content":"fn a() {}"},{"type":"tool_result","tool_use_id":"toolu_02","content":"(no output)"},{"type":"text","text":"(steering) only a.rs matters","cache_control":{"type":"ephemeral"}}]}],"tools":[{"name":"edit","description":"edit things","input_schema":{"properties":{"path":{"type":"string"}},"type":"object"}},{"name":"read","description":"read things","input_schema":{"properties":{"path":{"type":"string"}},"type":"object"},"cache_control":{"type":"ephemeral"}}],"thinking":{"type":"enabled","budget_tokens":4096},"output_config":{"effort":"high"},"temperature":1.0,"stream":true}"#
        ]],
    );
    assert_eq!(check(&request), Ok(()));
}

#[test]
fn thinking_off_sends_no_thinking_blocks_and_no_markers_when_the_profile_turns_them_off() {
    let mut config = config(false);
    if let Some(wire) = &mut config.wire {
        wire.no_cache_control = true;
    }
    let request = request(
        config,
        Some("sys"),
        vec![
            user("q"),
            assistant("", Some(("hidden", Some("sig"))), &[("t1", "read", "")]),
            tool_result("t1", "out"),
        ],
    );
    golden(
        &request,
        expect![[
            r#"{"model":"claude-sonnet-4-5","max_tokens":8192,"system":[{"type":"text","text":"sys"}],"messages":[{"role":"user","content":[{"type":"text","text":"q"}]},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"read","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"out"}]}],"tools":[{"name":"edit","description":"edit things","input_schema":{"properties":{"path":{"type":"string"}},"type":"object"}},{"name":"read","description":"read things","input_schema":{"properties":{"path":{"type":"string"}},"type":"object"}}],"thinking":{"type":"disabled"},"stream":true}"#
        ]],
    );
}

#[test]
fn the_fourth_breakpoint_marks_the_previous_requests_last_turn() {
    let request = request(
        config(true),
        Some("sys"),
        vec![
            user("q"),
            assistant("", Some(("r1", Some("s1"))), &[("t1", "read", "{}")]),
            tool_result("t1", "one"),
            assistant("", Some(("r2", Some("s2"))), &[("t2", "read", "{}")]),
            tool_result("t2", "two"),
        ],
    );
    let body: Value = serde_json::from_slice(&wire_body(&request)).unwrap();
    let marked: Vec<String> = marked_blocks(&body);
    assert_eq!(marked, ["tools[1]", "system[0]", "messages[2][0]", "messages[4][0]"]);
}

/// Where the `cache_control` markers are, as `tools[i]`, `system[i]`, `messages[t][b]`.
fn marked_blocks(body: &Value) -> Vec<String> {
    let mut marked = Vec::new();
    let has = |block: &Value| block.get("cache_control").is_some();
    for (name, list) in [("tools", &body["tools"]), ("system", &body["system"])] {
        for (index, block) in list.as_array().into_iter().flatten().enumerate() {
            if has(block) {
                marked.push(format!("{name}[{index}]"));
            }
        }
    }
    for (turn, message) in body["messages"].as_array().unwrap().iter().enumerate() {
        for (index, block) in message["content"].as_array().unwrap().iter().enumerate() {
            if has(block) {
                marked.push(format!("messages[{turn}][{index}]"));
            }
        }
    }
    marked
}

/// Models stream a lone "\n\n" text block before a tool call; the format refuses a
/// whitespace-only text block in every later request, so it is never sent — with or without a
/// logged block layout.
#[test]
fn whitespace_only_assistant_text_is_not_sent() {
    for reasoning in [None, Some(("Look first.", Some("sig-1")))] {
        let request = request(
            config(reasoning.is_some()),
            None,
            vec![
                user("q"),
                assistant("\n\n", reasoning, &[("t1", "read", "{}")]),
                tool_result("t1", "x"),
            ],
        );
        check(&request).unwrap();
        let body: Value = serde_json::from_slice(&wire_body(&request)).unwrap();
        let assistant_blocks = body["messages"][1]["content"].as_array().unwrap().clone();
        let kinds: Vec<&str> =
            assistant_blocks.iter().map(|block| block["type"].as_str().unwrap()).collect();
        let expected: &[&str] =
            if reasoning.is_some() { &["thinking", "tool_use"] } else { &["tool_use"] };
        assert_eq!(kinds, expected, "{assistant_blocks:?}");
    }
}

#[test]
fn requests_the_format_rejects_are_refused_before_dispatch() {
    let cases: Vec<(GenerateRequest, &str)> = vec![
        (
            request(config(false), None, vec![user("q"), tool_result("t9", "x")]),
            "turn 1 has a tool result for `t9`, which the assistant turn before it did not call",
        ),
        (
            request(config(false), None, vec![user("")]),
            "turn 1 has an empty or whitespace-only text block",
        ),
        (
            request(config(false), None, vec![user(" \n\t")]),
            "turn 1 has an empty or whitespace-only text block",
        ),
        (
            request(
                config(true),
                None,
                vec![
                    user("q"),
                    assistant("", Some(("unsigned", None)), &[("t1", "read", "{}")]),
                    tool_result("t1", "x"),
                ],
            ),
            "the last assistant message calls tools after reasoning that has no signature",
        ),
        (
            request(
                config(false),
                None,
                vec![
                    user("q"),
                    assistant("", None, &[("t1", "read", "[1]")]),
                    tool_result("t1", "x"),
                ],
            ),
            "tool call `t1` cannot be sent: its input is JSON but not an object",
        ),
        (
            request(
                config(false),
                None,
                vec![
                    user("q"),
                    assistant("", None, &[("t1", "read", "{\"a\":")]),
                    tool_result("t1", "x"),
                ],
            ),
            "tool call `t1` cannot be sent: its input is not JSON",
        ),
        (
            request(
                config(false),
                None,
                vec![
                    user("q"),
                    assistant("", None, &[("t1", "read", "{}"), ("t2", "read", "{}")]),
                    tool_result("t1", "x"),
                    user("go on"),
                ],
            ),
            "turn 3 does not answer tool call `t2`",
        ),
        (
            request(
                config(false),
                None,
                vec![user("q"), assistant("", None, &[("t1", "read", "{}")])],
            ),
            "the request ends with tool calls that have no results",
        ),
        (
            request(LlmCallConfig { max_tokens: 1024, ..config(true) }, None, vec![user("q")]),
            "the thinking budget (1024 tokens) must be below max_tokens (1024)",
        ),
    ];
    for (request, want) in cases {
        let got = check(&request).unwrap_err();
        assert!(got.starts_with(want), "{got}\n  wanted {want}");
    }
    // Unsigned reasoning on an *earlier* turn is simply not sent.
    let earlier = request(
        config(true),
        None,
        vec![
            user("q"),
            assistant("", Some(("unsigned", None)), &[("t1", "read", "{}")]),
            tool_result("t1", "x"),
            assistant("done", Some(("signed", Some("s"))), &[]),
            user("thanks"),
        ],
    );
    assert_eq!(check(&earlier), Ok(()));
    assert!(!String::from_utf8(body(&earlier)).unwrap().contains("unsigned"));
}

#[test]
fn adaptive_thinking_sends_no_budget_and_needs_none() {
    let mut config = config(true);
    config.max_tokens = 1024;
    if let Some(wire) = &mut config.wire {
        wire.adaptive_thinking = true;
    }
    let request = GenerateRequest {
        images: Default::default(),
        header: EpochHeader { config, system: None, tools: None },
        messages: vec![user("hi")],
    };
    golden(
        &request,
        expect![[
            r#"{"model":"claude-sonnet-4-5","max_tokens":1024,"messages":[{"role":"user","content":[{"type":"text","text":"hi","cache_control":{"type":"ephemeral"}}]}],"thinking":{"type":"adaptive"},"stream":true}"#
        ]],
    );
    assert_eq!(check(&request), Ok(()));
}

#[test]
fn interleaved_thinking_is_replayed_in_the_order_the_model_produced_it() {
    let message = AssistantMessage {
        content: "Reading.".to_owned(),
        reasoning_content: Some("First a.rs.Then b.rs.".to_owned()),
        blocks: vec![
            ContentBlock::Thinking { bytes: 11, signature: "s1".to_owned() },
            ContentBlock::Text { bytes: 8 },
            ContentBlock::ToolUse,
            ContentBlock::Thinking { bytes: 10, signature: "s2".to_owned() },
            ContentBlock::ToolUse,
        ],
        tool_calls: vec![
            ToolCall { id: "t1".to_owned(), name: "read".to_owned(), arguments: "{}".to_owned() },
            ToolCall { id: "t2".to_owned(), name: "read".to_owned(), arguments: String::new() },
        ],
    };
    let messages = vec![
        user("q"),
        Arc::new(Message::Assistant(message.clone())),
        tool_result("t1", "a"),
        tool_result("t2", "b"),
    ];
    let on = request(config(true), None, messages.clone());
    assert_eq!(check(&on), Ok(()));
    let body: Value = serde_json::from_slice(&wire_body(&on)).unwrap();
    let kinds: Vec<String> = body["messages"][1]["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|block| match block["type"].as_str().unwrap() {
            "thinking" => format!("thinking {} {}", block["thinking"], block["signature"]),
            "tool_use" => format!("tool_use {}", block["id"]),
            other => format!("{other} {}", block["text"]),
        })
        .collect();
    assert_eq!(
        kinds,
        [
            r#"thinking "First a.rs." "s1""#,
            r#"text "Reading.""#,
            r#"tool_use "t1""#,
            r#"thinking "Then b.rs." "s2""#,
            r#"tool_use "t2""#,
        ]
    );
    // Thinking off: the order of text and calls stays, the thinking blocks go.
    let off = request(config(false), None, messages.clone());
    let body: Value = serde_json::from_slice(&wire_body(&off)).unwrap();
    assert_eq!(body["messages"][1]["content"].as_array().unwrap().len(), 3);
    // A layout that does not fit the message (an edited log) is refused, naming the message.
    let mut broken = message;
    broken.blocks[3] = ContentBlock::Thinking { bytes: 99, signature: "s2".to_owned() };
    let mut messages = messages;
    messages[1] = Arc::new(Message::Assistant(broken));
    let error = check(&request(config(true), None, messages)).unwrap_err();
    assert!(error.starts_with("message 2 has a block layout that does not fit"), "{error}");
}

// --- Laws -----------------------------------------------------------------------------------

/// Text a user or a model could send: never whitespace only (the daemon refuses such a prompt,
/// the loop never logs such an answer, and the format refuses such a block).
fn text() -> impl Strategy<Value = String> {
    prop_oneof!["[a-z ]{1,12}", "\\PC{1,8}", Just("line\nbreak \"quoted\" \\ tab\t".to_owned()),]
        .prop_filter("whitespace only", |text| !text.trim().is_empty())
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        "\\PC{0,6}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            proptest::collection::btree_map("[a-z]{1,4}", inner, 0..4)
                .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

fn object() -> impl Strategy<Value = serde_json::Map<String, Value>> {
    proptest::collection::btree_map("[a-z_]{1,6}", json_value(), 0..4)
        .prop_map(|map| map.into_iter().collect())
}

/// A conversation the loop could have built: user text, then assistant turns whose calls are
/// all answered, sometimes with steering joining the results.
fn conversation() -> impl Strategy<Value = Vec<Arc<Message>>> {
    let step = (
        text(),
        proptest::option::of((text(), "[A-Za-z0-9+/=]{4,16}")),
        proptest::collection::vec((object(), text()), 0..3),
        proptest::option::of(text()),
    );
    (text(), proptest::collection::vec(step, 0..5)).prop_map(|(first, steps)| {
        let mut messages = vec![user(&first)];
        let mut call = 0;
        for (content, reasoning, calls, steering) in steps {
            let ids: Vec<String> = calls
                .iter()
                .map(|_| {
                    call += 1;
                    format!("toolu_{call:03}")
                })
                .collect();
            let arguments: Vec<String> =
                calls.iter().map(|(input, _)| Value::Object(input.clone()).to_string()).collect();
            let listed: Vec<(&str, &str, &str)> = ids
                .iter()
                .zip(&arguments)
                .map(|(id, args)| (id.as_str(), "read", args.as_str()))
                .collect();
            let reasoning = reasoning
                .as_ref()
                .map(|(text, signature)| (text.as_str(), Some(signature.as_str())));
            messages.push(assistant(&content, reasoning, &listed));
            for (id, (_, output)) in ids.iter().zip(&calls) {
                messages.push(tool_result(id, output));
            }
            if calls.is_empty() || steering.is_some() {
                messages.push(user(&steering.unwrap_or_else(|| "next".to_owned())));
            }
        }
        messages
    })
}

/// The body's blocks in the cache's order (tools, system, then each turn's blocks, marked by
/// their role), without the `cache_control` markers.
fn cache_prefix(body: &[u8]) -> Vec<Value> {
    let mut body: Value = serde_json::from_slice(body).unwrap();
    let mut blocks = Vec::new();
    let mut strip = |mut block: Value, tag: &str| {
        block.as_object_mut().unwrap().remove("cache_control");
        blocks.push(json!([tag, block]));
    };
    for tool in body["tools"].as_array().cloned().unwrap_or_default() {
        strip(tool, "tool");
    }
    for block in body["system"].as_array().cloned().unwrap_or_default() {
        strip(block, "system");
    }
    for message in body["messages"].as_array_mut().unwrap().drain(..) {
        let role = message["role"].as_str().unwrap().to_owned();
        for block in message["content"].as_array().cloned().unwrap() {
            strip(block, &role);
        }
    }
    blocks
}

proptest! {
    #[test]
    fn tool_input_round_trips_through_the_body(input in object(), pad in "[ \n\t]{0,3}") {
        let text = format!("{pad}{}{pad}", Value::Object(input.clone()));
        let request = request(
            config(false),
            None,
            vec![user("q"), assistant("", None, &[("t1", "read", &text)]), tool_result("t1", "x")],
        );
        prop_assert_eq!(check(&request), Ok(()));
        let body: Value = serde_json::from_slice(&wire_body(&request)).unwrap();
        let sent = &body["messages"][1]["content"][0]["input"];
        prop_assert_eq!(sent, &Value::Object(input));
        // The text in the body is the streamed text itself, trimmed: streaming it back (as the
        // mock does, from the recorded body) gives the stored text again.
        let raw = String::from_utf8(wire_body(&request)).unwrap();
        let trimmed = tool_input(&text).unwrap();
        let expected = format!("\"input\":{trimmed}}}");
        prop_assert!(raw.contains(&expected));
        prop_assert_eq!(tool_input(trimmed).unwrap(), trimmed);
    }

    #[test]
    fn every_body_is_valid_checked_json_with_at_most_four_breakpoints(
        messages in conversation(), thinking in any::<bool>(), system in proptest::option::of(text()),
    ) {
        let request = request(config(thinking), system.as_deref(), messages);
        prop_assert_eq!(check(&request), Ok(()));
        let raw = wire_body(&request);
        let body: Value = serde_json::from_slice(&raw).unwrap();
        prop_assert!(marked_blocks(&body).len() <= 4);
        let roles: Vec<&str> = body["messages"].as_array().unwrap().iter().map(|m| m["role"].as_str().unwrap()).collect();
        prop_assert!(roles.windows(2).all(|pair| pair[0] != pair[1]), "{:?}", roles);
        prop_assert_eq!(roles.first().copied(), Some("user"));
    }

    #[test]
    fn a_longer_conversation_extends_the_cached_prefix(
        messages in conversation(), cut in any::<prop::sample::Index>(), thinking in any::<bool>(),
    ) {
        let shorter = cut.index(messages.len()) + 1;
        let before = request(config(thinking), Some("sys"), messages[..shorter].to_vec());
        let after = request(config(thinking), Some("sys"), messages);
        let before = cache_prefix(&wire_body(&before));
        let after = cache_prefix(&wire_body(&after));
        prop_assert_eq!(&after[..before.len()], &before[..]);
    }

    #[test]
    fn the_memoized_body_always_equals_the_body(
        messages in conversation(),
        steps in proptest::collection::vec((any::<prop::sample::Index>(), 0u8..8), 1..16),
    ) {
        use sha2::Digest as _;
        // Requests over growing, sometimes shrinking or rewritten prefixes of one conversation,
        // with the header sometimes changed: the memo must never differ from a fresh body.
        let mut cache = WireCache::new();
        let mut length = 1;
        let mut header = request(config(true), Some("sys"), Vec::new()).header;
        for (at, action) in steps {
            let mut current: Vec<Arc<Message>> = messages[..length].to_vec();
            match action {
                0 => length = at.index(messages.len()) + 1,
                1 => header.config.thinking = !header.config.thinking,
                2 => {
                    if let Some(wire) = &mut header.config.wire {
                        wire.no_cache_control = !wire.no_cache_control;
                    }
                }
                3 => {
                    let position = at.index(current.len());
                    current[position] = user("rewritten");
                }
                _ => length = (length + 1 + at.index(3)).min(messages.len()),
            }
            if action != 3 {
                current = messages[..length].to_vec();
            }
            let request = GenerateRequest { images: Default::default(), header: header.clone(), messages: current };
            let (memoized, sha) = cache.body(&request);
            let fresh = wire_body(&request);
            prop_assert_eq!(&memoized.to_vec(), &fresh);
            let digest: String =
                sha2::Sha256::digest(&fresh).iter().map(|b| format!("{b:02x}")).collect();
            prop_assert_eq!(sha, digest);
        }
    }
}

/// A long conversation serialized at once (its rest hashed on a second thread) is the body
/// `wire_body` writes, with its sha256, whether the memo was empty or held its start.
#[test]
fn a_long_conversation_serialized_at_once_equals_the_body() {
    let messages: Vec<Arc<Message>> = (0..90)
        .map(|n| {
            let text = format!("{n}: {}", "the \"cache\"\n\tprefix é ".repeat(500 + n * 25));
            if n % 2 == 0 { user(&text) } else { assistant(&text, None, &[]) }
        })
        .collect();
    let whole = request(config(false), Some("sys"), messages.clone());
    let expected = wire_body(&whole);
    assert!(expected.len() > 3 * 1024 * 1024, "not long enough to be hashed apart");
    for held in [0, 9] {
        let mut cache = WireCache::new();
        if held > 0 {
            let _ = cache.body(&request(config(false), Some("sys"), messages[..held].to_vec()));
        }
        let (body, sha) = cache.body(&whole);
        assert!(body.to_vec() == expected, "holding {held}: the body differs from wire_body");
        assert_eq!(sha, sha256_hex(&expected), "holding {held}");
    }
}

#[test]
fn images_are_base64_image_blocks_after_the_text_and_in_tool_results() {
    let (image, images) = crate::test_support::png();
    let mut request = request(
        config(false),
        None,
        vec![
            Arc::new(Message::User { content: "look".to_owned(), images: vec![image.clone()] }),
            assistant("", None, &[("toolu_1", "read", r#"{"path":"a.png"}"#)]),
            Arc::new(Message::Tool {
                call_id: "toolu_1".to_owned(),
                content: "a.png (image/png)".to_owned(),
                images: vec![image.clone()],
            }),
            Arc::new(Message::User { content: String::new(), images: vec![image] }),
        ],
    );
    request.images = images;
    assert_eq!(crate::check_request(&request), Ok(()));
    golden(
        &request,
        expect![[
            r#"{"model":"claude-sonnet-4-5","max_tokens":8192,"messages":[{"role":"user","content":[{"type":"text","text":"look"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgoAAAANSUhEUg=="},"cache_control":{"type":"ephemeral"}}]},{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"read","input":{"path":"a.png"}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"a.png (image/png)"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgoAAAANSUhEUg=="}}]},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgoAAAANSUhEUg=="},"cache_control":{"type":"ephemeral"}}]}],"tools":[{"name":"edit","description":"edit things","input_schema":{"properties":{"path":{"type":"string"}},"type":"object"}},{"name":"read","description":"read things","input_schema":{"properties":{"path":{"type":"string"}},"type":"object"},"cache_control":{"type":"ephemeral"}}],"thinking":{"type":"disabled"},"stream":true}"#
        ]],
    );
}
