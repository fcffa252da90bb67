//! Endpoints and the validation order of chat requests (docs/mock.md, "Endpoints" and
//! "Validation").

use dsh_mock::{KeyConfig, MockConfig, PassbackRule};
use serde_json::{Value, json};

use crate::support::*;

fn user(text: &str) -> Value {
    json!({"model": "deepseek-v4-flash", "messages": [{"role": "user", "content": text}]})
}

#[tokio::test]
async fn unknown_paths_and_methods_get_a_404_error_body() {
    let server = start(MockConfig::default()).await;
    let reply = get(&server, "/nope", Some(KEY)).await;
    assert_eq!(reply.status, 404);
    assert_eq!(reply.headers["content-type"], "application/json");
    assert!(reply.json()["error"]["message"].is_string());
    let reply = get(&server, "/chat/completions", Some(KEY)).await;
    assert_eq!(reply.status, 404);
}

#[tokio::test]
async fn a_missing_or_unknown_key_is_401_naming_its_last_four_characters() {
    let server = start(MockConfig::default()).await;
    let body = user("hi").to_string().into_bytes();
    let reply = post_raw(&server, "/chat/completions", Some("sk-wrongabcd"), body.clone()).await;
    assert_eq!(reply.status, 401);
    let error = &reply.json()["error"];
    assert_eq!(error["message"], "Authentication Fails, Your api key: ****abcd is invalid");
    assert_eq!(error["type"], "authentication_error");
    assert_eq!(error["code"], "invalid_request_error");
    assert_eq!(error["param"], Value::Null);
    let reply = post_raw(&server, "/chat/completions", None, body).await;
    assert_eq!(reply.status, 401);
    assert_eq!(get(&server, "/models", None).await.status, 401);
}

#[tokio::test]
async fn authentication_is_checked_before_the_body_is_parsed() {
    let server = start(MockConfig::default()).await;
    let reply = post_raw(&server, "/chat/completions", Some("bad1"), b"{not json".to_vec()).await;
    assert_eq!(reply.status, 401);
}

#[tokio::test]
async fn a_body_that_is_not_json_is_400_with_the_parse_detail() {
    let server = start(MockConfig::default()).await;
    let reply =
        post_raw(&server, "/v1/chat/completions", Some(KEY), b"{\"model\": ".to_vec()).await;
    assert_eq!(reply.status, 400);
    assert!(reply.message().starts_with("Failed to parse the request body as JSON: "));
    assert_eq!(reply.json()["error"]["type"], "invalid_request_error");
}

#[tokio::test]
async fn fields_with_the_wrong_json_type_are_422_naming_the_field() {
    let server = start(MockConfig::default()).await;
    let messages = json!([{"role": "user", "content": "x"}]);
    let cases = [
        (
            json!({"model": "deepseek-v4-flash", "messages": messages, "thinking": true}),
            "thinking: expected struct ThinkingOptions",
        ),
        (
            json!({"model": "deepseek-v4-flash", "messages": messages, "thinking": {"type": "on"}}),
            "thinking.type",
        ),
        (
            json!({"model": "deepseek-v4-flash", "messages": messages, "reasoning_effort": 3}),
            "reasoning_effort",
        ),
        (json!({"model": "deepseek-v4-flash", "messages": "hello"}), "messages"),
        (
            json!({"model": "deepseek-v4-flash", "messages": messages, "max_tokens": "10"}),
            "max_tokens",
        ),
        (json!({"model": "deepseek-v4-flash", "messages": messages, "stop": 5}), "stop"),
        (
            json!({"model": "deepseek-v4-flash", "messages": messages, "tools": [{"type": "function", "function": {}}]}),
            "tools[0].function: missing field `name`",
        ),
        (
            json!({"model": "deepseek-v4-flash", "messages": [{"content": "x"}]}),
            "messages[0]: missing field `role`",
        ),
        (
            json!({"model": "deepseek-v4-flash", "messages": messages, "response_format": "json"}),
            "response_format: expected struct ResponseFormat",
        ),
        (
            json!({"model": "deepseek-v4-flash", "messages": messages, "response_format": {"type": "json_schema", "json_schema": {}}}),
            "response_format.type: unknown variant `json_schema`",
        ),
    ];
    for (body, expected) in cases {
        let reply = chat(&server, &body).await;
        assert_eq!(reply.status, 422, "{body}");
        assert!(reply.message().contains(expected), "{} lacks {expected}", reply.message());
        assert_eq!(reply.json()["error"]["type"], "invalid_request_error");
    }
}

#[tokio::test]
async fn semantic_errors_are_400_with_their_messages() {
    let server = start(MockConfig::default()).await;
    let flash = "deepseek-v4-flash";
    let call =
        json!({"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}});
    let many_tools: Vec<Value> = (0..129).map(|index| tool(&format!("t{index}"))).collect();
    let stops: Vec<String> = (0..17).map(|index| index.to_string()).collect();
    let cases = [
        (
            json!({"model": "gpt-4", "messages": [{"role": "user", "content": "x"}]}),
            "Model Not Exist",
        ),
        (json!({"model": flash, "messages": []}), "messages"),
        (json!({"model": flash, "messages": [{"role": "developer", "content": "x"}]}), "developer"),
        (
            json!({"model": flash, "messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}]}),
            "content must be a string",
        ),
        (
            json!({"model": flash, "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": null}]}),
            "content or tool_calls must be set",
        ),
        (
            json!({"model": flash, "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "", "tool_calls": [call]}, {"role": "tool", "tool_call_id": "zz", "content": "r"}]}),
            "tool_call_id `zz`",
        ),
        (
            json!({"model": flash, "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "", "tool_calls": [call]}, {"role": "user", "content": "y"}]}),
            "must be answered",
        ),
        (
            json!({"model": flash, "messages": [{"role": "user", "content": "x"}], "tools": many_tools}),
            "128",
        ),
        (
            json!({"model": flash, "messages": [{"role": "user", "content": "x"}], "tools": [{"type": "retrieval", "function": {"name": "a"}}]}),
            "function",
        ),
        (
            json!({"model": flash, "messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "bad name"}}]}),
            "bad name",
        ),
        (
            json!({"model": flash, "messages": [{"role": "user", "content": "x"}], "stop": stops}),
            "16",
        ),
        (
            json!({"model": flash, "messages": [{"role": "user", "content": "x"}], "reasoning_effort": "extreme"}),
            "reasoning_effort",
        ),
        (
            json!({"model": flash, "messages": [{"role": "user", "content": "x"}], "tools": [tool("read")], "tool_choice": "required"}),
            "Thinking mode does not support this tool_choice",
        ),
        (
            json!({"model": flash, "messages": [{"role": "user", "content": "x"}], "tools": [tool("read")], "tool_choice": {"type": "function", "function": {"name": "read"}}}),
            "Thinking mode does not support this tool_choice",
        ),
        (
            json!({"model": flash, "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}, {"role": "user", "content": "z"}], "tools": [tool("read")]}),
            "The `reasoning_content` in the thinking mode must be passed back to the API.",
        ),
        (
            json!({"model": "deepseek-chat", "messages": [{"role": "user", "content": "x"}], "max_tokens": 8193}),
            "8192",
        ),
        (
            json!({"model": flash, "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "json"}], "response_format": {"type": "json_object"}}),
            "Prompt must contain the word 'json'",
        ),
    ];
    for (body, expected) in cases {
        let reply = chat(&server, &body).await;
        assert_eq!(reply.status, 400, "{body}");
        assert!(reply.message().contains(expected), "{} lacks {expected}", reply.message());
        assert_eq!(reply.json()["error"]["type"], "invalid_request_error");
    }
}

#[tokio::test]
async fn the_passback_message_is_verbatim_and_an_empty_reasoning_counts_as_present() {
    let server = start(MockConfig::default()).await;
    let mut body = json!({"model": "deepseek-v4-flash", "tools": [tool("read")], "messages": [
        {"role": "user", "content": "x"},
        {"role": "assistant", "content": "y"},
        {"role": "user", "content": "z"},
    ]});
    let reply = chat(&server, &body).await;
    assert_eq!(
        reply.message(),
        "The `reasoning_content` in the thinking mode must be passed back to the API."
    );
    body["messages"][1]["reasoning_content"] = json!("");
    assert_eq!(chat(&server, &body).await.status, 200);
    // Without tools, or with thinking off, the passback is not required.
    let mut without_tools = body.clone();
    without_tools["messages"][1].as_object_mut().unwrap().remove("reasoning_content");
    without_tools.as_object_mut().unwrap().remove("tools");
    assert_eq!(chat(&server, &without_tools).await.status, 200);
}

#[tokio::test]
async fn tool_call_turns_strictness_only_checks_assistants_with_tool_calls() {
    let mut config = MockConfig::default();
    config.strictness.reasoning_passback = PassbackRule::ToolCallTurns;
    let server = start(config).await;
    let call =
        json!({"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}});
    let mut body = json!({"model": "deepseek-v4-flash", "tools": [tool("read")], "messages": [
        {"role": "user", "content": "x"},
        {"role": "assistant", "content": "plain answer"},
        {"role": "user", "content": "again"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "r"},
    ]});
    let reply = chat(&server, &body).await;
    assert_eq!(reply.status, 400);
    body["messages"][3]["reasoning_content"] = json!("because");
    assert_eq!(chat(&server, &body).await.status, 200);
}

#[tokio::test]
async fn a_prompt_over_the_context_window_names_the_maximum_context_length() {
    let server = start(MockConfig::default().with_model_limits(100, 50)).await;
    let long = "word ".repeat(200);
    let reply = chat(&server, &user(&long)).await;
    assert_eq!(reply.status, 400);
    assert!(
        reply.message().contains("maximum context length is 100 tokens"),
        "{}",
        reply.message()
    );
    // Prompt plus max_tokens counts too.
    let mut short = user("hi");
    short["max_tokens"] = json!(50);
    assert_eq!(chat(&server, &short).await.status, 200);
    // "hi" renders to 5 tokens: BOS, USER, "hi", ASSISTANT, THINK.
    short["max_tokens"] = json!(96);
    let reply = chat(&server, &short).await;
    assert!(reply.message().contains("maximum context length is 100 tokens"));
}

#[tokio::test]
async fn max_tokens_near_u64_max_is_over_the_context_not_an_overflow() {
    // prompt + max_tokens used to overflow: a panic in debug builds (the connection dropped
    // without an answer); in release the wrapped sum slipped past the context check.
    let server = start(MockConfig::default()).await;
    let mut body = user("x");
    body["max_tokens"] = json!(u64::MAX);
    let reply = chat(&server, &body).await;
    assert_eq!(reply.status, 400);
    assert!(reply.message().contains("maximum context length"), "{}", reply.message());
}

#[tokio::test]
async fn ignored_parameters_and_unknown_fields_do_not_error() {
    let server = start(MockConfig::default()).await;
    let mut body = user("hi");
    body["temperature"] = json!(1.7);
    body["top_p"] = json!(0.1);
    body["frequency_penalty"] = json!(1);
    body["presence_penalty"] = json!(1);
    body["some_future_field"] = json!({"a": 1});
    body["reasoning_effort"] = json!("medium");
    body["user_id"] = json!("u-1");
    body["response_format"] = json!({"type": "text"});
    assert_eq!(chat(&server, &body).await.status, 200);
}

#[tokio::test]
async fn json_mode_is_accepted_when_a_system_or_user_message_says_json() {
    let server = start(MockConfig::default()).await;
    for messages in [
        json!([{"role": "user", "content": "Answer in JSON."}]),
        json!([{"role": "system", "content": "Reply with a json object."}, {"role": "user", "content": "x"}]),
    ] {
        let body = json!({"model": "deepseek-v4-flash", "messages": messages, "response_format": {"type": "json_object"}});
        assert_eq!(chat(&server, &body).await.status, 200, "{body}");
    }
}

#[tokio::test]
async fn an_empty_balance_is_402_and_completed_requests_are_deducted() {
    let config = MockConfig {
        keys: vec![
            KeyConfig {
                key: "sk-broke".to_owned(),
                balance_cny: "0.00".to_owned(),
                concurrency: 1,
            },
            KeyConfig::default(),
        ],
        ..MockConfig::default()
    };
    let server = start(config).await;
    let body = user("hi").to_string().into_bytes();
    let reply = post_raw(&server, "/chat/completions", Some("sk-broke"), body).await;
    assert_eq!(reply.status, 402);
    assert_eq!(reply.message(), "Insufficient Balance");
    assert_eq!(reply.json()["error"]["type"], "unknown_error");

    let before = get(&server, "/user/balance", Some(KEY)).await.json();
    assert_eq!(before["is_available"], true);
    assert_eq!(before["balance_infos"][0]["total_balance"], "100.00");
    assert_eq!(before["balance_infos"][0]["currency"], "CNY");
    assert_eq!(chat(&server, &user(&"long prompt ".repeat(2000))).await.status, 200);
    let after = get(&server, "/user/balance", Some(KEY)).await.json();
    let left: f64 = after["balance_infos"][0]["total_balance"].as_str().unwrap().parse().unwrap();
    assert!(left < 100.0 && left > 99.0, "{left}");
}

#[tokio::test]
async fn requests_over_the_key_concurrency_limit_get_429() {
    let config = MockConfig {
        keys: vec![KeyConfig {
            key: KEY.to_owned(),
            balance_cny: "1.00".to_owned(),
            concurrency: 1,
        }],
        ..MockConfig::default()
    };
    let server = start(config).await;
    control(
        &server,
        "/_fake/fault",
        &json!({"stall_after_frames": 1, "keepalive_every_ms": 50, "for_ms": 60000}),
    )
    .await;
    let mut stream_body = user("hold the slot");
    stream_body["stream"] = json!(true);
    let held = client()
        .post(format!("{}/chat/completions", server.base_url()))
        .bearer_auth(KEY)
        .body(stream_body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(held.status().as_u16(), 200);
    let reply = chat(&server, &user("second")).await;
    assert_eq!(reply.status, 429);
    assert_eq!(reply.message(), "Rate Limit Reached");
    assert_eq!(reply.json()["error"]["type"], "rate_limit_error");
    drop(held);
    server.shutdown().await;
}

#[tokio::test]
async fn models_lists_the_configured_models() {
    let server = start(MockConfig::default().with_model_limits(1000, 100)).await;
    let reply = get(&server, "/v1/models", Some(KEY)).await;
    let list = reply.json();
    assert_eq!(list["object"], "list");
    let ids: Vec<&str> =
        list["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(
        ids,
        [
            "deepseek-v4-flash",
            "deepseek-v4-pro",
            "deepseek-flash",
            "deepseek-chat",
            "deepseek-reasoner",
            "mock-vision"
        ]
    );
    assert_eq!(list["data"][0]["owned_by"], "deepseek");
}

#[tokio::test]
async fn recorded_requests_keep_the_exact_body_bytes() {
    let server = start(MockConfig::default()).await;
    let body = b"{ \"messages\" :[ {\"content\":\"h\\u00e9llo  \\n\", \"role\":\"user\"}],\n\t\"model\":\"deepseek-v4-flash\" ,\"stream\":false }  ".to_vec();
    let reply = post_raw(&server, "/chat/completions", Some(KEY), body.clone()).await;
    assert_eq!(reply.status, 200);
    let rejected = b"{\"model\": 1}".to_vec();
    post_raw(&server, "/beta/chat/completions", Some(KEY), rejected.clone()).await;

    let records = get(&server, "/_fake/requests", None).await.json();
    use base64::Engine as _;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(records[0]["body_base64"].as_str().unwrap())
        .unwrap();
    assert_eq!(decoded, body);
    assert_eq!(records[0]["body"].as_str().unwrap().as_bytes(), body.as_slice());
    assert_eq!(records[0]["seq"], 1);
    assert_eq!(records[0]["outcome"], "ok");
    assert_eq!(records[0]["model"], "deepseek-v4-flash");
    let auth =
        records[0]["headers"].as_array().unwrap().iter().find(|h| h[0] == "authorization").unwrap();
    assert_eq!(auth[1], "Bearer ****test");
    assert_eq!(records[1]["path"], "/beta/chat/completions");
    assert_eq!(records[1]["status"], 422);
    assert_eq!(records[1]["outcome"], "rejected");

    let direct = server.requests();
    assert_eq!(direct[0].body, body);
    assert_eq!(direct[1].body, rejected);
    assert!(direct[0].prompt_tokens > 0);
    assert_eq!(direct[0].prompt_tokens, direct[0].hit + direct[0].miss);

    control(&server, "/_fake/reset", &json!({})).await;
    assert!(server.requests().is_empty());
}
