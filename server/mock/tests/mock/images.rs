//! Images (docs/mock.md, "Images"): a model that reads them takes `image_url` parts with a
//! `data:` URL on the chat endpoints and base64 `image` blocks on the Messages endpoints, and
//! counts each for 1 token plus one per started 1,000 bytes; other models answer 400.

use base64::Engine as _;
use serde_json::{Value, json};

use crate::support::{KEY, chat, client, start};
use dsh_mock::MockConfig;

/// A PNG signature padded to `length` bytes (the mock reads no further than the signature).
fn png(length: usize) -> String {
    let mut bytes = b"\x89PNG\r\n\x1a\n".to_vec();
    bytes.resize(length, 7);
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn with_image(model: &str, data: &str) -> Value {
    json!({"model": model, "stream": false, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "what is on this screenshot"},
        {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{data}")}}
    ]}]})
}

fn prompt_tokens(reply: &Value) -> u64 {
    reply["usage"]["prompt_tokens"].as_u64().unwrap()
}

#[tokio::test]
async fn a_vision_model_counts_an_image_by_the_documented_rule_on_the_chat_endpoint() {
    let server = start(MockConfig::default()).await;
    let text_only = chat(
        &server,
        &json!({"model": "mock-vision", "stream": false, "messages": [{"role": "user", "content": "what is on this screenshot"}]}),
    )
    .await;
    assert_eq!(text_only.status, 200, "{}", text_only.text());
    let image = chat(&server, &with_image("mock-vision", &png(2_500))).await;
    assert_eq!(image.status, 200, "{}", image.text());
    // 1 + ceil(2500 / 1000) = 4 tokens for the image.
    assert_eq!(prompt_tokens(&image.json()), prompt_tokens(&text_only.json()) + 4);
}

#[tokio::test]
async fn images_are_refused_for_a_model_without_them_and_when_they_are_not_images() {
    let server = start(MockConfig::default()).await;
    let reply = chat(&server, &with_image("deepseek-v4-flash", &png(100))).await;
    assert_eq!(reply.status, 400);
    assert!(reply.message().contains("content must be a string"), "{}", reply.text());
    let html = base64::engine::general_purpose::STANDARD.encode("<html></html>");
    let reply = chat(&server, &with_image("mock-vision", &html)).await;
    assert_eq!(reply.status, 400);
    assert!(reply.message().contains("not a valid image/png image"), "{}", reply.text());
}

async fn messages(server: &dsh_mock::MockServer, model: &str, block: Value) -> (u16, Value) {
    let body = json!({"model": model, "max_tokens": 100, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "look"}, block
    ]}]});
    let response = client()
        .post(format!("{}/v1/messages", server.base_url()))
        .header("x-api-key", KEY)
        .header("anthropic-version", "2023-06-01")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, serde_json::from_slice(&response.bytes().await.unwrap()).unwrap())
}

#[tokio::test]
async fn the_messages_endpoint_takes_base64_image_blocks_of_a_vision_model() {
    let server = start(MockConfig::default()).await;
    let block = |data: String| json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}});
    let (status, small) = messages(&server, "mock-vision", block(png(10))).await;
    assert_eq!(status, 200, "{small}");
    let (status, large) = messages(&server, "mock-vision", block(png(5_000))).await;
    assert_eq!(status, 200, "{large}");
    // 2 tokens for 10 bytes, 6 for 5,000.
    assert_eq!(
        large["usage"]["input_tokens"].as_u64().unwrap()
            + large["usage"]["cache_read_input_tokens"].as_u64().unwrap_or(0),
        small["usage"]["input_tokens"].as_u64().unwrap()
            + small["usage"]["cache_read_input_tokens"].as_u64().unwrap_or(0)
            + 4,
        "{small} {large}"
    );
    let (status, refused) = messages(&server, "deepseek-v4-flash", block(png(10))).await;
    assert_eq!(status, 400, "{refused}");
    assert!(refused.to_string().contains("does not support image input"), "{refused}");
    let url =
        json!({"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}});
    let (status, refused) = messages(&server, "mock-vision", url).await;
    assert_eq!(status, 400, "{refused}");
}

#[tokio::test]
async fn a_tool_message_on_the_chat_endpoint_takes_text_parts_but_no_image() {
    let server = start(MockConfig::default()).await;
    let with_tool = |parts: Value| {
        json!({"model": "mock-vision", "stream": false, "messages": [
            {"role": "user", "content": "read it"},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "read_file", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": parts},
        ]})
    };
    let text = json!([{"type": "text", "text": "shot.png: image/png"}]);
    let reply = chat(&server, &with_tool(text)).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let image = json!([{"type": "text", "text": "shot.png"},
        {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{}", png(100))}}]);
    let reply = chat(&server, &with_tool(image)).await;
    assert_eq!(reply.status, 400, "{}", reply.text());
    assert!(
        reply.message().contains("only allowed for messages with role 'user'"),
        "{}",
        reply.text()
    );
}
