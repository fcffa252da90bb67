//! Tests of the chat-completions body: fixtures for the rules of docs/providers.md, the
//! append-extension property, and `WireCache` equal to `wire_body`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use dsh_session::{
    AssistantMessage, EpochHeader, GenerateRequest, LlmCallConfig, Message, ToolCall,
};
use expect_test::{Expect, expect};
use proptest::prelude::*;
use serde_json::json;

use crate::wire_body;

use crate::test_support::{tool, tool_result, user};

fn config(thinking: bool) -> LlmCallConfig {
    LlmCallConfig {
        model: "deepseek-v4-flash".to_owned(),
        profile: None,
        wire: None,
        max_tokens: 4096,
        thinking,
        reasoning_effort: None,
        temperature: None,
        top_p: None,
        response_format: None,
    }
}

fn assistant(content: &str, reasoning: Option<&str>, calls: &[(&str, &str, &str)]) -> Arc<Message> {
    Arc::new(Message::Assistant(AssistantMessage {
        content: content.to_owned(),
        reasoning_content: reasoning.map(str::to_owned),
        blocks: Vec::new(),
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

fn check(request: &GenerateRequest, expected: Expect) {
    let body = wire_body(request);
    let text = String::from_utf8(body.clone()).unwrap();
    // Every body is valid JSON.
    serde_json::from_slice::<serde_json::Value>(&body).unwrap();
    expected.assert_eq(&text);
}

#[test]
fn a_minimal_request_has_every_fixed_field_in_order() {
    let request = GenerateRequest {
        images: Default::default(),
        header: EpochHeader { config: config(false), system: None, tools: None },
        messages: vec![user("hi")],
    };
    check(
        &request,
        expect![[
            r#"{"model":"deepseek-v4-flash","messages":[{"role":"user","content":"hi"}],"thinking":{"type":"disabled"},"max_tokens":4096,"stream":true,"stream_options":{"include_usage":true}}"#
        ]],
    );
}

#[test]
fn optional_scalars_follow_thinking_in_fixed_order() {
    let mut config = config(true);
    config.reasoning_effort = Some("max".to_owned());
    config.temperature = Some(0.7);
    config.top_p = Some(1.0);
    let request = GenerateRequest {
        images: Default::default(),
        header: EpochHeader { config, system: Some("Be brief.".to_owned()), tools: None },
        messages: vec![user("hi")],
    };
    check(
        &request,
        expect![[
            r#"{"model":"deepseek-v4-flash","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"hi"}],"thinking":{"type":"enabled"},"reasoning_effort":"max","max_tokens":4096,"temperature":0.7,"top_p":1.0,"stream":true,"stream_options":{"include_usage":true}}"#
        ]],
    );
}

#[test]
fn a_json_mode_is_asked_for_after_the_sampling_fields() {
    let mut config = config(false);
    config.temperature = Some(0.0);
    config.response_format = Some(dsh_session::ResponseFormat::JsonObject);
    let request = GenerateRequest {
        images: Default::default(),
        header: EpochHeader { config, system: None, tools: None },
        messages: vec![user("answer in json")],
    };
    check(
        &request,
        expect![[
            r#"{"model":"deepseek-v4-flash","messages":[{"role":"user","content":"answer in json"}],"thinking":{"type":"disabled"},"max_tokens":4096,"temperature":0.0,"response_format":{"type":"json_object"},"stream":true,"stream_options":{"include_usage":true}}"#
        ]],
    );
}

#[test]
fn a_thinking_tool_turn_passes_reasoning_back_on_every_assistant_message() {
    let request = GenerateRequest {
        images: Default::default(),
        header: EpochHeader {
            config: config(true),
            system: Some("sys".to_owned()),
            tools: Some(vec![tool("write_file"), tool("read_file")]),
        },
        messages: vec![
            user("read a.rs"),
            assistant(
                "",
                Some("need the file"),
                &[("call_00_a", "read_file", "{\"path\": \"a.rs\"}")],
            ),
            tool_result("call_00_a", ""),
            // A turn stored without reasoning still gets the key, as "".
            assistant("done", None, &[]),
            user("thanks"),
        ],
    };
    check(
        &request,
        expect![[
            r#"{"model":"deepseek-v4-flash","messages":[{"role":"system","content":"sys"},{"role":"user","content":"read a.rs"},{"role":"assistant","content":"","reasoning_content":"need the file","tool_calls":[{"id":"call_00_a","type":"function","function":{"name":"read_file","arguments":"{\"path\": \"a.rs\"}"}}]},{"role":"tool","tool_call_id":"call_00_a","content":"(no output)"},{"role":"assistant","content":"done","reasoning_content":""},{"role":"user","content":"thanks"}],"tools":[{"type":"function","function":{"name":"read_file","description":"read_file things","parameters":{"properties":{"path":{"type":"string"}},"type":"object"}}},{"type":"function","function":{"name":"write_file","description":"write_file things","parameters":{"properties":{"path":{"type":"string"}},"type":"object"}}}],"thinking":{"type":"enabled"},"max_tokens":4096,"stream":true,"stream_options":{"include_usage":true}}"#
        ]],
    );
}

#[test]
fn thinking_off_never_sends_reasoning() {
    let request = GenerateRequest {
        images: Default::default(),
        header: EpochHeader { config: config(false), system: None, tools: Some(vec![tool("ls")]) },
        messages: vec![
            user("go"),
            assistant("", Some("hmm"), &[("c1", "ls", "{}")]),
            tool_result("c1", "a\nb"),
        ],
    };
    check(
        &request,
        expect![[
            r#"{"model":"deepseek-v4-flash","messages":[{"role":"user","content":"go"},{"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function","function":{"name":"ls","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"a\nb"}],"tools":[{"type":"function","function":{"name":"ls","description":"ls things","parameters":{"properties":{"path":{"type":"string"}},"type":"object"}}}],"thinking":{"type":"disabled"},"max_tokens":4096,"stream":true,"stream_options":{"include_usage":true}}"#
        ]],
    );
}

#[test]
fn thinking_without_tools_sends_stored_reasoning_only() {
    let request = GenerateRequest {
        images: Default::default(),
        header: EpochHeader { config: config(true), system: None, tools: None },
        messages: vec![
            user("a"),
            assistant("b", Some("r"), &[]),
            user("c"),
            assistant("d", None, &[]),
            user("e"),
        ],
    };
    check(
        &request,
        expect![[
            r#"{"model":"deepseek-v4-flash","messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b","reasoning_content":"r"},{"role":"user","content":"c"},{"role":"assistant","content":"d"},{"role":"user","content":"e"}],"thinking":{"type":"enabled"},"max_tokens":4096,"stream":true,"stream_options":{"include_usage":true}}"#
        ]],
    );
}

#[test]
fn strings_are_escaped_and_arguments_are_never_reformatted() {
    let arguments = "{ \"b\":1,\n \"a\" : \"\\u00e9\" }";
    let request = GenerateRequest {
        images: Default::default(),
        header: EpochHeader { config: config(false), system: None, tools: Some(vec![tool("t")]) },
        messages: vec![
            user("quote \" backslash \\ tab \t nul \u{0} é 🙂 </script>"),
            assistant("", None, &[("c", "t", arguments)]),
            tool_result("c", "ok"),
        ],
    };
    let body = wire_body(&request);
    let parsed: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(parsed["messages"][1]["tool_calls"][0]["function"]["arguments"], arguments);
    assert_eq!(
        parsed["messages"][0]["content"],
        "quote \" backslash \\ tab \t nul \u{0} é 🙂 </script>"
    );
    check(
        &request,
        expect![[
            r#"{"model":"deepseek-v4-flash","messages":[{"role":"user","content":"quote \" backslash \\ tab \t nul \u0000 é 🙂 </script>"},{"role":"assistant","content":"","tool_calls":[{"id":"c","type":"function","function":{"name":"t","arguments":"{ \"b\":1,\n \"a\" : \"\\u00e9\" }"}}]},{"role":"tool","tool_call_id":"c","content":"ok"}],"tools":[{"type":"function","function":{"name":"t","description":"t things","parameters":{"properties":{"path":{"type":"string"}},"type":"object"}}}],"thinking":{"type":"disabled"},"max_tokens":4096,"stream":true,"stream_options":{"include_usage":true}}"#
        ]],
    );
}

#[test]
fn tools_sort_by_utf16_code_units_and_parallel_calls_keep_their_order() {
    let request = GenerateRequest {
        images: Default::default(),
        header: EpochHeader {
            config: config(false),
            system: None,
            tools: Some(vec![tool("b"), tool("a_2"), tool("A"), tool("a-1")]),
        },
        messages: vec![
            user("x"),
            assistant("Two calls.", None, &[("c1", "b", "{}"), ("c0", "a_2", "{}")]),
        ],
    };
    let parsed: serde_json::Value = serde_json::from_slice(&wire_body(&request)).unwrap();
    let names: Vec<&str> = parsed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| tool["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["A", "a-1", "a_2", "b"]);
    let ids: Vec<&str> = parsed["messages"][1]["tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|call| call["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["c1", "c0"]);
}

#[test]
fn system_messages_in_the_conversation_follow_the_header_system_prompt() {
    let request = GenerateRequest {
        images: Default::default(),
        header: EpochHeader { config: config(false), system: Some("head".to_owned()), tools: None },
        messages: vec![Arc::new(Message::System { content: "inner".to_owned() }), user("u")],
    };
    let parsed: serde_json::Value = serde_json::from_slice(&wire_body(&request)).unwrap();
    assert_eq!(parsed["messages"][0], json!({"role": "system", "content": "head"}));
    assert_eq!(parsed["messages"][1], json!({"role": "system", "content": "inner"}));
}

// ---- properties ----

fn text() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            Just('a'),
            Just(' '),
            Just('"'),
            Just('\\'),
            Just('\n'),
            Just('é'),
            Just('🙂'),
            Just('{')
        ],
        0..8,
    )
    .prop_map(|chars| chars.into_iter().collect())
}

fn message() -> impl Strategy<Value = Arc<Message>> {
    prop_oneof![
        text().prop_map(|content| Arc::new(Message::user(content))),
        (text(), proptest::option::of(text()), proptest::collection::vec((text(), text()), 0..3))
            .prop_map(|(content, reasoning_content, calls)| {
                Arc::new(Message::Assistant(AssistantMessage {
                    content,
                    reasoning_content,
                    blocks: Vec::new(),
                    tool_calls: calls
                        .into_iter()
                        .enumerate()
                        .map(|(i, (name, arguments))| ToolCall {
                            id: format!("call_{i:02}"),
                            name,
                            arguments,
                        })
                        .collect(),
                }))
            }),
        (text(), text()).prop_map(|(call_id, content)| Arc::new(Message::tool(call_id, content))),
    ]
}

fn header() -> impl Strategy<Value = EpochHeader> {
    (any::<bool>(), proptest::option::of(text()), proptest::collection::vec(text(), 0..3)).prop_map(
        |(thinking, system, tool_names)| {
            let tools = tool_names.iter().map(|name| tool(name)).collect();
            EpochHeader::new(config(thinking), system, tools)
        },
    )
}

/// The byte slices of the `messages` array elements.
fn message_slices(body: &[u8]) -> Vec<Vec<u8>> {
    #[derive(serde::Deserialize)]
    struct Body<'a> {
        #[serde(borrow)]
        messages: Vec<&'a serde_json::value::RawValue>,
    }
    let parsed: Body<'_> = serde_json::from_slice(body).unwrap();
    parsed.messages.iter().map(|raw| raw.get().as_bytes().to_vec()).collect()
}

proptest! {
    #[test]
    fn wire_body_is_deterministic_and_appending_messages_extends_the_array(
        header in header(),
        earlier in proptest::collection::vec(message(), 0..6),
        appended in proptest::collection::vec(message(), 0..6),
    ) {
        let first = GenerateRequest { images: Default::default(), header: header.clone(), messages: earlier.clone() };
        let first_body = wire_body(&first);
        prop_assert_eq!(&first_body, &wire_body(&first.clone()));

        let mut messages = earlier;
        messages.extend(appended);
        let second = GenerateRequest { images: Default::default(), header, messages };
        let first_slices = message_slices(&first_body);
        let second_slices = message_slices(&wire_body(&second));
        prop_assert!(first_slices.len() <= second_slices.len());
        prop_assert_eq!(&second_slices[..first_slices.len()], &first_slices[..]);
        // And the whole body up to the end of the first request's messages is a byte prefix.
        let open = b"\"messages\":[";
        let start = first_body.windows(open.len()).position(|window| window == open).unwrap() + open.len();
        let mut prefix = first_body[..start].to_vec();
        prefix.extend(first_slices.join(&b',').into_iter());
        prop_assert!(wire_body(&second).starts_with(&prefix));
    }
}

#[derive(Clone, Debug)]
enum Change {
    Append(Vec<Arc<Message>>),
    Rewrite(usize, Arc<Message>),
    Header(EpochHeader),
}

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        4 => proptest::collection::vec(message(), 0..4).prop_map(Change::Append),
        1 => (0usize..8, message()).prop_map(|(at, m)| Change::Rewrite(at, m)),
        1 => header().prop_map(Change::Header),
    ]
}

proptest! {
    #[test]
    fn the_wire_cache_always_equals_wire_body(
        first in header(),
        changes in proptest::collection::vec(change(), 1..12),
    ) {
        use sha2::Digest as _;
        let mut cache = crate::WireCache::new();
        let mut request = GenerateRequest { images: Default::default(), header: first, messages: Vec::new() };
        for change in changes {
            match change {
                Change::Append(messages) => request.messages.extend(messages),
                Change::Rewrite(at, message) if !request.messages.is_empty() => {
                    let at = at % request.messages.len();
                    request.messages[at] = message;
                }
                Change::Rewrite(_, message) => request.messages.push(message),
                Change::Header(header) => request.header = header,
            }
            let (body, sha) = cache.body(&request);
            let expected = wire_body(&request);
            prop_assert_eq!(&body.to_vec(), &expected);
            let digest: String =
                sha2::Sha256::digest(&expected).iter().map(|b| format!("{b:02x}")).collect();
            prop_assert_eq!(sha, digest);
        }
    }
}

/// A long conversation serialized at once (its rest hashed on a second thread) is the body
/// `wire_body` writes, with its sha256, whether the memo was empty or held its start.
#[test]
fn a_long_conversation_serialized_at_once_equals_wire_body() {
    let header = EpochHeader::new(config(false), Some("s".into()), Vec::new());
    let messages: Vec<Arc<Message>> = (0..120)
        .map(|n| {
            let content = format!("{n}: {}", "the \"cache\"\n\tprefix é ".repeat(200 + n * 13));
            if n % 2 == 0 {
                crate::test_support::user(&content)
            } else {
                crate::test_support::tool_result(&format!("call_{n}"), &content)
            }
        })
        .collect();
    let whole = GenerateRequest {
        images: Default::default(),
        header: header.clone(),
        messages: messages.clone(),
    };
    let expected = wire_body(&whole);
    assert!(expected.len() > 3 * 1024 * 1024, "not long enough to be hashed apart");
    for held in [0, 1, 7] {
        let mut cache = crate::WireCache::new();
        if held > 0 {
            let _ = cache.body(&GenerateRequest {
                images: Default::default(),
                header: header.clone(),
                messages: messages[..held].to_vec(),
            });
        }
        let (body, sha) = cache.body(&whole);
        assert!(body.to_vec() == expected, "holding {held}: the body differs from wire_body");
        assert_eq!(sha, crate::sha256_hex(&expected), "holding {held}");
    }
}

/// Bodies far longer than a sealed segment: `body` and `adopt` agree with `wire_body`,
/// and a body's pieces share the sealed prefix with the memo (no copy of it).
#[test]
fn long_bodies_are_pieces_of_the_memo_and_equal_wire_body() {
    let header = EpochHeader::new(config(false), Some("s".into()), Vec::new());
    let text = |n: usize| Arc::new(Message::user(format!("{n}: {}", "x\"y ".repeat(20_000))));
    let mut cache = crate::WireCache::new();
    let mut request = GenerateRequest {
        images: Default::default(),
        header: header.clone(),
        messages: Vec::new(),
    };
    let mut previous: Option<crate::WireBytes> = None;
    for n in 0..6 {
        request.messages.push(text(n));
        // A copy of the memo (as "what the model saw" takes the loop's) gives the same body.
        let mut copy = cache.clone();
        let copied = copy.adopt(&request).then(|| copy.body(&request));
        let (body, sha) = cache.body(&request);
        let expected = wire_body(&request);
        assert!(body.to_vec() == expected, "step {n}: the body differs from wire_body");
        assert_eq!(body.len(), expected.len());
        assert_eq!(sha, crate::sha256_hex(&expected));
        if let Some(copied) = copied {
            assert_eq!(copied, (body.clone(), sha.clone()), "the copy's body differs");
        }
        if let Some(previous) = previous {
            let shared = previous.parts()[..previous.parts().len() - 1]
                .iter()
                .zip(body.parts())
                .all(|(a, b)| a.as_ptr() == b.as_ptr());
            assert!(shared, "step {n}: the sealed prefix was copied");
        }
        previous = Some(body);
    }
    // A rebuilt request (equal messages, other allocations) extends the memo; adopting it makes
    // the next body compare pointers; one that does not extend it leaves it as it was.
    let rebuilt = GenerateRequest {
        images: Default::default(),
        header: header.clone(),
        messages: request.messages.iter().map(|m| Arc::new((**m).clone())).collect(),
    };
    assert!(cache.adopt(&rebuilt));
    let mut other = rebuilt.clone();
    other.messages[0] = text(99);
    assert!(!cache.adopt(&other));
    assert!(cache.body(&rebuilt).0.to_vec() == wire_body(&rebuilt));
}

#[test]
fn a_user_message_with_an_image_has_a_content_array_with_a_data_url() {
    let (image, images) = crate::test_support::png();
    let with_image = Arc::new(Message::User {
        content: "what is this?".to_owned(),
        images: vec![image.clone()],
    });
    let only_image = Arc::new(Message::User { content: String::new(), images: vec![image] });
    let request = GenerateRequest {
        images,
        header: EpochHeader { config: config(false), system: None, tools: None },
        messages: vec![user("hi"), with_image, only_image],
    };
    check(
        &request,
        expect![[
            r#"{"model":"deepseek-v4-flash","messages":[{"role":"user","content":"hi"},{"role":"user","content":[{"type":"text","text":"what is this?"},{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgoAAAANSUhEUg=="}}]},{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgoAAAANSUhEUg=="}}]}],"thinking":{"type":"disabled"},"max_tokens":4096,"stream":true,"stream_options":{"include_usage":true}}"#
        ]],
    );
    assert_eq!(crate::check_request(&request), Ok(()));
    // The same messages without the bytes: never sent, and never memoized.
    let unloaded = GenerateRequest { images: Default::default(), ..request.clone() };
    let problem = crate::check_request(&unloaded).unwrap_err();
    assert!(problem.contains("is not loaded"), "{problem}");
    let mut cache = crate::WireCache::new();
    let _ = cache.body(&unloaded);
    assert!(cache.is_empty(), "a body without its images' bytes is not memoized");
    assert_eq!(cache.body(&request).0.to_vec(), wire_body(&request));
}

#[test]
fn tool_result_images_follow_the_run_of_results_in_one_user_message() {
    let (image, images) = crate::test_support::png();
    let tool_image = |id: &str| {
        Arc::new(Message::Tool {
            call_id: id.to_owned(),
            content: format!("{id}.png: image/png"),
            images: vec![image.clone()],
        })
    };
    let calls = assistant("", None, &[("a", "read_file", "{}"), ("b", "read_file", "{}")]);
    let messages = vec![
        user("look"),
        calls,
        tool_image("a"),
        Arc::new(Message::tool("b".to_owned(), "no image".to_owned())),
        assistant("seen", None, &[]),
        user("and this one?"),
        assistant("", None, &[("c", "read_file", "{}")]),
        tool_image("c"),
    ];
    let request = GenerateRequest {
        images,
        header: EpochHeader { config: config(false), system: None, tools: None },
        messages,
    };
    // The `tool` messages keep strings; the images follow each run of results, before the
    // next message or at the end.
    check(
        &request,
        expect![[
            r#"{"model":"deepseek-v4-flash","messages":[{"role":"user","content":"look"},{"role":"assistant","content":"","tool_calls":[{"id":"a","type":"function","function":{"name":"read_file","arguments":"{}"}},{"id":"b","type":"function","function":{"name":"read_file","arguments":"{}"}}]},{"role":"tool","tool_call_id":"a","content":"a.png: image/png"},{"role":"tool","tool_call_id":"b","content":"no image"},{"role":"user","content":[{"type":"text","text":"Images of tool result a:"},{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgoAAAANSUhEUg=="}}]},{"role":"assistant","content":"seen"},{"role":"user","content":"and this one?"},{"role":"assistant","content":"","tool_calls":[{"id":"c","type":"function","function":{"name":"read_file","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":"c.png: image/png"},{"role":"user","content":[{"type":"text","text":"Images of tool result c:"},{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgoAAAANSUhEUg=="}}]}],"thinking":{"type":"disabled"},"max_tokens":4096,"stream":true,"stream_options":{"include_usage":true}}"#
        ]],
    );
    assert_eq!(crate::check_request(&request), Ok(()));
    // The memo, step by step (each request ending anywhere, a run of results included), writes
    // the same bytes as the whole body.
    let mut cache = crate::WireCache::new();
    for end in 1..=request.messages.len() {
        let step =
            GenerateRequest { messages: request.messages[..end].to_vec(), ..request.clone() };
        assert!(cache.body(&step).0.to_vec() == wire_body(&step), "request of {end} messages");
    }
}
