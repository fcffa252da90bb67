//! Helpers shared by the integration tests: a client, request builders and an SSE reader.

use dsh_mock::{MockConfig, MockServer};
use serde_json::{Value, json};

pub const KEY: &str = "sk-test";

pub async fn start(config: MockConfig) -> MockServer {
    MockServer::start(config).await.expect("mock server starts")
}

pub fn client() -> reqwest::Client {
    // reqwest is built without a default crypto provider; plain HTTP still needs one installed.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder().build().expect("client builds")
}

/// A finished HTTP exchange.
pub struct Reply {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn text(&self) -> String {
        String::from_utf8(self.body.clone()).expect("utf-8 body")
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("json body")
    }

    /// The `error.message` of an error body.
    pub fn message(&self) -> String {
        self.json()["error"]["message"].as_str().expect("error message").to_owned()
    }
}

pub async fn post_raw(server: &MockServer, path: &str, key: Option<&str>, body: Vec<u8>) -> Reply {
    let mut request = client().post(format!("{}{path}", server.base_url())).body(body);
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    let response = request.send().await.expect("request is answered");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response.bytes().await.expect("whole body").to_vec();
    Reply { status, headers, body }
}

pub async fn chat(server: &MockServer, body: &Value) -> Reply {
    post_raw(server, "/chat/completions", Some(KEY), body.to_string().into_bytes()).await
}

pub async fn control(server: &MockServer, path: &str, body: &Value) -> Value {
    let reply = post_raw(server, path, None, body.to_string().into_bytes()).await;
    assert_eq!(reply.status, 200, "{}", String::from_utf8_lossy(&reply.body));
    reply.json()
}

pub async fn get(server: &MockServer, path: &str, key: Option<&str>) -> Reply {
    let mut request = client().get(format!("{}{path}", server.base_url()));
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    let response = request.send().await.expect("request is answered");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response.bytes().await.expect("whole body").to_vec();
    Reply { status, headers, body }
}

/// One parsed SSE event of a stream body.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    Comment(String),
    Data(Value),
    Malformed(String),
    Done,
}

/// Splits an SSE body into events (accepts `\n` and `\r\n` line ends).
pub fn events(body: &str) -> Vec<Event> {
    let normalised = body.replace("\r\n", "\n");
    normalised
        .split("\n\n")
        .filter(|block| !block.is_empty())
        .map(|block| {
            if let Some(comment) = block.strip_prefix(':') {
                Event::Comment(comment.trim().to_owned())
            } else if let Some(data) = block.strip_prefix("data: ") {
                if data == "[DONE]" {
                    Event::Done
                } else {
                    serde_json::from_str(data)
                        .map(Event::Data)
                        .unwrap_or_else(|_| Event::Malformed(data.to_owned()))
                }
            } else {
                panic!("unexpected SSE block {block:?}")
            }
        })
        .collect()
}

/// The data chunks of a stream body.
pub fn chunks(body: &str) -> Vec<Value> {
    events(body)
        .into_iter()
        .filter_map(|event| match event {
            Event::Data(value) => Some(value),
            _ => None,
        })
        .collect()
}

/// Reads a streaming response chunk by chunk; returns the chunks and whether the body ended
/// with an error (an aborted connection) rather than cleanly.
pub async fn read_stream(server: &MockServer, body: &Value) -> (Vec<Vec<u8>>, bool) {
    let mut response = client()
        .post(format!("{}/chat/completions", server.base_url()))
        .bearer_auth(KEY)
        .body(body.to_string())
        .send()
        .await
        .expect("request is answered");
    assert_eq!(response.status().as_u16(), 200);
    let mut pieces = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(bytes)) => pieces.push(bytes.to_vec()),
            Ok(None) => return (pieces, false),
            Err(_) => return (pieces, true),
        }
    }
}

/// The usage of a stream: the last non-null `usage` seen.
pub fn stream_usage(chunks: &[Value]) -> Value {
    chunks.iter().rev().find(|chunk| !chunk["usage"].is_null()).expect("usage")["usage"].clone()
}

/// Reassembles (reasoning, content, tool calls as (id, name, arguments)) from stream chunks.
pub fn reassemble(chunks: &[Value]) -> (String, String, Vec<(String, String, String)>) {
    let mut reasoning = String::new();
    let mut content = String::new();
    let mut calls: Vec<(String, String, String)> = Vec::new();
    for chunk in chunks {
        let Some(delta) = chunk["choices"].get(0).map(|choice| &choice["delta"]) else { continue };
        reasoning.push_str(delta["reasoning_content"].as_str().unwrap_or(""));
        content.push_str(delta["content"].as_str().unwrap_or(""));
        for call in delta["tool_calls"].as_array().into_iter().flatten() {
            let index = call["index"].as_u64().unwrap() as usize;
            if index == calls.len() {
                calls.push((
                    call["id"].as_str().unwrap().to_owned(),
                    call["function"]["name"].as_str().unwrap().to_owned(),
                    String::new(),
                ));
            }
            calls[index].2.push_str(call["function"]["arguments"].as_str().unwrap());
        }
    }
    (reasoning, content, calls)
}

/// A tool definition.
pub fn tool(name: &str) -> Value {
    json!({"type": "function", "function": {"name": name, "description": "a tool",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}})
}

/// A long English system prompt, so that prompts span several cache blocks.
pub fn long_system(tag: &str) -> String {
    let mut text = String::new();
    for line in 0..40 {
        text.push_str(&format!("Rule {line}: keep the prefix stable and append only. "));
    }
    text.push_str(tag);
    text
}
